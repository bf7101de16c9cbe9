//! Object-store URLs (`s3://bucket/prefix`, `gs://bucket/prefix`) and this process's
//! client for them.
//!
//! [`object_store_for`] turns a scheme and bucket into an `object_store` store, with
//! credentials and endpoints from the usual environment variables (`AWS_*`, such as
//! `AWS_ENDPOINT_URL` for S3-compatible servers, and `GOOGLE_*`); the preprocessing job
//! builds its stores with the same function. A [`Bucket`] is one such store with the
//! requests the reader makes (get, exists, download), run on this process's small
//! tokio runtime; after a `fork` the child builds its own runtime and stores (the
//! parent's runtime threads and pooled connections are not the child's to use).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use object_store::path::Path as ObjectPath;
use object_store::{ClientConfigKey, ObjectStore, ObjectStoreExt, RetryConfig};

use crate::error::{Error, Result};
use crate::output::remote_scheme;

/// The environment variable that sets [`retry_budget`], in seconds.
pub const RETRY_BUDGET_VARIABLE: &str = "PROBEFLOW_STORE_RETRY_SECONDS";

/// How long one store request may take, its retries included, by default: then it
/// fails, and the task or read that made it fails with it (object_store's own default,
/// 3 minutes, kept a worker cut off from the store holding its task's lease that long).
pub const DEFAULT_RETRY_BUDGET: Duration = Duration::from_secs(60);

/// The longest a single try of a request may take (object_store's default); a budget
/// below it bounds each try too.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one store request may take, its retries (SlowDown, 5xx, resets, timeouts)
/// included: [`RETRY_BUDGET_VARIABLE`] if set, else [`DEFAULT_RETRY_BUDGET`].
pub fn retry_budget() -> std::result::Result<Duration, String> {
    parse_retry_budget(std::env::var(RETRY_BUDGET_VARIABLE).ok().as_deref())
}

/// [`retry_budget`] from the variable's value, if set.
fn parse_retry_budget(value: Option<&str>) -> std::result::Result<Duration, String> {
    let Some(v) = value else {
        return Ok(DEFAULT_RETRY_BUDGET);
    };
    match v.trim().parse::<f64>() {
        Ok(s) if (1.0..=3600.0).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!(
            "{RETRY_BUDGET_VARIABLE}={v:?}: expected seconds, from 1 to 3600"
        )),
    }
}

/// The store of `bucket` under `scheme` (`s3://` or `gs://`), configured from the
/// environment, or of the web server `bucket` (`host[:port]`) under `https://` (the
/// preprocessing job's read-only input files), its requests bounded by
/// [`retry_budget`]; the reason when it cannot be built.
pub fn object_store_for(
    scheme: &str,
    bucket: &str,
) -> std::result::Result<Arc<dyn ObjectStore>, String> {
    if bucket.is_empty() {
        return Err("no bucket (or host) name".into());
    }
    let budget = retry_budget()?;
    let retry = RetryConfig {
        retry_timeout: budget,
        ..RetryConfig::default()
    };
    let timeout = format!("{}ms", budget.min(REQUEST_TIMEOUT).as_millis());
    match scheme {
        "s3://" => Ok(Arc::new(
            object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_retry(retry)
                .with_http_connector(super::requests::ObservedConnector)
                .with_config(
                    object_store::aws::AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
                    timeout,
                )
                .build()
                .map_err(|e| e.to_string())?,
        )),
        "gs://" => Ok(Arc::new(
            object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(bucket)
                .with_retry(retry)
                .with_http_connector(super::requests::ObservedConnector)
                .with_config(
                    object_store::gcp::GoogleConfigKey::Client(ClientConfigKey::Timeout),
                    timeout,
                )
                .build()
                .map_err(|e| e.to_string())?,
        )),
        "https://" => Ok(Arc::new(
            object_store::http::HttpBuilder::new()
                .with_url(format!("https://{bucket}"))
                .with_retry(retry)
                .with_http_connector(super::requests::ObservedConnector)
                .with_config(ClientConfigKey::Timeout, timeout)
                .build()
                .map_err(|e| e.to_string())?,
        )),
        other => Err(format!(
            "unsupported scheme {other:?} (s3://, gs:// or https://)"
        )),
    }
}

/// An object (or a prefix) in an object store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteUrl {
    scheme: &'static str,
    bucket: String,
    path: ObjectPath,
}

impl RemoteUrl {
    /// Parses `s3://bucket/key` or `gs://bucket/key`.
    pub fn parse(url: &str) -> Result<RemoteUrl> {
        let bad = |what: String| Error::Remote {
            url: url.to_string(),
            what,
        };
        let scheme = remote_scheme(url).ok_or_else(|| bad("not an s3:// or gs:// URL".into()))?;
        let rest = &url[scheme.len()..];
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(bad("no bucket name".into()));
        }
        let path = ObjectPath::parse(key.trim_end_matches('/')).map_err(|e| bad(e.to_string()))?;
        Ok(RemoteUrl {
            scheme,
            bucket: bucket.to_string(),
            path,
        })
    }

    /// `rel` (slash-separated, relative) under this URL.
    pub fn child(&self, rel: &str) -> RemoteUrl {
        let mut path = self.path.clone();
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            path = path.clone().join(part);
        }
        RemoteUrl {
            path,
            ..self.clone()
        }
    }

    /// The last segment of the path (`manifest.json`, a shard's name).
    pub fn file_name(&self) -> Option<&str> {
        self.path.filename()
    }

    /// The URL one level up.
    pub fn parent(&self) -> RemoteUrl {
        let parts: Vec<_> = self.path.parts().collect();
        let path = match parts.split_last() {
            Some((_, init)) => ObjectPath::from_iter(init.iter().cloned()),
            None => self.path.clone(),
        };
        RemoteUrl {
            path,
            ..self.clone()
        }
    }
}

impl std::fmt::Display for RemoteUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.as_ref().is_empty() {
            write!(f, "{}{}", self.scheme, self.bucket)
        } else {
            write!(f, "{}{}/{}", self.scheme, self.bucket, self.path)
        }
    }
}

/// Bytes per ranged request of a download.
pub const PART_BYTES: u64 = 32 << 20;

/// One bucket's store. It is built from the environment when the bucket is first
/// opened, and again in a forked child (a parent's pooled connections are not the
/// child's to use).
pub struct Bucket {
    scheme: &'static str,
    bucket: String,
    store: Mutex<(u32, Arc<dyn ObjectStore>)>,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bucket({}{})", self.scheme, self.bucket)
    }
}

/// This process's download runtime: (pid, runtime).
static RUNTIME: Mutex<Option<(u32, Arc<tokio::runtime::Runtime>)>> = Mutex::new(None);

fn remote_err(url: &RemoteUrl, e: impl std::fmt::Display) -> Error {
    Error::Remote {
        url: url.to_string(),
        what: e.to_string(),
    }
}

/// A store error as the reader's error: "not found" as the I/O error it is locally.
fn store_err(url: &RemoteUrl, e: object_store::Error) -> Error {
    match e {
        object_store::Error::NotFound { .. } => Error::Io {
            path: url.to_string().into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        },
        e => remote_err(url, e),
    }
}

/// This process's runtime (a new one in a forked child).
fn runtime() -> Result<Arc<tokio::runtime::Runtime>> {
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if let Some((p, rt)) = slot.as_ref() {
        if *p == pid {
            return Ok(rt.clone());
        }
    }
    if let Some(parents) = slot.take() {
        // The parent's runtime threads do not exist here; dropping it would wait for
        // them.
        std::mem::forget(parents);
    }
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("probeflow-fetch")
            .enable_all()
            .build()
            .map_err(|e| Error::Remote {
                url: String::new(),
                what: format!("cannot start the download runtime: {e}"),
            })?,
    );
    *slot = Some((pid, rt.clone()));
    Ok(rt)
}

impl Bucket {
    /// The bucket of `url`, its store configured from the environment now.
    pub fn open(url: &RemoteUrl) -> Result<Arc<Bucket>> {
        let store = object_store_for(url.scheme, &url.bucket).map_err(|e| remote_err(url, e))?;
        Ok(Arc::new(Bucket {
            scheme: url.scheme,
            bucket: url.bucket.clone(),
            store: Mutex::new((std::process::id(), store)),
        }))
    }

    /// The bucket of `url`, opened once per process and shared by later calls (the
    /// reports' ranged reads: one client, and its connections, for every range of an
    /// object rather than one per range).
    pub fn shared(url: &RemoteUrl) -> Result<Arc<Bucket>> {
        static OPEN: Mutex<Vec<Arc<Bucket>>> = Mutex::new(Vec::new());
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = open
            .iter()
            .find(|b| b.scheme == url.scheme && b.bucket == url.bucket)
        {
            return Ok(b.clone());
        }
        let bucket = Bucket::open(url)?;
        open.push(bucket.clone());
        Ok(bucket)
    }

    /// The bucket of `url` served by `store` (tests: an in-memory store).
    #[cfg(test)]
    pub(crate) fn with_store(url: &RemoteUrl, store: Arc<dyn ObjectStore>) -> Arc<Bucket> {
        Arc::new(Bucket {
            scheme: url.scheme,
            bucket: url.bucket.clone(),
            store: Mutex::new((std::process::id(), store)),
        })
    }

    fn store(&self, url: &RemoteUrl) -> Result<Arc<dyn ObjectStore>> {
        debug_assert!(url.scheme == self.scheme && url.bucket == self.bucket);
        let mut slot = self.store.lock().unwrap_or_else(|e| e.into_inner());
        let pid = std::process::id();
        if slot.0 != pid {
            let store =
                object_store_for(self.scheme, &self.bucket).map_err(|e| remote_err(url, e))?;
            let parents = std::mem::replace(&mut *slot, (pid, store));
            std::mem::forget(parents);
        }
        Ok(slot.1.clone())
    }

    /// The whole object (a manifest: small).
    pub fn get(&self, url: &RemoteUrl) -> Result<Vec<u8>> {
        let store = self.store(url)?;
        runtime()?.block_on(async {
            let got = store.get(&url.path).await.map_err(|e| store_err(url, e))?;
            let bytes = got.bytes().await.map_err(|e| store_err(url, e))?;
            Ok(bytes.to_vec())
        })
    }

    /// The object's size in bytes.
    pub fn size(&self, url: &RemoteUrl) -> Result<u64> {
        let store = self.store(url)?;
        runtime()?.block_on(async {
            let meta = store.head(&url.path).await.map_err(|e| store_err(url, e))?;
            Ok(meta.size)
        })
    }

    /// Bytes `range` of the object (one ranged request, retried by the client); fewer
    /// bytes than asked for is an error naming the object.
    pub fn get_range(&self, url: &RemoteUrl, range: std::ops::Range<u64>) -> Result<Vec<u8>> {
        let store = self.store(url)?;
        runtime()?
            .block_on(fetch_range(store.as_ref(), url, range))
            .map(|part| part.as_ref().to_vec())
    }

    /// Whether the object exists.
    pub fn exists(&self, url: &RemoteUrl) -> Result<bool> {
        let store = self.store(url)?;
        runtime()?.block_on(async {
            match store.head(&url.path).await {
                Ok(_) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(remote_err(url, e)),
            }
        })
    }

    /// Downloads the object into `sink`, hashing it, in ranged requests of
    /// [`PART_BYTES`] (each well within the client's per-request timeout, and retried on
    /// its own); its size. An object whose size is not `size` is not downloaded: its
    /// size is returned for the caller to refuse.
    pub fn download(
        &self,
        url: &RemoteUrl,
        size: u64,
        sink: &mut std::fs::File,
        sink_path: &std::path::Path,
        hasher: &mut blake3::Hasher,
    ) -> Result<u64> {
        self.download_in_parts(url, size, PART_BYTES, sink, sink_path, hasher)
    }

    fn download_in_parts(
        &self,
        url: &RemoteUrl,
        size: u64,
        part_bytes: u64,
        sink: &mut std::fs::File,
        sink_path: &std::path::Path,
        hasher: &mut blake3::Hasher,
    ) -> Result<u64> {
        let store = self.store(url)?;
        runtime()?.block_on(async {
            let meta = store.head(&url.path).await.map_err(|e| store_err(url, e))?;
            if meta.size != size {
                return Ok(meta.size);
            }
            let mut at = 0u64;
            while at < size {
                let end = (at + part_bytes).min(size);
                let fetched = fetch_range(store.as_ref(), url, at..end).await?;
                let part = fetched.as_ref();
                sink.write_all(part).map_err(|e| Error::io(sink_path, e))?;
                hasher.update(part);
                at = end;
            }
            Ok(at)
        })
    }
}

/// Bytes `range` of `url`'s object: one ranged request; fewer bytes than asked for is an
/// error naming the object.
async fn fetch_range(
    store: &dyn ObjectStore,
    url: &RemoteUrl,
    range: std::ops::Range<u64>,
) -> Result<impl AsRef<[u8]>> {
    let part = store
        .get_range(&url.path, range.clone())
        .await
        .map_err(|e| store_err(url, e))?;
    if part.len() as u64 != range.end - range.start {
        return Err(remote_err(
            url,
            format!(
                "asked for bytes {}..{}, got {} bytes",
                range.start,
                range.end,
                part.len()
            ),
        ));
    }
    Ok(part)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_budget_is_seconds_from_1_to_3600_with_a_default() {
        assert_eq!(parse_retry_budget(None), Ok(DEFAULT_RETRY_BUDGET));
        assert_eq!(parse_retry_budget(Some(" 5 ")), Ok(Duration::from_secs(5)));
        assert_eq!(
            parse_retry_budget(Some("2.5")),
            Ok(Duration::from_millis(2500))
        );
        for bad in ["0", "0.5", "3601", "NaN", "inf", "5s", ""] {
            let err = parse_retry_budget(Some(bad)).unwrap_err();
            assert!(
                err.contains(RETRY_BUDGET_VARIABLE) && err.contains("1 to 3600"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn urls_parse_and_compose() {
        let u = RemoteUrl::parse("s3://bucket/runs/out/").unwrap();
        assert_eq!(u.to_string(), "s3://bucket/runs/out");
        let m = u.child("train/shard-00000-of-00004.array_record");
        assert_eq!(
            m.to_string(),
            "s3://bucket/runs/out/train/shard-00000-of-00004.array_record"
        );
        assert_eq!(m.file_name(), Some("shard-00000-of-00004.array_record"));
        assert_eq!(m.parent().parent(), u);
        assert_eq!(RemoteUrl::parse("gs://b").unwrap().to_string(), "gs://b");
        for bad in ["s3://", "s3:///x", "http://b/x", "out/train"] {
            assert!(RemoteUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_download_in_parts_is_the_whole_object_and_a_size_mismatch_downloads_nothing() {
        let url = RemoteUrl::parse("s3://test-bucket/out/train/x").unwrap();
        let memory = Arc::new(object_store::memory::InMemory::new());
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(memory.put(&url.path, data.clone().into()))
            .unwrap();
        let bucket = Bucket::with_store(&url, memory);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        for part in [7, 1000, 4096] {
            let mut sink = std::fs::File::create(&path).unwrap();
            let mut hasher = blake3::Hasher::new();
            let got = bucket
                .download_in_parts(&url, 1000, part, &mut sink, &path, &mut hasher)
                .unwrap();
            assert_eq!(got, 1000);
            assert_eq!(std::fs::read(&path).unwrap(), data, "parts of {part}");
            assert_eq!(hasher.finalize(), blake3::hash(&data));
        }
        let mut sink = std::fs::File::create(&path).unwrap();
        let got = bucket
            .download_in_parts(&url, 999, 7, &mut sink, &path, &mut blake3::Hasher::new())
            .unwrap();
        assert_eq!(got, 1000);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }
}
