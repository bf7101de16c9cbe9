//! The reduce task: gather one partition from every map output, sort it with the
//! engine's external sort under the worker's memory, and stream the sorted
//! measurements, grouped by source, through `RowBuilder` into the partition's `train`
//! and `test` ArrayRecord shards.
//!
//! ```text
//! every map's index entry p, then segment p ─► gather (fetches in flight, bounded bytes)
//!   ─► shuffle records decoded to 45-byte keys ─► ExternalSort (runs spill to scratch)
//!   ─► (src, event_time, dst, rtt) order
//!   ─► RowBuilder per source ─► shard
//! ```
//!
//! Grouping streams over sorted data (no aggregate functions). The sort key includes
//! every column, so the order, and with it every byte of the shards, is a pure function
//! of the input. Shards are written to local scratch, then uploaded (multipart) while
//! their blake3 is computed.

use std::io::Read;
use std::net::IpAddr;
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::{Stream, StreamExt, TryStreamExt};
use object_store::{ObjectStoreExt, WriteMultipart};
use probeflow_reader::array_record::{ArrayRecordWriter, WriterOptions};
use probeflow_reader::row::{addr::addr_from_bytes, Row, RowBuilder, Split};

use super::error::ProbeRowsError;
use super::key;
use super::map::shuffle_path;
use super::protocol::{shard_path, MapAttempts, ReduceOutput, ReduceTask, Settings, ShardInfo};
use probeflow_engine::error::{EngineError, Result};
use probeflow_engine::external_sort::{ExternalSort, SortBuffers};
use probeflow_engine::kind::{BoxFuture, RunResult, WorkerResources};
use probeflow_engine::protocol::JobContext;
use probeflow_engine::scratch::{JobScratch, TaskDir};
use probeflow_engine::shuffle;
use probeflow_engine::store::StoreUrl;
use probeflow_engine::units::format_bytes;

/// Index entries fetched at once (24 bytes each: the count of round trips in flight
/// is what bounds them).
const INDEX_FETCHES_IN_FLIGHT: usize = 64;

/// Segments fetched at once, at most; their bytes are bounded by
/// [`ReduceMemory::segments`].
const SEGMENT_FETCHES_IN_FLIGHT: usize = 64;

/// Copies of one row a reduce holds at most while it builds and writes it: the row
/// builder's columns (up to one row's measurements; IPv6's 16-byte destinations take
/// more there than in the row), the encoded row, and its compressed chunk in the shard
/// writer, with zstd's context.
pub const ROW_COPIES: usize = 4;

/// How a reduce divides its worker's memory: every buffer it holds comes out of it.
///
/// ```text
/// memory = segments (fetched ahead of the sort: an eighth, 8–256 MiB)
///        + rows     (ROW_COPIES × max_row_bytes)
///        + sort     (the rest: at least a quarter)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReduceMemory {
    /// The bytes of segments fetched ahead of the sort (a segment larger than that is
    /// fetched alone).
    pub segments: usize,
    /// What building and writing one row holds.
    pub rows: usize,
    /// The sort's buffers, and after a spill its runs' readers.
    pub sort: usize,
}

impl ReduceMemory {
    /// The division of `memory` for rows of at most `max_row_bytes`; an error when the
    /// sort would get less than a quarter of it.
    pub fn of(memory: usize, max_row_bytes: usize) -> std::result::Result<Self, ProbeRowsError> {
        let rows = ROW_COPIES.saturating_mul(max_row_bytes);
        let Some(sort) = Self::sort_of(memory, rows) else {
            // The least memory that leaves the sort its quarter: in each regime of the
            // segments' share (8 MiB, an eighth, 256 MiB) the bound is linear.
            let mib = |bytes: usize| bytes.saturating_add((1 << 20) - 1) >> 20 << 20;
            let least = [
                mib(rows.saturating_add(8 << 20) / 3 * 4),
                mib(rows / 5 * 8),
                mib(rows.saturating_add(256 << 20) / 3 * 4),
            ]
            .into_iter()
            .filter(|&m| Self::sort_of(m, rows).is_some())
            .min()
            .unwrap_or(usize::MAX);
            return Err(ProbeRowsError::MemoryTooSmall {
                memory: format_bytes(memory as u64),
                max_row_bytes: format_bytes(max_row_bytes as u64),
                copies: ROW_COPIES,
                rows: format_bytes(rows as u64),
                // Whole MiB, as the job file's setting is written.
                least: format!("{}MiB", least >> 20),
            });
        };
        Ok(ReduceMemory {
            segments: Self::segments_of(memory),
            rows,
            sort,
        })
    }

    /// The sort's share of `memory` beside `rows`, if it is at least a quarter.
    fn sort_of(memory: usize, rows: usize) -> Option<usize> {
        let sort = memory.checked_sub(Self::segments_of(memory).checked_add(rows)?)?;
        (sort >= memory / 4).then_some(sort)
    }

    fn segments_of(memory: usize) -> usize {
        (memory / 8).clamp(8 << 20, 256 << 20)
    }
}

/// A map's segment of the partition: its shuffle records ([`key::decode_records`]), the
/// count the map's index promised, and the shuffle file's name for errors.
struct Segment {
    file: String,
    bytes: bytes::Bytes,
    rows: u64,
    /// The segment's share of the fetch budget, given back when the segment is dropped
    /// (once the sort has taken its records).
    _budget: tokio::sync::OwnedSemaphorePermit,
}

/// The partition's segment of every map's shuffle file, in map order; counts the rows
/// they promise into `rows`. Against a store tens of milliseconds away the time of a
/// reduce's gather is round trips, not bytes: the index entries (24 bytes each) are
/// fetched many at once, and the segments as they come, as many at once as fit
/// `budget` bytes (a segment holds its share of the budget until the sort has taken it).
fn gather(
    output: StoreUrl,
    partition: u32,
    maps: &MapAttempts,
    rows: Arc<AtomicU64>,
    budget: u32,
) -> impl Stream<Item = Result<Segment>> {
    let in_flight = Arc::new(tokio::sync::Semaphore::new(budget as usize));
    let files: Vec<String> = maps
        .iter()
        .map(|(i, attempt)| shuffle_path(i, attempt))
        .collect();
    let entries = {
        let output = output.clone();
        futures::stream::iter(files)
            .map(move |file| {
                let output = output.clone();
                async move {
                    let entry = shuffle::read_index_entry(&output, &file, partition).await?;
                    Ok::<_, EngineError>((file, entry))
                }
            })
            .buffered(INDEX_FETCHES_IN_FLIGHT)
    };
    // Budget is taken in map order, one segment after the other, before its fetch
    // starts: the first segment not yet taken by the sort always has its share.
    entries
        .try_filter(|(_, entry)| futures::future::ready(entry.rows != 0))
        .and_then(move |(file, entry)| {
            let in_flight = in_flight.clone();
            async move {
                let share = u32::try_from(entry.len)
                    .unwrap_or(u32::MAX)
                    .clamp(1, budget);
                let permit = in_flight
                    .acquire_many_owned(share)
                    .await
                    .map_err(|e| EngineError::Runtime(format!("segment budget: {e}")))?;
                Ok((file, entry, permit))
            }
        })
        .map_ok(move |(file, entry, permit)| {
            let output = output.clone();
            let rows = rows.clone();
            async move {
                let (file, bytes) = shuffle::read_segment_bytes(&output, &file, &entry).await?;
                rows.fetch_add(entry.rows, Ordering::Relaxed);
                Ok::<_, EngineError>(Segment {
                    file,
                    bytes,
                    rows: entry.rows,
                    _budget: permit,
                })
            }
        })
        .try_buffered(SEGMENT_FETCHES_IN_FLIGHT)
}

/// A writer that hashes (blake3) and counts the bytes it passes on.
struct HashingWriter<W> {
    inner: W,
    hasher: blake3::Hasher,
    bytes: u64,
}

impl<W: std::io::Write> std::io::Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A shard's local file as its writer writes it: buffered, hashed on the way.
type ShardSink = std::io::BufWriter<HashingWriter<std::fs::File>>;

struct ShardFile {
    split: Split,
    local: PathBuf,
    writer: ArrayRecordWriter<ShardSink>,
    rows: u64,
    sources: u64,
    measurements: u64,
}

impl ShardFile {
    fn write_row(&mut self, row: &Row) -> Result<()> {
        self.writer.write(&row.bytes)?;
        self.rows += 1;
        self.measurements += row.meta.n_measurements;
        Ok(())
    }
}

/// The builder of the source being grouped, and where its rows go.
struct Group {
    /// The key of the source's first measurement (its source part is the group's).
    first: key::SortKey,
    builder: RowBuilder,
    /// Its split's shard (an index into the reduce's shard files).
    shard: usize,
}

pub async fn run_reduce(
    task: &ReduceTask,
    job: &JobContext,
    settings: &Settings,
    config: &WorkerResources,
    job_scratch: &JobScratch,
    attempt: u32,
    buffers: &mut SortBuffers<key::SortKey>,
) -> Result<RunResult<ReduceOutput>> {
    let output = StoreUrl::parse(&job.output)?;
    let scratch = job_scratch.task_dir(&format!("reduce-{:05}-a{attempt}", task.partition))?;
    let read_rows = Arc::new(AtomicU64::new(0));
    let memory = ReduceMemory::of(config.memory_bytes, settings.max_row_bytes)?;
    let explain = move |scratch: &TaskDir, e: EngineError, rows: u64| {
        scratch.explain_full_disk(e, || {
            format!(
                "it had read {rows} rows of its partition, {} of sort keys, which its sort \
                 spills here when they exceed the memory it may use ({}), and it writes its \
                 shards here before uploading them",
                format_bytes(rows * key::KEY_LEN as u64),
                format_bytes(memory.sort as u64),
            )
        })
    };
    let written = reduce_into(
        task,
        settings,
        memory,
        scratch.path(),
        &output,
        &read_rows,
        buffers,
    )
    .await;
    let commit = match written {
        Ok(commit) => commit,
        Err(e) => return Err(explain(&scratch, e, read_rows.load(Ordering::Relaxed))),
    };
    // The shards are written and the sort's buffers are back: what is left is moving
    // the shards into the output (fsyncs) or uploading them, while the worker's next
    // task runs. The scratch directory goes once that is done.
    Ok(RunResult::Committing(Box::pin(async move {
        let placed = commit.await;
        let rows = read_rows.load(Ordering::Relaxed);
        let result = match placed {
            Ok(shards) => Ok(ReduceOutput {
                shards,
                input_rows: rows,
            }),
            Err(e) => Err(explain(&scratch, e, rows)),
        };
        drop(scratch);
        result
    })))
}

async fn reduce_into(
    task: &ReduceTask,
    job: &Settings,
    memory: ReduceMemory,
    scratch: &FsPath,
    output: &StoreUrl,
    read_rows: &Arc<AtomicU64>,
    buffers: &mut SortBuffers<key::SortKey>,
) -> Result<BoxFuture<'static, Result<Vec<ShardInfo>>>> {
    let options: WriterOptions = job.array_record_options.parse()?;
    let rule = job.split_rule()?;
    let mut shards = Vec::new();
    for split in rule.splits() {
        let local = scratch.join(format!("{split}.array_record"));
        let file = std::fs::File::create(&local).map_err(|e| EngineError::Scratch {
            path: local.display().to_string(),
            source: e,
        })?;
        let sink = std::io::BufWriter::with_capacity(
            1 << 20,
            HashingWriter {
                inner: file,
                hasher: blake3::Hasher::new(),
                bytes: 0,
            },
        );
        let writer =
            ArrayRecordWriter::with_name(sink, options.clone(), local.display().to_string())?;
        shards.push(ShardFile {
            split,
            local,
            writer,
            rows: 0,
            sources: 0,
            measurements: 0,
        });
    }

    let spill = scratch.join("sort");
    std::fs::create_dir_all(&spill).map_err(|e| EngineError::Scratch {
        path: spill.display().to_string(),
        source: e,
    })?;
    let bad_key = || EngineError::Shuffle {
        file: format!("partition {}", task.partition),
        what: "bad sort key".into(),
    };
    let started = std::time::Instant::now();
    let mut sort = ExternalSort::with_buffers(&spill, memory.sort, std::mem::take(buffers));
    let mut segments = std::pin::pin!(gather(
        output.clone(),
        task.partition,
        &task.maps,
        read_rows.clone(),
        u32::try_from(memory.segments).unwrap_or(u32::MAX),
    ));
    while let Some(segment) = segments.next().await {
        let segment = segment?;
        let records = key::decode_records(&segment.bytes, &segment.file, |k| sort.push(k))?;
        if records != segment.rows {
            return Err(EngineError::Shuffle {
                file: segment.file,
                what: format!(
                    "partition {}'s segment holds {records} records, its index entry says {}",
                    task.partition, segment.rows
                ),
            });
        }
    }
    let runs = sort.runs();
    let mut sorted = sort.finish()?;
    let gathered = started.elapsed();

    let mut group: Option<Group> = None;
    while let Some(sort_key) = sorted.next_record()? {
        let k = sort_key.parts().ok_or_else(bad_key)?;
        if group
            .as_ref()
            .is_none_or(|g| !g.first.same_source(&sort_key))
        {
            if let Some(g) = group.take() {
                finish_group(g, &mut shards)?;
            }
            let addr: IpAddr = addr_from_bytes(k.src()).ok_or_else(bad_key)?;
            let shard = shard_of(&shards, rule.split(&addr))?;
            shards[shard].sources += 1;
            group = Some(Group {
                first: sort_key,
                builder: RowBuilder::new(addr, job.max_row_bytes)?,
                shard,
            });
        }
        if let Some(g) = group.as_mut() {
            if let Some(row) = g.builder.push_parts(k.event_time, k.dst(), k.rtt)? {
                shards[g.shard].write_row(&row)?;
            }
        }
    }
    if let Some(g) = group.take() {
        finish_group(g, &mut shards)?;
    }
    *buffers = sorted.into_buffers();

    let grouped = started.elapsed();
    let mut uploads = Vec::new();
    for shard in shards {
        let (sink, _) = shard.writer.finish_into_inner()?;
        let written = sink.into_inner().map_err(|e| EngineError::Scratch {
            path: shard.local.display().to_string(),
            source: e.into_error(),
        })?;
        let rel = shard_path(shard.split.as_str(), task.partition, job.shards);
        let hashed = (
            written.bytes,
            written.hasher.finalize().to_hex().to_string(),
        );
        drop(written.inner);
        let output = output.clone();
        let partition = task.partition;
        uploads.push(async move {
            let (bytes, blake3) = place(&output, &shard.local, &rel, hashed).await?;
            Ok::<_, EngineError>(ShardInfo {
                split: shard.split.as_str().to_string(),
                partition,
                path: rel,
                rows: shard.rows,
                sources: shard.sources,
                measurements: shard.measurements,
                bytes,
                blake3,
            })
        });
    }
    // The splits' shards go up one after the other (in split order), so that one
    // upload's parts are in memory at a time beside the worker's next task.
    let partition = task.partition;
    Ok(Box::pin(async move {
        let mut infos = Vec::with_capacity(uploads.len());
        for upload in uploads {
            infos.push(upload.await?);
        }
        tracing::debug!(
            partition,
            runs,
            sort_s = gathered.as_secs_f64(),
            rows_s = (grouped - gathered).as_secs_f64(),
            upload_s = (started.elapsed() - grouped).as_secs_f64(),
            "reduce timings"
        );
        Ok(infos)
    }))
}

/// The index of `split`'s shard file (the rule gives only splits it writes).
fn shard_of(shards: &[ShardFile], split: Split) -> Result<usize> {
    shards
        .iter()
        .position(|s| s.split == split)
        .ok_or_else(|| EngineError::Internal(format!("no {split} shard in this reduce")))
}

fn finish_group(g: Group, shards: &mut [ShardFile]) -> Result<()> {
    match g.builder.finish()? {
        Some(row) => shards[g.shard].write_row(&row),
        None => Ok(()),
    }
}

/// Puts a finished shard (its scratch file `local`, of `hashed` size and blake3) at `rel`
/// in the output; returns its size and blake3. On a local output on the scratch's
/// filesystem the file is moved into place (fsynced, renamed, its directory fsynced):
/// the same atomic, durable appearance as a put, without copying it. Elsewhere it is
/// uploaded (its blake3 is the one computed as it was written, not computed again).
async fn place(
    output: &StoreUrl,
    local: &FsPath,
    rel: &str,
    hashed: (u64, String),
) -> Result<(u64, String)> {
    let dest = output.child(rel);
    if let Some(target) = output.local_path(&dest) {
        let from = local.to_path_buf();
        let shown = local.display().to_string();
        let moved = tokio::task::spawn_blocking(move || rename_durably(&from, &target))
            .await
            .map_err(|e| EngineError::Scratch {
                path: shown.clone(),
                source: std::io::Error::other(format!(
                    "the move into the output did not complete: {e}"
                )),
            })?
            .map_err(|source| EngineError::Scratch {
                path: shown,
                source,
            })?;
        if moved {
            return Ok(hashed);
        }
    }
    let sent = upload(output, local, rel).await?;
    if sent != hashed.0 {
        return Err(EngineError::Scratch {
            path: local.display().to_string(),
            source: std::io::Error::other(format!(
                "{sent} bytes read back for upload, {} written",
                hashed.0
            )),
        });
    }
    Ok(hashed)
}

/// Moves `from` to `to` durably; `Ok(false)` (nothing done) when they are on different
/// filesystems.
fn rename_durably(from: &FsPath, to: &FsPath) -> std::io::Result<bool> {
    std::fs::File::open(from)?.sync_all()?;
    let dir = to.parent().unwrap_or(FsPath::new("/"));
    std::fs::create_dir_all(dir)?;
    match std::fs::rename(from, to) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::CrossesDevices => return Ok(false),
        Err(e) => return Err(e),
    }
    std::fs::File::open(dir)?.sync_all()?;
    Ok(true)
}

/// Bytes per part of a shard's multipart upload; a shard no larger is one put.
const UPLOAD_PART: u64 = probeflow_engine::store::PART_BYTES as u64;

/// Uploads a local file (one put up to [`UPLOAD_PART`] bytes, else multipart in parts
/// of that size, [`probeflow_engine::store::PARTS_IN_FLIGHT`] at once); returns the
/// bytes it sent.
async fn upload(output: &StoreUrl, local: &FsPath, rel: &str) -> Result<u64> {
    let scratch_err = |e: std::io::Error| EngineError::Scratch {
        path: local.display().to_string(),
        source: e,
    };
    let dest = output.child(rel);
    let mut file = std::fs::File::open(local).map_err(scratch_err)?;
    let size = file.metadata().map_err(scratch_err)?.len();
    if size <= UPLOAD_PART {
        let mut whole = Vec::with_capacity(size as usize);
        file.read_to_end(&mut whole).map_err(scratch_err)?;
        let total = whole.len() as u64;
        output.put(&dest, whole).await?;
        return Ok(total);
    }
    let upload = output
        .store
        .put_multipart(&dest)
        .await
        .map_err(|e| EngineError::store(output.display(&dest), e))?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, UPLOAD_PART as usize);
    let mut total = 0u64;
    loop {
        // One fresh buffer per part, handed to the upload without copying or zeroing.
        let mut part = Vec::with_capacity(UPLOAD_PART.min(size.saturating_sub(total)) as usize + 1);
        let n = (&mut file)
            .take(UPLOAD_PART)
            .read_to_end(&mut part)
            .map_err(scratch_err)?;
        if n == 0 {
            break;
        }
        total += n as u64;
        writer.put(bytes::Bytes::from(part));
        writer
            .wait_for_capacity(probeflow_engine::store::PARTS_IN_FLIGHT)
            .await
            .map_err(|e| EngineError::store(output.display(&dest), e))?;
    }
    writer
        .finish()
        .await
        .map_err(|e| EngineError::store(output.display(&dest), e))?;
    output.sync(&dest).await?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn a_reduce_divides_its_memory_between_fetches_rows_and_sort() {
        let at = |memory: usize| ReduceMemory::of(memory, 8 * MIB).unwrap();
        // The smallest setting: 8 MiB of fetches, 4 copies of an 8 MiB row, the rest sorts.
        assert_eq!(
            at(64 * MIB),
            ReduceMemory {
                segments: 8 * MIB,
                rows: 32 * MIB,
                sort: 24 * MIB
            }
        );
        assert_eq!(at(2048 * MIB).segments, 256 * MIB);
        assert_eq!(at(2048 * MIB).sort, 2048 * MIB - 256 * MIB - 32 * MIB);
        for memory in [64, 100, 256, 1000, 2048, 4096, 65536].map(|m| m * MIB) {
            let m = at(memory);
            assert_eq!(m.segments + m.rows + m.sort, memory, "{m:?}");
            assert!(m.sort >= memory / 4, "{m:?}");
        }
    }

    #[test]
    fn rows_too_large_for_the_memory_are_refused_naming_the_least_memory_that_fits() {
        for max_row in [8 * MIB, 16 * MIB, 100 * MIB, 700 * MIB] {
            let Err(e) = ReduceMemory::of(4 * max_row, max_row) else {
                panic!("{max_row}: four rows' copies leave no room for the sort");
            };
            let ProbeRowsError::MemoryTooSmall { ref least, .. } = e else {
                panic!("{e}");
            };
            let least: usize = (probeflow_engine::units::parse_bytes(least).unwrap()) as usize;
            assert!(ReduceMemory::of(least, max_row).is_ok(), "{e}");
            assert!(ReduceMemory::of(least - MIB, max_row).is_err(), "{e}");
            assert!(e.to_string().contains("max_row_bytes"), "{e}");
        }
    }
}
