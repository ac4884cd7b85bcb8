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
//! have one).

use std::hash::BuildHasher;

mod compact;
mod emit;
mod expiry;
mod table;
mod value;

use crate::clock::{mono_of, Now};
use crate::effects::{Effect, EffectLog};
use compact::{Compact, COMPACT_MAX};
pub use table::{Entry, INLINE_KEY, MONOTONIC};
use table::{Hasher, SlotTable};
pub use value::{RateState, Value, SMALL_STRING};

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
    tables: Vec<SlotTable>,
    /// Keys with a TTL per slot table, so active expiry skips tables with none.
    slot_expires: Vec<u32>,
    hasher: Hasher,
    counts: StoreCounts,
    sweep_slot: usize,
    /// Where the sweep resumes inside `sweep_slot` (0: at its start).
    sweep_pos: usize,
    /// The shard's latest clock reading, which turns compact entries'
    /// monotonic deadlines into Unix ones ([`Store::set_clock`]).
    clock: Now,
    /// The replication backlog every change is written to; only the store
    /// writes it, one effect per mutation.
    effects: EffectLog,
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
        tables.resize_with(slots, SlotTable::default);
        Store {
            first_slot,
            tables,
            slot_expires: vec![0; slots],
            hasher: Hasher::default(),
            counts: StoreCounts::default(),
            sweep_slot: 0,
            sweep_pos: 0,
            clock: Now::default(),
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

    /// The table index and hash of `key`.
    fn locate(&self, key: &[u8]) -> (usize, u64) {
        let slot = crate::slot::key_slot(key) as usize;
        debug_assert!(
            self.slot_range().contains(&slot),
            "slot {slot} routed to the wrong shard"
        );
        (slot - self.first_slot, self.hasher.hash_one(key))
    }

    /// Records the shard's clock reading for this batch: compact entries'
    /// deadlines are monotonic, and read as Unix ms under it.
    pub fn set_clock(&mut self, now: Now) {
        self.clock = now;
    }

    /// The position of `key` among table `i`'s general entries, moving it
    /// there first if it is a compact entry (so that generic readers and
    /// writers see one kind of entry; the next rate-limit write packs it
    /// again).
    fn find_entry(&mut self, i: usize, h: u64, key: &[u8]) -> Option<usize> {
        let table = &mut self.tables[i];
        if let Some(j) = table.find(h, key) {
            return Some(j);
        }
        let c = table.compact.find(h, key)?;
        let c = table.compact.swap_remove(c);
        let at = MONOTONIC | c.deadline_mono();
        table.push(h, Entry::new(c.key(), at, c.value()), &self.hasher);
        Some(table.len() - 1)
    }

    /// The live entry for `key`, reclaiming it first when its deadline has passed.
    pub fn get(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        let (i, h) = self.locate(key);
        self.get_at(i, h, key, now_ms)
    }

    /// [`Store::get`] for a key already located (table `i`, hash `h`).
    fn get_at(&mut self, i: usize, h: u64, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        let j = self.find_entry(i, h, key)?;
        if !self.tables[i].at(j).expired(now_ms, self.clock) {
            return Some(self.tables[i].at_mut(j));
        }
        self.remove_at(i, j, true);
        None
    }

    /// Stores `value` under `key` with the deadline `expire_at` (Unix ms, `None`
    /// for no TTL), replacing any previous value and deadline. A previous value
    /// already past its deadline at `now_ms` counts as expired (INFO
    /// `expired_keys`), as Redis counts it when a write meets it. Emits the
    /// effect that recreates the key.
    pub fn set(
        &mut self,
        key: &[u8],
        value: Value,
        expire_at: Option<u64>,
        now_ms: u64,
    ) -> &mut Entry {
        self.emit_value(key, &value, expire_at);
        self.put(key, value, expire_at.unwrap_or(0), now_ms)
    }

    /// [`Store::set`] with the deadline as stored: Unix ms, [`MONOTONIC`] |
    /// monotonic ms, or 0.
    fn put(&mut self, key: &[u8], value: Value, at: u64, now_ms: u64) -> &mut Entry {
        let (i, h) = self.locate(key);
        self.put_at(i, h, key, value, at, now_ms)
    }

    /// [`Store::put`] for a key already located (table `i`, hash `h`).
    fn put_at(
        &mut self,
        i: usize,
        h: u64,
        key: &[u8],
        value: Value,
        at: u64,
        now_ms: u64,
    ) -> &mut Entry {
        match self.find_entry(i, h, key) {
            Some(j) => {
                if self.tables[i].at(j).expired(now_ms, self.clock) {
                    self.counts.expired += 1;
                }
                let had = self.tables[i].at(j).expire_at != 0;
                self.ttl_changed(i, had, at != 0);
                let e = self.tables[i].at_mut(j);
                e.expire_at = at;
                e.value = value;
                e
            }
            None => {
                self.counts.keys += 1;
                self.ttl_changed(i, false, at != 0);
                self.tables[i].push(h, Entry::new(key, at, value), &self.hasher)
            }
        }
    }

    /// Changes the deadline of an existing key (`None` removes the TTL) and
    /// emits `PEXPIREAT` or `PERSIST`. Returns false when the key is absent.
    /// The caller has already checked liveness with [`Store::get`] under the
    /// same time snapshot.
    pub fn set_expire(&mut self, key: &[u8], expire_at: Option<u64>) -> bool {
        let (i, h) = self.locate(key);
        let Some(j) = self.find_entry(i, h, key) else {
            return false;
        };
        let at = expire_at.unwrap_or(0);
        let had = std::mem::replace(&mut self.tables[i].at_mut(j).expire_at, at) != 0;
        self.ttl_changed(i, had, at != 0);
        self.effects.emit(match expire_at {
            Some(at_ms) => Effect::ExpireAt { key, at_ms },
            None => Effect::Persist { key },
        });
        true
    }

    /// Removes `key`; returns whether it was live. Emits `DEL` when it existed.
    pub fn remove(&mut self, key: &[u8], now_ms: u64) -> bool {
        let (i, h) = self.locate(key);
        if let Some(j) = self.tables[i].compact.find(h, key) {
            let expired = self.compact_expired(self.tables[i].compact.at(j), now_ms);
            self.remove_compact(i, j, expired);
            return !expired;
        }
        let Some(j) = self.tables[i].find(h, key) else {
            return false;
        };
        let expired = self.tables[i].at(j).expired(now_ms, self.clock);
        self.remove_at(i, j, expired);
        !expired
    }

    /// The rate-limit state at `key`: `None` when the key is absent (or just
    /// reclaimed at its deadline), `Some(None)` when it holds another type.
    pub fn get_rate(&mut self, key: &[u8], now_ms: u64) -> Option<Option<RateState>> {
        let (i, h) = self.locate(key);
        match self.compact_lookup(i, h, key, now_ms) {
            Ok(c) => c.map(|c| Some(c.state())),
            Err(()) => self.get_at(i, h, key, now_ms).map(|e| e.value.rate_state()),
        }
    }

    /// The name `TYPE` reports for the live value at `key` (`None` when
    /// absent). Unlike [`Store::get`] it leaves a compact entry where it is,
    /// so TYPE and EXISTS do not unpack rate-limit keys.
    pub fn type_of(&mut self, key: &[u8], now_ms: u64) -> Option<&'static str> {
        let (i, h) = self.locate(key);
        match self.compact_lookup(i, h, key, now_ms) {
            Ok(c) => c.map(|c| c.value().type_name()),
            Err(()) => self.get_at(i, h, key, now_ms).map(|e| e.value.type_name()),
        }
    }

    /// `key` among the compact entries: `Ok(Some)` when live, `Ok(None)` when
    /// it was there but past its deadline (now reclaimed), `Err` when it is
    /// not a compact entry.
    fn compact_lookup(
        &mut self,
        i: usize,
        h: u64,
        key: &[u8],
        now_ms: u64,
    ) -> Result<Option<Compact>, ()> {
        let j = self.tables[i].compact.find(h, key).ok_or(())?;
        let c = *self.tables[i].compact.at(j);
        if !self.compact_expired(&c, now_ms) {
            return Ok(Some(c));
        }
        self.remove_compact(i, j, true);
        Ok(None)
    }

    /// Stores a rate-limit state under `key`, expiring at `expire_at` (Unix
    /// ms) under the shard's clock reading ([`Store::set_clock`]), which becomes a monotonic deadline
    /// (see [`MONOTONIC`]): in a 32-byte compact entry when the key, the
    /// state and the deadline allow it (store/compact.rs), otherwise as
    /// [`Store::set`] would. Emits `LH.RESTORE` with the state's instants as
    /// Unix ms.
    pub fn set_rate(&mut self, key: &[u8], state: RateState, expire_at: u64) {
        let now = self.clock;
        self.effects.emit(Effect::Rate {
            key,
            state: &state,
            expire_at_ms: expire_at,
            now,
        });
        let (i, h) = self.locate(key);
        let mono = mono_of(now, expire_at).min(i64::MAX as u64);
        let compact = Compact::new(key, &state, mono);
        let table = &mut self.tables[i];
        match (compact, table.compact.find(h, key)) {
            (Some(c), Some(j)) => {
                // A write meeting a value past its deadline counts it as
                // expired, as `Store::set` does.
                if self.compact_expired(self.tables[i].compact.at(j), now.unix_ms) {
                    self.counts.expired += 1;
                }
                return self.tables[i].compact.replace(j, c);
            }
            (Some(c), None) if table.compact.len() < COMPACT_MAX => {
                if let Some(j) = table.find(h, key) {
                    let old = table.swap_remove(j, &self.hasher);
                    table.shrink(&self.hasher);
                    self.counts.keys -= 1;
                    if old.expired(now.unix_ms, self.clock) {
                        self.counts.expired += 1;
                    }
                    self.ttl_changed(i, old.expire_at != 0, false);
                }
                self.tables[i].compact.push(h, c);
                self.counts.keys += 1;
                self.ttl_changed(i, false, true);
                return;
            }
            _ => {}
        }
        self.put_at(i, h, key, state.into_value(), MONOTONIC | mono, now.unix_ms);
    }

    /// Removes compact entry `j` of table `i`, as [`Store::remove_at`] does.
    fn remove_compact(&mut self, i: usize, j: usize, expired: bool) {
        let c = self.tables[i].compact.swap_remove(j);
        self.tables[i].compact.shrink();
        self.counts.keys -= 1;
        if expired {
            self.counts.expired += 1;
        }
        self.ttl_changed(i, true, false);
        self.effects.emit(Effect::Del { key: c.key() });
    }

    /// Removes entry `j` of table `i`, counting it as expired or not, and
    /// emits `DEL` for it.
    fn remove_at(&mut self, i: usize, j: usize, expired: bool) {
        let table = &mut self.tables[i];
        let entry = table.swap_remove(j, &self.hasher);
        table.shrink(&self.hasher);
        self.counts.keys -= 1;
        if expired {
            self.counts.expired += 1;
        }
        self.ttl_changed(i, entry.expire_at != 0, false);
        self.effects.emit(Effect::Del { key: entry.key() });
    }

    /// Bytes held by the slot tables (not counting boxed keys and large
    /// values).
    pub fn table_bytes(&self) -> usize {
        self.tables.iter().map(SlotTable::allocation_size).sum()
    }

    /// Removes every key. Returns how many there were.
    pub fn clear(&mut self) -> u64 {
        self.clear_slots(self.slot_range())
    }

    /// Removes every key in the hash slots `slots` that this store owns (the
    /// rest of the range is ignored) and emits `LH.FLUSHSLOTS` for the slots
    /// it owned. Returns how many keys went.
    pub fn clear_slots(&mut self, slots: std::ops::Range<usize>) -> u64 {
        let own = self.slot_range();
        let (lo, hi) = (slots.start.max(own.start), slots.end.min(own.end));
        if lo >= hi {
            return 0;
        }
        let mut gone = 0u64;
        for i in lo - self.first_slot..hi - self.first_slot {
            let table = std::mem::take(&mut self.tables[i]);
            gone += (table.len() + table.compact.len()) as u64;
            self.counts.expires -= u64::from(std::mem::take(&mut self.slot_expires[i]));
        }
        self.counts.keys -= gone;
        self.effects.emit(Effect::FlushSlots {
            first: lo as u16,
            last: (hi - 1) as u16,
        });
        gone
    }

    /// Calls `f` for every live key in `slot`.
    pub fn for_each_in_slot(&self, slot: usize, now_ms: u64, mut f: impl FnMut(&Entry)) {
        let table = &self.tables[slot - self.first_slot];
        for e in table.iter() {
            if !e.expired(now_ms, self.clock) {
                f(e);
            }
        }
        for c in table.compact.iter() {
            let e = Entry::new(c.key(), MONOTONIC | c.deadline_mono(), c.value());
            if !e.expired(now_ms, self.clock) {
                f(&e);
            }
        }
    }
}

#[cfg(test)]
mod tests;
