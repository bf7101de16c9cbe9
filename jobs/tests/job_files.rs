//! The job files shipped in `jobs/` read as valid job files of the production kinds,
//! and a job file without `kind` is a probe_rows job.

use probeflow_engine::coordinator::JobSpec;
use probeflow_engine::settings::Mode;
use probeflow_jobs::KINDS;

#[test]
fn the_shipped_job_files_parse() {
    for (name, text, kind) in [
        (
            "preprocess.toml",
            include_str!("../preprocess.toml"),
            "probe_rows",
        ),
        ("local.toml", include_str!("../local.toml"), "probe_rows"),
        ("demo.toml", include_str!("../demo.toml"), "probe_rows"),
        (
            "overlap.toml",
            include_str!("../overlap.toml"),
            "ngram_overlap",
        ),
    ] {
        let spec = JobSpec::parse(text, name, KINDS).unwrap();
        assert_eq!(spec.kind.name(), kind, "{name}");
        if spec.run.mode == Mode::Cluster {
            // The shipped cluster job is TLS, not plaintext.
            assert!(
                spec.run.tls.is_some() && !spec.run.allow_plaintext,
                "{name}"
            );
        }
    }
}

#[test]
fn a_job_file_without_kind_is_probe_rows_and_every_kind_is_listed() {
    let text = "[input]\nurl = 'a'\n[output]\nurl = 'b'\n";
    assert_eq!(
        JobSpec::parse(text, "x", KINDS).unwrap().kind.name(),
        "probe_rows"
    );
    assert_eq!(KINDS.names(), ["probe_rows", "ngram_overlap", "word_count"]);
}
