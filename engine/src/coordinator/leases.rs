//! The lease state machine: which worker holds which task, with which attempt and
//! token, until when; what a heartbeat, a report, an expiry or a lost node does.
//!
//! ```text
//!            request                 report (holder, attempt, token)
//! pending ───────────► leased ─────────────────────────────────────► taken (the caller
//!    ▲                  │  │ heartbeat: deadline = now + lease           accepts or fails it)
//!    │   expiry,        │  │
//!    └── node lost ─────┘  └─ a report from anyone else: refused (late, duplicate, forged)
//!    ▲
//!    └── failed (backoff, another worker) ◄── taken ── out of attempts / not retryable: give up
//! ```
//!
//! Pure: no I/O, no clock, no randomness. The caller passes the time and the fresh
//! lease token in, and acts on what comes back (reply to the worker, journal the
//! result, log, fail the job). Every transition has a unit test below.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::protocol::{TaskFailure, TaskId, TaskSpec};

use super::schedule::{Pick, RetryPolicy, Scheduler};

/// A task leased to a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub worker: String,
    pub attempt: u32,
    /// The random token only the worker holding the lease knows.
    pub token: String,
    pub deadline: Instant,
    pub spec: TaskSpec,
}

/// The answer to a worker asking for a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    Task {
        spec: TaskSpec,
        attempt: u32,
        token: String,
    },
    Wait,
    Excluded(String),
}

/// Why a report was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// An attempt this board granted, no longer leased (expired, or already reported):
    /// its files are the planned ones for that attempt.
    Late,
    /// Nothing this board granted: an unknown task or attempt, or the wrong worker or
    /// token.
    Foreign,
    /// An attempt a predecessor granted (a coordinator that ran this job before this
    /// one: its attempt numbers are below this board's).
    Predecessor,
}

/// A lease taken back by expiry or node loss.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoked {
    pub worker: String,
    pub task: TaskId,
    pub attempt: u32,
    /// The task had no attempt left: the job fails.
    pub out_of_attempts: bool,
}

/// What a failed attempt leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterFailure {
    /// Another attempt later, preferably elsewhere; `Some` when this failure got the
    /// worker excluded (the reason).
    Retry { excluded: Option<String> },
    /// The job fails: no attempt left, or another attempt would fail alike.
    GiveUp { attempts: u32, error: String },
}

/// The leases of a job's tasks.
#[derive(Debug)]
pub struct LeaseBoard {
    lease: Duration,
    max_attempts: u32,
    /// Attempt numbers up to this one are a predecessor's: this board numbers its
    /// attempts of a task from `attempt_base + 1`.
    attempt_base: u32,
    queue: Scheduler,
    leases: HashMap<TaskId, Lease>,
    attempts: HashMap<TaskId, u32>,
}

impl LeaseBoard {
    /// A board of leases of `lease`, `max_attempts` per task, whose attempt numbers
    /// start after `attempt_base` (those up to it are its predecessors').
    pub fn new(
        lease: Duration,
        max_attempts: u32,
        attempt_base: u32,
        policy: RetryPolicy,
    ) -> LeaseBoard {
        LeaseBoard {
            lease,
            max_attempts,
            attempt_base,
            queue: Scheduler::new(policy),
            leases: HashMap::new(),
            attempts: HashMap::new(),
        }
    }

    /// How many attempts of its task this board had granted up to `attempt`.
    fn tries(&self, attempt: u32) -> u32 {
        attempt.saturating_sub(self.attempt_base)
    }

    /// Takes task `task` off the board, pending or leased (a predecessor's attempt
    /// gave its result): its spec, if it was on the board. A lease taken back this way
    /// is not re-queued; its holder's report is refused.
    pub fn withdraw(&mut self, task: TaskId) -> Option<TaskSpec> {
        match self.leases.remove(&task) {
            Some(lease) => Some(lease.spec),
            None => self.queue.remove(task),
        }
    }

    /// The spec of task `task` if it is on the board (pending or leased).
    pub fn spec(&self, task: TaskId) -> Option<&TaskSpec> {
        match self.leases.get(&task) {
            Some(lease) => Some(&lease.spec),
            None => self.queue.spec(task),
        }
    }

    /// Adds a task to run.
    pub fn push(&mut self, spec: TaskSpec) {
        self.queue.push_back(spec);
    }

    /// Whether no task is waiting to be granted.
    #[cfg(test)]
    pub fn nothing_pending(&self) -> bool {
        self.queue.is_empty()
    }

    /// Drops every pending task and lease (the job ended).
    pub fn clear(&mut self) {
        self.queue.clear();
        self.leases.clear();
    }

    pub fn is_excluded(&self, actor: &str) -> bool {
        self.queue.is_excluded(actor)
    }

    /// Excluded workers and why.
    pub fn excluded(&self) -> &std::collections::BTreeMap<String, String> {
        self.queue.excluded()
    }

    /// Whether this board ever granted `(task, attempt)`.
    pub fn granted(&self, task: TaskId, attempt: u32) -> bool {
        attempt > self.attempt_base && self.attempts.get(&task).is_some_and(|&a| attempt <= a)
    }

    /// Worker actor `actor` asks for a task (`others`: the other workers in the job;
    /// `token`: a fresh random token for the lease, if one is granted).
    pub fn request(&mut self, actor: &str, others: &[&str], token: String, now: Instant) -> Grant {
        match self.queue.next_for(actor, others, now) {
            Pick::Wait => Grant::Wait,
            Pick::Excluded(why) => Grant::Excluded(why),
            Pick::Task(spec) => {
                let id = spec.id();
                let attempt = self.attempts.get(&id).copied().unwrap_or(self.attempt_base) + 1;
                self.attempts.insert(id, attempt);
                self.leases.insert(
                    id,
                    Lease {
                        worker: actor.to_string(),
                        attempt,
                        token: token.clone(),
                        deadline: now + self.lease,
                        spec: spec.clone(),
                    },
                );
                Grant::Task {
                    spec,
                    attempt,
                    token,
                }
            }
        }
    }

    /// A heartbeat: extends the lease if it comes from its holder with its attempt and
    /// token. Returns whether it did.
    pub fn heartbeat(
        &mut self,
        actor: &str,
        task: TaskId,
        attempt: u32,
        token: &str,
        now: Instant,
    ) -> bool {
        match self.leases.get_mut(&task) {
            Some(l) if l.worker == actor && l.attempt == attempt && l.token == token => {
                l.deadline = now + self.lease;
                true
            }
            _ => false,
        }
    }

    /// A report (result or failure) for `(task, attempt)`: the lease, now ended, if it
    /// comes from its holder with its token; otherwise why it is refused.
    pub fn take(
        &mut self,
        actor: &str,
        task: TaskId,
        attempt: u32,
        token: &str,
    ) -> Result<Lease, Refused> {
        let holds = self
            .leases
            .get(&task)
            .is_some_and(|l| l.worker == actor && l.attempt == attempt && l.token == token);
        if holds {
            if let Some(lease) = self.leases.remove(&task) {
                return Ok(lease);
            }
        }
        let ours = self.leases.get(&task).is_none_or(|l| l.attempt != attempt);
        if attempt <= self.attempt_base {
            Err(Refused::Predecessor)
        } else if ours && self.granted(task, attempt) {
            Err(Refused::Late)
        } else {
            Err(Refused::Foreign)
        }
    }

    /// The attempt of `lease` (taken by [`LeaseBoard::take`]) failed on `actor`.
    pub fn failed(
        &mut self,
        actor: &str,
        lease: Lease,
        failure: &TaskFailure,
        others: &[&str],
        now: Instant,
    ) -> AfterFailure {
        let tries = self.tries(lease.attempt);
        if tries >= self.max_attempts || !failure.retryable {
            return AfterFailure::GiveUp {
                attempts: tries,
                error: failure.error.clone(),
            };
        }
        let excluded = self
            .queue
            .failed(lease.spec, actor, tries, &failure.error, others, now);
        AfterFailure::Retry { excluded }
    }

    /// Takes back every lease past its deadline.
    pub fn expire(&mut self, now: Instant) -> Vec<Revoked> {
        self.revoke(|l| l.deadline < now)
    }

    /// Takes back every lease of worker `worker` (all its actors: `worker/N`).
    pub fn node_lost(&mut self, worker: &str) -> Vec<Revoked> {
        let prefix = format!("{worker}/");
        self.revoke(|l| l.worker == worker || l.worker.starts_with(&prefix))
    }

    /// Takes back the leases `which` selects and re-queues their tasks, at once and
    /// preferably elsewhere, in task order.
    fn revoke(&mut self, which: impl Fn(&Lease) -> bool) -> Vec<Revoked> {
        let mut ids: Vec<TaskId> = self
            .leases
            .iter()
            .filter(|(_, l)| which(l))
            .map(|(id, _)| *id)
            .collect();
        ids.sort();
        let mut revoked = Vec::new();
        for id in ids {
            let Some(lease) = self.leases.remove(&id) else {
                continue;
            };
            let out_of_attempts = self.tries(lease.attempt) >= self.max_attempts;
            revoked.push(Revoked {
                worker: lease.worker.clone(),
                task: id,
                attempt: lease.attempt,
                out_of_attempts,
            });
            if !out_of_attempts {
                self.queue.revoked(lease.spec, &lease.worker);
            }
        }
        revoked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(10);

    fn task(p: u32) -> TaskSpec {
        TaskSpec {
            id: TaskId::new("reduce", p),
            body: crate::protocol::Payload::null(),
        }
    }

    fn board(tasks: u32) -> LeaseBoard {
        let mut b = LeaseBoard::new(LEASE, 3, 0, RetryPolicy::default());
        for p in 0..tasks {
            b.push(task(p));
        }
        b
    }

    fn grant(
        b: &mut LeaseBoard,
        actor: &str,
        others: &[&str],
        now: Instant,
    ) -> (TaskId, u32, String) {
        match b.request(actor, others, format!("tok-{actor}-{now:?}"), now) {
            Grant::Task {
                spec,
                attempt,
                token,
            } => (spec.id(), attempt, token),
            other => panic!("no task for {actor}: {other:?}"),
        }
    }

    fn failure(retryable: bool) -> TaskFailure {
        TaskFailure {
            error: "disk full".into(),
            retryable,
        }
    }

    #[test]
    fn grant_leases_a_task_with_attempt_and_token() {
        let mut b = board(1);
        let now = Instant::now();
        let (id, attempt, token) = grant(&mut b, "a", &[], now);
        assert_eq!((id, attempt), (TaskId::new("reduce", 0), 1));
        assert!(!token.is_empty());
        assert_eq!(b.request("b", &[], "t".into(), now), Grant::Wait);
        assert!(b.granted(id, 1) && !b.granted(id, 2));
    }

    #[test]
    fn heartbeat_extends_only_the_holders_lease() {
        let mut b = board(1);
        let now = Instant::now();
        let (id, attempt, token) = grant(&mut b, "a", &[], now);
        let later = now + LEASE - Duration::from_secs(1);
        assert!(!b.heartbeat("a", id, attempt, "forged", later));
        assert!(!b.heartbeat("b", id, attempt, &token, later));
        assert!(!b.heartbeat("a", id, attempt + 1, &token, later));
        assert!(b.heartbeat("a", id, attempt, &token, later));
        // Extended: not expired where the first deadline had passed.
        assert!(b.expire(now + LEASE + Duration::from_secs(1)).is_empty());
    }

    #[test]
    fn expiry_requeues_the_task_for_another_worker() {
        let mut b = board(1);
        let now = Instant::now();
        let (id, _, _) = grant(&mut b, "a", &["b"], now);
        let later = now + LEASE + Duration::from_millis(1);
        assert_eq!(
            b.expire(later),
            vec![Revoked {
                worker: "a".into(),
                task: id,
                attempt: 1,
                out_of_attempts: false
            }]
        );
        assert_eq!(b.request("a", &["b"], "t".into(), later), Grant::Wait);
        assert_eq!(grant(&mut b, "b", &["a"], later).1, 2);
    }

    #[test]
    fn node_loss_revokes_every_lease_of_that_worker_at_once() {
        let mut b = board(3);
        let now = Instant::now();
        grant(&mut b, "a/0", &["b"], now);
        grant(&mut b, "a/1", &["b"], now);
        grant(&mut b, "b", &["a"], now);
        let lost = b.node_lost("a");
        assert_eq!(
            lost.iter()
                .map(|r| (r.worker.as_str(), r.task))
                .collect::<Vec<_>>(),
            vec![
                ("a/0", TaskId::new("reduce", 0)),
                ("a/1", TaskId::new("reduce", 1))
            ]
        );
        assert!(!b.nothing_pending());
        assert!(b.node_lost("c").is_empty());
    }

    #[test]
    fn a_late_result_is_refused_as_late() {
        let mut b = board(1);
        let now = Instant::now();
        let (id, attempt, token) = grant(&mut b, "a", &[], now);
        b.expire(now + LEASE + Duration::from_millis(1));
        assert_eq!(b.take("a", id, attempt, &token), Err(Refused::Late));
        // Also while a newer attempt holds the lease.
        let (_, second, _) = grant(&mut b, "b", &[], now + LEASE * 2);
        assert_eq!(second, 2);
        assert_eq!(b.take("a", id, attempt, &token), Err(Refused::Late));
    }

    #[test]
    fn a_duplicate_result_is_refused() {
        let mut b = board(1);
        let now = Instant::now();
        let (id, attempt, token) = grant(&mut b, "a", &[], now);
        let lease = b.take("a", id, attempt, &token).unwrap();
        assert_eq!((lease.worker.as_str(), lease.attempt), ("a", 1));
        assert_eq!(b.take("a", id, attempt, &token), Err(Refused::Late));
    }

    #[test]
    fn a_report_without_the_lease_is_refused_as_foreign() {
        let mut b = board(2);
        let now = Instant::now();
        let (id, attempt, token) = grant(&mut b, "a", &["b"], now);
        assert_eq!(b.take("a", id, attempt, "guess"), Err(Refused::Foreign));
        assert_eq!(b.take("b", id, attempt, &token), Err(Refused::Foreign));
        assert_eq!(
            b.take("a", TaskId::new("reduce", 1), 1, &token),
            Err(Refused::Foreign)
        );
        assert_eq!(
            b.take("a", TaskId::new("reduce", 9), 1, &token),
            Err(Refused::Foreign)
        );
        // The real holder still can.
        assert!(b.take("a", id, attempt, &token).is_ok());
    }

    #[test]
    fn a_failed_attempt_is_retried_elsewhere_after_a_backoff() {
        let mut b = board(1);
        let now = Instant::now();
        let (id, attempt, token) = grant(&mut b, "a", &["b"], now);
        let lease = b.take("a", id, attempt, &token).unwrap();
        assert_eq!(
            b.failed("a", lease, &failure(true), &["b"], now),
            AfterFailure::Retry { excluded: None }
        );
        assert_eq!(b.request("b", &["a"], "t".into(), now), Grant::Wait);
        let later = now + Duration::from_secs(1);
        assert_eq!(b.request("a", &["b"], "t".into(), later), Grant::Wait);
        let (again, second, _) = grant(&mut b, "b", &["a"], later);
        assert_eq!((again, second), (id, 2));
    }

    #[test]
    fn give_up_when_out_of_attempts_or_not_retryable() {
        let mut b = board(2);
        let mut now = Instant::now();
        for expected in 1..=3 {
            let (id, attempt, token) = grant(&mut b, "a", &[], now);
            assert_eq!((id, attempt), (TaskId::new("reduce", 0), expected));
            let lease = b.take("a", id, attempt, &token).unwrap();
            let after = b.failed("a", lease, &failure(true), &[], now);
            if expected < 3 {
                assert_eq!(after, AfterFailure::Retry { excluded: None });
            } else {
                assert_eq!(
                    after,
                    AfterFailure::GiveUp {
                        attempts: 3,
                        error: "disk full".into()
                    }
                );
            }
            now += Duration::from_secs(60);
        }
        let (id, attempt, token) = grant(&mut b, "a", &[], now);
        assert_eq!(id, TaskId::new("reduce", 1));
        let lease = b.take("a", id, attempt, &token).unwrap();
        assert!(matches!(
            b.failed("a", lease, &failure(false), &[], now),
            AfterFailure::GiveUp { attempts: 1, .. }
        ));
    }

    #[test]
    fn an_expired_lease_out_of_attempts_gives_up() {
        let mut b = LeaseBoard::new(LEASE, 1, 0, RetryPolicy::default());
        b.push(task(0));
        let now = Instant::now();
        grant(&mut b, "a", &[], now);
        let revoked = b.expire(now + LEASE * 2);
        assert!(revoked[0].out_of_attempts);
        assert!(b.nothing_pending(), "not re-queued");
    }

    #[test]
    fn a_worker_that_keeps_failing_is_excluded() {
        let mut b = board(3);
        let now = Instant::now();
        let mut last = None;
        for _ in 0..3 {
            let (id, attempt, token) = grant(&mut b, "a", &["b"], now);
            let lease = b.take("a", id, attempt, &token).unwrap();
            last = Some(b.failed("a", lease, &failure(true), &["b"], now));
        }
        assert!(matches!(
            last,
            Some(AfterFailure::Retry { excluded: Some(_) })
        ));
        assert!(b.is_excluded("a/2"));
        assert!(matches!(
            b.request("a", &["b"], "t".into(), now),
            Grant::Excluded(_)
        ));
    }
}
