#![no_main]
//! The `whole_gzip` harness of probeflow-fuzz (fuzz/harness/src).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(harness) = probeflow_fuzz::harness("whole_gzip") {
        harness(data);
    }
});
