//! ArrayRecord: open and read any file; write any records with any options and read
//! them back; decode any chunk data with every codec.

use probeflow_reader::array_record::chunk::{parse_sizes, split_simple, Decompressor};
use probeflow_reader::array_record::{ArrayRecordReader, ArrayRecordWriter, RecordBuf};

use super::split_first;

/// Opens `data` as an ArrayRecord file and reads it every way a reader does.
pub fn read(data: &[u8]) {
    let Ok(mut reader) = ArrayRecordReader::from_bytes("fuzz.array_record", data.to_vec()) else {
        return;
    };
    let n = reader.len();
    let mut read = 0u64;
    let mut whole = true;
    for record in reader.iter() {
        if record.is_err() {
            whole = false;
            break;
        }
        read += 1;
        assert!(read <= n, "more records than the footer's {n}");
    }
    if whole {
        assert_eq!(read, n, "fewer records than the footer says");
    }
    let mut buf = RecordBuf::new();
    for i in [0, n / 2, n.saturating_sub(1), n, u64::MAX] {
        let _ = reader.read(i, &mut buf);
    }
    let _ = reader.read_range(0..n.min(4));
    let _ = reader.read_range(n.saturating_sub(2)..n.saturating_add(2));
    reader.set_max_record_bytes(Some(16));
    for record in reader.iter().take(8) {
        let _ = record;
    }
}

/// Writer options the round trip draws from (every codec, group sizes, padding).
const OPTIONS: [&str; 10] = [
    "group_size:1,zstd:3",
    "group_size:1,uncompressed",
    "group_size:1,brotli:4",
    "group_size:1,snappy",
    "group_size:5,zstd:1,window_log:18",
    "group_size:5,uncompressed",
    "group_size:64,brotli:5",
    "group_size:3,snappy,pad_to_block_boundary:true",
    "group_size:2,zstd:-5",
    "group_size:1000,zstd:7,window_log:10",
];

/// Records from `data`: a length byte, then that many bytes (a length of 255 takes the
/// next two bytes, modulo 64, as a multiple of 4 KiB of the rest, repeated).
fn records(mut data: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some((&len, rest)) = data.split_first() {
        data = rest;
        if len == 255 && data.len() >= 2 {
            let blocks = usize::from(u16::from_le_bytes([data[0], data[1]]) % 64);
            data = &data[2..];
            let pattern = if data.is_empty() { &[7u8][..] } else { data };
            out.push(
                pattern
                    .iter()
                    .copied()
                    .cycle()
                    .take(blocks * 4096)
                    .collect(),
            );
            continue;
        }
        let take = usize::from(len).min(data.len());
        out.push(data[..take].to_vec());
        data = &data[take..];
    }
    out
}

/// Writes the records of `data[1..]` with the options `data[0]` picks, and reads them
/// back: the same records, in order. Also parses `data` as an options string.
pub fn roundtrip(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = text.parse::<probeflow_reader::array_record::WriterOptions>();
    }
    let (choice, rest) = split_first(data);
    let options = OPTIONS[usize::from(choice) % OPTIONS.len()];
    let records = records(rest);
    let mut writer = ArrayRecordWriter::new(Vec::new(), options.parse().expect("valid options"))
        .expect("a writer");
    for r in &records {
        writer.write(r).expect("a record written to memory");
    }
    let (bytes, summary) = writer.finish_into_inner().expect("a finished file");
    assert_eq!(summary.records, records.len() as u64);
    let reader = ArrayRecordReader::from_bytes("roundtrip.array_record", bytes).expect("reopened");
    let back: Vec<Vec<u8>> = reader
        .iter()
        .map(|r| r.map(|r| r.to_vec()))
        .collect::<Result<_, _>>()
        .expect("every record read back");
    assert!(back == records, "{options}: the records read back differ");
}

/// Decodes `data` as a simple chunk's data (its sizes and values, with the codec its
/// first byte names), as the reader does for `n` records, `n` from the data.
pub fn chunk(data: &[u8]) {
    let (records, rest) = split_first(data);
    let records = u64::from(records);
    let mut decompressor = Decompressor::default();
    let (mut sizes, mut values, mut limits) = (Vec::new(), Vec::new(), Vec::new());
    if let Ok(parts) = split_simple(rest) {
        if parts.compression == 0 {
            let _ = parse_sizes(parts.sizes, records, parts.values.len() as u64, &mut limits);
        } else {
            let unpacked =
                decompressor.decompress(parts.compression, parts.sizes, records * 10, &mut sizes);
            if unpacked.is_ok() {
                let total = parse_sizes(&sizes, records, u64::MAX, &mut limits)
                    .map(|_| limits.last().copied().unwrap_or(0));
                if let Ok(total) = total {
                    let _ = decompressor.decompress(
                        parts.compression,
                        parts.values,
                        total,
                        &mut values,
                    );
                }
            }
        }
    }
    // Each codec on the whole input as one blob, with any claimed size.
    for codec in [b'z', b'b', b's'] {
        let _ = decompressor.decompress(codec, rest, u64::MAX, &mut values);
        assert!(
            values.capacity() as u64
                <= probeflow_reader::array_record::chunk::decoded_bound(rest.len()).max(1 << 20),
            "a blob of {} bytes took {} bytes",
            rest.len(),
            values.capacity()
        );
        values = Vec::new();
    }
}
