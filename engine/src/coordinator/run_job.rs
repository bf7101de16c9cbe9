//! Running a job, whatever its kind: the output lock, then the job opened
//! ([`crate::coordinator::open`]) and run by the coordinator actor
//! ([`crate::coordinator::actor`]) with worker actors in-process (local mode)
//! or with worker processes that join over the network (cluster mode).
//!
//! ```text
//! run_job ─ cluster settings checked ─ already complete? ─ output lock ─ open_job ─► CoordinatorActor
//!                                         └ yes, a lock left: its clean-up finished under the lock
//!    local: WorkerActor × [run] workers in this process │ cluster: `worker --join` processes (TLS)
//! ```
//!
//! A task is leased to one worker with a deadline; heartbeats extend it; an expired
//! lease puts the task back in the queue ([`crate::coordinator::leases`]). Results are fenced
//! by `(task, attempt, lease token)`: only the attempt that holds the lease is accepted,
//! so a late duplicate changes nothing ([`crate::coordinator::run`]).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::cluster;
use crate::fault::Faults;
use crate::job::Kinds;
use crate::messages::CoordinatorMsg;
use crate::protocol::{Registration, WorkerTiming, PROTOCOL_VERSION};
use crate::settings::WorkerResources;
use crate::store::StoreUrl;
use crate::tls::{ClusterTls, TlsFiles};
use crate::worker::actor::{WorkerActor, WorkerArgs};
use ractor::{Actor, ActorRef};
use tokio::sync::oneshot;

use crate::coordinator::actor::{CoordinatorActor, CoordinatorState};
use crate::coordinator::effects::EffectHandler;
use crate::coordinator::open::{already_complete, open_job, OpenedJob};
use crate::coordinator::output_lock::{OutputLock, LOCK_PATH};
use crate::coordinator::output_writer::OutputWriter;
use crate::coordinator::progress::Progress;
use crate::coordinator::spec::JobSpec;
use crate::coordinator::watch::Watch;
use crate::error::{EngineError, Result};
use crate::journal::Journal;
use crate::monitor::event_log::EventLogWriter;
use crate::monitor::{JobState, Monitor, Observation};
use crate::settings::Mode;

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

/// Plans (or resumes) and runs a job: with in-process worker actors (local mode), or
/// with `worker` processes that join over the network (cluster mode). `kinds`: the
/// kinds local mode's workers run (the job's own kind is `spec.kind`).
pub async fn run_job(spec: &JobSpec, kinds: Kinds) -> Result<RunOutcome> {
    // Check the cluster settings before touching the output.
    let cluster = match spec.run.mode {
        Mode::Local => {
            if spec.run.tls.is_some() {
                tracing::warn!("[run.tls] is ignored in local mode");
            }
            None
        }
        Mode::Cluster => {
            let listen = spec.run.listen;
            let tls = match &spec.run.tls {
                None => None,
                Some(t) => {
                    let files = TlsFiles {
                        cert: t.cert.clone(),
                        key: t.key.clone(),
                        ca: t.ca.clone(),
                    };
                    Some((ClusterTls::load(&files)?, t.handshake_timeout))
                }
            };
            if tls.is_none() && !listen.ip().is_loopback() {
                if !spec.run.allow_plaintext {
                    return Err(EngineError::Spec {
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
    // Bound before the output is touched: served (not ready) while the lock is awaited.
    let watch = Watch::start(spec).await?;
    let result = run_watched(spec, kinds, output, cluster, &watch).await;
    observe_end(&watch.monitor, &result);
    watch.stop().await;
    result
}

/// Tells `monitor` how the run ended, unless the run itself said so (it says when it
/// stopped, failed or succeeded; not when it failed before or after its actor ran).
fn observe_end(monitor: &Monitor, result: &Result<RunOutcome>) {
    if monitor.lock().state.is_over() {
        return;
    }
    let (state, error) = match result {
        Ok(_) => (JobState::Succeeded, None),
        Err(e) => (JobState::Failed, Some(e.to_string())),
    };
    monitor.observe(Observation::State { state, error });
}

/// [`run_job`] once its settings are checked and its monitor started.
async fn run_watched(
    spec: &JobSpec,
    kinds: Kinds,
    output: StoreUrl,
    cluster: Option<ClusterSettings>,
    watch: &Watch,
) -> Result<RunOutcome> {
    if let Some(summary) = already_complete(spec, &output).await? {
        finish_interrupted_clean_up(spec, &output).await?;
        return Ok(RunOutcome::AlreadyComplete(summary));
    }
    let lock = OutputLock::acquire(&output, spec.run.output_lock).await?;
    watch.ready.output_lock.store(true, Ordering::Relaxed);
    let keeper = LockKeeper::start(lock);
    // Another coordinator may have finished the job between the check and the lock.
    let result = match already_complete(spec, &output).await {
        Ok(Some(summary)) => Ok(RunOutcome::AlreadyComplete(summary)),
        Ok(None) => run_owned(spec, kinds, output, cluster, keeper.lost(), watch).await,
        Err(e) => Err(e),
    };
    keeper.release().await;
    watch.ready.output_lock.store(false, Ordering::Relaxed);
    result
}

/// A complete output whose lock is still there: the coordinator that finished it may
/// have stopped between the completion marker and the end of its clean-up (the kind's
/// work files, then the lock). Once its lock can be taken (its owner is gone), the
/// clean-up is done again (it removes only what is left) and the lock released. A live
/// owner is finishing it itself: nothing is done.
async fn finish_interrupted_clean_up(spec: &JobSpec, output: &StoreUrl) -> Result<()> {
    if !output.exists(&output.child(LOCK_PATH)).await? {
        return Ok(());
    }
    let lock = match OutputLock::acquire(output, spec.run.output_lock).await {
        Ok(lock) => lock,
        Err(EngineError::Conflict(why)) => {
            tracing::info!(%why, "the output is complete; its owner is still cleaning up");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let keeper = LockKeeper::start(lock);
    let cleaned = async {
        // Only a journaled job is replayed: with no journal there is nothing known to
        // clean, and opening would plan a new job on a complete output.
        if Journal::load(output).await?.job.is_none() {
            return Ok(false);
        }
        let mut opened = open_job(spec, output).await?;
        opened.run.driver().clean_up(output).await?;
        crate::conditional_writes::remove_abandoned(output).await?;
        Ok::<_, EngineError>(true)
    }
    .await;
    keeper.release().await;
    if cleaned? {
        tracing::warn!(output = %output.url, "finished the clean-up of a run stopped after its completion marker");
    } else {
        tracing::warn!(output = %output.url, "released the lock left on a complete output with no journal");
    }
    Ok(())
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
                            // Said here too: a run that has already ended reads no more.
                            tracing::warn!(error = %e, "the output lock is lost; it is not released by this coordinator");
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

/// The job, run while this coordinator owns the output: opened, then run with what it
/// observes kept in the event log (written until the run has ended, under the lock).
async fn run_owned(
    spec: &JobSpec,
    kinds: Kinds,
    output: StoreUrl,
    cluster: Option<ClusterSettings>,
    lock_lost: tokio::sync::watch::Receiver<Option<String>>,
    watch: &Watch,
) -> Result<RunOutcome> {
    let opened = open_job(spec, &output).await?;
    let epoch = opened.epoch;
    watch.monitor.recorder().start(epoch);
    let event_log = EventLogWriter::start(output.clone(), watch.monitor.recorder().clone());
    watch.monitor.observe(Observation::Epoch { epoch });
    let result = run_opened(spec, kinds, output, opened, cluster, lock_lost, watch).await;
    observe_end(&watch.monitor, &result);
    event_log.finish().await;
    result
}

/// [`run_owned`] once the job is opened.
async fn run_opened(
    spec: &JobSpec,
    kinds: Kinds,
    output: StoreUrl,
    opened: OpenedJob,
    cluster: Option<ClusterSettings>,
    lock_lost: tokio::sync::watch::Receiver<Option<String>>,
    watch: &Watch,
) -> Result<RunOutcome> {
    let OpenedJob {
        mut run,
        totals,
        stages,
        replayed,
        completion,
        epoch: _,
    } = opened;
    watch.ready.journal.store(true, Ordering::Relaxed);
    watch.monitor.observe(Observation::State {
        state: JobState::Running,
        error: None,
    });
    let progress = Progress::new(&totals, &stages);
    for (task, p) in &replayed {
        progress.task_done(task.stage.as_str(), p);
    }
    let resumed = replayed.len() as u64;
    let local_workers: Vec<String> = match cluster {
        Some(_) => Vec::new(),
        None => (0..spec.run.workers)
            .map(|w| format!("local-worker-{w}"))
            .collect(),
    };
    for name in &local_workers {
        run.register(Registration {
            worker: name.clone(),
            node: String::new(),
            capacity: 1,
            memory_bytes: spec.run.memory_per_worker,
            version: PROTOCOL_VERSION,
            release: crate::protocol::RELEASE.into(),
        })
        .map_err(EngineError::Runtime)?;
    }
    let (tx, mut rx) = oneshot::channel();
    let state = CoordinatorState {
        run,
        effects: EffectHandler {
            output: output.clone(),
            progress,
            writer: OutputWriter::start(output.clone()),
            lock_lost,
            final_dirs: spec.kind.final_dirs(),
            completion,
            monitor: watch.monitor.clone(),
        },
        done: Some(tx),
        tokens: 0,
    };

    let (coordinator, coordinator_handle) = Actor::spawn(None, CoordinatorActor, state)
        .await
        .map_err(|e| EngineError::Runtime(format!("cannot start the coordinator actor: {e}")))?;
    // A resume with no task left (a crash after the last result, before the final
    // outputs) ended while the actor started: no worker, no listener.
    if let Ok(ended) = rx.try_recv() {
        coordinator.stop(None);
        let _ = coordinator_handle.await;
        let (tasks_run, summary) = ended?;
        return Ok(RunOutcome::Completed {
            summary,
            tasks_run,
            tasks_resumed: resumed,
        });
    }
    if let Some(settings) = cluster {
        let (node, result) =
            serve_cluster(coordinator, coordinator_handle, rx, settings, watch).await?;
        node.stop(None);
        tracing::info!(
            bytes = crate::messages::LARGEST_MESSAGE.load(Ordering::Relaxed),
            "largest message field sent"
        );
        let (tasks_run, summary) = result??;
        return Ok(RunOutcome::Completed {
            summary,
            tasks_run,
            tasks_resumed: resumed,
        });
    }
    // In-process workers need no port.
    watch.ready.workers_port.store(true, Ordering::Relaxed);
    let memory = spec.run.memory_per_worker as usize;
    let mut handles = Vec::new();
    let mut workers = Vec::new();
    for name in local_workers {
        let args = WorkerArgs {
            name,
            coordinator: coordinator.clone(),
            resources: WorkerResources {
                scratch: spec.run.scratch.clone(),
                memory_bytes: memory,
            },
            timing: WorkerTiming::for_lease(spec.run.lease),
            done: Default::default(),
            faults: Faults::none(),
            job: Default::default(),
            kinds,
            unreported: Default::default(),
            sent: Vec::new(),
            stats: Default::default(),
        };
        let (worker, h) = Actor::spawn(None, WorkerActor, args)
            .await
            .map_err(|e| EngineError::Runtime(format!("cannot start a worker actor: {e}")))?;
        workers.push(worker);
        handles.push(h);
    }
    let result = rx
        .await
        .map_err(|_| EngineError::Runtime("the coordinator actor stopped unexpectedly".into()));
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
type ActorResult = std::result::Result<Result<(u64, String)>, EngineError>;

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
    watch: &Watch,
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
    watch.ready.workers_port.store(true, Ordering::Relaxed);
    node.cast(ractor_cluster::NodeServerMessage::SubscribeToEvents {
        id: "probeflow-coordinator".into(),
        subscription: Box::new(cluster::NodeLossNotifier(coordinator.clone())),
    })
    .map_err(|e| EngineError::Runtime(format!("cannot watch worker nodes: {e}")))?;
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
        .map_err(|_| EngineError::Runtime("the coordinator actor stopped unexpectedly".into()));
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
