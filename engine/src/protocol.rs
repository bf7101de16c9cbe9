//! The engine's messages between the coordinator and the workers, whatever the job.
//!
//! A task is a [`TaskId`] (its stage's name and its index in the stage) and a body only
//! its job kind reads (JSON); a result is a body only its job kind reads too. The engine
//! moves, leases, fences and journals them without looking inside. Every message is a
//! serde type (JSON in the journal and on the wire).

use serde::{Deserialize, Serialize};

/// Version of the coordinator ↔ worker messages; a worker of another version is refused.
pub const PROTOCOL_VERSION: u32 = 6;

/// The probeflow release (the workspace's version): what `--version` prints, the wheel's
/// and the completion record's version. A worker of another release is refused at join.
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");

/// A task's or a result's body (or a kind's plan or settings), read only by its job
/// kind: its compact JSON text, kept as one allocation. The coordinator holds one per
/// queued task and per accepted result, so at tens of thousands of tasks this is most
/// of its memory (a parsed `serde_json::Value` took several times the text's size).
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Payload(Box<serde_json::value::RawValue>);

impl Payload {
    /// `value` as a payload.
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Payload, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(Payload)
    }

    /// The payload read as a `T`.
    pub fn decode<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// Its JSON text.
    pub fn json(&self) -> &str {
        self.0.get()
    }

    /// The JSON `null`.
    pub fn null() -> Payload {
        Payload(serde_json::value::RawValue::from_string("null".to_string()).expect("null is JSON"))
    }
}

impl Default for Payload {
    fn default() -> Self {
        Payload::null()
    }
}

/// Equal when their JSON texts are: a payload is always made by serializing the same
/// types, so equal values have equal texts.
impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        self.json() == other.json()
    }
}

impl Eq for Payload {}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.json())
    }
}

/// The name of a stage of a job (`map`, `reduce`, `index`, …): at most
/// [`StageName::MAX_LEN`] ASCII letters, digits or `_`, kept inline so that a task id
/// is a small `Copy` value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StageName {
    len: u8,
    bytes: [u8; StageName::MAX_LEN],
}

impl StageName {
    pub const MAX_LEN: usize = 15;

    /// The stage called `name`; `None` if it is not a valid stage name.
    pub fn new(name: &str) -> Option<StageName> {
        let valid = !name.is_empty()
            && name.len() <= Self::MAX_LEN
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        valid.then(|| {
            let mut bytes = [0; Self::MAX_LEN];
            bytes[..name.len()].copy_from_slice(name.as_bytes());
            StageName {
                len: name.len() as u8,
                bytes,
            }
        })
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII was ever stored.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl std::fmt::Display for StageName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for StageName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl Serialize for StageName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StageName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        StageName::new(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("{name:?} is not a stage name")))
    }
}

/// A task's identity: its stage and its index in the stage. Displayed (and journaled)
/// as `<stage>-<index, 5 digits>`, e.g. `map-00042`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TaskId {
    pub stage: StageName,
    pub index: u32,
}

impl TaskId {
    /// The task `index` of stage `stage`, a name known at compile time (see
    /// [`StageName::new`]; an invalid one is a programming error).
    pub fn new(stage: &'static str, index: u32) -> TaskId {
        TaskId {
            stage: StageName::new(stage).expect("a valid stage name"),
            index,
        }
    }

    /// Parses the displayed form (`map-00042`).
    pub fn parse(text: &str) -> Option<TaskId> {
        let (stage, index) = text.rsplit_once('-')?;
        if !index.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(TaskId {
            stage: StageName::new(stage)?,
            index: index.parse().ok()?,
        })
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{:05}", self.stage, self.index)
    }
}

/// A unit of work: who it is and what its job kind needs to run it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    pub id: TaskId,
    pub body: Payload,
}

impl TaskSpec {
    pub fn id(&self) -> TaskId {
        self.id
    }
}

/// What every task of a job needs to know, fixed for the whole job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobContext {
    /// The job's identity (its fingerprint): names its scratch directories.
    pub job_id: String,
    /// The job kind that runs the tasks (`probe_rows`, `ngram_overlap`).
    pub kind: String,
    /// Output root URL.
    pub output: String,
    /// The kind's own settings, read only by it.
    pub settings: Payload,
}

/// What a finished task reports: its kind's result body.
pub type TaskOutput = Payload;

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
    /// Its release ([`RELEASE`]); empty from a release before workers sent it.
    #[serde(default)]
    pub release: String,
}

/// The coordinator's answer to a task request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum TaskReply {
    Task(Box<Assignment>),
    Wait,
    Done,
    /// This worker failed too often: it gets no more tasks (the reason).
    Excluded(String),
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

impl TaskFailure {
    /// What a worker reports for a task that ended in `e`: its message and causes, and
    /// whether another attempt could succeed ([`EngineError::fault`]).
    pub fn of(e: &crate::error::EngineError) -> TaskFailure {
        TaskFailure {
            error: e.report(),
            retryable: e.fault().retryable(),
        }
    }
}

impl std::fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_payload_is_its_compact_json_inline_in_messages_and_journal_entries() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct Body {
            file: String,
            rows: u64,
            rejected: std::collections::BTreeMap<String, u64>,
        }
        let body = Body {
            file: "s3://b/in/part-00001.parquet".into(),
            rows: 7,
            rejected: [("bad_rtt".to_string(), 2)].into(),
        };
        let task = TaskSpec {
            id: TaskId::new("map", 3),
            body: Payload::encode(&body).unwrap(),
        };
        assert_eq!(
            task.body.json(),
            r#"{"file":"s3://b/in/part-00001.parquet","rows":7,"rejected":{"bad_rtt":2}}"#
        );
        // Through a message (inside a `Result`, as on the wire) and back.
        let wire = serde_json::to_vec(&Ok::<_, String>(&task)).unwrap();
        let back: Result<TaskSpec, String> = serde_json::from_slice(&wire).unwrap();
        let back = back.unwrap();
        assert_eq!(back, task);
        assert_eq!(back.body.decode::<Body>().unwrap(), body);
        // A pretty-printed entry (journals written before payloads were compact) still
        // decodes to the same value.
        let pretty = serde_json::to_string_pretty(&serde_json::json!({"p": body_value()})).unwrap();
        #[derive(Deserialize)]
        struct Entry {
            p: Payload,
        }
        let entry: Entry = serde_json::from_str(&pretty).unwrap();
        assert_eq!(entry.p.decode::<Body>().unwrap(), body);
        assert_eq!(Payload::default().json(), "null");

        fn body_value() -> serde_json::Value {
            serde_json::json!({"file": "s3://b/in/part-00001.parquet", "rows": 7, "rejected": {"bad_rtt": 2}})
        }
    }

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

#[cfg(test)]
mod task_id_tests {
    use super::*;

    #[test]
    fn task_ids_display_parse_and_order() {
        let id = TaskId::new("map", 42);
        assert_eq!(id.to_string(), "map-00042");
        assert_eq!(TaskId::parse("map-00042"), Some(id));
        assert_eq!(
            TaskId::parse("train_scan-123456"),
            Some(TaskId::new("train_scan", 123_456))
        );
        for bad in [
            "map",
            "-1",
            "map-",
            "map-x1",
            "a/b-1",
            "sixteen_letters_-1",
            "map--1",
        ] {
            assert_eq!(TaskId::parse(bad), None, "{bad}");
        }
        assert!(TaskId::new("map", 9) < TaskId::new("map", 10));
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, r#"{"stage":"map","index":42}"#);
        assert_eq!(serde_json::from_str::<TaskId>(&json).unwrap(), id);
        assert!(serde_json::from_str::<TaskId>(r#"{"stage":"../x","index":1}"#).is_err());
    }
}
