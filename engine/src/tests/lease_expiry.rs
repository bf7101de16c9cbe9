//! A lease ends when its worker goes silent: the task goes back to the queue, and the
//! silent worker's result, when it comes, is refused.

use std::time::Duration;

use crate::protocol::TaskReply;

use super::bed::{Bed, LEASE};

#[tokio::test]
async fn heartbeats_keep_a_lease_and_silence_ends_it() {
    let mut bed = Bed::new(3).await;
    let a = bed.lease("w1");
    // Heartbeats every half lease keep it for three leases.
    for _ in 0..6 {
        bed.advance(LEASE / 2).await;
        bed.run
            .heartbeat("w1", a.task.id, a.attempt, &a.lease, bed.now);
    }
    // A heartbeat with another token, or from another worker, does not.
    bed.advance(LEASE / 2).await;
    bed.run
        .heartbeat("w1", a.task.id, a.attempt, "guessed", bed.now);
    bed.run
        .heartbeat("w2", a.task.id, a.attempt, &a.lease, bed.now);
    bed.advance(LEASE / 2 + Duration::from_millis(1)).await;

    // Expired: the next attempt goes to the other worker at once (no backoff).
    let again = bed.lease("w2");
    assert_eq!((again.task.id, again.attempt), (a.task.id, 2));
    // The silent worker's result comes late: refused, nothing journaled.
    let late = bed.execute(&a).await;
    let effects = bed.report_unjournaled("w1", &a, &a.lease, Ok(late));
    assert!(effects.is_empty(), "{effects:?}");
    assert!(!bed.out("_job/journal/count-00000.json").exists());
    // The holder's result counts.
    bed.run_task("w2", &again).await;
    let entry: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bed.out("_job/journal/count-00000.json")).unwrap())
            .unwrap();
    assert_eq!(entry["attempt"], 2);
    assert_eq!(
        entry["output"]["counts_file"],
        "_job/counts/count-00000-a2.json"
    );
}

#[tokio::test]
async fn a_lost_node_gives_its_tasks_back_at_once() {
    let mut bed = Bed::new(3).await;
    let a = bed.lease("w1");
    bed.run.node_lost("w1-node");
    let again = bed.lease("w2");
    assert_eq!((again.task.id, again.attempt), (a.task.id, 2));
    // The lost worker is not in the job any more.
    assert!(bed.run.request("w1", "t".into(), bed.now).is_err());
}

#[tokio::test]
async fn a_task_whose_every_lease_expires_fails_the_job() {
    let mut bed = Bed::new(2).await;
    bed.lease("w1");
    bed.advance(LEASE + Duration::from_secs(1)).await;
    let second = bed.lease("w2");
    assert_eq!(second.attempt, 2);
    bed.advance(LEASE + Duration::from_secs(1)).await;
    let why = format!("{:?}", bed.ended);
    assert!(
        why.contains("failed after 2 attempt(s)") && why.contains("lease expired"),
        "{why}"
    );
    assert!(matches!(bed.request("w1"), TaskReply::Done));
}
