//! The sampler: training contexts (token sequences of at most `context_len`) from one row.
//!
//! For a row of `n` measurements visited in epoch `e` (docs/architecture.md, "The
//! sampler"):
//!
//! * **small row** (`n < context_len / tokens_per_measurement`): all measurements, in
//!   the context's order; what overflows `context_len` starts another context;
//! * **large row**: `K = min(ceil(n / measurements_per_context), max_contexts_per_row)`
//!   contexts, each from a window of log-uniform size `w ∈ [1, n]` at a uniform offset
//!   (or, with [`Strategy::GeometricStride`], every `2^k`-th measurement from a random
//!   start), drawn without replacement until the next one would overflow.
//! * per context a **timestamp mode**: full (every measurement keeps its time, time
//!   order), partial (a fraction from 10–90 % lose it; the kept ones stay in time order
//!   and the others are interleaved at random), none (random order, no times);
//! * per measurement a random **field order**.
//!
//! Every draw comes from a [`CounterRng`] keyed by `(seed, epoch, row, context)`, so a
//! row's contexts do not depend on threads, ranks or what else was sampled. Token counts
//! are computed exactly while drawing (the cost of a timestamp depends on its neighbours
//! in time), so no measurement is ever cut.

use crate::error::{Error, Result};
use crate::rng::CounterRng;
use crate::row::RowView;
pub use crate::tokenizer::MAX_MEASUREMENT_TOKENS;
use crate::tokenizer::{
    base_tokens, encode_with_source, source_block, timestamp_after, FieldBlock, Timestamp,
    MIN_MEASUREMENT_TOKENS,
};

/// How large rows are cut into contexts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Log-uniform windows, random draws inside (the default).
    Window,
    /// Every `2^k`-th measurement (k = 0, 1, 2 … up to `n / target`), random start.
    GeometricStride,
}

impl Strategy {
    /// Its name in options (`"window"`, `"geometric_stride"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Window => "window",
            Strategy::GeometricStride => "geometric_stride",
        }
    }
}

impl std::str::FromStr for Strategy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "window" => Ok(Strategy::Window),
            "geometric_stride" | "stride" => Ok(Strategy::GeometricStride),
            _ => Err(Error::Input(format!(
                "unknown strategy {s:?} (expected \"window\" or \"geometric_stride\")"
            ))),
        }
    }
}

/// The timestamp mode of one context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimestampMode {
    Full,
    Partial,
    None,
}

/// The sampler's numbers (defaults from the design).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerOptions {
    /// Longest context in tokens (the sequence length).
    pub context_len: usize,
    /// `K = min(ceil(n / measurements_per_context), max_contexts_per_row)`.
    pub measurements_per_context: usize,
    pub max_contexts_per_row: usize,
    /// A row is small when `n < context_len / tokens_per_measurement`.
    pub tokens_per_measurement: usize,
    /// Probabilities of the full, partial and none timestamp modes.
    pub timestamp_modes: [f64; 3],
    /// In partial mode, the fraction of measurements that lose their timestamp is drawn
    /// uniformly from this range.
    pub partial_drop: (f64, f64),
    pub strategy: Strategy,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        SamplerOptions {
            context_len: 1024,
            measurements_per_context: 30,
            max_contexts_per_row: 16,
            tokens_per_measurement: 30,
            timestamp_modes: [0.4, 0.3, 0.3],
            partial_drop: (0.1, 0.9),
            strategy: Strategy::Window,
        }
    }
}

impl SamplerOptions {
    pub fn check(&self) -> Result<()> {
        let bad = |what: String| Err(Error::Input(what));
        if self.context_len < MAX_MEASUREMENT_TOKENS {
            return bad(format!(
                "seq_len {} is too short: a measurement can take {MAX_MEASUREMENT_TOKENS} tokens",
                self.context_len
            ));
        }
        if self.measurements_per_context == 0 || self.tokens_per_measurement == 0 {
            return bad("measurements_per_context and tokens_per_measurement must be > 0".into());
        }
        if self.max_contexts_per_row == 0 {
            return bad("max_contexts_per_row must be > 0".into());
        }
        let p = self.timestamp_modes;
        if p.iter().any(|x| !(0.0..=1.0).contains(x)) || (p.iter().sum::<f64>() - 1.0).abs() > 1e-9
        {
            return bad(format!(
                "timestamp_modes {p:?} must be probabilities summing to 1"
            ));
        }
        let (lo, hi) = self.partial_drop;
        if !(0.0..=1.0).contains(&lo) || !(0.0..=1.0).contains(&hi) || lo > hi {
            return bad(format!(
                "partial_drop ({lo}, {hi}) must satisfy 0 ≤ lo ≤ hi ≤ 1"
            ));
        }
        Ok(())
    }

    /// Rows with fewer measurements take the small-row path.
    pub fn small_row_limit(&self) -> usize {
        self.context_len / self.tokens_per_measurement
    }

    /// Contexts drawn from a large row of `n` measurements.
    pub fn contexts_for(&self, n: usize) -> usize {
        n.div_ceil(self.measurements_per_context)
            .min(self.max_contexts_per_row)
    }
}

/// Contexts, stored back to back.
#[derive(Debug, Clone, Default)]
pub struct Contexts {
    pub tokens: Vec<i32>,
    /// End offset of each context in `tokens`.
    pub ends: Vec<usize>,
    /// The timestamp mode of each context (for tests and statistics).
    pub modes: Vec<TimestampMode>,
}

impl Contexts {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn get(&self, i: usize) -> &[i32] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.tokens[start..self.ends[i]]
    }

    pub fn clear(&mut self) {
        self.tokens.clear();
        self.ends.clear();
        self.modes.clear();
    }
}

/// One chosen measurement: its index in the row and whether it keeps its timestamp.
#[derive(Debug, Clone, Copy)]
struct Pick {
    index: u32,
    timed: bool,
}

fn draw_mode(rng: &mut CounterRng, p: [f64; 3]) -> TimestampMode {
    let u = rng.next_f64();
    if u < p[0] {
        TimestampMode::Full
    } else if u < p[0] + p[1] {
        TimestampMode::Partial
    } else {
        TimestampMode::None
    }
}

/// Tokens of a timestamp delta block.
#[inline]
fn delta_tokens(from: u64, to: u64) -> usize {
    Timestamp::Delta(to.saturating_sub(from)).tokens()
}

/// Buffers the sampler reuses from row to row (one per thread), so that sampling
/// allocates nothing once they have grown.
#[derive(Debug, Default)]
pub struct SamplerScratch {
    picks: Vec<Pick>,
    timed: Vec<u32>,
    untimed: Vec<Pick>,
    arranged: Vec<Pick>,
    table: Vec<u64>,
}

/// Samples the contexts of one row into `out`. `key` identifies the row's draws:
/// `(seed, epoch, global row index)`.
pub fn sample_row(row: &RowView<'_>, key: [u64; 3], opts: &SamplerOptions, out: &mut Contexts) {
    sample_row_with(row, key, opts, &mut SamplerScratch::default(), out);
}

/// [`sample_row`] with buffers kept between calls.
pub fn sample_row_with(
    row: &RowView<'_>,
    key: [u64; 3],
    opts: &SamplerOptions,
    scratch: &mut SamplerScratch,
    out: &mut Contexts,
) {
    let n = row.len();
    if n == 0 {
        return;
    }
    let src = crate::row::addr::addr_octets(&row.meta.src_addr);
    let width = src.len();
    let src = source_block(&src);
    let rng_for = |context: u64| CounterRng::from_parts(&[key[0], key[1], key[2], context]);
    // A small row is one visit of all its measurements (what overflows starts another
    // context); a large row gives K drawn contexts.
    let small = n < opts.small_row_limit();
    let contexts = if small { 1 } else { opts.contexts_for(n) };
    for k in 0..contexts {
        let mut rng = rng_for(k as u64);
        let mode = draw_mode(&mut rng, opts.timestamp_modes);
        let drop = drop_fraction(&mut rng, mode, opts);
        if small {
            scratch.picks.clear();
            scratch.picks.extend((0..n as u32).map(|index| Pick {
                index,
                timed: keeps_time(&mut rng, mode, drop),
            }));
        } else {
            choose(row, width, mode, drop, opts, &mut rng, scratch);
        }
        let ordered = arrange(scratch, mode, &mut rng);
        emit_split(
            row,
            &src,
            width,
            ordered,
            mode,
            opts.context_len,
            &mut rng,
            out,
        );
    }
}

fn drop_fraction(rng: &mut CounterRng, mode: TimestampMode, opts: &SamplerOptions) -> f64 {
    match mode {
        TimestampMode::Partial => {
            let (lo, hi) = opts.partial_drop;
            lo + (hi - lo) * rng.next_f64()
        }
        TimestampMode::Full => 0.0,
        TimestampMode::None => 1.0,
    }
}

#[inline]
fn keeps_time(rng: &mut CounterRng, mode: TimestampMode, drop: f64) -> bool {
    match mode {
        TimestampMode::Full => true,
        TimestampMode::None => false,
        TimestampMode::Partial => rng.next_f64() >= drop,
    }
}

/// A large-row context's candidate measurements, in draw order.
enum Candidates<'a> {
    Window(WindowDraws<'a>),
    Stride(std::iter::StepBy<std::ops::Range<u64>>),
}

impl Iterator for Candidates<'_> {
    type Item = u64;
    #[inline]
    fn next(&mut self) -> Option<u64> {
        match self {
            Candidates::Window(w) => w.next(),
            Candidates::Stride(s) => s.next(),
        }
    }
}

/// Chooses a large-row context's measurements into `scratch.picks`, counting tokens
/// exactly, and stops before the first one that would overflow.
fn choose(
    row: &RowView<'_>,
    width: usize,
    mode: TimestampMode,
    drop: f64,
    opts: &SamplerOptions,
    rng: &mut CounterRng,
    scratch: &mut SamplerScratch,
) {
    let n = row.len() as u64;
    let budget = opts.context_len;
    let SamplerScratch {
        picks,
        timed,
        table,
        ..
    } = scratch;
    picks.clear();
    // Kept (timestamped) picks, sorted by index, and the tokens their timestamps take.
    timed.clear();
    let candidates = match opts.strategy {
        Strategy::Window => {
            // Log-uniform size in [1, n]: floor((n + 1)^u).
            let w = (((n + 1) as f64).powf(rng.next_f64()).floor() as u64).clamp(1, n);
            let offset = rng.below(n - w + 1);
            // The draws get their own stream (keyed from ours), so index draws and
            // timestamp draws are independent.
            let most = (budget / MIN_MEASUREMENT_TOKENS + 1) as u64;
            Candidates::Window(WindowDraws::new(
                offset,
                w,
                most,
                CounterRng::new(rng.next_u64()),
                table,
            ))
        }
        Strategy::GeometricStride => {
            let target = opts.small_row_limit().max(1) as u64;
            let levels = (64 - (n / target).max(1).leading_zeros()) as u64; // floor(log2) + 1
            let stride = 1u64 << (rng.below(levels.max(1)));
            let span = (stride * target).min(n);
            let start = rng.below(n - span + 1);
            Candidates::Stride((start..n).step_by(stride as usize))
        }
    };
    let mut ts_tokens = 0usize;
    let mut total = 0usize;
    for index in candidates {
        let i = index as usize;
        let timed_pick = keeps_time(rng, mode, drop);
        let mut cost = base_tokens(width, row.rtt(i).is_none());
        let mut new_ts = ts_tokens;
        let mut at = 0;
        if timed_pick {
            let t = row.event_time(i);
            at = timed.partition_point(|&j| j < index as u32);
            let time_of = |j: u32| row.event_time(j as usize);
            // Inserting between a and b replaces the delta a→b by a→t and t→b (which
            // can be one token shorter: two 1-byte deltas instead of one 4-byte one).
            new_ts = if timed.is_empty() {
                9
            } else if at == 0 {
                ts_tokens + delta_tokens(t, time_of(timed[0]))
            } else if at == timed.len() {
                ts_tokens + delta_tokens(time_of(timed[at - 1]), t)
            } else {
                let (a, b) = (time_of(timed[at - 1]), time_of(timed[at]));
                ts_tokens + delta_tokens(a, t) + delta_tokens(t, b) - delta_tokens(a, b)
            };
        }
        cost = (cost + new_ts).saturating_sub(ts_tokens);
        if total + cost > budget {
            break;
        }
        total += cost;
        if timed_pick {
            timed.insert(at, index as u32);
            ts_tokens = new_ts;
        }
        picks.push(Pick {
            index: index as u32,
            timed: timed_pick,
        });
    }
}

/// Indices drawn uniformly without replacement from `offset .. offset + w`.
///
/// A window not much larger than the most a context can take is shuffled lazily in a
/// table (Fisher–Yates, one swap per draw); in a larger one, a repeat is rare, so
/// draws are rejected when already drawn (`table` then holds the draws).
struct WindowDraws<'a> {
    offset: u64,
    w: u64,
    drawn: u64,
    rng: CounterRng,
    table: &'a mut Vec<u64>,
    shuffled: bool,
}

impl<'a> WindowDraws<'a> {
    fn new(offset: u64, w: u64, most: u64, rng: CounterRng, table: &'a mut Vec<u64>) -> Self {
        let shuffled = w <= 2 * most;
        table.clear();
        if shuffled {
            table.extend(0..w);
        }
        WindowDraws {
            offset,
            w,
            drawn: 0,
            rng,
            table,
            shuffled,
        }
    }
}

impl Iterator for WindowDraws<'_> {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        if self.drawn == self.w {
            return None;
        }
        let v = if self.shuffled {
            let i = self.drawn as usize;
            let j = i + self.rng.below(self.w - self.drawn) as usize;
            self.table.swap(i, j);
            self.table[i]
        } else {
            loop {
                let v = self.rng.below(self.w);
                if !self.table.contains(&v) {
                    self.table.push(v);
                    break v;
                }
            }
        };
        self.drawn += 1;
        Some(self.offset + v)
    }
}

/// Puts a context's picks (`scratch.picks`) in output order: time order (full), random
/// order (none), or timed picks in time order with the others interleaved at random
/// (partial).
fn arrange<'s>(
    scratch: &'s mut SamplerScratch,
    mode: TimestampMode,
    rng: &mut CounterRng,
) -> &'s [Pick] {
    let SamplerScratch {
        picks,
        untimed,
        arranged,
        ..
    } = scratch;
    match mode {
        TimestampMode::Full => {
            picks.sort_unstable_by_key(|p| p.index);
            picks
        }
        TimestampMode::None => {
            picks.sort_unstable_by_key(|p| p.index);
            rng.shuffle(picks);
            picks
        }
        TimestampMode::Partial => {
            untimed.clear();
            untimed.extend(picks.iter().filter(|p| !p.timed));
            picks.retain(|p| p.timed);
            let timed = picks;
            timed.sort_unstable_by_key(|p| p.index);
            untimed.sort_unstable_by_key(|p| p.index);
            rng.shuffle(untimed);
            // A uniformly random interleaving: take from either side in proportion to
            // what is left.
            arranged.clear();
            let (mut a, mut b) = (timed.iter(), untimed.iter());
            let (mut left_a, mut left_b) = (a.len() as u64, b.len() as u64);
            while left_a + left_b > 0 {
                if rng.below(left_a + left_b) < left_a {
                    arranged.extend(a.next());
                    left_a -= 1;
                } else {
                    arranged.extend(b.next());
                    left_b -= 1;
                }
            }
            arranged
        }
    }
}

/// Tokenizes picks in order; a measurement that would overflow starts a new context
/// (whose first timestamp is absolute again).
#[allow(clippy::too_many_arguments)]
fn emit_split(
    row: &RowView<'_>,
    src: &FieldBlock,
    width: usize,
    picks: &[Pick],
    mode: TimestampMode,
    context_len: usize,
    rng: &mut CounterRng,
    out: &mut Contexts,
) {
    if picks.is_empty() {
        return;
    }
    out.tokens.reserve(context_len);
    let mut start = out.tokens.len();
    let mut previous: Option<u64> = None;
    for p in picks {
        let i = p.index as usize;
        let rtt = row.rtt(i);
        let ts = if p.timed {
            timestamp_after(previous, row.event_time(i))
        } else {
            Timestamp::None
        };
        let cost = base_tokens(width, rtt.is_none()) + ts.tokens();
        let ts = if out.tokens.len() - start + cost > context_len {
            out.ends.push(out.tokens.len());
            out.modes.push(mode);
            start = out.tokens.len();
            previous = None;
            if p.timed {
                Timestamp::Absolute(row.event_time(i))
            } else {
                Timestamp::None
            }
        } else {
            ts
        };
        let order = rng.below(24) as usize;
        encode_with_source(&mut out.tokens, src, row.dst_bytes(i), rtt, ts, order);
        if p.timed {
            previous = Some(row.event_time(i));
        }
    }
    out.ends.push(out.tokens.len());
    out.modes.push(mode);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::{decode_row, encode_row, Measurement, RttCode};
    use crate::tokenizer::detokenize;
    use std::net::IpAddr;

    fn row_bytes(src: &str, n: usize, seed: u64) -> Vec<u8> {
        let mut rng = CounterRng::new(seed);
        let v6 = src.contains(':');
        let mut t = 1_700_000_000u64;
        let ms: Vec<Measurement> = (0..n)
            .map(|i| {
                // Mostly small gaps, sometimes large ones (both delta sizes).
                t += if rng.below(10) == 0 {
                    300 + rng.below(100_000)
                } else {
                    rng.below(200)
                };
                let dst: IpAddr = if v6 {
                    format!("2001:db8::{:x}", rng.below(3000) + 1)
                        .parse()
                        .unwrap()
                } else {
                    format!("10.0.{}.{}", rng.below(12), rng.below(250))
                        .parse()
                        .unwrap()
                };
                Measurement {
                    event_time: t,
                    dst_addr: dst,
                    rtt: if i % 29 == 3 {
                        None
                    } else {
                        Some(RttCode((rng.below(1 << 14)) as u16))
                    },
                }
            })
            .collect();
        encode_row(src.parse().unwrap(), 0, &ms).unwrap().bytes
    }

    /// Every context decodes into measurements of the row with the right values and
    /// times, fits the budget, and follows its mode's ordering rules.
    fn check_row(bytes: &[u8], opts: &SamplerOptions, rows: u64) -> Vec<(TimestampMode, usize)> {
        let row = decode_row(bytes).unwrap();
        let mut stats = Vec::new();
        let by_key: std::collections::HashMap<(u64, Vec<u8>), Vec<usize>> = {
            let mut m: std::collections::HashMap<(u64, Vec<u8>), Vec<usize>> = Default::default();
            for i in 0..row.len() {
                m.entry((row.event_time(i), row.dst_bytes(i).to_vec()))
                    .or_default()
                    .push(i);
            }
            m
        };
        for r in 0..rows {
            let mut out = Contexts::default();
            sample_row(&row, [9, 1, r], opts, &mut out);
            assert!(!out.is_empty());
            for c in 0..out.len() {
                let toks = out.get(c);
                assert!(
                    toks.len() <= opts.context_len,
                    "context of {} tokens",
                    toks.len()
                );
                let ms = detokenize(toks).unwrap();
                assert!(!ms.is_empty());
                let mode = out.modes[c];
                let mut last_timed: Option<usize> = None;
                for m in &ms {
                    assert_eq!(m.src, row.meta.src_addr);
                    let dst = crate::row::addr::addr_octets(&m.dst);
                    match m.time {
                        Some(t) => {
                            let idx = by_key
                                .get(&(t, dst.clone()))
                                .expect("measurement in the row");
                            assert!(idx.iter().any(|&i| row.rtt(i) == m.rtt));
                            let i = idx[0];
                            if let Some(p) = last_timed {
                                assert!(
                                    row.event_time(p) <= row.event_time(i),
                                    "timed out of order"
                                );
                            }
                            last_timed = Some(i);
                        }
                        None => {
                            assert!(mode != TimestampMode::Full);
                            assert!(
                                (0..row.len())
                                    .any(|i| row.dst_bytes(i) == dst.as_slice()
                                        && row.rtt(i) == m.rtt)
                            );
                        }
                    }
                    if mode == TimestampMode::None {
                        assert!(m.time.is_none());
                    }
                }
                stats.push((mode, ms.len()));
            }
        }
        stats
    }

    #[test]
    fn contexts_decode_into_the_rows_measurements() {
        let opts = SamplerOptions::default();
        for (src, n) in [
            ("192.0.2.1", 5),
            ("192.0.2.1", 33),
            ("2001:db8::7", 20),
            ("192.0.2.1", 2000),
            ("2001:db8::7", 5000),
        ] {
            check_row(&row_bytes(src, n, n as u64), &opts, 40);
        }
        let stride = SamplerOptions {
            strategy: Strategy::GeometricStride,
            ..Default::default()
        };
        check_row(&row_bytes("192.0.2.1", 3000, 1), &stride, 40);
    }

    #[test]
    fn small_rows_use_every_measurement_once() {
        let opts = SamplerOptions {
            context_len: 128,
            ..Default::default()
        };
        // 128 / 30 = 4: rows under 4 measurements are small; overflow starts a context.
        let bytes = row_bytes("2001:db8::1", 3, 5);
        let row = decode_row(&bytes).unwrap();
        for r in 0..50 {
            let mut out = Contexts::default();
            sample_row(&row, [1, 0, r], &opts, &mut out);
            let total: usize = (0..out.len())
                .map(|c| detokenize(out.get(c)).unwrap().len())
                .sum();
            assert_eq!(total, 3);
        }
    }

    #[test]
    fn mode_frequencies_and_field_orders_match_the_design() {
        let opts = SamplerOptions::default();
        let bytes = row_bytes("192.0.2.1", 3000, 3);
        let row = decode_row(&bytes).unwrap();
        let mut modes = [0u32; 3];
        let mut orders = std::collections::HashMap::<Vec<crate::tokenizer::Field>, u32>::new();
        let mut windows_small = 0u32;
        let rows = 2000u64;
        let mut total = 0u32;
        for r in 0..rows {
            let mut out = Contexts::default();
            sample_row(&row, [5, 0, r], &opts, &mut out);
            for c in 0..out.len() {
                total += 1;
                modes[match out.modes[c] {
                    TimestampMode::Full => 0,
                    TimestampMode::Partial => 1,
                    TimestampMode::None => 2,
                }] += 1;
                let ms = detokenize(out.get(c)).unwrap();
                if ms.len() < 10 {
                    windows_small += 1;
                }
                for m in ms.iter().filter(|m| m.time.is_some()) {
                    *orders.entry(m.fields.clone()).or_default() += 1;
                }
            }
        }
        // 16 contexts per row (3000 / 30 > 16).
        assert_eq!(total, 16 * rows as u32);
        for (count, p) in modes.iter().zip([0.4, 0.3, 0.3]) {
            let expected = p * f64::from(total);
            let sigma = (f64::from(total) * p * (1.0 - p)).sqrt();
            assert!(
                (f64::from(*count) - expected).abs() < 5.0 * sigma,
                "{modes:?}"
            );
        }
        // Timestamped measurements: all 24 orders, equally often.
        assert_eq!(orders.len(), 24);
        let sum: u32 = orders.values().sum();
        let expected = f64::from(sum) / 24.0;
        for (order, count) in &orders {
            assert!(
                (f64::from(*count) - expected).abs() < 5.0 * expected.sqrt(),
                "{order:?}: {count} vs {expected}"
            );
        }
        // Log-uniform windows over [1, 3000]: P(w < 10) = ln 10 / ln 3001 ≈ 0.29; contexts
        // with fewer than 10 measurements come from those windows.
        let frac = f64::from(windows_small) / f64::from(total);
        assert!((frac - 0.288).abs() < 0.03, "{frac}");
    }

    #[test]
    fn same_key_same_contexts() {
        let bytes = row_bytes("192.0.2.1", 500, 9);
        let row = decode_row(&bytes).unwrap();
        let opts = SamplerOptions::default();
        let (mut a, mut b, mut c) = (
            Contexts::default(),
            Contexts::default(),
            Contexts::default(),
        );
        sample_row(&row, [1, 2, 3], &opts, &mut a);
        sample_row(&row, [1, 2, 3], &opts, &mut b);
        sample_row(&row, [1, 3, 3], &opts, &mut c);
        assert_eq!(a.tokens, b.tokens);
        assert_ne!(a.tokens, c.tokens);
    }
}
