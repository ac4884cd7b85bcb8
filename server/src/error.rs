//! Every error reply the server sends, written once, in Redis 7's exact wording.
//!
//! Handlers return [`OpError`]; only [`OpError::reply`] turns it into text.

use leasehold_protocol::{ArgError, Reply};

/// Why a command failed. Each variant maps to one Redis error text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpError {
    /// `ERR syntax error`
    Syntax,
    /// `WRONGTYPE Operation against a key holding the wrong kind of value`
    WrongType,
    /// `ERR value is not an integer or out of range`
    NotInteger,
    /// `ERR value is not a valid float`
    NotFloat,
    /// `ERR increment or decrement would overflow`
    Overflow,
    /// `ERR decrement would overflow` (DECRBY of i64::MIN)
    DecrementOverflow,
    /// `ERR increment would produce NaN or Infinity`
    NanOrInfinity,
    /// `ERR invalid expire time in '<command>' command`
    InvalidExpire(&'static str),
    /// `ERR NX and XX, GT or LT options at the same time are not compatible`
    NxAndXxGtLt,
    /// `ERR GT and LT options at the same time are not compatible`
    GtAndLt,
    /// `ERR value is out of range, must be positive`
    NotPositive,
    /// `ERR invalid cursor`
    InvalidCursor,
    /// `ERR string exceeds maximum allowed size (proto-max-bulk-len)`
    StringTooLong,
    /// `ERR DB index is out of range`
    DbIndexOutOfRange,
    /// `NOAUTH Authentication required.`
    NoAuth,
    /// `WRONGPASS invalid username-password pair or user is disabled.`
    WrongPass,
    /// AUTH without a configured password.
    AuthNotConfigured,
    /// `NOPROTO unsupported protocol version`
    NoProto,
    /// `ERR wrong number of arguments for '<command>|<sub>' command`; the
    /// string is `<command>|<sub>` in lower case.
    SubcommandArity(String),
    /// `ERR unknown subcommand '<sub>'. Try <COMMAND> HELP.`
    UnknownSubcommand {
        /// The command, upper case.
        command: &'static str,
        /// The subcommand as sent.
        sub: String,
    },
    /// `ERR <argument> must be positive` for rate-limit parameters and the like.
    MustBePositive(&'static str),
    /// `ERR MIN must be between 1 and requested` (TOKENLEASE).
    MinOutOfRange,
    /// `ERR period must be > 0 and < 1e12` (GCRA, Redis 8.8's text).
    GcraPeriod,
    /// `ERR rate limit parameters exceed the supported time range` (GCRA and
    /// CL.THROTTLE when `period * (max_burst + 1)` passes 2^62 ms).
    RateLimitOverflow,
    /// `ERR invalid rate limit state` (LH.RESTORE).
    BadRateLimitState,
    /// `ERR invalid slot range` (LH.FLUSHSLOTS: first above last, or a slot
    /// past 16383).
    InvalidSlotRange,
    /// `CROSSSLOT Keys in request don't hash to the same slot ...`: the keys
    /// of one command live on different shards; the text names the fix (a
    /// common hash tag).
    CrossSlot,
    /// `CROSSSLOT Keys in request don't hash to the same slot`: in cluster
    /// mode, the keys of one command (or of one transaction) are in several
    /// hash slots (Redis Cluster's exact text).
    ClusterCrossSlot,
    /// `MOVED <slot> <host>:<port>`: in cluster mode, another node serves
    /// the slot.
    Moved {
        /// The key's hash slot.
        slot: u16,
        /// The node that serves it, `host:port`.
        addr: String,
    },
    /// `CLUSTERDOWN Hash slot not served`: no group owns the key's slot.
    ClusterDown,
    /// `ASK <slot> <host>:<port>`: the slot is migrating from this node and
    /// the key is not here (any more): ask that node, after ASKING.
    Ask {
        /// The key's hash slot.
        slot: u16,
        /// The node it migrates to, `host:port`.
        addr: String,
    },
    /// `TRYAGAIN Multiple keys request during rehashing of slot`: a
    /// multi-key command on a migrating (or importing) slot whose keys are
    /// not all on this node.
    TryAgain,
    /// `ERR <why>` (CLUSTER SETSLOT: Redis's texts, see
    /// `ClusterState::set_slot`).
    SetSlot(String),
    /// `IOERR error or timeout <what> target instance` (MIGRATE, Redis's
    /// text; `<what>` is `connecting to`, `writing to` or `reading from`).
    MigrateIo(&'static str),
    /// `ERR Target instance replied with error: <error>` (MIGRATE).
    MigrateTarget(String),
    /// `BUSYKEY Target key name already exists.` (MIGRATE without REPLACE).
    BusyKey,
    /// `ERR This instance has cluster support disabled` (CLUSTER, READONLY,
    /// READWRITE, ASKING, LH.TOPOLOGY without cluster mode).
    ClusterDisabled,
    /// `ERR CLUSTER <SUB> is not supported: slots and nodes come from the
    /// topology (docs/cluster.md)`: a Redis Cluster subcommand that changes
    /// the cluster by gossip (ADDSLOTS, MEET, SETSLOT, ...).
    ClusterSubcommandUnsupported(String),
    /// `ERR Invalid slot` (CLUSTER COUNTKEYSINSLOT).
    InvalidSlot,
    /// `ERR Invalid slot or number of keys` (CLUSTER GETKEYSINSLOT).
    InvalidSlotOrCount,
    /// `ERR Unknown node <id>` (CLUSTER REPLICAS).
    UnknownNode(String),
    /// `ERR invalid topology: <why>` (LH.TOPOLOGY SET: the text is not a
    /// topology, or its version is not the one given, or not newer).
    InvalidTopology(String),
    /// `ERR no such key` (LSET on a missing key; RENAME, RENAMENX of one).
    NoSuchKey,
    /// `ERR index out of range` (LSET).
    IndexOutOfRange,
    /// `ERR hash value is not an integer` (HINCRBY).
    HashValueNotInteger,
    /// `ERR hash value is not a float` (HINCRBYFLOAT).
    HashValueNotFloat,
    /// `ERR value is NaN or Infinity` (HINCRBYFLOAT's increment).
    ValueNanOrInfinity,
    /// LPOS's `RANK 0`, in Redis 7.0's words.
    RankZero,
    /// `ERR <option> can't be negative` (LPOS COUNT and MAXLEN).
    CantBeNegative(&'static str),
    /// `ERR value is out of range` (HRANDFIELD's count with WITHVALUES
    /// whose reply length would overflow, or a reply too big to build).
    OutOfRange,
    /// `ERR value is out of range, value must between <min> and <max>`
    /// (Redis's wording, HRANDFIELD's count).
    OutOfRangeBetween(i64, i64),
    /// `ERR shard unavailable (shutting down)`: a shard's thread stopped
    /// before it answered.
    ShardUnavailable,
    /// `ERR wrong number of arguments for '<command>' command`, found while
    /// the command ran (MSET with a key and no value): a failed call, not a
    /// rejected one.
    Arity(&'static str),
    /// `ERR Invalid command specified` (COMMAND GETKEYS).
    InvalidCommandSpecified,
    /// `ERR Invalid number of arguments specified for command` (COMMAND GETKEYS).
    InvalidCommandArguments,
    /// `ERR The command has no key arguments` (COMMAND GETKEYS).
    NoKeyArguments,
    /// `ERR No shutdown in progress.` (SHUTDOWN ABORT).
    NoShutdownInProgress,
    /// `ERR Unsupported option <option>` (EXPIRE and its siblings).
    UnsupportedOption(String),
    /// `ERR Protocol version is not an integer or out of range` (HELLO).
    ProtocolVersionNotInteger,
    /// `ERR Syntax error in HELLO option '<option>'`.
    HelloSyntax(String),
    /// `ERR Client names cannot contain spaces, newlines or special characters.`
    BadClientName,
    /// `ERR Unrecognized option '<option>'` (CLIENT SETINFO).
    UnrecognizedOption(String),
    /// `ERR Unknown client type '<type>'` (CLIENT LIST / KILL TYPE), lower case.
    UnknownClientType(String),
    /// `ERR Invalid client ID` (CLIENT LIST ID).
    InvalidClientId,
    /// `ERR No such user '<name>'` (CLIENT KILL USER).
    NoSuchUser(String),
    /// `ERR No such client` (CLIENT KILL addr).
    NoSuchClient,
    /// `NOPERM this user has no permissions to run the '<command>' command`
    /// (the name lower case, `container|sub` for a subcommand).
    NoPermCommand(String),
    /// `NOPERM this user has no permissions to access one of the keys used
    /// as arguments`
    NoPermKey,
    /// `NOPERM this user has no permissions to access one of the channels
    /// used as arguments`
    NoPermChannel,
    /// `ERR <text>`: an ACL command's refusal, worded by `crate::acl` or
    /// `commands/acl.rs` as Redis words it.
    Acl(String),
    /// `ERR client-id should be greater than 0` (CLIENT KILL ID).
    ClientIdNotPositive,
    /// `ERR Unknown option or number of arguments for CONFIG SET - '<name>'`
    ConfigSetUnknown(String),
    /// `ERR CONFIG SET failed (possibly related to argument '<name>') - <why>`
    ConfigSetFailed {
        /// The parameter, lower case.
        name: String,
        /// Why its value was refused (the parameter table's text).
        why: String,
    },
    /// `ERR The server is running without a config file` (CONFIG REWRITE).
    NoConfigFile,
    /// `ERR Rewriting config file: <io error>` (CONFIG REWRITE).
    ConfigRewrite(String),
    /// `NOAUTH HELLO must be called with the client already authenticated,
    /// ...` (HELLO without AUTH on a server with a password; Redis 7.0's
    /// wording: 7.2 added `<proto>` after HELLO).
    HelloNoAuth,
    /// `READONLY You can't write against a read only replica.`
    ReadOnly,
    /// `LOADING Redis is loading the dataset in memory` (a replica loading
    /// a full sync).
    Loading,
    /// `NOMASTERLINK Can't SYNC while not connected with my master`.
    NoMasterLink,
    /// `ERR Leasehold replication needs a Leasehold replica (REPLCONF capa
    /// lh1)`: a PSYNC from a replica that cannot load our snapshot.
    NotLeaseholdReplica,
    /// `ERR Invalid master port` (REPLICAOF).
    InvalidMasterPort,
    /// `ERR WAIT cannot be used with replica instances. Please also note
    /// that since Redis 4.0 if a replica is configured to be writable (which
    /// is not the default) writes to replicas are just local and are not
    /// propagated.` (WAIT on a replica).
    WaitOnReplica,
    /// `ERR timeout is negative` (WAIT).
    NegativeTimeout,
    /// `ERR Unrecognized REPLCONF option: <option>`.
    UnrecognizedReplconf(String),
    /// `ERR a Leasehold replica does not serve replicas of its own`: PSYNC
    /// to a replica (no chained replication).
    NoChainedReplication,
    /// `ERR Background save already in progress`.
    BgsaveInProgress,
    /// `ERR Background append only file rewriting already in progress`.
    RewriteInProgress,
    /// BGSAVE without SCHEDULE while a log rewrite runs.
    BgsaveWhileRewriting,
    /// `ERR Error saving the snapshot: <why>` (SAVE).
    SaveFailed(String),
    /// `ERR Errors trying to SHUTDOWN. Check logs.`: its snapshot failed.
    ShutdownSaveFailed,
    /// `MISCONF ...`: writes are refused while the last snapshot failed
    /// (`stop-writes-on-bgsave-error yes`).
    Misconf,
    /// `MISCONF Errors writing to the AOF file ...`: `appendonly yes` and
    /// the log cannot be written.
    MisconfLog,
    /// `ERR MULTI calls can not be nested`.
    NestedMulti,
    /// `ERR EXEC without MULTI`.
    ExecWithoutMulti,
    /// `ERR DISCARD without MULTI`.
    DiscardWithoutMulti,
    /// `ERR WATCH inside MULTI is not allowed`.
    WatchInsideMulti,
    /// `EXECABORT Transaction discarded because of previous errors.`: a
    /// command was refused while MULTI queued it.
    ExecAbort,
    /// `EXECABORT Transaction discarded because of: <why>`, `why` being
    /// the error's text less a leading `ERR ` (Redis's `execCommandAbort`):
    /// EXEC refused as a whole (with arguments; or, on a transaction that
    /// writes, on a read-only replica, while persistence fails or past
    /// maxmemory). An open transaction ends with nothing run.
    ExecAbortBecause(Box<OpError>),
    /// `ERR Command not allowed inside a transaction` (PSYNC in MULTI).
    NotInMulti,
    /// `ERR Can't execute '<command>': only (P|S)SUBSCRIBE /
    /// (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context`
    /// (RESP2's subscribed mode), the command in lower case.
    SubscribedContext(&'static str),
    /// `ERR rate limit parameters of keys under '<prefix>' are pinned to
    /// <policy>`: a call on a pinned prefix with other parameters.
    Pinned {
        /// The pinned prefix, lossily as text.
        prefix: String,
        /// The words of the policy it accepts (`TOKENBUCKET 10 1 1000`).
        policy: String,
    },
    /// `OOM command not allowed when used memory > 'maxmemory'.`
    OutOfMemory,
    /// `ERR <why>`: LH.PIN's words do not make a pin.
    BadPin(String),
    /// `ERR the prefix is pinned by the configuration (rate-limit-pins)`.
    PinConfigured,
    /// `ERR source and destination objects are the same` (COPY to itself).
    SameObject,
    /// `ERR offset is out of range` (SETRANGE with a negative offset).
    OffsetOutOfRange,
    /// OBJECT FREQ without an LFU `maxmemory-policy` (Leasehold has none).
    LfuNotSelected,
    /// `ERR Replica can't interact with the keyspace`: a key command from a
    /// connection in MONITOR mode (Redis flags monitors as replicas).
    MonitorKeyspace,
    /// `BUSY Redis is busy running a script. You can only call SCRIPT KILL
    /// or SHUTDOWN NOSAVE.`: the key's shard runs a script past
    /// `busy-reply-threshold`.
    Busy,
    /// `NOSCRIPT No matching script. Please use EVAL.` (EVALSHA).
    NoScript,
    /// `NOTBUSY No scripts in execution right now.` (SCRIPT KILL).
    NotBusy,
    /// `UNKILLABLE Sorry the script already executed write commands ...`
    /// (SCRIPT KILL of a script that has written).
    Unkillable,
    /// `ERR Number of keys can't be negative` (EVAL's numkeys).
    NegativeKeyCount,
    /// `ERR Number of keys can't be greater than number of args`.
    TooManyKeys,
    /// `ERR numkeys should be greater than 0` (SINTERCARD's numkeys, also
    /// when it is not a number, as in Redis).
    NumKeysNotPositive,
    /// `ERR SCRIPT FLUSH only support SYNC|ASYNC option`.
    ScriptFlushOption,
    /// `CROSSSLOT Keys in request don't hash to the same slot ...`: a
    /// script queued in MULTI (or on the test harness, whose threads cannot
    /// wait) has KEYS on several shards; the text names the fix.
    ScriptCrossShard,
    /// `ERR ... inside MULTI ...`: a script that names a command over the
    /// whole keyspace (so it runs holding every shard) was queued in MULTI
    /// on a server of several threads.
    ScriptEveryShardInMulti,
    /// `ERR Unknown Redis command called from script`.
    ScriptUnknownCommand,
    /// `ERR Wrong number of args calling Redis command from script`.
    ScriptArity,
    /// `ERR This Redis command is not allowed from script` (a `noscript` row).
    ScriptNotAllowed,
    /// `ERR Write commands are not allowed from read-only scripts.`
    ScriptWriteInReadOnly,
    /// A script touched a key of another shard than the one it runs on;
    /// the text names the key and the fix.
    ScriptForeignKey(String),
    /// A command that runs on every shard, called from a script on a
    /// server of several shards.
    ScriptAllShards(&'static str),
    /// A connection command a script cannot run (it has no connection).
    ScriptConnCommand(&'static str),
    /// `ERR XX and NX options at the same time are not compatible` (ZADD).
    ZaddNxXx,
    /// `ERR GT, LT, and/or NX options at the same time are not compatible`
    /// (ZADD).
    ZaddGtLtNx,
    /// `ERR INCR option supports a single increment-element pair` (ZADD).
    ZaddIncrPair,
    /// `ERR resulting score is not a number (NaN)` (ZADD INCR, ZINCRBY).
    ScoreNan,
    /// `ERR min or max is not a float` (a score range).
    MinMaxNotFloat,
    /// `ERR min or max not valid string range item` (a lex range).
    MinMaxNotLex,
    /// ZRANGE's LIMIT over ranks.
    LimitNeedsBy,
    /// ZRANGE's WITHSCORES with BYLEX.
    WithscoresLex,
}

impl OpError {
    /// The RESP error reply for this failure.
    pub fn reply(&self) -> Reply {
        match self {
            OpError::Syntax => Reply::err("ERR syntax error"),
            OpError::WrongType => {
                Reply::err("WRONGTYPE Operation against a key holding the wrong kind of value")
            }
            OpError::NotInteger => Reply::err("ERR value is not an integer or out of range"),
            OpError::NotFloat => Reply::err("ERR value is not a valid float"),
            OpError::Overflow => Reply::err("ERR increment or decrement would overflow"),
            OpError::DecrementOverflow => Reply::err("ERR decrement would overflow"),
            OpError::NanOrInfinity => Reply::err("ERR increment would produce NaN or Infinity"),
            OpError::InvalidExpire(cmd) => {
                Reply::err_owned(format!("ERR invalid expire time in '{cmd}' command"))
            }
            OpError::NxAndXxGtLt => Reply::err(
                "ERR NX and XX, GT or LT options at the same time are not compatible",
            ),
            OpError::GtAndLt => {
                Reply::err("ERR GT and LT options at the same time are not compatible")
            }
            OpError::ZaddNxXx => {
                Reply::err("ERR XX and NX options at the same time are not compatible")
            }
            OpError::ZaddGtLtNx => {
                Reply::err("ERR GT, LT, and/or NX options at the same time are not compatible")
            }
            OpError::ZaddIncrPair => {
                Reply::err("ERR INCR option supports a single increment-element pair")
            }
            OpError::ScoreNan => Reply::err("ERR resulting score is not a number (NaN)"),
            OpError::MinMaxNotFloat => Reply::err("ERR min or max is not a float"),
            OpError::MinMaxNotLex => Reply::err("ERR min or max not valid string range item"),
            OpError::LimitNeedsBy => Reply::err(
                "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
            ),
            OpError::WithscoresLex => Reply::err(
                "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
            ),
            OpError::NotPositive => Reply::err("ERR value is out of range, must be positive"),
            OpError::InvalidCursor => Reply::err("ERR invalid cursor"),
            OpError::StringTooLong => {
                Reply::err("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
            }
            OpError::DbIndexOutOfRange => Reply::err("ERR DB index is out of range"),
            OpError::NoAuth => Reply::err("NOAUTH Authentication required."),
            OpError::WrongPass => {
                Reply::err("WRONGPASS invalid username-password pair or user is disabled.")
            }
            OpError::AuthNotConfigured => Reply::err(
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            ),
            OpError::NoProto => Reply::err("NOPROTO unsupported protocol version"),
            OpError::SubcommandArity(name) => wrong_arity(name),
            OpError::UnknownSubcommand { command, sub } => err_echoing_input(format!(
                "ERR unknown subcommand '{}'. Try {command} HELP.",
                truncate(sub, 128)
            )),
            OpError::MustBePositive(what) => {
                Reply::err_owned(format!("ERR {what} must be positive"))
            }
            OpError::MinOutOfRange => Reply::err("ERR MIN must be between 1 and requested"),
            OpError::GcraPeriod => Reply::err("ERR period must be > 0 and < 1e12"),
            OpError::RateLimitOverflow => {
                Reply::err("ERR rate limit parameters exceed the supported time range")
            }
            OpError::BadRateLimitState => Reply::err("ERR invalid rate limit state"),
            OpError::InvalidSlotRange => Reply::err("ERR invalid slot range"),
            OpError::CrossSlot => Reply::err(
                "CROSSSLOT Keys in request don't hash to the same slot (here: the same shard); give them a common {hash tag}, e.g. {user1}:a and {user1}:b",
            ),
            OpError::ClusterCrossSlot => {
                Reply::err("CROSSSLOT Keys in request don't hash to the same slot")
            }
            OpError::Moved { slot, addr } => Reply::err_owned(format!("MOVED {slot} {addr}")),
            OpError::ClusterDown => Reply::err("CLUSTERDOWN Hash slot not served"),
            OpError::Ask { slot, addr } => Reply::err_owned(format!("ASK {slot} {addr}")),
            OpError::TryAgain => {
                Reply::err("TRYAGAIN Multiple keys request during rehashing of slot")
            }
            OpError::SetSlot(why) => err_echoing_input(format!("ERR {why}")),
            OpError::MigrateIo(what) => {
                Reply::err_owned(format!("IOERR error or timeout {what} target instance"))
            }
            OpError::MigrateTarget(e) => {
                err_echoing_input(format!("ERR Target instance replied with error: {}", truncate(e, 256)))
            }
            OpError::BusyKey => Reply::err("BUSYKEY Target key name already exists."),
            OpError::ClusterDisabled => Reply::err("ERR This instance has cluster support disabled"),
            OpError::ClusterSubcommandUnsupported(sub) => err_echoing_input(format!(
                "ERR CLUSTER {} is not supported: slots and nodes come from the topology (docs/cluster.md)",
                truncate(sub, 128)
            )),
            OpError::InvalidSlot => Reply::err("ERR Invalid slot"),
            OpError::InvalidSlotOrCount => Reply::err("ERR Invalid slot or number of keys"),
            OpError::UnknownNode(id) => err_echoing_input(format!("ERR Unknown node {}", truncate(id, 128))),
            OpError::InvalidTopology(why) => {
                err_echoing_input(format!("ERR invalid topology: {why}"))
            }
            OpError::NoSuchKey => Reply::err("ERR no such key"),
            OpError::IndexOutOfRange => Reply::err("ERR index out of range"),
            OpError::HashValueNotInteger => Reply::err("ERR hash value is not an integer"),
            OpError::HashValueNotFloat => Reply::err("ERR hash value is not a float"),
            OpError::ValueNanOrInfinity => Reply::err("ERR value is NaN or Infinity"),
            OpError::RankZero => Reply::err(
                "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list",
            ),
            OpError::CantBeNegative(what) => {
                Reply::err_owned(format!("ERR {what} can't be negative"))
            }
            OpError::OutOfRange => Reply::err("ERR value is out of range"),
            OpError::OutOfRangeBetween(min, max) => Reply::err_owned(format!(
                "ERR value is out of range, value must between {min} and {max}"
            )),
            OpError::ShardUnavailable => Reply::err("ERR shard unavailable (shutting down)"),
            OpError::Arity(name) => wrong_arity(name),
            OpError::InvalidCommandSpecified => Reply::err("ERR Invalid command specified"),
            OpError::InvalidCommandArguments => {
                Reply::err("ERR Invalid number of arguments specified for command")
            }
            OpError::NoKeyArguments => Reply::err("ERR The command has no key arguments"),
            OpError::NoShutdownInProgress => Reply::err("ERR No shutdown in progress."),
            OpError::UnsupportedOption(o) => err_echoing_input(format!("ERR Unsupported option {o}")),
            OpError::ProtocolVersionNotInteger => {
                Reply::err("ERR Protocol version is not an integer or out of range")
            }
            OpError::HelloSyntax(o) => {
                err_echoing_input(format!("ERR Syntax error in HELLO option '{o}'"))
            }
            OpError::BadClientName => Reply::err(
                "ERR Client names cannot contain spaces, newlines or special characters.",
            ),
            OpError::UnrecognizedOption(o) => {
                err_echoing_input(format!("ERR Unrecognized option '{o}'"))
            }
            OpError::UnknownClientType(t) => {
                err_echoing_input(format!("ERR Unknown client type '{t}'"))
            }
            OpError::InvalidClientId => Reply::err("ERR Invalid client ID"),
            OpError::NoSuchClient => Reply::err("ERR No such client"),
            OpError::NoPermCommand(c) => err_echoing_input(format!(
                "NOPERM this user has no permissions to run the '{c}' command"
            )),
            OpError::NoPermKey => Reply::err(
                "NOPERM this user has no permissions to access one of the keys used as arguments",
            ),
            OpError::NoPermChannel => Reply::err(
                "NOPERM this user has no permissions to access one of the channels used as arguments",
            ),
            OpError::Acl(text) => err_echoing_input(format!("ERR {text}")),
            OpError::NoSuchUser(u) => err_echoing_input(format!("ERR No such user '{u}'")),
            OpError::ClientIdNotPositive => Reply::err("ERR client-id should be greater than 0"),
            OpError::ConfigSetUnknown(name) => err_echoing_input(format!(
                "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
            )),
            OpError::ConfigSetFailed { name, why } => err_echoing_input(format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
            )),
            OpError::NoConfigFile => Reply::err("ERR The server is running without a config file"),
            OpError::ConfigRewrite(e) => err_echoing_input(format!("ERR Rewriting config file: {e}")),
            OpError::NestedMulti => Reply::err("ERR MULTI calls can not be nested"),
            OpError::ExecWithoutMulti => Reply::err("ERR EXEC without MULTI"),
            OpError::DiscardWithoutMulti => Reply::err("ERR DISCARD without MULTI"),
            OpError::WatchInsideMulti => Reply::err("ERR WATCH inside MULTI is not allowed"),
            OpError::ExecAbort => {
                Reply::err("EXECABORT Transaction discarded because of previous errors.")
            }
            OpError::ExecAbortBecause(why) => {
                let why = match why.reply() {
                    Reply::Error(text) => text,
                    _ => "ERR".into(),
                };
                let why = why.strip_prefix("ERR ").unwrap_or(&why);
                Reply::err_owned(format!(
                    "EXECABORT Transaction discarded because of: {why}"
                ))
            }
            OpError::NotInMulti => Reply::err("ERR Command not allowed inside a transaction"),
            OpError::ReadOnly => Reply::err("READONLY You can't write against a read only replica."),
            OpError::Loading => Reply::err("LOADING Redis is loading the dataset in memory"),
            OpError::NoMasterLink => {
                Reply::err("NOMASTERLINK Can't SYNC while not connected with my master")
            }
            OpError::NotLeaseholdReplica => Reply::err(
                "ERR Leasehold replication needs a Leasehold replica (REPLCONF capa lh1)",
            ),
            OpError::InvalidMasterPort => Reply::err("ERR Invalid master port"),
            OpError::WaitOnReplica => Reply::err("ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated."),
            OpError::NegativeTimeout => Reply::err("ERR timeout is negative"),
            OpError::UnrecognizedReplconf(o) => {
                Reply::err_owned(format!("ERR Unrecognized REPLCONF option: {o}"))
            }
            OpError::BgsaveInProgress => Reply::err("ERR Background save already in progress"),
            OpError::RewriteInProgress => {
                Reply::err("ERR Background append only file rewriting already in progress")
            }
            OpError::BgsaveWhileRewriting => Reply::err(
                "ERR Another child process is active (AOF?): can't BGSAVE right now. Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.",
            ),
            OpError::Pinned { prefix, policy } => Reply::err_owned(format!(
                "ERR rate limit parameters of keys under '{prefix}' are pinned to {policy}"
            )),
            OpError::OutOfMemory => {
                Reply::err("OOM command not allowed when used memory > 'maxmemory'.")
            }
            OpError::BadPin(why) => Reply::err_owned(format!("ERR {why}")),
            OpError::PinConfigured => {
                Reply::err("ERR the prefix is pinned by the configuration (rate-limit-pins)")
            }
            OpError::SaveFailed(why) => Reply::err_owned(format!("ERR Error saving the snapshot: {why}")),
            OpError::ShutdownSaveFailed => Reply::err("ERR Errors trying to SHUTDOWN. Check logs."),
            OpError::Misconf => Reply::err(
                "MISCONF Leasehold is configured to save snapshots, but it is currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if snapshotting fails (stop-writes-on-bgsave-error option). Please check the Leasehold logs for details about the snapshot error.",
            ),
            OpError::MisconfLog => Reply::err(
                "MISCONF Errors writing to the AOF file: the append-only log is not running (see the Leasehold logs); writes are refused until it is",
            ),
            OpError::NoChainedReplication => {
                Reply::err("ERR a Leasehold replica does not serve replicas of its own")
            }
            OpError::HelloNoAuth => Reply::err(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
            ),
            OpError::SameObject => Reply::err("ERR source and destination objects are the same"),
            OpError::OffsetOutOfRange => Reply::err("ERR offset is out of range"),
            OpError::LfuNotSelected => Reply::err(
                "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
            ),
            OpError::MonitorKeyspace => Reply::err("ERR Replica can't interact with the keyspace"),
            OpError::SubscribedContext(name) => Reply::err_owned(format!(
                "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
            )),
            OpError::Busy => Reply::err(
                "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
            ),
            OpError::NoScript => Reply::err("NOSCRIPT No matching script. Please use EVAL."),
            OpError::NotBusy => Reply::err("NOTBUSY No scripts in execution right now."),
            OpError::Unkillable => Reply::err(
                "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.",
            ),
            OpError::NegativeKeyCount => Reply::err("ERR Number of keys can't be negative"),
            OpError::TooManyKeys => {
                Reply::err("ERR Number of keys can't be greater than number of args")
            }
            OpError::NumKeysNotPositive => Reply::err("ERR numkeys should be greater than 0"),
            OpError::ScriptFlushOption => {
                Reply::err("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
            }
            OpError::ScriptUnknownCommand => {
                Reply::err("ERR Unknown Redis command called from script")
            }
            OpError::ScriptArity => {
                Reply::err("ERR Wrong number of args calling Redis command from script")
            }
            OpError::ScriptNotAllowed => Reply::err("ERR This Redis command is not allowed from script"),
            OpError::ScriptWriteInReadOnly => {
                Reply::err("ERR Write commands are not allowed from read-only scripts.")
            }
            OpError::ScriptForeignKey(key) => err_echoing_input(format!(
                "ERR Script attempted to access key '{}', which lives on another shard than the script's KEYS: declare every key the script touches in KEYS and give them one hash tag, e.g. {{user1}}:a and {{user1}}:b, so they share a shard",
                truncate(key, 128)
            )),
            OpError::ScriptAllShards(name) => Reply::err_owned(format!(
                "ERR '{name}' runs on every shard and is not available from scripts on a server of several threads"
            )),
            OpError::ScriptConnCommand(name) => Reply::err_owned(format!(
                "ERR '{name}' needs a connection and is not available from scripts (TIME and SELECT 0 are)"
            )),
            OpError::ScriptCrossShard => Reply::err(
                "CROSSSLOT Keys in request don't hash to the same slot: inside MULTI a script's KEYS must live on one shard; give them one hash tag, e.g. {user1}:tokens and {user1}:stamp",
            ),
            OpError::ScriptEveryShardInMulti => Reply::err(
                "ERR a script that calls a command over the whole keyspace (KEYS, SCAN, DBSIZE, RANDOMKEY, FLUSHALL, FLUSHDB) holds every shard and cannot run inside MULTI on a server of several threads; run it outside MULTI",
            ),

        }
    }
}

impl From<ArgError> for OpError {
    fn from(e: ArgError) -> Self {
        match e {
            ArgError::NotInteger => OpError::NotInteger,
            ArgError::NotFloat => OpError::NotFloat,
            _ => OpError::Syntax,
        }
    }
}

impl OpError {
    /// Whether the command was refused before it ran (Redis's
    /// `rejected_calls`: a subcommand's arity, an unknown subcommand), as
    /// opposed to failing while it ran (`failed_calls`).
    pub fn is_rejection(&self) -> bool {
        matches!(
            self,
            OpError::SubcommandArity(_)
                | OpError::UnknownSubcommand { .. }
                | OpError::SubscribedContext(_)
                | OpError::MonitorKeyspace
                | OpError::NoPermCommand(_)
                | OpError::NoPermKey
                | OpError::NoPermChannel
        )
    }
}

/// Every error code (the first word of an error reply) the server sends, for
/// INFO errorstats (`errorstat_<CODE>:count=N`); counters are indexed alike.
pub const ERROR_CODES: [&str; 16] = [
    "ERR",
    "WRONGTYPE",
    "NOAUTH",
    "WRONGPASS",
    "NOPROTO",
    "CROSSSLOT",
    "READONLY",
    "LOADING",
    "NOMASTERLINK",
    "MISCONF",
    "EXECABORT",
    "BUSY",
    "NOSCRIPT",
    "NOTBUSY",
    "UNKILLABLE",
    "NOPERM",
];

/// The index in [`ERROR_CODES`] of an error reply's code, `None` for another
/// code (counted apart, by name; see `ShardStats::count_reply`).
pub fn error_code_index(reply: &Reply) -> Option<usize> {
    let Reply::Error(text) = reply else {
        return None;
    };
    let code = text.split(' ').next().unwrap_or("");
    ERROR_CODES.iter().position(|c| *c == code)
}

/// `ERR wrong number of arguments for '<name>' command` (name lower case).
pub fn wrong_arity(name: &str) -> Reply {
    Reply::err_owned(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// `ERR unknown command '<name>', with args beginning with: '<a>' '<b>' `
pub fn unknown_command(args: &[bytes::Bytes]) -> Reply {
    let name = String::from_utf8_lossy(args.first().map(|b| &b[..]).unwrap_or(b""));
    // As Redis's `processCommand`: arguments are quoted while the list is
    // under 128 bytes, each cut to what is left of those 128.
    let mut list = String::new();
    for a in args.iter().skip(1) {
        if list.len() >= 128 {
            break;
        }
        let a = String::from_utf8_lossy(a);
        list.push_str(&format!("'{}' ", truncate(&a, 128 - list.len())));
    }
    let text = format!(
        "ERR unknown command '{}', with args beginning with: {list}",
        truncate(&name, 128)
    );
    err_echoing_input(text)
}

/// `ERR Protocol error: <detail>`, sent before closing the connection.
pub fn protocol_error(detail: &impl std::fmt::Display) -> Reply {
    Reply::err_owned(format!("ERR Protocol error: {detail}"))
}

/// `ERR max number of clients reached`, sent to a connection refused by maxclients.
pub const MAX_CLIENTS: &str = "-ERR max number of clients reached\r\n";

/// Redis 7's `-DENIED` reply to a client from outside the loopback
/// interface while `protected-mode` is on and no password is set; the
/// connection closes after it.
pub const PROTECTED_MODE: &str = "-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Set up an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

/// An error whose text may quote the client's input: a CR or LF there would
/// end the reply early and let the input forge replies, so they become
/// spaces (Redis `addReplyErrorFormat` maps them the same way).
fn err_echoing_input(text: String) -> Reply {
    if text.contains(['\r', '\n']) {
        Reply::err_owned(text.replace(['\r', '\n'], " "))
    } else {
        Reply::err_owned(text)
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
