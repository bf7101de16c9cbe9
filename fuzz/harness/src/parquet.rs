//! Parquet input: any bytes as an input file read through an in-memory store, every
//! batch; the checks made before arrow-rs decodes a footer; an `ARROW:schema` the
//! check passes must decode in arrow-ipc without a panic.

use std::sync::{Arc, OnceLock};

use futures::StreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use probeflow_engine::parquet_guard::{check_arrow_schema, check_footer, check_pages_of};
use probeflow_engine::parquet_source::{open_in, parquet_error, FileIn};

use super::split_first;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
    })
}

/// Lets a panic raised inside a dependency's code (parquet's, arrow's, or what they
/// call: `bytes`, the codecs) unwind, so that
/// [`probeflow_engine::parquet_source::guarded`] turns it into the file's error as it
/// does in production (libFuzzer's hook would abort first). A panic in probeflow's own
/// code aborts at once as before, and one of theirs that nothing guards still ends the
/// run: libFuzzer reports any panic that leaves the target.
fn let_guarded_panics_unwind() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let fuzzer = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let theirs = info
                .location()
                .is_some_and(|l| l.file().contains("/registry/src/"));
            if !theirs {
                fuzzer(info);
            }
        }));
    });
}

/// Reads `data` as an input Parquet file, the way a map task does (with page indexes
/// and dictionary-typed columns when `data[0]` says), every batch.
pub fn input(data: &[u8]) {
    let_guarded_panics_unwind();
    let (flags, file) = split_first(data);
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let path = Path::from("in/fuzz.parquet");
    let url = "memory:///in/fuzz.parquet";
    runtime().block_on(async {
        let bytes = bytes::Bytes::copy_from_slice(file);
        store
            .put(&path, bytes.into())
            .await
            .expect("an in-memory put");
        let dictionary: &[&str] = if flags & 2 != 0 {
            &["src_addr", "dst_addr"]
        } else {
            &[]
        };
        let at = FileIn { store, path, url };
        let Ok(builder) = open_in(at, file.len() as u64, None, dictionary, flags & 1 != 0).await
        else {
            return;
        };
        let Ok(stream) = builder.with_batch_size(1024).build() else {
            return;
        };
        let mut stream = std::pin::pin!(probeflow_engine::parquet_source::guarded(stream));
        while let Some(batch) = stream.next().await {
            if let Err(e) = batch {
                let e = parquet_error(url, e);
                assert!(e.to_string().contains(url), "{e}");
                return;
            }
        }
    });
}

/// The footer and page checks on any bytes (as pages of a plain, a zero-filling and a
/// windowed codec).
pub fn footer(data: &[u8]) {
    use parquet::basic::Compression;
    let _ = check_footer(data);
    for codec in [
        Compression::UNCOMPRESSED,
        Compression::SNAPPY,
        Compression::BROTLI(Default::default()),
    ] {
        let _ = check_pages_of(data, codec);
    }
}

/// `data` as an `ARROW:schema` value: when the check passes and parquet would decode
/// it, arrow-ipc's decoder runs (a panic there is a hole in the check).
pub fn arrow_schema(data: &[u8]) {
    use base64::Engine;
    let value = base64::engine::general_purpose::STANDARD.encode(data);
    if check_arrow_schema(&value).is_err() {
        return;
    }
    let message = if data.len() > 8 && data[0..4] == [255u8; 4] {
        &data[8..]
    } else {
        data
    };
    if let Ok(message) = arrow::ipc::root_as_message(message) {
        if let Some(schema) = message.header_as_schema() {
            std::hint::black_box(arrow::ipc::convert::fb_to_schema(schema));
        }
    }
}
