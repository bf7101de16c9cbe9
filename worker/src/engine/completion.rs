//! The completion marker: the file a finished output has, written by the engine last,
//! whatever the kind (its name is the kind's, e.g. `_SUCCESS`; its format is this one).
//!
//! ```text
//! finish: the kind's final outputs ─► CompletionRecord { kind, fingerprint, summary, inputs } ─► <marker>
//! run again: <marker> ─► same fingerprint and inputs: already complete │ else: a Conflict
//! worker that lost the coordinator: <marker> exists ─► the job finished without it
//! ```

use serde::{Deserialize, Serialize};

use crate::engine::inputs::PinnedFile;
use crate::engine::store::StoreUrl;
use crate::error::{Result, WorkerError};

/// What a completion marker holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionRecord {
    /// The job kind (absent in markers written before the engine owned them).
    #[serde(default)]
    pub kind: String,
    /// The job's fingerprint: what determines the output bytes.
    pub fingerprint: String,
    /// The kind's one-line summary of the job.
    pub summary: String,
    /// The input the output was made from, as pinned when the job was planned.
    pub inputs: Vec<PinnedFile>,
}

/// What `output` holds under the marker name `marker`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// No marker: the output is not complete.
    Absent,
    /// A marker in this format.
    Complete(CompletionRecord),
    /// A marker that is not in this format (another tool's, or an older release's):
    /// why.
    Unreadable(String),
}

/// Reads the completion marker `marker` of `output`.
pub async fn read(output: &StoreUrl, marker: &str) -> Result<Completion> {
    let Some(bytes) = output.get_opt(&output.child(marker)).await? else {
        return Ok(Completion::Absent);
    };
    Ok(match serde_json::from_slice(&bytes) {
        Ok(record) => Completion::Complete(record),
        Err(e) => Completion::Unreadable(e.to_string()),
    })
}

/// Writes the completion marker `marker` of `output` (the job's last write).
pub async fn write(output: &StoreUrl, marker: &str, record: &CompletionRecord) -> Result<()> {
    output.put_json(marker, record).await
}

/// The error for an output that holds a finished output of another job.
pub fn another_jobs_output(output: &StoreUrl, why: &str) -> WorkerError {
    WorkerError::Conflict(format!(
        "{} already holds the output of a different job ({why}); choose another [output] \
         url or remove it",
        output.url
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_marker_is_absent_complete_or_unreadable() {
        let dir = tempfile::tempdir().unwrap();
        let output = StoreUrl::parse(&dir.path().display().to_string()).unwrap();
        assert_eq!(read(&output, "_SUCCESS").await.unwrap(), Completion::Absent);
        let record = CompletionRecord {
            kind: "word_count".into(),
            fingerprint: "f".into(),
            summary: "3 words".into(),
            inputs: vec![PinnedFile {
                url: "/in/a.txt".into(),
                size: 3,
                etag: None,
            }],
        };
        write(&output, "_SUCCESS", &record).await.unwrap();
        assert_eq!(
            read(&output, "_SUCCESS").await.unwrap(),
            Completion::Complete(record)
        );
        // An empty marker (probe_rows before the engine owned markers).
        std::fs::write(dir.path().join(".SUCCESS"), "").unwrap();
        assert!(matches!(
            read(&output, ".SUCCESS").await.unwrap(),
            Completion::Unreadable(_)
        ));
        // A marker written by the overlap job before it had a kind field.
        std::fs::write(
            dir.path().join(".SUCCESS"),
            r#"{"fingerprint":"f","summary":"s","inputs":[]}"#,
        )
        .unwrap();
        let Completion::Complete(old) = read(&output, ".SUCCESS").await.unwrap() else {
            panic!("an overlap marker of the last release reads");
        };
        assert_eq!((old.kind.as_str(), old.summary.as_str()), ("", "s"));
    }
}
