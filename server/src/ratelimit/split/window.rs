//! A sliding window's math on the split core (`docs/hotkeys.md`, "Sliding
//! windows"): the window pair stays with the owner; each slot leases whole
//! admissions of the *current* window, `floor(room / N)` where `room` is
//! what the unsplit key admits now, and the epoch ends at the window's last
//! ms, so a lease never outlives its window.
//!
//! Why a lease never over-admits: inside one window the estimate
//! `previous * (w - e) / w + current` only falls as `e` grows (the previous
//! window's weight decays) and rises only by admissions, so the room at the
//! lease's instant is a lower bound of the room at every later instant of
//! the window ([`Window::room`]). The home entry counts the leased
//! admissions as admitted (`current` plus the slots' total), so a gather
//! gives back the exact pair by taking the unspent ones off `current`.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{KeyPolicy, Split};
use crate::ratelimit::sliding_window::{Policy, Verdict, Window};

/// A window split's policy and home mirror: the home pair the last lease
/// stored (its `current` counting every leased admission).
#[derive(Debug)]
pub(super) struct Home {
    policy: Policy,
    start: AtomicU64,
    previous: AtomicU64,
    current: AtomicU64,
}

impl Home {
    pub(super) fn new(policy: Policy) -> Home {
        Home {
            policy,
            start: AtomicU64::new(0),
            previous: AtomicU64::new(0),
            current: AtomicU64::new(0),
        }
    }
}

/// What the owner does with the store entry after a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HomeChange {
    /// Nothing: the entry already holds the home pair.
    Keep,
    /// Store this pair, expiring at the given monotonic ms.
    Store(Window, u64),
    /// Both windows are empty: the key is missing.
    Remove,
}

impl Split {
    fn window_home(&self) -> Option<&Home> {
        match &self.home {
            super::Home::Window(h) => Some(h),
            super::Home::Bucket(_) => None,
        }
    }

    /// Admits `n` hits of a call of kind and policy `call` at monotonic
    /// `now` from shard `shard`'s slot, with the unsplit key's reply; `None`
    /// when it cannot be served there (another kind or policy, a peek, the
    /// window over, the slot short of `n`, or the key merged): the owner
    /// then decides on the exact pair.
    pub fn try_window(&self, shard: usize, call: &KeyPolicy, n: u64, now: u64) -> Option<Verdict> {
        if n == 0 || *call != self.kind {
            return None;
        }
        let h = self.window_home()?;
        if !self.slots.take(shard, n, now) {
            return None;
        }
        // The exact pair after the grant: the home pair less what the slots
        // still hold.
        let start = h.start.load(Ordering::Acquire);
        let home_current = h.current.load(Ordering::Acquire);
        let w = Window {
            window_ms: h.policy.window_ms,
            start,
            previous: h.previous.load(Ordering::Acquire),
            current: home_current.saturating_sub(self.slots.sum()),
        };
        Some(w.verdict(&h.policy, now.max(start), n, 0))
    }

    /// Ends the epoch (owner only): takes every slot's admissions back and
    /// returns the exact pair, given the home entry the store holds (`None`
    /// when it expired: both windows of the exact pair, which counts no
    /// more, are empty too), and the admissions taken back (when 0, the
    /// store already holds the exact pair).
    pub fn gather_window(&self, home: Option<Window>) -> (Option<Window>, u64) {
        let unspent = self.slots.swap_all();
        let exact = home.map(|w| Window {
            current: w.current.saturating_sub(unspent),
            ..w
        });
        (exact, unspent)
    }

    /// Starts an epoch from the exact pair `w` (`None`: missing) at
    /// monotonic `now` (owner only): rolls it to `now`, leases
    /// `floor(room / N)` admissions of the current window to each of the N
    /// slots until the window's last ms, and says what to store: the home
    /// pair, counting the leased admissions as admitted, when it differs
    /// from what the store holds (`stale`: the entry counts admissions taken
    /// back by the gather, or the call changed the pair); nothing for a
    /// missing key, which stays missing (no home entry for a key that is
    /// not), and a removal when both windows of a `stale` entry are empty
    /// by now. A merged split leases nothing.
    pub fn lease_window(&self, w: Option<Window>, stale: bool, now: u64) -> HomeChange {
        let Some(h) = self.window_home() else {
            return HomeChange::Keep;
        };
        let Some(w) = w else {
            self.slots.fill(0, now);
            return HomeChange::Keep;
        };
        let p = &h.policy;
        let (mut r, at) = w.roll(p, now);
        if r.is_empty() {
            self.slots.fill(0, now);
            // An entry the store still holds is worth nothing; one that is
            // the exact pair expires by itself.
            return match stale {
                true => HomeChange::Remove,
                false => HomeChange::Keep,
            };
        }
        let end = r.start.saturating_add(p.window_ms - 1);
        let (per, end) = self.slots.share(r.room(p, at) as u128, end);
        let leased = per * self.slots.len() as u64;
        // current + leased <= limit (the room is what fits), so no overflow.
        r.current += leased;
        // The mirror a local grant reads, before the slots.
        h.start.store(r.start, Ordering::Release);
        h.previous.store(r.previous, Ordering::Release);
        h.current.store(r.current, Ordering::Release);
        self.slots.fill(per, end);
        // Unchanged and nothing leased, the store keeps the pair as it was
        // written (the rolled one is the same state): a split and a merge
        // with nothing between give back the very pair.
        match stale || leased > 0 {
            true => HomeChange::Store(r, r.empty_at()),
            false => HomeChange::Keep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ratelimit::sliding_window::admit;

    const P: Policy = Policy {
        limit: 100,
        window_ms: 1000,
    };

    fn split(shards: usize) -> Split {
        Split::new(KeyPolicy::Window(P), 0, shards, 0).unwrap()
    }

    #[test]
    fn a_lease_is_the_room_now_and_a_gather_gives_the_pair_back() {
        let s = split(2);
        // 40 previous, 20 current, at 250 ms: 40 * 0.75 + 20 = 50, room 50.
        let w = Window {
            window_ms: 1000,
            start: 1000,
            previous: 40,
            current: 20,
        };
        let HomeChange::Store(home, expire) = s.lease_window(Some(w), false, 1250) else {
            panic!("leased, so stored")
        };
        assert_eq!(s.slot_tokens(), vec![25, 25]);
        assert_eq!((home.current, expire), (70, 3000));
        assert_eq!(s.epoch_end(), 1999);
        // A local admission answers as the unsplit key.
        let v = s.try_window(1, &KeyPolicy::Window(P), 3, 1500).unwrap();
        let (u, after) = admit(Some(w), &P, 3, 1500);
        assert_eq!(v, u);
        // Past the window's last ms, nothing is served locally.
        assert_eq!(s.try_window(0, &KeyPolicy::Window(P), 1, 2000), None);
        let (exact, unspent) = s.gather_window(Some(home));
        assert_eq!(unspent, 47);
        assert_eq!(exact, after.map(|(w, _)| w));
    }

    #[test]
    fn a_local_admission_is_one_the_unsplit_key_makes_at_any_later_instant() {
        // Every slot spent at the last ms of the window, after a lease at its
        // first: the unsplit key admits each of them too.
        for (previous, current) in [(100, 0), (60, 10), (0, 0), (99, 1), (37, 50)] {
            let s = split(3);
            let w = Window {
                window_ms: 1000,
                start: 0,
                previous,
                current,
            };
            let mut exact = Some(w);
            s.lease_window(Some(w), false, 0);
            let leased: u64 = s.slot_tokens().iter().sum();
            for shard in [0, 1, 2].into_iter().cycle().take(leased as usize) {
                let v = s.try_window(shard, &KeyPolicy::Window(P), 1, 999).unwrap();
                let (u, after) = admit(exact, &P, 1, 999);
                assert_eq!(v, u, "{previous} {current}");
                exact = after.map(|(w, _)| w).or(exact);
            }
            assert_eq!(s.slot_tokens(), vec![0, 0, 0]);
        }
    }

    #[test]
    fn a_pair_empty_by_now_is_removed_and_a_missing_one_stays_missing() {
        let s = split(2);
        let w = Window {
            window_ms: 1000,
            start: 0,
            previous: 0,
            current: 5,
        };
        assert_eq!(s.lease_window(Some(w), true, 2000), HomeChange::Remove);
        assert_eq!(s.lease_window(None, true, 2000), HomeChange::Keep);
        assert_eq!(s.slot_tokens(), vec![0, 0]);
        // Merged: nothing leased, the exact pair stored as it is.
        s.kill();
        let w = Window { start: 2000, ..w };
        assert_eq!(
            s.lease_window(Some(w), true, 2100),
            HomeChange::Store(w, 4000)
        );
        assert_eq!(s.slot_tokens(), vec![0, 0]);
    }
}
