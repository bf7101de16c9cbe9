//! The probe-rows job's task payloads and results (inside the engine's opaque task
//! bodies), and the settings every task of a job shares.
//!
//! Tasks carry only metadata and URIs, never bulk data: a map task names an input file
//! and a range of its rows; a reduce task names a partition and the byte ranges of that
//! partition in every map output. Results carry counts, paths and checksums.

use std::collections::BTreeMap;

use probeflow_reader::row::SplitRule;
use serde::{Deserialize, Serialize};

pub use crate::atlas::result::SourceRule;

/// The map stage: one task per input row range.
pub const MAP: &str = "map";
/// The reduce stage: one task per output partition.
pub const REDUCE: &str = "reduce";

probeflow_engine::stages! {
    /// A probe-rows task: a map (task index: its index in the plan) or a reduce (task
    /// index: its partition).
    pub enum ProbeTask, ProbeOutput, ProbeDone, ProbeStage {
        Map(MAP): MapTask => MapOutput,
        Reduce(REDUCE): ReduceTask => ReduceOutput,
    }
}

/// What every task of a probe-rows job needs to know, fixed for the whole job (sent as
/// the engine context's settings).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub shards: u32,
    pub max_row_bytes: usize,
    pub array_record_options: String,
    pub split_seed: u64,
    pub test_fraction: f64,
    /// Absent in jobs planned before the val split (and whenever it is 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub val_fraction: f64,
    pub columns: InputColumns,
    pub plausible: Plausible,
    /// `[input] allow_private_sources` ([`super::scope`]); left out when false, so
    /// settings without it keep their old bytes.
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_private_sources: bool,
    /// `[input] format`; left out for Parquet (settings keep their old bytes).
    #[serde(default, skip_serializing_if = "InputFormat::is_parquet")]
    pub format: InputFormat,
    /// `[input] source` (Atlas results only); left out when `public`.
    #[serde(default, skip_serializing_if = "SourceRule::is_public")]
    pub source: SourceRule,
}

/// What the input files are (`[input] format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputFormat {
    /// Parquet, one row per packet (the default).
    #[default]
    Parquet,
    /// RIPE Atlas ping results, JSON lines ([`crate::atlas`]).
    RipeAtlas,
}

impl InputFormat {
    pub fn is_parquet(&self) -> bool {
        *self == InputFormat::Parquet
    }

    /// Whether the job reads a file of this name in this format.
    pub fn accepts(self) -> fn(&str) -> bool {
        match self {
            InputFormat::Parquet => |name| name.ends_with(".parquet"),
            InputFormat::RipeAtlas => crate::atlas::lines::is_results_file,
        }
    }

    /// The files of this format, for errors.
    pub fn described(self) -> &'static str {
        match self {
            InputFormat::Parquet => "a .parquet file",
            InputFormat::RipeAtlas => {
                "a RIPE Atlas results file (.bz2, .gz, .zst, .jsonl, .ndjson, .json, or no extension)"
            }
        }
    }
}

impl Settings {
    /// The job's train/val/test rule.
    pub fn split_rule(&self) -> probeflow_reader::error::Result<SplitRule> {
        SplitRule::new(self.split_seed, self.test_fraction, self.val_fraction)
    }
}

/// For fields that are left out of serialized settings when 0, so that settings
/// without them keep their old bytes (and fingerprints).
pub(crate) fn is_zero(f: &f64) -> bool {
    *f == 0.0
}

/// For flags that are left out of serialized settings when false (see [`is_zero`]).
pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

/// Column names in the input Parquet files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InputColumns {
    pub src_addr: String,
    pub dst_addr: String,
    pub event_time: String,
    pub rtt: String,
    pub ip_version: String,
}

impl Default for InputColumns {
    fn default() -> Self {
        InputColumns {
            src_addr: "src_addr".into(),
            dst_addr: "dst_addr".into(),
            event_time: "event_time".into(),
            rtt: "rtt".into(),
            ip_version: "ip_version".into(),
        }
    }
}

/// The unit of integer `event_time` values (`[input] time_unit`). Timestamp columns
/// carry their own unit and ignore it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    /// Seconds since the Unix epoch (the default).
    #[default]
    S,
    Ms,
    Us,
    Ns,
}

impl TimeUnit {
    pub const ALL: [TimeUnit; 4] = [TimeUnit::S, TimeUnit::Ms, TimeUnit::Us, TimeUnit::Ns];

    /// Values of this unit in one second.
    pub fn per_second(self) -> i64 {
        match self {
            TimeUnit::S => 1,
            TimeUnit::Ms => 1_000,
            TimeUnit::Us => 1_000_000,
            TimeUnit::Ns => 1_000_000_000,
        }
    }

    /// The unit of an Arrow timestamp type.
    pub fn of_arrow(unit: &arrow::datatypes::TimeUnit) -> TimeUnit {
        use arrow::datatypes::TimeUnit as A;
        match unit {
            A::Second => TimeUnit::S,
            A::Millisecond => TimeUnit::Ms,
            A::Microsecond => TimeUnit::Us,
            A::Nanosecond => TimeUnit::Ns,
        }
    }

    /// The name used in job files (`"s"`, `"ms"`, `"us"`, `"ns"`).
    pub fn as_str(self) -> &'static str {
        match self {
            TimeUnit::S => "s",
            TimeUnit::Ms => "ms",
            TimeUnit::Us => "us",
            TimeUnit::Ns => "ns",
        }
    }
}

/// What counts as a plausible measurement: the unit of integer times, the window event
/// times must fall in (inclusive, Unix seconds) and the RTT ceiling. Resolved once when
/// the job is planned (the default window ends one day after that moment), journaled,
/// and recorded in the manifest, so every attempt and every resume applies the same
/// limits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Plausible {
    pub time_unit: TimeUnit,
    pub earliest_event_time: u64,
    pub latest_event_time: u64,
    /// RTTs above this (milliseconds), and infinite ones, are rejected.
    pub max_rtt_ms: f64,
}

/// 2000-01-01T00:00:00Z: the default start of the plausible event-time window.
pub const DEFAULT_EARLIEST_EVENT_TIME: u64 = 946_684_800;
/// The default end of the window: this long after the job is planned.
pub const DEFAULT_LATEST_EVENT_TIME_MARGIN_SECONDS: u64 = 86_400;
/// The default RTT ceiling: one minute (RIPE Atlas pings time out after seconds).
pub const DEFAULT_MAX_RTT_MS: f64 = 60_000.0;

impl Default for Plausible {
    /// The default limits with the window open until 2106 (`u32::MAX` seconds); a job
    /// resolves the window's end from the moment it is planned instead.
    fn default() -> Self {
        Plausible {
            time_unit: TimeUnit::S,
            earliest_event_time: DEFAULT_EARLIEST_EVENT_TIME,
            latest_event_time: u64::from(u32::MAX),
            max_rtt_ms: DEFAULT_MAX_RTT_MS,
        }
    }
}

/// Scan `rows` rows of `row_groups` of one input file (after skipping `skip_rows`),
/// validate, partition, write one shuffle file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapTask {
    pub index: usize,
    /// Input file URL.
    pub file: String,
    pub file_size: u64,
    /// The file's ETag when planned (local: inode, mtime and size): a map refuses a
    /// file that no longer matches.
    pub file_etag: Option<String>,
    pub row_groups: std::ops::Range<usize>,
    /// Rows of those row groups skipped before this task's rows begin: a row group
    /// larger than a task is read by several tasks, each a range of its rows.
    #[serde(default)]
    pub skip_rows: u64,
    /// Rows this task reads, from `skip_rows` on (checked against what is read); 0 for
    /// Atlas results, whose rows are known once read.
    pub rows: u64,
    /// The file's format; left out for Parquet. An Atlas results file is one task,
    /// read whole (`row_groups` empty).
    #[serde(default, skip_serializing_if = "InputFormat::is_parquet")]
    pub format: InputFormat,
}

/// A map task's result. Its partitions' byte ranges are in the shuffle file's index
/// ([`probeflow_engine::shuffle::index_path`]), not here: results stay small whatever the
/// partition count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapOutput {
    /// Shuffle file path, relative to the output root.
    pub shuffle_file: String,
    pub input_rows: u64,
    pub kept_rows: u64,
    /// Reject reason → rows.
    pub rejected: BTreeMap<String, u64>,
    /// Rejects file (relative to the output root), if any row was rejected.
    pub rejects_file: Option<String>,
    /// The rejects file as written, with its size and blake3 (for the completion
    /// record). Absent from a result of a release before the record listed files: the
    /// finished job reads the file back instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejects_written: Option<probeflow_engine::completion::OutputFile>,
    /// A map of Atlas results: its lines, results and packets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atlas: Option<crate::atlas::AtlasCounts>,
}

/// Sort partition `partition` from all map outputs and write its shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReduceTask {
    pub partition: u32,
    /// The accepted attempt of every map task, whose shuffle file (and its index) the
    /// reduce reads its partition from, in map order.
    pub maps: MapAttempts,
}

/// The accepted attempt of every map task `0..n`, run-length encoded: runs of
/// `(first map, maps, attempt)`. One run when no map was retried, so a reduce task's
/// size does not grow with the number of maps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapAttempts(pub Vec<(u32, u32, u32)>);

impl MapAttempts {
    /// From each map's attempt, in map order.
    pub fn from_attempts(attempts: impl IntoIterator<Item = u32>) -> MapAttempts {
        let mut runs: Vec<(u32, u32, u32)> = Vec::new();
        for (i, attempt) in attempts.into_iter().enumerate() {
            match runs.last_mut() {
                Some((_, n, a)) if *a == attempt => *n += 1,
                _ => runs.push((i as u32, 1, attempt)),
            }
        }
        MapAttempts(runs)
    }

    /// Every (map, attempt), in map order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.0
            .iter()
            .flat_map(|&(first, n, attempt)| (first..first + n).map(move |i| (i as usize, attempt)))
    }
}

/// One written shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    pub split: String,
    pub partition: u32,
    /// Path relative to the output root.
    pub path: String,
    pub rows: u64,
    pub sources: u64,
    pub measurements: u64,
    pub bytes: u64,
    pub blake3: String,
}

/// A reduce task's result: the train and test shards of one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReduceOutput {
    pub shards: Vec<ShardInfo>,
    /// Measurements read from the maps' shuffle files (each segment's count checked
    /// against its index entry).
    pub input_rows: u64,
}

/// The shard file name of a partition.
pub fn shard_path(split: &str, partition: u32, shards: u32) -> String {
    format!("{split}/shard-{partition:05}-of-{shards:05}.array_record")
}
