//! The overlap job's plan: its pinned eval and training files, the index memory a
//! scan may hold, and how many index groups an index of so many postings is cut into.

use serde::{Deserialize, Serialize};

use probeflow_engine::error::{EngineError, Result};
use probeflow_engine::store::StoreUrl;
use protocol::{InputFile, INTERMEDIATE_FORMAT_VERSION};

use super::*;

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
    pub(super) fn first_intermediate_format() -> u32 {
        1
    }

    /// Refuses to resume a run whose intermediate files this probeflow would misread.
    pub(super) fn check_intermediate_format(&self, output: &StoreUrl) -> Result<()> {
        if self.intermediate_format == INTERMEDIATE_FORMAT_VERSION {
            return Ok(());
        }
        Err(EngineError::Conflict(format!(
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
pub(super) const WHOLE_GZIP_CAP: u64 = 64 << 20;

/// Index groups for an index of `postings` postings: enough that loading one group
/// (at most [`ngram_index::LOAD_BYTES_PER_POSTING`] per posting) fits in `budget`, at
/// most one per partition.
pub(super) fn index_groups(postings: u64, budget: u64, partitions: u32) -> u32 {
    let groups = postings
        .saturating_mul(ngram_index::LOAD_BYTES_PER_POSTING)
        .div_ceil(budget.max(1));
    groups.clamp(1, u64::from(partitions)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn a_run_planned_with_other_intermediate_files_is_not_resumed() {
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
        assert!(matches!(err, EngineError::Conflict(_)), "{err:?}");
        let err = err.to_string();
        assert!(
            err.contains("/tmp/out")
                && err.contains("format 1")
                && err.contains(&format!("format {INTERMEDIATE_FORMAT_VERSION}")),
            "{err}"
        );
    }
}
