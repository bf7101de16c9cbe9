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
//!         (with [triage]: hot n-grams; with [clean]: each training file's edits
//!         and stats/clean_manifest.jsonl.gz)
//! clean:  with [clean], training file + its edits ─► cleaned/<its path>, in its format
//! finish: the final files listed; the engine's _SUCCESS, then the intermediate files removed
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
//! * this module: the kind (its job file sections, planning, registration);
//!   `plan`: the plan and the index groups; `driver`: the job on the coordinator
//!   (stages, result checks, totals and progress files, finish); `runner`: the tasks
//!   on a worker.
//! * [`index`], [`scan`], [`report`], [`clean`]: the tasks; [`triage`]: hot n-grams
//!   (in the report); [`cleaning`]: what cleaning does to one document;
//!   [`gzip_jsonl`]: their streamed gzip outputs.

pub mod clean;
pub mod cleaning;
pub mod error;
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
pub mod triage;
pub mod whole_gzip;

mod driver;
mod plan;
mod runner;

use probeflow_engine::error::Result;
use probeflow_engine::inputs::InputSource;
use probeflow_engine::kind::{Kind, KindFile, PlanContext};
use probeflow_engine::protocol::TaskId;
use probeflow_engine::store::StoreUrl;
use protocol::{
    IndexOutput, OverlapOutput, OverlapStage, OverlapTask, Settings, CLEANED_DIR, DETAILS,
    INTERMEDIATE_FORMAT_VERSION, STATS,
};
use spec::OverlapFile;

pub use driver::OverlapDriver;
use plan::{index_groups, WHOLE_GZIP_CAP};
pub use plan::{EvalInput, Plan};
pub use runner::OverlapRunner;

/// The kind's name in job files.
pub const NAME: &str = "ngram_overlap";

/// The n-gram overlap job kind.
pub struct NgramOverlap;

impl Kind for NgramOverlap {
    const NAME: &'static str = NAME;
    /// The statistics and details, the instances, the cleaned corpus and the rejects
    /// (`progress_summary.json` is final too, at the root; `progress/` is not: its
    /// snapshots' times depend on the run).
    const FINAL_DIRS: &'static [&'static str] = &["stats", "tmp", CLEANED_DIR, "rejects"];
    type File = OverlapFile;
    type Plan = Plan;
    type Settings = Settings;
    type Task = OverlapTask;
    type Driver = OverlapDriver;
    type Runner = OverlapRunner;

    async fn plan(&self, file: &OverlapFile, mut context: PlanContext<'_>) -> Result<Plan> {
        let eval = context
            .take_source(EVAL_SECTION)
            .into_iter()
            .map(|listed| EvalInput {
                dataset: records::eval_dataset_name(&listed.path),
                file: listed.file,
            })
            .collect();
        let train = context
            .take_source(TRAIN_SECTION)
            .into_iter()
            .map(|listed| listed.file)
            .collect();
        let memory = context.memory_per_worker;
        let index_budget = file
            .index
            .memory
            .as_deref()
            .and_then(probeflow_engine::units::parse_bytes)
            .unwrap_or(memory / 2);
        Ok(Plan {
            eval,
            train,
            index_budget,
            whole_gzip_max: (memory / 16).min(WHOLE_GZIP_CAP),
            intermediate_format: INTERMEDIATE_FORMAT_VERSION,
        })
    }

    fn open(&self, file: &OverlapFile, output: &StoreUrl, plan: Plan) -> Result<OverlapDriver> {
        plan.check_intermediate_format(output)?;
        let settings = Settings {
            whole_gzip_max: plan.whole_gzip_max,
            ..file.settings()
        };
        OverlapDriver::new(settings, plan)
    }

    fn runner(&self) -> OverlapRunner {
        OverlapRunner::default()
    }

    async fn describe_finished(&self, _output: &StoreUrl) -> Result<Vec<String>> {
        Ok(vec![format!("statistics in {STATS}, records in {DETAILS}")])
    }

    fn task_counts(
        &self,
        file: &OverlapFile,
        plan: &Plan,
        results: &[(TaskId, OverlapOutput)],
    ) -> Vec<(OverlapStage, Option<u64>)> {
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
        let mut stages = vec![
            (OverlapStage::Index, Some(plan.eval.len() as u64)),
            (OverlapStage::Scan, scans),
            (OverlapStage::Report, Some(1)),
        ];
        if file.clean.is_some() {
            stages.push((OverlapStage::Clean, Some(plan.train.len() as u64)));
        }
        stages
    }

    /// An index attempt's shuffle file (and its index), a scan attempt's events file;
    /// the report and the clean tasks write final files only.
    fn attempt_files(stage: OverlapStage, index: u32, attempt: u32) -> Vec<String> {
        match stage {
            OverlapStage::Index => {
                let shuffle_file = protocol::index_shuffle_path(index, attempt);
                let index_file = probeflow_engine::shuffle::index_path(&shuffle_file);
                vec![shuffle_file, index_file]
            }
            OverlapStage::Scan => vec![protocol::events_path(index, attempt)],
            OverlapStage::Report | OverlapStage::Clean => Vec::new(),
        }
    }
}

/// The job file sections of the two sides, the names of their input sources.
const EVAL_SECTION: &str = "eval";
const TRAIN_SECTION: &str = "train";

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
        let mut identity = serde_json::json!({
            "kind": NAME,
            "eval": self.eval,
            "train": self.train,
            "ngrams": self.ngrams,
            "output": self.output,
            "format": protocol::OUTPUT_FORMAT_VERSION,
        });
        // Only where present: a job without them has the fingerprint it always had.
        if let Some(triage) = &self.triage {
            identity["triage"] = serde_json::json!(triage);
        }
        if let Some(clean) = &self.clean {
            identity["clean"] = serde_json::json!(clean);
        }
        identity
    }

    fn inputs(&self) -> Vec<InputSource> {
        fn accepts(name: &str) -> bool {
            source::format_of(name).is_some()
        }
        vec![
            InputSource {
                section: EVAL_SECTION,
                paths: self.eval.paths.clone(),
                formats: FORMATS,
                accepts,
            },
            InputSource {
                section: TRAIN_SECTION,
                paths: self.train.paths.clone(),
                formats: FORMATS,
                accepts,
            },
        ]
    }
}

/// What the job's unit tests share: an input file pinned, a job's settings.
#[cfg(test)]
pub(crate) mod test_support {
    use object_store::ObjectStoreExt;

    use super::protocol::{InputFile, Settings};
    use super::tokenize::TokenizerKind;
    use probeflow_engine::store::StoreUrl;

    /// Local file `path` pinned as a job pins its inputs (its size and ETag now).
    pub fn pinned(handle: &tokio::runtime::Handle, path: &std::path::Path) -> InputFile {
        let url = path.display().to_string();
        let loc = StoreUrl::parse(&url).unwrap();
        let meta = handle.block_on(loc.store.head(&loc.root)).unwrap();
        InputFile {
            url,
            size: meta.size,
            etag: meta.e_tag,
        }
    }

    /// One local input file `name` holding `contents`, pinned, in a temporary directory
    /// whose `out/` is the job's output, with the runtime the store calls run on.
    pub struct OneFile {
        pub dir: tempfile::TempDir,
        pub runtime: tokio::runtime::Runtime,
        pub path: std::path::PathBuf,
        pub file: InputFile,
        pub output: StoreUrl,
    }

    impl OneFile {
        pub fn new(name: &str, contents: &str) -> OneFile {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(name);
            std::fs::write(&path, contents).unwrap();
            let runtime = tokio::runtime::Runtime::new().unwrap();
            let file = pinned(runtime.handle(), &path);
            let output = StoreUrl::parse(&dir.path().join("out").display().to_string()).unwrap();
            OneFile {
                dir,
                runtime,
                path,
                file,
                output,
            }
        }
    }

    /// The settings of a job with lengths `n`, the default tokenizer, both sides'
    /// text in `text`, no triage and no cleaning.
    pub fn settings(n: Vec<u32>) -> Settings {
        Settings {
            n,
            tokenizer: TokenizerKind::Default,
            eval_text_field: "text".into(),
            train_text_field: "text".into(),
            eval_max_line_bytes: crate::spec::DEFAULT_MAX_LINE_BYTES,
            train_max_line_bytes: crate::spec::DEFAULT_MAX_LINE_BYTES,
            partitions: 1,
            whole_gzip_max: 0,
            triage: None,
            clean: None,
        }
    }
}
