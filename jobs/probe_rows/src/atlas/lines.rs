//! The lines of an Atlas results file: decompressed as its name says, read one at a time
//! in bounded memory.
//!
//! `.bz2` is read as multistream bzip2 (the hourly dumps are many streams back to back),
//! `.gz` as multi-member gzip, `.zst` as a sequence of zstd frames; any other name as
//! plain text. A line longer than [`MAX_LINE_BYTES`] is kept to that length and the
//! rest of it skipped, so one line without a newline (a JSON array on one line, a
//! decompression bomb) never grows a buffer beyond it.

use std::io::{self, BufRead, BufReader, Read};

/// The longest line kept whole (an Atlas ping result is a few kilobytes at most).
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// How a results file is compressed, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Bzip2,
    Gzip,
    Zstd,
    None,
}

impl Compression {
    pub fn of(name: &str) -> Compression {
        let name = name.rsplit('/').next().unwrap_or(name);
        if name.ends_with(".bz2") {
            Compression::Bzip2
        } else if name.ends_with(".gz") {
            Compression::Gzip
        } else if name.ends_with(".zst") {
            Compression::Zstd
        } else {
            Compression::None
        }
    }

    /// The decompressed bytes of `raw`.
    pub fn decoder<'r>(self, raw: impl Read + 'r) -> io::Result<Box<dyn Read + 'r>> {
        Ok(match self {
            Compression::Bzip2 => Box::new(bzip2::read::MultiBzDecoder::new(raw)),
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(raw)),
            Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(raw)?),
            Compression::None => Box::new(raw),
        })
    }
}

/// Whether the job reads a file of this name as Atlas results: a compressed file
/// (`.bz2`, `.gz`, `.zst`), JSON lines (`.jsonl`, `.ndjson`, `.json`), or a name
/// without an extension (a dump decompressed: `ping-2024-01-01T0000`).
pub fn is_results_file(name: &str) -> bool {
    let name = name.rsplit('/').next().unwrap_or(name);
    let Some((_, extension)) = name.rsplit_once('.') else {
        return !name.is_empty();
    };
    matches!(
        extension,
        "bz2" | "gz" | "zst" | "jsonl" | "ndjson" | "json"
    )
}

/// One line as read.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// The line, without its newline (a last line may have none).
    Whole,
    /// Longer than [`MAX_LINE_BYTES`]: the buffer holds its first bytes.
    TooLong,
}

/// Reads lines of at most `limit` bytes.
pub struct Lines<R> {
    reader: BufReader<R>,
    limit: usize,
}

impl<R: Read> Lines<R> {
    pub fn new(reader: R, limit: usize) -> Self {
        Lines {
            reader: BufReader::with_capacity(256 << 10, reader),
            limit,
        }
    }

    /// The next line into `line` (cleared first); `None` at the end.
    pub fn next_line(&mut self, line: &mut Vec<u8>) -> io::Result<Option<Line>> {
        line.clear();
        let mut too_long = false;
        let mut any = false;
        loop {
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                return Ok(any.then_some(if too_long { Line::TooLong } else { Line::Whole }));
            }
            any = true;
            let (part, used, ended) = match memchr::memchr(b'\n', buf) {
                Some(at) => (&buf[..at], at + 1, true),
                None => (buf, buf.len(), false),
            };
            let room = self.limit.saturating_sub(line.len());
            if part.len() > room {
                too_long = true;
            }
            line.extend_from_slice(&part[..part.len().min(room)]);
            self.reader.consume(used);
            if ended {
                return Ok(Some(if too_long { Line::TooLong } else { Line::Whole }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lines_of(bytes: &[u8], limit: usize) -> Vec<(Vec<u8>, Line)> {
        let mut lines = Lines::new(bytes, limit);
        let mut out = Vec::new();
        let mut line = Vec::new();
        while let Some(kind) = lines.next_line(&mut line).unwrap() {
            out.push((line.clone(), kind));
        }
        out
    }

    #[test]
    fn lines_are_bounded_and_a_last_line_without_newline_is_kept() {
        let got = lines_of(b"ab\n\nabcdefgh\ntail", 4);
        assert_eq!(
            got,
            [
                (b"ab".to_vec(), Line::Whole),
                (b"".to_vec(), Line::Whole),
                (b"abcd".to_vec(), Line::TooLong),
                (b"tail".to_vec(), Line::Whole),
            ]
        );
        assert!(lines_of(b"", 4).is_empty());
    }

    #[test]
    fn multistream_bzip2_and_multimember_gzip_read_whole() {
        let mut bz = Vec::new();
        for part in [&b"one\ntw"[..], b"o\nthree\n"] {
            let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
            e.write_all(part).unwrap();
            bz.extend(e.finish().unwrap());
        }
        let mut gz = Vec::new();
        for part in [&b"one\ntw"[..], b"o\nthree\n"] {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(part).unwrap();
            gz.extend(e.finish().unwrap());
        }
        let mut zst = zstd::encode_all(&b"one\ntw"[..], 1).unwrap();
        zst.extend(zstd::encode_all(&b"o\nthree\n"[..], 1).unwrap());
        for (name, bytes) in [("a.bz2", bz), ("a.gz", gz), ("a.zst", zst)] {
            let mut text = String::new();
            Compression::of(name)
                .decoder(&bytes[..])
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            assert_eq!(text, "one\ntwo\nthree\n", "{name}");
        }
    }

    #[test]
    fn a_torn_bzip2_stream_is_an_error() {
        let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
        e.write_all(&b"x".repeat(10_000)).unwrap();
        let bytes = e.finish().unwrap();
        let mut out = Vec::new();
        let torn = Compression::Bzip2
            .decoder(&bytes[..bytes.len() - 8])
            .unwrap()
            .read_to_end(&mut out);
        assert!(torn.is_err());
    }

    #[test]
    fn names() {
        for yes in [
            "ping-2024-01-01T0000.bz2",
            "a.jsonl",
            "s3://b/ping-2024-01-01T0000",
            "x.zst",
        ] {
            assert!(is_results_file(yes), "{yes}");
        }
        for no in ["a.parquet", "a.txt", "dir/"] {
            assert!(!is_results_file(no), "{no}");
        }
        assert_eq!(Compression::of("a/b.json.gz"), Compression::Gzip);
    }
}
