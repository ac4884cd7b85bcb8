//! A Redis sorted set: distinct members, each with a float score, ordered
//! by (score, member bytes).
//!
//! Two encodings, as Redis 7.0's: a small sorted set is a `listpack`, one
//! [`Pack`] with an entry per element in order; a lookup walks it. Once it
//! holds more than `zset-max-listpack-entries` members, or a member longer
//! than `zset-max-listpack-value` bytes, it becomes a `skiplist` for good
//! (Redis never converts back either; [`Limits`] are the hash's kind): a [`Ranked`] order with ranks in
//! O(log n) and a [`Table`] from member to score.
//!
//! A listpack entry is a header byte, the score, then the member. The
//! header's low four bits give the score's bytes: 8 for the double's bits,
//! fewer for an integral score below 2^53 in magnitude as a zigzag integer
//! in that many little-endian bytes (0 is no byte). Its bit 4 says the
//! member is the canonical decimal form of an `i64` (as `parse_i64` reads
//! it), held as a zigzag integer in the entry's remaining bytes, the way a
//! listpack holds numeric strings as integers. So a member of a sliding-log
//! limiter (a microsecond timestamp scored with its millisecond) costs 16
//! bytes.

mod ranked;

use leasehold_protocol::int::parse_i64;

pub use super::hash::Limits;
use super::hash::{Table, PACK_SAFETY_BYTES};
use super::pack::Pack;
use super::{Collection, REBUILD_CHUNK};
pub use ranked::{cmp, Ranked};

/// The `skiplist` encoding: the order and the member-to-score table (the
/// score as its 8 little-endian bytes).
#[derive(Debug, Clone)]
pub struct Skiplist {
    order: Ranked,
    scores: Table,
}

/// A Redis sorted set (see the module documentation).
#[derive(Debug, Clone)]
pub enum ZSet {
    /// `listpack`: one entry per element, in order.
    Pack(Pack),
    /// `skiplist`.
    Skiplist(Box<Skiplist>),
}

impl Default for ZSet {
    fn default() -> ZSet {
        ZSet::Pack(Pack::new())
    }
}

impl PartialEq for ZSet {
    /// Sorted sets are equal when they hold the same members with the same
    /// scores, whatever their encodings.
    fn eq(&self, other: &ZSet) -> bool {
        let mut a = Vec::new();
        let mut b = Vec::new();
        self.range(0, self.len(), false, &mut |m, s| a.push((m.to_vec(), s)));
        other.range(0, other.len(), false, &mut |m, s| b.push((m.to_vec(), s)));
        a == b
    }
}

fn zigzag(i: i64) -> u64 {
    ((i << 1) ^ (i >> 63)) as u64
}

fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// Appends the fewest little-endian bytes of `u` (none for 0).
fn put_uint(out: &mut Vec<u8>, u: u64) -> usize {
    let n = (64 - u.leading_zeros() as usize).div_ceil(8);
    out.extend_from_slice(&u.to_le_bytes()[..n]);
    n
}

fn get_uint(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(w)
}

/// The largest integral score kept as an integer in a listpack.
const INT_SCORE_LIMIT: f64 = 9007199254740992.0; // 2^53

/// A listpack entry for `member` scored `score`.
fn encode(member: &[u8], score: f64) -> Vec<u8> {
    let mut out = Vec::with_capacity(member.len() + 9);
    out.push(0);
    // -0 is integral: it reads back as 0, as from Redis's listpack.
    let integral = score.fract() == 0.0 && score.abs() < INT_SCORE_LIMIT;
    let head = if integral {
        put_uint(&mut out, zigzag(score as i64)) as u8
    } else {
        out.extend_from_slice(&score.to_le_bytes());
        8
    };
    match parse_i64(member) {
        Some(i) => {
            put_uint(&mut out, zigzag(i));
            out[0] = head | 0x10;
        }
        None => {
            out.extend_from_slice(member);
            out[0] = head;
        }
    }
    out
}

/// A member as a listpack entry holds it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Member<'a> {
    Bytes(&'a [u8]),
    Int(i64),
}

impl<'a> Member<'a> {
    fn of(member: &'a [u8]) -> Member<'a> {
        match parse_i64(member) {
            Some(i) => Member::Int(i),
            None => Member::Bytes(member),
        }
    }

    /// Calls `f` with the member's bytes.
    fn with<R>(self, f: impl FnOnce(&[u8]) -> R) -> R {
        match self {
            Member::Bytes(b) => f(b),
            Member::Int(i) => f(itoa::Buffer::new().format(i).as_bytes()),
        }
    }
}

/// An entry's member and score.
fn decode(e: &[u8]) -> (Member<'_>, f64) {
    let head = e[0];
    let n = usize::from(head & 0x0f);
    let score = if n == 8 {
        f64::from_le_bytes(e[1..9].try_into().expect("8 bytes"))
    } else {
        unzigzag(get_uint(&e[1..1 + n])) as f64
    };
    let rest = &e[1 + n..];
    let member = if head & 0x10 != 0 {
        Member::Int(unzigzag(get_uint(rest)))
    } else {
        Member::Bytes(rest)
    };
    (member, score)
}

/// The offset and score of `member`'s entry in a pack.
fn pack_find(p: &Pack, member: &[u8]) -> Option<(usize, f64)> {
    let want = Member::of(member);
    let mut at = 0;
    while at < p.bytes() {
        let (e, next) = p.entry(at);
        let (m, s) = decode(e);
        if m == want {
            return Some((at, s));
        }
        at = next;
    }
    None
}

/// The skiplist score bytes.
fn score_of(b: &[u8]) -> f64 {
    f64::from_le_bytes(b.try_into().expect("a score is 8 bytes"))
}

impl ZSet {
    /// How many members it holds.
    pub fn len(&self) -> usize {
        match self {
            ZSet::Pack(p) => p.len(),
            ZSet::Skiplist(z) => z.order.len(),
        }
    }

    /// Whether it holds no member.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The score of `member`.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        match self {
            ZSet::Pack(p) => pack_find(p, member).map(|(_, s)| s),
            ZSet::Skiplist(z) => z.scores.get(member).map(score_of),
        }
    }

    /// Sets `member`'s score (never NaN), changing to the skiplist encoding
    /// when the listpack would pass `limits`. Returns the previous score,
    /// `None` when the member is new.
    pub fn insert(&mut self, member: &[u8], score: f64, limits: &Limits) -> Option<f64> {
        let p = match self {
            ZSet::Pack(p) => p,
            ZSet::Skiplist(z) => {
                let old = z.scores.get(member).map(score_of);
                if let Some(old) = old {
                    if old.to_bits() == score.to_bits() {
                        return old.into();
                    }
                    z.order.remove(old, member);
                }
                z.scores.insert(member, &score.to_le_bytes());
                z.order.insert(score, member);
                return old;
            }
        };
        let old = pack_find(p, member);
        if let Some((at, _)) = old {
            p.remove(at);
        }
        let mut at = 0;
        while at < p.bytes() {
            let (e, next) = p.entry(at);
            let (m, s) = decode(e);
            if m.with(|m| cmp((s, m), (score, member))).is_gt() {
                break;
            }
            at = next;
        }
        p.insert(at, &encode(member, score));
        let too_long = member.len() > limits.max_value;
        if too_long || p.len() > limits.max_entries || p.bytes() > PACK_SAFETY_BYTES {
            let mut z = Skiplist {
                order: Ranked::default(),
                scores: Table::with_capacity(p.len()),
            };
            for (m, s) in p.iter().map(decode) {
                m.with(|m| {
                    z.scores.insert(m, &s.to_le_bytes());
                    z.order.insert(s, m);
                });
            }
            *self = ZSet::Skiplist(Box::new(z));
        }
        old.map(|(_, s)| s)
    }

    /// Removes `member`; its score when it was there.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        match self {
            ZSet::Pack(p) => {
                let (at, s) = pack_find(p, member)?;
                p.remove(at);
                Some(s)
            }
            ZSet::Skiplist(z) => {
                let s = score_of(z.scores.get(member)?);
                z.scores.remove(member);
                z.order.remove(s, member);
                Some(s)
            }
        }
    }

    /// The rank (0-based, in ascending order) and score of `member`.
    pub fn rank(&self, member: &[u8]) -> Option<(usize, f64)> {
        match self {
            ZSet::Pack(p) => {
                let want = Member::of(member);
                p.iter()
                    .map(decode)
                    .enumerate()
                    .find(|(_, (m, _))| *m == want)
                    .map(|(i, (_, s))| (i, s))
            }
            ZSet::Skiplist(z) => {
                let s = score_of(z.scores.get(member)?);
                z.order.rank(s, member).map(|r| (r, s))
            }
        }
    }

    /// The rank of the first element satisfying `p`, the length when none
    /// does. `p` should hold from some rank on (a range's lower bound): a
    /// listpack walks from the first element, a skiplist searches; both as
    /// Redis finds a range's start.
    pub fn first_where(&self, p: impl Fn(f64, &[u8]) -> bool) -> usize {
        match self {
            ZSet::Pack(pack) => {
                let mut i = 0;
                for (m, s) in pack.iter().map(decode) {
                    if m.with(|m| p(s, m)) {
                        break;
                    }
                    i += 1;
                }
                i
            }
            ZSet::Skiplist(z) => z.order.partition_point(|s, m| !p(s, m)),
        }
    }

    /// One past the rank of the last element satisfying `p`, 0 when none
    /// does. `p` should hold up to some rank (a range's upper bound): a
    /// listpack walks from the last element, a skiplist searches.
    pub fn end_where(&self, p: impl Fn(f64, &[u8]) -> bool) -> usize {
        match self {
            ZSet::Pack(pack) => {
                let mut end = pack.len();
                for (m, s) in pack.iter().rev().map(decode) {
                    if m.with(|m| p(s, m)) {
                        break;
                    }
                    end -= 1;
                }
                end
            }
            ZSet::Skiplist(z) => z.order.partition_point(p),
        }
    }

    /// Calls `f` with the member and score of each rank in `start..end`
    /// (within the length), ascending, or descending with `rev`.
    pub fn range(&self, start: usize, end: usize, rev: bool, f: &mut dyn FnMut(&[u8], f64)) {
        if start >= end {
            return;
        }
        match self {
            ZSet::Pack(p) => {
                let mut call = |(m, s): (Member<'_>, f64)| m.with(|m| f(m, s));
                let it = p.iter().map(decode).skip(start).take(end - start);
                if rev {
                    let picked: Vec<_> = it.collect();
                    picked.into_iter().rev().for_each(&mut call);
                } else {
                    it.for_each(&mut call);
                }
            }
            ZSet::Skiplist(z) => z.order.range(start, end, rev, f),
        }
    }

    /// Removes the elements of ranks `start..end` (within the length),
    /// calling `f` with each member removed.
    pub fn remove_range(&mut self, start: usize, end: usize, f: &mut dyn FnMut(&[u8])) {
        if start >= end {
            return;
        }
        match self {
            ZSet::Pack(p) => {
                let from = p.offset_of(start);
                let mut to = from;
                for _ in start..end {
                    let (e, next) = p.entry(to);
                    decode(e).0.with(&mut *f);
                    to = next;
                }
                p.remove_span(from, to, end - start);
            }
            ZSet::Skiplist(z) => {
                let Skiplist { order, scores } = &mut **z;
                order.remove_range(start, end, &mut |m| {
                    scores.remove(m);
                    f(m);
                });
            }
        }
    }

    /// One step of ZSCAN from `cursor`: calls `f` with members and scores
    /// and returns the next cursor, 0 when the walk is over. A listpack
    /// gives everything at once (cursor 0 back, as Redis does); a skiplist
    /// walks its table's buckets (see [`Table::scan`]).
    pub fn scan(&self, cursor: u64, count: usize, f: &mut dyn FnMut(&[u8], f64)) -> u64 {
        match self {
            ZSet::Pack(_) => {
                self.range(0, self.len(), false, f);
                0
            }
            ZSet::Skiplist(z) => z.scores.scan(cursor, count, &mut |m, s| f(m, score_of(s))),
        }
    }

    /// The member and score of rank `i` (below the length): what random
    /// picks read (a listpack walks to it).
    pub fn nth(&self, i: usize) -> (Vec<u8>, f64) {
        let mut out = (Vec::new(), 0.0);
        self.range(i, i + 1, false, &mut |m, s| out = (m.to_vec(), s));
        out
    }
}

impl Collection for ZSet {
    fn encoding(&self) -> &'static str {
        match self {
            ZSet::Pack(_) => "listpack",
            ZSet::Skiplist(_) => "skiplist",
        }
    }

    fn len(&self) -> usize {
        ZSet::len(self)
    }

    fn heap_bytes(&self) -> usize {
        match self {
            ZSet::Pack(p) => p.heap_bytes(),
            ZSet::Skiplist(z) => {
                std::mem::size_of::<Skiplist>() + z.order.heap_bytes() + z.scores.heap_bytes()
            }
        }
    }

    /// `ZADD key s1 m1 .. s512 m512` for each run of members in order,
    /// scores as `%.17g` writes them (which reads back exactly).
    fn rebuild(&self, key: &[u8], f: &mut dyn FnMut(&[&[u8]])) {
        let mut owned: Vec<(String, Vec<u8>)> = Vec::with_capacity(REBUILD_CHUNK);
        let mut flush = |owned: &mut Vec<(String, Vec<u8>)>| {
            let mut args: Vec<&[u8]> = Vec::with_capacity(2 * owned.len() + 2);
            args.extend_from_slice(&[b"ZADD", key]);
            for (s, m) in owned.iter() {
                args.extend_from_slice(&[s.as_bytes(), m]);
            }
            f(&args);
            owned.clear();
        };
        self.range(0, self.len(), false, &mut |m, s| {
            owned.push((leasehold_protocol::reply::format_double(s), m.to_vec()));
            if owned.len() == REBUILD_CHUNK {
                flush(&mut owned);
            }
        });
        if !owned.is_empty() {
            flush(&mut owned);
        }
    }
}
