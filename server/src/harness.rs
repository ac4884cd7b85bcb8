//! An in-process test tier: a whole server's state without sockets or
//! threads, driven one request (or one pipelined read) at a time.
//!
//! [`Harness::new`] builds what [`crate::start`] builds (the shared state, N
//! shards, default 2, each with its own mailbox) on a [`ManualClock`], but all
//! N [`Worker`]s live on the calling thread, in one current-thread tokio
//! runtime and one `LocalSet`; each worker's mailbox is drained by a local
//! task running the runtime's own mailbox loop. A [`Harness`] is one
//! connection to that server: each call encodes its requests into the
//! connection's read buffer and runs the read exactly as a socket connection
//! does (decode, `dispatch::plan`, `Pipeline::flush`, connection commands in
//! order), so commands for keys of another shard travel as a batch through
//! that shard's mailbox, multi-key commands are split and merged, and
//! connection state (RESP version, authentication, name) persists across
//! calls. Replies are read back with `leasehold_protocol::decode_reply`, as a
//! client would read them off the wire (a RESP3 map comes back in no
//! particular order). No expiry timer runs: keys expire lazily when touched,
//! or in [`Harness::expiry_sweep`].
//!
//! ```
//! use leasehold_protocol::Reply;
//! use leasehold_server::harness::Harness;
//!
//! let mut h = Harness::new();
//! assert_eq!(h.cmd("SET k v"), Reply::ok());
//! h.clock().advance_ms(10);
//! assert_eq!(h.run(&["GET", "k"]), Reply::bulk("v"));
//! ```

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use leasehold_protocol::{decode_reply, decode_request, encode_request, Limits, Protocol, Reply};
use tokio::sync::mpsc;
use tokio::task::LocalSet;

use crate::clock::ManualClock;
use crate::config::Config;
use crate::dispatch::Pipeline;
use crate::session::ConnState;
use crate::shard::Worker;
use crate::slot::{key_slot, slot_shard};
use crate::state::Shared;
use crate::{net, runtime};

/// The wall clock a harness starts at, Unix ms (2023-11-14T22:13:20Z); its
/// monotonic clock starts at 0 ms.
pub const T0_MS: u64 = 1_700_000_000_000;

/// Time budget of one active-expiry cycle of [`Harness::expiry_sweep`].
const EXPIRY_BUDGET: Duration = Duration::from_millis(50);

/// One request, as the arguments a client sends.
pub trait Request {
    /// Appends this request, RESP-encoded, to `out`.
    fn encode(&self, out: &mut BytesMut);
}

/// A command line, split on whitespace: `"SET k v"`.
impl Request for str {
    fn encode(&self, out: &mut BytesMut) {
        encode_request(&self.split_whitespace().collect::<Vec<_>>(), out);
    }
}

/// Arguments as given, spaces kept: `["SET", "k", "a b"]` (any mix of
/// `&str`, `String`, `&[u8]`, ...).
impl<A: AsRef<[u8]>> Request for [A] {
    fn encode(&self, out: &mut BytesMut) {
        encode_request(self, out);
    }
}

impl<A: AsRef<[u8]>, const N: usize> Request for [A; N] {
    fn encode(&self, out: &mut BytesMut) {
        encode_request(self, out);
    }
}

impl<A: AsRef<[u8]>> Request for Vec<A> {
    fn encode(&self, out: &mut BytesMut) {
        encode_request(self, out);
    }
}

impl<T: Request + ?Sized> Request for &T {
    fn encode(&self, out: &mut BytesMut) {
        (**self).encode(out);
    }
}

/// A position in every shard's effect stream (one offset per shard, bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectMark(pub Vec<u64>);

/// The in-process server every connection of one harness shares.
struct Server {
    // Dropped first: its tasks hold workers and mailboxes.
    local: LocalSet,
    rt: tokio::runtime::Runtime,
    workers: Vec<Rc<Worker>>,
    clock: Arc<ManualClock>,
    connections: Cell<usize>,
}

/// One connection to an in-process server (see the module documentation).
pub struct Harness {
    server: Rc<Server>,
    worker: Rc<Worker>,
    conn: ConnState,
    pipe: Pipeline,
    rbuf: BytesMut,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("shards", &self.server.workers.len())
            .field("worker", &self.worker.id)
            .field("client", &self.conn.handle.id)
            .finish_non_exhaustive()
    }
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

impl Harness {
    /// A server with 2 shards and the default configuration, and a first
    /// connection, on thread 0.
    pub fn new() -> Harness {
        Harness::with_shards(2)
    }

    /// A server with `shards` shards (at least 1) and the default configuration.
    pub fn with_shards(shards: usize) -> Harness {
        Harness::with_config(Config::default(), shards)
    }

    /// A server with `shards` shards (at least 1) running `config` (its
    /// `shards.threads` is ignored), clock at [`T0_MS`] and monotonic 0 ms.
    pub fn with_config(config: Config, shards: usize) -> Harness {
        let shards = shards.max(1);
        let clock = Arc::new(ManualClock::new(T0_MS, 0));
        let addr = SocketAddr::from(([127, 0, 0, 1], config.net.port));
        let shared = runtime::new_shared(&config, clock.clone(), shards, addr);
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..shards).map(|_| mpsc::unbounded_channel()).unzip();
        let mailboxes = Arc::new(senders);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("build the harness's event loop");
        let local = LocalSet::new();
        let workers: Vec<Rc<Worker>> = (0..shards)
            .map(|id| runtime::new_worker(id, shared.clone(), mailboxes.clone()))
            .collect();
        for (worker, rx) in workers.iter().zip(receivers) {
            local.spawn_local(runtime::serve_mailbox(worker.clone(), rx));
        }
        let server = Rc::new(Server {
            local,
            rt,
            workers,
            clock,
            connections: Cell::new(0),
        });
        Harness::connect(server, 0)
    }

    fn connect(server: Rc<Server>, worker: usize) -> Harness {
        let n = server.connections.get();
        server.connections.set(n + 1);
        let worker = server.workers[worker % server.workers.len()].clone();
        // A distinct peer address per connection, for CLIENT LIST and KILL.
        let peer = SocketAddr::from(([127, 0, 0, 1], 40_000 + (n % 20_000) as u16));
        let handle = net::new_client(&worker.shared, peer, worker.shared.local_addr);
        let conn = ConnState::new(handle, &worker.shared);
        Harness {
            server,
            worker,
            conn,
            pipe: Pipeline::default(),
            rbuf: BytesMut::new(),
        }
    }

    /// Another connection to the same server, on the next thread in turn
    /// (connections are spread over threads round-robin, as accepted ones are).
    pub fn new_connection(&self) -> Harness {
        let next = self.server.connections.get();
        Harness::connect(self.server.clone(), next)
    }

    /// Another connection to the same server, on thread `worker`.
    pub fn connection_on(&self, worker: usize) -> Harness {
        Harness::connect(self.server.clone(), worker)
    }

    /// Runs one request as one read and returns its reply. A `&str` is split
    /// on whitespace (`"SET k v"`); an array or slice of arguments is sent as
    /// given (`&["SET", "k", "a b"]`).
    ///
    /// # Panics
    /// When the read does not produce exactly one reply (SHUTDOWN answers
    /// none; a closed connection reads nothing: use [`Harness::pipeline`]).
    pub fn run<R: Request + ?Sized>(&mut self, request: &R) -> Reply {
        let mut replies = self.pipeline(&[request]);
        assert_eq!(replies.len(), 1, "one reply expected: {replies:?}");
        replies.remove(0)
    }

    /// [`Harness::run`] of a command line split on whitespace.
    pub fn cmd(&mut self, line: &str) -> Reply {
        self.run(line)
    }

    /// Runs several requests as one read (one pipeline) and returns the
    /// replies in order; fewer than requests when the connection closed.
    pub fn pipeline<R: Request>(&mut self, requests: &[R]) -> Vec<Reply> {
        let mut bytes = BytesMut::new();
        for r in requests {
            r.encode(&mut bytes);
        }
        self.raw(&bytes)
    }

    /// Appends `bytes` to the read buffer (RESP requests, inline lines, or
    /// a part of one) and runs the read: the replies to every complete
    /// request, in order. Nothing when the connection is closed.
    pub fn raw(&mut self, bytes: &[u8]) -> Vec<Reply> {
        if self.is_closed() {
            self.unregister();
            return Vec::new();
        }
        self.rbuf.extend_from_slice(bytes);
        let mut out = BytesMut::new();
        let read = net::serve_read(
            &self.worker,
            &mut self.conn,
            &mut self.pipe,
            &mut self.rbuf,
            &mut out,
        );
        self.server.local.block_on(&self.server.rt, read);
        // A killed connection's task leaves the client list when it wakes.
        let shared = &self.worker.shared;
        shared.clients.lock().retain(|_, c| !c.killed.load(SeqCst));
        if self.is_closed() {
            self.unregister();
        }
        let mut replies = Vec::new();
        while let Some(r) = decode_reply(&mut out).expect("the server wrote valid RESP") {
            replies.push(r);
        }
        assert!(out.is_empty(), "a partial reply was left over");
        replies
    }

    /// Whether the connection is closed (QUIT, SHUTDOWN, CLIENT KILL, a
    /// protocol error); it reads nothing more.
    pub fn is_closed(&self) -> bool {
        self.conn.close
            || self
                .conn
                .handle
                .killed
                .load(std::sync::atomic::Ordering::SeqCst)
    }

    fn unregister(&self) {
        self.worker
            .shared
            .clients
            .lock()
            .remove(&self.conn.handle.id);
    }

    /// The RESP version the connection speaks (HELLO changes it).
    pub fn protocol(&self) -> Protocol {
        self.conn.proto
    }

    /// This connection's CLIENT ID.
    pub fn client_id(&self) -> u64 {
        self.conn.handle.id
    }

    /// The thread (and shard) this connection runs on.
    pub fn worker_id(&self) -> usize {
        self.worker.id
    }

    /// The server's clock: both readings move only when set or advanced.
    pub fn clock(&self) -> &ManualClock {
        &self.server.clock
    }

    /// Sets the monotonic clock to `t` ms and the wall clock to [`T0_MS`] + `t`.
    pub fn at_ms(&self, t: u64) {
        self.server.clock.set_mono_ms(t);
        self.server.clock.set_unix_ms(T0_MS + t);
    }

    /// Server-wide state: statistics, configuration, clients.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.worker.shared
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.server.workers.len()
    }

    /// The shard that owns `key`.
    pub fn shard_of(&self, key: &str) -> usize {
        slot_shard(key_slot(key.as_bytes()), self.shards())
    }

    /// The first of `prefix0`, `prefix1`, ... that shard `shard` owns.
    pub fn key_on(&self, shard: usize, prefix: &str) -> String {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .find(|k| self.shard_of(k) == shard)
            .expect("some key lands on every shard")
    }

    /// Active expiry over the whole keyspace: 100 cycles on every shard
    /// (each visits at least a hundredth of its slots). Returns the keys
    /// reclaimed.
    pub fn expiry_sweep(&self) -> u64 {
        let shards = self.server.workers.iter();
        let cycles =
            shards.flat_map(|w| (0..100).map(|_| w.shard.borrow_mut().expiry_cycle(EXPIRY_BUDGET)));
        cycles.sum()
    }

    /// The replication offset summed over shards: bytes of effects appended.
    pub fn effects_offset(&self) -> u64 {
        self.effects_mark().0.iter().sum()
    }

    /// Every shard's effect offset now, to read what is appended after it.
    pub fn effects_mark(&self) -> EffectMark {
        let shards = self.server.workers.iter();
        EffectMark(
            shards
                .map(|w| w.shard.borrow().store.effects().offset())
                .collect(),
        )
    }

    /// The effect records appended since `mark`, shard by shard (in append
    /// order within a shard), each as its arguments: `["SET", "k", "v"]`.
    ///
    /// # Panics
    /// When the records no longer fit the backlog ring.
    pub fn effects_since(&self, mark: &EffectMark) -> Vec<Vec<String>> {
        let mut records = Vec::new();
        for (w, &from) in self.server.workers.iter().zip(&mark.0) {
            let shard = w.shard.borrow();
            let [a, b] = shard
                .store
                .effects()
                .since(from)
                .expect("the effects are still in the backlog");
            let mut buf = BytesMut::from([a, b].concat().as_slice());
            while let Some(items) =
                decode_request(&mut buf, &Limits::default()).expect("an effect is a RESP command")
            {
                records.push(
                    items
                        .iter()
                        .map(|b| String::from_utf8_lossy(b).into())
                        .collect(),
                );
            }
        }
        records
    }

    /// Runs one request and returns its reply and the effect records it appended.
    pub fn run_effects<R: Request + ?Sized>(&mut self, request: &R) -> (Reply, Vec<Vec<String>>) {
        let mark = self.effects_mark();
        let reply = self.run(request);
        (reply, self.effects_since(&mark))
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.unregister();
    }
}
