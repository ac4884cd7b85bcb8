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
mod table;
mod value;

use crate::clock::{mono_of, unix_of, Now};
use crate::effects::{Effect, EffectLog, Wake};
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

    /// The effect stream this store writes (read side: offset, `since`).
    pub fn effects(&self) -> &EffectLog {
        &self.effects
    }

    /// Sets the hook called when effects were appended ([`EffectLog::set_wake`]).
    pub fn set_effects_wake(&mut self, wake: Wake) {
        self.effects.set_wake(wake);
    }

    /// Fires the effects' wake hook if this batch appended any.
    pub fn announce_effects(&mut self) {
        self.effects.announce();
    }

    /// The effect that recreates `value` at `key` expiring at `expire_at`
    /// (Unix ms, `None` for no TTL): `SET` for strings, `LH.RESTORE` for
    /// rate-limit states (whose deadline is always set).
    fn emit_value(&mut self, key: &[u8], value: &Value, expire_at: Option<u64>) {
        let effects = &mut self.effects;
        if value
            .with_string(|bytes| {
                effects.emit(Effect::Set {
                    key,
                    value: bytes,
                    expire_at_ms: expire_at,
                })
            })
            .is_some()
        {
            return;
        }
        if let Some(state) = value.rate_state() {
            effects.emit(Effect::Rate {
                key,
                state: &state,
                expire_at_ms: expire_at.unwrap_or(i64::MAX as u64),
                now: self.clock,
            });
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

    /// Keeps the TTL counters (whole shard and per slot) in step when table
    /// `i` gains or loses a key with a TTL.
    fn ttl_changed(&mut self, i: usize, had: bool, has: bool) {
        match (had, has) {
            (false, true) => {
                self.counts.expires += 1;
                self.slot_expires[i] += 1;
            }
            (true, false) => {
                self.counts.expires -= 1;
                self.slot_expires[i] -= 1;
            }
            _ => {}
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

    /// Whether compact entry `c` is past its deadline at `now_ms`, its
    /// monotonic deadline read under the shard's clock reading.
    fn compact_expired(&self, c: &Compact, now_ms: u64) -> bool {
        unix_of(self.clock, c.deadline_mono()) <= now_ms
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
        for _ in 0..max_slots.min(n) {
            let i = self.sweep_slot;
            if self.slot_expires[i] == 0 {
                self.sweep_slot = (i + 1) % n;
                self.sweep_pos = 0;
                continue;
            }
            let table = &mut self.tables[i];
            let mut here = 0;
            let effects = &mut self.effects;
            let from = std::mem::take(&mut self.sweep_pos);
            let (seen, resume) =
                table.remove_expired(from, now_ms, self.clock, &self.hasher, &mut deadline, |e| {
                    here += 1;
                    effects.emit(Effect::Del { key: e.key() });
                });
            examined += seen;
            if resume.is_none() {
                let now_mono = mono_of(self.clock, now_ms);
                examined += table.compact.remove_expired(now_mono, |c| {
                    here += 1;
                    effects.emit(Effect::Del { key: c.key() });
                });
            }
            if here > 0 {
                table.shrink(&self.hasher);
                self.slot_expires[i] -= here;
                reclaimed += u64::from(here);
            }
            match resume {
                Some(pos) => {
                    self.sweep_pos = pos;
                    break;
                }
                None => self.sweep_slot = (i + 1) % n,
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
impl StoreCounts {
    /// A value to compare with, in field order.
    fn of(keys: u64, expires: u64, expired: u64) -> StoreCounts {
        StoreCounts {
            keys,
            expires,
            expired,
        }
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
        s.set(b"k", Value::from_bytes(b"v"), Some(1000), 0);
        assert_eq!(s.counts(), StoreCounts::of(1, 1, 0));
        assert!(s.get(b"k", 999).is_some());
        assert!(s.get(b"k", 1000).is_none());
        assert_eq!(s.counts(), StoreCounts::of(0, 0, 1));
    }

    #[test]
    fn keys_inline_and_boxed_read_back() {
        let mut s = store();
        let short = vec![b'a'; INLINE_KEY];
        let long = vec![b'b'; INLINE_KEY + 1];
        for k in [&b""[..], &short, &long] {
            s.set(k, Value::Int(k.len() as i64), None, 0);
        }
        for k in [&b""[..], &short, &long] {
            let e = s.get(k, 0).unwrap();
            assert_eq!(e.key(), k);
            assert_eq!(e.value, Value::Int(k.len() as i64));
        }
    }

    #[test]
    fn a_huge_slot_is_swept_over_several_calls() {
        let mut s = store();
        for i in 0..10_000u32 {
            let ttl = if i % 2 == 0 { 10 } else { 1000 };
            s.set(format!("{{t}}k{i}").as_bytes(), Value::Int(1), Some(ttl), 0);
        }
        // Stop at the first check (after 1024 entries) of every call.
        let (examined, reclaimed) = s.sweep(11, 16384, || true);
        assert_eq!(examined, 1023);
        assert!(reclaimed > 0 && reclaimed < 1023, "{reclaimed}");
        let mut calls = 1;
        while s.counts().keys > 5000 {
            s.sweep(11, 16384, || true);
            calls += 1;
            assert!(calls < 100, "the sweep does not move on");
        }
        assert!(calls >= 9, "{calls} calls");
        assert_eq!(s.counts().keys, 5000);
        assert_eq!(s.counts().expired, 5000);
        for i in (1..10_000u32).step_by(2) {
            assert!(s.get(format!("{{t}}k{i}").as_bytes(), 11).is_some(), "k{i}");
        }
    }

    #[test]
    fn overwriting_an_expired_key_counts_it_as_expired() {
        let mut s = store();
        s.set(b"zz", Value::Int(1), Some(10), 0);
        s.set(b"zz", Value::Int(2), None, 9);
        assert_eq!(s.counts().expired, 0, "still live at 9");
        s.set(b"zz", Value::Int(3), Some(20), 10);
        s.set(b"zz", Value::Int(4), None, 30);
        assert_eq!(s.counts(), StoreCounts::of(1, 0, 1));
    }

    fn window(start: u64, current: u64) -> RateState {
        RateState::SlidingWindow(crate::ratelimit::sliding_window::Window {
            window_ms: 1000,
            start,
            previous: 1,
            current,
        })
    }

    /// Sliding-window keys live in 32-byte compact entries; generic readers
    /// see them as ordinary entries, and the next rate-limit write packs them
    /// again.
    #[test]
    fn compact_entries_round_trip_through_generic_access() {
        let mut s = store();
        let now = Now {
            unix_ms: 1_000_000,
            mono_ms: 5_000,
        };
        s.set_clock(now);
        let state = window(5_000, 2);
        let at = unix_of(now, 7_000);
        s.set_rate(b"sw:1", state, at);
        assert_eq!(s.tables.iter().map(|t| t.compact.len()).sum::<usize>(), 1);
        assert_eq!(s.table_bytes(), 32 + 2, "one compact entry and its tag");
        assert_eq!(s.get_rate(b"sw:1", now.unix_ms), Some(Some(state)));
        assert_eq!(s.counts(), StoreCounts::of(1, 1, 0));
        let mut seen = Vec::new();
        let slot = crate::slot::key_slot(b"sw:1") as usize;
        s.for_each_in_slot(slot, now.unix_ms, |e| {
            seen.push((e.key().to_vec(), e.expire_at(s.clock)))
        });
        assert_eq!(seen, [(b"sw:1".to_vec(), Some(at))]);
        // TTL-style access moves it to the general vector, same deadline.
        assert_eq!(
            s.get(b"sw:1", now.unix_ms).unwrap().expire_at(now),
            Some(at)
        );
        assert_eq!(s.tables.iter().map(|t| t.compact.len()).sum::<usize>(), 0);
        assert_eq!(s.get_rate(b"sw:1", now.unix_ms), Some(Some(state)));
        s.set_rate(b"sw:1", window(5_000, 3), at);
        assert_eq!(s.tables.iter().map(|t| t.compact.len()).sum::<usize>(), 1);
        assert_eq!(s.counts(), StoreCounts::of(1, 1, 0));
        // A deadline the state does not imply keeps it general.
        s.set_rate(b"sw:1", window(5_000, 3), at + 1);
        assert_eq!(s.tables.iter().map(|t| t.compact.len()).sum::<usize>(), 0);
        assert_eq!(
            s.get(b"sw:1", now.unix_ms).unwrap().expire_at(now),
            Some(at + 1)
        );
        assert_eq!(s.counts(), StoreCounts::of(1, 1, 0));
    }

    #[test]
    fn type_and_exists_leave_compact_entries_packed() {
        let mut s = store();
        let now = Now::default();
        s.set_rate(b"sw", window(0, 1), unix_of(now, 2000));
        let compact = |s: &Store| s.tables.iter().map(|t| t.compact.len()).sum::<usize>();
        assert_eq!(s.type_of(b"sw", 1999), Some("slidingwindow"));
        assert_eq!(s.type_of(b"nope", 1999), None);
        assert_eq!(compact(&s), 1);
        assert_eq!(s.type_of(b"sw", 2000), None, "gone at its deadline");
        assert_eq!(compact(&s), 0);
        assert_eq!(s.counts(), StoreCounts::of(0, 0, 1));
    }

    #[test]
    fn compact_entries_expire_lazily_and_by_the_sweep() {
        let mut s = store();
        let now = Now {
            unix_ms: 50_000,
            mono_ms: 0,
        };
        s.set_clock(now);
        for i in 0..1000u32 {
            // Windows starting at 0 and 1000 ms: empty at 1000 (current 0)
            // and 3000 (current 5).
            let st = if i % 2 == 0 {
                window(0, 0)
            } else {
                window(1000, 5)
            };
            let deadline = st.empties_at().unwrap();
            s.set_rate(format!("w{i}").as_bytes(), st, unix_of(now, deadline));
        }
        assert_eq!(s.table_bytes() / 1000, 32 + 2, "{}", s.table_bytes());
        assert_eq!(s.get_rate(b"w0", 50_999), Some(Some(window(0, 0))));
        assert_eq!(s.get_rate(b"w0", 51_000), None, "gone at its deadline");
        let (_, reclaimed) = s.sweep(51_000, 16384, || false);
        assert_eq!(reclaimed, 499);
        assert_eq!(s.counts(), StoreCounts::of(500, 500, 500));
        s.sweep(53_000, 16384, || false);
        assert_eq!(s.counts(), StoreCounts::of(0, 0, 1000));
        assert_eq!(s.table_bytes(), 0);
    }

    /// A rate-limit write (LH.RESTORE needs no read first) meeting a key past
    /// its deadline, compact or general, counts it as expired, as `set` does.
    #[test]
    fn a_rate_limit_write_over_an_expired_key_counts_it_as_expired() {
        let mut s = store();
        let now = Now {
            unix_ms: 1_000_000,
            mono_ms: 0,
        };
        s.set_clock(now);
        s.set_rate(b"c", window(0, 1), unix_of(now, 2000));
        s.set(b"g", Value::Int(1), Some(now.unix_ms + 10), now.unix_ms);
        let later = Now {
            unix_ms: now.unix_ms + 3000,
            mono_ms: 3000,
        };
        s.set_clock(later);
        for k in [&b"c"[..], b"g"] {
            s.set_rate(k, window(3000, 1), unix_of(later, 5000));
        }
        assert_eq!(s.counts(), StoreCounts::of(2, 2, 2));
    }

    #[test]
    fn a_slot_past_the_compact_limit_overflows_to_general_entries() {
        let mut s = store();
        let now = Now::default();
        for i in 0..(COMPACT_MAX as u32 + 50) {
            s.set_rate(
                format!("{{t}}{i}").as_bytes(),
                window(0, 1),
                unix_of(now, 2000),
            );
        }
        let slot = s.locate(b"{t}").0;
        assert_eq!(s.tables[slot].compact.len(), COMPACT_MAX);
        assert_eq!(s.tables[slot].len(), 50);
        for i in 0..(COMPACT_MAX as u32 + 50) {
            assert_eq!(
                s.get_rate(format!("{{t}}{i}").as_bytes(), 0),
                Some(Some(window(0, 1)))
            );
        }
        assert_eq!(s.counts().keys, COMPACT_MAX as u64 + 50);
        assert!(s.remove(b"{t}0", 0));
        assert_eq!(s.counts().keys, COMPACT_MAX as u64 + 49);
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
                0,
            );
        }
        assert_eq!(s.counts().expires, 500);
        let (_, reclaimed) = s.sweep(11, 16384, || false);
        assert_eq!(reclaimed, 500);
        assert_eq!(s.counts(), StoreCounts::of(500, 0, 500));
    }

    #[test]
    fn expiry_gives_small_tables_back_too() {
        let mut s = store();
        for i in 0..100_000u32 {
            s.set(
                format!("k:{i}").as_bytes(),
                Value::Int(1),
                Some(10 + u64::from(i % 7)),
                0,
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
            s.set(format!("{{t}}k{i}").as_bytes(), Value::Int(1), Some(10), 0);
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
            s.set(format!("{{t}}k{i}").as_bytes(), Value::Int(1), Some(10), 0);
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
            s.set(format!("{{t}}k{i}").as_bytes(), Value::Int(1), None, 0);
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

    /// Checks every table's invariants (see `SlotTable::check_invariants`),
    /// the per-slot and whole-store TTL counters, and every live key of
    /// `model` against the store.
    fn check_against(s: &Store, model: &std::collections::HashMap<Vec<u8>, (u64, i64)>, now: u64) {
        let (mut keys, mut expires) = (0u64, 0u64);
        for (i, t) in s.tables.iter().enumerate() {
            t.check_invariants(&s.hasher);
            let with_ttl = t.iter().filter(|e| e.expire_at != 0).count() as u32;
            assert_eq!(s.slot_expires[i], with_ttl, "slot_expires of table {i}");
            keys += t.len() as u64;
            expires += u64::from(with_ttl);
        }
        assert_eq!((s.counts.keys, s.counts.expires), (keys, expires));
        for (k, &(at, v)) in model {
            if at != 0 && at <= now {
                continue;
            }
            let (i, h) = s.locate(k);
            let j = s.tables[i].find(h, k).expect("a live key is found");
            assert_eq!(s.tables[i].at(j).value, Value::Int(v));
        }
    }

    /// Random SET / DEL / GET (lazy expiry) / EXPIRE / PERSIST / sweeps on
    /// keys sharing one hash tag, with the key population moving across the
    /// index thresholds (64 and 128) both ways, compared with a map.
    #[test]
    fn random_operations_keep_tables_and_counters_consistent() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut s = store();
        let mut model = std::collections::HashMap::<Vec<u8>, (u64, i64)>::new();
        let live = |m: &std::collections::HashMap<Vec<u8>, (u64, i64)>, k: &[u8], now: u64| {
            m.get(k).is_some_and(|&(at, _)| at == 0 || at > now)
        };
        let mut now = 100u64;
        for step in 0..60_000i64 {
            let population = [40, 140, 300, 90][(step / 5_000 % 4) as usize];
            let key = if next() % 5 == 0 {
                format!("k{}", next() % 50)
            } else {
                format!("{{u}}:{}", next() % population)
            }
            .into_bytes();
            let ttl = |r: u64| (r % 2 == 0).then_some(now + r % 20 + 1);
            match next() % 10 {
                0..=3 => {
                    let at = ttl(next());
                    s.set(&key, Value::Int(step), at, now);
                    model.insert(key, (at.unwrap_or(0), step));
                }
                4 | 5 => {
                    assert_eq!(s.remove(&key, now), live(&model, &key, now));
                    model.remove(&key);
                }
                6 => {
                    assert_eq!(s.get(&key, now).is_some(), live(&model, &key, now));
                }
                7 => {
                    if s.get(&key, now).is_some() {
                        let at = ttl(next());
                        assert!(s.set_expire(&key, at));
                        model.get_mut(&key).expect("live").0 = at.unwrap_or(0);
                    }
                }
                8 => now += next() % 3,
                _ => {
                    s.sweep(now, (next() % 20_000) as usize, || false);
                }
            }
            if step % 499 == 0 {
                check_against(&s, &model, now);
            }
        }
        check_against(&s, &model, now);
    }
}

#[cfg(test)]
mod compact_model {
    use super::*;
    use std::collections::HashMap;

    /// Checks counters against the tables, both kinds of entry counted.
    fn check(s: &Store) {
        let (mut keys, mut expires) = (0u64, 0u64);
        for (i, t) in s.tables.iter().enumerate() {
            t.check_invariants(&s.hasher);
            let with_ttl = t.iter().filter(|e| e.expire_at != 0).count() + t.compact.len();
            assert_eq!(
                s.slot_expires[i] as usize, with_ttl,
                "slot_expires of table {i}"
            );
            for c in t.compact.iter() {
                let h = s.hasher.hash_one(c.key());
                assert!(t.find(h, c.key()).is_none(), "a key in both vectors");
                assert!(t.compact.len() <= COMPACT_MAX);
            }
            keys += (t.len() + t.compact.len()) as u64;
            expires += with_ttl as u64;
        }
        assert_eq!((s.counts.keys, s.counts.expires), (keys, expires));
    }

    /// Random rate-limit writes (compact or not), reads, generic access
    /// and sweeps on keys sharing one hash tag, counted against a model.
    #[test]
    fn random_compact_operations_keep_counters() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut s = Store::new(0, 16384, 1 << 16);
        // Key -> deadline (Unix ms, 0 for none).
        let mut model = HashMap::<Vec<u8>, u64>::new();
        let (mut created, mut deleted) = (0u64, 0u64);
        let mut now = Now {
            unix_ms: 1_000_000,
            mono_ms: 10_000,
        };
        s.set_clock(now);
        let live = |m: &HashMap<Vec<u8>, u64>, k: &[u8], t: u64| {
            m.get(k).is_some_and(|&at| at == 0 || at > t)
        };
        for step in 0..60_000u64 {
            let population = [60, 200, 400, 100][(step / 10_000 % 4) as usize];
            let key = if next() % 4 == 0 {
                format!("{{t}}:{:0>14}", next() % population)
            } else {
                format!("{{t}}:{}", next() % population)
            }
            .into_bytes();
            let is_live = live(&model, &key, now.unix_ms);
            match next() % 12 {
                0..=3 => {
                    let window_ms = 1 + next() % 50;
                    let start = now.mono_ms / window_ms * window_ms;
                    let st = RateState::SlidingWindow(crate::ratelimit::sliding_window::Window {
                        window_ms,
                        start,
                        previous: next() % 3,
                        current: next() % 3,
                    });
                    let mut at = unix_of(now, st.empties_at().unwrap());
                    if next() % 5 == 0 {
                        at += 1;
                    }
                    if !is_live {
                        created += 1;
                    }
                    s.set_rate(&key, st, at);
                    model.insert(key, at);
                }
                4 => {
                    let got = s.get_rate(&key, now.unix_ms);
                    assert_eq!(got.is_some(), is_live);
                }
                5 => {
                    let at = (next() % 2 == 0).then_some(now.unix_ms + next() % 40 + 1);
                    if !is_live {
                        created += 1;
                    }
                    s.set(&key, Value::Int(1), at, now.unix_ms);
                    model.insert(key, at.unwrap_or(0));
                }
                6 => {
                    assert_eq!(s.remove(&key, now.unix_ms), is_live);
                    if is_live {
                        deleted += 1;
                    }
                    model.remove(&key);
                }
                7 => {
                    let got = s.get(&key, now.unix_ms).map(|e| e.expire_at(now));
                    assert_eq!(got.is_some(), is_live);
                    if let Some(at) = got {
                        assert_eq!(at.unwrap_or(0), model[&key]);
                    }
                }
                8 => {
                    if s.get(&key, now.unix_ms).is_some() {
                        let at = (next() % 2 == 0).then_some(now.unix_ms + next() % 40 + 1);
                        assert!(s.set_expire(&key, at));
                        model.insert(key, at.unwrap_or(0));
                    }
                }
                9 => {
                    let d = next() % 5;
                    now.unix_ms += d;
                    now.mono_ms += d;
                    s.set_clock(now);
                }
                10 => {
                    let mut seen = 0;
                    let slot = crate::slot::key_slot(b"{t}") as usize;
                    s.for_each_in_slot(slot, now.unix_ms, |e| {
                        assert_eq!(e.expire_at(now).unwrap_or(0), model[e.key()]);
                        seen += 1;
                    });
                    let want = model
                        .keys()
                        .filter(|k| live(&model, k, now.unix_ms))
                        .count();
                    assert_eq!(seen, want);
                }
                _ => {
                    s.sweep(now.unix_ms, (next() % 20_000) as usize, || next() % 4 == 0);
                }
            }
            let c = s.counts();
            assert_eq!(c.keys + c.expired + deleted, created, "step {step}");
            if step % 997 == 0 {
                check(&s);
            }
        }
        check(&s);
    }
}
