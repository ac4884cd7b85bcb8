//! One (policy, key)'s local state, all in atomics.
//!
//! The request path touches only the bucket's first cache line (`hits`,
//! `tokens`, the watermark, the ledger's view and `blocked_until_us`; plus
//! `lease` when the watermark is crossed) and, to find the bucket, the key
//! in its second line: no lock, no allocation. Everything else is written by
//! the one lease task in flight or by the sweeper, which only reads the first
//! line (so it does not take the line away from a core that is deciding).

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering::*};

use bytes::Bytes;
use tokio::sync::Notify;

use super::map::INLINE_KEY;
use crate::decision::BypassReason;

/// The result of the last lease call, for decisions that waited on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseResult {
    Pending = 0,
    Granted = 1,
    Denied = 2,
    Timeout = 3,
    CircuitOpen = 4,
    Error = 5,
}

impl LeaseResult {
    fn from_u8(v: u8) -> LeaseResult {
        match v {
            1 => LeaseResult::Granted,
            2 => LeaseResult::Denied,
            3 => LeaseResult::Timeout,
            4 => LeaseResult::CircuitOpen,
            5 => LeaseResult::Error,
            _ => LeaseResult::Pending,
        }
    }

    pub(crate) fn bypass_reason(self) -> Option<BypassReason> {
        match self {
            LeaseResult::Timeout | LeaseResult::Pending => Some(BypassReason::LedgerTimeout),
            LeaseResult::CircuitOpen => Some(BypassReason::CircuitOpen),
            LeaseResult::Error => Some(BypassReason::LedgerError),
            LeaseResult::Granted | LeaseResult::Denied => None,
        }
    }
}

/// `KeyBucket::lease` states.
const IDLE: u8 = 0;
const LEASING: u8 = 1;
const EVICTED: u8 = 2;

/// The caller's key: inline up to [`INLINE_KEY`] bytes, else boxed.
#[derive(Debug)]
enum KeyBytes {
    Inline(u8, [u8; INLINE_KEY]),
    Boxed(Box<[u8]>),
}

impl KeyBytes {
    fn new(key: &[u8]) -> KeyBytes {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE_KEY => {
                let mut bytes = [0; INLINE_KEY];
                bytes[..key.len()].copy_from_slice(key);
                KeyBytes::Inline(len, bytes)
            }
            _ => KeyBytes::Boxed(key.into()),
        }
    }

    #[inline]
    fn get(&self) -> &[u8] {
        match self {
            KeyBytes::Inline(len, bytes) => &bytes[..usize::from(*len)],
            KeyBytes::Boxed(b) => b,
        }
    }
}

/// Laid out by hand (`repr(C)`): line 0 is what a decision reads and writes,
/// line 1 what a lookup compares, the rest is cold.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct KeyBucket {
    // Line 0: the request path.
    /// Leased tokens not yet spent.
    tokens: AtomicI64,
    /// Decisions ever made (wrapping); the sampler remembers the last value it saw.
    hits: AtomicU64,
    /// Renew when the tokens left fall to this: `ceil(last grant x
    /// low_watermark)`, at least 1.
    watermark: AtomicU64,
    /// The ledger's balance and full-again instant at the last lease.
    ledger_remaining: AtomicU64,
    reset_at_us: AtomicU64,
    /// Denied by the ledger: no ledger calls and no admission before this.
    blocked_until_us: AtomicU64,
    /// [`IDLE`], [`LEASING`] (a lease call is in flight: never two per key)
    /// or [`EVICTED`] (removed from the map: no lease call ever again, so
    /// no token can land in a bucket nobody will return it from).
    lease: AtomicU8,
    last_result: AtomicU8,
    /// The map's hash of `key` (read only when a shard grows or a key is
    /// evicted; it fills line 0).
    pub(crate) hash: u64,
    // Line 1: the lookup.
    key: KeyBytes,
    // Cold: the lease task and the sweeper.
    /// `{domain}:{policy}:{key}`, built once.
    pub(crate) ledger_key: Bytes,
    /// `hits` at the last rate sample.
    hits_sampled: AtomicU64,
    sampled_at_us: AtomicU64,
    /// Observed decisions per second (f64 bits), a decaying average.
    qps_bits: AtomicU64,
    /// Sweeper bookkeeping: when traffic was last seen at a sample.
    active_at_us: AtomicU64,
    /// GCRA theoretical arrival time (ns) of the fail-open static bucket.
    fallback_tat_ns: AtomicU64,
    /// The manager's low watermark, a fraction of each grant.
    low_watermark: f64,
    /// Woken when a lease call finishes.
    pub(crate) leased: Notify,
}

impl KeyBucket {
    /// A bucket holding nothing for `key` (whose map hash is `hash`), renewing
    /// at `low_watermark` (a fraction) of each grant.
    pub(crate) fn new(
        key: &[u8],
        hash: u64,
        ledger_key: Bytes,
        now_us: u64,
        low_watermark: f64,
    ) -> KeyBucket {
        KeyBucket {
            tokens: AtomicI64::new(0),
            hits: AtomicU64::new(0),
            watermark: AtomicU64::new(1),
            ledger_remaining: AtomicU64::new(0),
            reset_at_us: AtomicU64::new(0),
            blocked_until_us: AtomicU64::new(0),
            lease: AtomicU8::new(IDLE),
            last_result: AtomicU8::new(LeaseResult::Pending as u8),
            hash,
            key: KeyBytes::new(key),
            ledger_key,
            hits_sampled: AtomicU64::new(0),
            sampled_at_us: AtomicU64::new(now_us),
            qps_bits: AtomicU64::new(0f64.to_bits()),
            active_at_us: AtomicU64::new(now_us),
            fallback_tat_ns: AtomicU64::new(0),
            low_watermark,
            leased: Notify::new(),
        }
    }

    /// The caller's key (without the ledger prefix).
    #[inline]
    pub(crate) fn key(&self) -> &[u8] {
        self.key.get()
    }

    pub(crate) fn hit(&self) {
        self.hits.fetch_add(1, Relaxed);
    }

    /// Takes one local token; `Some(tokens left)` on success.
    pub(crate) fn take(&self) -> Option<u64> {
        let mut cur = self.tokens.load(Relaxed);
        while cur > 0 {
            match self
                .tokens
                .compare_exchange_weak(cur, cur - 1, AcqRel, Relaxed)
            {
                Ok(_) => return Some((cur - 1) as u64),
                Err(now) => cur = now,
            }
        }
        None
    }

    pub(crate) fn tokens(&self) -> u64 {
        self.tokens.load(Relaxed).max(0) as u64
    }

    /// Removes every local token (for TOKENRETURN); returns how many.
    pub(crate) fn drain(&self) -> u64 {
        self.tokens.swap(0, AcqRel).max(0) as u64
    }

    /// `tokens_left <= low_watermark x last grant` (at least the last token).
    pub(crate) fn below_watermark(&self, tokens_left: u64) -> bool {
        tokens_left <= self.watermark.load(Relaxed)
    }

    /// Claims the right to make the one lease call; false if one is in flight
    /// or the bucket was evicted.
    pub(crate) fn claim_lease(&self) -> bool {
        self.lease
            .compare_exchange(IDLE, LEASING, AcqRel, Relaxed)
            .is_ok()
    }

    pub(crate) fn lease_in_flight(&self) -> bool {
        self.lease.load(Acquire) == LEASING
    }

    /// Removed from the map: a decision holding it must look the key up again.
    pub(crate) fn evicted(&self) -> bool {
        self.lease.load(Acquire) == EVICTED
    }

    /// Marks the bucket evicted if no lease is in flight and it holds no
    /// tokens and no block; then no lease can ever be claimed for it, so its
    /// token count stays 0. The map removes it only if this returns true.
    pub(crate) fn try_evict(&self, now_us: u64) -> bool {
        if self
            .lease
            .compare_exchange(IDLE, EVICTED, AcqRel, Relaxed)
            .is_err()
        {
            return false;
        }
        // Tokens only grow under LEASING, and a lease's grant and block are
        // published before its release (Release/Acquire on `lease`).
        if self.tokens.load(Acquire) > 0 || self.blocked(now_us).is_some() {
            self.lease.store(IDLE, Release);
            return false;
        }
        true
    }

    pub(crate) fn last_result(&self) -> LeaseResult {
        LeaseResult::from_u8(self.last_result.load(Acquire))
    }

    /// Publishes a lease call's result and wakes decisions waiting on it.
    pub(crate) fn finish_lease(&self, result: LeaseResult, granted: u64) {
        if granted > 0 {
            let wm = (granted as f64 * self.low_watermark).ceil() as u64;
            self.watermark.store(wm.max(1), Relaxed);
            self.tokens.fetch_add(granted as i64, AcqRel);
        }
        self.last_result.store(result as u8, Release);
        self.lease.store(IDLE, Release);
        self.leased.notify_waiters();
    }

    pub(crate) fn set_ledger_view(&self, remaining: u64, reset_at_us: u64) {
        self.ledger_remaining.store(remaining, Relaxed);
        self.reset_at_us.store(reset_at_us, Relaxed);
    }

    pub(crate) fn ledger_remaining(&self) -> u64 {
        self.ledger_remaining.load(Relaxed)
    }

    pub(crate) fn reset_at_us(&self) -> u64 {
        self.reset_at_us.load(Relaxed)
    }

    /// `Some(until)` while blocked after a denial; clears an expired block.
    pub(crate) fn blocked(&self, now_us: u64) -> Option<u64> {
        let until = self.blocked_until_us.load(Acquire);
        if until == 0 {
            return None;
        }
        if now_us < until {
            return Some(until);
        }
        let _ = self
            .blocked_until_us
            .compare_exchange(until, 0, AcqRel, Relaxed);
        None
    }

    pub(crate) fn block_until(&self, until_us: u64) {
        self.blocked_until_us.store(until_us.max(1), Release);
    }

    pub(crate) fn qps(&self) -> f64 {
        f64::from_bits(self.qps_bits.load(Relaxed))
    }

    /// Folds the hits since the last sample into the rate estimate: "fast
    /// attack, slow decay". A higher measured rate is taken at once (a burst
    /// gets big leases quickly); a lower one pulls the average down with time
    /// constant `tau_us`, so B decays smoothly back to min_lease when traffic
    /// stops. Samples shorter than `min_us` are skipped (too noisy). Returns
    /// whether any traffic was seen in this sample.
    pub(crate) fn sample(&self, now_us: u64, tau_us: u64, min_us: u64) -> bool {
        let last = self.sampled_at_us.load(Acquire);
        if now_us < last.saturating_add(min_us) {
            return self.hits.load(Relaxed) != self.hits_sampled.load(Relaxed);
        }
        if self
            .sampled_at_us
            .compare_exchange(last, now_us, AcqRel, Relaxed)
            .is_err()
        {
            return true; // someone else is sampling right now
        }
        // Only the sampler that won the CAS above writes `hits_sampled`, and
        // `hits` is only read: the deciding cores keep their line.
        let total = self.hits.load(Relaxed);
        let hits = total.wrapping_sub(self.hits_sampled.swap(total, Relaxed));
        let dt = (now_us - last) as f64 / 1e6;
        let measured = hits as f64 / dt;
        let old = self.qps();
        let qps = if measured >= old {
            measured
        } else {
            let keep = (-((now_us - last) as f64) / tau_us as f64).exp();
            old * keep + measured * (1.0 - keep)
        };
        self.qps_bits.store(qps.to_bits(), Relaxed);
        if hits > 0 {
            self.active_at_us.store(now_us, Relaxed);
        }
        hits > 0
    }

    pub(crate) fn active_at_us(&self) -> u64 {
        self.active_at_us.load(Relaxed)
    }

    /// The fail-open static bucket (GCRA): admits at most `burst` at once and
    /// one more per `interval_ns` after that.
    pub(crate) fn fallback_take(&self, now_us: u64, interval_ns: u64, burst: u64) -> bool {
        let now = now_us.saturating_mul(1000);
        let tolerance = interval_ns.saturating_mul(burst.saturating_sub(1));
        let mut tat = self.fallback_tat_ns.load(Relaxed);
        loop {
            let start = tat.max(now);
            if start - now > tolerance {
                return false;
            }
            match self.fallback_tat_ns.compare_exchange_weak(
                tat,
                start + interval_ns,
                AcqRel,
                Relaxed,
            ) {
                Ok(_) => return true,
                Err(t) => tat = t,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_path_fits_line_0_and_the_key_line_1() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<KeyBucket>(), 64);
        assert!(offset_of!(KeyBucket, last_result) < 64);
        assert_eq!(offset_of!(KeyBucket, key), 64);
        assert!(size_of::<KeyBytes>() <= 64);
    }

    #[test]
    fn fallback_admits_exactly_its_burst_then_its_rate() {
        let b = KeyBucket::new(b"k", 0, Bytes::from_static(b"p:k"), 0, 0.2);
        // 20 per second, burst 40.
        let admitted = (0..100)
            .filter(|_| b.fallback_take(5_000_000, 50_000_000, 40))
            .count();
        assert_eq!(admitted, 40);
        // One second later: 20 more.
        let later = (0..100)
            .filter(|_| b.fallback_take(6_000_000, 50_000_000, 40))
            .count();
        assert_eq!(later, 20);
    }

    #[test]
    fn rate_estimate_attacks_fast_and_decays_slowly() {
        let b = KeyBucket::new(b"k", 0, Bytes::from_static(b"p:k"), 0, 0.2);
        for _ in 0..1000 {
            b.hit();
        }
        assert!(b.sample(100_000, 1_000_000, 10_000));
        assert_eq!(b.qps(), 10_000.0);
        // Idle for 1 s: one time constant, about 37% left.
        assert!(!b.sample(1_100_000, 1_000_000, 10_000));
        assert!(
            (b.qps() - 10_000.0 * (-1f64).exp()).abs() < 1.0,
            "{}",
            b.qps()
        );
        assert!(!b.sample(6_100_000, 1_000_000, 10_000));
        assert!(b.qps() < 100.0);
    }

    #[test]
    fn take_never_goes_below_zero_and_watermark_is_a_fraction_of_the_last_lease() {
        let b = KeyBucket::new(b"k", 0, Bytes::from_static(b"p:k"), 0, 0.2);
        assert_eq!(b.take(), None);
        b.finish_lease(LeaseResult::Granted, 10);
        assert_eq!(b.take(), Some(9));
        assert!(!b.below_watermark(3));
        assert!(b.below_watermark(2));
        assert_eq!(b.drain(), 9);
        assert_eq!(b.take(), None);
    }

    #[test]
    fn an_evicted_bucket_never_leases_and_a_busy_one_is_not_evicted() {
        let b = KeyBucket::new(b"k", 0, Bytes::from_static(b"p:k"), 0, 0.2);
        assert!(b.claim_lease());
        assert!(!b.try_evict(0), "lease in flight");
        b.finish_lease(LeaseResult::Granted, 1);
        assert!(!b.try_evict(0), "holds a token");
        assert!(!b.evicted());
        assert_eq!(b.take(), Some(0));
        b.block_until(10);
        assert!(!b.try_evict(5), "blocked");
        assert!(!b.evicted());
        assert!(b.try_evict(10));
        assert!(b.evicted());
        assert!(!b.claim_lease());
        assert!(!b.lease_in_flight());
    }
}
