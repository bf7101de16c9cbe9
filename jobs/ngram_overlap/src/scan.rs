//! The scan task: one training file streamed past one group of index partitions.
//!
//! The group's postings are loaded into an [`NgramIndex`] (its size is what the
//! planner bounds with `[index] memory`; a worker keeps it for its next scan of the
//! same group); the file is read record by record, and held whole only when it is a
//! `.jsonl.gz` file small enough ([`super::whole_gzip`]). For each document, every
//! window of every effective length the index holds is looked up by its key; only a
//! document with a candidate is given its id and written out, as one [`ScanDoc`] line:
//! its text once, and one [`ScanEvent`] per (eval row, length, window text) whose key
//! matched, with every occurrence in the document (with `[triage] exclude = true` and
//! `max_eval_rows`, a window whose key more eval rows have is one [`HotWindow`]
//! instead: a template in many eval rows and many documents would otherwise make
//! rows × documents events). The report decides each candidate
//! against its eval row's text. The training n-gram stream itself is never stored or
//! shuffled.
//!
//! Documents go to one gzip JSONL file per attempt, streamed out as they come, in
//! training row order (their events in (eval file, eval row, length, n-gram) order).

use super::gzip_jsonl::{GzipJsonl, Packing};
use super::index::row_bases;
use super::ngram_index::{MatchScratch, NgramIndex};
use super::ngrams::ScanTokens;
use super::protocol::{
    events_path, rejects_path, HotWindow, ScanDoc, ScanEvent, ScanOutput, ScanTask, Settings,
};
use super::source::{read_records, WholeFiles};
use probeflow_engine::error::Result;
use probeflow_engine::store::StoreUrl;
use std::collections::BTreeMap;

/// Runs scan task `task` with its index group `index` (loaded by
/// [`super::index::load_index`]) on a blocking thread (call through `spawn_blocking`).
pub fn run_scan(
    handle: &tokio::runtime::Handle,
    task: &ScanTask,
    index: &NgramIndex,
    output: &StoreUrl,
    settings: &Settings,
    attempt: u32,
    whole: &mut WholeFiles,
) -> Result<ScanOutput> {
    let events_file = events_path(task.index, attempt);
    let mut events_out = GzipJsonl::new(output, &events_file, Packing::Intermediate);
    let mut doc = ScanTokens::default();
    let mut scratch = MatchScratch::default();
    let bases = row_bases(&task.eval_rows)?;
    let mut hits: Vec<(u32, usize, usize)> = Vec::new();
    let mut hot_hits: Vec<(u32, u64, usize, usize)> = Vec::new();
    let cutoff = settings.triage.and_then(|t| t.scan_cutoff());
    let mut ngrams = 0u64;
    let mut events = 0u64;
    let mut text_bytes = 0u64;
    // A file's rejected rows are written once, by its first group's scan.
    let rejects = rejects_path("train", task.train_file);
    let rejects = (task.group == 0).then_some(rejects.as_str());
    let counts = read_records(
        handle,
        &task.file,
        settings.train_side(),
        whole,
        output,
        rejects,
        |mut record| {
            text_bytes += record.text.len() as u64;
            if index.is_empty() {
                return Ok(());
            }
            doc.fill(settings.tokenizer, record.text);
            for &n in &task.lengths {
                ngrams += (doc.len() + 1).saturating_sub(n as usize) as u64;
            }
            hits.clear();
            hot_hits.clear();
            index.each_match(&doc, &mut scratch, |i, n, rows| match cutoff {
                Some(max) if rows.len() as u64 > max => {
                    hot_hits.push((rows[0], rows.len() as u64, i, n));
                }
                _ => hits.extend(rows.iter().map(|&row| (row, i, n))),
            });
            if hits.is_empty() && hot_hits.is_empty() {
                return Ok(());
            }
            let id = record.id()?;
            let matched = ScanDoc {
                train_row: record.row,
                train_doc_id: id.as_str(),
                train_text: record.text,
                events: document_events(&doc, &bases, &hits),
                hot: hot_windows(&doc, &bases, &hot_hits),
            };
            events += matched.events.len() as u64;
            events_out.line(handle, &matched)
        },
    )?;
    events_out.finish(handle)?;
    Ok(ScanOutput {
        train_file: task.train_file,
        group: task.group,
        events_file,
        counts,
        ngrams,
        events,
        text_bytes,
    })
}

/// The eval file and its row of global eval row `global`.
fn eval_row_of(bases: &[u32], global: u32) -> (u32, u64) {
    // The last file whose first row is at most it.
    let file = bases.partition_point(|&b| b <= global).saturating_sub(1);
    let row = u64::from(global - bases.get(file).copied().unwrap_or(0));
    (file as u32, row)
}

/// The hot windows of one training document from its `hot_hits` (first global eval
/// row, eval rows, window start, length): one per (length, text), in that order.
fn hot_windows(
    doc: &ScanTokens,
    bases: &[u32],
    hot_hits: &[(u32, u64, usize, usize)],
) -> Vec<HotWindow> {
    let mut windows: BTreeMap<(u32, String), (u32, u64)> = BTreeMap::new();
    for &(first, rows, i, n) in hot_hits {
        windows
            .entry((n as u32, doc.window_text(i, n)))
            .or_insert((first, rows));
    }
    windows
        .into_iter()
        .map(|((n, ngram), (first, eval_rows))| {
            let (eval_file, eval_row) = eval_row_of(bases, first);
            HotWindow {
                eval_file,
                eval_row,
                eval_rows,
                n,
                ngram,
            }
        })
        .collect()
}

/// The candidate events of one training document from its `hits` (global eval row,
/// window start, length; in window order): one per (eval row, length, window text),
/// with the window's occurrences in order, sorted by (eval file, eval row, length,
/// text).
fn document_events(
    doc: &ScanTokens,
    bases: &[u32],
    hits: &[(u32, usize, usize)],
) -> Vec<ScanEvent> {
    let mut events: BTreeMap<(u32, u64, u32, String), Vec<[u64; 2]>> = BTreeMap::new();
    for &(global, i, n) in hits {
        let (file, row) = eval_row_of(bases, global);
        events
            .entry((file, row, n as u32, doc.window_text(i, n)))
            .or_default()
            .push(doc.offsets(i, n));
    }
    events
        .into_iter()
        .map(
            |((eval_file, eval_row, n, ngram), train_offsets)| ScanEvent {
                eval_file,
                eval_row,
                n,
                ngram,
                train_offsets,
            },
        )
        .collect()
}
