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

/// Segments fetched at once, at most; their bytes are bounded by [`segment_budget`].
const SEGMENT_FETCHES_IN_FLIGHT: usize = 64;

/// The bytes of segments fetched ahead of the sort, out of the reduce's `memory`: an
/// eighth, between 8 and 256 MiB (a segment larger than that is fetched alone).
fn segment_budget(memory: usize) -> u32 {
    (memory / 8).clamp(8 << 20, 256 << 20) as u32
}

/// The memory of the sort's buffers: the reduce's `memory` less the segments' budget,
/// at least 1 MiB.
fn sort_memory(memory: usize) -> usize {
    memory
        .saturating_sub(segment_budget(memory) as usize)
        .max(1 << 20)
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
                    .map_err(|e| EngineError::Job(format!("segment budget: {e}")))?;
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
    let memory = config.memory_bytes;
    let explain = move |scratch: &TaskDir, e: EngineError, rows: u64| {
        scratch.explain_full_disk(e, || {
            format!(
                "it had read {rows} rows of its partition, {} of sort keys, which its sort \
                 spills here when they exceed the memory it may use ({}), and it writes its \
                 shards here before uploading them",
                format_bytes(rows * key::KEY_LEN as u64),
                format_bytes(sort_memory(memory) as u64),
            )
        })
    };
    let written = reduce_into(
        task,
        settings,
        config,
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
    config: &WorkerResources,
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
    let mut sort = ExternalSort::with_buffers(
        &spill,
        sort_memory(config.memory_bytes),
        std::mem::take(buffers),
    );
    let mut segments = std::pin::pin!(gather(
        output.clone(),
        task.partition,
        &task.maps,
        read_rows.clone(),
        segment_budget(config.memory_bytes),
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
    // The splits' shards go up at once (in split order in the result).
    let partition = task.partition;
    Ok(Box::pin(async move {
        let infos = futures::future::try_join_all(uploads).await?;
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
        .ok_or_else(|| EngineError::Job(format!("no {split} shard in this reduce")))
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
/// of that size, several at once); returns the bytes it sent.
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
            .wait_for_capacity(4)
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
