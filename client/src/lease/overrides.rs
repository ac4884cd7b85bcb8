//! Emergency overrides applied to the manager's own policies: the message
//! is parsed and kept by [`crate::overrides`] (the implementation
//! `leasehold-rls` uses too), and each policy's [`OverrideCell`] holds what
//! decisions read.
//!
//! The steady state pays one atomic load for it (the cell's `kind`, on the
//! policy's own line, never written while no override comes or goes). With
//! an override in force a decision reads the cell under its read lock and
//! the clock (to end it on time): a disabled policy admits with outcome
//! `Bypassed(Override)` and no ledger call; a widened one decides from its
//! own [`PolicyState`] of the widened policy, whose ledger keys are
//! `{domain}:<name>@x<factor>:<key>`, a fresh bucket full at the widened
//! burst (so relief is immediate), leased like any other. When the
//! override ends (cleared, expired, or replaced by another), the widened
//! state's unspent tokens go back to the ledger and the policy decides from
//! its own bucket again, which the ledger kept and refilled meanwhile.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use super::{LeaseManager, PolicyState};
use crate::decision::{BypassReason, Decision, Outcome};
use crate::overrides::{self, Action, Override, Overrides};
use crate::policy::PolicyId;

/// No override: decisions take the usual path.
const NONE: u8 = 0;
/// Some override is in force: decisions read [`OverrideCell::active`].
const SOME: u8 = 1;

/// One policy's override as decisions see it.
#[derive(Default)]
pub(super) struct OverrideCell {
    /// [`NONE`] or [`SOME`]: the one load the steady state pays.
    kind: AtomicU8,
    active: RwLock<Option<Active>>,
}

/// An override in force for one policy.
#[derive(Clone)]
struct Active {
    over: Override,
    /// A widening's own state (None for a disabling).
    widened: Option<Arc<PolicyState>>,
}

/// Where a decision of one policy goes.
pub(super) enum Route<'a> {
    /// No override: the policy's own state.
    Own(&'a Arc<PolicyState>),
    /// Widened: the widened policy's state.
    Widened(Arc<PolicyState>),
    /// Disabled: admitted without the ledger (the policy's own state, for
    /// its metrics).
    Disabled(&'a Arc<PolicyState>),
}

impl Route<'_> {
    /// The state the decision uses.
    pub(super) fn state(&self) -> &Arc<PolicyState> {
        match self {
            Route::Own(s) | Route::Disabled(s) => s,
            Route::Widened(s) => s,
        }
    }
}

/// A task following an override channel for one manager
/// ([`LeaseManager::follow_overrides`]). Dropping it leaves the task
/// running; it ends with the manager (its last clone dropped, or
/// [`LeaseManager::shutdown`]) or with [`Self::stop`].
#[derive(Debug)]
pub struct OverrideFollower(tokio::task::AbortHandle);

impl OverrideFollower {
    /// Stops following the channel (the overrides in force stay until they
    /// end).
    pub fn stop(&self) {
        self.0.abort();
    }

    /// Whether the task still follows the channel.
    pub fn is_running(&self) -> bool {
        !self.0.is_finished()
    }
}

impl LeaseManager {
    /// Where a decision of policy `id` goes now: one atomic load while no
    /// override is in force.
    #[inline]
    pub(super) fn route(&self, id: PolicyId) -> Route<'_> {
        let state = &self.inner.policies[id.0];
        if state.over.kind.load(Ordering::Acquire) == NONE {
            Route::Own(state)
        } else {
            self.route_override(state)
        }
    }

    /// `route` with an override in force: ends it first when its time is
    /// up.
    #[cold]
    #[inline(never)]
    fn route_override<'a>(&'a self, state: &'a Arc<PolicyState>) -> Route<'a> {
        let active = state.over.active.read().clone();
        match active {
            None => Route::Own(state),
            Some(a) if a.over.until <= Instant::now() => {
                self.expire_overrides();
                // Ended (or renewed meanwhile, in which case it stays).
                match state.over.active.read().clone() {
                    Some(a) if a.over.until > Instant::now() => Self::route_active(state, a),
                    _ => Route::Own(state),
                }
            }
            Some(a) => Self::route_active(state, a),
        }
    }

    fn route_active(state: &Arc<PolicyState>, a: Active) -> Route<'_> {
        match a.widened {
            Some(w) => Route::Widened(w),
            None => Route::Disabled(state),
        }
    }

    /// The decision for `n` requests of a disabled policy: admitted, counted
    /// as `Bypassed(Override)`; `remaining` the policy's burst, nothing to
    /// wait for.
    pub(super) fn disabled(&self, state: &PolicyState, n: u64) -> Decision {
        let outcome = Outcome::Bypassed(BypassReason::Override);
        state.metrics.record_n(outcome, n);
        Decision {
            allowed: true,
            outcome,
            limit: state.policy.requests_per_unit,
            window: state.policy.unit,
            remaining: state.policy.burst,
            reset: Duration::ZERO,
            retry_after: None,
            over_quota: false,
        }
    }

    /// Every state decisions may use now: the policies' own, then the
    /// widened ones in force (for a spread policy, its sub-keys' states).
    pub(super) fn states(&self) -> Vec<Arc<PolicyState>> {
        let mut all: Vec<Arc<PolicyState>> = Vec::with_capacity(self.inner.policies.len());
        for s in &self.inner.policies {
            all.extend_from_slice(s.deciding());
        }
        for s in &self.inner.policies {
            if s.over.kind.load(Ordering::Acquire) != NONE {
                if let Some(Active {
                    widened: Some(w), ..
                }) = &*s.over.active.read()
                {
                    all.extend_from_slice(w.deciding());
                }
            }
        }
        all
    }

    /// Applies one override message (the text published on the override
    /// channel, [`crate::overrides::parse`]'s format) to this manager's
    /// policies. A message for another domain, or a policy this manager
    /// does not have, is ignored (other gateways may have it). Applied and
    /// refused messages are logged at warn and counted in
    /// `rate_limit_overrides_total{event="applied"|"refused"}`.
    ///
    /// Returns whether the message named one of this manager's policies.
    ///
    /// # Errors
    /// A malformed message: [`crate::overrides::parse`]'s message.
    pub fn apply_override(&self, text: &str) -> Result<bool, String> {
        let m = match overrides::parse(text) {
            Ok(m) => m,
            Err(e) => {
                self.inner.override_metrics.refused.increment(1);
                tracing::warn!(domain = %self.inner.domain, "override {text:?} refused: {e}");
                return Err(e);
            }
        };
        let (domain, policy) = m.target();
        let Some(id) = self.find(domain, policy) else {
            tracing::debug!("override {text:?} is not for this manager");
            return Ok(false);
        };
        let mut table = self.inner.overrides.lock();
        table.apply(m, Instant::now());
        self.sync(id, &table);
        drop(table);
        self.inner.override_metrics.applied.increment(1);
        tracing::warn!("override applied: {text:?}");
        Ok(true)
    }

    /// The override in force for policy `id`, if any (one whose time is up
    /// but that no decision or sweep has ended yet included).
    pub fn override_of(&self, id: PolicyId) -> Option<Override> {
        let p = &self.inner.policies[id.0].policy;
        self.inner.overrides.lock().get(&self.inner.domain, &p.name)
    }

    /// Follows the ledger's override channel `channel` (usually
    /// [`crate::overrides::DEFAULT_CHANNEL`], the one `leasehold-rls`
    /// follows) and applies every message to this manager
    /// ([`Self::apply_override`]): on the one node the client addresses, on
    /// the primary its sentinels name (following failovers), or on every
    /// primary of the cluster's slot map (Leasehold nodes do not forward
    /// PUBLISH). The subscription reconnects by itself 200 ms after its
    /// connection fails. An override lasts until its ttl, is renewed by
    /// being published again, and is not persisted: a manager started later
    /// does not know of one published before.
    ///
    /// Opt-in: a manager that never calls this hears no overrides. The
    /// task runs on the runtime the manager was built on.
    pub fn follow_overrides(&self, channel: impl Into<String>) -> OverrideFollower {
        let weak = Arc::downgrade(&self.inner);
        let task = self.inner.runtime.spawn(overrides::subscribe(
            self.inner.client.clone(),
            channel.into(),
            move |text| {
                if let Some(inner) = weak.upgrade() {
                    let _ = LeaseManager { inner }.apply_override(text);
                }
            },
        ));
        let handle = task.abort_handle();
        self.inner.followers.lock().push(handle.clone());
        OverrideFollower(handle)
    }

    /// Ends the overrides whose time is up: logged, counted as `expired`.
    /// Decisions call it when they meet one, the sweeper every sweep.
    pub(super) fn expire_overrides(&self) {
        let now = Instant::now();
        let mut table = self.inner.overrides.lock();
        if table.next_end().is_none_or(|t| t > now) {
            return;
        }
        for (domain, policy) in table.expire(now) {
            if let Some(id) = self.find(&domain, &policy) {
                self.sync(id, &table);
            }
            self.inner.override_metrics.expired.increment(1);
            tracing::warn!(domain, policy, "override expired");
        }
    }

    /// Stops the tasks following override channels.
    pub(super) fn stop_following(&self) {
        for f in self.inner.followers.lock().drain(..) {
            f.abort();
        }
    }

    /// Policy `policy` of `domain`, if it is one of this manager's.
    fn find(&self, domain: &str, policy: &str) -> Option<PolicyId> {
        if domain != self.inner.domain {
            return None;
        }
        self.inner
            .policies
            .iter()
            .find(|s| s.policy.name == policy)
            .map(|s| s.id)
    }

    /// Makes policy `id`'s cell say what `table` has for it. A widening
    /// by the same factor keeps its state (a renewal); a widened state no
    /// longer in force returns its unspent tokens in the background.
    fn sync(&self, id: PolicyId, table: &Overrides) {
        let state = &self.inner.policies[id.0];
        let now = table.get(&self.inner.domain, &state.policy.name);
        let mut cell = state.over.active.write();
        let old = cell.take();
        let mut retired = old.as_ref().and_then(|a| a.widened.clone());
        *cell = now.map(|over| {
            let widened = match over.action {
                Action::Disable => None,
                Action::Widen(f) => Some(match old {
                    Some(Active {
                        over:
                            Override {
                                action: Action::Widen(g),
                                ..
                            },
                        widened: Some(w),
                    }) if g == f => {
                        retired = None;
                        w
                    }
                    _ => Arc::new(self.widened_state(state, f)),
                }),
            };
            Active { over, widened }
        });
        let kind = if cell.is_some() { SOME } else { NONE };
        state.over.kind.store(kind, Ordering::Release);
        drop(cell);
        if let Some(w) = retired {
            let me = self.clone();
            self.inner
                .runtime
                .spawn(async move { me.return_all(w.deciding()).await });
        }
    }

    /// The state of `state`'s policy widened by `factor`
    /// ([`Overrides::widened`]), its metrics labelled `<label>@x<factor>`,
    /// spread over as many sub-keys as the policy (each its share of the
    /// widened limit).
    fn widened_state(&self, state: &PolicyState, factor: u64) -> PolicyState {
        let p = Overrides::widened(&state.policy, factor);
        let label = format!("{}@x{factor}", state.label);
        PolicyState::new(&self.inner.domain, state.id, &p, &label, state.sub_keys())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Client, ClientConfig};
    use crate::clock::ManualClock;
    use crate::lease::LeaseConfig;
    use crate::policy::{FailureMode, Mode, Policy, PolicySet};

    fn manager() -> LeaseManager {
        let addr = "127.0.0.1:9".parse().unwrap(); // never dialled here
        let p = Policy {
            name: "p".into(),
            requests_per_unit: 10,
            unit: Duration::from_secs(1),
            burst: 20,
            failure_mode: FailureMode::FailClosed,
            mode: Mode::Enforce,
            fail_open_requests_per_unit: 20,
        };
        LeaseManager::new(
            Client::new(ClientConfig::new(addr)),
            &PolicySet::from_policies("d", vec![p]),
            LeaseConfig::default(),
            Arc::new(ManualClock::new()),
        )
    }

    #[tokio::test]
    async fn a_widened_spread_policy_is_spread_over_as_many_sub_keys() {
        let addr = "127.0.0.1:9".parse().unwrap(); // never dialled here
        let set = PolicySet::from_policies("d", vec![manager().policy(PolicyId::FIRST).clone()])
            .with_sub_keys(PolicyId::FIRST, 4)
            .unwrap();
        let m = LeaseManager::new(
            Client::new(ClientConfig::new(addr)),
            &set,
            LeaseConfig::default(),
            Arc::new(ManualClock::new()),
        );
        let own = m.route(PolicyId::FIRST).state().clone();
        let shares = |s: &PolicyState| {
            s.subs
                .iter()
                .map(|x| (x.policy.burst, x.policy.requests_per_unit))
                .collect::<Vec<_>>()
        };
        assert_eq!(shares(&own), [(5, 3), (5, 3), (5, 2), (5, 2)]);
        assert_eq!(&own.subs[1].prefix[..], b"d:p#1/4:");
        m.apply_override("d p widen 10 60000").unwrap();
        let Route::Widened(w) = m.route(PolicyId::FIRST) else {
            panic!("not widened")
        };
        assert_eq!(shares(&w), [(50, 25); 4]);
        assert_eq!(&w.subs[3].prefix[..], b"d:p@x10#3/4:");
        // The sweeper and shutdown see the sub-keys' states, not the
        // spread policies' own.
        assert_eq!(m.states().len(), 8);
        assert!(m.states().iter().all(|s| s.sub.is_some()));
        assert_eq!(m.remaining(PolicyId::FIRST, b"new"), 200);
    }

    #[tokio::test]
    async fn a_disabled_policy_admits_without_the_ledger_until_it_expires() {
        let m = manager();
        let id = PolicyId::FIRST;
        assert_eq!(m.apply_override("other p disable 1000"), Ok(false));
        assert_eq!(m.apply_override("d q disable 1000"), Ok(false));
        assert!(m.apply_override("d p pause 1000").is_err());
        assert_eq!(m.apply_override("d p disable 50"), Ok(true));
        let d = m.try_decide(id, b"k").unwrap();
        assert_eq!(
            (d.allowed, d.outcome, d.remaining, d.limit),
            (true, Outcome::Bypassed(BypassReason::Override), 20, 10)
        );
        assert_eq!(m.tracked_keys(), 0, "no bucket made, no ledger call");
        std::thread::sleep(Duration::from_millis(60));
        // Time is up: the next decision ends it and takes the usual path
        // (here no ledger: the lease is on its way, nothing local).
        assert_eq!(m.try_decide(id, b"k"), None);
        assert_eq!(m.override_of(id), None);
    }

    #[tokio::test]
    async fn a_widened_policy_decides_from_its_own_state_and_a_renewal_keeps_it() {
        let m = manager();
        let id = PolicyId::FIRST;
        assert_eq!(m.apply_override("d p widen 10 60000"), Ok(true));
        let Route::Widened(w) = m.route(id) else {
            panic!("not widened")
        };
        assert_eq!(
            (
                w.policy.name.as_str(),
                w.policy.burst,
                w.policy.requests_per_unit
            ),
            ("p@x10", 200, 100)
        );
        assert_eq!(&w.prefix[..], b"d:p@x10:");
        assert_eq!(m.remaining(id, b"new"), 200);
        // Renewed: the same state; another factor: a new one.
        m.apply_override("d p widen 10 60000").unwrap();
        assert!(matches!(m.route(id), Route::Widened(s) if Arc::ptr_eq(&s, &w)));
        m.apply_override("d p widen 3 60000").unwrap();
        assert!(matches!(m.route(id), Route::Widened(s) if s.policy.burst == 60));
        m.apply_override("d p clear").unwrap();
        assert!(matches!(m.route(id), Route::Own(_)));
        assert_eq!(m.remaining(id, b"new"), 20);
    }
}
