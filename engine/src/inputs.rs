//! A job's input files, listed and pinned by the engine, whatever the kind.
//!
//! ```text
//! kind: InputSource { section, paths, accepts }  ─► list_inputs ─► ListedFile × N ─► the kind's plan
//!                                                                   └─ PinnedFile × N ─► journal, completion marker
//! resume / finished output: list again ─► refuse_changed_inputs (vanished, changed, added: a Conflict)
//! ```
//!
//! A file is pinned by its URL, size and ETag (local files: inode, mtime and size). An
//! input that is not the pinned one any more would make an output that is not its
//! input's, so the engine refuses it, before a job resumes and before it calls an
//! existing output complete.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::store;

/// One of a kind's inputs: the paths of one section of its job file.
#[derive(Debug, Clone)]
pub struct InputSource {
    /// The job file section the paths come from (`input`, `eval`, `train`): named in
    /// errors.
    pub section: &'static str,
    /// URLs or paths: a file, a directory, or a glob over file names.
    pub paths: Vec<String>,
    /// The formats the kind reads, for errors ("a .parquet file").
    pub formats: &'static str,
    /// Whether the kind reads a file of this name (a directory stands for the files
    /// under it that it reads; a glob's files must all be readable).
    pub accepts: fn(&str) -> bool,
}

/// An input file as pinned when its job was planned.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PinnedFile {
    pub url: String,
    pub size: u64,
    pub etag: Option<String>,
}

/// A listed input file: its pin, which source and path listed it, and when it was
/// last modified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFile {
    /// The section of its [`InputSource`] (a kind's sources have distinct sections).
    pub source: &'static str,
    /// The path (of that source) that listed it.
    pub path: String,
    pub file: PinnedFile,
    /// RFC 3339.
    pub last_modified: String,
}

/// Lists every source's files, in the order of the sources and of their paths (each
/// path's files sorted). A path that matches nothing, a file the kind cannot read, and
/// a file listed twice are errors.
pub async fn list_inputs(sources: &[InputSource]) -> Result<Vec<ListedFile>> {
    listed(sources, true).await
}

/// The listing of [`list_inputs`]; a path that matches nothing is an error only when
/// `require_matches` (to compare with pinned files, vanished ones are differences).
async fn listed(sources: &[InputSource], require_matches: bool) -> Result<Vec<ListedFile>> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for source in sources {
        let section = source.section;
        // What the job file's paths list is the job file's problem (exit 2), as a bad
        // key is: nothing has run.
        let bad_paths = |what: String| EngineError::Spec {
            file: format!("[{section}] paths"),
            what,
        };
        for path in &source.paths {
            let (base, files) = store::list_matching_in(path, source.accepts).await?;
            if files.is_empty() && require_matches {
                return Err(bad_paths(format!("no input files match {path}")));
            }
            for meta in files {
                let url = base.display(&meta.location);
                if !(source.accepts)(&url) {
                    return Err(bad_paths(format!("{url}: not {}", source.formats)));
                }
                if !seen.insert(url.clone()) {
                    return Err(bad_paths(format!(
                        "{url} is listed twice (by {path} and an earlier path)"
                    )));
                }
                out.push(ListedFile {
                    source: section,
                    path: path.clone(),
                    file: PinnedFile {
                        url,
                        size: meta.size,
                        etag: meta.e_tag,
                    },
                    last_modified: meta.last_modified.to_rfc3339(),
                });
            }
        }
    }
    Ok(out)
}

/// Refuses an input that is not `planned` any more (a file changed, added or
/// vanished) since `since` ("the job was planned"): a [`EngineError::Conflict`] that
/// names every difference.
pub async fn refuse_changed_inputs(
    sources: &[InputSource],
    planned: &[PinnedFile],
    since: &str,
) -> Result<()> {
    let now = listed(sources, false).await?;
    let changes = store::pin_changes(
        planned.iter().map(|f| (f.url.as_str(), f.size, &f.etag)),
        now.iter()
            .map(|f| (f.file.url.as_str(), f.file.size, &f.file.etag)),
    );
    store::refuse_changes("the input", since, &changes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_source(paths: Vec<String>) -> InputSource {
        InputSource {
            section: "input",
            paths,
            formats: "a .txt file",
            accepts: |name| name.ends_with(".txt"),
        }
    }

    #[tokio::test]
    async fn inputs_are_listed_in_order_pinned_and_refused_once_changed() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.txt", "a.txt", "skip.md"] {
            std::fs::write(dir.path().join(name), name).unwrap();
        }
        let d = dir.path().display();
        let sources = [text_source(vec![format!("{d}")])];
        let listed = list_inputs(&sources).await.unwrap();
        let names: Vec<&str> = listed
            .iter()
            .map(|f| f.file.url.rsplit('/').next().unwrap())
            .collect();
        assert_eq!(names, ["a.txt", "b.txt"]);
        assert_eq!(listed[0].file.size, 5);
        let pins: Vec<PinnedFile> = listed.iter().map(|f| f.file.clone()).collect();
        refuse_changed_inputs(&sources, &pins, "x").await.unwrap();

        std::fs::write(dir.path().join("c.txt"), "c").unwrap();
        std::fs::write(dir.path().join("a.txt"), "longer").unwrap();
        let err = refuse_changed_inputs(&sources, &pins, "the job was planned")
            .await
            .unwrap_err();
        assert!(matches!(err, EngineError::Conflict(_)), "{err:?}");
        let err = err.to_string();
        assert!(
            err.contains("changed since the job was planned")
                && err.contains("changed: ")
                && err.contains("a.txt (5 → 6 bytes")
                && err.contains("added: ")
                && err.contains("c.txt"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn no_match_an_unreadable_file_and_a_file_listed_twice_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "a").unwrap();
        std::fs::write(dir.path().join("a.md"), "a").unwrap();
        let d = dir.path().display();
        // Each is the job file's error (a Spec error: exit 2), naming the section.
        let spec_error = |err: EngineError| {
            assert!(matches!(err, EngineError::Spec { .. }), "{err:?}");
            err.to_string()
        };
        let err = spec_error(
            list_inputs(&[text_source(vec![format!("{d}/*.csv")])])
                .await
                .unwrap_err(),
        );
        assert!(err.contains("[input] paths: no input files match"), "{err}");
        let err = spec_error(
            list_inputs(&[text_source(vec![format!("{d}/a.*")])])
                .await
                .unwrap_err(),
        );
        assert!(err.contains("a.md: not a .txt file"), "{err}");
        let twice = text_source(vec![format!("{d}/*.txt"), format!("{d}/a.txt")]);
        let err = spec_error(list_inputs(&[twice]).await.unwrap_err());
        assert!(err.contains("is listed twice"), "{err}");
    }
}
