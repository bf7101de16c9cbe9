//! Every committed corpus and regression input, replayed through its target's harness:
//! what the fuzzers found stays fixed, in seconds, on every test run.

use std::path::PathBuf;

/// `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/` of every target.
fn inputs(target: &str) -> Vec<PathBuf> {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files: Vec<PathBuf> = ["corpus", "regressions"]
        .iter()
        .filter_map(|kind| std::fs::read_dir(fuzz.join(kind).join(target)).ok())
        .flatten()
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_corpus_and_regression_input_ends_in_a_value_or_an_error() {
    let mut missing = Vec::new();
    for (target, harness) in probeflow_fuzz::TARGETS {
        let files = inputs(target);
        if files.is_empty() {
            missing.push(*target);
        }
        for file in files {
            let data = std::fs::read(&file).expect("a corpus file");
            let ran = std::panic::catch_unwind(|| harness(&data));
            assert!(ran.is_ok(), "{target}: {} fails", file.display());
        }
    }
    assert!(missing.is_empty(), "targets without a corpus: {missing:?}");
}
