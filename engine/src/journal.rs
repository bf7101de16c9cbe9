//! The engine's journal: what makes a job resumable, whatever its kind.
//!
//! The journal lives under `<output>/_job/journal/` as one object per event, written
//! with atomic puts (object stores cannot append):
//!
//! Written by the coordinator; read by it on resume and by a worker that lost the
//! coordinator after reporting (was its attempt the accepted one?).
//!
//! * `job.json`: the job's kind, fingerprint, settings and plan (opaque to the engine);
//! * `<stage>-NNNNN.json` (e.g. `map-00042.json`): a finished task's winning attempt
//!   and its result (opaque to the engine too).
//!
//! A restarted coordinator reads it back ([`Journal::load`]) and redoes only what is
//! missing; an entry that does not decode (torn by a crash) counts as missing, with a
//! warning, and a journal of another version is refused.

use std::collections::BTreeMap;

use crate::inputs::PinnedFile;
use crate::protocol::{Payload, TaskId};
use crate::store::StoreUrl;
use futures::{StreamExt, TryStreamExt};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::error::{EngineError, Result};

pub const JOURNAL_VERSION: u32 = 5;

/// Journal entries read at once when resuming.
const JOURNAL_READS_IN_FLIGHT: usize = 64;

/// `job.json`: written once, when the job is planned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub version: u32,
    /// The job kind (`probe_rows`, `ngram_overlap`).
    pub kind: String,
    pub fingerprint: String,
    /// The kind's job file sections, as JSON.
    pub spec: Payload,
    /// The input files as pinned when the job was planned (refused if they change).
    pub inputs: Vec<PinnedFile>,
    /// The kind's plan.
    pub plan: Payload,
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
    pub tasks: BTreeMap<TaskId, TaskRecord<Payload>>,
    /// The highest coordinator epoch claimed on this job ([`claim_epoch`]); 0: none.
    pub epoch: u32,
}

/// Attempt numbers a coordinator epoch may grant: epoch `e` numbers its attempts of a
/// task from `(e - 1) × ATTEMPTS_PER_EPOCH + 1`, so a coordinator's attempts (and the
/// files named by them) never collide with a predecessor's, whose worker may still be
/// writing them. `[run] max_attempts` is at most this.
pub const ATTEMPTS_PER_EPOCH: u32 = crate::settings::MAX_ATTEMPTS;

/// The journal's record of the coordinators that ran this job, one object each:
/// `_job/journal/epochs/NNNNN.json`.
const EPOCHS: &str = "_job/journal/epochs";

/// Claims the next coordinator epoch of the job at `out` (`last`: the highest one
/// found in its journal), by creating its record (create-only, so that two
/// coordinators never get the same one): the epoch, and the attempt base of its
/// attempts. Called by the owner of the output lock, after the job's record exists.
pub async fn claim_epoch(out: &StoreUrl, last: u32) -> Result<(u32, u32)> {
    // A create-only put is not retried by the store client when its connection fails;
    // trying it again is safe (a create whose answer was lost shows as taken, and the
    // next epoch is claimed).
    let mut retry = crate::store::ConnectionRetry::new(out)?;
    let mut epoch = last + 1;
    loop {
        let base =
            (epoch - 1)
                .checked_mul(ATTEMPTS_PER_EPOCH)
                .ok_or_else(|| EngineError::Journal {
                    path: out.display(&out.child(EPOCHS)),
                    what: format!("{epoch} coordinator epochs: no attempt numbers left"),
                })?;
        let record = serde_json::json!({ "epoch": epoch, "attempt_base": base });
        let path = out.child(&format!("{EPOCHS}/{epoch:05}.json"));
        match out
            .put_if_absent(&path, record.to_string().into_bytes())
            .await
        {
            Ok(Some(_)) => return Ok((epoch, base)),
            Ok(None) => epoch += 1,
            Err(EngineError::Store {
                location,
                source: object_store::Error::Generic { source, .. },
            }) if retry.allowed() => {
                tracing::warn!(%location, error = %source, "claiming the coordinator epoch failed; trying again");
                retry.wait().await;
            }
            Err(e) => return Err(e),
        }
    }
}

pub fn job_path() -> &'static str {
    "_job/journal/job.json"
}

/// The journal entry of finished task `task`, relative to the output root: written by
/// the coordinator when it accepts the task's result; read back on resume, and by a
/// worker that cannot tell whether its report arrived ([`read_entry`]).
pub fn task_path(task: TaskId) -> String {
    format!("_job/journal/{task}.json")
}

/// The journal entry of `task` in the output at `out`, if it has one.
pub async fn read_entry(out: &StoreUrl, task: TaskId) -> Result<Option<TaskRecord<Payload>>> {
    out.get_json(&task_path(task)).await
}

/// Writes the journal entry of attempt `attempt` of `task`, whose result is `output`:
/// the result counts once this returns `Ok` (an error says why, naming the entry).
pub async fn write_entry(
    out: &StoreUrl,
    task: TaskId,
    attempt: u32,
    output: &Payload,
) -> std::result::Result<(), String> {
    let bytes =
        serde_json::to_vec_pretty(&TaskRecord { attempt, output }).map_err(|e| e.to_string())?;
    out.put(&out.child(&task_path(task)), bytes)
        .await
        .map_err(|e| e.to_string())
}

fn decode<T: DeserializeOwned>(out: &StoreUrl, rel: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| EngineError::Journal {
        path: out.display(&out.child(rel)),
        what: e.to_string(),
    })
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
        // Decoded once; the version is checked before the record's shape, which
        // another version need not share.
        let value = decode::<serde_json::Value>(out, job_path(), &bytes);
        if let Some(v) = value.as_ref().ok().and_then(|v| v.get("version")?.as_u64()) {
            if v != u64::from(JOURNAL_VERSION) {
                return Err(EngineError::Journal {
                    path: out.display(&out.child(job_path())),
                    what: format!(
                        "written by journal version {v}, this coordinator reads version {JOURNAL_VERSION}: \
                         finish the job with the release that started it, or write to a new \
                         [output] url"
                    ),
                });
            }
        }
        let record = value.and_then(|v| {
            serde_json::from_value::<JobRecord>(v).map_err(|e| EngineError::Journal {
                path: out.display(&out.child(job_path())),
                what: e.to_string(),
            })
        });
        match record {
            Ok(job) => j.job = Some(job),
            Err(e) => {
                tracing::warn!(error = %e, "the journal's job record is unreadable; the job is planned again (every task redone)");
                return Ok(j);
            }
        }
        // Entries are read concurrently: resuming from 20 000 of them on an object
        // store takes seconds, not 20 000 round trips one after the other.
        let listed = out.list("_job/journal").await?;
        j.epoch = listed
            .iter()
            .filter(|meta| out.relative(&meta.location).starts_with(EPOCHS))
            .filter_map(|meta| {
                meta.location
                    .filename()?
                    .strip_suffix(".json")?
                    .parse()
                    .ok()
            })
            .max()
            .unwrap_or(0);
        let entries: Vec<(TaskId, String, object_store::path::Path)> = listed
            .into_iter()
            .filter_map(|meta| {
                let name = meta.location.filename().unwrap_or_default().to_string();
                let task = name.strip_suffix(".json").and_then(TaskId::parse)?;
                Some((task, name, meta.location))
            })
            .collect();
        let read: Vec<(TaskId, String, Vec<u8>)> = futures::stream::iter(entries.into_iter().map(
            |(task, name, location)| async move {
                let bytes = out.get_opt(&location).await?.unwrap_or_default();
                Ok::<_, EngineError>((task, name, bytes.to_vec()))
            },
        ))
        .buffered(JOURNAL_READS_IN_FLIGHT)
        .try_collect()
        .await?;
        for (task, name, bytes) in read {
            let rel = format!("_job/journal/{name}");
            match decode(out, &rel, &bytes) {
                Ok(record) => {
                    j.tasks.insert(task, record);
                }
                Err(e) => {
                    tracing::warn!(entry = %name, error = %e, "torn journal entry: its task is redone");
                }
            }
        }
        Ok(j)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_epoch_claim_whose_connection_fails_is_tried_again() {
        let store = std::sync::Arc::new(crate::store::failing::TestStore {
            creates: 2.into(),
            ..Default::default()
        });
        let out = store.url("s3://bed/out", "out");
        assert_eq!(claim_epoch(&out, 0).await.unwrap(), (1, 0));
        assert_eq!(claim_epoch(&out, 1).await.unwrap(), (2, ATTEMPTS_PER_EPOCH));
        // A claim whose answer was lost took its epoch: the next one is claimed.
        assert_eq!(
            claim_epoch(&out, 1).await.unwrap(),
            (3, 2 * ATTEMPTS_PER_EPOCH)
        );
    }

    fn record(version: u32) -> JobRecord {
        JobRecord {
            version,
            kind: "probe_rows".into(),
            fingerprint: "f".into(),
            inputs: Vec::new(),
            spec: Payload::null(),
            plan: Payload::encode(&serde_json::json!({"maps": [1, 2]})).unwrap(),
        }
    }

    fn map_record() -> TaskRecord<Payload> {
        TaskRecord {
            attempt: 1,
            output: Payload::encode(
                &serde_json::json!({"shuffle_file": "_job/shuffle/map-00000-a1.bin", "rows": 3}),
            )
            .unwrap(),
        }
    }

    fn map_path(index: u32) -> String {
        task_path(TaskId::new("map", index))
    }

    fn reduce_path(index: u32) -> String {
        task_path(TaskId::new("reduce", index))
    }

    async fn store() -> (tempfile::TempDir, StoreUrl) {
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::parse(dir.path().to_str().unwrap()).unwrap();
        (dir, url)
    }

    #[tokio::test]
    async fn torn_entries_are_left_out_and_whole_ones_kept() {
        let (_dir, out) = store().await;
        out.put_json(job_path(), &record(JOURNAL_VERSION))
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
        assert_eq!(
            j.tasks.keys().copied().collect::<Vec<_>>(),
            vec![TaskId::new("map", 0)]
        );
        assert_eq!(j.tasks[&TaskId::new("map", 0)], map_record());
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
            j.tasks.is_empty(),
            "entries of an unreadable plan are not used"
        );
    }

    #[tokio::test]
    async fn a_journal_of_another_version_is_refused() {
        let (_dir, out) = store().await;
        out.put_json(job_path(), &record(JOURNAL_VERSION + 1))
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
