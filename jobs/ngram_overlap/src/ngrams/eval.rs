//! The eval side: an eval row's n-gram of a given effective length, found by
//! comparing its tokens with a training window's text.

#[cfg(test)]
use std::collections::BTreeMap;

use super::super::tokenize::Token;

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
pub(super) fn window_is(window: &[Token], text: &str) -> bool {
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
pub(super) fn join(tokens: &[Token]) -> String {
    let mut s = String::with_capacity(tokens.iter().map(|t| t.text.len() + 1).sum());
    for (k, t) in tokens.iter().enumerate() {
        if k > 0 {
            s.push(' ');
        }
        s.push_str(&t.text);
    }
    s
}
