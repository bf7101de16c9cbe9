//! The overlap job's stages, task bodies, results and file names.
//!
//! ```text
//! index  (one task per eval file)      → an index shuffle file (window-key postings
//!                                         partitioned by key, each partition sorted)
//! scan   (training file × index group) → the candidate events of that file against
//!                                         that group of index partitions
//! report (one task)                    → each candidate decided against its eval row
//!                                         → stats/, tmp/overlap_instances-*, details;
//!                                         with [clean], each training file's edits
//! clean  (one per training file, with      → the file written again under cleaned/,
//!         [clean])                           its edited documents dropped or cut
//! ```
//!
//! Tasks carry names and byte ranges, never bulk data; results carry counts and the
//! paths of what the attempt wrote (checked against the planned names).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::tokenize::TokenizerKind;

/// Index the eval files' n-grams.
pub const INDEX: &str = "index";
/// Stream the training files past the index.
pub const SCAN: &str = "scan";
/// Gather the events into the outputs.
pub const REPORT: &str = "report";
/// Write the training files again without their contamination (with `[clean]`).
pub const CLEAN: &str = "clean";

/// Changes when the same input and settings would give other output bytes.
pub const OUTPUT_FORMAT_VERSION: u32 = 1;

/// Changes when the files tasks write for later tasks (the index shuffle, scan events)
/// change: an unfinished run planned with another is not resumed.
/// 2: a scan writes one line per training document ([`ScanDoc`]), not per event.
/// 3: the index holds window keys, not n-gram texts; scan events are candidates.
/// 4: no eval rows file: the report reads the eval rows it needs from the (pinned)
/// eval files themselves.
pub const INTERMEDIATE_FORMAT_VERSION: u32 = 4;

pub const STATS: &str = "stats/overlap_stats.jsonl";
pub const DETAILS: &str = "stats/overlap_details.jsonl.gz";
/// The hot n-grams, when the job has a `[triage]` section.
pub const HOT: &str = "stats/hot_ngrams.jsonl";
/// What the cleaning pass removed from which training document, and why (`[clean]`).
pub const CLEAN_MANIFEST: &str = "stats/clean_manifest.jsonl.gz";
/// Where the cleaned training files are written (`[clean]`), each at its path relative
/// to the training files' common directory.
pub const CLEANED_DIR: &str = "cleaned";
pub const PROGRESS_SUMMARY: &str = "progress_summary.json";
/// Intermediate files of the running job (removed when it completes).
pub const WORK_DIR: &str = "_job/overlap";

probeflow_engine::stages! {
    /// An overlap task: an index (task index: its eval file), a scan (task index:
    /// `group * training files + training file`) or the report (task index 0).
    pub enum OverlapTask, OverlapOutput, OverlapDone, OverlapStage {
        Index(INDEX): IndexTask => IndexOutput,
        Scan(SCAN): ScanTask => ScanOutput,
        Report(REPORT): ReportTask => ReportOutput,
        Clean(CLEAN): CleanTask => CleanOutput,
    }
}

/// Attempt `attempt` of index task `eval_file`: its index shuffle file.
pub fn index_shuffle_path(eval_file: u32, attempt: u32) -> String {
    format!("{WORK_DIR}/index-{eval_file:05}-a{attempt}.arrow")
}
/// Attempt `attempt` of scan task `index`: its overlap events.
pub fn events_path(index: u32, attempt: u32) -> String {
    format!("{WORK_DIR}/scan-{index:05}-a{attempt}.jsonl.gz")
}
/// The rejected rows of an input file (`side` is `eval` or `train`); the same bytes
/// whichever attempt writes them.
pub fn rejects_path(side: &str, file: u32) -> String {
    format!("rejects/{side}-{file:05}.jsonl")
}
/// The edits of training file `file` (`[clean]`): the report decides them, the clean
/// task applies them.
pub fn edits_path(file: u32) -> String {
    format!("{WORK_DIR}/edits-{file:05}.jsonl.gz")
}
/// The intermediate of training file `file` of `files`: which instances its documents
/// overlap, with training provenance.
pub fn instances_path(file: u32, files: u32) -> String {
    format!("tmp/overlap_instances-{file:05}-of-{files:05}.jsonl.gz")
}

/// What every task of an overlap job knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// The configured n-gram lengths, ascending.
    pub n: Vec<u32>,
    pub tokenizer: TokenizerKind,
    pub eval_text_field: String,
    pub train_text_field: String,
    /// The longest JSONL line (document) read on each side ([`crate::spec::InputSpec`]'s
    /// `max_line_bytes`).
    #[serde(default = "default_max_line_bytes")]
    pub eval_max_line_bytes: u64,
    #[serde(default = "default_max_line_bytes")]
    pub train_max_line_bytes: u64,
    pub partitions: u32,
    /// The largest `.jsonl.gz` input file (compressed, and its text) a task inflates
    /// whole in memory instead of as a stream (the same text, faster); from the plan.
    #[serde(default)]
    pub whole_gzip_max: u64,
    /// Which matched n-grams are hot (`[triage]`); `None`: none is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triage: Option<Triage>,
    /// The cleaning pass (`[clean]`); `None`: no cleaned corpus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clean: Option<Clean>,
}

fn default_max_line_bytes() -> u64 {
    crate::spec::DEFAULT_MAX_LINE_BYTES
}

/// How one side's records are read: the text's field or column, and (JSONL) the
/// longest line.
#[derive(Debug, Clone, Copy)]
pub struct ReadAs<'a> {
    pub text_field: &'a str,
    pub max_line_bytes: usize,
}

impl Settings {
    pub fn eval_side(&self) -> ReadAs<'_> {
        ReadAs {
            text_field: &self.eval_text_field,
            max_line_bytes: usize::try_from(self.eval_max_line_bytes).unwrap_or(usize::MAX),
        }
    }

    pub fn train_side(&self) -> ReadAs<'_> {
        ReadAs {
            text_field: &self.train_text_field,
            max_line_bytes: usize::try_from(self.train_max_line_bytes).unwrap_or(usize::MAX),
        }
    }
}

/// How the cleaning pass treats a contaminated training document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CleanMode {
    /// The document is left out.
    Drop,
    /// Every matched n-gram is cut out with `context_chars` on each side (GPT-3's
    /// decontamination); the pieces left are joined by a line feed.
    Cut,
}

/// The cleaning pass: the training files written again without their contamination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clean {
    pub mode: CleanMode,
    /// `cut`: characters (code points) cut on each side of a matched n-gram.
    #[serde(default = "Clean::default_context_chars")]
    pub context_chars: u64,
    /// `cut`: a piece left shorter than this (code points) is cut too.
    #[serde(default = "Clean::default_min_piece_chars")]
    pub min_piece_chars: u64,
    /// `cut`: a document left in more pieces than this is dropped.
    #[serde(default = "Clean::default_max_pieces")]
    pub max_pieces: u64,
}

impl Clean {
    fn default_context_chars() -> u64 {
        200
    }
    fn default_min_piece_chars() -> u64 {
        200
    }
    fn default_max_pieces() -> u64 {
        10
    }
}

/// When a matched n-gram is *hot* (boilerplate, a template, a number list: text that
/// matches many documents without telling contamination), and what that changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Triage {
    /// An n-gram found in more training documents than this is hot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_train_docs: Option<u64>,
    /// An n-gram found in more eval rows than this is hot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_eval_rows: Option<u64>,
    /// `true`: a hot n-gram's matches are in no output but `stats/hot_ngrams.jsonl`
    /// (not in the statistics, the details or the cleaning pass).
    #[serde(default)]
    pub exclude: bool,
}

impl Triage {
    /// The eval rows beyond which a scan counts a window instead of expanding it into
    /// an event per row: only where hot n-grams count nowhere (`exclude`).
    pub fn scan_cutoff(&self) -> Option<u64> {
        self.max_eval_rows.filter(|_| self.exclude)
    }

    /// Why an n-gram found in `train_docs` training documents and `eval_rows` eval
    /// rows is hot (empty: it is not).
    pub fn hot_by(&self, train_docs: u64, eval_rows: u64) -> Vec<&'static str> {
        let mut by = Vec::new();
        if self.max_train_docs.is_some_and(|max| train_docs > max) {
            by.push("train_docs");
        }
        if self.max_eval_rows.is_some_and(|max| eval_rows > max) {
            by.push("eval_rows");
        }
        by
    }
}

impl Settings {
    /// The bit of configured length `n` in an index entry's `configured` set.
    pub fn bit_of(&self, n: u32) -> u32 {
        self.n.iter().position(|&m| m == n).map_or(0, |i| 1 << i)
    }
    /// The configured lengths in a `configured` bit set.
    pub fn lengths_in(&self, bits: u32) -> impl Iterator<Item = u32> + '_ {
        self.n
            .iter()
            .enumerate()
            .filter(move |(i, _)| bits & (1 << i) != 0)
            .map(|(_, &n)| n)
    }
}

/// An input file, pinned when the job was planned (a task refuses a file that
/// changed).
pub use probeflow_engine::inputs::PinnedFile as InputFile;

/// Index eval file number `eval_file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexTask {
    pub eval_file: u32,
    pub file: InputFile,
}

/// Row counts and rejects of reading one input file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowCounts {
    /// Rows read (valid and rejected).
    pub rows: u64,
    /// Reason → rows.
    pub rejected: BTreeMap<String, u64>,
    /// Where the rejected rows are (relative to the output root), if any.
    pub rejects_file: Option<String>,
}

impl RowCounts {
    pub fn valid(&self) -> u64 {
        self.rows - self.rejected.values().sum::<u64>()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexOutput {
    /// The index shuffle file (relative to the output root; its partitions' byte
    /// ranges are in its shuffle index).
    pub shuffle_file: String,
    pub counts: RowCounts,
    /// Postings written: distinct (window key, row) (a key holds its effective length);
    /// what sizes the index groups.
    pub ngrams: u64,
    /// The effective n-gram lengths present.
    pub lengths: BTreeSet<u32>,
    /// Runs of rows the shuffle file holds ([`crate::index::run_segment`]): more than
    /// one when the file's postings exceeded the task's memory. Results journaled
    /// before runs existed have one.
    #[serde(default = "one_run")]
    pub runs: u32,
}

fn one_run() -> u32 {
    1
}

/// Stream training file `train_file` past index partitions `partitions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanTask {
    pub index: u32,
    pub train_file: u32,
    pub file: InputFile,
    /// The index group (one of `groups`) this task holds.
    pub group: u32,
    pub groups: u32,
    /// Every eval file's index shuffle file, in eval order; the scan reads the
    /// partitions `p` with `p % groups == group` of each.
    pub index_files: Vec<String>,
    /// Each eval file's row count (rejected rows included), in eval order: what numbers
    /// the eval rows in one index.
    pub eval_rows: Vec<u64>,
    /// Each index file's runs ([`IndexOutput::runs`]), in eval order; empty: one each.
    #[serde(default)]
    pub index_runs: Vec<u32>,
    /// The effective lengths the index holds.
    pub lengths: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanOutput {
    pub train_file: u32,
    pub group: u32,
    pub events_file: String,
    pub counts: RowCounts,
    /// Training n-grams looked up.
    pub ngrams: u64,
    /// Candidate overlap events (eval row × training row × n-gram whose window keys
    /// match; the report keeps those whose texts do).
    pub events: u64,
    /// Text bytes scanned.
    pub text_bytes: u64,
}

/// One eval file, for the report (which reads the rows it needs from the file itself,
/// pinned as the index task read it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalFile {
    pub file: InputFile,
    pub dataset: String,
    /// Its valid rows, as its index task counted them.
    pub instances: u64,
}

/// Gather every scan's events into the outputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportTask {
    pub eval: Vec<EvalFile>,
    pub train: Vec<String>,
    /// Per training file (in order), its scans' events files.
    pub events: Vec<Vec<String>>,
    /// The index, as the scans loaded it: what a cut leaves is looked up in it
    /// (`[clean] mode = "cut"`).
    #[serde(default)]
    pub index: Option<IndexGroups>,
}

/// The index shuffle files and how the scans cut them into groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexGroups {
    /// Every eval file's index shuffle file, in eval order.
    pub files: Vec<String>,
    /// Each eval file's row count (rejected rows included), in eval order.
    pub eval_rows: Vec<u64>,
    /// Each index file's runs, in eval order; empty: one each.
    #[serde(default)]
    pub runs: Vec<u32>,
    /// The effective lengths the index holds.
    pub lengths: Vec<u32>,
    pub groups: u32,
}

/// A written output file (path, size, blake3), as the completion record lists it.
pub use probeflow_engine::completion::OutputFile;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportOutput {
    pub files: Vec<OutputFile>,
    /// Detail records written.
    pub details: u64,
    /// (eval dataset, n) lines with at least one overlapping instance.
    pub overlapping: BTreeMap<String, BTreeMap<u32, u64>>,
    /// Hot n-grams (with `[triage]`).
    #[serde(default)]
    pub hot: u64,
    /// Training documents the cleaning pass drops and cuts (with `[clean]`).
    #[serde(default)]
    pub dropped: u64,
    #[serde(default)]
    pub cut: u64,
}

/// Write training file `train_file` again under [`CLEANED_DIR`] with the edits the
/// report decided (none: the file is copied byte for byte).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanTask {
    pub train_file: u32,
    pub file: InputFile,
    /// Its edits file ([`edits_path`]).
    pub edits: String,
    /// Where the cleaned file goes, relative to the output root.
    pub dest: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanOutput {
    pub file: OutputFile,
    /// Rows read (0 for a file copied whole), and of them dropped and cut.
    pub rows: u64,
    pub dropped: u64,
    pub cut: u64,
}

/// One line of an edits file: what becomes of a training row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edit {
    pub train_row: u64,
    /// `None`: the row is dropped; else its new text.
    pub text: Option<String>,
    /// [`super::clean::text_hash`] of the text the edit was decided on: the clean task
    /// refuses a row that does not hold it.
    pub text_hash: String,
}

/// One training document that shares indexed n-grams with eval rows, as a scan writes
/// it (one JSON line): its text once, and its overlap events. (`S` is `&str` when it is
/// written, `String` when it is read back.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanDoc<S = String> {
    pub train_row: u64,
    pub train_doc_id: S,
    pub train_text: S,
    /// In (eval file, eval row, length, n-gram) order.
    pub events: Vec<ScanEvent>,
    /// With `[triage] exclude = true` and `max_eval_rows`: the windows whose key more
    /// eval rows have than that (hot whatever else is true of them, so they count
    /// nowhere), one per (length, text), not expanded into an event per eval row.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hot: Vec<HotWindow>,
}

/// A window of a training document whose key is in more eval rows than `[triage]
/// max_eval_rows`: the report checks its text against the first of those rows and
/// counts it, but writes no record of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotWindow {
    /// The first eval row with the key.
    pub eval_file: u32,
    pub eval_row: u64,
    /// Eval rows with the key.
    pub eval_rows: u64,
    /// The effective length.
    pub n: u32,
    pub ngram: String,
}

/// One candidate overlap event: a window of a training document whose key is the key
/// of one of an eval row's n-grams. The report keeps it if the eval row has that n-gram
/// (the same length and text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanEvent {
    pub eval_file: u32,
    pub eval_row: u64,
    /// The effective length.
    pub n: u32,
    /// The training window's text (its tokens joined by spaces).
    pub ngram: String,
    pub train_offsets: Vec<[u64; 2]>,
}
