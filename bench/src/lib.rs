//! Leasehold benchmarks (work in progress).
