//! The two clocks, behind one interface tests replace.
//!
//! - Wall-clock Unix milliseconds drive TTLs and `EXPIREAT`, as in Redis.
//! - A monotonic clock, in milliseconds since the server started plus
//!   [`MONO_BASE_MS`], drives token refills and windows: a wall-clock step
//!   must never mint or destroy tokens, so refills read the monotonic clock.
//!
//! The base lets a server place instants from before its own start on its
//! monotonic clock: a replica that loads a bucket refilled, or a window
//! started, before the replica's process began (`LH.RESTORE` carries Unix
//! ms) converts it exactly when it is at most 2^32 ms (49.7 days) older
//! than the replica's start; only older instants are clamped to the origin.
//! Packed states hold instants up to 2^40 ms, so the base costs 1/256 of
//! that range (34.7 years of uptime remain).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// One reading of both clocks. A shard takes one per read and one per batch
/// (`Shard::tick`), and every command in it sees that same snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Now {
    /// Wall clock, Unix milliseconds.
    pub unix_ms: u64,
    /// Monotonic clock, milliseconds.
    pub mono_ms: u64,
}

/// A monotonic instant as Unix ms under the snapshot `now` (at least 1, since
/// a deadline of 0 means "no TTL" to the store; at most `i64::MAX`, the
/// largest deadline Redis, PEXPIRETIME and a replica's PXAT can express).
pub fn unix_of(now: Now, mono: u64) -> u64 {
    (now.unix_ms as i128 + mono as i128 - now.mono_ms as i128).clamp(1, i64::MAX as i128) as u64
}

/// A Unix-ms instant as monotonic ms under the snapshot `now` (0 at the least:
/// an instant before the monotonic origin is taken as the origin).
pub fn mono_of(now: Now, unix: u64) -> u64 {
    (now.mono_ms as i128 + unix as i128 - now.unix_ms as i128).clamp(0, u64::MAX as i128) as u64
}

/// A signed monotonic instant (a GCRA bucket's empty instant, which may be
/// before the origin) as Unix ms under `now`, unclamped: it may be before
/// 1970 as well.
pub fn unix_signed(now: Now, mono: i64) -> i64 {
    let unix = now.unix_ms as i128 + mono as i128 - now.mono_ms as i128;
    unix.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// The inverse of [`unix_signed`].
pub fn mono_signed(now: Now, unix: i64) -> i64 {
    let mono = now.mono_ms as i128 + unix as i128 - now.unix_ms as i128;
    mono.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// What [`SystemClock`]'s monotonic reading starts at, ms: 2^32.
pub const MONO_BASE_MS: u64 = 1 << 32;

/// A source of [`Now`].
pub trait Clock: Send + Sync + 'static {
    /// Reads both clocks.
    fn now(&self) -> Now;

    /// The wall clock in Unix microseconds (MONITOR's timestamps): the
    /// milliseconds of [`Clock::now`] unless the clock has finer.
    fn unix_us(&self) -> u64 {
        self.now().unix_ms * 1000
    }
}

/// The real clocks.
#[derive(Debug)]
pub struct SystemClock {
    start: Instant,
}

impl SystemClock {
    /// A clock whose monotonic reading starts at [`MONO_BASE_MS`] now.
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
            mono_ms: MONO_BASE_MS + self.start.elapsed().as_millis() as u64,
        }
    }

    fn unix_us(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_and_unix_instants_convert_both_ways() {
        let now = Now {
            unix_ms: 1_700_000_000_000,
            mono_ms: 5_000,
        };
        assert_eq!(unix_of(now, 6_000), 1_700_000_001_000);
        assert_eq!(unix_of(now, 0), 1_699_999_995_000);
        assert_eq!(mono_of(now, unix_of(now, 123)), 123);
        assert_eq!(mono_of(now, 1), 0, "before the monotonic origin");
        assert_eq!(
            unix_of(
                Now {
                    unix_ms: 0,
                    mono_ms: 10
                },
                0
            ),
            1,
            "never 0 (no TTL)"
        );
        assert_eq!(
            unix_of(now, u64::MAX),
            i64::MAX as u64,
            "a deadline PEXPIRETIME and PXAT can express"
        );
    }
}
