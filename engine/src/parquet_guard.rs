//! Checks of a Parquet file's bytes made before arrow-rs decodes them, where arrow-rs
//! 59 panics or allocates by what the bytes claim rather than by what they hold:
//!
//! * the footer ([`check_footer`]): every Thrift list and binary length within the
//!   bytes that follow it, and nesting at most [`MAX_THRIFT_DEPTH`] deep. (parquet
//!   reserves its row groups by the list's claimed length: a 30-byte file can ask for
//!   hundreds of GiB, an abort.) Its schema nests groups at most [`MAX_SCHEMA_DEPTH`]
//!   deep, and a group claims no more children than elements follow it (parquet builds
//!   the schema tree by recursion, reserving each group's claimed children first).
//! * a column chunk's offset index ([`check_offset_index`]): its lists within its bytes
//!   (parquet reserves the page locations by the list's claimed length).
//! * the embedded Arrow schema ([`check_arrow_schema`], the footer's `ARROW:schema`):
//!   every field of a type, width, unit and child count that arrow-ipc's decoder
//!   accepts without panicking.
//! * the places a parsed footer gives ([`check_layout`]): column chunks and pages
//!   within the file (parquet asserts that a chunk's start is not negative);
//! * page headers ([`check_pages`]): a page may claim to decompress to at most
//!   [`MAX_PAGE_BYTES`] or [`MAX_PAGE_RATIO`] times its compressed size, whichever is
//!   more (Snappy, LZ4 and Brotli pages are decompressed into a buffer of the claimed
//!   size, zero-filled first: for those, at most what they can expand to), and a
//!   dictionary page at most a value a byte (parquet reserves the claimed count); each
//!   length in a header within the bytes that follow it. Writers cut pages at about
//!   1 MiB.
//!
//! In all of them a Thrift field parquet knows must be declared of the type parquet
//! reads it as ([`shapes`]): parquet reads a known field by its own schema whatever
//! type the bytes declare, so a check that walked by the declared type would read other
//! bytes than parquet does (a page's compressed size declared a bool, no payload, is
//! read by parquet from the bytes after it).
//!
//! Each returns what is wrong in words; the caller names the file. Thrift that ends
//! early or claims more than follows is refused; what a check does not look at
//! (a missing required field, an unknown enum value) parquet refuses with its own error.

use arrow::ipc;

mod shapes;

use shapes::{Shape, Struct};

/// The deepest Thrift nesting a footer may have (a real one nests about 6 deep).
pub const MAX_THRIFT_DEPTH: u32 = 32;

/// The deepest a file's schema may nest groups (parquet builds its schema tree, and
/// arrow its fields, by recursion on the caller's stack; real schemas nest a few deep).
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// A page may always claim this many decompressed bytes.
pub const MAX_PAGE_BYTES: u64 = 64 << 20;

/// Past [`MAX_PAGE_BYTES`], a page may claim at most this many times its compressed size
/// (deflate's limit is about 1 032; real pages of real data stay far below).
pub const MAX_PAGE_RATIO: u64 = probeflow_reader::array_record::chunk::MAX_DECODED_RATIO;

/// Thrift compact protocol's type codes.
mod kind {
    pub const STOP: u8 = 0;
    pub const TRUE: u8 = 1;
    pub const FALSE: u8 = 2;
    pub const BYTE: u8 = 3;
    pub const I16: u8 = 4;
    pub const I32: u8 = 5;
    pub const I64: u8 = 6;
    pub const DOUBLE: u8 = 7;
    pub const BINARY: u8 = 8;
    pub const LIST: u8 = 9;
    pub const SET: u8 = 10;
    pub const MAP: u8 = 11;
    pub const STRUCT: u8 = 12;
    pub const UUID: u8 = 13;
}

/// A walk over Thrift compact-protocol bytes that reads nothing into memory: it checks
/// that every length fits in what is left.
struct Walk<'a> {
    rest: &'a [u8],
}

type Checked<T = ()> = Result<T, String>;

impl<'a> Walk<'a> {
    fn byte(&mut self) -> Checked<u8> {
        let (&b, rest) = self
            .rest
            .split_first()
            .ok_or("ends inside a Thrift value")?;
        self.rest = rest;
        Ok(b)
    }

    fn skip(&mut self, n: u64) -> Checked {
        if n > self.rest.len() as u64 {
            return Err(format!(
                "a Thrift length of {n} bytes where {} remain",
                self.rest.len()
            ));
        }
        self.rest = &self.rest[n as usize..];
        Ok(())
    }

    /// A varint as parquet reads one: of any length, the bits past 64 wrapping into the
    /// value (so that a check sees the number parquet will use).
    fn varint(&mut self) -> Checked<u64> {
        let mut value = 0u64;
        let mut shift = 0u32;
        loop {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f).wrapping_shl(shift);
            if b & 0x80 == 0 {
                return Ok(value);
            }
            shift = shift.wrapping_add(7);
        }
    }

    /// An i32 as parquet reads one: a zigzag varint, truncated.
    fn i32(&mut self) -> Checked<i64> {
        Ok(i64::from(self.zigzag()? as i32))
    }

    fn zigzag(&mut self) -> Checked<i64> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    /// A count of elements, each at least one byte: at most what is left.
    fn count(&mut self, n: u64, what: &str) -> Checked<u64> {
        if n > self.rest.len() as u64 {
            return Err(format!(
                "a Thrift {what} of {n} elements where {} bytes remain",
                self.rest.len()
            ));
        }
        Ok(n)
    }

    fn value(&mut self, t: u8, depth: u32) -> Checked {
        if depth > MAX_THRIFT_DEPTH {
            return Err(format!(
                "Thrift values nested past {MAX_THRIFT_DEPTH} levels"
            ));
        }
        match t {
            // A bool in a list or a map is a byte (a bool field has none: `fields`).
            kind::TRUE | kind::FALSE | kind::BYTE => self.skip(1),
            kind::I16 | kind::I32 | kind::I64 => self.varint().map(drop),
            kind::DOUBLE => self.skip(8),
            kind::UUID => self.skip(16),
            kind::BINARY => {
                let n = self.varint()?;
                self.skip(n)
            }
            kind::LIST | kind::SET => {
                let (element, n) = self.list_header()?;
                for _ in 0..n {
                    self.element(element, depth + 1)?;
                }
                Ok(())
            }
            kind::MAP => {
                let n = self.varint()?;
                let n = self.count(n, "map")?;
                if n == 0 {
                    return Ok(());
                }
                let types = self.byte()?;
                for _ in 0..n {
                    self.value(types >> 4, depth + 1)?;
                    self.value(types & 0x0f, depth + 1)?;
                }
                Ok(())
            }
            kind::STRUCT => self.fields(&shapes::UNKNOWN, depth + 1, |_, _, _| Ok(false)),
            other => Err(format!("an unknown Thrift type {other}")),
        }
    }

    /// A list's element type and its count (at most the bytes left).
    fn list_header(&mut self) -> Checked<(u8, u64)> {
        let header = self.byte()?;
        let n = match header >> 4 {
            15 => self.varint()?,
            n => u64::from(n),
        };
        Ok((header & 0x0f, self.count(n, "list")?))
    }

    /// A list's element: a bool in a list is one byte.
    fn element(&mut self, t: u8, depth: u32) -> Checked {
        match t {
            kind::TRUE | kind::FALSE => self.skip(1),
            t => self.value(t, depth),
        }
    }

    /// `FileMetaData.schema` (a list of `SchemaElement`, in depth-first order): as any
    /// list of them, and its groups' children counts (field 5) checked as a tree.
    fn schema(&mut self, depth: u32) -> Checked {
        let (element, n) = self.list_header()?;
        if element != kind::STRUCT {
            return Err(format!(
                "field 2 of FileMetaData: its elements declared {}, which parquet reads \
                 as SchemaElement",
                type_name(element)
            ));
        }
        let mut tree = SchemaTree::default();
        for i in 0..n {
            let mut children = None;
            self.fields(&shapes::SCHEMA_ELEMENT, depth + 2, |id, _, walk| {
                if id != 5 {
                    return Ok(false);
                }
                children = Some(walk.i32()?);
                Ok(true)
            })?;
            tree.element(children, n - i - 1)?;
        }
        Ok(())
    }

    /// The fields of a struct parquet reads as `of`, up to its stop. A field parquet
    /// knows must be declared of the type parquet reads it as ([`shapes`]);
    /// `each(id, type, walk)` may read a field itself (and says so), else the field is
    /// walked by its shape, or by its declared type where parquet skips it.
    fn fields(
        &mut self,
        of: &Struct,
        depth: u32,
        mut each: impl FnMut(i16, u8, &mut Self) -> Checked<bool>,
    ) -> Checked {
        let mut last = 0i16;
        loop {
            let header = self.byte()?;
            let t = header & 0x0f;
            if t == kind::STOP {
                return Ok(());
            }
            let id = match header >> 4 {
                0 => i16::try_from(self.zigzag()?).map_err(|_| "a Thrift field id past i16")?,
                delta => last
                    .checked_add(i16::from(delta))
                    .ok_or("a Thrift field id past i16")?,
            };
            last = id;
            let shape = of.field(id);
            if let Some(shape) = shape.filter(|shape| !shape.accepts(t)) {
                return Err(format!(
                    "field {id} of {}: declared {}, which parquet reads as {}",
                    of.name,
                    type_name(t),
                    shape.describe()
                ));
            }
            if each(id, t, self)? {
                continue;
            }
            match shape {
                Some(shape) => self
                    .shaped(shape, depth)
                    .map_err(|what| format!("field {id} of {}: {what}", of.name))?,
                // A bool field's value is its type: no byte follows.
                None if matches!(t, kind::TRUE | kind::FALSE) => {}
                None => self.value(t, depth)?,
            }
        }
    }

    /// A `DataPageHeaderV2`'s level lengths and whether its data is compressed.
    fn page_levels(&mut self) -> Checked<PageLevels> {
        let mut lengths = (0i64, 0i64);
        let mut compressed = true;
        self.fields(&shapes::DATA_PAGE_HEADER_V2, 2, |id, t, w| match id {
            5 => {
                lengths.0 = w.i32()?;
                Ok(true)
            }
            6 => {
                lengths.1 = w.i32()?;
                Ok(true)
            }
            7 => {
                compressed = t == kind::TRUE;
                Ok(true)
            }
            _ => Ok(false),
        })?;
        let bytes = u64::try_from(lengths.0.max(0) + lengths.1.max(0)).unwrap_or(0);
        Ok(PageLevels { bytes, compressed })
    }

    /// A field's value that parquet reads as `shape` (its declared type accepted).
    fn shaped(&mut self, shape: Shape, depth: u32) -> Checked {
        if depth > MAX_THRIFT_DEPTH {
            return Err(format!(
                "Thrift values nested past {MAX_THRIFT_DEPTH} levels"
            ));
        }
        match shape {
            Shape::Bool => Ok(()),
            Shape::Struct(of) => self.fields(of, depth + 1, |_, _, _| Ok(false)),
            Shape::List(element) => {
                let (t, n) = self.list_header()?;
                self.elements_are(shape, t)?;
                for _ in 0..n {
                    match *element {
                        Shape::Struct(of) => self.fields(of, depth + 1, |_, _, _| Ok(false))?,
                        _ => self.element(t, depth + 1)?,
                    }
                }
                Ok(())
            }
            Shape::Int => self.varint().map(drop),
            Shape::Byte => self.skip(1),
            Shape::Double => self.skip(8),
            Shape::Binary => {
                let n = self.varint()?;
                self.skip(n)
            }
        }
    }

    /// Refuses a list whose elements are declared `t` where parquet reads the list as
    /// `list`.
    fn elements_are(&self, list: Shape, t: u8) -> Checked {
        match list {
            Shape::List(element) if !element.accepts(t) => Err(format!(
                "its elements declared {}, which parquet reads as {}",
                type_name(t),
                element.describe()
            )),
            _ => Ok(()),
        }
    }
}

/// A compact type code's name.
fn type_name(t: u8) -> &'static str {
    match t {
        kind::TRUE | kind::FALSE => "a bool",
        kind::BYTE => "a byte",
        kind::I16 => "an i16",
        kind::I32 => "an i32",
        kind::I64 => "an i64",
        kind::DOUBLE => "a double",
        kind::BINARY => "a binary",
        kind::LIST => "a list",
        kind::SET => "a set",
        kind::MAP => "a map",
        kind::STRUCT => "a struct",
        kind::UUID => "a uuid",
        _ => "an unknown type",
    }
}

/// The groups of a schema still open as its elements are read in order (depth
/// first): for each, the children still to come. Never deeper than [`MAX_SCHEMA_DEPTH`].
#[derive(Default)]
struct SchemaTree {
    open: Vec<u64>,
}

impl SchemaTree {
    /// The next element, claiming `children` (none or not positive: a leaf), with
    /// `after` elements following it.
    fn element(&mut self, children: Option<i64>, after: u64) -> Checked {
        if let Some(parent) = self.open.last_mut() {
            *parent -= 1;
        }
        if let Some(n) = children.filter(|&n| n > 0) {
            let n = n as u64;
            if n > after {
                return Err(format!(
                    "a schema group claims {n} children where {after} elements follow"
                ));
            }
            if self.open.len() >= MAX_SCHEMA_DEPTH {
                return Err(format!("a schema nested past {MAX_SCHEMA_DEPTH} groups"));
            }
            self.open.push(n);
        }
        while self.open.last() == Some(&0) {
            self.open.pop();
        }
        Ok(())
    }
}

/// Checks a footer's Thrift (`FileMetaData`, without its length and magic).
pub fn check_footer(footer: &[u8]) -> Checked {
    let mut walk = Walk { rest: footer };
    walk.fields(&shapes::FILE_META_DATA, 1, |id, _, walk| match id {
        2 => walk.schema(1).map(|()| true),
        _ => Ok(false),
    })
    .map_err(|what| format!("its footer does not decode: {what}"))
}

/// Checks a column chunk's offset index (its page locations, as parquet reads them
/// when asked for them): every list within the bytes that follow it.
pub fn check_offset_index(index: &[u8]) -> Checked {
    let mut walk = Walk { rest: index };
    walk.fields(&shapes::OFFSET_INDEX, 1, |_, _, _| Ok(false))
        .map_err(|what| format!("its offset index does not decode: {what}"))
}

/// Checks the page headers at the start of `pages` (a column chunk, or pages of one,
/// as read for decoding) of a codec that neither zero-fills its claim nor has a window:
/// [`check_pages_of`].
pub fn check_pages(pages: &[u8]) -> Checked {
    check_pages_of(pages, parquet::basic::Compression::UNCOMPRESSED)
}

/// The most a page of `codec` can expand, for the codecs parquet decompresses into a
/// buffer of the claimed size, zero-filled first (Snappy: a 3-byte copy of 64 bytes;
/// LZ4: about 255 per byte): their claims past it are refused whatever the floor.
fn zero_filling_ratio(codec: parquet::basic::Compression) -> Option<u64> {
    use parquet::basic::Compression as C;
    match codec {
        C::SNAPPY => Some(probeflow_reader::array_record::chunk::SNAPPY_MAX_RATIO),
        C::LZ4 | C::LZ4_RAW => Some(256),
        C::UNCOMPRESSED | C::GZIP(_) | C::LZO | C::BROTLI(_) | C::ZSTD(_) => None,
    }
}

/// Checks the page headers at the start of `pages`, pages of `codec`: each page's sizes
/// within the bytes and within the bound of the module docs (for a codec that
/// zero-fills its claim, [`zero_filling_ratio`], at most that many times its compressed
/// size and 64 bytes, with no floor), every length in a header within the bytes that
/// follow it, and a Brotli page's window within [`MAX_PAGE_BYTES`] or its claim.
pub fn check_pages_of(pages: &[u8], codec: parquet::basic::Compression) -> Checked {
    let zero_filling = zero_filling_ratio(codec);
    let mut walk = Walk { rest: pages };
    while !walk.rest.is_empty() {
        let mut sizes = (None, None);
        let mut dictionary_values = None;
        let mut levels = PageLevels::default();
        let header = walk.fields(&shapes::PAGE_HEADER, 1, |id, _, w| match id {
            2 => {
                sizes.0 = Some(w.i32()?);
                Ok(true)
            }
            3 => {
                sizes.1 = Some(w.i32()?);
                Ok(true)
            }
            7 => {
                w.fields(&shapes::DICTIONARY_PAGE_HEADER, 2, |id, _, w| match id {
                    1 => {
                        dictionary_values = Some(w.i32()?);
                        Ok(true)
                    }
                    _ => Ok(false),
                })?;
                Ok(true)
            }
            8 => {
                levels = w.page_levels()?;
                Ok(true)
            }
            _ => Ok(false),
        });
        // A header whose lengths pass its bytes is corrupt (parquet may reserve by
        // them); one without its sizes, parquet refuses.
        header.map_err(|what| format!("a page header does not decode: {what}"))?;
        let (Some(uncompressed), Some(compressed)) = sizes else {
            return Ok(());
        };
        if compressed < 0 || uncompressed < 0 {
            return Ok(());
        }
        let (uncompressed, compressed) = (uncompressed as u64, compressed as u64);
        let bound = match zero_filling {
            Some(ratio) => compressed.saturating_mul(ratio).saturating_add(64),
            None => MAX_PAGE_BYTES.max(compressed.saturating_mul(MAX_PAGE_RATIO)),
        };
        if uncompressed > bound {
            return Err(format!(
                "a page of {compressed} compressed bytes claims {uncompressed} bytes \
                 decompressed (at most {bound}: {MAX_PAGE_BYTES} or {MAX_PAGE_RATIO} times \
                 the compressed size, and for Snappy and LZ4 what they can expand to)"
            ));
        }
        // Parquet sizes a dictionary by its claimed count before decoding it; each value
        // of a dictionary (PLAIN, never of booleans) takes at least a byte of the page.
        if let Some(values) = dictionary_values {
            if values < 0 || values as u64 > uncompressed {
                return Err(format!(
                    "a dictionary page of {uncompressed} bytes claims {values} values"
                ));
            }
        }
        if let parquet::basic::Compression::BROTLI(_) = codec {
            let length = usize::try_from(compressed).unwrap_or(usize::MAX);
            let page = &walk.rest[..walk.rest.len().min(length)];
            check_brotli_window(levels.compressed_data(page), uncompressed)?;
        }
        if walk.skip(compressed).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// A Brotli page's window, which parquet's decoder allocates whole (up to 1 GiB in the
/// large-window format no Parquet writer uses): at most [`MAX_PAGE_BYTES`] or the
/// page's claim rounded up to a power of two (a window past the output is never
/// needed; RFC 7932's windows, at most 16 MiB, always pass).
fn check_brotli_window(stream: &[u8], uncompressed: u64) -> Checked {
    let Some(log) = probeflow_reader::array_record::chunk::brotli_window_log(stream) else {
        return Ok(());
    };
    let bound = MAX_PAGE_BYTES.max(uncompressed.checked_next_power_of_two().unwrap_or(u64::MAX));
    if 1u64 << log > bound {
        return Err(format!(
            "a Brotli page of {uncompressed} bytes declares a window of 2^{log} bytes \
             (at most {bound})"
        ));
    }
    Ok(())
}

/// Where a version 2 data page's compressed data begins: after its levels, which are
/// stored uncompressed (`DataPageHeaderV2` fields 5 and 6), unless the page is not
/// compressed at all (field 7).
struct PageLevels {
    bytes: u64,
    compressed: bool,
}

impl Default for PageLevels {
    /// A version 1 page's: all of it compressed.
    fn default() -> Self {
        PageLevels {
            bytes: 0,
            compressed: true,
        }
    }
}

impl PageLevels {
    /// The compressed data of a page whose bytes (after its header) are `page`; none
    /// for a page stored uncompressed.
    fn compressed_data<'p>(&self, page: &'p [u8]) -> &'p [u8] {
        let at = usize::try_from(self.bytes).unwrap_or(usize::MAX);
        match (self.compressed, page.get(at..)) {
            (true, Some(data)) => data,
            _ => &[],
        }
    }
}

/// Checks the places a parsed footer gives (each column chunk's start and length, and
/// its pages' in the offset index) for a file of `size` bytes: non-negative and within
/// the file (parquet asserts on a negative one, and reads past the end short).
pub fn check_layout(footer: &parquet::file::metadata::ParquetMetaData, size: u64) -> Checked {
    let within = |start: i64, len: i64, what: &dyn Fn() -> String| -> Checked {
        let fits = u64::try_from(start)
            .ok()
            .zip(u64::try_from(len).ok())
            .and_then(|(s, l)| s.checked_add(l))
            .is_some_and(|end| end <= size);
        if fits {
            Ok(())
        } else {
            Err(format!(
                "its footer places {} at bytes {start} (+{len}), outside the file of {size} bytes",
                what()
            ))
        }
    };
    for (g, group) in footer.row_groups().iter().enumerate() {
        for (c, column) in group.columns().iter().enumerate() {
            let start = column
                .dictionary_page_offset()
                .unwrap_or(column.data_page_offset());
            let what = || format!("row group {g}'s column chunk {c}");
            within(start, column.compressed_size(), &what)?;
            within(column.data_page_offset(), 0, &what)?;
        }
    }
    // A page lies within its column chunk (parquet slices the chunk's bytes by it).
    for (g, columns) in footer.offset_index().into_iter().flatten().enumerate() {
        for (c, index) in columns.iter().enumerate() {
            let Some(column) = footer.row_groups().get(g).and_then(|r| r.columns().get(c)) else {
                return Err(format!(
                    "its offset index names row group {g}'s column {c}, which it lacks"
                ));
            };
            let start = column
                .dictionary_page_offset()
                .unwrap_or(column.data_page_offset());
            let end = start.saturating_add(column.compressed_size());
            for (p, page) in index.page_locations().iter().enumerate() {
                let what = || format!("page {p} of row group {g}'s column {c}");
                within(page.offset, i64::from(page.compressed_page_size), &what)?;
                let page_end = page
                    .offset
                    .saturating_add(i64::from(page.compressed_page_size));
                if page.offset < start || page_end > end {
                    return Err(format!(
                        "its offset index places {} at bytes {}..{page_end}, outside its column \
                         chunk (bytes {start}..{end})",
                        what(),
                        page.offset
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Checks the value of a footer's `ARROW:schema` key as parquet decodes it (base64 of
/// an IPC message, with or without its 8-byte prefix): a value parquet cannot decode
/// passes (parquet refuses it), one it would decode is checked field by field.
pub fn check_arrow_schema(value: &str) -> Checked {
    use base64::Engine;
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(value) else {
        return Ok(());
    };
    let message = if bytes.len() > 8 && bytes[0..4] == [255u8; 4] {
        &bytes[8..]
    } else {
        &bytes[..]
    };
    let Ok(message) = ipc::root_as_message(message) else {
        return Ok(());
    };
    let Some(schema) = message.header_as_schema() else {
        return Ok(());
    };
    let big_endian = schema.endianness() == ipc::Endianness::Big;
    let fields = schema
        .fields()
        .ok_or("its ARROW:schema has no field list")?;
    for field in fields {
        if big_endian && field.type_type() == ipc::Type::Decimal {
            return Err("its ARROW:schema has a big-endian decimal".into());
        }
        check_field(field, true).map_err(|what| {
            format!(
                "its ARROW:schema does not decode: field {:?}: {what}",
                field.name().unwrap_or_default()
            )
        })?;
    }
    Ok(())
}

/// A field arrow-ipc decodes without panicking: the conditions of its `get_data_type`.
fn check_field(field: ipc::Field<'_>, may_be_dictionary: bool) -> Checked {
    use ipc::Type as T;
    if let (true, Some(dictionary)) = (may_be_dictionary, field.dictionary()) {
        let index = dictionary
            .indexType()
            .ok_or("a dictionary without an index type")?;
        int_width(index.bitWidth())?;
        return check_field(field, false);
    }
    let children = |n: usize| -> Checked {
        let got = field.children().map_or(0, |c| c.len());
        if field.children().is_none() || got != n {
            return Err(format!(
                "{:?} with {got} children, not {n}",
                field.type_type()
            ));
        }
        field
            .children()
            .into_iter()
            .flatten()
            .try_for_each(|c| check_field(c, true))
    };
    let missing = || format!("a {:?} type without its parameters", field.type_type());
    match field.type_type() {
        T::Null
        | T::Bool
        | T::Binary
        | T::BinaryView
        | T::LargeBinary
        | T::Utf8
        | T::Utf8View
        | T::LargeUtf8 => Ok(()),
        T::Int => int_width(field.type_as_int().ok_or_else(missing)?.bitWidth()),
        T::FixedSizeBinary => {
            let width = field
                .type_as_fixed_size_binary()
                .ok_or_else(missing)?
                .byteWidth();
            non_negative(width, "fixed-size binary width")
        }
        T::FloatingPoint => {
            let p = field
                .type_as_floating_point()
                .ok_or_else(missing)?
                .precision();
            known(
                [
                    ipc::Precision::HALF,
                    ipc::Precision::SINGLE,
                    ipc::Precision::DOUBLE,
                ]
                .contains(&p),
                "float precision",
                p.0,
            )
        }
        T::Date => {
            let unit = field.type_as_date().ok_or_else(missing)?.unit();
            known(
                [ipc::DateUnit::DAY, ipc::DateUnit::MILLISECOND].contains(&unit),
                "date unit",
                unit.0,
            )
        }
        T::Time => {
            let time = field.type_as_time().ok_or_else(missing)?;
            let ok = matches!(
                (time.bitWidth(), time.unit()),
                (32, ipc::TimeUnit::SECOND | ipc::TimeUnit::MILLISECOND)
                    | (64, ipc::TimeUnit::MICROSECOND | ipc::TimeUnit::NANOSECOND)
            );
            known(ok, "time width and unit", time.bitWidth())
        }
        T::Timestamp => time_unit(field.type_as_timestamp().ok_or_else(missing)?.unit()),
        T::Duration => time_unit(field.type_as_duration().ok_or_else(missing)?.unit()),
        T::Interval => {
            let unit = field.type_as_interval().ok_or_else(missing)?.unit();
            let units = [
                ipc::IntervalUnit::YEAR_MONTH,
                ipc::IntervalUnit::DAY_TIME,
                ipc::IntervalUnit::MONTH_DAY_NANO,
            ];
            known(units.contains(&unit), "interval unit", unit.0)
        }
        T::List | T::LargeList | T::ListView | T::LargeListView => children(1),
        T::FixedSizeList => {
            let size = field
                .type_as_fixed_size_list()
                .ok_or_else(missing)?
                .listSize();
            non_negative(size, "fixed-size list size")?;
            children(1)
        }
        T::Map => {
            field.type_as_map().ok_or_else(missing)?;
            children(1)
        }
        T::RunEndEncoded => children(2),
        T::Struct_ => field
            .children()
            .into_iter()
            .flatten()
            .try_for_each(|c| check_field(c, true)),
        T::Decimal => {
            let d = field.type_as_decimal().ok_or_else(missing)?;
            u8::try_from(d.precision()).map_err(|_| "a decimal precision past 255")?;
            i8::try_from(d.scale()).map_err(|_| "a decimal scale outside i8")?;
            known(
                matches!(d.bitWidth(), 32 | 64 | 128 | 256),
                "decimal width",
                d.bitWidth(),
            )
        }
        T::Union => check_union(field),
        other => Err(format!("an unknown type {}", other.0)),
    }
}

fn check_union(field: ipc::Field<'_>) -> Checked {
    let union = field
        .type_as_union()
        .ok_or("a union without its parameters")?;
    known(
        [ipc::UnionMode::Dense, ipc::UnionMode::Sparse].contains(&union.mode()),
        "union mode",
        union.mode().0,
    )?;
    let children = field.children().map_or(0, |c| c.len());
    if let Some(ids) = union.typeIds() {
        // arrow takes each id as an i8; each must be non-negative and distinct, one per
        // child.
        let mut seen = [false; 128];
        if ids.len() != children {
            return Err(format!(
                "a union of {children} children and {} ids",
                ids.len()
            ));
        }
        for id in ids.iter() {
            let id = id as i8;
            if id < 0 || std::mem::replace(&mut seen[id as usize], true) {
                return Err(format!("a union type id {id} negative or repeated"));
            }
        }
    }
    field
        .children()
        .into_iter()
        .flatten()
        .try_for_each(|c| check_field(c, true))
}

fn int_width(bits: i32) -> Checked {
    known(matches!(bits, 8 | 16 | 32 | 64), "integer width", bits)
}

fn time_unit(unit: ipc::TimeUnit) -> Checked {
    let units = [
        ipc::TimeUnit::SECOND,
        ipc::TimeUnit::MILLISECOND,
        ipc::TimeUnit::MICROSECOND,
        ipc::TimeUnit::NANOSECOND,
    ];
    known(units.contains(&unit), "time unit", unit.0)
}

fn non_negative(n: i32, what: &str) -> Checked {
    known(n >= 0, what, n)
}

fn known(ok: bool, what: &str, value: impl std::fmt::Display) -> Checked {
    if ok {
        Ok(())
    } else {
        Err(format!("an unknown {what} {value}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_longer_than_the_bytes_left_is_refused() {
        // FileMetaData { 1: version, 4: row_groups = list<struct> of i32::MAX }.
        let footer = [0x15, 0x02, 0x39, 0xfc, 0xff, 0xff, 0xff, 0xff, 0x07, 0x00];
        let e = check_footer(&footer).unwrap_err();
        assert!(e.contains("2147483647 elements"), "{e}");
        // The same list of one empty struct is fine.
        assert_eq!(check_footer(&[0x15, 0x02, 0x39, 0x1c, 0x00, 0x00]), Ok(()));
        // Bool fields carry their value in their type (no byte); bools in a list are a
        // byte each: fields parquet skips, 10 true, 11 false, 12 a list of two bools.
        let bools = [0xa1, 0x12, 0x19, 0x21, 0x01, 0x02, 0x00];
        assert_eq!(check_footer(&bools), Ok(()));
    }

    #[test]
    fn nesting_past_the_limit_is_refused_without_recursing_on_the_callers_stack_past_it() {
        // A struct in a struct in … (field 10, which parquet skips, then field 1 of
        // type struct), 10 000 deep.
        let mut footer = vec![0xac];
        footer.extend(std::iter::repeat_n(0x1c, 9_999));
        footer.extend(std::iter::repeat_n(0x00, 10_001));
        let e = check_footer(&footer).unwrap_err();
        assert!(e.contains("nested past 32"), "{e}");
    }

    #[test]
    fn a_schema_tree_opens_a_group_per_positive_count_and_closes_it_after_its_children() {
        let mut tree = SchemaTree::default();
        // root(2) { a, g(1) { b } }
        tree.element(Some(2), 3).unwrap();
        assert_eq!(tree.open, [2]);
        tree.element(None, 2).unwrap();
        assert_eq!(tree.open, [1]);
        tree.element(Some(1), 1).unwrap();
        assert_eq!(tree.open, [0, 1]);
        tree.element(Some(0), 0).unwrap();
        assert!(tree.open.is_empty());
        // A negative count is a leaf (parquet refuses it).
        tree.element(Some(-5), 0).unwrap();
        assert!(tree.open.is_empty());
    }

    #[test]
    fn a_group_may_claim_no_more_children_than_elements_follow_it() {
        let mut tree = SchemaTree::default();
        assert_eq!(tree.element(Some(3), 3), Ok(()));
        let e = tree.element(Some(3), 2).unwrap_err();
        assert!(
            e.contains("claims 3 children where 2 elements follow"),
            "{e}"
        );
    }

    #[test]
    fn a_schema_may_nest_max_schema_depth_groups_and_no_more() {
        let mut tree = SchemaTree::default();
        for _ in 0..MAX_SCHEMA_DEPTH {
            tree.element(Some(1), 1_000).unwrap();
        }
        assert_eq!(tree.open.len(), MAX_SCHEMA_DEPTH);
        let e = tree.element(Some(1), 1_000).unwrap_err();
        assert!(e.contains("nested past 64 groups"), "{e}");
    }

    #[test]
    fn a_binary_longer_than_the_bytes_left_is_refused() {
        // Field 6 (created_by), claiming u32::MAX bytes.
        let footer = [0x68, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(check_footer(&footer)
            .unwrap_err()
            .contains("4294967295 bytes"));
    }

    /// A page header: type DATA_PAGE, the sizes, then its stop; then the page's bytes.
    fn page(uncompressed: i32, compressed: i32) -> Vec<u8> {
        fn zigzag(v: i32, out: &mut Vec<u8>) {
            let mut z = ((v << 1) ^ (v >> 31)) as u32;
            while z >= 0x80 {
                out.push((z as u8) | 0x80);
                z >>= 7;
            }
            out.push(z as u8);
        }
        let mut p = vec![0x15, 0x00, 0x15];
        zigzag(uncompressed, &mut p);
        p.push(0x15);
        zigzag(compressed, &mut p);
        p.push(0x00);
        p.extend(std::iter::repeat_n(0u8, compressed.max(0) as usize));
        p
    }

    #[test]
    fn a_page_that_claims_more_than_its_bound_is_refused() {
        use parquet::basic::Compression as C;
        let mut pages = page(1 << 20, 100);
        pages.extend(page(i32::MAX, 10));
        let e = check_pages(&pages).unwrap_err();
        assert!(e.contains("10 compressed bytes claims 2147483647"), "{e}");
        // Within the ratio past the floor.
        assert_eq!(check_pages(&page(100 << 20, 100_000)), Ok(()));
        // A header that does not decode is refused (parquet reads some by their claims).
        let e = check_pages(&[0xff, 0xff]).unwrap_err();
        assert!(e.contains("page header does not decode"), "{e}");
        // One without its sizes is left to parquet, which refuses it.
        assert_eq!(check_pages(&[0x15, 0x00, 0x00]), Ok(()));
        // Snappy zero-fills its claim: 10 bytes may claim 22 times that and no more.
        assert_eq!(check_pages_of(&page(284, 10), C::SNAPPY), Ok(()));
        assert!(check_pages_of(&page(285, 10), C::SNAPPY).is_err());
        // A dictionary page of 16 bytes claiming i32::MAX values (parquet resized its
        // dictionary to them: 16 GiB of i64): type 2, sizes 16/16, header 7 {1: count}.
        let mut dictionary = vec![0x15, 0x04, 0x15, 0x20, 0x15, 0x20, 0x4c, 0x15];
        dictionary.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f, 0x00, 0x00]);
        dictionary.extend_from_slice(&[0u8; 16]);
        let e = check_pages(&dictionary).unwrap_err();
        assert!(e.contains("claims 2147483647 values"), "{e}");
        // The same count as an overlong varint, which parquet reads (the bits past 64
        // wrap): the check reads it as parquet does.
        let mut overlong = vec![0x15, 0x04, 0x15, 0x20, 0x15, 0x20, 0x4c, 0x15];
        overlong.extend_from_slice(&[0x8c; 19]);
        overlong.extend_from_slice(&[0x04, 0x00, 0x00]);
        overlong.extend_from_slice(&[0u8; 16]);
        let e = check_pages(&overlong).unwrap_err();
        assert!(e.contains("16 bytes claims 1893843910 values"), "{e}");
    }

    /// parquet reads a known field by the type its schema gives, whatever type the bytes
    /// declare; a check that walked by the declared type would read other bytes than
    /// parquet and pass what parquet then reserves by. The fuzzer's case: a dictionary
    /// page's compressed size declared a bool (no payload), which parquet reads as the
    /// varint after it, so the page's claim of 1.4 GB went unchecked.
    #[test]
    fn a_known_field_of_another_type_than_parquet_reads_is_refused() {
        // PageHeader { 1: DICTIONARY_PAGE, 2: 1 396 570 812, 3: declared bool false }.
        let mut header = vec![0x15, 0x04, 0x15, 0xf8, 0xea, 0xef, 0xb3, 0x0a];
        header.extend_from_slice(&[0x12, 0x00, 0x00]);
        let e = check_pages(&header).unwrap_err();
        assert!(e.contains("field 3 of PageHeader"), "{e}");
        // FileMetaData { 4: row_groups declared an i32 whose bytes parquet reads as a
        // list header of i32::MAX row groups }.
        let footer = [0x45, 0xfc, 0xff, 0xff, 0xff, 0xff, 0x07, 0x00];
        let e = check_footer(&footer).unwrap_err();
        assert!(e.contains("field 4 of FileMetaData"), "{e}");
        // OffsetIndex { 1: its page locations (structs), declared a list of binaries }.
        let e = check_offset_index(&[0x19, 0x18, 0x00, 0x00]).unwrap_err();
        assert!(e.contains("field 1 of OffsetIndex"), "{e}");
    }

    /// Every integer type is one zigzag varint, which parquet reads as its own width:
    /// a schema group's children count declared an i64 is the count parquet uses.
    #[test]
    fn a_children_count_of_any_integer_type_is_checked() {
        // FileMetaData { 2: [SchemaElement { 4: "r", 5: (i64) 2^30 }] }.
        let footer = [
            0x29, 0x1c, 0x48, 0x01, b'r', 0x16, 0x80, 0x80, 0x80, 0x80, 0x08, 0x00, 0x00,
        ];
        let e = check_footer(&footer).unwrap_err();
        assert!(e.contains("claims 1073741824 children"), "{e}");
    }

    /// The `ARROW:schema` value of one field `x` of type `type_type` with an Int
    /// table of `bits` as its parameters (whatever the type).
    fn schema_of(type_type: ipc::Type, bits: i32) -> String {
        use base64::Engine;
        let mut fbb = flatbuffers::FlatBufferBuilder::new();
        let name = fbb.create_string("x");
        let mut int = ipc::IntBuilder::new(&mut fbb);
        int.add_bitWidth(bits);
        int.add_is_signed(true);
        let int = int.finish();
        let mut field = ipc::FieldBuilder::new(&mut fbb);
        field.add_name(name);
        field.add_type_type(type_type);
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
        base64::engine::general_purpose::STANDARD.encode(fbb.finished_data())
    }

    #[test]
    fn an_arrow_schema_that_arrow_decodes_passes_and_one_it_would_panic_on_does_not() {
        let good = schema_of(ipc::Type::Int, 64);
        assert_eq!(check_arrow_schema(&good), Ok(()));
        let unknown_type = schema_of(ipc::Type(99), 64);
        let e = check_arrow_schema(&unknown_type).unwrap_err();
        assert!(e.contains("field \"x\": an unknown type 99"), "{e}");
        let odd_width = schema_of(ipc::Type::Int, 12);
        assert!(check_arrow_schema(&odd_width)
            .unwrap_err()
            .contains("integer width 12"));
        // A list without its child.
        let childless = schema_of(ipc::Type::List, 64);
        assert!(check_arrow_schema(&childless)
            .unwrap_err()
            .contains("0 children"));
        // Not base64, or not a message: parquet's own error, not ours.
        assert_eq!(check_arrow_schema("%%%"), Ok(()));
        assert_eq!(check_arrow_schema("AAAA"), Ok(()));
    }

    /// arrow-ipc's decoder, on what the check passes, does not panic (it would abort
    /// this test).
    #[test]
    fn what_the_check_passes_arrow_ipc_decodes() {
        use base64::Engine;
        for value in [schema_of(ipc::Type::Int, 8), schema_of(ipc::Type::Utf8, 0)] {
            assert_eq!(check_arrow_schema(&value), Ok(()));
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(&value)
                .unwrap();
            let message = ipc::root_as_message(&bytes).unwrap();
            let schema = ipc::convert::fb_to_schema(message.header_as_schema().unwrap());
            assert_eq!(schema.fields().len(), 1);
        }
    }
}
