//! Sockets: accepting connections, spreading them over threads, and each
//! connection's read -> plan -> flush -> write loop.
//!
//! A connection reads what the socket has, decodes every complete request in
//! it, plans them into one [`Pipeline`] (see `dispatch`), and writes all the
//! replies with one write. A client that stops reading blocks only its own
//! task: its writes wait on the socket, so it stops being read (TCP
//! backpressure) while every other connection goes on.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use leasehold_protocol::decode_request;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::dispatch::{plan, run_conn_command, Pipeline, Planned};
use crate::error::{protocol_error, MAX_CLIENTS};
use crate::session::ConnState;
use crate::shard::{Msg, Worker};
use crate::state::{ClientHandle, Shared};

/// Read buffer growth step, bytes.
const READ_CHUNK: usize = 16 * 1024;
/// Output buffers above this are released after a write instead of kept.
const KEEP_OUTPUT_CAPACITY: usize = 1024 * 1024;

/// Accepts connections and hands them to threads round-robin.
pub(crate) async fn accept_loop(worker: Rc<Worker>, listener: TcpListener) {
    let mut next = 0usize;
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let shared = &worker.shared;
        shared
            .counters
            .total_connections_received
            .fetch_add(1, Ordering::Relaxed);
        let maxclients = shared.config.read().net.maxclients;
        if shared.clients.lock().len() >= maxclients {
            shared
                .counters
                .rejected_connections
                .fetch_add(1, Ordering::Relaxed);
            let mut stream = stream;
            let _ = stream.write_all(MAX_CLIENTS.as_bytes()).await;
            continue;
        }
        let _ = stream.set_nodelay(true);
        let target = next % worker.mailboxes.len();
        next = next.wrapping_add(1);
        if target == worker.id {
            match stream.into_std() {
                Ok(s) => spawn_connection(worker.clone(), s),
                Err(e) => tracing::warn!("cannot take accepted socket: {e}"),
            }
        } else if let Ok(s) = stream.into_std() {
            let _ = worker.mailboxes[target].send(Msg::Conn(s));
        }
    }
}

/// Registers a connection and starts serving it on this thread.
pub(crate) fn spawn_connection(worker: Rc<Worker>, stream: std::net::TcpStream) {
    let stream = match TcpStream::from_std(stream) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot register socket: {e}");
            return;
        }
    };
    let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
    let handle = new_client(
        &worker.shared,
        stream.peer_addr().unwrap_or(unspecified),
        stream.local_addr().unwrap_or(unspecified),
    );
    tokio::task::spawn_local(async move {
        let id = handle.id;
        if let Err(e) = serve(&worker, stream, handle).await {
            tracing::debug!("connection {id} ended: {e}");
        }
        worker.shared.clients.lock().remove(&id);
    });
}

/// Registers a new client (for CLIENT LIST and CLIENT KILL) with the next
/// CLIENT ID; the caller removes it from `shared.clients` when it closes.
pub(crate) fn new_client(
    shared: &Shared,
    addr: SocketAddr,
    laddr: SocketAddr,
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
        kill_notify: Notify::new(),
    });
    shared.clients.lock().insert(handle.id, handle.clone());
    handle
}

async fn serve(
    worker: &Worker,
    mut stream: TcpStream,
    handle: Arc<ClientHandle>,
) -> std::io::Result<()> {
    let shared = worker.shared.clone();
    let mut conn = ConnState::new(handle.clone(), &shared);
    let mut rbuf = BytesMut::with_capacity(READ_CHUNK);
    let mut out = BytesMut::with_capacity(READ_CHUNK);
    let mut pipe = Pipeline::default();
    loop {
        if rbuf.capacity() - rbuf.len() < READ_CHUNK / 4 {
            rbuf.reserve(READ_CHUNK);
        }
        let n = tokio::select! {
            r = stream.read_buf(&mut rbuf) => r?,
            _ = handle.kill_notify.notified() => 0,
        };
        if n == 0 || handle.killed.load(Ordering::Relaxed) {
            return Ok(());
        }
        shared
            .counters
            .total_net_input_bytes
            .fetch_add(n as u64, Ordering::Relaxed);
        handle.last_cmd_ms.store(
            handle.created.elapsed().as_millis() as u64,
            Ordering::Relaxed,
        );
        serve_read(worker, &mut conn, &mut pipe, &mut rbuf, &mut out).await;
        if !out.is_empty() {
            stream.write_all(&out).await?;
            shared
                .counters
                .total_net_output_bytes
                .fetch_add(out.len() as u64, Ordering::Relaxed);
            if out.capacity() > KEEP_OUTPUT_CAPACITY {
                out = BytesMut::with_capacity(READ_CHUNK);
            } else {
                out.clear();
            }
        }
        if conn.close {
            let _ = stream.shutdown().await;
            return Ok(());
        }
        if rbuf.len() > conn.query_buffer_limit {
            tracing::warn!(
                "closing client {} at {}: query buffer {} bytes over client-query-buffer-limit",
                handle.id,
                handle.addr,
                rbuf.len()
            );
            return Ok(());
        }
    }
}

/// Runs one read's worth of requests: decodes every complete request in
/// `rbuf` (an incomplete one stays there for the next read), plans them into
/// `pipe`, runs connection commands in request order after flushing what is
/// owed before them (after one, the clock and the configuration are read
/// again), and appends every reply to `out` in request order. Stops
/// early when the connection is to close (`conn.close`: QUIT, CLIENT KILL of
/// itself, a protocol error, whose reply is the last one).
pub(crate) async fn serve_read(
    worker: &Worker,
    conn: &mut ConnState,
    pipe: &mut Pipeline,
    rbuf: &mut BytesMut,
    out: &mut BytesMut,
) {
    conn.refresh(&worker.shared);
    worker.shard.borrow_mut().tick();
    loop {
        match decode_request(rbuf, &conn.limits) {
            Ok(Some(items)) if items.is_empty() => continue,
            Ok(Some(items)) => match plan(worker, conn, pipe, items) {
                Planned::Queued => {}
                Planned::Conn(idx, mut args) => {
                    pipe.flush(worker, conn.proto, out).await;
                    let reply = run_conn_command(worker, conn, idx, &mut args);
                    // A CONFIG SET applies to the rest of this read: to the
                    // decoder's limits and to this shard, as it does to the
                    // other shards' next batches.
                    conn.refresh(&worker.shared);
                    worker.shard.borrow_mut().tick();
                    if !std::mem::take(&mut conn.no_reply) {
                        reply.encode(conn.proto, out);
                    }
                    if conn.close {
                        break;
                    }
                }
            },
            Ok(None) => break,
            Err(e) => {
                pipe.flush(worker, conn.proto, out).await;
                let reply = protocol_error(&e);
                worker.shard.borrow().stats.count_reply(&reply);
                reply.encode(conn.proto, out);
                conn.close = true;
                break;
            }
        }
    }
    pipe.flush(worker, conn.proto, out).await;
}
