//! [`ArrayRecordReader`]: random access to the records of an ArrayRecord file.
//!
//! `open` memory-maps the file (read-only, so many processes share the page cache),
//! checks the Riegeli signature, reads the postscript at `size - 65536`, then the footer
//! chunk it points to, and keeps one entry per data chunk. Reading record `i` finds its
//! chunk from the index (arithmetic for uniform groups, binary search otherwise), reads
//! and checks the chunk header, gathers the chunk data around block headers (checking
//! them too), checks the data hash and decodes the sizes and values. The decoded chunk
//! stays in the caller's [`RecordBuf`], so reading neighbours of a group costs one
//! decode. Uncompressed, contiguous chunks are not copied: the record is a slice of
//! the map.
//!
//! Nothing here panics on bad input: every inconsistency is an [`Error::Corrupt`] that
//! names the file, the chunk and what was wrong.
//!
//! The map is only valid while the file is not truncated by someone else; shards are
//! written once and never modified in place.

use std::fs::File;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::chunk::{parse_sizes, split_simple, Decompressor};
use super::layout::{
    self, chunk_type, ChunkHeader, BLOCK_HEADER_SIZE, BLOCK_SIZE, CHUNK_HEADER_SIZE,
};
use super::proto::{ChunkFooter, FooterMetadata, Postscript, ARRAY_RECORD_VERSION};
use crate::error::{Error, Location, Result};

static NEXT_READER_ID: AtomicU64 = AtomicU64::new(1);

enum Source {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Source {
    fn bytes(&self) -> &[u8] {
        match self {
            Source::Mapped(m) => m,
            Source::Owned(v) => v,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct ChunkEntry {
    offset: u64,
    first_record: u64,
    num_records: u64,
    decoded_data_size: u64,
}

/// Where the values of the cached chunk are.
#[derive(Debug, Clone, Copy)]
enum Values {
    /// In the file, contiguous, starting at this offset.
    Mapped(usize),
    /// In `RecordBuf::owned`.
    Owned,
}

/// Scratch space and a one-chunk cache for reads; one per reading thread.
#[derive(Debug, Default)]
pub struct RecordBuf {
    key: Option<(u64, usize)>,
    limits: Vec<u64>,
    values: Option<Values>,
    owned: Vec<u8>,
    gather: Vec<u8>,
    sizes: Vec<u8>,
    decompressor: Decompressor,
}

impl RecordBuf {
    pub fn new() -> Self {
        Self::default()
    }
}

/// A read-only, random-access view of one ArrayRecord file. `Send + Sync`: share it
/// between threads, each with its own [`RecordBuf`].
pub struct ArrayRecordReader {
    id: u64,
    name: String,
    source: Source,
    chunks: Vec<ChunkEntry>,
    num_records: u64,
    group_size: u64,
    uniform: bool,
    footer_offset: u64,
    writer_options: Option<String>,
    verify_hashes: bool,
    /// The largest record a chunk may claim on average, when known (a job output's
    /// `max_row_bytes`).
    max_record_bytes: Option<u64>,
}

impl std::fmt::Debug for ArrayRecordReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrayRecordReader")
            .field("name", &self.name)
            .field("records", &self.num_records)
            .field("chunks", &self.chunks.len())
            .field("group_size", &self.group_size)
            .finish()
    }
}

/// The first 64 bytes of every Riegeli/records file.
const SIGNATURE: [u8; 64] = [
    0x83, 0xaf, 0x70, 0xd1, 0x0d, 0x88, 0x4a, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x91, 0xba, 0xc2, 0x3c, 0x92, 0x87, 0xe1, 0xa9,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe1, 0x9f, 0x13, 0xc0, 0xe9, 0xb1, 0xc3, 0x72,
    0x73, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
];

/// A chunk's data: borrowed from the file or gathered into a buffer.
enum ChunkData<'a> {
    Contiguous { bytes: &'a [u8], file_offset: usize },
    Gathered(&'a [u8]),
}

impl<'a> ChunkData<'a> {
    fn bytes(&self) -> &'a [u8] {
        match self {
            ChunkData::Contiguous { bytes, .. } => bytes,
            ChunkData::Gathered(bytes) => bytes,
        }
    }
}

impl ArrayRecordReader {
    /// Opens and memory-maps `path`, reading its postscript and footer.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        Self::open_named(path, path.display().to_string())
    }

    /// Opens and memory-maps `path`, naming it `name` in errors (a cached copy of a
    /// remote shard is named by its URL).
    pub fn open_named(path: impl AsRef<Path>, name: impl Into<String>) -> Result<Self> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        // SAFETY: the map is read-only; shards are immutable once written (the shard
        // cache replaces a file by renaming a new one over it, never in place). A file
        // truncated by another process while mapped would fault, as with any mmap.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        Self::from_source(name.into(), Source::Mapped(map))
    }

    /// Reads an ArrayRecord file held in memory; `name` is used in error messages.
    pub fn from_bytes(name: impl Into<String>, bytes: Vec<u8>) -> Result<Self> {
        Self::from_source(name.into(), Source::Owned(bytes))
    }

    fn from_source(name: String, source: Source) -> Result<Self> {
        let mut reader = ArrayRecordReader {
            id: NEXT_READER_ID.fetch_add(1, Ordering::Relaxed),
            name,
            source,
            chunks: Vec::new(),
            num_records: 0,
            group_size: 0,
            uniform: true,
            footer_offset: 0,
            writer_options: None,
            verify_hashes: true,
            max_record_bytes: None,
        };
        reader.read_index()?;
        Ok(reader)
    }

    /// The path or name given at open.
    /// The blake3 of the file's bytes (lower-case hex), as the manifest records it.
    pub fn content_blake3(&self) -> String {
        blake3::hash(self.source.bytes()).to_hex().to_string()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.num_records
    }

    pub fn is_empty(&self) -> bool {
        self.num_records == 0
    }

    /// Number of data chunks.
    pub fn num_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Records per chunk, from the first footer entry (0 for an empty file).
    pub fn group_size(&self) -> u64 {
        self.group_size
    }

    /// The writer's option string stored in the footer, if any.
    pub fn writer_options(&self) -> Option<&str> {
        self.writer_options.as_deref()
    }

    /// Whether chunk data hashes are checked on every read (default: yes).
    /// Refuses (as corrupt) a chunk whose records claim more than `max` bytes each on
    /// average, before decompressing it: for files whose writer's row limit is known
    /// (a job output's `max_row_bytes`). Without it, a chunk is bounded only by its
    /// compressed size ([`super::chunk::decoded_bound`]).
    pub fn set_max_record_bytes(&mut self, max: Option<u64>) {
        self.max_record_bytes = max;
    }

    pub fn set_verify_hashes(&mut self, verify: bool) {
        self.verify_hashes = verify;
    }

    /// Size of the file in bytes.
    pub fn file_size(&self) -> u64 {
        self.source.bytes().len() as u64
    }

    /// Reads record `index`, borrowing from the file or from `buf`.
    pub fn read<'a>(&'a self, index: u64, buf: &'a mut RecordBuf) -> Result<&'a [u8]> {
        if index >= self.num_records {
            return Err(Error::IndexOutOfRange {
                file: self.name.clone(),
                index,
                len: self.num_records,
            });
        }
        let (c, r) = self.locate(index);
        if buf.key != Some((self.id, c)) {
            self.load_chunk(c, buf)?;
        }
        let r = r as usize;
        let start = if r == 0 { 0 } else { buf.limits[r - 1] } as usize;
        let end = buf.limits[r] as usize;
        Ok(match buf.values {
            Some(Values::Mapped(base)) => &self.source.bytes()[base + start..base + end],
            _ => &buf.owned[start..end],
        })
    }

    /// Reads record `index` into a new vector.
    pub fn read_to_vec(&self, index: u64) -> Result<Vec<u8>> {
        let mut buf = RecordBuf::new();
        Ok(self.read(index, &mut buf)?.to_vec())
    }

    /// Reads records `range.start..range.end`.
    pub fn read_range(&self, range: Range<u64>) -> Result<Vec<Vec<u8>>> {
        if range.end > self.num_records || range.start > range.end {
            return Err(Error::IndexOutOfRange {
                file: self.name.clone(),
                index: range.end.max(range.start),
                len: self.num_records,
            });
        }
        let mut buf = RecordBuf::new();
        range
            .map(|i| self.read(i, &mut buf).map(<[u8]>::to_vec))
            .collect()
    }

    /// Iterates over all records in order, decoding each chunk once.
    pub fn iter(&self) -> Records<'_> {
        Records {
            reader: self,
            buf: RecordBuf::new(),
            next: 0,
        }
    }

    fn locate(&self, index: u64) -> (usize, u64) {
        if self.uniform {
            ((index / self.group_size) as usize, index % self.group_size)
        } else {
            let c = self
                .chunks
                .partition_point(|e| e.first_record <= index)
                .saturating_sub(1);
            (c, index - self.chunks[c].first_record)
        }
    }

    fn corrupt(&self, location: Location, what: impl Into<String>) -> Error {
        Error::Corrupt {
            file: self.name.clone(),
            location,
            what: what.into(),
        }
    }

    fn read_index(&mut self) -> Result<()> {
        let size = self.file_size();
        let bytes = self.source.bytes();
        if bytes.len() < SIGNATURE.len() || bytes[..SIGNATURE.len()] != SIGNATURE {
            return Err(self.corrupt(
                Location::File,
                "not an ArrayRecord file: the Riegeli/records signature is missing",
            ));
        }
        if size < BLOCK_SIZE + SIGNATURE.len() as u64 {
            return Err(self.corrupt(
                Location::File,
                format!("truncated: {size} bytes is too small to hold an ArrayRecord postscript"),
            ));
        }
        let ps_offset = size - BLOCK_SIZE;
        let ps_loc = Location::Postscript { offset: ps_offset };
        let mut buf = RecordBuf::new();
        let ps_records = self.decode_all(ps_offset, size, ps_loc.clone(), &mut buf)?;
        let first = ps_records
            .first()
            .ok_or_else(|| self.corrupt(ps_loc.clone(), "no records in the postscript chunk"))?;
        let postscript = Postscript::decode(first).map_err(|e| self.corrupt(ps_loc.clone(), e))?;
        let footer_offset = postscript.footer_offset;
        if footer_offset < SIGNATURE.len() as u64
            || footer_offset >= ps_offset
            || !layout::is_possible_chunk_boundary(footer_offset)
        {
            return Err(self.corrupt(
                ps_loc,
                format!(
                    "footer offset {footer_offset} is not a chunk boundary before the postscript"
                ),
            ));
        }
        let f_loc = Location::Footer {
            offset: footer_offset,
        };
        let footer = self.decode_all(footer_offset, ps_offset, f_loc.clone(), &mut buf)?;
        let (meta, entries) = footer
            .split_first()
            .ok_or_else(|| self.corrupt(f_loc.clone(), "empty footer"))?;
        let meta = FooterMetadata::decode(meta).map_err(|e| self.corrupt(f_loc.clone(), e))?;
        if meta.version != ARRAY_RECORD_VERSION {
            return Err(Error::Unsupported {
                file: self.name.clone(),
                location: f_loc,
                what: format!("ArrayRecord version {}", meta.version),
            });
        }
        if entries.len() as u64 != meta.num_chunks {
            return Err(self.corrupt(
                f_loc,
                format!(
                    "footer metadata says {} chunks but has {} entries",
                    meta.num_chunks,
                    entries.len()
                ),
            ));
        }
        let mut chunks = Vec::with_capacity(entries.len());
        let mut next_record: u64 = 0;
        let mut min_offset = SIGNATURE.len() as u64;
        for (i, entry) in entries.iter().enumerate() {
            let e = ChunkFooter::decode(entry)
                .map_err(|e| self.corrupt(f_loc.clone(), format!("entry {i}: {e}")))?;
            if e.chunk_offset < min_offset
                || e.chunk_offset >= footer_offset
                || !layout::is_possible_chunk_boundary(e.chunk_offset)
            {
                return Err(self.corrupt(
                    f_loc,
                    format!(
                        "entry {i}: chunk offset {} out of order or out of range",
                        e.chunk_offset
                    ),
                ));
            }
            min_offset = e.chunk_offset + 1;
            chunks.push(ChunkEntry {
                offset: e.chunk_offset,
                first_record: next_record,
                num_records: e.num_records,
                decoded_data_size: e.decoded_data_size,
            });
            next_record = next_record
                .checked_add(e.num_records)
                .ok_or_else(|| self.corrupt(f_loc.clone(), "record count overflows"))?;
        }
        if next_record != meta.num_records {
            return Err(self.corrupt(
                f_loc,
                format!(
                    "footer metadata says {} records but the chunks hold {next_record}",
                    meta.num_records
                ),
            ));
        }
        let group_size = chunks.first().map_or(0, |c| c.num_records);
        let uniform = group_size > 0
            && chunks.iter().enumerate().all(|(i, c)| {
                if i + 1 == chunks.len() {
                    c.num_records <= group_size && c.num_records > 0
                } else {
                    c.num_records == group_size
                }
            });
        self.chunks = chunks;
        self.num_records = next_record;
        self.group_size = group_size;
        self.uniform = uniform || self.chunks.is_empty();
        self.footer_offset = footer_offset;
        self.writer_options = meta.writer_options;
        Ok(())
    }

    /// Decodes every record of the simple chunk at `offset` (footer, postscript).
    fn decode_all(
        &self,
        offset: u64,
        limit: u64,
        loc: Location,
        buf: &mut RecordBuf,
    ) -> Result<Vec<Vec<u8>>> {
        let header = self.read_header(offset, limit, &loc, None)?;
        self.decode_chunk(offset, limit, &header, &loc, buf)?;
        let values: &[u8] = match buf.values {
            Some(Values::Mapped(base)) => &self.source.bytes()[base..],
            _ => &buf.owned,
        };
        let mut start = 0usize;
        Ok(buf
            .limits
            .iter()
            .map(|&end| {
                let r = values[start..end as usize].to_vec();
                start = end as usize;
                r
            })
            .collect())
    }

    /// Reads and checks the chunk header at `offset`; the chunk must end by `limit`.
    fn read_header(
        &self,
        offset: u64,
        limit: u64,
        loc: &Location,
        expect_records: Option<u64>,
    ) -> Result<ChunkHeader> {
        let mut raw = Vec::with_capacity(CHUNK_HEADER_SIZE as usize);
        // The block headers the chunk header may straddle are checked once the chunk's
        // end is known, when its data is read.
        self.gather(offset, None, 0, CHUNK_HEADER_SIZE, loc, &mut raw)?;
        let raw: [u8; CHUNK_HEADER_SIZE as usize] = raw
            .as_slice()
            .try_into()
            .map_err(|_| self.corrupt(loc.clone(), "short chunk header"))?;
        let header = ChunkHeader::decode(&raw)
            .map_err(|_| self.corrupt(loc.clone(), "bad chunk header hash"))?;
        match header.chunk_type {
            chunk_type::SIMPLE => {}
            chunk_type::TRANSPOSED => {
                return Err(Error::Unsupported {
                    file: self.name.clone(),
                    location: loc.clone(),
                    what: "transposed chunk (written with the `transpose` option)".into(),
                })
            }
            t => {
                return Err(self.corrupt(
                    loc.clone(),
                    format!("chunk type {t:#04x} where a simple chunk (0x72) was expected"),
                ))
            }
        }
        if let Some(n) = expect_records {
            if header.num_records != n {
                return Err(self.corrupt(
                    loc.clone(),
                    format!(
                        "chunk header says {} records, the footer {n}",
                        header.num_records
                    ),
                ));
            }
        }
        match layout::chunk_end(offset, header.data_size, header.num_records) {
            Some(end) if end <= limit => Ok(header),
            _ => Err(self.corrupt(
                loc.clone(),
                format!(
                    "bad chunk size: {} data bytes run past the next chunk or the end of the file",
                    header.data_size
                ),
            )),
        }
    }

    fn load_chunk(&self, c: usize, buf: &mut RecordBuf) -> Result<()> {
        let entry = self.chunks[c];
        let limit = self
            .chunks
            .get(c + 1)
            .map_or(self.footer_offset, |n| n.offset);
        let loc = Location::Chunk {
            index: c,
            offset: entry.offset,
        };
        let header = self.read_header(entry.offset, limit, &loc, Some(entry.num_records))?;
        if header.decoded_data_size != entry.decoded_data_size {
            return Err(self.corrupt(
                loc,
                format!(
                    "chunk header says {} decoded bytes, the footer {}",
                    header.decoded_data_size, entry.decoded_data_size
                ),
            ));
        }
        buf.key = None;
        self.decode_chunk(entry.offset, limit, &header, &loc, buf)?;
        buf.key = Some((self.id, c));
        Ok(())
    }

    /// Reads, checks and decodes a simple chunk's data into `buf` (limits and values).
    fn decode_chunk(
        &self,
        offset: u64,
        limit: u64,
        header: &ChunkHeader,
        loc: &Location,
        buf: &mut RecordBuf,
    ) -> Result<()> {
        let RecordBuf {
            limits,
            values,
            owned,
            gather,
            sizes,
            decompressor,
            ..
        } = buf;
        *values = None;
        let end = layout::chunk_end(offset, header.data_size, header.num_records)
            .filter(|&e| e <= limit)
            .ok_or_else(|| self.corrupt(loc.clone(), "bad chunk size"))?;
        let data = self.chunk_data(offset, end, header.data_size, loc, gather)?;
        if self.verify_hashes && !layout::hash_matches(header.data_hash, data.bytes()) {
            return Err(self.corrupt(loc.clone(), "bad chunk data hash"));
        }
        let parts = split_simple(data.bytes()).map_err(|e| self.corrupt(loc.clone(), e))?;
        let bad = |e: String| self.corrupt(loc.clone(), e);
        if let Some(max) = self.max_record_bytes {
            let allowed = max.saturating_mul(header.num_records);
            if header.decoded_data_size > allowed {
                return Err(bad(format!(
                    "{} records claim {} decoded bytes, more than the output's \
                     max_row_bytes ({max}) each",
                    header.num_records, header.decoded_data_size
                )));
            }
        }
        if parts.compression == 0 {
            parse_sizes(
                parts.sizes,
                header.num_records,
                header.decoded_data_size,
                limits,
            )
            .map_err(bad)?;
            if parts.values.len() as u64 != header.decoded_data_size {
                return Err(bad(format!(
                    "{} bytes of values, the chunk header says {}",
                    parts.values.len(),
                    header.decoded_data_size
                )));
            }
            *values = Some(match data {
                ChunkData::Contiguous { bytes, file_offset } => {
                    Values::Mapped(file_offset + bytes.len() - parts.values.len())
                }
                ChunkData::Gathered(_) => {
                    owned.clear();
                    owned.extend_from_slice(parts.values);
                    Values::Owned
                }
            });
        } else {
            // Each size takes at most 10 bytes.
            let sizes_limit = header.num_records.saturating_mul(10);
            decompressor
                .decompress(parts.compression, parts.sizes, sizes_limit, sizes)
                .map_err(|e| bad(format!("record sizes: {e}")))?;
            parse_sizes(sizes, header.num_records, header.decoded_data_size, limits)
                .map_err(bad)?;
            decompressor
                .decompress(
                    parts.compression,
                    parts.values,
                    header.decoded_data_size,
                    owned,
                )
                .map_err(|e| bad(format!("record values: {e}")))?;
            if owned.len() as u64 != header.decoded_data_size {
                return Err(bad(
                    "decompressed values do not match the chunk header".into()
                ));
            }
            *values = Some(Values::Owned);
        }
        Ok(())
    }

    /// The data of the chunk at `offset` (after its 40-byte header).
    fn chunk_data<'a>(
        &'a self,
        offset: u64,
        end: u64,
        data_size: u64,
        loc: &Location,
        gather: &'a mut Vec<u8>,
    ) -> Result<ChunkData<'a>> {
        let truncated = || {
            self.corrupt(
                loc.clone(),
                "truncated: the chunk runs past the end of the file",
            )
        };
        let mut start =
            layout::add_with_overhead(offset, CHUNK_HEADER_SIZE).ok_or_else(truncated)?;
        if layout::is_block_boundary(start) && data_size > 0 {
            start += BLOCK_HEADER_SIZE;
        }
        let in_block = start % BLOCK_SIZE;
        if in_block + data_size <= BLOCK_SIZE {
            let s = usize::try_from(start).map_err(|_| truncated())?;
            let bytes = self
                .source
                .bytes()
                .get(s..s + data_size as usize)
                .ok_or_else(truncated)?;
            return Ok(ChunkData::Contiguous {
                bytes,
                file_offset: s,
            });
        }
        gather.clear();
        gather
            .try_reserve_exact(data_size as usize)
            .map_err(|_| self.corrupt(loc.clone(), format!("cannot allocate {data_size} bytes")))?;
        self.gather(offset, Some(end), CHUNK_HEADER_SIZE, data_size, loc, gather)?;
        Ok(ChunkData::Gathered(gather))
    }

    /// Appends `len` logical bytes of the chunk at `chunk_begin`, starting at logical
    /// offset `from`, skipping (and, when the chunk's end is known, checking) block headers.
    fn gather(
        &self,
        chunk_begin: u64,
        chunk_end: Option<u64>,
        from: u64,
        len: u64,
        loc: &Location,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let bytes = self.source.bytes();
        let truncated = || {
            self.corrupt(
                loc.clone(),
                "truncated: the chunk runs past the end of the file",
            )
        };
        let mut pos = layout::add_with_overhead(chunk_begin, from).ok_or_else(truncated)?;
        let mut left = len;
        while left > 0 {
            if layout::is_block_boundary(pos) {
                let p = usize::try_from(pos).map_err(|_| truncated())?;
                let raw: &[u8; BLOCK_HEADER_SIZE as usize] = bytes
                    .get(p..p + BLOCK_HEADER_SIZE as usize)
                    .and_then(|s| s.try_into().ok())
                    .ok_or_else(truncated)?;
                if let Some(end) = chunk_end {
                    let expected = (pos - chunk_begin, end - pos);
                    match layout::parse_block_header(raw) {
                        Some(found) if found == expected => {}
                        Some(_) => {
                            return Err(self.corrupt(
                                loc.clone(),
                                format!("block header at {pos} points to another chunk"),
                            ))
                        }
                        None => {
                            return Err(self
                                .corrupt(loc.clone(), format!("bad block header hash at {pos}")))
                        }
                    }
                }
                pos += BLOCK_HEADER_SIZE;
            }
            let n = left.min(layout::remaining_in_block(pos));
            let p = usize::try_from(pos).map_err(|_| truncated())?;
            let piece = bytes.get(p..p + n as usize).ok_or_else(truncated)?;
            out.extend_from_slice(piece);
            pos += n;
            left -= n;
        }
        Ok(())
    }
}

/// Iterator over all records of a file, in order.
pub struct Records<'a> {
    reader: &'a ArrayRecordReader,
    buf: RecordBuf,
    next: u64,
}

impl Iterator for Records<'_> {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.reader.len() {
            return None;
        }
        let i = self.next;
        self.next += 1;
        Some(self.reader.read(i, &mut self.buf).map(<[u8]>::to_vec))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.reader.len() - self.next) as usize;
        (left, Some(left))
    }
}
