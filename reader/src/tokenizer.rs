//! The tokenizer: measurements to tokens and back (a vocabulary of 267).
//!
//! | id | token | id | token |
//! |---|---|---|---|
//! | 0 | `MEASUREMENT_START` | 6 | `TIMESTAMP_DELTA1` |
//! | 1 | `SRC_IPV4` | 7 | `TIMESTAMP_DELTA4` |
//! | 2 | `SRC_IPV6` | 8 | `RTT_START` |
//! | 3 | `DST_IPV4` | 9 | `THROUGHPUT_START` (reserved) |
//! | 4 | `DST_IPV6` | 10 | `FAILED` |
//! | 5 | `TIMESTAMP_ABS` | 11–266 | byte values 0–255 |
//!
//! A measurement is `MEASUREMENT_START` followed by its field blocks in a chosen order:
//! source, destination, result (`RTT_START` + 2 code bytes, or `FAILED`) and, when the
//! measurement keeps its timestamp, `TIMESTAMP_ABS` + 8 bytes (the first timestamp of a
//! context) or the delta to the previous timestamped measurement (`TIMESTAMP_DELTA1` + 1
//! byte under 256 s, else `TIMESTAMP_DELTA4` + 4 bytes; negative deltas clamp to 0).
//! Multi-byte values are big-endian.
//!
//! [`encode_measurement`] writes one measurement; [`detokenize`] parses a token sequence
//! back into [`Decoded`] measurements (with absolute times reconstructed from the
//! deltas) and is the grammar check; [`pretty`] prints tokens for people.

use std::net::IpAddr;

use crate::error::{Error, Result};
use crate::row::addr::addr_from_bytes;
use crate::row::RttCode;

/// Number of token ids.
pub const VOCAB_SIZE: usize = 267;
/// Version of this vocabulary and grammar (recorded in the job's manifest).
pub const TOKENIZER_VERSION: &str = "1";

pub const MEASUREMENT_START: i32 = 0;
pub const SRC_IPV4: i32 = 1;
pub const SRC_IPV6: i32 = 2;
pub const DST_IPV4: i32 = 3;
pub const DST_IPV6: i32 = 4;
pub const TIMESTAMP_ABS: i32 = 5;
pub const TIMESTAMP_DELTA1: i32 = 6;
pub const TIMESTAMP_DELTA4: i32 = 7;
pub const RTT_START: i32 = 8;
pub const THROUGHPUT_START: i32 = 9;
pub const FAILED: i32 = 10;
/// The id of byte value 0; byte `b` is `BYTE_BASE + b`.
pub const BYTE_BASE: i32 = 11;

/// Names of the role tokens 0–10.
pub const ROLE_NAMES: [&str; 11] = [
    "MEASUREMENT_START",
    "SRC_IPV4",
    "SRC_IPV6",
    "DST_IPV4",
    "DST_IPV6",
    "TIMESTAMP_ABS",
    "TIMESTAMP_DELTA1",
    "TIMESTAMP_DELTA4",
    "RTT_START",
    "THROUGHPUT_START",
    "FAILED",
];

/// The name of a token: a role name, or `0xNN` for a byte.
pub fn token_name(id: i32) -> String {
    match id {
        0..=10 => ROLE_NAMES[id as usize].to_string(),
        11..=266 => format!("0x{:02x}", id - BYTE_BASE),
        _ => format!("<invalid {id}>"),
    }
}

/// A measurement's field blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    Source,
    Destination,
    Result,
    Timestamp,
}

/// All 24 orders of the four fields, indexed by [`encode_measurement`]'s `order`.
/// Without a timestamp the `Timestamp` entry is skipped, which leaves each of the 6
/// orders of three fields exactly 4 times.
pub const FIELD_ORDERS: [[Field; 4]; 24] = {
    use Field::*;
    [
        [Source, Destination, Result, Timestamp],
        [Source, Destination, Timestamp, Result],
        [Source, Result, Destination, Timestamp],
        [Source, Result, Timestamp, Destination],
        [Source, Timestamp, Destination, Result],
        [Source, Timestamp, Result, Destination],
        [Destination, Source, Result, Timestamp],
        [Destination, Source, Timestamp, Result],
        [Destination, Result, Source, Timestamp],
        [Destination, Result, Timestamp, Source],
        [Destination, Timestamp, Source, Result],
        [Destination, Timestamp, Result, Source],
        [Result, Source, Destination, Timestamp],
        [Result, Source, Timestamp, Destination],
        [Result, Destination, Source, Timestamp],
        [Result, Destination, Timestamp, Source],
        [Result, Timestamp, Source, Destination],
        [Result, Timestamp, Destination, Source],
        [Timestamp, Source, Destination, Result],
        [Timestamp, Source, Result, Destination],
        [Timestamp, Destination, Source, Result],
        [Timestamp, Destination, Result, Source],
        [Timestamp, Result, Source, Destination],
        [Timestamp, Result, Destination, Source],
    ]
};

/// How a measurement's timestamp is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timestamp {
    /// No timestamp block.
    None,
    /// `TIMESTAMP_ABS` + u64 seconds.
    Absolute(u64),
    /// Seconds since the previous timestamped measurement of the context.
    Delta(u64),
}

impl Timestamp {
    /// Tokens of the timestamp block.
    #[inline]
    pub fn tokens(self) -> usize {
        match self {
            Timestamp::None => 0,
            Timestamp::Absolute(_) => 9,
            Timestamp::Delta(d) if d < 256 => 2,
            Timestamp::Delta(_) => 5,
        }
    }
}

/// Tokens of a measurement without its timestamp block (`width`: 4 or 16).
#[inline]
pub fn base_tokens(width: usize, failed: bool) -> usize {
    1 + 2 * (1 + width) + if failed { 1 } else { 3 }
}

/// Fewest tokens one measurement takes (IPv4, failed, no timestamp).
pub const MIN_MEASUREMENT_TOKENS: usize = 1 + 2 * 5 + 1;
/// Most tokens one measurement takes (IPv6, RTT, absolute timestamp).
pub const MAX_MEASUREMENT_TOKENS: usize = 1 + 2 * 17 + 3 + 9;

/// Room for one field block (role token + up to 16 bytes); every block is built and
/// copied at this fixed width so the copies compile to a few vector moves.
pub const BLOCK: usize = 17;

/// A field block: tokens, padded to [`BLOCK`], and its real length.
pub type FieldBlock = ([i32; BLOCK], usize);

#[inline]
fn block(role: i32, bytes: &[u8]) -> FieldBlock {
    let mut b = [0i32; BLOCK];
    b[0] = role;
    for (t, &v) in b[1..].iter_mut().zip(bytes) {
        *t = BYTE_BASE + i32::from(v);
    }
    (b, 1 + bytes.len().min(BLOCK - 1))
}

/// The source block of a measurement (the same for every measurement of a row).
#[inline]
pub fn source_block(src: &[u8]) -> FieldBlock {
    block(if src.len() == 4 { SRC_IPV4 } else { SRC_IPV6 }, src)
}

/// Appends one measurement. `src` and `dst` are 4 or 16 network-order bytes of the same
/// family; `order` (0..24) picks the field order from [`FIELD_ORDERS`].
pub fn encode_measurement(
    out: &mut Vec<i32>,
    src: &[u8],
    dst: &[u8],
    rtt: Option<RttCode>,
    timestamp: Timestamp,
    order: usize,
) {
    encode_with_source(out, &source_block(src), dst, rtt, timestamp, order);
}

/// [`encode_measurement`] with the source block already built ([`source_block`]).
#[inline]
pub fn encode_with_source(
    out: &mut Vec<i32>,
    src: &FieldBlock,
    dst: &[u8],
    rtt: Option<RttCode>,
    timestamp: Timestamp,
    order: usize,
) {
    let d = block(if dst.len() == 4 { DST_IPV4 } else { DST_IPV6 }, dst);
    let r = match rtt {
        Some(code) => block(RTT_START, &code.to_bytes()),
        None => block(FAILED, &[]),
    };
    let t = match timestamp {
        Timestamp::None => ([0; BLOCK], 0),
        Timestamp::Absolute(t) => block(TIMESTAMP_ABS, &t.to_be_bytes()),
        Timestamp::Delta(d) if d < 256 => block(TIMESTAMP_DELTA1, &[d as u8]),
        Timestamp::Delta(d) => block(
            TIMESTAMP_DELTA4,
            &(d.min(u64::from(u32::MAX)) as u32).to_be_bytes(),
        ),
    };
    // Blocks are copied whole and overlap-written: each next block starts at the
    // previous one's real end. 1 + 3 × 17 + 17 slots hold any order.
    let mut buf = [0i32; 1 + 4 * BLOCK];
    buf[0] = MEASUREMENT_START;
    let mut at = 1;
    for field in FIELD_ORDERS[order % 24] {
        let (tokens, len) = match field {
            Field::Source => src,
            Field::Destination => &d,
            Field::Result => &r,
            Field::Timestamp => &t,
        };
        buf[at..at + BLOCK].copy_from_slice(tokens);
        at += len;
    }
    out.extend_from_slice(&buf[..at]);
}

/// The timestamp of a measurement a context continues from: `Absolute(t)` for the first
/// timestamped measurement (`previous = None`), else the clamped delta.
#[inline]
pub fn timestamp_after(previous: Option<u64>, t: u64) -> Timestamp {
    match previous {
        None => Timestamp::Absolute(t),
        Some(p) => Timestamp::Delta(t.saturating_sub(p)),
    }
}

/// A measurement read back from tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// `None`: a failed ping.
    pub rtt: Option<RttCode>,
    /// The timestamp block as written.
    pub timestamp: Timestamp,
    /// The absolute time, reconstructed from the context's first absolute timestamp and
    /// the deltas since (`None` without a timestamp block).
    pub time: Option<u64>,
    /// The order of the field blocks.
    pub fields: Vec<Field>,
    /// Index of the `MEASUREMENT_START` token.
    pub start: usize,
}

fn grammar(at: usize, what: impl std::fmt::Display) -> Error {
    Error::Input(format!("token {at}: {what}"))
}

/// Parses a token sequence (one context, or a packed sequence's segment) into
/// measurements, checking the grammar: every measurement complete, each field once,
/// source and destination of one family, no stray or reserved tokens, deltas only after
/// an absolute timestamp. Trailing padding is not accepted: cut it off first.
pub fn detokenize(tokens: &[i32]) -> Result<Vec<Decoded>> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut last_time: Option<u64> = None;
    let byte = |i: usize| -> Result<u8> {
        match tokens.get(i) {
            Some(&t) if (BYTE_BASE..BYTE_BASE + 256).contains(&t) => Ok((t - BYTE_BASE) as u8),
            Some(&t) => Err(grammar(
                i,
                format!("expected a byte, found {}", token_name(t)),
            )),
            None => Err(grammar(i, "sequence ends inside a measurement")),
        }
    };
    let bytes = |i: usize, n: usize| -> Result<Vec<u8>> { (i..i + n).map(byte).collect() };
    while i < tokens.len() {
        if tokens[i] != MEASUREMENT_START {
            return Err(grammar(
                i,
                format!(
                    "expected MEASUREMENT_START, found {}",
                    token_name(tokens[i])
                ),
            ));
        }
        let start = i;
        i += 1;
        let mut src = None;
        let mut dst = None;
        let mut rtt = None;
        let mut timestamp = Timestamp::None;
        let mut fields = Vec::with_capacity(4);
        while i < tokens.len() && tokens[i] != MEASUREMENT_START {
            let t = tokens[i];
            let field = match t {
                SRC_IPV4 | SRC_IPV6 | DST_IPV4 | DST_IPV6 => {
                    let n = if t == SRC_IPV4 || t == DST_IPV4 {
                        4
                    } else {
                        16
                    };
                    let b = bytes(i + 1, n)?;
                    let a = addr_from_bytes(&b).ok_or_else(|| grammar(i, "bad address"))?;
                    i += 1 + n;
                    if t == SRC_IPV4 || t == SRC_IPV6 {
                        src = Some(a);
                        Field::Source
                    } else {
                        dst = Some(a);
                        Field::Destination
                    }
                }
                RTT_START => {
                    let b = bytes(i + 1, 2)?;
                    rtt = Some(Some(RttCode::from_bytes([b[0], b[1]])));
                    i += 3;
                    Field::Result
                }
                FAILED => {
                    rtt = Some(None);
                    i += 1;
                    Field::Result
                }
                TIMESTAMP_ABS => {
                    let b = bytes(i + 1, 8)?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(&b);
                    timestamp = Timestamp::Absolute(u64::from_be_bytes(a));
                    i += 9;
                    Field::Timestamp
                }
                TIMESTAMP_DELTA1 => {
                    timestamp = Timestamp::Delta(u64::from(byte(i + 1)?));
                    i += 2;
                    Field::Timestamp
                }
                TIMESTAMP_DELTA4 => {
                    let b = bytes(i + 1, 4)?;
                    let d = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                    if d < 256 {
                        return Err(grammar(i, format!("TIMESTAMP_DELTA4 of {d} (< 256)")));
                    }
                    timestamp = Timestamp::Delta(u64::from(d));
                    i += 5;
                    Field::Timestamp
                }
                other => {
                    return Err(grammar(
                        i,
                        format!("unexpected {} inside a measurement", token_name(other)),
                    ))
                }
            };
            if fields.contains(&field) {
                return Err(grammar(start, format!("{field:?} appears twice")));
            }
            fields.push(field);
        }
        let (Some(src), Some(dst), Some(rtt)) = (src, dst, rtt) else {
            return Err(grammar(
                start,
                "measurement lacks a source, destination or result",
            ));
        };
        if src.is_ipv4() != dst.is_ipv4() {
            return Err(grammar(
                start,
                "source and destination of different families",
            ));
        }
        let time = match timestamp {
            Timestamp::None => None,
            Timestamp::Absolute(t) => {
                if last_time.is_some() {
                    return Err(grammar(start, "a second TIMESTAMP_ABS in one context"));
                }
                Some(t)
            }
            Timestamp::Delta(d) => match last_time {
                Some(p) => Some(p.saturating_add(d)),
                None => return Err(grammar(start, "a delta before any absolute timestamp")),
            },
        };
        if time.is_some() {
            last_time = time;
        }
        out.push(Decoded {
            src,
            dst,
            rtt,
            timestamp,
            time,
            fields,
            start,
        });
    }
    Ok(out)
}

/// Tokens for people: one measurement per line, role names and byte values.
pub fn pretty(tokens: &[i32]) -> String {
    let mut s = String::new();
    for (i, &t) in tokens.iter().enumerate() {
        if t == MEASUREMENT_START && i > 0 {
            s.push('\n');
        } else if i > 0 {
            s.push(' ');
        }
        match t {
            0..=10 => s.push_str(ROLE_NAMES[t as usize]),
            11..=266 => s.push_str(&(t - BYTE_BASE).to_string()),
            _ => s.push_str(&format!("<invalid {t}>")),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> Vec<u8> {
        s.parse::<std::net::Ipv4Addr>().unwrap().octets().to_vec()
    }

    #[test]
    fn sizes_match_the_design() {
        let mut out = Vec::new();
        let (s, d) = (v4("192.0.2.1"), v4("198.51.100.7"));
        encode_measurement(&mut out, &s, &d, Some(RttCode(300)), Timestamp::Delta(5), 0);
        assert_eq!(out.len(), 16);
        assert_eq!(
            out.len(),
            base_tokens(4, false) + Timestamp::Delta(5).tokens()
        );
        let s6 = [0x20u8, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let mut out6 = Vec::new();
        encode_measurement(
            &mut out6,
            &s6,
            &s6,
            Some(RttCode(1)),
            Timestamp::Delta(5),
            7,
        );
        assert_eq!(out6.len(), 40);
        assert!(out
            .iter()
            .chain(&out6)
            .all(|&t| (0..VOCAB_SIZE as i32).contains(&t)));
    }

    #[test]
    fn round_trip_every_order_and_timestamp_kind() {
        let (s, d) = (v4("10.1.2.3"), v4("10.9.8.7"));
        for (order, fields) in FIELD_ORDERS.iter().enumerate() {
            let mut out = Vec::new();
            encode_measurement(
                &mut out,
                &s,
                &d,
                Some(RttCode(0x1234)),
                Timestamp::Absolute(1_700_000_000),
                order,
            );
            encode_measurement(&mut out, &s, &d, None, Timestamp::Delta(17), order);
            encode_measurement(&mut out, &s, &d, Some(RttCode(7)), Timestamp::None, order);
            encode_measurement(
                &mut out,
                &s,
                &d,
                Some(RttCode(7)),
                Timestamp::Delta(100_000),
                order,
            );
            let m = detokenize(&out).unwrap();
            assert_eq!(m.len(), 4);
            assert_eq!(m[0].time, Some(1_700_000_000));
            assert_eq!(m[1].time, Some(1_700_000_017));
            assert_eq!(m[1].rtt, None);
            assert_eq!(m[2].time, None);
            assert_eq!(m[3].time, Some(1_700_100_017));
            assert_eq!(m[0].rtt, Some(RttCode(0x1234)));
            assert_eq!(m[0].fields, fields.to_vec());
            assert_eq!(m[0].src.to_string(), "10.1.2.3");
            assert_eq!(m[0].dst.to_string(), "10.9.8.7");
        }
    }

    #[test]
    fn grammar_errors_are_reported() {
        let (s, d) = (v4("10.1.2.3"), v4("10.9.8.7"));
        let mut good = Vec::new();
        encode_measurement(
            &mut good,
            &s,
            &d,
            Some(RttCode(1)),
            Timestamp::Absolute(5),
            18, // timestamp first, result last: every proper prefix is incomplete
        );
        // Truncated anywhere inside the measurement.
        for cut in 1..good.len() {
            assert!(detokenize(&good[..cut]).is_err(), "cut at {cut}");
        }
        // A delta without an absolute timestamp first.
        let mut delta_first = Vec::new();
        encode_measurement(&mut delta_first, &s, &d, None, Timestamp::Delta(1), 0);
        assert!(detokenize(&delta_first).is_err());
        // Reserved and out-of-range tokens.
        let mut bad = good.clone();
        bad.insert(1, THROUGHPUT_START);
        assert!(detokenize(&bad).is_err());
        let mut bad = good.clone();
        bad[3] = 400;
        assert!(detokenize(&bad).is_err());
        // Duplicate field.
        let mut dup = good.clone();
        dup.push(FAILED);
        assert!(detokenize(&dup).is_err());
        assert!(pretty(&good)
            .starts_with("MEASUREMENT_START TIMESTAMP_ABS 0 0 0 0 0 0 0 5 SRC_IPV4 10 1 2 3"));
    }
}
