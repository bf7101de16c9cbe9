//! The overlap job's tokenizers, with Python's semantics exactly.
//!
//! The reference is the old `DefaultTokenizer` of the decontamination pipeline:
//!
//! ```python
//! re.split(rf"[\s{re.escape(string.punctuation)}]+", text.lower())   # empty strings kept
//! ```
//!
//! Every character property used here comes from one Unicode version, Python 3.11's
//! (Unicode 14.0), through the tables of [`super::python_unicode`], generated from that
//! Python: never from Rust's own tables, which follow a later Unicode and differ from
//! Python's in what they lowercase, in what `\s` matches (U+001C–U+001F) and in which
//! letters are cased and which marks case-ignorable:
//! * [`python_lower_char`]: `str.lower()` of one character (`İ` gives two);
//! * [`python_isspace`]: `str.isspace()`, what `\s` matches;
//! * [`lower_sigma`]: the capital sigma's form, which depends on its neighbours
//!   (final `ς` after a cased letter and not before one, case-ignorables skipped),
//!   exactly as CPython decides it.
//!
//! Lowering can change a text's length, which is why every token also carries its span
//! in the *original* text.
//!
//! Every token knows the code-point range `[start, end)` of the original text it came
//! from, so overlap offsets point into what the user wrote, not into the lowered copy.
//! `tests/fixtures/python_text.json`, written by Python itself, is the reference the
//! unit tests check every code point and a set of texts against.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::python_unicode::{CASED, CASE_IGNORABLE, LOWER, SPACE};

/// Which tokenizer a job uses (`tokenizer` in the job file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenizerKind {
    /// The old `DefaultTokenizer`: lowercase, split on runs of whitespace and ASCII
    /// punctuation, empty tokens kept (as `re.split` returns them).
    #[default]
    Default,
    /// The same split without lowercasing.
    NoLowercase,
    /// Python's `text.split()`: runs of whitespace, no empty tokens, case kept.
    Whitespace,
}

/// One token: its text and the code points of the original text it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub text: String,
    pub span: Range<usize>,
}

/// Python's `str.isspace()` (what `\s` matches in a `str` pattern).
pub fn python_isspace(c: char) -> bool {
    SPACE.binary_search(&(c as u32)).is_ok()
}

/// A character of `string.punctuation`.
fn ascii_punctuation(c: char) -> bool {
    c.is_ascii_punctuation()
}

/// Python's `text.lower()`, each resulting character with the index of the original
/// character (code point) it came from.
pub fn python_lower(text: &str) -> Vec<(char, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::with_capacity(chars.len());
    for (i, &c) in chars.iter().enumerate() {
        if c == CONTEXT_LOWERED {
            out.push((lower_sigma(&chars, i), i));
        } else {
            out.extend(python_lower_char(c).map(|l| (l, i)));
        }
    }
    out
}

/// Python's lowercase of `c` alone: what `str.lower()` gives for every character
/// but the capital sigma, whose lowercase depends on its neighbours
/// ([`lower_sigma`]).
pub fn python_lower_char(c: char) -> impl Iterator<Item = char> {
    let (first, second) = match LOWER.binary_search_by_key(&(c as u32), |&(from, _, _)| from) {
        Ok(i) => {
            let (_, first, second) = LOWER[i];
            (
                char::from_u32(first).unwrap_or(c),
                char::from_u32(second).filter(|&s| s != '\0'),
            )
        }
        Err(_) => (c, None),
    };
    std::iter::once(first).chain(second)
}

/// The lowercase `str.lower()` gives the capital sigma at `chars[at]`: final `ς` when
/// the nearest character before it that is not case-ignorable is cased, and the
/// nearest after it that is not case-ignorable is not cased (or there is none); else
/// `σ` (CPython's `handle_capital_sigma`).
pub fn lower_sigma(chars: &[char], at: usize) -> char {
    let before = chars[..at].iter().rev().find(|&&c| !case_ignorable(c));
    let after = chars
        .get(at + 1..)
        .and_then(|rest| rest.iter().find(|&&c| !case_ignorable(c)));
    let is_final = before.is_some_and(|&c| cased(c)) && !after.is_some_and(|&c| cased(c));
    if is_final {
        'ς'
    } else {
        'σ'
    }
}

/// Whether the final-sigma rule counts `c` as a cased letter (it asks only of a
/// character that is not case-ignorable).
fn cased(c: char) -> bool {
    in_ranges(&CASED, c)
}

/// Whether the final-sigma rule skips `c`.
fn case_ignorable(c: char) -> bool {
    in_ranges(&CASE_IGNORABLE, c)
}

fn in_ranges(ranges: &[(u32, u32)], c: char) -> bool {
    let c = c as u32;
    ranges
        .binary_search_by(|&(first, last)| {
            if last < c {
                std::cmp::Ordering::Less
            } else if first > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// The one character whose lowercase depends on its neighbours (final `ς` or `σ`).
pub const CONTEXT_LOWERED: char = 'Σ';

/// Splits `chars` (each with its source index) at maximal runs of separators, as
/// `re.split` does with a `[…]+` pattern: the pieces between runs, empty ones included.
fn split_runs(chars: &[(char, usize)], separator: impl Fn(char) -> bool, end: usize) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut text = String::new();
    let mut span: Option<Range<usize>> = None;
    // Where the current piece starts in the original text (for empty pieces).
    let mut piece_start = 0;
    let mut in_run = false;
    let mut close = |text: &mut String, span: &mut Option<Range<usize>>, at: usize| {
        let s = span.take().unwrap_or(at..at);
        tokens.push(Token {
            text: std::mem::take(text),
            span: s,
        });
    };
    for &(c, src) in chars {
        if separator(c) {
            if !in_run {
                close(&mut text, &mut span, piece_start);
                in_run = true;
            }
        } else {
            if in_run {
                in_run = false;
                piece_start = src;
            }
            text.push(c);
            span = Some(match span {
                None => src..src + 1,
                Some(s) => s.start..src + 1,
            });
        }
    }
    if in_run {
        piece_start = end;
    }
    close(&mut text, &mut span, piece_start);
    tokens
}

impl TokenizerKind {
    /// Whether `c` (of the lowered text, for [`TokenizerKind::Default`]) separates
    /// tokens.
    pub fn separates(self, c: char) -> bool {
        match self {
            TokenizerKind::Whitespace => python_isspace(c),
            TokenizerKind::Default | TokenizerKind::NoLowercase => {
                python_isspace(c) || ascii_punctuation(c)
            }
        }
    }

    /// The tokens of `text`.
    pub fn tokenize(self, text: &str) -> Vec<Token> {
        let end = text.chars().count();
        let separator = |c: char| self.separates(c);
        match self {
            TokenizerKind::Default => split_runs(&python_lower(text), separator, end),
            TokenizerKind::NoLowercase => {
                let chars: Vec<(char, usize)> = text.chars().zip(0..).collect();
                split_runs(&chars, separator, end)
            }
            TokenizerKind::Whitespace => {
                let chars: Vec<(char, usize)> = text.chars().zip(0..).collect();
                split_runs(&chars, python_isspace, end)
                    .into_iter()
                    .filter(|t| !t.text.is_empty())
                    .collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(Deserialize)]
    struct Case {
        text: String,
        tokens: Vec<String>,
    }

    #[derive(Deserialize)]
    struct Reference {
        unicode: String,
        lower: BTreeMap<String, Vec<u32>>,
        space: Vec<u32>,
        cased: Vec<(u32, u32)>,
        case_ignorable: Vec<(u32, u32)>,
        cases: Vec<Case>,
    }

    fn reference() -> Reference {
        serde_json::from_str(include_str!("../../../tests/fixtures/python_text.json")).unwrap()
    }

    fn all_chars() -> impl Iterator<Item = char> {
        (0..0x110000u32).filter_map(char::from_u32)
    }

    #[test]
    fn lowercasing_matches_python_for_every_code_point() {
        let r = reference();
        assert_eq!(r.unicode, "14.0.0");
        assert_eq!(r.unicode, super::super::python_unicode::UNICODE_VERSION);
        for c in all_chars() {
            let got: Vec<u32> = python_lower(&c.to_string())
                .iter()
                .map(|&(l, _)| l as u32)
                .collect();
            let want = r
                .lower
                .get(&format!("{:x}", c as u32))
                .cloned()
                .unwrap_or_else(|| vec![c as u32]);
            assert_eq!(got, want, "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn a_character_lowered_alone_is_lowered_as_in_a_text_but_the_capital_sigma() {
        for c in all_chars() {
            let alone: Vec<char> = python_lower_char(c).collect();
            let in_text: Vec<char> = python_lower(&c.to_string())
                .iter()
                .map(|&(l, _)| l)
                .collect();
            assert_eq!(alone, in_text, "U+{:04X}", c as u32);
            // At the end of a word (where a sigma is final).
            let in_word: Vec<char> = python_lower(&format!("a{c}"))
                .iter()
                .filter(|&&(_, at)| at == 1)
                .map(|&(l, _)| l)
                .collect();
            if c == CONTEXT_LOWERED {
                assert_ne!(alone, in_word);
            } else {
                assert_eq!(alone, in_word, "U+{:04X}", c as u32);
            }
        }
    }

    #[test]
    fn the_final_sigma_rule_matches_python_for_every_code_point() {
        let r = reference();
        let within = |ranges: &[(u32, u32)], c: char| {
            ranges.iter().any(|&(a, b)| (a..=b).contains(&(c as u32)))
        };
        let lower_last = |text: &[char]| {
            let lowered = python_lower(&text.iter().collect::<String>());
            lowered.last().map(|&(l, _)| l)
        };
        let (mut cased, mut ignorable) = (0, 0);
        for c in all_chars() {
            let (is_cased, is_ignorable) = (within(&r.cased, c), within(&r.case_ignorable, c));
            cased += usize::from(is_cased);
            ignorable += usize::from(is_ignorable);
            // Python: `a<c>Σ` ends in ς for both kinds, `<c>Σ` for a cased c only.
            let after_letter = lower_last(&['a', c, CONTEXT_LOWERED]) == Some('ς');
            let alone = lower_last(&[c, CONTEXT_LOWERED]) == Some('ς');
            assert_eq!(alone, is_cased, "U+{:04X}", c as u32);
            assert_eq!(after_letter, is_cased || is_ignorable, "U+{:04X}", c as u32);
            // After the sigma: a cased letter keeps it from being final, an ignorable
            // character is skipped.
            let chars = ['a', CONTEXT_LOWERED, c];
            let sigma = python_lower(&chars.iter().collect::<String>())
                .iter()
                .find(|&&(_, at)| at == 1)
                .map(|&(l, _)| l);
            let want = if is_cased { 'σ' } else { 'ς' };
            assert_eq!(sigma, Some(want), "U+{:04X}", c as u32);
        }
        assert!(cased > 2_000 && ignorable > 2_000, "{cased} {ignorable}");
    }

    #[test]
    fn whitespace_matches_python_for_every_code_point() {
        let r = reference();
        let got: Vec<u32> = all_chars()
            .filter(|&c| python_isspace(c))
            .map(|c| c as u32)
            .collect();
        assert_eq!(got, r.space);
    }

    #[test]
    fn default_tokens_match_python() {
        for case in reference().cases {
            let got: Vec<String> = TokenizerKind::Default
                .tokenize(&case.text)
                .into_iter()
                .map(|t| t.text)
                .collect();
            assert_eq!(got, case.tokens, "{:?}", case.text);
        }
    }

    #[test]
    fn spans_point_into_the_original_text() {
        let text = "İi, ΟΔΟΣ!";
        let tokens = TokenizerKind::Default.tokenize(text);
        let original: Vec<char> = text.chars().collect();
        let spans: Vec<(String, String)> = tokens
            .iter()
            .map(|t| (t.text.clone(), original[t.span.clone()].iter().collect()))
            .collect();
        assert_eq!(
            spans,
            vec![
                ("i\u{307}i".to_string(), "İi".to_string()),
                ("οδος".to_string(), "ΟΔΟΣ".to_string()),
                (String::new(), String::new()),
            ]
        );
        // Empty pieces sit where they are: at the start, and at the end.
        let t = TokenizerKind::Default.tokenize(" a ");
        assert_eq!(
            t.iter().map(|t| t.span.clone()).collect::<Vec<_>>(),
            vec![0..0, 1..2, 3..3]
        );
    }

    #[test]
    fn the_other_tokenizers() {
        let texts = |kind: TokenizerKind, text: &str| -> Vec<String> {
            kind.tokenize(text).into_iter().map(|t| t.text).collect()
        };
        assert_eq!(
            texts(TokenizerKind::NoLowercase, "Hello, World"),
            ["Hello", "World"]
        );
        assert_eq!(
            texts(TokenizerKind::Whitespace, "  Hello,  World\x1c! "),
            ["Hello,", "World", "!"]
        );
        assert_eq!(texts(TokenizerKind::Whitespace, ""), Vec::<String>::new());
    }
}
