//! The 2-byte RTT code: a float RTT in milliseconds becomes 5 bits of exponent and 11
//! bits of mantissa over microseconds, so 1 µs to ~4.4 × 10¹² µs fit with < 0.05 %
//! relative error.
//!
//! `us = max(1, rtt_ms × 1000)`; `e` = the number of halvings until the value is below
//! 2048 (at most 31); `m = min(floor(value), 2047)`; the code is `e << 11 | m`, stored
//! high byte first (`byte1 = e << 3 | m >> 8`, `byte2 = m & 0xff`); it decodes to
//! `m × 2^e` µs. A negative RTT is a failed ping (no code); NaN is invalid input.

use crate::error::{Error, Result};

#[cold]
fn nan_rtt() -> Error {
    Error::Input("RTT is NaN".into())
}

/// An encoded RTT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RttCode(pub u16);

/// Mantissa bits: values are halved until they are below 2^11 = 2048.
const MANTISSA_BITS: i32 = 11;
const MAX_EXPONENT: u16 = 31;

impl RttCode {
    /// Encodes an RTT in milliseconds: `Ok(None)` for a failed ping (negative RTT),
    /// an error for NaN.
    ///
    /// Always inlined: the job encodes every input row's RTT, and a call returns the
    /// (large) `Result` through memory.
    #[inline(always)]
    pub fn from_ms(rtt_ms: f64) -> Result<Option<RttCode>> {
        if rtt_ms.is_nan() {
            return Err(nan_rtt());
        }
        if rtt_ms < 0.0 {
            return Ok(None);
        }
        let value = (rtt_ms * 1000.0).max(1.0);
        // The number of halvings until the value is below 2048 (at most 31), read off
        // the binary exponent (value ≥ 1). Halving e times is multiplying by 2^-e, built
        // from its exponent bits: exact, as dividing by 2^e is (no result is subnormal).
        let log2 = ((value.to_bits() >> 52) & 0x7ff) as i32 - 1023;
        let e = (log2 - (MANTISSA_BITS - 1)).clamp(0, i32::from(MAX_EXPONENT)) as u16;
        let halved = value * f64::from_bits((1023 - u64::from(e)) << 52);
        let m = halved.floor().min(2047.0) as u16;
        Ok(Some(RttCode((e << 11) | m)))
    }

    pub fn exponent(self) -> u32 {
        u32::from(self.0 >> 11)
    }

    pub fn mantissa(self) -> u64 {
        u64::from(self.0 & 0x7ff)
    }

    /// The decoded RTT in microseconds (`m × 2^e`).
    pub fn micros(self) -> u64 {
        self.mantissa() << self.exponent()
    }

    /// The decoded RTT in milliseconds.
    pub fn millis(self) -> f64 {
        self.micros() as f64 / 1000.0
    }

    /// The two token bytes, high byte first.
    pub fn to_bytes(self) -> [u8; 2] {
        self.0.to_be_bytes()
    }

    pub fn from_bytes(bytes: [u8; 2]) -> RttCode {
        RttCode(u16::from_be_bytes(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(ms: f64) -> RttCode {
        RttCode::from_ms(ms).unwrap().unwrap()
    }

    /// The definition of docs/format.md, section 4.6, step by step.
    fn by_halving(ms: f64) -> RttCode {
        let mut value = (ms * 1000.0).max(1.0);
        let mut e = 0u16;
        while value >= 2048.0 && e < 31 {
            value /= 2.0;
            e += 1;
        }
        RttCode((e << 11) | value.floor().min(2047.0) as u16)
    }

    #[test]
    fn matches_the_halving_definition() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut values = vec![
            0.0,
            0.001,
            1.0,
            2.047,
            2.048,
            2.049,
            4.095,
            4.096,
            1e9,
            1e30,
            f64::INFINITY,
            f64::MAX,
        ];
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Log-uniform over 1 µs .. 10^7 s, plus exact powers of two around the edges.
            values.push(10f64.powf((x % 1_000_000) as f64 / 1_000_000.0 * 13.0 - 3.0));
            values.push(2f64.powi((x % 60) as i32 - 10));
        }
        for ms in values {
            assert_eq!(code(ms), by_halving(ms), "{ms} ms");
        }
    }

    #[test]
    fn small_values_are_exact() {
        assert_eq!(code(0.0).micros(), 1, "0 ms clamps to 1 µs");
        assert_eq!(code(-0.0).micros(), 1, "negative zero is not a failure");
        assert_eq!(code(0.0004).micros(), 1);
        assert_eq!(code(0.001).micros(), 1);
        assert_eq!(code(2.047).micros(), 2047);
        assert_eq!(code(2.047).to_bytes(), [0x07, 0xff]);
        assert_eq!(code(2.048).exponent(), 1);
        assert_eq!(code(2.048).micros(), 2048);
    }

    #[test]
    fn typical_values_are_close() {
        for ms in [0.5, 1.0, 12.345, 37.2, 150.0, 999.9, 3000.0, 65_000.0] {
            let back = code(ms).millis();
            assert!((back - ms).abs() / ms < 1.0 / 1024.0, "{ms} -> {back}");
            assert!(back <= ms, "decoding rounds down: {ms} -> {back}");
        }
    }

    #[test]
    fn bytes_follow_the_documented_layout() {
        let c = code(150.0); // 150000 µs = 1171.875 × 2^7
        assert_eq!(c.exponent(), 7);
        assert_eq!(c.mantissa(), 1171);
        let [b1, b2] = c.to_bytes();
        assert_eq!(b1, (7 << 3) | (1171 >> 8) as u8);
        assert_eq!(b2, (1171 & 0xff) as u8);
        assert_eq!(RttCode::from_bytes([b1, b2]), c);
    }

    #[test]
    fn failures_and_invalid_values() {
        assert_eq!(RttCode::from_ms(-1.0).unwrap(), None);
        assert_eq!(RttCode::from_ms(f64::NEG_INFINITY).unwrap(), None);
        assert!(RttCode::from_ms(f64::NAN).is_err());
    }

    #[test]
    fn huge_values_saturate() {
        let max = code(f64::INFINITY);
        assert_eq!(max.exponent(), 31);
        assert_eq!(max.mantissa(), 2047);
        assert_eq!(code(1e300), max);
        assert_eq!(max.micros(), 2047u64 << 31);
    }

    #[test]
    fn encoding_is_monotonic() {
        let mut prev = code(0.0);
        let mut ms = 0.0001;
        while ms < 1e10 {
            let c = code(ms);
            assert!(c.micros() >= prev.micros(), "{ms}");
            prev = c;
            ms *= 1.01;
        }
    }
}
