//! Per-connection state: the RESP version, authentication, the decoder
//! limits, the pub/sub subscriptions, and what a connection command (HELLO,
//! AUTH, CLIENT, CONFIG, SUBSCRIBE, ...) sees. One [`ConnState`] lives in each connection's task; nothing here
//! touches a socket.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use leasehold_protocol::{Limits, Protocol};

use crate::config::parse::OutputLimit;
use crate::pubsub::Subscriptions;
use crate::shard::Worker;
use crate::state::{ClientHandle, Shared};

/// One connection's protocol state.
#[derive(Debug)]
pub struct ConnState {
    /// What CLIENT LIST and CLIENT KILL see.
    pub handle: Arc<ClientHandle>,
    /// RESP version chosen with HELLO.
    pub proto: Protocol,
    /// Whether AUTH succeeded (or no password is configured).
    pub authenticated: bool,
    /// Close after the replies so far are written (QUIT, protocol error).
    pub close: bool,
    /// Send no reply for the current command (SHUTDOWN closes instead).
    pub no_reply: bool,
    /// Decoder limits, refreshed when the configuration changes.
    pub limits: Limits,
    config_gen: u64,
    /// `client-query-buffer-limit`, bytes, refreshed with `limits`.
    pub query_buffer_limit: usize,
    /// What a replica said of itself with REPLCONF before its PSYNC.
    pub replica: ReplicaHello,
    /// Set by PSYNC: the connection leaves the event loop to become a
    /// replica's stream (see [`Handover`]).
    pub handover: Option<Handover>,
    /// Set on the replication link's connection (a replica's link to its
    /// primary): its records are applied and never answered.
    pub link: Option<LinkState>,
    /// Set by WAIT while it waits for replicas' acknowledgements, and by
    /// SAVE and SHUTDOWN while their snapshot is written: the connection is
    /// not served until it ends.
    pub blocked: Option<Blocked>,
    /// Channels and patterns subscribed to, and messages held back.
    pub pubsub: Subscriptions,
    /// The pub/sub class of `client-output-buffer-limit`, refreshed with
    /// `limits`: what a subscribed connection may hold unwritten.
    pub pubsub_limit: OutputLimit,
    /// The normal class's `client-output-buffer-limit` (not for a
    /// subscribed connection, which has its own, nor the replication link).
    pub normal_limit: OutputLimit,
    /// When unwritten output passed the normal soft limit (see
    /// [`OutputLimit::exceeded`]).
    pub normal_soft_since: Option<std::time::Instant>,
    /// MULTI's queue and WATCH's keys.
    pub tx: TxState,
    /// In MONITOR mode: every command's line is pushed to it, and it may
    /// not read or write keys (as a Redis monitor, flagged a replica).
    pub monitor: bool,
    /// Cluster mode's per-connection flags (READONLY, ASKING).
    pub cluster: ClusterConn,
    /// The ACL user (`default` until AUTH names another), looked up again
    /// whenever the configuration generation moves (ACL changes bump it).
    pub user: Arc<crate::acl::User>,
    /// The user may run everything on every key and channel: the
    /// dispatcher's ACL check is this one branch.
    pub unrestricted: bool,
}

/// A connection's cluster flags.
#[derive(Debug, Default, Clone, Copy)]
pub struct ClusterConn {
    /// READONLY was sent (until READWRITE): on a replica node, reads of
    /// its group's slots are served instead of redirected to the primary.
    pub readonly: bool,
    /// ASKING was sent: a slot this node imports is served for the next
    /// command only, or, when that command is MULTI, for every command of
    /// the transaction until EXEC or DISCARD (as Redis keeps the flag while
    /// the client is in MULTI).
    pub asking: bool,
}

/// What a blocked connection waits for.
#[derive(Debug, Clone)]
pub enum Blocked {
    /// WAIT: replicas' acknowledgements.
    Acks(WaitAcks),
    /// SAVE, or SHUTDOWN's snapshot: the persistence thread's outcome;
    /// `shutdown` stops the server once it succeeded.
    Save {
        /// Where the outcome comes.
        ticket: Arc<crate::persist::status::Ticket>,
        /// Whether SHUTDOWN waits (not SAVE).
        shutdown: bool,
    },
}

impl Blocked {
    /// Whether this is SHUTDOWN waiting for the shutdown itself: the drain
    /// before it does not wait for such a connection.
    pub fn waits_for_shutdown(&self) -> bool {
        matches!(self, Blocked::Save { shutdown: true, .. })
    }
}

/// A WAIT in progress.
#[derive(Debug, Clone, Copy)]
pub struct WaitAcks {
    /// The stream offset the replicas must have acknowledged.
    pub offset: u64,
    /// How many replicas WAIT asks for.
    pub replicas: usize,
    /// When WAIT gives up (`None`: never, for a timeout of 0).
    pub deadline: Option<std::time::Instant>,
}

/// A connection's transaction state: the commands MULTI queued, the keys
/// it WATCHes, and the shard work a transaction command leaves for the
/// connection's thread (`turn` does it right after the command).
#[derive(Debug, Default)]
pub struct TxState {
    /// Inside MULTI: what is queued.
    pub multi: Option<Multi>,
    /// The keys WATCHed since the last EXEC, DISCARD or UNWATCH, each once.
    pub watched: Vec<Bytes>,
    /// What the last transaction command left for the thread to do.
    pub pending: Option<TxWork>,
    /// EXEC is planning its queue: the write checks were made for the
    /// whole transaction when EXEC started, so they are not made again.
    pub executing: bool,
    /// A transaction (or a command run as one) is planning its queue under
    /// its shard locks: a command split over shards goes ahead as split.
    pub in_run: bool,
}

/// The commands queued since MULTI.
#[derive(Debug)]
pub struct Multi {
    /// Each queued request, as sent (name first).
    pub queued: Vec<Vec<Bytes>>,
    /// A command was refused while queueing: EXEC answers `EXECABORT`.
    pub aborted: bool,
    /// Per shard, whether a queued command runs on it.
    pub shards: Vec<bool>,
    /// Whether a connection command (CONFIG, CLIENT, ...) is queued.
    pub conn_commands: bool,
    /// Bytes queued (arguments, plus 16 a request): past
    /// `client-query-buffer-limit` the connection is closed, as a query
    /// buffer past it is.
    pub bytes: usize,
    /// In cluster mode, the hash slot of the first queued command with
    /// keys.
    pub slot: Option<u16>,
    /// In cluster mode, a queued command's keys are in another slot than
    /// an earlier one's: EXEC answers `CROSSSLOT` and runs nothing.
    pub cross_slot: bool,
    /// In cluster mode, the first key a queued command names.
    pub key: Option<Bytes>,
    /// In cluster mode, queued commands name more than one distinct key
    /// (Redis's "multiple keys" test of a transaction on a slot in
    /// migration).
    pub several_keys: bool,
    /// EXEC came after ASKING (sent before MULTI): the queued commands are
    /// planned again at EXEC with the flag (see [`ClusterConn::asking`]).
    pub asking: bool,
    /// A queued command writes: EXEC is refused whole on a read-only
    /// replica or while persistence fails.
    pub writes: bool,
    /// A queued command may grow memory (`DENYOOM`): EXEC is refused whole
    /// past maxmemory.
    pub denyoom: bool,
}

impl Multi {
    /// An empty queue on a server of `shards` shards.
    pub fn new(shards: usize) -> Multi {
        Multi {
            queued: Vec::new(),
            aborted: false,
            shards: vec![false; shards],
            conn_commands: false,
            bytes: 0,
            slot: None,
            cross_slot: false,
            key: None,
            several_keys: false,
            asking: false,
            writes: false,
            denyoom: false,
        }
    }
}

/// Shard work a transaction command leaves for the connection's thread.
#[derive(Debug)]
pub enum TxWork {
    /// WATCH: register these keys (newly watched) on their shards.
    Watch(Vec<Bytes>),
    /// UNWATCH, DISCARD, EXECABORT: forget these keys on their shards.
    Unwatch(Vec<Bytes>),
    /// EXEC: run the queue atomically, checking the watched keys first
    /// (the reply comes from the thread, not from the command).
    Exec(Multi, Vec<Bytes>),
}

/// REPLCONF facts a replica gives before PSYNC.
#[derive(Debug, Default, Clone)]
pub struct ReplicaHello {
    /// `REPLCONF listening-port`: the port it serves clients on.
    pub listening_port: u16,
    /// `REPLCONF ip-address`: the address it announces.
    pub ip: Option<String>,
    /// `REPLCONF capa lh1`: it loads Leasehold snapshots (version 1).
    pub lh1: bool,
}

/// What the event loop does with a connection that leaves it.
#[derive(Debug, Clone)]
pub enum Handover {
    /// `PSYNC <replid> <offset>` (`?` and -1 for none): the connection
    /// becomes the stream to a replica.
    Psync {
        /// The history the replica asks to continue.
        replid: String,
        /// The first byte it wants (its applied offset + 1).
        offset: i64,
        /// What it said of itself.
        hello: ReplicaHello,
    },
}

/// The replication link's progress through a full sync's payload.
#[derive(Debug, Default)]
pub struct LinkState {
    /// A payload is being loaded (until its end mark).
    pub loading: bool,
    /// The payload's end mark was read while some of its records still
    /// waited for their shards: the node keeps answering `-LOADING` until
    /// every one is applied (the next serve, which runs with nothing owed).
    pub loaded: bool,
    /// The payload's 40-byte end mark, once its `$EOF:` header was read.
    pub mark: Option<bytes::Bytes>,
    /// Records of the payload applied so far.
    pub records: u64,
    /// The CRC-32 (`persist::format::crc32`) of the payload's bytes read
    /// so far from its `LH.SNAPSHOT` record on, checked against the one
    /// `LH.SNAPEND` carries.
    pub crc: crc32fast::Hasher,
    /// The payload's `LH.SNAPEND` was read and checked out: only its end
    /// mark may follow.
    pub ended: bool,
    /// The payload's `LH.SNAPSHOT` header was read (from then on the
    /// dataset is being replaced).
    pub started: bool,
    /// The stream's bytes of a transaction read since its `MULTI` (up to
    /// its `EXEC` included, once read): counted in the replica's offset
    /// only when the `EXEC` runs, so a link lost in between resumes
    /// before the `MULTI` and nothing of the transaction is applied twice
    /// or lost.
    pub frame: bytes::BytesMut,
}

impl ConnState {
    /// Whether this is the replication link's connection.
    pub fn is_link(&self) -> bool {
        self.link.is_some()
    }

    /// Records the command about to run, for CLIENT LIST.
    pub fn note_command(&self, idx: usize) {
        self.handle.last_cmd.store(idx, Ordering::Relaxed);
    }

    /// Pending output, bytes, at or above which the connection is not read
    /// (see [`OutputLimit::pause_at`]): from the pub/sub class's limits for
    /// a subscribed connection, else from the normal class's.
    pub fn output_pause(&self) -> usize {
        let limit = match self.pubsub.count() {
            0 => &self.normal_limit,
            _ => &self.pubsub_limit,
        };
        usize::try_from(limit.pause_at()).unwrap_or(usize::MAX)
    }

    /// Re-reads the limits and the password state when CONFIG SET changed
    /// them (one atomic load when it did not).
    pub fn refresh(&mut self, shared: &Shared) {
        let gen = shared.config_gen.load(Ordering::Acquire);
        if gen == self.config_gen {
            return;
        }
        let c = shared.config.read();
        self.limits.max_bulk_len = c.limits.proto_max_bulk_len;
        self.limits.max_multibulk_len = c.limits.max_multibulk_len;
        self.limits.max_inline_len = c.limits.max_inline_len;
        self.query_buffer_limit = c.limits.client_query_buffer_limit;
        self.pubsub_limit = c.limits.pubsub_output_limit();
        self.normal_limit = c.limits.normal_output_limit();
        let requirepass = c.security.requirepass.clone();
        drop(c);
        self.refresh_user(shared, &requirepass);
        self.limits.authenticated = self.authenticated;
        self.config_gen = gen;
    }

    /// Looks the connection's user up again after a change (a user
    /// deleted while connected closes the connection, as in Redis), and
    /// counts a connection that never authenticated as the default user's
    /// while that one is `nopass` and on (Redis's `authRequired`).
    fn refresh_user(&mut self, shared: &Shared, requirepass: &str) {
        let mut users = shared.acl.upgradable_read();
        if users.requirepass.as_deref() != Some(requirepass) {
            let mut w = parking_lot::RwLockUpgradableReadGuard::upgrade(users);
            w.sync_requirepass(requirepass);
            users = parking_lot::RwLockWriteGuard::downgrade_to_upgradable(w);
        }
        match users.get(&self.user.name) {
            Some(u) => self.set_user(u.clone()),
            None => self.close = true,
        }
        if !self.authenticated && self.user.name == "default" {
            self.authenticated = self.user.enabled && self.user.nopass;
        }
    }

    /// Makes `user` the connection's user (AUTH, HELLO AUTH, RESET).
    pub fn set_user(&mut self, user: Arc<crate::acl::User>) {
        self.unrestricted = user.unrestricted();
        if *self.handle.user.lock() != user.name {
            *self.handle.user.lock() = user.name.clone();
        }
        self.user = user;
    }

    /// Whether the connection is in RESP2's subscribed mode (a subscription
    /// and RESP2), where only the subscription commands, PING, QUIT and
    /// RESET run.
    pub fn subscribed_resp2(&self) -> bool {
        self.proto == Protocol::Resp2 && self.pubsub.count() > 0
    }

    /// Sets the authentication state (AUTH, HELLO AUTH, RESET).
    pub fn set_authenticated(&mut self, yes: bool) {
        self.authenticated = yes;
        self.limits.authenticated = yes;
    }
}

/// What a connection command sees.
pub struct ConnCtx<'a> {
    /// The connection's state.
    pub conn: &'a mut ConnState,
    /// Server-wide state.
    pub shared: &'a Arc<Shared>,
    /// The connection's thread (its mailboxes reach every thread).
    pub worker: &'a Worker,
}

impl ConnState {
    /// The state of a connection just accepted: RESP2, authenticated only
    /// when no password is configured, limits from the live configuration.
    pub fn new(handle: Arc<ClientHandle>, shared: &Shared) -> ConnState {
        let mut conn = ConnState {
            handle,
            proto: Protocol::Resp2,
            authenticated: false,
            close: false,
            no_reply: false,
            limits: Limits {
                authenticated: false,
                ..Limits::default()
            },
            config_gen: u64::MAX,
            query_buffer_limit: usize::MAX,
            replica: ReplicaHello::default(),
            handover: None,
            link: None,
            blocked: None,
            pubsub: Subscriptions::default(),
            pubsub_limit: OutputLimit::default(),
            normal_limit: OutputLimit::default(),
            normal_soft_since: None,
            tx: TxState::default(),
            monitor: false,
            cluster: ClusterConn::default(),
            user: shared
                .acl
                .read()
                .get("default")
                .cloned()
                .unwrap_or_else(|| Arc::new(crate::acl::User::placeholder())),
            unrestricted: false,
        };
        conn.refresh(shared);
        conn
    }
}
