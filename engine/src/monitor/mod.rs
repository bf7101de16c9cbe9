//! What an operator watches while a job runs: the coordinator's model of the job
//! ([`model::JobMonitor`]: stages, attempts, workers, work done, ETA), kept from the
//! run's observations, and what serves it read-only over HTTP ([`http`]): `/metrics`
//! ([`metrics`], OpenMetrics through the Prometheus organisation's `prometheus-client`),
//! `/livez`, `/readyz` and `/api/v1/status` (the model as JSON).
//!
//! ```text
//! JobRun ─ Effect::Observe(Observation) ─► EffectHandler ─► Monitor (the model, stamped with the wall clock)
//!                                                              ▲ read on each request
//! HTTP listener ([run] http, --http) ─ /metrics /livez /readyz /api/v1/status ─┘
//! ```
//!
//! The model holds names, counts, times and error texts; never a secret (no cookie, no
//! key, no store credential, no job-file value beyond what `coordinator status` prints).

pub mod event_log;
pub mod http;
pub mod metrics;
pub mod model;
pub mod page;
pub mod process;
pub mod store_metrics;
pub mod worker;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::protocol::{StageName, TaskId};

pub use model::JobMonitor;

/// How an attempt ended, from a fixed set (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Its result was checked, journaled and counted.
    Accepted,
    /// Its worker reported a failure.
    Failed,
    /// Its result was refused (it named what was not planned for it).
    Refused,
    /// Its lease expired, or its worker left.
    Lost,
}

impl Outcome {
    pub const ALL: [Outcome; 4] = [
        Outcome::Accepted,
        Outcome::Failed,
        Outcome::Refused,
        Outcome::Lost,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Failed => "failed",
            Outcome::Refused => "refused",
            Outcome::Lost => "lost",
        }
    }
}

/// The job's state, from a fixed set (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Listing, pinning and planning the input, or replaying the journal.
    Planning,
    Running,
    /// This coordinator stopped on a fault of its own environment: the job is not
    /// over, a restarted coordinator resumes it.
    Stopped,
    Succeeded,
    Failed,
}

impl JobState {
    pub const ALL: [JobState; 5] = [
        JobState::Planning,
        JobState::Running,
        JobState::Stopped,
        JobState::Succeeded,
        JobState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Planning => "planning",
            JobState::Running => "running",
            JobState::Stopped => "stopped",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
        }
    }

    /// Whether the job (or this coordinator's part of it) has ended.
    pub fn is_over(self) -> bool {
        matches!(
            self,
            JobState::Stopped | JobState::Succeeded | JobState::Failed
        )
    }
}

/// What the run saw happen, for the monitor (the pure run has no clock: the
/// interpreter stamps each with the wall clock). Also the lines of the event log
/// ([`event_log`]), tagged by `event`: a variant or field is only ever added.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum Observation {
    /// Coordinator epoch `epoch` took the job (its first observation).
    Epoch {
        epoch: u32,
    },
    /// Stage `stage` was made: its tasks' indices and planned work units, in `unit`.
    StagePlanned {
        stage: StageName,
        unit: String,
        tasks: Vec<(TaskId, u64)>,
    },
    /// A task found done in the journal (resume).
    Replayed {
        task: TaskId,
    },
    AttemptStarted {
        task: TaskId,
        attempt: u32,
        worker: String,
    },
    AttemptEnded {
        task: TaskId,
        attempt: u32,
        worker: String,
        outcome: Outcome,
        /// Why it failed, was refused or lost (none for an accepted one).
        reason: Option<String>,
    },
    WorkerJoined {
        worker: String,
        memory_bytes: u64,
        capacity: u32,
    },
    WorkerLeft {
        worker: String,
    },
    WorkerExcluded {
        worker: String,
        reason: String,
    },
    /// The accepted (or replayed) result of `task` rejected these input records, by
    /// the kind's reasons.
    Rejected {
        task: TaskId,
        counts: Vec<(String, u64)>,
    },
    /// A heartbeat of a lease held by `worker`.
    Heartbeat {
        worker: String,
    },
    /// The job's state changed (`error`: why it failed or stopped).
    State {
        state: JobState,
        error: Option<String>,
    },
}

impl Observation {
    /// Whether the event log keeps it: everything but heartbeats (the page after the
    /// job needs no heartbeat, and they are most of what a run observes).
    pub fn is_logged(&self) -> bool {
        !matches!(self, Observation::Heartbeat { .. })
    }

    /// Whether the event log writes it at once (rare, and what a post-mortem needs
    /// most: epochs, the job's state, exclusions).
    pub fn is_milestone(&self) -> bool {
        matches!(
            self,
            Observation::Epoch { .. }
                | Observation::State { .. }
                | Observation::WorkerExcluded { .. }
        )
    }
}

/// The coordinator's monitor, shared by the actor (which feeds it) and the HTTP
/// listener (which reads it on each request); once the job's epoch is claimed, what
/// it observes is also recorded for the event log.
#[derive(Clone)]
pub struct Monitor {
    model: Arc<Mutex<JobMonitor>>,
    recorder: event_log::Recorder,
}

impl Monitor {
    pub fn new(monitor: JobMonitor) -> Monitor {
        Monitor {
            model: Arc::new(Mutex::new(monitor)),
            recorder: event_log::Recorder::default(),
        }
    }

    /// The model, locked (a poisoned lock still gives it: the model is counts, and a
    /// panic elsewhere must not blind the operator).
    pub fn lock(&self) -> MutexGuard<'_, JobMonitor> {
        self.model.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What records the observations for the event log.
    pub fn recorder(&self) -> &event_log::Recorder {
        &self.recorder
    }

    /// Takes `observation`, seen now.
    pub fn observe(&self, observation: Observation) {
        self.observe_all(vec![observation], SystemTime::now());
    }

    /// Takes `observations`, seen at `now`, in order.
    pub fn observe_all(&self, observations: Vec<Observation>, now: SystemTime) {
        let mut model = self.lock();
        for o in observations {
            self.recorder.record(&o, now);
            model.observe(o, now);
        }
    }
}
