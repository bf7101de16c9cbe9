//! The index task: one eval file → the window keys of its n-grams, partitioned by key
//! range ([`partition_of`]) into one shuffle file (the engine's partitioned Arrow IPC); and
//! the scan's loading of an index group from those files into an [`NgramIndex`]. (The
//! report reads the eval rows it needs from the eval files themselves.)
//!
//! A posting is one (window key, row): every distinct window of the row, tokenized as a
//! scan tokenizes training text ([`ScanTokens`], so both sides compute the same keys).
//! No text: the report checks each candidate against the eval row's own n-grams. The
//! n-grams a scan looks up only behind its prefix filter ([`is_gated`]: at least
//! [`PREFIX_TOKENS`] tokens, shorter than the longest configured length) also give the
//! key of their first [`PREFIX_TOKENS`] tokens, written as partition `partitions + p`
//! of the same file: with `n = [13]` and no short rows there are none.
//! A task holds its file's postings in fixed blocks per partition (12 bytes each, 20
//! with a prefix key), up to [`postings_budget`]; then sorts each partition by (key,
//! row), repeats removed ([`sort_postings`]), and writes it as one run of rows
//! ([`RunsWriter`]), and goes on: an attempt's bytes depend only on the file, the
//! settings and its worker's memory (the runs), and the scans' index does not depend on
//! the runs. A scan loads its group's partitions in key order; a partition of one
//! eval file arrives sorted, one of several is sorted again ([`IndexBuilder`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};

use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::error::OverlapError;
use super::ngram_index::{
    is_gated, partition_keys, partition_of, sort_postings, IndexBuilder, NgramIndex,
    PartitionRefused, MAX_EVAL_ROWS, PREFIX_TOKENS,
};
use super::ngrams::ScanTokens;
use super::protocol::{index_shuffle_path, rejects_path, IndexOutput, IndexTask, Settings};
use super::source::{read_records, WholeFiles};
use probeflow_engine::error::{EngineError, Result};
use probeflow_engine::shuffle::{
    encode_segment, read_index_entry, read_segment, write_index, ShuffleSegment,
};
use probeflow_engine::store::StoreUrl;

/// The schema of index postings in a shuffle file.
pub fn posting_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::UInt64, false),
        Field::new("eval_row", DataType::UInt32, false),
    ]))
}

/// The schema of the prefix keys of gated n-grams in a shuffle file.
pub fn prefix_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "prefix",
        DataType::UInt64,
        false,
    )]))
}

/// Postings per block of a [`PartitionPostings`].
const POSTINGS_PER_BLOCK: usize = 1 << 14;

/// One partition's postings while an eval file is read: (window key, row) in blocks
/// that are never grown (a growing array copies itself and touches fresh pages at
/// every doubling), and the prefix keys of its gated n-grams.
#[derive(Default)]
struct PartitionPostings {
    keys: Vec<Vec<u64>>,
    rows: Vec<Vec<u32>>,
    len: usize,
    prefixes: Vec<u64>,
}

/// The bytes of one block of postings (keys and rows).
const BLOCK_BYTES: usize = POSTINGS_PER_BLOCK * (size_of::<u64>() + size_of::<u32>());

impl PartitionPostings {
    /// Adds a posting (and its prefix key); returns the bytes this allocated (a new
    /// block, the prefix keys' growth), so that a task counts what it holds as it goes.
    fn push(&mut self, key: u64, row: u32, prefix: Option<u64>) -> usize {
        let mut allocated = 0;
        if self.len.is_multiple_of(POSTINGS_PER_BLOCK) {
            self.keys.push(Vec::with_capacity(POSTINGS_PER_BLOCK));
            self.rows.push(Vec::with_capacity(POSTINGS_PER_BLOCK));
            allocated += BLOCK_BYTES;
        }
        if let (Some(keys), Some(rows)) = (self.keys.last_mut(), self.rows.last_mut()) {
            keys.push(key);
            rows.push(row);
            self.len += 1;
        }
        if let Some(prefix) = prefix {
            let before = self.prefixes.capacity();
            self.prefixes.push(prefix);
            allocated += (self.prefixes.capacity() - before) * size_of::<u64>();
        }
        allocated
    }
}

/// Calls `window(key, prefix key of a gated n-gram)` for every window of one eval row,
/// repeats included (the partitions' sort removes them), and adds the effective
/// lengths it had windows of to `present`. `lengths`: the configured lengths,
/// ascending.
fn row_windows(
    doc: &ScanTokens,
    lengths: &[u32],
    present: &mut BTreeSet<u32>,
    mut window: impl FnMut(u64, Option<u64>),
) {
    let longest = lengths.last().copied().unwrap_or(0);
    let count = doc.len();
    let mut last = 0;
    // Configured lengths above the row's token count share one effective length.
    for &n in lengths {
        let eff = (n as usize).min(count);
        if eff == 0 || eff == last {
            continue;
        }
        last = eff;
        present.insert(eff as u32);
        let gated = is_gated(eff as u32, longest);
        for i in 0..=count - eff {
            let prefix = gated.then(|| doc.key(i, PREFIX_TOKENS as usize));
            window(doc.key(i, eff), prefix);
        }
    }
}

/// The bytes of postings an index task holds at most, out of its worker's `memory`:
/// a quarter of it (at least 1 MiB). Past it, the postings held so far are sorted and
/// written as a run, and freed.
pub fn postings_budget(memory: usize) -> usize {
    (memory / 4).max(1 << 20)
}

/// An index task's shuffle file as its runs are written to it: run `r`'s partition `p`
/// is segment `r × 2 × partitions + p`, its prefix keys segment `r × 2 × partitions +
/// partitions + p` ([`run_segment`]).
struct RunsWriter<'a> {
    handle: &'a tokio::runtime::Handle,
    partitions: u32,
    upload: probeflow_engine::store::PartWriter,
    segments: BTreeMap<u32, ShuffleSegment>,
    offset: u64,
    runs: u32,
    ngrams: u64,
    /// Buffers kept from one partition to the next.
    segment: Vec<u8>,
    sorted: Vec<(u64, u32)>,
}

impl RunsWriter<'_> {
    /// Writes `parts` as the next run: partitions in order, each sorted, encoded,
    /// uploaded (in parts) and freed before the next, so that the postings are held
    /// once, not a second time as one encoded file.
    fn write_run(&mut self, parts: Vec<PartitionPostings>) -> Result<()> {
        let schema = posting_schema();
        let prefix_schema = prefix_schema();
        let run = self.runs;
        for (p, part) in parts.into_iter().enumerate() {
            if part.len == 0 {
                continue;
            }
            sort_postings(
                || {
                    part.keys
                        .iter()
                        .flatten()
                        .copied()
                        .zip(part.rows.iter().flatten().copied())
                },
                partition_keys(p as u32, self.partitions),
                &mut self.sorted,
            );
            drop(part.keys);
            drop(part.rows);
            let mut prefixes = part.prefixes;
            self.ngrams += self.sorted.len() as u64;
            let keys: UInt64Array = self.sorted.iter().map(|p| p.0).collect::<Vec<u64>>().into();
            let rows: UInt32Array = self.sorted.iter().map(|p| p.1).collect::<Vec<u32>>().into();
            let columns: Vec<ArrayRef> = vec![Arc::new(keys), Arc::new(rows)];
            prefixes.sort_unstable();
            prefixes.dedup();
            let prefixes: ArrayRef = Arc::new(UInt64Array::from(prefixes));
            let (postings_at, prefixes_at) = run_segment(run, p as u32, self.partitions);
            self.put(
                postings_at,
                RecordBatch::try_new(schema.clone(), columns)?,
                &schema,
            )?;
            if !prefixes.is_empty() {
                let batch = RecordBatch::try_new(prefix_schema.clone(), vec![prefixes])?;
                self.put(prefixes_at, batch, &prefix_schema)?;
            }
        }
        self.sorted = Vec::new();
        self.runs += 1;
        Ok(())
    }

    fn put(&mut self, at: u32, batch: RecordBatch, schema: &SchemaRef) -> Result<()> {
        let rows = batch.num_rows() as u64;
        self.segment.clear();
        let bytes = encode_segment(&mut self.segment, schema, [Ok(batch)])?;
        self.handle.block_on(self.upload.write(&self.segment))?;
        self.segments.insert(
            at,
            ShuffleSegment {
                offset: self.offset,
                len: bytes,
                rows,
            },
        );
        self.offset += bytes;
        Ok(())
    }
}

/// The segments of run `run`'s partition `p`: its postings and its prefix keys.
pub fn run_segment(run: u32, p: u32, partitions: u32) -> (u32, u32) {
    let first = run * 2 * partitions;
    (first + p, first + partitions + p)
}

/// Runs index task `task` (on a blocking thread: call through `spawn_blocking`),
/// holding at most `budget` bytes of postings ([`postings_budget`]): an eval file with
/// more is written as several runs of its rows, in row order, into the one shuffle
/// file (the scan merges them as it merges the partitions of several eval files).
pub fn run_index(
    handle: &tokio::runtime::Handle,
    task: &IndexTask,
    output: &StoreUrl,
    settings: &Settings,
    attempt: u32,
    whole: &mut WholeFiles,
    budget: usize,
) -> Result<IndexOutput> {
    let fresh = || -> Vec<PartitionPostings> {
        (0..settings.partitions)
            .map(|_| PartitionPostings::default())
            .collect()
    };
    let mut parts = fresh();
    let mut held = 0usize;
    let mut lengths = BTreeSet::new();
    let mut doc = ScanTokens::default();
    let shuffle_file = index_shuffle_path(task.eval_file, attempt);
    let mut runs = RunsWriter {
        handle,
        partitions: settings.partitions,
        upload: output.put_in_parts(output.child(&shuffle_file)),
        segments: BTreeMap::new(),
        offset: 0,
        runs: 0,
        ngrams: 0,
        segment: Vec::new(),
        sorted: Vec::new(),
    };
    let counts = read_records(
        handle,
        &task.file,
        settings.eval_side(),
        whole,
        output,
        Some(&rejects_path("eval", task.eval_file)),
        |mut record| {
            // Asked for so that a row without a usable id is rejected here as in
            // the report (which reads the ids of the rows with candidates).
            record.id()?;
            if record.row >= MAX_EVAL_ROWS {
                return Err(OverlapError::EvalTooLarge {
                    file: Some(task.file.url.clone()),
                }
                .into());
            }
            let row = record.row as u32;
            doc.fill(settings.tokenizer, record.text);
            row_windows(&doc, &settings.n, &mut lengths, |key, prefix| {
                held +=
                    parts[partition_of(key, settings.partitions) as usize].push(key, row, prefix);
            });
            // A run ends between rows: every posting of a row is in one run.
            if held >= budget {
                runs.write_run(std::mem::replace(&mut parts, fresh()))?;
                held = 0;
            }
            Ok(())
        },
    )?;
    if held > 0 || runs.runs == 0 {
        runs.write_run(parts)?;
    }
    let RunsWriter {
        upload,
        segments,
        runs,
        ngrams,
        ..
    } = runs;
    handle.block_on(async {
        upload.finish().await?;
        write_index(
            output,
            &shuffle_file,
            2 * settings.partitions * runs,
            &segments,
        )
        .await
    })?;
    Ok(IndexOutput {
        shuffle_file,
        counts,
        ngrams,
        lengths,
        runs,
    })
}

/// Loads one scan's index group (partitions `p % groups == group` of every eval
/// file's index shuffle file) into memory, a partition at a time in key order.
/// `eval_rows[f]` is eval file `f`'s row count: a posting's global eval row is its row
/// plus the rows of the files before it. `lengths`: the effective lengths indexed;
/// `longest`: the longest configured length.
pub async fn load_index(
    output: &StoreUrl,
    (files, runs): (&[String], &[u32]),
    eval_rows: &[u64],
    (lengths, longest): (&[u32], u32),
    (group, groups, partitions): (u32, u32, u32),
) -> Result<NgramIndex> {
    let started = std::time::Instant::now();
    let schema = posting_schema();
    let bases = row_bases(eval_rows)?;
    if files.len() != eval_rows.len() || !(runs.is_empty() || runs.len() == files.len()) {
        return Err(EngineError::Internal(format!(
            "{} index files but {} eval row counts and {} run counts",
            files.len(),
            eval_rows.len(),
            runs.len()
        )));
    }
    // Every run of every file, in eval order: (file, its run number).
    let sources: Vec<(usize, u32)> = (0..files.len())
        .flat_map(|f| (0..runs.get(f).copied().unwrap_or(1)).map(move |r| (f, r)))
        .collect();
    let mine: Vec<u32> = (group..partitions)
        .step_by(groups.max(1) as usize)
        .collect();
    // Every index entry of the group first (their posting counts size the index), many
    // at once: a store far away costs a round trip per request.
    let postings_of = |p: u32| move |r: u32| run_segment(r, p, partitions).0;
    let segments =
        index_entries(output, files, &sources, mine.iter().copied(), postings_of).await?;
    let postings: u64 = segments.iter().map(|(_, s)| s.rows).sum();
    check_group_size(postings)?;
    // The gated n-grams' prefixes, when the index has any gated length.
    let gated = lengths.iter().any(|&n| is_gated(n, longest));
    let prefix_segments = if gated {
        let prefixes_of = |p: u32| move |r: u32| run_segment(r, p, partitions).1;
        index_entries(output, files, &sources, mine.iter().copied(), prefixes_of).await?
    } else {
        Vec::new()
    };
    let prefixes: u64 = prefix_segments.iter().map(|(_, s)| s.rows).sum();
    let mut builder = IndexBuilder::new(postings as usize, lengths, longest, prefixes as usize);
    let prefix_schema = prefix_schema();
    let mut prefix_batches = fetch_segments(output, files, prefix_segments, &prefix_schema);
    while let Some((f, batches)) = prefix_batches.try_next().await? {
        for batch in batches {
            add_prefixes(&mut builder, &files[f], &batch)?;
        }
    }
    let mut part: Vec<(u64, u32)> = Vec::new();
    let per_partition = sources.len().max(1);
    let mut segments = segments.into_iter();
    for &p in &mine {
        let these: Vec<_> = segments.by_ref().take(per_partition).collect();
        let mut batches = fetch_segments(output, files, these, &schema);
        while let Some((f, batches)) = batches.try_next().await? {
            for batch in batches {
                add_batch(&mut part, &files[f], (bases[f], eval_rows[f]), &batch)?;
            }
        }
        builder
            .add_partition(&mut part)
            .map_err(|refused| match refused {
                PartitionRefused::OutOfOrder => EngineError::Shuffle {
                    file: files.join(", "),
                    what: format!("partition {p} holds keys outside its range"),
                },
                PartitionRefused::RowTooLarge => EngineError::Shuffle {
                    file: files.join(", "),
                    what: format!("partition {p} names an eval row past {MAX_EVAL_ROWS}"),
                },
                PartitionRefused::TooManyShared => {
                    OverlapError::IndexGroupTooLarge { group }.into()
                }
            })?;
    }
    let index = builder.build();
    tracing::debug!(
        group,
        groups,
        ngrams = index.len(),
        bytes = index.bytes(),
        ms = started.elapsed().as_millis() as u64,
        "index group loaded"
    );
    Ok(index)
}

/// Index entries a scan fetches at once while loading its group.
const ENTRIES_IN_FLIGHT: usize = 64;
/// Segments a scan fetches at once while loading its group (each is held until added).
const SEGMENTS_IN_FLIGHT: usize = 8;

/// The index entries of partitions `partitions` of every run of every file (`sources`:
/// (file, run)), partition by partition (runs in order within each): (file, segment).
/// `segment_of(p)(r)`: the segment of run `r`'s partition `p`.
async fn index_entries<S: Fn(u32) -> u32>(
    output: &StoreUrl,
    files: &[String],
    sources: &[(usize, u32)],
    partitions: impl Iterator<Item = u32>,
    segment_of: impl Fn(u32) -> S,
) -> Result<Vec<(usize, ShuffleSegment)>> {
    let wanted: Vec<(usize, u32)> = partitions
        .flat_map(|p| {
            let segment = segment_of(p);
            sources.iter().map(move |&(f, r)| (f, segment(r)))
        })
        .collect();
    futures::stream::iter(wanted)
        .map(|(f, p)| async move { Ok((f, read_index_entry(output, &files[f], p).await?)) })
        .buffered(ENTRIES_IN_FLIGHT)
        .try_collect()
        .await
}

/// The batches of `segments` (empty ones skipped), in order, a few fetched at once.
fn fetch_segments<'a>(
    output: &'a StoreUrl,
    files: &'a [String],
    segments: Vec<(usize, ShuffleSegment)>,
    schema: &'a SchemaRef,
) -> impl futures::Stream<Item = Result<(usize, Vec<RecordBatch>)>> + Unpin + 'a {
    futures::stream::iter(segments.into_iter().filter(|(_, s)| s.rows > 0))
        .map(move |(f, segment)| async move {
            Ok((f, read_segment(output, &files[f], &segment, schema).await?))
        })
        .buffered(SEGMENTS_IN_FLIGHT)
        .boxed()
}

/// The first global eval row of each eval file (the rows of the files before it), and
/// a check that every row has a global number below [`MAX_EVAL_ROWS`].
pub fn row_bases(eval_rows: &[u64]) -> Result<Vec<u32>> {
    let mut bases = Vec::with_capacity(eval_rows.len());
    let mut total = 0u64;
    for &rows in eval_rows {
        bases.push(total as u32);
        total = total.saturating_add(rows);
        if total > MAX_EVAL_ROWS {
            return Err(OverlapError::EvalTooLarge { file: None }.into());
        }
    }
    Ok(bases)
}

/// Adds a batch of `file`'s prefix keys to `builder`'s prefix filter.
fn add_prefixes(builder: &mut IndexBuilder, file: &str, batch: &RecordBatch) -> Result<()> {
    let prefixes = batch
        .column(0)
        .as_any()
        .downcast_ref::<UInt64Array>()
        .ok_or_else(|| EngineError::Shuffle {
            file: file.to_string(),
            what: "index prefixes of another schema".into(),
        })?;
    builder.add_prefixes(prefixes.values());
    Ok(())
}

/// Adds a batch of `file`'s postings to `part`, its rows numbered from `base` (of
/// `rows`).
fn add_batch(
    part: &mut Vec<(u64, u32)>,
    file: &str,
    (base, rows): (u32, u64),
    batch: &RecordBatch,
) -> Result<()> {
    let bad = || EngineError::Shuffle {
        file: file.to_string(),
        what: "index postings of another schema".into(),
    };
    let col = |i: usize| batch.column(i).as_any();
    let key = col(0).downcast_ref::<UInt64Array>().ok_or_else(bad)?;
    let row = col(1).downcast_ref::<UInt32Array>().ok_or_else(bad)?;
    part.reserve(batch.num_rows());
    for i in 0..batch.num_rows() {
        let r = row.value(i);
        if u64::from(r) >= rows {
            return Err(EngineError::Shuffle {
                file: file.to_string(),
                what: format!("eval row {r} past the file's {rows} rows"),
            });
        }
        part.push((key.value(i), base + r));
    }
    Ok(())
}

/// Refuses an index group of more postings than the index numbers (its directory
/// holds 32-bit positions): lookups past it would miss keys without an error.
fn check_group_size(postings: u64) -> Result<()> {
    if postings > u64::from(u32::MAX) {
        return Err(EngineError::Spec {
            file: "[index]".into(),
            what: format!(
                "an index group of {postings} postings is more than one index holds ({}): \
                 raise [index] partitions or lower [index] memory",
                u32::MAX
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_group_past_32_bit_positions_is_refused_not_misread() {
        assert!(check_group_size(u64::from(u32::MAX)).is_ok());
        let err = check_group_size(u64::from(u32::MAX) + 1).unwrap_err();
        assert_eq!(err.fault(), probeflow_engine::error::Fault::Input);
        assert!(
            err.to_string().contains("raise [index] partitions"),
            "{err}"
        );
    }

    use super::*;

    #[test]
    fn global_eval_rows_number_the_files_one_after_another_up_to_the_limit() {
        assert_eq!(row_bases(&[3, 0, 5, 2]).unwrap(), vec![0, 3, 3, 8]);
        assert_eq!(row_bases(&[MAX_EVAL_ROWS]).unwrap(), vec![0]);
        let e = row_bases(&[MAX_EVAL_ROWS, 1]).unwrap_err().to_string();
        assert!(e.contains("more than 2147483648 rows"), "{e}");
        assert!(row_bases(&[u64::MAX, u64::MAX]).is_err());
    }
}
