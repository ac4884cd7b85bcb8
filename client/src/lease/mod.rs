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
//! Lease size: B = clamp(min_lease, observed_qps x lookahead, max_lease), the
//! seeds' traffic-proportional leasing. The drift bound that follows: N
//! gateways over-admit at most N x max_lease beyond the ledger's own limit.
//!
//! # The map
//! Decisions vastly outnumber new keys. Per policy, 64 shards (`map.rs`),
//! each a `hashbrown::HashTable` whose buckets are the keys' 32-byte hot
//! records (`KeyHot`, `bucket.rs`: the key's first 15 bytes, the token word,
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

mod bucket;
mod map;
mod metrics;
mod shard_lock;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::runtime::Handle;
use tokio::sync::Notify;

use self::bucket::{Bucket, KeyCold, LeaseResult, HIT, MAX_LEASE};
use self::map::KeyMap;
use self::metrics::{LedgerMetrics, PolicyMetrics};
use crate::client::Client;
use crate::clock::{us, Clock};
use crate::decision::{BypassReason, Decision, Outcome};
use crate::policy::{FailureMode, Mode, Policy, PolicyId, PolicySet};

/// Lease manager settings; the defaults are the seeds' values.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Smallest lease (tokens). Small enough that a rare caller does not
    /// strand quota in one gateway.
    pub min_lease: u64,
    /// Largest lease (tokens); bounds over-admission at N x max_lease.
    pub max_lease: u64,
    /// Tokens asked for = observed qps x this (0.25 s: about 4 leases a second).
    pub lookahead: Duration,
    /// Renew when local tokens fall to this fraction of the last lease.
    pub low_watermark: f64,
    /// Time constant of the observed-rate average's decay.
    pub qps_decay: Duration,
    /// A key with no traffic for this long returns its unspent tokens.
    pub idle_after: Duration,
    /// A key idle this long, holding nothing, is forgotten.
    pub evict_after: Duration,
    /// How often the sweeper runs.
    pub sweep_interval: Duration,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            min_lease: 5,
            max_lease: 500,
            lookahead: Duration::from_millis(250),
            low_watermark: 0.2,
            qps_decay: Duration::from_secs(1),
            idle_after: Duration::from_secs(2),
            evict_after: Duration::from_secs(60),
            sweep_interval: Duration::from_millis(100),
        }
    }
}

impl LeaseConfig {
    /// Checks the settings a manager cannot work with: `min_lease` of at
    /// least 1 token and at most `max_lease`, `max_lease` at most 2^40 tokens
    /// (a key's local count has 42 bits) and `low_watermark` in [0, 1). The
    /// error names the setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.min_lease == 0 {
            return Err("min_lease: must be at least 1 token".into());
        }
        if self.min_lease > self.max_lease {
            return Err(format!(
                "min_lease: {} is above max_lease {}",
                self.min_lease, self.max_lease
            ));
        }
        if self.max_lease > MAX_LEASE {
            return Err(format!(
                "max_lease: {} is above the largest lease, 2^40 tokens",
                self.max_lease
            ));
        }
        if !(0.0..1.0).contains(&self.low_watermark) {
            return Err(format!(
                "low_watermark: {} is not a fraction in [0, 1)",
                self.low_watermark
            ));
        }
        Ok(())
    }
}

/// Rate samples shorter than this are too noisy to use.
const MIN_SAMPLE_US: u64 = 20_000;

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

/// One return in `Inner::returns`; ends it when dropped (also if its task
/// is dropped with the runtime).
struct ReturnInFlight(Arc<Inner>);

impl Drop for ReturnInFlight {
    fn drop(&mut self) {
        if self.0.returns.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.returns_done.notify_waiters();
        }
    }
}

/// The lease manager; cheap to clone (all clones share state).
#[derive(Clone)]
pub struct LeaseManager {
    inner: Arc<Inner>,
}

/// The future of [`LeaseManager::decide`]: 48 bytes. Its first poll makes
/// the local decision; only a key with no local tokens leaves it waiting,
/// in a boxed state (a timer and a notification, ~300 bytes) that only such
/// a decision allocates. (An `async fn` kept room for that state and the
/// decision in every future, 120 bytes, and moving it cost the steady state
/// ~50 ns.)
#[must_use = "futures do nothing unless polled"]
pub struct Decide<'a> {
    /// `None` once the decision is out (a poll after that panics, rather
    /// than take another token).
    manager: Option<&'a LeaseManager>,
    id: PolicyId,
    key: &'a [u8],
    waiting: Option<Pin<Box<dyn Future<Output = Decision> + Send + 'a>>>,
}

impl std::fmt::Debug for Decide<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decide")
            .field("id", &self.id)
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
            let id = self.id;
            let state = &m.inner.policies[id.0];
            // Only a decision that has to wait takes a reference to the bucket.
            let found = m.with_bucket(state, self.key, |bucket| {
                m.local(state, bucket).ok_or_else(|| bucket.cold().clone())
            });
            match found {
                Ok(d) => {
                    self.manager = None;
                    return Poll::Ready(d);
                }
                Err(bucket) => self.waiting = Some(Box::pin(m.wait_for_lease(id, bucket))),
            }
        }
        let waiting = self.waiting.as_mut().expect("set above");
        let d = std::task::ready!(waiting.as_mut().poll(cx));
        (self.manager, self.waiting) = (None, None);
        Poll::Ready(d)
    }
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
                    metrics: PolicyMetrics::new(&p.name),
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
        let sweeper = Arc::downgrade(&manager.inner);
        let every = manager.inner.config.sweep_interval;
        manager.inner.runtime.spawn(async move {
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
        manager
    }

    /// The policy behind `id`.
    pub fn policy(&self, id: PolicyId) -> &Policy {
        &self.inner.policies[id.0].policy
    }

    /// Decides one request for `key` under policy `id`, waiting for the
    /// ledger only when this key has no local tokens (its first request, or a
    /// demand spike that outran the prefetch), and then at most the lease
    /// deadline plus 1 ms. A ledger failure yields a bypass outcome, never
    /// `Limited`. The local decision is made when the future is first
    /// polled.
    pub fn decide<'a>(&'a self, id: PolicyId, key: &'a [u8]) -> Decide<'a> {
        Decide {
            manager: Some(self),
            id,
            key,
            waiting: None,
        }
    }

    /// `decide` for a key with no local tokens: waits for its lease.
    async fn wait_for_lease(&self, id: PolicyId, mut bucket: Arc<KeyCold>) -> Decision {
        let state = &self.inner.policies[id.0];
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
                    return Some(self.finish(state, self.allowed(state, b, left)));
                }
                if b.cold().blocked(now).is_some() {
                    return Some(self.finish(state, self.limited(state, b, now)));
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
                    _ if !self.spawn_lease(id, &bucket, now) && !bucket.lease_in_flight() => {
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

    /// Decides without waiting: `None` when the key has no local tokens and a
    /// lease is on its way (the caller may retry, or call [`Self::decide`]).
    /// The steady-state path: a map lookup under the shard's read lock, one
    /// clock read and one compare-and-swap of the word that holds the token
    /// count and the decision counter.
    pub fn try_decide(&self, id: PolicyId, key: &[u8]) -> Option<Decision> {
        let state = &self.inner.policies[id.0];
        self.with_bucket(state, key, |bucket| self.local(state, bucket))
    }

    /// Runs `f` on the key's bucket (created if new), borrowed under its
    /// shard's read lock: no reference-count traffic on a hot key's bucket.
    #[inline]
    fn with_bucket<R>(
        &self,
        state: &PolicyState,
        key: &[u8],
        f: impl FnOnce(Bucket<'_>) -> R,
    ) -> R {
        let hash = state.map.hash(key);
        match state.map.try_with(hash, key, f) {
            Ok(r) => r,
            Err(f) => self.with_new_bucket(state, hash, key, f),
        }
    }

    /// `with_bucket` for a key not in the map (yet): inserts it, then runs
    /// `f` under the read lock. The sweeper may evict the new key in between
    /// (with `evict_after` zero); then it is looked up, and inserted, again.
    #[cold]
    fn with_new_bucket<R>(
        &self,
        state: &PolicyState,
        hash: u64,
        key: &[u8],
        mut f: impl FnOnce(Bucket<'_>) -> R,
    ) -> R {
        loop {
            let now = self.inner.clock.now_us();
            state.map.get_or_insert(hash, key, now, |index| {
                let mut ledger_key = BytesMut::with_capacity(state.prefix.len() + key.len());
                ledger_key.put_slice(&state.prefix);
                ledger_key.put_slice(key);
                KeyCold::new(
                    key,
                    hash,
                    index,
                    ledger_key.freeze(),
                    now,
                    self.inner.config.low_watermark,
                )
            });
            match state.map.try_with(hash, key, f) {
                Ok(r) => return r,
                Err(back) => f = back,
            }
        }
    }

    /// The lock-free part: a local token, else blocked, else (empty) breaker
    /// open. Reads the clock once.
    ///
    /// Tokens come first: they were granted by the ledger, so a key whose
    /// renewal was denied spends what it holds, and the block (no ledger
    /// calls, `Limited`) applies once they run out.
    ///
    /// The steady state (a token taken, above the watermark) reads and writes
    /// only the key's hot record: one CAS counts the decision and takes the
    /// token. The rest reads the cold part too.
    ///
    /// The steady state reads no clock: an allowed decision's fields come
    /// from the record and the policy.
    fn local(&self, state: &PolicyState, bucket: Bucket<'_>) -> Option<Decision> {
        if let Some(left) = bucket.hot.take(HIT) {
            if bucket.hot.below_watermark(left) {
                self.renew(state, bucket);
            }
            state.metrics.record(Outcome::Allowed);
            return Some(self.allowed(state, bucket, left));
        }
        self.local_empty(state, bucket, self.inner.clock.now_us())
    }

    /// `local` at the low watermark: starts the key's renewal.
    #[cold]
    #[inline(never)]
    fn renew(&self, state: &PolicyState, bucket: Bucket<'_>) {
        let now = self.inner.clock.now_us();
        self.spawn_lease(state.id, bucket.cold(), now);
    }

    /// `local` for a key with no local tokens.
    #[cold]
    fn local_empty(&self, state: &PolicyState, bucket: Bucket<'_>, now: u64) -> Option<Decision> {
        bucket.hot.hit();
        // A key deciding without tokens (blocked, breaker open, waiting) may
        // not lease for a long time, and the sweeper does not sample a busy
        // key: sample here (at most every MIN_SAMPLE_US; usually one load),
        // or more than 2^22 decisions between samples would wrap the count.
        bucket.sample(now, us(self.inner.config.qps_decay), MIN_SAMPLE_US);
        let cold = bucket.cold();
        if cold.blocked(now).is_some() {
            return Some(self.finish(state, self.limited(state, bucket, now)));
        }
        if self.inner.client.breaker_would_refuse() {
            return Some(self.bypass(state, cold, Some(BypassReason::CircuitOpen), now));
        }
        // Whatever the last lease's fate, try again: the breaker, not this
        // key, decides when the ledger is left alone.
        self.spawn_lease(state.id, cold, now);
        None
    }

    /// The ledger's balance at the last lease: the burst minus its deficit.
    #[inline]
    fn ledger_balance(state: &PolicyState, bucket: Bucket<'_>) -> u64 {
        state
            .policy
            .burst
            .saturating_sub(bucket.hot.ledger_deficit())
    }

    /// Time until the policy's bucket is full again from `balance` tokens:
    /// the missing tokens times the refill interval (the ledger's
    /// `reset_after` for the same balance). A gateway's balance is its local
    /// tokens plus the ledger's at the last lease, so `reset` and `remaining`
    /// describe one state (rounded up to the next nanosecond).
    #[inline]
    fn reset(state: &PolicyState, balance: u64) -> Duration {
        let missing = state.policy.burst.saturating_sub(balance);
        let ns = missing as f64 * state.refill_ns;
        // `as u64` saturates (a refill beyond 584 years reads as that). Not
        // `ceil`: without SSE4.1 it is a libm call on the request path.
        let whole = ns as u64;
        Duration::from_nanos(whole.saturating_add(u64::from((whole as f64) < ns)))
    }

    #[inline]
    fn allowed(&self, state: &PolicyState, bucket: Bucket<'_>, left: u64) -> Decision {
        let remaining = left.saturating_add(Self::ledger_balance(state, bucket));
        Decision {
            allowed: true,
            outcome: Outcome::Allowed,
            limit: state.policy.requests_per_unit,
            window: state.policy.unit,
            remaining,
            reset: Self::reset(state, remaining),
            retry_after: None,
            over_quota: false,
        }
    }

    /// Over quota, before the policy's mode is applied.
    fn limited(&self, state: &PolicyState, bucket: Bucket<'_>, now: u64) -> Decision {
        let until = bucket.cold().blocked(now).unwrap_or(now);
        Decision {
            allowed: false,
            outcome: Outcome::Limited,
            limit: state.policy.requests_per_unit,
            window: state.policy.unit,
            remaining: 0,
            // This path reads the clock anyway: count the time since the
            // ledger's reading down (the ledger refills meanwhile).
            reset: Self::reset(state, Self::ledger_balance(state, bucket)).saturating_sub(
                Duration::from_micros(now.saturating_sub(bucket.cold().ledger_at_us())),
            ),
            retry_after: Some(Duration::from_micros(until - now)),
            over_quota: true,
        }
    }

    /// Applies the policy's mode to an over-quota decision, and counts it.
    fn finish(&self, state: &PolicyState, mut d: Decision) -> Decision {
        if d.outcome == Outcome::Limited {
            match state.policy.mode {
                Mode::Enforce => {}
                Mode::Shadow => {
                    (d.allowed, d.outcome, d.retry_after) = (true, Outcome::ShadowLimited, None)
                }
                Mode::Soft => {
                    (d.allowed, d.outcome, d.retry_after) = (true, Outcome::SoftOverQuota, None)
                }
            }
        }
        state.metrics.record(d.outcome);
        d
    }

    /// The ledger could not answer for this key.
    fn bypass(
        &self,
        state: &PolicyState,
        bucket: &KeyCold,
        reason: Option<BypassReason>,
        now: u64,
    ) -> Decision {
        let reason = reason.unwrap_or(BypassReason::LedgerError);
        let p = &state.policy;
        let mut d = Decision {
            allowed: false,
            outcome: Outcome::FailedClosed(reason),
            limit: p.requests_per_unit,
            window: p.unit,
            remaining: 0,
            reset: Duration::ZERO,
            retry_after: Some(self.inner.client.config().breaker.cool_down),
            over_quota: false,
        };
        if p.failure_mode == FailureMode::FailOpen {
            if bucket.fallback_take(now, state.fallback_interval_ns, state.fallback_burst) {
                (d.allowed, d.outcome, d.retry_after) = (true, Outcome::Bypassed(reason), None);
            } else {
                let wait = Duration::from_nanos(state.fallback_interval_ns);
                (d.outcome, d.retry_after) = (Outcome::FallbackLimited(reason), Some(wait));
            }
        }
        state.metrics.record(d.outcome);
        d
    }

    /// Starts the key's one lease call unless one is in flight or the key is blocked.
    /// Returns false when it started none because the key is blocked (or
    /// evicted) or another call holds the slot.
    fn spawn_lease(&self, id: PolicyId, bucket: &Arc<KeyCold>, now: u64) -> bool {
        if bucket.blocked(now).is_some() || !bucket.claim_lease() {
            return false;
        }
        let me = self.clone();
        let bucket = bucket.clone();
        self.inner
            .runtime
            .spawn(async move { me.lease(id, bucket).await });
        true
    }

    /// B = clamp(min_lease, observed_qps x lookahead, max_lease), and at
    /// most 2^40 tokens (a key's token count has 42 bits).
    fn lease_size(&self, bucket: &KeyCold) -> u64 {
        let c = &self.inner.config;
        let want = (bucket.qps() * c.lookahead.as_secs_f64()).ceil() as u64;
        want.clamp(c.min_lease, c.max_lease.max(c.min_lease))
            .clamp(1, MAX_LEASE)
    }

    async fn lease(&self, id: PolicyId, bucket: Arc<KeyCold>) {
        let state = &self.inner.policies[id.0];
        let c = &self.inner.config;
        let now = self.inner.clock.now_us();
        state
            .map
            .with(&bucket, |b| b.sample(now, us(c.qps_decay), MIN_SAMPLE_US));
        let want = self.lease_size(&bucket);
        let started = Instant::now();
        self.inner.ledger.leases.increment(1);
        let res = self
            .inner
            .client
            .token_lease(&bucket.ledger_key, state.policy.bucket(), want, 1)
            .await;
        let now = self.inner.clock.now_us();
        match res {
            Ok(lease) => {
                self.inner
                    .ledger
                    .rtt
                    .record(started.elapsed().as_secs_f64());
                let (result, granted) = if lease.granted > 0 {
                    self.inner.ledger.lease_size.record(lease.granted as f64);
                    (LeaseResult::Granted, lease.granted)
                } else {
                    // `None` (can never succeed) cannot happen with MIN 1 and a
                    // capacity of at least 1; block for a whole unit if it does.
                    let wait = lease.retry_after.unwrap_or(state.policy.unit);
                    bucket.block_until(now.saturating_add(us(wait).max(1)));
                    (LeaseResult::Denied, 0)
                };
                let deficit = state.policy.burst.saturating_sub(lease.remaining);
                self.finish_lease(state, &bucket, result, granted, Some((deficit, now)));
            }
            Err(e) => {
                let result = if e.is_timeout() {
                    LeaseResult::Timeout
                } else if e.is_circuit_open() {
                    LeaseResult::CircuitOpen
                } else {
                    LeaseResult::Error
                };
                self.finish_lease(state, &bucket, result, 0, None);
            }
        }
    }

    /// Lands a lease call's result in the key's hot record and releases the
    /// key's lease slot. The key cannot have been evicted: eviction needs the
    /// slot, which this call holds.
    fn finish_lease(
        &self,
        state: &PolicyState,
        bucket: &Arc<KeyCold>,
        result: LeaseResult,
        granted: u64,
        ledger: Option<(u64, u64)>,
    ) {
        let landed = state
            .map
            .with(bucket, |b| b.finish_lease(result, granted, ledger));
        debug_assert!(landed.is_some(), "a key with a lease in flight was evicted");
    }

    /// One sweep: rate samples, TOKENRETURN for keys idle past `idle_after`,
    /// eviction past `evict_after`. The background sweeper calls this every
    /// `sweep_interval`; tests with a manual clock call it directly.
    pub fn maintain(&self) {
        let c = &self.inner.config;
        let now = self.inner.clock.now_us();
        for (i, state) in self.inner.policies.iter().enumerate() {
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
                    self.spawn_return(PolicyId(i), cold.clone());
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

    /// Starts a TOKENRETURN of the key's tokens, counted in `returns` from
    /// now until it is done, so `shutdown` can wait for it.
    fn spawn_return(&self, id: PolicyId, bucket: Arc<KeyCold>) {
        self.inner.returns.fetch_add(1, Ordering::AcqRel);
        let in_flight = ReturnInFlight(self.inner.clone());
        let me = self.clone();
        self.inner.runtime.spawn(async move {
            me.give_back(id, &bucket).await;
            drop(in_flight);
        });
    }

    async fn give_back(&self, id: PolicyId, bucket: &Arc<KeyCold>) {
        // An evicted key held no tokens (and its slot may be another key's).
        let map = &self.inner.policies[id.0].map;
        let count = map.with(bucket, |b| b.hot.drain()).unwrap_or(0);
        if count == 0 {
            return;
        }
        self.inner.ledger.returns.increment(1);
        let params = self.inner.policies[id.0].policy.bucket();
        // If the return fails the tokens are simply not returned: the ledger
        // refills on its own, so the only cost is a little unused quota.
        let _ = self
            .inner
            .client
            .token_return(&bucket.ledger_key, params, count)
            .await;
    }

    /// Stops the sweeper and returns every key's unspent tokens (TOKENRETURN),
    /// all calls concurrently, each under the lease deadline. A key whose
    /// lease is in flight returns what that lease brings, once it lands (at
    /// most the lease deadline later). Decisions made after `shutdown` may
    /// lease again; their tokens are not returned.
    /// Returns the sweeper started before (idle keys' returns) are waited
    /// for too, up to the same deadline.
    pub async fn shutdown(&self) {
        self.inner.stopped.store(true, Ordering::Release);
        let settle = self.inner.client.config().lease_deadline + Duration::from_millis(50);
        let mut calls = tokio::task::JoinSet::new();
        for (i, state) in self.inner.policies.iter().enumerate() {
            state.map.for_each(|bucket| {
                if bucket.hot.tokens() > 0 || bucket.cold().lease_in_flight() {
                    let (me, bucket) = (self.clone(), bucket.cold().clone());
                    calls.spawn(async move {
                        wait_until(&bucket.leased, settle, || !bucket.lease_in_flight()).await;
                        me.give_back(PolicyId(i), &bucket).await
                    });
                }
            });
        }
        while calls.join_next().await.is_some() {}
        let inner = &self.inner;
        wait_until(&inner.returns_done, settle, || {
            inner.returns.load(Ordering::Acquire) == 0
        })
        .await;
    }

    /// Runs `f` on `key`'s bucket if the key is known.
    fn peek<R>(&self, id: PolicyId, key: &[u8], f: impl FnOnce(Bucket<'_>) -> R) -> Option<R> {
        let map = &self.inner.policies[id.0].map;
        map.get(map.hash(key), key, f)
    }

    /// Local tokens held for `key` (for tests and introspection).
    pub fn local_tokens(&self, id: PolicyId, key: &[u8]) -> u64 {
        self.peek(id, key, |b| b.hot.tokens()).unwrap_or(0)
    }

    /// The observed decisions per second for `key` (0 if unknown).
    pub fn observed_qps(&self, id: PolicyId, key: &[u8]) -> f64 {
        self.peek(id, key, |b| b.cold().qps()).unwrap_or(0.0)
    }

    /// The lease size the next renewal for `key` would ask for.
    pub fn next_lease_size(&self, id: PolicyId, key: &[u8]) -> u64 {
        self.peek(id, key, |b| self.lease_size(b.cold()))
            .unwrap_or(self.inner.config.min_lease)
    }

    /// How many keys the manager tracks.
    pub fn tracked_keys(&self) -> usize {
        self.inner.policies.iter().map(|s| s.map.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ClientConfig;
    use crate::clock::ManualClock;

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

    #[test]
    fn invalid_lease_settings_are_refused_by_name() {
        assert_eq!(LeaseConfig::default().validate(), Ok(()));
        let bad = |f: fn(&mut LeaseConfig)| {
            let mut c = LeaseConfig::default();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert!(bad(|c| c.min_lease = 0).starts_with("min_lease"));
        assert!(bad(|c| c.min_lease = 501).starts_with("min_lease: 501 is above max_lease 500"));
        assert!(bad(|c| c.max_lease = MAX_LEASE + 1).starts_with("max_lease"));
        assert!(bad(|c| c.low_watermark = 1.0).starts_with("low_watermark"));
        assert!(bad(|c| c.low_watermark = -0.1).starts_with("low_watermark"));
        assert!(bad(|c| c.low_watermark = f64::NAN).starts_with("low_watermark"));
    }

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
