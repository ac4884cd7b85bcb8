//! Whole values taken from a key, copied, and stored under another key with
//! their deadline (RENAME, RENAMENX, COPY, on one shard or across two), a
//! random live key (RANDOMKEY), and what OBJECT and MEMORY USAGE read of a
//! key. Nothing here looks inside a value: a value moves whole, and its
//! effect is [`Store::value_effect`]'s, so every kind of value moves alike.

use std::hash::BuildHasher;

use bytes::Bytes;

use super::compact::Compact;
use super::table::INLINE_KEY;
use super::{Entry, Store, Value, MONOTONIC};
use crate::clock::unix_of;

/// A key's value with its deadline as the store keeps it (Unix ms,
/// [`MONOTONIC`] | monotonic ms for rate-limit states, 0 for none), taken
/// out of one key to be stored under another, on this shard or another
/// (every shard reads the one monotonic clock, so a monotonic deadline
/// means the same instant on all of them: the TTL moves exactly).
#[derive(Debug, Clone, PartialEq)]
pub struct Moved {
    value: Value,
    at: u64,
}

impl Moved {
    /// The value.
    pub fn value(&self) -> &Value {
        &self.value
    }
}

impl Store {
    /// Removes the live key `key` and returns its value with its deadline
    /// (`None` when absent, or just reclaimed at its deadline). Emits `DEL`.
    pub fn take(&mut self, key: &[u8], now_ms: u64) -> Option<Moved> {
        let (i, h) = self.locate(key);
        let j = self.live_at(i, h, key, now_ms)?;
        let e = self.remove_at(i, j, false);
        Some(Moved {
            value: e.value,
            at: e.expire_at,
        })
    }

    /// A copy of the live key `key`'s value with its deadline (`None` when
    /// absent). Emits nothing.
    pub fn peek(&mut self, key: &[u8], now_ms: u64) -> Option<Moved> {
        let e = self.get(key, now_ms)?;
        Some(Moved {
            value: e.value.clone(),
            at: e.expire_at,
        })
    }

    /// Stores `moved` under `key` with its deadline, in place of whatever
    /// `key` held: a live previous value is removed first (`DEL`, as Redis
    /// deletes the destination before adding), then the effect that
    /// recreates the value is emitted with its deadline as Unix ms.
    pub fn restore(&mut self, key: &[u8], moved: Moved, now_ms: u64) {
        self.remove(key, now_ms);
        let unix = match moved.at {
            0 => None,
            d if d & MONOTONIC != 0 => Some(unix_of(self.clock, d & !MONOTONIC)),
            d => Some(d),
        };
        self.emit_value(key, &moved.value, unix);
        self.put(key, moved.value, moved.at, now_ms);
    }

    /// `(OBJECT ENCODING, OBJECT REFCOUNT, MEMORY USAGE)` of the live key
    /// `key` (`None` when absent), leaving a compact entry where it is.
    /// The memory is the entry (48 bytes, or 32 for a compact one) and its
    /// 2-byte tag, the key's bytes when they do not fit inline, and what
    /// the value holds outside the entry ([`Value::heap_bytes`]).
    pub fn describe(&mut self, key: &[u8], now_ms: u64) -> Option<(&'static str, i64, usize)> {
        let (i, h) = self.locate(key);
        let tag = std::mem::size_of::<u16>();
        match self.compact_lookup(i, h, key, now_ms) {
            Ok(c) => c.map(|c| {
                let v = c.value();
                (
                    v.encoding(),
                    v.refcount(),
                    std::mem::size_of::<Compact>() + tag,
                )
            }),
            Err(()) => {
                let j = self.live_at(i, h, key, now_ms)?;
                let e = self.tables[i].at(j);
                let boxed_key = if key.len() > INLINE_KEY { key.len() } else { 0 };
                let bytes = std::mem::size_of::<Entry>() + tag + boxed_key + e.value.heap_bytes();
                Some((e.value.encoding(), e.value.refcount(), bytes))
            }
        }
    }

    /// A live key chosen at random (`None` when the shard holds none): a
    /// random slot table, the first non-empty one from there, a random entry
    /// of it. A key past its deadline met this way is reclaimed and another
    /// drawn, up to 100 draws (on a replica, which reclaims nothing, such a
    /// key is answered after the 100th, as Redis answers one).
    pub fn random_key(&mut self, now_ms: u64) -> Option<Bytes> {
        let n = self.tables.len();
        let mut last = None;
        for _ in 0..100 {
            if self.counts.keys == 0 {
                return None;
            }
            let start = (self.next_random() % n as u64) as usize;
            let i = (0..n)
                .map(|d| (start + d) % n)
                .find(|&i| self.tables[i].len() + self.tables[i].compact.len() > 0)?;
            let r = self.next_random();
            let t = &self.tables[i];
            let pick = (r % (t.len() + t.compact.len()) as u64) as usize;
            let key = match pick.checked_sub(t.len()) {
                None => Bytes::copy_from_slice(t.at(pick).key()),
                Some(c) => Bytes::copy_from_slice(t.compact.at(c).key()),
            };
            let h = self.hasher.hash_one(&key[..]);
            if self.replica {
                let live = self.compact_lookup(i, h, &key, now_ms).map_or_else(
                    |()| self.get_at(i, h, &key, now_ms).is_some(),
                    |c| c.is_some(),
                );
                if live {
                    return Some(key);
                }
                last = Some(key);
                continue;
            }
            if self.type_of(&key, now_ms).is_some() {
                return Some(key);
            }
        }
        last
    }

    /// The next number of the store's xorshift generator (RANDOMKEY).
    fn next_random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }
}
