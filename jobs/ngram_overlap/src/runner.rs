//! The overlap job on a worker: each task on a blocking thread, the last index group
//! kept for the next scan of the same group, small `.jsonl.gz` files inflated into
//! reused buffers.

use std::sync::Arc;

use probeflow_engine::error::{EngineError, Result};
use probeflow_engine::kind::{RunResult, Runner, TaskCall, TaskEnv};
use probeflow_engine::store::StoreUrl;
use probeflow_engine::thread_cpu::ThreadCpuTimer;
use protocol::{OverlapOutput, OverlapTask};

use super::*;

/// The index group a scan loaded: (job, group, groups, index files).
pub(super) type GroupKey = (String, u32, u32, Vec<String>);

/// Runs overlap tasks on a worker (each on a blocking thread); keeps the index group
/// of its last scan for the next scan of the same group, and the buffers small
/// `.jsonl.gz` files are inflated into.
#[derive(Default)]
pub struct OverlapRunner {
    index: Option<(GroupKey, Arc<ngram_index::NgramIndex>)>,
    whole: source::WholeFiles,
}

/// What a task's thread gives back: its result, the index group it used (a scan's),
/// and the inflate buffers.
pub(super) type Ran = (
    OverlapOutput,
    Option<Arc<ngram_index::NgramIndex>>,
    source::WholeFiles,
);

impl Runner<NgramOverlap> for OverlapRunner {
    async fn run(
        &mut self,
        call: TaskCall<'_, NgramOverlap>,
        env: TaskEnv<'_>,
    ) -> Result<RunResult<OverlapOutput>> {
        let settings = call.settings.clone();
        let memory = env.resources.memory_bytes;
        let output = StoreUrl::parse(&call.job.output)?;
        let handle = tokio::runtime::Handle::current();
        let task = call.task.clone();
        let attempt = call.attempt;
        let group: Option<GroupKey> = match &task {
            OverlapTask::Scan(t) => Some((
                call.job.job_id.clone(),
                t.group,
                t.groups,
                t.index_files.clone(),
            )),
            _ => None,
        };
        // The group this scan needs, if it is the one kept; any other is dropped
        // now, before the task loads a group of its own (two groups at once could
        // take the whole worker's memory).
        let cached = match (self.index.take(), &group) {
            (Some((key, index)), Some(want)) if key == *want => Some(index),
            _ => None,
        };
        let mut whole = std::mem::take(&mut self.whole);
        if whole.max != settings.whole_gzip_max {
            whole = source::WholeFiles::new(settings.whole_gzip_max);
        }
        let task_id = call.id;
        let joined = tokio::task::spawn_blocking(move || -> Result<Ran> {
                let cpu = ThreadCpuTimer::start();
                let done = |out| {
                    tracing::debug!(task = %task_id, attempt, cpu_ms = cpu.elapsed_ms(), "task CPU time");
                    out
                };
                match task {
                    OverlapTask::Scan(task) => {
                        let index = match cached {
                            Some(index) => index,
                            None => Arc::new(handle.block_on(index::load_index(
                                &output,
                                (&task.index_files, &task.index_runs),
                                &task.eval_rows,
                                (&task.lengths, settings.n.last().copied().unwrap_or(0)),
                                (task.group, task.groups, settings.partitions),
                            ))?),
                        };
                        let out = scan::run_scan(
                            &handle, &task, &index, &output, &settings, attempt, &mut whole,
                        )?;
                        Ok(done((OverlapOutput::Scan(out), Some(index), whole)))
                    }
                    OverlapTask::Index(task) => {
                        let out = index::run_index(
                            &handle,
                            &task,
                            &output,
                            &settings,
                            attempt,
                            &mut whole,
                            index::postings_budget(memory),
                        )?;
                        Ok(done((OverlapOutput::Index(out), None, whole)))
                    }
                    OverlapTask::Clean(task) => {
                        let out = clean::run_clean(&handle, &task, &output, &settings)?;
                        Ok(done((OverlapOutput::Clean(out), None, whole)))
                    }
                    OverlapTask::Report(task) => {
                        let out =
                            report::run_report(&handle, &task, &output, &settings, &mut whole)?;
                        Ok(done((OverlapOutput::Report(out), None, whole)))
                    }
                }
            })
            .await;
        let (out, index, whole) = joined
            .map_err(|e| EngineError::Runtime(format!("the task's thread failed: {e}")))??;
        self.whole = whole;
        if let (Some(key), Some(index)) = (group, index) {
            self.index = Some((key, index));
        }
        Ok(RunResult::Durable(out))
    }
}

#[cfg(feature = "fault-injection")]
impl probeflow_engine::fault::FaultHooks<NgramOverlap> for OverlapRunner {
    fn forged(&self, _call: TaskCall<'_, NgramOverlap>, output: OverlapOutput) -> OverlapOutput {
        match output {
            OverlapOutput::Index(mut o) => {
                o.shuffle_file = "../../elsewhere".into();
                OverlapOutput::Index(o)
            }
            OverlapOutput::Scan(mut o) => {
                o.events_file = "../../elsewhere".into();
                OverlapOutput::Scan(o)
            }
            report => report,
        }
    }
}
