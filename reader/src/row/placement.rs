//! Where a probe's rows go: its `src_id`, its partition (= shard index) and its split.
//!
//! All three are pure functions of the canonical address text ([`super::addr`]), so
//! they are stable across runs, independent of the number of workers, and computable
//! from Python:
//!
//! * `src_id(text) = u64_le(blake3(text)[0..8])`
//! * `partition(text, shards) = src_id(text) % shards`
//! * `bucket = u64_le(blake3(seed_le_bytes(8) ‖ text)[0..8]) % 1_000_000`; the probe is
//!   in `test` if `bucket < test_fraction × 1_000_000`, else in `val` if
//!   `bucket < (test_fraction + val_fraction) × 1_000_000`, else in `train` (f64
//!   arithmetic and comparisons). Test membership depends only on the seed and
//!   `test_fraction`, so adding or resizing a val split moves probes between train and
//!   val only; with `val_fraction = 0` the rule is the two-way train/test split.

use std::net::IpAddr;

use crate::error::{Error, Result};

fn u64_le_prefix(hash: &blake3::Hash) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&hash.as_bytes()[..8]);
    u64::from_le_bytes(b)
}

/// `u64_le(blake3(text)[0..8])` over the canonical address text.
pub fn src_id_of_text(text: &str) -> u64 {
    u64_le_prefix(&blake3::hash(text.as_bytes()))
}

/// The probe id of an address (hash of its canonical text).
pub fn src_id(addr: &IpAddr) -> u64 {
    src_id_of_text(&addr.to_string())
}

/// The partition (shard index) of an address among `shards`.
pub fn partition(addr: &IpAddr, shards: u32) -> Result<u32> {
    if shards == 0 {
        return Err(Error::Input(
            "the number of shards must be at least 1".into(),
        ));
    }
    Ok((src_id(addr) % u64::from(shards)) as u32)
}

/// A dataset split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Split {
    Train,
    Val,
    Test,
}

impl Split {
    /// Every split, in the order a job writes them.
    pub const ALL: [Split; 3] = [Split::Train, Split::Val, Split::Test];

    pub fn as_str(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Val => "val",
            Split::Test => "test",
        }
    }
}

impl std::fmt::Display for Split {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Split {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "train" => Ok(Split::Train),
            "val" => Ok(Split::Val),
            "test" => Ok(Split::Test),
            other => Err(Error::Input(format!(
                "unknown split {other:?} (train, val or test)"
            ))),
        }
    }
}

/// The train/val/test assignment of a job: a seed and the test and val fractions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitRule {
    seed: u64,
    test_fraction: f64,
    val_fraction: f64,
}

impl SplitRule {
    /// Refuses fractions outside `0..=1` (NaN included) and fractions that add up to
    /// more than 1.
    pub fn new(seed: u64, test_fraction: f64, val_fraction: f64) -> Result<Self> {
        for (name, f) in [
            ("test_fraction", test_fraction),
            ("val_fraction", val_fraction),
        ] {
            if !(0.0..=1.0).contains(&f) {
                return Err(Error::Input(format!(
                    "{name} must be between 0 and 1, got {f}"
                )));
            }
        }
        if test_fraction + val_fraction > 1.0 {
            return Err(Error::Input(format!(
                "test_fraction + val_fraction must be at most 1, got {test_fraction} + \
                 {val_fraction}"
            )));
        }
        Ok(SplitRule {
            seed,
            test_fraction,
            val_fraction,
        })
    }

    /// The splits a job with this rule writes: train and test always (possibly empty),
    /// val only when `val_fraction > 0`.
    pub fn splits(&self) -> Vec<Split> {
        Split::ALL
            .into_iter()
            .filter(|&s| s != Split::Val || self.val_fraction > 0.0)
            .collect()
    }

    /// The probe's bucket in `0..1_000_000`.
    pub fn bucket(&self, addr: &IpAddr) -> u64 {
        let mut h = blake3::Hasher::new();
        h.update(&self.seed.to_le_bytes());
        h.update(addr.to_string().as_bytes());
        u64_le_prefix(&h.finalize()) % 1_000_000
    }

    pub fn split(&self, addr: &IpAddr) -> Split {
        let bucket = self.bucket(addr) as f64;
        if bucket < self.test_fraction * 1_000_000.0 {
            Split::Test
        } else if bucket < (self.test_fraction + self.val_fraction) * 1_000_000.0 {
            Split::Val
        } else {
            Split::Train
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn src_id_is_the_documented_hash() {
        let h = blake3::hash(b"192.0.2.1");
        let expected = u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap());
        assert_eq!(src_id(&a("192.0.2.1")), expected);
        assert_eq!(src_id_of_text("192.0.2.1"), expected);
        assert_eq!(
            partition(&a("192.0.2.1"), 64).unwrap() as u64,
            expected % 64
        );
        assert_eq!(partition(&a("192.0.2.1"), 1).unwrap(), 0);
        assert!(partition(&a("192.0.2.1"), 0).is_err());
    }

    #[test]
    fn partitions_spread_evenly() {
        let mut counts = [0u32; 8];
        for i in 0..8000u32 {
            let addr = IpAddr::from(i.to_be_bytes());
            counts[partition(&addr, 8).unwrap() as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (850..1150).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn split_follows_fraction_and_seed() {
        let none = SplitRule::new(17, 0.0, 0.0).unwrap();
        let all = SplitRule::new(17, 1.0, 0.0).unwrap();
        let tenth = SplitRule::new(17, 0.1, 0.0).unwrap();
        let other_seed = SplitRule::new(18, 0.1, 0.0).unwrap();
        let mut test = 0;
        let mut differ = 0;
        for i in 0..10_000u32 {
            let addr = IpAddr::from(i.to_be_bytes());
            assert_eq!(none.split(&addr), Split::Train);
            assert_eq!(all.split(&addr), Split::Test);
            test += (tenth.split(&addr) == Split::Test) as u32;
            differ += (tenth.split(&addr) != other_seed.split(&addr)) as u32;
        }
        assert!((850..1150).contains(&test), "{test}");
        assert!(
            differ > 1000,
            "the seed must change the assignment: {differ}"
        );
        // The documented formula, by hand.
        let addr = a("2001:db8::1");
        let mut h = blake3::Hasher::new();
        h.update(&17u64.to_le_bytes());
        h.update(b"2001:db8::1");
        let bucket =
            u64::from_le_bytes(h.finalize().as_bytes()[..8].try_into().unwrap()) % 1_000_000;
        assert_eq!(tenth.bucket(&addr), bucket);
        assert!(SplitRule::new(1, 1.5, 0.0).is_err());
        assert!(SplitRule::new(1, f64::NAN, 0.0).is_err());
        assert_eq!("test".parse::<Split>().unwrap(), Split::Test);
        assert!("validation".parse::<Split>().is_err());
    }

    #[test]
    fn val_takes_the_buckets_after_test_and_leaves_test_alone() {
        let two_way = SplitRule::new(17, 0.1, 0.0).unwrap();
        let three_way = SplitRule::new(17, 0.1, 0.2).unwrap();
        let everything = SplitRule::new(17, 0.3, 0.7).unwrap();
        assert_eq!(two_way.splits(), [Split::Train, Split::Test]);
        assert_eq!(three_way.splits(), [Split::Train, Split::Val, Split::Test]);
        let mut val = 0;
        for i in 0..10_000u32 {
            let addr = IpAddr::from(i.to_be_bytes());
            let (two, three) = (two_way.split(&addr), three_way.split(&addr));
            // Test membership is the same; val comes out of train only.
            assert_eq!(two == Split::Test, three == Split::Test, "{addr}");
            assert!(three != Split::Val || two == Split::Train, "{addr}");
            // The documented comparison, by hand.
            let b = three_way.bucket(&addr) as f64;
            let expected = if b < 100_000.0 {
                Split::Test
            } else if b < (0.1 + 0.2) * 1_000_000.0 {
                Split::Val
            } else {
                Split::Train
            };
            assert_eq!(three, expected, "{addr}");
            assert_ne!(everything.split(&addr), Split::Train, "{addr}");
            val += (three == Split::Val) as u32;
        }
        assert!((1800..2200).contains(&val), "{val}");
        assert_eq!("val".parse::<Split>().unwrap(), Split::Val);
        for (t, v) in [(0.5, 0.6), (0.1, -0.1), (0.1, f64::NAN), (0.0, 1.5)] {
            let err = SplitRule::new(1, t, v).unwrap_err().to_string();
            assert!(err.contains("fraction"), "{err}");
        }
    }
}
