//! A Redis hash: a map from field to value, both strings.
//!
//! Two encodings, as Redis 7.0's: a small hash is a `listpack`, one
//! [`Pack`] of field, value, field, value... in insertion order (a new field
//! goes last, a changed value stays in place, so HGETALL lists fields in the
//! order Redis does); a lookup walks it. Once it holds more than
//! `hash-max-listpack-entries` fields, or a field or value longer than
//! `hash-max-listpack-value` bytes, it becomes a `hashtable` ([`Table`]) for
//! good (Redis never converts back either). A 10-field hash of short strings
//! costs its 32-byte [`Hash`] and one buffer of about 20 bytes a field.

mod table;

use super::pack::Pack;
use super::{Collection, REBUILD_CHUNK};
pub use table::Table;

/// A pack grows no larger than this before it becomes a table, whatever the
/// thresholds say (Redis's listpack safety limit, 1 GiB); a sorted set's
/// too.
pub(super) const PACK_SAFETY_BYTES: usize = 1 << 30;

/// The thresholds past which a hash leaves its listpack encoding
/// (`hash-max-listpack-entries`, `hash-max-listpack-value`), or a sorted
/// set (`zset-max-listpack-*`, where `max_value` bounds members).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most fields a listpack holds.
    pub max_entries: usize,
    /// Longest field or value a listpack holds, bytes.
    pub max_value: usize,
}

impl Default for Limits {
    /// Redis 7.0's defaults: 128 fields, 64 bytes.
    fn default() -> Limits {
        Limits {
            max_entries: 128,
            max_value: 64,
        }
    }
}

/// A Redis hash (see the module documentation).
#[derive(Debug, Clone)]
pub enum Hash {
    /// `listpack`: field, value, field, value... in one buffer.
    Pack(Pack),
    /// `hashtable`.
    Table(Box<Table>),
}

impl Default for Hash {
    fn default() -> Hash {
        Hash::Pack(Pack::new())
    }
}

impl PartialEq for Hash {
    /// Hashes are equal when they map the same fields to the same values,
    /// whatever their encodings and orders.
    fn eq(&self, other: &Hash) -> bool {
        self.len() == other.len() && self.iter().all(|(f, v)| other.get(f) == Some(v))
    }
}

/// Where a field's entry and its value's entry start in a pack.
fn pack_find(p: &Pack, field: &[u8]) -> Option<(usize, usize)> {
    let mut at = 0;
    while at < p.bytes() {
        let (f, value_at) = p.entry(at);
        if f == field {
            return Some((at, value_at));
        }
        at = p.entry(value_at).1;
    }
    None
}

impl Hash {
    /// How many fields it holds.
    pub fn len(&self) -> usize {
        match self {
            Hash::Pack(p) => p.len() / 2,
            Hash::Table(t) => t.len(),
        }
    }

    /// Whether it holds no field.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of `field`.
    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        match self {
            Hash::Pack(p) => pack_find(p, field).map(|(_, v)| p.entry(v).0),
            Hash::Table(t) => t.get(field),
        }
    }

    /// Sets `field` to `value`, changing to the table encoding when the
    /// listpack would pass `limits`. Returns true when the field is new.
    pub fn insert(&mut self, field: &[u8], value: &[u8], limits: &Limits) -> bool {
        let p = match self {
            Hash::Pack(p) => p,
            Hash::Table(t) => return t.insert(field, value),
        };
        let new = match pack_find(p, field) {
            Some((_, v)) => {
                p.replace(v, value);
                false
            }
            None => {
                p.insert_all(p.bytes(), &[field, value]);
                true
            }
        };
        let too_long = field.len() > limits.max_value || value.len() > limits.max_value;
        if too_long || p.len() / 2 > limits.max_entries || p.bytes() > PACK_SAFETY_BYTES {
            let mut t = Table::with_capacity(p.len() / 2);
            for (f, v) in pairs(p) {
                t.insert(f, v);
            }
            *self = Hash::Table(Box::new(t));
        }
        new
    }

    /// Removes `field`; true when it was there.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        match self {
            Hash::Pack(p) => match pack_find(p, field) {
                Some((at, v)) => {
                    let end = p.entry(v).1;
                    p.remove_span(at, end, 2);
                    true
                }
                None => false,
            },
            Hash::Table(t) => t.remove(field),
        }
    }

    /// Every field with its value: a listpack's in insertion order, a
    /// table's in its own.
    pub fn iter(&self) -> Pairs<'_> {
        match self {
            Hash::Pack(p) => Pairs::Pack(p.iter()),
            Hash::Table(t) => Pairs::Table(t.iter()),
        }
    }

    /// Fields and values by position (`0..len`) in [`Hash::iter`]'s order,
    /// each in O(1): what random picks read.
    pub fn by_position(&self) -> Positions<'_> {
        match self {
            Hash::Pack(p) => Positions::Pack(pairs(p).collect()),
            Hash::Table(t) => Positions::Table(t),
        }
    }

    /// One step of HSCAN from `cursor`: calls `f` with fields and values
    /// and returns the next cursor, 0 when the walk is over. A listpack
    /// gives everything at once (cursor 0 back, as Redis does); a table
    /// walks its buckets ([`Table::scan`]).
    pub fn scan(&self, cursor: u64, count: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> u64 {
        match self {
            Hash::Pack(p) => {
                for (k, v) in pairs(p) {
                    f(k, v);
                }
                0
            }
            Hash::Table(t) => t.scan(cursor, count, f),
        }
    }
}

/// A pack's strings taken two by two.
fn pairs(p: &Pack) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
    let mut it = p.iter();
    std::iter::from_fn(move || Some((it.next()?, it.next()?)))
}

/// The pairs of a hash, in [`Hash::iter`]'s order.
pub enum Pairs<'a> {
    /// A listpack's strings, two by two.
    Pack(super::pack::Strings<'a>),
    /// A table's nodes.
    Table(table::Iter<'a>),
}

impl<'a> Iterator for Pairs<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Pairs::Pack(it) => Some((it.next()?, it.next()?)),
            Pairs::Table(it) => it.next(),
        }
    }
}

/// A hash's pairs by position (see [`Hash::by_position`]).
pub enum Positions<'a> {
    /// A listpack's pairs, gathered.
    Pack(Vec<(&'a [u8], &'a [u8])>),
    /// A table's dense nodes.
    Table(&'a Table),
}

impl<'a> Positions<'a> {
    /// The pair at `i` (below the hash's length).
    pub fn get(&self, i: usize) -> (&'a [u8], &'a [u8]) {
        match self {
            Positions::Pack(v) => v[i],
            Positions::Table(t) => t.nth(i),
        }
    }
}

impl Collection for Hash {
    fn encoding(&self) -> &'static str {
        match self {
            Hash::Pack(_) => "listpack",
            Hash::Table(_) => "hashtable",
        }
    }

    fn len(&self) -> usize {
        Hash::len(self)
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Hash::Pack(p) => p.heap_bytes(),
            Hash::Table(t) => std::mem::size_of::<Table>() + t.heap_bytes(),
        }
    }

    /// `HSET key f1 v1 .. f512 v512` for each run of fields, in
    /// [`Hash::iter`]'s order (so a listpack comes back in its order).
    fn rebuild(&self, key: &[u8], f: &mut dyn FnMut(&[&[u8]])) {
        let mut args: Vec<&[u8]> = Vec::with_capacity(2 * REBUILD_CHUNK.min(self.len()) + 2);
        for (field, value) in self.iter() {
            if args.is_empty() {
                args.extend_from_slice(&[b"HSET", key]);
            }
            args.extend_from_slice(&[field, value]);
            if args.len() == 2 * REBUILD_CHUNK + 2 {
                f(&args);
                args.clear();
            }
        }
        if !args.is_empty() {
            f(&args);
        }
    }
}
