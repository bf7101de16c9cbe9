//! `coordinator verify <output>`: checks a finished output of any kind against its
//! completion record before anyone trains on it or cleans with it (after a copy to
//! another store, say).
//!
//! ```text
//! _SUCCESS ─► the record: kind, final outputs { dirs, files }
//!   (absent: not finished; no file list: finished by an earlier release, which it says)
//!   ─► probe_rows: manifest.json (versions, paths inside the output, every shard listed)
//!   ─► every listed file: size and blake3 = the record's (read in chunks; a probe_rows
//!      shard whole, its ArrayRecord row count = the manifest's)
//!   ─► the kind's final directories hold no file the record does not list
//! ```
//!
//! Works on every store the job writes to (local, `s3://`, `gs://`); each file is
//! fetched once.

use std::collections::{BTreeMap, BTreeSet};

use probeflow_reader::array_record::ArrayRecordReader;
use probeflow_reader::output::{check_rows, check_versions, stays_inside};
use probeflow_worker::engine::completion::{self, Completion, OutputFile, COMPLETION_MARKER};
use probeflow_worker::engine::store::StoreUrl;
use probeflow_worker::jobs::probe_rows;

use crate::error::{JobError, Result};
use probe_rows::manifest::{read_manifest, Manifest};

/// What a successful verification found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The job kind that made the output.
    pub kind: String,
    /// Files listed in the completion record, and their bytes.
    pub files: usize,
    pub bytes: u64,
    /// A probe_rows output: its shards and rows, as its manifest lists them.
    pub shards: Option<(usize, u64)>,
}

/// An error of `verify` on `output`, naming the kind when it is known.
fn bad(output: &StoreUrl, kind: &str, what: String) -> JobError {
    JobError::Verify {
        output: output.url.clone(),
        what: if kind.is_empty() {
            what
        } else {
            format!("{kind} output: {what}")
        },
    }
}

/// Checks every final file of the output at `output_url`; the first problem is the
/// error.
pub async fn verify(output_url: &str) -> Result<Verified> {
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
    let mut shards = match kind.as_str() {
        probe_rows::NAME => Some(ShardCheck::load(&output, &kind).await?),
        _ => None,
    };
    let listed: BTreeMap<&str, &OutputFile> =
        outputs.files.iter().map(|f| (f.path.as_str(), f)).collect();
    if let Some(check) = &shards {
        for path in check.rows.keys() {
            if !listed.contains_key(path.as_str()) {
                return Err(bad(
                    &output,
                    &kind,
                    format!("the manifest lists {path}, which {marker} does not"),
                ));
            }
        }
    }
    let mut found = Verified {
        kind: kind.clone(),
        files: 0,
        bytes: 0,
        shards: None,
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
        let whole_shard = shards.as_ref().and_then(|c| c.rows.get(&f.path).copied());
        let stored = match whole_shard {
            // A shard is read whole, for its row count too.
            Some(rows) => match output.get_opt(&path).await? {
                Some(bytes) => {
                    let stored = OutputFile::of(f.path.clone(), &bytes);
                    if stored == *f {
                        let name = output.display(&path);
                        let got =
                            ArrayRecordReader::from_bytes(name.clone(), bytes.to_vec())?.len();
                        check_rows(&name, got, rows)
                            .map_err(|e| bad(&output, &kind, e.to_string()))?;
                        if let Some(c) = shards.as_mut() {
                            c.rows_read += got;
                        }
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
    found.shards = shards.map(|c| (c.rows.len(), c.rows_read));
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

/// A probe_rows output's own checks, from its manifest: its versions, its shard paths
/// inside the output, each shard's row count.
struct ShardCheck {
    /// Shard path → rows, as the manifest lists them.
    rows: BTreeMap<String, u64>,
    /// Rows counted in the shards read.
    rows_read: u64,
}

impl ShardCheck {
    async fn load(output: &StoreUrl, kind: &str) -> Result<ShardCheck> {
        let manifest: Manifest = read_manifest(output)
            .await?
            .ok_or_else(|| bad(output, kind, "no manifest.json".into()))?;
        check_versions(
            manifest.manifest_version,
            &manifest.row_format_version,
            &manifest.tokenizer_version,
        )
        .map_err(|what| bad(output, kind, what))?;
        let mut rows = BTreeMap::new();
        for s in &manifest.shards {
            if !stays_inside(&s.path) {
                return Err(bad(
                    output,
                    kind,
                    format!("the manifest names {:?}, a path outside the output", s.path),
                ));
            }
            rows.insert(s.path.clone(), s.rows);
        }
        Ok(ShardCheck { rows, rows_read: 0 })
    }
}
