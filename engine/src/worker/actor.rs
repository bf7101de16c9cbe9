//! The worker actor: it pulls tasks from the coordinator actor ([`crate::messages`]) and
//! runs them with its kind's runner.
//!
//! A worker pulls: it asks the coordinator for a task ([`CoordinatorMsg::RequestTask`]),
//! runs it while a side task sends [`CoordinatorMsg::Heartbeat`]s that extend its lease,
//! reports [`CoordinatorMsg::Finished`] with the `(task, attempt)` it was given, and asks
//! again. `Wait` means nothing is runnable yet (reduces wait for all maps); `Done` stops
//! the worker. A panic inside a task is caught and reported as a failed attempt.
//!
//! A task whose last step only waits (fsyncs, uploads: [`RunResult::Committing`]) is
//! committed by a side task while the worker asks for and runs its next one; the side
//! task says when it ends ([`WorkerMsg::Committed`]) and the worker reports it, the
//! committed task's heartbeats going on until then. At most [`COMMITS_BEHIND`] commits
//! run behind the task being run; a worker with more waits for one to end before it
//! asks again. A worker that stops waits for its commits and reports them; as no answer
//! confirms those reports any more, it then removes what they wrote if the job finished
//! without them, or keeps them for the next coordinator.
//!
//! A task that failed on a store error closes the worker's [`StoreGate`]: it asks for
//! no task until a probe of the job's output answers (a worker cut off from the store
//! but not from the coordinator would otherwise take task after task and fail each).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use ractor_cluster::RactorMessage;

use crate::fault::Faults;
use crate::job::{Kinds, TaskRunner};
use crate::kind::{RunResult, TaskEnv, WorkerResources};
use crate::messages::{CoordinatorMsg, Wire};
use crate::protocol::TaskReply;
use crate::protocol::{Assignment, Payload, TaskFailure, WorkerTiming};
#[cfg(feature = "fault-injection")]
use crate::protocol::{TaskId, TaskOutput};
use crate::scratch::JobScratch;

/// Messages to a worker actor.
#[derive(RactorMessage)]
pub enum WorkerMsg {
    /// Ask the coordinator for a task (and run it).
    Poll,
    /// Commit `n` ended (sent by the side task that ran it): report its result.
    Committed(u64),
}

/// Commits a worker lets run behind the task it is running.
pub const COMMITS_BEHIND: usize = 1;

/// A committed task, for its report.
struct CommitEnded {
    assignment: Assignment,
    beat: Heartbeat,
    /// The commit's result, or its panic.
    result: std::thread::Result<crate::error::Result<Payload>>,
    /// Its kind's name (the runner's key).
    kind: &'static str,
    /// When the commit began.
    started: std::time::Instant,
}

/// A task's heartbeat side task, stopped when this is dropped (or at its report).
struct Heartbeat(tokio::task::JoinHandle<()>);

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A successful attempt whose report may not have reached a coordinator that took it
/// (the coordinator went away first). It is offered again to the next coordinator,
/// which adopts it if its task is not accepted yet; once the job is complete without
/// it, its files are removed.
#[derive(Debug, Clone)]
pub struct Unreported {
    pub assignment: Assignment,
    pub output: Payload,
}

/// A worker process's unreported attempts, shared by its worker actors and its join
/// loop, across coordinators.
pub type UnreportedAttempts = Arc<std::sync::Mutex<Vec<Unreported>>>;

/// The job a worker works for: its kind and its output URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOutput {
    pub kind: String,
    pub output: String,
}

pub struct WorkerArgs {
    pub name: String,
    pub coordinator: ActorRef<CoordinatorMsg>,
    pub resources: WorkerResources,
    /// Heartbeat period and request timeout (from the job's lease).
    pub timing: WorkerTiming,
    /// Set when the coordinator said the job is done (the other way a worker stops is
    /// losing the coordinator).
    pub done: Arc<AtomicBool>,
    /// The job's kind and output URL, from the first task (lets a worker that lost
    /// the coordinator see whether the job finished without it).
    pub job: Arc<std::sync::OnceLock<JobOutput>>,
    /// Fault injection (test builds only; see [`crate::fault`]).
    pub faults: Faults,
    /// The job kinds this worker runs tasks of (the program's registry).
    pub kinds: Kinds,
    /// The process's attempts whose reports a coordinator may not have got.
    pub unreported: UnreportedAttempts,
    /// Reports sent to this coordinator before this actor started (unreported attempts
    /// offered again), not yet known to have arrived.
    pub sent: Vec<Unreported>,
    /// The process's counts for its `/metrics`.
    pub stats: Arc<crate::monitor::worker::WorkerStats>,
}

pub struct WorkerActor;

/// Whether a worker may ask for a task, as far as its store goes: open, or closed
/// after a task failed on a store error until a probe of the store answers, probing
/// with a doubling wait. Pure: the actor probes and sleeps.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StoreGate {
    /// Closed: the wait before the next probe.
    closed: Option<Duration>,
}

impl StoreGate {
    /// The first wait between probes.
    const FIRST_WAIT: Duration = Duration::from_secs(1);
    /// The longest wait between probes.
    const MAX_WAIT: Duration = Duration::from_secs(30);

    /// A task ended; `on_store`: it failed on a store error.
    pub fn task_ended(&mut self, on_store: bool) {
        if on_store && self.closed.is_none() {
            self.closed = Some(Self::FIRST_WAIT);
        }
    }

    /// Whether the store must be probed before asking for a task.
    pub fn is_closed(&self) -> bool {
        self.closed.is_some()
    }

    /// Whether a probe has failed since the gate closed.
    pub fn probe_failed(&self) -> bool {
        self.closed.is_some_and(|wait| wait > Self::FIRST_WAIT)
    }

    /// A probe's answer: reachable opens the gate (`None`); otherwise the wait before
    /// the next probe.
    pub fn probed(&mut self, reachable: bool) -> Option<Duration> {
        if reachable {
            self.closed = None;
            return None;
        }
        let wait = self.closed.unwrap_or(Self::FIRST_WAIT);
        self.closed = Some((wait * 2).min(Self::MAX_WAIT));
        Some(wait)
    }
}

/// A worker actor's state: its arguments and what it keeps between tasks.
pub struct WorkerState {
    args: WorkerArgs,
    /// Each job kind's task runner, made at its first task.
    runners: std::collections::HashMap<&'static str, Box<dyn TaskRunner>>,
    /// The current job run's scratch directory (made at its first task, removed when
    /// the worker stops or moves on to another job).
    scratch: Option<JobScratch>,
    /// Closed while the store seems unreachable.
    store_gate: StoreGate,
    /// The tasks whose successful results were sent but not yet known to have
    /// arrived: a report is a one-way message, confirmed only by the coordinator's next
    /// answer on the same (ordered) session.
    unconfirmed: Vec<Unreported>,
    /// Commits running behind, by number (their side tasks, which give the committed
    /// task for its report).
    commits: Vec<(u64, tokio::task::JoinHandle<CommitEnded>)>,
    /// The next commit's number.
    next_commit: u64,
    /// A poll put off while [`COMMITS_BEHIND`] commits ran: the next commit to end
    /// polls.
    poll_deferred: bool,
}

impl Actor for WorkerActor {
    type Msg = WorkerMsg;
    type State = WorkerState;
    type Arguments = WorkerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        mut args: WorkerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.cast(WorkerMsg::Poll)?;
        let unconfirmed = std::mem::take(&mut args.sent);
        Ok(WorkerState {
            args,
            runners: Default::default(),
            scratch: None,
            store_gate: StoreGate::default(),
            unconfirmed,
            commits: Vec::new(),
            next_commit: 0,
            poll_deferred: false,
        })
    }

    /// The commits still running are waited for and settled: reported, or (the
    /// coordinator gone) what they wrote removed if the job finished without them.
    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut WorkerState,
    ) -> Result<(), ActorProcessingErr> {
        for (_, side) in std::mem::take(&mut state.commits) {
            settle(
                &state.args,
                &mut state.store_gate,
                &mut state.unconfirmed,
                &mut state.runners,
                side,
            )
            .await;
        }
        // No answer will confirm the reports sent last (this worker asks no more):
        // each attempt is settled now, or kept for the next coordinator.
        for sent in std::mem::take(&mut state.unconfirmed) {
            keep_or_discard(&state.args, sent).await;
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: WorkerMsg,
        state: &mut WorkerState,
    ) -> Result<(), ActorProcessingErr> {
        let WorkerState {
            args: state,
            runners,
            scratch,
            store_gate,
            unconfirmed,
            commits,
            next_commit,
            poll_deferred,
        } = state;
        let name = state.name.clone();
        if let WorkerMsg::Committed(n) = msg {
            let Some(at) = commits.iter().position(|(c, _)| *c == n) else {
                return Ok(());
            };
            let (_, side) = commits.remove(at);
            if !settle(state, store_gate, unconfirmed, runners, side).await {
                myself.stop(None);
            } else if std::mem::take(poll_deferred) {
                myself.cast(WorkerMsg::Poll)?;
            }
            return Ok(());
        }
        if commits.len() > COMMITS_BEHIND {
            *poll_deferred = true;
            return Ok(());
        }
        if store_gate.is_closed() {
            if state.coordinator.get_status() != ractor::ActorStatus::Running {
                myself.stop(None);
                return Ok(());
            }
            let probe = match state.job.get() {
                Some(job) => match crate::store::StoreUrl::parse(&job.output) {
                    Ok(output) => output.exists(&output.child("_job")).await.map(|_| ()),
                    Err(e) => Err(e),
                },
                None => Ok(()),
            };
            let was_unreachable = store_gate.probe_failed();
            if let Some(wait) = store_gate.probed(probe.is_ok()) {
                if let Err(e) = probe {
                    tracing::warn!(
                        worker = %name,
                        error = %e,
                        retry_in_s = wait.as_secs(),
                        "store unreachable: asking for no task until it answers"
                    );
                }
                myself.send_after(wait, || WorkerMsg::Poll);
                return Ok(());
            }
            if was_unreachable {
                tracing::info!(worker = %name, "the store answers again: asking for tasks");
            }
        }
        let reply = state
            .coordinator
            .call(
                |reply| CoordinatorMsg::RequestTask {
                    worker: name.clone(),
                    reply,
                },
                Some(state.timing.request_timeout()),
            )
            .await;
        // An answer confirms the last report (same ordered session); no answer leaves
        // its fate unknown.
        let answered = matches!(reply, Ok(ractor::rpc::CallResult::Success(_)));
        for sent in std::mem::take(unconfirmed) {
            if !answered {
                keep_or_discard(state, sent).await;
            }
        }
        let reply = match reply {
            Ok(ractor::rpc::CallResult::Success(Wire(Ok(r)))) => r,
            Ok(ractor::rpc::CallResult::Success(Wire(Err(e)))) => {
                tracing::warn!(worker = %name, error = %e, "bad answer from the coordinator; stopping");
                myself.stop(None);
                return Ok(());
            }
            Ok(_) | Err(_) => {
                // The coordinator is gone or slow: stop; it owns the job's fate.
                tracing::warn!(worker = %name, "no answer from the coordinator; stopping");
                myself.stop(None);
                return Ok(());
            }
        };
        match reply {
            TaskReply::Done => {
                state.done.store(true, Ordering::SeqCst);
                myself.stop(None)
            }
            TaskReply::Excluded(why) => {
                tracing::error!(worker = %name, reason = %why, "excluded from the job by the coordinator; stopping");
                myself.stop(None)
            }
            TaskReply::Wait => {
                myself.send_after(Duration::from_millis(50), || WorkerMsg::Poll);
            }
            TaskReply::Task(assignment) => {
                let task = assignment.task.id();
                let attempt = assignment.attempt;
                let lease = assignment.lease.clone();
                let _ = state.job.set(JobOutput {
                    kind: assignment.job.kind.clone(),
                    output: assignment.job.output.clone(),
                });
                tracing::debug!(worker = %name, %task, attempt, "running");
                let started = std::time::Instant::now();
                let beat = Heartbeat({
                    let coordinator = state.coordinator.clone();
                    let name = name.clone();
                    let every = state.timing.heartbeat();
                    let lease = lease.clone();
                    tokio::spawn(async move {
                        let mut tick = tokio::time::interval(every);
                        tick.tick().await;
                        loop {
                            tick.tick().await;
                            let msg = CoordinatorMsg::Heartbeat {
                                worker: name.clone(),
                                task: Wire::new(task),
                                attempt,
                                lease: lease.clone(),
                            };
                            if coordinator.cast(msg).is_err() {
                                break;
                            }
                        }
                    })
                });
                let Some(kind) = state.kinds.find(&assignment.job.kind) else {
                    drop(beat);
                    let known: Vec<&str> = state.kinds.names();
                    let msg = CoordinatorMsg::finished(
                        &name,
                        &assignment,
                        Err(TaskFailure {
                            error: format!(
                                "this worker runs no job of kind {:?} (it knows {known:?}): \
                                 run the same probeflow release everywhere",
                                assignment.job.kind
                            ),
                            retryable: false,
                        }),
                    );
                    if state.coordinator.cast(msg).is_err() {
                        myself.stop(None);
                    } else {
                        myself.cast(WorkerMsg::Poll)?;
                    }
                    return Ok(());
                };
                let runner = runners.entry(kind.name()).or_insert_with(|| kind.runner());
                let stage = task.stage;
                state.stats.task_started(stage.as_str());
                let result = match JobScratch::for_job(
                    scratch,
                    &state.resources.scratch,
                    &assignment.job.job_id,
                ) {
                    Ok(s) => match state.faults.before_task(s.path()) {
                        Err(e) => Ok(Err(e)),
                        #[cfg(feature = "fault-injection")]
                        Ok(()) if state.faults.simulates_tasks() => Ok(runner
                            .simulated(&assignment)
                            .unwrap_or_else(|| {
                                Err(crate::error::EngineError::Internal(format!(
                                    "the {} job kind cannot simulate its tasks",
                                    assignment.job.kind
                                )))
                            })
                            .map(RunResult::Durable)),
                        Ok(()) => {
                            let env = TaskEnv {
                                resources: &state.resources,
                                scratch: s,
                            };
                            AssertUnwindSafe(runner.run(&assignment, env))
                                .catch_unwind()
                                .await
                        }
                    },
                    Err(e) => Ok(Err(e)),
                };
                tracing::debug!(
                    worker = %name,
                    %task,
                    attempt,
                    ms = started.elapsed().as_millis() as u64,
                    ok = matches!(result, Ok(Ok(_))),
                    "task ended"
                );
                state.stats.task_ended(
                    stage.as_str(),
                    matches!(result, Ok(Ok(_))),
                    started.elapsed().as_secs_f64(),
                );
                // What the task freed goes back to the system before the next one.
                crate::allocator::release_freed();
                let result = match result {
                    Ok(Ok(RunResult::Committing(commit))) => {
                        // The commit runs behind; this worker asks for its next task.
                        let n = *next_commit;
                        *next_commit += 1;
                        let me = myself.clone();
                        let kind = kind.name();
                        let side = tokio::spawn(async move {
                            let started = std::time::Instant::now();
                            let result = AssertUnwindSafe(commit).catch_unwind().await;
                            // A stopped worker settles its commits as it stops.
                            let _ = me.cast(WorkerMsg::Committed(n));
                            CommitEnded {
                                assignment: *assignment,
                                beat,
                                result,
                                kind,
                                started,
                            }
                        });
                        commits.push((n, side));
                        myself.cast(WorkerMsg::Poll)?;
                        return Ok(());
                    }
                    Ok(Ok(RunResult::Durable(output))) => Ok(Ok(output)),
                    Ok(Err(e)) => Ok(Err(e)),
                    Err(panic) => Err(panic),
                };
                if report(
                    state,
                    store_gate,
                    unconfirmed,
                    runner.as_mut(),
                    *assignment,
                    beat,
                    result,
                )
                .await
                {
                    myself.cast(WorkerMsg::Poll)?;
                } else {
                    myself.stop(None);
                }
            }
        }
        Ok(())
    }
}

/// Waits for a commit's side task and reports its task ([`report`]); false when the
/// coordinator is gone.
async fn settle(
    state: &WorkerArgs,
    store_gate: &mut StoreGate,
    unconfirmed: &mut Vec<Unreported>,
    runners: &mut std::collections::HashMap<&'static str, Box<dyn TaskRunner>>,
    side: tokio::task::JoinHandle<CommitEnded>,
) -> bool {
    let CommitEnded {
        assignment,
        beat,
        result,
        kind,
        started,
    } = match side.await {
        Ok(ended) => ended,
        Err(e) => {
            // The side task catches the commit's panics: only a runtime shutting down
            // gets here. Not reported: the lease runs out.
            tracing::error!(worker = %state.name, error = %e, "a commit's side task did not finish");
            return true;
        }
    };
    tracing::debug!(
        worker = %state.name,
        task = %assignment.task.id(),
        attempt = assignment.attempt,
        ms = started.elapsed().as_millis() as u64,
        ok = matches!(result, Ok(Ok(_))),
        "task committed"
    );
    let Some(runner) = runners.get_mut(kind) else {
        // The runner ran the task, and runners are never removed.
        tracing::error!(worker = %state.name, kind, "a commit ended for a kind with no runner");
        return true;
    };
    report(
        state,
        store_gate,
        unconfirmed,
        runner.as_mut(),
        assignment,
        beat,
        result,
    )
    .await
}

/// Reports `result` (or the panic) for `assignment`, its heartbeats stopped first. False
/// when the coordinator is gone: the worker stops (a successful attempt's files are
/// removed if the job finished without it).
async fn report(
    state: &WorkerArgs,
    store_gate: &mut StoreGate,
    unconfirmed: &mut Vec<Unreported>,
    runner: &mut dyn TaskRunner,
    assignment: Assignment,
    beat: Heartbeat,
    result: std::thread::Result<crate::error::Result<Payload>>,
) -> bool {
    let name = &state.name;
    // Heartbeats go on during a (fault-injected) slow report.
    state.faults.before_report().await;
    drop(beat);
    store_gate.task_ended(matches!(
        result,
        Ok(Err(crate::error::EngineError::Store { .. }))
    ));
    let result = match result {
        Ok(Ok(output)) => Ok(output),
        Ok(Err(e)) => Err(TaskFailure::of(&e)),
        Err(panic) => Err(TaskFailure {
            error: format!(
                "task panicked: {}",
                crate::error::panic_message(panic.as_ref())
            ),
            retryable: true,
        }),
    };
    let succeeded = result.as_ref().ok().cloned();
    // The runner forges results in test builds only.
    #[cfg(not(feature = "fault-injection"))]
    let _ = runner;
    #[cfg(feature = "fault-injection")]
    let result = if state.faults.forges_results() {
        forge_results(&state.coordinator, name, &assignment, &*runner, result)
    } else {
        result
    };
    let msg = CoordinatorMsg::finished(name, &assignment, result);
    let delivered = state.coordinator.cast(msg).is_ok();
    if let Some(output) = succeeded {
        let sent = Unreported { assignment, output };
        if delivered {
            unconfirmed.push(sent);
        } else {
            keep_or_discard(state, sent).await;
        }
    }
    delivered
}

/// An attempt whose report may not have reached a coordinator that took it: if the job
/// is complete (its journal final), its files are removed unless the journal names
/// this attempt ([`discard_if_not_accepted`]); if not, it is kept, to be offered to
/// the next coordinator.
async fn keep_or_discard(state: &WorkerArgs, sent: Unreported) {
    if !discard_if_not_accepted(state.kinds, &sent.assignment, &state.name).await {
        tracing::info!(worker = %state.name, task = %sent.assignment.task.id(), attempt = sent.assignment.attempt, "no coordinator took this attempt's report yet; it is offered to the next one");
        if let Ok(mut kept) = state.unreported.lock() {
            kept.push(sent);
        }
    }
}

/// The coordinator went away after `task`'s successful result was sent, so whether it
/// arrived is unknown. If the job is complete (its completion record exists, so its
/// journal is final) and the journal names another attempt of the task (or none), this
/// attempt lost: its planned files ([`crate::kind::Kind::attempt_files`]) are removed,
/// which leaves nothing of a fenced attempt on the store. An accepted attempt is left
/// alone. True when the job is complete (the attempt settled); false when it is not,
/// or that cannot be read (a coordinator may still adopt the attempt).
pub(crate) async fn discard_if_not_accepted(kinds: Kinds, task: &Assignment, worker: &str) -> bool {
    let id = task.task.id();
    let checked = async {
        let output = crate::store::StoreUrl::parse(&task.job.output)?;
        if !crate::completion::exists(&output).await? {
            return Ok::<_, crate::error::EngineError>(None);
        }
        let entry = crate::journal::read_entry(&output, id).await?;
        if entry.is_some_and(|e| e.attempt == task.attempt) {
            return Ok(Some(false));
        }
        let Some(kind) = kinds.find(&task.job.kind) else {
            return Ok(Some(false));
        };
        let files = kind.attempt_files(id, task.attempt)?;
        crate::completion::discard_attempt(&output, &files)
            .await
            .map(Some)
    };
    match checked.await {
        Ok(None) => false,
        Ok(Some(true)) => {
            tracing::info!(worker, task = %id, attempt = task.attempt, "the job finished without this attempt; its files are removed");
            true
        }
        Ok(Some(false)) => true,
        Err(e) => {
            tracing::warn!(worker, task = %id, error = %e, "cannot check whether this attempt's result arrived; it is kept for the next coordinator");
            false
        }
    }
}

#[cfg(feature = "fault-injection")]
/// Fault injection (`forge-results`): first reports a result for a task this worker
/// holds no lease on; then returns its own task's result with paths it was not given
/// (the job kind forges them). The coordinator must refuse both.
fn forge_results(
    coordinator: &ActorRef<CoordinatorMsg>,
    name: &str,
    assignment: &Assignment,
    runner: &dyn TaskRunner,
    result: Result<TaskOutput, TaskFailure>,
) -> Result<TaskOutput, TaskFailure> {
    let Ok(output) = result else {
        return result;
    };
    let output = runner.forged(assignment, output);
    let mine = assignment.task.id();
    let other = TaskId {
        index: mine.index + 1,
        ..mine
    };
    tracing::warn!(worker = %name, task = %other, "fault injection: reporting a result for a lease this worker does not hold");
    let _ = coordinator.cast(CoordinatorMsg::Finished {
        worker: name.to_string(),
        job: assignment.job.job_id.clone(),
        task: Wire::new(other),
        attempt: 1,
        lease: assignment.lease.clone(),
        result: Wire::new(Ok(output.clone())),
    });
    tracing::warn!(worker = %name, task = %mine, "fault injection: reporting paths this worker was not given");
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::StoreGate;
    use std::time::Duration;

    #[test]
    fn a_store_failure_closes_the_gate_and_other_failures_do_not() {
        let mut gate = StoreGate::default();
        gate.task_ended(false);
        assert!(!gate.is_closed());
        gate.task_ended(true);
        assert!(gate.is_closed() && !gate.probe_failed());
        gate.probed(false);
        assert!(gate.probe_failed());
        gate.probed(true);
        assert!(!gate.is_closed() && !gate.probe_failed());
    }

    #[test]
    fn failed_probes_wait_longer_each_time_up_to_the_limit_and_an_answer_opens() {
        let mut gate = StoreGate::default();
        gate.task_ended(true);
        let waits: Vec<u64> = (0..8)
            .map(|_| gate.probed(false).map(|w| w.as_secs()).unwrap())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(gate.probed(true), None);
        assert!(!gate.is_closed());
        // Closed again, it starts from the first wait.
        gate.task_ended(true);
        assert_eq!(gate.probed(false), Some(Duration::from_secs(1)));
    }

    #[test]
    fn a_second_store_failure_while_closed_keeps_the_backoff() {
        let mut gate = StoreGate::default();
        gate.task_ended(true);
        gate.probed(false);
        gate.probed(false);
        gate.task_ended(true);
        assert_eq!(gate.probed(false), Some(Duration::from_secs(4)));
    }
}
