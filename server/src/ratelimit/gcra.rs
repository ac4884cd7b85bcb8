//! GCRA (the generic cell rate algorithm) behind CL.THROTTLE and GCRA, as pure
//! state transitions on the monotonic clock.
//!
//! The algorithm and its reply are those of redis-cell (`src/cell/mod.rs`,
//! <https://github.com/brandur/redis-cell>), which Redis 8.8's `GCRA` command
//! (`src/gcra.c`) follows: with emission interval `T = period / rate` and
//! delay variation tolerance `dvt = T * (max_burst + 1)`, a request of `q`
//! is allowed when `max(now, tat) + q * T - dvt <= now`, and then
//! `tat = max(now, tat) + q * T`. The state kept is that TAT less `dvt`: the
//! instant the equivalent bucket was empty ([`State`]), which reads the same
//! under any caller's parameters.
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

/// A stored GCRA state: the instant the equivalent bucket held no cell, and
/// the instant it is full again (32 bytes).
///
/// Under one policy this is redis-cell's theoretical arrival time (TAT)
/// shifted by the tolerance: `tat = empty + dvt`. Keeping the empty instant
/// instead makes the state mean the same to every caller, whatever its
/// parameters, as a token bucket's balance does: at `now` the key holds
/// `min(max_burst + 1, (now - empty) / T)` cells of the caller's `T`. A call
/// only ever moves `empty` later (it spends cells, or caps them at its own
/// limit), so no caller's call gives another caller a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// Whole ms of the empty instant, monotonic clock (rounded down; may be
    /// negative: a bucket with more cells than the clock has ms).
    pub empty_ms: i64,
    /// The rest, in `1 / units_per_ms` ms (`< units_per_ms`).
    pub frac: u64,
    /// The unit `frac` is counted in; another unit rescales it (rounded up,
    /// so a policy change never moves the instant earlier).
    pub units_per_ms: u64,
    /// Monotonic ms (rounded up) from which the bucket is full under the
    /// parameters of the call that stored it, or of an earlier writer with a
    /// longer tolerance (a call keeps the deadline that far after the new
    /// empty instant, within 1 ms): the key's deadline, since a missing key
    /// reads as a full bucket, so no writer's bucket is read full early.
    pub full_ms: u64,
}

impl State {
    /// The empty instant in units of `p`.
    fn units(&self, p: &Policy) -> i128 {
        let scale = p.units_per_ms as i128;
        let frac = if self.units_per_ms == p.units_per_ms {
            self.frac as i128
        } else {
            // Below `scale` (< 2^64) once divided; the product needs u128.
            (self.frac as u128 * p.units_per_ms as u128).div_ceil(self.units_per_ms as u128) as i128
        };
        self.empty_ms as i128 * scale + frac
    }

    /// The deadline a state emptied at `empty` (units of `p`) keeps from
    /// this one: the same tolerance after `empty` as this state's deadline
    /// after its own empty instant, less up to 1 ms of rounding (`full_ms`
    /// is rounded up), so under one policy it is never later than that
    /// policy's own deadline.
    fn full_after(&self, empty: i128, p: &Policy) -> u64 {
        let scale = p.units_per_ms as i128;
        let tolerance = self.full_ms as i128 * scale - self.units(p) - (scale - 1);
        let full = (empty + tolerance.max(0)).max(0) as u128;
        u64::try_from(full.div_ceil(p.units_per_ms as u128)).unwrap_or(u64::MAX)
    }

    /// The state whose empty instant is `empty` units of `p`, full `dvt`
    /// units later.
    fn from_units(empty: i128, p: &Policy, dvt: u128) -> State {
        let scale = p.units_per_ms as i128;
        let full = (empty + dvt as i128).max(0) as u128;
        let full_ms = u64::try_from(full.div_ceil(p.units_per_ms as u128)).unwrap_or(u64::MAX);
        State {
            empty_ms: empty
                .div_euclid(scale)
                .clamp(i64::MIN as i128, i64::MAX as i128) as i64,
            frac: empty.rem_euclid(scale) as u64,
            units_per_ms: p.units_per_ms,
            full_ms,
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
/// key, a full bucket) at monotonic `now`. Returns the reply and, when the
/// stored state must change, the new state with the monotonic ms its key
/// expires at (its `full_ms`).
///
/// `dvt` is [`Policy::dvt`] (the caller rejects policies without one).
///
/// The key holds `c = now - empty` units of cells, capped at `dvt` (the
/// bucket's capacity, `max_burst + 1` cells) and at least 0; a request of
/// `q` is allowed when `c >= q * T` and then spends `q * T`. Under one policy
/// this is redis-cell's rule exactly (`tat = empty + dvt`). Across policies
/// the cap is the token bucket's clamp to a smaller capacity: a call with a
/// smaller burst or a mistaken huge period (`CL.THROTTLE k 0 1 4000000000000`)
/// leaves an empty bucket that the next caller refills at its own rate,
/// never a debt of the old period, and a call with a smaller burst never
/// gives a caller with a larger one cells back. An empty instant after `now`
/// (a clock that stepped back) reads as empty now and is stored so.
pub fn throttle(
    prev: Option<State>,
    p: &Policy,
    dvt: u128,
    quantity: u64,
    now: u64,
) -> (Throttle, Option<(State, u64)>) {
    let now_u = now as i128 * p.units_per_ms as i128;
    let full = now_u - dvt as i128;
    let stored = prev.map(|s| s.units(p));
    let empty = stored.map_or(full, |e| e.clamp(full, now_u));
    // The key's deadline: full under this call's parameters, and never
    // before full under those of an earlier writer ([`State::full_ms`]).
    let store = |empty: i128| {
        let mut s = State::from_units(empty, p, dvt);
        if let Some(prev) = prev {
            s.full_ms = s.full_ms.max(prev.full_after(empty, p));
        }
        Some((s, s.full_ms))
    };
    let stepped_back = match stored {
        Some(e) if e > now_u => store(empty),
        _ => None,
    };
    let limit = p.max_burst + 1;
    let reply = |limited, retry_after_s, empty: i128| {
        // The cells held, in units: 0..=dvt.
        let held = (now_u - empty) as u128;
        Throttle {
            limited,
            limit,
            remaining: (held / p.interval) as u64,
            retry_after_s,
            reset_after_s: ceil_seconds(dvt - held, p),
        }
    };
    if quantity > limit {
        // More than the bucket holds full: refused, and retrying cannot help.
        return (reply(true, -1, empty), stepped_back);
    }
    // quantity <= max_burst + 1, so cost <= dvt < 2^126.
    let cost = p.interval * quantity as u128;
    let held = (now_u - empty) as u128;
    if held < cost {
        return (
            reply(true, ceil_seconds(cost - held, p), empty),
            stepped_back,
        );
    }
    let spent = empty + cost as i128;
    let allowed = reply(false, -1, spent);
    if quantity == 0 {
        return (allowed, stepped_back);
    }
    (allowed, store(spent))
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

/// The bucket equivalent to `state` at monotonic `at` under `p` (which has a
/// [`bucket_policy`]): `min(dvt, at - empty)` units, refilled at `at`;
/// `None` when that is the whole `dvt` (the bucket is full, as a missing key
/// reads). An empty instant after `at` reads as an empty bucket, as
/// [`throttle`] reads it.
pub fn to_bucket(state: State, p: &Policy, dvt: u128, at: u64) -> Option<Bucket> {
    let held = (at as i128 * p.units_per_ms as i128 - state.units(p)).max(0) as u128;
    if held >= dvt {
        return None;
    }
    Some(Bucket {
        tokens: (held / p.interval) as u64,
        frac: (held % p.interval) as u64,
        period_ms: p.interval as u64,
        refilled_at: at,
    })
}

/// The state equivalent to bucket `b` (kept in `p`'s [`bucket_policy`]) and
/// the monotonic ms its key expires at, as [`throttle`] stores them: the
/// bucket was empty `balance` units before `refilled_at`.
pub fn from_bucket(b: Bucket, p: &Policy, dvt: u128) -> (State, u64) {
    let held = (b.tokens as u128 * p.interval + b.frac as u128).min(dvt);
    let empty = b.refilled_at as i128 * p.units_per_ms as i128 - held as i128;
    let s = State::from_units(empty, p, dvt);
    (s, s.full_ms)
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
    fn expiry_is_when_full_and_peeks_store_nothing() {
        // 3 cells, one per 3 s: two spent at 0.5 s leave one cell, as if
        // the bucket had been empty since -2.5 s; full again at 6.5 s.
        let p = cell_policy(2, 1, 3);
        let dvt = p.dvt().unwrap();
        let (_, Some((state, expire))) = throttle(None, &p, dvt, 2, 500) else {
            panic!()
        };
        assert_eq!((state.empty_ms, state.full_ms, expire), (-2500, 6500, 6500));
        let (peek, change) = throttle(Some(state), &p, dvt, 0, 600);
        assert_eq!((peek.to_array(), change), ([0, 3, 1, -1, 6], None));
        assert_eq!(throttle(None, &p, dvt, 0, 0).0.to_array(), [0, 3, 3, -1, 0]);
    }

    #[test]
    fn a_clock_stepped_back_reads_as_an_empty_bucket() {
        // The burst of 2 used at 10 s (empty since 10 s); the clock reads 0
        // next: the bucket reads empty as of 0 (and is stored so), so the key
        // is limited for one interval of the clock it now reads, then admits
        // its rate again.
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
    fn a_new_unit_moves_the_instant_never_earlier() {
        let t = State {
            empty_ms: 10,
            frac: 1,
            units_per_ms: 3,
            full_ms: 11,
        };
        let p = Policy {
            units_per_ms: 2,
            interval: 1,
            max_burst: 0,
        };
        assert_eq!(t.units(&p), 21);
    }

    #[test]
    fn a_huge_period_leaves_an_empty_bucket_not_a_debt() {
        // CL.THROTTLE gl 0 1 4000000000000, then CL.THROTTLE gl 15 30 60.
        let huge = cell_policy(0, 1, 4_000_000_000_000);
        let (first, change) = throttle(None, &huge, huge.dvt().unwrap(), 1, 1000);
        assert_eq!(first.to_array(), [0, 1, 0, -1, 4_000_000_000_000]);
        let (stored, expire) = change.unwrap();
        assert_eq!(
            (stored.empty_ms, expire),
            (1000, 1000 + 4_000_000_000_000_000)
        );
        let normal = cell_policy(15, 30, 60);
        let dvt = normal.dvt().unwrap();
        // T = 2 s, dvt = 32 s: empty at 1 s, so one cell at 3 s, not 4e12 s.
        let (r, moved) = throttle(Some(stored), &normal, dvt, 1, 1000);
        assert_eq!((r.to_array(), moved), ([1, 16, 0, 2, 32], None));
        let (r, moved) = throttle(Some(stored), &normal, dvt, 1, 3000);
        assert_eq!(r.to_array(), [0, 16, 0, -1, 32]);
        // The key itself lives until the huge policy's bucket would be full
        // again (its writer's tolerance after the new empty instant).
        assert_eq!(moved.unwrap().1, 3000 + 4_000_000_000_000_000);
    }

    #[test]
    fn a_smaller_burst_never_shortens_the_deadline_of_a_larger_ones_bucket() {
        // Burst 9 spends its 10 cells (one a second); burst 0 then takes the
        // one cell refilled. The key must outlive the burst-9 bucket's refill
        // (10 s after the new empty instant), or burst 9 would read a
        // missing key, a full bucket, 1.1 s later.
        let (a, b) = (cell_policy(9, 1, 1), cell_policy(0, 1, 1));
        let (da, db) = (a.dvt().unwrap(), b.dvt().unwrap());
        let (_, first) = throttle(None, &a, da, 10, 10_000);
        let (s, expire) = first.unwrap();
        assert_eq!(expire, 20_000);
        let (r, second) = throttle(Some(s), &b, db, 1, 11_050);
        assert!(!r.limited);
        let (s, expire) = second.unwrap();
        assert_eq!(s.empty_ms, 11_050);
        assert_eq!(expire, 21_050, "the burst-9 deadline after the new instant");
        let (r, _) = throttle(Some(s), &a, da, 10, 12_150);
        assert_eq!(r.to_array(), [1, 10, 1, 9, 9]);
        // Burst 0 alone afterwards still keeps burst 9's 10 s.
        let (r, again) = throttle(Some(s), &b, db, 1, 12_050);
        assert!(!r.limited);
        assert_eq!(again.unwrap().1, 22_050);
    }

    #[test]
    fn another_unit_near_2_64_overflows_nothing() {
        let stored = State {
            empty_ms: 1000,
            frac: u64::MAX - 1,
            units_per_ms: u64::MAX,
            full_ms: 61_000,
        };
        let p = gcra_policy(0, u64::MAX / 1000, 1).unwrap();
        let (r, _) = throttle(Some(stored), &p, p.dvt().unwrap(), 1, 2000);
        assert!(!r.limited);
    }

    #[test]
    fn a_smaller_burst_never_gives_a_larger_one_cells_back() {
        // Two callers share `z`: burst 9 (10 cells) and burst 0 (1 cell),
        // one cell per hour each. The second's peeks and refused calls in
        // between give the first nothing: 10 cells in the same instant.
        let (a, b) = (cell_policy(9, 1, 3600), cell_policy(0, 1, 3600));
        let (da, db) = (a.dvt().unwrap(), b.dvt().unwrap());
        let mut state = None;
        let mut admitted = 0;
        for i in 0..60u64 {
            let (p, dvt, q) = match i % 3 {
                0 => (&b, db, i % 2),
                _ => (&a, da, 1),
            };
            let q = if p == &b && admitted < 10 { 0 } else { q };
            let (r, change) = throttle(state, p, dvt, q, 5000);
            if let Some((s, _)) = change {
                state = Some(s);
            }
            if !r.limited && q > 0 {
                admitted += 1;
            }
        }
        // 10 cells in all; then nothing, for either.
        assert_eq!(admitted, 10);
        assert!(throttle(state, &a, da, 1, 5000).0.limited);
        assert!(throttle(state, &b, db, 1, 5000).0.limited);
        // One hour later: one cell, for whichever asks first.
        let hour = 5000 + 3_600_000;
        let (r, change) = throttle(state, &b, db, 1, hour);
        assert!(!r.limited);
        assert!(throttle(change.map(|c| c.0), &a, da, 1, hour).0.limited);
    }

    #[test]
    fn the_clamp_changes_nothing_under_one_policy() {
        // 200 calls a few ms apart on one policy: the clamped run equals
        // redis-cell's rule applied by hand.
        let p = cell_policy(3, 10, 1);
        let dvt = p.dvt().unwrap();
        let (mut state, mut by_hand): (Option<State>, u128) = (None, 0);
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
            let (mut tat, mut bucket, mut now) = (None::<State>, None::<Bucket>, 1000u64);
            for (step, q) in calls {
                now += step;
                let (want, change) = throttle(tat, &p, dvt, q, now);
                if let Some((t, expire)) = change {
                    tat = Some(t);
                    prop_assert_eq!(expire, t.full_ms);
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
        // Full at 4 s with 32 s of tolerance (empty since -28 s): at 1 s,
        // 29 s of cells, 14.5 cells.
        let p = cell_policy(15, 30, 60);
        let tat = State {
            empty_ms: -28_000,
            frac: 0,
            units_per_ms: 30,
            full_ms: 4000,
        };
        let b = to_bucket(tat, &p, p.dvt().unwrap(), 1000).unwrap();
        assert_eq!((b.tokens, b.frac, b.refilled_at), (14, 30_000, 1000));
        assert_eq!(to_bucket(tat, &p, p.dvt().unwrap(), 4000), None);
    }
}
