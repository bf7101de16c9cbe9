//! The generic runtime of a job, independent of what its tasks do.
//!
//! * [`leases`]: the lease state machine: grant, heartbeat, report, expiry, node loss,
//!   failure, give up (pure: events in, decisions out).
//! * [`schedule`]: which pending task a worker gets next (backoff, another worker
//!   after a failure, exclusion of a worker that keeps failing), used by [`leases`].

pub mod leases;
pub mod schedule;
