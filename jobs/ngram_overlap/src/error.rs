//! The overlap job's own errors beyond a record's ([`crate::records::RecordError`]):
//! limits of one job that the input or the settings exceed. Each is the input's or
//! the settings' fault: another attempt would fail alike, so the job stops naming it.

use probeflow_engine::error::{EngineError, Fault, KindError};

use crate::ngram_index::MAX_EVAL_ROWS;

#[derive(Debug, thiserror::Error)]
pub enum OverlapError {
    /// The eval side (all files, or `file` alone) has more rows than one index numbers.
    #[error("{}more than {MAX_EVAL_ROWS} rows; one job indexes at most that many", .file.as_ref().map(|f| format!("{f}: ")).unwrap_or_else(|| "the eval side has ".into()))]
    EvalTooLarge { file: Option<String> },
    /// An index group whose shared postings pass what one index holds.
    #[error(
        "index group {group}: more n-gram postings shared among eval rows than one index \
         holds ({MAX_EVAL_ROWS}); raise [index] partitions or lower [index] memory"
    )]
    IndexGroupTooLarge { group: u32 },
}

impl KindError for OverlapError {
    fn fault(&self) -> Fault {
        match self {
            OverlapError::EvalTooLarge { .. } | OverlapError::IndexGroupTooLarge { .. } => {
                Fault::Input
            }
        }
    }
}

impl From<OverlapError> for EngineError {
    fn from(e: OverlapError) -> Self {
        EngineError::Kind(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_the_inputs_fault_and_name_what_passed_them() {
        let one: EngineError = OverlapError::EvalTooLarge {
            file: Some("eval.jsonl".into()),
        }
        .into();
        assert!(!one.fault().retryable());
        assert!(
            one.to_string().starts_with("eval.jsonl: more than "),
            "{one}"
        );
        let all: EngineError = OverlapError::EvalTooLarge { file: None }.into();
        assert!(
            all.to_string().starts_with("the eval side has more than "),
            "{all}"
        );
        let group: EngineError = OverlapError::IndexGroupTooLarge { group: 3 }.into();
        assert!(!group.fault().retryable());
        assert!(matches!(
            group.kind_error::<OverlapError>(),
            Some(OverlapError::IndexGroupTooLarge { group: 3 })
        ));
    }
}
