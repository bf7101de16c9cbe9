//! Gzip JSON-lines outputs, streamed to the object store in parts as they are
//! compressed, so a task's memory does not grow with what it writes. The gzip header
//! has no name and no time: the same lines give the same bytes.

use std::io::Write;

use serde::Serialize;

use super::protocol::OutputFile;
use probeflow_engine::error::{EngineError, Result};
use probeflow_engine::store::{StoreUrl, PART_BYTES};

/// Lines staged before they are compressed.
const STAGED_BYTES: usize = 256 << 10;

fn corrupt(file: &str, what: impl std::fmt::Display) -> EngineError {
    EngineError::Corrupt {
        file: file.to_string(),
        what: what.to_string(),
    }
}

/// How hard a [`GzipJsonl`] compresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packing {
    /// The job's own intermediate files (read once by a later stage, then kept only
    /// for resume): the fastest level, as they are written while the scan runs.
    Intermediate,
    /// Results the user keeps: zlib's default level.
    Result,
}

impl Packing {
    fn level(self) -> flate2::Compression {
        match self {
            Packing::Intermediate => flate2::Compression::fast(),
            Packing::Result => flate2::Compression::default(),
        }
    }
}

/// A gzip JSON-lines file written in parts as it is compressed (memory: one part),
/// with its blake3.
pub struct GzipJsonl {
    path: String,
    level: flate2::Compression,
    /// Lines not yet compressed.
    lines: Vec<u8>,
    gz: flate2::write::GzEncoder<Vec<u8>>,
    upload: probeflow_engine::store::PartWriter,
    hash: blake3::Hasher,
    bytes: u64,
}

impl GzipJsonl {
    pub fn new(output: &StoreUrl, path: &str, packing: Packing) -> GzipJsonl {
        GzipJsonl {
            path: path.to_string(),
            level: packing.level(),
            lines: Vec::new(),
            gz: flate2::write::GzEncoder::new(Vec::new(), packing.level()),
            upload: output.put_in_parts(output.child(path)),
            hash: blake3::Hasher::new(),
            bytes: 0,
        }
    }

    pub fn line<T: Serialize>(&mut self, handle: &tokio::runtime::Handle, value: &T) -> Result<()> {
        serde_json::to_writer(&mut self.lines, value)
            .map_err(|e| EngineError::Internal(format!("a JSON line: {e}")))?;
        self.lines.push(b'\n');
        if self.lines.len() >= STAGED_BYTES {
            self.compress_staged()?;
        }
        if self.gz.get_ref().len() >= PART_BYTES {
            // Sent from the compressor's own buffer, which is then kept for the next
            // part (not grown again from nothing, page by page).
            let part = std::mem::take(self.gz.get_mut());
            self.send(handle, &part)?;
            *self.gz.get_mut() = part;
            self.gz.get_mut().clear();
        }
        Ok(())
    }

    /// Hands the staged lines to the compressor in one write (the compressor does
    /// work per write whatever its size: small writes would cost more than the data).
    fn compress_staged(&mut self) -> Result<()> {
        self.gz
            .write_all(&self.lines)
            .map_err(|e| corrupt(&self.path, e))?;
        self.lines.clear();
        Ok(())
    }

    fn send(&mut self, handle: &tokio::runtime::Handle, part: &[u8]) -> Result<()> {
        self.hash.update(part);
        self.bytes += part.len() as u64;
        handle.block_on(self.upload.write(part))
    }

    pub fn finish(mut self, handle: &tokio::runtime::Handle) -> Result<OutputFile> {
        self.compress_staged()?;
        let rest = std::mem::replace(
            &mut self.gz,
            flate2::write::GzEncoder::new(Vec::new(), self.level),
        )
        .finish()
        .map_err(|e| corrupt(&self.path, e))?;
        self.send(handle, &rest)?;
        handle.block_on(self.upload.finish())?;
        Ok(OutputFile {
            path: self.path,
            bytes: self.bytes,
            blake3: self.hash.finalize().to_hex().to_string(),
        })
    }
}
