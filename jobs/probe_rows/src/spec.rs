//! The probe-rows job file: `[input]` (what to read, plausibility limits), `[output]`
//! (where, how many shards, row and file format) and `[split]` (the train/test rule).
//! Unknown keys are errors. The fingerprint hashes all of it (it determines the output
//! bytes).

use probeflow_reader::array_record::WriterOptions;
use probeflow_reader::row::SplitRule;
use serde::{Deserialize, Serialize};

use super::protocol::{
    is_zero, InputColumns, InputFormat, Plausible, Settings, SourceRule, TimeUnit,
    DEFAULT_EARLIEST_EVENT_TIME, DEFAULT_LATEST_EVENT_TIME_MARGIN_SECONDS, DEFAULT_MAX_RTT_MS,
};

/// A probe-rows job file's sections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeRowsFile {
    pub input: InputSpec,
    pub output: OutputSpec,
    #[serde(default)]
    pub split: SplitSpec,
    /// The engine's keys (`kind`, `[run]`): read by the engine, ignored here.
    #[serde(default, skip_serializing)]
    pub kind: Option<String>,
    #[serde(default, skip_serializing)]
    pub run: Option<toml::Table>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// The input's files: a local path or glob, `file://`, `s3://bucket/prefix/*.parquet`,
    /// `gs://…`, or one file's `https://…`; or a list of them.
    pub url: Option<InputUrls>,
    /// `"parquet"` (one row per packet; the default) or `"ripe_atlas"` (RIPE Atlas ping
    /// results, JSON lines, as the dumps publish them).
    #[serde(default, skip_serializing_if = "InputFormat::is_parquet")]
    pub format: InputFormat,
    /// Atlas results: which address is a packet's source, `"public"` (the default:
    /// `from`, else a global `src_addr`) or `"src_addr"` (the field as it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceRule>,
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
    /// Rows per map task (default: a tenth of `[run] memory_per_worker` at ~100 bytes
    /// a row, 100k–4M). How the job runs, not what it writes: not in the fingerprint
    /// (nor the journaled sections).
    #[serde(default, skip_serializing)]
    pub rows_per_map_task: Option<u64>,
    /// Keep input whose sources are mostly of a local scope (private, shared/CGNAT,
    /// link-local, unique-local, loopback): without it, a map task whose valid rows are
    /// mostly keyed so fails the job, since such addresses are interfaces behind NAT
    /// that unrelated probes share. Whether the job runs, not what it writes: not in
    /// the fingerprint (a job that failed on it resumes with it set).
    #[serde(default, skip_serializing)]
    pub allow_private_sources: bool,
}

/// `[input] url`: one URL, or a list (read in order, as if one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, expecting = "a URL, or a list of URLs")]
pub enum InputUrls {
    One(String),
    Many(Vec<String>),
}

impl InputUrls {
    /// The URLs, in the job file's order.
    pub fn urls(&self) -> Vec<String> {
        match self {
            InputUrls::One(url) => vec![url.clone()],
            InputUrls::Many(urls) => urls.clone(),
        }
    }
}

fn default_earliest_event_time() -> String {
    "2000-01-01T00:00:00Z".into()
}
fn default_max_rtt_ms() -> f64 {
    DEFAULT_MAX_RTT_MS
}

/// Unix seconds of an RFC 3339 time or a UTC date (`YYYY-MM-DD`).
fn parse_instant(text: &str) -> Result<u64, String> {
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
    /// 0 (the default): no val split, and the job (fingerprint, manifest, shards) is
    /// exactly the two-way one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub val_fraction: f64,
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
            val_fraction: 0.0,
            seed: default_split_seed(),
        }
    }
}

impl SplitSpec {
    /// The rule these settings describe (refused when the fractions cannot be one).
    pub fn rule(&self) -> probeflow_reader::error::Result<SplitRule> {
        SplitRule::new(self.seed, self.test_fraction, self.val_fraction)
    }
}

impl ProbeRowsFile {
    pub fn validate(&self) -> Result<(), String> {
        match (&self.input.url, &self.input.synthetic) {
            (Some(_), Some(_)) => {
                return Err("[input]: give either url or synthetic, not both".into())
            }
            (None, None) => {
                return Err("[input]: url (or synthetic = { rows = N }) is required".into())
            }
            (Some(InputUrls::Many(urls)), _) if urls.is_empty() => {
                return Err("[input] url: the list names no files".into())
            }
            (_, Some(s)) if s.rows == 0 => {
                return Err("[input] synthetic.rows must be at least 1".into())
            }
            _ => {}
        }
        self.validate_format()?;
        if self.input.rows_per_map_task == Some(0) {
            return Err("[input] rows_per_map_task must be at least 1".into());
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
        self.split.rule().map_err(|e| format!("[split] {e}"))?;
        Ok(())
    }

    /// The keys that belong to one format only.
    fn validate_format(&self) -> Result<(), String> {
        let i = &self.input;
        match i.format {
            InputFormat::Parquet => {
                if i.source.is_some() {
                    return Err(
                        "[input] source applies to format = \"ripe_atlas\" only (Parquet input \
                         names its source column in columns.src_addr)"
                            .into(),
                    );
                }
            }
            InputFormat::RipeAtlas => {
                let parquet_only = [
                    ("synthetic", i.synthetic.is_some()),
                    ("columns", i.columns != InputColumns::default()),
                    ("time_unit", i.time_unit != TimeUnit::default()),
                    ("rows_per_map_task", i.rows_per_map_task.is_some()),
                ];
                if let Some((key, _)) = parquet_only.iter().find(|(_, set)| *set) {
                    return Err(format!(
                        "[input] {key} applies to Parquet input, not to format = \"ripe_atlas\" \
                         (Atlas results have fixed fields, Unix-second timestamps, and one map \
                         task per file)"
                    ));
                }
            }
        }
        Ok(())
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
    pub fn settings(&self, plausible: Plausible) -> Settings {
        Settings {
            shards: self.output.shards,
            max_row_bytes: self.output.max_row_bytes,
            array_record_options: self.output.array_record_options.clone(),
            split_seed: self.split.seed,
            test_fraction: self.split.test_fraction,
            val_fraction: self.split.val_fraction,
            columns: self.input.columns.clone(),
            plausible,
            allow_private_sources: self.input.allow_private_sources,
            format: self.input.format,
            source: self.input.source.unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use probeflow_engine::job::fingerprint_of;
    use probeflow_engine::kind::KindFile;

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

    fn parse(text: &str) -> Result<ProbeRowsFile, String> {
        let spec: ProbeRowsFile = toml::from_str(text).map_err(|e| e.to_string())?;
        spec.validate()?;
        Ok(spec)
    }

    #[test]
    fn errors_name_the_file_the_key_and_its_line() {
        let bad = FULL.replace("shards = 64", "shards = 64\nshard_count = 3");
        let kind: &'static dyn probeflow_engine::job::JobKind = &crate::ProbeRows;
        let err = kind.load("x.toml", &bad).unwrap_err().to_string();
        assert!(
            err.contains("x.toml") && err.contains("shard_count") && err.contains("line"),
            "{err}"
        );
        assert!(kind.load("x.toml", FULL).is_ok());
    }

    #[test]
    fn url_is_one_url_or_a_list_and_one_url_keeps_its_fingerprint() {
        let one = parse(FULL).unwrap();
        let listed = parse(&FULL.replace(
            r#"url = "data/measurements/*.parquet""#,
            r#"url = ["data/measurements/*.parquet", "https://h/ping.bz2"]"#,
        ))
        .unwrap();
        let paths = |f: &ProbeRowsFile| {
            f.inputs()
                .into_iter()
                .flat_map(|s| s.paths)
                .collect::<Vec<_>>()
        };
        assert_eq!(paths(&one), ["data/measurements/*.parquet"]);
        assert_eq!(
            paths(&listed),
            ["data/measurements/*.parquet", "https://h/ping.bz2"]
        );
        // A single URL is written into the fingerprint as the string it always was.
        assert_eq!(
            one.identity()["input"]["url"],
            "data/measurements/*.parquet"
        );
        let empty = parse(&FULL.replace(r#"url = "data/measurements/*.parquet""#, "url = []"));
        assert!(empty.unwrap_err().contains("names no files"));
        let number = parse(&FULL.replace(r#"url = "data/measurements/*.parquet""#, "url = 5"));
        assert!(number.unwrap_err().contains("a URL, or a list of URLs"));
    }

    #[test]
    fn a_val_fraction_of_zero_is_the_two_way_job() {
        let two_way = parse(FULL).unwrap();
        let zero = parse(&FULL.replace("seed = 17", "seed = 17\nval_fraction = 0.0")).unwrap();
        let fingerprint = |f: &ProbeRowsFile| fingerprint_of(&f.identity());
        assert_eq!(fingerprint(&zero), fingerprint(&two_way));
        let with_val = parse(&FULL.replace("seed = 17", "seed = 17\nval_fraction = 0.1")).unwrap();
        assert_ne!(fingerprint(&with_val), fingerprint(&two_way));
        assert_eq!(with_val.settings(with_val.plausible(0)).val_fraction, 0.1);
        for bad in [
            "val_fraction = -0.1",
            "val_fraction = 0.95",
            "val_fraction = nan",
        ] {
            let err = parse(&FULL.replace("seed = 17", &format!("seed = 17\n{bad}"))).unwrap_err();
            assert!(
                err.contains("[split]") && err.contains("val_fraction"),
                "{err}"
            );
        }
    }

    #[test]
    fn each_formats_keys_belong_to_it() {
        let atlas = FULL.replace(
            "url = \"data/measurements/*.parquet\"",
            "url = \"dumps/\"\nformat = \"ripe_atlas\"\nsource = \"src_addr\"",
        );
        let spec = parse(&atlas).unwrap();
        let settings = spec.settings(spec.plausible(0));
        assert_eq!(
            (settings.format, settings.source),
            (InputFormat::RipeAtlas, SourceRule::SrcAddr)
        );
        let err = parse(&FULL.replace("[output]", "source = \"public\"\n[output]")).unwrap_err();
        assert!(
            err.contains("source applies to format = \"ripe_atlas\""),
            "{err}"
        );
        let err = parse(&atlas.replace("[output]", "time_unit = \"ms\"\n[output]")).unwrap_err();
        assert!(err.contains("time_unit applies to Parquet"), "{err}");
        // Parquet job files keep their fingerprint: the defaults are left out.
        let plain = parse(FULL).unwrap();
        assert!(plain.identity()["input"].get("format").is_none());
        assert!(plain.identity()["input"].get("source").is_none());
    }

    #[test]
    fn the_documented_example_parses() {
        let spec = parse(FULL).unwrap();
        assert_eq!(spec.output.shards, 64);
        assert_eq!(spec.input.columns, InputColumns::default());
    }

    #[test]
    fn plausibility_settings_are_checked_and_resolved() {
        let spec = parse(FULL).unwrap();
        let p = spec.plausible(1_800_000_000);
        assert_eq!(p.time_unit, TimeUnit::S);
        assert_eq!(p.earliest_event_time, 946_684_800);
        assert_eq!(p.latest_event_time, 1_800_000_000 + 86_400);
        assert_eq!(p.max_rtt_ms, 60_000.0);
        let set = FULL.replace(
            "[output]",
            "time_unit = \"ms\"\nearliest_event_time = \"2020-01-01\"\nlatest_event_time = \"2021-01-01T00:00:00+01:00\"\nmax_rtt_ms = 5000\n[output]",
        );
        let p = parse(&set).unwrap().plausible(0);
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
            let err = parse(&text).unwrap_err();
            assert!(err.contains(what), "{bad}: {err}");
        }
    }

    #[test]
    fn the_docs_tables_state_the_defaults_of_the_code() {
        let doc = include_str!("../../../docs/job.md");
        let minimal = parse("[input]\nurl = 'a'\n[output]\nurl = 'b'\n").unwrap();
        let stated = |key: &str| -> String {
            let at = doc.find(&format!("| `{key}` [")).expect(key) + key.len() + 6;
            doc[at..at + doc[at..].find(']').unwrap()].to_string()
        };
        assert_eq!(stated("shards"), minimal.output.shards.to_string());
        assert_eq!(
            stated("max_row_bytes"),
            format!("{} MiB", minimal.output.max_row_bytes >> 20)
        );
        assert_eq!(
            stated("array_record_options"),
            format!("`\"{}\"`", minimal.output.array_record_options)
        );
        assert_eq!(stated("time_unit"), "`\"s\"`");
        assert_eq!(stated("format"), "`\"parquet\"`");
        assert_eq!(minimal.input.format, InputFormat::Parquet);
        assert_eq!(stated("source"), "`\"public\"`");
        assert_eq!(
            minimal.settings(minimal.plausible(0)).source,
            SourceRule::Public
        );
        assert_eq!(minimal.input.time_unit, TimeUnit::S);
        assert_eq!(stated("max_rtt_ms"), minimal.input.max_rtt_ms.to_string());
        assert_eq!(
            stated("earliest_event_time"),
            format!("`\"{}\"`", &minimal.input.earliest_event_time[..10])
        );
        let split = format!(
            "`test_fraction` [{}], `val_fraction` [{}] and `seed` [{}]",
            minimal.split.test_fraction, minimal.split.val_fraction, minimal.split.seed
        );
        assert!(doc.contains(&split), "{split}");
    }
}
