//! The sliding-window counter behind SLIDINGWINDOW, as pure state transitions
//! on the monotonic clock.
//!
//! Two adjacent fixed windows of `window_ms`, aligned to multiples of
//! `window_ms`; the estimate at `e` ms into the current window is
//! `previous * (window_ms - e) / window_ms + current` (Cloudflare, "How we
//! built rate limiting capable of scaling to millions of domains", 2017).
//! Every comparison is made on the estimate multiplied by `window_ms`, in
//! `u128`, so no division and no float decides an admission.
//!
//! A call whose clock reads earlier than the current window's start is
//! answered as if it ran at that start (the window never moves back).

/// The parameters that travel with every call, both in `1..=i64::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Hits admitted per sliding window.
    pub limit: u64,
    /// The window length, ms.
    pub window_ms: u64,
}

/// A stored window pair: 32 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The window length the counts belong to, ms.
    pub window_ms: u64,
    /// Start of the current window, monotonic ms (a multiple of `window_ms`).
    pub start: u64,
    /// Hits admitted in the previous window.
    pub previous: u64,
    /// Hits admitted in the current window.
    pub current: u64,
}

/// The reply of SLIDINGWINDOW.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// `n` when admitted, else 0.
    pub admitted: u64,
    /// The estimate after this call, rounded up.
    pub count: u64,
    /// `floor(limit - estimate)`, never below 0.
    pub remaining: u64,
    /// 0 when admitted; ms until `n` more hits fit if nothing else arrives
    /// (rounded up); -1 when `n > limit`.
    pub retry_after_ms: i64,
}

impl Verdict {
    /// The reply as the four integers of the wire format.
    pub fn to_array(self) -> [i64; 4] {
        let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        [
            i(self.admitted),
            i(self.count),
            i(self.remaining),
            self.retry_after_ms,
        ]
    }
}

impl Window {
    fn empty(window_ms: u64, at: u64) -> Window {
        Window {
            window_ms,
            start: at - at % window_ms,
            previous: 0,
            current: 0,
        }
    }

    /// The window pair as seen at `now` under `p`, and the effective time
    /// (`max(now, start)`). When `p` brings another window length the old
    /// estimate (rounded up) becomes the new current count, so a change
    /// never admits more than the old windows allowed at that instant.
    pub fn roll(self, p: &Policy, now: u64) -> (Window, u64) {
        let at = now.max(self.start);
        if self.window_ms != p.window_ms {
            let old = Policy {
                window_ms: self.window_ms,
                ..*p
            };
            let (w, at) = self.roll(&old, at);
            let carried = w.weighted(at).div_ceil(w.window_ms as u128);
            let mut fresh = Window::empty(p.window_ms, at);
            fresh.current = u64::try_from(carried).unwrap_or(u64::MAX);
            return (fresh, at);
        }
        // A restored window may start off the grid; it keeps its phase
        // until both its windows are empty.
        let elapsed = at - self.start;
        let w = if elapsed < p.window_ms {
            self
        } else if elapsed - p.window_ms < p.window_ms {
            Window {
                start: self.start + p.window_ms,
                previous: self.current,
                current: 0,
                ..self
            }
        } else {
            Window::empty(p.window_ms, at)
        };
        (w, at)
    }

    /// The estimate at `at` times `window_ms`.
    fn weighted(&self, at: u64) -> u128 {
        let w = self.window_ms as u128;
        let e = (at - self.start) as u128;
        self.previous as u128 * (w - e) + self.current as u128 * w
    }

    /// The reply at `at` (no earlier than `start`) for this window pair
    /// under `p`, having admitted `admitted` hits, with `retry_after_ms`.
    pub fn verdict(&self, p: &Policy, at: u64, admitted: u64, retry_after_ms: i64) -> Verdict {
        let width = p.window_ms as u128;
        let weighted = self.weighted(at);
        Verdict {
            admitted,
            count: u64::try_from(weighted.div_ceil(width)).unwrap_or(u64::MAX),
            remaining: self.room(p, at),
            retry_after_ms,
        }
    }

    /// Whole hits that fit at `at` under `p`, `floor(limit - estimate)`
    /// (0 when over): a call of `n` hits is admitted exactly when `n` is at
    /// most this. Never smaller at a later instant of the same window (the
    /// previous window's weight only falls), so it is a lower bound of the
    /// room left at every instant from `at` to the window's end.
    pub fn room(&self, p: &Policy, at: u64) -> u64 {
        let width = p.window_ms as u128;
        let cap = p.limit as u128 * width;
        (cap.saturating_sub(self.weighted(at)) / width) as u64
    }

    /// Whether both windows are empty (the same as a missing key).
    pub fn is_empty(&self) -> bool {
        self.previous == 0 && self.current == 0
    }

    /// Monotonic ms at which both windows are empty (when the key expires).
    pub fn empty_at(&self) -> u64 {
        let windows = if self.current > 0 { 2 } else { 1 };
        self.start.saturating_add(windows * self.window_ms)
    }

    /// Exact ms from `at` until `n` more hits fit under `limit` with no
    /// other arrival, rounded up. Needs `1 <= n <= limit` and the hits not
    /// fitting now.
    fn wait_for(&self, limit: u64, n: u64, at: u64) -> u128 {
        let w = self.window_ms as u128;
        let left_in_window = w - (at - self.start) as u128;
        // In this window: previous * (w - e - t) <= (limit - current - n) * w.
        if let Some(room) = (limit as u128).checked_sub(self.current as u128 + n as u128) {
            // previous > 0 here, or the hits would already fit.
            return left_in_window - (room * w / self.previous as u128).min(left_in_window);
        }
        // From the next window on, `current` decays:
        // current * (w - e2) <= (limit - n) * w, with current > limit - n >= 0.
        let e2 = w - (limit - n) as u128 * w / self.current as u128;
        left_in_window + e2
    }
}

/// SLIDINGWINDOW: tries to admit `n` hits (0 = peek) into `prev` (None for a
/// missing key) at monotonic `now`. Returns the reply and, when the hits were
/// admitted, the state to store with the monotonic ms it expires at.
pub fn admit(
    prev: Option<Window>,
    p: &Policy,
    n: u64,
    now: u64,
) -> (Verdict, Option<(Window, u64)>) {
    let (mut w, at) = match prev {
        Some(w) => w.roll(p, now),
        None => (Window::empty(p.window_ms, now), now),
    };
    let verdict = |w: &Window, admitted, retry_after_ms| w.verdict(p, at, admitted, retry_after_ms);
    if n == 0 {
        return (verdict(&w, 0, 0), None);
    }
    if n > p.limit {
        return (verdict(&w, 0, -1), None);
    }
    if n > w.room(p, at) {
        let wait = i64::try_from(w.wait_for(p.limit, n, at)).unwrap_or(i64::MAX);
        return (verdict(&w, 0, wait), None);
    }
    // Admitted, so current + n <= limit <= i64::MAX.
    w.current += n;
    (verdict(&w, n, 0), Some((w, w.empty_at())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `(now, n)` calls on one key and returns the replies.
    fn run(p: Policy, calls: &[(u64, u64)]) -> Vec<[i64; 4]> {
        let mut state = None;
        calls
            .iter()
            .map(|&(now, n)| {
                let (v, change) = admit(state, &p, n, now);
                if let Some((w, _)) = change {
                    state = Some(w);
                }
                v.to_array()
            })
            .collect()
    }

    #[test]
    fn w1_no_double_burst_at_a_boundary() {
        let p = Policy {
            limit: 10,
            window_ms: 60_000,
        };
        let mut calls = vec![(59_900, 1); 10];
        calls.extend([(60_100, 1); 10]);
        let r = run(p, &calls);
        assert!(r[..10].iter().all(|v| v[0] == 1), "{r:?}");
        assert!(r[10..].iter().all(|v| v[0] == 0), "{r:?}");
        assert_eq!(r[10], [0, 10, 0, 5900]);
    }

    #[test]
    fn w2_weighting() {
        let p = Policy {
            limit: 100,
            window_ms: 10_000,
        };
        let mut calls: Vec<(u64, u64)> = (0..50).map(|i| (i * 200, 1)).collect();
        calls.extend([(11_000, 1); 10]);
        calls.push((11_000, 0));
        let r = run(p, &calls);
        assert!(r[..60].iter().all(|v| v[0] == 1));
        assert_eq!(r[60], [0, 55, 45, 0]);
    }

    #[test]
    fn w3_small_limits() {
        let r = run(
            Policy {
                limit: 1,
                window_ms: 1000,
            },
            &[(500, 1), (1200, 1), (1999, 1), (2000, 1)],
        );
        assert_eq!(
            r,
            vec![[1, 1, 0, 0], [0, 1, 0, 800], [0, 1, 0, 1], [1, 1, 0, 0]]
        );
    }

    #[test]
    fn retry_after_is_honest_across_windows() {
        let p = Policy {
            limit: 10,
            window_ms: 1000,
        };
        // 10 hits at t=100; 4 more at t=1100 need the previous window to decay
        // to 6: 10 * (1000 - e) <= 6000 at e = 400, i.e. 300 ms from t=1100.
        let r = run(p, &[(100, 10), (1100, 4), (1399, 4), (1400, 4)]);
        assert_eq!(r[1], [0, 9, 1, 300]);
        assert_eq!(r[2][0], 0);
        assert_eq!(r[3], [4, 10, 0, 0]);
        // Over the limit inside the current window: wait for the next one.
        let r = run(p, &[(0, 6), (900, 4), (900, 1), (1000, 1)]);
        assert_eq!(r[2], [0, 10, 0, 200]);
        assert_eq!(r[3], [0, 10, 0, 100]);
        let r = run(p, &[(0, 6), (900, 4), (1100, 1)]);
        assert_eq!(r[2], [1, 10, 0, 0]);
    }

    #[test]
    fn counts_over_limit_and_peeks() {
        let p = Policy {
            limit: 3,
            window_ms: 1000,
        };
        assert_eq!(run(p, &[(0, 4)]), vec![[0, 0, 3, -1]]);
        assert_eq!(
            admit(None, &p, 0, 5),
            (
                Verdict {
                    admitted: 0,
                    count: 0,
                    remaining: 3,
                    retry_after_ms: 0
                },
                None
            )
        );
    }

    #[test]
    fn the_clock_going_back_reopens_nothing() {
        let p = Policy {
            limit: 2,
            window_ms: 1000,
        };
        let r = run(p, &[(5000, 2), (100, 1), (4999, 1), (6000, 0)]);
        assert_eq!(
            r,
            vec![[2, 2, 0, 0], [0, 2, 0, 1500], [0, 2, 0, 1500], [0, 2, 0, 0]]
        );
    }

    #[test]
    fn long_idle_and_huge_values() {
        let century = 100 * 365 * 86_400_000u64;
        let p = Policy {
            limit: i64::MAX as u64,
            window_ms: i64::MAX as u64,
        };
        let r = run(p, &[(0, i64::MAX as u64), (century, 1), (u64::MAX, 1)]);
        assert_eq!(r[0], [i64::MAX, i64::MAX, 0, 0]);
        assert_eq!(r[1][0], 0);
        assert_eq!(r[2][0], 1);
        let p = Policy {
            limit: 5,
            window_ms: 1,
        };
        assert_eq!(
            run(p, &[(0, 5), (century, 5)]),
            vec![[5, 5, 0, 0], [5, 5, 0, 0]]
        );
    }

    #[test]
    fn expiry_is_when_both_windows_are_empty() {
        let p = Policy {
            limit: 5,
            window_ms: 1000,
        };
        let (_, Some((w, at))) = admit(None, &p, 1, 1500) else {
            panic!()
        };
        assert_eq!(at, 3000);
        let (rolled, _) = w.roll(&p, 2100);
        assert_eq!(
            (rolled.previous, rolled.current, rolled.empty_at()),
            (1, 0, 3000)
        );
    }

    #[test]
    fn a_new_window_length_carries_the_estimate() {
        let w = Window {
            window_ms: 1000,
            start: 1000,
            previous: 10,
            current: 2,
        };
        // At 1500 the estimate is 10 * 0.5 + 2 = 7.
        let (fresh, at) = w.roll(
            &Policy {
                limit: 10,
                window_ms: 400,
            },
            1500,
        );
        assert_eq!(at, 1500);
        assert_eq!(
            fresh,
            Window {
                window_ms: 400,
                start: 1200,
                previous: 0,
                current: 7
            }
        );
    }
}
