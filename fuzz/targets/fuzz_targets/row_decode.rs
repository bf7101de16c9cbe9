#![no_main]
//! The `row_decode` harness of probeflow-fuzz (fuzz/harness/src).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(harness) = probeflow_fuzz::harness("row_decode") {
        harness(data);
    }
});
