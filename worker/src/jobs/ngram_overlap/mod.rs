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

use crate::engine::job::{
    decode_payload as decode, encode_payload as encode, parse_job_file, BoxFuture, JobDriver,
    JobFile, JobKind, PlanHints, ProgressFile, ProgressPlan, Progressed, TaskEnv, TaskRunner,
};
use crate::engine::protocol::{Assignment, JobContext, Payload, TaskId, TaskSpec};
use crate::engine::store::{self, StoreUrl};
use crate::engine::thread_cpu::ThreadCpuTimer;
use crate::error::{Result, WorkerError};
use protocol::{
    events_path, index_id, index_shuffle_path, instances_path, rejects_path, report_id, scan_id,
    EvalFile, IndexOutput, IndexTask, InputFile, ReportOutput, ReportTask, ScanOutput, ScanTask,
    Settings, DETAILS, INDEX, INTERMEDIATE_FORMAT_VERSION, PROGRESS_SUMMARY, REPORT, SCAN, STATS,
    SUCCESS, WORK_DIR,
};
use spec::OverlapFile;

/// The kind's name in job files.
pub const NAME: &str = "ngram_overlap";

/// The n-gram overlap job kind.
pub struct NgramOverlap;

/// What `.SUCCESS` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Success {
    fingerprint: String,
    summary: String,
    /// The input the output was made from, eval files then training files.
    inputs: Vec<InputFile>,
}

impl JobKind for NgramOverlap {
    fn name(&self) -> &'static str {
        NAME
    }

    fn completion_marker(&self) -> &'static str {
        SUCCESS
    }

    fn load(&self, file: &str, text: &str) -> Result<Box<dyn JobFile>> {
        let spec: OverlapFile = parse_job_file(file, text, |s: &OverlapFile| s.validate())?;
        Ok(Box::new(spec))
    }

    fn runner(&self) -> Box<dyn TaskRunner> {
        Box::new(OverlapRunner::default())
    }

    fn describe_finished<'a>(
        &'a self,
        output: &'a StoreUrl,
    ) -> BoxFuture<'a, Result<Option<Vec<String>>>> {
        Box::pin(async move {
            Ok(read_success(output).await?.map(|s| {
                vec![
                    s.summary,
                    format!("statistics in {STATS}, records in {DETAILS}"),
                ]
            }))
        })
    }

    fn planned_tasks(
        &self,
        spec: &Payload,
        plan: &Payload,
        results: &[(TaskId, &Payload)],
    ) -> Vec<(&'static str, Option<u64>)> {
        let Ok(p) = plan.decode::<Plan>() else {
            return Vec::new();
        };
        // One scan task per training file and index group; the groups are known once
        // every index task is done.
        let scans = || -> Option<u64> {
            let partitions = spec.decode::<OverlapFile>().ok()?.index.partitions;
            let index = results
                .iter()
                .filter(|(task, _)| task.stage.as_str() == INDEX)
                .map(|(_, output)| output.decode::<IndexOutput>().ok())
                .collect::<Option<Vec<_>>>()?;
            (index.len() == p.eval.len()).then(|| {
                let postings = index.iter().map(|o| o.ngrams).sum();
                p.train.len() as u64 * u64::from(index_groups(postings, p.index_budget, partitions))
            })
        };
        vec![
            (INDEX, Some(p.eval.len() as u64)),
            (SCAN, scans()),
            (REPORT, Some(1)),
        ]
    }
}

async fn read_success(output: &StoreUrl) -> Result<Option<Success>> {
    let Some(bytes) = output.get_opt(&output.child(SUCCESS)).await? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| WorkerError::Corrupt {
            file: output.display(&output.child(SUCCESS)),
            what: format!("not this job kind's completion marker: {e}"),
        })
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

/// Lists one side's paths: every file, pinned, in the order of the paths (each path's
/// files sorted). A file listed twice, or in a format the job cannot read, is an error.
async fn list_side(side: &str, paths: &[String]) -> Result<Vec<(String, InputFile)>> {
    let mut out: Vec<(String, InputFile)> = Vec::new();
    let mut seen = BTreeSet::new();
    for path in paths {
        let (base, files) =
            store::list_matching_in(path, |rel| source::format_of(rel).is_some()).await?;
        if files.is_empty() {
            return Err(WorkerError::Job(format!(
                "[{side}] no input files match {path}"
            )));
        }
        for meta in files {
            let url = base.display(&meta.location);
            if source::format_of(&url).is_none() {
                return Err(WorkerError::Job(format!(
                    "[{side}] {url}: not a .jsonl, .jsonl.gz, .jsonl.zst or .parquet file"
                )));
            }
            if !seen.insert(url.clone()) {
                return Err(WorkerError::Job(format!(
                    "[{side}] {url} is listed twice (by {path} and an earlier path)"
                )));
            }
            out.push((
                path.clone(),
                InputFile {
                    url,
                    size: meta.size,
                    etag: meta.e_tag,
                },
            ));
        }
    }
    Ok(out)
}

impl Plan {
    /// Every input file, eval files then training files.
    fn inputs(&self) -> Vec<InputFile> {
        let eval = self.eval.iter().map(|e| e.file.clone());
        eval.chain(self.train.iter().cloned()).collect()
    }
}

impl OverlapFile {
    /// Refuses input that is not `planned` any more (a file changed, added or
    /// vanished): the output would not be this input's.
    async fn refuse_changed_input(&self, planned: &[InputFile], since: &str) -> Result<()> {
        let mut now = list_side("eval", &self.eval.paths).await?;
        now.extend(list_side("train", &self.train.paths).await?);
        let changes = store::pin_changes(
            planned.iter().map(|f| (f.url.as_str(), f.size, &f.etag)),
            now.iter().map(|(_, f)| (f.url.as_str(), f.size, &f.etag)),
        );
        store::refuse_changes("the input", since, &changes)
    }
}

impl JobFile for OverlapFile {
    fn output_url(&self) -> &str {
        &self.output.url
    }

    fn fingerprint(&self) -> String {
        OverlapFile::fingerprint(self)
    }

    fn to_json(&self) -> Payload {
        Payload::encode(self).unwrap_or_default()
    }

    fn completed<'a>(&'a self, output: &'a StoreUrl) -> BoxFuture<'a, Result<Option<String>>> {
        Box::pin(async move {
            match read_success(output).await {
                Ok(None) => Ok(None),
                Ok(Some(s)) if s.fingerprint == OverlapFile::fingerprint(self) => {
                    self.refuse_changed_input(&s.inputs, "this output was made")
                        .await?;
                    Ok(Some(s.summary))
                }
                Ok(Some(_)) | Err(WorkerError::Corrupt { .. }) => {
                    Err(WorkerError::Conflict(format!(
                        "{} already holds the output of a different job (fingerprint mismatch); \
                         choose another [output] url or remove it",
                        output.url
                    )))
                }
                Err(e) => Err(e),
            }
        })
    }

    fn plan<'a>(
        &'a self,
        _output: &'a StoreUrl,
        hints: PlanHints,
    ) -> BoxFuture<'a, Result<Payload>> {
        Box::pin(async move {
            let eval = list_side("eval", &self.eval.paths)
                .await?
                .into_iter()
                .map(|(path, file)| EvalInput {
                    dataset: records::eval_dataset_name(&path),
                    file,
                })
                .collect();
            let train = list_side("train", &self.train.paths)
                .await?
                .into_iter()
                .map(|(_, f)| f)
                .collect();
            let index_budget = self
                .index
                .memory
                .as_deref()
                .and_then(crate::engine::units::parse_bytes)
                .unwrap_or(hints.memory_per_worker / 2);
            encode(&Plan {
                eval,
                train,
                index_budget,
                whole_gzip_max: (hints.memory_per_worker / 16).min(WHOLE_GZIP_CAP),
                intermediate_format: INTERMEDIATE_FORMAT_VERSION,
            })
        })
    }

    fn open<'a>(
        &'a self,
        output: &'a StoreUrl,
        plan: Payload,
    ) -> BoxFuture<'a, Result<Box<dyn JobDriver>>> {
        Box::pin(async move {
            let plan: Plan = decode("the journaled plan", &plan)?;
            plan.check_intermediate_format(output)?;
            self.refuse_changed_input(&plan.inputs(), "the job was planned")
                .await?;
            Ok(Box::new(OverlapDriver {
                settings: Settings {
                    whole_gzip_max: plan.whole_gzip_max,
                    ..self.settings()
                },
                fingerprint: OverlapFile::fingerprint(self),
                plan,
                index: BTreeMap::new(),
                groups: 1,
                scans: BTreeMap::new(),
                report: None,
                progress: ProgressLog::default(),
            }) as Box<dyn JobDriver>)
        })
    }
}

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
struct OverlapDriver {
    settings: Settings,
    fingerprint: String,
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

    fn scan_tasks(&mut self) -> Result<Vec<TaskSpec>> {
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
                tasks.push(TaskSpec {
                    id: scan_id(index),
                    body: encode(&ScanTask {
                        index,
                        train_file: t as u32,
                        file: file.clone(),
                        group,
                        groups: self.groups,
                        index_files,
                        eval_rows: self.index.values().map(|o| o.counts.rows).collect(),
                        lengths: lengths.iter().copied().collect(),
                    })?,
                });
            }
        }
        Ok(tasks)
    }

    fn report_task(&self) -> Result<TaskSpec> {
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
        Ok(TaskSpec {
            id: report_id(),
            body: encode(&ReportTask {
                eval,
                train: self.plan.train.iter().map(|f| f.url.clone()).collect(),
                events,
            })?,
        })
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

impl JobDriver for OverlapDriver {
    fn settings(&self) -> Payload {
        Payload::encode(&self.settings).unwrap_or_default()
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

    fn stage(&mut self, stage: usize) -> Result<Option<Vec<TaskSpec>>> {
        Ok(Some(match stage {
            0 => self
                .plan
                .eval
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    Ok(TaskSpec {
                        id: index_id(i as u32),
                        body: encode(&IndexTask {
                            eval_file: i as u32,
                            file: e.file.clone(),
                        })?,
                    })
                })
                .collect::<Result<Vec<_>>>()?,
            1 => self.scan_tasks()?,
            2 => vec![self.report_task()?],
            _ => return Ok(None),
        }))
    }

    fn check(
        &self,
        task: &TaskSpec,
        attempt: u32,
        output: &Payload,
    ) -> std::result::Result<(), String> {
        let err = |e: WorkerError| e.to_string();
        match task.id.stage.as_str() {
            INDEX => {
                let t: IndexTask = decode("index task", &task.body).map_err(err)?;
                let o: IndexOutput = decode("index result", output).map_err(err)?;
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
            SCAN => {
                let t: ScanTask = decode("scan task", &task.body).map_err(err)?;
                let o: ScanOutput = decode("scan result", output).map_err(err)?;
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
            REPORT => {
                let o: ReportOutput = decode("report result", output).map_err(err)?;
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
            other => Err(format!("a result of an unknown stage {other:?}")),
        }
    }

    fn accept(&mut self, task: TaskId, output: Payload) -> Result<Progressed> {
        let t = &mut self.progress.totals;
        let progressed = match task.stage.as_str() {
            INDEX => {
                let o: IndexOutput = decode("index result", &output)?;
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
            SCAN => {
                let o: ScanOutput = decode("scan result", &output)?;
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
            REPORT => {
                let o: ReportOutput = decode("report result", &output)?;
                let bytes = o.files.iter().map(|f| f.bytes).sum();
                self.report = Some(o);
                Progressed { units: 0, bytes }
            }
            other => {
                return Err(WorkerError::Job(format!(
                    "a result of an unknown stage {other:?}"
                )))
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
            let summary = self.summary();
            output
                .put_json(
                    SUCCESS,
                    &Success {
                        fingerprint: self.fingerprint.clone(),
                        summary: summary.clone(),
                        inputs: self.plan.inputs(),
                    },
                )
                .await?;
            output.delete_prefix(WORK_DIR).await?;
            Ok(summary)
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
struct OverlapRunner {
    index: Option<(GroupKey, Arc<ngram_index::NgramIndex>)>,
    whole: source::WholeFiles,
}

impl TaskRunner for OverlapRunner {
    fn run<'a>(
        &'a mut self,
        a: &'a Assignment,
        _env: TaskEnv<'a>,
    ) -> BoxFuture<'a, Result<Payload>> {
        Box::pin(async move {
            let settings: Settings = decode("the job's settings", &a.job.settings)?;
            let output = StoreUrl::parse(&a.job.output)?;
            let handle = tokio::runtime::Handle::current();
            let stage = a.task.id.stage.as_str().to_string();
            let body = a.task.body.clone();
            let attempt = a.attempt;
            let scan: Option<ScanTask> = match stage.as_str() {
                SCAN => Some(decode("scan task", &body)?),
                _ => None,
            };
            let group: Option<GroupKey> = scan.as_ref().map(|t| {
                (
                    a.job.job_id.clone(),
                    t.group,
                    t.groups,
                    t.index_files.clone(),
                )
            });
            let cached = match (&self.index, &group) {
                (Some((key, index)), Some(want)) if key == want => Some(index.clone()),
                _ => None,
            };
            let mut whole = std::mem::take(&mut self.whole);
            if whole.max != settings.whole_gzip_max {
                whole = source::WholeFiles::new(settings.whole_gzip_max);
            }
            let task_id = a.task.id;
            let joined = tokio::task::spawn_blocking(
                move || -> Result<(Payload, Option<Arc<ngram_index::NgramIndex>>, source::WholeFiles)> {
                    let cpu = ThreadCpuTimer::start();
                    let done = |out| {
                        tracing::debug!(task = %task_id, attempt, cpu_ms = cpu.elapsed_ms(), "task CPU time");
                        out
                    };
                    match (stage.as_str(), scan) {
                        (SCAN, Some(task)) => {
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
                            Ok(done((encode(&out)?, Some(index), whole)))
                        }
                        (INDEX, _) => {
                            let task: IndexTask = decode("index task", &body)?;
                            let out = index::run_index(
                                &handle, &task, &output, &settings, attempt, &mut whole,
                            )?;
                            Ok(done((encode(&out)?, None, whole)))
                        }
                        (REPORT, _) => {
                            let task: ReportTask = decode("report task", &body)?;
                            let out = report::run_report(&handle, &task, &output, &settings, &mut whole)?;
                            Ok(done((encode(&out)?, None, whole)))
                        }
                        (other, _) => Err(WorkerError::Job(format!(
                            "no stage {other:?} in an overlap job"
                        ))),
                    }
                },
            )
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

    fn discard_unreported<'a>(&'a self, a: &'a Assignment) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move { discard_attempt(&a.job, a.task.id, a.attempt).await })
    }

    fn forged(&self, a: &Assignment, output: Payload) -> Payload {
        let key = match a.task.id.stage.as_str() {
            INDEX => "shuffle_file",
            SCAN => "events_file",
            _ => return output,
        };
        let Ok(mut value) = output.decode::<serde_json::Value>() else {
            return output;
        };
        if let Some(obj) = value.as_object_mut() {
            obj.insert(key.into(), "../../elsewhere".into());
        }
        encode(&value).unwrap_or(output)
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
