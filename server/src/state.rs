//! Server-wide state shared by all threads. None of it guards the keyspace:
//! the hot path only reads the config generation and writes its own shard's
//! counters.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use leasehold_protocol::Reply;
use parking_lot::{Mutex, RwLock};

use crate::clock::Clock;
use crate::config::Config;
use crate::error::OpError;
use crate::replication::role::Replication;

/// A counter written by one thread only and read by any. [`Counter::add`] is
/// a plain load and store (no read-modify-write), which is enough with one
/// writer.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n` (owner thread only).
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Sets the value (owner thread only).
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    /// Reads the value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// One thread's statistics; INFO sums them over threads.
#[derive(Debug)]
pub struct ShardStats {
    /// Keys in the shard.
    pub keys: Counter,
    /// Keys with a TTL.
    pub expires: Counter,
    /// Keys reclaimed after their deadline.
    pub expired_keys: Counter,
    /// Commands run on this thread.
    pub commands_processed: Counter,
    /// Reads that found their key.
    pub keyspace_hits: Counter,
    /// Reads that did not.
    pub keyspace_misses: Counter,
    /// Bytes this shard has appended to its effect stream (its offset).
    pub effect_offset: Counter,
    /// Effects this shard has emitted (the changes snapshot rules count).
    pub changes: Counter,
    /// Calls per command, indexed like the command table.
    pub calls: Vec<Counter>,
    /// Calls that failed while running (an error reply) per command.
    pub failed_calls: Vec<Counter>,
    /// Calls refused before running (arity, authentication, unknown
    /// subcommand, CROSSSLOT) per command.
    pub rejected_calls: Vec<Counter>,
    /// Error replies sent, per code of [`crate::error::ERROR_CODES`].
    pub error_replies: [Counter; crate::error::ERROR_CODES.len()],
    /// Error replies sent, whatever their code.
    pub total_error_replies: Counter,
    /// Batches received from other threads.
    pub batches_in: Counter,
}

impl ShardStats {
    /// Counts one call's outcome (owner thread only) and turns it into its
    /// reply: a rejection (refused before it ran, Redis's `rejected_calls`)
    /// counts only as rejected; anything else counts as a call, and as a
    /// failed call when the reply is an error.
    pub fn count_call(&self, cmd: usize, result: Result<Reply, OpError>) -> Reply {
        let reply = match result {
            Ok(r) => r,
            Err(e) if e.is_rejection() => {
                self.rejected_calls[cmd].add(1);
                return e.reply();
            }
            Err(e) => e.reply(),
        };
        self.calls[cmd].add(1);
        if reply.is_error() {
            self.failed_calls[cmd].add(1);
        }
        self.commands_processed.add(1);
        reply
    }

    /// Counts a reply about to be sent if it is an error (owner thread only).
    pub fn count_reply(&self, reply: &Reply) {
        if reply.is_error() {
            self.total_error_replies.add(1);
            if let Some(i) = crate::error::error_code_index(reply) {
                self.error_replies[i].add(1);
            }
        }
    }
}

impl ShardStats {
    /// Zeroed statistics for a table of `commands` entries.
    pub fn new(commands: usize) -> ShardStats {
        ShardStats {
            keys: Counter::default(),
            expires: Counter::default(),
            expired_keys: Counter::default(),
            commands_processed: Counter::default(),
            keyspace_hits: Counter::default(),
            keyspace_misses: Counter::default(),
            effect_offset: Counter::default(),
            changes: Counter::default(),
            calls: (0..commands).map(|_| Counter::default()).collect(),
            failed_calls: (0..commands).map(|_| Counter::default()).collect(),
            rejected_calls: (0..commands).map(|_| Counter::default()).collect(),
            error_replies: Default::default(),
            total_error_replies: Counter::default(),
            batches_in: Counter::default(),
        }
    }
}

/// What CLIENT LIST and CLIENT KILL see of a connection.
#[derive(Debug)]
pub struct ClientHandle {
    /// CLIENT ID.
    pub id: u64,
    /// Peer address.
    pub addr: SocketAddr,
    /// Local address.
    pub laddr: SocketAddr,
    /// When the connection was accepted.
    pub created: Instant,
    /// Milliseconds since `created` of the last command.
    pub last_cmd_ms: AtomicU64,
    /// Index of the last command in the table (`usize::MAX` for none).
    pub last_cmd: AtomicUsize,
    /// CLIENT SETNAME value.
    pub name: Mutex<Option<Bytes>>,
    /// 2 or 3.
    pub resp: AtomicU64,
    /// Set by CLIENT KILL or shutdown; the connection closes at its
    /// thread's next turn.
    pub killed: AtomicBool,
    /// The doorbell of the thread serving the connection.
    pub bell: Arc<Doorbell>,
    /// Channels subscribed to (CLIENT LIST `sub`), kept by the connection's thread.
    pub sub: AtomicUsize,
    /// Patterns subscribed to (CLIENT LIST `psub`), kept by the connection's thread.
    pub psub: AtomicUsize,
}

impl ClientHandle {
    /// Marks the connection for closing and wakes its thread.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::SeqCst);
        self.bell.ring_kill();
    }

    /// Whether the connection has a channel or pattern subscription (a
    /// `pubsub` client to CLIENT LIST and CLIENT KILL, flag `P`).
    pub fn is_pubsub(&self) -> bool {
        self.sub.load(Ordering::Relaxed) + self.psub.load(Ordering::Relaxed) > 0
    }
}

/// How other threads wake a thread's event loop: a [`mio::Waker`] rung only
/// while the loop sleeps (or is about to), so a busy thread's senders make
/// no system call, plus a flag for CLIENT KILL.
///
/// The sleeper sets `asleep`, then looks at its mailbox once more before it
/// blocks; a sender puts its message in the mailbox, then swaps `asleep`
/// off and rings if it was on. With a full fence on each side, one of the
/// two always sees the other: no message waits for a sleeping thread.
#[derive(Debug)]
pub struct Doorbell {
    waker: mio::Waker,
    asleep: AtomicBool,
    kills: AtomicBool,
}

impl Doorbell {
    /// A doorbell that wakes `waker`'s poll.
    pub fn new(waker: mio::Waker) -> Doorbell {
        Doorbell {
            waker,
            asleep: AtomicBool::new(false),
            kills: AtomicBool::new(false),
        }
    }

    /// Wakes the loop if it sleeps; called after putting a message in its mailbox.
    pub fn ring(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.asleep.load(Ordering::Relaxed) && self.asleep.swap(false, Ordering::SeqCst) {
            self.wake();
        }
    }

    /// Records that a connection of this thread was killed and wakes the loop.
    pub fn ring_kill(&self) {
        self.kills.store(true, Ordering::SeqCst);
        self.wake();
    }

    /// Wakes the loop whether it sleeps or not (shutdown).
    pub fn wake(&self) {
        if let Err(e) = self.waker.wake() {
            tracing::warn!("cannot wake a thread's event loop: {e}");
        }
    }

    /// The loop is about to block: senders must ring from now on. The
    /// caller checks its mailbox once more after this, before it blocks.
    pub fn going_to_sleep(&self) {
        self.asleep.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// The loop is awake again: senders need not ring.
    pub fn awake(&self) {
        self.asleep.store(false, Ordering::Relaxed);
    }

    /// Whether a connection was killed since the last call (clears it).
    pub fn take_kills(&self) -> bool {
        self.kills.load(Ordering::Relaxed) && self.kills.swap(false, Ordering::SeqCst)
    }
}

/// Server-wide counters (INFO stats), touched once per connection, not per command.
#[derive(Debug, Default)]
pub struct ServerCounters {
    /// Connections accepted.
    pub total_connections_received: AtomicU64,
    /// Connections refused by maxclients.
    pub rejected_connections: AtomicU64,
    /// Bytes read from clients.
    pub total_net_input_bytes: AtomicU64,
    /// Bytes written to clients.
    pub total_net_output_bytes: AtomicU64,
}

/// State shared by every thread.
pub struct Shared {
    /// The live configuration (CONFIG SET changes it).
    pub config: RwLock<Config>,
    /// Bumped on every CONFIG SET so connections re-read their limits.
    pub config_gen: AtomicU64,
    /// The clocks.
    pub clock: Arc<dyn Clock>,
    /// Number of threads (= shards).
    pub shards: usize,
    /// Per-thread statistics, indexed by shard.
    pub shard_stats: Vec<Arc<ShardStats>>,
    /// Connected clients by id.
    pub clients: Mutex<hashbrown::HashMap<u64, Arc<ClientHandle>>>,
    /// Next CLIENT ID.
    pub next_client_id: AtomicU64,
    /// Server-wide counters.
    pub counters: ServerCounters,
    /// Set once shutdown starts.
    pub shutting_down: AtomicBool,
    /// Each thread's doorbell, indexed by thread (= shard).
    pub doorbells: Vec<Arc<Doorbell>>,
    /// When the server started (uptime).
    pub started: Instant,
    /// The address actually bound.
    pub local_addr: SocketAddr,
    /// 40 hex characters identifying this run (INFO `run_id`).
    pub run_id: String,
    /// Counters at the last CONFIG RESETSTAT.
    pub baseline: Mutex<StatBaseline>,
    /// Replication role, ids, the merged stream and the replicas.
    pub repl: Arc<Replication>,
    /// Every connection's channel and pattern subscriptions (PUBLISH reads it).
    pub pubsub: crate::pubsub::Registry,
    /// Snapshot and append-only log status, and requests to their thread.
    pub persist: crate::persist::status::Persistence,
    /// Script bodies by SHA1 and each shard's script run state (SCRIPT
    /// LOAD, EVALSHA, BUSY, SCRIPT KILL).
    pub scripts: crate::script::cache::ScriptCache,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("shards", &self.shards)
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Why a write must be refused now: on a replica (`READONLY`), and
    /// while snapshots or the append-only log fail (`MISCONF`, see
    /// `Persistence::refuse_writes`).
    pub fn write_refusal(&self) -> Option<OpError> {
        if self.repl.is_replica() {
            return Some(OpError::ReadOnly);
        }
        match self.persist.refuse_writes.load(Ordering::Relaxed) {
            0 => None,
            crate::persist::status::REFUSE_LOG => Some(OpError::MisconfLog),
            _ => Some(OpError::Misconf),
        }
    }
}

impl Shared {
    /// Starts shutdown: every thread stops accepting and exits its loop.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        for bell in &self.doorbells {
            bell.wake();
        }
        for c in self.clients.lock().values() {
            c.kill();
        }
    }

    /// Sums a per-shard counter.
    pub fn sum(&self, f: impl Fn(&ShardStats) -> u64) -> u64 {
        self.shard_stats.iter().map(|s| f(s)).sum()
    }
}

/// Counter values at the last CONFIG RESETSTAT; INFO reports the difference.
#[derive(Debug, Default, Clone)]
pub struct StatBaseline {
    /// Commands processed.
    pub commands: u64,
    /// Keyspace hits.
    pub hits: u64,
    /// Keyspace misses.
    pub misses: u64,
    /// Keys expired.
    pub expired: u64,
    /// Connections received.
    pub conns: u64,
    /// Connections rejected (maxclients).
    pub rejected: u64,
    /// Bytes read from clients.
    pub net_in: u64,
    /// Bytes written to clients.
    pub net_out: u64,
    /// Error replies sent.
    pub errors: u64,
    /// Calls per command, indexed like the command table.
    pub calls: Vec<u64>,
    /// Failed calls per command.
    pub failed: Vec<u64>,
    /// Rejected calls per command.
    pub rejected_calls: Vec<u64>,
    /// Error replies per code of `ERROR_CODES`.
    pub error_codes: Vec<u64>,
}

impl Shared {
    /// Every statistics counter, summed over shards now (CONFIG RESETSTAT
    /// keeps one as the baseline INFO subtracts).
    pub fn stat_snapshot(&self) -> StatBaseline {
        let n = self.shard_stats.first().map_or(0, |s| s.calls.len());
        StatBaseline {
            commands: self.sum(|s| s.commands_processed.get()),
            hits: self.sum(|s| s.keyspace_hits.get()),
            misses: self.sum(|s| s.keyspace_misses.get()),
            expired: self.sum(|s| s.expired_keys.get()),
            conns: self
                .counters
                .total_connections_received
                .load(Ordering::Relaxed),
            rejected: self.counters.rejected_connections.load(Ordering::Relaxed),
            net_in: self.counters.total_net_input_bytes.load(Ordering::Relaxed),
            net_out: self.counters.total_net_output_bytes.load(Ordering::Relaxed),
            calls: (0..n).map(|i| self.sum(|s| s.calls[i].get())).collect(),
            errors: self.sum(|s| s.total_error_replies.get()),
            failed: (0..n)
                .map(|i| self.sum(|s| s.failed_calls[i].get()))
                .collect(),
            rejected_calls: (0..n)
                .map(|i| self.sum(|s| s.rejected_calls[i].get()))
                .collect(),
            error_codes: (0..crate::error::ERROR_CODES.len())
                .map(|i| self.sum(|s| s.error_replies[i].get()))
                .collect(),
        }
    }
}
