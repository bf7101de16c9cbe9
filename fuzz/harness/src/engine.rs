//! What the engine reads from others: a job output's manifest (no accepted path leaves
//! the output), the messages of the wire (JSON, as `messages::Wire` decodes them) and
//! task ids, and the job file of every kind.

use std::path::{Component, Path};
use std::sync::OnceLock;

use probeflow_engine::coordinator::JobSpec;
use probeflow_engine::protocol::{
    Assignment, Registration, TaskFailure, TaskId, TaskOutput, TaskReply, WorkerTiming,
};
use probeflow_reader::output::{stays_inside, Output};

/// An output directory this process reuses: `data` is its `manifest.json`.
fn output_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join("_SUCCESS"), b"{}").expect("a marker");
        dir
    })
    .path()
}

/// Opens an output whose manifest is `data`: every shard path it accepts is a relative
/// path below the output.
pub fn manifest(data: &[u8]) {
    let root = output_dir();
    std::fs::write(root.join("manifest.json"), data).expect("the manifest written");
    let Ok(output) = Output::open(root) else {
        return;
    };
    for shard in &output.shards {
        assert!(stays_inside(&shard.path), "{:?} accepted", shard.path);
        assert!(
            Path::new(&shard.path)
                .components()
                .all(|c| matches!(c, Component::Normal(_))),
            "{:?} leaves the output",
            shard.path
        );
    }
}

/// Decodes `data` as each message body the wire carries, and as a task id; a task id
/// that parses prints back to what parses to itself.
pub fn wire(data: &[u8]) {
    let _ = serde_json::from_slice::<Result<Registration, String>>(data);
    let _ = serde_json::from_slice::<Result<Assignment, String>>(data);
    let _ = serde_json::from_slice::<Result<Result<WorkerTiming, String>, String>>(data);
    let _ = serde_json::from_slice::<Result<TaskFailure, String>>(data);
    let _ = serde_json::from_slice::<Result<TaskId, String>>(data);
    let _ = serde_json::from_slice::<Result<TaskReply, String>>(data);
    let _ = serde_json::from_slice::<Result<Result<TaskOutput, TaskFailure>, String>>(data);
    let _ = serde_json::from_slice::<Result<Option<String>, String>>(data);
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some(id) = TaskId::parse(text) {
            assert_eq!(TaskId::parse(&id.to_string()), Some(id), "{text:?}");
        }
    }
}

/// Parses `data` as a job file of any kind: an error names the file.
pub fn job_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = JobSpec::parse(text, "fuzz.toml", probeflow_jobs::KINDS) {
        assert!(e.to_string().contains("fuzz.toml"), "{e}");
    }
}
