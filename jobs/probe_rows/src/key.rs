//! The probe-rows job's measurements as they cross the shuffle, and as the reduce sorts
//! them.
//!
//! **The sort key.** A measurement sorts as one fixed-width, memcmp-ordered key of 45
//! bytes ([`SortKey`], built as words by `words_key`):
//!
//! | bytes | field |
//! |---|---|
//! | 0..16, 16 | source address (network order, zero-padded), its length (4 or 16) |
//! | 17..25 | event time, u64 big-endian |
//! | 25..41, 41 | destination address, padded, its length |
//! | 42, 43..45 | RTT present (0 = failed ping, 1 = valid), RTT code big-endian |
//!
//! Byte order of the key = order by (source bytes, time, destination bytes, RTT with
//! failures first): padding with zeros and then comparing lengths orders a 4-byte address
//! before any 16-byte one it is a prefix of, exactly as comparing the raw bytes does.
//!
//! **The shuffle record.** Padding is for sorting, not for moving: a map writes each
//! measurement as a shuffle record of 17 to 43 bytes (19 for an IPv4 ping that got an
//! answer, against the key's 45), and the reduce turns each record back into its key
//! ([`decode_records`]):
//!
//! | bytes | field |
//! |---|---|
//! | 1 | tag: bit 0 source is IPv6, bit 1 destination is IPv6, bit 2 RTT present |
//! | 4 or 16 | source address, network order |
//! | 8 | event time, u64 big-endian |
//! | 4 or 16 | destination address |
//! | 2, if present | RTT code, big-endian |
//!
//! A partition's segment of a map's shuffle file is its records back to back
//! ([`probeflow_engine::shuffle`]'s job-encoded segments); the reduce checks every tag, that
//! the last record ends where the segment does, and the record count against the
//! shuffle index.

use std::net::IpAddr;

use probeflow_reader::row::RttCode;

use probeflow_engine::error::{EngineError, Result};
use probeflow_engine::external_sort::SortRecord;

pub const KEY_LEN: usize = 45;
/// The 17 key bytes of an address: network order, zero-padded to 16, then its length.
pub fn addr_key(addr: &IpAddr) -> [u8; 17] {
    match addr {
        IpAddr::V4(a) => octets_key(&a.octets()),
        IpAddr::V6(a) => octets_key(&a.octets()),
    }
}

/// The 17 key bytes of an address given as its 4 or 16 octets (see [`addr_key`]).
fn octets_key(octets: &[u8]) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[..octets.len()].copy_from_slice(octets);
    k[16] = octets.len() as u8;
    k
}

/// The key of one measurement from its parts (addresses as [`addr_key`] gives them),
/// byte by byte as the table above lays it out: the reference the tests hold
/// `words_key` and [`SortKey::parts`] to (the job builds keys as words).
#[cfg(test)]
pub fn key(src: &[u8; 17], event_time: u64, dst: &[u8; 17], rtt: Option<RttCode>) -> [u8; KEY_LEN] {
    let mut k = [0u8; KEY_LEN];
    k[..17].copy_from_slice(src);
    k[17..25].copy_from_slice(&event_time.to_be_bytes());
    k[25..42].copy_from_slice(dst);
    if let Some(code) = rtt {
        k[42] = 1;
        k[43..45].copy_from_slice(&code.0.to_be_bytes());
    }
    k
}

/// The longest shuffle record: tag, two IPv6 addresses, time, RTT.
const RECORD_MAX: usize = 1 + 16 + 8 + 16 + 2;

/// The shuffle record of an IPv4 ping that got an answer: tag, addresses, time, RTT.
pub const IPV4_RECORD: usize = 1 + 4 + 8 + 4 + 2;

/// Shuffle-record tag bits.
const TAG_SRC_V6: u8 = 1;
const TAG_DST_V6: u8 = 2;
const TAG_RTT: u8 = 4;

/// Writes the shuffle record of one measurement at the start of `out` (at least
/// [`RECORD_MAX`] bytes; bytes past the record may be overwritten) and returns its
/// length. Addresses are copied 16 bytes wide whatever their length, and the record's
/// next field starts after the address's own bytes: no branch on the address family.
#[inline]
fn write_record(
    out: &mut [u8; RECORD_MAX],
    src: &[u8; 17],
    event_time: u64,
    dst: &[u8; 17],
    rtt: Option<RttCode>,
) -> usize {
    let src_len = usize::from(src[16] == 16) * 12 + 4;
    let dst_len = usize::from(dst[16] == 16) * 12 + 4;
    out[0] = if src_len == 16 { TAG_SRC_V6 } else { 0 }
        | if dst_len == 16 { TAG_DST_V6 } else { 0 }
        | if rtt.is_some() { TAG_RTT } else { 0 };
    out[1..17].copy_from_slice(&src[..16]);
    let at = 1 + src_len;
    out[at..at + 8].copy_from_slice(&event_time.to_be_bytes());
    let at = at + 8;
    out[at..at + 16].copy_from_slice(&dst[..16]);
    let at = at + dst_len;
    out[at..at + 2].copy_from_slice(&rtt.map_or([0, 0], |code| code.0.to_be_bytes()));
    at + if rtt.is_some() { 2 } else { 0 }
}

/// Decodes `bytes`, shuffle records back to back, handing each measurement's sort key
/// to `each`; returns how many there were. A bad tag or a record cut short is an error
/// naming `file` (the segment's shuffle file) and the record's offset.
pub fn decode_records(
    bytes: &[u8],
    file: &str,
    mut each: impl FnMut(SortKey) -> Result<()>,
) -> Result<u64> {
    let bad = |at: usize, what: &str| EngineError::Shuffle {
        file: file.to_string(),
        what: format!("shuffle record at byte {at} of its segment: {what}"),
    };
    let mut records = 0u64;
    let mut at = 0;
    while at < bytes.len() {
        let tag = bytes[at];
        if tag & !(TAG_SRC_V6 | TAG_DST_V6 | TAG_RTT) != 0 {
            return Err(bad(at, &format!("unknown tag {tag:#04x}")));
        }
        let src_len = if tag & TAG_SRC_V6 != 0 { 16 } else { 4 };
        let dst_len = if tag & TAG_DST_V6 != 0 { 16 } else { 4 };
        let rtt_len = if tag & TAG_RTT != 0 { 2 } else { 0 };
        let len = 1 + src_len + 8 + dst_len + rtt_len;
        let Some(record) = bytes.get(at..at + len) else {
            return Err(bad(at, "cut short"));
        };
        let key = if tag & (TAG_SRC_V6 | TAG_DST_V6) == 0 {
            ipv4_sort_key(record, rtt_len != 0)
        } else {
            let time = 1 + src_len;
            let dst = time + 8;
            words_key(
                addr_bits(record, 1, src_len),
                src_len as u64,
                be_u64(record, time),
                addr_bits(record, dst, dst_len),
                dst_len as u64,
                (rtt_len != 0).then(|| be_u16(record, len - 2)),
            )
        };
        each(key)?;
        records += 1;
        at += len;
    }
    Ok(records)
}

/// The sort key of an IPv4-to-IPv4 shuffle record (`record`: tag, source, time,
/// destination, then the RTT code if `rtt`): [`words_key`] of its fields, read in 64
/// bits (the common case).
#[inline]
fn ipv4_sort_key(record: &[u8], rtt: bool) -> SortKey {
    words_key(
        addr_bits(record, 1, 4),
        4,
        be_u64(record, 5),
        addr_bits(record, 13, 4),
        4,
        rtt.then(|| be_u16(record, 17)),
    )
}

/// The address of `len` (4 or 16) bytes at `at` of `record`, left-aligned in 128 bits
/// (zero-padded, as the key pads it).
#[inline]
fn addr_bits(record: &[u8], at: usize, len: usize) -> u128 {
    if len == 16 {
        u128::from_be_bytes(bytes_at(record, at))
    } else {
        u128::from(u32::from_be_bytes(bytes_at(record, at))) << 96
    }
}

/// The `N` bytes at `at` of `record` (zeros past its end: the caller checked it).
#[inline]
fn bytes_at<const N: usize>(record: &[u8], at: usize) -> [u8; N] {
    record
        .get(at..)
        .and_then(<[u8]>::first_chunk::<N>)
        .copied()
        .unwrap_or([0; N])
}

/// The big-endian u64 at `at` of `record`.
#[inline]
fn be_u64(record: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(bytes_at(record, at))
}

/// The big-endian u16 at `at` of `record`.
#[inline]
fn be_u16(record: &[u8], at: usize) -> u16 {
    u16::from_be_bytes(bytes_at(record, at))
}

/// The sort key of a measurement built as its words directly, each a few shifts of the
/// fields (going through the key's bytes made the CPU reload freshly stored bytes at
/// other offsets, which stalls): addresses left-aligned in 128 bits (zero-padded, as
/// the key pads them) with their lengths, the time, the RTT code if any. Key bytes:
/// 0..16 source, 16 its length, 17..25 time, 25..41 destination, 41 its length, 42 RTT
/// present, 43..45 RTT code, 45..48 the padding of the last word.
#[inline]
fn words_key(
    src: u128,
    src_len: u64,
    time: u64,
    dst: u128,
    dst_len: u64,
    rtt: Option<u16>,
) -> SortKey {
    let (present, code) = rtt.map_or((0, 0), |c| (1, u64::from(c)));
    SortKey([
        (src >> 64) as u64,
        src as u64,
        (src_len << 56) | (time >> 8),
        ((time & 0xff) << 56) | (dst >> 72) as u64,
        (dst >> 8) as u64,
        (((dst & 0xff) as u64) << 56) | (dst_len << 48) | (present << 40) | (code << 24),
    ])
}

/// Bytes staged per partition before they move to its buffer.
const STAGED_BYTES: usize = 512;

/// A map task's shuffle records, by partition.
///
/// Consecutive rows go to unrelated partitions, and a record stored straight into its
/// partition's buffer is a store to one of `partitions` far-apart places in memory, each
/// a cache miss (64 streams defeat the hardware's prefetchers). Instead each record is
/// written to its partition's staging area of [`STAGED_BYTES`], and a full staging area
/// moves to the buffer in one sequential copy (software write-combining). The staging
/// areas of 64 partitions (32 KiB) stay in L1, those of a thousand in L2.
pub struct PartitionedRecords {
    staged: Vec<[u8; STAGED_BYTES]>,
    /// Bytes staged per partition.
    fill: Vec<u16>,
    rows: Vec<u64>,
    buffers: Vec<Vec<u8>>,
}

impl PartitionedRecords {
    /// Empty buffers for `partitions`, each with room for `expected_bytes`.
    pub fn new(partitions: usize, expected_bytes: usize) -> Self {
        PartitionedRecords {
            staged: vec![[0; STAGED_BYTES]; partitions],
            fill: vec![0; partitions],
            rows: vec![0; partitions],
            buffers: (0..partitions)
                .map(|_| Vec::with_capacity(expected_bytes))
                .collect(),
        }
    }

    pub fn partitions(&self) -> usize {
        self.buffers.len()
    }

    /// Adds the record of one measurement to `partition` (below [`Self::partitions`]).
    #[inline]
    pub fn push(
        &mut self,
        partition: usize,
        src: &[u8; 17],
        event_time: u64,
        dst: &[u8; 17],
        rtt: Option<RttCode>,
    ) {
        let staged = &mut self.staged[partition];
        let fill = usize::from(self.fill[partition]);
        let Some(slot) = staged[fill..].first_chunk_mut::<RECORD_MAX>() else {
            unreachable!("a staging area is flushed while it has room for a record")
        };
        let fill = fill + write_record(slot, src, event_time, dst, rtt);
        self.rows[partition] += 1;
        if fill > STAGED_BYTES - RECORD_MAX {
            self.buffers[partition].extend_from_slice(&staged[..fill]);
            self.fill[partition] = 0;
        } else {
            self.fill[partition] = fill as u16;
        }
    }

    /// The bytes of records held (staged or buffered).
    pub fn bytes(&self) -> usize {
        self.buffers.iter().map(Vec::len).sum::<usize>()
            + self.fill.iter().map(|&f| usize::from(f)).sum::<usize>()
    }

    /// Every partition's records so far and their count, in partition order, leaving
    /// the partitions empty (their buffers' memory given back).
    pub fn take(&mut self) -> Vec<(Vec<u8>, u64)> {
        (0..self.partitions())
            .map(|p| {
                let fill = usize::from(self.fill[p]);
                let mut records = std::mem::take(&mut self.buffers[p]);
                records.extend_from_slice(&self.staged[p][..fill]);
                self.fill[p] = 0;
                (records, std::mem::take(&mut self.rows[p]))
            })
            .collect()
    }

    /// Every partition's records, in the order they were pushed, and their count.
    pub fn into_partitions(mut self) -> impl Iterator<Item = (Vec<u8>, u64)> {
        for (partition, buffer) in self.buffers.iter_mut().enumerate() {
            let fill = usize::from(self.fill[partition]);
            buffer.extend_from_slice(&self.staged[partition][..fill]);
        }
        self.buffers.into_iter().zip(self.rows)
    }
}

/// A measurement's sort key as the reduce sorts it ([`probeflow_engine::external_sort`]):
/// its 45 bytes as six big-endian words (the last padded with three zero bytes), so that comparing
/// the words compares the bytes, a word at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SortKey([u64; 6]);

impl SortKey {
    /// The key's bytes.
    pub fn bytes(&self) -> [u8; KEY_LEN] {
        let mut padded = [0u8; 48];
        for (word, out) in self.0.iter().zip(padded.chunks_exact_mut(8)) {
            out.copy_from_slice(&word.to_be_bytes());
        }
        let mut k = [0u8; KEY_LEN];
        k.copy_from_slice(&padded[..KEY_LEN]);
        k
    }
}

impl SortRecord for SortKey {
    const BYTES: usize = KEY_LEN;

    fn decode(bytes: &[u8]) -> Self {
        let mut padded = [0u8; 48];
        padded[..KEY_LEN].copy_from_slice(bytes);
        let mut words = [0u64; 6];
        for (word, b) in words.iter_mut().zip(padded.chunks_exact(8)) {
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            *word = u64::from_be_bytes(w);
        }
        SortKey(words)
    }

    fn encode(&self, out: &mut [u8]) {
        out.copy_from_slice(&self.bytes());
    }

    fn words(&self) -> &[u64] {
        &self.0
    }
}

/// A key's fields ([`SortKey::parts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyParts {
    src: [u8; 16],
    src_len: usize,
    pub event_time: u64,
    dst: [u8; 16],
    dst_len: usize,
    pub rtt: Option<RttCode>,
}

impl KeyParts {
    /// Source address bytes (4 or 16).
    pub fn src(&self) -> &[u8] {
        &self.src[..self.src_len]
    }

    /// Destination address bytes (4 or 16).
    pub fn dst(&self) -> &[u8] {
        &self.dst[..self.dst_len]
    }
}

impl SortKey {
    /// Whether `other` is a measurement of the same source (the keys' first 17 bytes
    /// are equal).
    #[inline]
    pub fn same_source(&self, other: &SortKey) -> bool {
        self.0[0] == other.0[0] && self.0[1] == other.0[1] && self.0[2] >> 56 == other.0[2] >> 56
    }

    /// The key's fields, read off its words with shifts (the reduce reads every key:
    /// going through its bytes made the CPU reload freshly stored bytes at other
    /// offsets, which stalls); `None` if an address length is not 4 or 16.
    #[inline]
    pub fn parts(&self) -> Option<KeyParts> {
        const LOW_7_BYTES: u64 = (1 << 56) - 1;
        let [w0, w1, w2, w3, w4, w5] = self.0;
        let len = |b: u64| matches!(b, 4 | 16).then_some(b as usize);
        let src_len = len(w2 >> 56)?;
        let dst_len = len((w5 >> 48) & 0xff)?;
        let src = (u128::from(w0) << 64) | u128::from(w1);
        let dst =
            (u128::from(w3 & LOW_7_BYTES) << 72) | (u128::from(w4) << 8) | u128::from(w5 >> 56);
        Some(KeyParts {
            src: src.to_be_bytes(),
            src_len,
            event_time: ((w2 & LOW_7_BYTES) << 8) | (w3 >> 56),
            dst: dst.to_be_bytes(),
            dst_len,
            rtt: ((w5 >> 40) & 0xff == 1).then_some(RttCode((w5 >> 24) as u16)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(src: &str, t: u64, dst: &str, rtt: Option<u16>) -> Vec<u8> {
        super::key(
            &addr_key(&src.parse().unwrap()),
            t,
            &addr_key(&dst.parse().unwrap()),
            rtt.map(RttCode),
        )
        .to_vec()
    }

    #[test]
    fn partitioned_records_decode_to_each_partitions_keys_in_push_order() {
        let partitions = 3;
        let mut records = PartitionedRecords::new(partitions, 1);
        let mut expected = vec![Vec::new(); partitions];
        let addrs = [
            "192.0.2.1",
            "2001:db8::9",
            "0.0.0.0",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        ]
        .map(|a| addr_key(&a.parse().unwrap()));
        // Every family pair, with and without an RTT, and enough records that every
        // partition flushes its staging area many times over, and ends part-way
        // through one.
        for i in 0..5000u64 {
            let p = (i * 7 % 11 % 3) as usize;
            let src = &addrs[(i % 4) as usize];
            let dst = &addrs[(i / 4 % 4) as usize];
            let rtt = (i % 3 != 0).then_some(RttCode((i * 977) as u16));
            let time = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            records.push(p, src, time, dst, rtt);
            expected[p].push(SortKey::decode(&super::key(src, time, dst, rtt)));
        }
        let partitions: Vec<(Vec<u8>, u64)> = records.into_partitions().collect();
        assert_eq!(partitions.len(), 3);
        for (p, ((bytes, rows), want)) in partitions.iter().zip(&expected).enumerate() {
            assert!(!want.is_empty(), "partition {p} got no records");
            assert_eq!(*rows, want.len() as u64, "partition {p}");
            let mut got = Vec::new();
            let n = decode_records(bytes, "f", |k| {
                got.push(k);
                Ok(())
            })
            .unwrap();
            assert_eq!(n, *rows);
            assert_eq!(&got, want, "partition {p}");
        }
        // An IPv4 ping with an RTT is 19 bytes, not the key's 45.
        let mut one = PartitionedRecords::new(1, 0);
        one.push(0, &addrs[0], 1, &addrs[2], Some(RttCode(5)));
        let (bytes, _) = one.into_partitions().next().unwrap();
        assert_eq!(bytes.len(), 19);
        assert_eq!(IPV4_RECORD, 19);
    }

    #[test]
    fn bad_shuffle_records_are_errors_naming_the_file_and_offset() {
        let mut records = PartitionedRecords::new(1, 0);
        let v4 = addr_key(&"192.0.2.1".parse().unwrap());
        records.push(0, &v4, 1, &v4, Some(RttCode(1)));
        records.push(0, &v4, 2, &v4, None);
        let (bytes, _) = records.into_partitions().next().unwrap();
        let decode = |b: &[u8]| decode_records(b, "map-00001-a1.records", |_| Ok(()));
        assert_eq!(decode(&bytes).unwrap(), 2);
        let err = decode(&bytes[..bytes.len() - 1]).unwrap_err().to_string();
        assert!(
            err.contains("map-00001-a1.records")
                && err.contains("byte 19")
                && err.contains("cut short"),
            "{err}"
        );
        let mut bad = bytes.clone();
        bad[19] = 0x08;
        let err = decode(&bad).unwrap_err().to_string();
        assert!(err.contains("unknown tag 0x08"), "{err}");
        assert_eq!(decode(&[]).unwrap(), 0);
    }

    #[test]
    fn keys_round_trip() {
        let parts = |k: &[u8]| SortKey::decode(k).parts().unwrap();
        let k = key("2001:db8::1", 77, "192.0.2.9", Some(0x1234));
        assert_eq!(k.len(), KEY_LEN);
        let p = parts(&k);
        assert_eq!(
            p.src(),
            &"2001:db8::1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets()
        );
        assert_eq!(p.event_time, 77);
        assert_eq!(p.dst(), &[192, 0, 2, 9]);
        assert_eq!(p.rtt, Some(RttCode(0x1234)));
        let failed = key("10.0.0.1", 1, "10.0.0.2", None);
        assert_eq!(parts(&failed).rtt, None);
        let mut bad_length = k.clone();
        bad_length[16] = 5;
        assert!(SortKey::decode(&bad_length).parts().is_none());
        bad_length = k.clone();
        bad_length[41] = 0;
        assert!(SortKey::decode(&bad_length).parts().is_none());
    }

    #[test]
    fn parts_read_off_the_words_are_the_bytes_fields() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut previous: Option<(SortKey, [u8; KEY_LEN])> = None;
        for _ in 0..20_000 {
            let octets = |v6: bool, r: u128| -> Vec<u8> {
                if v6 {
                    r.to_be_bytes().to_vec()
                } else {
                    (r as u32).to_be_bytes().to_vec()
                }
            };
            let wide = |a: u64, b: u64| (u128::from(a) << 64) | u128::from(b);
            let (a, b, c, d) = (next(), next(), next(), next());
            let src = octets(a & 1 == 1, wide(a, b));
            let dst = octets(a & 2 == 2, wide(c, d));
            let time = next();
            let rtt = (a & 4 == 4).then_some(RttCode(next() as u16));
            let bytes = super::key(&octets_key(&src), time, &octets_key(&dst), rtt);
            let k = SortKey::decode(&bytes);
            let p = k.parts().unwrap();
            assert_eq!(p.src(), src.as_slice());
            assert_eq!(p.event_time, time);
            assert_eq!(p.dst(), dst.as_slice());
            assert_eq!(p.rtt, rtt);
            if let Some((other, other_bytes)) = previous {
                assert_eq!(k.same_source(&other), bytes[..17] == other_bytes[..17]);
            }
            assert!(k.same_source(&k));
            // A key of the same source at another time and destination.
            let same = SortKey::decode(&super::key(
                &octets_key(&src),
                !time,
                &octets_key(&src),
                None,
            ));
            assert!(k.same_source(&same));
            previous = Some((k, bytes));
        }
    }

    #[test]
    fn key_order_is_field_order() {
        let ordered = [
            key("1.2.3.4", 9, "9.9.9.9", Some(1)),
            key("1.2.3.4", 10, "1.1.1.1", None),
            key("1.2.3.4", 10, "1.1.1.1", Some(0)),
            key("1.2.3.4", 10, "1.1.1.2", Some(0)),
            // IPv6 sharing the IPv4's first bytes sorts after it, as raw bytes do.
            key("102:304::", 0, "::1", None),
            key("2.0.0.0", 0, "1.1.1.1", None),
        ];
        for w in ordered.windows(2) {
            assert!(w[0] < w[1]);
            let (a, b) = (SortKey::decode(&w[0]), SortKey::decode(&w[1]));
            assert!(a < b, "the sort key orders as the bytes do");
            assert_eq!(a.bytes().as_slice(), w[0].as_slice());
            assert_eq!(a.words().len() * 8 - 3, KEY_LEN);
        }
    }
}
