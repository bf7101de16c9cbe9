//! A job's run on the coordinator as a state machine: which stage runs, which of its
//! tasks are pending, leased, being journaled or accepted, which workers are in the
//! job, and when the job is finished or failed.
//!
//! ```text
//! start ─► stage 0's tasks queued ─► request ─► lease ─► result ─► checked ─► Effect::Journal
//!                ▲                                   │ refused / failed: retry (LeaseBoard)     │
//!                │                                   ▼                                          ▼
//!                └── stage k+1 ◄── stage k all accepted ◄── accept ◄── journaled (nonce matches)
//!                      none left ─► Effect::Finish ─► the actor writes the final outputs ─► finished
//! ```
//!
//! Pure: no I/O, no clock, no randomness. Events come in as method calls with the time
//! and any fresh token they need; what the coordinator must do comes back as
//! [`Effect`]s (write a journal entry, write progress files, record excluded workers,
//! remove a late attempt's files, finish, fail) or as the answer to a worker. A result
//! counts only once its journal entry is written: it is accepted on [`JobRun::journaled`]
//! with the nonce the [`Effect::Journal`] carried. The kind is reached only through
//! its [`JobDriver`] (stages, result checks, accepted results, progress files), whose
//! methods are synchronous; its final outputs are the actor's to write.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::error::EngineError;
use crate::job::JobDriver;
use crate::kind::{ProgressFile, Progressed};
use crate::protocol::TaskReply;
use crate::protocol::{
    Assignment, JobContext, Payload, Registration, StageName, TaskFailure, TaskId, WorkerTiming,
    PROTOCOL_VERSION, RELEASE,
};

use crate::coordinator::leases::{AfterFailure, Grant, Lease, LeaseBoard, Refused, Revoked};
use crate::coordinator::schedule::{worker_of, RetryPolicy};
use crate::monitor::model::{LEASE_EXPIRED, WORKER_LEFT};
use crate::monitor::{JobState, Observation, Outcome};

/// The attempt a report is for, as its worker names it.
#[derive(Debug, Clone, Copy)]
pub struct Reported<'a> {
    /// The worker that ran the attempt.
    pub worker: &'a str,
    /// The job it ran the attempt for ([`JobContext::job_id`], the job's fingerprint).
    pub job: &'a str,
    pub task: TaskId,
    pub attempt: u32,
    /// The lease's token.
    pub lease: &'a str,
}

/// What the coordinator must do after an event.
#[derive(Debug)]
pub enum Effect {
    /// Stage `stage` has `tasks` tasks (for progress).
    StagePlanned { stage: StageName, tasks: u64 },
    /// A result was accepted (for progress).
    TaskDone {
        stage: StageName,
        progressed: Progressed,
    },
    /// Write the journal entry of a checked result, then call [`JobRun::journaled`]
    /// with `nonce`.
    Journal {
        task: TaskId,
        attempt: u32,
        output: Payload,
        nonce: String,
    },
    /// Write the kind's progress files, in order, before the final outputs.
    WriteProgress(Vec<ProgressFile>),
    /// Record the workers excluded from the job (for `coordinator status`).
    RecordExcluded(BTreeMap<String, String>),
    /// Remove what attempt `attempt` of `task` wrote: its result came after the job
    /// finished (its planned files, [`JobDriver::attempt_files`]).
    DiscardLate { task: TaskId, attempt: u32 },
    /// Every stage is done: write the job's final outputs, then call
    /// [`JobRun::finished`].
    Finish,
    /// The job failed.
    Fail(EngineError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// Every stage is done; the final outputs are being written.
    Finishing,
    /// The final outputs are written.
    Finished,
    /// The job failed: its workers are told it is done.
    Failed,
    /// This coordinator stops on a fault of its own environment (a journal entry it
    /// cannot write, its output lock lost, final outputs it cannot write): the job is not
    /// over, a restarted coordinator resumes it, and the workers wait for one.
    Stopped,
}

/// A result whose journal entry is being written.
struct Journaling {
    worker: String,
    attempt: u32,
    output: Payload,
    nonce: String,
}

/// The coordinator's state of one job run.
pub struct JobRun {
    job: JobContext,
    driver: Box<dyn JobDriver>,
    /// The stage running now, and its tasks not accepted yet.
    stage: usize,
    stage_pending: HashSet<TaskId>,
    /// Every accepted task (journaled), with its accepted attempt.
    accepted: HashMap<TaskId, u32>,
    board: LeaseBoard,
    timing: WorkerTiming,
    /// The workers in the job, by name.
    workers: HashMap<String, Registration>,
    journaling: HashMap<TaskId, Journaling>,
    phase: Phase,
    /// Leases granted.
    tasks_run: u64,
    /// What happened since the interpreter last took them ([`Self::take_observed`]).
    observed: Vec<Observation>,
}

impl JobRun {
    /// A run of `job` driven by `driver`: leases of `lease`, `max_attempts` per task,
    /// attempts numbered after `attempt_base` (the numbers up to it are the attempts of
    /// the coordinators that ran this job before: see [`Self::report`]).
    pub fn new(
        job: JobContext,
        driver: Box<dyn JobDriver>,
        lease: Duration,
        max_attempts: u32,
        attempt_base: u32,
        policy: RetryPolicy,
    ) -> JobRun {
        JobRun {
            job,
            driver,
            stage: 0,
            stage_pending: HashSet::new(),
            accepted: HashMap::new(),
            board: LeaseBoard::new(lease, max_attempts, attempt_base, policy),
            timing: WorkerTiming::for_lease(lease),
            workers: HashMap::new(),
            journaling: HashMap::new(),
            phase: Phase::Running,
            tasks_run: 0,
            observed: Vec::new(),
        }
    }

    /// Takes attempt `attempt`'s result from the journal (resume), before
    /// [`Self::start`]. An error means the entry cannot be used: its task is redone.
    pub fn replay(
        &mut self,
        task: TaskId,
        attempt: u32,
        output: &Payload,
    ) -> Result<Progressed, EngineError> {
        let progressed = self.driver.accept(task, output)?;
        self.accepted.insert(task, attempt);
        self.observed.push(Observation::Replayed { task });
        self.observe_rejected(task, &progressed);
        Ok(progressed)
    }

    /// The records an accepted result rejected, for the monitor.
    fn observe_rejected(&mut self, task: TaskId, progressed: &Progressed) {
        let counts: Vec<(String, u64)> = progressed
            .rejected
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(reason, n)| (reason.to_string(), *n))
            .collect();
        if !counts.is_empty() {
            self.observed.push(Observation::Rejected { task, counts });
        }
    }

    /// Queues the first stage with tasks left (on resume, stages already done are
    /// passed, and [`Effect::Finish`] comes at once if none is left).
    pub fn start(&mut self) -> Vec<Effect> {
        let mut effects = Vec::new();
        self.advance(&mut effects);
        effects
    }

    /// What happened since the last call, for the monitor (the interpreter takes them
    /// after each event).
    pub fn take_observed(&mut self) -> Vec<Observation> {
        std::mem::take(&mut self.observed)
    }

    /// The timing workers get.
    pub fn timing(&self) -> WorkerTiming {
        self.timing
    }

    /// Leases granted so far.
    pub fn tasks_run(&self) -> u64 {
        self.tasks_run
    }

    /// Whether the job has ended (finished or failed).
    pub fn is_over(&self) -> bool {
        matches!(self.phase, Phase::Finished | Phase::Failed | Phase::Stopped)
    }

    /// The kind's side, for the final outputs and late attempts.
    pub fn driver(&mut self) -> &mut dyn JobDriver {
        self.driver.as_mut()
    }

    /// A worker (process, or in-process actor) joins: the job's timing, or why not.
    pub fn register(&mut self, r: Registration) -> Result<WorkerTiming, String> {
        if r.version != PROTOCOL_VERSION {
            return Err(format!(
                "worker {} speaks protocol {}, this coordinator {PROTOCOL_VERSION}: run the \
                 same probeflow release everywhere",
                r.worker, r.version
            ));
        }
        if r.release != RELEASE {
            let theirs = if r.release.is_empty() {
                "an earlier release"
            } else {
                r.release.as_str()
            };
            return Err(format!(
                "worker {} is probeflow {theirs}, this coordinator is probeflow {RELEASE}: \
                 run the same release everywhere",
                r.worker
            ));
        }
        if self.workers.contains_key(&r.worker) {
            return Err(format!(
                "a worker named {:?} is already connected; worker names must be unique",
                r.worker
            ));
        }
        if r.worker.is_empty() || r.worker.contains('/') {
            return Err(format!(
                "worker name {:?}: must be non-empty and without '/'",
                r.worker
            ));
        }
        if let Some(why) = self.board.excluded().get(&r.worker) {
            return Err(format!(
                "worker {:?} is excluded from this job ({why})",
                r.worker
            ));
        }
        tracing::info!(worker = %r.worker, capacity = r.capacity, memory = r.memory_bytes, "worker joined");
        self.observed.push(Observation::WorkerJoined {
            worker: r.worker.clone(),
            memory_bytes: r.memory_bytes,
            capacity: r.capacity,
        });
        self.workers.insert(r.worker.clone(), r);
        Ok(self.timing)
    }

    /// The other workers still in the job, besides `actor`'s.
    fn others(&self, actor: &str) -> Vec<String> {
        let me = worker_of(actor);
        self.workers
            .keys()
            .filter(|w| *w != me && !self.board.is_excluded(w))
            .cloned()
            .collect()
    }

    /// Worker actor `actor` asks for a task (`token`: a fresh lease token).
    pub fn request(
        &mut self,
        actor: &str,
        token: String,
        now: Instant,
    ) -> Result<TaskReply, String> {
        if !self.workers.contains_key(worker_of(actor)) {
            tracing::warn!(worker = %actor, "task request from a worker that has not registered refused");
            return Err(format!(
                "{actor:?} has not registered with this coordinator"
            ));
        }
        if self.phase != Phase::Running {
            return Ok(match self.phase {
                Phase::Finished | Phase::Failed => TaskReply::Done,
                // The next coordinator resumes the job: wait for it (the worker rejoins
                // once this one is gone).
                Phase::Stopped => TaskReply::Wait,
                _ => TaskReply::Wait,
            });
        }
        let others = self.others(actor);
        let others: Vec<&str> = others.iter().map(String::as_str).collect();
        Ok(match self.board.request(actor, &others, token, now) {
            Grant::Wait => TaskReply::Wait,
            Grant::Excluded(why) => TaskReply::Excluded(why),
            Grant::Task {
                spec,
                attempt,
                token,
            } => {
                self.tasks_run += 1;
                tracing::debug!(worker = %actor, task = %spec.id(), attempt, "leased");
                self.observed.push(Observation::AttemptStarted {
                    task: spec.id(),
                    attempt,
                    worker: worker_of(actor).to_string(),
                });
                TaskReply::Task(Box::new(Assignment {
                    task: spec,
                    attempt,
                    lease: token,
                    job: self.job.clone(),
                }))
            }
        })
    }

    /// A heartbeat: extends the lease if it is the holder's.
    pub fn heartbeat(
        &mut self,
        actor: &str,
        task: TaskId,
        attempt: u32,
        token: &str,
        now: Instant,
    ) {
        self.board.heartbeat(actor, task, attempt, token, now);
        self.observed.push(Observation::Heartbeat {
            worker: worker_of(actor).to_string(),
        });
    }

    /// A task's report: a result or a failure of the attempt `from` names; `nonce`: a
    /// fresh secret for its journal write. A report that names another job (a
    /// long-lived worker's attempt for the job it worked for before) is refused
    /// first, whatever its lease: its planned paths may be this job's very paths.
    pub fn report(
        &mut self,
        from: Reported<'_>,
        result: Result<Payload, TaskFailure>,
        nonce: String,
        now: Instant,
    ) -> Vec<Effect> {
        let Reported {
            worker: actor,
            job,
            task,
            attempt,
            lease: token,
        } = from;
        let mut effects = Vec::new();
        if job != self.job.job_id {
            tracing::warn!(worker = %actor, %task, attempt, job, "a result for another job refused (the worker ran it for a job it worked for before)");
            return effects;
        }
        let lease = match self.board.take(actor, task, attempt, token) {
            Ok(lease) => lease,
            Err(Refused::Predecessor) => return self.adopt(actor, task, attempt, result, nonce),
            Err(refused) => {
                tracing::info!(worker = %actor, %task, attempt, ?refused, "late or duplicate result refused (no lease held with this attempt and token)");
                // Only an attempt this coordinator granted, by its planned paths.
                // Only after a finished job (a failed one may be resumed from what its
                // attempts wrote), and never the accepted attempt (whose files the
                // output or the journal names).
                let accepted = self.accepted.get(&task) == Some(&attempt);
                if (self.phase, refused) == (Phase::Finished, Refused::Late) && !accepted {
                    effects.push(Effect::DiscardLate { task, attempt });
                }
                return effects;
            }
        };
        // A result names only what was planned for this task and attempt.
        let result = result
            .map_err(|failure| (Outcome::Failed, failure))
            .and_then(|output| match self.driver.check(&lease.spec, attempt, &output) {
                Ok(()) => Ok(output),
                Err(why) => {
                    tracing::warn!(worker = %actor, %task, attempt, reason = %why, "result refused");
                    let failure = TaskFailure {
                        error: format!("result refused: {why}"),
                        retryable: true,
                    };
                    Err((Outcome::Refused, failure))
                }
            });
        match result {
            Ok(output) => {
                self.journal(actor, task, attempt, output, nonce, &mut effects);
            }
            Err((outcome, failure)) => {
                self.observed.push(Observation::AttemptEnded {
                    task,
                    attempt,
                    worker: worker_of(actor).to_string(),
                    outcome,
                    reason: Some(failure.error.clone()),
                });
                self.attempt_failed(actor, lease, failure, now, &mut effects)
            }
        }
        effects
    }

    /// A report of attempt `attempt` of `task`, which a predecessor granted (its worker
    /// ran the task on while the coordinator changed): taken as a result of this
    /// coordinator's own would be (checked against the task's plan for that attempt,
    /// then journaled, and only then counted) when the task is in the running stage and
    /// neither accepted nor being journaled; the task is then taken off the board, and a
    /// lease of it this coordinator granted meanwhile ends (its report is refused).
    /// Otherwise it is refused and, once the job is finished, its planned files are
    /// removed (never the accepted attempt's). A predecessor's failure is ignored: this
    /// coordinator runs the task itself.
    fn adopt(
        &mut self,
        actor: &str,
        task: TaskId,
        attempt: u32,
        result: Result<Payload, TaskFailure>,
        nonce: String,
    ) -> Vec<Effect> {
        let mut effects = Vec::new();
        let Ok(output) = result else {
            return effects;
        };
        let open = self.phase == Phase::Running
            && self.stage_pending.contains(&task)
            && !self.journaling.contains_key(&task)
            && !self.accepted.contains_key(&task);
        let spec = self.board.spec(task).filter(|_| open).cloned();
        let Some(spec) = spec else {
            tracing::info!(worker = %actor, %task, attempt, "a predecessor's attempt refused: its task is accepted, or not running");
            let accepted = self.accepted.get(&task) == Some(&attempt);
            if self.phase == Phase::Finished && !accepted {
                effects.push(Effect::DiscardLate { task, attempt });
            }
            return effects;
        };
        if let Err(why) = self.driver.check(&spec, attempt, &output) {
            tracing::warn!(worker = %actor, %task, attempt, reason = %why, "a predecessor's attempt refused");
            return effects;
        }
        self.board.withdraw(task);
        tracing::info!(worker = %actor, %task, attempt, "a predecessor's attempt adopted");
        self.journal(actor, task, attempt, output, nonce, &mut effects);
        effects
    }

    /// A checked result of attempt `attempt` of `task`: its journal entry is written
    /// (with `nonce`), and the result counts once that is confirmed ([`Self::journaled`]).
    fn journal(
        &mut self,
        actor: &str,
        task: TaskId,
        attempt: u32,
        output: Payload,
        nonce: String,
        effects: &mut Vec<Effect>,
    ) {
        self.journaling.insert(
            task,
            Journaling {
                worker: worker_of(actor).to_string(),
                attempt,
                output: output.clone(),
                nonce: nonce.clone(),
            },
        );
        effects.push(Effect::Journal {
            task,
            attempt,
            output,
            nonce,
        });
    }

    /// Attempt `lease.attempt` failed on `actor`: the job fails when the task is out
    /// of attempts or the failure would repeat; otherwise the task is retried after a
    /// backoff, preferably elsewhere, and a worker that keeps failing is excluded.
    fn attempt_failed(
        &mut self,
        actor: &str,
        lease: Lease,
        failure: TaskFailure,
        now: Instant,
        effects: &mut Vec<Effect>,
    ) {
        let task = lease.spec.id();
        let attempt = lease.attempt;
        tracing::warn!(worker = %actor, %task, attempt, error = %failure, retryable = failure.retryable, "task failed");
        let others = self.others(actor);
        let others: Vec<&str> = others.iter().map(String::as_str).collect();
        match self.board.failed(actor, lease, &failure, &others, now) {
            AfterFailure::GiveUp { attempts, error } => self.fail(
                EngineError::TaskFailed {
                    task: task.to_string(),
                    attempts,
                    error,
                },
                effects,
            ),
            AfterFailure::Retry { excluded: None } => {}
            AfterFailure::Retry {
                excluded: Some(why),
            } => {
                tracing::warn!(worker = worker_of(actor), reason = %why, "worker excluded for the rest of the job");
                self.observed.push(Observation::WorkerExcluded {
                    worker: worker_of(actor).to_string(),
                    reason: why.to_string(),
                });
                effects.push(Effect::RecordExcluded(self.board.excluded().clone()));
            }
        }
    }

    /// The journal entry of `task` was written (`error`: or could not be), by the
    /// write that carried `nonce`.
    pub fn journaled(
        &mut self,
        task: TaskId,
        nonce: &str,
        error: Option<EngineError>,
    ) -> Vec<Effect> {
        let mut effects = Vec::new();
        // Only this coordinator's own writes (a peer cannot know the nonce).
        match self.journaling.get(&task) {
            Some(j) if j.nonce == nonce => {}
            _ => {
                tracing::warn!(%task, "a journal confirmation for no write of this coordinator refused");
                return effects;
            }
        }
        let Some(j) = self.journaling.remove(&task) else {
            return effects;
        };
        if self.phase != Phase::Running {
            return effects;
        }
        if let Some(e) = error {
            self.stop(e, &mut effects);
            return effects;
        }
        tracing::debug!(%task, attempt = j.attempt, "journaled");
        match self.driver.accept(task, &j.output) {
            Ok(progressed) => {
                self.observed.push(Observation::AttemptEnded {
                    task,
                    attempt: j.attempt,
                    worker: j.worker.clone(),
                    outcome: Outcome::Accepted,
                    reason: None,
                });
                self.observe_rejected(task, &progressed);
                effects.push(Effect::WriteProgress(self.driver.record_progress(None)));
                effects.push(Effect::TaskDone {
                    stage: task.stage,
                    progressed,
                });
                self.accepted.insert(task, j.attempt);
                self.stage_pending.remove(&task);
                if self.stage_pending.is_empty() {
                    self.stage_done(&mut effects);
                    self.advance(&mut effects);
                }
            }
            Err(e) => self.fail(e, &mut effects),
        }
        effects
    }

    /// Moves on to the first stage with tasks left and queues them; after the last
    /// stage, [`Effect::Finish`].
    fn advance(&mut self, effects: &mut Vec<Effect>) {
        loop {
            let planned = match self.driver.stage(self.stage) {
                Ok(Some(planned)) => planned,
                Ok(None) => {
                    self.phase = Phase::Finishing;
                    effects.push(Effect::Finish);
                    return;
                }
                Err(e) => return self.fail(e, effects),
            };
            let tasks = planned.tasks;
            if let Some(first) = tasks.first() {
                effects.push(Effect::StagePlanned {
                    stage: first.id.stage,
                    tasks: tasks.len() as u64,
                });
                self.observed.push(Observation::StagePlanned {
                    stage: first.id.stage,
                    unit: planned.unit.to_string(),
                    tasks: tasks.iter().map(|t| t.id).zip(planned.units).collect(),
                });
            }
            let pending: Vec<_> = tasks
                .into_iter()
                .filter(|t| !self.accepted.contains_key(&t.id))
                .collect();
            if pending.is_empty() {
                self.stage_done(effects);
                continue;
            }
            self.stage_pending = pending.iter().map(|t| t.id).collect();
            for t in pending {
                self.board.push(t);
            }
            return;
        }
    }

    /// Every task of the running stage is accepted: the kind records it, and the next
    /// stage is the one to plan.
    fn stage_done(&mut self, effects: &mut Vec<Effect>) {
        effects.push(Effect::WriteProgress(
            self.driver.record_progress(Some(self.stage)),
        ));
        self.stage += 1;
    }

    /// The final outputs are written (`written`), or could not be: the job is
    /// finished, or this coordinator stops (the next one writes them, from the journal).
    pub fn finished(&mut self, written: bool) {
        self.phase = if written {
            Phase::Finished
        } else {
            Phase::Stopped
        };
        let state = if written {
            JobState::Succeeded
        } else {
            JobState::Stopped
        };
        self.observed
            .push(Observation::State { state, error: None });
        self.board.clear();
    }

    /// The job fails with `error` (its tasks are dropped): its workers are told it is
    /// done.
    pub fn fail(&mut self, error: EngineError, effects: &mut Vec<Effect>) {
        self.end(Phase::Failed, error, effects);
    }

    /// This coordinator stops with `error`, a fault of its own environment (its journal,
    /// its lock): the job is not over, and its workers are told to wait for the next
    /// coordinator.
    pub fn stop(&mut self, error: EngineError, effects: &mut Vec<Effect>) {
        self.end(Phase::Stopped, error, effects);
    }

    fn end(&mut self, phase: Phase, error: EngineError, effects: &mut Vec<Effect>) {
        if !self.is_over() {
            self.phase = phase;
            self.board.clear();
            let state = match phase {
                Phase::Stopped => JobState::Stopped,
                _ => JobState::Failed,
            };
            self.observed.push(Observation::State {
                state,
                error: Some(error.to_string()),
            });
            effects.push(Effect::Fail(error));
        }
    }

    /// A worker node's session ended: its leases are re-queued at once.
    pub fn node_lost(&mut self, node: &str) -> Vec<Effect> {
        let mut effects = Vec::new();
        let Some(worker) = self
            .workers
            .iter()
            .find(|(_, r)| r.node == node)
            .map(|(w, _)| w.clone())
        else {
            return effects; // not a registered worker (e.g. refused)
        };
        self.workers.remove(&worker);
        tracing::info!(%worker, "worker left");
        self.observed.push(Observation::WorkerLeft {
            worker: worker.clone(),
        });
        let revoked = self.board.node_lost(&worker);
        self.revoked(
            revoked,
            "worker node lost",
            WORKER_LEFT,
            &format!("worker {worker} lost"),
            &mut effects,
        );
        effects
    }

    /// The periodic check: expired leases are re-queued.
    pub fn tick(&mut self, now: Instant) -> Vec<Effect> {
        let mut effects = Vec::new();
        let revoked = self.board.expire(now);
        self.revoked(
            revoked,
            "lease expired",
            LEASE_EXPIRED,
            "lease expired (worker silent)",
            &mut effects,
        );
        effects
    }

    /// Logs leases taken back (`reason`: the monitor's, [`LEASE_EXPIRED`] or
    /// [`WORKER_LEFT`]); a task out of attempts fails the job with `why`.
    fn revoked(
        &mut self,
        revoked: Vec<Revoked>,
        event: &str,
        reason: &str,
        why: &str,
        effects: &mut Vec<Effect>,
    ) {
        for r in revoked {
            tracing::warn!(worker = %r.worker, task = %r.task, attempt = r.attempt, "{event}; re-queued");
            self.observed.push(Observation::AttemptEnded {
                task: r.task,
                attempt: r.attempt,
                worker: worker_of(&r.worker).to_string(),
                outcome: Outcome::Lost,
                reason: Some(reason.to_string()),
            });
            if r.out_of_attempts {
                let error = EngineError::TaskFailed {
                    task: r.task.to_string(),
                    attempts: r.attempt,
                    error: why.to_string(),
                };
                return self.fail(error, effects);
            }
        }
    }
}
