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

const PICK_SALT: u64 = 0x006d_6978_7069_636b; // "mixpick"
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
    use crate::dataset::tests::{contexts_of, one, shards_of, take, test_options};
    use crate::dataset::{DatasetOptions, Loader, RowSource};
    use crate::packing::Batch;
    use std::path::PathBuf;

    /// Each sequence of the batches (its tokens and segment ids), padding left out.
    fn sequences_of(batches: &[Batch]) -> Vec<Vec<i32>> {
        let mut out = Vec::new();
        for b in batches {
            for s in 0..b.batch_size {
                let range = s * b.seq_len..(s + 1) * b.seq_len;
                let seg = &b.inputs_segmentation[range.clone()];
                if seg.iter().any(|&x| x != 0) {
                    out.push([&b.inputs[range], seg].concat());
                }
            }
        }
        out
    }

    struct Sources {
        _dir: tempfile::TempDir,
        files: Vec<Vec<PathBuf>>,
    }

    /// Sources of different probes (`salt` 1, 2, …), two shards of 60 rows each.
    fn sources(n: u32) -> Sources {
        let dir = tempfile::tempdir().unwrap();
        let files = (1..=n).map(|salt| shards_of(dir.path(), salt)).collect();
        Sources { _dir: dir, files }
    }

    fn open(files: &[PathBuf]) -> RowSource {
        RowSource::open(files).unwrap()
    }

    fn mixture(s: &Sources, weights: &[f64], o: &DatasetOptions) -> Loader {
        let named = s
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| (format!("source-{i}"), open(f)))
            .collect();
        Loader::mixture(named, weights.to_vec(), o.clone()).unwrap()
    }

    /// The first `n` sequences of source `i` read alone by the ranks of `o`, as the
    /// mixture reads it (its seed).
    fn alone(files: &[PathBuf], i: usize, o: &DatasetOptions, n: usize) -> Vec<Vec<i32>> {
        let mut options = o.clone();
        options.seed = source_seed(o.seed, i);
        let mut l = Loader::new(open(files), options).unwrap();
        let mut out = Vec::new();
        while out.len() < n {
            let Some(b) = l.next_batch().unwrap() else {
                break;
            };
            out.extend(sequences_of(&[b]));
        }
        out.truncate(n);
        out
    }

    /// How many sequences of `got` came from each source, checking that they are, in
    /// order, each source's own stream from its start with nothing left out or repeated.
    fn interleaving(got: &[Vec<i32>], streams: &[Vec<Vec<i32>>]) -> Vec<usize> {
        let mut next = vec![0usize; streams.len()];
        for (k, seq) in got.iter().enumerate() {
            let source = (0..streams.len())
                .find(|&i| streams[i].get(next[i]) == Some(seq))
                .unwrap_or_else(|| {
                    panic!("sequence {k} is not the next one of any source (at {next:?})")
                });
            next[source] += 1;
        }
        next
    }

    /// |observed - expected| within 5 standard deviations of Binomial(n, p).
    fn within_bounds(observed: usize, n: usize, p: f64) -> bool {
        let (n, observed) = (n as f64, observed as f64);
        (observed - n * p).abs() <= 5.0 * (n * p * (1.0 - p)).sqrt()
    }

    fn streams(s: &Sources, o: &DatasetOptions, n: usize) -> Vec<Vec<Vec<i32>>> {
        (0..s.files.len())
            .map(|i| alone(&s.files[i], i, o, n))
            .collect()
    }

    #[test]
    fn a_mixture_interleaves_its_sources_own_streams_in_proportion() {
        let s = sources(3);
        for (rank, ranks) in [(0, 1), (1, 3)] {
            let o = test_options(|o| {
                o.seed = 5;
                o.shard_index = rank;
                o.shard_count = ranks;
            });
            let weights = [1.0, 3.0, 0.0];
            let got = sequences_of(&take(&mut mixture(&s, &weights, &o), 200));
            assert_eq!(got.len(), 800);
            let counts = interleaving(&got, &streams(&s, &o, 800));
            assert!(within_bounds(counts[0], 800, 0.25), "{counts:?}");
            assert_eq!(counts[2], 0, "a source of weight 0 is never read");
            // Deterministic whatever the threads and prefetching.
            let mut o2 = o.clone();
            o2.num_threads = 1;
            o2.prefetch = 0;
            assert!(sequences_of(&take(&mut mixture(&s, &weights, &o2), 200)) == got);
        }
    }

    #[test]
    fn a_mixture_resumes_exactly_and_with_other_weights() {
        let s = sources(2);
        let o = test_options(|o| o.seed = 3);
        let mut first = mixture(&s, &[1.0, 1.0], &o);
        let before = sequences_of(&take(&mut first, 30));
        let state: LoaderState =
            serde_json::from_str(&serde_json::to_string(&first.state()).unwrap()).unwrap();
        let LoaderState::Mixture(m) = &state else {
            panic!("a mixture's state is a MixtureState");
        };
        assert_eq!(m.picks, 120);
        assert_eq!(
            m.sources
                .iter()
                .map(|s| (s.name.as_str(), s.weight))
                .collect::<Vec<_>>(),
            [("source-0", 1.0), ("source-1", 1.0)]
        );
        let expected = sequences_of(&take(&mut first, 20));
        let mut same = mixture(
            &s,
            &[1.0, 1.0],
            &test_options(|o| {
                o.seed = 3;
                o.prefetch = 1;
            }),
        );
        same.set_state(&state).unwrap();
        assert!(sequences_of(&take(&mut same, 20)) == expected);

        // Other weights from the same state: every source goes on where it was (the
        // rest of its current block included), only the picks change.
        let mut reweighted = mixture(&s, &[1.0, 9.0], &o);
        reweighted.set_state(&state).unwrap();
        let after = sequences_of(&take(&mut reweighted, 100));
        let all = [before.clone(), after].concat();
        let counts = interleaving(&all, &streams(&s, &o, all.len()));
        let before_counts = interleaving(&before, &streams(&s, &o, before.len()));
        assert!(
            within_bounds(counts[0] - before_counts[0], 400, 0.1),
            "{counts:?} after {before_counts:?}"
        );
        let LoaderState::Mixture(m) = reweighted.state() else {
            panic!("a mixture's state is a MixtureState");
        };
        assert_eq!(m.sources[1].weight, 9.0);

        // set_weights mid-stream (with batches prefetched): the same.
        let mut live = mixture(&s, &[1.0, 1.0], &o);
        let head = sequences_of(&take(&mut live, 30));
        live.set_weights(vec![0.0, 1.0]).unwrap();
        let tail = sequences_of(&take(&mut live, 25));
        let all = [head.clone(), tail].concat();
        let counts = interleaving(&all, &streams(&s, &o, all.len()));
        let head_counts = interleaving(&head, &streams(&s, &o, head.len()));
        assert_eq!(counts[0], head_counts[0], "weight 0: no more of source 0");
        assert!(live.set_weights(vec![1.0]).is_err());
        assert!(live.set_weights(vec![-1.0, 2.0]).is_err());
    }

    #[test]
    fn a_state_that_does_not_fit_is_refused_and_says_why() {
        let s = sources(2);
        let o = test_options(|o| o.seed = 3);
        let mut mix = mixture(&s, &[1.0, 2.0], &o);
        take(&mut mix, 3);
        let state = mix.state();
        let mut single = Loader::new(open(&s.files[0]), o.clone()).unwrap();
        take(&mut single, 3);
        let err = |l: &mut Loader, st: &LoaderState| l.set_state(st).unwrap_err().to_string();
        assert!(err(&mut single, &state).contains("mixture of 2 sources"));
        assert!(err(&mut mix, &single.state()).contains("of one output"));
        let three = sources(3);
        assert!(err(&mut mixture(&three, &[1.0; 3], &o), &state).contains("2 sources"));
        // A source with other rows (one shard of two), named in the error.
        let named = vec![
            ("a".to_string(), open(&s.files[0])),
            ("half".to_string(), open(&s.files[1][..1])),
        ];
        let mut other = Loader::mixture(named, vec![1.0, 2.0], o.clone()).unwrap();
        let e = err(&mut other, &state);
        assert!(e.contains("source 1 (half") && e.contains("rows"), "{e}");
        let mut reseeded = mixture(&s, &[1.0, 2.0], &test_options(|o| o.seed = 4));
        assert!(err(&mut reseeded, &state).contains("seed"));
        // Bad weights, no sources.
        for w in [vec![1.0], vec![0.0, 0.0], vec![f64::NAN, 1.0]] {
            let named = vec![
                ("a".into(), open(&s.files[0])),
                ("b".into(), open(&s.files[1])),
            ];
            assert!(Loader::mixture(named, w, o.clone()).is_err());
        }
        assert!(Loader::mixture(vec![], vec![], o.clone()).is_err());
        // Counters at their limit are an error, not an overflow.
        let LoaderState::Mixture(mut m) = state.clone() else {
            panic!("a mixture's state is a MixtureState");
        };
        m.picks = u64::MAX;
        let mut full = mixture(
            &s,
            &[1.0, 2.0],
            &test_options(|o| {
                o.seed = 3;
                o.prefetch = 0;
            }),
        );
        full.set_state(&m.clone().into()).unwrap();
        assert!(full.next_batch().is_err());
        m.picks = 0;
        for source in &mut m.sources {
            source.state.epoch = u64::MAX;
            source.state.block = u64::MAX;
        }
        full.set_state(&m.into()).unwrap();
        assert!(full.next_batch().is_err());
    }

    #[test]
    fn a_mixture_resumes_on_another_number_of_ranks_source_by_source() {
        let s = sources(2);
        let opts = |rank, ranks| {
            test_options(|o| {
                o.seed = 8;
                o.shard_index = rank;
                o.shard_count = ranks;
                o.block_rows = 5;
            })
        };
        let mut old: Vec<Loader> = (0..2)
            .map(|r| mixture(&s, &[1.0, 2.0], &opts(r, 2)))
            .collect();
        for (r, l) in old.iter_mut().enumerate() {
            take(l, 7 + 5 * r);
        }
        let states: Vec<LoaderState> = old.iter().map(Loader::state).collect();
        for rank in 0..3 {
            let o = opts(rank, 3);
            let mut new = mixture(&s, &[1.0, 2.0], &o);
            new.set_states(&states).unwrap();
            let got = sequences_of(&take(&mut new, 40));
            // Each source's sequences are what that source alone continues with after
            // the same elastic resume.
            let continued: Vec<Vec<Vec<i32>>> = (0..2)
                .map(|i| {
                    let mut alone_o = o.clone();
                    alone_o.seed = source_seed(o.seed, i);
                    let mut l = Loader::new(open(&s.files[i]), alone_o).unwrap();
                    let per_source: Vec<LoaderState> = states
                        .iter()
                        .map(|st| match st {
                            LoaderState::Mixture(m) => m.sources[i].state.clone().into(),
                            LoaderState::Single(_) => panic!("a mixture's state"),
                        })
                        .collect();
                    l.set_states(&per_source).unwrap();
                    sequences_of(&take(&mut l, 160))
                })
                .collect();
            let counts = interleaving(&got, &continued);
            assert_eq!(counts.iter().sum::<usize>(), 160);
            assert!(within_bounds(counts[0], 160, 1.0 / 3.0), "{counts:?}");
        }
        // States of another version or seed are refused.
        let mut versioned = states.clone();
        if let LoaderState::Mixture(m) = &mut versioned[1] {
            m.version = 9;
        }
        let e = mixture(&s, &[1.0, 2.0], &opts(0, 3))
            .set_states(&versioned)
            .unwrap_err()
            .to_string();
        assert!(e.contains("version"), "{e}");
        // Mixture states into one output, and the reverse, are refused.
        let mut single = Loader::new(open(&s.files[0]), opts(0, 3)).unwrap();
        assert!(single.set_states(&states).is_err());
        let single_state = vec![one(&single).into()];
        assert!(mixture(&s, &[1.0, 2.0], &opts(0, 1))
            .set_states(&single_state)
            .is_err());
    }

    #[test]
    fn a_finite_mixture_ends_when_a_picked_source_ends() {
        let s = sources(2);
        let o = test_options(|o| {
            o.num_epochs = Some(1);
            o.packing = false;
        });
        // Only source 0 is picked: the stream is its epoch, all of it, then ends.
        let mut mix = mixture(&s, &[1.0, 0.0], &o);
        let got = take(&mut mix, 100_000);
        assert!(mix.next_batch().unwrap().is_none());
        let mut alone_o = o.clone();
        alone_o.seed = source_seed(o.seed, 0);
        let whole = take(
            &mut Loader::new(open(&s.files[0]), alone_o).unwrap(),
            100_000,
        );
        let sorted = |mut v: Vec<Vec<i32>>| {
            v.sort();
            v
        };
        assert!(sorted(contexts_of(&got)) == sorted(contexts_of(&whole)));
    }

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
        assert!((counts[0] as f64 - expected).abs() < 5.0 * sd, "{counts:?}");
        // Other ranks pick otherwise.
        let a: Vec<usize> = (0..64).map(|i| w.pick(7, 1, 4, i)).collect();
        let c: Vec<usize> = (0..64).map(|i| w.pick(7, 2, 4, i)).collect();
        assert_ne!(a, c);
    }

    #[test]
    fn source_seeds_differ() {
        assert_ne!(source_seed(0, 0), source_seed(0, 1));
        assert_ne!(source_seed(0, 0), source_seed(1, 0));
    }
}
