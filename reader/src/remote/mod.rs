//! Job outputs on object stores (`s3://`, `gs://`), read through a node-local cache.
//!
//! ```text
//! Dataset("s3://bucket/out") ─► RemoteOutput::open: _SUCCESS, manifest (checked as a
//!   local one) ─► the split's shards (URL, rows, bytes, blake3)
//!   ─► RemoteShards: row counts from the manifest, no shard opened yet
//!   each block: prefetch(the shards of this block and the next) ─► a background
//!     thread fetches them, several at once, through the ShardCache
//!   each row read: its shard's reader (opened once: ShardCache::fetch, then mmap)
//! ```
//!
//! Every byte read is a byte the manifest vouches for: a download is hashed on its way
//! to disk and renamed into place only when its size and blake3 match; each reader is
//! also checked for the manifest's row count. Only [`store`]'s client talks to the
//! store; [`cache`] decides what is downloaded, kept and evicted.

pub mod cache;
pub mod output;
pub mod requests;
pub mod store;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::array_record::ArrayRecordReader;
use crate::dataset::CacheOptions;
use crate::error::Result;
use crate::output::check_rows;
use cache::{InUse, RemoteShard, ShardCache};
use store::Bucket;

/// Downloads the prefetcher runs at once.
const FETCH_CONCURRENCY: usize = 8;

impl CacheOptions {
    /// The cache these options name; `verify` hashes every cached file on every open.
    pub fn open(&self, verify: bool) -> Result<ShardCache> {
        let dir = match &self.dir {
            Some(d) => d.clone(),
            None => cache::default_cache_dir()?,
        };
        let limit = match self.limit {
            Some(l) => Some(l),
            None => cache::default_cache_limit()?,
        };
        ShardCache::new(&dir, limit, verify)
    }
}

/// A split's shards on an object store, each opened on first use.
pub struct RemoteShards {
    shards: Vec<RemoteShard>,
    names: Vec<String>,
    opened: Vec<OnceLock<ArrayRecordReader>>,
    /// Handed to the prefetcher and not yet done.
    queued: Vec<AtomicBool>,
    cache: ShardCache,
    bucket: Arc<Bucket>,
    _in_use: InUse,
    /// (pid, the prefetcher's queue): a forked child starts its own.
    prefetcher: Mutex<Option<(u32, SyncSender<Vec<usize>>)>>,
}

impl RemoteShards {
    /// The shards, none fetched yet; an error when they cannot fit the cache's limit
    /// beside the other shards this process reads.
    pub fn new(
        shards: Vec<RemoteShard>,
        bucket: Arc<Bucket>,
        cache: ShardCache,
    ) -> Result<Arc<RemoteShards>> {
        let in_use = InUse::register(&shards, cache.limit())?;
        Ok(Arc::new(RemoteShards {
            names: shards.iter().map(|s| s.url.to_string()).collect(),
            opened: shards.iter().map(|_| OnceLock::new()).collect(),
            queued: shards.iter().map(|_| AtomicBool::new(false)).collect(),
            shards,
            cache,
            bucket,
            _in_use: in_use,
            prefetcher: Mutex::new(None),
        }))
    }

    /// Rows per shard, as the manifest says.
    pub fn rows(&self) -> impl Iterator<Item = u64> + '_ {
        self.shards.iter().map(|s| s.rows)
    }

    /// Shard `i`'s blake3, as the manifest says.
    pub fn blake3(&self, i: usize) -> &str {
        &self.shards[i].blake3
    }

    /// Shard `i`'s URL.
    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// Shard `i`'s reader: fetched into the cache and opened on first use. Threads
    /// asking for the same shard at once wait on the cache's lock, not on each other
    /// here (a forked child must never find a lock held by a thread it does not have).
    pub fn get(&self, i: usize) -> Result<&ArrayRecordReader> {
        if let Some(r) = self.opened[i].get() {
            return Ok(r);
        }
        let shard = &self.shards[i];
        let mut reader = self.cache.open(&self.bucket, shard, &self.names[i])?;
        reader.set_max_record_bytes(shard.max_row_bytes);
        check_rows(&self.names[i], reader.len(), shard.rows)?;
        let _ = self.opened[i].set(reader);
        Ok(self.opened[i].get().expect("set just above"))
    }

    /// Starts fetching `shards` in the background (those not open or queued already).
    pub fn prefetch(self: &Arc<Self>, shards: impl IntoIterator<Item = usize>) {
        let todo: Vec<usize> = shards
            .into_iter()
            .filter(|&i| {
                self.opened[i].get().is_none() && !self.queued[i].swap(true, Ordering::AcqRel)
            })
            .collect();
        if todo.is_empty() {
            return;
        }
        let mut slot = self.prefetcher.lock().unwrap_or_else(|e| e.into_inner());
        let pid = std::process::id();
        if slot.as_ref().is_none_or(|(p, _)| *p != pid) {
            if slot.is_some() {
                // A forked child: the parent's prefetcher is not here; what it had
                // queued is fetched on demand (or queued again).
                for q in &self.queued {
                    q.store(false, Ordering::Release);
                }
                for &i in &todo {
                    self.queued[i].store(true, Ordering::Release);
                }
            }
            *slot = Some((pid, self.start_prefetcher()));
        }
        if let Some((_, tx)) = slot.as_ref() {
            // A full queue (far ahead already) or no prefetcher: these shards are
            // fetched when read.
            if tx.try_send(todo.clone()).is_err() {
                for i in todo {
                    self.queued[i].store(false, Ordering::Release);
                }
            }
        }
    }

    fn start_prefetcher(self: &Arc<Self>) -> SyncSender<Vec<usize>> {
        let (tx, rx) = sync_channel::<Vec<usize>>(64);
        let weak: Weak<RemoteShards> = Arc::downgrade(self);
        let started = std::thread::Builder::new()
            .name("probeflow-prefetch".into())
            .spawn(move || {
                while let Ok(batch) = rx.recv() {
                    let Some(me) = weak.upgrade() else {
                        break;
                    };
                    let next = AtomicUsize::new(0);
                    std::thread::scope(|s| {
                        for _ in 0..FETCH_CONCURRENCY.min(batch.len()) {
                            s.spawn(|| loop {
                                let k = next.fetch_add(1, Ordering::Relaxed);
                                let Some(&i) = batch.get(k) else {
                                    break;
                                };
                                // An error here is met again, and reported, when the
                                // shard is read.
                                let _ = me.get(i);
                                me.queued[i].store(false, Ordering::Release);
                            });
                        }
                    });
                }
            });
        if started.is_err() {
            // No prefetcher: shards are fetched when read. A dropped receiver makes
            // every send fail and un-queue.
            let (tx, _) = sync_channel(1);
            return tx;
        }
        tx
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::tests::{shards_of, test_options};
    use crate::dataset::{Loader, RowSource};
    use cache::tests::IN_USE_TESTS;
    use object_store::{ObjectStoreExt, PutPayload};
    use std::path::PathBuf;
    use store::RemoteUrl;

    /// Four local shards, the same bytes in an in-memory store, and their entries.
    fn setup(dir: &std::path::Path) -> (Vec<PathBuf>, Arc<Bucket>, Vec<RemoteShard>) {
        let mut files = shards_of(dir, 0);
        files.extend(shards_of(dir, 1));
        let root = RemoteUrl::parse("s3://test-bucket/out").unwrap();
        let memory = Arc::new(object_store::memory::InMemory::new());
        let bucket = Bucket::with_store(&root, memory.clone());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut shards = Vec::new();
        for (i, f) in files.iter().enumerate() {
            let bytes = std::fs::read(f).unwrap();
            let url = root.child(&format!("train/shard-{i}"));
            let path = object_store::path::Path::parse(format!("out/train/shard-{i}")).unwrap();
            runtime
                .block_on(memory.put(&path, PutPayload::from(bytes.clone())))
                .unwrap();
            shards.push(RemoteShard {
                url,
                rows: ArrayRecordReader::open(f).unwrap().len(),
                bytes: bytes.len() as u64,
                blake3: blake3::hash(&bytes).to_hex().to_string(),
                max_row_bytes: None,
            });
        }
        (files, bucket, shards)
    }

    fn cached(cache: &std::path::Path, shard: &RemoteShard) -> bool {
        cache
            .join("shards")
            .join(format!("{}.array_record", shard.blake3))
            .exists()
    }

    #[test]
    fn remote_shards_read_as_the_local_files_and_prefetch_fetches_ahead() {
        let _serial = IN_USE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("cache");
        let (files, bucket, shards) = setup(dir.path());
        let cache = ShardCache::new(&cache_dir, None, false).unwrap();
        let remote = RemoteShards::new(shards.clone(), bucket, cache).unwrap();
        // Prefetching shards 2 and 3 fetches them, and nothing else, in the background.
        remote.prefetch([2, 3]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !(cached(&cache_dir, &shards[2]) && cached(&cache_dir, &shards[3])) {
            assert!(
                std::time::Instant::now() < deadline,
                "prefetch did not fetch"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!cached(&cache_dir, &shards[0]) && !cached(&cache_dir, &shards[1]));
        // The loader over the remote shards gives the batches of the local files.
        let rows = RowSource {
            starts: crate::dataset::source::starts_of(remote.rows()),
            blake3: vec![None; shards.len()],
            shards: crate::dataset::source::Shards::Remote(remote),
            digest: Default::default(),
        };
        let opts = test_options(|o| o.num_epochs = Some(1));
        let mut local = Loader::new(RowSource::open(&files).unwrap(), opts.clone()).unwrap();
        let mut from_store = Loader::new(rows, opts).unwrap();
        let mut n = 0;
        loop {
            let (a, b) = (
                local.next_batch().unwrap(),
                from_store.next_batch().unwrap(),
            );
            assert_eq!(a.is_some(), b.is_some());
            let (Some(a), Some(b)) = (a, b) else { break };
            assert_eq!(a.into_arrays(), b.into_arrays());
            n += 1;
        }
        assert!(n > 3);
        assert!(shards.iter().all(|s| cached(&cache_dir, s)));
    }

    #[test]
    fn a_wrong_row_count_names_the_shard_and_eviction_is_least_recently_used() {
        let _serial = IN_USE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("cache");
        let (_, bucket, shards) = setup(dir.path());
        let mut wrong = shards[0].clone();
        wrong.rows += 1;
        let cache = ShardCache::new(&cache_dir, None, false).unwrap();
        let wrong = RemoteShards::new(vec![wrong], bucket.clone(), cache).unwrap();
        let err = match wrong.get(0) {
            Ok(_) => panic!("a row count other than the manifest's was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("s3://test-bucket/out/train/shard-0")
                && err.contains("rows, the manifest says"),
            "{err}"
        );

        // A limit of about two shards: 0 and 1 are fetched, 0 used again, then 2 needs
        // room and the least recently used, 1, goes.
        let two = shards[0].bytes.max(shards[1].bytes) + shards[2].bytes + 1;
        let limited = ShardCache::new(&cache_dir, Some(two), false).unwrap();
        let first =
            RemoteShards::new(shards[..2].to_vec(), bucket.clone(), limited.clone()).unwrap();
        first.get(0).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        first.get(1).unwrap();
        drop(first);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let again =
            RemoteShards::new(vec![shards[0].clone()], bucket.clone(), limited.clone()).unwrap();
        again.get(0).unwrap();
        drop(again);
        let third = RemoteShards::new(vec![shards[2].clone()], bucket, limited).unwrap();
        third.get(0).unwrap();
        assert!(cached(&cache_dir, &shards[0]) && cached(&cache_dir, &shards[2]));
        assert!(
            !cached(&cache_dir, &shards[1]),
            "the least recently used shard is evicted"
        );
    }
}
