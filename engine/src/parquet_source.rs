//! Parquet input over `object_store`: an [`AsyncFileReader`] that fetches the footer and
//! the projected column chunks with range reads, and names its file in every error.
//!
//! A file opened with the ETag it was planned with ([`open`]'s `etag`) is read only as
//! that version: every range read carries `If-Match` and its answer's ETag and size
//! are checked (for a store that ignores the header), so a file replaced or removed
//! since the job was planned fails the read with [`EngineError::InputChanged`] (no
//! separate `HEAD` round trips before and after), and its footer, parsed once, is kept
//! for the next task on the same file ([`FOOTERS_KEPT`] files per process): a map
//! task over one row group of a file already seen costs one request, not three.

use std::ops::Range;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, Schema};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStreamBuilder};
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};

use crate::error::{EngineError, Result};
use crate::store::StoreUrl;

/// One input Parquet file in an object store.
pub struct ParquetSource {
    store: Arc<dyn ObjectStore>,
    path: Path,
    url: String,
    size: u64,
    /// The ETag every read must match (`If-Match`), when the file was pinned with one.
    etag: Option<String>,
    /// Whether to load the offset index (page locations), when the file has one: it
    /// lets a row range be read without fetching its row group's whole column chunks.
    pages: bool,
    /// Where the footer's Thrift lies, once the file's tail is read: parquet reads a
    /// footer longer than its first read apart, and that read is checked as the footer.
    footer: std::sync::OnceLock<Range<u64>>,
    /// The column chunks' offset indexes, once the footer is parsed (with page
    /// locations only): each is checked before parquet decodes it.
    offset_indexes: std::sync::OnceLock<Vec<Range<u64>>>,
    /// Each column chunk's bytes and codec: set once the footer is read, after which
    /// every read is of whole pages, whose headers are checked
    /// ([`crate::parquet_guard::check_pages_of`]) before parquet decodes them.
    chunks: std::sync::OnceLock<Vec<(Range<u64>, parquet::basic::Compression)>>,
}

impl ParquetSource {
    /// Bytes `range` of the file, of the pinned version only.
    async fn read(&self, range: Range<u64>) -> parquet::errors::Result<Bytes> {
        // A footer that points past the end of the file is corrupt: a store answers such
        // a range short (S3 clamps it), and parquet asserts on a short answer.
        if range.start > range.end || range.end > self.size {
            return Err(self.corrupt(format!(
                "it asks for bytes {}..{} of a file of {} bytes (its footer points past its end)",
                range.start, range.end, self.size
            )));
        }
        let options = GetOptions {
            range: Some(range.clone().into()),
            if_match: self.etag.clone(),
            ..GetOptions::default()
        };
        let pinned = |e: object_store::Error| {
            let changed = |what: &str| {
                ParquetError::External(Box::new(EngineError::InputChanged {
                    file: self.url.clone(),
                    what: what.to_string(),
                }))
            };
            match e {
                object_store::Error::Precondition { .. } if self.etag.is_some() => changed(
                    "changed since the job was planned (its ETag no longer matches); its rows \
                     would mix two versions: start a new output",
                ),
                object_store::Error::NotFound { .. } if self.etag.is_some() => {
                    changed("removed since the job was planned; start a new output")
                }
                e => ParquetError::External(Box::new(EngineError::store(&self.url, e))),
            }
        };
        let got = self
            .store
            .get_opts(&self.path, options)
            .await
            .map_err(pinned)?;
        // A store that ignores If-Match still names the version it answered with.
        if let Some(etag) = &self.etag {
            if got.meta.e_tag.as_deref() != Some(etag.as_str()) || got.meta.size != self.size {
                return Err(ParquetError::External(Box::new(
                    EngineError::InputChanged {
                        file: self.url.clone(),
                        what: format!(
                        "changed since the job was planned ({} bytes, etag {etag:?} → {} bytes, \
                         etag {:?}); its rows would mix two versions: start a new output",
                        self.size, got.meta.size, got.meta.e_tag
                    ),
                    },
                )));
            }
        }
        let bytes = got.bytes().await.map_err(pinned)?;
        if bytes.len() as u64 != range.end - range.start {
            return Err(self.corrupt(format!(
                "the store answered {} bytes for bytes {}..{}",
                bytes.len(),
                range.start,
                range.end
            )));
        }
        Ok(bytes)
    }

    /// Parquet's error for this file: its bytes are not what Parquet says.
    fn corrupt(&self, what: String) -> ParquetError {
        ParquetError::External(Box::new(EngineError::Parquet {
            file: self.url.clone(),
            what,
        }))
    }

    /// Checks what parquet will decode from `bytes` (of `range`) where it would panic or
    /// allocate by what the bytes claim ([`crate::parquet_guard`]), by what it reads:
    /// the footer, then the offset indexes, then pages.
    fn check(&self, range: Range<u64>, bytes: &[u8]) -> parquet::errors::Result<()> {
        use crate::parquet_guard::{check_offset_index, check_pages_of};
        let checked = if let Some(chunks) = self.chunks.get() {
            let codec = chunks
                .iter()
                .find(|(chunk, _)| chunk.contains(&range.start))
                .map_or(parquet::basic::Compression::UNCOMPRESSED, |&(_, codec)| {
                    codec
                });
            check_pages_of(bytes, codec)
        } else if let Some(indexes) = self.offset_indexes.get() {
            indexes
                .iter()
                .filter_map(|index| within(&range, index).map(|at| &bytes[at]))
                .try_for_each(check_offset_index)
        } else {
            self.check_footer_read(range, bytes)
        };
        checked.map_err(|what| self.corrupt(what))
    }

    /// A read before the footer is parsed: the file's tail (which says where the
    /// footer lies, and may hold it), or the footer read apart.
    fn check_footer_read(&self, range: Range<u64>, bytes: &[u8]) -> Result<(), String> {
        use crate::parquet_guard::check_footer;
        if range.end == self.size {
            if let Some(footer) = footer_place(&range, bytes) {
                let _ = self.footer.set(footer.clone());
                if let Some(at) = within(&range, &footer) {
                    return check_footer(&bytes[at]);
                }
            }
            return Ok(());
        }
        match self.footer.get() {
            Some(footer) if *footer == range => check_footer(bytes),
            _ => Ok(()),
        }
    }
}

/// Where the footer's Thrift lies, from `bytes`, the file's tail at `range` (its
/// length and the magic last): `None` where the tail is too short to say.
fn footer_place(range: &Range<u64>, bytes: &[u8]) -> Option<Range<u64>> {
    let tail = bytes.len().checked_sub(8)?;
    let length = u32::from_le_bytes(bytes[tail..tail + 4].try_into().ok()?);
    let end = range.end - 8;
    Some(end.checked_sub(u64::from(length))?..end)
}

/// Where `inner` lies within bytes read at `outer`, when wholly inside them.
fn within(outer: &Range<u64>, inner: &Range<u64>) -> Option<Range<usize>> {
    if inner.start < outer.start || inner.end > outer.end {
        return None;
    }
    let start = usize::try_from(inner.start - outer.start).ok()?;
    let end = usize::try_from(inner.end - outer.start).ok()?;
    Some(start..end)
}

impl AsyncFileReader for ParquetSource {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            let bytes = self.read(range.clone()).await?;
            self.check(range, &bytes)?;
            Ok(bytes)
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            let this = &*self;
            let fetched = object_store::coalesce_ranges(
                &ranges,
                |range| this.read(range),
                object_store::OBJECT_STORE_COALESCE_DEFAULT,
            )
            .await?;
            // Each range as parquet asked for it (fetches are coalesced): a column
            // chunk's pages are checked from its own start.
            for (range, bytes) in ranges.iter().zip(&fetched) {
                this.check(range.clone(), bytes)?;
            }
            Ok(fetched)
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let size = self.size;
            // The footer alone first, so that the offset indexes it points at are known
            // (and checked) before parquet reads them.
            let footer = ParquetMetaDataReader::new()
                .with_prefetch_hint(Some(64 * 1024))
                .with_page_index_policy(PageIndexPolicy::Skip)
                .load_and_finish(&mut *self, size)
                .await?;
            if !self.pages {
                return Ok(Arc::new(footer));
            }
            let _ = self.offset_indexes.set(offset_index_places(&footer));
            let mut with_pages = ParquetMetaDataReader::new_with_metadata(footer)
                .with_offset_index_policy(PageIndexPolicy::Optional);
            with_pages.load_page_index(&mut *self).await?;
            Ok(Arc::new(with_pages.finish()?))
        }
        .boxed()
    }
}

/// Where each column chunk's offset index lies, as its footer says.
fn offset_index_places(footer: &ParquetMetaData) -> Vec<Range<u64>> {
    footer
        .row_groups()
        .iter()
        .flat_map(|g| g.columns())
        .filter_map(|c| {
            let start = u64::try_from(c.offset_index_offset()?).ok()?;
            let length = u64::try_from(c.offset_index_length()?).ok()?;
            Some(start..start.checked_add(length)?)
        })
        .collect()
}

/// Parsed footers kept per process (the last files opened with an ETag).
pub const FOOTERS_KEPT: usize = 8;

/// A file's identity for its kept footer: URL, size, ETag, whether with page locations.
type FooterKey = (String, u64, String, bool);

/// The footers of the last [`FOOTERS_KEPT`] pinned files opened, most recent last.
static FOOTERS: std::sync::Mutex<Vec<(FooterKey, ArrowReaderMetadata)>> =
    std::sync::Mutex::new(Vec::new());

fn kept_footer(key: &FooterKey) -> Option<ArrowReaderMetadata> {
    let kept = FOOTERS.lock().unwrap_or_else(|p| p.into_inner());
    kept.iter().find(|(k, _)| k == key).map(|(_, m)| m.clone())
}

fn keep_footer(key: FooterKey, metadata: &ArrowReaderMetadata) {
    let mut kept = FOOTERS.lock().unwrap_or_else(|p| p.into_inner());
    kept.retain(|(k, _)| *k != key);
    if kept.len() >= FOOTERS_KEPT {
        kept.remove(0);
    }
    kept.push((key, metadata.clone()));
}

/// The error of reading Parquet file `file`: [`EngineError::InputChanged`] when a read
/// found the file replaced, otherwise [`EngineError::Parquet`] naming the file.
pub fn parquet_error(file: &str, e: ParquetError) -> EngineError {
    if let ParquetError::External(inner) = e {
        return match inner.downcast::<EngineError>() {
            Ok(worker) => *worker,
            Err(other) => EngineError::Parquet {
                file: file.to_string(),
                what: other.to_string(),
            },
        };
    }
    EngineError::Parquet {
        file: file.to_string(),
        what: e.to_string(),
    }
}

/// Opens an input file (reads its footer) as a record-batch stream builder. Utf8
/// columns named in `as_dictionary` are read as `Dictionary(Int32, Utf8)`, keeping
/// Parquet's dictionary encoding so each distinct value can be handled once, where the
/// file's pages of that column are dictionary-encoded throughout
/// ([`dictionary_encoded_throughout`]). With
/// `etag` (the one the file was planned with) every read is of that version only and
/// the parsed footer is kept for the next open of the same file.
pub async fn open(
    url: &str,
    size: u64,
    etag: Option<&str>,
    as_dictionary: &[&str],
    pages: bool,
) -> Result<ParquetRecordBatchStreamBuilder<ParquetSource>> {
    let loc = StoreUrl::parse_input(url)?;
    let file = FileIn {
        store: loc.store.clone(),
        path: loc.root.clone(),
        url,
    };
    open_in(file, size, etag, as_dictionary, pages).await
}

/// A file in a store: the store, its path there and the URL errors name it by.
pub struct FileIn<'a> {
    pub store: Arc<dyn ObjectStore>,
    pub path: Path,
    pub url: &'a str,
}

/// [`open`] for a file in a store at hand (an in-memory one, say).
pub async fn open_in(
    file: FileIn<'_>,
    size: u64,
    etag: Option<&str>,
    as_dictionary: &[&str],
    pages: bool,
) -> Result<ParquetRecordBatchStreamBuilder<ParquetSource>> {
    let url = file.url;
    let parquet_err = |e: ParquetError| parquet_error(url, e);
    let mut source = ParquetSource {
        store: file.store,
        path: file.path,
        url: url.to_string(),
        size,
        etag: etag.map(str::to_string),
        pages,
        footer: Default::default(),
        offset_indexes: Default::default(),
        chunks: Default::default(),
    };
    let key = etag.map(|e| (url.to_string(), size, e.to_string(), pages));
    let plain = match key.as_ref().and_then(kept_footer) {
        Some(kept) => kept,
        None => {
            let footer = source.get_metadata(None).await.map_err(parquet_err)?;
            check_parsed_footer(&footer, size).map_err(|what| EngineError::Parquet {
                file: url.to_string(),
                what,
            })?;
            let read = ArrowReaderMetadata::try_new(footer, ArrowReaderOptions::new())
                .map_err(parquet_err)?;
            if let Some(key) = key {
                keep_footer(key, &read);
            }
            read
        }
    };
    let _ = source.chunks.set(chunk_codecs(plain.metadata()));
    let schema = plain.schema();
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .map(|f| {
            if as_dictionary.contains(&f.name().as_str())
                && f.data_type() == &DataType::Utf8
                && dictionary_encoded_throughout(plain.metadata(), f.name())
            {
                Arc::new(
                    Field::new(
                        f.name(),
                        DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                        f.is_nullable(),
                    )
                    .with_metadata(f.metadata().clone()),
                )
            } else {
                f.clone()
            }
        })
        .collect();
    let wanted = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    let metadata = ArrowReaderMetadata::try_new(
        plain.metadata().clone(),
        ArrowReaderOptions::new().with_schema(wanted),
    )
    .map_err(parquet_err)?;
    Ok(ParquetRecordBatchStreamBuilder::new_with_metadata(
        source, metadata,
    ))
}

/// Each column chunk's bytes and its codec.
fn chunk_codecs(footer: &ParquetMetaData) -> Vec<(Range<u64>, parquet::basic::Compression)> {
    footer
        .row_groups()
        .iter()
        .flat_map(|g| g.columns())
        .map(|c| {
            let (start, len) = c.byte_range();
            (start..start.saturating_add(len), c.compression())
        })
        .collect()
}

/// The checks of a parsed footer of a file of `size` bytes before arrow decodes it: an
/// `ARROW:schema` arrow-ipc would panic on, places outside the file
/// ([`crate::parquet_guard`]).
fn check_parsed_footer(footer: &ParquetMetaData, size: u64) -> std::result::Result<(), String> {
    let schemas = footer
        .file_metadata()
        .key_value_metadata()
        .into_iter()
        .flatten()
        .filter(|kv| kv.key == "ARROW:schema")
        .filter_map(|kv| kv.value.as_deref());
    for value in schemas {
        crate::parquet_guard::check_arrow_schema(value)?;
    }
    crate::parquet_guard::check_layout(footer, size)
}

/// Whether every data page of column `name`, in every row group of the file, is
/// dictionary-encoded, as far as the footer's page encoding statistics say (a file
/// without them is taken to be). A writer falls back to plain pages once a column
/// chunk's dictionary outgrows its limit (about a megabyte: some 60 000 IPv4 address
/// texts), and a dictionary-typed read of such a chunk must build a dictionary of the
/// plain values by hashing them, which costs more than reading them as plain strings
/// does. So such a column is read as plain strings.
fn dictionary_encoded_throughout(metadata: &ParquetMetaData, name: &str) -> bool {
    use parquet::basic::Encoding;
    metadata.row_groups().iter().all(|group| {
        group
            .columns()
            .iter()
            .filter(|c| c.column_path().string() == name)
            .all(|c| match c.page_encoding_stats_mask() {
                None => true,
                Some(mask) => {
                    c.dictionary_page_offset().is_some()
                        && (mask.is_only(Encoding::RLE_DICTIONARY)
                            || mask.is_only(Encoding::PLAIN_DICTIONARY))
                }
            })
    })
}

/// The batches of `stream` (a file's, from [`open`]'s builder), where a panic inside
/// parquet's page decoders (which still panic on some corrupt pages: a bit-packed run
/// past its page, say) ends the stream with an error instead: the file's, naming it
/// through [`parquet_error`], not retried. Every reader of input Parquet reads through
/// this.
pub fn guarded<T, S>(stream: S) -> impl futures::Stream<Item = parquet::errors::Result<T>>
where
    S: futures::Stream<Item = parquet::errors::Result<T>>,
{
    use futures::StreamExt;
    std::panic::AssertUnwindSafe(stream)
        .catch_unwind()
        .map(|polled| {
            polled.unwrap_or_else(|panic| {
                Err(ParquetError::General(format!(
                    "a page does not decode (parquet's decoder failed: {})",
                    crate::error::panic_message(panic.as_ref())
                )))
            })
        })
}

/// The index of column `name` in `schema` (of Parquet file `file`); a schema error
/// naming the file and listing the columns it has when there is none.
pub fn column_index(schema: &Schema, file: &str, name: &str) -> Result<usize> {
    schema.index_of(name).map_err(|_| EngineError::Schema {
        file: file.to_string(),
        what: format!(
            "no column {name:?} (columns: {:?})",
            schema.fields().iter().map(|f| f.name()).collect::<Vec<_>>()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The footer of a Parquet file of `rows` texts, of which `distinct` differ, written
    /// with a dictionary page limit of `dictionary_limit` bytes.
    fn footer(rows: usize, distinct: usize, dictionary_limit: usize) -> ParquetMetaData {
        use arrow::array::{ArrayRef, RecordBatch, StringArray};
        let texts: ArrayRef =
            Arc::new(StringArray::from_iter_values((0..rows).map(|i| {
                format!("10.0.{}.{}", i % distinct / 256, i % distinct % 256)
            })));
        let batch = RecordBatch::try_from_iter([("src_addr", texts)]).unwrap();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_dictionary_page_size_limit(dictionary_limit)
            .set_max_row_group_row_count(Some(rows / 2))
            .build();
        ParquetMetaDataReader::new()
            .parse_and_finish(&Bytes::from(written(&batch, props)))
            .unwrap()
    }

    /// `batch` as a Parquet file written with `props`.
    fn written(
        batch: &arrow::array::RecordBatch,
        props: parquet::file::properties::WriterProperties,
    ) -> Vec<u8> {
        let mut file = Vec::new();
        let mut writer =
            parquet::arrow::ArrowWriter::try_new(&mut file, batch.schema(), Some(props)).unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
        file
    }

    #[test]
    fn a_column_read_as_dictionary_only_where_its_pages_are_dictionary_encoded() {
        // Few distinct values: every page of both row groups uses the dictionary.
        let fits = footer(20_000, 300, 1 << 20);
        assert_eq!(fits.num_row_groups(), 2);
        assert!(fits
            .row_group(1)
            .column(0)
            .page_encoding_stats_mask()
            .is_some());
        assert!(dictionary_encoded_throughout(&fits, "src_addr"));
        // Many distinct values past a small dictionary limit: the writer falls back to
        // plain pages.
        let overflows = footer(20_000, 20_000, 4 << 10);
        assert!(!dictionary_encoded_throughout(&overflows, "src_addr"));
        // A column the file lacks is left to the reader's own error.
        assert!(dictionary_encoded_throughout(&fits, "dst_addr"));
    }

    /// A file as writers make them (several row groups of several pages, dictionary
    /// and plain pages, statistics, offset indexes, zstd) with a footer longer than the
    /// first read: it reads whole through the checks, with and without page locations.
    #[tokio::test]
    async fn a_file_with_page_indexes_and_a_long_footer_reads_whole_through_the_checks() {
        use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
        use futures::TryStreamExt;
        let rows = 50_000;
        let texts: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..rows).map(|i| format!("10.{}.{}", i % 700, i % 13)),
        ));
        let numbers: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows as i64));
        let batch = RecordBatch::try_from_iter([("src_addr", texts), ("n", numbers)]).unwrap();
        let long = parquet::file::metadata::KeyValue::new("note".into(), "x".repeat(100 << 10));
        let props = parquet::file::properties::WriterProperties::builder()
            .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
            .set_max_row_group_row_count(Some(20_000))
            .set_data_page_row_count_limit(2_000)
            .set_write_batch_size(1_000)
            .set_dictionary_page_size_limit(4 << 10)
            .set_key_value_metadata(Some(vec![long]))
            .build();
        let file = written(&batch, props);
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let path = Path::from("in/f.parquet");
        object_store::ObjectStoreExt::put(&store, &path, file.clone().into())
            .await
            .unwrap();
        for pages in [false, true] {
            let at = FileIn {
                store: store.clone(),
                path: path.clone(),
                url: "mem://in/f.parquet",
            };
            let builder = open_in(at, file.len() as u64, None, &[], pages)
                .await
                .unwrap();
            assert_eq!(builder.metadata().num_row_groups(), 3);
            assert_eq!(builder.metadata().offset_index().is_some(), pages);
            let read: Vec<RecordBatch> = builder.build().unwrap().try_collect().await.unwrap();
            let read = arrow::compute::concat_batches(&batch.schema(), &read).unwrap();
            assert_eq!(read, batch, "with page locations: {pages}");
        }
    }

    /// parquet decompresses a Brotli page with a decoder that allocates the stream's
    /// whole window, up to 1 GiB in the large-window format, whatever the page holds.
    #[tokio::test]
    async fn a_brotli_page_declaring_a_large_window_is_refused_naming_the_file() {
        use arrow::array::{ArrayRef, Int64Array, RecordBatch};
        use futures::TryStreamExt;
        let numbers: ArrayRef = Arc::new(Int64Array::from_iter_values(0..10_000));
        let batch = RecordBatch::try_from_iter([("n", numbers)]).unwrap();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_compression(parquet::basic::Compression::BROTLI(Default::default()))
            .set_dictionary_enabled(false)
            .build();
        let mut file = written(&batch, props);
        // The first page's stream: where, after its page header, 80 000 bytes decode.
        let decodes = |at: usize| {
            let mut blob = vec![0x80, 0xf1, 0x04];
            blob.extend_from_slice(&file[at..]);
            probeflow_reader::array_record::chunk::Decompressor::default()
                .decompress(b'b', &blob, 80_000, &mut Vec::new())
                .is_ok()
        };
        let at = (5..100).find(|&at| decodes(at)).unwrap();
        file[at] = 0x11;
        file[at + 1] = 0x1e;
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let path = Path::from("in/f.parquet");
        object_store::ObjectStoreExt::put(&store, &path, file.clone().into())
            .await
            .unwrap();
        let at = FileIn {
            store,
            path,
            url: "mem://in/f.parquet",
        };
        let builder = open_in(at, file.len() as u64, None, &[], false)
            .await
            .unwrap();
        let read: Result<Vec<RecordBatch>, _> = builder.build().unwrap().try_collect().await;
        let e = read.unwrap_err().to_string();
        assert!(
            e.contains("mem://in/f.parquet") && e.contains("window of 2^30"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_column_names_the_file_and_the_columns_there_are() {
        let schema = Schema::new(vec![
            Field::new("text", DataType::Utf8, true),
            Field::new("id", DataType::Int64, true),
        ]);
        assert_eq!(column_index(&schema, "s3://b/x.parquet", "id").unwrap(), 1);
        match column_index(&schema, "s3://b/x.parquet", "body") {
            Err(EngineError::Schema { file, what }) => {
                assert_eq!(file, "s3://b/x.parquet");
                assert_eq!(what, r#"no column "body" (columns: ["text", "id"])"#);
            }
            other => panic!("{other:?}"),
        }
    }
}
