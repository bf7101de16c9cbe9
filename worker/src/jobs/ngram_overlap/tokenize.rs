//! The overlap job's tokenizers, with Python's semantics exactly.
//!
//! The reference is the old `DefaultTokenizer` of the decontamination pipeline:
//!
//! ```python
//! re.split(rf"[\s{re.escape(string.punctuation)}]+", text.lower())   # empty strings kept
//! ```
//!
//! Rust's defaults differ from Python's in three places, all handled here:
//! * `\s` (Python: `str.isspace()`) also matches U+001C–U+001F, which Rust's
//!   `char::is_whitespace` does not;
//! * `str.lower()` follows Python 3.11's Unicode 14.0: characters that later Unicode
//!   versions (Rust's) give a lowercase form are left as they are ([`PYTHON_UNCASED`]);
//! * both lowercase a capital sigma by context (final `ς`) and `İ` to two characters,
//!   which is why every token also carries its span in the *original* text.
//!
//! Every token knows the code-point range `[start, end)` of the original text it came
//! from, so overlap offsets point into what the user wrote, not into the lowered copy.
//! `tests/fixtures/python_text.json`, written by Python itself, is the reference the
//! unit tests check every code point and a set of texts against.

use std::ops::Range;

use serde::{Deserialize, Serialize};

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

/// Characters Rust lowercases but Python 3.11 (Unicode 14.0) leaves as they are:
/// letters of later Unicode versions. Sorted, for binary search.
pub const PYTHON_UNCASED: [u32; 55] = [
    0x1c89, 0xa7cb, 0xa7cc, 0xa7ce, 0xa7d2, 0xa7d4, 0xa7da, 0xa7dc, 0x10d50, 0x10d51, 0x10d52,
    0x10d53, 0x10d54, 0x10d55, 0x10d56, 0x10d57, 0x10d58, 0x10d59, 0x10d5a, 0x10d5b, 0x10d5c,
    0x10d5d, 0x10d5e, 0x10d5f, 0x10d60, 0x10d61, 0x10d62, 0x10d63, 0x10d64, 0x10d65, 0x16ea0,
    0x16ea1, 0x16ea2, 0x16ea3, 0x16ea4, 0x16ea5, 0x16ea6, 0x16ea7, 0x16ea8, 0x16ea9, 0x16eaa,
    0x16eab, 0x16eac, 0x16ead, 0x16eae, 0x16eaf, 0x16eb0, 0x16eb1, 0x16eb2, 0x16eb3, 0x16eb4,
    0x16eb5, 0x16eb6, 0x16eb7, 0x16eb8,
];

/// Python's `str.isspace()` (what `\s` matches in a `str` pattern).
pub fn python_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// A character of `string.punctuation`.
fn ascii_punctuation(c: char) -> bool {
    c.is_ascii_punctuation()
}

/// Python's `text.lower()`, each resulting character with the index of the original
/// character (code point) it came from.
pub fn python_lower(text: &str) -> Vec<(char, usize)> {
    // The whole-string lowering applies the final-sigma rule; lowering each character
    // alone gives the same number of characters per source character.
    let whole: Vec<char> = text.to_lowercase().chars().collect();
    let mut out = Vec::with_capacity(whole.len());
    let mut k = 0;
    for (i, c) in text.chars().enumerate() {
        let n = c.to_lowercase().count();
        if PYTHON_UNCASED.binary_search(&(c as u32)).is_ok() {
            out.push((c, i));
        } else {
            out.extend(whole[k..k + n].iter().map(|&l| (l, i)));
        }
        k += n;
    }
    out
}

/// Python's lowercase of `c` alone: what `str.lower()` gives for every character
/// but the capital sigma, whose lowercase depends on its neighbours (see
/// [`python_lower`], [`CONTEXT_LOWERED`]).
pub fn python_lower_char(c: char) -> impl Iterator<Item = char> {
    let uncased = PYTHON_UNCASED.binary_search(&(c as u32)).is_ok();
    let (kept, lowered) = if uncased {
        (Some(c), None)
    } else {
        (None, Some(c.to_lowercase()))
    };
    kept.into_iter().chain(lowered.into_iter().flatten())
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
        cases: Vec<Case>,
    }

    fn reference() -> Reference {
        serde_json::from_str(include_str!("../../../../tests/fixtures/python_text.json")).unwrap()
    }

    fn all_chars() -> impl Iterator<Item = char> {
        (0..0x110000u32).filter_map(char::from_u32)
    }

    #[test]
    fn lowercasing_matches_python_for_every_code_point() {
        let r = reference();
        assert_eq!(r.unicode, "14.0.0");
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
