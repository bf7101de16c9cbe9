//! probeflow's training-side crate.
//!
//! * [`array_record`]: ArrayRecord files (Riegeli/records with a footer index), written
//!   and read byte-compatibly with Google's `array_record`.
//! * [`row`]: one probe's measurements as an Arrow IPC stream (the "row"), the
//!   `RowBuilder` that cuts a probe's stream into rows of bounded size, the RTT code,
//!   address handling, and the partition and split functions shared with the job.
//! * [`tokenizer`]: measurements ↔ tokens (vocabulary of 267), detokenizer, grammar check.
//! * [`sampler`]: training contexts from a row (windows, timestamp modes, field orders),
//!   every draw from a counter-based [`rng`] keyed by (seed, epoch, row, context).
//! * [`packing`]: contexts into fixed-length sequences with segment ids and positions.
//! * [`output`]: a job's output as the reader sees it: which shard files to read, and
//!   the checks (`_SUCCESS`, versions, split, one output, checksums) before reading.
//! * [`dataset`]: a split's shards, per-rank epoch order, blocks of rows, batches, the
//!   resumable iterator state and the background producer.
//! * [`row_identity`]: the rows digest that ties an iterator state to the rows it was
//!   taken on.
//! * [`epoch_layout`]: how an epoch's rows are dealt to ranks when the number of ranks
//!   changes mid-epoch (elastic resume).
//! * `remote` (feature `remote`): outputs on `s3://` and `gs://`, read through a
//!   node-local shard cache shared by a node's processes.
//! * [`units`]: human-readable sizes (`200GiB`).
//! * [`mixture`]: weighted mixtures of several outputs (which source each sequence comes
//!   from) and a mixture's iterator state.
//!
//! The preprocessing job (`probeflow-worker`, `probeflow-coordinator`) writes shards with
//! this crate; the training reader (and the Python package) reads them with it.

pub mod array_record;
pub mod dataset;
pub mod epoch_layout;
pub mod error;
pub mod glob;
pub mod mixture;
pub mod output;
pub mod packing;
#[cfg(feature = "remote")]
pub mod remote;
pub mod rng;
pub mod row;
pub mod row_identity;
pub mod sampler;
pub mod tokenizer;
pub mod units;

pub use error::{Error, Location, Result};
