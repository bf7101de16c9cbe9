//! ArrayRecord round trips and corruption handling, through the public API.

use probeflow_reader::array_record::{
    ArrayRecordReader, ArrayRecordWriter, RecordBuf, WriterOptions,
};
use probeflow_reader::{Error, Location};

/// Deterministic pseudo-random numbers (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn records(n: usize, seed: u64, max_big: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed | 1);
    (0..n)
        .map(|i| {
            let len = match i % 10 {
                0 => 0,
                1 => 1 + rng.below(max_big) as usize,
                _ => rng.below(300) as usize,
            };
            (0..len)
                .map(|j| (i as u64 * 31 + j as u64 * 7 + rng.below(3)) as u8)
                .collect()
        })
        .collect()
}

fn write(options: &str, records: &[Vec<u8>]) -> Vec<u8> {
    let mut w = ArrayRecordWriter::new(Vec::new(), options.parse().unwrap()).unwrap();
    for r in records {
        w.write(r).unwrap();
    }
    let (bytes, summary) = w.finish_into_inner().unwrap();
    assert_eq!(summary.records, records.len() as u64);
    assert_eq!(summary.bytes, bytes.len() as u64);
    assert_eq!(bytes.len() % 65_536, 0, "files end on a block boundary");
    bytes
}

const OPTIONS: [&str; 8] = [
    "group_size:1,zstd:3",
    "group_size:1,uncompressed",
    "group_size:1,brotli:4",
    "group_size:1,snappy",
    "group_size:5,zstd:1,window_log:18",
    "group_size:5,uncompressed",
    "group_size:64,brotli",
    "group_size:3,snappy,pad_to_block_boundary:true",
];

#[test]
fn every_option_round_trips() {
    let recs = records(57, 1, 200_000);
    for options in OPTIONS {
        let bytes = write(options, &recs);
        let reader = ArrayRecordReader::from_bytes(options, bytes.clone()).unwrap();
        assert_eq!(reader.len(), recs.len() as u64);
        let parsed: WriterOptions = options.parse().unwrap();
        assert_eq!(
            reader.writer_options(),
            Some(parsed.footer_string().as_str())
        );
        assert_eq!(
            reader.group_size(),
            u64::from(parsed.group_size).min(recs.len() as u64)
        );
        // Sequential, random and range access agree with what was written.
        let all: Vec<Vec<u8>> = reader.iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(all, recs, "{options}");
        let mut buf = RecordBuf::new();
        let mut rng = Rng(7);
        for _ in 0..200 {
            let i = rng.below(recs.len() as u64);
            assert_eq!(
                reader.read(i, &mut buf).unwrap(),
                &recs[i as usize][..],
                "{options} {i}"
            );
        }
        assert_eq!(reader.read_range(10..20).unwrap(), recs[10..20].to_vec());
        // Writing the same records again gives the same bytes.
        assert_eq!(
            write(options, &recs),
            bytes,
            "{options} is not deterministic"
        );
    }
}

#[test]
fn empty_single_and_many_records() {
    for options in ["group_size:1,zstd:3", "group_size:1000,uncompressed"] {
        let empty = ArrayRecordReader::from_bytes("e", write(options, &[])).unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.num_chunks(), 0);
        assert!(matches!(
            empty.read_to_vec(0),
            Err(Error::IndexOutOfRange { .. })
        ));

        let one = ArrayRecordReader::from_bytes("o", write(options, &[b"x".to_vec()])).unwrap();
        assert_eq!(one.read_to_vec(0).unwrap(), b"x");

        let many: Vec<Vec<u8>> = (0..100_000u32).map(|i| i.to_le_bytes().to_vec()).collect();
        let r = ArrayRecordReader::from_bytes("m", write(options, &many)).unwrap();
        assert_eq!(r.len(), 100_000);
        let mut buf = RecordBuf::new();
        for i in [0u64, 1, 999, 1000, 54_321, 99_999] {
            assert_eq!(r.read(i, &mut buf).unwrap(), &many[i as usize][..]);
        }
    }
}

#[test]
fn eight_mib_records_cross_many_blocks() {
    let big: Vec<u8> = (0..8usize << 20)
        .map(|i| ((i * 2654435761usize) >> 13) as u8)
        .collect();
    let recs = vec![b"a".to_vec(), big.clone(), Vec::new(), big];
    for options in [
        "group_size:1,uncompressed",
        "group_size:1,zstd:3",
        "group_size:2,snappy",
    ] {
        let r = ArrayRecordReader::from_bytes(options, write(options, &recs)).unwrap();
        let all: Vec<Vec<u8>> = r.iter().collect::<Result<_, _>>().unwrap();
        assert!(all == recs, "{options}");
    }
}

#[test]
fn files_open_from_disk_and_errors_name_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shard.array_record");
    let mut w = ArrayRecordWriter::create(&path, WriterOptions::default()).unwrap();
    w.write(b"hello").unwrap();
    let summary = w.finish().unwrap();
    assert_eq!(summary.records, 1);
    let r = ArrayRecordReader::open(&path).unwrap();
    assert_eq!(r.read_to_vec(0).unwrap(), b"hello");

    let missing = dir.path().join("missing.array_record");
    let err = ArrayRecordReader::open(&missing).unwrap_err().to_string();
    assert!(err.contains("missing.array_record"), "{err}");

    let not_ar = dir.path().join("notes.txt");
    std::fs::write(&not_ar, b"just some text").unwrap();
    let err = ArrayRecordReader::open(&not_ar).unwrap_err().to_string();
    assert!(
        err.contains("notes.txt") && err.contains("signature"),
        "{err}"
    );
}

/// Opens and reads everything; returns the records or the first error.
fn read_all(bytes: Vec<u8>) -> Result<Vec<Vec<u8>>, Error> {
    let reader = ArrayRecordReader::from_bytes("damaged.array_record", bytes)?;
    reader.iter().collect()
}

fn check_error(err: &Error) {
    let text = err.to_string();
    assert!(
        text.starts_with("damaged.array_record: "),
        "error must name the file: {text}"
    );
    if let Error::Corrupt { location, what, .. } = err {
        assert!(!what.is_empty());
        if let Location::Chunk { .. } = location {
            assert!(text.contains("chunk"), "{text}");
        }
    }
}

#[test]
fn flipped_bytes_give_errors_or_the_original_records() {
    let recs = records(23, 3, 80_000);
    for options in [
        "group_size:3,zstd:3",
        "group_size:1,uncompressed",
        "group_size:2,brotli:2",
        "group_size:4,snappy",
    ] {
        let bytes = write(options, &recs);
        let n = bytes.len() as u64;
        let mut rng = Rng(11);
        let mut positions: Vec<u64> = (0..4096).collect();
        positions.extend((0..2000).map(|_| rng.below(n)));
        // Around every block boundary and through the footer and postscript.
        for b in (0..n).step_by(65_536) {
            positions.extend(b.saturating_sub(48)..(b + 64).min(n));
        }
        positions.extend((n - 65_536)..(n - 65_536 + 400));
        let mut errors = 0;
        for pos in positions {
            let mut copy = bytes.clone();
            copy[pos as usize] ^= 1 << rng.below(8);
            match read_all(copy) {
                Ok(got) => assert!(
                    got == recs,
                    "{options}: a flip at {pos} changed the data silently"
                ),
                Err(e) => {
                    check_error(&e);
                    errors += 1;
                }
            }
        }
        assert!(errors > 3000, "{options}: only {errors} flips detected");
    }
}

#[test]
fn truncated_files_are_errors() {
    let recs = records(23, 5, 200_000);
    for options in ["group_size:3,zstd:3", "group_size:1,uncompressed"] {
        let bytes = write(options, &recs);
        let n = bytes.len();
        let mut rng = Rng(13);
        let mut lengths: Vec<usize> = (0..n).step_by(61).collect();
        lengths.extend((n - 70_000..n).step_by(7));
        lengths.extend((0..1500).map(|_| rng.below(n as u64) as usize));
        lengths.extend(n - 8..n);
        for len in lengths {
            let err = read_all(bytes[..len].to_vec())
                .expect_err(&format!("{options}: truncated to {len}"));
            check_error(&err);
        }
    }
}

#[test]
fn random_bytes_are_errors() {
    let mut rng = Rng(17);
    for i in 0..300 {
        let len = [0, 10, 64, 65_600, 131_072][i % 5] + rng.below(100) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if i % 2 == 0 && len >= 64 {
            // A valid signature on top of garbage gets further into the parser.
            let sig = write("uncompressed", &[]);
            bytes[..64].copy_from_slice(&sig[..64]);
        }
        let err = read_all(bytes).expect_err("random bytes must not parse");
        check_error(&err);
    }
}

#[test]
fn a_chunk_claiming_records_past_the_known_row_limit_is_refused_before_decoding() {
    let rows: Vec<Vec<u8>> = (0..4).map(|i| vec![i as u8; 1000]).collect();
    let bytes = write("group_size:2,zstd:3", &rows);
    let mut reader = ArrayRecordReader::from_bytes("shard.array_record", bytes).unwrap();
    reader.set_max_record_bytes(Some(1000));
    assert_eq!(reader.iter().collect::<Result<Vec<_>, _>>().unwrap(), rows);
    reader.set_max_record_bytes(Some(999));
    let err = reader.read_to_vec(2).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corrupt {
                location: Location::Chunk { index: 1, .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("max_row_bytes (999)"), "{err}");
}

/// Riegeli gives every record at least one byte of the file: a chunk ends no sooner than
/// its first byte plus its record count. So a small compressed chunk cannot claim many
/// records, and the 8-byte offset the reader keeps per record stays within 8 times the
/// bytes the chunk spans. Here a postscript chunk of a few dozen bytes whose zstd sizes
/// unpack to 1 Mi empty records (1 MiB of offsets from a 64 KiB block) is refused as a
/// chunk running past the end of the file, before anything is decompressed.
#[test]
fn a_small_chunk_claiming_more_records_than_bytes_it_spans_is_refused() {
    use probeflow_reader::array_record::chunk::Compressor;
    use probeflow_reader::array_record::layout::{self, ChunkHeader};
    use probeflow_reader::array_record::Compression;

    let claimed: u64 = 1 << 20;
    let mut zstd = Compressor::new(Compression::Zstd {
        level: 3,
        window_log: 20,
    })
    .unwrap();
    let (mut sizes, mut values) = (Vec::new(), Vec::new());
    zstd.compress(&vec![0u8; claimed as usize], &mut sizes)
        .unwrap();
    zstd.compress(&[], &mut values).unwrap();
    let mut data = vec![b'z', sizes.len() as u8];
    assert!(sizes.len() < 128, "one varint byte: {}", sizes.len());
    data.extend_from_slice(&sizes);
    data.extend_from_slice(&values);
    let header = ChunkHeader::new(&data, b'r', claimed, 0);

    let mut bytes = write("group_size:1,zstd:3", &[b"row".to_vec()]);
    let ps_offset = bytes.len() - 65_536;
    let end = layout::add_with_overhead(ps_offset as u64, 40 + data.len() as u64).unwrap();
    let mut chunk = layout::block_header(0, end - ps_offset as u64).to_vec();
    chunk.extend_from_slice(&header.encode());
    chunk.extend_from_slice(&data);
    bytes[ps_offset..].fill(0);
    bytes[ps_offset..ps_offset + chunk.len()].copy_from_slice(&chunk);

    let err = ArrayRecordReader::from_bytes("shard.array_record", bytes).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corrupt {
                location: Location::Postscript { .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("bad chunk size"), "{err}");
}
