//! The map task: scan a split of an input file, validate and normalise every row,
//! partition the valid rows by `partition(src_addr)`, and write one shuffle file (plus a
//! Parquet file of rejected rows with their reasons).
//!
//! The split is a range of rows of the file's row groups (whole row groups, or a row
//! range of one large row group), read with a column projection and a row selection by
//! the arrow-rs async Parquet reader over `object_store`: only the projected column
//! chunks are fetched, and with the file's offset index only the pages holding the
//! split's rows. The shuffle file and the rejects go out in parts as they are encoded
//! ([`probeflow_engine::store::PartWriter`]: multipart beyond 8 MiB). Memory is bounded by the
//! split's rows, which the planner chooses from `memory_per_worker`, whatever the
//! input's row group sizes.

use std::collections::BTreeMap;

use arrow::array::RecordBatch;
use futures::StreamExt;
use parquet::arrow::arrow_reader::{RowSelection, RowSelector};
use parquet::arrow::{ArrowWriter, ProjectionMask};

use super::error::ProbeRowsError;
use super::key;
use super::protocol::{MapOutput, MapTask, Settings};
use super::validate::{cache_limit, rejects_batch, AddressCache, Reason, Validator};
use probeflow_engine::completion::OutputFile;
use probeflow_engine::error::{EngineError, Result};
use probeflow_engine::kind::RunResult;
use probeflow_engine::protocol::JobContext;
use probeflow_engine::shuffle::{self, ShuffleSegment};
use probeflow_engine::store::{self, PartWriter, StoreUrl, PART_BYTES};

/// The shuffle file of attempt `attempt` of map task `index`, relative to the output
/// root. Every attempt writes its own file, so a late attempt never overwrites the
/// accepted one. It holds shuffle records ([`super::key`]); releases before them wrote
/// Arrow IPC files named `….arrow`, which a resumed job refuses by name.
pub fn shuffle_path(index: usize, attempt: u32) -> String {
    format!("_job/shuffle/map-{index:05}-a{attempt}.records")
}

/// The attempt whose shuffle file map task `index` reported (the inverse of
/// [`shuffle_path`]).
pub fn attempt_of_shuffle_file(index: usize, shuffle_file: &str) -> Option<u32> {
    let prefix = format!("_job/shuffle/map-{index:05}-a");
    let attempt: u32 = shuffle_file
        .strip_prefix(&prefix)?
        .strip_suffix(".records")?
        .parse()
        .ok()?;
    (shuffle_path(index, attempt) == shuffle_file).then_some(attempt)
}

/// The rejects file of attempt `attempt` of map task `index`, relative to the output
/// root (the accepted attempt's is listed in the manifest; the others are removed).
pub fn rejects_path(index: usize, attempt: u32) -> String {
    format!("rejects/part-{index:05}-a{attempt}.parquet")
}

/// The `(map index, attempt)` of a rejects file name (`part-<map>-a<attempt>.parquet`),
/// the inverse of [`rejects_path`].
pub fn parse_rejects_name(name: &str) -> Option<(usize, u32)> {
    let (index, attempt) = name
        .strip_prefix("part-")?
        .strip_suffix(".parquet")?
        .split_once("-a")?;
    let parsed = (index.parse().ok()?, attempt.parse().ok()?);
    (rejects_path(parsed.0, parsed.1) == format!("rejects/{name}")).then_some(parsed)
}

pub async fn run_map(
    task: &MapTask,
    job: &JobContext,
    settings: &Settings,
    attempt: u32,
    cache: &mut AddressCache,
    memory: usize,
) -> Result<RunResult<MapOutput>> {
    let output = StoreUrl::parse(&job.output)?;
    // A file pinned with an ETag is read with If-Match on every request; one without
    // is checked (size) before and after it is read.
    let pinned_by_etag = task.file_etag.is_some();
    if !pinned_by_etag {
        store::check_pinned(&task.file, task.file_size, &task.file_etag).await?;
    }
    let builder = probeflow_engine::parquet_source::open(
        &task.file,
        task.file_size,
        task.file_etag.as_deref(),
        &[&settings.columns.src_addr, &settings.columns.dst_addr],
        true,
    )
    .await?;
    let schema = builder.parquet_schema();
    let wanted = [
        &settings.columns.src_addr,
        &settings.columns.dst_addr,
        &settings.columns.event_time,
        &settings.columns.rtt,
        &settings.columns.ip_version,
    ];
    let arrow_schema = builder.schema().clone();
    let mut roots = Vec::new();
    for name in wanted {
        let i = probeflow_engine::parquet_source::column_index(&arrow_schema, &task.file, name)?;
        roots.push(i);
    }
    let mask = ProjectionMask::roots(schema, roots);
    let parquet_err = |e: parquet::errors::ParquetError| {
        probeflow_engine::parquet_source::parquet_error(&task.file, e)
    };
    let selection = row_selection(&builder, task);
    let stream = builder
        .with_projection(mask)
        .with_row_groups(task.row_groups.clone().collect())
        .with_row_selection(selection)
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(parquet_err)?;
    let mut stream = ScanAhead::start(Box::pin(probeflow_engine::parquet_source::guarded(stream)));

    let mut validator = Validator::new(
        task.file.clone(),
        settings.columns.clone(),
        settings.shards,
        settings.plausible,
        cache,
        cache_limit(memory),
    );
    // Shuffle records per partition, with room for them at IPv4 size and an eighth to
    // spare.
    let expected = (task.rows / u64::from(settings.shards.max(1))) as usize * key::IPV4_RECORD;
    let mut by_partition =
        key::PartitionedRecords::new(settings.shards as usize, expected + expected / 8);
    let mut rejected: BTreeMap<String, u64> = BTreeMap::new();
    let mut rejects_out: Option<RejectsOut> = None;
    let mut input_rows = 0u64;
    let started = std::time::Instant::now();
    let mut scan = std::time::Duration::ZERO;
    loop {
        let waited = std::time::Instant::now();
        let Some(batch) = stream.next().await else {
            break;
        };
        scan += waited.elapsed();
        let batch = batch.map_err(parquet_err)?;
        input_rows += batch.num_rows() as u64;
        let rejects = validator.validate(&batch, &mut by_partition)?;
        if !rejects.is_empty() {
            for (_, reason) in &rejects {
                *rejected.entry(reason.as_str().to_string()).or_default() += 1;
            }
            let rb = rejects_batch(&batch, &rejects)?;
            let r = match rejects_out.as_mut() {
                Some(r) => r,
                None => rejects_out.insert(RejectsOut::start(
                    &output,
                    rejects_path(task.index, attempt),
                    rb.schema(),
                    &task.file,
                )?),
            };
            r.write(&rb, &task.file).await?;
        }
    }
    if input_rows != task.rows {
        return Err(EngineError::Parquet {
            file: task.file.clone(),
            what: format!(
                "row groups {:?} (from row {}) gave {input_rows} rows, the footer said {}",
                task.row_groups, task.skip_rows, task.rows
            ),
        });
    }
    // Checked again after reading: a file replaced mid-read is refused, not mixed.
    if !pinned_by_etag {
        store::check_pinned(&task.file, task.file_size, &task.file_etag).await?;
    }
    refuse_implausible(
        &task.file,
        &format!("row groups {:?}", task.row_groups),
        &rejected,
        input_rows,
        &validator,
        settings.allow_private_sources,
    )?;

    let validated = started.elapsed();
    // Partitions in order, each its shuffle records back to back (`key::decode_records`).
    let shuffle_file = shuffle_path(task.index, attempt);
    let mut upload = output.put_in_parts(output.child(&shuffle_file));
    let mut segments = BTreeMap::new();
    let mut kept_rows = 0u64;
    let mut offset = 0u64;
    for (p, (records, rows)) in by_partition.into_partitions().enumerate() {
        if rows == 0 {
            continue;
        }
        let len = records.len() as u64;
        upload.put(records).await?;
        segments.insert(p as u32, ShuffleSegment { offset, len, rows });
        offset += len;
        kept_rows += rows;
    }
    // The shuffle file, its index and the rejects file go out at once: the result that
    // names them is reported only once all three are durable. That is waiting only
    // (fsyncs, or the last parts of uploads): the worker's next task runs meanwhile.
    let written = started.elapsed();
    let (src_dictionaries, dst_dictionaries) = validator.resolutions();
    let shards = settings.shards;
    let index = task.index;
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
        tracing::debug!(
            task = index,
            scan_s = scan.as_secs_f64(),
            validate_s = (validated - scan).as_secs_f64(),
            shuffle_s = (written - validated).as_secs_f64(),
            commit_s = (started.elapsed() - written).as_secs_f64(),
            src_dictionaries,
            dst_dictionaries,
            "map timings"
        );
        Ok(MapOutput {
            shuffle_file,
            input_rows,
            kept_rows,
            rejected,
            rejects_file: rejects_written.as_ref().map(|w| w.path.clone()),
            rejects_written,
            atlas: None,
        })
    })))
}

/// Refuses a split of input `file` (`at`: which part of it, in words) that is mostly
/// implausible, where rejecting it row by row would hide a wrong setting: more than half
/// its rows with implausible event times (a wrong unit), or, unless
/// `allow_private_sources`, more than half its valid rows keyed by a source of a local
/// scope.
pub(crate) fn refuse_implausible(
    file: &str,
    at: &str,
    rejected: &BTreeMap<String, u64>,
    input_rows: u64,
    validator: &Validator,
    allow_private_sources: bool,
) -> Result<()> {
    let implausible_times = rejected
        .get(Reason::ImplausibleEventTime.as_str())
        .copied()
        .unwrap_or(0);
    if implausible_times * 2 > input_rows {
        return Err(ProbeRowsError::Implausible {
            file: file.to_string(),
            what: format!(
                "{implausible_times} of {input_rows} rows ({at}) have implausible event times: {}",
                validator.time_unit_hint()
            ),
        }
        .into());
    }
    let sources = validator.local_sources();
    if !allow_private_sources && sources.too_many() {
        return Err(ProbeRowsError::LocalSources {
            file: file.to_string(),
            what: format!("{at}: {}", sources.explain()),
        }
        .into());
    }
    Ok(())
}

/// Makes a map's outputs durable: the shuffle file, its index and the rejects file (with
/// the name of the input file its rows come from), at once.
pub(crate) async fn commit(
    output: StoreUrl,
    shuffle_file: &str,
    upload: PartWriter,
    (partitions, segments): (u32, BTreeMap<u32, ShuffleSegment>),
    rejects_out: Option<(RejectsOut, String)>,
) -> Result<Option<OutputFile>> {
    let rejects = async {
        match rejects_out {
            Some((r, file)) => Ok(Some(r.finish(&file).await?)),
            None => Ok(None),
        }
    };
    let ((), (), rejects_file) = futures::try_join!(
        upload.finish(),
        shuffle::write_index(&output, shuffle_file, partitions, &segments),
        rejects,
    )?;
    Ok(rejects_file)
}

/// Rows decoded at once (also the read floor's, `examples/floor.rs`).
pub const BATCH_ROWS: usize = 131_072;

/// Batches a map's scan decodes ahead of its validation.
const BATCHES_AHEAD: usize = 2;

/// The scan of a map's rows, run as its own task up to [`BATCHES_AHEAD`] batches ahead
/// of the validation: the reads of the next row group's column chunks, and its decoding,
/// go on while the map validates, instead of the map waiting for each read in turn. The
/// batches come in the order the reader gives them. Dropping it (the map failed or was
/// aborted) stops the scan at its next batch.
struct ScanAhead {
    batches: tokio::sync::mpsc::Receiver<parquet::errors::Result<RecordBatch>>,
    scan: tokio::task::JoinHandle<()>,
}

impl ScanAhead {
    fn start(
        mut stream: impl futures::Stream<Item = parquet::errors::Result<RecordBatch>>
            + Send
            + Unpin
            + 'static,
    ) -> Self {
        let (send, batches) = tokio::sync::mpsc::channel(BATCHES_AHEAD);
        let scan = tokio::spawn(async move {
            while let Some(batch) = stream.next().await {
                let failed = batch.is_err();
                if send.send(batch).await.is_err() || failed {
                    break;
                }
            }
        });
        ScanAhead { batches, scan }
    }

    /// The next batch; `None` once the scan has ended. A scan that panicked is an error
    /// saying so (not a scan that ended early, which the map would report as missing
    /// rows).
    async fn next(&mut self) -> Option<parquet::errors::Result<RecordBatch>> {
        if let Some(batch) = self.batches.recv().await {
            return Some(batch);
        }
        match (&mut self.scan).await {
            Err(e) if e.is_panic() => Some(Err(parquet::errors::ParquetError::General(format!(
                "the scan of the file panicked: {e}"
            )))),
            _ => None,
        }
    }
}

impl Drop for ScanAhead {
    fn drop(&mut self) {
        self.scan.abort();
    }
}

/// The encoded size at which a rejects file's row group closes. Rejected rows can be
/// large (an Atlas reject keeps its whole line), so a row group is bounded by bytes, not
/// only by the writer's row count, to keep what a map holds of its rejects small.
const REJECTS_ROW_GROUP_BYTES: usize = PART_BYTES;

/// The rejects file of a map attempt, written as its rows come; it holds at most about
/// a row group and a part in memory.
pub(crate) struct RejectsOut {
    writer: ArrowWriter<Vec<u8>>,
    upload: HashedUpload,
    rel: String,
}

impl RejectsOut {
    /// A rejects file at `rel` (under `output`) of rows of `schema`, from input `file`.
    pub(crate) fn start(
        output: &StoreUrl,
        rel: String,
        schema: arrow::datatypes::SchemaRef,
        file: &str,
    ) -> Result<Self> {
        let writer = ArrowWriter::try_new(Vec::new(), schema, None)
            .map_err(|e| probeflow_engine::parquet_source::parquet_error(file, e))?;
        Ok(RejectsOut {
            writer,
            upload: HashedUpload {
                upload: output.put_in_parts(output.child(&rel)),
                bytes: 0,
                hash: blake3::Hasher::new(),
            },
            rel,
        })
    }

    /// Adds rejected rows; a row group closes once it holds [`REJECTS_ROW_GROUP_BYTES`],
    /// and what the writer has encoded so far goes out in parts. Both depend only on the
    /// rows, so the file's bytes do not depend on the machine.
    pub(crate) async fn write(&mut self, rows: &RecordBatch, file: &str) -> Result<()> {
        let parquet_error = |e| probeflow_engine::parquet_source::parquet_error(file, e);
        self.writer.write(rows).map_err(parquet_error)?;
        if self.writer.in_progress_size() >= REJECTS_ROW_GROUP_BYTES {
            self.writer.flush().map_err(parquet_error)?;
        }
        if self.writer.inner().len() >= PART_BYTES {
            let encoded = std::mem::take(self.writer.inner_mut());
            self.upload.write(&encoded).await?;
        }
        Ok(())
    }

    /// Makes the rejects file durable: its entry.
    async fn finish(self, file: &str) -> Result<OutputFile> {
        let RejectsOut {
            writer,
            mut upload,
            rel,
        } = self;
        let buffered = writer
            .into_inner()
            .map_err(|e| probeflow_engine::parquet_source::parquet_error(file, e))?;
        upload.write(&buffered).await?;
        upload.finish(rel).await
    }

    /// Bytes the writer holds: its row group in progress and what it has encoded but not
    /// yet sent.
    #[cfg(test)]
    fn buffered_bytes(&self) -> usize {
        self.writer.in_progress_size() + self.writer.inner().len()
    }
}

/// An upload that keeps the size and blake3 of what it sends (a final output file's
/// entry in the completion record, without reading it back).
struct HashedUpload {
    upload: PartWriter,
    bytes: u64,
    hash: blake3::Hasher,
}

impl HashedUpload {
    async fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.hash.update(bytes);
        self.bytes += bytes.len() as u64;
        self.upload.write(bytes).await
    }

    /// Makes the file durable at `rel`: its entry.
    async fn finish(self, rel: String) -> Result<OutputFile> {
        self.upload.finish().await?;
        Ok(OutputFile {
            path: rel,
            bytes: self.bytes,
            blake3: self.hash.finalize().to_hex().to_string(),
        })
    }
}

/// The task's rows of its row groups: skip `skip_rows`, take `rows`, skip the rest.
/// With the file's offset index only the pages holding them are fetched.
fn row_selection<T>(
    builder: &parquet::arrow::arrow_reader::ArrowReaderBuilder<T>,
    task: &MapTask,
) -> RowSelection {
    let groups = builder.metadata().row_groups();
    let total: u64 = task
        .row_groups
        .clone()
        .filter_map(|i| groups.get(i))
        .map(|g| g.num_rows().max(0) as u64)
        .sum();
    let after = total.saturating_sub(task.skip_rows + task.rows);
    RowSelection::from(vec![
        RowSelector::skip(task.skip_rows as usize),
        RowSelector::select(task.rows as usize),
        RowSelector::skip(after as usize),
    ])
}

/// Row groups and their row counts, from an input file's footer.
pub async fn row_groups(url: &str, size: u64) -> Result<Vec<u64>> {
    let builder = probeflow_engine::parquet_source::open(url, size, None, &[], false).await?;
    Ok(builder
        .metadata()
        .row_groups()
        .iter()
        .map(|rg| rg.num_rows().max(0) as u64)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_scan_that_panics_is_an_error_not_an_early_end() {
        let schema = std::sync::Arc::new(arrow::datatypes::Schema::empty());
        let batch = RecordBatch::new_empty(schema);
        let mut sent = false;
        let stream = futures::stream::poll_fn(move |_| {
            if sent {
                panic!("a reader bug");
            }
            sent = true;
            std::task::Poll::Ready(Some(Ok(batch.clone())))
        });
        let mut scan = ScanAhead::start(stream);
        assert!(matches!(scan.next().await, Some(Ok(_))));
        match scan.next().await {
            Some(Err(e)) => assert!(e.to_string().contains("panicked"), "{e}"),
            other => panic!("expected the panic as an error, got {other:?}"),
        }
        // A scan that ends ends.
        let mut ended = ScanAhead::start(futures::stream::empty());
        assert!(ended.next().await.is_none());
    }

    /// A map with many rejects (Atlas keeps each rejected line whole) holds a bounded
    /// part of its rejects file in memory, not a whole row group of up to a million rows.
    #[tokio::test]
    async fn a_rejects_file_is_held_in_memory_only_in_bounded_parts() {
        use arrow::array::StringArray;
        let dir = tempfile::tempdir().unwrap();
        let output = StoreUrl::parse(dir.path().to_str().unwrap()).unwrap();
        let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("raw", arrow::datatypes::DataType::Utf8, false),
        ]));
        let mut rejects =
            RejectsOut::start(&output, "rejects/r.parquet".into(), schema.clone(), "in").unwrap();
        let line = "x".repeat(2048);
        let mut most = 0;
        let batches = 40;
        let rows_per_batch = 1000;
        for b in 0..batches {
            let raw: Vec<String> = (0..rows_per_batch)
                .map(|i| format!("{b}:{i}:{line}"))
                .collect();
            let rows = RecordBatch::try_new(
                schema.clone(),
                vec![std::sync::Arc::new(StringArray::from(raw))],
            )
            .unwrap();
            rejects.write(&rows, "in").await.unwrap();
            most = most.max(rejects.buffered_bytes());
        }
        let written = batches * rows_per_batch * line.len();
        assert!(
            most <= 3 * PART_BYTES,
            "held {most} bytes of a {written}-byte rejects file"
        );
        let file = rejects.finish("in").await.unwrap();
        let bytes = std::fs::read(dir.path().join(&file.path)).unwrap();
        assert_eq!(file.bytes, bytes.len() as u64);
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            bytes::Bytes::from(bytes),
        )
        .unwrap()
        .build()
        .unwrap();
        let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
        assert_eq!(rows, batches * rows_per_batch);
    }

    #[test]
    fn rejects_names_parse_back_to_their_task_and_attempt() {
        let path = rejects_path(42, 3);
        let name = path.strip_prefix("rejects/").unwrap();
        assert_eq!(parse_rejects_name(name), Some((42, 3)));
        for other in [
            "part-00042.parquet",
            "part-42-a3.parquet",
            "part-00042-a3.arrow",
            "x",
        ] {
            assert_eq!(parse_rejects_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_map_attempts_files_are_the_ones_its_result_names() {
        use probeflow_engine::kind::Kind;
        let files = crate::ProbeRows::attempt_files(crate::protocol::ProbeStage::Map, 3, 2);
        assert_eq!(
            files,
            [
                shuffle_path(3, 2),
                shuffle::index_path(&shuffle_path(3, 2)),
                rejects_path(3, 2)
            ]
        );
        assert!(
            crate::ProbeRows::attempt_files(crate::protocol::ProbeStage::Reduce, 3, 2).is_empty()
        );
    }
}
