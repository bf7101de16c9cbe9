//! A worker that keeps failing is excluded for the rest of the job (never the last
//! one), and a failure that would repeat on any worker stops the job at once.

use crate::protocol::TaskReply;
use crate::protocol::{Registration, TaskFailure, PROTOCOL_VERSION};

use super::bed::{flaky, Bed, Ended, EXPECTED_COUNTS};

#[tokio::test]
async fn a_worker_that_keeps_failing_is_excluded_and_the_job_finishes_elsewhere() {
    let mut bed = Bed::new(5).await;
    for n in 1..=3 {
        let a = bed.lease("w1");
        bed.report("w1", &a, flaky(&format!("bad disk {n}"))).await;
    }
    assert_eq!(bed.excluded.keys().collect::<Vec<_>>(), ["w1"]);
    assert!(bed.excluded["w1"].contains("3 failed attempts, the last: bad disk 3"));
    let TaskReply::Excluded(why) = bed.request("w1") else {
        panic!("w1 is not excluded");
    };
    assert!(why.contains("bad disk 3"), "{why}");
    // Excluded for the job: it cannot join again under its name.
    bed.run.node_lost("w1-node");
    let again = bed.run.register(Registration {
        worker: "w1".into(),
        node: "w1-node-2".into(),
        capacity: 1,
        memory_bytes: 1,
        version: PROTOCOL_VERSION,
        release: crate::protocol::RELEASE.into(),
    });
    assert!(again.unwrap_err().contains("excluded"));
    bed.advance(std::time::Duration::from_secs(5)).await;
    bed.complete_all("w2").await;
    bed.assert_finished_as_expected();
}

#[tokio::test]
async fn the_last_worker_is_never_excluded() {
    let mut bed = Bed::new(9).await;
    bed.run.node_lost("w2-node");
    for _ in 0..4 {
        let a = bed.lease("w1");
        bed.report("w1", &a, flaky("bad disk")).await;
        bed.advance(std::time::Duration::from_secs(30)).await;
    }
    assert!(bed.excluded.is_empty());
    bed.complete_all("w1").await;
    assert_eq!(bed.counts(), EXPECTED_COUNTS);
}

#[tokio::test]
async fn a_failure_that_would_repeat_stops_the_job_at_once() {
    let mut bed = Bed::new(3).await;
    let a = bed.lease("w1");
    let wrong_input = Err(TaskFailure {
        error: "t0.txt: changed since the job was planned".into(),
        retryable: false,
    });
    bed.report("w1", &a, wrong_input).await;
    let Some(Ended::Failed(why)) = &bed.ended else {
        panic!("{:?}", bed.ended);
    };
    assert!(
        why.contains("after 1 attempt(s)") && why.contains("changed since"),
        "{why}"
    );
}
