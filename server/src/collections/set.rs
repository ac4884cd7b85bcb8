//! A Redis set: unordered distinct strings.
//!
//! Three representations:
//! - `intset`: while every member is the canonical decimal form of an `i64`
//!   (`7`, `-12`; not `+7`, `07` or `-0`) and there are at most
//!   `set-max-intset-entries` of them, an [`IntSet`]: the integers sorted,
//!   2, 4 or 8 bytes each as the widest needs, in one exactly sized buffer,
//!   as Redis's intset (so SMEMBERS lists them in ascending order, as Redis
//!   does); a lookup is a binary search;
//! - a pack ([`Pack`]) of members in insertion order, while there are at
//!   most `set-max-listpack-entries` members of at most
//!   `set-max-listpack-value` bytes: Redis 7.2's set listpack. Redis 7.0
//!   (whose replies Leasehold matches) has no such encoding and keeps these
//!   sets in a hash table, so `OBJECT ENCODING` reports `hashtable` for it;
//!   only memory and iteration order tell them apart;
//! - `hashtable`: the hash type's [`Table`], members with empty values.
//!
//! A set leaves the intset on its first non-integer member or past its
//! entry limit, and the pack past its limits, for good: like Redis, it
//! never converts back.

use super::hash::Table;
use super::pack::Pack;
use super::{Collection, REBUILD_CHUNK};

/// A pack grows no larger than this before it becomes a table (Redis's
/// listpack safety limit, 1 GiB).
const PACK_SAFETY_BYTES: usize = 1 << 30;

/// The thresholds of a set's compact encodings (`set-max-intset-entries`,
/// `set-max-listpack-entries`, `set-max-listpack-value`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most members an intset holds.
    pub max_intset_entries: usize,
    /// Most members a pack holds.
    pub max_pack_entries: usize,
    /// Longest member a pack holds, bytes.
    pub max_pack_value: usize,
}

impl Default for Limits {
    /// redis.conf's defaults: 512 integers; 128 members of up to 64 bytes.
    fn default() -> Limits {
        Limits {
            max_intset_entries: 512,
            max_pack_entries: 128,
            max_pack_value: 64,
        }
    }
}

/// Distinct integers, ascending, each stored little-endian in the fewest
/// bytes (2, 4 or 8) that hold every one of them, in one buffer sized
/// exactly (Redis's intset: it widens when a wider integer comes, and never
/// narrows). The buffer's first byte is that width (no buffer while empty).
#[derive(Debug, Clone, Default)]
pub struct IntSet(Vec<u8>);

/// The fewest bytes (2, 4 or 8) that hold `v`.
fn width_of(v: i64) -> usize {
    if i16::try_from(v).is_ok() {
        2
    } else if i32::try_from(v).is_ok() {
        4
    } else {
        8
    }
}

impl IntSet {
    /// Bytes an integer takes.
    fn width(&self) -> usize {
        self.0.first().map_or(2, |&w| usize::from(w))
    }

    /// How many integers it holds.
    pub fn len(&self) -> usize {
        self.0.len().saturating_sub(1) / self.width()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The integer at `i` (below the length), in ascending order.
    pub fn get(&self, i: usize) -> i64 {
        let w = self.width();
        let b = &self.0[1 + i * w..1 + i * w + w];
        match w {
            2 => i64::from(i16::from_le_bytes([b[0], b[1]])),
            4 => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            _ => i64::from_le_bytes(b.try_into().expect("8 bytes")),
        }
    }

    /// Where `v` is, or where it would go.
    fn search(&self, v: i64) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.get(mid).cmp(&v) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// Whether `v` is in it.
    pub fn contains(&self, v: i64) -> bool {
        width_of(v) <= self.width() && self.search(v).is_ok()
    }

    /// Adds `v`; true when it is new.
    pub fn insert(&mut self, v: i64) -> bool {
        let need = width_of(v);
        if self.0.is_empty() || need > self.width() {
            let w = need.max(self.width());
            let mut data = Vec::with_capacity(1 + (self.len() + 1) * w);
            data.push(w as u8);
            for i in self.iter() {
                data.extend_from_slice(&i.to_le_bytes()[..w]);
            }
            self.0 = data;
        }
        let Err(at) = self.search(v) else {
            return false;
        };
        let w = self.width();
        self.0.reserve_exact(w);
        let bytes = v.to_le_bytes();
        self.0
            .splice(1 + at * w..1 + at * w, bytes[..w].iter().copied());
        true
    }

    /// Removes `v`; true when it was there.
    pub fn remove(&mut self, v: i64) -> bool {
        if width_of(v) > self.width() {
            return false;
        }
        let Ok(at) = self.search(v) else {
            return false;
        };
        let w = self.width();
        self.0.drain(1 + at * w..1 + at * w + w);
        if self.0.capacity() > self.0.len() + 64 {
            self.0.shrink_to_fit();
        }
        true
    }

    /// The integers, ascending.
    pub fn iter(&self) -> impl Iterator<Item = i64> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Bytes allocated.
    pub fn heap_bytes(&self) -> usize {
        self.0.capacity()
    }
}

/// A Redis set (see the module documentation).
#[derive(Debug, Clone)]
pub enum Set {
    /// `intset`: the integers, ascending.
    Ints(IntSet),
    /// Members in insertion order (reported as `hashtable`, as Redis 7.0).
    Pack(Pack),
    /// `hashtable`: members as fields with empty values.
    Table(Box<Table>),
}

impl Default for Set {
    fn default() -> Set {
        Set::Ints(IntSet::default())
    }
}

impl PartialEq for Set {
    /// Sets are equal when they hold the same members, whatever their
    /// encodings and orders.
    fn eq(&self, other: &Set) -> bool {
        let mut all = true;
        self.for_each(&mut |m| all &= other.contains(m));
        self.len() == other.len() && all
    }
}

/// The integer a member stands for in an intset: its canonical decimal
/// form only (Redis's `string2ll` test).
pub fn as_int(member: &[u8]) -> Option<i64> {
    leasehold_protocol::int::parse_i64(member)
}

/// Where `member` starts in a pack.
fn pack_find(p: &Pack, member: &[u8]) -> Option<usize> {
    let mut at = 0;
    while at < p.bytes() {
        let (m, next) = p.entry(at);
        if m == member {
            return Some(at);
        }
        at = next;
    }
    None
}

impl Set {
    /// How many members it holds.
    pub fn len(&self) -> usize {
        match self {
            Set::Ints(v) => v.len(),
            Set::Pack(p) => p.len(),
            Set::Table(t) => t.len(),
        }
    }

    /// Whether it holds no member.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `member` is in it.
    pub fn contains(&self, member: &[u8]) -> bool {
        match self {
            Set::Ints(v) => as_int(member).is_some_and(|i| v.contains(i)),
            Set::Pack(p) => pack_find(p, member).is_some(),
            Set::Table(t) => t.get(member).is_some(),
        }
    }

    /// Adds `member`, changing encoding when the current one would pass
    /// `limits`; true when it is new.
    pub fn insert(&mut self, member: &[u8], limits: &Limits) -> bool {
        match self {
            Set::Ints(v) => match as_int(member) {
                Some(i) => {
                    if !v.insert(i) {
                        return false;
                    }
                    if v.len() > limits.max_intset_entries {
                        self.convert(None, limits);
                    }
                    true
                }
                None => {
                    // Not an integer: not in an intset either.
                    self.convert(Some(member.len()), limits);
                    self.insert(member, limits)
                }
            },
            Set::Pack(p) => {
                if pack_find(p, member).is_some() {
                    return false;
                }
                p.push_back(member);
                let too_long = member.len() > limits.max_pack_value;
                if too_long || p.len() > limits.max_pack_entries || p.bytes() > PACK_SAFETY_BYTES {
                    let t = Set::table_of(self);
                    *self = t;
                }
                true
            }
            Set::Table(t) => t.insert(member, b""),
        }
    }

    /// Moves an intset to a pack when its members, with the one of `next`
    /// bytes about to come if any, fit the pack's limits, else to a table.
    fn convert(&mut self, next: Option<usize>, limits: &Limits) {
        let Set::Ints(v) = self else {
            return;
        };
        let mut buf = itoa::Buffer::new();
        let widest = v.iter().map(|i| buf.format(i).len()).max().unwrap_or(0);
        let fits = v.len() + usize::from(next.is_some()) <= limits.max_pack_entries
            && widest.max(next.unwrap_or(0)) <= limits.max_pack_value;
        *self = if fits {
            let mut p = Pack::new();
            for i in v.iter() {
                p.push_back(buf.format(i).as_bytes());
            }
            Set::Pack(p)
        } else {
            Set::table_of(self)
        };
    }

    /// A table holding this set's members.
    fn table_of(set: &Set) -> Set {
        let mut t = Table::with_capacity(set.len());
        set.for_each(&mut |m| {
            t.insert(m, b"");
        });
        Set::Table(Box::new(t))
    }

    /// Removes `member`; true when it was there.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        match self {
            Set::Ints(v) => as_int(member).is_some_and(|i| v.remove(i)),
            Set::Pack(p) => match pack_find(p, member) {
                Some(at) => {
                    p.remove(at);
                    true
                }
                None => false,
            },
            Set::Table(t) => t.remove(member),
        }
    }

    /// Calls `f` with every member: an intset's ascending, a pack's in
    /// insertion order, a table's in its own.
    pub fn for_each(&self, f: &mut dyn FnMut(&[u8])) {
        match self {
            Set::Ints(v) => {
                let mut buf = itoa::Buffer::new();
                for i in v.iter() {
                    f(buf.format(i).as_bytes());
                }
            }
            Set::Pack(p) => p.iter().for_each(f),
            Set::Table(t) => t.iter().for_each(|(m, _)| f(m)),
        }
    }

    /// Every member copied out, in [`Set::for_each`]'s order.
    pub fn members(&self) -> Vec<bytes::Bytes> {
        let mut out = Vec::with_capacity(self.len());
        self.for_each(&mut |m| out.push(bytes::Bytes::copy_from_slice(m)));
        out
    }

    /// Keeps only the members `keep` accepts.
    pub fn retain(&mut self, keep: &mut dyn FnMut(&[u8]) -> bool) {
        let mut gone = Vec::new();
        self.for_each(&mut |m| {
            if !keep(m) {
                gone.push(m.to_vec());
            }
        });
        for m in gone {
            self.remove(&m);
        }
    }

    /// Members by position (`0..len`) in [`Set::for_each`]'s order, each
    /// in O(1): what random picks read.
    pub fn by_position(&self) -> Positions<'_> {
        match self {
            Set::Ints(v) => Positions::Ints(v),
            Set::Pack(p) => Positions::Pack(p.iter().collect()),
            Set::Table(t) => Positions::Table(t),
        }
    }

    /// One step of SSCAN from `cursor`: calls `f` with members and returns
    /// the next cursor, 0 when the walk is over. An intset or a pack gives
    /// everything at once (cursor 0 back, as Redis does for its compact
    /// encodings); a table walks its buckets ([`Table::scan`]).
    pub fn scan(&self, cursor: u64, count: usize, f: &mut dyn FnMut(&[u8])) -> u64 {
        match self {
            Set::Ints(_) | Set::Pack(_) => {
                self.for_each(f);
                0
            }
            Set::Table(t) => t.scan(cursor, count, &mut |m, _| f(m)),
        }
    }
}

/// A set's members by position (see [`Set::by_position`]).
pub enum Positions<'a> {
    /// An intset's integers.
    Ints(&'a IntSet),
    /// A pack's members, gathered.
    Pack(Vec<&'a [u8]>),
    /// A table's dense nodes.
    Table(&'a Table),
}

impl Positions<'_> {
    /// The member at `i` (below the set's length); an integer is written
    /// into `buf`.
    pub fn get<'s>(&'s self, i: usize, buf: &'s mut itoa::Buffer) -> &'s [u8] {
        match self {
            Positions::Ints(v) => buf.format(v.get(i)).as_bytes(),
            Positions::Pack(v) => v[i],
            Positions::Table(t) => t.nth(i).0,
        }
    }
}

impl Collection for Set {
    /// `intset`, or `hashtable` for both other representations (Redis
    /// 7.0's names; see the module documentation).
    fn encoding(&self) -> &'static str {
        match self {
            Set::Ints(_) => "intset",
            Set::Pack(_) | Set::Table(_) => "hashtable",
        }
    }

    fn len(&self) -> usize {
        Set::len(self)
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Set::Ints(v) => v.heap_bytes(),
            Set::Pack(p) => p.heap_bytes(),
            Set::Table(t) => std::mem::size_of::<Table>() + t.heap_bytes(),
        }
    }

    /// `SADD key m1 .. m512` for each run of members, in
    /// [`Set::for_each`]'s order.
    fn rebuild(&self, key: &[u8], f: &mut dyn FnMut(&[&[u8]])) {
        let members = self.members();
        for chunk in members.chunks(REBUILD_CHUNK) {
            let mut args: Vec<&[u8]> = Vec::with_capacity(chunk.len() + 2);
            args.extend_from_slice(&[b"SADD", key]);
            args.extend(chunk.iter().map(|m| &m[..]));
            f(&args);
        }
    }
}
