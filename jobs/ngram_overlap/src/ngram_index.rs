//! The in-memory index a scan looks training windows up in: the window keys of one index
//! group's eval n-grams and, for each, the eval rows it occurs in. No n-gram text: a key
//! only finds candidates, and the report decides each candidate exactly by re-tokenizing
//! its eval row (docs/overlap.md, "a hash only finds candidates").
//!
//! ```text
//! index shuffle files: (key, eval row), and the prefix keys of gated n-grams
//!   ─► IndexBuilder ─► NgramIndex
//!   keys:      sorted distinct window keys              8 B per n-gram
//!   rows:      per key, its eval row (a global id), or  4 B
//!              MULTI | where its rows are in `shared`    (+4 B per row beyond the first)
//!   directory: per bucket of the keys' top bits, where   about 1 B
//!              its keys start
//!   filters:   keys, and the first PREFIX_TOKENS tokens' 1 B each
//!              keys of the gated n-grams (if any)
//! ```
//!
//! About 14 bytes per distinct n-gram ([`NgramIndex::bytes`]; 14.9 measured at 17.6M
//! 13-grams), 1 more per gated n-gram ([`is_gated`]: lengths between
//! [`PREFIX_TOKENS`] and the longest configured one, behind one prefix question); loading
//! holds at most [`LOAD_BYTES_PER_POSTING`] per (n-gram, eval row) posting. A window is
//! looked up with one filter probe (asked for ahead: [`NgramIndex::each_match`]), and
//! only the keys that pass it touch the directory and the sorted keys (a bucket of
//! about four keys, one or two cache lines). Index tasks write each partition sorted
//! ([`sort_postings`]), so loading one eval file's partition is a check and a copy.

use super::ngrams::ScanTokens;

/// The most memory loading an index takes per posting (one n-gram of one eval row):
/// the index itself (about 14 B per distinct n-gram, 15 with a prefix filter) and,
/// while a partition is added, that partition's postings (16 B each) and their Arrow
/// batches. What sizes the index groups.
pub const LOAD_BYTES_PER_POSTING: u64 = 40;

/// Gated n-grams ([`is_gated`]) are looked up only where their first `PREFIX_TOKENS`
/// tokens are the first tokens of an indexed gated n-gram.
pub const PREFIX_TOKENS: u32 = 4;

/// Whether n-grams of effective length `n` are looked up only behind the prefix
/// filter, `longest` being the longest configured length: those of at least
/// [`PREFIX_TOKENS`] tokens but shorter than `longest` (other configured lengths, and
/// short rows' effective lengths), so that one prefix question gates them all. The
/// longest length (most n-grams: every row of at least that many tokens) and the
/// shortest are looked up at every position.
pub fn is_gated(n: u32, longest: u32) -> bool {
    n >= PREFIX_TOKENS && n < longest
}

/// The high bit of a `rows` value: the key occurs in several eval rows, listed in
/// `shared` from the position in the low bits (a count, then the rows). So a global
/// eval row, and a position in `shared`, is below it.
const MULTI: u32 = 1 << 31;

/// The most eval rows one index numbers (global rows are below [`MULTI`]).
pub const MAX_EVAL_ROWS: u64 = MULTI as u64;

/// Why a partition cannot be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionRefused {
    /// Its keys are not all above the keys added before (postings of another
    /// partitioning, or partitions out of order).
    OutOfOrder,
    /// A global eval row of [`MAX_EVAL_ROWS`] or more.
    RowTooLarge,
    /// More rows shared among keys than a `rows` value can point to.
    TooManyShared,
}

/// Keys per directory bucket, about.
const KEYS_PER_BUCKET: usize = 4;

/// Keys per word of a [`KeyFilter`]: 8 bits per key.
const KEYS_PER_FILTER_WORD: usize = 8;

/// A set of window keys that answers "certainly not in it" for most other keys: three
/// bits per key, all in one 64-bit word chosen by the key's high bits (a blocked Bloom
/// filter), at [`KEYS_PER_FILTER_WORD`] keys per word: one cache line per question,
/// about 3% false positives. Small, so that more of it stays in the cache: at 17.6M
/// keys, 8 bits per key scanned faster than 15 or 29 (fewer false positives, each one
/// a look in the directory, did not pay for a filter two or four times the size).
#[derive(Default)]
struct KeyFilter {
    words: Vec<u64>,
}

impl KeyFilter {
    /// An empty filter for about `keys` keys.
    fn with_capacity(keys: usize) -> KeyFilter {
        KeyFilter {
            words: vec![0u64; keys.div_ceil(KEYS_PER_FILTER_WORD).max(64)],
        }
    }

    #[cfg(test)]
    fn new(keys: impl ExactSizeIterator<Item = u64>) -> KeyFilter {
        let mut filter = KeyFilter::with_capacity(keys.len());
        for key in keys {
            filter.insert(key);
        }
        filter
    }

    /// Adds `key` (adding a key twice is adding it once).
    #[inline]
    fn insert(&mut self, key: u64) {
        let (word, mask) = self.slot(key);
        self.words[word] |= mask;
    }

    /// `key`'s word (from its high bits: `key × words / 2^64`) and its three bits there
    /// (from its low 18 bits).
    #[inline]
    fn slot(&self, key: u64) -> (usize, u64) {
        let word = ((u128::from(key) * self.words.len() as u128) >> 64) as usize;
        (
            word,
            (1u64 << (key & 63)) | (1u64 << ((key >> 6) & 63)) | (1u64 << ((key >> 12) & 63)),
        )
    }

    /// Asks the memory system for `key`'s word ahead of [`KeyFilter::may_hold`]: a large
    /// filter's words are not in the cache, and a scan asks for many at once.
    #[inline]
    fn prefetch(&self, key: u64) {
        if !self.words.is_empty() {
            prefetch(&self.words, self.slot(key).0);
        }
    }

    /// Adds every key of `keys`, asking for each key's word [`PROBE_AHEAD`] keys
    /// before it is written (a large filter's words are not in the cache).
    fn insert_all(&mut self, keys: &[u64]) {
        if self.words.is_empty() {
            return;
        }
        for (j, &key) in keys.iter().enumerate() {
            if let Some(&ahead) = keys.get(j + PROBE_AHEAD) {
                self.prefetch(ahead);
            }
            self.insert(key);
        }
    }

    /// Whether `key` may be in the set (never, for an empty filter never built).
    #[cfg(test)]
    fn may_hold(&self, key: u64) -> bool {
        if self.words.is_empty() {
            return false;
        }
        let (word, mask) = self.slot(key);
        self.words[word] & mask == mask
    }

    /// Calls `keep(j)` for each `keys[j]` the filter may hold, in order, asking for
    /// each key's word [`PROBE_AHEAD`] keys before reading it.
    #[inline]
    fn pass(&self, keys: &[u64], mut keep: impl FnMut(usize)) {
        if self.words.is_empty() {
            return;
        }
        for &key in keys.iter().take(PROBE_AHEAD) {
            self.prefetch(key);
        }
        for (j, &key) in keys.iter().enumerate() {
            if let Some(&ahead) = keys.get(j + PROBE_AHEAD) {
                self.prefetch(ahead);
            }
            let (word, mask) = self.slot(key);
            if self.words[word] & mask == mask {
                keep(j);
            }
        }
    }

    fn bytes(&self) -> usize {
        self.words.len() * 8
    }
}

/// Builds an [`NgramIndex`] partition by partition: the partitions are ranges of the
/// key space ([`partition_of`]) added in ascending order, so sorting each one alone
/// (small enough to sort in the core's cache) sorts the whole index.
pub struct IndexBuilder {
    keys: Vec<u64>,
    rows: Vec<u32>,
    shared: Vec<u32>,
    prefix_filter: KeyFilter,
    /// The effective lengths indexed, ascending, each with whether it is gated.
    lengths: Vec<(u32, bool)>,
    /// A partition's postings being sorted.
    sorted: Vec<(u64, u32)>,
    /// The key filter and the directory, filled a partition at a time while its keys
    /// are in the cache (not in passes over all the keys at the end).
    filter: KeyFilter,
    directory: Vec<u32>,
    /// The directory's buckets (a power of two) and the shift that leaves a key's.
    buckets: usize,
    dir_shift: u32,
}

/// The partition of window key `key` among `partitions`: ranges of the key space, in
/// key order (the high bits of `key × partitions`).
pub fn partition_of(key: u64, partitions: u32) -> u32 {
    ((u128::from(key) * u128::from(partitions.max(1))) >> 64) as u32
}

/// Bits of the key each of [`sort_postings`]'s distribution passes sorts by.
const SORT_RADIX_BITS: u32 = 8;

/// Postings per bucket the second distribution pass leaves, about.
const POSTINGS_PER_SORT_BUCKET: usize = 4;

/// The keys of partition `p` of `partitions` ([`partition_of`]): `lo..=hi`.
pub fn partition_keys(p: u32, partitions: u32) -> (u64, u64) {
    let partitions = u128::from(partitions.max(1));
    // The least key with key × partitions ≥ p × 2^64.
    let start = |p: u128| ((p << 64).div_ceil(partitions)).min(1 << 64);
    let (lo, next) = (start(u128::from(p)), start(u128::from(p) + 1));
    (
        lo.min(u128::from(u64::MAX)) as u64,
        (next.max(1) - 1).min(u128::from(u64::MAX)) as u64,
    )
}

/// Writes the postings `postings()` (an iterator, made twice: they are read twice) to
/// `out` sorted by (key, row), repeats removed; their keys are expected in `lo..=hi`
/// (a partition's, [`partition_keys`]; with one outside, the result is sorted again
/// whole: slower, the same).
/// Window keys are hashes, spread evenly over their range: a distribution pass by the
/// keys' top [`SORT_RADIX_BITS`] bits of that range, then in each of its buckets
/// (about a thousand postings of a 64-partition index, in the core's cache) a second by
/// the next bits, into buckets of about [`POSTINGS_PER_SORT_BUCKET`], each then sorted
/// alone. The first pass writes to 2^[`SORT_RADIX_BITS`] places at once, the second
/// within a cache-sized range; skewed keys only make some buckets larger (each sort is
/// O(m log m)).
pub fn sort_postings<I: Iterator<Item = (u64, u32)>>(
    postings: impl Fn() -> I,
    (lo, hi): (u64, u64),
    out: &mut Vec<(u64, u32)>,
) {
    out.clear();
    // (key − lo) >> shift < 2^SORT_RADIX_BITS for every key in range.
    let shift = (64 - hi.saturating_sub(lo).leading_zeros()).saturating_sub(SORT_RADIX_BITS);
    let last = (1usize << SORT_RADIX_BITS) - 1;
    let top = |key: u64| ((key.saturating_sub(lo) >> shift) as usize).min(last);
    let mut starts = vec![0usize; last + 2];
    let mut len = 0;
    for (key, _) in postings() {
        starts[top(key) + 1] += 1;
        len += 1;
    }
    if len == 0 {
        return;
    }
    for b in 1..starts.len() {
        starts[b] += starts[b - 1];
    }
    let mut next = starts.clone();
    out.resize(len, (0, 0));
    for p in postings() {
        let b = top(p.0);
        // A second iterator longer than the first (it cannot be) is cut at `len`.
        if let Some(slot) = out.get_mut(next[b]) {
            *slot = p;
        }
        next[b] += 1;
    }
    let mut bucket = Vec::new();
    let mut inner = Vec::new();
    for range in starts.windows(2) {
        let (a, b) = (range[0], range[1]);
        if b - a <= 2 * POSTINGS_PER_SORT_BUCKET {
            out[a..b].sort_unstable();
            continue;
        }
        // Within a bucket the bits above `shift` are equal: the next `bits` below
        // them order it.
        let bits = ((b - a) / POSTINGS_PER_SORT_BUCKET).ilog2().min(16);
        let (low, mask) = (shift.saturating_sub(bits), (1usize << bits) - 1);
        let sub = |key: u64| (key.saturating_sub(lo) >> low) as usize & mask;
        bucket.clear();
        bucket.extend_from_slice(&out[a..b]);
        inner.clear();
        inner.resize((1 << bits) + 1, a);
        for p in &bucket {
            inner[sub(p.0) + 1] += 1;
        }
        for i in 1..inner.len() {
            inner[i] += inner[i - 1] - a;
        }
        let mut at = inner.clone();
        for &p in &bucket {
            let s = sub(p.0);
            out[at[s]] = p;
            at[s] += 1;
        }
        for r in inner.windows(2) {
            out[r[0]..r[1]].sort_unstable();
        }
    }
    // Keys outside `lo..=hi` share the edge buckets out of order: sorted whole.
    if !out.is_sorted() {
        out.sort_unstable();
    }
    out.dedup();
}

impl IndexBuilder {
    /// A builder for at most `postings` postings of n-grams of `lengths` (effective
    /// lengths; `longest`: the longest configured length) and `prefixes` prefix keys of
    /// gated n-grams.
    pub fn new(postings: usize, lengths: &[u32], longest: u32, prefixes: usize) -> IndexBuilder {
        let mut lengths: Vec<(u32, bool)> =
            lengths.iter().map(|&n| (n, is_gated(n, longest))).collect();
        lengths.sort_unstable();
        lengths.dedup();
        // Without a gated length there is nothing for a prefix filter to gate.
        let gated = lengths.iter().any(|&(_, g)| g);
        // Sized by the postings, which are at least the distinct keys.
        let buckets = (postings / KEYS_PER_BUCKET).next_power_of_two().max(1);
        IndexBuilder {
            keys: Vec::with_capacity(postings),
            rows: Vec::with_capacity(postings),
            shared: Vec::new(),
            filter: KeyFilter::with_capacity(postings),
            directory: Vec::with_capacity(buckets + 1),
            buckets,
            dir_shift: 64 - buckets.trailing_zeros(),
            prefix_filter: if gated {
                KeyFilter::with_capacity(prefixes)
            } else {
                KeyFilter::default()
            },
            lengths,
            sorted: Vec::new(),
        }
    }

    /// Adds the prefix keys of indexed gated n-grams (each the key of its first
    /// [`PREFIX_TOKENS`] tokens); nothing without a gated length.
    pub fn add_prefixes(&mut self, prefixes: &[u64]) {
        self.prefix_filter.insert_all(prefixes);
    }

    /// Adds one partition's postings (window key, global eval row), in any order and
    /// with repeats (sorted, as index tasks write them, costs one pass); `postings` is
    /// left empty. Its keys must all be above those of the partitions added before it.
    pub fn add_partition(
        &mut self,
        postings: &mut Vec<(u64, u32)>,
    ) -> Result<(), PartitionRefused> {
        if !postings.is_sorted() {
            let lo = postings.iter().map(|p| p.0).min().unwrap_or(0);
            let hi = postings.iter().map(|p| p.0).max().unwrap_or(0);
            sort_postings(|| postings.iter().copied(), (lo, hi), &mut self.sorted);
            std::mem::swap(postings, &mut self.sorted);
        }
        postings.dedup();
        if let (Some(&last), Some(&(first, _))) = (self.keys.last(), postings.first()) {
            if first <= last {
                return Err(PartitionRefused::OutOfOrder);
            }
        }
        if postings.iter().any(|p| p.1 >= MULTI) {
            return Err(PartitionRefused::RowTooLarge);
        }
        if self.shared.len() + 2 * postings.len() >= MULTI as usize {
            return Err(PartitionRefused::TooManyShared);
        }
        let first = self.keys.len();
        let mut at = 0;
        while at < postings.len() {
            let key = postings[at].0;
            let end = at + postings[at..].iter().take_while(|p| p.0 == key).count();
            self.keys.push(key);
            if end - at == 1 {
                self.rows.push(postings[at].1);
            } else {
                self.rows.push(MULTI | self.shared.len() as u32);
                self.shared.push((end - at) as u32);
                self.shared.extend(postings[at..end].iter().map(|p| p.1));
            }
            at = end;
        }
        for (k, &key) in self.keys.iter().enumerate().skip(first) {
            self.filter.insert(key);
            // directory[b]: the first key of bucket b or after.
            let bucket = bucket_of(key, self.dir_shift) as usize;
            while self.directory.len() <= bucket {
                self.directory.push(k as u32);
            }
        }
        postings.clear();
        Ok(())
    }

    pub fn build(self) -> NgramIndex {
        let IndexBuilder {
            mut keys,
            mut rows,
            mut shared,
            prefix_filter,
            lengths,
            sorted: _,
            filter,
            mut directory,
            buckets,
            dir_shift,
        } = self;
        keys.shrink_to_fit();
        rows.shrink_to_fit();
        shared.shrink_to_fit();
        // The buckets after the last key's, and the end.
        directory.resize(buckets + 1, keys.len() as u32);
        let gated = !prefix_filter.words.is_empty();
        NgramIndex {
            keys,
            rows,
            shared,
            directory,
            dir_shift,
            filter,
            prefix_filter,
            prefix_len: if gated { PREFIX_TOKENS } else { 0 },
            lengths,
        }
    }
}

#[inline]
fn bucket_of(key: u64, shift: u32) -> u64 {
    if shift >= 64 {
        0
    } else {
        key >> shift
    }
}

/// The eval n-grams of one index group, by window key (see the module docs).
#[derive(Default)]
pub struct NgramIndex {
    keys: Vec<u64>,
    rows: Vec<u32>,
    shared: Vec<u32>,
    directory: Vec<u32>,
    dir_shift: u32,
    filter: KeyFilter,
    /// Gated lengths are looked up only where `prefix_filter` may hold the window of
    /// `prefix_len` tokens there, the others at every position (0: no
    /// prefix filter, every length at every position: there is one only for two or
    /// gated length).
    prefix_len: u32,
    prefix_filter: KeyFilter,
    /// The lengths indexed, ascending, each with whether it is gated.
    lengths: Vec<(u32, bool)>,
}

impl NgramIndex {
    /// Distinct window keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The memory the index holds.
    pub fn bytes(&self) -> usize {
        self.keys.len() * 8
            + self.rows.len() * 4
            + self.shared.len() * 4
            + self.directory.len() * 4
            + self.filter.bytes()
            + self.prefix_filter.bytes()
    }

    /// The global eval rows of window key `key`, if indexed (the tests' reference for
    /// [`NgramIndex::each_match`]).
    #[cfg(test)]
    pub fn rows_of(&self, key: u64) -> Option<&[u32]> {
        if !self.filter.may_hold(key) {
            return None;
        }
        self.rows_in_keys(key)
    }

    /// The global eval rows of window key `key`, if indexed, the filter not asked.
    #[inline]
    fn rows_in_keys(&self, key: u64) -> Option<&[u32]> {
        let b = bucket_of(key, self.dir_shift) as usize;
        let (start, end) = (self.directory[b] as usize, self.directory[b + 1] as usize);
        let k = start + self.keys[start..end].iter().position(|&x| x == key)?;
        let v = &self.rows[k];
        if v & MULTI == 0 {
            Some(std::slice::from_ref(v))
        } else {
            let at = (v & !MULTI) as usize;
            let count = self.shared[at] as usize;
            Some(&self.shared[at + 1..at + 1 + count])
        }
    }

    /// Calls `each(i, n, rows)` for every window of `doc` whose key is indexed (the
    /// window of `n` tokens from `i`; `rows` the global eval rows of that key), in
    /// order of `i`, then `n`. Candidates: the text is not compared. `scratch`: buffers
    /// kept between documents.
    ///
    /// One pass per length over the document's window keys (computed first, in a
    /// loop of their own): each key's filter word is asked for [`PROBE_AHEAD`] keys
    /// before it is read, so the cache misses of a large index overlap instead of
    /// following one another. Gated lengths are looked up only at the positions whose
    /// prefix passed the prefix filter (a pass of its own, first). The keys that pass
    /// the key filter, few, are then looked up in the directory and the sorted keys.
    pub fn each_match(
        &self,
        doc: &ScanTokens,
        scratch: &mut MatchScratch,
        mut each: impl FnMut(usize, usize, &[u32]),
    ) {
        if self.keys.is_empty() {
            return;
        }
        let MatchScratch {
            keys,
            positions,
            gated_ok,
            candidates,
        } = scratch;
        let len = doc.len();
        let p = self.prefix_len as usize;
        gated_ok.clear();
        if p > 0 && p <= len {
            keys.clear();
            keys.extend((0..=len - p).map(|i| doc.key(i, p)));
            gated_ok.resize(keys.len(), false);
            self.prefix_filter.pass(keys, |j| gated_ok[j] = true);
        }
        candidates.clear();
        for (l, &(n, gated)) in self.lengths.iter().enumerate() {
            let n = n as usize;
            if n > len {
                break;
            }
            keys.clear();
            if gated {
                positions.clear();
                positions.extend(
                    (0..=len - n)
                        .filter(|&i| gated_ok.get(i) == Some(&true))
                        .map(|i| i as u32),
                );
                keys.extend(positions.iter().map(|&i| doc.key(i as usize, n)));
                self.filter
                    .pass(keys, |j| candidates.push((positions[j], l as u32, keys[j])));
            } else {
                keys.extend((0..=len - n).map(|i| doc.key(i, n)));
                self.filter
                    .pass(keys, |j| candidates.push((j as u32, l as u32, keys[j])));
            }
        }
        if self.lengths.len() > 1 {
            // By position, then length (the lengths are ascending).
            candidates.sort_unstable();
        }
        // Each candidate needs its directory bucket, then its keys: asked for first.
        for &(_, _, key) in candidates.iter() {
            prefetch(&self.directory, bucket_of(key, self.dir_shift) as usize);
        }
        for &(_, _, key) in candidates.iter() {
            let b = bucket_of(key, self.dir_shift) as usize;
            prefetch(&self.keys, self.directory[b] as usize);
        }
        for &(i, l, key) in candidates.iter() {
            if let Some(rows) = self.rows_in_keys(key) {
                each(i as usize, self.lengths[l as usize].0 as usize, rows);
            }
        }
    }
}

/// Asks the memory system for `table[at]` (nothing if past the end): a read of it
/// soon will not wait as long.
#[inline]
fn prefetch<T>(table: &[T], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(item) = table.get(at) {
        // SAFETY: a prefetch has no effect but on the cache; `item` is a valid reference.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>((item as *const T).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (table, at);
}

/// Buffers [`NgramIndex::each_match`] reuses from one document to the next.
#[derive(Default)]
pub struct MatchScratch {
    keys: Vec<u64>,
    positions: Vec<u32>,
    gated_ok: Vec<bool>,
    /// (position, index in `lengths`, key) of the windows that passed the key filter.
    candidates: Vec<(u32, u32, u64)>,
}

/// How many keys ahead a filter pass asks for the filter word it will read.
const PROBE_AHEAD: usize = 16;

#[cfg(test)]
mod tests {
    use super::super::tokenize::TokenizerKind;
    use super::*;

    fn doc(text: &str) -> ScanTokens {
        let mut d = ScanTokens::default();
        d.fill(TokenizerKind::Default, text);
        d
    }

    /// An index of `postings` (key, n, prefix key, row), added in several partitions.
    fn index_of(postings: &[(u64, u32, u64, u32)]) -> NgramIndex {
        let lengths: Vec<u32> = postings.iter().map(|p| p.1).collect();
        let longest = lengths.iter().copied().max().unwrap_or(0);
        let mut b = IndexBuilder::new(postings.len(), &lengths, longest, postings.len());
        let partitions = 3;
        for p in 0..partitions {
            let mut part: Vec<(u64, u32)> = postings
                .iter()
                .filter(|x| partition_of(x.0, partitions) == p)
                .map(|x| (x.0, x.3))
                .collect();
            b.add_partition(&mut part).unwrap();
        }
        let prefixes: Vec<u64> = postings
            .iter()
            .filter(|x| is_gated(x.1, longest))
            .map(|x| x.2)
            .collect();
        b.add_prefixes(&prefixes);
        b.build()
    }

    /// Every window of the given lengths of `text` at every `step`-th position, as
    /// eval row `row`: postings (key, n, prefix key, row).
    fn windows(text: &str, lengths: &[usize], step: usize, row: u32) -> Vec<(u64, u32, u64, u32)> {
        let d = doc(text);
        let mut out = Vec::new();
        for &n in lengths {
            for i in (0..=d.len().saturating_sub(n)).step_by(step) {
                let prefix = if n as u32 >= PREFIX_TOKENS {
                    d.key(i, PREFIX_TOKENS as usize)
                } else {
                    0
                };
                out.push((d.key(i, n), n as u32, prefix, row + i as u32));
            }
        }
        out
    }

    #[test]
    fn each_match_finds_every_indexed_window_whatever_the_lengths() {
        let index = index_of(&windows(
            "a b c d e f g h a b c x y z a b",
            &[1, 2, 5, 6],
            3,
            0,
        ));
        assert_eq!(index.prefix_len, PREFIX_TOKENS);
        for text in [
            "a b c d e f g h",
            "x a b c d e f g h a b c x y z a b q",
            "z a b",
            "",
        ] {
            let d = doc(text);
            let mut got = Vec::new();
            index.each_match(&d, &mut MatchScratch::default(), |i, n, rows| {
                got.push((i, n, rows.to_vec()))
            });
            let mut want = Vec::new();
            for i in 0..d.len() {
                for n in [1usize, 2, 5, 6] {
                    if i + n <= d.len() {
                        if let Some(rows) = index.rows_of(d.key(i, n)) {
                            want.push((i, n, rows.to_vec()));
                        }
                    }
                }
            }
            assert_eq!(got, want, "{text:?}");
            if text.starts_with("a b c") {
                assert!(want.iter().any(|w| w.1 == 6) && want.iter().any(|w| w.1 == 1));
            }
        }
    }

    #[test]
    fn a_key_in_several_rows_lists_each_row_once_in_order() {
        let d = doc("Say HELLO wörld; a b c!");
        // say hello wörld a b c ""
        assert_eq!(d.len(), 7);
        let mut postings: Vec<_> = [9, 2, 2, 5].map(|row| (d.key(1, 2), 2, 0, row)).to_vec();
        postings.push((d.key(3, 3), 3, 0, 1));
        postings.push((d.key(6, 1), 1, 0, 0));
        let index = index_of(&postings);
        assert_eq!(index.len(), 3);
        assert_eq!(index.rows_of(d.key(1, 2)), Some(&[2u32, 5, 9][..]));
        assert_eq!(index.rows_of(d.key(3, 3)), Some(&[1u32][..]));
        assert_eq!(index.rows_of(d.key(6, 1)), Some(&[0u32][..]));
        assert_eq!(index.rows_of(d.key(0, 2)), None);
        assert_eq!(index.rows_of(d.key(3, 2)), None);
        assert_eq!(index.rows_of(d.key(5, 1)), None);
        assert!(NgramIndex::default().rows_of(1).is_none());
    }

    #[test]
    fn a_million_keys_are_all_found_and_take_about_sixteen_bytes_each() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut postings = Vec::new();
        for row in 0..1_000_000u32 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = state ^ (state >> 31);
            postings.push((key, 13, key.rotate_left(7), row));
        }
        let keys: Vec<u64> = postings.iter().map(|p| p.0).collect();
        let index = index_of(&postings);
        for (row, &key) in keys.iter().enumerate() {
            assert_eq!(index.rows_of(key), Some(&[row as u32][..]));
        }
        let misses = (0..100_000u64)
            .filter(|k| {
                index
                    .rows_of(k.wrapping_mul(0xd6e8_feb8_6659_fd93))
                    .is_some()
            })
            .count();
        assert_eq!(misses, 0);
        let per_key = index.bytes() as f64 / index.len() as f64;
        // One length: keys, rows, directory and key filter, no prefix filter.
        assert!((12.0..=18.0).contains(&per_key), "{per_key} bytes per key");
    }

    #[test]
    fn the_longest_and_the_shortest_lengths_are_not_gated() {
        // n = [8, 13]: 13 (every long row's n-grams) and short rows' 1-3 token n-grams
        // at every position, 8 and short rows' 4-12 behind the prefix filter.
        assert!(!is_gated(13, 13) && !is_gated(3, 13) && !is_gated(1, 13));
        assert!(is_gated(8, 13) && is_gated(4, 13) && is_gated(12, 13));
        let index = index_of(&windows("a b c d e f g h i j k l m n", &[2, 8, 13], 1, 0));
        assert_eq!(index.prefix_len, PREFIX_TOKENS);
        let d = doc("x a b c d e f g h i j k l m n y");
        let mut got = Vec::new();
        index.each_match(&d, &mut MatchScratch::default(), |i, n, _| got.push((i, n)));
        let mut want: Vec<(usize, usize)> = (1..14).map(|i| (i, 2)).collect();
        want.extend((1..8).map(|i| (i, 8)));
        want.extend([(1, 13), (2, 13)]);
        want.sort_unstable();
        assert_eq!(got, want);
    }

    #[test]
    fn partitions_out_of_key_order_are_refused() {
        let mut b = IndexBuilder::new(4, &[2], 2, 0);
        b.add_partition(&mut vec![(u64::MAX - 1, 0)]).unwrap();
        assert_eq!(
            b.add_partition(&mut vec![(5, 1)]),
            Err(PartitionRefused::OutOfOrder)
        );
        let mut b = IndexBuilder::new(4, &[2], 2, 0);
        b.add_partition(&mut vec![(5, 0), (5, 0)]).unwrap();
        assert_eq!(
            b.add_partition(&mut vec![(5, 1)]),
            Err(PartitionRefused::OutOfOrder)
        );
        // A global row with the MULTI bit would read as a shared list.
        assert_eq!(
            b.add_partition(&mut vec![(9, MULTI)]),
            Err(PartitionRefused::RowTooLarge)
        );
        assert_eq!(partition_of(0, 64), 0);
        assert_eq!(partition_of(u64::MAX, 64), 63);
        assert_eq!(partition_of(1 << 63, 64), 32);
    }

    #[test]
    fn postings_are_sorted_and_their_repeats_removed_whatever_their_keys() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let spread: Vec<(u64, u32)> = (0..50_000)
            .map(|_| (random(), (random() % 7) as u32))
            .collect();
        let narrow: Vec<(u64, u32)> = (0..20_000)
            .map(|_| (1_000 + random() % 300, (random() % 5) as u32))
            .collect();
        let skewed: Vec<(u64, u32)> = (0..20_000)
            .map(|i| {
                (
                    if i % 3 == 0 { random() } else { 42 },
                    (random() % 9) as u32,
                )
            })
            .collect();
        let mut repeated = spread[..5_000].to_vec();
        repeated.extend_from_slice(&spread[..5_000]);
        for postings in [
            spread,
            narrow,
            skewed,
            repeated,
            vec![(5, 1)],
            vec![],
            vec![(u64::MAX, 0), (0, 0)],
        ] {
            let mut want = postings.clone();
            want.sort_unstable();
            want.dedup();
            let mut got = vec![(1, 1)];
            let lo = postings.iter().map(|p| p.0).min().unwrap_or(0);
            let hi = postings.iter().map(|p| p.0).max().unwrap_or(0);
            sort_postings(|| postings.iter().copied(), (lo, hi), &mut got);
            assert_eq!(got, want);
            // A range wider than the keys', or one some keys are outside of.
            for range in [
                (0, u64::MAX),
                (lo / 2 + hi / 2, hi),
                (lo, lo / 2 + hi / 2),
                (5, 4),
            ] {
                sort_postings(|| postings.iter().copied(), range, &mut got);
                assert_eq!(got, want, "{range:?}");
            }
        }
    }

    #[test]
    fn a_partitions_keys_are_the_keys_partition_of_puts_there() {
        for partitions in [1u32, 3, 64, 1000, 65_536] {
            let mut next = 0u64;
            for p in 0..partitions {
                let (lo, hi) = partition_keys(p, partitions);
                assert_eq!(lo, next, "partition {p} of {partitions}");
                assert_eq!(partition_of(lo, partitions), p);
                assert_eq!(partition_of(hi, partitions), p);
                if p + 1 < partitions {
                    assert_eq!(partition_of(hi + 1, partitions), p + 1);
                    next = hi + 1;
                } else {
                    assert_eq!(hi, u64::MAX);
                }
            }
        }
    }

    #[test]
    fn a_key_filter_holds_its_keys_and_few_others() {
        let key = |k: u64| {
            let k = k.wrapping_mul(0x2545_f491_4f6c_dd1d);
            k ^ (k >> 29)
        };
        let keys: Vec<u64> = (0..100_000).map(key).collect();
        let filter = KeyFilter::new(keys.iter().copied());
        assert!(keys.iter().all(|&k| filter.may_hold(k)));
        let others = (1_000_000..1_200_000u64).filter(|&k| filter.may_hold(key(k)));
        let rate = others.count() as f64 / 200_000.0;
        assert!(rate < 0.05, "false positives {rate}");
        assert!(!KeyFilter::default().may_hold(1));
        assert!(!KeyFilter::new([1u64].into_iter()).may_hold(key(2)));
    }
}
