#![no_main]
//! The `manifest` harness of probeflow-fuzz (fuzz/harness/src).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(harness) = probeflow_fuzz::harness("manifest") {
        harness(data);
    }
});
