//! Progress: an `indicatif` bar on a terminal (tasks per stage, the job's work units,
//! bytes written, the ETA), `tracing` lines otherwise (at most every 10 s, and at the
//! end). The ETA is the monitor's ([`crate::monitor::JobMonitor::eta`]: work left over
//! the measured rate of work), the same as `/metrics` and the status page serve.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::kind::{ProgressTotals, Progressed};
use indicatif::{ProgressBar, ProgressStyle};

struct Counts {
    /// Per stage: name, tasks done, tasks planned.
    stages: Vec<(String, u64, u64)>,
    units: u64,
    bytes: u64,
    /// The monitor's estimate and its p90, seconds.
    eta: Option<(f64, f64)>,
}

pub struct Progress {
    bar: Option<ProgressBar>,
    unit: &'static str,
    total_units: u64,
    counts: Mutex<Counts>,
    last_log: Mutex<Instant>,
}

impl Progress {
    /// The progress of a job of `totals` whose stages have `stages` tasks (`None`: not
    /// known yet; [`Self::stage_planned`] gives it when the stage is made).
    pub fn new(totals: &ProgressTotals, stages: &[(&'static str, Option<u64>)]) -> Self {
        let total: u64 = stages.iter().filter_map(|(_, n)| *n).sum();
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} tasks  {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress {
            bar,
            unit: totals.unit,
            total_units: totals.total_units,
            counts: Mutex::new(Counts {
                stages: stages
                    .iter()
                    .map(|(name, n)| (name.to_string(), 0, n.unwrap_or(0)))
                    .collect(),
                units: 0,
                bytes: 0,
                eta: None,
            }),
            last_log: Mutex::new(Instant::now()),
        }
    }

    fn message(c: &Counts, unit: &str, total_units: u64) -> String {
        let mut m = String::new();
        for (name, done, of) in &c.stages {
            m.push_str(&format!("{name} {done}/{of}  "));
        }
        m.push_str(&format!(
            "{unit} {}/{total_units}  written {:.1} MB",
            c.units,
            c.bytes as f64 / 1e6
        ));
        if let Some((eta, p90)) = c.eta {
            m.push_str(&format!(
                "  ETA {} (p90 {})",
                crate::monitor::page::duration(eta),
                crate::monitor::page::duration(p90)
            ));
        }
        m
    }

    /// The monitor's ETA now (shown from the next update on).
    pub fn set_eta(&self, eta: Option<(f64, f64)>) {
        if let Ok(mut c) = self.counts.lock() {
            c.eta = eta;
        }
    }

    /// Stage `stage` was made with `tasks` tasks: the count replaces the plan's (a
    /// stage's count may depend on an earlier stage's results, such as the overlap
    /// scan's index groups).
    pub fn stage_planned(&self, stage: &str, tasks: u64) {
        let total = {
            let Ok(mut c) = self.counts.lock() else {
                return;
            };
            match c.stages.iter_mut().find(|(name, _, _)| name == stage) {
                Some(s) => s.2 = tasks,
                None => c.stages.push((stage.to_string(), 0, tasks)),
            }
            c.stages.iter().map(|s| s.2).sum::<u64>()
        };
        if let Some(bar) = &self.bar {
            bar.set_length(total);
        }
    }

    /// A task of stage `stage` finished (or was found in the journal).
    pub fn task_done(&self, stage: &str, p: &Progressed) {
        let (done, message) = {
            let Ok(mut c) = self.counts.lock() else {
                return;
            };
            match c.stages.iter_mut().find(|(name, _, _)| name == stage) {
                Some(s) => s.1 += 1,
                None => c.stages.push((stage.to_string(), 1, 0)),
            }
            c.units += p.units;
            c.bytes += p.bytes;
            let done: u64 = c.stages.iter().map(|s| s.1).sum();
            (done, Self::message(&c, self.unit, self.total_units))
        };
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            bar.set_message(message);
        }
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
                if let Ok(c) = self.counts.lock() {
                    tracing::info!(progress = %Self::message(&c, self.unit, self.total_units));
                }
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
