//! Local scratch space of one job run on one worker: where reduce tasks stage shards and
//! spill sorted runs, isolated from every other job and run on the machine.
//!
//! ```text
//! <scratch root>/<job id (16 hex)>-<pid>-<nanos>-<n>/   created exclusively (create_dir)
//!     .owner            held under an exclusive file lock while the run is alive
//!                       (created as .owner-unlocked, renamed once locked)
//!     reduce-PPPPP-aA/  one task attempt's files
//! ```
//!
//! The job id is the job's fingerprint, so two jobs never share a directory whatever
//! their settings, and two runs of the same job (two worker actors, two processes, a
//! restart) get distinct ones. When a run starts it removes the directories of its own
//! job whose lock nobody holds (a run that crashed); it never touches another job's.
//! An owner file is only ever seen by that name locked or orphaned, never while its run
//! is between creating and locking it; a run cut off in that moment leaves an empty
//! hidden directory, which stays.
//! Dropping the [`JobScratch`] removes its directory.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{EngineError, Result, ScratchFull};
use crate::units::format_bytes;

const OWNER_FILE: &str = ".owner";

/// The owner file's name from its creation until it is locked (then renamed to
/// [`OWNER_FILE`]).
const OWNER_FILE_UNLOCKED: &str = ".owner-unlocked";

/// Distinguishes the runs one process starts in the same nanosecond.
static RUNS: AtomicU64 = AtomicU64::new(0);

fn scratch_err(path: &Path, source: std::io::Error) -> EngineError {
    EngineError::Scratch {
        path: path.display().to_string(),
        source,
    }
}

/// The first 16 characters of the job id: enough to tell jobs apart, short in paths.
fn prefix(job_id: &str) -> String {
    let clean: String = job_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(16)
        .collect();
    if clean.is_empty() {
        "job".into()
    } else {
        clean
    }
}

/// One job run's scratch directory, removed when dropped.
#[derive(Debug)]
pub struct JobScratch {
    job_id: String,
    dir: PathBuf,
    /// Holds the exclusive lock on `.owner` for as long as the run lives.
    _owner: File,
}

impl JobScratch {
    /// Creates a fresh directory for a run of job `job_id` under `root` (created if
    /// missing) and removes stale directories of the same job.
    pub fn create(root: &Path, job_id: &str) -> Result<JobScratch> {
        std::fs::create_dir_all(root).map_err(|e| scratch_err(root, e))?;
        let job = prefix(job_id);
        remove_stale(root, &job);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!(
            "{job}-{}-{nanos}-{}",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::Relaxed)
        );
        // Set up (owner locked) under a hidden name, then renamed into view, so that a
        // run cleaning up never sees this directory without its lock held.
        let staging = root.join(format!(".{name}"));
        // Exclusive: an existing directory is an error, never shared.
        std::fs::create_dir(&staging).map_err(|e| scratch_err(&staging, e))?;
        // The owner file takes its name only once locked: a run cleaning up takes an
        // owner file it can lock for a crashed run's, so it must never see one that is
        // created but not yet locked.
        let unlocked = staging.join(OWNER_FILE_UNLOCKED);
        let owner = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&unlocked)
            .map_err(|e| scratch_err(&unlocked, e))?;
        owner.try_lock().map_err(|e| {
            scratch_err(
                &unlocked,
                std::io::Error::other(format!("cannot lock a fresh scratch directory: {e}")),
            )
        })?;
        let owner_path = staging.join(OWNER_FILE);
        std::fs::rename(&unlocked, &owner_path).map_err(|e| scratch_err(&owner_path, e))?;
        let dir = root.join(&name);
        std::fs::rename(&staging, &dir).map_err(|e| scratch_err(&dir, e))?;
        Ok(JobScratch {
            job_id: job_id.to_string(),
            dir,
            _owner: owner,
        })
    }

    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// The scratch of job `job_id` kept in `slot`: the one there if it is this job's,
    /// else a new one (the previous job's is removed first).
    pub fn for_job<'s>(
        slot: &'s mut Option<JobScratch>,
        root: &Path,
        job_id: &str,
    ) -> Result<&'s JobScratch> {
        if slot.as_ref().is_none_or(|s| s.job_id != job_id) {
            *slot = None;
            *slot = Some(JobScratch::create(root, job_id)?);
        }
        slot.as_ref().ok_or_else(|| {
            scratch_err(root, std::io::Error::other("scratch directory not created"))
        })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// A fresh, empty directory for one task attempt inside this run's scratch.
    pub fn task_dir(&self, name: &str) -> Result<TaskDir> {
        let dir = self.dir.join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| scratch_err(&dir, e))?;
        }
        std::fs::create_dir(&dir).map_err(|e| scratch_err(&dir, e))?;
        Ok(TaskDir { path: dir })
    }
}

/// One task attempt's scratch directory, removed when dropped. A task that fails
/// because the disk filled gets its error explained here, while its files are still
/// there to be measured ([`TaskDir::explain_full_disk`]).
#[derive(Debug)]
pub struct TaskDir {
    path: PathBuf,
}

impl TaskDir {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `e` as a [`EngineError::ScratchFull`] when a full disk (ENOSPC) caused it,
    /// naming this directory, its filesystem's free and total space, what the task
    /// had written here and `need` (what the task needs, in words); else `e`.
    pub fn explain_full_disk(&self, e: EngineError, need: impl FnOnce() -> String) -> EngineError {
        if !is_disk_full(&e) {
            return e;
        }
        let (free, total) = filesystem_space(&self.path).map_or_else(
            || ("unknown".to_string(), "unknown".to_string()),
            |(free, total)| (format_bytes(free), format_bytes(total)),
        );
        EngineError::ScratchFull(Box::new(ScratchFull {
            dir: self.path.display().to_string(),
            free,
            total,
            written: format_bytes(bytes_under(&self.path)),
            need: need(),
            cause: e.to_string(),
        }))
    }
}

impl Drop for TaskDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Whether `e` comes from a full disk: an `ENOSPC` anywhere in its chain of causes, or
/// in its text (libraries that keep only the message).
fn is_disk_full(e: &EngineError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::StorageFull || io.raw_os_error() == Some(28) {
                return true;
            }
        }
        cause = c.source();
    }
    e.to_string().contains("No space left on device")
}

/// (free, total) bytes of the filesystem holding `path`.
fn filesystem_space(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the zeroed struct it is given; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &mut st) };
    (rc == 0).then(|| {
        let unit = st.f_frsize as u64;
        (st.f_bavail as u64 * unit, st.f_blocks as u64 * unit)
    })
}

/// Bytes of the files under `dir` (what is there now; unreadable entries count 0).
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&entry.path()),
            Ok(_) => entry.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

impl Drop for JobScratch {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot remove scratch directory");
        }
    }
}

/// Removes `root/<job>-*` directories (and `.<job>-*` ones cut off while being set up)
/// whose owner lock can be taken: their run ended without cleaning up. Best effort: a
/// directory that cannot be inspected stays.
fn remove_stale(root: &Path, job: &str) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let mine = format!("{job}-");
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let ours =
            name.starts_with(&mine) || name.strip_prefix('.').is_some_and(|n| n.starts_with(&mine));
        if !ours || !entry.path().is_dir() {
            continue;
        }
        let owner = entry.path().join(OWNER_FILE);
        // Locked by a live run: not stale. A directory without an owner file is being
        // set up (or was cut off then): left alone.
        // The lock is held until the directory is gone: no other run removes it too.
        let stale = File::open(&owner).ok().filter(|f| f.try_lock().is_ok());
        if let Some(_held) = stale {
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => {
                    tracing::info!(dir = %entry.path().display(), "removed a stale scratch directory of this job")
                }
                Err(e) => {
                    tracing::warn!(dir = %entry.path().display(), error = %e, "cannot remove a stale scratch directory")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_get_their_own_directories_and_remove_them() {
        let root = tempfile::tempdir().unwrap();
        let a = JobScratch::create(root.path(), "aaaaaaaaaaaaaaaaaaaa").unwrap();
        let b = JobScratch::create(root.path(), "aaaaaaaaaaaaaaaaaaaa").unwrap();
        let c = JobScratch::create(root.path(), "bbbbbbbbbbbbbbbbbbbb").unwrap();
        assert_ne!(a.path(), b.path());
        assert!(a.path().starts_with(root.path()));
        let t = a.task_dir("reduce-00000-a1").unwrap();
        std::fs::write(t.path().join("x"), b"1").unwrap();
        // The same name again starts empty.
        let t = a.task_dir("reduce-00000-a1").unwrap();
        assert!(!t.path().join("x").exists());
        let (pa, pb, pc) = (
            a.path().to_owned(),
            b.path().to_owned(),
            c.path().to_owned(),
        );
        drop(a);
        assert!(!pa.exists());
        assert!(pb.exists() && pc.exists(), "a live run's directory stays");
    }

    #[test]
    fn a_full_disk_is_explained_with_the_directory_and_what_was_written() {
        let root = tempfile::tempdir().unwrap();
        let run = JobScratch::create(root.path(), "cccccccccccccccccccc").unwrap();
        let t = run.task_dir("reduce-00003-a1").unwrap();
        std::fs::create_dir(t.path().join("sort")).unwrap();
        std::fs::write(t.path().join("sort").join("run-00000"), vec![0u8; 3000]).unwrap();
        std::fs::write(t.path().join("train.array_record"), vec![0u8; 100]).unwrap();
        let enospc = || std::io::Error::from_raw_os_error(28);
        // Wherever the ENOSPC is: our own error, Arrow's.
        for e in [
            EngineError::Scratch {
                path: "x".into(),
                source: enospc(),
            },
            EngineError::Arrow(arrow::error::ArrowError::IoError("spill".into(), enospc())),
        ] {
            let explained = t.explain_full_disk(e, || "it sorts 10 rows".into());
            let EngineError::ScratchFull(full) = &explained else {
                panic!("{explained:?}")
            };
            assert_eq!(full.dir, t.path().display().to_string());
            assert_eq!(full.written, "3.0 KiB");
            let text = explained.to_string();
            assert!(
                text.contains("No space left on device")
                    && text.contains(" free of ")
                    && text.contains("it sorts 10 rows"),
                "{text}"
            );
        }
        // Anything else is left as it is.
        let other = t.explain_full_disk(EngineError::Internal("no".into()), || unreachable!());
        assert!(matches!(other, EngineError::Internal(_)));
        // The directory goes with the TaskDir.
        let dir = t.path().to_owned();
        drop(t);
        assert!(!dir.exists());
    }

    #[test]
    fn stale_directories_of_the_same_job_go_and_other_jobs_stay() {
        let root = tempfile::tempdir().unwrap();
        // Crashed runs of job a (no lock held; one cut off while being set up), one of
        // job b.
        let crashed = root.path().join("aaaaaaaaaaaaaaaa-1-2-0");
        std::fs::create_dir(&crashed).unwrap();
        std::fs::write(crashed.join(OWNER_FILE), b"").unwrap();
        let half = root.path().join(".aaaaaaaaaaaaaaaa-1-3-0");
        std::fs::create_dir(&half).unwrap();
        std::fs::write(half.join(OWNER_FILE), b"").unwrap();
        let other = root.path().join("bbbbbbbbbbbbbbbb-1-2-0");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join(OWNER_FILE), b"").unwrap();
        let live = JobScratch::create(root.path(), "aaaaaaaaaaaaaaaaZZ").unwrap();
        let again = JobScratch::create(root.path(), "aaaaaaaaaaaaaaaaZZ").unwrap();
        assert!(!crashed.exists() && !half.exists());
        assert!(other.exists(), "another job's directory is never touched");
        assert!(live.path().exists(), "a live run (lock held) is not stale");
        drop(again);
    }

    /// Runs of one job starting at once (worker actors of one process, worker processes
    /// sharing a scratch root) each get their directory: none removes another's while
    /// it is being set up. (A run used to take a fresh directory's owner file, created
    /// but not yet locked, for a crashed run's and remove it: the task failed with
    /// "cannot lock a fresh scratch directory" or a missing directory, and ran again.)
    #[test]
    fn runs_of_one_job_starting_at_once_never_remove_each_other() {
        let root = tempfile::tempdir().unwrap();
        let threads = 8;
        let barrier = std::sync::Barrier::new(threads);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    barrier.wait();
                    for i in 0..300 {
                        let run = JobScratch::create(root.path(), "dddddddddddddddd")
                            .unwrap_or_else(|e| panic!("run {i}: {e}"));
                        assert!(run.path().join(OWNER_FILE).exists(), "run {i}");
                        let task = run.task_dir("reduce-00000-a1").unwrap();
                        assert!(task.path().exists());
                    }
                });
            }
        });
        let left: Vec<_> = std::fs::read_dir(root.path()).unwrap().flatten().collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
