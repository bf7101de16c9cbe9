//! What the coordinator serves an operator while it runs a job: its monitor
//! ([`crate::monitor`]) behind the read-only HTTP listener of `[run] http`, with its
//! readiness (the journal replayed, the output lock held, the workers' port bound) and
//! its liveness (the actor stepped within [`LIVENESS_LIMIT`]; never the job's progress
//! or the store, so a slow job is not killed). After the job the listener serves on for
//! `[run] http_linger_seconds`, so that the last scrape sees how the job ended.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use crate::coordinator::spec::JobSpec;
use crate::error::Result;
use crate::monitor::http::{self, Check, Endpoints};
use crate::monitor::metrics::{self, JobCollector, ProcessCollector};
use crate::monitor::{JobMonitor, JobState, Monitor};

/// The coordinator is live while its actor has stepped within this (it steps at least
/// every half second).
pub const LIVENESS_LIMIT: Duration = Duration::from_secs(2);

/// What readiness waits for, set as the run gets there.
#[derive(Default)]
pub struct Readiness {
    pub journal: AtomicBool,
    pub output_lock: AtomicBool,
    pub workers_port: AtomicBool,
}

impl Readiness {
    fn flag(flag: &AtomicBool, not_yet: &'static str) -> std::result::Result<(), String> {
        if flag.load(Ordering::Relaxed) {
            Ok(())
        } else {
            Err(not_yet.into())
        }
    }
}

/// The monitor and, with `[run] http`, its listener.
pub struct Watch {
    pub monitor: Monitor,
    pub ready: Arc<Readiness>,
    server: Option<(watch::Sender<bool>, tokio::task::JoinHandle<()>)>,
    linger: Duration,
}

/// Whether the monitor says the actor is live: planning (no actor yet), finishing or
/// ended (the actor may be writing the final outputs), or stepped lately.
fn actor_live(monitor: &Monitor) -> std::result::Result<(), String> {
    let m = monitor.lock();
    if m.state == JobState::Planning || m.state.is_over() || m.finishing {
        return Ok(());
    }
    let age = SystemTime::now()
        .duration_since(m.actor_stepped)
        .unwrap_or_default();
    if age <= LIVENESS_LIMIT {
        Ok(())
    } else {
        Err(format!(
            "the coordinator actor has not stepped for {:.1} s",
            age.as_secs_f64()
        ))
    }
}

impl Watch {
    /// The monitor of `spec`'s job, and its listener bound (a port in use fails here,
    /// before the output is touched).
    pub async fn start(spec: &JobSpec) -> Result<Watch> {
        let monitor = Monitor::new(JobMonitor::new(
            spec.kind.name(),
            spec.output_url(),
            SystemTime::now(),
        ));
        let ready = Arc::new(Readiness::default());
        let server = match spec.run.http {
            None => None,
            Some(addr) => {
                let listener = http::bind(addr).await?;
                let bound = listener.local_addr().unwrap_or(addr);
                tracing::info!(%bound, "serving /metrics, /livez, /readyz and the status page (http://{bound}/)");
                let endpoints = Arc::new(endpoints(&monitor, &ready));
                let (stop, stopped) = watch::channel(false);
                let task = tokio::spawn(http::serve(listener, endpoints, stopped));
                Some((stop, task))
            }
        };
        Ok(Watch {
            monitor,
            ready,
            server,
            linger: spec.run.http_linger,
        })
    }

    /// After the job: serves on for the linger (when there is a listener), then stops.
    pub async fn stop(self) {
        let Some((stop, task)) = self.server else {
            return;
        };
        if !self.linger.is_zero() {
            tracing::info!(
                seconds = self.linger.as_secs_f64(),
                "the job has ended; serving its metrics and status a while longer ([run] http_linger_seconds)"
            );
            tokio::time::sleep(self.linger).await;
        }
        let _ = stop.send(true);
        let _ = task.await;
    }
}

fn endpoints(monitor: &Monitor, ready: &Arc<Readiness>) -> Endpoints {
    let live = monitor.clone();
    let (journal, lock, port) = (ready.clone(), ready.clone(), ready.clone());
    Endpoints {
        registry: metrics::registry(vec![
            Box::new(ProcessCollector),
            Box::new(JobCollector(monitor.clone())),
        ]),
        live: vec![Check::new("actor", move || actor_live(&live))],
        ready: vec![
            Check::new("journal", move || {
                Readiness::flag(&journal.journal, "the journal is not replayed yet")
            }),
            Check::new("output_lock", move || {
                Readiness::flag(&lock.output_lock, "the output lock is not held")
            }),
            Check::new("workers_port", move || {
                Readiness::flag(&port.workers_port, "the workers' port is not bound yet")
            }),
        ],
        monitor: Some(monitor.clone()),
    }
}
