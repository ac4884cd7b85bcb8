//! Leasehold server: a sharded, thread-per-core RESP server.
//!
//! # Layers
//! Modules form one-way layers; a module imports only modules below it (a
//! test, `server/tests/layers.rs`, fails on any import that goes up):
//!
//! ```text
//!   harness      the in-process test tier: every shard on one thread, no sockets
//!   runtime      threads, accept loop, wiring
//!   net          sockets: each connection's read -> plan -> flush -> write loop
//!   dispatch     the command table's checks (arity, auth), routing, batching
//!   commands     one file per family + session (per-connection state)
//!   shard        a thread's keyspace owner, its handlers' context, its mailbox
//!   store        the keyspace        effects   the replication stream
//!   state        counters and server-wide state
//!   ratelimit    the algorithms and their state types (pure)
//!   clock  slot  error  config
//! ```
//!
//! # Reading order
//! To trace one `TOKENLEASE` from the socket to the shard and its effect,
//! open [`net`] (read, decode), [`dispatch`] (lookup, checks, routing),
//! [`commands`] (the table; `commands/ratelimit.rs` parses and calls the
//! algorithm), [`ratelimit`] (the token bucket), [`store`] (saves the state)
//! and [`effects`] (the `LH.RESTORE` record). `docs/ARCHITECTURE.md` walks
//! this trace.
//!
//! # Threads
//! ```text
//!   thread 0: accept loop + event loop + shard 0      thread 1: event loop + shard 1
//!   conns ──read──> plan ──local──> shard 0          conns ──> plan ──> shard 1
//!                    └──batch per read──mailbox──────────────────────────> run, reply
//! ```

pub mod clock;
pub mod commands;
pub mod config;
pub mod dispatch;
pub mod effects;
pub mod error;
pub mod harness;
pub mod net;
pub mod ratelimit;
pub mod runtime;
pub mod session;
pub mod shard;
pub mod slot;
pub mod state;
pub mod store;

pub use runtime::{start, ServerHandle};
