//! The worker crate's errors, by layer and by fault.
//!
//! * [`WorkerError`]: the engine's errors (cluster, TLS, stores, scratch, the shuffle,
//!   job files), and [`WorkerError::Kind`]: an error a job kind owns ([`KindError`],
//!   e.g. `probe_rows::ProbeRowsError`, `ngram_overlap::RecordError`).
//! * [`Fault`]: whose fault an error is, which decides whether a failed task is
//!   tried again: every error says its own ([`WorkerError::fault`]), the engine only
//!   asks.

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

    /// An error a job kind owns.
    #[error("{0}")]
    Kind(Box<dyn KindError>),

    /// A job's own consistency check failed, or its input cannot be used.
    #[error("{0}")]
    Job(String),

    #[error(transparent)]
    Format(#[from] probeflow_reader::Error),

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

/// Whose fault an error is, which decides whether a task that failed with it is tried
/// again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The input or the job file (a missing column, implausible values, input that
    /// changed, a task that needs more memory than the setting gives): every attempt
    /// fails alike, so the job stops at once, naming the problem.
    Input,
    /// The environment (a store, the network, a disk, a worker): another attempt,
    /// preferably on another worker, may succeed.
    Environment,
}

impl Fault {
    /// Whether another attempt could succeed.
    pub fn retryable(self) -> bool {
        self == Fault::Environment
    }
}

/// An error a job kind owns: it says whose fault it is.
pub trait KindError: std::error::Error + Send + Sync + 'static {
    fn fault(&self) -> Fault;
}

impl WorkerError {
    /// Whose fault this error is: the engine's errors by what failed, a kind's by
    /// what the kind says.
    pub fn fault(&self) -> Fault {
        match self {
            WorkerError::Schema { .. }
            | WorkerError::InputChanged { .. }
            | WorkerError::Spec { .. }
            | WorkerError::Conflict(_) => Fault::Input,
            WorkerError::Kind(e) => e.fault(),
            _ => Fault::Environment,
        }
    }

    /// The kind-owned error this is, if it is an `E`.
    pub fn kind_error<E: KindError>(&self) -> Option<&E> {
        match self {
            WorkerError::Kind(e) => {
                let e: &dyn std::error::Error = e.as_ref();
                e.downcast_ref::<E>()
            }
            _ => None,
        }
    }

    pub(crate) fn store(location: impl std::fmt::Display, source: object_store::Error) -> Self {
        WorkerError::Store {
            location: location.to_string(),
            source,
        }
    }
}
