//! Lookups and writes: locating a key's slot table, reading it (reclaiming it
//! on the spot when its deadline has passed: lazy expiry), storing, changing
//! its deadline, removing, clearing slots, and the rate-limit paths that keep
//! sliding-window and GCRA keys in compact entries, moving an entry between
//! the compact and general vectors as the access needs. Each write emits the
//! effect that replays it.

use std::hash::BuildHasher;

use super::compact::{Compact, COMPACT_MAX};
use super::{Entry, RateState, Store, Value, MONOTONIC};
use crate::clock::mono_of;
use crate::effects::Effect;

impl Store {
    /// The table index and hash of `key`. Every access to a key starts
    /// here, so a full sync's image serialises the key's slot here first
    /// if it has not yet (serialise-before-write).
    pub(super) fn locate(&mut self, key: &[u8]) -> (usize, u64) {
        let (i, h) = self.position(key);
        self.before_write(i);
        (i, h)
    }

    /// The table index and hash of `key`, touching nothing.
    pub(super) fn position(&self, key: &[u8]) -> (usize, u64) {
        let slot = crate::slot::key_slot(key) as usize;
        debug_assert!(
            self.slot_range().contains(&slot),
            "slot {slot} routed to the wrong shard"
        );
        (slot - self.first_slot, self.hasher.hash_one(key))
    }

    /// Whether an entry past its deadline reads as present: to the
    /// replication link's commands, every present entry is live.
    fn live_anyway(&self) -> bool {
        self.from_link
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
    pub(super) fn get_at(
        &mut self,
        i: usize,
        h: u64,
        key: &[u8],
        now_ms: u64,
    ) -> Option<&mut Entry> {
        let j = self.live_position(i, h, key, now_ms)?;
        Some(self.tables[i].at_mut(j))
    }

    /// The position of `key`'s live entry in table `i`, reclaiming it
    /// first when its deadline has passed.
    fn live_position(&mut self, i: usize, h: u64, key: &[u8], now_ms: u64) -> Option<usize> {
        let j = self.find_entry(i, h, key)?;
        if self.live_anyway() || !self.tables[i].at(j).expired(now_ms, self.clock) {
            return Some(j);
        }
        // A replica hides the key; the primary's DEL will remove it.
        if !self.replica {
            self.remove_at(i, j, true);
        }
        None
    }

    /// [`Store::get_at`] that answers the entry's position instead.
    pub(super) fn live_at(&mut self, i: usize, h: u64, key: &[u8], now_ms: u64) -> Option<usize> {
        self.live_position(i, h, key, now_ms)
    }

    /// The live entry for `key`, or, when it is absent, a new collection
    /// `make()` stored there as [`Store::create`] stores one (no TTL, no
    /// effect). One lookup either way; the flag says whether it was created.
    pub fn get_or_create(
        &mut self,
        key: &[u8],
        now_ms: u64,
        make: impl FnOnce() -> Value,
    ) -> (&mut Entry, bool) {
        let (i, h) = self.locate(key);
        match self.live_position(i, h, key, now_ms) {
            Some(j) => (self.tables[i].at_mut(j), false),
            None => {
                let value = make();
                debug_assert!(value.collection().is_some(), "create is for collections");
                (self.put_at(i, h, key, value, 0, now_ms), true)
            }
        }
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
    pub(super) fn put(&mut self, key: &[u8], value: Value, at: u64, now_ms: u64) -> &mut Entry {
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

    /// Stores a new collection `value` under the absent (or expired) `key`,
    /// with no TTL, emitting nothing: the command that creates it emits
    /// itself with [`Store::emit_command`] once it has changed the value,
    /// and replays the creation with it. Returns the new entry to fill.
    pub fn create(&mut self, key: &[u8], value: Value, now_ms: u64) -> &mut Entry {
        debug_assert!(value.collection().is_some(), "create is for collections");
        self.put(key, value, 0, now_ms)
    }

    /// Removes `key`, whose collection a command has just emptied, emitting
    /// nothing: that command's own effect, replayed, empties and removes it
    /// too (Redis has no empty collections).
    pub fn remove_emptied(&mut self, key: &[u8]) {
        let (i, h) = self.locate(key);
        if let Some(j) = self.tables[i].find(h, key) {
            self.take_at(i, j);
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
    pub(super) fn compact_lookup(
        &mut self,
        i: usize,
        h: u64,
        key: &[u8],
        now_ms: u64,
    ) -> Result<Option<Compact>, ()> {
        let j = self.tables[i].compact.find(h, key).ok_or(())?;
        let c = *self.tables[i].compact.at(j);
        if self.live_anyway() || !self.compact_expired(&c, now_ms) {
            return Ok(Some(c));
        }
        if !self.replica {
            self.remove_compact(i, j, true);
        }
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

    /// Removes entry `j` of table `i`, counting it as expired or not, emits
    /// `DEL` for it, and returns it.
    pub(super) fn remove_at(&mut self, i: usize, j: usize, expired: bool) -> Entry {
        let entry = self.take_at(i, j);
        if expired {
            self.counts.expired += 1;
        }
        self.effects.emit(Effect::Del { key: entry.key() });
        entry
    }

    /// Takes entry `j` of table `i` out of the keyspace, emitting nothing.
    fn take_at(&mut self, i: usize, j: usize) -> Entry {
        let table = &mut self.tables[i];
        let entry = table.swap_remove(j, &self.hasher);
        table.shrink(&self.hasher);
        self.counts.keys -= 1;
        self.ttl_changed(i, entry.expire_at != 0, false);
        entry
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
        self.touch_watched_in(lo..hi);
        let mut gone = 0u64;
        for i in lo - self.first_slot..hi - self.first_slot {
            self.before_write(i);
            let table = std::mem::take(&mut self.tables[i]);
            gone += (table.len() + table.compact.len()) as u64;
            self.counts.expires -= u64::from(std::mem::take(&mut self.slot_expires[i]));
            self.ttl_tables.set(i, false);
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
