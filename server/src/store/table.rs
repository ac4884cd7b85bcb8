//! One hash slot's keys: a dense vector of 48-byte entries, a parallel vector
//! of 16-bit hash tags that a lookup scans, and, once the slot holds more than
//! [`INDEX_FROM`] keys, a hash index of `u32` positions over the vector.
//!
//! Why not a hash table of entries: at 1M keys a slot holds about 61, and a
//! power-of-two table with hashbrown's 7/8 load limit then sits at 128
//! buckets, half empty, doubling the memory per key. Here the vector grows
//! one allocator size class at a time (12-25%, see [`Tagged`]), so it is
//! about 90% full, and the tags cost 2 bytes a key. A scan of 61 tags reads
//! two cache lines, and a false match (probability `n / 65536`) costs one
//! key comparison. Slots made large by hash tags (`{user}:...`) get the
//! index, so a lookup never scans more than [`INDEX_FROM`] tags.

use hashbrown::HashTable;
use std::hash::BuildHasher;

use super::compact::CompactVec;
use super::value::Value;
use crate::clock::unix_of;
use crate::clock::Now;

/// The hasher shared by a store's slot tables.
pub type Hasher = foldhash::fast::RandomState;

/// A slot holding more keys than this gets a hash index.
const INDEX_FROM: usize = 128;
/// A slot falling below this many keys drops its index.
const INDEX_UNTIL: usize = 64;

/// Longest key stored inside its entry rather than in an allocation of its own.
pub const INLINE_KEY: usize = 22;

/// A key's bytes: inline up to [`INLINE_KEY`] bytes, boxed beyond. Inline keys
/// cost no allocation and, on lookup, no pointer to chase: comparing a key
/// reads the entry's own cache line (a `-P 16` profile spent a third of its
/// time in lookups, mostly waiting on the boxed key's cache miss).
#[derive(Debug, Clone)]
enum KeyBytes {
    Inline { len: u8, bytes: [u8; INLINE_KEY] },
    Heap(Box<[u8]>),
}

impl KeyBytes {
    fn new(key: &[u8]) -> KeyBytes {
        if key.len() <= INLINE_KEY {
            let mut bytes = [0; INLINE_KEY];
            bytes[..key.len()].copy_from_slice(key);
            KeyBytes::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            KeyBytes::Heap(key.into())
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            KeyBytes::Inline { len, bytes } => &bytes[..*len as usize],
            KeyBytes::Heap(b) => b,
        }
    }
}

/// Set in a stored deadline that is monotonic ms (a rate-limit key: its
/// state runs on the monotonic clock, so it expires on that clock too, and a
/// wall-clock step neither keeps it nor drops it early); clear in a Unix-ms
/// deadline, which never reaches it (deadlines are capped at `i64::MAX`).
pub const MONOTONIC: u64 = 1 << 63;

/// One key and what it holds: 48 bytes.
#[derive(Debug)]
pub struct Entry {
    key: KeyBytes,
    pub(super) expire_at: u64,
    /// The value; handlers may change it in place through `Store::get`.
    pub value: Value,
}

impl Entry {
    pub(super) fn new(key: &[u8], expire_at: u64, value: Value) -> Entry {
        Entry {
            key: KeyBytes::new(key),
            expire_at,
            value,
        }
    }

    /// The key bytes.
    pub fn key(&self) -> &[u8] {
        self.key.as_slice()
    }

    /// The absolute deadline in Unix ms under the clock reading `now` (a
    /// monotonic deadline reads as the Unix instant it falls on), or `None`
    /// for no TTL.
    pub fn expire_at(&self, now: Now) -> Option<u64> {
        match self.expire_at {
            0 => None,
            d if d & MONOTONIC != 0 => Some(unix_of(now, d & !MONOTONIC)),
            d => Some(d),
        }
    }

    /// A key is gone from its deadline on. (Redis's `keyIsExpired` keeps it
    /// for that one millisecond, answering PTTL 0; Leasehold does not, so that
    /// a rate-limit key is gone exactly when its bucket is full again.)
    pub(super) fn expired(&self, now_ms: u64, clock: Now) -> bool {
        self.expire_at(clock).is_some_and(|at| at <= now_ms)
    }
}

fn tag_of(h: u64) -> u16 {
    (h >> 48) as u16
}

/// The positions in `tags` equal to `tag`, in order, until `hit` accepts one.
/// Eight tags are compared at a time into a bit mask (one SIMD compare once
/// vectorised).
fn scan(tags: &[u16], tag: u16, mut hit: impl FnMut(usize) -> bool) -> Option<usize> {
    let mut chunks = tags.chunks_exact(8);
    let mut base = 0;
    for chunk in &mut chunks {
        let mut mask = chunk
            .iter()
            .enumerate()
            .fold(0u32, |m, (j, &t)| m | (u32::from(t == tag) << j));
        while mask != 0 {
            let i = base + mask.trailing_zeros() as usize;
            if hit(i) {
                return Some(i);
            }
            mask &= mask - 1;
        }
        base += 8;
    }
    let rest = chunks.remainder();
    (0..rest.len())
        .find(|&j| rest[j] == tag && hit(base + j))
        .map(|j| base + j)
}

/// The allocation jemalloc makes for a request of `bytes` (its size classes:
/// multiples of 16 up to 128, then four classes per doubling).
fn size_class(bytes: usize) -> usize {
    if bytes <= 8 {
        return 8;
    }
    if bytes <= 128 {
        return bytes.next_multiple_of(16);
    }
    let spacing = 1usize << ((bytes - 1).ilog2() - 2);
    bytes.next_multiple_of(spacing)
}

/// The capacity of at least `want` items of `T` that fills its size class.
fn fitted<T>(want: usize) -> usize {
    let size = std::mem::size_of::<T>();
    size_class(want * size) / size
}

/// Items and their 16-bit hash tags in two parallel vectors, grown one
/// allocator size class at a time (12-25%), so they stay about 90% full (a
/// simulation of 1M keys over 16384 slots gives 54 bytes a key this way, 59.5
/// when growing by a quarter). Removal moves the last item into the gap.
#[derive(Debug)]
pub struct Tagged<T> {
    items: Vec<T>,
    tags: Vec<u16>,
}

impl<T> Default for Tagged<T> {
    fn default() -> Self {
        Tagged {
            items: Vec::new(),
            tags: Vec::new(),
        }
    }
}

impl<T> Tagged<T> {
    /// Items held.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// The items, in no particular order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }

    /// The item at `i`.
    pub fn at(&self, i: usize) -> &T {
        &self.items[i]
    }

    /// The item at `i`, to change in place.
    pub fn at_mut(&mut self, i: usize) -> &mut T {
        &mut self.items[i]
    }

    /// The position of the first item tagged like hash `h` that `is` accepts.
    pub fn scan(&self, h: u64, is: impl Fn(&T) -> bool) -> Option<usize> {
        scan(&self.tags, tag_of(h), |i| is(&self.items[i]))
    }

    /// Adds `item`, whose key hashes to `h`; returns its position.
    pub fn push(&mut self, h: u64, item: T) -> usize {
        let len = self.items.len();
        if len == self.items.capacity() {
            let cap = fitted::<T>(len + 1);
            self.items.reserve_exact(cap - len);
            self.tags.reserve_exact(cap - len);
        }
        self.items.push(item);
        self.tags.push(tag_of(h));
        len
    }

    /// Removes the item at `i`, moving the last one into its place.
    pub fn swap_remove(&mut self, i: usize) -> T {
        self.tags.swap_remove(i);
        self.items.swap_remove(i)
    }

    /// Gives memory back: all of it when empty, down to about a quarter
    /// above the length when less than half full. Returns whether it did.
    pub fn shrink(&mut self) -> bool {
        let len = self.items.len();
        if len == 0 {
            let had = self.items.capacity() > 0;
            *self = Tagged::default();
            return had;
        }
        if len * 2 >= self.items.capacity() {
            return false;
        }
        let cap = fitted::<T>(len + len / 4);
        self.items.shrink_to(cap);
        self.tags.shrink_to(cap);
        true
    }

    /// Bytes allocated.
    pub fn allocation_size(&self) -> usize {
        self.items.capacity() * std::mem::size_of::<T>() + self.tags.capacity() * 2
    }

    #[cfg(test)]
    fn tag(&self, i: usize) -> u16 {
        self.tags[i]
    }
}

/// One slot's keys. See the module docs.
#[derive(Default)]
pub struct SlotTable {
    entries: Tagged<Entry>,
    index: Option<HashTable<u32>>,
    /// Sliding-window and GCRA keys in 32-byte entries (store/compact.rs).
    pub compact: CompactVec,
}

impl SlotTable {
    /// General entries held (live or past their deadline; compact ones apart).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entries, in no particular order.
    pub fn iter(&self) -> std::slice::Iter<'_, Entry> {
        self.entries.iter()
    }

    /// The position of `key`, whose hash is `h`.
    pub fn find(&self, h: u64, key: &[u8]) -> Option<usize> {
        let entries = &self.entries;
        match &self.index {
            Some(index) => index
                .find(h, |&i| entries.at(i as usize).key() == key)
                .map(|&i| i as usize),
            None => entries.scan(h, |e| e.key() == key),
        }
    }

    /// The entry at `i` (from [`SlotTable::find`]).
    pub fn at(&self, i: usize) -> &Entry {
        self.entries.at(i)
    }

    /// The entry at `i`, to change in place.
    pub fn at_mut(&mut self, i: usize) -> &mut Entry {
        self.entries.at_mut(i)
    }

    /// Adds `entry`, whose key is not present and hashes to `h`.
    pub fn push(&mut self, h: u64, entry: Entry, hasher: &Hasher) -> &mut Entry {
        let i = self.entries.push(h, entry);
        let entries = &self.entries;
        match &mut self.index {
            Some(index) => {
                index.insert_unique(h, i as u32, |&j| {
                    hasher.hash_one(entries.at(j as usize).key())
                });
            }
            None if i + 1 > INDEX_FROM => self.build_index(hasher),
            None => {}
        }
        self.entries.at_mut(i)
    }

    fn build_index(&mut self, hasher: &Hasher) {
        let entries = &self.entries;
        let hash = |&i: &u32| hasher.hash_one(entries.at(i as usize).key());
        let mut index = HashTable::with_capacity(entries.len());
        for i in 0..entries.len() as u32 {
            index.insert_unique(hash(&i), i, hash);
        }
        self.index = Some(index);
    }

    /// Removes the entry at `i`, moving the last entry into its place.
    /// The caller shrinks the table when it is done removing.
    pub fn swap_remove(&mut self, i: usize, hasher: &Hasher) -> Entry {
        let last = self.entries.len() - 1;
        if let Some(index) = &mut self.index {
            let h = hasher.hash_one(self.entries.at(i).key());
            if let Ok(found) = index.find_entry(h, |&j| j as usize == i) {
                found.remove();
            }
            if i != last {
                let h = hasher.hash_one(self.entries.at(last).key());
                if let Some(moved) = index.find_mut(h, |&j| j as usize == last) {
                    *moved = i as u32;
                }
            }
        }
        self.entries.swap_remove(i)
    }

    /// Removes the entries past their deadline from position `from` on,
    /// handing each to `removed`. Every 1024 entries it asks `stop`; when that
    /// says yes it returns the position to resume from (a slot made huge by a
    /// hash tag is swept over several calls, not in one long pause). Returns
    /// `(entries examined, where to resume)`.
    pub fn remove_expired(
        &mut self,
        from: usize,
        now_ms: u64,
        clock: Now,
        hasher: &Hasher,
        stop: &mut impl FnMut() -> bool,
        mut removed: impl FnMut(Entry),
    ) -> (u64, Option<usize>) {
        let mut i = from;
        let mut seen = 0u64;
        while i < self.entries.len() {
            if seen % 1024 == 1023 && stop() {
                return (seen, Some(i));
            }
            seen += 1;
            if self.entries.at(i).expired(now_ms, clock) {
                // The last entry moves into `i`, which is examined next.
                removed(self.swap_remove(i, hasher));
            } else {
                i += 1;
            }
        }
        (seen, None)
    }

    /// Gives memory back after removals: all of it when the table is empty,
    /// half or more when it is less than half full, and the index when the
    /// slot no longer needs one.
    pub fn shrink(&mut self, hasher: &Hasher) {
        self.compact.shrink();
        let len = self.entries.len();
        if len < INDEX_UNTIL {
            self.index = None;
        }
        if self.entries.shrink() {
            if let Some(index) = &mut self.index {
                let entries = &self.entries;
                index.shrink_to(len, |&i| hasher.hash_one(entries.at(i as usize).key()));
            }
        }
    }

    #[cfg(test)]
    pub(super) fn check_invariants(&self, hasher: &Hasher) {
        for (i, e) in self.entries.iter().enumerate() {
            let h = hasher.hash_one(e.key());
            assert_eq!(self.entries.tag(i), tag_of(h));
            assert_eq!(self.find(h, e.key()), Some(i));
        }
        if let Some(index) = &self.index {
            assert_eq!(index.len(), self.entries.len());
        }
        assert!(self.entries.len() <= INDEX_FROM || self.index.is_some());
    }

    /// Bytes allocated for this table (not counting boxed keys and values).
    pub fn allocation_size(&self) -> usize {
        self.entries.allocation_size()
            + self.index.as_ref().map_or(0, HashTable::allocation_size)
            + self.compact.allocation_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(std::mem::size_of::<KeyBytes>(), 24);
        assert_eq!(std::mem::size_of::<Entry>(), 48);
    }

    #[test]
    fn size_classes_are_jemallocs() {
        let got: Vec<usize> = [1, 9, 17, 48, 49, 129, 161, 2928, 3073, 4096, 4097]
            .map(size_class)
            .to_vec();
        assert_eq!(got, [8, 16, 32, 48, 64, 160, 192, 3072, 3584, 4096, 5120]);
        assert_eq!(fitted::<Entry>(61), 64);
    }

    #[test]
    fn scan_finds_every_match_in_order() {
        let tags: Vec<u16> = (0..21).map(|i| (i % 10) as u16).collect();
        let mut seen = Vec::new();
        assert_eq!(
            scan(&tags, 3, |i| {
                seen.push(i);
                false
            }),
            None
        );
        assert_eq!(seen, [3, 13]);
        assert_eq!(scan(&tags, 0, |i| i == 20), Some(20));
    }

    /// Inserts and removes across the index threshold both ways, checking
    /// every key is found at every step.
    #[test]
    fn lookups_hold_with_and_without_the_index() {
        let hasher = Hasher::default();
        let mut t = SlotTable::default();
        let key = |i: usize| format!("key:{i}").into_bytes();
        let check = |t: &SlotTable, live: std::ops::Range<usize>| {
            for i in 0..300 {
                let k = key(i);
                let found = t
                    .find(hasher.hash_one(&k), &k)
                    .map(|j| t.at(j).key().to_vec());
                assert_eq!(
                    found.is_some(),
                    live.contains(&i),
                    "key {i}, len {}",
                    t.len()
                );
                if let Some(f) = found {
                    assert_eq!(f, k);
                }
            }
        };
        for i in 0..300 {
            let k = key(i);
            t.push(
                hasher.hash_one(&k),
                Entry::new(&k, 0, Value::Int(i as i64)),
                &hasher,
            );
        }
        assert!(t.index.is_some());
        check(&t, 0..300);
        for i in 0..280 {
            let k = key(i);
            let j = t.find(hasher.hash_one(&k), &k).unwrap();
            assert_eq!(t.swap_remove(j, &hasher).value, Value::Int(i as i64));
            t.shrink(&hasher);
            if i % 37 == 0 {
                check(&t, i + 1..300);
            }
        }
        assert!(t.index.is_none());
        check(&t, 280..300);
        assert!(t.allocation_size() < 40 * 50, "{}", t.allocation_size());
    }
}
