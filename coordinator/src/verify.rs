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
use probeflow_reader::output::{SPLITS, SUCCESS_FILE};
use probeflow_worker::store::StoreUrl;

use crate::error::{JobError, Result};
use crate::job::read_manifest;

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
    if manifest.tokenizer_version != probeflow_reader::tokenizer::TOKENIZER_VERSION
        || manifest.row_format_version != probeflow_reader::row::codec::ROW_FORMAT_VERSION
    {
        return Err(bad(
            &output,
            format!(
                "made for row format {:?} / tokenizer {:?}; this release has {:?} / {:?}",
                manifest.row_format_version,
                manifest.tokenizer_version,
                probeflow_reader::row::codec::ROW_FORMAT_VERSION,
                probeflow_reader::tokenizer::TOKENIZER_VERSION
            ),
        ));
    }
    let mut listed = BTreeSet::new();
    let mut found = Verified {
        shards: 0,
        rows: 0,
        bytes: 0,
    };
    for s in &manifest.shards {
        let inside = std::path::Path::new(&s.path)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !inside {
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
        if bytes.len() as u64 != s.bytes {
            return Err(bad(
                &output,
                format!(
                    "{name}: {} bytes, the manifest says {}",
                    bytes.len(),
                    s.bytes
                ),
            ));
        }
        let hash = blake3::hash(&bytes).to_hex();
        if hash.as_str() != s.blake3 {
            return Err(bad(
                &output,
                format!(
                    "{name}: blake3 {hash} does not match the manifest's {}",
                    s.blake3
                ),
            ));
        }
        let rows = ArrayRecordReader::from_bytes(name.clone(), bytes.to_vec())?.len();
        if rows != s.rows {
            return Err(bad(
                &output,
                format!("{name}: {rows} rows, the manifest says {}", s.rows),
            ));
        }
        listed.insert(s.path.clone());
        found.shards += 1;
        found.rows += rows;
        found.bytes += s.bytes;
    }
    for split in SPLITS {
        for meta in output.list(split).await? {
            let rel = meta
                .location
                .as_ref()
                .strip_prefix(output.root.as_ref())
                .unwrap_or(meta.location.as_ref())
                .trim_start_matches('/')
                .to_string();
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
