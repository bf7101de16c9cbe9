#![no_main]
//! The `array_record_read` harness of probeflow-fuzz (fuzz/harness/src).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(harness) = probeflow_fuzz::harness("array_record_read") {
        harness(data);
    }
});
