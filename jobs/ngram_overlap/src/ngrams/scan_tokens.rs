//! A training document's tokens ([`ScanTokens`]): cut in one left-to-right pass,
//! hashed, every `(i, n)` window's key in O(1).

use super::super::tokenize::{lower_sigma, python_lower_char, TokenizerKind, CONTEXT_LOWERED};

use super::{ascii::*, hash::*};

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
    pub(super) buffer: String,
    /// Where each token starts and ends in `buffer` (bytes).
    pub(super) starts: Vec<usize>,
    pub(super) ends: Vec<usize>,
    /// Where each token starts and ends in the original text (code points); empty for
    /// an ASCII text, whose code points are its bytes.
    pub(super) span_starts: Vec<u64>,
    pub(super) span_ends: Vec<u64>,
    /// `prefix[k]`: the polynomial hash of tokens `0..k`.
    pub(super) prefix: Vec<u64>,
    /// `BASE^k`.
    pub(super) powers: Vec<u64>,
    /// The lowered forms of the text's capital sigmas, in order.
    pub(super) sigmas: Vec<char>,
}

/// Where a cut stands between two characters: whether the last lowered character
/// was a separator, and the code point of the current piece's last character.
#[derive(Default)]
pub(super) struct Cut {
    pub(super) in_run: bool,
    pub(super) last: Option<u64>,
}

/// Appends `base + i` for each set bit `i` of `bits`, in ascending order.
#[inline]
pub(super) fn push_bit_positions<T: Copy + std::ops::Add<Output = T> + From<u8>>(
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
    pub(super) fn fill_ascii(&mut self, kind: TokenizerKind, text: &str) {
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
    pub(super) fn fill_mixed(&mut self, kind: TokenizerKind, text: &str) {
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
    pub(super) fn ascii_chunk(
        &mut self,
        cut: &mut Cut,
        sep: u64,
        len: usize,
        start: usize,
        cp: Option<u64>,
    ) {
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
    pub(super) fn push_char(&mut self, cut: &mut Cut, kind: TokenizerKind, l: char, cp: u64) {
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
    pub(super) fn close_piece(&mut self, last: Option<u64>) {
        self.ends.push(self.buffer.len());
        if let Some(&piece_start) = self.span_starts.last() {
            self.span_ends.push(last.map_or(piece_start, |l| l + 1));
        }
    }

    /// Ends the text (of `cps` code points): a text ending in a separator run ends
    /// with an empty piece.
    pub(super) fn finish(&mut self, cut: &Cut, cps: u64, spans: bool) {
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
    pub(super) fn drop_empty_ends(&mut self) {
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
    pub(super) fn hash_tokens(&mut self) {
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

    pub(super) fn token(&self, k: usize) -> &str {
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
pub(super) fn low_bits(len: usize) -> u64 {
    if len >= 64 {
        u64::MAX
    } else {
        (1u64 << len) - 1
    }
}

/// The forms `str.lower()` gives the capital sigmas of `text`, in order (`ς` at a
/// word's end, else `σ`: [`lower_sigma`]).
pub(super) fn sigma_forms(text: &str, out: &mut Vec<char>) {
    let chars: Vec<char> = text.chars().collect();
    out.extend(
        chars
            .iter()
            .enumerate()
            .filter(|&(_, &c)| c == CONTEXT_LOWERED)
            .map(|(at, _)| lower_sigma(&chars, at)),
    );
}
