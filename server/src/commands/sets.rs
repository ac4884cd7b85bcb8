//! Sets: SADD, SREM, SISMEMBER, SMISMEMBER, SMEMBERS, SCARD, SPOP,
//! SRANDMEMBER, SSCAN, SMOVE, SINTER, SUNION, SDIFF, SINTERCARD,
//! SINTERSTORE, SUNIONSTORE, SDIFFSTORE (the structure is
//! [`crate::collections::set`]).
//!
//! Semantics, the order in which arguments and keys are checked, error texts
//! and reply shapes follow Redis 7.0's `t_set.c`: SMEMBERS, SINTER, SUNION,
//! SDIFF and SPOP with a count answer RESP3 sets (`~`), SRANDMEMBER with a
//! count an array. Effects: SADD and SREM replay as themselves with the
//! members they changed; SPOP as the SREM of the members it took, or as
//! `DEL` when it took them all (as Redis propagates it); SMOVE as the SREM
//! and the SADD; the STORE commands as the `DEL` of the destination (when
//! it existed) and the SADDs of the result. A set emptied is removed. The
//! commands over several keys take keys of one shard (`CROSSSLOT`, naming
//! the hash-tag fix, otherwise), as LMOVE does. Random picks come from a
//! per-thread generator.

use bytes::Bytes;
use leasehold_protocol::{Aggregate, Args, Bulks, Reply};

use super::collection::{
    emit, lookup, or_create, parse_cursor, pick_positions, scan_reply, with_rng, MIN_ELEMENT_BYTES,
};
use super::flags::{DENYOOM, FAST, MOVABLE_KEYS, READONLY, WRITE};
use super::keys::scan_options;
use super::{cmd, CommandSpec, Exec, KEY1, NO_KEYS};
use crate::collections::set::Set;
use crate::collections::REBUILD_CHUNK;
use crate::error::OpError;
use crate::glob::glob_match;
use crate::shard::Shard;
use crate::store::Value;

/// SMOVE's keys: the source and the destination.
const KEY1_2: (i32, i32, i32) = (1, 2, 1);
/// Every argument from the first is a key (SINTER, SINTERSTORE...).
const ALL_KEYS: (i32, i32, i32) = (1, -1, 1);

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("sadd", -3, WRITE | DENYOOM | FAST, KEY1, Exec::Key(sadd), "Adds one or more members to a set. Creates the key if it doesn't exist."),
    cmd("srem", -3, WRITE | FAST, KEY1, Exec::Key(srem), "Removes one or more members from a set. Deletes the set if the last member was removed."),
    cmd("sismember", 3, READONLY | FAST, KEY1, Exec::Key(sismember), "Determines whether a member belongs to a set."),
    cmd("smismember", -3, READONLY | FAST, KEY1, Exec::Key(smismember), "Determines whether multiple members belong to a set."),
    cmd("smembers", 2, READONLY, KEY1, Exec::Key(smembers), "Returns all members of a set."),
    cmd("scard", 2, READONLY | FAST, KEY1, Exec::Key(scard), "Returns the number of members in a set."),
    cmd("spop", -2, WRITE | FAST, KEY1, Exec::Key(spop), "Returns one or more random members from a set after removing them. Deletes the set if the last member was popped."),
    cmd("srandmember", -2, READONLY, KEY1, Exec::Key(srandmember), "Get one or multiple random members from a set"),
    cmd("sscan", -3, READONLY, KEY1, Exec::Key(sscan), "Iterates over members of a set."),
    cmd("smove", 4, WRITE | FAST, KEY1_2, Exec::Key(smove), "Moves a member from one set to another."),
    cmd("sinter", -2, READONLY, ALL_KEYS, Exec::Key(sinter), "Returns the intersect of multiple sets."),
    cmd("sunion", -2, READONLY, ALL_KEYS, Exec::Key(sunion), "Returns the union of multiple sets."),
    cmd("sdiff", -2, READONLY, ALL_KEYS, Exec::Key(sdiff), "Returns the difference of multiple sets."),
    cmd("sintercard", -3, READONLY | MOVABLE_KEYS, NO_KEYS, Exec::Key(sintercard), "Returns the number of members of the intersect of multiple sets."),
    cmd("sinterstore", -3, WRITE | DENYOOM, ALL_KEYS, Exec::Key(sinterstore), "Stores the intersect of multiple sets in a key."),
    cmd("sunionstore", -3, WRITE | DENYOOM, ALL_KEYS, Exec::Key(sunionstore), "Stores the union of multiple sets in a key."),
    cmd("sdiffstore", -3, WRITE | DENYOOM, ALL_KEYS, Exec::Key(sdiffstore), "Stores the difference of multiple sets in a key."),
];

fn as_set(v: &mut Value) -> Option<&mut Set> {
    match v {
        Value::Set(s) => Some(s),
        _ => None,
    }
}

/// The set at `key` for a write: `None` when absent, WRONGTYPE otherwise.
fn set_mut<'a>(s: &'a mut Shard, key: &[u8]) -> Result<Option<&'a mut Set>, OpError> {
    lookup(s, key, false, as_set)
}

/// [`set_mut`] for a read (a keyspace hit or miss counted).
fn set_read<'a>(s: &'a mut Shard, key: &[u8]) -> Result<Option<&'a mut Set>, OpError> {
    lookup(s, key, true, as_set)
}

/// The arguments left, as they are.
fn rest(a: &mut Args) -> Result<Vec<Bytes>, OpError> {
    let mut out = Vec::with_capacity(a.remaining());
    while a.remaining() > 0 {
        out.push(a.next()?);
    }
    Ok(out)
}

/// Emits `name key members...` in runs of at most [`REBUILD_CHUNK`]
/// members (nothing for none).
fn emit_members(s: &mut Shard, name: &[u8], key: &[u8], members: &[&[u8]]) {
    for chunk in members.chunks(REBUILD_CHUNK) {
        emit(s, name, key, chunk);
    }
}

/// A set's members as a reply of `kind`, in its order.
fn members_reply(set: Option<&Set>, kind: Aggregate) -> Reply {
    let Some(set) = set else {
        return Bulks::with_capacity(kind, 0).into();
    };
    let mut out = Bulks::with_capacity(kind, 16 * set.len());
    set.for_each(&mut |m| out.push(m));
    out.into()
}

fn sadd(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let members = rest(a)?;
    let limits = s.conf.set_limits;
    let set = or_create(s, &key, || Value::Set(Box::default()), as_set)?;
    let added: Vec<&[u8]> = members
        .iter()
        .map(|m| &m[..])
        .filter(|m| set.insert(m, &limits))
        .collect();
    emit_members(s, b"SADD", &key, &added);
    Ok(Reply::Int(added.len() as i64))
}

fn srem(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let members = rest(a)?;
    let Some(set) = set_mut(s, &key)? else {
        return Ok(Reply::Int(0));
    };
    let removed: Vec<&[u8]> = members
        .iter()
        .map(|m| &m[..])
        .filter(|m| set.remove(m))
        .collect();
    let emptied = set.is_empty();
    emit_members(s, b"SREM", &key, &removed);
    if emptied {
        s.store.remove_emptied(&key);
    }
    Ok(Reply::Int(removed.len() as i64))
}

fn sismember(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let (key, member) = (a.key()?, a.next()?);
    let found = set_read(s, &key)?.is_some_and(|set| set.contains(&member));
    Ok(Reply::Int(i64::from(found)))
}

fn smismember(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let members = rest(a)?;
    let set = set_read(s, &key)?;
    Ok(Reply::Array(
        members
            .iter()
            .map(|m| Reply::Int(i64::from(set.as_ref().is_some_and(|s| s.contains(m)))))
            .collect(),
    ))
}

fn smembers(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    Ok(members_reply(set_read(s, &key)?.as_deref(), Aggregate::Set))
}

fn scard(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    Ok(Reply::Int(
        set_read(s, &key)?.map_or(0, |set| set.len()) as i64
    ))
}

/// The members at `positions` of `set`, copied out.
fn members_at(set: &Set, positions: &[usize]) -> Vec<Bytes> {
    let by = set.by_position();
    let mut buf = itoa::Buffer::new();
    positions
        .iter()
        .map(|&i| Bytes::copy_from_slice(by.get(i, &mut buf)))
        .collect()
}

/// SPOP: without a count, one random member (nil for a missing key),
/// replayed as its SREM; with one (`0..`), that many distinct members as a
/// set reply, replayed as their SREM, or the whole set, replayed as `DEL`.
fn spop(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let count = match a.remaining() {
        0 => None,
        1 => Some(
            a.i64()
                .ok()
                .filter(|&n| n >= 0)
                .ok_or(OpError::NotPositive)?,
        ),
        _ => return Err(OpError::Syntax),
    };
    let Some(set) = set_mut(s, &key)? else {
        return Ok(match count {
            None => Reply::Nil,
            Some(_) => Bulks::with_capacity(Aggregate::Set, 0).into(),
        });
    };
    let len = set.len();
    let popped = match count {
        Some(0) => return Ok(Bulks::with_capacity(Aggregate::Set, 0).into()),
        Some(n) if n as u64 >= len as u64 => {
            let reply = members_reply(Some(set), Aggregate::Set);
            s.store.remove(&key, s.now.unix_ms);
            return Ok(reply);
        }
        Some(n) => {
            let picks = with_rng(|r| pick_positions(r, len, n));
            members_at(set, &picks)
        }
        None => {
            let i = with_rng(|r| r.below(len));
            members_at(set, &[i])
        }
    };
    for m in &popped {
        set.remove(m);
    }
    let emptied = set.is_empty();
    let args: Vec<&[u8]> = popped.iter().map(|m| &m[..]).collect();
    emit_members(s, b"SREM", &key, &args);
    if emptied {
        s.store.remove_emptied(&key);
    }
    Ok(match count {
        None => Reply::Bulk(popped.into_iter().next().expect("one pick")),
        Some(_) => {
            let mut out = Bulks::with_capacity(Aggregate::Set, 16 * args.len());
            args.iter().for_each(|m| out.push(m));
            out.into()
        }
    })
}

/// SRANDMEMBER: without a count, one random member (nil for a missing
/// key); with a positive one, that many distinct members (all of them, in
/// the set's order, when it reaches the size); with a negative one,
/// `-count` picks that may repeat. An array either way.
fn srandmember(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let count = match a.remaining() {
        0 => None,
        1 => Some(a.i64()?),
        _ => return Err(OpError::Syntax),
    };
    let Some(count) = count else {
        let Some(set) = set_read(s, &key)? else {
            return Ok(Reply::Nil);
        };
        let i = with_rng(|r| r.below(set.len()));
        return Ok(Reply::Bulk(members_at(set, &[i]).swap_remove(0)));
    };
    if count == i64::MIN {
        return Err(OpError::OutOfRangeBetween(-i64::MAX, i64::MAX));
    }
    let limit = s.conf.proto_max_bulk_len as u64;
    if count < 0 && count.unsigned_abs().saturating_mul(MIN_ELEMENT_BYTES) > limit {
        return Err(OpError::OutOfRange);
    }
    let Some(set) = set_read(s, &key)? else {
        return Ok(Reply::Array(Vec::new()));
    };
    let picks = with_rng(|r| pick_positions(r, set.len(), count));
    let by = set.by_position();
    let mut buf = itoa::Buffer::new();
    let mut out = Bulks::with_capacity(Aggregate::Array, 16 * picks.len());
    for i in picks {
        out.push(by.get(i, &mut buf));
    }
    Ok(out.into())
}

/// SSCAN: an intset or a small set answers everything with cursor 0; a
/// table walks its buckets in Redis's reverse-binary order from the cursor
/// (see [`Set::scan`]), so every member present for the whole scan comes
/// back at least once.
fn sscan(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let cursor = parse_cursor(&a.next()?).ok_or(OpError::InvalidCursor)?;
    let Some(set) = set_read(s, &key)? else {
        return Ok(scan_reply(0, Bulks::with_capacity(Aggregate::Array, 0)));
    };
    let options = scan_options(a, false)?;
    let mut out = Bulks::with_capacity(Aggregate::Array, 0);
    let count = usize::try_from(options.count).unwrap_or(usize::MAX);
    let next = set.scan(cursor, count, &mut |m| {
        if options.pattern.as_ref().is_none_or(|p| glob_match(p, m)) {
            out.push(m);
        }
    });
    Ok(scan_reply(next, out))
}

/// SMOVE: 0 when the source is missing (whatever the destination holds),
/// WRONGTYPE when either key holds another type, then whether the member
/// was in the source (which alone changes nothing when both keys are one).
fn smove(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let (src, dst, member) = (a.key()?, a.key()?, a.next()?);
    if set_mut(s, &src)?.is_none() {
        return Ok(Reply::Int(0));
    }
    set_mut(s, &dst)?;
    let source = set_mut(s, &src)?.expect("looked up above");
    if src == dst {
        return Ok(Reply::Int(i64::from(source.contains(&member))));
    }
    if !source.remove(&member) {
        return Ok(Reply::Int(0));
    }
    let emptied = source.is_empty();
    emit(s, b"SREM", &src, &[&member]);
    if emptied {
        s.store.remove_emptied(&src);
    }
    let limits = s.conf.set_limits;
    let target = or_create(s, &dst, || Value::Set(Box::default()), as_set)?;
    if target.insert(&member, &limits) {
        emit(s, b"SADD", &dst, &[&member]);
    }
    Ok(Reply::Int(1))
}

/// The operations over several sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Inter,
    Union,
    Diff,
}

/// The result of `op` over the sets at `keys` (a missing key is an empty
/// set), as a new set (its encoding chosen afresh, as Redis builds it).
/// Every key is looked up, and its type checked, before any work.
fn combine(s: &mut Shard, keys: &[Bytes], op: Op) -> Result<Set, OpError> {
    let mut sizes = Vec::with_capacity(keys.len());
    for k in keys {
        sizes.push(set_read(s, k)?.map(|set| set.len()));
    }
    let limits = s.conf.set_limits;
    let mut out = Set::default();
    match op {
        Op::Union => {
            for (k, size) in keys.iter().zip(&sizes) {
                if size.is_some() {
                    let set = set_mut(s, k)?.expect("looked up above");
                    set.for_each(&mut |m| {
                        out.insert(m, &limits);
                    });
                }
            }
        }
        Op::Inter | Op::Diff => {
            // The intersection walks the smallest set; the difference the
            // first.
            let first = match op {
                Op::Inter if sizes.iter().any(Option::is_none) => return Ok(out),
                Op::Inter => (0..keys.len()).min_by_key(|&i| sizes[i]).unwrap_or(0),
                _ if sizes[0].is_none() => return Ok(out),
                _ => 0,
            };
            let mut members = set_mut(s, &keys[first])?
                .expect("looked up above")
                .members();
            for (i, k) in keys.iter().enumerate() {
                if i == first || sizes[i].is_none() || members.is_empty() {
                    continue;
                }
                let other = set_mut(s, k)?.expect("looked up above");
                members.retain(|m| other.contains(m) == (op == Op::Inter));
            }
            for m in &members {
                out.insert(m, &limits);
            }
        }
    }
    Ok(out)
}

/// SINTER, SUNION and SDIFF: the result as a set reply.
fn combine_reply(s: &mut Shard, a: &mut Args, op: Op) -> Result<Reply, OpError> {
    let keys = rest(a)?;
    let result = combine(s, &keys, op)?;
    Ok(members_reply(Some(&result), Aggregate::Set))
}

fn sinter(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    combine_reply(s, a, Op::Inter)
}

fn sunion(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    combine_reply(s, a, Op::Union)
}

fn sdiff(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    combine_reply(s, a, Op::Diff)
}

/// SINTERSTORE, SUNIONSTORE and SDIFFSTORE: the result replaces the
/// destination (its TTL gone), or removes it when empty; its size.
fn combine_store(s: &mut Shard, a: &mut Args, op: Op) -> Result<Reply, OpError> {
    let dst = a.key()?;
    let keys = rest(a)?;
    let result = combine(s, &keys, op)?;
    let n = result.len();
    let now = s.now.unix_ms;
    s.store.remove(&dst, now);
    if n > 0 {
        s.store.set(&dst, Value::Set(Box::new(result)), None, now);
    }
    Ok(Reply::Int(n as i64))
}

fn sinterstore(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    combine_store(s, a, Op::Inter)
}

fn sunionstore(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    combine_store(s, a, Op::Union)
}

fn sdiffstore(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    combine_store(s, a, Op::Diff)
}

/// SINTERCARD numkeys key [key ...] [LIMIT limit]: the intersection's size,
/// capped at `limit` when above 0.
fn sintercard(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let numkeys = a
        .i64()
        .ok()
        .filter(|&n| n > 0)
        .ok_or(OpError::NumKeysNotPositive)?;
    if numkeys as u64 > a.remaining() as u64 {
        return Err(OpError::TooManyKeys);
    }
    let mut keys = Vec::with_capacity(numkeys as usize);
    for _ in 0..numkeys {
        keys.push(a.key()?);
    }
    let mut limit = 0;
    while a.remaining() > 0 {
        if a.remaining() >= 2 && a.flag("LIMIT") {
            limit = a
                .i64()
                .ok()
                .filter(|&n| n >= 0)
                .ok_or(OpError::CantBeNegative("LIMIT"))?;
        } else {
            return Err(OpError::Syntax);
        }
    }
    let n = combine(s, &keys, Op::Inter)?.len() as i64;
    Ok(Reply::Int(if limit > 0 { n.min(limit) } else { n }))
}
