//! Lists: LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP, LRANGE, LTRIM, LINDEX,
//! LLEN, LREM, LSET, LINSERT, LPOS, LMOVE, RPOPLPUSH (the structure is
//! [`crate::collections::list`]).
//!
//! Semantics, the order in which arguments and keys are checked, error texts
//! and reply shapes follow Redis 7.0's `t_list.c`. A write that changes
//! the list emits the command that replays it (LMOVE between two keys as
//! the pop and the push, so that both keys' watchers see it); one that
//! changes nothing emits nothing, and a list emptied is removed. LMOVE and
//! RPOPLPUSH take keys of one shard (`CROSSSLOT`, naming the hash-tag fix,
//! otherwise). The blocking commands (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH,
//! BLMPOP) and LMPOP are not implemented.

use bytes::Bytes;
use leasehold_protocol::{Aggregate, Args, Bulks, Reply};

use super::collection::{emit, lookup, or_create};
use super::flags::{DENYOOM, FAST, READONLY, WRITE};
use super::{cmd, CommandSpec, Exec, KEY1};
use crate::collections::list::{End, List};
use crate::error::OpError;
use crate::shard::Shard;
use crate::store::Value;

/// LMOVE's and RPOPLPUSH's keys: the source and the destination.
const KEY1_2: (i32, i32, i32) = (1, 2, 1);

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("lpush", -3, WRITE | DENYOOM | FAST, KEY1, Exec::Key(lpush), "Prepends one or more elements to a list. Creates the key if it doesn't exist."),
    cmd("rpush", -3, WRITE | DENYOOM | FAST, KEY1, Exec::Key(rpush), "Appends one or more elements to a list. Creates the key if it doesn't exist."),
    cmd("lpushx", -3, WRITE | DENYOOM | FAST, KEY1, Exec::Key(lpushx), "Prepends one or more elements to a list only when the list exists."),
    cmd("rpushx", -3, WRITE | DENYOOM | FAST, KEY1, Exec::Key(rpushx), "Appends an element to a list only when the list exists."),
    cmd("lpop", -2, WRITE | FAST, KEY1, Exec::Key(lpop), "Returns the first elements in a list after removing it. Deletes the list if the last element was popped."),
    cmd("rpop", -2, WRITE | FAST, KEY1, Exec::Key(rpop), "Returns and removes the last elements of a list. Deletes the list if the last element was popped."),
    cmd("lrange", 4, READONLY, KEY1, Exec::Key(lrange), "Returns a range of elements from a list."),
    cmd("ltrim", 4, WRITE, KEY1, Exec::Key(ltrim), "Removes elements from both ends a list. Deletes the list if all elements were trimmed."),
    cmd("lindex", 3, READONLY, KEY1, Exec::Key(lindex), "Returns an element from a list by its index."),
    cmd("llen", 2, READONLY | FAST, KEY1, Exec::Key(llen), "Returns the length of a list."),
    cmd("lrem", 4, WRITE, KEY1, Exec::Key(lrem), "Removes elements from a list. Deletes the list if the last element was removed."),
    cmd("lset", 4, WRITE | DENYOOM, KEY1, Exec::Key(lset), "Sets the value of an element in a list by its index."),
    cmd("linsert", 5, WRITE | DENYOOM, KEY1, Exec::Key(linsert), "Inserts an element before or after another element in a list."),
    cmd("lpos", -3, READONLY, KEY1, Exec::Key(lpos), "Returns the index of matching elements in a list."),
    cmd("lmove", 5, WRITE | DENYOOM, KEY1_2, Exec::Key(lmove), "Returns an element after popping it from one list and pushing it to another. Deletes the list if the last element was moved."),
    cmd("rpoplpush", 3, WRITE | DENYOOM, KEY1_2, Exec::Key(rpoplpush), "Returns the last element of a list after removing and pushing it to another list. Deletes the list if the last element was popped."),
];

fn as_list(v: &mut Value) -> Option<&mut List> {
    match v {
        Value::List(l) => Some(l),
        _ => None,
    }
}

/// The list at `key` for a write: `None` when absent, WRONGTYPE for another
/// type.
fn list_mut<'a>(s: &'a mut Shard, key: &[u8]) -> Result<Option<&'a mut List>, OpError> {
    lookup(s, key, false, as_list)
}

/// [`list_mut`] for a read (a keyspace hit or miss counted).
fn list_read<'a>(s: &'a mut Shard, key: &[u8]) -> Result<Option<&'a mut List>, OpError> {
    lookup(s, key, true, as_list)
}

/// The list at `key`, created empty (with the configured node fill) when
/// absent; WRONGTYPE for another type.
fn list_or_create<'a>(s: &'a mut Shard, key: &[u8]) -> Result<&'a mut List, OpError> {
    let fill = s.conf.list_fill;
    or_create(s, key, || Value::List(Box::new(List::new(fill))), as_list)
}

/// Removes `key` when the command just emptied its list (`empty`).
fn remove_if_empty(s: &mut Shard, key: &[u8], empty: bool) {
    if empty {
        s.store.remove_emptied(key);
    }
}

fn push_name(end: End) -> &'static [u8] {
    match end {
        End::Left => b"LPUSH",
        End::Right => b"RPUSH",
    }
}

fn pop_name(end: End) -> &'static [u8] {
    match end {
        End::Left => b"LPOP",
        End::Right => b"RPOP",
    }
}

/// LPUSH, RPUSH, LPUSHX (`only_existing`), RPUSHX: the new length.
fn push(s: &mut Shard, a: &mut Args, end: End, only_existing: bool) -> Result<Reply, OpError> {
    let key = a.key()?;
    let mut elements = Vec::with_capacity(a.remaining());
    while a.remaining() > 0 {
        elements.push(a.next()?);
    }
    let list = match only_existing {
        false => list_or_create(s, &key)?,
        true => match list_mut(s, &key)? {
            Some(l) => l,
            None => return Ok(Reply::Int(0)),
        },
    };
    for e in &elements {
        list.push(end, e);
    }
    let len = list.len();
    let args: Vec<&[u8]> = elements.iter().map(|e| &e[..]).collect();
    emit(s, push_name(end), &key, &args);
    Ok(Reply::Int(len as i64))
}

fn lpush(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    push(s, a, End::Left, false)
}

fn rpush(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    push(s, a, End::Right, false)
}

fn lpushx(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    push(s, a, End::Left, true)
}

fn rpushx(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    push(s, a, End::Right, true)
}

/// An array of the elements `start..=stop` of `l`, reversed with `rev`,
/// encoded as they are read.
fn range_reply(l: &List, start: usize, stop: usize, rev: bool) -> Reply {
    let it = l.range(start, stop);
    let mut out = Bulks::with_capacity(Aggregate::Array, 16 * it.len());
    match rev {
        false => it.for_each(|e| out.push(e)),
        true => it.rev().for_each(|e| out.push(e)),
    }
    out.into()
}

/// LPOP and RPOP: one element (bulk or nil) without a count, an array (or
/// the null array) with one.
fn pop(s: &mut Shard, a: &mut Args, end: End, name: &'static str) -> Result<Reply, OpError> {
    let key = a.key()?;
    let count = match a.remaining() {
        0 => None,
        1 => Some(match a.i64() {
            Ok(n) if n >= 0 => n as u64,
            _ => return Err(OpError::NotPositive),
        }),
        _ => return Err(OpError::Arity(name)),
    };
    let Some(list) = list_mut(s, &key)? else {
        return Ok(if count.is_some() {
            Reply::NilArray
        } else {
            Reply::Nil
        });
    };
    let reply = match count {
        Some(0) => return Ok(Reply::Array(Vec::new())),
        None => Reply::Bulk(list.pop(end).expect("a stored list is never empty")),
        Some(n) => {
            let n = n.min(list.len() as u64) as usize;
            let reply = match end {
                End::Left => range_reply(list, 0, n - 1, false),
                End::Right => range_reply(list, list.len() - n, list.len() - 1, true),
            };
            list.trim(end, n);
            reply
        }
    };
    let empty = list.is_empty();
    let n = count.map(|c| c.to_string());
    let args: Vec<&[u8]> = n.iter().map(|c| c.as_bytes()).collect();
    emit(s, pop_name(end), &key, &args);
    remove_if_empty(s, &key, empty);
    Ok(reply)
}

fn lpop(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    pop(s, a, End::Left, "lpop")
}

fn rpop(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    pop(s, a, End::Right, "rpop")
}

/// Redis's range rule for `start`/`stop` on a list of `len`: negative
/// indexes count from the end, the range is clamped, and `None` means empty.
fn clamp_range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 { len + stop } else { stop };
    if start > stop || start >= len {
        return None;
    }
    Some((start as usize, stop.min(len - 1) as usize))
}

fn lrange(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let (start, stop) = (a.i64()?, a.i64()?);
    let Some(list) = list_read(s, &key)? else {
        return Ok(Reply::Array(Vec::new()));
    };
    Ok(match clamp_range(start, stop, list.len()) {
        None => Reply::Array(Vec::new()),
        Some((from, to)) => range_reply(list, from, to, false),
    })
}

fn ltrim(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let (start, stop) = (a.i64()?, a.i64()?);
    let Some(list) = list_mut(s, &key)? else {
        return Ok(Reply::ok());
    };
    let len = list.len();
    let (front, back) = match clamp_range(start, stop, len) {
        None => (len, 0),
        Some((from, to)) => (from, len - 1 - to),
    };
    if front + back > 0 {
        list.trim(End::Left, front);
        list.trim(End::Right, back);
        let empty = list.is_empty();
        let (start, stop) = (start.to_string(), stop.to_string());
        emit(s, b"LTRIM", &key, &[start.as_bytes(), stop.as_bytes()]);
        remove_if_empty(s, &key, empty);
    }
    Ok(Reply::ok())
}

/// An index counted from the end when negative, if it falls in `0..len`.
fn index_in(index: i64, len: usize) -> Option<usize> {
    let i = if index < 0 { len as i64 + index } else { index };
    (0..len as i64).contains(&i).then_some(i as usize)
}

fn lindex(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    // As Redis: the key first, so a missing key answers nil whatever the index.
    let Some(list) = list_read(s, &key)? else {
        return Ok(Reply::Nil);
    };
    let index = a.i64()?;
    Ok(
        match index_in(index, list.len()).and_then(|i| list.get(i)) {
            Some(e) => Reply::Bulk(Bytes::copy_from_slice(e)),
            None => Reply::Nil,
        },
    )
}

fn llen(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    Ok(Reply::Int(list_read(s, &key)?.map_or(0, |l| l.len()) as i64))
}

fn lrem(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let count = a.i64()?;
    let element = a.next()?;
    let Some(list) = list_mut(s, &key)? else {
        return Ok(Reply::Int(0));
    };
    let removed = list.remove_equal(&element, count);
    let empty = list.is_empty();
    if removed > 0 {
        let count = count.to_string();
        emit(s, b"LREM", &key, &[count.as_bytes(), &element]);
        remove_if_empty(s, &key, empty);
    }
    Ok(Reply::Int(removed as i64))
}

fn lset(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let Some(list) = list_mut(s, &key)? else {
        return Err(OpError::NoSuchKey);
    };
    let index = a.i64()?;
    let element = a.next()?;
    let i = index_in(index, list.len()).ok_or(OpError::IndexOutOfRange)?;
    list.set(i, &element);
    let i = i.to_string();
    emit(s, b"LSET", &key, &[i.as_bytes(), &element]);
    Ok(Reply::ok())
}

fn linsert(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let after = match a.word()?.as_str() {
        "AFTER" => true,
        "BEFORE" => false,
        _ => return Err(OpError::Syntax),
    };
    let (pivot, element) = (a.next()?, a.next()?);
    let Some(list) = list_mut(s, &key)? else {
        return Ok(Reply::Int(0));
    };
    if !list.insert_at_pivot(&pivot, after, &element) {
        return Ok(Reply::Int(-1));
    }
    let len = list.len();
    let place: &[u8] = if after { b"AFTER" } else { b"BEFORE" };
    emit(s, b"LINSERT", &key, &[place, &pivot, &element]);
    Ok(Reply::Int(len as i64))
}

/// LPOS's COUNT or MAXLEN: a non-negative integer, or `<what> can't be
/// negative` (also for a non-integer, as Redis words it).
fn non_negative(a: &mut Args, what: &'static str) -> Result<i64, OpError> {
    match a.i64() {
        Ok(n) if n >= 0 => Ok(n),
        _ => Err(OpError::CantBeNegative(what)),
    }
}

fn lpos(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let element = a.next()?;
    let (mut rank, mut count, mut maxlen) = (1i64, None, 0i64);
    while a.remaining() > 0 {
        let option = a.word()?;
        if a.remaining() == 0 {
            return Err(OpError::Syntax);
        }
        match option.as_str() {
            "RANK" => {
                rank = a.i64()?;
                if rank == 0 {
                    return Err(OpError::RankZero);
                }
            }
            "COUNT" => count = Some(non_negative(a, "COUNT")?),
            "MAXLEN" => maxlen = non_negative(a, "MAXLEN")?,
            _ => return Err(OpError::Syntax),
        }
    }
    let Some(list) = list_read(s, &key)? else {
        return Ok(match count {
            Some(_) => Reply::Array(Vec::new()),
            None => Reply::Nil,
        });
    };
    let len = list.len();
    let found = if rank > 0 {
        positions(list.iter().enumerate(), &element, rank, count, maxlen)
    } else {
        let it = list.iter().rev().enumerate().map(|(k, e)| (len - 1 - k, e));
        // Redis negates the rank as a C long: i64::MIN stays itself.
        positions(it, &element, rank.wrapping_neg(), count, maxlen)
    };
    Ok(match count {
        Some(_) => Reply::Array(found.into_iter().map(|i| Reply::Int(i as i64)).collect()),
        None => found.first().map_or(Reply::Nil, |&i| Reply::Int(i as i64)),
    })
}

/// The indexes LPOS answers, walking `elements` (index, element) in its
/// direction: matches from the `rank`-th on, at most `count` of them (all for
/// 0; one without COUNT), among the first `maxlen` elements (all for 0).
/// The arithmetic wraps as Redis's C longs do for a rank of `i64::MIN`.
fn positions<'a>(
    elements: impl Iterator<Item = (usize, &'a [u8])>,
    element: &[u8],
    rank: i64,
    count: Option<i64>,
    maxlen: i64,
) -> Vec<usize> {
    let mut out = Vec::new();
    let mut matches = 0i64;
    for (scanned, (index, e)) in elements.enumerate() {
        if maxlen != 0 && scanned as i64 >= maxlen {
            break;
        }
        if e != element {
            continue;
        }
        matches += 1;
        if matches >= rank {
            out.push(index);
            match count {
                None => break,
                Some(c) if c != 0 && matches.wrapping_sub(rank).wrapping_add(1) >= c => break,
                Some(_) => {}
            }
        }
    }
    out
}

fn end_of(word: &str) -> Result<End, OpError> {
    match word {
        "LEFT" => Ok(End::Left),
        "RIGHT" => Ok(End::Right),
        _ => Err(OpError::Syntax),
    }
}

fn lmove(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let (src, dst) = (a.key()?, a.key()?);
    let from = end_of(&a.word()?)?;
    let to = end_of(&a.word()?)?;
    move_element(s, &src, &dst, from, to)
}

fn rpoplpush(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let (src, dst) = (a.key()?, a.key()?);
    move_element(s, &src, &dst, End::Right, End::Left)
}

/// LMOVE: pops at `from` of `src` and pushes at `to` of `dst` (both of this
/// shard: the dispatcher refuses keys on two shards). The source is looked
/// up first (nil when missing), then the destination's type, before
/// anything changes.
fn move_element(
    s: &mut Shard,
    src: &[u8],
    dst: &[u8],
    from: End,
    to: End,
) -> Result<Reply, OpError> {
    if list_mut(s, src)?.is_none() {
        return Ok(Reply::Nil);
    }
    if src != dst {
        list_mut(s, dst)?;
    }
    let source = list_mut(s, src)?.expect("looked up above");
    let element = source.pop(from).expect("a stored list is never empty");
    let emptied = source.is_empty();
    list_or_create(s, dst)?.push(to, &element);
    if src == dst {
        // One command: a pop and a push replayed apart would empty and
        // recreate a one-element list, and lose its TTL.
        let names = |e: End| {
            if e == End::Left {
                &b"LEFT"[..]
            } else {
                &b"RIGHT"[..]
            }
        };
        emit(s, b"LMOVE", src, &[dst, names(from), names(to)]);
    } else {
        emit(s, pop_name(from), src, &[]);
        emit(s, push_name(to), dst, &[&element]);
        remove_if_empty(s, src, emptied);
    }
    Ok(Reply::Bulk(element))
}
