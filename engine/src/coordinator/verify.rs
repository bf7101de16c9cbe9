//! `coordinator verify <output>`: checks a finished output of any kind against its
//! completion record before anyone trains on it or cleans with it (after a copy to
//! another store, say).
//!
//! ```text
//! _SUCCESS ─► the record: kind, final outputs { dirs, files }
//!   (absent: not finished; no file list: finished by an earlier release, which it says)
//!   ─► the kind's own check, if it has one (Kind::output_check; probe_rows: manifest.json's
//!      versions, paths inside the output, every shard listed)
//!   ─► every listed file: size and blake3 = the record's (read in chunks; a file the
//!      kind's check wants read whole and given to it: probe_rows's shards, row counts)
//!   ─► the kind's final directories hold no file the record does not list
//! ```
//!
//! Works on every store the job writes to (local, `s3://`, `gs://`); each file is
//! fetched once.

use std::collections::{BTreeMap, BTreeSet};

use probeflow_reader::output::stays_inside;

use crate::completion::{
    self, verification_failed as bad, Completion, OutputFile, COMPLETION_MARKER,
};
use crate::error::Result;
use crate::job::Kinds;
use crate::store::StoreUrl;

/// What a successful verification found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The job kind that made the output.
    pub kind: String,
    /// Files listed in the completion record, and their bytes.
    pub files: usize,
    pub bytes: u64,
    /// What the kind's own check found, if it has one (probe_rows: "N shards, R rows
    /// match the manifest").
    pub checked: Option<String>,
}

/// Checks every final file of the output at `output_url`; the first problem is the
/// error.
pub async fn verify(output_url: &str, kinds: Kinds) -> Result<Verified> {
    let output = StoreUrl::parse(output_url)?;
    let (marker, record) = match completion::read(&output).await? {
        Completion::Absent => {
            return Err(bad(
                &output,
                "",
                format!(
                    "no {COMPLETION_MARKER}: the job has not finished (see `coordinator status`)"
                ),
            ))
        }
        Completion::Unreadable { marker, why } => {
            return Err(bad(
                &output,
                "",
                format!("its {marker} is not a completion record this release reads: {why}"),
            ))
        }
        Completion::Complete { marker, record } => (marker, record),
    };
    let kind = match (record.kind.as_str(), marker) {
        // The one kind whose records had no kind: the overlap job's, before it had.
        ("", ".SUCCESS") => "ngram_overlap".to_string(),
        ("", _) => "unknown kind's".to_string(),
        (kind, _) => kind.to_string(),
    };
    let Some(outputs) = record.outputs else {
        let by = if record.release.is_empty() {
            "an earlier release".to_string()
        } else {
            format!("release {}, an earlier release", record.release)
        };
        return Err(bad(
            &output,
            &kind,
            format!(
                "finished by {by}: its completion record ({marker}) lists no output files, \
                 so there is nothing to check them against; run the job again into a new \
                 output with this release to get one that can be verified"
            ),
        ));
    };
    let mut check = match kinds.find(&kind) {
        Some(k) => k.output_check(&output).await?,
        None => None,
    };
    let listed: BTreeMap<&str, &OutputFile> =
        outputs.files.iter().map(|f| (f.path.as_str(), f)).collect();
    if let Some(check) = &check {
        for (path, index) in check.indexed() {
            if !listed.contains_key(path.as_str()) {
                return Err(bad(
                    &output,
                    &kind,
                    format!("{index} lists {path}, which {marker} does not"),
                ));
            }
        }
    }
    let mut found = Verified {
        kind: kind.clone(),
        files: 0,
        bytes: 0,
        checked: None,
    };
    for f in &outputs.files {
        if !stays_inside(&f.path) {
            return Err(bad(
                &output,
                &kind,
                format!("{marker} lists {:?}, a path outside the output", f.path),
            ));
        }
        let path = output.child(&f.path);
        let stored = match check.as_mut().filter(|c| c.wants(&f.path)) {
            // A file the kind checks is read whole; its content is checked once its
            // bytes are the record's.
            Some(check) => match output.get_opt(&path).await? {
                Some(bytes) => {
                    let stored = OutputFile::of(f.path.clone(), &bytes);
                    if stored == *f {
                        check
                            .check(&output.display(&path), &f.path, bytes)
                            .map_err(|what| bad(&output, &kind, what))?;
                    }
                    Some(stored)
                }
                None => None,
            },
            None => OutputFile::read_back(&output, &f.path).await?,
        };
        let stored = stored.ok_or_else(|| {
            bad(
                &output,
                &kind,
                format!("{}: missing (listed in {marker})", f.path),
            )
        })?;
        if let Some(what) = differs(&stored, f, marker) {
            return Err(bad(&output, &kind, what));
        }
        found.files += 1;
        found.bytes += stored.bytes;
    }
    for dir in &outputs.dirs {
        if !stays_inside(dir) {
            return Err(bad(
                &output,
                &kind,
                format!("{marker} names {dir:?} as a final directory, outside the output"),
            ));
        }
        let mut strays = BTreeSet::new();
        for meta in output.list(dir).await? {
            let rel = output.relative(&meta.location);
            if !listed.contains_key(rel.as_str()) {
                strays.insert(rel);
            }
        }
        if let Some(first) = strays.first() {
            return Err(bad(
                &output,
                &kind,
                format!(
                    "{first} is not listed in {marker} ({} such file(s) in {dir}/; a stray \
                     from another run?)",
                    strays.len()
                ),
            ));
        }
    }
    found.checked = check.map(|c| c.summary());
    Ok(found)
}

/// How the file as `stored` differs from its entry `listed` in `marker`, if it does.
fn differs(stored: &OutputFile, listed: &OutputFile, marker: &str) -> Option<String> {
    if stored.bytes != listed.bytes {
        return Some(format!(
            "{}: {} bytes, {marker} says {} (cut short or replaced?)",
            listed.path, stored.bytes, listed.bytes
        ));
    }
    (stored.blake3 != listed.blake3).then(|| {
        format!(
            "{}: blake3 {} does not match {marker}'s {} (the file changed)",
            listed.path, stored.blake3, listed.blake3
        )
    })
}
