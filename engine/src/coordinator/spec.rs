//! The job file (TOML): `kind` (which job, default `probe_rows`), the kind's own
//! sections (read by the kind) and `[run]` (how the
//! engine runs it), turned once into a validated [`JobSpec`].
//!
//! ```text
//! text ─► EngineKeys { kind, [run] as written (RawRun) } ─► RunPlan (typed, defaults filled, checked)
//!      └► the kind's sections (the kind's type) ─► Box<dyn JobFile>
//! ```
//!
//! Unknown keys are errors (with line and column). Relative local paths are relative
//! to the current directory. Every `[run]` default is [`RunPlan::default`]'s, defined
//! once; the *fingerprint* is the kind's: everything that determines the output bytes,
//! not how the job runs (`[run]`), so a job can resume with a different number of
//! workers.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::job::{JobFile, JobKind, Kinds};
use crate::kind::DEFAULT_MEMORY_PER_WORKER;
use crate::units::{format_bytes, parse_bytes};
use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};

/// The keys of a job file the engine reads (the kind's sections are ignored here).
#[derive(Deserialize)]
struct EngineKeys {
    kind: Option<toml::Value>,
    #[serde(default)]
    run: RawRun,
}

/// A validated job file.
#[derive(Debug)]
pub struct JobSpec {
    /// The job kind.
    pub kind: &'static dyn JobKind,
    /// The kind's sections, validated.
    pub file: Box<dyn JobFile>,
    /// How the engine runs it.
    pub run: RunPlan,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Local,
    Cluster,
}

/// `[run]` as written: every key optional. [`RunPlan::from_raw`] fills the defaults
/// and checks the values.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRun {
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
pub struct RunPlan {
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
    pub tls: Option<TlsPlan>,
    /// Cluster mode without TLS on a non-loopback `listen`: refused unless set (for
    /// private networks only: the traffic is plaintext).
    pub allow_plaintext: bool,
}

/// `[run.tls]`: the coordinator's certificate and key, and the CA that signs every
/// node's certificate (PEM files; relative paths are relative to the current directory).
#[derive(Debug, Clone, PartialEq)]
pub struct TlsPlan {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    /// A connection that has not finished its TLS handshake by then is closed.
    pub handshake_timeout: Duration,
}

/// `[run.tls] handshake_timeout_seconds`' default.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for RunPlan {
    /// Every `[run]` default (docs/job.md's table states the same; a test checks).
    fn default() -> Self {
        RunPlan {
            mode: Mode::Local,
            workers: 2,
            memory_per_worker: parse_bytes(DEFAULT_MEMORY_PER_WORKER).unwrap_or(2 << 30),
            scratch: std::env::temp_dir().join("probeflow"),
            max_attempts: 3,
            lease: Duration::from_secs(60),
            output_lock: Duration::from_secs(60),
            listen: SocketAddr::from(([0, 0, 0, 0], 7077)),
            tls: None,
            allow_plaintext: false,
        }
    }
}

impl RunPlan {
    /// The smallest `memory_per_worker`.
    pub const MIN_MEMORY: u64 = 64 << 20;
    /// The shortest output lock (renewed every third of it).
    pub const MIN_OUTPUT_LOCK: Duration = Duration::from_secs(3);

    /// `[run]` as written, with the defaults filled in and every value checked.
    fn from_raw(raw: RawRun) -> std::result::Result<RunPlan, String> {
        let d = RunPlan::default();
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
            Some(t) => Some(TlsPlan {
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
        Ok(RunPlan {
            mode: raw.mode.unwrap_or(d.mode),
            workers: at_least_one("workers", raw.workers.map(|w| w as u64), d.workers as u64)?
                as usize,
            memory_per_worker,
            scratch: raw.scratch.unwrap_or(d.scratch),
            max_attempts: at_least_one(
                "max_attempts",
                raw.max_attempts.map(u64::from),
                u64::from(d.max_attempts),
            )? as u32,
            lease: Duration::from_secs(at_least_one(
                "lease_seconds",
                raw.lease_seconds,
                d.lease.as_secs(),
            )?),
            output_lock,
            listen,
            tls,
            allow_plaintext: raw.allow_plaintext.unwrap_or(d.allow_plaintext),
        })
    }
}

impl JobSpec {
    /// Reads and validates a job file.
    pub fn load(path: &Path, kinds: Kinds) -> Result<JobSpec> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| EngineError::Spec {
            file: file.clone(),
            what: e.to_string(),
        })?;
        Self::parse(&text, &file, kinds)
    }

    pub fn parse(text: &str, file: &str, kinds: Kinds) -> Result<JobSpec> {
        let spec_error = |what: String| EngineError::Spec {
            file: file.to_string(),
            what,
        };
        // The engine's keys; the kind reads its own sections from the same text. Both
        // parse the text itself, so an error points at its line and column.
        let keys: EngineKeys = toml::from_str(text)
            .map_err(|e: toml::de::Error| spec_error(e.to_string().trim_end().to_string()))?;
        let kind_name = match keys.kind {
            None => kinds.default_kind().name().to_string(),
            Some(toml::Value::String(k)) => k,
            Some(other) => {
                return Err(spec_error(format!(
                    "kind must be a string (one of {:?}), got {other}",
                    kinds.names()
                )))
            }
        };
        let kind = kinds.find(&kind_name).ok_or_else(|| {
            spec_error(format!(
                "unknown kind {kind_name:?}: this release runs {:?}",
                kinds.names()
            ))
        })?;
        let run = RunPlan::from_raw(keys.run).map_err(spec_error)?;
        let file_sections = kind.load(file, text)?;
        Ok(JobSpec {
            kind,
            file: file_sections,
            run,
        })
    }

    /// The output root URL.
    pub fn output_url(&self) -> &str {
        self.file.output_url()
    }

    /// blake3 of what determines the output bytes (the kind's fingerprint).
    pub fn fingerprint(&self) -> String {
        self.file.fingerprint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::tests::TEST_KINDS;

    const FULL: &str = r#"
[input]
paths = ["data/texts/*.txt"]
[output]
url = "out/words"
[run]
mode = "local"
workers = 2
memory_per_worker = "2GiB"
scratch = "/tmp/probeflow"
"#;

    /// A word-count job file with `[input]` and `[output]` and `run` as its `[run]`.
    fn with_run(run: &str) -> String {
        format!("[input]\npaths = ['a']\n[output]\nurl = 'b'\n{run}")
    }

    fn parse(text: &str, file: &str) -> Result<JobSpec> {
        JobSpec::parse(text, file, TEST_KINDS)
    }

    #[test]
    fn the_kind_is_the_registrys_first_unless_named_and_unknown_kinds_are_errors() {
        assert_eq!(parse(FULL, "x").unwrap().kind.name(), "word_count");
        let named = format!("kind = \"word_count\"\n{FULL}");
        assert_eq!(parse(&named, "x").unwrap().kind.name(), "word_count");
        let err = parse(&format!("kind = \"dedup\"\n{FULL}"), "x.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown kind \"dedup\"") && err.contains("word_count"),
            "{err}"
        );
        let err = parse(&format!("kind = 3\n{FULL}"), "x.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("kind must be a string"), "{err}");
    }

    #[test]
    fn unknown_keys_are_errors_with_positions() {
        let bad = FULL.replace("url = \"out/words\"", "url = \"out/words\"\nshards = 3");
        let err = parse(&bad, "x.toml").unwrap_err().to_string();
        assert!(err.contains("shards") && err.contains("line"), "{err}");
        let bad_run = FULL.replace("workers = 2", "workers = 2\nworker = 3");
        let err = parse(&bad_run, "x.toml").unwrap_err().to_string();
        assert!(err.contains("`worker`") && err.contains("line 9"), "{err}");
        let err = parse(&with_run("[run]\nworkers=0\n"), "y.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("y.toml") && err.contains("workers"), "{err}");
        let no_ca = format!("{FULL}[run.tls]\ncert = \"c.pem\"\nkey = \"c.key\"\n");
        let err = parse(&no_ca, "x.toml").unwrap_err().to_string();
        assert!(err.contains("missing field `ca`"), "{err}");
    }

    #[test]
    fn fingerprint_ignores_how_the_job_runs() {
        let a = parse(FULL, "x").unwrap();
        let b = parse(&FULL.replace("workers = 2", "workers = 4"), "x").unwrap();
        let c = parse(&FULL.replace("data/texts", "data/other"), "x").unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        let tls = format!("{FULL}[run.tls]\ncert = \"c.pem\"\nkey = \"c.key\"\nca = \"ca.pem\"\n");
        let d = parse(&tls, "x").unwrap();
        assert_eq!(
            d.run.tls.as_ref().unwrap().handshake_timeout,
            DEFAULT_HANDSHAKE_TIMEOUT
        );
        assert_eq!(a.fingerprint(), d.fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
    }

    /// The `` `key` [default] `` pairs of the table under `heading` in a doc page.
    pub(crate) fn documented_defaults(doc: &str, heading: &str) -> Vec<(String, String)> {
        let start = doc.find(heading).expect("the section is in the page");
        let section = &doc[start + heading.len()..];
        let end = section.find("\n#").unwrap_or(section.len());
        let mut pairs = Vec::new();
        for line in section[..end].lines().filter(|l| l.starts_with("| `")) {
            let cell = line.split(" | ").next().unwrap_or_default();
            // `a` [1], `b` [2]: each default belongs to the key just before it.
            let mut rest = cell;
            while let Some(open) = rest.find(" [") {
                let key = rest[..open].rsplit('`').nth(1).unwrap_or_default();
                let close = rest[open..]
                    .find(']')
                    .map(|c| open + c)
                    .unwrap_or(rest.len());
                pairs.push((key.to_string(), rest[open + 2..close].to_string()));
                rest = &rest[close..];
            }
        }
        pairs
    }

    #[test]
    fn the_docs_run_table_states_the_defaults_of_the_code() {
        let doc = include_str!("../../../docs/job.md");
        let d = RunPlan::default();
        let scratch = if d.scratch == std::env::temp_dir().join("probeflow") {
            "system temp dir + `/probeflow`".to_string()
        } else {
            format!("{:?}", d.scratch)
        };
        let code: Vec<(String, String)> = [
            ("mode", "`\"local\"`".to_string()),
            ("workers", d.workers.to_string()),
            (
                "memory_per_worker",
                format!("`\"{DEFAULT_MEMORY_PER_WORKER}\"`"),
            ),
            ("scratch", scratch),
            ("max_attempts", d.max_attempts.to_string()),
            ("lease_seconds", d.lease.as_secs().to_string()),
            ("output_lock_seconds", d.output_lock.as_secs().to_string()),
            ("listen", format!("`\"{}\"`", d.listen)),
            ("allow_plaintext", d.allow_plaintext.to_string()),
            (
                "handshake_timeout_seconds",
                DEFAULT_HANDSHAKE_TIMEOUT.as_secs().to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(d.mode, Mode::Local);
        assert_eq!(
            parse_bytes(DEFAULT_MEMORY_PER_WORKER),
            Some(d.memory_per_worker)
        );
        assert_eq!(documented_defaults(doc, "### `[run]`"), code);
        // The README's job file says the defaults it leaves out in a comment.
        let readme = include_str!("../../../README.md");
        let comment = readme
            .lines()
            .find(|l| l.starts_with("# max_attempts = "))
            .expect("the README's [run] comment");
        assert_eq!(
            comment.trim(),
            format!(
                "# max_attempts = {}, lease_seconds = {}",
                d.max_attempts,
                d.lease.as_secs()
            )
        );
        // And a job file without [run] gets exactly these.
        let spec = parse(&with_run(""), "x").unwrap();
        assert_eq!(spec.run, d);
    }

    #[test]
    fn run_values_are_checked_once_when_the_file_is_read() {
        for (bad, what) in [
            ("workers = 0", "[run] workers must be at least 1"),
            ("max_attempts = 0", "[run] max_attempts must be at least 1"),
            (
                "lease_seconds = 0",
                "[run] lease_seconds must be at least 1",
            ),
            (
                "output_lock_seconds = 2",
                "[run] output_lock_seconds must be at least 3",
            ),
            ("memory_per_worker = \"1MiB\"", "must be at least 64.0 MiB"),
            ("memory_per_worker = \"lots\"", "is not a size like"),
            (
                "listen = \"7077\"",
                "[run] listen \"7077\": expected ip:port",
            ),
            ("rows_per_map_task = 5", "is now [input] rows_per_map_task"),
        ] {
            let err = parse(&with_run(&format!("[run]\n{bad}\n")), "x.toml")
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with("x.toml: ") && err.contains(what),
                "{bad}: {err}"
            );
        }
        let text = with_run(
            "[run]\nmemory_per_worker = \"512MiB\"\nlease_seconds = 7\nlisten = \"127.0.0.1:9000\"\n",
        );
        let run = parse(&text, "x").unwrap().run;
        assert_eq!(run.memory_per_worker, 512 << 20);
        assert_eq!(run.lease, Duration::from_secs(7));
        assert_eq!(run.listen, "127.0.0.1:9000".parse().unwrap());
    }
}
