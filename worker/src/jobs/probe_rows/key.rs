//! The probe-rows job's shuffle rows: a map task's valid measurements in sort-key form,
//! written to the engine's shuffle ([`crate::engine::shuffle`]) by partition.
//!
//! A measurement is one fixed-width, memcmp-ordered key (column `key`,
//! FixedSizeBinary(45)), so the reduce sorts a single binary column:
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

use std::net::IpAddr;
use std::sync::{Arc, LazyLock};

use arrow::array::{ArrayRef, FixedSizeBinaryArray, RecordBatch};
use arrow::buffer::Buffer;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use probeflow_reader::row::RttCode;

use crate::engine::external_sort::SortRecord;
use crate::engine::shuffle;
use crate::error::Result;

pub const KEY_LEN: usize = 45;
/// Rows per IPC batch inside a segment.
const BATCH_ROWS: usize = 65_536;

pub static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![Field::new(
        "key",
        DataType::FixedSizeBinary(KEY_LEN as i32),
        false,
    )]))
});

/// The 17 key bytes of an address: network order, zero-padded to 16, then its length.
pub fn addr_key(addr: &IpAddr) -> [u8; 17] {
    let mut k = [0u8; 17];
    match addr {
        IpAddr::V4(a) => {
            k[..4].copy_from_slice(&a.octets());
            k[16] = 4;
        }
        IpAddr::V6(a) => {
            k[..16].copy_from_slice(&a.octets());
            k[16] = 16;
        }
    }
    k
}

/// The key of one measurement from its parts (addresses as [`addr_key`] gives them).
pub fn key(src: &[u8; 17], event_time: u64, dst: &[u8; 17], rtt: Option<RttCode>) -> [u8; KEY_LEN] {
    let mut k = [0u8; KEY_LEN];
    write_key(&mut k, src, event_time, dst, rtt);
    k
}

/// Writes the key of one measurement into `out`, field by field.
#[inline]
fn write_key(
    out: &mut [u8; KEY_LEN],
    src: &[u8; 17],
    event_time: u64,
    dst: &[u8; 17],
    rtt: Option<RttCode>,
) {
    out[..17].copy_from_slice(src);
    out[17..25].copy_from_slice(&event_time.to_be_bytes());
    out[25..42].copy_from_slice(dst);
    let [hi, lo] = rtt.map_or([0, 0], |code| code.0.to_be_bytes());
    out[42..].copy_from_slice(&[u8::from(rtt.is_some()), hi, lo]);
}

/// Keys staged per partition before they move to its buffer.
const STAGED_KEYS: usize = 8;

/// A map task's shuffle keys, by partition.
///
/// Consecutive rows go to unrelated partitions, and a key stored straight into its
/// partition's buffer is a store to one of `partitions` far-apart places in memory, each
/// a cache miss (64 streams defeat the hardware's prefetchers). Instead each key is
/// written to its partition's staging area, [`STAGED_KEYS`] keys in a few cache lines
/// that stay in L1, and a full staging area moves to the buffer in one sequential copy
/// (software write-combining).
pub struct PartitionedKeys {
    /// `partitions × STAGED_KEYS` key slots.
    staged: Vec<[u8; KEY_LEN]>,
    /// Keys staged per partition.
    counts: Vec<u8>,
    buffers: Vec<Vec<u8>>,
}

impl PartitionedKeys {
    /// Empty buffers for `partitions`, each with room for `expected_keys` keys.
    pub fn new(partitions: usize, expected_keys: usize) -> Self {
        PartitionedKeys {
            staged: vec![[0; KEY_LEN]; partitions * STAGED_KEYS],
            counts: vec![0; partitions],
            buffers: (0..partitions)
                .map(|_| Vec::with_capacity(expected_keys * KEY_LEN))
                .collect(),
        }
    }

    pub fn partitions(&self) -> usize {
        self.buffers.len()
    }

    /// Adds the key of one measurement to `partition` (below [`Self::partitions`]).
    #[inline]
    pub fn push(
        &mut self,
        partition: usize,
        src: &[u8; 17],
        event_time: u64,
        dst: &[u8; 17],
        rtt: Option<RttCode>,
    ) {
        let staged = usize::from(self.counts[partition]);
        let first = partition * STAGED_KEYS;
        write_key(&mut self.staged[first + staged], src, event_time, dst, rtt);
        if staged + 1 == STAGED_KEYS {
            self.buffers[partition]
                .extend_from_slice(self.staged[first..first + STAGED_KEYS].as_flattened());
            self.counts[partition] = 0;
        } else {
            self.counts[partition] = (staged + 1) as u8;
        }
    }

    /// Every partition's keys, in the order they were pushed.
    pub fn into_buffers(mut self) -> Vec<Vec<u8>> {
        for (partition, buffer) in self.buffers.iter_mut().enumerate() {
            let first = partition * STAGED_KEYS;
            let staged = usize::from(self.counts[partition]);
            buffer.extend_from_slice(self.staged[first..first + staged].as_flattened());
        }
        self.buffers
    }
}

/// A shuffle key as the reduce sorts it ([`crate::engine::external_sort`]): its 45 bytes
/// as six big-endian words (the last padded with three zero bytes), so that comparing
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

/// A decoded key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key<'a> {
    /// Source address bytes (4 or 16).
    pub src: &'a [u8],
    /// The key's first 17 bytes: equal for the measurements of one source.
    pub src_key: &'a [u8],
    pub event_time: u64,
    /// Destination address bytes (4 or 16).
    pub dst: &'a [u8],
    pub rtt: Option<RttCode>,
}

/// Splits a key into its fields; `None` if the lengths are not 4 or 16.
pub fn parse_key(k: &[u8]) -> Option<Key<'_>> {
    if k.len() != KEY_LEN {
        return None;
    }
    let len = |b: u8| matches!(b, 4 | 16).then_some(b as usize);
    let src_len = len(k[16])?;
    let dst_len = len(k[41])?;
    let mut t = [0u8; 8];
    t.copy_from_slice(&k[17..25]);
    Some(Key {
        src: &k[..src_len],
        src_key: &k[..17],
        event_time: u64::from_be_bytes(t),
        dst: &k[25..25 + dst_len],
        rtt: (k[42] == 1).then(|| RttCode(u16::from_be_bytes([k[43], k[44]]))),
    })
}

/// Appends the keys of one partition (`KEY_LEN` bytes each) to `out` as one shuffle
/// segment; returns its length. The keys are moved into Arrow buffers, not copied.
pub fn encode_segment(out: &mut Vec<u8>, keys: Vec<u8>) -> Result<u64> {
    let total = keys.len();
    let keys = Buffer::from_vec(keys);
    let step = BATCH_ROWS * KEY_LEN;
    let batches = (0..total).step_by(step.max(1)).map(|offset| {
        let len = step.min(total - offset);
        let array = FixedSizeBinaryArray::try_new(
            KEY_LEN as i32,
            keys.slice_with_length(offset, len),
            None,
        )?;
        let columns: Vec<ArrayRef> = vec![Arc::new(array)];
        Ok(RecordBatch::try_new(SCHEMA.clone(), columns)?)
    });
    shuffle::encode_segment(out, &SCHEMA, batches)
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
    fn partitioned_keys_keep_each_partitions_push_order() {
        let partitions = 3;
        let mut keys = PartitionedKeys::new(partitions, 1);
        let mut expected = vec![Vec::new(); partitions];
        let src = addr_key(&"192.0.2.1".parse().unwrap());
        let dst = addr_key(&"2001:db8::9".parse().unwrap());
        // Enough keys that every partition fills its staging area several times over,
        // and ends part-way through one.
        for i in 0..(STAGED_KEYS as u64 * 7 + 5) {
            let p = (i * 7 % 11 % 3) as usize;
            let rtt = (i % 4 != 0).then_some(RttCode(i as u16));
            keys.push(p, &src, i, &dst, rtt);
            expected[p].extend_from_slice(&super::key(&src, i, &dst, rtt));
        }
        let buffers = keys.into_buffers();
        assert_eq!(buffers.len(), partitions);
        for (p, (got, want)) in buffers.iter().zip(&expected).enumerate() {
            assert!(!want.is_empty(), "partition {p} got no keys");
            assert_eq!(got, want, "partition {p}");
        }
    }

    #[test]
    fn keys_round_trip() {
        let k = key("2001:db8::1", 77, "192.0.2.9", Some(0x1234));
        assert_eq!(k.len(), KEY_LEN);
        let p = parse_key(&k).unwrap();
        assert_eq!(p.src.len(), 16);
        assert_eq!(p.event_time, 77);
        assert_eq!(p.dst, &[192, 0, 2, 9]);
        assert_eq!(p.rtt, Some(RttCode(0x1234)));
        let failed = key("10.0.0.1", 1, "10.0.0.2", None);
        assert_eq!(parse_key(&failed).unwrap().rtt, None);
        assert!(parse_key(&k[..44]).is_none());
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
