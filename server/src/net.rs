//! Sockets: each thread's event loop (a [`mio::Poll`] over its listener,
//! its connections and its mailbox's waker), accepting connections and
//! spreading them over threads, and reading and writing around [`Turn`].
//!
//! One turn of the loop: wait for readiness (or the mailbox's doorbell, or
//! the thread's timer); read the clock once; run the batches other threads
//! sent and route the replies that came back; read every readable
//! connection (at most [`READ_BUDGET`] bytes each, so one huge or fast
//! client delays the others' turn by a bounded amount; the rest waits for
//! the next turn) and plan what it sent (at most `MAX_PIPELINE` requests
//! per connection before its replies are written); send each other shard one batch
//! for all of the turn's connections; write every connection's replies.
//!
//! A connection to the TLS port (`tls-port`) carries a [`Session`]: its
//! reads go through rustls until the socket would block, its replies are
//! encrypted on this thread (no other shard writes to it directly, see
//! [`Transport::sink`]), it keeps writable interest while rustls holds
//! ciphertext, and it sends close_notify when it closes.
//!
//! A connection is read and served while its replies wait for its client
//! to read them, as long as they stay under a bound
//! ([`crate::turn::Conn::over_pause`]: `client-output-buffer-limit`'s
//! normal class when set, else 64 MB): a client that writes a whole
//! pipeline before it reads any reply is answered, as Redis answers it.
//! Above the bound it is not read (TCP backpressure) until its output
//! drains under it, so a client that never reads blocks only itself, with
//! a bounded amount of memory, while every other connection goes on.
//!
//! Waking another thread costs a system call and, on a busy 2-core machine,
//! a context switch, so messages to other threads are posted without a
//! wakeup, and the thread's doorbell is rung only when the poster is about
//! to sleep (after a non-blocking poll found nothing more to do) or a post
//! has waited [`RING_AFTER`]: under load the other thread usually wakes for
//! its own sockets first and finds the message. The loop's only timeout is
//! the thread's timer (active expiry); mio rounds it up to whole
//! milliseconds.

use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use parking_lot::Mutex;
use std::os::fd::{AsRawFd, RawFd};

use crate::error::{MAX_CLIENTS, PROTECTED_MODE};
use crate::replication::feed;
use crate::session::{ConnState, Handover, LinkState};
use crate::shard::{LinkStart, Msg, ReplySink, Worker};
use crate::state::{ClientHandle, Doorbell, Shared};
use crate::store::ImageStep;
use crate::tls::{self, Session};
use crate::turn::{Incoming, Transport, Turn, READ_CHUNK};

/// Most bytes read from one connection in one turn.
pub const READ_BUDGET: usize = 64 * 1024;
/// Output buffers above this are released after a write instead of kept.
const KEEP_OUTPUT_CAPACITY: usize = 1024 * 1024;
/// Read buffers that held more than this are released once empty.
const KEEP_INPUT_CAPACITY: usize = 1024 * 1024;
/// The waker's token (the mailbox's doorbell).
pub const WAKE: Token = Token(usize::MAX - 1);
const LISTENER: Token = Token(usize::MAX - 2);
const TLS_LISTENER: Token = Token(usize::MAX - 3);
/// Longest a message posted to another thread waits unrung while this
/// thread is busy (and the other may be asleep).
pub const RING_AFTER: Duration = Duration::from_micros(50);
/// Longest a full sync's image is serialised between two turns.
const IMAGE_SLICE: Duration = Duration::from_micros(500);
/// How long accepting pauses after an error such as too many open files.
const ACCEPT_PAUSE: Duration = Duration::from_millis(10);

/// A thread's periodic work (active expiry): called when its deadline has
/// passed, returns the next deadline.
pub type Timer<'a> = &'a mut dyn FnMut(&Worker, Instant) -> Instant;

/// A connection's socket, shared with a shard that writes a reply to it
/// directly (the descriptor stays open until both are done with it, so it
/// is never reused under a late writer), and its TLS session on the TLS
/// port.
#[derive(Debug)]
struct Socket {
    stream: Arc<Stream>,
    fd: RawFd,
    /// Registered for writable events (output waits for the socket).
    write_interest: bool,
    tls: Option<Session>,
}

#[derive(Debug)]
struct Stream(TcpStream);

impl ReplySink for Stream {
    fn write_now(&self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut written = 0;
        while written < bytes.len() {
            match (&self.0).write(&bytes[written..]) {
                Ok(0) => break,
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }
}

/// A TLS connection has none: its replies must be encrypted by its own
/// session, on this thread.
impl Transport for Socket {
    fn sink(&self) -> Option<Arc<dyn ReplySink>> {
        match self.tls {
            None => Some(self.stream.clone()),
            Some(_) => None,
        }
    }
}

impl Socket {
    fn new(stream: TcpStream, tls: Option<Session>) -> Socket {
        let fd = stream.as_raw_fd();
        Socket {
            stream: Arc::new(Stream(stream)),
            fd,
            write_interest: false,
            tls,
        }
    }

    fn stream(&self) -> &TcpStream {
        &self.stream.0
    }

    /// Reads what the socket has into `buf`: plain, one read (up to the
    /// scratch buffer's size); TLS, until the socket would block or
    /// `budget` bytes of plaintext came. `Ok(0)`: the peer closed.
    fn read_into(
        &mut self,
        scratch: &mut [u8],
        buf: &mut bytes::BytesMut,
        budget: usize,
    ) -> std::io::Result<usize> {
        match &mut self.tls {
            None => read_into(&self.stream.0, scratch, buf),
            Some(tls) => tls.read_into(&mut &self.stream.0, scratch, buf, budget),
        }
    }

    /// Whether the socket is known to hold nothing more now: a plain read
    /// shorter than the scratch buffer, any TLS read (which stops only when
    /// the socket would block or at the budget) short of the peer's close.
    fn drained(&self, n: usize, scratch: usize) -> bool {
        match &self.tls {
            None => n < scratch,
            Some(tls) => !tls.closed(),
        }
    }

    /// Writes as much of `out` as the socket takes; returns how much was
    /// taken (for TLS: encrypted, sent or waiting in [`Socket::pending`]).
    fn write_out(&mut self, out: &[u8]) -> std::io::Result<usize> {
        match &mut self.tls {
            Some(tls) => tls.write_from(&mut &self.stream.0, out),
            None => self.stream.write_now(out),
        }
    }

    /// Whether TLS ciphertext waits for the socket (a handshake message,
    /// an alert, encrypted replies).
    fn pending(&self) -> bool {
        self.tls.as_ref().is_some_and(Session::wants_write)
    }

    /// Before the descriptor closes: a TLS connection sends close_notify.
    fn finish(&mut self) {
        if let Some(tls) = &mut self.tls {
            tls.close(&mut &self.stream.0);
        }
    }
}

/// The sockets the accepting thread listens on.
#[derive(Debug, Default)]
pub struct Listeners {
    /// The plain port (`port`), unless TLS only.
    pub plain: Option<std::net::TcpListener>,
    /// The TLS port (`tls-port`) and the configuration its sessions use.
    pub tls: Option<(std::net::TcpListener, Arc<rustls::ServerConfig>)>,
}

/// One thread's event loop.
struct Loop {
    poll: Poll,
    events: Events,
    listener: Option<TcpListener>,
    tls_listener: Option<(TcpListener, Arc<rustls::ServerConfig>)>,
    accept_paused_until: Option<Instant>,
    next_thread: usize,
    mailbox: Receiver<Msg>,
    turn: Turn<Socket>,
    /// Connections to read this turn.
    work: Vec<usize>,
    /// Connections that used their read budget: read again next turn.
    again: Vec<usize>,
    /// Connections to write at the end of this turn.
    writes: Vec<usize>,
    /// Where reads land before they are appended to a read buffer.
    scratch: Box<[u8]>,
    /// Per thread, since when a message posted to it waits without a ring.
    unrung: Vec<Option<Instant>>,
    fresh: Vec<usize>,
    /// Input was stopped at the last turn (the drain before a shutdown).
    input_stopped: bool,
}

/// Runs thread `worker`'s event loop until shutdown: `poll` (whose waker,
/// token [`WAKE`], is the thread's doorbell), its `mailbox`, and the
/// listeners on the thread that accepts.
///
/// # Errors
/// Registering a listener or waiting on `poll` failed.
pub fn run(
    worker: Rc<Worker>,
    poll: Poll,
    mailbox: Receiver<Msg>,
    listeners: Listeners,
    timer: Timer<'_>,
) -> std::io::Result<()> {
    let mut listener = listeners.plain.map(TcpListener::from_std);
    if let Some(l) = listener.as_mut() {
        poll.registry().register(l, LISTENER, Interest::READABLE)?;
    }
    let mut tls_listener = listeners
        .tls
        .map(|(l, config)| (TcpListener::from_std(l), config));
    if let Some((l, _)) = tls_listener.as_mut() {
        poll.registry()
            .register(l, TLS_LISTENER, Interest::READABLE)?;
    }
    let mut lp = Loop {
        poll,
        events: Events::with_capacity(1024),
        listener,
        tls_listener,
        accept_paused_until: None,
        next_thread: 0,
        mailbox,
        turn: Turn::new(worker.clone()),
        work: Vec::new(),
        again: Vec::new(),
        writes: Vec::new(),
        scratch: vec![0; READ_CHUNK].into_boxed_slice(),
        unrung: vec![None; worker.shared.shards],
        fresh: Vec::new(),
        input_stopped: false,
    };
    let bell = worker.shared.doorbells[worker.id].clone();
    let mut deadline = Instant::now();
    loop {
        if worker.shared.shutting_down.load(Ordering::SeqCst) {
            break;
        }
        let now = Instant::now();
        if now >= deadline {
            deadline = timer(&worker, now);
        }
        let mut timeout = Some(deadline.saturating_duration_since(now));
        if lp.drain_step(&worker) {
            timeout = timeout.map(|t| t.min(Duration::from_millis(1)));
        }
        if let Some(at) = lp.accept_paused_until {
            timeout = timeout.map(|t| t.min(at.saturating_duration_since(now)));
        }
        lp.ring_posted(now, false);
        // A full sync's image is serialised between turns, a slice at a time.
        let image = worker.shard.borrow_mut().image_step(IMAGE_SLICE);
        // WAIT's acknowledgements, and the answers a transaction's drain
        // waits for (`SplitGate`), come to other threads without a ring
        // here: look again every millisecond while one waits.
        let waiting = lp.turn.check_blocked() | lp.turn.check_draining();
        if image == ImageStep::Paused || waiting {
            timeout = timeout.map(|t| t.min(Duration::from_millis(1)));
        }
        let busy = image == ImageStep::More
            || !lp.again.is_empty()
            || lp.turn.has_resumed()
            || lp.turn.has_dirty()
            || worker.has_messages(&lp.mailbox);
        if !busy && lp.unrung.iter().any(Option::is_some) {
            // Before sleeping with messages posted and not rung: if more
            // readiness is already there, run that turn first (the other
            // thread often wakes by itself meanwhile, and the ring is saved).
            lp.poll_now()?;
            if !lp.events.is_empty() {
                lp.turn_once(&bell);
                continue;
            }
            lp.ring_posted(now, true);
        }
        if busy {
            timeout = Some(Duration::ZERO);
        } else {
            bell.going_to_sleep();
            if worker.has_messages(&lp.mailbox)
                || worker.shared.shutting_down.load(Ordering::SeqCst)
            {
                timeout = Some(Duration::ZERO);
            }
        }
        match lp.poll.poll(&mut lp.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        bell.awake();
        lp.turn_once(&bell);
    }
    lp.shutdown();
    Ok(())
}

impl Loop {
    /// Rings each thread posted to whose mailbox is still unread: all of
    /// them when `all` (this thread is about to sleep), else those whose
    /// oldest unrung message is older than [`RING_AFTER`] (this thread is
    /// busy: a message never waits on it longer than that plus one turn).
    fn ring_posted(&mut self, now: Instant, all: bool) {
        let mut fresh = std::mem::take(&mut self.fresh);
        self.turn.take_posted(&mut fresh);
        for t in fresh.drain(..) {
            self.unrung[t].get_or_insert(now);
        }
        self.fresh = fresh;
        let mailboxes = &self.turn.worker().mailboxes;
        for (t, since) in self.unrung.iter_mut().enumerate() {
            let Some(at) = *since else { continue };
            if !mailboxes[t].pending() {
                *since = None;
            } else if all || now >= at + RING_AFTER {
                mailboxes[t].ring();
                *since = None;
            }
        }
    }

    /// Follows the drain before a shutdown: while input is stopped, says
    /// whether this thread owes nothing (after its last turn); when input
    /// resumes, accepts what waits and serves what was read meanwhile
    /// (readiness is edge-triggered: no new event would say so). Returns
    /// whether input is stopped.
    fn drain_step(&mut self, worker: &Worker) -> bool {
        let shared = &worker.shared;
        let stopped = shared.input_stopped.load(Ordering::SeqCst);
        if stopped {
            let quiet = self.turn.owes_nothing() && !self.turn.worker().has_messages(&self.mailbox);
            shared.quiet[worker.id].store(quiet, Ordering::SeqCst);
        } else if self.input_stopped {
            self.accept_all();
            self.again.extend(self.turn.keys());
        }
        self.input_stopped = stopped;
        stopped
    }

    /// Polls without blocking.
    fn poll_now(&mut self) -> std::io::Result<()> {
        match self.poll.poll(&mut self.events, Some(Duration::ZERO)) {
            Err(e) if e.kind() != ErrorKind::Interrupted => Err(e),
            _ => Ok(()),
        }
    }

    fn turn_once(&mut self, bell: &Doorbell) {
        self.turn.begin();
        let mut accept = false;
        for ev in self.events.iter() {
            match ev.token() {
                WAKE => {}
                LISTENER | TLS_LISTENER => accept = true,
                Token(k) => {
                    let input = ev.is_readable() || ev.is_read_closed() || ev.is_error();
                    if let Some(c) = self.turn.get_mut(k) {
                        c.unread |= input;
                        c.read_closed |= ev.is_read_closed() || ev.is_error();
                    }
                    self.work.push(k);
                }
            }
        }
        if let Some(at) = self.accept_paused_until {
            if Instant::now() >= at {
                self.accept_paused_until = None;
                accept = true;
            }
        }
        if accept && self.accept_paused_until.is_none() && !self.input_stopped {
            self.accept_all();
        }
        if bell.take_kills() {
            for k in self.turn.killed() {
                self.close(k);
            }
        }
        // A burst of publishes stops the draining after a budget: the rest
        // is taken next turn, after this turn's output is written.
        while !self.turn.pushed_enough() {
            let Some(msg) = self.turn.worker().next_message(&self.mailbox) else {
                break;
            };
            match self.turn.deliver(msg) {
                Some(Incoming::Client(stream, tls)) => {
                    self.register(stream, tls, None);
                    // Registered (in the client list) before it stops
                    // counting as on its way: maxclients never under-counts.
                    let shared = &self.turn.worker().shared;
                    shared.counters.handing_over.fetch_sub(1, Ordering::AcqRel);
                }
                Some(Incoming::Link(start)) => {
                    let LinkStart {
                        stream,
                        leftover,
                        full,
                    } = start;
                    self.register(stream, None, Some((leftover, full.is_some())));
                }
                None => {}
            }
        }
        self.work.append(&mut self.again);
        self.turn.take_resumed(&mut self.work);
        // Once each: READ_BUDGET is per connection and turn.
        self.work.sort_unstable();
        self.work.dedup();
        let mut work = std::mem::take(&mut self.work);
        for &k in &work {
            self.read_and_serve(k);
        }
        work.clear();
        self.work = work;
        self.turn.end();
        let mut writes = std::mem::take(&mut self.writes);
        self.turn.take_dirty(&mut writes);
        for &k in &writes {
            self.write(k);
        }
        writes.clear();
        self.writes = writes;
    }

    /// Reads connection `k` (within the budget) and serves what it sent.
    /// Its unwritten output is written first; a connection whose output
    /// stays over its bound, or that waits for replies, is not read: its
    /// readiness is seen again when it drains or resumes.
    fn read_and_serve(&mut self, k: usize) {
        let shared = self.turn.worker().shared.clone();
        let Some(c) = self.turn.get_mut(k) else {
            return;
        };
        if owes_output(c) {
            self.write(k);
            let Some(c) = self.turn.get_mut(k) else {
                return;
            };
            if c.over_pause() {
                return;
            }
        }
        let Some(c) = self.turn.get_mut(k) else {
            return;
        };
        if c.waiting() {
            c.unread = true;
            if c.want_answer() {
                // Its answer was posted after this turn emptied the mailbox.
                self.again.push(k);
            }
            return;
        }
        if c.state.close {
            // Closing by itself: `write` closes it once its output is out.
            return;
        }
        // Catch up before reading more: encode answers that came back, run
        // a parked connection command, go on with a pipeline stopped at
        // MAX_PIPELINE or at the output bound. The output is written at the
        // end of the turn; reading goes on while it stays under the bound.
        self.turn.serve(k);
        let Some(c) = self.turn.get_mut(k) else {
            return;
        };
        if c.over_pause() {
            self.write(k);
            return;
        }
        if c.waiting() || c.state.close || c.state.handover.is_some() || c.full {
            // `full`: served again next turn (resumed), read after that.
            return;
        }
        if c.hangup || !std::mem::take(&mut c.unread) {
            // Resumed with nothing seen on its socket since it was read, or
            // the client sent all it will: served above, closed if done.
            self.close_if_done(k);
            return;
        }
        let mut total = 0;
        let mut hangup = false;
        let peer = c.state.handle.addr;
        // The client's end of stream came with this readiness: no later
        // event will tell of it, so a short read does not end the reading.
        let read_closed = c.read_closed;
        let (Some(io), rbuf) = c.io_and_rbuf() else {
            return;
        };
        let failed = loop {
            match io.read_into(&mut self.scratch, rbuf, READ_BUDGET - total) {
                Ok(0) => {
                    hangup = true;
                    break false;
                }
                Ok(n) => {
                    total += n;
                    if total >= READ_BUDGET {
                        c.unread = true;
                        self.again.push(k);
                        break false;
                    }
                    // A short read emptied the socket: what arrives next
                    // raises a new readiness event, so the read that would
                    // say "would block" is a system call saved.
                    if !read_closed && io.drained(n, self.scratch.len()) {
                        break false;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if io.tls.is_some() && e.kind() == ErrorKind::InvalidData => {
                    // A failed handshake or a broken record: the alert
                    // goes out if the socket takes it, then the close.
                    if io.tls.as_ref().is_some_and(|t| t.is_handshaking()) {
                        shared
                            .counters
                            .tls_handshake_failures
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    tls::log_failure(peer, &e);
                    let _ = io.write_out(&[]);
                    break true;
                }
                Err(e) => {
                    tracing::debug!("connection read failed: {e}");
                    break true;
                }
            }
        };
        if failed {
            self.close(k);
            return;
        }
        if c.io().is_some_and(|io| io.pending()) {
            // A handshake step to answer: written at the end of the turn.
            self.writes.push(k);
        }
        c.rbuf_grew |= c.rbuf.len() > KEEP_INPUT_CAPACITY;
        if total > 0 {
            shared
                .counters
                .total_net_input_bytes
                .fetch_add(total as u64, Ordering::Relaxed);
            let h = &c.state.handle;
            h.last_cmd_ms
                .store(h.created.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
        self.turn.serve(k);
        let Some(c) = self.turn.get_mut(k) else {
            return;
        };
        if c.rbuf.len() > c.state.query_buffer_limit {
            let h = &c.state.handle;
            tracing::warn!(
                "closing client {} at {}: query buffer {} bytes over client-query-buffer-limit",
                h.id,
                h.addr,
                c.rbuf.len()
            );
            self.close(k);
            return;
        }
        // Released once empty (as Redis resizes its query buffer): an idle
        // connection that once sent a 190 MB argument must not keep it.
        if c.rbuf.is_empty() && (c.rbuf_grew || c.rbuf.capacity() > KEEP_INPUT_CAPACITY) {
            c.rbuf = bytes::BytesMut::with_capacity(READ_CHUNK);
            c.rbuf_grew = false;
        }
        if hangup {
            // The client sent all it will: answer what it sent (connection
            // commands after remote ones included), then close.
            c.hangup = true;
            self.close_if_done(k);
        }
    }

    /// Closes a connection whose client hung up once nothing is owed to it
    /// and its output is written.
    fn close_if_done(&mut self, k: usize) {
        let Some(c) = self.turn.get_mut(k) else {
            return;
        };
        if c.hangup && !c.waiting() && !owes_output(c) {
            self.close(k);
        }
    }

    /// Writes connection `k`'s output as far as the socket takes it, and
    /// closes it when it is to close and everything is written. A
    /// connection that asked to leave the loop (PSYNC) is handed over.
    fn write(&mut self, k: usize) {
        if !self.turn.ready_to_write() {
            self.turn.hold_write(k);
            return;
        }
        let shared = self.turn.worker().shared.clone();
        let Some(c) = self.turn.get_mut(k) else {
            return;
        };
        if let Some(handover) = c.state.handover.take() {
            self.hand_over(k, handover);
            return;
        }
        let mut written = 0;
        let mut failed = false;
        let mut pending = false;
        if let (Some(io), out) = c.io_and_out() {
            match io.write_out(out) {
                Ok(n) => written = n,
                Err(e) => {
                    tracing::debug!("connection write failed: {e}");
                    failed = true;
                }
            }
            pending = io.pending();
        }
        shared
            .counters
            .total_net_output_bytes
            .fetch_add(written as u64, Ordering::Relaxed);
        if failed {
            self.close(k);
            return;
        }
        let Some(c) = self.turn.get_mut(k) else {
            return;
        };
        let blocked = written < c.out.len() || pending;
        if let Some(io) = c.io() {
            if io.write_interest != blocked {
                // Writable events only while output waits: otherwise every
                // ACK that frees send buffer would raise one.
                io.write_interest = blocked;
                let interest = match blocked {
                    true => Interest::READABLE | Interest::WRITABLE,
                    false => Interest::READABLE,
                };
                let source = &mut SourceFd(&io.fd);
                let _ = self.poll.registry().reregister(source, Token(k), interest);
            }
        }
        if !blocked {
            if c.out.capacity() > KEEP_OUTPUT_CAPACITY {
                c.out = bytes::BytesMut::with_capacity(READ_CHUNK);
            } else {
                c.out.clear();
            }
            // Answers that came back and input read while the output waited
            // are served now; new output is written in this turn or the next.
            self.turn.serve(k);
            let Some(c) = self.turn.get_mut(k) else {
                return;
            };
            if !c.out.is_empty() || c.waiting() {
                return;
            }
            if c.state.close || c.hangup {
                if let Some(io) = c.io() {
                    io.finish();
                    let _ = io.stream().shutdown(std::net::Shutdown::Write);
                }
                self.close(k);
            } else if c.unread {
                // Readiness came while the output waited: read it next turn.
                self.again.push(k);
            }
        } else {
            let _ = c.out.split_to(written);
            c.note_buffers();
            let closing = c.hangup || c.state.close;
            if c.unread && !closing && !c.over_pause() && !c.waiting() {
                // Input waits (its readiness came, or reading paused at the
                // bound) and the output has room: read it next turn, since
                // a client blocked in its own write raises no new event.
                self.again.push(k);
            }
            let st = &mut c.state;
            let normal = st.pubsub.count() == 0 && !st.is_link();
            let pending = c.out.len() as u64;
            if normal
                && st
                    .normal_limit
                    .exceeded(pending, &mut st.normal_soft_since, Instant::now())
            {
                let h = &st.handle;
                tracing::warn!(
                    "Client id={} addr={} laddr={} omem={pending} scheduled to be closed ASAP for overcoming of output buffer limits.",
                    h.id,
                    h.addr,
                    h.laddr
                );
                self.close(k);
            }
        }
    }

    /// Takes connection `k` out of the loop for a sender thread: its
    /// unwritten output and unread input go with it, on a blocking copy of
    /// its socket (the loop's descriptor is closed).
    fn hand_over(&mut self, k: usize, handover: Handover) {
        let worker = self.turn.worker().clone();
        let Some(c) = self.turn.get_mut(k) else {
            return;
        };
        let out = std::mem::take(&mut c.out);
        let rbuf = std::mem::take(&mut c.rbuf);
        // The replica's own address, which a relayed socket would hide.
        let peer = c.state.handle.addr;
        let Some(mut io) = self.turn.close(k) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut SourceFd(&io.fd));
        use std::os::fd::AsFd;
        let tls = io.tls.take();
        let stream = io.stream().as_fd().try_clone_to_owned();
        drop(io);
        let stream = stream
            .map(std::net::TcpStream::from)
            .and_then(|s| match tls {
                None => Ok(s),
                // The feed's threads read and write a plain socket; the relay
                // carries it over this connection's TLS session.
                Some(tls) => {
                    let timeout = feed::repl_timeout(&worker.shared);
                    tls::relay(tls.into_blocking(s)?, timeout)
                }
            });
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("replication: cannot hand a replica's connection over: {e}");
                return;
            }
        };
        let Handover::Psync {
            replid,
            offset,
            mut hello,
        } = handover;
        if hello.ip.is_none() {
            hello.ip = Some(peer.ip().to_string());
        }
        feed::start(feed::FeedStart {
            shared: worker.shared.clone(),
            mailboxes: worker.mailboxes.clone(),
            stream,
            out: out.freeze(),
            input: rbuf,
            replid,
            offset,
            hello,
        });
    }

    fn close(&mut self, k: usize) {
        if let Some(mut io) = self.turn.close(k) {
            io.finish();
            let _ = self.poll.registry().deregister(&mut SourceFd(&io.fd));
        }
    }

    /// Accepts what waits on both listeners.
    fn accept_all(&mut self) {
        for tls in [false, true] {
            while let (false, Some(l), _) | (true, _, Some((l, _))) =
                (tls, &self.listener, &self.tls_listener)
            {
                match l.accept() {
                    Ok((stream, _)) => self.accepted(stream, tls),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        self.accept_paused_until = Some(Instant::now() + ACCEPT_PAUSE);
                        return;
                    }
                }
            }
        }
    }

    /// Admits (maxclients) and places an accepted connection (from the TLS
    /// listener when `tls`): round-robin over threads. A TLS connection
    /// refused by protected mode or maxclients is closed before its
    /// handshake, without Redis's text (which it could not read).
    fn accepted(&mut self, stream: TcpStream, tls: bool) {
        let worker = self.turn.worker().clone();
        let shared = &worker.shared;
        shared
            .counters
            .total_connections_received
            .fetch_add(1, Ordering::Relaxed);
        if tls {
            shared
                .counters
                .tls_connections_received
                .fetch_add(1, Ordering::Relaxed);
        }
        let (maxclients, protected) = {
            let c = shared.config.read();
            let protected = c.security.protected_mode && c.security.requirepass.is_empty();
            (c.net.maxclients, protected)
        };
        // As Redis: protected while the default user needs no password (an
        // ACL file may give it one).
        let protected = protected && shared.acl.read().get("default").is_none_or(|d| d.nopass);
        if protected && !stream.peer_addr().is_ok_and(|a| is_loopback(&a)) {
            let mut stream = stream;
            if !tls {
                let _ = stream.write(PROTECTED_MODE.as_bytes());
            }
            return;
        }
        let handing_over = shared.counters.handing_over.load(Ordering::Acquire);
        if shared.clients.lock().len() + handing_over >= maxclients {
            shared
                .counters
                .rejected_connections
                .fetch_add(1, Ordering::Relaxed);
            let mut stream = stream;
            if !tls {
                let _ = stream.write(MAX_CLIENTS.as_bytes());
            }
            return;
        }
        let _ = stream.set_nodelay(true);
        let session = match (&self.tls_listener, tls) {
            (Some((_, config)), true) => match Session::new(config) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!("cannot start a TLS session: {e}");
                    return;
                }
            },
            _ => None,
        };
        let target = self.next_thread % worker.mailboxes.len();
        self.next_thread = self.next_thread.wrapping_add(1);
        let stream = std::net::TcpStream::from(stream);
        if target == worker.id {
            self.register(stream, session, None);
        } else {
            shared.counters.handing_over.fetch_add(1, Ordering::AcqRel);
            if !worker.mailboxes[target].send(Msg::Conn(stream, session)) {
                shared.counters.handing_over.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Registers a connection (with its TLS session, if any) and starts
    /// serving it on this thread; `link` (the bytes read past the PSYNC
    /// answer, and whether a full sync's payload follows) makes it the
    /// replication link's connection.
    fn register(
        &mut self,
        stream: std::net::TcpStream,
        tls: Option<Session>,
        link: Option<(bytes::BytesMut, bool)>,
    ) {
        let worker = self.turn.worker().clone();
        if let Err(e) = stream.set_nonblocking(true) {
            tracing::warn!("cannot register socket: {e}");
            return;
        }
        let stream = TcpStream::from_std(stream);
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        let handle = new_client(
            &worker.shared,
            stream.peer_addr().unwrap_or(unspecified),
            stream.local_addr().unwrap_or(unspecified),
            worker.shared.doorbells[worker.id].clone(),
        );
        let mut state = ConnState::new(handle, &worker.shared);
        let mut leftover = None;
        if let Some((bytes, full)) = link {
            state.link = Some(LinkState {
                loading: full,
                ..LinkState::default()
            });
            state.set_authenticated(true);
            worker.shared.repl.link_up(state.handle.id);
            leftover = Some(bytes);
        }
        let socket = Socket::new(stream, tls);
        let fd = socket.fd;
        let key = self.turn.insert(socket, state);
        if let (Some(bytes), Some(c)) = (leftover, self.turn.get_mut(key)) {
            c.rbuf.extend_from_slice(&bytes);
        }
        let registered =
            self.poll
                .registry()
                .register(&mut SourceFd(&fd), Token(key), Interest::READABLE);
        if let Err(e) = registered {
            tracing::warn!("cannot register socket: {e}");
            self.turn.close(key);
            return;
        }
        // Bytes may have arrived before the registration.
        self.work.push(key);
    }

    /// At shutdown: one last attempt to write what each connection is owed.
    fn shutdown(&mut self) {
        for k in self.turn.keys() {
            self.write(k);
            self.close(k);
        }
    }
}

/// Whether connection `c` has output to write: replies not yet taken, or
/// TLS ciphertext the socket did not take.
fn owes_output(c: &mut crate::turn::Conn<Socket>) -> bool {
    !c.out.is_empty() || c.io().is_some_and(|io| io.pending())
}

/// Reads what the socket has (up to the scratch buffer's size) and
/// appends it to `buf`: the copy out of a zeroed scratch buffer spares
/// zeroing the read buffer's tail before every read.
fn read_into(
    mut io: &TcpStream,
    scratch: &mut [u8],
    buf: &mut bytes::BytesMut,
) -> std::io::Result<usize> {
    let n = io.read(scratch)?;
    buf.extend_from_slice(&scratch[..n]);
    Ok(n)
}

/// Registers a new client (for CLIENT LIST and CLIENT KILL) with the next
/// CLIENT ID, served by the thread whose doorbell is `bell`; the caller
/// removes it from `shared.clients` when it closes.
pub fn new_client(
    shared: &Shared,
    addr: SocketAddr,
    laddr: SocketAddr,
    bell: Arc<Doorbell>,
) -> Arc<ClientHandle> {
    let handle = Arc::new(ClientHandle {
        id: shared.next_client_id.fetch_add(1, Ordering::Relaxed),
        addr,
        laddr,
        created: Instant::now(),
        last_cmd_ms: AtomicU64::new(0),
        last_cmd: AtomicUsize::new(usize::MAX),
        name: Mutex::new(None),
        resp: AtomicU64::new(2),
        killed: AtomicBool::new(false),
        bell,
        sub: AtomicUsize::new(0),
        psub: AtomicUsize::new(0),
        monitor: AtomicBool::new(false),
        buffers: Default::default(),
        user: Mutex::new("default".into()),
    });
    shared.clients.lock().insert(handle.id, handle.clone());
    handle
}

/// Whether a peer is on the loopback interface (`127.0.0.0/8`, `::1`, or
/// an IPv4 loopback address mapped into IPv6), as protected mode judges it.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    match addr.ip() {
        std::net::IpAddr::V4(ip) => ip.is_loopback(),
        std::net::IpAddr::V6(ip) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}
