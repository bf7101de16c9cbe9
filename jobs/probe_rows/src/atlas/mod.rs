//! RIPE Atlas ping results as input (`[input] format = "ripe_atlas"`): JSON lines, one
//! result per line, as RIPE publishes them (the hourly dumps, multistream bzip2), read
//! by the rules of RIPE's own parser and turned into one input row per packet.
//!
//! ```text
//! file ─► scan (blocking thread): chunks ─► decompress ─► lines ─► rules ─► packet batches
//!      ─► map: validate (as Parquet rows are) ─► partitions in memory ─► runs on scratch
//!      ─► one shuffle file (each partition's runs, then its records in memory) + rejects
//! ```
//!
//! * [`lines`]: decompression by the file's name, bounded lines.
//! * [`result`]: one line → its packets, or the reasons its rows are dropped.
//! * [`scan`]: a file → batches of packets, on a thread of its own.
//! * [`map`]: the map task of one file.
//!
//! A file is one map task, streamed: its memory is the scan's batches, the address
//! cache and the partitioned records up to a quarter of the worker's memory; past that
//! the records go to a run on the worker's scratch disk, and the shuffle file is
//! written from the runs and what is left in memory, partition by partition, when the
//! file ends. The shuffle file is the one a Parquet map writes, so the reduce is the
//! same.

pub mod lines;
pub mod map;
pub mod result;
pub mod scan;

use serde::{Deserialize, Serialize};

/// What a map task of Atlas results read, besides its rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AtlasCounts {
    /// Lines read (blank lines included).
    pub lines: u64,
    /// Lines that are RIPE Atlas ping results.
    pub results: u64,
    /// Packet entries of those results (kept, and dropped by a rule).
    pub packets: u64,
    /// Non-blank lines that are no Atlas ping result (malformed, too long, no Atlas
    /// result, of another type).
    pub not_results: u64,
}

impl AtlasCounts {
    pub fn add(&mut self, other: &AtlasCounts) {
        self.lines += other.lines;
        self.results += other.results;
        self.packets += other.packets;
        self.not_results += other.not_results;
    }

    /// Whether most of the non-blank lines are no Atlas ping results.
    pub fn mostly_not_results(&self) -> bool {
        self.not_results * 2 > self.results + self.not_results
    }
}
