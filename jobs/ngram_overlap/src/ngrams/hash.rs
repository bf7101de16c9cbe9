//! Hashes: a token's bytes in one or two multiplies, and the window keys (a
//! polynomial over token hashes, mixed) the index holds and the scan looks up.

/// A 64-bit hash of a token's bytes (in-process only: never written anywhere): each
/// 16 bytes (zero-padded; at least one step) folded in with one 64×64→128-bit
/// multiply of its two words, then one more to mix: no branch on the length of a
/// token of up to 16 bytes, the common case.
#[cfg(test)] // the readable reference of token_hash_padded
pub(super) fn token_hash(bytes: &[u8]) -> u64 {
    let mut h = hash_seed(bytes.len());
    let mut chunks = bytes.chunks_exact(16);
    for c in &mut chunks {
        let (w0, w1) = c.split_at(8);
        h = hash_step(h, load_short(w0), load_short(w1));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() || bytes.is_empty() {
        let (w0, w1) = rest.split_at(rest.len().min(8));
        h = hash_step(h, load_short(w0), load_short(w1));
    }
    mix(h)
}

pub(super) fn hash_seed(len: usize) -> u64 {
    0x243f_6a88_85a3_08d3u64 ^ (len as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The high and low halves of `a × b`, folded.
#[inline]
pub(super) fn fold_multiply(a: u64, b: u64) -> u64 {
    let m = u128::from(a) * u128::from(b);
    (m as u64) ^ ((m >> 64) as u64)
}

#[inline]
pub(super) fn hash_step(h: u64, w0: u64, w1: u64) -> u64 {
    fold_multiply(w0 ^ h ^ 0xa076_1d64_78bd_642f, w1 ^ 0xe703_7ed1_a0b4_28db)
}

/// The little-endian value of 0–8 bytes (the missing high bytes zero), read with
/// fixed-size loads: a variable-length copy into a zeroed word was a `memcpy` call
/// per token and a stall on reading the word back, a quarter of the scan's
/// tokenizing time.
#[cfg(test)]
#[inline]
pub(super) fn load_short(b: &[u8]) -> u64 {
    let n = b.len();
    if n >= 4 {
        let mut lo = [0u8; 4];
        let mut hi = [0u8; 4];
        lo.copy_from_slice(&b[..4]);
        hi.copy_from_slice(&b[n - 4..]);
        // The two loads overlap for n < 8; the shared bytes are the same.
        u64::from(u32::from_le_bytes(lo)) | (u64::from(u32::from_le_bytes(hi)) << (8 * (n - 4)))
    } else if n > 0 {
        u64::from(b[0])
            | (u64::from(b[n / 2]) << (8 * (n / 2)))
            | (u64::from(b[n - 1]) << (8 * (n - 1)))
    } else {
        0
    }
}

/// [`token_hash`] of `buf[start..end]`, where `buf` holds at least 16 bytes from
/// every 16-byte step of the token on (a padded buffer): every word is one fixed-size
/// load, masked past the token's end, with no branch for a token of up to 16 bytes.
#[inline]
pub(super) fn token_hash_padded(buf: &[u8], start: usize, end: usize) -> u64 {
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&buf[at..at + 8]);
        let left = end.saturating_sub(at);
        let keep = if left >= 8 {
            u64::MAX
        } else {
            (1u64 << (8 * left)) - 1
        };
        u64::from_le_bytes(w) & keep
    };
    let mut h = hash_seed(end - start);
    let mut at = start;
    loop {
        h = hash_step(h, word(at), word(at + 8));
        at += 16;
        if at >= end {
            break;
        }
    }
    mix(h)
}

/// Zero bytes after an ASCII document's text in [`ScanTokens::buffer`] while it is
/// cut, so that [`token_hash_padded`] may load whole words past a token's end.
pub(super) const PADDING: &str = "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";

pub(super) fn mix(h: u64) -> u64 {
    fold_multiply(h, 0xc4ce_b9fe_1a85_ec53)
}

/// The base of the window hash.
pub(super) const BASE: u64 = 0x100_0000_01b3;

/// The key of a window: its polynomial hash with its length, multiplied and folded
/// so that both the low bits (map buckets, filters) and the high bits are mixed.
pub(super) fn window_key(poly: u64, n: u32) -> u64 {
    let k = (poly ^ u64::from(n).wrapping_mul(0xd6e8_feb8_6659_fd93))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    k ^ (k >> 29)
}

/// The polynomial hashes of n-gram texts: each text copied into a buffer padded as a
/// scanned document's is, its space-separated tokens hashed with the same whole-word
/// loads (the tests' reference for the keys [`ScanTokens`] computes).
#[cfg(test)]
#[derive(Default)]
pub(super) struct NgramHasher {
    pub(super) padded: Vec<u8>,
}

#[cfg(test)]
impl NgramHasher {
    /// The polynomial hash of the first `limit` tokens of `text`.
    pub(super) fn poly(&mut self, text: &str, limit: u32) -> u64 {
        self.padded.clear();
        self.padded.extend_from_slice(text.as_bytes());
        self.padded.extend_from_slice(PADDING.as_bytes());
        let bytes = &self.padded[..];
        let mut poly = 0u64;
        let mut start = 0usize;
        let mut taken = 0u32;
        while taken < limit {
            let end = bytes[start..text.len()]
                .iter()
                .position(|&b| b == b' ')
                .map_or(text.len(), |k| start + k);
            poly = poly
                .wrapping_mul(BASE)
                .wrapping_add(token_hash_padded(bytes, start, end));
            taken += 1;
            if end == text.len() {
                break;
            }
            start = end + 1;
        }
        poly
    }

    /// The window key of an n-gram's text.
    pub(super) fn key(&mut self, text: &str, n: u32) -> u64 {
        window_key(self.poly(text, u32::MAX), n)
    }

    /// The window key of the first `n` tokens of an n-gram's text.
    pub(super) fn prefix_key(&mut self, text: &str, n: u32) -> u64 {
        window_key(self.poly(text, n), n)
    }
}

/// The window key of an n-gram's text.
#[cfg(test)]
pub(super) fn ngram_key(text: &str, n: u32) -> u64 {
    NgramHasher::default().key(text, n)
}

/// The window key of the first `n` tokens of an n-gram's text.
#[cfg(test)]
pub(super) fn prefix_key(text: &str, n: u32) -> u64 {
    NgramHasher::default().prefix_key(text, n)
}
