//! Object-store locations: every input, intermediate and output byte goes through
//! `object_store`, so local paths, `file://`, `s3://` (and S3-compatible servers via the
//! usual `AWS_*` environment variables such as `AWS_ENDPOINT_URL`) and `gs://` (the
//! `GOOGLE_*` variables) work alike; an input file may also be an `https://` URL (read
//! only: [`StoreUrl::parse_input`]).
//!
//! A [`StoreUrl`] is a store plus a root path; [`list_matching_in`] expands a
//! trailing glob (`*`, `?`) in the input URL.
//!
//! Durability and atomicity are the same on every store: a [`StoreUrl::put`] has
//! reached stable storage when it returns (object stores acknowledge durable writes;
//! on a local disk the file and its directory are fsynced after the atomic rename),
//! [`StoreUrl::put_if_absent`] creates an object only if there is none (S3 and GCS
//! preconditions, `O_EXCL`-style creation locally), and [`StoreUrl::replace_if`]
//! overwrites an object only if it is still the [`Revision`] the caller read (S3/GCS
//! `If-Match`/generation; locally a compare under an exclusive file lock).

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion,
    WriteMultipart,
};

use crate::error::{EngineError, Result};

/// A location in an object store: the store and a root path within it.
#[derive(Clone)]
pub struct StoreUrl {
    pub url: String,
    pub store: Arc<dyn ObjectStore>,
    pub root: Path,
    /// `s3://`, `gs://` or `https://`; `None` for the local file system.
    scheme: Option<&'static str>,
    /// How this URL's revisions name ETags in `If-Match` ([`crate::conditional_writes`]).
    etag_form: EtagForm,
}

/// How a store wants the ETag of `If-Match` on PUT: as it returned it (`"…"`, quoted, as
/// HTTP says and AWS S3 does), or bare (Ceph RGW 16 compares the header to its stored
/// ETag, which has no quotes). Found by [`crate::conditional_writes::check`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EtagForm {
    #[default]
    Quoted,
    Bare,
}

/// The scheme of input files served over HTTPS.
const HTTPS: &str = "https://";

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreUrl({})", self.url)
    }
}

impl StoreUrl {
    /// Parses a local path, `file://…`, `s3://bucket/prefix` or `gs://bucket/prefix`: a
    /// place that can be written (an output, scratch) as well as read.
    pub fn parse(url: &str) -> Result<StoreUrl> {
        if url.starts_with(HTTPS) {
            // The job file's problem (exit 2), found before anything runs.
            return Err(EngineError::Spec {
                file: url.to_string(),
                what: "https:// serves input files only; an output needs a local path, \
                       file://, s3:// or gs://"
                    .into(),
            });
        }
        Self::parse_input(url)
    }

    /// Parses what [`StoreUrl::parse`] does, or an input file's `https://host[:port]/path`
    /// (read with GET and HEAD; its server is trusted through the system's certificates,
    /// or `SSL_CERT_FILE`).
    pub fn parse_input(url: &str) -> Result<StoreUrl> {
        let bad = |what: String| EngineError::Url {
            url: url.to_string(),
            what,
        };
        if url.is_empty() {
            return Err(bad("empty".into()));
        }
        for scheme in probeflow_reader::output::REMOTE_SCHEMES
            .into_iter()
            .chain([HTTPS])
        {
            let Some(rest) = url.strip_prefix(scheme) else {
                continue;
            };
            let bucket = rest.split('/').next().unwrap_or_default();
            let store =
                probeflow_reader::remote::store::object_store_for(scheme, bucket).map_err(bad)?;
            let root = Path::parse(rest.strip_prefix(bucket).unwrap_or_default())
                .map_err(|e| bad(e.to_string()))?;
            return Ok(StoreUrl {
                url: url.to_string(),
                store,
                root,
                scheme: Some(scheme),
                etag_form: EtagForm::default(),
            });
        }
        if url.contains("://") && !url.starts_with("file://") {
            return Err(bad(
                "unsupported scheme (use a local path, file://, s3:// or gs://; an input \
                 file may be https://)"
                    .into(),
            ));
        }
        let local = url.strip_prefix("file://").unwrap_or(url);
        let abs = std::path::absolute(local).map_err(|e| bad(e.to_string()))?;
        let root = Path::from_absolute_path(&abs).map_err(|e| bad(e.to_string()))?;
        Ok(StoreUrl {
            url: abs.display().to_string(),
            store: Arc::new(object_store::local::LocalFileSystem::new()),
            root,
            scheme: None,
            etag_form: EtagForm::default(),
        })
    }

    /// Whether this is a file served over `https://` (one file: no listing, no writes).
    pub fn is_https(&self) -> bool {
        self.scheme == Some(HTTPS)
    }

    /// The path `rel` (slash-separated) under the root.
    pub fn child(&self, rel: &str) -> Path {
        let mut p = self.root.clone();
        for part in rel.split('/').filter(|s| !s.is_empty()) {
            p = p.clone().join(part);
        }
        p
    }

    /// Whether this is an object store (S3, GCS), not a local directory.
    pub fn is_object_store(&self) -> bool {
        matches!(self.scheme, Some(s) if s != HTTPS)
    }

    /// This URL, its revisions naming ETags in `form` from now on.
    pub fn with_etag_form(mut self, form: EtagForm) -> StoreUrl {
        self.etag_form = form;
        self
    }

    /// How this URL's revisions name ETags in `If-Match`.
    pub fn etag_form(&self) -> EtagForm {
        self.etag_form
    }

    /// `location` relative to the root (slash-separated, no leading slash).
    pub fn relative(&self, location: &Path) -> String {
        location
            .as_ref()
            .strip_prefix(self.root.as_ref())
            .unwrap_or(location.as_ref())
            .trim_start_matches('/')
            .to_string()
    }

    /// A human-readable name for `path` (for messages).
    pub fn display(&self, path: &Path) -> String {
        if let Some(scheme) = self.scheme {
            let bucket = self.url[scheme.len()..]
                .split('/')
                .next()
                .unwrap_or_default();
            format!("{scheme}{bucket}/{path}")
        } else {
            format!("/{path}")
        }
    }

    /// The local file behind `path`, when this is a local store.
    pub fn local_path(&self, path: &Path) -> Option<std::path::PathBuf> {
        match self.scheme {
            Some(_) => None,
            None => Some(std::path::PathBuf::from(format!("/{path}"))),
        }
    }

    /// Makes a local object durable: fsyncs the file and its directory (no-op on
    /// object stores, whose acknowledged writes are durable). The fsyncs run on the
    /// blocking pool, so that a task's syncs of several files overlap.
    pub async fn sync(&self, path: &Path) -> Result<()> {
        let Some(file) = self.local_path(path) else {
            return Ok(());
        };
        let shown = file.display().to_string();
        tokio::task::spawn_blocking(move || sync_local_file(&file))
            .await
            .map_err(|e| EngineError::Scratch {
                path: shown,
                source: std::io::Error::other(format!("fsync did not complete: {e}")),
            })?
    }

    /// Writes an object atomically and durably.
    pub async fn put(&self, path: &Path, bytes: Vec<u8>) -> Result<()> {
        self.store
            .put(path, PutPayload::from(bytes))
            .await
            .map_err(|e| EngineError::store(self.display(path), e))?;
        self.sync(path).await
    }

    /// Writes `value` as pretty JSON to `rel` (relative to this root), atomically.
    pub async fn put_json<T: serde::Serialize>(&self, rel: &str, value: &T) -> Result<()> {
        let bytes = self.json_bytes(rel, value)?;
        self.put(&self.child(rel), bytes).await
    }

    /// `value` as the pretty JSON [`Self::put_json`] writes to `rel`.
    fn json_bytes<T: serde::Serialize>(&self, rel: &str, value: &T) -> Result<Vec<u8>> {
        serde_json::to_vec_pretty(value).map_err(|e| {
            EngineError::Internal(format!(
                "{}: cannot encode: {e}",
                self.display(&self.child(rel))
            ))
        })
    }

    /// Writes `value` as pretty JSON to `rel` as [`Self::put_json`] does: a final output
    /// file, with its size and digest.
    pub async fn put_json_final<T: serde::Serialize>(
        &self,
        rel: &str,
        value: &T,
    ) -> Result<crate::completion::OutputFile> {
        let bytes = self.json_bytes(rel, value)?;
        let file = crate::completion::OutputFile::of(rel, &bytes);
        self.put(&self.child(rel), bytes).await?;
        Ok(file)
    }

    /// Reads `rel` (relative to this root) as JSON; `None` if it does not exist. A file
    /// that does not decode is an error naming it.
    pub async fn get_json<T: serde::de::DeserializeOwned>(&self, rel: &str) -> Result<Option<T>> {
        let path = self.child(rel);
        match self.get_opt(&path).await? {
            None => Ok(None),
            Some(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| EngineError::Corrupt {
                        file: self.display(&path),
                        what: e.to_string(),
                    })
            }
        }
    }

    /// Starts writing an object in parts: see [`PartWriter`].
    pub fn put_in_parts(&self, path: Path) -> PartWriter {
        PartWriter {
            url: self.clone(),
            path,
            buffer: Vec::new(),
            upload: None,
        }
    }

    /// Creates an object only if none exists at `path`: `Ok(None)` if one does.
    pub async fn put_if_absent(&self, path: &Path, bytes: Vec<u8>) -> Result<Option<Revision>> {
        let content = bytes.clone();
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self
            .store
            .put_opts(path, PutPayload::from(bytes), opts)
            .await
        {
            Ok(r) => {
                self.sync(path).await?;
                Ok(Some(self.revision(r.e_tag, r.version, content)))
            }
            Err(object_store::Error::AlreadyExists { .. }) => Ok(None),
            Err(e) => Err(EngineError::store(self.display(path), e)),
        }
    }

    /// The object's bytes and revision, or `None` if it does not exist.
    pub async fn get_revision(&self, path: &Path) -> Result<Option<(bytes::Bytes, Revision)>> {
        match self.store.get(path).await {
            Ok(r) => {
                let (e_tag, version) = (r.meta.e_tag.clone(), r.meta.version.clone());
                let bytes = r
                    .bytes()
                    .await
                    .map_err(|e| EngineError::store(self.display(path), e))?;
                let rev = self.revision(e_tag, version, bytes.to_vec());
                Ok(Some((bytes, rev)))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(EngineError::store(self.display(path), e)),
        }
    }

    fn revision(
        &self,
        e_tag: Option<String>,
        version: Option<String>,
        content: Vec<u8>,
    ) -> Revision {
        match self.scheme {
            Some(_) => {
                Revision::Object(UpdateVersion { e_tag, version }).with_etag_form(self.etag_form)
            }
            None => Revision::Local(content),
        }
    }

    /// Overwrites `path` only if it still is revision `expected`: the new revision, or
    /// `None` if someone else changed (or removed) it since.
    pub async fn replace_if(
        &self,
        path: &Path,
        expected: &Revision,
        bytes: Vec<u8>,
    ) -> Result<Option<Revision>> {
        match expected {
            Revision::Object(v) => {
                let content = bytes.clone();
                let opts = PutOptions {
                    mode: PutMode::Update(v.clone()),
                    ..Default::default()
                };
                match self
                    .store
                    .put_opts(path, PutPayload::from(bytes), opts)
                    .await
                {
                    Ok(r) => Ok(Some(self.revision(r.e_tag, r.version, content))),
                    Err(
                        object_store::Error::Precondition { .. }
                        | object_store::Error::NotFound { .. },
                    ) => Ok(None),
                    Err(e) => Err(EngineError::store(self.display(path), e)),
                }
            }
            Revision::Local(old) => {
                let file = self.local_path(path).unwrap_or_default();
                let io = |e: std::io::Error| EngineError::Scratch {
                    path: file.display().to_string(),
                    source: e,
                };
                // Writers of this object serialise on an exclusive lock of a sidecar file.
                let guard_path = file.with_extension("guard");
                let guard = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&guard_path)
                    .map_err(io)?;
                guard.lock().map_err(io)?;
                let current = match std::fs::read(&file) {
                    Ok(c) => c,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(io(e)),
                };
                if &current != old {
                    return Ok(None);
                }
                self.put(path, bytes.clone()).await?;
                drop(guard);
                Ok(Some(Revision::Local(bytes)))
            }
        }
    }

    /// The object's bytes, or `None` if it does not exist.
    pub async fn get_opt(&self, path: &Path) -> Result<Option<bytes::Bytes>> {
        match self.store.get(path).await {
            Ok(r) => Ok(Some(
                r.bytes()
                    .await
                    .map_err(|e| EngineError::store(self.display(path), e))?,
            )),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(EngineError::store(self.display(path), e)),
        }
    }

    /// Reads the object in the chunks the store gives, handing each to `each` (memory
    /// holds one chunk, whatever the object's size): its size, or `None` if it does not
    /// exist.
    pub async fn read_chunks(
        &self,
        path: &Path,
        mut each: impl FnMut(&[u8]) + Send,
    ) -> Result<Option<u64>> {
        use futures::StreamExt;
        let mut stream = match self.store.get(path).await {
            Ok(r) => r.into_stream(),
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(EngineError::store(self.display(path), e)),
        };
        let mut size = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| EngineError::store(self.display(path), e))?;
            size += chunk.len() as u64;
            each(&chunk);
        }
        Ok(Some(size))
    }

    pub async fn get_range(
        &self,
        path: &Path,
        range: std::ops::Range<u64>,
    ) -> Result<bytes::Bytes> {
        self.store
            .get_range(path, range)
            .await
            .map_err(|e| EngineError::store(self.display(path), e))
    }

    pub async fn exists(&self, path: &Path) -> Result<bool> {
        match self.store.head(path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(EngineError::store(self.display(path), e)),
        }
    }

    /// Objects under `prefix` (relative to the root), sorted by path.
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let p = self.child(prefix);
        let mut found: Vec<ObjectMeta> = match self.store.list(Some(&p)).try_collect().await {
            Ok(v) => v,
            Err(object_store::Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(EngineError::store(self.display(&p), e)),
        };
        found.sort_by(|a, b| a.location.cmp(&b.location));
        Ok(found)
    }

    /// Deletes one object; a missing one is not an error.
    pub async fn delete(&self, path: &Path) -> Result<()> {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(EngineError::store(self.display(path), e)),
        }
    }

    /// Deletes everything under `prefix` (relative to the root).
    pub async fn delete_prefix(&self, prefix: &str) -> Result<()> {
        let found = self.list(prefix).await?;
        self.delete_all(found.into_iter().map(|m| m.location).collect())
            .await
    }

    /// Deletes `paths`; missing ones are not an error. On an object store in bulk
    /// requests (S3: 1 000 keys each, several at once), not one round trip per object:
    /// a job's shuffle files, removed at its end, are thousands.
    ///
    /// A bulk delete is a POST, which the store client does not retry when its
    /// connection fails (a reset, a request that never got an answer); deleting is
    /// idempotent, so such a failure is tried again here, with a doubling wait, within
    /// the store's retry budget (`PROBEFLOW_STORE_RETRY_SECONDS`).
    pub async fn delete_all(&self, paths: Vec<Path>) -> Result<()> {
        let mut retry = ConnectionRetry::new(self)?;
        loop {
            match self.delete_all_once(paths.clone()).await {
                Err(object_store::Error::Generic { store, source }) if retry.allowed() => {
                    tracing::warn!(url = %self.url, store, error = %source, "a bulk delete failed; trying it again");
                    retry.wait().await;
                }
                Err(e) => return Err(EngineError::store(&self.url, e)),
                Ok(()) => return Ok(()),
            }
        }
    }

    async fn delete_all_once(&self, paths: Vec<Path>) -> object_store::Result<()> {
        let locations = futures::stream::iter(paths.into_iter().map(Ok)).boxed();
        let mut deleted = self.store.delete_stream(locations);
        while let Some(done) = deleted.next().await {
            match done {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Tries again a request the store client does not retry when its connection fails
/// (a POST, a conditional PUT) and that is safe to repeat: a doubling wait from 100 ms
/// to 5 s, within the store's retry budget (`PROBEFLOW_STORE_RETRY_SECONDS`).
pub(crate) struct ConnectionRetry {
    budget: std::time::Duration,
    started: std::time::Instant,
    next: std::time::Duration,
}

impl ConnectionRetry {
    pub(crate) fn new(store: &StoreUrl) -> Result<ConnectionRetry> {
        let budget =
            probeflow_reader::remote::store::retry_budget().map_err(|what| EngineError::Url {
                url: store.url.clone(),
                what,
            })?;
        Ok(ConnectionRetry {
            budget,
            started: std::time::Instant::now(),
            next: std::time::Duration::from_millis(100),
        })
    }

    /// Whether another try fits in the budget, its wait included.
    pub(crate) fn allowed(&self) -> bool {
        self.started.elapsed() + self.next < self.budget
    }

    /// Waits before the next try.
    pub(crate) async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(std::time::Duration::from_secs(5));
    }
}

/// What an object was when it was read, for [`StoreUrl::replace_if`].
#[derive(Debug, Clone, PartialEq)]
pub enum Revision {
    /// S3's ETag or GCS's generation.
    Object(UpdateVersion),
    /// A local file: its content (compared under a file lock).
    Local(Vec<u8>),
}

impl Revision {
    /// This revision with its ETag in `form` (a bare ETag loses its quotes).
    pub fn with_etag_form(&self, form: EtagForm) -> Revision {
        match (self, form) {
            (Revision::Object(v), EtagForm::Bare) => Revision::Object(UpdateVersion {
                e_tag: v.e_tag.as_deref().map(|t| t.trim_matches('"').to_string()),
                version: v.version.clone(),
            }),
            _ => self.clone(),
        }
    }
}

/// Splits an input URL into the directory part and a glob over file names
/// ([`probeflow_reader::glob`]'s dialect), and lists the matching objects (sorted). A
/// URL without glob characters names one file, or a directory: the files under it
/// that `in_directory` (given their path below it) keeps.
pub async fn list_matching_in(
    url: &str,
    in_directory: impl Fn(&str) -> bool,
) -> Result<(StoreUrl, Vec<ObjectMeta>)> {
    let (dir, pattern) = probeflow_reader::glob::split_glob(url);
    let pattern = pattern
        .map(probeflow_reader::glob::FileGlob::new)
        .transpose()
        .map_err(|e| EngineError::Url {
            url: url.to_string(),
            what: e.to_string(),
        })?;
    let dir = if dir.is_empty() { "." } else { dir };
    let base = StoreUrl::parse_input(dir.trim_end_matches('/'))?;
    if base.is_https() {
        return https_file(url, base, pattern.is_some()).await;
    }
    let mut files: Vec<ObjectMeta> = Vec::new();
    let listed = base.list("").await?;
    if pattern.is_none() && listed.is_empty() {
        // A single file.
        let meta = base
            .store
            .head(&base.root)
            .await
            .map_err(|e| EngineError::store(&base.url, e))?;
        return Ok((base, vec![meta]));
    }
    for meta in listed {
        let rel = base.relative(&meta.location);
        let keep = match &pattern {
            Some(glob) => glob.is_match(&rel),
            None => in_directory(&rel),
        };
        if keep {
            files.push(meta);
        }
    }
    Ok((base, files))
}

/// The one file an `https://` input URL names: HTTP has no listing, so a glob or a
/// directory is refused, and so is a file served without an ETag (a file replaced
/// while the job reads it could not be told apart from the one pinned).
async fn https_file(
    url: &str,
    base: StoreUrl,
    globbed: bool,
) -> Result<(StoreUrl, Vec<ObjectMeta>)> {
    // Refused before anything runs, as a bad job file is (exit 2).
    let bad = |what: &str| EngineError::Spec {
        file: url.to_string(),
        what: what.to_string(),
    };
    if globbed || url.ends_with('/') {
        return Err(bad(
            "an https:// input names one file: HTTP has no listing to expand a glob or \
             a directory; list each file's URL instead",
        ));
    }
    let meta = base
        .store
        .head(&base.root)
        .await
        .map_err(|e| EngineError::store(&base.url, e))?;
    if meta.e_tag.is_none() {
        return Err(bad(
            "the server sends no ETag, so a file replaced while the job reads it could \
             not be told from the one planned; copy it to a local path or a bucket first",
        ));
    }
    Ok((base, vec![meta]))
}

/// Refuses input file `url` if it is not the one pinned when the job was planned: its
/// size and ETag (local files: inode, mtime and size) must be the same. A file read
/// while it is replaced would mix two versions of the input.
pub async fn check_pinned(url: &str, size: u64, etag: &Option<String>) -> Result<()> {
    let loc = StoreUrl::parse_input(url)?;
    let changed = |what: String| EngineError::InputChanged {
        file: url.to_string(),
        what,
    };
    let meta = match loc.store.head(&loc.root).await {
        Ok(m) => m,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(changed(
                "removed since the job was planned; start a new output".into(),
            ))
        }
        Err(e) => return Err(EngineError::store(url, e)),
    };
    if meta.size != size || meta.e_tag != *etag {
        return Err(changed(format!(
            "changed since the job was planned ({size} → {} bytes, etag {etag:?} → {:?}); its \
             rows would mix two versions: start a new output",
            meta.size, meta.e_tag
        )));
    }
    Ok(())
}

/// The bytes of input file `url`, as a stream of the chunks the store gives (memory holds
/// a chunk, whatever the file's size), of the version pinned when the job was planned:
/// read with `If-Match` when it was pinned with an ETag, and refused when the store
/// answers with another size or ETag. A file pinned without an ETag is checked with
/// [`check_pinned`] by the caller, before and after.
pub async fn read_pinned(
    url: &str,
    size: u64,
    etag: &Option<String>,
) -> Result<futures::stream::BoxStream<'static, Result<bytes::Bytes>>> {
    let loc = StoreUrl::parse_input(url)?;
    let changed = |what: String| EngineError::InputChanged {
        file: url.to_string(),
        what,
    };
    let options = object_store::GetOptions {
        if_match: etag.clone(),
        ..object_store::GetOptions::default()
    };
    let got = match loc.store.get_opts(&loc.root, options).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(changed(
                "removed since the job was planned; start a new output".into(),
            ))
        }
        Err(object_store::Error::Precondition { .. }) if etag.is_some() => {
            return Err(changed(
                "changed since the job was planned (its ETag no longer matches); its rows \
                 would mix two versions: start a new output"
                    .into(),
            ))
        }
        Err(e) => return Err(EngineError::store(url, e)),
    };
    if got.meta.size != size || (etag.is_some() && got.meta.e_tag != *etag) {
        return Err(changed(format!(
            "changed since the job was planned ({size} → {} bytes, etag {etag:?} → {:?}); its \
             rows would mix two versions: start a new output",
            got.meta.size, got.meta.e_tag
        )));
    }
    let shown = url.to_string();
    Ok(got
        .into_stream()
        .map_err(move |e| EngineError::store(&shown, e))
        .boxed())
}

/// An input file as pinned when a job was planned: URL, size, ETag.
pub type Pin<'a> = (&'a str, u64, &'a Option<String>);

/// How the input files `now` differ from the `planned` ones: one line per file that
/// vanished, changed (size or ETag) or was added; empty when they are the same.
pub fn pin_changes<'a>(
    planned: impl IntoIterator<Item = Pin<'a>>,
    now: impl IntoIterator<Item = Pin<'a>>,
) -> Vec<String> {
    let was: std::collections::BTreeMap<&str, (u64, &Option<String>)> =
        planned.into_iter().map(|(u, s, e)| (u, (s, e))).collect();
    let now: std::collections::BTreeMap<&str, (u64, &Option<String>)> =
        now.into_iter().map(|(u, s, e)| (u, (s, e))).collect();
    let mut changes = Vec::new();
    for (url, (size, etag)) in &was {
        match now.get(url) {
            None => changes.push(format!("vanished: {url}")),
            Some((s, e)) if (s, e) != (size, etag) => changes.push(format!(
                "changed: {url} ({size} → {s} bytes, etag {etag:?} → {e:?})"
            )),
            Some(_) => {}
        }
    }
    changes.extend(
        now.keys()
            .filter(|u| !was.contains_key(*u))
            .map(|u| format!("added: {u}")),
    );
    changes
}

/// The error for an input (`what`) that changed since `since` ([`pin_changes`]); none
/// when nothing changed.
pub fn refuse_changes(what: &str, since: &str, changes: &[String]) -> Result<()> {
    if changes.is_empty() {
        return Ok(());
    }
    Err(EngineError::Conflict(format!(
        "{what} changed since {since}:\n  {}\nIts output would not be this input's: \
         write to a new [output] url (or restore the files)",
        changes.join("\n  ")
    )))
}

/// The size of one part of an object written with [`PartWriter`] (S3's smallest part is
/// 5 MiB).
pub const PART_BYTES: usize = 8 << 20;

/// Parts uploaded at once by one [`PartWriter`] (and by a reduce's shard upload): with
/// the part being filled, an upload holds at most `(PARTS_IN_FLIGHT + 1) × PART_BYTES`.
pub const PARTS_IN_FLIGHT: usize = 2;

/// An object written as it is produced, so that neither memory nor any one request
/// grows with the object: up to [`PART_BYTES`] it is one put at [`PartWriter::finish`];
/// beyond, a multipart upload of parts of that size (on a local disk, a temporary file
/// renamed into place and fsynced). Nothing is visible at the path before `finish`.
pub struct PartWriter {
    url: StoreUrl,
    path: Path,
    buffer: Vec<u8>,
    upload: Option<WriteMultipart>,
}

impl PartWriter {
    /// Appends `bytes`.
    pub async fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if self.upload.is_none() {
            if self.buffer.len() + bytes.len() <= PART_BYTES {
                self.buffer.extend_from_slice(bytes);
                return Ok(());
            }
            self.start_upload().await?;
        }
        let upload = self.capacity().await?;
        upload.write(bytes);
        Ok(())
    }

    /// Appends `bytes`, handing them to the upload without copying them once the
    /// object is larger than one part (a map's partitions: tens of megabytes per file
    /// that a copy would pass through the CPU's caches once more).
    pub async fn put(&mut self, bytes: Vec<u8>) -> Result<()> {
        if self.upload.is_none() {
            if self.buffer.len() + bytes.len() <= PART_BYTES {
                if self.buffer.is_empty() {
                    self.buffer = bytes;
                } else {
                    self.buffer.extend_from_slice(&bytes);
                }
                return Ok(());
            }
            self.start_upload().await?;
        }
        let upload = self.capacity().await?;
        upload.put(bytes::Bytes::from(bytes));
        Ok(())
    }

    /// Starts the multipart upload with the bytes buffered so far.
    async fn start_upload(&mut self) -> Result<()> {
        let upload = self
            .url
            .store
            .put_multipart(&self.path)
            .await
            .map_err(|e| EngineError::store(self.url.display(&self.path), e))?;
        let mut upload = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        upload.put(bytes::Bytes::from(std::mem::take(&mut self.buffer)));
        self.upload = Some(upload);
        Ok(())
    }

    /// The upload, once fewer than [`PARTS_IN_FLIGHT`] of its parts are in flight.
    async fn capacity(&mut self) -> Result<&mut WriteMultipart> {
        let Some(upload) = self.upload.as_mut() else {
            let shown = self.url.display(&self.path);
            return Err(EngineError::Internal(format!("{shown}: no upload started")));
        };
        upload
            .wait_for_capacity(PARTS_IN_FLIGHT)
            .await
            .map_err(|e| EngineError::store(self.url.display(&self.path), e))?;
        Ok(upload)
    }

    /// Completes the object; it is durable when this returns.
    pub async fn finish(self) -> Result<()> {
        match self.upload {
            None => self.url.put(&self.path, self.buffer).await,
            Some(upload) => {
                upload
                    .finish()
                    .await
                    .map_err(|e| EngineError::store(self.url.display(&self.path), e))?;
                self.url.sync(&self.path).await
            }
        }
    }
}

/// Asks the kernel to drop `len` bytes (0: to the end) of local file `path`'s cached
/// pages from `offset`: for data written or read once and not again by this job (an
/// fsynced file's pages are clean, so nothing is lost). Best effort: errors are ignored.
pub fn drop_cached(path: &std::path::Path, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    if let Ok(file) = std::fs::File::open(path) {
        // SAFETY: a plain syscall on a file descriptor this function owns.
        unsafe {
            libc::posix_fadvise(
                file.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            );
        }
    }
}

/// Fsyncs a local file and its directory.
fn sync_local_file(file: &std::path::Path) -> Result<()> {
    let io = |p: &std::path::Path, e: std::io::Error| EngineError::Scratch {
        path: p.display().to_string(),
        source: e,
    };
    std::fs::File::open(file)
        .and_then(|f| f.sync_all())
        .map_err(|e| io(file, e))?;
    if let Some(dir) = file.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io(dir, e))?;
    }
    Ok(())
}

/// Stores that fail as real ones do, for tests.
#[cfg(test)]
pub(crate) mod failing {
    use super::*;

    /// How a [`TestStore`] treats conditional writes.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub(crate) enum Conditions {
        /// As S3 does: ETags quoted, If-None-Match and If-Match honoured.
        #[default]
        Honoured,
        /// As Ceph RGW 16 does: ETags returned quoted, but If-Match on PUT matched
        /// against the bare ETag only.
        BareEtagsOnly,
        /// Every conditional PUT overwrites (a store without conditional writes).
        Ignored,
        /// If-None-Match honoured, If-Match ignored.
        IfMatchIgnored,
    }

    /// An in-memory store with ETags quoted as S3's are, conditional PUTs treated as
    /// its [`Conditions`] say, and whose first `deletes` bulk deletes and first
    /// `creates` create-only puts fail as a reset connection does (a `Generic` error,
    /// which the client does not retry for a POST or a conditional PUT).
    #[derive(Debug, Default)]
    pub(crate) struct TestStore {
        pub inner: object_store::memory::InMemory,
        pub deletes: std::sync::atomic::AtomicU32,
        pub creates: std::sync::atomic::AtomicU32,
        pub conditions: Conditions,
    }

    /// Takes one failure off `left`, if any is left.
    fn fails(left: &std::sync::atomic::AtomicU32) -> bool {
        left.fetch_update(
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
            |n| n.checked_sub(1),
        )
        .is_ok()
    }

    fn reset() -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: "error sending request: connection reset by peer".into(),
        }
    }

    fn quoted(e_tag: Option<String>) -> Option<String> {
        e_tag.map(|t| format!("\"{t}\""))
    }

    impl TestStore {
        /// A store treating conditional writes as `conditions` says, with no failures.
        pub(crate) fn with_conditions(conditions: Conditions) -> TestStore {
            TestStore {
                conditions,
                ..Default::default()
            }
        }

        /// `url` on this store.
        pub fn url(self: &Arc<Self>, url: &str, root: &str) -> StoreUrl {
            StoreUrl {
                url: url.into(),
                store: self.clone(),
                root: Path::from(root),
                scheme: probeflow_reader::output::remote_scheme(url),
                etag_form: EtagForm::default(),
            }
        }
    }

    impl std::fmt::Display for TestStore {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "TestStore({:?})", self.conditions)
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for TestStore {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            mut opts: PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            if matches!(opts.mode, PutMode::Create) && fails(&self.creates) {
                return Err(reset());
            }
            opts.mode = match (self.conditions, opts.mode) {
                (Conditions::Ignored, _) => PutMode::Overwrite,
                (Conditions::IfMatchIgnored, PutMode::Update(_)) => PutMode::Overwrite,
                (Conditions::Honoured, PutMode::Update(v)) => PutMode::Update(UpdateVersion {
                    e_tag: v.e_tag.map(|t| t.trim_matches('"').to_string()),
                    version: v.version,
                }),
                // The header compared as it came: a quoted ETag never matches.
                (_, mode) => mode,
            };
            let mut r = self.inner.put_opts(location, payload, opts).await?;
            r.e_tag = quoted(r.e_tag);
            Ok(r)
        }
        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &Path,
            options: object_store::GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            let mut r = self.inner.get_opts(location, options).await?;
            r.meta.e_tag = quoted(r.meta.e_tag.take());
            Ok(r)
        }
        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
            if fails(&self.deletes) {
                return futures::stream::iter([Err(reset())]).boxed();
            }
            self.inner.delete_stream(locations)
        }
        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<ObjectMeta>> {
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&Path>,
        ) -> object_store::Result<object_store::ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &Path,
            to: &Path,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_bulk_delete_whose_connection_fails_is_tried_again() {
        let store = Arc::new(failing::TestStore {
            deletes: 2.into(),
            ..Default::default()
        });
        let url = store.url("s3://bed/out", "out");
        for i in 0..3 {
            url.put(&url.child(&format!("_job/shuffle/m{i}")), b"x".to_vec())
                .await
                .unwrap();
        }
        url.delete_prefix("_job/shuffle").await.unwrap();
        assert!(url.list("_job/shuffle").await.unwrap().is_empty());
        assert_eq!(store.deletes.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[test]
    fn local_urls() {
        let u = StoreUrl::parse("/tmp/x/y").unwrap();
        assert_eq!(u.child("a/b.txt").as_ref(), "tmp/x/y/a/b.txt");
        assert!(StoreUrl::parse("ftp://x").is_err());
        assert!(StoreUrl::parse("").is_err());
    }

    #[test]
    fn https_urls_are_inputs_only() {
        let u = StoreUrl::parse_input("https://data-store.example:8443/atlas/ping.bz2").unwrap();
        assert!(u.is_https() && !u.is_object_store());
        assert_eq!(u.root.as_ref(), "atlas/ping.bz2");
        assert_eq!(u.local_path(&u.root), None);
        assert_eq!(
            u.display(&u.root),
            "https://data-store.example:8443/atlas/ping.bz2"
        );
        let output = StoreUrl::parse("https://data-store.example/out").unwrap_err();
        assert!(matches!(output, EngineError::Spec { .. }), "{output}");
        assert!(StoreUrl::parse_input("https:///x").is_err());
        assert!(StoreUrl::parse_input("http://host/x").is_err());
    }

    #[tokio::test]
    async fn objects_written_in_parts_are_whole() {
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::parse(dir.path().to_str().unwrap()).unwrap();
        let big: Vec<u8> = (0..(2 * PART_BYTES + 12345))
            .map(|i| (i % 251) as u8)
            .collect();
        for (name, data) in [("small", &big[..1000]), ("big", &big[..])] {
            let mut w = url.put_in_parts(url.child(name));
            for piece in data.chunks(1 << 20) {
                w.write(piece).await.unwrap();
            }
            assert!(
                url.get_opt(&url.child(name)).await.unwrap().is_none(),
                "not before finish"
            );
            w.finish().await.unwrap();
            let got = url.get_opt(&url.child(name)).await.unwrap().unwrap();
            assert_eq!(&got[..], data);
        }
        // No staging files are left beside them.
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["big", "small"]);
    }

    #[tokio::test]
    async fn objects_put_in_owned_pieces_are_whole_on_disk_and_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        // An object store (in memory, under an s3:// name: no fsyncs) and a local disk.
        let mut memory = StoreUrl::parse(dir.path().to_str().unwrap()).unwrap();
        memory.store = Arc::new(object_store::memory::InMemory::new());
        memory.url = "s3://bucket/out".into();
        let local = StoreUrl::parse(dir.path().to_str().unwrap()).unwrap();
        let big: Vec<u8> = (0..(3 * PART_BYTES + 777))
            .map(|i| (i % 241) as u8)
            .collect();
        // Pieces that cross the first part's end inside one piece and at its edge, a
        // piece larger than a part, borrowed and owned pieces mixed.
        let cuts = [
            1000,
            PART_BYTES - 5,
            PART_BYTES + 3,
            2 * PART_BYTES,
            3 * PART_BYTES + 100,
        ];
        for url in [&local, &memory] {
            for (name, len) in [("small", 5000), ("exact", PART_BYTES), ("big", big.len())] {
                let data = &big[..len];
                let mut w = url.put_in_parts(url.child(name));
                let mut at = 0;
                for (k, &cut) in cuts.iter().chain([&len]).enumerate() {
                    let end = cut.min(len);
                    if end <= at {
                        continue;
                    }
                    if k % 2 == 0 {
                        w.put(data[at..end].to_vec()).await.unwrap();
                    } else {
                        w.write(&data[at..end]).await.unwrap();
                    }
                    at = end;
                }
                assert_eq!(at, len);
                assert!(
                    url.get_opt(&url.child(name)).await.unwrap().is_none(),
                    "not before finish"
                );
                w.finish().await.unwrap();
                let got = url.get_opt(&url.child(name)).await.unwrap().unwrap();
                assert!(
                    &got[..] == data,
                    "{name}: {} bytes back, {len} put",
                    got.len()
                );
            }
        }
    }
}
