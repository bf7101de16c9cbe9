//! Fault injection for the end-to-end tests: a worker that misbehaves on purpose.
//!
//! Faults are chosen with `PROBEFLOW_FAULT` and exist only in builds with the
//! `fault-injection` cargo feature (the test builds). In other builds [`Faults`] is
//! empty, every hook is a no-op, and a set `PROBEFLOW_FAULT` is an error: a release
//! worker cannot be made to misbehave.
//!
//! * `park-before-report`: after a task's outputs are written, wait forever instead of
//!   reporting (a test kills the worker "while reporting");
//! * `slow-report:<ms>`: keep heartbeating for `<ms>` before reporting (a task longer
//!   than the lease);
//! * `scratch-full`: every task fails as if the scratch disk were full (ENOSPC);
//! * `forge-results`: report results the coordinator must refuse: for a lease this
//!   worker does not hold, and for its own lease with paths it was not given;
//! * `simulate-tasks`: do no work, report the result the job kind would give a task
//!   of that shape (the scale simulation drives the real scheduler, journal and
//!   transport with tens of thousands of tasks this way).

use crate::error::{EngineError, Result};

/// What a kind's runner does under the faults that need the kind (test builds only: the
/// trait exists only with the `fault-injection` feature, so a release build of a kind
/// carries no fault code). Every kind's runner implements it in test builds, under its
/// own `fault-injection` feature.
#[cfg(feature = "fault-injection")]
pub trait FaultHooks<K: crate::kind::Kind> {
    /// `simulate-tasks`: the result this task would give, without doing its work
    /// (`None`: the kind cannot simulate).
    fn simulated(&self, _call: crate::kind::TaskCall<'_, K>) -> Option<crate::kind::Output<K>> {
        None
    }
    /// `forge-results`: the result with paths this attempt was not given. The default
    /// forges nothing.
    fn forged(
        &self,
        _call: crate::kind::TaskCall<'_, K>,
        output: crate::kind::Output<K>,
    ) -> crate::kind::Output<K> {
        output
    }
}

/// The environment variable that names the fault.
pub const FAULT_ENV: &str = "PROBEFLOW_FAULT";

/// One injected fault.
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InjectedFault {
    ParkBeforeReport,
    SlowReport(std::time::Duration),
    ScratchFull,
    ForgeResults,
    SimulateTasks,
}

/// The faults this worker injects (none in builds without `fault-injection`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    #[cfg(feature = "fault-injection")]
    fault: Option<InjectedFault>,
}

impl Faults {
    /// No fault.
    pub fn none() -> Faults {
        Faults::default()
    }

    /// The fault `PROBEFLOW_FAULT` names, if any.
    pub fn from_env() -> Result<Faults> {
        match std::env::var(FAULT_ENV).as_deref() {
            Err(_) | Ok("") => Ok(Faults::none()),
            Ok(name) => Faults::parse(name),
        }
    }

    #[cfg(feature = "fault-injection")]
    fn parse(name: &str) -> Result<Faults> {
        let fault = match name {
            "park-before-report" => InjectedFault::ParkBeforeReport,
            "scratch-full" => InjectedFault::ScratchFull,
            "forge-results" => InjectedFault::ForgeResults,
            "simulate-tasks" => InjectedFault::SimulateTasks,
            other => match other
                .strip_prefix("slow-report:")
                .and_then(|ms| ms.parse().ok())
            {
                Some(ms) => InjectedFault::SlowReport(std::time::Duration::from_millis(ms)),
                None => {
                    return Err(EngineError::Cluster(format!(
                        "{FAULT_ENV}={other:?}: the faults are park-before-report, \
                         slow-report:<ms>, scratch-full, forge-results and simulate-tasks"
                    )))
                }
            },
        };
        Ok(Faults { fault: Some(fault) })
    }

    #[cfg(not(feature = "fault-injection"))]
    fn parse(name: &str) -> Result<Faults> {
        Err(EngineError::Cluster(format!(
            "{FAULT_ENV}={name:?}: this build has no fault injection (a test-only feature)"
        )))
    }

    /// The injected fault, if any.
    #[cfg(feature = "fault-injection")]
    pub fn get(&self) -> Option<InjectedFault> {
        self.fault
    }

    /// Before a task runs: `scratch-full` fails it as a full disk would.
    pub fn before_task(&self, _scratch: &std::path::Path) -> Result<()> {
        #[cfg(feature = "fault-injection")]
        if self.fault == Some(InjectedFault::ScratchFull) {
            return Err(EngineError::Scratch {
                path: _scratch.display().to_string(),
                source: std::io::Error::from_raw_os_error(28), // ENOSPC
            });
        }
        Ok(())
    }

    /// After a task's outputs are written, before its heartbeats stop and it reports:
    /// `slow-report` waits, `park-before-report` waits forever.
    pub async fn before_report(&self) {
        #[cfg(feature = "fault-injection")]
        match self.fault {
            Some(InjectedFault::SlowReport(d)) => {
                tracing::warn!(ms = d.as_millis() as u64, "fault injection: slow report");
                tokio::time::sleep(d).await;
            }
            Some(InjectedFault::ParkBeforeReport) => {
                tracing::warn!("fault injection: parked before reporting");
                std::future::pending::<()>().await;
            }
            _ => {}
        }
    }

    /// Whether this worker simulates its tasks instead of running them
    /// (`simulate-tasks`).
    #[cfg(feature = "fault-injection")]
    pub fn simulates_tasks(&self) -> bool {
        self.fault == Some(InjectedFault::SimulateTasks)
    }

    /// Whether this worker forges results (`forge-results`).
    #[cfg(feature = "fault-injection")]
    pub fn forges_results(&self) -> bool {
        self.fault == Some(InjectedFault::ForgeResults)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_faults_are_errors() {
        let e = Faults::parse("crash").unwrap_err().to_string();
        assert!(e.contains(FAULT_ENV), "{e}");
    }

    #[cfg(feature = "fault-injection")]
    #[test]
    fn faults_parse() {
        assert_eq!(
            Faults::parse("slow-report:1500").unwrap().get(),
            Some(InjectedFault::SlowReport(std::time::Duration::from_millis(
                1500
            )))
        );
        assert_eq!(
            Faults::parse("scratch-full").unwrap().get(),
            Some(InjectedFault::ScratchFull)
        );
        assert!(Faults::parse("simulate-tasks").unwrap().simulates_tasks());
    }

    #[cfg(not(feature = "fault-injection"))]
    #[test]
    fn without_the_feature_no_fault_can_be_set() {
        let e = Faults::parse("park-before-report").unwrap_err().to_string();
        assert!(e.contains("no fault injection"), "{e}");
    }
}
