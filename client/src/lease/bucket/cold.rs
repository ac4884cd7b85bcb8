//! [`KeyCold`]: everything about a key that a steady-state decision does
//! not touch (lease state, the block, the rate sampler, the fail-open
//! bucket, the full and the ledger key), and [`LeaseResult`].

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::*};

use bytes::Bytes;
use tokio::sync::Notify;

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

/// `KeyCold::lease` states.
pub(super) const IDLE: u8 = 0;
const LEASING: u8 = 1;
pub(super) const EVICTED: u8 = 2;

/// Everything else about a key; `Arc`'d so lease tasks, waiting decisions and
/// token returns can hold it outside the map's lock.
#[derive(Debug)]
pub(crate) struct KeyCold {
    /// The map's hash of `key` (its shard and table slot follow from it).
    pub(crate) hash: u64,
    /// Where the key's [`KeyHot`](super::KeyHot) is in its shard (valid while the shard's
    /// slot `index` holds this `Arc`).
    pub(crate) index: u32,
    /// The caller's key (without the ledger prefix).
    key: Box<[u8]>,
    /// `{domain}:{policy}:{key}`, built once.
    pub(crate) ledger_key: Bytes,
    /// [`IDLE`], [`LEASING`] (a lease call is in flight: never two per key)
    /// or [`EVICTED`] (removed from the map: no lease call ever again, so
    /// no token can land in a bucket nobody will return it from).
    pub(super) lease: AtomicU8,
    last_result: AtomicU8,
    /// Denied by the ledger: no ledger calls and no admission before this.
    blocked_until_us: AtomicU64,
    /// Decision count (modulo 2^22) at the last rate sample.
    pub(super) hits_sampled: AtomicU64,
    pub(super) sampled_at_us: AtomicU64,
    /// Observed decisions per second (f64 bits), a decaying average.
    pub(super) qps_bits: AtomicU64,
    /// GCRA theoretical arrival time (ns) of the fail-open static bucket.
    fallback_tat_ns: AtomicU64,
    /// When the ledger's deficit in the hot record was read (us).
    pub(super) ledger_at_us: AtomicU64,
    /// The manager's low watermark, a fraction of each grant.
    pub(super) low_watermark: f64,
    /// Woken when a lease call finishes.
    pub(crate) leased: Notify,
}

impl KeyCold {
    /// The cold part of a key holding nothing, at `index` of its shard,
    /// renewing at `low_watermark` (a fraction) of each grant.
    pub(crate) fn new(
        key: &[u8],
        hash: u64,
        index: u32,
        ledger_key: Bytes,
        now_us: u64,
        low_watermark: f64,
    ) -> KeyCold {
        KeyCold {
            hash,
            index,
            key: key.into(),
            ledger_key,
            lease: AtomicU8::new(IDLE),
            last_result: AtomicU8::new(LeaseResult::Pending as u8),
            blocked_until_us: AtomicU64::new(0),
            hits_sampled: AtomicU64::new(0),
            sampled_at_us: AtomicU64::new(now_us),
            qps_bits: AtomicU64::new(0f64.to_bits()),
            fallback_tat_ns: AtomicU64::new(0),
            ledger_at_us: AtomicU64::new(now_us),
            low_watermark,
            leased: Notify::new(),
        }
    }

    /// The caller's key (without the ledger prefix).
    #[inline]
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// Claims the right to make the one lease call; false if one is in flight
    /// or the key was evicted.
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

    pub(crate) fn last_result(&self) -> LeaseResult {
        LeaseResult::from_u8(self.last_result.load(Acquire))
    }

    /// Publishes a lease call's result (after its tokens, if any, are in the
    /// hot record) and wakes decisions waiting on it.
    pub(super) fn release_lease(&self, result: LeaseResult) {
        self.last_result.store(result as u8, Release);
        self.lease.store(IDLE, Release);
        self.leased.notify_waiters();
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

    /// Lifts a block (the ledger has tokens again: some were returned).
    pub(crate) fn unblock(&self) {
        self.blocked_until_us.store(0, Release);
    }

    /// When the ledger's deficit in the hot record was read (us; the key's
    /// creation before any lease).
    pub(crate) fn ledger_at_us(&self) -> u64 {
        self.ledger_at_us.load(Relaxed)
    }

    pub(crate) fn qps(&self) -> f64 {
        f64::from_bits(self.qps_bits.load(Relaxed))
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
    use super::super::parts;

    #[test]
    fn fallback_admits_exactly_its_burst_then_its_rate() {
        let (_, b) = parts(b"k");
        let b = b.unwrap();
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
}
