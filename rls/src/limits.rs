//! The limits in force: per domain its [`PolicySet`] (the descriptor tree)
//! and one [`LeaseManager`] per policy, and the reload that replaces them
//! without losing the state of unchanged limits.
//!
//! One manager per policy (not per domain) is what lets a reload keep a
//! limit's local buckets and leases: a policy whose domain, name and
//! settings are unchanged keeps its manager; a new or changed one gets a
//! new manager (its buckets start from the ledger's state, which a changed
//! limit's new parameters reinterpret); a removed or changed one's old
//! manager returns its unspent tokens to the ledger in the background.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use leasehold_client::{Client, Clock, LeaseConfig, LeaseManager, Policy, PolicyId, PolicySet};
use metrics::counter;

use crate::config::{self, ConfigError};

/// One domain: its descriptor tree and a manager per policy.
#[derive(Debug)]
pub struct Domain {
    /// The domain's policies and descriptor tree.
    pub set: PolicySet,
    /// `managers[id.index()]` decides for policy `id` of `set`; each holds
    /// that one policy as its [`PolicyId::FIRST`].
    managers: Vec<LeaseManager>,
}

impl Domain {
    /// The manager for policy `id` of this domain's set.
    pub fn manager(&self, id: PolicyId) -> &LeaseManager {
        &self.managers[id.index()]
    }

    /// The policy `id` of this domain's set.
    pub fn policy(&self, id: PolicyId) -> &Policy {
        self.set.get(id)
    }
}

/// Every domain in force.
#[derive(Debug, Default)]
pub struct Limits {
    domains: HashMap<String, Domain>,
}

impl Limits {
    /// The domain named `name`, if configured.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// How many policies there are over all domains.
    pub fn policy_count(&self) -> usize {
        self.domains.values().map(|d| d.managers.len()).sum()
    }

    /// Shuts every manager down: their unspent tokens go back to the ledger.
    pub async fn shutdown(&self) {
        for (_, _, m) in self.managers() {
            m.shutdown().await;
        }
    }

    fn managers(&self) -> impl Iterator<Item = (&str, &Policy, &LeaseManager)> {
        self.domains.values().flat_map(|d| {
            d.set
                .policies()
                .iter()
                .zip(&d.managers)
                .map(move |(p, m)| (d.set.domain.as_str(), p, m))
        })
    }
}

/// What building managers takes: the ledger client (one connection and one
/// breaker shared by every manager), lease settings and the clock.
#[derive(Clone)]
pub struct Ledger {
    /// The ledger client.
    pub client: Client,
    /// Lease settings for every manager.
    pub lease: LeaseConfig,
    /// The clock managers decide with.
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("client", &self.client)
            .finish()
    }
}

/// What a reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reloaded {
    /// Policies now in force.
    pub policies: usize,
    /// Of those, how many kept their manager (and its state).
    pub kept: usize,
    /// Old managers retired (removed or changed policies).
    pub retired: usize,
}

/// Builds the limits for `sets`, reusing `old`'s manager for every policy
/// whose domain, name and settings are unchanged. Returns the new limits
/// and the managers of `old` no longer in use (to be shut down).
///
/// Must run inside a tokio runtime (a new manager starts its sweeper).
pub fn build(
    sets: Vec<PolicySet>,
    old: &Limits,
    ledger: &Ledger,
) -> (Limits, Vec<LeaseManager>, Reloaded) {
    let mut reusable: HashMap<(String, String), (&Policy, &LeaseManager)> = old
        .managers()
        .map(|(d, p, m)| ((d.to_owned(), p.name.clone()), (p, m)))
        .collect();
    let mut kept = 0;
    let mut in_use: Vec<LeaseManager> = Vec::new();
    let mut domains = HashMap::new();
    for set in sets {
        let managers: Vec<LeaseManager> = set
            .policies()
            .iter()
            .map(|p| {
                let id = (set.domain.clone(), p.name.clone());
                let same = reusable
                    .get(&id)
                    .filter(|(old_p, _)| *old_p == p)
                    .map(|(_, m)| (*m).clone());
                match same {
                    Some(m) => {
                        reusable.remove(&id);
                        kept += 1;
                        m
                    }
                    None => LeaseManager::new(
                        ledger.client.clone(),
                        &PolicySet::from_policies(&set.domain, vec![p.clone()]),
                        ledger.lease.clone(),
                        ledger.clock.clone(),
                    ),
                }
            })
            .collect();
        in_use.extend(managers.iter().cloned());
        domains.insert(set.domain.clone(), Domain { set, managers });
    }
    let retired: Vec<LeaseManager> = reusable.into_values().map(|(_, m)| m.clone()).collect();
    let limits = Limits { domains };
    let r = Reloaded {
        policies: limits.policy_count(),
        kept,
        retired: retired.len(),
    };
    (limits, retired, r)
}

/// The limits in force, swapped whole by a reload; a request takes one
/// snapshot (an `Arc` clone under a read lock held for nanoseconds) and
/// decides all its descriptors against it.
#[derive(Debug, Clone, Default)]
pub struct Shared(Arc<RwLock<Arc<Limits>>>);

impl Shared {
    /// Shares `limits`.
    pub fn new(limits: Limits) -> Shared {
        Shared(Arc::new(RwLock::new(Arc::new(limits))))
    }

    /// The limits in force now.
    pub fn snapshot(&self) -> Arc<Limits> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn replace(&self, limits: Limits) -> Arc<Limits> {
        let mut g = self.0.write().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *g, Arc::new(limits))
    }
}

/// Reads and parses the file at `path`.
///
/// # Errors
/// The file cannot be read (no line), or [`config::parse`]'s errors.
pub fn load(path: &Path) -> Result<(String, Vec<PolicySet>), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        line: None,
        message: format!("cannot read {}: {e}", path.display()),
    })?;
    let sets = config::parse(&text)?;
    Ok((text, sets))
}

/// Applies `sets` (parsed from a changed file) to `shared`: builds the new
/// limits from the old, swaps them in, and shuts the retired managers down
/// in the background (their unspent tokens go back to the ledger).
pub fn apply(shared: &Shared, sets: Vec<PolicySet>, ledger: &Ledger) -> Reloaded {
    let old = shared.snapshot();
    let (limits, retired, r) = build(sets, &old, ledger);
    drop(old);
    shared.replace(limits);
    for m in retired {
        tokio::spawn(async move { m.shutdown().await });
    }
    r
}

/// Watches `path` every `every` and applies a changed file; a file that
/// fails to load is logged (with its line) and counted, and the limits in
/// force stay. `last` is the text in force. Runs until the task is
/// dropped.
///
/// Metrics: `leasehold_rls_config_reloads_total{result="applied"|"refused"}`.
pub async fn watch(
    path: PathBuf,
    every: Duration,
    mut last: String,
    shared: Shared,
    ledger: Ledger,
) {
    let applied = counter!("leasehold_rls_config_reloads_total", "result" => "applied");
    let refused = counter!("leasehold_rls_config_reloads_total", "result" => "refused");
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue; // mid-replace, or removed: the limits in force stay
        };
        if text == last {
            continue;
        }
        match config::parse(&text) {
            Ok(sets) => {
                let r = apply(&shared, sets, &ledger);
                applied.increment(1);
                tracing::info!(
                    path = %path.display(),
                    policies = r.policies,
                    kept = r.kept,
                    retired = r.retired,
                    "config reloaded"
                );
            }
            Err(e) => {
                refused.increment(1);
                tracing::error!(
                    "config {} refused: {e}; the previous config stays in force",
                    path.display()
                );
            }
        }
        last = text;
    }
}
