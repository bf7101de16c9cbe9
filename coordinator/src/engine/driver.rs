//! Running a job, whatever its kind: the coordinator actor (task queue, leases,
//! retries, journal) and the driver that plans or resumes the job and runs it in local
//! mode (worker actors in-process) or cluster mode (worker processes join).
//!
//! ```text
//! run_job ─ plan or resume ─► CoordinatorActor ◄─ RequestTask/Heartbeat/Finished ─ WorkerActor × N
//!                                  │ journal entry after every task
//!                                  └─ a stage's tasks all done → the job's next stage; none left → JobDriver::finish
//! ```
//!
//! A task is leased to one worker with a deadline; heartbeats extend it; an expired
//! lease puts the task back in the queue ([`crate::engine::leases`]). Results are fenced
//! by `(task, attempt, lease token)`: only the attempt that holds the lease is accepted,
//! so a late duplicate changes nothing. The job kind sees only its own
//! [`JobDriver`]: stages, result checks, accepted results, and the end of the job.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use probeflow_worker::engine::actor::{CoordinatorMsg, TaskReply, Wire, WorkerActor, WorkerArgs};
use probeflow_worker::engine::cluster;
use probeflow_worker::engine::fault::Faults;
use probeflow_worker::engine::completion::{self, Completion, CompletionRecord};
use probeflow_worker::engine::inputs::{list_inputs, refuse_changed_inputs};
use probeflow_worker::engine::job::JobDriver;
use probeflow_worker::engine::kind::WorkerConfig;
use probeflow_worker::engine::protocol::{
    Assignment, JobContext, Payload, Registration, TaskFailure, TaskId, WorkerTiming,
    PROTOCOL_VERSION,
};
use probeflow_worker::engine::store::StoreUrl;
use probeflow_worker::engine::tls::{ClusterTls, TlsFiles};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::oneshot;

use crate::engine::journal::{self, JobRecord, Journal, TaskRecord};
use crate::engine::leases::{AfterFailure, Grant, Lease, LeaseBoard, Refused, Revoked};
use crate::engine::output_lock::OutputLock;
use crate::engine::output_writer::OutputWriter;
use crate::engine::progress::Progress;
use crate::engine::schedule::{worker_of, RetryPolicy};
use crate::error::{JobError, Result};
use crate::spec::{JobSpec, Mode};

/// What a run did.
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    /// The output was already complete; nothing ran (the job kind's summary).
    AlreadyComplete(String),
    /// The job ran (or resumed) to completion.
    Completed {
        /// The job kind's one-line summary.
        summary: String,
        tasks_run: u64,
        tasks_resumed: u64,
    },
}

enum Phase {
    Running,
    Finished,
}

pub struct CoordinatorState {
    job: JobContext,
    output: StoreUrl,
    /// The job kind's side of the job.
    driver: Box<dyn JobDriver>,
    /// The stage running now, and its tasks not accepted yet.
    stage: usize,
    stage_pending: HashSet<TaskId>,
    /// Every accepted task (journaled).
    accepted: HashSet<TaskId>,
    timing: WorkerTiming,
    board: LeaseBoard,
    phase: Phase,
    done: Option<oneshot::Sender<Result<(u64, String)>>>,
    tasks_run: u64,
    progress: Progress,
    /// Set (with the reason) if this coordinator lost the output lock.
    lock_lost: tokio::sync::watch::Receiver<Option<String>>,
    /// The workers in the job, by name: worker processes that registered (cluster
    /// mode), or the in-process worker actors (local mode).
    workers: HashMap<String, Registration>,
    /// Lease tokens handed out (part of the next token's seed).
    lease_tokens: u64,
    /// Checked results whose journal entry is being written, with the write's nonce.
    journaling: HashMap<TaskId, (u32, Payload, String)>,
    /// Writes the kind's progress files off the actor.
    writer: OutputWriter,
    /// The completion marker's name, and its record but for the summary.
    marker: &'static str,
    completion: CompletionRecord,
}

pub struct CoordinatorActor;

impl CoordinatorState {
    /// How often leases and the output lock are checked: every heartbeat period (a
    /// quarter lease), at most every half second.
    fn tick(&self) -> Duration {
        self.timing
            .heartbeat()
            .clamp(Duration::from_millis(10), Duration::from_millis(500))
    }

    fn finish(&mut self, result: Result<(u64, String)>) {
        self.phase = Phase::Finished;
        self.board.clear();
        if let Some(tx) = self.done.take() {
            let _ = tx.send(result);
        }
    }

    /// Logs leases taken back (`"{event}; re-queued"`); a task out of attempts fails
    /// the job with `why`.
    fn revoked(&mut self, revoked: Vec<Revoked>, event: &str, why: &str) {
        for r in revoked {
            tracing::warn!(worker = %r.worker, task = %r.task, attempt = r.attempt, "{event}; re-queued");
            if r.out_of_attempts {
                self.finish(Err(JobError::TaskFailed {
                    task: r.task.to_string(),
                    attempts: r.attempt,
                    error: why.to_string(),
                }));
                return;
            }
        }
    }

    /// The other workers (processes) still in the job, besides `actor`'s.
    fn others(&self, actor: &str) -> Vec<String> {
        let me = worker_of(actor);
        self.workers
            .keys()
            .filter(|w| *w != me && !self.board.is_excluded(w))
            .cloned()
            .collect()
    }

    /// Attempt `attempt` of the task leased as `lease` failed on `worker`: the job
    /// fails when the task is out of attempts or the failure would repeat; otherwise
    /// the task is retried after a backoff, preferably elsewhere, and a worker that
    /// keeps failing is excluded (and recorded for `status`).
    async fn attempt_failed(&mut self, worker: &str, lease: Lease, failure: TaskFailure) {
        let task = lease.spec.id();
        let attempt = lease.attempt;
        tracing::warn!(%worker, %task, attempt, error = %failure, retryable = failure.retryable, "task failed");
        let others = self.others(worker);
        let others: Vec<&str> = others.iter().map(String::as_str).collect();
        match self
            .board
            .failed(worker, lease, &failure, &others, Instant::now())
        {
            AfterFailure::GiveUp { attempts, error } => {
                self.finish(Err(JobError::TaskFailed {
                    task: task.to_string(),
                    attempts,
                    error,
                }));
            }
            AfterFailure::Retry { excluded: None } => {}
            AfterFailure::Retry {
                excluded: Some(why),
            } => {
                tracing::warn!(worker = worker_of(worker), reason = %why, "worker excluded for the rest of the job");
                let record: std::collections::BTreeMap<&String, &String> =
                    self.board.excluded().iter().collect();
                if let Err(e) = self.output.put_json(EXCLUDED_WORKERS, &record).await {
                    tracing::warn!(error = %e, "cannot record the excluded workers");
                }
            }
        }
    }

    /// Moves on to the first stage with tasks left and queues them; after the last
    /// stage, finishes the job (the kind writes its final outputs). Returns the
    /// summary when the job is complete.
    async fn advance(&mut self) -> Result<Option<String>> {
        loop {
            match self.driver.stage(self.stage)? {
                None => {
                    // The kind's progress files first: its final outputs come last.
                    self.writer.flush().await?;
                    let summary = self.driver.finish(&self.output).await?;
                    let record = CompletionRecord {
                        summary: summary.clone(),
                        ..self.completion.clone()
                    };
                    completion::write(&self.output, self.marker, &record).await?;
                    return Ok(Some(summary));
                }
                Some(tasks) => {
                    if let Some(first) = tasks.first() {
                        self.progress
                            .stage_planned(first.id.stage.as_str(), tasks.len() as u64);
                    }
                    let pending: Vec<_> = tasks
                        .into_iter()
                        .filter(|t| !self.accepted.contains(&t.id))
                        .collect();
                    if pending.is_empty() {
                        self.writer
                            .write(self.driver.record_progress(Some(self.stage)));
                        self.stage += 1;
                        continue;
                    }
                    self.stage_pending = pending.iter().map(|t| t.id).collect();
                    for t in pending {
                        self.board.push(t);
                    }
                    return Ok(None);
                }
            }
        }
    }

    /// Starts writing a checked result's journal entry, off the actor: the actor goes
    /// on granting tasks, and [`Self::accept`] takes the result when the write is done
    /// (a [`CoordinatorMsg::Journaled`] with this write's nonce).
    fn journal(
        &mut self,
        myself: ActorRef<CoordinatorMsg>,
        task: TaskId,
        attempt: u32,
        output: Payload,
    ) {
        self.lease_tokens += 1;
        let nonce = lease_token(self.lease_tokens);
        let store = self.output.clone();
        let entry = serde_json::to_vec_pretty(&TaskRecord {
            attempt,
            output: &output,
        });
        self.journaling
            .insert(task, (attempt, output, nonce.clone()));
        tokio::spawn(async move {
            let written = match entry {
                Ok(bytes) => store
                    .put(&store.child(&journal::task_path(task)), bytes)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let _ = myself.send_message(CoordinatorMsg::Journaled {
                task: Wire::new(task),
                nonce,
                error: Wire::new(written.err()),
            });
        });
    }

    /// Takes a journaled result.
    async fn accept(&mut self, task: TaskId, output: Payload) -> Result<()> {
        let progressed = self.driver.accept(task, &output)?;
        self.writer.write(self.driver.record_progress(None));
        self.progress.task_done(task.stage.as_str(), progressed);
        self.accepted.insert(task);
        self.stage_pending.remove(&task);
        if self.stage_pending.is_empty() {
            if let Some(summary) = self.advance().await? {
                let tasks_run = self.tasks_run;
                self.progress.finish();
                self.finish(Ok((tasks_run, summary)));
            }
        }
        Ok(())
    }
}

impl Actor for CoordinatorActor {
    type Msg = CoordinatorMsg;
    type State = CoordinatorState;
    type Arguments = CoordinatorState;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: CoordinatorState,
    ) -> std::result::Result<CoordinatorState, ActorProcessingErr> {
        myself.send_after(state.tick(), || CoordinatorMsg::Tick);
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: CoordinatorMsg,
        s: &mut CoordinatorState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match msg {
            CoordinatorMsg::Register {
                registration,
                reply,
            } => {
                let answer = match registration.0 {
                    Err(e) => Err(e),
                    Ok(r) if r.version != PROTOCOL_VERSION => Err(format!(
                        "worker {} speaks protocol {}, this coordinator {PROTOCOL_VERSION}: \
                         run the same probeflow release everywhere",
                        r.worker, r.version
                    )),
                    Ok(r) if s.workers.contains_key(&r.worker) => Err(format!(
                        "a worker named {:?} is already connected; worker names must be unique",
                        r.worker
                    )),
                    Ok(r) if r.worker.is_empty() || r.worker.contains('/') => Err(format!(
                        "worker name {:?}: must be non-empty and without '/'",
                        r.worker
                    )),
                    Ok(r) if s.board.is_excluded(&r.worker) => Err(format!(
                        "worker {:?} is excluded from this job ({})",
                        r.worker,
                        s.board.excluded().get(&r.worker).map_or("", String::as_str)
                    )),
                    Ok(r) => {
                        tracing::info!(worker = %r.worker, capacity = r.capacity, memory = r.memory_bytes, "worker joined");
                        s.workers.insert(r.worker.clone(), r);
                        Ok(s.timing)
                    }
                };
                if let Err(e) = &answer {
                    tracing::warn!(error = %e, "worker refused");
                }
                let _ = reply.send(Wire::new(answer));
            }
            CoordinatorMsg::RequestTask { worker, reply } => {
                if !s.workers.contains_key(worker_of(&worker)) {
                    tracing::warn!(%worker, "task request from a worker that has not registered refused");
                    let _ = reply.send(Wire(Err(format!(
                        "{worker:?} has not registered with this coordinator"
                    ))));
                    return Ok(());
                }
                let others = s.others(&worker);
                let others: Vec<&str> = others.iter().map(String::as_str).collect();
                let answer = match s.phase {
                    Phase::Finished => TaskReply::Done,
                    _ => {
                        s.lease_tokens += 1;
                        let token = lease_token(s.lease_tokens);
                        match s.board.request(&worker, &others, token, Instant::now()) {
                            Grant::Wait => TaskReply::Wait,
                            Grant::Excluded(why) => TaskReply::Excluded(why),
                            Grant::Task {
                                spec,
                                attempt,
                                token,
                            } => {
                                s.tasks_run += 1;
                                tracing::debug!(%worker, task = %spec.id(), attempt, "leased");
                                TaskReply::Task(Box::new(Assignment {
                                    task: spec,
                                    attempt,
                                    lease: token,
                                    job: s.job.clone(),
                                }))
                            }
                        }
                    }
                };
                let _ = reply.send(Wire::new(answer));
            }
            CoordinatorMsg::Heartbeat {
                worker,
                task,
                attempt,
                lease,
            } => {
                let Wire(Ok(task)) = task else {
                    tracing::warn!(%worker, "undecodable heartbeat refused");
                    return Ok(());
                };
                s.board
                    .heartbeat(&worker, task, attempt, &lease, Instant::now());
            }
            CoordinatorMsg::Finished {
                worker,
                task,
                attempt,
                lease: token,
                result,
            } => {
                let Wire(Ok(task)) = task else {
                    tracing::warn!(%worker, "undecodable result refused");
                    return Ok(());
                };
                // A result that does not decode counts as a failed attempt.
                let result = result.0.unwrap_or_else(|error| {
                    Err(TaskFailure {
                        error,
                        retryable: true,
                    })
                });
                let lease = match s.board.take(&worker, task, attempt, &token) {
                    Ok(lease) => lease,
                    Err(refused) => {
                        tracing::info!(%worker, %task, attempt, ?refused, "late or duplicate result refused (no lease held with this attempt and token)");
                        // Only an attempt this coordinator granted, by its planned paths.
                        if let (Phase::Finished, Refused::Late) = (&s.phase, refused) {
                            match s.driver.discard_late(&s.job, task, attempt).await {
                                Ok(true) => {
                                    tracing::info!(%worker, %task, attempt, "removed a late attempt's files")
                                }
                                Ok(false) => {}
                                Err(e) => {
                                    tracing::warn!(%worker, %task, error = %e, "cannot remove a late attempt's files")
                                }
                            }
                        }
                        return Ok(());
                    }
                };
                // A result names only what was planned for this task and attempt.
                let result = result.and_then(|output| {
                    match s.driver.check(&lease.spec, attempt, &output) {
                        Ok(()) => Ok(output),
                        Err(why) => {
                            tracing::warn!(%worker, %task, attempt, reason = %why, "result refused");
                            Err(TaskFailure {
                                error: format!("result refused: {why}"),
                                retryable: true,
                            })
                        }
                    }
                });
                match result {
                    Ok(output) => s.journal(myself.clone(), task, attempt, output),
                    Err(failure) => s.attempt_failed(&worker, lease, failure).await,
                }
            }
            CoordinatorMsg::Journaled { task, nonce, error } => {
                let Wire(Ok(task)) = task else {
                    return Ok(());
                };
                // Only this coordinator's own writes (a peer cannot know the nonce).
                match s.journaling.get(&task) {
                    Some((_, _, n)) if *n == nonce => {}
                    _ => {
                        tracing::warn!(%task, "a journal confirmation for no write of this coordinator refused");
                        return Ok(());
                    }
                }
                let Some((attempt, output, _)) = s.journaling.remove(&task) else {
                    return Ok(());
                };
                if matches!(s.phase, Phase::Finished) {
                    return Ok(());
                }
                let result = match error
                    .0
                    .unwrap_or_else(|e| Some(format!("undecodable: {e}")))
                {
                    Some(what) => {
                        let path = s.output.display(&s.output.child(&journal::task_path(task)));
                        // The store's error names the path already.
                        let what = what
                            .strip_prefix(&format!("{path}: "))
                            .unwrap_or(&what)
                            .to_string();
                        Err(JobError::Journal {
                            path,
                            what: format!("cannot write the journal entry: {what}"),
                        })
                    }
                    None => {
                        tracing::debug!(%task, attempt, "journaled");
                        s.accept(task, output).await
                    }
                };
                if let Err(e) = result {
                    s.finish(Err(e));
                }
            }
            CoordinatorMsg::NodeLost { node } => {
                let Some(worker) = s
                    .workers
                    .iter()
                    .find(|(_, r)| r.node == node)
                    .map(|(w, _)| w.clone())
                else {
                    return Ok(()); // not a registered worker (e.g. refused)
                };
                s.workers.remove(&worker);
                tracing::info!(%worker, "worker left");
                let revoked = s.board.node_lost(&worker);
                s.revoked(
                    revoked,
                    "worker node lost",
                    &format!("worker {worker} lost"),
                );
            }
            CoordinatorMsg::Tick => {
                let lost = s.lock_lost.borrow().clone();
                if let Some(why) = lost {
                    s.finish(Err(JobError::Conflict(why)));
                    return Ok(());
                }
                let revoked = s.board.expire(Instant::now());
                s.revoked(revoked, "lease expired", "lease expired (worker silent)");
                s.progress.tick();
                if !matches!(s.phase, Phase::Finished) {
                    myself.send_after(s.tick(), || CoordinatorMsg::Tick);
                }
            }
        }
        Ok(())
    }
}

/// Where the workers excluded from a job are recorded (shown by `coordinator status`).
pub const EXCLUDED_WORKERS: &str = "_job/excluded-workers.json";

/// A fresh lease token: 128 bits no other node can guess. The keys of std's
/// `RandomState` come from the operating system's random source; the counter and the
/// clock make every token of a run distinct.
fn lease_token(counter: u64) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut seed = Vec::with_capacity(40);
    for _ in 0..2 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(counter);
        seed.extend_from_slice(&h.finish().to_le_bytes());
    }
    seed.extend_from_slice(&counter.to_le_bytes());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    seed.extend_from_slice(&nanos.to_le_bytes());
    blake3::hash(&seed).to_hex()[..32].to_string()
}

/// Plans (or resumes) and runs a job: with in-process worker actors (local mode), or
/// with `worker` processes that join over the network (cluster mode).
pub async fn run_job(spec: &JobSpec) -> Result<RunOutcome> {
    // Check the cluster settings before touching the output.
    let cluster = match spec.run.mode {
        Mode::Local => {
            if spec.run.tls.is_some() {
                tracing::warn!("[run.tls] is ignored in local mode");
            }
            None
        }
        Mode::Cluster => {
            let listen: std::net::SocketAddr =
                spec.run.listen.parse().map_err(|e| JobError::Spec {
                    file: "[run] listen".into(),
                    what: format!("{:?}: expected ip:port ({e})", spec.run.listen),
                })?;
            let tls = match &spec.run.tls {
                None => None,
                Some(t) => {
                    let files = TlsFiles {
                        cert: t.cert.clone(),
                        key: t.key.clone(),
                        ca: t.ca.clone(),
                    };
                    let timeout = Duration::from_secs(t.handshake_timeout_seconds);
                    Some((ClusterTls::load(&files)?, timeout))
                }
            };
            if tls.is_none() && !listen.ip().is_loopback() {
                if !spec.run.allow_plaintext {
                    return Err(JobError::Spec {
                        file: "[run] listen".into(),
                        what: format!(
                            "{listen} is not a loopback address and there is no [run.tls]: the \
                             cluster's traffic (cookie handshake, tasks, results) would cross \
                             the network in plaintext. Set up mutual TLS ([run.tls], see \
                             infra/make-certs), or, on a private network you trust, set \
                             [run] allow_plaintext = true"
                        ),
                    });
                }
                tracing::warn!(%listen, "cluster mode in plaintext on a non-loopback address ([run] allow_plaintext = true)");
            }
            Some(ClusterSettings {
                listen,
                cookie: cluster::load_cookie(None)?,
                tls,
            })
        }
    };
    let output = StoreUrl::parse(spec.output_url())?;
    let fingerprint = spec.fingerprint();

    if let Some(done) = already_complete(spec, &output).await? {
        return Ok(done);
    }
    let lock = OutputLock::acquire(&output, spec.output_lock_ttl()).await?;
    let keeper = LockKeeper::start(lock);
    // Another coordinator may have finished the job between the check and the lock.
    let result = match already_complete(spec, &output).await {
        Ok(Some(done)) => Ok(done),
        Ok(None) => run_owned(spec, output, fingerprint, cluster, keeper.lost()).await,
        Err(e) => Err(e),
    };
    keeper.release().await;
    result
}

/// The outcome when `output` is already complete: done if its completion marker is
/// this job's (same kind and fingerprint) over the same input; a conflict if the job
/// or the input differ.
async fn already_complete(spec: &JobSpec, output: &StoreUrl) -> Result<Option<RunOutcome>> {
    let record = match completion::read(output, spec.kind.completion_marker()).await? {
        Completion::Absent => return Ok(None),
        Completion::Unreadable(why) => {
            return Err(completion::another_jobs_output(
                output,
                &format!(
                    "its completion marker {} is not this release's: {why}",
                    spec.kind.completion_marker()
                ),
            )
            .into())
        }
        Completion::Complete(record) => record,
    };
    let same_kind = record.kind.is_empty() || record.kind == spec.kind.name();
    if !same_kind || record.fingerprint != spec.fingerprint() {
        return Err(completion::another_jobs_output(output, "fingerprint mismatch").into());
    }
    refuse_changed_inputs(&spec.file.inputs(), &record.inputs, "this output was made").await?;
    Ok(Some(RunOutcome::AlreadyComplete(record.summary)))
}

/// Keeps the output lock renewed in a task of its own (storage latency never stalls
/// the coordinator actor) and reports its loss.
struct LockKeeper {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
    lost: tokio::sync::watch::Receiver<Option<String>>,
}

impl LockKeeper {
    fn start(mut lock: OutputLock) -> LockKeeper {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let (lost_tx, lost) = tokio::sync::watch::channel(None);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tick.tick() => {
                        if let Err(e) = lock.renew_if_due().await {
                            let _ = lost_tx.send(Some(e.to_string()));
                            return; // not ours any more: nothing to release
                        }
                    }
                }
            }
            lock.release().await;
        });
        LockKeeper { stop, task, lost }
    }

    fn lost(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.lost.clone()
    }

    async fn release(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// The job, run while this coordinator owns the output.
async fn run_owned(
    spec: &JobSpec,
    output: StoreUrl,
    fingerprint: String,
    cluster: Option<ClusterSettings>,
    lock_lost: tokio::sync::watch::Receiver<Option<String>>,
) -> Result<RunOutcome> {
    let journal = Journal::load(&output).await?;
    let record = match journal.job {
        Some(job) if job.fingerprint != fingerprint || job.kind != spec.kind.name() => {
            return Err(JobError::Conflict(format!(
                "{} holds an unfinished run of a different job file ({} job, fingerprint {} vs \
                 {} job, {}); resume it with its own job file, or choose another [output] url",
                output.url,
                job.kind,
                job.fingerprint,
                spec.kind.name(),
                fingerprint
            )))
        }
        Some(job) => {
            refuse_changed_inputs(&spec.file.inputs(), &job.inputs, "the job was planned").await?;
            tracing::info!(
                tasks_done = journal.tasks.len(),
                "resuming from the journal"
            );
            job
        }
        None => {
            let listed = list_inputs(&spec.file.inputs()).await?;
            let inputs = listed.iter().map(|f| f.file.clone()).collect();
            let plan = spec.file.plan(&output, spec.memory_bytes(), listed).await?;
            // Entries left by a plan whose record was unreadable belong to that plan.
            output.delete_prefix("_job/journal").await?;
            let record = JobRecord {
                version: journal::JOURNAL_VERSION,
                kind: spec.kind.name().to_string(),
                fingerprint: fingerprint.clone(),
                spec: spec.file.to_json()?,
                inputs,
                plan,
            };
            output.put_json(journal::job_path(), &record).await?;
            record
        }
    };
    let replay_started = Instant::now();
    let mut driver = spec.file.open(&output, &record.plan)?;
    let progress = Progress::new(&driver.progress_plan());
    let mut accepted = HashSet::new();
    for (task, entry) in journal.tasks {
        match driver.accept(task, &entry.output) {
            Ok(p) => {
                progress.task_done(task.stage.as_str(), p);
                accepted.insert(task);
            }
            Err(e) => {
                tracing::warn!(%task, error = %e, "journal entry unusable: its task is redone")
            }
        }
    }
    let resumed = accepted.len() as u64;
    if resumed > 0 {
        tracing::info!(
            results = resumed,
            seconds = replay_started.elapsed().as_secs_f64(),
            "journal replayed"
        );
    }
    let job = JobContext {
        job_id: fingerprint.clone(),
        kind: spec.kind.name().to_string(),
        output: output.url.clone(),
        settings: driver.settings()?,
    };
    let completion = CompletionRecord {
        kind: spec.kind.name().to_string(),
        fingerprint: fingerprint.clone(),
        summary: String::new(),
        inputs: record.inputs,
    };
    let mut state = CoordinatorState {
        job,
        output: output.clone(),
        driver,
        stage: 0,
        stage_pending: HashSet::new(),
        accepted,
        timing: WorkerTiming::for_lease(spec.lease()),
        board: LeaseBoard::new(spec.lease(), spec.run.max_attempts, RetryPolicy::default()),
        lease_tokens: 0,
        phase: Phase::Running,
        done: None,
        tasks_run: 0,
        progress,
        workers: HashMap::new(),
        lock_lost,
        journaling: HashMap::new(),
        writer: OutputWriter::start(output.clone()),
        marker: spec.kind.completion_marker(),
        completion,
    };
    if let Some(summary) = state.advance().await? {
        // Crashed after the last task but before the job's final outputs.
        state.progress.finish();
        return Ok(RunOutcome::Completed {
            summary,
            tasks_run: 0,
            tasks_resumed: resumed,
        });
    }
    let local_workers: Vec<String> = match cluster {
        Some(_) => Vec::new(),
        None => (0..spec.run.workers)
            .map(|w| format!("local-worker-{w}"))
            .collect(),
    };
    for name in &local_workers {
        state.workers.insert(
            name.clone(),
            Registration {
                worker: name.clone(),
                node: String::new(),
                capacity: 1,
                memory_bytes: spec.memory_bytes(),
                version: PROTOCOL_VERSION,
            },
        );
    }
    let (tx, rx) = oneshot::channel();
    state.done = Some(tx);

    let (coordinator, coordinator_handle) = Actor::spawn(None, CoordinatorActor, state)
        .await
        .map_err(|e| JobError::Runtime(format!("cannot start the coordinator actor: {e}")))?;
    if let Some(settings) = cluster {
        let (node, result) = serve_cluster(coordinator, coordinator_handle, rx, settings).await?;
        node.stop(None);
        tracing::info!(
            bytes = probeflow_worker::engine::actor::LARGEST_MESSAGE
                .load(std::sync::atomic::Ordering::Relaxed),
            "largest message field sent"
        );
        let (tasks_run, summary) = result??;
        return Ok(RunOutcome::Completed {
            summary,
            tasks_run,
            tasks_resumed: resumed,
        });
    }
    let memory = spec.memory_bytes() as usize;
    let mut handles = Vec::new();
    let mut workers = Vec::new();
    for name in local_workers {
        let args = WorkerArgs {
            name,
            coordinator: coordinator.clone(),
            config: WorkerConfig {
                scratch: spec.run.scratch.clone(),
                memory_bytes: memory,
            },
            timing: WorkerTiming::for_lease(spec.lease()),
            done: Default::default(),
            faults: Faults::none(),
            job: Default::default(),
            kinds: probeflow_worker::jobs::KINDS,
        };
        let (worker, h) = Actor::spawn(None, WorkerActor, args)
            .await
            .map_err(|e| JobError::Runtime(format!("cannot start a worker actor: {e}")))?;
        workers.push(worker);
        handles.push(h);
    }
    let result = rx
        .await
        .map_err(|_| JobError::Runtime("the coordinator actor stopped unexpectedly".into()));
    if !matches!(result, Ok(Ok(_))) {
        // Failed: stop the workers now rather than letting running tasks finish.
        for w in &workers {
            w.stop(None);
        }
    }
    // On success every worker stops when it is told there is nothing left.
    for h in handles {
        let _ = h.await;
    }
    coordinator.stop(None);
    let _ = coordinator_handle.await;
    let (tasks_run, summary) = result??;
    Ok(RunOutcome::Completed {
        summary,
        tasks_run,
        tasks_resumed: resumed,
    })
}

/// Cluster mode: the coordinator actor serves `worker` processes that join its node.
/// After the job ends it keeps answering for a moment, so idle workers learn that the
/// job is done and exit.
type ActorResult = std::result::Result<Result<(u64, String)>, JobError>;

/// Cluster mode's settings, checked before the output is touched.
struct ClusterSettings {
    listen: std::net::SocketAddr,
    cookie: String,
    /// The loaded certificates and the handshake timeout.
    tls: Option<(ClusterTls, Duration)>,
}

async fn serve_cluster(
    coordinator: ActorRef<CoordinatorMsg>,
    coordinator_handle: tokio::task::JoinHandle<()>,
    rx: oneshot::Receiver<Result<(u64, String)>>,
    settings: ClusterSettings,
) -> Result<(ActorRef<ractor_cluster::NodeServerMessage>, ActorResult)> {
    let ClusterSettings {
        listen,
        cookie,
        tls,
    } = settings;
    let (node, listener) = cluster::start_listening_node(
        "coordinator",
        listen,
        cookie,
        tls.as_ref().map(|(t, d)| (t, *d)),
    )
    .await?;
    node.cast(ractor_cluster::NodeServerMessage::SubscribeToEvents {
        id: "probeflow-coordinator".into(),
        subscription: Box::new(cluster::NodeLossNotifier(coordinator.clone())),
    })
    .map_err(|e| JobError::Runtime(format!("cannot watch worker nodes: {e}")))?;
    ractor::pg::join(
        cluster::COORDINATOR_GROUP.to_string(),
        vec![coordinator.get_cell()],
    );
    tracing::info!(
        %listen,
        tls = tls.is_some(),
        "waiting for workers (worker --join {listen})"
    );
    let result = rx
        .await
        .map_err(|_| JobError::Runtime("the coordinator actor stopped unexpectedly".into()));
    linger_until_workers_leave(&node).await;
    drop(listener);
    coordinator.stop(None);
    let _ = coordinator_handle.await;
    Ok((node, result))
}

/// How long a finished coordinator keeps telling polling workers that the job is done.
const DONE_GRACE: Duration = Duration::from_secs(5);

/// After the job: answers "done" to the workers still connected until they have all
/// left (each exits when told), or for [`DONE_GRACE`] at most.
async fn linger_until_workers_leave(node: &ActorRef<ractor_cluster::NodeServerMessage>) {
    let deadline = Instant::now() + DONE_GRACE;
    while Instant::now() < deadline {
        let sessions = ractor::call_t!(node, ractor_cluster::NodeServerMessage::GetSessions, 1000);
        if sessions.is_ok_and(|s| s.is_empty()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
