//! The physical layout of Riegeli/records files: blocks, block headers, chunk headers,
//! hashes and the position arithmetic that places chunks between block headers.
//!
//! The file is a sequence of chunks interrupted every 64 KiB ([`BLOCK_SIZE`]) by a
//! 24-byte block header. Positions here are physical file offsets; a chunk's *logical*
//! bytes (header, data, padding) are what remains after removing the block headers.
//! Formulas follow Riegeli's `records/block.h` and the format specification.

use highway::{HighwayHash, HighwayHasher, Key};

pub const BLOCK_SIZE: u64 = 1 << 16;
pub const BLOCK_HEADER_SIZE: u64 = 24;
pub const USABLE_BLOCK_SIZE: u64 = BLOCK_SIZE - BLOCK_HEADER_SIZE;
pub const CHUNK_HEADER_SIZE: u64 = 40;
/// Records per chunk fit in the chunk header's 7 bytes.
pub const MAX_NUM_RECORDS: u64 = (1 << 56) - 1;

/// `Riegeli/` and `records\n` as little-endian words, twice.
const HASH_KEY: [u64; 4] = [
    0x2f69_6c65_6765_6952,
    0x0a73_6472_6f63_6572,
    0x2f69_6c65_6765_6952,
    0x0a73_6472_6f63_6572,
];

/// Riegeli's hash: 64-bit HighwayHash with the fixed key.
pub fn hash(data: &[u8]) -> u64 {
    HighwayHasher::new(Key(HASH_KEY)).hash64(data)
}

/// Whether `stored` is the hash of `data`. Under `cfg(fuzzing)` every hash matches, so
/// that a fuzzer's mutations reach the decoding behind the hashes.
pub fn hash_matches(stored: u64, data: &[u8]) -> bool {
    cfg!(fuzzing) || stored == hash(data)
}

/// Chunk types (the first byte of the header's type/record-count word).
pub mod chunk_type {
    pub const SIGNATURE: u8 = b's';
    pub const METADATA: u8 = b'm';
    pub const PADDING: u8 = b'p';
    pub const SIMPLE: u8 = b'r';
    pub const TRANSPOSED: u8 = b't';
}

pub fn remaining_in_block(pos: u64) -> u64 {
    pos.wrapping_neg() % BLOCK_SIZE
}

pub fn is_block_boundary(pos: u64) -> bool {
    pos.is_multiple_of(BLOCK_SIZE)
}

/// A chunk may begin at `pos`: not inside nor immediately after a block header.
pub fn is_possible_chunk_boundary(pos: u64) -> bool {
    remaining_in_block(pos) < USABLE_BLOCK_SIZE
}

pub fn round_up_to_possible_chunk_boundary(pos: u64) -> Option<u64> {
    pos.checked_add(remaining_in_block(pos).saturating_sub(USABLE_BLOCK_SIZE - 1))
}

/// The physical position `length` logical bytes after `chunk_begin`.
pub fn add_with_overhead(chunk_begin: u64, length: u64) -> Option<u64> {
    let overhead_blocks = length
        .checked_add((chunk_begin % BLOCK_SIZE + USABLE_BLOCK_SIZE - 1) % BLOCK_SIZE)?
        / USABLE_BLOCK_SIZE;
    chunk_begin
        .checked_add(length)?
        .checked_add(overhead_blocks.checked_mul(BLOCK_HEADER_SIZE)?)
}

/// The number of logical bytes between two physical positions.
pub fn distance_without_overhead(chunk_begin: u64, pos: u64) -> u64 {
    let overhead_blocks = pos / BLOCK_SIZE - chunk_begin / BLOCK_SIZE;
    (pos - (pos % BLOCK_SIZE).min(BLOCK_HEADER_SIZE))
        - (chunk_begin - (chunk_begin % BLOCK_SIZE).min(BLOCK_HEADER_SIZE))
        - overhead_blocks * BLOCK_HEADER_SIZE
}

/// Where a chunk that begins at `chunk_begin` ends (start of the next chunk).
pub fn chunk_end(chunk_begin: u64, data_size: u64, num_records: u64) -> Option<u64> {
    let by_size = add_with_overhead(chunk_begin, CHUNK_HEADER_SIZE.checked_add(data_size)?)?;
    let by_records = round_up_to_possible_chunk_boundary(chunk_begin.checked_add(num_records)?)?;
    Some(by_size.max(by_records))
}

/// The position after a padding chunk that brings `pos` to a multiple of `padding`.
pub fn pos_after_padding(pos: u64, padding: u64) -> u64 {
    if padding <= 1 || pos.is_multiple_of(padding) {
        return pos;
    }
    let mut length = padding - pos % padding;
    while length < CHUNK_HEADER_SIZE {
        length += padding;
    }
    let mut end = pos + length;
    while !is_possible_chunk_boundary(end) {
        end += padding;
    }
    end
}

/// A 24-byte block header: the hash, then the distances to the interrupted chunk's
/// beginning and end.
pub fn block_header(previous_chunk: u64, next_chunk: u64) -> [u8; BLOCK_HEADER_SIZE as usize] {
    let mut bytes = [0u8; BLOCK_HEADER_SIZE as usize];
    bytes[8..16].copy_from_slice(&previous_chunk.to_le_bytes());
    bytes[16..24].copy_from_slice(&next_chunk.to_le_bytes());
    let h = hash(&bytes[8..]);
    bytes[..8].copy_from_slice(&h.to_le_bytes());
    bytes
}

/// Decodes a block header; `None` if its hash does not match.
pub fn parse_block_header(bytes: &[u8; BLOCK_HEADER_SIZE as usize]) -> Option<(u64, u64)> {
    let stored = u64::from_le_bytes(bytes[..8].try_into().ok()?);
    if !hash_matches(stored, &bytes[8..]) {
        return None;
    }
    let previous = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    let next = u64::from_le_bytes(bytes[16..24].try_into().ok()?);
    Some((previous, next))
}

/// A 40-byte chunk header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    pub data_size: u64,
    pub data_hash: u64,
    pub chunk_type: u8,
    pub num_records: u64,
    pub decoded_data_size: u64,
}

/// Why a chunk header was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    BadHash,
}

impl ChunkHeader {
    pub fn new(data: &[u8], chunk_type: u8, num_records: u64, decoded_data_size: u64) -> Self {
        ChunkHeader {
            data_size: data.len() as u64,
            data_hash: hash(data),
            chunk_type,
            num_records,
            decoded_data_size,
        }
    }

    pub fn encode(&self) -> [u8; CHUNK_HEADER_SIZE as usize] {
        let mut bytes = [0u8; CHUNK_HEADER_SIZE as usize];
        bytes[8..16].copy_from_slice(&self.data_size.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.data_hash.to_le_bytes());
        let type_and_records = u64::from(self.chunk_type) | (self.num_records << 8);
        bytes[24..32].copy_from_slice(&type_and_records.to_le_bytes());
        bytes[32..40].copy_from_slice(&self.decoded_data_size.to_le_bytes());
        let h = hash(&bytes[8..]);
        bytes[..8].copy_from_slice(&h.to_le_bytes());
        bytes
    }

    pub fn decode(bytes: &[u8; CHUNK_HEADER_SIZE as usize]) -> Result<Self, HeaderError> {
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        if !hash_matches(word(0), &bytes[8..]) {
            return Err(HeaderError::BadHash);
        }
        Ok(ChunkHeader {
            data_size: word(1),
            data_hash: word(2),
            chunk_type: (word(3) & 0xff) as u8,
            num_records: word(3) >> 8,
            decoded_data_size: word(4),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixed first 64 bytes of every Riegeli/records file, from the format spec.
    const SIGNATURE: [u8; 64] = [
        0x83, 0xaf, 0x70, 0xd1, 0x0d, 0x88, 0x4a, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x91, 0xba, 0xc2, 0x3c, 0x92, 0x87,
        0xe1, 0xa9, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe1, 0x9f, 0x13, 0xc0, 0xe9,
        0xb1, 0xc3, 0x72, 0x73, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn signature_bytes_match_the_specification() {
        let header = ChunkHeader::new(&[], chunk_type::SIGNATURE, 0, 0);
        let mut out = block_header(0, 64).to_vec();
        out.extend_from_slice(&header.encode());
        assert_eq!(out, SIGNATURE);
        let parsed = ChunkHeader::decode(&SIGNATURE[24..].try_into().unwrap()).unwrap();
        assert_eq!(parsed, header);
        assert_eq!(
            parse_block_header(&SIGNATURE[..24].try_into().unwrap()),
            Some((0, 64))
        );
    }

    #[test]
    fn corrupt_headers_are_detected() {
        let mut bytes = ChunkHeader::new(b"abc", chunk_type::SIMPLE, 1, 3).encode();
        bytes[20] ^= 1;
        assert_eq!(ChunkHeader::decode(&bytes), Err(HeaderError::BadHash));
        let mut block = block_header(5, 6);
        block[9] ^= 0x80;
        assert_eq!(parse_block_header(&block), None);
    }

    #[test]
    fn chunk_boundaries() {
        assert!(is_possible_chunk_boundary(0));
        for p in 1..=24 {
            assert!(!is_possible_chunk_boundary(BLOCK_SIZE + p), "{p}");
        }
        assert!(is_possible_chunk_boundary(BLOCK_SIZE + 25));
        assert_eq!(
            round_up_to_possible_chunk_boundary(BLOCK_SIZE + 3),
            Some(BLOCK_SIZE + 25)
        );
        assert_eq!(
            round_up_to_possible_chunk_boundary(BLOCK_SIZE),
            Some(BLOCK_SIZE)
        );
        // The signature chunk ends at 64: 24 bytes of block header + 40 of chunk header.
        assert_eq!(chunk_end(0, 0, 0), Some(64));
        // A chunk that fills a block exactly ends at the boundary, not after a header.
        let begin = 64;
        let len = BLOCK_SIZE - begin - CHUNK_HEADER_SIZE;
        assert_eq!(chunk_end(begin, len, 1), Some(BLOCK_SIZE));
        assert_eq!(chunk_end(begin, len + 1, 1), Some(BLOCK_SIZE + 25));
        // Many records in a tiny chunk: padded so positions stay unique.
        assert_eq!(chunk_end(64, 1, 1000), Some(1064));
        assert_eq!(add_with_overhead(u64::MAX - 10, 100), None);
    }

    #[test]
    fn distance_inverts_add_with_overhead() {
        for begin in [
            0,
            64,
            1000,
            BLOCK_SIZE - 100,
            BLOCK_SIZE + 25,
            3 * BLOCK_SIZE,
        ] {
            for len in [0, 1, 39, 40, 65_000, 65_512, 200_000] {
                let end = add_with_overhead(begin, len).unwrap();
                assert_eq!(distance_without_overhead(begin, end), len, "{begin} {len}");
            }
        }
    }

    #[test]
    fn padding_reaches_block_boundaries() {
        assert_eq!(pos_after_padding(BLOCK_SIZE, BLOCK_SIZE), BLOCK_SIZE);
        assert_eq!(pos_after_padding(100, BLOCK_SIZE), BLOCK_SIZE);
        // Too little room for a chunk header: one more block.
        assert_eq!(
            pos_after_padding(BLOCK_SIZE - 10, BLOCK_SIZE),
            2 * BLOCK_SIZE
        );
    }
}
