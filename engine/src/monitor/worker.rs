//! A worker process's own facts for its `/metrics` and probes: whether it is connected
//! to a coordinator, how often it joined, its tasks running and ended per stage, the
//! wall and CPU time they took, the bytes its sorts spilled, its memory setting and its
//! scratch disk's free bytes. The worker's actors update it; a scrape reads it.
//!
//! A task's CPU time is the process's (user and system, every thread: a task uses
//! several), shared between the tasks running at once: between two task starts or ends
//! (or a scrape) the CPU the process used goes to the stages then running, in
//! proportion to their tasks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::http::{Check, Endpoints};
use super::metrics::{registry, Families, ProcessCollector};

/// One stage's tasks on this worker.
#[derive(Debug, Default, Clone, Copy)]
struct StageTasks {
    running: u64,
    succeeded: u64,
    failed: u64,
    seconds: f64,
    cpu_seconds: f64,
}

/// The stages' tasks, and the process's CPU time when they were last accounted.
#[derive(Debug, Default)]
struct TaskBook {
    stages: BTreeMap<String, StageTasks>,
    cpu_mark: Option<f64>,
}

impl TaskBook {
    /// Gives the CPU time used since the last mark (`cpu`: the process's now) to the
    /// stages running, in proportion to their running tasks.
    fn account_cpu(&mut self, cpu: Option<f64>) {
        let Some(cpu) = cpu else { return };
        let used = self.cpu_mark.map_or(0.0, |mark| (cpu - mark).max(0.0));
        self.cpu_mark = Some(cpu);
        let running: u64 = self.stages.values().map(|s| s.running).sum();
        if running == 0 {
            return;
        }
        for s in self.stages.values_mut() {
            s.cpu_seconds += used * s.running as f64 / running as f64;
        }
    }
}

/// What a worker process counts.
#[derive(Debug, Default)]
pub struct WorkerStats {
    connected: AtomicBool,
    joins: AtomicU64,
    memory_bytes: AtomicU64,
    scratch: Mutex<Option<PathBuf>>,
    tasks: Mutex<TaskBook>,
}

impl WorkerStats {
    /// The stats of a worker with `memory_bytes` per task and its scratch under `scratch`.
    pub fn new(memory_bytes: u64, scratch: PathBuf) -> Arc<WorkerStats> {
        let stats = WorkerStats::default();
        stats.memory_bytes.store(memory_bytes, Ordering::Relaxed);
        if let Ok(mut s) = stats.scratch.lock() {
            *s = Some(scratch);
        }
        Arc::new(stats)
    }

    /// Joined a coordinator (`true`), or lost it.
    pub fn connected(&self, connected: bool) {
        self.connected.store(connected, Ordering::Relaxed);
        if connected {
            self.joins.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// Accounts the CPU used so far, then applies `f` to `stage`'s tasks.
    fn stage(&self, stage: &str, f: impl FnOnce(&mut StageTasks)) {
        let cpu = super::process::facts().cpu_seconds;
        if let Ok(mut book) = self.tasks.lock() {
            book.account_cpu(cpu);
            f(book.stages.entry(stage.to_string()).or_default());
        }
    }

    /// Every stage's tasks, the CPU used so far accounted.
    fn stages(&self) -> Vec<(String, StageTasks)> {
        let cpu = super::process::facts().cpu_seconds;
        self.tasks
            .lock()
            .map(|mut book| {
                book.account_cpu(cpu);
                book.stages.iter().map(|(k, v)| (k.clone(), *v)).collect()
            })
            .unwrap_or_default()
    }

    /// A task of `stage` started.
    pub fn task_started(&self, stage: &str) {
        self.stage(stage, |s| s.running += 1);
    }

    /// A task of `stage` ended after `seconds`.
    pub fn task_ended(&self, stage: &str, ok: bool, seconds: f64) {
        self.stage(stage, |s| {
            s.running = s.running.saturating_sub(1);
            if ok {
                s.succeeded += 1;
            } else {
                s.failed += 1;
            }
            s.seconds += seconds;
        });
    }

    fn scratch_free_bytes(&self) -> Option<u64> {
        let path = self.scratch.lock().ok()?.clone()?;
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
        // SAFETY: statvfs fills the zeroed struct for the NUL-terminated path.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return None;
        }
        Some(st.f_bavail as u64 * st.f_frsize as u64)
    }
}

/// The worker's metrics, read from its stats on each scrape.
#[derive(Debug)]
pub struct WorkerCollector(pub Arc<WorkerStats>);

impl Collector for WorkerCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        let s = &self.0;
        let mut f = Families(encoder);
        let stages = s.stages();
        f.gauge(
            "probeflow_worker_connected",
            "1 while this worker is joined to a coordinator.",
            None,
            if s.is_connected() { 1.0 } else { 0.0 },
        )?;
        let joins = s.joins.load(Ordering::Relaxed);
        f.counters(
            "probeflow_worker_reconnects",
            "Times this worker joined a coordinator again after losing one.",
            vec![(Vec::new(), joins.saturating_sub(1))],
        )?;
        f.gauge(
            "probeflow_worker_memory_setting",
            "The memory each task may use (--memory).",
            Some(&Unit::Bytes),
            s.memory_bytes.load(Ordering::Relaxed) as f64,
        )?;
        if let Some(free) = s.scratch_free_bytes() {
            f.gauge(
                "probeflow_worker_scratch_free",
                "Free space on the scratch directory's file system.",
                Some(&Unit::Bytes),
                free as f64,
            )?;
        }
        let stage = |name: &str| vec![("stage", name.to_string())];
        f.gauges(
            "probeflow_worker_tasks_running",
            "Tasks running on this worker, per stage.",
            None,
            stages
                .iter()
                .map(|(n, t)| (stage(n), t.running as f64))
                .collect(),
        )?;
        let mut ended = Vec::new();
        for (n, t) in &stages {
            for (outcome, count) in [("succeeded", t.succeeded), ("failed", t.failed)] {
                let mut labels = stage(n);
                labels.push(("outcome", outcome.to_string()));
                ended.push((labels, count));
            }
        }
        f.counters(
            "probeflow_worker_tasks",
            "Tasks this worker ran, per stage and outcome.",
            ended,
        )?;
        let seconds = stages
            .iter()
            .map(|(n, t)| (stage(n), ConstCounter::new(t.seconds)))
            .collect();
        f.write(
            "probeflow_worker_task",
            "Wall time of this worker's tasks, per stage.",
            Some(&Unit::Seconds),
            MetricType::Counter,
            seconds,
        )?;
        let cpu = stages
            .iter()
            .map(|(n, t)| (stage(n), ConstCounter::new(t.cpu_seconds)))
            .collect();
        f.write(
            "probeflow_worker_task_cpu",
            "CPU time (user and system) the process used for this worker's tasks, per stage.",
            Some(&Unit::Seconds),
            MetricType::Counter,
            cpu,
        )?;
        let spilled = crate::external_sort::SPILLED_BYTES.load(Ordering::Relaxed);
        f.write(
            "probeflow_worker_spilled",
            "Bytes this worker's sorts spilled to its scratch disk.",
            Some(&Unit::Bytes),
            MetricType::Counter,
            vec![(Vec::new(), ConstCounter::new(spilled))],
        )?;
        Ok(())
    }
}

/// What a worker's listener serves: live while it answers, ready once joined.
pub fn endpoints(stats: Arc<WorkerStats>) -> Endpoints {
    let joined = stats.clone();
    Endpoints {
        registry: registry(vec![
            Box::new(ProcessCollector),
            Box::new(WorkerCollector(stats)),
        ]),
        live: vec![Check::new("process", || Ok(()))],
        ready: vec![Check::new("joined", move || {
            if joined.is_connected() {
                Ok(())
            } else {
                Err("not joined to a coordinator".into())
            }
        })],
        monitor: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_counts_its_tasks_and_joins_and_reads_its_scratch_disk() {
        let stats = WorkerStats::new(1 << 30, std::env::temp_dir());
        stats.connected(true);
        stats.task_started("map");
        stats.task_started("map");
        stats.task_ended("map", true, 1.5);
        stats.connected(false);
        stats.connected(true);
        let text =
            super::super::metrics::openmetrics(&registry(vec![Box::new(WorkerCollector(stats))]));
        for line in [
            "probeflow_worker_connected 1",
            "probeflow_worker_reconnects_total 1",
            "probeflow_worker_memory_setting_bytes 1073741824",
            "probeflow_worker_tasks_running{stage=\"map\"} 1",
            "probeflow_worker_tasks_total{stage=\"map\",outcome=\"succeeded\"} 1",
            "probeflow_worker_task_seconds_total{stage=\"map\"} 1.5",
            "probeflow_worker_scratch_free_bytes ",
            "probeflow_worker_task_cpu_seconds_total{stage=\"map\"} ",
            "probeflow_worker_spilled_bytes_total ",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }

    #[test]
    fn the_cpu_used_goes_to_the_stages_running_in_proportion_to_their_tasks() {
        let mut book = TaskBook::default();
        book.account_cpu(Some(10.0));
        book.stages.entry("map".into()).or_default().running = 3;
        book.account_cpu(Some(14.0));
        book.stages.entry("reduce".into()).or_default().running = 1;
        book.account_cpu(Some(22.0));
        book.stages.values_mut().for_each(|s| s.running = 0);
        book.account_cpu(Some(30.0));
        assert_eq!(book.stages["map"].cpu_seconds, 4.0 + 6.0);
        assert_eq!(book.stages["reduce"].cpu_seconds, 2.0);
        book.account_cpu(None);
        assert_eq!(book.cpu_mark, Some(30.0), "no clock: nothing accounted");
    }
}
