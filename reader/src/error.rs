//! The reader crate's error type.
//!
//! Every fallible function in `probeflow-reader` returns [`Error`]. Errors about a
//! file name the file (and, for ArrayRecord files, the chunk) so that a user can
//! find the bad bytes; errors about a row say which field was wrong.

use std::path::PathBuf;

/// Result alias for the reader crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where in an ArrayRecord file a problem was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// The file as a whole (size, signature).
    File,
    /// The postscript chunk at `size - 65536`.
    Postscript { offset: u64 },
    /// The footer chunk (chunk index entries and metadata).
    Footer { offset: u64 },
    /// A data chunk, by index in the footer and byte offset in the file.
    Chunk { index: usize, offset: u64 },
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::File => write!(f, "file"),
            Location::Postscript { offset } => write!(f, "postscript chunk at offset {offset}"),
            Location::Footer { offset } => write!(f, "footer chunk at offset {offset}"),
            Location::Chunk { index, offset } => write!(f, "chunk {index} at offset {offset}"),
        }
    }
}

/// Errors of the reader crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system I/O error, with the path or sink it concerned.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// An ArrayRecord file is truncated, corrupt or not an ArrayRecord file.
    #[error("{file}: {location}: {what}")]
    Corrupt {
        file: String,
        location: Location,
        what: String,
    },

    /// A valid file uses a feature probeflow does not implement (e.g. transposed chunks).
    #[error("{file}: {location}: unsupported: {what}")]
    Unsupported {
        file: String,
        location: Location,
        what: String,
    },

    /// An ArrayRecord writer option string could not be parsed.
    #[error("invalid ArrayRecord options {options:?}: {what}")]
    Options { options: String, what: String },

    /// A record index outside `0..len`.
    #[error("{file}: record index {index} out of range (the file has {len} records)")]
    IndexOutOfRange { file: String, index: u64, len: u64 },

    /// A row (Arrow IPC stream) that does not follow the probeflow row format.
    #[error("invalid row: {0}")]
    Row(String),

    /// Input values (addresses, RTTs, measurement order …) that cannot be encoded.
    #[error("invalid input: {0}")]
    Input(String),

    /// A job output (or files from one) that must not be read as asked: unfinished
    /// (no `_SUCCESS`), unknown versions, a manifest path leaving the output, shards of
    /// another split or of several outputs.
    #[error("{path}: {what}")]
    Output { path: String, what: String },

    /// An object store (`s3://`, `gs://`) could not be reached or refused a request,
    /// or a remote URL is malformed.
    #[error("{url}: {what}")]
    Remote { url: String, what: String },

    /// A thread the reader needs could not be started (the system refused it), or a
    /// background thread stopped unexpectedly: nothing is wrong with the input.
    #[error("{0}")]
    Thread(String),

    /// An iterator state that cannot be restored here: taken on other rows or with
    /// other options, of another state version, or damaged.
    #[error("{0}")]
    State(String),

    /// A bug: an invariant of the reader broken. Nothing is wrong with the input.
    #[error("internal error (a bug in probeflow, please report it): {0}")]
    Internal(String),

    /// An error from the Arrow library while encoding a row.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
