//! The engine's one error type, by layer and by fault, and what a program that stops
//! on one exits with.
//!
//! * [`EngineError`]: the engine's errors (cluster, TLS, stores, scratch, the shuffle,
//!   job files, the journal, verification, a refused worker), and
//!   [`EngineError::Kind`]: an error a job kind owns ([`KindError`], e.g.
//!   `probe_rows::ProbeRowsError`, `ngram_overlap::RecordError`), which keeps its type
//!   through the engine ([`EngineError::kind_error`]).
//! * [`Fault`]: whose fault an error is, which decides whether a failed task is
//!   tried again: every error says its own ([`EngineError::fault`]), the engine only
//!   asks.

/// Result alias for the engine and its kinds.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// An error of the engine or of a job kind running on it.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
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

    /// A local file the user named (a report, `status --html FILE`) cannot be written.
    #[error("cannot write {path}: {source}")]
    Write {
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

    /// The output's object store lacks a feature the engine relies on (`what`, naming
    /// it): running there could corrupt the output, so nothing is written.
    #[error(
        "{store}: this store does not support {what}. probeflow runs only on stores that \
         do: AWS S3, Google Cloud Storage, Ceph RGW (see docs/job.md, \"Supported stores\")"
    )]
    UnsupportedStore { store: String, what: String },

    /// A file that does not decode or is missing where it must be: an input file (a
    /// torn gzip, a JSON line that cannot be read) or one the job wrote and reads back
    /// (an accepted task's result file gone from the output).
    #[error("{file}: {what}")]
    Corrupt { file: String, what: String },

    /// An input file the job cannot use as it is, though it decodes (more rows than a
    /// job can index, a value of a type no rule covers).
    #[error("{file}: {what}")]
    InvalidInput { file: String, what: String },

    /// An error a job kind owns.
    #[error("{0}")]
    Kind(Box<dyn KindError>),

    /// A message between the coordinator and a worker, or a task's result, that does
    /// not decode or is of the wrong stage: most likely two releases in one cluster.
    #[error("{0}")]
    Protocol(String),

    /// A bug: an invariant of the engine or of a kind broken (a result missing that
    /// the plan promised, counts that disagree). Nothing is wrong with the input.
    #[error("internal error (a bug in probeflow, please report it): {0}")]
    Internal(String),

    #[error(transparent)]
    Format(#[from] probeflow_reader::Error),

    /// A task failed more often than allowed; the job stops.
    #[error("{task} failed after {attempts} attempt(s); last error: {error}")]
    TaskFailed {
        task: String,
        attempts: u32,
        error: String,
    },

    /// The journal or another file of the job's own cannot be read.
    #[error("{path}: {what}")]
    Journal { path: String, what: String },

    /// A finished output that does not match its completion record (`coordinator verify`).
    #[error("{output}: verification failed: {what}")]
    Verify { output: String, what: String },

    /// The coordinator refused this worker (a duplicate name, another release): no retry.
    #[error("the coordinator refused this worker: {0}")]
    Refused(String),

    /// The process's own machinery failed (the async runtime, an actor, a coordinator
    /// that stayed unreachable).
    #[error("{0}")]
    Runtime(String),

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

impl EngineError {
    /// Whose fault this error is: the engine's errors by what failed, a kind's by
    /// what the kind says. What follows from the bytes of the input or the job file
    /// (a corrupt or invalid file, a changed one, a bad location) is the input's: every
    /// attempt would fail alike. What a store, a disk, the network or another process
    /// did is the environment's, and so is a bug (retried, as a panic is: a race may
    /// not recur).
    pub fn fault(&self) -> Fault {
        match self {
            EngineError::Url { .. }
            | EngineError::Parquet { .. }
            | EngineError::Schema { .. }
            | EngineError::InputChanged { .. }
            | EngineError::Spec { .. }
            | EngineError::Conflict(_)
            | EngineError::UnsupportedStore { .. }
            | EngineError::Corrupt { .. }
            | EngineError::InvalidInput { .. }
            | EngineError::Verify { .. }
            | EngineError::Refused(_) => Fault::Input,
            EngineError::Cluster(_)
            | EngineError::Tls(_)
            | EngineError::Store { .. }
            | EngineError::Shuffle { .. }
            | EngineError::Scratch { .. }
            | EngineError::Write { .. }
            | EngineError::ScratchFull(_)
            | EngineError::Protocol(_)
            | EngineError::Internal(_)
            | EngineError::TaskFailed { .. }
            | EngineError::Journal { .. }
            | EngineError::Runtime(_)
            | EngineError::Arrow(_) => Fault::Environment,
            EngineError::Format(e) => format_fault(e),
            EngineError::Kind(e) => e.fault(),
        }
    }

    /// The exit status of a program that stops on this error: 2 for what the user must
    /// change before anything runs (the job file, the output or input, the cluster's
    /// cookie, certificates or release), 1 for a job that failed.
    pub fn exit_code(&self) -> u8 {
        match self {
            EngineError::Spec { .. }
            | EngineError::Conflict(_)
            | EngineError::UnsupportedStore { .. }
            | EngineError::Cluster(_)
            | EngineError::Tls(_)
            | EngineError::Refused(_) => 2,
            EngineError::Url { .. }
            | EngineError::Store { .. }
            | EngineError::Parquet { .. }
            | EngineError::Schema { .. }
            | EngineError::InputChanged { .. }
            | EngineError::Shuffle { .. }
            | EngineError::Scratch { .. }
            | EngineError::Write { .. }
            | EngineError::ScratchFull(_)
            | EngineError::Corrupt { .. }
            | EngineError::InvalidInput { .. }
            | EngineError::Kind(_)
            | EngineError::Protocol(_)
            | EngineError::Internal(_)
            | EngineError::Format(_)
            | EngineError::TaskFailed { .. }
            | EngineError::Journal { .. }
            | EngineError::Verify { .. }
            | EngineError::Runtime(_)
            | EngineError::Arrow(_) => 1,
        }
    }

    /// The kind-owned error this is, if it is an `E`.
    pub fn kind_error<E: KindError>(&self) -> Option<&E> {
        match self {
            EngineError::Kind(e) => {
                let e: &dyn std::error::Error = e.as_ref();
                e.downcast_ref::<E>()
            }
            _ => None,
        }
    }

    /// This error's message followed by each cause in its source chain that the message
    /// does not already say (a store's "error sending request" then the TLS library's
    /// "invalid peer certificate: UnknownIssuer"): what a program prints when it stops.
    pub fn report(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(e) = cause {
            let said = e.to_string();
            if !said.is_empty() && !text.contains(&said) {
                text.push_str(": ");
                text.push_str(&said);
            }
            cause = e.source();
        }
        text
    }

    pub fn store(location: impl std::fmt::Display, source: object_store::Error) -> Self {
        EngineError::Store {
            location: location.to_string(),
            source,
        }
    }
}

/// What a caught panic said (its `String` or `&str` payload), for an error that reports
/// it.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("no message")
}

/// Whose fault an error of the format crate is: a file that does not decode or a value
/// that cannot be encoded is the input's; I/O, a store, a thread or a bug the
/// environment's.
fn format_fault(e: &probeflow_reader::Error) -> Fault {
    use probeflow_reader::Error as E;
    match e {
        E::Corrupt { .. }
        | E::Unsupported { .. }
        | E::Options { .. }
        | E::IndexOutOfRange { .. }
        | E::Row(_)
        | E::Input(_)
        | E::Output { .. }
        | E::State(_) => Fault::Input,
        E::Io { .. } | E::Remote { .. } | E::Thread(_) | E::Internal(_) | E::Arrow(_) => {
            Fault::Environment
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_adds_the_causes_the_message_does_not_say() {
        let root = std::io::Error::other("invalid peer certificate: UnknownIssuer");
        let e = EngineError::store(
            "https://host/f.bz2",
            object_store::Error::Generic {
                store: "HTTP",
                source: Box::new(std::io::Error::other(root)),
            },
        );
        let report = e.report();
        assert!(report.starts_with("https://host/f.bz2: "), "{report}");
        assert!(
            report.ends_with("invalid peer certificate: UnknownIssuer"),
            "{report}"
        );
        // Each cause once, though object_store's message already embeds its source's.
        assert_eq!(report.matches("UnknownIssuer").count(), 1, "{report}");
    }
}
