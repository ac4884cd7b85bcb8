//! Strings and counters: GET, SET, SETNX, SETEX, PSETEX, GETSET, GETDEL, GETEX,
//! MGET, MSET, MSETNX, INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT, APPEND,
//! STRLEN, SETRANGE, GETRANGE, SUBSTR.
//!
//! Semantics and error texts follow Redis 7 (`t_string.c`). Counters keep
//! their TTL; SET without KEEPTTL clears it. Every write emits its resulting
//! value with its absolute deadline as an effect.

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{Args, Reply};

use super::flags::{DENYOOM, FAST, READONLY, WRITE};
use super::longdouble;
use super::span::{first_error, Next, Step};
use super::{cmd, CommandSpec, Exec, Merge, KEY1};
use crate::error::OpError;
use crate::shard::Shard;
use crate::store::Value;

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("get", 2, READONLY | FAST, KEY1, Exec::Key(get), "Returns the string value of a key."),
    cmd("set", -3, WRITE | DENYOOM, KEY1, Exec::Key(set), "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist."),
    cmd("setnx", 3, WRITE | DENYOOM | FAST, KEY1, Exec::Key(setnx), "Set the string value of a key only when the key doesn't exist."),
    cmd("setex", 4, WRITE | DENYOOM, KEY1, Exec::Key(setex), "Sets the string value and expiration time of a key, in seconds."),
    cmd("psetex", 4, WRITE | DENYOOM, KEY1, Exec::Key(psetex), "Sets both string value and expiration time in milliseconds of a key."),
    cmd("getset", 3, WRITE | DENYOOM | FAST, KEY1, Exec::Key(getset), "Returns the previous string value of a key after setting it to a new value."),
    cmd("getdel", 2, WRITE | FAST, KEY1, Exec::Key(getdel), "Returns the string value of a key after deleting the key."),
    cmd("getex", -2, WRITE | FAST, KEY1, Exec::Key(getex), "Returns the string value of a key after setting its expiration time."),
    cmd("mget", -2, READONLY | FAST, (1, -1, 1), Exec::Keys(mget, Merge::Gather), "Atomically returns the string values of one or more keys."),
    cmd("mset", -3, WRITE | DENYOOM, (1, -1, 2), Exec::Keys(mset, Merge::AllOk), "Sets the string values of one or more keys (atomic per shard)."),
    cmd("msetnx", -3, WRITE | DENYOOM, (1, -1, 2), Exec::Span(msetnx, msetnx_steps), "Atomically modifies the string values of one or more keys only when all keys don't exist."),
    cmd("incr", 2, WRITE | DENYOOM | FAST, KEY1, Exec::Key(incr), "Increments the integer value of a key by one. Uses 0 as initial value if the key doesn't exist."),
    cmd("decr", 2, WRITE | DENYOOM | FAST, KEY1, Exec::Key(decr), "Decrements the integer value of a key by one. Uses 0 as initial value if the key doesn't exist."),
    cmd("incrby", 3, WRITE | DENYOOM | FAST, KEY1, Exec::Key(incrby), "Increments the integer value of a key by a number. Uses 0 as initial value if the key doesn't exist."),
    cmd("decrby", 3, WRITE | DENYOOM | FAST, KEY1, Exec::Key(decrby), "Decrements a number from the integer value of a key. Uses 0 as initial value if the key doesn't exist."),
    cmd("incrbyfloat", 3, WRITE | DENYOOM | FAST, KEY1, Exec::Key(incrbyfloat), "Increment the floating point value of a key by a number. Uses 0 as initial value if the key doesn't exist."),
    cmd("append", 3, WRITE | DENYOOM | FAST, KEY1, Exec::Key(append), "Appends a string to the value of a key. Creates the key if it doesn't exist."),
    cmd("strlen", 2, READONLY | FAST, KEY1, Exec::Key(strlen), "Returns the length of a string value."),
    cmd("setrange", 4, WRITE | DENYOOM, KEY1, Exec::Key(setrange), "Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist."),
    cmd("getrange", 4, READONLY, KEY1, Exec::Key(getrange), "Returns a substring of the string stored at a key."),
    cmd("substr", 4, READONLY, KEY1, Exec::Key(getrange), "Returns a substring from a string value."),
];

/// Reads a string value: `Ok(None)` when absent, WRONGTYPE for other types.
/// Counts a keyspace hit or miss.
pub fn read_string(s: &mut Shard, key: &[u8]) -> Result<Option<Bytes>, OpError> {
    let now = s.now.unix_ms;
    match s.store.get(key, now) {
        None => {
            s.stats.keyspace_misses.add(1);
            Ok(None)
        }
        Some(e) => {
            s.stats.keyspace_hits.add(1);
            e.value.as_bytes().map(Some).ok_or(OpError::WrongType)
        }
    }
}

/// Stores a string value (the store emits its effect).
fn write_string(s: &mut Shard, key: &[u8], value: Value, expire_at: Option<u64>) {
    s.store.set(key, value, expire_at, s.now.unix_ms);
}

fn bulk_or_nil(v: Option<Bytes>) -> Reply {
    v.map(Reply::Bulk).unwrap_or(Reply::Nil)
}

fn get(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    Ok(bulk_or_nil(read_string(s, &key)?))
}

/// A TTL option as sent: EX/PX/EXAT/PXAT with its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlOption {
    /// Relative, milliseconds (EX is converted).
    In(i64),
    /// Absolute Unix ms (EXAT is converted).
    At(i64),
}

/// Reads the number after EX/PX/EXAT/PXAT and checks it as Redis does
/// (`getExpireMillisecondsOrReply`): positive, no overflow in ms.
///
/// # Errors
/// NotInteger when unparsable; `InvalidExpire(cmd)` when ≤ 0 or overflowing.
pub fn ttl_option(a: &mut Args, word: &str, cmd: &'static str) -> Result<TtlOption, OpError> {
    let n = a.i64()?;
    let bad = OpError::InvalidExpire(cmd);
    if n <= 0 {
        return Err(bad);
    }
    let seconds = matches!(word, "EX" | "EXAT");
    let ms = if seconds {
        n.checked_mul(1000).ok_or(bad.clone())?
    } else {
        n
    };
    Ok(if matches!(word, "EX" | "PX") {
        TtlOption::In(ms)
    } else {
        TtlOption::At(ms)
    })
}

/// Turns a TTL option into an absolute deadline (Unix ms).
///
/// # Errors
/// `InvalidExpire(cmd)` when now + ttl overflows.
pub fn deadline(now_ms: u64, ttl: TtlOption, cmd: &'static str) -> Result<u64, OpError> {
    match ttl {
        TtlOption::In(ms) => (now_ms as i64)
            .checked_add(ms)
            .map(|v| v as u64)
            .ok_or(OpError::InvalidExpire(cmd)),
        TtlOption::At(ms) => Ok(ms as u64),
    }
}

fn set(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let value = a.next()?;
    let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
    let mut ttl = None;
    // Redis lets an expiry option repeat (the last one wins) but not mix
    // with another unit or KEEPTTL.
    let mut unit: Option<String> = None;
    while a.remaining() > 0 {
        let w = a.word()?;
        match w.as_str() {
            "NX" if !xx => nx = true,
            "XX" if !nx => xx = true,
            "GET" => get = true,
            "KEEPTTL" if ttl.is_none() => keepttl = true,
            "EX" | "PX" | "EXAT" | "PXAT" if unit.as_ref().is_none_or(|u| *u == w) && !keepttl => {
                if a.remaining() == 0 {
                    return Err(OpError::Syntax);
                }
                ttl = Some(ttl_option(a, &w, "set")?);
                unit = Some(w);
            }
            _ => return Err(OpError::Syntax),
        }
    }
    let now = s.now.unix_ms;
    let expire_at = ttl.map(|t| deadline(s.wall_ms(), t, "set")).transpose()?;
    let old = if get { read_string(s, &key)? } else { None };
    let existing = s.store.get(&key, now).map(|e| e.expire_at(s.now));
    if (nx && existing.is_some()) || (xx && existing.is_none()) {
        return Ok(if get { bulk_or_nil(old) } else { Reply::Nil });
    }
    let keep = if keepttl { existing.flatten() } else { None };
    write_string(s, &key, Value::from_bytes(&value), expire_at.or(keep));
    Ok(if get { bulk_or_nil(old) } else { Reply::ok() })
}

fn setnx(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let value = a.next()?;
    if s.store.get(&key, s.now.unix_ms).is_some() {
        return Ok(Reply::Int(0));
    }
    write_string(s, &key, Value::from_bytes(&value), None);
    Ok(Reply::Int(1))
}

fn setex_generic(
    s: &mut Shard,
    a: &mut Args,
    word: &str,
    cmd: &'static str,
) -> Result<Reply, OpError> {
    let key = a.key()?;
    let ttl = ttl_option(a, word, cmd)?;
    let value = a.next()?;
    let at = deadline(s.wall_ms(), ttl, cmd)?;
    write_string(s, &key, Value::from_bytes(&value), Some(at));
    Ok(Reply::ok())
}

fn setex(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    setex_generic(s, a, "EX", "setex")
}

fn psetex(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    setex_generic(s, a, "PX", "psetex")
}

fn getset(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let value = a.next()?;
    let old = read_string(s, &key)?;
    write_string(s, &key, Value::from_bytes(&value), None);
    Ok(bulk_or_nil(old))
}

fn getdel(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let old = read_string(s, &key)?;
    if old.is_some() {
        s.store.remove(&key, s.now.unix_ms);
    }
    Ok(bulk_or_nil(old))
}

fn getex(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let mut ttl = None;
    let mut persist = false;
    let mut unit: Option<String> = None;
    while a.remaining() > 0 {
        let w = a.word()?;
        match w.as_str() {
            "PERSIST" if ttl.is_none() => persist = true,
            "EX" | "PX" | "EXAT" | "PXAT" if unit.as_ref().is_none_or(|u| *u == w) && !persist => {
                if a.remaining() == 0 {
                    return Err(OpError::Syntax);
                }
                // As Redis, the expiry's value is checked only once the
                // key is found to be a string: a missing key answers nil.
                ttl = Some(ttl_option(a, &w, "getex"));
                unit = Some(w);
            }
            _ => return Err(OpError::Syntax),
        }
    }
    let now = s.now.unix_ms;
    let Some(value) = read_string(s, &key)? else {
        return Ok(Reply::Nil);
    };
    let wall = s.wall_ms();
    let at = ttl
        .map(|t| t.and_then(|t| deadline(wall, t, "getex")))
        .transpose()?;
    if let Some(at) = at {
        if at <= wall {
            s.store.remove(&key, now);
        } else {
            s.store.set_expire(&key, Some(at));
        }
    } else if persist
        && s.store
            .get(&key, now)
            .and_then(|e| e.expire_at(s.now))
            .is_some()
    {
        s.store.set_expire(&key, None);
    }
    Ok(Reply::Bulk(value))
}

fn mget(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let mut out = Vec::with_capacity(a.remaining());
    while a.remaining() > 0 {
        let key = a.key()?;
        // MGET answers nil, not WRONGTYPE, for keys of another type.
        out.push(bulk_or_nil(read_string(s, &key).unwrap_or(None)));
    }
    Ok(Reply::Array(out))
}

fn mset(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    if a.remaining() % 2 != 0 {
        return Err(OpError::Arity("mset"));
    }
    while a.remaining() > 0 {
        let key = a.key()?;
        let value = a.next()?;
        write_string(s, &key, Value::from_bytes(&value), None);
    }
    Ok(Reply::ok())
}

/// MSETNX with every key on this shard: nothing is written when any key
/// exists (Redis's `msetnxCommand`).
fn msetnx(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    if a.remaining() % 2 != 0 {
        return Err(OpError::Arity("msetnx"));
    }
    let now = s.now.unix_ms;
    let all = a.all();
    if all[1..]
        .chunks(2)
        .any(|p| s.store.type_of(&p[0], now).is_some())
    {
        return Ok(Reply::Int(0));
    }
    for p in all[1..].chunks(2) {
        write_string(s, &p[0], Value::from_bytes(&p[1]), None);
    }
    Ok(Reply::Int(1))
}

/// MSETNX over several shards: each shard counts its keys that exist
/// (EXISTS), then, when none does anywhere, each sets its pairs (MSET), all
/// under the shards' locks.
fn msetnx_steps(args: &[Bytes], shards: usize, step: usize, replies: &[Reply]) -> Next {
    if let Some(e) = first_error(replies) {
        return e;
    }
    let per_shard = |name: &[u8], with_values: bool| {
        let mut per: Vec<Vec<Bytes>> = vec![Vec::new(); shards];
        for p in args[1..].chunks(2) {
            let s = crate::slot::slot_shard(crate::slot::key_slot(&p[0]), shards);
            if per[s].is_empty() {
                per[s].push(Bytes::copy_from_slice(name));
            }
            per[s].extend_from_slice(if with_values { p } else { &p[..1] });
        }
        let run: crate::shard::ShardFn = if with_values {
            mset
        } else {
            super::keys::exists
        };
        let jobs = per.into_iter().enumerate().filter(|(_, a)| !a.is_empty());
        jobs.map(|(shard, args)| Step { shard, run, args })
            .collect()
    };
    match step {
        0 => Next::Run(per_shard(b"exists", false)),
        1 if replies.iter().any(|r| *r != Reply::Int(0)) => Next::Done(Ok(Reply::Int(0))),
        1 => Next::Run(per_shard(b"mset", true)),
        _ => Next::Done(Ok(Reply::Int(1))),
    }
}

/// SETRANGE: writes `value` at `offset` of the string at `key`, padding
/// with zero bytes, keeping the TTL; answers the new length. As Redis's
/// `setrangeCommand`: an empty `value` writes nothing (and creates no key),
/// and the result may not pass `proto-max-bulk-len`.
fn setrange(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let offset = a.i64()?;
    let value = a.next()?;
    if offset < 0 {
        return Err(OpError::OffsetOutOfRange);
    }
    let now = s.now.unix_ms;
    let (current, expire_at) = match s.store.get(&key, now) {
        None => (None, None),
        Some(e) => (
            Some(e.value.as_bytes().ok_or(OpError::WrongType)?),
            e.expire_at(s.now),
        ),
    };
    if value.is_empty() {
        return Ok(Reply::Int(current.map_or(0, |c| c.len() as i64)));
    }
    let end = (offset as u64)
        .checked_add(value.len() as u64)
        .filter(|&e| e <= s.conf.proto_max_bulk_len as u64)
        .ok_or(OpError::StringTooLong)? as usize;
    let current = current.unwrap_or_default();
    let mut out = BytesMut::zeroed(end.max(current.len()));
    out[..current.len()].copy_from_slice(&current);
    out[offset as usize..end].copy_from_slice(&value);
    let len = out.len();
    write_string(s, &key, Value::from_bytes(&out), expire_at);
    Ok(Reply::Int(len as i64))
}

/// GETRANGE (and SUBSTR): the bytes of the string at `key` from `start` to
/// `end` inclusive, negative positions counting from the end, clamped as
/// Redis's `getrangeCommand` clamps them; an empty string when absent.
fn getrange(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let start = a.i64()?;
    let end = a.i64()?;
    let Some(v) = read_string(s, &key)? else {
        return Ok(Reply::Bulk(Bytes::new()));
    };
    let len = v.len() as i64;
    if start < 0 && end < 0 && start > end {
        return Ok(Reply::Bulk(Bytes::new()));
    }
    let from_end = |i: i64| {
        if i < 0 {
            len.saturating_add(i).max(0)
        } else {
            i
        }
    };
    let (start, end) = (from_end(start), from_end(end).min(len - 1));
    if start > end || len == 0 {
        return Ok(Reply::Bulk(Bytes::new()));
    }
    Ok(Reply::Bulk(v.slice(start as usize..end as usize + 1)))
}

/// Adds `delta` to the integer at `key` (0 when absent), keeping its TTL.
/// The op behind INCR, DECR, INCRBY and DECRBY.
///
/// # Errors
/// WRONGTYPE; NotInteger when the value is not a strict i64;
/// Overflow when the sum leaves i64.
pub fn op_incr_by(s: &mut Shard, key: &[u8], delta: i64) -> Result<i64, OpError> {
    let now = s.now.unix_ms;
    let (current, expire_at) = match s.store.get(key, now) {
        None => (0, None),
        Some(e) => {
            let v = match &e.value {
                Value::Int(i) => *i,
                other => other
                    .with_string(leasehold_protocol::int::parse_i64)
                    .ok_or(OpError::WrongType)?
                    .ok_or(OpError::NotInteger)?,
            };
            (v, e.expire_at(s.now))
        }
    };
    let next = current.checked_add(delta).ok_or(OpError::Overflow)?;
    s.store.set(key, Value::Int(next), expire_at, now);
    Ok(next)
}

fn incr(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    op_incr_by(s, &key, 1).map(Reply::Int)
}

fn decr(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    op_incr_by(s, &key, -1).map(Reply::Int)
}

fn incrby(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let delta = a.i64()?;
    op_incr_by(s, &key, delta).map(Reply::Int)
}

fn decrby(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let delta = a.i64()?;
    let neg = delta.checked_neg().ok_or(OpError::DecrementOverflow)?;
    op_incr_by(s, &key, neg).map(Reply::Int)
}

/// INCRBYFLOAT: as Redis, the key's type is checked, then its value read,
/// then the increment.
fn incrbyfloat(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let delta = a.next()?;
    let now = s.now.unix_ms;
    let (current, expire_at) = match s.store.get(&key, now) {
        None => (longdouble::ZERO, None),
        Some(e) => {
            let bytes = e.value.as_bytes().ok_or(OpError::WrongType)?;
            let current = longdouble::parse(&bytes).ok_or(OpError::NotFloat)?;
            (current, e.expire_at(s.now))
        }
    };
    let delta = longdouble::parse(&delta).ok_or(OpError::NotFloat)?;
    let text = longdouble::add_texts(&current, &delta).ok_or(OpError::NanOrInfinity)?;
    write_string(s, &key, Value::from_bytes(text.as_bytes()), expire_at);
    Ok(Reply::Bulk(Bytes::from(text)))
}

fn append(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let tail = a.next()?;
    let now = s.now.unix_ms;
    let (current, expire_at) = match s.store.get(&key, now) {
        None => (Bytes::new(), None),
        Some(e) => (
            e.value.as_bytes().ok_or(OpError::WrongType)?,
            e.expire_at(s.now),
        ),
    };
    let limit = s.conf.proto_max_bulk_len;
    if current.len() + tail.len() > limit {
        return Err(OpError::StringTooLong);
    }
    let mut joined = BytesMut::with_capacity(current.len() + tail.len());
    joined.extend_from_slice(&current);
    joined.extend_from_slice(&tail);
    let len = joined.len();
    write_string(s, &key, Value::from_bytes(&joined), expire_at);
    Ok(Reply::Int(len as i64))
}

fn strlen(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    Ok(Reply::Int(
        read_string(s, &key)?.map_or(0, |b| b.len() as i64),
    ))
}
