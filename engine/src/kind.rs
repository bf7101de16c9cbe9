//! What a job kind is: the typed seam a kind implements (its job file sections, its
//! plan, its stages with their task and result types, its coordinator-side driver and
//! its worker-side runner).
//!
//! ```text
//! job file ─► K::File (validated) ─► inputs listed and pinned by the engine ─► K::plan ─► journal
//!   K::open(plan) ─► K::Driver: stage(k) ─► K::Task × N ─► engine: lease, wire, retry ─► K::Runner::run ─► Output
//!                       ▲ accept(Output) ◄── journal ◄── check(Done = task + result) ◄──────────────────────┘
//!                    finish ─► the kind's final outputs, listed; the engine writes the completion record
//! ```
//!
//! A kind is its stage bodies: everything else is the engine's (queue, leases,
//! retries, journal, resume, encoding and decoding of bodies, the unknown-stage error
//! ([`crate::stages`]), fingerprinting, input pinning and refusal
//! ([`crate::inputs`]), the completion marker and the conflict message
//! ([`crate::completion`])). A kind is registered with one line in
//! `crate::jobs::KINDS`; the engine reaches it through [`crate::job`]'s erased
//! traits, implemented once for every `K: Kind`.

use std::future::Future;
use std::pin::Pin;

use serde::{de::DeserializeOwned, Serialize};

pub use crate::completion::{Finished, OutputCheck, OutputFile};
use crate::error::Result;
use crate::inputs::{InputSource, ListedFile};
use crate::protocol::{JobContext, TaskId};
use crate::scratch::JobScratch;
use crate::stages::Stages;
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
    type Driver: Driver<Self>;
    type Runner: Runner<Self>;

    /// Plans a new job from its listed and pinned input.
    fn plan<'a>(
        &'a self,
        file: &'a Self::File,
        context: PlanContext<'a>,
    ) -> BoxFuture<'a, Result<Self::Plan>>;
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
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    /// For `coordinator verify`: the kind's own check of a finished output (read from
    /// `output`), run besides the completion record's. The default has none.
    fn output_check<'a>(
        &'a self,
        _output: &'a StoreUrl,
    ) -> BoxFuture<'a, Result<Option<Box<dyn OutputCheck>>>> {
        Box::pin(async { Ok(None) })
    }
    /// For `coordinator status`: each stage's task count in a journaled job given the
    /// results journaled so far; `None` for a count not known yet.
    fn planned_tasks(
        &self,
        file: &Self::File,
        plan: &Self::Plan,
        results: &[(TaskId, Output<Self>)],
    ) -> Vec<(&'static str, Option<u64>)>;
}

/// A kind's results, one variant per stage.
pub type Output<K> = <<K as Kind>::Task as Stages>::Output;
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
}

/// What planning gets besides the job file.
pub struct PlanContext<'a> {
    pub output: &'a StoreUrl,
    /// `[run] memory_per_worker`, bytes.
    pub memory_per_worker: u64,
    /// The input files of [`KindFile::inputs`], listed and pinned.
    pub inputs: Vec<ListedFile>,
}

/// What an accepted result adds to the job's progress.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progressed {
    /// Work units done (the kind's unit, e.g. input rows).
    pub units: u64,
    /// Bytes of final output written.
    pub bytes: u64,
}

/// The size of a job, for progress displays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgressPlan {
    /// Each stage's name and task count (when known before it starts).
    pub stages: Vec<(&'static str, u64)>,
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
    /// The size of the job, for progress.
    fn progress_plan(&self) -> ProgressPlan;
    /// The tasks of stage `stage` (from 0) with their indices in the stage, given every
    /// result accepted so far (all of the stages before it); `None` when the job has
    /// no more stages.
    fn stage(&mut self, stage: usize) -> Result<Option<StageTasks<K>>>;
    /// Checks a result against its task before it counts (a refused result is a
    /// failed attempt): it may name only what was planned for this task and attempt.
    fn check(&self, done: Done<'_, K>, attempt: u32) -> std::result::Result<(), String>;
    /// Takes an accepted result (already journaled; also each journaled result on
    /// resume). An error means the result cannot be used (its task is redone).
    fn accept(&mut self, task: TaskId, output: Output<K>) -> Result<Progressed>;
    /// The kind's own progress files, if it keeps any: asked after each accepted
    /// result (`stage_done` = `None`; not for results replayed on resume) and when
    /// stage `k` is complete (`Some(k)`, also on resume). The engine writes them off
    /// the coordinator's actor, in the order asked, all before [`Self::finish`].
    fn record_progress(&mut self, _stage_done: Option<usize>) -> Vec<ProgressFile> {
        Vec::new()
    }
    /// After the last stage: writes the job's final outputs and returns a one-line
    /// summary and every final output file with its size and blake3 (the engine then
    /// writes the completion record, which lists them). Intermediate files stay until
    /// [`Self::clean_up`].
    fn finish<'a>(&'a mut self, output: &'a StoreUrl) -> BoxFuture<'a, Result<Finished>>;
    /// After the completion marker: removes the job's intermediate files (and a late
    /// attempt's, by planned names). After the marker, so that a worker that lost the
    /// coordinator, which removes its files once the marker exists, leaves none behind.
    /// The default removes nothing.
    fn clean_up<'a>(&'a mut self, _output: &'a StoreUrl) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    /// A refused result of attempt `attempt` of `task` arrived after the job finished:
    /// removes what that attempt wrote (by its planned names only). True if anything
    /// was removed. The default removes nothing.
    fn discard_late<'a>(
        &'a self,
        _job: &'a JobContext,
        _task: TaskId,
        _attempt: u32,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async { Ok(false) })
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
    pub config: &'a WorkerConfig,
    /// This job run's local scratch directory on the worker.
    pub scratch: &'a JobScratch,
}

/// A worker's memory when nothing says otherwise (`[run] memory_per_worker`, the
/// `worker` binary's `--memory`).
pub const DEFAULT_MEMORY_PER_WORKER: &str = "2GiB";

/// A worker's resources.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Local scratch root (each job run gets its own directory under it).
    pub scratch: std::path::PathBuf,
    /// Memory per task (sorts spill beyond it).
    pub memory_bytes: usize,
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
    fn run<'a>(
        &'a mut self,
        call: TaskCall<'a, K>,
        env: TaskEnv<'a>,
    ) -> BoxFuture<'a, Result<RunResult<Output<K>>>>;
    /// The result of the task could not be delivered (the coordinator is gone) and
    /// the job finished without it: removes what the attempt wrote. True if anything
    /// was removed. The default removes nothing.
    fn discard_unreported<'a>(&'a self, _call: TaskCall<'a, K>) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async { Ok(false) })
    }
    /// Fault injection (`simulate-tasks`, test builds): the result this task would
    /// give, without doing its work (`None`: the kind cannot simulate).
    fn simulated(&self, _call: TaskCall<'_, K>) -> Option<Output<K>> {
        None
    }
    /// Fault injection (`forge-results`, test builds): the result with paths this
    /// attempt was not given. The default forges nothing.
    fn forged(&self, _call: TaskCall<'_, K>, output: Output<K>) -> Output<K> {
        output
    }
}
