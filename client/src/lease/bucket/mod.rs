//! One (policy, key)'s local state, split in two.
//!
//! - [`KeyHot`] (32 bytes, inline in the map's per-shard hash table):
//!   what a steady-state decision reads and writes. The token count and the
//!   decision counter share one atomic word, so a decision is one CAS; the
//!   renewal watermark, the ledger's balance (for the decision's
//!   `remaining`) and the index of the key's cold part share another (see
//!   [`View`] for their precision); the key itself (up to [`INLINE_KEY`]
//!   bytes) or its first bytes fill the rest, for the lookup's exact compare.
//! - [`KeyCold`] (`Arc`'d, one per key): lease bookkeeping, the block, the
//!   rate sampler, the fail-open bucket, the full key, the ledger key and the
//!   notification of waiting decisions. A decision reads it only off the
//!   fast path: at the renewal trigger, with no local tokens, and to compare
//!   keys longer than [`INLINE_KEY`].
//!
//! A [`Bucket`] borrows both under the shard's lock. Code outside the lock
//! (a lease task, a waiting decision, a token return) holds the `Arc<KeyCold>`
//! and reaches the hot record again through `KeyMap::with`, which finds it by
//! the key's hash and the cold index the cold part records, and checks that
//! the slab's entry is still this `Arc` (an evicted key's index may belong to
//! another key by then).
//!
//! # Layout
//! In reading order:
//! - `mod.rs` (this file): [`Bucket`], the two parts borrowed together, and
//!   what changes both at once (eviction, landing a lease, the rate sample).
//! - `tag.rs`: [`key_tag`], the 16 key bytes of the hot record.
//! - `hot.rs`: [`KeyHot`] and its token operations.
//! - `word.rs`: the layout of the hot record's two words (the token word's
//!   bits, and [`View`]: watermark, ledger deficit and cold index).
//! - `float.rs`: the 20-bit small float [`View`] stores its counts in.
//! - `cold.rs`: [`KeyCold`] and [`LeaseResult`].

mod cold;
mod float;
mod hot;
mod tag;
mod word;

use std::sync::atomic::Ordering::*;
use std::sync::Arc;

pub(crate) use self::cold::{KeyCold, LeaseResult};
use self::cold::{EVICTED, IDLE};
pub(crate) use self::hot::KeyHot;
pub(crate) use self::tag::{key_tag, INLINE_KEY};
use self::word::{View, TOKEN_MASK};
pub(crate) use self::word::{HIT, HITS_MASK, MAX_INDEX, MAX_LEASE};

/// A key's two parts, borrowed under its shard's lock. The cold part's
/// pointer is read only when asked for (it is in another array).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bucket<'a> {
    pub(crate) hot: &'a KeyHot,
    cold: &'a Option<Arc<KeyCold>>,
}

impl<'a> Bucket<'a> {
    /// `hot` and `cold` of a slot that holds a key (`cold` is `Some`).
    #[inline]
    pub(crate) fn new(hot: &'a KeyHot, cold: &'a Option<Arc<KeyCold>>) -> Bucket<'a> {
        debug_assert!(cold.is_some());
        Bucket { hot, cold }
    }

    /// The key's cold part.
    #[inline]
    pub(crate) fn cold(&self) -> &'a Arc<KeyCold> {
        self.cold.as_ref().expect("a bucket of a free slot")
    }

    /// Marks the key evicted if no lease is in flight and it holds no tokens
    /// and no block; then no lease can ever be claimed for it, so its token
    /// count stays 0. The map removes it only if this returns true (and asks
    /// under the shard's write lock, so no decision is taking a token).
    pub(crate) fn try_evict(&self, now_us: u64) -> bool {
        let cold = self.cold();
        if cold
            .lease
            .compare_exchange(IDLE, EVICTED, AcqRel, Relaxed)
            .is_err()
        {
            return false;
        }
        // Tokens only grow under LEASING, and a lease's grant and block are
        // published before its release (Release/Acquire on `lease`).
        if self.hot.word.load(Acquire) & TOKEN_MASK > 0 || cold.blocked(now_us).is_some() {
            cold.lease.store(IDLE, Release);
            return false;
        }
        true
    }

    /// Lands a lease call's result: the ledger's deficit and the time it was
    /// read (`None` when the call failed), the grant (and the watermark it
    /// sets), then publishes the result and wakes decisions waiting on it.
    /// Only the key's one lease call writes the view, so it is read and
    /// rewritten without a CAS.
    pub(crate) fn finish_lease(
        &self,
        result: LeaseResult,
        granted: u64,
        ledger: Option<(u64, u64)>,
    ) {
        let old = View(self.hot.view.load(Relaxed));
        let watermark = if granted > 0 {
            debug_assert!(granted <= MAX_LEASE, "asked for at most MAX_LEASE");
            ((granted as f64 * self.cold().low_watermark).ceil() as u64).max(1)
        } else {
            old.watermark()
        };
        let deficit = match ledger {
            Some((deficit, at_us)) => {
                self.cold().ledger_at_us.store(at_us, Relaxed);
                deficit
            }
            None => old.deficit(),
        };
        self.hot
            .view
            .store(View::new(watermark, deficit, old.index()).0, Relaxed);
        if granted > 0 {
            self.hot.word.fetch_add(granted.min(MAX_LEASE), AcqRel);
        }
        self.cold().release_lease(result);
    }

    /// Folds the decisions since the last sample into the rate estimate:
    /// "fast attack, slow decay". A higher measured rate is taken at once (a
    /// burst gets big leases quickly); a lower one pulls the average down
    /// with time constant `tau_us`, so B decays smoothly back to min_lease
    /// when traffic stops. Samples shorter than `min_us` are skipped (too
    /// noisy). Returns whether any traffic was seen in this sample.
    pub(crate) fn sample(&self, now_us: u64, tau_us: u64, min_us: u64) -> bool {
        let cold = self.cold();
        let last = cold.sampled_at_us.load(Acquire);
        let sampled = cold.hits_sampled.load(Acquire);
        if now_us < last.saturating_add(min_us) {
            return self.hot.hits() != sampled;
        }
        if cold
            .sampled_at_us
            .compare_exchange(last, now_us, AcqRel, Relaxed)
            .is_err()
        {
            return true; // someone else is sampling right now
        }
        // The token word is only read: the deciding cores keep their line.
        // A sampler that stalled after its CAS above may find a later
        // sampler has moved `hits_sampled` on: its count would be "behind"
        // (nearly 2^22 decisions after the wrap), so it gives up.
        let total = self.hot.hits();
        if cold
            .hits_sampled
            .compare_exchange(sampled, total, AcqRel, Relaxed)
            .is_err()
        {
            return true;
        }
        let hits = total.wrapping_sub(sampled) & HITS_MASK;
        let dt = (now_us - last) as f64 / 1e6;
        let measured = hits as f64 / dt;
        let old = cold.qps();
        let qps = if measured >= old {
            measured
        } else {
            let keep = (-((now_us - last) as f64) / tau_us as f64).exp();
            old * keep + measured * (1.0 - keep)
        };
        cold.qps_bits.store(qps.to_bits(), Relaxed);
        hits > 0
    }
}

/// A key's two parts as the map builds them (hash 0, index 0), for the tests.
#[cfg(test)]
fn parts(key: &[u8]) -> (KeyHot, Option<Arc<KeyCold>>) {
    let cold = KeyCold::new(key, 0, 0, bytes::Bytes::copy_from_slice(key), 0, 0.2);
    (KeyHot::new(key_tag(key), 0), Some(Arc::new(cold)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_estimate_attacks_fast_and_decays_slowly() {
        let (hot, cold) = parts(b"k");
        let b = Bucket::new(&hot, &cold);
        let cold = b.cold();
        for _ in 0..1000 {
            hot.hit();
        }
        assert!(b.sample(100_000, 1_000_000, 10_000));
        assert_eq!(cold.qps(), 10_000.0);
        // Idle for 1 s: one time constant, about 37% left.
        assert!(!b.sample(1_100_000, 1_000_000, 10_000));
        assert!(
            (cold.qps() - 10_000.0 * (-1f64).exp()).abs() < 1.0,
            "{}",
            cold.qps()
        );
        assert!(!b.sample(6_100_000, 1_000_000, 10_000));
        assert!(cold.qps() < 100.0);
    }

    #[test]
    fn the_decision_count_wraps_without_touching_the_tokens() {
        let (hot, cold) = parts(b"k");
        let b = Bucket::new(&hot, &cold);
        let cold = b.cold();
        b.finish_lease(LeaseResult::Granted, MAX_LEASE, None);
        // Just below the wrap of the 22-bit count.
        for _ in 0..HITS_MASK - 5 {
            hot.hit();
        }
        assert!(b.sample(100_000, 1_000_000, 10_000));
        for _ in 0..10 {
            assert!(hot.take(HIT).is_some());
        }
        // The 10 decisions across the wrap are seen: 100/s measured, so the
        // estimate decays from the first sample's rate (no wrap artefact).
        let first = cold.qps();
        assert!(b.sample(200_000, 1_000_000, 10_000));
        let keep = (-0.1f64).exp();
        assert!((cold.qps() - (first * keep + 100.0 * (1.0 - keep))).abs() < 1e-3);
        assert_eq!(hot.tokens(), MAX_LEASE - 10);
        assert_eq!(hot.hits(), 4);
        assert_eq!(hot.drain(), MAX_LEASE - 10);
        assert_eq!(hot.hits(), 4, "draining keeps the count");
    }

    #[test]
    fn an_evicted_bucket_never_leases_and_a_busy_one_is_not_evicted() {
        let (hot, cold) = parts(b"k");
        let b = Bucket::new(&hot, &cold);
        let cold = b.cold();
        assert!(cold.claim_lease());
        assert!(!b.try_evict(0), "lease in flight");
        b.finish_lease(LeaseResult::Granted, 1, None);
        assert!(!b.try_evict(0), "holds a token");
        assert!(!cold.evicted());
        assert_eq!(hot.take(0), Some(0));
        cold.block_until(10);
        assert!(!b.try_evict(5), "blocked");
        assert!(!cold.evicted());
        assert!(b.try_evict(10));
        assert!(cold.evicted());
        assert!(!cold.claim_lease());
        assert!(!cold.lease_in_flight());
    }
}
