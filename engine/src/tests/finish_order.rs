//! The end of a job: the kind's final outputs, then the completion marker, then the
//! kind's clean-up of its intermediate files. A worker that lost the coordinator
//! removes its late files only once the marker exists, so the clean-up must come
//! after it (otherwise a late file written between the two stays for good).

use crate::coordinator::run::Effect;

use super::bed::{files_under, Bed, Ended};

#[tokio::test]
async fn the_intermediate_files_go_only_after_the_completion_marker() {
    let mut bed = Bed::new(3).await;
    for _ in 0..3 {
        bed.complete_one("w1").await;
    }
    let merge = bed.lease("w1");
    let result = bed.execute(&merge).await;
    let effects = bed.report_unjournaled("w1", &merge, &merge.lease, Ok(result));
    let Effect::Journal {
        task,
        attempt,
        output,
        nonce,
    } = &effects[0]
    else {
        panic!("{effects:?}");
    };
    crate::journal::write_entry(&bed.output, *task, *attempt, output)
        .await
        .unwrap();
    let effects = bed.run.journaled(*task, nonce, None);
    assert!(
        matches!(effects.last(), Some(Effect::Finish)),
        "{effects:?}"
    );
    // The kind's final outputs: the counts files are still there (no marker yet).
    bed.run.driver().finish(&bed.output).await.unwrap();
    assert!(!bed.out("_SUCCESS").exists());
    assert_eq!(files_under(&bed.out("_job/counts")).len(), 3);
    // The engine's end: marker, then clean-up.
    bed.apply(vec![Effect::Finish]).await;
    assert!(
        matches!(bed.ended, Some(Ended::Finished(_))),
        "{:?}",
        bed.ended
    );
    assert!(bed.out("_SUCCESS").exists());
    assert_eq!(files_under(&bed.out("_job/counts")), Vec::<String>::new());
}

#[tokio::test]
async fn a_repeated_report_of_an_accepted_attempt_removes_nothing() {
    let mut bed = Bed::new(3).await;
    let first = bed.complete_one("w1").await;
    bed.complete_all("w1").await;
    bed.assert_finished_as_expected();
    // The accepted attempt's report again, after the end (a duplicate on the wire):
    // refused, and the files of the accepted attempt are not the late ones.
    let result = bed.execute(&first).await;
    let effects = bed.report_unjournaled("w1", &first, &first.lease, Ok(result));
    bed.apply(effects).await;
    assert_eq!(bed.discarded, Vec::new());
    assert!(bed.out("_job/counts/count-00000-a1.json").exists());
}

#[tokio::test]
async fn a_failed_job_removes_no_attempts_files() {
    let mut bed = Bed::new(3).await;
    let accepted = bed.complete_one("w1").await;
    let doomed = bed.lease("w2");
    bed.report(
        "w2",
        &doomed,
        Err(crate::protocol::TaskFailure {
            error: "input changed".into(),
            retryable: false,
        }),
    )
    .await;
    assert!(
        matches!(bed.ended, Some(Ended::Failed(_))),
        "{:?}",
        bed.ended
    );
    // A duplicate of the accepted count arrives after the failure: its file is the
    // one the journal names for a resume, and stays.
    let result = bed.execute(&accepted).await;
    let effects = bed.report_unjournaled("w1", &accepted, &accepted.lease, Ok(result));
    bed.apply(effects).await;
    assert_eq!(bed.discarded, Vec::new());
    assert!(bed.out("_job/counts/count-00000-a1.json").exists());
}

#[tokio::test]
async fn a_coordinator_that_lost_the_output_lock_does_not_finish_the_job() {
    let mut bed = Bed::new(3).await;
    for _ in 0..3 {
        bed.complete_one("w1").await;
    }
    let merge = bed.lease("w1");
    let result = bed.execute(&merge).await;
    // Another coordinator took the output over while the merge ran (the lock keeper
    // says so): the last result is journaled, but the job is not this coordinator's
    // to finish.
    bed.lock
        .send(Some("the output lock was taken over by host-b".into()))
        .unwrap();
    bed.report("w1", &merge, Ok(result)).await;
    let Some(Ended::Failed(why)) = &bed.ended else {
        panic!("{:?}", bed.ended);
    };
    assert!(why.contains("taken over by host-b"), "{why}");
    assert!(!bed.out("_SUCCESS").exists());
    // Nothing of the job is removed either: the new owner finishes it from the journal.
    assert_eq!(files_under(&bed.out("_job/counts")).len(), 3);
    assert!(bed.out("_job/journal/merge-00000.json").exists());
}
