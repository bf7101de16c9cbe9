//! The clean task: one training file written again under `cleaned/`, in its own
//! format, with the edits the report decided applied to its rows.
//!
//! ```text
//! edits file (row → dropped | new text, each with its original text's hash)
//! training file (pinned) ─► rows ─► an edited row: dropped, or its text replaced
//!                                   (the hash checked first); any other byte as read
//!                        ─► the same format ─► cleaned/<its path> (in parts)
//! ```
//!
//! * A file without edits is copied byte for byte.
//! * JSONL (`.jsonl`, `.jsonl.gz`, `.jsonl.zst`): every line is written as it was read
//!   (blank and rejected lines too) but an edited one: a dropped row's line is left out,
//!   a cut row's line keeps every byte but its text field's value, which is the new
//!   text as JSON writes it (UTF-8, `"`, `\` and control characters escaped). A
//!   compressed file is compressed again (gzip at zlib's default level as one member,
//!   zstd at level 3): the lines are the same bytes, the compressed bytes are not.
//! * Parquet: the same schema and metadata, one row group per row group read (fewer
//!   rows where rows are dropped), the codec of the file's first column; the values
//!   are those read, the text column's replaced where cut.
//!
//! Every edit must meet its row, with the text it was decided on: a file whose rows
//! are not those the report read is an error, never cleaned wrongly.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, StringArray};
use arrow::datatypes::DataType;
use futures::StreamExt;
use tokio::runtime::Handle;

use super::json_record::{field_value_span, light_record, JsonValue};
use super::lines::LineReader;
use super::protocol::{CleanOutput, CleanTask, Edit, OutputFile, ReadAs, Settings, CLEANED_DIR};
use super::source::{check_unchanged, format_of, open_object, read_error, read_gz_lines, Format};
use probeflow_engine::error::{EngineError, Result};
use probeflow_engine::store::{PartWriter, StoreUrl, PART_BYTES};

/// Where each training file's cleaned copy goes, relative to the output root:
/// [`CLEANED_DIR`]`/` and its path below the directory all the files share (a URL's
/// scheme and bucket are its first directories: `s3://b/x/f.jsonl` is `s3/b/x/f.jsonl`
/// below nothing). Two files that would have one path are an error.
pub fn cleaned_paths(urls: &[&str]) -> std::result::Result<Vec<String>, String> {
    let parts: Vec<Vec<&str>> = urls
        .iter()
        .map(|url| {
            let (scheme, rest) = match url.split_once("://") {
                Some((scheme, rest)) => (Some(scheme), rest),
                None => (None, *url),
            };
            scheme
                .into_iter()
                .chain(rest.split('/').filter(|p| !p.is_empty() && *p != "."))
                .collect()
        })
        .collect();
    // The directories every file is under.
    let mut shared = parts.first().map_or(0, |p| p.len().saturating_sub(1));
    for p in &parts {
        let dirs = &p[..p.len().saturating_sub(1)];
        shared = shared.min(
            dirs.iter()
                .zip(&parts[0])
                .take_while(|(a, b)| a == b)
                .count(),
        );
    }
    let paths: Vec<String> = parts
        .iter()
        .map(|p| format!("{CLEANED_DIR}/{}", p[shared..].join("/")))
        .collect();
    let mut seen = BTreeMap::new();
    for (path, url) in paths.iter().zip(urls) {
        if let Some(other) = seen.insert(path.as_str(), url) {
            return Err(format!(
                "[clean]: training files {other} and {url} would both be cleaned into {path}"
            ));
        }
    }
    Ok(paths)
}

/// The hash an edit carries of the text it was decided on.
pub fn text_hash(text: &str) -> String {
    blake3::hash(text.as_bytes()).to_hex()[..32].to_string()
}

/// Runs a clean task (on a blocking thread).
pub fn run_clean(
    handle: &Handle,
    task: &CleanTask,
    output: &StoreUrl,
    settings: &Settings,
) -> Result<CleanOutput> {
    let mut edits: BTreeMap<u64, Edit> = BTreeMap::new();
    let mut lines = read_gz_lines(handle, output, &task.edits)?;
    while let Some(line) = lines.next_line().map_err(|e| corrupt(&task.edits, e))? {
        let edit: Edit = serde_json::from_slice(line).map_err(|e| corrupt(&task.edits, e))?;
        let row = edit.train_row;
        if edits.insert(row, edit).is_some() {
            return Err(corrupt(&task.edits, format_args!("edits row {row} twice")));
        }
    }
    let mut out = Upload::new(output, &task.dest);
    handle.block_on(check_unchanged(&task.file))?;
    let mut applied = Applied::default();
    if edits.is_empty() {
        applied.rows = copy(handle, task, &mut out)?;
    } else {
        let format = format_of(&task.file.url).ok_or_else(|| {
            EngineError::Internal(format!("{}: not a known format", task.file.url))
        })?;
        let mut edits = Edits::new(&task.file.url, edits);
        match format {
            Format::Parquet => rewrite_parquet(
                handle,
                task,
                &settings.train_text_field,
                &mut edits,
                &mut out,
            )?,
            _ => rewrite_jsonl(
                handle,
                task,
                format,
                settings.train_side(),
                &mut edits,
                &mut out,
            )?,
        }
        edits.all_met()?;
        applied = edits.applied;
    }
    // Checked again: a file replaced while it was read is refused, not half cleaned.
    handle.block_on(check_unchanged(&task.file))?;
    Ok(CleanOutput {
        file: out.finish(handle)?,
        rows: applied.rows,
        dropped: applied.dropped,
        cut: applied.cut,
    })
}

fn corrupt(file: &str, what: impl std::fmt::Display) -> EngineError {
    EngineError::Corrupt {
        file: file.to_string(),
        what: what.to_string(),
    }
}

/// Rows read, dropped and cut.
#[derive(Debug, Default)]
struct Applied {
    rows: u64,
    dropped: u64,
    cut: u64,
}

/// The edits of one file, met row by row.
struct Edits {
    file: String,
    edits: BTreeMap<u64, Edit>,
    applied: Applied,
}

/// What becomes of a row.
enum RowFate<'a> {
    Kept,
    Dropped,
    Cut(&'a str),
}

impl Edits {
    fn new(file: &str, edits: BTreeMap<u64, Edit>) -> Edits {
        Edits {
            file: file.to_string(),
            edits,
            applied: Applied::default(),
        }
    }

    /// Whether row `row` has an edit (before its text is read).
    fn has(&self, row: u64) -> bool {
        self.edits.contains_key(&row)
    }

    /// The fate of row `row`, whose text is `text` (`None`: no text, which no edited
    /// row can be).
    fn fate(&mut self, row: u64, text: Option<&str>) -> Result<RowFate<'_>> {
        let Some(edit) = self.edits.get(&row) else {
            return Ok(RowFate::Kept);
        };
        if text.map(text_hash).as_deref() != Some(edit.text_hash.as_str()) {
            return Err(corrupt(
                &self.file,
                format!(
                    "row {row} does not hold the text the overlap report decided on \
                     (the file's rows are not those it read)"
                ),
            ));
        }
        Ok(match &edit.text {
            None => {
                self.applied.dropped += 1;
                RowFate::Dropped
            }
            Some(text) => {
                self.applied.cut += 1;
                RowFate::Cut(text)
            }
        })
    }

    fn all_met(&self) -> Result<()> {
        let met = self.applied.dropped + self.applied.cut;
        if met != self.edits.len() as u64 {
            let rows = self.applied.rows;
            return Err(corrupt(
                &self.file,
                format!(
                    "{} edited rows, {met} of them met in its {rows} rows",
                    self.edits.len()
                ),
            ));
        }
        Ok(())
    }
}

/// A cleaned file, uploaded in parts as it is written, with its blake3.
struct Upload {
    path: String,
    writer: PartWriter,
    hash: blake3::Hasher,
    bytes: u64,
}

impl Upload {
    fn new(output: &StoreUrl, path: &str) -> Upload {
        Upload {
            path: path.to_string(),
            writer: output.put_in_parts(output.child(path)),
            hash: blake3::Hasher::new(),
            bytes: 0,
        }
    }

    fn send(&mut self, handle: &Handle, part: Vec<u8>) -> Result<()> {
        if part.is_empty() {
            return Ok(());
        }
        self.hash.update(&part);
        self.bytes += part.len() as u64;
        handle.block_on(self.writer.put(part))
    }

    fn finish(self, handle: &Handle) -> Result<OutputFile> {
        handle.block_on(self.writer.finish())?;
        Ok(OutputFile {
            path: self.path,
            bytes: self.bytes,
            blake3: self.hash.finalize().to_hex().to_string(),
        })
    }
}

/// A file without edits, copied byte for byte; its rows are not counted (0).
fn copy(handle: &Handle, task: &CleanTask, out: &mut Upload) -> Result<u64> {
    let loc = StoreUrl::parse(&task.file.url)?;
    let mut raw = open_object(handle, &loc, &loc.root)?;
    loop {
        let mut part = vec![0u8; PART_BYTES];
        let mut filled = 0;
        while filled < part.len() {
            match raw.read(&mut part[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(corrupt(&task.file.url, format!("cannot read: {e}"))),
            }
        }
        part.truncate(filled);
        let last = filled == 0;
        out.send(handle, part)?;
        if last {
            return Ok(0);
        }
    }
}

/// The compressor of a rewritten JSONL file, over the bytes not yet uploaded.
enum Compressor {
    Plain(Vec<u8>),
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Compressor {
    fn new(format: Format) -> std::io::Result<Compressor> {
        Ok(match format {
            Format::JsonlGz => Compressor::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::default(),
            )),
            Format::JsonlZst => Compressor::Zstd(zstd::stream::write::Encoder::new(Vec::new(), 3)?),
            _ => Compressor::Plain(Vec::new()),
        })
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Compressor::Plain(v) => v.write_all(bytes),
            Compressor::Gzip(e) => e.write_all(bytes),
            Compressor::Zstd(e) => e.write_all(bytes),
        }
    }

    /// The compressed bytes so far, once there is a part of them.
    fn take_part(&mut self) -> Option<Vec<u8>> {
        let out = match self {
            Compressor::Plain(v) => v,
            Compressor::Gzip(e) => e.get_mut(),
            Compressor::Zstd(e) => e.get_mut(),
        };
        (out.len() >= PART_BYTES).then(|| std::mem::take(out))
    }

    fn finish(self) -> std::io::Result<Vec<u8>> {
        match self {
            Compressor::Plain(v) => Ok(v),
            Compressor::Gzip(e) => e.finish(),
            Compressor::Zstd(e) => e.finish(),
        }
    }
}

fn rewrite_jsonl(
    handle: &Handle,
    task: &CleanTask,
    format: Format,
    side: ReadAs<'_>,
    edits: &mut Edits,
    out: &mut Upload,
) -> Result<()> {
    let url = &task.file.url;
    let text_field = side.text_field;
    let io_err = |e: std::io::Error| read_error(url, e);
    let loc = StoreUrl::parse_input(url)?;
    let raw = open_object(handle, &loc, &loc.root)?;
    let lines: LineReader<Box<dyn Read + '_>> = match format {
        Format::JsonlGz => LineReader::new(Box::new(flate2::read::MultiGzDecoder::new(raw))),
        Format::JsonlZst => LineReader::new(Box::new(
            zstd::stream::read::Decoder::new(raw).map_err(io_err)?,
        )),
        _ => LineReader::new(raw),
    };
    let mut lines = lines.with_max_line_bytes(side.max_line_bytes);
    let dest = out.path.clone();
    let write_err = |e: std::io::Error| corrupt(&dest, format!("cannot compress: {e}"));
    let mut sink = Compressor::new(format).map_err(write_err)?;
    let mut scratch = String::new();
    let mut row = 0u64;
    while let Some(line) = lines.next_line().map_err(io_err)? {
        // Rows are numbered as the job read them: a blank line is no row.
        let blank = line
            .iter()
            .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'));
        let this = row;
        if !blank {
            row += 1;
        }
        if blank || !edits.has(this) {
            sink.write_all(line).map_err(write_err)?;
        } else {
            let text = std::str::from_utf8(line).ok();
            let record = text.and_then(|t| light_record(t, text_field, &mut scratch).ok());
            let old = match record.and_then(|r| r.text) {
                Some(JsonValue::Str(s)) => Some(s.into_owned()),
                _ => None,
            };
            match edits.fate(this, old.as_deref())? {
                RowFate::Kept => sink.write_all(line).map_err(write_err)?,
                RowFate::Dropped => {}
                RowFate::Cut(new) => {
                    let line_text = text.unwrap_or_default();
                    let span = field_value_span(line_text, text_field).ok_or_else(|| {
                        corrupt(
                            url,
                            format!("row {this}: no {text_field:?} value to replace"),
                        )
                    })?;
                    let value = serde_json::to_string(new).map_err(|e| corrupt(url, e))?;
                    sink.write_all(&line[..span.start]).map_err(write_err)?;
                    sink.write_all(value.as_bytes()).map_err(write_err)?;
                    sink.write_all(&line[span.end..]).map_err(write_err)?;
                }
            }
        }
        if let Some(part) = sink.take_part() {
            out.send(handle, part)?;
        }
    }
    edits.applied.rows = row;
    let rest = sink.finish().map_err(write_err)?;
    out.send(handle, rest)
}

fn rewrite_parquet(
    handle: &Handle,
    task: &CleanTask,
    text_field: &str,
    edits: &mut Edits,
    out: &mut Upload,
) -> Result<()> {
    let url = &task.file.url;
    // A store's error inside a read stays the store's (retried); the rest is the file's.
    let parquet_err =
        |e: parquet::errors::ParquetError| probeflow_engine::parquet_source::parquet_error(url, e);
    let builder = handle.block_on(probeflow_engine::parquet_source::open(
        url,
        task.file.size,
        None,
        &[],
        false,
    ))?;
    let schema = builder.schema().clone();
    let column = probeflow_engine::parquet_source::column_index(&schema, url, text_field)?;
    let metadata = builder.metadata().clone();
    let groups: Vec<u64> = metadata
        .row_groups()
        .iter()
        .map(|g| g.num_rows().max(0) as u64)
        .collect();
    let mut props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(None)
        .set_key_value_metadata(metadata.file_metadata().key_value_metadata().map(|kv| {
            kv.iter()
                .filter(|k| k.key != "ARROW:schema")
                .cloned()
                .collect()
        }));
    if let Some(first) = metadata
        .row_groups()
        .first()
        .and_then(|g| g.columns().first())
    {
        props = props.set_compression(first.compression());
    }
    let mut writer = parquet::arrow::ArrowWriter::try_new(Vec::new(), schema, Some(props.build()))
        .map_err(parquet_err)?;
    let stream = builder.with_batch_size(4096).build().map_err(parquet_err)?;
    let mut stream = std::pin::pin!(probeflow_engine::parquet_source::guarded(stream));
    let mut group = 0usize;
    let mut left_in_group = groups.first().copied().unwrap_or(0);
    let mut row = 0u64;
    while let Some(batch) = handle.block_on(stream.next()) {
        let mut batch = batch.map_err(parquet_err)?;
        while batch.num_rows() > 0 {
            while left_in_group == 0 {
                // A row group ends: the cleaned file's ends here too.
                writer.flush().map_err(parquet_err)?;
                group += 1;
                left_in_group = *groups
                    .get(group)
                    .ok_or_else(|| corrupt(url, "more rows than its row groups hold"))?;
            }
            let take = (batch.num_rows() as u64).min(left_in_group) as usize;
            let part = batch.slice(0, take);
            batch = batch.slice(take, batch.num_rows() - take);
            let cleaned = clean_batch(&part, column, row, edits, url)?;
            writer.write(&cleaned).map_err(parquet_err)?;
            row += take as u64;
            left_in_group -= take as u64;
            if writer.inner_mut().len() >= PART_BYTES {
                let part = std::mem::take(writer.inner_mut());
                out.send(handle, part)?;
            }
        }
    }
    edits.applied.rows = row;
    let rest = writer.into_inner().map_err(parquet_err)?;
    out.send(handle, rest)?;
    Ok(())
}

/// A batch of rows `first..` with its edits applied: dropped rows left out, cut
/// rows' texts replaced (the column keeps its type).
fn clean_batch(
    batch: &RecordBatch,
    column: usize,
    first: u64,
    edits: &mut Edits,
    url: &str,
) -> Result<RecordBatch> {
    let rows = batch.num_rows() as u64;
    if edits.edits.range(first..first + rows).next().is_none() {
        return Ok(batch.clone());
    }
    let original = batch.column(column);
    let texts = arrow::compute::cast(original, &DataType::Utf8)?;
    let texts = texts
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| EngineError::Internal("a Utf8 cast gave no StringArray".into()))?;
    let mut keep = Vec::with_capacity(rows as usize);
    let mut values: Vec<Option<String>> = Vec::with_capacity(rows as usize);
    for i in 0..rows as usize {
        let text = texts.is_valid(i).then(|| texts.value(i));
        let (kept, value) = match edits.fate(first + i as u64, text)? {
            RowFate::Kept => (true, text.map(str::to_string)),
            RowFate::Dropped => (false, None),
            RowFate::Cut(new) => (true, Some(new.to_string())),
        };
        keep.push(kept);
        values.push(value);
    }
    let replaced: ArrayRef = Arc::new(StringArray::from(values));
    let replaced = arrow::compute::cast(&replaced, original.data_type())?;
    let mut columns = batch.columns().to_vec();
    columns[column] = replaced;
    let edited = RecordBatch::try_new(batch.schema(), columns)
        .map_err(|e| corrupt(url, format!("cannot rebuild a batch: {e}")))?;
    Ok(arrow::compute::filter_record_batch(
        &edited,
        &BooleanArray::from(keep),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleaned_files_keep_their_paths_below_the_directory_they_share() {
        let paths = |urls: &[&str]| cleaned_paths(urls);
        assert_eq!(
            paths(&[
                "data/train/a/x.jsonl.gz",
                "data/train/b/y.parquet",
                "data/train/z.jsonl"
            ]),
            Ok(vec![
                "cleaned/a/x.jsonl.gz".to_string(),
                "cleaned/b/y.parquet".into(),
                "cleaned/z.jsonl".into()
            ])
        );
        assert_eq!(
            paths(&["/abs/t/one.jsonl"]),
            Ok(vec!["cleaned/one.jsonl".to_string()])
        );
        assert_eq!(
            paths(&["s3://b/t/x.jsonl", "gs://b/t/x.jsonl"]),
            Ok(vec![
                "cleaned/s3/b/t/x.jsonl".to_string(),
                "cleaned/gs/b/t/x.jsonl".into()
            ])
        );
        // Two spellings of one path are one place: refused, never one file over the other.
        let err = paths(&["d/t/x.jsonl", "d//t/x.jsonl"]).unwrap_err();
        assert!(
            err.contains("cleaned/") && err.contains("d//t/x.jsonl"),
            "{err}"
        );
    }

    /// An edit that does not meet its row with the text it was decided on (the rows are
    /// not those the report read), or meets no row, is an error naming the file: never
    /// a wrong row dropped or cut.
    #[test]
    fn an_edit_that_does_not_meet_its_text_is_refused() {
        use super::super::test_support::{settings, OneFile};
        let OneFile {
            dir,
            runtime,
            file,
            output,
            ..
        } = OneFile::new(
            "t.jsonl",
            "{\"text\": \"one two\"}\n\n{\"text\": \"three\"}\n",
        );
        let handle = runtime.handle();
        let settings = settings(vec![2]);
        let run = |edits: &[Edit]| {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            for e in edits {
                serde_json::to_writer(&mut gz, e).unwrap();
                gz.write_all(b"\n").unwrap();
            }
            handle
                .block_on(output.put(&output.child("edits.jsonl.gz"), gz.finish().unwrap()))
                .unwrap();
            let task = CleanTask {
                train_file: 0,
                file: file.clone(),
                edits: "edits.jsonl.gz".into(),
                dest: "cleaned/t.jsonl".into(),
            };
            run_clean(handle, &task, &output, &settings)
        };
        // Row 1 (after the blank line) is "three": cut as decided.
        let done = run(&[Edit {
            train_row: 1,
            text: Some("3".into()),
            text_hash: text_hash("three"),
        }])
        .unwrap();
        assert_eq!((done.rows, done.cut, done.dropped), (2, 1, 0));
        let cleaned = std::fs::read_to_string(dir.path().join("out/cleaned/t.jsonl")).unwrap();
        assert_eq!(cleaned, "{\"text\": \"one two\"}\n\n{\"text\": \"3\"}\n");
        // Decided on another text: refused.
        let err = run(&[Edit {
            train_row: 0,
            text: None,
            text_hash: text_hash("one two three"),
        }])
        .unwrap_err();
        assert!(matches!(err, EngineError::Corrupt { .. }), "{err}");
        assert!(
            err.to_string().contains("t.jsonl") && err.to_string().contains("row 0"),
            "{err}"
        );
        // A row edited twice: the edits are not one report's decisions.
        let twice = Edit {
            train_row: 1,
            text: None,
            text_hash: text_hash("three"),
        };
        let err = run(&[twice.clone(), twice]).unwrap_err();
        assert!(matches!(err, EngineError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("row 1 twice"), "{err}");
        // A row the file does not have.
        let err = run(&[Edit {
            train_row: 2,
            text: None,
            text_hash: text_hash("x"),
        }])
        .unwrap_err();
        assert!(
            err.to_string().contains("1 edited rows, 0 of them met"),
            "{err}"
        );
    }
}
