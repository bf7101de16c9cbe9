//! probeflow's engine: everything about running a job that does not depend on what the
//! job computes. A job kind (its own crate under `jobs/`) implements the seam and uses
//! the kit; the `coordinator` and `worker` binaries call the runtimes' entry points with
//! their registry of kinds ([`job::Kinds`]).
//!
//! ```text
//!  the seam          kind (Kind, Driver, Runner), stages (stages!), job (the erased adapter, Kinds)
//!  the kit           store, shuffle, external_sort, parquet_source, inputs, scratch, completion,
//!                    allocator, thread_cpu, units
//!  the wire          protocol (ids, bodies, assignments, registration), messages (the actors'),
//!                    cluster, listener, tls
//!  the runtimes      coordinator: run_job, status, verify (leases, schedule, output lock, the
//!                    run's state machine and its actor: private); journal (written by the
//!                    coordinator, read by both)
//!                    worker: join (the worker actor and its store gate: private)
//!  watching          monitor (the coordinator's model of the job, /metrics, probes, the
//!                    status page: the read-only HTTP listener of both runtimes)
//!  settings          settings ([run], a worker's resources) and every default
//!  errors            error (EngineError, its Fault, the exit code), fault (injection, test builds)
//! ```
//!
//! Data flows from a job file to a finished output like this: the coordinator reads the
//! file ([`coordinator::JobSpec`]), the kind plans the job from its pinned inputs, the
//! run's state machine leases the kind's tasks to workers over the wire, each worker's
//! runner reads and writes through the kit, the coordinator journals and accepts each
//! result, and the kind's driver writes the final files the engine lists in the
//! completion record.

// Kinds name the engine `probeflow_engine` (and `stages!` expands to it); the engine's
// own tests compile the word-count kind's source in this crate, so the name must
// resolve here too.
extern crate self as probeflow_engine;

pub mod allocator;
pub(crate) mod cluster;
pub mod completion;
pub mod conditional_writes;
pub mod coordinator;
pub mod error;
pub mod external_sort;
pub mod fault;
pub mod inputs;
pub mod job;
pub(crate) mod journal;
pub mod kind;
pub(crate) mod listener;
pub(crate) mod messages;
pub mod monitor;
pub mod parquet_guard;
pub mod parquet_source;
pub mod preauth;
pub mod protocol;
pub mod scratch;
pub mod settings;
pub mod shuffle;
pub mod stages;
pub mod store;
pub mod thread_cpu;
pub mod tls;
pub mod worker;
pub use probeflow_reader::units;

pub use error::{EngineError, Fault, KindError, Result};

#[cfg(test)]
mod tests;
