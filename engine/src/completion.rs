//! The completion record: the file a finished output has, written by the engine last,
//! the same for every kind, under one name ([`COMPLETION_MARKER`], `_SUCCESS`). It says
//! which job made the output from which input, and lists every final output file with
//! its size and blake3, so that `coordinator verify` can check any kind's output after
//! a copy to another store.
//!
//! ```text
//! finish: the kind's final outputs ─► Finished { summary, files }
//!   ─► CompletionRecord { kind, release, fingerprint, summary, inputs, outputs { dirs, files } } ─► _SUCCESS
//! run again: read() ─► same fingerprint and inputs: already complete │ else: a Conflict
//! worker that lost the coordinator: exists() ─► the job finished without it
//! verify: read() ─► every listed file's size and blake3; nothing unlisted in `dirs`
//! ```
//!
//! Markers of earlier releases are read too ([`EARLIER_COMPLETION_MARKERS`]: the overlap
//! job's `.SUCCESS`); their records list no files ([`CompletionRecord::outputs`] is
//! `None`).

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::inputs::PinnedFile;
use crate::store::StoreUrl;

pub use probeflow_reader::output::{COMPLETION_MARKER, EARLIER_COMPLETION_MARKERS};

/// The release that writes completion records.
pub use crate::protocol::RELEASE;

/// A final output file: its path relative to the output root, size and blake3 (hex).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputFile {
    pub path: String,
    pub bytes: u64,
    pub blake3: String,
}

impl OutputFile {
    /// The entry of `bytes` written at `path`.
    pub fn of(path: impl Into<String>, bytes: &[u8]) -> OutputFile {
        OutputFile {
            path: path.into(),
            bytes: bytes.len() as u64,
            blake3: blake3::hash(bytes).to_hex().to_string(),
        }
    }

    /// The entry of the file at `path` as it is stored now, read back in chunks (for a
    /// file whose writer did not report its digest); `None` if it does not exist.
    pub async fn read_back(output: &StoreUrl, path: &str) -> Result<Option<OutputFile>> {
        let mut hasher = blake3::Hasher::new();
        let size = output
            .read_chunks(&output.child(path), |chunk| {
                hasher.update(chunk);
            })
            .await?;
        Ok(size.map(|bytes| OutputFile {
            path: path.to_string(),
            bytes,
            blake3: hasher.finalize().to_hex().to_string(),
        }))
    }
}

/// What a kind's finish gives the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// A one-line summary of the job.
    pub summary: String,
    /// Every final output file (any order; the engine sorts them).
    pub files: Vec<OutputFile>,
}

/// The output's final files, as the completion record lists them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalOutputs {
    /// The directories (relative to the output root) that hold final files only: a file
    /// in them that is not listed is a stray.
    pub dirs: Vec<String>,
    /// Every final file, sorted by path.
    pub files: Vec<OutputFile>,
}

impl FinalOutputs {
    /// The final outputs of a kind with final directories `dirs`: `files` sorted, each
    /// path inside the output and listed once.
    pub fn new(dirs: &[&str], mut files: Vec<OutputFile>) -> Result<FinalOutputs> {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        for (i, f) in files.iter().enumerate() {
            if !probeflow_reader::output::stays_inside(&f.path) {
                return Err(EngineError::Internal(format!(
                    "a final output file {:?} outside the output",
                    f.path
                )));
            }
            if i > 0 && files[i - 1].path == f.path {
                return Err(EngineError::Internal(format!(
                    "the final output file {} listed twice",
                    f.path
                )));
            }
        }
        Ok(FinalOutputs {
            dirs: dirs.iter().map(|d| d.to_string()).collect(),
            files,
        })
    }
}

/// What a completion marker holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionRecord {
    /// The job kind (absent in markers written before the engine owned them).
    #[serde(default)]
    pub kind: String,
    /// The release that wrote it (absent in earlier releases' markers).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub release: String,
    /// The job's fingerprint: what determines the output bytes.
    pub fingerprint: String,
    /// The kind's one-line summary of the job.
    pub summary: String,
    /// The input the output was made from, as pinned when the job was planned.
    pub inputs: Vec<PinnedFile>,
    /// The final output files (absent in earlier releases' markers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<FinalOutputs>,
}

/// What `output` holds as its completion marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// No marker: the output is not complete.
    Absent,
    /// A marker in this format, under the name `marker` (this release's, or an earlier
    /// one's).
    Complete {
        marker: &'static str,
        record: CompletionRecord,
    },
    /// A marker that is not in this format (another tool's, or an older release's):
    /// why.
    Unreadable { marker: &'static str, why: String },
}

/// The marker names, this release's first.
fn marker_names() -> impl Iterator<Item = &'static str> {
    std::iter::once(COMPLETION_MARKER).chain(EARLIER_COMPLETION_MARKERS)
}

/// Reads the completion marker of `output` (this release's name first, then the
/// earlier ones').
pub async fn read(output: &StoreUrl) -> Result<Completion> {
    for marker in marker_names() {
        let Some(bytes) = output.get_opt(&output.child(marker)).await? else {
            continue;
        };
        return Ok(match serde_json::from_slice(&bytes) {
            Ok(record) => Completion::Complete { marker, record },
            Err(e) => Completion::Unreadable {
                marker,
                why: e.to_string(),
            },
        });
    }
    Ok(Completion::Absent)
}

/// Whether `output` has a completion marker (this release's or an earlier one's).
pub async fn exists(output: &StoreUrl) -> Result<bool> {
    for marker in marker_names() {
        if output.exists(&output.child(marker)).await? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Writes the completion marker of `output` (the job's last write).
pub async fn write(output: &StoreUrl, record: &CompletionRecord) -> Result<()> {
    output.put_json(COMPLETION_MARKER, record).await
}

/// The error for an output that holds a finished output of another job.
pub fn another_jobs_output(output: &StoreUrl, why: &str) -> EngineError {
    EngineError::Conflict(format!(
        "{} already holds the output of a different job ({why}); choose another [output] \
         url or remove it",
        output.url
    ))
}

/// Removes an attempt's planned files (`files`, [`crate::kind::Kind::attempt_files`])
/// from `output` when the job finished without that attempt: only once the output has
/// its completion record (before that, a resumed coordinator may still accept the
/// attempt, and the finishing job removes its work directories itself). True if the
/// files were removed (deleting a file that is not there is not an error).
pub(crate) async fn discard_attempt(output: &StoreUrl, files: &[String]) -> Result<bool> {
    if files.is_empty() || !exists(output).await? {
        return Ok(false);
    }
    for f in files {
        output.delete(&output.child(f)).await?;
    }
    Ok(true)
}

/// The error of `coordinator verify` on `output` of kind `kind` (empty: not known yet).
pub fn verification_failed(output: &StoreUrl, kind: &str, what: String) -> EngineError {
    EngineError::Verify {
        output: output.url.clone(),
        what: if kind.is_empty() {
            what
        } else {
            format!("{kind} output: {what}")
        },
    }
}

/// A kind's own check of a finished output, beyond the completion record's sizes and
/// digests ([`crate::kind::Kind::output_check`]): its index of the output (probe_rows:
/// the manifest) and the content of the files it names (each shard's row count).
pub trait OutputCheck: Send {
    /// The files the kind's index lists, each with the index's name: every one must be
    /// in the completion record.
    fn indexed(&self) -> Vec<(String, &'static str)>;
    /// Whether the file at `path` (relative to the output) is read whole and given to
    /// [`Self::check`].
    fn wants(&self, path: &str) -> bool;
    /// Checks the content of the file at `path` (`name`: its full name, for messages),
    /// whose size and digest are the record's. The error says what is wrong.
    fn check(
        &mut self,
        name: &str,
        path: &str,
        bytes: bytes::Bytes,
    ) -> std::result::Result<(), String>;
    /// What was checked, for the line on success (e.g. "64 shards, 2000000 rows match
    /// the manifest").
    fn summary(&self) -> String;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_attempts_files_are_removed_only_once_the_job_is_complete() {
        let dir = tempfile::tempdir().unwrap();
        let output = StoreUrl::parse(&dir.path().display().to_string()).unwrap();
        let files = vec!["_job/work/a-00003-a2".to_string()];
        let file = dir.path().join(&files[0]);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, b"late").unwrap();
        // The job still runs: the file may be the one a resumed coordinator accepts.
        assert!(!discard_attempt(&output, &files).await.unwrap());
        assert!(file.exists());
        std::fs::write(dir.path().join(COMPLETION_MARKER), b"{}").unwrap();
        assert!(discard_attempt(&output, &files).await.unwrap());
        assert!(!file.exists());
        // Already gone: still fine; no files: nothing to do.
        assert!(discard_attempt(&output, &files).await.unwrap());
        assert!(!discard_attempt(&output, &[]).await.unwrap());
    }

    fn record() -> CompletionRecord {
        CompletionRecord {
            kind: "word_count".into(),
            release: RELEASE.into(),
            fingerprint: "f".into(),
            summary: "3 words".into(),
            inputs: vec![PinnedFile {
                url: "/in/a.txt".into(),
                size: 3,
                etag: None,
            }],
            outputs: Some(
                FinalOutputs::new(&["counts"], vec![OutputFile::of("counts/a.tsv", b"a\t1\n")])
                    .unwrap(),
            ),
        }
    }

    #[tokio::test]
    async fn a_marker_is_absent_complete_or_unreadable() {
        let dir = tempfile::tempdir().unwrap();
        let output = StoreUrl::parse(&dir.path().display().to_string()).unwrap();
        assert_eq!(read(&output).await.unwrap(), Completion::Absent);
        assert!(!exists(&output).await.unwrap());
        write(&output, &record()).await.unwrap();
        assert!(dir.path().join("_SUCCESS").exists());
        assert_eq!(
            read(&output).await.unwrap(),
            Completion::Complete {
                marker: "_SUCCESS",
                record: record()
            }
        );
        // An empty marker (probe_rows before the engine owned markers).
        std::fs::write(dir.path().join("_SUCCESS"), "").unwrap();
        assert!(matches!(
            read(&output).await.unwrap(),
            Completion::Unreadable {
                marker: "_SUCCESS",
                ..
            }
        ));
    }

    #[tokio::test]
    async fn an_earlier_releases_overlap_marker_is_recognised() {
        let dir = tempfile::tempdir().unwrap();
        let output = StoreUrl::parse(&dir.path().display().to_string()).unwrap();
        // The overlap job's `.SUCCESS` of the last release: a kind, no release or files.
        std::fs::write(
            dir.path().join(".SUCCESS"),
            r#"{"kind":"ngram_overlap","fingerprint":"f","summary":"s","inputs":[]}"#,
        )
        .unwrap();
        assert!(exists(&output).await.unwrap());
        let Completion::Complete { marker, record } = read(&output).await.unwrap() else {
            panic!("an overlap marker of the last release reads");
        };
        assert_eq!(marker, ".SUCCESS");
        assert_eq!(
            (record.kind.as_str(), record.release.as_str()),
            ("ngram_overlap", "")
        );
        assert_eq!(record.outputs, None);
        // …and of the release before, without a kind.
        std::fs::write(
            dir.path().join(".SUCCESS"),
            r#"{"fingerprint":"f","summary":"s","inputs":[]}"#,
        )
        .unwrap();
        let Completion::Complete { record, .. } = read(&output).await.unwrap() else {
            panic!("an overlap marker without a kind reads");
        };
        assert_eq!(record.kind, "");
        // This release's marker is read first.
        write(&output, &record_of_kind("ngram_overlap"))
            .await
            .unwrap();
        assert!(matches!(
            read(&output).await.unwrap(),
            Completion::Complete {
                marker: "_SUCCESS",
                ..
            }
        ));
    }

    fn record_of_kind(kind: &str) -> CompletionRecord {
        CompletionRecord {
            kind: kind.into(),
            ..record()
        }
    }

    #[test]
    fn final_outputs_are_sorted_inside_the_output_and_listed_once() {
        let a = OutputFile::of("stats/b.jsonl", b"b");
        let b = OutputFile::of("manifest.json", b"{}");
        let outputs = FinalOutputs::new(&["stats"], vec![a.clone(), b.clone()]).unwrap();
        assert_eq!(outputs.files, vec![b, a.clone()]);
        let err = FinalOutputs::new(&[], vec![a.clone(), a]).unwrap_err();
        assert!(err.to_string().contains("listed twice"), "{err}");
        let err = FinalOutputs::new(&[], vec![OutputFile::of("../x", b"")]).unwrap_err();
        assert!(err.to_string().contains("outside the output"), "{err}");
    }

    #[tokio::test]
    async fn a_file_read_back_has_the_digest_of_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let output = StoreUrl::parse(&dir.path().display().to_string()).unwrap();
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::create_dir(dir.path().join("rejects")).unwrap();
        std::fs::write(dir.path().join("rejects/a.jsonl"), &bytes).unwrap();
        let read = OutputFile::read_back(&output, "rejects/a.jsonl")
            .await
            .unwrap();
        assert_eq!(read, Some(OutputFile::of("rejects/a.jsonl", &bytes)));
        assert_eq!(
            OutputFile::read_back(&output, "rejects/b").await.unwrap(),
            None
        );
    }
}
