//! The whole engine in one process: `run_job` in local mode (the coordinator actor
//! and two worker actors) runs the word-count job, answers "already complete" for a
//! finished output, and refuses one whose input changed or that another job made.

use super::TEST_KINDS;
use crate::coordinator::JobSpec;
use crate::coordinator::{run_job, RunOutcome};
use crate::error::EngineError;

use super::bed::{EXPECTED_COUNTS, TEXTS};

/// A local-mode word-count job file over [`TEXTS`] (written once) with `extra` in `[run]`.
pub(super) fn job_file(dir: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let input = dir.join("in");
    std::fs::create_dir_all(&input).unwrap();
    for (i, text) in TEXTS.iter().enumerate() {
        let file = input.join(format!("t{i}.txt"));
        if !file.exists() {
            std::fs::write(file, text).unwrap();
        }
    }
    let job = dir.join("job.toml");
    std::fs::write(
        &job,
        format!(
            "kind = \"word_count\"\n[input]\npaths = [\"{}\"]\n[output]\nurl = \"{}\"\n\
             [run]\nworkers = 2\nmemory_per_worker = \"64MiB\"\nscratch = \"{}\"\n{extra}",
            input.display(),
            dir.join("out").display(),
            dir.join("scratch").display()
        ),
    )
    .unwrap();
    job
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_run_finishes_and_a_finished_output_is_not_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let spec = JobSpec::load(&job_file(dir.path(), ""), TEST_KINDS).unwrap();
    let outcome = run_job(&spec, TEST_KINDS).await.unwrap();
    let RunOutcome::Completed {
        summary,
        tasks_run,
        tasks_resumed,
    } = outcome
    else {
        panic!("{outcome:?}");
    };
    assert_eq!(summary, "9 words, 5 distinct, in 3 files");
    assert_eq!((tasks_run, tasks_resumed), (4, 0));
    let out = dir.path().join("out");
    assert_eq!(
        std::fs::read_to_string(out.join("word_counts.tsv")).unwrap(),
        EXPECTED_COUNTS
    );
    assert_eq!(
        super::bed::files_under(&out.join("_job/counts")),
        Vec::<String>::new()
    );

    assert_eq!(
        run_job(&spec, TEST_KINDS).await.unwrap(),
        RunOutcome::AlreadyComplete(summary.clone())
    );
    // With other [run] settings it is the same job.
    let two = JobSpec::load(&job_file(dir.path(), "max_attempts = 5\n"), TEST_KINDS).unwrap();
    assert_eq!(
        run_job(&two, TEST_KINDS).await.unwrap(),
        RunOutcome::AlreadyComplete(summary)
    );

    std::fs::write(dir.path().join("in/t2.txt"), "the end, changed").unwrap();
    let err = run_job(&spec, TEST_KINDS).await.unwrap_err();
    assert!(matches!(err, EngineError::Conflict(_)), "{err:?}");
    let err = err.to_string();
    assert!(
        err.contains("changed since this output was made") && err.contains("t2.txt"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_another_job_made_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let spec = JobSpec::load(&job_file(dir.path(), ""), TEST_KINDS).unwrap();
    run_job(&spec, TEST_KINDS).await.unwrap();
    // The same output, other input: another job.
    let other = std::fs::read_to_string(dir.path().join("job.toml"))
        .unwrap()
        .replace("/in\"", "/in/t0.txt\"");
    std::fs::write(dir.path().join("other.toml"), other).unwrap();
    let other = JobSpec::load(&dir.path().join("other.toml"), TEST_KINDS).unwrap();
    let err = run_job(&other, TEST_KINDS).await.unwrap_err().to_string();
    assert!(
        err.contains("already holds the output of a different job"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_finished_by_an_earlier_release_is_refused_not_taken_for_complete() {
    let dir = tempfile::tempdir().unwrap();
    let spec = JobSpec::load(&job_file(dir.path(), ""), TEST_KINDS).unwrap();
    run_job(&spec, TEST_KINDS).await.unwrap();
    // Completion markers of earlier releases were empty: no fingerprint to compare.
    std::fs::write(dir.path().join("out/_SUCCESS"), "").unwrap();
    let err = run_job(&spec, TEST_KINDS).await.unwrap_err();
    assert!(matches!(&err, EngineError::Conflict(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("its completion marker _SUCCESS is not this release's"),
        "{err}"
    );
}

/// Runs `spec` to completion: its summary.
async fn completed(spec: &JobSpec) -> String {
    match run_job(spec, TEST_KINDS).await.unwrap() {
        RunOutcome::Completed { summary, .. } => summary,
        other => panic!("{other:?}"),
    }
}

/// Writes the lock of a coordinator that is gone (it expired long ago) into output
/// `out`: its path.
fn leave_an_expired_lock(out: &std::path::Path) -> std::path::PathBuf {
    let lock = out.join("_job/lock.json");
    std::fs::write(
        &lock,
        r#"{"owner": {"host": "elsewhere", "pid": 1, "process_start": null, "since": 1,
            "run": "killed"}, "renewed_at": 1, "expires_at": 2}"#,
    )
    .unwrap();
    lock
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_cut_short_after_the_marker_is_cleaned_up_by_the_next_run() {
    // A coordinator killed after writing the completion marker, before its clean-up
    // and the lock's release, leaves both behind: the next run says the output is
    // complete and removes them (the lock's owner is gone: it expired).
    let dir = tempfile::tempdir().unwrap();
    let spec = JobSpec::load(&job_file(dir.path(), ""), TEST_KINDS).unwrap();
    let summary = completed(&spec).await;
    let out = dir.path().join("out");
    let left = out.join("_job/counts/count-00000-a1.tsv");
    std::fs::create_dir_all(left.parent().unwrap()).unwrap();
    std::fs::write(&left, "a\t2\n").unwrap();
    let lock = leave_an_expired_lock(&out);

    assert_eq!(
        run_job(&spec, TEST_KINDS).await.unwrap(),
        RunOutcome::AlreadyComplete(summary)
    );
    assert!(!left.exists(), "the interrupted clean-up is finished");
    assert!(!lock.exists(), "the dead coordinator's lock is released");
    assert_eq!(
        std::fs::read_to_string(out.join("word_counts.tsv")).unwrap(),
        EXPECTED_COUNTS
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_left_on_a_complete_output_without_its_journal_is_released_and_nothing_planned() {
    // The clean-up of a finish cut short replays the journal; with none left it has
    // nothing to replay and must not plan a new job on a complete output.
    let dir = tempfile::tempdir().unwrap();
    let spec = JobSpec::load(&job_file(dir.path(), ""), TEST_KINDS).unwrap();
    let summary = completed(&spec).await;
    let out = dir.path().join("out");
    std::fs::remove_dir_all(out.join("_job/journal")).unwrap();
    let lock = leave_an_expired_lock(&out);
    assert_eq!(
        run_job(&spec, TEST_KINDS).await.unwrap(),
        RunOutcome::AlreadyComplete(summary)
    );
    assert!(!lock.exists(), "the dead coordinator's lock is released");
    assert!(
        !out.join("_job/journal/job.json").exists(),
        "no job planned on a complete output"
    );
}
