//! A failed attempt is retried after a backoff, on another worker when there is one.

use std::time::Duration;

use crate::protocol::TaskReply;

use super::bed::{flaky, Bed, Ended};

#[tokio::test]
async fn a_failed_task_goes_to_the_other_worker_after_its_backoff() {
    let mut bed = Bed::new(3).await;
    let first = bed.lease("w1");
    assert_eq!(
        (first.task.id.to_string(), first.attempt),
        ("count-00000".into(), 1)
    );
    bed.report("w1", &first, flaky("disk hiccup")).await;

    // w1 gets the other tasks, never the one that failed on it.
    let mut on_w1 = Vec::new();
    while let TaskReply::Task(a) = bed.request("w1") {
        on_w1.push(a.task.id.to_string());
        bed.run_task("w1", &a).await;
    }
    assert_eq!(on_w1, ["count-00001", "count-00002"]);
    // Within its backoff, nobody gets it.
    assert!(matches!(bed.request("w2"), TaskReply::Wait));
    bed.advance(Duration::from_millis(1100)).await;
    assert!(matches!(bed.request("w1"), TaskReply::Wait));
    let retry = bed.lease("w2");
    assert_eq!((retry.task.id, retry.attempt), (first.task.id, 2));
    bed.run_task("w2", &retry).await;

    bed.complete_all("w1").await;
    bed.assert_finished_as_expected();
}

#[tokio::test]
async fn with_no_other_worker_the_same_worker_retries_it() {
    let mut bed = Bed::new(3).await;
    bed.run.node_lost("w2-node");
    let first = bed.lease("w1");
    bed.report("w1", &first, flaky("disk hiccup")).await;
    for _ in 0..2 {
        let a = bed.lease("w1");
        bed.run_task("w1", &a).await;
    }
    bed.advance(Duration::from_millis(1100)).await;
    let retry = bed.lease("w1");
    assert_eq!((retry.task.id, retry.attempt), (first.task.id, 2));
}

#[tokio::test]
async fn a_task_out_of_attempts_fails_the_job_with_its_last_error() {
    let mut bed = Bed::new(2).await;
    let a = bed.lease("w1");
    bed.report("w1", &a, flaky("first")).await;
    bed.advance(Duration::from_secs(2)).await;
    let b = bed.lease("w2");
    assert_eq!((b.task.id, b.attempt), (a.task.id, 2));
    bed.report("w2", &b, flaky("second")).await;
    let Some(Ended::Failed(why)) = &bed.ended else {
        panic!("{:?}", bed.ended);
    };
    assert!(
        why.contains("count-00000 failed after 2 attempt(s)") && why.contains("second"),
        "{why}"
    );
    assert!(matches!(bed.request("w1"), TaskReply::Done));
}
