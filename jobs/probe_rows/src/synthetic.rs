//! Demo input: RIPE-Atlas-like ping measurements as Parquet, deterministic by seed.
//!
//! * sources: `rows / 200` of them (at least 10), 58 % IPv4 and 42 % IPv6; rows per
//!   source Zipf-distributed (exponent 0.85: with 100k sources the largest holds ~3 %);
//! * destinations: 3,000 anchors, each source pings anchors of its own family;
//! * RTT: log-normal around 40 ms; 3 % failed pings written as `-1.0`;
//! * times: 28 days from 2026-01-01, each file covering its own stretch of time.
//!
//! Columns: `src_addr` and `dst_addr` (Utf8), `ip_version` (Int32), `rtt` (Float64, ms),
//! `event_time` (Int64, unix seconds). Files of up to 2M rows in row groups of 128k rows.

use std::net::IpAddr;

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use probeflow_engine::store::StoreUrl;

use probeflow_engine::error::Result;

const START: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z
const SPAN: i64 = 28 * 86_400;
const ANCHORS: u64 = 3_000;
const ROWS_PER_FILE: u64 = 2_000_000;
const ROW_GROUP: usize = 131_072;

/// Demo rows are encoded in memory: an encoder that refuses them is a bug.
fn runtime(e: impl std::fmt::Display) -> probeflow_engine::error::EngineError {
    probeflow_engine::error::EngineError::Internal(format!("generating demo data: {e}"))
}

/// SplitMix64: small, fast, and good enough for demo data.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn mix(x: u64) -> u64 {
    Rng(x).next()
}

fn source_addr(k: u64) -> IpAddr {
    let h = mix(k ^ 0x5157);
    if h % 100 < 58 {
        IpAddr::from(((h >> 8) as u32 | 0x0100_0000).to_be_bytes())
    } else {
        IpAddr::from(
            ((0x2a00u128 << 112) | (u128::from(h) << 16) | u128::from(k as u16)).to_be_bytes(),
        )
    }
}

fn anchor(k: u64, v6: bool) -> IpAddr {
    let h = mix(k ^ 0xa4c4);
    if v6 {
        IpAddr::from(((0x2001_0db8u128 << 96) | u128::from(h)).to_be_bytes())
    } else {
        IpAddr::from(((h as u32) | 0xc000_0000).to_be_bytes())
    }
}

/// Cumulative Zipf weights over `n` sources.
fn zipf_cdf(n: u64) -> Vec<f64> {
    let mut acc = 0.0;
    let mut cdf: Vec<f64> = (1..=n)
        .map(|k| {
            acc += (k as f64).powf(-0.85);
            acc
        })
        .collect();
    for c in &mut cdf {
        *c /= acc;
    }
    cdf
}

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("src_addr", DataType::Utf8, false),
        Field::new("dst_addr", DataType::Utf8, false),
        Field::new("ip_version", DataType::Int32, false),
        Field::new("rtt", DataType::Float64, false),
        Field::new("event_time", DataType::Int64, false),
    ]))
}

/// Writes `rows` demo rows as `part-NNNNN.parquet` files under `out`; returns the files.
pub async fn generate(rows: u64, seed: u64, out: &StoreUrl) -> Result<Vec<String>> {
    let sources = (rows / 200).max(10);
    let cdf = zipf_cdf(sources);
    let files = rows.div_ceil(ROWS_PER_FILE);
    let mut written = Vec::new();
    for f in 0..files {
        let n = ROWS_PER_FILE.min(rows - f * ROWS_PER_FILE) as usize;
        let mut rng = Rng(mix(seed) ^ mix(f + 1));
        let t0 = START + SPAN * f as i64 / files as i64;
        let t_span = (SPAN / files as i64).max(1);
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_max_row_group_row_count(Some(ROW_GROUP))
            .build();
        let mut writer =
            ArrowWriter::try_new(Vec::new(), schema(), Some(props)).map_err(runtime)?;
        for start in (0..n).step_by(ROW_GROUP) {
            let len = ROW_GROUP.min(n - start);
            let mut src = Vec::with_capacity(len);
            let mut dst = Vec::with_capacity(len);
            let mut ver = Vec::with_capacity(len);
            let mut rtt = Vec::with_capacity(len);
            let mut time = Vec::with_capacity(len);
            for _ in 0..len {
                let u = rng.unit();
                let k = cdf.partition_point(|&c| c < u) as u64;
                let s = source_addr(k);
                let v6 = s.is_ipv6();
                src.push(s.to_string());
                dst.push(anchor(rng.next() % ANCHORS, v6).to_string());
                ver.push(if v6 { 6 } else { 4 });
                let z = (-2.0 * rng.unit().max(1e-12).ln()).sqrt()
                    * (std::f64::consts::TAU * rng.unit()).cos();
                let ms = if rng.next() % 100 < 3 {
                    -1.0
                } else {
                    (40f64.ln() + 0.8 * z).exp()
                };
                rtt.push(ms);
                time.push(t0 + (rng.next() % t_span as u64) as i64);
            }
            let columns: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from(src)),
                Arc::new(StringArray::from(dst)),
                Arc::new(Int32Array::from(ver)),
                Arc::new(Float64Array::from(rtt)),
                Arc::new(Int64Array::from(time)),
            ];
            let batch = RecordBatch::try_new(schema(), columns).map_err(runtime)?;
            writer.write(&batch).map_err(runtime)?;
        }
        let bytes = writer.into_inner().map_err(runtime)?;
        let rel = format!("part-{f:05}.parquet");
        out.put(&out.child(&rel), bytes).await?;
        written.push(format!("{}/{rel}", out.url.trim_end_matches('/')));
    }
    Ok(written)
}

/// True if `dir` already holds a complete generation (its marker file).
pub async fn ensure(rows: u64, seed: u64, out: &StoreUrl) -> Result<()> {
    let marker = out.child("_GENERATED");
    let expect = format!("rows={rows} seed={seed}\n");
    if let Some(found) = out.get_opt(&marker).await? {
        if found.as_ref() == expect.as_bytes() {
            return Ok(());
        }
    }
    out.delete_prefix("").await?;
    generate(rows, seed, out).await?;
    out.put(&marker, expect.into_bytes()).await?;
    Ok(())
}
