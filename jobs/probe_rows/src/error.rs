//! The probe-rows job's own errors: what only this job can find wrong, each saying
//! whose fault it is (every one here is the input's or the settings': another attempt
//! would fail alike, so the job stops naming it).

use probeflow_engine::error::{EngineError, Fault, KindError};

#[derive(Debug, thiserror::Error)]
pub enum ProbeRowsError {
    /// Most rows of an input split are implausible (e.g. integer times in the wrong
    /// unit): the job fails instead of rejecting a whole file row by row.
    #[error("{file}: {what}")]
    Implausible { file: String, what: String },
    /// Most valid rows of an input split have a source of a local scope (private,
    /// CGNAT, link-local, ...: [`crate::scope`]): grouping by them would merge
    /// unrelated probes, so the job fails unless `[input] allow_private_sources`.
    #[error("{file}: {what}")]
    LocalSources { file: String, what: String },
    /// An input file that does not decompress, or most of whose lines are not RIPE
    /// Atlas ping results: it names itself and fails at once (another attempt reads
    /// the same bytes).
    #[error("{file}: {what}")]
    CorruptInput { file: String, what: String },
    /// A worker's memory cannot hold a reduce's rows beside its sort: `max_row_bytes`
    /// is too large for `memory_per_worker`.
    #[error(
        "memory_per_worker {memory} is too small for [output] max_row_bytes {max_row_bytes}: \
         a reduce holds up to {copies} copies of a row ({rows}) besides its sort and its \
         fetches; give each worker at least {least}, or lower max_row_bytes"
    )]
    MemoryTooSmall {
        memory: String,
        max_row_bytes: String,
        copies: usize,
        rows: String,
        least: String,
    },
}

impl KindError for ProbeRowsError {
    fn fault(&self) -> Fault {
        match self {
            ProbeRowsError::Implausible { .. }
            | ProbeRowsError::LocalSources { .. }
            | ProbeRowsError::CorruptInput { .. }
            | ProbeRowsError::MemoryTooSmall { .. } => Fault::Input,
        }
    }
}

impl From<ProbeRowsError> for EngineError {
    fn from(e: ProbeRowsError) -> Self {
        EngineError::Kind(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jobs_own_errors_stop_the_job_and_keep_their_kind_through_the_engine() {
        let e: EngineError = ProbeRowsError::Implausible {
            file: "a.parquet".into(),
            what: "9 of 10 rows".into(),
        }
        .into();
        assert_eq!(e.fault(), Fault::Input);
        assert!(!e.fault().retryable());
        assert_eq!(e.to_string(), "a.parquet: 9 of 10 rows");
        assert!(matches!(
            e.kind_error::<ProbeRowsError>(),
            Some(ProbeRowsError::Implausible { .. })
        ));
        // The engine's own: a store error is the environment's, a changed input the
        // input's.
        let store = EngineError::Shuffle {
            file: "x".into(),
            what: "torn".into(),
        };
        assert_eq!(store.fault(), Fault::Environment);
        assert!(store.kind_error::<ProbeRowsError>().is_none());
    }
}
