//! A fixed point in time and servers that run on a hand-set clock.

use std::sync::Arc;

use leasehold_server::clock::ManualClock;

use crate::TestServer;

/// The wall-clock reading, in milliseconds since the Unix epoch, that
/// [`manual_server`] starts from: 2023-11-14T22:13:20Z (1 700 000 000 s).
pub const T0_MS: u64 = 1_700_000_000_000;

/// A server with `threads` shards on a [`ManualClock`] that reads
/// [`T0_MS`] on the wall clock and 0 ms on the monotonic clock, and that
/// clock, to move by hand (TTLs come out exact).
pub fn manual_server(threads: usize) -> (TestServer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0_MS, 0));
    (TestServer::with_clock(threads, clock.clone()), clock)
}
