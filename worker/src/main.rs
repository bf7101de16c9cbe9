//! `worker --join host:port`: joins a job of any kind running in cluster mode.
//!
//! Flags → validated `JoinConfig` → `probeflow_engine::worker::join` (node, cookie
//! from the environment, connect to the coordinator's node, retrying with backoff also
//! after the coordinator restarts, `--threads` worker actors pulling tasks until the
//! coordinator says the job is done) with the kinds of `probeflow_jobs::KINDS`.
//!
//! With `--tls-cert/--tls-key/--tls-ca` the connection is mutual TLS (the coordinator's
//! job file then has `[run.tls]`).
//!
//! Exit codes: 0 the job is done; 1 runtime failure (e.g. the coordinator never came
//! back); 2 bad flags, no usable cookie or certificates, or refused by the coordinator
//! (a worker of that name is already connected, or another release): the engine's
//! `EngineError::exit_code`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use probeflow_engine::fault::Faults;
use probeflow_engine::settings::{
    default_worker_scratch, WorkerResources, DEFAULT_MEMORY_PER_WORKER,
};
use probeflow_engine::tls::TlsFiles;
use probeflow_engine::units::parse_bytes;
use probeflow_engine::worker::{JoinConfig, WorkerTls};

/// Joins a probeflow job of any kind (probe_rows, ngram_overlap, word_count) whose
/// coordinator runs with `[run] mode = "cluster"`, and runs its tasks.
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
    #[arg(long, default_value_os_t = default_worker_scratch())]
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
    /// Serve /metrics, /livez and /readyz (ready once joined) on this address (ip:port,
    /// or a port alone for 127.0.0.1).
    #[arg(long, value_name = "ADDR", value_parser = probeflow_engine::settings::parse_http_addr)]
    http: Option<SocketAddr>,
}

/// The flags, checked: what `worker` is asked to do.
fn plan(args: Args) -> anyhow::Result<JoinConfig> {
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
            Some(WorkerTls::load(
                &files,
                &args.join,
                args.tls_server_name.as_deref(),
            )?)
        }
        _ => None,
    };
    let name = args
        .name
        .unwrap_or_else(|| format!("{host}-{}", std::process::id()));
    if name.is_empty() || name.contains('/') {
        bail!("--name {name:?}: must be non-empty and without '/'");
    }
    Ok(JoinConfig {
        join: args.join,
        resources: WorkerResources {
            scratch: args.scratch,
            memory_bytes: memory as usize,
        },
        name,
        threads: args.threads,
        listen: args.listen,
        give_up_after: Duration::from_secs(args.give_up_after),
        tls,
        faults: Faults::from_env()?,
        http: args.http,
    })
}

fn main() -> ExitCode {
    probeflow_engine::monitor::process::start_time();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,ractor_cluster=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    let cookie = match probeflow_engine::worker::load_cookie(args.cookie_file.as_deref()) {
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
    probeflow_engine::allocator::tune(plan.threads, plan.resources.memory_bytes as u64);
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
    match runtime.block_on(probeflow_engine::worker::join(
        plan,
        cookie,
        probeflow_jobs::KINDS,
    )) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("worker: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
