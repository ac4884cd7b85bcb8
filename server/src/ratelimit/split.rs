//! A token bucket split over shards, exactly (`docs/hotkeys.md` has the
//! design and the proof): the owner keeps the *home* part in its store
//! entry; every shard has one *slot* of whole tokens leased to it, valid
//! until the epoch's end `T*`, the last instant at which the bucket could not
//! be over capacity even if no leased token were spent. A shard grants from
//! its slot with one compare-and-swap ([`Split::try_local`]); everything else
//! is decided by the owner on the exact balance after a gather
//! ([`Split::gather`]), which swaps every slot to zero, so each token is
//! either spent before the swap or counted by it. [`Split::lease_out`]
//! starts the next epoch.
//!
//! No lock: a slot is written by its shard (grants) and by the owner (the
//! swap, the new lease), each on its own cache line. The home mirror
//! (`home_*`) only feeds the `remaining` of a local grant's reply.
//!
//! Instants are monotonic ms, balances units of `1/period_ms` token, as in
//! [`super::token_bucket`]. A GCRA key (CL.THROTTLE, GCRA) splits as its
//! equivalent bucket ([`super::gcra::bucket_policy`]): the machinery here
//! sees buckets only, and the owner converts the stored TAT.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::gcra;
use super::token_bucket::{to_i64, Bucket, Change, Lease, Policy};

/// What a split key is, with the policy of the calls its slots serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPolicy {
    /// A token bucket (TOKENLEASE, TOKENRETURN).
    Bucket(Policy),
    /// A TAT (CL.THROTTLE, GCRA), run as its equivalent bucket.
    Gcra(gcra::Policy),
}

impl KeyPolicy {
    /// The bucket the split runs: the key's own, or the GCRA policy's
    /// equivalent; `None` when a GCRA policy has none (too large to split).
    pub fn bucket(&self) -> Option<Policy> {
        match self {
            KeyPolicy::Bucket(p) => Some(*p),
            KeyPolicy::Gcra(g) => gcra::bucket_policy(g),
        }
    }
}

/// Low bits of a slot: its whole tokens.
const TOKEN_BITS: u32 = 32;
const TOKEN_MASK: u64 = (1 << TOKEN_BITS) - 1;
/// Most epoch length a slot's packed end can carry past the split's base:
/// `2^32 - 1` ms (49 days); later ends are cut there (an earlier end is
/// always safe: it only means an earlier gather).
const MAX_REL: u64 = u32::MAX as u64;

/// One shard's lease, alone on its cache lines (a grant on one shard does
/// not bounce another's line).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Slot {
    /// `tokens | (epoch end - base) << 32`.
    packed: AtomicU64,
    /// Local grants served from it, ever (written by its shard only).
    grants: AtomicU64,
}

/// The shared state of one split key.
#[derive(Debug)]
pub struct Split {
    /// The key's kind and policy; a call of another merges it.
    pub kind: KeyPolicy,
    /// The bucket the split runs ([`KeyPolicy::bucket`]).
    pub policy: Policy,
    /// The owning shard.
    pub owner: usize,
    /// Monotonic ms the split began at: slots pack their end relative to it.
    base: u64,
    slots: Box<[Slot]>,
    /// The epoch's end `T*`, monotonic ms (owner only).
    end: AtomicU64,
    /// The home part at the epoch's start, units, and that start: a local
    /// grant's reply reads the key's balance as home plus slots.
    home_units: AtomicU64,
    home_at: AtomicU64,
    /// Set once merged: no slot is leased again.
    dead: AtomicBool,
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
    /// A split of a key owned by shard `owner` over `shards` shards, of
    /// kind and policy `kind`, from monotonic `now` (no later than the
    /// instant of the bucket it first leases out); `None` when `kind` has no
    /// bucket. Its slots are empty until the first [`Split::lease_out`].
    pub fn new(kind: KeyPolicy, owner: usize, shards: usize, now: u64) -> Option<Split> {
        Some(Split {
            kind,
            policy: kind.bucket()?,
            owner,
            base: now,
            slots: (0..shards).map(|_| Slot::default()).collect(),
            end: AtomicU64::new(now),
            home_units: AtomicU64::new(0),
            home_at: AtomicU64::new(now),
            dead: AtomicBool::new(false),
        })
    }

    /// Whether the key was merged back.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Local grants served from every slot, ever.
    pub fn local_grants(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.grants.load(Ordering::Relaxed))
            .sum()
    }

    /// Whole tokens leased to each shard now.
    pub fn slot_tokens(&self) -> Vec<u64> {
        self.slots
            .iter()
            .map(|s| s.packed.load(Ordering::Acquire) & TOKEN_MASK)
            .collect()
    }

    /// The epoch's end, monotonic ms.
    pub fn epoch_end(&self) -> u64 {
        self.end.load(Ordering::Acquire)
    }

    /// The instant the home part was last stored at (the epoch's start, or
    /// an earlier refill instant of the bucket it started from), monotonic
    /// ms: the home entry reads as a bucket as of then.
    pub fn home_at(&self) -> u64 {
        self.home_at.load(Ordering::Acquire)
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
        if requested == 0 || *call != self.kind || self.is_dead() {
            return None;
        }
        let p = &self.policy;
        let slot = self.slots.get(shard)?;
        let rel = now.saturating_sub(self.base);
        let mut v = slot.packed.load(Ordering::Acquire);
        loop {
            let (tokens, end) = (v & TOKEN_MASK, v >> TOKEN_BITS);
            if rel > end || tokens < requested {
                return None;
            }
            match slot.packed.compare_exchange_weak(
                v,
                v - requested,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(seen) => v = seen,
            }
        }
        // Only this shard writes its grant count.
        let g = &slot.grants;
        g.store(g.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        // The key's balance after the grant: home refilled linearly (the
        // epoch has not ended, so the capacity does not clamp) plus slots.
        let period = p.period_ms as u128;
        let home_at = self.home_at.load(Ordering::Acquire);
        let home = self.home_units.load(Ordering::Acquire) as u128
            + now.saturating_sub(home_at) as u128 * p.rate as u128;
        let slots: u128 = self
            .slots
            .iter()
            .map(|s| (s.packed.load(Ordering::Acquire) & TOKEN_MASK) as u128)
            .sum();
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
        let unspent: u64 = self
            .slots
            .iter()
            .map(|s| s.packed.swap(0, Ordering::AcqRel) & TOKEN_MASK)
            .sum();
        let p = &self.policy;
        let Some(home) = home else {
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
    /// leases nothing and returns `b` as is.
    pub fn lease_out(&self, b: Option<Bucket>, now: u64) -> Change {
        let p = &self.policy;
        let period = p.period_ms as u128;
        let cap = p.capacity as u128 * period;
        let (units, at) = match b {
            Some(b) => (
                (b.tokens as u128 * period + b.frac as u128).min(cap),
                b.refilled_at,
            ),
            None => (cap, now),
        };
        let n = self.slots.len() as u128;
        let dead = self.is_dead();
        // T*: the last ms at which units + rate * (t - at) <= cap.
        let end = at as u128 + (cap - units.min(cap)) / p.rate as u128;
        let end = end.min(self.base as u128 + MAX_REL as u128) as u64;
        // An epoch that ended before the split's base (a bucket stored long
        // ago, full again by now) leases nothing.
        let per = match dead || end < self.base {
            true => 0,
            false => (units / period / n).min(TOKEN_MASK as u128) as u64,
        };
        let home = units - per as u128 * period * n;
        // The mirror a local grant reads, and the end, before the slots.
        self.home_units
            .store(u64::try_from(home).unwrap_or(u64::MAX), Ordering::Release);
        self.home_at.store(at, Ordering::Release);
        self.end.store(end, Ordering::Release);
        let packed = per | end.saturating_sub(self.base) << TOKEN_BITS;
        for s in self.slots.iter() {
            s.packed.store(packed, Ordering::Release);
        }
        let hb = Bucket {
            tokens: (home / period) as u64,
            frac: (home % period) as u64,
            period_ms: p.period_ms,
            refilled_at: at,
        };
        hb.stored(p)
    }

    /// Marks the split merged (owner only): no slot is leased again, and a
    /// shard holding the split in its table drops it.
    pub fn kill(&self) {
        self.dead.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::super::token_bucket::{self, lease};
    use super::*;

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
