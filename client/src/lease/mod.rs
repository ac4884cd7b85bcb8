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
//! - `mod.rs` (this file): [`LeaseManager`], the per-policy state it holds,
//!   `new`, and the read-only views (`local_tokens`, `observed_qps`,
//!   `next_lease_size`, `tracked_keys`).
//! - `config.rs`: [`LeaseConfig`], its defaults and `validate`.
//! - `decide.rs`: [`LeaseManager::decide`] and its future [`Decide`]: the
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

use bytes::{BufMut, Bytes, BytesMut};
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

/// Rate samples shorter than this are too noisy to use.
const MIN_SAMPLE_US: u64 = 20_000;

/// One policy: its settings, its ledger-key prefix, its keys and metrics.
/// A widened override decides from a state of its own, built from the
/// widened policy (`<name>@x<factor>`).
struct PolicyState {
    id: PolicyId,
    policy: Policy,
    /// The `policy` label of its metrics.
    label: Box<str>,
    /// The override in force for this policy (always none in a widened
    /// override's own state).
    over: OverrideCell,
    /// `{domain}:{name}:` prefix of this policy's ledger keys.
    prefix: Bytes,
    /// Fail-open static bucket: ns between tokens, and its burst.
    fallback_interval_ns: u64,
    fallback_burst: u64,
    /// Nanoseconds the ledger takes to refill one token (`unit / rate`).
    refill_ns: f64,
    map: KeyMap,
    metrics: PolicyMetrics,
}

impl PolicyState {
    /// Policy `id` of `domain`, reporting its metrics under `label`.
    fn new(domain: &str, id: PolicyId, p: &Policy, label: &str) -> PolicyState {
        let mut prefix = BytesMut::new();
        prefix.put_slice(domain.as_bytes());
        prefix.put_u8(b':');
        prefix.put_slice(p.name.as_bytes());
        prefix.put_u8(b':');
        let unit_ns = p.unit.as_nanos() as u64;
        PolicyState {
            id,
            fallback_interval_ns: (unit_ns / p.fail_open_requests_per_unit).max(1),
            fallback_burst: p.burst.saturating_mul(2),
            refill_ns: unit_ns as f64 / p.requests_per_unit as f64,
            prefix: prefix.freeze(),
            map: KeyMap::new(),
            metrics: PolicyMetrics::new(label),
            label: label.into(),
            over: OverrideCell::default(),
            policy: p.clone(),
        }
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

    /// Runs `f` on `key`'s bucket if the key is known, in the state policy
    /// `id` decides from now (a widened override's own).
    fn peek<R>(&self, id: PolicyId, key: &[u8], f: impl FnOnce(Bucket<'_>) -> R) -> Option<R> {
        let route = self.route(id);
        let map = &route.state().map;
        map.get(map.hash(key), key, f)
    }

    /// Local tokens held for `key`, 0 if unknown (for tests and
    /// introspection).
    pub fn local_tokens(&self, id: PolicyId, key: &[u8]) -> u64 {
        self.peek(id, key, |b| b.hot.tokens()).unwrap_or(0)
    }

    /// Requests left for `key` as an allowed decision would report them
    /// (tokens: its local ones plus the ledger's balance at its last lease),
    /// without deciding; the policy's burst for a key not tracked. Under a
    /// widened override, the widened state's (as for the views below);
    /// under a disabled one, the policy's burst.
    pub fn remaining(&self, id: PolicyId, key: &[u8]) -> u64 {
        let route = self.route(id);
        if let Route::Disabled(state) = route {
            return state.policy.burst;
        }
        let state = route.state();
        self.peek(id, key, |b| {
            b.hot
                .tokens()
                .saturating_add(Self::ledger_balance(state, b))
        })
        .unwrap_or(state.policy.burst)
    }

    /// The observed decisions per second for `key` (0 if unknown).
    pub fn observed_qps(&self, id: PolicyId, key: &[u8]) -> f64 {
        self.peek(id, key, |b| b.cold().qps()).unwrap_or(0.0)
    }

    /// The lease size (tokens) the next renewal for `key` would ask for.
    pub fn next_lease_size(&self, id: PolicyId, key: &[u8]) -> u64 {
        self.peek(id, key, |b| self.lease_size(b.cold()))
            .unwrap_or(self.inner.config.min_lease)
    }

    /// How many keys the manager tracks (a widened override's keys too).
    pub fn tracked_keys(&self) -> usize {
        self.states().iter().map(|s| s.map.len()).sum()
    }
}
