//! A journal entry torn by a crash counts as missing (its task is redone); a job
//! record that does not decode means the job is planned again; a journal of another
//! version is refused.

use super::bed::{Bed, EXPECTED_COUNTS};

#[tokio::test]
async fn a_torn_entry_is_redone() {
    let mut bed = Bed::new(3).await;
    bed.complete_one("w1").await;
    bed.complete_one("w1").await;
    let entry = bed.out("_job/journal/count-00001.json");
    let bytes = std::fs::read(&entry).unwrap();
    std::fs::write(&entry, &bytes[..bytes.len() / 2]).unwrap();
    assert_eq!(bed.restart().await, 1);
    let redone = bed.lease("w2");
    assert_eq!(redone.task.id.to_string(), "count-00001");
    bed.run_task("w2", &redone).await;
    bed.complete_all("w2").await;
    bed.assert_finished_as_expected();
}

#[tokio::test]
async fn an_unreadable_job_record_plans_the_job_again() {
    let mut bed = Bed::new(3).await;
    bed.complete_one("w1").await;
    std::fs::write(
        bed.out("_job/journal/job.json"),
        "{\"version\": 5, \"kind\":",
    )
    .unwrap();
    assert_eq!(bed.restart().await, 0);
    assert!(!bed.out("_job/journal/count-00000.json").exists());
    bed.complete_all("w1").await;
    assert_eq!(bed.counts(), EXPECTED_COUNTS);
}

#[tokio::test]
async fn a_journal_of_another_version_is_refused() {
    let mut bed = Bed::new(3).await;
    let record = bed.out("_job/journal/job.json");
    let text = std::fs::read_to_string(&record).unwrap();
    let version = format!("\"version\": {}", crate::journal::JOURNAL_VERSION);
    assert!(text.contains(&version), "{text}");
    std::fs::write(&record, text.replace(&version, "\"version\": 1")).unwrap();
    let err = crate::coordinator::open::open_job(&bed.spec, &bed.output)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("written by journal version 1"), "{err}");
    bed.complete_all("w1").await;
}
