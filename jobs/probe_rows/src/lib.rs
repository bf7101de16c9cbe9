//! The probe-rows job: RIPE-Atlas-style measurements (Parquet) → one row per probe
//! (source address) in `train`/`test` ArrayRecord shards, plus `manifest.json`.
//!
//! ```text
//! plan: list + pin the input, read footers ─► map tasks (row ranges of one file)
//! map:    scan ─► validate ─► partition by source ─► shuffle file (+ rejects)
//! reduce: a partition's segments ─► sort (spilling) ─► rows per source ─► shards
//! finish: manifest.json, the engine's _SUCCESS, then shuffle files removed
//! ```
//!
//! * [`spec`]: the job file's `[input]`, `[output]`, `[split]`.
//! * [`plan`]: input listing and Parquet footers → map tasks; map results → reduce tasks.
//! * [`map`], [`validate`], [`scope`], [`key`]: the map task (Parquet through
//!   [`probeflow_engine::parquet_source`]).
//! * [`reduce`]: the reduce task.
//! * [`result_check`]: results checked against the plan.
//! * [`manifest`]: the manifest, written when the job finishes.
//! * [`synthetic`]: RIPE-Atlas-like demo input (`coordinator generate`).
//! * [`inspect`]: a shard's facts and rows (`coordinator inspect`).
//! * `output_check`: the manifest and the shards' row counts for `coordinator verify`.

pub mod atlas;
pub mod error;
pub mod inspect;
pub mod key;
pub mod manifest;
pub mod map;
mod output_check;
pub mod plan;
pub mod protocol;
pub mod reduce;
pub mod result_check;
pub mod scope;
mod source_table;
pub mod spec;
pub mod synthetic;
pub mod validate;

use std::collections::BTreeMap;
use std::future::Future;

use serde::{Deserialize, Serialize};

use manifest::{InputFile, Totals};
use probeflow_engine::error::Result;
use probeflow_engine::inputs::InputSource;
use probeflow_engine::kind::{
    Done, Driver, Finished, Kind, KindFile, OutputCheck, PlanContext, ProgressTotals, Progressed,
    RunResult, Runner, StageTasks, TaskCall, TaskEnv,
};
use probeflow_engine::protocol::TaskId;
use probeflow_engine::shuffle;
use probeflow_engine::store::StoreUrl;
use protocol::{
    InputFormat, MapOutput, MapTask, Plausible, ProbeDone, ProbeOutput, ProbeStage, ProbeTask,
    ReduceOutput, Settings,
};
use spec::ProbeRowsFile;

/// The kind's name in job files (the default kind).
pub const NAME: &str = "probe_rows";

/// The probe-rows job kind.
pub struct ProbeRows;

impl Kind for ProbeRows {
    const NAME: &'static str = NAME;
    /// The shards of every split and the rejects (`manifest.json` is final too, at the
    /// root).
    const FINAL_DIRS: &'static [&'static str] = &["train", "val", "test", "rejects"];
    type File = ProbeRowsFile;
    type Plan = Plan;
    type Settings = Settings;
    type Task = ProbeTask;
    type Driver = ProbeRowsDriver;
    type Runner = ProbeRowsRunner;

    async fn plan(&self, file: &ProbeRowsFile, context: PlanContext<'_>) -> Result<Plan> {
        let listed = match &file.input.synthetic {
            None => context.inputs,
            Some(s) => {
                let dir = StoreUrl::parse(&format!(
                    "{}/_job/input",
                    context.output.url.trim_end_matches('/')
                ))?;
                tracing::info!(rows = s.rows, seed = s.seed, dir = %dir.url, "generating demo input");
                synthetic::ensure(s.rows, s.seed, &dir).await?;
                let generated =
                    input_source(vec![format!("{}/*.parquet", dir.url)], InputFormat::Parquet);
                probeflow_engine::inputs::list_inputs(&[generated]).await?
            }
        };
        let rows_per_task =
            rows_per_map_task(file.input.rows_per_map_task, context.memory_per_worker);
        let (inputs, maps) = plan::plan_maps(&listed, file.input.format, rows_per_task).await?;
        let planned_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(Plan {
            plausible: file.plausible(planned_at),
            inputs,
            maps,
            shards: file.output.shards,
        })
    }

    fn open(
        &self,
        file: &ProbeRowsFile,
        _output: &StoreUrl,
        plan: Plan,
    ) -> Result<ProbeRowsDriver> {
        Ok(ProbeRowsDriver {
            settings: file.settings(plan.plausible),
            fingerprint: probeflow_engine::job::fingerprint_of(&file.identity()),
            plan,
            maps: BTreeMap::new(),
            reduces: BTreeMap::new(),
        })
    }

    fn runner(&self) -> ProbeRowsRunner {
        ProbeRowsRunner::default()
    }

    async fn output_check(&self, output: &StoreUrl) -> Result<Option<Box<dyn OutputCheck>>> {
        let check: Box<dyn OutputCheck> = Box::new(output_check::ShardCheck::load(output).await?);
        Ok(Some(check))
    }

    async fn describe_finished(&self, output: &StoreUrl) -> Result<Vec<String>> {
        let Some(m) = manifest::read_manifest(output).await? else {
            return Ok(Vec::new());
        };
        let t = &m.totals;
        Ok(vec![
            format!("rejected by reason: {:?}", t.rejected_by_reason),
            format!(
                "{} shards ({} per split), {:.1} MB",
                m.shards.len(),
                m.shards_per_split,
                t.bytes as f64 / 1e6
            ),
        ])
    }

    fn task_counts(
        &self,
        _file: &ProbeRowsFile,
        plan: &Plan,
        _results: &[(TaskId, ProbeOutput)],
    ) -> Vec<(ProbeStage, Option<u64>)> {
        vec![
            (ProbeStage::Map, Some(plan.maps.len() as u64)),
            (ProbeStage::Reduce, Some(u64::from(plan.shards))),
        ]
    }

    /// A map attempt's shuffle file (and its index) and rejects file; a reduce writes
    /// final shards only.
    fn attempt_files(stage: ProbeStage, index: u32, attempt: u32) -> Vec<String> {
        match stage {
            ProbeStage::Map => {
                let shuffle_file = map::shuffle_path(index as usize, attempt);
                let index_file = shuffle::index_path(&shuffle_file);
                vec![
                    shuffle_file,
                    index_file,
                    map::rejects_path(index as usize, attempt),
                ]
            }
            ProbeStage::Reduce => Vec::new(),
        }
    }
}

/// The input of a probe-rows job: files of its format.
fn input_source(paths: Vec<String>, format: InputFormat) -> InputSource {
    InputSource {
        section: "input",
        paths,
        formats: format.described(),
        accepts: format.accepts(),
    }
}

impl KindFile for ProbeRowsFile {
    fn validate(&self) -> std::result::Result<(), String> {
        ProbeRowsFile::validate(self)
    }

    fn output_url(&self) -> &str {
        &self.output.url
    }

    fn identity(&self) -> serde_json::Value {
        // `source = "public"` written out is the default left out.
        let mut input = self.input.clone();
        if input.source == Some(protocol::SourceRule::Public) {
            input.source = None;
        }
        serde_json::json!({
            "input": input,
            "output": self.output,
            "split": self.split,
            "row_format": probeflow_reader::row::codec::ROW_FORMAT_VERSION,
        })
    }

    fn inputs(&self) -> Vec<InputSource> {
        // Generated input is the job's own, made again alike on a resume.
        self.input
            .url
            .as_ref()
            .map(|urls| input_source(urls.urls(), self.input.format))
            .into_iter()
            .collect()
    }

    /// A reduce's rows and sort must fit a worker's memory ([`reduce::ReduceMemory`]):
    /// refused when the job file is read, before any work.
    fn validate_memory(&self, memory_per_worker: u64) -> std::result::Result<(), String> {
        reduce::ReduceMemory::of(
            usize::try_from(memory_per_worker).unwrap_or(usize::MAX),
            self.output.max_row_bytes,
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
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

/// Rows per map task: `[input] rows_per_map_task`, or a tenth of a worker's memory at
/// ~100 bytes a row, 100k–4M.
pub fn rows_per_map_task(set: Option<u64>, memory_per_worker: u64) -> u64 {
    set.unwrap_or_else(|| (memory_per_worker / 1000).clamp(100_000, 4_000_000))
        .max(1)
}

/// A map task's work: its rows, or an Atlas results file's bytes.
fn map_units(task: &MapTask) -> u64 {
    match task.format {
        InputFormat::Parquet => task.rows,
        InputFormat::RipeAtlas => task.file_size,
    }
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

/// A planned probe-rows job on the coordinator: its accepted map and reduce results.
pub struct ProbeRowsDriver {
    settings: Settings,
    fingerprint: String,
    plan: Plan,
    maps: BTreeMap<usize, MapOutput>,
    reduces: BTreeMap<u32, ReduceOutput>,
}

impl Driver<ProbeRows> for ProbeRowsDriver {
    fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Atlas results are counted in input bytes: their rows are known only once read.
    fn progress_totals(&self) -> ProgressTotals {
        match self.settings.format {
            InputFormat::Parquet => ProgressTotals {
                unit: "rows",
                total_units: self.plan.inputs.iter().map(|f| f.rows).sum(),
            },
            InputFormat::RipeAtlas => ProgressTotals {
                unit: "input bytes",
                total_units: self.plan.inputs.iter().map(|f| f.size).sum(),
            },
        }
    }

    /// A map's input rows (an Atlas map's input bytes); a reduce's share of the
    /// shuffled rows (the maps' kept rows, shared evenly over the partitions: a
    /// partition's own count is known only to the map outputs' indexes, which the
    /// coordinator does not read).
    fn task_units(&self, task: &ProbeTask) -> u64 {
        match task {
            ProbeTask::Map(m) => map_units(m),
            ProbeTask::Reduce(r) => {
                let kept: u64 = self.maps.values().map(|m| m.kept_rows).sum();
                let shards = u64::from(self.settings.shards.max(1));
                kept / shards + u64::from(u64::from(r.partition) < kept % shards)
            }
        }
    }

    fn work_unit(&self, stage: ProbeStage) -> &'static str {
        match stage {
            ProbeStage::Map if self.settings.format == InputFormat::RipeAtlas => "input_bytes",
            ProbeStage::Map => "input_rows",
            ProbeStage::Reduce => "shuffled_rows",
        }
    }

    fn stage(&mut self, stage: ProbeStage) -> Result<Option<StageTasks<ProbeRows>>> {
        Ok(Some(match stage {
            ProbeStage::Map => self
                .plan
                .maps
                .iter()
                .map(|m| (m.index as u32, ProbeTask::Map(m.clone())))
                .collect(),
            ProbeStage::Reduce => {
                let maps: Vec<(usize, &MapOutput)> =
                    self.maps.iter().map(|(i, m)| (*i, m)).collect();
                plan::plan_reduces(self.settings.shards, &maps)?
                    .into_iter()
                    .map(|r| (r.partition, ProbeTask::Reduce(r)))
                    .collect()
            }
        }))
    }

    fn check(&self, done: Done<'_, ProbeRows>, attempt: u32) -> std::result::Result<(), String> {
        match done {
            ProbeDone::Map(t, m) => result_check::check_map(t, attempt, m),
            ProbeDone::Reduce(t, r) => result_check::check_reduce(t, &self.settings, r),
        }
    }

    fn accept(&mut self, task: TaskId, output: ProbeOutput) -> Result<Progressed> {
        Ok(match output {
            ProbeOutput::Map(m) => {
                let units = match self.plan.maps.get(task.index as usize) {
                    Some(planned) if planned.format == InputFormat::RipeAtlas => map_units(planned),
                    _ => m.input_rows,
                };
                let progressed = Progressed {
                    units,
                    bytes: 0,
                    rejected: m
                        .rejected
                        .iter()
                        .map(|(reason, n)| (validate::Reason::label(reason), *n))
                        .collect(),
                };
                self.maps.insert(task.index as usize, m);
                progressed
            }
            ProbeOutput::Reduce(r) => {
                let bytes = r.shards.iter().map(|s| s.bytes).sum();
                self.reduces.insert(task.index, r);
                Progressed {
                    units: 0,
                    bytes,
                    ..Progressed::default()
                }
            }
        })
    }

    async fn finish(&mut self, output: &StoreUrl) -> Result<Finished> {
        let (totals, files) = manifest::finalize(
            output,
            &self.fingerprint,
            &self.plan,
            &self.settings,
            &self.maps,
            &self.reduces,
        )
        .await?;
        Ok(Finished {
            summary: summary(&totals),
            files,
        })
    }

    fn clean_up<'a>(
        &'a mut self,
        output: &'a StoreUrl,
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        manifest::clean_up(output, &self.maps)
    }
}

/// Runs probe-rows tasks on a worker; keeps parsed addresses, and the reduce's sort
/// buffers, from task to task.
#[derive(Default)]
pub struct ProbeRowsRunner {
    addresses: validate::AddressCache,
    sort_buffers: probeflow_engine::external_sort::SortBuffers<key::SortKey>,
}

impl Runner<ProbeRows> for ProbeRowsRunner {
    async fn run(
        &mut self,
        call: TaskCall<'_, ProbeRows>,
        env: TaskEnv<'_>,
    ) -> Result<RunResult<ProbeOutput>> {
        // Each stage keeps its own state from task to task, and frees the other's:
        // a worker's memory holds one of them at a time.
        match call.task {
            ProbeTask::Map(_) => self.sort_buffers = Default::default(),
            ProbeTask::Reduce(_) => self.addresses = Default::default(),
        }
        // Both stages end committing: their files written, their fsyncs (or the
        // last of their uploads) left, which overlap the worker's next task.
        Ok(match call.task {
            ProbeTask::Map(task) if task.format == InputFormat::RipeAtlas => atlas::map::run_map(
                task,
                call.job,
                call.settings,
                call.attempt,
                &mut self.addresses,
                env.resources.memory_bytes,
                env.scratch,
            )
            .await?
            .map(ProbeOutput::Map),
            ProbeTask::Map(task) => map::run_map(
                task,
                call.job,
                call.settings,
                call.attempt,
                &mut self.addresses,
                env.resources.memory_bytes,
            )
            .await?
            .map(ProbeOutput::Map),
            ProbeTask::Reduce(task) => reduce::run_reduce(
                task,
                call.job,
                call.settings,
                env.resources,
                env.scratch,
                call.attempt,
                &mut self.sort_buffers,
            )
            .await?
            .map(ProbeOutput::Reduce),
        })
    }
}

#[cfg(feature = "fault-injection")]
impl probeflow_engine::fault::FaultHooks<ProbeRows> for ProbeRowsRunner {
    fn simulated(&self, call: TaskCall<'_, ProbeRows>) -> Option<ProbeOutput> {
        Some(match call.task {
            // Every row "rejected": the counts add up without a shuffle file to read.
            ProbeTask::Map(task) => ProbeOutput::Map(MapOutput {
                shuffle_file: map::shuffle_path(task.index, call.attempt),
                input_rows: task.rows,
                kept_rows: 0,
                rejected: BTreeMap::from([("simulated".to_string(), task.rows)]),
                rejects_file: Some(map::rejects_path(task.index, call.attempt)),
                // Nothing written: the entry of an empty file.
                rejects_written: Some(probeflow_engine::completion::OutputFile::of(
                    map::rejects_path(task.index, call.attempt),
                    b"",
                )),
                atlas: None,
            }),
            // An empty shard of every split the job writes (nothing is written: the
            // entry of an empty file).
            ProbeTask::Reduce(task) => ProbeOutput::Reduce(ReduceOutput {
                shards: call
                    .settings
                    .split_rule()
                    .ok()?
                    .splits()
                    .into_iter()
                    .map(|split| {
                        let path = protocol::shard_path(
                            split.as_str(),
                            task.partition,
                            call.settings.shards,
                        );
                        protocol::ShardInfo {
                            split: split.as_str().to_string(),
                            partition: task.partition,
                            path,
                            rows: 0,
                            sources: 0,
                            measurements: 0,
                            bytes: 0,
                            blake3: blake3::hash(b"").to_hex().to_string(),
                        }
                    })
                    .collect(),
                input_rows: 0,
            }),
        })
    }

    fn forged(&self, _call: TaskCall<'_, ProbeRows>, output: ProbeOutput) -> ProbeOutput {
        match output {
            ProbeOutput::Map(mut m) => {
                m.shuffle_file = "manifest.json".into();
                m.rejects_file = Some("manifest.json".into());
                ProbeOutput::Map(m)
            }
            ProbeOutput::Reduce(mut r) => {
                for s in &mut r.shards {
                    s.path = "../../elsewhere.array_record".into();
                }
                ProbeOutput::Reduce(r)
            }
        }
    }
}
