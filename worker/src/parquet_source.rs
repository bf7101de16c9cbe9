//! Parquet input over `object_store`: an [`AsyncFileReader`] that fetches the footer and
//! the projected column chunks with range reads, and names its file in every error.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStreamBuilder};
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use crate::error::{Result, WorkerError};
use crate::store::StoreUrl;

/// One input Parquet file in an object store.
pub struct ParquetSource {
    store: Arc<dyn ObjectStore>,
    path: Path,
    size: u64,
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
            let metadata = ParquetMetaDataReader::new()
                .with_prefetch_hint(Some(64 * 1024))
                .load_and_finish(self, size)
                .await?;
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}

/// Opens an input file (reads its footer) as a record-batch stream builder.
pub async fn open(url: &str, size: u64) -> Result<ParquetRecordBatchStreamBuilder<ParquetSource>> {
    let loc = StoreUrl::parse(url)?;
    let source = ParquetSource {
        store: loc.store.clone(),
        path: loc.root.clone(),
        size,
    };
    ParquetRecordBatchStreamBuilder::new(source)
        .await
        .map_err(|e| WorkerError::Parquet {
            file: url.to_string(),
            what: e.to_string(),
        })
}
