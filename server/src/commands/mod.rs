//! The command table: one row per command, declared by its family file.
//!
//! A row gives the name, the arity in Redis's sign convention (`n` exactly n
//! arguments including the name, `-n` at least n), flags, key positions
//! (first, last, step; last negative counts from the end) and how the command
//! runs ([`Exec`]). The dispatcher alone checks arity, authentication and
//! routing; handlers never count arguments.
//!
//! Families, each a file with its rows (`COMMANDS`) and handlers, in table
//! order:
//! - [`connection`]: PING, ECHO, HELLO, AUTH, SELECT, QUIT, RESET, CLIENT;
//! - [`acl`]: ACL and its subcommands, AUTH's login, the ACL categories and
//!   the dispatcher's check of a restricted user (the rules are
//!   [`crate::acl`]'s);
//! - [`server`]: INFO, CONFIG, COMMAND, TIME, SHUTDOWN;
//! - [`keys`]: DEL, UNLINK, EXISTS, TYPE, TOUCH, RANDOMKEY, EXPIRE, PEXPIRE, EXPIREAT,
//!   PEXPIREAT, TTL, PTTL, EXPIRETIME, PEXPIRETIME, PERSIST, KEYS, SCAN,
//!   DBSIZE, FLUSHALL, FLUSHDB, LH.FLUSHSLOTS;
//! - [`moves`]: RENAME, RENAMENX, COPY (across shards too, see [`span`]);
//! - [`introspect`]: OBJECT, MEMORY;
//! - [`strings`]: GET, SET, SETNX, SETEX, PSETEX, GETSET, GETDEL, GETEX,
//!   MGET, MSET, MSETNX, INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT, APPEND,
//!   STRLEN, SETRANGE, GETRANGE, SUBSTR;
//! - [`ratelimit`]: TOKENLEASE, TOKENRETURN, SLIDINGWINDOW, CL.THROTTLE,
//!   GCRA, RLSTATE, LH.RESTORE (the algorithms are in [`crate::ratelimit`]);
//! - [`replication`]: REPLICAOF, SLAVEOF, REPLCONF, PSYNC, ROLE;
//! - [`pubsub`]: SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH,
//!   PUBSUB (the registry is [`crate::pubsub`]);
//! - [`transaction`]: MULTI, EXEC, DISCARD, WATCH, UNWATCH;
//! - [`persistence`]: SAVE, BGSAVE, BGREWRITEAOF, LASTSAVE (the files are
//!   [`crate::persist`]'s);
//! - [`pins`]: LH.PIN, LH.UNPIN, LH.UNPINALL, LH.PINS (pinned rate-limit
//!   parameters; the check is in [`crate::ratelimit::pin`]).
//! - [`scripting`]: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT (the Lua
//!   side is [`crate::script`]).
//! - [`lists`]: LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP, LRANGE, LTRIM,
//!   LINDEX, LLEN, LREM, LSET, LINSERT, LPOS, LMOVE, RPOPLPUSH (the
//!   structure is [`crate::collections::list`]);
//! - [`hashes`]: HSET, HGET, HMGET, HMSET, HSETNX, HINCRBY, HINCRBYFLOAT,
//!   HDEL, HEXISTS, HLEN, HKEYS, HVALS, HGETALL, HSTRLEN, HRANDFIELD, HSCAN
//!   (the structure is [`crate::collections::hash`]);
//! - [`sets`]: SADD, SREM, SISMEMBER, SMISMEMBER, SMEMBERS, SCARD, SPOP,
//!   SRANDMEMBER, SSCAN, SMOVE, SINTER, SUNION, SDIFF, SINTERCARD,
//!   SINTERSTORE, SUNIONSTORE, SDIFFSTORE (the structure is
//!   [`crate::collections::set`]);
//! - [`zsets`]: ZADD, ZINCRBY, ZREM, ZSCORE, ZMSCORE, ZCARD, ZCOUNT,
//!   ZLEXCOUNT, ZRANGE and its BYSCORE/BYLEX/REV forms, ZRANK, ZREVRANK,
//!   ZREMRANGEBY*, ZPOPMIN, ZPOPMAX, ZRANDMEMBER, ZSCAN (the structure is
//!   [`crate::collections::zset`]).
//!
//! - [`cluster`]: CLUSTER, READONLY, READWRITE, ASKING, LH.TOPOLOGY (the
//!   topology is [`crate::cluster`]; the redirections are the dispatcher's).
//!
//! Four files hold no rows: [`config`] runs CONFIG's subcommands (the
//! `server` family's CONFIG row calls it), [`docs`] builds COMMAND DOCS'
//! argument trees from `docs/commands.md`, [`span`] holds what commands
//! over several shards are driven with (steps, the parcel's handlers), and
//! [`collection`] holds what the collection families share (lookups,
//! creation, effects).

use std::sync::OnceLock;

use leasehold_protocol::{Args, Reply};

use crate::error::OpError;
use crate::session::ConnCtx;
pub use crate::shard::ShardFn;

pub mod acl;
pub mod cluster;
pub mod collection;
pub mod config;
pub mod connection;
pub mod docs;
pub mod hashes;
pub mod info;
pub mod introspect;
pub mod keys;
pub mod lists;
pub mod longdouble;
pub mod migrate;
pub mod moves;
pub mod persistence;
pub mod pins;
pub mod pubsub;
pub mod ratelimit;
pub mod replication;
pub mod scripting;
pub mod server;
pub mod sets;
pub mod span;
pub mod split;
pub mod strings;
pub mod transaction;
pub mod zsets;

/// Command flags, as `COMMAND INFO` names them. Every flag is reported by
/// COMMAND INFO (cluster clients and proxies route by `write` / `readonly`);
/// each doc says what else reads it.
pub mod flags {
    /// Changes the keyspace: every successful call emits at least one effect
    /// (`server/tests/table_effects.rs` checks every row). A replica's
    /// dispatcher refuses these (`-READONLY`).
    pub const WRITE: u32 = 1;
    /// Only reads: never emits an effect (checked by the same test).
    pub const READONLY: u32 = 1 << 1;
    /// O(1) or O(log n).
    pub const FAST: u32 = 1 << 2;
    /// Administrative (CONFIG, SHUTDOWN, LH.FLUSHSLOTS).
    pub const ADMIN: u32 = 1 << 3;
    /// Allowed before AUTH: the dispatcher's state check reads it.
    pub const NO_AUTH: u32 = 1 << 4;
    /// May allocate memory (Redis `denyoom`): what a memory limit, when
    /// there is one, refuses.
    pub const DENYOOM: u32 = 1 << 5;
    /// Allowed while a replica loads a full sync (others get `-LOADING`).
    pub const LOADING: u32 = 1 << 6;
    /// Allowed on a replica whose link to its primary is down, once
    /// `replica-serve-stale-data no` exists.
    pub const STALE: u32 = 1 << 7;
    /// Refused inside MULTI (`ERR Command not allowed inside a
    /// transaction`, which aborts the transaction): PSYNC, whose connection
    /// leaves the event loop.
    pub const NO_MULTI: u32 = 1 << 8;
    /// Refused from scripts (Redis `noscript`: `ERR This Redis command is
    /// not allowed from script`): EVAL itself, MULTI, WATCH, SUBSCRIBE,
    /// connection and administrative commands.
    pub const NO_SCRIPT: u32 = 1 << 9;
    /// May write without being a write command (EVAL, EVALSHA): its
    /// writes are those of the commands it runs, each checked then.
    pub const MAY_REPLICATE: u32 = 1 << 10;
    /// Its keys are counted by a `numkeys` argument and follow it (EVAL's
    /// `numkeys key [key ...]` at position 2, SINTERCARD's at 1: see
    /// [`CommandSpec::keys_in`]); the row's key positions are 0.
    pub const MOVABLE_KEYS: u32 = 1 << 11;

    /// Flag names for COMMAND INFO, in bit order.
    pub const NAMES: [&str; 12] = [
        "write",
        "readonly",
        "fast",
        "admin",
        "no_auth",
        "denyoom",
        "loading",
        "stale",
        "no_multi",
        "noscript",
        "may_replicate",
        "movablekeys",
    ];
}

/// A handler that runs on the connection's own thread with its state.
pub type ConnFn = fn(&mut ConnCtx<'_>, &mut Args) -> Result<Reply, OpError>;

/// How the per-shard replies of a split command combine into one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// Add the integers (DEL, EXISTS, UNLINK, DBSIZE).
    Sum,
    /// `+OK` when every part succeeded (MSET, FLUSHALL).
    AllOk,
    /// Put each part's array elements back at their keys' positions (MGET).
    Gather,
    /// Concatenate arrays (KEYS).
    Concat,
    /// One of the parts that is not nil, chosen at random; nil when all
    /// are (RANDOMKEY: shards hold about as many keys each, so a shard
    /// drawn uniformly and a key drawn uniformly in it is close to a key
    /// drawn uniformly).
    Any,
}

/// How a command runs.
#[derive(Clone, Copy)]
pub enum Exec {
    /// On the shard that owns its key(s); all keys must share one shard.
    Key(ShardFn),
    /// Multi-key: split by shard (each part is the same command on that
    /// shard's keys, in order), replies merged.
    Keys(ShardFn, Merge),
    /// On every shard with the same arguments, replies merged.
    AllShards(ShardFn, Merge),
    /// On the shard named by a SCAN cursor (the cursor is a hash slot).
    Cursor(ShardFn),
    /// On the connection's thread, with connection state; pending replies
    /// are flushed first so state changes apply in request order.
    Conn(ConnFn),
    /// Keys on one shard: the handler, there. Keys on several: driven in
    /// steps by the [`span::SpanFn`] under the locks of every shard of its
    /// keys, atomically (RENAME, COPY, MSETNX; see [`span`]).
    Span(ShardFn, span::SpanFn),
}

/// Argument positions of a request's keys, in order.
pub type KeyPositions = std::iter::StepBy<std::ops::Range<usize>>;

/// One row of the command table.
#[derive(Clone, Copy)]
pub struct CommandSpec {
    /// Lower-case name.
    pub name: &'static str,
    /// Redis arity: `n` exactly, `-n` at least.
    pub arity: i32,
    /// [`flags`] bits.
    pub flags: u32,
    /// Position of the first key (0: no keys).
    pub first_key: i32,
    /// Position of the last key; negative counts from the end (-1 = last).
    pub last_key: i32,
    /// Distance between keys.
    pub step: i32,
    /// How it runs.
    pub exec: Exec,
    /// One-line summary for COMMAND DOCS.
    pub summary: &'static str,
}

impl std::fmt::Debug for CommandSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandSpec")
            .field("name", &self.name)
            .field("arity", &self.arity)
            .finish()
    }
}

impl CommandSpec {
    /// Whether `argc` arguments (name included) satisfy the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        if self.arity >= 0 {
            argc == self.arity as usize
        } else {
            argc >= (-self.arity) as usize
        }
    }

    /// Whether the flag bits include `flag`.
    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// The argument positions of the keys of request `all` (name first):
    /// [`CommandSpec::key_positions`], or for a [`flags::MOVABLE_KEYS`]
    /// row the `numkeys` keys after `numkeys` (position 2, or 1 for
    /// SINTERCARD; none when `numkeys` is not a count the request has: the
    /// command itself refuses it).
    pub fn keys_in(&self, all: &[bytes::Bytes]) -> KeyPositions {
        if !self.has(flags::MOVABLE_KEYS) {
            return self.key_positions(all.len());
        }
        let at = match self.name {
            "sintercard" => 1,
            _ => 2,
        };
        let n = all
            .get(at)
            .and_then(|n| leasehold_protocol::int::parse_u64(n))
            .unwrap_or(0) as usize;
        match all.len().checked_sub(at + 1) {
            Some(rest) if n <= rest => (at + 1..at + 1 + n).step_by(1),
            _ => (0..0).step_by(1),
        }
    }

    /// The argument positions of the keys for a request of `argc` arguments.
    pub fn key_positions(&self, argc: usize) -> KeyPositions {
        let (first, step) = (self.first_key.max(0) as usize, self.step.max(1) as usize);
        let last = if self.first_key == 0 {
            0
        } else if self.last_key < 0 {
            (argc as i32 + self.last_key).max(0) as usize
        } else {
            self.last_key as usize
        };
        let end = if first == 0 {
            0
        } else {
            last.min(argc.saturating_sub(1)) + 1
        };
        (first..end).step_by(step)
    }
}

/// A shorthand for family files: a row with its fields in table order.
#[allow(clippy::too_many_arguments)]
pub const fn cmd(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: (i32, i32, i32),
    exec: Exec,
    summary: &'static str,
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        exec,
        summary,
    }
}

/// No keys.
pub const NO_KEYS: (i32, i32, i32) = (0, 0, 0);
/// One key at position 1.
pub const KEY1: (i32, i32, i32) = (1, 1, 1);

/// The table, assembled from the families, and its name index.
pub struct Table {
    /// Every command; the index is the command id used by statistics.
    pub commands: Vec<CommandSpec>,
    by_name: hashbrown::HashMap<&'static [u8], usize>,
}

impl Table {
    fn build() -> Table {
        let mut commands = Vec::new();
        for family in families() {
            commands.extend_from_slice(family);
        }
        let by_name = commands
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.as_bytes(), i))
            .collect();
        Table { commands, by_name }
    }
}

/// Every family's rows, in table order.
pub fn families() -> [&'static [CommandSpec]; 19] {
    [
        connection::COMMANDS,
        server::COMMANDS,
        keys::COMMANDS,
        moves::COMMANDS,
        introspect::COMMANDS,
        strings::COMMANDS,
        ratelimit::COMMANDS,
        replication::COMMANDS,
        pubsub::COMMANDS,
        transaction::COMMANDS,
        persistence::COMMANDS,
        pins::COMMANDS,
        scripting::COMMANDS,
        lists::COMMANDS,
        hashes::COMMANDS,
        sets::COMMANDS,
        zsets::COMMANDS,
        cluster::COMMANDS,
        acl::COMMANDS,
    ]
}

impl Table {
    /// Looks up a command by name, ignoring ASCII case. No allocation.
    pub fn lookup(&self, name: &[u8]) -> Option<(usize, &CommandSpec)> {
        let mut buf = [0u8; 32];
        if name.len() > buf.len() {
            return None;
        }
        let lower = &mut buf[..name.len()];
        lower.copy_from_slice(name);
        lower.make_ascii_lowercase();
        let &i = self.by_name.get(&*lower)?;
        Some((i, &self.commands[i]))
    }
}

/// The command table (built once).
pub fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        // The shard's migration check reads key positions through this.
        let _ = crate::shard::moving::KEY_POSITIONS.set(migrate::key_positions);
        Table::build()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_well_formed() {
        let t = table();
        let mut names = std::collections::HashSet::new();
        for c in &t.commands {
            assert!(names.insert(c.name), "duplicate command {}", c.name);
            assert_eq!(c.name, c.name.to_ascii_lowercase());
            assert!(c.arity != 0, "{}: arity 0", c.name);
            if c.first_key > 0 {
                // A container's key follows its subcommand (`OBJECT
                // ENCODING key`), one past the least arity, which its HELP
                // (no key) sets.
                let container = c.first_key == 2 && c.arity == -2;
                let min_argc = c.arity.unsigned_abs() as i32 + i32::from(container);
                assert!(
                    c.first_key < min_argc,
                    "{}: first key outside arity",
                    c.name
                );
                assert!(
                    c.last_key < 0 || c.last_key < min_argc,
                    "{}: last key outside arity",
                    c.name
                );
                assert!(c.step >= 1, "{}: step", c.name);
            }
            assert!(
                !(c.has(flags::WRITE) && c.has(flags::READONLY)),
                "{} is both write and readonly",
                c.name
            );
            assert!(!c.summary.is_empty(), "{}: no summary", c.name);
        }
    }

    #[test]
    fn key_positions_follow_the_sign_convention() {
        let t = table();
        let (_, mset) = t.lookup(b"MSET").unwrap();
        assert_eq!(mset.key_positions(5).collect::<Vec<_>>(), vec![1, 3]);
        let (_, del) = t.lookup(b"del").unwrap();
        assert_eq!(del.key_positions(4).collect::<Vec<_>>(), vec![1, 2, 3]);
        let (_, ping) = t.lookup(b"PiNg").unwrap();
        assert_eq!(ping.key_positions(1).count(), 0);
    }
}
