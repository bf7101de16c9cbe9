//! What the cleaning pass does to one contaminated training document: drop it, or cut
//! its matched n-grams out (GPT-3's decontamination).
//!
//! ```text
//! matches [start, end) (code points)
//!   ─► each widened by context_chars on both sides, clamped to the text, merged
//!   ─► the pieces between them, each without the separator characters (of the
//!      job's tokenizer) at its ends; a piece shorter than min_piece_chars is cut too
//!   ─► none left: dropped (nothing_left); more than max_pieces: dropped
//!      (too_many_pieces); else the pieces joined by "\n"
//!   ─► (the report) the cut text has a window the index holds: dropped
//!      (cut_leaves_a_match)
//! ```
//!
//! A piece starts and ends with a token's character: a cut through a run of
//! separators would otherwise leave an empty token at a piece's end (the default
//! tokenizers keep one there, as `re.split` does), which is itself an n-gram (an empty
//! eval text's, a punctuation-only one's).
//!
//! Pure: a text and its matches in, the outcome out. The report gathers each
//! contaminated document's matches ([`DocMatches`]) and decides its outcome (it holds
//! the text): the edit the clean task applies, and its line of
//! `stats/clean_manifest.jsonl.gz` ([`ManifestRecord`]).

use std::collections::BTreeSet;

use serde::Serialize;

use super::clean::text_hash;
use super::protocol::{Clean, CleanMode, Edit, ScanDoc};
use super::tokenize::TokenizerKind;

/// Between the pieces of a cut document.
pub const PIECE_SEPARATOR: &str = "\n";

/// Why a document is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// `drop` mode: it overlaps.
    Overlaps,
    /// `cut` mode: no piece as long as `min_piece_chars` is left.
    NothingLeft,
    /// `cut` mode: more than `max_pieces` pieces are left.
    TooManyPieces,
    /// `cut` mode: what a cut leaves has an eval n-gram (across the line feed that
    /// joins two pieces, or at a piece's cut edge).
    CutLeavesAMatch,
}

impl Outcome {
    /// A cut that leaves an eval n-gram: the document is dropped instead (what it
    /// would have cut kept for the manifest). Any other outcome stays.
    pub fn drop_for_leaving_a_match(&mut self) {
        if let Outcome::Cut { removed, .. } = self {
            *self = Outcome::Dropped {
                reason: DropReason::CutLeavesAMatch,
                removed: std::mem::take(removed),
            };
        }
    }
}

impl DropReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Overlaps => "overlaps",
            DropReason::NothingLeft => "nothing_left",
            DropReason::TooManyPieces => "too_many_pieces",
            DropReason::CutLeavesAMatch => "cut_leaves_a_match",
        }
    }
}

/// What becomes of a contaminated document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Dropped {
        reason: DropReason,
        /// `cut` mode: the ranges it would have lost (as for [`Outcome::Cut`]).
        removed: Vec<[u64; 2]>,
    },
    Cut {
        text: String,
        /// The ranges `[start, end)` (code points of the original text) cut out,
        /// ascending, apart.
        removed: Vec<[u64; 2]>,
        pieces: u64,
    },
}

/// The outcome for `text` whose matched n-grams are at `matches` (`[start, end)` in
/// code points, any order; at least one).
pub fn clean_document(
    text: &str,
    matches: &[[u64; 2]],
    clean: &Clean,
    separates: impl Fn(char) -> bool,
) -> Outcome {
    if clean.mode == CleanMode::Drop {
        return Outcome::Dropped {
            reason: DropReason::Overlaps,
            removed: Vec::new(),
        };
    }
    // Byte offset of every code point, and of the end; whether it separates tokens.
    let bytes: Vec<usize> = text
        .char_indices()
        .map(|(at, _)| at)
        .chain(std::iter::once(text.len()))
        .collect();
    let separator: Vec<bool> = text.chars().map(separates).collect();
    let chars = (bytes.len() - 1) as u64;
    let mut cuts: Vec<[u64; 2]> = matches
        .iter()
        .map(|&[start, end]| {
            [
                start.saturating_sub(clean.context_chars).min(chars),
                end.saturating_add(clean.context_chars).min(chars),
            ]
        })
        .collect();
    cuts.sort_unstable();
    let cuts = merged(cuts);
    // The pieces between the cuts, long enough to keep.
    let mut kept: Vec<[u64; 2]> = Vec::new();
    let mut at = 0;
    for &[start, end] in cuts.iter().chain(std::iter::once(&[chars, chars])) {
        let (mut first, mut last) = (at, start.max(at));
        while first < last && separator[first as usize] {
            first += 1;
        }
        while last > first && separator[last as usize - 1] {
            last -= 1;
        }
        if last > first && last - first >= clean.min_piece_chars {
            kept.push([first, last]);
        }
        at = at.max(end);
    }
    let mut removed = Vec::new();
    let mut at = 0;
    for &[start, end] in kept.iter().chain(std::iter::once(&[chars, chars])) {
        if start > at {
            removed.push([at, start]);
        }
        at = end;
    }
    let pieces = kept.len() as u64;
    let reason = match pieces {
        0 => Some(DropReason::NothingLeft),
        p if p > clean.max_pieces => Some(DropReason::TooManyPieces),
        _ => None,
    };
    if let Some(reason) = reason {
        return Outcome::Dropped { reason, removed };
    }
    let text = kept
        .iter()
        .map(|&[start, end]| &text[bytes[start as usize]..bytes[end as usize]])
        .collect::<Vec<_>>()
        .join(PIECE_SEPARATOR);
    Outcome::Cut {
        text,
        removed,
        pieces,
    }
}

/// Sorted ranges with the overlapping and touching ones merged.
fn merged(sorted: Vec<[u64; 2]>) -> Vec<[u64; 2]> {
    let mut out: Vec<[u64; 2]> = Vec::with_capacity(sorted.len());
    for [start, end] in sorted {
        match out.last_mut() {
            Some(last) if start <= last[1] => last[1] = last[1].max(end),
            _ => out.push([start, end]),
        }
    }
    out
}

/// A contaminated training document's counted matches (with `[clean]`).
pub(super) struct DocMatches<'a> {
    doc: &'a ScanDoc,
    /// Every matched n-gram's occurrences in the document, `[start, end)`.
    pub spans: Vec<[u64; 2]>,
    pub ngrams: BTreeSet<(u32, &'a str)>,
    pub instances: BTreeSet<(&'a str, &'a str)>,
}

/// One line of `stats/clean_manifest.jsonl.gz`.
#[derive(Debug, Serialize)]
pub(super) struct ManifestRecord<'a> {
    train_path: &'a str,
    train_row: u64,
    train_doc_id: &'a str,
    /// `dropped` or `cut`.
    action: &'static str,
    /// Why: `overlaps` (a match), `nothing_left` or `too_many_pieces` (a cut that
    /// would leave no piece, or too many), `cut_leaves_a_match` (the cut text would
    /// still hold an indexed n-gram).
    reason: &'static str,
    /// The eval instances it overlaps, as (dataset, id).
    eval_instances: &'a BTreeSet<(&'a str, &'a str)>,
    /// Distinct matched n-grams.
    ngrams: u64,
    /// Where they are (code points, merged).
    matched: Vec<[u64; 2]>,
    /// `cut`: what was (or, dropped, would have been) cut out.
    removed: Vec<[u64; 2]>,
    /// Code points of the text, and of what is left of it.
    chars: u64,
    chars_left: u64,
}

impl<'a> DocMatches<'a> {
    pub fn of(doc: &'a ScanDoc) -> DocMatches<'a> {
        DocMatches {
            doc,
            spans: Vec::new(),
            ngrams: BTreeSet::new(),
            instances: BTreeSet::new(),
        }
    }

    /// What the cut rule makes of the document.
    pub fn outcome(&self, clean: &Clean, tokenizer: TokenizerKind) -> Outcome {
        let text = &self.doc.train_text;
        clean_document(text, &self.spans, clean, |c| tokenizer.separates(c))
    }

    /// The document's edit for `outcome`, and its manifest line.
    pub fn decide(
        &self,
        train_path: &'a str,
        train_row: u64,
        outcome: Outcome,
    ) -> (Edit, ManifestRecord<'_>) {
        let text = &self.doc.train_text;
        let (action, reason, removed, new_text) = match outcome {
            Outcome::Dropped { reason, removed } => ("dropped", reason.as_str(), removed, None),
            Outcome::Cut { text, removed, .. } => ("cut", "overlaps", removed, Some(text)),
        };
        let mut matched = self.spans.clone();
        matched.sort_unstable();
        let record = ManifestRecord {
            train_path,
            train_row,
            train_doc_id: &self.doc.train_doc_id,
            action,
            reason,
            eval_instances: &self.instances,
            ngrams: self.ngrams.len() as u64,
            matched: merged(matched),
            removed,
            chars: text.chars().count() as u64,
            chars_left: new_text.as_ref().map_or(0, |t| t.chars().count() as u64),
        };
        let edit = Edit {
            train_row,
            text: new_text,
            text_hash: text_hash(text),
        };
        (edit, record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No character separates tokens.
    fn none(_: char) -> bool {
        false
    }

    fn cut(context: u64, min_piece: u64, max_pieces: u64) -> Clean {
        Clean {
            mode: CleanMode::Cut,
            context_chars: context,
            min_piece_chars: min_piece,
            max_pieces,
        }
    }

    #[test]
    fn drop_mode_drops_whatever_the_matches() {
        let clean = Clean {
            mode: CleanMode::Drop,
            ..cut(0, 0, 1)
        };
        assert_eq!(
            clean_document("abc", &[[0, 1]], &clean, none),
            Outcome::Dropped {
                reason: DropReason::Overlaps,
                removed: vec![]
            }
        );
    }

    #[test]
    fn a_match_is_cut_with_its_context_and_the_pieces_joined() {
        //          0123456789012345678901234
        let text = "aaaaa bbbbb MATCH ccccc ddddd";
        let m = [12, 17];
        let got = clean_document(text, &[m], &cut(3, 1, 10), none);
        assert_eq!(
            got,
            Outcome::Cut {
                text: "aaaaa bbb\nccc ddddd".into(),
                removed: vec![[9, 20]],
                pieces: 2
            }
        );
    }

    /// A match past the end of the text (never from a report that read the text, but
    /// offsets are data) cuts nothing there and panics nowhere.
    #[test]
    fn a_match_past_the_text_cuts_nothing_there() {
        let text = "0123456789";
        assert_eq!(
            clean_document(text, &[[4, 5], [20, 25]], &cut(1, 1, 10), none),
            Outcome::Cut {
                text: "012\n6789".into(),
                removed: vec![[3, 6]],
                pieces: 2
            }
        );
    }

    #[test]
    fn cuts_clamp_to_the_text_and_merge_when_they_touch() {
        let text = "0123456789";
        // At the start, at the end: one piece between.
        assert_eq!(
            clean_document(text, &[[0, 1], [9, 10]], &cut(2, 1, 10), none),
            Outcome::Cut {
                text: "3456".into(),
                removed: vec![[0, 3], [7, 10]],
                pieces: 1
            }
        );
        // Two cuts that touch ([1, 4) and [4, 7)) are one; the order of matches
        // does not matter.
        assert_eq!(
            clean_document(text, &[[5, 6], [2, 3]], &cut(1, 1, 10), none),
            Outcome::Cut {
                text: "0\n789".into(),
                removed: vec![[1, 7]],
                pieces: 2
            }
        );
    }

    #[test]
    fn short_pieces_are_cut_and_too_many_or_none_drop_the_document() {
        let text = "0123456789abcdefghij";
        // Pieces [0,4), [5,9), [10,20): the two of 4 are shorter than 5.
        let matches = [[4, 5], [9, 10]];
        assert_eq!(
            clean_document(text, &matches, &cut(0, 5, 10), none),
            Outcome::Cut {
                text: "abcdefghij".into(),
                removed: vec![[0, 10]],
                pieces: 1
            }
        );
        assert_eq!(
            clean_document(text, &matches, &cut(0, 1, 2), none),
            Outcome::Dropped {
                reason: DropReason::TooManyPieces,
                removed: vec![[4, 5], [9, 10]]
            }
        );
        assert_eq!(
            clean_document(text, &matches, &cut(0, 11, 10), none),
            Outcome::Dropped {
                reason: DropReason::NothingLeft,
                removed: vec![[0, 20]]
            }
        );
    }

    #[test]
    fn ranges_are_code_points_not_bytes() {
        let text = "ΣΣΣ İİİ 😀😀😀";
        // Cut "İİİ" (code points 4..7) with one on each side.
        assert_eq!(
            clean_document(text, &[[4, 7]], &cut(1, 1, 10), none),
            Outcome::Cut {
                text: "ΣΣΣ\n😀😀😀".into(),
                removed: vec![[3, 8]],
                pieces: 2
            }
        );
    }

    #[test]
    fn pieces_lose_the_separators_at_their_ends() {
        let separates = |c: char| TokenizerKind::Default.separates(c);
        // "one, two - three ." with "two" matched: the pieces "one, " and " - three ."
        // become "one" and "three".
        let text = "one, two - three .";
        assert_eq!(
            clean_document(text, &[[5, 8]], &cut(0, 1, 10), separates),
            Outcome::Cut {
                text: "one\nthree".into(),
                removed: vec![[3, 11], [16, 18]],
                pieces: 2
            }
        );
        // A piece of separators only is no piece.
        assert_eq!(
            clean_document(" ;; x ;; ", &[[4, 5]], &cut(0, 1, 10), separates),
            Outcome::Dropped {
                reason: DropReason::NothingLeft,
                removed: vec![[0, 9]]
            }
        );
    }
}
