//! `coordinator verify <output>`: checks a finished output against its manifest before
//! anyone trains on it.
//!
//! ```text
//! _SUCCESS? ─► manifest.json (versions, paths inside the output)
//!   ─► every shard: fetch, size, blake3, ArrayRecord row count = the manifest's
//!   ─► train/ and test/ hold no shard files the manifest does not list
//! ```
//!
//! Works on every store the job writes to (local, `s3://`, `gs://`); each shard is
//! fetched once and checked in memory.

use std::collections::BTreeSet;

use probeflow_reader::array_record::ArrayRecordReader;
use probeflow_reader::output::{
    check_contents, check_rows, check_versions, stays_inside, SUCCESS_FILE,
};
use probeflow_reader::row::Split;
use probeflow_worker::engine::store::StoreUrl;

use crate::error::{JobError, Result};
use probeflow_worker::jobs::probe_rows::manifest::read_manifest;

/// What a successful verification found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub shards: usize,
    pub rows: u64,
    pub bytes: u64,
}

fn bad(output: &StoreUrl, what: String) -> JobError {
    JobError::Verify {
        output: output.url.clone(),
        what,
    }
}

/// Checks every shard of the output at `output_url`; the first problem is the error.
pub async fn verify(output_url: &str) -> Result<Verified> {
    let output = StoreUrl::parse(output_url)?;
    if !output.exists(&output.child(SUCCESS_FILE)).await? {
        return Err(bad(
            &output,
            format!("no {SUCCESS_FILE}: the job has not finished (see `coordinator status`)"),
        ));
    }
    let manifest = read_manifest(&output)
        .await?
        .ok_or_else(|| bad(&output, "no manifest.json".into()))?;
    check_versions(
        manifest.manifest_version,
        &manifest.row_format_version,
        &manifest.tokenizer_version,
    )
    .map_err(|what| bad(&output, what))?;
    let mut listed = BTreeSet::new();
    let mut found = Verified {
        shards: 0,
        rows: 0,
        bytes: 0,
    };
    for s in &manifest.shards {
        if !stays_inside(&s.path) {
            return Err(bad(
                &output,
                format!("the manifest names {:?}, a path outside the output", s.path),
            ));
        }
        let path = output.child(&s.path);
        let name = output.display(&path);
        let bytes = output
            .get_opt(&path)
            .await?
            .ok_or_else(|| bad(&output, format!("{name}: missing")))?;
        let hash = blake3::hash(&bytes).to_hex();
        check_contents(&name, bytes.len() as u64, hash.as_str(), s.bytes, &s.blake3)
            .map_err(|e| bad(&output, e.to_string()))?;
        let rows = ArrayRecordReader::from_bytes(name.clone(), bytes.to_vec())?.len();
        check_rows(&name, rows, s.rows).map_err(|e| bad(&output, e.to_string()))?;
        listed.insert(s.path.clone());
        found.shards += 1;
        found.rows += rows;
        found.bytes += s.bytes;
    }
    for split in Split::ALL {
        for meta in output.list(split.as_str()).await? {
            let rel = output.relative(&meta.location);
            if !listed.contains(&rel) {
                return Err(bad(
                    &output,
                    format!("{rel} is not in the manifest (a stray file from another run?)"),
                ));
            }
        }
    }
    Ok(found)
}
