//! The iterator state: where a stream stands ([`Position`]) and what it was taken on
//! ([`IteratorState`]); the checks a state must pass before it is restored, and the
//! re-dealing of the states of all ranks to another number of ranks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::epoch_layout::{continue_epoch, EpochChanges, Progress};
use crate::error::{Error, Result};

/// Where the stream stands: the next sequence to hand out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    pub epoch: u64,
    pub block: u64,
    pub sequence: u64,
}

/// The iterator state as saved in checkpoints: the position plus what it is only valid
/// for (restoring into a differently configured iterator is refused).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IteratorState {
    pub version: u32,
    pub epoch: u64,
    pub block: u64,
    pub sequence: u64,
    pub seed: u64,
    pub shard_index: u64,
    pub shard_count: u64,
    pub rows: u64,
    /// Which rows the state is for ([`crate::row_identity`]); empty in states of
    /// older versions, which are refused.
    #[serde(default)]
    pub rows_digest: String,
    pub seq_len: usize,
    pub batch_size: usize,
    pub packing: bool,
    pub block_rows: usize,
    /// Epochs (from the current one) whose rows were re-dealt after a change of the
    /// number of ranks, with this rank's share; absent in version 1 states.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub changes: BTreeMap<u64, EpochChanges>,
}

/// A state without epoch changes.
pub(super) const STATE_VERSION: u32 = 1;
/// A state with epoch changes (after an elastic resume).
pub(super) const STATE_VERSION_CHANGES: u32 = 2;

/// Epoch → this rank's share of the changes of that epoch.
pub(super) type Changes = BTreeMap<u64, EpochChanges>;

/// The first option `state` was taken with that differs from `mine`'s: (name, the
/// state's value, this iterator's). `same_ranks`: also the rank, the number of ranks and
/// the batch size (a restore on the same ranks).
pub(super) fn first_difference(
    state: &IteratorState,
    mine: &IteratorState,
    same_ranks: bool,
) -> Option<(&'static str, String, String)> {
    let pair = |a: &dyn ToString, b: &dyn ToString| (a.to_string(), b.to_string());
    [
        ("seed", pair(&state.seed, &mine.seed), false),
        (
            "shard_index",
            pair(&state.shard_index, &mine.shard_index),
            true,
        ),
        (
            "shard_count",
            pair(&state.shard_count, &mine.shard_count),
            true,
        ),
        ("rows", pair(&state.rows, &mine.rows), false),
        ("seq_len", pair(&state.seq_len, &mine.seq_len), false),
        (
            "batch_size",
            pair(&state.batch_size, &mine.batch_size),
            true,
        ),
        ("packing", pair(&state.packing, &mine.packing), false),
        (
            "block_rows",
            pair(&state.block_rows, &mine.block_rows),
            false,
        ),
    ]
    .into_iter()
    .filter(|(_, _, placement)| same_ranks || !placement)
    .map(|(what, (a, b), _)| (what, a, b))
    .find(|(_, a, b)| a != b)
}

/// Refuses a state taken on other rows than `mine`'s (another output, or another
/// shard count of the same input), or one that does not say which rows it is for.
pub(super) fn check_rows(state: &IteratorState, mine: &IteratorState) -> Result<()> {
    if state.rows_digest.is_empty() {
        return Err(Error::State(
            "iterator state has no rows_digest (it was taken by an older probeflow): it \
             does not say which rows it is for, so it cannot be checked against this \
             output; resume with the probeflow version that took it"
                .into(),
        ));
    }
    if state.rows_digest != mine.rows_digest {
        return Err(Error::State(format!(
            "iterator state was taken on other rows (rows_digest {}, {} rows) than this \
             iterator reads (rows_digest {}, {} rows): a state restores only into the \
             output and split it was taken on, or a copy of it",
            state.rows_digest, state.rows, mine.rows_digest, mine.rows
        )));
    }
    Ok(())
}

pub(super) fn check_version(state: &IteratorState) -> Result<()> {
    let expected = if state.changes.is_empty() {
        STATE_VERSION
    } else {
        STATE_VERSION_CHANGES
    };
    if state.version != expected {
        return Err(Error::State(format!(
            "iterator state is for state version = {}, this iterator has {expected}",
            state.version
        )));
    }
    Ok(())
}

/// The widest spread of epochs among the states of one checkpoint.
pub(super) const MAX_EPOCH_SPREAD: u64 = 1024;

/// This rank's (`index` of `count`) changes of every epoch the ranks of `states` (one
/// per rank, in rank order) were in.
pub(super) fn reshard_states(states: &[&IteratorState], index: u64, count: u64) -> Result<Changes> {
    let first = states.iter().map(|s| s.epoch).min().unwrap_or(0);
    let last = states
        .iter()
        .flat_map(|s| std::iter::once(s.epoch).chain(s.changes.keys().copied()))
        .max()
        .unwrap_or(0);
    // Ranks of one run are at most an epoch or two apart; a wider span is not a
    // checkpoint of one run (and would take long to walk).
    if last - first > MAX_EPOCH_SPREAD {
        return Err(Error::State(format!(
            "iterator states: the ranks are in epochs {first} to {last}; states of one \
             checkpoint are at most {MAX_EPOCH_SPREAD} epochs apart"
        )));
    }
    let mut out = Changes::new();
    for epoch in first..=last {
        // Ranks past this epoch no longer carry its changes: take them from the others
        // (all of which must agree); every rank past it is done with it.
        let Some(known) = states
            .iter()
            .find(|s| s.epoch <= epoch)
            .map(|s| s.changes.get(&epoch).cloned().unwrap_or_default())
        else {
            continue;
        };
        let mut old = Vec::with_capacity(states.len());
        let mut progress = Vec::with_capacity(states.len());
        for s in states {
            if s.epoch > epoch {
                old.push(EpochChanges {
                    reshards: known.reshards.clone(),
                    pending: Vec::new(),
                });
                progress.push(Progress::Done);
            } else {
                old.push(s.changes.get(&epoch).cloned().unwrap_or_default());
                progress.push(if s.epoch < epoch {
                    Progress::NotStarted
                } else {
                    Progress::At {
                        block: s.block,
                        sequence: s.sequence,
                    }
                });
            }
        }
        let rows = states[0].rows;
        let block_rows = states[0].block_rows as u64;
        let continued = continue_epoch(rows, block_rows, &old, &progress, count)?;
        out.insert(epoch, continued.for_rank(index));
    }
    Ok(out)
}
