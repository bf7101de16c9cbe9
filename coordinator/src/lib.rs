//! probeflow's coordinator: the job file, planning, the coordinator actor (task leases,
//! retries), the journal and manifest (resume), progress, and local mode.
//!
//! * [`spec`]: the job file (`[input]`, `[output]`, `[split]`, `[run]`), validated.
//! * [`plan`]: input listing and Parquet footers → map tasks; map outputs → reduce tasks.
//! * [`job`]: the coordinator actor and [`job::run_job`] (local mode).
//! * [`output_lock`]: one coordinator per output (an atomic, renewed lock object).
//! * [`engine`]: the job-independent runtime: the lease state machine and the task
//!   schedule (retry backoff, worker exclusion), pure and unit-tested.
//! * [`result_check`]: a task result checked against its plan before it counts.
//! * [`journal`]: the per-task journal under `<output>/_job/` and `manifest.json`.
//! * [`synthetic`]: RIPE-Atlas-like demo input.
//! * [`inspect`], [`status`]: human views of shards and of a job's state.
//! * [`verify`]: a finished output checked against its manifest.

pub mod engine;
pub mod error;
pub mod inspect;
pub mod job;
pub mod journal;
pub mod output_lock;
pub mod plan;
pub mod progress;
pub mod result_check;
pub mod spec;
pub mod status;
pub mod synthetic;
pub mod verify;

pub use error::{JobError, Result};
pub use probeflow_worker as worker;
