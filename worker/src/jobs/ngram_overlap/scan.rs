//! The scan task: one training file streamed past one group of index partitions.
//!
//! The group's entries are loaded into an [`Index`] (its size is what the planner
//! bounds with `[index] memory`; a worker keeps it for its next scan of the same
//! group); the file is read record by record, and held whole only when it is a
//! `.jsonl.gz` file small enough ([`super::whole_gzip`]). For each document, every window of every effective length the index holds is
//! looked up; only a document with a match is given its id and written out, as one
//! [`ScanDoc`] line: its text once, and one [`ScanEvent`] per (eval row, n-gram) it
//! shares, with every occurrence on both sides. The training n-gram stream itself is
//! never stored or shuffled.
//!
//! Documents go to one gzip JSONL file per attempt, streamed out as they come, in
//! training row order (their events in (eval file, eval row, length, n-gram) order).

use super::gzip_jsonl::{GzipJsonl, Packing};
use super::ngrams::{Index, ScanTokens};
use super::protocol::{
    events_path, rejects_path, ScanDoc, ScanEvent, ScanOutput, ScanTask, Settings,
};
use super::source::{read_records, WholeFiles};
use crate::engine::store::StoreUrl;
use crate::error::Result;
use std::collections::BTreeMap;

/// Runs scan task `task` with its index group `index` (loaded by
/// [`super::index::load_index`]) on a blocking thread (call through `spawn_blocking`).
pub fn run_scan(
    handle: &tokio::runtime::Handle,
    task: &ScanTask,
    index: &Index,
    output: &StoreUrl,
    settings: &Settings,
    attempt: u32,
    whole: &mut WholeFiles,
) -> Result<ScanOutput> {
    let events_file = events_path(task.index, attempt);
    let mut events_out = GzipJsonl::new(output, &events_file, Packing::Intermediate);
    let mut doc = ScanTokens::default();
    let mut ngrams = 0u64;
    let mut events = 0u64;
    let mut text_bytes = 0u64;
    // A file's rejected rows are written once, by its first group's scan.
    let rejects = rejects_path("train", task.train_file);
    let rejects = (task.group == 0).then_some(rejects.as_str());
    let counts = read_records(
        handle,
        &task.file,
        &settings.train_text_field,
        whole,
        output,
        rejects,
        |mut record| {
            text_bytes += record.text.len() as u64;
            if index.is_empty() {
                return Ok(());
            }
            doc.fill(settings.tokenizer, record.text);
            let mut found: BTreeMap<u32, Vec<[u64; 2]>> = BTreeMap::new();
            for &n in &task.lengths {
                ngrams += (doc.len() + 1).saturating_sub(n as usize) as u64;
            }
            index.each_match(&doc, |e, i, n| {
                found.entry(e).or_default().push(doc.offsets(i, n));
            });
            if found.is_empty() {
                return Ok(());
            }
            let id = record.id()?;
            let matched = ScanDoc {
                train_row: record.row,
                train_doc_id: id.as_str(),
                train_text: record.text,
                events: document_events(index, &found),
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

/// The events of one training document: for each matched entry, one per eval row it
/// occurs in; sorted by (eval file, eval row, length, n-gram).
fn document_events(index: &Index, found: &BTreeMap<u32, Vec<[u64; 2]>>) -> Vec<ScanEvent> {
    let mut out = Vec::new();
    for (&e, train_offsets) in found {
        let entry = &index.entries[e as usize];
        for occ in &entry.occurrences {
            out.push(ScanEvent {
                eval_file: occ.eval_file,
                eval_row: occ.eval_row,
                n: entry.n,
                ngram: entry.ngram.clone(),
                configured: occ.configured,
                eval_offsets: occ.offsets.clone(),
                train_offsets: train_offsets.clone(),
            });
        }
    }
    out.sort_by(|a, b| {
        (a.eval_file, a.eval_row, a.n, &a.ngram).cmp(&(b.eval_file, b.eval_row, b.n, &b.ngram))
    });
    out
}
