//! The probe-rows job: RIPE-Atlas-style measurements (Parquet) → one row per probe
//! (source address) in `train`/`test` ArrayRecord shards, plus `manifest.json`.
//!
//! ```text
//! plan: list + pin the input, read footers ─► map tasks (row ranges of one file)
//! map:    scan ─► validate ─► partition by source ─► shuffle file (+ rejects)
//! reduce: a partition's segments ─► sort (spilling) ─► rows per source ─► shards
//! finish: manifest.json, _SUCCESS; shuffle files removed
//! ```
//!
//! * [`spec`]: the job file's `[input]`, `[output]`, `[split]`.
//! * [`plan`]: input listing and Parquet footers → map tasks; map results → reduce tasks.
//! * [`map`], [`validate`], [`key`]: the map task (Parquet through
//!   [`crate::engine::parquet_source`]).
//! * [`reduce`]: the reduce task.
//! * [`result_check`]: results checked against the plan.
//! * [`manifest`]: the manifest, written when the job finishes.
//! * [`synthetic`]: RIPE-Atlas-like demo input.

pub mod key;
pub mod manifest;
pub mod map;
pub mod plan;
pub mod protocol;
pub mod reduce;
pub mod result_check;
pub mod spec;
pub mod synthetic;
pub mod validate;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::job::{
    decode_payload as decode, encode_payload as encode, parse_job_file, BoxFuture, JobDriver,
    JobFile, JobKind, PlanHints, ProgressPlan, Progressed, TaskEnv, TaskRunner,
};
use crate::engine::protocol::{Assignment, JobContext, Payload, TaskId, TaskSpec};
use crate::engine::store::{self, StoreUrl};
use crate::error::{Result, WorkerError};
use manifest::{InputFile, Totals};
use protocol::{
    map_id, reduce_id, MapOutput, MapTask, Plausible, ReduceOutput, ReduceTask, Settings, MAP,
    REDUCE,
};
use spec::ProbeRowsFile;

/// The kind's name in job files (the default kind).
pub const NAME: &str = "probe_rows";

/// The probe-rows job kind.
pub struct ProbeRows;

impl JobKind for ProbeRows {
    fn name(&self) -> &'static str {
        NAME
    }

    fn completion_marker(&self) -> &'static str {
        manifest::SUCCESS
    }

    fn load(&self, file: &str, text: &str) -> Result<Box<dyn JobFile>> {
        let spec: ProbeRowsFile = parse_job_file(file, text, |s: &ProbeRowsFile| s.validate())?;
        Ok(Box::new(spec))
    }

    fn runner(&self) -> Box<dyn TaskRunner> {
        Box::new(ProbeRowsRunner::default())
    }

    fn describe_finished<'a>(
        &'a self,
        output: &'a StoreUrl,
    ) -> BoxFuture<'a, Result<Option<Vec<String>>>> {
        Box::pin(async move {
            if !output.exists(&output.child(manifest::SUCCESS)).await? {
                return Ok(None);
            }
            let Some(m) = manifest::read_manifest(output).await? else {
                return Ok(None);
            };
            let t = &m.totals;
            Ok(Some(vec![
                format!(
                    "{} input rows: {} kept, {} rejected {:?}",
                    t.input_rows, t.kept_measurements, t.rejected_rows, t.rejected_by_reason
                ),
                format!(
                    "{} rows from {} sources in {} shards ({} per split), {:.1} MB",
                    t.rows,
                    t.sources,
                    m.shards.len(),
                    m.shards_per_split,
                    t.bytes as f64 / 1e6
                ),
            ]))
        })
    }

    fn planned_tasks(
        &self,
        _spec: &Payload,
        plan: &Payload,
        _results: &[(TaskId, &Payload)],
    ) -> Vec<(&'static str, Option<u64>)> {
        match plan.decode::<Plan>() {
            Ok(p) => vec![
                (MAP, Some(p.maps.len() as u64)),
                (REDUCE, Some(u64::from(p.shards))),
            ],
            Err(_) => Vec::new(),
        }
    }
}

/// The journaled plan: the pinned input, the map tasks, the resolved limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub inputs: Vec<InputFile>,
    pub maps: Vec<MapTask>,
    pub shards: u32,
    /// The plausibility limits, resolved when the job was planned.
    pub plausible: Plausible,
}

/// Rows per map task: `[run] rows_per_map_task`, or a tenth of a worker's memory at
/// ~100 bytes a row, 100k–4M.
pub fn rows_per_map_task(hints: PlanHints) -> u64 {
    hints
        .rows_per_map_task
        .unwrap_or_else(|| (hints.memory_per_worker / 1000).clamp(100_000, 4_000_000))
        .max(1)
}

/// The one-line summary of a finished job.
fn summary(t: &Totals) -> String {
    format!(
        "{} input rows → {} kept, {} rejected; {} rows from {} sources, {:.1} MB",
        t.input_rows,
        t.kept_measurements,
        t.rejected_rows,
        t.rows,
        t.sources,
        t.bytes as f64 / 1e6
    )
}

/// Refuses an input that is not the planned file list any more (a file changed, added
/// or vanished): the output would silently mix or miss data.
async fn refuse_changed_input(url: &str, planned: &[InputFile], since: &str) -> Result<()> {
    let changes = plan::input_changes(url, planned).await?;
    store::refuse_changes(&format!("the input {url}"), since, &changes)
}

impl JobFile for ProbeRowsFile {
    fn output_url(&self) -> &str {
        &self.output.url
    }

    fn fingerprint(&self) -> String {
        ProbeRowsFile::fingerprint(self)
    }

    fn to_json(&self) -> Payload {
        Payload::encode(self).unwrap_or_default()
    }

    fn completed<'a>(&'a self, output: &'a StoreUrl) -> BoxFuture<'a, Result<Option<String>>> {
        Box::pin(async move {
            if !output.exists(&output.child(manifest::SUCCESS)).await? {
                return Ok(None);
            }
            match manifest::read_manifest(output).await? {
                Some(m) if m.job_fingerprint == ProbeRowsFile::fingerprint(self) => {
                    if let Some(url) = &self.input.url {
                        refuse_changed_input(url, &m.inputs, "this output was made").await?;
                    }
                    Ok(Some(summary(&m.totals)))
                }
                _ => Err(WorkerError::Conflict(format!(
                    "{} already holds the output of a different job (fingerprint mismatch); \
                     choose another [output] url or remove it",
                    output.url
                ))),
            }
        })
    }

    fn plan<'a>(
        &'a self,
        output: &'a StoreUrl,
        hints: PlanHints,
    ) -> BoxFuture<'a, Result<Payload>> {
        Box::pin(async move {
            let url = match (&self.input.url, &self.input.synthetic) {
                (Some(url), _) => url.clone(),
                (None, Some(s)) => {
                    let dir = StoreUrl::parse(&format!(
                        "{}/_job/input",
                        output.url.trim_end_matches('/')
                    ))?;
                    tracing::info!(rows = s.rows, seed = s.seed, dir = %dir.url, "generating demo input");
                    synthetic::ensure(s.rows, s.seed, &dir).await?;
                    format!("{}/*.parquet", dir.url)
                }
                (None, None) => return Err(WorkerError::Job("no input".into())),
            };
            let (inputs, maps) = plan::plan_maps(&url, rows_per_map_task(hints)).await?;
            let planned_at = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            encode(&Plan {
                plausible: self.plausible(planned_at),
                inputs,
                maps,
                shards: self.output.shards,
            })
        })
    }

    fn open<'a>(
        &'a self,
        _output: &'a StoreUrl,
        plan: Payload,
    ) -> BoxFuture<'a, Result<Box<dyn JobDriver>>> {
        Box::pin(async move {
            let plan: Plan = decode("the journaled plan", &plan)?;
            if let Some(url) = &self.input.url {
                refuse_changed_input(url, &plan.inputs, "the job was planned").await?;
            }
            Ok(Box::new(ProbeRowsDriver {
                settings: self.settings(plan.plausible),
                fingerprint: ProbeRowsFile::fingerprint(self),
                plan,
                maps: BTreeMap::new(),
                reduces: BTreeMap::new(),
            }) as Box<dyn JobDriver>)
        })
    }
}

/// A planned probe-rows job on the coordinator: its accepted map and reduce results.
struct ProbeRowsDriver {
    settings: Settings,
    fingerprint: String,
    plan: Plan,
    maps: BTreeMap<usize, MapOutput>,
    reduces: BTreeMap<u32, ReduceOutput>,
}

impl JobDriver for ProbeRowsDriver {
    fn settings(&self) -> Payload {
        Payload::encode(&self.settings).unwrap_or_default()
    }

    fn progress_plan(&self) -> ProgressPlan {
        ProgressPlan {
            stages: vec![
                (MAP, self.plan.maps.len() as u64),
                (REDUCE, u64::from(self.settings.shards)),
            ],
            unit: "rows",
            total_units: self.plan.inputs.iter().map(|f| f.rows).sum(),
        }
    }

    fn stage(&mut self, stage: usize) -> Result<Option<Vec<TaskSpec>>> {
        let specs = match stage {
            0 => self
                .plan
                .maps
                .iter()
                .map(|m| {
                    Ok(TaskSpec {
                        id: map_id(m.index),
                        body: encode(m)?,
                    })
                })
                .collect::<Result<Vec<_>>>()?,
            1 => {
                let maps: Vec<(usize, &MapOutput)> =
                    self.maps.iter().map(|(i, m)| (*i, m)).collect();
                plan::plan_reduces(self.settings.shards, &maps)?
                    .iter()
                    .map(|r| {
                        Ok(TaskSpec {
                            id: reduce_id(r.partition),
                            body: encode(r)?,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            _ => return Ok(None),
        };
        Ok(Some(specs))
    }

    fn check(
        &self,
        task: &TaskSpec,
        attempt: u32,
        output: &Payload,
    ) -> std::result::Result<(), String> {
        match task.id.stage.as_str() {
            MAP => {
                let t: MapTask = decode("map task", &task.body).map_err(|e| e.to_string())?;
                let m: MapOutput = decode("map result", output).map_err(|e| e.to_string())?;
                result_check::check_map(&t, attempt, &m)
            }
            REDUCE => {
                let t: ReduceTask = decode("reduce task", &task.body).map_err(|e| e.to_string())?;
                let r: ReduceOutput = decode("reduce result", output).map_err(|e| e.to_string())?;
                result_check::check_reduce(&t, &self.settings, &r)
            }
            other => Err(format!("a result of an unknown stage {other:?}")),
        }
    }

    fn accept(&mut self, task: TaskId, output: Payload) -> Result<Progressed> {
        match task.stage.as_str() {
            MAP => {
                let m: MapOutput = decode("map result", &output)?;
                let units = m.input_rows;
                self.maps.insert(task.index as usize, m);
                Ok(Progressed { units, bytes: 0 })
            }
            REDUCE => {
                let r: ReduceOutput = decode("reduce result", &output)?;
                let bytes = r.shards.iter().map(|s| s.bytes).sum();
                self.reduces.insert(task.index, r);
                Ok(Progressed { units: 0, bytes })
            }
            other => Err(WorkerError::Job(format!(
                "a result of an unknown stage {other:?}"
            ))),
        }
    }

    fn finish<'a>(&'a mut self, output: &'a StoreUrl) -> BoxFuture<'a, Result<String>> {
        Box::pin(async move {
            let totals = manifest::finalize(
                output,
                &self.fingerprint,
                &self.plan,
                &self.settings,
                &self.maps,
                &self.reduces,
            )
            .await?;
            Ok(summary(&totals))
        })
    }

    fn discard_late<'a>(
        &'a self,
        job: &'a JobContext,
        task: TaskId,
        attempt: u32,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            if task.stage.as_str() != MAP {
                return Ok(false);
            }
            map::discard_late_output(job, task.index as usize, attempt).await
        })
    }
}

/// Runs probe-rows tasks on a worker; keeps parsed addresses from task to task.
#[derive(Default)]
struct ProbeRowsRunner {
    addresses: validate::AddressCache,
}

impl TaskRunner for ProbeRowsRunner {
    fn run<'a>(
        &'a mut self,
        a: &'a Assignment,
        env: TaskEnv<'a>,
    ) -> BoxFuture<'a, Result<Payload>> {
        Box::pin(async move {
            let settings: Settings = decode("the job's settings", &a.job.settings)?;
            match a.task.id.stage.as_str() {
                MAP => {
                    let task: MapTask = decode("map task", &a.task.body)?;
                    let out =
                        map::run_map(&task, &a.job, &settings, a.attempt, &mut self.addresses)
                            .await?;
                    encode(&out)
                }
                REDUCE => {
                    let task: ReduceTask = decode("reduce task", &a.task.body)?;
                    let out = reduce::run_reduce(
                        &task,
                        &a.job,
                        &settings,
                        env.config,
                        env.scratch,
                        a.attempt,
                    )
                    .await?;
                    encode(&out)
                }
                other => Err(WorkerError::Job(format!(
                    "no stage {other:?} in a probe-rows job"
                ))),
            }
        })
    }

    fn discard_unreported<'a>(&'a self, a: &'a Assignment) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            if a.task.id.stage.as_str() != MAP {
                return Ok(false);
            }
            let removed =
                map::discard_late_output(&a.job, a.task.id.index as usize, a.attempt).await?;
            if removed {
                tracing::info!(task = %a.task.id, "the job finished without this attempt; its shuffle file is removed (and its rejects file)");
            }
            Ok(removed)
        })
    }

    fn simulated(&self, a: &Assignment) -> Option<Payload> {
        match a.task.id.stage.as_str() {
            // Every row "rejected": the counts add up without a shuffle file to read.
            MAP => {
                let task: MapTask = decode("map task", &a.task.body).ok()?;
                encode(&MapOutput {
                    shuffle_file: map::shuffle_path(task.index, a.attempt),
                    input_rows: task.rows,
                    kept_rows: 0,
                    rejected: BTreeMap::from([("simulated".to_string(), task.rows)]),
                    rejects_file: Some(map::rejects_path(task.index, a.attempt)),
                })
                .ok()
            }
            REDUCE => {
                let _: ReduceTask = decode("reduce task", &a.task.body).ok()?;
                encode(&ReduceOutput {
                    shards: Vec::new(),
                    input_rows: 0,
                })
                .ok()
            }
            _ => None,
        }
    }

    fn forged(&self, a: &Assignment, output: Payload) -> Payload {
        match a.task.id.stage.as_str() {
            MAP => match output.decode::<MapOutput>() {
                Ok(mut m) => {
                    m.shuffle_file = "manifest.json".into();
                    m.rejects_file = Some("manifest.json".into());
                    encode(&m).unwrap_or(output)
                }
                Err(_) => output,
            },
            REDUCE => match output.decode::<ReduceOutput>() {
                Ok(mut r) => {
                    for s in &mut r.shards {
                        s.path = "../../elsewhere.array_record".into();
                    }
                    encode(&r).unwrap_or(output)
                }
                Err(_) => output,
            },
            _ => output,
        }
    }
}
