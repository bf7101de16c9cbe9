//! Triage of hot n-grams (`[triage]`): every matched n-gram counted (the training
//! documents and the eval rows it is found in), the hot ones (over a limit) listed in
//! `stats/hot_ngrams.jsonl`.
//!
//! ```text
//! scans' events (+ hot windows) ─► each candidate decided against its eval row
//!   ─► per (effective length, text): training documents, eval rows
//!   ─► over max_train_docs / max_eval_rows: hot ─► stats/hot_ngrams.jsonl
//! ```
//!
//! The report runs it between its two passes, so that with `exclude` a hot n-gram's
//! matches are left out of every output it writes.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::protocol::{OutputFile, ReportTask, Triage, HOT};
use super::report::{read_docs, EvalRows};
use super::tokenize::Token;
use probeflow_engine::error::{EngineError, Result};
use probeflow_engine::store::StoreUrl;

/// Per effective length, per matched n-gram: the training documents and the eval rows
/// it is found in.
pub(super) type MatchCounts = HashMap<u32, HashMap<String, (u64, u64)>>;

/// Every candidate decided, and each matched n-gram counted: in how many training
/// documents, and in how many eval rows. An n-gram's window key is in one index group,
/// so a document's events for it are in one of its lines; and every document that
/// has it is a candidate of every eval row that has it, so each document's events
/// name all those rows. A scan's hot window (more eval rows than `max_eval_rows`, with
/// `exclude`) is checked against its first eval row and counts the rows with its key.
pub(super) fn count_matches(
    handle: &tokio::runtime::Handle,
    task: &ReportTask,
    output: &StoreUrl,
    eval_rows: &EvalRows<'_>,
) -> Result<MatchCounts> {
    let mut counts = MatchCounts::new();
    for (train_path, events_files) in task.train.iter().zip(&task.events) {
        let docs = read_docs(handle, output, events_files)?;
        let mut tokens: HashMap<(u32, u64), Vec<Token>> = HashMap::new();
        for doc in &docs {
            // This document's n-grams, each with its eval rows.
            let mut mine: BTreeMap<(u32, &str), u64> = BTreeMap::new();
            for e in &doc.events {
                if eval_rows.decide(&mut tokens, train_path, e)?.is_some() {
                    *mine.entry((e.n, e.ngram.as_str())).or_default() += 1;
                }
            }
            // A hot window: checked against the first eval row with its key; its eval
            // rows are those with the key.
            for w in &doc.hot {
                let first = (w.eval_file, w.eval_row);
                if eval_rows
                    .decide_window(&mut tokens, train_path, first, w.n, &w.ngram)?
                    .is_some()
                {
                    let rows = mine.entry((w.n, w.ngram.as_str())).or_default();
                    *rows = (*rows).max(w.eval_rows);
                } else {
                    // Its key is the key of another n-gram of the first row: which rows
                    // have the window's own n-gram is not known here.
                    tracing::warn!(
                        train_path = %train_path,
                        train_row = doc.train_row,
                        ngram = %w.ngram,
                        "a hot window's 64-bit key is also another n-gram's: the window is not counted"
                    );
                }
            }
            for ((n, ngram), rows) in mine {
                let of_n = counts.entry(n).or_default();
                let count = match of_n.get_mut(ngram) {
                    Some(count) => count,
                    None => of_n.entry(ngram.to_string()).or_default(),
                };
                count.0 += 1;
                count.1 = count.1.max(rows);
            }
        }
    }
    Ok(counts)
}

/// One line of `stats/hot_ngrams.jsonl`.
#[derive(Debug, Serialize)]
struct HotRecord<'a> {
    n: u32,
    ngram: &'a str,
    train_docs: u64,
    eval_rows: u64,
    hot_by: &'a [&'static str],
    excluded: bool,
}

/// A hot n-gram's training documents, eval rows, and the limits it is over.
type HotCounts = (u64, u64, Vec<&'static str>);

/// The hot n-grams by effective length and text.
#[derive(Default)]
pub(super) struct HotNgrams {
    by_length: HashMap<u32, HashMap<String, HotCounts>>,
}

impl HotNgrams {
    pub(super) fn of(counts: &MatchCounts, triage: &Triage) -> HotNgrams {
        let mut by_length: HashMap<u32, HashMap<String, _>> = HashMap::new();
        for (&n, of_n) in counts {
            for (ngram, &(docs, rows)) in of_n {
                let by = triage.hot_by(docs, rows);
                if !by.is_empty() {
                    by_length
                        .entry(n)
                        .or_default()
                        .insert(ngram.clone(), (docs, rows, by));
                }
            }
        }
        HotNgrams { by_length }
    }

    pub(super) fn contains(&self, n: u32, ngram: &str) -> bool {
        self.by_length
            .get(&n)
            .is_some_and(|texts| texts.contains_key(ngram))
    }

    /// How many n-grams are hot.
    pub(super) fn len(&self) -> usize {
        self.by_length.values().map(HashMap::len).sum()
    }

    /// `stats/hot_ngrams.jsonl`, in (length, text) order.
    pub(super) fn write(
        &self,
        handle: &tokio::runtime::Handle,
        output: &StoreUrl,
        triage: &Triage,
    ) -> Result<OutputFile> {
        let mut sorted: Vec<(u32, &String, &HotCounts)> = self
            .by_length
            .iter()
            .flat_map(|(&n, texts)| texts.iter().map(move |(ngram, c)| (n, ngram, c)))
            .collect();
        sorted.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        let mut text = Vec::new();
        for (n, ngram, (train_docs, eval_rows, hot_by)) in sorted {
            let record = HotRecord {
                n,
                ngram,
                train_docs: *train_docs,
                eval_rows: *eval_rows,
                hot_by,
                excluded: triage.exclude,
            };
            serde_json::to_writer(&mut text, &record)
                .map_err(|e| EngineError::Internal(format!("a hot n-gram record: {e}")))?;
            text.push(b'\n');
        }
        let file = OutputFile {
            path: HOT.into(),
            bytes: text.len() as u64,
            blake3: blake3::hash(&text).to_hex().to_string(),
        };
        handle.block_on(output.put(&output.child(HOT), text))?;
        Ok(file)
    }
}
