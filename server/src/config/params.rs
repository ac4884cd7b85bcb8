//! The table of parameters: [`PARAMS`] has one row per setting of
//! [`Config`], and everything that names a setting reads it: CONFIG GET,
//! CONFIG SET and CONFIG REWRITE, the startup check of the file and the
//! flags ([`Config::validate`]), and the command-line flags
//! ([`super::Flags`]). Adding a setting is adding its field to its section's
//! struct and one row here.
//!
//! [`FIXED`] lists settings Leasehold does not have but tools ask for
//! (redis-benchmark reads `save` and `appendonly`): CONFIG GET answers their
//! one value and CONFIG SET accepts only that value.

use std::fmt;

use super::parse::{range, Kind, Value};
use super::Config;
use Access::{FileOnly, Immutable, Runtime};

/// How a row reads and writes its field of [`Config`]. `set` is only given
/// values its row's [`Kind`] parsed.
#[derive(Clone, Copy)]
pub struct Field {
    /// The field's current value.
    pub get: fn(&Config) -> Value,
    /// Stores a value.
    pub set: fn(&mut Config, Value),
}

impl fmt::Debug for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Field")
    }
}

/// A field type a [`Value`] converts to and from. Integers saturate at the
/// type's bounds (a row's range keeps them inside); a value of the wrong
/// variant, which only a wrong row could give, stores the type's default.
trait FieldValue: Sized {
    fn to_value(&self) -> Value;
    fn from_value(v: Value) -> Self;
}

macro_rules! int_field_value {
    ($($t:ty),*) => {$(
        impl FieldValue for $t {
            fn to_value(&self) -> Value {
                Value::Int(i64::try_from(*self).unwrap_or(i64::MAX))
            }
            fn from_value(v: Value) -> Self {
                match v {
                    Value::Int(n) => <$t>::try_from(n)
                        .unwrap_or(if n < 0 { <$t>::MIN } else { <$t>::MAX }),
                    _ => <$t>::default(),
                }
            }
        }
    )*};
}
int_field_value!(u16, i32, u32, usize);

impl FieldValue for bool {
    fn to_value(&self) -> Value {
        Value::Bool(*self)
    }
    fn from_value(v: Value) -> Self {
        matches!(v, Value::Bool(true))
    }
}

impl FieldValue for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
    fn from_value(v: Value) -> Self {
        match v {
            Value::Text(s) => s,
            _ => String::new(),
        }
    }
}

/// `field!(section.key)`: the [`Field`] reading and writing `Config.section.key`.
macro_rules! field {
    ($($f:ident).+) => {
        Field {
            get: |c| FieldValue::to_value(&c.$($f).+),
            set: |c, v| c.$($f).+ = FieldValue::from_value(v),
        }
    };
}

/// What CONFIG may do with a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// CONFIG GET shows it, CONFIG SET changes it while the server runs, and
    /// CONFIG REWRITE writes it back to the file.
    Runtime,
    /// CONFIG GET shows it; CONFIG SET answers `can't set immutable config`.
    Immutable,
    /// Only the file sets it: CONFIG does not know the name.
    FileOnly,
}

/// One parameter.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    /// The CONFIG name (redis.conf's where Redis has the setting), also the
    /// command-line flag's: `--<name>`.
    pub name: &'static str,
    /// Other names CONFIG GET, CONFIG SET and the flag take for it; replies
    /// name the parameter by [`Param::name`].
    pub aliases: &'static [&'static str],
    /// The TOML section (`[net]`) holding it.
    pub section: &'static str,
    /// Its key in that section.
    pub key: &'static str,
    /// How its text is parsed and checked; the one place its range is.
    pub kind: Kind,
    /// Its field of [`Config`].
    pub field: Field,
    /// What CONFIG may do with it.
    pub access: Access,
    /// Whether it has a command-line flag.
    pub flag: bool,
    /// One line on it: the flag's `--help` (which adds the default).
    pub help: &'static str,
}

impl Param {
    /// Whether `name` (lower case) is this parameter's name or an alias.
    pub fn is_named(&self, name: &str) -> bool {
        self.name == name || self.aliases.contains(&name)
    }

    /// Its value in `cfg`, as [`Value::render`] shows it to CONFIG GET.
    pub fn get(&self, cfg: &Config) -> Value {
        (self.field.get)(cfg)
    }
}

const fn row(
    name: &'static str,
    (section, key): (&'static str, &'static str),
    kind: Kind,
    field: Field,
    access: Access,
    flag: bool,
    help: &'static str,
) -> Param {
    Param {
        name,
        aliases: &[],
        section,
        key,
        kind,
        field,
        access,
        flag,
        help,
    }
}

/// Redis's memory range for the protocol limits: below 1 MB every request,
/// or every partial one, would be refused.
const MEMORY_1MB: Kind = Kind::Memory(range!(1048576, 9223372036854775807));
/// Threads to run: `shards.threads`, or the number of cores when 0 (what
/// CONFIG GET threads answers).
const THREADS: Field = Field {
    get: |c| FieldValue::to_value(&c.threads()),
    set: |c, v| c.shards.threads = FieldValue::from_value(v),
};

/// Every setting, in the order CONFIG GET lists them. Ranges are Redis 7's
/// where Redis has the setting (`maxclients` 1..=4294967295, `hz` taken in
/// 0..=2147483647 and clamped to 1..=500, memory sizes at least 1mb).
#[rustfmt::skip]
pub static PARAMS: &[Param] = &[
    row("bind", ("net", "bind"), Kind::Text, field!(net.bind), Immutable, true, "Address to listen on"),
    row("port", ("net", "port"), Kind::Int(range!(0, 65535)), field!(net.port), Immutable, true, "TCP port; 0 picks a free one"),
    row("tcp-backlog", ("net", "tcp_backlog"), Kind::Int(range!(0, 2147483647)), field!(net.tcp_backlog), Immutable, false, "Listen backlog"),
    row("maxclients", ("net", "maxclients"), Kind::Int(range!(1, 4294967295)), field!(net.maxclients), Runtime, true, "Most simultaneous clients"),
    row("requirepass", ("security", "requirepass"), Kind::Text, field!(security.requirepass), Runtime, true, "Password clients must send with AUTH"),
    row("threads", ("shards", "threads"), Kind::Int(range!(0, 9223372036854775807)), THREADS, Immutable, true, "Threads (one shard each); 0 means one per core"),
    row("proto-max-bulk-len", ("limits", "proto_max_bulk_len"), MEMORY_1MB, field!(limits.proto_max_bulk_len), Runtime, true, "Largest bulk string: bytes, or with a unit as in redis.conf (512mb, 1gb; at least 1mb)"),
    row("client-query-buffer-limit", ("limits", "client_query_buffer_limit"), MEMORY_1MB, field!(limits.client_query_buffer_limit), Runtime, true, "Largest pending input per connection: bytes, or with a unit as in redis.conf (at least 1mb)"),
    row("max-multibulk-len", ("limits", "max_multibulk_len"), Kind::Int(range!(1, 9223372036854775807)), field!(limits.max_multibulk_len), FileOnly, false, "Most elements in one request array"),
    row("max-inline-len", ("limits", "max_inline_len"), Kind::Int(range!(1024, 9223372036854775807)), field!(limits.max_inline_len), FileOnly, false, "Longest inline request, bytes"),
    row("hz", ("expiry", "hz"), Kind::Clamped { range: range!(0, 2147483647), lo: 1, hi: 500 }, field!(expiry.hz), Runtime, true, "Active-expiry cycles per second (clamped to 1..=500)"),
    row("expiry-budget-percent", ("expiry", "budget_percent"), Kind::Int(range!(1, 100)), field!(expiry.budget_percent), FileOnly, false, "Most of each expiry cycle's period, in percent, a busy cycle may use"),
    row("repl-backlog-size", ("replication", "backlog_bytes"), Kind::Memory(range!(1, 9223372036854775807)), field!(replication.backlog_bytes), Immutable, false, "Effect backlog kept per shard, bytes"),
    row("loglevel", ("log", "level"), Kind::LogLevel, field!(log.level), Runtime, true, "Log filter (error, warn, info, debug, trace, Redis's names, or tracing directives)"),
];

/// A setting Leasehold does not have: its name, the one value it answers,
/// and whether Redis lets CONFIG SET change it (then only that value is
/// accepted; otherwise it is immutable, as in Redis).
#[derive(Debug, Clone, Copy)]
pub struct Fixed {
    /// The CONFIG name.
    pub name: &'static str,
    /// The value CONFIG GET answers.
    pub value: &'static str,
    /// Whether CONFIG SET takes it (with that value only).
    pub settable: bool,
}

const fn fixed(name: &'static str, value: &'static str, settable: bool) -> Fixed {
    Fixed {
        name,
        value,
        settable,
    }
}

/// The settings Leasehold does not have, after [`PARAMS`] in CONFIG GET.
pub static FIXED: &[Fixed] = &[
    fixed("save", "", true),
    fixed("appendonly", "no", true),
    fixed("databases", "1", false),
    fixed("maxmemory", "0", true),
    fixed("maxmemory-policy", "noeviction", true),
    fixed("timeout", "0", true),
    fixed("cluster-enabled", "no", false),
    fixed("protected-mode", "no", true),
    fixed("daemonize", "no", false),
];

/// The row CONFIG knows by `name` (lower case; a name or an alias), if any:
/// [`Access::FileOnly`] rows are not found.
pub fn find(name: &str) -> Option<&'static Param> {
    PARAMS
        .iter()
        .find(|p| p.access != FileOnly && p.is_named(name))
}

/// Why CONFIG SET refused a parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetError {
    /// No parameter has the name.
    Unknown,
    /// The parameter cannot change while the server runs.
    Immutable,
    /// The value is refused: Redis's text for why.
    Invalid(&'static str),
    /// A [`Fixed`] setting given another value than its one.
    OnlySupports(&'static str),
}

/// The reason as CONFIG SET shows it after `CONFIG SET failed (possibly
/// related to argument '<name>') - `; [`SetError::Unknown`] has its own
/// error (`Unknown option or number of arguments for CONFIG SET - '<name>'`).
impl fmt::Display for SetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetError::Unknown => f.write_str("unknown parameter"),
            SetError::Immutable => f.write_str("can't set immutable config"),
            SetError::Invalid(why) => f.write_str(why),
            SetError::OnlySupports(value) => write!(f, "Leasehold only supports '{value}'"),
        }
    }
}

impl Config {
    /// CONFIG SET of one parameter: parses `value` with its row's parser and
    /// stores it. Several parameters are set atomically by setting them on a
    /// copy and keeping the copy only when every one succeeded.
    ///
    /// # Errors
    /// [`SetError`]: an unknown name, an immutable parameter, a refused value.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), SetError> {
        if let Some(p) = find(name) {
            if p.access != Runtime {
                return Err(SetError::Immutable);
            }
            let v = p.kind.parse(value).map_err(SetError::Invalid)?;
            (p.field.set)(self, v);
            return Ok(());
        }
        match FIXED.iter().find(|f| f.name == name) {
            None => Err(SetError::Unknown),
            Some(f) if !f.settable => Err(SetError::Immutable),
            Some(f) if f.value == value => Ok(()),
            Some(f) => Err(SetError::OnlySupports(f.value)),
        }
    }

    /// CONFIG GET: the parameters (then the [`FIXED`] settings) one of whose
    /// names `matches` (a glob pattern, for CONFIG GET), each once, with its
    /// value as [`Value::render`] shows it.
    pub fn matching(&self, matches: impl Fn(&str) -> bool) -> Vec<(&'static str, String)> {
        let params = PARAMS
            .iter()
            .filter(|p| p.access != FileOnly)
            .filter(|p| matches(p.name) || p.aliases.iter().any(|a| matches(a)))
            .map(|p| (p.name, p.get(self).render()));
        let fixed = FIXED
            .iter()
            .filter(|f| matches(f.name))
            .map(|f| (f.name, f.value.to_string()));
        params.chain(fixed).collect()
    }

    /// Checks every parameter with its row's parser, as CONFIG SET would take
    /// it, and stores what the parser made of it (`hz` is clamped to
    /// 1..=500, a `loglevel` lower-cased): the check a file and the flags get
    /// at startup, so that neither can start a server no client can use
    /// (`maxclients 0`, a bulk limit of 0).
    ///
    /// # Errors
    /// `invalid <key>: must be <what the kind takes>` for the first refused
    /// parameter, naming its TOML key.
    pub fn normalize(&mut self) -> Result<(), String> {
        for p in PARAMS {
            let v = p.get(self);
            let parsed = p
                .kind
                .parse(&v.render())
                .map_err(|_| format!("invalid {}: must be {}", p.key, p.kind.describe()))?;
            if parsed != v {
                (p.field.set)(self, parsed);
            }
        }
        Ok(())
    }
}
