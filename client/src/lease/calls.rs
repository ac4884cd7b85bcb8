//! The manager's calls to the ledger: a key's one TOKENLEASE (its size,
//! and its result landed in the key's record) and TOKENRETURN of a key's
//! unspent tokens.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::bucket::{KeyCold, LeaseResult, MAX_LEASE};
use super::{Inner, LeaseManager, PolicyState, MIN_SAMPLE_US};
use crate::clock::us;

/// One return in `Inner::returns`; ends it when dropped (also if its task
/// is dropped with the runtime).
struct ReturnInFlight(Arc<Inner>);

impl Drop for ReturnInFlight {
    fn drop(&mut self) {
        if self.0.returns.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.returns_done.notify_waiters();
        }
    }
}

impl LeaseManager {
    /// Starts the key's one lease call unless one is in flight or the key is blocked.
    /// Returns false when it started none because the key is blocked (or
    /// evicted) or another call holds the slot.
    pub(super) fn spawn_lease(
        &self,
        state: &Arc<PolicyState>,
        bucket: &Arc<KeyCold>,
        now: u64,
    ) -> bool {
        if bucket.blocked(now).is_some() || !bucket.claim_lease() {
            return false;
        }
        let me = self.clone();
        let (state, bucket) = (state.clone(), bucket.clone());
        self.inner
            .runtime
            .spawn(async move { me.lease(&state, bucket).await });
        true
    }

    /// B = clamp(min_lease, observed_qps x lookahead, max_lease), and at
    /// most 2^40 tokens (a key's token count has 42 bits).
    pub(super) fn lease_size(&self, bucket: &KeyCold) -> u64 {
        let c = &self.inner.config;
        let want = (bucket.qps() * c.lookahead.as_secs_f64()).ceil() as u64;
        want.clamp(c.min_lease, c.max_lease.max(c.min_lease))
            .clamp(1, MAX_LEASE)
    }

    /// The key's lease call (its slot claimed by `spawn_lease`): samples
    /// the key's rate, asks for `lease_size` tokens (at least 1) and lands
    /// the answer, or the failure, in the key's record.
    async fn lease(&self, state: &PolicyState, bucket: Arc<KeyCold>) {
        let c = &self.inner.config;
        let now = self.inner.clock.now_us();
        state
            .map
            .with(&bucket, |b| b.sample(now, us(c.qps_decay), MIN_SAMPLE_US));
        let want = self.lease_size(&bucket);
        let started = Instant::now();
        self.inner.ledger.leases.increment(1);
        let res = self
            .inner
            .client
            .token_lease(&bucket.ledger_key, state.policy.bucket(), want, 1)
            .await;
        let now = self.inner.clock.now_us();
        match res {
            Ok(lease) => {
                self.inner
                    .ledger
                    .rtt
                    .record(started.elapsed().as_secs_f64());
                let (result, granted) = if lease.granted > 0 {
                    self.inner.ledger.lease_size.record(lease.granted as f64);
                    (LeaseResult::Granted, lease.granted)
                } else {
                    // `None` (can never succeed) cannot happen with MIN 1 and a
                    // capacity of at least 1; block for a whole unit if it does.
                    let wait = lease.retry_after.unwrap_or(state.policy.unit);
                    bucket.block_until(now.saturating_add(us(wait).max(1)));
                    (LeaseResult::Denied, 0)
                };
                let deficit = state.policy.burst.saturating_sub(lease.remaining);
                self.finish_lease(state, &bucket, result, granted, Some((deficit, now)));
            }
            Err(e) => {
                let result = if e.is_timeout() {
                    LeaseResult::Timeout
                } else if e.is_circuit_open() {
                    LeaseResult::CircuitOpen
                } else {
                    LeaseResult::Error
                };
                self.finish_lease(state, &bucket, result, 0, None);
            }
        }
    }

    /// Lands a lease call's result in the key's hot record and releases the
    /// key's lease slot. The key cannot have been evicted: eviction needs the
    /// slot, which this call holds.
    fn finish_lease(
        &self,
        state: &PolicyState,
        bucket: &Arc<KeyCold>,
        result: LeaseResult,
        granted: u64,
        ledger: Option<(u64, u64)>,
    ) {
        let landed = state
            .map
            .with(bucket, |b| b.finish_lease(result, granted, ledger));
        debug_assert!(landed.is_some(), "a key with a lease in flight was evicted");
    }

    /// Starts a TOKENRETURN of the key's tokens, counted in `returns` from
    /// now until it is done, so `shutdown` can wait for it.
    pub(super) fn spawn_return(&self, state: Arc<PolicyState>, bucket: Arc<KeyCold>) {
        self.inner.returns.fetch_add(1, Ordering::AcqRel);
        let in_flight = ReturnInFlight(self.inner.clone());
        let me = self.clone();
        self.inner.runtime.spawn(async move {
            me.give_back(&state, &bucket).await;
            drop(in_flight);
        });
    }

    /// TOKENRETURN of all the key's local tokens (no call if it holds none).
    pub(super) async fn give_back(&self, state: &PolicyState, bucket: &Arc<KeyCold>) {
        // An evicted key held no tokens (and its slot may be another key's).
        let map = &state.map;
        let count = map.with(bucket, |b| b.hot.drain()).unwrap_or(0);
        if count == 0 {
            return;
        }
        self.inner.ledger.returns.increment(1);
        let params = state.policy.bucket();
        // If the return fails the tokens are simply not returned: the ledger
        // refills on its own, so the only cost is a little unused quota.
        let _ = self
            .inner
            .client
            .token_return(&bucket.ledger_key, params, count)
            .await;
    }
}
