//! The coordinator side of the engine, independent of what the tasks do: the job kind
//! is reached only through `probeflow_worker::engine::job::JobDriver`.
//!
//! * [`driver`]: runs a job under the output lock, in local or cluster mode.
//! * [`open`]: an output already complete, or the job planned or resumed from its
//!   journal; its final outputs and completion marker.
//! * [`coordinator_actor`]: the actor that steps a job's run with its workers'
//!   messages and carries out the run's effects.
//! * [`run`]: a job's run as a state machine (stage advance, pending, journaled and
//!   accepted tasks, finish; pure: events in, effects out), which the actor carries out.
//! * [`leases`]: the lease state machine: grant, heartbeat, report, expiry, node loss,
//!   failure, give up (pure: events in, decisions out).
//! * [`schedule`]: which pending task a worker gets next (backoff, another worker
//!   after a failure, exclusion of a worker that keeps failing), used by [`leases`].
//! * [`journal`]: the per-task journal under `<output>/_job/journal/` (resume).
//! * [`output_lock`]: one coordinator per output (an atomic, renewed lock object).
//! * [`progress`]: the progress bar or log lines.
//! * [`output_writer`]: the job kind's progress files, written off the actor, in order.

pub mod coordinator_actor;
pub mod driver;
pub mod journal;
pub mod leases;
pub mod open;
pub mod output_lock;
pub mod output_writer;
pub mod progress;
pub mod run;
pub mod schedule;
