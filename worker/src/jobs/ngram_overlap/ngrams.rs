//! N-grams on both sides of the join.
//!
//! * Eval side ([`eval_ngram`]): for each configured `n`, the n-grams of length
//!   `min(n, tokens)` (a short row contributes its longest n-gram), each with every
//!   occurrence's code-point offsets and the set of configured lengths it stands for.
//! * Training side ([`ScanTokens`]): a document's tokens, cut without allocating per
//!   token (ASCII stretches, the common case even in other texts, 64 bytes at a time
//!   and with no lowering table; each other character alone, a capital sigma in the
//!   form the whole text's lowering gives it), with a polynomial hash over per-token
//!   hashes so every `(i, n)` window is hashed in O(1).
//! * The keys are what the index ([`super::ngram_index`]) holds of the eval side's
//!   n-grams, computed by the same [`ScanTokens`] over eval rows. A key only finds
//!   candidates: [`eval_ngram`] decides one by comparing the eval row's tokens with
//!   the training window's text.
//!
//! Tokens never contain a space (every tokenizer splits on whitespace), so an n-gram's
//! text (`" ".join(tokens)`) splits back into exactly its tokens.

#[cfg(test)]
use std::collections::BTreeMap;

use super::tokenize::{lower_sigma, python_lower_char, Token, TokenizerKind, CONTEXT_LOWERED};

/// One eval n-gram of one row: the configured lengths it stands for (bit set) and its
/// occurrences `[start, end)` in code points of the original text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvalNgram {
    pub configured: u32,
    pub offsets: Vec<[u64; 2]>,
}

/// The n-gram of an eval row's tokens of effective length `eff` and text `text`, as
/// [`eval_ngrams`] has it (the configured lengths it stands for, every occurrence), or
/// `None` when the row has no such n-gram: how the report decides a scan's candidate.
/// `lengths` are the configured lengths, each with its bit.
pub fn eval_ngram(
    tokens: &[Token],
    lengths: &[(u32, u32)],
    eff: u32,
    text: &str,
) -> Option<EvalNgram> {
    let count = tokens.len();
    let eff = eff as usize;
    let configured = lengths
        .iter()
        .filter(|&&(n, _)| (n as usize).min(count) == eff)
        .fold(0, |bits, &(_, bit)| bits | bit);
    if configured == 0 || eff == 0 {
        return None;
    }
    let offsets: Vec<[u64; 2]> = (0..=count - eff)
        .filter(|&i| window_is(&tokens[i..i + eff], text))
        .map(|i| {
            [
                tokens[i].span.start as u64,
                tokens[i + eff - 1].span.end as u64,
            ]
        })
        .collect();
    (!offsets.is_empty()).then_some(EvalNgram {
        configured,
        offsets,
    })
}

/// Whether `window`'s tokens joined by spaces are `text`.
fn window_is(window: &[Token], text: &str) -> bool {
    let mut parts = text.split(' ');
    window.iter().all(|t| parts.next() == Some(t.text.as_str())) && parts.next().is_none()
}

/// The n-grams of an eval row's tokens, by (effective length, text). `lengths` are the
/// configured lengths, each with its bit. (The rules' reading of an eval row, the
/// reference [`eval_ngram`] is tested against.)
#[cfg(test)]
pub fn eval_ngrams(tokens: &[Token], lengths: &[(u32, u32)]) -> BTreeMap<(u32, String), EvalNgram> {
    let mut out: BTreeMap<(u32, String), EvalNgram> = BTreeMap::new();
    let count = tokens.len();
    let mut done: Vec<usize> = Vec::new();
    for &(n, bit) in lengths {
        let eff = (n as usize).min(count);
        if eff == 0 {
            continue;
        }
        let first = !done.contains(&eff);
        if first {
            done.push(eff);
        }
        for i in 0..=count - eff {
            let window = &tokens[i..i + eff];
            let text = join(window);
            let entry = out.entry((eff as u32, text)).or_default();
            entry.configured |= bit;
            if first {
                entry
                    .offsets
                    .push([window[0].span.start as u64, window[eff - 1].span.end as u64]);
            }
        }
    }
    out
}

#[cfg(test)]
fn join(tokens: &[Token]) -> String {
    let mut s = String::with_capacity(tokens.iter().map(|t| t.text.len() + 1).sum());
    for (k, t) in tokens.iter().enumerate() {
        if k > 0 {
            s.push(' ');
        }
        s.push_str(&t.text);
    }
    s
}

/// A 64-bit hash of a token's bytes (in-process only: never written anywhere): each
/// 16 bytes (zero-padded; at least one step) folded in with one 64×64→128-bit
/// multiply of its two words, then one more to mix: no branch on the length of a
/// token of up to 16 bytes, the common case.
#[cfg(test)] // the readable reference of token_hash_padded
fn token_hash(bytes: &[u8]) -> u64 {
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

fn hash_seed(len: usize) -> u64 {
    0x243f_6a88_85a3_08d3u64 ^ (len as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The high and low halves of `a × b`, folded.
#[inline]
fn fold_multiply(a: u64, b: u64) -> u64 {
    let m = u128::from(a) * u128::from(b);
    (m as u64) ^ ((m >> 64) as u64)
}

#[inline]
fn hash_step(h: u64, w0: u64, w1: u64) -> u64 {
    fold_multiply(w0 ^ h ^ 0xa076_1d64_78bd_642f, w1 ^ 0xe703_7ed1_a0b4_28db)
}

/// The little-endian value of 0–8 bytes (the missing high bytes zero), read with
/// fixed-size loads: a variable-length copy into a zeroed word was a `memcpy` call
/// per token and a stall on reading the word back, a quarter of the scan's
/// tokenizing time.
#[cfg(test)]
#[inline]
fn load_short(b: &[u8]) -> u64 {
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
fn token_hash_padded(buf: &[u8], start: usize, end: usize) -> u64 {
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
const PADDING: &str = "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";

fn mix(h: u64) -> u64 {
    fold_multiply(h, 0xc4ce_b9fe_1a85_ec53)
}

/// The base of the window hash.
const BASE: u64 = 0x100_0000_01b3;

/// The key of a window: its polynomial hash with its length, multiplied and folded
/// so that both the low bits (map buckets, filters) and the high bits are mixed.
fn window_key(poly: u64, n: u32) -> u64 {
    let k = (poly ^ u64::from(n).wrapping_mul(0xd6e8_feb8_6659_fd93))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    k ^ (k >> 29)
}

/// The polynomial hashes of n-gram texts: each text copied into a buffer padded as a
/// scanned document's is, its space-separated tokens hashed with the same whole-word
/// loads (the tests' reference for the keys [`ScanTokens`] computes).
#[cfg(test)]
#[derive(Default)]
struct NgramHasher {
    padded: Vec<u8>,
}

#[cfg(test)]
impl NgramHasher {
    /// The polynomial hash of the first `limit` tokens of `text`.
    fn poly(&mut self, text: &str, limit: u32) -> u64 {
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
    fn key(&mut self, text: &str, n: u32) -> u64 {
        window_key(self.poly(text, u32::MAX), n)
    }

    /// The window key of the first `n` tokens of an n-gram's text.
    fn prefix_key(&mut self, text: &str, n: u32) -> u64 {
        window_key(self.poly(text, n), n)
    }
}

/// The window key of an n-gram's text.
#[cfg(test)]
fn ngram_key(text: &str, n: u32) -> u64 {
    NgramHasher::default().key(text, n)
}

/// The window key of the first `n` tokens of an n-gram's text.
#[cfg(test)]
fn prefix_key(text: &str, n: u32) -> u64 {
    NgramHasher::default().prefix_key(text, n)
}

/// The separator mask a word (8 bytes) at a time: the portable version, and the
/// tests' reference for the SSE2 one.
#[cfg(any(test, not(all(target_arch = "x86_64", target_feature = "sse2"))))]
mod word_at_a_time {
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
    pub(super) fn separator_mask(chunk: &[u8], whitespace_only: bool) -> u64 {
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
use word_at_a_time::separator_mask;

/// [`separator_mask`] of a whole 64-byte block of ASCII bytes: with SSE2 (every
/// x86-64 processor has it) 16 bytes per step, a range test being a subtraction, an
/// unsigned minimum and a comparison; elsewhere the word-at-a-time version.
fn block_separators(block: &[u8; 64], whitespace_only: bool) -> u64 {
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
fn block_non_ascii(block: &[u8; 64]) -> u64 {
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
fn non_ascii_mask(block: &[u8; 64]) -> u64 {
    block
        .iter()
        .enumerate()
        .fold(0u64, |mask, (i, &b)| mask | (u64::from(b >> 7) << i))
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod sse2 {
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

/// A training document's tokens, ready for window lookups.
///
/// A text is cut in one left-to-right pass into token boundaries (`starts`, `ends`:
/// `re.split`'s pieces between maximal separator runs, empty ones at the ends), then
/// each token is hashed. ASCII stretches, the common case even in texts that are not
/// all ASCII, are cut 64 bytes at a time with no branch per token; each other
/// character is lowered and classified alone (a capital sigma takes the form the
/// whole text's lowering gives it).
#[derive(Default)]
pub struct ScanTokens {
    /// The tokens' text, one after the other (ASCII: the lowered document itself).
    buffer: String,
    /// Where each token starts and ends in `buffer` (bytes).
    starts: Vec<usize>,
    ends: Vec<usize>,
    /// Where each token starts and ends in the original text (code points); empty for
    /// an ASCII text, whose code points are its bytes.
    span_starts: Vec<u64>,
    span_ends: Vec<u64>,
    /// `prefix[k]`: the polynomial hash of tokens `0..k`.
    prefix: Vec<u64>,
    /// `BASE^k`.
    powers: Vec<u64>,
    /// The lowered forms of the text's capital sigmas, in order.
    sigmas: Vec<char>,
}

/// Where a cut stands between two characters: whether the last lowered character
/// was a separator, and the code point of the current piece's last character.
#[derive(Default)]
struct Cut {
    in_run: bool,
    last: Option<u64>,
}

/// Appends `base + i` for each set bit `i` of `bits`, in ascending order.
#[inline]
fn push_bit_positions<T: Copy + std::ops::Add<Output = T> + From<u8>>(
    out: &mut Vec<T>,
    mut bits: u64,
    base: T,
) {
    out.reserve(bits.count_ones() as usize);
    while bits != 0 {
        out.push(base + T::from(bits.trailing_zeros() as u8));
        bits &= bits - 1;
    }
}

impl ScanTokens {
    /// Tokenizes `text` (reusing this value's buffers).
    pub fn fill(&mut self, kind: TokenizerKind, text: &str) {
        self.buffer.clear();
        self.starts.clear();
        self.ends.clear();
        self.span_starts.clear();
        self.span_ends.clear();
        if text.is_ascii() {
            self.fill_ascii(kind, text);
        } else {
            self.fill_mixed(kind, text);
        }
        if kind == TokenizerKind::Whitespace {
            self.drop_empty_ends();
        }
        self.hash_tokens();
        while self.powers.len() <= self.starts.len() {
            let last = self
                .powers
                .last()
                .map_or(1, |&x: &u64| x.wrapping_mul(BASE));
            self.powers.push(last);
        }
    }

    /// The boundaries of an ASCII text, where lowering is per byte and code points are
    /// bytes: 64 bytes at a time.
    fn fill_ascii(&mut self, kind: TokenizerKind, text: &str) {
        let whitespace_only = kind == TokenizerKind::Whitespace;
        self.buffer.push_str(text);
        if kind == TokenizerKind::Default {
            self.buffer.make_ascii_lowercase();
        }
        self.starts.push(0);
        let mut cut = Cut::default();
        let mut last = [0u8; 64];
        for (block, chunk) in text.as_bytes().chunks(64).enumerate() {
            let sep = match <&[u8; 64]>::try_from(chunk) {
                Ok(whole) => block_separators(whole, whitespace_only),
                Err(_) => {
                    last[..chunk.len()].copy_from_slice(chunk);
                    block_separators(&last, whitespace_only)
                }
            };
            let at = block * 64;
            self.ascii_chunk(&mut cut, sep, chunk.len(), at, None);
        }
        self.finish(&cut, text.len() as u64, false);
    }

    /// The boundaries of a text that is not all ASCII: its ASCII stretches 64 bytes at
    /// a time, each other character alone.
    fn fill_mixed(&mut self, kind: TokenizerKind, text: &str) {
        let lower = kind == TokenizerKind::Default;
        let whitespace_only = kind == TokenizerKind::Whitespace;
        self.sigmas.clear();
        if lower && text.contains(CONTEXT_LOWERED) {
            sigma_forms(text, &mut self.sigmas);
        }
        let mut sigma = 0usize;
        self.starts.push(0);
        self.span_starts.push(0);
        let mut cut = Cut::default();
        let bytes = text.as_bytes();
        let mut padded = [0u8; 64];
        let (mut at, mut cp) = (0usize, 0u64);
        while at < bytes.len() {
            let rest = &bytes[at..];
            let block = match <&[u8; 64]>::try_from(rest.get(..64).unwrap_or(rest)) {
                Ok(whole) => whole,
                Err(_) => {
                    padded[..rest.len()].copy_from_slice(rest);
                    padded[rest.len()..].fill(0);
                    &padded
                }
            };
            // The ASCII bytes before the first other one (or the block's end).
            let ascii = (block_non_ascii(block).trailing_zeros() as usize).min(rest.len());
            if ascii > 0 {
                let sep = block_separators(block, whitespace_only) & low_bits(ascii);
                let start = self.buffer.len();
                self.buffer.push_str(&text[at..at + ascii]);
                if lower {
                    self.buffer[start..].make_ascii_lowercase();
                }
                self.ascii_chunk(&mut cut, sep, ascii, start, Some(cp));
                at += ascii;
                cp += ascii as u64;
            }
            while let Some(c) = text[at..].chars().next().filter(|c| !c.is_ascii()) {
                if !lower {
                    self.push_char(&mut cut, kind, c, cp);
                } else if c == CONTEXT_LOWERED {
                    // One form per capital sigma of the text (sigma_forms).
                    debug_assert!(sigma < self.sigmas.len());
                    let l = self.sigmas.get(sigma).copied().unwrap_or('σ');
                    sigma += 1;
                    self.push_char(&mut cut, kind, l, cp);
                } else {
                    for l in python_lower_char(c) {
                        self.push_char(&mut cut, kind, l, cp);
                    }
                }
                at += c.len_utf8();
                cp += 1;
            }
        }
        self.finish(&cut, cp, true);
    }

    /// The boundaries in an ASCII chunk of `len` (1 to 64) bytes, already in `buffer`
    /// from `start` on (lowered), whose separators are the bits of `sep`; `cp`: the
    /// code point it starts at, where spans are kept.
    #[inline]
    fn ascii_chunk(&mut self, cut: &mut Cut, sep: u64, len: usize, start: usize, cp: Option<u64>) {
        let before = (sep << 1) | u64::from(cut.in_run);
        // A run starts (the piece before it ends) / ends (a piece starts).
        let run_starts = sep & !before;
        let run_ends = !sep & before & low_bits(len);
        push_bit_positions(&mut self.ends, run_starts, start);
        push_bit_positions(&mut self.starts, run_ends, start);
        if let Some(cp) = cp {
            // A piece ending here ends at the code point its run starts at (its last
            // character is the one before); one starting here starts there.
            push_bit_positions(&mut self.span_ends, run_starts, cp);
            push_bit_positions(&mut self.span_starts, run_ends, cp);
            cut.last = Some(cp + len as u64 - 1);
        }
        cut.in_run = (sep >> (len - 1)) & 1 == 1;
        if cut.in_run {
            cut.last = None;
        }
    }

    /// One lowered character `l` of the character at code point `cp`.
    fn push_char(&mut self, cut: &mut Cut, kind: TokenizerKind, l: char, cp: u64) {
        if kind.separates(l) {
            if !cut.in_run {
                self.close_piece(cut.last.take());
                cut.in_run = true;
            }
        } else {
            if cut.in_run {
                cut.in_run = false;
                self.starts.push(self.buffer.len());
                self.span_starts.push(cp);
            }
            self.buffer.push(l);
            cut.last = Some(cp);
        }
    }

    /// Ends the current piece where `buffer` ends.
    /// `last`: the code point of its last character (none for an empty piece).
    fn close_piece(&mut self, last: Option<u64>) {
        self.ends.push(self.buffer.len());
        if let Some(&piece_start) = self.span_starts.last() {
            self.span_ends.push(last.map_or(piece_start, |l| l + 1));
        }
    }

    /// Ends the text (of `cps` code points): a text ending in a separator run ends
    /// with an empty piece.
    fn finish(&mut self, cut: &Cut, cps: u64, spans: bool) {
        if cut.in_run {
            self.starts.push(self.buffer.len());
            if spans {
                self.span_starts.push(cps);
            }
        }
        if spans {
            self.close_piece(cut.last);
        } else {
            self.ends.push(self.buffer.len());
        }
    }

    /// Drops the empty pieces (only ever first or last): `str.split()` has none.
    fn drop_empty_ends(&mut self) {
        let spans = !self.span_starts.is_empty();
        if self.starts.last() == self.ends.last() {
            self.starts.pop();
            self.ends.pop();
            if spans {
                self.span_starts.pop();
                self.span_ends.pop();
            }
        }
        if !self.starts.is_empty() && self.starts[0] == self.ends[0] {
            self.starts.remove(0);
            self.ends.remove(0);
            if spans {
                self.span_starts.remove(0);
                self.span_ends.remove(0);
            }
        }
    }

    /// The tokens' prefix hashes (the buffer padded while they are hashed).
    fn hash_tokens(&mut self) {
        let len = self.buffer.len();
        self.buffer.push_str(PADDING);
        self.prefix.clear();
        self.prefix.resize(self.starts.len() + 1, 0);
        let padded = self.buffer.as_bytes();
        let mut poly = 0u64;
        for ((p, &start), &end) in self.prefix[1..]
            .iter_mut()
            .zip(&self.starts)
            .zip(&self.ends)
        {
            let hash = token_hash_padded(padded, start, end);
            poly = poly.wrapping_mul(BASE).wrapping_add(hash);
            *p = poly;
        }
        self.buffer.truncate(len);
    }

    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    fn token(&self, k: usize) -> &str {
        &self.buffer[self.starts[k]..self.ends[k]]
    }

    /// The text of the window of `n` tokens from `i`: its tokens joined by spaces.
    pub fn window_text(&self, i: usize, n: usize) -> String {
        let mut s = String::with_capacity(self.ends[i + n - 1] - self.starts[i] + n);
        for k in i..i + n {
            if k > i {
                s.push(' ');
            }
            s.push_str(self.token(k));
        }
        s
    }

    /// The key of the window of `n` tokens from `i`.
    pub fn key(&self, i: usize, n: usize) -> u64 {
        let poly = self.prefix[i + n].wrapping_sub(self.prefix[i].wrapping_mul(self.powers[n]));
        window_key(poly, n as u32)
    }

    /// Whether the window of `n` tokens from `i` is the n-gram `text`.
    pub fn window_is(&self, i: usize, n: usize, text: &str) -> bool {
        let mut parts = text.split(' ');
        (i..i + n).all(|k| parts.next() == Some(self.token(k))) && parts.next().is_none()
    }

    /// The code-point offsets of the window of `n` tokens from `i`.
    pub fn offsets(&self, i: usize, n: usize) -> [u64; 2] {
        if self.span_starts.is_empty() {
            return [self.starts[i] as u64, self.ends[i + n - 1] as u64];
        }
        [self.span_starts[i], self.span_ends[i + n - 1]]
    }
}

/// The low `len` bits (`len` at most 64).
#[inline]
fn low_bits(len: usize) -> u64 {
    if len >= 64 {
        u64::MAX
    } else {
        (1u64 << len) - 1
    }
}

/// The forms `str.lower()` gives the capital sigmas of `text`, in order (`ς` at a
/// word's end, else `σ`: [`lower_sigma`]).
fn sigma_forms(text: &str, out: &mut Vec<char>) {
    let chars: Vec<char> = text.chars().collect();
    out.extend(
        chars
            .iter()
            .enumerate()
            .filter(|&(_, &c)| c == CONTEXT_LOWERED)
            .map(|(at, _)| lower_sigma(&chars, at)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPACE: u8 = 1;
    const PUNCTUATION: u8 = 2;

    /// Of each ASCII byte, the readable reference for [`separator_mask`]: whether
    /// Python's `\s` matches it ([`SPACE`]), whether it is in `string.punctuation`
    /// ([`PUNCTUATION`]).
    static ASCII_CLASS: [u8; 256] = {
        let mut t = [0u8; 256];
        let mut b = 0;
        while b < 128 {
            let c = b as u8;
            // \t \n \v \f \r, the information separators U+001C–U+001F, space.
            if (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) {
                t[b] |= SPACE;
            }
            if c.is_ascii_punctuation() {
                t[b] |= PUNCTUATION;
            }
            b += 1;
        }
        t
    };

    #[test]
    fn the_padded_token_hash_is_the_token_hash() {
        let mut buf: Vec<u8> = (0..100u8).map(|b| b.wrapping_mul(37) ^ 0x5a).collect();
        let text = buf.len();
        buf.extend_from_slice(PADDING.as_bytes());
        for start in 0..40 {
            for end in start..text {
                assert_eq!(
                    token_hash_padded(&buf, start, end),
                    token_hash(&buf[start..end]),
                    "{start}..{end}"
                );
            }
        }
    }

    #[test]
    fn an_ngram_key_folds_its_tokens_and_a_prefix_key_the_first_ones() {
        let fold = |tokens: &[&str]| {
            tokens.iter().fold(0u64, |p, t| {
                p.wrapping_mul(BASE).wrapping_add(token_hash(t.as_bytes()))
            })
        };
        for text in ["", " ", "a", "a b", " a  b ", "hello wörld again and again"] {
            let tokens: Vec<&str> = text.split(' ').collect();
            let n = tokens.len() as u32;
            assert_eq!(ngram_key(text, n), window_key(fold(&tokens), n), "{text:?}");
            for k in 0..=n + 1 {
                let first = &tokens[..(k as usize).min(tokens.len())];
                assert_eq!(
                    prefix_key(text, k),
                    window_key(fold(first), k),
                    "{text:?} {k}"
                );
            }
        }
    }

    #[test]
    fn a_short_load_is_the_zero_padded_word() {
        let bytes: Vec<u8> = (1..=8).collect();
        for n in 0..8 {
            let mut w = [0u8; 8];
            w[..n].copy_from_slice(&bytes[..n]);
            assert_eq!(load_short(&bytes[..n]), u64::from_le_bytes(w), "{n} bytes");
        }
    }

    fn texts(tokens: &ScanTokens) -> Vec<&str> {
        (0..tokens.len()).map(|k| tokens.token(k)).collect()
    }

    #[test]
    fn the_separator_mask_is_the_ascii_table() {
        for b in 0..128u8 {
            for whitespace_only in [false, true] {
                let kinds = if whitespace_only {
                    SPACE
                } else {
                    SPACE | PUNCTUATION
                };
                let want = ASCII_CLASS[b as usize] & kinds != 0;
                // The byte alone, and among others at every position of a word.
                assert_eq!(separator_mask(&[b], whitespace_only) == 1, want, "{b:#x}");
                for at in 0..64 {
                    let mut chunk = [b'a'; 64];
                    chunk[at] = b;
                    assert_eq!(
                        separator_mask(&chunk, whitespace_only),
                        u64::from(want) << at
                    );
                }
            }
        }
    }

    #[test]
    fn the_block_separators_are_the_separator_mask() {
        let mut state = 0x0123_4567u64;
        for round in 0..20_000 {
            let mut block = random_block(&mut state, 57);
            // And every byte value at a varying position in a block of letters.
            if round < 128 {
                block = [b'k'; 64];
                block[round % 64] = round as u8;
            }
            for whitespace_only in [false, true] {
                assert_eq!(
                    block_separators(&block, whitespace_only),
                    separator_mask(&block, whitespace_only),
                    "{block:?}"
                );
            }
        }
    }

    #[test]
    fn the_ascii_table_is_pythons_space_and_punctuation() {
        for b in 0..=255u8 {
            let c = b as char;
            let space = b < 128 && super::super::tokenize::python_isspace(c);
            assert_eq!(ASCII_CLASS[b as usize] & SPACE != 0, space, "{b:#x}");
            assert_eq!(
                ASCII_CLASS[b as usize] & PUNCTUATION != 0,
                c.is_ascii_punctuation(),
                "{b:#x}"
            );
        }
    }

    /// The next of a test's pseudo-random numbers.
    fn step(state: &mut u64) -> u64 {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *state
    }

    /// 64 random bytes, each the top `64 - shift` bits of a step.
    fn random_block(state: &mut u64, shift: u32) -> [u8; 64] {
        std::array::from_fn(|_| (step(state) >> shift) as u8)
    }

    /// A text of `len` characters drawn from `alphabet`.
    fn random_text(state: &mut u64, alphabet: &[char], len: usize) -> String {
        (0..len)
            .map(|_| alphabet[(step(state) >> 33) as usize % alphabet.len()])
            .collect()
    }

    const KINDS: [TokenizerKind; 3] = [
        TokenizerKind::Default,
        TokenizerKind::NoLowercase,
        TokenizerKind::Whitespace,
    ];

    /// Asserts that `fast` holds the tokens and spans of `kind.tokenize(text)`;
    /// returns the tokens' texts.
    fn assert_cut_as_the_tokenizer(
        fast: &ScanTokens,
        kind: TokenizerKind,
        text: &str,
    ) -> Vec<String> {
        let exact = kind.tokenize(text);
        let want: Vec<&str> = exact.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(texts(fast), want, "{kind:?} {text:?}");
        let spans: Vec<[u64; 2]> = exact
            .iter()
            .map(|t| [t.span.start as u64, t.span.end as u64])
            .collect();
        let fast_spans: Vec<[u64; 2]> = (0..fast.len()).map(|k| fast.offsets(k, 1)).collect();
        assert_eq!(fast_spans, spans, "{kind:?} {text:?}");
        exact.into_iter().map(|t| t.text).collect()
    }

    #[test]
    fn the_ascii_path_cuts_exactly_the_tokens_of_the_tokenizer() {
        // Random ASCII texts over separators, letters and digits, every tokenizer.
        let alphabet: Vec<char> = "aB z.,!-\t\n\x0b\x0c\r\x1c\x1f_~9Q ".chars().collect();
        let mut state = 0x1234_5678u64;
        for _ in 0..3000 {
            let len = (state >> 60) as usize + (state >> 40) as usize % 150;
            let text = random_text(&mut state, &alphabet, len);
            for kind in KINDS {
                let mut fast = ScanTokens::default();
                fast.fill(kind, &text);
                assert_cut_as_the_tokenizer(&fast, kind, &text);
            }
        }
    }

    #[test]
    fn the_character_path_cuts_exactly_the_tokens_of_the_tokenizer() {
        // Random texts mixing ASCII with the characters Python and Rust treat
        // differently (spaces U+001C, U+0085, U+00A0, U+3000; `İ` lowered to two
        // characters; a letter Python 3.11 does not lowercase; the capital sigma,
        // which takes the exact path), every tokenizer.
        let alphabet: Vec<char> =
            "aB z.,!-\t\n\u{1c}\u{85}\u{a0}\u{3000}İıéÉßΣσς\u{1c89}\u{10400}_~9Q "
                .chars()
                .collect();
        let mut state = 0x9e37_79b9u64;
        let mut paths = [0usize; 2];
        for _ in 0..3000 {
            let len = (step(&mut state) >> 58) as usize + (state >> 40) as usize % 60;
            let text = random_text(&mut state, &alphabet, len);
            if text.is_ascii() {
                continue;
            }
            paths[usize::from(text.contains(CONTEXT_LOWERED))] += 1;
            for kind in KINDS {
                let mut fast = ScanTokens::default();
                fast.fill(kind, &text);
                let want = assert_cut_as_the_tokenizer(&fast, kind, &text);
                // And the window keys are those of the same tokens' n-grams.
                for k in 0..fast.len().saturating_sub(1) {
                    let ngram = format!("{} {}", want[k], want[k + 1]);
                    assert_eq!(fast.key(k, 2), ngram_key(&ngram, 2), "{text:?}");
                }
            }
        }
        assert!(paths[0] > 100 && paths[1] > 100, "{paths:?}");
    }

    #[test]
    fn mostly_ascii_texts_cut_exactly_the_tokens_of_the_tokenizer() {
        // Long texts, ASCII but for a character in every ~40 (every kind of other
        // character above, the capital sigma included), so that 64-byte ASCII chunks,
        // chunks cut short by another character and runs of separators across them all
        // occur; one buffer reused, as a scan does.
        let ascii: Vec<char> = "aB z.,!-\t\n\x0c_~9Q  ".chars().collect();
        let other: Vec<char> = "\u{85}\u{a0}\u{3000}İıéÉßΣσς\u{1c89}\u{10400}"
            .chars()
            .collect();
        let mut state = 0x5eed_u64;
        let mut fast = ScanTokens::default();
        let mut mixed = 0;
        for _ in 0..1500 {
            let len = (step(&mut state) >> 40) as usize % 400;
            let text: String = (0..len)
                .map(|_| {
                    let r = step(&mut state) >> 33;
                    if r.is_multiple_of(40) {
                        other[(r / 40) as usize % other.len()]
                    } else {
                        ascii[r as usize % ascii.len()]
                    }
                })
                .collect();
            mixed += usize::from(!text.is_ascii());
            for kind in KINDS {
                fast.fill(kind, &text);
                let want = assert_cut_as_the_tokenizer(&fast, kind, &text);
                for k in 0..fast.len().saturating_sub(2) {
                    let ngram = want[k..k + 3].join(" ");
                    assert_eq!(fast.key(k, 3), ngram_key(&ngram, 3), "{text:?}");
                }
            }
        }
        assert!(mixed > 1000, "{mixed}");
    }

    #[test]
    fn the_non_ascii_bytes_of_a_block_are_its_high_bits() {
        let mut state = 7u64;
        for _ in 0..5000 {
            let block = random_block(&mut state, 56);
            assert_eq!(block_non_ascii(&block), non_ascii_mask(&block));
        }
        assert_eq!(non_ascii_mask(&[0x80; 64]), u64::MAX);
        assert_eq!(non_ascii_mask(&[0x7f; 64]), 0);
    }

    #[test]
    fn a_short_row_contributes_its_longest_ngram_and_offsets_point_into_the_original() {
        let tokens = TokenizerKind::Default.tokenize("Hello, Wörld!");
        let got = eval_ngrams(&tokens, &[(2, 1), (13, 2)]);
        // Tokens: "hello", "wörld", "" → the 2-gram windows and the whole row (3 tokens).
        let keys: Vec<(u32, &str)> = got.keys().map(|(n, s)| (*n, s.as_str())).collect();
        assert_eq!(
            keys,
            vec![(2, "hello wörld"), (2, "wörld "), (3, "hello wörld ")]
        );
        assert_eq!(got[&(2, "wörld ".to_string())].offsets, vec![[7, 13]]);
        assert_eq!(got[&(3, "hello wörld ".to_string())].configured, 2);
        assert_eq!(got[&(3, "hello wörld ".to_string())].offsets, vec![[0, 13]]);
        assert_eq!(got[&(2, "hello wörld".to_string())].offsets, vec![[0, 12]]);
        // Two configured lengths with the same effective length: one entry, both bits,
        // each occurrence once.
        let got = eval_ngrams(
            &TokenizerKind::Default.tokenize("a b a b"),
            &[(8, 1), (13, 2)],
        );
        assert_eq!(got.len(), 1);
        let only = got.values().next().unwrap();
        assert_eq!((only.configured, only.offsets.clone()), (3, vec![[0, 7]]));
        let got = eval_ngrams(&TokenizerKind::Default.tokenize("a b a b"), &[(2, 1)]);
        assert_eq!(got[&(2, "a b".to_string())].offsets, vec![[0, 3], [4, 7]]);
    }

    #[test]
    fn eval_ngram_is_the_rules_reading_of_one_ngram() {
        let lengths = [(2, 1), (3, 2), (13, 4)];
        for text in [
            "a b a b a b",
            "Hello, Wörld! hello wörld",
            "ΟΔΟΣ ΟΔΟΣ. ΣΟΦΟΣ",
            "one",
            "",
            "x y",
        ] {
            let tokens = TokenizerKind::Default.tokenize(text);
            let all = eval_ngrams(&tokens, &lengths);
            for ((eff, ngram), want) in &all {
                assert_eq!(
                    eval_ngram(&tokens, &lengths, *eff, ngram).as_ref(),
                    Some(want),
                    "{text:?} {ngram:?}"
                );
            }
            // Any other (length, text): none.
            for eff in 0..=14u32 {
                for cut in ["a b", "a b a", "hello wörld", "b a b a", "ςοφος", ""] {
                    if !all.contains_key(&(eff, cut.to_string())) {
                        assert_eq!(
                            eval_ngram(&tokens, &lengths, eff, cut),
                            None,
                            "{text:?} {eff} {cut:?}"
                        );
                    }
                }
            }
        }
    }
}
