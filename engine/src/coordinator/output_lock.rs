//! One owner per output: the lock object `<output>/_job/lock.json` that a coordinator
//! holds while it runs a job.
//!
//! ```text
//! acquire: put_if_absent(lock) ─ ok ─► owner
//!            └ exists ─► expired, or its owner process is gone (same host) ─► replace_if
//!                        │                                    (the revision read) ─► owner
//!                        └ alive ─► EngineError::Conflict naming the owner (exit 2)
//! renew (every ttl/3, from the coordinator's tick): replace_if(our revision) ─ lost ─► error
//! release: delete (only if still ours)
//! ```
//!
//! A conditional write whose answer is lost (a reset after the store applied it) leaves
//! the writer unsure whether it happened: a lock found holding this coordinator's own
//! record (the same owner, with its per-run id) is this coordinator's, whether found
//! while taking the lock or when a renewal's precondition fails. Transient store errors
//! while taking the lock are retried for up to its lifetime.
//!
//! The lock names its owner (host, pid, process start, time started) and when it
//! expires. Creating and replacing are atomic on every store (see
//! [`crate::store`]), so of two coordinators started at once exactly one
//! wins, and a takeover of an expired lock can succeed for only one of several
//! contenders. A lock whose owner stopped renewing is taken over only after it
//! expired, or at once when it was held by a process on this host that no longer
//! exists (a coordinator killed with SIGKILL), and every takeover is logged.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::store::{Revision, StoreUrl};
use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};

pub const LOCK_PATH: &str = "_job/lock.json";

/// Who holds the lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub host: String,
    pub pid: u32,
    /// The process's start time in clock ticks since boot (`/proc/<pid>/stat`), so a
    /// reused pid is not taken for the owner.
    pub process_start: Option<u64>,
    /// Unix seconds when this owner took the lock.
    pub since: u64,
    /// Distinguishes two owners that share host and pid (a restarted process).
    pub run: String,
}

/// The content of the lock object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRecord {
    pub owner: Owner,
    /// Unix seconds of the last renewal, and when the lock lapses without another.
    pub renewed_at: u64,
    pub expires_at: u64,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown-host".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Field 22 of `/proc/<pid>/stat`: when the process started (ticks since boot).
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

impl Owner {
    fn me() -> Owner {
        let pid = std::process::id();
        Owner {
            host: hostname(),
            pid,
            process_start: process_start(pid),
            since: now(),
            run: format!(
                "{:x}",
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos())
            ),
        }
    }

    /// Whether this owner is a process on this host that no longer exists.
    fn is_gone_from_this_host(&self) -> bool {
        if self.host != hostname() {
            return false;
        }
        match (process_start(self.pid), self.process_start) {
            (None, _) => true,                      // no such process
            (Some(now), Some(then)) => now != then, // the pid was reused
            (Some(_), None) => false,
        }
    }
}

impl std::fmt::Display for LockRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "host {} pid {} (running it since unix time {}; lock renewed at {}, expires at {})",
            self.owner.host, self.owner.pid, self.owner.since, self.renewed_at, self.expires_at
        )
    }
}

/// The least time taking the lock retries transient store errors (else the lock's
/// lifetime).
const MIN_ACQUIRE_RETRY: Duration = Duration::from_secs(10);

/// Retries a store operation on the lock while its errors may be transient (the store
/// client's own retries exhausted, a reset on a conditional write it does not retry),
/// until a deadline, waiting a little longer each time.
struct TransientRetry {
    deadline: std::time::Instant,
}

impl TransientRetry {
    fn new(budget: Duration) -> TransientRetry {
        TransientRetry {
            deadline: std::time::Instant::now() + budget,
        }
    }

    async fn run<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut wait = Duration::from_millis(200);
        loop {
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) if std::time::Instant::now() + wait < self.deadline => {
                    tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "cannot {what} yet; retrying");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(2));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A held output lock.
#[derive(Debug)]
pub struct OutputLock {
    output: StoreUrl,
    record: LockRecord,
    revision: Revision,
    ttl: Duration,
    last_renewal: std::time::Instant,
}

impl OutputLock {
    /// Takes the lock on `output` for `ttl` (renewed by [`OutputLock::renew_if_due`]),
    /// or fails with [`EngineError::Conflict`] naming the live owner.
    /// The store's conditional writes are checked first
    /// ([`crate::conditional_writes::check`]): a store without them is refused.
    pub async fn acquire(output: &StoreUrl, ttl: Duration) -> Result<OutputLock> {
        let output = crate::conditional_writes::check(output).await?;
        Self::acquire_as(&output, ttl, Owner::me()).await
    }

    /// [`OutputLock::acquire`] for owner `me`.
    async fn acquire_as(output: &StoreUrl, ttl: Duration, me: Owner) -> Result<OutputLock> {
        let path = output.child(LOCK_PATH);
        let record = |t: u64| LockRecord {
            owner: me.clone(),
            renewed_at: t,
            expires_at: t + ttl.as_secs().max(1),
        };
        let encode = |r: &LockRecord| serde_json::to_vec_pretty(r).unwrap_or_default();
        // Transient store errors are retried for up to the lock's lifetime.
        let retry = TransientRetry::new(ttl.max(MIN_ACQUIRE_RETRY));
        // A few rounds: the lock may vanish or change between reading and replacing it.
        for _ in 0..5 {
            let mine = record(now());
            let created = retry
                .run("take the output lock", || {
                    output.put_if_absent(&path, encode(&mine))
                })
                .await?;
            if let Some(revision) = created {
                tracing::debug!(output = %output.url, "output lock taken");
                return Ok(OutputLock::held(output, mine, revision, ttl));
            }
            let read = retry
                .run("read the output lock", || output.get_revision(&path))
                .await?;
            let Some((bytes, revision)) = read else {
                continue; // released meanwhile
            };
            let takeover = match serde_json::from_slice::<LockRecord>(&bytes) {
                // A write of ours took effect though its answer was lost.
                Ok(held) if held.owner == me => {
                    tracing::debug!(output = %output.url, "output lock taken (an earlier try's answer was lost)");
                    return Ok(OutputLock::held(output, held, revision, ttl));
                }
                Err(e) => {
                    tracing::warn!(output = %output.url, error = %e, "unreadable output lock; taking it over");
                    true
                }
                Ok(held) if held.expires_at < now() => {
                    tracing::warn!(output = %output.url, previous = %held, "the output lock expired; taking it over");
                    true
                }
                Ok(held) if held.owner.is_gone_from_this_host() => {
                    tracing::warn!(output = %output.url, previous = %held, "the output lock's owner process is gone; taking it over");
                    true
                }
                Ok(held) => {
                    return Err(EngineError::Conflict(format!(
                        "{} is being written by another coordinator: {held}. Wait for it to \
                         finish; if it is dead, its lock ({}) lapses at its expiry time",
                        output.url,
                        output.display(&path)
                    )))
                }
            };
            if takeover {
                let mine = record(now());
                let replaced = retry
                    .run("take over the output lock", || {
                        output.replace_if(&path, &revision, encode(&mine))
                    })
                    .await?;
                if let Some(revision) = replaced {
                    return Ok(OutputLock::held(output, mine, revision, ttl));
                }
                // Not replaced: someone else's, or ours from a try whose answer was
                // lost; the next round reads it.
            }
        }
        Err(EngineError::Conflict(format!(
            "{}: cannot take the output lock ({}): it keeps changing; another coordinator \
             is starting on this output",
            output.url,
            output.display(&path)
        )))
    }

    /// The lock just written as `record` (at `revision`).
    fn held(
        output: &StoreUrl,
        record: LockRecord,
        revision: Revision,
        ttl: Duration,
    ) -> OutputLock {
        OutputLock {
            output: output.clone(),
            record,
            revision,
            ttl,
            last_renewal: std::time::Instant::now(),
        }
    }

    #[cfg(test)]
    pub fn record(&self) -> &LockRecord {
        &self.record
    }

    /// Renews the lock when a third of its lifetime has passed since the last renewal.
    /// An error means the lock was lost (taken over, or removed): the job must stop.
    pub async fn renew_if_due(&mut self) -> Result<()> {
        if self.last_renewal.elapsed() < self.ttl / 3 {
            return Ok(());
        }
        let t = now();
        let next = LockRecord {
            owner: self.record.owner.clone(),
            renewed_at: t,
            expires_at: t + self.ttl.as_secs().max(1),
        };
        let path = self.output.child(LOCK_PATH);
        let bytes = serde_json::to_vec_pretty(&next).unwrap_or_default();
        let replaced = match self.output.replace_if(&path, &self.revision, bytes).await {
            Ok(replaced) => replaced,
            // A storage hiccup: the lock is still ours until it expires; the next tick
            // tries again. Past the expiry another coordinator may hold it.
            Err(e) if t + 1 < self.record.expires_at => {
                tracing::warn!(error = %e, expires_at = self.record.expires_at, "cannot renew the output lock yet; retrying");
                return Ok(());
            }
            Err(e) => {
                return Err(EngineError::Conflict(format!(
                    "{}: could not renew the output lock before it expired ({e}). Stopping so \
                     that two coordinators never write one output",
                    self.output.url
                )))
            }
        };
        match replaced {
            Some(revision) => {
                self.revision = revision;
                self.record = next;
                self.last_renewal = std::time::Instant::now();
                Ok(())
            }
            None => {
                let held = match self.output.get_revision(&path).await {
                    Ok(held) => held,
                    Err(e) if t + 1 < self.record.expires_at => {
                        tracing::warn!(error = %e, expires_at = self.record.expires_at, "cannot read the output lock yet; retrying");
                        return Ok(());
                    }
                    Err(e) => return Err(e),
                };
                let record = held.as_ref().map(|(b, revision)| {
                    (serde_json::from_slice::<LockRecord>(b), revision.clone())
                });
                // Still ours: an earlier renewal took effect though its answer was
                // lost, so the revision this one named was already replaced.
                if let Some((Ok(mine), revision)) = &record {
                    if mine.owner == self.record.owner {
                        tracing::debug!("an output lock renewal's answer was lost; it took effect");
                        self.revision = revision.clone();
                        self.record = mine.clone();
                        self.last_renewal = std::time::Instant::now();
                        return Ok(());
                    }
                }
                let now_held = match record {
                    Some((Ok(r), _)) => r.to_string(),
                    Some((Err(_), _)) => "an unreadable lock".into(),
                    None => "nobody (the lock was removed)".into(),
                };
                Err(EngineError::Conflict(format!(
                    "{}: lost the output lock; it is now held by {now_held}. Stopping so that \
                     two coordinators never write one output",
                    self.output.url
                )))
            }
        }
    }

    /// Removes the lock if it still holds our record. Ours is recognised by its owner,
    /// not its revision: a renewal the store applied but whose answer was lost leaves
    /// our record at a revision this lock never saw. Transient store errors are retried
    /// for a while; a lock that cannot be removed is only a warning (it lapses at its
    /// expiry), never a failed job.
    pub async fn release(self) {
        let path = self.output.child(LOCK_PATH);
        let retry = TransientRetry::new(MIN_ACQUIRE_RETRY);
        let held = match retry
            .run("read the output lock", || self.output.get_revision(&path))
            .await
        {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the output lock; it lapses at its expiry");
                return;
            }
        };
        let Some((bytes, _)) = held else {
            return;
        };
        match serde_json::from_slice::<LockRecord>(&bytes) {
            Ok(record) if record.owner == self.record.owner => {
                if let Err(e) = retry
                    .run("remove the output lock", || self.output.delete(&path))
                    .await
                {
                    tracing::warn!(error = %e, "cannot remove the output lock; it lapses at its expiry");
                }
            }
            _ => {
                tracing::warn!(output = %self.output.url, "the output lock is no longer ours; left in place")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, StoreUrl) {
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::parse(&dir.path().display().to_string()).unwrap();
        (dir, url)
    }

    #[tokio::test]
    async fn a_second_owner_is_refused_while_the_first_lives() {
        let (_d, out) = store();
        let first = OutputLock::acquire(&out, Duration::from_secs(60))
            .await
            .unwrap();
        let err = OutputLock::acquire(&out, Duration::from_secs(60))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("another coordinator")
                && err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        first.release().await;
        let again = OutputLock::acquire(&out, Duration::from_secs(60))
            .await
            .unwrap();
        again.release().await;
    }

    #[tokio::test]
    async fn a_storage_error_while_renewing_is_retried_until_the_lock_expires() {
        let (dir, out) = store();
        let ttl = Duration::from_secs(60);
        let mut lock = OutputLock::acquire(&out, ttl).await.unwrap();
        // The local compare-and-swap's guard file cannot be opened: an I/O error.
        let guard = dir.path().join("_job").join("lock.guard");
        let _ = std::fs::remove_file(&guard);
        std::fs::create_dir(&guard).unwrap();
        lock.last_renewal = std::time::Instant::now() - ttl;
        lock.renew_if_due().await.unwrap();
        assert!(lock.last_renewal.elapsed() >= ttl, "not renewed yet");
        // Storage is back: the next tick renews.
        std::fs::remove_dir(&guard).unwrap();
        lock.renew_if_due().await.unwrap();
        assert!(lock.last_renewal.elapsed() < ttl);
        // Still failing when the lock expires: lost.
        std::fs::remove_file(&guard).unwrap();
        std::fs::create_dir(&guard).unwrap();
        lock.last_renewal = std::time::Instant::now() - ttl;
        lock.record.expires_at = now();
        let e = lock.renew_if_due().await.unwrap_err().to_string();
        assert!(
            e.contains("could not renew the output lock before it expired"),
            "{e}"
        );
    }

    /// Replaces the lock object (at `revision`) with `record`, as another write would.
    async fn overwrite(out: &StoreUrl, revision: &Revision, record: &LockRecord) {
        let bytes = serde_json::to_vec_pretty(record).unwrap();
        out.replace_if(&out.child(LOCK_PATH), revision, bytes)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_renewal_whose_answer_was_lost_is_recognised_as_ours() {
        let (_d, out) = store();
        let ttl = Duration::from_secs(60);
        let mut lock = OutputLock::acquire(&out, ttl).await.unwrap();
        // A renewal the store applied but whose answer never came back: the lock holds
        // our next record at a revision this lock does not know.
        let mut applied = lock.record.clone();
        applied.renewed_at += 1;
        applied.expires_at += 1;
        overwrite(&out, &lock.revision, &applied).await;
        lock.last_renewal = std::time::Instant::now() - ttl;
        lock.renew_if_due().await.unwrap();
        assert_eq!(lock.record, applied);
        // And the renewal after it goes through with the adopted revision.
        lock.last_renewal = std::time::Instant::now() - ttl;
        lock.renew_if_due().await.unwrap();
        assert!(lock.last_renewal.elapsed() < ttl);
        // Another owner's record is still a lost lock.
        let mut other = lock.record.clone();
        other.owner.run = "someone-else".into();
        overwrite(&out, &lock.revision, &other).await;
        lock.last_renewal = std::time::Instant::now() - ttl;
        let e = lock.renew_if_due().await.unwrap_err().to_string();
        assert!(e.contains("lost the output lock"), "{e}");
    }

    #[tokio::test]
    async fn releasing_after_a_renewal_whose_answer_was_lost_removes_the_lock() {
        let (_d, out) = store();
        let ttl = Duration::from_secs(60);
        let lock = OutputLock::acquire(&out, ttl).await.unwrap();
        // The last renewal took effect on the store but its answer never came back.
        let mut applied = lock.record.clone();
        applied.renewed_at += 1;
        applied.expires_at += 1;
        overwrite(&out, &lock.revision, &applied).await;
        lock.release().await;
        assert!(
            out.get_revision(&out.child(LOCK_PATH))
                .await
                .unwrap()
                .is_none(),
            "our own lock was left behind"
        );
    }

    #[tokio::test]
    async fn releasing_leaves_another_owners_lock_in_place() {
        let (_d, out) = store();
        let lock = OutputLock::acquire(&out, Duration::from_secs(60))
            .await
            .unwrap();
        let mut other = lock.record.clone();
        other.owner.run = "someone-else".into();
        overwrite(&out, &lock.revision, &other).await;
        lock.release().await;
        let (bytes, _) = out
            .get_revision(&out.child(LOCK_PATH))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(serde_json::from_slice::<LockRecord>(&bytes).unwrap(), other);
    }

    #[tokio::test]
    async fn taking_a_lock_that_already_holds_our_own_record_takes_it() {
        let (_d, out) = store();
        let path = out.child(LOCK_PATH);
        // A try of ours created the lock, but its answer was lost.
        let t = now();
        let ours = LockRecord {
            owner: Owner::me(),
            renewed_at: t,
            expires_at: t + 60,
        };
        out.put_if_absent(&path, serde_json::to_vec_pretty(&ours).unwrap())
            .await
            .unwrap()
            .unwrap();
        let lock = OutputLock::acquire_as(&out, Duration::from_secs(60), ours.owner.clone())
            .await
            .unwrap();
        assert_eq!(lock.record, ours);
        // Another run of this process (another run id), alive on this host, is refused.
        let e = OutputLock::acquire(&out, Duration::from_secs(60))
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("being written by another coordinator"), "{e}");
    }

    #[tokio::test]
    async fn an_expired_or_orphaned_lock_is_taken_over_and_the_old_owner_loses_it() {
        let (_d, out) = store();
        let path = out.child(LOCK_PATH);
        // Expired, held by another host.
        let stale = LockRecord {
            owner: Owner {
                host: "elsewhere".into(),
                pid: 1,
                process_start: None,
                since: 1,
                run: "x".into(),
            },
            renewed_at: 1,
            expires_at: 2,
        };
        out.put(&path, serde_json::to_vec(&stale).unwrap())
            .await
            .unwrap();
        let mut taken = OutputLock::acquire(&out, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(taken.record().owner.pid, std::process::id());
        // A live lock of a process on this host that is gone: taken at once.
        let gone = LockRecord {
            owner: Owner {
                host: hostname(),
                pid: u32::MAX - 7,
                process_start: Some(1),
                since: 1,
                run: "y".into(),
            },
            renewed_at: now(),
            expires_at: now() + 3600,
        };
        out.put(&path, serde_json::to_vec(&gone).unwrap())
            .await
            .unwrap();
        let other = OutputLock::acquire(&out, Duration::from_secs(60))
            .await
            .unwrap();
        // The first holder's renewal now fails: it must stop.
        taken.last_renewal -= Duration::from_secs(30);
        let err = taken.renew_if_due().await.unwrap_err().to_string();
        assert!(err.contains("lost the output lock"), "{err}");
        other.release().await;
        assert!(!out.exists(&path).await.unwrap());
    }

    #[test]
    fn this_process_is_alive_and_its_start_time_is_known() {
        let me = Owner::me();
        assert!(me.process_start.is_some());
        assert!(!me.is_gone_from_this_host());
    }
}
