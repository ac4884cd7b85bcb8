//! Leasehold client: a pipelined async connection with typed calls (to one
//! node, to the primary Sentinel names, or to every node of a cluster, by
//! hash slot), and the gateway lease manager that keeps the ledger off the
//! request path.
//!
//! A gateway names the caller ([`identity`]), finds its policy
//! ([`PolicySet::find`]) and asks the [`LeaseManager`] for a [`Decision`]:
//! in the steady state one compare-and-swap on the key's local token count,
//! with no shared lock word and no ledger call; leases are renewed from the
//! ledger in the background.
//!
//! # Layout
//! In call order, from a request to the ledger (each module is
//! `src/<name>.rs`, except `lease/`, a directory):
//! - [`identity`]: API key, else /24 or /64 subnet.
//! - [`policy`]: policies from Envoy-shaped YAML (serde_norway), validated.
//! - [`subkey`]: one hot key's limit spread over sub-keys in different
//!   hash slots (`sub_keys` in a policy): the shares, the caller's
//!   sub-key, the sub-keys' hash tags.
//! - [`lease`]: the lease manager (local buckets, background leases,
//!   fail-open); its `# Layout` lists the files of `lease/` in reading order.
//! - [`overrides`]: emergency overrides (disable or widen a policy for a
//!   while) published on the ledger's pub/sub channel: the message, the
//!   table, the widened policy, the subscription; a manager applies them
//!   once told to follow the channel ([`LeaseManager::follow_overrides`]).
//! - [`decision`]: decisions and their IETF RateLimit / Retry-After headers.
//! - [`commands`]: typed TOKENLEASE, TOKENRETURN, SLIDINGWINDOW, CL.THROTTLE,
//!   GET/SET/INCR/DEL/PING.
//! - [`client`]: the shared connection, deadlines, reconnect with backoff and
//!   jitter, the breaker in front of every call.
//! - [`cluster`]: cluster addressing: the slot map from `CLUSTER SLOTS`, a
//!   connection per node, routing by [`slot`], `MOVED` and `ASK` followed.
//! - [`slot`]: keys to Redis Cluster hash slots (CRC16, `{hash tags}`).
//! - [`sentinel`]: Sentinel addressing: the primary asked of the sentinels,
//!   checked with `ROLE`, followed on `+switch-master`.
//! - [`breaker`]: the circuit breaker.
//! - `conn` (private): one TCP connection, a writer task and a reader
//!   task, replies matched in order.
//! - [`error`]: typed errors (`is_timeout()`, `is_connection()`, server kinds,
//!   `retry_action()`).
//! - [`clock`]: the injectable monotonic clock.

#![warn(missing_docs)]

pub mod breaker;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod commands;
mod conn;
pub mod decision;
pub mod error;
pub mod identity;
pub mod lease;
pub mod overrides;
pub mod policy;
pub mod sentinel;
pub mod slot;
pub mod subkey;

pub use breaker::{BreakerConfig, BreakerState};
pub use client::{Address, Client, ClientConfig, Credentials};
pub use clock::{Clock, CoarseClock, ManualClock, SystemClock};
pub use cluster::{ClusterConfig, SlotMap};
pub use commands::{BucketParams, Lease, Throttle, Window};
pub use decision::{BypassReason, Decision, Outcome};
pub use error::{ConnectionError, Error, RetryAction, ServerError, ServerErrorKind};
pub use lease::{Decide, LeaseConfig, LeaseManager, OverrideFollower};
pub use policy::{CanaryBy, FailureMode, Mode, Policy, PolicyError, PolicyId, PolicySet};
pub use sentinel::SentinelConfig;
