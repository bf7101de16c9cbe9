//! `/metrics`: the coordinator's model ([`super::JobMonitor`]) and a worker's facts as
//! OpenMetrics 1.0 text, encoded by the Prometheus organisation's `prometheus-client`
//! (a [`Collector`] reads the model on each scrape, so nothing is counted twice), and
//! as Prometheus' 0.0.4 text for a scraper that does not accept OpenMetrics
//! ([`to_text_004`]).
//!
//! Names follow Prometheus' conventions: base units, `_total` counters, labels from
//! fixed sets (stage, state, outcome, reason) or bounded by the workers that joined.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::SystemTime;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::model::WorkerState;
use super::{process, JobState, Monitor, Outcome};

/// The content type of OpenMetrics text.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of Prometheus' text format.
pub const TEXT_004: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A label set: names from a fixed set, values from fixed sets or worker names.
pub(super) type Labels = Vec<(&'static str, String)>;

/// Writes metric families through `prometheus-client`'s encoder.
pub(super) struct Families<'a>(pub(super) DescriptorEncoder<'a>);

impl Families<'_> {
    pub(super) fn write<M: EncodeMetric>(
        &mut self,
        name: &'static str,
        help: &'static str,
        unit: Option<&'static Unit>,
        metric_type: MetricType,
        mut samples: Vec<(Labels, M)>,
    ) -> std::fmt::Result {
        let mut family = self.0.encode_descriptor(name, help, unit, metric_type)?;
        // One sample without labels is the metric itself (`name 1`, not `name{} 1`).
        if samples.len() == 1 && samples[0].0.is_empty() {
            if let Some((_, metric)) = samples.pop() {
                return metric.encode(family);
            }
        }
        for (labels, metric) in samples {
            metric.encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    pub(super) fn gauges(
        &mut self,
        name: &'static str,
        help: &'static str,
        unit: Option<&'static Unit>,
        samples: Vec<(Labels, f64)>,
    ) -> std::fmt::Result {
        let samples = samples
            .into_iter()
            .map(|(l, v)| (l, ConstGauge::new(v)))
            .collect();
        self.write(name, help, unit, MetricType::Gauge, samples)
    }

    pub(super) fn gauge(
        &mut self,
        name: &'static str,
        help: &'static str,
        unit: Option<&'static Unit>,
        value: f64,
    ) -> std::fmt::Result {
        self.gauges(name, help, unit, vec![(Vec::new(), value)])
    }

    /// A counter family; `name` without `_total` (the encoder adds it).
    pub(super) fn counters(
        &mut self,
        name: &'static str,
        help: &'static str,
        samples: Vec<(Labels, u64)>,
    ) -> std::fmt::Result {
        let samples = samples
            .into_iter()
            .map(|(l, v)| (l, ConstCounter::new(v)))
            .collect();
        self.write(name, help, None, MetricType::Counter, samples)
    }
}

/// The process metrics every endpoint serves.
#[derive(Debug)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        let mut f = Families(encoder);
        let facts = process::facts();
        if let Some(cpu) = facts.cpu_seconds {
            let counter = ConstCounter::new(cpu);
            f.write(
                "process_cpu",
                "User and system CPU time spent.",
                Some(&Unit::Seconds),
                MetricType::Counter,
                vec![(Vec::new(), counter)],
            )?;
        }
        if let Some(rss) = facts.resident_bytes {
            f.gauge(
                "process_resident_memory",
                "Resident memory size.",
                Some(&Unit::Bytes),
                rss as f64,
            )?;
        }
        f.gauge(
            "process_start_time",
            "Start time of the process since the Unix epoch.",
            Some(&Unit::Seconds),
            process::start_time(),
        )?;
        if let Some(fds) = facts.open_fds {
            f.gauge(
                "process_open_fds",
                "Open file descriptors.",
                None,
                fds as f64,
            )?;
        }
        f.gauges(
            "probeflow_build_info",
            "The probeflow release of this process (always 1).",
            None,
            vec![(vec![("version", crate::protocol::RELEASE.to_string())], 1.0)],
        )
    }
}

/// The coordinator's job metrics, read from its model on each scrape.
#[derive(Clone)]
pub struct JobCollector(pub Monitor);

impl std::fmt::Debug for JobCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobCollector")
    }
}

fn stage_label(stage: &str) -> Labels {
    vec![("stage", stage.to_string())]
}

/// What the job's metrics are made of, taken from the model under its lock (which the
/// actor waits on: the text is encoded after it is released).
struct JobFacts {
    kind: String,
    state: JobState,
    epoch: u32,
    status: super::model::Status,
    /// Per stage: its name, its attempts by outcome, its durations' histogram (shared).
    stages: Vec<(String, BTreeMap<Outcome, u64>, Histogram)>,
    leases_expired: u64,
    rejected: BTreeMap<String, u64>,
    workers: Vec<WorkerState>,
}

impl JobFacts {
    fn of(m: &super::model::JobMonitor, now: SystemTime) -> JobFacts {
        JobFacts {
            kind: m.kind.clone(),
            state: m.state,
            epoch: m.epoch,
            status: m.summary(now),
            stages: m
                .stages
                .iter()
                .map(|s| (s.name.to_string(), s.attempts.clone(), s.durations.clone()))
                .collect(),
            leases_expired: m.leases_expired,
            rejected: m.rejected.clone(),
            workers: m.workers.values().map(|w| w.state).collect(),
        }
    }
}

impl Collector for JobCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        let now = SystemTime::now();
        let m = JobFacts::of(&self.0.lock(), now);
        let status = &m.status;
        let mut f = Families(encoder);
        f.gauges(
            "probeflow_job_info",
            "The job's kind (always 1).",
            None,
            vec![(vec![("kind", m.kind.clone())], 1.0)],
        )?;
        f.gauges(
            "probeflow_job_state",
            "1 for the job's current state.",
            None,
            JobState::ALL
                .iter()
                .map(|s| {
                    let on = if *s == m.state { 1.0 } else { 0.0 };
                    (vec![("state", s.as_str().to_string())], on)
                })
                .collect(),
        )?;
        f.gauge(
            "probeflow_job_epoch",
            "The epoch of the coordinator running the job.",
            None,
            f64::from(m.epoch),
        )?;
        f.gauge(
            "probeflow_job_start_timestamp",
            "When this coordinator started the job.",
            Some(&Unit::Seconds),
            status.started,
        )?;
        if let Some(ended) = status.ended {
            f.gauge(
                "probeflow_job_completion_timestamp",
                "When the job ended on this coordinator.",
                Some(&Unit::Seconds),
                ended,
            )?;
        }
        let mut tasks = Vec::new();
        for s in &status.stages {
            for (state, n) in [
                ("pending", s.pending),
                ("leased", s.leased),
                ("done", s.done),
            ] {
                let mut labels = stage_label(&s.name);
                labels.push(("state", state.to_string()));
                tasks.push((labels, n as f64));
            }
        }
        f.gauges(
            "probeflow_stage_tasks",
            "Tasks of each stage by state.",
            None,
            tasks,
        )?;
        let mut attempts = Vec::new();
        for (name, by_outcome, _) in &m.stages {
            for o in Outcome::ALL {
                let mut labels = stage_label(name);
                labels.push(("outcome", o.as_str().to_string()));
                attempts.push((labels, by_outcome.get(&o).copied().unwrap_or(0)));
            }
        }
        f.counters(
            "probeflow_task_attempts",
            "Task attempts by how they ended (lost: the lease expired or the worker left).",
            attempts,
        )?;
        let durations = m
            .stages
            .iter()
            .map(|(name, _, durations)| (stage_label(name), durations.clone()))
            .collect();
        f.write(
            "probeflow_task_duration",
            "Accepted attempts' durations.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
            durations,
        )?;
        f.counters(
            "probeflow_leases_expired",
            "Leases that expired (their worker went silent).",
            vec![(Vec::new(), m.leases_expired)],
        )?;
        if !m.rejected.is_empty() {
            f.counters(
                "probeflow_rejected_records",
                "Input records the job's tasks rejected, by the kind's reasons.",
                m.rejected
                    .iter()
                    .map(|(reason, n)| (vec![("reason", reason.clone())], *n))
                    .collect(),
            )?;
        }
        let unit_labels = |s: &super::model::StageStatus| {
            let mut labels = stage_label(&s.name);
            labels.push(("unit", s.unit.clone()));
            labels
        };
        f.gauges(
            "probeflow_work_units_planned",
            "Work each stage was planned with, in its kind's unit.",
            None,
            status
                .stages
                .iter()
                .map(|s| (unit_labels(s), s.units_planned as f64))
                .collect(),
        )?;
        f.counters(
            "probeflow_work_units_done",
            "Work done, in the kind's unit (tasks found done in the journal included).",
            status
                .stages
                .iter()
                .map(|s| (unit_labels(s), s.units_done))
                .collect(),
        )?;
        if let (Some(eta), Some(p90)) = (status.eta_seconds, status.eta_p90_seconds) {
            f.gauge(
                "probeflow_job_estimated_remaining",
                "The running stage's work left over its measured rate.",
                Some(&Unit::Seconds),
                eta,
            )?;
            f.gauge(
                "probeflow_job_estimated_remaining_p90",
                "A pessimistic estimate: at the rate of the slowest tenth of its tasks.",
                Some(&Unit::Seconds),
                p90,
            )?;
        }
        f.gauges(
            "probeflow_workers",
            "Workers that joined, by state.",
            None,
            WorkerState::ALL
                .iter()
                .map(|state| {
                    let n = m.workers.iter().filter(|w| *w == state).count();
                    (vec![("state", state.as_str().to_string())], n as f64)
                })
                .collect(),
        )?;
        f.gauges(
            "probeflow_worker_heartbeat_age",
            "Time since each connected worker was last heard from.",
            Some(&Unit::Seconds),
            status
                .workers
                .iter()
                .filter(|w| w.state == WorkerState::Connected)
                .map(|w| (vec![("worker", w.name.clone())], w.heartbeat_age_seconds))
                .collect(),
        )?;
        f.gauge(
            "probeflow_workers_excluded",
            "Workers excluded from the job for failing.",
            None,
            m.workers
                .iter()
                .filter(|w| **w == WorkerState::Excluded)
                .count() as f64,
        )?;
        f.gauges(
            "probeflow_stragglers",
            "Running attempts much older than their stage's median.",
            None,
            m.stages
                .iter()
                .map(|(name, _, _)| {
                    let n = status
                        .stragglers
                        .iter()
                        .filter(|x| x.task.starts_with(&format!("{name}-")))
                        .count();
                    (stage_label(name), n as f64)
                })
                .collect(),
        )
    }
}

/// A registry serving `collectors` and the process's store metrics.
pub fn registry(collectors: Vec<Box<dyn Collector>>) -> Registry {
    let mut registry = Registry::default();
    for c in collectors {
        registry.register_collector(c);
    }
    super::store_metrics::register(&mut registry);
    registry
}

/// `registry` as OpenMetrics text (ending in `# EOF`).
pub fn openmetrics(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail; a collector's error leaves what it wrote.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        let _ = writeln!(out, "# encoding error: {e}");
    }
    out
}

/// OpenMetrics text as Prometheus' 0.0.4 text: a counter family is named by its
/// `_total` samples, `# UNIT` and `# EOF` lines go (0.0.4 has neither). The input is
/// [`openmetrics`]'s own output, not a scraped page.
pub fn to_text_004(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let descriptor = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| Some((p, line.strip_prefix(p)?.split_once(' ')?)));
        match descriptor {
            Some((prefix, (name, rest))) if counters.contains(name) => {
                let _ = writeln!(out, "{prefix}{name}_total {rest}");
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Whether a scraper's `Accept` header takes OpenMetrics.
pub fn accepts_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::{JobMonitor, Observation};
    use crate::protocol::TaskId;

    fn scraped() -> String {
        let monitor = Monitor::new(JobMonitor::new("probe_rows", "out", SystemTime::now()));
        monitor.observe(Observation::State {
            state: JobState::Running,
            error: None,
        });
        monitor.observe(Observation::WorkerJoined {
            worker: "w1".into(),
            memory_bytes: 1 << 30,
            capacity: 1,
        });
        let t = TaskId::new("map", 0);
        monitor.observe(Observation::StagePlanned {
            stage: t.stage,
            unit: "input_rows".into(),
            tasks: vec![(t, 1000)],
        });
        monitor.observe(Observation::AttemptStarted {
            task: t,
            attempt: 1,
            worker: "w1".into(),
        });
        monitor.observe(Observation::AttemptEnded {
            task: t,
            attempt: 1,
            worker: "w1".into(),
            outcome: Outcome::Accepted,
            reason: None,
        });
        for task in [t, t, TaskId::new("map", 1)] {
            monitor.observe(Observation::Rejected {
                task,
                counts: vec![("null_rtt".into(), 3), ("bad_src_addr".into(), 1)],
            });
        }
        let r = registry(vec![
            Box::new(ProcessCollector),
            Box::new(JobCollector(monitor)),
        ]);
        openmetrics(&r)
    }

    #[test]
    fn the_coordinator_serves_its_job_as_openmetrics() {
        let text = scraped();
        assert!(text.ends_with("# EOF\n"), "{text}");
        for line in [
            "probeflow_job_state{state=\"running\"} 1",
            "probeflow_job_state{state=\"succeeded\"} 0",
            "probeflow_stage_tasks{stage=\"map\",state=\"done\"} 1",
            "probeflow_task_attempts_total{stage=\"map\",outcome=\"accepted\"} 1",
            "probeflow_task_attempts_total{stage=\"map\",outcome=\"lost\"} 0",
            "probeflow_work_units_planned{stage=\"map\",unit=\"input_rows\"} 1000",
            "probeflow_work_units_done_total{stage=\"map\",unit=\"input_rows\"} 1000",
            "probeflow_task_duration_seconds_count{stage=\"map\"} 1",
            "probeflow_workers{state=\"connected\"} 1",
            "probeflow_leases_expired_total 0",
            "probeflow_rejected_records_total{reason=\"null_rtt\"} 6",
            "probeflow_rejected_records_total{reason=\"bad_src_addr\"} 2",
            "# TYPE process_cpu_seconds counter",
        ] {
            assert!(
                text.lines().any(|l| l == line
                    || l.starts_with(&format!("{line}."))
                    || l.starts_with(line)),
                "{line} not in\n{text}"
            );
        }
        assert!(text.contains(&format!(
            "probeflow_build_info{{version=\"{}\"}} 1",
            crate::protocol::RELEASE
        )));
    }

    #[test]
    fn the_004_text_names_counters_by_their_total_and_has_no_unit_or_eof_lines() {
        let text = to_text_004(&scraped());
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE probeflow_task_attempts_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# HELP probeflow_task_attempts_total Task attempts"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE process_cpu_seconds_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE probeflow_job_state gauge\n"),
            "{text}"
        );
        assert!(text.contains("# HELP probeflow_job_state 1 for"), "{text}");
    }

    /// A coordinator of the 35B plan's shape: 64 workers, each running an attempt,
    /// 20 000 maps and 4 096 reduces planned.
    fn large_job() -> Monitor {
        let monitor = Monitor::new(JobMonitor::new("probe_rows", "out", SystemTime::now()));
        monitor.observe(Observation::State {
            state: JobState::Running,
            error: None,
        });
        for (stage, n) in [("map", 20_000u32), ("reduce", 4_096)] {
            let tasks = (0..n).map(|i| (TaskId::new(stage, i), 1000)).collect();
            let stage = TaskId::new(stage, 0).stage;
            monitor.observe(Observation::StagePlanned {
                stage,
                unit: "input_rows".into(),
                tasks,
            });
        }
        for w in 0..64 {
            monitor.observe(Observation::WorkerJoined {
                worker: format!("worker-{w:02}"),
                memory_bytes: 4 << 30,
                capacity: 3,
            });
            for i in 0..50 {
                let t = TaskId::new("map", w * 50 + i);
                monitor.observe(Observation::AttemptStarted {
                    task: t,
                    attempt: 1,
                    worker: format!("worker-{w:02}"),
                });
                if i < 49 {
                    monitor.observe(Observation::AttemptEnded {
                        task: t,
                        attempt: 1,
                        worker: format!("worker-{w:02}"),
                        outcome: Outcome::Accepted,
                        reason: None,
                    });
                }
            }
        }
        monitor
    }

    #[test]
    fn metrics_stay_under_64_kib_at_64_workers() {
        let r = registry(vec![
            Box::new(ProcessCollector),
            Box::new(JobCollector(large_job())),
        ]);
        let om = openmetrics(&r);
        assert!(om.len() < 64 << 10, "{} bytes", om.len());
        assert!(to_text_004(&om).len() < 64 << 10);
    }

    /// The cost of one scrape at 64 workers (a benchmark: `cargo test --release -p
    /// probeflow-engine -- --ignored --nocapture a_scrape_at_64_workers`).
    #[test]
    #[ignore]
    fn a_scrape_at_64_workers() {
        let r = registry(vec![
            Box::new(ProcessCollector),
            Box::new(JobCollector(large_job())),
        ]);
        let started = std::time::Instant::now();
        let n = 200;
        let mut bytes = 0;
        for _ in 0..n {
            bytes = to_text_004(&openmetrics(&r)).len();
        }
        let per = started.elapsed().as_secs_f64() / f64::from(n);
        println!(
            "one /metrics scrape at 64 workers, 24 096 tasks: {:.2} ms, {bytes} bytes",
            per * 1e3
        );
    }

    #[test]
    fn openmetrics_is_served_only_to_a_scraper_that_asks_for_it() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(accepts_openmetrics(Some(prometheus)));
        assert!(!accepts_openmetrics(Some("text/plain")));
        assert!(!accepts_openmetrics(None));
    }
}
