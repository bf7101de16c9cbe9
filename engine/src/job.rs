//! The engine's side of the seam: the job kinds as the engine holds them, without
//! their types (a registry of kinds, a job file of any kind, a driver and a runner of
//! JSON bodies), and the one adapter from a typed [`Kind`] to them.
//!
//! ```text
//! TaskSpec { id, body: JSON } ─► JobDriver::check/accept ─► adapter: StageSet::decode(id.stage, body) ─► K::Driver
//! Assignment ─► TaskRunner::run ─► adapter: decode task and settings ─► K::Runner::run ─► encode the result
//! ```
//!
//! Everything kind-independent about a job file is here too: the fingerprint (the hash
//! of the kind's [`KindFile::identity`]) and the validation of its text.

use std::marker::PhantomData;

use crate::error::{EngineError, Result};
use crate::inputs::{InputSource, ListedFile};
use crate::kind::{
    BoxFuture, Driver, Finished, Kind, KindFile, Output, OutputCheck, PlanContext, ProgressFile,
    ProgressTotals, Progressed, RunResult, Runner, Stage, StageOf, TaskCall, TaskEnv,
};
use crate::protocol::{Assignment, Payload, TaskId, TaskSpec};
use crate::stages::{StageSet, Stages};
use crate::store::StoreUrl;

/// Only the adapter below implements the erased traits: a kind implements [`Kind`].
mod sealed {
    pub trait Sealed {}
}
pub(crate) use sealed::Sealed;

/// A kind of job the engine can run, its types erased (every [`Kind`] is one; sealed:
/// implement [`Kind`]).
pub trait JobKind: Sync + Sealed {
    /// Its name in job files (`kind = "..."`).
    fn name(&self) -> &'static str;
    /// The directories of its final output files ([`Kind::FINAL_DIRS`]).
    fn final_dirs(&self) -> &'static [&'static str];
    /// Reads and validates job file `file` (its text): the kind's own sections;
    /// unknown keys are errors with their line and column.
    fn load(&'static self, file: &str, text: &str) -> Result<Box<dyn JobFile>>;
    /// A worker's runner of this kind's tasks.
    fn runner(&self) -> Box<dyn TaskRunner>;
    /// For `coordinator status`: the kind's lines on a finished output.
    fn describe_finished<'a>(&'a self, output: &'a StoreUrl) -> BoxFuture<'a, Result<Vec<String>>>;
    /// See [`Kind::output_check`].
    fn output_check<'a>(
        &'a self,
        output: &'a StoreUrl,
    ) -> BoxFuture<'a, Result<Option<Box<dyn OutputCheck>>>>;
    /// See [`Kind::attempt_files`].
    fn attempt_files(&self, task: TaskId, attempt: u32) -> Result<Vec<String>>;
    /// See [`Kind::task_counts`]: each stage's name and task count in a journaled job
    /// (`spec`: the journaled job file sections, `plan`: its plan) given its journaled
    /// results; none when they do not decode.
    fn task_counts(
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

/// A validated job file of some kind.
pub trait JobFile: Send + Sync + std::fmt::Debug + Sealed {
    /// The output root URL.
    fn output_url(&self) -> &str;
    /// blake3 (hex) of what determines the output bytes ([`KindFile::identity`]).
    fn fingerprint(&self) -> String;
    /// The kind's settings as JSON (recorded in the journal).
    fn to_json(&self) -> Result<Payload>;
    /// The input the engine lists and pins.
    fn inputs(&self) -> Vec<InputSource>;
    /// See [`KindFile::validate_memory`].
    fn validate_memory(&self, memory_per_worker: u64) -> std::result::Result<(), String>;
    /// Plans a new job; the plan is journaled.
    fn plan<'a>(
        &'a self,
        output: &'a StoreUrl,
        memory_per_worker: u64,
        inputs: Vec<ListedFile>,
    ) -> BoxFuture<'a, Result<Payload>>;
    /// The driver of the planned job.
    fn open(&self, output: &StoreUrl, plan: &Payload) -> Result<Box<dyn JobDriver>>;
}

/// A planned job on the coordinator, its types erased.
pub trait JobDriver: Send + Sealed {
    /// The settings every task gets ([`JobContext::settings`]).
    fn settings(&self) -> Result<Payload>;
    /// See [`Driver::progress_totals`].
    fn progress_totals(&self) -> ProgressTotals;
    /// See [`Driver::stage`]: the tasks of the kind's stage number `stage` (from 0, in
    /// the order of [`Stage::ALL`]) with their work units ([`Driver::task_units`]);
    /// `None` after the last.
    fn stage(&mut self, stage: usize) -> Result<Option<PlannedStage>>;
    /// See [`Driver::check`]; a result that does not decode is refused too.
    fn check(
        &self,
        task: &TaskSpec,
        attempt: u32,
        output: &Payload,
    ) -> std::result::Result<(), String>;
    /// See [`Driver::accept`].
    fn accept(&mut self, task: TaskId, output: &Payload) -> Result<Progressed>;
    /// See [`Driver::record_progress`] (`stage_done`: the stage's number).
    fn record_progress(&mut self, stage_done: Option<usize>) -> Vec<ProgressFile>;
    /// See [`Driver::finish`].
    fn finish<'a>(&'a mut self, output: &'a StoreUrl) -> BoxFuture<'a, Result<Finished>>;
    /// See [`Driver::clean_up`].
    fn clean_up<'a>(&'a mut self, output: &'a StoreUrl) -> BoxFuture<'a, Result<()>>;
    /// See [`Kind::attempt_files`].
    fn attempt_files(&self, task: TaskId, attempt: u32) -> Result<Vec<String>>;
}

/// A stage's tasks as the engine gets them: each with its work units, in `unit`.
pub struct PlannedStage {
    pub tasks: Vec<TaskSpec>,
    /// `units[i]`: the work of `tasks[i]` ([`Driver::task_units`]).
    pub units: Vec<u64>,
    pub unit: &'static str,
}

/// Runs one kind's tasks on a worker, its types erased.
pub trait TaskRunner: Send + Sealed {
    /// Runs `task`: its encoded result, or the commit that gives it
    /// ([`RunResult::Committing`]).
    fn run<'a>(
        &'a mut self,
        task: &'a Assignment,
        env: TaskEnv<'a>,
    ) -> BoxFuture<'a, Result<RunResult<Payload>>>;
    /// See [`crate::fault::FaultHooks::simulated`].
    #[cfg(feature = "fault-injection")]
    fn simulated(&self, task: &Assignment) -> Option<Result<Payload>>;
    /// See [`crate::fault::FaultHooks::forged`].
    #[cfg(feature = "fault-injection")]
    fn forged(&self, task: &Assignment, output: Payload) -> Payload;
}

/// The planned files of attempt `attempt` of `task` of kind `K` ([`Kind::attempt_files`]).
fn attempt_files_of<K: Kind>(task: TaskId, attempt: u32) -> Result<Vec<String>> {
    let stage = StageOf::<K>::named(task.stage.as_str())?;
    Ok(K::attempt_files(stage, task.index, attempt))
}

/// The job kinds a program runs: its registry, passed to the engine's entry points
/// (the binaries pass the production list, the engine's tests their own kinds). The
/// first is the kind of a job file without `kind = "..."`.
#[derive(Clone, Copy)]
pub struct Kinds(&'static [&'static dyn JobKind]);

impl Kinds {
    /// The registry of `kinds` (at least one; the first is the default kind).
    pub const fn new(kinds: &'static [&'static dyn JobKind]) -> Kinds {
        assert!(
            !kinds.is_empty(),
            "a registry of job kinds needs at least one"
        );
        Kinds(kinds)
    }

    /// The kind named `name`.
    pub fn find(&self, name: &str) -> Option<&'static dyn JobKind> {
        self.0.iter().copied().find(|k| k.name() == name)
    }

    /// The kind of a job file without `kind = "..."`.
    pub fn default_kind(&self) -> &'static dyn JobKind {
        self.0[0]
    }

    /// The names of every kind, for messages.
    pub fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|k| k.name()).collect()
    }
}

impl std::fmt::Debug for Kinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

/// The fingerprint of a job file: blake3 (hex) of its kind's identity.
pub fn fingerprint_of(identity: &serde_json::Value) -> String {
    blake3::hash(identity.to_string().as_bytes())
        .to_hex()
        .to_string()
}

/// Reads job file `file` (its text) as a kind's sections `T` and validates them: errors
/// name the file, and TOML's own errors (unknown keys, wrong types) their line and
/// column.
fn parse_job_file<T: KindFile>(file: &str, text: &str) -> Result<T> {
    let spec_error = |what: String| EngineError::Spec {
        file: file.to_string(),
        what,
    };
    let spec: T = toml::from_str(text)
        .map_err(|e: toml::de::Error| spec_error(e.to_string().trim_end().to_string()))?;
    spec.validate().map_err(spec_error)?;
    Ok(spec)
}

fn decode_plan<T: serde::de::DeserializeOwned>(what: &str, value: &Payload) -> Result<T> {
    value
        .decode()
        .map_err(|e| EngineError::Protocol(format!("{what} does not decode: {e}")))
}

fn encode<T: serde::Serialize>(what: &str, value: &T) -> Result<Payload> {
    Payload::encode(value)
        .map_err(|e| EngineError::Internal(format!("{what} does not encode: {e}")))
}

impl<K: Kind> Sealed for K {}

impl<K: Kind> JobKind for K {
    fn name(&self) -> &'static str {
        K::NAME
    }

    fn final_dirs(&self) -> &'static [&'static str] {
        K::FINAL_DIRS
    }

    fn load(&'static self, file: &str, text: &str) -> Result<Box<dyn JobFile>> {
        Ok(Box::new(FileOf::<K> {
            kind: self,
            file: parse_job_file::<K::File>(file, text)?,
        }))
    }

    fn runner(&self) -> Box<dyn TaskRunner> {
        Box::new(RunnerOf::<K> {
            runner: Kind::runner(self),
        })
    }

    fn describe_finished<'a>(&'a self, output: &'a StoreUrl) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(Kind::describe_finished(self, output))
    }

    fn output_check<'a>(
        &'a self,
        output: &'a StoreUrl,
    ) -> BoxFuture<'a, Result<Option<Box<dyn OutputCheck>>>> {
        Box::pin(Kind::output_check(self, output))
    }

    fn attempt_files(&self, task: TaskId, attempt: u32) -> Result<Vec<String>> {
        attempt_files_of::<K>(task, attempt)
    }

    fn task_counts(
        &self,
        spec: &Payload,
        plan: &Payload,
        results: &[(TaskId, &Payload)],
    ) -> Vec<(&'static str, Option<u64>)> {
        let (Ok(file), Ok(plan)) = (spec.decode::<K::File>(), plan.decode::<K::Plan>()) else {
            return Vec::new();
        };
        let results: Vec<(TaskId, Output<K>)> = results
            .iter()
            .filter_map(|(id, body)| {
                Some((*id, Output::<K>::decode(id.stage.as_str(), body).ok()?))
            })
            .collect();
        Kind::task_counts(self, &file, &plan, &results)
            .into_iter()
            .map(|(stage, count)| (stage.name(), count))
            .collect()
    }
}

/// A job file of kind `K`.
struct FileOf<K: Kind> {
    kind: &'static K,
    file: K::File,
}

impl<K: Kind> std::fmt::Debug for FileOf<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(K::NAME).field("file", &self.file).finish()
    }
}

impl<K: Kind> Sealed for FileOf<K> {}

impl<K: Kind> JobFile for FileOf<K> {
    fn output_url(&self) -> &str {
        self.file.output_url()
    }

    fn fingerprint(&self) -> String {
        fingerprint_of(&self.file.identity())
    }

    fn validate_memory(&self, memory_per_worker: u64) -> std::result::Result<(), String> {
        self.file.validate_memory(memory_per_worker)
    }

    fn to_json(&self) -> Result<Payload> {
        encode("the job file's sections", &self.file)
    }

    fn inputs(&self) -> Vec<InputSource> {
        self.file.inputs()
    }

    fn plan<'a>(
        &'a self,
        output: &'a StoreUrl,
        memory_per_worker: u64,
        inputs: Vec<ListedFile>,
    ) -> BoxFuture<'a, Result<Payload>> {
        Box::pin(async move {
            let context = PlanContext {
                output,
                memory_per_worker,
                inputs,
            };
            let plan = self.kind.plan(&self.file, context).await?;
            encode("the plan", &plan)
        })
    }

    fn open(&self, output: &StoreUrl, plan: &Payload) -> Result<Box<dyn JobDriver>> {
        let plan: K::Plan = decode_plan("the journaled plan", plan)?;
        Ok(Box::new(DriverOf::<K> {
            driver: self.kind.open(&self.file, output, plan)?,
            kind: PhantomData,
        }))
    }
}

/// A driver of kind `K`: bodies decoded by their stage, results encoded.
struct DriverOf<K: Kind> {
    driver: K::Driver,
    kind: PhantomData<fn() -> K>,
}

impl<K: Kind> Sealed for DriverOf<K> {}

impl<K: Kind> JobDriver for DriverOf<K> {
    fn settings(&self) -> Result<Payload> {
        encode("the job's settings", self.driver.settings())
    }

    fn progress_totals(&self) -> ProgressTotals {
        self.driver.progress_totals()
    }

    fn stage(&mut self, stage: usize) -> Result<Option<PlannedStage>> {
        let Some(&stage) = StageOf::<K>::ALL.get(stage) else {
            return Ok(None);
        };
        let Some(tasks) = self.driver.stage(stage)? else {
            return Ok(None);
        };
        let unit = self.driver.work_unit(stage);
        let units = tasks
            .iter()
            .map(|(_, task)| self.driver.task_units(task))
            .collect();
        let tasks = tasks
            .into_iter()
            .map(|(index, task)| {
                Ok(TaskSpec {
                    id: TaskId::new(task.stage(), index),
                    body: task.encode()?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(PlannedStage { tasks, units, unit }))
    }

    fn check(
        &self,
        task: &TaskSpec,
        attempt: u32,
        output: &Payload,
    ) -> std::result::Result<(), String> {
        let stage = task.id.stage.as_str();
        let t = K::Task::decode(stage, &task.body).map_err(|e| e.to_string())?;
        let o = Output::<K>::decode(stage, output).map_err(|e| e.to_string())?;
        let done = t
            .done(&o)
            .ok_or_else(|| format!("a result of another stage than {stage}"))?;
        self.driver.check(done, attempt)
    }

    fn accept(&mut self, task: TaskId, output: &Payload) -> Result<Progressed> {
        let output = Output::<K>::decode(task.stage.as_str(), output)?;
        self.driver.accept(task, output)
    }

    fn record_progress(&mut self, stage_done: Option<usize>) -> Vec<ProgressFile> {
        let stage = match stage_done {
            None => None,
            Some(k) => match StageOf::<K>::ALL.get(k) {
                Some(&stage) => Some(stage),
                None => return Vec::new(),
            },
        };
        self.driver.record_progress(stage)
    }

    fn finish<'a>(&'a mut self, output: &'a StoreUrl) -> BoxFuture<'a, Result<Finished>> {
        Box::pin(self.driver.finish(output))
    }

    fn clean_up<'a>(&'a mut self, output: &'a StoreUrl) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.driver.clean_up(output))
    }

    fn attempt_files(&self, task: TaskId, attempt: u32) -> Result<Vec<String>> {
        attempt_files_of::<K>(task, attempt)
    }
}

/// A runner of kind `K`: the task and settings decoded, the result encoded.
struct RunnerOf<K: Kind> {
    runner: K::Runner,
}

/// An assignment's task and settings, decoded.
fn decoded<K: Kind>(a: &Assignment) -> Result<(K::Task, K::Settings)> {
    let task = K::Task::decode(a.task.id.stage.as_str(), &a.task.body)?;
    let settings = decode_plan("the job's settings", &a.job.settings)?;
    Ok((task, settings))
}

fn call<'a, K: Kind>(
    a: &'a Assignment,
    task: &'a K::Task,
    settings: &'a K::Settings,
) -> TaskCall<'a, K> {
    TaskCall {
        id: a.task.id,
        task,
        attempt: a.attempt,
        job: &a.job,
        settings,
    }
}

impl<K: Kind> Sealed for RunnerOf<K> {}

impl<K: Kind> TaskRunner for RunnerOf<K> {
    fn run<'a>(
        &'a mut self,
        a: &'a Assignment,
        env: TaskEnv<'a>,
    ) -> BoxFuture<'a, Result<RunResult<Payload>>> {
        Box::pin(async move {
            let (task, settings) = decoded::<K>(a)?;
            let ran = self.runner.run(call(a, &task, &settings), env).await?;
            let stage = task.stage();
            ran.and_then(move |output| {
                if output.stage() != stage {
                    return Err(EngineError::Protocol(format!(
                        "a {stage} task gave a {} result",
                        output.stage()
                    )));
                }
                output.encode()
            })
        })
    }

    #[cfg(feature = "fault-injection")]
    fn simulated(&self, a: &Assignment) -> Option<Result<Payload>> {
        let (task, settings) = match decoded::<K>(a) {
            Ok(d) => d,
            Err(e) => return Some(Err(e)),
        };
        let output = crate::fault::FaultHooks::simulated(&self.runner, call(a, &task, &settings))?;
        Some(output.encode())
    }

    #[cfg(feature = "fault-injection")]
    fn forged(&self, a: &Assignment, output: Payload) -> Payload {
        let stage = a.task.id.stage.as_str();
        let (Ok((task, settings)), Ok(out)) =
            (decoded::<K>(a), Output::<K>::decode(stage, &output))
        else {
            return output;
        };
        crate::fault::FaultHooks::forged(&self.runner, call(a, &task, &settings), out)
            .encode()
            .unwrap_or(output)
    }
}
