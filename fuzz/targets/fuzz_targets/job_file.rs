#![no_main]
//! The `job_file` harness of probeflow-fuzz (fuzz/harness/src).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(harness) = probeflow_fuzz::harness("job_file") {
        harness(data);
    }
});
