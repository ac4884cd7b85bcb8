//! Leasehold benchmarks: a load generator in the style of redis-benchmark and
//! memtier_benchmark, and a compare mode that runs the same workloads against
//! Redis 7 and Leasehold and writes `docs/benchmarks.md`.
//!
//! # Layout
//! - [`template`]: command templates with `__key__` / `__sha__` placeholders,
//!   pre-encoded as RESP.
//! - [`keys`]: key distributions (uniform, Zipf, sequential).
//! - [`load`]: the generator itself (one tokio task per connection, pipelined).
//! - [`report`]: throughput and latency percentiles, as text and JSON.
//! - [`resp`]: a blocking connection for set-up calls (SCRIPT LOAD, INFO).
//! - [`cli`]: the flags of `leasehold-bench` and one run from them.
//! - [`compare`]: servers, workloads, rounds, and the markdown table.
//!
//! The criterion micro-benchmarks live in `benches/` (`cargo bench -p leasehold-bench`).

pub mod cli;
pub mod compare;
pub mod keys;
pub mod load;
pub mod report;
pub mod resp;
pub mod template;
