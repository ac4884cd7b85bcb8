//! One policy's keys: `SHARDS` shards, each a `hashbrown::HashTable` of
//! `Arc<KeyBucket>` under a `parking_lot::RwLock`.
//!
//! A lookup hashes the caller's bytes once (foldhash), takes its shard's read
//! lock (two atomic read-modify-writes on a word in the shard's own cache
//! line, usually already in L1), probes the control bytes and the slot (8
//! bytes: the `Arc` pointer) and compares the key stored inline in the bucket,
//! in the bucket's second cache line (keys up to [`INLINE_KEY`] bytes; longer
//! ones are boxed). The decision itself then works on the bucket's first
//! line. So a lookup reads, beyond the shard header: one control group, one
//! slot and the two lines of the bucket, which it needs anyway. Nothing is
//! allocated and no fence is issued.
//!
//! Writers (a new key, an eviction) take the shard's write lock; the sweeper
//! walks a shard under its read lock.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::hash_table::Entry;
use hashbrown::{DefaultHashBuilder, HashTable};
use parking_lot::RwLock;

use super::bucket::KeyBucket;

/// Shards per policy: a power of two. More than the cores of a large gateway,
/// so two cores deciding on different keys rarely share a lock word.
const SHARDS: usize = 64;

/// Keys up to this many bytes live inside their bucket; longer keys are boxed
/// (one more dependent memory read per lookup).
pub(crate) const INLINE_KEY: usize = 46;

/// One shard, alone in its cache lines (the lock word is written by every
/// read lock, so it must not share a line with a neighbour's).
#[repr(align(128))]
struct Shard(RwLock<HashTable<Arc<KeyBucket>>>);

pub(crate) struct KeyMap {
    hasher: DefaultHashBuilder,
    shards: Box<[Shard]>,
}

impl KeyMap {
    pub(crate) fn new() -> KeyMap {
        KeyMap {
            hasher: DefaultHashBuilder::default(),
            shards: (0..SHARDS)
                .map(|_| Shard(RwLock::new(HashTable::new())))
                .collect(),
        }
    }

    /// The hash a bucket for `key` stores (its table slot and shard follow from it).
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn shard(&self, hash: u64) -> &RwLock<HashTable<Arc<KeyBucket>>> {
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
        f: impl FnOnce(&Arc<KeyBucket>) -> R,
    ) -> Option<R> {
        self.try_with(hash, key, f).ok()
    }

    /// [`Self::get`] that hands `f` back when the key is unknown.
    #[inline]
    pub(crate) fn try_with<R, F: FnOnce(&Arc<KeyBucket>) -> R>(
        &self,
        hash: u64,
        key: &[u8],
        f: F,
    ) -> Result<R, F> {
        let table = self.shard(hash).read();
        match table.find(hash, |b| b.key() == key) {
            Some(b) => Ok(f(b)),
            None => Err(f),
        }
    }

    /// `key`'s bucket, inserting `fresh()` if the key is unknown (another
    /// thread's insert wins a race; `fresh` is built outside the lock).
    pub(crate) fn get_or_insert(
        &self,
        hash: u64,
        key: &[u8],
        fresh: impl FnOnce() -> KeyBucket,
    ) -> Arc<KeyBucket> {
        if let Some(b) = self.get(hash, key, Arc::clone) {
            return b;
        }
        let fresh = Arc::new(fresh());
        let mut table = self.shard(hash).write();
        match table.entry(hash, |b| b.key() == key, |b| b.hash) {
            Entry::Occupied(e) => e.get().clone(),
            Entry::Vacant(e) => e.insert(fresh).get().clone(),
        }
    }

    /// Calls `f` on every bucket, one shard at a time under its read lock
    /// (an insert into that shard waits until `f` has seen the shard).
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Arc<KeyBucket>)) {
        for shard in self.shards.iter() {
            for b in shard.0.read().iter() {
                f(b);
            }
        }
    }

    /// Removes `bucket` if it is still in the map and `keep` says false,
    /// `keep` being asked under the shard's write lock (no decision is looking
    /// at the bucket then). Returns whether it was removed.
    pub(crate) fn remove_unless(
        &self,
        bucket: &Arc<KeyBucket>,
        keep: impl FnOnce(&KeyBucket) -> bool,
    ) -> bool {
        let mut table = self.shard(bucket.hash).write();
        match table.find_entry(bucket.hash, |b| Arc::ptr_eq(b, bucket)) {
            Ok(e) if !keep(bucket) => {
                e.remove();
                true
            }
            _ => false,
        }
    }

    /// How many keys the map holds.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.read().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn bucket(map: &KeyMap, key: &[u8]) -> KeyBucket {
        KeyBucket::new(key, map.hash(key), Bytes::copy_from_slice(key), 0, 0.2)
    }

    #[test]
    fn finds_inserts_once_and_removes_short_and_long_keys() {
        let map = KeyMap::new();
        let long = [7u8; INLINE_KEY + 10];
        let keys: Vec<Vec<u8>> = (0..1000u32)
            .map(|i| i.to_string().into_bytes())
            .chain([long.to_vec(), vec![], vec![0; INLINE_KEY]])
            .collect();
        for k in &keys {
            let h = map.hash(k);
            assert!(map.get(h, k, |_| ()).is_none());
            let a = map.get_or_insert(h, k, || bucket(&map, k));
            let b = map.get_or_insert(h, k, || panic!("inserted twice"));
            assert!(Arc::ptr_eq(&a, &b));
            assert_eq!(a.key(), &k[..]);
        }
        assert_eq!(map.len(), keys.len());
        let mut seen = 0;
        map.for_each(|_| seen += 1);
        assert_eq!(seen, keys.len());
        for k in &keys {
            let b = map.get(map.hash(k), k, Arc::clone).unwrap();
            assert!(!map.remove_unless(&b, |_| true));
            assert!(map.remove_unless(&b, |_| false));
            assert!(!map.remove_unless(&b, |_| false), "already gone");
            assert!(map.get(map.hash(k), k, |_| ()).is_none());
        }
        assert_eq!(map.len(), 0);
    }
}
