//! Simple chunks (type `r`): record sizes and concatenated record values, each
//! possibly compressed, and the compression codecs Riegeli uses.
//!
//! Encoded data of a simple chunk:
//!
//! ```text
//! compression byte | varint(len(sizes blob)) | sizes blob | values blob
//! ```
//!
//! A blob is the raw bytes when uncompressed, else `varint(decompressed size)` followed
//! by a zstd frame, a brotli stream or raw Snappy. Sizes decode to one varint per record.

use std::io::Read;

use super::options::Compression;
use super::proto::{get_varint, put_varint};

/// Compresses blobs for one writer; keeps the zstd context between chunks.
pub struct Compressor {
    compression: Compression,
    zstd: Option<zstd::bulk::Compressor<'static>>,
}

impl Compressor {
    pub fn new(compression: Compression) -> std::io::Result<Self> {
        let zstd = match compression {
            Compression::Zstd { level, window_log } => {
                let mut c = zstd::bulk::Compressor::new(level)?;
                c.set_parameter(zstd::zstd_safe::CParameter::WindowLog(window_log))?;
                Some(c)
            }
            _ => None,
        };
        Ok(Compressor { compression, zstd })
    }

    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// Appends the blob for `input` to `out`.
    pub fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
        if self.compression != Compression::Uncompressed {
            put_varint(out, input.len() as u64);
        }
        match self.compression {
            Compression::Uncompressed => out.extend_from_slice(input),
            Compression::Zstd { window_log, .. } => {
                let c = self
                    .zstd
                    .as_mut()
                    .ok_or_else(|| std::io::Error::other("zstd context missing"))?;
                // An input that fits the window needs no explicit window: zstd then sizes
                // its tables to the input, which makes small chunks (every record its own
                // chunk, sizes blobs of a few bytes) far cheaper to compress. The window
                // limit still applies to inputs larger than it.
                let explicit = (input.len() as u64) > (1u64 << window_log);
                c.set_parameter(zstd::zstd_safe::CParameter::WindowLog(if explicit {
                    window_log
                } else {
                    0
                }))?;
                // Straight into `out` (no second buffer of the blob's size: a row is up
                // to `max_row_bytes`, and the reduce counts every copy of it).
                let start = out.len();
                out.resize(start + zstd::zstd_safe::compress_bound(input.len()), 0);
                let n = c.compress_to_buffer(input, &mut out[start..])?;
                out.truncate(start + n);
            }
            Compression::Brotli { level, window_log } => {
                let params = brotli::enc::BrotliEncoderParams {
                    quality: level as i32,
                    lgwin: window_log.unwrap_or(22) as i32,
                    ..Default::default()
                };
                let mut reader = input;
                brotli::BrotliCompress(&mut reader, out, &params)?;
            }
            Compression::Snappy { .. } => {
                let start = out.len();
                out.resize(start + snap::raw::max_compress_len(input.len()), 0);
                let n = snap::raw::Encoder::new()
                    .compress(input, &mut out[start..])
                    .map_err(std::io::Error::other)?;
                out.truncate(start + n);
            }
        }
        Ok(())
    }

    /// Encodes a simple chunk's data from record sizes (varints) and values.
    pub fn encode_simple(
        &mut self,
        sizes: &[u8],
        values: &[u8],
        scratch: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> std::io::Result<()> {
        out.clear();
        out.push(self.compression.type_byte());
        scratch.clear();
        self.compress(sizes, scratch)?;
        put_varint(out, scratch.len() as u64);
        out.extend_from_slice(scratch);
        let values_at = out.len();
        self.compress(values, out)?;
        // A chunk that compresses past what a reader accepts of a file it did not write
        // ([`decoded_bound`]: only long runs of one byte do) is stored uncompressed, so
        // that every chunk written reads back.
        let within = |input: &[u8], blob: usize| input.len() as u64 <= decoded_bound(blob);
        if self.compression != Compression::Uncompressed
            && !(within(sizes, scratch.len()) && within(values, out.len() - values_at))
        {
            out.clear();
            out.push(Compression::Uncompressed.type_byte());
            put_varint(out, sizes.len() as u64);
            out.extend_from_slice(sizes);
            out.extend_from_slice(values);
        }
        Ok(())
    }
}

/// A compressed blob may always claim this many decompressed bytes.
pub const MAX_DECODED_FLOOR: u64 = 256 << 20;

/// Past [`MAX_DECODED_FLOOR`], a blob may claim at most this many times its own size
/// (deflate's limit is about 1 032; records that compress further are runs of one byte).
pub const MAX_DECODED_RATIO: u64 = 1100;

/// The most a compressed blob of `len` bytes may decompress to: a file's claims cannot
/// make a reader allocate more than this multiple of the file.
pub fn decoded_bound(len: usize) -> u64 {
    MAX_DECODED_FLOOR.max((len as u64).saturating_mul(MAX_DECODED_RATIO))
}

/// The most a Snappy stream can expand: a 3-byte copy of 64 bytes (21⅓), rounded up.
/// Snappy is decompressed into a buffer of the claimed size, zero-filled first, so a
/// claim past it is refused whatever [`MAX_DECODED_FLOOR`] allows.
pub const SNAPPY_MAX_RATIO: u64 = 22;

/// The most a blob of `compression` and `len` bytes may decompress to: [`decoded_bound`],
/// and for Snappy what its stream can hold.
fn decoded_bound_of(compression: u8, len: usize) -> u64 {
    match compression {
        b's' => (len as u64).saturating_mul(SNAPPY_MAX_RATIO),
        _ => decoded_bound(len),
    }
}

/// Reusable decompression state.
#[derive(Default)]
pub struct Decompressor {
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl std::fmt::Debug for Decompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decompressor").finish_non_exhaustive()
    }
}

impl Decompressor {
    /// Decompresses a (non-`0`) blob into `out` (cleared first). The blob's declared
    /// size must be at most `limit`.
    pub fn decompress(
        &mut self,
        compression: u8,
        blob: &[u8],
        limit: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        let (size, n) = get_varint(blob).ok_or("bad decompressed-size prefix")?;
        if size > limit {
            return Err(format!(
                "declared decompressed size {size} exceeds the expected {limit}"
            ));
        }
        let bound = decoded_bound_of(compression, blob.len());
        if size > bound {
            return Err(format!(
                "a blob of {} bytes claims {size} bytes decompressed, more than {bound} \
                 (at most {MAX_DECODED_FLOOR} or {MAX_DECODED_RATIO} times its size; \
                 Snappy: {SNAPPY_MAX_RATIO} times)",
                blob.len()
            ));
        }
        let size = usize::try_from(size).map_err(|_| "decompressed size too large")?;
        let stream = &blob[n..];
        out.clear();
        out.try_reserve_exact(size)
            .map_err(|_| format!("cannot allocate {size} bytes"))?;
        match compression {
            b'z' => {
                if self.zstd.is_none() {
                    self.zstd = Some(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?);
                }
                let d = self.zstd.as_mut().ok_or("zstd context missing")?;
                let got = d
                    .decompress_to_buffer(stream, out)
                    .map_err(|e| format!("zstd: {e}"))?;
                out.truncate(got);
            }
            b'b' => brotli_decompress(stream, size, out)?,
            b's' => {
                let len = snap::raw::decompress_len(stream).map_err(|e| format!("snappy: {e}"))?;
                if len != size {
                    return Err(format!(
                        "snappy stream holds {len} bytes, the prefix says {size}"
                    ));
                }
                out.resize(size, 0);
                snap::raw::Decoder::new()
                    .decompress(stream, out)
                    .map_err(|e| format!("snappy: {e}"))?;
            }
            other => return Err(format!("unknown compression type {other:#04x}")),
        }
        if out.len() != size {
            return Err(format!(
                "decompressed to {} bytes, the prefix says {size}",
                out.len()
            ));
        }
        Ok(())
    }
}

/// The most a Brotli stream's decoder may allocate at once for `size` decoded bytes:
/// its window (up to 1 GiB in the large-window format Riegeli allows), which the
/// decoder allocates whole unless the stream's first block is its last, within
/// [`MAX_DECODED_FLOOR`] or the claim rounded up to a power of two (a window past the
/// output is never needed).
pub fn brotli_allocation_bound(size: usize) -> usize {
    let floor = usize::try_from(MAX_DECODED_FLOOR).unwrap_or(usize::MAX);
    floor
        .max(size.checked_next_power_of_two().unwrap_or(usize::MAX))
        .saturating_add(BROTLI_SLACK)
}

/// The window a Brotli stream declares (RFC 7932's 1 to 8 bits, or the large-window
/// format's 6 more), as a base-2 log; `None` for a header that does not decode.
pub fn brotli_window_log(stream: &[u8]) -> Option<u32> {
    let first = u32::from(*stream.first()?);
    if first & 1 == 0 {
        return Some(16);
    }
    match ((first >> 1) & 7, (first >> 4) & 7) {
        (0, 0) => Some(17),
        (0, 1) if first & 0x80 == 0 => {
            Some(u32::from(*stream.get(1)?) & 0x3f).filter(|log| (10..=30).contains(log))
        }
        (0, 1) => None,
        (0, m) => Some(8 + m),
        (n, _) => Some(17 + n),
    }
}

/// What brotli's decoder allocates past its window (its write-ahead slack, rounded up).
const BROTLI_SLACK: usize = 4096;

/// Decompresses a Brotli stream of `size` bytes into `out` (reserved for them), its
/// decoder's every allocation within [`brotli_allocation_bound`].
fn brotli_decompress(stream: &[u8], size: usize, out: &mut Vec<u8>) -> Result<(), String> {
    use brotli_decompressor::reader::DecompressorCustomAlloc;
    let bound = brotli_allocation_bound(size);
    let mut cap = BoundedAlloc::new(bound);
    let buffer = brotli_decompressor::Allocator::<u8>::alloc_cell(&mut cap, 64 * 1024);
    let read = DecompressorCustomAlloc::new(stream, buffer, cap.clone(), cap.clone(), cap.clone())
        .take(size as u64 + 1)
        .read_to_end(out);
    match (read, cap.refused.get()) {
        (_, Some(wanted)) => Err(format!(
            "brotli: its window needs {wanted} bytes, more than {bound} for {size} bytes \
             decompressed"
        )),
        (Err(e), None) => Err(format!("brotli: {e}")),
        (Ok(_), None) => Ok(()),
    }
}

/// brotli's allocator (`alloc_stdlib::StandardAlloc`), refusing (with an empty cell,
/// which the decoder reports as an error) any allocation past `max_bytes`, and noting
/// its size.
#[derive(Clone)]
struct BoundedAlloc {
    max_bytes: usize,
    refused: std::rc::Rc<std::cell::Cell<Option<usize>>>,
}

impl BoundedAlloc {
    fn new(max_bytes: usize) -> Self {
        BoundedAlloc {
            max_bytes,
            refused: std::rc::Rc::default(),
        }
    }
}

impl<T: Clone + Default> brotli_decompressor::Allocator<T> for BoundedAlloc {
    type AllocatedMemory = alloc_stdlib::heap_alloc::WrapBox<T>;

    fn alloc_cell(&mut self, len: usize) -> Self::AllocatedMemory {
        let bytes = len.saturating_mul(size_of::<T>());
        if bytes > self.max_bytes {
            self.refused.set(Some(bytes));
            return Self::AllocatedMemory::default();
        }
        brotli_decompressor::StandardAlloc::default().alloc_cell(len)
    }

    fn free_cell(&mut self, _data: Self::AllocatedMemory) {}
}

/// The parts of a simple chunk's data.
pub struct SimpleParts<'a> {
    pub compression: u8,
    pub sizes: &'a [u8],
    pub values: &'a [u8],
}

pub fn split_simple(data: &[u8]) -> Result<SimpleParts<'_>, String> {
    let (&compression, rest) = data.split_first().ok_or("empty simple chunk")?;
    if !matches!(compression, 0 | b'b' | b'z' | b's') {
        return Err(format!("unknown compression type {compression:#04x}"));
    }
    let (len, n) = get_varint(rest).ok_or("bad sizes length")?;
    let end = usize::try_from(len)
        .ok()
        .and_then(|l| l.checked_add(n))
        .filter(|&e| e <= rest.len())
        .ok_or("sizes past the end of the chunk")?;
    Ok(SimpleParts {
        compression,
        sizes: &rest[n..end],
        values: &rest[end..],
    })
}

/// Parses `num_records` varint sizes into record end offsets (`limits`), checking that
/// they add up to `decoded_data_size` and fill the sizes buffer exactly.
pub fn parse_sizes(
    sizes: &[u8],
    num_records: u64,
    decoded_data_size: u64,
    limits: &mut Vec<u64>,
) -> Result<(), String> {
    limits.clear();
    if num_records > sizes.len() as u64 {
        return Err(format!(
            "{num_records} records but only {} bytes of sizes",
            sizes.len()
        ));
    }
    limits.reserve(num_records as usize);
    let mut pos = 0usize;
    let mut total: u64 = 0;
    for _ in 0..num_records {
        let (size, n) = get_varint(&sizes[pos..]).ok_or("bad record size")?;
        pos += n;
        total = total
            .checked_add(size)
            .filter(|&t| t <= decoded_data_size)
            .ok_or("record sizes exceed the chunk's decoded size")?;
        limits.push(total);
    }
    if pos != sizes.len() {
        return Err("trailing bytes after the record sizes".into());
    }
    if total != decoded_data_size {
        return Err(format!(
            "record sizes add up to {total}, the chunk header says {decoded_data_size}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_compressions() -> Vec<Compression> {
        vec![
            Compression::Uncompressed,
            Compression::Zstd {
                level: 3,
                window_log: 20,
            },
            Compression::Brotli {
                level: 6,
                window_log: None,
            },
            Compression::Snappy { level: 1 },
        ]
    }

    #[test]
    fn simple_chunks_round_trip_in_every_compression() {
        let records: Vec<Vec<u8>> = vec![vec![], b"a".to_vec(), vec![7u8; 100_000]];
        let mut sizes = Vec::new();
        let mut values = Vec::new();
        for r in &records {
            put_varint(&mut sizes, r.len() as u64);
            values.extend_from_slice(r);
        }
        for c in all_compressions() {
            let mut comp = Compressor::new(c).unwrap();
            let (mut scratch, mut data) = (Vec::new(), Vec::new());
            comp.encode_simple(&sizes, &values, &mut scratch, &mut data)
                .unwrap();
            let parts = split_simple(&data).unwrap();
            assert_eq!(parts.compression, c.type_byte());
            let mut d = Decompressor::default();
            let (s, v) = if parts.compression == 0 {
                (parts.sizes.to_vec(), parts.values.to_vec())
            } else {
                let (mut s, mut v) = (Vec::new(), Vec::new());
                d.decompress(parts.compression, parts.sizes, 100, &mut s)
                    .unwrap();
                d.decompress(parts.compression, parts.values, values.len() as u64, &mut v)
                    .unwrap();
                (s, v)
            };
            let mut limits = Vec::new();
            parse_sizes(&s, 3, values.len() as u64, &mut limits).unwrap();
            assert_eq!(limits, vec![0, 1, 100_001]);
            assert_eq!(v, values, "{c:?}");
        }
    }

    #[test]
    fn a_blob_claiming_more_than_its_bound_is_refused_before_any_allocation() {
        // 10 bytes of Snappy whose prefix and stream both claim 3 GiB.
        let mut blob = Vec::new();
        put_varint(&mut blob, 3 << 30);
        put_varint(&mut blob, 3 << 30);
        blob.extend_from_slice(&[0u8; 5]);
        for compression in [b's', b'z', b'b'] {
            let mut out = Vec::new();
            let e = Decompressor::default()
                .decompress(compression, &blob, u64::MAX, &mut out)
                .unwrap_err();
            assert!(e.contains("more than"), "{e}");
            assert_eq!(out.capacity(), 0, "{}", compression as char);
        }
        // What fits the bound is decompressed as before: a run that compresses far
        // past the ratio, within the floor.
        let zeros = vec![0u8; 8 << 20];
        let mut c = Compressor::new(Compression::Zstd {
            level: 3,
            window_log: 20,
        })
        .unwrap();
        let mut packed = Vec::new();
        c.compress(&zeros, &mut packed).unwrap();
        assert!((packed.len() as u64) * MAX_DECODED_RATIO < zeros.len() as u64);
        let mut out = Vec::new();
        Decompressor::default()
            .decompress(b'z', &packed, u64::MAX, &mut out)
            .unwrap();
        assert_eq!(out, zeros);
    }

    #[test]
    fn a_chunk_that_compresses_past_the_bound_is_stored_uncompressed() {
        let values = vec![0u8; (MAX_DECODED_FLOOR + 1) as usize];
        let mut sizes = Vec::new();
        put_varint(&mut sizes, values.len() as u64);
        let mut c = Compressor::new(Compression::Zstd {
            level: 3,
            window_log: 20,
        })
        .unwrap();
        let (mut scratch, mut data) = (Vec::new(), Vec::new());
        c.encode_simple(&sizes, &values, &mut scratch, &mut data)
            .unwrap();
        let parts = split_simple(&data).unwrap();
        assert_eq!((parts.compression, parts.sizes), (0, &sizes[..]));
        assert!(parts.values == &values[..]);
    }

    /// A Brotli stream of the large-window format (a window up to 1 GiB) for which the
    /// decoder allocates its whole window unless the stream's first block is its last.
    fn large_window_brotli(input: &[u8], quality: i32) -> Vec<u8> {
        let params = brotli::enc::BrotliEncoderParams {
            quality,
            lgwin: 30,
            large_window: true,
            ..Default::default()
        };
        let mut blob = Vec::new();
        put_varint(&mut blob, input.len() as u64);
        brotli::BrotliCompress(&mut &input[..], &mut blob, &params).unwrap();
        blob
    }

    #[test]
    fn a_brotli_streams_window_is_read_from_its_header() {
        let mut blob = Vec::new();
        for (lgwin, large_window) in [
            (10, false),
            (16, false),
            (18, false),
            (22, false),
            (24, false),
            (30, true),
        ] {
            let params = brotli::enc::BrotliEncoderParams {
                lgwin,
                large_window,
                ..Default::default()
            };
            blob.clear();
            brotli::BrotliCompress(&mut &[7u8; 100_000][..], &mut blob, &params).unwrap();
            assert_eq!(brotli_window_log(&blob), Some(lgwin as u32), "{lgwin}");
        }
        assert_eq!(brotli_window_log(&[]), None);
        assert_eq!(
            brotli_window_log(&[0x11, 0x3f]),
            None,
            "a large window of 63"
        );
        assert_eq!(brotli_window_log(&[0x91]), None, "a reserved bit set");
    }

    #[test]
    fn a_brotli_window_past_the_bound_is_refused_before_it_is_allocated() {
        // The fuzzer's blob: 98 bytes claimed, a 2^30 window declared, not the last block.
        let blob = [0x62, 0x11, 0x1e, 0x0c, 0x01, 0x41, 0x00];
        let mut out = Vec::new();
        let e = Decompressor::default()
            .decompress(b'b', &blob, u64::MAX, &mut out)
            .unwrap_err();
        assert!(e.contains("window"), "{e}");
        // A large-window stream whose one block is its last decodes in a small window.
        let text: Vec<u8> = (0..50_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let blob = large_window_brotli(&text, 5);
        Decompressor::default()
            .decompress(b'b', &blob, u64::MAX, &mut out)
            .unwrap();
        assert!(out == text);
        // One of several blocks in a 1 GiB window, for 20 MB: refused, naming the window.
        let text: Vec<u8> = (0..5_000_000u32)
            .flat_map(|i| (i % 65_521).to_le_bytes())
            .collect();
        let blob = large_window_brotli(&text, 1);
        let e = Decompressor::default()
            .decompress(b'b', &blob, u64::MAX, &mut out)
            .unwrap_err();
        assert!(e.contains("window needs 1073741890 bytes"), "{e}");
    }

    #[test]
    fn lying_sizes_are_errors() {
        let mut limits = Vec::new();
        assert!(parse_sizes(&[1, 1], 2, 3, &mut limits).is_err());
        assert!(parse_sizes(&[1, 1, 1], 2, 2, &mut limits).is_err());
        assert!(parse_sizes(&[0x80], 1, 0, &mut limits).is_err());
        assert!(parse_sizes(&[], 5, 0, &mut limits).is_err());
        let mut d = Decompressor::default();
        let mut out = Vec::new();
        // A prefix claiming more than the chunk header allows.
        assert!(d
            .decompress(b'z', &[0xff, 0x01, 0, 0], 10, &mut out)
            .is_err());
        // Garbage after a plausible prefix.
        for t in [b'z', b'b', b's'] {
            assert!(
                d.decompress(t, &[5, 1, 2, 3, 4, 5, 6], 10, &mut out)
                    .is_err(),
                "{t}"
            );
        }
    }
}
