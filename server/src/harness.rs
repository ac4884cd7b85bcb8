//! An in-process test tier: a whole server's state without sockets or
//! threads, driven one request (or one pipelined read) at a time.
//!
//! [`Harness::new`] builds what [`crate::start`] builds (the shared state, N
//! shards, default 2, each with its own mailbox and [`Turn`]) on a
//! [`ManualClock`], but all N [`Worker`]s live on the calling thread, and no
//! event loop runs: after each read the harness passes the messages between
//! the threads' mailboxes itself until none is left. A [`Harness`] is one
//! connection to that server: each call appends its requests to the
//! connection's read buffer and runs one turn exactly as a socket connection's
//! thread does (`Turn::serve`, `Turn::end`, then the mailboxes), so commands
//! for keys of another shard travel as a batch through that shard's mailbox
//! and come back routed to the connection, multi-key commands are split and
//! merged, and
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

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use crossbeam_channel::Receiver;
use leasehold_protocol::{decode_reply, decode_request, encode_request, Limits, Protocol, Reply};

use crate::clock::ManualClock;
use crate::config::Config;
use crate::session::ConnState;
use crate::shard::{Msg, Worker};
use crate::slot::{key_slot, slot_shard};
use crate::state::{ClientHandle, Shared};
use crate::turn::Turn;
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
    workers: Vec<Rc<Worker>>,
    turns: Vec<RefCell<Turn<()>>>,
    mailboxes: Vec<Receiver<Msg>>,
    clock: Arc<ManualClock>,
    connections: Cell<usize>,
    // The doorbells' wakers are registered with these (never polled).
    _polls: Vec<mio::Poll>,
}

impl Server {
    /// Passes messages between the threads (and serves the connections
    /// whose replies came back) until no message is left, then closes the
    /// connections marked killed.
    fn settle(&self) {
        loop {
            let mut moved = false;
            for (turn, mailbox) in self.turns.iter().zip(&self.mailboxes) {
                let mut turn = turn.borrow_mut();
                turn.begin();
                while let Ok(msg) = mailbox.try_recv() {
                    moved = true;
                    // The harness accepts no sockets.
                    let _ = turn.deliver(msg);
                }
                // A transaction whose drain is over asks for its first lock.
                let draining = turn.worker().draining.borrow().len();
                turn.check_draining();
                if turn.worker().draining.borrow().len() < draining {
                    moved = true;
                }
                let mut resumed = Vec::new();
                turn.take_resumed(&mut resumed);
                for k in resumed {
                    moved = true;
                    turn.serve(k);
                }
                turn.end();
                // Output stays in each connection's buffer for its reader.
                turn.take_dirty(&mut Vec::new());
            }
            if !moved {
                break;
            }
        }
        for turn in &self.turns {
            let mut turn = turn.borrow_mut();
            for k in turn.killed() {
                turn.close(k);
            }
        }
    }
}

/// One connection to an in-process server (see the module documentation).
pub struct Harness {
    server: Rc<Server>,
    worker: Rc<Worker>,
    /// The connection's key in its thread's turn.
    key: usize,
    handle: Arc<ClientHandle>,
    proto: Protocol,
    closed: bool,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("shards", &self.server.workers.len())
            .field("worker", &self.worker.id)
            .field("client", &self.handle.id)
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
    /// `shards.threads` is ignored, and its `save` rules too: no
    /// persistence thread runs here), clock at [`T0_MS`] and monotonic 0 ms.
    pub fn with_config(mut config: Config, shards: usize) -> Harness {
        // No persistence thread runs here: no rule may ask it for anything.
        config.persistence.save = String::new();
        runtime::check_pins(&config).expect("rate-limit-pins");
        let shards = shards.max(1);
        let clock = Arc::new(ManualClock::new(T0_MS, 0));
        let addr = SocketAddr::from(([127, 0, 0, 1], config.net.port));
        let (polls, bells) = runtime::polls(shards).expect("make the threads' polls");
        let shared = runtime::new_shared(&config, clock.clone(), addr, bells);
        let (senders, receivers) = runtime::mailboxes(&shared);
        let workers: Vec<Rc<Worker>> = (0..shards)
            .map(|id| runtime::new_worker(id, shared.clone(), senders.clone(), None))
            .collect();
        let turns = workers
            .iter()
            .map(|w| RefCell::new(Turn::new(w.clone())))
            .collect();
        let server = Rc::new(Server {
            workers,
            turns,
            mailboxes: receivers,
            clock,
            connections: Cell::new(0),
            _polls: polls,
        });
        Harness::connect(server, 0)
    }

    fn connect(server: Rc<Server>, worker: usize) -> Harness {
        let n = server.connections.get();
        server.connections.set(n + 1);
        let worker = server.workers[worker % server.workers.len()].clone();
        // A distinct peer address per connection, for CLIENT LIST and KILL.
        let peer = SocketAddr::from(([127, 0, 0, 1], 40_000 + (n % 20_000) as u16));
        let shared = &worker.shared;
        let bell = shared.doorbells[worker.id].clone();
        let handle = net::new_client(shared, peer, shared.local_addr, bell);
        let conn = ConnState::new(handle.clone(), shared);
        let key = server.turns[worker.id].borrow_mut().insert((), conn);
        Harness {
            server,
            worker,
            key,
            handle,
            proto: Protocol::Resp2,
            closed: false,
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
        let turn = &self.server.turns[self.worker.id];
        {
            let mut turn = turn.borrow_mut();
            turn.begin();
            let c = turn.get_mut(self.key).expect("an open connection");
            c.rbuf.extend_from_slice(bytes);
            turn.serve(self.key);
            turn.end();
            turn.take_dirty(&mut Vec::new());
        }
        self.server.settle();
        let mut out = BytesMut::new();
        if let Some(c) = turn.borrow_mut().get_mut(self.key) {
            out = c.out.split();
            self.proto = c.state.proto;
            self.closed = c.state.close;
        }
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
        self.closed || self.handle.killed.load(SeqCst)
    }

    fn unregister(&self) {
        let mut turn = self.server.turns[self.worker.id].borrow_mut();
        // The key is another connection's once this one is closed.
        let mine = |c: &mut crate::turn::Conn<()>| c.state.handle.id == self.handle.id;
        if turn.get_mut(self.key).is_some_and(mine) {
            turn.close(self.key);
        }
        self.worker.shared.clients.lock().remove(&self.handle.id);
    }

    /// The RESP version the connection speaks (HELLO changes it).
    pub fn protocol(&self) -> Protocol {
        self.proto
    }

    /// This connection's CLIENT ID.
    pub fn client_id(&self) -> u64 {
        self.handle.id
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
