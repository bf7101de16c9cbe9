//! probeflow's worker: the task bodies of the preprocessing job and the worker actor.
//!
//! * [`protocol`]: tasks, results and the messages between coordinator and workers.
//! * [`map`]: scan a split of an input Parquet file → [`validate`] every row →
//!   partition by source → one [`shuffle`] file (+ rejects).
//! * [`reduce`]: gather a partition → DataFusion sort (memory-bounded, spilling) →
//!   rows per source (`RowBuilder`) → `train`/`test` ArrayRecord shards.
//! * [`store`]: object-store locations (local, `file://`, `s3://`).
//! * [`scratch`]: one job run's local scratch directory, isolated from other jobs.
//! * [`actor`]: the worker actor that pulls tasks from the coordinator and runs them.
//! * [`cluster`]: cluster mode: nodes, the cookie, finding the coordinator.
//! * [`listener`]: the coordinator's public socket (authentication timeout and cap).
//! * [`tls`]: cluster mode's optional mutual TLS.
//! * [`fault`]: fault injection, in test builds only.
//! * [`ngram_overlap`]: the n-gram overlap job (in progress: its tokenizers).

pub mod actor;
pub mod cluster;
pub mod error;
pub mod fault;
pub mod listener;
pub mod map;
pub mod ngram_overlap;
pub mod parquet_source;
pub mod protocol;
pub mod reduce;
pub mod scratch;
pub mod shuffle;
pub mod store;
pub mod tls;
pub mod units;
pub mod validate;

pub use error::{Result, WorkerError};
pub use probeflow_reader as reader;
pub use reduce::WorkerConfig;

use protocol::{Assignment, TaskOutput, TaskSpec};

/// Runs one leased task (`scratch`: this job run's local space; `cache`: the worker's
/// parsed addresses, kept across tasks).
pub async fn run_task(
    assignment: &Assignment,
    config: &WorkerConfig,
    scratch: &scratch::JobScratch,
    cache: &mut validate::AddressCache,
) -> Result<TaskOutput> {
    match &assignment.task {
        TaskSpec::Map(m) => map::run_map(m, &assignment.job, assignment.attempt, cache)
            .await
            .map(TaskOutput::Map),
        TaskSpec::Reduce(r) => {
            reduce::run_reduce(r, &assignment.job, config, scratch, assignment.attempt)
                .await
                .map(TaskOutput::Reduce)
        }
    }
}
