//! Read-path benchmark: random-access ArrayRecord reads and row decoding.
//!
//! `cargo bench -p probeflow-reader --bench read_throughput -- [DIR]` writes four shard
//! files into DIR (default `target/bench-data`): realistic probe rows and small 1 KiB
//! records, each uncompressed and zstd:3. It prints, per file, single-thread random-read
//! throughput (records/s, MB/s of record bytes) and the row-decode rate (measurements/s),
//! and writes the figures to DIR/rust.json. `bench/run` then times Google's
//! `array_record` reader on the same files and prints both side by side.

use std::hint::black_box;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Instant;

use probeflow_reader::array_record::{
    ArrayRecordReader, ArrayRecordWriter, RecordBuf, WriterOptions,
};
use probeflow_reader::row::{decode_row, Measurement, RowBuilder, RttCode, DEFAULT_MAX_ROW_BYTES};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Rows like a shard's: per-probe counts log-normal around 1500 measurements with a
/// heavy tail up to the 8 MiB cap; 58 % IPv4 sources.
fn probe_rows(n_rows: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng(0x5eed);
    let mut rows = Vec::with_capacity(n_rows);
    let mut k = 0u32;
    while rows.len() < n_rows {
        k += 1;
        let v6 = rng.unit() > 0.58;
        let src: IpAddr = if v6 {
            IpAddr::from([0x2001, 0xdb8, (k >> 16) as u16, k as u16, 0, 0, 0, 1])
        } else {
            IpAddr::from((0x0a00_0000u32 + k).to_be_bytes())
        };
        // Box-Muller normal for a log-normal count.
        let z =
            (-2.0 * rng.unit().max(1e-12).ln()).sqrt() * (std::f64::consts::TAU * rng.unit()).cos();
        let count = ((1500f64.ln() + 1.6 * z).exp() as usize).clamp(1, 1_500_000);
        let mut builder = RowBuilder::new(src, DEFAULT_MAX_ROW_BYTES).expect("row cap");
        let mut t = 1_700_000_000u64;
        for i in 0..count {
            t += rng.next() % 600;
            let dst: IpAddr = if v6 {
                IpAddr::from([
                    0x2001,
                    0xdb8,
                    0xffff,
                    0,
                    0,
                    0,
                    0,
                    (rng.next() % 3000) as u16,
                ])
            } else {
                IpAddr::from((0xc000_0000u32 + (rng.next() % 3000) as u32).to_be_bytes())
            };
            let rtt = if i % 29 == 0 {
                None
            } else {
                RttCode::from_ms(rng.unit() * 300.0).expect("finite")
            };
            let m = Measurement {
                event_time: t,
                dst_addr: dst,
                rtt,
            };
            rows.extend(builder.push(&m).expect("ordered").map(|r| r.bytes));
        }
        rows.extend(builder.finish().expect("finish").map(|r| r.bytes));
    }
    rows.truncate(n_rows);
    rows
}

fn small_records(n: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng(7);
    (0..n)
        .map(|_| (0..1024).map(|_| (rng.next() % 16) as u8).collect())
        .collect()
}

fn write(path: &Path, options: &str, records: &[Vec<u8>]) {
    let opts: WriterOptions = options.parse().expect("options");
    let mut w = ArrayRecordWriter::create(path, opts).expect("create");
    for r in records {
        w.write(r).expect("write");
    }
    w.finish().expect("finish");
}

fn permutation(n: u64, seed: u64) -> Vec<u64> {
    let mut rng = Rng(seed);
    let mut v: Vec<u64> = (0..n).collect();
    for i in (1..v.len()).rev() {
        v.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    v
}

/// Best of three: (seconds, bytes read) for reading `indices` at random.
fn time_random_reads(reader: &ArrayRecordReader, indices: &[u64]) -> (f64, u64) {
    let mut best = f64::MAX;
    let mut bytes = 0;
    for _ in 0..3 {
        let mut buf = RecordBuf::new();
        let start = Instant::now();
        let mut total = 0u64;
        for &i in indices {
            total += black_box(reader.read(i, &mut buf).expect("read")).len() as u64;
        }
        best = best.min(start.elapsed().as_secs_f64());
        bytes = total;
    }
    (best, bytes)
}

/// Best of three: (seconds, measurements) to decode every row and touch every field.
fn time_decode(rows: &[Vec<u8>]) -> (f64, u64) {
    let mut best = f64::MAX;
    let mut count = 0;
    for _ in 0..3 {
        let start = Instant::now();
        let mut n = 0u64;
        let mut acc = 0u64;
        for row in rows {
            let view = decode_row(row).expect("decode");
            for i in 0..view.len() {
                acc = acc
                    .wrapping_add(view.event_time(i))
                    .wrapping_add(u64::from(view.dst_bytes(i)[0]))
                    .wrapping_add(view.rtt(i).map_or(0, |c| u64::from(c.0)));
            }
            n += view.len() as u64;
        }
        black_box(acc);
        best = best.min(start.elapsed().as_secs_f64());
        count = n;
    }
    (best, count)
}

fn main() {
    let dir = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/bench-data"));
    std::fs::create_dir_all(&dir).expect("bench dir");

    let t = Instant::now();
    let rows = probe_rows(3000);
    let small = small_records(100_000);
    let row_bytes: usize = rows.iter().map(Vec::len).sum();
    println!(
        "generated {} rows ({:.1} MB, largest {:.2} MB) and {} small records in {:.1} s",
        rows.len(),
        row_bytes as f64 / 1e6,
        rows.iter().map(Vec::len).max().unwrap_or(0) as f64 / 1e6,
        small.len(),
        t.elapsed().as_secs_f64()
    );

    let files = [
        ("rows_uncompressed", "group_size:1,uncompressed", &rows),
        ("rows_zstd3", "group_size:1,zstd:3", &rows),
        ("small_uncompressed", "group_size:1,uncompressed", &small),
        ("small_zstd3", "group_size:1,zstd:3", &small),
    ];
    let mut json = Vec::new();
    println!(
        "\n{:<20} {:>10} {:>12} {:>14} {:>12}",
        "file", "size MB", "reads", "records/s", "MB/s"
    );
    for (name, options, records) in files {
        let path = dir.join(format!("{name}.array_record"));
        write(&path, options, records);
        let reader = ArrayRecordReader::open(&path).expect("open");
        let indices = permutation(reader.len(), 42);
        let (secs, bytes) = time_random_reads(&reader, &indices);
        let rps = indices.len() as f64 / secs;
        let mbps = bytes as f64 / secs / 1e6;
        println!(
            "{name:<20} {:>10.1} {:>12} {:>14.0} {:>12.0}",
            reader.file_size() as f64 / 1e6,
            indices.len(),
            rps,
            mbps
        );
        json.push(format!(
            "\"{name}\": {{\"path\": \"{}\", \"records\": {}, \"records_per_s\": {rps:.1}, \"mb_per_s\": {mbps:.1}}}",
            path.display(),
            reader.len()
        ));
    }

    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        for row in &rows {
            black_box(decode_row(row).expect("decode"));
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    let header_rate = rows.len() as f64 / best;
    println!("\nrow decode, view only (decode_row, no field reads): {header_rate:.0} rows/s");
    json.push(format!("\"decode_rows_per_s\": {header_rate:.1}"));
    let (secs, n) = time_decode(&rows);
    let decode_rate = n as f64 / secs;
    println!(
        "row decode (decode_row + read every field): {n} measurements in {secs:.3} s = {:.1} M measurements/s",
        decode_rate / 1e6
    );
    json.push(format!(
        "\"decode_measurements_per_s\": {decode_rate:.1}, \"decode_measurements\": {n}"
    ));
    let out = dir.join("rust.json");
    std::fs::write(&out, format!("{{{}}}\n", json.join(", "))).expect("write json");
    println!("figures written to {}", out.display());
}
