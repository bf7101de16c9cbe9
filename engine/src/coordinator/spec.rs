//! The job file (TOML): `kind` (which job, default `probe_rows`), the kind's own
//! sections (read by the kind) and `[run]` (how the
//! engine runs it), turned once into a validated [`JobSpec`].
//!
//! ```text
//! text ─► EngineKeys { kind, [run] as written (RawRun) } ─► RunConfig (typed, defaults filled, checked)
//!      └► the kind's sections (the kind's type) ─► Box<dyn JobFile>
//! ```
//!
//! Unknown keys are errors (with line and column). Relative local paths are relative
//! to the current directory. Every `[run]` default is [`RunConfig::default`]'s, defined
//! once in [`crate::settings`]; the *fingerprint* is the kind's: everything that determines the output bytes,
//! not how the job runs (`[run]`), so a job can resume with a different number of
//! workers.

use std::path::Path;

use serde::Deserialize;

use crate::error::{EngineError, Result};
use crate::job::{JobFile, JobKind, Kinds};
use crate::settings::{RawRun, RunConfig};

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
    pub run: RunConfig,
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
        let run = RunConfig::from_raw(keys.run).map_err(spec_error)?;
        let file_sections = kind.load(file, text)?;
        file_sections
            .validate_memory(run.memory_per_worker)
            .map_err(spec_error)?;
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

    use std::time::Duration;

    use crate::settings::{
        default_scratch, Mode, DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_MEMORY_PER_WORKER,
    };
    use crate::tests::TEST_KINDS;
    use crate::units::parse_bytes;

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
        let d = RunConfig::default();
        let scratch = if d.scratch == default_scratch() {
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
            ("http_linger_seconds", d.http_linger.as_secs().to_string()),
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
                "max_attempts = 1001",
                "[run] max_attempts must be at most 1000",
            ),
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
