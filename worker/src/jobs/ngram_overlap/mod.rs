//! The train/test n-gram overlap job: which training documents share n-grams with
//! which eval instances, with full provenance (files, rows, n-grams, code-point
//! offsets on both sides).
//!
//! ```text
//! plan:   list + pin the eval and training files
//! index:  eval file ─► tokens ─► window keys (min(n, tokens) for short rows)
//!           ─► shuffle file of postings partitioned by key range, each sorted
//! scan:   training file × index group ─► compact index ─► stream records
//!           ─► look every window's key up ─► candidates (eval row, window text)
//! report: candidates, each kept if its eval row (read again from the pinned eval
//!           file) has that n-gram (re-tokenized)
//!           ─► stats/overlap_details.jsonl.gz, stats/overlap_stats.jsonl,
//!           tmp/overlap_instances-*.jsonl.gz
//! finish: progress_summary.json, .SUCCESS; the intermediate files removed
//! ```
//!
//! The training n-gram stream is never stored or shuffled: memory is the index group
//! a scan holds (groups are cut so that one fits in `[index] memory`, by default half
//! of `memory_per_worker`) plus one document, or a small `.jsonl.gz` file whole (at
//! most an eighth of `memory_per_worker`, [`whole_gzip`]).
//!
//! * [`spec`]: the job file; [`protocol`]: stages, tasks, results, file names.
//! * [`source`]: JSONL / gzip / zstd / Parquet records; [`py_json`]: JSON read as
//!   Python reads it; [`records`]: dataset names,
//!   record ids, the stable hash; [`tokenize`]: the tokenizers, with Python's
//!   `str.lower()` and `\s` semantics exactly; [`ngrams`]: n-grams and the index.
//! * [`ngram_index`]: the compact in-memory index a scan holds (window keys and eval
//!   rows, no text).
//! * [`index`], [`scan`], [`report`]: the three tasks; [`gzip_jsonl`]: their
//!   streamed gzip outputs.

pub mod gzip_jsonl;
pub mod index;
pub mod json_record;
pub mod lines;
pub mod ngram_index;
pub mod ngrams;
pub mod protocol;
pub mod py_json;
pub mod python_unicode;
pub mod records;
pub mod report;
pub mod scan;
pub mod source;
pub mod spec;
pub mod tokenize;
pub mod whole_gzip;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::engine::inputs::InputSource;
use crate::engine::kind::{
    BoxFuture, Done, Driver, Kind, KindFile, Output, PlanContext, ProgressFile, ProgressPlan,
    Progressed, Runner, StageTasks, TaskCall, TaskEnv,
};
use crate::engine::protocol::{JobContext, TaskId};
use crate::engine::store::StoreUrl;
use crate::engine::thread_cpu::ThreadCpuTimer;
use crate::error::{Result, WorkerError};
use protocol::{
    events_path, index_shuffle_path, instances_path, rejects_path, EvalFile, IndexOutput,
    IndexTask, InputFile, OverlapDone, OverlapOutput, OverlapTask, ReportOutput, ReportTask,
    ScanOutput, ScanTask, Settings, DETAILS, INDEX, INTERMEDIATE_FORMAT_VERSION, PROGRESS_SUMMARY,
    REPORT, SCAN, STATS, SUCCESS, WORK_DIR,
};
use spec::OverlapFile;

/// The kind's name in job files.
pub const NAME: &str = "ngram_overlap";

/// The n-gram overlap job kind.
pub struct NgramOverlap;

impl Kind for NgramOverlap {
    const NAME: &'static str = NAME;
    const COMPLETION_MARKER: &'static str = SUCCESS;
    type File = OverlapFile;
    type Plan = Plan;
    type Settings = Settings;
    type Task = OverlapTask;
    type Driver = OverlapDriver;
    type Runner = OverlapRunner;

    fn plan<'a>(
        &'a self,
        file: &'a OverlapFile,
        context: PlanContext<'a>,
    ) -> BoxFuture<'a, Result<Plan>> {
        Box::pin(async move {
            let mut eval = Vec::new();
            let mut train = Vec::new();
            for listed in context.inputs {
                match listed.source {
                    EVAL_SOURCE => eval.push(EvalInput {
                        dataset: records::eval_dataset_name(&listed.path),
                        file: listed.file,
                    }),
                    _ => train.push(listed.file),
                }
            }
            let memory = context.memory_per_worker;
            let index_budget = file
                .index
                .memory
                .as_deref()
                .and_then(crate::engine::units::parse_bytes)
                .unwrap_or(memory / 2);
            Ok(Plan {
                eval,
                train,
                index_budget,
                whole_gzip_max: (memory / 16).min(WHOLE_GZIP_CAP),
                intermediate_format: INTERMEDIATE_FORMAT_VERSION,
            })
        })
    }

    fn open(&self, file: &OverlapFile, output: &StoreUrl, plan: Plan) -> Result<OverlapDriver> {
        plan.check_intermediate_format(output)?;
        Ok(OverlapDriver {
            settings: Settings {
                whole_gzip_max: plan.whole_gzip_max,
                ..file.settings()
            },
            plan,
            index: BTreeMap::new(),
            groups: 1,
            scans: BTreeMap::new(),
            report: None,
            progress: ProgressLog::default(),
        })
    }

    fn runner(&self) -> OverlapRunner {
        OverlapRunner::default()
    }

    fn describe_finished<'a>(
        &'a self,
        _output: &'a StoreUrl,
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async { Ok(vec![format!("statistics in {STATS}, records in {DETAILS}")]) })
    }

    fn planned_tasks(
        &self,
        file: &OverlapFile,
        plan: &Plan,
        results: &[(TaskId, OverlapOutput)],
    ) -> Vec<(&'static str, Option<u64>)> {
        // One scan task per training file and index group; the groups are known once
        // every index task is done.
        let index: Vec<&IndexOutput> = results
            .iter()
            .filter_map(|(_, output)| match output {
                OverlapOutput::Index(o) => Some(o),
                _ => None,
            })
            .collect();
        let scans = (index.len() == plan.eval.len()).then(|| {
            let postings = index.iter().map(|o| o.ngrams).sum();
            plan.train.len() as u64
                * u64::from(index_groups(
                    postings,
                    plan.index_budget,
                    file.index.partitions,
                ))
        });
        vec![
            (INDEX, Some(plan.eval.len() as u64)),
            (SCAN, scans),
            (REPORT, Some(1)),
        ]
    }
}

/// The index of the eval side among [`KindFile::inputs`] (the training side follows).
const EVAL_SOURCE: usize = 0;

/// The formats the job reads.
const FORMATS: &str = "a .jsonl, .jsonl.gz, .jsonl.zst or .parquet file";

impl KindFile for OverlapFile {
    fn validate(&self) -> std::result::Result<(), String> {
        OverlapFile::validate(self)
    }

    fn output_url(&self) -> &str {
        &self.output.url
    }

    fn identity(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": NAME,
            "eval": self.eval,
            "train": self.train,
            "ngrams": self.ngrams,
            "output": self.output,
            "format": protocol::OUTPUT_FORMAT_VERSION,
        })
    }

    fn inputs(&self) -> Vec<InputSource> {
        fn accepts(name: &str) -> bool {
            source::format_of(name).is_some()
        }
        vec![
            InputSource {
                section: "eval",
                paths: self.eval.paths.clone(),
                formats: FORMATS,
                accepts,
            },
            InputSource {
                section: "train",
                paths: self.train.paths.clone(),
                formats: FORMATS,
                accepts,
            },
        ]
    }
}

/// An eval file and the dataset it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalInput {
    pub file: InputFile,
    pub dataset: String,
}

/// The journaled plan: the pinned input files and the memory a scan may hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub eval: Vec<EvalInput>,
    pub train: Vec<InputFile>,
    /// Bytes of index a scan task may load.
    pub index_budget: u64,
    /// The largest `.jsonl.gz` file inflated whole ([`Settings::whole_gzip_max`]);
    /// 0 (every file streamed) in a plan journaled before it existed.
    #[serde(default)]
    pub whole_gzip_max: u64,
    /// The [`INTERMEDIATE_FORMAT_VERSION`] of the probeflow that planned the job (1 in
    /// a plan journaled before it was recorded).
    #[serde(default = "Plan::first_intermediate_format")]
    pub intermediate_format: u32,
}

impl Plan {
    fn first_intermediate_format() -> u32 {
        1
    }

    /// Refuses to resume a run whose intermediate files this probeflow would misread.
    fn check_intermediate_format(&self, output: &StoreUrl) -> Result<()> {
        if self.intermediate_format == INTERMEDIATE_FORMAT_VERSION {
            return Ok(());
        }
        Err(WorkerError::Conflict(format!(
            "{} holds an unfinished run planned by another version of probeflow \
             (intermediate files of format {}; this one reads format {}): finish it \
             with that version, or delete the output directory and run again",
            output.url, self.intermediate_format, INTERMEDIATE_FORMAT_VERSION
        )))
    }
}

/// A `.jsonl.gz` input file is inflated whole when it and its text are each at most
/// this, and at most a sixteenth of `memory_per_worker` (so a task holds at most an
/// eighth of it for the file, beside its index group).
const WHOLE_GZIP_CAP: u64 = 64 << 20;

/// Running totals, for `progress/` and `progress_summary.json`.
#[derive(Debug, Clone, Default, Serialize)]
struct Totals {
    eval_records: u64,
    eval_rejected: u64,
    test_ngrams: u64,
    train_records: u64,
    train_rejected: u64,
    train_text_bytes: u64,
    train_ngrams: u64,
    overlap_events: u64,
}

/// The progress snapshots not yet written.
#[derive(Default)]
struct ProgressLog {
    totals: Totals,
    lines: Vec<u8>,
    last_write: Option<std::time::Instant>,
    accepted: u64,
}

/// How often a snapshot file is written while a stage runs.
const SNAPSHOT_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Index groups for an index of `postings` postings: enough that loading one group
/// (at most [`ngram_index::LOAD_BYTES_PER_POSTING`] per posting) fits in `budget`, at
/// most one per partition.
fn index_groups(postings: u64, budget: u64, partitions: u32) -> u32 {
    let groups = postings
        .saturating_mul(ngram_index::LOAD_BYTES_PER_POSTING)
        .div_ceil(budget.max(1));
    groups.clamp(1, u64::from(partitions)) as u32
}

/// A planned overlap job on the coordinator.
pub struct OverlapDriver {
    settings: Settings,
    plan: Plan,
    index: BTreeMap<u32, IndexOutput>,
    /// Index groups (scan tasks per training file), fixed when the scan stage is made.
    groups: u32,
    scans: BTreeMap<u32, ScanOutput>,
    report: Option<ReportOutput>,
    progress: ProgressLog,
}

impl OverlapDriver {
    fn index_groups(&self) -> u32 {
        let postings: u64 = self.index.values().map(|o| o.ngrams).sum();
        index_groups(postings, self.plan.index_budget, self.settings.partitions)
    }

    fn scan_tasks(&mut self) -> Vec<(u32, OverlapTask)> {
        self.groups = self.index_groups();
        let lengths: BTreeSet<u32> = self
            .index
            .values()
            .flat_map(|o| o.lengths.iter().copied())
            .collect();
        let mut tasks = Vec::new();
        // Group by group: a worker keeps the last group it loaded, so its scans of the
        // same group follow one another and load it once, not once per training file.
        let train = self.plan.train.len() as u32;
        for group in 0..self.groups {
            for (t, file) in self.plan.train.iter().enumerate() {
                let index = group * train + t as u32;
                let index_files = self
                    .index
                    .values()
                    .map(|o| o.shuffle_file.clone())
                    .collect();
                let task = ScanTask {
                    index,
                    train_file: t as u32,
                    file: file.clone(),
                    group,
                    groups: self.groups,
                    index_files,
                    eval_rows: self.index.values().map(|o| o.counts.rows).collect(),
                    lengths: lengths.iter().copied().collect(),
                };
                tasks.push((index, OverlapTask::Scan(task)));
            }
        }
        tasks
    }

    fn report_task(&self) -> Result<(u32, OverlapTask)> {
        let eval = self
            .plan
            .eval
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let out = self.index.get(&(i as u32)).ok_or_else(|| {
                    WorkerError::Job(format!("no index result for eval file {i}"))
                })?;
                Ok(EvalFile {
                    file: e.file.clone(),
                    dataset: e.dataset.clone(),
                    instances: out.counts.valid(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let events = (0..self.plan.train.len() as u32)
            .map(|t| {
                (0..self.groups)
                    .map(|g| {
                        self.scans
                            .get(&(g * self.plan.train.len() as u32 + t))
                            .map(|s| s.events_file.clone())
                            .ok_or_else(|| {
                                WorkerError::Job(format!("no scan result for training file {t}"))
                            })
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        let task = ReportTask {
            eval,
            train: self.plan.train.iter().map(|f| f.url.clone()).collect(),
            events,
        };
        Ok((0, OverlapTask::Report(task)))
    }

    fn summary(&self) -> String {
        let t = &self.progress.totals;
        let overlapping: u64 = self
            .report
            .iter()
            .flat_map(|r| r.overlapping.values().flat_map(|m| m.values()))
            .sum();
        format!(
            "{} eval instances in {} files, {} training documents ({:.1} MB of text) in {} files; \
             {} rows rejected; {} overlap records, {} (dataset, n, instance) overlaps",
            t.eval_records,
            self.plan.eval.len(),
            t.train_records,
            t.train_text_bytes as f64 / 1e6,
            self.plan.train.len(),
            t.eval_rejected + t.train_rejected,
            self.report.as_ref().map_or(0, |r| r.details),
            overlapping
        )
    }

    fn progress_summary(&self, stage: &str) -> serde_json::Value {
        let mut outputs: Vec<String> = Vec::new();
        outputs.extend(self.index.values().map(|o| o.shuffle_file.clone()));
        outputs.extend(self.scans.values().map(|o| o.events_file.clone()));
        if let Some(r) = &self.report {
            outputs.extend(r.files.iter().map(|f| f.path.clone()));
        }
        serde_json::json!({
            "stage_completed": stage,
            "num_eval_files": self.plan.eval.len(),
            "num_train_files": self.plan.train.len(),
            "num_shards": self.settings.partitions,
            "index_groups": self.groups,
            "n": self.settings.n,
            "tokenizer": self.settings.tokenizer,
            // The rules' text semantics (str.lower(), \s, the final sigma), so a user
            // comparing with another Python knows which it equals.
            "text_semantics": {
                "python": python_unicode::PYTHON_VERSION,
                "unicode": python_unicode::UNICODE_VERSION,
            },
            "totals": self.progress.totals,
            "completed_outputs": outputs,
        })
    }

    /// The progress lines since the last snapshot, as the next snapshot file.
    fn snapshot(&mut self) -> Option<ProgressFile> {
        if self.progress.lines.is_empty() {
            return None;
        }
        self.progress.last_write = Some(std::time::Instant::now());
        Some(ProgressFile {
            path: format!("progress/progress-{:06}.jsonl", self.progress.accepted),
            bytes: std::mem::take(&mut self.progress.lines),
        })
    }
}

fn check_rejects(side: &str, file: u32, got: &Option<String>) -> std::result::Result<(), String> {
    match got {
        Some(p) if *p != rejects_path(side, file) => {
            Err(format!("a rejects file {p:?} not planned"))
        }
        _ => Ok(()),
    }
}

impl Driver<NgramOverlap> for OverlapDriver {
    fn settings(&self) -> &Settings {
        &self.settings
    }

    fn progress_plan(&self) -> ProgressPlan {
        let bytes = self.plan.eval.iter().map(|e| e.file.size).sum::<u64>()
            + self.plan.train.iter().map(|f| f.size).sum::<u64>();
        ProgressPlan {
            stages: vec![
                (INDEX, self.plan.eval.len() as u64),
                (SCAN, self.plan.train.len() as u64),
                (REPORT, 1),
            ],
            unit: "input bytes",
            total_units: bytes,
        }
    }

    fn stage(&mut self, stage: usize) -> Result<Option<StageTasks<NgramOverlap>>> {
        Ok(Some(match stage {
            0 => self
                .plan
                .eval
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let task = IndexTask {
                        eval_file: i as u32,
                        file: e.file.clone(),
                    };
                    (i as u32, OverlapTask::Index(task))
                })
                .collect(),
            1 => self.scan_tasks(),
            2 => vec![self.report_task()?],
            _ => return Ok(None),
        }))
    }

    fn check(&self, done: Done<'_, NgramOverlap>, attempt: u32) -> std::result::Result<(), String> {
        match done {
            OverlapDone::Index(t, o) => {
                if o.shuffle_file != index_shuffle_path(t.eval_file, attempt) {
                    return Err(format!("files not planned for this attempt: {o:?}"));
                }
                check_rejects("eval", t.eval_file, &o.counts.rejects_file)?;
                let longest = self.settings.n.iter().max().copied().unwrap_or(0);
                if o.lengths.iter().any(|&n| n == 0 || n > longest) {
                    return Err(format!("n-gram lengths {:?} beyond {longest}", o.lengths));
                }
                Ok(())
            }
            OverlapDone::Scan(t, o) => {
                if (o.train_file, o.group) != (t.train_file, t.group) {
                    return Err(format!(
                        "a result for training file {} group {}",
                        o.train_file, o.group
                    ));
                }
                if o.events_file != events_path(t.index, attempt) {
                    return Err(format!("an events file {:?} not planned", o.events_file));
                }
                if t.group != 0 && o.counts.rejects_file.is_some() {
                    return Err("a rejects file from a scan that writes none".into());
                }
                check_rejects("train", t.train_file, &o.counts.rejects_file)
            }
            OverlapDone::Report(_, o) => {
                let train = self.plan.train.len() as u32;
                let mut allowed: BTreeSet<String> =
                    (0..train).map(|t| instances_path(t, train)).collect();
                allowed.insert(DETAILS.into());
                allowed.insert(STATS.into());
                let got: BTreeSet<String> = o.files.iter().map(|f| f.path.clone()).collect();
                if got != allowed {
                    return Err(format!("report files {got:?}, planned {allowed:?}"));
                }
                Ok(())
            }
        }
    }

    fn accept(&mut self, task: TaskId, output: OverlapOutput) -> Result<Progressed> {
        let t = &mut self.progress.totals;
        let progressed = match output {
            OverlapOutput::Index(o) => {
                t.eval_records += o.counts.valid();
                t.eval_rejected += o.counts.rows - o.counts.valid();
                t.test_ngrams += o.ngrams;
                let size = self
                    .plan
                    .eval
                    .get(task.index as usize)
                    .map_or(0, |e| e.file.size);
                self.index.insert(task.index, o);
                Progressed {
                    units: size,
                    bytes: 0,
                }
            }
            OverlapOutput::Scan(o) => {
                // Every group's scan reads the whole file: its rows count once.
                let first_group = o.group == 0;
                if first_group {
                    t.train_records += o.counts.valid();
                    t.train_rejected += o.counts.rows - o.counts.valid();
                    t.train_text_bytes += o.text_bytes;
                }
                t.train_ngrams += o.ngrams;
                t.overlap_events += o.events;
                let size = match self.plan.train.get(o.train_file as usize) {
                    Some(f) if first_group => f.size,
                    _ => 0,
                };
                self.scans.insert(task.index, o);
                Progressed {
                    units: size,
                    bytes: 0,
                }
            }
            OverlapOutput::Report(o) => {
                let bytes = o.files.iter().map(|f| f.bytes).sum();
                self.report = Some(o);
                Progressed { units: 0, bytes }
            }
        };
        self.progress.accepted += 1;
        let line = serde_json::json!({
            "stage": task.stage.as_str(),
            "task": task.to_string(),
            "tasks_done": self.progress.accepted,
            "totals": self.progress.totals,
        });
        self.progress
            .lines
            .extend_from_slice(line.to_string().as_bytes());
        self.progress.lines.push(b'\n');
        Ok(progressed)
    }

    fn record_progress(&mut self, stage_done: Option<usize>) -> Vec<ProgressFile> {
        let mut files = Vec::new();
        match stage_done {
            None => {
                let due = self
                    .progress
                    .last_write
                    .is_none_or(|t| t.elapsed() >= SNAPSHOT_EVERY);
                if due {
                    files.extend(self.snapshot());
                }
            }
            Some(stage) => {
                files.extend(self.snapshot());
                let name = [INDEX, SCAN, REPORT].get(stage).copied().unwrap_or("?");
                match serde_json::to_vec_pretty(&self.progress_summary(name)) {
                    Ok(bytes) => files.push(ProgressFile {
                        path: PROGRESS_SUMMARY.into(),
                        bytes,
                    }),
                    Err(e) => tracing::warn!(error = %e, "cannot encode the progress summary"),
                }
            }
        }
        files
    }

    fn finish<'a>(&'a mut self, output: &'a StoreUrl) -> BoxFuture<'a, Result<String>> {
        Box::pin(async move {
            if self.report.is_none() {
                return Err(WorkerError::Job("finished without a report".into()));
            }
            output.delete_prefix(WORK_DIR).await?;
            Ok(self.summary())
        })
    }

    fn discard_late<'a>(
        &'a self,
        job: &'a JobContext,
        task: TaskId,
        attempt: u32,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move { discard_attempt(job, task, attempt).await })
    }
}

/// Removes what attempt `attempt` of `task` wrote under [`WORK_DIR`], once the job is
/// complete (before that, the finishing job removes the whole directory). By the
/// planned names only.
async fn discard_attempt(job: &JobContext, task: TaskId, attempt: u32) -> Result<bool> {
    let output = StoreUrl::parse(&job.output)?;
    if !output.exists(&output.child(SUCCESS)).await? {
        return Ok(false);
    }
    let files = match task.stage.as_str() {
        INDEX => vec![
            index_shuffle_path(task.index, attempt),
            crate::engine::shuffle::index_path(&index_shuffle_path(task.index, attempt)),
        ],
        SCAN => vec![events_path(task.index, attempt)],
        _ => return Ok(false),
    };
    for f in files {
        output.delete(&output.child(&f)).await?;
    }
    Ok(true)
}

/// The index group a scan loaded: (job, group, groups, index files).
type GroupKey = (String, u32, u32, Vec<String>);

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
type Ran = (
    OverlapOutput,
    Option<Arc<ngram_index::NgramIndex>>,
    source::WholeFiles,
);

impl Runner<NgramOverlap> for OverlapRunner {
    fn run<'a>(
        &'a mut self,
        call: TaskCall<'a, NgramOverlap>,
        _env: TaskEnv<'a>,
    ) -> BoxFuture<'a, Result<OverlapOutput>> {
        Box::pin(async move {
            let settings = call.settings.clone();
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
            let cached = match (&self.index, &group) {
                (Some((key, index)), Some(want)) if key == want => Some(index.clone()),
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
                                &task.index_files,
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
                            &handle, &task, &output, &settings, attempt, &mut whole,
                        )?;
                        Ok(done((OverlapOutput::Index(out), None, whole)))
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
                .map_err(|e| WorkerError::Job(format!("the task's thread failed: {e}")))??;
            self.whole = whole;
            if let (Some(key), Some(index)) = (group, index) {
                self.index = Some((key, index));
            }
            Ok(out)
        })
    }

    fn discard_unreported<'a>(
        &'a self,
        call: TaskCall<'a, NgramOverlap>,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move { discard_attempt(call.job, call.id, call.attempt).await })
    }

    fn forged(
        &self,
        _call: TaskCall<'_, NgramOverlap>,
        output: OverlapOutput,
    ) -> Output<NgramOverlap> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_planned_with_other_intermediate_files_is_not_resumed() {
        let output = StoreUrl::parse("/tmp/out").unwrap();
        let current: Plan = serde_json::from_value(serde_json::json!({
            "eval": [], "train": [], "index_budget": 1, "whole_gzip_max": 0,
            "intermediate_format": INTERMEDIATE_FORMAT_VERSION,
        }))
        .unwrap();
        assert!(current.check_intermediate_format(&output).is_ok());
        // A plan journaled before the format was recorded is of format 1: its scans
        // wrote one line per event.
        let old: Plan = serde_json::from_value(serde_json::json!({
            "eval": [], "train": [], "index_budget": 1,
        }))
        .unwrap();
        assert_eq!((old.intermediate_format, old.whole_gzip_max), (1, 0));
        let err = old.check_intermediate_format(&output).unwrap_err();
        // Not this job's output to resume (exit 2), not a failed job (exit 1).
        assert!(matches!(err, WorkerError::Conflict(_)), "{err:?}");
        let err = err.to_string();
        assert!(
            err.contains("/tmp/out")
                && err.contains("format 1")
                && err.contains(&format!("format {INTERMEDIATE_FORMAT_VERSION}")),
            "{err}"
        );
    }
}
