//! A job output on an object store: its `_SUCCESS` and manifest read from the store,
//! with the same checks as a local output, and its split's shards as [`RemoteShard`]s.

use std::collections::BTreeSet;

use super::cache::{is_blake3_hex, RemoteShard};
use std::sync::Arc;

use super::store::{Bucket, RemoteUrl};
use crate::error::{Error, Result};
use crate::output::{
    manifest_splits, parse_manifest, split_entries, unfinished, ManifestShard, COMPLETION_MARKER,
    MANIFEST_FILE,
};
use crate::row::Split;

/// A finished output on an object store.
#[derive(Debug, Clone)]
pub struct RemoteOutput {
    pub root: RemoteUrl,
    pub bucket: Arc<Bucket>,
    pub shards: Vec<ManifestShard>,
    /// The manifest's `max_row_bytes`.
    pub max_row_bytes: Option<u64>,
}

impl RemoteOutput {
    /// Opens the output at `url`: its root (`s3://bucket/out`) or its `manifest.json`.
    /// Refuses an unfinished output and what [`crate::output::Output::open`] refuses,
    /// and anything else (a shard, a glob): a remote shard is read only as part of its
    /// output, whose manifest says what its bytes must be.
    pub fn open(url: &str) -> Result<RemoteOutput> {
        if url.contains('*') {
            return Err(Error::Input(format!(
                "{url}: globs are not read from object stores; give the output's root \
                 (the directory holding manifest.json)"
            )));
        }
        let parsed = RemoteUrl::parse(url)?;
        let root = if parsed.file_name() == Some(MANIFEST_FILE) {
            parsed.parent()
        } else if parsed
            .file_name()
            .is_some_and(|n| n.ends_with(".array_record"))
        {
            return Err(Error::Input(format!(
                "{url}: shard files are not read one by one from object stores; give the \
                 output's root (the directory holding manifest.json)"
            )));
        } else {
            parsed
        };
        let bucket = Bucket::open(&root)?;
        let manifest = root.child(MANIFEST_FILE);
        let text = bucket.get(&manifest)?;
        if !bucket.exists(&root.child(COMPLETION_MARKER))? {
            return Err(unfinished(&root.to_string()));
        }
        let text = String::from_utf8(text).map_err(|_| Error::Output {
            path: manifest.to_string(),
            what: "not a probeflow manifest: not UTF-8".into(),
        })?;
        let parsed = parse_manifest(&manifest.to_string(), &text)?;
        if let Some(bad) = parsed.shards.iter().find(|s| !is_blake3_hex(&s.blake3)) {
            return Err(Error::Output {
                path: manifest.to_string(),
                what: format!(
                    "shard {:?}: blake3 {:?} is not a digest",
                    bad.path, bad.blake3
                ),
            });
        }
        Ok(RemoteOutput {
            root,
            bucket,
            shards: parsed.shards,
            max_row_bytes: parsed.max_row_bytes,
        })
    }

    /// The shards of `split`, in the manifest's (partition) order.
    pub fn split(&self, split: &str) -> Result<Vec<RemoteShard>> {
        split.parse::<Split>()?;
        Ok(split_entries(&self.root.to_string(), &self.shards, split)?
            .into_iter()
            .map(|s| RemoteShard {
                url: self.root.child(&s.path),
                rows: s.rows,
                bytes: s.bytes,
                blake3: s.blake3.clone(),
                max_row_bytes: self.max_row_bytes,
            })
            .collect())
    }

    /// The splits the manifest lists shards of.
    pub fn splits(&self) -> Result<BTreeSet<Split>> {
        manifest_splits(&self.root.to_string(), &self.shards)
    }
}
