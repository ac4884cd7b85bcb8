//! The sweeper: a background task that runs [`LeaseManager::maintain`]
//! every `sweep_interval` (rate samples of quiet keys, TOKENRETURN of idle
//! keys, eviction of long-idle empty keys).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{LeaseManager, MIN_SAMPLE_US};
use crate::clock::us;

impl LeaseManager {
    /// Starts the sweeper on the manager's runtime. It holds only a weak
    /// reference: it ends at its next tick once every clone of the manager
    /// is dropped, or once [`Self::shutdown`] has run.
    pub(super) fn start_sweeper(&self) {
        let sweeper = Arc::downgrade(&self.inner);
        let every = self.inner.config.sweep_interval;
        self.inner.runtime.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                // Gone once every clone of the manager is dropped.
                let Some(inner) = sweeper.upgrade() else {
                    return;
                };
                if inner.stopped.load(Ordering::Acquire) {
                    return;
                }
                LeaseManager { inner }.maintain();
            }
        });
    }

    /// One sweep: rate samples, TOKENRETURN for keys idle past `idle_after`,
    /// eviction past `evict_after`. The background sweeper calls this every
    /// `sweep_interval`; tests with a manual clock call it directly. It
    /// also ends the emergency overrides whose time is up, and sweeps a
    /// widened override's keys like the policies' own.
    pub fn maintain(&self) {
        self.expire_overrides();
        let c = &self.inner.config;
        let now = self.inner.clock.now_us();
        for state in self.states() {
            let mut evict = Vec::new();
            // Keys that decided since the last sweep are only marked busy:
            // their rate is sampled when they lease (`lease`), so the sweep
            // reads nothing of theirs but the hot record the decisions keep
            // in cache anyway.
            state.map.sweep(now, |bucket, active_at_us| {
                bucket.sample(now, us(c.qps_decay), MIN_SAMPLE_US);
                let cold = bucket.cold();
                let idle = now.saturating_sub(active_at_us);
                if idle < us(c.idle_after) || cold.lease_in_flight() {
                    return;
                }
                if bucket.hot.tokens() > 0 {
                    self.spawn_return(state.clone(), cold.clone());
                } else if idle >= us(c.evict_after) && cold.blocked(now).is_none() {
                    evict.push(cold.clone());
                }
            });
            // Checked again under the shard's write lock: no decision that
            // found the bucket in the map can be taking a token or claiming a
            // lease meanwhile. A decision that holds the bucket from earlier
            // (waiting for a lease) can: `try_evict` shuts it out of leasing
            // for good, so no grant lands in a bucket that left the map.
            for bucket in evict {
                state.map.remove_unless(&bucket, |b| !b.try_evict(now));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::client::{Client, ClientConfig};
    use crate::clock::ManualClock;
    use crate::lease::LeaseConfig;
    use crate::policy::PolicySet;

    /// A manager dropped without `shutdown` is freed: its sweeper holds only
    /// a weak reference and ends at its next tick.
    #[tokio::test]
    async fn a_dropped_manager_is_freed_and_its_sweeper_ends() {
        let config = LeaseConfig {
            sweep_interval: Duration::from_millis(5),
            ..LeaseConfig::default()
        };
        let addr = "127.0.0.1:9".parse().unwrap(); // never dialled
        let m = LeaseManager::new(
            Client::new(ClientConfig::new(addr)),
            &PolicySet::from_policies("t", vec![]),
            config,
            Arc::new(ManualClock::new()),
        );
        tokio::time::sleep(Duration::from_millis(20)).await; // a few sweeps ran
        let inner = Arc::downgrade(&m.inner);
        drop(m);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            inner.upgrade().is_none(),
            "the sweeper kept the manager alive"
        );
    }
}
