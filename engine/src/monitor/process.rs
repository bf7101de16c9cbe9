//! The standard process metrics of Prometheus' client libraries
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! `process_start_time_seconds`, `process_open_fds`), read from the kernel: CPU time
//! from `getrusage`, memory from `/proc/self/statm`, descriptors from `/proc/self/fd`.

use std::sync::OnceLock;
use std::time::SystemTime;

/// When this process first asked (the binaries ask as they start).
static STARTED: OnceLock<f64> = OnceLock::new();

/// Unix seconds at which this process started (the first call's time: call it early).
pub fn start_time() -> f64 {
    *STARTED.get_or_init(|| {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    })
}

/// This process's facts now; a figure the kernel does not give is absent.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessFacts {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub open_fds: Option<u64>,
}

pub fn facts() -> ProcessFacts {
    ProcessFacts {
        cpu_seconds: cpu_seconds(),
        resident_bytes: resident_bytes(),
        open_fds: std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as u64),
    }
}

fn cpu_seconds() -> Option<f64> {
    // SAFETY: getrusage writes one rusage struct into the zeroed one it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return None;
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(seconds(usage.ru_utime) + seconds(usage.ru_stime))
}

/// The second field of `/proc/self/statm` (resident pages) times the page size.
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
    fn the_process_facts_are_read_and_plausible() {
        let f = facts();
        assert!(f.cpu_seconds.is_some_and(|c| c >= 0.0));
        assert!(f.resident_bytes.is_some_and(|r| r > 1 << 20), "{f:?}");
        assert!(f.open_fds.is_some_and(|n| n >= 3), "{f:?}");
        assert!(start_time() > 1.7e9);
    }
}
