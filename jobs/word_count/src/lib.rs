//! The word-count job: how many times each word occurs in a set of text files. The
//! smallest kind that uses every part of the engine (two dependent stages, fenced
//! per-attempt files, pinned input, a final output); the engine's own tests run it.
//!
//! ```text
//! count: one task per input file ─► its words counted ─► _job/counts/count-NNNNN-aA.json
//! merge: one task, after every count ─► the counts summed ─► word_counts.tsv (word<TAB>count, sorted)
//! finish: _job/counts removed; the engine writes _SUCCESS
//! ```
//!
//! A word is a maximal run of non-whitespace (Unicode `White_Space`), as it is in the
//! file (no case folding); a file that is not UTF-8 fails its task, naming it.

use std::collections::BTreeMap;
use std::future::Future;

use serde::{Deserialize, Serialize};

use probeflow_engine::error::{EngineError, Fault, KindError, Result};
use probeflow_engine::inputs::{InputSource, PinnedFile};
use probeflow_engine::kind::{
    Done, Driver, Finished, Kind, KindFile, OutputFile, PlanContext, ProgressTotals, Progressed,
    RunResult, Runner, StageTasks, TaskCall, TaskEnv,
};
use probeflow_engine::protocol::TaskId;
use probeflow_engine::store::{self, StoreUrl};

/// The kind's name in job files.
pub const NAME: &str = "word_count";
/// Count one file's words.
pub const COUNT: &str = "count";
/// Sum every file's counts.
pub const MERGE: &str = "merge";
/// The job's output, relative to the output root.
pub const COUNTS: &str = "word_counts.tsv";
/// The count tasks' files (removed when the job completes).
const WORK_DIR: &str = "_job/counts";

/// Attempt `attempt` of count task `file`: its counts.
pub fn counts_path(file: u32, attempt: u32) -> String {
    format!("{WORK_DIR}/count-{file:05}-a{attempt}.json")
}

/// A word-count job file's sections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WordCountFile {
    pub input: WordCountInput,
    pub output: WordCountOutput,
    /// The engine's keys (`kind`, `[run]`): read by the engine, ignored here.
    #[serde(default, skip_serializing)]
    pub kind: Option<String>,
    #[serde(default, skip_serializing)]
    pub run: Option<toml::Table>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WordCountInput {
    /// Files, directories (their `.txt` files) or globs.
    pub paths: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WordCountOutput {
    pub url: String,
}

impl KindFile for WordCountFile {
    fn validate(&self) -> std::result::Result<(), String> {
        if self.input.paths.is_empty() {
            return Err("[input] paths is empty".into());
        }
        if self.output.url.is_empty() {
            return Err("[output] url is empty".into());
        }
        Ok(())
    }

    fn output_url(&self) -> &str {
        &self.output.url
    }

    fn identity(&self) -> serde_json::Value {
        serde_json::json!({"kind": NAME, "input": self.input, "output": self.output})
    }

    fn inputs(&self) -> Vec<InputSource> {
        vec![InputSource {
            section: "input",
            paths: self.input.paths.clone(),
            formats: "a .txt file",
            accepts: is_text,
        }]
    }
}

fn is_text(name: &str) -> bool {
    name.ends_with(".txt")
}

/// Count the words of one input file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountTask {
    pub file: u32,
    pub input: PinnedFile,
}

/// A count task's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountOutput {
    /// Where the attempt wrote its counts (relative to the output root).
    pub counts_file: String,
    pub words: u64,
}

/// Sum the accepted counts files, in input order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeTask {
    pub counts_files: Vec<String>,
}

/// The merge's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeOutput {
    pub words: u64,
    pub distinct: u64,
    pub bytes: u64,
    /// Of [`COUNTS`].
    pub blake3: String,
}

probeflow_engine::stages! {
    /// A word-count task: a count (task index: its input file) or the merge (index 0).
    pub enum WordCountTask, WordCountResult, WordCountDone, WordCountStage {
        Count(COUNT): CountTask => CountOutput,
        Merge(MERGE): MergeTask => MergeOutput,
    }
}

/// The journaled plan: the input files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub inputs: Vec<PinnedFile>,
}

/// The word-count job kind.
pub struct WordCount;

impl Kind for WordCount {
    const NAME: &'static str = NAME;
    /// Its one output file is at the root.
    const FINAL_DIRS: &'static [&'static str] = &[];
    type File = WordCountFile;
    type Plan = Plan;
    type Settings = ();
    type Task = WordCountTask;
    type Driver = WordCountDriver;
    type Runner = WordCountRunner;

    fn plan<'a>(
        &'a self,
        _file: &'a WordCountFile,
        context: PlanContext<'a>,
    ) -> impl Future<Output = Result<Plan>> + Send + 'a {
        let inputs = context.inputs.into_iter().map(|f| f.file).collect();
        async move { Ok(Plan { inputs }) }
    }

    fn open(
        &self,
        _file: &WordCountFile,
        _output: &StoreUrl,
        plan: Plan,
    ) -> Result<WordCountDriver> {
        Ok(WordCountDriver {
            plan,
            counts: BTreeMap::new(),
            merged: None,
        })
    }

    fn runner(&self) -> WordCountRunner {
        WordCountRunner
    }

    fn task_counts(
        &self,
        _file: &WordCountFile,
        plan: &Plan,
        _results: &[(TaskId, WordCountResult)],
    ) -> Vec<(WordCountStage, Option<u64>)> {
        vec![
            (WordCountStage::Count, Some(plan.inputs.len() as u64)),
            (WordCountStage::Merge, Some(1)),
        ]
    }

    fn attempt_files(stage: WordCountStage, index: u32, attempt: u32) -> Vec<String> {
        match stage {
            WordCountStage::Count => vec![counts_path(index, attempt)],
            WordCountStage::Merge => Vec::new(),
        }
    }
}

/// A planned word-count job on the coordinator.
pub struct WordCountDriver {
    plan: Plan,
    counts: BTreeMap<u32, CountOutput>,
    merged: Option<MergeOutput>,
}

impl Driver<WordCount> for WordCountDriver {
    fn settings(&self) -> &() {
        &()
    }

    fn progress_totals(&self) -> ProgressTotals {
        ProgressTotals {
            unit: "input bytes",
            total_units: self.plan.inputs.iter().map(|f| f.size).sum(),
        }
    }

    fn stage(&mut self, stage: WordCountStage) -> Result<Option<StageTasks<WordCount>>> {
        Ok(Some(match stage {
            WordCountStage::Count => (0..)
                .zip(&self.plan.inputs)
                .map(|(file, input)| {
                    let task = CountTask {
                        file,
                        input: input.clone(),
                    };
                    (file, WordCountTask::Count(task))
                })
                .collect(),
            WordCountStage::Merge => {
                let counts_files = (0..self.plan.inputs.len() as u32)
                    .map(|file| match self.counts.get(&file) {
                        Some(c) => Ok(c.counts_file.clone()),
                        None => Err(EngineError::Internal(format!(
                            "no count result for file {file}"
                        ))),
                    })
                    .collect::<Result<Vec<_>>>()?;
                vec![(0, WordCountTask::Merge(MergeTask { counts_files }))]
            }
        }))
    }

    fn check(&self, done: Done<'_, WordCount>, attempt: u32) -> std::result::Result<(), String> {
        match done {
            WordCountDone::Count(t, o) if o.counts_file != counts_path(t.file, attempt) => {
                Err(format!("a counts file {:?} not planned", o.counts_file))
            }
            WordCountDone::Count(..) | WordCountDone::Merge(..) => Ok(()),
        }
    }

    fn accept(&mut self, task: TaskId, output: WordCountResult) -> Result<Progressed> {
        Ok(match output {
            WordCountResult::Count(o) => {
                let units = self
                    .plan
                    .inputs
                    .get(task.index as usize)
                    .map_or(0, |f| f.size);
                self.counts.insert(task.index, o);
                Progressed {
                    units,
                    ..Progressed::default()
                }
            }
            WordCountResult::Merge(o) => {
                let bytes = o.bytes;
                self.merged = Some(o);
                Progressed {
                    bytes,
                    ..Progressed::default()
                }
            }
        })
    }

    async fn finish(&mut self, _output: &StoreUrl) -> Result<Finished> {
        let Some(merged) = &self.merged else {
            return Err(EngineError::Internal("finished without a merge".into()));
        };
        Ok(Finished {
            summary: format!(
                "{} words, {} distinct, in {} files",
                merged.words,
                merged.distinct,
                self.plan.inputs.len()
            ),
            files: vec![OutputFile {
                path: COUNTS.into(),
                bytes: merged.bytes,
                blake3: merged.blake3.clone(),
            }],
        })
    }

    fn clean_up<'a>(
        &'a mut self,
        output: &'a StoreUrl,
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        output.delete_prefix(WORK_DIR)
    }
}

/// Runs word-count tasks.
pub struct WordCountRunner;

impl Runner<WordCount> for WordCountRunner {
    async fn run(
        &mut self,
        call: TaskCall<'_, WordCount>,
        _env: TaskEnv<'_>,
    ) -> Result<RunResult<WordCountResult>> {
        let output = StoreUrl::parse(&call.job.output)?;
        Ok(RunResult::Durable(match call.task {
            WordCountTask::Count(t) => {
                WordCountResult::Count(count(&output, t, call.attempt).await?)
            }
            WordCountTask::Merge(t) => WordCountResult::Merge(merge(&output, t).await?),
        }))
    }
}

#[cfg(feature = "fault-injection")]
impl probeflow_engine::fault::FaultHooks<WordCount> for WordCountRunner {
    fn forged(&self, _call: TaskCall<'_, WordCount>, output: WordCountResult) -> WordCountResult {
        match output {
            WordCountResult::Count(mut o) => {
                o.counts_file = COUNTS.into();
                WordCountResult::Count(o)
            }
            merge => merge,
        }
    }
}

/// The word-count job's own errors.
#[derive(Debug, thiserror::Error)]
pub enum WordCountError {
    /// An input file that is not UTF-8: every attempt would fail alike.
    #[error("{file}: not UTF-8 text: {what}")]
    NotText { file: String, what: String },
}

impl KindError for WordCountError {
    fn fault(&self) -> Fault {
        match self {
            WordCountError::NotText { .. } => Fault::Input,
        }
    }
}

impl From<WordCountError> for EngineError {
    fn from(e: WordCountError) -> Self {
        EngineError::Kind(Box::new(e))
    }
}

/// Counts one file's words into its attempt's counts file.
async fn count(output: &StoreUrl, task: &CountTask, attempt: u32) -> Result<CountOutput> {
    let input = &task.input;
    store::check_pinned(&input.url, input.size, &input.etag).await?;
    let location = StoreUrl::parse_input(&input.url)?;
    let bytes =
        location
            .get_opt(&location.root)
            .await?
            .ok_or_else(|| EngineError::InputChanged {
                file: input.url.clone(),
                what: "removed since the job was planned".into(),
            })?;
    if bytes.len() as u64 != input.size {
        return Err(EngineError::InputChanged {
            file: input.url.clone(),
            what: format!("{} bytes, {} when planned", bytes.len(), input.size),
        });
    }
    // A same-size rewrite between the check and the read: refused, as the map does.
    store::check_pinned(&input.url, input.size, &input.etag).await?;
    let text = std::str::from_utf8(&bytes).map_err(|e| WordCountError::NotText {
        file: input.url.clone(),
        what: e.to_string(),
    })?;
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for word in text.split_whitespace() {
        *counts.entry(word).or_default() += 1;
    }
    let counts_file = counts_path(task.file, attempt);
    output.put_json(&counts_file, &counts).await?;
    Ok(CountOutput {
        counts_file,
        words: counts.values().sum(),
    })
}

/// Sums the counts files into [`COUNTS`].
async fn merge(output: &StoreUrl, task: &MergeTask) -> Result<MergeOutput> {
    let mut total: BTreeMap<String, u64> = BTreeMap::new();
    for file in &task.counts_files {
        let counts: BTreeMap<String, u64> =
            output
                .get_json(file)
                .await?
                .ok_or_else(|| EngineError::Corrupt {
                    file: output.display(&output.child(file)),
                    what: "a counts file the job accepted is missing".into(),
                })?;
        for (word, n) in counts {
            *total.entry(word).or_default() += n;
        }
    }
    let mut tsv = String::new();
    for (word, n) in &total {
        tsv.push_str(word);
        tsv.push('\t');
        tsv.push_str(&n.to_string());
        tsv.push('\n');
    }
    let written = OutputFile::of(COUNTS, tsv.as_bytes());
    output.put(&output.child(COUNTS), tsv.into_bytes()).await?;
    Ok(MergeOutput {
        words: total.values().sum(),
        distinct: total.len() as u64,
        bytes: written.bytes,
        blake3: written.blake3,
    })
}
