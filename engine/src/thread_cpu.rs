//! The CPU time of the calling thread, for per-task CPU figures in the logs.
//!
//! A task's wall time on a shared machine includes the time other processes held its
//! core; its thread's CPU time does not, so benchmarks compare that with other
//! programs' CPU time. A job kind that runs a task on one blocking thread starts a
//! [`ThreadCpuTimer`] there and logs [`ThreadCpuTimer::elapsed_ms`] when it ends.

use std::time::Duration;

/// The CPU time the calling thread has used (`None` where the platform has no
/// per-thread clock).
pub fn thread_cpu_time() -> Option<Duration> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// CPU time of the calling thread since [`ThreadCpuTimer::start`] (read it on the
/// same thread).
pub struct ThreadCpuTimer(Option<Duration>);

impl ThreadCpuTimer {
    pub fn start() -> Self {
        ThreadCpuTimer(thread_cpu_time())
    }

    /// Milliseconds of CPU time since the start (`None` without a per-thread clock).
    pub fn elapsed_ms(&self) -> Option<u64> {
        Some(thread_cpu_time()?.saturating_sub(self.0?).as_millis() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_work_counts_and_sleep_does_not() {
        let timer = ThreadCpuTimer::start();
        std::thread::sleep(Duration::from_millis(200));
        let slept = timer.elapsed_ms().unwrap();
        assert!(slept < 100, "slept 200 ms, counted {slept} ms of CPU");
        // Spin until the clock shows 50 ms more: it must advance, and one thread
        // cannot use more CPU time than the wall time that passed.
        let wall = std::time::Instant::now();
        let mut x = 0u64;
        let busy = loop {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            let busy = timer.elapsed_ms().unwrap() - slept;
            if busy >= 50 {
                break busy;
            }
            assert!(
                wall.elapsed() < Duration::from_secs(30),
                "the thread's CPU clock did not advance"
            );
        };
        assert!(
            busy <= wall.elapsed().as_millis() as u64 + 1,
            "{busy} ms of CPU"
        );
    }
}
