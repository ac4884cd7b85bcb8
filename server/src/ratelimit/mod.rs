//! The rate-limit algorithms and their state types: pure, synchronous state
//! transitions on the monotonic clock, with no store, no I/O and no clock of
//! their own (the caller passes `now`). The `ratelimit` command family
//! (`commands/ratelimit.rs`) parses arguments, loads and saves these states
//! through the store, and replies; the store keeps them packed
//! (`store/value.rs`).
//!
//! # Layout
//! - [`token_bucket`]: TOKENLEASE / TOKENRETURN; balances in exact units of
//!   `1/period_ms` token.
//! - [`sliding_window`]: SLIDINGWINDOW; two fixed windows weighted by overlap.
//! - [`gcra`]: CL.THROTTLE (redis-cell) and GCRA (Redis 8.8); a theoretical
//!   arrival time.
//! - [`split`]: a key split over shards, exactly (hot keys): the lease core,
//!   a token bucket's math (a GCRA key as its bucket), a sliding window's.
//! - [`pin`]: pinned limits, the one policy an operator allows under a key
//!   prefix.
//! - `model` (tests only): a reference model written for clarity, compared
//!   with the three algorithms by proptest over random calls and clock steps.
//!
//! # Expiry
//! Each state knows when it is worth nothing (a full bucket, two empty
//! windows, a TAT in the past): its key expires then, so idle state costs no
//! memory and a missing key behaves exactly like a fresh one.

pub mod gcra;
#[cfg(test)]
mod model;
pub mod pin;
pub mod sliding_window;
pub mod split;
pub mod token_bucket;

use gcra::State as GcraState;
use sliding_window::Window;
use token_bucket::Bucket;

/// TYPE names of the state kinds.
pub mod type_names {
    /// A TOKENLEASE / TOKENRETURN bucket.
    pub const TOKEN_BUCKET: &str = "tokenbucket";
    /// A SLIDINGWINDOW counter.
    pub const SLIDING_WINDOW: &str = "slidingwindow";
    /// A CL.THROTTLE / GCRA theoretical arrival time.
    pub const GCRA: &str = "gcra";
}

/// The state of a rate-limit key, unpacked. Instants are monotonic ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateState {
    /// TOKENLEASE / TOKENRETURN.
    TokenBucket(Bucket),
    /// SLIDINGWINDOW.
    SlidingWindow(Window),
    /// CL.THROTTLE / GCRA.
    Gcra(GcraState),
}

impl RateState {
    /// The monotonic ms at which this state reads as a missing key again,
    /// when the state alone tells (both windows empty; a GCRA bucket full
    /// under the parameters that stored it); `None` for a token bucket, whose
    /// refill depends on the call's parameters.
    pub fn empties_at(&self) -> Option<u64> {
        match self {
            RateState::TokenBucket(_) => None,
            RateState::SlidingWindow(w) => Some(w.empty_at()),
            RateState::Gcra(t) => Some(t.full_ms),
        }
    }

    /// The name `TYPE` reports.
    pub fn type_name(&self) -> &'static str {
        match self {
            RateState::TokenBucket(_) => type_names::TOKEN_BUCKET,
            RateState::SlidingWindow(_) => type_names::SLIDING_WINDOW,
            RateState::Gcra(_) => type_names::GCRA,
        }
    }
}
