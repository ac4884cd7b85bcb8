//! Leasehold server: a sharded, thread-per-core RESP server.
//!
//! # Layers
//! Modules form one-way layers; a module imports only modules below it, or
//! in its own layer without a circle (a test, `server/tests/layers.rs`, fails
//! on any import that goes up):
//!
//! ```text
//! 8 harness    the in-process test tier: every shard on one thread, no sockets
//! 7 runtime    threads: each gets an event loop, a Shard, a mailbox loop, an expiry timer
//! 6 net        sockets: the accept loop, each connection's read -> plan -> flush -> write
//! 5 dispatch   the command table's checks (arity, auth), routing, batching, merging
//! 4 commands   the command table, one file of handlers per family
//!   session    one connection's state (RESP version, authentication, decoder limits)
//! 3 shard      a thread's keyspace owner, its handlers' context, its mailbox messages
//! 2 state      server-wide state: live configuration, statistics, clients
//!   store      one shard's keyspace: slot tables, compact entries, expiry
//!   effects    the replication stream: one RESP record per change, a ring
//! 1 ratelimit  the algorithms and their state types (pure)
//! 0 clock      the two clocks (Unix ms, monotonic ms) and their conversions
//!   slot       key -> hash slot -> shard
//!   error      every error reply text
//!   config     flags, the TOML file, defaults
//! ```
//!
//! By layer, from the bottom:
//! 0 [`clock`], [`slot`], [`error`], [`config`];
//! 1 [`ratelimit`]; 2 [`state`], [`store`], [`effects`]; 3 [`shard`];
//! 4 [`commands`], [`session`]; 5 [`dispatch`]; 6 [`net`];
//! 7 [`runtime`], whose [`start`] is the entry point; 8 [`harness`].
//!
//! # Reading order
//! To trace one `TOKENLEASE` from the socket to the shard and its effect,
//! open [`runtime`] (threads, the mailbox loop), [`net`] (accept, read,
//! decode), [`dispatch`] (lookup, checks, routing, batches), [`shard`] (a
//! batch on the owning thread), [`commands`] (the table;
//! `commands/ratelimit.rs` parses and calls the algorithm), [`ratelimit`]
//! (the token bucket), [`store`] (saves the state) and [`effects`] (the
//! `LH.RESTORE` record). `docs/ARCHITECTURE.md` walks this trace.
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
