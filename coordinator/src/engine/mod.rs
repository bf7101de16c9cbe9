//! The coordinator side of the engine, independent of what the tasks do: the job kind
//! is reached only through `probeflow_worker::engine::job::JobDriver`.
//!
//! * [`driver`]: plans or resumes a job and runs the coordinator actor, in local or
//!   cluster mode.
//! * [`leases`]: the lease state machine: grant, heartbeat, report, expiry, node loss,
//!   failure, give up (pure: events in, decisions out).
//! * [`schedule`]: which pending task a worker gets next (backoff, another worker
//!   after a failure, exclusion of a worker that keeps failing), used by [`leases`].
//! * [`journal`]: the per-task journal under `<output>/_job/journal/` (resume).
//! * [`output_lock`]: one coordinator per output (an atomic, renewed lock object).
//! * [`progress`]: the progress bar or log lines.
//! * [`output_writer`]: the job kind's progress files, written off the actor, in order.

pub mod driver;
pub mod journal;
pub mod leases;
pub mod output_lock;
pub mod output_writer;
pub mod progress;
pub mod schedule;
