//! [`LeaseManager::decide`] and its hand-written future [`Decide`]: the local
//! decision on the first poll, and the wait for a lease when the key has no
//! local tokens.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::bucket::KeyCold;
use super::overrides::Route;
use super::{LeaseManager, PolicyState, ANY_SUB};
use crate::decision::{BypassReason, Decision};
use crate::policy::PolicyId;

/// The future of [`LeaseManager::decide`] (48 bytes), ready at its first
/// poll unless the key has no local tokens.
///
/// Its first poll makes the local decision; only a key with no local tokens leaves it waiting,
/// in a boxed state (a timer and a notification, ~300 bytes) that only such
/// a decision allocates. (An `async fn` kept room for that state and the
/// decision in every future, 120 bytes, and moving it cost the steady state
/// ~50 ns.)
#[must_use = "futures do nothing unless polled"]
pub struct Decide<'a> {
    /// `None` once the decision is out (a poll after that panics, rather
    /// than take another token).
    manager: Option<&'a LeaseManager>,
    /// The policy's index (a `u32` with `sub` keeps the future at 48 bytes).
    id: u32,
    /// The sub-key of a spread policy's decision ([`ANY_SUB`]: a random
    /// one); ignored by a policy with no sub-keys.
    sub: u32,
    key: &'a [u8],
    waiting: Option<Pin<Box<dyn Future<Output = Decision> + Send + 'a>>>,
}

impl std::fmt::Debug for Decide<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decide")
            .field("id", &self.id)
            .field("sub", &self.sub)
            .field("waiting", &self.waiting.is_some())
            .finish()
    }
}

impl Future for Decide<'_> {
    type Output = Decision;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Decision> {
        let Some(m) = self.manager else {
            panic!("Decide polled after it returned its decision");
        };
        if self.waiting.is_none() {
            let route = m.route(PolicyId(self.id as usize));
            if let Route::Disabled(state) = route {
                self.manager = None;
                return Poll::Ready(m.disabled(state, 1));
            }
            let state = route.state().pick(self.sub);
            // Only a decision that has to wait takes a reference to the bucket.
            let found = m.with_bucket(state, self.key, |bucket| {
                m.local(state, bucket).ok_or_else(|| bucket.cold().clone())
            });
            match found {
                Ok(d) => {
                    self.manager = None;
                    return Poll::Ready(d);
                }
                Err(bucket) => {
                    let state = state.clone();
                    self.waiting = Some(Box::pin(m.wait_for_lease(state, bucket)));
                }
            }
        }
        let waiting = self.waiting.as_mut().expect("set above");
        let d = std::task::ready!(waiting.as_mut().poll(cx));
        (self.manager, self.waiting) = (None, None);
        Poll::Ready(d)
    }
}

impl LeaseManager {
    /// Decides one request for `key` under policy `id`, waiting for the
    /// ledger only when this key has no local tokens (its first request, or a
    /// demand spike that outran the prefetch), and then at most the lease
    /// deadline plus 1 ms. A ledger failure yields a bypass outcome, never
    /// `Limited`. The local decision is made when the future is first
    /// polled. Under an emergency override ([`Self::follow_overrides`]) a
    /// disabled policy admits at once (`Bypassed(Override)`, no ledger
    /// call) and a widened one decides from its widened bucket.
    ///
    /// For a policy spread over sub-keys (`sub_keys`, [`crate::subkey`]),
    /// a random sub-key decides (spread as evenly as many callers would
    /// be); [`Self::decide_for`] picks the caller's sub-key instead.
    pub fn decide<'a>(&'a self, id: PolicyId, key: &'a [u8]) -> Decide<'a> {
        self.decide_in(id, key, ANY_SUB)
    }

    /// [`Self::decide`] for a request of `caller` (a client address, a user
    /// id: any identity other than `key`). For a policy spread over N
    /// sub-keys ([`crate::subkey`]) the request decides in the caller's
    /// sub-key ([`crate::subkey::caller_index`]: the same in every
    /// process), which holds its share of the policy's burst and rate; the
    /// decision's `limit`, `remaining` and `reset` are that sub-key's, and
    /// a denial blocks that sub-key only. For any other policy, exactly
    /// `decide` (`caller` is not read).
    pub fn decide_for<'a>(&'a self, id: PolicyId, key: &'a [u8], caller: &[u8]) -> Decide<'a> {
        self.decide_in(id, key, self.caller_sub(id, caller))
    }

    #[inline]
    fn decide_in<'a>(&'a self, id: PolicyId, key: &'a [u8], sub: u32) -> Decide<'a> {
        Decide {
            manager: Some(self),
            id: id.0 as u32,
            sub,
            key,
            waiting: None,
        }
    }

    /// `decide` for a key with no local tokens: waits for its lease (in
    /// `state`, the policy's own or a widened override's).
    async fn wait_for_lease(&self, state: Arc<PolicyState>, mut bucket: Arc<KeyCold>) -> Decision {
        let state = &state;
        let deadline = tokio::time::Instant::now()
            + self.inner.client.config().lease_deadline
            + Duration::from_millis(1);
        let mut woken = false;
        loop {
            if bucket.evicted() {
                // The sweeper removed the key while this decision held its
                // bucket (no lease can start for it any more): the key's
                // bucket now is the one in the map, perhaps a new one.
                bucket = self.with_bucket(state, bucket.key(), |b| b.cold().clone());
                // Its lease results are news to this decision.
                woken = false;
                continue;
            }
            let leased = bucket.leased.notified();
            tokio::pin!(leased);
            leased.as_mut().enable();
            let now = self.inner.clock.now_us();
            let local = state.map.with(&bucket, |b| {
                if let Some(left) = b.hot.take(0) {
                    return Some(self.finish(state, b.cold().key(), self.allowed(state, b, left)));
                }
                if b.cold().blocked(now).is_some() {
                    return Some(self.finish(state, b.cold().key(), self.limited(state, b, now)));
                }
                None
            });
            match local {
                Some(Some(d)) => return d,
                Some(None) => {}
                // Evicted meanwhile: found again at the top of the loop.
                None => continue,
            }
            if !bucket.lease_in_flight() {
                // After a lease finished while we waited, its result decides;
                // before that, an old failure does not: try the ledger.
                match bucket.last_result().bypass_reason() {
                    Some(reason) if woken => return self.bypass(state, &bucket, Some(reason), now),
                    // Refused with none in flight: a block (or an eviction)
                    // came after the check above; look again rather than
                    // wait for a lease that is not coming.
                    _ if !self.spawn_lease(state, &bucket, now) && !bucket.lease_in_flight() => {
                        continue
                    }
                    _ => {}
                }
            }
            if tokio::time::timeout_at(deadline, leased).await.is_err() {
                let now = self.inner.clock.now_us();
                return self.bypass(state, &bucket, Some(BypassReason::LedgerTimeout), now);
            }
            woken = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::Context;
    use std::time::Duration;

    use super::*;
    use crate::client::{Client, ClientConfig};
    use crate::clock::ManualClock;
    use crate::lease::LeaseConfig;
    use crate::policy::{FailureMode, Mode, PolicySet};

    #[test]
    fn the_decide_future_is_small() {
        assert_eq!(std::mem::size_of::<Decide<'_>>(), 48);
    }

    /// Polling a finished `Decide` again panics instead of deciding (and
    /// taking a token) a second time.
    #[tokio::test]
    #[should_panic(expected = "polled after it returned")]
    async fn a_finished_decide_is_not_polled_twice() {
        let addr = "127.0.0.1:9".parse().unwrap(); // refused: the breaker path
        let p = crate::policy::Policy {
            name: "p".into(),
            requests_per_unit: 10,
            unit: Duration::from_secs(1),
            burst: 10,
            failure_mode: FailureMode::FailClosed,
            mode: Mode::Enforce,
            fail_open_requests_per_unit: 20,
        };
        let m = LeaseManager::new(
            Client::new(ClientConfig::new(addr)),
            &PolicySet::from_policies("t", vec![p]),
            LeaseConfig::default(),
            Arc::new(ManualClock::new()),
        );
        let mut f = m.decide(PolicyId::FIRST, b"k");
        let d = (&mut f).await;
        assert!(!d.allowed, "{d:?}");
        let mut f = std::pin::pin!(f);
        let _ = f
            .as_mut()
            .poll(&mut Context::from_waker(std::task::Waker::noop()));
    }
}
