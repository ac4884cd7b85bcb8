//! A reference model of the three algorithms, written for clarity rather than
//! speed, and proptests that compare each command's operation with it over
//! random call sequences and random clock steps (forward, zero, backward,
//! hours).
//!
//! The model keeps balances and times as exact fractions ([`Ratio`]) in
//! tokens and milliseconds, straight from the definitions, and finds every
//! "how long until" answer by searching for the first whole millisecond at
//! which the request would succeed, instead of by the closed forms the
//! implementation uses. Key expiry is checked as an invariant: when the
//! implementation's key would expire, the model must agree that the state is
//! worth nothing (a full bucket, an empty window, a TAT in the past), and both
//! then forget it.

use std::cmp::Ordering;

use proptest::prelude::*;

use super::{gcra, sliding_window, token_bucket};

/// An exact fraction `num / den` (`den > 0`, lowest terms).
#[derive(Debug, Clone, Copy)]
struct Ratio {
    num: i128,
    den: i128,
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

impl Ratio {
    fn new(num: i128, den: i128) -> Ratio {
        assert!(den > 0);
        let g = gcd(num, den).max(1);
        Ratio {
            num: num / g,
            den: den / g,
        }
    }
    fn int(n: i128) -> Ratio {
        Ratio::new(n, 1)
    }
    fn add(self, o: Ratio) -> Ratio {
        Ratio::new(self.num * o.den + o.num * self.den, self.den * o.den)
    }
    fn sub(self, o: Ratio) -> Ratio {
        self.add(Ratio::new(-o.num, o.den))
    }
    fn mul(self, o: Ratio) -> Ratio {
        Ratio::new(self.num * o.num, self.den * o.den)
    }
    fn floor(self) -> i128 {
        self.num.div_euclid(self.den)
    }
    fn ceil(self) -> i128 {
        -Ratio::new(-self.num, self.den).floor()
    }
    fn min(self, o: Ratio) -> Ratio {
        if self <= o {
            self
        } else {
            o
        }
    }
    fn max(self, o: Ratio) -> Ratio {
        if self >= o {
            self
        } else {
            o
        }
    }
}

impl PartialEq for Ratio {
    fn eq(&self, o: &Ratio) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Ratio {}
impl PartialOrd for Ratio {
    fn partial_cmp(&self, o: &Ratio) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ratio {
    fn cmp(&self, o: &Ratio) -> Ordering {
        (self.num * o.den).cmp(&(o.num * self.den))
    }
}

/// The first `t` in `0..=limit` with `ok(t)`, assuming `ok` is monotone.
fn first(limit: u64, ok: impl Fn(u64) -> bool) -> Option<u64> {
    if !ok(limit) {
        return None;
    }
    let (mut lo, mut hi) = (0, limit);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(lo)
}

// ---------------------------------------------------------------- token bucket

/// A bucket holding `tokens` (a fraction) as of `at` ms; it never looks back.
#[derive(Debug, Clone, Copy)]
struct ModelBucket {
    tokens: Ratio,
    at: u64,
}

impl ModelBucket {
    /// Tokens at time `t >= at`: what was there plus `rate / period` per ms,
    /// never more than the capacity.
    fn tokens_at(&self, p: &token_bucket::Policy, t: u64) -> Ratio {
        let refill = Ratio::new((t - self.at) as i128 * p.rate as i128, p.period_ms as i128);
        self.tokens.add(refill).min(Ratio::int(p.capacity as i128))
    }
}

fn model_lease(
    state: &mut Option<ModelBucket>,
    p: &token_bucket::Policy,
    requested: u64,
    min: u64,
    now: u64,
) -> [i64; 4] {
    let cap = Ratio::int(p.capacity as i128);
    let b = state.unwrap_or(ModelBucket {
        tokens: cap,
        at: now,
    });
    let t = now.max(b.at);
    let have = b.tokens_at(p, t);
    let horizon = p.capacity * p.period_ms / p.rate + 2;
    let reset = |b: ModelBucket| first(horizon, |w| b.tokens_at(p, t + w) == cap).unwrap() as i64;
    let whole = have.floor() as u64;
    if requested == 0 || min > p.capacity || whole < min {
        let retry = if requested == 0 {
            0
        } else if min > p.capacity {
            -1
        } else {
            let need = Ratio::int(min as i128);
            first(horizon, |w| b.tokens_at(p, t + w) >= need).unwrap() as i64
        };
        return [0, whole as i64, retry, reset(b)];
    }
    let granted = requested.min(whole);
    let after = ModelBucket {
        tokens: have.sub(Ratio::int(granted as i128)),
        at: t,
    };
    *state = Some(after);
    [granted as i64, after.tokens.floor() as i64, 0, reset(after)]
}

fn model_return(
    state: &mut Option<ModelBucket>,
    p: &token_bucket::Policy,
    n: u64,
    now: u64,
) -> i64 {
    let Some(b) = *state else {
        return p.capacity as i64;
    };
    let t = now.max(b.at);
    if n == 0 {
        // Giving nothing back is a read.
        return b.tokens_at(p, t).floor() as i64;
    }
    let cap = Ratio::int(p.capacity as i128);
    let after = ModelBucket {
        tokens: b.tokens_at(p, t).add(Ratio::int(n as i128)).min(cap),
        at: t,
    };
    *state = Some(after);
    after.tokens.floor() as i64
}

// -------------------------------------------------------------- sliding window

/// Admitted hits per window index (`t / window_ms`), kept for every window.
#[derive(Debug, Clone, Default)]
struct ModelWindow {
    hits: std::collections::BTreeMap<u64, u64>,
}

impl ModelWindow {
    fn latest_start(&self, w: u64) -> u64 {
        self.hits.keys().next_back().map_or(0, |i| i * w)
    }

    /// previous * (W - elapsed) / W + current, at time `t`.
    fn estimate(&self, w: u64, t: u64) -> Ratio {
        let i = t / w;
        let count = |i: u64| *self.hits.get(&i).unwrap_or(&0) as i128;
        let previous = if i == 0 { 0 } else { count(i - 1) };
        Ratio::new(previous * (w - t % w) as i128, w as i128).add(Ratio::int(count(i)))
    }
}

fn model_window(state: &mut ModelWindow, p: &sliding_window::Policy, n: u64, now: u64) -> [i64; 4] {
    let w = p.window_ms;
    let t = now.max(state.latest_start(w));
    let limit = Ratio::int(p.limit as i128);
    let fits = |s: &ModelWindow, at: u64| s.estimate(w, at).add(Ratio::int(n as i128)) <= limit;
    let reply = |s: &ModelWindow, admitted: u64, retry: i64| {
        let e = s.estimate(w, t);
        let remaining = limit.sub(e).max(Ratio::int(0)).floor();
        [admitted as i64, e.ceil() as i64, remaining as i64, retry]
    };
    if n == 0 {
        return reply(state, 0, 0);
    }
    if n > p.limit {
        return reply(state, 0, -1);
    }
    if !fits(state, t) {
        let wait = first(3 * w, |d| fits(state, t + d)).unwrap();
        return reply(state, 0, wait as i64);
    }
    *state.hits.entry(t / w).or_insert(0) += n;
    reply(state, n, 0)
}

// ------------------------------------------------------------------------ GCRA

/// The instant the bucket held no cell, in ms (a fraction).
#[derive(Debug, Clone, Copy)]
struct ModelEmpty(Ratio);

/// `CL.THROTTLE` as a bucket of `max_burst + 1` cells, one per
/// `T = period_s * 1000 / rate` ms, kept as the instant `e` it was empty:
/// at `now` it holds `(now - e) / T` cells, at most the limit (the cap,
/// stored when a call spends) and at least none (an `e` after now reads as
/// now, and is stored so). A request of `q` conforms when it holds `q` cells.
fn model_throttle(
    state: &mut Option<ModelEmpty>,
    burst: u64,
    rate: u64,
    period_s: u64,
    q: u64,
    now: u64,
) -> [i64; 5] {
    let t_ms = Ratio::new(period_s as i128 * 1000, rate as i128);
    let limit = burst + 1;
    let capacity = t_ms.mul(Ratio::int(limit as i128));
    let now_r = Ratio::int(now as i128);
    let mut empty = state.map_or(now_r.sub(capacity), |s| s.0);
    if empty > now_r {
        empty = now_r;
        *state = Some(ModelEmpty(empty));
    }
    let empty = empty.max(now_r.sub(capacity));
    // The whole cells held at `at`, and whether `k` of them can be spent.
    let cells = |at: u64| Ratio::int(at as i128).sub(empty).min(capacity);
    let conforms = |at: u64, k: u64| t_ms.mul(Ratio::int(k as i128)) <= cells(at);
    let limited = q > limit || !conforms(now, q);
    let retry = if !limited || q > limit {
        -1
    } else {
        let ms = first(capacity.ceil() as u64 + 1, |d| conforms(now + d, q)).unwrap();
        (ms as i64 + 999) / 1000
    };
    let empty = if limited {
        empty
    } else {
        empty.add(t_ms.mul(Ratio::int(q as i128)))
    };
    if !limited && q > 0 {
        *state = Some(ModelEmpty(empty));
    }
    let held = now_r.sub(empty).min(capacity);
    let remaining = (0..=limit)
        .rev()
        .find(|&k| t_ms.mul(Ratio::int(k as i128)) <= held)
        .unwrap_or(0);
    let reset = capacity.sub(held).mul(Ratio::new(1, 1000)).ceil();
    [
        limited as i64,
        limit as i64,
        remaining as i64,
        retry,
        reset as i64,
    ]
}

// ------------------------------------------------------------------ proptests

/// A clock step: mostly small moves either way, sometimes hours forward.
fn step() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => -300i64..3000,
        1 => Just(0i64),
        1 => -20_000i64..0,
        1 => 3_600_000i64..43_200_000,
    ]
}

fn advance(now: u64, d: i64) -> u64 {
    (now as i64 + d).max(0) as u64
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// TOKENLEASE and TOKENRETURN against the model. The period stays fixed
    /// in a sequence (the implementation rounds a fraction down when it
    /// changes, tested on its own); capacity and rate change freely.
    #[test]
    fn token_bucket_matches_the_model(
        period_ms in prop_oneof![Just(1u64), Just(7), Just(1000), Just(60_000)],
        calls in prop::collection::vec(
            (step(), 1u64..12, 1u64..20, 0u64..15, 0u64..15, any::<bool>()),
            1..40,
        ),
    ) {
        let (mut now, mut state, mut expire_at, mut model) = (0u64, None, u64::MAX, None);
        // The key's deadline is computed under the policy of the last write.
        let mut written = None;
        for (d, capacity, rate, requested, extra, give_back) in calls {
            now = advance(now, d);
            let p = token_bucket::Policy { capacity, rate, period_ms };
            if now >= expire_at {
                // The key expired: the model must see a full bucket.
                let (m, w): (ModelBucket, token_bucket::Policy) = (model.unwrap(), written.unwrap());
                prop_assert!(m.tokens_at(&w, now.max(m.at)) == Ratio::int(w.capacity as i128));
                state = None;
                model = None;
                expire_at = u64::MAX;
            }
            let change = if give_back {
                let (got, change) = token_bucket::give_back(state, &p, extra, now);
                prop_assert_eq!(got as i64, model_return(&mut model, &p, extra, now));
                change
            } else {
                let min = if requested == 0 { 0 } else { 1 + extra % requested };
                let (lease, change) = token_bucket::lease(state, &p, requested, min, now);
                prop_assert_eq!(lease.to_array(), model_lease(&mut model, &p, requested, min, now));
                change
            };
            match change {
                token_bucket::Change::None => {}
                token_bucket::Change::Store(b, full_at) => {
                    state = Some(b);
                    expire_at = full_at;
                    written = Some(p);
                }
                token_bucket::Change::Remove => {
                    state = None;
                    model = None;
                    expire_at = u64::MAX;
                }
            }
        }
    }

    /// SLIDINGWINDOW against the model (window length fixed, limit free).
    #[test]
    fn sliding_window_matches_the_model(
        window_ms in prop_oneof![Just(1u64), Just(3), Just(1000), Just(60_000)],
        calls in prop::collection::vec((step(), 1u64..15, 0u64..6), 1..60),
    ) {
        let (mut now, mut state, mut expire_at, mut model) = (0u64, None, u64::MAX, ModelWindow::default());
        for (d, limit, n) in calls {
            now = advance(now, d);
            let p = sliding_window::Policy { limit, window_ms };
            if now >= expire_at {
                prop_assert!(model.estimate(window_ms, now) == Ratio::int(0));
                state = None;
                model = ModelWindow::default();
                expire_at = u64::MAX;
            }
            let (verdict, change) = sliding_window::admit(state, &p, n, now);
            prop_assert_eq!(verdict.to_array(), model_window(&mut model, &p, n, now));
            if let Some((w, at)) = change {
                state = Some(w);
                expire_at = at;
            }
        }
    }

    /// CL.THROTTLE against the model. Burst and period change freely (the
    /// model caps the cells at each call's limit, as the rule does); the rate
    /// (the time unit) stays fixed in a sequence, since a new unit rounds the
    /// stored TAT up by less than one unit (tested on its own).
    #[test]
    fn gcra_matches_the_model(
        rate in 1u64..7,
        calls in prop::collection::vec((step(), 0u64..5, 1u64..4, 0u64..7), 1..50),
    ) {
        let (mut now, mut state, mut expire_at, mut model) = (0u64, None, u64::MAX, None);
        for (d, burst, period_s, q) in calls {
            now = advance(now, d);
            if now >= expire_at {
                // Expired: full under the policy that stored it.
                let m: ModelEmpty = model.unwrap();
                prop_assert!(m.0 <= Ratio::int(now as i128));
                state = None;
                model = None;
                expire_at = u64::MAX;
            }
            let p = gcra::cell_policy(burst, rate, period_s);
            let (reply, change) = gcra::throttle(state, &p, p.dvt().unwrap(), q, now);
            prop_assert_eq!(reply.to_array(), model_throttle(&mut model, burst, rate, period_s, q, now));
            if let Some((t, at)) = change {
                state = Some(t);
                expire_at = at;
            }
        }
    }
}
