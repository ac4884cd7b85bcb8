//! Configuration: one struct per section, defaults as named constants, an
//! optional TOML file (`config/leasehold.example.toml` comments every key) and
//! command-line flags named like redis-server's, which override the file.
//!
//! The lowest layer of the server: it imports no other module of it.
//! [`params::PARAMS`] names every setting once, with its TOML key, parser,
//! CONFIG access and flag; [`parse`] has one parser per kind of value;
//! [`Flags`] builds the command line from the table.

use std::path::{Path, PathBuf};

use serde::Deserialize;

mod flags;
pub mod params;
pub mod parse;

pub use flags::Flags;

/// Default TCP port, as Redis.
pub const DEFAULT_PORT: u16 = 6379;
/// Default bind address: loopback only, like Redis's protected default.
pub const DEFAULT_BIND: &str = "127.0.0.1";
/// Redis's default `maxclients`.
pub const DEFAULT_MAXCLIENTS: usize = 10_000;
/// Redis's default `tcp-backlog`.
pub const DEFAULT_TCP_BACKLOG: i32 = 511;
/// Redis's default `client-query-buffer-limit`: 1 GB.
pub const DEFAULT_QUERY_BUFFER_LIMIT: usize = 1024 * 1024 * 1024;
/// Active-expiry cycles per second, Redis's default `hz`.
pub const DEFAULT_HZ: u32 = 10;
/// Share of each expiry period a cycle may spend when many keys are expiring:
/// Redis's `ACTIVE_EXPIRE_CYCLE_SLOW_TIME_PERC` is 25.
pub const DEFAULT_EXPIRY_BUDGET_PERCENT: u32 = 25;
/// Default effect backlog per shard, bytes: 1 MB, Redis's default
/// `repl-backlog-size`.
pub const DEFAULT_REPL_BACKLOG_BYTES: usize = 1024 * 1024;

/// `[net]`: listening and connections.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetConfig {
    /// Address to listen on.
    pub bind: String,
    /// TCP port; 0 picks a free one (tests), or, with a `tls-port`, means
    /// no plain port (TLS only, as Redis).
    pub port: u16,
    /// Listen backlog.
    pub tcp_backlog: i32,
    /// Most simultaneous client connections; more are refused with an error.
    pub maxclients: usize,
    /// Port of the Prometheus endpoint (`GET /metrics` over HTTP on the
    /// `bind` address); 0: none.
    pub metrics_port: u16,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            bind: DEFAULT_BIND.into(),
            port: DEFAULT_PORT,
            tcp_backlog: DEFAULT_TCP_BACKLOG,
            maxclients: DEFAULT_MAXCLIENTS,
            metrics_port: 0,
        }
    }
}

/// `[shards]`: threads and keyspace split.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShardsConfig {
    /// Threads, each with one shard and one event loop; 0 means one per core.
    pub threads: usize,
}

/// `[limits]`: protection against bad or huge input.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest bulk string, bytes (`proto-max-bulk-len`).
    pub proto_max_bulk_len: usize,
    /// Most elements in one request array.
    pub max_multibulk_len: usize,
    /// Longest inline request, bytes.
    pub max_inline_len: usize,
    /// Largest unprocessed input a connection may hold, bytes
    /// (`client-query-buffer-limit`); past it the connection is closed.
    pub client_query_buffer_limit: usize,
    /// Output limits per client class (`client-output-buffer-limit`), as
    /// [`parse::OutputLimits::render`] writes them; every class is enforced
    /// ([`LimitsConfig::normal_output_limit`],
    /// [`LimitsConfig::replica_output_limit`],
    /// [`LimitsConfig::pubsub_output_limit`]).
    pub client_output_buffer_limit: String,
    /// `maxmemory`: past this many bytes allocated, commands that may
    /// allocate (`denyoom`) are refused with `-OOM` (Redis's `noeviction`
    /// policy, the only one); 0 for no limit.
    pub maxmemory: usize,
    /// Milliseconds a script runs before other connections get `-BUSY` for
    /// its shard and SCRIPT KILL may stop it (`busy-reply-threshold`, alias
    /// `lua-time-limit`; Redis's default 5000; 0: from the first check).
    pub busy_reply_threshold: u64,
}

impl LimitsConfig {
    /// The pub/sub class's output limit: what a subscribed connection may
    /// hold unwritten before it is closed (Redis's default 32 MB hard, 8 MB
    /// for 60 s soft, when the text names none).
    pub fn pubsub_output_limit(&self) -> parse::OutputLimit {
        self.output_limit(parse::OutputLimits::PUBSUB)
    }

    /// The normal class's output limit: what any other client connection
    /// may hold unwritten before it is closed (none by default, as Redis).
    pub fn normal_output_limit(&self) -> parse::OutputLimit {
        self.output_limit(parse::OutputLimits::NORMAL)
    }

    /// The replica class's output limit: what a replica's stream may hold
    /// unwritten before its link is dropped (Redis's default 256 MB hard,
    /// 64 MB for 60 s soft, when the text names none).
    pub fn replica_output_limit(&self) -> parse::OutputLimit {
        self.output_limit(parse::OutputLimits::REPLICA)
    }

    fn output_limit(&self, class: usize) -> parse::OutputLimit {
        let given =
            parse::OutputLimits::parse(&self.client_output_buffer_limit).map(|l| l.0[class]);
        let default = parse::OutputLimits::DEFAULT.0[class];
        given.ok().flatten().or(default).unwrap_or_default()
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            proto_max_bulk_len: leasehold_protocol::request::DEFAULT_MAX_BULK_LEN,
            max_multibulk_len: leasehold_protocol::request::DEFAULT_MAX_MULTIBULK_LEN,
            max_inline_len: leasehold_protocol::request::DEFAULT_MAX_INLINE_LEN,
            client_query_buffer_limit: DEFAULT_QUERY_BUFFER_LIMIT,
            client_output_buffer_limit: parse::OutputLimits::DEFAULT.render(),
            maxmemory: 0,
            busy_reply_threshold: 5000,
        }
    }
}

/// `[security]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecurityConfig {
    /// Password for the default user; empty means no AUTH required.
    pub requirepass: String,
    /// `protected-mode`: with no password set, clients from outside the
    /// loopback interface are refused with Redis's `-DENIED` text.
    pub protected_mode: bool,
    /// `aclfile`: the ACL file read at the start and by ACL LOAD, written
    /// by ACL SAVE (empty: none; users live only in memory).
    pub aclfile: String,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            requirepass: String::new(),
            protected_mode: true,
            aclfile: String::new(),
        }
    }
}

/// `[ratelimit]`: the rate-limit commands.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitConfig {
    /// `rate-limit-pins`: pinned limits, `;`-separated, each `<prefix>
    /// TOKENBUCKET <capacity> <rate> <period_ms>`, `<prefix> SLIDINGWINDOW
    /// <limit> <window_ms>` or `<prefix> GCRA <max_burst> <count_per_period>
    /// <period_ms>`; checked when the server starts (the words are read by
    /// the rate-limit layer, above this one).
    pub pins: String,
    /// `hotkey-split`: split a hot token-bucket, GCRA or sliding-window key over every shard
    /// (`docs/hotkeys.md`).
    pub hotkey_split: bool,
    /// `hotkey-split-share`: the percent of its shard's rate-limit commands
    /// a key must take in a detection window to be hot.
    pub hotkey_split_share: u64,
    /// `hotkey-min-rate`: the rate-limit commands per second a key must take
    /// to be hot.
    pub hotkey_min_rate: u64,
    /// `hotkey-merge-rate`: a split key whose commands per second stay under
    /// this for `hotkey-cooldown` ms is merged (below `hotkey-min-rate`, so
    /// a key does not flap).
    pub hotkey_merge_rate: u64,
    /// `hotkey-cooldown`: milliseconds a split key stays under
    /// `hotkey-merge-rate` before it is merged.
    pub hotkey_cooldown: u64,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        RateLimitConfig {
            pins: String::new(),
            hotkey_split: true,
            hotkey_split_share: 30,
            hotkey_min_rate: 5000,
            hotkey_merge_rate: 1000,
            hotkey_cooldown: 5000,
        }
    }
}

/// `[expiry]`: active reclamation of expired keys.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExpiryConfig {
    /// Reclamation cycles per second per shard.
    pub hz: u32,
    /// Most of each cycle's period, in percent, a busy cycle may use.
    pub budget_percent: u32,
}

impl Default for ExpiryConfig {
    fn default() -> Self {
        ExpiryConfig {
            hz: DEFAULT_HZ,
            budget_percent: DEFAULT_EXPIRY_BUDGET_PERCENT,
        }
    }
}

/// `[replication]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplicationConfig {
    /// Effect backlog kept per shard and for the merged stream, bytes
    /// (`repl-backlog-size`).
    pub backlog_bytes: usize,
    /// `replicaof`: `"<host> <port>"` to follow, empty for a primary.
    /// REPLICAOF changes it, so CONFIG REWRITE keeps the role.
    pub replicaof: String,
    /// `masterauth`: the password sent to the primary (empty: none).
    pub masterauth: String,
    /// `masteruser`: the user name sent with it (empty: none).
    pub masteruser: String,
    /// `replica-priority`: Sentinel promotes the lowest non-zero first; 0
    /// never (INFO `slave_priority`).
    pub replica_priority: u32,
    /// `replica-announce-ip`: the address given to the primary (empty:
    /// the one it sees).
    pub replica_announce_ip: String,
    /// `replica-announce-port`: the port given to the primary (0: the
    /// listening port).
    pub replica_announce_port: u16,
    /// `repl-timeout`: seconds of silence after which either side of a
    /// link drops it.
    pub repl_timeout: u32,
    /// `repl-ping-replica-period`: seconds between a primary's `PING`
    /// records while replicas are connected.
    pub repl_ping_replica_period: u32,
}

/// Redis's `replica-priority` default.
pub const DEFAULT_REPLICA_PRIORITY: u32 = 100;
/// Redis's `repl-timeout` default, seconds.
pub const DEFAULT_REPL_TIMEOUT: u32 = 60;
/// Redis's `repl-ping-replica-period` default, seconds.
pub const DEFAULT_REPL_PING_PERIOD: u32 = 10;

impl Default for ReplicationConfig {
    fn default() -> Self {
        ReplicationConfig {
            backlog_bytes: DEFAULT_REPL_BACKLOG_BYTES,
            replicaof: String::new(),
            masterauth: String::new(),
            masteruser: String::new(),
            replica_priority: DEFAULT_REPLICA_PRIORITY,
            replica_announce_ip: String::new(),
            replica_announce_port: 0,
            repl_timeout: DEFAULT_REPL_TIMEOUT,
            repl_ping_replica_period: DEFAULT_REPL_PING_PERIOD,
        }
    }
}

/// `[persistence]`: snapshots and the append-only log.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PersistenceConfig {
    /// `dir`: where the snapshot and the append-only directory are.
    pub dir: String,
    /// `dbfilename`: the snapshot's file name inside `dir`.
    pub dbfilename: String,
    /// `save`: snapshot rules, pairs `<seconds> <changes>` (a snapshot is
    /// taken when at least `changes` writes happened and `seconds` passed
    /// since the last one); empty for none.
    pub save: String,
    /// `appendonly`: log every effect to the append-only files.
    pub appendonly: bool,
    /// `appendfsync`: `always` (a reply leaves after its effects are on
    /// disk), `everysec` (one fsync a second) or `no` (the system's choice).
    pub appendfsync: String,
    /// `appendfilename`: the base name of the append-only files.
    pub appendfilename: String,
    /// `appenddirname`: the append-only files' directory inside `dir`.
    pub appenddirname: String,
    /// `auto-aof-rewrite-percentage`: rewrite the log when it grew by this
    /// share of its size after the last rewrite (0: never by itself).
    pub auto_aof_rewrite_percentage: u32,
    /// `auto-aof-rewrite-min-size`: no automatic rewrite below this size, bytes.
    pub auto_aof_rewrite_min_size: usize,
    /// `aof-load-truncated`: a last record cut short is dropped with a
    /// warning (`yes`) or refuses the start (`no`).
    pub aof_load_truncated: bool,
    /// `load-corrupt-snapshot`: start from a snapshot whose checksum fails,
    /// keeping the records that decode (`yes`), or refuse to start (`no`).
    pub load_corrupt_snapshot: bool,
    /// `stop-writes-on-bgsave-error`: refuse writes with `-MISCONF` while
    /// the last snapshot failed and save rules are set.
    pub stop_writes_on_bgsave_error: bool,
}

/// Redis's default `save` rules (redis.conf when no file is given).
pub const DEFAULT_SAVE: &str = "3600 1 300 100 60 10000";

impl Default for PersistenceConfig {
    fn default() -> Self {
        PersistenceConfig {
            dir: ".".into(),
            dbfilename: "dump.lhs".into(),
            save: DEFAULT_SAVE.into(),
            appendonly: false,
            appendfsync: "everysec".into(),
            appendfilename: "appendonly.aof".into(),
            appenddirname: "appendonlydir".into(),
            auto_aof_rewrite_percentage: 100,
            auto_aof_rewrite_min_size: 64 * 1024 * 1024,
            aof_load_truncated: true,
            load_corrupt_snapshot: false,
            stop_writes_on_bgsave_error: true,
        }
    }
}

/// The `save` rules of a `save` value: `(seconds, changes)` pairs.
/// `None` when the text is not pairs of non-negative integers.
pub fn save_rules(text: &str) -> Option<Vec<(u64, u64)>> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() % 2 != 0 {
        return None;
    }
    words
        .chunks(2)
        .map(|p| {
            let n = |w: &str| leasehold_protocol::int::parse_u64(w.as_bytes());
            Some((n(p[0])?, n(p[1])?))
        })
        .collect()
}

/// Redis's `loglevel` names and the tracing levels, as CONFIG SET loglevel
/// and `--loglevel` take them; anything else must be a tracing directive
/// list with `=` or `,` (e.g. `leasehold_server=debug,info`).
pub const LOG_LEVELS: &[&str] = &[
    "debug", "verbose", "notice", "warning", "nothing", "trace", "info", "warn", "error", "off",
];

/// The `tracing` filter for a `loglevel` value: Redis's names map to the
/// nearest tracing level (`verbose` debug, `notice` info, `warning` warn,
/// `nothing` off); tracing levels and directives pass through.
pub fn log_filter(level: &str) -> String {
    match level.to_ascii_lowercase().as_str() {
        "verbose" => "debug".into(),
        "notice" => "info".into(),
        "warning" => "warn".into(),
        "nothing" => "off".into(),
        _ => level.to_string(),
    }
}

/// Whether `level` is a `loglevel` the server takes (see [`LOG_LEVELS`]).
pub fn valid_log_level(level: &str) -> bool {
    LOG_LEVELS.contains(&level.to_ascii_lowercase().as_str())
        || (level.contains(['=', ','])
            && tracing_subscriber::EnvFilter::try_new(log_filter(level)).is_ok())
}

/// How CONFIG SET loglevel reaches the process's log subscriber: the binary
/// installs a reloadable filter and sets this; without it (tests, embedding)
/// CONFIG SET loglevel only records the value.
pub type LogReload = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// The installed [`LogReload`], if any.
pub static LOG_RELOAD: std::sync::OnceLock<LogReload> = std::sync::OnceLock::new();

/// After CONFIG SET changed the configuration from `old` to `new`: a new
/// `loglevel` goes to the log subscriber through [`LOG_RELOAD`] (a failure
/// is logged). Every other setting is read where it is used.
pub fn apply_log_level(old: &Config, new: &Config) {
    let level = &new.log.level;
    if *level == old.log.level {
        return;
    }
    if let Some(reload) = LOG_RELOAD.get() {
        if let Err(e) = reload(&log_filter(level)) {
            tracing::warn!("cannot apply loglevel {level}: {e}");
        }
    }
}

/// `[collections]`: when small lists and hashes leave their compact
/// encodings (Redis's names and ranges).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CollectionsConfig {
    /// Most fields a hash keeps in its listpack (`hash-max-listpack-entries`).
    pub hash_max_listpack_entries: usize,
    /// Longest field or value a hash keeps in its listpack, bytes
    /// (`hash-max-listpack-value`).
    pub hash_max_listpack_value: usize,
    /// A list node's limit (`list-max-listpack-size`): -1 to -5 cap it at
    /// 4, 8, 16, 32 or 64 KiB (below -5 is -5), a positive number at that
    /// many elements.
    pub list_max_listpack_size: i32,
    /// Most members a set of integers keeps as an intset
    /// (`set-max-intset-entries`).
    pub set_max_intset_entries: usize,
    /// Most members a set keeps in its compact pack
    /// (`set-max-listpack-entries`, Redis 7.2's).
    pub set_max_listpack_entries: usize,
    /// Longest member a set keeps in its compact pack, bytes
    /// (`set-max-listpack-value`, Redis 7.2's).
    pub set_max_listpack_value: usize,
    /// Most members a sorted set keeps in its listpack
    /// (`zset-max-listpack-entries`).
    pub zset_max_listpack_entries: usize,
    /// Longest member a sorted set keeps in its listpack, bytes
    /// (`zset-max-listpack-value`).
    pub zset_max_listpack_value: usize,
}

impl Default for CollectionsConfig {
    /// redis.conf's values (the compiled-in hash default of redis-server
    /// 7.0 without a file is 512 fields; redis.conf sets 128).
    fn default() -> Self {
        CollectionsConfig {
            hash_max_listpack_entries: 128,
            hash_max_listpack_value: 64,
            list_max_listpack_size: -2,
            set_max_intset_entries: 512,
            set_max_listpack_entries: 128,
            set_max_listpack_value: 64,
            zset_max_listpack_entries: 128,
            zset_max_listpack_value: 64,
        }
    }
}

/// `[cluster]`: cluster mode (`docs/cluster.md`).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// `cluster-enabled`: serve Redis Cluster's client protocol (MOVED,
    /// CROSSSLOT by slot, CLUSTER SLOTS, ...) from the topology.
    pub enabled: bool,
    /// `cluster-config-file` (flag alias `--cluster-topology`): the
    /// topology file (TOML: groups, their slot ranges and nodes, a
    /// version), reloaded when it changes; empty: none until
    /// `LH.TOPOLOGY SET` pushes one.
    pub config_file: String,
    /// `cluster-announce-ip`: the address this node has in the topology
    /// (empty: the bound address).
    pub announce_ip: String,
    /// `cluster-announce-port`: the port this node has in the topology (0:
    /// the bound port).
    pub announce_port: u16,
    /// `cluster-node-id`: this node's id in the topology, which then
    /// identifies it whatever its address (empty: found by address).
    pub node_id: String,
    /// `cluster-sentinels`: sentinels (`host:port`) asked for the current
    /// primary of every group that names a Sentinel master name, besides
    /// the topology's own `sentinels`. In the file a list of strings (or
    /// one string, comma-separated); the flag takes them comma-separated.
    #[serde(deserialize_with = "list_or_text")]
    pub sentinels: Vec<String>,
}

/// A list of strings, or one string of comma-separated items.
fn list_or_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        List(Vec<String>),
        Text(String),
    }
    Ok(match Either::deserialize(d)? {
        Either::List(l) => l,
        Either::Text(t) => split_list(&t),
    })
}

/// `"a, b,c"` as `["a", "b", "c"]` (empty items dropped).
pub fn split_list(text: &str) -> Vec<String> {
    text.split([',', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// `[tls]`: TLS on a second port, with Redis 7's settings
/// (`tls-port`, `tls-cert-file`, ...; see Redis's `TLS.md`). Read at the
/// start only.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// `tls-port`: the port serving RESP over TLS on the `bind` address; 0
    /// (the default): no TLS. With `port 0` and a TLS port, TLS only (as
    /// Redis).
    pub port: u16,
    /// `tls-cert-file`: the server's certificate chain, PEM.
    pub cert_file: String,
    /// `tls-key-file`: the server's private key, PEM (PKCS#8, PKCS#1 or
    /// SEC1).
    pub key_file: String,
    /// `tls-ca-cert-file`: CA certificates, PEM, that client certificates
    /// are checked against (and a replica checks its primary's against);
    /// empty: clients are not asked for one.
    pub ca_cert_file: String,
    /// `tls-auth-clients`: `yes` (a client must show a certificate the CA
    /// signed), `optional` (one shown is checked; none is fine) or `no`.
    /// Redis's default `yes`.
    pub auth_clients: String,
    /// `tls-replication`: a replica connects to its primary with TLS (and
    /// the primary's TLS port serves replicas as any client).
    pub replication: bool,
}

/// The words `tls-auth-clients` takes, as Redis.
pub const TLS_AUTH_CLIENTS: &[&str] = &["yes", "no", "optional"];

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            port: 0,
            cert_file: String::new(),
            key_file: String::new(),
            ca_cert_file: String::new(),
            auth_clients: "yes".into(),
            replication: false,
        }
    }
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `tracing` filter, e.g. `info` or `leasehold_server=debug`.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
        }
    }
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[net]`
    pub net: NetConfig,
    /// `[shards]`
    pub shards: ShardsConfig,
    /// `[limits]`
    pub limits: LimitsConfig,
    /// `[security]`
    pub security: SecurityConfig,
    /// `[expiry]`
    pub expiry: ExpiryConfig,
    /// `[ratelimit]`
    pub ratelimit: RateLimitConfig,
    /// `[replication]`
    pub replication: ReplicationConfig,
    /// `[persistence]`
    pub persistence: PersistenceConfig,
    /// `[collections]`
    pub collections: CollectionsConfig,
    /// `[cluster]`
    pub cluster: ClusterConfig,
    /// `[tls]`
    pub tls: TlsConfig,
    /// `[log]`
    pub log: LogConfig,
    /// The file the configuration was read from, as an absolute path (INFO
    /// `config_file`, the file CONFIG REWRITE writes); not a key of the file.
    #[serde(skip)]
    pub file: Option<PathBuf>,
}

impl Config {
    /// Threads to run: `shards.threads`, or the number of cores when 0.
    pub fn threads(&self) -> usize {
        match self.shards.threads {
            0 => std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            n => n,
        }
    }

    /// Checks every parameter as [`Config::normalize`] does, without
    /// changing anything.
    ///
    /// # Errors
    /// `invalid <key>: must be <range>` for the first parameter out of its
    /// range, naming its TOML key (`invalid maxclients: must be 1..=4294967295`).
    pub fn validate(&self) -> Result<(), String> {
        self.clone().normalize()
    }

    /// Parses a TOML configuration file's text.
    ///
    /// # Errors
    /// The TOML error, naming the line and the unknown or mistyped key.
    pub fn from_toml(text: &str) -> Result<Config, toml::de::Error> {
        toml::from_str(text)
    }

    /// Reads a TOML configuration file and remembers its absolute path in
    /// [`Config::file`].
    ///
    /// # Errors
    /// A message naming the file and what is wrong with it.
    pub fn from_file(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut c = Config::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        c.file = Some(std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()));
        Ok(c)
    }

    /// CONFIG REWRITE: rewrites `path` with the current values of the
    /// settings CONFIG SET can change. Like Redis, a setting is written when
    /// the file already has it or its value is not the default; every other
    /// key of the file is kept as it is. Comments are not kept (the file is
    /// re-serialised). The new text goes to a temporary file in the same
    /// directory, renamed over the old one, so a crash leaves one or the other.
    ///
    /// # Errors
    /// The I/O or TOML error, as text.
    pub fn rewrite(&self, path: &Path) -> Result<(), String> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e.to_string()),
        };
        let mut doc: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
        let defaults = Config::default();
        // `replicaof` is not CONFIG SET's to change but REPLICAOF's, and
        // the file keeps it so a restarted replica follows its primary.
        for p in params::PARAMS
            .iter()
            .filter(|p| p.access == params::Access::Runtime || p.name == "replicaof")
        {
            let (section, key) = (p.section, p.key);
            let value = p.get(self).to_toml();
            let present = doc
                .get(section)
                .and_then(toml::Value::as_table)
                .is_some_and(|t| t.contains_key(key));
            if !present && value == p.get(&defaults).to_toml() {
                continue;
            }
            let table = doc
                .entry(section)
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let toml::Value::Table(table) = table else {
                return Err(format!("[{section}] is not a table"));
            };
            table.insert(key.to_string(), value);
        }
        let out = toml::to_string(&doc).map_err(|e| e.to_string())?;
        let tmp = path.with_extension(format!("rewrite-{}.tmp", std::process::id()));
        std::fs::write(&tmp, out)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                e.to_string()
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_file_parses_to_the_defaults() {
        let text = include_str!("../../../config/leasehold.example.toml");
        assert_eq!(Config::from_toml(text).unwrap(), Config::default());
    }

    #[test]
    fn limits_that_lock_everyone_out_are_refused() {
        let mut c = Config::default();
        assert_eq!(c.validate(), Ok(()));
        c.net.maxclients = 0;
        assert_eq!(
            c.validate(),
            Err("invalid maxclients: must be 1..=4294967295".into())
        );
        c.net.maxclients = 10;
        c.limits.proto_max_bulk_len = 0;
        assert!(c.validate().unwrap_err().contains("proto_max_bulk_len"));
    }

    #[test]
    fn rewrite_keeps_other_keys_and_writes_changed_settings() {
        let dir = std::env::temp_dir().join(format!("leasehold-rewrite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("unit.toml");
        std::fs::write(&path, "# comment\n[net]\nport = 7300\nmaxclients = 5\n").unwrap();
        let mut c = Config::from_file(&path).unwrap();
        assert!(c.file.as_ref().unwrap().is_absolute());
        c.net.maxclients = 77;
        c.expiry.hz = 20;
        // REPLICAOF's target is kept too (CONFIG SET cannot change it).
        c.replication.replicaof = "10.0.0.1 6379".into();
        c.rewrite(&path).unwrap();
        let back = Config::from_file(&path).unwrap();
        assert_eq!(
            (back.net.port, back.net.maxclients, back.expiry.hz),
            (7300, 77, 20)
        );
        assert_eq!(back.replication.replicaof, "10.0.0.1 6379");
        // Settings at their default and absent from the file stay absent.
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("requirepass") && !text.contains("level"),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn memory_flags_take_redis_units() {
        let bytes = |f: &Flags, name| f.get(name).and_then(parse::Value::as_int);
        let f = Flags::try_parse_from([
            "leasehold-server",
            "--proto-max-bulk-len",
            "1mb",
            "--client-query-buffer-limit",
            "2GB",
        ])
        .unwrap();
        assert_eq!(bytes(&f, "proto-max-bulk-len"), Some(1 << 20));
        assert_eq!(bytes(&f, "client-query-buffer-limit"), Some(2 << 30));
        let f = Flags::try_parse_from(["leasehold-server", "--proto-max-bulk-len", "1048576"]);
        assert_eq!(bytes(&f.unwrap(), "proto-max-bulk-len"), Some(1 << 20));
        for bad in ["1kb", "lots"] {
            let e = Flags::try_parse_from(["leasehold-server", "--proto-max-bulk-len", bad]);
            assert!(e.is_err(), "{bad}");
        }
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = Config::from_toml("[net]\nprot = 1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("prot"), "{err}");
    }
}
