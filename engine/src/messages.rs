//! The messages between the coordinator actor and the worker actors, the same in one
//! process (local mode) and across machines (cluster mode, `ractor_cluster`).
//!
//! ```text
//! worker ── Register (cluster mode) ─► coordinator ─► WorkerTiming, or a refusal
//! worker ── RequestTask ─► coordinator ─► TaskReply: Task(Assignment) | Wait | Done | Excluded
//! worker ── Heartbeat (task, attempt, lease) ─► coordinator        (extends the lease)
//! worker ── Finished (task, attempt, lease, result) ─► coordinator (journaled, then accepted)
//! coordinator ─► itself: Journaled, NodeLost, Tick
//! ```
//!
//! Payloads are [`Wire`] values, JSON on the wire, carrying only metadata and URIs.

use std::sync::atomic::{AtomicUsize, Ordering};

use ractor::{BytesConvertable, RpcReplyPort};
use ractor_cluster::RactorClusterMessage;
use serde::{de::DeserializeOwned, Serialize};

use crate::protocol::{
    Assignment, Registration, TaskFailure, TaskId, TaskOutput, TaskReply, WorkerTiming,
};

/// A message payload that may have crossed the network: JSON on the wire. Bytes from a
/// peer that do not decode give `Err` (with the reason), which the receiver refuses,
/// instead of a panic inside the actor system.
#[derive(Debug, Clone)]
pub struct Wire<T>(pub Result<T, String>);

impl<T> Wire<T> {
    pub fn new(value: T) -> Self {
        Wire(Ok(value))
    }
}

/// The largest message field this process encoded for the network, in bytes (logged
/// when a job ends; ractor_cluster refuses frames beyond 16 MiB).
pub static LARGEST_MESSAGE: AtomicUsize = AtomicUsize::new(0);

impl<T: Serialize + DeserializeOwned> BytesConvertable for Wire<T> {
    fn into_bytes(self) -> Vec<u8> {
        let bytes = serde_json::to_vec(&self.0).unwrap_or_else(|e| {
            serde_json::to_vec(&Err::<(), _>(format!("unencodable message: {e}")))
                .unwrap_or_default()
        });
        LARGEST_MESSAGE.fetch_max(bytes.len(), Ordering::Relaxed);
        bytes
    }

    fn from_bytes(bytes: Vec<u8>) -> Self {
        Wire(
            serde_json::from_slice::<Result<T, String>>(&bytes)
                .unwrap_or_else(|e| Err(format!("undecodable message: {e}"))),
        )
    }
}

/// Messages to the coordinator actor (local or across the network).
#[derive(RactorClusterMessage)]
pub enum CoordinatorMsg {
    /// A worker process joins (cluster mode) and learns the job's timing; refused with
    /// the reason for a duplicate name or another protocol version.
    #[rpc]
    Register {
        registration: Wire<Registration>,
        reply: RpcReplyPort<Wire<Result<WorkerTiming, String>>>,
    },
    #[rpc]
    RequestTask {
        worker: String,
        reply: RpcReplyPort<Wire<TaskReply>>,
    },
    /// Extends a lease; `lease` is the token of the [`Assignment`].
    Heartbeat {
        worker: String,
        task: Wire<TaskId>,
        attempt: u32,
        lease: String,
    },
    /// A task's result; accepted only with the lease's token, from the worker holding
    /// it, for this job (`job`: the [`crate::protocol::JobContext::job_id`] of its assignment).
    Finished {
        worker: String,
        job: String,
        task: Wire<TaskId>,
        attempt: u32,
        lease: String,
        result: Wire<Result<TaskOutput, TaskFailure>>,
    },
    /// A result's journal entry was written (`error`: or could not be): sent by the
    /// coordinator to itself, with the secret `nonce` it gave that write, so the
    /// result is only taken once it is journaled and the journal write does not hold
    /// up the actor. The job kind's progress files are written off the actor too (in
    /// order, by the coordinator's output writer), so heartbeats never wait on the
    /// store while tasks run; the actor awaits the store only at the end, for the
    /// kind's final outputs, when no task is left to lease.
    Journaled {
        task: Wire<TaskId>,
        nonce: String,
        error: Wire<Option<String>>,
    },
    /// A worker node's session ended (cluster mode): its leases are re-queued at once
    /// instead of waiting for them to expire.
    NodeLost { node: String },
    /// Periodic lease check (sent by the coordinator to itself).
    Tick,
}

impl CoordinatorMsg {
    /// `worker`'s report of attempt `a` (with its lease, for the job `a` names).
    pub fn finished(
        worker: &str,
        a: &Assignment,
        result: Result<TaskOutput, TaskFailure>,
    ) -> CoordinatorMsg {
        CoordinatorMsg::Finished {
            worker: worker.to_string(),
            job: a.job.job_id.clone(),
            task: Wire::new(a.task.id()),
            attempt: a.attempt,
            lease: a.lease.clone(),
            result: Wire::new(result),
        }
    }
}
