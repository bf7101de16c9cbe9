//! The coordinator actor: the messages of a job's workers in, the job's run
//! ([`JobRun`], a pure state machine) stepped with them, and its effects carried out
//! by the engine's one interpreter ([`EffectHandler`]); journal entries are written
//! off the actor (the result counts once its write is confirmed with its nonce).
//!
//! ```text
//! WorkerActor × N ─ Register/RequestTask/Heartbeat/Finished ─► CoordinatorActor::handle ─► JobRun ─► Effect × N ─► EffectHandler
//!                                               ◄── Journaled (nonce) ◄── journal write task ◄──┘
//! ```

use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::oneshot;

use crate::coordinator::effects::{EffectHandler, JobEnd, JournalWrite, JournalWrites};
use crate::coordinator::run::{Effect, JobRun, Reported};
use crate::error::EngineError;
use crate::journal;
use crate::messages::{CoordinatorMsg, Wire};
use crate::protocol::{TaskFailure, TaskId};

/// The coordinator actor's state: the job's run ([`JobRun`], the pure part) and what
/// carries out its effects.
pub struct CoordinatorState {
    pub run: JobRun,
    pub effects: EffectHandler,
    /// Told the job's end: the leases granted and the summary, or the error.
    pub done: Option<oneshot::Sender<JobEnd>>,
    /// Lease tokens and journal nonces handed out (part of the next one's seed).
    pub tokens: u64,
}

/// The actor's journal writes: each off the actor, confirmed by a
/// [`CoordinatorMsg::Journaled`] with its nonce (the actor goes on granting tasks).
struct OffActor<'a> {
    myself: &'a ActorRef<CoordinatorMsg>,
    output: &'a crate::store::StoreUrl,
}

impl JournalWrites for OffActor<'_> {
    fn start(&mut self, write: JournalWrite) {
        let myself = self.myself.clone();
        let store = self.output.clone();
        tokio::spawn(async move {
            let JournalWrite {
                task,
                attempt,
                output,
                nonce,
            } = write;
            let written = journal::write_entry(&store, task, attempt, &output).await;
            let _ = myself.send_message(CoordinatorMsg::Journaled {
                task: Wire::new(task),
                nonce,
                error: Wire::new(written.err()),
            });
        });
    }
}

pub struct CoordinatorActor;

impl CoordinatorState {
    /// How often leases and the output lock are checked: every heartbeat period (a
    /// quarter lease), at most every half second.
    fn tick(&self) -> Duration {
        self.run
            .timing()
            .heartbeat()
            .clamp(Duration::from_millis(10), Duration::from_millis(500))
    }

    /// A fresh secret (lease token, journal nonce).
    fn token(&mut self) -> String {
        self.tokens += 1;
        lease_token(self.tokens)
    }

    fn end(&mut self, result: JobEnd) {
        if let Some(tx) = self.done.take() {
            let _ = tx.send(result);
        }
    }

    /// Carries out the run's effects, in order.
    async fn apply(&mut self, myself: &ActorRef<CoordinatorMsg>, effects: Vec<Effect>) {
        let output = self.effects.output.clone();
        let mut journal = OffActor {
            myself,
            output: &output,
        };
        if let Some(end) = self
            .effects
            .apply(&mut self.run, effects, &mut journal)
            .await
        {
            self.end(end);
        }
    }

    /// The error for a journal entry that could not be written.
    fn journal_error(&self, task: TaskId, what: String) -> EngineError {
        let output = &self.effects.output;
        let path = output.display(&output.child(&journal::task_path(task)));
        // The store's error names the path already.
        let what = what
            .strip_prefix(&format!("{path}: "))
            .unwrap_or(&what)
            .to_string();
        EngineError::Journal {
            path,
            what: format!("cannot write the journal entry: {what}"),
        }
    }
}

impl Actor for CoordinatorActor {
    type Msg = CoordinatorMsg;
    type State = CoordinatorState;
    type Arguments = CoordinatorState;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        mut state: CoordinatorState,
    ) -> Result<CoordinatorState, ActorProcessingErr> {
        // The first stage with tasks left; none (a crash after the last task, before
        // the final outputs) finishes the job at once.
        let effects = state.run.start();
        state.apply(&myself, effects).await;
        if !state.run.is_over() {
            myself.send_after(state.tick(), || CoordinatorMsg::Tick);
        }
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: CoordinatorMsg,
        s: &mut CoordinatorState,
    ) -> Result<(), ActorProcessingErr> {
        let effects = match msg {
            CoordinatorMsg::Register {
                registration,
                reply,
            } => {
                let answer = registration.0.and_then(|r| s.run.register(r));
                if let Err(e) = &answer {
                    tracing::warn!(error = %e, "worker refused");
                }
                let _ = reply.send(Wire::new(answer));
                Vec::new()
            }
            CoordinatorMsg::RequestTask { worker, reply } => {
                let token = s.token();
                let answer = s.run.request(&worker, token, Instant::now());
                let _ = reply.send(Wire(answer));
                Vec::new()
            }
            CoordinatorMsg::Heartbeat {
                worker,
                task,
                attempt,
                lease,
            } => {
                match task {
                    Wire(Ok(task)) => {
                        s.run
                            .heartbeat(&worker, task, attempt, &lease, Instant::now())
                    }
                    Wire(Err(_)) => tracing::warn!(%worker, "undecodable heartbeat refused"),
                }
                Vec::new()
            }
            CoordinatorMsg::Finished {
                worker,
                job,
                task,
                attempt,
                lease,
                result,
            } => {
                let Wire(Ok(task)) = task else {
                    tracing::warn!(%worker, "undecodable result refused");
                    return Ok(());
                };
                // A result that does not decode counts as a failed attempt.
                let result = result.0.unwrap_or_else(|error| {
                    Err(TaskFailure {
                        error,
                        retryable: true,
                    })
                });
                let nonce = s.token();
                let from = Reported {
                    worker: &worker,
                    job: &job,
                    task,
                    attempt,
                    lease: &lease,
                };
                s.run.report(from, result, nonce, Instant::now())
            }
            CoordinatorMsg::Journaled { task, nonce, error } => {
                let Wire(Ok(task)) = task else {
                    return Ok(());
                };
                let error = error
                    .0
                    .unwrap_or_else(|e| Some(format!("undecodable: {e}")))
                    .map(|what| s.journal_error(task, what));
                s.run.journaled(task, &nonce, error)
            }
            CoordinatorMsg::NodeLost { node } => s.run.node_lost(&node),
            CoordinatorMsg::Tick => {
                s.effects.monitor.lock().actor_stepped = std::time::SystemTime::now();
                let lost = s.effects.lock_lost.borrow().clone();
                let mut effects = Vec::new();
                match lost {
                    Some(why) => s.run.stop(EngineError::Conflict(why), &mut effects),
                    None => effects = s.run.tick(Instant::now()),
                }
                s.effects.progress.tick();
                if !s.run.is_over() {
                    myself.send_after(s.tick(), || CoordinatorMsg::Tick);
                }
                effects
            }
        };
        s.apply(&myself, effects).await;
        Ok(())
    }
}

/// A fresh lease token: 128 bits no other node can guess. The keys of std's
/// `RandomState` come from the operating system's random source; the counter and the
/// clock make every token of a run distinct.
fn lease_token(counter: u64) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut seed = Vec::with_capacity(40);
    for _ in 0..2 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(counter);
        seed.extend_from_slice(&h.finish().to_le_bytes());
    }
    seed.extend_from_slice(&counter.to_le_bytes());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    seed.extend_from_slice(&nanos.to_le_bytes());
    blake3::hash(&seed).to_hex()[..32].to_string()
}
