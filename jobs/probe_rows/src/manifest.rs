//! The probe-rows job's manifest (`manifest.json`): what the output holds and how it
//! was made; written when every reduce is done, before the engine's `_SUCCESS`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::protocol::{is_zero, MapOutput, Plausible, ReduceOutput, Settings, ShardInfo};
use super::Plan;
use probeflow_engine::completion::OutputFile;
use probeflow_engine::error::{EngineError, Result};
use probeflow_engine::store::StoreUrl;

pub const MANIFEST_VERSION: u32 = 2;
/// The manifest's name in the output.
pub const MANIFEST: &str = "manifest.json";

/// One input file as planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    pub url: String,
    pub size: u64,
    pub etag: Option<String>,
    pub last_modified: String,
    pub rows: u64,
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
    /// Atlas results input: its lines, results and packets (a row is a packet entry, or
    /// a line that has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atlas: Option<crate::atlas::AtlasCounts>,
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
    /// Absent when there is no val split (0): such manifests are the two-way ones.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub val_fraction: f64,
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
/// The split rule of a job without a val split (`val_fraction` 0)…
pub const SPLIT_FUNCTION: &str =
    "test if u64_le(blake3(u64_le(split_seed) || canonical src_addr text)[0..8]) % 1000000 < test_fraction * 1000000, else train";
/// …and with one: the same bucket, test unchanged, val the buckets after test.
pub const SPLIT_FUNCTION_WITH_VAL: &str =
    "bucket = u64_le(blake3(u64_le(split_seed) || canonical src_addr text)[0..8]) % 1000000; test if bucket < test_fraction * 1000000, else val if bucket < (test_fraction + val_fraction) * 1000000, else train";

/// Writes the manifest (the engine then writes `_SUCCESS`, then [`clean_up`] runs):
/// the job's totals and its final output files (the manifest, every shard, every
/// accepted map's rejects file).
pub async fn finalize(
    output: &StoreUrl,
    fingerprint: &str,
    plan: &Plan,
    job: &Settings,
    maps: &BTreeMap<usize, MapOutput>,
    reduces: &BTreeMap<u32, ReduceOutput>,
) -> Result<(Totals, Vec<OutputFile>)> {
    let mut totals = Totals::default();
    let mut rejects = Vec::new();
    for m in maps.values() {
        totals.input_rows += m.input_rows;
        totals.kept_measurements += m.kept_rows;
        for (reason, n) in &m.rejected {
            totals.rejected_rows += n;
            *totals.rejected_by_reason.entry(reason.clone()).or_default() += n;
        }
        rejects.extend(m.rejects_file.clone());
        if let Some(counts) = &m.atlas {
            totals
                .atlas
                .get_or_insert_with(Default::default)
                .add(counts);
        }
    }
    let mut shards = Vec::new();
    let mut written_measurements = 0;
    for r in reduces.values() {
        for s in &r.shards {
            totals.rows += s.rows;
            totals.sources += s.sources;
            totals.bytes += s.bytes;
            written_measurements += s.measurements;
            shards.push(s.clone());
        }
    }
    if totals.input_rows != totals.kept_measurements + totals.rejected_rows {
        return Err(EngineError::Internal(format!(
            "inconsistent counts: {} input rows but {} kept + {} rejected",
            totals.input_rows, totals.kept_measurements, totals.rejected_rows
        )));
    }
    if written_measurements != totals.kept_measurements {
        return Err(EngineError::Internal(format!(
            "data loss check failed: {} measurements kept by maps but {} written to shards",
            totals.kept_measurements, written_measurements
        )));
    }
    shards.sort_by(|a, b| (a.split.as_str(), a.partition).cmp(&(b.split.as_str(), b.partition)));
    let manifest = Manifest {
        manifest_version: MANIFEST_VERSION,
        job_fingerprint: fingerprint.to_string(),
        row_format_version: probeflow_reader::row::codec::ROW_FORMAT_VERSION.to_string(),
        tokenizer_version: probeflow_reader::tokenizer::TOKENIZER_VERSION.to_string(),
        partition_function: PARTITION_FUNCTION.to_string(),
        split_function: if job.val_fraction > 0.0 {
            SPLIT_FUNCTION_WITH_VAL
        } else {
            SPLIT_FUNCTION
        }
        .to_string(),
        shards_per_split: job.shards,
        split_seed: job.split_seed,
        test_fraction: job.test_fraction,
        val_fraction: job.val_fraction,
        max_row_bytes: job.max_row_bytes,
        array_record_options: job.array_record_options.clone(),
        plausible: job.plausible,
        inputs: inputs_as_read(plan, maps),
        shards,
        rejects,
        totals: totals.clone(),
    };
    let mut files = vec![output.put_json_final(MANIFEST, &manifest).await?];
    files.extend(manifest.shards.iter().map(|s| OutputFile {
        path: s.path.clone(),
        bytes: s.bytes,
        blake3: s.blake3.clone(),
    }));
    for m in maps.values() {
        let Some(rejects) = &m.rejects_file else {
            continue;
        };
        let written = match &m.rejects_written {
            Some(w) if w.path == *rejects => Some(w.clone()),
            _ => OutputFile::read_back(output, rejects).await?,
        };
        files.push(written.ok_or_else(|| EngineError::Corrupt {
            file: output.display(&output.child(rejects)),
            what: "an accepted map's rejects file is missing".into(),
        })?);
    }
    Ok((totals, files))
}

/// The planned input files with their rows: an Atlas results file's rows are its
/// map's input rows (one map per file, in the same order), known once it was read.
fn inputs_as_read(plan: &Plan, maps: &BTreeMap<usize, MapOutput>) -> Vec<InputFile> {
    let mut inputs = plan.inputs.clone();
    for (task, input) in plan.maps.iter().zip(inputs.iter_mut()) {
        if task.format == crate::protocol::InputFormat::RipeAtlas && task.file == input.url {
            if let Some(m) = maps.get(&task.index) {
                input.rows = m.input_rows;
            }
        }
    }
    inputs
}

/// After `_SUCCESS`: removes the shuffle files and the losing attempts' rejects files.
pub async fn clean_up(output: &StoreUrl, maps: &BTreeMap<usize, MapOutput>) -> Result<()> {
    output.delete_prefix("_job/shuffle").await?;
    remove_losing_rejects(output, maps).await
}

/// Removes the rejects files of map attempts that were not accepted: planned names
/// (`rejects/part-<map>-a<attempt>.parquet` of a planned map) that the manifest does
/// not list. Nothing else under `rejects/` is touched.
async fn remove_losing_rejects(output: &StoreUrl, maps: &BTreeMap<usize, MapOutput>) -> Result<()> {
    let winners: std::collections::BTreeSet<&str> = maps
        .values()
        .filter_map(|m| m.rejects_file.as_deref())
        .collect();
    let mut losers = Vec::new();
    for meta in output.list("rejects").await? {
        let rel = output.relative(&meta.location);
        let planned = meta
            .location
            .filename()
            .and_then(super::map::parse_rejects_name)
            .is_some_and(|(index, _)| maps.contains_key(&index));
        if planned && !winners.contains(rel.as_str()) {
            losers.push(meta.location);
        }
    }
    output.delete_all(losers).await
}

/// Reads a finished job's manifest.
pub async fn read_manifest(output: &StoreUrl) -> Result<Option<Manifest>> {
    output.get_json(MANIFEST).await
}
