//! One line of RIPE Atlas ping results → its packets, by the rules of RIPE's own parser
//! (`ripe.atlas.sagan`), written down in docs/job.md ("RIPE Atlas results").
//!
//! A line is decoded by serde_json into [`RawResult`], whose fields keep whatever JSON
//! value they hold ([`Scalar`]): Atlas wrote numbers as strings in old firmware, and
//! the rules read a field as Python's `int()` or `float()` would, as sagan does.

use std::borrow::Cow;
use std::net::IpAddr;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::scope::local_scope;
use crate::validate::Reason;

/// Which address keys a packet (`[input] source`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceRule {
    /// `from` when it is a global address of the result's family, else the packet's
    /// source address when that is global, else the packet is rejected.
    #[default]
    Public,
    /// The packet's source address as it is (`src_addr`, `srcaddr`).
    SrcAddr,
}

impl SourceRule {
    pub fn is_public(&self) -> bool {
        *self == SourceRule::Public
    }
}

/// A JSON value as a field of a result holds it: a scalar, or something else (an
/// object, a list), which no rule reads as a number or a text.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar<'a> {
    Null,
    Bool(bool),
    Int(i64),
    /// An integer beyond `i64` (no field of a result is one).
    BigInt,
    Float(f64),
    Str(Cow<'a, str>),
    Other,
}

impl<'a> Scalar<'a> {
    /// The value as Python's `int()` reads it (sagan's `ensure(key, int)`): integers,
    /// floats truncated, decimal integer text (surrounding whitespace allowed), `true`
    /// and `false`; `None` for anything else.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Scalar::Int(i) => Some(*i),
            Scalar::Bool(b) => Some(i64::from(*b)),
            Scalar::Float(f) if f.is_finite() && f.abs() < 9.2e18 => Some(f.trunc() as i64),
            Scalar::Str(s) => {
                let t = s.trim();
                let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                t.parse().ok()
            }
            _ => None,
        }
    }

    /// The value as Python's `float()` reads it: numbers, `true`/`false`, and number
    /// text (`"12.5"`, `"1e3"`, `"nan"`, `"inf"`; whitespace around allowed).
    pub fn as_float(&self) -> Option<f64> {
        match self {
            Scalar::Int(i) => Some(*i as f64),
            Scalar::Bool(b) => Some(f64::from(u8::from(*b))),
            Scalar::Float(f) => Some(*f),
            Scalar::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// The value as a text, as sagan's `ensure(key, str)` gives it (`str(value)`), for
    /// a string or a number; `None` for null, a list or an object.
    pub fn as_text(&self) -> Option<Cow<'a, str>> {
        match self {
            Scalar::Str(s) => Some(s.clone()),
            Scalar::Int(i) => Some(Cow::Owned(i.to_string())),
            Scalar::Float(f) => Some(Cow::Owned(f.to_string())),
            Scalar::Bool(b) => Some(Cow::Borrowed(if *b { "True" } else { "False" })),
            _ => None,
        }
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Null)
    }
    fn visit_none<E>(self) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Scalar<'de>, E> {
        Ok(i64::try_from(v).map_or(Scalar::BigInt, Scalar::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Float(v))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Owned(v.to_string())))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar<'de>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

/// A key that is present, whatever it holds (`null` included): sagan tests keys with
/// `in`, so `"dup": null` is a duplicate and `"rtt": null` a reply without a number.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Scalar<'de>>, D::Error> {
    Scalar::deserialize(d).map(Some)
}

fn present_entries<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Entries<'de>>, D::Error> {
    Entries::deserialize(d).map(Some)
}

/// One entry of a result's `result` array: the keys the rules read.
#[derive(Debug, Default, Deserialize)]
struct RawEntry<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    rtt: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    dup: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    error: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    x: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    src_addr: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    srcaddr: Option<Scalar<'a>>,
}

/// An entry of `result`: an object, or any other value (which breaks the rules).
#[derive(Debug)]
enum Entry<'a> {
    Object(RawEntry<'a>),
    NotAnObject,
}

impl<'de> Deserialize<'de> for Entry<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EntryVisitor;
        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = Entry<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a packet entry")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Entry<'de>, A::Error> {
                RawEntry::deserialize(de::value::MapAccessDeserializer::new(map)).map(Entry::Object)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Entry<'de>, A::Error> {
                ScalarVisitor.visit_seq(seq).map(|_| Entry::NotAnObject)
            }
            fn visit_unit<E>(self) -> Result<Entry<'de>, E> {
                Ok(Entry::NotAnObject)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Entry<'de>, E> {
                Ok(Entry::NotAnObject)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Entry<'de>, E> {
                Ok(Entry::NotAnObject)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Entry<'de>, E> {
                Ok(Entry::NotAnObject)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Entry<'de>, E> {
                Ok(Entry::NotAnObject)
            }
            fn visit_str<E>(self, _: &str) -> Result<Entry<'de>, E> {
                Ok(Entry::NotAnObject)
            }
        }
        d.deserialize_any(EntryVisitor)
    }
}

/// A result's `result`: a list of entries, or another value.
#[derive(Debug)]
enum Entries<'a> {
    List(Vec<Entry<'a>>),
    NotAList,
}

impl<'de> Deserialize<'de> for Entries<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;
        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = Entries<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of packet entries")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entries<'de>, A::Error> {
                let mut entries = Vec::with_capacity(seq.size_hint().unwrap_or(4).min(64));
                while let Some(e) = seq.next_element()? {
                    entries.push(e);
                }
                Ok(Entries::List(entries))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Entries<'de>, A::Error> {
                ScalarVisitor.visit_map(map).map(|_| Entries::NotAList)
            }
            /// `null`: no packets (sagan's `ensure("result", list, [])`).
            fn visit_unit<E>(self) -> Result<Entries<'de>, E> {
                Ok(Entries::List(Vec::new()))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Entries<'de>, E> {
                Ok(Entries::NotAList)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Entries<'de>, E> {
                Ok(Entries::NotAList)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Entries<'de>, E> {
                Ok(Entries::NotAList)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Entries<'de>, E> {
                Ok(Entries::NotAList)
            }
            fn visit_str<E>(self, _: &str) -> Result<Entries<'de>, E> {
                Ok(Entries::NotAList)
            }
        }
        d.deserialize_any(EntriesVisitor)
    }
}

/// The keys of a result the rules read (every other key is ignored).
#[derive(Debug, Deserialize)]
struct RawResult<'a> {
    #[serde(rename = "type", default, borrow, deserialize_with = "present")]
    kind: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    timestamp: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    msm_id: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    prb_id: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    fw: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    af: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    pf: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    dst_addr: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    addr: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    from: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    src_addr: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    srcaddr: Option<Scalar<'a>>,
    #[serde(default, borrow, deserialize_with = "present_entries")]
    result: Option<Entries<'a>>,
}

/// A packet a line gives, for the job's validation: the row it becomes.
#[derive(Debug, Clone, PartialEq)]
pub struct Packet<'a> {
    pub src_addr: Option<Cow<'a, str>>,
    pub dst_addr: Option<Cow<'a, str>>,
    pub ip_version: Option<i64>,
    /// Unix seconds.
    pub event_time: i64,
    /// Milliseconds at full precision; `-1` for a timeout (a failed ping).
    pub rtt_ms: f64,
}

/// What one line gives: its rows ([`line_rows`]), packets for validation, and rows it
/// drops with their reasons.
#[derive(Debug, Default)]
pub struct LineOutcome<'a> {
    /// The line's rows: the entries of its `result` list, or 1 when it has none.
    pub rows: u32,
    /// The entries of its `result` list (0 when it is no list).
    pub entries: u32,
    /// Whether the line is an Atlas result (of any type).
    pub is_result: bool,
    /// Whether the line is an Atlas ping result.
    pub is_ping: bool,
    pub packets: Vec<Packet<'a>>,
    /// Rows dropped, by reason, in the order met (a reason at most once).
    pub dropped: Vec<(Reason, u32)>,
}

impl LineOutcome<'_> {
    fn drop_rows(&mut self, reason: Reason, rows: u32) {
        match self.dropped.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, n)) => *n += rows,
            None => self.dropped.push((reason, rows)),
        }
    }

    /// The whole line rejected as `reason`.
    fn reject(mut self, reason: Reason) -> Self {
        self.packets.clear();
        self.dropped.clear();
        let rows = self.rows;
        self.drop_rows(reason, rows);
        self
    }
}

/// Whether `text` is a global address: an IP address of no local scope
/// ([`crate::scope`]), no multicast and no broadcast address.
pub fn is_global(text: &str) -> Option<IpAddr> {
    let addr: IpAddr = text.trim().parse().ok()?;
    let multicast_or_broadcast = match addr {
        IpAddr::V4(a) => a.is_multicast() || a.is_broadcast(),
        IpAddr::V6(a) => a.is_multicast() || a.to_ipv4_mapped().is_some_and(|v4| v4.is_multicast()),
    };
    (local_scope(addr).is_none() && !multicast_or_broadcast).then_some(addr)
}

fn family(addr: IpAddr) -> i64 {
    match addr {
        IpAddr::V4(_) => 4,
        IpAddr::V6(a) if a.to_ipv4_mapped().is_some() => 4,
        IpAddr::V6(_) => 6,
    }
}

/// Reads one line (without its newline) by the rules.
pub fn read_line(line: &[u8], rule: SourceRule) -> LineOutcome<'_> {
    let mut out = LineOutcome {
        rows: 1,
        ..LineOutcome::default()
    };
    let Ok(text) = std::str::from_utf8(line) else {
        return out.reject(Reason::MalformedLine);
    };
    // serde would read a list as a struct's fields in order: only an object is a result.
    if !text.trim_start().starts_with('{') {
        return out.reject(Reason::MalformedLine);
    }
    let raw: RawResult<'_> = match serde_json::from_str(text) {
        Ok(raw) => raw,
        Err(_) => return out.reject(Reason::MalformedLine),
    };
    if let Some(Entries::List(entries)) = &raw.result {
        out.entries = u32::try_from(entries.len()).unwrap_or(u32::MAX);
        out.rows = out.entries.max(1);
    }
    // sagan refuses a result without these keys, and cannot compare a firmware that
    // is no integer.
    let present = |v: &Option<Scalar>| v.is_some();
    if !(present(&raw.timestamp)
        && present(&raw.msm_id)
        && present(&raw.prb_id)
        && present(&raw.kind))
    {
        return out.reject(Reason::NotAnAtlasResult);
    }
    let Some(fw) = raw.fw.as_ref().and_then(Scalar::as_int) else {
        return out.reject(Reason::NotAnAtlasResult);
    };
    out.is_result = true;
    let is_ping = match &raw.kind {
        Some(Scalar::Str(kind)) => kind.eq_ignore_ascii_case("ping"),
        _ => false,
    };
    if !is_ping {
        return out.reject(Reason::NotAPing);
    }
    out.is_ping = true;
    let event_time = match raw.timestamp {
        Some(Scalar::Int(t)) => t,
        Some(Scalar::Float(t)) if t.is_finite() && t.abs() < 9.2e18 => t.floor() as i64,
        Some(Scalar::Bool(b)) => i64::from(b),
        _ => return out.reject(Reason::BadTimestamp),
    };
    // Before firmware 4460 the family is `pf` and the destination `addr`.
    let old = 0 < fw && fw < 4460;
    let (family_key, destination_key) = if old {
        (&raw.pf, &raw.addr)
    } else {
        (&raw.af, &raw.dst_addr)
    };
    let dst_addr = destination_key.as_ref().and_then(Scalar::as_text);
    let ip_version = family_key.as_ref().and_then(Scalar::as_int).or_else(|| {
        dst_addr
            .as_ref()
            .map(|d| if d.contains(':') { 6 } else { 4 })
    });
    let entries = match raw.result {
        None => return out.reject(Reason::NoPackets),
        Some(Entries::NotAList) => return out.reject(Reason::MalformedResult),
        Some(Entries::List(entries)) if entries.is_empty() => return out.reject(Reason::NoPackets),
        Some(Entries::List(entries)) => entries,
    };
    let result_source = raw
        .src_addr
        .as_ref()
        .or(raw.srcaddr.as_ref())
        .and_then(Scalar::as_text);
    // `from`, when it is a global address of the result's family.
    let public_from = raw.from.as_ref().and_then(Scalar::as_text).filter(|from| {
        is_global(from).is_some_and(|a| ip_version.is_none() || Some(family(a)) == ip_version)
    });
    for entry in entries {
        let Entry::Object(entry) = entry else {
            return out.reject(Reason::MalformedResult);
        };
        // A reply's `rtt` must be a number even on a duplicate (sagan reads it first).
        let rtt = match &entry.rtt {
            Some(value) => match value.as_float() {
                Some(rtt) => Some(rtt),
                None => return out.reject(Reason::MalformedResult),
            },
            None => None,
        };
        let rtt_ms = if entry.dup.is_some() {
            out.drop_rows(Reason::Duplicate, 1);
            continue;
        } else if let Some(rtt) = rtt {
            if rtt < 0.0 {
                out.drop_rows(Reason::NegativeRtt, 1);
                continue;
            }
            rtt
        } else if entry.error.is_some() {
            out.drop_rows(Reason::PacketError, 1);
            continue;
        } else if entry.x.is_some() {
            -1.0
        } else {
            out.drop_rows(Reason::UnknownPacket, 1);
            continue;
        };
        let packet_source = entry
            .src_addr
            .as_ref()
            .or(entry.srcaddr.as_ref())
            .and_then(Scalar::as_text)
            .or_else(|| result_source.clone());
        let src_addr = match rule {
            SourceRule::SrcAddr => packet_source,
            SourceRule::Public => match (&public_from, packet_source) {
                (Some(from), _) => Some(from.clone()),
                (None, Some(src)) if is_global(&src).is_some() => Some(src),
                _ => {
                    out.drop_rows(Reason::NoPublicSource, 1);
                    continue;
                }
            },
        };
        out.packets.push(Packet {
            src_addr,
            dst_addr: dst_addr.clone(),
            ip_version,
            event_time,
            rtt_ms,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(json: &str) -> LineOutcome<'_> {
        read_line(json.as_bytes(), SourceRule::Public)
    }

    const MODERN: &str = r#"{"af":4,"dst_addr":"62.2.16.24","from":"188.195.181.120","fw":4610,"msm_id":1000192,"prb_id":270,"result":[{"rtt":63.213456789012},{"rtt":47.941,"ttl":51},{"x":"*"}],"src_addr":"192.168.178.21","timestamp":1395416383,"type":"ping"}"#;

    #[test]
    fn a_reply_is_its_rtt_at_full_precision_and_a_timeout_a_failed_ping() {
        let out = line(MODERN);
        assert_eq!(out.rows, 3);
        assert!(out.is_ping && out.dropped.is_empty());
        let rtts: Vec<f64> = out.packets.iter().map(|p| p.rtt_ms).collect();
        assert_eq!(rtts, [63.213456789012, 47.941, -1.0]);
        let p = &out.packets[0];
        assert_eq!(p.src_addr.as_deref(), Some("188.195.181.120"));
        assert_eq!(p.dst_addr.as_deref(), Some("62.2.16.24"));
        assert_eq!((p.ip_version, p.event_time), (Some(4), 1395416383));
    }

    #[test]
    fn duplicates_errors_and_unknown_entries_are_dropped_and_counted() {
        let out = line(
            r#"{"af":4,"dst_addr":"62.2.16.24","from":"109.190.83.40","fw":4610,"msm_id":1,"prb_id":1216,"result":[{"srcaddr":"192.168.103.130","x":"*"},{"dup":1,"rtt":36.454},{"dup":1,"rtt":37.756},{"rtt":27.768},{"error":"sendto failed"},{"foo":1},{"rtt":-3}],"timestamp":1395277728,"type":"ping"}"#,
        );
        assert_eq!(out.rows, 7);
        assert_eq!(
            out.dropped,
            [
                (Reason::Duplicate, 2),
                (Reason::PacketError, 1),
                (Reason::UnknownPacket, 1),
                (Reason::NegativeRtt, 1)
            ]
        );
        let rtts: Vec<f64> = out.packets.iter().map(|p| p.rtt_ms).collect();
        assert_eq!(rtts, [-1.0, 27.768]);
    }

    #[test]
    fn old_firmware_reads_addr_pf_and_string_numbers() {
        let out = line(
            r#"{"addr":"62.2.16.12","dst_addr":"9.9.9.9","pf":"6","af":4,"from":"194.85.27.7","fw":"4400","msm_id":"1","prb_id":"165","result":[{"rtt":"12.5"}],"srcaddr":"10.0.0.1","timestamp":1340523908,"type":"ping"}"#,
        );
        // `from` is not of the family `pf` names, and the source (`srcaddr`) is private.
        assert!(out.packets.is_empty());
        assert_eq!(out.dropped, [(Reason::NoPublicSource, 1)]);
        let out = read_line(
            r#"{"addr":"62.2.16.12","dst_addr":"9.9.9.9","pf":"6","af":4,"from":"194.85.27.7","fw":"4400","msm_id":"1","prb_id":"165","result":[{"rtt":"12.5"}],"srcaddr":"10.0.0.1","timestamp":1340523908,"type":"ping"}"#.as_bytes(),
            SourceRule::SrcAddr,
        );
        let p = &out.packets[0];
        assert_eq!(p.dst_addr.as_deref(), Some("62.2.16.12"));
        assert_eq!(p.ip_version, Some(6));
        assert_eq!(p.rtt_ms, 12.5);
        assert_eq!(p.src_addr.as_deref(), Some("10.0.0.1"));
    }

    #[test]
    fn the_family_comes_from_af_else_the_destinations_form() {
        let out = line(
            r#"{"dst_addr":"2001:db8::1","from":"2a02:1::5","fw":4790,"msm_id":1,"prb_id":1,"result":[{"rtt":1}],"timestamp":1600000000,"type":"ping"}"#,
        );
        assert_eq!(out.packets[0].ip_version, Some(6));
        assert_eq!(out.packets[0].src_addr.as_deref(), Some("2a02:1::5"));
    }

    #[test]
    fn the_public_source_is_from_else_a_global_src_addr_else_rejected() {
        let with = |from: &str, src: &str| {
            let json = format!(
                r#"{{"af":4,"dst_addr":"8.8.8.8","from":{from},"src_addr":{src},"fw":5000,"msm_id":1,"prb_id":1,"result":[{{"rtt":1}}],"timestamp":1600000000,"type":"ping"}}"#
            );
            let out = read_line(json.as_bytes(), SourceRule::Public);
            let src = out
                .packets
                .first()
                .and_then(|p| p.src_addr.clone())
                .map(|s| s.into_owned());
            (src, out.dropped)
        };
        assert_eq!(
            with(r#""1.2.3.4""#, r#""10.0.0.1""#).0.as_deref(),
            Some("1.2.3.4")
        );
        // A `from` of the other family, or a private one, gives way to a global src_addr.
        assert_eq!(
            with(r#""2a02::1""#, r#""5.6.7.8""#).0.as_deref(),
            Some("5.6.7.8")
        );
        assert_eq!(
            with(r#""192.168.1.1""#, r#""5.6.7.8""#).0.as_deref(),
            Some("5.6.7.8")
        );
        assert_eq!(
            with(r#""100.64.0.1""#, r#""10.1.1.1""#),
            (None, vec![(Reason::NoPublicSource, 1)])
        );
        assert_eq!(with("null", "null").1, [(Reason::NoPublicSource, 1)]);
        // `source = "src_addr"` takes the field as it is.
        let json = r#"{"af":4,"dst_addr":"8.8.8.8","from":"1.2.3.4","src_addr":"10.0.0.1","fw":5000,"msm_id":1,"prb_id":1,"result":[{"rtt":1}],"timestamp":1600000000,"type":"ping"}"#;
        let out = read_line(json.as_bytes(), SourceRule::SrcAddr);
        assert_eq!(out.packets[0].src_addr.as_deref(), Some("10.0.0.1"));
    }

    #[test]
    fn a_line_that_breaks_a_rule_is_rejected_whole_with_its_rows() {
        let cases = [
            ("not json", Reason::MalformedLine, 1),
            ("[1,2]", Reason::MalformedLine, 1),
            (
                r#"{"type":"ping","result":[{},{}]}"#,
                Reason::NotAnAtlasResult,
                2,
            ),
            (
                r#"{"type":"ping","fw":"x","timestamp":1,"msm_id":1,"prb_id":1}"#,
                Reason::NotAnAtlasResult,
                1,
            ),
            (
                r#"{"type":"traceroute","fw":4790,"timestamp":1,"msm_id":1,"prb_id":1,"result":[{"hop":1}]}"#,
                Reason::NotAPing,
                1,
            ),
            (
                r#"{"type":"ping","fw":4790,"timestamp":"1600000000","msm_id":1,"prb_id":1,"result":[{"rtt":1}]}"#,
                Reason::BadTimestamp,
                1,
            ),
            (
                r#"{"type":"ping","fw":1,"timestamp":1,"msm_id":1,"prb_id":1,"avg":3,"sent":3,"rcvd":3}"#,
                Reason::NoPackets,
                1,
            ),
            (
                r#"{"type":"ping","fw":4790,"timestamp":1,"msm_id":1,"prb_id":1,"result":[]}"#,
                Reason::NoPackets,
                1,
            ),
            (
                r#"{"type":"ping","fw":4790,"timestamp":1,"msm_id":1,"prb_id":1,"result":[{"rtt":1},"x"]}"#,
                Reason::MalformedResult,
                2,
            ),
            (
                r#"{"type":"ping","fw":4790,"timestamp":1,"msm_id":1,"prb_id":1,"result":[{"rtt":"fast"}]}"#,
                Reason::MalformedResult,
                1,
            ),
            (
                r#"{"type":"ping","fw":4790,"timestamp":1,"msm_id":1,"prb_id":1,"result":"x"}"#,
                Reason::MalformedResult,
                1,
            ),
        ];
        for (json, reason, rows) in cases {
            let out = line(json);
            assert!(out.packets.is_empty(), "{json}");
            assert_eq!(out.dropped, [(reason, rows)], "{json}");
            assert_eq!(out.rows, rows, "{json}");
        }
        assert_eq!(
            read_line(b"\xff{}", SourceRule::Public).dropped,
            [(Reason::MalformedLine, 1)]
        );
    }

    #[test]
    fn a_key_that_holds_null_is_present_as_sagan_reads_it() {
        let with = |entries: &str| {
            let json = format!(
                r#"{{"af":4,"dst_addr":"8.8.8.8","from":"1.2.3.4","fw":5000,"msm_id":1,"prb_id":1,"result":{entries},"timestamp":1600000000,"type":"ping"}}"#
            );
            let out = read_line(json.as_bytes(), SourceRule::Public);
            (out.packets.len(), out.dropped)
        };
        assert_eq!(
            with(r#"[{"dup":null,"rtt":1}]"#),
            (0, vec![(Reason::Duplicate, 1)])
        );
        assert_eq!(
            with(r#"[{"rtt":null}]"#),
            (0, vec![(Reason::MalformedResult, 1)])
        );
        assert_eq!(with("null"), (0, vec![(Reason::NoPackets, 1)]));
        assert_eq!(with(r#"[{"x":null}]"#).0, 1);
    }

    #[test]
    fn python_number_rules() {
        assert_eq!(Scalar::Str(" 42 ".into()).as_int(), Some(42));
        assert_eq!(Scalar::Str("4.5".into()).as_int(), None);
        assert_eq!(Scalar::Float(4.9).as_int(), Some(4));
        assert_eq!(Scalar::Float(f64::INFINITY).as_int(), None);
        assert_eq!(Scalar::Str("1e3".into()).as_float(), Some(1000.0));
        assert!(Scalar::Str("nan".into()).as_float().unwrap().is_nan());
        assert_eq!(Scalar::Null.as_float(), None);
    }
}
