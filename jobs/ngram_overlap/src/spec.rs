//! The overlap job file: `[eval]` and `[train]` (which files, which text field),
//! `[ngrams]` (the n values and the tokenizer), `[index]` (how the test-side index is
//! partitioned), `[triage]` (which matched n-grams are hot), `[clean]` (the cleaned
//! training corpus) and `[output]`. Unknown keys are errors. The fingerprint hashes
//! everything that determines the output bytes.

use serde::{Deserialize, Serialize};

use super::protocol::{Clean, CleanMode, Settings, Triage};
use super::tokenize::TokenizerKind;

/// An overlap job file's sections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverlapFile {
    /// The eval (test) side: indexed.
    pub eval: InputSpec,
    /// The training side: streamed past the index.
    pub train: InputSpec,
    #[serde(default)]
    pub ngrams: NgramSpec,
    #[serde(default)]
    pub index: IndexSpec,
    pub output: OutputSpec,
    /// Hot n-grams: marked, reported, optionally excluded from the statistics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triage: Option<Triage>,
    /// The cleaned training corpus: contaminated documents dropped or cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clean: Option<Clean>,
    /// The engine's keys (`kind`, `[run]`): read by the engine, ignored here.
    #[serde(default, skip_serializing)]
    pub kind: Option<String>,
    #[serde(default, skip_serializing)]
    pub run: Option<toml::Table>,
}

/// One side's input files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// Each a local path, glob, directory, `s3://…` or `gs://…`: `.jsonl`,
    /// `.jsonl.gz`, `.jsonl.zst` or `.parquet` files (a directory: all of those under
    /// it).
    pub paths: Vec<String>,
    /// The field (JSONL) or column (Parquet) holding the text.
    #[serde(default = "default_text_field")]
    pub text_field: String,
    /// The longest line of a JSONL file (one document), e.g. `"256MiB"`; a longer
    /// line fails the job naming its file and line ([`DEFAULT_MAX_LINE_BYTES`] when
    /// absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_line_bytes: Option<String>,
}

/// A JSONL line (one document) may be this long unless `max_line_bytes` says otherwise:
/// a task holds about three copies of its longest line.
pub const DEFAULT_MAX_LINE_BYTES: u64 = 64 << 20;

impl InputSpec {
    /// The side's `max_line_bytes` (validated by [`OverlapFile::validate`]).
    pub fn max_line_bytes(&self) -> u64 {
        self.max_line_bytes
            .as_deref()
            .and_then(probeflow_engine::units::parse_bytes)
            .unwrap_or(DEFAULT_MAX_LINE_BYTES)
    }
}

fn default_text_field() -> String {
    "text".into()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NgramSpec {
    /// The n-gram lengths (a test row with fewer tokens contributes its longest
    /// n-gram, `min(n, tokens)`).
    #[serde(default = "default_n")]
    pub n: Vec<u32>,
    #[serde(default)]
    pub tokenizer: TokenizerKind,
}

fn default_n() -> Vec<u32> {
    vec![13]
}

impl Default for NgramSpec {
    fn default() -> Self {
        NgramSpec {
            n: default_n(),
            tokenizer: TokenizerKind::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexSpec {
    /// Partitions of the test-side n-gram index (key ranges of the 64-bit window keys).
    #[serde(default = "default_partitions")]
    pub partitions: u32,
    /// The most index a scan task loads (e.g. `"512MiB"`); default: half of `[run]
    /// memory_per_worker`. A larger index is scanned in groups of partitions, each
    /// training file once per group.
    pub memory: Option<String>,
}

fn default_partitions() -> u32 {
    64
}

impl Default for IndexSpec {
    fn default() -> Self {
        IndexSpec {
            partitions: default_partitions(),
            memory: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSpec {
    pub url: String,
}

/// The most n values a job may have (they are a bit set in the index).
pub const MAX_N_VALUES: usize = 32;
/// The longest n-gram.
pub const MAX_N: u32 = 1024;

impl OverlapFile {
    pub fn validate(&self) -> Result<(), String> {
        for (name, side) in [("eval", &self.eval), ("train", &self.train)] {
            if side.paths.is_empty() || side.paths.iter().any(|p| p.trim().is_empty()) {
                return Err(format!(
                    "[{name}] paths: give at least one path, none empty"
                ));
            }
            if side.text_field.is_empty() {
                return Err(format!("[{name}] text_field is empty"));
            }
            if let Some(m) = &side.max_line_bytes {
                match probeflow_engine::units::parse_bytes(m) {
                    Some(b) if b > 0 => {}
                    _ => {
                        return Err(format!(
                            "[{name}] max_line_bytes: {m:?} is not a size (e.g. \"256MiB\")"
                        ))
                    }
                }
            }
        }
        let n = &self.ngrams.n;
        if n.is_empty() || n.len() > MAX_N_VALUES {
            return Err(format!(
                "[ngrams] n: give 1 to {MAX_N_VALUES} lengths, got {}",
                n.len()
            ));
        }
        if let Some(bad) = n.iter().find(|&&n| n == 0 || n > MAX_N) {
            return Err(format!("[ngrams] n: {bad} is not a length in 1..={MAX_N}"));
        }
        let mut sorted = n.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != n.len() {
            return Err(format!("[ngrams] n: {n:?} repeats a length"));
        }
        if !(1..=65_536).contains(&self.index.partitions) {
            return Err(format!(
                "[index] partitions must be 1..=65536, got {}",
                self.index.partitions
            ));
        }
        if let Some(m) = &self.index.memory {
            match probeflow_engine::units::parse_bytes(m) {
                Some(b) if b > 0 => {}
                _ => {
                    return Err(format!(
                        "[index] memory: {m:?} is not a size (e.g. \"512MiB\")"
                    ))
                }
            }
        }
        if let Some(triage) = &self.triage {
            if triage.max_train_docs.is_none() && triage.max_eval_rows.is_none() {
                return Err(
                    "[triage]: give max_train_docs, max_eval_rows or both (an n-gram found in \
                     more training documents, or eval rows, than that is hot)"
                        .into(),
                );
            }
            for (name, limit) in [
                ("max_train_docs", triage.max_train_docs),
                ("max_eval_rows", triage.max_eval_rows),
            ] {
                if limit == Some(0) {
                    return Err(format!(
                        "[triage] {name} must be at least 1 (with 0, every matched n-gram is hot)"
                    ));
                }
            }
        }
        if let Some(clean) = &self.clean {
            if clean.mode == CleanMode::Cut && clean.max_pieces == 0 {
                return Err("[clean] max_pieces must be at least 1".into());
            }
        }
        if self.output.url.is_empty() {
            return Err("[output] url is empty".into());
        }
        Ok(())
    }

    /// What every task needs.
    pub fn settings(&self) -> Settings {
        let mut n = self.ngrams.n.clone();
        n.sort_unstable();
        Settings {
            n,
            tokenizer: self.ngrams.tokenizer,
            eval_text_field: self.eval.text_field.clone(),
            train_text_field: self.train.text_field.clone(),
            eval_max_line_bytes: self.eval.max_line_bytes(),
            train_max_line_bytes: self.train.max_line_bytes(),
            partitions: self.index.partitions,
            whole_gzip_max: 0,
            triage: self.triage,
            clean: self.clean,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use probeflow_engine::job::fingerprint_of;
    use probeflow_engine::kind::KindFile;

    const FULL: &str = r#"
kind = "ngram_overlap"
[eval]
paths = ["data/eval/*.jsonl.gz"]
[train]
paths = ["s3://bucket/train/", "data/train-*.parquet"]
text_field = "content"
[ngrams]
n = [13, 8]
tokenizer = "no_lowercase"
[index]
partitions = 16
[output]
url = "out/overlap"
[run]
workers = 2
"#;

    fn load(text: &str) -> Result<(), String> {
        let kind: &'static dyn probeflow_engine::job::JobKind = &crate::NgramOverlap;
        kind.load("o.toml", text)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_documented_example_parses_and_settings_sort_n() {
        let spec: OverlapFile = toml::from_str(FULL).unwrap();
        spec.validate().unwrap();
        let s = spec.settings();
        assert_eq!(s.n, vec![8, 13]);
        assert_eq!(s.tokenizer, TokenizerKind::NoLowercase);
        assert_eq!(s.train_text_field, "content");
        assert_eq!(s.eval_text_field, "text");
    }

    #[test]
    fn bad_files_are_errors_that_say_what_is_wrong() {
        for (from, to, what) in [
            ("n = [13, 8]", "n = []", "[ngrams] n"),
            ("n = [13, 8]", "n = [13, 0]", "is not a length"),
            ("n = [13, 8]", "n = [8, 8]", "repeats"),
            ("partitions = 16", "partitions = 0", "partitions"),
            ("partitions = 16", "memory = \"lots\"", "[index] memory"),
            ("tokenizer = \"no_lowercase\"", "tokenizer = \"bpe\"", "bpe"),
            (
                "paths = [\"data/eval/*.jsonl.gz\"]",
                "paths = []",
                "[eval] paths",
            ),
            ("partitions = 16", "partitions = 16\nbuckets = 3", "line"),
        ] {
            let err = load(&FULL.replace(from, to)).unwrap_err();
            assert!(err.contains(what) && err.contains("o.toml"), "{to}: {err}");
        }
        assert!(load(FULL).is_ok());
    }

    #[test]
    fn the_fingerprint_ignores_how_the_index_is_partitioned() {
        let a: OverlapFile = toml::from_str(FULL).unwrap();
        let b: OverlapFile =
            toml::from_str(&FULL.replace("partitions = 16", "memory = \"1KiB\"")).unwrap();
        let c: OverlapFile = toml::from_str(&FULL.replace("[13, 8]", "[13]")).unwrap();
        let fingerprint = |f: &OverlapFile| fingerprint_of(&f.identity());
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_ne!(fingerprint(&a), fingerprint(&c));
    }

    #[test]
    fn triage_changes_the_fingerprint_only_where_it_is_given() {
        let plain: OverlapFile = toml::from_str(FULL).unwrap();
        // A job without [triage] has the identity it had before [triage] existed.
        assert!(plain.identity().get("triage").is_none());
        let with = |section: &str| -> OverlapFile {
            toml::from_str(&format!("{FULL}[triage]\n{section}")).unwrap()
        };
        let marked = with("max_train_docs = 5\n");
        marked.validate().unwrap();
        assert_eq!(marked.settings().triage.unwrap().max_train_docs, Some(5));
        let fingerprint = |f: &OverlapFile| fingerprint_of(&f.identity());
        assert_ne!(fingerprint(&plain), fingerprint(&marked));
        assert_ne!(
            fingerprint(&marked),
            fingerprint(&with("max_train_docs = 5\nexclude = true\n"))
        );
        let err = load(&format!("{FULL}[triage]\nexclude = true\n")).unwrap_err();
        assert!(err.contains("max_train_docs"), "{err}");
        let err = load(&format!("{FULL}[triage]\nmax_docs = 3\n")).unwrap_err();
        assert!(err.contains("max_docs"), "{err}");
    }

    /// A limit of 0 makes every matched n-gram hot: with `exclude`, a job that reports
    /// nothing contaminated and cleans nothing. Refused, not run.
    #[test]
    fn a_triage_limit_of_zero_is_refused() {
        for limit in ["max_train_docs", "max_eval_rows"] {
            let err = load(&format!("{FULL}[triage]\n{limit} = 0\nexclude = true\n")).unwrap_err();
            assert!(err.contains(limit) && err.contains("at least 1"), "{err}");
        }
    }
}
