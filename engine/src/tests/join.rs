//! A worker joins only a coordinator of its own release and protocol: another one is
//! refused at registration with a message naming both versions (a worker of an earlier
//! release, which sends none, too). And a worker process's life
//! ([`crate::worker::join`]), in-process: it joins a cluster-mode coordinator over
//! loopback, runs the job's tasks and returns once the job is done; with no
//! coordinator it gives up after its limit, naming the address.

use std::time::Duration;

use crate::coordinator::{run_job, JobSpec, RunOutcome};
use crate::error::EngineError;
use crate::fault::Faults;
use crate::protocol::{Registration, PROTOCOL_VERSION, RELEASE};
use crate::settings::WorkerResources;
use crate::worker::{join, JoinConfig};

use super::bed::{Bed, EXPECTED_COUNTS};
use super::local_run::job_file;
use super::TEST_KINDS;

/// The cluster's cookie in these tests (the coordinator reads it from the environment).
const COOKIE: &str = "0123456789abcdef0123456789abcdef";

/// A loopback address no one listens on now.
fn free_address() -> String {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    socket.local_addr().unwrap().to_string()
}

/// A worker that joins `address`, with its scratch under `dir`.
fn worker(address: &str, dir: &std::path::Path, give_up_after: Duration) -> JoinConfig {
    JoinConfig {
        join: address.to_string(),
        name: "w1".into(),
        resources: WorkerResources {
            scratch: dir.join("worker-scratch"),
            memory_bytes: 64 << 20,
        },
        threads: 2,
        listen: "127.0.0.1:0".parse().unwrap(),
        give_up_after,
        tls: None,
        faults: Faults::none(),
        http: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_joins_runs_the_job_and_returns_once_it_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let address = free_address();
    let extra = format!("mode = \"cluster\"\nlisten = \"{address}\"\n");
    let spec = JobSpec::load(&job_file(dir.path(), &extra), TEST_KINDS).unwrap();
    std::env::set_var(crate::cluster::COOKIE_ENV, COOKIE);
    let coordinator = tokio::spawn(async move { run_job(&spec, TEST_KINDS).await });
    let joined = tokio::time::timeout(
        Duration::from_secs(60),
        join(
            worker(&address, dir.path(), Duration::from_secs(30)),
            COOKIE.into(),
            TEST_KINDS,
        ),
    )
    .await
    .expect("the worker returned within a minute");
    joined.unwrap();
    let RunOutcome::Completed {
        summary, tasks_run, ..
    } = coordinator.await.unwrap().unwrap()
    else {
        panic!("the job was not run");
    };
    assert_eq!(summary, "9 words, 5 distinct, in 3 files");
    assert_eq!(tasks_run, 4);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out/word_counts.tsv")).unwrap(),
        EXPECTED_COUNTS
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_gives_up_on_a_coordinator_that_never_answers() {
    let dir = tempfile::tempdir().unwrap();
    let address = free_address();
    let err = join(
        worker(&address, dir.path(), Duration::from_millis(500)),
        COOKIE.into(),
        TEST_KINDS,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, EngineError::Runtime(_)), "{err:?}");
    assert_eq!(err.exit_code(), 1);
    let err = err.to_string();
    assert!(
        err.contains(&address) && err.contains("was unreachable"),
        "{err}"
    );
}

fn registration(worker: &str, version: u32, release: &str) -> Registration {
    Registration {
        worker: worker.into(),
        node: format!("{worker}-node"),
        capacity: 1,
        memory_bytes: 64 << 20,
        version,
        release: release.into(),
    }
}

#[tokio::test]
async fn a_worker_of_another_release_is_refused_naming_both() {
    let mut bed = Bed::new(3).await;
    let why = bed
        .run
        .register(registration("w3", PROTOCOL_VERSION, "0.0.9"))
        .unwrap_err();
    assert!(
        why.contains("worker w3 is probeflow 0.0.9")
            && why.contains(&format!("this coordinator is probeflow {RELEASE}")),
        "{why}"
    );
    // A worker of a release before workers sent theirs.
    let why = bed
        .run
        .register(registration("w3", PROTOCOL_VERSION, ""))
        .unwrap_err();
    assert!(why.contains("is probeflow an earlier release"), "{why}");
    // Another protocol.
    let why = bed
        .run
        .register(registration("w3", PROTOCOL_VERSION + 1, RELEASE))
        .unwrap_err();
    assert!(why.contains("speaks protocol"), "{why}");
    // The same release joins, and the job runs with it.
    bed.run
        .register(registration("w3", PROTOCOL_VERSION, RELEASE))
        .unwrap();
    bed.complete_all("w3").await;
    bed.assert_finished_as_expected();
}
