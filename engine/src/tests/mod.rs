//! The engine's behaviours, in-process, on the word-count kind: one module per
//! behaviour, each driving a job's run ([`bed::Bed`]) event by event. The Python
//! end-to-end tests run the same behaviours with real processes, TLS and kill -9.

// The kind the engine's tests run: the word-count kind's own source (the smallest kind,
// `jobs/word_count`), compiled into this test build, so the tests depend on no
// production registry and no crate that depends on the engine.
#[path = "../../../jobs/word_count/src/lib.rs"]
#[allow(dead_code)]
mod word_count;

/// The engine tests' registry of kinds.
pub(crate) static TEST_KINDS: crate::job::Kinds = crate::job::Kinds::new(&[&word_count::WordCount]);

mod adoption;
mod bed;
mod commits_behind;
mod completion_record;
mod coordinator_stops;
mod errors_by_class;
mod exclusion;
mod finish_order;
mod join;
mod late_and_forged_results;
mod lease_expiry;
mod local_run;
mod resume_from_journal;
mod retry_elsewhere;
mod stage_dependencies;
mod torn_journal;
