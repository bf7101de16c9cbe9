//! The seam between the engine and the jobs it runs.
//!
//! A job kind ([`JobKind`]) is registered once (`crate::jobs::KINDS`) and brings:
//!
//! * its job file ([`JobFile`]): the kind's own sections of the TOML file (everything
//!   but `kind` and `[run]`, which the engine reads), its output location, its
//!   fingerprint (what determines the output bytes), how to tell a complete output,
//!   and how to plan the job (its plan is journaled once, opaque to the engine);
//! * its driver ([`JobDriver`]), on the coordinator: the stages of tasks (a stage may
//!   depend on the results of the ones before), a check of every result against the
//!   plan, the accepted results (journaled by the engine before the driver sees them,
//!   and fed back to it on resume), and the end of the job (its final outputs);
//! * its task runner ([`TaskRunner`]), on every worker: runs one leased task.
//!
//! Everything else is the engine's: the queue, leases, heartbeats, attempts, backoff,
//! fencing, the journal, resume, the output lock, scratch isolation, progress, local
//! and cluster mode, and the shuffle ([`crate::engine::shuffle`]) that any job can use.

use std::future::Future;
use std::pin::Pin;

use crate::engine::protocol::{Assignment, JobContext, Payload, TaskId, TaskSpec};
use crate::engine::scratch::JobScratch;
use crate::engine::store::StoreUrl;
use crate::error::{Result, WorkerError};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A kind of job the engine can run.
pub trait JobKind: Sync {
    /// Its name in job files (`kind = "..."`).
    fn name(&self) -> &'static str;
    /// The file a finished output of this kind has, written last (relative to the
    /// output root): how a worker that lost the coordinator tells "the job is done"
    /// from "the coordinator is down".
    fn completion_marker(&self) -> &'static str;
    /// Reads and validates job file `file` (its text): the kind's own sections (the
    /// engine reads `kind` and `[run]`, which the kind's type accepts and ignores, see
    /// [`EngineKeys`]); unknown keys are errors with their line and column.
    fn load(&self, file: &str, text: &str) -> Result<Box<dyn JobFile>>;
    /// A worker's runner of this kind's tasks (one per worker actor: it may keep
    /// caches from task to task).
    fn runner(&self) -> Box<dyn TaskRunner>;
    /// For `coordinator status`: lines describing `output` if it holds a finished
    /// output of this kind, `None` otherwise.
    fn describe_finished<'a>(
        &'a self,
        output: &'a StoreUrl,
    ) -> BoxFuture<'a, Result<Option<Vec<String>>>>;
    /// For `coordinator status`: each stage's task count in a journaled job (`spec`:
    /// the kind's job file sections, `plan`: its plan), given the results journaled so
    /// far (`results`); `None` for a count not known yet (one that depends on the
    /// results of an earlier stage still running).
    fn planned_tasks(
        &self,
        spec: &Payload,
        plan: &Payload,
        results: &[(TaskId, &Payload)],
    ) -> Vec<(&'static str, Option<u64>)>;
}

impl std::fmt::Debug for dyn JobKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the engine's `[run]` settings tell a job's planning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanHints {
    /// Memory per worker, bytes.
    pub memory_per_worker: u64,
    /// `[run] rows_per_map_task`, when set.
    pub rows_per_map_task: Option<u64>,
}

/// A job file of one kind, validated.
pub trait JobFile: Send + Sync + std::fmt::Debug {
    /// The output root URL.
    fn output_url(&self) -> &str;
    /// blake3 (hex) of everything that determines the output bytes, and nothing about
    /// how the job runs: a job resumes with other `[run]` settings.
    fn fingerprint(&self) -> String;
    /// The kind's settings as JSON (recorded in the journal).
    fn to_json(&self) -> Payload;
    /// If `output` holds a complete output: a one-line summary when it is this job's
    /// over the same input; an error naming the difference otherwise. `None` when the
    /// output is not complete.
    fn completed<'a>(&'a self, output: &'a StoreUrl) -> BoxFuture<'a, Result<Option<String>>>;
    /// Plans a new job (lists and pins its input, cuts the first stage): the plan is
    /// journaled and given to [`JobFile::open`] on every run and resume.
    fn plan<'a>(&'a self, output: &'a StoreUrl, hints: PlanHints)
        -> BoxFuture<'a, Result<Payload>>;
    /// The driver of the planned job; refuses input that changed since planning.
    fn open<'a>(
        &'a self,
        output: &'a StoreUrl,
        plan: Payload,
    ) -> BoxFuture<'a, Result<Box<dyn JobDriver>>>;
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

/// A planned job, on the coordinator.
pub trait JobDriver: Send {
    /// The kind's settings every task gets ([`JobContext::settings`]).
    fn settings(&self) -> Payload;
    /// The size of the job, for progress.
    fn progress_plan(&self) -> ProgressPlan;
    /// The tasks of stage `stage` (from 0), given every result accepted so far (all of
    /// the stages before it); `None` when the job has no more stages.
    fn stage(&mut self, stage: usize) -> Result<Option<Vec<TaskSpec>>>;
    /// Checks a result against the plan before it counts (a refused result is a failed
    /// attempt): it may name only what was planned for this task and attempt.
    fn check(
        &self,
        task: &TaskSpec,
        attempt: u32,
        output: &Payload,
    ) -> std::result::Result<(), String>;
    /// Takes an accepted result (already journaled; also each journaled result on
    /// resume). An error means the result cannot be used (its task is redone).
    fn accept(&mut self, task: TaskId, output: Payload) -> Result<Progressed>;
    /// The kind's own progress files to write, if it keeps any: asked after each
    /// accepted result (`stage_done` = `None`; not for results replayed on resume) and
    /// when stage `k` is complete (`Some(k)`, also on resume). The engine writes them
    /// off the coordinator's actor, in the order asked, all before [`Self::finish`]
    /// (whose start waits for them). The default writes nothing.
    fn record_progress(&mut self, _stage_done: Option<usize>) -> Vec<ProgressFile> {
        Vec::new()
    }
    /// After the last stage: writes the job's final outputs (completion marker last)
    /// and returns a one-line summary.
    fn finish<'a>(&'a mut self, output: &'a StoreUrl) -> BoxFuture<'a, Result<String>>;
    /// A refused result of attempt `attempt` of `task` arrived after the job finished:
    /// removes what that attempt wrote (by its planned names only). True if anything
    /// was removed.
    fn discard_late<'a>(
        &'a self,
        job: &'a JobContext,
        task: TaskId,
        attempt: u32,
    ) -> BoxFuture<'a, Result<bool>>;
}

/// What a worker gives a task besides its assignment.
pub struct TaskEnv<'a> {
    pub config: &'a WorkerConfig,
    /// This job run's local scratch directory on the worker.
    pub scratch: &'a JobScratch,
}

/// A progress file a job kind has the engine write to its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgressFile {
    /// Relative to the output root.
    pub path: String,
    pub bytes: Vec<u8>,
}

/// Runs one job kind's tasks on a worker.
pub trait TaskRunner: Send {
    fn run<'a>(
        &'a mut self,
        task: &'a Assignment,
        env: TaskEnv<'a>,
    ) -> BoxFuture<'a, Result<Payload>>;
    /// The result of `task` could not be delivered (the coordinator is gone): removes
    /// what the attempt wrote if the job finished without it. True if anything was
    /// removed.
    fn discard_unreported<'a>(&'a self, task: &'a Assignment) -> BoxFuture<'a, Result<bool>>;
    /// Fault injection (`simulate-tasks`, test builds): the result this task would
    /// give, without doing its work (`None`: the kind cannot simulate).
    fn simulated(&self, _task: &Assignment) -> Option<Payload> {
        None
    }
    /// Fault injection (`forge-results`, test builds): the result with paths this
    /// attempt was not given. The default forges nothing.
    fn forged(&self, _task: &Assignment, output: Payload) -> Payload {
        output
    }
}

/// A worker's resources.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Local scratch root (each job run gets its own directory under it).
    pub scratch: std::path::PathBuf,
    /// Memory per task (sorts spill beyond it).
    pub memory_bytes: usize,
}

/// Reads job file `file` (its text) as a kind's sections `T` and validates them: errors
/// name the file, and TOML's own errors (unknown keys, wrong types) their line and
/// column.
pub fn parse_job_file<T: serde::de::DeserializeOwned>(
    file: &str,
    text: &str,
    validate: impl FnOnce(&T) -> std::result::Result<(), String>,
) -> Result<T> {
    let spec: T = toml::from_str(text).map_err(|e: toml::de::Error| WorkerError::Spec {
        file: file.to_string(),
        what: e.to_string().trim_end().to_string(),
    })?;
    validate(&spec).map_err(|what| WorkerError::Spec {
        file: file.to_string(),
        what,
    })?;
    Ok(spec)
}

/// A task body, a result or a plan (`what`, for the error) decoded as the kind's type.
pub fn decode_payload<T: serde::de::DeserializeOwned>(what: &str, value: &Payload) -> Result<T> {
    value
        .decode()
        .map_err(|e| WorkerError::Job(format!("{what}: {e}")))
}

/// A kind's value as a task body, a result or a plan.
pub fn encode_payload<T: serde::Serialize>(value: &T) -> Result<Payload> {
    Payload::encode(value).map_err(|e| WorkerError::Job(e.to_string()))
}

/// The kind named `name` among `kinds`.
pub fn find_kind(kinds: &[&'static dyn JobKind], name: &str) -> Option<&'static dyn JobKind> {
    kinds.iter().copied().find(|k| k.name() == name)
}
