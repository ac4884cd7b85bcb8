//! The token bucket behind TOKENLEASE and TOKENRETURN, as pure state
//! transitions on the monotonic clock (no store, no I/O).
//!
//! # Exact arithmetic
//! A balance is kept in units of `1/period_ms` token, so refilling for `e`
//! milliseconds at `rate` tokens per `period_ms` adds exactly `e * rate` units:
//! no division, no rounding, no float, so no fraction of a token is ever
//! gained or lost (only a call with another period rescales the fraction,
//! rounded down; see [`Bucket::frac`]). Every product is
//! taken in `u128`: `tokens * period_ms < 2^126` and `elapsed * rate < 2^127`,
//! so even `u64::MAX` ms of idle time cannot overflow; the sum is clamped to
//! `capacity * period_ms` at once.
//!
//! # Time
//! The refill instant only moves forward: a call whose clock reads earlier
//! than the stored instant refills nothing and is answered as if it ran at
//! the stored instant, so a clock step back mints no token.

/// The parameters that travel with every call. All are in `1..=i64::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Most tokens the bucket holds.
    pub capacity: u64,
    /// Tokens added per `period_ms`.
    pub rate: u64,
    /// The refill period, ms.
    pub period_ms: u64,
}

impl Policy {
    fn cap_units(&self) -> u128 {
        self.capacity as u128 * self.period_ms as u128
    }

    /// Milliseconds until `units` more units have been refilled, rounded up.
    fn ms_for(&self, units: u128) -> u128 {
        units.div_ceil(self.rate as u128)
    }
}

/// A stored bucket: 32 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// Whole tokens at `refilled_at`.
    pub tokens: u64,
    /// The fraction of a token, in units of `1/period_ms` token (`< period_ms`).
    pub frac: u64,
    /// The period (ms) `frac` is counted in; when a call brings another
    /// period the fraction is rescaled (rounded down).
    pub period_ms: u64,
    /// When the balance was last brought up to date, monotonic ms.
    pub refilled_at: u64,
}

/// The reply of TOKENLEASE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Tokens granted: 0, or within `[min, requested]`.
    pub granted: u64,
    /// Whole tokens left after the grant.
    pub remaining: u64,
    /// 0 when granted; otherwise ms until `min` tokens are there (rounded
    /// up), or -1 when `min > capacity`.
    pub retry_after_ms: i64,
    /// Ms until the bucket is full again, rounded up.
    pub reset_after_ms: i64,
}

impl Lease {
    /// The reply as the four integers of the wire format.
    pub fn to_array(self) -> [i64; 4] {
        [
            to_i64(self.granted as u128),
            to_i64(self.remaining as u128),
            self.retry_after_ms,
            self.reset_after_ms,
        ]
    }
}

/// What a call does to the stored state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing (a peek, a denial, a missing key left missing).
    None,
    /// Store this bucket; it is full again at the given monotonic ms, which
    /// is when its key must expire.
    Store(Bucket, u64),
    /// The bucket is full: the same as a missing key, so drop it.
    Remove,
}

/// Clamps a count into the `i64` a RESP integer carries.
pub fn to_i64(v: u128) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Bucket {
    /// A full bucket, as a missing key reads.
    pub fn full(p: &Policy, now: u64) -> Bucket {
        Bucket {
            tokens: p.capacity,
            frac: 0,
            period_ms: p.period_ms,
            refilled_at: now,
        }
    }

    /// The balance in units of `1/p.period_ms` token (`frac` already in that period).
    fn units(&self, p: &Policy) -> u128 {
        self.tokens as u128 * p.period_ms as u128 + self.frac as u128
    }

    fn from_units(units: u128, p: &Policy, at: u64) -> Bucket {
        let period = p.period_ms as u128;
        // units <= capacity * period, so the quotient fits in u64.
        Bucket {
            tokens: (units / period) as u64,
            frac: (units % period) as u64,
            period_ms: p.period_ms,
            refilled_at: at,
        }
    }

    /// The bucket refilled up to `now` (monotonic ms) under policy `p`:
    /// fraction rescaled to `p.period_ms`, balance clamped into
    /// `[0, p.capacity]`, refill instant `max(now, refilled_at)`.
    pub fn refill(self, p: &Policy, now: u64) -> Bucket {
        let at = now.max(self.refilled_at);
        let frac = if self.period_ms == p.period_ms {
            self.frac as u128
        } else {
            self.frac as u128 * p.period_ms as u128 / self.period_ms as u128
        };
        let held = self.tokens as u128 * p.period_ms as u128 + frac;
        let added = (at - self.refilled_at) as u128 * p.rate as u128;
        Bucket::from_units(held.saturating_add(added).min(p.cap_units()), p, at)
    }

    /// Ms until this (refilled) bucket is full under `p`, rounded up.
    pub fn ms_to_full(&self, p: &Policy) -> u128 {
        p.ms_for(p.cap_units() - self.units(p))
    }

    /// The change that stores this (refilled) bucket under `p`: removed
    /// when full, otherwise kept until the instant it is full again.
    pub fn stored(self, p: &Policy) -> Change {
        match self.ms_to_full(p) {
            0 => Change::Remove,
            ms => Change::Store(
                self,
                u64::try_from(self.refilled_at as u128 + ms).unwrap_or(u64::MAX),
            ),
        }
    }
}

/// TOKENLEASE: asks `prev` (None for a missing key) for `requested` tokens,
/// accepting no fewer than `min` (`1 <= min <= requested`, or `min = 0` with
/// `requested = 0` for a peek), at monotonic `now`.
///
/// A grant takes `min(requested, whole tokens)` at once; anything else changes
/// nothing ([`Change::None`]).
pub fn lease(
    prev: Option<Bucket>,
    p: &Policy,
    requested: u64,
    min: u64,
    now: u64,
) -> (Lease, Change) {
    let b = prev.map_or_else(|| Bucket::full(p, now), |b| b.refill(p, now));
    let reset = to_i64(b.ms_to_full(p));
    let denied = |retry_after_ms| Lease {
        granted: 0,
        remaining: b.tokens,
        retry_after_ms,
        reset_after_ms: reset,
    };
    if requested == 0 {
        return (denied(0), Change::None);
    }
    if min > p.capacity {
        return (denied(-1), Change::None);
    }
    if b.tokens < min {
        let missing = min as u128 * p.period_ms as u128 - b.units(p);
        return (denied(to_i64(p.ms_for(missing))), Change::None);
    }
    let granted = requested.min(b.tokens);
    let after = Bucket {
        tokens: b.tokens - granted,
        ..b
    };
    let reply = Lease {
        granted,
        remaining: after.tokens,
        retry_after_ms: 0,
        reset_after_ms: to_i64(after.ms_to_full(p)),
    };
    (reply, after.stored(p))
}

/// TOKENRETURN: gives `count` tokens back to `prev` at monotonic `now`.
/// Returns the whole tokens held afterwards. A missing key stays missing (it
/// is already full) and reads `capacity`; a bucket that becomes full is
/// removed.
pub fn give_back(prev: Option<Bucket>, p: &Policy, count: u64, now: u64) -> (u64, Change) {
    let Some(b) = prev else {
        return (p.capacity, Change::None);
    };
    let b = b.refill(p, now);
    if count == 0 {
        return (b.tokens, Change::None);
    }
    let units = b
        .units(p)
        .saturating_add(count as u128 * p.period_ms as u128)
        .min(p.cap_units());
    let after = Bucket::from_units(units, p, b.refilled_at);
    (after.tokens, after.stored(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: u64 = 3_600_000;
    const CENTURY: u64 = 100 * 365 * 24 * HOUR + 25 * 24 * HOUR;

    /// Runs a sequence of `(now, requested, min)` calls on one key, applying
    /// each change like the store does, and returns the replies.
    fn run(p: Policy, calls: &[(u64, u64, u64)]) -> Vec<[i64; 4]> {
        let mut state = None;
        calls
            .iter()
            .map(|&(now, req, min)| {
                let (reply, change) = lease(state, &p, req, min, now);
                match change {
                    Change::None => {}
                    Change::Store(b, _) => state = Some(b),
                    Change::Remove => state = None,
                }
                reply.to_array()
            })
            .collect()
    }

    fn pol(capacity: u64, rate: u64, period_ms: u64) -> Policy {
        Policy {
            capacity,
            rate,
            period_ms,
        }
    }

    #[test]
    fn retry_after_rounds_up_and_is_honest() {
        let r = run(
            pol(1, 10, 1000),
            &[(0, 1, 1), (0, 1, 1), (99, 1, 1), (100, 1, 1)],
        );
        assert_eq!(
            r,
            vec![
                [1, 0, 0, 100],
                [0, 0, 100, 100],
                [0, 0, 1, 1],
                [1, 0, 0, 100]
            ]
        );
    }

    #[test]
    fn requests_at_and_above_capacity() {
        let r = run(
            pol(10, 1, 1000),
            &[(0, 10, 10), (0, 11, 11), (0, 10, 10), (0, 0, 0)],
        );
        assert_eq!(
            r,
            vec![
                [10, 0, 0, 10000],
                [0, 0, -1, 10000],
                [0, 0, 10000, 10000],
                [0, 0, 0, 10000]
            ]
        );
        let (peek, change) = lease(None, &pol(10, 1, 1000), 0, 0, 0);
        assert_eq!((peek.to_array(), change), ([0, 10, 0, 0], Change::None));
    }

    #[test]
    fn a_denial_consumes_nothing() {
        let r = run(
            pol(10, 1, 1000),
            &[
                (0, 8, 8),
                (0, 5, 5),
                (0, 2, 2),
                (0, 1_000_000, 1_000_000),
                (1000, 1, 1),
            ],
        );
        assert_eq!(
            r,
            vec![
                [8, 2, 0, 8000],
                [0, 2, 3000, 8000],
                [2, 0, 0, 10000],
                [0, 0, -1, 10000],
                [1, 0, 0, 10000]
            ]
        );
    }

    #[test]
    fn long_idle_is_exactly_full() {
        let p = pol(1_000_000, 1_000_000, 1000);
        let r = run(p, &[(0, 1_000_000, 1_000_000), (12 * HOUR, 1, 1)]);
        assert_eq!(r[1], [1, 999_999, 0, 1]);
        let r = run(p, &[(0, 1_000_000, 1_000_000), (CENTURY, 1, 1)]);
        assert_eq!(r[1], [1, 999_999, 0, 1]);
        // The largest parameters and the longest idle time overflow nothing.
        let max = i64::MAX as u64;
        let p = pol(max, max, max);
        let r = run(p, &[(0, max, max), (u64::MAX, max, max)]);
        assert_eq!(
            r,
            vec![[i64::MAX, 0, 0, i64::MAX], [i64::MAX, 0, 0, i64::MAX]]
        );
    }

    #[test]
    fn no_fraction_of_a_token_is_lost() {
        let mut calls = vec![(0, 5, 5)];
        calls.extend((1..=25).map(|i| (i * 400, 1, 1)));
        let r = run(pol(5, 1, 1000), &calls);
        let grants: Vec<u64> = calls
            .iter()
            .zip(&r)
            .skip(1)
            .filter(|(_, reply)| reply[0] == 1)
            .map(|(c, _)| c.0)
            .collect();
        assert_eq!(
            grants,
            vec![1200, 2000, 3200, 4000, 5200, 6000, 7200, 8000, 9200, 10000]
        );
    }

    #[test]
    fn the_clock_going_back_mints_nothing() {
        let r = run(
            pol(5, 1, 1000),
            &[(1_000_000, 1, 1), (989_000, 1, 1), (1_001_000, 1, 1)],
        );
        assert_eq!(r, vec![[1, 4, 0, 1000], [1, 3, 0, 2000], [1, 3, 0, 2000]]);
        // Back to 0 from 100 years: nothing refills, nothing panics.
        let r = run(pol(5, 1, 1000), &[(CENTURY, 5, 5), (0, 1, 1), (1, 0, 0)]);
        assert_eq!(
            r,
            vec![[5, 0, 0, 5000], [0, 0, 1000, 5000], [0, 0, 0, 5000]]
        );
    }

    #[test]
    fn changing_the_policy_clamps_at_once() {
        let mut state = None;
        let (a, c) = lease(state, &pol(1000, 1000, 1000), 1000, 1000, 0);
        assert_eq!(a.to_array(), [1000, 0, 0, 1000]);
        if let Change::Store(b, _) = c {
            state = Some(b);
        }
        let (b, _) = lease(state, &pol(10, 10, 1000), 1, 1, 0);
        assert_eq!(b.to_array(), [0, 0, 100, 1000]);

        let r = run(pol(1000, 1000, 1000), &[(0, 1, 1)]);
        assert_eq!(r, vec![[1, 999, 0, 1]]);
        let (_, Change::Store(j, full_at)) = lease(None, &pol(1000, 1000, 1000), 1, 1, 0) else {
            panic!()
        };
        assert_eq!(full_at, 1);
        let (peek, change) = lease(Some(j), &pol(10, 10, 1000), 0, 0, 0);
        assert_eq!((peek.to_array(), change), ([0, 10, 0, 0], Change::None));
    }

    #[test]
    fn a_new_period_rescales_the_fraction_down() {
        // 0.5 token at period 1000 is 250 units at period 500.
        let b = Bucket {
            tokens: 2,
            frac: 500,
            period_ms: 1000,
            refilled_at: 7,
        };
        assert_eq!(
            b.refill(&pol(10, 1, 500), 7),
            Bucket {
                tokens: 2,
                frac: 250,
                period_ms: 500,
                refilled_at: 7
            }
        );
        // 1/3 token at period 3 is 0 units at period 2 (rounded down, never up).
        let b = Bucket {
            tokens: 0,
            frac: 1,
            period_ms: 3,
            refilled_at: 0,
        };
        assert_eq!(b.refill(&pol(10, 1, 2), 0).frac, 0);
    }

    #[test]
    fn min_takes_what_is_there() {
        let p = pol(10, 1, 1000);
        let r = run(p, &[(0, 7, 7), (0, 5, 1), (0, 5, 1), (1500, 5, 2)]);
        assert_eq!(
            r,
            vec![
                [7, 3, 0, 7000],
                [3, 0, 0, 10000],
                [0, 0, 1000, 10000],
                [0, 1, 500, 8500]
            ]
        );
    }

    #[test]
    fn keys_expire_when_full_and_returns_clamp() {
        let p = pol(10, 1, 1000);
        let (_, Change::Store(b, full_at)) = lease(None, &p, 3, 3, 1000) else {
            panic!()
        };
        assert_eq!(full_at, 4000);
        assert_eq!(
            give_back(Some(b), &p, 1, 1500),
            (
                8,
                Change::Store(
                    Bucket {
                        tokens: 8,
                        frac: 500,
                        ..b.refill(&p, 1500)
                    },
                    3000
                )
            )
        );
        assert_eq!(give_back(Some(b), &p, 100, 1500), (10, Change::Remove));
        assert_eq!(give_back(Some(b), &p, 0, 2000), (8, Change::None));
        assert_eq!(give_back(None, &p, 5, 0), (10, Change::None));
    }
}
