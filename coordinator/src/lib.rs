//! probeflow's coordinator: the coordinator side of the engine, the job file, and the
//! command-line tools.
//!
//! * [`engine`]: the job-independent runtime: the driver and the coordinator actor
//!   ([`engine::driver`]), the lease state machine and the schedule (pure and
//!   unit-tested), the journal, the output lock and progress.
//! * [`spec`]: the job file: `kind`, `[run]` and the kind's own sections (read by the
//!   kind, `probeflow_worker::jobs`).
//! * [`status`]: a job's state from its journal or its finished output.
//! * [`verify`], [`inspect`]: probe-rows outputs checked against their manifest, and
//!   a shard's rows shown.

pub mod engine;
pub mod error;
pub mod inspect;
pub mod spec;
pub mod status;
pub mod verify;

pub use error::{JobError, Result};
pub use probeflow_worker as worker;
