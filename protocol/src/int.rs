//! Strict decimal integers, as Redis's `string2ll` reads them.
//!
//! Accepted: an optional `-`, then digits with no leading zero (except `0`
//! itself), within `i64`. Rejected: `+1`, `01`, `-0`, spaces, `1e3`, empty.
//! These rules decide what `INCR` accepts and how `$len` headers parse.

/// Parses `s` strictly; `None` when it is not a canonical `i64`.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (neg, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || digits[0] == b'0' {
        return None;
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            None
        } else {
            Some((v as i64).wrapping_neg())
        }
    } else {
        i64::try_from(v).ok()
    }
}

/// Parses `s` as a non-negative strict integer that fits `u64`.
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.first() == Some(&b'-') {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    if s.is_empty() || s[0] == b'0' || s.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &d in s {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(v)
}

/// Parses a float the way Redis's `string2ld` does for INCRBYFLOAT: no leading
/// or trailing space, finite (no `nan`/`inf`), and the whole string consumed.
pub fn parse_f64(s: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(s).ok()?;
    if text.is_empty()
        || text.starts_with(char::is_whitespace)
        || text.ends_with(char::is_whitespace)
    {
        return None;
    }
    let lower = text.to_ascii_lowercase();
    if lower.contains("nan") {
        return None;
    }
    let v: f64 = text.parse().ok()?;
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_integers() {
        for bad in [
            "    11",
            "11    ",
            "+1",
            "01",
            "-0",
            "1e3",
            "",
            "-",
            "9223372036854775808",
        ] {
            assert_eq!(parse_i64(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"-1"), None);
    }

    #[test]
    fn floats() {
        assert_eq!(parse_f64(b"1e3"), Some(1000.0));
        assert_eq!(parse_f64(b" 11 "), None);
        assert_eq!(parse_f64(b"nan"), None);
        assert_eq!(parse_f64(b"0.5"), Some(0.5));
    }
}
