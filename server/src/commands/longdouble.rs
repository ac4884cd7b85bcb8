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
//! nearest with ties to even, as the x87 unit and glibc do. Values beyond
//! the format's range (about 1.19e4932), and nonzero ones that round to
//! zero (under about 1.82e-4951), are refused as `strtold`'s range errors
//! are; subnormals (below about 3.36e-4932) are values, as in Redis.

use num_bigint::{BigInt, BigUint, Sign};

/// Bits of the mantissa.
const MANTISSA: u64 = 64;
/// The largest binary exponent of the leading bit (x87: 16383).
const MAX_EXP: i64 = 16383;
/// The smallest binary exponent of the leading bit of a normal value.
const MIN_EXP: i64 = -16382;
/// The binary exponent of the least subnormal's bit (2^-16445): no value
/// has a bit below it.
const LEAST_BIT: i64 = MIN_EXP - (MANTISSA as i64 - 1);
/// Exponents (decimal or binary) past which a value is out of range
/// whatever its digits (which are fewer than [`MAX_CHARS`]).
const EXP_LIMIT: i64 = 20_000;
/// `string2ld`'s buffer (Redis's `MAX_LONG_DOUBLE_CHARS`, 5 kB): a string
/// of this many bytes or more is not a float.
pub const MAX_CHARS: usize = 5 * 1024;

/// A finite x87 extended value: `(-1)^negative * mantissa * 2^exp`, the
/// mantissa of [`MANTISSA`] bits with its top bit set, or a subnormal
/// (`exp` is [`LEAST_BIT`], the top bit clear), or zero.
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

/// The value a missing key or field counts as.
pub const ZERO: Parsed = Parsed::Finite(LongDouble::zero(false));

/// `x / 2^shift` (`shift` at least 1) rounded to the nearest, ties to
/// even; `sticky`: nonzero bits were dropped below `x` already (so a
/// seeming tie is above half).
fn round_shifted(x: &BigUint, shift: usize, sticky: bool) -> BigUint {
    let q = x >> shift;
    let low = x - (&q << shift);
    let half = BigUint::from(1u32) << (shift - 1);
    match low > half || (low == half && (sticky || q.bit(0))) {
        true => q + 1u32,
        false => q,
    }
}

/// Reads a float as Redis's `string2ld` does with glibc's `strtold`: at
/// most [`MAX_CHARS`] - 1 bytes, no surrounding space, no `nan`, the whole
/// string a decimal number (`[+-]digits[.digits][e[+-]digits]`, a digit on
/// at least one side of the point), a C99 hexadecimal one
/// (`[+-]0x hexdigits[.hexdigits][p[+-]digits]`) or an infinity, and
/// neither past the long double range nor so small it rounds to zero (a
/// subnormal is a value). `None` for anything else.
pub fn parse(s: &[u8]) -> Option<Parsed> {
    if s.len() >= MAX_CHARS {
        return None;
    }
    let (negative, rest) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest.eq_ignore_ascii_case(b"inf") || rest.eq_ignore_ascii_case(b"infinity") {
        return Some(Parsed::Infinite);
    }
    let hex = rest.len() > 2 && rest[0] == b'0' && matches!(rest[1], b'x' | b'X');
    let (radix, marker, rest) = match hex {
        true => (16, [b'p', b'P'], &rest[2..]),
        false => (10, [b'e', b'E'], rest),
    };
    let mut digits = Vec::with_capacity(rest.len());
    let mut i = 0;
    let mut point = None;
    while let Some(&c) = rest.get(i) {
        match (c as char).to_digit(radix) {
            Some(d) => digits.push(d as u8),
            None if c == b'.' && point.is_none() => point = Some(digits.len()),
            None => break,
        }
        i += 1;
    }
    if digits.is_empty() {
        return None;
    }
    // The exponent of the radix the digits after the point take off.
    let fraction = (digits.len() - point.unwrap_or(digits.len())) as i64;
    let mut exp: i64 = 0;
    if rest.get(i).is_some_and(|c| marker.contains(c)) {
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
        while let Some(&c) = rest.get(i).filter(|c| c.is_ascii_digit()) {
            exp = (exp * 10 + i64::from(c - b'0')).min(EXP_LIMIT * 10);
            i += 1;
        }
        if i == start {
            return None;
        }
        if minus {
            exp = -exp;
        }
    }
    if i != rest.len() {
        return None;
    }
    let n = BigUint::from_radix_be(&digits, radix)?;
    if n.bits() == 0 {
        return Some(Parsed::Finite(LongDouble::zero(negative)));
    }
    // Each hexadecimal digit is 4 bits, and `exp` counts powers of two.
    let (scale, digit_width) = match hex {
        true => (exp - 4 * fraction, 4),
        false => (exp - fraction, 1),
    };
    // Out of range whatever the digits: strtold's range error (leading
    // zeros count for nothing).
    let significant = digits.iter().skip_while(|&&d| d == 0).count() as i64;
    let magnitude = scale + digit_width * significant;
    if !(-EXP_LIMIT..=EXP_LIMIT).contains(&magnitude) {
        return None;
    }
    let value = match hex {
        true => LongDouble::nearest(negative, n, BigUint::from(1u32), scale),
        false => {
            let ten = BigUint::from(10u32);
            let (num, den) = match scale >= 0 {
                true => (n * ten.pow(scale as u32), BigUint::from(1u32)),
                false => (n, ten.pow((-scale) as u32)),
            };
            LongDouble::nearest(negative, num, den, 0)
        }
    }?;
    // A nonzero number that rounds to zero is strtold's range error.
    (value.mantissa != 0).then_some(Parsed::Finite(value))
}

impl LongDouble {
    const fn zero(negative: bool) -> LongDouble {
        LongDouble {
            negative,
            mantissa: 0,
            exp: 0,
        }
    }

    /// The value nearest to `num / den * 2^exp` (ties to even), or `None`
    /// past the range. Below the normal range the value is subnormal (no
    /// bit below 2^[`LEAST_BIT`], so fewer mantissa bits), and zero when it
    /// is under half the least subnormal, as the x87 unit and glibc round.
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
        let q_exp = exp - shift;
        // Bits of q dropped: all but MANTISSA, and more below the normal range.
        let extra = (q.bits() as i64 - MANTISSA as i64).max(LEAST_BIT - q_exp) as u64;
        let kept = round_shifted(&q, extra as usize, r.bits() > 0);
        let mut e = q_exp + extra as i64;
        let m = match u64::try_from(&kept) {
            Ok(m) => m,
            Err(_) => {
                // The mantissa carried out of its 64 bits: 2^64.
                e += 1;
                1 << (MANTISSA - 1)
            }
        };
        if m == 0 {
            return Some(LongDouble::zero(negative));
        }
        (e + MANTISSA as i64 - 1 <= MAX_EXP).then_some(LongDouble {
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
        let scaled = BigUint::from(self.mantissa) * 10u64.pow(DECIMALS as u32);
        let digits = match self.exp >= 0 {
            true => scaled << self.exp as usize,
            false => round_shifted(&scaled, (-self.exp) as usize, false),
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
            "", " 1", "1 ", "nan", "1e", "1e+", ".", "-", "1..2", "1\0", "e5", "0x", "0x.p1",
            "0x1p", "0x1p+", "0x1p1.5", "0x1e+5", "0xg", "0x1 ",
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

    /// `strtold` reads C99 hexadecimal floats, so Redis takes them; each
    /// sum as redis-server 7.0.15 answers `SET k 0` then `INCRBYFLOAT k x`.
    #[test]
    fn hexadecimal_floats_as_strtold_reads_them() {
        for (hex, redis) in [
            ("0x1p3", "8"),
            ("0X1.8P1", "3"),
            ("0x.8", "0.5"),
            ("-0x10", "-16"),
            ("0x1.p1", "2"),
            ("0x1e", "30"),
            ("0x1p+3", "8"),
            ("0xAbC.dEfp-2", "687.21771240234375"),
            ("0x1P-60", "0"),
            // Past 64 bits: to the nearest, ties to even.
            ("0x10000000000000001", "18446744073709551616"),
            ("0x10000000000000003", "18446744073709551620"),
            ("0x1.00000000000000018p64", "18446744073709551618"),
            ("0x1.000000000000000081p64", "18446744073709551616"),
            ("0x0p99999999999999999999", "0"),
        ] {
            assert_eq!(sum("0", hex).as_deref(), Some(redis), "{hex}");
        }
        assert!(sum("0", "0x1p16383")
            .unwrap()
            .starts_with("59486574767861588254"));
        // Leading zeros are no magnitude: 2^-20004 * 2^20000.
        let zeros = format!("0x0.{}1p20000", "0".repeat(5000));
        assert_eq!(sum("0", &zeros).as_deref(), Some("0.0625"));
        assert_eq!(parse(b"0x1p16384"), None, "overflow");
        assert_eq!(parse(b"0x1p-99999999999999999999"), None, "underflow");
    }

    /// `strtold` returns a subnormal (with ERANGE, which `string2ld` lets
    /// through when the value is not zero): Redis takes it, and a sum that
    /// falls below the normal range is a value, not an overflow.
    #[test]
    fn subnormals_are_values() {
        for tiny in [
            "1e-4940",
            "-1e-4940",
            "3.36e-4932",
            "0x1p-16445",
            "0x1.8p-16446",
        ] {
            assert_eq!(sum("0", tiny).as_deref(), Some("0"), "{tiny}");
        }
        assert_eq!(sum("3.4e-4932", "-3.3e-4932").as_deref(), Some("0"));
        assert_eq!(sum("1e-4940", "1.5").as_deref(), Some("1.5"));
        // Half the least subnormal (2^-16446) rounds to even, zero: a range
        // error; a hair more rounds up to 2^-16445.
        assert_eq!(parse(b"0x1p-16446"), None);
        assert_eq!(parse(b"1.822599765941237301264202966809709908e-4951"), None);
        assert!(parse(b"1.822599765941237301264202966809709909e-4951").is_some());
    }

    /// `string2ld` copies into a 5 kB buffer (`MAX_LONG_DOUBLE_CHARS`):
    /// 5120 bytes or more is not a float, whatever they say.
    #[test]
    fn at_most_5119_bytes() {
        let one = |zeros: usize| format!("1.{}", "0".repeat(zeros));
        assert_eq!(one(5117).len(), 5119);
        assert_eq!(sum(&one(5117), "1").as_deref(), Some("2"));
        assert_eq!(parse(one(5118).as_bytes()), None);
    }
}
