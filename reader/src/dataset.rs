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
//! state: restoring it rebuilds that block and continues with identical batches. The
//! [`Loader`] produces batches on a background thread (with its own rayon pool) into a
//! bounded channel; after `fork` the child starts a fresh producer from the last
//! delivered position instead of touching the parent's threads.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::array_record::{ArrayRecordReader, RecordBuf};
use crate::error::{Error, Result};
use crate::packing::{pack, Batch};
use crate::rng::{key, CounterRng, Permutation};
use crate::row::decode_row;
use crate::sampler::{sample_row_with, Contexts, SamplerOptions, SamplerScratch};

/// The shards of one split, opened (memory-mapped), with a global row index: rows are
/// numbered shard after shard in the order given.
pub struct RowSource {
    readers: Vec<ArrayRecordReader>,
    /// First global row of each shard, plus the total at the end.
    starts: Vec<u64>,
}

impl std::fmt::Debug for RowSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RowSource({} shards, {} rows)",
            self.readers.len(),
            self.len()
        )
    }
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
        let mut readers = Vec::with_capacity(files.len());
        let mut starts = vec![0u64];
        for f in files {
            let r = ArrayRecordReader::open(f)?;
            starts.push(starts[starts.len() - 1] + r.len());
            readers.push(r);
        }
        Ok(RowSource { readers, starts })
    }

    pub fn len(&self) -> u64 {
        self.starts[self.starts.len() - 1]
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn num_shards(&self) -> usize {
        self.readers.len()
    }

    /// Global row `row`'s bytes.
    pub fn read<'a>(&'a self, row: u64, buf: &'a mut RecordBuf) -> Result<&'a [u8]> {
        if row >= self.len() {
            return Err(Error::Input(format!(
                "row {row} out of range ({} rows)",
                self.len()
            )));
        }
        let shard = self.starts.partition_point(|&s| s <= row) - 1;
        self.readers[shard].read(row - self.starts[shard], buf)
    }

    /// The file holding global row `row` (for error messages).
    pub fn file_of(&self, row: u64) -> &str {
        let shard = (self.starts.partition_point(|&s| s <= row).max(1) - 1)
            .min(self.readers.len().saturating_sub(1));
        self.readers.get(shard).map_or("", |r| r.name())
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
            num_threads: 2,
            sampler: SamplerOptions::default(),
        }
    }
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
    pub seq_len: usize,
    pub batch_size: usize,
    pub packing: bool,
    pub block_rows: usize,
}

const STATE_VERSION: u32 = 1;

/// The deterministic stream of batches of one rank.
struct BatchStream {
    rows: Arc<RowSource>,
    opts: Arc<DatasetOptions>,
    pos: Position,
    block: Option<BuiltBlock>,
    pool: Option<rayon::ThreadPool>,
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
    contexts: BlockContexts,
    sequences: Vec<Vec<u32>>,
}

impl BatchStream {
    fn new(rows: Arc<RowSource>, opts: Arc<DatasetOptions>, pos: Position) -> Result<Self> {
        let pool = if opts.num_threads > 1 {
            Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(opts.num_threads)
                    .thread_name(|i| format!("probeflow-sampler-{i}"))
                    .build()
                    .map_err(|e| Error::Input(format!("cannot start sampler threads: {e}")))?,
            )
        } else {
            None
        };
        Ok(BatchStream {
            rows,
            opts,
            pos,
            block: None,
            pool,
        })
    }

    /// Rows of this rank per epoch.
    fn rank_rows(&self) -> u64 {
        let (n, w, r) = (
            self.rows.len(),
            self.opts.shard_count,
            self.opts.shard_index,
        );
        if n > r {
            (n - r).div_ceil(w)
        } else {
            0
        }
    }

    fn blocks_per_epoch(&self) -> u64 {
        self.rank_rows().div_ceil(self.opts.block_rows as u64)
    }

    fn finished(&self) -> bool {
        self.opts.num_epochs.is_some_and(|e| self.pos.epoch >= e)
    }

    /// Samples, shuffles and packs one block. `reuse`: the previous block's context
    /// buffers, cleared and filled again (no reallocation once they have grown).
    fn build(&self, epoch: u64, block: u64, reuse: Vec<Contexts>) -> Result<BuiltBlock> {
        let o = &self.opts;
        let perm = Permutation::new(self.rows.len(), key(&[o.seed, epoch, 0x7065_726d]));
        let first = block * o.block_rows as u64;
        let last = (first + o.block_rows as u64).min(self.rank_rows());
        let rows: Vec<u64> = (first..last)
            .map(|p| perm.get(o.shard_index + p * o.shard_count))
            .collect();
        // Rows are sampled in runs, each into its own `Contexts`; context ids count
        // through the runs in row order, whatever the number of threads.
        let sample_run = |buf: &mut RecordBuf,
                          scratch: &mut SamplerScratch,
                          out: &mut Contexts,
                          run: &[u64]|
         -> Result<()> {
            out.clear();
            for &row in run {
                let bytes = self.rows.read(row, buf)?;
                let view = decode_row(bytes).map_err(|e| {
                    Error::Input(format!("{}: row {row}: {e}", self.rows.file_of(row)))
                })?;
                sample_row_with(&view, [o.seed, epoch, row], &o.sampler, scratch, out);
            }
            Ok(())
        };
        let threads = self.pool.as_ref().map_or(1, |p| p.current_num_threads());
        let run_len = if threads > 1 {
            rows.len().div_ceil(4 * threads).max(1)
        } else {
            rows.len().max(1)
        };
        let mut runs = reuse;
        runs.resize_with(rows.len().div_ceil(run_len), Contexts::default);
        match &self.pool {
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
        let mut rng =
            CounterRng::from_parts(&[o.seed, epoch, o.shard_index, o.shard_count, block, 0x626c6b]);
        let mut order: Vec<u32> = (0..contexts.len() as u32).collect();
        rng.shuffle(&mut order);
        let lengths: Vec<usize> = (0..contexts.len())
            .map(|i| contexts.get(i as u32).len())
            .collect();
        let mut sequences = pack(&lengths, &order, o.sampler.context_len, o.packing);
        // Packing groups by length; the batches should not.
        rng.shuffle(&mut sequences);
        Ok(BuiltBlock {
            epoch,
            block,
            contexts,
            sequences,
        })
    }

    /// The next batch and the position after it; `None` at the end of a finite stream.
    fn next_batch(&mut self) -> Result<Option<(Batch, Position)>> {
        let o = self.opts.clone();
        let blocks = self.blocks_per_epoch();
        if blocks == 0 {
            return Err(Error::Input(format!(
                "rank {} of {} has no rows: the split has only {} rows",
                o.shard_index,
                o.shard_count,
                self.rows.len()
            )));
        }
        let mut batch = Batch::new(o.batch_size, o.sampler.context_len);
        let mut filled = 0;
        while filled < o.batch_size {
            if self.pos.block >= blocks {
                self.pos = Position {
                    epoch: self.pos.epoch + 1,
                    block: 0,
                    sequence: 0,
                };
            }
            if self.finished() {
                break;
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
                self.block = Some(self.build(self.pos.epoch, self.pos.block, reuse)?);
            }
            let Some(b) = self.block.as_ref() else {
                continue;
            };
            match b.sequences.get(self.pos.sequence as usize) {
                Some(ids) => {
                    batch.push_sequence(ids.iter().map(|&c| b.contexts.get(c)));
                    filled += 1;
                    self.pos.sequence += 1;
                }
                None => {
                    self.pos.block += 1;
                    self.pos.sequence = 0;
                }
            }
        }
        if filled == 0 || (filled < o.batch_size && o.drop_remainder) {
            return Ok(None);
        }
        Ok(Some((batch, self.pos)))
    }
}

static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Call in a forked child (Python: `os.register_at_fork(after_in_child=…)`): loaders
/// then leave the parent's threads alone and start fresh producers.
pub fn note_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
}

type Produced = Result<Option<(Batch, Position)>>;

struct Producer {
    rx: Receiver<Produced>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

/// A rank's batches, produced in the background, resumable from [`IteratorState`].
pub struct Loader {
    rows: Arc<RowSource>,
    opts: Arc<DatasetOptions>,
    /// Position after the last batch handed out.
    position: Position,
    producer: Option<Producer>,
    inline: Option<BatchStream>,
    generation: u64,
    exhausted: bool,
}

impl Loader {
    pub fn new(rows: RowSource, opts: DatasetOptions) -> Result<Self> {
        opts.check()?;
        if rows.is_empty() {
            return Err(Error::Input("the split has no rows".into()));
        }
        Ok(Loader {
            rows: Arc::new(rows),
            opts: Arc::new(opts),
            position: Position {
                epoch: 0,
                block: 0,
                sequence: 0,
            },
            producer: None,
            inline: None,
            generation: FORK_GENERATION.load(Ordering::SeqCst),
            exhausted: false,
        })
    }

    pub fn options(&self) -> &DatasetOptions {
        &self.opts
    }

    pub fn rows(&self) -> &RowSource {
        &self.rows
    }

    fn start_producer(&mut self) -> Result<()> {
        let (tx, rx): (SyncSender<Produced>, Receiver<Produced>) =
            std::sync::mpsc::sync_channel(self.opts.prefetch);
        let stop = Arc::new(AtomicBool::new(false));
        let mut stream = BatchStream::new(self.rows.clone(), self.opts.clone(), self.position)?;
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
            .map_err(|e| Error::Input(format!("cannot start the producer thread: {e}")))?;
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
                self.inline = Some(BatchStream::new(
                    self.rows.clone(),
                    self.opts.clone(),
                    self.position,
                )?);
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
                _ => Err(Error::Input(
                    "the batch producer stopped unexpectedly".into(),
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

    /// The state after the last batch handed out.
    pub fn state(&self) -> IteratorState {
        let o = &self.opts;
        IteratorState {
            version: STATE_VERSION,
            epoch: self.position.epoch,
            block: self.position.block,
            sequence: self.position.sequence,
            seed: o.seed,
            shard_index: o.shard_index,
            shard_count: o.shard_count,
            rows: self.rows.len(),
            seq_len: o.sampler.context_len,
            batch_size: o.batch_size,
            packing: o.packing,
            block_rows: o.block_rows,
        }
    }

    /// Continues from `state` (prefetched batches are discarded).
    pub fn set_state(&mut self, state: &IteratorState) -> Result<()> {
        self.check_fork();
        let mine = self.state();
        let differs = |what: &str, a: String, b: String| {
            Err(Error::Input(format!(
                "iterator state is for {what} = {a}, this iterator has {b}"
            )))
        };
        if state.version != STATE_VERSION {
            return differs(
                "state version",
                state.version.to_string(),
                STATE_VERSION.to_string(),
            );
        }
        let checks: [(&str, String, String); 8] = [
            ("seed", state.seed.to_string(), mine.seed.to_string()),
            (
                "shard_index",
                state.shard_index.to_string(),
                mine.shard_index.to_string(),
            ),
            (
                "shard_count",
                state.shard_count.to_string(),
                mine.shard_count.to_string(),
            ),
            ("rows", state.rows.to_string(), mine.rows.to_string()),
            (
                "seq_len",
                state.seq_len.to_string(),
                mine.seq_len.to_string(),
            ),
            (
                "batch_size",
                state.batch_size.to_string(),
                mine.batch_size.to_string(),
            ),
            (
                "packing",
                state.packing.to_string(),
                mine.packing.to_string(),
            ),
            (
                "block_rows",
                state.block_rows.to_string(),
                mine.block_rows.to_string(),
            ),
        ];
        for (what, a, b) in checks {
            if a != b {
                return differs(what, a, b);
            }
        }
        self.stop_producer();
        self.position = Position {
            epoch: state.epoch,
            block: state.block,
            sequence: state.sequence,
        };
        self.exhausted = false;
        Ok(())
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
mod tests {
    use super::*;
    use crate::array_record::{ArrayRecordWriter, WriterOptions};
    use crate::row::{encode_row, Measurement, RttCode};

    /// Two shards of rows with sizes from 1 to 2000 measurements.
    fn shards(dir: &std::path::Path) -> Vec<PathBuf> {
        let mut rng = CounterRng::new(11);
        let mut files = Vec::new();
        for s in 0..2 {
            let path = dir.join(format!("shard-{s}.array_record"));
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
                    format!("2001:db8::{:x}", s * 100 + r + 1)
                } else {
                    format!("10.{s}.0.{r}")
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

    fn loader(files: &[PathBuf], f: impl FnOnce(&mut DatasetOptions)) -> Loader {
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
        Loader::new(RowSource::open(files).unwrap(), o).unwrap()
    }

    fn take(l: &mut Loader, n: usize) -> Vec<Batch> {
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
                let s = BatchStream::new(
                    Arc::new(RowSource::open(&files).unwrap()),
                    o.clone(),
                    Position {
                        epoch: 0,
                        block: 0,
                        sequence: 0,
                    },
                )
                .unwrap();
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
