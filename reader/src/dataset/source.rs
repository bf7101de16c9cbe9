//! A split's shards as one row source: local shards memory-mapped, remote ones fetched
//! into the shard cache, with a global row index (rows numbered shard after shard).

use std::path::PathBuf;
#[cfg(feature = "remote")]
use std::sync::Arc;
use std::sync::OnceLock;

use crate::array_record::{ArrayRecordReader, RecordBuf};
use crate::error::{Error, Result};
use crate::output::ResolvedShard;
use crate::row_identity::rows_digest;

/// The shards of one split, with a global row index: rows are numbered shard after
/// shard in the order given. Local shards are opened (memory-mapped) at once; shards of
/// an output on an object store (feature `remote`) are fetched into the node's shard
/// cache and opened when first read, the shards of the blocks ahead prefetched.
pub struct RowSource {
    pub(crate) shards: Shards,
    /// First global row of each shard, plus the total at the end.
    pub(crate) starts: Vec<u64>,
    /// Each local shard's blake3 where its manifest gives it (a shard without one is
    /// hashed from its mapped bytes when the digest is first asked for); remote shards
    /// carry theirs.
    pub(crate) blake3: Vec<Option<String>>,
    /// Which rows these are ([`crate::row_identity`]), computed on first use: only a
    /// state needs it, and hashing shards without a manifest reads them whole.
    pub(crate) digest: OnceLock<String>,
}

pub(crate) enum Shards {
    Local(Vec<ArrayRecordReader>),
    #[cfg(feature = "remote")]
    Remote(Arc<crate::remote::RemoteShards>),
}

impl std::fmt::Debug for RowSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RowSource({} shards, {} rows)",
            self.num_shards(),
            self.len()
        )
    }
}

/// Where shards of outputs on object stores are cached, and how much they may take
/// (feature `remote`; defaults from the environment, see `remote::cache`).
#[derive(Debug, Clone, Default)]
pub struct CacheOptions {
    /// Default: `$PROBEFLOW_CACHE_DIR`, else `$XDG_CACHE_HOME/probeflow`, else
    /// `~/.cache/probeflow`.
    pub dir: Option<PathBuf>,
    /// Bytes; default: `$PROBEFLOW_CACHE_LIMIT`, else none (no eviction).
    pub limit: Option<u64>,
}

pub(crate) fn starts_of(rows: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut starts = vec![0u64];
    for r in rows {
        starts.push(starts[starts.len() - 1] + r);
    }
    starts
}

impl RowSource {
    /// The shard files of `split` named by `path`: a job's output directory (its
    /// `manifest.json`), a `manifest.json`, a glob of `.array_record` files (`*` in the
    /// file name), or one file, with the checks of [`crate::output::resolve`]. Files
    /// from a glob are sorted by name.
    pub fn resolve(path: &str, split: &str) -> Result<Vec<PathBuf>> {
        crate::output::resolve(&[path.to_string()], split, false)
    }

    /// Opens (memory-maps) the given shard files.
    pub fn open(files: &[PathBuf]) -> Result<Self> {
        let shards: Vec<ResolvedShard> = files
            .iter()
            .map(|f| ResolvedShard {
                path: f.clone(),
                blake3: None,
                max_row_bytes: None,
            })
            .collect();
        Self::open_resolved(&shards)
    }

    /// Opens (memory-maps) resolved shard files, keeping their manifest blake3s.
    pub fn open_resolved(files: &[ResolvedShard]) -> Result<Self> {
        let readers = files
            .iter()
            .map(|f| {
                let mut reader = ArrayRecordReader::open(&f.path)?;
                reader.set_max_record_bytes(f.max_row_bytes);
                Ok(reader)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RowSource {
            starts: starts_of(readers.iter().map(|r| r.len())),
            shards: Shards::Local(readers),
            blake3: files.iter().map(|f| f.blake3.clone()).collect(),
            digest: OnceLock::new(),
        })
    }

    /// The shards of `split` that `paths` name: local paths as [`RowSource::resolve`]
    /// takes them (`verify`: every file checked against the manifest first), or one
    /// output on an object store (`s3://…`, `gs://…`, its root or `manifest.json`),
    /// read through the shard cache `cache` (`verify`: every cached file hashed again
    /// when first opened).
    pub fn open_paths(
        paths: &[String],
        split: &str,
        verify: bool,
        cache: &CacheOptions,
    ) -> Result<Self> {
        match crate::output::remote_output(paths)? {
            Some(url) => Self::open_remote(url, split, verify, cache),
            None => Self::open_resolved(&crate::output::resolve_shards(paths, split, verify)?),
        }
    }

    #[cfg(feature = "remote")]
    pub(crate) fn open_remote(
        url: &str,
        split: &str,
        verify: bool,
        cache: &CacheOptions,
    ) -> Result<Self> {
        let output = crate::remote::output::RemoteOutput::open(url)?;
        let shards = output.split(split)?;
        let blake3 = vec![None; shards.len()];
        let shards =
            crate::remote::RemoteShards::new(shards, output.bucket.clone(), cache.open(verify)?)?;
        Ok(RowSource {
            starts: starts_of(shards.rows()),
            shards: Shards::Remote(shards),
            blake3,
            digest: OnceLock::new(),
        })
    }

    #[cfg(not(feature = "remote"))]
    pub(crate) fn open_remote(url: &str, _: &str, _: bool, _: &CacheOptions) -> Result<Self> {
        Err(crate::output::no_remote(url))
    }

    pub fn len(&self) -> u64 {
        self.starts[self.starts.len() - 1]
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Which rows these are: the rows digest ([`crate::row_identity`]), from the
    /// manifest's blake3s, or for a local shard without one from its mapped bytes
    /// (hashed once, when first asked).
    pub fn digest(&self) -> &str {
        self.digest.get_or_init(|| {
            let hashes: Vec<String> = (0..self.num_shards())
                .map(|i| match (&self.blake3[i], &self.shards) {
                    (Some(known), _) => known.clone(),
                    (None, Shards::Local(readers)) => readers[i].content_blake3(),
                    #[cfg(feature = "remote")]
                    (None, Shards::Remote(remote)) => remote.blake3(i).to_string(),
                })
                .collect();
            let rows = self.starts.windows(2).map(|w| w[1] - w[0]);
            rows_digest(hashes.iter().map(String::as_str).zip(rows))
        })
    }

    pub fn num_shards(&self) -> usize {
        self.starts.len() - 1
    }

    /// The shard holding global row `row` (`row` < len).
    pub(crate) fn shard_of(&self, row: u64) -> usize {
        self.starts.partition_point(|&s| s <= row) - 1
    }

    /// Global row `row`'s bytes.
    pub fn read<'a>(&'a self, row: u64, buf: &'a mut RecordBuf) -> Result<&'a [u8]> {
        if row >= self.len() {
            return Err(Error::Input(format!(
                "row {row} out of range ({} rows)",
                self.len()
            )));
        }
        let shard = self.shard_of(row);
        let reader = match &self.shards {
            Shards::Local(readers) => &readers[shard],
            #[cfg(feature = "remote")]
            Shards::Remote(remote) => remote.get(shard)?,
        };
        reader.read(row - self.starts[shard], buf)
    }

    /// Starts fetching the shards holding `rows` (rows of the blocks ahead), when they
    /// are on an object store and not fetched yet.
    pub fn prefetch(&self, rows: &[u64]) {
        #[cfg(feature = "remote")]
        if let Shards::Remote(remote) = &self.shards {
            let mut shards: Vec<usize> = rows
                .iter()
                .filter(|&&r| r < self.len())
                .map(|&r| self.shard_of(r))
                .collect();
            shards.sort_unstable();
            shards.dedup();
            remote.prefetch(shards);
        }
        #[cfg(not(feature = "remote"))]
        let _ = rows;
    }

    /// Whether the shards are on an object store.
    pub fn is_remote(&self) -> bool {
        match &self.shards {
            Shards::Local(_) => false,
            #[cfg(feature = "remote")]
            Shards::Remote(_) => true,
        }
    }

    /// Shard `i`'s path or URL.
    pub fn shard_name(&self, i: usize) -> &str {
        match &self.shards {
            Shards::Local(readers) => readers[i].name(),
            #[cfg(feature = "remote")]
            Shards::Remote(remote) => remote.name(i),
        }
    }

    /// Every shard's path or URL, in row order.
    pub fn files(&self) -> Vec<String> {
        (0..self.num_shards())
            .map(|i| self.shard_name(i).to_string())
            .collect()
    }

    /// The file holding global row `row` (for error messages).
    pub fn file_of(&self, row: u64) -> &str {
        if self.num_shards() == 0 {
            return "";
        }
        let shard =
            (self.starts.partition_point(|&s| s <= row).max(1) - 1).min(self.num_shards() - 1);
        self.shard_name(shard)
    }
}
