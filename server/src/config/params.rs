//! The table of parameters: [`PARAMS`] has one row per setting of
//! [`Config`], and everything that names a setting reads it: CONFIG GET,
//! CONFIG SET and CONFIG REWRITE, the startup check of the file and the
//! flags ([`Config::validate`]), and the command-line flags
//! ([`super::Flags`]). Adding a setting is adding its field to its section's
//! struct and one row here.
//!
//! [`FIXED`] lists settings Leasehold does not have but tools ask for
//! (`maxmemory`, `databases`): CONFIG GET answers their one value and
//! CONFIG SET accepts only that value.

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
int_field_value!(u16, i32, u32, u64, usize);

impl FieldValue for bool {
    fn to_value(&self) -> Value {
        Value::Bool(*self)
    }
    fn from_value(v: Value) -> Self {
        matches!(v, Value::Bool(true))
    }
}

/// A list shows and takes its items comma-separated.
impl FieldValue for Vec<String> {
    fn to_value(&self) -> Value {
        Value::Text(self.join(","))
    }
    fn from_value(v: Value) -> Self {
        match v {
            Value::Text(s) => super::split_list(&s),
            _ => Vec::new(),
        }
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

    /// The row with other names (a row of [`PARAMS`] is written
    /// `row(...).with_aliases(&["old-name"])`).
    pub const fn with_aliases(mut self, aliases: &'static [&'static str]) -> Param {
        self.aliases = aliases;
        self
    }
}

/// A row without aliases (see [`Param::with_aliases`]).
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

/// `client-output-buffer-limit`: CONFIG SET changes only the classes it
/// names, as Redis does, so a set merges into what is there.
const OUTPUT_LIMITS: Field = Field {
    get: |c| Value::Text(c.limits.client_output_buffer_limit.clone()),
    set: |c, v| {
        use super::parse::OutputLimits;
        let now = &c.limits.client_output_buffer_limit;
        let now = OutputLimits::parse(now).unwrap_or(OutputLimits::DEFAULT);
        let given = OutputLimits::parse(&v.render()).unwrap_or(OutputLimits([None; 3]));
        let merged = OutputLimits::DEFAULT.merge(now).merge(given);
        c.limits.client_output_buffer_limit = merged.render();
    },
};

/// Every setting, in the order CONFIG GET lists them. Ranges are Redis 7's
/// where Redis has the setting (`maxclients` 1..=4294967295, `hz` taken in
/// 0..=2147483647 and clamped to 1..=500, memory sizes at least 1mb).
#[rustfmt::skip]
pub static PARAMS: &[Param] = &[
    row("bind", ("net", "bind"), Kind::Text, field!(net.bind), Immutable, true, "Address to listen on"),
    row("port", ("net", "port"), Kind::Int(range!(0, 65535)), field!(net.port), Immutable, true, "TCP port; 0 picks a free one (with a tls-port: none, TLS only)"),
    row("tcp-backlog", ("net", "tcp_backlog"), Kind::Int(range!(0, 2147483647)), field!(net.tcp_backlog), Immutable, false, "Listen backlog"),
    row("metrics-port", ("net", "metrics_port"), Kind::Int(range!(0, 65535)), field!(net.metrics_port), Immutable, true, "Port serving Prometheus metrics on GET /metrics (0: none)"),
    row("maxclients", ("net", "maxclients"), Kind::Int(range!(1, 4294967295)), field!(net.maxclients), Runtime, true, "Most simultaneous clients"),
    row("requirepass", ("security", "requirepass"), Kind::Text, field!(security.requirepass), Runtime, true, "Password clients must send with AUTH"),
    row("aclfile", ("security", "aclfile"), Kind::Text, field!(security.aclfile), Immutable, true, "ACL file: `user <name> <rules>` lines, read at the start and by ACL LOAD, written by ACL SAVE"),
    row("protected-mode", ("security", "protected_mode"), Kind::Bool, field!(security.protected_mode), Runtime, true, "Without a password, refuse clients from outside the loopback interface"),
    row("rate-limit-pins", ("ratelimit", "pins"), Kind::Text, field!(ratelimit.pins), Immutable, true, "Pinned limits: \"<prefix> <KIND> <integers...>; ...\" (LH.PIN's words)"),
    row("hotkey-split", ("ratelimit", "hotkey_split"), Kind::Bool, field!(ratelimit.hotkey_split), Runtime, true, "Split a hot token-bucket, CL.THROTTLE / GCRA or SLIDINGWINDOW key over every shard, exactly (docs/hotkeys.md)"),
    row("hotkey-split-share", ("ratelimit", "hotkey_split_share"), Kind::Int(range!(1, 100)), field!(ratelimit.hotkey_split_share), Runtime, true, "Percent of its shard's rate-limit commands a key takes in a 100 ms window to be hot"),
    row("hotkey-min-rate", ("ratelimit", "hotkey_min_rate"), Kind::Int(range!(1, 9223372036854775807)), field!(ratelimit.hotkey_min_rate), Runtime, true, "Rate-limit commands per second a key takes to be hot"),
    row("hotkey-merge-rate", ("ratelimit", "hotkey_merge_rate"), Kind::Int(range!(0, 9223372036854775807)), field!(ratelimit.hotkey_merge_rate), Runtime, true, "A split key under this many commands per second for hotkey-cooldown ms is merged"),
    row("hotkey-cooldown", ("ratelimit", "hotkey_cooldown"), Kind::Int(range!(0, 9223372036854775807)), field!(ratelimit.hotkey_cooldown), Runtime, true, "Milliseconds a split key stays under hotkey-merge-rate before it is merged"),
    row("threads", ("shards", "threads"), Kind::Int(range!(0, 1024)), THREADS, Immutable, true, "Threads (one shard each; at most 1024, so every shard owns at least 16 of the 16384 hash slots); 0 means one per core"),
    row("proto-max-bulk-len", ("limits", "proto_max_bulk_len"), MEMORY_1MB, field!(limits.proto_max_bulk_len), Runtime, true, "Largest bulk string: bytes, or with a unit as in redis.conf (512mb, 1gb; at least 1mb)"),
    row("maxmemory", ("limits", "maxmemory"), Kind::Memory(range!(0, 9223372036854775807)), field!(limits.maxmemory), Runtime, true, "Refuse commands that may allocate (-OOM) past this many bytes allocated; 0: no limit"),
    row("client-query-buffer-limit", ("limits", "client_query_buffer_limit"), MEMORY_1MB, field!(limits.client_query_buffer_limit), Runtime, true, "Largest pending input per connection: bytes, or with a unit as in redis.conf (at least 1mb)"),
    row("client-output-buffer-limit", ("limits", "client_output_buffer_limit"), Kind::OutputLimits, OUTPUT_LIMITS, Runtime, false, "Output limits per client class: <class> <hard> <soft> <soft seconds> groups (only pubsub is enforced)"),
    row("busy-reply-threshold", ("limits", "busy_reply_threshold"), Kind::Int(range!(0, 9223372036854775807)), field!(limits.busy_reply_threshold), Runtime, true, "Milliseconds a script runs before other connections get -BUSY for its shard and SCRIPT KILL may stop it").with_aliases(&["lua-time-limit"]),
    row("max-multibulk-len", ("limits", "max_multibulk_len"), Kind::Int(range!(1, 9223372036854775807)), field!(limits.max_multibulk_len), FileOnly, false, "Most elements in one request array"),
    row("max-inline-len", ("limits", "max_inline_len"), Kind::Int(range!(1024, 9223372036854775807)), field!(limits.max_inline_len), FileOnly, false, "Longest inline request, bytes"),
    row("hz", ("expiry", "hz"), Kind::Clamped { range: range!(0, 2147483647), lo: 1, hi: 500 }, field!(expiry.hz), Runtime, true, "Active-expiry cycles per second (clamped to 1..=500)"),
    row("expiry-budget-percent", ("expiry", "budget_percent"), Kind::Int(range!(1, 100)), field!(expiry.budget_percent), FileOnly, false, "Most of each expiry cycle's period, in percent, a busy cycle may use"),
    row("repl-backlog-size", ("replication", "backlog_bytes"), Kind::Memory(range!(1, 9223372036854775807)), field!(replication.backlog_bytes), Immutable, false, "Replication backlog (each shard's and the merged stream's), bytes"),
    row("replicaof", ("replication", "replicaof"), Kind::Text, field!(replication.replicaof), Immutable, true, "Follow this primary: \"<host> <port>\" (empty: be a primary; REPLICAOF changes it at run time)"),
    row("masterauth", ("replication", "masterauth"), Kind::Text, field!(replication.masterauth), Runtime, true, "Password to send to the primary"),
    row("masteruser", ("replication", "masteruser"), Kind::Text, field!(replication.masteruser), Runtime, false, "User name to send to the primary with masterauth"),
    row("replica-priority", ("replication", "replica_priority"), Kind::Int(range!(0, 2147483647)), field!(replication.replica_priority), Runtime, true, "Sentinel promotes the replica with the lowest non-zero priority first; 0 never").with_aliases(&["slave-priority"]),
    row("replica-announce-ip", ("replication", "replica_announce_ip"), Kind::Text, field!(replication.replica_announce_ip), Runtime, false, "Address a replica gives its primary (empty: the one it sees)").with_aliases(&["slave-announce-ip"]),
    row("replica-announce-port", ("replication", "replica_announce_port"), Kind::Int(range!(0, 65535)), field!(replication.replica_announce_port), Runtime, false, "Port a replica gives its primary (0: the listening port)").with_aliases(&["slave-announce-port"]),
    row("repl-timeout", ("replication", "repl_timeout"), Kind::Int(range!(1, 2147483647)), field!(replication.repl_timeout), Runtime, false, "Seconds of silence after which a replication link is dropped"),
    row("repl-ping-replica-period", ("replication", "repl_ping_replica_period"), Kind::Int(range!(1, 2147483647)), field!(replication.repl_ping_replica_period), Runtime, false, "Seconds between a primary's PING records to its replicas").with_aliases(&["repl-ping-slave-period"]),
    row("dir", ("persistence", "dir"), Kind::Text, field!(persistence.dir), Runtime, true, "Directory of the snapshot and the append-only files"),
    row("dbfilename", ("persistence", "dbfilename"), Kind::FileName, field!(persistence.dbfilename), Runtime, true, "Snapshot file name inside dir"),
    row("save", ("persistence", "save"), Kind::SavePoints, field!(persistence.save), Runtime, true, "Snapshot rules: \"<seconds> <changes> ...\" (empty: none)"),
    row("appendonly", ("persistence", "appendonly"), Kind::Bool, field!(persistence.appendonly), Runtime, true, "Log every write to the append-only files"),
    row("appendfsync", ("persistence", "appendfsync"), Kind::OneOf(&["always", "everysec", "no"]), field!(persistence.appendfsync), Runtime, true, "When the append-only log is fsynced: always, everysec or no"),
    row("appendfilename", ("persistence", "appendfilename"), Kind::FileName, field!(persistence.appendfilename), Immutable, true, "Base name of the append-only files"),
    row("appenddirname", ("persistence", "appenddirname"), Kind::FileName, field!(persistence.appenddirname), Immutable, true, "Directory of the append-only files inside dir"),
    row("auto-aof-rewrite-percentage", ("persistence", "auto_aof_rewrite_percentage"), Kind::Int(range!(0, 2147483647)), field!(persistence.auto_aof_rewrite_percentage), Runtime, true, "Rewrite the log when it grew by this percentage since the last rewrite (0: never)"),
    row("auto-aof-rewrite-min-size", ("persistence", "auto_aof_rewrite_min_size"), Kind::Memory(range!(0, 9223372036854775807)), field!(persistence.auto_aof_rewrite_min_size), Runtime, true, "No automatic log rewrite below this size, bytes"),
    row("aof-load-truncated", ("persistence", "aof_load_truncated"), Kind::Bool, field!(persistence.aof_load_truncated), Runtime, true, "Drop a log's last record cut short (yes) or refuse to start (no)"),
    row("load-corrupt-snapshot", ("persistence", "load_corrupt_snapshot"), Kind::Bool, field!(persistence.load_corrupt_snapshot), Runtime, true, "Start from a snapshot whose checksum fails (yes) or refuse (no)"),
    row("stop-writes-on-bgsave-error", ("persistence", "stop_writes_on_bgsave_error"), Kind::Bool, field!(persistence.stop_writes_on_bgsave_error), Runtime, true, "Refuse writes while the last snapshot failed"),
    row("hash-max-listpack-entries", ("collections", "hash_max_listpack_entries"), Kind::Int(range!(0, 9223372036854775807)), field!(collections.hash_max_listpack_entries), Runtime, true, "Most fields a hash keeps in its compact listpack encoding").with_aliases(&["hash-max-ziplist-entries"]),
    row("hash-max-listpack-value", ("collections", "hash_max_listpack_value"), Kind::Int(range!(0, 9223372036854775807)), field!(collections.hash_max_listpack_value), Runtime, true, "Longest field or value, bytes, a hash keeps in its listpack").with_aliases(&["hash-max-ziplist-value"]),
    row("zset-max-listpack-entries", ("collections", "zset_max_listpack_entries"), Kind::Int(range!(0, 9223372036854775807)), field!(collections.zset_max_listpack_entries), Runtime, true, "Most members a sorted set keeps in its compact listpack encoding").with_aliases(&["zset-max-ziplist-entries"]),
    row("zset-max-listpack-value", ("collections", "zset_max_listpack_value"), Kind::Int(range!(0, 9223372036854775807)), field!(collections.zset_max_listpack_value), Runtime, true, "Longest member, bytes, a sorted set keeps in its listpack").with_aliases(&["zset-max-ziplist-value"]),
    row("list-max-listpack-size", ("collections", "list_max_listpack_size"), Kind::Int(range!(-2147483648, 2147483647)), field!(collections.list_max_listpack_size), Runtime, true, "A list node's limit: -1..-5 for 4..64 KiB, or a positive element count").with_aliases(&["list-max-ziplist-size"]),
    row("set-max-intset-entries", ("collections", "set_max_intset_entries"), Kind::Int(range!(0, 9223372036854775807)), field!(collections.set_max_intset_entries), Runtime, true, "Most members a set of integers keeps in its intset encoding"),
    row("set-max-listpack-entries", ("collections", "set_max_listpack_entries"), Kind::Int(range!(0, 9223372036854775807)), field!(collections.set_max_listpack_entries), Runtime, true, "Most members a set keeps in its compact pack (reported as hashtable, as Redis 7.0)"),
    row("set-max-listpack-value", ("collections", "set_max_listpack_value"), Kind::Int(range!(0, 9223372036854775807)), field!(collections.set_max_listpack_value), Runtime, true, "Longest member, bytes, a set keeps in its compact pack"),
    row("cluster-enabled", ("cluster", "enabled"), Kind::Bool, field!(cluster.enabled), Immutable, true, "Cluster mode: redirect keyed commands by hash slot from the topology (MOVED, CROSSSLOT, CLUSTER SLOTS)"),
    row("cluster-config-file", ("cluster", "config_file"), Kind::Text, field!(cluster.config_file), Immutable, true, "Cluster topology file (TOML, docs/cluster.md), reloaded when it changes").with_aliases(&["cluster-topology"]),
    row("cluster-announce-ip", ("cluster", "announce_ip"), Kind::Text, field!(cluster.announce_ip), Immutable, true, "Address of this node in the cluster topology (empty: the bound address)"),
    row("cluster-announce-port", ("cluster", "announce_port"), Kind::Int(range!(0, 65535)), field!(cluster.announce_port), Immutable, true, "Port of this node in the cluster topology (0: the bound port)"),
    row("cluster-sentinels", ("cluster", "sentinels"), Kind::Text, field!(cluster.sentinels), Immutable, true, "Sentinels (host:port, comma-separated) asked for each group's current primary"),
    row("cluster-node-id", ("cluster", "node_id"), Kind::Text, field!(cluster.node_id), Immutable, true, "Id of this node in the cluster topology, 40 hex characters (empty: found by address)"),
    row("tls-port", ("tls", "port"), Kind::Int(range!(0, 65535)), field!(tls.port), Immutable, true, "Port serving RESP over TLS on the bind address (0: no TLS; with --port 0, TLS only)"),
    row("tls-cert-file", ("tls", "cert_file"), Kind::Text, field!(tls.cert_file), Immutable, true, "Server certificate chain, PEM"),
    row("tls-key-file", ("tls", "key_file"), Kind::Text, field!(tls.key_file), Immutable, true, "Server private key, PEM"),
    row("tls-ca-cert-file", ("tls", "ca_cert_file"), Kind::Text, field!(tls.ca_cert_file), Immutable, true, "CA certificates, PEM, client certificates (and a TLS primary's) are checked against"),
    row("tls-auth-clients", ("tls", "auth_clients"), Kind::OneOf(super::TLS_AUTH_CLIENTS), field!(tls.auth_clients), Immutable, true, "Client certificates: yes (required), optional (checked when shown) or no"),
    row("tls-replication", ("tls", "replication"), Kind::Bool, field!(tls.replication), Immutable, true, "A replica connects to its primary's TLS port with TLS"),
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
    fixed("databases", "1", false),
    fixed("maxmemory-policy", "noeviction", true),
    fixed("timeout", "0", true),
    fixed("replica-read-only", "yes", true),
    fixed("replica-serve-stale-data", "yes", true),
    // A replica evicts nothing itself: its primary's deletions reach it.
    fixed("replica-ignore-maxmemory", "yes", true),
    // Their names before Redis 5, which Redis 7 still answers to.
    fixed("slave-read-only", "yes", true),
    fixed("slave-serve-stale-data", "yes", true),
    fixed("slave-ignore-maxmemory", "yes", true),
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
    /// names `matches` (a glob pattern, for CONFIG GET), each once, under
    /// its name when that matches, else under the first alias that does,
    /// with its value as [`Value::render`] shows it.
    pub fn matching(&self, matches: impl Fn(&str) -> bool) -> Vec<(&'static str, String)> {
        let params = PARAMS
            .iter()
            .filter(|p| p.access != FileOnly)
            .filter_map(|p| {
                let listed = std::iter::once(&p.name)
                    .chain(p.aliases)
                    .find(|n| matches(n))?;
                Some((*listed, p.get(self).render()))
            });
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::config::parse::{NOT_INTEGER, NOT_MEMORY};

    fn row(name: &str) -> &'static Param {
        PARAMS.iter().find(|p| p.name == name).unwrap()
    }

    /// The range of an integer or memory row.
    fn range_of(p: &Param) -> Option<crate::config::parse::Range> {
        match p.kind {
            Kind::Int(r) | Kind::Clamped { range: r, .. } | Kind::Memory(r) => Some(r),
            _ => None,
        }
    }

    #[test]
    fn names_and_keys_are_unique() {
        let mut names = BTreeSet::new();
        let all = PARAMS
            .iter()
            .flat_map(|p| std::iter::once(&p.name).chain(p.aliases));
        for name in all.chain(FIXED.iter().map(|f| &f.name)) {
            assert!(names.insert(*name), "{name} twice");
            assert_eq!(
                name.to_ascii_lowercase(),
                *name,
                "CONFIG names are lower case"
            );
        }
        let mut keys = BTreeSet::new();
        for p in PARAMS {
            assert!(
                keys.insert((p.section, p.key)),
                "[{}] {} twice",
                p.section,
                p.key
            );
        }
    }

    #[test]
    fn every_default_round_trips() {
        let defaults = Config::default();
        for p in PARAMS {
            let v = p.get(&defaults);
            assert_eq!(p.kind.parse(&v.render()), Ok(v.clone()), "{}", p.name);
            let mut c = defaults.clone();
            (p.field.set)(&mut c, v.clone());
            assert_eq!(p.get(&c), v, "{}: the field keeps what it is given", p.name);
        }
    }

    #[test]
    fn every_toml_key_is_its_sections_and_in_the_example_file() {
        for p in PARAMS {
            let v = p.get(&Config::default()).to_toml();
            let text = format!("[{}]\n{} = {v}\n", p.section, p.key);
            let parsed = Config::from_toml(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(p.get(&parsed), p.get(&Config::default()), "{text}");
        }
        let text = include_str!("../../../config/leasehold.example.toml");
        let example: toml::Table = text.parse().unwrap();
        let in_file: BTreeSet<(&str, &str)> = example
            .iter()
            .flat_map(|(s, t)| {
                t.as_table()
                    .unwrap()
                    .keys()
                    .map(move |k| (s.as_str(), k.as_str()))
            })
            .collect();
        let in_table: BTreeSet<(&str, &str)> = PARAMS.iter().map(|p| (p.section, p.key)).collect();
        assert_eq!(in_file, in_table);
        // The comment just above each bounded key gives its range as a
        // startup error words it.
        let lines: Vec<&str> = text.lines().collect();
        for p in PARAMS {
            let Some(r) = range_of(p).filter(|r| r.min > 0 || r.max < i64::MAX) else {
                continue;
            };
            let at = lines
                .iter()
                .position(|l| l.starts_with(&format!("{} = ", p.key)));
            let above = lines[..at.unwrap()]
                .iter()
                .rev()
                .take_while(|l| l.starts_with('#'));
            let comment = above.copied().collect::<Vec<_>>().join(" ");
            assert!(comment.contains(&r.describe()), "{}: {comment}", p.key);
        }
    }

    #[test]
    fn every_runtime_row_can_be_set_to_its_own_value() {
        let mut c = Config::default();
        for p in PARAMS.iter().filter(|p| p.access == Runtime) {
            let v = p.get(&c).render();
            assert_eq!(c.set(p.name, &v), Ok(()), "{}", p.name);
        }
        assert_eq!(c, Config::default());
    }

    #[test]
    fn bad_numbers_are_refused_with_redis_texts() {
        let c = Config::default();
        // What CONFIG SET answers for the settable ones, to the letter.
        let cases = [
            (
                "maxclients",
                "0",
                "argument must be between 1 and 4294967295 inclusive",
            ),
            (
                "maxclients",
                "4294967296",
                "argument must be between 1 and 4294967295 inclusive",
            ),
            (
                "maxclients",
                "many",
                "argument couldn't be parsed into an integer",
            ),
            (
                "proto-max-bulk-len",
                "1kb",
                "argument must be between 1048576 and 9223372036854775807 inclusive",
            ),
            (
                "proto-max-bulk-len",
                "-1",
                "argument must be a memory value",
            ),
            (
                "client-query-buffer-limit",
                "1",
                "argument must be between 1048576 and 9223372036854775807 inclusive",
            ),
            (
                "client-query-buffer-limit",
                "lots",
                "argument must be a memory value",
            ),
            (
                "hz",
                "-1",
                "argument must be between 0 and 2147483647 inclusive",
            ),
            ("hz", "x", "argument couldn't be parsed into an integer"),
            (
                "busy-reply-threshold",
                "-1",
                "argument must be between 0 and 9223372036854775807 inclusive",
            ),
            (
                "replica-priority",
                "-1",
                "argument must be between 0 and 2147483647 inclusive",
            ),
            (
                "replica-announce-port",
                "65536",
                "argument must be between 0 and 65535 inclusive",
            ),
            (
                "repl-timeout",
                "0",
                "argument must be between 1 and 2147483647 inclusive",
            ),
            (
                "repl-ping-replica-period",
                "0",
                "argument must be between 1 and 2147483647 inclusive",
            ),
            (
                "auto-aof-rewrite-percentage",
                "-1",
                "argument must be between 0 and 2147483647 inclusive",
            ),
            (
                "auto-aof-rewrite-min-size",
                "lots",
                "argument must be a memory value",
            ),
            ("maxmemory", "lots", "argument must be a memory value"),
            (
                "hash-max-listpack-entries",
                "-1",
                "argument must be between 0 and 9223372036854775807 inclusive",
            ),
            (
                "hash-max-listpack-value",
                "1k",
                "argument couldn't be parsed into an integer",
            ),
            (
                "zset-max-listpack-entries",
                "-1",
                "argument must be between 0 and 9223372036854775807 inclusive",
            ),
            (
                "zset-max-listpack-value",
                "1k",
                "argument couldn't be parsed into an integer",
            ),
            (
                "list-max-listpack-size",
                "2147483648",
                "argument must be between -2147483648 and 2147483647 inclusive",
            ),
            (
                "set-max-intset-entries",
                "-1",
                "argument must be between 0 and 9223372036854775807 inclusive",
            ),
            (
                "set-max-listpack-entries",
                "x",
                "argument couldn't be parsed into an integer",
            ),
            (
                "set-max-listpack-value",
                "-5",
                "argument must be between 0 and 9223372036854775807 inclusive",
            ),
            (
                "hotkey-split-share",
                "0",
                "argument must be between 1 and 100 inclusive",
            ),
            (
                "hotkey-min-rate",
                "0",
                "argument must be between 1 and 9223372036854775807 inclusive",
            ),
            (
                "hotkey-merge-rate",
                "-1",
                "argument must be between 0 and 9223372036854775807 inclusive",
            ),
            (
                "hotkey-cooldown",
                "x",
                "argument couldn't be parsed into an integer",
            ),
        ];
        for (name, value, why) in cases {
            assert_eq!(
                c.clone().set(name, value),
                Err(SetError::Invalid(why)),
                "{name} {value}"
            );
        }
        let numeric = PARAMS.iter().filter(|p| range_of(p).is_some());
        for p in numeric.clone().filter(|p| p.access == Runtime) {
            assert!(
                cases.iter().any(|(n, _, _)| *n == p.name),
                "{} has no case",
                p.name
            );
        }
        // Every numeric row, settable or not, refuses what is below its range
        // and what is not a number, with Redis's texts.
        for p in numeric {
            let r = range_of(p).unwrap();
            let between = format!("argument must be between {} and {} inclusive", r.min, r.max);
            assert_eq!(r.error, between, "{}", p.name);
            // A memory size below 0 is not a memory value at all, as in Redis.
            let below = match (p.kind, r.min) {
                (Kind::Memory(_), 0) => NOT_MEMORY,
                _ => r.error,
            };
            assert_eq!(
                p.kind.parse(&(r.min - 1).to_string()),
                Err(below),
                "{}",
                p.name
            );
            let not_a_number = match p.kind {
                Kind::Memory(_) => NOT_MEMORY,
                _ => NOT_INTEGER,
            };
            assert_eq!(p.kind.parse("x"), Err(not_a_number), "{}", p.name);
        }
    }

    #[test]
    fn config_knows_only_its_rows_and_the_fixed_settings() {
        let mut c = Config::default();
        assert_eq!(c.set("port", "1"), Err(SetError::Immutable));
        assert_eq!(c.set("databases", "1"), Err(SetError::Immutable));
        assert_eq!(c.set("save", "900 1"), Ok(()));
        assert_eq!(c.persistence.save, "900 1");
        assert_eq!(
            c.set("save", "900"),
            Err(SetError::Invalid("Invalid save parameters"))
        );
        assert_eq!(c.set("save", ""), Ok(()));
        assert_eq!(c.set("appendfsync", "ALWAYS"), Ok(()));
        assert_eq!(c.persistence.appendfsync, "always");
        assert!(matches!(
            c.set("appendfsync", "sometimes"),
            Err(SetError::Invalid(_))
        ));
        assert_eq!(c.set("max-inline-len", "4096"), Err(SetError::Unknown));
        assert_eq!(c.set("nosuch", "1"), Err(SetError::Unknown));
        assert!(find("max-inline-len").is_none());
        assert_eq!(row("max-inline-len").access, FileOnly);
        let names: Vec<_> = c
            .matching(|n| n.starts_with("max"))
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["maxclients", "maxmemory", "maxmemory-policy"]);
        assert_eq!(c.matching(|n| n == "hz"), [("hz", "10".to_string())]);
        // Listed under an alias only when the name does not match.
        assert_eq!(
            c.matching(|n| n.starts_with("lua")),
            [("lua-time-limit", "5000".to_string())]
        );
        assert_eq!(
            c.matching(|n| n.starts_with("busy") || n.starts_with("lua")),
            [("busy-reply-threshold", "5000".to_string())]
        );
    }

    #[test]
    fn the_tls_settings_are_shown_and_fixed_at_start() {
        let mut c = Config::default();
        let tls: Vec<_> = c.matching(|n| n.starts_with("tls-"));
        let want = [
            ("tls-port", "0"),
            ("tls-cert-file", ""),
            ("tls-key-file", ""),
            ("tls-ca-cert-file", ""),
            ("tls-auth-clients", "yes"),
            ("tls-replication", "no"),
        ];
        let want: Vec<_> = want.iter().map(|(n, v)| (*n, v.to_string())).collect();
        assert_eq!(tls, want);
        for (name, value) in [("tls-port", "7000"), ("tls-auth-clients", "no")] {
            assert_eq!(c.set(name, value), Err(SetError::Immutable), "{name}");
        }
        assert_eq!(
            row("tls-auth-clients").kind.parse("OPTIONAL"),
            Ok(Value::Text("optional".into()))
        );
        assert!(row("tls-auth-clients").kind.parse("maybe").is_err());
        c.tls.auth_clients = "sometimes".into();
        assert_eq!(
            c.validate(),
            Err("invalid auth_clients: must be one of yes, no, optional".into())
        );
    }

    #[test]
    fn an_alias_names_its_row() {
        let p = row("hz").with_aliases(&["frequency"]);
        assert!(p.is_named("hz") && p.is_named("frequency") && !p.is_named("freq"));
    }

    #[test]
    fn the_startup_check_uses_the_rows_parsers() {
        let mut c = Config::default();
        c.expiry.hz = 0;
        c.log.level = "WARNING".into();
        assert_eq!(c.normalize(), Ok(()));
        assert_eq!((c.expiry.hz, c.log.level.as_str()), (1, "warning"));
        assert_eq!(c.shards.threads, 0, "a resolved thread count is not stored");
        type Break = fn(&mut Config);
        let cases: [(Break, &str); 3] = [
            (
                |c| c.limits.max_inline_len = 10,
                "max_inline_len: must be at least 1024",
            ),
            (
                |c| c.expiry.budget_percent = 101,
                "budget_percent: must be 1..=100",
            ),
            (|c| c.net.port = 0, ""),
        ];
        for (break_it, why) in cases {
            let mut c = Config::default();
            break_it(&mut c);
            let want = if why.is_empty() {
                Ok(())
            } else {
                Err(format!("invalid {why}"))
            };
            assert_eq!(c.validate(), want);
        }
    }
}
