//! Validation and normalisation of input measurements (the first step of a map task).
//!
//! Each input row is checked and turned into the job's normal form, written straight
//! into its partition's shuffle keys ([`crate::shuffle::key`]): source and destination
//! as network-order bytes (canonical: IPv4-mapped IPv6 is IPv4), the time in u64
//! seconds, the RTT as its 2-byte code (negative RTT = failed ping = no code). A row that
//! cannot be used is *rejected* with one reason ([`Reason`]); rejected rows keep their
//! original values for `rejects/`.
//!
//! Addresses repeat heavily, so each distinct string is parsed once: per dictionary
//! (Parquet's dictionary pages, read as Arrow dictionaries) and in a string cache that
//! outlives dictionaries.
//!
//! Accepted column types: strings (Utf8, LargeUtf8, Utf8View) for addresses; integers
//! (seconds) or timestamps (any unit) for `event_time`; floats or integers (ms) for
//! `rtt`; integers for `ip_version`.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Int32Type, Int64Type, TimeUnit};
use probeflow_reader::row::{addr, partition, RttCode};

use crate::error::{Result, WorkerError};
use crate::protocol::InputColumns;
use crate::shuffle;

/// Why an input row was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    NullSrcAddr,
    BadSrcAddr,
    NullDstAddr,
    BadDstAddr,
    NullIpVersion,
    BadIpVersion,
    VersionMismatch,
    NullEventTime,
    NegativeEventTime,
    NullRtt,
    NanRtt,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NullSrcAddr => "null_src_addr",
            Reason::BadSrcAddr => "bad_src_addr",
            Reason::NullDstAddr => "null_dst_addr",
            Reason::BadDstAddr => "bad_dst_addr",
            Reason::NullIpVersion => "null_ip_version",
            Reason::BadIpVersion => "bad_ip_version",
            Reason::VersionMismatch => "version_mismatch",
            Reason::NullEventTime => "null_event_time",
            Reason::NegativeEventTime => "negative_event_time",
            Reason::NullRtt => "null_rtt",
            Reason::NanRtt => "nan_rtt",
        }
    }
}

/// A parsed source: its key bytes, IP version and partition.
#[derive(Debug, Clone, Copy)]
struct Source {
    key: [u8; 17],
    version: u8,
    partition: u32,
}

/// A parsed destination: its key bytes and IP version.
#[derive(Debug, Clone, Copy)]
struct Destination {
    key: [u8; 17],
    version: u8,
}

/// Parsed addresses by their text. A worker keeps one across its map tasks: the same
/// sources and destinations appear in every input file.
#[derive(Default)]
pub struct AddressCache {
    shards: u32,
    src: FastMap<String, Option<Source>>,
    dst: FastMap<String, Option<Destination>>,
}

impl AddressCache {
    /// Ready for a job with `shards` partitions (a source's entry holds its partition).
    fn prepare(&mut self, shards: u32) {
        if self.shards != shards || self.src.len() > CACHE_LIMIT || self.dst.len() > CACHE_LIMIT {
            self.src.clear();
            self.dst.clear();
            self.shards = shards;
        }
    }
}

/// Validates batches of one input file, caching address parses (sources and
/// destinations repeat heavily).
pub struct Validator<'c> {
    file: String,
    columns: InputColumns,
    shards: u32,
    cache: &'c mut AddressCache,
    src_memo: Memo<Source>,
    dst_memo: Memo<Destination>,
}

/// An address column: plain strings, or dictionary-encoded strings (as Parquet stores
/// repetitive columns), whose distinct values are parsed once.
enum Strings {
    Plain(StringArray),
    Dict(Int32Array, StringArray, ArrayRef),
}

/// Parse results per dictionary value, kept while consecutive batches share a dictionary.
struct Memo<T> {
    values: Option<ArrayRef>,
    results: Vec<Option<Option<T>>>,
}

impl<T> Default for Memo<T> {
    fn default() -> Self {
        Memo {
            values: None,
            results: Vec::new(),
        }
    }
}

impl<T: Copy> Memo<T> {
    fn use_dictionary(&mut self, values: &ArrayRef) {
        let same = self.values.as_ref().is_some_and(|v| Arc::ptr_eq(v, values));
        if !same {
            self.values = Some(values.clone());
            self.results.clear();
            self.results.resize(values.len(), None);
        }
    }

    fn get(&mut self, key: usize, text: &str, parse: impl FnOnce(&str) -> Option<T>) -> Option<T> {
        match self.results.get(key) {
            Some(Some(hit)) => *hit,
            _ => {
                let r = parse(text);
                if let Some(slot) = self.results.get_mut(key) {
                    *slot = Some(r);
                }
                r
            }
        }
    }
}

/// Looks up row `i` of an address column: `Err(true)` for null, `Err(false)` for unparsable.
fn lookup<T: Copy>(
    column: &Strings,
    i: usize,
    memo: &mut Memo<T>,
    cache: &mut FastMap<String, Option<T>>,
    parse: impl FnOnce(&str) -> Option<T>,
) -> std::result::Result<T, bool> {
    match column {
        Strings::Plain(a) => {
            if a.is_null(i) {
                return Err(true);
            }
            let text = a.value(i);
            let r = match cache.get(text) {
                Some(hit) => *hit,
                None => {
                    let r = parse(text);
                    cache.insert(text.to_string(), r);
                    r
                }
            };
            r.ok_or(false)
        }
        Strings::Dict(keys, values, _) => {
            if keys.is_null(i) {
                return Err(true);
            }
            let k = keys.value(i) as usize;
            if k >= values.len() || values.is_null(k) {
                return Err(true);
            }
            // A dictionary value not seen in this dictionary yet: the string cache (which
            // outlives dictionaries) before parsing.
            memo.get(k, values.value(k), |text| match cache.get(text) {
                Some(hit) => *hit,
                None => {
                    let r = parse(text);
                    cache.insert(text.to_string(), r);
                    r
                }
            })
            .ok_or(false)
        }
    }
}

const CACHE_LIMIT: usize = 1 << 20;

/// Address caches are hit for every input row: a fast (non-DoS-resistant) hash.
type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

impl<'c> Validator<'c> {
    pub fn new(
        file: String,
        columns: InputColumns,
        shards: u32,
        cache: &'c mut AddressCache,
    ) -> Self {
        cache.prepare(shards);
        Validator {
            file,
            columns,
            shards,
            cache,
            src_memo: Memo::default(),
            dst_memo: Memo::default(),
        }
    }

    fn column(&self, batch: &RecordBatch, name: &str) -> Result<ArrayRef> {
        batch
            .column_by_name(name)
            .cloned()
            .ok_or_else(|| WorkerError::Schema {
                file: self.file.clone(),
                what: format!("no column {name:?}"),
            })
    }

    fn as_strings(&self, a: &ArrayRef, name: &str) -> Result<Strings> {
        match a.data_type() {
            DataType::Dictionary(k, v) if **k == DataType::Int32 && **v == DataType::Utf8 => {
                let d = a.as_dictionary::<Int32Type>();
                let values = d.values().clone();
                let strings = values.as_string::<i32>().clone();
                Ok(Strings::Dict(d.keys().clone(), strings, values))
            }
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Ok(Strings::Plain(
                cast(a, &DataType::Utf8)?.as_string::<i32>().clone(),
            )),
            t => Err(WorkerError::Schema {
                file: self.file.clone(),
                what: format!("column {name:?} is {t}, expected a string type"),
            }),
        }
    }

    /// Event times as Int64 and the divisor that turns them into seconds.
    fn as_i64(&self, a: &ArrayRef, name: &str) -> Result<(ArrayRef, i64)> {
        match a.data_type() {
            DataType::Timestamp(unit, _) => {
                let d = match unit {
                    TimeUnit::Second => 1,
                    TimeUnit::Millisecond => 1_000,
                    TimeUnit::Microsecond => 1_000_000,
                    TimeUnit::Nanosecond => 1_000_000_000,
                };
                Ok((cast(a, &DataType::Int64)?, d))
            }
            t if t.is_integer() => Ok((cast(a, &DataType::Int64)?, 1)),
            t => Err(WorkerError::Schema {
                file: self.file.clone(),
                what: format!("column {name:?} is {t}, expected integers or timestamps"),
            }),
        }
    }

    fn as_f64(&self, a: &ArrayRef, name: &str) -> Result<ArrayRef> {
        let t = a.data_type();
        if !(t.is_floating() || t.is_integer()) {
            return Err(WorkerError::Schema {
                file: self.file.clone(),
                what: format!("column {name:?} is {t}, expected numbers"),
            });
        }
        Ok(cast(a, &DataType::Float64)?)
    }

    /// Validates one batch: appends the shuffle key of every valid row to
    /// `keys[partition]` and returns the indices and reasons of rejected rows.
    pub fn validate(
        &mut self,
        batch: &RecordBatch,
        keys: &mut [Vec<u8>],
    ) -> Result<Vec<(u32, Reason)>> {
        let c = self.columns.clone();
        let src = self.as_strings(&self.column(batch, &c.src_addr)?, &c.src_addr)?;
        let dst = self.as_strings(&self.column(batch, &c.dst_addr)?, &c.dst_addr)?;
        let (times, divisor) = self.as_i64(&self.column(batch, &c.event_time)?, &c.event_time)?;
        let times = times.as_primitive::<Int64Type>();
        let version = {
            let a = self.column(batch, &c.ip_version)?;
            if !a.data_type().is_integer() {
                return Err(WorkerError::Schema {
                    file: self.file.clone(),
                    what: format!(
                        "column {:?} is {}, expected integers",
                        c.ip_version,
                        a.data_type()
                    ),
                });
            }
            cast(&a, &DataType::Int64)?
        };
        let version = version.as_primitive::<Int64Type>();
        let rtt = self.as_f64(&self.column(batch, &c.rtt)?, &c.rtt)?;
        let rtt = rtt.as_primitive::<Float64Type>();
        if keys.len() != self.shards as usize {
            return Err(WorkerError::Schema {
                file: self.file.clone(),
                what: format!("{} key buffers for {} shards", keys.len(), self.shards),
            });
        }

        if let Strings::Dict(_, _, values) = &src {
            self.src_memo.use_dictionary(values);
        }
        if let Strings::Dict(_, _, values) = &dst {
            self.dst_memo.use_dictionary(values);
        }
        let mut rejects = Vec::new();
        let columns = Columns {
            src: &src,
            dst: &dst,
            times,
            divisor,
            version,
            rtt,
        };
        for i in 0..batch.num_rows() {
            match self.row(&columns, i) {
                Ok((partition, key)) => keys[partition as usize].extend_from_slice(&key),
                Err(reason) => rejects.push((i as u32, reason)),
            }
        }
        self.cache.prepare(self.shards);
        Ok(rejects)
    }

    #[inline]
    fn row(
        &mut self,
        c: &Columns<'_>,
        i: usize,
    ) -> std::result::Result<(u32, [u8; shuffle::KEY_LEN]), Reason> {
        let shards = self.shards;
        let src = lookup(c.src, i, &mut self.src_memo, &mut self.cache.src, |t| {
            let a = addr::parse_addr(t).ok()?;
            let partition = partition(&a, shards).ok()?;
            Some(Source {
                key: shuffle::addr_key(&a),
                version: addr::ip_version(&a),
                partition,
            })
        })
        .map_err(|null| {
            if null {
                Reason::NullSrcAddr
            } else {
                Reason::BadSrcAddr
            }
        })?;
        let dst = lookup(c.dst, i, &mut self.dst_memo, &mut self.cache.dst, |t| {
            let a = addr::parse_addr(t).ok()?;
            Some(Destination {
                key: shuffle::addr_key(&a),
                version: addr::ip_version(&a),
            })
        })
        .map_err(|null| {
            if null {
                Reason::NullDstAddr
            } else {
                Reason::BadDstAddr
            }
        })?;
        if c.version.is_null(i) {
            return Err(Reason::NullIpVersion);
        }
        let v = c.version.value(i);
        if v != 4 && v != 6 {
            return Err(Reason::BadIpVersion);
        }
        if i64::from(src.version) != v || i64::from(dst.version) != v {
            return Err(Reason::VersionMismatch);
        }
        if c.times.is_null(i) {
            return Err(Reason::NullEventTime);
        }
        let t = c.times.value(i).div_euclid(c.divisor);
        let event_time = u64::try_from(t).map_err(|_| Reason::NegativeEventTime)?;
        if c.rtt.is_null(i) {
            return Err(Reason::NullRtt);
        }
        let code = RttCode::from_ms(c.rtt.value(i)).map_err(|_| Reason::NanRtt)?;
        Ok((
            src.partition,
            shuffle::key(&src.key, event_time, &dst.key, code),
        ))
    }
}

/// The columns of one batch, as the row check reads them.
struct Columns<'a> {
    src: &'a Strings,
    dst: &'a Strings,
    times: &'a Int64Array,
    divisor: i64,
    version: &'a Int64Array,
    rtt: &'a Float64Array,
}

/// The rejected rows of `batch` (original columns) plus a `reason` column.
pub fn rejects_batch(batch: &RecordBatch, rejects: &[(u32, Reason)]) -> Result<RecordBatch> {
    let idx = arrow::array::UInt32Array::from_iter_values(rejects.iter().map(|(i, _)| *i));
    // Dictionary-encoded strings (how the scan reads addresses) go back to plain strings.
    let plain = |c: &ArrayRef| -> std::result::Result<ArrayRef, arrow::error::ArrowError> {
        let taken = arrow::compute::take(c, &idx, None)?;
        match taken.data_type() {
            DataType::Dictionary(_, v) => cast(&taken, v),
            _ => Ok(taken),
        }
    };
    let mut columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(plain)
        .collect::<std::result::Result<_, _>>()?;
    let mut fields: Vec<arrow::datatypes::FieldRef> = batch
        .schema()
        .fields()
        .iter()
        .zip(&columns)
        .map(|(f, c)| Arc::new(f.as_ref().clone().with_data_type(c.data_type().clone())))
        .collect();
    columns.push(Arc::new(StringArray::from_iter_values(
        rejects.iter().map(|(_, r)| r.as_str()),
    )));
    fields.push(Arc::new(arrow::datatypes::Field::new(
        "reason",
        DataType::Utf8,
        false,
    )));
    Ok(RecordBatch::try_new(
        Arc::new(arrow::datatypes::Schema::new(fields)),
        columns,
    )?)
}
