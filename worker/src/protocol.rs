//! The job's task and report messages, shared by the coordinator and the workers.
//!
//! Tasks carry only metadata and URIs, never bulk data: a map task names an input file
//! and a range of its row groups; a reduce task names a partition and the byte ranges
//! of that partition in every map output. Results carry counts, paths and checksums.
//! Every message is a serde type (JSON in the journal; bincode over the wire later).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Version of the coordinator ↔ worker messages; a worker of another version is refused.
pub const PROTOCOL_VERSION: u32 = 3;

/// What a worker process says when it joins (cluster mode).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// The worker's name, unique among the connected workers.
    pub worker: String,
    /// Its transport node name (the worker name plus a per-process suffix, so that a
    /// second process with the same worker name cannot displace the first one's session).
    pub node: String,
    /// Tasks it runs at once.
    pub capacity: u32,
    /// Sort memory per task.
    pub memory_bytes: u64,
    pub version: u32,
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

/// What every task of a job needs to know, fixed for the whole job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobContext {
    /// The job's identity (its fingerprint): names its scratch directories.
    pub job_id: String,
    /// Output root URL.
    pub output: String,
    pub shards: u32,
    pub max_row_bytes: usize,
    pub array_record_options: String,
    pub split_seed: u64,
    pub test_fraction: f64,
    pub columns: InputColumns,
    pub plausible: Plausible,
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
    /// Rows this task reads, from `skip_rows` on (checked against what is read).
    pub rows: u64,
}

/// One partition's bytes in one map output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShuffleSegment {
    pub offset: u64,
    pub len: u64,
    pub rows: u64,
}

/// A map task's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapOutput {
    /// Shuffle file path, relative to the output root.
    pub shuffle_file: String,
    /// Partition → its byte range in the shuffle file (only non-empty partitions).
    pub segments: BTreeMap<u32, ShuffleSegment>,
    pub input_rows: u64,
    pub kept_rows: u64,
    /// Reject reason → rows.
    pub rejected: BTreeMap<String, u64>,
    /// Rejects file (relative to the output root), if any row was rejected.
    pub rejects_file: Option<String>,
}

/// Sort partition `partition` from all map outputs and write its shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReduceTask {
    pub partition: u32,
    /// (shuffle file relative to the output root, segment) for every map output that has rows.
    pub inputs: Vec<(String, ShuffleSegment)>,
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
}

/// A unit of work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskSpec {
    Map(MapTask),
    Reduce(ReduceTask),
}

impl TaskSpec {
    pub fn id(&self) -> TaskId {
        match self {
            TaskSpec::Map(m) => TaskId::Map(m.index),
            TaskSpec::Reduce(r) => TaskId::Reduce(r.partition),
        }
    }
}

/// A task's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TaskId {
    Map(usize),
    Reduce(u32),
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaskId::Map(i) => write!(f, "map-{i:05}"),
            TaskId::Reduce(p) => write!(f, "reduce-{p:05}"),
        }
    }
}

/// A task leased to a worker: fenced by `attempt` and by `lease`, a random token only
/// the worker it was given to knows; heartbeats and the result must carry it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    pub task: TaskSpec,
    pub attempt: u32,
    pub lease: String,
    pub job: JobContext,
}

/// How a worker keeps in touch with the coordinator, derived from the job's lease so
/// that local and cluster mode agree: a heartbeat every quarter of the lease, and a
/// request to the coordinator waits as long as a lease (at least
/// [`WorkerTiming::MIN_REQUEST_TIMEOUT`]). Cluster workers get it when they register.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerTiming {
    pub heartbeat_ms: u64,
    pub request_timeout_ms: u64,
}

impl WorkerTiming {
    /// The shortest wait for an answer from the coordinator.
    pub const MIN_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

    pub fn for_lease(lease: std::time::Duration) -> WorkerTiming {
        WorkerTiming {
            heartbeat_ms: (lease.as_millis() as u64 / 4).max(10),
            request_timeout_ms: lease.max(Self::MIN_REQUEST_TIMEOUT).as_millis() as u64,
        }
    }

    pub fn heartbeat(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.heartbeat_ms)
    }

    pub fn request_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.request_timeout_ms)
    }
}

/// Why an attempt failed, and whether another attempt could succeed. Input that is
/// wrong (a missing column, mostly implausible values) fails the same way every time:
/// the job stops at once instead of retrying.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFailure {
    pub error: String,
    pub retryable: bool,
}

impl std::fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.error)
    }
}

/// What a finished task reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskOutput {
    Map(MapOutput),
    Reduce(ReduceOutput),
}

/// The shard file name of a partition.
pub fn shard_path(split: &str, partition: u32, shards: u32) -> String {
    format!("{split}/shard-{partition:05}-of-{shards:05}.array_record")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn heartbeats_come_four_times_a_lease_in_both_modes() {
        let t = WorkerTiming::for_lease(Duration::from_secs(1));
        assert_eq!(t.heartbeat(), Duration::from_millis(250));
        assert_eq!(t.request_timeout(), WorkerTiming::MIN_REQUEST_TIMEOUT);
        let t = WorkerTiming::for_lease(Duration::from_secs(60));
        assert_eq!(t.heartbeat(), Duration::from_secs(15));
        assert_eq!(t.request_timeout(), Duration::from_secs(60));
    }
}
