//! The worker crate's error type.

/// Result alias for the worker crate.
pub type Result<T, E = WorkerError> = std::result::Result<T, E>;

/// Errors of map and reduce tasks and of the object-store layer.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Cluster mode: the cookie, the node, joining the coordinator.
    #[error("cluster: {0}")]
    Cluster(String),

    /// Cluster mode with TLS: unusable certificate files, a failed handshake.
    #[error("tls: {0}")]
    Tls(String),

    /// A URL or path that cannot be used as an object-store location.
    #[error("bad location {url:?}: {what}")]
    Url { url: String, what: String },

    /// Reading or writing an object failed.
    #[error("{location}: {source}")]
    Store {
        location: String,
        #[source]
        source: object_store::Error,
    },

    /// An input Parquet file that cannot be read (corrupt, truncated, not Parquet).
    #[error("{file}: cannot read Parquet: {what}")]
    Parquet { file: String, what: String },

    /// The input lacks a configured column or has it in an unusable type.
    #[error("{file}: {what}")]
    Schema { file: String, what: String },

    /// Most rows of an input split are implausible (e.g. integer times in the wrong
    /// unit): the job fails instead of rejecting a whole file row by row.
    #[error("{file}: {what}")]
    Implausible { file: String, what: String },

    /// An input file changed (replaced, rewritten, removed) after the job was planned.
    #[error("{file}: {what}")]
    InputChanged { file: String, what: String },

    /// An intermediate (shuffle) file that does not decode.
    #[error("{file}: corrupt shuffle data: {what}")]
    Shuffle { file: String, what: String },

    /// A local scratch-file problem.
    #[error("{path}: {source}")]
    Scratch {
        path: String,
        #[source]
        source: std::io::Error,
    },

    /// A task's scratch disk filled ([`ScratchFull`]).
    #[error(transparent)]
    ScratchFull(Box<ScratchFull>),

    /// A task needs more memory than `[run] memory_per_worker` lets it use: the same
    /// input and setting fail alike on every attempt.
    #[error("{what}: {cause}; raise [run] memory_per_worker (now {memory})")]
    OutOfMemory {
        what: String,
        memory: String,
        cause: String,
    },

    /// The shard format layer.
    /// A job file (or its kind's sections) is invalid.
    #[error("{file}: {what}")]
    Spec { file: String, what: String },

    /// The output or the input is not what this job expects (another job's output,
    /// changed input): running would mix or lose data.
    #[error("{0}")]
    Conflict(String),

    /// A file the job wrote or reads back does not decode.
    #[error("{file}: {what}")]
    Corrupt { file: String, what: String },

    /// One input record that cannot be used (e.g. an id of no usable type): the record
    /// is rejected, the job goes on.
    #[error("{0}")]
    BadRecord(String),

    /// One input record without an id whose hash cannot be computed, because msgpack
    /// cannot encode one of its values (an integer outside `-2**63 ..= 2**64 - 1`, a
    /// string with a lone surrogate): the record is rejected, the job goes on.
    #[error("{0}")]
    UnhashableRecord(String),

    /// A job's own consistency check failed, or its input cannot be used.
    #[error("{0}")]
    Job(String),

    #[error(transparent)]
    Format(#[from] probeflow_reader::Error),

    /// DataFusion (sorting).
    #[error("sort: {0}")]
    DataFusion(#[from] datafusion::error::DataFusionError),

    /// Arrow (encoding intermediate data).
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
}

/// A task's scratch disk filled: which directory, the filesystem's space, what the
/// task had written there and what it needs.
#[derive(Debug, thiserror::Error)]
#[error(
    "{dir}: No space left on device: its filesystem has {free} free of {total}, and this \
     task had written {written} there when it failed ({need}); free space there or point \
     the scratch (`[run] scratch`, a worker's `--scratch`) at a larger disk (cause: \
     {cause})"
)]
pub struct ScratchFull {
    pub dir: String,
    pub free: String,
    pub total: String,
    pub written: String,
    pub need: String,
    pub cause: String,
}

impl WorkerError {
    /// Whether another attempt of the task could succeed. Errors that follow from the
    /// input and the job file alone (a missing column, implausible values) fail every
    /// attempt alike.
    pub fn is_retryable(&self) -> bool {
        !matches!(
            self,
            WorkerError::Schema { .. }
                | WorkerError::Implausible { .. }
                | WorkerError::InputChanged { .. }
                | WorkerError::Spec { .. }
                | WorkerError::Conflict(_)
                | WorkerError::OutOfMemory { .. }
        )
    }

    pub(crate) fn store(location: impl std::fmt::Display, source: object_store::Error) -> Self {
        WorkerError::Store {
            location: location.to_string(),
            source,
        }
    }
}
