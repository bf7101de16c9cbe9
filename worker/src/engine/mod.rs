//! The engine's runtime shared by the coordinator and the workers, whatever the job.
//!
//! ```text
//! coordinator (probeflow-coordinator) ── protocol (Assignment, results) ──► actor (WorkerActor)
//!      │ job::JobDriver                                                        │ job::TaskRunner
//!      └────────── store (object stores), shuffle (partitioned Arrow IPC) ◄───┘
//! ```

pub mod actor;
pub mod allocator;
pub mod cluster;
pub mod completion;
pub mod external_sort;
pub mod fault;
pub mod inputs;
pub mod job;
pub mod kind;
pub mod listener;
pub mod parquet_source;
pub mod protocol;
pub mod scratch;
pub mod shuffle;
pub mod stages;
pub mod store;
pub mod thread_cpu;
pub mod tls;
pub use probeflow_reader::units;
