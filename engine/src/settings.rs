//! What a job run and a worker are configured with, and every default, defined once:
//! the job file's `[run]` ([`RunConfig`], read by [`crate::coordinator::JobSpec`]) and a
//! worker's resources ([`WorkerResources`], from `[run]` in local mode or the `worker`
//! binary's flags).
//!
//! ```text
//! [run] as written (RawRun, every key optional) ─► RunConfig::from_raw: defaults filled, values checked
//! worker --memory --scratch ─► WorkerResources (the same defaults)
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::units::{format_bytes, parse_bytes};

/// A worker's memory when nothing says otherwise (`[run] memory_per_worker`, the
/// `worker` binary's `--memory`).
pub const DEFAULT_MEMORY_PER_WORKER: &str = "2GiB";

/// The most attempts `[run] max_attempts` may allow a task (each coordinator that runs
/// a job numbers its attempts in a range of its own this wide).
pub const MAX_ATTEMPTS: u32 = 1000;

/// Local mode's scratch root when `[run] scratch` does not say.
pub fn default_scratch() -> PathBuf {
    std::env::temp_dir().join("probeflow")
}

/// A `worker` process's scratch root when `--scratch` does not say.
pub fn default_worker_scratch() -> PathBuf {
    std::env::temp_dir().join("probeflow-worker")
}

/// A worker's resources.
#[derive(Debug, Clone)]
pub struct WorkerResources {
    /// Local scratch root (each job run gets its own directory under it).
    pub scratch: PathBuf,
    /// Memory per task (sorts spill beyond it).
    pub memory_bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Local,
    Cluster,
}

/// `[run]` as written: every key optional. [`RunConfig::from_raw`] fills the defaults
/// and checks the values.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRun {
    mode: Option<Mode>,
    workers: Option<usize>,
    memory_per_worker: Option<String>,
    scratch: Option<PathBuf>,
    max_attempts: Option<u32>,
    lease_seconds: Option<u64>,
    output_lock_seconds: Option<u64>,
    listen: Option<String>,
    tls: Option<RawTls>,
    allow_plaintext: Option<bool>,
    http: Option<String>,
    http_linger_seconds: Option<u64>,
    /// Moved to `[input] rows_per_map_task` (a setting of the probe_rows kind): here
    /// only to say so.
    rows_per_map_task: Option<toml::Value>,
}

/// `[run.tls]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    handshake_timeout_seconds: Option<u64>,
}

/// `[run]`, validated: how the engine runs a job.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// Local (worker actors in-process) or cluster (`worker --join` processes).
    pub mode: Mode,
    /// Local mode: the worker actors.
    pub workers: usize,
    /// Local mode: each worker's sort memory (bytes); also sizes planning.
    pub memory_per_worker: u64,
    /// Local spill and staging space (each job run gets its own directory in it).
    pub scratch: PathBuf,
    /// Attempts per task before the job fails.
    pub max_attempts: u32,
    /// A task's lease; heartbeats renew it every quarter.
    pub lease: Duration,
    /// The output lock lapses this long after its owner's last renewal (renewed every
    /// third of it); a dead coordinator's lock on another host is taken over after it.
    pub output_lock: Duration,
    /// Cluster mode: the address the coordinator listens on for workers.
    pub listen: SocketAddr,
    /// Cluster mode: mutual TLS between the coordinator and the workers.
    pub tls: Option<TlsConfig>,
    /// Cluster mode without TLS on a non-loopback `listen`: refused unless set (for
    /// private networks only: the traffic is plaintext).
    pub allow_plaintext: bool,
    /// The coordinator's read-only HTTP listener (metrics, probes, status page); none
    /// by default.
    pub http: Option<SocketAddr>,
    /// How long the listener keeps serving after the job ends (the last scrape sees
    /// how it ended).
    pub http_linger: Duration,
}

/// `[run] http_linger_seconds`' default: a minute, Prometheus' default scrape interval.
pub const DEFAULT_HTTP_LINGER: Duration = Duration::from_secs(60);

/// An HTTP listener's address: `ip:port`, or a port alone for loopback
/// (`127.0.0.1:port`): nothing listens beyond this host unless the operator says so.
pub fn parse_http_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse()
        .map_err(|e| format!("{text:?}: expected ip:port or a port ({e})"))
}

/// `[run.tls]`: the coordinator's certificate and key, and the CA that signs every
/// node's certificate (PEM files; relative paths are relative to the current directory).
#[derive(Debug, Clone, PartialEq)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    /// A connection that has not finished its TLS handshake by then is closed.
    pub handshake_timeout: Duration,
}

/// `[run.tls] handshake_timeout_seconds`' default.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for RunConfig {
    /// Every `[run]` default (docs/job.md's table states the same; a test checks).
    fn default() -> Self {
        RunConfig {
            mode: Mode::Local,
            workers: 2,
            memory_per_worker: parse_bytes(DEFAULT_MEMORY_PER_WORKER).unwrap_or(2 << 30),
            scratch: default_scratch(),
            max_attempts: 3,
            lease: Duration::from_secs(60),
            output_lock: Duration::from_secs(60),
            listen: SocketAddr::from(([0, 0, 0, 0], 7077)),
            tls: None,
            allow_plaintext: false,
            http: None,
            http_linger: DEFAULT_HTTP_LINGER,
        }
    }
}

impl RunConfig {
    /// The smallest `memory_per_worker`.
    pub const MIN_MEMORY: u64 = 64 << 20;
    /// The shortest output lock (renewed every third of it).
    pub const MIN_OUTPUT_LOCK: Duration = Duration::from_secs(3);

    /// `[run]` as written, with the defaults filled in and every value checked.
    pub(crate) fn from_raw(raw: RawRun) -> Result<RunConfig, String> {
        let d = RunConfig::default();
        if raw.rows_per_map_task.is_some() {
            return Err(
                "[run] rows_per_map_task is now [input] rows_per_map_task (a setting \
                        of the probe_rows kind, not of the engine): move it there"
                    .into(),
            );
        }
        let at_least_one = |key: &str, v: Option<u64>, default: u64| match v {
            Some(0) => Err(format!("[run] {key} must be at least 1")),
            v => Ok(v.unwrap_or(default)),
        };
        let memory_per_worker = match raw.memory_per_worker {
            None => d.memory_per_worker,
            Some(text) => match parse_bytes(&text) {
                Some(b) if b >= Self::MIN_MEMORY => b,
                Some(_) => {
                    return Err(format!(
                        "[run] memory_per_worker must be at least {}",
                        format_bytes(Self::MIN_MEMORY)
                    ))
                }
                None => {
                    return Err(format!(
                        "[run] memory_per_worker {text:?} is not a size like \"2GiB\""
                    ))
                }
            },
        };
        let output_lock = match raw.output_lock_seconds {
            None => d.output_lock,
            Some(s) if Duration::from_secs(s) >= Self::MIN_OUTPUT_LOCK => Duration::from_secs(s),
            Some(_) => {
                return Err(format!(
                    "[run] output_lock_seconds must be at least {}",
                    Self::MIN_OUTPUT_LOCK.as_secs()
                ))
            }
        };
        let listen = match raw.listen {
            None => d.listen,
            Some(text) => text
                .parse()
                .map_err(|e| format!("[run] listen {text:?}: expected ip:port ({e})"))?,
        };
        let tls = match raw.tls {
            None => None,
            Some(t) => Some(TlsConfig {
                cert: t.cert,
                key: t.key,
                ca: t.ca,
                handshake_timeout: match t.handshake_timeout_seconds {
                    None => DEFAULT_HANDSHAKE_TIMEOUT,
                    Some(0) => {
                        return Err("[run.tls] handshake_timeout_seconds must be at least 1".into())
                    }
                    Some(s) => Duration::from_secs(s),
                },
            }),
        };
        Ok(RunConfig {
            mode: raw.mode.unwrap_or(d.mode),
            workers: at_least_one("workers", raw.workers.map(|w| w as u64), d.workers as u64)?
                as usize,
            memory_per_worker,
            scratch: raw.scratch.unwrap_or(d.scratch),
            max_attempts: match raw.max_attempts {
                Some(n) if n > MAX_ATTEMPTS => {
                    return Err(format!("[run] max_attempts must be at most {MAX_ATTEMPTS}"))
                }
                n => at_least_one("max_attempts", n.map(u64::from), u64::from(d.max_attempts))?
                    as u32,
            },
            lease: Duration::from_secs(at_least_one(
                "lease_seconds",
                raw.lease_seconds,
                d.lease.as_secs(),
            )?),
            output_lock,
            listen,
            tls,
            allow_plaintext: raw.allow_plaintext.unwrap_or(d.allow_plaintext),
            http: match raw.http {
                None => None,
                Some(text) => Some(parse_http_addr(&text).map_err(|e| format!("[run] http {e}"))?),
            },
            http_linger: raw
                .http_linger_seconds
                .map_or(d.http_linger, Duration::from_secs),
        })
    }
}
