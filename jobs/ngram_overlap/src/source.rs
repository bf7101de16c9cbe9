//! Reading the overlap job's input files, record by record, on a blocking thread.
//!
//! A file is JSONL (`.jsonl`, `.jsonl.gz`, `.jsonl.zst`: streamed from the object store
//! and decompressed as it arrives) or Parquet (record batches). Every record has its
//! 0-based row within the file: a JSONL row is a non-blank line (a line of only
//! spaces, tabs, `\r` is skipped and not counted), a Parquet row is a table row. A
//! record whose text cannot be read (not JSON, not an object, no text field, a text
//! that is not a string) is a rejected row: it keeps its row number, is counted by
//! reason and written to the file's rejects file, and the job goes on.
//!
//! A record's id ([`super::records::record_id`]) is computed only when asked for
//! (training documents need it only when they overlap): from the JSON object, or
//! from a Parquet row converted to JSON the way `pyarrow`'s `to_pylist()` gives it.

use std::collections::BTreeMap;
use std::io::Read;

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::ObjectStoreExt;
use tokio::runtime::Handle;

use super::json_record::{light_record, IdKind, JsonValue, NotARecord};
use super::lines::{LineReader, LineTooLong};
use super::protocol::{InputFile, ReadAs, RowCounts};
use super::py_json::{self, PyValue};
use super::records::{python_str, record_id, RecordError};
use super::whole_gzip;
use probeflow_engine::error::{EngineError, Result};
use probeflow_engine::store::{PartWriter, StoreUrl};

/// The formats the job reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    JsonlGz,
    JsonlZst,
    Parquet,
}

/// The format of a file, by its name.
pub fn format_of(name: &str) -> Option<Format> {
    let name = name.rsplit('/').next().unwrap_or(name);
    [
        (".jsonl.gz", Format::JsonlGz),
        (".jsonl.zst", Format::JsonlZst),
        (".jsonl", Format::Jsonl),
        (".parquet", Format::Parquet),
    ]
    .into_iter()
    .find_map(|(suffix, f)| name.ends_with(suffix).then_some(f))
}

/// Why a row was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    InvalidUtf8,
    InvalidJson,
    NotAnObject,
    NoText,
    TextNotAString,
    BadId,
    Unhashable,
}

impl Reason {
    pub const ALL: [Reason; 7] = [
        Reason::InvalidUtf8,
        Reason::InvalidJson,
        Reason::NotAnObject,
        Reason::NoText,
        Reason::TextNotAString,
        Reason::BadId,
        Reason::Unhashable,
    ];

    /// The fixed label of the reason a result names (a metric label); `"unknown"` for a
    /// name this release does not give.
    pub fn label(name: &str) -> &'static str {
        probeflow_engine::kind::reason_label(Self::ALL.map(Reason::as_str), name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidUtf8 => "invalid_utf8",
            Reason::InvalidJson => "invalid_json",
            Reason::NotAnObject => "not_an_object",
            Reason::NoText => "no_text_field",
            Reason::TextNotAString => "text_not_a_string",
            Reason::BadId => "bad_id",
            Reason::Unhashable => "unhashable_record",
        }
    }
}

/// One valid record.
pub struct Record<'a> {
    pub row: u64,
    pub text: &'a str,
    id: IdSource<'a>,
}

enum IdSource<'a> {
    /// A JSONL line, decoded whole (by Python's rules) the first time its id is asked
    /// for.
    Line {
        line: &'a str,
        /// The id where the light decode read it as is.
        text: Option<&'a str>,
        parsed: &'a mut Option<PyValue>,
        file: &'a str,
    },
    /// A Parquet row, read from its Arrow arrays as `to_pylist()` gives it.
    Parquet {
        batch: &'a RecordBatch,
        index: usize,
        file: &'a str,
    },
}

impl Record<'_> {
    /// The record's id: its `id`, else the hash of the whole record.
    pub fn id(&mut self) -> Result<String> {
        match &mut self.id {
            IdSource::Line { text: Some(id), .. } => Ok(id.to_string()),
            IdSource::Line {
                line, parsed, file, ..
            } => {
                if parsed.is_none() {
                    // The light decode read this line with the same rules, so it decodes.
                    let value = py_json::loads(line).map_err(|e| {
                        EngineError::Internal(format!(
                            "{file}: a line read as a record does not decode: {e}"
                        ))
                    })?;
                    **parsed = Some(value);
                }
                match parsed.as_ref() {
                    Some(record) => record_id(record),
                    None => Err(EngineError::Internal("no record".into())),
                }
            }
            IdSource::Parquet { batch, index, file } => parquet_id(file, batch, *index),
        }
    }
}

/// Where `.jsonl.gz` files small enough are inflated whole: the limit (bytes of the
/// compressed file, and of its text) and the two buffers, which a worker keeps from one
/// task to the next (so they are allocated once, not per file, and hold at most
/// `2 × max` bytes).
#[derive(Debug, Default)]
pub struct WholeFiles {
    pub max: u64,
    gz: Vec<u8>,
    text: Vec<u8>,
}

impl WholeFiles {
    /// Buffers for files of at most `max` bytes (0: every file is streamed).
    pub fn new(max: u64) -> Self {
        WholeFiles {
            max,
            ..WholeFiles::default()
        }
    }
}

/// Reads `file` on the current (blocking) thread, calling `each` with every valid
/// record; rejected rows are counted and, if `rejects` is given, written there
/// (relative to `output`). A `.jsonl.gz` file of at most `whole.max` bytes
/// (compressed, and its text) is inflated whole ([`super::whole_gzip`]) in `whole`'s
/// buffers.
/// `handle` runs the object-store I/O.
pub fn read_records(
    handle: &Handle,
    file: &InputFile,
    side: ReadAs<'_>,
    whole: &mut WholeFiles,
    output: &StoreUrl,
    rejects: Option<&str>,
    mut each: impl FnMut(Record<'_>) -> Result<()>,
) -> Result<RowCounts> {
    handle.block_on(check_unchanged(file))?;
    let format = format_of(&file.url).ok_or_else(|| {
        EngineError::Internal(format!(
            "{}: not a .jsonl, .jsonl.gz, .jsonl.zst or .parquet file",
            file.url
        ))
    })?;
    let mut rejected = Rejects::default();
    let rows = match format {
        Format::Parquet => read_parquet(handle, file, side.text_field, &mut rejected, &mut each)?,
        _ => read_jsonl(
            handle,
            file,
            format,
            (side, whole),
            &mut rejected,
            &mut each,
        )?,
    };
    // Checked again after reading: a file replaced mid-read is refused, not mixed.
    handle.block_on(check_unchanged(file))?;
    let rejects_file = match rejects {
        None => None,
        Some(_) if rejected.lines.is_empty() => None,
        Some(rejects) => {
            let mut w: PartWriter = output.put_in_parts(output.child(rejects));
            handle.block_on(async {
                w.write(&rejected.lines).await?;
                w.finish().await
            })?;
            Some(rejects.to_string())
        }
    };
    Ok(RowCounts {
        rows,
        rejected: rejected.by_reason,
        rejects_file,
    })
}

#[derive(Default)]
struct Rejects {
    by_reason: BTreeMap<String, u64>,
    lines: Vec<u8>,
}

impl Rejects {
    fn add(&mut self, file: &str, row: u64, reason: Reason, raw: &[u8]) {
        *self.by_reason.entry(reason.as_str().into()).or_default() += 1;
        let line = serde_json::json!({
            "file": file,
            "row": row,
            "reason": reason.as_str(),
            "line": String::from_utf8_lossy(raw),
        });
        self.lines.extend_from_slice(line.to_string().as_bytes());
        self.lines.push(b'\n');
    }
}

/// Refuses a file that is not the one planned (size and ETag).
pub(super) async fn check_unchanged(file: &InputFile) -> Result<()> {
    probeflow_engine::store::check_pinned(&file.url, file.size, &file.etag).await
}

/// An object's bytes as a blocking [`Read`], fetched as they are read. A store's error
/// travels inside the `io::Error` as an [`EngineError::Store`] ([`read_error`] takes
/// it out), so that it is not taken for a corrupt file.
struct ObjectRead<'h> {
    handle: &'h Handle,
    shown: String,
    stream: BoxStream<'static, object_store::Result<Bytes>>,
    chunk: Bytes,
}

/// The error of reading input `file` through a decoder: the store's own error when the
/// store failed (the environment's, retried), a line past the side's `max_line_bytes`
/// as such, else the file does not decode (each the input's, naming it).
pub(super) fn read_error(file: &str, e: std::io::Error) -> EngineError {
    if let Some(too_long) = e.get_ref().and_then(|e| e.downcast_ref::<LineTooLong>()) {
        return EngineError::InvalidInput {
            file: file.to_string(),
            what: format!(
                "{too_long}, the longest line a JSONL input may have: set a larger \
                 max_line_bytes in its [eval] or [train] section, or split the document"
            ),
        };
    }
    let what = format!("cannot read: {e}");
    match e.into_inner().map(|inner| inner.downcast::<EngineError>()) {
        Some(Ok(store)) => *store,
        _ => EngineError::Corrupt {
            file: file.to_string(),
            what,
        },
    }
}

impl Read for ObjectRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.handle.block_on(self.stream.next()) {
                None => return Ok(0),
                Some(Ok(b)) => self.chunk = b,
                Some(Err(e)) => {
                    return Err(std::io::Error::other(EngineError::store(&self.shown, e)))
                }
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk.split_to(n));
        Ok(n)
    }
}

/// An object's bytes as a blocking reader: a local file is read directly, an object
/// in a store is fetched as it is read.
pub(super) fn open_object<'h>(
    handle: &'h Handle,
    store: &StoreUrl,
    location: &object_store::path::Path,
) -> Result<Box<dyn Read + Send + 'h>> {
    if let Some(local) = store.local_path(location) {
        let file = std::fs::File::open(&local).map_err(|e| EngineError::Corrupt {
            file: local.display().to_string(),
            what: format!("cannot open: {e}"),
        })?;
        return Ok(Box::new(file));
    }
    let body = handle
        .block_on(store.store.get(location))
        .map_err(|e| EngineError::store(store.display(location), e))?;
    Ok(Box::new(ObjectRead {
        handle,
        shown: store.display(location),
        stream: body.into_stream(),
        chunk: Bytes::new(),
    }))
}

/// The lines of gzip file `rel` under `output` (one this job wrote), decompressed as
/// it is fetched.
pub fn read_gz_lines<'h>(
    handle: &'h Handle,
    output: &StoreUrl,
    rel: &str,
) -> Result<LineReader<impl Read + 'h>> {
    let raw = open_object(handle, output, &output.child(rel))?;
    Ok(LineReader::new(flate2::read::MultiGzDecoder::new(raw)))
}

fn read_jsonl(
    handle: &Handle,
    file: &InputFile,
    format: Format,
    (side, whole): (ReadAs<'_>, &mut WholeFiles),
    rejected: &mut Rejects,
    each: &mut impl FnMut(Record<'_>) -> Result<()>,
) -> Result<u64> {
    let loc = StoreUrl::parse_input(&file.url)?;
    let mut raw = open_object(handle, &loc, &loc.root)?;
    let io_err = |e: std::io::Error| read_error(&file.url, e);
    let WholeFiles { max, gz, text } = whole;
    let mut inflated_whole = false;
    let lines: LineReader<Box<dyn Read + '_>> = match format {
        Format::JsonlGz if file.size <= *max => {
            gz.clear();
            whole_gzip::reserve_once(gz, *max);
            // At most one byte more than the limit: a file that grew since it was
            // pinned is refused by the check after reading, and never takes more.
            (&mut raw).take(*max + 1).read_to_end(gz).map_err(io_err)?;
            if whole_gzip::inflate_single_member(gz, *max, text) {
                inflated_whole = true;
                LineReader::from_text(std::mem::take(text))
            } else {
                LineReader::new(Box::new(flate2::read::MultiGzDecoder::new(&gz[..])))
            }
        }
        Format::JsonlGz => LineReader::new(Box::new(flate2::read::MultiGzDecoder::new(raw))),
        Format::JsonlZst => LineReader::new(Box::new(
            zstd::stream::read::Decoder::new(raw).map_err(io_err)?,
        )),
        _ => LineReader::new(raw),
    };
    let mut lines = lines.with_max_line_bytes(side.max_line_bytes);
    let mut row = 0u64;
    let mut scratch = String::new();
    while let Some(line) = lines.next_line().map_err(io_err)? {
        if line
            .iter()
            .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        {
            continue;
        }
        let this = row;
        row += 1;
        let Ok(line_text) = std::str::from_utf8(line) else {
            rejected.add(&file.url, this, Reason::InvalidUtf8, line);
            continue;
        };
        // Only the text and the id's kind are decoded ([`light_record`]: the text
        // borrowed from the line when it has no escapes, else decoded into
        // `scratch`); the whole record only when its id is asked for.
        let light = match light_record(line_text, side.text_field, &mut scratch) {
            Ok(light) => light,
            Err(e) => {
                let reason = match e {
                    NotARecord::NotAnObject => Reason::NotAnObject,
                    NotARecord::NotJson(_) => Reason::InvalidJson,
                };
                rejected.add(&file.url, this, reason, line);
                continue;
            }
        };
        // A row without a usable id is refused whether or not it is ever asked for its
        // id (a training document only is when it overlaps).
        if light.id == Some(IdKind::Unusable) {
            rejected.add(&file.url, this, Reason::BadId, line);
            continue;
        }
        let text = match light.text {
            None => {
                rejected.add(&file.url, this, Reason::NoText, line);
                continue;
            }
            Some(JsonValue::Str(s)) => s,
            Some(JsonValue::Other(_)) => {
                rejected.add(&file.url, this, Reason::TextNotAString, line);
                continue;
            }
        };
        if matches!(light.id, None | Some(IdKind::Null)) && !light.hashable {
            rejected.add(&file.url, this, Reason::Unhashable, line);
            continue;
        }
        let mut parsed = light.record;
        match each(Record {
            row: this,
            text: &text,
            id: IdSource::Line {
                line: line_text,
                text: light.id_text,
                parsed: &mut parsed,
                file: &file.url,
            },
        }) {
            Ok(()) => {}
            Err(e) => match e.kind_error::<RecordError>() {
                Some(RecordError::BadId(_)) => rejected.add(&file.url, this, Reason::BadId, line),
                Some(RecordError::Unhashable(_)) => {
                    rejected.add(&file.url, this, Reason::Unhashable, line)
                }
                None => return Err(e),
            },
        }
    }
    if inflated_whole {
        *text = lines.into_buffer();
    }
    Ok(row)
}

fn read_parquet(
    handle: &Handle,
    file: &InputFile,
    text_field: &str,
    rejected: &mut Rejects,
    each: &mut impl FnMut(Record<'_>) -> Result<()>,
) -> Result<u64> {
    // A store's error inside a read stays the store's (retried); the rest is the file's.
    let parquet_err = |e: parquet::errors::ParquetError| {
        probeflow_engine::parquet_source::parquet_error(&file.url, e)
    };
    let builder = handle.block_on(probeflow_engine::parquet_source::open(
        &file.url,
        file.size,
        None,
        &[],
        false,
    ))?;
    let schema = builder.schema().clone();
    let column = probeflow_engine::parquet_source::column_index(&schema, &file.url, text_field)?;
    let stream = builder.with_batch_size(4096).build().map_err(parquet_err)?;
    let mut stream = std::pin::pin!(probeflow_engine::parquet_source::guarded(stream));
    let mut row = 0u64;
    while let Some(batch) = handle.block_on(stream.next()) {
        let batch = batch.map_err(parquet_err)?;
        if !matches!(
            batch.column(column).data_type(),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        ) {
            return Err(EngineError::Schema {
                file: file.url.clone(),
                what: format!(
                    "column {text_field:?} is {}, not text",
                    batch.column(column).data_type()
                ),
            });
        }
        let texts = arrow::compute::cast(batch.column(column), &DataType::Utf8)?;
        let texts = texts
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .ok_or_else(|| EngineError::Internal("a Utf8 cast gave no StringArray".into()))?;
        // An id no rule turns into a string is refused whether or not the row is ever
        // asked for its id (a training document only is when it overlaps).
        let compound_ids = match batch.schema().column_with_name("id") {
            None => None,
            Some((at, field)) => match field.data_type() {
                t if is_compound(t) => Some(batch.column(at).clone()),
                t if python_value_type(t) => None,
                t => {
                    return Err(EngineError::Schema {
                        file: file.url.clone(),
                        what: format!(
                        "column \"id\" is {t}, whose str() in Python the job does not reproduce; \
                             write ids as strings or integers"
                    ),
                    })
                }
            },
        };
        for i in 0..batch.num_rows() {
            let this = row + i as u64;
            if texts.is_null(i) {
                rejected.add(&file.url, this, Reason::TextNotAString, b"null");
                continue;
            }
            if compound_ids.as_ref().is_some_and(|ids| ids.is_valid(i)) {
                rejected.add(&file.url, this, Reason::BadId, b"id: a list or a struct");
                continue;
            }
            match each(Record {
                row: this,
                text: texts.value(i),
                id: IdSource::Parquet {
                    batch: &batch,
                    index: i,
                    file: &file.url,
                },
            }) {
                Ok(()) => {}
                Err(e) => match e.kind_error::<RecordError>() {
                    Some(RecordError::BadId(what)) => {
                        rejected.add(&file.url, this, Reason::BadId, what.as_bytes())
                    }
                    _ => return Err(e),
                },
            }
        }
        row += batch.num_rows() as u64;
    }
    Ok(row)
}

fn is_compound(t: &DataType) -> bool {
    matches!(
        t,
        DataType::List(_) | DataType::LargeList(_) | DataType::Struct(_)
    )
}

/// Whether a column's values come out of `to_pylist()` as the values Python's
/// `json.loads` makes (str, int, float, bool, None, and lists and dicts of those), so
/// the job reads them as Python holds them.
fn python_value_type(t: &DataType) -> bool {
    use DataType as D;
    match t {
        D::Null | D::Boolean | D::Float64 | D::Utf8 | D::LargeUtf8 | D::Utf8View => true,
        D::Int8 | D::Int16 | D::Int32 | D::Int64 => true,
        D::UInt8 | D::UInt16 | D::UInt32 | D::UInt64 => true,
        D::List(f) | D::LargeList(f) => python_value_type(f.data_type()),
        D::Struct(fields) => fields.iter().all(|f| python_value_type(f.data_type())),
        _ => false,
    }
}

/// A Parquet row's id: `str()` of its `id` when not null, else the hash of the
/// whole row as `to_pylist()` gives it (every column, nulls included), read from the
/// Arrow arrays directly (no text round trip).
fn parquet_id(file: &str, batch: &RecordBatch, index: usize) -> Result<String> {
    let schema = batch.schema();
    if let Some((at, _)) = schema.column_with_name("id") {
        let id = arrow_value(batch.column(at).as_ref(), index)?;
        if id != PyValue::None {
            return python_str(&id).ok_or_else(|| {
                RecordError::BadId(format!("a record's id must be a scalar, got {id:?}")).into()
            });
        }
    }
    if let Some(f) = schema
        .fields()
        .iter()
        .find(|f| !python_value_type(f.data_type()))
    {
        return Err(EngineError::Schema {
            file: file.to_string(),
            what: format!(
                "records without an id are identified by a hash of the whole record, and column {:?} ({}) \
                 has no value Python's json would give; add an `id` column",
                f.name(),
                f.data_type()
            ),
        });
    }
    let row = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(f, column)| {
            Ok((
                f.name().as_str().into(),
                arrow_value(column.as_ref(), index)?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    record_id(&PyValue::Dict(row))
}

/// Value `i` of an array as `to_pylist()` gives it, for the types of
/// [`python_value_type`].
fn arrow_value(array: &dyn Array, i: usize) -> Result<PyValue> {
    use arrow::array::AsArray;
    use arrow::datatypes as t;
    if array.is_null(i) {
        return Ok(PyValue::None);
    }
    let mismatch = || EngineError::Internal(format!("an array of {} is not", array.data_type()));
    fn int<T: t::ArrowPrimitiveType>(array: &dyn Array, i: usize) -> Option<PyValue>
    where
        T::Native: Into<i128>,
    {
        Some(PyValue::Int(array.as_primitive_opt::<T>()?.value(i).into()))
    }
    let items = |list: Option<arrow::array::ArrayRef>| -> Result<PyValue> {
        let items = list.ok_or_else(mismatch)?;
        (0..items.len())
            .map(|k| arrow_value(items.as_ref(), k))
            .collect::<Result<Vec<_>>>()
            .map(PyValue::List)
    };
    let value = match array.data_type() {
        DataType::Null => Some(PyValue::None),
        DataType::Boolean => array.as_boolean_opt().map(|a| PyValue::Bool(a.value(i))),
        DataType::Int8 => int::<t::Int8Type>(array, i),
        DataType::Int16 => int::<t::Int16Type>(array, i),
        DataType::Int32 => int::<t::Int32Type>(array, i),
        DataType::Int64 => int::<t::Int64Type>(array, i),
        DataType::UInt8 => int::<t::UInt8Type>(array, i),
        DataType::UInt16 => int::<t::UInt16Type>(array, i),
        DataType::UInt32 => int::<t::UInt32Type>(array, i),
        DataType::UInt64 => int::<t::UInt64Type>(array, i),
        DataType::Float64 => array
            .as_primitive_opt::<t::Float64Type>()
            .map(|a| PyValue::Float(a.value(i))),
        DataType::Utf8 => array
            .as_string_opt::<i32>()
            .map(|a| PyValue::Str(a.value(i).into())),
        DataType::LargeUtf8 => array
            .as_string_opt::<i64>()
            .map(|a| PyValue::Str(a.value(i).into())),
        DataType::Utf8View => array
            .as_string_view_opt()
            .map(|a| PyValue::Str(a.value(i).into())),
        DataType::List(_) => return items(array.as_list_opt::<i32>().map(|l| l.value(i))),
        DataType::LargeList(_) => return items(array.as_list_opt::<i64>().map(|l| l.value(i))),
        DataType::Struct(fields) => {
            let s = array.as_struct_opt().ok_or_else(mismatch)?;
            let items = fields
                .iter()
                .zip(s.columns())
                .map(|(f, c)| Ok((f.name().as_str().into(), arrow_value(c.as_ref(), i)?)))
                .collect::<Result<Vec<_>>>()?;
            Some(PyValue::Dict(items))
        }
        other => {
            return Err(EngineError::Internal(format!(
                "a {other} value has no Python form the job reproduces"
            )))
        }
    };
    value.ok_or_else(mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_error_inside_a_decoder_stays_the_stores_and_bad_bytes_are_the_files() {
        // What a gzip decoder passes up from the stream below it when the store fails.
        let store = EngineError::store(
            "s3://b/train.jsonl.gz",
            object_store::Error::Generic {
                store: "S3",
                source: "connection reset".into(),
            },
        );
        let e = read_error("s3://b/train.jsonl.gz", std::io::Error::other(store));
        assert!(matches!(e, EngineError::Store { .. }), "{e}");
        assert!(e.fault().retryable());
        // A decoder's own error is the file's: it fails at once, naming it.
        let bad = std::io::Error::new(std::io::ErrorKind::InvalidInput, "invalid gzip header");
        let e = read_error("s3://b/train.jsonl.gz", bad);
        assert!(matches!(e, EngineError::Corrupt { .. }), "{e}");
        assert!(!e.fault().retryable());
        assert!(e.to_string().starts_with("s3://b/train.jsonl.gz: "), "{e}");
    }

    #[test]
    fn formats_are_known_by_name() {
        assert_eq!(
            format_of("s3://b/x/train-0.jsonl.zst"),
            Some(Format::JsonlZst)
        );
        assert_eq!(format_of("a.jsonl.gz"), Some(Format::JsonlGz));
        assert_eq!(format_of("dir.jsonl/a.parquet"), Some(Format::Parquet));
        assert_eq!(format_of("a.jsonl"), Some(Format::Jsonl));
        assert_eq!(format_of("a.json"), None);
        assert_eq!(format_of("a.jsonl.bz2"), None);
    }

    #[test]
    fn every_reason_is_its_own_metric_label_and_an_unknown_name_is_unknown() {
        let labels: std::collections::BTreeSet<&str> = Reason::ALL
            .iter()
            .map(|r| Reason::label(r.as_str()))
            .collect();
        assert_eq!(labels.len(), Reason::ALL.len());
        assert!(!labels.contains("unknown"));
        assert_eq!(Reason::label("dropped_by_a_newer_release"), "unknown");
    }
}
