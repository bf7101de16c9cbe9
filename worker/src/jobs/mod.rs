//! The job kinds the engine runs. Each is one module implementing
//! [`crate::engine::job::JobKind`] and one line in [`KINDS`].

use crate::engine::job::{find_kind, JobKind};

pub mod ngram_overlap;
pub mod probe_rows;
pub mod word_count;

/// Every job kind, by its name in job files.
pub static KINDS: &[&'static dyn JobKind] = &[
    &probe_rows::ProbeRows,
    &ngram_overlap::NgramOverlap,
    &word_count::WordCount,
];

/// The kind of a job file without `kind = "..."`.
pub const DEFAULT_KIND: &str = probe_rows::NAME;

/// The kind named `name`.
pub fn kind(name: &str) -> Option<&'static dyn JobKind> {
    find_kind(KINDS, name)
}

/// The names of every kind, for error messages.
pub fn names() -> Vec<&'static str> {
    KINDS.iter().map(|k| k.name()).collect()
}
