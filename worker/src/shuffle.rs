//! Shuffle files: a map task's valid rows, grouped by partition.
//!
//! One file per map task. Each non-empty partition is a self-contained Arrow IPC stream
//! (schema, batches, end marker) and the partitions follow each other in order, so the
//! file's index (partition → byte range, kept in the map task's result and the journal)
//! lets a reduce task range-read just its partition. Columns are the normalised binary
//! forms, never strings (no Utf8View buffers dragged along):
//!
//! | column | type | |
//! |---|---|---|
//! | `src` | Binary (4 or 16 bytes) | source address, network order |
//! | `event_time` | UInt64 | seconds |
//! | `dst` | Binary (4 or 16 bytes) | destination address |
//! | `rtt` | UInt16, nullable | RTT code; null = failed |

use std::sync::{Arc, LazyLock};

use arrow::array::{ArrayRef, BinaryArray, RecordBatch, UInt16Array, UInt64Array};
use arrow::buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::error::{Result, WorkerError};
use crate::validate::Normalized;

/// Rows per IPC batch inside a segment.
const BATCH_ROWS: usize = 65_536;

pub static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("src", DataType::Binary, false),
        Field::new("event_time", DataType::UInt64, false),
        Field::new("dst", DataType::Binary, false),
        Field::new("rtt", DataType::UInt16, true),
    ]))
});

fn binary(values: impl Iterator<Item = std::net::IpAddr>, n: usize) -> BinaryArray {
    let mut bytes = Vec::with_capacity(n * 16);
    let mut offsets = Vec::with_capacity(n + 1);
    offsets.push(0i32);
    for a in values {
        probeflow_reader::row::addr::addr_bytes(&a, &mut bytes);
        offsets.push(bytes.len() as i32);
    }
    BinaryArray::new(
        OffsetBuffer::new(ScalarBuffer::from(offsets)),
        bytes.into(),
        None,
    )
}

/// Encodes rows (all of one partition) as one IPC stream.
pub fn encode_segment(rows: &[Normalized]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(rows.len() * 30 + 1024);
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut out, &SCHEMA)?;
    for chunk in rows.chunks(BATCH_ROWS) {
        let n = chunk.len();
        let valid: Vec<bool> = chunk.iter().map(|r| r.rtt.is_some()).collect();
        let nulls = if valid.iter().all(|&v| v) {
            None
        } else {
            Some(NullBuffer::from(valid))
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(binary(chunk.iter().map(|r| r.src), n)),
            Arc::new(UInt64Array::from_iter_values(
                chunk.iter().map(|r| r.event_time),
            )),
            Arc::new(binary(chunk.iter().map(|r| r.dst), n)),
            Arc::new(UInt16Array::new(
                chunk.iter().map(|r| r.rtt.map_or(0, |c| c.0)).collect(),
                nulls,
            )),
        ];
        writer.write(&RecordBatch::try_new(SCHEMA.clone(), columns)?)?;
    }
    writer.finish()?;
    drop(writer);
    Ok(out)
}

/// Decodes one segment (as range-read from a shuffle file) into batches.
pub fn decode_segment(file: &str, bytes: bytes::Bytes) -> Result<Vec<RecordBatch>> {
    let bad = |what: String| WorkerError::Shuffle {
        file: file.to_string(),
        what,
    };
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| bad(e.to_string()))?;
    if reader.schema() != *SCHEMA {
        return Err(bad("unexpected schema".into()));
    }
    reader.map(|b| b.map_err(|e| bad(e.to_string()))).collect()
}
