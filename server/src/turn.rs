//! One thread's connections and what one turn of its event loop does with
//! them, without sockets: `net` reads and writes the sockets around it, and
//! the in-process harness drives it with no socket at all.
//!
//! A turn, as `net` runs it: [`Turn::begin`] reads the clock once for the
//! whole turn; [`Turn::deliver`] runs each batch other threads sent (replying
//! at once) and routes each reply that came back to its connection's
//! pipeline; [`Turn::serve`] decodes and plans what each readable connection
//! sent, running its own shard's commands inline and queueing the others in
//! the thread's one [`Outbox`]; [`Turn::end`] sends the outbox, one batch per
//! shard for every connection of the turn (at `-P 1` with 25 connections on a
//! thread that is one hop per shard, not 25). `net` then writes the replies
//! of every connection listed by [`Turn::take_dirty`].
//!
//! A connection that owes replies from other shards is not served again
//! until they are back ([`Turn::take_resumed`] lists those whose replies
//! came): its replies leave in request order, and a client that pipelines
//! without reading waits on itself alone. A connection command (CONFIG,
//! CLIENT, HELLO, ...) runs only once everything before it is answered, so it
//! sees their effects; it waits parked until then.
//!
//! EXEC is such a command; `tx.rs` runs its transaction, inline, as one
//! message to one other shard, or over several shards locked in ascending
//! order. While a transaction holds this thread's shard, [`Turn::deliver`]
//! keeps the batches and lock requests other threads send until the
//! release, and [`Turn::serve`] serves no connection (`docs/transactions.md`).

mod link;
mod tx;

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{decode_request, Args, Reply};
use slab::Slab;

use crate::dispatch::{plan, run_conn_command, At, Outbox, Pipeline, Planned, Route};
use crate::error::{protocol_error, OpError};
use crate::pubsub::{Place, Publish};
use crate::session::{Blocked, ConnState};
use crate::shard::{Answer, Direct, Handoff, LinkStart, Msg, ReplySink, Worker};

/// Bytes of published messages one turn appends to its connections'
/// output before it stops taking messages and writes.
pub const PUSH_BUDGET: usize = 1024 * 1024;

/// Read buffer growth step, bytes.
pub const READ_CHUNK: usize = 16 * 1024;

/// Most requests of one connection planned in one turn before its replies
/// are written and the thread serves its other connections.
pub const MAX_PIPELINE: usize = 256;

/// Replies planned with nothing owed are encoded into the output every this
/// many requests, so the output bound ([`Conn::over_pause`]) is checked
/// while a pipeline runs: past the bound a connection adds at most this many
/// replies (all its own shard's) or [`MAX_PIPELINE`] (some from others).
const ENCODE_STEP: usize = 16;

/// Most reply bytes an unauthenticated connection may have waiting: past
/// it the connection is closed, as Redis closes one, so a password guesser
/// gets a few hundred tries per connection, not millions.
pub const UNAUTHENTICATED_OUTPUT_LIMIT: usize = 1024;

/// Closes `c` when it is unauthenticated and its replies waiting pass
/// [`UNAUTHENTICATED_OUTPUT_LIMIT`]; whether it did.
fn cut_off_unauthenticated<T>(c: &mut Conn<T>) -> bool {
    if c.state.authenticated || c.out.len() <= UNAUTHENTICATED_OUTPUT_LIMIT {
        return false;
    }
    let h = &c.state.handle;
    tracing::warn!(
        "Client id={} addr={} closed: {} bytes of replies pending before it authenticated",
        h.id,
        h.addr,
        c.out.len()
    );
    c.state.close = true;
    true
}

/// A request that waits until the pipeline owes nothing.
enum Parked {
    /// A connection command (table index, arguments).
    Conn(usize, Args),
    /// A protocol error's reply: the last reply before the connection closes.
    Error(Reply),
    /// A command over keys of several shards (table index, arguments).
    Span(usize, Args),
}

/// A connection's transport as the turn sees it: only, if it has one, the
/// socket another shard may write a reply to directly (see [`Direct`]).
pub trait Transport {
    /// The socket, shared; `None` for a transport with no socket.
    fn sink(&self) -> Option<Arc<dyn ReplySink>>;
}

/// The harness's transport: no socket, every reply goes through the turn.
impl Transport for () {
    fn sink(&self) -> Option<Arc<dyn ReplySink>> {
        None
    }
}

/// A connection handed to a thread, for the caller to register.
#[derive(Debug)]
pub enum Incoming {
    /// A client's connection (and its TLS session, on the TLS port).
    Client(std::net::TcpStream, Option<crate::tls::Session>),
    /// The replication link's connection to this node's primary.
    Link(LinkStart),
}

/// One connection: its transport (`io`, never touched here), its protocol
/// state, its buffers and its pipeline.
pub struct Conn<T> {
    io: Option<T>,
    /// Protocol state (RESP version, authentication, limits).
    pub state: ConnState,
    /// Bytes read and not yet decoded.
    pub rbuf: BytesMut,
    /// Set by the transport: `rbuf` held a large request since it was last
    /// replaced. Decoded arguments share its allocation, so its capacity
    /// alone cannot tell that a large allocation is still pinned by it.
    pub rbuf_grew: bool,
    /// Encoded replies not yet written.
    pub out: BytesMut,
    pipe: Pipeline,
    parked: Option<Parked>,
    /// Listed in `dirty` this turn.
    listed: bool,
    /// Set by the transport: the socket may hold bytes not read yet
    /// (readiness came while the connection waited, or it used its budget).
    pub unread: bool,
    /// Set by the transport: the client closed its side; the connection
    /// closes once everything it sent is answered.
    pub hangup: bool,
    /// Set by the transport: a readiness event said the client closed its
    /// side (the end of stream waits behind the bytes still unread), so
    /// reading goes on to it even after a short read.
    pub read_closed: bool,
    /// Its last serve stopped at [`MAX_PIPELINE`] with complete requests
    /// left in `rbuf`: it is served again before it is read, so its read
    /// buffer does not grow faster than it is served.
    pub full: bool,
    /// The handoff of the reply another shard writes directly, while owed.
    handoff: Option<Arc<Handoff>>,
    /// Its EXEC, while it runs on other shards.
    running: Option<Box<tx::Running>>,
    /// Not served until a transaction releases this thread's shard.
    held: bool,
}

impl<T> Conn<T> {
    /// The transport: the socket in `net`. `None` once closed.
    pub fn io(&mut self) -> Option<&mut T> {
        self.io.as_mut()
    }

    /// The transport and the read buffer, borrowed together.
    pub fn io_and_rbuf(&mut self) -> (Option<&mut T>, &mut BytesMut) {
        (self.io.as_mut(), &mut self.rbuf)
    }

    /// The transport and the output, borrowed together.
    pub fn io_and_out(&mut self) -> (Option<&mut T>, &mut BytesMut) {
        (self.io.as_mut(), &mut self.out)
    }

    /// Whether the connection waits for replies from other shards, or for
    /// a transaction to release this thread's shard (and so is not read
    /// until they come back, or it is released).
    pub fn waiting(&self) -> bool {
        self.pipe.owed() > 0 || self.held
    }

    /// Bytes of output waiting to be written: encoded replies, and pushed
    /// messages held behind replies still owed.
    pub fn pending_output(&self) -> usize {
        self.out.len() + self.state.pubsub.held.len()
    }

    /// Whether its pending output is at or above its bound
    /// ([`ConnState::output_pause`]): it is then neither read nor served
    /// until the output drains under it (backpressure). Under it, a
    /// connection is read and served while its output waits for its client.
    pub fn over_pause(&self) -> bool {
        self.pending_output() >= self.state.output_pause()
    }

    /// Publishes the sizes of its buffers for CLIENT LIST (a few relaxed
    /// stores; called after it is served and after its output is written).
    pub fn note_buffers(&self) {
        let b = &self.state.handle.buffers;
        let held = &self.state.pubsub.held;
        let set = |a: &std::sync::atomic::AtomicU64, v: usize| a.store(v as u64, Ordering::Relaxed);
        set(&b.qbuf, self.rbuf.len());
        set(&b.qbuf_free, self.rbuf.capacity() - self.rbuf.len());
        set(&b.rbs, self.rbuf.capacity());
        set(&b.obl, self.out.len());
        set(&b.oll, usize::from(!held.is_empty()));
        set(&b.omem, self.pending_output());
        let conn = std::mem::size_of::<Self>();
        set(
            &b.tot_mem,
            conn + self.rbuf.capacity() + self.out.capacity() + held.capacity(),
        );
    }

    /// Called when the connection is readable while it waits: true when the
    /// reply another shard writes directly is already answered (its answer
    /// is in this thread's mailbox, for the next turn to take).
    pub fn want_answer(&self) -> bool {
        self.handoff.as_ref().is_some_and(|h| h.want())
    }
}

/// One thread's connections and its outbox (see the module documentation).
pub struct Turn<T> {
    worker: Rc<Worker>,
    conns: Slab<Conn<T>>,
    outbox: Outbox,
    dirty: Vec<usize>,
    resumed: Vec<usize>,
    /// Per thread, whether a message was posted to it without a ring.
    posted: Vec<bool>,
    /// Where a reply written directly is encoded.
    scratch: BytesMut,
    /// This thread's shard lock, for transactions over several shards.
    locks: tx::Locks,
    /// Connections blocked in WAIT.
    blocked: Vec<usize>,
    /// Bytes of published messages appended this turn.
    pushed: usize,
    /// Under `appendfsync always`, while a cut holds effects this shard
    /// wrote: the answers of batches run meanwhile, and the connections
    /// whose output waits (see [`Turn::output_held`]).
    held_answers: Vec<(usize, Vec<Reply>, Vec<Direct>)>,
    held_writes: Vec<usize>,
}

impl<T: Transport> Turn<T> {
    /// A thread's turn state, with no connections.
    pub fn new(worker: Rc<Worker>) -> Turn<T> {
        let outbox = Outbox::new(worker.shared.shards);
        let posted = vec![false; worker.shared.shards];
        Turn {
            worker,
            conns: Slab::new(),
            outbox,
            dirty: Vec::new(),
            resumed: Vec::new(),
            posted,
            scratch: BytesMut::new(),
            locks: tx::Locks::default(),
            blocked: Vec::new(),
            held_answers: Vec::new(),
            held_writes: Vec::new(),
            pushed: 0,
        }
    }

    /// The thread this turn runs on.
    pub fn worker(&self) -> &Rc<Worker> {
        &self.worker
    }

    /// Adds a connection with protocol state `state`; returns its key.
    pub fn insert(&mut self, io: T, mut state: ConnState) -> usize {
        state.pubsub.place = Place {
            thread: self.worker.id,
            conn: self.conns.vacant_key(),
        };
        self.conns.insert(Conn {
            io: Some(io),
            state,
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            rbuf_grew: false,
            out: BytesMut::with_capacity(READ_CHUNK),
            pipe: Pipeline::default(),
            parked: None,
            listed: false,
            unread: true,
            hangup: false,
            read_closed: false,
            full: false,
            handoff: None,
            running: None,
            held: false,
        })
    }

    /// The open connection with key `key`.
    pub fn get_mut(&mut self, key: usize) -> Option<&mut Conn<T>> {
        self.conns.get_mut(key).filter(|c| c.io.is_some())
    }

    /// Starts a turn: every command of it sees one clock reading (a shard
    /// a transaction holds keeps the reading of its grant).
    pub fn begin(&mut self) {
        if !self.locks.held() {
            self.worker.shard.borrow_mut().tick();
        }
        self.pushed = 0;
    }

    /// Whether this turn has appended [`PUSH_BUDGET`] bytes of published
    /// messages: the caller stops taking messages from the mailbox until
    /// the turn's output is written, so a burst of publishes is written as
    /// it comes rather than piled up in memory first.
    pub fn pushed_enough(&self) -> bool {
        self.pushed >= PUSH_BUDGET
    }

    /// Handles one message from this thread's mailbox: runs a batch and
    /// sends its replies back, routes replies to their connections, or
    /// cuts or releases the shard for a full sync. A new connection is
    /// handed back to the caller, which owns sockets.
    pub fn deliver(&mut self, msg: Msg) -> Option<Incoming> {
        // A shard a transaction holds runs nothing else until its release.
        let msg = self.locks.defer(msg)?;
        match msg {
            Msg::Tx(m) => self.deliver_tx(m),
            Msg::Conn(stream, tls) => return Some(Incoming::Client(stream, tls)),
            Msg::Link(start) => return Some(Incoming::Link(start)),
            Msg::Cut(cut) => self.worker.shard.borrow_mut().cut(cut),
            Msg::Release => {
                // The held effects enter the stream (and, under `always`,
                // the disk): what waited for them may leave.
                self.worker.shard.borrow_mut().release();
                for (from, replies, direct) in std::mem::take(&mut self.held_answers) {
                    self.answer(from, replies, direct);
                }
                // Listed (as `hold_write` left them) and written this turn.
                for key in std::mem::take(&mut self.held_writes) {
                    if let Some(c) = self.conns.get_mut(key) {
                        c.listed = true;
                        self.dirty.push(key);
                    }
                }
            }
            Msg::Apply { jobs, done } => {
                let replies = self.worker.shard.borrow_mut().run_batch(jobs);
                let _ = done.send(replies.iter().filter(|r| r.is_error()).count() as u64);
            }
            Msg::Batch { from, jobs, direct } => {
                let stopping = self.worker.shared.shutting_down.load(Ordering::SeqCst);
                // A shard that is shutting down runs nothing more.
                let replies = match stopping {
                    true => vec![OpError::ShardUnavailable.reply(); jobs.len()],
                    false => self.worker.shard.borrow_mut().run_batch(jobs),
                };
                match self.output_held() {
                    true => self.held_answers.push((from, replies, direct)),
                    false => self.answer(from, replies, direct),
                }
            }
            Msg::Replies { from, answers } => {
                let routes = self.outbox.answered(from);
                let parts = routes.iter().filter(|r| r.is_split_part()).count();
                if parts > 0 {
                    let shared = &self.worker.shared;
                    shared.split_answered(self.worker.id, parts as u64);
                }
                for (route, answer) in routes.into_iter().zip(answers) {
                    self.fill(route, answer);
                }
            }
            Msg::Publish(p) => self.publish(&p),
            Msg::Monitor(feed) => self.monitor(&feed),
        }
        None
    }

    /// Sends the answers of a batch from thread `from`: the replies the
    /// shard may write to their connections itself (`direct`) are written,
    /// the rest posted back.
    fn answer(&mut self, from: usize, replies: Vec<Reply>, direct: Vec<Direct>) {
        let mut answers: Vec<Answer> = replies.into_iter().map(Answer::Reply).collect();
        for d in &direct {
            let answer = std::mem::replace(&mut answers[d.job], Answer::Sent);
            if let Answer::Reply(reply) = answer {
                answers[d.job] = self.write_direct(d, reply);
            }
        }
        // Replies the sender must write get it rung before this
        // thread sleeps; answers already sent need no ring (the
        // handoff below covers a sender that waits for them).
        let ring = answers.iter().any(|a| !matches!(a, Answer::Sent));
        let msg = Msg::Replies {
            from: self.worker.id,
            answers,
        };
        // A sender that is gone (shutdown) wants no replies.
        let mailbox = &self.worker.mailboxes[from];
        let _ = mailbox.post(msg);
        self.posted[from] |= ring;
        // Every handoff is marked, then one ring if any was wanted.
        let wanted = direct.iter().filter(|d| d.handoff.done()).count();
        if wanted > 0 {
            mailbox.ring();
        }
    }

    /// Whether no output may leave this thread now: under `appendfsync
    /// always`, a cut holds effects this shard wrote since it cut, so
    /// neither they nor anything read after them is on disk yet. Until the
    /// release (at most the slowest shard's way to its cut) the answers of
    /// batches wait, and `net` holds its writes ([`Turn::hold_write`]).
    pub fn output_held(&self) -> bool {
        Self::holds(&self.worker.shard.borrow(), &self.worker)
    }

    fn holds(shard: &crate::shard::Shard, worker: &Worker) -> bool {
        let effects = shard.store.effects();
        effects.holding() && effects.unpublished() && worker.shared.repl.backlog.sync_always()
    }

    /// Connection `key`'s output waits for the release (see
    /// [`Turn::output_held`]).
    pub fn hold_write(&mut self, key: usize) {
        if let Some(c) = self.conns.get_mut(key) {
            c.listed = true;
        }
        if !self.held_writes.contains(&key) {
            self.held_writes.push(key);
        }
    }

    /// Appends a published message to each receiver's output, between whole
    /// replies: to `out` when the connection owes none, else held until its
    /// pipeline is written. A receiver whose pending output passes the
    /// pub/sub output limit is closed (as CLIENT KILL closes); the
    /// publisher, on its own thread, never waits for it.
    fn publish(&mut self, p: &Publish) {
        let mut delivered = 0;
        for d in &p.to {
            delivered += u64::from(self.push(d.conn, d.client, 'P', |st, out| {
                st.pubsub.wants(d, &p.channel) && {
                    p.encode(d, st.proto, out);
                    true
                }
            }));
        }
        let worker = &self.worker;
        worker.shared.shard_stats[worker.id]
            .pubsub_delivered
            .add(delivered);
    }

    /// Appends monitor lines to each of this thread's monitors in the
    /// feed, as [`Turn::publish`] appends a message.
    fn monitor(&mut self, feed: &crate::monitor::Feed) {
        for w in &feed.to {
            let _ = self.push(w.conn, w.client, 'O', |st, out| {
                st.monitor && {
                    out.extend_from_slice(&feed.lines);
                    true
                }
            });
        }
    }

    /// Appends a push to connection `conn` (client `client`) with `write`
    /// (which answers false when the connection no longer wants it): to its
    /// output when it owes no reply, else held until its pipeline is
    /// written. A receiver whose pending output passes the pub/sub class of
    /// the output limit is closed (as CLIENT KILL closes; `flag` names its
    /// kind in the log); the sender, on its own thread, never waits for it.
    /// Returns whether the push stays in the connection's output.
    fn push(
        &mut self,
        conn: usize,
        client: u64,
        flag: char,
        write: impl FnOnce(&ConnState, &mut BytesMut) -> bool,
    ) -> bool {
        let shared = &self.worker.shared;
        let Some(c) = self.conns.get_mut(conn) else {
            return false;
        };
        let st = &mut c.state;
        let gone = c.io.is_none() || st.handle.id != client || st.close;
        if gone || st.handle.killed.load(Ordering::Relaxed) {
            return false;
        }
        st.refresh(shared);
        let held = !c.pipe.is_empty();
        let mut out = std::mem::take(if held {
            &mut st.pubsub.held
        } else {
            &mut c.out
        });
        let before = out.len();
        let wrote = write(st, &mut out);
        self.pushed += out.len() - before;
        *(if held {
            &mut st.pubsub.held
        } else {
            &mut c.out
        }) = out;
        if !wrote {
            return false;
        }
        let pending = c.out.len() + st.pubsub.held.len();
        if st
            .pubsub
            .over_limit(pending, &st.pubsub_limit, Instant::now())
        {
            let h = &st.handle;
            tracing::warn!(
                "Client id={} addr={} laddr={} flags={flag} sub={} psub={} omem={pending} scheduled to be closed ASAP for overcoming of output buffer limits.",
                h.id,
                h.addr,
                h.laddr,
                st.pubsub.channel_count(),
                st.pubsub.pattern_count(),
            );
            st.pubsub.held = BytesMut::new();
            c.out = BytesMut::new();
            h.kill();
            return false;
        }
        if !held && !c.listed {
            c.listed = true;
            self.dirty.push(conn);
        }
        true
    }

    /// Encodes `reply` and writes it to the connection of `d`; what the
    /// socket did not take goes back as [`Answer::Rest`].
    fn write_direct(&mut self, d: &Direct, reply: Reply) -> Answer {
        let stats = self.worker.shard.borrow().stats.clone();
        if reply.is_error() {
            stats.count_reply(&reply);
        }
        self.scratch.clear();
        reply.encode(d.proto, &mut self.scratch);
        // A failed socket is the connection's own thread's to see and close.
        let Ok(n) = d.sink.write_now(&self.scratch) else {
            return Answer::Sent;
        };
        let counters = &self.worker.shared.counters;
        counters
            .total_net_output_bytes
            .fetch_add(n as u64, Ordering::Relaxed);
        match n == self.scratch.len() {
            true => Answer::Sent,
            false => Answer::Rest(Bytes::copy_from_slice(&self.scratch[n..])),
        }
    }

    fn fill(&mut self, route: Route, answer: Answer) {
        let Some(c) = self.conns.get_mut(route.conn) else {
            return;
        };
        if !c.pipe.fill(route, answer) {
            return;
        }
        c.handoff = None;
        if c.io.is_none() {
            // Closed while replies were owed: nothing routes here any more.
            link_gone(&self.worker.shared, &c.state);
            self.conns.remove(route.conn);
        } else {
            self.resumed.push(route.conn);
        }
    }

    /// Decodes and plans every complete request in connection `key`'s read
    /// buffer, unless it waits for replies. Commands for this thread's shard
    /// run now; the others are queued for [`Turn::end`]. Replies are encoded
    /// into its output once the pipeline owes nothing; a connection with
    /// output (or to be closed) is listed for [`Turn::take_dirty`]. Stops at
    /// a connection command that must wait, and at the end of the connection
    /// (QUIT, CLIENT KILL of itself, a protocol error: `state.close`).
    pub fn serve(&mut self, key: usize) {
        // This thread's shard is held by a transaction: not before its
        // release, unless the holder is a script past busy-reply-threshold
        // (the connection's commands for this shard then answer BUSY, and
        // SCRIPT KILL and SHUTDOWN NOSAVE can reach it). The replication
        // link waits for the release all the same: none of its records may
        // be refused.
        let link = || self.conns.get(key).is_some_and(|c| c.state.is_link());
        if self.locks.held()
            && (!self.worker.shared.scripts.busy(self.worker.id) || link())
            && self.locks.hold(key)
        {
            if let Some(c) = self.conns.get_mut(key) {
                c.held = true;
            }
            return;
        }
        let worker = &*self.worker;
        let Some(c) = self.conns.get_mut(key).filter(|c| c.io.is_some()) else {
            return;
        };
        if c.pipe.owed() == 0 && !c.state.close && c.state.blocked.is_none() {
            c.state.refresh(&worker.shared);
            let mut at = At {
                worker,
                outbox: &mut self.outbox,
                conn: key,
            };
            let more = match c.state.is_link() {
                true => link::serve_link(&mut at, c),
                false => serve_conn(&mut at, c),
            };
            // The replication link reads on as before (its own LINK_PIPELINE).
            c.full = more && !c.state.is_link();
            if more && c.pipe.owed() == 0 {
                // Stopped at MAX_PIPELINE: go on at the next turn.
                self.resumed.push(key);
            }
        }
        if c.state.blocked.is_some() && !self.blocked.contains(&key) {
            self.blocked.push(key);
        }
        if c.pipe.is_empty() && !c.state.pubsub.held.is_empty() {
            // Messages that came while replies were owed follow them.
            c.out.extend_from_slice(&c.state.pubsub.held.split());
        }
        let leaving = c.state.close || c.state.handover.is_some();
        if (!c.out.is_empty() || leaving) && !c.listed {
            c.listed = true;
            self.dirty.push(key);
        }
        c.note_buffers();
    }

    /// Ends a turn: sends every batch queued in it, and makes what ran
    /// inline visible to INFO and DBSIZE readers.
    pub fn end(&mut self) {
        let conns = &mut self.conns;
        let direct = |routes: &[Route]| {
            let mut direct = Vec::new();
            for (job, route) in routes.iter().enumerate() {
                let Some(c) = conns.get_mut(route.conn) else {
                    continue;
                };
                // The replication link's replies are dropped, never written.
                if !c.out.is_empty() || !c.pipe.only(route) || c.state.is_link() {
                    continue;
                }
                let Some(sink) = c.io.as_ref().and_then(T::sink) else {
                    continue;
                };
                let handoff = Arc::new(Handoff::default());
                c.handoff = Some(handoff.clone());
                let proto = c.state.proto;
                direct.push(Direct {
                    job,
                    sink,
                    proto,
                    handoff,
                });
            }
            direct
        };
        let lost = self.outbox.send(&self.worker, &mut self.posted, direct);
        for route in lost {
            if route.is_split_part() {
                self.worker.shared.split_answered(self.worker.id, 1);
            }
            self.fill(route, Answer::Reply(OpError::ShardUnavailable.reply()));
        }
        self.worker.shard.borrow_mut().publish();
        self.send_monitor_feed();
    }

    /// Sends the monitor lines this thread gathered to every monitor's
    /// thread, one message each (rung with the turn's other posts).
    fn send_monitor_feed(&mut self) {
        let lines = self.worker.monitor_feed.borrow_mut().split().freeze();
        if lines.is_empty() {
            return;
        }
        let worker = &self.worker;
        let per = worker.shared.monitors.by_thread(worker.shared.shards);
        for (t, to) in per.into_iter().enumerate().filter(|(_, to)| !to.is_empty()) {
            let feed = crate::monitor::Feed {
                lines: lines.clone(),
                to,
            };
            if worker.mailboxes[t].post(Msg::Monitor(feed)) {
                self.posted[t] = true;
            }
        }
    }

    /// Called before any output is written: publishes what commands run
    /// inline since the last publish wrote (a connection served again right
    /// after its output was written runs them outside [`Turn::end`]), so no
    /// reply leaves before its effects are in the stream (and, under
    /// `appendfsync always`, on disk); then whether output may leave now
    /// (see [`Turn::output_held`]). With nothing to publish it costs one
    /// comparison and one flag.
    pub fn ready_to_write(&mut self) -> bool {
        let mut shard = self.worker.shard.borrow_mut();
        if shard.store.effects().unpublished() {
            shard.publish();
        }
        !Self::holds(&shard, &self.worker)
    }

    /// The threads posted to (messages queued without a ring) since the
    /// last call; the caller rings them, now or after a delay.
    pub fn take_posted(&mut self, into: &mut Vec<usize>) {
        for (t, p) in self.posted.iter_mut().enumerate() {
            if std::mem::take(p) {
                into.push(t);
            }
        }
    }

    /// Moves into `into` the connections with output to write (or to
    /// close), listed once each since the last call. The lists keep their
    /// capacity: no allocation per turn.
    pub fn take_dirty(&mut self, into: &mut Vec<usize>) {
        for &k in &self.dirty {
            if let Some(c) = self.conns.get_mut(k) {
                c.listed = false;
            }
        }
        into.append(&mut self.dirty);
    }

    /// Moves into `into` the connections whose owed replies all came back
    /// since the last call: to be served again (and read, since they were
    /// not while they waited).
    pub fn take_resumed(&mut self, into: &mut Vec<usize>) {
        into.append(&mut self.resumed);
    }

    /// Answers each WAIT whose replicas have acknowledged or whose timeout
    /// passed (the reply is the number of replicas that acknowledged), and
    /// each SAVE or SHUTDOWN whose snapshot is done, and resumes its
    /// connection. Returns whether any connection is still blocked.
    pub fn check_blocked(&mut self) -> bool {
        if self.blocked.is_empty() {
            return false;
        }
        let now = std::time::Instant::now();
        let shared = self.worker.shared.clone();
        let mut still = Vec::new();
        for key in std::mem::take(&mut self.blocked) {
            let Some(c) = self.conns.get_mut(key).filter(|c| c.io.is_some()) else {
                continue;
            };
            let Some(b) = &c.state.blocked else {
                continue;
            };
            let reply = match b {
                Blocked::Acks(w) => {
                    let acked = shared.repl.acked(w.offset);
                    if acked < w.replicas && w.deadline.is_none_or(|d| now < d) {
                        still.push(key);
                        continue;
                    }
                    Reply::Int(acked as i64)
                }
                Blocked::Save { ticket, shutdown } => {
                    let Some(outcome) = ticket.outcome() else {
                        still.push(key);
                        continue;
                    };
                    match (outcome, shutdown) {
                        (Ok(()), false) => Reply::ok(),
                        (Ok(()), true) => {
                            // As SHUTDOWN does: no reply, the connection closes.
                            tracing::info!("shutting down");
                            shared.begin_shutdown();
                            c.state.close = true;
                            c.state.blocked = None;
                            if !c.listed {
                                c.listed = true;
                                self.dirty.push(key);
                            }
                            continue;
                        }
                        (Err(why), false) => OpError::SaveFailed(why).reply(),
                        (Err(_), true) => OpError::ShutdownSaveFailed.reply(),
                    }
                }
            };
            c.state.blocked = None;
            reply.encode(c.state.proto, &mut c.out);
            if !c.listed {
                c.listed = true;
                self.dirty.push(key);
            }
            self.resumed.push(key);
        }
        self.blocked = still;
        !self.blocked.is_empty()
    }

    /// Asks for the first lock of each transaction over several shards
    /// whose wait for split commands is over ([`crate::state::SplitGate`]);
    /// returns whether any still waits (the event loop then looks again
    /// within a millisecond: the split commands' answers go to their own
    /// threads, which ring no one here).
    pub fn check_draining(&mut self) -> bool {
        let waiting = std::mem::take(&mut *self.worker.draining.borrow_mut());
        if waiting.is_empty() {
            return false;
        }
        let mut still = Vec::new();
        for key in waiting {
            let Some(c) = self.conns.get_mut(key) else {
                continue;
            };
            if let Some(run) = c.running.as_mut() {
                if !run.lock_when_drained(&self.worker) {
                    still.push(key);
                }
            }
        }
        let mut draining = self.worker.draining.borrow_mut();
        draining.extend(still);
        !draining.is_empty()
    }

    /// Whether no open connection is owed anything: every reply is in and
    /// written, nothing is parked, blocked or running elsewhere (the drain
    /// before a shutdown waits for this on every thread).
    pub fn owes_nothing(&self) -> bool {
        self.conns.iter().all(|(_, c)| {
            c.io.is_none()
                || (c.out.is_empty()
                    && c.pipe.owed() == 0
                    && c.pipe.is_empty()
                    && c.parked.is_none()
                    && c.running.is_none()
                    && c.state
                        .blocked
                        .as_ref()
                        .is_none_or(Blocked::waits_for_shutdown))
        })
    }

    /// Whether connections have output listed and not yet taken.
    pub fn has_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Whether connections were resumed and not yet served.
    pub fn has_resumed(&self) -> bool {
        !self.resumed.is_empty()
    }

    /// The keys of open connections marked killed (CLIENT KILL, shutdown),
    /// except those closing by themselves after their last reply (a CLIENT
    /// KILL of the connection itself answers before it closes).
    pub fn killed(&self) -> Vec<usize> {
        let killed = |c: &Conn<T>| {
            c.io.is_some() && !c.state.close && c.state.handle.killed.load(Ordering::SeqCst)
        };
        self.conns
            .iter()
            .filter(|(_, c)| killed(c))
            .map(|(k, _)| k)
            .collect()
    }

    /// Closes connection `key`: it leaves the client list and its transport
    /// is handed back to be dropped. A connection still owed replies is kept,
    /// empty, until they come back, so its key is not reused while a reply
    /// may still be routed to it.
    pub fn close(&mut self, key: usize) -> Option<T> {
        let c = self.conns.get_mut(key)?;
        let io = c.io.take()?;
        let shared = &self.worker.shared;
        let watched = std::mem::take(&mut c.state.tx.watched);
        tx::watch(&self.worker, c.state.handle.id, watched, false);
        shared.clients.lock().remove(&c.state.handle.id);
        if c.pipe.owed() == 0 {
            link_gone(shared, &c.state);
        }
        c.state.pubsub.clear(&shared.pubsub, c.state.handle.id);
        if c.state.monitor {
            shared.monitors.remove(c.state.handle.id);
        }
        if c.pipe.owed() == 0 {
            self.conns.remove(key);
        }
        Some(io)
    }

    /// Every open connection's key.
    pub fn keys(&self) -> Vec<usize> {
        let open = self.conns.iter().filter(|(_, c)| c.io.is_some());
        open.map(|(k, _)| k).collect()
    }
}

/// A closed connection is gone for good (nothing of it in flight): when
/// it was the replication link, the link is down. Not before: a closed
/// link's records still running (a transaction frame waiting for its
/// shards' locks) were counted in the offset, and a new link resuming
/// from there must not apply later records before them.
fn link_gone(shared: &crate::state::Shared, state: &crate::session::ConnState) {
    if let Some(link) = &state.link {
        if link.loaded {
            // A payload read to its end mark, every record applied (this
            // runs once nothing is in flight): the dataset is whole.
            shared.repl.set_loading(false);
        }
        // A payload that never began replaced nothing: the dataset is
        // whole, so clients are served again.
        let untouched = link.loading && !link.started;
        shared.repl.link_down(state.handle.id, untouched);
    }
}

/// The body of [`Turn::serve`] for a connection that owes nothing. True
/// when it stopped at [`MAX_PIPELINE`] with requests left in the buffer.
fn serve_conn<T>(at: &mut At<'_>, c: &mut Conn<T>) -> bool {
    let worker = at.worker;
    let stopped = worker.shared.input_stopped.load(Ordering::Relaxed);
    let pause = c.state.output_pause();
    let mut planned = 0;
    loop {
        if let Some(parked) = c.parked.take() {
            if c.pipe.owed() > 0 {
                c.parked = Some(parked);
                return false;
            }
            c.pipe.encode(worker, c.state.proto, &mut c.out);
            match parked {
                Parked::Conn(idx, mut args) => {
                    // What ran inline before it is in the replication
                    // stream first (WAIT counts it).
                    worker.shard.borrow_mut().publish();
                    let reply = run_conn_command(worker, &mut c.state, idx, &mut args);
                    // A CONFIG SET applies to the rest of this connection's
                    // input: to the decoder's limits and to this shard, as it
                    // does to the other shards' next batches.
                    c.state.refresh(&worker.shared);
                    // A shard held for a busy script on another thread
                    // (served meanwhile) keeps its clock reading.
                    let mut shard = worker.shard.borrow_mut();
                    if !shard.locked {
                        shard.tick();
                    }
                    drop(shard);
                    let reply = match tx::has_work(c) {
                        true => tx::after_command(at, c, reply),
                        false => Some(reply),
                    };
                    let Some(reply) = reply else {
                        // EXEC runs on other shards: nothing more is read
                        // from this connection until its reply is in.
                        return false;
                    };
                    if !std::mem::take(&mut c.state.no_reply) {
                        reply.encode(c.state.proto, &mut c.out);
                    }
                }
                Parked::Error(reply) => {
                    reply.encode(c.state.proto, &mut c.out);
                    c.state.close = true;
                }
                Parked::Span(idx, args) => {
                    // Nothing more is read from this connection until its
                    // reply is in, as after EXEC.
                    tx::start_span(at, c, idx, args);
                    return false;
                }
            }
            if c.state.close || c.state.handover.is_some() || c.state.blocked.is_some() {
                return false;
            }
            if cut_off_unauthenticated(c) {
                return false;
            }
            continue;
        }
        if c.pipe.len() >= MAX_PIPELINE || planned >= MAX_PIPELINE {
            if c.pipe.owed() == 0 {
                c.pipe.encode(worker, c.state.proto, &mut c.out);
            }
            return !cut_off_unauthenticated(c);
        }
        if c.pipe.owed() == 0 && c.pipe.len() >= ENCODE_STEP {
            c.pipe.encode(worker, c.state.proto, &mut c.out);
        }
        if c.pending_output() >= pause {
            // Backpressure: the rest of the input waits (in the buffer and
            // the socket) until the output drains under the bound; `net`
            // reads and serves it again then.
            c.unread = true;
            break;
        }
        if stopped {
            // Draining for a shutdown: what was decoded finishes, nothing
            // more starts.
            break;
        }
        match decode_request(&mut c.rbuf, &c.state.limits) {
            Ok(Some(items)) if items.is_empty() => {}
            Ok(Some(items)) => {
                planned += 1;
                match plan(at, &mut c.state, &mut c.pipe, items) {
                    Planned::Conn(idx, args) => c.parked = Some(Parked::Conn(idx, args)),
                    Planned::Span(idx, args) => c.parked = Some(Parked::Span(idx, args)),
                    Planned::Queued => {}
                }
            }
            Ok(None) => break,
            Err(e) => {
                let reply = protocol_error(&e);
                worker.shard.borrow().stats.count_reply(&reply);
                c.parked = Some(Parked::Error(reply));
            }
        }
    }
    if c.pipe.owed() == 0 && !c.pipe.is_empty() {
        c.pipe.encode(worker, c.state.proto, &mut c.out);
    }
    cut_off_unauthenticated(c);
    false
}
