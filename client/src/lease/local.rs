//! The decision that does not wait: the map lookup (inserting a new key),
//! a local token, the renewal trigger at the low watermark, and a key with
//! no local tokens (blocked, breaker open, or a lease to start).

use std::sync::Arc;

use bytes::Bytes;

use super::bucket::{Bucket, KeyCold, HIT};
use super::overrides::Route;
use super::{LeaseManager, PolicyState, ANY_SUB, MIN_SAMPLE_US};
use crate::clock::us;
use crate::decision::{BypassReason, Decision, Outcome};
use crate::policy::PolicyId;
use crate::subkey;

impl LeaseManager {
    /// Decides without waiting: `None` when the key has no local tokens and a
    /// lease is on its way (the caller may retry, or call [`Self::decide`]).
    /// The steady-state path: a map lookup under the shard's read lock and
    /// one compare-and-swap of the word that holds the token count and the
    /// decision counter; no clock read.
    /// A policy an override disabled admits (`Bypassed(Override)`).
    ///
    /// For a policy spread over sub-keys (`sub_keys`), a random sub-key
    /// decides (as [`Self::decide`]); [`Self::try_decide_for`] picks the
    /// caller's.
    pub fn try_decide(&self, id: PolicyId, key: &[u8]) -> Option<Decision> {
        self.try_decide_in(id, key, ANY_SUB)
    }

    /// [`Self::try_decide`] in the sub-key of `caller` (any identity other
    /// than `key`: a client address, a user id) when policy `id` is spread
    /// over sub-keys ([`crate::subkey`]); as `try_decide` otherwise.
    pub fn try_decide_for(&self, id: PolicyId, key: &[u8], caller: &[u8]) -> Option<Decision> {
        self.try_decide_in(id, key, self.caller_sub(id, caller))
    }

    fn try_decide_in(&self, id: PolicyId, key: &[u8], sub: u32) -> Option<Decision> {
        let route = self.route(id);
        if let Route::Disabled(state) = route {
            return Some(self.disabled(state, 1));
        }
        let state = route.state().pick(sub);
        self.with_bucket(state, key, |bucket| self.local(state, bucket))
    }

    /// The sub-key `caller` decides in under policy `id`
    /// ([`subkey::caller_index`]); [`ANY_SUB`] for a policy with no
    /// sub-keys (which ignores it).
    pub(super) fn caller_sub(&self, id: PolicyId, caller: &[u8]) -> u32 {
        match self.inner.policies[id.0].sub_keys() {
            1 => ANY_SUB,
            n => subkey::caller_index(caller, n),
        }
    }

    /// Decides `tokens` requests (at least 1) for `key` at once, when its
    /// local bucket holds that many: one CAS takes them all, and the
    /// decision is the allowed one the last of them would get (renewal
    /// starts at the low watermark as usual). `None`, with nothing taken
    /// or counted, when the key holds fewer: decide one at a time then. A
    /// policy an override disabled admits them all, counted as `tokens`
    /// decisions `Bypassed(Override)`.
    /// For a policy spread over sub-keys, from a random sub-key.
    pub fn try_take(&self, id: PolicyId, key: &[u8], tokens: u64) -> Option<Decision> {
        let route = self.route(id);
        if let Route::Disabled(state) = route {
            return Some(self.disabled(state, tokens));
        }
        let state = route.state().pick(ANY_SUB);
        self.with_bucket(state, key, |bucket| {
            let left = bucket.hot.take_n(tokens)?;
            if bucket.hot.below_watermark(left) {
                self.renew(state, bucket);
            }
            state.metrics.record_allowed(tokens);
            Some(self.allowed(state, bucket, left))
        })
    }

    /// Runs `f` on the key's bucket (created if new), borrowed under its
    /// shard's read lock: no reference-count traffic on a hot key's bucket.
    #[inline]
    pub(super) fn with_bucket<R>(
        &self,
        state: &PolicyState,
        key: &[u8],
        f: impl FnOnce(Bucket<'_>) -> R,
    ) -> R {
        let hash = state.map.hash(key);
        match state.map.try_with(hash, key, f) {
            Ok(r) => r,
            Err(f) => self.with_new_bucket(state, hash, key, f),
        }
    }

    /// `with_bucket` for a key not in the map (yet): inserts it, then runs
    /// `f` under the read lock. The sweeper may evict the new key in between
    /// (with `evict_after` zero); then it is looked up, and inserted, again.
    #[cold]
    fn with_new_bucket<R>(
        &self,
        state: &PolicyState,
        hash: u64,
        key: &[u8],
        mut f: impl FnOnce(Bucket<'_>) -> R,
    ) -> R {
        // Made outside the shard's write lock (a sub-key's looks for its
        // hash tag).
        let ledger_key = Bytes::from(state.ledger_key(key));
        loop {
            let now = self.inner.clock.now_us();
            state.map.get_or_insert(hash, key, now, |index| {
                KeyCold::new(
                    key,
                    hash,
                    index,
                    ledger_key.clone(),
                    now,
                    self.inner.config.low_watermark,
                )
            });
            match state.map.try_with(hash, key, f) {
                Ok(r) => return r,
                Err(back) => f = back,
            }
        }
    }

    /// The lock-free part: a local token, else blocked, else (empty) breaker
    /// open. Reads the clock only off the steady state (at the renewal
    /// trigger, or with no local tokens).
    ///
    /// Tokens come first: they were granted by the ledger, so a key whose
    /// renewal was denied spends what it holds, and the block (no ledger
    /// calls, `Limited`) applies once they run out.
    ///
    /// The steady state (a token taken, above the watermark) reads and writes
    /// only the key's hot record: one CAS counts the decision and takes the
    /// token. The rest reads the cold part too.
    ///
    /// The steady state reads no clock: an allowed decision's fields come
    /// from the record and the policy.
    pub(super) fn local(&self, state: &Arc<PolicyState>, bucket: Bucket<'_>) -> Option<Decision> {
        if let Some(left) = bucket.hot.take(HIT) {
            if bucket.hot.below_watermark(left) {
                self.renew(state, bucket);
            }
            state.metrics.record(Outcome::Allowed);
            return Some(self.allowed(state, bucket, left));
        }
        self.local_empty(state, bucket, self.inner.clock.now_us())
    }

    /// `local` at the low watermark: starts the key's renewal.
    #[cold]
    #[inline(never)]
    fn renew(&self, state: &Arc<PolicyState>, bucket: Bucket<'_>) {
        let now = self.inner.clock.now_us();
        self.spawn_lease(state, bucket.cold(), now);
    }

    /// `local` for a key with no local tokens.
    #[cold]
    fn local_empty(
        &self,
        state: &Arc<PolicyState>,
        bucket: Bucket<'_>,
        now: u64,
    ) -> Option<Decision> {
        bucket.hot.hit();
        // A key deciding without tokens (blocked, breaker open, waiting) may
        // not lease for a long time, and the sweeper does not sample a busy
        // key: sample here (at most every MIN_SAMPLE_US; usually one load),
        // or more than 2^22 decisions between samples would wrap the count.
        bucket.sample(now, us(self.inner.config.qps_decay), MIN_SAMPLE_US);
        let cold = bucket.cold();
        if cold.blocked(now).is_some() {
            return Some(self.finish(state, cold.key(), self.limited(state, bucket, now)));
        }
        if self.inner.client.breaker_would_refuse_for(&cold.ledger_key) {
            return Some(self.bypass(state, cold, Some(BypassReason::CircuitOpen), now));
        }
        // Whatever the last lease's fate, try again: the breaker, not this
        // key, decides when the ledger is left alone.
        self.spawn_lease(state, cold, now);
        None
    }
}
