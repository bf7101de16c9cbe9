#![no_main]
//! The `line_reader` harness of probeflow-fuzz (fuzz/harness/src).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(harness) = probeflow_fuzz::harness("line_reader") {
        harness(data);
    }
});
