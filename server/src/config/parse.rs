//! Parameter values: the kinds a parameter can be ([`Kind`]), one parse
//! function per kind, and how a parsed [`Value`] is shown and stored.
//!
//! A parse function takes text as CONFIG SET, a command-line flag or a
//! rendered TOML value gives it, checks it, and answers the [`Value`] or
//! Redis 7's CONFIG SET error text for it (a `&'static str`, the reason after
//! `CONFIG SET failed (possibly related to argument '<name>') - `).

/// Redis's text for a value that is not an integer.
pub const NOT_INTEGER: &str = "argument couldn't be parsed into an integer";
/// Redis's text for a value that is not a memory size.
pub const NOT_MEMORY: &str = "argument must be a memory value";
/// Redis's text for a boolean that is neither `yes` nor `no`.
pub const NOT_BOOL: &str = "argument must be 'yes' or 'no'";
/// Redis's text for a `loglevel` it does not know (Redis lists only its own
/// names, though tracing levels and directives are taken too).
pub const NOT_LOG_LEVEL: &str =
    "argument(s) must be one of the following: debug, verbose, notice, warning";

/// A parsed parameter value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// An integer; memory sizes in bytes.
    Int(i64),
    /// A boolean (`yes` / `no`).
    Bool(bool),
    /// A string: an address, a password, a log level.
    Text(String),
}

impl Value {
    /// The integer, if this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// The value as CONFIG GET answers it: integers (memory sizes too) in
    /// decimal, booleans `yes` or `no`, strings as they are.
    pub fn render(&self) -> String {
        match self {
            Value::Int(n) => n.to_string(),
            Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
            Value::Text(s) => s.clone(),
        }
    }

    /// The value as the TOML file holds it (an integer, a boolean, a string).
    pub fn to_toml(&self) -> toml::Value {
        match self {
            Value::Int(n) => toml::Value::Integer(*n),
            Value::Bool(b) => toml::Value::Boolean(*b),
            Value::Text(s) => toml::Value::String(s.clone()),
        }
    }
}

/// The allowed integers `min..=max` of a parameter, with Redis's error text
/// for a value outside them. Build it with `range!(min, max)` so the text is made
/// from the same two numbers as the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// Smallest allowed value.
    pub min: i64,
    /// Largest allowed value.
    pub max: i64,
    /// `argument must be between <min> and <max> inclusive`.
    pub error: &'static str,
}

/// `range!(min, max)`: a [`Range`] from two integer literals.
macro_rules! range {
    ($min:literal, $max:literal) => {
        $crate::config::parse::Range {
            min: $min,
            max: $max,
            error: concat!(
                "argument must be between ",
                $min,
                " and ",
                $max,
                " inclusive"
            ),
        }
    };
}
pub(crate) use range;

impl Range {
    /// The range as a startup error shows it: `1..=100`, or `at least 1024`
    /// when there is no upper bound but the type's.
    pub fn describe(&self) -> String {
        if self.max == i64::MAX {
            format!("at least {}", self.min)
        } else {
            format!("{}..={}", self.min, self.max)
        }
    }
}

/// How a parameter's text is parsed and checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A strict integer (Redis's `string2ll`: no `+`, no spaces, no leading
    /// zeros) in the range.
    Int(Range),
    /// An integer in the range, then clamped to `lo..=hi` (Redis's `hz`:
    /// 0..=2147483647 is taken, 1..=500 is kept).
    Clamped {
        /// What is taken.
        range: Range,
        /// Smallest value kept.
        lo: i64,
        /// Largest value kept.
        hi: i64,
    },
    /// A size in bytes as redis.conf writes it: digits with an optional
    /// unit `b`, `k` (1000), `kb` (1024), `m`, `mb`, `g`, `gb` in any case,
    /// at least `range.min` (its `max` is always `i64::MAX`).
    Memory(Range),
    /// `yes` or `no`, in any case.
    Bool,
    /// Any string.
    Text,
    /// A `loglevel`: Redis's names, tracing's levels, or tracing directives
    /// (see [`super::valid_log_level`]); kept in lower case.
    LogLevel,
}

impl Kind {
    /// Parses and checks `v`.
    ///
    /// # Errors
    /// Redis's CONFIG SET text for the refusal ([`NOT_INTEGER`],
    /// [`NOT_MEMORY`], [`NOT_BOOL`], [`NOT_LOG_LEVEL`] or [`Range::error`]).
    pub fn parse(self, v: &str) -> Result<Value, &'static str> {
        match self {
            Kind::Int(range) => parse_int(v, range).map(Value::Int),
            Kind::Clamped { range, lo, hi } => {
                parse_int(v, range).map(|n| Value::Int(n.clamp(lo, hi)))
            }
            Kind::Memory(range) => parse_memory(v, range).map(Value::Int),
            Kind::Bool => parse_bool(v).map(Value::Bool),
            Kind::Text => Ok(Value::Text(v.to_string())),
            Kind::LogLevel => parse_log_level(v).map(Value::Text),
        }
    }

    /// What the kind takes, for a startup error (`invalid <key>: must be
    /// <this>`).
    pub fn describe(self) -> String {
        match self {
            Kind::Int(range) | Kind::Clamped { range, .. } | Kind::Memory(range) => {
                range.describe()
            }
            Kind::Bool => "yes or no".into(),
            Kind::Text => "a string".into(),
            Kind::LogLevel => format!(
                "one of {}, or tracing directives",
                super::LOG_LEVELS.join(", ")
            ),
        }
    }

    /// The placeholder a command-line flag of this kind shows in `--help`.
    pub fn value_name(self) -> &'static str {
        match self {
            Kind::Int(_) | Kind::Clamped { .. } => "N",
            Kind::Memory(_) => "BYTES",
            Kind::Bool => "yes|no",
            Kind::Text => "STRING",
            Kind::LogLevel => "LEVEL",
        }
    }
}

/// A strict integer (`leasehold_protocol::int::parse_i64`) in `range`.
fn parse_int(v: &str, range: Range) -> Result<i64, &'static str> {
    let n = leasehold_protocol::int::parse_i64(v.as_bytes()).ok_or(NOT_INTEGER)?;
    if !(range.min..=range.max).contains(&n) {
        return Err(range.error);
    }
    Ok(n)
}

/// A memory size as Redis 7 takes it (`memtoull`, then the range check):
/// digits with an optional unit; too many digits saturate and the product
/// wraps into a signed value, as in Redis, so both end up out of range.
fn parse_memory(v: &str, range: Range) -> Result<i64, &'static str> {
    let end = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let mul: u64 = match v[end..].to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return Err(NOT_MEMORY),
    };
    let digits = &v[..end];
    let n = if digits.is_empty() {
        0
    } else {
        digits.parse::<u64>().unwrap_or(u64::MAX)
    };
    let bytes = n.wrapping_mul(mul) as i64;
    if bytes < range.min {
        return Err(range.error);
    }
    Ok(bytes)
}

/// `yes` or `no`, in any case.
fn parse_bool(v: &str) -> Result<bool, &'static str> {
    match v.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(NOT_BOOL),
    }
}

/// A `loglevel` (see [`super::valid_log_level`]), in lower case.
fn parse_log_level(v: &str) -> Result<String, &'static str> {
    if super::valid_log_level(v) {
        Ok(v.to_ascii_lowercase())
    } else {
        Err(NOT_LOG_LEVEL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `proto-max-bulk-len` and `client-query-buffer-limit`'s parser.
    fn parse_memory(v: &str) -> Result<i64, &'static str> {
        super::parse_memory(v, range!(1048576, 9223372036854775807))
    }

    /// `maxclients`'s parser.
    fn parse_maxclients(v: &str) -> Result<i64, &'static str> {
        parse_int(v, range!(1, 4294967295))
    }

    #[test]
    fn limits_are_parsed_and_bounded_as_redis_does() {
        assert_eq!(parse_memory("1mb"), Ok(1 << 20));
        assert_eq!(parse_memory("512MB"), Ok(512 << 20));
        assert_eq!(parse_memory("1048576"), Ok(1 << 20));
        assert_eq!(parse_memory("1gb"), Ok(1 << 30));
        let range = Err("argument must be between 1048576 and 9223372036854775807 inclusive");
        for v in [
            "0",
            "1",
            "1k",
            "1kb",
            "",
            "9223372036854775808",
            "99999999999999999999",
        ] {
            assert_eq!(parse_memory(v), range, "{v:?}");
        }
        for v in ["-1", "1.5mb", " 1mb", "+1mb", "10tb"] {
            assert_eq!(
                parse_memory(v),
                Err("argument must be a memory value"),
                "{v:?}"
            );
        }
        assert_eq!(parse_maxclients("1"), Ok(1));
        assert_eq!(parse_maxclients("4294967295"), Ok(4294967295));
        let range = Err("argument must be between 1 and 4294967295 inclusive");
        for v in ["0", "-1", "4294967296"] {
            assert_eq!(parse_maxclients(v), range, "{v:?}");
        }
        for v in ["+5", " 5", "05", "1k", "99999999999999999999"] {
            assert_eq!(
                parse_maxclients(v),
                Err("argument couldn't be parsed into an integer"),
                "{v:?}"
            );
        }
    }

    #[test]
    fn booleans_levels_and_clamps() {
        assert_eq!(Kind::Bool.parse("YES"), Ok(Value::Bool(true)));
        assert_eq!(Kind::Bool.parse("no"), Ok(Value::Bool(false)));
        assert_eq!(Kind::Bool.parse("1"), Err(NOT_BOOL));
        assert_eq!(Value::Bool(true).render(), "yes");
        assert_eq!(
            Kind::LogLevel.parse("Warning"),
            Ok(Value::Text("warning".into()))
        );
        assert_eq!(Kind::LogLevel.parse("loud"), Err(NOT_LOG_LEVEL));
        let hz = Kind::Clamped {
            range: range!(0, 2147483647),
            lo: 1,
            hi: 500,
        };
        assert_eq!(hz.parse("0"), Ok(Value::Int(1)));
        assert_eq!(hz.parse("1000"), Ok(Value::Int(500)));
        assert_eq!(
            hz.parse("-1"),
            Err("argument must be between 0 and 2147483647 inclusive")
        );
        assert_eq!(range!(1, 100).describe(), "1..=100");
        assert_eq!(
            range!(1024, 9223372036854775807).describe(),
            "at least 1024"
        );
    }
}
