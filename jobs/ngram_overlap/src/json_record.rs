//! A JSONL line's text field and what its `id` is, decoded without the rest.
//!
//! A scan reads every training line for its text alone; the whole record is decoded
//! only for a document that overlaps (its id). [`light_record`] takes one of two
//! paths to the same answer:
//!
//! * the plain path ([`plain_record`]): an object whose top-level keys have no
//!   escapes and whose values, nested ones included (up to a depth of 32), are
//!   strings (without lone surrogate escapes), `true`, `false`, `null`, arrays, objects, and
//!   numbers that read the same whatever decodes them (at most 18 digits before the
//!   point and 18 after it, an exponent of at most 280; integers of up to 20 digits
//!   that msgpack holds), which is what training files hold: the text's string is scanned 16 bytes at a time for its end, borrowed from
//!   the line when it has no escape and decoded into a buffer the caller keeps when it
//!   has; every other value is only checked;
//! * Python's decoder ([`super::py_json::loads`], in [`general_record`]) for
//!   everything else, errors included: the plain path gives up at the first thing it
//!   does not take, so it never accepts a line Python's decoder refuses, and where it
//!   answers the other answers the same (a test compares them on random lines).
//!
//! Both say whether the record could be hashed (msgpack holds all its values), so a
//! row that has no id and cannot be hashed is rejected whether or not it overlaps.

use std::borrow::Cow;

use super::py_json::{loads, JsonError, PyValue};

/// Decodes `line` as a JSON object, keeping only its text field `text_field`, what
/// its `id` is and whether it could be hashed; an error if Python's `json.loads` does
/// not read it as a dict. A text with escapes may be decoded into `scratch` (a buffer
/// the caller keeps from line to line).
pub fn light_record<'a>(
    line: &'a str,
    text_field: &str,
    scratch: &'a mut String,
) -> Result<LightRecord<'a>, NotARecord> {
    match plain_record(line, text_field, scratch) {
        Some(record) => Ok(record),
        None => general_record(line, text_field),
    }
}

/// Why a line is not a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotARecord {
    /// Python's `json.loads` refuses it, or its text holds a lone surrogate (which
    /// no output can hold).
    NotJson(JsonError),
    /// JSON, but not an object.
    NotAnObject,
}

/// What kind of JSON value a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonKind {
    Null,
    /// A boolean or a number.
    Scalar,
    /// An array or an object.
    Compound,
}

/// A field's value: a string (borrowed from the line when it has no escapes) or
/// another kind.
#[derive(Debug, PartialEq, Eq)]
pub enum JsonValue<'a> {
    Str(Cow<'a, str>),
    Other(JsonKind),
}

/// What a record's `id` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// `null`: the record is identified by its hash, as without an `id`.
    Null,
    /// A string, a number or a boolean: its `str()` is the id.
    Printable,
    /// An array, an object, or a string with a lone surrogate: no id.
    Unusable,
}

/// Of a JSON object: its text field and what its `id` is (the last of each, as
/// Python's `json.loads` keeps the last of repeated keys), and whether msgpack can
/// encode the whole record (no integer outside msgpack's range, no string with a
/// lone surrogate), which a record without an id needs.
#[derive(Debug)]
pub struct LightRecord<'a> {
    pub text: Option<JsonValue<'a>>,
    pub id: Option<IdKind>,
    /// The `id` where it is a string without escapes (its `str()` is itself), from the
    /// plain path: an id read without decoding the record a second time.
    pub id_text: Option<&'a str>,
    pub hashable: bool,
    /// The whole record where the general path decoded it (so its id needs no second
    /// decode); `None` from the plain path.
    pub record: Option<PyValue>,
}

/// [`light_record`] by Python's decoder: any line, and the error for one that is not
/// a record. (Public, with [`plain_record`], so that the fuzz harness compares them.)
pub fn general_record<'a>(line: &'a str, text_field: &str) -> Result<LightRecord<'a>, NotARecord> {
    let value = loads(line).map_err(NotARecord::NotJson)?;
    if !matches!(value, PyValue::Dict(_)) {
        return Err(NotARecord::NotAnObject);
    }
    let text = match value.get(text_field) {
        None => None,
        Some(PyValue::Str(s)) => match s.as_str() {
            Some(t) => Some(JsonValue::Str(Cow::Owned(t.to_string()))),
            None => {
                return Err(NotARecord::NotJson(JsonError {
                    what: "a lone surrogate escape in the text",
                    at: 0,
                }))
            }
        },
        Some(PyValue::None) => Some(JsonValue::Other(JsonKind::Null)),
        Some(PyValue::List(_) | PyValue::Dict(_)) => Some(JsonValue::Other(JsonKind::Compound)),
        Some(_) => Some(JsonValue::Other(JsonKind::Scalar)),
    };
    let id = value.get("id").map(|id| match id {
        PyValue::None => IdKind::Null,
        PyValue::List(_) | PyValue::Dict(_) => IdKind::Unusable,
        PyValue::Str(s) if s.as_str().is_none() => IdKind::Unusable,
        _ => IdKind::Printable,
    });
    Ok(LightRecord {
        text,
        id,
        id_text: None,
        hashable: value.msgpack_encodable(),
        record: Some(value),
    })
}

/// Where the plain path found a value.
enum Found {
    /// A string: `line[start..end]` (no escapes).
    Line(usize, usize),
    /// A string with escapes, decoded into the scratch buffer.
    Scratch,
    Null,
    Scalar,
    Compound,
}

/// [`light_record`] for the lines it takes (see the module's doc); `None` for any
/// other line, valid or not.
pub fn plain_record<'a>(
    line: &'a str,
    text_field: &str,
    scratch: &'a mut String,
) -> Option<LightRecord<'a>> {
    let b = line.as_bytes();
    let mut at = skip_whitespace(b, 0);
    if b.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_whitespace(b, at + 1);
    let mut text = None;
    let mut id = None;
    let mut id_text = None;
    if b.get(at) == Some(&b'}') {
        at += 1;
    } else {
        loop {
            if b.get(at) != Some(&b'"') {
                return None;
            }
            let (key, end) = match string_value(line, at + 1, None)? {
                (Found::Line(start, end), after) => (line.get(start..end)?, after),
                _ => return None, // a key with escapes
            };
            at = skip_whitespace(b, end);
            if b.get(at) != Some(&b':') {
                return None;
            }
            at = skip_whitespace(b, at + 1);
            let is_text = key == text_field;
            let (value, end) = if b.get(at) == Some(&b'"') {
                string_value(line, at + 1, is_text.then_some(&mut *scratch))?
            } else {
                value_end(line, at, 0)?
            };
            if key == "id" {
                id_text = match value {
                    Found::Line(start, end) => Some(line.get(start..end)?),
                    _ => None,
                };
                id = Some(match value {
                    Found::Null => IdKind::Null,
                    Found::Compound => IdKind::Unusable,
                    _ => IdKind::Printable,
                });
            }
            if is_text {
                text = Some(value);
            }
            at = skip_whitespace(b, end);
            match b.get(at)? {
                b',' => at = skip_whitespace(b, at + 1),
                b'}' => {
                    at += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    if skip_whitespace(b, at) != b.len() {
        return None;
    }
    let text = match text {
        None => None,
        Some(Found::Line(start, end)) => Some(JsonValue::Str(Cow::Borrowed(line.get(start..end)?))),
        Some(Found::Scratch) => Some(JsonValue::Str(Cow::Borrowed(scratch.as_str()))),
        Some(Found::Null) => Some(JsonValue::Other(JsonKind::Null)),
        Some(Found::Scalar) => Some(JsonValue::Other(JsonKind::Scalar)),
        Some(Found::Compound) => Some(JsonValue::Other(JsonKind::Compound)),
    };
    Some(LightRecord {
        text,
        id,
        id_text,
        hashable: true,
        record: None,
    })
}

/// JSON's whitespace from `at` on: where it ends.
fn skip_whitespace(b: &[u8], mut at: usize) -> usize {
    while matches!(b.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// Where `word` (a literal) ends, if `b` holds it at `at`.
fn literal_end(b: &[u8], at: usize, word: &[u8]) -> Option<usize> {
    (b.get(at..at + word.len())? == word).then_some(at + word.len())
}

/// Nesting deeper than this is left to the general path (whose own limit is
/// [`super::py_json::MAX_NESTING`]).
const MAX_DEPTH: usize = 32;

/// The value starting at `at`, nested `depth` deep, checked but not decoded: what
/// kind it is and where it ends; `None` for one the plain path does not take.
fn value_end(line: &str, at: usize, depth: usize) -> Option<(Found, usize)> {
    let b = line.as_bytes();
    let scalar = |end| Some((Found::Scalar, end));
    match *b.get(at)? {
        b'"' => string_value(line, at + 1, None),
        b't' => scalar(literal_end(b, at, b"true")?),
        b'f' => scalar(literal_end(b, at, b"false")?),
        b'n' => Some((Found::Null, literal_end(b, at, b"null")?)),
        b'-' | b'0'..=b'9' => scalar(number_end(b, at)?),
        open @ (b'[' | b'{') if depth < MAX_DEPTH => {
            let close = if open == b'[' { b']' } else { b'}' };
            let mut at = skip_whitespace(b, at + 1);
            if b.get(at) == Some(&close) {
                return Some((Found::Compound, at + 1));
            }
            loop {
                if open == b'{' {
                    if b.get(at) != Some(&b'"') {
                        return None;
                    }
                    let (_, end) = string_value(line, at + 1, None)?;
                    at = skip_whitespace(b, end);
                    if b.get(at) != Some(&b':') {
                        return None;
                    }
                    at = skip_whitespace(b, at + 1);
                }
                let (_, end) = value_end(line, at, depth + 1)?;
                at = skip_whitespace(b, end);
                match *b.get(at)? {
                    b',' => at = skip_whitespace(b, at + 1),
                    c if c == close => return Some((Found::Compound, at + 1)),
                    _ => return None,
                }
            }
        }
        _ => None,
    }
}

/// Where a number starting at `at` ends, if it is one every decoder reads as a
/// finite value that msgpack holds: JSON's grammar with at most 18 digits before the
/// point and 18 after it and an exponent of at most 280 (so below 10^299), or an
/// integer of 19 or 20 digits within `-2**63 ..= 2**64 - 1` (ids and hashes); `None`
/// for anything else (what follows it is checked by the caller).
fn number_end(b: &[u8], at: usize) -> Option<usize> {
    let digits_from = |from: usize| {
        b.get(from..).map_or(0, |rest| {
            rest.iter().take_while(|c| c.is_ascii_digit()).count()
        })
    };
    let negative = b.get(at) == Some(&b'-');
    let mut end = at + usize::from(negative);
    let whole = digits_from(end);
    if whole == 0 || (whole > 1 && b[end] == b'0') {
        return None;
    }
    if whole > 18 {
        let after = end + whole;
        if whole > 20 || matches!(b.get(after), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let value: u64 = std::str::from_utf8(&b[end..after]).ok()?.parse().ok()?;
        return (!negative || value <= 1 << 63).then_some(after);
    }
    end += whole;
    if b.get(end) == Some(&b'.') {
        let fraction = digits_from(end + 1);
        if fraction == 0 || fraction > 18 {
            return None;
        }
        end += 1 + fraction;
    }
    if matches!(b.get(end), Some(b'e' | b'E')) {
        end += 1;
        if matches!(b.get(end), Some(b'+' | b'-')) {
            end += 1;
        }
        let digits = digits_from(end);
        if digits == 0 || digits > 3 {
            return None;
        }
        let exponent = b[end..end + digits]
            .iter()
            .fold(0u32, |v, &d| v * 10 + u32::from(d - b'0'));
        if exponent > 280 {
            return None;
        }
        end += digits;
    }
    Some(end)
}

/// The string whose contents start at `at` (after its opening quote): where they
/// are and where the string ends (after its closing quote). Escapes are decoded into
/// `decode` where given (cleared first), else only checked; `None` for a surrogate
/// escape that is not half of a pair, any other backslash, a control character or
/// no closing quote.
fn string_value(line: &str, at: usize, mut decode: Option<&mut String>) -> Option<(Found, usize)> {
    let b = line.as_bytes();
    let mut segment = at;
    let mut escaped = false;
    loop {
        let stop = string_stop(b, segment)?;
        let piece = line.get(segment..stop)?;
        match b[stop] {
            b'"' => {
                if !escaped {
                    return Some((Found::Line(at, stop), stop + 1));
                }
                if let Some(out) = decode.as_deref_mut() {
                    out.push_str(piece);
                }
                return Some((Found::Scratch, stop + 1));
            }
            b'\\' => {
                let (c, len) = match b.get(stop + 1)? {
                    b'u' => unicode_escape(b, stop)?,
                    simple => (simple_escape(*simple)?, 2),
                };
                if let Some(out) = decode.as_deref_mut() {
                    if !escaped {
                        out.clear();
                    }
                    out.push_str(piece);
                    out.push(c);
                }
                escaped = true;
                segment = stop + len;
            }
            _ => return None, // a control character
        }
    }
}

/// The character a one-letter escape (`\n`) stands for.
fn simple_escape(letter: u8) -> Option<char> {
    Some(match letter {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        _ => return None,
    })
}

/// The character of the `\u` escape at `at` (a pair of them for a character beyond
/// the BMP) and the escape's length; `None` for a surrogate that is not half of a
/// pair (the general path keeps it, as Python does) or anything that is not four hex
/// digits.
fn unicode_escape(b: &[u8], at: usize) -> Option<(char, usize)> {
    let hex = |at: usize| {
        let digits = std::str::from_utf8(b.get(at..at + 4)?).ok()?;
        if !digits.bytes().all(|d| d.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(digits, 16).ok()
    };
    let unit = hex(at + 2)?;
    match unit {
        0xd800..=0xdbff => {
            if b.get(at + 6..at + 8)? != b"\\u" {
                return None;
            }
            let low = hex(at + 8).filter(|low| (0xdc00..=0xdfff).contains(low))?;
            let c = 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
            Some((char::from_u32(c)?, 12))
        }
        0xdc00..=0xdfff => None,
        _ => Some((char::from_u32(unit)?, 6)),
    }
}

/// The first byte from `at` on that ends a plain stretch of a JSON string: a quote,
/// a backslash or a control character (below 0x20).
fn string_stop(b: &[u8], at: usize) -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        // SAFETY: the build targets processors with SSE2 (the cfg above).
        unsafe { sse2::string_stop(b, at) }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    {
        string_stop_bytewise(b, at)
    }
}

/// [`string_stop`] a byte at a time: the portable version and the tests' reference.
fn string_stop_bytewise(b: &[u8], at: usize) -> Option<usize> {
    let rest = b.get(at..)?;
    rest.iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|k| at + k)
}

/// The byte range of the value of top-level key `field` in `line`, a JSON object
/// Python's `json.loads` reads (the last of repeated keys, as it keeps): where the
/// cleaning pass puts a document's new text, leaving every other byte of the line as
/// it was. `None` if `line` is not such an object or has no such key.
pub fn field_value_span(line: &str, field: &str) -> Option<std::ops::Range<usize>> {
    let b = line.as_bytes();
    let skip_space = |mut at: usize| {
        while matches!(b.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            at += 1;
        }
        at
    };
    let mut at = skip_space(0);
    if b.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_space(at + 1);
    let mut found = None;
    if b.get(at) == Some(&b'}') {
        return None;
    }
    loop {
        let key_end = json_string_end(b, at)?;
        let key = &line[at..key_end];
        let is_field = if key[1..key.len() - 1].contains('\\') {
            serde_json::from_str::<String>(key).is_ok_and(|k| k == field)
        } else {
            &key[1..key.len() - 1] == field
        };
        at = skip_space(key_end);
        if b.get(at) != Some(&b':') {
            return None;
        }
        let start = skip_space(at + 1);
        let end = json_value_end(b, start)?;
        if is_field {
            found = Some(start..end);
        }
        at = skip_space(end);
        match b.get(at) {
            Some(b',') => at = skip_space(at + 1),
            Some(b'}') => return found,
            _ => return None,
        }
    }
}

/// The end (one past the closing quote) of the JSON string at `at`.
fn json_string_end(b: &[u8], at: usize) -> Option<usize> {
    if b.get(at) != Some(&b'"') {
        return None;
    }
    let mut i = at + 1;
    while let Some(&c) = b.get(i) {
        match c {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The end of the JSON value at `at` (Python's: `NaN` and `Infinity` included).
fn json_value_end(b: &[u8], at: usize) -> Option<usize> {
    match b.get(at)? {
        b'"' => json_string_end(b, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            while let Some(&c) = b.get(i) {
                match c {
                    b'"' => {
                        i = json_string_end(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let len = b[at..]
                .iter()
                .position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                .unwrap_or(b.len() - at);
            (len > 0).then_some(at + len)
        }
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod sse2 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };

    /// [`super::string_stop`], 16 bytes per step.
    #[target_feature(enable = "sse2")]
    pub(super) fn string_stop(b: &[u8], mut at: usize) -> Option<usize> {
        while let Some(part) = b.get(at..at + 16) {
            // SAFETY: `part` is 16 readable bytes; the load has no alignment need.
            let v = unsafe { _mm_loadu_si128(part.as_ptr().cast::<__m128i>()) };
            let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
            let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
            // v ≤ 0x1f exactly where min(v, 0x1f) = v (unsigned).
            let control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
            let stops = _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control));
            if stops != 0 {
                return Some(at + stops.trailing_zeros() as usize);
            }
            at += 16;
        }
        super::string_stop_bytewise(b, at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn light_record(line: &str, text_field: &str) -> Result<LightRecord<'static>, NotARecord> {
        let mut scratch = String::new();
        let record = super::light_record(line, text_field, &mut scratch)?;
        Ok(LightRecord {
            text: record.text.map(|t| match t {
                JsonValue::Str(s) => JsonValue::Str(Cow::Owned(s.into_owned())),
                JsonValue::Other(k) => JsonValue::Other(k),
            }),
            id: record.id,
            id_text: None,
            hashable: record.hashable,
            record: record.record,
        })
    }

    #[test]
    fn an_id_read_as_is_is_the_last_ids_string_without_escapes() {
        let id_text = |line: &str| {
            let mut scratch = String::new();
            super::light_record(line, "text", &mut scratch)
                .unwrap()
                .id_text
                .map(str::to_string)
        };
        assert_eq!(
            id_text(r#"{"id": "a-1", "text": "t"}"#).as_deref(),
            Some("a-1")
        );
        assert_eq!(
            id_text(r#"{"id": "x", "text": "t", "id": "y"}"#).as_deref(),
            Some("y")
        );
        // Left to the whole decode (and Python's str()): escapes, numbers, a later
        // id of another kind, and lines only the general path reads.
        for line in [
            r#"{"id": "a\"b", "text": "t"}"#,
            r#"{"id": "\u00e9", "text": "t"}"#,
            r#"{"id": 7, "text": "t"}"#,
            r#"{"id": "x", "text": "t", "id": 1.5}"#,
            r#"{"id": null, "text": "t"}"#,
            r#"{"text": "t"}"#,
            r#"{"\u0069d": "x", "text": "t"}"#,
        ] {
            assert_eq!(id_text(line), None, "{line}");
        }
    }

    #[test]
    fn the_light_decode_keeps_the_text_and_the_ids_kind_as_python_would() {
        let text = |line: &str| match light_record(line, "text").unwrap().text {
            Some(JsonValue::Str(s)) => Some(s.into_owned()),
            _ => None,
        };
        assert_eq!(
            text(r#"{"a": [1, {"b": 2}], "text": "plain"}"#).as_deref(),
            Some("plain")
        );
        assert_eq!(
            text(r#"{"text": "tab\there \u00e9 \ud83d\ude00"}"#).as_deref(),
            Some("tab\there é 😀")
        );
        // Repeated keys: the last one (json.loads keeps the last).
        assert_eq!(
            text(r#"{"text": "first", "text": "last"}"#).as_deref(),
            Some("last")
        );
        let light = light_record(r#"{"text": null, "id": {"x": 1}}"#, "text").unwrap();
        assert_eq!(light.text, Some(JsonValue::Other(JsonKind::Null)));
        assert_eq!(light.id, Some(IdKind::Unusable));
        let light = light_record(r#"{"id": 7, "body": "x"}"#, "text").unwrap();
        assert!(light.text.is_none());
        assert_eq!(light.id, Some(IdKind::Printable));
        let light = light_record(r#"{"id": null, "text": "x", "n": -0}"#, "text").unwrap();
        assert_eq!(light.id, Some(IdKind::Null));
        assert!(light.hashable);
        // What Python reads and a general-purpose decoder refuses.
        for line in [
            r#"{"text": "x", "n": NaN, "m": [Infinity, -Infinity]}"#,
            r#"{"text": "x", "n": 1.7976931348623158e308, "m": 1e400}"#,
        ] {
            assert!(light_record(line, "text").unwrap().hashable, "{line}");
        }
        // Python reads these, but msgspec cannot encode them: a record without an id
        // cannot be hashed; one with an id is fine.
        for line in [
            r#"{"text": "x", "n": 18446744073709551616}"#,
            r#"{"text": "x", "meta": "\ud800"}"#,
        ] {
            let light = light_record(line, "text").unwrap();
            assert!(!light.hashable, "{line}");
            assert_eq!(light.text, Some(JsonValue::Str("x".into())));
        }
        let light = light_record(r#"{"id": "\udc00", "text": "x"}"#, "text").unwrap();
        assert_eq!(light.id, Some(IdKind::Unusable));
        assert!(matches!(
            light_record(r#"{"text": "lone \ud800"}"#, "text"),
            Err(NotARecord::NotJson(_))
        ));
        assert_eq!(
            light_record("[1]", "text").unwrap_err(),
            NotARecord::NotAnObject
        );
        // The text field named "id" is both.
        let light = light_record(r#"{"id": "abc"}"#, "id").unwrap();
        assert_eq!(light.text, Some(JsonValue::Str("abc".into())));
        for bad in [
            r#"[1, 2]"#,
            r#""text""#,
            r#"{"text": "x"} trailing"#,
            r#"{"text": "x""#,
        ] {
            assert!(light_record(bad, "text").is_err(), "{bad}");
        }
    }

    /// A random line of JSON-like text: objects with the keys and values training files
    /// hold, and what the plain path must leave to the general path (escaped keys, `\\u` escapes,
    /// floats, long and malformed numbers, nesting, control characters, broken
    /// structure, truncation).
    fn random_line(state: &mut u64) -> String {
        let mut next = |n: u64| {
            *state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*state >> 33) % n) as usize
        };
        const KEYS: [&str; 6] = [
            "\"text\"",
            "\"id\"",
            "\"meta\"",
            "\"te\\u0078t\"",
            "\"\"",
            "\"t\\\"x\"",
        ];
        const PIECES: [&str; 29] = [
            "plain words",
            " ",
            "é😀",
            "\\n",
            "\\t",
            "\\\"",
            "\\\\",
            "\\/",
            "\\b",
            "\\f",
            "\\r",
            "\\u0041",
            "\\uDC00",
            "\\ud83d\\u0041",
            "\\u00E9",
            "\\u12",
            "\\uzzzz",
            "\\u+123",
            "\\u00e9",
            "\\ud83d\\ude00",
            "\\ud800",
            "\\x",
            "\u{1}",
            "\t",
            "\u{7f}",
            "abcdefghijklmnopqrstu",
            "0123456789",
            "{}[]:,",
            "\\",
        ];
        const VALUES: [&str; 65] = [
            "{\"a\": 1]",
            "[1}",
            "{\"a\"}",
            "[\"x\": 1]",
            "1.",
            "-1. ",
            "1.5e3",
            "-0.0",
            "1e280",
            "-2E+280",
            "1e281",
            "1e301",
            "1.5e",
            "1e-400",
            "0.123456789012345678",
            "0.1234567890123456789",
            "1.e5",
            ".5",
            "+1",
            "1e0001",
            "[1.5, -2e10, {\"x\": [true, null, \"s\\n\"]}]",
            "[1,]",
            "{\"a\" 1}",
            "{\"a\": 1,}",
            "[\"\\ud800\"]",
            "{\"k\\u0041\": 1}",
            "[1 2]",
            "{1: 2}",
            "0",
            "-0",
            "7",
            "-42",
            "123456789012345678",
            "1234567890123456789",
            "99999999999999999999",
            "18446744073709551615",
            "-9223372036854775808",
            "-9223372036854775809",
            "12345678901234567890.5",
            "1234567890123456789e2",
            "01",
            "1.5",
            "1e400",
            "1e5",
            "-",
            "true",
            "false",
            "null",
            "nul",
            "tru",
            "[1, 2]",
            "{\"a\": \"b\"}",
            "[]",
            "{}",
            "\"\"",
            "-01",
            "2 3",
            "NaN",
            "-Infinity",
            "Infinity",
            "1.7976931348623158e308",
            "18446744073709551616",
            "-9223372036854775809",
            "[\"\\udc00\"]",
            "nan",
        ];
        const SPACE: [&str; 5] = ["", " ", "\t", "\r\n", "  "];
        let mut line = String::from(SPACE[next(5)]);
        line.push('{');
        let members = next(5);
        for m in 0..members {
            if m > 0 {
                line.push_str(if next(40) == 0 { "" } else { "," });
            }
            line.push_str(SPACE[next(5)]);
            line.push_str(KEYS[next(6)]);
            line.push_str(SPACE[next(5)]);
            line.push(':');
            line.push_str(SPACE[next(5)]);
            if next(2) == 0 {
                line.push('"');
                for _ in 0..next(12) {
                    line.push_str(PIECES[next(29)]);
                }
                if next(30) != 0 {
                    line.push('"');
                }
            } else if next(50) == 0 {
                // An integer out of every decoder's range.
                line.push_str(&"9".repeat(400));
            } else if next(50) == 0 {
                // Nesting around the plain path's limit and around Python's.
                let depth = [30, super::super::py_json::MAX_NESTING - 2][next(2)] + next(4);
                line.push_str(&"[".repeat(depth));
                line.push_str(&"]".repeat(depth));
            } else {
                line.push_str(VALUES[next(65)]);
            }
            line.push_str(SPACE[next(5)]);
        }
        if next(30) == 0 {
            line.push(',');
        }
        line.push('}');
        line.push_str(SPACE[next(5)]);
        match next(30) {
            0 => line.push_str(" x"),
            1 => line.push('}'),
            2 => {
                let cut = next(line.len() as u64 + 1);
                while !line.is_char_boundary(cut.min(line.len())) {
                    line.pop();
                }
                line.truncate(cut.min(line.len()));
            }
            _ => {}
        }
        line
    }

    #[test]
    fn the_plain_path_answers_only_as_python_does() {
        let mut state = 0x0dd_ba11_u64;
        let mut scratch = String::new();
        let (mut plain, mut nested, mut general_only, mut refused) = (0, 0, 0, 0);
        for _ in 0..200_000 {
            let line = random_line(&mut state);
            for field in ["text", "id"] {
                let by_python = general_record(&line, field);
                let Some(fast) = plain_record(&line, field, &mut scratch) else {
                    match by_python {
                        Ok(_) => general_only += 1,
                        Err(_) => refused += 1,
                    }
                    continue;
                };
                plain += 1;
                let by_python = by_python
                    .unwrap_or_else(|e| panic!("{line:?}: Python's decoder refuses it: {e:?}"));
                assert_eq!(fast.text, by_python.text, "{line:?} {field}");
                assert_eq!(fast.id, by_python.id, "{line:?} {field}");
                assert_eq!(fast.hashable, by_python.hashable, "{line:?} {field}");
                let value = loads(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
                let PyValue::Dict(items) = &value else {
                    panic!("{line:?}: not a dict")
                };
                nested += usize::from(
                    items
                        .iter()
                        .any(|(_, v)| matches!(v, PyValue::List(_) | PyValue::Dict(_))),
                );
            }
        }
        // Each path is taken often, so the comparison means something.
        assert!(
            plain > 50_000 && nested > 2_000 && general_only > 20_000 && refused > 20_000,
            "{plain} {nested} {general_only} {refused}"
        );
    }

    #[test]
    fn a_string_stops_at_a_quote_a_backslash_or_a_control_character() {
        let mut state = 11u64;
        for _ in 0..20_000 {
            let len = (state >> 58) as usize + 20;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    // Mostly letters, sometimes a stop or a byte near one.
                    match (state >> 40) % 64 {
                        0 => b'"',
                        1 => b'\\',
                        2 => (state >> 20) as u8 & 0x1f,
                        3 => 0x20,
                        4 => 0x80 | (state >> 24) as u8,
                        _ => b'a' + ((state >> 30) % 26) as u8,
                    }
                })
                .collect();
            for at in 0..=bytes.len().min(20) {
                assert_eq!(
                    string_stop(&bytes, at),
                    string_stop_bytewise(&bytes, at),
                    "{bytes:?} {at}"
                );
            }
        }
    }

    #[test]
    fn a_fields_value_is_found_where_python_reads_it() {
        fn span<'l>(line: &'l str, field: &str) -> Option<&'l str> {
            field_value_span(line, field).map(|r| &line[r])
        }
        assert_eq!(
            span(r#"{"text": "a b", "id": 3}"#, "text"),
            Some(r#""a b""#)
        );
        assert_eq!(span(r#"{"id":3,"text":"x"}"#, "text"), Some(r#""x""#));
        // The last of repeated keys; keys inside nested values are not the field.
        assert_eq!(
            span(
                r#"{"text": 1, "m": {"text": "no"}, "l": ["text", {"text": 2}], "text": "yes"}"#,
                "text"
            ),
            Some(r#""yes""#)
        );
        // Escapes in the value and in the key; Python's literals; odd whitespace.
        assert_eq!(
            span("{\"t\\u0065xt\" :\t\"q \\\" \\\\\" ,\"n\": NaN}", "text"),
            Some("\"q \\\" \\\\\"")
        );
        assert_eq!(
            span(r#"{"a": -Infinity, "text": "z"}  "#, "text"),
            Some(r#""z""#)
        );
        assert_eq!(span(r#"{"text": null}"#, "text"), Some("null"));
        assert_eq!(span(r#"{"other": "x"}"#, "text"), None);
        assert_eq!(span(r#"["text", "x"]"#, "text"), None);
        assert_eq!(span(r#"{}"#, "text"), None);
        // Every line the tests' corpus writes, against the decoder: the span holds
        // the text the record has.
        let mut scratch = String::new();
        for line in [
            r#"{"id": "d1", "text": "caf\u00e9 \"q\"", "x": [1, {"text": "n"}]}"#,
            r#"{"text": "ΟΔΟΣ", "meta": {"n": 1, "f": 0.14285714285714285}, "ünï": "ké"}"#,
        ] {
            let light = super::light_record(line, "text", &mut scratch).unwrap();
            let Some(JsonValue::Str(text)) = light.text else {
                panic!("{line}")
            };
            let raw = span(line, "text").unwrap();
            assert_eq!(serde_json::from_str::<String>(raw).unwrap(), text);
        }
    }
}
