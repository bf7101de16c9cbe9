//! The index task: one eval file → its n-gram entries, partitioned by
//! `stable_hash("{n}:{ngram}") % partitions` into one shuffle file (the engine's
//! partitioned Arrow IPC), plus the file's valid rows (row, id, text) for the report.
//!
//! An entry is one (row, effective length, n-gram): the configured lengths it stands
//! for and every occurrence's offsets. Entries are written in (partition, row, length,
//! n-gram) order, so an attempt's bytes depend only on the file and the settings.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, RecordBatch, StringBuilder, UInt32Array, UInt32Builder, UInt64Builder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::gzip_jsonl::{GzipJsonl, Packing};
use super::ngrams::{eval_ngrams, EvalOccurrence, Index};
use super::protocol::{
    eval_rows_path, index_shuffle_path, rejects_path, EvalRow, IndexOutput, IndexTask, Settings,
};
use super::records::stable_hash;
use super::source::{read_records, WholeFiles};
use crate::engine::shuffle::{encode_segment, read_partition, write_index, ShuffleSegment};
use crate::engine::store::StoreUrl;
use crate::error::{Result, WorkerError};

/// The schema of index entries in a shuffle file.
pub fn entry_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("n", DataType::UInt32, false),
        Field::new("ngram", DataType::Utf8, false),
        Field::new("eval_file", DataType::UInt32, false),
        Field::new("eval_row", DataType::UInt64, false),
        Field::new("configured", DataType::UInt32, false),
        // [start, end) pairs, little-endian u64s.
        Field::new("offsets", DataType::Binary, false),
    ]))
}

/// The partition of an n-gram of effective length `n`.
pub fn partition_of(n: u32, ngram: &str, partitions: u32) -> u32 {
    (stable_hash(&format!("{n}:{ngram}")) % u64::from(partitions)) as u32
}

#[derive(Default)]
struct PartitionRows {
    n: UInt32Builder,
    ngram: StringBuilder,
    row: UInt64Builder,
    configured: UInt32Builder,
    offsets: BinaryBuilder,
    len: usize,
}

/// Runs index task `task` (on a blocking thread: call through `spawn_blocking`).
pub fn run_index(
    handle: &tokio::runtime::Handle,
    task: &IndexTask,
    output: &StoreUrl,
    settings: &Settings,
    attempt: u32,
    whole: &mut WholeFiles,
) -> Result<IndexOutput> {
    let lengths: Vec<(u32, u32)> = settings
        .n
        .iter()
        .map(|&n| (n, settings.bit_of(n)))
        .collect();
    let mut parts: Vec<PartitionRows> = (0..settings.partitions)
        .map(|_| PartitionRows::default())
        .collect();
    let rows_file = eval_rows_path(task.eval_file, attempt);
    let mut rows_out = GzipJsonl::new(output, &rows_file, Packing::Intermediate);
    let mut ngrams = 0u64;
    let mut present = std::collections::BTreeSet::new();
    let counts = read_records(
        handle,
        &task.file,
        &settings.eval_text_field,
        whole,
        output,
        Some(&rejects_path("eval", task.eval_file)),
        |mut record| {
            let id = record.id()?;
            let tokens = settings.tokenizer.tokenize(record.text);
            for ((n, ngram), e) in eval_ngrams(&tokens, &lengths) {
                let p = &mut parts[partition_of(n, &ngram, settings.partitions) as usize];
                p.n.append_value(n);
                p.ngram.append_value(&ngram);
                p.row.append_value(record.row);
                p.configured.append_value(e.configured);
                let mut bytes = Vec::with_capacity(e.offsets.len() * 16);
                for [a, b] in e.offsets {
                    bytes.extend_from_slice(&a.to_le_bytes());
                    bytes.extend_from_slice(&b.to_le_bytes());
                }
                p.offsets.append_value(bytes);
                p.len += 1;
                ngrams += 1;
                present.insert(n);
            }
            rows_out.line(
                handle,
                &EvalRow {
                    row: record.row,
                    id,
                    text: record.text.to_string(),
                },
            )?;
            Ok(())
        },
    )?;
    let schema = entry_schema();
    let mut shuffle = Vec::new();
    let mut segments = std::collections::BTreeMap::new();
    for (p, mut rows) in parts.into_iter().enumerate() {
        if rows.len == 0 {
            continue;
        }
        let len = rows.len;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(rows.n.finish()),
            Arc::new(rows.ngram.finish()),
            Arc::new(UInt32Array::from(vec![task.eval_file; len])),
            Arc::new(rows.row.finish()),
            Arc::new(rows.configured.finish()),
            Arc::new(rows.offsets.finish()),
        ];
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        let offset = shuffle.len() as u64;
        let bytes = encode_segment(&mut shuffle, &schema, [Ok(batch)])?;
        segments.insert(
            p as u32,
            ShuffleSegment {
                offset,
                len: bytes,
                rows: len as u64,
            },
        );
    }
    let shuffle_file = index_shuffle_path(task.eval_file, attempt);
    rows_out.finish(handle)?;
    let index_bytes = shuffle.len() as u64;
    handle.block_on(async {
        output.put(&output.child(&shuffle_file), shuffle).await?;
        write_index(output, &shuffle_file, settings.partitions, &segments).await
    })?;
    Ok(IndexOutput {
        shuffle_file,
        index_bytes,
        rows_file,
        counts,
        ngrams,
        lengths: present,
    })
}

/// Loads one scan's index group (partitions `p % groups == group` of every eval
/// file's index) into memory.
pub async fn load_index(
    output: &StoreUrl,
    files: &[String],
    group: u32,
    groups: u32,
    partitions: u32,
) -> Result<Index> {
    let started = std::time::Instant::now();
    let schema = entry_schema();
    let mut index = Index::default();
    for file in files {
        for p in (group..partitions).step_by(groups.max(1) as usize) {
            for batch in read_partition(output, file, p, &schema).await? {
                add_batch(&mut index, file, &batch)?;
            }
        }
    }
    index.seal();
    tracing::debug!(
        group,
        groups,
        entries = index.len(),
        ms = started.elapsed().as_millis() as u64,
        "index group loaded"
    );
    Ok(index)
}

fn add_batch(index: &mut Index, file: &str, batch: &RecordBatch) -> Result<()> {
    use arrow::array::{BinaryArray, StringArray, UInt64Array};
    let bad = || WorkerError::Shuffle {
        file: file.to_string(),
        what: "index entries of another schema".into(),
    };
    let col = |i: usize| batch.column(i).as_any();
    let n = col(0).downcast_ref::<UInt32Array>().ok_or_else(bad)?;
    let ngram = col(1).downcast_ref::<StringArray>().ok_or_else(bad)?;
    let eval_file = col(2).downcast_ref::<UInt32Array>().ok_or_else(bad)?;
    let row = col(3).downcast_ref::<UInt64Array>().ok_or_else(bad)?;
    let configured = col(4).downcast_ref::<UInt32Array>().ok_or_else(bad)?;
    let offsets = col(5).downcast_ref::<BinaryArray>().ok_or_else(bad)?;
    for i in 0..batch.num_rows() {
        let raw = offsets.value(i);
        if raw.len() % 16 != 0 {
            return Err(WorkerError::Shuffle {
                file: file.to_string(),
                what: format!("offsets of {} bytes", raw.len()),
            });
        }
        let pairs = raw
            .chunks_exact(16)
            .map(|c| {
                let mut a = [0u8; 8];
                let mut b = [0u8; 8];
                a.copy_from_slice(&c[..8]);
                b.copy_from_slice(&c[8..]);
                [u64::from_le_bytes(a), u64::from_le_bytes(b)]
            })
            .collect();
        index.add(
            n.value(i),
            ngram.value(i),
            EvalOccurrence {
                eval_file: eval_file.value(i),
                eval_row: row.value(i),
                configured: configured.value(i),
                offsets: pairs,
            },
        );
    }
    Ok(())
}
