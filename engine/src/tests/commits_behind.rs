//! A worker commits behind: a task whose last step only waits
//! ([`RunResult::Committing`]) is reported when its commit ends, while the worker
//! already runs its next task. At most [`COMMITS_BEHIND`] commits run behind the task
//! being run; each result is reported with its own attempt and lease, in whatever order
//! the commits end; a commit that fails or panics is a failed attempt.
//!
//! The worker actor is the real one; the coordinator is a test actor that hands out the
//! tasks and records what the worker sends, and the job kind's commits wait for the
//! test to open their gates.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{EngineError, Result};
use crate::fault::Faults;
use crate::job::{JobFile, JobKind, Kinds, Sealed, TaskRunner};
use crate::kind::{BoxFuture, OutputCheck, RunResult, TaskEnv, WorkerResources};
use crate::messages::{CoordinatorMsg, Wire};
use crate::protocol::TaskReply;
use crate::protocol::{
    Assignment, JobContext, Payload, TaskFailure, TaskId, TaskSpec, WorkerTiming,
};
use crate::store::StoreUrl;
use crate::worker::actor::{JobOutput, WorkerActor, WorkerArgs, COMMITS_BEHIND};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{mpsc, oneshot};

/// What the test sees, in order.
#[derive(Debug, PartialEq)]
enum Seen {
    /// The worker asked for a task and got task `n`.
    Leased(u32),
    /// Task `n`'s run began on the worker.
    Started(u32),
    /// Task `n`'s report: its lease token and its result (the output's number, or
    /// the failure).
    Reported(u32, String, std::result::Result<u32, String>),
}

/// How a gated commit ends.
enum Ending {
    Output,
    Error,
    Panic,
}

/// The wiring between the test and its job kind (whose runner the worker makes).
struct Wiring {
    seen: mpsc::UnboundedSender<Seen>,
    gates: HashMap<u32, oneshot::Receiver<Ending>>,
}

static WIRING: Mutex<Option<Wiring>> = Mutex::new(None);

fn see(what: Seen) {
    if let Some(w) = WIRING.lock().unwrap().as_ref() {
        let _ = w.seen.send(what);
    }
}

/// A job kind whose task `n` gives output `n` once the test opens its gate.
struct GatedKind;

static GATED: GatedKind = GatedKind;
static KINDS: Kinds = Kinds::new(&[&GATED]);

// The gated kind is written against the erased seam (the worker actor's side of it),
// which only engine code may implement.
impl Sealed for GatedKind {}

impl JobKind for GatedKind {
    fn name(&self) -> &'static str {
        "gated"
    }
    fn final_dirs(&self) -> &'static [&'static str] {
        &[]
    }
    fn load(&'static self, file: &str, _text: &str) -> Result<Box<dyn JobFile>> {
        Err(EngineError::Internal(format!(
            "{file}: the gated kind has no job files"
        )))
    }
    fn runner(&self) -> Box<dyn TaskRunner> {
        Box::new(GatedRunner)
    }
    fn describe_finished<'a>(
        &'a self,
        _output: &'a StoreUrl,
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn output_check<'a>(
        &'a self,
        _output: &'a StoreUrl,
    ) -> BoxFuture<'a, Result<Option<Box<dyn OutputCheck>>>> {
        Box::pin(async { Ok(None) })
    }
    fn attempt_files(&self, _task: TaskId, _attempt: u32) -> Result<Vec<String>> {
        Ok(Vec::new())
    }
    fn task_counts(
        &self,
        _spec: &Payload,
        _plan: &Payload,
        _results: &[(TaskId, &Payload)],
    ) -> Vec<(&'static str, Option<u64>)> {
        Vec::new()
    }
}

struct GatedRunner;

impl Sealed for GatedRunner {}

impl TaskRunner for GatedRunner {
    fn run<'a>(
        &'a mut self,
        task: &'a Assignment,
        _env: TaskEnv<'a>,
    ) -> BoxFuture<'a, Result<RunResult<Payload>>> {
        Box::pin(async move {
            let n = task.task.id.index;
            see(Seen::Started(n));
            let gate = WIRING
                .lock()
                .unwrap()
                .as_mut()
                .and_then(|w| w.gates.remove(&n))
                .ok_or_else(|| EngineError::Internal(format!("no gate for task {n}")))?;
            Ok(RunResult::Committing(Box::pin(async move {
                match gate.await {
                    Ok(Ending::Output) => Ok(Payload::encode(&n).unwrap()),
                    Ok(Ending::Error) => {
                        Err(EngineError::Internal(format!("task {n}'s commit failed")))
                    }
                    Ok(Ending::Panic) => panic!("task {n}'s commit panicked"),
                    Err(_) => Err(EngineError::Internal("gate dropped".into())),
                }
            })))
        })
    }
    #[cfg(feature = "fault-injection")]
    fn simulated(&self, _task: &Assignment) -> Option<Result<Payload>> {
        None
    }
    #[cfg(feature = "fault-injection")]
    fn forged(&self, _task: &Assignment, output: Payload) -> Payload {
        output
    }
}

/// A coordinator that leases tasks `0..tasks` in order (attempt 1, lease `lease-n`),
/// then answers `Wait` until every task reported, then `Done`; or, `done_once_leased`,
/// `Done` as soon as every task is leased (as a coordinator whose job another attempt
/// finished does).
struct TestCoordinator;

struct Board {
    tasks: u32,
    next: u32,
    reported: u32,
    done_once_leased: bool,
}

/// The tests of this file share [`WIRING`]: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn assignment(n: u32) -> Assignment {
    Assignment {
        task: TaskSpec {
            id: TaskId::new("gate", n),
            body: Payload::encode(&n).unwrap(),
        },
        attempt: 1,
        lease: format!("lease-{n}"),
        job: JobContext {
            job_id: "gated-job".into(),
            kind: "gated".into(),
            output: "/nonexistent/gated".into(),
            settings: Payload::encode(&()).unwrap(),
        },
    }
}

impl Actor for TestCoordinator {
    type Msg = CoordinatorMsg;
    type State = Board;
    type Arguments = (u32, bool);

    async fn pre_start(
        &self,
        _myself: ActorRef<CoordinatorMsg>,
        (tasks, done_once_leased): (u32, bool),
    ) -> std::result::Result<Board, ActorProcessingErr> {
        Ok(Board {
            tasks,
            next: 0,
            reported: 0,
            done_once_leased,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<CoordinatorMsg>,
        msg: CoordinatorMsg,
        board: &mut Board,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match msg {
            CoordinatorMsg::RequestTask { reply, .. } => {
                let answer = if board.next < board.tasks {
                    let n = board.next;
                    board.next += 1;
                    see(Seen::Leased(n));
                    TaskReply::Task(Box::new(assignment(n)))
                } else if board.reported < board.tasks && !board.done_once_leased {
                    TaskReply::Wait
                } else {
                    TaskReply::Done
                };
                let _ = reply.send(Wire::new(answer));
            }
            CoordinatorMsg::Finished {
                task,
                attempt,
                lease,
                result,
                ..
            } => {
                board.reported += 1;
                let n = task.0.map(|t| t.index).unwrap_or(u32::MAX);
                assert_eq!(attempt, 1);
                let result = match result.0 {
                    Ok(Ok(output)) => Ok(output.decode::<u32>().unwrap()),
                    Ok(Err(TaskFailure { error, .. })) => Err(error),
                    Err(e) => Err(format!("undecodable: {e}")),
                };
                see(Seen::Reported(n, lease, result));
            }
            _ => {}
        }
        Ok(())
    }
}

/// A worker of the gated kind, named `w`, working for `coordinator` in `scratch`.
fn worker_args(coordinator: &ActorRef<CoordinatorMsg>, scratch: &tempfile::TempDir) -> WorkerArgs {
    WorkerArgs {
        name: "w".into(),
        coordinator: coordinator.clone(),
        resources: WorkerResources {
            scratch: scratch.path().to_path_buf(),
            memory_bytes: 64 << 20,
        },
        timing: WorkerTiming {
            heartbeat_ms: 100,
            request_timeout_ms: 10_000,
        },
        done: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        job: Arc::new(std::sync::OnceLock::<JobOutput>::new()),
        faults: Faults::none(),
        kinds: KINDS,
        unreported: Default::default(),
        sent: Vec::new(),
        stats: Default::default(),
    }
}

/// The next thing seen (failing after 10 s).
async fn next(seen: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(Duration::from_secs(10), seen.recv())
        .await
        .expect("nothing happened for 10 s")
        .expect("the wiring closed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_task_runs_while_commits_wait_and_each_result_is_reported_when_its_commit_ends() {
    assert_eq!(
        COMMITS_BEHIND, 1,
        "this test walks through one commit behind"
    );
    let _serial = SERIAL.lock().await;
    let (tx, mut seen) = mpsc::unbounded_channel();
    let mut open = HashMap::new();
    let mut gates = HashMap::new();
    for n in 0..4 {
        let (o, g) = oneshot::channel();
        open.insert(n, o);
        gates.insert(n, g);
    }
    *WIRING.lock().unwrap() = Some(Wiring { seen: tx, gates });
    let scratch = tempfile::tempdir().unwrap();
    let (coordinator, coordinator_handle) = Actor::spawn(None, TestCoordinator, (4, false))
        .await
        .unwrap();
    let args = worker_args(&coordinator, &scratch);
    let done = args.done.clone();
    let (_worker, worker_handle) = Actor::spawn(None, WorkerActor, args).await.unwrap();

    // Task 0 runs and commits; task 1 is leased and runs while task 0's commit waits.
    assert_eq!(next(&mut seen).await, Seen::Leased(0));
    assert_eq!(next(&mut seen).await, Seen::Started(0));
    assert_eq!(next(&mut seen).await, Seen::Leased(1));
    assert_eq!(next(&mut seen).await, Seen::Started(1));
    // Two commits wait: the worker asks for nothing more, reports nothing.
    let quiet = tokio::time::timeout(Duration::from_millis(300), seen.recv()).await;
    assert!(quiet.is_err(), "with two commits waiting: {quiet:?}");

    // Task 1's commit ends first: it is reported, and the worker asks again.
    open.remove(&1).unwrap().send(Ending::Output).ok().unwrap();
    assert_eq!(
        next(&mut seen).await,
        Seen::Reported(1, "lease-1".into(), Ok(1))
    );
    assert_eq!(next(&mut seen).await, Seen::Leased(2));
    assert_eq!(next(&mut seen).await, Seen::Started(2));
    // Task 0's commit fails, task 2's panics: both are failed attempts, reported.
    open.remove(&0).unwrap().send(Ending::Error).ok().unwrap();
    let Seen::Reported(0, lease, Err(error)) = next(&mut seen).await else {
        panic!("task 0 not reported as failed");
    };
    assert_eq!(lease, "lease-0");
    assert!(error.contains("task 0's commit failed"), "{error}");
    assert_eq!(next(&mut seen).await, Seen::Leased(3));
    assert_eq!(next(&mut seen).await, Seen::Started(3));
    open.remove(&2).unwrap().send(Ending::Panic).ok().unwrap();
    let Seen::Reported(2, lease, Err(error)) = next(&mut seen).await else {
        panic!("task 2 not reported as failed");
    };
    assert_eq!(lease, "lease-2");
    assert!(
        error.contains("panicked") && error.contains("task 2's commit"),
        "{error}"
    );
    open.remove(&3).unwrap().send(Ending::Output).ok().unwrap();
    assert_eq!(
        next(&mut seen).await,
        Seen::Reported(3, "lease-3".into(), Ok(3))
    );

    // Every task reported: the coordinator says done and the worker stops.
    tokio::time::timeout(Duration::from_secs(10), worker_handle)
        .await
        .expect("the worker did not stop")
        .unwrap();
    assert!(done.load(std::sync::atomic::Ordering::SeqCst));
    coordinator.stop(None);
    coordinator_handle.await.unwrap();
    *WIRING.lock().unwrap() = None;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_ends_after_the_coordinator_said_done_is_settled_not_forgotten() {
    // The coordinator answers Done while task 0's commit still runs (another attempt of
    // the task finished the job: this one was fenced, e.g. paused past its lease). The
    // worker stops; its commit ends and is reported, but no answer can confirm that
    // report any more: the attempt must be settled (its files removed if the job is
    // complete without it) or kept for a next coordinator, never dropped with its files
    // left on the store (the chaos run left a fenced map's shuffle files so).
    let _serial = SERIAL.lock().await;
    let (tx, mut seen) = mpsc::unbounded_channel();
    let (open, gate) = oneshot::channel();
    *WIRING.lock().unwrap() = Some(Wiring {
        seen: tx,
        gates: HashMap::from([(0, gate)]),
    });
    let scratch = tempfile::tempdir().unwrap();
    let (coordinator, _) = Actor::spawn(None, TestCoordinator, (1, true))
        .await
        .unwrap();
    let args = worker_args(&coordinator, &scratch);
    let unreported = args.unreported.clone();
    let (_worker, worker_handle) = Actor::spawn(None, WorkerActor, args).await.unwrap();
    assert_eq!(next(&mut seen).await, Seen::Leased(0));
    assert_eq!(next(&mut seen).await, Seen::Started(0));
    // The worker asks again while task 0 commits, and hears Done.
    tokio::time::sleep(Duration::from_millis(300)).await;
    open.send(Ending::Output).ok().unwrap();
    assert_eq!(
        next(&mut seen).await,
        Seen::Reported(0, "lease-0".into(), Ok(0))
    );
    tokio::time::timeout(Duration::from_secs(10), worker_handle)
        .await
        .expect("the worker did not stop")
        .unwrap();
    // The job's output has no completion record here: the attempt is kept, to be
    // settled by the worker's join loop (or offered to a next coordinator).
    let kept: Vec<(TaskId, u32)> = unreported
        .lock()
        .unwrap()
        .iter()
        .map(|u| (u.assignment.task.id(), u.assignment.attempt))
        .collect();
    assert_eq!(kept, [(TaskId::new("gate", 0), 1)]);
    coordinator.stop(None);
}
