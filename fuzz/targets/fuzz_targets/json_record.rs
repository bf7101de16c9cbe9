#![no_main]
//! The `json_record` harness of probeflow-fuzz (fuzz/harness/src).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(harness) = probeflow_fuzz::harness("json_record") {
        harness(data);
    }
});
