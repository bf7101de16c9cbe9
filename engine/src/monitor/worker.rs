//! A worker process's own facts for its `/metrics` and probes: whether it is connected
//! to a coordinator, how often it joined, its tasks running and ended per stage and the
//! time they took, its memory setting and its scratch disk's free bytes. The worker's
//! actors update it; a scrape reads it.

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
}

/// What a worker process counts.
#[derive(Debug, Default)]
pub struct WorkerStats {
    connected: AtomicBool,
    joins: AtomicU64,
    memory_bytes: AtomicU64,
    scratch: Mutex<Option<PathBuf>>,
    stages: Mutex<BTreeMap<String, StageTasks>>,
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

    fn stage(&self, stage: &str, f: impl FnOnce(&mut StageTasks)) {
        if let Ok(mut stages) = self.stages.lock() {
            f(stages.entry(stage.to_string()).or_default());
        }
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
        let stages: Vec<(String, StageTasks)> = s
            .stages
            .lock()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), *v)).collect())
            .unwrap_or_default();
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
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }
}
