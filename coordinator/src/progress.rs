//! Progress: an `indicatif` bar on a terminal (tasks, input rows, bytes written, ETA),
//! `tracing` lines otherwise.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
    maps: u64,
    reduces: u64,
    total_rows: u64,
    maps_done: AtomicU64,
    reduces_done: AtomicU64,
    rows: AtomicU64,
    bytes: AtomicU64,
    last_log: std::sync::Mutex<Instant>,
}

impl Progress {
    pub fn new(maps: u64, reduces: u64, total_rows: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(maps + reduces);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} tasks  {msg}  ETA {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress {
            bar,
            maps,
            reduces,
            total_rows,
            maps_done: AtomicU64::new(0),
            reduces_done: AtomicU64::new(0),
            rows: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            last_log: std::sync::Mutex::new(Instant::now()),
        }
    }

    pub fn resume(&self, rows: u64, maps_done: u64, reduces_done: u64) {
        self.rows.store(rows, Ordering::Relaxed);
        self.maps_done.store(maps_done, Ordering::Relaxed);
        self.reduces_done.store(reduces_done, Ordering::Relaxed);
        self.update();
    }

    fn message(&self) -> String {
        format!(
            "maps {}/{}  reduces {}/{}  rows {}/{}  written {:.1} MB",
            self.maps_done.load(Ordering::Relaxed),
            self.maps,
            self.reduces_done.load(Ordering::Relaxed),
            self.reduces,
            self.rows.load(Ordering::Relaxed),
            self.total_rows,
            self.bytes.load(Ordering::Relaxed) as f64 / 1e6
        )
    }

    fn update(&self) {
        let done =
            self.maps_done.load(Ordering::Relaxed) + self.reduces_done.load(Ordering::Relaxed);
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            bar.set_message(self.message());
        }
    }

    pub fn map_done(&self, rows: u64) {
        self.maps_done.fetch_add(1, Ordering::Relaxed);
        self.rows.fetch_add(rows, Ordering::Relaxed);
        self.update();
        self.log(false);
    }

    pub fn reduce_done(&self, bytes: u64) {
        self.reduces_done.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.update();
        self.log(false);
    }

    pub fn tick(&self) {
        self.log(false);
    }

    fn log(&self, force: bool) {
        if self.bar.is_some() {
            return;
        }
        if let Ok(mut last) = self.last_log.lock() {
            if force || last.elapsed() >= Duration::from_secs(10) {
                *last = Instant::now();
                tracing::info!(progress = %self.message());
            }
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        self.log(true);
    }
}
