//! A JSON text read into exactly the values Python's `json.loads` gives, for the
//! records whose ids are hashed ([`super::records`]) and for every line the fast
//! decoder ([`super::json_record`]) does not take.
//!
//! ```text
//! line ─► loads ─► PyValue (None, bool, int, float, str, list, dict as Python holds them)
//!                     └─► records::record_id (str() of `id`, or msgpack + blake2b)
//! ```
//!
//! What differs from a general-purpose JSON decoder (serde's included), each as
//! CPython 3.11's `json` module does it:
//!
//! * an integer is an integer of any size ([`PyValue::Int`] or [`PyValue::BigInt`]);
//!   `-0` is the integer 0; more than [`MAX_INT_DIGITS`] digits is an error (Python's
//!   limit on integer string conversion);
//! * a number with a fraction or an exponent is the correctly rounded double, `inf`
//!   when it is beyond the largest (`1e400`), 0 or a subnormal below the smallest;
//! * `NaN`, `Infinity` and `-Infinity` are floats;
//! * a string is what Python's `str` holds, lone UTF-16 surrogate escapes included
//!   (`"\ud800"`): it is kept as WTF-8 ([`PyStr`]), which is UTF-8 exactly when it
//!   has none;
//! * repeated keys are all kept in order; [`PyValue::get`] and the msgpack encoder
//!   take the last, as a Python dict does.
//!
//! Nesting deeper than [`MAX_NESTING`] is an error (Python itself stops near 1 000
//! with a `RecursionError`, depending on its stack). Nothing here recurses per level
//! of nesting (the parser, the checks, the msgpack encoder and a value's drop keep
//! their own stacks on the heap), so the thread's stack does not bound what is read.

use std::fmt;

/// Python's default limit on the digits of an integer read from text
/// (`sys.get_int_max_str_digits()`): a longer one is a `ValueError` in `json.loads`.
pub const MAX_INT_DIGITS: usize = 4300;

/// The deepest nesting of arrays and objects read (see the module docs).
pub const MAX_NESTING: usize = 900;

/// A Python value as `json.loads` makes it. Dropped without recursion (see its `Drop`).
#[derive(Debug, Clone, PartialEq)]
pub enum PyValue {
    None,
    Bool(bool),
    /// An int within `i128`.
    Int(i128),
    /// An int beyond `i128`: its decimal digits, with `-` when negative.
    BigInt(Box<str>),
    Float(f64),
    Str(PyStr),
    List(Vec<PyValue>),
    /// Every key and value in the order read, repeated keys included.
    Dict(Vec<(PyStr, PyValue)>),
}

impl PyValue {
    /// The value of `key` in a dict (the last of repeated ones, as a dict keeps it);
    /// `None` for a missing key or a value that is not a dict.
    pub fn get(&self, key: &str) -> Option<&PyValue> {
        match self {
            PyValue::Dict(items) => items
                .iter()
                .rev()
                .find(|(k, _)| k.as_bytes() == key.as_bytes())
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// Whether `msgspec.msgpack.encode` can write the value: no int outside
    /// `-2**63 ..= 2**64 - 1` and no str (key or value) holding a lone surrogate.
    pub fn msgpack_encodable(&self) -> bool {
        let mut pending = vec![self];
        while let Some(value) = pending.pop() {
            let encodable = match value {
                PyValue::None | PyValue::Bool(_) | PyValue::Float(_) => true,
                PyValue::Int(i) => (MSGPACK_MIN_INT..=MSGPACK_MAX_INT).contains(i),
                PyValue::BigInt(_) => false,
                PyValue::Str(s) => s.as_str().is_some(),
                PyValue::List(items) => {
                    pending.extend(items.iter());
                    true
                }
                PyValue::Dict(items) => {
                    // Of repeated keys only the last value is in the dict Python keeps.
                    let mut seen = std::collections::HashSet::with_capacity(items.len());
                    let mut keys_ok = true;
                    for (k, v) in items.iter().rev().filter(|(k, _)| seen.insert(k)) {
                        keys_ok &= k.as_str().is_some();
                        pending.push(v);
                    }
                    keys_ok
                }
            };
            if !encodable {
                return false;
            }
        }
        true
    }

    /// The children of a list or a dict, taken out (empty for any other value).
    fn take_children(&mut self, into: &mut Vec<PyValue>) {
        match self {
            PyValue::List(items) => into.append(items),
            PyValue::Dict(items) => into.extend(std::mem::take(items).into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }

    fn is_container(&self) -> bool {
        matches!(self, PyValue::List(_) | PyValue::Dict(_))
    }
}

impl Drop for PyValue {
    /// Drops nested lists and dicts from a stack on the heap: the compiler's drop
    /// would recurse once per level.
    fn drop(&mut self) {
        let nested = match self {
            PyValue::List(items) => items.iter().any(PyValue::is_container),
            PyValue::Dict(items) => items.iter().any(|(_, v)| v.is_container()),
            _ => false,
        };
        if !nested {
            return;
        }
        let mut pending = Vec::new();
        self.take_children(&mut pending);
        while let Some(mut value) = pending.pop() {
            // Each value leaves with its children taken: its own drop does not recurse.
            value.take_children(&mut pending);
        }
    }
}

/// The smallest int msgpack holds (`-2**63`).
pub const MSGPACK_MIN_INT: i128 = i64::MIN as i128;
/// The largest int msgpack holds (`2**64 - 1`).
pub const MSGPACK_MAX_INT: i128 = u64::MAX as i128;

/// A Python `str` as WTF-8: UTF-8, except that a lone surrogate (which only a `\u`
/// escape can make) is written as the three bytes UTF-8 would give its code point.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PyStr(Box<[u8]>);

impl PyStr {
    /// The string, or `None` when it holds a lone surrogate (no Rust string, and no
    /// UTF-8 encoder, can hold one).
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// Its WTF-8 bytes (ordered as Python orders strs: by code point).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl From<&str> for PyStr {
    fn from(s: &str) -> Self {
        PyStr(s.as_bytes().into())
    }
}

impl fmt::Debug for PyStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

/// Why a text is not JSON to Python, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} at byte {at}")]
pub struct JsonError {
    pub what: &'static str,
    pub at: usize,
}

/// `json.loads(text)`.
pub fn loads(text: &str) -> Result<PyValue, JsonError> {
    let mut p = Parser {
        b: text.as_bytes(),
        text,
        at: 0,
    };
    p.skip_whitespace();
    let value = p.value()?;
    p.skip_whitespace();
    if p.at != p.b.len() {
        return p.fail("extra data");
    }
    Ok(value)
}

/// A list or dict being read: its items so far (a dict: and the key whose value is
/// being read).
enum Open {
    List(Vec<PyValue>),
    Dict(Vec<(PyStr, PyValue)>, PyStr),
}

struct Parser<'a> {
    b: &'a [u8],
    text: &'a str,
    at: usize,
}

impl Parser<'_> {
    fn fail<T>(&self, what: &'static str) -> Result<T, JsonError> {
        Err(JsonError { what, at: self.at })
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.b.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// Takes `word` if the text holds it here.
    fn eat(&mut self, word: &[u8]) -> bool {
        let here = self.b.get(self.at..self.at + word.len()) == Some(word);
        if here {
            self.at += word.len();
        }
        here
    }

    /// The value at `self.at`: containers are kept open on a stack of their own, so
    /// that nesting takes no stack per level.
    fn value(&mut self) -> Result<PyValue, JsonError> {
        let mut open: Vec<Open> = Vec::new();
        loop {
            // A value starts here: a scalar, an empty container, or an opened one
            // whose first value comes next.
            let mut done = match self.b.get(self.at) {
                Some(b'{' | b'[') if open.len() >= MAX_NESTING => {
                    return self.fail("nested too deep")
                }
                Some(b'{') => {
                    self.at += 1;
                    self.skip_whitespace();
                    if self.eat(b"}") {
                        PyValue::Dict(Vec::new())
                    } else {
                        let key = self.key()?;
                        open.push(Open::Dict(Vec::new(), key));
                        continue;
                    }
                }
                Some(b'[') => {
                    self.at += 1;
                    self.skip_whitespace();
                    if self.eat(b"]") {
                        PyValue::List(Vec::new())
                    } else {
                        open.push(Open::List(Vec::new()));
                        continue;
                    }
                }
                _ => self.scalar()?,
            };
            // The value ends the containers it closes; then the next value starts.
            loop {
                let closes = match open.last_mut() {
                    None => return Ok(done),
                    Some(Open::List(items)) => {
                        items.push(done);
                        b"]"
                    }
                    Some(Open::Dict(items, key)) => {
                        items.push((std::mem::take(key), done));
                        b"}"
                    }
                };
                self.skip_whitespace();
                if !self.eat(closes) {
                    if !self.eat(b",") {
                        return self.fail("expecting ',' delimiter");
                    }
                    self.skip_whitespace();
                    if let Some(Open::Dict(_, key)) = open.last_mut() {
                        *key = self.key()?;
                    }
                    break;
                }
                done = match open.pop() {
                    Some(Open::List(items)) => PyValue::List(items),
                    Some(Open::Dict(items, _)) => PyValue::Dict(items),
                    None => return self.fail("expecting a value"),
                };
            }
        }
    }

    /// A dict's key and its `:`, the value's start next.
    fn key(&mut self) -> Result<PyStr, JsonError> {
        if !self.eat(b"\"") {
            return self.fail("expecting a property name in double quotes");
        }
        let key = self.string()?;
        self.skip_whitespace();
        if !self.eat(b":") {
            return self.fail("expecting ':' delimiter");
        }
        self.skip_whitespace();
        Ok(key)
    }

    /// A value that is no list or dict.
    fn scalar(&mut self) -> Result<PyValue, JsonError> {
        let Some(&c) = self.b.get(self.at) else {
            return self.fail("expecting a value");
        };
        match c {
            b'"' => {
                self.at += 1;
                Ok(PyValue::Str(self.string()?))
            }
            b'-' | b'0'..=b'9' => {
                if self.eat(b"-Infinity") {
                    return Ok(PyValue::Float(f64::NEG_INFINITY));
                }
                self.number()
            }
            _ if self.eat(b"null") => Ok(PyValue::None),
            _ if self.eat(b"true") => Ok(PyValue::Bool(true)),
            _ if self.eat(b"false") => Ok(PyValue::Bool(false)),
            _ if self.eat(b"NaN") => Ok(PyValue::Float(f64::NAN)),
            _ if self.eat(b"Infinity") => Ok(PyValue::Float(f64::INFINITY)),
            _ => self.fail("expecting a value"),
        }
    }

    /// A number by Python's grammar, `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`:
    /// an int without a fraction and an exponent, else a float.
    fn number(&mut self) -> Result<PyValue, JsonError> {
        let start = self.at;
        let digits = |b: &[u8], from: usize| {
            b.get(from..)
                .map_or(0, |r| r.iter().take_while(|c| c.is_ascii_digit()).count())
        };
        let negative = self.b[self.at] == b'-';
        self.at += usize::from(negative);
        let whole = digits(self.b, self.at);
        if whole == 0 {
            return self.fail("expecting a value");
        }
        // "01" reads as 0 followed by extra data, as in Python.
        self.at += if self.b[self.at] == b'0' { 1 } else { whole };
        let int_end = self.at;
        let mut is_float = false;
        if self.b.get(self.at) == Some(&b'.') && digits(self.b, self.at + 1) > 0 {
            self.at += 1 + digits(self.b, self.at + 1);
            is_float = true;
        }
        if matches!(self.b.get(self.at), Some(b'e' | b'E')) {
            let sign = usize::from(matches!(self.b.get(self.at + 1), Some(b'+' | b'-')));
            let exponent = digits(self.b, self.at + 1 + sign);
            if exponent > 0 {
                self.at += 1 + sign + exponent;
                is_float = true;
            }
        }
        let literal = &self.text[start..self.at];
        if is_float {
            // Rust's parse is correctly rounded, as Python's float() is, and gives
            // inf beyond the largest double and 0 below the smallest, as it does.
            return match literal.parse::<f64>() {
                Ok(f) => Ok(PyValue::Float(f)),
                Err(_) => Err(JsonError {
                    what: "not a number",
                    at: start,
                }),
            };
        }
        let int_digits = int_end - start - usize::from(negative);
        if int_digits > MAX_INT_DIGITS {
            return Err(JsonError {
                what: "an integer of more than 4300 digits (Python's limit)",
                at: start,
            });
        }
        Ok(match literal.parse::<i128>() {
            Ok(i) => PyValue::Int(i),
            Err(_) => PyValue::BigInt(literal.into()),
        })
    }

    /// The rest of a string whose opening quote is behind; decoded to WTF-8.
    fn string(&mut self) -> Result<PyStr, JsonError> {
        let mut out: Vec<u8> = Vec::new();
        loop {
            let rest = &self.b[self.at..];
            let Some(stop) = rest
                .iter()
                .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
            else {
                self.at = self.b.len();
                return self.fail("unterminated string");
            };
            out.extend_from_slice(&rest[..stop]);
            self.at += stop;
            match self.b[self.at] {
                b'"' => {
                    self.at += 1;
                    return Ok(PyStr(out.into_boxed_slice()));
                }
                b'\\' => self.escape(&mut out)?,
                _ => return self.fail("invalid control character"),
            }
        }
    }

    /// One escape (at `self.at`, its backslash) appended to `out`.
    fn escape(&mut self, out: &mut Vec<u8>) -> Result<(), JsonError> {
        let simple = match self.b.get(self.at + 1) {
            Some(b'"') => b'"',
            Some(b'\\') => b'\\',
            Some(b'/') => b'/',
            Some(b'b') => 0x08,
            Some(b'f') => 0x0c,
            Some(b'n') => b'\n',
            Some(b'r') => b'\r',
            Some(b't') => b'\t',
            Some(b'u') => {
                let unit = self.hex4(self.at + 2)?;
                self.at += 6;
                let mut code = unit;
                // A high surrogate followed by an escaped low one is one character;
                // any other surrogate stays alone, as in Python.
                if (0xd800..0xdc00).contains(&unit)
                    && self.b.get(self.at..self.at + 2) == Some(b"\\u")
                {
                    if let Ok(low @ 0xdc00..=0xdfff) = self.hex4(self.at + 2) {
                        code = 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
                        self.at += 6;
                    }
                }
                push_wtf8(out, code);
                return Ok(());
            }
            _ => return self.fail("invalid escape"),
        };
        out.push(simple);
        self.at += 2;
        Ok(())
    }

    /// The four hex digits at `at`.
    fn hex4(&self, at: usize) -> Result<u32, JsonError> {
        let invalid = JsonError {
            what: "invalid \\uXXXX escape",
            at,
        };
        let digits = self.b.get(at..at + 4).ok_or(invalid.clone())?;
        digits.iter().try_fold(0u32, |v, &d| {
            let d = (d as char).to_digit(16).ok_or(invalid.clone())?;
            Ok(v * 16 + d)
        })
    }
}

/// Appends code point `code` (a surrogate included) in (generalized) UTF-8.
fn push_wtf8(out: &mut Vec<u8>, code: u32) {
    match code {
        0..=0x7f => out.push(code as u8),
        0x80..=0x7ff => {
            out.extend_from_slice(&[0xc0 | (code >> 6) as u8, 0x80 | (code & 0x3f) as u8])
        }
        0x800..=0xffff => out.extend_from_slice(&[
            0xe0 | (code >> 12) as u8,
            0x80 | ((code >> 6) & 0x3f) as u8,
            0x80 | (code & 0x3f) as u8,
        ]),
        _ => out.extend_from_slice(&[
            0xf0 | (code >> 18) as u8,
            0x80 | ((code >> 12) & 0x3f) as u8,
            0x80 | ((code >> 6) & 0x3f) as u8,
            0x80 | (code & 0x3f) as u8,
        ]),
    }
}

/// Python's `repr(x)` (and `str(x)`) of a float: the shortest digits that read back
/// as `x`, in fixed notation for decimal exponents from -4 to 15, else as `1e+16`,
/// `1.5e-05`; `nan`, `inf`, `-inf`.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    // Rust's `{:e}` writes the fewest digits that read back as `x` ("-1.2345e-7",
    // "0e0"). Where two strings of that many digits do, Python (David Gay's dtoa)
    // writes the one nearest to `x`, and of two as near the even one: the exactly
    // rounded (ties to even) string of that length, which reads back as `x`.
    let shortest = format!("{x:e}");
    let digits = shortest
        .split_once('e')
        .map_or(0, |(m, _)| m.bytes().filter(u8::is_ascii_digit).count());
    let nearest = format!("{x:.*e}", digits.saturating_sub(1));
    let sci = if nearest.parse::<f64>() == Ok(x) {
        nearest
    } else {
        shortest
    };
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exponent: i32 = exponent.parse().unwrap_or(0);
    // The value is 0.DIGITS × 10^point.
    let point = exponent + 1;
    let n = digits.len() as i32;
    let body = if (-3..=16).contains(&point) {
        if point <= 0 {
            format!("0.{}{digits}", "0".repeat((-point) as usize))
        } else if point >= n {
            format!("{digits}{}.0", "0".repeat((point - n) as usize))
        } else {
            let (a, b) = digits.split_at(point as usize);
            format!("{a}.{b}")
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let e = point - 1;
        format!(
            "{first}{dot}e{}{:02}",
            if e < 0 { '-' } else { '+' },
            e.abs()
        )
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> PyValue {
        PyValue::Str(x.into())
    }

    /// Nesting as deep as the limit allows is read, encoded and dropped on a thread of
    /// 64 KiB of stack (a debug build's frames included): nothing recurses per level.
    #[test]
    fn the_deepest_nesting_takes_no_stack_per_level() {
        // (A list holding a dict) per two levels, then one dict: MAX_NESTING levels.
        let pairs = (MAX_NESTING - 1) / 2;
        let text = format!(
            "{}{{\"k\": 1}}{}",
            "[{\"a\": ".repeat(pairs),
            "}]".repeat(pairs)
        );
        let worker = std::thread::Builder::new()
            .stack_size(64 << 10)
            .spawn(move || {
                let value = loads(&text).unwrap();
                assert!(value.msgpack_encodable());
                let mut packed = Vec::new();
                crate::records::encode_msgpack(&mut packed, &value).unwrap();
                drop(value);
                packed.len()
            })
            .unwrap();
        // [ {a: ...} ] per two levels: 1 + 1 + 2 bytes of msgpack each, then {k: 1}.
        assert_eq!(worker.join().unwrap(), pairs * 4 + 4);
        let at_limit = format!("{}{}", "[".repeat(MAX_NESTING), "]".repeat(MAX_NESTING));
        assert!(loads(&at_limit).is_ok());
        let deeper = format!(
            "{}{}",
            "[".repeat(MAX_NESTING + 1),
            "]".repeat(MAX_NESTING + 1)
        );
        assert_eq!(loads(&deeper).unwrap_err().what, "nested too deep");
    }

    #[test]
    fn numbers_are_what_python_reads() {
        let cases: [(&str, PyValue); 14] = [
            ("-0", PyValue::Int(0)),
            ("0", PyValue::Int(0)),
            ("-0.0", PyValue::Float(-0.0)),
            ("1E2", PyValue::Float(100.0)),
            ("1.7976931348623158e308", PyValue::Float(f64::MAX)),
            ("1e400", PyValue::Float(f64::INFINITY)),
            ("-1e400", PyValue::Float(f64::NEG_INFINITY)),
            ("4.9e-324", PyValue::Float(5e-324)),
            ("1e-400", PyValue::Float(0.0)),
            ("18446744073709551615", PyValue::Int(u64::MAX as i128)),
            ("-9223372036854775809", PyValue::Int(i64::MIN as i128 - 1)),
            // 0.1 + one ulp's worth of digits: correctly rounded (serde's default is not).
            ("0.30000000000000004", PyValue::Float(0.1 + 0.2)),
            ("Infinity", PyValue::Float(f64::INFINITY)),
            ("-Infinity", PyValue::Float(f64::NEG_INFINITY)),
        ];
        for (text, want) in cases {
            let got = loads(text).unwrap();
            match (&got, &want) {
                (PyValue::Float(a), PyValue::Float(b)) => {
                    assert_eq!(a.to_bits(), b.to_bits(), "{text}")
                }
                _ => assert_eq!(got, want, "{text}"),
            }
        }
        assert!(matches!(loads("NaN").unwrap(), PyValue::Float(f) if f.is_nan()));
        let big = "1".repeat(50);
        assert_eq!(loads(&big).unwrap(), PyValue::BigInt(big.as_str().into()));
        assert!(loads(&"1".repeat(MAX_INT_DIGITS)).is_ok());
        assert!(loads(&"1".repeat(MAX_INT_DIGITS + 1)).is_err());
        assert!(loads(&format!("-{}", "1".repeat(MAX_INT_DIGITS))).is_ok());
        // Digits of a float do not count against the int limit.
        assert!(loads(&format!("1.{}", "1".repeat(MAX_INT_DIGITS + 1))).is_ok());
        for bad in [
            "01", "-", "1.", ".5", "+1", "1e", "1e+", "-01", "nan", "-NaN", "--1", "1.5e3.2",
        ] {
            assert!(loads(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn strings_keep_lone_surrogates_as_python_does() {
        assert_eq!(loads(r#""\ud83d\ude00""#).unwrap(), s("😀"));
        let lone = loads(r#""\ud800A""#).unwrap();
        let PyValue::Str(lone) = &lone else { panic!() };
        assert_eq!(lone.as_str(), None);
        assert_eq!(lone.as_bytes(), b"\xed\xa0\x80A");
        // A high surrogate before an escape that is not a low one stays alone.
        let two = loads(r#""\ud800\u0041""#).unwrap();
        let PyValue::Str(two) = &two else { panic!() };
        assert_eq!(two.as_bytes(), b"\xed\xa0\x80A");
        assert_eq!(
            loads(r#""a\/b\"\\\b\f\n\r\t\u00E9""#).unwrap(),
            s("a/b\"\\\u{8}\u{c}\n\r\té")
        );
        assert_eq!(loads("\"\u{7f}é\"").unwrap(), s("\u{7f}é"));
        for bad in [
            "\"a",
            "\"\\x\"",
            "\"\\u12\"",
            "\"\\u12g4\"",
            "\"\u{1}\"",
            "\"\\",
        ] {
            assert!(loads(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn objects_keep_repeated_keys_and_answer_with_the_last() {
        let v = loads(r#" {"a": 1, "b": [true, false, null], "a": {"c": []}} "#).unwrap();
        assert_eq!(
            v.get("a"),
            Some(&PyValue::Dict(vec![("c".into(), PyValue::List(vec![]))]))
        );
        let PyValue::Dict(items) = &v else { panic!() };
        assert_eq!(items.len(), 3);
        for bad in [
            "{\"a\" 1}",
            "{\"a\": 1,}",
            "[1,]",
            "[1 2]",
            "{1: 2}",
            "{\"a\": 1} x",
            "[",
            "",
        ] {
            assert!(loads(bad).is_err(), "{bad}");
        }
        let deep = |d: usize| format!("{}{}", "[".repeat(d), "]".repeat(d));
        assert!(loads(&deep(MAX_NESTING)).is_ok());
        assert!(loads(&deep(MAX_NESTING + 1)).is_err());
    }

    #[test]
    fn msgpack_encodable_is_msgspecs_range() {
        let ok = |t: &str| loads(t).unwrap().msgpack_encodable();
        assert!(ok(
            "[18446744073709551615, -9223372036854775808, NaN, \"é\"]"
        ));
        assert!(!ok("18446744073709551616"));
        assert!(!ok("-9223372036854775809"));
        assert!(!ok(&"9".repeat(60)));
        assert!(!ok(r#"{"a": ["\udc00"]}"#));
        assert!(!ok(r#"{"\udc00": 1}"#));
        // A value a later repeated key replaces is not in the dict.
        assert!(ok(r#"{"a": 18446744073709551616, "b": 1, "a": 2}"#));
        assert!(!ok(r#"{"a": 1, "a": 18446744073709551616}"#));
    }

    #[test]
    fn float_repr_is_pythons() {
        // repr() of each, printed by Python 3.11.
        for (x, want) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (1.5, "1.5"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e300, "1.5e+300"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (0.1 + 0.2, "0.30000000000000004"),
            (-2.5e-7, "-2.5e-07"),
            // Two 17-digit strings read back as it, equally near: the even one.
            (1_820_351_733_048_546.0 + 0.25, "1820351733048546.2"),
            (1_820_351_733_048_546.0 + 0.75, "1820351733048546.8"),
            (f64::NAN, "nan"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(float_repr(x), want, "{x}");
        }
    }
}
