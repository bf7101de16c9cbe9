//! The batch stream of one source: epochs planned from the seed, blocks of rows
//! sampled (in parallel) into contexts, packed into sequences; and the stream of
//! batches over one source or a mixture.

use std::sync::Arc;

use crate::array_record::RecordBuf;
use crate::epoch_layout::{list_len, EpochChanges, EpochLayout, PendingBlock};
use crate::error::{Error, Result};
use crate::mixture::Weights;
use crate::packing::{pack, Batch};
use crate::rng::{key, CounterRng, Permutation};
use crate::row::decode_row;
use crate::sampler::{sample_row_with, Contexts, SamplerScratch};

use super::{options::*, source::*, state::*};

/// The deterministic stream of sequences of one rank over one source (one output's
/// split): its epochs, blocks and packing.
pub(super) struct SourceStream {
    pub(super) source: Source,
    pub(super) opts: Arc<DatasetOptions>,
    pub(super) changes: Arc<Changes>,
    pub(super) pos: Position,
    pub(super) block: Option<BuiltBlock>,
    pub(super) plan: Option<EpochPlan>,
}

/// The deterministic stream of batches of one rank: the sequences of one source, or of
/// several mixed by weight ([`crate::mixture`]).
pub(super) struct BatchStream {
    pub(super) sources: Vec<SourceStream>,
    /// A mixture's weights (the picks are keyed by the options' seed).
    pub(super) mix: Option<Arc<Weights>>,
    /// Sequences taken so far (the next pick's index).
    pub(super) picks: u64,
    pub(super) opts: Arc<DatasetOptions>,
    pub(super) pool: Option<rayon::ThreadPool>,
}

/// One source of a loader: an output's split, opened, and the seed of its stream.
#[derive(Clone)]
pub(super) struct Source {
    /// As given (path or paths); empty for a loader of one output.
    pub(super) name: String,
    pub(super) rows: Arc<RowSource>,
    pub(super) seed: u64,
}

/// Where every source's stream stands, and the next pick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StreamPosition {
    pub(super) sources: Vec<Position>,
    pub(super) picks: u64,
}

/// What this rank reads in one epoch: its pending blocks (after a change of the number
/// of ranks), then the blocks of its list at the layout's top level.
pub(super) struct EpochPlan {
    pub(super) epoch: u64,
    pub(super) layout: EpochLayout,
    pub(super) pending: Vec<PendingBlock>,
    pub(super) list_blocks: u64,
}

/// One block of a rank's stream: block `block` of `rank`'s list at `level`, where
/// `count` ranks share that level, handed out from sequence `start`.
#[derive(Debug, Clone, Copy)]
pub(super) struct BlockRef {
    pub(super) level: u32,
    pub(super) rank: u64,
    pub(super) count: u64,
    pub(super) block: u64,
    pub(super) start: u64,
}

impl EpochPlan {
    pub(super) fn blocks(&self) -> u64 {
        self.pending.len() as u64 + self.list_blocks
    }

    pub(super) fn block(&self, index: u64, rank: u64) -> BlockRef {
        match self.pending.get(index as usize) {
            Some(p) => BlockRef {
                level: p.level,
                rank: p.rank,
                count: self.layout.count(p.level),
                block: p.block,
                start: p.sequence,
            },
            None => {
                let top = self.layout.top();
                BlockRef {
                    level: top,
                    rank,
                    count: self.layout.count(top),
                    block: index - self.pending.len() as u64,
                    start: 0,
                }
            }
        }
    }
}

/// A block's contexts: the runs of rows sampled together, and where each context is.
pub(super) struct BlockContexts {
    pub(super) runs: Vec<Contexts>,
    /// (run, index in the run) of each context id.
    pub(super) at: Vec<(u32, u32)>,
}

impl BlockContexts {
    pub(super) fn new(runs: Vec<Contexts>) -> Self {
        let at = runs
            .iter()
            .enumerate()
            .flat_map(|(r, c)| (0..c.len() as u32).map(move |i| (r as u32, i)))
            .collect();
        BlockContexts { runs, at }
    }

    pub(super) fn len(&self) -> usize {
        self.at.len()
    }

    pub(super) fn get(&self, id: u32) -> &[i32] {
        let (run, i) = self.at[id as usize];
        self.runs[run as usize].get(i as usize)
    }
}

pub(super) struct BuiltBlock {
    pub(super) epoch: u64,
    pub(super) block: u64,
    /// The first sequence handed out (a pending block's undelivered rest).
    pub(super) start: u64,
    pub(super) contexts: BlockContexts,
    pub(super) sequences: Vec<Vec<u32>>,
}

/// A position counter of a restored state at its limit (a damaged state).
pub(super) fn counter_limit(what: &str) -> Error {
    Error::State(format!(
        "iterator state: {what} is at its limit (a damaged state)"
    ))
}

impl SourceStream {
    pub(super) fn new(
        source: Source,
        opts: Arc<DatasetOptions>,
        changes: Arc<Changes>,
        pos: Position,
    ) -> Self {
        SourceStream {
            source,
            opts,
            changes,
            pos,
            block: None,
            plan: None,
        }
    }

    pub(super) fn rows(&self) -> &RowSource {
        &self.source.rows
    }

    /// This rank's plan of `epoch` (kept for the current epoch).
    pub(super) fn plan(&mut self, epoch: u64) -> Result<&EpochPlan> {
        self.ensure_plan(epoch)?;
        self.current_plan()
    }

    pub(super) fn current_plan(&self) -> Result<&EpochPlan> {
        self.plan
            .as_ref()
            .ok_or_else(|| Error::Internal("no epoch plan for the current epoch".into()))
    }

    pub(super) fn ensure_plan(&mut self, epoch: u64) -> Result<()> {
        if self.plan.as_ref().is_none_or(|p| p.epoch != epoch) {
            let o = &self.opts;
            let none = EpochChanges::default();
            let changes = self.changes.get(&epoch).unwrap_or(&none);
            let layout = EpochLayout::new(self.rows().len(), &changes.reshards, o.shard_count)?;
            let list = layout.list_len(layout.top(), o.shard_index);
            self.plan = Some(EpochPlan {
                epoch,
                layout,
                pending: changes.pending.clone(),
                list_blocks: list.div_ceil(o.block_rows as u64),
            });
        }
        Ok(())
    }

    /// Rows of this rank per epoch (an epoch without changes).
    pub(super) fn rank_rows(&self) -> u64 {
        list_len(
            self.rows().len(),
            self.opts.shard_count,
            self.opts.shard_index,
        )
    }

    /// An error unless this rank has rows of this source in every epoch.
    pub(super) fn check_rank_rows(&self) -> Result<()> {
        if self.rank_rows() > 0 {
            return Ok(());
        }
        let o = &self.opts;
        let of = if self.source.name.is_empty() {
            String::new()
        } else {
            format!(" of source {}", self.source.name)
        };
        Err(Error::Input(format!(
            "rank {} of {} has no rows: the split{of} has only {} rows",
            o.shard_index,
            o.shard_count,
            self.rows().len()
        )))
    }

    pub(super) fn finished(&self) -> bool {
        self.opts.num_epochs.is_some_and(|e| self.pos.epoch >= e)
    }

    /// Samples, shuffles and packs block `block` of this rank's stream in `epoch`.
    /// `reuse`: the previous block's context buffers, cleared and filled again (no
    /// reallocation once they have grown).
    pub(super) fn build(
        &mut self,
        pool: Option<&rayon::ThreadPool>,
        epoch: u64,
        block: u64,
        reuse: Vec<Contexts>,
    ) -> Result<BuiltBlock> {
        self.ensure_plan(epoch)?;
        let plan = self.current_plan()?;
        let o = &self.opts;
        let seed = self.source.seed;
        let source = &self.source.rows;
        let at = plan.block(block, o.shard_index);
        let perm = Permutation::new(source.len(), key(&[seed, epoch, 0x7065_726d]));
        let rows_of = |at: &BlockRef| -> Vec<u64> {
            let first = at.block * o.block_rows as u64;
            let last = (first + o.block_rows as u64).min(plan.layout.list_len(at.level, at.rank));
            (first..last)
                .map(|k| perm.get(plan.layout.position(at.level, at.rank, k)))
                .collect()
        };
        let rows = rows_of(&at);
        if source.is_remote() {
            // This block's shards fetched several at once, and the next block's while
            // this one is sampled.
            source.prefetch(&rows);
            if block + 1 < plan.blocks() {
                source.prefetch(&rows_of(&plan.block(block + 1, o.shard_index)));
            }
        }
        // Rows are sampled in runs, each into its own `Contexts`; context ids count
        // through the runs in row order, whatever the number of threads.
        let sample_run = |buf: &mut RecordBuf,
                          scratch: &mut SamplerScratch,
                          out: &mut Contexts,
                          run: &[u64]|
         -> Result<()> {
            out.clear();
            for &row in run {
                let bytes = source.read(row, buf)?;
                let view = decode_row(bytes).map_err(|e| {
                    Error::Input(format!("{}: row {row}: {e}", source.file_of(row)))
                })?;
                sample_row_with(&view, [seed, epoch, row], &o.sampler, scratch, out);
            }
            Ok(())
        };
        let threads = pool.map_or(1, |p| p.current_num_threads());
        let run_len = if threads > 1 {
            rows.len().div_ceil(4 * threads).max(1)
        } else {
            rows.len().max(1)
        };
        let mut runs = reuse;
        runs.resize_with(rows.len().div_ceil(run_len), Contexts::default);
        match pool {
            Some(pool) => {
                use rayon::prelude::*;
                pool.install(|| {
                    runs.par_iter_mut()
                        .zip(rows.par_chunks(run_len))
                        .try_for_each_init(
                            || (RecordBuf::new(), SamplerScratch::default()),
                            |(buf, scratch), (out, run)| sample_run(buf, scratch, out, run),
                        )
                })?
            }
            None => {
                let (mut buf, mut scratch) = (RecordBuf::new(), SamplerScratch::default());
                for (out, run) in runs.iter_mut().zip(rows.chunks(run_len)) {
                    sample_run(&mut buf, &mut scratch, out, run)?;
                }
            }
        }
        let contexts = BlockContexts::new(runs);
        // The block's own keys: the same whichever rank rebuilds it (level 0 keeps the
        // keys of the streams before elastic resume existed).
        let mut rng = if at.level == 0 {
            CounterRng::from_parts(&[seed, epoch, at.rank, at.count, at.block, 0x626c6b])
        } else {
            CounterRng::from_parts(&[
                seed,
                epoch,
                at.rank,
                at.count,
                at.block,
                u64::from(at.level),
                0x626c6b,
            ])
        };
        let mut order: Vec<u32> = (0..contexts.len() as u32).collect();
        rng.shuffle(&mut order);
        let lengths: Vec<usize> = (0..contexts.len())
            .map(|i| contexts.get(i as u32).len())
            .collect();
        let mut sequences = pack(&lengths, &order, o.sampler.context_len, o.packing);
        // Packing groups by length; the batches should not.
        rng.shuffle(&mut sequences);
        if at.start > sequences.len() as u64 {
            return Err(Error::State(format!(
                "iterator state: pending block {} of rank {} at level {} has {} sequences, \
                 not {} delivered",
                at.block,
                at.rank,
                at.level,
                sequences.len(),
                at.start
            )));
        }
        Ok(BuiltBlock {
            epoch,
            block,
            start: at.start,
            contexts,
            sequences,
        })
    }

    /// Appends this source's next sequence to `batch`; `false` (nothing appended) at
    /// the end of a finite stream.
    pub(super) fn next_sequence(
        &mut self,
        pool: Option<&rayon::ThreadPool>,
        batch: &mut Batch,
    ) -> Result<bool> {
        loop {
            if self.finished() {
                return Ok(false);
            }
            if self.pos.block >= self.plan(self.pos.epoch)?.blocks() {
                self.pos = Position {
                    epoch: self
                        .pos
                        .epoch
                        .checked_add(1)
                        .ok_or_else(|| counter_limit("epoch"))?,
                    block: 0,
                    sequence: 0,
                };
                continue;
            }
            let current = self
                .block
                .as_ref()
                .is_some_and(|b| b.epoch == self.pos.epoch && b.block == self.pos.block);
            if !current {
                let reuse = self
                    .block
                    .take()
                    .map(|b| b.contexts.runs)
                    .unwrap_or_default();
                self.block = Some(self.build(pool, self.pos.epoch, self.pos.block, reuse)?);
            }
            let Some(b) = self.block.as_ref() else {
                continue;
            };
            self.pos.sequence = self.pos.sequence.max(b.start);
            match b.sequences.get(self.pos.sequence as usize) {
                Some(ids) => {
                    batch.push_sequence(ids.iter().map(|&c| b.contexts.get(c)));
                    self.pos.sequence += 1;
                    return Ok(true);
                }
                None => {
                    self.pos.block += 1;
                    self.pos.sequence = 0;
                }
            }
        }
    }
}

impl BatchStream {
    pub(super) fn new(
        sources: Vec<SourceStream>,
        mix: Option<Arc<Weights>>,
        picks: u64,
        opts: Arc<DatasetOptions>,
    ) -> Result<Self> {
        for s in &sources {
            s.check_rank_rows()?;
        }
        let pool = if opts.num_threads > 1 {
            Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(opts.num_threads)
                    .thread_name(|i| format!("probeflow-sampler-{i}"))
                    .build()
                    .map_err(|e| Error::Thread(format!("cannot start sampler threads: {e}")))?,
            )
        } else {
            None
        };
        Ok(BatchStream {
            sources,
            mix,
            picks,
            opts,
            pool,
        })
    }

    pub(super) fn position(&self) -> StreamPosition {
        StreamPosition {
            sources: self.sources.iter().map(|s| s.pos).collect(),
            picks: self.picks,
        }
    }

    /// The next batch and the position after it; `None` at the end of a finite stream
    /// (of a mixture: when a picked source has ended).
    pub(super) fn next_batch(&mut self) -> Result<Option<(Batch, StreamPosition)>> {
        let o = self.opts.clone();
        let mut batch = Batch::new(o.batch_size, o.sampler.context_len);
        let mut filled = 0;
        while filled < o.batch_size {
            let source = match &self.mix {
                None => 0,
                Some(w) => w.pick(o.seed, o.shard_index, o.shard_count, self.picks),
            };
            if !self.sources[source].next_sequence(self.pool.as_ref(), &mut batch)? {
                break;
            }
            self.picks = self
                .picks
                .checked_add(1)
                .ok_or_else(|| counter_limit("picks"))?;
            filled += 1;
        }
        if filled == 0 || (filled < o.batch_size && o.drop_remainder) {
            return Ok(None);
        }
        Ok(Some((batch, self.position())))
    }
}
