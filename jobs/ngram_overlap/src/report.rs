//! The report task: every scan's events → the job's outputs.
//!
//! * `stats/overlap_details.jsonl.gz`: one record per (eval row, training row, n-gram),
//!   in (training file, training row, eval file, eval row, length, n-gram) order;
//! * `stats/overlap_stats.jsonl`: per eval dataset and configured `n` (sorted), the
//!   dataset's instance count and the sorted ids of its overlapping instances;
//! * `tmp/overlap_instances-<t>-of-<T>.jsonl.gz`, one per training file: per training
//!   row, eval dataset and configured `n`, the instances it overlaps;
//! * with `[triage]`, `stats/hot_ngrams.jsonl`: the matched n-grams found in more
//!   training documents or eval rows than its limits, which (with `exclude`) count in
//!   neither of the two files above.
//!
//! Two passes over the events: the first finds the eval rows with candidates, whose
//! ids and texts alone are then read from the eval files themselves (pinned: a file
//! changed since its index task read it is refused); the second decides each
//! candidate against its eval row (re-tokenized: the row must have an n-gram of that
//! length and text, which gives its offsets and the configured lengths it stands for)
//! and writes the records a training file at a time. A candidate whose text is not the eval row's (two n-grams
//! with one 64-bit window key) is dropped and counted. With
//! `[triage]`, a pass between the two decides every candidate and counts each matched
//! n-gram's training documents and eval rows, so the hot ones are known before pass 2.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::cleaning::{DocMatches, Outcome};
use super::gzip_jsonl::{GzipJsonl, Packing};
use super::index::load_index;
use super::ngram_index::{MatchScratch, NgramIndex};
use super::ngrams::ScanTokens;
use super::ngrams::{eval_ngram, EvalNgram};
use super::protocol::{
    edits_path, instances_path, EvalFile, IndexGroups, OutputFile, ReportOutput, ReportTask,
    ScanDoc, ScanEvent, Settings, CLEAN_MANIFEST, DETAILS, STATS,
};
use super::source::{read_gz_lines, read_records, WholeFiles};
use super::tokenize::Token;
use super::triage::{self, HotNgrams};
use probeflow_engine::error::{EngineError, Result};
use probeflow_engine::store::StoreUrl;

/// One line of `stats/overlap_details.jsonl.gz`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct DetailRecord<'a> {
    pub eval_dataset: &'a str,
    pub eval_path: &'a str,
    pub eval_row: u64,
    pub instance_id: &'a str,
    pub eval_text: &'a str,
    pub ngram: &'a str,
    pub eval_offsets: &'a [[u64; 2]],
    /// The effective length.
    pub n: u32,
    pub train_path: &'a str,
    pub train_row: u64,
    pub train_text: &'a str,
    pub train_ngram: &'a str,
    pub train_offsets: &'a [[u64; 2]],
    pub train_doc_id: &'a str,
}

/// One line of `stats/overlap_stats.jsonl`.
#[derive(Debug, Serialize)]
struct StatsRecord<'a> {
    eval_dataset: &'a str,
    n: u32,
    num_instances: u64,
    instance_ids: Vec<&'a str>,
}

/// One line of `tmp/overlap_instances-*.jsonl.gz`.
#[derive(Debug, Serialize)]
struct InstancesRecord<'a> {
    eval_dataset: &'a str,
    n: u32,
    instance_ids: &'a BTreeSet<String>,
    train_path: &'a str,
    train_row: u64,
    train_doc_id: &'a str,
}

/// What pass 1 reads of a [`ScanDoc`] line: its events' eval rows.
#[derive(Deserialize)]
struct DocEvalRows {
    events: Vec<EventKey>,
    #[serde(default)]
    hot: Vec<EventKey>,
}

#[derive(Deserialize)]
struct EventKey {
    eval_file: u32,
    eval_row: u64,
}

fn corrupt(file: &str, what: impl std::fmt::Display) -> EngineError {
    EngineError::Corrupt {
        file: file.to_string(),
        what: what.to_string(),
    }
}

/// Each JSON line of gzip file `rel`.
fn for_each_line<T: serde::de::DeserializeOwned>(
    handle: &tokio::runtime::Handle,
    output: &StoreUrl,
    rel: &str,
    mut each: impl FnMut(T) -> Result<()>,
) -> Result<()> {
    let mut lines = read_gz_lines(handle, output, rel)?;
    while let Some(line) = lines.next_line().map_err(|e| corrupt(rel, e))? {
        each(serde_json::from_slice(line).map_err(|e| corrupt(rel, e))?)?;
    }
    Ok(())
}

/// An eval row a candidate names: its id and text.
pub(super) struct EvalText {
    pub id: String,
    pub text: String,
}

/// Runs the report (on a blocking thread: call through `spawn_blocking`).
pub fn run_report(
    handle: &tokio::runtime::Handle,
    task: &ReportTask,
    output: &StoreUrl,
    settings: &Settings,
    whole: &mut WholeFiles,
) -> Result<ReportOutput> {
    // Pass 1: the eval rows that overlap.
    let mut wanted: BTreeSet<(u32, u64)> = BTreeSet::new();
    for files in &task.events {
        for file in files {
            for_each_line(handle, output, file, |doc: DocEvalRows| {
                wanted.extend(
                    doc.events
                        .iter()
                        .chain(&doc.hot)
                        .map(|k| (k.eval_file, k.eval_row)),
                );
                Ok(())
            })?;
        }
    }
    // Their ids and texts, read from the eval files themselves (refused if changed
    // since they were indexed), each file only if it has such a row.
    let mut rows: HashMap<(u32, u64), EvalText> = HashMap::new();
    for (i, eval) in task.eval.iter().enumerate() {
        let i = i as u32;
        if wanted.range((i, 0)..=(i, u64::MAX)).next().is_none() {
            continue;
        }
        let counts = read_records(
            handle,
            &eval.file,
            settings.eval_side(),
            whole,
            output,
            None,
            |mut record| {
                if wanted.contains(&(i, record.row)) {
                    let id = record.id()?;
                    rows.insert(
                        (i, record.row),
                        EvalText {
                            id,
                            text: record.text.to_string(),
                        },
                    );
                }
                Ok(())
            },
        )?;
        if counts.valid() != eval.instances {
            return Err(EngineError::InputChanged {
                file: eval.file.url.clone(),
                what: format!(
                    "{} valid rows now, {} when it was indexed",
                    counts.valid(),
                    eval.instances
                ),
            });
        }
    }
    // Per dataset and configured n: the overlapping instances.
    let mut stats: BTreeMap<(&str, u32), BTreeSet<&str>> = BTreeMap::new();
    let mut instances: BTreeMap<&str, u64> = BTreeMap::new();
    for eval in &task.eval {
        *instances.entry(eval.dataset.as_str()).or_default() += eval.instances;
        for &n in &settings.n {
            stats.entry((eval.dataset.as_str(), n)).or_default();
        }
    }

    let lengths: Vec<(u32, u32)> = settings
        .n
        .iter()
        .map(|&n| (n, settings.bit_of(n)))
        .collect();
    let eval_rows = EvalRows {
        task,
        rows: &rows,
        lengths: &lengths,
        settings,
    };
    // With [triage]: every matched n-gram counted first, so that the hot ones are
    // known before anything is counted in the statistics.
    let hot = match &settings.triage {
        None => HotNgrams::default(),
        Some(triage) => HotNgrams::of(
            &triage::count_matches(handle, task, output, &eval_rows)?,
            triage,
        ),
    };
    let excluded =
        |n: u32, ngram: &str| settings.triage.is_some_and(|t| t.exclude) && hot.contains(n, ngram);

    // Pass 2: the details and the per-training-file instances.
    let mut details = GzipJsonl::new(output, DETAILS, Packing::Result);
    let mut detail_count = 0u64;
    let mut not_overlaps = 0u64;
    let mut files = Vec::new();
    let mut cleaning = settings.clean.map(|clean| {
        (
            clean,
            GzipJsonl::new(output, CLEAN_MANIFEST, Packing::Result),
        )
    });
    let (mut dropped, mut cut) = (0u64, 0u64);
    let mut cut_check = CutCheck::new(settings);
    let train_files = task.train.len() as u32;
    for (t, (train_path, events_files)) in task.train.iter().zip(&task.events).enumerate() {
        let docs = read_docs(handle, output, events_files)?;
        // With [clean]: each contaminated document's counted matches.
        let mut contaminated: BTreeMap<u64, DocMatches<'_>> = BTreeMap::new();
        let mut events: Vec<(&ScanDoc, &ScanEvent)> = docs
            .iter()
            .flat_map(|doc| doc.events.iter().map(move |e| (doc, e)))
            .collect();
        events.sort_by(|(da, a), (db, b)| {
            (da.train_row, a.eval_file, a.eval_row, a.n, &a.ngram).cmp(&(
                db.train_row,
                b.eval_file,
                b.eval_row,
                b.n,
                &b.ngram,
            ))
        });
        type InstanceKey<'k> = (u64, &'k str, u32);
        let mut per_row: BTreeMap<InstanceKey<'_>, (&str, BTreeSet<String>)> = BTreeMap::new();
        // The tokens of the eval rows this training file's candidates name.
        let mut tokens: HashMap<(u32, u64), Vec<Token>> = HashMap::new();
        for &(doc, e) in &events {
            let Some((eval, row, found)) = eval_rows.decide(&mut tokens, train_path, e)? else {
                not_overlaps += 1;
                continue;
            };
            let EvalNgram {
                configured,
                offsets: eval_offsets,
            } = found;
            // With exclude, a hot n-gram's match is in no output (hot_ngrams.jsonl
            // counts it).
            if excluded(e.n, &e.ngram) {
                continue;
            }
            details.line(
                handle,
                &DetailRecord {
                    eval_dataset: &eval.dataset,
                    eval_path: &eval.file.url,
                    eval_row: e.eval_row,
                    instance_id: &row.id,
                    eval_text: &row.text,
                    ngram: &e.ngram,
                    eval_offsets: &eval_offsets,
                    n: e.n,
                    train_path,
                    train_row: doc.train_row,
                    train_text: &doc.train_text,
                    train_ngram: &e.ngram,
                    train_offsets: &e.train_offsets,
                    train_doc_id: &doc.train_doc_id,
                },
            )?;
            detail_count += 1;
            if cleaning.is_some() {
                let doc_matches = contaminated
                    .entry(doc.train_row)
                    .or_insert_with(|| DocMatches::of(doc));
                doc_matches.spans.extend_from_slice(&e.train_offsets);
                doc_matches.ngrams.insert((e.n, e.ngram.as_str()));
                doc_matches
                    .instances
                    .insert((eval.dataset.as_str(), row.id.as_str()));
            }
            for n in settings.lengths_in(configured) {
                stats
                    .entry((eval.dataset.as_str(), n))
                    .or_default()
                    .insert(row.id.as_str());
                per_row
                    .entry((doc.train_row, eval.dataset.as_str(), n))
                    .or_insert_with(|| (doc.train_doc_id.as_str(), BTreeSet::new()))
                    .1
                    .insert(row.id.clone());
            }
        }
        let mut out = GzipJsonl::new(
            output,
            &instances_path(t as u32, train_files),
            Packing::Result,
        );
        for ((train_row, dataset, n), (doc_id, ids)) in &per_row {
            out.line(
                handle,
                &InstancesRecord {
                    eval_dataset: dataset,
                    n: *n,
                    instance_ids: ids,
                    train_path,
                    train_row: *train_row,
                    train_doc_id: doc_id,
                },
            )?;
        }
        files.push(out.finish(handle)?);
        if let Some((clean, manifest)) = &mut cleaning {
            let mut outcomes: Vec<Outcome> = contaminated
                .values()
                .map(|m| m.outcome(clean, settings.tokenizer))
                .collect();
            if let Some(index) = &task.index {
                cut_check.drop_cuts_that_leave_a_match(
                    (handle, output, index),
                    &mut outcomes,
                    &|n, ngram| excluded(n, ngram),
                )?;
            }
            let mut edits = GzipJsonl::new(output, &edits_path(t as u32), Packing::Intermediate);
            for ((train_row, doc_matches), outcome) in contaminated.iter().zip(outcomes) {
                let (edit, record) = doc_matches.decide(train_path, *train_row, outcome);
                match edit.text {
                    None => dropped += 1,
                    Some(_) => cut += 1,
                }
                edits.line(handle, &edit)?;
                manifest.line(handle, &record)?;
            }
            files.push(edits.finish(handle)?);
        }
    }
    files.push(details.finish(handle)?);
    if let Some((_, manifest)) = cleaning {
        files.push(manifest.finish(handle)?);
    }
    if let Some(triage) = &settings.triage {
        files.push(hot.write(handle, output, triage)?);
    }
    if not_overlaps > 0 {
        tracing::info!(
            candidates = not_overlaps,
            "candidates whose window key matched but whose text is not the eval row's n-gram (dropped)"
        );
    }

    let mut text = Vec::new();
    let mut overlapping: BTreeMap<String, BTreeMap<u32, u64>> = BTreeMap::new();
    for ((dataset, n), ids) in &stats {
        let record = StatsRecord {
            eval_dataset: dataset,
            n: *n,
            num_instances: instances.get(dataset).copied().unwrap_or(0),
            instance_ids: ids.iter().copied().collect(),
        };
        serde_json::to_writer(&mut text, &record)
            .map_err(|e| EngineError::Internal(format!("an overlap record: {e}")))?;
        text.push(b'\n');
        overlapping
            .entry(dataset.to_string())
            .or_default()
            .insert(*n, ids.len() as u64);
    }
    files.push(OutputFile {
        path: STATS.into(),
        bytes: text.len() as u64,
        blake3: blake3::hash(&text).to_hex().to_string(),
    });
    handle.block_on(output.put(&output.child(STATS), text))?;
    Ok(ReportOutput {
        files,
        details: detail_count,
        overlapping,
        hot: hot.len() as u64,
        dropped,
        cut,
    })
}

/// What a cut leaves, looked up in the index (`[clean] mode = "cut"`): joining two
/// pieces, or cutting through a token, makes windows the document did not have, and
/// one of them may be an eval n-gram. A cut text with a window whose key the index
/// holds (unless it is an excluded hot n-gram) is dropped instead. (A key only finds
/// candidates: a window whose key is another n-gram's, about one in 10^12, drops a
/// document that did not need it; the manifest says so.)
struct CutCheck<'s> {
    settings: &'s Settings,
    /// The index when it is one group, loaded once for every training file.
    whole: Option<NgramIndex>,
    tokens: ScanTokens,
    scratch: MatchScratch,
}

impl<'s> CutCheck<'s> {
    fn new(settings: &'s Settings) -> CutCheck<'s> {
        CutCheck {
            settings,
            whole: None,
            tokens: ScanTokens::default(),
            scratch: MatchScratch::default(),
        }
    }

    fn drop_cuts_that_leave_a_match(
        &mut self,
        (handle, output, index): (&tokio::runtime::Handle, &StoreUrl, &IndexGroups),
        outcomes: &mut [Outcome],
        excluded: &dyn Fn(u32, &str) -> bool,
    ) -> Result<()> {
        if !outcomes.iter().any(|o| matches!(o, Outcome::Cut { .. })) {
            return Ok(());
        }
        let longest = self.settings.n.last().copied().unwrap_or(0);
        for group in 0..index.groups.max(1) {
            let load = || {
                handle.block_on(load_index(
                    output,
                    (&index.files, &index.runs),
                    &index.eval_rows,
                    (&index.lengths, longest),
                    (group, index.groups, self.settings.partitions),
                ))
            };
            let loaded;
            let group_index = if index.groups <= 1 {
                if self.whole.is_none() {
                    self.whole = Some(load()?);
                }
                match &self.whole {
                    Some(whole) => whole,
                    None => unreachable!("loaded just above"),
                }
            } else {
                loaded = load()?;
                &loaded
            };
            for outcome in outcomes.iter_mut() {
                let Outcome::Cut { text, .. } = outcome else {
                    continue;
                };
                self.tokens.fill(self.settings.tokenizer, text);
                let mut leaves = false;
                let tokens = &self.tokens;
                group_index.each_match(tokens, &mut self.scratch, |i, n, _| {
                    leaves = leaves || !excluded(n as u32, &tokens.window_text(i, n));
                });
                if leaves {
                    outcome.drop_for_leaving_a_match();
                }
            }
        }
        Ok(())
    }
}

/// A training file's scan documents, from its events files (a document matched in
/// several index groups is in several, with the events of each group).
pub(super) fn read_docs(
    handle: &tokio::runtime::Handle,
    output: &StoreUrl,
    events_files: &[String],
) -> Result<Vec<ScanDoc>> {
    let mut docs: Vec<ScanDoc> = Vec::new();
    for file in events_files {
        for_each_line(handle, output, file, |doc: ScanDoc| {
            docs.push(doc);
            Ok(())
        })?;
    }
    Ok(docs)
}

/// The eval rows candidates name, and how a candidate is decided against its row.
pub(super) struct EvalRows<'a> {
    task: &'a ReportTask,
    rows: &'a HashMap<(u32, u64), EvalText>,
    /// The configured lengths, each with its bit.
    lengths: &'a [(u32, u32)],
    settings: &'a Settings,
}

impl<'a> EvalRows<'a> {
    /// Candidate `e` of training file `train_path` decided: its eval file and row and
    /// the row's n-gram, or `None` when the row has no n-gram of that length and text
    /// (two n-grams with one window key). `tokens` keeps the rows' tokens.
    pub(super) fn decide(
        &self,
        tokens: &mut HashMap<(u32, u64), Vec<Token>>,
        train_path: &str,
        e: &ScanEvent,
    ) -> Result<Option<(&'a EvalFile, &'a EvalText, EvalNgram)>> {
        self.decide_window(tokens, train_path, (e.eval_file, e.eval_row), e.n, &e.ngram)
    }

    /// [`EvalRows::decide`] of a window of length `n` and text `ngram` against eval row
    /// `(file, row)`.
    pub(super) fn decide_window(
        &self,
        tokens: &mut HashMap<(u32, u64), Vec<Token>>,
        train_path: &str,
        (file, row): (u32, u64),
        n: u32,
        ngram: &str,
    ) -> Result<Option<(&'a EvalFile, &'a EvalText, EvalNgram)>> {
        let eval = self
            .task
            .eval
            .get(file as usize)
            .ok_or_else(|| corrupt(train_path, "an event of an unknown eval file"))?;
        let text = self.rows.get(&(file, row)).ok_or_else(|| {
            corrupt(
                &eval.file.url,
                format!("no valid row {row} (an event names it)"),
            )
        })?;
        let row_tokens = tokens
            .entry((file, row))
            .or_insert_with(|| self.settings.tokenizer.tokenize(&text.text));
        Ok(eval_ngram(row_tokens, self.lengths, n, ngram).map(|found| (eval, text, found)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::protocol::EvalFile;
    use super::super::test_support::{settings, OneFile};
    use super::*;
    use std::io::Write;

    /// The report reads the eval rows it needs from the eval files: one that changed
    /// after it was indexed (row numbers and texts no longer those the scans found) is
    /// refused, never read as it is now.
    #[test]
    fn an_eval_file_changed_after_it_was_indexed_is_refused() {
        let OneFile {
            dir: _dir,
            runtime,
            path: eval,
            file,
            output,
            ..
        } = OneFile::new(
            "eval.jsonl",
            "{\"id\": \"a\", \"text\": \"one two three\"}\n",
        );
        let handle = runtime.handle();
        let mut events = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        events
            .write_all(b"{\"events\": [{\"eval_file\": 0, \"eval_row\": 0}]}\n")
            .unwrap();
        let events = events.finish().unwrap();
        handle
            .block_on(output.put(&output.child("tmp/scan.jsonl.gz"), events))
            .unwrap();
        let task = ReportTask {
            eval: vec![EvalFile {
                file,
                dataset: "d".into(),
                instances: 1,
            }],
            train: vec!["t.jsonl".into()],
            events: vec![vec!["tmp/scan.jsonl.gz".into()]],
            index: None,
        };
        let settings = settings(vec![2]);
        // Another text, same size: only the pin tells them apart.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&eval, "{\"id\": \"a\", \"text\": \"one two THREE\"}\n").unwrap();
        let err =
            run_report(handle, &task, &output, &settings, &mut WholeFiles::new(0)).unwrap_err();
        assert!(matches!(err, EngineError::InputChanged { .. }), "{err}");
        assert!(err.to_string().contains("eval.jsonl"), "{err}");
    }
}
