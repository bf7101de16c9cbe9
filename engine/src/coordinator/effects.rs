//! The one interpreter of a job run's effects ([`Effect`], what the pure [`JobRun`]
//! asks for), shared by the coordinator actor and the engine's test bed, so that what
//! the tests drive is what the coordinator does.
//!
//! ```text
//! JobRun ─► Effect × N ─► EffectHandler::apply ─┬─ Journal ─► JournalWrites::start (the actor: a write off the
//!                                                │             actor, confirmed by a message; the bed: queued)
//!                                                ├─ StagePlanned / TaskDone ─► progress
//!                                                ├─ WriteProgress ─► the output writer (in order, off the actor)
//!                                                ├─ RecordExcluded ─► _job/excluded-workers.json
//!                                                ├─ DiscardLate ─► the attempt's planned files removed
//!                                                ├─ Finish ─► lock still held? writer flushed, final outputs,
//!                                                │            completion record ─► the job's end
//!                                                └─ Fail ─► the job's end
//! ```

use tokio::sync::watch;

use crate::completion::{self, CompletionRecord};
use crate::coordinator::open::write_final_outputs;
use crate::coordinator::output_writer::OutputWriter;
use crate::coordinator::progress::Progress;
use crate::coordinator::run::{Effect, JobRun};
use crate::error::{EngineError, Result};
use crate::monitor::Monitor;
use crate::protocol::{Payload, TaskId};
use crate::store::StoreUrl;

/// Where the workers excluded from a job are recorded (shown by `coordinator status`).
pub const EXCLUDED_WORKERS: &str = "_job/excluded-workers.json";

/// A journal entry to write: its result counts once the write is confirmed to the run
/// with its nonce ([`JobRun::journaled`]).
#[derive(Debug)]
pub struct JournalWrite {
    pub task: TaskId,
    pub attempt: u32,
    pub output: Payload,
    pub nonce: String,
}

/// How journal writes start: the actor writes off the actor and confirms by a message;
/// the test bed queues them and writes them between events.
pub trait JournalWrites {
    fn start(&mut self, write: JournalWrite);
}

/// How a job ended: the leases granted and the kind's summary, or the error.
pub type JobEnd = Result<(u64, String)>;

/// What carries out a run's effects against its output.
pub struct EffectHandler {
    pub output: StoreUrl,
    pub progress: Progress,
    /// Writes the kind's progress files off the actor, in order.
    pub writer: OutputWriter,
    /// Set (with the reason) if this coordinator lost the output lock.
    pub lock_lost: watch::Receiver<Option<String>>,
    /// The kind's final directories, and the completion record but for the summary
    /// and the final outputs.
    pub final_dirs: &'static [&'static str],
    pub completion: CompletionRecord,
    /// What the operator watches: told what the run observed.
    pub monitor: Monitor,
}

impl EffectHandler {
    /// Carries out `effects` of `run`, in order; the job's end if one of them ended it.
    pub async fn apply(
        &mut self,
        run: &mut JobRun,
        effects: Vec<Effect>,
        journal: &mut impl JournalWrites,
    ) -> Option<JobEnd> {
        self.observe(run);
        let end = self.apply_effects(run, effects, journal).await;
        self.observe(run);
        end
    }

    /// Tells the monitor what `run` observed since it last asked.
    fn observe(&self, run: &mut JobRun) {
        let observed = run.take_observed();
        if !observed.is_empty() {
            let now = std::time::SystemTime::now();
            self.monitor.observe_all(observed, now);
            self.progress.set_eta(self.monitor.lock().eta(now));
        }
    }

    async fn apply_effects(
        &mut self,
        run: &mut JobRun,
        effects: Vec<Effect>,
        journal: &mut impl JournalWrites,
    ) -> Option<JobEnd> {
        let mut end = None;
        for effect in effects {
            match effect {
                Effect::StagePlanned { stage, tasks } => {
                    self.progress.stage_planned(stage.as_str(), tasks)
                }
                Effect::TaskDone { stage, progressed } => {
                    self.progress.task_done(stage.as_str(), &progressed)
                }
                Effect::Journal {
                    task,
                    attempt,
                    output,
                    nonce,
                } => journal.start(JournalWrite {
                    task,
                    attempt,
                    output,
                    nonce,
                }),
                Effect::WriteProgress(files) => self.writer.write(files),
                Effect::RecordExcluded(excluded) => {
                    if let Err(e) = self.output.put_json(EXCLUDED_WORKERS, &excluded).await {
                        tracing::warn!(error = %e, "cannot record the excluded workers");
                    }
                }
                Effect::DiscardLate { task, attempt } => {
                    let discarded = match run.driver().attempt_files(task, attempt) {
                        Ok(files) => completion::discard_attempt(&self.output, &files).await,
                        Err(e) => Err(e),
                    };
                    match discarded {
                        Ok(true) => {
                            tracing::info!(%task, attempt, "removed a late attempt's files")
                        }
                        Ok(false) => {}
                        Err(e) => {
                            tracing::warn!(%task, error = %e, "cannot remove a late attempt's files")
                        }
                    }
                }
                Effect::Finish => {
                    // The last results are seen before the final outputs are written.
                    self.observe(run);
                    // Not on an output this coordinator no longer owns.
                    let lost = self.lock_lost.borrow().clone();
                    self.monitor.lock().finishing = true;
                    let result = match lost {
                        Some(why) => Err(EngineError::Conflict(why)),
                        None => self.write_final_outputs(run).await,
                    };
                    self.monitor.lock().finishing = false;
                    run.finished(result.is_ok());
                    self.progress.finish();
                    let tasks_run = run.tasks_run();
                    end = Some(result.map(|summary| (tasks_run, summary)));
                }
                Effect::Fail(e) => end = Some(Err(e)),
            }
        }
        end
    }

    /// The kind's progress files, its final outputs, then the completion marker.
    async fn write_final_outputs(&mut self, run: &mut JobRun) -> Result<String> {
        self.writer.flush().await?;
        write_final_outputs(
            run.driver(),
            &self.output,
            self.final_dirs,
            &self.completion,
        )
        .await
    }
}
