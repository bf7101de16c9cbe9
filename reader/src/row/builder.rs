//! [`RowBuilder`]: one source's time-ordered measurements in, rows of at most
//! `max_row_bytes` out.
//!
//! A row's encoded size is bounded by a fixed overhead (its IPC messages, with the
//! metadata values at their longest) plus, per measurement, 8 bytes of time, 4 or 16 of
//! address, 2 of RTT and a validity bit, plus alignment padding. From that bound the
//! builder derives how many measurements fit in one row (its *capacity*, fixed per
//! source) and cuts the stream into rows of exactly that many, the last one shorter:
//! a pure function of the input, never splitting a measurement.

use std::net::IpAddr;
use std::sync::OnceLock;

use super::addr::{addr_from_bytes, ip_version};
use super::codec::{Columns, Measurement, Row, RowMeta};
use super::ipc_stream;
use super::placement::src_id;
use super::rtt::RttCode;
use crate::error::{Error, Result};

/// 8 MiB, the default cap on one row.
pub const DEFAULT_MAX_ROW_BYTES: usize = 8 << 20;

/// Four body buffers can be non-empty (time, address, RTT, RTT validity); each is
/// padded to 64 bytes.
const ALIGNMENT_SLACK: usize = 4 * 63;

/// Measurements a new builder has room for before its buffers first grow.
const INITIAL_MEASUREMENTS: usize = 256;

/// The encoded size of an empty row whose metadata values are all at their longest
/// (the longest address text of the family, 20-digit numbers): computed once per family.
fn fixed_overhead(width: usize) -> Result<usize> {
    static OVERHEAD: [OnceLock<usize>; 2] = [OnceLock::new(), OnceLock::new()];
    let slot = &OVERHEAD[usize::from(width == 16)];
    if let Some(v) = slot.get() {
        return Ok(*v);
    }
    let longest_addr = if width == 4 {
        IpAddr::from([255u8, 255, 255, 255])
    } else {
        IpAddr::from([0xffffu16; 8])
    };
    let longest = RowMeta {
        src_addr: longest_addr,
        src_id: u64::MAX,
        part: u32::MAX,
        first_time: u64::MAX,
        last_time: u64::MAX,
        n_measurements: u64::MAX,
    };
    let v = ipc_stream::encode(&longest, &Columns::default())?.len();
    Ok(*slot.get_or_init(|| v))
}

/// Cuts one source's measurements into rows of at most `max_row_bytes`.
#[derive(Debug)]
pub struct RowBuilder {
    src_addr: IpAddr,
    src_id: u64,
    width: usize,
    overhead: usize,
    capacity: usize,
    max_row_bytes: usize,
    part: u32,
    last_time: u64,
    pending: Columns,
}

impl RowBuilder {
    /// A builder for `src_addr` (canonical form, see [`super::addr`]).
    pub fn new(src_addr: IpAddr, max_row_bytes: usize) -> Result<Self> {
        let width = if ip_version(&src_addr) == 4 { 4 } else { 16 };
        let overhead = fixed_overhead(width)?;
        let bound = |n: usize| overhead + n * (10 + width) + n.div_ceil(8) + ALIGNMENT_SLACK;
        let avail = max_row_bytes.saturating_sub(overhead + ALIGNMENT_SLACK);
        let mut capacity = avail * 8 / (8 * (10 + width) + 1);
        while bound(capacity + 1) <= max_row_bytes {
            capacity += 1;
        }
        while capacity > 0 && bound(capacity) > max_row_bytes {
            capacity -= 1;
        }
        if capacity == 0 {
            return Err(Error::Input(format!(
                "max_row_bytes {max_row_bytes} is too small: a row of {src_addr} with one \
                 measurement can take {} bytes",
                bound(1)
            )));
        }
        Ok(RowBuilder {
            src_addr,
            src_id: src_id(&src_addr),
            width,
            overhead,
            capacity,
            max_row_bytes,
            part: 0,
            last_time: 0,
            // Most sources have a few hundred measurements: start there, not at zero.
            pending: Columns::with_capacity(capacity.min(INITIAL_MEASUREMENTS), width),
        })
    }

    /// Measurements per full row.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Adds the next measurement; returns a row when one is full.
    pub fn push(&mut self, m: &Measurement) -> Result<Option<Row>> {
        let mut dst = [0u8; 16];
        let n = match m.dst_addr {
            IpAddr::V4(a) => {
                dst[..4].copy_from_slice(&a.octets());
                4
            }
            IpAddr::V6(a) => {
                dst.copy_from_slice(&a.octets());
                16
            }
        };
        self.push_parts(m.event_time, &dst[..n], m.rtt)
    }

    /// Like [`RowBuilder::push`], with the destination as 4 or 16 network-order bytes.
    pub fn push_parts(
        &mut self,
        event_time: u64,
        dst: &[u8],
        rtt: Option<RttCode>,
    ) -> Result<Option<Row>> {
        if dst.len() != self.width {
            let shown = addr_from_bytes(dst).map_or_else(|| format!("{dst:?}"), |a| a.to_string());
            return Err(Error::Input(format!(
                "destination {shown} is {} in an IPv{} row of {}",
                match dst.len() {
                    4 => "IPv4",
                    16 => "IPv6",
                    _ => "not an address",
                },
                ip_version(&self.src_addr),
                self.src_addr
            )));
        }
        if event_time < self.last_time {
            return Err(Error::Input(format!(
                "measurements of {} out of time order: {} after {}",
                self.src_addr, event_time, self.last_time
            )));
        }
        self.last_time = event_time;
        let len = self.pending.len();
        if len == self.pending.room() {
            // Doubled, but never past a full row: the columns hold at most one row's
            // measurements (a row is up to `max_row_bytes`).
            self.pending.grow_to(
                (2 * len).max(INITIAL_MEASUREMENTS).min(self.capacity),
                self.width,
            );
        }
        self.pending.push_parts(event_time, dst, rtt);
        if self.pending.len() == self.capacity {
            return self.emit().map(Some);
        }
        Ok(None)
    }

    /// Emits the last, partial row (if any measurements are pending).
    pub fn finish(mut self) -> Result<Option<Row>> {
        if self.pending.len() == 0 {
            return Ok(None);
        }
        self.emit().map(Some)
    }

    fn emit(&mut self) -> Result<Row> {
        let n = self.pending.len();
        let meta = RowMeta {
            src_addr: self.src_addr,
            src_id: self.src_id,
            part: self.part,
            first_time: self.pending.times[0],
            last_time: self.pending.times[n - 1],
            n_measurements: n as u64,
        };
        let bytes = ipc_stream::encode(&meta, &self.pending)?;
        self.pending.clear();
        if bytes.len() > self.max_row_bytes {
            // The bound above makes this unreachable; refuse rather than write an oversize row.
            return Err(Error::Input(format!(
                "row of {} with {n} measurements is {} bytes, over the {} limit (overhead {})",
                self.src_addr,
                bytes.len(),
                self.max_row_bytes,
                self.overhead
            )));
        }
        self.part = self.part.checked_add(1).ok_or_else(|| {
            Error::Input(format!("more than {} rows for {}", u32::MAX, self.src_addr))
        })?;
        Ok(Row { bytes, meta })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::decode_row;

    fn stream(src_v6: bool, n: usize) -> Vec<Measurement> {
        (0..n)
            .map(|i| Measurement {
                event_time: 1_700_000_000 + (i as u64) / 3,
                dst_addr: if src_v6 {
                    IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, (i % 5000) as u16])
                } else {
                    IpAddr::from([10, 0, (i / 256 % 256) as u8, (i % 256) as u8])
                },
                rtt: if i % 11 == 0 {
                    None
                } else {
                    RttCode::from_ms(i as f64 / 10.0).unwrap()
                },
            })
            .collect()
    }

    fn build(src: IpAddr, max: usize, ms: &[Measurement]) -> (Vec<Row>, usize) {
        let mut b = RowBuilder::new(src, max).unwrap();
        let cap = b.capacity();
        let mut rows = Vec::new();
        for m in ms {
            rows.extend(b.push(m).unwrap());
        }
        rows.extend(b.finish().unwrap());
        (rows, cap)
    }

    #[test]
    fn rows_stay_under_the_cap_and_keep_everything() {
        for (v6, src) in [(false, "192.0.2.1"), (true, "2001:db8::1")] {
            let src: IpAddr = src.parse().unwrap();
            for max in [4096, 10_000, 65_536] {
                let ms = stream(v6, 9_000);
                let (rows, cap) = build(src, max, &ms);
                let mut back = Vec::new();
                for (i, row) in rows.iter().enumerate() {
                    assert!(row.bytes.len() <= max, "{} > {max}", row.bytes.len());
                    let view = decode_row(&row.bytes).unwrap();
                    assert_eq!(view.meta.part as usize, i);
                    if i + 1 < rows.len() {
                        assert_eq!(view.len(), cap);
                        // Full rows use most of the budget.
                        assert!(
                            row.bytes.len() * 10 > max * 8,
                            "{} of {max}",
                            row.bytes.len()
                        );
                    }
                    back.extend(view.iter());
                }
                assert_eq!(back, ms);
            }
        }
    }

    #[test]
    fn eight_mib_rows() {
        let src: IpAddr = "192.0.2.1".parse().unwrap();
        let b = RowBuilder::new(src, DEFAULT_MAX_ROW_BYTES).unwrap();
        // 8 + 4 + 2 bytes and a bit per IPv4 measurement.
        assert!(b.capacity() > 590_000, "{}", b.capacity());
        let ms = stream(false, b.capacity() + 10);
        let (rows, _) = build(src, DEFAULT_MAX_ROW_BYTES, &ms);
        assert_eq!(rows.len(), 2);
        assert!(rows[0].bytes.len() <= DEFAULT_MAX_ROW_BYTES);
        assert!(rows[0].bytes.len() > DEFAULT_MAX_ROW_BYTES - 4096);
        assert_eq!(rows[1].meta.n_measurements, 10);
    }

    #[test]
    fn exact_multiple_gives_no_empty_row() {
        let src: IpAddr = "192.0.2.1".parse().unwrap();
        let cap = RowBuilder::new(src, 4096).unwrap().capacity();
        let (rows, _) = build(src, 4096, &stream(false, 2 * cap));
        assert_eq!(rows.len(), 2);
        let (rows, _) = build(src, 4096, &[]);
        assert!(rows.is_empty());
    }

    #[test]
    fn bad_input_is_refused() {
        let src: IpAddr = "192.0.2.1".parse().unwrap();
        assert!(RowBuilder::new(src, 100)
            .unwrap_err()
            .to_string()
            .contains("too small"));
        let mut b = RowBuilder::new(src, 4096).unwrap();
        let v6 = stream(true, 1);
        assert!(b.push(&v6[0]).is_err());
        let ms = stream(false, 2);
        b.push(&ms[1]).unwrap();
        let mut early = ms[0];
        early.event_time -= 10;
        assert!(b
            .push(&early)
            .unwrap_err()
            .to_string()
            .contains("out of time order"));
    }
}
