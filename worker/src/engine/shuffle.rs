//! The shuffle, an engine service any job uses to move rows from its map tasks to the
//! tasks of a later stage, partitioned.
//!
//! A map task writes one *shuffle file*: each non-empty partition is a self-contained
//! Arrow IPC stream (schema, batches, end marker), and the partitions follow each other
//! in order. The file's *index* (partition → [`ShuffleSegment`], a byte range and a row
//! count) is part of the map task's result, so a later task range-reads exactly its
//! partition from every map's file ([`read_segment`]) and checks the schema and the
//! row count it was promised. Files are written with
//! [`StoreUrl::put_in_parts`](crate::engine::store::StoreUrl::put_in_parts) as they are
//! encoded, so a map never holds its whole shuffle file.

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use serde::{Deserialize, Serialize};

use crate::engine::store::StoreUrl;
use crate::error::{Result, WorkerError};

/// One partition's bytes in one shuffle file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShuffleSegment {
    pub offset: u64,
    pub len: u64,
    pub rows: u64,
}

/// Appends `batches` (one partition's rows, all of `schema`) to `out` as one IPC
/// stream; returns the stream's length in bytes.
pub fn encode_segment(
    out: &mut Vec<u8>,
    schema: &SchemaRef,
    batches: impl IntoIterator<Item = Result<RecordBatch>>,
) -> Result<u64> {
    let start = out.len();
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut *out, schema)?;
    for batch in batches {
        writer.write(&batch?)?;
    }
    writer.finish()?;
    drop(writer);
    Ok((out.len() - start) as u64)
}

/// Decodes one segment (as range-read from shuffle file `file`) into batches, refusing
/// another schema.
pub fn decode_segment(
    file: &str,
    bytes: bytes::Bytes,
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>> {
    let bad = |what: String| WorkerError::Shuffle {
        file: file.to_string(),
        what,
    };
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| bad(e.to_string()))?;
    if reader.schema() != *schema {
        return Err(bad("unexpected schema".into()));
    }
    reader.map(|b| b.map_err(|e| bad(e.to_string()))).collect()
}

/// Reads one partition's segment of shuffle file `file` (relative to `output`) and
/// checks that it holds the promised number of rows.
pub async fn read_segment(
    output: &StoreUrl,
    file: &str,
    segment: &ShuffleSegment,
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>> {
    let location = output.child(file);
    let bytes = output
        .get_range(&location, segment.offset..segment.offset + segment.len)
        .await?;
    let shown = output.display(&location);
    let batches = decode_segment(&shown, bytes, schema)?;
    let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    if rows != segment.rows {
        return Err(WorkerError::Shuffle {
            file: shown,
            what: format!(
                "segment at {} holds {rows} rows, {} expected",
                segment.offset, segment.rows
            ),
        });
    }
    Ok(batches)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn batch(schema: &SchemaRef, values: &[&str]) -> RecordBatch {
        let column: ArrayRef = Arc::new(StringArray::from(values.to_vec()));
        RecordBatch::try_new(schema.clone(), vec![column]).unwrap()
    }

    #[tokio::test]
    async fn segments_round_trip_by_byte_range_and_check_schema_and_rows() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, false)]));
        let mut file = Vec::new();
        let a = encode_segment(&mut file, &schema, [Ok(batch(&schema, &["a", "b"]))]).unwrap();
        let b = encode_segment(
            &mut file,
            &schema,
            [Ok(batch(&schema, &["c"])), Ok(batch(&schema, &["d", "e"]))],
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let out = StoreUrl::parse(dir.path().to_str().unwrap()).unwrap();
        out.put(&out.child("shuffle/f.arrows"), file).await.unwrap();
        let second = ShuffleSegment {
            offset: a,
            len: b,
            rows: 3,
        };
        let got = read_segment(&out, "shuffle/f.arrows", &second, &schema)
            .await
            .unwrap();
        let values: Vec<&str> = got
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .unwrap()
                    .iter()
            })
            .map(|v| v.unwrap())
            .collect();
        assert_eq!(values, ["c", "d", "e"]);
        let wrong_rows = ShuffleSegment { rows: 4, ..second };
        let err = read_segment(&out, "shuffle/f.arrows", &wrong_rows, &schema)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("holds 3 rows, 4 expected"),
            "{err}"
        );
        let other: SchemaRef = Arc::new(Schema::new(vec![Field::new("t", DataType::Utf8, false)]));
        let err = read_segment(&out, "shuffle/f.arrows", &second, &other)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("unexpected schema"), "{err}");
    }
}
