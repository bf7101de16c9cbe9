//! A stage starts when every task of the one before is accepted (journaled), and its
//! tasks are made from those results.

use super::word_count::MergeTask;
use crate::protocol::TaskReply;

use super::bed::{Bed, Ended};

#[tokio::test]
async fn the_merge_waits_for_every_count_to_be_journaled_and_reads_the_accepted_attempts() {
    let mut bed = Bed::new(3).await;
    assert_eq!(bed.stages, ["count"]);
    // count-00000's first attempt fails; its second attempt's file is the one merged.
    let first = bed.lease("w1");
    bed.report("w1", &first, super::bed::flaky("hiccup")).await;
    bed.complete_one("w1").await;
    bed.complete_one("w1").await;
    bed.advance(std::time::Duration::from_secs(2)).await;
    let retry = bed.lease("w2");
    assert_eq!((retry.task.id, retry.attempt), (first.task.id, 2));
    let result = bed.execute(&retry).await;
    // Reported but not yet journaled: the merge does not start.
    let effects = bed.report_unjournaled("w2", &retry, &retry.lease, Ok(result));
    assert!(matches!(bed.request("w1"), TaskReply::Wait));
    assert_eq!(bed.stages, ["count"]);
    bed.apply(effects).await;
    assert_eq!(bed.stages, ["count", "merge"]);
    let merge = bed.lease("w1");
    assert_eq!(merge.task.id.to_string(), "merge-00000");
    let task: MergeTask = merge.task.body.decode().unwrap();
    assert_eq!(
        task.counts_files,
        [
            "_job/counts/count-00000-a2.json",
            "_job/counts/count-00001-a1.json",
            "_job/counts/count-00002-a1.json"
        ]
    );
    bed.run_task("w1", &merge).await;
    assert_eq!(
        bed.ended,
        Some(Ended::Finished("9 words, 5 distinct, in 3 files".into()))
    );
    assert!(matches!(bed.request("w2"), TaskReply::Done));
}
