//! Keys and expiry: DEL, UNLINK, EXISTS, TYPE, TOUCH, RANDOMKEY, EXPIRE, PEXPIRE, EXPIREAT,
//! PEXPIREAT, TTL, PTTL, EXPIRETIME, PEXPIRETIME, PERSIST, KEYS, SCAN, DBSIZE,
//! FLUSHALL, FLUSHDB, LH.FLUSHSLOTS (the effect FLUSHALL emits).
//!
//! Semantics follow Redis 7 (`db.c`, `expire.c`): a key without a TTL counts
//! as an infinite TTL for GT/LT; a deadline already past deletes the key.

use bytes::Bytes;
use leasehold_protocol::{Args, Reply};

use super::flags::{ADMIN, FAST, READONLY, WRITE};
use super::{cmd, CommandSpec, Exec, Merge, KEY1, NO_KEYS};
use crate::error::OpError;
pub use crate::glob::glob_match;
use crate::shard::Shard;
use crate::slot::{slot_shard, SLOTS};

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("del", -2, WRITE, (1, -1, 1), Exec::Keys(del, Merge::Sum), "Deletes one or more keys."),
    cmd("unlink", -2, WRITE | FAST, (1, -1, 1), Exec::Keys(del, Merge::Sum), "Asynchronously deletes one or more keys."),
    cmd("exists", -2, READONLY | FAST, (1, -1, 1), Exec::Keys(exists, Merge::Sum), "Determines whether one or more keys exist."),
    cmd("type", 2, READONLY | FAST, KEY1, Exec::Key(type_), "Determines the type of value stored at a key."),
    cmd("touch", -2, READONLY | FAST, (1, -1, 1), Exec::Keys(exists, Merge::Sum), "Returns the number of existing keys out of those specified after updating the time they were last accessed."),
    cmd("randomkey", 1, READONLY, NO_KEYS, Exec::AllShards(randomkey, Merge::Any), "Returns a random key name from the database."),
    cmd("expire", -3, WRITE | FAST, KEY1, Exec::Key(expire), "Sets the expiration time of a key in seconds."),
    cmd("pexpire", -3, WRITE | FAST, KEY1, Exec::Key(pexpire), "Sets the expiration time of a key in milliseconds."),
    cmd("expireat", -3, WRITE | FAST, KEY1, Exec::Key(expireat), "Sets the expiration time of a key to a Unix timestamp."),
    cmd("pexpireat", -3, WRITE | FAST, KEY1, Exec::Key(pexpireat), "Sets the expiration time of a key to a Unix milliseconds timestamp."),
    cmd("ttl", 2, READONLY | FAST, KEY1, Exec::Key(ttl), "Returns the expiration time in seconds of a key."),
    cmd("pttl", 2, READONLY | FAST, KEY1, Exec::Key(pttl), "Returns the expiration time in milliseconds of a key."),
    cmd("expiretime", 2, READONLY | FAST, KEY1, Exec::Key(expiretime), "Returns the expiration time of a key as a Unix timestamp."),
    cmd("pexpiretime", 2, READONLY | FAST, KEY1, Exec::Key(pexpiretime), "Returns the expiration time of a key as a Unix milliseconds timestamp."),
    cmd("persist", 2, WRITE | FAST, KEY1, Exec::Key(persist), "Removes the expiration time of a key."),
    cmd("keys", 2, READONLY, NO_KEYS, Exec::AllShards(keys, Merge::Concat), "Returns all key names that match a pattern."),
    cmd("scan", -2, READONLY, NO_KEYS, Exec::Cursor(scan), "Iterates over the key names in the database."),
    cmd("dbsize", 1, READONLY | FAST, NO_KEYS, Exec::AllShards(dbsize, Merge::Sum), "Returns the number of keys in the database."),
    cmd("flushall", -1, WRITE, NO_KEYS, Exec::AllShards(flushall, Merge::AllOk), "Removes all keys from all databases."),
    cmd("flushdb", -1, WRITE, NO_KEYS, Exec::AllShards(flushall, Merge::AllOk), "Remove all keys from the current database."),
    cmd("lh.flushslots", 3, WRITE | ADMIN, NO_KEYS, Exec::AllShards(flushslots, Merge::AllOk), "Removes every key in a range of hash slots (the replication effect of FLUSHALL)."),
];

fn del(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let mut n = 0;
    while a.remaining() > 0 {
        let key = a.key()?;
        if s.store.remove(&key, s.now.unix_ms) {
            n += 1;
        }
    }
    Ok(Reply::Int(n))
}

/// EXISTS (and TOUCH) on one shard's keys: how many are live.
pub fn exists(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let mut n = 0;
    while a.remaining() > 0 {
        let key = a.key()?;
        if s.store.type_of(&key, s.now.unix_ms).is_some() {
            n += 1;
        }
    }
    Ok(Reply::Int(n))
}

fn type_(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    Ok(Reply::simple(
        s.store.type_of(&key, s.now.unix_ms).unwrap_or("none"),
    ))
}

/// NX, XX, GT, LT as EXPIRE reads them.
#[derive(Debug, Default, Clone, Copy)]
struct ExpireFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

fn expire_flags(a: &mut Args) -> Result<ExpireFlags, OpError> {
    let mut f = ExpireFlags::default();
    while a.remaining() > 0 {
        // Redis quotes an unknown option as sent, not upper-cased.
        let sent = a.peek().map(|w| String::from_utf8_lossy(w).into_owned());
        match a.word()?.as_str() {
            "NX" => f.nx = true,
            "XX" => f.xx = true,
            "GT" => f.gt = true,
            "LT" => f.lt = true,
            _ => return Err(OpError::UnsupportedOption(sent.unwrap_or_default())),
        }
    }
    if f.nx && (f.xx || f.gt || f.lt) {
        return Err(OpError::NxAndXxGtLt);
    }
    if f.gt && f.lt {
        return Err(OpError::GtAndLt);
    }
    Ok(f)
}

/// The op behind EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT (Redis
/// `expireGenericCommand`). `unit_ms` is 1000 for seconds; `relative` adds
/// the wall clock at this call ([`Shard::wall_ms`]).
fn expire_generic(
    s: &mut Shard,
    a: &mut Args,
    unit_ms: i64,
    relative: bool,
    cmd: &'static str,
) -> Result<Reply, OpError> {
    let key = a.key()?;
    let when = a.i64()?;
    let flags = expire_flags(a)?;
    let bad = OpError::InvalidExpire(cmd);
    if unit_ms == 1000 && !(i64::MIN / 1000..=i64::MAX / 1000).contains(&when) {
        return Err(bad);
    }
    let mut when = when * unit_ms;
    let now = s.now.unix_ms;
    let wall = s.wall_ms();
    if relative {
        when = when.checked_add(wall as i64).ok_or(bad)?;
    }
    let Some(entry) = s.store.get(&key, now) else {
        return Ok(Reply::Int(0));
    };
    let current = entry.expire_at(s.now);
    let refuse = (flags.nx && current.is_some())
        || (flags.xx && current.is_none())
        || (flags.gt && current.is_none_or(|c| when <= c as i64))
        || (flags.lt && current.is_some_and(|c| when >= c as i64));
    if refuse {
        return Ok(Reply::Int(0));
    }
    if when <= wall as i64 {
        s.store.remove(&key, now);
    } else {
        s.store.set_expire(&key, Some(when as u64));
    }
    Ok(Reply::Int(1))
}

fn expire(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    expire_generic(s, a, 1000, true, "expire")
}

fn pexpire(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    expire_generic(s, a, 1, true, "pexpire")
}

fn expireat(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    expire_generic(s, a, 1000, false, "expireat")
}

fn pexpireat(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    expire_generic(s, a, 1, false, "pexpireat")
}

/// The deadline of a live key: `Err(-2)` absent, `Ok(None)` no TTL.
fn deadline_of(s: &mut Shard, key: &[u8]) -> Result<Option<u64>, i64> {
    match s.store.get(key, s.now.unix_ms) {
        None => Err(-2),
        Some(e) => Ok(e.expire_at(s.now)),
    }
}

fn ttl_generic(s: &mut Shard, a: &mut Args, ms: bool, absolute: bool) -> Result<Reply, OpError> {
    let key = a.key()?;
    let now = s.wall_ms();
    Ok(Reply::Int(match deadline_of(s, &key) {
        Err(code) => code,
        Ok(None) => -1,
        Ok(Some(at)) => match (absolute, ms) {
            (true, true) => at as i64,
            // EXPIRETIME rounds to the nearest second too (Redis's ttlGenericCommand).
            (true, false) => (at.saturating_add(500) / 1000) as i64,
            (false, true) => at.saturating_sub(now) as i64,
            // Redis rounds the remaining seconds to the nearest.
            (false, false) => (at.saturating_sub(now).saturating_add(500) / 1000) as i64,
        },
    }))
}

fn ttl(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    ttl_generic(s, a, false, false)
}

fn pttl(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    ttl_generic(s, a, true, false)
}

fn expiretime(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    ttl_generic(s, a, false, true)
}

fn pexpiretime(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    ttl_generic(s, a, true, true)
}

fn persist(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    if let Ok(Some(_)) = deadline_of(s, &key) {
        s.store.set_expire(&key, None);
        return Ok(Reply::Int(1));
    }
    Ok(Reply::Int(0))
}

fn keys(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let pattern = a.next()?;
    let now = s.now.unix_ms;
    let mut out = Vec::new();
    for slot in s.store.slot_range() {
        s.store.for_each_in_slot(slot, now, |e| {
            if glob_match(&pattern, e.key()) {
                out.push(Reply::Bulk(Bytes::copy_from_slice(e.key())));
            }
        });
    }
    Ok(Reply::Array(out))
}

/// The options of SCAN and of HSCAN-like commands, as Redis's
/// `scanGenericCommand` reads them.
#[derive(Debug, Clone, Default)]
pub struct ScanOptions {
    /// MATCH's glob pattern.
    pub pattern: Option<Bytes>,
    /// COUNT, 10 when not given.
    pub count: u64,
    /// TYPE's name, lower case (SCAN only).
    pub type_filter: Option<String>,
}

/// Reads `[MATCH pattern] [COUNT n] [TYPE type]` in any order (the last of
/// each wins); TYPE only when `with_type` (SCAN's, not HSCAN's).
///
/// # Errors
/// Syntax error for an unknown option, a missing value or a COUNT below 1;
/// the integer error for a COUNT that is not one.
pub fn scan_options(a: &mut Args, with_type: bool) -> Result<ScanOptions, OpError> {
    let mut o = ScanOptions {
        count: 10,
        ..ScanOptions::default()
    };
    while a.remaining() > 0 {
        match a.word()?.as_str() {
            "MATCH" => o.pattern = Some(a.next()?),
            "COUNT" => {
                let n = a.i64()?;
                if n < 1 {
                    return Err(OpError::Syntax);
                }
                o.count = n as u64;
            }
            "TYPE" if with_type => o.type_filter = Some(a.word()?.to_ascii_lowercase()),
            _ => return Err(OpError::Syntax),
        }
    }
    Ok(o)
}

/// SCAN's cursor is a hash slot: this call returns every key of whole slots,
/// starting at the cursor's, until COUNT keys are gathered or this shard's
/// slots end, and answers the next slot to visit (0 after the last slot).
fn scan(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let cursor = leasehold_protocol::int::parse_u64(&a.next()?).ok_or(OpError::InvalidCursor)?;
    let ScanOptions {
        pattern,
        count,
        type_filter,
    } = scan_options(a, true)?;
    if cursor >= SLOTS as u64 {
        return Ok(Reply::Array(vec![
            Reply::bulk("0"),
            Reply::Array(Vec::new()),
        ]));
    }
    let range = s.store.slot_range();
    debug_assert_eq!(slot_shard(cursor as u16, s.shards), s.id);
    let now = s.now.unix_ms;
    let mut out = Vec::new();
    let mut slot = (cursor as usize).max(range.start);
    while slot < range.end && (out.len() as u64) < count {
        s.store.for_each_in_slot(slot, now, |e| {
            let name_ok = pattern.as_ref().is_none_or(|p| glob_match(p, e.key()));
            let type_ok = type_filter
                .as_ref()
                .is_none_or(|t| t == e.value.type_name());
            if name_ok && type_ok {
                out.push(Reply::Bulk(Bytes::copy_from_slice(e.key())));
            }
        });
        slot += 1;
    }
    let next = if slot >= SLOTS { 0 } else { slot };
    Ok(Reply::Array(vec![
        Reply::bulk(next.to_string()),
        Reply::Array(out),
    ]))
}

/// RANDOMKEY on one shard: one of its live keys at random, or nil (the
/// merge picks one of the shards' answers at random).
fn randomkey(s: &mut Shard, _a: &mut Args) -> Result<Reply, OpError> {
    Ok(s.store
        .random_key(s.now.unix_ms)
        .map_or(Reply::Nil, Reply::Bulk))
}

fn dbsize(s: &mut Shard, _a: &mut Args) -> Result<Reply, OpError> {
    Ok(Reply::Int(s.store.counts().keys as i64))
}

fn flushall(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    while a.remaining() > 0 {
        match a.word()?.as_str() {
            "ASYNC" | "SYNC" => {}
            _ => return Err(OpError::Syntax),
        }
    }
    s.store.clear();
    Ok(Reply::ok())
}

/// `LH.FLUSHSLOTS first last`: removes the keys in hash slots
/// `first..=last` that this shard owns.
fn flushslots(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let first = a.u64()?;
    let last = a.u64()?;
    if first > last || last >= SLOTS as u64 {
        return Err(OpError::InvalidSlotRange);
    }
    s.store.clear_slots(first as usize..last as usize + 1);
    Ok(Reply::ok())
}
