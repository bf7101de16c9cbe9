//! The training dataset: a split's shards → per-rank epoch order → blocks of rows →
//! contexts → packed sequences → batches, resumable from a small state.
//!
//! ```text
//! RowSource (mmap'd shards, global row index)
//!   epoch e: Permutation(rows, key(seed, e)); rank r of W takes positions r, r+W, …
//!   block b: block_rows consecutive positions → sample_row each (in parallel, keyed by
//!            (seed, e, row)) → contexts shuffled together → packed into sequences
//!   batches: the next batch_size sequences of the stream (blocks and epochs run on)
//! ```
//!
//! The stream is a pure function of the options, so its position, [`Position`]
//! `(epoch, block, sequence)` — the next sequence to hand out — is the whole iterator
//! state: restoring it rebuilds that block and continues with identical batches.
//! [`Loader::set_states`] continues from the states of *all* ranks of a run with another
//! number of ranks (elastic resume): the rest of each epoch they were in is dealt to the
//! new ranks by [`crate::epoch_layout`], partly delivered blocks included, so no row of
//! the epoch is read twice or skipped; the state then also holds those epochs' changes
//! (version 2). [`Loader::mixture`] reads several outputs ("sources") at once: one such
//! stream per source (`SourceStream`), and [`crate::mixture`] picks the source of each
//! sequence. The
//! [`Loader`] produces batches on a background thread (with its own rayon pool) into a
//! bounded channel; after `fork` the child starts a fresh producer from the last
//! delivered position instead of touching the parent's threads.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::array_record::{ArrayRecordReader, RecordBuf};
use crate::epoch_layout::{
    continue_epoch, list_len, EpochChanges, EpochLayout, PendingBlock, Progress,
};
use crate::error::{Error, Result};
use crate::mixture::{
    source_seed, LoaderState, MixtureSourceState, MixtureState, Weights, MIXTURE_STATE_VERSION,
};
use crate::output::ResolvedShard;
use crate::packing::{pack, Batch};
use crate::rng::{key, CounterRng, Permutation};
use crate::row::decode_row;
use crate::row_identity::rows_digest;
use crate::sampler::{sample_row_with, Contexts, SamplerOptions, SamplerScratch};

/// The shards of one split, with a global row index: rows are numbered shard after
/// shard in the order given. Local shards are opened (memory-mapped) at once; shards of
/// an output on an object store (feature `remote`) are fetched into the node's shard
/// cache and opened when first read, the shards of the blocks ahead prefetched.
pub struct RowSource {
    pub(crate) shards: Shards,
    /// First global row of each shard, plus the total at the end.
    pub(crate) starts: Vec<u64>,
    /// Each local shard's blake3 where its manifest gives it (a shard without one is
    /// hashed from its mapped bytes when the digest is first asked for); remote shards
    /// carry theirs.
    pub(crate) blake3: Vec<Option<String>>,
    /// Which rows these are ([`crate::row_identity`]), computed on first use: only a
    /// state needs it, and hashing shards without a manifest reads them whole.
    pub(crate) digest: OnceLock<String>,
}

pub(crate) enum Shards {
    Local(Vec<ArrayRecordReader>),
    #[cfg(feature = "remote")]
    Remote(Arc<crate::remote::RemoteShards>),
}

impl std::fmt::Debug for RowSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RowSource({} shards, {} rows)",
            self.num_shards(),
            self.len()
        )
    }
}

/// Where shards of outputs on object stores are cached, and how much they may take
/// (feature `remote`; defaults from the environment, see `remote::cache`).
#[derive(Debug, Clone, Default)]
pub struct CacheOptions {
    /// Default: `$PROBEFLOW_CACHE_DIR`, else `$XDG_CACHE_HOME/probeflow`, else
    /// `~/.cache/probeflow`.
    pub dir: Option<PathBuf>,
    /// Bytes; default: `$PROBEFLOW_CACHE_LIMIT`, else none (no eviction).
    pub limit: Option<u64>,
}

pub(crate) fn starts_of(rows: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut starts = vec![0u64];
    for r in rows {
        starts.push(starts[starts.len() - 1] + r);
    }
    starts
}

impl RowSource {
    /// The shard files of `split` named by `path`: a job's output directory (its
    /// `manifest.json`), a `manifest.json`, a glob of `.array_record` files (`*` in the
    /// file name), or one file, with the checks of [`crate::output::resolve`]. Files
    /// from a glob are sorted by name.
    pub fn resolve(path: &str, split: &str) -> Result<Vec<PathBuf>> {
        crate::output::resolve(&[path.to_string()], split, false)
    }

    /// Opens (memory-maps) the given shard files.
    pub fn open(files: &[PathBuf]) -> Result<Self> {
        let shards: Vec<ResolvedShard> = files
            .iter()
            .map(|f| ResolvedShard {
                path: f.clone(),
                blake3: None,
            })
            .collect();
        Self::open_resolved(&shards)
    }

    /// Opens (memory-maps) resolved shard files, keeping their manifest blake3s.
    pub fn open_resolved(files: &[ResolvedShard]) -> Result<Self> {
        let readers = files
            .iter()
            .map(|f| ArrayRecordReader::open(&f.path))
            .collect::<Result<Vec<_>>>()?;
        Ok(RowSource {
            starts: starts_of(readers.iter().map(|r| r.len())),
            shards: Shards::Local(readers),
            blake3: files.iter().map(|f| f.blake3.clone()).collect(),
            digest: OnceLock::new(),
        })
    }

    /// The shards of `split` that `paths` name: local paths as [`RowSource::resolve`]
    /// takes them (`verify`: every file checked against the manifest first), or one
    /// output on an object store (`s3://…`, `gs://…`, its root or `manifest.json`),
    /// read through the shard cache `cache` (`verify`: every cached file hashed again
    /// when first opened).
    pub fn open_paths(
        paths: &[String],
        split: &str,
        verify: bool,
        cache: &CacheOptions,
    ) -> Result<Self> {
        match crate::output::remote_output(paths)? {
            Some(url) => Self::open_remote(url, split, verify, cache),
            None => Self::open_resolved(&crate::output::resolve_shards(paths, split, verify)?),
        }
    }

    #[cfg(feature = "remote")]
    fn open_remote(url: &str, split: &str, verify: bool, cache: &CacheOptions) -> Result<Self> {
        let output = crate::remote::output::RemoteOutput::open(url)?;
        let shards = output.split(split)?;
        let blake3 = vec![None; shards.len()];
        let shards =
            crate::remote::RemoteShards::new(shards, output.bucket.clone(), cache.open(verify)?)?;
        Ok(RowSource {
            starts: starts_of(shards.rows()),
            shards: Shards::Remote(shards),
            blake3,
            digest: OnceLock::new(),
        })
    }

    #[cfg(not(feature = "remote"))]
    fn open_remote(url: &str, _: &str, _: bool, _: &CacheOptions) -> Result<Self> {
        Err(crate::output::no_remote(url))
    }

    pub fn len(&self) -> u64 {
        self.starts[self.starts.len() - 1]
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Which rows these are: the rows digest ([`crate::row_identity`]), from the
    /// manifest's blake3s, or for a local shard without one from its mapped bytes
    /// (hashed once, when first asked).
    pub fn digest(&self) -> &str {
        self.digest.get_or_init(|| {
            let hashes: Vec<String> = (0..self.num_shards())
                .map(|i| match (&self.blake3[i], &self.shards) {
                    (Some(known), _) => known.clone(),
                    (None, Shards::Local(readers)) => readers[i].content_blake3(),
                    #[cfg(feature = "remote")]
                    (None, Shards::Remote(remote)) => remote.blake3(i).to_string(),
                })
                .collect();
            let rows = self.starts.windows(2).map(|w| w[1] - w[0]);
            rows_digest(hashes.iter().map(String::as_str).zip(rows))
        })
    }

    pub fn num_shards(&self) -> usize {
        self.starts.len() - 1
    }

    /// The shard holding global row `row` (`row` < len).
    fn shard_of(&self, row: u64) -> usize {
        self.starts.partition_point(|&s| s <= row) - 1
    }

    /// Global row `row`'s bytes.
    pub fn read<'a>(&'a self, row: u64, buf: &'a mut RecordBuf) -> Result<&'a [u8]> {
        if row >= self.len() {
            return Err(Error::Input(format!(
                "row {row} out of range ({} rows)",
                self.len()
            )));
        }
        let shard = self.shard_of(row);
        let reader = match &self.shards {
            Shards::Local(readers) => &readers[shard],
            #[cfg(feature = "remote")]
            Shards::Remote(remote) => remote.get(shard)?,
        };
        reader.read(row - self.starts[shard], buf)
    }

    /// Starts fetching the shards holding `rows` (rows of the blocks ahead), when they
    /// are on an object store and not fetched yet.
    pub fn prefetch(&self, rows: &[u64]) {
        #[cfg(feature = "remote")]
        if let Shards::Remote(remote) = &self.shards {
            let mut shards: Vec<usize> = rows
                .iter()
                .filter(|&&r| r < self.len())
                .map(|&r| self.shard_of(r))
                .collect();
            shards.sort_unstable();
            shards.dedup();
            remote.prefetch(shards);
        }
        #[cfg(not(feature = "remote"))]
        let _ = rows;
    }

    /// Whether the shards are on an object store.
    pub fn is_remote(&self) -> bool {
        match &self.shards {
            Shards::Local(_) => false,
            #[cfg(feature = "remote")]
            Shards::Remote(_) => true,
        }
    }

    /// Shard `i`'s path or URL.
    pub fn shard_name(&self, i: usize) -> &str {
        match &self.shards {
            Shards::Local(readers) => readers[i].name(),
            #[cfg(feature = "remote")]
            Shards::Remote(remote) => remote.name(i),
        }
    }

    /// Every shard's path or URL, in row order.
    pub fn files(&self) -> Vec<String> {
        (0..self.num_shards())
            .map(|i| self.shard_name(i).to_string())
            .collect()
    }

    /// The file holding global row `row` (for error messages).
    pub fn file_of(&self, row: u64) -> &str {
        if self.num_shards() == 0 {
            return "";
        }
        let shard =
            (self.starts.partition_point(|&s| s <= row).max(1) - 1).min(self.num_shards() - 1);
        self.shard_name(shard)
    }
}

/// The options of a dataset iterator.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetOptions {
    pub batch_size: usize,
    pub seed: u64,
    /// This rank and the number of ranks (Grain's `shard_index` / `shard_count`).
    pub shard_index: u64,
    pub shard_count: u64,
    /// Pack several contexts per sequence (default) or one padded context per sequence.
    pub packing: bool,
    /// Rows whose contexts are shuffled and packed together.
    pub block_rows: usize,
    /// `None`: repeat forever.
    pub num_epochs: Option<u64>,
    /// At the end of the last epoch, drop a partial batch instead of padding it.
    pub drop_remainder: bool,
    /// Batches produced ahead on a background thread (0: produce on the caller's thread).
    pub prefetch: usize,
    /// Threads that sample a block's rows (1: the producer thread alone).
    pub num_threads: usize,
    pub sampler: SamplerOptions,
}

impl Default for DatasetOptions {
    fn default() -> Self {
        DatasetOptions {
            batch_size: 8,
            seed: 0,
            shard_index: 0,
            shard_count: 1,
            packing: true,
            block_rows: 256,
            num_epochs: None,
            drop_remainder: false,
            prefetch: 4,
            num_threads: default_threads(),
            sampler: SamplerOptions::default(),
        }
    }
}

/// Sampling threads when none are asked for: the cores this process may run on, at
/// most 4 (past that, the producer thread is the bottleneck).
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

impl DatasetOptions {
    pub fn check(&self) -> Result<()> {
        self.sampler.check()?;
        let bad = |w: String| Err(Error::Input(w));
        if self.batch_size == 0 {
            return bad("batch_size must be > 0".into());
        }
        if self.block_rows == 0 {
            return bad("block_rows must be > 0".into());
        }
        if self.shard_count == 0 || self.shard_index >= self.shard_count {
            return bad(format!(
                "shard_index {} must be in 0..shard_count ({})",
                self.shard_index, self.shard_count
            ));
        }
        Ok(())
    }
}

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
const STATE_VERSION: u32 = 1;
/// A state with epoch changes (after an elastic resume).
const STATE_VERSION_CHANGES: u32 = 2;

/// Epoch → this rank's share of the changes of that epoch.
type Changes = BTreeMap<u64, EpochChanges>;

/// The deterministic stream of sequences of one rank over one source (one output's
/// split): its epochs, blocks and packing.
struct SourceStream {
    source: Source,
    opts: Arc<DatasetOptions>,
    changes: Arc<Changes>,
    pos: Position,
    block: Option<BuiltBlock>,
    plan: Option<EpochPlan>,
}

/// The deterministic stream of batches of one rank: the sequences of one source, or of
/// several mixed by weight ([`crate::mixture`]).
struct BatchStream {
    sources: Vec<SourceStream>,
    /// A mixture's weights (the picks are keyed by the options' seed).
    mix: Option<Arc<Weights>>,
    /// Sequences taken so far (the next pick's index).
    picks: u64,
    opts: Arc<DatasetOptions>,
    pool: Option<rayon::ThreadPool>,
}

/// One source of a loader: an output's split, opened, and the seed of its stream.
#[derive(Clone)]
struct Source {
    /// As given (path or paths); empty for a loader of one output.
    name: String,
    rows: Arc<RowSource>,
    seed: u64,
}

/// Where every source's stream stands, and the next pick.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StreamPosition {
    sources: Vec<Position>,
    picks: u64,
}

/// What this rank reads in one epoch: its pending blocks (after a change of the number
/// of ranks), then the blocks of its list at the layout's top level.
struct EpochPlan {
    epoch: u64,
    layout: EpochLayout,
    pending: Vec<PendingBlock>,
    list_blocks: u64,
}

/// One block of a rank's stream: block `block` of `rank`'s list at `level`, where
/// `count` ranks share that level, handed out from sequence `start`.
#[derive(Debug, Clone, Copy)]
struct BlockRef {
    level: u32,
    rank: u64,
    count: u64,
    block: u64,
    start: u64,
}

impl EpochPlan {
    fn blocks(&self) -> u64 {
        self.pending.len() as u64 + self.list_blocks
    }

    fn block(&self, index: u64, rank: u64) -> BlockRef {
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
struct BlockContexts {
    runs: Vec<Contexts>,
    /// (run, index in the run) of each context id.
    at: Vec<(u32, u32)>,
}

impl BlockContexts {
    fn new(runs: Vec<Contexts>) -> Self {
        let at = runs
            .iter()
            .enumerate()
            .flat_map(|(r, c)| (0..c.len() as u32).map(move |i| (r as u32, i)))
            .collect();
        BlockContexts { runs, at }
    }

    fn len(&self) -> usize {
        self.at.len()
    }

    fn get(&self, id: u32) -> &[i32] {
        let (run, i) = self.at[id as usize];
        self.runs[run as usize].get(i as usize)
    }
}

struct BuiltBlock {
    epoch: u64,
    block: u64,
    /// The first sequence handed out (a pending block's undelivered rest).
    start: u64,
    contexts: BlockContexts,
    sequences: Vec<Vec<u32>>,
}

/// A position counter of a restored state at its limit (a damaged state).
fn counter_limit(what: &str) -> Error {
    Error::State(format!(
        "iterator state: {what} is at its limit (a damaged state)"
    ))
}

impl SourceStream {
    fn new(
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

    fn rows(&self) -> &RowSource {
        &self.source.rows
    }

    /// This rank's plan of `epoch` (kept for the current epoch).
    fn plan(&mut self, epoch: u64) -> Result<&EpochPlan> {
        self.ensure_plan(epoch)?;
        self.current_plan()
    }

    fn current_plan(&self) -> Result<&EpochPlan> {
        self.plan
            .as_ref()
            .ok_or_else(|| Error::Internal("no epoch plan for the current epoch".into()))
    }

    fn ensure_plan(&mut self, epoch: u64) -> Result<()> {
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
    fn rank_rows(&self) -> u64 {
        list_len(
            self.rows().len(),
            self.opts.shard_count,
            self.opts.shard_index,
        )
    }

    /// An error unless this rank has rows of this source in every epoch.
    fn check_rank_rows(&self) -> Result<()> {
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

    fn finished(&self) -> bool {
        self.opts.num_epochs.is_some_and(|e| self.pos.epoch >= e)
    }

    /// Samples, shuffles and packs block `block` of this rank's stream in `epoch`.
    /// `reuse`: the previous block's context buffers, cleared and filled again (no
    /// reallocation once they have grown).
    fn build(
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
    fn next_sequence(
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
    fn new(
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

    fn position(&self) -> StreamPosition {
        StreamPosition {
            sources: self.sources.iter().map(|s| s.pos).collect(),
            picks: self.picks,
        }
    }

    /// The next batch and the position after it; `None` at the end of a finite stream
    /// (of a mixture: when a picked source has ended).
    fn next_batch(&mut self) -> Result<Option<(Batch, StreamPosition)>> {
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

/// The first option `state` was taken with that differs from `mine`'s: (name, the
/// state's value, this iterator's). `same_ranks`: also the rank, the number of ranks and
/// the batch size (a restore on the same ranks).
fn first_difference(
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
fn check_rows(state: &IteratorState, mine: &IteratorState) -> Result<()> {
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

fn check_version(state: &IteratorState) -> Result<()> {
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
const MAX_EPOCH_SPREAD: u64 = 1024;

/// This rank's (`index` of `count`) changes of every epoch the ranks of `states` (one
/// per rank, in rank order) were in.
fn reshard_states(states: &[&IteratorState], index: u64, count: u64) -> Result<Changes> {
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

static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Call in a forked child (Python: `os.register_at_fork(after_in_child=…)`): loaders
/// then leave the parent's threads alone and start fresh producers.
pub fn note_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
}

type Produced = Result<Option<(Batch, StreamPosition)>>;

struct Producer {
    rx: Receiver<Produced>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

/// A rank's batches, produced in the background, resumable from its state: of one
/// output ([`Loader::new`], an [`IteratorState`]) or of a weighted mixture of several
/// ([`Loader::mixture`], a [`MixtureState`]).
pub struct Loader {
    sources: Vec<Source>,
    opts: Arc<DatasetOptions>,
    /// A mixture's weights (`None`: one output).
    weights: Option<Arc<Weights>>,
    /// Position after the last batch handed out.
    position: StreamPosition,
    /// Per source, the epochs re-dealt by an elastic resume (this rank's share).
    changes: Vec<Arc<Changes>>,
    producer: Option<Producer>,
    inline: Option<BatchStream>,
    generation: u64,
    exhausted: bool,
}

/// `e` with its message prefixed by `what` (for errors about one source of a mixture).
fn about(what: &str, e: Error) -> Error {
    match e {
        Error::Input(m) => Error::Input(format!("{what}: {m}")),
        Error::State(m) => Error::State(format!("{what}: {m}")),
        other => other,
    }
}

impl Loader {
    /// The batches of one output's split.
    pub fn new(rows: RowSource, opts: DatasetOptions) -> Result<Self> {
        let source = Source {
            name: String::new(),
            rows: Arc::new(rows),
            seed: opts.seed,
        };
        Self::with_sources(vec![source], None, opts)
    }

    /// The batches of a weighted mixture of several outputs' splits (`(name, rows)`,
    /// the name for people): each sequence comes from source `s` with probability
    /// `weights[s] / sum(weights)` (see [`crate::mixture`]). Each source has its own
    /// epochs (a small source with a large weight is repeated more often), its ranks
    /// are disjoint as for one output, and a finite stream (`num_epochs`) ends when a
    /// picked source has ended.
    pub fn mixture(
        sources: Vec<(String, RowSource)>,
        weights: Vec<f64>,
        opts: DatasetOptions,
    ) -> Result<Self> {
        if sources.is_empty() {
            return Err(Error::Input("a mixture needs at least one source".into()));
        }
        let weights = Weights::new(weights, sources.len())?;
        let sources = sources
            .into_iter()
            .enumerate()
            .map(|(i, (name, rows))| Source {
                name,
                rows: Arc::new(rows),
                seed: source_seed(opts.seed, i),
            })
            .collect();
        Self::with_sources(sources, Some(Arc::new(weights)), opts)
    }

    fn with_sources(
        sources: Vec<Source>,
        weights: Option<Arc<Weights>>,
        opts: DatasetOptions,
    ) -> Result<Self> {
        opts.check()?;
        for (i, s) in sources.iter().enumerate() {
            if s.rows.is_empty() {
                let e = Error::Input("the split has no rows".into());
                return Err(match weights {
                    None => e,
                    Some(_) => about(&format!("source {i} ({})", s.name), e),
                });
            }
        }
        let start = Position {
            epoch: 0,
            block: 0,
            sequence: 0,
        };
        Ok(Loader {
            position: StreamPosition {
                sources: vec![start; sources.len()],
                picks: 0,
            },
            changes: (0..sources.len())
                .map(|_| Arc::new(Changes::new()))
                .collect(),
            sources,
            opts: Arc::new(opts),
            weights,
            producer: None,
            inline: None,
            generation: FORK_GENERATION.load(Ordering::SeqCst),
            exhausted: false,
        })
    }

    pub fn options(&self) -> &DatasetOptions {
        &self.opts
    }

    /// Rows of every source, in order.
    pub fn source_rows(&self) -> Vec<u64> {
        self.sources.iter().map(|s| s.rows.len()).collect()
    }

    /// Rows of all sources together.
    pub fn num_rows(&self) -> u64 {
        self.source_rows().iter().sum()
    }

    /// A mixture's current weights; `None` for one output.
    pub fn weights(&self) -> Option<&[f64]> {
        self.weights.as_deref().map(Weights::as_slice)
    }

    /// The stream from the last delivered position.
    fn stream(&self) -> Result<BatchStream> {
        let sources = self
            .sources
            .iter()
            .zip(&self.changes)
            .zip(&self.position.sources)
            .map(|((source, changes), pos)| {
                SourceStream::new(source.clone(), self.opts.clone(), changes.clone(), *pos)
            })
            .collect();
        BatchStream::new(
            sources,
            self.weights.clone(),
            self.position.picks,
            self.opts.clone(),
        )
    }

    fn start_producer(&mut self) -> Result<()> {
        let (tx, rx): (SyncSender<Produced>, Receiver<Produced>) =
            std::sync::mpsc::sync_channel(self.opts.prefetch);
        let stop = Arc::new(AtomicBool::new(false));
        let mut stream = self.stream()?;
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("probeflow-producer".into())
            .spawn(move || loop {
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                let item = stream.next_batch();
                let end = !matches!(item, Ok(Some(_)));
                if tx.send(item).is_err() || end {
                    break;
                }
            })
            .map_err(|e| Error::Thread(format!("cannot start the producer thread: {e}")))?;
        self.producer = Some(Producer {
            rx,
            stop,
            handle: Some(handle),
        });
        Ok(())
    }

    fn stop_producer(&mut self) {
        if let Some(mut p) = self.producer.take() {
            p.stop.store(true, Ordering::Relaxed);
            // Unblocks a producer waiting on a full channel.
            drop(p.rx);
            if let Some(h) = p.handle.take() {
                let _ = h.join();
            }
        }
        self.inline = None;
    }

    /// After a fork the parent's threads do not exist here: forget them (never join or
    /// signal them) and continue from the last delivered position.
    fn check_fork(&mut self) {
        let g = FORK_GENERATION.load(Ordering::SeqCst);
        if g != self.generation {
            self.generation = g;
            if let Some(p) = self.producer.take() {
                std::mem::forget(p);
            }
            if let Some(s) = self.inline.take() {
                std::mem::forget(s);
            }
        }
    }

    /// The next batch; `None` at the end of a finite stream.
    pub fn next_batch(&mut self) -> Result<Option<Batch>> {
        self.check_fork();
        if self.exhausted {
            return Ok(None);
        }
        let item = if self.opts.prefetch == 0 {
            if self.inline.is_none() {
                self.inline = Some(self.stream()?);
            }
            match self.inline.as_mut() {
                Some(s) => s.next_batch(),
                None => Ok(None),
            }
        } else {
            if self.producer.is_none() {
                self.start_producer()?;
            }
            match self.producer.as_ref().map(|p| p.rx.recv()) {
                Some(Ok(item)) => item,
                _ => Err(Error::Thread(
                    "the batch producer thread stopped unexpectedly (it panicked)".into(),
                )),
            }
        };
        match item {
            Ok(Some((batch, pos))) => {
                self.position = pos;
                Ok(Some(batch))
            }
            Ok(None) => {
                self.exhausted = true;
                self.stop_producer();
                Ok(None)
            }
            Err(e) => {
                self.stop_producer();
                Err(e)
            }
        }
    }

    /// Source `i`'s state after the last batch handed out.
    fn source_state(&self, i: usize) -> IteratorState {
        let o = &self.opts;
        let pos = self.position.sources[i];
        let changes: Changes = self.changes[i]
            .range(pos.epoch..)
            .map(|(e, c)| (*e, c.clone()))
            .collect();
        IteratorState {
            version: if changes.is_empty() {
                STATE_VERSION
            } else {
                STATE_VERSION_CHANGES
            },
            epoch: pos.epoch,
            block: pos.block,
            sequence: pos.sequence,
            seed: self.sources[i].seed,
            shard_index: o.shard_index,
            shard_count: o.shard_count,
            rows: self.sources[i].rows.len(),
            rows_digest: self.sources[i].rows.digest().to_string(),
            seq_len: o.sampler.context_len,
            batch_size: o.batch_size,
            packing: o.packing,
            block_rows: o.block_rows,
            changes,
        }
    }

    /// The state after the last batch handed out: an [`IteratorState`] for one
    /// output, a [`MixtureState`] for a mixture.
    pub fn state(&self) -> LoaderState {
        let Some(weights) = &self.weights else {
            return self.source_state(0).into();
        };
        let o = &self.opts;
        MixtureState {
            version: MIXTURE_STATE_VERSION,
            seed: o.seed,
            shard_index: o.shard_index,
            shard_count: o.shard_count,
            batch_size: o.batch_size,
            picks: self.position.picks,
            sources: self
                .sources
                .iter()
                .enumerate()
                .map(|(i, s)| MixtureSourceState {
                    name: s.name.clone(),
                    weight: weights.as_slice()[i],
                    state: self.source_state(i),
                })
                .collect(),
        }
        .into()
    }

    /// Source `i`'s position and changes from `state`, checked against this loader.
    fn checked_source_state(&self, i: usize, state: &IteratorState) -> Result<(Position, Changes)> {
        let mine = self.source_state(i);
        check_version(state)?;
        check_rows(state, &mine)?;
        if let Some((what, a, b)) = first_difference(state, &mine, true) {
            return Err(Error::State(format!(
                "iterator state is for {what} = {a}, this iterator has {b}"
            )));
        }
        // The changes must fit this dataset (checked now, not at the epoch).
        for changes in state.changes.values() {
            EpochLayout::new(mine.rows, &changes.reshards, mine.shard_count)?
                .check_pending(&changes.pending, mine.block_rows as u64)?;
        }
        let pos = Position {
            epoch: state.epoch,
            block: state.block,
            sequence: state.sequence,
        };
        Ok((pos, state.changes.clone()))
    }

    /// What this loader is, for errors about a state of the other kind.
    fn kind(&self) -> String {
        match &self.weights {
            None => "this iterator reads one output".into(),
            Some(_) => format!(
                "this iterator is a mixture of {} sources",
                self.sources.len()
            ),
        }
    }

    /// Continues from `state` (prefetched batches are discarded). A mixture's state
    /// restores into a mixture of the same sources (same rows, in the same order)
    /// whatever its weights: every source continues where it was, and only the picks
    /// from now on follow the new weights.
    pub fn set_state(&mut self, state: &LoaderState) -> Result<()> {
        self.check_fork();
        let (sources, picks) = match (state, &self.weights) {
            (LoaderState::Single(s), None) => (vec![self.checked_source_state(0, s)?], 0),
            (LoaderState::Mixture(m), Some(_)) => (self.checked_mixture_state(m)?, m.picks),
            (LoaderState::Single(_), Some(_)) => {
                return Err(Error::State(format!(
                    "iterator state is of one output; {}",
                    self.kind()
                )))
            }
            (LoaderState::Mixture(m), None) => {
                return Err(Error::State(format!(
                    "iterator state is of a mixture of {} sources; {}",
                    m.sources.len(),
                    self.kind()
                )))
            }
        };
        self.stop_producer();
        let (positions, changes): (Vec<Position>, Vec<Changes>) = sources.into_iter().unzip();
        self.position = StreamPosition {
            sources: positions,
            picks,
        };
        self.changes = changes.into_iter().map(Arc::new).collect();
        self.exhausted = false;
        Ok(())
    }

    /// Refuses a mixture state of another version, other sources or another seed;
    /// `same_ranks`: also of another rank, number of ranks or batch size (a restore on
    /// the same ranks).
    fn check_mixture_header(&self, m: &MixtureState, same_ranks: bool) -> Result<()> {
        let o = &self.opts;
        if m.version != MIXTURE_STATE_VERSION {
            return Err(Error::State(format!(
                "mixture state is for state version = {}, this iterator has \
                 {MIXTURE_STATE_VERSION}",
                m.version
            )));
        }
        if m.sources.len() != self.sources.len() {
            return Err(Error::State(format!(
                "mixture state is of {} sources; {}",
                m.sources.len(),
                self.kind()
            )));
        }
        if m.sources
            .iter()
            .any(|s| (s.state.shard_index, s.state.shard_count) != (m.shard_index, m.shard_count))
        {
            return Err(Error::State(
                "mixture state: its sources' states are of other ranks than the mixture's \
                 (a damaged state)"
                    .into(),
            ));
        }
        let pair = |a: &dyn ToString, b: &dyn ToString| (a.to_string(), b.to_string());
        let fields = [
            ("seed", pair(&m.seed, &o.seed), false),
            ("shard_index", pair(&m.shard_index, &o.shard_index), true),
            ("shard_count", pair(&m.shard_count, &o.shard_count), true),
            ("batch_size", pair(&m.batch_size, &o.batch_size), true),
        ];
        match fields
            .into_iter()
            .filter(|(_, _, placement)| same_ranks || !placement)
            .find(|(_, (a, b), _)| a != b)
        {
            Some((what, (a, b), _)) => Err(Error::State(format!(
                "mixture state is for {what} = {a}, this iterator has {b}"
            ))),
            None => Ok(()),
        }
    }

    fn checked_mixture_state(&self, m: &MixtureState) -> Result<Vec<(Position, Changes)>> {
        self.check_mixture_header(m, true)?;
        m.sources
            .iter()
            .enumerate()
            .map(|(i, s)| {
                self.checked_source_state(i, &s.state).map_err(|e| {
                    about(
                        &format!(
                            "source {i} ({}, state taken on {})",
                            self.sources[i].name, s.name
                        ),
                        e,
                    )
                })
            })
            .collect()
    }

    /// Changes a mixture's weights from the position after the last batch handed out
    /// (prefetched batches are discarded): every source continues where it was.
    pub fn set_weights(&mut self, weights: Vec<f64>) -> Result<()> {
        self.check_fork();
        if self.weights.is_none() {
            return Err(Error::Input(format!(
                "set_weights: {}, not a mixture",
                self.kind()
            )));
        }
        let weights = Weights::new(weights, self.sources.len())?;
        self.stop_producer();
        self.weights = Some(Arc::new(weights));
        self.exhausted = false;
        Ok(())
    }

    /// Continues from the states of **every** rank of a run (any number of ranks, one
    /// state each, in any order) — the elastic resume. With as many ranks as this
    /// iterator's `shard_count`, it is [`Loader::set_state`] of this rank's state. With
    /// another number, the rest of each epoch those ranks were in (each may be in its
    /// own epoch) is dealt to the new ranks: no row of those epochs is read twice or
    /// skipped, and a block a rank had partly delivered is rebuilt from the same keys
    /// for its undelivered sequences. Costs O(old ranks + new ranks). The seed, rows,
    /// sequence length, packing and block rows must be the same; the batch size may
    /// differ (positions count sequences, not batches). A mixture does this source by
    /// source; its picks start again from 0 after a change of the number of ranks.
    pub fn set_states(&mut self, states: &[LoaderState]) -> Result<()> {
        self.check_fork();
        let bad = |what: String| Err(Error::State(format!("iterator states: {what}")));
        if self.weights.is_none() {
            let mut singles = Vec::with_capacity(states.len());
            for s in states {
                match s {
                    LoaderState::Single(s) => singles.push(s),
                    LoaderState::Mixture(m) => {
                        return bad(format!(
                            "a state is of a mixture of {} sources; {}",
                            m.sources.len(),
                            self.kind()
                        ))
                    }
                }
            }
            let resumed = self.resumed_source_state(0, &singles)?;
            return self.set_state(&resumed.into());
        }
        let mut mixtures = Vec::with_capacity(states.len());
        for s in states {
            match s {
                LoaderState::Mixture(m) => {
                    self.check_mixture_header(m, false)
                        .map_err(|e| about("iterator states", e))?;
                    mixtures.push(m)
                }
                LoaderState::Single(_) => {
                    return bad(format!("a state is of one output; {}", self.kind()))
                }
            }
        }
        let Some(first) = mixtures.first() else {
            return bad("none given".into());
        };
        let o = self.opts.clone();
        let mut sources = Vec::with_capacity(self.sources.len());
        for i in 0..self.sources.len() {
            let states: Vec<&IteratorState> =
                mixtures.iter().map(|m| &m.sources[i].state).collect();
            let resumed = self
                .resumed_source_state(i, &states)
                .map_err(|e| about(&format!("source {i} ({})", self.sources[i].name), e))?;
            sources.push(MixtureSourceState {
                name: first.sources[i].name.clone(),
                weight: first.sources[i].weight,
                state: resumed,
            });
        }
        // The picks go on where they were on the same ranks, and start afresh on others.
        let picks = if first.shard_count == o.shard_count {
            mixtures
                .iter()
                .find(|m| m.shard_index == o.shard_index)
                .map_or(0, |m| m.picks)
        } else {
            0
        };
        let resumed = MixtureState {
            version: MIXTURE_STATE_VERSION,
            seed: first.seed,
            shard_index: o.shard_index,
            shard_count: o.shard_count,
            batch_size: o.batch_size,
            picks,
            sources,
        };
        self.set_state(&resumed.into())
    }

    /// The state source `i` continues from after the elastic resume from `states` (one
    /// per old rank, in any order).
    fn resumed_source_state(&self, i: usize, states: &[&IteratorState]) -> Result<IteratorState> {
        let mine = self.source_state(i);
        let bad = |what: String| Err(Error::State(format!("iterator states: {what}")));
        let Some(first) = states.first() else {
            return bad("none given".into());
        };
        let count = first.shard_count;
        let mut by_rank: Vec<Option<&IteratorState>> = vec![None; states.len()];
        for s in states {
            check_version(s)?;
            if s.shard_count != count || s.shard_count != states.len() as u64 {
                return bad(format!(
                    "{} states, for {} and {} ranks: give the state of every rank of one \
                     checkpoint",
                    states.len(),
                    count,
                    s.shard_count
                ));
            }
            let slot = &mut by_rank[s.shard_index.min(count - 1) as usize];
            if s.shard_index >= count || slot.is_some() {
                return bad(format!(
                    "rank {} given twice or out of range",
                    s.shard_index
                ));
            }
            *slot = Some(s);
            check_rows(s, &mine).map_err(|e| about("iterator states", e))?;
            if let Some((what, a, b)) = first_difference(s, &mine, false) {
                return bad(format!(
                    "a state is for {what} = {a}, this iterator has {b}"
                ));
            }
        }
        let by_rank: Vec<&IteratorState> = by_rank.into_iter().flatten().collect();
        if count == mine.shard_count {
            let own = by_rank[mine.shard_index as usize];
            return Ok(IteratorState {
                batch_size: mine.batch_size,
                ..own.clone()
            });
        }
        let changes = reshard_states(&by_rank, mine.shard_index, mine.shard_count)?;
        let epoch = by_rank.iter().map(|s| s.epoch).min().unwrap_or(0);
        Ok(IteratorState {
            version: STATE_VERSION_CHANGES,
            epoch,
            block: 0,
            sequence: 0,
            changes,
            ..mine
        })
    }

    /// Stops the background producer.
    pub fn close(&mut self) {
        self.check_fork();
        self.stop_producer();
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::array_record::{ArrayRecordWriter, WriterOptions};
    use crate::row::{encode_row, Measurement, RttCode};

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
}
