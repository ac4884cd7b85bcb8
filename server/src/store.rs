//! One shard's keyspace: values, expiry deadlines and their reclamation.
//!
//! The keyspace is one small `hashbrown` table per hash slot the shard owns
//! (Redis 7.4 keeps a dict per slot for the same reasons):
//! - `SCAN` walks slots in order and returns a slot's keys all at once, so a
//!   key present for the whole scan is returned at least once however the
//!   tables grow or shrink (the cursor is a slot number, never a bucket index);
//! - cluster mode can later move a slot by moving its table;
//! - growth rehashes one small table at a time, never the whole shard.
//!
//! Expiry deadlines are absolute Unix ms stored with the key (0 = none). A key
//! past its deadline is absent to every reader ([`Store::get`] reclaims it on
//! the spot: lazy expiry), and [`Store::sweep`] walks the slots like a clock
//! hand under a time budget (active expiry). A hand rather than Redis's random
//! sampling because hashbrown offers no cheap random pick, and a hand visits
//! every key in a bounded number of cycles while costing no memory per key (a
//! timer wheel would cost a node per key with a TTL, and rate-limit keys all
//! have one; DESIGN.md decision 7).

use bytes::Bytes;
use hashbrown::HashTable;
use std::hash::BuildHasher;

use crate::effects::{Effect, EffectLog};

/// Longest string kept inside its value rather than in an allocation.
pub const SMALL_STRING: usize = 30;

/// A stored value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string longer than [`SMALL_STRING`] bytes (Redis "string" type, raw
    /// encoding); GET shares it by reference count.
    Str(Bytes),
    /// A string of at most [`SMALL_STRING`] bytes, inside the value (Redis's
    /// "embstr" idea): no allocation to store it, and GET copies it out rather
    /// than touching a reference count from two threads (an 8% hot spot in a
    /// `GET -P 16` profile). The enum is 40 bytes either way.
    Small {
        /// Bytes used.
        len: u8,
        /// The string, zero-padded.
        bytes: [u8; SMALL_STRING],
    },
    /// A string that holds a canonical decimal `i64` (Redis "int" encoding);
    /// GET renders it, INCR updates it in place.
    Int(i64),
    /// A TOKENLEASE / TOKENRETURN token bucket (32 bytes).
    TokenBucket(crate::commands::ratelimit::token_bucket::Bucket),
    /// A SLIDINGWINDOW counter pair (32 bytes).
    SlidingWindow(crate::commands::ratelimit::sliding_window::Window),
    /// A CL.THROTTLE / GCRA theoretical arrival time (24 bytes).
    Gcra(crate::commands::ratelimit::gcra::Tat),
}

impl Value {
    /// The name `TYPE` reports.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) | Value::Small { .. } | Value::Int(_) => "string",
            Value::TokenBucket(_) => crate::commands::ratelimit::type_names::TOKEN_BUCKET,
            Value::SlidingWindow(_) => crate::commands::ratelimit::type_names::SLIDING_WINDOW,
            Value::Gcra(_) => crate::commands::ratelimit::type_names::GCRA,
        }
    }

    /// Builds a string value: the integer form when `bytes` is a canonical
    /// `i64` (so that it reads back byte for byte), inline when small.
    pub fn from_bytes(bytes: &[u8]) -> Value {
        match leasehold_protocol::int::parse_i64(bytes) {
            Some(i) if bytes.len() <= 20 => Value::Int(i),
            _ if bytes.len() <= SMALL_STRING => {
                let mut inline = [0; SMALL_STRING];
                inline[..bytes.len()].copy_from_slice(bytes);
                Value::Small {
                    len: bytes.len() as u8,
                    bytes: inline,
                }
            }
            _ => Value::Str(Bytes::copy_from_slice(bytes)),
        }
    }

    /// Calls `f` with the string form of a string value (`None` for other
    /// types), without allocating.
    pub fn with_string<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        match self {
            Value::Str(b) => Some(f(b)),
            Value::Small { len, bytes } => Some(f(&bytes[..*len as usize])),
            Value::Int(i) => Some(f(itoa::Buffer::new().format(*i).as_bytes())),
            Value::TokenBucket(_) | Value::SlidingWindow(_) | Value::Gcra(_) => None,
        }
    }

    /// The string form of a string value, or `None` for other types.
    pub fn as_bytes(&self) -> Option<Bytes> {
        match self {
            Value::Str(b) => Some(b.clone()),
            other => other.with_string(Bytes::copy_from_slice),
        }
    }
}

/// Longest key stored inside its entry rather than in an allocation of its own.
const INLINE_KEY: usize = 22;

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

impl Default for KeyBytes {
    fn default() -> Self {
        KeyBytes::Inline {
            len: 0,
            bytes: [0; INLINE_KEY],
        }
    }
}

/// One key and what it holds.
#[derive(Debug)]
pub struct Entry {
    key: KeyBytes,
    expire_at: u64,
    /// The value; handlers may change it in place through [`Store::get`].
    pub value: Value,
}

impl Entry {
    /// The key bytes.
    pub fn key(&self) -> &[u8] {
        self.key.as_slice()
    }

    /// The absolute deadline in Unix ms, or `None` for no TTL.
    pub fn expire_at(&self) -> Option<u64> {
        (self.expire_at != 0).then_some(self.expire_at)
    }

    /// A key is gone from its deadline on. (Redis's `keyIsExpired` keeps it
    /// for that one millisecond, answering PTTL 0; Leasehold does not, so that
    /// a rate-limit key is gone exactly when its bucket is full again.)
    fn expired(&self, now_ms: u64) -> bool {
        self.expire_at != 0 && self.expire_at <= now_ms
    }
}

/// Counters a shard keeps about its keyspace (summed over shards for INFO).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StoreCounts {
    /// Live keys (including ones past their deadline not yet reclaimed).
    pub keys: u64,
    /// Keys with a TTL.
    pub expires: u64,
    /// Keys reclaimed because their deadline passed (INFO `expired_keys`).
    pub expired: u64,
}

/// One shard's keyspace.
pub struct Store {
    first_slot: usize,
    tables: Vec<HashTable<Entry>>,
    /// Keys with a TTL per slot table, so active expiry skips tables with none.
    slot_expires: Vec<u32>,
    hasher: foldhash::fast::RandomState,
    counts: StoreCounts,
    sweep_slot: usize,
    /// Tables that lost a key to lazy expiry, to be shrunk by the next sweep.
    shrink_later: Vec<usize>,
    /// The replication backlog every change is written to.
    pub effects: EffectLog,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// An empty keyspace for the slots `first_slot .. first_slot + slots`.
    pub fn new(first_slot: usize, slots: usize, backlog_bytes: usize) -> Store {
        let mut tables = Vec::with_capacity(slots);
        tables.resize_with(slots, HashTable::new);
        Store {
            first_slot,
            tables,
            slot_expires: vec![0; slots],
            hasher: foldhash::fast::RandomState::default(),
            counts: StoreCounts::default(),
            sweep_slot: 0,
            shrink_later: Vec::new(),
            effects: EffectLog::new(backlog_bytes),
        }
    }

    /// Key, TTL and expiry counters.
    pub fn counts(&self) -> StoreCounts {
        self.counts
    }

    /// The slots this store owns, as a range of slot numbers.
    pub fn slot_range(&self) -> std::ops::Range<usize> {
        self.first_slot..self.first_slot + self.tables.len()
    }

    fn index(&self, key: &[u8]) -> usize {
        let slot = crate::slot::key_slot(key) as usize;
        debug_assert!(
            self.slot_range().contains(&slot),
            "slot {slot} routed to the wrong shard"
        );
        slot - self.first_slot
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The live entry for `key`, reclaiming it first when its deadline has passed.
    pub fn get(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        let i = self.index(key);
        let h = self.hash(key);
        // One probe: the same entry handle either reclaims or returns the key.
        let found = self.tables[i]
            .find_entry(h, |e| e.key.as_slice() == key)
            .ok()?;
        if !found.get().expired(now_ms) {
            return Some(found.into_mut());
        }
        let (entry, _) = found.remove();
        // The borrow of `tables` returned above covers the whole function (a
        // known NLL limit), so the table is shrunk by the next sweep, not here.
        self.shrink_later.push(i);
        self.counts.keys -= 1;
        self.counts.expired += 1;
        Self::ttl_changed(&mut self.counts, &mut self.slot_expires, i, true, false);
        self.effects.emit(Effect::Del {
            key: entry.key.as_slice(),
        });
        None
    }

    /// Keeps the TTL counters (whole shard and per slot) in step when key `i`'s
    /// table gains or loses a key with a TTL.
    /// (An associated function over the two counter fields, so that it can run
    /// while an entry of `tables` is borrowed.)
    fn ttl_changed(
        counts: &mut StoreCounts,
        slot_expires: &mut [u32],
        i: usize,
        had: bool,
        has: bool,
    ) {
        match (had, has) {
            (false, true) => {
                counts.expires += 1;
                slot_expires[i] += 1;
            }
            (true, false) => {
                counts.expires -= 1;
                slot_expires[i] -= 1;
            }
            _ => {}
        }
    }

    /// Stores `value` under `key` with the deadline `expire_at` (Unix ms, `None`
    /// for no TTL), replacing any previous value and deadline.
    pub fn set(&mut self, key: &[u8], value: Value, expire_at: Option<u64>) -> &mut Entry {
        let i = self.index(key);
        let h = self.hash(key);
        let at = expire_at.unwrap_or(0);
        let hasher = &self.hasher;
        let (counts, slot_expires) = (&mut self.counts, &mut self.slot_expires);
        match self.tables[i].entry(
            h,
            |e| e.key.as_slice() == key,
            |e| hasher.hash_one(e.key.as_slice()),
        ) {
            hashbrown::hash_table::Entry::Occupied(o) => {
                let e = o.into_mut();
                Self::ttl_changed(counts, slot_expires, i, e.expire_at != 0, at != 0);
                e.expire_at = at;
                e.value = value;
                e
            }
            hashbrown::hash_table::Entry::Vacant(v) => {
                counts.keys += 1;
                Self::ttl_changed(counts, slot_expires, i, false, at != 0);
                let entry = Entry {
                    key: KeyBytes::new(key),
                    expire_at: at,
                    value,
                };
                v.insert(entry).into_mut()
            }
        }
    }

    /// Changes the deadline of an existing key (`None` removes the TTL).
    /// Returns false when the key is absent. The caller has already checked
    /// liveness with [`Store::get`] under the same time snapshot.
    pub fn set_expire(&mut self, key: &[u8], expire_at: Option<u64>) -> bool {
        let i = self.index(key);
        let h = self.hash(key);
        let Some(e) = self.tables[i].find_mut(h, |e| e.key.as_slice() == key) else {
            return false;
        };
        let at = expire_at.unwrap_or(0);
        let had = std::mem::replace(&mut e.expire_at, at) != 0;
        Self::ttl_changed(&mut self.counts, &mut self.slot_expires, i, had, at != 0);
        true
    }

    /// Removes `key`; returns its entry if it was live. Emits `DEL` when it existed.
    pub fn remove(&mut self, key: &[u8], now_ms: u64) -> Option<Entry> {
        let i = self.index(key);
        let h = self.hash(key);
        let e = self.remove_at(i, h, key, false)?;
        if e.expired(now_ms) {
            self.counts.expired += 1;
            return None;
        }
        Some(e)
    }

    fn remove_at(&mut self, i: usize, h: u64, key: &[u8], expired: bool) -> Option<Entry> {
        let table = &mut self.tables[i];
        let found = table.find_entry(h, |e| e.key.as_slice() == key).ok()?;
        let (entry, _) = found.remove();
        Self::maybe_shrink(table, &self.hasher);
        self.counts.keys -= 1;
        Self::ttl_changed(
            &mut self.counts,
            &mut self.slot_expires,
            i,
            entry.expire_at != 0,
            false,
        );
        if expired {
            self.counts.expired += 1;
        }
        self.effects.emit(Effect::Del { key });
        Some(entry)
    }

    /// Gives memory back when a table is mostly empty.
    ///
    /// Judged by the allocation, not `capacity()`: hashbrown leaves tombstones
    /// behind removals, and `capacity()` (items + growth left) shrinks with
    /// them, so a table emptied by expiry could report a tiny capacity while
    /// still holding all its buckets.
    fn maybe_shrink(table: &mut HashTable<Entry>, hasher: &foldhash::fast::RandomState) {
        let per_slot = std::mem::size_of::<Entry>() + 1;
        let buckets = table.allocation_size() / per_slot;
        // An empty table always gives its memory back (at 1M keys, tables
        // emptied by expiry held 45 MB until this); a small one is otherwise
        // left alone so that a few inserts and deletes do not churn.
        if (table.is_empty() && buckets > 0) || (buckets > 32 && table.len() * 4 < buckets) {
            table.shrink_to(table.len() * 2, |e| hasher.hash_one(e.key.as_slice()));
        }
    }

    /// Bytes held by the slot tables' bucket arrays (not counting boxed keys
    /// and large values).
    pub fn table_bytes(&self) -> usize {
        self.tables.iter().map(HashTable::allocation_size).sum()
    }

    /// Removes every key. Returns how many there were.
    pub fn clear(&mut self) -> u64 {
        let n = self.counts.keys;
        for t in &mut self.tables {
            *t = HashTable::new();
        }
        self.counts.keys = 0;
        self.counts.expires = 0;
        self.slot_expires.iter_mut().for_each(|n| *n = 0);
        self.effects.emit(Effect::Flush);
        n
    }

    /// Calls `f` for every live key in `slot`.
    pub fn for_each_in_slot(&self, slot: usize, now_ms: u64, mut f: impl FnMut(&Entry)) {
        for e in self.tables[slot - self.first_slot].iter() {
            if !e.expired(now_ms) {
                f(e);
            }
        }
    }

    /// Active expiry: walks slot tables from where the last call stopped,
    /// reclaiming keys past their deadline, until `max_slots` slots are visited
    /// or `deadline` returns true (checked between slots). Returns
    /// `(entries examined, keys reclaimed)`.
    pub fn sweep(
        &mut self,
        now_ms: u64,
        max_slots: usize,
        mut deadline: impl FnMut() -> bool,
    ) -> (u64, u64) {
        let mut examined = 0u64;
        let mut reclaimed = 0u64;
        let n = self.tables.len();
        let mut expired_keys: Vec<KeyBytes> = Vec::new();
        for i in std::mem::take(&mut self.shrink_later) {
            Self::maybe_shrink(&mut self.tables[i], &self.hasher);
        }
        for _ in 0..max_slots.min(n) {
            let i = self.sweep_slot;
            self.sweep_slot = (self.sweep_slot + 1) % n;
            if self.slot_expires[i] == 0 {
                continue;
            }
            let table = &mut self.tables[i];
            examined += table.len() as u64;
            table.retain(|e| {
                if e.expired(now_ms) {
                    expired_keys.push(std::mem::take(&mut e.key));
                    false
                } else {
                    true
                }
            });
            if !expired_keys.is_empty() {
                Self::maybe_shrink(table, &self.hasher);
                self.slot_expires[i] -= expired_keys.len() as u32;
                for k in expired_keys.drain(..) {
                    reclaimed += 1;
                    self.effects.emit(Effect::Del { key: k.as_slice() });
                }
            }
            if deadline() {
                break;
            }
        }
        self.counts.keys -= reclaimed;
        self.counts.expires -= reclaimed;
        self.counts.expired += reclaimed;
        (examined, reclaimed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Store {
        Store::new(0, 16384, 1 << 16)
    }

    #[test]
    fn set_get_and_lazy_expiry() {
        let mut s = store();
        s.set(b"k", Value::from_bytes(b"v"), Some(1000));
        assert_eq!(
            s.counts(),
            StoreCounts {
                keys: 1,
                expires: 1,
                expired: 0
            }
        );
        assert!(s.get(b"k", 999).is_some());
        assert!(s.get(b"k", 1000).is_none());
        assert_eq!(
            s.counts(),
            StoreCounts {
                keys: 0,
                expires: 0,
                expired: 1
            }
        );
    }

    #[test]
    fn keys_inline_and_boxed_read_back() {
        let mut s = store();
        let short = vec![b'a'; INLINE_KEY];
        let long = vec![b'b'; INLINE_KEY + 1];
        for k in [&b""[..], &short, &long] {
            s.set(k, Value::Int(k.len() as i64), None);
        }
        for k in [&b""[..], &short, &long] {
            let e = s.get(k, 0).unwrap();
            assert_eq!(e.key(), k);
            assert_eq!(e.value, Value::Int(k.len() as i64));
        }
        assert_eq!(std::mem::size_of::<KeyBytes>(), 24);
        assert_eq!(std::mem::size_of::<Entry>(), 72);
    }

    #[test]
    fn int_encoding_reads_back_byte_for_byte() {
        assert_eq!(Value::from_bytes(b"123"), Value::Int(123));
        assert_eq!(
            Value::from_bytes(b"0123").as_bytes().unwrap(),
            Bytes::from_static(b"0123")
        );
        assert!(matches!(
            Value::from_bytes(b"0123"),
            Value::Small { len: 4, .. }
        ));
        let long = [b'x'; SMALL_STRING + 1];
        assert_eq!(
            Value::from_bytes(&long),
            Value::Str(Bytes::copy_from_slice(&long))
        );
        assert_eq!(std::mem::size_of::<Value>(), 40);
        assert_eq!(
            Value::Int(-5).as_bytes().unwrap(),
            Bytes::from_static(b"-5")
        );
    }

    #[test]
    fn sweep_reclaims_without_reads_and_counts() {
        let mut s = store();
        for i in 0..1000u32 {
            let key = format!("k{i}");
            s.set(
                key.as_bytes(),
                Value::Int(1),
                Some(if i % 2 == 0 { 10 } else { 0 }).filter(|&t| t != 0),
            );
        }
        assert_eq!(s.counts().expires, 500);
        let (_, reclaimed) = s.sweep(11, 16384, || false);
        assert_eq!(reclaimed, 500);
        assert_eq!(
            s.counts(),
            StoreCounts {
                keys: 500,
                expires: 0,
                expired: 500
            }
        );
    }

    #[test]
    fn expiry_gives_small_tables_back_too() {
        let mut s = store();
        for i in 0..100_000u32 {
            s.set(
                format!("k:{i}").as_bytes(),
                Value::Int(1),
                Some(10 + u64::from(i % 7)),
            );
        }
        for now in [12, 14, 16, 18] {
            s.sweep(now, 16384, || false);
        }
        assert_eq!(s.counts().keys, 0);
        assert_eq!(s.table_bytes(), 0);
    }

    #[test]
    fn lazy_expiry_gives_memory_back_at_the_next_sweep() {
        let mut s = store();
        for i in 0..10_000u32 {
            s.set(format!("{{t}}k{i}").as_bytes(), Value::Int(1), Some(10));
        }
        for i in 0..10_000u32 {
            assert!(s.get(format!("{{t}}k{i}").as_bytes(), 10).is_none());
        }
        s.sweep(10, 1, || false);
        assert_eq!(s.table_bytes(), 0);
    }

    #[test]
    fn expiry_gives_table_memory_back() {
        let mut s = store();
        // One hash tag: every key in one slot table, which grows large.
        for i in 0..10_000u32 {
            s.set(format!("{{t}}k{i}").as_bytes(), Value::Int(1), Some(10));
        }
        let full = s.table_bytes();
        assert!(full > 10_000 * std::mem::size_of::<Entry>(), "{full}");
        for step in 0..100 {
            // Expire in steps, as a sweep meets keys over time.
            let now = if step < 99 { 5 } else { 11 };
            s.sweep(now, 16384, || false);
        }
        assert_eq!(s.counts().keys, 0);
        assert_eq!(s.table_bytes(), 0);
    }

    #[test]
    fn deleting_gives_table_memory_back() {
        let mut s = store();
        for i in 0..10_000u32 {
            s.set(format!("{{t}}k{i}").as_bytes(), Value::Int(1), None);
        }
        for i in 0..10_000u32 {
            s.remove(format!("{{t}}k{i}").as_bytes(), 0);
        }
        assert!(
            s.table_bytes() < 64 * std::mem::size_of::<Entry>(),
            "{}",
            s.table_bytes()
        );
    }
}
