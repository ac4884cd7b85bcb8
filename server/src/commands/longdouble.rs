//! INCRBYFLOAT and HINCRBYFLOAT's arithmetic, exactly as Redis does it on
//! x86-64: both numbers are read as C `long double`s (the x87 80-bit
//! format, a 64-bit mantissa, by `strtold`), added in that format, and the
//! sum printed with `%.17Lf` (17 digits after the point), trailing zeros
//! and a bare point removed, `-0` printed `0` (Redis's `ld2string` in its
//! human mode). So `0.1 + 0.2` is `0.3`, `1.0000000000000002` stays
//! itself, and `1e-20` is `0`, as in Redis.
//!
//! Rust has no 80-bit float, so a value is kept as its exact 64-bit
//! mantissa and binary exponent, and every rounding (decimal to binary,
//! the sum, binary to 17 decimals) is done exactly on big integers, to the
//! nearest with ties to even, as the x87 unit and glibc do. Values outside
//! the format's normal range (beyond about 1.19e4932, or nonzero below
//! about 3.36e-4932) are refused as `strtold`'s range errors are.

use num_bigint::{BigInt, BigUint, Sign};

/// Bits of the mantissa.
const MANTISSA: u64 = 64;
/// The largest binary exponent of the leading bit (x87: 16383).
const MAX_EXP: i64 = 16383;
/// The smallest binary exponent of the leading bit of a normal value.
const MIN_EXP: i64 = -16382;
/// Decimal exponents past which a value is out of range whatever its digits
/// (a string is at most a few kB long).
const DECIMAL_EXP_LIMIT: i64 = 20_000;

/// A finite x87 extended value: `(-1)^negative * mantissa * 2^exp`, the
/// mantissa of [`MANTISSA`] bits with its top bit set, or zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LongDouble {
    negative: bool,
    mantissa: u64,
    exp: i64,
}

/// A parsed number: finite, or an infinity (`inf`, `infinity`), which the
/// commands refuse once added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A finite value.
    Finite(LongDouble),
    /// `inf` or `-inf`.
    Infinite,
}

/// Reads a float as Redis's `string2ld` does: no surrounding space, no
/// `nan`, the whole string a decimal number (`[+-]digits[.digits][e[+-]digits]`,
/// a digit on at least one side of the point) or an infinity, and within
/// the long double range. `None` for anything else.
pub fn parse(s: &[u8]) -> Option<Parsed> {
    let (negative, rest) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest.eq_ignore_ascii_case(b"inf") || rest.eq_ignore_ascii_case(b"infinity") {
        return Some(Parsed::Infinite);
    }
    let mut digits = Vec::with_capacity(rest.len());
    let mut i = 0;
    let mut point = None;
    while let Some(&c) = rest.get(i) {
        match c {
            b'0'..=b'9' => digits.push(c - b'0'),
            b'.' if point.is_none() => point = Some(digits.len()),
            _ => break,
        }
        i += 1;
    }
    if digits.is_empty() {
        return None;
    }
    let mut exp10 = -((digits.len() - point.unwrap_or(digits.len())) as i64);
    if matches!(rest.get(i), Some(b'e' | b'E')) {
        i += 1;
        let minus = match rest.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let start = i;
        let mut e: i64 = 0;
        while let Some(&c) = rest.get(i).filter(|c| c.is_ascii_digit()) {
            e = (e * 10 + i64::from(c - b'0')).min(DECIMAL_EXP_LIMIT * 10);
            i += 1;
        }
        if i == start {
            return None;
        }
        exp10 += if minus { -e } else { e };
    }
    if i != rest.len() {
        return None;
    }
    let n = BigUint::from_radix_be(&digits, 10)?;
    if n.bits() == 0 {
        return Some(Parsed::Finite(LongDouble::zero(negative)));
    }
    // Out of range whatever the digits: strtold's range error.
    let magnitude = exp10 + digits.len() as i64;
    if !(-DECIMAL_EXP_LIMIT..=DECIMAL_EXP_LIMIT).contains(&magnitude) {
        return None;
    }
    let ten = BigUint::from(10u32);
    let (num, den) = match exp10 >= 0 {
        true => (n * ten.pow(exp10 as u32), BigUint::from(1u32)),
        false => (n, ten.pow((-exp10) as u32)),
    };
    LongDouble::nearest(negative, num, den, 0).map(Parsed::Finite)
}

impl LongDouble {
    fn zero(negative: bool) -> LongDouble {
        LongDouble {
            negative,
            mantissa: 0,
            exp: 0,
        }
    }

    /// The value nearest to `num / den * 2^exp` (ties to even), or `None`
    /// past the range.
    fn nearest(negative: bool, num: BigUint, den: BigUint, exp: i64) -> Option<LongDouble> {
        if num.bits() == 0 {
            return Some(LongDouble::zero(negative));
        }
        // Scale so that the quotient has at least MANTISSA + 2 bits.
        let shift = (MANTISSA as i64 + 2 + den.bits() as i64 - num.bits() as i64).max(0);
        let (q, r) = {
            let scaled = num << shift as usize;
            (&scaled / &den, &scaled % &den)
        };
        let extra = q.bits() - MANTISSA;
        let low = &q & ((BigUint::from(1u32) << extra as usize) - 1u32);
        let mut m = u64::try_from(&q >> extra as usize).expect("64 bits left");
        let half = BigUint::from(1u32) << (extra as usize - 1);
        let sticky = r.bits() > 0;
        if low > half || (low == half && (sticky || m & 1 == 1)) {
            m = m.wrapping_add(1);
        }
        let mut e = exp - shift + extra as i64;
        if m == 0 {
            // The mantissa carried out of its 64 bits.
            m = 1 << (MANTISSA - 1);
            e += 1;
        }
        let lead = e + MANTISSA as i64 - 1;
        (MIN_EXP..=MAX_EXP).contains(&lead).then_some(LongDouble {
            negative,
            mantissa: m,
            exp: e,
        })
    }

    fn signed(&self) -> BigInt {
        let sign = if self.negative {
            Sign::Minus
        } else {
            Sign::Plus
        };
        BigInt::from_biguint(sign, BigUint::from(self.mantissa))
    }

    /// `self + other` rounded to the format, as the x87 unit adds; `None`
    /// when it overflows. A zero sum is `+0` unless both were `-0`.
    pub fn add(&self, other: &LongDouble) -> Option<LongDouble> {
        if self.mantissa == 0 || other.mantissa == 0 {
            let (zero, x) = if self.mantissa == 0 {
                (self, other)
            } else {
                (other, self)
            };
            if x.mantissa != 0 {
                return Some(x.clone());
            }
            return Some(LongDouble::zero(zero.negative && x.negative));
        }
        let low = self.exp.min(other.exp);
        let aligned = |x: &LongDouble| x.signed() << (x.exp - low) as usize;
        let sum = aligned(self) + aligned(other);
        let (sign, magnitude) = sum.into_parts();
        LongDouble::nearest(sign == Sign::Minus, magnitude, BigUint::from(1u32), low)
    }

    /// `%.17Lf` with trailing zeros and a bare point removed, `-0` as `0`:
    /// Redis's `ld2string` in its human mode.
    pub fn human(&self) -> String {
        const DECIMALS: usize = 17;
        let scaled = BigUint::from(self.mantissa) * BigUint::from(10u32).pow(DECIMALS as u32);
        let digits = match self.exp >= 0 {
            true => scaled << self.exp as usize,
            false => {
                let shift = (-self.exp) as usize;
                let q = &scaled >> shift;
                let low = &scaled - (&q << shift);
                let half = BigUint::from(1u32) << (shift - 1);
                let odd = q.bit(0);
                match low > half || (low == half && odd) {
                    true => q + 1u32,
                    false => q,
                }
            }
        };
        let mut text = format!("{:0>width$}", digits.to_str_radix(10), width = DECIMALS + 1);
        text.insert(text.len() - DECIMALS, '.');
        let kept = text.trim_end_matches('0').trim_end_matches('.').len();
        text.truncate(kept);
        match (self.negative, text.as_str()) {
            (_, "0") | (false, _) => text,
            (true, _) => format!("-{text}"),
        }
    }
}

/// INCRBYFLOAT's sum of `current` and `delta` (both as stored or sent) in
/// Redis's text, or `None` when it is not finite (Redis's "increment would
/// produce NaN or Infinity").
pub fn add_texts(current: &Parsed, delta: &Parsed) -> Option<String> {
    match (current, delta) {
        (Parsed::Finite(a), Parsed::Finite(b)) => a.add(b).map(|v| v.human()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(a: &str, b: &str) -> Option<String> {
        add_texts(&parse(a.as_bytes()).unwrap(), &parse(b.as_bytes()).unwrap())
    }

    /// Each pair's sum as redis-server 7.0.15 on x86-64 answers
    /// `SET k a` then `INCRBYFLOAT k b`.
    #[test]
    fn sums_as_redis_prints_them() {
        for (a, b, redis) in [
            ("0", "0.1", "0.1"),
            ("0.1", "0.2", "0.3"),
            ("0", "1.0000000000000002", "1.0000000000000002"),
            ("0", "0.10000000000000001", "0.10000000000000001"),
            ("10.5", "0.1", "10.6"),
            ("5.0e3", "2.0e2", "5200"),
            ("0", "1e-20", "0"),
            ("0", "-1e-20", "0"),
            ("-0", "-0", "0"),
            ("1", "-1", "0"),
            ("3.0", "-1.5", "1.5"),
            ("0", "123456789012345678", "123456789012345678"),
            ("0", "1e20", "100000000000000000000"),
            ("1", "0.00000000000000001", "1.00000000000000001"),
        ] {
            assert_eq!(sum(a, b).as_deref(), Some(redis), "{a} + {b}");
        }
    }

    #[test]
    fn what_strtold_refuses_is_refused() {
        for bad in [
            "", " 1", "1 ", "nan", "1e", "1e+", ".", "-", "1..2", "0x10", "1\0", "e5",
        ] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(parse(b"1e99999"), None, "overflow");
        assert_eq!(parse(b"1e-99999"), None, "underflow");
        assert_eq!(parse(b"inf"), Some(Parsed::Infinite));
        assert_eq!(parse(b"-Infinity"), Some(Parsed::Infinite));
        assert_eq!(sum("1", "inf"), None);
        // Within the long double range though past a double's.
        assert!(sum("0", "1e400")
            .unwrap()
            .starts_with("1000000000000000000"));
        assert_eq!(sum("1e4932", "1e4932"), None, "the sum overflows");
    }

    #[test]
    fn mantissa_rounding_ties_to_even() {
        // 2^64 + 1 is halfway between two values 2 apart: to even, 2^64.
        assert_eq!(
            sum("18446744073709551617", "0").unwrap(),
            "18446744073709551616"
        );
        // 2^64 + 3: halfway, to even, 2^64 + 4.
        assert_eq!(
            sum("18446744073709551619", "0").unwrap(),
            "18446744073709551620"
        );
    }
}
