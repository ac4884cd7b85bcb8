//! Expiry bookkeeping: the TTL counters (whole shard and per slot table) that
//! every write keeps in step, the deadline test for compact entries, and the
//! active-expiry sweep, a clock hand over the slot tables that resumes where
//! the last call stopped, goes only to tables holding TTL keys (a bit per
//! table, [`TtlTables`]) and emits `DEL` for each key it reclaims. Lazy
//! expiry is the readers' part ([`Store::get`]).

use super::compact::Compact;
use super::Store;
use crate::clock::{mono_of, unix_of};
use crate::effects::Effect;

/// One bit per slot table: set while the table holds a key with a TTL.
/// Finding the next such table from any position reads at most one word per
/// 64 tables (256 words for all 16384 slots), so a sweep over a shard where
/// few keys have a TTL costs what those tables cost.
#[derive(Debug, Default)]
pub(super) struct TtlTables {
    words: Vec<u64>,
    /// Bits set.
    count: usize,
}

impl TtlTables {
    pub(super) fn new(tables: usize) -> TtlTables {
        TtlTables {
            words: vec![0; tables.div_ceil(64)],
            count: 0,
        }
    }

    /// Sets or clears table `i`'s bit.
    pub(super) fn set(&mut self, i: usize, on: bool) {
        let (w, bit) = (i / 64, 1u64 << (i % 64));
        let was = self.words[w] & bit != 0;
        match (was, on) {
            (false, true) => {
                self.words[w] |= bit;
                self.count += 1;
            }
            (true, false) => {
                self.words[w] &= !bit;
                self.count -= 1;
            }
            _ => {}
        }
    }

    /// How many tables hold a TTL key.
    pub(super) fn count(&self) -> usize {
        self.count
    }

    /// The first table at or after `from` whose bit is set, wrapping
    /// around past the last of `tables`; `None` when no bit is set.
    pub(super) fn next_from(&self, from: usize, tables: usize) -> Option<usize> {
        if self.count == 0 {
            return None;
        }
        let n = self.words.len();
        let first = from / 64;
        // The first word with the bits below `from` masked off, then every
        // word once around, then the first word's low bits.
        for step in 0..=n {
            let w = (first + step) % n;
            let mut bits = self.words[w];
            if step == 0 {
                bits &= u64::MAX << (from % 64);
            }
            if bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                if i < tables {
                    return Some(i);
                }
            }
        }
        None
    }
}

impl Store {
    /// Keeps the TTL counters (whole shard and per slot) in step when table
    /// `i` gains or loses a key with a TTL.
    pub(super) fn ttl_changed(&mut self, i: usize, had: bool, has: bool) {
        match (had, has) {
            (false, true) => {
                self.counts.expires += 1;
                self.slot_expires[i] += 1;
                if self.slot_expires[i] == 1 {
                    self.ttl_tables.set(i, true);
                }
            }
            (true, false) => {
                self.counts.expires -= 1;
                self.slot_expires[i] -= 1;
                if self.slot_expires[i] == 0 {
                    self.ttl_tables.set(i, false);
                }
            }
            _ => {}
        }
    }

    /// Whether compact entry `c` is past its deadline at `now_ms`, its
    /// monotonic deadline read under the shard's clock reading.
    pub(super) fn compact_expired(&self, c: &Compact, now_ms: u64) -> bool {
        unix_of(self.clock, c.deadline_mono()) <= now_ms
    }

    /// Active expiry: walks the slot tables that hold TTL keys from where
    /// the last call stopped, reclaiming keys past their deadline, until
    /// `max_slots` such tables are visited (each at most once per call) or
    /// `deadline` returns true (checked between tables). Tables without a
    /// TTL key are skipped at no cost. Returns `(entries examined, keys
    /// reclaimed)`.
    pub fn sweep(
        &mut self,
        now_ms: u64,
        max_slots: usize,
        mut deadline: impl FnMut() -> bool,
    ) -> (u64, u64) {
        let mut examined = 0u64;
        let mut reclaimed = 0u64;
        let n = self.tables.len();
        for _ in 0..max_slots.min(self.ttl_tables.count()) {
            let Some(i) = self.ttl_tables.next_from(self.sweep_slot, n) else {
                break;
            };
            if i != self.sweep_slot {
                self.sweep_slot = i;
                self.sweep_pos = 0;
            }
            self.before_write(i);
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
                if self.slot_expires[i] == 0 {
                    self.ttl_tables.set(i, false);
                }
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
