//! The training reader alone, in Rust, on one thread: non-padding tokens/s of `Loader`
//! over shard files (for profiling without Python in the way).
//!
//! `cargo run --release -p probeflow-reader --example tokens -- <shard glob or dir> [seconds]
//! [<second glob or dir>]`: with a second path, a 1:1 mixture of the two.

use std::time::Instant;

use probeflow_reader::dataset::{DatasetOptions, Loader, RowSource};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: tokens <shard glob or dir> [seconds] [<second glob or dir>]")?;
    let seconds: f64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(5.0);
    let files = RowSource::resolve(&path, "train")?;
    let second = args.next();
    let opts = DatasetOptions {
        batch_size: 16,
        prefetch: 0,
        num_threads: 1,
        ..DatasetOptions::default()
    };
    let rows = RowSource::open(&files)?;
    let mut loader = match second {
        None => Loader::new(rows, opts)?,
        Some(other) => {
            let other_rows = RowSource::open(&RowSource::resolve(&other, "train")?)?;
            let sources = vec![(path.clone(), rows), (other, other_rows)];
            Loader::mixture(sources, vec![1.0, 1.0], opts)?
        }
    };
    let (mut real, mut total) = (0usize, 0usize);
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < seconds {
        let batch = loader.next_batch()?.ok_or("the stream ended")?;
        real += batch.real_tokens();
        total += batch.batch_size * batch.seq_len;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{:.1} M non-padding tokens/s, padding {:.2} %",
        real as f64 / secs / 1e6,
        100.0 * (1.0 - real as f64 / total as f64)
    );
    Ok(())
}
