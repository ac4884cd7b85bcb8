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
    /// Error replies sent with a code not in `ERROR_CODES` (a script's
    /// own, say), by code in the order first seen, up to
    /// [`MAX_ERROR_CODES`] codes (Redis's `ERRORSTATS_LIMIT`); rare, so
    /// behind a lock.
    pub other_error_codes: Mutex<Vec<(String, u64)>>,
    /// Batches received from other threads.
    pub batches_in: Counter,
    /// Run time of sampled calls (one in [`crate::latency::SAMPLE_EVERY`])
    /// per command, indexed like the command table.
    pub latency: Vec<crate::latency::Histogram>,
    /// Rate-limit decisions per command and outcome, indexed by
    /// [`RateCommand`] and [`RateOutcome`].
    pub rate_decisions: [[Counter; RateOutcome::ALL.len()]; RateCommand::ALL.len()],
    /// Hot keys split by this shard (their owner).
    pub hotkey_splits: Counter,
    /// Split keys merged back by this shard.
    pub hotkey_merges: Counter,
    /// TOKENLEASE calls this shard granted from its slot of a split key.
    pub hotkey_local_grants: Counter,
    /// Calls on a split key this shard could not serve from its slot and
    /// sent to the owner.
    pub hotkey_borrows: Counter,
    /// Gathers of a split key's slots by this shard (its owner).
    pub hotkey_gathers: Counter,
    /// Split keys this shard owns now.
    pub hotkey_split_keys: Counter,
    /// Cluster mode's refusals answered by this thread, indexed by
    /// [`Redirect`].
    pub cluster_redirects: [Counter; Redirect::ALL.len()],
    /// PUBLISH calls run on this thread.
    pub pubsub_published: Counter,
    /// Messages this thread appended to its subscribers' output (one per
    /// receiver: a channel subscriber, or a matching pattern subscription).
    pub pubsub_delivered: Counter,
}

/// The answers of cluster mode that send a request elsewhere or refuse it,
/// as counted per thread: those of its one decision before any shard runs
/// (`dispatch::cluster_check`) and those of a slot in migration, decided on
/// the shard holding the keys (`shard::moving`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirect {
    /// `-MOVED <slot> <host>:<port>`.
    Moved,
    /// `-CROSSSLOT`: a request's keys (or a transaction's) in several slots.
    CrossSlot,
    /// `-CLUSTERDOWN Hash slot not served`.
    ClusterDown,
    /// `-ASK <slot> <host>:<port>`: a key of a slot migrating from here
    /// that has already left (decided on the shard holding the keys).
    Ask,
    /// `-TRYAGAIN`: a multi-key request on a slot in migration with some
    /// of its keys here and some not.
    TryAgain,
}

impl Redirect {
    /// Every one, in index order.
    pub const ALL: [Redirect; 5] = [
        Redirect::Moved,
        Redirect::CrossSlot,
        Redirect::ClusterDown,
        Redirect::Ask,
        Redirect::TryAgain,
    ];

    /// The kind's label: the error code, lower case.
    pub fn label(self) -> &'static str {
        match self {
            Redirect::Moved => "moved",
            Redirect::CrossSlot => "crossslot",
            Redirect::ClusterDown => "clusterdown",
            Redirect::Ask => "ask",
            Redirect::TryAgain => "tryagain",
        }
    }

    /// The kind of cluster mode's refusal `e`, `None` for another error.
    pub fn of(e: &OpError) -> Option<Redirect> {
        match e {
            OpError::Moved { .. } => Some(Redirect::Moved),
            OpError::ClusterCrossSlot => Some(Redirect::CrossSlot),
            OpError::ClusterDown => Some(Redirect::ClusterDown),
            OpError::Ask { .. } => Some(Redirect::Ask),
            OpError::TryAgain => Some(Redirect::TryAgain),
            _ => None,
        }
    }
}

/// The rate-limit commands whose decisions are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateCommand {
    /// TOKENLEASE.
    TokenLease,
    /// SLIDINGWINDOW.
    SlidingWindow,
    /// CL.THROTTLE.
    ClThrottle,
    /// GCRA.
    Gcra,
}

impl RateCommand {
    /// Every one, in index order.
    pub const ALL: [RateCommand; 4] = [
        RateCommand::TokenLease,
        RateCommand::SlidingWindow,
        RateCommand::ClThrottle,
        RateCommand::Gcra,
    ];

    /// The command's name, lower case.
    pub fn name(self) -> &'static str {
        match self {
            RateCommand::TokenLease => "tokenlease",
            RateCommand::SlidingWindow => "slidingwindow",
            RateCommand::ClThrottle => "cl.throttle",
            RateCommand::Gcra => "gcra",
        }
    }
}

/// How a rate-limit decision went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateOutcome {
    /// Everything asked was granted.
    Granted,
    /// Less than asked, but at least the minimum (TOKENLEASE with MIN).
    Partial,
    /// Nothing was granted.
    Denied,
}

impl RateOutcome {
    /// Every one, in index order.
    pub const ALL: [RateOutcome; 3] = [
        RateOutcome::Granted,
        RateOutcome::Partial,
        RateOutcome::Denied,
    ];

    /// The outcome's label.
    pub fn label(self) -> &'static str {
        match self {
            RateOutcome::Granted => "granted",
            RateOutcome::Partial => "partial",
            RateOutcome::Denied => "denied",
        }
    }

    /// The outcome of granting `granted` of `asked`.
    pub fn of(granted: u64, asked: u64) -> RateOutcome {
        match granted {
            0 => RateOutcome::Denied,
            g if g >= asked => RateOutcome::Granted,
            _ => RateOutcome::Partial,
        }
    }
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

    /// Counts `e` if it is one of cluster mode's refusals (owner thread
    /// only; see [`Redirect`]).
    pub fn count_redirect(&self, e: &OpError) {
        if let Some(r) = Redirect::of(e) {
            self.cluster_redirects[r as usize].add(1);
        }
    }

    /// Counts one rate-limit decision that asked for `asked` (tokens, hits,
    /// cells); a peek (`asked` 0) decides nothing and is not counted (owner
    /// thread only).
    pub fn count_decision(&self, cmd: RateCommand, outcome: RateOutcome, asked: u64) {
        if asked > 0 {
            self.rate_decisions[cmd as usize][outcome as usize].add(1);
        }
    }

    /// Counts a reply about to be sent if it is an error (owner thread only).
    pub fn count_reply(&self, reply: &Reply) {
        let Reply::Error(text) = reply else {
            return;
        };
        self.total_error_replies.add(1);
        if let Some(i) = crate::error::error_code_index(reply) {
            self.error_replies[i].add(1);
            return;
        }
        let code = text.split(' ').next().unwrap_or("");
        let mut other = self.other_error_codes.lock();
        if let Some((_, n)) = other.iter_mut().find(|(c, _)| c == code) {
            *n += 1;
        } else if other.len() < MAX_ERROR_CODES {
            other.push((code.to_string(), 1));
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
            other_error_codes: Mutex::new(Vec::new()),
            batches_in: Counter::default(),
            latency: (0..commands).map(|_| Default::default()).collect(),
            rate_decisions: Default::default(),
            hotkey_splits: Counter::default(),
            hotkey_merges: Counter::default(),
            hotkey_local_grants: Counter::default(),
            hotkey_borrows: Counter::default(),
            hotkey_gathers: Counter::default(),
            hotkey_split_keys: Counter::default(),
            cluster_redirects: Default::default(),
            pubsub_published: Counter::default(),
            pubsub_delivered: Counter::default(),
        }
    }
}

/// Most error codes outside `ERROR_CODES` INFO errorstats tracks per
/// thread, as Redis tracks at most 128.
pub const MAX_ERROR_CODES: usize = 128;

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
    /// In MONITOR mode (CLIENT LIST flag `O`).
    pub monitor: AtomicBool,
    /// Its buffers' sizes as its thread last saw them (CLIENT LIST).
    pub buffers: Buffers,
    /// The ACL user it is authenticated as (CLIENT LIST `user`; ACL
    /// DELUSER closes its connections).
    pub user: Mutex<String>,
}

/// A connection's buffers, bytes, as CLIENT LIST names them, written by
/// the connection's thread after it serves or writes the connection.
#[derive(Debug, Default)]
pub struct Buffers {
    /// `qbuf`: input read and not yet run.
    pub qbuf: AtomicU64,
    /// `qbuf-free`: room left in the read buffer.
    pub qbuf_free: AtomicU64,
    /// `rbs`: the read buffer's size.
    pub rbs: AtomicU64,
    /// `obl`: encoded replies not yet written.
    pub obl: AtomicU64,
    /// `oll`: 1 while pushed messages wait behind replies still owed, else 0.
    pub oll: AtomicU64,
    /// `omem`: bytes of those waiting messages.
    pub omem: AtomicU64,
    /// `tot-mem`: every buffer's allocation together.
    pub tot_mem: AtomicU64,
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
    /// AUTH (and HELLO AUTH) attempts with a wrong user or password (INFO
    /// `acl_access_denied_auth`).
    pub auth_failures: AtomicU64,
    /// Requests refused by ACL, indexed by [`AclDenied`] (INFO
    /// `acl_access_denied_cmd`, `_key`, `_channel`); counted off the hot
    /// path (a restricted user's refusal, which also takes the ACL LOG's
    /// lock).
    pub acl_denied: [AtomicU64; AclDenied::ALL.len()],
    /// Connections accepted on the TLS port (also in
    /// `total_connections_received`).
    pub tls_connections_received: AtomicU64,
    /// TLS connections closed because their handshake failed (garbage, a
    /// plain-text client, a refused certificate, an alert from the peer).
    pub tls_handshake_failures: AtomicU64,
    /// Failures already named in the log (it says at most one line per
    /// [`AUTH_LOG_EVERY_MS`], with the count since the last one).
    pub auth_failures_logged: AtomicU64,
    /// When the last AUTH failure line was logged, monotonic ms.
    pub auth_logged_at_ms: AtomicU64,
    /// Connections accepted and sent to another thread, not yet in the
    /// client list: maxclients counts them, so a connection storm cannot
    /// pass it while they are on their way.
    pub handing_over: std::sync::atomic::AtomicUsize,
}

/// Why ACL refused a request, as ACL LOG's `reason` says it (a failed
/// login, `auth`, is [`ServerCounters::auth_failures`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AclDenied {
    /// The user may not run the command (or subcommand).
    Command,
    /// The user may not read or write one of its keys.
    Key,
    /// The user may not publish or subscribe to one of its channels.
    Channel,
}

impl AclDenied {
    /// Every one, in index order.
    pub const ALL: [AclDenied; 3] = [AclDenied::Command, AclDenied::Key, AclDenied::Channel];

    /// ACL LOG's `reason` for it.
    pub fn reason(self) -> &'static str {
        match self {
            AclDenied::Command => "command",
            AclDenied::Key => "key",
            AclDenied::Channel => "channel",
        }
    }
}

/// The least time between two log lines about failed AUTH attempts, ms: a
/// password guesser cannot flood the log.
pub const AUTH_LOG_EVERY_MS: u64 = 10_000;

impl ServerCounters {
    /// Counts a failed AUTH from `addr`, logging it unless a line was
    /// logged in the last [`AUTH_LOG_EVERY_MS`] (`now_ms` monotonic).
    pub fn auth_failed(&self, addr: &str, now_ms: u64) {
        let total = self.auth_failures.fetch_add(1, Ordering::Relaxed) + 1;
        let last = self.auth_logged_at_ms.load(Ordering::Relaxed);
        let due = last == 0 || now_ms.saturating_sub(last) >= AUTH_LOG_EVERY_MS;
        if due
            && self
                .auth_logged_at_ms
                .compare_exchange(last, now_ms.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let before = self.auth_failures_logged.swap(total, Ordering::Relaxed);
            tracing::warn!(
                "AUTH failed from {addr} ({} failed attempts since the last report, {total} in all)",
                total - before
            );
        }
    }
}

/// Keeps a command split over shards (a cross-shard MGET, MSET, DEL, ...:
/// one part per shard, each run when its shard takes it) and a transaction
/// over several shards from straddling each other, so that no split
/// command sees one shard before a transaction and another after it.
///
/// A split command, before its parts go out, adds them to its thread's
/// `started` count and then reads `locked`: with no transaction over
/// several shards in progress it goes ahead (its parts are counted `done`
/// as their answers come back); otherwise it runs as a transaction of one
/// command, under the shard locks (its parts are counted `done` at once,
/// never having gone out). A transaction over several shards adds itself
/// to `locked`, then asks for its first lock only once it has seen, on
/// every thread, a moment with no split part in flight (`done` read first
/// has reached `started` read after it): the split commands begun before
/// it have run. Waiting for `done` to reach a snapshot of `started` would
/// not do: the parts of split commands that took the locked path after
/// the snapshot are counted `done` at once, ahead of a part still in
/// flight. Both sides write first and read second, sequentially
/// consistent, so at least one sees the other. The cost for a split
/// command is one shared load and two counts on its own thread's cache
/// line.
#[derive(Debug)]
pub struct SplitGate {
    locked: AtomicUsize,
    started: Box<[PaddedCount]>,
    done: Box<[PaddedCount]>,
}

/// A counter on a cache line of its own (written by one thread).
#[derive(Debug, Default)]
#[repr(align(64))]
struct PaddedCount(AtomicU64);

impl SplitGate {
    /// A gate for `threads` threads.
    pub fn new(threads: usize) -> SplitGate {
        let counts = || (0..threads).map(|_| PaddedCount::default()).collect();
        SplitGate {
            locked: AtomicUsize::new(0),
            started: counts(),
            done: counts(),
        }
    }

    /// Thread `thread` is about to send `parts` parts of a split command:
    /// true when it may (they are counted until [`SplitGate::answered`]),
    /// false when it must run under the shard locks instead.
    pub fn enter(&self, thread: usize, parts: u64) -> bool {
        self.started[thread].0.fetch_add(parts, Ordering::SeqCst);
        if self.locked.load(Ordering::SeqCst) == 0 {
            return true;
        }
        self.done[thread].0.fetch_add(parts, Ordering::SeqCst);
        false
    }

    /// Counts `parts` parts a thread sends whatever happens (the
    /// replication link's, which never takes the locked path).
    pub fn count(&self, thread: usize, parts: u64) {
        self.started[thread].0.fetch_add(parts, Ordering::SeqCst);
    }

    /// `parts` parts sent by thread `thread` were answered. True when a
    /// transaction waits ([`SplitGate::begin`]) and this thread has none in
    /// flight now: the waiting transaction's thread may go on (see
    /// [`Shared::split_answered`]).
    pub fn answered(&self, thread: usize, parts: u64) -> bool {
        let done = self.done[thread].0.fetch_add(parts, Ordering::SeqCst) + parts;
        self.locked.load(Ordering::SeqCst) > 0
            && done >= self.started[thread].0.load(Ordering::SeqCst)
    }

    /// A transaction over several shards begins: while the guard lives,
    /// split commands take the locked path; it waits until
    /// [`SplitGate::drained`] before its first lock.
    pub fn begin(self: &Arc<Self>) -> GateGuard {
        self.locked.fetch_add(1, Ordering::SeqCst);
        GateGuard(self.clone())
    }

    /// Whether, since the call to [`SplitGate::begin`] before it, every
    /// thread had a moment with no split part in flight: each thread's
    /// `done` is read before its `started`, so `done >= started` means
    /// every part begun by the time of the first read was answered.
    /// Parts counted later (the replication link's, a busy shard's
    /// neighbours') can postpone this, never make it come early.
    pub fn drained(&self) -> bool {
        self.done.iter().zip(self.started.iter()).all(|(d, s)| {
            let done = d.0.load(Ordering::SeqCst);
            done >= s.0.load(Ordering::SeqCst)
        })
    }
}

/// A transaction over several shards in progress (see [`SplitGate`]);
/// dropped when it ends.
#[derive(Debug)]
pub struct GateGuard(Arc<SplitGate>);

impl Drop for GateGuard {
    fn drop(&mut self) {
        self.0.locked.fetch_sub(1, Ordering::SeqCst);
    }
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
    /// The drain before a shutdown (SIGTERM, SIGINT): no connection is
    /// accepted and no new request decoded, while what was read runs and
    /// its replies are written. Cleared again if the shutdown is called off
    /// (a failed snapshot).
    pub input_stopped: AtomicBool,
    /// Per thread, while input is stopped: its connections owe nothing and
    /// its mailbox is empty (see [`Shared::drained`]).
    pub quiet: Vec<AtomicBool>,
    /// Bytes allocated are past `maxmemory`: `denyoom` commands are refused.
    /// Refreshed by thread 0's timer, `hz` times a second.
    pub over_maxmemory: AtomicBool,
    /// Split commands against transactions over several shards.
    pub split_gate: Arc<SplitGate>,
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
    /// The connections in MONITOR mode.
    pub monitors: crate::monitor::Monitors,
    /// Per shard, the value a command spanning shards (cross-shard RENAME,
    /// COPY) is moving out of it (`commands/span.rs`).
    pub parcels: Vec<Parcel>,
    /// Script bodies by SHA1 and each shard's script run state (SCRIPT
    /// LOAD, EVALSHA, BUSY, SCRIPT KILL).
    pub scripts: crate::script::cache::ScriptCache,
    /// Where SHUTDOWN and the signals ask for the drain, the snapshot and
    /// the stop (carried out by the runtime's shutdown thread).
    pub shutdown: ShutdownDesk,
    /// Cluster mode's topology (`cluster-enabled yes`); `None` when off,
    /// which is the one test the dispatcher's hot path makes for it.
    pub cluster: Option<Arc<crate::cluster::ClusterState>>,
    /// The ACL users and the ACL log. A change bumps `config_gen`, so
    /// connections look their user up again.
    pub acl: RwLock<crate::acl::Users>,
    /// The split hot keys (`docs/hotkeys.md`).
    pub hot: HotRegistry,
}

/// Whether a shutdown writes a snapshot first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownSave {
    /// When `save` rules are set (SHUTDOWN alone, SIGTERM, SIGINT).
    Rules,
    /// Always (SHUTDOWN SAVE).
    Always,
    /// Never (SHUTDOWN NOSAVE).
    Never,
}

/// A request to stop the server: drain, save as `save` says, stop.
#[derive(Debug)]
pub struct ShutdownRequest {
    /// Whether a snapshot is written first.
    pub save: ShutdownSave,
    /// Stop even when that snapshot fails (SHUTDOWN FORCE); otherwise a
    /// failed snapshot calls the shutdown off, as in Redis.
    pub force: bool,
    /// Where a SHUTDOWN connection waits for the outcome (`Ok` once the
    /// stop began); none for a signal.
    pub ticket: Option<Arc<crate::persist::status::Ticket>>,
}

/// The one place shutdown requests wait for the thread that carries them
/// out, so that SHUTDOWN and the signals drain and save the same way.
#[derive(Debug, Default)]
pub struct ShutdownDesk {
    pending: Mutex<Option<ShutdownRequest>>,
    wake: parking_lot::Condvar,
    staffed: AtomicBool,
}

impl ShutdownDesk {
    /// Says a thread now serves the desk (the runtime's shutdown thread);
    /// without one (the in-process harness) SHUTDOWN stops at once.
    pub fn staff(&self) {
        self.staffed.store(true, Ordering::SeqCst);
    }

    /// Whether a thread serves the desk.
    pub fn staffed(&self) -> bool {
        self.staffed.load(Ordering::SeqCst)
    }

    /// Posts `request`; a request already waiting is kept, and `request`
    /// is refused (returned).
    pub fn post(&self, request: ShutdownRequest) -> Result<(), ShutdownRequest> {
        let mut pending = self.pending.lock();
        if pending.is_some() {
            return Err(request);
        }
        *pending = Some(request);
        self.wake.notify_all();
        Ok(())
    }

    /// The next request, waiting at most `timeout` for one.
    pub fn next(&self, timeout: std::time::Duration) -> Option<ShutdownRequest> {
        let mut pending = self.pending.lock();
        if pending.is_none() {
            self.wake.wait_for(&mut pending, timeout);
        }
        pending.take()
    }
}

/// The rate-limit keys split over the shards, server-wide. Only their
/// owners change it (a split, a merge), under the write lock, bumping the
/// generation; each shard copies it into its own table when the generation
/// moved (one atomic load per clock tick), so no command takes the lock.
#[derive(Debug, Default)]
pub struct HotRegistry {
    gen: AtomicU64,
    keys: RwLock<hashbrown::HashMap<bytes::Bytes, Arc<crate::ratelimit::split::Split>>>,
}

impl HotRegistry {
    /// The generation: moves at every change.
    pub fn generation(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }

    /// A copy of the split keys, and the generation it was taken at.
    pub fn snapshot(
        &self,
    ) -> (
        u64,
        hashbrown::HashMap<bytes::Bytes, Arc<crate::ratelimit::split::Split>>,
    ) {
        let keys = self.keys.read();
        (self.gen.load(Ordering::Acquire), keys.clone())
    }

    /// Adds (`Some`) or removes (`None`) the split of `key`.
    pub fn set(&self, key: &bytes::Bytes, split: Option<Arc<crate::ratelimit::split::Split>>) {
        let mut keys = self.keys.write();
        match split {
            Some(s) => keys.insert(key.clone(), s),
            None => keys.remove(key),
        };
        self.gen.fetch_add(1, Ordering::AcqRel);
    }
}

/// One value on its way out of a shard to another: only the transaction
/// holding that shard fills or empties its slot.
pub type Parcel = Mutex<Option<crate::store::Moved>>;

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("shards", &self.shards)
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Stops (`yes`) or resumes input on every thread (see
    /// [`Shared::input_stopped`]).
    pub fn stop_input(&self, yes: bool) {
        for q in &self.quiet {
            q.store(false, Ordering::SeqCst);
        }
        self.input_stopped.store(yes, Ordering::SeqCst);
        for bell in &self.doorbells {
            bell.wake();
        }
    }

    /// Thread `thread`'s split command parts were answered
    /// ([`SplitGate::answered`]); when a transaction over several shards
    /// may be waiting for exactly that, the other threads' loops are woken
    /// to look ([`crate::turn::Turn::check_draining`]) instead of finding
    /// it at their next millisecond.
    pub fn split_answered(&self, thread: usize, parts: u64) {
        if self.split_gate.answered(thread, parts) {
            for (i, bell) in self.doorbells.iter().enumerate() {
                if i != thread {
                    bell.ring();
                }
            }
        }
    }

    /// Whether every thread has said, since input stopped, that it owes
    /// nothing.
    pub fn drained(&self) -> bool {
        self.quiet.iter().all(|q| q.load(Ordering::SeqCst))
    }

    /// Whether `DENYOOM` commands are refused (`-OOM`): used memory is past
    /// `maxmemory` and this node is not a replica (a replica ignores
    /// maxmemory, as Redis's does with `replica-ignore-maxmemory yes`).
    pub fn refuses_oom(&self) -> bool {
        !self.repl.is_replica() && self.over_maxmemory.load(Ordering::Relaxed)
    }

    /// `MISCONF` while snapshots or the append-only log fail (see
    /// `Persistence::refuse_writes`), the refusal Redis 7 gives PING as
    /// well as writes, so that Sentinel, which takes only `PONG` (or
    /// `LOADING`, `MASTERDOWN`) for a live node, sees such a primary fail.
    pub fn persistence_refusal(&self) -> Option<OpError> {
        match self.persist.refuse_writes.load(Ordering::Relaxed) {
            0 => None,
            crate::persist::status::REFUSE_LOG => Some(OpError::MisconfLog),
            _ => Some(OpError::Misconf),
        }
    }

    /// Why a write must be refused now, in Redis 7's order: while
    /// snapshots or the append-only log fail (`MISCONF`, see
    /// `Persistence::refuse_writes`), then on a replica (`READONLY`).
    pub fn write_refusal(&self) -> Option<OpError> {
        match self.persistence_refusal() {
            None if self.repl.is_replica() => Some(OpError::ReadOnly),
            refusal => refusal,
        }
    }
}

impl Shared {
    /// Starts shutdown: every thread stops accepting and exits its loop;
    /// a script past `busy-reply-threshold` stops at its next check, even
    /// one that has written (SHUTDOWN NOSAVE is Redis's way out of an
    /// unkillable script).
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        self.scripts.stop_all();
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
    /// Error replies per other code (see `ShardStats::other_error_codes`).
    pub other_codes: Vec<(String, u64)>,
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
            other_codes: self.other_error_codes(),
        }
    }

    /// Error replies per code outside `ERROR_CODES`, summed over threads,
    /// in the order the codes were first seen (thread by thread).
    pub fn other_error_codes(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = Vec::new();
        for s in &self.shard_stats {
            for (code, n) in s.other_error_codes.lock().iter() {
                match out.iter_mut().find(|(c, _)| c == code) {
                    Some((_, m)) => *m += n,
                    None => out.push((code.clone(), *n)),
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::SplitGate;
    use std::sync::Arc;

    // Thread 0 sends one part of a split MGET (in flight), then a
    // transaction over several shards begins, then thread 0 plans another
    // split command, which takes the locked path: the first part is still
    // unanswered, so the transaction must not take its first lock yet.
    #[test]
    fn a_split_part_in_flight_holds_a_transaction_back() {
        let gate = Arc::new(SplitGate::new(2));
        assert!(gate.enter(0, 1), "no transaction: the MGET goes split");
        let _guard = gate.begin();
        assert!(!gate.drained(), "the MGET's part is in flight");
        assert!(
            !gate.enter(0, 1),
            "a transaction runs: the next one is locked"
        );
        assert!(!gate.drained(), "the first MGET's part is still in flight");
        gate.answered(0, 1);
        assert!(gate.drained(), "every part begun before it was answered");
    }
}
