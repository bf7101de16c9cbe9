//! The job kinds of probeflow, listed once: the registry the `coordinator` and `worker`
//! binaries pass to the engine. Each kind is its own crate under `jobs/`, built on
//! `probeflow-engine`'s seam and kit only; adding one is a crate and a line here.

use probeflow_engine::job::Kinds;

pub use probeflow_ngram_overlap::NgramOverlap;
pub use probeflow_probe_rows::ProbeRows;
pub use probeflow_word_count::WordCount;

/// Every job kind, by its name in job files; the first, probe_rows, is the kind of a
/// job file without `kind = "..."`.
pub static KINDS: Kinds = Kinds::new(&[&ProbeRows, &NgramOverlap, &WordCount]);
