//! Line readers and decompressors of inputs: the overlap job's whole-file gzip against
//! flate2's stream decoder, its line reader against `BufRead::read_until`, and the
//! Atlas reader's decompressed, length-limited lines.

use std::io::{BufRead, Read};

use probeflow_ngram_overlap::lines::LineReader;
use probeflow_ngram_overlap::whole_gzip::inflate_single_member;
use probeflow_probe_rows::atlas::lines::{Compression, Line, Lines};

use super::split_first;

/// The most text a harness inflates from one input (a bomb stops there).
const MAX_TEXT: u64 = 16 << 20;

/// Where `inflate_single_member` takes `data` as one gzip member, its text is what
/// flate2's decoder gives.
pub fn whole_gzip(data: &[u8]) {
    let mut text = Vec::new();
    if !inflate_single_member(data, MAX_TEXT, &mut text) {
        return;
    }
    let mut streamed = Vec::new();
    flate2::read::MultiGzDecoder::new(data)
        .take(MAX_TEXT + 1)
        .read_to_end(&mut streamed)
        .expect("flate2 reads what whole_gzip read");
    assert!(text == streamed, "whole_gzip and flate2 give other texts");
}

/// A reader handing out at most `step` bytes a call.
struct Trickle<'a> {
    data: &'a [u8],
    step: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.step.min(out.len()).min(self.data.len());
        out[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// The overlap job's line reader over `data[1..]` (in reads of a size `data[0]`
/// picks, with a line limit it picks) gives `read_until`'s lines, or stops with a
/// too-long error at the first longer line, holding at most the limit.
pub fn line_reader(data: &[u8]) {
    let (choice, text) = split_first(data);
    let step = 1 + usize::from(choice & 0x0f);
    let limit = [1usize, 3, 16, 64, 1 << 20][usize::from(choice >> 4) % 5];
    let mut reader =
        LineReader::with_capacity(1 + usize::from(choice % 7), Trickle { data: text, step })
            .with_max_line_bytes(limit);
    let mut expected = std::io::BufReader::new(text);
    loop {
        let mut want = Vec::new();
        let n = expected.read_until(b'\n', &mut want).expect("in memory");
        match reader.next_line() {
            Ok(Some(line)) => assert_eq!(line, &want[..]),
            Ok(None) => {
                assert_eq!(n, 0, "the reader ended early");
                return;
            }
            Err(_) => {
                let content = want.len() - usize::from(want.last() == Some(&b'\n'));
                assert!(content > limit, "a line of {content} refused at {limit}");
                return;
            }
        }
    }
}

/// The Atlas reader's lines of `data[1..]`, decompressed as the codec `data[0]` picks
/// (plain, gzip, bzip2, zstd): each at most the limit, the text past it dropped.
pub fn atlas_lines(data: &[u8]) {
    let (choice, raw) = split_first(data);
    let name = ["f.jsonl", "f.jsonl.gz", "f.bz2", "f.jsonl.zst"][usize::from(choice) % 4];
    let Ok(decoded) = Compression::of(name).decoder(raw) else {
        return;
    };
    let limit = 1 << 12;
    let mut lines = Lines::new(decoded.take(MAX_TEXT), limit);
    let mut line = Vec::new();
    while let Ok(Some(kind)) = lines.next_line(&mut line) {
        assert!(line.len() <= limit);
        if kind == Line::Whole {
            assert!(!line.contains(&b'\n'));
        }
        let _ = probeflow_probe_rows::atlas::result::read_line(
            &line,
            probeflow_probe_rows::atlas::result::SourceRule::Public,
        );
    }
}
