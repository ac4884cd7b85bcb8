//! The limits Envoy sends in a descriptor (`RateLimitDescriptor.limit`, a
//! `RateLimitOverride {requests_per_unit, unit}` from the route's
//! `rate_limits[].limit.dynamic_metadata`): one lease manager per distinct
//! limit, made on first use and kept across config reloads.
//!
//! The config file has no policy for such a limit, so one is made from the
//! override's two numbers: `requests_per_unit` per `unit`, a burst of
//! `requests_per_unit`, `mode: enforce` (envoyproxy/ratelimit turns shadow
//! mode off for an override) and the other settings' defaults
//! (`fail_open`). Its name, `override:<requests_per_unit>/<unit>`, is also
//! its ledger keys' middle part (`{domain}:override:3/second:{entries}`), so
//! an override never drains the configured limit's bucket for the same
//! entries, and two overrides of different limits count apart.
//!
//! At most [`MAX_MANAGERS`] managers live at once; making one more retires
//! the one used least recently (its unspent tokens go back to the ledger;
//! a later request for it makes a new one, which finds the ledger's balance
//! where the old one left it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_client::{FailureMode, LeaseManager, Mode, Policy, PolicySet};

use crate::limits::Ledger;

/// Most override managers kept at once (each holds a sweeper task and a key
/// map; a fleet's routes send a handful of distinct limits, not thousands).
pub const MAX_MANAGERS: usize = 1024;

/// An override's limit: the domain, requests per unit, the unit.
type Id = (String, u64, Duration);

struct Entry {
    manager: LeaseManager,
    /// The `clock` value of its last use (least recently used goes first).
    used: u64,
}

#[derive(Default)]
struct State {
    managers: HashMap<Id, Entry>,
    clock: u64,
}

/// The override managers, shared by every request (cheap to clone).
#[derive(Clone)]
pub struct AdHoc {
    state: Arc<Mutex<State>>,
    ledger: Ledger,
    max: usize,
}

impl std::fmt::Debug for AdHoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdHoc").field("max", &self.max).finish()
    }
}

impl AdHoc {
    /// Override managers leasing from `ledger`, at most [`MAX_MANAGERS`].
    pub fn new(ledger: Ledger) -> AdHoc {
        AdHoc::with_max(ledger, MAX_MANAGERS)
    }

    /// As [`AdHoc::new`] with at most `max` managers (at least 1).
    pub fn with_max(ledger: Ledger, max: usize) -> AdHoc {
        AdHoc {
            state: Arc::default(),
            ledger,
            max: max.max(1),
        }
    }

    /// The policy an override of `requests_per_unit` (at least 1) per
    /// `unit` decides with.
    pub fn policy(requests_per_unit: u64, unit: Duration, unit_name: &str) -> Policy {
        Policy {
            name: format!("override:{requests_per_unit}/{unit_name}"),
            requests_per_unit,
            unit,
            burst: requests_per_unit,
            failure_mode: FailureMode::FailOpen,
            mode: Mode::Enforce,
            fail_open_requests_per_unit: requests_per_unit.saturating_mul(2),
        }
    }

    /// The manager for `policy` (from [`AdHoc::policy`]) in `domain`, made
    /// now if there is none, retiring the least recently used one when
    /// [`MAX_MANAGERS`] are live. Must run inside a tokio runtime.
    pub fn manager(&self, domain: &str, policy: Policy) -> LeaseManager {
        let id = (domain.to_owned(), policy.requests_per_unit, policy.unit);
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.clock += 1;
        let now = s.clock;
        if let Some(e) = s.managers.get_mut(&id) {
            e.used = now;
            return e.manager.clone();
        }
        if s.managers.len() >= self.max {
            let oldest = s
                .managers
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
                .expect("the map is full, so not empty");
            if let Some(old) = s.managers.remove(&oldest) {
                tokio::spawn(async move { old.manager.shutdown().await });
            }
        }
        let manager = LeaseManager::new(
            self.ledger.client.clone(),
            // One `policy="override"` set of series for every override, so
            // that overrides coming and going add none.
            &PolicySet::from_policies(domain, vec![policy]).with_metrics_label("override"),
            self.ledger.lease.clone(),
            self.ledger.clock.clone(),
        );
        s.managers.insert(
            id,
            Entry {
                manager: manager.clone(),
                used: now,
            },
        );
        manager
    }

    /// How many override managers are live.
    pub fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .managers
            .len()
    }

    /// Whether no override manager is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Shuts every override manager down (their unspent tokens go back to
    /// the ledger).
    pub async fn shutdown(&self) {
        let managers: Vec<LeaseManager> = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            s.managers.drain().map(|(_, e)| e.manager).collect()
        };
        for m in managers {
            m.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::limits::tests::ledger;

    #[tokio::test]
    async fn one_manager_per_limit_and_the_least_recently_used_goes_first() {
        let a = AdHoc::with_max(ledger(), 2);
        let s = Duration::from_secs(1);
        let m3 = a.manager("edge", AdHoc::policy(3, s, "second"));
        assert_eq!(
            m3.policy(leasehold_client::PolicyId::FIRST).name,
            "override:3/second"
        );
        let _ = a.manager("edge", AdHoc::policy(4, s, "second"));
        // The same limit again: the same manager (3 is now the most recent).
        let again = a.manager("edge", AdHoc::policy(3, s, "second"));
        assert_eq!(a.len(), 2);
        again.put_back(leasehold_client::PolicyId::FIRST, b"k", 2);
        assert_eq!(m3.local_tokens(leasehold_client::PolicyId::FIRST, b"k"), 2);
        // A third limit retires 4, the least recently used; another domain
        // counts apart.
        let _ = a.manager("other", AdHoc::policy(3, s, "second"));
        assert_eq!(a.len(), 2);
        let st = a.state.lock().unwrap();
        let mut ids: Vec<(String, u64)> = st.managers.keys().map(|k| (k.0.clone(), k.1)).collect();
        ids.sort();
        assert_eq!(ids, [("edge".into(), 3), ("other".into(), 3)]);
    }
}
