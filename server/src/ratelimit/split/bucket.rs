//! A token bucket's math on the split core (`docs/hotkeys.md`, "Exactness"):
//! the slots hold whole tokens valid until the epoch's end `T*`, the last
//! instant at which the bucket could not be over capacity even if no leased
//! token were spent; the home mirror (`units`, `at`) only feeds the
//! `remaining` of a local grant's reply. Balances are units of
//! `1/period_ms` token, as in [`crate::ratelimit::token_bucket`]. A GCRA
//! key (CL.THROTTLE, GCRA) splits as its equivalent bucket
//! ([`crate::ratelimit::gcra::bucket_policy`]): the math here sees buckets
//! only, and the owner converts the stored GCRA state.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{KeyPolicy, Split};
use crate::ratelimit::token_bucket::{to_i64, Bucket, Change, Lease, Policy};

/// A bucket split's policy and home mirror: the home part at the epoch's
/// start, units, and that start.
#[derive(Debug)]
pub(super) struct Home {
    policy: Policy,
    units: AtomicU64,
    at: AtomicU64,
}

impl Home {
    pub(super) fn new(policy: Policy, now: u64) -> Home {
        Home {
            policy,
            units: AtomicU64::new(0),
            at: AtomicU64::new(now),
        }
    }
}

/// What a gather found: the exact bucket (`None`: full, as a missing key)
/// and the tokens the slots held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gathered {
    /// The exact bucket at the gather's instant.
    pub bucket: Option<Bucket>,
    /// Whole tokens taken back from the slots.
    pub unspent: u64,
}

impl Split {
    fn bucket_home(&self) -> Option<&Home> {
        match &self.home {
            super::Home::Bucket(h) => Some(h),
            super::Home::Window(_) => None,
        }
    }

    /// The bucket a token-bucket or GCRA split runs; `None` for a sliding
    /// window.
    pub fn bucket_policy(&self) -> Option<Policy> {
        self.bucket_home().map(|h| h.policy)
    }

    /// The instant the home part was last stored at (the epoch's start, or
    /// an earlier refill instant of the bucket it started from), monotonic
    /// ms: the home entry reads as a bucket as of then.
    pub fn home_at(&self) -> u64 {
        self.bucket_home()
            .map_or(0, |h| h.at.load(Ordering::Acquire))
    }

    /// A lease of `requested` tokens (a TOKENLEASE, all or at least `min`;
    /// or a CL.THROTTLE / GCRA of `requested` cells) by a call of kind and
    /// policy `call` at monotonic `now`, served by shard `shard` from its
    /// slot, or `None` when it cannot be served there (another kind or
    /// policy, a peek, the epoch over, the slot short of `requested`, or the
    /// key merged): the call then goes to the owner, which decides on the
    /// exact balance.
    ///
    /// A grant is always of `requested` tokens, which the unsplit bucket
    /// grants too (it holds at least the slot's tokens).
    pub fn try_local(
        &self,
        shard: usize,
        call: &KeyPolicy,
        requested: u64,
        now: u64,
    ) -> Option<Lease> {
        if requested == 0 || *call != self.kind {
            return None;
        }
        let h = self.bucket_home()?;
        if !self.slots.take(shard, requested, now) {
            return None;
        }
        let p = &h.policy;
        // The key's balance after the grant: home refilled linearly (the
        // epoch has not ended, so the capacity does not clamp) plus slots.
        let period = p.period_ms as u128;
        let home_at = h.at.load(Ordering::Acquire);
        let home = h.units.load(Ordering::Acquire) as u128
            + now.saturating_sub(home_at) as u128 * p.rate as u128;
        let slots = self.slots.sum() as u128;
        let cap = p.capacity as u128 * period;
        let units = (home + slots * period).min(cap);
        Some(Lease {
            granted: requested,
            remaining: (units / period) as u64,
            retry_after_ms: 0,
            reset_after_ms: to_i64((cap - units).div_ceil(p.rate as u128)),
        })
    }

    /// Ends the epoch (owner only): takes every slot's tokens back and
    /// returns the exact bucket, as of the epoch's start (a reader refills
    /// it to its own instant), given the home entry the store holds
    /// (`None` when it expired, being full again).
    pub fn gather(&self, home: Option<Bucket>) -> Gathered {
        let unspent = self.slots.swap_all();
        let (Some(h), Some(home)) = (self.bucket_home(), home) else {
            // The home entry expires no earlier than T* + (leased tokens) /
            // rate: by then the unsplit bucket is full.
            return Gathered {
                bucket: None,
                unspent,
            };
        };
        // Up to T* the balance is home + slots, refilled without a clamp;
        // from T* on nothing happened but the capped refill: so the bucket
        // `home + slots` as of the epoch's start, refilled by whoever reads
        // it (min(cap, units + rate * elapsed)), is the exact one at any
        // later instant. Kept as of the epoch's start, a split and a merge
        // with nothing in between give back the very state stored before.
        let p = &h.policy;
        let period = p.period_ms as u128;
        let units = (home.tokens as u128 * period + home.frac as u128 + unspent as u128 * period)
            .min(p.capacity as u128 * period);
        let b = Bucket {
            tokens: (units / period) as u64,
            frac: (units % period) as u64,
            period_ms: p.period_ms,
            refilled_at: home.refilled_at,
        };
        Gathered {
            bucket: Some(b),
            unspent,
        }
    }

    /// Starts an epoch from the exact bucket `b` (`None`: full) at monotonic
    /// `now` (owner only): leases `floor(W / N)` whole tokens to each of the
    /// N slots (W the bucket's whole tokens), keeps the rest as the home
    /// part, and returns the change that stores the home part (the store
    /// emits it: a replica sees the leased tokens as spent). A merged split
    /// leases nothing and returns `b` as is; a full bucket (a missing key)
    /// leases nothing either and stays missing ([`Change::Remove`]): a home
    /// entry stored for it would be a key that is not.
    pub fn lease_out(&self, b: Option<Bucket>, now: u64) -> Change {
        let Some(h) = self.bucket_home() else {
            return Change::None;
        };
        let Some(b) = b else {
            self.slots.fill(0, now);
            return Change::Remove;
        };
        let p = &h.policy;
        let period = p.period_ms as u128;
        let cap = p.capacity as u128 * period;
        let (units, at) = (
            (b.tokens as u128 * period + b.frac as u128).min(cap),
            b.refilled_at,
        );
        // T*: the last ms at which units + rate * (t - at) <= cap.
        let end = at as u128 + (cap - units) / p.rate as u128;
        // An epoch that ended before the split's base (a bucket stored long
        // ago, full again by now) leases nothing.
        let (per, end) = self
            .slots
            .share(units / period, u64::try_from(end).unwrap_or(u64::MAX));
        let home = units - per as u128 * period * self.slots.len();
        // The mirror a local grant reads, before the slots.
        h.units
            .store(u64::try_from(home).unwrap_or(u64::MAX), Ordering::Release);
        h.at.store(at, Ordering::Release);
        self.slots.fill(per, end);
        let hb = Bucket {
            tokens: (home / period) as u64,
            frac: (home % period) as u64,
            period_ms: p.period_ms,
            refilled_at: at,
        };
        hb.stored(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ratelimit::token_bucket::{self, lease};

    fn pol(capacity: u64, rate: u64, period_ms: u64) -> Policy {
        Policy {
            capacity,
            rate,
            period_ms,
        }
    }

    fn apply(state: Option<Bucket>, c: Change) -> Option<Bucket> {
        match c {
            Change::None => state,
            Change::Store(b, _) => Some(b),
            Change::Remove => None,
        }
    }

    #[test]
    fn a_split_holds_what_the_bucket_holds() {
        let p = pol(100, 1, 1000);
        let b = token_bucket::Bucket {
            tokens: 41,
            frac: 500,
            period_ms: 1000,
            refilled_at: 10,
        };
        let s = Split::new(KeyPolicy::Bucket(p), 0, 4, 10).unwrap();
        let home = apply(None, s.lease_out(Some(b), 10));
        assert_eq!(s.slot_tokens(), vec![10, 10, 10, 10]);
        assert_eq!(home.map(|h| (h.tokens, h.frac)), Some((1, 500)));
        // T*: 58.5 tokens missing at 1 unit per ms.
        assert_eq!(s.epoch_end(), 10 + 58_500);
        let g = s.gather(home);
        assert_eq!(g.unspent, 40);
        assert_eq!(g.bucket, Some(b));
    }

    #[test]
    fn local_grants_and_the_gather_past_the_end_are_exact() {
        let p = pol(10, 1, 1000);
        let b = Bucket {
            tokens: 4,
            frac: 0,
            period_ms: 1000,
            refilled_at: 0,
        };
        let s = Split::new(KeyPolicy::Bucket(p), 0, 2, 0).unwrap();
        let home = apply(Some(b), s.lease_out(Some(b), 0));
        assert_eq!(s.slot_tokens(), vec![2, 2]);
        assert_eq!(s.epoch_end(), 6000);
        let l = s.try_local(1, &KeyPolicy::Bucket(p), 2, 100).unwrap();
        // Unsplit: 4 + 0.1 - 2 = 2.1 tokens, 7.9 missing.
        let (u, _) = lease(Some(b), &p, 2, 2, 100);
        assert_eq!(l, u);
        assert_eq!(s.try_local(1, &KeyPolicy::Bucket(p), 1, 100), None);
        assert_eq!(s.try_local(0, &KeyPolicy::Bucket(p), 1, 6001), None);
        // Long after T*: 2 tokens spent at 100, so full at 8000.
        let g = s.gather(home);
        assert_eq!(g.unspent, 2);
        let (want, _) = lease(Some(b), &p, 2, 2, 100);
        assert_eq!(want.remaining, 2);
        assert_eq!(
            g.bucket
                .map(|b| b.refill(&p, 7000))
                .map(|b| (b.tokens, b.frac, b.refilled_at)),
            Some((9, 0, 7000))
        );
        assert_eq!(g.bucket.map(|b| b.refill(&p, 9000).tokens), Some(10));
        // The slots are empty now: a second gather finds the home part only.
        assert_eq!(s.gather(home).unspent, 0);
    }
}
