//! N-grams on both sides of the join, and the in-memory index a scan looks them up in.
//!
//! * Eval side ([`eval_ngrams`]): for each configured `n`, the n-grams of length
//!   `min(n, tokens)` (a short row contributes its longest n-gram), each with every
//!   occurrence's code-point offsets and the set of configured lengths it stands for.
//! * Training side ([`ScanTokens`]): a document's tokens, cut without allocating per
//!   token (ASCII stretches, the common case even in other texts, 64 bytes at a time
//!   and with no lowering table; each other character alone, a capital sigma in the
//!   form the whole text's lowering gives it), with a polynomial hash over per-token
//!   hashes so every `(i, n)` window is hashed in O(1).
//! * [`Index`]: the test n-grams of one scan's index group, keyed by that same window
//!   hash, behind two small key filters that answer most windows without touching
//!   the map. A hash only finds candidates: a match is decided by comparing the
//!   tokens with the indexed n-gram's text.
//!
//! Tokens never contain a space (every tokenizer splits on whitespace), so an n-gram's
//! text (`" ".join(tokens)`) splits back into exactly its tokens.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use super::tokenize::{lower_sigma, python_lower_char, Token, TokenizerKind, CONTEXT_LOWERED};

/// One eval n-gram of one row: the configured lengths it stands for (bit set) and its
/// occurrences `[start, end)` in code points of the original text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvalNgram {
    pub configured: u32,
    pub offsets: Vec<[u64; 2]>,
}

/// The n-grams of an eval row's tokens, by (effective length, text). `lengths` are the
/// configured lengths, each with its bit.
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

/// The polynomial hashes of n-gram texts (the index side): each text copied into a
/// buffer padded as a scanned document's is, its space-separated tokens hashed with
/// the same whole-word loads.
#[derive(Default)]
struct NgramHasher {
    padded: Vec<u8>,
}

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

/// Hashes u64 keys that are hashes already.
#[derive(Default)]
pub struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// One indexed n-gram: its effective length, its text, and where it occurs in the eval
/// rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    /// The window key of the n-gram.
    key: u64,
    pub n: u32,
    pub ngram: String,
    pub occurrences: Vec<EvalOccurrence>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalOccurrence {
    pub eval_file: u32,
    pub eval_row: u64,
    pub configured: u32,
    pub offsets: Vec<[u64; 2]>,
}

/// The test n-grams of one index group.
#[derive(Default)]
pub struct Index {
    pub entries: Vec<IndexEntry>,
    /// The keys of the entries: most windows are not indexed, and this small table
    /// answers them without touching the larger map.
    keys: KeyFilter,
    /// The lengths indexed, ascending: those shorter than `prefix_len` are looked up
    /// at every position; the others only where `prefixes` may hold the window of
    /// `prefix_len` tokens starting there (every longer n-gram starts with one).
    lengths: Vec<u32>,
    prefix_len: u32,
    prefixes: KeyFilter,
    /// Window key → the first entry with that key; `next` chains the others.
    first: HashMap<u64, u32, BuildHasherDefault<PassThrough>>,
    next: Vec<u32>,
    hasher: NgramHasher,
}

const END: u32 = u32::MAX;

/// N-grams of at least this many tokens are looked up only where their first
/// `prefix_len` tokens are (see [`Index`]).
const PREFIX_TOKENS: u32 = 4;

/// A set of window keys that answers "certainly not in it" for most other keys: two
/// bits per key, both in one 64-bit word chosen by the key's high bits (a blocked
/// Bloom filter), at 16 to 32 bits per key: one cache line per question, and a table
/// small enough to stay in the core's cache while a scan asks it at every token
/// (about 1.5% false positives; a table of one bit per key as large would miss
/// the cache at every question).
#[derive(Default)]
struct KeyFilter {
    words: Vec<u64>,
    /// 64 − log2(words): the shift that leaves a key's word index.
    shift: u32,
}

impl KeyFilter {
    fn new(keys: impl ExactSizeIterator<Item = u64>) -> KeyFilter {
        let words = (keys.len() / 4).next_power_of_two().max(64);
        let mut filter = KeyFilter {
            words: vec![0u64; words],
            shift: 64 - words.trailing_zeros(),
        };
        for key in keys {
            let (word, mask) = filter.slot(key);
            filter.words[word] |= mask;
        }
        filter
    }

    fn slot(&self, key: u64) -> (usize, u64) {
        let word = (key >> self.shift) as usize;
        (word, (1u64 << (key & 63)) | (1u64 << ((key >> 6) & 63)))
    }

    /// Whether `key` may be in the set (always, for an empty filter never built).
    fn may_hold(&self, key: u64) -> bool {
        if self.words.is_empty() {
            return true;
        }
        let (word, mask) = self.slot(key);
        self.words[word] & mask == mask
    }
}

impl Index {
    /// The entry of n-gram `ngram` of length `n` (whose key is `key`), if indexed.
    fn entry_of(&self, key: u64, n: u32, ngram: &str) -> Option<u32> {
        let mut e = self.first.get(&key).copied().unwrap_or(END);
        while e != END {
            let entry = &self.entries[e as usize];
            if entry.n == n && entry.ngram == ngram {
                return Some(e);
            }
            e = self.next[e as usize];
        }
        None
    }

    /// Adds one eval row's occurrence of an n-gram.
    pub fn add(&mut self, n: u32, ngram: &str, occurrence: EvalOccurrence) {
        let key = self.hasher.key(ngram, n);
        if let Some(e) = self.entry_of(key, n, ngram) {
            self.entries[e as usize].occurrences.push(occurrence);
            return;
        }
        let e = self.entries.len() as u32;
        let previous = self.first.insert(key, e).unwrap_or(END);
        self.next.push(previous);
        self.entries.push(IndexEntry {
            key,
            n,
            ngram: ngram.to_string(),
            occurrences: vec![occurrence],
        });
    }

    /// Puts every entry's occurrences in (file, row) order and builds the key
    /// filters.
    pub fn seal(&mut self) {
        for e in &mut self.entries {
            e.occurrences.sort_by_key(|o| (o.eval_file, o.eval_row));
        }
        self.keys = KeyFilter::new(self.first.keys().copied());
        let mut lengths: Vec<u32> = self.entries.iter().map(|e| e.n).collect();
        lengths.sort_unstable();
        lengths.dedup();
        // The prefix: the shortest length of at least PREFIX_TOKENS (shorter ones are
        // too common to filter on), else the longest there is.
        self.prefix_len = lengths
            .iter()
            .copied()
            .find(|&n| n >= PREFIX_TOKENS)
            .or(lengths.last().copied())
            .unwrap_or(0);
        let mut prefixes: Vec<u64> = self
            .entries
            .iter()
            .filter(|e| e.n >= self.prefix_len)
            .map(|e| {
                if e.n == self.prefix_len {
                    e.key
                } else {
                    self.hasher.prefix_key(&e.ngram, self.prefix_len)
                }
            })
            .collect();
        prefixes.sort_unstable();
        prefixes.dedup();
        self.prefixes = KeyFilter::new(prefixes.into_iter());
        self.lengths = lengths;
    }

    /// Calls `each(entry, i, n)` for every indexed window of `doc` (the window of `n`
    /// tokens from `i`), in order of `i`, then `n`.
    pub fn each_match(&self, doc: &ScanTokens, mut each: impl FnMut(u32, usize, usize)) {
        if self.entries.is_empty() {
            return;
        }
        let p = self.prefix_len as usize;
        let split = self.lengths.partition_point(|&n| (n as usize) < p);
        let (short, long) = self.lengths.split_at(split);
        for i in 0..doc.len() {
            let left = doc.len() - i;
            for &n in short {
                let n = n as usize;
                if n > left {
                    break;
                }
                if let Some(e) = self.find(doc, i, n) {
                    each(e, i, n);
                }
            }
            if p > left || !self.prefixes.may_hold(doc.key(i, p)) {
                continue;
            }
            for &n in long {
                let n = n as usize;
                if n > left {
                    break;
                }
                if let Some(e) = self.find(doc, i, n) {
                    each(e, i, n);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries whose n-gram is the window of `n` tokens from `i` of `doc`.
    pub fn find(&self, doc: &ScanTokens, i: usize, n: usize) -> Option<u32> {
        let key = doc.key(i, n);
        if !self.keys.may_hold(key) {
            return None;
        }
        let mut e = *self.first.get(&key)?;
        while e != END {
            let entry = &self.entries[e as usize];
            if entry.n as usize == n && doc.window_is(i, n, &entry.ngram) {
                return Some(e);
            }
            e = self.next[e as usize];
        }
        None
    }
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
    fn a_key_filter_holds_its_keys_and_few_others() {
        let key = |k: u64| window_key(k.wrapping_mul(0x2545_f491_4f6c_dd1d), 8);
        let keys: Vec<u64> = (0..100_000).map(key).collect();
        let filter = KeyFilter::new(keys.iter().copied());
        assert!(keys.iter().all(|&k| filter.may_hold(k)));
        let others = (1_000_000..1_200_000u64).filter(|&k| filter.may_hold(key(k)));
        let rate = others.count() as f64 / 200_000.0;
        assert!(rate < 0.03, "false positives {rate}");
        assert!(KeyFilter::default().may_hold(1));
        assert!(!KeyFilter::new([1u64].into_iter()).may_hold(key(2)));
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
    fn each_match_finds_every_indexed_window_whatever_the_lengths() {
        // Index n-grams of lengths 1, 2, 5 and 6 from one text, then scan texts and
        // compare with looking every length up at every position.
        let source = TokenizerKind::Default.tokenize("a b c d e f g h a b c x y z a b");
        let mut index = Index::default();
        for n in [1usize, 2, 5, 6] {
            for i in (0..=source.len() - n).step_by(3) {
                let text = join(&source[i..i + n]);
                let occ = EvalOccurrence {
                    eval_file: 0,
                    eval_row: i as u64,
                    configured: 1,
                    offsets: vec![],
                };
                index.add(n as u32, &text, occ);
            }
        }
        index.seal();
        assert_eq!(index.prefix_len, 5);
        for text in [
            "a b c d e f g h",
            "x a b c d e f g h a b c x y z a b q",
            "z a b",
            "",
        ] {
            let mut doc = ScanTokens::default();
            doc.fill(TokenizerKind::Default, text);
            let mut got = Vec::new();
            index.each_match(&doc, |e, i, n| got.push((i, n, e)));
            let mut want = Vec::new();
            for i in 0..doc.len() {
                for n in [1usize, 2, 5, 6] {
                    if i + n <= doc.len() {
                        if let Some(e) = index.find(&doc, i, n) {
                            want.push((i, n, e));
                        }
                    }
                }
            }
            assert_eq!(got, want, "{text:?}");
            if text.starts_with("a b c") {
                assert!(
                    want.iter().any(|&(_, n, _)| n == 6) && want.iter().any(|&(_, n, _)| n == 1)
                );
            }
        }
    }

    #[test]
    fn the_index_finds_exactly_the_indexed_windows() {
        let mut index = Index::default();
        let occ = |row| EvalOccurrence {
            eval_file: 0,
            eval_row: row,
            configured: 1,
            offsets: vec![[0, 1]],
        };
        index.add(2, "hello wörld", occ(0));
        index.add(2, "hello wörld", occ(1));
        index.add(1, "", occ(2));
        index.add(3, "a b c", occ(3));
        index.seal();
        let mut doc = ScanTokens::default();
        doc.fill(TokenizerKind::Default, "Say HELLO wörld; a b c!");
        // say hello wörld a b c ""
        assert_eq!(doc.len(), 7);
        let hit = index.find(&doc, 1, 2).unwrap();
        assert_eq!(index.entries[hit as usize].occurrences.len(), 2);
        assert_eq!(doc.offsets(1, 2), [4, 15]);
        assert!(index.find(&doc, 0, 2).is_none());
        assert!(index.find(&doc, 3, 3).is_some());
        assert!(index.find(&doc, 3, 2).is_none());
        assert!(index.find(&doc, 6, 1).is_some());
        assert!(index.find(&doc, 5, 1).is_none());
    }
}
