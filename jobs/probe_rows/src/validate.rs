//! Validation and normalisation of input measurements (the first step of a map task).
//!
//! Each input row is checked and turned into the job's normal form, written straight
//! into its partition's shuffle records ([`super::key::PartitionedRecords`]): source and destination
//! as network-order bytes (canonical: IPv4-mapped IPv6 is IPv4), the time in u64
//! seconds, the RTT as its 2-byte code (negative RTT = failed ping = no code). A row that
//! cannot be used is *rejected* with one reason ([`Reason`]); rejected rows keep their
//! original values for `rejects/`.
//!
//! Addresses repeat heavily, so each distinct string is parsed once: a dictionary
//! (Parquet's dictionary pages, read as Arrow dictionaries where a file's pages are
//! dictionary-encoded throughout) or a plain batch is resolved
//! in one pass before its rows, sources through the worker's
//! [`super::source_table::SourceTable`] and destinations through a text cache, both
//! outliving dictionaries and tasks.
//!
//! Accepted column types: strings (Utf8, LargeUtf8, Utf8View) for addresses; integers
//! (seconds) or timestamps (any unit) for `event_time`; floats or integers (ms) for
//! `rtt`; integers for `ip_version`.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Int32Type, Int64Type};
use probeflow_reader::row::{addr, partition, RttCode};

use super::key;
use super::protocol::{InputColumns, Plausible, TimeUnit};
use super::scope::{self, LocalSources};
use super::source_table::{SourceTable, TextKey};
use probeflow_engine::error::{EngineError, Result};

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
    /// Outside the job's plausible window (wrong unit, placeholder dates, far future).
    ImplausibleEventTime,
    /// `+inf` or `-inf`.
    InfiniteRtt,
    /// Above the job's RTT ceiling.
    ImplausibleRtt,
    // RIPE Atlas results ([`crate::atlas`]): a line, a result, or a packet entry.
    /// Not a JSON object (or not UTF-8).
    MalformedLine,
    /// Longer than [`crate::atlas::lines::MAX_LINE_BYTES`].
    LineTooLong,
    /// A JSON object without `timestamp`, `msm_id`, `prb_id`, `fw` and `type`, or with a
    /// `fw` that is no integer.
    NotAnAtlasResult,
    /// An Atlas result of another type (traceroute, dns, …).
    NotAPing,
    /// A `timestamp` that is not a number.
    BadTimestamp,
    /// A ping result without packet entries (firmware 0–1 results, empty `result`).
    NoPackets,
    /// A `result` that is not a list of objects, or a reply whose `rtt` is no number.
    MalformedResult,
    /// Neither `from` nor the source address is a global address.
    NoPublicSource,
    /// A late reply the probe also counted as a timeout (`"dup"`).
    Duplicate,
    /// A packet entry that is an error (`{"error": …}`).
    PacketError,
    /// A packet entry that is no reply, timeout, duplicate or error.
    UnknownPacket,
    /// A reply with a negative `rtt`.
    NegativeRtt,
}

impl Reason {
    pub const ALL: [Reason; 26] = [
        Reason::NullSrcAddr,
        Reason::BadSrcAddr,
        Reason::NullDstAddr,
        Reason::BadDstAddr,
        Reason::NullIpVersion,
        Reason::BadIpVersion,
        Reason::VersionMismatch,
        Reason::NullEventTime,
        Reason::NegativeEventTime,
        Reason::NullRtt,
        Reason::NanRtt,
        Reason::ImplausibleEventTime,
        Reason::InfiniteRtt,
        Reason::ImplausibleRtt,
        Reason::MalformedLine,
        Reason::LineTooLong,
        Reason::NotAnAtlasResult,
        Reason::NotAPing,
        Reason::BadTimestamp,
        Reason::NoPackets,
        Reason::MalformedResult,
        Reason::NoPublicSource,
        Reason::Duplicate,
        Reason::PacketError,
        Reason::UnknownPacket,
        Reason::NegativeRtt,
    ];

    /// The fixed label of the reason a result names (a metric label); `"unknown"` for a
    /// name this release does not give.
    pub fn label(name: &str) -> &'static str {
        probeflow_engine::kind::reason_label(Self::ALL.map(Reason::as_str), name)
    }

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
            Reason::ImplausibleEventTime => "implausible_event_time",
            Reason::InfiniteRtt => "infinite_rtt",
            Reason::ImplausibleRtt => "implausible_rtt",
            Reason::MalformedLine => "malformed_line",
            Reason::LineTooLong => "line_too_long",
            Reason::NotAnAtlasResult => "not_an_atlas_result",
            Reason::NotAPing => "not_a_ping",
            Reason::BadTimestamp => "bad_timestamp",
            Reason::NoPackets => "no_packets",
            Reason::MalformedResult => "malformed_result",
            Reason::NoPublicSource => "no_public_source",
            Reason::Duplicate => "duplicate",
            Reason::PacketError => "packet_error",
            Reason::UnknownPacket => "unknown_packet",
            Reason::NegativeRtt => "negative_rtt",
        }
    }
}

/// A parsed source: its key bytes, IP version, whether it is of a local scope
/// ([`super::scope`]) and its partition.
#[derive(Debug, Clone, Copy)]
pub(super) struct Source {
    pub(super) key: [u8; 17],
    pub(super) version: u8,
    pub(super) local: bool,
    pub(super) partition: u32,
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
    src: SourceTable,
    dst: TextMap<Destination>,
}

impl AddressCache {
    /// Ready for a job with `shards` partitions (a source's entry holds its partition),
    /// holding at most `limit` addresses ([`cache_limit`]): past it, both tables start
    /// again empty (their memory given back).
    fn prepare(&mut self, shards: u32, limit: usize) {
        if self.shards != shards || self.src.len() + self.dst.len() > limit {
            self.src.clear();
            self.dst = TextMap::default();
            self.shards = shards;
        }
    }
}

/// The most memory an address in the cache takes: a source's slot is 64 bytes in a
/// table at most three quarters full, which doubles when it fills (the old table and
/// the new one, four times as many slots as sources, for a moment); a destination's
/// entry in its map as much.
const CACHE_ENTRY_BYTES: usize = 256;

/// The most addresses a worker's cache keeps from one map task to the next with
/// `memory` bytes per task: a quarter of it (64 MiB: 65 536 addresses), at most
/// [`CACHE_LIMIT`] and at least [`CACHE_MIN`].
pub fn cache_limit(memory: usize) -> usize {
    (memory / 4 / CACHE_ENTRY_BYTES).clamp(CACHE_MIN, CACHE_LIMIT)
}

/// The address of a dotted-quad IPv4 text as the standard parser reads it (four decimal
/// octets up to 255, without leading zeros, and nothing else), which is also its
/// canonical text; `None` for any other text, which the standard parser then reads.
/// Most addresses in measurements are such texts: reading them here costs a few
/// nanoseconds and no lookup in a table the size of the probe population.
fn dotted_quad(text: &str) -> Option<u32> {
    let bytes = text.as_bytes();
    if bytes.len() < 7 || bytes.len() > 15 {
        return None;
    }
    let mut addr = 0u32;
    let mut octets = 0;
    for part in bytes.split(|&b| b == b'.') {
        if octets == 4 || part.is_empty() || part.len() > 3 || (part.len() > 1 && part[0] == b'0') {
            return None;
        }
        let mut octet = 0u32;
        for &d in part {
            if !d.is_ascii_digit() {
                return None;
            }
            octet = octet * 10 + u32::from(d - b'0');
        }
        if octet > 255 {
            return None;
        }
        addr = addr << 8 | octet;
        octets += 1;
    }
    (octets == 4).then_some(addr)
}

/// The key bytes of an IPv4 address given as a number.
fn v4_key(addr: u32) -> [u8; 17] {
    key::addr_key(&std::net::IpAddr::from(addr.to_be_bytes()))
}

/// `text` read as a destination: a dotted quad directly, any other text through the
/// text cache.
fn resolve_destination(cache: &mut TextMap<Destination>, text: &str) -> Option<Destination> {
    match dotted_quad(text) {
        Some(addr) => Some(Destination {
            key: v4_key(addr),
            version: 4,
        }),
        None => cached(cache, text, parse_destination),
    }
}

/// Parse results by address text (`None`: the text is not an address).
type TextMap<T> = FastMap<TextKey, Option<T>>;

/// `text` parsed, from `cache` if it was parsed before.
fn cached<T: Copy>(
    cache: &mut TextMap<T>,
    text: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Option<T> {
    let Some(key) = TextKey::of(text) else {
        return parse(text);
    };
    *cache.entry(key).or_insert_with(|| parse(text))
}

/// `text` read as a source: a dotted quad directly, any other text by the standard
/// parser; its partition from the hash of its canonical text.
fn parse_source(text: &str, shards: u32) -> Option<Source> {
    let a = match dotted_quad(text) {
        Some(v4) => std::net::IpAddr::from(v4.to_be_bytes()),
        None => addr::parse_addr(text).ok()?,
    };
    let partition = partition(&a, shards).ok()?;
    Some(Source {
        key: key::addr_key(&a),
        version: addr::ip_version(&a),
        local: scope::local_scope(a).is_some(),
        partition,
    })
}

fn parse_destination(text: &str) -> Option<Destination> {
    let a = addr::parse_addr(text).ok()?;
    Some(Destination {
        key: key::addr_key(&a),
        version: addr::ip_version(&a),
    })
}

/// Validates batches of one input file, caching address parses (sources and
/// destinations repeat heavily).
pub struct Validator<'c> {
    file: String,
    columns: InputColumns,
    shards: u32,
    plausible: Plausible,
    /// The first integer event time rejected as implausible, raw (for the unit hint).
    first_implausible_time: Option<i64>,
    /// Valid rows by whether their source is of a local scope.
    local_sources: LocalSources,
    cache: &'c mut AddressCache,
    /// The most addresses `cache` keeps ([`cache_limit`]).
    cache_limit: usize,
    src_memo: Memo<Source>,
    dst_memo: Memo<Destination>,
}

/// An address column: plain strings, or dictionary-encoded strings (as Parquet stores
/// repetitive columns), whose distinct values are parsed once.
enum Strings {
    Plain(StringArray),
    Dict(Int32Array, StringArray, ArrayRef),
}

/// A dictionary value resolved: null, not an address, or the parsed address.
#[derive(Clone, Copy)]
enum Resolved<T> {
    Null,
    Bad,
    Valid(T),
}

/// Every value of the current dictionary resolved, kept while consecutive batches share
/// the dictionary. A new dictionary (one per Parquet row group) is resolved whole, in one
/// pass over its values, before its rows: the cache lookups of that pass do not wait on
/// one another, as lookups interleaved with the rows' other work would.
struct Memo<T> {
    values: Option<ArrayRef>,
    resolved: Vec<Resolved<T>>,
    /// The parses of the values being resolved (kept: its memory is reused).
    parsed: Vec<Option<T>>,
    /// Dictionaries (or plain batches) resolved so far.
    resolutions: u64,
}

impl<T> Default for Memo<T> {
    fn default() -> Self {
        Memo {
            values: None,
            resolved: Vec::new(),
            parsed: Vec::new(),
            resolutions: 0,
        }
    }
}

impl<T: Copy> Memo<T> {
    /// Resolves `strings`, the values of dictionary `values`, unless they are the
    /// dictionary resolved last: `resolve` gives the parse of every value, in order.
    ///
    /// The Parquet reader gives every batch of a row group a new values array over the
    /// column chunk's one dictionary: the same buffers, a new `Arc`. So a dictionary is
    /// known by its buffers (`ArrayData::ptr_eq`): a row group of a million rows read
    /// in batches of 128 Ki rows has its dictionary, up to a million texts, resolved
    /// once, not eight times. The dictionary resolved last is kept (`self.values`), so
    /// its buffers cannot be freed and their addresses reused by another one.
    fn use_dictionary(
        &mut self,
        values: &ArrayRef,
        strings: &StringArray,
        resolve: impl FnOnce(&StringArray, &mut Vec<Option<T>>),
    ) {
        if self
            .values
            .as_ref()
            .is_some_and(|v| Arc::ptr_eq(v, values) || v.to_data().ptr_eq(&values.to_data()))
        {
            return;
        }
        self.values = Some(values.clone());
        self.resolve(strings, resolve);
    }

    /// Resolves `strings`, a batch's plain column, row by row (in one pass, as a
    /// dictionary is).
    fn use_rows(
        &mut self,
        strings: &StringArray,
        resolve: impl FnOnce(&StringArray, &mut Vec<Option<T>>),
    ) {
        self.values = None;
        self.resolve(strings, resolve);
    }

    fn resolve(
        &mut self,
        strings: &StringArray,
        resolve: impl FnOnce(&StringArray, &mut Vec<Option<T>>),
    ) {
        self.resolutions += 1;
        let mut parsed = std::mem::take(&mut self.parsed);
        parsed.clear();
        resolve(strings, &mut parsed);
        self.resolved.clear();
        self.resolved
            .extend(parsed.drain(..).enumerate().map(|(k, p)| match p {
                _ if strings.is_null(k) => Resolved::Null,
                Some(t) => Resolved::Valid(t),
                None => Resolved::Bad,
            }));
        self.parsed = parsed;
    }
}

/// Looks up row `i` of an address column: `Err(true)` for null, `Err(false)` for unparsable.
#[inline]
fn lookup<'m, T>(
    column: &Strings,
    i: usize,
    memo: &'m Memo<T>,
) -> std::result::Result<&'m T, bool> {
    let resolved = match column {
        Strings::Plain(_) => i,
        Strings::Dict(keys, _, _) => {
            if keys.is_null(i) {
                return Err(true);
            }
            keys.value(i) as usize
        }
    };
    match memo.resolved.get(resolved) {
        Some(Resolved::Valid(t)) => Ok(t),
        Some(Resolved::Bad) => Err(false),
        Some(Resolved::Null) | None => Err(true),
    }
}

/// See [`cache_limit`].
const CACHE_LIMIT: usize = 1 << 20;
/// See [`cache_limit`].
const CACHE_MIN: usize = 1 << 12;

/// Address caches are hit for every input row: a fast (non-DoS-resistant) hash.
type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

impl<'c> Validator<'c> {
    pub fn new(
        file: String,
        columns: InputColumns,
        shards: u32,
        plausible: Plausible,
        cache: &'c mut AddressCache,
        cache_limit: usize,
    ) -> Self {
        cache.prepare(shards, cache_limit);
        Validator {
            file,
            columns,
            shards,
            cache_limit,
            plausible,
            first_implausible_time: None,
            local_sources: LocalSources::default(),
            cache,
            src_memo: Memo::default(),
            dst_memo: Memo::default(),
        }
    }

    fn column(&self, batch: &RecordBatch, name: &str) -> Result<ArrayRef> {
        batch
            .column_by_name(name)
            .cloned()
            .ok_or_else(|| EngineError::Schema {
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
            t => Err(EngineError::Schema {
                file: self.file.clone(),
                what: format!("column {name:?} is {t}, expected a string type"),
            }),
        }
    }

    /// Event times as Int64, the divisor that turns them into seconds, and whether they
    /// are plain integers (whose unit the job file sets).
    fn as_i64(&self, a: &ArrayRef, name: &str) -> Result<(ArrayRef, i64, bool)> {
        match a.data_type() {
            DataType::Timestamp(unit, _) => Ok((
                cast(a, &DataType::Int64)?,
                TimeUnit::of_arrow(unit).per_second(),
                false,
            )),
            t if t.is_integer() => Ok((
                cast(a, &DataType::Int64)?,
                self.plausible.time_unit.per_second(),
                true,
            )),
            t => Err(EngineError::Schema {
                file: self.file.clone(),
                what: format!("column {name:?} is {t}, expected integers or timestamps"),
            }),
        }
    }

    fn as_f64(&self, a: &ArrayRef, name: &str) -> Result<ArrayRef> {
        let t = a.data_type();
        if !(t.is_floating() || t.is_integer()) {
            return Err(EngineError::Schema {
                file: self.file.clone(),
                what: format!("column {name:?} is {t}, expected numbers"),
            });
        }
        Ok(cast(a, &DataType::Float64)?)
    }

    /// The source and destination dictionaries (or plain batches) resolved so far.
    pub fn resolutions(&self) -> (u64, u64) {
        (self.src_memo.resolutions, self.dst_memo.resolutions)
    }

    /// The valid rows so far, by whether their source is of a local scope.
    pub fn local_sources(&self) -> &LocalSources {
        &self.local_sources
    }

    /// What to tell a user whose rows are mostly outside the event-time window: the
    /// `time_unit` under which the first rejected integer time would have been
    /// plausible, if there is one.
    pub fn time_unit_hint(&self) -> String {
        let p = &self.plausible;
        let window = format!(
            "the plausible window is {}..={} (Unix seconds; [input] earliest_event_time / latest_event_time)",
            p.earliest_event_time, p.latest_event_time
        );
        let Some(raw) = self.first_implausible_time else {
            return window;
        };
        let fits = TimeUnit::ALL.into_iter().find(|u| {
            u64::try_from(raw.div_euclid(u.per_second()))
                .is_ok_and(|t| (p.earliest_event_time..=p.latest_event_time).contains(&t))
        });
        match fits {
            Some(u) if u != p.time_unit => format!(
                "integer event times such as {raw} look like epoch {u} (set [input] time_unit = \"{u}\"); {window}",
                u = u.as_str()
            ),
            _ => format!("e.g. the integer event time {raw}; {window}"),
        }
    }

    /// Validates one batch: adds the shuffle record of every valid row to its
    /// partition in `keys` and returns the indices and reasons of rejected rows.
    pub fn validate(
        &mut self,
        batch: &RecordBatch,
        keys: &mut key::PartitionedRecords,
    ) -> Result<Vec<(u32, Reason)>> {
        let c = self.columns.clone();
        let src = self.as_strings(&self.column(batch, &c.src_addr)?, &c.src_addr)?;
        let dst = self.as_strings(&self.column(batch, &c.dst_addr)?, &c.dst_addr)?;
        let (times, divisor, integer_times) =
            self.as_i64(&self.column(batch, &c.event_time)?, &c.event_time)?;
        let times = times.as_primitive::<Int64Type>();
        let version = {
            let a = self.column(batch, &c.ip_version)?;
            if !a.data_type().is_integer() {
                return Err(EngineError::Schema {
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
        if keys.partitions() != self.shards as usize {
            return Err(EngineError::Schema {
                file: self.file.clone(),
                what: format!(
                    "{} record buffers for {} shards",
                    keys.partitions(),
                    self.shards
                ),
            });
        }

        let shards = self.shards;
        let table = &mut self.cache.src;
        let resolve_sources = |strings: &StringArray, out: &mut Vec<Option<Source>>| {
            // A null value is answered as null whatever its slot's text.
            let texts = (0..strings.len()).map(|k| strings.value(k));
            table.resolve_all(texts, |t| parse_source(t, shards), out);
        };
        match &src {
            Strings::Dict(_, strings, values) => {
                self.src_memo
                    .use_dictionary(values, strings, resolve_sources)
            }
            Strings::Plain(strings) => self.src_memo.use_rows(strings, resolve_sources),
        }
        let cache = &mut self.cache.dst;
        let resolve_destinations = |strings: &StringArray, out: &mut Vec<Option<Destination>>| {
            out.extend((0..strings.len()).map(|k| resolve_destination(cache, strings.value(k))));
        };
        match &dst {
            Strings::Dict(_, strings, values) => {
                self.dst_memo
                    .use_dictionary(values, strings, resolve_destinations)
            }
            Strings::Plain(strings) => self.dst_memo.use_rows(strings, resolve_destinations),
        }
        let mut rejects = Vec::new();
        let columns = Columns {
            src: &src,
            dst: &dst,
            times,
            divisor,
            integer_times,
            version,
            rtt,
        };
        for i in 0..batch.num_rows() {
            if let Err(reason) = self.row(&columns, i, keys) {
                rejects.push((i as u32, reason));
            }
        }
        self.cache.prepare(self.shards, self.cache_limit);
        Ok(rejects)
    }

    /// Checks row `i` and adds its shuffle record to `keys`, or says why it is rejected.
    /// The parsed addresses are read in place (a copy of a source, 24 bytes, through
    /// the stack was a tenth of this function's time).
    #[inline]
    fn row(
        &mut self,
        c: &Columns<'_>,
        i: usize,
        keys: &mut key::PartitionedRecords,
    ) -> std::result::Result<(), Reason> {
        let src = lookup(c.src, i, &self.src_memo).map_err(|null| {
            if null {
                Reason::NullSrcAddr
            } else {
                Reason::BadSrcAddr
            }
        })?;
        let dst = lookup(c.dst, i, &self.dst_memo).map_err(|null| {
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
        let raw = c.times.value(i);
        let event_time =
            u64::try_from(raw.div_euclid(c.divisor)).map_err(|_| Reason::NegativeEventTime)?;
        let p = &self.plausible;
        if event_time < p.earliest_event_time || event_time > p.latest_event_time {
            if c.integer_times && self.first_implausible_time.is_none() {
                self.first_implausible_time = Some(raw);
            }
            return Err(Reason::ImplausibleEventTime);
        }
        if c.rtt.is_null(i) {
            return Err(Reason::NullRtt);
        }
        let rtt = c.rtt.value(i);
        if rtt.is_infinite() {
            return Err(Reason::InfiniteRtt);
        }
        if rtt > p.max_rtt_ms {
            return Err(Reason::ImplausibleRtt);
        }
        let code = RttCode::from_ms(rtt).map_err(|_| Reason::NanRtt)?;
        keys.push(src.partition as usize, &src.key, event_time, &dst.key, code);
        let counts = &mut self.local_sources;
        counts.rows += 1;
        if src.local {
            counts.local_rows += 1;
            if counts.example.is_none() {
                let len = usize::from(src.key[16]);
                counts.example = addr::addr_from_bytes(&src.key[..len]);
            }
        }
        Ok(())
    }
}

/// The columns of one batch, as the row check reads them.
struct Columns<'a> {
    src: &'a Strings,
    dst: &'a Strings,
    times: &'a Int64Array,
    divisor: i64,
    integer_times: bool,
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int64Array, StringArray, TimestampMillisecondArray};
    use arrow::datatypes::{Field, Schema};

    /// One batch of IPv4 rows with the given times and RTTs.
    fn batch(times: ArrayRef, rtts: Vec<f64>) -> RecordBatch {
        let n = rtts.len();
        let schema = Schema::new(vec![
            Field::new("src_addr", DataType::Utf8, true),
            Field::new("dst_addr", DataType::Utf8, true),
            Field::new("event_time", times.data_type().clone(), true),
            Field::new("rtt", DataType::Float64, true),
            Field::new("ip_version", DataType::Int64, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(StringArray::from(vec!["192.0.2.1"; n])),
                Arc::new(StringArray::from(vec!["198.51.100.7"; n])),
                times,
                Arc::new(Float64Array::from(rtts)),
                Arc::new(Int64Array::from(vec![4; n])),
            ],
        )
        .unwrap()
    }

    fn reasons(plausible: Plausible, b: &RecordBatch) -> (Vec<Option<Reason>>, String) {
        let mut cache = AddressCache::default();
        let mut v = Validator::new(
            "f.parquet".into(),
            InputColumns::default(),
            2,
            plausible,
            &mut cache,
            cache_limit(2 << 30),
        );
        let mut partitioned = key::PartitionedRecords::new(2, 0);
        let rejects = v.validate(b, &mut partitioned).unwrap();
        let mut out = vec![None; b.num_rows()];
        for (i, r) in rejects {
            out[i as usize] = Some(r);
        }
        (out, v.time_unit_hint())
    }

    /// A Parquet file of one row group, its address columns dictionary-encoded, read
    /// back by the Parquet reader in batches of `batch_rows`.
    fn parquet_batches(rows: usize, sources: usize, batch_rows: usize) -> Vec<RecordBatch> {
        use arrow::array::DictionaryArray;
        use arrow::datatypes::Int32Type;
        let dict = |texts: Vec<String>| -> ArrayRef {
            Arc::new(
                texts
                    .iter()
                    .map(String::as_str)
                    .collect::<DictionaryArray<Int32Type>>(),
            )
        };
        let src: Vec<String> = (0..rows)
            .map(|i| format!("10.{}.{}.1", i * 7 % sources / 256, i * 7 % sources % 256))
            .collect();
        let dst: Vec<String> = (0..rows).map(|i| format!("192.0.2.{}", i % 200)).collect();
        let text = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        let schema = Arc::new(Schema::new(vec![
            Field::new("src_addr", text.clone(), true),
            Field::new("dst_addr", text, true),
            Field::new("event_time", DataType::Int64, true),
            Field::new("rtt", DataType::Float64, true),
            Field::new("ip_version", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                dict(src),
                dict(dst),
                Arc::new(Int64Array::from(vec![NOW; rows])),
                Arc::new(Float64Array::from(vec![12.5; rows])),
                Arc::new(Int64Array::from(vec![4; rows])),
            ],
        )
        .unwrap();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(rows))
            .build();
        let mut file = Vec::new();
        let mut writer =
            parquet::arrow::ArrowWriter::try_new(&mut file, schema, Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(
            file,
        ))
        .unwrap()
        .with_batch_size(batch_rows)
        .build()
        .unwrap()
        .collect::<std::result::Result<_, _>>()
        .unwrap()
    }

    #[test]
    fn a_row_groups_dictionary_is_resolved_once_across_its_batches() {
        let (rows, batch_rows) = (40_000, 4_096);
        let batches = parquet_batches(rows, 5_000, batch_rows);
        assert_eq!(batches.len(), rows.div_ceil(batch_rows));
        assert!(
            matches!(batches[0].column(0).data_type(), DataType::Dictionary(..)),
            "the reader gives dictionaries"
        );
        let mut cache = AddressCache::default();
        let mut v = Validator::new(
            "f.parquet".into(),
            InputColumns::default(),
            4,
            window(),
            &mut cache,
            cache_limit(2 << 30),
        );
        let mut partitioned = key::PartitionedRecords::new(4, 0);
        for b in &batches {
            assert!(v.validate(b, &mut partitioned).unwrap().is_empty());
        }
        assert_eq!(
            v.resolutions(),
            (1, 1),
            "one row group: one source and one destination dictionary"
        );
        let kept: u64 = partitioned.into_partitions().map(|(_, rows)| rows).sum();
        assert_eq!(kept, rows as u64);
    }

    #[test]
    fn the_address_cache_keeps_at_most_its_limit_from_one_map_to_the_next() {
        // A worker of 64 MiB keeps a quarter of it, 65 536 addresses; a larger one up
        // to a million.
        assert_eq!(cache_limit(64 << 20), 65_536);
        assert_eq!(cache_limit(64 << 30), CACHE_LIMIT);
        assert_eq!(cache_limit(0), CACHE_MIN);
        let limit = CACHE_MIN;
        let per_map = 1_000;
        let schema = Arc::new(Schema::new(vec![
            Field::new("src_addr", DataType::Utf8, true),
            Field::new("dst_addr", DataType::Utf8, true),
            Field::new("event_time", DataType::Int64, true),
            Field::new("rtt", DataType::Float64, true),
            Field::new("ip_version", DataType::Int64, true),
        ]));
        let mut cache = AddressCache::default();
        let mut most = 0;
        // 30 maps of 1 000 sources each, every one new.
        for map in 0..30 {
            let src: Vec<String> = (0..per_map)
                .map(|i| format!("2001:db8::{:x}", map * per_map + i))
                .collect();
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(StringArray::from(src)),
                    Arc::new(StringArray::from(vec!["2001:db8:1::1"; per_map])),
                    Arc::new(Int64Array::from(vec![NOW; per_map])),
                    Arc::new(Float64Array::from(vec![12.5; per_map])),
                    Arc::new(Int64Array::from(vec![6; per_map])),
                ],
            )
            .unwrap();
            let mut v = Validator::new(
                "f.parquet".into(),
                InputColumns::default(),
                4,
                window(),
                &mut cache,
                limit,
            );
            let mut partitioned = key::PartitionedRecords::new(4, 0);
            assert!(v.validate(&batch, &mut partitioned).unwrap().is_empty());
            drop(v);
            let held = cache.src.len() + cache.dst.len();
            // At most the limit, and what one batch added past it.
            assert!(
                held <= limit + per_map + 1,
                "map {map}: {held} addresses held"
            );
            most = most.max(held);
        }
        // It filled up to its limit (and was emptied past it: 30 000 sources met).
        assert!(most > limit - per_map, "{most}");
    }

    const NOW: i64 = 1_767_300_000; // 2026-01-01
    #[test]
    fn dotted_quads_read_as_the_standard_parser_reads_them() {
        let mut texts: Vec<String> = [
            "1.2.3.4",
            "0.0.0.0",
            "255.255.255.255",
            "256.1.1.1",
            "01.2.3.4",
            "1.2.3.04",
            "1.2.3",
            "1.2.3.4.5",
            "1..3.4",
            ".1.2.3",
            "1.2.3.",
            "1.2.3.4 ",
            " 1.2.3.4",
            "1.2.3.-4",
            "1.2.3.+4",
            "1.2.3.4\0",
            "a.b.c.d",
            "::ffff:1.2.3.4",
            "1.2.3.1000",
            "00.1.2.3",
            "192.168.001.1",
            "9.99.199.255",
        ]
        .iter()
        .map(|t| t.to_string())
        .collect();
        // And every short text over the alphabet of dotted quads, drawn at random.
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..200_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let len = 7 + (s % 9) as usize;
            let text: String = (0..len)
                .map(|i| b"0123456789.."[((s >> (i * 4)) % 12) as usize] as char)
                .collect();
            texts.push(text);
            texts.push(std::net::Ipv4Addr::from((s >> 16) as u32 >> (s % 24)).to_string());
        }
        let mut read = 0;
        for t in &texts {
            let std: Option<std::net::Ipv4Addr> = t.parse().ok();
            match dotted_quad(t) {
                Some(a) => {
                    read += 1;
                    assert_eq!(Some(std::net::Ipv4Addr::from(a)), std, "{t:?}");
                    assert_eq!(
                        std::net::Ipv4Addr::from(a).to_string(),
                        *t,
                        "canonical: {t:?}"
                    );
                }
                None => assert!(std.is_none(), "{t:?} is {std:?}"),
            }
        }
        assert!(read > 200_000, "only {read} texts were dotted quads");
    }

    fn window() -> Plausible {
        Plausible {
            latest_event_time: NOW as u64 + 86_400,
            ..Plausible::default()
        }
    }

    #[test]
    fn event_times_outside_the_window_are_implausible() {
        let times = Int64Array::from(vec![
            NOW,
            946_684_800,  // the first plausible second
            946_684_799,  // one before
            NOW + 86_400, // the last plausible second
            NOW + 86_401, // one after
            NOW * 1000,   // epoch milliseconds read as seconds: year 57 000
            0,
        ]);
        let (r, _) = reasons(window(), &batch(Arc::new(times), vec![1.0; 7]));
        use Reason::ImplausibleEventTime as I;
        assert_eq!(
            r,
            vec![None, None, Some(I), None, Some(I), Some(I), Some(I)]
        );
    }

    #[test]
    fn time_unit_scales_integer_times_and_the_hint_names_the_likely_unit() {
        let ms = Int64Array::from(vec![NOW * 1000, NOW * 1000 + 999]);
        let (r, hint) = reasons(window(), &batch(Arc::new(ms.clone()), vec![1.0; 2]));
        assert_eq!(r, vec![Some(Reason::ImplausibleEventTime); 2]);
        assert!(hint.contains("time_unit = \"ms\""), "{hint}");
        let as_ms = Plausible {
            time_unit: TimeUnit::Ms,
            ..window()
        };
        let (r, _) = reasons(as_ms, &batch(Arc::new(ms), vec![1.0; 2]));
        assert_eq!(r, vec![None, None]);
        let ns = Int64Array::from(vec![NOW * 1_000_000_000]);
        let (_, hint) = reasons(window(), &batch(Arc::new(ns), vec![1.0]));
        assert!(hint.contains("time_unit = \"ns\""), "{hint}");
        // Timestamp columns carry their unit: time_unit does not apply to them.
        let ts = TimestampMillisecondArray::from(vec![NOW * 1000]);
        let (r, _) = reasons(as_ms, &batch(Arc::new(ts), vec![1.0]));
        assert_eq!(r, vec![None]);
    }

    #[test]
    fn infinite_and_absurd_rtts_are_rejected() {
        let times = Int64Array::from(vec![NOW; 6]);
        let rtts = vec![
            f64::INFINITY,
            f64::NEG_INFINITY,
            60_000.0,
            60_000.5,
            1e12,
            -1.0,
        ];
        let (r, _) = reasons(window(), &batch(Arc::new(times), rtts));
        assert_eq!(
            r,
            vec![
                Some(Reason::InfiniteRtt),
                Some(Reason::InfiniteRtt),
                None,
                Some(Reason::ImplausibleRtt),
                Some(Reason::ImplausibleRtt),
                None, // a failed ping
            ]
        );
    }

    #[test]
    fn every_reason_is_its_own_metric_label_and_an_unknown_name_is_unknown() {
        let labels: std::collections::BTreeSet<&str> = Reason::ALL
            .iter()
            .map(|r| Reason::label(r.as_str()))
            .collect();
        assert_eq!(labels.len(), Reason::ALL.len());
        assert!(!labels.contains("unknown"));
        assert_eq!(Reason::label("dropped_by_a_newer_release"), "unknown");
    }
}
