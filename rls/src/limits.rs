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
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use leasehold_client::{Client, Clock, LeaseConfig, LeaseManager, Policy, PolicyId, PolicySet};
use metrics::counter;

use leasehold_client::overrides::{self, Action, Overrides};

use crate::config::{self, ConfigError};

/// One domain: its descriptor tree and a manager per policy.
#[derive(Debug)]
pub struct Domain {
    /// The domain's policies (as the file has them) and descriptor tree.
    pub set: PolicySet,
    /// `effective[id.index()]`: policy `id` as it decides now (widened by
    /// an override, or as in `set`).
    effective: Vec<Policy>,
    /// `disabled[id.index()]`: an override makes policy `id` unlimited.
    disabled: Vec<bool>,
    /// `managers[id.index()]` decides for policy `id` of `set`; each holds
    /// that one (effective) policy as its [`PolicyId::FIRST`].
    managers: Vec<LeaseManager>,
    /// The ledger client (for the limits decided by the ledger itself).
    client: Client,
}

impl Domain {
    /// The ledger client, for limits the managers cannot lease (sliding
    /// windows, GCRAs: [`crate::direct`]).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The manager for policy `id` of this domain's set.
    pub fn manager(&self, id: PolicyId) -> &LeaseManager {
        &self.managers[id.index()]
    }

    /// The policy `id` of this domain's set as it decides now (an override
    /// may have widened it).
    pub fn policy(&self, id: PolicyId) -> &Policy {
        &self.effective[id.index()]
    }

    /// Whether an override disabled policy `id` (it admits everything).
    pub fn disabled(&self, id: PolicyId) -> bool {
        self.disabled[id.index()]
    }
}

/// Every domain in force, with the file's sets and the overrides it was
/// built from.
#[derive(Debug, Default)]
pub struct Limits {
    domains: HashMap<String, Domain>,
    sets: Vec<PolicySet>,
    overrides: Overrides,
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

    /// The overrides in force.
    pub fn overrides(&self) -> &Overrides {
        &self.overrides
    }

    fn managers(&self) -> impl Iterator<Item = (&str, &Policy, &LeaseManager)> {
        self.domains.values().flat_map(|d| {
            d.effective
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
    /// This instance's id, for limits whose canary is a share of instances
    /// (`canary_by: instance`; [`PolicySet::set_instance`]).
    pub instance: String,
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

/// Builds the limits for `sets` under `overrides`, reusing `old`'s manager
/// for every policy whose domain, name and (effective) settings are
/// unchanged. Returns the new limits and the managers of `old` no longer
/// in use (to be shut down).
///
/// Must run inside a tokio runtime (a new manager starts its sweeper).
pub fn build(
    mut sets: Vec<PolicySet>,
    overrides: Overrides,
    old: &Limits,
    ledger: &Ledger,
) -> (Limits, Vec<LeaseManager>, Reloaded) {
    for set in &mut sets {
        set.set_instance(&ledger.instance);
    }
    let mut reusable: HashMap<(String, String), (&Policy, &LeaseManager)> = old
        .managers()
        .map(|(d, p, m)| ((d.to_owned(), p.name.clone()), (p, m)))
        .collect();
    let mut kept = 0;
    let mut in_use: Vec<LeaseManager> = Vec::new();
    let mut domains = HashMap::new();
    for set in &sets {
        let over: Vec<Option<Action>> = set
            .policies()
            .iter()
            .map(|p| overrides.get(&set.domain, &p.name).map(|o| o.action))
            .collect();
        let effective: Vec<Policy> = set
            .policies()
            .iter()
            .zip(&over)
            .map(|(p, o)| match o {
                Some(Action::Widen(f)) => Overrides::widened(p, *f),
                _ => p.clone(),
            })
            .collect();
        let disabled = over.iter().map(|o| *o == Some(Action::Disable)).collect();
        let managers: Vec<LeaseManager> = set
            .ids()
            .zip(&effective)
            .map(|(pid, p)| {
                let id = (set.domain.clone(), p.name.clone());
                let sub_keys = set.sub_keys(pid);
                let same = reusable
                    .get(&id)
                    .filter(|(old_p, m)| *old_p == p && m.sub_keys(PolicyId::FIRST) == sub_keys)
                    .map(|(_, m)| (*m).clone());
                match same {
                    Some(m) => {
                        reusable.remove(&id);
                        kept += 1;
                        m
                    }
                    None => LeaseManager::new(
                        ledger.client.clone(),
                        // A widened limit only grows, so `sub_keys` checked
                        // at load still fits it.
                        &PolicySet::from_policies(&set.domain, vec![p.clone()])
                            .with_sub_keys(PolicyId::FIRST, sub_keys)
                            .expect("sub_keys was checked against a smaller limit"),
                        ledger.lease.clone(),
                        ledger.clock.clone(),
                    ),
                }
            })
            .collect();
        in_use.extend(managers.iter().cloned());
        domains.insert(
            set.domain.clone(),
            Domain {
                set: set.clone(),
                effective,
                disabled,
                managers,
                client: ledger.client.clone(),
            },
        );
    }
    let retired: Vec<LeaseManager> = reusable.into_values().map(|(_, m)| m.clone()).collect();
    let limits = Limits {
        domains,
        sets,
        overrides,
    };
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
pub struct Shared {
    current: Arc<RwLock<Arc<Limits>>>,
    /// Serializes rebuilds (a file reload and an override at once).
    rebuilding: Arc<Mutex<()>>,
}

impl Shared {
    /// Shares `limits`.
    pub fn new(limits: Limits) -> Shared {
        Shared {
            current: Arc::new(RwLock::new(Arc::new(limits))),
            rebuilding: Arc::default(),
        }
    }

    /// The limits in force now.
    pub fn snapshot(&self) -> Arc<Limits> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn replace(&self, limits: Limits) -> Arc<Limits> {
        let mut g = self.current.write().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *g, Arc::new(limits))
    }
}

/// Rebuilds the limits in force after `change` edits a copy of their file
/// sets and overrides (nothing happens when it returns false): unchanged
/// policies keep their managers, the retired ones are shut down in the
/// background (their unspent tokens go back to the ledger).
pub fn reconfigure(
    shared: &Shared,
    ledger: &Ledger,
    change: impl FnOnce(&mut Vec<PolicySet>, &mut Overrides) -> bool,
) -> Option<Reloaded> {
    let _one = shared.rebuilding.lock().unwrap_or_else(|e| e.into_inner());
    let old = shared.snapshot();
    let (mut sets, mut over) = (old.sets.clone(), old.overrides.clone());
    if !change(&mut sets, &mut over) {
        return None;
    }
    let (limits, retired, r) = build(sets, over, &old, ledger);
    drop(old);
    shared.replace(limits);
    for m in retired {
        tokio::spawn(async move { m.shutdown().await });
    }
    Some(r)
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

/// Applies `sets` (parsed from a changed file) to `shared`, under the
/// overrides in force ([`reconfigure`]).
pub fn apply(shared: &Shared, sets: Vec<PolicySet>, ledger: &Ledger) -> Reloaded {
    reconfigure(shared, ledger, |s, _| {
        *s = sets;
        true
    })
    .expect("a reload always rebuilds")
}

/// Applies one override message's text (from the ledger's pub/sub): logs
/// and counts it, and rebuilds the limits when it changes an override.
/// A message for a policy not configured is refused.
pub fn on_override(shared: &Shared, ledger: &Ledger, text: &str) {
    let m = match overrides::parse(text) {
        Ok(m) => m,
        Err(e) => {
            count("refused");
            tracing::warn!("override {text:?} refused: {e}");
            return;
        }
    };
    let known = |sets: &[PolicySet], m: &overrides::Message| {
        let (domain, policy) = m.target();
        sets.iter()
            .any(|s| s.domain == domain && s.id(policy).is_some())
    };
    let mut unknown = false;
    reconfigure(shared, ledger, |sets, over| {
        if !known(sets, &m) {
            unknown = true;
            return false;
        }
        over.apply(m, std::time::Instant::now())
    });
    if unknown {
        count("refused");
        tracing::warn!("override {text:?} refused: no such domain and policy");
    } else {
        count("applied");
        tracing::warn!("override applied: {text:?}");
    }
}

/// Counts an override event (`applied`, `refused`, `expired`) in
/// `leasehold_rls_overrides_total{event}`.
fn count(event: &'static str) {
    counter!("leasehold_rls_overrides_total", "event" => event).increment(1);
}

/// Ends overrides whose time is up, checking every `every`. Runs until its
/// task is dropped.
pub async fn expire_overrides(shared: Shared, ledger: Ledger, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let now = std::time::Instant::now();
        if shared
            .snapshot()
            .overrides
            .next_end()
            .is_none_or(|t| t > now)
        {
            continue;
        }
        let mut ended = Vec::new();
        reconfigure(&shared, &ledger, |_, over| {
            ended = over.expire(now);
            !ended.is_empty()
        });
        for (domain, policy) in ended {
            count("expired");
            tracing::warn!(domain, policy, "override expired");
        }
    }
}

/// How long a changed config file must stay unchanged before it is read
/// as the new config.
const SETTLE: Duration = Duration::from_millis(20);

/// Watches `path` every `every` and applies a changed file (once it reads
/// the same twice, 20 ms apart); a file that
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
        // A file being written in place can be read half-written: act only
        // on a text that reads the same twice, SETTLE apart.
        tokio::time::sleep(SETTLE).await;
        if std::fs::read_to_string(&path).ok().as_ref() != Some(&text) {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use leasehold_client::{ClientConfig, SystemClock};

    /// A ledger for tests that make managers without calling it (making
    /// managers does not touch the ledger).
    pub(crate) fn ledger() -> Ledger {
        Ledger {
            client: Client::new(ClientConfig::new("127.0.0.1:9".parse().unwrap())),
            lease: LeaseConfig::default(),
            clock: Arc::new(SystemClock::new()),
            instance: "test".into(),
        }
    }

    fn set(sub_keys: u32) -> Vec<PolicySet> {
        vec![PolicySet::from_yaml(&format!(
            "domain: d\ndescriptors:\n  - key: tenant\n    rate_limit: {{unit: second, requests_per_unit: 100}}\n    sub_keys: {sub_keys}\n"
        ))
        .unwrap()]
    }

    /// A policy's `sub_keys` reaches its manager, and a reload that changes
    /// it makes a new manager.
    #[tokio::test]
    async fn sub_keys_reach_the_manager_and_a_change_rebuilds_it() {
        let l = ledger();
        let (four, _, r) = build(set(4), Overrides::default(), &Limits::default(), &l);
        assert_eq!((r.kept, r.retired), (0, 0));
        let m = four.domain("d").unwrap().manager(PolicyId::FIRST);
        assert_eq!(m.sub_keys(PolicyId::FIRST), 4);
        let (same, _, r) = build(set(4), Overrides::default(), &four, &l);
        assert_eq!((r.kept, r.retired), (1, 0));
        let (eight, retired, r) = build(set(8), Overrides::default(), &same, &l);
        assert_eq!((r.kept, r.retired, retired.len()), (0, 1, 1));
        let m = eight.domain("d").unwrap().manager(PolicyId::FIRST);
        assert_eq!(m.sub_keys(PolicyId::FIRST), 8);
    }
}
