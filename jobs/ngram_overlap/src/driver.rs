//! The overlap job on the coordinator: its stages (index, scan, report, and clean
//! with `[clean]`) planned from the results before them, each result checked against
//! its task, the running totals and progress files, the end of the job; late
//! attempts' files removed.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;

use futures::StreamExt;
use serde::Serialize;

use probeflow_engine::error::{EngineError, Result};
use probeflow_engine::kind::{
    Done, Driver, Finished, OutputFile, ProgressFile, ProgressTotals, Progressed, Stage, StageTasks,
};
use probeflow_engine::protocol::TaskId;
use probeflow_engine::store::StoreUrl;
use protocol::{
    edits_path, events_path, index_shuffle_path, instances_path, rejects_path, CleanOutput,
    CleanTask, EvalFile, IndexGroups, IndexOutput, IndexTask, OverlapDone, OverlapOutput,
    OverlapStage, OverlapTask, ReportOutput, ReportTask, ScanOutput, ScanTask, Settings,
    CLEANED_DIR, CLEAN_MANIFEST, DETAILS, HOT, PROGRESS_SUMMARY, STATS, WORK_DIR,
};

use super::*;

/// Running totals, for `progress/` and `progress_summary.json`.
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct Totals {
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
pub(super) struct ProgressLog {
    totals: Totals,
    lines: Vec<u8>,
    last_write: Option<std::time::Instant>,
    accepted: u64,
}

/// Rejects files read back at once at the end of the job.
const REJECTS_READ_AHEAD: usize = 16;

/// How often a snapshot file is written while a stage runs.
pub(super) const SNAPSHOT_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// A planned overlap job on the coordinator.
pub struct OverlapDriver {
    settings: Settings,
    plan: Plan,
    index: BTreeMap<u32, IndexOutput>,
    /// Index groups (scan tasks per training file), fixed when the scan stage is made.
    groups: u32,
    scans: BTreeMap<u32, ScanOutput>,
    report: Option<ReportOutput>,
    /// With `[clean]`: where each training file's cleaned copy goes, and the results.
    cleaned_paths: Vec<String>,
    cleans: BTreeMap<u32, CleanOutput>,
    progress: ProgressLog,
    /// The last `progress_summary.json` asked to be written (a final output file).
    summary_written: Option<OutputFile>,
}

impl OverlapDriver {
    /// The driver of a job of `plan`, whose tasks get `settings`.
    pub(super) fn new(settings: Settings, plan: Plan) -> Result<OverlapDriver> {
        let cleaned_paths = match settings.clean {
            None => Vec::new(),
            Some(_) => {
                let urls: Vec<&str> = plan.train.iter().map(|f| f.url.as_str()).collect();
                clean::cleaned_paths(&urls).map_err(|what| EngineError::Spec {
                    file: "the job file".into(),
                    what,
                })?
            }
        };
        Ok(OverlapDriver {
            settings,
            plan,
            index: BTreeMap::new(),
            groups: 1,
            scans: BTreeMap::new(),
            report: None,
            cleaned_paths,
            cleans: BTreeMap::new(),
            progress: ProgressLog::default(),
            summary_written: None,
        })
    }

    /// With `[clean]`: one clean task per training file.
    pub(super) fn clean_tasks(&self) -> Vec<(u32, OverlapTask)> {
        self.plan
            .train
            .iter()
            .zip(&self.cleaned_paths)
            .enumerate()
            .map(|(t, (file, dest))| {
                let task = CleanTask {
                    train_file: t as u32,
                    file: file.clone(),
                    edits: edits_path(t as u32),
                    dest: dest.clone(),
                };
                (t as u32, OverlapTask::Clean(task))
            })
            .collect()
    }

    pub(super) fn index_groups(&self) -> u32 {
        let postings: u64 = self.index.values().map(|o| o.ngrams).sum();
        index_groups(postings, self.plan.index_budget, self.settings.partitions)
    }

    /// The effective lengths the index holds, ascending.
    fn index_lengths(&self) -> Vec<u32> {
        let lengths: BTreeSet<u32> = self
            .index
            .values()
            .flat_map(|o| o.lengths.iter().copied())
            .collect();
        lengths.into_iter().collect()
    }

    pub(super) fn scan_tasks(&mut self) -> Vec<(u32, OverlapTask)> {
        self.groups = self.index_groups();
        let lengths = self.index_lengths();
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
                    index_runs: self.index.values().map(|o| o.runs).collect(),
                    lengths: lengths.clone(),
                };
                tasks.push((index, OverlapTask::Scan(task)));
            }
        }
        tasks
    }

    pub(super) fn report_task(&self) -> Result<(u32, OverlapTask)> {
        let eval = self
            .plan
            .eval
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let out = self.index.get(&(i as u32)).ok_or_else(|| {
                    EngineError::Internal(format!("no index result for eval file {i}"))
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
                                EngineError::Internal(format!(
                                    "no scan result for training file {t}"
                                ))
                            })
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        let cuts = self
            .settings
            .clean
            .is_some_and(|c| c.mode == protocol::CleanMode::Cut);
        let index = cuts.then(|| IndexGroups {
            files: self
                .index
                .values()
                .map(|o| o.shuffle_file.clone())
                .collect(),
            eval_rows: self.index.values().map(|o| o.counts.rows).collect(),
            runs: self.index.values().map(|o| o.runs).collect(),
            lengths: self.index_lengths(),
            groups: self.groups,
        });
        let task = ReportTask {
            eval,
            train: self.plan.train.iter().map(|f| f.url.clone()).collect(),
            events,
            index,
        };
        Ok((0, OverlapTask::Report(task)))
    }

    pub(super) fn summary(&self) -> String {
        let t = &self.progress.totals;
        let overlapping: u64 = self
            .report
            .iter()
            .flat_map(|r| r.overlapping.values().flat_map(|m| m.values()))
            .sum();
        let hot = match (&self.settings.triage, &self.report) {
            (Some(triage), Some(r)) => format!(
                "; {} hot n-grams ({}) in {HOT}",
                r.hot,
                if triage.exclude {
                    "not counted in the statistics"
                } else {
                    "counted"
                }
            ),
            _ => String::new(),
        };
        let cleaned = match (&self.settings.clean, &self.report) {
            (Some(_), Some(r)) => format!(
                "; cleaned corpus in {CLEANED_DIR}/: {} documents dropped, {} cut ({CLEAN_MANIFEST})",
                r.dropped, r.cut
            ),
            _ => String::new(),
        };
        format!(
            "{} eval instances in {} files, {} training documents ({:.1} MB of text) in {} files; \
             {} rows rejected; {} overlap records, {} (dataset, n, instance) overlaps{hot}{cleaned}",
            t.eval_records,
            self.plan.eval.len(),
            t.train_records,
            t.train_text_bytes as f64 / 1e6,
            self.plan.train.len(),
            t.eval_rejected + t.train_rejected,
            self.report.as_ref().map_or(0, |r| r.details),
            overlapping,
        )
    }

    pub(super) fn progress_summary(&self, stage: &str) -> serde_json::Value {
        let mut outputs: Vec<String> = Vec::new();
        outputs.extend(self.index.values().map(|o| o.shuffle_file.clone()));
        outputs.extend(self.scans.values().map(|o| o.events_file.clone()));
        if let Some(r) = &self.report {
            outputs.extend(r.files.iter().map(|f| f.path.clone()));
        }
        outputs.extend(self.cleans.values().map(|o| o.file.path.clone()));
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
    pub(super) fn snapshot(&mut self) -> Option<ProgressFile> {
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

impl OverlapDriver {
    /// Every final output file: the report's (but the edits, which are intermediate),
    /// the cleaned files, the rejects files (read back: their writers do not report
    /// digests; each is at most a file's rejected lines) and `progress_summary.json`.
    async fn final_files(&self, output: &StoreUrl) -> Result<Vec<OutputFile>> {
        let mut files: Vec<OutputFile> = self
            .report
            .iter()
            .flat_map(|r| &r.files)
            .filter(|f| !f.path.starts_with(WORK_DIR))
            .cloned()
            .collect();
        files.extend(self.cleans.values().map(|c| c.file.clone()));
        let rejects: BTreeSet<String> = self
            .index
            .values()
            .map(|o| &o.counts)
            .chain(self.scans.values().map(|o| &o.counts))
            .filter_map(|c| c.rejects_file.clone())
            .collect();
        // One request after another would be minutes against a store tens of
        // milliseconds away at thousands of input files: several at once.
        let read: Vec<Result<OutputFile>> = futures::stream::iter(rejects)
            .map(|path: String| async move {
                OutputFile::read_back(output, &path)
                    .await?
                    .ok_or_else(|| EngineError::Corrupt {
                        file: output.display(&output.child(&path)),
                        what: "an accepted task's rejects file is missing".into(),
                    })
            })
            .buffered(REJECTS_READ_AHEAD)
            .collect()
            .await;
        for file in read {
            files.push(file?);
        }
        files.extend(self.summary_written.clone());
        Ok(files)
    }
}

pub(super) fn check_rejects(
    side: &str,
    file: u32,
    got: &Option<String>,
) -> std::result::Result<(), String> {
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

    fn progress_totals(&self) -> ProgressTotals {
        let bytes = self.plan.eval.iter().map(|e| e.file.size).sum::<u64>()
            + self.plan.train.iter().map(|f| f.size).sum::<u64>();
        ProgressTotals {
            unit: "input bytes",
            total_units: bytes,
        }
    }

    /// An index or scan task's input bytes; a report or clean task: one task.
    fn task_units(&self, task: &OverlapTask) -> u64 {
        match task {
            OverlapTask::Index(t) => t.file.size,
            OverlapTask::Scan(t) => t.file.size,
            OverlapTask::Report(_) | OverlapTask::Clean(_) => 1,
        }
    }

    fn work_unit(&self, stage: OverlapStage) -> &'static str {
        match stage {
            OverlapStage::Index | OverlapStage::Scan => "input_bytes",
            OverlapStage::Report | OverlapStage::Clean => "tasks",
        }
    }

    fn stage(&mut self, stage: OverlapStage) -> Result<Option<StageTasks<NgramOverlap>>> {
        Ok(Some(match stage {
            OverlapStage::Index => self
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
            OverlapStage::Scan => self.scan_tasks(),
            OverlapStage::Report => vec![self.report_task()?],
            OverlapStage::Clean if self.settings.clean.is_some() => self.clean_tasks(),
            // Without [clean] the job ends after its report.
            OverlapStage::Clean => return Ok(None),
        }))
    }

    fn check(&self, done: Done<'_, NgramOverlap>, attempt: u32) -> std::result::Result<(), String> {
        match done {
            OverlapDone::Index(t, o) => {
                if o.shuffle_file != index_shuffle_path(t.eval_file, attempt) {
                    return Err(format!("files not planned for this attempt: {o:?}"));
                }
                // Run r's segments are numbered from r × 2 × partitions.
                if o.runs == 0 || o.runs.checked_mul(2 * self.settings.partitions).is_none() {
                    return Err(format!("{} runs in an index file", o.runs));
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
            OverlapDone::Clean(t, o) => {
                let planned = self.cleaned_paths.get(t.train_file as usize);
                if planned != Some(&t.dest) || o.file.path != t.dest {
                    return Err(format!("a cleaned file {:?} not planned", o.file.path));
                }
                if o.dropped + o.cut > o.rows {
                    return Err(format!("{} rows edited of {}", o.dropped + o.cut, o.rows));
                }
                Ok(())
            }
            OverlapDone::Report(_, o) => {
                let train = self.plan.train.len() as u32;
                let mut allowed: BTreeSet<String> =
                    (0..train).map(|t| instances_path(t, train)).collect();
                allowed.insert(DETAILS.into());
                allowed.insert(STATS.into());
                if self.settings.triage.is_some() {
                    allowed.insert(HOT.into());
                }
                if self.settings.clean.is_some() {
                    allowed.insert(CLEAN_MANIFEST.into());
                    allowed.extend((0..train).map(edits_path));
                }
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
                let rejected = rejected_by_reason(&o.counts);
                self.index.insert(task.index, o);
                Progressed {
                    units: size,
                    bytes: 0,
                    rejected,
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
                let rejected = if first_group {
                    rejected_by_reason(&o.counts)
                } else {
                    Vec::new()
                };
                self.scans.insert(task.index, o);
                Progressed {
                    units: size,
                    bytes: 0,
                    rejected,
                }
            }
            OverlapOutput::Report(o) => {
                let bytes = o.files.iter().map(|f| f.bytes).sum();
                self.report = Some(o);
                Progressed {
                    units: 0,
                    bytes,
                    ..Progressed::default()
                }
            }
            OverlapOutput::Clean(o) => {
                let bytes = o.file.bytes;
                self.cleans.insert(task.index, o);
                Progressed {
                    units: 0,
                    bytes,
                    ..Progressed::default()
                }
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

    fn record_progress(&mut self, stage_done: Option<OverlapStage>) -> Vec<ProgressFile> {
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
                match serde_json::to_vec_pretty(&self.progress_summary(stage.name())) {
                    Ok(bytes) => {
                        self.summary_written = Some(OutputFile::of(PROGRESS_SUMMARY, &bytes));
                        files.push(ProgressFile {
                            path: PROGRESS_SUMMARY.into(),
                            bytes,
                        })
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot encode the progress summary"),
                }
            }
        }
        files
    }

    async fn finish(&mut self, output: &StoreUrl) -> Result<Finished> {
        if self.report.is_none() {
            return Err(EngineError::Internal("finished without a report".into()));
        }
        if let (Some(_), Some(report)) = (&self.settings.clean, &self.report) {
            // Every file cleaned, with the edits the report decided: no more, no fewer.
            let applied = self
                .cleans
                .values()
                .fold((0, 0), |(d, c), o| (d + o.dropped, c + o.cut));
            if self.cleans.len() != self.plan.train.len() || applied != (report.dropped, report.cut)
            {
                return Err(EngineError::Internal(format!(
                    "{} of {} training files cleaned, {} documents dropped and {} cut \
                         of the report's {} and {}",
                    self.cleans.len(),
                    self.plan.train.len(),
                    applied.0,
                    applied.1,
                    report.dropped,
                    report.cut
                )));
            }
        }
        Ok(Finished {
            summary: self.summary(),
            files: self.final_files(output).await?,
        })
    }

    fn clean_up<'a>(
        &'a mut self,
        output: &'a StoreUrl,
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        output.delete_prefix(WORK_DIR)
    }
}

/// A file's rejected rows by their fixed reason labels (the monitor's metric).
fn rejected_by_reason(counts: &protocol::RowCounts) -> Vec<(&'static str, u64)> {
    counts
        .rejected
        .iter()
        .map(|(reason, n)| (source::Reason::label(reason), *n))
        .collect()
}
