//! A worker joins only a coordinator of its own release and protocol: another one is
//! refused at registration with a message naming both versions (a worker of an earlier
//! release, which sends none, too).

use crate::protocol::{Registration, PROTOCOL_VERSION, RELEASE};

use super::bed::Bed;

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
