#![no_main]
//! The `atlas_lines` harness of probeflow-fuzz (fuzz/harness/src).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(harness) = probeflow_fuzz::harness("atlas_lines") {
        harness(data);
    }
});
