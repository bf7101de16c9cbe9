//! probeflow's training-side crate.
//!
//! * [`array_record`]: ArrayRecord files (Riegeli/records with a footer index), written
//!   and read byte-compatibly with Google's `array_record`.
//! * [`row`]: one probe's measurements as an Arrow IPC stream (the "row"), the
//!   `RowBuilder` that cuts a probe's stream into rows of bounded size, the RTT code,
//!   address handling, and the partition and split functions shared with the job.
//!
//! The preprocessing job (`probeflow-worker`, `probeflow-coordinator`) writes shards with
//! this crate; the training reader (and the Python package) reads them with it.

pub mod array_record;
pub mod error;
pub mod row;

pub use error::{Error, Location, Result};
