//! The overlap job's JSON: Python's `json.loads` rules (`py_json`), the msgpack hash
//! of a record, and the light decode's two paths, which must agree.

use probeflow_ngram_overlap::json_record::{general_record, plain_record};
use probeflow_ngram_overlap::py_json::{loads, PyValue};
use probeflow_ngram_overlap::records::{encode_msgpack, record_id};

use super::split_first;

/// Reads `data` (as UTF-8) with `py_json::loads`; a value is hashed as a record would
/// be, and msgpack refuses exactly what `msgpack_encodable` says it cannot hold.
pub fn py_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(value) = loads(text) else {
        return;
    };
    let mut packed = Vec::new();
    let encoded = encode_msgpack(&mut packed, &value);
    assert_eq!(
        encoded.is_ok(),
        value.msgpack_encodable(),
        "{text:?}: msgpack and msgpack_encodable disagree"
    );
    if matches!(value, PyValue::Dict(_)) {
        let _ = record_id(&value);
    }
}

/// The plain path and Python's path of the light decode, on line `data[1..]` and the
/// field `data[0]` picks: where the plain path answers, Python's answers the same.
pub fn json_record(data: &[u8]) {
    let (choice, rest) = split_first(data);
    let Ok(line) = std::str::from_utf8(rest) else {
        return;
    };
    let field = ["text", "id", "t"][usize::from(choice) % 3];
    let by_python = general_record(line, field);
    let mut scratch = String::new();
    let Some(fast) = plain_record(line, field, &mut scratch) else {
        return;
    };
    let by_python = match by_python {
        Ok(r) => r,
        Err(e) => panic!("{line:?}: the plain path took a line Python refuses: {e:?}"),
    };
    assert_eq!(fast.text, by_python.text, "{line:?} {field}");
    assert_eq!(fast.id, by_python.id, "{line:?} {field}");
    assert_eq!(fast.hashable, by_python.hashable, "{line:?} {field}");
}
