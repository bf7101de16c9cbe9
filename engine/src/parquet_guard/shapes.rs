//! What parquet 59 reads each field of the Thrift structures it decodes from a file
//! as (`parquet.thrift`, as `parquet::file::metadata::thrift` and `page_index` read it).
//!
//! parquet reads a field whose id it knows by the shape its schema gives, whatever type
//! the bytes declare, and skips a field it does not know by the declared type. The
//! guard walks by the declared type, so it refuses a known field declared of another
//! type: otherwise it would read other bytes than parquet does (a compressed page size
//! declared a bool, which has no payload, is read by parquet from the bytes after it).
//! The fields parquet 59 skips (without its `encryption` feature: `FileMetaData` 8–9,
//! `ColumnChunk` 8–9; `ColumnMetaData` 3 and 8; `RowGroup` 6) are left out.

use super::kind;

/// How parquet reads a field or a list's elements.
#[derive(Clone, Copy, Debug)]
pub(super) enum Shape {
    /// i16, i32, i64 and enums: one zigzag varint (parquet truncates it to its width).
    Int,
    /// i8: one byte.
    Byte,
    /// A bool: a field's value is its type, a list element a byte.
    Bool,
    Double,
    /// binary and string: a length, then its bytes.
    Binary,
    List(&'static Shape),
    Struct(&'static Struct),
}

/// A Thrift struct (or union) parquet reads: its known fields by id.
#[derive(Debug)]
pub(super) struct Struct {
    pub(super) name: &'static str,
    fields: &'static [(i16, Shape)],
}

impl Struct {
    /// How parquet reads field `id`, if it reads it.
    pub(super) fn field(&self, id: i16) -> Option<Shape> {
        self.fields
            .iter()
            .find(|(known, _)| *known == id)
            .map(|&(_, shape)| shape)
    }
}

impl Shape {
    /// Whether bytes of the declared compact type `t` are what parquet reads as this.
    pub(super) fn accepts(self, t: u8) -> bool {
        match self {
            Int => matches!(t, kind::I16 | kind::I32 | kind::I64),
            Byte => t == kind::BYTE,
            Bool => matches!(t, kind::TRUE | kind::FALSE),
            Double => t == kind::DOUBLE,
            Binary => t == kind::BINARY,
            Shape::List(_) => matches!(t, kind::LIST | kind::SET),
            Shape::Struct(_) => t == kind::STRUCT,
        }
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            Int => "an integer",
            Byte => "a byte",
            Bool => "a bool",
            Double => "a double",
            Binary => "a binary",
            Shape::List(_) => "a list",
            Shape::Struct(s) => s.name,
        }
    }
}

/// A struct parquet skips (an unknown field's), or reads with no fields of its own.
pub(super) const UNKNOWN: Struct = Struct {
    name: "a struct",
    fields: &[],
};

const fn empty(name: &'static str) -> Struct {
    Struct { name, fields: &[] }
}

/// A list of `$s` structs.
macro_rules! list_of {
    ($s:ident) => {
        Shape::List(&Shape::Struct(&$s))
    };
}

use Shape::{Binary, Bool, Byte, Double, Int};

pub(super) const FILE_META_DATA: Struct = Struct {
    name: "FileMetaData",
    fields: &[
        (1, Int),
        (2, list_of!(SCHEMA_ELEMENT)),
        (3, Int),
        (4, list_of!(ROW_GROUP)),
        (5, list_of!(KEY_VALUE)),
        (6, Binary),
        (7, list_of!(COLUMN_ORDER)),
    ],
};

pub(super) const SCHEMA_ELEMENT: Struct = Struct {
    name: "SchemaElement",
    fields: &[
        (1, Int),
        (2, Int),
        (3, Int),
        (4, Binary),
        (5, Int),
        (6, Int),
        (7, Int),
        (8, Int),
        (9, Int),
        (10, Shape::Struct(&LOGICAL_TYPE)),
    ],
};

const EMPTY_TYPE: Struct = empty("an empty logical type");

const LOGICAL_TYPE: Struct = Struct {
    name: "LogicalType",
    fields: &[
        (1, Shape::Struct(&EMPTY_TYPE)),
        (2, Shape::Struct(&EMPTY_TYPE)),
        (3, Shape::Struct(&EMPTY_TYPE)),
        (4, Shape::Struct(&EMPTY_TYPE)),
        (5, Shape::Struct(&DECIMAL_TYPE)),
        (6, Shape::Struct(&EMPTY_TYPE)),
        (7, Shape::Struct(&TIMESTAMP_TYPE)),
        (8, Shape::Struct(&TIMESTAMP_TYPE)),
        (10, Shape::Struct(&INT_TYPE)),
        (11, Shape::Struct(&EMPTY_TYPE)),
        (12, Shape::Struct(&EMPTY_TYPE)),
        (13, Shape::Struct(&EMPTY_TYPE)),
        (14, Shape::Struct(&EMPTY_TYPE)),
        (15, Shape::Struct(&EMPTY_TYPE)),
        (16, Shape::Struct(&VARIANT_TYPE)),
        (17, Shape::Struct(&GEOMETRY_TYPE)),
        (18, Shape::Struct(&GEOGRAPHY_TYPE)),
    ],
};

const DECIMAL_TYPE: Struct = Struct {
    name: "DecimalType",
    fields: &[(1, Int), (2, Int)],
};

/// `TimeType` and `TimestampType` (parquet reads both as one).
const TIMESTAMP_TYPE: Struct = Struct {
    name: "TimestampType",
    fields: &[(1, Bool), (2, Shape::Struct(&TIME_UNIT))],
};

const EMPTY_UNIT: Struct = empty("an empty time unit");

const TIME_UNIT: Struct = Struct {
    name: "TimeUnit",
    fields: &[
        (1, Shape::Struct(&EMPTY_UNIT)),
        (2, Shape::Struct(&EMPTY_UNIT)),
        (3, Shape::Struct(&EMPTY_UNIT)),
    ],
};

const INT_TYPE: Struct = Struct {
    name: "IntType",
    fields: &[(1, Byte), (2, Bool)],
};

const VARIANT_TYPE: Struct = Struct {
    name: "VariantType",
    fields: &[(1, Byte)],
};

const GEOMETRY_TYPE: Struct = Struct {
    name: "GeometryType",
    fields: &[(1, Binary)],
};

const GEOGRAPHY_TYPE: Struct = Struct {
    name: "GeographyType",
    fields: &[(1, Binary), (2, Int)],
};

const ROW_GROUP: Struct = Struct {
    name: "RowGroup",
    fields: &[
        (1, list_of!(COLUMN_CHUNK)),
        (2, Int),
        (3, Int),
        (4, list_of!(SORTING_COLUMN)),
        (5, Int),
        (7, Int),
    ],
};

const COLUMN_CHUNK: Struct = Struct {
    name: "ColumnChunk",
    fields: &[
        (1, Binary),
        (2, Int),
        (3, Shape::Struct(&COLUMN_META_DATA)),
        (4, Int),
        (5, Int),
        (6, Int),
        (7, Int),
    ],
};

const COLUMN_META_DATA: Struct = Struct {
    name: "ColumnMetaData",
    fields: &[
        (1, Int),
        (2, Shape::List(&Int)),
        (4, Int),
        (5, Int),
        (6, Int),
        (7, Int),
        (9, Int),
        (10, Int),
        (11, Int),
        (12, Shape::Struct(&STATISTICS)),
        (13, list_of!(PAGE_ENCODING_STATS)),
        (14, Int),
        (15, Int),
        (16, Shape::Struct(&SIZE_STATISTICS)),
        (17, Shape::Struct(&GEOSPATIAL_STATISTICS)),
    ],
};

/// A column chunk's and a page header's statistics.
const STATISTICS: Struct = Struct {
    name: "Statistics",
    fields: &[
        (1, Binary),
        (2, Binary),
        (3, Int),
        (4, Int),
        (5, Binary),
        (6, Binary),
        (7, Bool),
        (8, Bool),
    ],
};

const SIZE_STATISTICS: Struct = Struct {
    name: "SizeStatistics",
    fields: &[(1, Int), (2, Shape::List(&Int)), (3, Shape::List(&Int))],
};

const GEOSPATIAL_STATISTICS: Struct = Struct {
    name: "GeospatialStatistics",
    fields: &[(1, Shape::Struct(&BOUNDING_BOX)), (2, Shape::List(&Int))],
};

const BOUNDING_BOX: Struct = Struct {
    name: "BoundingBox",
    fields: &[
        (1, Double),
        (2, Double),
        (3, Double),
        (4, Double),
        (5, Double),
        (6, Double),
        (7, Double),
        (8, Double),
    ],
};

const KEY_VALUE: Struct = Struct {
    name: "KeyValue",
    fields: &[(1, Binary), (2, Binary)],
};

const SORTING_COLUMN: Struct = Struct {
    name: "SortingColumn",
    fields: &[(1, Int), (2, Bool), (3, Bool)],
};

const PAGE_ENCODING_STATS: Struct = Struct {
    name: "PageEncodingStats",
    fields: &[(1, Int), (2, Int), (3, Int)],
};

const EMPTY_ORDER: Struct = empty("an empty column order");

const COLUMN_ORDER: Struct = Struct {
    name: "ColumnOrder",
    fields: &[(1, Shape::Struct(&EMPTY_ORDER))],
};

pub(super) const PAGE_HEADER: Struct = Struct {
    name: "PageHeader",
    fields: &[
        (1, Int),
        (2, Int),
        (3, Int),
        (4, Int),
        (5, Shape::Struct(&DATA_PAGE_HEADER)),
        (6, Shape::Struct(&INDEX_PAGE_HEADER)),
        (7, Shape::Struct(&DICTIONARY_PAGE_HEADER)),
        (8, Shape::Struct(&DATA_PAGE_HEADER_V2)),
    ],
};

const DATA_PAGE_HEADER: Struct = Struct {
    name: "DataPageHeader",
    fields: &[
        (1, Int),
        (2, Int),
        (3, Int),
        (4, Int),
        (5, Shape::Struct(&STATISTICS)),
    ],
};

const INDEX_PAGE_HEADER: Struct = empty("IndexPageHeader");

pub(super) const DICTIONARY_PAGE_HEADER: Struct = Struct {
    name: "DictionaryPageHeader",
    fields: &[(1, Int), (2, Int), (3, Bool)],
};

pub(super) const DATA_PAGE_HEADER_V2: Struct = Struct {
    name: "DataPageHeaderV2",
    fields: &[
        (1, Int),
        (2, Int),
        (3, Int),
        (4, Int),
        (5, Int),
        (6, Int),
        (7, Bool),
        (8, Shape::Struct(&STATISTICS)),
    ],
};

pub(super) const OFFSET_INDEX: Struct = Struct {
    name: "OffsetIndex",
    fields: &[(1, list_of!(PAGE_LOCATION)), (2, Shape::List(&Int))],
};

const PAGE_LOCATION: Struct = Struct {
    name: "PageLocation",
    fields: &[(1, Int), (2, Int), (3, Int)],
};
