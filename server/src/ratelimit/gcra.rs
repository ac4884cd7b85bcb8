//! GCRA (the generic cell rate algorithm) behind CL.THROTTLE and GCRA, as pure
//! state transitions on the monotonic clock.
//!
//! The algorithm and its reply are those of redis-cell (`src/cell/mod.rs`,
//! <https://github.com/brandur/redis-cell>), which Redis 8.8's `GCRA` command
//! (`src/gcra.c`) follows: with emission interval `T = period / rate` and
//! delay variation tolerance `dvt = T * (max_burst + 1)`, a request of `q`
//! is allowed when `max(now, tat) + q * T - dvt <= now`, and then
//! `tat = max(now, tat) + q * T`.
//!
//! # Exact arithmetic
//! Time is counted in units of `1 / units_per_ms` ms, chosen per command so
//! that `T` is a whole number of units (CL.THROTTLE: `units_per_ms = rate`,
//! `T = period_s * 1000`; GCRA: `units_per_ms = rate * 1000` and `T` = the
//! period in microseconds). redis-cell truncates `T` to whole nanoseconds and
//! divides floats for `remaining`; here nothing is rounded until the reply,
//! where times round up to whole seconds as redis-cell's reply does.

use super::token_bucket::{self, Bucket, Change, Lease};

/// The parameters of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Time units per ms (`>= 1`).
    pub units_per_ms: u64,
    /// The emission interval `T`, in units (`>= 1`).
    pub interval: u128,
    /// `max_burst` (`>= 0`); the limit is `max_burst + 1`.
    pub max_burst: u64,
}

/// The longest delay variation tolerance accepted, ms (about 146 million
/// years); it keeps every sum of times below `2^128` units.
pub const MAX_SPAN_MS: u128 = 1 << 62;

impl Policy {
    /// The delay variation tolerance `T * (max_burst + 1)`, in units, or
    /// `None` when it exceeds [`MAX_SPAN_MS`].
    pub fn dvt(&self) -> Option<u128> {
        let dvt = self.interval.checked_mul(self.max_burst as u128 + 1)?;
        (dvt / self.units_per_ms as u128 <= MAX_SPAN_MS).then_some(dvt)
    }
}

/// A stored theoretical arrival time (TAT): 24 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tat {
    /// Whole ms of the TAT, monotonic clock.
    pub ms: u64,
    /// The rest, in `1 / units_per_ms` ms (`< units_per_ms`).
    pub frac: u64,
    /// The unit `frac` is counted in; another unit rescales it (rounded up,
    /// so a policy change never moves the TAT earlier).
    pub units_per_ms: u64,
}

impl Tat {
    /// The TAT in units of `p`.
    fn units(&self, p: &Policy) -> u128 {
        let scale = p.units_per_ms as u128;
        let frac = if self.units_per_ms == p.units_per_ms {
            self.frac as u128
        } else {
            (self.frac as u128 * scale).div_ceil(self.units_per_ms as u128)
        };
        self.ms as u128 * scale + frac
    }

    fn from_units(units: u128, p: &Policy) -> Tat {
        let scale = p.units_per_ms as u128;
        Tat {
            ms: u64::try_from(units / scale).unwrap_or(u64::MAX),
            frac: (units % scale) as u64,
            units_per_ms: p.units_per_ms,
        }
    }
}

/// The reply of CL.THROTTLE and GCRA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    /// Whether the request was refused.
    pub limited: bool,
    /// `max_burst + 1`.
    pub limit: u64,
    /// Requests that would be allowed right now.
    pub remaining: u64,
    /// Seconds until the request would be allowed (rounded up), -1 when
    /// allowed or when it can never be (quantity above the limit).
    pub retry_after_s: i64,
    /// Seconds until the limiter is back to its full burst (rounded up).
    pub reset_after_s: i64,
}

impl Throttle {
    /// The reply as the five integers of the wire format.
    pub fn to_array(self) -> [i64; 5] {
        let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        [
            self.limited as i64,
            i(self.limit),
            i(self.remaining),
            self.retry_after_s,
            self.reset_after_s,
        ]
    }
}

fn ceil_seconds(units: u128, p: &Policy) -> i64 {
    i64::try_from(units.div_ceil(p.units_per_ms as u128 * 1000)).unwrap_or(i64::MAX)
}

/// Applies a request of `quantity` (0 = peek) to `prev` (None for a missing
/// key) at monotonic `now`. Returns the reply and, when the stored TAT must
/// change, the new TAT with the monotonic ms (rounded up) its key expires at.
///
/// `dvt` is [`Policy::dvt`] (the caller rejects policies without one).
///
/// Under one policy the TAT is never more than `dvt` ahead of now (an
/// allowed request keeps it there and time only moves on). A stored TAT
/// further ahead, left by a call with other parameters (or by a clock that
/// stepped back), is brought back to `now + dvt` and that is stored, as a
/// token bucket's balance is clamped to a smaller capacity: the key is then
/// limited for one more emission interval, never for the old period (a
/// mistaken `CL.THROTTLE k 0 1 4000000000000` would otherwise stall it for
/// 4e12 s). redis-cell does not clamp; under unchanged parameters the two
/// agree.
pub fn throttle(
    prev: Option<Tat>,
    p: &Policy,
    dvt: u128,
    quantity: u64,
    now: u64,
) -> (Throttle, Option<(Tat, u64)>) {
    let now_u = now as u128 * p.units_per_ms as u128;
    let stored = prev.map_or(now_u, |t| t.units(p));
    let tat = stored.clamp(now_u, now_u + dvt);
    let store = |tat: u128| {
        let expire = u64::try_from(tat.div_ceil(p.units_per_ms as u128)).unwrap_or(u64::MAX);
        Some((Tat::from_units(tat, p), expire))
    };
    let clamped = if stored > tat { store(tat) } else { None };
    let limit = p.max_burst + 1;
    let reply = |limited, retry_after_s, ttl: u128| {
        // remaining = floor((dvt - ttl) / T), 0 when negative (redis-cell).
        let remaining = (dvt.saturating_sub(ttl) / p.interval) as u64;
        Throttle {
            limited,
            limit,
            remaining,
            retry_after_s,
            reset_after_s: ceil_seconds(ttl, p),
        }
    };
    if quantity > limit {
        // increment > dvt: refused, and retrying cannot help.
        return (reply(true, -1, tat - now_u), clamped);
    }
    // quantity <= max_burst + 1, so increment <= dvt < 2^126.
    let new_tat = tat + p.interval * quantity as u128;
    if new_tat > now_u + dvt {
        return (
            reply(true, ceil_seconds(new_tat - dvt - now_u, p), tat - now_u),
            clamped,
        );
    }
    let allowed = reply(false, -1, new_tat - now_u);
    if quantity == 0 {
        return (allowed, clamped);
    }
    (allowed, store(new_tat))
}

/// The policy of `CL.THROTTLE key max_burst count_per_period period_s`.
pub fn cell_policy(max_burst: u64, count_per_period: u64, period_s: u64) -> Policy {
    Policy {
        units_per_ms: count_per_period,
        interval: period_s as u128 * 1000,
        max_burst,
    }
}

/// The policy of `GCRA key max_burst tokens_per_period period` with the period
/// in whole microseconds; `None` when `tokens_per_period * 1000` leaves `u64`.
pub fn gcra_policy(max_burst: u64, tokens_per_period: u64, period_us: u64) -> Option<Policy> {
    Some(Policy {
        units_per_ms: tokens_per_period.checked_mul(1000)?,
        interval: period_us as u128,
        max_burst,
    })
}

/// The token bucket equivalent to the GCRA policy `p`, or `None` when one
/// of its numbers leaves the bucket's `1..=i64::MAX` (such a key is never
/// split). GCRA's virtual scheduling and the continuous-state leaky bucket
/// are one algorithm (ITU-T I.371, Annex A; the two flowcharts admit the
/// same cells): a bucket of `max_burst + 1` cells, refilled by one cell per
/// emission interval `T`. In a bucket's terms: `capacity = max_burst + 1`,
/// `rate = units_per_ms` cells per `period_ms = T` ms, so its unit
/// (`1 / period_ms` cell) is exactly one GCRA time unit and a TAT `d` units
/// ahead of now is a balance of `dvt - d` units ([`to_bucket`]).
pub fn bucket_policy(p: &Policy) -> Option<token_bucket::Policy> {
    let max = i64::MAX as u64;
    let fits = |v: u64| (1..=max).contains(&v).then_some(v);
    Some(token_bucket::Policy {
        capacity: fits(p.max_burst.checked_add(1)?)?,
        rate: fits(p.units_per_ms)?,
        period_ms: fits(u64::try_from(p.interval).ok()?)?,
    })
}

/// The bucket equivalent to `tat` at monotonic `at` under `p` (which has a
/// [`bucket_policy`]): `dvt - (tat - at)` units, refilled at `at`; `None`
/// when the TAT is not after `at` (the bucket is full, as a missing key
/// reads). A TAT more than `dvt` ahead reads as an empty bucket, as
/// [`throttle`] clamps it; [`from_bucket`] then gives back another TAT.
pub fn to_bucket(tat: Tat, p: &Policy, dvt: u128, at: u64) -> Option<Bucket> {
    let debt = tat
        .units(p)
        .checked_sub(at as u128 * p.units_per_ms as u128)?;
    if debt == 0 {
        return None;
    }
    let units = dvt - debt.min(dvt);
    Some(Bucket {
        tokens: (units / p.interval) as u64,
        frac: (units % p.interval) as u64,
        period_ms: p.interval as u64,
        refilled_at: at,
    })
}

/// The TAT equivalent to bucket `b` (kept in `p`'s [`bucket_policy`]) and the
/// monotonic ms its key expires at, as [`throttle`] stores them: the TAT is
/// `refilled_at + (dvt - balance)` units, the instant the bucket is full.
pub fn from_bucket(b: Bucket, p: &Policy, dvt: u128) -> (Tat, u64) {
    let units = (b.tokens as u128 * p.interval + b.frac as u128).min(dvt);
    let tat = b.refilled_at as u128 * p.units_per_ms as u128 + (dvt - units);
    let expire = u64::try_from(tat.div_ceil(p.units_per_ms as u128)).unwrap_or(u64::MAX);
    (Tat::from_units(tat, p), expire)
}

/// The CL.THROTTLE / GCRA reply of a request of `quantity` cells that the
/// equivalent bucket answered with `lease` (a TOKENLEASE of `quantity`,
/// all or nothing). Equal to [`throttle`]'s: the request is allowed exactly
/// when the bucket holds `quantity` whole cells, `remaining` is the whole
/// cells left, and the times are the bucket's ms rounded up to seconds
/// (`ceil(ceil(x / u) / 1000) = ceil(x / (1000 u))`).
pub fn reply_of(p: &Policy, quantity: u64, lease: &Lease) -> Throttle {
    let seconds = |ms: i64| match u64::try_from(ms) {
        Ok(ms) => i64::try_from(ms.div_ceil(1000)).unwrap_or(i64::MAX),
        Err(_) => -1,
    };
    let limited = quantity > 0 && lease.granted == 0;
    Throttle {
        limited,
        limit: p.max_burst + 1,
        remaining: lease.remaining,
        retry_after_s: if limited {
            seconds(lease.retry_after_ms)
        } else {
            -1
        },
        reset_after_s: seconds(lease.reset_after_ms),
    }
}

/// [`throttle`] run on the equivalent bucket `prev` (`None`: full) under
/// `p`'s [`bucket_policy`] `bp`: the same reply, and the bucket's change.
pub fn throttle_bucket(
    prev: Option<Bucket>,
    p: &Policy,
    bp: &token_bucket::Policy,
    quantity: u64,
    now: u64,
) -> (Throttle, Change) {
    let (lease, change) = token_bucket::lease(prev, bp, quantity, quantity, now);
    (reply_of(p, quantity, &lease), change)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(p: Policy, calls: &[(u64, u64)]) -> Vec<[i64; 5]> {
        let dvt = p.dvt().unwrap();
        let mut state = None;
        calls
            .iter()
            .map(|&(now, q)| {
                let (r, change) = throttle(state, &p, dvt, q, now);
                if let Some((t, _)) = change {
                    state = Some(t);
                }
                r.to_array()
            })
            .collect()
    }

    #[test]
    fn g1_redis_cell_compatibility() {
        assert_eq!(
            run(cell_policy(15, 30, 60), &[(1000, 1)]),
            vec![[0, 16, 15, -1, 2]]
        );
        assert_eq!(
            run(cell_policy(0, 1, 2), &[(1000, 1), (1000, 1)]),
            vec![[0, 1, 0, -1, 2], [1, 1, 0, 2, 2]]
        );
    }

    /// redis-cell's own table (`it_rate_limits` in src/cell/mod.rs): limit 5,
    /// 1 per second; its durations in ms here are whole seconds rounded up.
    #[test]
    fn redis_cell_rate_limit_table() {
        let p = cell_policy(4, 1, 1);
        let s = 1_000_000;
        let calls = [
            (s, 6),
            (s, 1),
            (s, 1),
            (s, 1),
            (s, 1),
            (s, 1),
            (s, 1),
            (s + 3000, 1),
            (s + 3100, 1),
            (s + 4000, 1),
            (s + 8000, 1),
            (s + 9500, 1),
            (s + 9500, 0),
            (s + 9500, 2),
            (s + 9500, 5),
        ];
        let expected = [
            [1, 5, 5, -1, 0],
            [0, 5, 4, -1, 1],
            [0, 5, 3, -1, 2],
            [0, 5, 2, -1, 3],
            [0, 5, 1, -1, 4],
            [0, 5, 0, -1, 5],
            [1, 5, 0, 1, 5],
            [0, 5, 2, -1, 3],
            [0, 5, 1, -1, 4],
            [0, 5, 1, -1, 4],
            [0, 5, 4, -1, 1],
            [0, 5, 4, -1, 1],
            [0, 5, 4, -1, 1],
            [0, 5, 2, -1, 3],
            [1, 5, 2, 3, 3],
        ];
        assert_eq!(run(p, &calls), expected.to_vec());
    }

    #[test]
    fn fractional_periods_are_exact() {
        // 3 tokens per 0.1 s: one every 33.33... ms, never rounded.
        let p = gcra_policy(0, 3, 100_000).unwrap();
        let r = run(p, &[(0, 1), (33, 1), (34, 1), (67, 1), (68, 1)]);
        assert_eq!(
            r.iter().map(|v| v[0]).collect::<Vec<_>>(),
            vec![0, 1, 0, 1, 0]
        );
    }

    #[test]
    fn expiry_is_at_the_tat_and_peeks_store_nothing() {
        let p = cell_policy(2, 1, 3);
        let dvt = p.dvt().unwrap();
        let (_, Some((tat, expire))) = throttle(None, &p, dvt, 2, 500) else {
            panic!()
        };
        assert_eq!((tat.ms, expire), (6500, 6500));
        let (peek, change) = throttle(Some(tat), &p, dvt, 0, 600);
        assert_eq!((peek.to_array(), change), ([0, 3, 1, -1, 6], None));
        assert_eq!(throttle(None, &p, dvt, 0, 0).0.to_array(), [0, 3, 3, -1, 0]);
    }

    #[test]
    fn a_clock_stepped_back_forgives_only_debt_beyond_the_tolerance() {
        // The burst of 2 used at 10 s; the clock reads 0 next: the TAT (12 s)
        // is brought back to 0 + dvt (2 s), so the key is limited for one
        // interval of the clock it now reads, then admits its rate again.
        let p = cell_policy(1, 1, 1);
        let r = run(p, &[(10_000, 2), (0, 1), (999, 1), (1000, 1), (1001, 1)]);
        assert_eq!(
            r,
            vec![
                [0, 2, 0, -1, 2],
                [1, 2, 0, 1, 2],
                [1, 2, 0, 1, 2],
                [0, 2, 0, -1, 2],
                [1, 2, 0, 1, 2]
            ]
        );
    }

    #[test]
    fn huge_parameters_overflow_nothing() {
        assert_eq!(cell_policy(i64::MAX as u64, 1, i64::MAX as u64).dvt(), None);
        let p = cell_policy(1 << 20, i64::MAX as u64, 1);
        let r = run(p, &[(u64::MAX / 2, i64::MAX as u64), (u64::MAX, 1)]);
        assert_eq!(r[0], [1, (1 << 20) + 1, (1 << 20) + 1, -1, 0]);
        assert_eq!(r[1][0], 0);
        assert!(gcra_policy(0, u64::MAX / 999, 1).is_none());
    }

    #[test]
    fn a_new_unit_moves_the_tat_never_earlier() {
        let t = Tat {
            ms: 10,
            frac: 1,
            units_per_ms: 3,
        };
        let p = Policy {
            units_per_ms: 2,
            interval: 1,
            max_burst: 0,
        };
        assert_eq!(t.units(&p), 21);
    }

    #[test]
    fn a_tat_left_by_a_huge_period_is_clamped_to_the_current_tolerance() {
        // CL.THROTTLE gl 0 1 4000000000000, then CL.THROTTLE gl 15 30 60.
        let huge = cell_policy(0, 1, 4_000_000_000_000);
        let (first, change) = throttle(None, &huge, huge.dvt().unwrap(), 1, 1000);
        assert_eq!(first.to_array(), [0, 1, 0, -1, 4_000_000_000_000]);
        let stored = change.unwrap().0;
        let normal = cell_policy(15, 30, 60);
        let dvt = normal.dvt().unwrap();
        // T = 2 s, dvt = 32 s: limited for one interval, not for 4e12 s.
        let (r, moved) = throttle(Some(stored), &normal, dvt, 1, 1000);
        assert_eq!(r.to_array(), [1, 16, 0, 2, 32]);
        let (clamped, expire) = moved.unwrap();
        assert_eq!(expire, 1000 + 32_000);
        let (r, moved) = throttle(Some(clamped), &normal, dvt, 1, 3000);
        assert_eq!(r.to_array(), [0, 16, 0, -1, 32]);
        assert_eq!(moved.unwrap().1, 3000 + 32_000);
    }

    #[test]
    fn the_clamp_changes_nothing_under_one_policy() {
        // 200 calls a few ms apart on one policy: the clamped run equals
        // redis-cell's rule applied by hand.
        let p = cell_policy(3, 10, 1);
        let dvt = p.dvt().unwrap();
        let (mut state, mut by_hand): (Option<Tat>, u128) = (None, 0);
        for i in 0..200u64 {
            let now = 1000 + i * 37;
            let now_u = now as u128 * p.units_per_ms as u128;
            let tat = by_hand.max(now_u);
            let allowed = tat + p.interval <= now_u + dvt;
            let (r, change) = throttle(state, &p, dvt, 1, now);
            assert_eq!(r.limited, !allowed, "call {i}");
            if allowed {
                by_hand = tat + p.interval;
                state = Some(change.unwrap().0);
            }
        }
    }

    /// The bucket form answers every call as the TAT form, and the two
    /// states convert into each other exactly, at any instant.
    #[test]
    fn the_equivalent_bucket_answers_as_the_tat() {
        use proptest::prelude::*;
        let calls = proptest::collection::vec((0..700u64, 0..5u64), 1..60);
        let policies = prop_oneof![
            (0..6u64, 1..4u64, 1..3u64).prop_map(|(b, n, s)| cell_policy(b, n, s)),
            (0..6u64, 1..4u64, 1..300_000u64).prop_map(|(b, n, us)| gcra_policy(b, n, us).unwrap()),
        ];
        proptest!(ProptestConfig::with_cases(500), |(p in policies, calls in calls)| {
            let bp = bucket_policy(&p).unwrap();
            let dvt = p.dvt().unwrap();
            let (mut tat, mut bucket, mut now) = (None::<Tat>, None::<Bucket>, 1000u64);
            for (step, q) in calls {
                now += step;
                let (want, change) = throttle(tat, &p, dvt, q, now);
                if let Some((t, expire)) = change {
                    tat = Some(t);
                    prop_assert_eq!(expire, t.ms + u64::from(t.frac > 0));
                }
                let (got, change) = throttle_bucket(bucket, &p, &bp, q, now);
                prop_assert_eq!(got, want);
                match change {
                    Change::None => {}
                    Change::Store(b, full_at) => {
                        bucket = Some(b);
                        prop_assert_eq!(from_bucket(b, &p, dvt), (tat.unwrap(), full_at));
                    }
                    Change::Remove => bucket = None,
                }
                // The TAT read as a bucket now is the bucket refilled to now.
                let refilled = bucket.map(|b| b.refill(&bp, now)).filter(|b| b.tokens < bp.capacity || b.frac > 0);
                let from_tat = tat.and_then(|t| to_bucket(t, &p, dvt, now));
                prop_assert_eq!(from_tat, refilled);
                if let Some(b) = from_tat {
                    prop_assert_eq!(from_bucket(b, &p, dvt).0, tat.unwrap());
                }
            }
        });
    }

    #[test]
    fn the_equivalent_bucket_of_a_policy() {
        // CL.THROTTLE k 15 30 60: 16 cells, one per 2 s.
        let bp = bucket_policy(&cell_policy(15, 30, 60)).unwrap();
        assert_eq!((bp.capacity, bp.rate, bp.period_ms), (16, 30, 60_000));
        assert_eq!(bucket_policy(&cell_policy(i64::MAX as u64, 1, 1)), None);
        assert_eq!(
            bucket_policy(&gcra_policy(0, u64::MAX / 1000, 1).unwrap()),
            None
        );
        // A TAT 3 s ahead with 32 s of tolerance: 29 s of cells, 14.5 cells.
        let p = cell_policy(15, 30, 60);
        let tat = Tat {
            ms: 4000,
            frac: 0,
            units_per_ms: 30,
        };
        let b = to_bucket(tat, &p, p.dvt().unwrap(), 1000).unwrap();
        assert_eq!((b.tokens, b.frac, b.refilled_at), (14, 30_000, 1000));
        assert_eq!(to_bucket(tat, &p, p.dvt().unwrap(), 4000), None);
    }
}
