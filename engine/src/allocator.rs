//! The memory allocator's settings for the processes that run tasks (the coordinator in
//! local mode, and workers): set once at start, before the async runtime's threads, and
//! consulted when each task ends.
//!
//! On glibc (Linux):
//! - freed memory stays in the heap instead of going back to the kernel (mmap threshold
//!   32 MiB, trim threshold 1 GiB): tasks allocate and free batch-sized buffers
//!   continuously, and faulting fresh pages in cost more than the work on them (437k
//!   page faults, 4.5 s of system time on 20M rows);
//! - at most one malloc arena per task that runs at once (at least two). glibc's default
//!   is eight per core, a thread that allocates under contention gets its own, and with
//!   the heap kept, every arena keeps the high-water mark of the tasks that used it;
//! - when a task ends and the process holds more than its tasks' memory settings, the
//!   heap's free memory goes back to the kernel (`malloc_trim`). Below the settings
//!   nothing is given back, so a process within its budget pays no page faults for it.
//!
//! A local job with `memory_per_worker = "256MiB"` and one worker peaked at 354–422 MiB,
//! each reduce growing the heap past the last (tests/e2e/test_bounded_map.py); with these
//! settings it peaks at 274–288 MiB. Elsewhere the platform's allocator runs as it is.

use std::sync::atomic::{AtomicU64, Ordering};

/// The least number of malloc arenas: the runtime's own threads allocate too.
const MIN_ARENAS: usize = 2;

/// The memory the process's tasks may use together (0: not set, never trimmed).
static BUDGET: AtomicU64 = AtomicU64::new(0);

/// Sets the allocator up for a process that runs `parallel_tasks` tasks at once, each
/// with `memory_per_task` bytes. Call it first thing in `main`, before any thread starts.
pub fn tune(parallel_tasks: usize, memory_per_task: u64) {
    let arenas = parallel_tasks.max(MIN_ARENAS);
    BUDGET.store(
        memory_per_task.saturating_mul(parallel_tasks as u64),
        Ordering::Relaxed,
    );
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc allocator parameters; called before any other
    // thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_ARENA_MAX, arenas.min(i32::MAX as usize) as i32);
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = arenas;
}

/// Called when a task ends: if the process's resident memory exceeds its tasks' budget,
/// returns the free memory of every arena to the kernel, so that the next task starts
/// from what the process really holds, not from the high-water mark of those before it.
pub fn release_freed() {
    let budget = BUDGET.load(Ordering::Relaxed);
    if budget == 0 || resident_bytes().is_none_or(|rss| rss <= budget) {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap memory to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The process's resident memory (Linux: `/proc/self/statm`), if known.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn the_resident_memory_is_read_and_grows_with_what_is_touched() {
        let before = resident_bytes().unwrap();
        // black_box: an optimized build would otherwise never allocate it.
        let touched = std::hint::black_box(vec![1u8; 64 << 20]);
        let after = resident_bytes().unwrap();
        assert!(after >= before + (48 << 20), "{before} → {after}");
        drop(touched);
    }
}
