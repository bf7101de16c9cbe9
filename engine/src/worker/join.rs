//! A worker process's life in cluster mode: join the coordinator, run tasks, rejoin.
//!
//! ```text
//! JoinConfig (validated flags) ─► node listening ─► dial the coordinator (TLS or not)
//!   ─► find its actor ─► Register (protocol, release) ─► refused: stop (exit 2)
//!                                                     └► accepted: `threads` WorkerActors pull tasks
//!   actors stop ─► the job is done: return │ the coordinator was lost: dial again, with a
//!   doubling wait, until it answers or `give_up_after` passes (or the job's output has its
//!   completion record: it finished while this worker was away)
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ractor::rpc::CallResult;
use ractor::Actor;
use tokio_rustls::rustls::pki_types::ServerName;

use crate::cluster;
use crate::error::{EngineError, Result};
use crate::fault::Faults;
use crate::job::Kinds;
use crate::messages::{CoordinatorMsg, Wire, LARGEST_MESSAGE};
use crate::monitor::worker::WorkerStats;
use crate::protocol::{Registration, PROTOCOL_VERSION, RELEASE};
use crate::settings::WorkerResources;
use crate::store::StoreUrl;
use crate::tls::{self, ClusterTls, TlsFiles};
use crate::worker::actor::{
    discard_if_not_accepted, JobOutput, Unreported, UnreportedAttempts, WorkerActor, WorkerArgs,
};

/// How long dialling the coordinator plus the TLS handshake may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connected worker waits for the coordinator to show up on the node, and
/// for an answer to its registration.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// The first and the longest wait between two tries to reach the coordinator.
const FIRST_RECONNECT_WAIT: Duration = Duration::from_millis(200);
const MAX_RECONNECT_WAIT: Duration = Duration::from_secs(5);

/// Mutual TLS for a worker: its certificates, loaded, and the name the coordinator's
/// certificate must be valid for.
pub struct WorkerTls {
    tls: ClusterTls,
    server_name: ServerName<'static>,
}

impl WorkerTls {
    /// Loads `files`; the coordinator's certificate must be valid for `server_name`, or
    /// else for the host of `join`.
    pub fn load(files: &TlsFiles, join: &str, server_name: Option<&str>) -> Result<WorkerTls> {
        Ok(WorkerTls {
            tls: ClusterTls::load(files)?,
            server_name: tls::server_name(join, server_name)?,
        })
    }
}

/// What a worker process is asked to do, checked.
pub struct JoinConfig {
    /// The coordinator's address (`host:port`).
    pub join: String,
    /// This worker's name, unique in the cluster.
    pub name: String,
    pub resources: WorkerResources,
    /// Tasks run at once (each with `config.memory_bytes`).
    pub threads: usize,
    /// Where this worker's node listens.
    pub listen: SocketAddr,
    /// Give up when the coordinator cannot be reached for this long.
    pub give_up_after: Duration,
    pub tls: Option<WorkerTls>,
    /// `PROBEFLOW_FAULT` (test builds only).
    pub faults: Faults,
    /// The read-only HTTP listener (`--http`): metrics and probes.
    pub http: Option<SocketAddr>,
}

/// Joins the coordinator of `plan` with `cookie` and runs tasks of `kinds` until the
/// job is done. Errors: [`EngineError::Refused`] when the coordinator refuses this
/// worker (no retry), [`EngineError::Runtime`] when it stays unreachable.
pub async fn join(plan: JoinConfig, cookie: String, kinds: Kinds) -> Result<()> {
    let stats = WorkerStats::new(
        plan.resources.memory_bytes as u64,
        plan.resources.scratch.clone(),
    );
    let server = match plan.http {
        None => None,
        Some(addr) => {
            let listener = crate::monitor::http::bind(addr).await?;
            let bound = listener.local_addr().unwrap_or(addr);
            tracing::info!(%bound, "serving /metrics, /livez and /readyz");
            let endpoints = Arc::new(crate::monitor::worker::endpoints(stats.clone()));
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let task = tokio::spawn(crate::monitor::http::serve(listener, endpoints, stopped));
            Some((stop, task))
        }
    };
    let joined = join_and_work(&plan, cookie, kinds, &stats).await;
    if let Some((stop, task)) = server {
        let _ = stop.send(true);
        let _ = task.await;
    }
    tracing::info!(
        bytes = LARGEST_MESSAGE.load(Ordering::Relaxed),
        "largest message field sent"
    );
    joined
}

async fn join_and_work(
    plan: &JoinConfig,
    cookie: String,
    kinds: Kinds,
    stats: &Arc<WorkerStats>,
) -> Result<()> {
    let node_name = cluster::unique_node_name(&plan.name);
    let key = crate::preauth::CookieKey::new(&cookie);
    let tls = plan.tls.as_ref().map(|t| &t.tls);
    // The worker dials out; its own socket admits only peers that authenticate in time.
    let (node, _listener) = cluster::start_listening_node(
        &node_name,
        plan.listen,
        cookie,
        tls.map(|t| (t, CONNECT_TIMEOUT)),
    )
    .await?;
    let mut backoff = FIRST_RECONNECT_WAIT;
    let mut unreachable_since = Instant::now();
    let job = Arc::new(OnceLock::new());
    // Attempts whose reports a coordinator may not have got: offered to the next one.
    let unreported: UnreportedAttempts = Arc::default();
    loop {
        // Connect (again) and wait for the coordinator actor to show up in the group.
        let connected = match &plan.tls {
            None => cluster::connect(&node, &plan.join, &key, CONNECT_TIMEOUT)
                .await
                .map_err(|e| e.to_string()),
            Some(t) => tls::connect(
                &node,
                &plan.join,
                t.tls.connector(),
                t.server_name.clone(),
                (&key, CONNECT_TIMEOUT),
            )
            .await
            .map_err(|e| e.to_string()),
        };
        let (coordinator, problem) = match connected {
            Ok(()) => (
                cluster::find_coordinator(&node, ANSWER_TIMEOUT).await,
                if plan.tls.is_some() {
                    "connected, but the coordinator never answered (a different cookie, or it \
                     refused this worker's certificate: see its log)"
                } else {
                    "connected, but the coordinator never answered (a different cookie, or it \
                     requires TLS: --tls-cert/--tls-key/--tls-ca)"
                }
                .to_string(),
            ),
            Err(e) => {
                tracing::info!(coordinator = %plan.join, error = %e, "cannot connect yet");
                (None, e)
            }
        };
        let Some(coordinator) = coordinator else {
            if job_finished(&job).await {
                tracing::info!(worker = %plan.name, "the job finished while this worker was away (its output has its completion record)");
                settle_unreported(&unreported, kinds, &plan.name).await;
                return Ok(());
            }
            if unreachable_since.elapsed() > plan.give_up_after {
                return Err(EngineError::Runtime(format!(
                    "the coordinator at {} was unreachable for {:?}; giving up (last: {problem})",
                    plan.join, plan.give_up_after
                )));
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_RECONNECT_WAIT);
            continue;
        };
        let registration = Registration {
            worker: plan.name.clone(),
            node: node_name.clone(),
            capacity: plan.threads as u32,
            memory_bytes: plan.resources.memory_bytes as u64,
            version: PROTOCOL_VERSION,
            release: RELEASE.into(),
        };
        let answer = coordinator
            .call(
                |reply| CoordinatorMsg::Register {
                    registration: Wire::new(registration),
                    reply,
                },
                Some(ANSWER_TIMEOUT),
            )
            .await;
        let timing = match answer {
            Ok(CallResult::Success(Wire(Ok(Ok(timing))))) => timing,
            Ok(CallResult::Success(Wire(Ok(Err(refusal))))) => {
                return Err(EngineError::Refused(refusal))
            }
            other => {
                tracing::info!(coordinator = %plan.join, "no answer to the registration ({other:?}); retrying");
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        tracing::info!(
            worker = %plan.name,
            coordinator = %plan.join,
            heartbeat_ms = timing.heartbeat_ms,
            "joined"
        );
        backoff = FIRST_RECONNECT_WAIT;
        stats.connected(true);
        let sent = offer_unreported(&unreported, &coordinator, &plan.name);
        let done = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::new();
        for t in 0..plan.threads {
            let name = if plan.threads == 1 {
                plan.name.clone()
            } else {
                format!("{}/{t}", plan.name)
            };
            let args = WorkerArgs {
                name,
                coordinator: coordinator.clone(),
                resources: plan.resources.clone(),
                timing,
                done: done.clone(),
                faults: plan.faults,
                job: job.clone(),
                kinds,
                unreported: unreported.clone(),
                // The first actor's first answer confirms the reports offered again.
                sent: if t == 0 { sent.clone() } else { Vec::new() },
                stats: stats.clone(),
            };
            let (_, handle) = Actor::spawn(None, WorkerActor, args)
                .await
                .map_err(|e| EngineError::Runtime(format!("cannot start a worker actor: {e}")))?;
            handles.push(handle);
        }
        for h in handles {
            let _ = h.await;
        }
        stats.connected(false);
        if done.load(Ordering::SeqCst) {
            tracing::info!(worker = %plan.name, "the job is done");
            settle_unreported(&unreported, kinds, &plan.name).await;
            return Ok(());
        }
        tracing::warn!(worker = %plan.name, "lost the coordinator; reconnecting");
        unreachable_since = Instant::now();
    }
}

/// Sends the reports of the process's unreported attempts to `coordinator`, which adopts
/// those whose tasks it has not accepted: the reports sent (kept in no list until
/// their fate is known: the first worker actor's first answer confirms them).
fn offer_unreported(
    unreported: &UnreportedAttempts,
    coordinator: &ractor::ActorRef<CoordinatorMsg>,
    worker: &str,
) -> Vec<Unreported> {
    let Ok(mut kept) = unreported.lock() else {
        return Vec::new();
    };
    let mut sent = Vec::new();
    for u in std::mem::take(&mut *kept) {
        let a = &u.assignment;
        let msg = CoordinatorMsg::finished(worker, a, Ok(u.output.clone()));
        if coordinator.cast(msg).is_ok() {
            tracing::info!(worker, task = %a.task.id(), attempt = a.attempt, "offered an attempt a previous coordinator did not take to this one");
            sent.push(u);
        } else {
            kept.push(u);
        }
    }
    sent
}

/// The job is done: the attempts no coordinator took have their files removed (unless
/// the journal names them).
async fn settle_unreported(unreported: &UnreportedAttempts, kinds: Kinds, worker: &str) {
    let left = match unreported.lock() {
        Ok(mut kept) => std::mem::take(&mut *kept),
        Err(_) => return,
    };
    for u in left {
        discard_if_not_accepted(kinds, &u.assignment, worker).await;
    }
}

/// Whether the output of the job this worker worked for is complete: its completion
/// marker (written last, when no task is left), if the output has it, so a worker that
/// lost the coordinator at the end of the job can tell "done" from "coordinator down".
/// False when unknown (no task seen yet, or the store cannot be read).
async fn job_finished(job: &OnceLock<JobOutput>) -> bool {
    let Some(job) = job.get() else {
        return false;
    };
    let Ok(output) = StoreUrl::parse(&job.output) else {
        return false;
    };
    match crate::completion::exists(&output).await {
        Ok(found) => found,
        Err(e) => {
            tracing::debug!(output = %job.output, error = %e, "cannot check the job's output");
            false
        }
    }
}
