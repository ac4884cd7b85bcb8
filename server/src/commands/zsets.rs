//! Sorted sets: ZADD, ZINCRBY, ZREM, ZSCORE, ZMSCORE, ZCARD, ZCOUNT,
//! ZLEXCOUNT, ZRANGE, ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX,
//! ZREVRANGEBYLEX, ZREVRANGE, ZRANK, ZREVRANK, ZREMRANGEBYSCORE,
//! ZREMRANGEBYRANK, ZREMRANGEBYLEX, ZPOPMIN, ZPOPMAX, ZRANDMEMBER, ZSCAN
//! (the structure is [`crate::collections::zset`]).
//!
//! Semantics, the order in which arguments and keys are checked, error texts
//! and reply shapes follow Redis 7.0's `t_zset.c`. Scores reply as doubles
//! (RESP3 `,`, RESP2 `%.17g` bulks); a range WITHSCORES is member, score
//! pairs (RESP3 an array of two-element arrays). ZADD, ZINCRBY replay as the
//! ZADD of the changed members with their resulting scores; ZREM and the
//! ZREMRANGEBY* commands as themselves; pops as the ZREM of what they
//! popped; a sorted set emptied is removed. ZRANDMEMBER only reads.

use bytes::Bytes;
use leasehold_protocol::reply::format_double;
use leasehold_protocol::{Aggregate, Args, Bulks, Reply};

use super::collection::{
    emit, lookup, or_create, parse_cursor, pick_positions, random_count, scan_reply, with_rng,
};
use super::flags::{DENYOOM, FAST, READONLY, WRITE};
use super::keys::scan_options;
use super::{cmd, CommandSpec, Exec, KEY1};
use crate::collections::zset::ZSet;
use crate::error::OpError;
use crate::glob::glob_match;
use crate::shard::Shard;
use crate::store::Value;

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("zadd", -4, WRITE | DENYOOM | FAST, KEY1, Exec::Key(zadd), "Adds one or more members to a sorted set, or updates their scores. Creates the key if it doesn't exist."),
    cmd("zincrby", 4, WRITE | DENYOOM | FAST, KEY1, Exec::Key(zincrby), "Increments the score of a member in a sorted set."),
    cmd("zrem", -3, WRITE | FAST, KEY1, Exec::Key(zrem), "Removes one or more members from a sorted set. Deletes the sorted set if all members were removed."),
    cmd("zscore", 3, READONLY | FAST, KEY1, Exec::Key(zscore), "Returns the score of a member in a sorted set."),
    cmd("zmscore", -3, READONLY | FAST, KEY1, Exec::Key(zmscore), "Returns the score of one or more members in a sorted set."),
    cmd("zcard", 2, READONLY | FAST, KEY1, Exec::Key(zcard), "Returns the number of members in a sorted set."),
    cmd("zcount", 4, READONLY | FAST, KEY1, Exec::Key(zcount), "Returns the count of members in a sorted set that have scores within a range."),
    cmd("zlexcount", 4, READONLY | FAST, KEY1, Exec::Key(zlexcount), "Returns the number of members in a sorted set within a lexicographical range."),
    cmd("zrange", -4, READONLY, KEY1, Exec::Key(zrange), "Returns members in a sorted set within a range of indexes."),
    cmd("zrangebyscore", -4, READONLY, KEY1, Exec::Key(zrangebyscore), "Returns members in a sorted set within a range of scores."),
    cmd("zrevrangebyscore", -4, READONLY, KEY1, Exec::Key(zrevrangebyscore), "Returns members in a sorted set within a range of scores in reverse order."),
    cmd("zrangebylex", -4, READONLY, KEY1, Exec::Key(zrangebylex), "Returns members in a sorted set within a lexicographical range."),
    cmd("zrevrangebylex", -4, READONLY, KEY1, Exec::Key(zrevrangebylex), "Returns members in a sorted set within a lexicographical range in reverse order."),
    cmd("zrevrange", -4, READONLY, KEY1, Exec::Key(zrevrange), "Returns members in a sorted set within a range of indexes in reverse order."),
    cmd("zrank", 3, READONLY | FAST, KEY1, Exec::Key(zrank), "Returns the index of a member in a sorted set ordered by ascending scores."),
    cmd("zrevrank", 3, READONLY | FAST, KEY1, Exec::Key(zrevrank), "Returns the index of a member in a sorted set ordered by descending scores."),
    cmd("zremrangebyscore", 4, WRITE, KEY1, Exec::Key(zremrangebyscore), "Removes members in a sorted set within a range of scores. Deletes the sorted set if all members were removed."),
    cmd("zremrangebyrank", 4, WRITE, KEY1, Exec::Key(zremrangebyrank), "Removes members in a sorted set within a range of indexes. Deletes the sorted set if all members were removed."),
    cmd("zremrangebylex", 4, WRITE, KEY1, Exec::Key(zremrangebylex), "Removes members in a sorted set within a lexicographical range. Deletes the sorted set if all members were removed."),
    cmd("zpopmin", -2, WRITE | FAST, KEY1, Exec::Key(zpopmin), "Returns the lowest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped."),
    cmd("zpopmax", -2, WRITE | FAST, KEY1, Exec::Key(zpopmax), "Returns the highest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped."),
    cmd("zrandmember", -2, READONLY, KEY1, Exec::Key(zrandmember), "Returns one or more random members from a sorted set."),
    cmd("zscan", -3, READONLY, KEY1, Exec::Key(zscan), "Iterates over members and scores of a sorted set."),
];

fn as_zset(v: &mut Value) -> Option<&mut ZSet> {
    match v {
        Value::ZSet(z) => Some(z),
        _ => None,
    }
}

/// The sorted set at `key` for a write: `None` when absent, WRONGTYPE
/// otherwise.
fn zset_mut<'a>(s: &'a mut Shard, key: &[u8]) -> Result<Option<&'a mut ZSet>, OpError> {
    lookup(s, key, false, as_zset)
}

/// [`zset_mut`] for a read (a keyspace hit or miss counted).
fn zset_read<'a>(s: &'a mut Shard, key: &[u8]) -> Result<Option<&'a mut ZSet>, OpError> {
    lookup(s, key, true, as_zset)
}

/// Reads a score as Redis's `getDoubleFromObject` does (`strtod`): no
/// leading space, the whole string, `inf`/`-inf`/`+inf` allowed, NaN and
/// out-of-range spellings (`1e400`, `1e-400`) refused.
fn parse_score(b: &[u8]) -> Option<f64> {
    let t = std::str::from_utf8(b).ok()?;
    if t.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let v: f64 = t.parse().ok()?;
    let lower = t.to_ascii_lowercase();
    if v.is_nan() || (v.is_infinite() && !lower.contains("inf")) {
        return None;
    }
    let mantissa = lower.split('e').next().unwrap_or("");
    if v == 0.0 && mantissa.bytes().any(|c| (b'1'..=b'9').contains(&c)) {
        return None;
    }
    Some(v)
}

/// The next argument as a score (`ERR value is not a valid float`).
fn next_score(a: &mut Args) -> Result<f64, OpError> {
    parse_score(&a.next()?).ok_or(OpError::NotFloat)
}

/// One end of a score range as Redis's `zslParseRange` reads it: a `(`
/// makes it exclusive; then `strtod`, leading space allowed, the empty
/// string 0, overflow infinite, NaN refused.
fn score_bound(b: &[u8]) -> Option<(f64, bool)> {
    let (ex, rest) = match b.first() {
        Some(b'(') => (true, &b[1..]),
        _ => (false, b),
    };
    if rest.is_empty() {
        return Some((0.0, ex));
    }
    let t = std::str::from_utf8(rest).ok()?;
    let t = t.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let v: f64 = t.parse().ok()?;
    (!v.is_nan()).then_some((v, ex))
}

/// A score range: the lower end, the upper end, each with exclusiveness.
#[derive(Clone, Copy)]
struct Scores {
    min: (f64, bool),
    max: (f64, bool),
}

impl Scores {
    fn parse(min: &[u8], max: &[u8]) -> Result<Scores, OpError> {
        match (score_bound(min), score_bound(max)) {
            (Some(min), Some(max)) => Ok(Scores { min, max }),
            _ => Err(OpError::MinMaxNotFloat),
        }
    }

    fn above_min(&self, s: f64) -> bool {
        if self.min.1 {
            s > self.min.0
        } else {
            s >= self.min.0
        }
    }

    fn below_max(&self, s: f64) -> bool {
        if self.max.1 {
            s < self.max.0
        } else {
            s <= self.max.0
        }
    }
}

/// One end of a lex range.
#[derive(Clone)]
enum Lex {
    /// `-`: before every member.
    Min,
    /// `+`: after every member.
    Max,
    /// `[m` (inclusive) or `(m` (exclusive).
    At(Bytes, bool),
}

fn lex_bound(b: &Bytes) -> Option<Lex> {
    match b.first()? {
        b'+' if b.len() == 1 => Some(Lex::Max),
        b'-' if b.len() == 1 => Some(Lex::Min),
        b'(' => Some(Lex::At(b.slice(1..), true)),
        b'[' => Some(Lex::At(b.slice(1..), false)),
        _ => None,
    }
}

/// A lex range (Redis's `zslParseLexRange`).
struct Lexes {
    min: Lex,
    max: Lex,
}

impl Lexes {
    fn parse(min: &Bytes, max: &Bytes) -> Result<Lexes, OpError> {
        match (lex_bound(min), lex_bound(max)) {
            (Some(min), Some(max)) => Ok(Lexes { min, max }),
            _ => Err(OpError::MinMaxNotLex),
        }
    }

    fn above_min(&self, m: &[u8]) -> bool {
        match &self.min {
            Lex::Min => true,
            Lex::Max => false,
            Lex::At(b, true) => m > &b[..],
            Lex::At(b, false) => m >= &b[..],
        }
    }

    fn below_max(&self, m: &[u8]) -> bool {
        match &self.max {
            Lex::Min => false,
            Lex::Max => true,
            Lex::At(b, true) => m < &b[..],
            Lex::At(b, false) => m <= &b[..],
        }
    }
}

/// The ranks `start..end` a score range covers.
fn score_span(z: &ZSet, r: &Scores) -> (usize, usize) {
    let start = z.first_where(|s, _| r.above_min(s));
    let end = z.end_where(|s, _| r.below_max(s));
    (start, end.max(start))
}

/// The ranks `start..end` a lex range covers.
fn lex_span(z: &ZSet, r: &Lexes) -> (usize, usize) {
    let start = z.first_where(|_, m| r.above_min(m));
    let end = z.end_where(|_, m| r.below_max(m));
    (start, end.max(start))
}

/// The ranks `start..end` of Redis's rank range `start stop` (negative
/// from the end, both inclusive) over `len` members.
fn rank_span(len: usize, start: i64, stop: i64) -> (usize, usize) {
    let n = len as i64;
    let mut start = if start < 0 { n + start } else { start };
    let mut stop = if stop < 0 { n + stop } else { stop };
    start = start.max(0);
    if start > stop || start >= n {
        return (0, 0);
    }
    stop = stop.min(n - 1);
    (start as usize, stop as usize + 1)
}

/// ZADD's options.
#[derive(Default)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

/// What one element of ZADD did.
enum Added {
    /// Nothing (NX, XX, GT or LT said no).
    Nop,
    /// Set to this score: whether it is new, whether the score changed.
    Set(f64, bool, bool),
}

/// Adds `member` with `score` (the increment under INCR) to `z` as Redis's
/// `zsetAdd` does.
fn add_one(
    z: &mut ZSet,
    member: &[u8],
    score: f64,
    f: &AddFlags,
    limits: &crate::collections::zset::Limits,
) -> Result<Added, OpError> {
    match z.score(member) {
        Some(cur) => {
            if f.nx {
                return Ok(Added::Nop);
            }
            let score = if f.incr { cur + score } else { score };
            if score.is_nan() {
                return Err(OpError::ScoreNan);
            }
            if (f.lt && score >= cur) || (f.gt && score <= cur) {
                return Ok(Added::Nop);
            }
            if score != cur {
                z.insert(member, score, limits);
                return Ok(Added::Set(score, false, true));
            }
            Ok(Added::Set(score, false, false))
        }
        None => {
            if f.xx {
                return Ok(Added::Nop);
            }
            z.insert(member, score, limits);
            Ok(Added::Set(score, true, false))
        }
    }
}

/// ZADD and ZINCRBY: applies `elements` (score, member) under `f`, emits
/// the ZADD of what changed, and answers as ZADD does.
fn add_generic(
    s: &mut Shard,
    key: &[u8],
    f: &AddFlags,
    elements: &[(f64, Bytes)],
) -> Result<Reply, OpError> {
    let limits = s.conf.zset_limits;
    let exists = zset_mut(s, key)?.is_some();
    let (mut added, mut updated, mut last) = (0i64, 0i64, None);
    let mut effect: Vec<(String, Bytes)> = Vec::new();
    if exists || !f.xx {
        let z = or_create(s, key, || Value::ZSet(Box::default()), as_zset)?;
        for (score, member) in elements {
            match add_one(z, member, *score, f, &limits) {
                Err(e) => {
                    if z.is_empty() {
                        s.store.remove_emptied(key);
                    }
                    return Err(e);
                }
                Ok(Added::Nop) => {}
                Ok(Added::Set(score, new, changed)) => {
                    added += i64::from(new);
                    updated += i64::from(changed);
                    last = Some(score);
                    if new || changed {
                        effect.push((format_double(score), member.clone()));
                    }
                }
            }
        }
        if zset_mut(s, key)?.is_some_and(|z| z.is_empty()) {
            s.store.remove_emptied(key);
        }
    }
    if !effect.is_empty() {
        let args: Vec<&[u8]> = effect
            .iter()
            .flat_map(|(sc, m)| [sc.as_bytes(), &m[..]])
            .collect();
        emit(s, b"ZADD", key, &args);
    }
    Ok(if f.incr {
        last.map_or(Reply::Nil, Reply::Double)
    } else if f.ch {
        Reply::Int(added + updated)
    } else {
        Reply::Int(added)
    })
}

fn zadd(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let mut f = AddFlags::default();
    loop {
        if a.flag("NX") {
            f.nx = true;
        } else if a.flag("XX") {
            f.xx = true;
        } else if a.flag("CH") {
            f.ch = true;
        } else if a.flag("INCR") {
            f.incr = true;
        } else if a.flag("GT") {
            f.gt = true;
        } else if a.flag("LT") {
            f.lt = true;
        } else {
            break;
        }
    }
    let n = a.remaining();
    if n == 0 || n % 2 == 1 {
        return Err(OpError::Syntax);
    }
    if f.nx && f.xx {
        return Err(OpError::ZaddNxXx);
    }
    if (f.nx && (f.gt || f.lt)) || (f.gt && f.lt) {
        return Err(OpError::ZaddGtLtNx);
    }
    if f.incr && n > 2 {
        return Err(OpError::ZaddIncrPair);
    }
    let mut elements = Vec::with_capacity(n / 2);
    while a.remaining() > 0 {
        let score = next_score(a)?;
        elements.push((score, a.next()?));
    }
    add_generic(s, &key, &f, &elements)
}

fn zincrby(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let delta = next_score(a)?;
    let member = a.next()?;
    let f = AddFlags {
        incr: true,
        ..AddFlags::default()
    };
    add_generic(s, &key, &f, &[(delta, member)])
}

fn zrem(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let mut members = Vec::with_capacity(a.remaining());
    while a.remaining() > 0 {
        members.push(a.next()?);
    }
    let Some(z) = zset_mut(s, &key)? else {
        return Ok(Reply::Int(0));
    };
    let removed = members.iter().filter(|m| z.remove(m).is_some()).count();
    let emptied = z.is_empty();
    if removed > 0 {
        let args: Vec<&[u8]> = members.iter().map(|m| &m[..]).collect();
        emit(s, b"ZREM", &key, &args);
        if emptied {
            s.store.remove_emptied(&key);
        }
    }
    Ok(Reply::Int(removed as i64))
}

fn score_reply(v: Option<f64>) -> Reply {
    v.map_or(Reply::Nil, Reply::Double)
}

fn zscore(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let (key, member) = (a.key()?, a.next()?);
    Ok(score_reply(
        zset_read(s, &key)?.and_then(|z| z.score(&member)),
    ))
}

fn zmscore(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let z = zset_read(s, &key)?;
    let mut out = Vec::with_capacity(a.remaining());
    while a.remaining() > 0 {
        let member = a.next()?;
        out.push(score_reply(z.as_ref().and_then(|z| z.score(&member))));
    }
    Ok(Reply::Array(out))
}

fn zcard(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    Ok(Reply::Int(zset_read(s, &key)?.map_or(0, |z| z.len()) as i64))
}

fn zcount(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let r = Scores::parse(&a.next()?, &a.next()?)?;
    let n = zset_read(s, &key)?.map_or(0, |z| {
        let (start, end) = score_span(z, &r);
        end - start
    });
    Ok(Reply::Int(n as i64))
}

fn zlexcount(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let r = Lexes::parse(&a.next()?, &a.next()?)?;
    let n = zset_read(s, &key)?.map_or(0, |z| {
        let (start, end) = lex_span(z, &r);
        end - start
    });
    Ok(Reply::Int(n as i64))
}

/// What a range walks by.
#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    /// Not given yet (ZRANGE's options choose).
    Auto,
    Rank,
    Score,
    Lex,
}

/// A parsed range: ranks, scores or members.
enum Range {
    Rank(i64, i64),
    Score(Scores),
    Lex(Lexes),
}

impl Range {
    /// `lo` and `hi` read as `by` says (ranks for [`By::Auto`] too).
    fn parse(by: By, lo: &Bytes, hi: &Bytes) -> Result<Range, OpError> {
        let rank = |b: &Bytes| leasehold_protocol::int::parse_i64(b).ok_or(OpError::NotInteger);
        Ok(match by {
            By::Score => Range::Score(Scores::parse(lo, hi)?),
            By::Lex => Range::Lex(Lexes::parse(lo, hi)?),
            By::Auto | By::Rank => Range::Rank(rank(lo)?, rank(hi)?),
        })
    }
}

/// The ranks a range covers, the members in reply order with their scores.
fn collect(z: &ZSet, start: usize, end: usize, rev: bool, scores: bool) -> Reply {
    if scores {
        let mut pairs = Vec::with_capacity(end - start);
        z.range(start, end, rev, &mut |m, s| {
            pairs.push((Reply::bulk(m), Reply::Double(s)));
        });
        Reply::Pairs(pairs)
    } else {
        let mut out = Bulks::with_capacity(Aggregate::Array, 16 * (end - start));
        z.range(start, end, rev, &mut |m, _| out.push(m));
        out.into()
    }
}

/// Narrows ranks `start..end` by LIMIT `offset count` (a negative offset
/// leaves nothing, a negative count everything after the offset), from the
/// end when `rev`.
fn limit_span(start: usize, end: usize, rev: bool, offset: i64, count: i64) -> (usize, usize) {
    if offset < 0 {
        return (0, 0);
    }
    let len = end - start;
    let offset = (offset as u64).min(len as u64) as usize;
    let take = if count < 0 {
        len - offset
    } else {
        (count as u64).min((len - offset) as u64) as usize
    };
    if rev {
        (end - offset - take, end - offset)
    } else {
        (start + offset, start + offset + take)
    }
}

/// ZRANGE and its older forms (Redis's `zrangeGenericCommand`): `by` and
/// `rev` preset by the older ones, chosen by options for ZRANGE.
fn zrange_generic(
    s: &mut Shard,
    a: &mut Args,
    mut by: By,
    mut rev: Option<bool>,
) -> Result<Reply, OpError> {
    let key = a.key()?;
    let (mut lo, mut hi) = (a.next()?, a.next()?);
    let (mut withscores, mut offset, mut limit) = (false, 0i64, -1i64);
    while a.remaining() > 0 {
        let left = a.remaining() - 1;
        if a.flag("WITHSCORES") {
            withscores = true;
        } else if left >= 2 && a.flag("LIMIT") {
            offset = a.i64()?;
            limit = a.i64()?;
        } else if rev.is_none() && a.flag("REV") {
            rev = Some(true);
        } else if by == By::Auto && a.flag("BYLEX") {
            by = By::Lex;
        } else if by == By::Auto && a.flag("BYSCORE") {
            by = By::Score;
        } else {
            return Err(OpError::Syntax);
        }
    }
    let rev = rev.unwrap_or(false);
    if by == By::Auto {
        by = By::Rank;
    }
    if limit != -1 && by == By::Rank {
        return Err(OpError::LimitNeedsBy);
    }
    if withscores && by == By::Lex {
        return Err(OpError::WithscoresLex);
    }
    if rev && by != By::Rank {
        std::mem::swap(&mut lo, &mut hi);
    }
    let range = Range::parse(by, &lo, &hi)?;
    let Some(z) = zset_read(s, &key)? else {
        return Ok(Reply::Array(Vec::new()));
    };
    let (start, end) = match &range {
        Range::Rank(start, stop) => {
            let (a, b) = rank_span(z.len(), *start, *stop);
            if rev {
                (z.len() - b.max(a), z.len() - a)
            } else {
                (a, b)
            }
        }
        Range::Score(r) => {
            let (a, b) = score_span(z, r);
            limit_span(a, b, rev, offset, limit)
        }
        Range::Lex(r) => {
            let (a, b) = lex_span(z, r);
            limit_span(a, b, rev, offset, limit)
        }
    };
    let (start, end) = if start >= end { (0, 0) } else { (start, end) };
    Ok(collect(z, start, end, rev, withscores))
}

fn zrange(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    zrange_generic(s, a, By::Auto, None)
}

fn zrevrange(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    zrange_generic(s, a, By::Rank, Some(true))
}

fn zrangebyscore(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    zrange_generic(s, a, By::Score, Some(false))
}

fn zrevrangebyscore(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    zrange_generic(s, a, By::Score, Some(true))
}

fn zrangebylex(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    zrange_generic(s, a, By::Lex, Some(false))
}

fn zrevrangebylex(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    zrange_generic(s, a, By::Lex, Some(true))
}

fn rank_generic(s: &mut Shard, a: &mut Args, rev: bool) -> Result<Reply, OpError> {
    let (key, member) = (a.key()?, a.next()?);
    let Some(z) = zset_read(s, &key)? else {
        return Ok(Reply::Nil);
    };
    let len = z.len();
    Ok(z.rank(&member).map_or(Reply::Nil, |(r, _)| {
        Reply::Int(if rev { len - 1 - r } else { r } as i64)
    }))
}

fn zrank(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    rank_generic(s, a, false)
}

fn zrevrank(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    rank_generic(s, a, true)
}

/// ZREMRANGEBYRANK, ZREMRANGEBYSCORE and ZREMRANGEBYLEX: the range parsed
/// first, then the key; replays as itself.
fn zrem_generic(s: &mut Shard, a: &mut Args, by: By, name: &[u8]) -> Result<Reply, OpError> {
    let key = a.key()?;
    let (lo, hi) = (a.next()?, a.next()?);
    let range = Range::parse(by, &lo, &hi)?;
    let Some(z) = zset_mut(s, &key)? else {
        return Ok(Reply::Int(0));
    };
    let (start, end) = match &range {
        Range::Rank(start, stop) => rank_span(z.len(), *start, *stop),
        Range::Score(r) => score_span(z, r),
        Range::Lex(r) => lex_span(z, r),
    };
    if start >= end {
        return Ok(Reply::Int(0));
    }
    z.remove_range(start, end, &mut |_| {});
    let emptied = z.is_empty();
    emit(s, name, &key, &[&lo, &hi]);
    if emptied {
        s.store.remove_emptied(&key);
    }
    Ok(Reply::Int((end - start) as i64))
}

fn zremrangebyscore(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    zrem_generic(s, a, By::Score, b"ZREMRANGEBYSCORE")
}

fn zremrangebyrank(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    zrem_generic(s, a, By::Rank, b"ZREMRANGEBYRANK")
}

fn zremrangebylex(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    zrem_generic(s, a, By::Lex, b"ZREMRANGEBYLEX")
}

/// ZPOPMIN and ZPOPMAX: without a count a flat member, score array (empty
/// when there is nothing), with one a range of pairs; replays as ZREM.
fn pop_generic(s: &mut Shard, a: &mut Args, max: bool) -> Result<Reply, OpError> {
    let key = a.key()?;
    if a.remaining() > 1 {
        return Err(OpError::Syntax);
    }
    let counted = a.remaining() == 1;
    let count = if counted {
        let c = a.i64().map_err(|_| OpError::NotPositive)?;
        if c < 0 {
            return Err(OpError::NotPositive);
        }
        c as u64
    } else {
        1
    };
    let Some(z) = zset_mut(s, &key)? else {
        return Ok(Reply::Array(Vec::new()));
    };
    let n = count.min(z.len() as u64) as usize;
    let (start, end) = if max { (z.len() - n, z.len()) } else { (0, n) };
    let mut popped: Vec<(Bytes, f64)> = Vec::with_capacity(n);
    z.range(start, end, max, &mut |m, sc| {
        popped.push((Bytes::copy_from_slice(m), sc))
    });
    z.remove_range(start, end, &mut |_| {});
    let emptied = z.is_empty();
    if !popped.is_empty() {
        let args: Vec<&[u8]> = popped.iter().map(|(m, _)| &m[..]).collect();
        emit(s, b"ZREM", &key, &args);
        if emptied {
            s.store.remove_emptied(&key);
        }
    }
    Ok(if counted {
        Reply::Pairs(
            popped
                .into_iter()
                .map(|(m, sc)| (Reply::Bulk(m), Reply::Double(sc)))
                .collect(),
        )
    } else {
        Reply::Array(
            popped
                .into_iter()
                .flat_map(|(m, sc)| [Reply::Bulk(m), Reply::Double(sc)])
                .collect(),
        )
    })
}

fn zpopmin(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    pop_generic(s, a, false)
}

fn zpopmax(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    pop_generic(s, a, true)
}

fn zrandmember(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    if a.remaining() == 0 {
        let Some(z) = zset_read(s, &key)? else {
            return Ok(Reply::Nil);
        };
        let i = with_rng(|r| r.below(z.len()));
        return Ok(Reply::bulk(z.nth(i).0));
    }
    let (count, with_scores) = random_count(s, a, "WITHSCORES")?;
    let Some(z) = zset_read(s, &key)? else {
        return Ok(Reply::Array(Vec::new()));
    };
    let mut picks = with_rng(|r| pick_positions(r, z.len(), count));
    if count >= 0 && count as u64 >= z.len() as u64 {
        // The whole set, as Redis answers it: from the highest rank down.
        picks.reverse();
    }
    // One walk gathers every element when picks are many or the set small.
    let mut all = Vec::with_capacity(z.len());
    z.range(0, z.len(), false, &mut |m, sc| all.push((m.to_vec(), sc)));
    Ok(if with_scores {
        Reply::Pairs(
            picks
                .iter()
                .map(|&i| (Reply::bulk(&all[i].0), Reply::Double(all[i].1)))
                .collect(),
        )
    } else {
        let mut out = Bulks::with_capacity(Aggregate::Array, 16 * picks.len());
        picks.iter().for_each(|&i| out.push(&all[i].0));
        out.into()
    })
}

/// ZSCAN: a listpack answers everything with cursor 0; a skiplist walks its
/// table's buckets in Redis's reverse-binary order. Scores as `%.17g`.
fn zscan(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let cursor = parse_cursor(&a.next()?).ok_or(OpError::InvalidCursor)?;
    let Some(z) = zset_read(s, &key)? else {
        return Ok(scan_reply(0, Bulks::with_capacity(Aggregate::Array, 0)));
    };
    let options = scan_options(a, false)?;
    let mut out = Bulks::with_capacity(Aggregate::Array, 0);
    let count = usize::try_from(options.count).unwrap_or(usize::MAX);
    let next = z.scan(cursor, count, &mut |m, sc| {
        if options.pattern.as_ref().is_none_or(|p| glob_match(p, m)) {
            out.push(m);
            out.push(format_double(sc).as_bytes());
        }
    });
    Ok(scan_reply(next, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_read_as_strtod_reads_them() {
        for (text, want) in [
            ("1", Some(1.0)),
            ("-inf", Some(f64::NEG_INFINITY)),
            ("+inf", Some(f64::INFINITY)),
            ("1e3", Some(1000.0)),
            (".5", Some(0.5)),
            ("nan", None),
            (" 1", None),
            ("1 ", None),
            ("", None),
            ("1e400", None),
            ("1e-400", None),
            ("x", None),
        ] {
            assert_eq!(parse_score(text.as_bytes()), want, "{text:?}");
        }
        assert_eq!(score_bound(b"(1"), Some((1.0, true)));
        assert_eq!(score_bound(b""), Some((0.0, false)));
        assert_eq!(score_bound(b" 2"), Some((2.0, false)));
        assert_eq!(score_bound(b"(nan"), None);
    }

    #[test]
    fn rank_spans_clamp_as_redis_does() {
        assert_eq!(rank_span(5, 0, -1), (0, 5));
        assert_eq!(rank_span(5, -2, 100), (3, 5));
        assert_eq!(rank_span(5, 3, 1), (0, 0));
        assert_eq!(rank_span(5, 5, 9), (0, 0));
        assert_eq!(rank_span(5, -100, 0), (0, 1));
        assert_eq!(limit_span(2, 10, false, 1, 3), (3, 6));
        assert_eq!(limit_span(2, 10, true, 1, 3), (6, 9));
        assert_eq!(limit_span(2, 10, false, 0, -1), (2, 10));
        assert_eq!(limit_span(2, 10, false, -1, 5), (0, 0));
        assert_eq!(limit_span(2, 10, false, 20, 5), (10, 10));
    }
}
