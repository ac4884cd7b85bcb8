//! Hashes: HSET, HGET, HMGET, HMSET, HSETNX, HINCRBY, HINCRBYFLOAT, HDEL,
//! HEXISTS, HLEN, HKEYS, HVALS, HGETALL, HSTRLEN, HRANDFIELD, HSCAN (the
//! structure is [`crate::collections::hash`]).
//!
//! Semantics, the order in which arguments and keys are checked, error texts
//! and reply shapes follow Redis 7.0's `t_hash.c`. HSET and HMSET replay as
//! HSET; HSETNX, HINCRBY and HINCRBYFLOAT as the HSET of the field's
//! resulting value (so a float's formatting can never differ on a replica);
//! HDEL as itself; a hash emptied is removed. HRANDFIELD's picks come from a
//! per-thread generator; it only reads.

use bytes::Bytes;
use leasehold_protocol::{Aggregate, Args, Bulks, Reply};

use super::collection::{
    emit, lookup, or_create, parse_cursor, pick_positions, random_count, scan_reply, with_rng,
};
use super::flags::{DENYOOM, FAST, READONLY, WRITE};
use super::keys::scan_options;
use super::longdouble::{self, Parsed};
use super::{cmd, CommandSpec, Exec, KEY1};
use crate::collections::hash::Hash;
use crate::error::OpError;
use crate::glob::glob_match;
use crate::shard::Shard;
use crate::store::Value;

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("hset", -4, WRITE | DENYOOM | FAST, KEY1, Exec::Key(hset), "Creates or modifies the value of a field in a hash."),
    cmd("hget", 3, READONLY | FAST, KEY1, Exec::Key(hget), "Returns the value of a field in a hash."),
    cmd("hmget", -3, READONLY | FAST, KEY1, Exec::Key(hmget), "Returns the values of all fields in a hash."),
    cmd("hmset", -4, WRITE | DENYOOM | FAST, KEY1, Exec::Key(hmset), "Sets the values of multiple fields."),
    cmd("hsetnx", 4, WRITE | DENYOOM | FAST, KEY1, Exec::Key(hsetnx), "Sets the value of a field in a hash only when the field doesn't exist."),
    cmd("hincrby", 4, WRITE | DENYOOM | FAST, KEY1, Exec::Key(hincrby), "Increments the integer value of a field in a hash by a number. Uses 0 as initial value if the field doesn't exist."),
    cmd("hincrbyfloat", 4, WRITE | DENYOOM | FAST, KEY1, Exec::Key(hincrbyfloat), "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't exist."),
    cmd("hdel", -3, WRITE | FAST, KEY1, Exec::Key(hdel), "Deletes one or more fields and their values from a hash. Deletes the hash if no fields remain."),
    cmd("hexists", 3, READONLY | FAST, KEY1, Exec::Key(hexists), "Determines whether a field exists in a hash."),
    cmd("hlen", 2, READONLY | FAST, KEY1, Exec::Key(hlen), "Returns the number of fields in a hash."),
    cmd("hkeys", 2, READONLY, KEY1, Exec::Key(hkeys), "Returns all fields in a hash."),
    cmd("hvals", 2, READONLY, KEY1, Exec::Key(hvals), "Returns all values in a hash."),
    cmd("hgetall", 2, READONLY, KEY1, Exec::Key(hgetall), "Returns all fields and values in a hash."),
    cmd("hstrlen", 3, READONLY | FAST, KEY1, Exec::Key(hstrlen), "Returns the length of the value of a field."),
    cmd("hrandfield", -2, READONLY, KEY1, Exec::Key(hrandfield), "Returns one or more random fields from a hash."),
    cmd("hscan", -3, READONLY, KEY1, Exec::Key(hscan), "Iterates over fields and values of a hash."),
];

fn as_hash(v: &mut Value) -> Option<&mut Hash> {
    match v {
        Value::Hash(h) => Some(h),
        _ => None,
    }
}

/// The hash at `key` for a write: `None` when absent, WRONGTYPE otherwise.
fn hash_mut<'a>(s: &'a mut Shard, key: &[u8]) -> Result<Option<&'a mut Hash>, OpError> {
    lookup(s, key, false, as_hash)
}

/// [`hash_mut`] for a read (a keyspace hit or miss counted).
fn hash_read<'a>(s: &'a mut Shard, key: &[u8]) -> Result<Option<&'a mut Hash>, OpError> {
    lookup(s, key, true, as_hash)
}

/// Sets `pairs` (field, value, ...) in the hash at `key`, created when
/// absent; returns how many fields are new. Emits `HSET key pairs...`.
fn set_pairs(s: &mut Shard, key: &[u8], pairs: &[&[u8]]) -> Result<usize, OpError> {
    let limits = s.conf.hash_limits;
    let hash = or_create(s, key, || Value::Hash(Box::default()), as_hash)?;
    let created = pairs
        .chunks(2)
        .filter(|p| hash.insert(p[0], p[1], &limits))
        .count();
    emit(s, b"HSET", key, pairs);
    Ok(created)
}

/// HSET and HMSET: the pairs after the key, whole (an odd count is the
/// arity error, found while the command runs, as in Redis).
fn hset_generic(s: &mut Shard, a: &mut Args, name: &'static str) -> Result<Reply, OpError> {
    let key = a.key()?;
    if a.remaining() % 2 == 1 {
        return Err(OpError::Arity(name));
    }
    let mut args = Vec::with_capacity(a.remaining());
    while a.remaining() > 0 {
        args.push(a.next()?);
    }
    let pairs: Vec<&[u8]> = args.iter().map(|b| &b[..]).collect();
    set_pairs(s, &key, &pairs).map(|n| Reply::Int(n as i64))
}

fn hset(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    hset_generic(s, a, "hset")
}

fn hmset(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    hset_generic(s, a, "hmset").map(|_| Reply::ok())
}

fn hsetnx(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let (key, field, value) = (a.key()?, a.next()?, a.next()?);
    if hash_mut(s, &key)?.is_some_and(|h| h.get(&field).is_some()) {
        return Ok(Reply::Int(0));
    }
    set_pairs(s, &key, &[&field, &value])?;
    Ok(Reply::Int(1))
}

fn bulk_or_nil(v: Option<&[u8]>) -> Reply {
    v.map_or(Reply::Nil, |v| Reply::Bulk(Bytes::copy_from_slice(v)))
}

fn hget(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let (key, field) = (a.key()?, a.next()?);
    Ok(bulk_or_nil(hash_read(s, &key)?.and_then(|h| h.get(&field))))
}

fn hmget(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let hash = hash_read(s, &key)?;
    let mut out = Vec::with_capacity(a.remaining());
    while a.remaining() > 0 {
        let field = a.next()?;
        out.push(bulk_or_nil(hash.as_ref().and_then(|h| h.get(&field))));
    }
    Ok(Reply::Array(out))
}

fn hincrby(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let (key, field) = (a.key()?, a.next()?);
    let delta = a.i64()?;
    let current = match hash_mut(s, &key)?.and_then(|h| h.get(&field)) {
        None => 0,
        Some(v) => leasehold_protocol::int::parse_i64(v).ok_or(OpError::HashValueNotInteger)?,
    };
    let next = current.checked_add(delta).ok_or(OpError::Overflow)?;
    let text = itoa::Buffer::new().format(next).to_owned();
    set_pairs(s, &key, &[&field, text.as_bytes()])?;
    Ok(Reply::Int(next))
}

/// HINCRBYFLOAT, added and printed as INCRBYFLOAT is (in `long double`,
/// [`longdouble`]); an infinite increment is refused first, as in Redis.
fn hincrbyfloat(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let (key, field) = (a.key()?, a.next()?);
    let delta = longdouble::parse(&a.next()?).ok_or(OpError::NotFloat)?;
    if delta == Parsed::Infinite {
        return Err(OpError::ValueNanOrInfinity);
    }
    let current = match hash_mut(s, &key)?.and_then(|h| h.get(&field)) {
        None => longdouble::ZERO,
        Some(v) => longdouble::parse(v).ok_or(OpError::HashValueNotFloat)?,
    };
    let text = longdouble::add_texts(&current, &delta).ok_or(OpError::NanOrInfinity)?;
    set_pairs(s, &key, &[&field, text.as_bytes()])?;
    Ok(Reply::Bulk(Bytes::from(text)))
}

fn hdel(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let mut fields = Vec::with_capacity(a.remaining());
    while a.remaining() > 0 {
        fields.push(a.next()?);
    }
    let Some(hash) = hash_mut(s, &key)? else {
        return Ok(Reply::Int(0));
    };
    let deleted = fields.iter().filter(|f| hash.remove(f)).count();
    let emptied = hash.is_empty();
    if deleted > 0 {
        let args: Vec<&[u8]> = fields.iter().map(|f| &f[..]).collect();
        emit(s, b"HDEL", &key, &args);
        if emptied {
            s.store.remove_emptied(&key);
        }
    }
    Ok(Reply::Int(deleted as i64))
}

fn hexists(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let (key, field) = (a.key()?, a.next()?);
    let found = hash_read(s, &key)?.is_some_and(|h| h.get(&field).is_some());
    Ok(Reply::Int(i64::from(found)))
}

fn hlen(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    Ok(Reply::Int(hash_read(s, &key)?.map_or(0, |h| h.len()) as i64))
}

fn hstrlen(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let (key, field) = (a.key()?, a.next()?);
    let len = hash_read(s, &key)?
        .and_then(|h| h.get(&field))
        .map_or(0, <[u8]>::len);
    Ok(Reply::Int(len as i64))
}

/// HKEYS, HVALS and HGETALL: the fields, the values or both, in the hash's
/// order (a listpack's insertion order), encoded as they are read.
fn getall(s: &mut Shard, a: &mut Args, fields: bool, values: bool) -> Result<Reply, OpError> {
    let key = a.key()?;
    let kind = if fields && values {
        Aggregate::Map
    } else {
        Aggregate::Array
    };
    let mut out = Bulks::with_capacity(kind, 0);
    if let Some(hash) = hash_read(s, &key)? {
        out = Bulks::with_capacity(kind, 24 * hash.len());
        for (f, v) in hash.iter() {
            if fields {
                out.push(f);
            }
            if values {
                out.push(v);
            }
        }
    }
    Ok(out.into())
}

fn hkeys(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    getall(s, a, true, false)
}

fn hvals(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    getall(s, a, false, true)
}

fn hgetall(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    getall(s, a, true, true)
}

fn hrandfield(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    if a.remaining() == 0 {
        let Some(hash) = hash_read(s, &key)? else {
            return Ok(Reply::Nil);
        };
        let i = with_rng(|r| r.below(hash.len()));
        return Ok(Reply::Bulk(Bytes::copy_from_slice(
            hash.by_position().get(i).0,
        )));
    }
    let (count, with_values) = random_count(s, a, "WITHVALUES")?;
    let Some(hash) = hash_read(s, &key)? else {
        return Ok(Reply::Array(Vec::new()));
    };
    let picks = with_rng(|r| pick_positions(r, hash.len(), count));
    let positions = hash.by_position();
    let pairs = picks.iter().map(|&i| positions.get(i));
    Ok(match with_values {
        false => {
            let mut out = Bulks::with_capacity(Aggregate::Array, 16 * picks.len());
            pairs.for_each(|(f, _)| out.push(f));
            out.into()
        }
        true => Reply::Pairs(
            pairs
                .map(|(f, v)| (Reply::bulk(f), Reply::bulk(v)))
                .collect(),
        ),
    })
}

/// HSCAN: a listpack answers everything with cursor 0; a table walks its
/// buckets in Redis's reverse-binary order from the cursor (see
/// [`Hash::scan`]), so every field present for the whole scan comes back at
/// least once.
fn hscan(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let cursor = parse_cursor(&a.next()?).ok_or(OpError::InvalidCursor)?;
    let Some(hash) = hash_read(s, &key)? else {
        return Ok(scan_reply(0, Bulks::with_capacity(Aggregate::Array, 0)));
    };
    let options = scan_options(a, false)?;
    let mut out = Bulks::with_capacity(Aggregate::Array, 0);
    let count = usize::try_from(options.count).unwrap_or(usize::MAX);
    let next = hash.scan(cursor, count, &mut |f, v| {
        if options.pattern.as_ref().is_none_or(|p| glob_match(p, f)) {
            out.push(f);
            out.push(v);
        }
    });
    Ok(scan_reply(next, out))
}
