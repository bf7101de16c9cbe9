//! An external sort of fixed-width records: how a reduce orders a partition, in memory
//! when it fits and through sorted runs on local scratch when it does not.
//!
//! ```text
//! push ─► buffer (7/8 of the sort's memory) ── full the first time ──► sorted; its last
//!          │                  eighth of the memory's records a run file, the rest kept
//!          │                  in memory, sorted: the resident run
//!          └──────────────── full again ──► the records since, sorted, a run file
//! finish ─► no run spilled: the buffer, sorted, from memory
//!        └► runs spilled:   the records since the last spill sorted and kept as the
//!                           last run; a k-way merge of it and the run files (each read
//!                           a block at a time), merged with the resident run
//! ```
//!
//! So a partition past the memory writes and merges through the heap about its excess
//! (and one scatter buffer's worth), not the whole buffer: the cost of a spill grows
//! with the excess instead of jumping where a partition stops fitting. A record of the
//! resident run costs one comparison with the heap's smallest.
//!
//! The in-memory sort is a most-significant-byte-first radix sort ([`radix_level`]) into
//! a scatter buffer, down to buckets small enough to sort by comparison; it skips the
//! bytes every record of a bucket shares (the address padding, the high bytes of times)
//! at the cost of one pass. The scatter buffer takes an eighth of the memory: records
//! that outnumber it are first permuted into their buckets in place ([`sort_in_place`]),
//! until each bucket fits it. So a partition of up to 7/8 of the memory never spills.
//!
//! Records equal under `Ord` must be the same bytes ([`SortRecord`]): the sorted
//! sequence is then a pure function of the multiset of records pushed, whatever their
//! arrival order, the memory given and how many runs were spilled. Memory is bounded:
//! the two buffers take the sort's memory; a merge keeps the first (the resident and the
//! last run) and gives each spilled run's reader an equal share of the scatter buffer's
//! eighth.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{EngineError, Result};

/// A record the sort orders: a `Copy + Ord` value with a fixed-width encoding.
///
/// Two records equal under `Ord` must encode to the same bytes.
pub trait SortRecord: Copy + Ord {
    /// The width of the encoding, in bytes.
    const BYTES: usize;
    /// The record encoded in `bytes` (exactly [`Self::BYTES`] long).
    fn decode(bytes: &[u8]) -> Self;
    /// Writes the encoding into `out` (exactly [`Self::BYTES`] long).
    fn encode(&self, out: &mut [u8]);
    /// The encoding as big-endian words (the last padded with zero bytes), at most
    /// [`MAX_WORDS`] of them: records compare as their words do, first to last.
    fn words(&self) -> &[u64];
}

/// The most words a record may have ([`SortRecord::words`]).
pub const MAX_WORDS: usize = 8;

/// Byte `i` of a record's encoding.
#[inline]
fn byte_of<R: SortRecord>(r: &R, i: usize) -> u8 {
    (r.words()[i / 8] >> (56 - 8 * (i % 8))) as u8
}

/// Sorts `records`, which all share their bytes before `depth`, most significant byte
/// first, with `scratch` (as long) to scatter into, leaving them where `to` says. One pass counts the records by byte
/// `depth` and ORs together how every record differs from the first (XOR of the words):
/// the first set bit is the first byte not every record shares, so bytes all records
/// share (address padding, the high bytes of times) are skipped at no cost, and counted
/// again only when byte `depth` was one of them. The records are scattered by that byte
/// into `scratch` in arrival order, and each bucket is sorted the same way from the next
/// byte, a bucket of at most [`SMALL_BUCKET`] records by comparison. The two buffers
/// swap roles at every level, so records are not copied back level by level: only a
/// bucket sorted by comparison is copied, once, to where its sorted records belong.
fn radix_level<R: SortRecord>(records: &mut [R], scratch: &mut [R], depth: usize, to: ResultIn) {
    let n = records.len();
    if n <= SMALL_BUCKET || depth >= R::BYTES {
        records.sort_unstable();
        if to == ResultIn::Scratch {
            scratch.copy_from_slice(records);
        }
        return;
    }
    let Some((depth, counts)) = histogram(records, depth) else {
        // Every record is the same: sorted as they are.
        if to == ResultIn::Scratch {
            scratch.copy_from_slice(records);
        }
        return;
    };
    let mut next = bucket_starts(&counts);
    for r in records.iter() {
        let slot = &mut next[byte_of(r, depth) as usize];
        scratch[*slot] = *r;
        *slot += 1;
    }
    // The buckets are in `scratch` now, each sorted there with its part of `records`
    // as its scratch: wanted in `scratch` that is in place for the bucket, and wanted
    // in `records` it is the bucket's scratch.
    let bucket_to = match to {
        ResultIn::Records => ResultIn::Scratch,
        ResultIn::Scratch => ResultIn::Records,
    };
    let mut start = 0;
    for &c in &counts {
        let end = start + c;
        if c > 1 {
            radix_level(
                &mut scratch[start..end],
                &mut records[start..end],
                depth + 1,
                bucket_to,
            );
        } else if c == 1 && to == ResultIn::Records {
            records[start] = scratch[start];
        }
        start = end;
    }
}

/// Where a level of [`radix_level`] leaves its sorted records.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ResultIn {
    /// In the records' own buffer.
    Records,
    /// In the other buffer (the scratch given).
    Scratch,
}

/// The first byte at or after `depth` that not every record of `records` shares, and
/// the records counted by it; `None` when every record is the same. One pass counts the
/// records by byte `depth` and ORs together how every record differs from the first
/// (XOR of the words); a second counts again only when byte `depth` was shared.
fn histogram<R: SortRecord>(records: &[R], depth: usize) -> Option<(usize, [usize; 256])> {
    let first = records.first()?;
    let first = first.words();
    let mut differs = [0u64; MAX_WORDS];
    let mut counts = [0usize; 256];
    for r in records {
        counts[byte_of(r, depth) as usize] += 1;
        for ((d, w), f) in differs.iter_mut().zip(r.words()).zip(first) {
            *d |= w ^ f;
        }
    }
    let word = (depth / 8..first.len()).find(|&w| differs[w] != 0)?;
    let next_depth = word * 8 + differs[word].leading_zeros() as usize / 8;
    if next_depth != depth {
        counts = [0; 256];
        for r in records {
            counts[byte_of(r, next_depth) as usize] += 1;
        }
    }
    Some((next_depth, counts))
}

/// Where each bucket of `counts` starts.
fn bucket_starts(counts: &[usize; 256]) -> [usize; 256] {
    let mut starts = [0usize; 256];
    let mut start = 0;
    for (s, &c) in starts.iter_mut().zip(counts) {
        *s = start;
        start += c;
    }
    starts
}

/// Sorts `records` (sharing their bytes before `depth`) in their own buffer with a
/// scratch buffer that may be shorter than they are. Records that fit `scratch` are
/// sorted by [`radix_level`]; more are first permuted into their buckets by their first
/// byte not all share, in place (each record swapped straight to its bucket's next free
/// slot: an American flag sort's level), and each bucket is sorted the same way.
fn sort_in_place<R: SortRecord>(records: &mut [R], scratch: &mut [R], depth: usize) {
    let n = records.len();
    if n <= scratch.len() {
        return radix_level(records, &mut scratch[..n], depth, ResultIn::Records);
    }
    if n <= SMALL_BUCKET || depth >= R::BYTES {
        return records.sort_unstable();
    }
    let Some((depth, counts)) = histogram(records, depth) else {
        return;
    };
    let starts = bucket_starts(&counts);
    let mut next = starts;
    for b in 0..256 {
        let end = starts[b] + counts[b];
        while next[b] < end {
            let mut r = records[next[b]];
            let mut to = byte_of(&r, depth) as usize;
            while to != b {
                std::mem::swap(&mut r, &mut records[next[to]]);
                next[to] += 1;
                to = byte_of(&r, depth) as usize;
            }
            records[next[b]] = r;
            next[b] += 1;
        }
    }
    for (&start, &c) in starts.iter().zip(&counts) {
        if c > 1 {
            sort_in_place(&mut records[start..start + c], scratch, depth + 1);
        }
    }
}

/// A bucket of at most this many records is sorted by comparison, not by its next byte.
const SMALL_BUCKET: usize = 64;

/// The read buffer of one run in a merge, at least and at most.
const RUN_READ_MIN: usize = 64 << 10;
const RUN_READ_MAX: usize = 8 << 20;

/// The bytes of records a spill encodes and writes at once.
const RUN_WRITE: usize = 1 << 20;

/// The scatter buffer takes 1 / `SCATTER_SHARE` of a sort's memory, the records the
/// rest: a partition of up to 7/8 of the memory sorts without a spill.
const SCATTER_SHARE: usize = 8;

/// The two record buffers of an [`ExternalSort`], kept by a worker from one sort to the
/// next ([`ExternalSort::with_buffers`], [`Sorted::into_buffers`]): a sort reuses their
/// memory instead of faulting in fresh pages for every partition.
pub struct SortBuffers<R> {
    buffer: Vec<R>,
    scattered: Vec<R>,
}

impl<R> Default for SortBuffers<R> {
    fn default() -> Self {
        SortBuffers {
            buffer: Vec::new(),
            scattered: Vec::new(),
        }
    }
}

/// An external sort of `R`s under a memory limit, spilling to a scratch directory.
pub struct ExternalSort<R: SortRecord> {
    dir: PathBuf,
    memory: usize,
    /// Records held before the buffer is sorted and spilled.
    capacity: usize,
    buffer: Vec<R>,
    /// The first `resident` records of `buffer` are sorted: what the first spill kept
    /// in memory (none before it). The records after them arrived since the last spill.
    resident: usize,
    /// The scatter target of the radix pass (kept between runs), at most
    /// `scatter_capacity` records.
    scattered: Vec<R>,
    scatter_capacity: usize,
    runs: Vec<Run>,
    records: u64,
}

/// A sorted run on scratch.
struct Run {
    path: PathBuf,
    records: u64,
}

impl<R: SortRecord> ExternalSort<R> {
    /// A sort that holds at most `memory` bytes of records and writes its runs into
    /// `dir` (which must exist; the caller removes it).
    pub fn new(dir: &Path, memory: usize) -> Self {
        Self::with_buffers(dir, memory, SortBuffers::default())
    }

    /// Like [`ExternalSort::new`], reusing `buffers` (emptied; their capacity beyond what
    /// `memory` allows is given back).
    pub fn with_buffers(dir: &Path, memory: usize, buffers: SortBuffers<R>) -> Self {
        let record = size_of::<R>().max(1);
        let scatter_memory = memory / SCATTER_SHARE;
        let capacity = ((memory - scatter_memory) / record).max(1);
        let scatter_capacity = (scatter_memory / record).max(1);
        let SortBuffers {
            mut buffer,
            mut scattered,
        } = buffers;
        buffer.clear();
        buffer.shrink_to(capacity);
        // The scatter target keeps its length (any records will do: every one is
        // overwritten before it is read), so a sort does not fill it again.
        scattered.truncate(scatter_capacity);
        scattered.shrink_to(scatter_capacity);
        ExternalSort {
            dir: dir.to_path_buf(),
            memory,
            capacity,
            buffer,
            resident: 0,
            scattered,
            scatter_capacity,
            runs: Vec::new(),
            records: 0,
        }
    }

    /// The records pushed so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The runs spilled so far.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Adds one record.
    pub fn push(&mut self, record: R) -> Result<()> {
        if self.buffer.len() == self.buffer.capacity() {
            if self.buffer.len() >= self.capacity {
                self.spill()?;
            } else {
                // Grown by doubling, but never past the capacity the memory allows.
                let want = (self.buffer.capacity() * 2).max(1024).min(self.capacity);
                self.buffer.reserve_exact(want - self.buffer.len());
            }
        }
        self.buffer.push(record);
        self.records += 1;
        Ok(())
    }

    /// Every record pushed, in order.
    pub fn finish(mut self) -> Result<Sorted<R>> {
        self.sort_from(self.resident);
        if self.runs.is_empty() {
            return Ok(Sorted {
                source: Source::Memory {
                    records: self.buffer,
                    next: 0,
                },
                scattered: self.scattered,
            });
        }
        // The records since the last spill stay in the buffer, sorted, as the merge's
        // last run (never written and read back), behind the resident run; the scatter
        // buffer's share of the memory goes to the spilled runs' readers.
        drop(std::mem::take(&mut self.scattered));
        let share =
            (self.memory / SCATTER_SHARE / self.runs.len()).clamp(RUN_READ_MIN, RUN_READ_MAX);
        let mut readers = Vec::with_capacity(self.runs.len());
        let mut heap = BinaryHeap::with_capacity(self.runs.len() + 1);
        for run in self.runs {
            let file = File::open(&run.path).map_err(|e| scratch_error(&run.path, e))?;
            let mut reader = RunReader {
                file,
                path: run.path,
                left: run.records,
                block: vec![0; share.max(R::BYTES)],
                start: 0,
                end: 0,
            };
            if let Some(first) = reader.next::<R>()? {
                heap.push(Reverse((first, readers.len())));
            }
            readers.push(reader);
        }
        if let Some(&first) = self.buffer.get(self.resident) {
            heap.push(Reverse((first, readers.len())));
        }
        Ok(Sorted {
            source: Source::Merge {
                readers,
                resident: 0..self.resident,
                next: self.resident + 1,
                in_memory: self.buffer,
                heap,
            },
            scattered: Vec::new(),
        })
    }

    /// Sorts the buffer's records from `start` in their place ([`sort_in_place`], with
    /// the scatter buffer: as long as they are, or its share's most).
    fn sort_from(&mut self, start: usize) {
        let records = &mut self.buffer[start..];
        let n = records.len();
        if n <= SMALL_BUCKET {
            records.sort_unstable();
            return;
        }
        let scatter = n.min(self.scatter_capacity);
        if self.scattered.len() < scatter {
            self.scattered.reserve_exact(scatter - self.scattered.len());
            self.scattered.resize(scatter, records[0]);
        }
        sort_in_place(records, &mut self.scattered[..scatter], 0);
    }

    /// Makes room in the full buffer: the first time, sorts it whole and spills its
    /// last [`Self::scatter_capacity`] records, keeping the rest as the resident run;
    /// later, sorts and spills the records that arrived since.
    fn spill(&mut self) -> Result<()> {
        let from = if self.runs.is_empty() {
            self.sort_from(0);
            self.resident = self.buffer.len().saturating_sub(self.scatter_capacity);
            self.resident
        } else {
            self.sort_from(self.resident);
            self.resident
        };
        self.write_run(from)?;
        self.buffer.truncate(from);
        Ok(())
    }

    /// Writes the buffer's sorted records from `from` as a new run (counted in
    /// [`SPILLED_BYTES`]).
    fn write_run(&mut self, from: usize) -> Result<()> {
        let records = &self.buffer[from..];
        let path = self.dir.join(format!("run-{:05}", self.runs.len()));
        let mut file = File::create(&path).map_err(|e| scratch_error(&path, e))?;
        // Encoded a block of records at a time, each block written in one call.
        let per_block = (RUN_WRITE / R::BYTES).max(1);
        let mut block = vec![0; per_block * R::BYTES];
        for chunk in records.chunks(per_block) {
            let bytes = &mut block[..chunk.len() * R::BYTES];
            for (r, out) in chunk.iter().zip(bytes.chunks_exact_mut(R::BYTES)) {
                r.encode(out);
            }
            file.write_all(bytes).map_err(|e| scratch_error(&path, e))?;
            SPILLED_BYTES.fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        self.runs.push(Run {
            path,
            records: records.len() as u64,
        });
        Ok(())
    }
}

/// The bytes this process's sorts have spilled to their scratch disks (a worker's
/// `probeflow_worker_spilled_bytes_total`).
pub static SPILLED_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn scratch_error(path: &Path, source: std::io::Error) -> EngineError {
    EngineError::Scratch {
        path: path.display().to_string(),
        source,
    }
}

/// The sorted records of an [`ExternalSort`], read with [`Sorted::next_record`].
pub struct Sorted<R> {
    source: Source<R>,
    /// The sort's second buffer, handed back by [`Sorted::into_buffers`].
    scattered: Vec<R>,
}

enum Source<R> {
    Memory {
        records: Vec<R>,
        next: usize,
    },
    Merge {
        readers: Vec<RunReader>,
        /// The resident run's records in `in_memory` not yet read (merged with the
        /// heap's smallest, outside it).
        resident: std::ops::Range<usize>,
        /// The resident run, then the last run, never spilled (run number
        /// `readers.len()` in the heap), and the index of the last run's next record not
        /// yet in the heap.
        in_memory: Vec<R>,
        next: usize,
        /// The smallest unread record of each run that has one, with its run.
        heap: BinaryHeap<Reverse<(R, usize)>>,
    },
}

impl<R: SortRecord> Sorted<R> {
    /// The sort's buffers, for the next sort (after a merge, only the first: the merge
    /// freed the second).
    pub fn into_buffers(self) -> SortBuffers<R> {
        match self.source {
            Source::Memory { records, .. } => SortBuffers {
                buffer: records,
                scattered: self.scattered,
            },
            Source::Merge { in_memory, .. } => SortBuffers {
                buffer: in_memory,
                scattered: Vec::new(),
            },
        }
    }

    /// The next record in order; `None` after the last.
    pub fn next_record(&mut self) -> Result<Option<R>> {
        match &mut self.source {
            Source::Memory { records, next } => {
                let r = records.get(*next).copied();
                *next += 1;
                Ok(r)
            }
            Source::Merge {
                readers,
                resident,
                in_memory,
                next,
                heap,
            } => {
                if let Some(&r) = in_memory[..resident.end].get(resident.start) {
                    if heap
                        .peek()
                        .is_none_or(|Reverse((smallest, _))| r <= *smallest)
                    {
                        resident.start += 1;
                        return Ok(Some(r));
                    }
                }
                let Some(mut top) = heap.peek_mut() else {
                    return Ok(None);
                };
                let Reverse((smallest, run)) = *top;
                let following = match readers.get_mut(run) {
                    Some(reader) => reader.next::<R>()?,
                    None => {
                        let r = in_memory.get(*next).copied();
                        *next += 1;
                        r
                    }
                };
                // The run's next record takes its place at the top (one sift, not a pop
                // and a push).
                match following {
                    Some(r) => *top = Reverse((r, run)),
                    None => {
                        std::collections::binary_heap::PeekMut::pop(top);
                    }
                }
                Ok(Some(smallest))
            }
        }
    }
}

/// One spilled run being merged, read a block at a time.
struct RunReader {
    file: File,
    path: PathBuf,
    /// Records not yet read.
    left: u64,
    /// Bytes read ahead: the unread ones are `block[start..end]`.
    block: Vec<u8>,
    start: usize,
    end: usize,
}

impl RunReader {
    fn next<R: SortRecord>(&mut self) -> Result<Option<R>> {
        if self.left == 0 {
            return Ok(None);
        }
        if self.end - self.start < R::BYTES {
            self.refill(R::BYTES)
                .map_err(|e| scratch_error(&self.path, e))?;
        }
        let r = R::decode(&self.block[self.start..self.start + R::BYTES]);
        self.start += R::BYTES;
        self.left -= 1;
        Ok(Some(r))
    }

    /// Moves the unread bytes to the front and reads until at least `want` are there.
    fn refill(&mut self, want: usize) -> std::io::Result<()> {
        self.block.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
        while self.end < want {
            match self.file.read(&mut self.block[self.end..])? {
                0 => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("the run ends {} records early", self.left),
                    ))
                }
                n => self.end += n,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 6-byte record: a 48-bit number in the high bytes of its word, so that its
    /// byte order is its `Ord`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    struct Six([u64; 1]);

    fn six(n: u64) -> Six {
        Six([n << 16])
    }

    impl SortRecord for Six {
        const BYTES: usize = 6;
        fn decode(bytes: &[u8]) -> Self {
            let mut b = [0u8; 8];
            b[..6].copy_from_slice(bytes);
            Six([u64::from_be_bytes(b)])
        }
        fn encode(&self, out: &mut [u8]) {
            out.copy_from_slice(&self.0[0].to_be_bytes()[..6]);
        }
        fn words(&self) -> &[u64] {
            &self.0
        }
    }

    fn records(n: usize, seed: u64) -> Vec<Six> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                // Few distinct radixes and many duplicates, as a partition has.
                six(((s % 300) << 32) | ((s >> 32) % 50_000))
            })
            .collect()
    }

    fn sorted_with(memory: usize, input: &[Six]) -> (Vec<Six>, usize) {
        let dir = tempfile::tempdir().unwrap();
        let mut sort = ExternalSort::<Six>::new(dir.path(), memory);
        for r in input {
            sort.push(*r).unwrap();
        }
        assert_eq!(sort.records(), input.len() as u64);
        let runs = sort.runs();
        let mut out = sort.finish().unwrap();
        let mut got = Vec::new();
        while let Some(r) = out.next_record().unwrap() {
            got.push(r);
        }
        (got, runs)
    }

    #[test]
    fn a_sort_given_memory_for_fewer_than_1024_records_spills_instead_of_panicking() {
        // 1 KiB: 112 records of 8 bytes in the buffer, 16 in the scatter buffer: the
        // first spill keeps 96 resident, each later one spills the 16 since.
        let input = records(1000, 5);
        let mut want = input.clone();
        want.sort();
        let (got, runs) = sorted_with(1 << 10, &input);
        assert_eq!(runs, 1 + (1000 - 112) / 16);
        assert_eq!(got, want);
    }

    #[test]
    fn in_memory_radix_and_small_sorts_give_the_total_order() {
        for n in [0, 1, 1000, 200_000] {
            let input = records(n, 7);
            let mut want = input.clone();
            want.sort();
            let (got, runs) = sorted_with(1 << 30, &input);
            assert_eq!(runs, 0);
            assert_eq!(got, want, "{n} records");
        }
    }

    #[test]
    fn spilled_runs_merge_to_the_same_order_whatever_the_memory() {
        let input = records(300_000, 11);
        let mut want = input.clone();
        want.sort();
        // 8 bytes a record in memory: 64 KiB holds 7 168 records a run.
        for memory in [64 << 10, 512 << 10, 2 << 20] {
            let (got, runs) = sorted_with(memory, &input);
            assert!(runs > 0, "{memory}: expected runs on scratch");
            assert_eq!(got, want, "memory {memory}");
        }
    }

    #[test]
    fn the_last_run_is_merged_from_memory_and_its_buffer_kept_for_the_next_sort() {
        let input = records(10_000, 3);
        let mut want = input.clone();
        want.sort();
        let dir = tempfile::tempdir().unwrap();
        // 32 KiB: 3 584 records in the buffer and 512 in the scatter buffer, so the
        // first spill keeps 3 072 resident and writes 512, and 12 more of 512 each leave
        // 272 in the buffer.
        let mut sort = ExternalSort::<Six>::new(dir.path(), 32 << 10);
        for r in &input {
            sort.push(*r).unwrap();
        }
        assert_eq!(sort.runs(), 13);
        let mut out = sort.finish().unwrap();
        // Only the spilled runs are on scratch: the resident and the last were not
        // written.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 13);
        let mut got = Vec::new();
        while let Some(r) = out.next_record().unwrap() {
            got.push(r);
        }
        assert_eq!(got, want);
        let buffers = out.into_buffers();
        assert!(
            buffers.buffer.capacity() >= 3072 + 272,
            "{}",
            buffers.buffer.capacity()
        );
        assert!(buffers.scattered.capacity() == 0);
    }

    /// A partition of up to 7/8 of the memory is sorted in memory: the scatter buffer
    /// takes an eighth, and the records' buckets larger than it are first permuted in
    /// place. (A scatter buffer as large as the records made a partition of more than
    /// half the memory spill, and the reduce write and read it back.)
    #[test]
    fn records_of_up_to_seven_eighths_of_the_memory_sort_without_a_spill() {
        let memory = 8 << 20;
        let fits = memory * 7 / 8 / size_of::<Six>();
        // Skewed as a partition with one long history is: four in five records share
        // their first bytes (one source), and buckets below it still outgrow the
        // scatter buffer, so in-place levels nest.
        let mut input = records(fits / 5, 13);
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        input.extend((input.len()..fits).map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            six((301 << 32) | (s >> 40))
        }));
        let mut want = input.clone();
        want.sort();
        let dir = tempfile::tempdir().unwrap();
        let mut sort = ExternalSort::<Six>::new(dir.path(), memory);
        for r in &input {
            sort.push(*r).unwrap();
        }
        assert_eq!(
            sort.runs(),
            0,
            "{} records of {} bytes spilled",
            fits,
            memory
        );
        let mut out = sort.finish().unwrap();
        let mut got = Vec::with_capacity(fits);
        while let Some(r) = out.next_record().unwrap() {
            got.push(r);
        }
        assert_eq!(got, want);
        let buffers = out.into_buffers();
        let scatter_bytes = buffers.scattered.capacity() * size_of::<Six>();
        let record_bytes = buffers.buffer.capacity() * size_of::<Six>();
        assert!(scatter_bytes <= memory / 8, "{scatter_bytes}");
        assert!(
            scatter_bytes + record_bytes <= memory,
            "{scatter_bytes} + {record_bytes}"
        );
    }

    /// A partition just past what sorts in memory spills about its excess, not the
    /// whole buffer: the cost of a spill grows with the excess over the memory instead
    /// of jumping where a partition stops fitting. (A full buffer was written whole as
    /// a run and every record merged through the heap: at 2 GiB a reduce, ~1.5 GB more
    /// to write and read for one record too many.)
    #[test]
    fn a_partition_just_past_the_memory_spills_about_its_excess() {
        let memory = 1 << 20;
        let fits = memory * 7 / 8 / size_of::<Six>();
        let scatter = memory / 8 / size_of::<Six>();
        for excess in [1, 1000, scatter + 1, 3 * scatter] {
            let input = records(fits + excess, 19);
            let mut want = input.clone();
            want.sort();
            let dir = tempfile::tempdir().unwrap();
            let mut sort = ExternalSort::<Six>::new(dir.path(), memory);
            for r in &input {
                sort.push(*r).unwrap();
            }
            let spilled: u64 = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|f| f.unwrap().metadata().unwrap().len())
                .sum();
            let spilled_records = spilled as usize / Six::BYTES;
            assert!(
                spilled_records <= scatter + excess,
                "{excess} records past the memory: {spilled_records} spilled"
            );
            let mut out = sort.finish().unwrap();
            let mut got = Vec::with_capacity(input.len());
            while let Some(r) = out.next_record().unwrap() {
                got.push(r);
            }
            assert_eq!(got, want, "{excess} records past the memory");
        }
    }

    #[test]
    fn sorting_in_place_with_any_scratch_gives_the_total_order() {
        for (n, scratch) in [
            (1000, 1),
            (5000, 64),
            (5000, 65),
            (100_000, 700),
            (100_000, 99_999),
        ] {
            let mut input = records(n, 17);
            let mut want = input.clone();
            want.sort();
            let mut buffer = vec![six(0); scratch];
            sort_in_place(&mut input, &mut buffer, 0);
            assert_eq!(input, want, "{n} records, scratch {scratch}");
        }
    }

    #[test]
    fn buffers_handed_from_sort_to_sort_sort_alike() {
        let dir = tempfile::tempdir().unwrap();
        let mut buffers = SortBuffers::default();
        // Larger, smaller and larger again than the sort before: the scatter target
        // kept from a larger sort is used in part, and grown for a larger one.
        for (seed, n) in [(3, 100_000), (5, 30_000), (7, 150_000)] {
            let input = records(n, seed);
            let mut want = input.clone();
            want.sort();
            let mut sort = ExternalSort::<Six>::with_buffers(dir.path(), 1 << 30, buffers);
            for r in &input {
                sort.push(*r).unwrap();
            }
            let mut out = sort.finish().unwrap();
            let mut got = Vec::new();
            while let Some(r) = out.next_record().unwrap() {
                got.push(r);
            }
            assert_eq!(got, want, "seed {seed}");
            buffers = out.into_buffers();
            assert!(
                buffers.buffer.capacity() >= 100_000,
                "the buffer is handed back"
            );
        }
    }

    #[test]
    fn a_run_cut_short_on_scratch_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut sort = ExternalSort::<Six>::new(dir.path(), 64 << 10);
        for r in records(10_000, 3) {
            sort.push(r).unwrap();
        }
        assert!(sort.runs() > 0);
        let run = dir.path().join("run-00000");
        let len = std::fs::metadata(&run).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&run)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let mut out = sort.finish().unwrap();
        let err = loop {
            match out.next_record() {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("a truncated run merged without an error"),
                Err(e) => break e,
            }
        };
        assert!(err.to_string().contains("run-00000"), "{err}");
    }
}
