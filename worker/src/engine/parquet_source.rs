//! Parquet input over `object_store`: an [`AsyncFileReader`] that fetches the footer and
//! the projected column chunks with range reads, and names its file in every error.

use std::ops::Range;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, Schema};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStreamBuilder};
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};

use crate::engine::store::StoreUrl;
use crate::error::{Result, WorkerError};

/// One input Parquet file in an object store.
pub struct ParquetSource {
    store: Arc<dyn ObjectStore>,
    path: Path,
    size: u64,
    /// Whether to load the offset index (page locations), when the file has one: it
    /// lets a row range be read without fetching its row group's whole column chunks.
    pages: bool,
}

fn external(e: object_store::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl AsyncFileReader for ParquetSource {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            self.store
                .get_range(&self.path, range)
                .await
                .map_err(external)
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            self.store
                .get_ranges(&self.path, &ranges)
                .await
                .map_err(external)
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let size = self.size;
            let pages = if self.pages {
                PageIndexPolicy::Optional
            } else {
                PageIndexPolicy::Skip
            };
            let metadata = ParquetMetaDataReader::new()
                .with_prefetch_hint(Some(64 * 1024))
                .with_offset_index_policy(pages)
                .load_and_finish(self, size)
                .await?;
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}

/// Opens an input file (reads its footer) as a record-batch stream builder. Utf8
/// columns named in `as_dictionary` are read as `Dictionary(Int32, Utf8)`, keeping
/// Parquet's dictionary encoding so each distinct value can be handled once.
pub async fn open(
    url: &str,
    size: u64,
    as_dictionary: &[&str],
    pages: bool,
) -> Result<ParquetRecordBatchStreamBuilder<ParquetSource>> {
    let parquet_err = |e: ParquetError| WorkerError::Parquet {
        file: url.to_string(),
        what: e.to_string(),
    };
    let loc = StoreUrl::parse(url)?;
    let mut source = ParquetSource {
        store: loc.store.clone(),
        path: loc.root.clone(),
        size,
        pages,
    };
    let plain = ArrowReaderMetadata::load_async(&mut source, ArrowReaderOptions::new())
        .await
        .map_err(parquet_err)?;
    let schema = plain.schema();
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .map(|f| {
            if as_dictionary.contains(&f.name().as_str()) && f.data_type() == &DataType::Utf8 {
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

/// The index of column `name` in `schema` (of Parquet file `file`); a schema error
/// naming the file and listing the columns it has when there is none.
pub fn column_index(schema: &Schema, file: &str, name: &str) -> Result<usize> {
    schema.index_of(name).map_err(|_| WorkerError::Schema {
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

    #[test]
    fn a_missing_column_names_the_file_and_the_columns_there_are() {
        let schema = Schema::new(vec![
            Field::new("text", DataType::Utf8, true),
            Field::new("id", DataType::Int64, true),
        ]);
        assert_eq!(column_index(&schema, "s3://b/x.parquet", "id").unwrap(), 1);
        match column_index(&schema, "s3://b/x.parquet", "body") {
            Err(WorkerError::Schema { file, what }) => {
                assert_eq!(file, "s3://b/x.parquet");
                assert_eq!(what, r#"no column "body" (columns: ["text", "id"])"#);
            }
            other => panic!("{other:?}"),
        }
    }
}
