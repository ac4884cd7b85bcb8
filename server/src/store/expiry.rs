//! Expiry bookkeeping: the TTL counters (whole shard and per slot table) that
//! every write keeps in step, the deadline test for compact entries, and the
//! active-expiry sweep, a clock hand over the slot tables that resumes where
//! the last call stopped, skips tables with no TTL and emits `DEL` for each
//! key it reclaims. Lazy expiry is the readers' part ([`Store::get`]).

use super::compact::Compact;
use super::Store;
use crate::clock::{mono_of, unix_of};
use crate::effects::Effect;

impl Store {
    /// Keeps the TTL counters (whole shard and per slot) in step when table
    /// `i` gains or loses a key with a TTL.
    pub(super) fn ttl_changed(&mut self, i: usize, had: bool, has: bool) {
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

    /// Whether compact entry `c` is past its deadline at `now_ms`, its
    /// monotonic deadline read under the shard's clock reading.
    pub(super) fn compact_expired(&self, c: &Compact, now_ms: u64) -> bool {
        unix_of(self.clock, c.deadline_mono()) <= now_ms
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
