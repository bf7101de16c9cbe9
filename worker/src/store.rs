//! Object-store locations: every input, intermediate and output byte goes through
//! `object_store`, so local paths, `file://`, `s3://` (and S3-compatible servers via the
//! usual `AWS_*` environment variables such as `AWS_ENDPOINT_URL`) and `gs://` (the
//! `GOOGLE_*` variables) work alike.
//!
//! A [`StoreUrl`] is a store plus a root path; [`StoreUrl::list_matching`] expands a
//! trailing glob (`*`, `?`) in the input URL.

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutPayload};

use crate::error::{Result, WorkerError};

/// A location in an object store: the store and a root path within it.
#[derive(Clone)]
pub struct StoreUrl {
    pub url: String,
    pub store: Arc<dyn ObjectStore>,
    pub root: Path,
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreUrl({})", self.url)
    }
}

impl StoreUrl {
    /// Parses a local path, `file://…`, `s3://bucket/prefix` or `gs://bucket/prefix`.
    pub fn parse(url: &str) -> Result<StoreUrl> {
        let bad = |what: String| WorkerError::Url {
            url: url.to_string(),
            what,
        };
        if url.is_empty() {
            return Err(bad("empty".into()));
        }
        for scheme in ["s3://", "gs://"] {
            let Some(rest) = url.strip_prefix(scheme) else {
                continue;
            };
            let bucket = rest.split('/').next().unwrap_or_default();
            let store: Arc<dyn ObjectStore> = if scheme == "s3://" {
                Arc::new(
                    object_store::aws::AmazonS3Builder::from_env()
                        .with_bucket_name(bucket)
                        .build()
                        .map_err(|e| bad(e.to_string()))?,
                )
            } else {
                Arc::new(
                    object_store::gcp::GoogleCloudStorageBuilder::from_env()
                        .with_bucket_name(bucket)
                        .build()
                        .map_err(|e| bad(e.to_string()))?,
                )
            };
            let root = Path::parse(rest.strip_prefix(bucket).unwrap_or_default())
                .map_err(|e| bad(e.to_string()))?;
            return Ok(StoreUrl {
                url: url.to_string(),
                store,
                root,
            });
        }
        if url.contains("://") && !url.starts_with("file://") {
            return Err(bad(
                "unsupported scheme (use a local path, file://, s3:// or gs://)".into(),
            ));
        }
        let local = url.strip_prefix("file://").unwrap_or(url);
        let abs = std::path::absolute(local).map_err(|e| bad(e.to_string()))?;
        let root = Path::from_absolute_path(&abs).map_err(|e| bad(e.to_string()))?;
        Ok(StoreUrl {
            url: abs.display().to_string(),
            store: Arc::new(object_store::local::LocalFileSystem::new()),
            root,
        })
    }

    /// The path `rel` (slash-separated) under the root.
    pub fn child(&self, rel: &str) -> Path {
        let mut p = self.root.clone();
        for part in rel.split('/').filter(|s| !s.is_empty()) {
            p = p.clone().join(part);
        }
        p
    }

    /// A human-readable name for `path` (for messages).
    pub fn display(&self, path: &Path) -> String {
        if let Some(scheme) = ["s3://", "gs://"]
            .into_iter()
            .find(|s| self.url.starts_with(s))
        {
            let bucket = self.url[scheme.len()..]
                .split('/')
                .next()
                .unwrap_or_default();
            format!("{scheme}{bucket}/{path}")
        } else {
            format!("/{path}")
        }
    }

    pub async fn put(&self, path: &Path, bytes: Vec<u8>) -> Result<()> {
        self.store
            .put(path, PutPayload::from(bytes))
            .await
            .map_err(|e| WorkerError::store(self.display(path), e))?;
        Ok(())
    }

    /// The object's bytes, or `None` if it does not exist.
    pub async fn get_opt(&self, path: &Path) -> Result<Option<bytes::Bytes>> {
        match self.store.get(path).await {
            Ok(r) => Ok(Some(
                r.bytes()
                    .await
                    .map_err(|e| WorkerError::store(self.display(path), e))?,
            )),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(WorkerError::store(self.display(path), e)),
        }
    }

    pub async fn get_range(
        &self,
        path: &Path,
        range: std::ops::Range<u64>,
    ) -> Result<bytes::Bytes> {
        self.store
            .get_range(path, range)
            .await
            .map_err(|e| WorkerError::store(self.display(path), e))
    }

    pub async fn exists(&self, path: &Path) -> Result<bool> {
        match self.store.head(path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(WorkerError::store(self.display(path), e)),
        }
    }

    /// Objects under `prefix` (relative to the root), sorted by path.
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let p = self.child(prefix);
        let mut found: Vec<ObjectMeta> = match self.store.list(Some(&p)).try_collect().await {
            Ok(v) => v,
            Err(object_store::Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(WorkerError::store(self.display(&p), e)),
        };
        found.sort_by(|a, b| a.location.cmp(&b.location));
        Ok(found)
    }

    /// Deletes one object; a missing one is not an error.
    pub async fn delete(&self, path: &Path) -> Result<()> {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(WorkerError::store(self.display(path), e)),
        }
    }

    /// Deletes everything under `prefix` (relative to the root).
    pub async fn delete_prefix(&self, prefix: &str) -> Result<()> {
        for meta in self.list(prefix).await? {
            self.delete(&meta.location).await?;
        }
        Ok(())
    }
}

/// Splits an input URL into the directory part and a glob over file names, and lists
/// the matching objects (sorted). A URL without glob characters names one file or a
/// directory (all `*.parquet` under it).
pub async fn list_matching(url: &str) -> Result<(StoreUrl, Vec<ObjectMeta>)> {
    let glob_at = url.find(['*', '?', '[']);
    let (dir, pattern) = match glob_at {
        Some(i) => {
            let slash = url[..i].rfind('/').map_or(0, |s| s + 1);
            (&url[..slash], Some(&url[slash..]))
        }
        None => (url, None),
    };
    let dir = if dir.is_empty() { "." } else { dir };
    let base = StoreUrl::parse(dir.trim_end_matches('/'))?;
    let mut files: Vec<ObjectMeta> = Vec::new();
    let listed = base.list("").await?;
    if pattern.is_none() && listed.is_empty() {
        // A single file.
        let meta = base
            .store
            .head(&base.root)
            .await
            .map_err(|e| WorkerError::store(&base.url, e))?;
        return Ok((base, vec![meta]));
    }
    for meta in listed {
        let rel = meta
            .location
            .as_ref()
            .strip_prefix(base.root.as_ref())
            .unwrap_or(meta.location.as_ref())
            .trim_start_matches('/')
            .to_string();
        let keep = match pattern {
            Some(p) => glob_match(p, &rel),
            None => rel.ends_with(".parquet"),
        };
        if keep {
            files.push(meta);
        }
    }
    Ok((base, files))
}

/// Glob matching with `*` (any run of characters except `/`), `?` (one character).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' && t[ti] != '/' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            if t[mark] == '/' {
                return false;
            }
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("*.parquet", "a.parquet"));
        assert!(glob_match("part-??.parquet", "part-01.parquet"));
        assert!(!glob_match("*.parquet", "a.csv"));
        assert!(!glob_match("*.parquet", "sub/a.parquet"));
        assert!(glob_match("*/*.parquet", "sub/a.parquet"));
        assert!(glob_match("*", "x"));
    }

    #[test]
    fn local_urls() {
        let u = StoreUrl::parse("/tmp/x/y").unwrap();
        assert_eq!(u.child("a/b.txt").as_ref(), "tmp/x/y/a/b.txt");
        assert!(StoreUrl::parse("ftp://x").is_err());
        assert!(StoreUrl::parse("").is_err());
    }
}
