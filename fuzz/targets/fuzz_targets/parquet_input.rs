#![no_main]
//! The `parquet_input` harness of probeflow-fuzz (fuzz/harness/src).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(harness) = probeflow_fuzz::harness("parquet_input") {
        harness(data);
    }
});
