//! The n-gram tests: every fast path against its readable reference.

use super::super::tokenize::{TokenizerKind, CONTEXT_LOWERED};
use super::{ascii::*, eval::*, hash::*, scan_tokens::*};

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
fn assert_cut_as_the_tokenizer(fast: &ScanTokens, kind: TokenizerKind, text: &str) -> Vec<String> {
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
