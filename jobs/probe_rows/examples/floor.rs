//! The floor of the probe_rows job on this machine (tests/bench/preprocess): the least any
//! job that reads its input and writes its shards must do, measured with the job's own
//! reading and writing code, so the bench can print the job's time as a multiple of it.
//!
//! ```text
//! floor read  --threads T FILE...        the map stage's floor: the five input columns of
//!                                        every file read and decoded as the job reads
//!                                        them (its `open`: dictionary strings, page
//!                                        index, its batch size), row groups spread over
//!                                        T threads
//! floor write --threads T --scratch DIR OUTPUT
//!                                        the reduce stage's floor: every shard of the
//!                                        job's OUTPUT re-written from its row bytes into
//!                                        DIR (ArrayRecord framing and compression at the
//!                                        shard's own options, a 1 MiB buffered file,
//!                                        fsync), shards spread over T threads; reading
//!                                        a shard's rows back is not timed
//! ```
//!
//! Each prints one line, `floor <stage>: rows=… bytes=… wall_s=… cpu_s=…`.
//! Build it as everything timed: `cargo build --release --example floor`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use parquet::arrow::ProjectionMask;
use probeflow_engine::thread_cpu::thread_cpu_time;
use probeflow_probe_rows::map::BATCH_ROWS;
use probeflow_probe_rows::protocol::InputColumns;
use probeflow_reader::array_record::{ArrayRecordReader, ArrayRecordWriter, WriterOptions};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (stage, rest) = args.split_first().context(USAGE)?;
    let (threads, rest) = threads_of(rest)?;
    match stage.as_str() {
        "read" if !rest.is_empty() => read_floor(threads, rest),
        "write" => match rest {
            [flag, scratch, output] if flag == "--scratch" => {
                write_floor(threads, Path::new(scratch), Path::new(output))
            }
            _ => bail!(USAGE),
        },
        _ => bail!(USAGE),
    }
}

const USAGE: &str =
    "usage: floor read --threads T FILE... | floor write --threads T --scratch DIR OUTPUT";

fn threads_of(args: &[String]) -> Result<(usize, &[String])> {
    match args {
        [flag, n, rest @ ..] if flag == "--threads" => {
            let n: usize = n.parse().context("--threads")?;
            Ok((n.max(1), rest))
        }
        _ => bail!(USAGE),
    }
}

/// The process's user + system CPU time.
fn process_cpu() -> Duration {
    // SAFETY: `usage` is a valid, writable rusage for the duration of the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let of = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    of(usage.ru_utime) + of(usage.ru_stime)
}

fn read_floor(threads: usize, files: &[String]) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    let (cpu, started) = (process_cpu(), Instant::now());
    let rows = runtime.block_on(read_all(threads, files))?;
    let (wall, cpu) = (started.elapsed(), process_cpu() - cpu);
    let bytes: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()))
        .sum::<std::io::Result<u64>>()?;
    print_floor("read", rows, bytes, wall, cpu);
    Ok(())
}

/// Every row group of every file, `threads` at a time; the rows read.
async fn read_all(threads: usize, files: &[String]) -> Result<u64> {
    let mut units = Vec::new();
    for file in files {
        let url = std::fs::canonicalize(file)?.display().to_string();
        let size = std::fs::metadata(&url)?.len();
        let groups = probeflow_engine::parquet_source::open(&url, size, None, &[], false)
            .await?
            .metadata()
            .num_row_groups();
        units.extend((0..groups).map(|g| (url.clone(), size, g)));
    }
    let mut reads = futures::stream::iter(units)
        .map(|(url, size, group)| tokio::spawn(read_row_group(url, size, group)))
        .buffer_unordered(threads);
    let mut rows = 0;
    while let Some(read) = reads.next().await {
        rows += read??;
    }
    Ok(rows)
}

/// One row group's five columns, read as a map task reads them.
async fn read_row_group(url: String, size: u64, group: usize) -> Result<u64> {
    let columns = InputColumns::default();
    let builder = probeflow_engine::parquet_source::open(
        &url,
        size,
        None,
        &[&columns.src_addr, &columns.dst_addr],
        true,
    )
    .await?;
    let schema = builder.schema().clone();
    let roots = [
        &columns.src_addr,
        &columns.dst_addr,
        &columns.event_time,
        &columns.rtt,
        &columns.ip_version,
    ]
    .into_iter()
    .map(|name| probeflow_engine::parquet_source::column_index(&schema, &url, name))
    .collect::<Result<Vec<_>, _>>()?;
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    let mut stream = builder
        .with_projection(mask)
        .with_row_groups(vec![group])
        .with_batch_size(BATCH_ROWS)
        .build()?;
    let mut rows = 0;
    while let Some(batch) = stream.next().await {
        rows += batch?.num_rows() as u64;
    }
    Ok(rows)
}

fn write_floor(threads: usize, scratch: &Path, output: &Path) -> Result<()> {
    let shards = shard_files(output)?;
    if shards.is_empty() {
        bail!("no shards (*.array_record) under {}", output.display());
    }
    std::fs::create_dir_all(scratch)?;
    let next = Arc::new(AtomicUsize::new(0));
    let shards = Arc::new(shards);
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (next, shards) = (next.clone(), shards.clone());
            let scratch = scratch.join(format!("floor-{t}"));
            std::thread::spawn(move || rewrite_shards(&next, &shards, &scratch))
        })
        .collect();
    let mut total = Timed::default();
    for worker in workers {
        let done = worker
            .join()
            .map_err(|_| anyhow::anyhow!("a writer panicked"))??;
        total.rows += done.rows;
        total.bytes += done.bytes;
        total.wall = total.wall.max(done.wall);
        total.cpu += done.cpu;
    }
    std::fs::remove_dir_all(scratch)?;
    print_floor("write", total.rows, total.bytes, total.wall, total.cpu);
    Ok(())
}

/// What one thread wrote and the wall and CPU time its writing (not its reading) took.
#[derive(Default)]
struct Timed {
    rows: u64,
    bytes: u64,
    wall: Duration,
    cpu: Duration,
}

fn rewrite_shards(next: &AtomicUsize, shards: &[PathBuf], scratch: &Path) -> Result<Timed> {
    std::fs::create_dir_all(scratch)?;
    let mut timed = Timed::default();
    while let Some(shard) = shards.get(next.fetch_add(1, Ordering::Relaxed)) {
        let reader = ArrayRecordReader::open(shard)?;
        let options: WriterOptions = reader.writer_options().unwrap_or_default().parse()?;
        let rows = reader.iter().collect::<Result<Vec<_>, _>>()?;
        let (cpu, started) = (thread_cpu_time().unwrap_or_default(), Instant::now());
        let path = scratch.join("shard.array_record");
        let sink = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
        let mut writer = ArrayRecordWriter::new(sink, options)?;
        for row in &rows {
            writer.write(row)?;
        }
        let (sink, summary) = writer.finish_into_inner()?;
        let file = sink.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        timed.wall += started.elapsed();
        timed.cpu += thread_cpu_time().unwrap_or_default() - cpu;
        timed.rows += rows.len() as u64;
        timed.bytes += summary.bytes;
    }
    Ok(timed)
}

/// The `*.array_record` files in `output`'s split directories, in name order.
fn shard_files(output: &Path) -> Result<Vec<PathBuf>> {
    let mut shards = Vec::new();
    for split in std::fs::read_dir(output)? {
        let split = split?.path();
        if !split.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&split)? {
            let file = file?.path();
            if file.extension().is_some_and(|e| e == "array_record") {
                shards.push(file);
            }
        }
    }
    shards.sort();
    Ok(shards)
}

fn print_floor(stage: &str, rows: u64, bytes: u64, wall: Duration, cpu: Duration) {
    println!(
        "floor {stage}: rows={rows} bytes={bytes} wall_s={:.3} cpu_s={:.3}",
        wall.as_secs_f64(),
        cpu.as_secs_f64()
    );
}
