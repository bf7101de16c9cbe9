//! The job's journal and manifest: what makes a job resumable and its output usable.
//!
//! The journal lives under `<output>/_job/journal/` as one object per event, written
//! with atomic puts (object stores cannot append):
//!
//! * `job.json` — the job's fingerprint, its input files and its plan (map tasks);
//! * `map-NNNNN.json`, `reduce-NNNNN.json` — a finished task's winning attempt and result.
//!
//! A restarted coordinator reads it back ([`Journal::load`]) and redoes only what is
//! missing; an entry that does not decode (torn by a crash) counts as missing, with a
//! warning, and a journal of another version is refused. When every reduce is done the coordinator writes `manifest.json`, then
//! `_SUCCESS`.

use std::collections::BTreeMap;

use probeflow_worker::protocol::{MapOutput, MapTask, Plausible, ReduceOutput, ShardInfo};
use probeflow_worker::store::StoreUrl;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::error::{JobError, Result};

pub const JOURNAL_VERSION: u32 = 2;
pub const MANIFEST_VERSION: u32 = 2;

/// One input file as planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    pub url: String,
    pub size: u64,
    pub etag: Option<String>,
    pub last_modified: String,
    pub rows: u64,
}

/// `job.json`: written once, when the job is planned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub version: u32,
    pub fingerprint: String,
    pub spec: serde_json::Value,
    pub inputs: Vec<InputFile>,
    pub maps: Vec<MapTask>,
    pub shards: u32,
    /// The plausibility limits, resolved when the job was planned.
    pub plausible: Plausible,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord<T> {
    pub attempt: u32,
    pub output: T,
}

/// Everything the journal holds.
#[derive(Debug, Default)]
pub struct Journal {
    pub job: Option<JobRecord>,
    pub maps: BTreeMap<usize, TaskRecord<MapOutput>>,
    pub reduces: BTreeMap<u32, TaskRecord<ReduceOutput>>,
}

pub fn job_path() -> &'static str {
    "_job/journal/job.json"
}

pub fn map_path(index: usize) -> String {
    format!("_job/journal/map-{index:05}.json")
}

pub fn reduce_path(partition: u32) -> String {
    format!("_job/journal/reduce-{partition:05}.json")
}

fn decode<T: DeserializeOwned>(out: &StoreUrl, rel: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| JobError::Journal {
        path: out.display(&out.child(rel)),
        what: e.to_string(),
    })
}

pub async fn put_json<T: Serialize>(out: &StoreUrl, rel: &str, value: &T) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| JobError::Runtime(e.to_string()))?;
    out.put(&out.child(rel), bytes).await?;
    Ok(())
}

impl Journal {
    /// Reads the journal back. A task entry that does not decode (torn by a crash
    /// mid-write, or truncated) is left out with a warning, so its task is redone; an
    /// unreadable `job.json` means the job is planned again (its task entries, which
    /// belong to that plan, are left out too). A journal of another version is an error.
    pub async fn load(out: &StoreUrl) -> Result<Journal> {
        let mut j = Journal::default();
        let Some(bytes) = out.get_opt(&out.child(job_path())).await? else {
            return Ok(j);
        };
        match decode::<JobRecord>(out, job_path(), &bytes) {
            Ok(job) if job.version != JOURNAL_VERSION => {
                return Err(JobError::Journal {
                    path: out.display(&out.child(job_path())),
                    what: format!(
                        "written by journal version {}, this coordinator reads version {JOURNAL_VERSION}: \
                         finish the job with the release that started it, or write to a new \
                         [output] url",
                        job.version
                    ),
                });
            }
            Ok(job) => j.job = Some(job),
            Err(e) => {
                tracing::warn!(error = %e, "the journal's job record is unreadable; the job is planned again (every task redone)");
                return Ok(j);
            }
        }
        for meta in out.list("_job/journal").await? {
            let name = meta.location.filename().unwrap_or_default().to_string();
            let rel = format!("_job/journal/{name}");
            let number = |prefix: &str| {
                name.strip_prefix(prefix)
                    .and_then(|r| r.strip_suffix(".json"))
                    .and_then(|n| n.parse::<u64>().ok())
            };
            let torn = |e: JobError| {
                tracing::warn!(entry = %name, error = %e, "torn journal entry: its task is redone");
            };
            if let Some(i) = number("map-") {
                let bytes = out.get_opt(&meta.location).await?.unwrap_or_default();
                match decode(out, &rel, &bytes) {
                    Ok(record) => {
                        j.maps.insert(i as usize, record);
                    }
                    Err(e) => torn(e),
                }
            } else if let Some(p) = number("reduce-") {
                let bytes = out.get_opt(&meta.location).await?.unwrap_or_default();
                match decode(out, &rel, &bytes) {
                    Ok(record) => {
                        j.reduces.insert(p as u32, record);
                    }
                    Err(e) => torn(e),
                }
            }
        }
        Ok(j)
    }
}

/// Row counts over the whole job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub input_rows: u64,
    pub kept_measurements: u64,
    pub rejected_rows: u64,
    pub rejected_by_reason: BTreeMap<String, u64>,
    pub rows: u64,
    pub sources: u64,
    pub bytes: u64,
}

/// `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub manifest_version: u32,
    pub job_fingerprint: String,
    pub row_format_version: String,
    pub tokenizer_version: String,
    pub partition_function: String,
    pub split_function: String,
    pub shards_per_split: u32,
    pub split_seed: u64,
    pub test_fraction: f64,
    pub max_row_bytes: usize,
    pub array_record_options: String,
    /// The unit of integer event times, the event-time window and the RTT ceiling the
    /// rows were checked against.
    pub plausible: Plausible,
    pub inputs: Vec<InputFile>,
    pub shards: Vec<ShardInfo>,
    pub rejects: Vec<String>,
    pub totals: Totals,
}

pub const PARTITION_FUNCTION: &str =
    "u64_le(blake3(canonical src_addr text)[0..8]) % shards_per_split";
pub const SPLIT_FUNCTION: &str =
    "test if u64_le(blake3(u64_le(split_seed) || canonical src_addr text)[0..8]) % 1000000 < test_fraction * 1000000, else train";

#[cfg(test)]
mod tests {
    use super::*;

    fn record(version: u32) -> JobRecord {
        JobRecord {
            version,
            fingerprint: "f".into(),
            spec: serde_json::Value::Null,
            inputs: vec![],
            maps: vec![],
            shards: 2,
            plausible: Plausible::default(),
        }
    }

    fn map_record() -> TaskRecord<MapOutput> {
        TaskRecord {
            attempt: 1,
            output: MapOutput {
                shuffle_file: "_job/shuffle/map-00000-a1.bin".into(),
                segments: BTreeMap::new(),
                input_rows: 3,
                kept_rows: 3,
                rejected: BTreeMap::new(),
                rejects_file: None,
            },
        }
    }

    async fn store() -> (tempfile::TempDir, StoreUrl) {
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::parse(dir.path().to_str().unwrap()).unwrap();
        (dir, url)
    }

    #[tokio::test]
    async fn torn_entries_are_left_out_and_whole_ones_kept() {
        let (_dir, out) = store().await;
        put_json(&out, job_path(), &record(JOURNAL_VERSION))
            .await
            .unwrap();
        let whole = serde_json::to_vec_pretty(&map_record()).unwrap();
        out.put(&out.child(&map_path(0)), whole.clone())
            .await
            .unwrap();
        out.put(&out.child(&map_path(1)), Vec::new()).await.unwrap();
        out.put(&out.child(&map_path(2)), whole[..whole.len() / 2].to_vec())
            .await
            .unwrap();
        out.put(&out.child(&reduce_path(0)), b"{\"attempt\":".to_vec())
            .await
            .unwrap();
        let j = Journal::load(&out).await.unwrap();
        assert_eq!(j.job, Some(record(JOURNAL_VERSION)));
        assert_eq!(j.maps.keys().copied().collect::<Vec<_>>(), vec![0]);
        assert_eq!(j.maps[&0], map_record());
        assert!(j.reduces.is_empty());
    }

    #[tokio::test]
    async fn an_unreadable_job_record_means_planning_again() {
        let (_dir, out) = store().await;
        let bytes = serde_json::to_vec_pretty(&record(JOURNAL_VERSION)).unwrap();
        out.put(&out.child(job_path()), bytes[..bytes.len() / 2].to_vec())
            .await
            .unwrap();
        let whole = serde_json::to_vec_pretty(&map_record()).unwrap();
        out.put(&out.child(&map_path(0)), whole).await.unwrap();
        let j = Journal::load(&out).await.unwrap();
        assert!(j.job.is_none());
        assert!(
            j.maps.is_empty(),
            "entries of an unreadable plan are not used"
        );
    }

    #[tokio::test]
    async fn a_journal_of_another_version_is_refused() {
        let (_dir, out) = store().await;
        put_json(&out, job_path(), &record(JOURNAL_VERSION + 1))
            .await
            .unwrap();
        let e = Journal::load(&out).await.unwrap_err().to_string();
        assert!(
            e.contains(&format!("journal version {}", JOURNAL_VERSION + 1)),
            "{e}"
        );
        assert!(
            e.contains(&format!("reads version {JOURNAL_VERSION}")),
            "{e}"
        );
    }
}
