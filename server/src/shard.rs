//! A shard: one thread's part of the keyspace, what its command handlers
//! see, and the mailbox other threads reach it through.
//!
//! Each thread owns one [`Shard`] in a `RefCell` (inside its [`Worker`]):
//! only that thread ever touches the keyspace, so no lock guards it. Other
//! threads send it [`Msg::Batch`]es of commands for keys it owns; each batch
//! holds all the commands for this shard from one turn of the sender's event
//! loop, over every connection that was readable in it (handing commands
//! over one at a time costs more than not sharding at all), and its replies
//! go back in one [`Msg::Replies`]. The loop that drains the mailbox lives in
//! `net`, the routing of replies back to connections in `turn`.
//!
//! The `RefCell` is borrowed only inside synchronous code (one command or one
//! batch at a time), so a borrow can never fail.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_protocol::{Args, Protocol, Reply};

use crate::clock::Now;
use crate::error::OpError;
use crate::state::{Doorbell, ShardStats, Shared};
use crate::store::{ImageSink, ImageStep, Store};

pub mod hot;
pub mod moving;
mod tx;
pub use tx::{TxId, TxMsg};

/// A handler that runs on the shard owning its keys.
pub type ShardFn = fn(&mut Shard, &mut Args) -> Result<Reply, OpError>;

/// The configuration a shard-side handler may read, refreshed from the live
/// configuration at each [`Shard::tick`] after a CONFIG SET.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardConf {
    /// `proto-max-bulk-len`: the longest string a write may build, bytes.
    pub proto_max_bulk_len: usize,
    /// `busy-reply-threshold`: how long a script runs before other threads
    /// see its shard busy, milliseconds.
    pub busy_reply_threshold_ms: u64,
    /// `hash-max-listpack-entries` and `hash-max-listpack-value`.
    pub hash_limits: crate::collections::hash::Limits,
    /// `list-max-listpack-size`, for lists created from now on.
    pub list_fill: i32,
    /// `set-max-intset-entries`, `set-max-listpack-entries` and
    /// `set-max-listpack-value`.
    pub set_limits: crate::collections::set::Limits,
    /// `zset-max-listpack-entries` and `zset-max-listpack-value`.
    pub zset_limits: crate::collections::zset::Limits,
}

/// One shard: its keyspace plus what its handlers need. Handlers see this
/// and nothing server-wide.
pub struct Shard {
    /// This shard's index.
    pub id: usize,
    /// Number of shards in the server (to map slots to shards).
    pub shards: usize,
    /// The keyspace.
    pub store: Store,
    /// The clock reading for the command being run (one snapshot per turn or batch).
    pub now: Now,
    /// The configuration handlers read.
    pub conf: ShardConf,
    /// This thread's statistics.
    pub stats: Arc<ShardStats>,
    /// Server-wide state: the clock and the configuration `conf` comes from.
    shared: Arc<Shared>,
    /// The configuration generation `conf` was read at.
    config_gen: u64,
    /// Locked by a transaction over several shards: the turn runs only its
    /// jobs here, publishing and active expiry wait until it is released.
    pub locked: bool,
    /// Counted calls until the next one is timed (see
    /// [`crate::latency::SAMPLE_EVERY`]).
    until_timed: u32,
    /// Hot keys: the detector, the split keys (`docs/hotkeys.md`).
    pub hot: hot::HotTable,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("id", &self.id)
            .field("store", &self.store)
            .finish()
    }
}

/// One command bound for a shard: its table index, its handler and its
/// arguments.
#[derive(Debug)]
pub struct Job {
    /// Index in the command table (for statistics).
    pub cmd: usize,
    /// The handler, looked up once by the dispatcher.
    pub run: ShardFn,
    /// Whether this shard counts the call in its statistics: false for one
    /// part of a command split over shards, which the connection's thread
    /// counts once, after merging the parts' replies.
    pub counted: bool,
    /// Whether the command comes from the replication link (every present
    /// key is live to it; see `Store::set_from_link`).
    pub link: bool,
    /// The arguments, name included.
    pub args: Args,
}

/// A full sync's cut, sent to every shard: each publishes what it wrote
/// so far, holds later effects, starts its image into `sink`, and names
/// itself on `cut`.
#[derive(Debug)]
pub struct Cut {
    /// Where the shard's image goes.
    pub sink: ImageSink,
    /// Where the shard reports that it has cut.
    pub cut: crossbeam_channel::Sender<usize>,
    /// Set by a shard whose held effects pass half its ring before the
    /// release: the cut gives up.
    pub over: Arc<AtomicBool>,
}

/// A replication link's connection, handed to a thread's event loop once
/// its handshake is done.
#[derive(Debug)]
pub struct LinkStart {
    /// The connection to the primary.
    pub stream: std::net::TcpStream,
    /// Bytes read past the PSYNC answer.
    pub leftover: bytes::BytesMut,
    /// `Some(offset)` for a full sync taken at that offset (a payload
    /// follows), `None` for a partial resync (the stream follows).
    pub full: Option<u64>,
}

/// A message to a thread's mailbox.
#[derive(Debug)]
pub enum Msg {
    /// A newly accepted connection for this thread to serve, with its TLS
    /// session when it came to the TLS port.
    Conn(std::net::TcpStream, Option<crate::tls::Session>),
    /// The replication link's connection, for this thread to serve.
    Link(LinkStart),
    /// A full sync cuts this shard (see [`Cut`]).
    Cut(Cut),
    /// Records of a snapshot or append-only log loaded at the start, for
    /// this shard to apply in order; the count of those that failed goes
    /// back on `done`.
    Apply {
        /// The records as jobs (never counted, seen as the link's).
        jobs: Vec<Job>,
        /// Where the count of failed records goes.
        done: crossbeam_channel::Sender<u64>,
    },
    /// The full sync's cut is over on every shard: publish again.
    Release,
    /// Commands for this shard from thread `from`; their answers go back to
    /// it as one [`Msg::Replies`], in order.
    Batch {
        /// The sending thread.
        from: usize,
        /// The commands, in the order they run.
        jobs: Vec<Job>,
        /// The jobs whose reply this shard writes to the connection itself.
        direct: Vec<Direct>,
    },
    /// The answers to the oldest [`Msg::Batch`] this thread sent to shard
    /// `from` that is not answered yet (a mailbox is first in, first out),
    /// one per job, in order.
    Replies {
        /// The shard that ran the batch.
        from: usize,
        /// One answer per job.
        answers: Vec<Answer>,
    },
    /// A transaction's step (see [`TxMsg`]).
    Tx(TxMsg),
    /// A PUBLISH's message for this thread's subscribers.
    Publish(crate::pubsub::Publish),
    /// Monitor lines for this thread's monitors.
    Monitor(crate::monitor::Feed),
}

/// What a shard answers for one job of a batch.
#[derive(Debug)]
pub enum Answer {
    /// The reply, for the connection's thread to encode and write.
    Reply(Reply),
    /// The reply was written to the connection (see [`Direct`]).
    Sent,
    /// The reply was written in part: these are its remaining bytes, for the
    /// connection's thread to write first.
    Rest(Bytes),
}

/// A connection's socket as a shard may write to it: whatever it takes
/// right now, never blocking.
pub trait ReplySink: Send + Sync + std::fmt::Debug {
    /// Writes a prefix of `bytes`; returns its length (0 when the socket
    /// takes nothing now).
    ///
    /// # Errors
    /// The socket failed (the connection's own thread sees it too).
    fn write_now(&self, bytes: &[u8]) -> std::io::Result<usize>;
}

/// Leave for the shard running job `job` of a batch to write its reply to
/// the connection itself, sparing the hop back: given only when that reply
/// is the one reply the connection waits for and nothing is left to write
/// before it, so request order holds.
#[derive(Debug)]
pub struct Direct {
    /// Index of the job in its batch.
    pub job: usize,
    /// The connection's socket.
    pub sink: Arc<dyn ReplySink>,
    /// The connection's RESP version.
    pub proto: Protocol,
    /// Who acts second, the shard done writing or the connection's thread
    /// seeing the connection readable again, makes sure the connection's
    /// thread takes the answer (see [`Handoff`]).
    pub handoff: Arc<Handoff>,
}

/// The meeting point of a [`Direct`] write: the shard marks it done after
/// posting its answer; the connection's thread marks it wanted when the
/// connection becomes readable while the answer is not in yet. Whoever comes
/// second acts: the shard rings the connection's thread, or that thread
/// takes the answer already in its mailbox at its next turn.
#[derive(Debug, Default)]
pub struct Handoff(AtomicU8);

impl Handoff {
    const DONE: u8 = 1;
    const WANTED: u8 = 2;

    /// The shard posted its answer. True when the connection's thread
    /// wanted it first and must be rung.
    pub fn done(&self) -> bool {
        self.0.swap(Self::DONE, Ordering::AcqRel) == Self::WANTED
    }

    /// The connection's thread wants the answer. True when it is already
    /// posted (the thread takes it from its mailbox at its next turn).
    pub fn want(&self) -> bool {
        self.0.swap(Self::WANTED, Ordering::AcqRel) == Self::DONE
    }
}

/// The way into one thread's event loop: its channel and its doorbell.
#[derive(Debug, Clone)]
pub struct Mailbox {
    tx: crossbeam_channel::Sender<Msg>,
    bell: Arc<Doorbell>,
}

impl Mailbox {
    /// A mailbox sending on `tx` and ringing `bell`.
    pub fn new(tx: crossbeam_channel::Sender<Msg>, bell: Arc<Doorbell>) -> Mailbox {
        Mailbox { tx, bell }
    }

    /// Queues `msg` and wakes the thread if it sleeps. False when the
    /// thread has exited (shutdown).
    pub fn send(&self, msg: Msg) -> bool {
        let sent = self.post(msg);
        self.bell.ring();
        sent
    }

    /// Queues `msg` without waking the thread: it is seen at the thread's
    /// next turn, or when the sender calls [`Mailbox::ring`]. False when the
    /// thread has exited (shutdown).
    pub fn post(&self, msg: Msg) -> bool {
        self.tx.send(msg).is_ok()
    }

    /// Whether messages wait in the mailbox, not yet taken by its thread.
    pub fn pending(&self) -> bool {
        !self.tx.is_empty()
    }

    /// Wakes the thread if it sleeps.
    pub fn ring(&self) {
        self.bell.ring();
    }
}

impl Shard {
    /// A shard owning `store`.
    pub fn new(id: usize, store: Store, shared: Arc<Shared>) -> Shard {
        let stats = shared.shard_stats[id].clone();
        let now = shared.clock.now();
        let mut store = store;
        store.effects_mut().attach(shared.repl.clone());
        let mut shard = Shard {
            id,
            shards: shared.shards,
            store,
            now,
            conf: ShardConf {
                proto_max_bulk_len: 0,
                busy_reply_threshold_ms: 0,
                hash_limits: Default::default(),
                list_fill: crate::collections::list::DEFAULT_FILL,
                set_limits: Default::default(),
                zset_limits: Default::default(),
            },
            stats,
            shared,
            config_gen: u64::MAX,
            locked: false,
            until_timed: 0,
            hot: hot::HotTable::default(),
        };
        shard.tick();
        shard
    }

    /// Reads the clocks into [`Shard::now`] (and the configuration into
    /// [`Shard::conf`] if CONFIG SET changed it). Called once per turn of the
    /// thread's event loop (inline commands), after a connection command,
    /// and once per batch (commands from other threads):
    /// every command in it sees one snapshot, and the clock costs nothing
    /// per command.
    pub fn tick(&mut self) {
        self.now = self.shared.clock.now();
        self.store.set_clock(self.now);
        self.store.set_replica(self.shared.repl.is_replica());
        let gen = self.shared.config_gen.load(Ordering::Acquire);
        if gen != self.config_gen {
            let c = self.shared.config.read();
            self.conf.proto_max_bulk_len = c.limits.proto_max_bulk_len;
            self.conf.busy_reply_threshold_ms = c.limits.busy_reply_threshold;
            self.conf.hash_limits = crate::collections::hash::Limits {
                max_entries: c.collections.hash_max_listpack_entries,
                max_value: c.collections.hash_max_listpack_value,
            };
            self.conf.list_fill = c.collections.list_max_listpack_size;
            self.conf.set_limits = crate::collections::set::Limits {
                max_intset_entries: c.collections.set_max_intset_entries,
                max_pack_entries: c.collections.set_max_listpack_entries,
                max_pack_value: c.collections.set_max_listpack_value,
            };
            self.conf.zset_limits = crate::collections::zset::Limits {
                max_entries: c.collections.zset_max_listpack_entries,
                max_value: c.collections.zset_max_listpack_value,
            };
            let r = &c.ratelimit;
            self.hot.conf = hot::HotConf {
                split: r.hotkey_split,
                share_pct: r.hotkey_split_share,
                min_rate: r.hotkey_min_rate,
                merge_rate: r.hotkey_merge_rate,
                cooldown_ms: r.hotkey_cooldown,
            };
            self.config_gen = gen;
        }
        self.hot_refresh();
        if !self.locked {
            self.hot_cycle();
        }
    }

    /// The wall clock read at this call, Unix ms (never before
    /// [`Shard::now`]): what relative times count from, as Redis 7.0 reads
    /// `mstime()` for them: EXPIRE's and SET EX's deadlines, whether an
    /// EXPIRE or GETEX deadline has passed, TTL's remaining time. Whether a
    /// key has expired is still judged at the snapshot, so in a long script
    /// keys do not expire under it, yet an EXPIRE at its end counts from
    /// that call, not from the script's start.
    pub fn wall_ms(&self) -> u64 {
        (self.shared.clock.unix_us() / 1000).max(self.now.unix_ms)
    }

    /// Runs one shard-side command under the snapshot of the last
    /// [`Shard::tick`]: calls the handler and, when `counted`, counts the
    /// call (a part of a command split over shards is not counted here: the
    /// whole command is counted once, after the merge; see [`Job::counted`]).
    /// The keyspace counters are published once per batch and per flush, not
    /// per command.
    pub fn run(
        &mut self,
        cmd: usize,
        run: ShardFn,
        counted: bool,
        link: bool,
        args: &mut Args,
    ) -> Reply {
        self.store.set_from_link(link);
        // A slot in migration: -ASK / -TRYAGAIN by the keys this shard has
        // (`shard/moving.rs`); one relaxed load otherwise, in cluster mode
        // only.
        if !link && self.shared.cluster.as_ref().is_some_and(|c| c.moving_any()) {
            if let Err(e) = moving::check(self, cmd, args) {
                self.stats.count_redirect(&e);
                self.store.set_from_link(false);
                return e.reply();
            }
        }
        if self.hot.owns_any() {
            self.hot_guard(args);
        }
        if !counted {
            let result = run(self, args);
            self.store.set_from_link(false);
            return result.unwrap_or_else(|e| e.reply());
        }
        let result = match self.until_timed.checked_sub(1) {
            Some(left) => {
                self.until_timed = left;
                run(self, args)
            }
            None => {
                self.until_timed = crate::latency::SAMPLE_EVERY - 1;
                let start = std::time::Instant::now();
                let result = run(self, args);
                let ns = start.elapsed().as_nanos().min(u64::MAX as u128) as u64;
                self.stats.latency[cmd].record(ns);
                result
            }
        };
        self.store.set_from_link(false);
        self.stats.count_call(cmd, result)
    }

    /// The parcel of values leaving shard `from` (see `commands/span.rs`).
    pub fn parcel(&self, from: usize) -> &crate::state::Parcel {
        &self.shared.parcels[from]
    }

    /// Cluster mode's topology, when cluster mode is on (the CLUSTER
    /// command reads it).
    pub fn cluster(&self) -> Option<&Arc<crate::cluster::ClusterState>> {
        self.shared.cluster.as_ref()
    }

    /// The server-wide script cache and run states (EVAL, EVALSHA).
    pub fn scripts(&self) -> &crate::script::cache::ScriptCache {
        &self.shared.scripts
    }

    /// The ACL users (a restricted user's script checks its calls).
    pub fn acl(&self) -> &parking_lot::RwLock<crate::acl::Users> {
        &self.shared.acl
    }

    /// Server-wide state, for a handler that records in it (a script's
    /// ACL denials go to ACL LOG and the INFO counters).
    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Why a write must be refused now (see [`Shared::write_refusal`]):
    /// a script's writes pass the checks a client's pass in the dispatcher.
    pub fn write_refusal(&self) -> Option<OpError> {
        self.shared.write_refusal()
    }

    /// Runs a batch from another thread in order, under one clock reading.
    pub fn run_batch(&mut self, jobs: Vec<Job>) -> Vec<Reply> {
        self.tick();
        self.stats.batches_in.add(1);
        let replies = jobs
            .into_iter()
            .map(|mut j| self.run(j.cmd, j.run, j.counted, j.link, &mut j.args))
            .collect();
        self.publish();
        replies
    }

    /// Copies the store's counters into the shared statistics and this
    /// batch's effects into the merged replication stream.
    pub fn publish(&mut self) {
        let c = self.store.counts();
        self.stats.keys.set(c.keys);
        self.stats.expires.set(c.expires);
        self.stats.expired_keys.set(c.expired);
        self.stats.effect_offset.set(self.store.effects().offset());
        self.stats.changes.set(self.store.effects().changes);
        // A locked shard's effects are a transaction's, published whole by
        // its last jobs (`TxMsg::Run`).
        if !self.locked {
            self.store.effects_mut().publish();
        }
    }

    /// A full sync's cut, between two batches: what was written so far
    /// enters the merged stream, later effects are held until
    /// [`Shard::release`], and the image of the shard as it is now starts.
    pub fn cut(&mut self, cut: Cut) {
        self.tick();
        self.publish();
        self.store.effects_mut().hold_watched(cut.over);
        self.store.start_image(cut.sink);
        let _ = cut.cut.send(self.id);
    }

    /// Every shard has cut: the held effects enter the merged stream.
    pub fn release(&mut self) {
        self.store.effects_mut().hold(false);
    }

    /// Serialises part of a full sync's image (about `budget`); see
    /// `Store::image_step`.
    pub fn image_step(&mut self, budget: Duration) -> ImageStep {
        self.store.image_step(budget)
    }

    /// One active-expiry cycle. Visits as many slot tables holding TTL keys
    /// as a hundredth of the shard's slots (tables without one are skipped
    /// at no cost, so a few TTL keys are all looked at every cycle, and a
    /// 500 ms key is gone within a cycle of its deadline; when every slot
    /// holds one, each is looked at once every 10 s at hz 10: at 1M keys
    /// that costs about 1% of a core, where a tenth cost 6% in a TOKENLEASE
    /// profile); if
    /// more than a quarter of what it examined had expired it keeps going, up
    /// to `budget`, as Redis's adaptive cycle does, so a mass expiry is
    /// reclaimed at up to a quarter of a core.
    pub fn expiry_cycle(&mut self, budget: Duration) -> u64 {
        // A transaction holding the shard sees no key expire under it.
        if self.locked {
            return 0;
        }
        // A replica never expires keys itself: the primary's DEL does.
        if self.shared.repl.is_replica() {
            self.publish();
            return 0;
        }
        let start = Instant::now();
        let slots = self.store.slot_range().len();
        let base = slots.div_ceil(100).max(1);
        self.tick();
        let now_ms = self.now.unix_ms;
        let mut reclaimed_total = 0;
        let mut visited = 0;
        loop {
            let (examined, reclaimed) =
                self.store.sweep(now_ms, base, || start.elapsed() >= budget);
            reclaimed_total += reclaimed;
            visited += base;
            let busy = examined > 0 && reclaimed * 4 > examined;
            if !busy || start.elapsed() >= budget || visited >= slots {
                break;
            }
        }
        self.publish();
        reclaimed_total
    }
}

/// Everything one thread holds.
pub struct Worker {
    /// Thread and shard index.
    pub id: usize,
    /// This thread's shard.
    pub shard: RefCell<Shard>,
    /// Every thread's mailbox, indexed by shard.
    pub mailboxes: Arc<Vec<Mailbox>>,
    /// Server-wide state.
    pub shared: Arc<Shared>,
    /// The monitor lines of the commands planned on this thread since the
    /// last turn sent them (`crate::monitor`).
    pub monitor_feed: RefCell<bytes::BytesMut>,
    /// This thread's own mailbox, for a wait inside a turn: a script over
    /// several shards waits for each `redis.call` another shard runs
    /// (`turn/tx.rs`). `None` where every thread's turn runs on one OS
    /// thread (the test harness), which cannot wait so.
    pub inbox: Option<crossbeam_channel::Receiver<Msg>>,
    /// Messages taken from [`Worker::inbox`] during such a wait, delivered
    /// by the event loop before any newer one.
    pub stash: RefCell<std::collections::VecDeque<Msg>>,
    /// Connections (keys in this thread's table) whose transaction waits
    /// for split commands to finish before its first lock
    /// ([`crate::state::SplitGate`]).
    pub draining: RefCell<Vec<usize>>,
}

impl Worker {
    /// The next message to deliver: a stashed one first, then the mailbox.
    pub fn next_message(&self, mailbox: &crossbeam_channel::Receiver<Msg>) -> Option<Msg> {
        if let Some(m) = self.stash.borrow_mut().pop_front() {
            return Some(m);
        }
        mailbox.try_recv().ok()
    }

    /// Whether messages wait: stashed, or in `mailbox`.
    pub fn has_messages(&self, mailbox: &crossbeam_channel::Receiver<Msg>) -> bool {
        !mailbox.is_empty() || !self.stash.borrow().is_empty()
    }
}
