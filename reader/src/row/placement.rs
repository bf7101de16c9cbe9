//! Where a probe's rows go: its `src_id`, its partition (= shard index) and its split.
//!
//! All three are pure functions of the canonical address text ([`super::addr`]), so
//! they are stable across runs, independent of the number of workers, and computable
//! from Python:
//!
//! * `src_id(text) = u64_le(blake3(text)[0..8])`
//! * `partition(text, shards) = src_id(text) % shards`
//! * `bucket = u64_le(blake3(seed_le_bytes(8) ‖ text)[0..8]) % 1_000_000`; the probe is
//!   in `test` if `bucket < test_fraction × 1_000_000` (compared as f64), else `train`.

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
    Test,
}

impl Split {
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Train => "train",
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
            "test" => Ok(Split::Test),
            other => Err(Error::Input(format!(
                "unknown split {other:?} (train or test)"
            ))),
        }
    }
}

/// The train/test assignment of a job: a seed and the test fraction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitRule {
    seed: u64,
    test_fraction: f64,
}

impl SplitRule {
    pub fn new(seed: u64, test_fraction: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&test_fraction) {
            return Err(Error::Input(format!(
                "test_fraction must be between 0 and 1, got {test_fraction}"
            )));
        }
        Ok(SplitRule {
            seed,
            test_fraction,
        })
    }

    /// The probe's bucket in `0..1_000_000`.
    pub fn bucket(&self, addr: &IpAddr) -> u64 {
        let mut h = blake3::Hasher::new();
        h.update(&self.seed.to_le_bytes());
        h.update(addr.to_string().as_bytes());
        u64_le_prefix(&h.finalize()) % 1_000_000
    }

    pub fn split(&self, addr: &IpAddr) -> Split {
        if (self.bucket(addr) as f64) < self.test_fraction * 1_000_000.0 {
            Split::Test
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
        let none = SplitRule::new(17, 0.0).unwrap();
        let all = SplitRule::new(17, 1.0).unwrap();
        let tenth = SplitRule::new(17, 0.1).unwrap();
        let other_seed = SplitRule::new(18, 0.1).unwrap();
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
        assert!(SplitRule::new(1, 1.5).is_err());
        assert!(SplitRule::new(1, f64::NAN).is_err());
        assert_eq!("test".parse::<Split>().unwrap(), Split::Test);
        assert!("val".parse::<Split>().is_err());
    }
}
