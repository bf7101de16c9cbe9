//! The dataset's tests: shard files written here, read back through every path.

use std::path::PathBuf;

use std::sync::Arc;

use super::loader::*;
use super::options::*;
use super::source::*;
use super::state::*;
use super::stream::*;

use crate::array_record::{ArrayRecordWriter, WriterOptions};

use crate::epoch_layout::{EpochChanges, PendingBlock};
use crate::mixture::LoaderState;

use crate::packing::Batch;
use crate::rng::{key, CounterRng, Permutation};

use crate::row::{encode_row, Measurement, RttCode};
use crate::sampler::SamplerOptions;

/// Two shards of rows with sizes from 1 to 2000 measurements.
pub(crate) fn shards(dir: &std::path::Path) -> Vec<PathBuf> {
    shards_of(dir, 0)
}

/// Two shards of rows with sizes from 1 to 2000 measurements; another `salt`, other
/// rows (other probes and measurements).
pub(crate) fn shards_of(dir: &std::path::Path, salt: u32) -> Vec<PathBuf> {
    let mut rng = CounterRng::new(11 + u64::from(salt));
    let mut files = Vec::new();
    for s in 0..2 {
        let path = if salt == 0 {
            dir.join(format!("shard-{s}.array_record"))
        } else {
            dir.join(format!("shard-{salt}-{s}.array_record"))
        };
        let mut w = ArrayRecordWriter::create(
            &path,
            "group_size:1,uncompressed"
                .parse::<WriterOptions>()
                .unwrap(),
        )
        .unwrap();
        for r in 0..60u32 {
            let n = [1usize, 7, 40, 300, 2000][(r % 5) as usize];
            let v6 = r % 3 == 0;
            let src: std::net::IpAddr = if v6 {
                format!("2001:db8:{salt:x}::{:x}", s * 100 + r + 1)
            } else {
                format!("10.{s}.{salt}.{r}")
            }
            .parse()
            .unwrap();
            let mut t = 1_600_000_000u64;
            let ms: Vec<Measurement> = (0..n)
                .map(|_| {
                    t += rng.below(400);
                    Measurement {
                        event_time: t,
                        dst_addr: if v6 {
                            format!("2001:db8:1::{:x}", rng.below(50) + 1)
                                .parse()
                                .unwrap()
                        } else {
                            format!("192.0.2.{}", rng.below(200)).parse().unwrap()
                        },
                        rtt: Some(RttCode(rng.below(60000) as u16)),
                    }
                })
                .collect();
            w.write(&encode_row(src, 0, &ms).unwrap().bytes).unwrap();
        }
        w.finish().unwrap();
        files.push(path);
    }
    files
}

/// Test options: batches of 4, blocks of 16 rows, contexts of 256 tokens.
pub(crate) fn test_options(f: impl FnOnce(&mut DatasetOptions)) -> DatasetOptions {
    let mut o = DatasetOptions {
        batch_size: 4,
        block_rows: 16,
        sampler: SamplerOptions {
            context_len: 256,
            ..Default::default()
        },
        ..Default::default()
    };
    f(&mut o);
    o
}

fn loader(files: &[PathBuf], f: impl FnOnce(&mut DatasetOptions)) -> Loader {
    Loader::new(RowSource::open(files).unwrap(), test_options(f)).unwrap()
}

/// The state of a loader of one output.
pub(crate) fn one(l: &Loader) -> IteratorState {
    match l.state() {
        LoaderState::Single(s) => s,
        LoaderState::Mixture(_) => panic!("a loader of one output has a mixture state"),
    }
}

fn ls(states: &[IteratorState]) -> Vec<LoaderState> {
    states.iter().cloned().map(LoaderState::from).collect()
}

pub(crate) fn take(l: &mut Loader, n: usize) -> Vec<Batch> {
    (0..n).map_while(|_| l.next_batch().unwrap()).collect()
}

#[test]
fn same_options_same_batches_whatever_the_threads() {
    let dir = tempfile::tempdir().unwrap();
    let files = shards(dir.path());
    let a = take(
        &mut loader(&files, |o| {
            o.prefetch = 0;
            o.num_threads = 1;
        }),
        60,
    );
    let b = take(
        &mut loader(&files, |o| {
            o.prefetch = 8;
            o.num_threads = 3;
        }),
        60,
    );
    assert_eq!(a.len(), 60);
    assert!(a == b);
    let c = take(&mut loader(&files, |o| o.seed = 1), 60);
    assert!(a != c);
}

#[test]
fn ranks_partition_every_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let files = shards(dir.path());
    let rows = RowSource::open(&files).unwrap();
    let n = rows.len();
    for w in [1u64, 3, 4] {
        let mut seen = vec![0u32; n as usize];
        for r in 0..w {
            let o = Arc::new(DatasetOptions {
                shard_index: r,
                shard_count: w,
                block_rows: 7,
                ..Default::default()
            });
            let source = Source {
                name: String::new(),
                rows: Arc::new(RowSource::open(&files).unwrap()),
                seed: o.seed,
            };
            let s = SourceStream::new(
                source,
                o.clone(),
                Arc::new(Changes::new()),
                Position {
                    epoch: 0,
                    block: 0,
                    sequence: 0,
                },
            );
            let perm = Permutation::new(n, key(&[o.seed, 0, 0x7065_726d]));
            for p in 0..s.rank_rows() {
                seen[perm.get(r + p * w) as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&c| c == 1), "world size {w}");
    }
}

#[test]
fn restoring_the_state_continues_identically() {
    let dir = tempfile::tempdir().unwrap();
    let files = shards(dir.path());
    let mut l = loader(&files, |_| {});
    take(&mut l, 37);
    let state = l.state();
    let expected = take(&mut l, 25);
    let json = serde_json::to_string(&state).unwrap();
    let mut fresh = loader(&files, |o| o.prefetch = 1);
    fresh
        .set_state(&serde_json::from_str(&json).unwrap())
        .unwrap();
    assert!(take(&mut fresh, 25) == expected);
    // A state for other options is refused.
    let mut other = loader(&files, |o| o.batch_size = 5);
    assert!(other.set_state(&state).is_err());
}

/// Every context in `batches` (its input tokens), in order.
pub(crate) fn contexts_of(batches: &[Batch]) -> Vec<Vec<i32>> {
    let mut out = Vec::new();
    for b in batches {
        for s in 0..b.inputs.len() / b.seq_len {
            let range = s * b.seq_len..(s + 1) * b.seq_len;
            let (seg, tokens) = (&b.inputs_segmentation[range.clone()], &b.inputs[range]);
            let mut i = 0;
            while i < seg.len() {
                let j = i + seg[i..].iter().take_while(|&&x| x == seg[i]).count();
                if seg[i] != 0 {
                    out.push(tokens[i..j].to_vec());
                }
                i = j;
            }
        }
    }
    out
}

fn sorted(mut v: Vec<Vec<i32>>) -> Vec<Vec<i32>> {
    v.sort();
    v
}

const EPOCHS: u64 = 2;

fn rank(files: &[PathBuf], index: u64, count: u64, batch_size: usize) -> Loader {
    loader(files, |o| {
        o.shard_index = index;
        o.shard_count = count;
        o.batch_size = batch_size;
        o.block_rows = 5;
        o.num_epochs = Some(EPOCHS);
        o.prefetch = 2;
    })
}

/// Runs `count` ranks for `steps[r]` batches each (`usize::MAX`: into the second
/// epoch), then continues on the ranks of each step of `chain` from the states of
/// the ranks before; returns every context delivered.
fn elastic(files: &[PathBuf], count: u64, steps: &[usize], chain: &[u64]) -> Vec<Vec<i32>> {
    let mut delivered = Vec::new();
    let mut loaders: Vec<Loader> = (0..count).map(|r| rank(files, r, count, 3)).collect();
    for (r, l) in loaders.iter_mut().enumerate() {
        let n = steps[r % steps.len()];
        if n == usize::MAX {
            while one(l).epoch == 0 {
                delivered.extend(contexts_of(&take(l, 1)));
            }
            delivered.extend(contexts_of(&take(l, 2)));
        } else {
            delivered.extend(contexts_of(&take(l, n)));
        }
    }
    for (step, &next) in chain.iter().enumerate() {
        let states: Vec<LoaderState> = loaders.iter().rev().map(|l| l.state()).collect();
        // States travel as JSON (checkpoints).
        let states: Vec<LoaderState> = states
            .iter()
            .map(|s| serde_json::from_str(&serde_json::to_string(s).unwrap()).unwrap())
            .collect();
        loaders = (0..next)
            .map(|r| rank(files, r, next, 2 + r as usize % 3))
            .collect();
        let last = step + 1 == chain.len();
        for (r, l) in loaders.iter_mut().enumerate() {
            l.set_states(&states).unwrap();
            let n = if last { usize::MAX } else { 1 + (r * 7) % 11 };
            delivered.extend(contexts_of(&take(l, n)));
        }
    }
    delivered
}

#[test]
fn elastic_resume_reads_every_context_of_the_epochs_once() {
    let dir = tempfile::tempdir().unwrap();
    let files = shards(dir.path());
    let everything = sorted(contexts_of(&take(&mut rank(&files, 0, 1, 3), usize::MAX)));
    assert!(everything.len() > 500, "{}", everything.len());
    // (ranks before, batches each rank took, ranks after): mid-block stops, a rank
    // into the second epoch (MAX), a rank that never started (0).
    let cases: [(u64, &[usize], &[u64]); 6] = [
        (1, &[17], &[3]),
        (4, &[5, 9, 0, usize::MAX], &[2]),
        (3, &[7, 13, 2], &[5]),
        (8, &[1, 4, 6, 0, 3, usize::MAX, 2, 9], &[1]),
        // Two and three changes within the same epochs.
        (3, &[7, 13, 2], &[5, 2]),
        (2, &[usize::MAX, 3], &[4, 3, 1]),
    ];
    for (count, steps, chain) in cases {
        let got = sorted(elastic(&files, count, steps, chain));
        assert!(
            got == everything,
            "{count} -> {chain:?}: {} contexts delivered, {} in the epochs",
            got.len(),
            everything.len()
        );
    }
}

#[test]
fn a_damaged_pending_block_is_refused_not_read_twice_or_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let files = shards(dir.path());
    let mut old: Vec<Loader> = (0..3).map(|r| rank(&files, r, 3, 3)).collect();
    for (r, l) in old.iter_mut().enumerate() {
        take(l, 2 + 3 * r);
    }
    let states: Vec<LoaderState> = old.iter().map(Loader::state).collect();
    let mut new = rank(&files, 0, 2, 3);
    new.set_states(&states).unwrap();
    let good = one(&new);
    let pending = &good.changes[&0].pending;
    assert!(!pending.is_empty(), "rank 0 of 2 delivers pending blocks");
    let damaged = |f: &dyn Fn(&mut EpochChanges)| {
        let mut s = good.clone();
        f(s.changes.get_mut(&0).unwrap());
        LoaderState::from(s)
    };
    let mut copy = rank(&files, 0, 2, 3);
    // Read twice: the same block twice, a block at the top level (one of a list).
    for bad in [
        damaged(&|c| c.pending.push(c.pending[0])),
        damaged(&|c| {
            c.pending[0].level = c.reshards.len() as u32;
            c.pending[0].block = 0;
        }),
        // Another block of the same list than the one left partly delivered.
        damaged(&|c| c.pending[0].block += 1),
        damaged(&|c| c.pending[0].block -= 1),
    ] {
        assert!(copy.set_state(&bad).is_err(), "{bad:?}");
    }
    // Skipped: a pending block past its last sequence is an error when it is built.
    let mut past = rank(&files, 0, 2, 3);
    past.set_state(&damaged(&|c| c.pending[0].sequence = 1_000_000))
        .unwrap();
    let e = past.next_batch().unwrap_err().to_string();
    assert!(e.contains("sequences"), "{e}");
    copy.set_state(&good.into()).unwrap();
    assert!(copy.next_batch().unwrap().is_some());
}

#[test]
fn set_states_with_the_same_ranks_is_set_state() {
    let dir = tempfile::tempdir().unwrap();
    let files = shards(dir.path());
    let mut ranks: Vec<Loader> = (0..3).map(|r| rank(&files, r, 3, 3)).collect();
    for (r, l) in ranks.iter_mut().enumerate() {
        take(l, 2 + r);
    }
    let states: Vec<IteratorState> = ranks.iter().map(one).collect();
    assert!(states
        .iter()
        .all(|s| s.version == 1 && s.changes.is_empty()));
    let expected = take(&mut ranks[1], 5);
    let mut again = rank(&files, 1, 3, 3);
    again.set_states(&ls(&states)).unwrap();
    assert!(take(&mut again, 5) == expected);
    // Missing, repeated or foreign states are refused.
    let mut other = rank(&files, 0, 2, 3);
    assert!(other.set_states(&ls(&states[..2])).is_err());
    assert!(other
        .set_states(&ls(&[
            states[0].clone(),
            states[0].clone(),
            states[2].clone()
        ]))
        .is_err());
    let mut seeded = states.clone();
    seeded[2].seed = 9;
    assert!(other
        .set_states(&ls(&seeded))
        .unwrap_err()
        .to_string()
        .contains("seed"));
    assert!(other.set_states(&[]).is_err());
    // After a change the state says so (version 2) and restores as it is.
    other.set_states(&ls(&states)).unwrap();
    take(&mut other, 1);
    let state = one(&other);
    assert_eq!(state.version, 2);
    assert!(!state.changes.is_empty());
    let expected = take(&mut other, 4);
    let mut copy = rank(&files, 0, 2, 3);
    copy.set_state(&state.clone().into()).unwrap();
    assert!(take(&mut copy, 4) == expected);
    let mut unversioned = state.clone();
    unversioned.version = 1;
    assert!(copy.set_state(&unversioned.clone().into()).is_err());
    // A damaged state is an error, not a panic when its epoch comes.
    let mut damaged = state.clone();
    if let Some(c) = damaged.changes.values_mut().next() {
        c.pending.push(PendingBlock {
            level: 7,
            rank: 0,
            block: 0,
            sequence: 0,
        });
    }
    assert!(copy.set_state(&damaged.clone().into()).is_err());
    let mut far = states.clone();
    far[1].epoch = u64::MAX;
    assert!(other
        .set_states(&ls(&far))
        .unwrap_err()
        .to_string()
        .contains("epochs"));
}

#[test]
fn finite_epochs_end_and_cover_every_context_once() {
    let dir = tempfile::tempdir().unwrap();
    let files = shards(dir.path());
    let mut l = loader(&files, |o| {
        o.num_epochs = Some(1);
        o.packing = false;
    });
    let batches = take(&mut l, 100_000);
    assert!(l.next_batch().unwrap().is_none());
    for b in &batches {
        for s in 0..b.batch_size {
            let seg = &b.inputs_segmentation[s * b.seq_len..(s + 1) * b.seq_len];
            assert!(
                seg.iter().all(|&x| x <= 1),
                "one context per sequence without packing"
            );
        }
    }
    assert!(batches.len() > 100);
}
