//! The monotonic clock the breaker and the lease manager read.
//!
//! Time is microseconds since an arbitrary origin (`u64`, monotonic). Tests
//! inject [`ManualClock`] so that decay, cool-down and blocking are
//! deterministic; network deadlines always use tokio's timer.
//!
//! The lease manager reads its clock on decisions that find no local token,
//! at each renewal and in its sweeper (an allowed decision in the steady
//! state reads none), so a gateway gives it a [`CoarseClock`]: one atomic
//! load per read, millisecond resolution.
//! [`SystemClock`] reads the OS clock each time (39 to 108 ns per read on the
//! KVM guest measured in docs/client.md).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// A monotonic clock in microseconds.
pub trait Clock: Send + Sync + 'static {
    /// Microseconds since this clock's origin; never decreases.
    fn now_us(&self) -> u64;
}

/// The real monotonic clock ([`Instant`]).
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> SystemClock {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now_us(&self) -> u64 {
        self.origin.elapsed().as_micros() as u64
    }
}

/// A millisecond clock for the request path: [`Clock::now_us`] is one relaxed
/// atomic load of a value a background thread refreshes every millisecond.
///
/// Reads may lag real time by about a millisecond (more if the refresher is
/// descheduled), never run ahead of it, and never decrease. That is enough
/// for everything the lease manager times: blocks of whole retry_after
/// values, reset and `Retry-After` rendered in seconds, rate samples of 100 ms
/// and idleness of seconds; the fail-open GCRA bucket keeps its long-run rate
/// and never exceeds its burst (above 1000/s it admits in per-millisecond
/// batches). Network deadlines never use it (tokio's timer does).
///
/// [`CoarseClock::start`] spawns one thread per clock (share the clock; one
/// is enough for a process). The thread holds only a weak reference and exits
/// within a tick of the last `Arc` being dropped.
#[derive(Debug)]
pub struct CoarseClock {
    now_us: AtomicU64,
    origin: Instant,
}

/// How often [`CoarseClock`]'s thread refreshes it.
pub const COARSE_TICK: Duration = Duration::from_millis(1);

impl CoarseClock {
    /// A clock whose origin is now, refreshed every [`COARSE_TICK`] by a
    /// thread named `leasehold-clock`.
    ///
    /// # Panics
    /// If the OS cannot spawn a thread.
    pub fn start() -> Arc<CoarseClock> {
        let clock = Arc::new(CoarseClock {
            now_us: AtomicU64::new(0),
            origin: Instant::now(),
        });
        let weak: Weak<CoarseClock> = Arc::downgrade(&clock);
        std::thread::Builder::new()
            .name("leasehold-clock".into())
            .spawn(move || loop {
                std::thread::sleep(COARSE_TICK);
                match weak.upgrade() {
                    Some(c) => c.refresh(),
                    None => return,
                }
            })
            .expect("spawn the coarse clock thread");
        clock
    }

    /// Sets the clock to the precise time now (the thread does this every tick).
    pub fn refresh(&self) {
        let now = us(self.origin.elapsed());
        // The only writer is the refresher (or a caller of `refresh`); max
        // keeps the clock monotonic if two of them race.
        self.now_us.fetch_max(now, Ordering::Relaxed);
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now_us(&self) -> u64 {
        self.now_us.load(Ordering::Relaxed)
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_us: AtomicU64,
}

impl ManualClock {
    /// A clock at 0.
    pub fn new() -> ManualClock {
        ManualClock::default()
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.now_us
            .fetch_add(d.as_micros() as u64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.now_us.load(Ordering::SeqCst)
    }
}

/// `Duration` to whole microseconds, saturating.
pub(crate) fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_clock_advances_never_runs_ahead_and_never_goes_back() {
        let clock = CoarseClock::start();
        let mut last = clock.now_us();
        // 20 ms of clock time; a loaded machine may delay the refresher, so
        // the bound on how long that takes is loose.
        while last < 20_000 {
            let now = clock.now_us();
            assert!(now >= last, "went back from {last} to {now}");
            assert!(now <= us(clock.origin.elapsed()), "ran ahead");
            assert!(clock.origin.elapsed() < Duration::from_secs(5), "stuck");
            last = now;
        }
    }
}
