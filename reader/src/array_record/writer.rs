//! [`ArrayRecordWriter`]: records in, an ArrayRecord file out.
//!
//! Records collect into a group; every `group_size` records the group is encoded as
//! one simple chunk and framed into the sink (block headers every 64 KiB). A group of
//! one record is encoded from the caller's bytes, and between chunks the writer keeps
//! at most [`RETAINED_BUFFER`] of each buffer: a large record is not copied into the
//! writer, and its chunk's memory goes once it is written. The footer
//! remembers each chunk's offset; `finish` writes it, pads to a block boundary and
//! writes the postscript, padded again, so the postscript sits at `size - 65536` as
//! readers expect. The output is a pure function of the records and the options; with
//! `uncompressed` it is byte-identical to Google's C++ writer.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use super::chunk::Compressor;
use super::layout::{self, chunk_type, ChunkHeader, BLOCK_SIZE};
use super::options::{Compression, WriterOptions};
use super::proto::{
    put_varint, ChunkFooter, FooterMetadata, Postscript, ARRAY_RECORD_VERSION, MAGIC,
};
use crate::error::{Error, Result};

static ZEROS: [u8; BLOCK_SIZE as usize] = [0; BLOCK_SIZE as usize];

/// The most capacity each of a writer's buffers keeps from one chunk to the next.
const RETAINED_BUFFER: usize = 1 << 20;

/// Gives back an empty buffer's capacity beyond `bytes`.
fn keep_at_most(buffer: &mut Vec<u8>, bytes: usize) {
    if buffer.capacity() > bytes {
        buffer.shrink_to(bytes);
    }
}

/// What a finished writer wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteSummary {
    /// Records written.
    pub records: u64,
    /// Data chunks written (not counting the signature, footer, postscript, padding).
    pub chunks: u64,
    /// Total bytes of the file.
    pub bytes: u64,
}

/// Writes an ArrayRecord file to any [`Write`] sink.
pub struct ArrayRecordWriter<W: Write> {
    sink: W,
    name: String,
    options: WriterOptions,
    compressor: Compressor,
    pos: u64,
    sizes: Vec<u8>,
    values: Vec<u8>,
    group_records: u64,
    footer: Vec<ChunkFooter>,
    records: u64,
    scratch: Vec<u8>,
    chunk: Vec<u8>,
    failed: bool,
}

impl ArrayRecordWriter<BufWriter<File>> {
    /// Creates (truncates) the file at `path` and writes the file signature.
    pub fn create(path: impl AsRef<Path>, options: WriterOptions) -> Result<Self> {
        let path = path.as_ref();
        let file = File::create(path).map_err(|e| Error::io(path, e))?;
        Self::with_name(
            BufWriter::with_capacity(1 << 20, file),
            options,
            path.display().to_string(),
        )
    }
}

impl<W: Write> ArrayRecordWriter<W> {
    /// Starts a file in `sink` and writes the file signature.
    pub fn new(sink: W, options: WriterOptions) -> Result<Self> {
        Self::with_name(sink, options, "<ArrayRecord sink>".to_string())
    }

    /// Like [`ArrayRecordWriter::new`], naming the sink in error messages.
    pub fn with_name(sink: W, options: WriterOptions, name: String) -> Result<Self> {
        let compressor = Compressor::new(options.compression).map_err(|e| Error::Options {
            options: options.footer_string(),
            what: e.to_string(),
        })?;
        let mut writer = ArrayRecordWriter {
            sink,
            name,
            options,
            compressor,
            pos: 0,
            sizes: Vec::new(),
            values: Vec::new(),
            group_records: 0,
            footer: Vec::new(),
            records: 0,
            scratch: Vec::new(),
            chunk: Vec::new(),
            failed: false,
        };
        writer.write_chunk(&ChunkHeader::new(&[], chunk_type::SIGNATURE, 0, 0), &[])?;
        Ok(writer)
    }

    pub fn options(&self) -> &WriterOptions {
        &self.options
    }

    /// Records written so far (including those not yet flushed as a chunk).
    pub fn records_written(&self) -> u64 {
        self.records
    }

    /// Appends one record.
    pub fn write(&mut self, record: &[u8]) -> Result<()> {
        self.check_usable()?;
        put_varint(&mut self.sizes, record.len() as u64);
        self.group_records += 1;
        self.records += 1;
        if self.group_records >= u64::from(self.options.group_size) && self.values.is_empty() {
            // A group of this one record (`group_size:1`, the default) is encoded from
            // the caller's bytes: no copy of a record of up to `max_row_bytes`.
            return self.write_group(record);
        }
        self.values.extend_from_slice(record);
        if self.group_records >= u64::from(self.options.group_size) {
            self.flush_group()?;
        }
        Ok(())
    }

    /// Writes the pending group, the footer and the postscript, and flushes the sink.
    pub fn finish(self) -> Result<WriteSummary> {
        self.finish_into_inner().map(|(_, summary)| summary)
    }

    /// Like [`ArrayRecordWriter::finish`], also handing back the sink.
    pub fn finish_into_inner(mut self) -> Result<(W, WriteSummary)> {
        self.check_usable()?;
        if self.group_records > 0 {
            self.flush_group()?;
        }
        // Footer: metadata, then one entry per data chunk, in the file's compression.
        let metadata = FooterMetadata {
            version: ARRAY_RECORD_VERSION,
            num_chunks: self.footer.len() as u64,
            num_records: self.records,
            writer_options: Some(self.options.footer_string()),
        };
        let mut footer_records: Vec<Vec<u8>> = Vec::with_capacity(self.footer.len() + 1);
        let mut buf = Vec::new();
        metadata.encode(&mut buf);
        footer_records.push(buf);
        for entry in &self.footer {
            let mut buf = Vec::new();
            entry.encode(&mut buf);
            footer_records.push(buf);
        }
        let footer_offset = self.pos;
        let uncompressed =
            Compressor::new(Compression::Uncompressed).map_err(|e| self.io_error(e))?;
        let mut compressor = std::mem::replace(&mut self.compressor, uncompressed);
        self.write_simple_chunk(&mut compressor, &footer_records)?;
        self.pad_to_block_boundary()?;

        let postscript = Postscript {
            footer_offset,
            magic: MAGIC,
        };
        let mut buf = Vec::new();
        postscript.encode(&mut buf);
        let postscripts = vec![buf.clone(), buf.clone(), buf];
        let mut uncompressed = std::mem::replace(&mut self.compressor, compressor);
        self.write_simple_chunk(&mut uncompressed, &postscripts)?;
        self.pad_to_block_boundary()?;
        self.sink.flush().map_err(|e| self.io_error(e))?;
        let summary = WriteSummary {
            records: self.records,
            chunks: self.footer.len() as u64,
            bytes: self.pos,
        };
        Ok((self.sink, summary))
    }

    fn check_usable(&self) -> Result<()> {
        if self.failed {
            return Err(Error::io(
                &self.name,
                std::io::Error::other("an earlier write failed; the file is incomplete"),
            ));
        }
        Ok(())
    }

    fn io_error(&mut self, e: std::io::Error) -> Error {
        self.failed = true;
        Error::io(&self.name, e)
    }

    /// Writes the pending group, its values collected in `self.values`.
    fn flush_group(&mut self) -> Result<()> {
        let mut values = std::mem::take(&mut self.values);
        let written = self.write_group(&values);
        values.clear();
        keep_at_most(&mut values, RETAINED_BUFFER);
        self.values = values;
        written
    }

    /// Writes the pending group (its sizes in `self.sizes`) with these values as one
    /// chunk; the writer's buffers then keep at most [`RETAINED_BUFFER`] each, so that
    /// a large record's copies do not stay with the writer.
    fn write_group(&mut self, values: &[u8]) -> Result<()> {
        let mut chunk = std::mem::take(&mut self.chunk);
        let encoded =
            self.compressor
                .encode_simple(&self.sizes, values, &mut self.scratch, &mut chunk);
        if let Err(e) = encoded {
            return Err(self.io_error(e));
        }
        let header = ChunkHeader::new(
            &chunk,
            chunk_type::SIMPLE,
            self.group_records,
            values.len() as u64,
        );
        let offset = self.write_chunk(&header, &chunk)?;
        self.footer.push(ChunkFooter {
            chunk_offset: offset,
            decoded_data_size: values.len() as u64,
            num_records: self.group_records,
        });
        chunk.clear();
        keep_at_most(&mut chunk, RETAINED_BUFFER);
        self.chunk = chunk;
        self.sizes.clear();
        keep_at_most(&mut self.sizes, RETAINED_BUFFER);
        self.scratch.clear();
        keep_at_most(&mut self.scratch, RETAINED_BUFFER);
        self.group_records = 0;
        if self.options.pad_to_block_boundary {
            self.pad_to_block_boundary()?;
        }
        Ok(())
    }

    fn write_simple_chunk(
        &mut self,
        compressor: &mut Compressor,
        records: &[Vec<u8>],
    ) -> Result<u64> {
        let mut sizes = Vec::new();
        let mut values = Vec::new();
        for r in records {
            put_varint(&mut sizes, r.len() as u64);
            values.extend_from_slice(r);
        }
        let mut data = Vec::new();
        let mut scratch = Vec::new();
        if let Err(e) = compressor.encode_simple(&sizes, &values, &mut scratch, &mut data) {
            return Err(self.io_error(e));
        }
        let header = ChunkHeader::new(
            &data,
            chunk_type::SIMPLE,
            records.len() as u64,
            values.len() as u64,
        );
        self.write_chunk(&header, &data)
    }

    fn pad_to_block_boundary(&mut self) -> Result<()> {
        let end = layout::pos_after_padding(self.pos, BLOCK_SIZE);
        if end == self.pos {
            return Ok(());
        }
        let len = layout::distance_without_overhead(self.pos, end) - layout::CHUNK_HEADER_SIZE;
        let data = vec![0u8; len as usize];
        let header = ChunkHeader::new(&data, chunk_type::PADDING, 0, 0);
        self.write_chunk(&header, &data)?;
        Ok(())
    }

    /// Frames one chunk at the current position; returns where it began.
    fn write_chunk(&mut self, header: &ChunkHeader, data: &[u8]) -> Result<u64> {
        let begin = self.pos;
        let end = match layout::chunk_end(begin, header.data_size, header.num_records) {
            Some(end) => end,
            None => return Err(self.io_error(std::io::Error::other("file size overflows u64"))),
        };
        let header_bytes = header.encode();
        let written = self
            .write_section(&header_bytes, begin, end)
            .and_then(|()| self.write_section(data, begin, end))
            .and_then(|()| {
                while self.pos < end {
                    let n = (end - self.pos).min(self.room_in_block(begin, end)?);
                    self.sink.write_all(&ZEROS[..n as usize])?;
                    self.pos += n;
                }
                Ok(())
            });
        match written {
            Ok(()) => Ok(begin),
            Err(e) => Err(self.io_error(e)),
        }
    }

    fn write_section(&mut self, mut bytes: &[u8], begin: u64, end: u64) -> std::io::Result<()> {
        while !bytes.is_empty() {
            let n = (bytes.len() as u64).min(self.room_in_block(begin, end)?) as usize;
            self.sink.write_all(&bytes[..n])?;
            self.pos += n as u64;
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// Writes a block header first if at a block boundary; returns the bytes left in the block.
    fn room_in_block(&mut self, begin: u64, end: u64) -> std::io::Result<u64> {
        if layout::is_block_boundary(self.pos) {
            self.sink
                .write_all(&layout::block_header(self.pos - begin, end - self.pos))?;
            self.pos += layout::BLOCK_HEADER_SIZE;
        }
        Ok(layout::remaining_in_block(self.pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array_record::reader::{ArrayRecordReader, RecordBuf};

    fn buffers(w: &ArrayRecordWriter<Vec<u8>>) -> [usize; 4] {
        [
            w.sizes.capacity(),
            w.values.capacity(),
            w.scratch.capacity(),
            w.chunk.capacity(),
        ]
    }

    #[test]
    fn a_large_record_leaves_no_copy_of_itself_with_the_writer() {
        let big: Vec<u8> = (0..9 << 20)
            .map(|i: u32| (i % 7 + i / 4096) as u8)
            .collect();
        for options in ["group_size:1,zstd:3", "group_size:2,zstd:3", "uncompressed"] {
            let mut w = ArrayRecordWriter::new(Vec::new(), options.parse().unwrap()).unwrap();
            for record in [&b"small"[..], &big, &b"after"[..], &big] {
                w.write(record).unwrap();
                if w.group_records == 0 {
                    assert!(
                        buffers(&w).iter().all(|&c| c <= RETAINED_BUFFER),
                        "{options}: {:?}",
                        buffers(&w)
                    );
                }
            }
            let (bytes, summary) = w.finish_into_inner().unwrap();
            assert_eq!(summary.records, 4);
            let r = ArrayRecordReader::from_bytes(options, bytes).unwrap();
            let mut buf = RecordBuf::default();
            let back: Vec<Vec<u8>> = (0..4)
                .map(|i| r.read(i, &mut buf).unwrap().to_vec())
                .collect();
            assert_eq!(
                back,
                [
                    b"small".to_vec(),
                    big.clone(),
                    b"after".to_vec(),
                    big.clone()
                ]
            );
        }
    }
}
