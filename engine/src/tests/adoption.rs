//! A restarted coordinator adopts its predecessor's attempts. A worker that finished a
//! task the predecessor leased reports it to the new coordinator, which takes it
//! (checked as any result, then journaled) when the task is not accepted yet, instead
//! of running the task again. A restarted coordinator's own attempts never reuse a
//! predecessor's attempt numbers, so never its files. Fencing stays exact: a
//! predecessor's attempt of a task already accepted is refused, and once the job is
//! complete its files are removed.

use super::bed::{Bed, Ended};

#[tokio::test]
async fn a_predecessors_attempt_is_adopted_not_run_again() {
    let mut bed = Bed::new(3).await;
    let old = bed.lease("w1");
    let result = bed.execute(&old).await;
    // The coordinator restarts while w1 runs the task; w1 reports to the new one.
    bed.restart().await;
    bed.report("w1", &old, Ok(result)).await;
    let entry = bed.out(&format!("_job/journal/{}.json", old.task.id));
    assert!(entry.exists(), "the predecessor's attempt is journaled");
    let journaled: serde_json::Value =
        serde_json::from_slice(&std::fs::read(entry).unwrap()).unwrap();
    assert_eq!(journaled["attempt"], old.attempt);
    // Only the other two counts and the merge run in the new coordinator's run.
    bed.complete_all("w2").await;
    bed.assert_finished_as_expected();
    assert_eq!(bed.run.tasks_run(), 3);
}

#[tokio::test]
async fn a_restarted_coordinators_attempts_never_reuse_a_predecessors_number() {
    let mut bed = Bed::new(3).await;
    let old = bed.lease("w1");
    let result = bed.execute(&old).await;
    bed.restart().await;
    // The task is leased again before w1 reports: another attempt, other files.
    let again = bed.lease("w2");
    assert_eq!(again.task.id, old.task.id);
    assert!(
        again.attempt > old.attempt,
        "{} vs {}",
        again.attempt,
        old.attempt
    );
    // w1's result arrives first: adopted; w2's then is a duplicate, refused.
    bed.report("w1", &old, Ok(result)).await;
    let second = bed.execute(&again).await;
    bed.report("w2", &again, Ok(second)).await;
    bed.complete_all("w1").await;
    bed.assert_finished_as_expected();
    // The journal names the adopted attempt.
    let entry = bed.out(&format!("_job/journal/{}.json", old.task.id));
    let journaled: serde_json::Value =
        serde_json::from_slice(&std::fs::read(entry).unwrap()).unwrap();
    assert_eq!(journaled["attempt"], old.attempt);
    // Both attempts' files are gone with the job's work directory.
    assert_eq!(
        super::bed::files_under(&bed.out("_job/counts")),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn a_predecessors_attempt_of_an_accepted_task_is_refused_and_removed_after_the_end() {
    let mut bed = Bed::new(3).await;
    let old = bed.lease("w1");
    let result = bed.execute(&old).await;
    bed.restart().await;
    // The new coordinator runs the whole job without w1.
    bed.complete_all("w2").await;
    bed.assert_finished_as_expected();
    // w1 (a zombie: it finished its attempt long ago) writes its file again and
    // reports: refused, its file removed, nothing else touched.
    let result_again = bed.execute(&old).await;
    assert_eq!(result_again.json(), result.json());
    let late = bed.out(&format!(
        "_job/counts/count-{:05}-a{}.json",
        old.task.id.index, old.attempt
    ));
    assert!(late.exists());
    let effects = bed.report_unjournaled("w1", &old, &old.lease, Ok(result_again));
    bed.apply(effects).await;
    assert!(matches!(bed.ended, Some(Ended::Finished(_))));
    assert_eq!(bed.discarded, [(old.task.id, old.attempt)]);
    assert!(!late.exists());
    bed.assert_finished_as_expected();
}

#[tokio::test]
async fn an_attempt_of_another_job_is_never_adopted() {
    // A long-lived worker process ran attempt `old` for another job (other inputs, the
    // same output place and task layout: the user started over with another job file
    // after removing the first one's output) and offers it to this job's restarted
    // coordinator. Its planned paths are this job's paths for the same task and attempt,
    // so only the job's identity tells them apart.
    let mut bed = Bed::new(3).await;
    let old = bed.lease("w1");
    let result = bed.execute(&old).await;
    bed.restart().await;
    let mut foreign = old.clone();
    foreign.job.job_id = "the fingerprint of another job file".into();
    bed.report("w1", &foreign, Ok(result)).await;
    let entry = bed.out(&format!("_job/journal/{}.json", old.task.id));
    assert!(
        !entry.exists(),
        "another job's attempt is refused, not journaled"
    );
    // The task runs again in this job: all three tasks are this coordinator's.
    bed.complete_all("w2").await;
    bed.assert_finished_as_expected();
    assert_eq!(bed.run.tasks_run(), 4);
}
