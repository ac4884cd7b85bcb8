//! One policy's keys: `SHARDS` shards, each under a [`ShardLock`] holding a
//! `hashbrown::HashTable` whose buckets are the keys' hot records
//! ([`KeyHot`], 32 bytes each) and a slab of their cold parts
//! (`Arc<KeyCold>`), which a hot record finds by the index it carries.
//!
//! A lookup hashes the caller's bytes once (foldhash), takes its shard's read
//! side (a swap on the thread's own slot, then a load of the shard's writer
//! flag), probes the control bytes (1 byte a bucket,
//! which stay in L2) and compares the key in the hot record itself (exact
//! for keys up to [`INLINE_KEY`] bytes; longer keys compare their first
//! bytes there and the rest in the cold part). The decision then works on
//! that same record: one cache line from outside L2 per decision. With 100
//! 000 keys the table is ~4.3 MB. A dense record array behind a `u32` index
//! (the layout before) made that two dependent loads, and 48-byte records
//! straddled lines half of the time.
//!
//! Writers (a new key, an eviction) take the shard's write lock; a rehash
//! moves records, which is why nothing outside the lock keeps a pointer or a
//! position into the table. The sweeper walks a shard under its read lock.
//! An evicted key's cold index goes on the shard's free list and is reused
//! by the next new key, so code holding a cold part outside the lock finds
//! its hot record through [`KeyMap::with`], which checks that the slab's
//! entry at that index is still that very `Arc`.

use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, HashTable};

use super::bucket::{key_tag, Bucket, KeyCold, KeyHot, HITS_MASK, INLINE_KEY, MAX_INDEX};
use super::shard_lock::ShardLock;

/// `Slots::swept` holds the decision count in its low bits and a millisecond
/// above them.
const SWEPT_MS_SHIFT: u32 = HITS_MASK.count_ones();

fn swept(now_us: u64, hits: u64) -> u64 {
    ((now_us / 1000) << SWEPT_MS_SHIFT) | hits
}

/// Shards per policy: a power of two. More than the cores of a large gateway,
/// so two cores deciding on different keys rarely share a lock word.
const SHARDS: usize = 64;

#[derive(Default)]
struct Slots {
    /// The keys' hot records, hashed by their key.
    table: HashTable<KeyHot>,
    /// Indexed by a record's [`KeyHot::cold_index`]; `None` for a free index.
    cold: Vec<Option<Arc<KeyCold>>>,
    /// For the sweeper (8 bytes a key, so a sweep over busy keys reads
    /// nothing else but their hot records), indexed like `cold`: the key's
    /// decision count (mod 2^22) at the last sweep, and the millisecond of
    /// the last sweep that saw it change (or of the key's insertion).
    swept: Vec<AtomicU64>,
    /// Free indices below the slab's end, reused lowest first, so live keys
    /// gather at the front and the tail can be given back.
    free: BTreeSet<u32>,
}

impl Slots {
    /// Whether `hot` is `key`'s record (`tag` being its [`key_tag`]).
    #[inline]
    fn holds(&self, hot: &KeyHot, tag: u128, key: &[u8]) -> bool {
        hot.tag == tag
            && (key.len() <= INLINE_KEY
                || self.cold_of(hot).as_ref().is_some_and(|c| c.key() == key))
    }

    fn cold_of(&self, hot: &KeyHot) -> &Option<Arc<KeyCold>> {
        &self.cold[hot.cold_index() as usize]
    }

    /// Drops the free indices at the end of the slab and shrinks the slab
    /// and the table when they are mostly empty: after a burst of distinct
    /// keys (say, random client IPs) has been evicted, the memory goes back
    /// instead of staying at the peak.
    fn give_back_tail(&mut self) {
        while self.cold.last().is_some_and(Option::is_none) {
            let last = self.cold.len() - 1;
            self.free.remove(&(last as u32));
            self.cold.pop();
            self.swept.pop();
        }
        let len = self.cold.len();
        if self.cold.capacity() > 2 * len + 16 {
            self.cold.shrink_to(len + len / 4);
            self.swept.shrink_to(len + len / 4);
        }
        if self.table.capacity() > 4 * self.table.len() + 16 {
            let Slots { table, cold, .. } = self;
            table.shrink_to(table.len(), |h| cold_hash(cold, h));
        }
    }

    /// The bucket of `hot`, a record of the table.
    #[inline]
    fn bucket<'a>(&'a self, hot: &'a KeyHot) -> Bucket<'a> {
        Bucket::new(hot, self.cold_of(hot))
    }
}

/// The table's rehash function: a key's hash is kept in its cold part.
fn cold_hash(cold: &[Option<Arc<KeyCold>>], hot: &KeyHot) -> u64 {
    cold[hot.cold_index() as usize]
        .as_ref()
        .map_or(0, |c| c.hash)
}

/// One shard, alone in its cache lines (every reader loads its writer flag:
/// a neighbour's writes must not invalidate that line).
#[repr(align(128))]
struct Shard(ShardLock<Slots>);

pub(crate) struct KeyMap {
    hasher: DefaultHashBuilder,
    shards: Box<[Shard]>,
}

impl KeyMap {
    pub(crate) fn new() -> KeyMap {
        KeyMap {
            hasher: DefaultHashBuilder::default(),
            shards: (0..SHARDS).map(|_| Shard(ShardLock::default())).collect(),
        }
    }

    /// The hash a key's cold part stores (its table slot and shard follow from it).
    #[inline]
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        // The bytes alone: `hash_one(key)` would also hash a length prefix
        // (one more multiply in the chain), and foldhash's `write` already
        // mixes the length in.
        let mut h = self.hasher.build_hasher();
        h.write(key);
        h.finish()
    }

    fn shard(&self, hash: u64) -> &ShardLock<Slots> {
        // Middle bits: hashbrown uses the low bits for the slot and the top 7
        // for the control byte, so neither loses entropy within a shard.
        &self.shards[(hash >> 32) as usize & (SHARDS - 1)].0
    }

    /// Runs `f` on `key`'s bucket under its shard's read lock; `None` if the
    /// key is unknown.
    #[inline]
    pub(crate) fn get<R>(
        &self,
        hash: u64,
        key: &[u8],
        f: impl FnOnce(Bucket<'_>) -> R,
    ) -> Option<R> {
        self.try_with(hash, key, f).ok()
    }

    /// [`Self::get`] that hands `f` back when the key is unknown.
    #[inline]
    pub(crate) fn try_with<R, F: FnOnce(Bucket<'_>) -> R>(
        &self,
        hash: u64,
        key: &[u8],
        f: F,
    ) -> Result<R, F> {
        let tag = key_tag(key);
        let slots = self.shard(hash).read();
        match slots.table.find(hash, |h| slots.holds(h, tag, key)) {
            Some(hot) => Ok(f(slots.bucket(hot))),
            None => Err(f),
        }
    }

    /// Runs `f` on the bucket whose cold part is `cold`, under its shard's
    /// read lock; `None` once the key has been evicted.
    #[inline]
    pub(crate) fn with<R>(
        &self,
        cold: &Arc<KeyCold>,
        f: impl FnOnce(Bucket<'_>) -> R,
    ) -> Option<R> {
        let slots = self.shard(cold.hash).read();
        match slots.cold.get(cold.index as usize) {
            Some(Some(c)) if Arc::ptr_eq(c, cold) => {}
            _ => return None,
        }
        let hot = slots
            .table
            .find(cold.hash, |h| h.cold_index() == cold.index)
            .expect("a key in the slab has a record");
        Some(f(slots.bucket(hot)))
    }

    /// `key`'s cold part, inserting a fresh key if it is unknown (under the
    /// shard's write lock; `fresh` gets the index the key will have).
    pub(crate) fn get_or_insert(
        &self,
        hash: u64,
        key: &[u8],
        now_us: u64,
        fresh: impl FnOnce(u32) -> KeyCold,
    ) -> Arc<KeyCold> {
        if let Some(c) = self.get(hash, key, |b| b.cold().clone()) {
            return c;
        }
        let tag = key_tag(key);
        let mut guard = self.shard(hash).write();
        let slots = &mut *guard;
        if let Some(c) = slots
            .table
            .find(hash, |h| slots.holds(h, tag, key))
            .and_then(|h| slots.cold_of(h).clone())
        {
            return c;
        }
        let index = match slots.free.pop_first() {
            Some(i) => i,
            None => {
                let i = u32::try_from(slots.cold.len())
                    .ok()
                    .filter(|&i| i <= MAX_INDEX)
                    .expect("at most 2^24 keys per shard");
                slots.cold.push(None);
                slots.swept.push(AtomicU64::new(0));
                i
            }
        };
        let cold = Arc::new(fresh(index));
        debug_assert_eq!((cold.hash, cold.index), (hash, index));
        slots.cold[index as usize] = Some(cold.clone());
        slots.swept[index as usize].store(swept(now_us, 0), Relaxed);
        let Slots {
            table, cold: colds, ..
        } = slots;
        table.insert_unique(hash, KeyHot::new(tag, index), |h| cold_hash(colds, h));
        cold
    }

    /// Calls `f` on every bucket, one shard at a time under its read lock
    /// (an insert into that shard waits until `f` has seen the shard).
    pub(crate) fn for_each(&self, mut f: impl FnMut(Bucket<'_>)) {
        for shard in self.shards.iter() {
            let slots = shard.0.read();
            for hot in slots.table.iter() {
                f(slots.bucket(hot));
            }
        }
    }

    /// The sweeper's walk, one shard at a time under its read lock, in table
    /// order: calls `quiet(bucket, active_at_us)` for every key that has made
    /// no decision since the last sweep, `active_at_us` being the last sweep
    /// that saw it decide (or its insertion); a busy key's cold part is not
    /// touched, only the time it was last seen busy is set to `now_us`.
    pub(crate) fn sweep(&self, now_us: u64, mut quiet: impl FnMut(Bucket<'_>, u64)) {
        for shard in self.shards.iter() {
            let slots = shard.0.read();
            for hot in slots.table.iter() {
                let swept_at = &slots.swept[hot.cold_index() as usize];
                let hits = hot.hits();
                let seen = swept_at.load(Relaxed);
                if seen & HITS_MASK != hits {
                    swept_at.store(swept(now_us, hits), Relaxed);
                } else {
                    quiet(slots.bucket(hot), (seen >> SWEPT_MS_SHIFT) * 1000);
                }
            }
        }
    }

    /// Removes the key whose cold part is `cold` if it is still in the map
    /// and `keep` says false, `keep` being asked under the shard's write lock
    /// (no decision is looking at the key then). Returns whether it was
    /// removed; its index is then free for the next new key.
    pub(crate) fn remove_unless(
        &self,
        cold: &Arc<KeyCold>,
        keep: impl FnOnce(Bucket<'_>) -> bool,
    ) -> bool {
        let mut guard = self.shard(cold.hash).write();
        let slots = &mut *guard;
        let index = cold.index;
        match slots.cold.get(index as usize) {
            Some(Some(c)) if Arc::ptr_eq(c, cold) => {}
            _ => return false,
        }
        let Slots {
            table, cold: colds, ..
        } = slots;
        let Ok(entry) = table.find_entry(cold.hash, |h| h.cold_index() == index) else {
            unreachable!("a key in the slab has a record");
        };
        if keep(Bucket::new(entry.get(), &colds[index as usize])) {
            return false;
        }
        entry.remove();
        slots.cold[index as usize] = None;
        slots.free.insert(index);
        slots.give_back_tail();
        true
    }

    /// How many keys the map holds.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.read().table.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn fresh(map: &KeyMap, key: &[u8], index: u32) -> KeyCold {
        KeyCold::new(
            key,
            map.hash(key),
            index,
            Bytes::copy_from_slice(key),
            0,
            0.2,
        )
    }

    #[test]
    fn finds_inserts_once_removes_and_reuses_slots_for_short_and_long_keys() {
        let map = KeyMap::new();
        let long = [7u8; INLINE_KEY + 10];
        let mut long2 = long;
        long2[INLINE_KEY + 5] = 8; // same tag as `long`, another key
        let keys: Vec<Vec<u8>> = (0..1000u32)
            .map(|i| i.to_string().into_bytes())
            .chain([
                long.to_vec(),
                long2.to_vec(),
                vec![],
                vec![0],
                vec![0; INLINE_KEY],
                vec![0; INLINE_KEY + 1],
            ])
            .collect();
        for round in 0..2 {
            for k in &keys {
                let h = map.hash(k);
                assert!(map.get(h, k, |_| ()).is_none());
                let a = map.get_or_insert(h, k, 0, |i| fresh(&map, k, i));
                let b = map.get_or_insert(h, k, 0, |_| panic!("inserted twice"));
                assert!(Arc::ptr_eq(&a, &b));
                assert_eq!(a.key(), &k[..]);
                assert!(map.with(&a, |b| Arc::ptr_eq(b.cold(), &a)).unwrap());
            }
            assert_eq!(map.len(), keys.len());
            let slots: usize = map.shards.iter().map(|s| s.0.read().cold.len()).sum();
            assert_eq!(slots, keys.len(), "slots reused, none leaked");
            let mut seen = 0;
            map.for_each(|_| seen += 1);
            assert_eq!(seen, keys.len());
            for k in &keys {
                let c = map.get(map.hash(k), k, |b| b.cold().clone()).unwrap();
                assert_eq!(c.key(), &k[..], "round {round}");
                assert!(!map.remove_unless(&c, |_| true));
                assert!(map.remove_unless(&c, |_| false));
                assert!(!map.remove_unless(&c, |_| false), "already gone");
                assert!(map.get(map.hash(k), k, |_| ()).is_none());
                assert!(map.with(&c, |_| ()).is_none(), "evicted");
            }
            assert_eq!(map.len(), 0);
        }
        // Everything evicted: every shard gave its arrays back.
        for s in map.shards.iter() {
            let s = s.0.read();
            assert_eq!((s.cold.len(), s.free.len()), (0, 0));
            assert!(s.cold.capacity() <= 16, "{}", s.cold.capacity());
            assert!(s.table.capacity() <= 16, "{}", s.table.capacity());
        }
    }

    #[test]
    fn evicting_a_burst_gives_the_memory_back_and_reuse_is_lowest_first() {
        let map = KeyMap::new();
        let keys: Vec<Vec<u8>> = (0..20_000u32)
            .map(|i| format!("ip:{i}").into_bytes())
            .collect();
        let colds: Vec<Arc<KeyCold>> = keys
            .iter()
            .map(|k| map.get_or_insert(map.hash(k), k, 0, |i| fresh(&map, k, i)))
            .collect();
        let capacity = |map: &KeyMap| -> usize {
            map.shards
                .iter()
                .map(|s| {
                    let s = s.0.read();
                    s.table.capacity() + s.cold.capacity()
                })
                .sum()
        };
        let before = capacity(&map);
        assert!(before >= 20_000);
        // The burst goes idle and is evicted; the first 1000 keys stay.
        for c in &colds[1000..] {
            assert!(map.remove_unless(c, |_| false));
        }
        assert_eq!(map.len(), 1000);
        assert!(
            capacity(&map) < before / 4,
            "{} of {before}",
            capacity(&map)
        );
        for (k, c) in keys.iter().zip(&colds).take(1000) {
            assert!(map.with(c, |b| b.cold().key() == &k[..]).unwrap());
        }
        // A freed slot in the middle is the next one reused.
        let mid = &colds[500];
        assert!(map.remove_unless(mid, |_| false));
        let shard_of = |h: u64| (h >> 32) as usize & (SHARDS - 1);
        let k = (0..)
            .map(|i: u32| format!("new{i}").into_bytes())
            .find(|k| shard_of(map.hash(k)) == shard_of(mid.hash))
            .unwrap();
        let c = map.get_or_insert(map.hash(&k), &k, 0, |i| fresh(&map, &k, i));
        assert_eq!(c.index, mid.index);
    }

    #[test]
    fn a_reused_slot_is_not_found_through_the_old_key() {
        let map = KeyMap::new();
        // Two keys in one shard: find a second key hashing to the first's shard.
        let a = b"a".to_vec();
        let shard = |k: &[u8]| (map.hash(k) >> 32) as usize & (SHARDS - 1);
        let b = (0..)
            .map(|i: u32| format!("b{i}").into_bytes())
            .find(|k| shard(k) == shard(&a))
            .unwrap();
        let ca = map.get_or_insert(map.hash(&a), &a, 0, |i| fresh(&map, &a, i));
        assert!(map.remove_unless(&ca, |_| false));
        let cb = map.get_or_insert(map.hash(&b), &b, 0, |i| fresh(&map, &b, i));
        assert_eq!(ca.index, cb.index, "the slot was reused");
        assert!(map.with(&ca, |_| ()).is_none());
        assert!(map.with(&cb, |_| ()).is_some());
    }
}
