//! The scan of one Atlas results file, on a blocking thread of its own: the store's
//! chunks → decompression → bounded lines ([`super::lines`]) → the rules
//! ([`super::result`]) → batches of packets in the input columns the validation reads,
//! each with the lines its rows came from and the lines rejected whole.
//!
//! Memory: the decompressor's window, one line (at most [`MAX_LINE_BYTES`]), and the
//! batches in flight ([`BATCHES_AHEAD`] of at most [`BATCH_PACKETS`] packets and
//! [`BATCH_LINE_BYTES`] of lines each), whatever the file's size.

use std::io::Read;
use std::sync::{Arc, Mutex};

use arrow::array::{
    ArrayRef, Float64Builder, Int32Builder, Int64Builder, RecordBatch, StringBuilder,
};
use arrow::datatypes::{DataType, Field, Schema};
use futures::stream::BoxStream;
use futures::StreamExt;
use probeflow_engine::error::{EngineError, Result};

use super::lines::{Compression, Line, Lines, MAX_LINE_BYTES};
use super::result::{read_line, SourceRule};
use super::AtlasCounts;
use crate::error::ProbeRowsError;
use crate::protocol::InputColumns;
use crate::validate::Reason;

/// Packets per batch.
pub const BATCH_PACKETS: usize = 32_768;
/// Bytes of lines a batch keeps (for the rejects) before it is sent.
pub const BATCH_LINE_BYTES: usize = 8 << 20;
/// Batches the scan runs ahead of the validation.
pub const BATCHES_AHEAD: usize = 2;

/// The lines of one batch, kept for the rejects: their numbers (1-based) and bytes.
#[derive(Debug, Default)]
pub struct BatchLines {
    numbers: Vec<u64>,
    ends: Vec<usize>,
    bytes: Vec<u8>,
}

impl BatchLines {
    fn push(&mut self, number: u64, line: &[u8]) -> u32 {
        self.numbers.push(number);
        self.bytes.extend_from_slice(line);
        self.ends.push(self.bytes.len());
        (self.numbers.len() - 1) as u32
    }

    /// Line `i`'s number and bytes.
    pub fn get(&self, i: u32) -> (u64, &[u8]) {
        let i = i as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        (self.numbers[i], &self.bytes[start..self.ends[i]])
    }
}

/// Packets of consecutive lines, and what those lines gave besides.
pub struct ScanBatch {
    /// One row per packet, in the input columns ([`batch_schema`]).
    pub packets: RecordBatch,
    /// Each packet's line (an index into `lines`).
    pub packet_lines: Vec<u32>,
    pub lines: BatchLines,
    /// Rows of a line dropped by the rules: (line, reason, rows).
    pub dropped: Vec<(u32, Reason, u32)>,
    /// The rows of these lines ([`super::result::LineOutcome::rows`]).
    pub input_rows: u64,
    pub counts: AtlasCounts,
}

/// The schema of a scan's packets: the input columns, named as the validation reads them.
pub fn batch_schema(columns: &InputColumns) -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new(&columns.src_addr, DataType::Utf8, true),
        Field::new(&columns.dst_addr, DataType::Utf8, true),
        Field::new(&columns.event_time, DataType::Int64, false),
        Field::new(&columns.rtt, DataType::Float64, false),
        Field::new(&columns.ip_version, DataType::Int32, true),
    ]))
}

struct Builder {
    schema: Arc<Schema>,
    src: StringBuilder,
    dst: StringBuilder,
    time: Int64Builder,
    rtt: Float64Builder,
    version: Int32Builder,
    packet_lines: Vec<u32>,
    lines: BatchLines,
    dropped: Vec<(u32, Reason, u32)>,
    input_rows: u64,
    counts: AtlasCounts,
}

impl Builder {
    fn new(schema: Arc<Schema>) -> Self {
        Builder {
            schema,
            src: StringBuilder::new(),
            dst: StringBuilder::new(),
            time: Int64Builder::new(),
            rtt: Float64Builder::new(),
            version: Int32Builder::new(),
            packet_lines: Vec::new(),
            lines: BatchLines::default(),
            dropped: Vec::new(),
            input_rows: 0,
            counts: AtlasCounts::default(),
        }
    }

    fn full(&self) -> bool {
        self.packet_lines.len() >= BATCH_PACKETS || self.lines.bytes.len() >= BATCH_LINE_BYTES
    }

    fn is_empty(&self) -> bool {
        self.input_rows == 0 && self.counts.lines == 0
    }

    /// Adds one line (`number`, 1-based; `kind` as [`Lines`] read it).
    fn add(&mut self, number: u64, line: &[u8], kind: Line, rule: SourceRule) {
        self.counts.lines += 1;
        if kind == Line::TooLong {
            self.counts.not_results += 1;
            let i = self.lines.push(number, line);
            self.dropped.push((i, Reason::LineTooLong, 1));
            self.input_rows += 1;
            return;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let out = read_line(line, rule);
        self.input_rows += u64::from(out.rows);
        if out.is_ping {
            self.counts.results += 1;
            self.counts.packets += u64::from(out.entries);
        } else {
            self.counts.not_results += 1;
        }
        let i = self.lines.push(number, line);
        for &(reason, rows) in &out.dropped {
            self.dropped.push((i, reason, rows));
        }
        for p in &out.packets {
            self.src.append_option(p.src_addr.as_deref());
            self.dst.append_option(p.dst_addr.as_deref());
            self.time.append_value(p.event_time);
            self.rtt.append_value(p.rtt_ms);
            // A family beyond i32 is no family: the validation rejects 0 as bad.
            self.version
                .append_option(p.ip_version.map(|v| i32::try_from(v).unwrap_or(0)));
            self.packet_lines.push(i);
        }
    }

    fn finish(&mut self) -> Result<ScanBatch> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.src.finish()),
            Arc::new(self.dst.finish()),
            Arc::new(self.time.finish()),
            Arc::new(self.rtt.finish()),
            Arc::new(self.version.finish()),
        ];
        let packets = RecordBatch::try_new(self.schema.clone(), columns)?;
        Ok(ScanBatch {
            packets,
            packet_lines: std::mem::take(&mut self.packet_lines),
            lines: std::mem::take(&mut self.lines),
            dropped: std::mem::take(&mut self.dropped),
            input_rows: std::mem::take(&mut self.input_rows),
            counts: std::mem::take(&mut self.counts),
        })
    }
}

/// The store's chunks as a blocking [`Read`]; a store error is kept aside (in `failed`),
/// so that it is not taken for a corrupt file.
struct ChunkReader {
    handle: tokio::runtime::Handle,
    chunks: BoxStream<'static, Result<bytes::Bytes>>,
    chunk: bytes::Bytes,
    failed: Arc<Mutex<Option<EngineError>>>,
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.handle.block_on(self.chunks.next()) {
                Some(Ok(chunk)) => self.chunk = chunk,
                Some(Err(e)) => {
                    let shown = e.to_string();
                    if let Ok(mut failed) = self.failed.lock() {
                        *failed = Some(e);
                    }
                    return Err(std::io::Error::other(shown));
                }
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        self.chunk = self.chunk.slice(n..);
        Ok(n)
    }
}

/// Starts the scan of `file` (its chunks from the store): its batches, in file order,
/// then the end of the channel; an error ends it.
pub fn start(
    file: String,
    chunks: BoxStream<'static, Result<bytes::Bytes>>,
    columns: &InputColumns,
    rule: SourceRule,
) -> tokio::sync::mpsc::Receiver<Result<ScanBatch>> {
    let (send, batches) = tokio::sync::mpsc::channel(BATCHES_AHEAD);
    let schema = batch_schema(columns);
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let failed = Arc::new(Mutex::new(None));
        let reader = ChunkReader {
            handle,
            chunks,
            chunk: bytes::Bytes::new(),
            failed: failed.clone(),
        };
        let result = scan(&file, reader, schema, rule, &failed, |batch| {
            send.blocking_send(Ok(batch)).is_ok()
        });
        if let Err(e) = result {
            let _ = send.blocking_send(Err(e));
        }
    });
    batches
}

/// Scans `reader` (the file's bytes as stored), handing each batch to `each` until it
/// says stop.
fn scan(
    file: &str,
    reader: impl Read,
    schema: Arc<Schema>,
    rule: SourceRule,
    failed: &Mutex<Option<EngineError>>,
    mut each: impl FnMut(ScanBatch) -> bool,
) -> Result<()> {
    let corrupt = |e: std::io::Error| -> EngineError {
        if let Some(store) = failed.lock().ok().and_then(|mut f| f.take()) {
            return store;
        }
        ProbeRowsError::CorruptInput {
            file: file.to_string(),
            what: format!("cannot be read as {:?}: {e}", Compression::of(file)),
        }
        .into()
    };
    let decoded = Compression::of(file).decoder(reader).map_err(corrupt)?;
    let mut lines = Lines::new(decoded, MAX_LINE_BYTES);
    let mut line = Vec::new();
    let mut number = 0u64;
    let mut builder = Builder::new(schema);
    while let Some(kind) = lines.next_line(&mut line).map_err(corrupt)? {
        number += 1;
        builder.add(number, &line, kind, rule);
        if builder.full() && !each(builder.finish()?) {
            return Ok(());
        }
    }
    if !builder.is_empty() {
        each(builder.finish()?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};

    fn scan_text(text: &str) -> Vec<ScanBatch> {
        let mut batches = Vec::new();
        scan(
            "t.jsonl",
            text.as_bytes(),
            batch_schema(&InputColumns::default()),
            SourceRule::Public,
            &Mutex::new(None),
            |b| {
                batches.push(b);
                true
            },
        )
        .unwrap();
        batches
    }

    #[test]
    fn packets_carry_their_line_and_rejected_lines_their_rows() {
        let good = r#"{"af":4,"dst_addr":"8.8.8.8","from":"1.2.3.4","fw":5000,"msm_id":1,"prb_id":1,"result":[{"rtt":1.5},{"x":"*"}],"timestamp":1600000000,"type":"ping"}"#;
        let no_af = r#"{"dst_addr":"8.8.8.8","from":"1.2.3.4","fw":5000,"msm_id":1,"prb_id":1,"result":[{"rtt":2}],"timestamp":1600000000,"type":"ping"}"#;
        let text = format!("{good}\n\nnot json\n{no_af}\n{{\"torn\":");
        let batches = scan_text(&text);
        assert_eq!(batches.len(), 1);
        let b = &batches[0];
        assert_eq!(b.packets.num_rows(), 3);
        assert_eq!(b.input_rows, 5);
        assert_eq!(
            (
                b.counts.lines,
                b.counts.results,
                b.counts.packets,
                b.counts.not_results
            ),
            (5, 2, 3, 2)
        );
        let lines: Vec<u64> = b.packet_lines.iter().map(|&i| b.lines.get(i).0).collect();
        assert_eq!(lines, [1, 1, 4]);
        let dropped: Vec<(u64, Reason, u32)> = b
            .dropped
            .iter()
            .map(|&(i, r, n)| (b.lines.get(i).0, r, n))
            .collect();
        assert_eq!(
            dropped,
            [(3, Reason::MalformedLine, 1), (5, Reason::MalformedLine, 1)]
        );
        assert_eq!(b.lines.get(b.dropped[0].0).1, b"not json");
        let rtt = b
            .packets
            .column(3)
            .as_primitive::<arrow::datatypes::Float64Type>();
        assert_eq!(rtt.values().to_vec(), [1.5, -1.0, 2.0]);
        let version = b
            .packets
            .column(4)
            .as_primitive::<arrow::datatypes::Int32Type>();
        assert_eq!(version.value(2), 4);
        assert!(!version.is_null(0));
    }
}
