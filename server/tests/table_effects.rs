//! The command table enforces its own flags against what commands do: every
//! row has a sample in [`SAMPLES`], run in process on a fresh 2-shard server.
//! A `WRITE` row's sample calls each succeed and append to the effect stream
//! (the replication offset, bytes summed over shards, grows); a `READONLY`
//! row's and an unflagged row's sample calls each succeed and append
//! nothing, on keys that exist (of every type, with deadlines) and keys that
//! do not, with the clock never moved past a deadline. So a new row without
//! a sample fails, a read that writes fails, and a row that changes the
//! keyspace without the `WRITE` flag fails.

use leasehold_protocol::Reply;
use leasehold_server::commands::{flags, table, CommandSpec};
use leasehold_server::harness::Harness;

/// Keys a read sample's `{}` stands for, one call each: the five that
/// [`READ_SETUP`] writes (on both shards) and one that does not exist.
const READ_KEYS: &[&str] = &["s", "n", "tb", "sw", "g", "l", "h", "missing"];

/// What every read sample runs first: a string with a TTL, a counter, one
/// state of each rate-limit kind, all with deadlines past 1 s, a list and
/// a hash.
const READ_SETUP: &[&str] = &[
    "SET s v EX 100",
    "INCR n",
    "TOKENLEASE tb 10 1 1000 5",
    "SLIDINGWINDOW sw 10 1000",
    "CL.THROTTLE g 5 1 10",
    "RPUSH l a b a",
    "HSET h a 1 b 2",
];

/// What the set read samples run first: a string, and sets of strings
/// and of integers (with a deadline) on one shard.
const SET_SETUP: &[&str] = &[
    "SET s v EX 100",
    "SADD {t}a a b 1",
    "SADD {t}i 1 2 3 10",
    "EXPIRE {t}i 100",
];

/// One row's sample: its name, the calls that prepare the keyspace, and
/// the calls checked (for read rows, a `{}` runs once per [`READ_KEYS`]).
type Sample = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
);

/// Every row's sample.
const SAMPLES: &[Sample] = &[
    // Connection commands: no keyspace change.
    ("ping", &[], &["PING", "PING x"]),
    ("echo", &[], &["ECHO x"]),
    ("hello", &[], &["HELLO", "HELLO 3", "HELLO 2 SETNAME n"]),
    ("auth", &[], &["AUTH default x"]),
    ("select", &[], &["SELECT 0"]),
    ("quit", &[], &["QUIT"]),
    ("reset", &[], &["RESET"]),
    (
        "acl",
        &[],
        &[
            "ACL SETUSER u on nopass +get ~k",
            "ACL GETUSER u",
            "ACL LIST",
            "ACL DELUSER u",
            "ACL WHOAMI",
        ],
    ),
    (
        "client",
        &[],
        &[
            "CLIENT ID",
            "CLIENT SETNAME n",
            "CLIENT LIST",
            "CLIENT KILL ID 999",
        ],
    ),
    // Pub/sub: connection state and messages, no keyspace change.
    ("subscribe", &[], &["SUBSCRIBE a", "SUBSCRIBE a b"]),
    (
        "unsubscribe",
        &["SUBSCRIBE a"],
        &["UNSUBSCRIBE a", "UNSUBSCRIBE"],
    ),
    ("psubscribe", &[], &["PSUBSCRIBE a*"]),
    (
        "punsubscribe",
        &["PSUBSCRIBE a*"],
        &["PUNSUBSCRIBE", "PUNSUBSCRIBE b*"],
    ),
    ("publish", &[], &["PUBLISH a m"]),
    (
        "pubsub",
        &[],
        &["PUBSUB CHANNELS", "PUBSUB NUMSUB a", "PUBSUB NUMPAT"],
    ),
    // Server commands.
    ("info", READ_SETUP, &["INFO", "INFO all"]),
    (
        "config",
        &[],
        &["CONFIG GET *", "CONFIG SET hz 20", "CONFIG RESETSTAT"],
    ),
    (
        "command",
        &[],
        &["COMMAND COUNT", "COMMAND DOCS get", "COMMAND"],
    ),
    ("time", &[], &["TIME"]),
    ("monitor", &[], &["MONITOR"]),
    ("shutdown", &[], &["SHUTDOWN NOSAVE"]),
    // Keys.
    ("del", &["SET a 1", "SET b 1"], &["DEL a", "DEL b missing"]),
    ("unlink", &["SET a 1"], &["UNLINK a"]),
    (
        "exists",
        READ_SETUP,
        &["EXISTS {}", "EXISTS s n tb sw g missing"],
    ),
    ("type", READ_SETUP, &["TYPE {}"]),
    (
        "touch",
        READ_SETUP,
        &["TOUCH {}", "TOUCH s n tb sw g missing"],
    ),
    ("randomkey", READ_SETUP, &["RANDOMKEY", "RANDOMKEY"]),
    (
        "object",
        READ_SETUP,
        &[
            "OBJECT ENCODING {}",
            "OBJECT REFCOUNT {}",
            "OBJECT IDLETIME {}",
            "OBJECT HELP",
        ],
    ),
    (
        "memory",
        READ_SETUP,
        &["MEMORY USAGE {}", "MEMORY USAGE s SAMPLES 0", "MEMORY HELP"],
    ),
    // Both keys on one shard ({x}), and on two (a, b on a 2-shard server).
    (
        "rename",
        &["SET a 1 EX 10", "SET {x}a 1", "TOKENLEASE c 10 1 1000 1"],
        &["RENAME a b", "RENAME {x}a {x}b", "RENAME b a", "RENAME c d"],
    ),
    (
        "renamenx",
        &["SET a 1", "SET {x}a 1"],
        &["RENAMENX a b", "RENAMENX {x}a {x}b"],
    ),
    (
        "copy",
        &["SET a 1", "SET {x}a 1", "SLIDINGWINDOW sw 5 1000"],
        &[
            "COPY a b",
            "COPY {x}a {x}b",
            "COPY a b REPLACE",
            "COPY sw sw2",
        ],
    ),
    ("expire", &["SET a 1"], &["EXPIRE a 10", "EXPIRE a 20 GT"]),
    ("pexpire", &["SET a 1"], &["PEXPIRE a 10000"]),
    ("expireat", &["SET a 1"], &["EXPIREAT a 1800000000"]),
    ("pexpireat", &["SET a 1"], &["PEXPIREAT a 1800000000000"]),
    ("ttl", READ_SETUP, &["TTL {}"]),
    ("pttl", READ_SETUP, &["PTTL {}"]),
    ("expiretime", READ_SETUP, &["EXPIRETIME {}"]),
    ("pexpiretime", READ_SETUP, &["PEXPIRETIME {}"]),
    ("persist", &["SET a 1 EX 10"], &["PERSIST a"]),
    ("keys", READ_SETUP, &["KEYS *", "KEYS {}"]),
    (
        "scan",
        READ_SETUP,
        &[
            "SCAN 0 COUNT 1000",
            "SCAN 8192 COUNT 1000",
            "SCAN 0 MATCH {}",
        ],
    ),
    ("dbsize", READ_SETUP, &["DBSIZE"]),
    ("flushall", &["SET a 1"], &["FLUSHALL", "FLUSHALL"]),
    ("flushdb", &["SET a 1"], &["FLUSHDB"]),
    ("lh.flushslots", &[], &["LH.FLUSHSLOTS 0 16383"]),
    // Strings.
    ("get", READ_SETUP, &["GET s", "GET n", "GET missing"]),
    ("set", &[], &["SET a 1", "SET a 2 EX 10", "SET a 3 GET"]),
    ("setnx", &[], &["SETNX a 1"]),
    ("setex", &[], &["SETEX a 10 v"]),
    ("psetex", &[], &["PSETEX a 10000 v"]),
    ("getset", &[], &["GETSET a 1", "GETSET a 2"]),
    ("getdel", &["SET a 1"], &["GETDEL a"]),
    ("getex", &["SET a 1"], &["GETEX a EX 10", "GETEX a PERSIST"]),
    ("mget", READ_SETUP, &["MGET s n tb sw g missing", "MGET {}"]),
    ("mset", &[], &["MSET a 1 b 2 c 3"]),
    ("incr", &[], &["INCR a"]),
    ("decr", &[], &["DECR a"]),
    ("incrby", &[], &["INCRBY a 5"]),
    ("decrby", &[], &["DECRBY a 5"]),
    ("incrbyfloat", &[], &["INCRBYFLOAT a 1.5"]),
    ("append", &[], &["APPEND a x", "APPEND a y"]),
    (
        "strlen",
        READ_SETUP,
        &["STRLEN s", "STRLEN n", "STRLEN missing"],
    ),
    // Rate limits.
    ("tokenlease", &[], &["TOKENLEASE a 10 1 1000 1"]),
    (
        "tokenreturn",
        &["TOKENLEASE a 10 1 1000 5"],
        &["TOKENRETURN a 10 1 1000 1", "TOKENRETURN a 10 1 1000 4"],
    ),
    ("slidingwindow", &[], &["SLIDINGWINDOW a 10 1000 COUNT 2"]),
    ("cl.throttle", &[], &["CL.THROTTLE a 5 1 10"]),
    ("gcra", &[], &["GCRA a 5 1 10"]),
    (
        "rlstate",
        READ_SETUP,
        &["RLSTATE tb", "RLSTATE sw", "RLSTATE g", "RLSTATE missing"],
    ),
    (
        "lh.restore",
        &[],
        &["LH.RESTORE a GCRA 1700000002500 0 1 1700000004500 PXAT 1700000004500"],
    ),
    // Hot keys: a split stores the home part, a merge the whole bucket.
    (
        "lh.split",
        &["TOKENLEASE a 10 1 1000 5"],
        &["LH.SPLIT a 10 1 1000"],
    ),
    (
        "lh.merge",
        &["TOKENLEASE a 10 1 1000 5", "LH.SPLIT a 10 1 1000"],
        &["LH.MERGE a"],
    ),
    ("lh.hotkeys", &[], &["LH.HOTKEYS"]),
    // Pinned limits (each sample call changes a pin).
    (
        "lh.pin",
        &[],
        &[
            "LH.PIN rl: TOKENBUCKET 10 1 1000",
            "LH.PIN rl: TOKENBUCKET 9 1 1000",
        ],
    ),
    (
        "lh.unpin",
        &["LH.PIN rl: TOKENBUCKET 10 1 1000"],
        &["LH.UNPIN rl:"],
    ),
    (
        "lh.unpinall",
        &["LH.PIN rl: TOKENBUCKET 10 1 1000"],
        &["LH.UNPINALL"],
    ),
    (
        "lh.pins",
        &["LH.PIN rl: TOKENBUCKET 10 1 1000"],
        &["LH.PINS"],
    ),
    // Transactions: the commands themselves write nothing (a queued read).
    ("multi", &[], &["MULTI"]),
    ("exec", &["MULTI", "GET a"], &["EXEC"]),
    ("discard", &["MULTI", "SET a 1"], &["DISCARD"]),
    ("watch", &["SET a 1"], &["WATCH a", "WATCH a missing"]),
    ("unwatch", &["WATCH a"], &["UNWATCH"]),
    // Replication: role changes and the handshake write nothing.
    ("replicaof", READ_SETUP, &["REPLICAOF NO ONE"]),
    ("slaveof", READ_SETUP, &["SLAVEOF NO ONE"]),
    (
        "replconf",
        &[],
        &["REPLCONF listening-port 6380", "REPLCONF capa eof capa lh1"],
    ),
    ("psync", &["REPLCONF capa lh1"], &["PSYNC ? -1"]),
    ("role", READ_SETUP, &["ROLE"]),
    ("wait", READ_SETUP, &["WAIT 0 0"]),
    ("msetnx", &[], &["MSETNX a 1 b 2", "MSETNX {x}a 1 {x}b 2"]),
    (
        "setrange",
        &["SET a hello"],
        &["SETRANGE a 1 E", "SETRANGE new 2 x"],
    ),
    (
        "getrange",
        READ_SETUP,
        &["GETRANGE s 0 -1", "GETRANGE n 0 0", "GETRANGE missing 0 1"],
    ),
    (
        "substr",
        READ_SETUP,
        &["SUBSTR s 0 -1", "SUBSTR missing 0 1"],
    ),
    // Persistence: a request to the persistence thread (none runs in the
    // harness), no change. SAVE would wait for that thread: its files are
    // tested with real processes (`persistence.rs`).
    ("save", &[], &[]),
    ("bgsave", READ_SETUP, &["BGSAVE"]),
    ("bgrewriteaof", READ_SETUP, &["BGREWRITEAOF"]),
    ("lastsave", READ_SETUP, &["LASTSAVE"]),
    // Scripting: a MAY_REPLICATE row writes only through the commands its
    // script runs (the first call reads, the second writes); the read-only
    // forms only read.
    (
        "eval",
        READ_SETUP,
        &[
            "EVAL return(redis.call('get',KEYS[1])) 1 s",
            "EVAL return(redis.call('incr',KEYS[1])) 1 n",
        ],
    ),
    (
        "evalsha",
        &[
            "SCRIPT LOAD return(redis.call('incr',KEYS[1]))",
            "SCRIPT LOAD return(redis.call('exists',KEYS[1]))",
        ],
        &[
            "EVALSHA b45d86215205dc01d0573f9211ea71804dd160ac 1 s",
            "EVALSHA a79a73d4efb6d4d8861290b54f6770d6422c2144 1 n",
        ],
    ),
    (
        "eval_ro",
        READ_SETUP,
        &["EVAL_RO return(redis.call('pttl',KEYS[1])) 1 {}"],
    ),
    (
        "evalsha_ro",
        &[
            "SET s v EX 100",
            "SCRIPT LOAD return(redis.call('exists',KEYS[1]))",
        ],
        &["EVALSHA_RO b45d86215205dc01d0573f9211ea71804dd160ac 1 s"],
    ),
    (
        "script",
        &["SCRIPT LOAD return(1)"],
        &[
            "SCRIPT LOAD return(2)",
            "SCRIPT EXISTS 930269f31393d0be681588b6ab08dccee7d6bb67",
            "SCRIPT FLUSH",
        ],
    ),
    // Lists: every write sample changes its list; reads on a list and on
    // a missing key.
    ("lpush", &[], &["LPUSH a x", "LPUSH a y z"]),
    ("rpush", &[], &["RPUSH a x", "RPUSH a y z"]),
    ("lpushx", &["RPUSH a x"], &["LPUSHX a y"]),
    ("rpushx", &["RPUSH a x"], &["RPUSHX a y z"]),
    ("lpop", &["RPUSH a x y z"], &["LPOP a", "LPOP a 5"]),
    ("rpop", &["RPUSH a x y z"], &["RPOP a 2", "RPOP a"]),
    (
        "lrange",
        READ_SETUP,
        &["LRANGE l 0 -1", "LRANGE missing 0 -1"],
    ),
    (
        "ltrim",
        &["RPUSH a x y z"],
        &["LTRIM a 1 -1", "LTRIM a 1 0"],
    ),
    ("lindex", READ_SETUP, &["LINDEX l 1", "LINDEX missing 0"]),
    ("llen", READ_SETUP, &["LLEN l", "LLEN missing"]),
    ("lrem", &["RPUSH a x y x"], &["LREM a 0 x"]),
    ("lset", &["RPUSH a x"], &["LSET a 0 y", "LSET a -1 z"]),
    (
        "linsert",
        &["RPUSH a x"],
        &["LINSERT a BEFORE x w", "LINSERT a AFTER x y"],
    ),
    (
        "lpos",
        READ_SETUP,
        &["LPOS l a", "LPOS l a RANK -1 COUNT 0", "LPOS missing a"],
    ),
    (
        "lmove",
        &["RPUSH {t}a x y"],
        &["LMOVE {t}a {t}b LEFT RIGHT", "LMOVE {t}a {t}a RIGHT LEFT"],
    ),
    (
        "rpoplpush",
        &["RPUSH {t}a x y"],
        &["RPOPLPUSH {t}a {t}b", "RPOPLPUSH {t}b {t}b"],
    ), // Hashes.
    ("hset", &[], &["HSET a f v", "HSET a f v g w"]),
    ("hget", READ_SETUP, &["HGET h a", "HGET missing a"]),
    ("hmget", READ_SETUP, &["HMGET h a x", "HMGET missing a"]),
    ("hmset", &[], &["HMSET a f v"]),
    ("hsetnx", &[], &["HSETNX a f v", "HSETNX a g w"]),
    ("hincrby", &[], &["HINCRBY a f 2", "HINCRBY a f -1"]),
    ("hincrbyfloat", &[], &["HINCRBYFLOAT a f 1.5"]),
    ("hdel", &["HSET a f v g w"], &["HDEL a f", "HDEL a g x"]),
    ("hexists", READ_SETUP, &["HEXISTS h a", "HEXISTS missing a"]),
    ("hlen", READ_SETUP, &["HLEN h", "HLEN missing"]),
    ("hkeys", READ_SETUP, &["HKEYS h", "HKEYS missing"]),
    ("hvals", READ_SETUP, &["HVALS h", "HVALS missing"]),
    ("hgetall", READ_SETUP, &["HGETALL h", "HGETALL missing"]),
    ("hstrlen", READ_SETUP, &["HSTRLEN h a", "HSTRLEN missing a"]),
    (
        "hrandfield",
        READ_SETUP,
        &[
            "HRANDFIELD h",
            "HRANDFIELD h -5 WITHVALUES",
            "HRANDFIELD missing 2",
        ],
    ),
    (
        "hscan",
        READ_SETUP,
        &["HSCAN h 0", "HSCAN h 0 MATCH a* COUNT 5", "HSCAN missing 0"],
    ),
    // Sets (reads on SET_SETUP's keys).
    ("sadd", &[], &["SADD a x", "SADD a x y 1"]),
    ("srem", &["SADD a x y z"], &["SREM a x", "SREM a y z w"]),
    (
        "sismember",
        SET_SETUP,
        &[
            "SISMEMBER {t}a a",
            "SISMEMBER {t}i 2",
            "SISMEMBER missing a",
        ],
    ),
    (
        "smismember",
        SET_SETUP,
        &["SMISMEMBER {t}a a z", "SMISMEMBER missing a"],
    ),
    (
        "smembers",
        SET_SETUP,
        &["SMEMBERS {t}a", "SMEMBERS {t}i", "SMEMBERS missing"],
    ),
    ("scard", SET_SETUP, &["SCARD {t}a", "SCARD missing"]),
    (
        "spop",
        &["SADD a x y z w v", "SADD b 1"],
        &["SPOP a", "SPOP a 2", "SPOP a 5", "SPOP b"],
    ),
    (
        "srandmember",
        SET_SETUP,
        &[
            "SRANDMEMBER {t}a",
            "SRANDMEMBER {t}a 2",
            "SRANDMEMBER {t}i -5",
            "SRANDMEMBER missing 2",
        ],
    ),
    (
        "sscan",
        SET_SETUP,
        &[
            "SSCAN {t}a 0",
            "SSCAN {t}i 0 MATCH 1* COUNT 5",
            "SSCAN missing 0",
        ],
    ),
    (
        "smove",
        &["SADD {t}a x y", "SADD {t}b y"],
        &["SMOVE {t}a {t}b x", "SMOVE {t}a {t}b y"],
    ),
    (
        "sinter",
        SET_SETUP,
        &["SINTER {t}a {t}i", "SINTER {t}a {t}missing"],
    ),
    (
        "sunion",
        SET_SETUP,
        &["SUNION {t}a {t}i", "SUNION {t}missing"],
    ),
    (
        "sdiff",
        SET_SETUP,
        &["SDIFF {t}a {t}i", "SDIFF {t}missing {t}a"],
    ),
    (
        "sintercard",
        SET_SETUP,
        &["SINTERCARD 2 {t}a {t}i LIMIT 1", "SINTERCARD 1 {t}missing"],
    ),
    (
        "sinterstore",
        &["SADD {t}a x y", "SADD {t}b y", "SET {t}d v"],
        &[
            "SINTERSTORE {t}d {t}a {t}b",
            "SINTERSTORE {t}d {t}a {t}missing",
        ],
    ),
    (
        "sunionstore",
        &["SADD {t}a x y", "SADD {t}b y z"],
        &["SUNIONSTORE {t}d {t}a {t}b", "SUNIONSTORE {t}a {t}b"],
    ),
    (
        "sdiffstore",
        &["SADD {t}a x y", "SADD {t}b y", "SET {t}d v EX 100"],
        &["SDIFFSTORE {t}d {t}a {t}b", "SDIFFSTORE {t}d {t}b {t}b"],
    ),
    // Sorted sets.
    (
        "zadd",
        &[],
        &["ZADD a 1 x", "ZADD a CH 2 x 3 y", "ZADD a INCR 1 x"],
    ),
    ("zincrby", &[], &["ZINCRBY a 1 x", "ZINCRBY a 2.5 x"]),
    ("zrem", &["ZADD a 1 x 2 y"], &["ZREM a x", "ZREM a y z"]),
    ("zscore", ZREAD, &["ZSCORE z a", "ZSCORE missing a"]),
    ("zmscore", ZREAD, &["ZMSCORE z a x", "ZMSCORE missing a"]),
    ("zcard", ZREAD, &["ZCARD z", "ZCARD missing"]),
    (
        "zcount",
        ZREAD,
        &["ZCOUNT z -inf +inf", "ZCOUNT missing 0 1"],
    ),
    (
        "zlexcount",
        ZREAD,
        &["ZLEXCOUNT z - +", "ZLEXCOUNT missing - +"],
    ),
    (
        "zrange",
        ZREAD,
        &[
            "ZRANGE z 0 -1 WITHSCORES",
            "ZRANGE z (1 +inf BYSCORE REV LIMIT 0 1",
            "ZRANGE missing 0 -1",
        ],
    ),
    (
        "zrangebyscore",
        ZREAD,
        &[
            "ZRANGEBYSCORE z 1 2 WITHSCORES",
            "ZRANGEBYSCORE missing 0 1",
        ],
    ),
    (
        "zrevrangebyscore",
        ZREAD,
        &["ZREVRANGEBYSCORE z 2 1", "ZREVRANGEBYSCORE missing 1 0"],
    ),
    (
        "zrangebylex",
        ZREAD,
        &["ZRANGEBYLEX z - +", "ZRANGEBYLEX missing - +"],
    ),
    (
        "zrevrangebylex",
        ZREAD,
        &["ZREVRANGEBYLEX z + -", "ZREVRANGEBYLEX missing + -"],
    ),
    (
        "zrevrange",
        ZREAD,
        &["ZREVRANGE z 0 -1", "ZREVRANGE missing 0 -1"],
    ),
    ("zrank", ZREAD, &["ZRANK z a", "ZRANK missing a"]),
    ("zrevrank", ZREAD, &["ZREVRANK z a", "ZREVRANK missing a"]),
    (
        "zremrangebyscore",
        &["ZADD a 1 x 2 y 3 w"],
        &["ZREMRANGEBYSCORE a 1 1", "ZREMRANGEBYSCORE a (1 +inf"],
    ),
    (
        "zremrangebyrank",
        &["ZADD a 1 x 2 y 3 w"],
        &["ZREMRANGEBYRANK a 0 0", "ZREMRANGEBYRANK a 0 -1"],
    ),
    (
        "zremrangebylex",
        &["ZADD a 0 x 0 y 0 w"],
        &["ZREMRANGEBYLEX a [w [w", "ZREMRANGEBYLEX a - +"],
    ),
    (
        "zpopmin",
        &["ZADD a 1 x 2 y 3 w"],
        &["ZPOPMIN a", "ZPOPMIN a 5"],
    ),
    (
        "zpopmax",
        &["ZADD a 1 x 2 y 3 w"],
        &["ZPOPMAX a", "ZPOPMAX a 5"],
    ),
    (
        "zrandmember",
        ZREAD,
        &[
            "ZRANDMEMBER z",
            "ZRANDMEMBER z -5 WITHSCORES",
            "ZRANDMEMBER missing 2",
        ],
    ),
    ("zscan", ZREAD, &["ZSCAN z 0", "ZSCAN missing 0"]),
    // These run on a server in cluster mode (see `run_sample`).
    (
        "cluster",
        &[],
        &[
            "CLUSTER INFO",
            "CLUSTER KEYSLOT a",
            "CLUSTER COUNTKEYSINSLOT 0",
        ],
    ),
    ("readonly", &[], &["READONLY"]),
    ("readwrite", &[], &["READWRITE"]),
    ("asking", &[], &["ASKING"]),
    // MIGRATE needs a target node that imports the slot: its effect (the
    // keys' deletion, once the target took them) is tested with real
    // processes (`cluster_reshard.rs`, the source's replication offset).
    ("migrate", &[], &[]),
    ("lh.topology", &[], &["LH.TOPOLOGY GET"]),
];

/// What the sorted-set read samples run first: a sorted set `z`.
const ZREAD: &[&str] = &["ZADD z 1 a 2 b 3 c"];

fn sample(name: &str) -> Option<&'static Sample> {
    SAMPLES.iter().find(|s| s.0 == name)
}

/// The calls of a sample, `{}` expanded once per [`READ_KEYS`].
fn expand(calls: &[&str]) -> Vec<String> {
    calls
        .iter()
        .flat_map(|c| match c.contains("{}") {
            true => READ_KEYS.iter().map(|k| c.replace("{}", k)).collect(),
            false => vec![c.to_string()],
        })
        .collect()
}

/// Runs `spec`'s sample on a fresh server: each call's reply (none for
/// SHUTDOWN) and whether the effect offset grew.
fn run_sample(spec: &CommandSpec) -> Vec<(String, Vec<Reply>, bool)> {
    let (_, setup, calls) = sample(spec.name).expect("a sample");
    let cluster = leasehold_server::commands::cluster::COMMANDS;
    let mut h = match cluster.iter().any(|c| c.name == spec.name) {
        true => {
            let mut c = leasehold_server::config::Config::default();
            c.cluster.enabled = true;
            Harness::with_config(c, 2)
        }
        false => Harness::new(),
    };
    for s in *setup {
        assert!(!h.cmd(s).is_error(), "{}: setup {s}", spec.name);
    }
    let mut out = Vec::new();
    for call in expand(calls) {
        let first = call.split(' ').next().unwrap_or_default();
        assert!(
            first.eq_ignore_ascii_case(spec.name),
            "{call} is not a call of {}",
            spec.name
        );
        let before = h.effects_offset();
        let replies = h.pipeline(&[call.as_str()]);
        out.push((call, replies, h.effects_offset() > before));
    }
    out
}

#[test]
fn every_row_has_a_sample_and_every_sample_a_row() {
    let t = table();
    let missing: Vec<&str> = t
        .commands
        .iter()
        .map(|c| c.name)
        .filter(|n| sample(n).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "rows without a sample in SAMPLES: {missing:?}"
    );
    let stale: Vec<&str> = SAMPLES
        .iter()
        .map(|s| s.0)
        .filter(|n| !t.commands.iter().any(|c| c.name == *n))
        .collect();
    assert!(stale.is_empty(), "samples for no row: {stale:?}");
}

#[test]
fn no_row_is_both_write_and_readonly() {
    for c in &table().commands {
        assert!(
            !(c.has(flags::WRITE) && c.has(flags::READONLY)),
            "{} is flagged both WRITE and READONLY",
            c.name
        );
    }
}

#[test]
fn every_write_row_appends_an_effect() {
    let mut wrong = Vec::new();
    for spec in table().commands.iter().filter(|c| c.has(flags::WRITE)) {
        for (call, replies, grew) in run_sample(spec) {
            if replies.len() != 1 || replies[0].is_error() {
                wrong.push(format!("{call}: a write sample must succeed: {replies:?}"));
            } else if !grew {
                wrong.push(format!("{call}: a WRITE row appended no effect"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn a_may_replicate_row_writes_only_through_its_commands() {
    let mut wrong = Vec::new();
    let rows = table()
        .commands
        .iter()
        .filter(|c| c.has(flags::MAY_REPLICATE));
    for spec in rows {
        let runs = run_sample(spec);
        let grew: Vec<bool> = runs.iter().map(|r| r.2).collect();
        for (call, replies, _) in &runs {
            if replies.iter().any(Reply::is_error) {
                wrong.push(format!("{call}: a sample must succeed: {replies:?}"));
            }
        }
        if grew != [false, true] {
            wrong.push(format!("{}: a read then a write, got {grew:?}", spec.name));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn no_other_row_appends_an_effect() {
    let mut wrong = Vec::new();
    let others = |c: &&CommandSpec| !c.has(flags::WRITE) && !c.has(flags::MAY_REPLICATE);
    for spec in table().commands.iter().filter(others) {
        let kind = match spec.has(flags::READONLY) {
            true => "a READONLY",
            false => "an unflagged",
        };
        for (call, replies, grew) in run_sample(spec) {
            if replies.iter().any(Reply::is_error) {
                wrong.push(format!("{call}: a sample must succeed: {replies:?}"));
            } else if grew {
                wrong.push(format!(
                    "{call}: {kind} row appended an effect (a row that changes the keyspace is WRITE)"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
