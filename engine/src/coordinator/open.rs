//! Opening a job on an output this coordinator owns: an output already complete (its
//! completion marker this job's, over the same input) is not run again; otherwise the
//! job is planned (input listed and pinned, plan journaled) or resumed from its
//! journal (refused for another job file or changed input), and its run made ready.
//! When the run's stages are done, its final outputs and the completion record (which
//! lists them) are written here too.
//!
//! ```text
//! <marker> ─► same kind, fingerprint, inputs: AlreadyComplete │ else a Conflict
//! _job/journal/job.json ─► none: list + pin ─► plan ─► journal │ this job's: refuse changed input
//!   ─► open the kind's driver ─► replay the journaled results ─► JobRun (ready to start)
//! ```

use std::time::Instant;

use crate::completion::{self, Completion, CompletionRecord, FinalOutputs, Finished};
use crate::inputs::{list_inputs, refuse_changed_inputs};
use crate::job::JobDriver;
use crate::kind::{ProgressTotals, Progressed};
use crate::protocol::{JobContext, Payload, TaskId};
use crate::store::StoreUrl;

use crate::coordinator::run::JobRun;
use crate::coordinator::schedule::RetryPolicy;
use crate::coordinator::spec::JobSpec;
use crate::error::{EngineError, Result};
use crate::journal::{self, JobRecord, Journal};

/// The summary of `output` if it is already complete: its completion marker is
/// this job's (same kind and fingerprint) over the same input; a conflict if the job
/// or the input differ; `None` when it is not complete.
pub async fn already_complete(spec: &JobSpec, output: &StoreUrl) -> Result<Option<String>> {
    let record = match completion::read(output).await? {
        Completion::Absent => return Ok(None),
        Completion::Unreadable { marker, why } => {
            return Err(completion::another_jobs_output(
                output,
                &format!("its completion marker {marker} is not this release's: {why}"),
            ))
        }
        Completion::Complete { record, .. } => record,
    };
    let same_kind = record.kind.is_empty() || record.kind == spec.kind.name();
    if !same_kind || record.fingerprint != spec.fingerprint() {
        return Err(completion::another_jobs_output(
            output,
            "fingerprint mismatch",
        ));
    }
    refuse_changed_inputs(&spec.file.inputs(), &record.inputs, "this output was made").await?;
    Ok(Some(record.summary))
}

/// A job planned, or resumed from its journal: its run, ready to start.
pub struct OpenedJob {
    pub run: JobRun,
    /// The size of the job, for progress: its work units, and each stage's task count
    /// as far as it is known ([`crate::kind::Kind::task_counts`]).
    pub totals: ProgressTotals,
    pub stages: Vec<(&'static str, Option<u64>)>,
    /// The results replayed from the journal, for progress.
    pub replayed: Vec<(TaskId, Progressed)>,
    /// The completion record, but for the summary and the final outputs.
    pub completion: CompletionRecord,
    /// This coordinator's epoch.
    pub epoch: u32,
}

/// Plans the job of `spec` on `output` (lists and pins its input, journals the plan),
/// or resumes it from the journal there (refusing a different job file or changed
/// input). The caller owns the output (its lock).
pub async fn open_job(spec: &JobSpec, output: &StoreUrl) -> Result<OpenedJob> {
    let fingerprint = spec.fingerprint();
    let journal = Journal::load(output).await?;
    let record = match journal.job {
        Some(job) if job.fingerprint != fingerprint || job.kind != spec.kind.name() => {
            return Err(EngineError::Conflict(format!(
                "{} holds an unfinished run of a different job file ({} job, fingerprint {} vs \
                 {} job, {}); resume it with its own job file, or choose another [output] url",
                output.url,
                job.kind,
                job.fingerprint,
                spec.kind.name(),
                fingerprint
            )))
        }
        Some(job) => {
            refuse_changed_inputs(&spec.file.inputs(), &job.inputs, "the job was planned").await?;
            tracing::info!(
                tasks_done = journal.tasks.len(),
                "resuming from the journal"
            );
            job
        }
        None => {
            let listed = list_inputs(&spec.file.inputs()).await?;
            let inputs = listed.iter().map(|f| f.file.clone()).collect();
            let plan = spec
                .file
                .plan(output, spec.run.memory_per_worker, listed)
                .await?;
            // Entries left by a plan whose record was unreadable belong to that plan,
            // and so does its event log.
            output.delete_prefix("_job/journal").await?;
            output
                .delete_prefix(crate::monitor::event_log::EVENTS_DIR)
                .await?;
            let record = JobRecord {
                version: journal::JOURNAL_VERSION,
                kind: spec.kind.name().to_string(),
                fingerprint: fingerprint.clone(),
                spec: spec.file.to_json()?,
                inputs,
                plan,
            };
            output.put_json(journal::job_path(), &record).await?;
            record
        }
    };
    let replay_started = Instant::now();
    let driver = spec.file.open(output, &record.plan)?;
    let totals = driver.progress_totals();
    let results: Vec<(TaskId, &Payload)> = journal
        .tasks
        .iter()
        .map(|(task, entry)| (*task, &entry.output))
        .collect();
    let stages = spec.kind.task_counts(&record.spec, &record.plan, &results);
    let job = JobContext {
        job_id: fingerprint.clone(),
        kind: spec.kind.name().to_string(),
        output: output.url.clone(),
        settings: driver.settings()?,
    };
    // This coordinator's epoch: its attempts are numbered after every predecessor's,
    // whose results it adopts (JobRun::report).
    let (epoch, attempt_base) = journal::claim_epoch(output, journal.epoch).await?;
    tracing::info!(epoch, attempt_base, "coordinator epoch claimed");
    let mut run = JobRun::new(
        job,
        driver,
        spec.run.lease,
        spec.run.max_attempts,
        attempt_base,
        RetryPolicy::default(),
    );
    let mut replayed = Vec::new();
    for (task, entry) in journal.tasks {
        match run.replay(task, entry.attempt, &entry.output) {
            Ok(p) => replayed.push((task, p)),
            Err(e) => {
                tracing::warn!(%task, error = %e, "journal entry unusable: its task is redone")
            }
        }
    }
    if !replayed.is_empty() {
        tracing::info!(
            results = replayed.len(),
            seconds = replay_started.elapsed().as_secs_f64(),
            "journal replayed"
        );
    }
    Ok(OpenedJob {
        run,
        totals,
        stages,
        replayed,
        epoch,
        completion: CompletionRecord {
            kind: spec.kind.name().to_string(),
            release: completion::RELEASE.to_string(),
            fingerprint,
            summary: String::new(),
            inputs: record.inputs,
            outputs: None,
        },
    })
}

/// After the last stage: the kind's final outputs, then the completion record listing
/// them (the kind's final directories `final_dirs`), then the kind's clean-up of its
/// intermediate files (and the engine's: probe objects of killed coordinators). Returns
/// the kind's summary.
pub async fn write_final_outputs(
    driver: &mut dyn JobDriver,
    output: &StoreUrl,
    final_dirs: &[&str],
    completion: &CompletionRecord,
) -> Result<String> {
    let Finished { summary, files } = driver.finish(output).await?;
    let record = CompletionRecord {
        summary: summary.clone(),
        outputs: Some(FinalOutputs::new(final_dirs, files)?),
        ..completion.clone()
    };
    completion::write(output, &record).await?;
    driver.clean_up(output).await?;
    crate::conditional_writes::remove_abandoned(output).await?;
    Ok(summary)
}
