//! The map task of one Atlas results file: scan it ([`super::scan`]), validate its
//! packets as Parquet rows are ([`crate::validate`]), partition them, and write the
//! same shuffle file (and index) as a Parquet map, plus a rejects file of the lines
//! whose rows were dropped.
//!
//! The partitioned records stay in memory up to [`run_budget`]; beyond it they go to
//! a *run* on the task's scratch directory (each partition's bytes back to back), and
//! the shuffle file is written from the runs and memory when the file ends: partition
//! `p`'s segment is its bytes of every run, in order, then those still in memory. A
//! segment's records in any order sort alike in the reduce, so the output does not
//! depend on where the runs were cut.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, BinaryBuilder, RecordBatch, StringBuilder, UInt64Builder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use super::scan::{self, ScanBatch};
use super::AtlasCounts;
use crate::error::ProbeRowsError;
use crate::key;
use crate::map::{commit, refuse_implausible, rejects_path, shuffle_path, RejectsOut};
use crate::protocol::{MapOutput, MapTask, Settings};
use crate::validate::{cache_limit, AddressCache, Reason, Validator};
use probeflow_engine::error::{EngineError, Result};
use probeflow_engine::kind::RunResult;
use probeflow_engine::protocol::JobContext;
use probeflow_engine::scratch::{JobScratch, TaskDir};
use probeflow_engine::shuffle::ShuffleSegment;
use probeflow_engine::store::{self, StoreUrl};

/// Lines read before the share of lines that are no Atlas ping results is first
/// judged (it is judged again at the end of the file).
const LINES_BEFORE_JUDGING: u64 = 10_000;

/// The partitioned records a map keeps in memory before it writes a run: a quarter of
/// the worker's memory (the address cache may take another quarter), at least 4 MiB.
pub fn run_budget(memory: usize) -> usize {
    (memory / 4).max(4 << 20)
}

/// The rejects file's columns: the input file, the line (1-based), the reason, the
/// rows of the line it stands for, and the line as read.
pub fn rejects_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("file", DataType::Utf8, false),
        Field::new("line", DataType::UInt64, false),
        Field::new("reason", DataType::Utf8, false),
        Field::new("rows", DataType::UInt64, false),
        Field::new("raw", DataType::Binary, false),
    ]))
}

/// One run on the scratch disk: each partition's `(offset, len, rows)` in its file.
struct Run {
    path: std::path::PathBuf,
    segments: Vec<ShuffleSegment>,
}

/// The partitioned records of a map, in memory and in runs.
struct Partitioned {
    memory: key::PartitionedRecords,
    runs: Vec<Run>,
    budget: usize,
}

impl Partitioned {
    /// Writes the records in memory to a new run once they pass the budget.
    async fn spill_if_full(&mut self, dir: &TaskDir) -> Result<()> {
        if self.memory.bytes() < self.budget {
            return Ok(());
        }
        let path = dir.path().join(format!("run-{:05}", self.runs.len()));
        let scratch_err = |e: std::io::Error| EngineError::Scratch {
            path: path.display().to_string(),
            source: e,
        };
        let mut file = tokio::fs::File::create(&path).await.map_err(scratch_err)?;
        let mut segments = Vec::with_capacity(self.memory.partitions());
        let mut offset = 0u64;
        for (records, rows) in self.memory.take() {
            file.write_all(&records).await.map_err(scratch_err)?;
            let len = records.len() as u64;
            segments.push(ShuffleSegment { offset, len, rows });
            offset += len;
        }
        file.flush().await.map_err(scratch_err)?;
        self.runs.push(Run { path, segments });
        Ok(())
    }
}

/// The rejected rows of one batch, grouped by line and reason, as rejects-file rows.
fn rejects_of(
    file: &str,
    batch: &ScanBatch,
    by_validation: &[(u32, Reason)],
) -> Result<RecordBatch> {
    let mut grouped: BTreeMap<(u32, Reason), u64> = BTreeMap::new();
    for &(line, reason, rows) in &batch.dropped {
        *grouped.entry((line, reason)).or_default() += u64::from(rows);
    }
    for &(row, reason) in by_validation {
        *grouped
            .entry((batch.packet_lines[row as usize], reason))
            .or_default() += 1;
    }
    let mut files = StringBuilder::new();
    let mut numbers = UInt64Builder::new();
    let mut reasons = StringBuilder::new();
    let mut rows = UInt64Builder::new();
    let mut raw = BinaryBuilder::new();
    for ((line, reason), n) in grouped {
        let (number, bytes) = batch.lines.get(line);
        files.append_value(file);
        numbers.append_value(number);
        reasons.append_value(reason.as_str());
        rows.append_value(n);
        raw.append_value(bytes);
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(files.finish()),
        Arc::new(numbers.finish()),
        Arc::new(reasons.finish()),
        Arc::new(rows.finish()),
        Arc::new(raw.finish()),
    ];
    Ok(RecordBatch::try_new(rejects_schema(), columns)?)
}

/// Fails a file most of whose lines are no Atlas ping results.
fn refuse_not_results(file: &str, counts: &AtlasCounts) -> Result<()> {
    if !counts.mostly_not_results() {
        return Ok(());
    }
    Err(ProbeRowsError::CorruptInput {
        file: file.to_string(),
        what: format!(
            "{} of its first {} non-blank lines are no RIPE Atlas ping results (JSON \
             objects with timestamp, msm_id, prb_id, fw and type = \"ping\"): is it \
             another format ([input] format) or another result type?",
            counts.not_results,
            counts.results + counts.not_results
        ),
    }
    .into())
}

pub async fn run_map(
    task: &MapTask,
    job: &JobContext,
    settings: &Settings,
    attempt: u32,
    cache: &mut AddressCache,
    memory: usize,
    scratch: &JobScratch,
) -> Result<RunResult<MapOutput>> {
    let output = StoreUrl::parse(&job.output)?;
    let pinned_by_etag = task.file_etag.is_some();
    if !pinned_by_etag {
        store::check_pinned(&task.file, task.file_size, &task.file_etag).await?;
    }
    let dir = scratch.task_dir(&format!("map-{:05}-a{attempt}", task.index))?;
    let chunks = store::read_pinned(&task.file, task.file_size, &task.file_etag).await?;
    let mut batches = scan::start(
        task.file.clone(),
        chunks,
        &settings.columns,
        settings.source,
    );
    let mut validator = Validator::new(
        task.file.clone(),
        settings.columns.clone(),
        settings.shards,
        settings.plausible,
        cache,
        cache_limit(memory),
    );
    let budget = run_budget(memory);
    let mut partitioned = Partitioned {
        memory: key::PartitionedRecords::new(
            settings.shards as usize,
            budget / settings.shards.max(1) as usize / 4,
        ),
        runs: Vec::new(),
        budget,
    };
    let mut rejected: BTreeMap<String, u64> = BTreeMap::new();
    let mut rejects_out: Option<RejectsOut> = None;
    let mut input_rows = 0u64;
    let mut counts = AtlasCounts::default();
    let mut judged = false;
    while let Some(batch) = batches.recv().await {
        let batch = batch?;
        input_rows += batch.input_rows;
        counts.add(&batch.counts);
        if !judged && counts.lines >= LINES_BEFORE_JUDGING {
            refuse_not_results(&task.file, &counts)?;
            judged = true;
        }
        let by_validation = validator.validate(&batch.packets, &mut partitioned.memory)?;
        for &(_, reason, rows) in &batch.dropped {
            *rejected.entry(reason.as_str().to_string()).or_default() += u64::from(rows);
        }
        for &(_, reason) in &by_validation {
            *rejected.entry(reason.as_str().to_string()).or_default() += 1;
        }
        if !batch.dropped.is_empty() || !by_validation.is_empty() {
            let rows = rejects_of(&task.file, &batch, &by_validation)?;
            let r = match rejects_out.as_mut() {
                Some(r) => r,
                None => rejects_out.insert(RejectsOut::start(
                    &output,
                    rejects_path(task.index, attempt),
                    rejects_schema(),
                    &task.file,
                )?),
            };
            r.write(&rows, &task.file).await?;
        }
        partitioned.spill_if_full(&dir).await?;
    }
    if !pinned_by_etag {
        store::check_pinned(&task.file, task.file_size, &task.file_etag).await?;
    }
    refuse_not_results(&task.file, &counts)?;
    refuse_implausible(
        &task.file,
        "the whole file",
        &rejected,
        input_rows,
        &validator,
        settings.allow_private_sources,
    )?;

    let shuffle_file = shuffle_path(task.index, attempt);
    let mut upload = output.put_in_parts(output.child(&shuffle_file));
    let (segments, kept_rows) = write_shuffle(partitioned, &mut upload).await?;
    drop(dir);
    let shards = settings.shards;
    let file = task.file.clone();
    Ok(RunResult::Committing(Box::pin(async move {
        let rejects_written = commit(
            output,
            &shuffle_file,
            upload,
            (shards, segments),
            rejects_out.map(|r| (r, file)),
        )
        .await?;
        Ok(MapOutput {
            shuffle_file,
            input_rows,
            kept_rows,
            rejected,
            rejects_file: rejects_written.as_ref().map(|w| w.path.clone()),
            rejects_written,
            atlas: Some(counts),
        })
    })))
}

/// Writes each partition's segment: its bytes of every run, then those in memory.
/// Returns the segments and the rows written.
async fn write_shuffle(
    partitioned: Partitioned,
    upload: &mut store::PartWriter,
) -> Result<(BTreeMap<u32, ShuffleSegment>, u64)> {
    let Partitioned { memory, runs, .. } = partitioned;
    let mut files = Vec::with_capacity(runs.len());
    for run in &runs {
        let file = tokio::fs::File::open(&run.path)
            .await
            .map_err(|e| EngineError::Scratch {
                path: run.path.display().to_string(),
                source: e,
            })?;
        files.push(file);
    }
    let mut segments = BTreeMap::new();
    let mut offset = 0u64;
    let mut kept = 0u64;
    for (p, (records, rows_in_memory)) in memory.into_partitions().enumerate() {
        let mut len = 0u64;
        let mut rows = 0u64;
        for (run, file) in runs.iter().zip(files.iter_mut()) {
            let s = run.segments[p];
            if s.len == 0 {
                continue;
            }
            let scratch_err = |e: std::io::Error| EngineError::Scratch {
                path: run.path.display().to_string(),
                source: e,
            };
            let mut bytes = vec![0u8; usize::try_from(s.len).unwrap_or(usize::MAX)];
            file.seek(std::io::SeekFrom::Start(s.offset))
                .await
                .map_err(scratch_err)?;
            file.read_exact(&mut bytes).await.map_err(scratch_err)?;
            upload.put(bytes).await?;
            len += s.len;
            rows += s.rows;
        }
        len += records.len() as u64;
        rows += rows_in_memory;
        if !records.is_empty() {
            upload.put(records).await?;
        }
        if rows > 0 {
            segments.insert(p as u32, ShuffleSegment { offset, len, rows });
        }
        offset += len;
        kept += rows;
    }
    Ok((segments, kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shuffle file of `records` (partition, source byte) pushed in order, spilling
    /// a run after every `spill_every` pushes (never when 0).
    async fn shuffle_of(records: &[(usize, u8)], spill_every: usize) -> (Vec<u8>, Vec<u8>, usize) {
        let root = tempfile::tempdir().unwrap();
        let scratch = JobScratch::create(root.path(), "job").unwrap();
        let dir = scratch.task_dir("map-00000-a1").unwrap();
        let mut partitioned = Partitioned {
            memory: key::PartitionedRecords::new(3, 0),
            runs: Vec::new(),
            budget: if spill_every == 0 { usize::MAX } else { 0 },
        };
        for (i, &(p, b)) in records.iter().enumerate() {
            let src = key::addr_key(&std::net::IpAddr::from([b, 0, 0, 1]));
            partitioned.memory.push(p, &src, i as u64, &src, None);
            if spill_every > 0 && (i + 1) % spill_every == 0 {
                partitioned.spill_if_full(&dir).await.unwrap();
            }
        }
        let runs = partitioned.runs.len();
        let out = StoreUrl::parse(root.path().join("out").to_str().unwrap()).unwrap();
        let mut upload = out.put_in_parts(out.child("s.records"));
        let (segments, kept) = write_shuffle(partitioned, &mut upload).await.unwrap();
        upload.finish().await.unwrap();
        assert_eq!(kept, records.len() as u64);
        let index = probeflow_engine::shuffle::encode_index(3, &segments);
        let file = std::fs::read(root.path().join("out/s.records")).unwrap();
        (file, index, runs)
    }

    #[tokio::test]
    async fn runs_on_scratch_give_the_shuffle_file_memory_alone_gives() {
        let records: Vec<(usize, u8)> = (0..500u32)
            .map(|i| ((i * 7 % 3) as usize, (i % 251) as u8))
            .collect();
        let (whole, whole_index, no_runs) = shuffle_of(&records, 0).await;
        assert_eq!(no_runs, 0);
        for every in [1, 7, 100, 499] {
            let (file, index, runs) = shuffle_of(&records, every).await;
            assert!(runs > 0, "{every}");
            assert_eq!(file, whole, "spilling every {every}");
            assert_eq!(index, whole_index, "spilling every {every}");
        }
    }
}
