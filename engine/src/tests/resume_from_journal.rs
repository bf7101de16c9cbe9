//! A restarted coordinator resumes from the journal: journaled results are not redone,
//! a result not yet journaled is, and the output is the same bytes.

use super::bed::{id, Bed, Ended, EXPECTED_COUNTS};
use super::TEST_KINDS;

#[tokio::test]
async fn a_restart_redoes_only_what_the_journal_lacks() {
    let mut bed = Bed::new(3).await;
    bed.complete_one("w1").await;
    bed.complete_one("w2").await;
    // The third result is reported but its journal write never happens (the
    // coordinator stops first): it does not count.
    let third = bed.lease("w1");
    let result = bed.execute(&third).await;
    let effects = bed.report_unjournaled("w1", &third, &third.lease, Ok(result));
    assert_eq!(effects.len(), 1);

    assert_eq!(bed.restart().await, 2);
    let again = bed.lease("w2");
    // The restarted coordinator's attempts come after its predecessor's (epoch 2).
    let first_of_epoch_2 = crate::journal::ATTEMPTS_PER_EPOCH + 1;
    assert_eq!(
        (again.task.id, again.attempt),
        (id("count-00002"), first_of_epoch_2)
    );
    bed.run_task("w2", &again).await;
    // The merge reads the journaled attempts' files.
    bed.complete_all("w1").await;
    bed.assert_finished_as_expected();
    // The intermediate files are removed.
    assert_eq!(
        super::bed::files_under(&bed.out("_job/counts")),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn a_crash_after_the_last_task_finishes_the_job_on_restart() {
    let mut bed = Bed::new(3).await;
    for _ in 0..3 {
        bed.complete_one("w1").await;
    }
    let merge = bed.lease("w1");
    let result = bed.execute(&merge).await;
    // Journaled, but the coordinator stops before the final outputs.
    let effects = bed.report_unjournaled("w1", &merge, &merge.lease, Ok(result));
    let crate::coordinator::run::Effect::Journal {
        task,
        attempt,
        output,
        ..
    } = &effects[0]
    else {
        panic!("{effects:?}");
    };
    crate::journal::write_entry(&bed.output, *task, *attempt, output)
        .await
        .unwrap();
    assert!(!bed.out("_SUCCESS").exists());
    assert_eq!(bed.restart().await, 4);
    assert!(
        matches!(bed.ended, Some(Ended::Finished(_))),
        "{:?}",
        bed.ended
    );
    assert_eq!(bed.stages, ["count", "merge"]);
    assert_eq!(bed.counts(), EXPECTED_COUNTS);
    let marker: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bed.out("_SUCCESS")).unwrap()).unwrap();
    assert_eq!(marker["kind"], "word_count");
    assert_eq!(marker["summary"], "9 words, 5 distinct, in 3 files");
    assert_eq!(marker["inputs"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn a_journal_of_another_job_file_is_not_resumed() {
    let mut bed = Bed::new(3).await;
    bed.complete_one("w1").await;
    let job = bed.dir.path().join("job.toml");
    let other = std::fs::read_to_string(&job)
        .unwrap()
        .replace("/*.txt", "/t[01].txt");
    std::fs::write(&job, other).unwrap();
    let spec = crate::coordinator::JobSpec::load(&job, TEST_KINDS).unwrap();
    let err = crate::coordinator::open::open_job(&spec, &bed.output)
        .await
        .err()
        .unwrap();
    assert!(
        matches!(err, crate::error::EngineError::Conflict(_))
            && err
                .to_string()
                .contains("unfinished run of a different job file"),
        "{err}"
    );
}

#[tokio::test]
async fn an_input_changed_since_planning_is_refused_on_resume() {
    let mut bed = Bed::new(3).await;
    bed.complete_one("w1").await;
    std::fs::write(bed.dir.path().join("in/t1.txt"), "b c\nc  c and more").unwrap();
    std::fs::write(bed.dir.path().join("in/t3.txt"), "new").unwrap();
    let err = crate::coordinator::open::open_job(&bed.spec, &bed.output)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("changed since the job was planned")
            && err.contains("t1.txt (")
            && err.contains("added: ")
            && err.contains("t3.txt"),
        "{err}"
    );
}

#[tokio::test]
async fn an_input_gone_whole_since_planning_is_refused_naming_every_file() {
    let mut bed = Bed::new(3).await;
    bed.complete_one("w1").await;
    for i in 0..3 {
        std::fs::remove_file(bed.dir.path().join(format!("in/t{i}.txt"))).unwrap();
    }
    let err = crate::coordinator::open::open_job(&bed.spec, &bed.output)
        .await
        .err()
        .unwrap();
    assert!(
        matches!(err, crate::error::EngineError::Conflict(_)),
        "{err:?}"
    );
    let err = err.to_string();
    assert!(
        err.contains("changed since the job was planned")
            && (0..3).all(|i| err.contains("vanished: ") && err.contains(&format!("t{i}.txt"))),
        "{err}"
    );
}
