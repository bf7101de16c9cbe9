//! Every committed corpus and regression input, replayed through its target's harness:
//! what the fuzzers found stays fixed, in seconds, on every test run.

use std::path::PathBuf;

use probeflow_fuzz::bounded_alloc::{replaying, BoundedAlloc};

// An input that makes a parser reserve past the harness bound aborts the replay,
// naming itself (as the targets do; overcommit would otherwise let it pass unseen).
#[global_allocator]
static ALLOCATOR: BoundedAlloc = BoundedAlloc;

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
    // One thread per target, the machine's cores at a time.
    let failures = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((target, harness)) = probeflow_fuzz::TARGETS.get(i) else {
                    return;
                };
                let files = inputs(target);
                let mut failed = Vec::new();
                if files.is_empty() {
                    failed.push(format!("{target}: no corpus"));
                }
                for file in files {
                    let data = std::fs::read(&file).expect("a corpus file");
                    let name = file.display().to_string();
                    let run = || std::panic::catch_unwind(|| harness(&data));
                    if replaying(&name, run).is_err() {
                        failed.push(format!("{target}: {} fails", file.display()));
                    }
                }
                failures
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(failed);
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    assert!(failures.is_empty(), "{failures:#?}");
}
