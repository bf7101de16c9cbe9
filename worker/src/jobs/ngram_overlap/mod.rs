//! The train/test n-gram overlap job (in progress): which training documents share
//! n-grams with which eval instances, with full provenance.
//!
//! * [`tokenize`]: the tokenizers, with Python's `str.lower()` and `\s` semantics
//!   exactly, each token with its span in the original text.

pub mod records;
pub mod tokenize;
