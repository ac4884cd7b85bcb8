//! A latency histogram one thread writes and any thread reads: fixed
//! power-of-two buckets of microseconds, the shape Prometheus's histograms
//! take (`le` upper bounds, cumulative when exported).
//!
//! Commands are timed by sampling (see [`SAMPLE_EVERY`]): reading the clock
//! twice for every command would cost more than the 2% of the hot path the
//! metrics may take, while one command in 32 gives the same distribution
//! within a few percent once a few thousand are timed.

use std::sync::atomic::{AtomicU64, Ordering};

/// One command in this many (per thread) is timed.
pub const SAMPLE_EVERY: u32 = 32;

/// Upper bounds of the buckets, microseconds: 1, 2, 4, ... 2^20 (about one
/// second); a last bucket, `+Inf`, holds the rest.
pub const BOUNDS_US: [u64; 21] = {
    let mut b = [0u64; 21];
    let mut i = 0;
    while i < b.len() {
        b[i] = 1 << i;
        i += 1;
    }
    b
};

/// Buckets, including `+Inf`.
pub const BUCKETS: usize = BOUNDS_US.len() + 1;

/// Counts of timed events by bucket, with their total duration.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Events per bucket (not cumulative): bucket `i` holds durations above
    /// `BOUNDS_US[i - 1]` and up to `BOUNDS_US[i]` microseconds.
    buckets: [AtomicU64; BUCKETS],
    /// Total of every recorded duration, nanoseconds.
    sum_ns: AtomicU64,
}

/// What a [`Histogram`] held when read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// Events per bucket (not cumulative), `+Inf` last.
    pub buckets: [u64; BUCKETS],
    /// Total duration, nanoseconds.
    pub sum_ns: u64,
}

impl Snapshot {
    /// Events recorded.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Adds another snapshot's counts (other threads' histograms).
    pub fn add(&mut self, other: &Snapshot) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets) {
            *a += b;
        }
        self.sum_ns += other.sum_ns;
    }
}

/// The bucket a duration of `ns` nanoseconds falls in.
pub fn bucket_of(ns: u64) -> usize {
    let us = ns.div_ceil(1000);
    BOUNDS_US
        .iter()
        .position(|&b| us <= b)
        .unwrap_or(BUCKETS - 1)
}

impl Histogram {
    /// Records one duration (owner thread only: a plain load and store, no
    /// read-modify-write).
    pub fn record(&self, ns: u64) {
        let add = |a: &AtomicU64, n: u64| {
            a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        };
        add(&self.buckets[bucket_of(ns)], 1);
        add(&self.sum_ns, ns);
    }

    /// The counts now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_land_in_their_power_of_two_bucket() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1_000), 0); // 1 us
        assert_eq!(bucket_of(1_001), 1); // just above 1 us
        assert_eq!(bucket_of(3_000), 2); // 3 us <= 4 us
        assert_eq!(bucket_of(1_048_576_000), 20);
        assert_eq!(bucket_of(2_000_000_000), BUCKETS - 1);
        let h = Histogram::default();
        h.record(500);
        h.record(3_000);
        h.record(3_500);
        let s = h.snapshot();
        assert_eq!(s.count(), 3);
        assert_eq!(s.buckets[0], 1);
        assert_eq!(s.buckets[2], 2);
        assert_eq!(s.sum_ns, 7_000);
    }
}
