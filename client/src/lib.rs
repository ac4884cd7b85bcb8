//! Leasehold client: a pipelined async connection with typed calls, and the
//! gateway lease manager that keeps the ledger off the request path.
//!
//! # Layout
//! - [`error`]: typed errors (`is_timeout()`, `is_connection()`, server kinds,
//!   `retry_action()`).
//! - `conn` (private): one TCP connection, a writer task and a reader
//!   task, replies matched in order.
//! - [`client`]: the shared connection, deadlines, reconnect with backoff and
//!   jitter, the breaker in front of every call.
//! - [`commands`]: typed TOKENLEASE, TOKENRETURN, SLIDINGWINDOW, CL.THROTTLE,
//!   GET/SET/INCR/DEL/PING.
//! - [`breaker`]: the circuit breaker.
//! - [`clock`]: the injectable monotonic clock.
//! - [`policy`]: policies from Envoy-shaped YAML (serde_norway), validated.
//! - [`lease`]: the lease manager (local buckets, background leases, fail-open).
//! - [`decision`]: decisions and their IETF RateLimit / Retry-After headers.
//! - [`identity`]: API key, else /24 or /64 subnet.
pub mod breaker;
pub mod client;
pub mod clock;
pub mod commands;
mod conn;
pub mod decision;
pub mod error;
pub mod identity;
pub mod lease;
pub mod policy;

pub use breaker::{BreakerConfig, BreakerState};
pub use client::{Client, ClientConfig};
pub use clock::{Clock, CoarseClock, ManualClock, SystemClock};
pub use commands::{BucketParams, Lease, Throttle, Window};
pub use decision::{BypassReason, Decision, Outcome};
pub use error::{ConnectionError, Error, RetryAction, ServerError, ServerErrorKind};
pub use lease::{Decide, LeaseConfig, LeaseManager};
pub use policy::{FailureMode, Mode, Policy, PolicyError, PolicyId, PolicySet};
