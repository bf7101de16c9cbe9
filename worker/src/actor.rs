//! The worker actor and the messages it exchanges with the coordinator actor.
//!
//! A worker pulls: it asks the coordinator for a task ([`CoordinatorMsg::RequestTask`]),
//! runs it while a side task sends [`CoordinatorMsg::Heartbeat`]s that extend its lease,
//! reports [`CoordinatorMsg::Finished`] with the `(task, attempt)` it was given, and asks
//! again. `Wait` means nothing is runnable yet (reduces wait for all maps); `Done` stops
//! the worker. A panic inside a task is caught and reported as a failed attempt.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::protocol::{Assignment, TaskId, TaskOutput};
use crate::reduce::WorkerConfig;

/// Messages to the coordinator actor.
pub enum CoordinatorMsg {
    RequestTask {
        worker: String,
        reply: RpcReplyPort<TaskReply>,
    },
    Heartbeat {
        worker: String,
        task: TaskId,
        attempt: u32,
    },
    Finished {
        worker: String,
        task: TaskId,
        attempt: u32,
        result: Result<TaskOutput, String>,
    },
    /// Periodic lease check (sent by the coordinator to itself).
    Tick,
}

/// The coordinator's answer to a task request.
#[derive(Debug, Clone)]
pub enum TaskReply {
    Task(Box<Assignment>),
    Wait,
    Done,
}

/// Messages to a worker actor.
pub enum WorkerMsg {
    Poll,
}

pub struct WorkerArgs {
    pub name: String,
    pub coordinator: ActorRef<CoordinatorMsg>,
    pub config: WorkerConfig,
    pub heartbeat: Duration,
    pub request_timeout: Duration,
}

pub struct WorkerActor;

/// A worker actor's state: its arguments and what it keeps between tasks.
pub struct WorkerState {
    args: WorkerArgs,
    addresses: crate::validate::AddressCache,
}

impl Actor for WorkerActor {
    type Msg = WorkerMsg;
    type State = WorkerState;
    type Arguments = WorkerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: WorkerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.cast(WorkerMsg::Poll)?;
        Ok(WorkerState {
            args,
            addresses: Default::default(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        _msg: WorkerMsg,
        state: &mut WorkerState,
    ) -> Result<(), ActorProcessingErr> {
        let WorkerState {
            args: state,
            addresses,
        } = state;
        let name = state.name.clone();
        let reply = state
            .coordinator
            .call(
                |reply| CoordinatorMsg::RequestTask {
                    worker: name.clone(),
                    reply,
                },
                Some(state.request_timeout),
            )
            .await;
        let reply = match reply {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            Ok(_) | Err(_) => {
                // The coordinator is gone or slow: stop; it owns the job's fate.
                tracing::warn!(worker = %name, "no answer from the coordinator; stopping");
                myself.stop(None);
                return Ok(());
            }
        };
        match reply {
            TaskReply::Done => myself.stop(None),
            TaskReply::Wait => {
                myself.send_after(Duration::from_millis(50), || WorkerMsg::Poll);
            }
            TaskReply::Task(assignment) => {
                let task = assignment.task.id();
                let attempt = assignment.attempt;
                tracing::debug!(worker = %name, %task, attempt, "running");
                let beat = {
                    let coordinator = state.coordinator.clone();
                    let name = name.clone();
                    let every = state.heartbeat;
                    tokio::spawn(async move {
                        let mut tick = tokio::time::interval(every);
                        tick.tick().await;
                        loop {
                            tick.tick().await;
                            let msg = CoordinatorMsg::Heartbeat {
                                worker: name.clone(),
                                task,
                                attempt,
                            };
                            if coordinator.cast(msg).is_err() {
                                break;
                            }
                        }
                    })
                };
                let result =
                    AssertUnwindSafe(crate::run_task(&assignment, &state.config, addresses))
                        .catch_unwind()
                        .await;
                beat.abort();
                let result = match result {
                    Ok(Ok(output)) => Ok(output),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(panic) => Err(format!(
                        "task panicked: {}",
                        panic
                            .downcast_ref::<String>()
                            .map(String::as_str)
                            .or_else(|| panic.downcast_ref::<&str>().copied())
                            .unwrap_or("unknown panic")
                    )),
                };
                let msg = CoordinatorMsg::Finished {
                    worker: name,
                    task,
                    attempt,
                    result,
                };
                if state.coordinator.cast(msg).is_err() {
                    myself.stop(None);
                    return Ok(());
                }
                myself.cast(WorkerMsg::Poll)?;
            }
        }
        Ok(())
    }
}
