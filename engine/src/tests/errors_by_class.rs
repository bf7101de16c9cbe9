//! A task's error decides its retry by whose fault it is: what follows from the input's
//! bytes or the job file ends the job in one attempt, naming the file; what a store, a
//! disk or the machine did is tried again.

use std::time::Duration;

use crate::coordinator::{run_job, JobSpec};
use crate::error::EngineError;
use crate::protocol::TaskFailure;

use super::bed::{Bed, Ended};
use super::local_run::job_file;
use super::TEST_KINDS;

/// One error of each class that a task can end in, with the file it must name.
fn input_errors() -> Vec<(&'static str, EngineError)> {
    let file = || "in/t0.parquet".to_string();
    vec![
        (
            "corrupt",
            EngineError::Corrupt {
                file: file(),
                what: "cannot read: invalid gzip header".into(),
            },
        ),
        (
            "parquet",
            EngineError::Parquet {
                file: file(),
                what: "invalid page header".into(),
            },
        ),
        (
            "invalid",
            EngineError::InvalidInput {
                file: file(),
                what: "a value of no usable type".into(),
            },
        ),
        (
            "changed",
            EngineError::InputChanged {
                file: file(),
                what: "changed since the job was planned".into(),
            },
        ),
        (
            "format",
            EngineError::Format(probeflow_reader::Error::Corrupt {
                file: file(),
                location: probeflow_reader::Location::File,
                what: "bad magic".into(),
            }),
        ),
        (
            "schema",
            EngineError::Schema {
                file: file(),
                what: "no column rtt".into(),
            },
        ),
    ]
}

fn environment_errors() -> Vec<(&'static str, EngineError)> {
    vec![
        (
            "store",
            EngineError::store(
                "s3://b/in/t0.parquet",
                object_store::Error::Generic {
                    store: "S3",
                    source: "connection reset".into(),
                },
            ),
        ),
        (
            "scratch",
            EngineError::Scratch {
                path: "/scratch/t".into(),
                source: std::io::Error::other("input/output error"),
            },
        ),
        (
            "format io",
            EngineError::Format(probeflow_reader::Error::Io {
                path: "/scratch/shard".into(),
                source: std::io::Error::other("input/output error"),
            }),
        ),
        ("runtime", EngineError::Runtime("a thread failed".into())),
    ]
}

#[tokio::test]
async fn an_input_error_of_any_class_ends_the_job_in_one_attempt_naming_its_file() {
    for (class, error) in input_errors() {
        let mut bed = Bed::new(5).await;
        let a = bed.lease("w1");
        bed.report("w1", &a, Err(TaskFailure::of(&error))).await;
        let Some(Ended::Failed(why)) = &bed.ended else {
            panic!("{class}: {:?}", bed.ended);
        };
        assert!(
            why.contains("after 1 attempt(s)") && why.contains("in/t0.parquet"),
            "{class}: {why}"
        );
    }
}

#[tokio::test]
async fn a_store_or_machine_error_is_tried_again() {
    for (class, error) in environment_errors() {
        let mut bed = Bed::new(5).await;
        let a = bed.lease("w1");
        bed.report("w1", &a, Err(TaskFailure::of(&error))).await;
        assert!(bed.ended.is_none(), "{class}: {:?}", bed.ended);
        bed.advance(Duration::from_secs(2)).await;
        let retry = bed.lease("w2");
        assert_eq!((retry.task.id, retry.attempt), (a.task.id, 2), "{class}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_not_text_fails_a_real_run_once_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let job = job_file(dir.path(), "max_attempts = 5\n");
    std::fs::write(dir.path().join("in/t1.txt"), b"ok \xff\xfe not text").unwrap();
    let spec = JobSpec::load(&job, TEST_KINDS).unwrap();
    let e = run_job(&spec, TEST_KINDS).await.unwrap_err();
    let shown = e.to_string();
    assert!(shown.contains("after 1 attempt(s)"), "{shown}");
    assert!(
        shown.contains("t1.txt") && shown.contains("not UTF-8"),
        "{shown}"
    );
}
