//! ArrayRecord files, read and written byte-compatibly with Google's `array_record`.
//!
//! An ArrayRecord file is a Riegeli/records file:
//!
//! ```text
//! [signature chunk][data chunk 0][data chunk 1]…[footer chunk][padding][postscript chunk][padding]
//!  64 bytes         simple chunks of group_size   index of the   to a     3 × RiegeliPostscript,
//!                   records each                  data chunks    block    at exactly size − 64 KiB
//! ```
//!
//! with a 24-byte block header at every multiple of 64 KiB (see [`layout`]). Data flows
//! like this:
//!
//! * writing: [`ArrayRecordWriter::write`] appends a record to the current group; a full
//!   group becomes a simple chunk ([`chunk`]: sizes and values, compressed), which
//!   [`layout`] frames with a chunk header and block headers into the sink. `finish`
//!   writes the footer ([`proto`] messages) and the postscript.
//! * reading: [`ArrayRecordReader::open`] memory-maps the file, checks the signature,
//!   reads the postscript and the footer, and keeps the chunk index. `read(i)` finds the
//!   chunk through the index (no scan), checks the hashes, and returns the record,
//!   borrowed from the map when the chunk is uncompressed and contiguous.
//!
//! Writer options use ArrayRecord's own option strings ([`WriterOptions`]).

pub mod chunk;
pub mod layout;
pub mod options;
pub mod proto;
mod reader;
mod writer;

pub use options::{Compression, WriterOptions, DEFAULT_WRITER_OPTIONS};
pub use reader::{ArrayRecordReader, RecordBuf, Records};
pub use writer::{ArrayRecordWriter, WriteSummary};
