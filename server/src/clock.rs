//! The two clocks (DESIGN.md, decision 5), behind one interface tests replace.
//!
//! - Wall-clock Unix milliseconds drive TTLs and `EXPIREAT`.
//! - A monotonic clock, in milliseconds since the server started, drives token
//!   refills and windows, so that a wall-clock step never mints or destroys tokens.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// One reading of both clocks, taken once per command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Now {
    /// Wall clock, Unix milliseconds.
    pub unix_ms: u64,
    /// Monotonic clock, milliseconds.
    pub mono_ms: u64,
}

/// A source of [`Now`].
pub trait Clock: Send + Sync + 'static {
    /// Reads both clocks.
    fn now(&self) -> Now;
}

/// The real clocks.
#[derive(Debug)]
pub struct SystemClock {
    start: Instant,
}

impl SystemClock {
    /// A clock whose monotonic reading starts at 0 now.
    pub fn new() -> SystemClock {
        SystemClock {
            start: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Now {
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Now {
            unix_ms,
            mono_ms: self.start.elapsed().as_millis() as u64,
        }
    }
}

/// A clock tests set by hand. Both readings move only when told to.
#[derive(Debug)]
pub struct ManualClock {
    unix_ms: AtomicU64,
    mono_ms: AtomicU64,
}

impl ManualClock {
    /// A clock at the given readings.
    pub fn new(unix_ms: u64, mono_ms: u64) -> ManualClock {
        ManualClock {
            unix_ms: AtomicU64::new(unix_ms),
            mono_ms: AtomicU64::new(mono_ms),
        }
    }

    /// Sets the monotonic reading (it may go backwards, to test that nothing breaks).
    pub fn set_mono_ms(&self, ms: u64) {
        self.mono_ms.store(ms, Ordering::SeqCst);
    }

    /// Sets the wall-clock reading.
    pub fn set_unix_ms(&self, ms: u64) {
        self.unix_ms.store(ms, Ordering::SeqCst);
    }

    /// Moves both readings forward by `ms`.
    pub fn advance_ms(&self, ms: u64) {
        self.unix_ms.fetch_add(ms, Ordering::SeqCst);
        self.mono_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Now {
        Now {
            unix_ms: self.unix_ms.load(Ordering::SeqCst),
            mono_ms: self.mono_ms.load(Ordering::SeqCst),
        }
    }
}
