//! The coordinator's model of a job as an operator sees it: stages (tasks planned,
//! pending, leased, done; work planned and done; attempt durations), attempts (running
//! ones with their age, recent failed, refused and lost ones with their reasons, a
//! timeline), workers (state, leases, last heartbeat), and the ETA, from measured rates
//! of work done. Pure: observations in with their wall-clock time, snapshots out
//! ([`JobMonitor::status`]); tested transition by transition below.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime};

use prometheus_client::metrics::histogram::Histogram;
use serde::Serialize;

use super::{JobState, Observation, Outcome};
use crate::protocol::{StageName, TaskId};

/// The version of [`Status`] (`/api/v1/status`, `coordinator status --json`): a field
/// is only ever added within a version.
pub const STATUS_VERSION: u32 = 1;

/// Recent failed, refused and lost attempts, and recent worker events, kept for the page.
pub const RECENT: usize = 50;
/// Finished attempts kept for the timeline (the oldest go first past it).
pub const TIMELINE_ATTEMPTS: usize = 10_000;
/// Accepted attempts' durations kept per stage for the quantiles (a uniform sample of
/// every `n`-th past it).
const DURATION_SAMPLES: usize = 100_000;
/// The window of the recent rate.
pub const RECENT_RATE_WINDOW: Duration = Duration::from_secs(60);
/// A running attempt is a straggler when it is older than this many times the stage's
/// median accepted duration (and at least [`STRAGGLER_MIN_AGE`] old, with at least
/// [`STRAGGLER_MIN_DONE`] accepted tasks to take the median of).
pub const STRAGGLER_FACTOR: f64 = 3.0;
pub const STRAGGLER_MIN_AGE: Duration = Duration::from_secs(1);
pub const STRAGGLER_MIN_DONE: usize = 3;

/// The buckets of `probeflow_task_duration_seconds`: 10 ms to ~3 h, ×2.
pub fn duration_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.01, 2.0, 21)
}

/// One stage as planned and as it goes.
#[derive(Debug)]
pub struct StageModel {
    pub name: StageName,
    pub unit: String,
    /// Planned work units by task index.
    pub planned: BTreeMap<u32, u64>,
    pub units_planned: u64,
    /// Tasks accepted (or found done in the journal) and their units.
    pub done: BTreeMap<u32, u64>,
    pub units_done: u64,
    /// Units done by attempts of this coordinator (not replayed), with when: the rates.
    pub done_at: VecDeque<(SystemTime, u64)>,
    /// When this coordinator planned the stage, and when its last task was done.
    pub planned_at: SystemTime,
    pub finished_at: Option<SystemTime>,
    pub attempts: BTreeMap<Outcome, u64>,
    pub durations: Histogram,
    /// Accepted attempts' durations (seconds), for quantiles, and their units per second.
    pub duration_samples: Vec<f32>,
    pub rate_samples: Vec<f32>,
    samples_seen: u64,
}

/// An attempt that is running.
#[derive(Debug, Clone)]
pub struct Running {
    pub worker: String,
    pub started: SystemTime,
}

/// An attempt that ended (for the timeline and the recent problems).
#[derive(Debug, Clone, Serialize)]
pub struct Ended {
    pub task: String,
    pub attempt: u32,
    pub worker: String,
    pub outcome: Outcome,
    pub reason: Option<String>,
    /// Unix seconds; `started` is absent for an attempt another coordinator granted.
    pub started: Option<f64>,
    pub ended: f64,
}

/// A worker as the coordinator knows it.
#[derive(Debug, Clone)]
pub struct WorkerModel {
    pub state: WorkerState,
    pub memory_bytes: u64,
    pub capacity: u32,
    pub joined: SystemTime,
    pub last_seen: SystemTime,
    pub last_error: Option<String>,
    pub attempts: BTreeMap<Outcome, u64>,
}

/// A worker's state, from a fixed set (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    Connected,
    Left,
    Excluded,
}

impl WorkerState {
    pub const ALL: [WorkerState; 3] = [
        WorkerState::Connected,
        WorkerState::Left,
        WorkerState::Excluded,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Connected => "connected",
            WorkerState::Left => "left",
            WorkerState::Excluded => "excluded",
        }
    }
}

/// A worker's join, loss or exclusion, or a change of the job's state.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub at: f64,
    pub what: String,
    pub worker: Option<String>,
}

/// The model of one job on this coordinator.
#[derive(Debug)]
pub struct JobMonitor {
    pub kind: String,
    pub output: String,
    pub epoch: u32,
    pub state: JobState,
    pub error: Option<String>,
    pub started: SystemTime,
    pub ended: Option<SystemTime>,
    pub stages: Vec<StageModel>,
    pub running: BTreeMap<(TaskId, u32), Running>,
    pub workers: BTreeMap<String, WorkerModel>,
    pub leases_expired: u64,
    /// Input records rejected, by the kind's reasons.
    pub rejected: BTreeMap<String, u64>,
    /// The tasks whose rejections are counted.
    rejected_tasks: std::collections::BTreeSet<TaskId>,
    pub problems: VecDeque<Ended>,
    pub timeline: VecDeque<Ended>,
    pub events: VecDeque<Event>,
    /// Tasks found done in the journal before their stage was planned.
    replayed: Vec<TaskId>,
    /// The starts of attempts lost when the job ended here, for a later epoch that
    /// adopts one (in a replayed log).
    orphaned: BTreeMap<(TaskId, u32), SystemTime>,
    /// When the coordinator's actor last stepped (liveness).
    pub actor_stepped: SystemTime,
    /// The final outputs are being written (the actor does not step meanwhile).
    pub finishing: bool,
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn age(now: SystemTime, then: SystemTime) -> f64 {
    now.duration_since(then).map_or(0.0, |d| d.as_secs_f64())
}

/// Pushes `item` to a queue that keeps the last `limit`.
fn push_bounded<T>(queue: &mut VecDeque<T>, item: T, limit: usize) {
    if queue.len() == limit {
        queue.pop_front();
    }
    queue.push_back(item);
}

impl StageModel {
    fn new(name: StageName, unit: String, now: SystemTime) -> StageModel {
        StageModel {
            name,
            unit,
            planned: BTreeMap::new(),
            units_planned: 0,
            done: BTreeMap::new(),
            units_done: 0,
            done_at: VecDeque::new(),
            planned_at: now,
            finished_at: None,
            attempts: BTreeMap::new(),
            durations: Histogram::new(duration_buckets()),
            duration_samples: Vec::new(),
            rate_samples: Vec::new(),
            samples_seen: 0,
        }
    }

    /// Task `index` is done: its planned units count.
    fn task_done(&mut self, index: u32, now: SystemTime, live: bool) {
        if self.done.contains_key(&index) {
            return;
        }
        let units = self.planned.get(&index).copied().unwrap_or(0);
        self.done.insert(index, units);
        self.units_done += units;
        if live {
            self.done_at.push_back((now, units));
        }
        if self.done.len() == self.planned.len() {
            self.finished_at = Some(now);
        }
    }

    fn sample(&mut self, seconds: f64, units: u64) {
        self.durations.observe(seconds);
        self.samples_seen += 1;
        let rate = if seconds > 0.0 {
            units as f64 / seconds
        } else {
            0.0
        };
        if self.duration_samples.len() < DURATION_SAMPLES {
            self.duration_samples.push(seconds as f32);
            self.rate_samples.push(rate as f32);
        } else {
            // Past the limit, every n-th replaces the oldest slot in turn.
            let n = self.samples_seen as usize;
            if n.is_multiple_of(self.samples_seen.div_ceil(DURATION_SAMPLES as u64) as usize) {
                let slot = n % DURATION_SAMPLES;
                self.duration_samples[slot] = seconds as f32;
                self.rate_samples[slot] = rate as f32;
            }
        }
    }

    /// The `q` quantile (0..=1) of the accepted durations, if any.
    pub fn duration_quantile(&self, q: f64) -> Option<f64> {
        quantile(&self.duration_samples, q)
    }

    /// Units per second since the stage was planned (over the units this coordinator
    /// did), and over the last [`RECENT_RATE_WINDOW`].
    pub fn rates(&self, now: SystemTime) -> (f64, f64) {
        let end = self.finished_at.unwrap_or(now);
        let live: u64 = self.done_at.iter().map(|(_, u)| u).sum();
        let overall = live as f64 / age(end, self.planned_at).max(1e-3);
        let since = now
            .checked_sub(RECENT_RATE_WINDOW)
            .unwrap_or(self.planned_at);
        let recent_units: u64 = self
            .done_at
            .iter()
            .filter(|(t, _)| *t >= since)
            .map(|(_, u)| u)
            .sum();
        let window = age(now, since.max(self.planned_at)).max(1e-3);
        (overall, recent_units as f64 / window)
    }

    pub fn is_done(&self) -> bool {
        !self.planned.is_empty() && self.done.len() == self.planned.len()
    }
}

fn quantile(samples: &[f32], q: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f32::total_cmp);
    let rank = ((sorted.len() - 1) as f64 * q).round() as usize;
    Some(f64::from(sorted[rank.min(sorted.len() - 1)]))
}

impl JobMonitor {
    /// A job of `kind` writing to `output`, run by coordinator epoch `epoch` (0 until
    /// it is claimed), planning from `now`.
    pub fn new(kind: &str, output: &str, now: SystemTime) -> JobMonitor {
        JobMonitor {
            kind: kind.to_string(),
            output: output.to_string(),
            epoch: 0,
            state: JobState::Planning,
            error: None,
            started: now,
            ended: None,
            stages: Vec::new(),
            running: BTreeMap::new(),
            workers: BTreeMap::new(),
            leases_expired: 0,
            rejected: BTreeMap::new(),
            rejected_tasks: std::collections::BTreeSet::new(),
            problems: VecDeque::new(),
            timeline: VecDeque::new(),
            events: VecDeque::new(),
            replayed: Vec::new(),
            orphaned: BTreeMap::new(),
            actor_stepped: now,
            finishing: false,
        }
    }

    fn stage_mut(&mut self, name: StageName) -> Option<&mut StageModel> {
        self.stages.iter_mut().find(|s| s.name == name)
    }

    fn event(&mut self, now: SystemTime, what: String, worker: Option<String>) {
        let event = Event {
            at: unix(now),
            what,
            worker,
        };
        push_bounded(&mut self.events, event, RECENT);
    }

    /// Takes one observation, made at `now`.
    pub fn observe(&mut self, observation: Observation, now: SystemTime) {
        match observation {
            Observation::StagePlanned { stage, unit, tasks } => {
                self.stage_planned(stage, unit, tasks, now)
            }
            Observation::Replayed { task } => self.replayed(task, now),
            Observation::Epoch { epoch } => {
                self.epoch = epoch;
                self.event(now, format!("coordinator epoch {epoch}"), None);
            }
            Observation::AttemptStarted {
                task,
                attempt,
                worker,
            } => {
                if let Some(w) = self.workers.get_mut(&worker) {
                    w.last_seen = now;
                }
                self.running.insert(
                    (task, attempt),
                    Running {
                        worker,
                        started: now,
                    },
                );
            }
            Observation::AttemptEnded {
                task,
                attempt,
                worker,
                outcome,
                reason,
            } => self.attempt_ended(task, attempt, worker, outcome, reason, now),
            Observation::WorkerJoined {
                worker,
                memory_bytes,
                capacity,
            } => {
                let attempts = self
                    .workers
                    .get(&worker)
                    .map(|w| w.attempts.clone())
                    .unwrap_or_default();
                self.workers.insert(
                    worker.clone(),
                    WorkerModel {
                        state: WorkerState::Connected,
                        memory_bytes,
                        capacity,
                        joined: now,
                        last_seen: now,
                        last_error: None,
                        attempts,
                    },
                );
                self.event(now, "joined".into(), Some(worker));
            }
            Observation::WorkerLeft { worker } => {
                if let Some(w) = self.workers.get_mut(&worker) {
                    if w.state == WorkerState::Connected {
                        w.state = WorkerState::Left;
                    }
                }
                self.event(now, "left".into(), Some(worker));
            }
            Observation::WorkerExcluded { worker, reason } => {
                if let Some(w) = self.workers.get_mut(&worker) {
                    w.state = WorkerState::Excluded;
                    w.last_error = Some(reason.clone());
                }
                self.event(now, format!("excluded: {reason}"), Some(worker));
            }
            Observation::Rejected { task, counts } => {
                // Once a task: a later epoch replays what an earlier one accepted.
                if self.rejected_tasks.insert(task) {
                    for (reason, n) in counts {
                        *self.rejected.entry(reason).or_default() += n;
                    }
                }
            }
            Observation::Heartbeat { worker } => {
                if let Some(w) = self.workers.get_mut(&worker) {
                    w.last_seen = now;
                }
            }
            Observation::State { state, error } => self.set_state(state, error, now),
        }
    }

    fn stage_planned(
        &mut self,
        name: StageName,
        unit: String,
        tasks: Vec<(TaskId, u64)>,
        now: SystemTime,
    ) {
        if self.stage_mut(name).is_none() {
            self.stages.push(StageModel::new(name, unit.clone(), now));
        }
        let replayed: Vec<TaskId> = self
            .replayed
            .iter()
            .filter(|t| t.stage == name)
            .copied()
            .collect();
        let Some(stage) = self.stage_mut(name) else {
            return;
        };
        stage.unit = unit;
        stage.planned = tasks.iter().map(|(t, u)| (t.index, *u)).collect();
        stage.units_planned = stage.planned.values().sum();
        for t in replayed {
            stage.task_done(t.index, now, false);
        }
    }

    fn replayed(&mut self, task: TaskId, now: SystemTime) {
        match self.stage_mut(task.stage) {
            Some(stage) => stage.task_done(task.index, now, false),
            None => self.replayed.push(task),
        }
    }

    fn attempt_ended(
        &mut self,
        task: TaskId,
        attempt: u32,
        worker: String,
        outcome: Outcome,
        reason: Option<String>,
        now: SystemTime,
    ) {
        let started = self
            .running
            .remove(&(task, attempt))
            .map(|r| r.started)
            .or_else(|| self.orphaned.remove(&(task, attempt)));
        if outcome == Outcome::Lost && reason.as_deref() == Some(LEASE_EXPIRED) {
            self.leases_expired += 1;
        }
        if let Some(w) = self.workers.get_mut(&worker) {
            *w.attempts.entry(outcome).or_default() += 1;
            if outcome != Outcome::Accepted {
                w.last_error = reason.clone();
            }
        }
        if let Some(stage) = self.stage_mut(task.stage) {
            *stage.attempts.entry(outcome).or_default() += 1;
            if outcome == Outcome::Accepted {
                let units = stage.planned.get(&task.index).copied().unwrap_or(0);
                if let Some(s) = started {
                    stage.sample(age(now, s), units);
                }
                stage.task_done(task.index, now, true);
            }
        }
        let ended = Ended {
            task: task.to_string(),
            attempt,
            worker,
            outcome,
            reason,
            started: started.map(unix),
            ended: unix(now),
        };
        if outcome != Outcome::Accepted {
            push_bounded(&mut self.problems, ended.clone(), RECENT);
        }
        push_bounded(&mut self.timeline, ended, TIMELINE_ATTEMPTS);
    }

    fn set_state(&mut self, state: JobState, error: Option<String>, now: SystemTime) {
        if self.state == state {
            return;
        }
        self.state = state;
        let what = match &error {
            Some(e) => format!("job {}: {e}", state.as_str()),
            None => format!("job {}", state.as_str()),
        };
        self.error = error;
        // A later epoch (in a replayed log) runs the job again.
        self.ended = state.is_over().then_some(now);
        if state.is_over() {
            self.end_running(now);
        }
        self.event(now, what, None);
    }

    /// The job ended here with attempts still running: they are lost to this
    /// coordinator (a later one may adopt them: their start is kept for that).
    fn end_running(&mut self, now: SystemTime) {
        let running: Vec<_> = self
            .running
            .iter()
            .map(|(key, r)| (*key, r.worker.clone(), r.started))
            .collect();
        for ((task, attempt), worker, started) in running {
            let reason = Some(COORDINATOR_ENDED.to_string());
            self.attempt_ended(task, attempt, worker, Outcome::Lost, reason, now);
            self.orphaned.insert((task, attempt), started);
        }
    }

    /// The estimated seconds left and a pessimistic (90th percentile) figure: the
    /// running stage's units left over its measured rate; the p90 over the rate the
    /// slowest tenth of its tasks went at, as many at once as ran lately. `None` until
    /// the stage has done some work. Stages not planned yet are not counted (their work
    /// is known once the stage before them is done).
    pub fn eta(&self, now: SystemTime) -> Option<(f64, f64)> {
        if self.state != JobState::Running {
            return None;
        }
        let stage = self.stages.iter().find(|s| !s.is_done())?;
        let left = stage.units_planned.saturating_sub(stage.units_done) as f64;
        let (overall, recent) = stage.rates(now);
        let rate = if recent > 0.0 { recent } else { overall };
        if rate <= 0.0 {
            return None;
        }
        let estimate = left / rate;
        let slow = quantile(&stage.rate_samples, 0.1).unwrap_or(0.0);
        let fast = quantile(&stage.rate_samples, 0.5).unwrap_or(0.0);
        let p90 = if slow > 0.0 && fast > 0.0 {
            estimate * (fast / slow).max(1.0)
        } else {
            estimate
        };
        // No attempt running now ends before its share of the stage would.
        let longest_left = self
            .running
            .iter()
            .filter(|((t, _), _)| t.stage == stage.name)
            .filter_map(|((t, _), r)| {
                let units = *stage.planned.get(&t.index)?;
                let per_task = if slow > 0.0 { units as f64 / slow } else { 0.0 };
                Some(per_task - age(now, r.started))
            })
            .fold(0.0, f64::max);
        Some((estimate, p90.max(estimate).max(longest_left)))
    }

    /// Running attempts much older than their stage's median accepted duration.
    pub fn stragglers(&self, now: SystemTime) -> Vec<Straggler> {
        let mut out = Vec::new();
        for ((task, attempt), r) in &self.running {
            let Some(stage) = self.stages.iter().find(|s| s.name == task.stage) else {
                continue;
            };
            if stage.duration_samples.len() < STRAGGLER_MIN_DONE {
                continue;
            }
            let Some(median) = stage.duration_quantile(0.5) else {
                continue;
            };
            let running = age(now, r.started);
            if running >= STRAGGLER_MIN_AGE.as_secs_f64() && running > STRAGGLER_FACTOR * median {
                out.push(Straggler {
                    task: task.to_string(),
                    attempt: *attempt,
                    worker: r.worker.clone(),
                    running_seconds: running,
                    stage_median_seconds: median,
                });
            }
        }
        out
    }

    /// A snapshot of the model at `now`: what `/api/v1/status` serves.
    pub fn status(&self, now: SystemTime) -> Status {
        let mut status = self.summary(now);
        status.problems = self.problems.iter().rev().cloned().collect();
        status.events = self.events.iter().rev().cloned().collect();
        status.timeline = self.timeline.iter().cloned().collect();
        status.running = self
            .running
            .iter()
            .map(|((t, a), r)| Ended {
                task: t.to_string(),
                attempt: *a,
                worker: r.worker.clone(),
                outcome: Outcome::Accepted,
                reason: None,
                started: Some(unix(r.started)),
                ended: unix(now),
            })
            .collect();
        status
    }

    /// [`Self::status`] without its lists of attempts and events (`problems`,
    /// `events`, `timeline` and `running` empty): what `/metrics` needs, cheap to take
    /// under the lock the actor waits on.
    pub fn summary(&self, now: SystemTime) -> Status {
        let eta = self.eta(now);
        let stages = self
            .stages
            .iter()
            .map(|s| {
                let leased = self
                    .running
                    .keys()
                    .filter(|(t, _)| t.stage == s.name && !s.done.contains_key(&t.index))
                    .map(|(t, _)| t.index)
                    .collect::<std::collections::BTreeSet<_>>()
                    .len() as u64;
                let tasks = s.planned.len() as u64;
                let done = s.done.len() as u64;
                let (overall, recent) = s.rates(now);
                let count = |o| s.attempts.get(&o).copied().unwrap_or(0);
                let attempts: u64 = s.attempts.values().sum();
                StageStatus {
                    name: s.name.to_string(),
                    unit: s.unit.to_string(),
                    tasks,
                    pending: tasks.saturating_sub(done + leased),
                    leased,
                    done,
                    failed: count(Outcome::Failed),
                    refused: count(Outcome::Refused),
                    lost: count(Outcome::Lost),
                    retried: attempts.saturating_sub(count(Outcome::Accepted)),
                    units_planned: s.units_planned,
                    units_done: s.units_done,
                    rate_overall: overall,
                    rate_recent: recent,
                    duration_p50: s.duration_quantile(0.5),
                    duration_p90: s.duration_quantile(0.9),
                    duration_max: s.duration_quantile(1.0),
                    planned_at: unix(s.planned_at),
                    finished_at: s.finished_at.map(unix),
                }
            })
            .collect();
        let workers = self
            .workers
            .iter()
            .map(|(name, w)| WorkerStatus {
                name: name.clone(),
                state: w.state,
                memory_bytes: w.memory_bytes,
                capacity: w.capacity,
                leases: self
                    .running
                    .iter()
                    .filter(|(_, r)| r.worker == *name)
                    .map(|((t, a), r)| LeaseStatus {
                        task: t.to_string(),
                        attempt: *a,
                        age_seconds: age(now, r.started),
                    })
                    .collect(),
                heartbeat_age_seconds: age(now, w.last_seen),
                joined: unix(w.joined),
                accepted: w.attempts.get(&Outcome::Accepted).copied().unwrap_or(0),
                failed: w
                    .attempts
                    .iter()
                    .filter(|(o, _)| **o != Outcome::Accepted)
                    .map(|(_, n)| n)
                    .sum(),
                last_error: w.last_error.clone(),
            })
            .collect();
        Status {
            version: STATUS_VERSION,
            release: crate::protocol::RELEASE.to_string(),
            kind: self.kind.clone(),
            output: self.output.clone(),
            epoch: self.epoch,
            state: self.state,
            error: self.error.clone(),
            started: unix(self.started),
            ended: self.ended.map(unix),
            elapsed_seconds: age(self.ended.unwrap_or(now), self.started),
            eta_seconds: eta.map(|e| e.0),
            eta_p90_seconds: eta.map(|e| e.1),
            stages,
            workers,
            stragglers: self.stragglers(now),
            problems: Vec::new(),
            events: Vec::new(),
            timeline: Vec::new(),
            running: Vec::new(),
            rejected: self.rejected.clone(),
            source: Source::Coordinator,
            missing: Vec::new(),
        }
    }
}

/// The reason of a lost attempt whose lease expired (counted in
/// `probeflow_leases_expired_total`).
pub const LEASE_EXPIRED: &str = "lease expired";
/// The reason of a lost attempt whose worker left.
pub const WORKER_LEFT: &str = "worker left";
/// The reason of a lost attempt still running when its coordinator ended the job (or
/// stopped).
pub const COORDINATOR_ENDED: &str = "its coordinator ended while it ran";

/// The model at one moment (`/api/v1/status`, version [`STATUS_VERSION`]).
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub version: u32,
    pub release: String,
    pub kind: String,
    pub output: String,
    pub epoch: u32,
    pub state: JobState,
    pub error: Option<String>,
    /// Unix seconds.
    pub started: f64,
    pub ended: Option<f64>,
    pub elapsed_seconds: f64,
    pub eta_seconds: Option<f64>,
    pub eta_p90_seconds: Option<f64>,
    pub stages: Vec<StageStatus>,
    pub workers: Vec<WorkerStatus>,
    pub stragglers: Vec<Straggler>,
    /// Recent failed, refused and lost attempts, newest first.
    pub problems: Vec<Ended>,
    /// Recent worker joins, losses, exclusions and job state changes, newest first.
    pub events: Vec<Event>,
    /// Finished attempts, oldest first (the last [`TIMELINE_ATTEMPTS`]).
    pub timeline: Vec<Ended>,
    /// Attempts running now (`ended`: now; `outcome` means nothing yet).
    pub running: Vec<Ended>,
    /// Input records rejected, by the kind's reasons (tasks found done included).
    pub rejected: BTreeMap<String, u64>,
    /// Where this model comes from: [`Source::Coordinator`] (served while it runs),
    /// [`Source::EventLog`] or [`Source::Journal`] (`coordinator status`, from the
    /// output alone).
    pub source: Source,
    /// What the source could not tell, one sentence each (none from a coordinator).
    pub missing: Vec<String>,
}

/// Where a [`Status`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Coordinator,
    EventLog,
    Journal,
}

impl Source {
    pub fn describe(self) -> &'static str {
        match self {
            Source::Coordinator => "served by its coordinator",
            Source::EventLog => "read from the output's event log",
            Source::Journal => "read from the output's journal",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct StageStatus {
    pub name: String,
    pub unit: String,
    pub tasks: u64,
    pub pending: u64,
    pub leased: u64,
    pub done: u64,
    pub failed: u64,
    pub refused: u64,
    pub lost: u64,
    /// Attempts beyond one per accepted task.
    pub retried: u64,
    pub units_planned: u64,
    pub units_done: u64,
    /// Units per second, since the stage was planned and over the last minute.
    pub rate_overall: f64,
    pub rate_recent: f64,
    pub duration_p50: Option<f64>,
    pub duration_p90: Option<f64>,
    pub duration_max: Option<f64>,
    pub planned_at: f64,
    pub finished_at: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct WorkerStatus {
    pub name: String,
    pub state: WorkerState,
    pub memory_bytes: u64,
    pub capacity: u32,
    pub leases: Vec<LeaseStatus>,
    pub heartbeat_age_seconds: f64,
    pub joined: f64,
    pub accepted: u64,
    /// Failed, refused and lost attempts.
    pub failed: u64,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LeaseStatus {
    pub task: String,
    pub attempt: u32,
    pub age_seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Straggler {
    pub task: String,
    pub attempt: u32,
    pub worker: String,
    pub running_seconds: f64,
    pub stage_median_seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + seconds)
    }

    fn task(stage: &'static str, index: u32) -> TaskId {
        TaskId::new(stage, index)
    }

    fn planned(m: &mut JobMonitor, stage: &'static str, units: &[u64], now: SystemTime) {
        let tasks = units
            .iter()
            .enumerate()
            .map(|(i, u)| (task(stage, i as u32), *u))
            .collect();
        m.observe(
            Observation::StagePlanned {
                stage: task(stage, 0).stage,
                unit: "rows".into(),
                tasks,
            },
            now,
        );
    }

    fn started(m: &mut JobMonitor, t: TaskId, attempt: u32, worker: &str, now: SystemTime) {
        m.observe(
            Observation::AttemptStarted {
                task: t,
                attempt,
                worker: worker.into(),
            },
            now,
        );
    }

    fn ended(m: &mut JobMonitor, t: TaskId, attempt: u32, outcome: Outcome, now: SystemTime) {
        m.observe(
            Observation::AttemptEnded {
                task: t,
                attempt,
                worker: "w1".into(),
                outcome,
                reason: (outcome != Outcome::Accepted).then(|| "why".to_string()),
            },
            now,
        );
    }

    fn joined(m: &mut JobMonitor, worker: &str) {
        m.observe(
            Observation::WorkerJoined {
                worker: worker.into(),
                memory_bytes: 1 << 30,
                capacity: 1,
            },
            at(0),
        );
    }

    fn running_job() -> JobMonitor {
        let mut m = JobMonitor::new("probe_rows", "out", at(0));
        m.observe(
            Observation::State {
                state: JobState::Running,
                error: None,
            },
            at(0),
        );
        joined(&mut m, "w1");
        m
    }

    #[test]
    fn a_stage_counts_its_tasks_pending_leased_and_done_and_its_planned_work() {
        let mut m = running_job();
        planned(&mut m, "map", &[100, 300, 600], at(0));
        started(&mut m, task("map", 0), 1, "w1", at(1));
        let s = &m.status(at(1)).stages[0];
        assert_eq!((s.tasks, s.pending, s.leased, s.done), (3, 2, 1, 0));
        assert_eq!((s.units_planned, s.units_done), (1000, 0));
        ended(&mut m, task("map", 0), 1, Outcome::Accepted, at(3));
        let s = &m.status(at(3)).stages[0];
        assert_eq!((s.tasks, s.pending, s.leased, s.done), (3, 2, 0, 1));
        assert_eq!(s.units_done, 100);
        assert_eq!(s.duration_p50, Some(2.0));
    }

    #[test]
    fn failed_refused_and_lost_attempts_are_counted_kept_with_their_reason_and_retried() {
        let mut m = running_job();
        planned(&mut m, "map", &[10], at(0));
        for (attempt, outcome) in [
            (1, Outcome::Failed),
            (2, Outcome::Refused),
            (3, Outcome::Lost),
        ] {
            started(&mut m, task("map", 0), attempt, "w1", at(attempt as u64));
            ended(
                &mut m,
                task("map", 0),
                attempt,
                outcome,
                at(attempt as u64 + 1),
            );
        }
        started(&mut m, task("map", 0), 4, "w1", at(5));
        ended(&mut m, task("map", 0), 4, Outcome::Accepted, at(6));
        let status = m.status(at(6));
        let s = &status.stages[0];
        assert_eq!(
            (s.failed, s.refused, s.lost, s.retried, s.done),
            (1, 1, 1, 3, 1)
        );
        assert_eq!(status.problems.len(), 3);
        assert_eq!(status.problems[0].outcome, Outcome::Lost, "newest first");
        assert_eq!(status.problems[0].reason.as_deref(), Some("why"));
        assert_eq!(status.timeline.len(), 4, "one bar per attempt");
        assert_eq!(status.workers[0].failed, 3);
        assert_eq!(status.workers[0].last_error.as_deref(), Some("why"));
    }

    #[test]
    fn an_expired_lease_is_counted_and_a_worker_that_left_is_not_an_expiry() {
        let mut m = running_job();
        planned(&mut m, "map", &[10, 10], at(0));
        for (i, reason) in [LEASE_EXPIRED, WORKER_LEFT].into_iter().enumerate() {
            started(&mut m, task("map", i as u32), 1, "w1", at(0));
            m.observe(
                Observation::AttemptEnded {
                    task: task("map", i as u32),
                    attempt: 1,
                    worker: "w1".into(),
                    outcome: Outcome::Lost,
                    reason: Some(reason.into()),
                },
                at(5),
            );
        }
        assert_eq!(m.leases_expired, 1);
        assert_eq!(m.status(at(5)).stages[0].lost, 2);
    }

    #[test]
    fn tasks_replayed_from_the_journal_count_as_done_but_not_in_the_rate() {
        let mut m = running_job();
        m.observe(
            Observation::Replayed {
                task: task("map", 1),
            },
            at(0),
        );
        planned(&mut m, "map", &[100, 300], at(0));
        let s = &m.status(at(10)).stages[0];
        assert_eq!((s.done, s.units_done, s.pending), (1, 300, 1));
        assert_eq!(s.rate_overall, 0.0);
        assert_eq!(m.eta(at(10)), None, "no work measured yet");
    }

    #[test]
    fn the_eta_follows_the_work_left_not_the_tasks_left() {
        let mut m = running_job();
        // One small task done in 10 s; the one left is 9 times its work.
        planned(&mut m, "map", &[100, 900], at(0));
        started(&mut m, task("map", 0), 1, "w1", at(0));
        ended(&mut m, task("map", 0), 1, Outcome::Accepted, at(10));
        let (eta, p90) = m.eta(at(10)).unwrap();
        assert!((eta - 90.0).abs() < 1e-6, "{eta}");
        assert!(p90 >= eta);
        let status = m.status(at(10));
        assert_eq!(status.eta_seconds, Some(eta));
        m.observe(
            Observation::State {
                state: JobState::Succeeded,
                error: None,
            },
            at(20),
        );
        assert_eq!(m.eta(at(20)), None);
    }

    #[test]
    fn an_attempt_much_older_than_its_stages_median_is_a_straggler() {
        let mut m = running_job();
        planned(&mut m, "map", &[1; 5], at(0));
        for i in 0..3 {
            started(&mut m, task("map", i), 1, "w1", at(0));
            ended(&mut m, task("map", i), 1, Outcome::Accepted, at(2));
        }
        started(&mut m, task("map", 3), 1, "w1", at(2));
        started(&mut m, task("map", 4), 1, "w1", at(9));
        let stragglers = m.stragglers(at(10));
        assert_eq!(stragglers.len(), 1, "{stragglers:?}");
        assert_eq!(stragglers[0].task, task("map", 3).to_string());
        assert_eq!(stragglers[0].worker, "w1");
        assert_eq!(stragglers[0].stage_median_seconds, 2.0);
    }

    #[test]
    fn workers_join_leave_and_are_excluded_with_their_reason() {
        let mut m = running_job();
        joined(&mut m, "w2");
        m.observe(
            Observation::WorkerLeft {
                worker: "w1".into(),
            },
            at(3),
        );
        m.observe(
            Observation::WorkerExcluded {
                worker: "w2".into(),
                reason: "3 failures".into(),
            },
            at(4),
        );
        let status = m.status(at(4));
        let states: Vec<_> = status.workers.iter().map(|w| w.state).collect();
        assert_eq!(states, [WorkerState::Left, WorkerState::Excluded]);
        assert_eq!(status.workers[1].last_error.as_deref(), Some("3 failures"));
        assert_eq!(status.events[0].what, "excluded: 3 failures");
        // A worker that rejoins is connected again and keeps its counts.
        joined(&mut m, "w1");
        assert_eq!(m.workers["w1"].state, WorkerState::Connected);
    }

    #[test]
    fn the_job_state_moves_once_and_its_end_is_kept_with_the_error() {
        let mut m = running_job();
        assert_eq!(m.status(at(1)).state, JobState::Running);
        m.observe(
            Observation::State {
                state: JobState::Failed,
                error: Some("map/0 failed".into()),
            },
            at(7),
        );
        let status = m.status(at(100));
        assert_eq!(status.state, JobState::Failed);
        assert_eq!(status.error.as_deref(), Some("map/0 failed"));
        assert_eq!(status.ended, Some(unix(at(7))));
        assert_eq!(status.elapsed_seconds, 7.0);
    }

    #[test]
    fn the_recent_lists_are_bounded() {
        let mut m = running_job();
        planned(&mut m, "map", &[1], at(0));
        for attempt in 0..(RECENT as u32 + 10) {
            ended(&mut m, task("map", 0), attempt, Outcome::Failed, at(1));
        }
        assert_eq!(m.problems.len(), RECENT);
        assert_eq!(m.status(at(1)).problems[0].attempt, RECENT as u32 + 9);
    }

    #[test]
    fn attempts_running_when_the_job_ends_are_lost_and_a_later_epoch_adopts_one() {
        let mut m = running_job();
        planned(&mut m, "map", &[5, 5], at(0));
        started(&mut m, task("map", 0), 1, "w1", at(1));
        started(&mut m, task("map", 1), 1, "w1", at(2));
        let stop = |state| Observation::State {
            state,
            error: (state == JobState::Stopped).then(|| "lock lost".to_string()),
        };
        m.observe(stop(JobState::Stopped), at(4));
        let status = m.status(at(4));
        assert!(status.running.is_empty());
        assert_eq!(status.stages[0].lost, 2);
        assert_eq!(
            status.timeline[0].reason.as_deref(),
            Some(COORDINATOR_ENDED)
        );
        assert_eq!(status.events[0].what, "job stopped: lock lost");
        // The next coordinator (a replayed log) runs the job on and adopts one attempt.
        m.observe(Observation::Epoch { epoch: 2 }, at(10));
        m.observe(stop(JobState::Running), at(10));
        ended(&mut m, task("map", 0), 1, Outcome::Accepted, at(12));
        let status = m.status(at(12));
        assert_eq!((status.epoch, status.ended, status.error), (2, None, None));
        assert_eq!(status.events[1].what, "coordinator epoch 2");
        let adopted = status.timeline.last().unwrap();
        assert_eq!(adopted.started, Some(unix(at(1))), "from its first start");
        assert_eq!(status.stages[0].done, 1);
    }
}
