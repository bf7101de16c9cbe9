//! 64 ASCII bytes at a time: which separate tokens and which are not ASCII (SSE2 on
//! x86-64, a word at a time elsewhere).

/// The separator mask a word (8 bytes) at a time: the portable version, and the
/// tests' reference for the SSE2 one.
#[cfg(any(test, not(all(target_arch = "x86_64", target_feature = "sse2"))))]
pub(super) mod word_at_a_time {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;

    /// Of 8 ASCII bytes (little-endian in `w`): the high bit of each byte in `[lo, hi]`.
    fn in_range(w: u64, lo: u8, hi: u8) -> u64 {
        // Bytes are < 0x80, so no sum carries into the next byte.
        let at_least = w.wrapping_add(ONES * u64::from(0x80 - lo)) & HIGH;
        let above = w.wrapping_add(ONES * u64::from(0x7f - hi)) & HIGH;
        at_least & !above
    }

    /// One bit per byte of `chunk` (at most 64 ASCII bytes; bit i for byte i): whether it
    /// separates tokens. `\s` is 9–13 and 28–32; `string.punctuation` is 33–47, 58–64,
    /// 91–96 and 123–126.
    pub(in crate::ngrams) fn separator_mask(chunk: &[u8], whitespace_only: bool) -> u64 {
        let mut mask = 0u64;
        for (k, bytes) in chunk.chunks(8).enumerate() {
            let mut word = [0u8; 8];
            word[..bytes.len()].copy_from_slice(bytes);
            let w = u64::from_le_bytes(word);
            let high = if whitespace_only {
                in_range(w, 9, 13) | in_range(w, 28, 32)
            } else {
                in_range(w, 9, 13)
                    | in_range(w, 28, 47)
                    | in_range(w, 58, 64)
                    | in_range(w, 91, 96)
                    | in_range(w, 123, 126)
            };
            // The high bit of byte j becomes bit j.
            let gathered = ((high >> 7).wrapping_mul(0x0102_0408_1020_4080)) >> 56;
            mask |= gathered << (8 * k);
        }
        mask
    }
}
#[cfg(any(test, not(all(target_arch = "x86_64", target_feature = "sse2"))))]
pub(super) use word_at_a_time::separator_mask;

/// [`separator_mask`] of a whole 64-byte block of ASCII bytes: with SSE2 (every
/// x86-64 processor has it) 16 bytes per step, a range test being a subtraction, an
/// unsigned minimum and a comparison; elsewhere the word-at-a-time version.
pub(super) fn block_separators(block: &[u8; 64], whitespace_only: bool) -> u64 {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        // SAFETY: the build targets processors with SSE2 (the cfg above).
        unsafe { sse2::block_separators(block, whitespace_only) }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    {
        separator_mask(block, whitespace_only)
    }
}

/// One bit per byte of `block` (bit i for byte i): whether it is not ASCII.
pub(super) fn block_non_ascii(block: &[u8; 64]) -> u64 {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        // SAFETY: the build targets processors with SSE2 (the cfg above).
        unsafe { sse2::block_non_ascii(block) }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    {
        non_ascii_mask(block)
    }
}

/// [`block_non_ascii`] a byte at a time: the portable version and the tests'
/// reference.
#[cfg(any(test, not(all(target_arch = "x86_64", target_feature = "sse2"))))]
pub(super) fn non_ascii_mask(block: &[u8; 64]) -> u64 {
    block
        .iter()
        .enumerate()
        .fold(0u64, |mask, (i, &b)| mask | (u64::from(b >> 7) << i))
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(super) mod sse2 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8, _mm_sub_epi8,
    };

    /// The bytes of `v` in `[lo, hi]`: all ones where they are.
    #[target_feature(enable = "sse2")]
    fn in_range(v: __m128i, lo: u8, hi: u8) -> __m128i {
        let shifted = _mm_sub_epi8(v, _mm_set1_epi8(lo as i8));
        let capped = _mm_min_epu8(shifted, _mm_set1_epi8((hi - lo) as i8));
        _mm_cmpeq_epi8(capped, shifted)
    }

    /// The high bit of each byte of `block`.
    #[target_feature(enable = "sse2")]
    pub(super) fn block_non_ascii(block: &[u8; 64]) -> u64 {
        let mut mask = 0u64;
        for (k, part) in block.chunks_exact(16).enumerate() {
            // SAFETY: `part` is 16 readable bytes; the load has no alignment need.
            let v = unsafe { _mm_loadu_si128(part.as_ptr().cast::<__m128i>()) };
            mask |= (_mm_movemask_epi8(v) as u32 as u64) << (16 * k);
        }
        mask
    }

    #[target_feature(enable = "sse2")]
    pub(super) fn block_separators(block: &[u8; 64], whitespace_only: bool) -> u64 {
        let mut mask = 0u64;
        for (k, part) in block.chunks_exact(16).enumerate() {
            // SAFETY: `part` is 16 readable bytes; the load has no alignment need.
            let v = unsafe { _mm_loadu_si128(part.as_ptr().cast::<__m128i>()) };
            let space = _mm_or_si128(in_range(v, 9, 13), in_range(v, 28, 32));
            let sep = if whitespace_only {
                space
            } else {
                let p = _mm_or_si128(in_range(v, 28, 47), in_range(v, 58, 64));
                let q = _mm_or_si128(in_range(v, 91, 96), in_range(v, 123, 126));
                _mm_or_si128(space, _mm_or_si128(p, q))
            };
            let bits = _mm_movemask_epi8(sep) as u32 as u64;
            mask |= bits << (16 * k);
        }
        mask
    }
}
