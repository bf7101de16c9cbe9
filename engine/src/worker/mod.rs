//! The worker runtime: a worker process joins the coordinator ([`join`]) and runs
//! `threads` worker actors, each pulling tasks, running them with its kind's runner and
//! reporting the results (`actor`, private to the engine: local mode's coordinator
//! spawns the same actors in-process).

pub(crate) mod actor;
mod join;

pub use crate::cluster::load_cookie;
pub use join::{join, JoinConfig, WorkerTls};
