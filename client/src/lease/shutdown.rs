//! [`LeaseManager::shutdown`]: the sweeper stopped, and every key's unspent
//! tokens returned to the ledger before the gateway exits.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::{LeaseManager, PolicyState};

/// Waits until `done()` holds, re-checking each time `notify` wakes its
/// waiters, for at most `limit`.
async fn wait_until(notify: &Notify, limit: Duration, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        // Registered before the check, so a wake-up in between is not lost.
        let woken = notify.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if done() || tokio::time::timeout_at(deadline, woken).await.is_err() {
            return;
        }
    }
}

impl LeaseManager {
    /// Stops the sweeper and returns every key's unspent tokens (TOKENRETURN),
    /// all calls concurrently, each under the lease deadline. A key whose
    /// lease is in flight returns what that lease brings, once it lands (at
    /// most the lease deadline later). Decisions made after `shutdown` may
    /// lease again; their tokens are not returned.
    /// Returns the sweeper started before (idle keys' returns) are waited
    /// for too, up to the same deadline. A widened override's keys return
    /// theirs too, and the manager stops following override channels.
    pub async fn shutdown(&self) {
        self.inner.stopped.store(true, Ordering::Release);
        self.stop_following();
        self.return_all(&self.states()).await;
        let settle = self.inner.client.config().lease_deadline + Duration::from_millis(50);
        let inner = &self.inner;
        wait_until(&inner.returns_done, settle, || {
            inner.returns.load(Ordering::Acquire) == 0
        })
        .await;
    }

    /// Returns every key's unspent tokens in `states`, all calls
    /// concurrently; a key whose lease is in flight returns what it brings,
    /// once it lands (at most the lease deadline later).
    pub(super) async fn return_all(&self, states: &[Arc<PolicyState>]) {
        let settle = self.inner.client.config().lease_deadline + Duration::from_millis(50);
        let mut calls = tokio::task::JoinSet::new();
        for state in states {
            state.map.for_each(|bucket| {
                if bucket.hot.tokens() > 0 || bucket.cold().lease_in_flight() {
                    let (me, state, bucket) = (self.clone(), state.clone(), bucket.cold().clone());
                    calls.spawn(async move {
                        wait_until(&bucket.leased, settle, || !bucket.lease_in_flight()).await;
                        me.give_back(&state, &bucket).await
                    });
                }
            });
        }
        while calls.join_next().await.is_some() {}
    }
}
