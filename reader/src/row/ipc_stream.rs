//! A row's Arrow IPC stream, written directly: the bytes arrow-rs's `StreamWriter`
//! writes for a row's schema and its one record batch (default options: metadata
//! version 5, 64-byte alignment, no compression), without building a `Schema`, Arrow
//! arrays or a `RecordBatch` first.
//!
//! ```text
//! RowMeta + Columns ─► schema message   (flatbuffer: 3 fields, 8 metadata entries)
//!                  ─► batch message    (flatbuffer: 3 nodes, 6 buffers)
//!                  ─► body             (times, addresses, RTT validity, RTT codes)
//!                  ─► end of stream
//! ```
//!
//! Every message is framed as `StreamWriter` frames it: the continuation marker, the
//! flatbuffer's length padded so the header ends on 64 bytes, the flatbuffer, zeros.
//! Each body buffer is padded to 64 bytes. The flatbuffers are built with the calls, in
//! the order, that arrow-rs's `IpcSchemaEncoder` and `IpcDataGenerator` make for this
//! schema, so the builder lays them out byte for byte as they do. The shards' bytes are
//! the output's identity (their hashes are in the manifest): the tests below compare
//! this writer with `StreamWriter` itself, row by row, on every shape a row can take.
//!
//! Why: a row is a few kilobytes, and `StreamWriter`'s per-row set-up (the metadata
//! map, the schema, the arrays, two flatbuffer builders) cost more than copying the
//! row's data.

use std::fmt::Write as _;

use arrow_ipc::{
    Buffer as BodyBuffer, FieldNode, FixedSizeBinaryBuilder, IntBuilder, KeyValueBuilder,
    MessageBuilder, MessageHeader, MetadataVersion, RecordBatchBuilder, SchemaBuilder, Type,
};
use flatbuffers::{FlatBufferBuilder, WIPOffset};

use super::codec::{keys, Columns, RowMeta, ROW_FORMAT_VERSION};
use crate::error::{Error, Result};

/// Body buffers and message headers end on multiples of this (`StreamWriter`'s default).
const ALIGNMENT: usize = 64;

/// The IPC continuation marker that starts every message.
const CONTINUATION: [u8; 4] = [0xff; 4];

/// Room for the framed batch message (3 nodes, 6 buffers: about 300 bytes), so that a
/// row's buffer is allocated once.
const BATCH_HEADER_ROOM: usize = 512;

/// Zeros to pad with.
const PADDING: [u8; ALIGNMENT] = [0; ALIGNMENT];

/// The schema's metadata keys in byte order (the order the schema message lists them).
const METADATA_ORDER: [&str; 8] = [
    keys::FIRST_TIME,
    keys::FORMAT,
    keys::IP_VERSION,
    keys::LAST_TIME,
    keys::N_MEASUREMENTS,
    keys::PART,
    keys::SRC_ADDR,
    keys::SRC_ID,
];

/// Bytes that pad `len` to a multiple of [`ALIGNMENT`].
fn padding(len: usize) -> usize {
    len.next_multiple_of(ALIGNMENT) - len
}

/// The value of metadata key `key` for `meta`, written into `text` (cleared first).
fn metadata_value<'t>(meta: &RowMeta, key: &str, text: &'t mut String) -> &'t str {
    text.clear();
    // Writing to a String cannot fail.
    let _ = match key {
        keys::FORMAT => write!(text, "{ROW_FORMAT_VERSION}"),
        keys::SRC_ADDR => write!(text, "{}", meta.src_addr),
        keys::SRC_ID => write!(text, "{}", meta.src_id),
        keys::IP_VERSION => write!(text, "{}", meta.ip_version()),
        keys::PART => write!(text, "{}", meta.part),
        keys::FIRST_TIME => write!(text, "{}", meta.first_time),
        keys::LAST_TIME => write!(text, "{}", meta.last_time),
        _ => write!(text, "{}", meta.n_measurements),
    };
    text
}

/// A field's table, from its name, empty children and type, already in the builder
/// (`IpcSchemaEncoder`'s calls, in its order).
fn field<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    name: WIPOffset<&'a str>,
    children: WIPOffset<
        flatbuffers::Vector<'a, flatbuffers::ForwardsUOffset<arrow_ipc::Field<'a>>>,
    >,
    (type_type, type_): (Type, WIPOffset<flatbuffers::UnionWIPOffset>),
    nullable: bool,
) -> WIPOffset<arrow_ipc::Field<'a>> {
    let mut field = arrow_ipc::FieldBuilder::new(fbb);
    field.add_name(name);
    field.add_type_type(type_type);
    field.add_nullable(nullable);
    field.add_children(children);
    field.add_type_(type_);
    field.finish()
}

/// A field of unsigned integers (`IpcSchemaEncoder`'s calls for `UInt16`/`UInt64`:
/// name, empty children, type, field).
fn uint_field<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    name: &str,
    bits: i32,
    nullable: bool,
) -> WIPOffset<arrow_ipc::Field<'a>> {
    let name = fbb.create_string(name);
    let children = fbb.create_vector::<WIPOffset<arrow_ipc::Field>>(&[]);
    let mut int = IntBuilder::new(fbb);
    int.add_is_signed(false);
    int.add_bitWidth(bits);
    let int = int.finish().as_union_value();
    field(fbb, name, children, (Type::Int, int), nullable)
}

/// A field of fixed-size binaries (`IpcSchemaEncoder`'s calls: name, type, empty
/// children, field).
fn fixed_binary_field<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    name: &str,
    width: i32,
) -> WIPOffset<arrow_ipc::Field<'a>> {
    let name = fbb.create_string(name);
    let mut binary = FixedSizeBinaryBuilder::new(fbb);
    binary.add_byteWidth(width);
    let binary = binary.finish().as_union_value();
    let children = fbb.create_vector::<WIPOffset<arrow_ipc::Field>>(&[]);
    field(fbb, name, children, (Type::FixedSizeBinary, binary), false)
}

/// Builds the schema message of a row of `meta` into `fbb` (reset first).
fn schema_message(fbb: &mut FlatBufferBuilder<'_>, meta: &RowMeta, width: i32) {
    fbb.reset();
    let fields = [
        uint_field(fbb, "event_time", 64, false),
        fixed_binary_field(fbb, "dst_addr", width),
        uint_field(fbb, "rtt", 16, true),
    ];
    let fields = fbb.create_vector(&fields);
    let mut text = String::with_capacity(40);
    let entries = METADATA_ORDER.map(|key| {
        let key_offset = fbb.create_string(key);
        let value = fbb.create_string(metadata_value(meta, key, &mut text));
        let mut entry = KeyValueBuilder::new(fbb);
        entry.add_key(key_offset);
        entry.add_value(value);
        entry.finish()
    });
    let entries = fbb.create_vector(&entries);
    let mut schema = SchemaBuilder::new(fbb);
    schema.add_fields(fields);
    schema.add_custom_metadata(entries);
    let schema = schema.finish().as_union_value();
    finish_message(fbb, MessageHeader::Schema, schema, 0);
}

/// Builds the record batch message of `n` rows into `fbb` (reset first); `buffers` and
/// `nodes` as the body lays them out.
fn batch_message(
    fbb: &mut FlatBufferBuilder<'_>,
    n: usize,
    buffers: &[BodyBuffer],
    nodes: &[FieldNode],
    body_len: usize,
) {
    fbb.reset();
    let buffers = fbb.create_vector(buffers);
    let nodes = fbb.create_vector(nodes);
    let mut batch = RecordBatchBuilder::new(fbb);
    batch.add_length(n as i64);
    batch.add_nodes(nodes);
    batch.add_buffers(buffers);
    let batch = batch.finish().as_union_value();
    finish_message(fbb, MessageHeader::RecordBatch, batch, body_len);
}

/// The `Message` table around `header` (of `header_type`), as the root of the buffer.
fn finish_message(
    fbb: &mut FlatBufferBuilder<'_>,
    header_type: MessageHeader,
    header: WIPOffset<flatbuffers::UnionWIPOffset>,
    body_len: usize,
) {
    let mut message = MessageBuilder::new(fbb);
    message.add_version(MetadataVersion::V5);
    message.add_header_type(header_type);
    message.add_bodyLength(body_len as i64);
    message.add_header(header);
    let root = message.finish();
    fbb.finish(root, None);
}

/// Frames a message's flatbuffer into `out`: continuation marker, padded length, the
/// flatbuffer, zeros to the next multiple of 64 bytes.
fn put_message(out: &mut Vec<u8>, flatbuffer: &[u8]) {
    let pad = padding(flatbuffer.len() + 8);
    out.extend_from_slice(&CONTINUATION);
    out.extend_from_slice(&((flatbuffer.len() + pad) as i32).to_le_bytes());
    out.extend_from_slice(flatbuffer);
    out.extend_from_slice(&PADDING[..pad]);
}

/// The framed size of a message whose flatbuffer is `len` bytes.
fn framed(len: usize) -> usize {
    8 + len + padding(len + 8)
}

/// The IPC stream of one row: `cols` (all of one length; addresses `meta`'s width)
/// with `meta` as its schema metadata.
pub(crate) fn encode(meta: &RowMeta, cols: &Columns) -> Result<Vec<u8>> {
    let width = meta.addr_width();
    let n = cols.times.len();
    if cols.dst.len() != n * width || cols.rtt.len() != n || cols.valid.len() != n {
        return Err(Error::Input(format!(
            "row columns of different lengths: {n} times, {} address bytes of width {width}, \
             {} RTT codes, {} validity flags",
            cols.dst.len(),
            cols.rtt.len(),
            cols.valid.len()
        )));
    }
    let failed = cols.valid.iter().filter(|&&v| !v).count();
    // The body: each column's validity (empty unless it has nulls), then its values.
    let lengths = [
        0,
        8 * n,
        0,
        width * n,
        if failed > 0 { n.div_ceil(8) } else { 0 },
        2 * n,
    ];
    let mut offset = 0usize;
    let buffers = lengths.map(|len| {
        let buffer = BodyBuffer::new(offset as i64, len as i64);
        offset += len + padding(len);
        buffer
    });
    let body_len = offset;
    let nodes = [
        FieldNode::new(n as i64, 0),
        FieldNode::new(n as i64, 0),
        FieldNode::new(n as i64, failed as i64),
    ];

    let mut fbb = FlatBufferBuilder::with_capacity(1024);
    schema_message(&mut fbb, meta, width as i32);
    let mut out =
        Vec::with_capacity(framed(fbb.finished_data().len()) + BATCH_HEADER_ROOM + body_len + 8);
    let room = out.capacity();
    put_message(&mut out, fbb.finished_data());
    batch_message(&mut fbb, n, &buffers, &nodes, body_len);
    put_message(&mut out, fbb.finished_data());

    let body_start = out.len();
    for t in &cols.times {
        out.extend_from_slice(&t.to_le_bytes());
    }
    out.extend_from_slice(&PADDING[..padding(8 * n)]);
    out.extend_from_slice(&cols.dst);
    out.extend_from_slice(&PADDING[..padding(width * n)]);
    if failed > 0 {
        for flags in cols.valid.chunks(8) {
            let byte = flags
                .iter()
                .enumerate()
                .fold(0u8, |b, (i, &v)| b | (u8::from(v) << i));
            out.push(byte);
        }
        out.extend_from_slice(&PADDING[..padding(n.div_ceil(8))]);
    }
    for code in &cols.rtt {
        out.extend_from_slice(&code.to_le_bytes());
    }
    out.extend_from_slice(&PADDING[..padding(2 * n)]);
    debug_assert_eq!(out.len() - body_start, body_len);
    // End of stream: the continuation marker and a zero length.
    out.extend_from_slice(&CONTINUATION);
    out.extend_from_slice(&0i32.to_le_bytes());
    debug_assert!(
        out.len() <= room,
        "{} bytes written, {room} reserved",
        out.len()
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::sync::Arc;

    use arrow_array::{ArrayRef, FixedSizeBinaryArray, RecordBatch, UInt16Array, UInt64Array};
    use arrow_buffer::{Buffer, NullBuffer, ScalarBuffer};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;
    use crate::row::placement::src_id;

    /// A row stream whose batch claims `n` measurements (its metadata too) over a body of
    /// `body_len` zero bytes whose six buffers are `lengths` long: what a hostile or
    /// damaged file may hold.
    fn forged_row(src_addr: IpAddr, n: u64, lengths: [i64; 6], body_len: usize) -> Vec<u8> {
        let meta = RowMeta {
            src_addr,
            src_id: src_id(&src_addr),
            part: 0,
            first_time: 0,
            last_time: 0,
            n_measurements: n,
        };
        let buffers = lengths.map(|len| BodyBuffer::new(0, len));
        let nodes = [FieldNode::new(n as i64, 0); 3];
        let mut fbb = FlatBufferBuilder::with_capacity(1024);
        let mut out = Vec::new();
        schema_message(&mut fbb, &meta, meta.addr_width() as i32);
        put_message(&mut out, fbb.finished_data());
        batch_message(&mut fbb, n as usize, &buffers, &nodes, body_len);
        put_message(&mut out, fbb.finished_data());
        out.resize(out.len() + body_len, 0);
        out
    }

    #[test]
    fn a_batch_length_whose_column_sizes_overflow_is_an_error() {
        // 2^62 + 1 measurements: 8 bytes each wraps to 8, 4 (IPv4) or 16 (IPv6) to 4 or
        // 16, so unchecked sizes would match the small buffers the file claims.
        let n = (1u64 << 62) + 1;
        for (src, width) in [("192.0.2.7", 4), ("2001:db8::7", 16)] {
            let src: IpAddr = src.parse().unwrap();
            let row = forged_row(src, n, [0, 8, 0, width, 0, i64::MAX], 64);
            let err = crate::row::codec::decode_row(&row).unwrap_err();
            assert!(err.to_string().contains("measurements"), "{err}");
        }
    }

    /// The row as arrow-rs's `StreamWriter` writes it: the reference for [`encode`].
    fn stream_writer_bytes(meta: &RowMeta, cols: &Columns) -> Vec<u8> {
        let width = meta.addr_width();
        let metadata = METADATA_ORDER
            .iter()
            .map(|key| {
                let mut text = String::new();
                (
                    key.to_string(),
                    metadata_value(meta, key, &mut text).to_string(),
                )
            })
            .collect();
        let schema = Arc::new(Schema::new_with_metadata(
            vec![
                Field::new("event_time", DataType::UInt64, false),
                Field::new("dst_addr", DataType::FixedSizeBinary(width as i32), false),
                Field::new("rtt", DataType::UInt16, true),
            ],
            metadata,
        ));
        let nulls = (!cols.valid.iter().all(|&v| v)).then(|| NullBuffer::from(cols.valid.clone()));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt64Array::new(
                ScalarBuffer::from(cols.times.clone()),
                None,
            )),
            Arc::new(
                FixedSizeBinaryArray::try_new(
                    width as i32,
                    Buffer::from_vec(cols.dst.clone()),
                    None,
                )
                .unwrap(),
            ),
            Arc::new(UInt16Array::new(
                ScalarBuffer::from(cols.rtt.clone()),
                nulls,
            )),
        ];
        let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
        let mut writer = arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &schema).unwrap();
        writer.write(&batch).unwrap();
        writer.finish().unwrap();
        writer.into_inner().unwrap()
    }

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A row of `n` measurements from `src`; `failed_every` 0 for no failed pings.
    fn row(
        rng: &mut Rng,
        src: IpAddr,
        part: u32,
        n: usize,
        failed_every: u64,
    ) -> (RowMeta, Columns) {
        let width = if src.is_ipv4() { 4 } else { 16 };
        let mut cols = Columns::default();
        let mut t = rng.below(1 << 40);
        for _ in 0..n {
            t += rng.below(600);
            let dst: Vec<u8> = (0..width).map(|_| rng.next() as u8).collect();
            let failed = failed_every != 0 && rng.below(failed_every) == 0;
            let code = rng.next() as u16;
            cols.times.push(t);
            cols.dst.extend_from_slice(&dst);
            cols.rtt.push(if failed { 0 } else { code });
            cols.valid.push(!failed);
        }
        let meta = RowMeta {
            src_addr: src,
            src_id: src_id(&src),
            part,
            first_time: cols.times.first().copied().unwrap_or(0),
            last_time: cols.times.last().copied().unwrap_or(0),
            n_measurements: n as u64,
        };
        (meta, cols)
    }

    #[test]
    fn metadata_keys_are_listed_in_byte_order() {
        let mut sorted = METADATA_ORDER;
        sorted.sort_unstable();
        assert_eq!(sorted, METADATA_ORDER);
    }

    #[test]
    fn every_shape_of_row_has_the_bytes_stream_writer_writes() {
        let mut rng = Rng(0x51f1_5eed_0dd5_a11e);
        let sources: [IpAddr; 6] = [
            "192.0.2.7".parse().unwrap(),
            "0.0.0.0".parse().unwrap(),
            "255.255.255.255".parse().unwrap(),
            "2001:db8::7".parse().unwrap(),
            "::".parse().unwrap(),
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap(),
        ];
        let sizes = [
            0usize, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 200, 513, 4097,
        ];
        let mut compared = 0;
        for src in sources {
            for &n in &sizes {
                for failed_every in [0, 1, 2, 5, 1000] {
                    for part in [0, 9, u32::MAX] {
                        let (meta, cols) = row(&mut rng, src, part, n, failed_every);
                        let expected = stream_writer_bytes(&meta, &cols);
                        let got = encode(&meta, &cols).unwrap();
                        assert!(
                            got == expected,
                            "{src}, {n} measurements, failed every {failed_every}, part \
                             {part}: {} bytes written, StreamWriter writes {}",
                            got.len(),
                            expected.len()
                        );
                        compared += 1;
                    }
                }
            }
        }
        assert_eq!(compared, 6 * sizes.len() * 5 * 3);
    }

    #[test]
    fn metadata_at_its_longest_has_the_bytes_stream_writer_writes() {
        for src in ["255.255.255.255", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"] {
            let src: IpAddr = src.parse().unwrap();
            let meta = RowMeta {
                src_addr: src,
                src_id: u64::MAX,
                part: u32::MAX,
                first_time: u64::MAX,
                last_time: u64::MAX,
                n_measurements: u64::MAX,
            };
            let cols = Columns::default();
            assert_eq!(
                encode(&meta, &cols).unwrap(),
                stream_writer_bytes(&meta, &cols)
            );
        }
    }

    #[test]
    fn columns_of_different_lengths_are_refused() {
        let mut rng = Rng(7);
        let (meta, mut cols) = row(&mut rng, "192.0.2.7".parse().unwrap(), 0, 10, 3);
        cols.dst.pop();
        let err = encode(&meta, &cols).unwrap_err();
        assert!(err.to_string().contains("different lengths"), "{err}");
    }
}
