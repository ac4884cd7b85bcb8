//! The lease manager: local-first rate limiting against a shared ledger.
//!
//! ```text
//!  decide(policy, key)
//!    │ map lookup (one hash, the shard's reader slot, a probe of control
//!    │ bytes, no allocation once the key exists; the bucket is borrowed,
//!    │ not reference-counted)
//!    v
//!  KeyHot ── take a local token (one CAS, which also counts the decision)
//!    │        ──> Allowed; at the low watermark (and not blocked), claim the
//!    │        one lease slot (KeyCold) and spawn TOKENLEASE(B, MIN 1)
//!    │ empty (reads the clock): blocked? ──> Limited (no ledger call until
//!    │        retry_after)
//!    │ empty: breaker open ──> fail_open static bucket / fail_closed
//!    │ empty: wait for the lease (at most the lease deadline + 1 ms)
//!    v
//!  sweeper (every sweep_interval): rate samples of quiet keys, TOKENRETURN
//!  of idle keys, eviction of long-idle empty keys
//!  ```
//!
//! Lease size: B = clamp(min_lease, observed_qps x lookahead, max_lease):
//! each key leases in proportion to its own traffic, so a busy key renews a
//! few times a second and a quiet one strands little quota in one gateway.
//! The drift bound that follows: N gateways over-admit at most
//! N x max_lease beyond the ledger's own limit.
//!
//! # The map
//! Decisions vastly outnumber new keys. Per policy, 64 shards (`map.rs`),
//! each a `hashbrown::HashTable` whose buckets are the keys' 32-byte hot
//! records (`KeyHot`, `bucket/`: the key's first 15 bytes, the token word,
//! and one word packing the watermark, the ledger's balance and the index of
//! the key's `Arc<KeyCold>` in the shard's slab). A steady-state decision
//! is one hash, the shard's reader slot (`shard_lock.rs`: one swap on this
//! thread's own line; no shared lock word), a probe of the control bytes
//! (which stay in L2), the key compare in the record and one CAS on its
//! token word: one cache line from outside L2 a decision. 100 000 keys take
//! ~4.3 MB of records. Keys longer than 15 bytes compare their full bytes
//! in the cold part (one more line).
//!
//! The sweeper does not read a busy key's cold part: it compares the
//! decision count in the hot record with the one it saw last sweep (an
//! 8-byte record a key, `map.rs`), and only a quiet key's rate is sampled
//! there; a busy key's rate is sampled when it leases. (Sampling every key
//! every 100 ms streamed ~15 MB of cold parts through the cache and cost the
//! 100k-key decision ~60 ns.)
//!
//! Earlier layouts, measured in docs/client.md: `papaya` (lock-free, but a
//! chain of four or five dependent loads a lookup), one 320-byte bucket a
//! key under `parking_lot` read locks, then 48-byte records in a dense array
//! behind a `u32` index (two dependent loads, half the records straddling
//! two lines, and two locked instructions on the shard's shared lock word).
//!
//! # Layout
//! In reading order:
//! - `mod.rs` (this file): [`LeaseManager`], the per-policy state it holds
//!   (for a policy spread over sub-keys, one state a sub-key, each its
//!   share of the policy: [`crate::subkey`]; `PolicyState::pick` chooses),
//!   `new`, and the read-only views (`local_tokens`, `observed_qps`,
//!   `next_lease_size`, `tracked_keys`).
//! - `config.rs`: [`LeaseConfig`], its defaults and `validate`.
//! - `decide.rs`: [`LeaseManager::decide`] (and `decide_for`, in a caller's
//!   sub-key) and its future [`Decide`]: the
//!   local decision on the first poll, else the wait for the key's lease.
//! - `local.rs`: the decision that never waits ([`LeaseManager::try_decide`]):
//!   the map lookup (inserting a new key), a local token, the renewal
//!   trigger, a key with no local tokens.
//! - `verdict.rs`: the [`Decision`](crate::Decision) each path returns:
//!   allowed (`remaining` and `reset` from the hot record), limited, the
//!   policy's mode, and a bypass (fail-open static bucket or fail-closed).
//! - `calls.rs`: the ledger calls: a key's one TOKENLEASE (its size, its
//!   result landed in the key's record) and TOKENRETURN.
//! - `sweeper.rs`: the background sweeper and [`LeaseManager::maintain`].
//! - `refund.rs`: [`LeaseManager::put_back`] (a caller undoes a decision's
//!   token), [`LeaseManager::return_to_ledger`] (TOKENRETURN on request) and
//!   [`LeaseManager::take_from_ledger`] (a TOKENLEASE with no local bucket).
//! - `shutdown.rs`: [`LeaseManager::shutdown`]: every key's unspent tokens
//!   returned.
//! - `overrides.rs`: emergency overrides applied to this manager's policies
//!   ([`LeaseManager::follow_overrides`], [`LeaseManager::apply_override`]):
//!   a disabled policy admits without the ledger, a widened one decides
//!   from a policy state of its own (`<name>@x<factor>`), and either ends
//!   by itself.
//! - `map.rs`: one policy's keys, in 64 shards.
//! - `bucket/`: one key's hot record and cold part (its `mod.rs` lists its
//!   files).
//! - `shard_lock.rs`: the shards' reader-writer lock, whose readers write
//!   only their own thread's slot.
//! - `metrics.rs`: the metric handles, registered once per policy.

mod bucket;
mod calls;
mod config;
mod decide;
mod local;
mod map;
mod metrics;
mod overrides;
mod refund;
mod shard_lock;
mod shutdown;
mod sweeper;
mod verdict;

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use bytes::Bytes;
use tokio::runtime::Handle;
use tokio::sync::Notify;

use self::bucket::Bucket;
pub use self::config::LeaseConfig;
pub use self::decide::Decide;
use self::map::KeyMap;
use self::metrics::{LedgerMetrics, OverrideMetrics, PolicyMetrics};
pub use self::overrides::OverrideFollower;
use self::overrides::{OverrideCell, Route};
use crate::client::Client;
use crate::clock::Clock;
use crate::overrides::Overrides;
use crate::policy::{Policy, PolicyId, PolicySet};
use crate::subkey;

/// Rate samples shorter than this are too noisy to use.
const MIN_SAMPLE_US: u64 = 20_000;

/// One policy: its settings, its ledger-key prefix, its keys and metrics.
/// A widened override decides from a state of its own, built from the
/// widened policy (`<name>@x<factor>`). A policy spread over sub-keys
/// (`sub_keys: N`, [`crate::subkey`]) decides from the states of its
/// sub-keys, one for each, each with its share of the policy.
struct PolicyState {
    id: PolicyId,
    policy: Policy,
    /// The `policy` label of its metrics.
    label: Box<str>,
    /// The override in force for this policy (always none in a widened
    /// override's own state).
    over: OverrideCell,
    /// `{domain}:{name}:` prefix of this policy's ledger keys; a sub-key's
    /// `{domain}:{name}#{i}/{n}:`, which its keys' hash tag precedes.
    prefix: Bytes,
    /// `Some((n, i))` in the state of sub-key `i` of `n`.
    sub: Option<(u32, u32)>,
    /// A spread policy's sub-keys' states, in order (empty: decisions use
    /// this state).
    subs: Box<[Arc<PolicyState>]>,
    /// Fail-open static bucket: ns between tokens, and its burst.
    fallback_interval_ns: u64,
    fallback_burst: u64,
    /// Nanoseconds the ledger takes to refill one token (`unit / rate`).
    refill_ns: f64,
    map: KeyMap,
    metrics: PolicyMetrics,
}

/// A decision's sub-key when no caller chose one: a random one.
pub(super) const ANY_SUB: u32 = u32::MAX;

impl PolicyState {
    /// Policy `id` of `domain`, reporting its metrics under `label`,
    /// spread over `sub_keys` sub-keys (1: the one key).
    fn new(domain: &str, id: PolicyId, p: &Policy, label: &str, sub_keys: u32) -> PolicyState {
        let mut state = PolicyState::one(domain, id, p, label, None);
        if sub_keys > 1 {
            state.subs = (0..sub_keys)
                .map(|i| {
                    let share = p.sub_key(sub_keys, i);
                    Arc::new(PolicyState::one(
                        domain,
                        id,
                        &share,
                        label,
                        Some((sub_keys, i)),
                    ))
                })
                .collect();
        }
        state
    }

    /// One state with no sub-keys of its own: the policy's, or (`sub`)
    /// sub-key `i` of `n`'s, whose `p` is its share.
    fn one(
        domain: &str,
        id: PolicyId,
        p: &Policy,
        label: &str,
        sub: Option<(u32, u32)>,
    ) -> PolicyState {
        let prefix = match sub {
            None => format!("{domain}:{}:", p.name),
            Some((n, i)) => subkey::sub_prefix(domain, &p.name, n, i),
        };
        let unit_ns = p.unit.as_nanos() as u64;
        PolicyState {
            id,
            fallback_interval_ns: (unit_ns / p.fail_open_requests_per_unit).max(1),
            fallback_burst: p.burst.saturating_mul(2),
            refill_ns: unit_ns as f64 / p.requests_per_unit as f64,
            prefix: Bytes::from(prefix),
            sub,
            subs: Box::default(),
            map: KeyMap::new(),
            metrics: PolicyMetrics::new(label),
            label: label.into(),
            over: OverrideCell::default(),
            policy: p.clone(),
        }
    }

    /// The ledger's key for `key` in this state: `{domain}:{name}:{key}`,
    /// or a sub-key's ([`subkey::ledger_key`]).
    fn ledger_key(&self, key: &[u8]) -> Vec<u8> {
        match self.sub {
            None => [&self.prefix[..], key].concat(),
            Some((n, i)) => subkey::ledger_key(&self.prefix, key, n, i),
        }
    }

    /// The state a decision takes: this one, or for a spread policy the
    /// sub-key `sub` (a caller's, [`subkey::caller_index`]), or a random
    /// one for [`ANY_SUB`]. One predictable branch for a policy with no
    /// sub-keys.
    #[inline]
    fn pick(self: &Arc<Self>, sub: u32) -> &Arc<PolicyState> {
        if self.subs.is_empty() {
            self
        } else {
            self.pick_sub(sub)
        }
    }

    #[inline(never)]
    fn pick_sub(&self, sub: u32) -> &Arc<PolicyState> {
        let n = self.subs.len();
        let i = if sub == ANY_SUB {
            fastrand::usize(..n)
        } else {
            sub as usize % n
        };
        &self.subs[i]
    }

    /// The states this policy's decisions use: its sub-keys', or itself.
    fn deciding(self: &Arc<Self>) -> &[Arc<PolicyState>] {
        if self.subs.is_empty() {
            std::slice::from_ref(self)
        } else {
            &self.subs
        }
    }

    /// How many sub-keys the policy is spread over (1: the one key).
    fn sub_keys(&self) -> u32 {
        self.subs.len().max(1) as u32
    }
}

/// What every clone of a [`LeaseManager`] shares.
struct Inner {
    client: Client,
    config: LeaseConfig,
    clock: Arc<dyn Clock>,
    /// The policy set's domain (overrides name it).
    domain: String,
    /// Indexed by [`PolicyId`]; each shared with the lease calls in flight.
    policies: Vec<Arc<PolicyState>>,
    runtime: Handle,
    ledger: LedgerMetrics,
    /// The overrides in force for this manager's policies (each also in
    /// its policy's [`OverrideCell`], which decisions read).
    overrides: parking_lot::Mutex<Overrides>,
    override_metrics: OverrideMetrics,
    /// The tasks following an override channel, stopped with the manager.
    followers: parking_lot::Mutex<Vec<tokio::task::AbortHandle>>,
    /// Set by `shutdown`: the sweeper stops at its next tick.
    stopped: AtomicBool,
    /// Token returns in flight (the sweeper's and `shutdown`'s), and the
    /// notification `shutdown` waits on until there are none.
    returns: AtomicUsize,
    returns_done: Notify,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for f in self.followers.get_mut().drain(..) {
            f.abort();
        }
    }
}

/// The lease manager; cheap to clone (all clones share state).
#[derive(Clone)]
pub struct LeaseManager {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LeaseManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseManager")
            .field("config", &self.inner.config)
            .finish()
    }
}

impl LeaseManager {
    /// Builds a manager and starts its sweeper on the current tokio runtime.
    /// The sweeper holds only a weak reference: it stops when the last clone
    /// of the manager is dropped (call [`Self::shutdown`] first to return
    /// unspent tokens).
    ///
    /// # Panics
    /// Outside a tokio runtime, or when `config` fails
    /// [`LeaseConfig::validate`] (the message names the setting).
    pub fn new(
        client: Client,
        policies: &PolicySet,
        config: LeaseConfig,
        clock: Arc<dyn Clock>,
    ) -> LeaseManager {
        if let Err(e) = config.validate() {
            panic!("invalid LeaseConfig: {e}");
        }
        let states = policies
            .policies()
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let id = PolicyId(i);
                Arc::new(PolicyState::new(
                    &policies.domain,
                    id,
                    p,
                    policies.metrics_label(id),
                    policies.sub_keys(id),
                ))
            })
            .collect();
        let manager = LeaseManager {
            inner: Arc::new(Inner {
                client,
                config,
                clock,
                domain: policies.domain.clone(),
                policies: states,
                runtime: Handle::current(),
                ledger: LedgerMetrics::new(),
                overrides: parking_lot::Mutex::default(),
                override_metrics: OverrideMetrics::new(),
                followers: parking_lot::Mutex::default(),
                stopped: AtomicBool::new(false),
                returns: AtomicUsize::new(0),
                returns_done: Notify::new(),
            }),
        };
        manager.start_sweeper();
        manager
    }

    /// The policy behind `id`, as configured (an override in force does not
    /// change it: [`Self::override_of`] says whether one is).
    pub fn policy(&self, id: PolicyId) -> &Policy {
        &self.inner.policies[id.0].policy
    }

    /// How many sub-keys policy `id`'s limit is spread over (1: the one
    /// key; `sub_keys` in the policy file, [`crate::subkey`]).
    pub fn sub_keys(&self, id: PolicyId) -> u32 {
        self.inner.policies[id.0].sub_keys()
    }

    /// `value` of `key`'s bucket (`None` when the key is not known there)
    /// in each state policy `id` decides from now (a widened override's
    /// own; for a spread policy each of its sub-keys'), folded from `init`
    /// with `fold`.
    fn peek<T, A>(
        &self,
        id: PolicyId,
        key: &[u8],
        init: A,
        value: impl Fn(&PolicyState, Option<Bucket<'_>>) -> T,
        fold: impl Fn(A, T) -> A,
    ) -> A {
        let route = self.route(id);
        let mut acc = init;
        for s in route.state().deciding() {
            let v = s
                .map
                .get(s.map.hash(key), key, |b| value(s, Some(b)))
                .unwrap_or_else(|| value(s, None));
            acc = fold(acc, v);
        }
        acc
    }

    /// Local tokens held for `key`, 0 if unknown (for tests and
    /// introspection); for a spread policy, its sub-keys' together.
    pub fn local_tokens(&self, id: PolicyId, key: &[u8]) -> u64 {
        let tokens = |_: &PolicyState, b: Option<Bucket<'_>>| b.map_or(0, |b| b.hot.tokens());
        self.peek(id, key, 0, tokens, u64::saturating_add)
    }

    /// Requests left for `key` as an allowed decision would report them
    /// (tokens: its local ones plus the ledger's balance at its last lease),
    /// without deciding; the policy's burst for a key not tracked. Under a
    /// widened override, the widened state's (as for the views below);
    /// under a disabled one, the policy's burst. For a spread policy, its
    /// sub-keys' together (a decision reports its own sub-key's).
    pub fn remaining(&self, id: PolicyId, key: &[u8]) -> u64 {
        if let Route::Disabled(state) = self.route(id) {
            return state.policy.burst;
        }
        let left = |s: &PolicyState, b: Option<Bucket<'_>>| {
            b.map_or(s.policy.burst, |b| {
                b.hot.tokens().saturating_add(Self::ledger_balance(s, b))
            })
        };
        self.peek(id, key, 0, left, u64::saturating_add)
    }

    /// The observed decisions per second for `key` (0 if unknown); for a
    /// spread policy, its sub-keys' together.
    pub fn observed_qps(&self, id: PolicyId, key: &[u8]) -> f64 {
        let qps = |_: &PolicyState, b: Option<Bucket<'_>>| b.map_or(0.0, |b| b.cold().qps());
        self.peek(id, key, 0.0, qps, |a, q| a + q)
    }

    /// The lease size (tokens) the next renewal for `key` would ask for;
    /// for a spread policy, the largest of its sub-keys'.
    pub fn next_lease_size(&self, id: PolicyId, key: &[u8]) -> u64 {
        let min = self.inner.config.min_lease;
        let size =
            |_: &PolicyState, b: Option<Bucket<'_>>| b.map_or(min, |b| self.lease_size(b.cold()));
        self.peek(id, key, 0, size, u64::max)
    }

    /// How many keys the manager tracks (a widened override's keys too).
    pub fn tracked_keys(&self) -> usize {
        self.states().iter().map(|s| s.map.len()).sum()
    }
}
