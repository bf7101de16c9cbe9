//! The job file (TOML): `kind` (which job, default `probe_rows`), the kind's own
//! sections (read by the kind: see `probeflow_worker::jobs`) and `[run]` (how the
//! engine runs it), turned once into a validated [`JobSpec`].
//!
//! Unknown keys are errors (with line and column). Relative local paths are relative
//! to the current directory. The *fingerprint* is the kind's: everything that
//! determines the output bytes, not how the job runs (`[run]`), so a job can resume
//! with a different number of workers.

use std::path::{Path, PathBuf};

use probeflow_worker::engine::job::{JobFile, JobKind};
use probeflow_worker::jobs;
use serde::{Deserialize, Serialize};

use crate::error::{JobError, Result};

/// The keys of a job file the engine reads (the kind's sections are ignored here).
#[derive(Deserialize)]
struct EngineKeys {
    kind: Option<toml::Value>,
    #[serde(default)]
    run: RunSpec,
}

/// A validated job file.
#[derive(Debug)]
pub struct JobSpec {
    /// The job kind.
    pub kind: &'static dyn JobKind,
    /// The kind's sections, validated.
    pub file: Box<dyn JobFile>,
    /// How the engine runs it.
    pub run: RunSpec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Local,
    Cluster,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    #[serde(default = "default_mode")]
    pub mode: Mode,
    #[serde(default = "default_workers")]
    pub workers: usize,
    #[serde(default = "default_memory")]
    pub memory_per_worker: String,
    #[serde(default = "default_scratch")]
    pub scratch: PathBuf,
    /// Attempts per task before the job fails.
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// A task's lease; heartbeats renew it every quarter.
    #[serde(default = "default_lease")]
    pub lease_seconds: u64,
    /// Moved to `[input] rows_per_map_task` (a setting of the probe_rows kind): here
    /// only to say so.
    #[serde(default, skip_serializing)]
    pub rows_per_map_task: Option<toml::Value>,
    /// The output lock lapses this long after its owner's last renewal (renewed every
    /// third of it); a dead coordinator's lock on another host is taken over after it.
    #[serde(default = "default_output_lock_seconds")]
    pub output_lock_seconds: u64,
    /// Cluster mode: the address the coordinator listens on for workers.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Cluster mode: mutual TLS between the coordinator and the workers (optional).
    pub tls: Option<TlsSpec>,
    /// Cluster mode without `[run.tls]` on a non-loopback `listen`: refused unless this
    /// is true (for private networks only: the traffic is plaintext).
    #[serde(default)]
    pub allow_plaintext: bool,
}

/// `[run.tls]`: the coordinator's certificate and key, and the CA that signs every
/// node's certificate (PEM files; relative paths are relative to the current directory).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSpec {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    /// A connection that has not finished its TLS handshake by then is closed.
    #[serde(default = "default_handshake_timeout")]
    pub handshake_timeout_seconds: u64,
}

fn default_output_lock_seconds() -> u64 {
    60
}

fn default_handshake_timeout() -> u64 {
    10
}

fn default_mode() -> Mode {
    Mode::Local
}
fn default_workers() -> usize {
    2
}
fn default_memory() -> String {
    "2GiB".into()
}
fn default_scratch() -> PathBuf {
    std::env::temp_dir().join("probeflow")
}
fn default_listen() -> String {
    "0.0.0.0:7077".into()
}
fn default_attempts() -> u32 {
    3
}
fn default_lease() -> u64 {
    60
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec {
            mode: default_mode(),
            workers: default_workers(),
            memory_per_worker: default_memory(),
            scratch: default_scratch(),
            max_attempts: default_attempts(),
            lease_seconds: default_lease(),
            rows_per_map_task: None,
            output_lock_seconds: default_output_lock_seconds(),
            listen: default_listen(),
            tls: None,
            allow_plaintext: false,
        }
    }
}

pub use probeflow_worker::engine::units::parse_bytes;

impl JobSpec {
    /// Reads and validates a job file.
    pub fn load(path: &Path) -> Result<JobSpec> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| JobError::Spec {
            file: file.clone(),
            what: e.to_string(),
        })?;
        Self::parse(&text, &file)
    }

    pub fn parse(text: &str, file: &str) -> Result<JobSpec> {
        let spec_error = |what: String| JobError::Spec {
            file: file.to_string(),
            what,
        };
        // The engine's keys; the kind reads its own sections from the same text. Both
        // parse the text itself, so an error points at its line and column.
        let keys: EngineKeys = toml::from_str(text)
            .map_err(|e: toml::de::Error| spec_error(e.to_string().trim_end().to_string()))?;
        let kind_name = match keys.kind {
            None => jobs::DEFAULT_KIND.to_string(),
            Some(toml::Value::String(k)) => k,
            Some(other) => {
                return Err(spec_error(format!(
                    "kind must be a string (one of {:?}), got {other}",
                    jobs::names()
                )))
            }
        };
        let kind = jobs::kind(&kind_name).ok_or_else(|| {
            spec_error(format!(
                "unknown kind {kind_name:?}: this release runs {:?}",
                jobs::names()
            ))
        })?;
        let run = keys.run;
        run.validate().map_err(spec_error)?;
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

    /// A task's lease (heartbeats, request timeouts and lease checks derive from it).
    pub fn lease(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.run.lease_seconds)
    }

    pub fn output_lock_ttl(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.run.output_lock_seconds)
    }

    pub fn memory_bytes(&self) -> u64 {
        parse_bytes(&self.run.memory_per_worker).unwrap_or(2 << 30)
    }
}

impl RunSpec {
    fn validate(&self) -> std::result::Result<(), String> {
        if self.workers == 0 {
            return Err("[run] workers must be at least 1".into());
        }
        if self.max_attempts == 0 {
            return Err("[run] max_attempts must be at least 1".into());
        }
        if self.lease_seconds == 0 {
            return Err("[run] lease_seconds must be at least 1".into());
        }
        if self.output_lock_seconds < 3 {
            return Err("[run] output_lock_seconds must be at least 3".into());
        }
        if self.rows_per_map_task.is_some() {
            return Err(
                "[run] rows_per_map_task is now [input] rows_per_map_task (a setting \
                        of the probe_rows kind, not of the engine): move it there"
                    .into(),
            );
        }
        if let Some(tls) = &self.tls {
            if tls.handshake_timeout_seconds == 0 {
                return Err("[run.tls] handshake_timeout_seconds must be at least 1".into());
            }
        }
        match parse_bytes(&self.memory_per_worker) {
            Some(b) if b >= 64 << 20 => {}
            Some(_) => return Err("[run] memory_per_worker must be at least 64MiB".into()),
            None => {
                return Err(format!(
                    "[run] memory_per_worker {:?} is not a size like \"2GiB\"",
                    self.memory_per_worker
                ))
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
[input]
url = "data/measurements/*.parquet"
[output]
url = "out/probe_rows"
shards = 64
max_row_bytes = 8388608
array_record_options = "group_size:1,zstd:3"
[split]
test_fraction = 0.1
seed = 17
[run]
mode = "local"
workers = 2
memory_per_worker = "2GiB"
scratch = "/tmp/probeflow"
"#;

    #[test]
    fn the_shipped_job_files_parse() {
        for (name, text) in [
            (
                "preprocess.toml",
                include_str!("../../jobs/preprocess.toml"),
            ),
            ("local.toml", include_str!("../../jobs/local.toml")),
            ("demo.toml", include_str!("../../jobs/demo.toml")),
        ] {
            let spec = JobSpec::parse(text, name).unwrap();
            if spec.run.mode == Mode::Cluster {
                // The shipped cluster job is TLS, not plaintext.
                assert!(
                    spec.run.tls.is_some() && !spec.run.allow_plaintext,
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn the_kind_is_probe_rows_unless_named_and_unknown_kinds_are_errors() {
        assert_eq!(JobSpec::parse(FULL, "x").unwrap().kind.name(), "probe_rows");
        let named = format!("kind = \"probe_rows\"\n{FULL}");
        assert_eq!(
            JobSpec::parse(&named, "x").unwrap().kind.name(),
            "probe_rows"
        );
        let err = JobSpec::parse(&format!("kind = \"dedup\"\n{FULL}"), "x.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown kind \"dedup\"") && err.contains("probe_rows"),
            "{err}"
        );
        let err = JobSpec::parse(&format!("kind = 3\n{FULL}"), "x.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("kind must be a string"), "{err}");
    }

    #[test]
    fn unknown_keys_are_errors_with_positions() {
        let bad = FULL.replace("shards = 64", "shards = 64\nshard_count = 3");
        let err = JobSpec::parse(&bad, "x.toml").unwrap_err().to_string();
        assert!(err.contains("shard_count") && err.contains("line"), "{err}");
        let bad_run = FULL.replace("workers = 2", "workers = 2\nworker = 3");
        let err = JobSpec::parse(&bad_run, "x.toml").unwrap_err().to_string();
        assert!(err.contains("`worker`") && err.contains("line 15"), "{err}");
        let err = JobSpec::parse(
            "[input]\nurl='a'\n[output]\nurl='b'\n[run]\nworkers=0\n",
            "y.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("y.toml") && err.contains("workers"), "{err}");
        let no_ca = format!("{FULL}[run.tls]\ncert = \"c.pem\"\nkey = \"c.key\"\n");
        let err = JobSpec::parse(&no_ca, "x.toml").unwrap_err().to_string();
        assert!(err.contains("missing field `ca`"), "{err}");
    }

    #[test]
    fn fingerprint_ignores_how_the_job_runs() {
        let a = JobSpec::parse(FULL, "x").unwrap();
        let b = JobSpec::parse(&FULL.replace("workers = 2", "workers = 4"), "x").unwrap();
        let c = JobSpec::parse(&FULL.replace("seed = 17", "seed = 18"), "x").unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        let tls = format!("{FULL}[run.tls]\ncert = \"c.pem\"\nkey = \"c.key\"\nca = \"ca.pem\"\n");
        let d = JobSpec::parse(&tls, "x").unwrap();
        assert_eq!(d.run.tls.as_ref().unwrap().handshake_timeout_seconds, 10);
        assert_eq!(a.fingerprint(), d.fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
    }
}
