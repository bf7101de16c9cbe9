//! How an epoch's rows are dealt to ranks when the number of ranks changes in the middle
//! of the epoch (elastic resume). Pure: a function of the row count and of where each
//! rank stood, no I/O.
//!
//! Without a change, rank `r` of `W` owns the *list* `k ↦ r + k·W` of positions in the
//! epoch's permutation and reads it in blocks of `block_rows` consecutive elements.
//! When `W` ranks stop and `W'` ranks go on with the same epoch ([`continue_epoch`]):
//!
//! ```text
//! old rank q has consumed c_q elements of its list: every delivered block, plus the
//!   block it was in, which becomes a PendingBlock (rebuilt from the same keys; only its
//!   undelivered sequences are handed out, by one new rank)
//! L = the unconsumed elements, old rank after old rank      (a Reshard: W and c_q)
//! new rank r of W' owns the list j ↦ L[r + j·W']
//! pending blocks, in order, go to new ranks i mod W'
//! ```
//!
//! Every row of the epoch is then in exactly one place: a delivered block, a pending
//! block or one new list. A second change in the same epoch adds another level over the
//! lists of the first ([`EpochLayout`] maps an element of any level down to its
//! permutation position). The state a rank saves is small: the reshards (`W` counts per
//! change, the same for every rank) and its own pending blocks.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// One change of the number of ranks within an epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reshard {
    /// The number of ranks before the change.
    pub shard_count: u64,
    /// Per rank before the change: elements of its list consumed (delivered, or left to
    /// a pending block).
    pub consumed: Vec<u64>,
}

/// A block some rank had partly delivered when the ranks changed: rebuilt exactly (same
/// rows, same keys), and only its sequences from `sequence` on are handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingBlock {
    /// The level of the list it belongs to (0: the epoch's first ranks).
    pub level: u32,
    /// Its rank at that level, and its block in that rank's list.
    pub rank: u64,
    pub block: u64,
    /// Sequences of the block already delivered.
    pub sequence: u64,
}

/// One rank's share of the changes of an epoch: the reshards (the same for every rank)
/// and the pending blocks this rank delivers before its own list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpochChanges {
    pub reshards: Vec<Reshard>,
    pub pending: Vec<PendingBlock>,
}

/// Elements of rank `rank`'s list when `count` ranks share `total` elements.
pub fn list_len(total: u64, count: u64, rank: u64) -> u64 {
    if total > rank {
        (total - rank).div_ceil(count)
    } else {
        0
    }
}

#[derive(Debug, Clone)]
struct Level {
    /// Ranks that share this level's elements.
    count: u64,
    /// Elements in this level (`L`).
    total: u64,
    /// Level ≥ 1: where each rank of the level below starts in `L` (plus the end), and
    /// what it had consumed.
    starts: Vec<u64>,
    consumed: Vec<u64>,
}

/// The lists of an epoch after its reshards, from level 0 (the epoch's first ranks) to
/// the top level (the ranks reading now).
#[derive(Debug, Clone)]
pub struct EpochLayout {
    levels: Vec<Level>,
}

impl EpochLayout {
    /// The layout of an epoch of `rows` rows after `reshards`, now read by `count` ranks.
    /// Refuses reshards that do not fit (wrong rank counts, more consumed than a list
    /// holds): a state from another dataset or a damaged one.
    pub fn new(rows: u64, reshards: &[Reshard], count: u64) -> Result<Self> {
        let bad = |what: String| Err(Error::State(format!("iterator state: {what}")));
        if count == 0 {
            return bad("zero ranks".into());
        }
        let count_at = |i: usize| reshards.get(i).map_or(count, |r| r.shard_count);
        let mut levels = vec![Level {
            count: count_at(0),
            total: rows,
            starts: Vec::new(),
            consumed: Vec::new(),
        }];
        for (i, reshard) in reshards.iter().enumerate() {
            let below = &levels[levels.len() - 1];
            if reshard.shard_count == 0 || reshard.consumed.len() as u64 != reshard.shard_count {
                return bad(format!(
                    "change {i} lists {} ranks' progress for {} ranks",
                    reshard.consumed.len(),
                    reshard.shard_count
                ));
            }
            let mut starts = Vec::with_capacity(reshard.consumed.len() + 1);
            starts.push(0u64);
            for (q, &c) in reshard.consumed.iter().enumerate() {
                let n = list_len(below.total, below.count, q as u64);
                if c > n {
                    return bad(format!("change {i}: rank {q} consumed {c} of its {n} rows"));
                }
                starts.push(starts[q] + (n - c));
            }
            let total = starts[starts.len() - 1];
            levels.push(Level {
                count: count_at(i + 1),
                total,
                starts,
                consumed: reshard.consumed.clone(),
            });
        }
        Ok(EpochLayout { levels })
    }

    /// The top level (the number of reshards).
    pub fn top(&self) -> u32 {
        (self.levels.len() - 1) as u32
    }

    /// The number of ranks at `level`.
    pub fn count(&self, level: u32) -> u64 {
        self.levels[level as usize].count
    }

    /// Elements of `rank`'s list at `level`.
    pub fn list_len(&self, level: u32, rank: u64) -> u64 {
        let l = &self.levels[level as usize];
        list_len(l.total, l.count, rank)
    }

    /// Refuses pending blocks that are not blocks [`continue_epoch`] leaves pending in
    /// this layout (a damaged state, which would read rows twice or skip them): each
    /// must be, below the top level, the last block a rank had consumed when the ranks
    /// changed, and none may be listed twice.
    pub fn check_pending(&self, pending: &[PendingBlock], block_rows: u64) -> Result<()> {
        for (i, p) in pending.iter().enumerate() {
            let partly_consumed = p.level < self.top()
                && p.rank < self.count(p.level)
                && self.levels[p.level as usize + 1]
                    .consumed
                    .get(p.rank as usize)
                    .is_some_and(|&c| {
                        c > 0 && Some(c.div_ceil(block_rows.max(1))) == p.block.checked_add(1)
                    });
            if !partly_consumed || pending[..i].contains(p) {
                return Err(Error::State(format!(
                    "iterator state: pending block {} of rank {} at level {} is not a \
                     block left partly delivered in this epoch (or is listed twice)",
                    p.block, p.rank, p.level
                )));
            }
        }
        Ok(())
    }

    /// The permutation position of element `k` of `rank`'s list at `level` (O(levels ×
    /// log ranks)); `k` must be below [`EpochLayout::list_len`].
    pub fn position(&self, level: u32, rank: u64, k: u64) -> u64 {
        let (mut level, mut rank, mut k) = (level as usize, rank, k);
        loop {
            let l = &self.levels[level];
            let i = rank + k * l.count;
            if level == 0 {
                return i;
            }
            // The last old rank starting at or before i (empty ranks share a start).
            let q = l.starts.partition_point(|&s| s <= i) - 1;
            k = l.consumed[q] + (i - l.starts[q]);
            rank = q as u64;
            level -= 1;
        }
    }
}

/// Where one of the ranks that stop stood in an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// It had finished the epoch.
    Done,
    /// It had not begun it.
    NotStarted,
    /// Next: sequence `sequence` of block `block` (its pending blocks first, then its
    /// list's blocks).
    At { block: u64, sequence: u64 },
}

/// An epoch's changes after one more change of the number of ranks, for every new rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinuedEpoch {
    pub reshards: Vec<Reshard>,
    /// Every pending block, in the order they are dealt: block `i` goes to new rank
    /// `i mod new_count`.
    pub pending: Vec<PendingBlock>,
    pub new_count: u64,
}

impl ContinuedEpoch {
    /// New rank `rank`'s changes (O(old ranks + pending blocks)).
    pub fn for_rank(&self, rank: u64) -> EpochChanges {
        EpochChanges {
            reshards: self.reshards.clone(),
            pending: self
                .pending
                .iter()
                .enumerate()
                .filter(|(i, _)| *i as u64 % self.new_count == rank)
                .map(|(_, p)| *p)
                .collect(),
        }
    }
}

/// The changes of an epoch for `new_count` ranks going on where `old` ranks stopped:
/// `old[q]` is old rank `q`'s changes of this epoch (every rank's reshards must be the
/// same) and `progress[q]` where it stood.
pub fn continue_epoch(
    rows: u64,
    block_rows: u64,
    old: &[EpochChanges],
    progress: &[Progress],
    new_count: u64,
) -> Result<ContinuedEpoch> {
    let count = old.len() as u64;
    if count == 0 || progress.len() != old.len() || new_count == 0 || block_rows == 0 {
        return Err(Error::State(
            "iterator states: no ranks, or not one state per rank".into(),
        ));
    }
    let reshards = &old[0].reshards;
    if old.iter().any(|c| &c.reshards != reshards) {
        return Err(Error::State(
            "iterator states: the ranks disagree about earlier changes of the number of \
             ranks (states from different checkpoints?)"
                .into(),
        ));
    }
    let layout = EpochLayout::new(rows, reshards, count)?;
    let top = layout.top();
    let mut consumed = Vec::with_capacity(old.len());
    let mut pending = Vec::new();
    for (q, (changes, &at)) in old.iter().zip(progress).enumerate() {
        let q = q as u64;
        let n = layout.list_len(top, q);
        let own = &changes.pending;
        match at {
            Progress::Done => consumed.push(n),
            Progress::NotStarted => {
                consumed.push(0);
                pending.extend_from_slice(own);
            }
            Progress::At { block, sequence } => {
                let p = own.len() as u64;
                if block < p {
                    // Still in its pending blocks: the rest of them go on.
                    consumed.push(0);
                    let mut rest = own[block as usize..].to_vec();
                    rest[0].sequence = rest[0].sequence.max(sequence);
                    pending.extend(rest);
                } else {
                    let first = (block - p).saturating_mul(block_rows);
                    if sequence > 0 && first < n {
                        consumed.push((first + block_rows).min(n));
                        pending.push(PendingBlock {
                            level: top,
                            rank: q,
                            block: block - p,
                            sequence,
                        });
                    } else {
                        consumed.push(first.min(n));
                    }
                }
            }
        }
    }
    let mut next_reshards = reshards.clone();
    next_reshards.push(Reshard {
        shard_count: count,
        consumed,
    });
    // Checks the new level (consumed within each list).
    EpochLayout::new(rows, &next_reshards, new_count)?;
    Ok(ContinuedEpoch {
        reshards: next_reshards,
        pending,
        new_count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every permutation position some rank will still read, with what it came from.
    fn remaining(rows: u64, block_rows: u64, changes: &[EpochChanges]) -> Vec<u64> {
        let count = changes.len() as u64;
        let layout = EpochLayout::new(rows, &changes[0].reshards, count).unwrap();
        let mut seen = Vec::new();
        for (r, c) in changes.iter().enumerate() {
            for p in &c.pending {
                let n = layout.list_len(p.level, p.rank);
                let first = p.block * block_rows;
                for k in first..(first + block_rows).min(n) {
                    seen.push(layout.position(p.level, p.rank, k));
                }
            }
            let top = layout.top();
            for k in 0..layout.list_len(top, r as u64) {
                seen.push(layout.position(top, r as u64, k));
            }
        }
        seen
    }

    /// Positions delivered in full by a rank at `at` (its pending blocks first).
    fn delivered(
        rows: u64,
        block_rows: u64,
        changes: &[EpochChanges],
        rank: u64,
        at: Progress,
    ) -> Vec<u64> {
        let layout = EpochLayout::new(rows, &changes[0].reshards, changes.len() as u64).unwrap();
        let own = &changes[rank as usize].pending;
        let blocks_done = match at {
            Progress::Done => u64::MAX,
            Progress::NotStarted => 0,
            Progress::At { block, .. } => block,
        };
        let mut out = Vec::new();
        for (i, p) in own.iter().enumerate() {
            if (i as u64) < blocks_done {
                let n = layout.list_len(p.level, p.rank);
                let first = p.block * block_rows;
                out.extend(
                    (first..(first + block_rows).min(n))
                        .map(|k| layout.position(p.level, p.rank, k)),
                );
            }
        }
        let top = layout.top();
        let n = layout.list_len(top, rank);
        let done = blocks_done
            .saturating_sub(own.len() as u64)
            .saturating_mul(block_rows)
            .min(n);
        out.extend((0..done).map(|k| layout.position(top, rank, k)));
        out
    }

    #[test]
    fn without_changes_rank_r_takes_every_wth_position() {
        let layout = EpochLayout::new(10, &[], 3).unwrap();
        assert_eq!(layout.top(), 0);
        assert_eq!(
            (0..3).map(|r| layout.list_len(0, r)).collect::<Vec<_>>(),
            [4, 3, 3]
        );
        assert_eq!(
            (0..4).map(|k| layout.position(0, 0, k)).collect::<Vec<_>>(),
            [0, 3, 6, 9]
        );
        assert_eq!(layout.position(0, 2, 2), 8);
    }

    #[test]
    fn a_change_deals_the_unread_rest_to_the_new_ranks() {
        // 2 ranks of 10 rows (lists 0 2 4 6 8 and 1 3 5 7 9), blocks of 2: rank 0 read
        // its first block and half of its second; rank 1 its first block.
        let old = vec![EpochChanges::default(); 2];
        let at = [
            Progress::At {
                block: 1,
                sequence: 3,
            },
            Progress::At {
                block: 1,
                sequence: 0,
            },
        ];
        let continued = continue_epoch(10, 2, &old, &at, 3).unwrap();
        let new: Vec<EpochChanges> = (0..3).map(|r| continued.for_rank(r)).collect();
        assert_eq!(
            new[0].reshards,
            [Reshard {
                shard_count: 2,
                consumed: vec![4, 2]
            }]
        );
        // Rank 0's block 1 (positions 4 and 6) is pending, sequence 3 on, with new rank 0.
        assert_eq!(
            new[0].pending,
            [PendingBlock {
                level: 0,
                rank: 0,
                block: 1,
                sequence: 3
            }]
        );
        assert!(new[1].pending.is_empty() && new[2].pending.is_empty());
        // L = [8, 5, 7, 9]: new rank 0 gets 8, 9; rank 1 gets 5; rank 2 gets 7.
        let layout = EpochLayout::new(10, &new[0].reshards, 3).unwrap();
        let lists: Vec<Vec<u64>> = (0..3)
            .map(|r| {
                (0..layout.list_len(1, r))
                    .map(|k| layout.position(1, r, k))
                    .collect()
            })
            .collect();
        assert_eq!(lists, [vec![8, 9], vec![5], vec![7]]);
        assert_eq!(layout.position(0, 0, 3), 6);
    }

    #[test]
    fn every_row_is_read_once_through_any_sequence_of_changes() {
        // Random progress through chains of rank counts, including a second and third
        // change in the same epoch, empty lists and ranks that finished or never began.
        let mut rng = crate::rng::CounterRng::new(5);
        for case in 0..300 {
            let rows = 1 + rng.below(200);
            let block_rows = 1 + rng.below(9);
            let mut count = 1 + rng.below(8);
            let mut changes = vec![EpochChanges::default(); count as usize];
            let mut read: Vec<u64> = Vec::new();
            for _change in 0..1 + rng.below(3) {
                let layout = EpochLayout::new(rows, &changes[0].reshards, count).unwrap();
                let top = layout.top();
                let progress: Vec<Progress> = (0..count)
                    .map(|r| {
                        let own = changes[r as usize].pending.len() as u64;
                        let blocks = own + layout.list_len(top, r).div_ceil(block_rows);
                        match rng.below(6) {
                            0 => Progress::Done,
                            1 => Progress::NotStarted,
                            _ => Progress::At {
                                block: rng.below(blocks + 2),
                                sequence: rng.below(3),
                            },
                        }
                    })
                    .collect();
                for (r, &at) in progress.iter().enumerate() {
                    read.extend(delivered(rows, block_rows, &changes, r as u64, at));
                }
                let new_count = 1 + rng.below(8);
                let continued =
                    continue_epoch(rows, block_rows, &changes, &progress, new_count).unwrap();
                changes = (0..new_count).map(|r| continued.for_rank(r)).collect();
                count = new_count;
                // Pending blocks are delivered whole here (their sequences are checked
                // in the dataset's tests): count their rows as unread.
            }
            let mut all = read;
            all.extend(remaining(rows, block_rows, &changes));
            all.sort_unstable();
            assert_eq!(all, (0..rows).collect::<Vec<_>>(), "case {case}");
        }
    }

    #[test]
    fn states_that_do_not_fit_are_refused() {
        let old = vec![EpochChanges::default(); 2];
        let at = [Progress::Done, Progress::Done];
        assert!(continue_epoch(10, 2, &old[..1], &at, 3).is_err());
        assert!(continue_epoch(10, 2, &old, &at, 0).is_err());
        let mut disagree = old.clone();
        disagree[1].reshards.push(Reshard {
            shard_count: 1,
            consumed: vec![0],
        });
        assert!(continue_epoch(10, 2, &disagree, &at, 3).is_err());
        let too_much = [Reshard {
            shard_count: 2,
            consumed: vec![6, 0],
        }];
        assert!(EpochLayout::new(10, &too_much, 1).is_err());
        let wrong_count = [Reshard {
            shard_count: 3,
            consumed: vec![0, 0],
        }];
        assert!(EpochLayout::new(10, &wrong_count, 1).is_err());
        let layout = EpochLayout::new(
            10,
            &[Reshard {
                shard_count: 2,
                consumed: vec![2, 0],
            }],
            3,
        )
        .unwrap();
        let ok = PendingBlock {
            level: 0,
            rank: 0,
            block: 0,
            sequence: 1,
        };
        layout.check_pending(&[ok], 2).unwrap();
        assert!(layout.check_pending(&[ok, ok], 2).is_err(), "listed twice");
        for bad in [
            PendingBlock { level: 1, ..ok },
            PendingBlock { rank: 1, ..ok },
            PendingBlock { block: 1, ..ok },
            PendingBlock { level: 2, ..ok },
            PendingBlock { rank: 2, ..ok },
            PendingBlock { block: 3, ..ok },
            PendingBlock {
                block: u64::MAX,
                ..ok
            },
        ] {
            assert!(layout.check_pending(&[bad], 2).is_err(), "{bad:?}");
        }
    }
}
