//! One (policy, key)'s local state, split in two.
//!
//! - [`KeyHot`] (32 bytes, inline in the map's per-shard hash table):
//!   what a steady-state decision reads and writes. The token count and the
//!   decision counter share one atomic word, so a decision is one CAS; the
//!   renewal watermark, the ledger's balance (for the decision's
//!   `remaining`) and the index of the key's cold part share another (see
//!   [`View`] for their precision); the key itself (up to [`INLINE_KEY`]
//!   bytes) or its first bytes fill the rest, for the lookup's exact compare.
//! - [`KeyCold`] (`Arc`'d, one per key): lease bookkeeping, the block, the
//!   rate sampler, the fail-open bucket, the full key, the ledger key and the
//!   notification of waiting decisions. A decision reads it only off the
//!   fast path: at the renewal trigger, with no local tokens, and to compare
//!   keys longer than [`INLINE_KEY`].
//!
//! A [`Bucket`] borrows both under the shard's lock. Code outside the lock
//! (a lease task, a waiting decision, a token return) holds the `Arc<KeyCold>`
//! and reaches the hot record again through `KeyMap::with`, which finds it by
//! the key's hash and the cold index the cold part records, and checks that
//! the slab's entry is still this `Arc` (an evicted key's index may belong to
//! another key by then).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::*};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::Notify;

use crate::decision::BypassReason;

/// Keys up to this many bytes are compared in the hot record alone; longer
/// keys also compare their full bytes in the cold part (one more cache line).
pub(crate) const INLINE_KEY: usize = 15;

/// The hot record's 16 key bytes for `key`: byte 0 is the length (or 16 for
/// a longer key), then the key's first 15 bytes, zero-padded, read as a
/// little-endian `u128` (the layout of [`key_tag_bytes`]). Equal tags mean
/// equal keys when the length is at most [`INLINE_KEY`].
///
/// Built from two overlapping unaligned loads of the key and shifts: a
/// byte-wise copy into a stack buffer read back as one `u128` stalls store
/// forwarding (~20% of a one-key decision).
#[inline]
pub(crate) fn key_tag(key: &[u8]) -> u128 {
    let len = key.len();
    let (body, marker) = if len > INLINE_KEY {
        (le_bytes(&key[..INLINE_KEY]), INLINE_KEY as u128 + 1)
    } else {
        (le_bytes(key), len as u128)
    };
    (body << 8) | marker
}

/// Up to 15 bytes as a little-endian integer (byte 0 lowest).
#[inline]
fn le_bytes(b: &[u8]) -> u128 {
    let n = b.len();
    debug_assert!(n <= INLINE_KEY);
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    if n >= 8 {
        // The second load ends at the last byte; drop its overlap with the first.
        let high = u64_at(n - 8).checked_shr(8 * (16 - n) as u32).unwrap_or(0);
        u128::from(u64_at(0)) | (u128::from(high) << 64)
    } else if n >= 4 {
        let high = u32_at(n - 4).checked_shr(8 * (8 - n) as u32).unwrap_or(0);
        u128::from(u32_at(0)) | (u128::from(high) << 32)
    } else {
        b.iter().rev().fold(0, |acc, &x| (acc << 8) | u128::from(x))
    }
}

/// [`key_tag`]'s layout spelled out (for its tests).
#[cfg(test)]
fn key_tag_bytes(key: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    let n = key.len().min(INLINE_KEY);
    b[0] = if key.len() <= INLINE_KEY {
        key.len() as u8
    } else {
        INLINE_KEY as u8 + 1
    };
    b[1..1 + n].copy_from_slice(&key[..n]);
    u128::from_le_bytes(b)
}

/// The token word: tokens in the low [`TOKEN_BITS`] bits, a wrapping count
/// of decisions in the rest.
const TOKEN_BITS: u32 = 42;
const TOKEN_MASK: u64 = (1 << TOKEN_BITS) - 1;
/// One decision, added to the token word.
pub(crate) const HIT: u64 = 1 << TOKEN_BITS;
/// Decisions are counted modulo 2^22 (4 194 304): a rate sample (every
/// sweep, 100 ms by default) is right up to ~42 million decisions a second
/// for one key in one gateway.
pub(crate) const HITS_MASK: u64 = (1 << (64 - TOKEN_BITS)) - 1;
/// The largest lease asked for (2^40 tokens), so a key's tokens (at most its
/// watermark plus one grant) always fit their 42 bits.
pub(crate) const MAX_LEASE: u64 = 1 << 40;

/// The result of the last lease call, for decisions that waited on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseResult {
    Pending = 0,
    Granted = 1,
    Denied = 2,
    Timeout = 3,
    CircuitOpen = 4,
    Error = 5,
}

impl LeaseResult {
    fn from_u8(v: u8) -> LeaseResult {
        match v {
            1 => LeaseResult::Granted,
            2 => LeaseResult::Denied,
            3 => LeaseResult::Timeout,
            4 => LeaseResult::CircuitOpen,
            5 => LeaseResult::Error,
            _ => LeaseResult::Pending,
        }
    }

    pub(crate) fn bypass_reason(self) -> Option<BypassReason> {
        match self {
            LeaseResult::Timeout | LeaseResult::Pending => Some(BypassReason::LedgerTimeout),
            LeaseResult::CircuitOpen => Some(BypassReason::CircuitOpen),
            LeaseResult::Error => Some(BypassReason::LedgerError),
            LeaseResult::Granted | LeaseResult::Denied => None,
        }
    }
}

/// `KeyCold::lease` states.
const IDLE: u8 = 0;
const LEASING: u8 = 1;
const EVICTED: u8 = 2;

/// The request path's part of a key: 32 bytes, 32-aligned (one cache line
/// never holds part of two records), in the map's per-shard array.
#[derive(Debug)]
#[repr(C, align(32))]
pub(crate) struct KeyHot {
    /// [`key_tag`] of the key; written only under the shard's write lock.
    pub(crate) tag: u128,
    /// Leased tokens not yet spent (low 42 bits) and decisions made
    /// (wrapping, high 22 bits): a decision that takes a token updates both
    /// with one CAS.
    word: AtomicU64,
    /// The renewal watermark, the ledger's balance at the last lease and the
    /// index of the key's cold part, in one word ([`View`]). Written only by
    /// the key's one lease call (and at insertion, under the write lock).
    view: AtomicU64,
}

/// [`KeyHot::view`], from the top: the low watermark and the ledger's
/// deficit at the last lease (tokens missing from a full bucket), both
/// [`SMALL_FLOAT`]s rounded up (a renewal starts at most 1/32 768 of the
/// watermark early; `remaining` is low by at most 1/32 768 of the deficit,
/// and exact near full, where a header's `r` and `t` are read most), and
/// the cold part's index in its shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct View(u64);

/// The two counts' format: `mantissa << exponent`, a 15-bit mantissa and a
/// 5-bit exponent, so exact up to 32 767 and within 1/32 768 above, up to
/// about 7 x 10^13.
const SMALL_FLOAT: u32 = 20;
const MANTISSA: u32 = 15;
const SMALL_FLOAT_MAX: u64 = ((1 << MANTISSA) - 1) << ((1 << (SMALL_FLOAT - MANTISSA)) - 1);
/// Bits of the cold part's index: 16 777 216 keys per shard.
const INDEX_BITS: u32 = 64 - 2 * SMALL_FLOAT;
pub(crate) const MAX_INDEX: u32 = (1 << INDEX_BITS) - 1;

impl View {
    fn new(watermark: u64, deficit: u64, index: u32) -> View {
        debug_assert!(index <= MAX_INDEX);
        let wm = encode_up(watermark);
        let deficit = encode_up(deficit);
        View((wm << (SMALL_FLOAT + INDEX_BITS)) | (deficit << INDEX_BITS) | u64::from(index))
    }

    fn watermark(self) -> u64 {
        decode(self.0 >> (SMALL_FLOAT + INDEX_BITS))
    }

    fn deficit(self) -> u64 {
        decode((self.0 >> INDEX_BITS) & ((1 << SMALL_FLOAT) - 1))
    }

    fn index(self) -> u32 {
        (self.0 & u64::from(MAX_INDEX)) as u32
    }
}

fn decode(f: u64) -> u64 {
    (f & ((1 << MANTISSA) - 1)) << (f >> MANTISSA)
}

/// `v` (saturated at [`SMALL_FLOAT_MAX`]) as a [`SMALL_FLOAT`], rounded up.
fn encode_up(v: u64) -> u64 {
    let v = v.min(SMALL_FLOAT_MAX);
    let shift = (64 - v.leading_zeros()).saturating_sub(MANTISSA);
    let (mut m, mut e) = (v >> shift, u64::from(shift));
    if m << shift != v {
        m += 1;
        if m >> MANTISSA != 0 {
            (m, e) = (m >> 1, e + 1);
        }
    }
    (e << MANTISSA) | m
}

impl KeyHot {
    /// A key holding nothing whose cold part is at `index` of its shard.
    pub(crate) fn new(tag: u128, index: u32) -> KeyHot {
        KeyHot {
            tag,
            word: AtomicU64::new(0),
            // No lease yet: the ledger's bucket counts as empty.
            view: AtomicU64::new(View::new(1, SMALL_FLOAT_MAX, index).0),
        }
    }

    /// Where the key's cold part is in its shard.
    #[inline]
    pub(crate) fn cold_index(&self) -> u32 {
        View(self.view.load(Relaxed)).index()
    }

    /// Counts a decision that took no token.
    pub(crate) fn hit(&self) {
        self.word.fetch_add(HIT, Relaxed);
    }

    /// Takes one local token, adding `hit` (0 or [`HIT`]) to the decision
    /// count in the same CAS; `Some(tokens left)` on success.
    #[inline]
    pub(crate) fn take(&self, hit: u64) -> Option<u64> {
        let mut cur = self.word.load(Relaxed);
        loop {
            let tokens = cur & TOKEN_MASK;
            if tokens == 0 {
                return None;
            }
            match self
                .word
                .compare_exchange_weak(cur, cur.wrapping_add(hit) - 1, AcqRel, Relaxed)
            {
                Ok(_) => return Some(tokens - 1),
                Err(now) => cur = now,
            }
        }
    }

    pub(crate) fn tokens(&self) -> u64 {
        self.word.load(Relaxed) & TOKEN_MASK
    }

    /// Decisions made, modulo 2^22.
    pub(crate) fn hits(&self) -> u64 {
        self.word.load(Relaxed) >> TOKEN_BITS
    }

    /// Removes every local token (for TOKENRETURN); returns how many.
    pub(crate) fn drain(&self) -> u64 {
        let prev = self.word.fetch_and(!TOKEN_MASK, AcqRel);
        prev & TOKEN_MASK
    }

    /// `tokens_left <= low_watermark x last grant` (at least the last token).
    #[inline]
    pub(crate) fn below_watermark(&self, tokens_left: u64) -> bool {
        tokens_left <= View(self.view.load(Relaxed)).watermark()
    }

    /// Tokens the ledger's bucket lacked at the last lease (its burst minus
    /// its balance, rounded up to 15 significant bits; the largest
    /// [`SMALL_FLOAT`] before any lease).
    #[inline]
    pub(crate) fn ledger_deficit(&self) -> u64 {
        View(self.view.load(Relaxed)).deficit()
    }
}

/// Everything else about a key; `Arc`'d so lease tasks, waiting decisions and
/// token returns can hold it outside the map's lock.
#[derive(Debug)]
pub(crate) struct KeyCold {
    /// The map's hash of `key` (its shard and table slot follow from it).
    pub(crate) hash: u64,
    /// Where the key's [`KeyHot`] is in its shard (valid while the shard's
    /// slot `index` holds this `Arc`).
    pub(crate) index: u32,
    /// The caller's key (without the ledger prefix).
    key: Box<[u8]>,
    /// `{domain}:{policy}:{key}`, built once.
    pub(crate) ledger_key: Bytes,
    /// [`IDLE`], [`LEASING`] (a lease call is in flight: never two per key)
    /// or [`EVICTED`] (removed from the map: no lease call ever again, so
    /// no token can land in a bucket nobody will return it from).
    lease: AtomicU8,
    last_result: AtomicU8,
    /// Denied by the ledger: no ledger calls and no admission before this.
    blocked_until_us: AtomicU64,
    /// Decision count (modulo 2^22) at the last rate sample.
    hits_sampled: AtomicU64,
    sampled_at_us: AtomicU64,
    /// Observed decisions per second (f64 bits), a decaying average.
    qps_bits: AtomicU64,
    /// GCRA theoretical arrival time (ns) of the fail-open static bucket.
    fallback_tat_ns: AtomicU64,
    /// When the ledger's deficit in the hot record was read (us).
    ledger_at_us: AtomicU64,
    /// The manager's low watermark, a fraction of each grant.
    low_watermark: f64,
    /// Woken when a lease call finishes.
    pub(crate) leased: Notify,
}

impl KeyCold {
    /// The cold part of a key holding nothing, at `index` of its shard,
    /// renewing at `low_watermark` (a fraction) of each grant.
    pub(crate) fn new(
        key: &[u8],
        hash: u64,
        index: u32,
        ledger_key: Bytes,
        now_us: u64,
        low_watermark: f64,
    ) -> KeyCold {
        KeyCold {
            hash,
            index,
            key: key.into(),
            ledger_key,
            lease: AtomicU8::new(IDLE),
            last_result: AtomicU8::new(LeaseResult::Pending as u8),
            blocked_until_us: AtomicU64::new(0),
            hits_sampled: AtomicU64::new(0),
            sampled_at_us: AtomicU64::new(now_us),
            qps_bits: AtomicU64::new(0f64.to_bits()),
            fallback_tat_ns: AtomicU64::new(0),
            ledger_at_us: AtomicU64::new(now_us),
            low_watermark,
            leased: Notify::new(),
        }
    }

    /// The caller's key (without the ledger prefix).
    #[inline]
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// Claims the right to make the one lease call; false if one is in flight
    /// or the key was evicted.
    pub(crate) fn claim_lease(&self) -> bool {
        self.lease
            .compare_exchange(IDLE, LEASING, AcqRel, Relaxed)
            .is_ok()
    }

    pub(crate) fn lease_in_flight(&self) -> bool {
        self.lease.load(Acquire) == LEASING
    }

    /// Removed from the map: a decision holding it must look the key up again.
    pub(crate) fn evicted(&self) -> bool {
        self.lease.load(Acquire) == EVICTED
    }

    pub(crate) fn last_result(&self) -> LeaseResult {
        LeaseResult::from_u8(self.last_result.load(Acquire))
    }

    /// Publishes a lease call's result (after its tokens, if any, are in the
    /// hot record) and wakes decisions waiting on it.
    fn release_lease(&self, result: LeaseResult) {
        self.last_result.store(result as u8, Release);
        self.lease.store(IDLE, Release);
        self.leased.notify_waiters();
    }

    /// `Some(until)` while blocked after a denial; clears an expired block.
    pub(crate) fn blocked(&self, now_us: u64) -> Option<u64> {
        let until = self.blocked_until_us.load(Acquire);
        if until == 0 {
            return None;
        }
        if now_us < until {
            return Some(until);
        }
        let _ = self
            .blocked_until_us
            .compare_exchange(until, 0, AcqRel, Relaxed);
        None
    }

    pub(crate) fn block_until(&self, until_us: u64) {
        self.blocked_until_us.store(until_us.max(1), Release);
    }

    /// When the ledger's deficit in the hot record was read (us; the key's
    /// creation before any lease).
    pub(crate) fn ledger_at_us(&self) -> u64 {
        self.ledger_at_us.load(Relaxed)
    }

    pub(crate) fn qps(&self) -> f64 {
        f64::from_bits(self.qps_bits.load(Relaxed))
    }

    /// The fail-open static bucket (GCRA): admits at most `burst` at once and
    /// one more per `interval_ns` after that.
    pub(crate) fn fallback_take(&self, now_us: u64, interval_ns: u64, burst: u64) -> bool {
        let now = now_us.saturating_mul(1000);
        let tolerance = interval_ns.saturating_mul(burst.saturating_sub(1));
        let mut tat = self.fallback_tat_ns.load(Relaxed);
        loop {
            let start = tat.max(now);
            if start - now > tolerance {
                return false;
            }
            match self.fallback_tat_ns.compare_exchange_weak(
                tat,
                start + interval_ns,
                AcqRel,
                Relaxed,
            ) {
                Ok(_) => return true,
                Err(t) => tat = t,
            }
        }
    }
}

/// A key's two parts, borrowed under its shard's lock. The cold part's
/// pointer is read only when asked for (it is in another array).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bucket<'a> {
    pub(crate) hot: &'a KeyHot,
    cold: &'a Option<Arc<KeyCold>>,
}

impl<'a> Bucket<'a> {
    /// `hot` and `cold` of a slot that holds a key (`cold` is `Some`).
    #[inline]
    pub(crate) fn new(hot: &'a KeyHot, cold: &'a Option<Arc<KeyCold>>) -> Bucket<'a> {
        debug_assert!(cold.is_some());
        Bucket { hot, cold }
    }

    /// The key's cold part.
    #[inline]
    pub(crate) fn cold(&self) -> &'a Arc<KeyCold> {
        self.cold.as_ref().expect("a bucket of a free slot")
    }

    /// Marks the key evicted if no lease is in flight and it holds no tokens
    /// and no block; then no lease can ever be claimed for it, so its token
    /// count stays 0. The map removes it only if this returns true (and asks
    /// under the shard's write lock, so no decision is taking a token).
    pub(crate) fn try_evict(&self, now_us: u64) -> bool {
        let cold = self.cold();
        if cold
            .lease
            .compare_exchange(IDLE, EVICTED, AcqRel, Relaxed)
            .is_err()
        {
            return false;
        }
        // Tokens only grow under LEASING, and a lease's grant and block are
        // published before its release (Release/Acquire on `lease`).
        if self.hot.word.load(Acquire) & TOKEN_MASK > 0 || cold.blocked(now_us).is_some() {
            cold.lease.store(IDLE, Release);
            return false;
        }
        true
    }

    /// Lands a lease call's result: the ledger's deficit and the time it was
    /// read (`None` when the call failed), the grant (and the watermark it
    /// sets), then publishes the result and wakes decisions waiting on it.
    /// Only the key's one lease call writes the view, so it is read and
    /// rewritten without a CAS.
    pub(crate) fn finish_lease(
        &self,
        result: LeaseResult,
        granted: u64,
        ledger: Option<(u64, u64)>,
    ) {
        let old = View(self.hot.view.load(Relaxed));
        let watermark = if granted > 0 {
            debug_assert!(granted <= MAX_LEASE, "asked for at most MAX_LEASE");
            ((granted as f64 * self.cold().low_watermark).ceil() as u64).max(1)
        } else {
            old.watermark()
        };
        let deficit = match ledger {
            Some((deficit, at_us)) => {
                self.cold().ledger_at_us.store(at_us, Relaxed);
                deficit
            }
            None => old.deficit(),
        };
        self.hot
            .view
            .store(View::new(watermark, deficit, old.index()).0, Relaxed);
        if granted > 0 {
            self.hot.word.fetch_add(granted.min(MAX_LEASE), AcqRel);
        }
        self.cold().release_lease(result);
    }

    /// Folds the decisions since the last sample into the rate estimate:
    /// "fast attack, slow decay". A higher measured rate is taken at once (a
    /// burst gets big leases quickly); a lower one pulls the average down
    /// with time constant `tau_us`, so B decays smoothly back to min_lease
    /// when traffic stops. Samples shorter than `min_us` are skipped (too
    /// noisy). Returns whether any traffic was seen in this sample.
    pub(crate) fn sample(&self, now_us: u64, tau_us: u64, min_us: u64) -> bool {
        let cold = self.cold();
        let last = cold.sampled_at_us.load(Acquire);
        let sampled = cold.hits_sampled.load(Acquire);
        if now_us < last.saturating_add(min_us) {
            return self.hot.hits() != sampled;
        }
        if cold
            .sampled_at_us
            .compare_exchange(last, now_us, AcqRel, Relaxed)
            .is_err()
        {
            return true; // someone else is sampling right now
        }
        // The token word is only read: the deciding cores keep their line.
        // A sampler that stalled after its CAS above may find a later
        // sampler has moved `hits_sampled` on: its count would be "behind"
        // (nearly 2^22 decisions after the wrap), so it gives up.
        let total = self.hot.hits();
        if cold
            .hits_sampled
            .compare_exchange(sampled, total, AcqRel, Relaxed)
            .is_err()
        {
            return true;
        }
        let hits = total.wrapping_sub(sampled) & HITS_MASK;
        let dt = (now_us - last) as f64 / 1e6;
        let measured = hits as f64 / dt;
        let old = cold.qps();
        let qps = if measured >= old {
            measured
        } else {
            let keep = (-((now_us - last) as f64) / tau_us as f64).exp();
            old * keep + measured * (1.0 - keep)
        };
        cold.qps_bits.store(qps.to_bits(), Relaxed);
        hits > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(key: &[u8]) -> (KeyHot, Option<Arc<KeyCold>>) {
        let cold = KeyCold::new(key, 0, 0, Bytes::copy_from_slice(key), 0, 0.2);
        (KeyHot::new(key_tag(key), 0), Some(Arc::new(cold)))
    }

    #[test]
    fn the_hot_record_is_48_bytes_and_tags_are_exact_for_short_keys() {
        assert_eq!(std::mem::size_of::<KeyHot>(), 32);
        assert_eq!(std::mem::align_of::<KeyHot>(), 32);
        assert_ne!(key_tag(b""), key_tag(b"\0"));
        assert_ne!(key_tag(b"a"), key_tag(b"a\0"));
        assert_eq!(key_tag(b"user:000001"), key_tag(b"user:000001"));
        let long = [b'x'; INLINE_KEY + 1];
        assert_ne!(key_tag(&long[..INLINE_KEY]), key_tag(&long));
        // Longer keys share a tag when their first bytes do: the map then
        // compares the full key.
        assert_eq!(key_tag(&[b'x'; 20]), key_tag(&[b'x'; 30]));
    }

    #[test]
    fn fallback_admits_exactly_its_burst_then_its_rate() {
        let (_, b) = parts(b"k");
        let b = b.unwrap();
        // 20 per second, burst 40.
        let admitted = (0..100)
            .filter(|_| b.fallback_take(5_000_000, 50_000_000, 40))
            .count();
        assert_eq!(admitted, 40);
        // One second later: 20 more.
        let later = (0..100)
            .filter(|_| b.fallback_take(6_000_000, 50_000_000, 40))
            .count();
        assert_eq!(later, 20);
    }

    #[test]
    fn rate_estimate_attacks_fast_and_decays_slowly() {
        let (hot, cold) = parts(b"k");
        let b = Bucket::new(&hot, &cold);
        let cold = b.cold();
        for _ in 0..1000 {
            hot.hit();
        }
        assert!(b.sample(100_000, 1_000_000, 10_000));
        assert_eq!(cold.qps(), 10_000.0);
        // Idle for 1 s: one time constant, about 37% left.
        assert!(!b.sample(1_100_000, 1_000_000, 10_000));
        assert!(
            (cold.qps() - 10_000.0 * (-1f64).exp()).abs() < 1.0,
            "{}",
            cold.qps()
        );
        assert!(!b.sample(6_100_000, 1_000_000, 10_000));
        assert!(cold.qps() < 100.0);
    }

    #[test]
    fn the_decision_count_wraps_without_touching_the_tokens() {
        let (hot, cold) = parts(b"k");
        let b = Bucket::new(&hot, &cold);
        let cold = b.cold();
        b.finish_lease(LeaseResult::Granted, MAX_LEASE, None);
        // Just below the wrap of the 22-bit count.
        for _ in 0..HITS_MASK - 5 {
            hot.hit();
        }
        assert!(b.sample(100_000, 1_000_000, 10_000));
        for _ in 0..10 {
            assert!(hot.take(HIT).is_some());
        }
        // The 10 decisions across the wrap are seen: 100/s measured, so the
        // estimate decays from the first sample's rate (no wrap artefact).
        let first = cold.qps();
        assert!(b.sample(200_000, 1_000_000, 10_000));
        let keep = (-0.1f64).exp();
        assert!((cold.qps() - (first * keep + 100.0 * (1.0 - keep))).abs() < 1e-3);
        assert_eq!(hot.tokens(), MAX_LEASE - 10);
        assert_eq!(hot.hits(), 4);
        assert_eq!(hot.drain(), MAX_LEASE - 10);
        assert_eq!(hot.hits(), 4, "draining keeps the count");
    }

    #[test]
    fn key_tag_matches_its_byte_layout_for_every_length() {
        let bytes: Vec<u8> = (0..40u32).map(|i| (i * 37 + 11) as u8 | 1).collect();
        for n in 0..=bytes.len() {
            assert_eq!(
                key_tag(&bytes[..n]),
                key_tag_bytes(&bytes[..n]),
                "length {n}"
            );
            // A zero byte and a 0xff byte at each position: no shift loses or smears one.
            for i in 0..n {
                for v in [0u8, 0xff] {
                    let mut k = bytes[..n].to_vec();
                    k[i] = v;
                    assert_eq!(key_tag(&k), key_tag_bytes(&k), "length {n}, byte {i} = {v}");
                }
            }
        }
    }

    #[test]
    fn the_view_keeps_small_counts_exact_rounds_big_ones_up_and_keeps_the_index() {
        let big = [
            1 << 15,
            (1 << 15) + 1,
            1 << 20,
            123_456_789,
            MAX_LEASE,
            2 * MAX_LEASE + 1,
        ];
        for v in [0, 1, 2, 100, 32_767].into_iter().chain(big) {
            let view = View::new(v.max(1), v, MAX_INDEX - 1);
            let (wm, deficit) = (view.watermark(), view.deficit());
            assert_eq!(view.index(), MAX_INDEX - 1);
            if v < 1 << 15 {
                assert_eq!((wm, deficit), (v.max(1), v));
            } else {
                // Both round up: renew early, report a little less remaining.
                assert!(wm >= v && wm - v <= v >> 14, "{v} -> {wm}");
                assert!(deficit >= v && deficit - v <= v >> 14, "{v} -> {deficit}");
            }
        }
        let huge = View::new(1, u64::MAX, 0);
        assert_eq!(huge.deficit(), SMALL_FLOAT_MAX);
        assert_eq!((huge.watermark(), huge.index()), (1, 0));
        assert_eq!(
            View::new(SMALL_FLOAT_MAX, 0, 7).watermark(),
            SMALL_FLOAT_MAX
        );
    }

    #[test]
    fn take_never_goes_below_zero_and_watermark_is_a_fraction_of_the_last_lease() {
        let (hot, cold) = parts(b"k");
        let b = Bucket::new(&hot, &cold);
        assert_eq!(hot.take(HIT), None);
        b.finish_lease(LeaseResult::Granted, 10, Some((7, 0)));
        assert_eq!(hot.take(HIT), Some(9));
        assert!(!hot.below_watermark(3));
        assert!(hot.below_watermark(2));
        assert_eq!(hot.ledger_deficit(), 7);
        assert_eq!(hot.drain(), 9);
        assert_eq!(hot.take(HIT), None);
        assert_eq!(hot.hits(), 1, "a failed take counts nothing");
    }

    #[test]
    fn an_evicted_bucket_never_leases_and_a_busy_one_is_not_evicted() {
        let (hot, cold) = parts(b"k");
        let b = Bucket::new(&hot, &cold);
        let cold = b.cold();
        assert!(cold.claim_lease());
        assert!(!b.try_evict(0), "lease in flight");
        b.finish_lease(LeaseResult::Granted, 1, None);
        assert!(!b.try_evict(0), "holds a token");
        assert!(!cold.evicted());
        assert_eq!(hot.take(0), Some(0));
        cold.block_until(10);
        assert!(!b.try_evict(5), "blocked");
        assert!(!cold.evicted());
        assert!(b.try_evict(10));
        assert!(cold.evicted());
        assert!(!cold.claim_lease());
        assert!(!cold.lease_in_flight());
    }
}
