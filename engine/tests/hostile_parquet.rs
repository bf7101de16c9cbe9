//! Parquet files made to break the reader, opened and read as an input file is
//! ([`parquet_source::open`], every batch): each ends in an error naming the file, with
//! no panic, no abort and no allocation past a bound derived from the file's size.
//!
//! One test (this binary's only one), so that the largest allocation it records is of
//! the input at hand: the allocator below remembers the largest single request.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use probeflow_engine::error::EngineError;
use probeflow_engine::parquet_source;

struct Largest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, only recording sizes.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Largest = Largest;

/// Thrift compact-protocol bytes, written field by field.
#[derive(Default)]
struct Thrift {
    bytes: Vec<u8>,
    last: Vec<i16>,
}

impl Thrift {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.bytes.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.bytes.push(v as u8);
    }
    fn field(&mut self, id: i16, t: u8) {
        let last = self.last.last_mut().expect("inside a struct");
        self.bytes.push((((id - *last) as u8) << 4) | t);
        *last = id;
    }
    fn i32(&mut self, id: i16, v: i32) -> &mut Self {
        self.field(id, 5);
        self.varint(((v << 1) ^ (v >> 31)) as u32 as u64);
        self
    }
    fn i64(&mut self, id: i16, v: i64) -> &mut Self {
        self.field(id, 6);
        self.varint(((v << 1) ^ (v >> 63)) as u64);
        self
    }
    fn binary(&mut self, id: i16, b: &[u8]) -> &mut Self {
        self.field(id, 8);
        self.varint(b.len() as u64);
        self.bytes.extend_from_slice(b);
        self
    }
    fn list(&mut self, id: i16, n: u64, element: u8) -> &mut Self {
        self.field(id, 9);
        if n < 15 {
            self.bytes.push(((n as u8) << 4) | element);
        } else {
            self.bytes.push(0xf0 | element);
            self.varint(n);
        }
        self
    }
    fn begin(&mut self) -> &mut Self {
        self.last.push(0);
        self
    }
    fn begin_field(&mut self, id: i16) -> &mut Self {
        self.field(id, 12);
        self.begin()
    }
    fn end(&mut self) -> &mut Self {
        self.bytes.push(0);
        self.last.pop();
        self
    }
}

/// `PAR1`, `body`, the footer, its length, `PAR1`.
fn parquet_file(body: &[u8], footer: &[u8]) -> Vec<u8> {
    let mut file = b"PAR1".to_vec();
    file.extend_from_slice(body);
    file.extend_from_slice(footer);
    file.extend_from_slice(&(footer.len() as u32).to_le_bytes());
    file.extend_from_slice(b"PAR1");
    file
}

/// The schema list of a file of one required INT32 column `x`.
fn one_int_column(t: &mut Thrift) {
    t.list(2, 2, 12);
    t.begin().binary(4, b"schema").i32(5, 1).end();
    t.begin().i32(1, 1).i32(3, 0).binary(4, b"x").end();
}

/// A footer whose schema's root claims i32::MAX children (parquet reserves a pointer
/// for each before reading them).
fn a_root_claiming_i32_max_children() -> Vec<u8> {
    let mut t = Thrift::default();
    t.begin().i32(1, 1);
    t.list(2, 2, 12);
    t.begin().binary(4, b"schema").i32(5, i32::MAX).end();
    t.begin().i32(1, 1).i32(3, 0).binary(4, b"x").end();
    t.i64(3, 0).list(4, 0, 12).end();
    parquet_file(&[], &t.bytes)
}

/// A footer whose schema is a group in a group in … 100 000 deep, around one INT32
/// (parquet builds the schema tree by recursion: deep enough, it overflows any stack).
fn a_schema_nested_100_000_deep() -> Vec<u8> {
    const DEPTH: u64 = 100_000;
    let mut t = Thrift::default();
    t.begin().i32(1, 1);
    t.list(2, DEPTH + 1, 12);
    for _ in 0..DEPTH {
        t.begin().i32(3, 0).binary(4, b"g").i32(5, 1).end();
    }
    t.begin().i32(1, 1).i32(3, 0).binary(4, b"x").end();
    t.i64(3, 0).list(4, 0, 12).end();
    parquet_file(&[], &t.bytes)
}

/// A footer whose row-group list claims i32::MAX groups (parquet reserves them all).
fn row_groups_past_the_file() -> Vec<u8> {
    let mut t = Thrift::default();
    t.begin().i32(1, 1);
    one_int_column(&mut t);
    t.i64(3, 0).list(4, i32::MAX as u64, 12);
    parquet_file(&[], &t.bytes)
}

/// [`row_groups_past_the_file`] with a footer longer than the 64 KiB parquet reads
/// first (its schema's root named by 100 KiB), so that parquet reads it apart from the
/// file's tail.
fn row_groups_past_a_long_footer() -> Vec<u8> {
    let mut t = Thrift::default();
    t.begin().i32(1, 1);
    t.list(2, 2, 12);
    t.begin().binary(4, &[b'r'; 100 << 10]).i32(5, 1).end();
    t.begin().i32(1, 1).i32(3, 0).binary(4, b"x").end();
    t.i64(3, 0).list(4, i32::MAX as u64, 12);
    parquet_file(&[], &t.bytes)
}

/// A file of one column chunk whose offset index (page locations, read when a reader
/// asks for them) claims i32::MAX pages in 8 bytes (parquet reserves them all).
fn an_offset_index_claiming_i32_max_pages() -> Vec<u8> {
    let mut index = Thrift::default();
    index.begin().list(1, i32::MAX as u64, 12).end();
    a_file_of_one_chunk(&[], 0, 0, &index.bytes) // UNCOMPRESSED
}

/// One Snappy page of 10 bytes whose header claims 2 GiB decompressed (parquet
/// zero-fills a buffer of the claimed size before decompressing into it).
fn a_page_claiming_two_gib() -> Vec<u8> {
    let page = [0u8; 10];
    let mut header = Thrift::default();
    header
        .begin()
        .i32(1, 0)
        .i32(2, i32::MAX)
        .i32(3, page.len() as i32);
    data_page_header(&mut header).end();
    header.end();
    let mut chunk = header.bytes.clone();
    chunk.extend_from_slice(&page);
    a_file_of_one_chunk(&chunk, 1, i32::MAX as i64, &[]) // SNAPPY
}

/// A page header's field 5, a data page of 100 PLAIN values with RLE levels (left open).
fn data_page_header(header: &mut Thrift) -> &mut Thrift {
    header
        .begin_field(5)
        .i32(1, 100)
        .i32(2, 0)
        .i32(3, 3)
        .i32(4, 3)
}

/// One page whose header's statistics give a maximum of 64 GiB, in a chunk of 30
/// bytes (a binary a Thrift reader may reserve by its claimed length; parquet 59
/// refuses this one without, and the page check refuses it first).
fn a_page_header_claiming_a_64_gib_statistic() -> Vec<u8> {
    let mut header = Thrift::default();
    header.begin().i32(1, 0).i32(2, 10).i32(3, 10);
    data_page_header(&mut header).begin_field(5);
    header.field(1, 8);
    header.varint(64 << 30);
    a_file_of_one_chunk(&header.bytes, 0, 10, &[]) // UNCOMPRESSED
}

/// A file of one INT32 column `x` of 100 rows in one chunk, `chunk` (whose pages claim
/// `uncompressed` bytes in all), compressed by `codec`, and after it the chunk's
/// `offset_index` when not empty.
fn a_file_of_one_chunk(
    chunk: &[u8],
    codec: i32,
    uncompressed: i64,
    offset_index: &[u8],
) -> Vec<u8> {
    let offset = 4i64;
    let mut t = Thrift::default();
    t.begin().i32(1, 1);
    one_int_column(&mut t);
    t.i64(3, 100).list(4, 1, 12);
    t.begin().list(1, 1, 12);
    t.begin().i64(2, offset).begin_field(3);
    t.i32(1, 1).list(2, 1, 5);
    t.varint(0); // PLAIN
    t.list(3, 1, 8);
    t.varint(1);
    t.bytes.push(b'x');
    t.i32(4, codec)
        .i64(5, 100)
        .i64(6, uncompressed)
        .i64(7, chunk.len() as i64)
        .i64(9, offset);
    t.end();
    if !offset_index.is_empty() {
        t.i64(4, offset + chunk.len() as i64)
            .i32(5, offset_index.len() as i32);
    }
    t.end();
    t.i64(2, chunk.len() as i64).i64(3, 100).end().end();
    parquet_file(&[chunk, offset_index].concat(), &t.bytes)
}

/// A file of one Int64 column `x` whose `ARROW:schema` says `x` is of type 99, which
/// arrow-ipc's decoder meets with `unimplemented!`.
fn an_arrow_schema_of_an_unknown_type() -> Vec<u8> {
    use arrow::ipc;
    use base64::Engine;
    let mut fbb = flatbuffers::FlatBufferBuilder::new();
    let name = fbb.create_string("x");
    let mut int = ipc::IntBuilder::new(&mut fbb);
    int.add_bitWidth(64);
    int.add_is_signed(true);
    let int = int.finish();
    let mut field = ipc::FieldBuilder::new(&mut fbb);
    field.add_name(name);
    field.add_type_type(ipc::Type(99));
    field.add_type_(int.as_union_value());
    let field = field.finish();
    let fields = fbb.create_vector(&[field]);
    let mut schema = ipc::SchemaBuilder::new(&mut fbb);
    schema.add_fields(fields);
    let schema = schema.finish();
    let mut message = ipc::MessageBuilder::new(&mut fbb);
    message.add_version(ipc::MetadataVersion::V5);
    message.add_header_type(ipc::MessageHeader::Schema);
    message.add_header(schema.as_union_value());
    let message = message.finish();
    fbb.finish(message, None);
    let value = base64::engine::general_purpose::STANDARD.encode(fbb.finished_data());

    let column: arrow::array::ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![1, 2, 3]));
    let batch = arrow::array::RecordBatch::try_from_iter([("x", column)]).unwrap();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_key_value_metadata(Some(vec![parquet::file::metadata::KeyValue::new(
            "ARROW:schema".into(),
            value,
        )]))
        .build();
    let options = parquet::arrow::arrow_writer::ArrowWriterOptions::new()
        .with_properties(props)
        .with_skip_arrow_metadata(true);
    let mut file = Vec::new();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new_with_options(&mut file, batch.schema(), options)
            .unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    file
}

/// Opens `bytes` as an input file (with its page locations) and reads every batch: the
/// error it ends in.
async fn read_all(dir: &std::path::Path, name: &str, bytes: &[u8]) -> EngineError {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    let url = path.display().to_string();
    let builder = match parquet_source::open(&url, bytes.len() as u64, None, &[], true).await {
        Ok(b) => b,
        Err(e) => return e,
    };
    let mut stream = match builder.build() {
        Ok(s) => s,
        Err(e) => return parquet_source::parquet_error(&url, e),
    };
    while let Some(batch) = stream.next().await {
        if let Err(e) = batch {
            return parquet_source::parquet_error(&url, e);
        }
    }
    panic!("{name}: read to the end without an error");
}

#[tokio::test(flavor = "current_thread")]
async fn hostile_parquet_files_end_in_an_error_naming_the_file_within_a_bound() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Vec<u8>, &str); 8] = [
        ("row-groups.parquet", row_groups_past_the_file(), "elements"),
        (
            "row-groups-long-footer.parquet",
            row_groups_past_a_long_footer(),
            "elements",
        ),
        (
            "offset-index.parquet",
            an_offset_index_claiming_i32_max_pages(),
            "its offset index does not decode",
        ),
        (
            "children.parquet",
            a_root_claiming_i32_max_children(),
            "claims 2147483647 children",
        ),
        (
            "deep-schema.parquet",
            a_schema_nested_100_000_deep(),
            "nested past 64",
        ),
        (
            "page.parquet",
            a_page_claiming_two_gib(),
            "claims 2147483647 bytes",
        ),
        (
            "page-statistics.parquet",
            a_page_header_claiming_a_64_gib_statistic(),
            "a Thrift length of 68719476736 bytes",
        ),
        (
            "arrow-schema.parquet",
            an_arrow_schema_of_an_unknown_type(),
            "unknown type 99",
        ),
    ];
    // `PROBEFLOW_WRITE_REGRESSIONS=DIR`: the cases as fuzz regression inputs of the
    // parquet_input target (a flags byte, 1: with page locations, then the file), e.g.
    // fuzz/regressions/parquet_input.
    if let Some(dir) = std::env::var_os("PROBEFLOW_WRITE_REGRESSIONS") {
        for (name, bytes, _) in &cases {
            let input = [&[1u8][..], bytes].concat();
            std::fs::write(std::path::Path::new(&dir).join(name), input).unwrap();
        }
    }
    for (name, bytes, what) in cases {
        LARGEST.store(0, Ordering::Relaxed);
        let e = read_all(dir.path(), name, &bytes).await;
        let largest = LARGEST.load(Ordering::Relaxed);
        let shown = e.to_string();
        // The footer's prefetch (64 KiB) and the runtime's own buffers are the most.
        assert!(
            largest <= 1 << 20,
            "{name}: an allocation of {largest} bytes ({shown})"
        );
        assert!(matches!(e, EngineError::Parquet { .. }), "{name}: {shown}");
        assert!(
            shown.contains(name) && shown.contains(what),
            "{name}: {shown}"
        );
        assert!(!e.fault().retryable(), "{name}: {shown}");
    }
}
