//! The job file (TOML): what to read, what to write, how to split, how to run.
//!
//! Unknown keys are errors (with line and column). Relative local paths are relative
//! to the current directory. The *fingerprint* hashes everything that determines the
//! output bytes (input, output layout, split), not how the job runs (`[run]`), so a job
//! can resume with a different number of workers.

use std::path::{Path, PathBuf};

use probeflow_reader::array_record::WriterOptions;
use probeflow_worker::protocol::{
    InputColumns, JobContext, Plausible, TimeUnit, DEFAULT_EARLIEST_EVENT_TIME,
    DEFAULT_LATEST_EVENT_TIME_MARGIN_SECONDS, DEFAULT_MAX_RTT_MS,
};
use serde::{Deserialize, Serialize};

use crate::error::{JobError, Result};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    pub input: InputSpec,
    pub output: OutputSpec,
    #[serde(default)]
    pub split: SplitSpec,
    #[serde(default)]
    pub run: RunSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// Local path or glob, `file://`, or `s3://bucket/prefix/*.parquet`.
    pub url: Option<String>,
    /// Instead of `url`: generate demo data first (into `<output>/_job/input/`).
    pub synthetic: Option<SyntheticSpec>,
    #[serde(default)]
    pub columns: InputColumns,
    /// The unit of integer `event_time` values: `"s"` (default), `"ms"`, `"us"`, `"ns"`.
    #[serde(default)]
    pub time_unit: TimeUnit,
    /// Rows with an earlier event time are rejected (`implausible_event_time`):
    /// RFC 3339 (`2000-01-01T00:00:00Z`) or a UTC date (`2000-01-01`).
    #[serde(default = "default_earliest_event_time")]
    pub earliest_event_time: String,
    /// Rows with a later event time are rejected; default: one day after the job is
    /// planned (fixed in the journal and the manifest from then on).
    pub latest_event_time: Option<String>,
    /// RTTs above this (ms), and infinite ones, are rejected.
    #[serde(default = "default_max_rtt_ms")]
    pub max_rtt_ms: f64,
}

fn default_earliest_event_time() -> String {
    "2000-01-01T00:00:00Z".into()
}
fn default_max_rtt_ms() -> f64 {
    DEFAULT_MAX_RTT_MS
}

/// Unix seconds of an RFC 3339 time or a UTC date (`YYYY-MM-DD`).
fn parse_instant(text: &str) -> std::result::Result<u64, String> {
    let seconds = match chrono::DateTime::parse_from_rfc3339(text) {
        Ok(t) => t.timestamp(),
        Err(_) => chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
            .map_err(|_| format!("{text:?} is not an RFC 3339 time (2000-01-01T00:00:00Z) or a date (2000-01-01)"))?
            .and_time(chrono::NaiveTime::MIN)
            .and_utc()
            .timestamp(),
    };
    u64::try_from(seconds).map_err(|_| format!("{text:?} is before 1970"))
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticSpec {
    pub rows: u64,
    #[serde(default = "one")]
    pub seed: u64,
}

fn one() -> u64 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSpec {
    pub url: String,
    #[serde(default = "default_shards")]
    pub shards: u32,
    #[serde(default = "default_max_row_bytes")]
    pub max_row_bytes: usize,
    #[serde(default = "default_options")]
    pub array_record_options: String,
}

fn default_shards() -> u32 {
    64
}
fn default_max_row_bytes() -> usize {
    probeflow_reader::row::DEFAULT_MAX_ROW_BYTES
}
fn default_options() -> String {
    probeflow_reader::array_record::DEFAULT_WRITER_OPTIONS.into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitSpec {
    #[serde(default = "default_fraction")]
    pub test_fraction: f64,
    #[serde(default = "default_split_seed")]
    pub seed: u64,
}

fn default_fraction() -> f64 {
    0.1
}
fn default_split_seed() -> u64 {
    17
}

impl Default for SplitSpec {
    fn default() -> Self {
        SplitSpec {
            test_fraction: default_fraction(),
            seed: default_split_seed(),
        }
    }
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
    /// Rows per map task (default: from `memory_per_worker`).
    pub rows_per_map_task: Option<u64>,
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

pub use probeflow_worker::units::parse_bytes;

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
        let spec: JobSpec = toml::from_str(text).map_err(|e| JobError::Spec {
            file: file.to_string(),
            what: e.to_string().trim_end().to_string(),
        })?;
        spec.validate().map_err(|what| JobError::Spec {
            file: file.to_string(),
            what,
        })?;
        Ok(spec)
    }

    fn validate(&self) -> std::result::Result<(), String> {
        match (&self.input.url, &self.input.synthetic) {
            (Some(_), Some(_)) => {
                return Err("[input]: give either url or synthetic, not both".into())
            }
            (None, None) => {
                return Err("[input]: url (or synthetic = { rows = N }) is required".into())
            }
            (_, Some(s)) if s.rows == 0 => {
                return Err("[input] synthetic.rows must be at least 1".into())
            }
            _ => {}
        }
        let earliest = parse_instant(&self.input.earliest_event_time)
            .map_err(|e| format!("[input] earliest_event_time: {e}"))?;
        if let Some(latest) = &self.input.latest_event_time {
            let latest =
                parse_instant(latest).map_err(|e| format!("[input] latest_event_time: {e}"))?;
            if latest <= earliest {
                return Err(format!(
                    "[input] latest_event_time ({latest}) must be after earliest_event_time ({earliest})"
                ));
            }
        }
        if !(self.input.max_rtt_ms.is_finite() && self.input.max_rtt_ms > 0.0) {
            return Err(format!(
                "[input] max_rtt_ms must be a positive number of milliseconds, got {}",
                self.input.max_rtt_ms
            ));
        }
        if self.output.url.is_empty() {
            return Err("[output] url is empty".into());
        }
        if !(1..=99_999).contains(&self.output.shards) {
            return Err(format!(
                "[output] shards must be 1..=99999, got {}",
                self.output.shards
            ));
        }
        if self.output.max_row_bytes < 4096 {
            return Err(format!(
                "[output] max_row_bytes must be at least 4096, got {}",
                self.output.max_row_bytes
            ));
        }
        self.output
            .array_record_options
            .parse::<WriterOptions>()
            .map_err(|e| format!("[output] array_record_options: {e}"))?;
        if !(0.0..=1.0).contains(&self.split.test_fraction) {
            return Err(format!(
                "[split] test_fraction must be between 0 and 1, got {}",
                self.split.test_fraction
            ));
        }
        if self.run.workers == 0 {
            return Err("[run] workers must be at least 1".into());
        }
        if self.run.max_attempts == 0 {
            return Err("[run] max_attempts must be at least 1".into());
        }
        if self.run.lease_seconds == 0 {
            return Err("[run] lease_seconds must be at least 1".into());
        }
        if self.run.output_lock_seconds < 3 {
            return Err("[run] output_lock_seconds must be at least 3".into());
        }
        if let Some(tls) = &self.run.tls {
            if tls.handshake_timeout_seconds == 0 {
                return Err("[run.tls] handshake_timeout_seconds must be at least 1".into());
            }
        }
        match parse_bytes(&self.run.memory_per_worker) {
            Some(b) if b >= 64 << 20 => {}
            Some(_) => return Err("[run] memory_per_worker must be at least 64MiB".into()),
            None => {
                return Err(format!(
                    "[run] memory_per_worker {:?} is not a size like \"2GiB\"",
                    self.run.memory_per_worker
                ))
            }
        }
        Ok(())
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

    /// Rows per map task: a tenth of a worker's memory at ~100 bytes a row, 100k–4M.
    pub fn rows_per_map_task(&self) -> u64 {
        self.run
            .rows_per_map_task
            .unwrap_or_else(|| (self.memory_bytes() / 1000).clamp(100_000, 4_000_000))
            .max(1)
    }

    /// blake3 of what determines the output bytes.
    pub fn fingerprint(&self) -> String {
        let canonical = serde_json::json!({
            "input": self.input,
            "output": self.output,
            "split": self.split,
            "row_format": probeflow_reader::row::codec::ROW_FORMAT_VERSION,
        });
        blake3::hash(canonical.to_string().as_bytes())
            .to_hex()
            .to_string()
    }

    /// The plausibility limits of a job planned at `planned_at` (Unix seconds): the
    /// window's default end is one day later. Call once, when planning; resumes use
    /// the journaled value.
    pub fn plausible(&self, planned_at: u64) -> Plausible {
        // validate() checked both instants.
        let earliest =
            parse_instant(&self.input.earliest_event_time).unwrap_or(DEFAULT_EARLIEST_EVENT_TIME);
        let latest = self
            .input
            .latest_event_time
            .as_deref()
            .and_then(|t| parse_instant(t).ok())
            .unwrap_or(planned_at + DEFAULT_LATEST_EVENT_TIME_MARGIN_SECONDS);
        Plausible {
            time_unit: self.input.time_unit,
            earliest_event_time: earliest,
            latest_event_time: latest,
            max_rtt_ms: self.input.max_rtt_ms,
        }
    }

    /// What every task needs, with the limits resolved when the job was planned.
    pub fn job_context(&self, plausible: Plausible) -> JobContext {
        JobContext {
            job_id: self.fingerprint(),
            output: self.output.url.clone(),
            shards: self.output.shards,
            max_row_bytes: self.output.max_row_bytes,
            array_record_options: self.output.array_record_options.clone(),
            split_seed: self.split.seed,
            test_fraction: self.split.test_fraction,
            columns: self.input.columns.clone(),
            plausible,
        }
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
    fn the_documented_example_parses() {
        let spec = JobSpec::parse(FULL, "x.toml").unwrap();
        assert_eq!(spec.output.shards, 64);
        assert_eq!(spec.memory_bytes(), 2 << 30);
        assert_eq!(spec.input.columns, InputColumns::default());
    }

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
    fn unknown_keys_are_errors_with_positions() {
        let bad = FULL.replace("shards = 64", "shards = 64\nshard_count = 3");
        let err = JobSpec::parse(&bad, "x.toml").unwrap_err().to_string();
        assert!(err.contains("shard_count") && err.contains("line"), "{err}");
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
    fn plausibility_settings_are_checked_and_resolved() {
        let spec = JobSpec::parse(FULL, "x.toml").unwrap();
        let p = spec.plausible(1_800_000_000);
        assert_eq!(p.time_unit, TimeUnit::S);
        assert_eq!(p.earliest_event_time, 946_684_800);
        assert_eq!(p.latest_event_time, 1_800_000_000 + 86_400);
        assert_eq!(p.max_rtt_ms, 60_000.0);
        let set = FULL.replace(
            "[output]",
            "time_unit = \"ms\"\nearliest_event_time = \"2020-01-01\"\nlatest_event_time = \"2021-01-01T00:00:00+01:00\"\nmax_rtt_ms = 5000\n[output]",
        );
        let p = JobSpec::parse(&set, "x.toml").unwrap().plausible(0);
        assert_eq!(p.time_unit, TimeUnit::Ms);
        assert_eq!(p.earliest_event_time, 1_577_836_800);
        assert_eq!(p.latest_event_time, 1_609_459_200 - 3_600);
        assert_eq!(p.max_rtt_ms, 5000.0);
        for (bad, what) in [
            ("time_unit = \"min\"", "time_unit"),
            ("earliest_event_time = \"yesterday\"", "earliest_event_time"),
            ("latest_event_time = \"1999-01-01\"", "must be after"),
            ("max_rtt_ms = -1", "max_rtt_ms"),
            ("max_rtt_ms = inf", "max_rtt_ms"),
        ] {
            let text = FULL.replace("[output]", &format!("{bad}\n[output]"));
            let err = JobSpec::parse(&text, "x.toml").unwrap_err().to_string();
            assert!(err.contains(what), "{bad}: {err}");
        }
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
