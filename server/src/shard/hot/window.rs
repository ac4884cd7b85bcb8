//! The owner's side of a split sliding window (`docs/hotkeys.md`, "Sliding
//! windows"): a SLIDINGWINDOW its shard's slot cannot serve, the gather
//! and the store entry of the home pair.

use bytes::Bytes;

use super::super::Shard;
use crate::clock::unix_of;
use crate::ratelimit::sliding_window::{self, Policy, Verdict, Window};
use crate::ratelimit::split::window::HomeChange;
use crate::ratelimit::split::{KeyPolicy, Split};
use crate::ratelimit::RateState;

impl Shard {
    /// Runs a SLIDINGWINDOW of `n` hits under `p` on `key` when this shard
    /// owns it split: admitted from this shard's slot when it holds `n`,
    /// else decided on the exact pair, which is then leased out again. A key
    /// split under another kind or policy is merged first; `None` then, and
    /// when it is not split: the caller runs the unsplit code.
    pub fn hot_window(&mut self, key: &Bytes, p: Policy, n: u64) -> Option<Verdict> {
        let split = self.hot.owned(key)?;
        let kind = KeyPolicy::Window(p);
        if split.kind != kind {
            self.hot_merge(key);
            return None;
        }
        let now = self.now.mono_ms;
        if let Some(v) = split.try_window(self.id, &kind, n, now) {
            self.stats.hotkey_local_grants.add(1);
            return Some(v);
        }
        let (exact, unspent) = self.hot_gather_window(key, &split);
        let (verdict, change) = sliding_window::admit(exact, &p, n, now);
        let after = change.map(|(w, _)| w).or(exact);
        let home = split.lease_window(after, unspent > 0 || change.is_some(), now);
        self.store_window(key, home);
        Some(verdict)
    }

    /// The exact pair of split window `key` now, its slots taken back, and
    /// the admissions taken back.
    pub(super) fn hot_gather_window(&mut self, key: &[u8], split: &Split) -> (Option<Window>, u64) {
        self.stats.hotkey_gathers.add(1);
        let home = match self.store.get_rate(key, self.now.unix_ms) {
            Some(Some(RateState::SlidingWindow(w))) => Some(w),
            _ => None,
        };
        split.gather_window(home)
    }

    /// Applies a lease's change to the home entry of split window `key`
    /// through the store (which emits it).
    pub(super) fn store_window(&mut self, key: &[u8], change: HomeChange) {
        match change {
            HomeChange::Keep => {}
            HomeChange::Store(w, empty_at) => {
                let at = unix_of(self.now, empty_at);
                self.store.set_rate(key, RateState::SlidingWindow(w), at);
            }
            HomeChange::Remove => {
                self.store.remove(key, self.now.unix_ms);
            }
        }
    }
}
