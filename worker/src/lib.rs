//! probeflow's worker library: the engine's distributed runtime, shared by the
//! coordinator and the worker processes, and the job kinds that run on it.
//!
//! * [`engine`]: job-independent: the messages ([`engine::protocol`]), the seam a job
//!   kind implements ([`engine::job`]), the worker actor ([`engine::actor`]), cluster
//!   transport ([`engine::cluster`], [`engine::listener`], [`engine::tls`]), object
//!   stores ([`engine::store`]), the shuffle ([`engine::shuffle`]), per-run scratch
//!   ([`engine::scratch`]) and fault injection in test builds ([`engine::fault`]).
//! * [`jobs`]: the job kinds, one module each, registered in [`jobs::KINDS`]:
//!   [`jobs::probe_rows`] (measurements → per-probe rows in ArrayRecord shards) and
//!   [`jobs::ngram_overlap`] (train/test n-gram overlap with provenance).
//!
//! The coordinator's half of the engine (leases, journal, driver) lives in the
//! `probeflow-coordinator` crate; it reaches the jobs only through [`engine::job`].

pub mod engine;
pub mod error;
pub mod jobs;

pub use error::{Result, WorkerError};
pub use probeflow_reader as reader;
