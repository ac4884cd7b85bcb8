//! One pipelined TCP connection: a writer task, a reader task, and a queue of
//! callers waiting for replies in the order their requests were written.
//!
//! ```text
//!   callers ──mpsc──> writer: push waiter, then write (batched per wakeup)
//!                              │ pending: VecDeque<Waiter> (write order)
//!   callers <─oneshot── reader: decode reply, complete front waiter
//! ```
//!
//! The writer pushes a waiter before its bytes reach the socket, so a reply
//! can never arrive before its waiter. A waiter whose caller gave up (timeout)
//! stays in the queue and swallows its late reply, so alignment holds; the
//! client still discards such a connection so that nothing queued behind a
//! hung request waits for it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{decode_reply, Reply};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::error::{ConnectionError, Error};

/// Most requests the writer gathers into one `write` call.
const WRITE_BATCH: usize = 128;

/// Replies to one request (one command, or a pipeline of `n`).
pub(crate) type ReplySender = oneshot::Sender<Result<Vec<Reply>, Error>>;

struct Request {
    frame: Bytes,
    n: usize,
    reply: ReplySender,
}

struct Waiter {
    n: usize,
    got: Vec<Reply>,
    reply: ReplySender,
}

/// A live connection; dropping it (or [`Connection::close`]) stops both tasks,
/// which fails every waiter with [`ConnectionError::Closed`].
pub(crate) struct Connection {
    requests: mpsc::UnboundedSender<Request>,
    broken: Arc<AtomicBool>,
    tasks: [JoinHandle<()>; 2],
}

impl Connection {
    /// Wraps a connected stream and starts its two tasks on the current runtime.
    pub(crate) fn start(stream: TcpStream) -> Connection {
        let _ = stream.set_nodelay(true);
        let (read, write) = stream.into_split();
        let (tx, rx) = mpsc::unbounded_channel();
        let pending = Arc::new(Mutex::new(VecDeque::new()));
        let broken = Arc::new(AtomicBool::new(false));
        let writer = tokio::spawn(write_loop(write, rx, pending.clone(), broken.clone()));
        let reader = tokio::spawn(read_loop(read, pending, broken.clone()));
        Connection {
            requests: tx,
            broken,
            tasks: [writer, reader],
        }
    }

    /// Whether this connection failed or was discarded.
    pub(crate) fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    /// Queues `frame` (holding `n` commands); the replies arrive on the
    /// returned receiver.
    pub(crate) fn send(
        &self,
        frame: Bytes,
        n: usize,
    ) -> Result<oneshot::Receiver<Result<Vec<Reply>, Error>>, Error> {
        let (reply, rx) = oneshot::channel();
        self.requests
            .send(Request { frame, n, reply })
            .map_err(|_| Error::Connection(ConnectionError::Closed))?;
        Ok(rx)
    }

    /// Marks the connection broken and stops its tasks.
    pub(crate) fn close(&self) {
        self.broken.store(true, Ordering::Release);
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.close();
    }
}

async fn write_loop(
    mut write: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Request>,
    pending: Arc<Mutex<VecDeque<Waiter>>>,
    broken: Arc<AtomicBool>,
) {
    let mut buf = BytesMut::new();
    while let Some(first) = rx.recv().await {
        buf.clear();
        let mut next = Some(first);
        let mut batched = 0;
        while let Some(req) = next.take() {
            buf.extend_from_slice(&req.frame);
            pending.lock().push_back(Waiter {
                n: req.n,
                got: Vec::with_capacity(req.n),
                reply: req.reply,
            });
            batched += 1;
            if batched < WRITE_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if write.write_all(&buf).await.is_err() {
            break;
        }
    }
    broken.store(true, Ordering::Release);
}

async fn read_loop(
    mut read: OwnedReadHalf,
    pending: Arc<Mutex<VecDeque<Waiter>>>,
    broken: Arc<AtomicBool>,
) {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    'outer: loop {
        match read.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        loop {
            match decode_reply(&mut buf) {
                Ok(Some(reply)) => deliver(&pending, reply),
                Ok(None) => break,
                Err(e) => {
                    broken.store(true, Ordering::Release);
                    if let Some(w) = pending.lock().pop_front() {
                        let _ = w.reply.send(Err(Error::Protocol(e)));
                    }
                    break 'outer;
                }
            }
        }
    }
    broken.store(true, Ordering::Release);
    // Every remaining waiter learns the connection is gone.
    pending.lock().clear();
}

fn deliver(pending: &Mutex<VecDeque<Waiter>>, reply: Reply) {
    let mut q = pending.lock();
    let Some(front) = q.front_mut() else {
        // A reply nobody asked for: the stream is out of step. Dropping it is
        // all we can do; the queue stays consistent for what follows.
        return;
    };
    front.got.push(reply);
    if front.got.len() == front.n {
        let w = q.pop_front().expect("front exists");
        drop(q);
        let _ = w.reply.send(Ok(w.got));
    }
}
