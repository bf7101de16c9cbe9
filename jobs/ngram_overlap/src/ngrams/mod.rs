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
//!
//! * `eval`: the eval side; `scan_tokens`: the training side's tokens and window
//!   keys; `hash`: token hashes and window keys; `ascii`: 64 bytes classified at once.

mod ascii;
mod eval;
mod hash;
mod scan_tokens;

pub use eval::{eval_ngram, EvalNgram};
pub use scan_tokens::ScanTokens;

#[cfg(test)]
mod tests;
