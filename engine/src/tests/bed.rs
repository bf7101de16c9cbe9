//! The engine tests' bed: a word-count job (the engine's smallest kind) over text files
//! in a temporary directory, planned and journaled by the engine's own functions, its
//! run ([`JobRun`]) driven event by event with a clock the test moves, and every
//! effect carried out by the coordinator's own interpreter ([`EffectHandler`]: the
//! output lock checked, progress files flushed, the final outputs and the completion
//! marker, late files removed, excluded workers recorded); journal entries are written
//! to the store between events, before the result counts. Tasks run with the kind's
//! real runner.

use super::TEST_KINDS;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::coordinator::effects::{EffectHandler, JournalWrite, JournalWrites};
use crate::coordinator::open::{open_job, OpenedJob};
use crate::coordinator::output_writer::OutputWriter;
use crate::coordinator::progress::Progress;
use crate::coordinator::run::{Effect, JobRun, Reported};
use crate::coordinator::JobSpec;
use crate::job::TaskRunner;
use crate::journal;
use crate::kind::{TaskEnv, WorkerResources};
use crate::protocol::TaskReply;
use crate::protocol::{Assignment, Payload, Registration, TaskFailure, TaskId, PROTOCOL_VERSION};
use crate::scratch::JobScratch;
use crate::store::StoreUrl;

/// A job's lease in the bed.
pub const LEASE: Duration = Duration::from_secs(10);

/// How a bed's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Finished: the kind's summary.
    Finished(String),
    /// Failed: the error.
    Failed(String),
}

pub struct Bed {
    pub dir: tempfile::TempDir,
    pub spec: JobSpec,
    pub output: StoreUrl,
    pub run: JobRun,
    effects: EffectHandler,
    /// Sends "the output lock is lost" to the run's effects (as the lock keeper does).
    pub lock: tokio::sync::watch::Sender<Option<String>>,
    runner: Box<dyn TaskRunner>,
    scratch: JobScratch,
    resources: WorkerResources,
    /// The bed's clock.
    pub now: Instant,
    tokens: u64,
    /// How the run ended, once it has.
    pub ended: Option<Ended>,
    /// The stages queued, in order.
    pub stages: Vec<String>,
    /// The late attempts whose files the run had removed.
    pub discarded: Vec<(TaskId, u32)>,
    /// The excluded workers, as last recorded.
    pub excluded: BTreeMap<String, String>,
}

/// The input texts of the beds.
pub const TEXTS: [&str; 3] = ["a b a", "b c\nc  c", "the end"];

impl Bed {
    /// A word-count job over [`TEXTS`] with `max_attempts`, planned, with workers `w1`
    /// and `w2` in it.
    pub async fn new(max_attempts: u32) -> Bed {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in");
        std::fs::create_dir(&input).unwrap();
        for (i, text) in TEXTS.iter().enumerate() {
            std::fs::write(input.join(format!("t{i}.txt")), text).unwrap();
        }
        let job = dir.path().join("job.toml");
        std::fs::write(
            &job,
            format!(
                "kind = \"word_count\"\n[input]\npaths = [\"{}/*.txt\"]\n[output]\nurl = \"{}\"\n\
                 [run]\nmax_attempts = {max_attempts}\nlease_seconds = {}\nmemory_per_worker = \"64MiB\"\n",
                input.display(),
                dir.path().join("out").display(),
                LEASE.as_secs()
            ),
        )
        .unwrap();
        let spec = JobSpec::load(&job, TEST_KINDS).unwrap();
        let output = StoreUrl::parse(spec.output_url()).unwrap();
        let opened = open_job(&spec, &output).await.unwrap();
        let scratch = JobScratch::create(&dir.path().join("scratch"), "bed").unwrap();
        let (lock, lock_lost) = tokio::sync::watch::channel(None);
        let effects = EffectHandler {
            output: output.clone(),
            progress: Progress::new(&opened.totals, &opened.stages),
            writer: OutputWriter::start(output.clone()),
            lock_lost,
            final_dirs: spec.kind.final_dirs(),
            completion: opened.completion,
            monitor: crate::monitor::Monitor::new(crate::monitor::JobMonitor::new(
                spec.kind.name(),
                spec.output_url(),
                std::time::SystemTime::now(),
            )),
        };
        let mut bed = Bed {
            runner: spec.kind.runner(),
            resources: WorkerResources {
                scratch: dir.path().join("scratch"),
                memory_bytes: 64 << 20,
            },
            dir,
            run: opened.run,
            effects,
            lock,
            spec,
            output,
            scratch,
            now: Instant::now(),
            tokens: 0,
            ended: None,
            stages: Vec::new(),
            discarded: Vec::new(),
            excluded: BTreeMap::new(),
        };
        bed.join(&["w1", "w2"]);
        let effects = bed.run.start();
        bed.apply(effects).await;
        bed
    }

    /// The job opened again from its journal (a coordinator restarted), with `w1` and
    /// `w2` joining again; returns how many results were replayed.
    pub async fn restart(&mut self) -> usize {
        let OpenedJob {
            run,
            replayed,
            completion,
            ..
        } = open_job(&self.spec, &self.output).await.unwrap();
        self.run = run;
        self.effects.completion = completion;
        self.ended = None;
        self.stages.clear();
        self.join(&["w1", "w2"]);
        let effects = self.run.start();
        self.apply(effects).await;
        replayed.len()
    }

    fn join(&mut self, workers: &[&str]) {
        for w in workers {
            self.run
                .register(Registration {
                    worker: w.to_string(),
                    node: format!("{w}-node"),
                    capacity: 1,
                    memory_bytes: 64 << 20,
                    version: PROTOCOL_VERSION,
                    release: crate::protocol::RELEASE.into(),
                })
                .unwrap();
        }
    }

    fn token(&mut self) -> String {
        self.tokens += 1;
        format!("secret-{}", self.tokens)
    }

    /// What `worker` gets when it asks for a task.
    pub fn request(&mut self, worker: &str) -> TaskReply {
        let token = self.token();
        self.run.request(worker, token, self.now).unwrap()
    }

    /// The task `worker` gets (it must get one).
    pub fn lease(&mut self, worker: &str) -> Assignment {
        match self.request(worker) {
            TaskReply::Task(a) => *a,
            other => panic!("{worker} got no task: {other:?}"),
        }
    }

    /// Runs `a` with the kind's runner: its result.
    pub async fn execute(&mut self, a: &Assignment) -> Payload {
        let env = TaskEnv {
            resources: &self.resources,
            scratch: &self.scratch,
        };
        self.runner
            .run(a, env)
            .await
            .unwrap()
            .durable()
            .await
            .unwrap()
    }

    /// `worker` reports `result` for `a` (with `a`'s lease token); the effects are
    /// carried out, journal writes included.
    pub async fn report(
        &mut self,
        worker: &str,
        a: &Assignment,
        result: Result<Payload, TaskFailure>,
    ) {
        let effects = self.report_unjournaled(worker, a, &a.lease, result);
        self.apply(effects).await;
    }

    /// `worker` reports `result` for `a` with lease token `token`: the effects, not
    /// carried out.
    pub fn report_unjournaled(
        &mut self,
        worker: &str,
        a: &Assignment,
        token: &str,
        result: Result<Payload, TaskFailure>,
    ) -> Vec<Effect> {
        let nonce = self.token();
        let from = Reported {
            worker,
            job: &a.job.job_id,
            task: a.task.id,
            attempt: a.attempt,
            lease: token,
        };
        self.run.report(from, result, nonce, self.now)
    }

    /// `worker` runs `a` and reports its result.
    pub async fn run_task(&mut self, worker: &str, a: &Assignment) {
        let result = self.execute(a).await;
        self.report(worker, a, Ok(result)).await;
    }

    /// The run finished, and its output is [`EXPECTED_COUNTS`].
    pub fn assert_finished_as_expected(&self) {
        assert!(
            matches!(self.ended, Some(Ended::Finished(_))),
            "{:?}",
            self.ended
        );
        assert_eq!(self.counts(), EXPECTED_COUNTS);
    }

    /// `worker` leases a task, runs it and reports its result; returns the task.
    pub async fn complete_one(&mut self, worker: &str) -> Assignment {
        let a = self.lease(worker);
        self.run_task(worker, &a).await;
        a
    }

    /// Runs the job to its end with `worker` alone.
    pub async fn complete_all(&mut self, worker: &str) {
        let deadline = self.now + Duration::from_secs(60);
        while self.ended.is_none() {
            assert!(self.now < deadline, "{worker} waited a minute for a task");
            match self.request(worker) {
                TaskReply::Task(a) => {
                    let result = self.execute(&a).await;
                    self.report(worker, &a, Ok(result)).await;
                }
                TaskReply::Wait => self.advance(Duration::from_secs(1)).await,
                other => panic!("{worker}: {other:?}"),
            }
        }
    }

    /// The clock moves on by `by`, and the run checks its leases.
    pub async fn advance(&mut self, by: Duration) {
        self.now += by;
        let effects = self.run.tick(self.now);
        self.apply(effects).await;
    }

    /// Carries out `effects` with the coordinator's interpreter, and the journal writes
    /// they start (with the effects their confirmations give) until none is left.
    pub async fn apply(&mut self, effects: Vec<Effect>) {
        let mut effects = effects;
        loop {
            self.observe(&effects);
            let mut writes = Queued::default();
            let end = self
                .effects
                .apply(&mut self.run, effects, &mut writes)
                .await;
            if let Some(end) = end {
                self.ended = Some(match end {
                    Ok((_, summary)) => Ended::Finished(summary),
                    Err(e) => Ended::Failed(e.to_string()),
                });
            }
            if writes.0.is_empty() {
                return;
            }
            effects = Vec::new();
            for w in writes.0 {
                let written =
                    journal::write_entry(&self.output, w.task, w.attempt, &w.output).await;
                assert_eq!(written, Ok(()));
                effects.extend(self.run.journaled(w.task, &w.nonce, None));
            }
        }
    }

    /// What the tests look at in `effects`, before they are carried out.
    fn observe(&mut self, effects: &[Effect]) {
        for effect in effects {
            match effect {
                Effect::StagePlanned { stage, .. } => self.stages.push(stage.to_string()),
                Effect::RecordExcluded(excluded) => self.excluded = excluded.clone(),
                Effect::DiscardLate { task, attempt } => self.discarded.push((*task, *attempt)),
                _ => {}
            }
        }
    }

    /// A path under the output root.
    pub fn out(&self, rel: &str) -> PathBuf {
        self.dir.path().join("out").join(rel)
    }

    /// The job's output file.
    pub fn counts(&self) -> String {
        std::fs::read_to_string(self.out("word_counts.tsv")).unwrap()
    }
}

/// The bed's journal writes: queued, written between events.
#[derive(Default)]
struct Queued(Vec<JournalWrite>);

impl JournalWrites for Queued {
    fn start(&mut self, write: JournalWrite) {
        self.0.push(write);
    }
}

/// The files under `dir` (relative paths, sorted); none if it does not exist.
pub fn files_under(dir: &std::path::Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    files.sort();
    files
}

/// The word counts of [`TEXTS`], as the job writes them.
pub const EXPECTED_COUNTS: &str = "a\t2\nb\t2\nc\t3\nend\t1\nthe\t1\n";

/// A failure another attempt could get past.
pub fn flaky(why: &str) -> Result<Payload, TaskFailure> {
    Err(TaskFailure {
        error: why.to_string(),
        retryable: true,
    })
}

/// The task id `stage-index`.
pub fn id(text: &str) -> TaskId {
    TaskId::parse(text).unwrap()
}
