//! Which task a worker gets next: the queue of runnable tasks, retry backoff, the
//! preference for another worker after a failure, and the exclusion of a worker that
//! keeps failing.
//!
//! ```text
//! push ──► pending ──next_for(worker)──► leased ──failed──► (backoff) pending, not on that worker
//!                                           └──revoked───► pending at once, not on that worker
//! ```
//!
//! A pure state machine: every method takes the current time and the facts it needs
//! (which other workers could run a task) and returns what to do; the coordinator actor
//! does the messaging and the logging. Workers are keyed by their process name (a
//! cluster worker's threads `name/0`, `name/1` … are one worker: they share a scratch
//! disk).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::protocol::{TaskId, TaskSpec};

/// How failed attempts are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The wait before a failed task's second attempt; it doubles for every further one.
    pub backoff: Duration,
    /// The longest wait.
    pub max_backoff: Duration,
    /// A worker with this many failed attempts is given no more tasks (while another
    /// worker is there to run them).
    pub exclude_after: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            exclude_after: 3,
        }
    }
}

impl RetryPolicy {
    /// The wait before attempt `attempt + 1` of a task whose attempt `attempt` failed.
    pub fn backoff_after(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(16);
        (self.backoff * 2u32.pow(doublings)).min(self.max_backoff)
    }
}

/// The worker (process) a worker actor belongs to: `name/3` → `name`.
pub fn worker_of(actor: &str) -> &str {
    actor.split_once('/').map_or(actor, |(w, _)| w)
}

/// What a worker asking for a task gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    Task(TaskSpec),
    /// Nothing it may run now.
    Wait,
    /// It is excluded from the job (the reason).
    Excluded(String),
}

#[derive(Debug, Default)]
struct Retry {
    not_before: Option<Instant>,
    /// Workers an attempt of this task failed or was lost on.
    failed_on: BTreeSet<String>,
}

/// The task queue with its retry bookkeeping.
#[derive(Debug, Default)]
pub struct Scheduler {
    policy: RetryPolicy,
    pending: VecDeque<TaskSpec>,
    retries: HashMap<TaskId, Retry>,
    failures: HashMap<String, u32>,
    excluded: BTreeMap<String, String>,
}

impl Scheduler {
    pub fn new(policy: RetryPolicy) -> Scheduler {
        Scheduler {
            policy,
            ..Scheduler::default()
        }
    }

    pub fn push_back(&mut self, task: TaskSpec) {
        self.pending.push_back(task);
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The spec of pending task `task`.
    pub fn spec(&self, task: TaskId) -> Option<&TaskSpec> {
        self.pending.iter().find(|t| t.id() == task)
    }

    /// Takes pending task `task` out of the queue (its result came another way).
    pub fn remove(&mut self, task: TaskId) -> Option<TaskSpec> {
        let at = self.pending.iter().position(|t| t.id() == task)?;
        self.retries.remove(&task);
        self.pending.remove(at)
    }

    pub fn clear(&mut self) {
        self.pending.clear();
    }

    /// Excluded workers and why.
    pub fn excluded(&self) -> &BTreeMap<String, String> {
        &self.excluded
    }

    pub fn is_excluded(&self, actor: &str) -> bool {
        self.excluded.contains_key(worker_of(actor))
    }

    /// The task for worker actor `actor`: the first pending task past its backoff that
    /// did not fail on this worker — or that did, when `others` (the other workers that
    /// could run it) is empty.
    pub fn next_for(&mut self, actor: &str, others: &[&str], now: Instant) -> Pick {
        let worker = worker_of(actor);
        if let Some(why) = self.excluded.get(worker) {
            return Pick::Excluded(why.clone());
        }
        let runnable = |task: &TaskSpec| match self.retries.get(&task.id()) {
            None => true,
            Some(r) => {
                let ready = r.not_before.is_none_or(|t| t <= now);
                let elsewhere = others.iter().any(|o| !r.failed_on.contains(*o));
                ready && (!r.failed_on.contains(worker) || !elsewhere)
            }
        };
        match self.pending.iter().position(runnable) {
            Some(i) => self.pending.remove(i).map_or(Pick::Wait, Pick::Task),
            None => Pick::Wait,
        }
    }

    /// Attempt `attempt` of `task` failed on `actor` (retryably) and another attempt is
    /// allowed: the task waits out its backoff, then prefers another worker. Returns the
    /// reason when this failure gets the worker excluded (never the last worker:
    /// `others` lists the other workers still in the job).
    pub fn failed(
        &mut self,
        task: TaskSpec,
        actor: &str,
        attempt: u32,
        error: &str,
        others: &[&str],
        now: Instant,
    ) -> Option<String> {
        let worker = worker_of(actor).to_string();
        let retry = self.retries.entry(task.id()).or_default();
        retry.not_before = Some(now + self.policy.backoff_after(attempt));
        retry.failed_on.insert(worker.clone());
        self.pending.push_front(task);
        let failures = self.failures.entry(worker.clone()).or_default();
        *failures += 1;
        if *failures >= self.policy.exclude_after && !others.is_empty() {
            let why = format!("{failures} failed attempts, the last: {error}");
            self.excluded.insert(worker, why.clone());
            return Some(why);
        }
        None
    }

    /// `actor`'s lease on `task` was taken back (expired, or its node was lost): the
    /// task runs again at once, preferably elsewhere.
    pub fn revoked(&mut self, task: TaskSpec, actor: &str) {
        self.retries
            .entry(task.id())
            .or_default()
            .failed_on
            .insert(worker_of(actor).to_string());
        self.pending.push_front(task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(p: u32) -> TaskSpec {
        TaskSpec {
            id: TaskId::new("reduce", p),
            body: crate::protocol::Payload::null(),
        }
    }

    fn sched() -> Scheduler {
        Scheduler::new(RetryPolicy::default())
    }

    #[test]
    fn tasks_go_out_in_order() {
        let mut s = sched();
        s.push_back(task(0));
        s.push_back(task(1));
        let now = Instant::now();
        assert_eq!(s.next_for("a", &["b"], now), Pick::Task(task(0)));
        assert_eq!(s.next_for("b", &["a"], now), Pick::Task(task(1)));
        assert_eq!(s.next_for("a", &["b"], now), Pick::Wait);
        assert!(s.is_empty());
    }

    #[test]
    fn a_failed_task_waits_out_its_backoff() {
        let mut s = sched();
        let now = Instant::now();
        assert_eq!(s.failed(task(0), "a", 1, "boom", &["b"], now), None);
        assert_eq!(s.next_for("b", &["a"], now), Pick::Wait);
        let later = now + Duration::from_secs(1);
        assert_eq!(s.next_for("b", &["a"], later), Pick::Task(task(0)));
    }

    #[test]
    fn backoff_doubles_up_to_its_ceiling() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff_after(1), Duration::from_secs(1));
        assert_eq!(p.backoff_after(2), Duration::from_secs(2));
        assert_eq!(p.backoff_after(3), Duration::from_secs(4));
        assert_eq!(p.backoff_after(40), Duration::from_secs(30));
    }

    #[test]
    fn a_failed_task_goes_to_another_worker_when_there_is_one() {
        let mut s = sched();
        let now = Instant::now();
        s.failed(task(0), "a/0", 1, "boom", &["b"], now);
        let later = now + Duration::from_secs(5);
        // Not to a thread of the same worker while b could run it...
        assert_eq!(s.next_for("a/1", &["b"], later), Pick::Wait);
        assert_eq!(s.next_for("b", &["a"], later), Pick::Task(task(0)));
        // ...but to it when it is the only worker left.
        s.failed(task(0), "b", 2, "boom", &["a"], later);
        let much_later = later + Duration::from_secs(5);
        assert_eq!(s.next_for("a/0", &[], much_later), Pick::Task(task(0)));
    }

    #[test]
    fn a_task_failed_everywhere_runs_anywhere() {
        let mut s = sched();
        let now = Instant::now();
        s.failed(task(0), "a", 1, "x", &["b"], now);
        s.push_back(task(1));
        assert_eq!(s.next_for("b", &["a"], now), Pick::Task(task(1)));
        s.failed(task(1), "b", 1, "x", &["a"], now);
        let later = now + Duration::from_secs(5);
        // task 0 failed on a, task 1 on b: each goes to the other.
        assert_eq!(s.next_for("a", &["b"], later), Pick::Task(task(1)));
        assert_eq!(s.next_for("b", &["a"], later), Pick::Task(task(0)));
    }

    #[test]
    fn a_worker_that_keeps_failing_is_excluded_but_never_the_last() {
        let mut s = sched();
        let now = Instant::now();
        assert_eq!(s.failed(task(0), "a", 1, "x", &["b"], now), None);
        assert_eq!(s.failed(task(1), "a/1", 1, "x", &["b"], now), None);
        let why = s.failed(task(2), "a", 1, "disk full", &["b"], now).unwrap();
        assert!(
            why.contains("3 failed attempts") && why.contains("disk full"),
            "{why}"
        );
        assert!(s.is_excluded("a/0"));
        assert!(matches!(s.next_for("a", &["b"], now), Pick::Excluded(_)));
        assert_eq!(s.excluded().keys().collect::<Vec<_>>(), vec!["a"]);
        // b fails as often but is the only worker left: it stays.
        for t in 3..6 {
            assert_eq!(s.failed(task(t), "b", 1, "x", &[], now), None);
        }
        assert!(!s.is_excluded("b"));
    }

    #[test]
    fn a_revoked_task_runs_again_at_once_elsewhere() {
        let mut s = sched();
        let now = Instant::now();
        s.push_back(task(1));
        s.revoked(task(0), "a");
        assert_eq!(s.next_for("a", &["b"], now), Pick::Task(task(1)));
        assert_eq!(s.next_for("b", &["a"], now), Pick::Task(task(0)));
    }
}
