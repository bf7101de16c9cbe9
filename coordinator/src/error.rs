//! The coordinator crate's error type.

use probeflow_worker::WorkerError;

pub type Result<T, E = JobError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The job file cannot be read or is invalid.
    #[error("{file}: {what}")]
    Spec { file: String, what: String },

    /// The output already holds a different job's data.
    #[error("{0}")]
    Conflict(String),

    /// A task failed more often than allowed; the job stops.
    #[error("{task} failed after {attempts} attempt(s); last error: {error}")]
    TaskFailed {
        task: String,
        attempts: u32,
        error: String,
    },

    /// The journal or manifest cannot be read.
    #[error("{path}: {what}")]
    Journal { path: String, what: String },

    /// A finished output that does not match its manifest (`coordinator verify`).
    #[error("{output}: verification failed: {what}")]
    Verify { output: String, what: String },

    #[error(transparent)]
    Worker(#[from] WorkerError),

    #[error(transparent)]
    Format(#[from] probeflow_reader::Error),

    #[error("{0}")]
    Runtime(String),
}
