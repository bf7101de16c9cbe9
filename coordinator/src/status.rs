//! `coordinator status`: the state of a running or finished job, from its journal or
//! manifest.

use std::collections::BTreeMap;
use std::fmt::Write;

use probeflow_worker::store::StoreUrl;

use crate::error::Result;
use crate::job::{read_manifest, EXCLUDED_WORKERS};
use crate::journal::Journal;

pub async fn status(output_url: &str) -> Result<String> {
    let output = StoreUrl::parse(output_url)?;
    let mut out = String::new();
    let excluded = excluded_workers(&output).await?;
    if output.exists(&output.child("_SUCCESS")).await? {
        if let Some(m) = read_manifest(&output).await? {
            let t = &m.totals;
            let _ = writeln!(out, "{}: finished", output.url);
            let _ = writeln!(
                out,
                "  {} input rows: {} kept, {} rejected {:?}",
                t.input_rows, t.kept_measurements, t.rejected_rows, t.rejected_by_reason
            );
            let _ = writeln!(
                out,
                "  {} rows from {} sources in {} shards ({} per split), {:.1} MB",
                t.rows,
                t.sources,
                m.shards.len(),
                m.shards_per_split,
                t.bytes as f64 / 1e6
            );
            out.push_str(&excluded);
            return Ok(out);
        }
    }
    let journal = Journal::load(&output).await?;
    match &journal.job {
        None => {
            let _ = writeln!(out, "{}: no job has started here", output.url);
        }
        Some(job) => {
            let _ = writeln!(
                out,
                "{}: running or interrupted (fingerprint {})",
                output.url,
                &job.fingerprint[..16]
            );
            let _ = writeln!(
                out,
                "  map tasks {}/{}, reduce tasks {}/{}",
                journal.maps.len(),
                job.maps.len(),
                journal.reduces.len(),
                job.shards
            );
            let rows: u64 = journal.maps.values().map(|m| m.output.input_rows).sum();
            let total: u64 = job.inputs.iter().map(|f| f.rows).sum();
            let _ = writeln!(out, "  input rows mapped {rows}/{total}");
            let retried = journal
                .maps
                .values()
                .map(|m| m.attempt)
                .chain(journal.reduces.values().map(|r| r.attempt))
                .filter(|&a| a > 1)
                .count();
            if retried > 0 {
                let _ = writeln!(out, "  {retried} tasks needed more than one attempt");
            }
        }
    }
    out.push_str(&excluded);
    Ok(out)
}

/// The workers the job excluded (they kept failing), one line each; empty if none.
async fn excluded_workers(output: &StoreUrl) -> Result<String> {
    let mut out = String::new();
    let Some(bytes) = output.get_opt(&output.child(EXCLUDED_WORKERS)).await? else {
        return Ok(out);
    };
    match serde_json::from_slice::<BTreeMap<String, String>>(&bytes) {
        Ok(workers) => {
            for (worker, why) in workers {
                let _ = writeln!(out, "  worker {worker} excluded: {why}");
            }
        }
        Err(e) => {
            let _ = writeln!(out, "  (unreadable {EXCLUDED_WORKERS}: {e})");
        }
    }
    Ok(out)
}
