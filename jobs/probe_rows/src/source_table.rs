//! The map's table of sources: address text → parsed source (key bytes, IP version,
//! partition), for every source a worker has met, kept across its map tasks.
//!
//! ```text
//! a Parquet dictionary's values ─► TextKey + hash each ─► lookups in order, the slot of
//!   the lookup PREFETCH_AHEAD places on fetched meanwhile ─► miss: parse, insert
//! ```
//!
//! A production input has a million sources or more, and a row group's dictionary names
//! a hundred thousand of them, nearly all different from the last row group's: every
//! value is a lookup in a table far larger than the CPU's caches, and each one used to
//! wait for memory in turn. Here a slot is one cache line (the key inline, no pointer to
//! follow), the table is open-addressed with linear probing, and a dictionary's lookups
//! go in one loop that prefetches the slots of the lookups ahead, so that their misses
//! overlap.

use super::validate::Source;

/// An address text as a key held inline: up to [`TEXT_KEY_MAX`] bytes (any IPv6
/// address in its usual forms), zero-padded, then its length in the last byte.
#[derive(Clone, Copy, Eq)]
pub struct TextKey([u64; 5]);

/// The words, as a derived `Hash` would hash them (equal keys have equal words).
impl std::hash::Hash for TextKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

/// Word by word, without a branch or a call: a derived comparison of the 40 bytes is a
/// `memcmp` call, and keys are compared on every lookup.
impl PartialEq for TextKey {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.0
            .iter()
            .zip(&other.0)
            .fold(0, |differ, (a, b)| differ | (a ^ b))
            == 0
    }
}

/// The longest text a [`TextKey`] holds.
pub const TEXT_KEY_MAX: usize = 39;

/// The key of no text: its length byte is one no text has.
const EMPTY: TextKey = TextKey([0, 0, 0, 0, 0xFF << 56]);

impl TextKey {
    /// `None` for a longer text (parsed every time it is seen, never kept).
    pub fn of(text: &str) -> Option<TextKey> {
        let bytes = text.as_bytes();
        if bytes.len() > TEXT_KEY_MAX {
            return None;
        }
        let mut k = [0u8; TEXT_KEY_MAX + 1];
        k[..bytes.len()].copy_from_slice(bytes);
        k[TEXT_KEY_MAX] = bytes.len() as u8;
        let mut words = [0u64; 5];
        for (w, b) in words.iter_mut().zip(k.chunks_exact(8)) {
            let mut le = [0u8; 8];
            le.copy_from_slice(b);
            *w = u64::from_le_bytes(le);
        }
        Some(TextKey(words))
    }
}

/// One slot: a key and its source ([`NOT_A_SOURCE`] for a text that is not one): one
/// cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Slot {
    key: TextKey,
    source: Source,
}

const _: () = assert!(size_of::<Slot>() == 64);

/// What a slot holds for a text that is not a usable source (no IP version is 0).
const NOT_A_SOURCE: Source = Source {
    key: [0; 17],
    version: 0,
    local: false,
    partition: 0,
};

const EMPTY_SLOT: Slot = Slot {
    key: EMPTY,
    source: NOT_A_SOURCE,
};

fn held(source: Source) -> Option<Source> {
    (source.version != 0).then_some(source)
}

/// Lookups ahead whose slots are prefetched.
const PREFETCH_AHEAD: usize = 16;

/// Slots of a new or cleared table.
const INITIAL_SLOTS: usize = 1 << 12;

/// Address text → parsed source.
pub struct SourceTable {
    slots: Vec<Slot>,
    len: usize,
    hasher: foldhash::fast::RandomState,
    /// [`SourceTable::resolve_all`]'s keys and hashes, kept for the next call.
    keys: Vec<Option<(TextKey, u64)>>,
}

impl Default for SourceTable {
    fn default() -> Self {
        SourceTable {
            slots: vec![EMPTY_SLOT; INITIAL_SLOTS],
            len: 0,
            hasher: foldhash::fast::RandomState::default(),
            keys: Vec::new(),
        }
    }
}

impl SourceTable {
    /// The texts held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Forgets every text.
    pub fn clear(&mut self) {
        self.slots = vec![EMPTY_SLOT; INITIAL_SLOTS];
        self.len = 0;
    }

    fn hash(&self, key: &TextKey) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one(key)
    }

    fn home(&self, hash: u64) -> usize {
        hash as usize & (self.slots.len() - 1)
    }

    /// The source of every text of `texts`, in order: from the table, or `parse`d (and
    /// kept) for a text it does not hold.
    pub fn resolve_all<'t>(
        &mut self,
        texts: impl ExactSizeIterator<Item = &'t str> + Clone,
        mut parse: impl FnMut(&str) -> Option<Source>,
        out: &mut Vec<Option<Source>>,
    ) {
        // The keys first (in memory the table keeps: a row group's dictionary is a
        // hundred thousand texts, and memory fresh from the kernel costs a page fault per
        // page), so that the slot of the lookup PREFETCH_AHEAD places on is known.
        let mut keys = std::mem::take(&mut self.keys);
        keys.clear();
        keys.extend(
            texts
                .clone()
                .map(|t| TextKey::of(t).map(|k| (k, self.hash(&k)))),
        );
        out.reserve(keys.len());
        for (i, (text, key)) in texts.zip(&keys).enumerate() {
            if let Some(Some((_, hash))) = keys.get(i + PREFETCH_AHEAD) {
                prefetch(&self.slots[self.home(*hash)]);
            }
            let source = match key {
                Some((key, hash)) => self.get_or_insert(*key, *hash, || parse(text)),
                None => parse(text),
            };
            out.push(source);
        }
        self.keys = keys;
    }

    fn get_or_insert(
        &mut self,
        key: TextKey,
        hash: u64,
        parse: impl FnOnce() -> Option<Source>,
    ) -> Option<Source> {
        let mut i = self.home(hash);
        loop {
            let slot = &self.slots[i];
            if slot.key == key {
                return held(slot.source);
            }
            if slot.key == EMPTY {
                break;
            }
            i = (i + 1) & (self.slots.len() - 1);
        }
        let source = parse();
        // At most three quarters full: linear probes stay short.
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
            i = self.home(hash);
            while self.slots[i].key != EMPTY {
                i = (i + 1) & (self.slots.len() - 1);
            }
        }
        self.slots[i] = Slot {
            key,
            source: source.unwrap_or(NOT_A_SOURCE),
        };
        self.len += 1;
        source
    }

    fn grow(&mut self) {
        let doubled = vec![EMPTY_SLOT; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        for slot in old.into_iter().filter(|s| s.key != EMPTY) {
            let mut i = self.home(self.hash(&slot.key));
            while self.slots[i].key != EMPTY {
                i = (i + 1) & (self.slots.len() - 1);
            }
            self.slots[i] = slot;
        }
    }
}

/// Asks the CPU to fetch `slot`'s cache line (a hint: nothing is read).
#[inline]
fn prefetch(slot: &Slot) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads no memory and cannot fault; SSE is part of x86_64.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (slot as *const Slot).cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = slot;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(n: u32) -> Source {
        Source {
            key: [n as u8; 17],
            version: 4,
            local: false,
            partition: n,
        }
    }

    #[test]
    fn texts_resolve_to_what_was_parsed_first_and_grow_past_the_first_slots() {
        let mut table = SourceTable::default();
        let texts: Vec<String> = (0..20_000)
            .map(|i| format!("10.0.{}.{}", i / 256, i % 256))
            .collect();
        let mut parsed = 0;
        let mut out = Vec::new();
        table.resolve_all(
            texts.iter().map(String::as_str),
            |t| {
                parsed += 1;
                let n: u32 = t.rsplit('.').next().unwrap().parse().unwrap();
                (!n.is_multiple_of(7)).then(|| source(n))
            },
            &mut out,
        );
        assert_eq!(parsed, 20_000);
        assert_eq!(table.len(), 20_000);
        for (i, r) in out.iter().enumerate() {
            let n = (i % 256) as u32;
            assert_eq!(
                r.map(|s| s.partition),
                (!n.is_multiple_of(7)).then_some(n),
                "{}",
                texts[i]
            );
        }
        // Again, and one by one: nothing parsed, the same answers.
        let mut again = Vec::new();
        table.resolve_all(
            texts.iter().map(String::as_str),
            |_| panic!("parsed twice"),
            &mut again,
        );
        assert_eq!(
            again
                .iter()
                .map(|s| s.map(|s| s.partition))
                .collect::<Vec<_>>(),
            out.iter()
                .map(|s| s.map(|s| s.partition))
                .collect::<Vec<_>>()
        );
        table.clear();
        assert_eq!(table.len(), 0);
        let mut cleared = Vec::new();
        table.resolve_all([texts[300].as_str()].into_iter(), |_| None, &mut cleared);
        assert!(cleared[0].is_none(), "a cleared table parses again");
    }

    #[test]
    fn a_text_too_long_to_key_is_parsed_every_time_and_not_kept() {
        let mut table = SourceTable::default();
        let long = "0000:0000:0000:0000:0000:ffff:192.000.002.001";
        assert!(long.len() > TEXT_KEY_MAX);
        let mut out = Vec::new();
        let mut parsed = 0;
        let parse = |_: &str| {
            parsed += 1;
            Some(source(1))
        };
        table.resolve_all([long, long].into_iter(), parse, &mut out);
        assert_eq!(parsed, 2);
        assert_eq!(
            out.iter()
                .map(|s| s.map(|s| s.partition))
                .collect::<Vec<_>>(),
            [Some(1), Some(1)]
        );
        assert_eq!(table.len(), 0);
        // Texts that differ only past the padding are different keys.
        assert!(TextKey::of("1.2.3.4") != TextKey::of("1.2.3.4\0"));
    }
}
