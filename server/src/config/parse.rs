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
    /// `client-output-buffer-limit`: one or more groups `<class> <hard>
    /// <soft> <soft seconds>` (class `normal`, `replica` or `slave`,
    /// `pubsub`; sizes as [`Kind::Memory`] takes them, 0 for no limit),
    /// kept as [`OutputLimits::render`] writes the classes given.
    OutputLimits,
    /// `save`: pairs `<seconds> <changes>` of integers, or empty; kept with
    /// single spaces.
    SavePoints,
    /// One of a few words, in any case; kept in lower case.
    OneOf(&'static [&'static str]),
    /// A file name inside a directory: not empty, no `/`, not `.` or `..`.
    FileName,
}

/// Redis's text for `save` rules that are not pairs of integers.
pub const NOT_SAVE_POINTS: &str = "Invalid save parameters";
/// Redis's text for a file name that is a path (`dbfilename`).
pub const NOT_FILE_NAME: &str = "can't be a path, just a filename";
/// Redis's text for a word outside its set (`appendfsync`).
pub const NOT_ONE_OF: &str = "argument(s) must be one of the following";

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
            Kind::OutputLimits => OutputLimits::parse(v).map(|l| Value::Text(l.render())),
            Kind::SavePoints => super::save_rules(v)
                .map(|_| Value::Text(v.split_whitespace().collect::<Vec<_>>().join(" ")))
                .ok_or(NOT_SAVE_POINTS),
            Kind::FileName => match v.is_empty() || v.contains('/') || v == "." || v == ".." {
                true => Err(NOT_FILE_NAME),
                false => Ok(Value::Text(v.to_string())),
            },
            Kind::OneOf(words) => {
                let w = v.to_ascii_lowercase();
                match words.contains(&w.as_str()) {
                    true => Ok(Value::Text(w)),
                    false => Err(NOT_ONE_OF),
                }
            }
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
            Kind::OutputLimits => "groups of <class> <hard> <soft> <soft seconds>".into(),
            Kind::SavePoints => "pairs of <seconds> <changes>, or empty".into(),
            Kind::OneOf(words) => format!("one of {}", words.join(", ")),
            Kind::FileName => "a file name (no /)".into(),
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
            Kind::OutputLimits => "LIMITS",
            Kind::SavePoints => "RULES",
            Kind::OneOf(_) => "WORD",
            Kind::FileName => "NAME",
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

/// One client class's output buffer limit (`client-output-buffer-limit`):
/// a connection whose pending output passes `hard` bytes, or stays above
/// `soft` bytes for `soft_seconds` seconds, is closed. 0 disables a limit
/// (a `soft_seconds` of 0 closes as soon as `soft` is passed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutputLimit {
    /// Hard limit, bytes; 0 for none.
    pub hard: u64,
    /// Soft limit, bytes; 0 for none.
    pub soft: u64,
    /// How long the soft limit may be passed, seconds.
    pub soft_seconds: u64,
}

/// Pending output, bytes, above which a connection is not read while its
/// class has no limit (Redis's default `normal 0 0 0`): a pipeline whose
/// replies fit under it is read and answered whole before its client reads
/// anything, and one client that never reads holds at most this much plus
/// one step of replies (see `docs/ARCHITECTURE.md`, *Output backpressure*).
pub const DEFAULT_OUTPUT_PAUSE: u64 = 64 << 20;

impl OutputLimit {
    /// Pending output, bytes, at or above which a connection of this class
    /// is not read (backpressure): the smaller of the soft and hard limits
    /// that are set, else [`DEFAULT_OUTPUT_PAUSE`]. A connection paused at
    /// its hard limit is closed by [`OutputLimit::exceeded`], one paused at
    /// its soft limit once it stays there for the soft seconds, as Redis
    /// closes them.
    pub fn pause_at(&self) -> u64 {
        [self.hard, self.soft]
            .into_iter()
            .filter(|&l| l > 0)
            .min()
            .unwrap_or(DEFAULT_OUTPUT_PAUSE)
    }

    /// Whether `pending` bytes of unwritten output break this limit at
    /// `now`: at or above the hard limit, or above the soft limit for its
    /// seconds without a break. `soft_since` is when the soft limit was
    /// passed (kept by the caller per connection; cleared when the output
    /// falls back under it).
    pub fn exceeded(
        &self,
        pending: u64,
        soft_since: &mut Option<std::time::Instant>,
        now: std::time::Instant,
    ) -> bool {
        if self.hard > 0 && pending >= self.hard {
            return true;
        }
        if self.soft == 0 || pending < self.soft {
            *soft_since = None;
            return false;
        }
        let since = *soft_since.get_or_insert(now);
        now.duration_since(since).as_secs() >= self.soft_seconds
    }
}

/// Redis's text for a group that is not four words.
pub const LIMITS_ARITY: &str = "Wrong number of arguments in buffer limit configuration.";
/// Redis's text for a class it has no limit for.
pub const LIMITS_CLASS: &str = "Invalid client class specified in buffer limit configuration.";
/// Redis's text for a size or a duration it cannot read.
pub const LIMITS_VALUE: &str =
    "Error in hard, soft or soft_seconds setting in buffer limit configuration.";

/// `client-output-buffer-limit`'s value: a limit per client class, in
/// Redis's class order (normal, replica, pubsub); `None` for a class a
/// CONFIG SET did not name (it keeps its limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits(pub [Option<OutputLimit>; 3]);

impl OutputLimits {
    /// The classes' names, as CONFIG GET shows them (Redis 7 still writes
    /// `slave`).
    pub const CLASSES: [&'static str; 3] = ["normal", "slave", "pubsub"];
    /// Index of the normal class.
    pub const NORMAL: usize = 0;
    /// Index of the replica class.
    pub const REPLICA: usize = 1;
    /// Index of the pub/sub class.
    pub const PUBSUB: usize = 2;

    /// Redis's defaults: `normal 0 0 0 slave 256mb 64mb 60 pubsub 32mb 8mb
    /// 60`.
    pub const DEFAULT: OutputLimits = OutputLimits([
        Some(OutputLimit {
            hard: 0,
            soft: 0,
            soft_seconds: 0,
        }),
        Some(OutputLimit {
            hard: 256 << 20,
            soft: 64 << 20,
            soft_seconds: 60,
        }),
        Some(OutputLimit {
            hard: 32 << 20,
            soft: 8 << 20,
            soft_seconds: 60,
        }),
    ]);

    /// Reads groups of `<class> <hard> <soft> <soft seconds>`.
    ///
    /// # Errors
    /// [`LIMITS_ARITY`], [`LIMITS_CLASS`] or [`LIMITS_VALUE`].
    pub fn parse(v: &str) -> Result<OutputLimits, &'static str> {
        let words: Vec<&str> = v.split_whitespace().collect();
        if words.is_empty() || words.len() % 4 != 0 {
            return Err(LIMITS_ARITY);
        }
        let mut limits = OutputLimits([None; 3]);
        for group in words.chunks(4) {
            let class = match group[0].to_ascii_lowercase().as_str() {
                "normal" => 0,
                "slave" | "replica" => 1,
                "pubsub" => 2,
                _ => return Err(LIMITS_CLASS),
            };
            let size = |w: &str| parse_memory(w, range!(0, 9223372036854775807)).map(|n| n as u64);
            let seconds = leasehold_protocol::int::parse_i64(group[3].as_bytes())
                .and_then(|n| u64::try_from(n).ok());
            let (Ok(hard), Ok(soft), Some(soft_seconds)) =
                (size(group[1]), size(group[2]), seconds)
            else {
                return Err(LIMITS_VALUE);
            };
            limits.0[class] = Some(OutputLimit {
                hard,
                soft,
                soft_seconds,
            });
        }
        Ok(limits)
    }

    /// The classes it has, in class order, sizes in bytes:
    /// `pubsub 33554432 8388608 60`.
    pub fn render(&self) -> String {
        let groups = self.0.iter().zip(Self::CLASSES).filter_map(|(l, name)| {
            l.map(|l| format!("{name} {} {} {}", l.hard, l.soft, l.soft_seconds))
        });
        groups.collect::<Vec<_>>().join(" ")
    }

    /// These limits with the classes `other` names replaced.
    pub fn merge(mut self, other: OutputLimits) -> OutputLimits {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            if theirs.is_some() {
                *mine = theirs;
            }
        }
        self
    }
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
    fn reading_pauses_at_the_smallest_limit_set() {
        let pause = |v: &str| OutputLimits::parse(v).unwrap().0[0].unwrap().pause_at();
        assert_eq!(pause("normal 0 0 0"), DEFAULT_OUTPUT_PAUSE);
        assert_eq!(pause("normal 4mb 0 0"), 4 << 20);
        assert_eq!(pause("normal 0 2mb 10"), 2 << 20);
        assert_eq!(pause("normal 16mb 8mb 60"), 8 << 20);
        assert_eq!(pause("normal 1gb 0 0"), 1 << 30);
        let pubsub = OutputLimits::DEFAULT.0[OutputLimits::PUBSUB].unwrap();
        assert_eq!(pubsub.pause_at(), 8 << 20);
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
