//! Weighted mixtures of several outputs: which source each sequence of a rank's stream
//! comes from, and the iterator state of a mixture.
//!
//! ```text
//! source s (one output's split): its own epochs, blocks and packing, seeded by
//!          source_seed(seed, s), ranks disjoint within it as for one output
//! sequence i of rank r of W: source = pick(weights, key(seed, r, W, i))
//! state: every source's position (its IteratorState) + i, the next pick
//! ```
//!
//! A source is picked per *sequence*, independently with probability proportional to
//! its weight, by a counter-based draw; each source keeps its own position, so changing
//! the weights (at a resume or with [`crate::dataset::Loader::set_weights`]) only changes
//! which source the next sequences come from: no row of a block is lost or repeated,
//! and no packing buffer is dropped.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

use crate::dataset::IteratorState;
use crate::error::{Error, Result};
use crate::rng::{key, CounterRng};

/// The version of [`MixtureState`].
pub const MIXTURE_STATE_VERSION: u32 = 1;

const PICK_SALT: u64 = 0x6d69_7870_6963_6b; // "mixpick"
const SOURCE_SALT: u64 = 0x6d69_7873_7263; // "mixsrc"

/// The seed of source `index`'s stream in a mixture seeded by `seed`: each source has
/// its own epoch orders and draws, whatever the other sources.
pub fn source_seed(seed: u64, index: usize) -> u64 {
    key(&[seed, SOURCE_SALT, index as u64])
}

/// Mixture weights, checked: one per source, each finite and ≥ 0, at least one > 0.
/// Only their ratios matter.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    weights: Vec<f64>,
    /// Running sums, the last one the total.
    cumulative: Vec<f64>,
}

impl Weights {
    pub fn new(weights: Vec<f64>, sources: usize) -> Result<Self> {
        if weights.len() != sources {
            return Err(Error::Input(format!(
                "{} mixture weights for {sources} sources: give one weight per source",
                weights.len()
            )));
        }
        if let Some((i, w)) = weights
            .iter()
            .enumerate()
            .find(|(_, w)| !w.is_finite() || **w < 0.0)
        {
            return Err(Error::Input(format!(
                "mixture weight {w} of source {i} is not a finite number ≥ 0"
            )));
        }
        let mut total = 0.0;
        let cumulative: Vec<f64> = weights
            .iter()
            .map(|w| {
                total += w;
                total
            })
            .collect();
        if total <= 0.0 || !total.is_finite() {
            return Err(Error::Input(format!(
                "mixture weights {weights:?}: at least one must be > 0 (and their sum finite)"
            )));
        }
        Ok(Weights {
            weights,
            cumulative,
        })
    }

    pub fn as_slice(&self) -> &[f64] {
        &self.weights
    }

    pub fn len(&self) -> usize {
        self.weights.len()
    }

    pub fn is_empty(&self) -> bool {
        self.weights.is_empty()
    }

    /// The source of sequence `index` of rank `rank` of `count`: source `s` with
    /// probability `weights[s] / sum(weights)`, a pure function of its arguments.
    pub fn pick(&self, seed: u64, rank: u64, count: u64, index: u64) -> usize {
        let total = self.cumulative[self.cumulative.len() - 1];
        let u = CounterRng::from_parts(&[seed, rank, count, index, PICK_SALT]).next_f64() * total;
        // The first source whose running sum passes u; a zero weight never does.
        match self.cumulative.iter().position(|&c| u < c) {
            Some(s) => s,
            // Rounding at the very top: the last source with a weight.
            None => self.weights.iter().rposition(|&w| w > 0.0).unwrap_or(0),
        }
    }
}

/// One source in a [`MixtureState`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixtureSourceState {
    /// The source as it was given (path or paths), for people reading the state.
    pub name: String,
    /// Its weight when the state was taken.
    pub weight: f64,
    /// Where its stream stands.
    pub state: IteratorState,
}

/// A mixture's iterator state: every source's own state, and the index of the next
/// pick. Restores into a mixture of the same sources (same rows, same order), whose
/// weights may differ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixtureState {
    pub version: u32,
    pub seed: u64,
    pub shard_index: u64,
    pub shard_count: u64,
    pub batch_size: usize,
    /// Sequences this rank has taken from the mixture (the next pick's index).
    pub picks: u64,
    pub sources: Vec<MixtureSourceState>,
}

/// A loader's state: one output's, or a mixture's (it has `"sources"`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum LoaderState {
    Single(IteratorState),
    Mixture(MixtureState),
}

impl From<IteratorState> for LoaderState {
    fn from(s: IteratorState) -> Self {
        LoaderState::Single(s)
    }
}

impl From<MixtureState> for LoaderState {
    fn from(s: MixtureState) -> Self {
        LoaderState::Mixture(s)
    }
}

impl<'de> Deserialize<'de> for LoaderState {
    /// A mixture's state when the object has `"sources"`, else one output's; the
    /// errors are those of the state it is taken for (not "no variant matched").
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        let mixture = value.get("sources").is_some();
        if mixture {
            MixtureState::deserialize(value)
                .map(LoaderState::Mixture)
                .map_err(D::Error::custom)
        } else {
            IteratorState::deserialize(value)
                .map(LoaderState::Single)
                .map_err(D::Error::custom)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_checked() {
        assert!(Weights::new(vec![1.0, 2.0], 2).is_ok());
        assert!(Weights::new(vec![1.0], 2).is_err());
        assert!(Weights::new(vec![1.0, -0.5], 2).is_err());
        assert!(Weights::new(vec![1.0, f64::NAN], 2).is_err());
        assert!(Weights::new(vec![f64::INFINITY, 1.0], 2).is_err());
        assert!(Weights::new(vec![0.0, 0.0], 2).is_err());
        assert!(Weights::new(vec![f64::MAX, f64::MAX], 2).is_err());
        assert!(Weights::new(vec![0.0, 3.0], 2).is_ok());
    }

    #[test]
    fn picks_follow_the_weights_and_never_a_zero_weight() {
        let w = Weights::new(vec![1.0, 0.0, 3.0], 3).unwrap();
        let n = 200_000u64;
        let mut counts = [0u64; 3];
        for i in 0..n {
            counts[w.pick(7, 1, 4, i)] += 1;
        }
        assert_eq!(counts[1], 0);
        // Binomial(n, 1/4): standard deviation ≈ 194; allow 5 of them.
        let expected = n as f64 / 4.0;
        let sd = (n as f64 * 0.25 * 0.75).sqrt();
        assert!(
            (counts[0] as f64 - expected).abs() < 5.0 * sd,
            "{counts:?}"
        );
        // Pure: the same arguments, the same source; other ranks pick otherwise.
        let a: Vec<usize> = (0..64).map(|i| w.pick(7, 1, 4, i)).collect();
        let b: Vec<usize> = (0..64).map(|i| w.pick(7, 1, 4, i)).collect();
        let c: Vec<usize> = (0..64).map(|i| w.pick(7, 2, 4, i)).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn source_seeds_differ() {
        assert_ne!(source_seed(0, 0), source_seed(0, 1));
        assert_ne!(source_seed(0, 0), source_seed(1, 0));
    }
}
