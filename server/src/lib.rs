//! Leasehold server: a sharded, thread-per-core RESP server.
//!
//! # Layers
//! Modules form one-way layers; a module imports only modules below it, or
//! in its own layer without a circle (a test, `server/tests/layers.rs`, fails
//! on any import that goes up):
//!
//! ```text
//! 9 harness    the in-process test tier: every shard on one thread, no sockets
//! 8 runtime    threads: each gets a Shard, a mailbox, an event loop, an expiry timer
//! 7 net        sockets: each thread's mio event loop, accepting, reading, writing
//!   metrics    the Prometheus endpoint: GET /metrics, counters summed when scraped
//!   replication::feed, ::link   a sender thread per replica; the replica's link
//!   replication::snapshot       the cut of every shard, the image's records
//!   persist::daemon, ::aof, ::load   the files' thread, the log's writer, loading
//! 6 turn       one thread's connections and one turn of its loop, without sockets
//! 5 dispatch   the command table's checks (arity, auth), routing, batching, merging
//! 4 commands   the command table, one file of handlers per family
//!   session    one connection's state (RESP version, authentication, decoder limits)
//! 3 shard      a thread's keyspace owner, its handlers' context, its mailbox messages,
//!              hot keys (the detector; split, gather, merge)
//! 2 state      server-wide state: live configuration, statistics, clients
//!   store      one shard's keyspace: slot tables, compact entries, expiry
//!   effects    the replication stream: one RESP record per change, a ring
//!   pubsub     the subscription registry; a connection's subscriptions
//!   monitor    the connections in MONITOR mode; the line a command becomes
//!   replication::backlog, ::role   the merged stream; role, ids, replicas
//!   replication::outbuf   a follower's own copy of the stream
//!   persist::status       requests to the persistence thread, its status
//! 1 ratelimit  the algorithms and their state types (pure)
//!   acl        ACL users, their rules, passwords (SHA-256), the ACL file's lines
//!   collections  lists, hashes, sets, sorted sets: the data structures (pure)
//!   script     Lua VMs, reply <-> Lua conversions, libraries, script cache
//! 0 clock      the two clocks (Unix ms, monotonic ms) and their conversions
//!   slot       key -> hash slot -> shard
//!   cluster    cluster mode's topology (groups, slot ranges, nodes), swapped whole
//!   error      every error reply text
//!   config     flags, the TOML file, defaults
//!   glob       Redis's glob patterns
//!   latency    the sampled latency histogram (power-of-two buckets)
//!   tls        rustls: the server's TLS configuration, one TLS session, a blocking TLS stream
//!   replication  declares its files, each on its own rung (above)
//!   persist      likewise; persist::format, the files' formats, sits here
//! ```
//!
//! By layer, from the bottom:
//! 0 [`clock`], [`slot`], [`cluster`], [`error`], [`config`], [`glob`], [`latency`], [`tls`], [`replication`]
//! (whose files sit on layers 2 and 7), [`persist`] (files on 0, 2 and 7);
//! 1 [`ratelimit`], [`collections`], [`script`], [`acl`]; 2 [`state`], [`store`],
//! [`effects`], [`pubsub`], [`monitor`]; 3 [`shard`];
//! 4 [`commands`], [`session`]; 5 [`dispatch`]; 6 [`turn`]; 7 [`net`], [`metrics`];
//! 8 [`runtime`], whose [`start`] is the entry point; 9 [`harness`].
//!
//! # Reading order
//! To trace one `TOKENLEASE` from the socket to the shard and its effect,
//! open [`runtime`] (threads), [`net`] (the event loop: accept, read,
//! write), [`turn`] (decode, the turn's batches, replies routed back),
//! [`dispatch`] (lookup, checks, routing), [`shard`] (a
//! batch on the owning thread), [`commands`] (the table;
//! `commands/ratelimit.rs` parses and calls the algorithm), [`ratelimit`]
//! (the token bucket), [`store`] (saves the state) and [`effects`] (the
//! `LH.RESTORE` record). `docs/ARCHITECTURE.md` walks this trace.
//!
//! # Threads
//! ```text
//!   thread 0: event loop (+ accept) + shard 0        thread 1: event loop + shard 1
//!   conns ──read──> plan ──local──> shard 0          conns ──> plan ──> shard 1
//!                    └──one batch per turn──mailbox──────────────────────> run, reply
//! ```

pub mod acl;
pub mod clock;
pub mod cluster;
pub mod collections;
pub mod commands;
pub mod config;
pub mod dispatch;
pub mod effects;
pub mod error;
pub mod glob;
pub mod harness;
pub mod latency;
pub mod metrics;
pub mod monitor;
pub mod net;
pub mod persist;
pub mod pubsub;
pub mod ratelimit;
pub mod replication;
pub mod runtime;
pub mod script;
pub mod session;
pub mod shard;
pub mod slot;
pub mod state;
pub mod store;
pub mod tls;
pub mod turn;

pub use runtime::{start, ServerHandle};
