//! The shuffle, an engine service any job uses to move rows from its map tasks to the
//! tasks of a later stage, partitioned.
//!
//! A map task writes one *shuffle file*: each non-empty partition's *segment*, and the
//! segments follow each other in partition order. A segment is either a self-contained
//! Arrow IPC stream (schema, batches, end marker: [`encode_segment`], [`read_segment`]),
//! or bytes in an encoding of the job's own ([`read_segment_bytes`]), for a job whose
//! rows are smaller in their own form than in Arrow's; such a job checks the row
//! count it decodes against the index entry. Beside it, the file's *index*
//! (`<shuffle file>.index`, [`index_path`]): one fixed-size entry per partition
//! ([`INDEX_ENTRY`] bytes: offset, length, rows, little-endian u64s; all zero for an
//! empty partition). A later task reads its
//! partition of a map's output with two range reads ([`read_partition`]): its index
//! entry, then its segment, whose schema and row count are checked against the entry.
//! So neither a map's result nor a reduce's task carries per-partition byte ranges:
//! with 20 000 maps × 1 024 partitions, results, tasks and the journal stay small
//! whatever the task count. Files are written with
//! [`StoreUrl::put_in_parts`](crate::store::StoreUrl::put_in_parts) as they are
//! encoded, so a map never holds its whole shuffle file.

use std::collections::BTreeMap;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::store::{self, StoreUrl};

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
    let bad = |what: String| EngineError::Shuffle {
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
    let bytes = get_segment(output, &location, segment).await?;
    let shown = output.display(&location);
    let batches = decode_segment(&shown, bytes, schema)?;
    let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    if rows != segment.rows {
        return Err(EngineError::Shuffle {
            file: shown,
            what: format!(
                "segment at {} holds {rows} rows, {} expected",
                segment.offset, segment.rows
            ),
        });
    }
    Ok(batches)
}

/// Reads one partition's segment of shuffle file `file` (relative to `output`) as the
/// bytes the map wrote, for a job that encodes its rows itself: the job decodes them,
/// and checks that they hold `segment.rows` rows. Returns the file's name as errors
/// should show it, and the bytes.
pub async fn read_segment_bytes(
    output: &StoreUrl,
    file: &str,
    segment: &ShuffleSegment,
) -> Result<(String, bytes::Bytes)> {
    let location = output.child(file);
    let bytes = get_segment(output, &location, segment).await?;
    Ok((output.display(&location), bytes))
}

/// Reads `segment` of the shuffle file at `location`. A segment is read once (a retry
/// reads it again from disk): on a local disk its pages leave the page cache once read
/// (those of the kernel's folios that lie wholly inside it), so that memory goes to
/// what is still to be read and written instead of the kernel reclaiming it under
/// pressure: at 200M rows on 2 cores that halved the job's system time. Dropping clean
/// pages loses nothing, so it is done in the background and its failure ignored.
async fn get_segment(
    output: &StoreUrl,
    location: &object_store::path::Path,
    segment: &ShuffleSegment,
) -> Result<bytes::Bytes> {
    let bytes = output
        .get_range(location, segment.offset..segment.offset + segment.len)
        .await?;
    if let Some(path) = output.local_path(location) {
        let (offset, len) = (segment.offset, segment.len);
        tokio::task::spawn_blocking(move || store::drop_cached(&path, offset, len));
    }
    Ok(bytes)
}

/// Bytes of one partition's entry in a shuffle file's index.
pub const INDEX_ENTRY: usize = 24;

/// The index of shuffle file `shuffle_file`.
pub fn index_path(shuffle_file: &str) -> String {
    format!("{shuffle_file}.index")
}

/// The index of a shuffle file of `partitions` partitions, of which `segments` hold
/// rows.
pub fn encode_index(partitions: u32, segments: &BTreeMap<u32, ShuffleSegment>) -> Vec<u8> {
    let mut out = vec![0u8; partitions as usize * INDEX_ENTRY];
    for (&p, s) in segments.range(..partitions) {
        let at = p as usize * INDEX_ENTRY;
        out[at..at + 8].copy_from_slice(&s.offset.to_le_bytes());
        out[at + 8..at + 16].copy_from_slice(&s.len.to_le_bytes());
        out[at + 16..at + 24].copy_from_slice(&s.rows.to_le_bytes());
    }
    out
}

/// Writes the index of shuffle file `shuffle_file` (relative to `output`), once the
/// shuffle file is complete.
pub async fn write_index(
    output: &StoreUrl,
    shuffle_file: &str,
    partitions: u32,
    segments: &BTreeMap<u32, ShuffleSegment>,
) -> Result<()> {
    output
        .put(
            &output.child(&index_path(shuffle_file)),
            encode_index(partitions, segments),
        )
        .await
}

/// Partition `partition`'s entry in the index of shuffle file `file`.
pub async fn read_index_entry(
    output: &StoreUrl,
    file: &str,
    partition: u32,
) -> Result<ShuffleSegment> {
    let location = output.child(&index_path(file));
    let at = u64::from(partition) * INDEX_ENTRY as u64;
    let bytes = output
        .get_range(&location, at..at + INDEX_ENTRY as u64)
        .await?;
    let word = |i: usize| -> Option<u64> {
        let b: [u8; 8] = bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?;
        Some(u64::from_le_bytes(b))
    };
    match (word(0), word(1), word(2)) {
        (Some(offset), Some(len), Some(rows)) if bytes.len() == INDEX_ENTRY => {
            Ok(ShuffleSegment { offset, len, rows })
        }
        _ => Err(EngineError::Shuffle {
            file: output.display(&location),
            what: format!("no entry for partition {partition}"),
        }),
    }
}

/// Partition `partition`'s rows in shuffle file `file` (none if it has none).
pub async fn read_partition(
    output: &StoreUrl,
    file: &str,
    partition: u32,
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>> {
    let segment = read_index_entry(output, file, partition).await?;
    if segment.rows == 0 {
        return Ok(Vec::new());
    }
    read_segment(output, file, &segment, schema).await
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

        // The index: partition 1 empty, 0 and 2 hold the two segments.
        let first = ShuffleSegment {
            offset: 0,
            len: a,
            rows: 2,
        };
        let segments = BTreeMap::from([(0, first), (2, second)]);
        write_index(&out, "shuffle/f.arrows", 3, &segments)
            .await
            .unwrap();
        let rows = |batches: Vec<RecordBatch>| batches.iter().map(|b| b.num_rows()).sum::<usize>();
        let read = |p| read_partition(&out, "shuffle/f.arrows", p, &schema);
        assert_eq!(rows(read(0).await.unwrap()), 2);
        assert_eq!(rows(read(1).await.unwrap()), 0);
        assert_eq!(rows(read(2).await.unwrap()), 3);
        let err = read(3).await.unwrap_err();
        assert!(err.to_string().contains("f.arrows.index"), "{err}");
        // A torn index is named, not read as zeros.
        out.put(&out.child("shuffle/f.arrows.index"), vec![0; 30])
            .await
            .unwrap();
        assert!(read(1).await.is_err());
    }

    /// Which of the pages of `path` in `pages` are in the page cache.
    fn resident(path: &std::path::Path, pages: std::ops::Range<usize>) -> Vec<bool> {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(path).unwrap();
        let len = pages.end * 4096;
        let mut vec = vec![0u8; pages.end];
        // SAFETY: a read-only shared mapping of `len` bytes of an open file, unmapped
        // before it is dropped; mincore writes one byte per page into `vec`.
        unsafe {
            let at = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(at, libc::MAP_FAILED);
            assert_eq!(libc::mincore(at, len, vec.as_mut_ptr()), 0);
            libc::munmap(at, len);
        }
        vec[pages].iter().map(|b| b & 1 == 1).collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_local_segment_once_read_leaves_the_page_cache_and_the_rest_stays() {
        // 16 MiB, the segment the middle 8 MiB: 2 MiB-aligned, so that the kernel's
        // large folios (up to 2 MiB) lie wholly inside or outside it.
        const PAGE: usize = 4096;
        let pages = 4096;
        let (first, last) = (1024, 3072);
        let dir = tempfile::tempdir().unwrap();
        let out = StoreUrl::parse(dir.path().to_str().unwrap()).unwrap();
        let data: Vec<u8> = (0..pages * PAGE).map(|i| (i % 251) as u8).collect();
        out.put(&out.child("shuffle/f.records"), data.clone())
            .await
            .unwrap();
        let path = dir.path().join("shuffle/f.records");
        // Read it all: every page cached.
        assert_eq!(std::fs::read(&path).unwrap(), data);
        assert!(resident(&path, 0..pages).iter().all(|&r| r));
        let segment = ShuffleSegment {
            offset: (first * PAGE) as u64,
            len: ((last - first) * PAGE) as u64,
            rows: 0,
        };
        let (_, bytes) = read_segment_bytes(&out, "shuffle/f.records", &segment)
            .await
            .unwrap();
        assert_eq!(&bytes[..], &data[first * PAGE..last * PAGE]);
        // The drop runs in the background.
        let mut dropped = false;
        for _ in 0..100 {
            if resident(&path, first..last).iter().all(|&r| !r) {
                dropped = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let left = resident(&path, first..last).iter().filter(|&&r| r).count();
        assert!(dropped, "{left} of the segment's pages still cached");
        assert!(resident(&path, 0..first).iter().all(|&r| r));
        assert!(resident(&path, last..pages).iter().all(|&r| r));
        // What is read again comes from the disk, the same.
        let (_, again) = read_segment_bytes(&out, "shuffle/f.records", &segment)
            .await
            .unwrap();
        assert_eq!(again, bytes);
    }
}
