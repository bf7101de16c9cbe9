//! Results are fenced by (task, attempt, lease token, worker): a late, duplicate or
//! forged one changes nothing, a result naming files its attempt was not given is a
//! failed attempt, and a late attempt's files are removed once the job is finished.

use super::word_count::CountOutput;
use crate::protocol::Payload;

use super::bed::{Bed, EXPECTED_COUNTS};

#[tokio::test]
async fn forged_and_duplicate_reports_change_nothing() {
    let mut bed = Bed::new(3).await;
    let a = bed.lease("w1");
    let result = bed.execute(&a).await;
    // The wrong token, another worker, another attempt, a task never leased.
    assert!(bed
        .report_unjournaled("w1", &a, "guessed", Ok(result.clone()))
        .is_empty());
    assert!(bed
        .report_unjournaled("w2", &a, &a.lease, Ok(result.clone()))
        .is_empty());
    let mut other_attempt = a.clone();
    other_attempt.attempt = 2;
    assert!(bed
        .report_unjournaled("w1", &other_attempt, &a.lease, Ok(result.clone()))
        .is_empty());
    let mut unleased = a.clone();
    unleased.task.id.index = 2;
    assert!(bed
        .report_unjournaled("w1", &unleased, &a.lease, Ok(result.clone()))
        .is_empty());
    assert!(!bed.out("_job/journal/count-00000.json").exists());
    // The holder's report counts once; the same report again is refused.
    bed.report("w1", &a, Ok(result.clone())).await;
    assert!(bed.out("_job/journal/count-00000.json").exists());
    assert!(bed
        .report_unjournaled("w1", &a, &a.lease, Ok(result))
        .is_empty());
}

#[tokio::test]
async fn a_result_naming_files_not_planned_for_its_attempt_is_a_failed_attempt() {
    let mut bed = Bed::new(3).await;
    let a = bed.lease("w1");
    let result = bed.execute(&a).await;
    let mut forged: CountOutput = result.decode().unwrap();
    forged.counts_file = "word_counts.tsv".into();
    bed.report("w1", &a, Ok(Payload::encode(&forged).unwrap()))
        .await;
    assert!(!bed.out("_job/journal/count-00000.json").exists());
    // Retried elsewhere (after its backoff), as any failed attempt.
    bed.advance(std::time::Duration::from_secs(2)).await;
    let mut retried = None;
    while retried.is_none() {
        let b = bed.lease("w2");
        bed.run_task("w2", &b).await;
        if b.task.id == a.task.id {
            retried = Some(b.attempt);
        }
    }
    assert_eq!(retried, Some(2));
    // A result that does not decode as its stage's result is refused alike.
    let c = bed.lease("w1");
    bed.report("w1", &c, Ok(Payload::encode(&"not a result").unwrap()))
        .await;
    assert!(bed.ended.is_none());
}

#[tokio::test]
async fn a_late_attempts_files_are_removed_after_the_job_finished() {
    let mut bed = Bed::new(3).await;
    let slow = bed.lease("w1");
    bed.advance(super::bed::LEASE + std::time::Duration::from_secs(1))
        .await;
    bed.complete_all("w2").await;
    bed.assert_finished_as_expected();
    // The slow attempt writes its file and reports after the end: refused, its file
    // removed, nothing else touched.
    let result = bed.execute(&slow).await;
    let late = bed.out("_job/counts/count-00000-a1.json");
    assert!(late.exists());
    let effects = bed.report_unjournaled("w1", &slow, &slow.lease, Ok(result));
    bed.apply(effects).await;
    assert_eq!(bed.discarded, [(slow.task.id, 1)]);
    assert!(!late.exists());
    assert_eq!(bed.counts(), EXPECTED_COUNTS);
}
