//! `coordinator status`: the state of a running or finished job from its output alone:
//! as lines ([`status`], from its journal or manifest), or as the monitor's model
//! ([`report`]: `--json`, and `--html` through the same page the coordinator serves),
//! replayed from its event log or, for an output of a release before the event log,
//! what its journal holds, with what is missing said.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::completion::{self, Completion};
use crate::job::Kinds;
use crate::protocol::{Payload, TaskId};
use crate::store::StoreUrl;

use crate::coordinator::effects::EXCLUDED_WORKERS;
use crate::error::{EngineError, Result};
use crate::journal::{JobRecord, Journal};
use crate::monitor::event_log::{self, EventLog, EPOCH_LOG_BYTES, FLUSH_INTERVAL};
use crate::monitor::model::{Source, Status, TIMELINE_ATTEMPTS};
use crate::monitor::{JobMonitor, JobState, Observation};
use crate::protocol::StageName;
use std::time::SystemTime;

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

/// The model of the job whose output is at `output_url`, from the output alone, as of
/// its last recorded event: replayed from its event log, or what its journal holds.
/// An output where no job has started is an error (exit 2).
pub async fn report(output_url: &str, kinds: Kinds) -> Result<Status> {
    let output = StoreUrl::parse(output_url)?;
    let journal = Journal::load(&output).await?;
    let Some(job) = &journal.job else {
        return Err(EngineError::Conflict(format!(
            "{}: no job has started here (no _job/journal/job.json)",
            output.url
        )));
    };
    let complete = matches!(
        completion::read(&output).await?,
        Completion::Complete { .. }
    );
    let (model, last, missing, source) = match event_log::read(&output).await? {
        Some(log) => {
            let (model, last, missing) = from_event_log(job, &output, &log, complete);
            (model, last, missing, Source::EventLog)
        }
        None => {
            let (model, last, missing) =
                from_journal(job, &journal, &output, kinds, complete).await?;
            (model, last, missing, Source::Journal)
        }
    };
    let mut status = model.status(model.ended.unwrap_or(last));
    status.source = source;
    status.missing = missing;
    Ok(status)
}

/// The event log replayed; the time of its last event; what it cannot tell.
fn from_event_log(
    job: &JobRecord,
    output: &StoreUrl,
    log: &EventLog,
    complete: bool,
) -> (JobMonitor, SystemTime, Vec<String>) {
    let model = event_log::replay(&job.kind, &output.url, log);
    let last = log
        .epochs
        .iter()
        .rev()
        .find_map(|e| e.events.last())
        .map_or(model.started, |(at, _)| *at);
    let mut missing = log.unreadable.clone();
    for e in log.epochs.iter().filter(|e| e.dropped > 0) {
        missing.push(format!(
            "coordinator epoch {} dropped {} events past its {} MiB limit: the counts and the \
             timeline miss them",
            e.epoch,
            e.dropped,
            EPOCH_LOG_BYTES >> 20
        ));
    }
    if model.timeline.len() == TIMELINE_ATTEMPTS {
        missing.push(format!(
            "the timeline shows the last {TIMELINE_ATTEMPTS} attempts"
        ));
    }
    match (model.state, complete) {
        (JobState::Succeeded, _) | (JobState::Failed | JobState::Stopped, false) => {}
        (_, true) => missing.push(
            "the output is complete, but its event log ends before: its last batch was not \
             written"
                .into(),
        ),
        (_, false) => missing.push(format!(
            "the log ends here: the job runs on (the log is written every {} s), or its \
             coordinator was stopped without a word",
            FLUSH_INTERVAL.as_secs()
        )),
    }
    (model, last, missing)
}

/// What the journal holds of a job run without an event log: each stage's tasks and
/// which are done, the coordinator epochs, whether the output is complete.
async fn from_journal(
    job: &JobRecord,
    journal: &Journal,
    output: &StoreUrl,
    kinds: Kinds,
    complete: bool,
) -> Result<(JobMonitor, SystemTime, Vec<String>)> {
    let kind = kinds.find(&job.kind).ok_or_else(|| {
        EngineError::Conflict(format!(
            "{}: a {:?} job, a kind this release does not know ({:?})",
            output.url,
            job.kind,
            kinds.names()
        ))
    })?;
    // The journal's objects' times bound the run: its plan, and its last entry.
    let times: Vec<SystemTime> = output
        .list("_job/journal")
        .await?
        .iter()
        .map(|meta| SystemTime::from(meta.last_modified))
        .collect();
    let start = times
        .iter()
        .min()
        .copied()
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let last = times.iter().max().copied().unwrap_or(start);
    let mut missing = vec![format!(
        "this output has no event log ({}/): its job was run by a release before the event \
         log, or the log was removed. Attempts, workers, failures, the timeline and the work \
         in the kind's units are not known; the stages' tasks and which are done are the \
         journal's, and the times are its files'",
        event_log::EVENTS_DIR
    )];
    let mut model = JobMonitor::new(&job.kind, &output.url, start);
    model.epoch = journal.epoch;
    model.observe(
        Observation::State {
            state: JobState::Running,
            error: None,
        },
        start,
    );
    let results: Vec<(TaskId, &Payload)> = journal
        .tasks
        .iter()
        .map(|(task, record)| (*task, &record.output))
        .collect();
    for (stage, tasks) in kind.task_counts(&job.spec, &job.plan, &results) {
        let (Some(tasks), Some(name)) = (tasks, StageName::new(stage)) else {
            missing.push(format!(
                "stage {stage}: its tasks are known once the stage before it is done"
            ));
            continue;
        };
        let tasks = (0..tasks)
            .map(|index| {
                let index = u32::try_from(index).unwrap_or(u32::MAX);
                (TaskId { stage: name, index }, 1)
            })
            .collect();
        model.observe(
            Observation::StagePlanned {
                stage: name,
                unit: "tasks".into(),
                tasks,
            },
            start,
        );
    }
    for task in journal.tasks.keys() {
        model.observe(Observation::Replayed { task: *task }, start);
    }
    if complete {
        model.observe(
            Observation::State {
                state: JobState::Succeeded,
                error: None,
            },
            last,
        );
    }
    Ok((model, last, missing))
}
