//! The engine's behaviours, in-process, on the word-count kind: one module per
//! behaviour, each driving a job's run ([`bed::Bed`]) event by event. The Python
//! end-to-end tests run the same behaviours with real processes, TLS and kill -9.

mod bed;
mod completion_record;
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
