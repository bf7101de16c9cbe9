//! Who a record is: the eval dataset a file belongs to, a record's id, and the stable
//! hash that partitions n-grams, each exactly as the Python pipeline of the design
//! notes computes it.
//!
//! * [`eval_dataset_name`]: the last component of an eval input's path, without glob
//!   or file extensions, minus a `-` + 6-hex-digit suffix (the executor's hash), then
//!   minus a trailing `-dolma`.
//! * [`record_id`]: the record's `id` when present, else the decimal value of
//!   `blake2b(msgpack(record), digest_size=8)` read big-endian, where the msgpack is
//!   what `msgspec.msgpack.encode(record, order="deterministic")` writes (map keys
//!   sorted, every integer in its smallest encoding, every float as float64).
//! * [`stable_hash`]: `blake2b(text.encode(), digest_size=8)` read big-endian.

use super::py_json::{float_repr, PyStr, PyValue};
use blake2::digest::consts::U8;
use blake2::{Blake2b, Digest};

use probeflow_engine::error::{EngineError, Fault, KindError, Result};

type Blake2b64 = Blake2b<U8>;

/// `int.from_bytes(hashlib.blake2b(bytes, digest_size=8).digest(), "big")`.
pub fn blake2b_u64(bytes: &[u8]) -> u64 {
    let digest = Blake2b64::digest(bytes);
    u64::from_be_bytes(digest.into())
}

/// The stable hash of a text (n-gram partitioning uses `"{n}:{ngram}"`).
pub fn stable_hash(text: &str) -> u64 {
    blake2b_u64(text.as_bytes())
}

/// The eval dataset an input path belongs to (see the module docs).
pub fn eval_dataset_name(path: &str) -> String {
    let trimmed = path.trim_end_matches('/');
    let last = trimmed
        .rsplit('/')
        .find(|c| !c.is_empty() && !c.contains(['*', '?', '[']))
        .unwrap_or(trimmed);
    let name = strip_any(last, &[".gz", ".zst"]);
    let name = strip_any(name, &[".jsonl", ".json", ".parquet"]);
    let name = match name.rsplit_once('-') {
        Some((stem, hash)) if hash.len() == 6 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            stem
        }
        _ => name,
    };
    name.strip_suffix("-dolma").unwrap_or(name).to_string()
}

/// `name` without the first of `suffixes` it ends with.
fn strip_any<'a>(name: &'a str, suffixes: &[&str]) -> &'a str {
    suffixes
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name)
}

/// A record the job cannot use: it is rejected (counted, and kept aside with its
/// reason), the job goes on; raised from a task, it is the input's fault.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// An id of no usable type (a list, a dict, a str with a lone surrogate).
    #[error("{0}")]
    BadId(String),
    /// A record without an id whose hash cannot be computed, because msgpack cannot
    /// encode one of its values (an integer outside `-2**63 ..= 2**64 - 1`, a string
    /// with a lone surrogate).
    #[error("{0}")]
    Unhashable(String),
}

impl KindError for RecordError {
    fn fault(&self) -> Fault {
        match self {
            RecordError::BadId(_) | RecordError::Unhashable(_) => Fault::Input,
        }
    }
}

impl From<RecordError> for EngineError {
    fn from(e: RecordError) -> Self {
        EngineError::Kind(Box::new(e))
    }
}

/// A record's id (a Python dict from [`super::py_json::loads`] or a Parquet row): its
/// `id` when present and not None, as Python's `str()` prints it (a str as is, an
/// int in decimal, a float as `repr` writes it, a bool as `True`/`False`), else the
/// hash of its deterministic msgpack encoding. An `id` that is a list, a dict or a
/// str with a lone surrogate is [`RecordError::BadId`]; a record to hash that
/// msgpack cannot encode is [`RecordError::Unhashable`].
pub fn record_id(record: &PyValue) -> Result<String> {
    match record.get("id") {
        Some(PyValue::None) | None => {
            let mut bytes = Vec::new();
            encode_msgpack(&mut bytes, record)?;
            Ok(blake2b_u64(&bytes).to_string())
        }
        Some(id) => python_str(id).ok_or_else(|| {
            EngineError::from(RecordError::BadId(format!(
                "a record's id must be a string, a number or a boolean, got {id:?}"
            )))
        }),
    }
}

/// Python's `str()` of a scalar value; `None` for a list, a dict, None, or a str no
/// Rust string can hold.
pub fn python_str(value: &PyValue) -> Option<String> {
    Some(match value {
        PyValue::Str(s) => s.as_str()?.to_string(),
        PyValue::Int(i) => i.to_string(),
        PyValue::BigInt(digits) => digits.to_string(),
        PyValue::Float(f) => float_repr(*f),
        PyValue::Bool(b) => if *b { "True" } else { "False" }.to_string(),
        PyValue::None | PyValue::List(_) | PyValue::Dict(_) => return None,
    })
}

/// msgspec's deterministic msgpack encoding of a value, appended to `out`. Nested
/// values are encoded from a stack on the heap, depth first, as a recursive encoder
/// would (and failing at the same value).
pub fn encode_msgpack(out: &mut Vec<u8>, value: &PyValue) -> Result<()> {
    /// What is left to write: a value, or a dict's key before its value.
    enum Next<'a> {
        Value(&'a PyValue),
        Key(&'a PyStr),
    }
    let unhashable = |what: String| EngineError::from(RecordError::Unhashable(what));
    let mut pending = vec![Next::Value(value)];
    while let Some(next) = pending.pop() {
        let value = match next {
            Next::Key(k) => {
                encode_str(out, py_str(k)?);
                continue;
            }
            Next::Value(v) => v,
        };
        match value {
            PyValue::None => out.push(0xc0),
            PyValue::Bool(false) => out.push(0xc2),
            PyValue::Bool(true) => out.push(0xc3),
            PyValue::Int(i) => {
                if let Ok(u) = u64::try_from(*i) {
                    encode_uint(out, u);
                } else if let Ok(i) = i64::try_from(*i) {
                    encode_int(out, i);
                } else {
                    return Err(unhashable(format!(
                        "the integer {i} is outside msgpack's range"
                    )));
                }
            }
            PyValue::BigInt(digits) => {
                return Err(unhashable(format!(
                    "an integer of {} digits is outside msgpack's range",
                    digits.trim_start_matches('-').len()
                )))
            }
            PyValue::Float(f) => {
                out.push(0xcb);
                out.extend_from_slice(&f.to_be_bytes());
            }
            PyValue::Str(s) => encode_str(out, py_str(s)?),
            PyValue::List(items) => {
                encode_len(out, items.len(), 0x90, 15, 0xdc, 0xdd)?;
                pending.extend(items.iter().rev().map(Next::Value));
            }
            PyValue::Dict(items) => {
                // Python sorts str keys by code point (the order of their bytes); a
                // dict holds the last of repeated keys.
                let mut keys: Vec<(&PyStr, &PyValue)> =
                    items.iter().rev().map(|(k, v)| (k, v)).collect();
                keys.sort_by(|a, b| a.0.cmp(b.0));
                keys.dedup_by(|next, kept| next.0 == kept.0);
                encode_len(out, keys.len(), 0x80, 15, 0xde, 0xdf)?;
                for (k, v) in keys.into_iter().rev() {
                    pending.push(Next::Value(v));
                    pending.push(Next::Key(k));
                }
            }
        }
    }
    Ok(())
}

/// A str msgpack can hold (UTF-8): one with a lone surrogate cannot be encoded.
fn py_str(s: &PyStr) -> Result<&str> {
    s.as_str().ok_or_else(|| {
        EngineError::from(RecordError::Unhashable(format!(
            "the string {s:?} holds a lone surrogate, which UTF-8 cannot encode"
        )))
    })
}

fn encode_len(
    out: &mut Vec<u8>,
    len: usize,
    fix: u8,
    fix_max: usize,
    m16: u8,
    m32: u8,
) -> Result<()> {
    if len <= fix_max {
        out.push(fix | len as u8);
    } else if let Ok(l) = u16::try_from(len) {
        out.push(m16);
        out.extend_from_slice(&l.to_be_bytes());
    } else if let Ok(l) = u32::try_from(len) {
        out.push(m32);
        out.extend_from_slice(&l.to_be_bytes());
    } else {
        return Err(EngineError::from(RecordError::BadId(format!(
            "a collection of {len} items is too large for msgpack"
        ))));
    }
    Ok(())
}

fn encode_str(out: &mut Vec<u8>, s: &str) {
    let len = s.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len < 256 {
        out.extend_from_slice(&[0xd9, len as u8]);
    } else if let Ok(l) = u16::try_from(len) {
        out.push(0xda);
        out.extend_from_slice(&l.to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(s.as_bytes());
}

fn encode_uint(out: &mut Vec<u8>, u: u64) {
    if u < 128 {
        out.push(u as u8);
    } else if let Ok(v) = u8::try_from(u) {
        out.extend_from_slice(&[0xcc, v]);
    } else if let Ok(v) = u16::try_from(u) {
        out.push(0xcd);
        out.extend_from_slice(&v.to_be_bytes());
    } else if let Ok(v) = u32::try_from(u) {
        out.push(0xce);
        out.extend_from_slice(&v.to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&u.to_be_bytes());
    }
}

fn encode_int(out: &mut Vec<u8>, i: i64) {
    if i >= 0 {
        encode_uint(out, i as u64);
    } else if i >= -32 {
        out.push(i as i8 as u8);
    } else if let Ok(v) = i8::try_from(i) {
        out.extend_from_slice(&[0xd0, v as u8]);
    } else if let Ok(v) = i16::try_from(i) {
        out.push(0xd1);
        out.extend_from_slice(&v.to_be_bytes());
    } else if let Ok(v) = i32::try_from(i) {
        out.push(0xd2);
        out.extend_from_slice(&v.to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&i.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(json: &str) -> PyValue {
        super::super::py_json::loads(json).unwrap()
    }

    /// Bytes and ids written by Python: `msgspec.msgpack.encode(r, order="deterministic")`
    /// and `int.from_bytes(hashlib.blake2b(b, digest_size=8).digest(), "big")`.
    #[test]
    fn encoding_and_ids_match_msgspec_and_hashlib() {
        let cases = [
            (
                r#"{"text": "Hello", "b": 1, "a": [1, -1, 2.5, null, true, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"], "nested": {"z": 1, "y": -200, "x": 70000}}"#,
                "84a1619601ffcb4004000000000000c0c3d92878787878787878787878787878787878787878787878787878787878787878787878787878787878a16201a66e657374656483a178ce00011170a179d1ff38a17a01a474657874a548656c6c6f",
                "10653769399624867667",
            ),
            (
                r#"{"text": "", "n": 1099511627776, "m": -1099511627776, "big": 9223372036854775813, "f": 1.0, "e": "é𝄞", "lst": [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19]}"#,
                "87a3626967cf8000000000000005a165a6c3a9f09d849ea166cb3ff0000000000000a36c7374dc0014000102030405060708090a0b0c0d0e0f10111213a16dd3ffffff0000000000a16ecf0000010000000000a474657874a0",
                "1725810642314206309",
            ),
            ("{}", "80", "2685031857179835272"),
        ];
        for (json, hex, id) in cases {
            let record = object(json);
            let mut bytes = Vec::new();
            encode_msgpack(&mut bytes, &record).unwrap();
            let got: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(got, hex, "{json}");
            assert_eq!(record_id(&record).unwrap(), id, "{json}");
        }
    }

    #[test]
    fn an_id_field_wins() {
        assert_eq!(
            record_id(&object(r#"{"id": "q-17", "text": "x"}"#)).unwrap(),
            "q-17"
        );
        assert_eq!(
            record_id(&object(r#"{"id": 17, "text": "x"}"#)).unwrap(),
            "17"
        );
        assert!(record_id(&object(r#"{"id": [1], "text": "x"}"#)).is_err());
        // As Python's str() prints them (checked against Python 3.11).
        for (id, want) in [
            ("-0", "0"),
            ("-0.0", "-0.0"),
            ("1E2", "100.0"),
            ("1e16", "1e+16"),
            ("2.5e-7", "2.5e-07"),
            ("1e400", "inf"),
            ("NaN", "nan"),
            ("true", "True"),
            (
                "123456789012345678901234567890123456789012",
                "123456789012345678901234567890123456789012",
            ),
        ] {
            let record = object(&format!(r#"{{"id": {id}, "text": "x"}}"#));
            assert_eq!(record_id(&record).unwrap(), want, "{id}");
        }
        assert!(record_id(&object(r#"{"id": "\ud800", "text": "x"}"#)).is_err());
    }

    #[test]
    fn repeated_keys_hash_as_the_dict_python_keeps() {
        // msgspec.msgpack.encode(json.loads('{"b": 1, "a": 2, "b": 3}'), order="deterministic")
        let mut bytes = Vec::new();
        encode_msgpack(&mut bytes, &object(r#"{"b": 1, "a": 2, "b": 3}"#)).unwrap();
        assert_eq!(bytes, b"\x82\xa1a\x02\xa1b\x03");
    }

    #[test]
    fn what_msgpack_cannot_hold_is_unhashable() {
        for json in [
            r#"{"text": "x", "n": 18446744073709551616}"#,
            r#"{"text": "x", "n": -9223372036854775809}"#,
            r#"{"text": "x", "s": ["\udfff"]}"#,
            r#"{"text": "x", "\ud800": 1}"#,
        ] {
            assert!(
                matches!(
                    record_id(&object(json)).map_err(|e| e
                        .kind_error::<RecordError>()
                        .map(|k| matches!(k, RecordError::Unhashable(_)))),
                    Err(Some(true))
                ),
                "{json}"
            );
        }
    }

    #[test]
    fn eval_dataset_names_follow_the_executor_rule() {
        for (path, name) in [
            ("gs://b/decontamination/mmlu-dolma-a1b2c3", "mmlu"),
            ("gs://b/decontamination/mmlu-dolma-a1b2c3/", "mmlu"),
            ("gs://b/decontamination/gsm8k-0f9e8d/*.jsonl.gz", "gsm8k"),
            ("/data/eval/hellaswag-dolma/test.jsonl", "test"),
            ("/data/eval/arc-easy-dolma", "arc-easy"),
            ("/data/eval/arc-easy-abcdefg", "arc-easy-abcdefg"),
            (
                "/data/eval/truthfulqa-dolma-xyz123",
                "truthfulqa-dolma-xyz123",
            ),
            ("s3://b/eval/mmlu.jsonl.zst", "mmlu"),
        ] {
            assert_eq!(eval_dataset_name(path), name, "{path}");
        }
    }

    #[test]
    fn stable_hash_is_blake2b_64_big_endian() {
        // int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "big")
        assert_eq!(stable_hash(""), 16_476_032_584_258_269_876);
        assert_eq!(stable_hash("15:the cat"), 8_926_863_062_111_522_128);
    }
}
