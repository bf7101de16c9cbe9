//! `coordinator status`: the state of a running or finished job, from its journal or
//! manifest.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::completion::{self, Completion};
use crate::job::Kinds;
use crate::protocol::{Payload, TaskId};
use crate::store::StoreUrl;

use crate::coordinator::effects::EXCLUDED_WORKERS;
use crate::error::Result;
use crate::journal::Journal;

/// The state of the job whose output is at `output_url`, as lines; `kinds`: the kinds
/// this program knows.
pub async fn status(output_url: &str, kinds: Kinds) -> Result<String> {
    let output = StoreUrl::parse(output_url)?;
    let mut out = String::new();
    let excluded = excluded_workers(&output).await?;
    let journal = Journal::load(&output).await?;
    let Some(job) = &journal.job else {
        let _ = writeln!(out, "{}: no job has started here", output.url);
        out.push_str(&excluded);
        return Ok(out);
    };
    let Some(kind) = kinds.find(&job.kind) else {
        let _ = writeln!(
            out,
            "{}: a {:?} job, a kind this release does not know ({:?})",
            output.url,
            job.kind,
            kinds.names()
        );
        return Ok(out);
    };
    match completion::read(&output).await? {
        Completion::Absent => {}
        Completion::Complete { record, .. } => {
            let _ = writeln!(out, "{}: finished ({} job)", output.url, job.kind);
            let _ = writeln!(out, "  {}", record.summary);
            for line in kind.describe_finished(&output).await? {
                let _ = writeln!(out, "  {line}");
            }
            out.push_str(&excluded);
            return Ok(out);
        }
        Completion::Unreadable { marker, why } => {
            let _ = writeln!(
                out,
                "{}: finished ({} job) by another release: its {marker} is not this release's ({why})",
                output.url,
                job.kind,
            );
            out.push_str(&excluded);
            return Ok(out);
        }
    }
    let _ = writeln!(
        out,
        "{}: running or interrupted ({} job, fingerprint {})",
        output.url,
        job.kind,
        &job.fingerprint[..16.min(job.fingerprint.len())]
    );
    let mut done: BTreeMap<&str, u64> = BTreeMap::new();
    for task in journal.tasks.keys() {
        *done.entry(task.stage.as_str()).or_default() += 1;
    }
    let results: Vec<(TaskId, &Payload)> = journal
        .tasks
        .iter()
        .map(|(task, record)| (*task, &record.output))
        .collect();
    let planned = kind.task_counts(&job.spec, &job.plan, &results);
    let mut stages: Vec<String> = planned
        .iter()
        .map(|(stage, n)| {
            let done = done.get(stage).copied().unwrap_or(0);
            match n {
                Some(n) => format!("{stage} tasks {done}/{n}"),
                None => format!("{stage} tasks {done}/? (known when the stage before is done)"),
            }
        })
        .collect();
    for (stage, n) in &done {
        if !planned.iter().any(|(s, _)| s == stage) {
            stages.push(format!("{stage} tasks {n} done"));
        }
    }
    let _ = writeln!(out, "  {}", stages.join(", "));
    let retried = journal.tasks.values().filter(|t| t.attempt > 1).count();
    if retried > 0 {
        let _ = writeln!(out, "  {retried} tasks needed more than one attempt");
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
