//! A coordinator that stops on a fault of its own environment (a journal entry it cannot
//! write, the output lock it lost) leaves the job to the next coordinator: its workers
//! are told to wait, and rejoin the next one, not that the job is done (they would exit,
//! and the restarted coordinator would have no workers). A job that failed for good (a
//! task out of attempts) tells them it is done.

use super::bed::Bed;
use crate::coordinator::run::Effect;
use crate::error::EngineError;
use crate::protocol::TaskReply;

#[tokio::test]
async fn a_coordinator_that_cannot_journal_tells_its_workers_to_wait() {
    let mut bed = Bed::new(3).await;
    let a = bed.lease("w1");
    let result = bed.execute(&a).await;
    let effects = bed.report_unjournaled("w1", &a, &a.lease, Ok(result));
    let nonce = effects
        .iter()
        .find_map(|e| match e {
            Effect::Journal { nonce, .. } => Some(nonce.clone()),
            _ => None,
        })
        .expect("a journal write");
    let error = EngineError::Journal {
        path: "out/_job/journal/count-00000.json".into(),
        what: "cannot write the journal entry: connection timed out".into(),
    };
    let effects = bed.run.journaled(a.task.id, &nonce, Some(error));
    assert!(
        effects.iter().any(|e| matches!(e, Effect::Fail(_))),
        "the coordinator stops: {effects:?}"
    );
    assert!(bed.run.is_over());
    assert!(
        matches!(bed.request("w2"), TaskReply::Wait),
        "its workers wait for the next coordinator"
    );
}

#[tokio::test]
async fn a_coordinator_that_lost_its_lock_tells_its_workers_to_wait() {
    let mut bed = Bed::new(3).await;
    let _a = bed.lease("w1");
    let mut effects = Vec::new();
    bed.run.stop(
        EngineError::Conflict("lost the output lock; it is now held by host b".into()),
        &mut effects,
    );
    assert!(effects.iter().any(|e| matches!(e, Effect::Fail(_))));
    assert!(matches!(bed.request("w2"), TaskReply::Wait));
}

#[tokio::test]
async fn a_job_that_failed_for_good_tells_its_workers_it_is_done() {
    let mut bed = Bed::new(3).await;
    let _a = bed.lease("w1");
    let mut effects = Vec::new();
    bed.run.fail(
        EngineError::TaskFailed {
            task: "count-00000".into(),
            attempts: 3,
            error: "bad input".into(),
        },
        &mut effects,
    );
    assert!(matches!(bed.request("w2"), TaskReply::Done));
}
