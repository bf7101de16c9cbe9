//! The coordinator runtime, independent of what the tasks do: the job kind is reached
//! only through `crate::job::JobDriver`. Its entry points are [`run_job`], [`status`]
//! and [`verify`], with the job file read once into a [`JobSpec`]; everything else is
//! private to the engine.
//!
//! * `run_job`: runs a job under the output lock, in local or cluster mode.
//! * `spec`: the job file (`kind`, `[run]` as `crate::settings::RunConfig`, the kind's
//!   sections).
//! * `status`, `verify`: a job's state; a finished output checked against its record.
//! * [`open`]: an output already complete, or the job planned or resumed from its
//!   journal; its final outputs and completion marker.
//! * [`actor`]: the actor that steps a job's run with its workers' messages.
//! * [`effects`]: the one interpreter of the run's effects (the actor's and the
//!   engine tests' bed's).
//! * [`run`]: a job's run as a state machine (stage advance, pending, journaled and
//!   accepted tasks, finish; pure: events in, effects out), which the actor carries out.
//! * [`leases`]: the lease state machine: grant, heartbeat, report, expiry, node loss,
//!   failure, give up (pure: events in, decisions out).
//! * [`schedule`]: which pending task a worker gets next (backoff, another worker
//!   after a failure, exclusion of a worker that keeps failing), used by [`leases`].
//! * [`output_lock`]: one coordinator per output (an atomic, renewed lock object).
//! * [`progress`]: the progress bar or log lines.
//! * [`output_writer`]: the job kind's progress files, written off the actor, in order.
//! * [`watch`]: the job's monitor and its HTTP listener (`[run] http`): readiness,
//!   liveness, the linger after the job.

pub(crate) mod actor;
pub(crate) mod effects;
pub(crate) mod leases;
pub(crate) mod open;
pub(crate) mod output_lock;
pub(crate) mod output_writer;
pub(crate) mod progress;
pub(crate) mod run;
mod run_job;
pub(crate) mod schedule;
mod spec;
mod status;
mod verify;
pub(crate) mod watch;

pub use run_job::{run_job, RunOutcome};
pub use spec::JobSpec;
pub use status::{report, status};
pub use verify::{verify, Verified};
