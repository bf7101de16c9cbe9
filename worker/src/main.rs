//! `worker --join host:port`: joins a preprocessing job running in cluster mode.
//!
//! Flags → validated plan → node (cookie from the environment) → connect to the
//! coordinator's node (retrying with backoff, also after the coordinator restarts) →
//! `--threads` worker actors pull tasks until the coordinator says the job is done.
//!
//! With `--tls-cert/--tls-key/--tls-ca` the connection is mutual TLS (the coordinator's
//! job file then has `[run.tls]`).
//!
//! Exit codes: 0 the job is done; 1 runtime failure (e.g. the coordinator never came
//! back); 2 bad flags, no usable cookie or certificates, or refused by the coordinator
//! (a worker of that name is already connected, or another protocol version).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use probeflow_worker::engine::actor::{CoordinatorMsg, JobOutput, Wire, WorkerActor, WorkerArgs};
use probeflow_worker::engine::cluster;
use probeflow_worker::engine::fault::Faults;
use probeflow_worker::engine::kind::{WorkerConfig, DEFAULT_MEMORY_PER_WORKER};
use probeflow_worker::engine::protocol::{Registration, PROTOCOL_VERSION, RELEASE};
use probeflow_worker::engine::store::StoreUrl;
use probeflow_worker::engine::tls::{self, ClusterTls, TlsFiles};
use probeflow_worker::engine::units::parse_bytes;
use ractor::rpc::CallResult;
use ractor::Actor;
use tokio_rustls::rustls::pki_types::ServerName;

/// Joins a probeflow preprocessing job (coordinator started with `[run] mode = "cluster"`).
///
/// The shared cookie comes from PROBEFLOW_COOKIE_FILE / PROBEFLOW_COOKIE (or
/// --cookie-file), never from the command line.
#[derive(Parser, Debug)]
#[command(name = "worker", version)]
struct Args {
    /// The coordinator's address (its `[run] listen`), e.g. `10.0.0.5:7077`.
    #[arg(long, value_name = "HOST:PORT")]
    join: String,
    /// Local directory for sort spills and shards before upload.
    #[arg(long, default_value_os_t = std::env::temp_dir().join("probeflow-worker"))]
    scratch: PathBuf,
    /// Memory for one task's sort before it spills (e.g. `2GiB`).
    #[arg(long, default_value = DEFAULT_MEMORY_PER_WORKER)]
    memory: String,
    /// Tasks run at once (each gets `--memory`).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// This worker's name (unique in the cluster); default `<host>-<pid>`.
    #[arg(long)]
    name: Option<String>,
    /// A file holding the cookie (instead of PROBEFLOW_COOKIE_FILE / PROBEFLOW_COOKIE).
    #[arg(long, value_name = "PATH")]
    cookie_file: Option<PathBuf>,
    /// Address this worker's node listens on (port 0: any).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Give up when the coordinator cannot be reached for this long (seconds).
    #[arg(long, default_value_t = 300)]
    give_up_after: u64,
    /// Mutual TLS: this worker's certificate (PEM; needs --tls-key and --tls-ca). Use it
    /// when the coordinator's job file has a `[run.tls]` table.
    #[arg(long, value_name = "PATH", requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<PathBuf>,
    /// Mutual TLS: the private key of --tls-cert (PEM).
    #[arg(long, value_name = "PATH", requires_all = ["tls_cert", "tls_ca"])]
    tls_key: Option<PathBuf>,
    /// Mutual TLS: the CA certificate that signed the coordinator's and the workers'
    /// certificates (PEM).
    #[arg(long, value_name = "PATH", requires_all = ["tls_cert", "tls_key"])]
    tls_ca: Option<PathBuf>,
    /// Mutual TLS: the name the coordinator's certificate must be valid for (default:
    /// the host of --join).
    #[arg(long, value_name = "NAME", requires = "tls_ca")]
    tls_server_name: Option<String>,
}

/// How long dialling the coordinator plus the TLS handshake may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connected worker waits for the coordinator to show up on the node, and
/// for an answer to its registration.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest wait between two tries to reach the coordinator.
const MAX_RECONNECT_WAIT: Duration = Duration::from_secs(5);

/// Mutual TLS settings, loaded.
struct TlsPlan {
    tls: ClusterTls,
    server_name: ServerName<'static>,
}

/// What the flags ask for, checked.
struct Plan {
    join: String,
    name: String,
    config: WorkerConfig,
    threads: usize,
    listen: SocketAddr,
    give_up_after: Duration,
    tls: Option<TlsPlan>,
    /// `PROBEFLOW_FAULT` (test builds only).
    faults: Faults,
}

fn plan(args: Args) -> anyhow::Result<Plan> {
    let memory = parse_bytes(&args.memory)
        .with_context(|| format!("--memory {:?}: expected a size such as 2GiB", args.memory))?;
    if args.threads == 0 {
        bail!("--threads must be at least 1");
    }
    if !args.join.contains(':') {
        bail!("--join {:?}: expected host:port", args.join);
    }
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into());
    let tls = match (&args.tls_cert, &args.tls_key, &args.tls_ca) {
        (Some(cert), Some(key), Some(ca)) => {
            let files = TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
            };
            Some(TlsPlan {
                tls: ClusterTls::load(&files)?,
                server_name: tls::server_name(&args.join, args.tls_server_name.as_deref())?,
            })
        }
        _ => None,
    };
    let name = args
        .name
        .unwrap_or_else(|| format!("{host}-{}", std::process::id()));
    if name.is_empty() || name.contains('/') {
        bail!("--name {name:?}: must be non-empty and without '/'");
    }
    Ok(Plan {
        join: args.join,
        config: WorkerConfig {
            scratch: args.scratch,
            memory_bytes: memory as usize,
        },
        name,
        threads: args.threads,
        listen: args.listen,
        give_up_after: Duration::from_secs(args.give_up_after),
        tls,
        faults: Faults::from_env()?,
    })
}

/// The coordinator refused this worker (duplicate name, other version): no retry.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the coordinator refused this worker: {}", self.0)
    }
}

impl std::error::Error for Refused {}

async fn run(plan: Plan, cookie: String) -> anyhow::Result<()> {
    let node_name = cluster::unique_node_name(&plan.name);
    let tls = plan.tls.as_ref().map(|t| &t.tls);
    // The worker dials out; its own socket admits only peers that authenticate in time.
    let (node, _listener) = cluster::start_listening_node(
        &node_name,
        plan.listen,
        cookie,
        tls.map(|t| (t, CONNECT_TIMEOUT)),
    )
    .await?;
    let mut backoff = Duration::from_millis(200);
    let mut unreachable_since = Instant::now();
    let job = Arc::new(std::sync::OnceLock::new());
    loop {
        // Connect (again) and wait for the coordinator actor to show up in the group.
        let connected = match &plan.tls {
            None => ractor_cluster::client_connect(&node, plan.join.as_str())
                .await
                .map_err(|e| e.to_string()),
            Some(t) => tls::connect(
                &node,
                &plan.join,
                t.tls.connector(),
                t.server_name.clone(),
                CONNECT_TIMEOUT,
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
                return Ok(());
            }
            if unreachable_since.elapsed() > plan.give_up_after {
                bail!(
                    "the coordinator at {} was unreachable for {:?}; giving up (last: {problem})",
                    plan.join,
                    plan.give_up_after
                );
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_RECONNECT_WAIT);
            continue;
        };
        let registration = Registration {
            worker: plan.name.clone(),
            node: node_name.clone(),
            capacity: plan.threads as u32,
            memory_bytes: plan.config.memory_bytes as u64,
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
            Ok(CallResult::Success(Wire(Ok(Err(refusal))))) => return Err(Refused(refusal).into()),
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
        backoff = Duration::from_millis(200);
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
                config: WorkerConfig {
                    scratch: plan.config.scratch.clone(),
                    memory_bytes: plan.config.memory_bytes,
                },
                timing,
                done: done.clone(),
                faults: plan.faults,
                job: job.clone(),
                kinds: probeflow_worker::jobs::KINDS,
            };
            let (_, handle) = Actor::spawn(None, WorkerActor, args)
                .await
                .context("cannot start a worker actor")?;
            handles.push(handle);
        }
        for h in handles {
            let _ = h.await;
        }
        if done.load(Ordering::SeqCst) {
            tracing::info!(worker = %plan.name, "the job is done");
            return Ok(());
        }
        tracing::warn!(worker = %plan.name, "lost the coordinator; reconnecting");
        unreachable_since = Instant::now();
    }
}

/// Whether the output of the job this worker worked for is complete: its completion
/// marker (written last, when no task is left), if the output has it, so a worker that
/// lost the coordinator at the end of the job can tell "done" from "coordinator down".
/// False when unknown (no task seen yet, or the store cannot be read).
async fn job_finished(job: &std::sync::OnceLock<JobOutput>) -> bool {
    let Some(job) = job.get() else {
        return false;
    };
    let Ok(output) = StoreUrl::parse(&job.output) else {
        return false;
    };
    match probeflow_worker::engine::completion::exists(&output).await {
        Ok(found) => found,
        Err(e) => {
            tracing::debug!(output = %job.output, error = %e, "cannot check the job's output");
            false
        }
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,ractor_cluster=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    let cookie = match cluster::load_cookie(args.cookie_file.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("worker: {e}");
            return ExitCode::from(2);
        }
    };
    let plan = match plan(args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("worker: {e:#}");
            return ExitCode::from(2);
        }
    };
    probeflow_worker::engine::allocator::tune(plan.threads, plan.config.memory_bytes as u64);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("worker: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let ran = runtime.block_on(run(plan, cookie));
    tracing::info!(
        bytes = probeflow_worker::engine::actor::LARGEST_MESSAGE.load(Ordering::Relaxed),
        "largest message field sent"
    );
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("worker: {e:#}");
            if e.downcast_ref::<Refused>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
