//! The node-local shard cache: one directory shared by every process of a node, holding
//! shards downloaded from an object store, each verified against its manifest entry.
//!
//! ```text
//! open(shard) ─► shared lock <dir>/locks/<blake3>.lock ─► <dir>/shards/<blake3>.array_record
//!      │          verified (stamp matches)? ─► memory-map it ─► hit
//!      │ no
//!      ▼ exclusive lock (other processes wait here)
//!   leftovers of an interrupted download removed; verified now? ─► hit
//!   a file without a matching stamp ─► hash it: matches ─► stamp it; else remove it
//!   download into an anonymous file in shards/ (ranged requests), hashing ─► size and
//!      blake3 = the manifest's? ─► link it into place, write the stamp ─► memory-map it
//!      ─► unlock ─► evict to the size limit
//! ```
//!
//! Files are named by their manifest blake3, so a name says what the bytes must be, and
//! the same shard reached by two URLs is one file. The stamp `<blake3>.verified` records
//! the size, modification time and inode the file had when it was hashed: a file
//! changed since (rewritten, truncated, replaced) no longer matches and is hashed again,
//! and refetched when the hash is wrong; `verify` hashes every file on every open. The
//! stamp's own modification time is the shard's last use, for least-recently-used
//! eviction. Eviction never removes a shard this process has in use ([`InUse`]) nor one
//! whose lock anybody holds (being opened, checked or downloaded); one another process
//! has open stays readable to it (it is memory-mapped) until it closes it.
//!
//! A download is written to an anonymous file (Linux `O_TMPFILE`) that vanishes with
//! the process writing it, however that process ends (killed, preempted, crashed), so
//! an interrupted download never leaves a partial file behind; only a verified one is
//! linked into place ([`PartFile`]). On a filesystem without anonymous files it is a
//! named `<blake3>.part-<pid>-<n>`, removed when the download fails and, when a process
//! died mid-download, by the next process that downloads that shard.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

use super::store::{Bucket, RemoteUrl};
use crate::array_record::ArrayRecordReader;
use crate::error::{Error, Location, Result};
use crate::output::{check_contents, hash_file};

/// Environment variable naming the cache directory.
pub const CACHE_DIR_ENV: &str = "PROBEFLOW_CACHE_DIR";
/// Environment variable with the cache's size limit (`200GiB`, bytes …).
pub const CACHE_LIMIT_ENV: &str = "PROBEFLOW_CACHE_LIMIT";
/// Attempts per download (object_store retries each request on its own too).
const DOWNLOAD_ATTEMPTS: u32 = 3;

/// One shard of a remote output, as its manifest describes it.
#[derive(Debug, Clone)]
pub struct RemoteShard {
    pub url: RemoteUrl,
    pub rows: u64,
    pub bytes: u64,
    /// Lower-case hex, 64 digits (checked when the manifest is read).
    pub blake3: String,
    /// Its output's `max_row_bytes`, when the manifest says it (see
    /// [`crate::output::ResolvedShard::max_row_bytes`]).
    pub max_row_bytes: Option<u64>,
}

/// Whether `s` is a blake3 digest in lower-case hex (and so a safe file name).
pub fn is_blake3_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// What this process's caches did, since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Shards downloaded.
    pub downloads: u64,
    /// Bytes downloaded.
    pub downloaded_bytes: u64,
    /// Shards found in the cache, verified.
    pub hits: u64,
    /// Cached files whose bytes no longer matched the manifest, removed and downloaded again.
    pub refetched: u64,
    /// Files evicted to stay within the size limit.
    pub evicted: u64,
}

static DOWNLOADS: AtomicU64 = AtomicU64::new(0);
static DOWNLOADED_BYTES: AtomicU64 = AtomicU64::new(0);
static HITS: AtomicU64 = AtomicU64::new(0);
static REFETCHED: AtomicU64 = AtomicU64::new(0);
static EVICTED: AtomicU64 = AtomicU64::new(0);
static PART_COUNTER: AtomicU64 = AtomicU64::new(0);

/// This process's cache counters.
pub fn cache_stats() -> CacheStats {
    CacheStats {
        downloads: DOWNLOADS.load(Ordering::Relaxed),
        downloaded_bytes: DOWNLOADED_BYTES.load(Ordering::Relaxed),
        hits: HITS.load(Ordering::Relaxed),
        refetched: REFETCHED.load(Ordering::Relaxed),
        evicted: EVICTED.load(Ordering::Relaxed),
    }
}

/// The shards (by blake3) this process's open datasets use, with their sizes: never
/// evicted by this process, and together they must fit the limit.
pub struct InUse {
    shards: Vec<(String, u64)>,
}

static IN_USE: Mutex<BTreeMap<String, (u64, usize)>> = Mutex::new(BTreeMap::new());

impl InUse {
    /// Registers `shards`; an error when this process's shards in use would exceed
    /// `limit` (every epoch reads every shard of a split, so a smaller cache would
    /// download the whole split again, epoch after epoch).
    pub fn register(shards: &[RemoteShard], limit: Option<u64>) -> Result<InUse> {
        let mut map = IN_USE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(limit) = limit {
            let mut total: u64 = map.values().map(|(b, _)| b).sum();
            let mut new = std::collections::BTreeSet::new();
            for s in shards {
                if !map.contains_key(&s.blake3) && new.insert(&s.blake3) {
                    total += s.bytes;
                }
            }
            if total > limit {
                return Err(Error::Input(format!(
                    "the shard cache limit is {limit} bytes, but the shards this process \
                     reads take {total} bytes: every epoch reads every shard of a split, so \
                     raise the cache limit to at least {total} bytes (or leave it unset)"
                )));
            }
        }
        for s in shards {
            map.entry(s.blake3.clone()).or_insert((s.bytes, 0)).1 += 1;
        }
        Ok(InUse {
            shards: shards.iter().map(|s| (s.blake3.clone(), s.bytes)).collect(),
        })
    }

    fn contains(hash: &str) -> bool {
        IN_USE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(hash)
    }
}

impl Drop for InUse {
    fn drop(&mut self) {
        let mut map = IN_USE.lock().unwrap_or_else(|e| e.into_inner());
        for (hash, _) in &self.shards {
            if let Some(entry) = map.get_mut(hash) {
                entry.1 -= 1;
                if entry.1 == 0 {
                    map.remove(hash);
                }
            }
        }
    }
}

/// A cache directory and its size limit.
#[derive(Debug, Clone)]
pub struct ShardCache {
    shards: PathBuf,
    locks: PathBuf,
    limit: Option<u64>,
    /// Hash every file on every open, stamp or not.
    verify: bool,
}

/// The default cache directory: `$PROBEFLOW_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/probeflow`, else `~/.cache/probeflow`.
pub fn default_cache_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os(CACHE_DIR_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d).join("probeflow"));
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".cache").join("probeflow")),
        None => Err(Error::Input(format!(
            "no cache directory for remote shards: set {CACHE_DIR_ENV} (or HOME), or pass \
             cache_dir"
        ))),
    }
}

/// The default size limit: `$PROBEFLOW_CACHE_LIMIT` (`200GiB`, `5e11`…), else none.
pub fn default_cache_limit() -> Result<Option<u64>> {
    match std::env::var(CACHE_LIMIT_ENV) {
        Ok(v) if !v.trim().is_empty() => parse_limit(&v).map(Some),
        _ => Ok(None),
    }
}

/// A size limit (`200GiB`, `1.5TB`, `1000000`).
pub fn parse_limit(text: &str) -> Result<u64> {
    crate::units::parse_bytes(text).ok_or_else(|| {
        Error::Input(format!(
            "cache limit {text:?}: not a size (say e.g. 200GiB, 1.5TB or a number of bytes)"
        ))
    })
}

/// How a shard's lock is taken: shared to open a verified file (no eviction meanwhile),
/// exclusive to check, download or evict it.
#[derive(Clone, Copy)]
enum LockMode {
    Shared,
    Exclusive,
    TryExclusive,
}

struct LockGuard {
    file: File,
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // An explicit unlock releases the lock even where a forked child still holds a
        // copy of the descriptor.
        let _ = self.file.unlock();
    }
}

fn stamp_of(meta: &std::fs::Metadata) -> String {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("{} {} {}\n", meta.len(), mtime, meta.ino())
}

impl ShardCache {
    /// The cache in `dir` (created if missing), evicting beyond `limit` bytes.
    pub fn new(dir: &Path, limit: Option<u64>, verify: bool) -> Result<ShardCache> {
        let shards = dir.join("shards");
        let locks = dir.join("locks");
        for d in [&shards, &locks] {
            std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
        }
        Ok(ShardCache {
            shards,
            locks,
            limit,
            verify,
        })
    }

    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    fn file(&self, hash: &str) -> PathBuf {
        self.shards.join(format!("{hash}.array_record"))
    }

    fn stamp(&self, hash: &str) -> PathBuf {
        self.shards.join(format!("{hash}.verified"))
    }

    fn lock(&self, hash: &str, mode: LockMode) -> Result<Option<LockGuard>> {
        let path = self.locks.join(format!("{hash}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        match mode {
            LockMode::Shared => file.lock_shared().map_err(|e| Error::io(&path, e))?,
            LockMode::Exclusive => file.lock().map_err(|e| Error::io(&path, e))?,
            LockMode::TryExclusive => {
                if file.try_lock().is_err() {
                    return Ok(None);
                }
            }
        }
        Ok(Some(LockGuard { file }))
    }

    /// Removes what an interrupted download or stamp write of `hash` left (the caller
    /// holds its exclusive lock, so nobody is writing them).
    fn remove_leftovers(&self, hash: &str) {
        let Ok(read) = std::fs::read_dir(&self.shards) else {
            return;
        };
        let (part, stamp) = (format!("{hash}.part-"), format!("{hash}.verified-"));
        for entry in read.flatten() {
            if entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&part) || n.starts_with(&stamp))
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Whether the cached file of `hash` is there and unchanged since it was verified.
    fn stamped(&self, hash: &str) -> bool {
        if self.verify {
            return false;
        }
        let (Ok(meta), Ok(stamp)) = (
            std::fs::metadata(self.file(hash)),
            std::fs::read_to_string(self.stamp(hash)),
        ) else {
            return false;
        };
        stamp == stamp_of(&meta)
    }

    fn touch(&self, hash: &str) {
        if let Ok(f) = OpenOptions::new().write(true).open(self.stamp(hash)) {
            let _ = f.set_modified(SystemTime::now());
        }
    }

    fn write_stamp(&self, hash: &str) -> Result<()> {
        let file = self.file(hash);
        let meta = std::fs::metadata(&file).map_err(|e| Error::io(&file, e))?;
        let stamp = self.stamp(hash);
        let tmp = stamp.with_extension(format!(
            "verified-{}-{}",
            std::process::id(),
            PART_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&tmp, stamp_of(&meta)).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, &stamp).map_err(|e| Error::io(&stamp, e))
    }

    /// `shard`, verified and opened (memory-mapped) from the cache, downloaded into it
    /// first when missing or changed; `name` (its URL) names it in errors. A file is
    /// opened under its lock, so no process evicts it meanwhile; once mapped, its
    /// removal does not disturb the reader.
    pub fn open(
        &self,
        bucket: &Bucket,
        shard: &RemoteShard,
        name: &str,
    ) -> Result<ArrayRecordReader> {
        let hash = shard.blake3.as_str();
        let file = self.file(hash);
        {
            let _shared = self.lock(hash, LockMode::Shared)?;
            if self.stamped(hash) {
                let reader = ArrayRecordReader::open_named(&file, name)?;
                self.touch(hash);
                HITS.fetch_add(1, Ordering::Relaxed);
                return Ok(reader);
            }
        }
        let guard = self.lock(hash, LockMode::Exclusive)?;
        self.remove_leftovers(hash);
        // Another process may have downloaded it meanwhile; a file without a matching
        // stamp is hashed, and removed when wrong.
        if !self.stamped(hash) && file.exists() {
            let (size, blake3) = hash_file(&file)?;
            if size == shard.bytes && blake3 == hash {
                self.write_stamp(hash)?;
            } else {
                std::fs::remove_file(&file).map_err(|e| Error::io(&file, e))?;
                REFETCHED.fetch_add(1, Ordering::Relaxed);
            }
        }
        if file.exists() {
            HITS.fetch_add(1, Ordering::Relaxed);
        } else {
            self.download(bucket, shard)?;
        }
        let reader = ArrayRecordReader::open_named(&file, name)?;
        self.touch(hash);
        drop(guard);
        self.evict()?;
        Ok(reader)
    }

    /// Downloads `shard` (the caller holds its lock) and verifies it on the way.
    fn download(&self, bucket: &Bucket, shard: &RemoteShard) -> Result<()> {
        let hash = shard.blake3.as_str();
        let file = self.file(hash);
        let mut last = None;
        for _ in 0..DOWNLOAD_ATTEMPTS {
            let mut part = PartFile::create(&self.shards, hash)?;
            let mut hasher = blake3::Hasher::new();
            let label = part.label.clone();
            let got = bucket.download(&shard.url, shard.bytes, &mut part.file, &label, &mut hasher);
            let size = match got {
                Ok(size) => size,
                Err(e) => {
                    // Not found, or a local write error: trying again will not help.
                    if matches!(e, Error::Io { .. }) {
                        return Err(e);
                    }
                    last = Some(e);
                    continue;
                }
            };
            let blake3 = hasher.finalize().to_hex();
            if let Err(e) = check_contents(
                &shard.url.to_string(),
                size,
                blake3.as_str(),
                shard.bytes,
                hash,
            ) {
                last = Some(e);
                continue;
            }
            part.persist(&file)?;
            self.write_stamp(hash)?;
            DOWNLOADS.fetch_add(1, Ordering::Relaxed);
            DOWNLOADED_BYTES.fetch_add(size, Ordering::Relaxed);
            return Ok(());
        }
        Err(match last {
            Some(Error::Corrupt { file, what, .. }) => Error::Corrupt {
                file,
                location: Location::File,
                what: format!(
                    "{what} (downloaded {DOWNLOAD_ATTEMPTS} times): the object differs from \
                     the output's manifest"
                ),
            },
            Some(e) => e,
            None => Error::Remote {
                url: shard.url.to_string(),
                what: "download failed".into(),
            },
        })
    }

    /// Removes least recently used shards until the cache is within its limit, never
    /// one in use by this process or locked by another (being downloaded or checked).
    fn evict(&self) -> Result<()> {
        let Some(limit) = self.limit else {
            return Ok(());
        };
        let read = std::fs::read_dir(&self.shards).map_err(|e| Error::io(&self.shards, e))?;
        let mut files: Vec<(SystemTime, u64, String)> = Vec::new();
        for entry in read.flatten() {
            let name = entry.file_name();
            let Some(hash) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".array_record"))
                .filter(|h| is_blake3_hex(h))
            else {
                continue;
            };
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            let used = std::fs::metadata(self.stamp(hash))
                .and_then(|m| m.modified())
                .or_else(|_| meta.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            files.push((used, meta.len(), hash.to_string()));
        }
        let mut total: u64 = files.iter().map(|(_, size, _)| size).sum();
        files.sort();
        for (_, size, hash) in files {
            if total <= limit {
                break;
            }
            if InUse::contains(&hash) {
                continue;
            }
            let Some(_guard) = self.lock(&hash, LockMode::TryExclusive)? else {
                continue;
            };
            let file = self.file(&hash);
            match std::fs::remove_file(&file) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(&file, e)),
            }
            let _ = std::fs::remove_file(self.stamp(&hash));
            total -= size;
            EVICTED.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// A download in progress in the shards directory: an anonymous file (`O_TMPFILE`,
/// gone with its process whatever ends it) where the filesystem has them, else a
/// named `<blake3>.part-<pid>-<n>` removed when dropped. [`PartFile::persist`] puts a
/// verified one in place.
struct PartFile {
    file: File,
    /// The named file; `None` for an anonymous one.
    named: Option<PathBuf>,
    /// What errors call it.
    label: PathBuf,
}

impl PartFile {
    fn create(dir: &Path, hash: &str) -> Result<PartFile> {
        use std::os::unix::fs::OpenOptionsExt;
        let label = dir.join(format!("{hash}.part"));
        // Linking it into place goes through /proc/self/fd (no privilege needed).
        if Path::new("/proc/self/fd").is_dir() {
            if let Ok(file) = OpenOptions::new()
                .write(true)
                .mode(0o644)
                .custom_flags(libc::O_TMPFILE)
                .open(dir)
            {
                return Ok(PartFile {
                    file,
                    named: None,
                    label,
                });
            }
        }
        let named = dir.join(format!(
            "{hash}.part-{}-{}",
            std::process::id(),
            PART_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let file = File::create(&named).map_err(|e| Error::io(&named, e))?;
        Ok(PartFile {
            file,
            label: named.clone(),
            named: Some(named),
        })
    }

    /// Makes the written file `to` (replacing a file there).
    fn persist(mut self, to: &Path) -> Result<()> {
        if let Some(named) = self.named.take() {
            return std::fs::rename(&named, to).map_err(|e| Error::io(to, e));
        }
        use std::os::fd::AsRawFd;
        use std::os::unix::ffi::OsStrExt;
        let from = std::ffi::CString::new(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
            .map_err(|_| Error::io(to, std::io::Error::other("a NUL in the path")))?;
        let to_c = std::ffi::CString::new(to.as_os_str().as_bytes())
            .map_err(|_| Error::io(to, std::io::Error::other("a NUL in the path")))?;
        let link = || {
            // SAFETY: both paths are NUL-terminated C strings that outlive the call.
            let rc = unsafe {
                libc::linkat(
                    libc::AT_FDCWD,
                    from.as_ptr(),
                    libc::AT_FDCWD,
                    to_c.as_ptr(),
                    libc::AT_SYMLINK_FOLLOW,
                )
            };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        match link() {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // A file that failed its check is still there (the caller holds the
                // shard's lock, so nobody else writes it): replace it.
                std::fs::remove_file(to).map_err(|e| Error::io(to, e))?;
                link().map_err(|e| Error::io(to, e))
            }
            other => other.map_err(|e| Error::io(to, e)),
        }
    }
}

impl Drop for PartFile {
    fn drop(&mut self) {
        if let Some(named) = &self.named {
            let _ = std::fs::remove_file(named);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_download_leaves_nothing_behind_unless_it_is_persisted() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let entries = || std::fs::read_dir(dir.path()).unwrap().count();
        let hash = "a".repeat(64);
        let mut part = PartFile::create(dir.path(), &hash).unwrap();
        // Anonymous where the filesystem has O_TMPFILE (tmpfs, ext4, xfs, btrfs): no
        // name in the directory, so a killed process leaves nothing.
        let anonymous = part.named.is_none();
        assert_eq!(entries(), usize::from(!anonymous));
        part.file.write_all(b"shard bytes").unwrap();
        drop(part);
        assert_eq!(entries(), 0, "a dropped download is gone");
        let mut part = PartFile::create(dir.path(), &hash).unwrap();
        part.file.write_all(b"shard bytes").unwrap();
        let to = dir.path().join(format!("{hash}.array_record"));
        std::fs::write(&to, b"an old file that failed its check").unwrap();
        part.persist(&to).unwrap();
        assert_eq!(std::fs::read(&to).unwrap(), b"shard bytes");
        assert_eq!(entries(), 1);
        if !anonymous {
            eprintln!("no O_TMPFILE on this filesystem: named part files were used");
        }
    }

    /// Tests that register shards in use take this: the registry is the process's.
    pub(crate) static IN_USE_TESTS: Mutex<()> = Mutex::new(());

    #[test]
    fn only_hex_digests_name_files() {
        assert!(is_blake3_hex(&"ab".repeat(32)));
        for bad in ["", "../../etc/passwd", &"AB".repeat(32), &"ab".repeat(33)] {
            assert!(!is_blake3_hex(bad), "{bad}");
        }
    }

    #[test]
    fn limits_parse_and_bad_ones_are_errors() {
        assert_eq!(parse_limit("2GiB").unwrap(), 2 << 30);
        assert!(parse_limit("lots").is_err());
    }

    fn shard(hash: &str, bytes: u64) -> RemoteShard {
        RemoteShard {
            url: RemoteUrl::parse("s3://b/out/train/x").unwrap(),
            rows: 1,
            bytes,
            blake3: hash.to_string(),
            max_row_bytes: None,
        }
    }

    #[test]
    fn shards_in_use_must_fit_the_limit_together() {
        let _serial = IN_USE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let (a, b) = ("a1".repeat(32), "b1".repeat(32));
        let first = InUse::register(&[shard(&a, 60)], Some(100)).unwrap();
        assert!(InUse::contains(&a));
        let err = InUse::register(&[shard(&b, 60)], Some(100))
            .err()
            .expect("over the limit")
            .to_string();
        assert!(err.contains("at least 120 bytes"), "{err}");
        // The same shard twice counts once.
        let again = InUse::register(&[shard(&a, 60), shard(&a, 60)], Some(100)).unwrap();
        drop(first);
        assert!(InUse::contains(&a));
        drop(again);
        assert!(!InUse::contains(&a));
        InUse::register(&[shard(&b, 60)], Some(100)).unwrap();
    }

    #[test]
    fn a_changed_cached_file_loses_its_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ShardCache::new(dir.path(), None, false).unwrap();
        let hash = "c3".repeat(32);
        std::fs::write(cache.file(&hash), b"bytes").unwrap();
        assert!(!cache.stamped(&hash));
        cache.write_stamp(&hash).unwrap();
        assert!(cache.stamped(&hash));
        std::fs::write(cache.file(&hash), b"other").unwrap();
        // Same size; a new write moves the modification time (or the inode, replaced).
        let f = OpenOptions::new()
            .write(true)
            .open(cache.file(&hash))
            .unwrap();
        f.set_modified(SystemTime::UNIX_EPOCH).unwrap();
        assert!(!cache.stamped(&hash));
        let verifying = ShardCache::new(dir.path(), None, true).unwrap();
        cache.write_stamp(&hash).unwrap();
        assert!(cache.stamped(&hash));
        assert!(
            !verifying.stamped(&hash),
            "verify hashes whatever the stamp says"
        );
    }
}
