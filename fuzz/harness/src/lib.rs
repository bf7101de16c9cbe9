//! probeflow's fuzz harnesses: one function per entry point where probeflow reads bytes
//! it did not write. Each takes any bytes and must return: an input ends in a value or
//! an error, never in a panic, an abort, a hang or an allocation past the bound its
//! parser documents. Where two implementations of one rule exist (a fast path and a
//! general one, ours and a library's), the harness also checks that they agree.
//!
//! The cargo-fuzz targets in `fuzz/fuzz_targets/` call these ([`TARGETS`] by name);
//! this crate's test replays every committed corpus and regression through them.
//! Under `cfg(fuzzing)` (cargo-fuzz's builds) ArrayRecord hashes always match, so that
//! mutations reach past them, and every allocation is bounded ([`bounded_alloc`]).

mod array_record;
pub mod bounded_alloc;
mod engine;
mod json;
mod lines;
mod parquet;
mod row;

/// A harness: any bytes in, a return (or a panic: a bug) out.
pub type Harness = fn(&[u8]);

/// Every harness, by the name of its target (and of its corpus directory).
pub const TARGETS: &[(&str, Harness)] = &[
    ("array_record_read", array_record::read),
    ("array_record_roundtrip", array_record::roundtrip),
    ("array_record_chunk", array_record::chunk),
    ("row_decode", row::decode),
    ("row_roundtrip", row::roundtrip),
    ("parquet_input", parquet::input),
    ("parquet_footer", parquet::footer),
    ("arrow_schema", parquet::arrow_schema),
    ("py_json", json::py_json),
    ("json_record", json::json_record),
    ("whole_gzip", lines::whole_gzip),
    ("line_reader", lines::line_reader),
    ("atlas_lines", lines::atlas_lines),
    ("manifest", engine::manifest),
    ("wire", engine::wire),
    ("job_file", engine::job_file),
];

/// The harness of target `name`.
pub fn harness(name: &str) -> Option<Harness> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// The first byte of `data` (0 when empty) and the rest: how a harness takes its
/// options from its input.
fn split_first(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((&b, rest)) => (b, rest),
        None => (0, data),
    }
}
