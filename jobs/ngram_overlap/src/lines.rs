//! JSONL lines read in place: [`LineReader`] hands out each line as a slice of its own
//! buffer, so a line is copied only when it straddles the end of what has been read so
//! far (most lines are not: the buffer holds many of them).
//!
//! Bytes flow from the wrapped reader (a decompressor or an object-store stream) into
//! one buffer; [`LineReader::next_line`] finds the next `\n` with `memchr` and returns
//! the bytes up to and including it, the way `BufRead::read_until` would. When the
//! rest of the buffer holds no whole line, the partial line is moved to the front and
//! the buffer is refilled; a line longer than the buffer grows it (a line is one
//! document, and a document is read whole either way), up to the reader's
//! [`LineReader::with_max_line_bytes`]: a longer line is an error ([`LineTooLong`])
//! naming its number, with at most that many bytes held. A text already whole in
//! memory ([`LineReader::from_text`]) is handed out in place, without reading.

use std::io::{ErrorKind, Read};

/// The buffer a [`LineReader`] starts with.
const INITIAL_CAPACITY: usize = 1 << 20;

/// A line of more than `limit` bytes (its `\n` not counted): line `line` (1-based).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line} is longer than {limit} bytes")]
pub struct LineTooLong {
    pub line: u64,
    pub limit: usize,
}

/// Lines of `R`, each including its `\n` (the last one may have none).
pub struct LineReader<R> {
    /// `None` for a text whole in memory.
    inner: Option<R>,
    buf: Vec<u8>,
    /// `buf[start..end]` is read and not yet handed out.
    start: usize,
    end: usize,
    eof: bool,
    /// The longest line handed out, without its `\n`.
    max_line: usize,
    /// Lines handed out so far.
    lines: u64,
}

impl<R: Read> LineReader<R> {
    pub fn new(inner: R) -> Self {
        Self::with_capacity(INITIAL_CAPACITY, inner)
    }

    pub fn with_capacity(capacity: usize, inner: R) -> Self {
        LineReader {
            inner: Some(inner),
            buf: vec![0; capacity.max(1)],
            start: 0,
            end: 0,
            eof: false,
            max_line: usize::MAX,
            lines: 0,
        }
    }

    /// The same reader, refusing lines longer than `max` bytes (without the `\n`).
    pub fn with_max_line_bytes(mut self, max: usize) -> Self {
        self.max_line = max;
        self
    }

    /// The lines of `text`, already whole in memory (nothing is copied).
    pub fn from_text(text: Vec<u8>) -> Self {
        LineReader {
            inner: None,
            end: text.len(),
            buf: text,
            start: 0,
            eof: true,
            max_line: usize::MAX,
            lines: 0,
        }
    }

    /// The buffer, for the next text (what [`LineReader::from_text`] was given).
    pub fn into_buffer(self) -> Vec<u8> {
        self.buf
    }

    /// The next line with its `\n`, or `None` at the end of the input.
    pub fn next_line(&mut self) -> std::io::Result<Option<&[u8]>> {
        // Where to look for the `\n` from: bytes before it were searched already.
        let mut searched = self.start;
        loop {
            if let Some(at) = memchr::memchr(b'\n', &self.buf[searched..self.end]) {
                let line = self.start..searched + at + 1;
                return self.hand_out(line, 1);
            }
            searched = self.end;
            if self.eof {
                if self.start == self.end {
                    return Ok(None);
                }
                return self.hand_out(self.start..self.end, 0);
            }
            if self.end - self.start > self.max_line {
                return Err(self.too_long());
            }
            // No whole line left: keep the partial one, at the front, and read more.
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                searched -= self.start;
                self.end -= self.start;
                self.start = 0;
            }
            if self.end == self.buf.len() {
                // Room for a line of the limit and its `\n`; one byte more shows a
                // longer line.
                let most = self.max_line.saturating_add(2);
                let grown = (self.buf.len() * 2).min(most).max(self.buf.len() + 1);
                self.buf.resize(grown, 0);
            }
            let Some(inner) = self.inner.as_mut() else {
                self.eof = true;
                continue;
            };
            match inner.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Hands out `line` (`newline`: whether it ends in one), unless it is too long.
    fn hand_out(
        &mut self,
        line: std::ops::Range<usize>,
        newline: usize,
    ) -> std::io::Result<Option<&[u8]>> {
        if line.len() - newline > self.max_line {
            return Err(self.too_long());
        }
        self.start = line.end;
        self.lines += 1;
        Ok(Some(&self.buf[line]))
    }

    fn too_long(&self) -> std::io::Error {
        std::io::Error::new(
            ErrorKind::InvalidData,
            LineTooLong {
                line: self.lines + 1,
                limit: self.max_line,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    /// A reader that hands out at most `step` bytes per read (and sometimes an
    /// `Interrupted` error), to cut lines at every possible place.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
        calls: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            self.calls += 1;
            if self.calls.is_multiple_of(7) {
                return Err(std::io::Error::new(ErrorKind::Interrupted, "again"));
            }
            let n = self.step.min(out.len()).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn lines_of(data: &[u8], capacity: usize, step: usize) -> Vec<Vec<u8>> {
        let mut reader = LineReader::with_capacity(
            capacity,
            Trickle {
                data,
                step,
                calls: 0,
            },
        );
        let mut out = Vec::new();
        while let Some(line) = reader.next_line().unwrap() {
            out.push(line.to_vec());
        }
        out
    }

    fn read_until_lines(data: &[u8]) -> Vec<Vec<u8>> {
        let mut reader = std::io::BufReader::new(data);
        let mut out = Vec::new();
        loop {
            let mut line = Vec::new();
            if reader.read_until(b'\n', &mut line).unwrap() == 0 {
                return out;
            }
            out.push(line);
        }
    }

    #[test]
    fn the_lines_are_those_of_read_until_whatever_the_buffer_and_read_sizes() {
        let inputs: [&[u8]; 7] = [
            b"",
            b"\n",
            b"one line without end",
            b"{\"text\": \"a\"}\n{\"text\": \"b\"}\n",
            b"\n\n  \r\nx\n\nlast",
            b"a much longer line than any buffer here holds, to make it grow\nand a short one\n",
            "caf\u{e9} \u{1f600}\n\u{3000}\n".as_bytes(),
        ];
        for data in inputs {
            let expected = read_until_lines(data);
            for capacity in [1, 2, 3, 5, 8, 64, 1 << 20] {
                for step in [1, 2, 3, 7, 100] {
                    assert_eq!(
                        lines_of(data, capacity, step),
                        expected,
                        "{data:?} capacity {capacity} step {step}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_text_whole_in_memory_gives_the_lines_of_read_until() {
        for data in [&b""[..], b"a\n\nb", b"x\ny\n"] {
            let mut reader = LineReader::<std::io::Empty>::from_text(data.to_vec());
            let mut lines = Vec::new();
            while let Some(line) = reader.next_line().unwrap() {
                lines.push(line.to_vec());
            }
            assert_eq!(lines, read_until_lines(data), "{data:?}");
        }
    }

    /// An endless line (`x` forever, no `\n`): a gzip bomb, or a JSON array dumped on
    /// one line.
    struct Endless;
    impl Read for Endless {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            out.fill(b'x');
            Ok(out.len())
        }
    }

    #[test]
    fn a_line_past_the_limit_is_an_error_naming_its_number_in_bounded_memory() {
        let limit = 3 << 20;
        let mut reader =
            LineReader::new((&b"{}\n\n"[..]).chain(Endless)).with_max_line_bytes(limit);
        assert_eq!(reader.next_line().unwrap(), Some(&b"{}\n"[..]));
        assert_eq!(reader.next_line().unwrap(), Some(&b"\n"[..]));
        let e = reader.next_line().unwrap_err();
        let too_long = e.get_ref().and_then(|e| e.downcast_ref::<LineTooLong>());
        assert_eq!(too_long, Some(&LineTooLong { line: 3, limit }), "{e}");
        assert!(reader.buf.len() <= limit + 2, "{}", reader.buf.len());
        // At the limit exactly, with or without its newline, a line is read.
        for text in [vec![b'y'; limit], [vec![b'y'; limit], vec![b'\n']].concat()] {
            let mut whole = LineReader::new(&text[..]).with_max_line_bytes(limit);
            assert_eq!(whole.next_line().unwrap(), Some(&text[..]));
            let mut memory = LineReader::<std::io::Empty>::from_text(text.clone())
                .with_max_line_bytes(limit - 1);
            assert!(memory.next_line().is_err());
        }
    }

    #[test]
    fn a_read_error_is_returned_not_taken_for_the_end() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::new(
                    ErrorKind::InvalidData,
                    "corrupt deflate stream",
                ))
            }
        }
        let err = LineReader::new(Broken).next_line().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidData);
    }
}
