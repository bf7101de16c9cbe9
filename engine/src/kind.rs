//! What a job kind is: the typed seam a kind implements (its job file sections, its
//! plan, its stages with their task and result types, its coordinator-side driver and
//! its worker-side runner).
//!
//! ```text
//! job file ─► K::File (validated) ─► inputs listed and pinned by the engine ─► K::plan ─► journal
//!   K::open(plan) ─► K::Driver: stage(Stage) ─► K::Task × N ─► engine: lease, wire, retry ─► K::Runner::run ─► Output
//!                       ▲ accept(Output) ◄── journal ◄── check(Done = task + result) ◄──────────────────────┘
//!                    finish ─► the kind's final outputs, listed; the engine writes the completion record
//! ```
//!
//! A kind is its stage bodies: everything else is the engine's (queue, leases,
//! retries, journal, resume, encoding and decoding of bodies, the unknown-stage error
//! ([`crate::stages`]), fingerprinting, input pinning and refusal
//! ([`crate::inputs`]), the completion marker and the conflict message
//! ([`crate::completion`]), removing an unused attempt's files). A kind is a crate
//! under `jobs/` and one line in the registry the binaries pass to the engine
//! (`probeflow_jobs::KINDS`, a [`crate::job::Kinds`]); the engine reaches it through
//! [`crate::job`]'s erased traits, implemented once for every `K: Kind`.

use std::future::Future;
use std::pin::Pin;

use serde::{de::DeserializeOwned, Serialize};

pub use crate::completion::{Finished, OutputCheck, OutputFile};
use crate::error::Result;
use crate::inputs::{InputSource, ListedFile};
use crate::protocol::{JobContext, TaskId};
use crate::scratch::JobScratch;
pub use crate::settings::WorkerResources;
pub use crate::stages::{Stage, Stages};
use crate::store::StoreUrl;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A job kind.
pub trait Kind: Send + Sync + Sized + 'static {
    /// Its name in job files (`kind = "..."`).
    const NAME: &'static str;
    /// The directories (relative to the output root) that hold the kind's final output
    /// files and nothing else: every file in them is in [`Finished::files`], and
    /// `coordinator verify` refuses any other (a stray from another run).
    const FINAL_DIRS: &'static [&'static str];
    /// Its sections of the job file.
    type File: KindFile;
    /// The journaled plan: made once, given to [`Kind::open`] on every run and resume.
    type Plan: Serialize + DeserializeOwned + Send + 'static;
    /// What every task of a job gets ([`TaskCall::settings`]).
    type Settings: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// The kind's stages: its tasks, one variant per stage, with their results
    /// ([`crate::stages!`]).
    type Task: Stages;
    /// Its coordinator side: a planned job's stages, checks and final outputs.
    type Driver: Driver<Self>;
    /// Its worker side: runs one task (with the fault hooks in test builds).
    #[cfg(not(feature = "fault-injection"))]
    type Runner: Runner<Self>;
    /// Its worker side: runs one task (with the fault hooks in test builds).
    #[cfg(feature = "fault-injection")]
    type Runner: Runner<Self> + crate::fault::FaultHooks<Self>;

    /// Plans a new job from its listed and pinned input.
    fn plan<'a>(
        &'a self,
        file: &'a Self::File,
        context: PlanContext<'a>,
    ) -> impl Future<Output = Result<Self::Plan>> + Send + 'a;
    /// The driver of a planned job (the engine has refused input that changed).
    fn open(&self, file: &Self::File, output: &StoreUrl, plan: Self::Plan) -> Result<Self::Driver>;
    /// A worker's runner of this kind's tasks (one per worker actor: it may keep
    /// caches from task to task).
    fn runner(&self) -> Self::Runner;
    /// For `coordinator status`: lines describing a finished output, after the
    /// summary of its completion marker. The default adds none.
    fn describe_finished<'a>(
        &'a self,
        _output: &'a StoreUrl,
    ) -> impl Future<Output = Result<Vec<String>>> + Send + 'a {
        async { Ok(Vec::new()) }
    }
    /// For `coordinator verify`: the kind's own check of a finished output (read from
    /// `output`), run besides the completion record's. The default has none.
    fn output_check<'a>(
        &'a self,
        _output: &'a StoreUrl,
    ) -> impl Future<Output = Result<Option<Box<dyn OutputCheck>>>> + Send + 'a {
        async { Ok(None) }
    }
    /// Each stage's task count in a planned job given the results accepted so far
    /// (`None`: not known until an earlier stage is done); a stage the job leaves out
    /// is not listed. The one place a kind counts its tasks: for the progress display
    /// (the engine replaces a count by the stage's real one when it makes the stage)
    /// and for `coordinator status`.
    fn task_counts(
        &self,
        file: &Self::File,
        plan: &Self::Plan,
        results: &[(TaskId, Output<Self>)],
    ) -> Vec<(StageOf<Self>, Option<u64>)>;
    /// The files attempt `attempt` of task `index` of stage `stage` writes outside the
    /// final directories, by their planned names (relative to the output root): the
    /// engine removes them when the job finished without that attempt (a late result
    /// on the coordinator, an unreported one on its worker). The default: none.
    fn attempt_files(_stage: StageOf<Self>, _index: u32, _attempt: u32) -> Vec<String> {
        Vec::new()
    }
}

/// A kind's results, one variant per stage.
pub type Output<K> = <<K as Kind>::Task as Stages>::Output;
/// A kind's stages (a plain enum, one variant per stage).
pub type StageOf<K> = <<K as Kind>::Task as Stages>::Stage;
/// A stage's tasks, each with its index in the stage.
pub type StageTasks<K> = Vec<(u32, <K as Kind>::Task)>;
/// A kind's task paired with its result of the same stage.
pub type Done<'a, K> = <<K as Kind>::Task as Stages>::Done<'a>;

/// A kind's sections of a job file (everything but `kind` and `[run]`, which the
/// engine reads and the kind's type accepts and ignores).
pub trait KindFile: Serialize + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static {
    /// Checks what serde cannot (ranges, combinations); the message names the key.
    fn validate(&self) -> std::result::Result<(), String>;
    /// The output root URL.
    fn output_url(&self) -> &str;
    /// Everything that determines the output bytes, and nothing about how the job
    /// runs: the engine's fingerprint is its hash, so a job resumes with other `[run]`
    /// settings and is refused with other output-determining ones.
    fn identity(&self) -> serde_json::Value;
    /// The input the engine lists and pins (none for input the kind makes itself).
    fn inputs(&self) -> Vec<InputSource>;
    /// Checks the kind's settings against the memory each worker is given (`[run]
    /// memory_per_worker`), when the job file is read; the message names the keys.
    /// The default: nothing to check.
    fn validate_memory(&self, _memory_per_worker: u64) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// What planning gets besides the job file.
pub struct PlanContext<'a> {
    pub output: &'a StoreUrl,
    /// `[run] memory_per_worker`, bytes.
    pub memory_per_worker: u64,
    /// The input files of [`KindFile::inputs`], listed and pinned.
    pub inputs: Vec<ListedFile>,
}

impl PlanContext<'_> {
    /// The listed files of the source of section `section` ([`InputSource::section`]),
    /// in listing order, taken out of [`Self::inputs`].
    pub fn take_source(&mut self, section: &str) -> Vec<ListedFile> {
        let (source, rest) = std::mem::take(&mut self.inputs)
            .into_iter()
            .partition(|f| f.source == section);
        self.inputs = rest;
        source
    }
}

/// The fixed label (a metric label) of reject reason `name`, one of a kind's `known`
/// reasons; `"unknown"` for a name the kind does not give.
pub fn reason_label<const N: usize>(known: [&'static str; N], name: &str) -> &'static str {
    known.into_iter().find(|k| *k == name).unwrap_or("unknown")
}

/// What an accepted result adds to the job's progress.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progressed {
    /// Work units done (the kind's unit, e.g. input rows).
    pub units: u64,
    /// Bytes of final output written.
    pub bytes: u64,
    /// Input records the task rejected, by reason: the kind's fixed set of reasons (a
    /// metric label), none for a reason of none.
    pub rejected: Vec<(&'static str, u64)>,
}

/// The size of a job in its own work units, for progress displays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgressTotals {
    /// What a unit is ("rows", "records") and how many the job has.
    pub unit: &'static str,
    pub total_units: u64,
}

/// A progress file a kind has the engine write to its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgressFile {
    /// Relative to the output root.
    pub path: String,
    pub bytes: Vec<u8>,
}

/// A planned job of kind `K`, on the coordinator.
pub trait Driver<K: Kind>: Send + 'static {
    /// What every task gets.
    fn settings(&self) -> &K::Settings;
    /// The job's work units, for progress (its stages' task counts are
    /// [`Kind::task_counts`]).
    fn progress_totals(&self) -> ProgressTotals;
    /// The tasks of stage `stage` with their indices in the stage, given every result
    /// accepted so far (all of the stages before it); `None` when the job ends before
    /// this stage (a last stage its settings leave out).
    fn stage(&mut self, stage: StageOf<K>) -> Result<Option<StageTasks<K>>>;
    /// The work `task` stands for, in its stage's unit ([`Self::work_unit`]): what the
    /// monitor weighs progress, rates and the ETA by (a task count says little when
    /// tasks differ a hundredfold). Known when the stage is made. The default: 1.
    fn task_units(&self, _task: &K::Task) -> u64 {
        1
    }
    /// The unit of stage `stage`'s work ([`Self::task_units`]), a metric label:
    /// lowercase, `_` between words. The default: `"tasks"`.
    fn work_unit(&self, _stage: StageOf<K>) -> &'static str {
        "tasks"
    }
    /// Checks a result against its task before it counts (a refused result is a
    /// failed attempt): it may name only what was planned for this task and attempt.
    fn check(&self, done: Done<'_, K>, attempt: u32) -> std::result::Result<(), String>;
    /// Takes an accepted result (already journaled; also each journaled result on
    /// resume). An error means the result cannot be used (its task is redone).
    fn accept(&mut self, task: TaskId, output: Output<K>) -> Result<Progressed>;
    /// The kind's own progress files, if it keeps any: asked after each accepted
    /// result (`stage_done` = `None`; not for results replayed on resume) and when
    /// a stage is complete (`Some(stage)`, also on resume). The engine writes them off
    /// the coordinator's actor, in the order asked, all before [`Self::finish`].
    fn record_progress(&mut self, _stage_done: Option<StageOf<K>>) -> Vec<ProgressFile> {
        Vec::new()
    }
    /// After the last stage: writes the job's final outputs and returns a one-line
    /// summary and every final output file with its size and blake3 (the engine then
    /// writes the completion record, which lists them). Intermediate files stay until
    /// [`Self::clean_up`].
    fn finish<'a>(
        &'a mut self,
        output: &'a StoreUrl,
    ) -> impl Future<Output = Result<Finished>> + Send + 'a;
    /// After the completion marker: removes the job's intermediate files. After the
    /// marker, so that a worker that lost the coordinator, which removes its attempt's
    /// files once the marker exists, leaves none behind. The default removes nothing.
    fn clean_up<'a>(
        &'a mut self,
        _output: &'a StoreUrl,
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        async { Ok(()) }
    }
}

/// One leased task of kind `K`, as its runner gets it.
pub struct TaskCall<'a, K: Kind> {
    pub id: TaskId,
    pub task: &'a K::Task,
    pub attempt: u32,
    pub job: &'a JobContext,
    pub settings: &'a K::Settings,
}

impl<K: Kind> Clone for TaskCall<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: Kind> Copy for TaskCall<'_, K> {}

/// What a worker gives a task besides the task.
pub struct TaskEnv<'a> {
    pub resources: &'a WorkerResources,
    /// This job run's local scratch directory on the worker.
    pub scratch: &'a JobScratch,
}

/// What running a task gives: its result, or the work left to make its outputs
/// durable.
///
/// A task's last step is often only waiting: fsyncs of the files it wrote, an upload
/// to an object store. A runner that returns [`RunResult::Committing`] there lets its
/// worker start the next task meanwhile, so the wait overlaps that task's computing;
/// the worker reports the result once the commit is done, and heartbeats the lease
/// until then. The commit should hold little memory: the next task runs beside it.
pub enum RunResult<T> {
    /// The result; the task's outputs are durable.
    Durable(T),
    /// The task's outputs are written; this makes them durable, then gives the result.
    Committing(BoxFuture<'static, Result<T>>),
}

impl<T: Send + 'static> RunResult<T> {
    /// The result once the outputs are durable (awaits the commit).
    pub async fn durable(self) -> Result<T> {
        match self {
            RunResult::Durable(t) => Ok(t),
            RunResult::Committing(commit) => commit.await,
        }
    }

    /// The result turned into another by `f` (after the commit, if there is one).
    pub fn map<U>(self, f: impl FnOnce(T) -> U + Send + 'static) -> RunResult<U> {
        match self {
            RunResult::Durable(t) => RunResult::Durable(f(t)),
            RunResult::Committing(commit) => {
                RunResult::Committing(Box::pin(async move { commit.await.map(f) }))
            }
        }
    }

    /// `f` applied to the result, after the commit if there is one.
    pub fn and_then<U>(
        self,
        f: impl FnOnce(T) -> Result<U> + Send + 'static,
    ) -> Result<RunResult<U>> {
        Ok(match self {
            RunResult::Durable(t) => RunResult::Durable(f(t)?),
            RunResult::Committing(commit) => {
                RunResult::Committing(Box::pin(async move { f(commit.await?) }))
            }
        })
    }
}

/// Runs kind `K`'s tasks on a worker.
pub trait Runner<K: Kind>: Send + Sync + 'static {
    /// Runs one task: its result, or the commit that gives it once its outputs are
    /// durable ([`RunResult::Committing`]).
    fn run<'a>(
        &'a mut self,
        call: TaskCall<'a, K>,
        env: TaskEnv<'a>,
    ) -> impl Future<Output = Result<RunResult<Output<K>>>> + Send + 'a;
}
