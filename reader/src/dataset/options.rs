//! The options of a dataset iterator and their defaults (the one definition: the
//! Python package reads them from here).

use crate::error::{Error, Result};
use crate::sampler::SamplerOptions;

/// The options of a dataset iterator.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetOptions {
    pub batch_size: usize,
    pub seed: u64,
    /// This rank and the number of ranks (Grain's `shard_index` / `shard_count`).
    pub shard_index: u64,
    pub shard_count: u64,
    /// Pack several contexts per sequence (default) or one padded context per sequence.
    pub packing: bool,
    /// Rows whose contexts are shuffled and packed together.
    pub block_rows: usize,
    /// `None`: repeat forever.
    pub num_epochs: Option<u64>,
    /// At the end of the last epoch, drop a partial batch instead of padding it.
    pub drop_remainder: bool,
    /// Batches produced ahead on a background thread (0: produce on the caller's thread).
    pub prefetch: usize,
    /// Threads that sample a block's rows (1: the producer thread alone).
    pub num_threads: usize,
    pub sampler: SamplerOptions,
}

impl Default for DatasetOptions {
    fn default() -> Self {
        DatasetOptions {
            batch_size: 8,
            seed: 0,
            shard_index: 0,
            shard_count: 1,
            packing: true,
            block_rows: 256,
            num_epochs: None,
            drop_remainder: false,
            prefetch: 4,
            num_threads: default_threads(),
            sampler: SamplerOptions::default(),
        }
    }
}

/// Sampling threads when none are asked for: the cores this process may run on, at
/// most 4 (past that, the producer thread is the bottleneck).
pub(super) fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

impl DatasetOptions {
    pub fn check(&self) -> Result<()> {
        self.sampler.check()?;
        let bad = |w: String| Err(Error::Input(w));
        if self.batch_size == 0 {
            return bad("batch_size must be > 0".into());
        }
        if self.block_rows == 0 {
            return bad("block_rows must be > 0".into());
        }
        if self.shard_count == 0 || self.shard_index >= self.shard_count {
            return bad(format!(
                "shard_index {} must be in 0..shard_count ({})",
                self.shard_index, self.shard_count
            ));
        }
        Ok(())
    }
}
