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
use self::metrics::{LedgerMetrics, PolicyMetrics};
use crate::client::Client;
use crate::clock::Clock;
use crate::policy::{Policy, PolicyId, PolicySet};

/// Rate samples shorter than this are too noisy to use.
const MIN_SAMPLE_US: u64 = 20_000;

/// One policy: its settings, its ledger-key prefix, its keys and metrics.
struct PolicyState {
    id: PolicyId,
    policy: Policy,
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

/// What every clone of a [`LeaseManager`] shares.
struct Inner {
    client: Client,
    config: LeaseConfig,
    clock: Arc<dyn Clock>,
    policies: Vec<PolicyState>,
    runtime: Handle,
    ledger: LedgerMetrics,
    /// Set by `shutdown`: the sweeper stops at its next tick.
    stopped: AtomicBool,
    /// Token returns in flight (the sweeper's and `shutdown`'s), and the
    /// notification `shutdown` waits on until there are none.
    returns: AtomicUsize,
    returns_done: Notify,
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
                let mut prefix = BytesMut::new();
                prefix.put_slice(policies.domain.as_bytes());
                prefix.put_u8(b':');
                prefix.put_slice(p.name.as_bytes());
                prefix.put_u8(b':');
                let unit_ns = p.unit.as_nanos() as u64;
                PolicyState {
                    id: PolicyId(i),
                    fallback_interval_ns: (unit_ns / p.fail_open_requests_per_unit).max(1),
                    fallback_burst: p.burst.saturating_mul(2),
                    refill_ns: unit_ns as f64 / p.requests_per_unit as f64,
                    prefix: prefix.freeze(),
                    map: KeyMap::new(),
                    metrics: PolicyMetrics::new(policies.metrics_label(PolicyId(i))),
                    policy: p.clone(),
                }
            })
            .collect();
        let manager = LeaseManager {
            inner: Arc::new(Inner {
                client,
                config,
                clock,
                policies: states,
                runtime: Handle::current(),
                ledger: LedgerMetrics::new(),
                stopped: AtomicBool::new(false),
                returns: AtomicUsize::new(0),
                returns_done: Notify::new(),
            }),
        };
        manager.start_sweeper();
        manager
    }

    /// The policy behind `id`.
    pub fn policy(&self, id: PolicyId) -> &Policy {
        &self.inner.policies[id.0].policy
    }

    /// Runs `f` on `key`'s bucket if the key is known.
    fn peek<R>(&self, id: PolicyId, key: &[u8], f: impl FnOnce(Bucket<'_>) -> R) -> Option<R> {
        let map = &self.inner.policies[id.0].map;
        map.get(map.hash(key), key, f)
    }

    /// Local tokens held for `key`, 0 if unknown (for tests and
    /// introspection).
    pub fn local_tokens(&self, id: PolicyId, key: &[u8]) -> u64 {
        self.peek(id, key, |b| b.hot.tokens()).unwrap_or(0)
    }

    /// Requests left for `key` as an allowed decision would report them
    /// (tokens: its local ones plus the ledger's balance at its last lease),
    /// without deciding; the policy's burst for a key not tracked.
    pub fn remaining(&self, id: PolicyId, key: &[u8]) -> u64 {
        let state = &self.inner.policies[id.0];
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

    /// How many keys the manager tracks.
    pub fn tracked_keys(&self) -> usize {
        self.inner.policies.iter().map(|s| s.map.len()).sum()
    }
}
