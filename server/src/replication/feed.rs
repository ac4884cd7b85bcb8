//! A primary's sender to one replica, on the replica's socket (taken out
//! of the event loop after its PSYNC): a writer thread, a reader thread for
//! its `REPLCONF ACK`s, and a copier thread that moves the stream from the
//! shared backlog into the replica's own output buffer as soon as it grows
//! (up to 256 MB, Redis's hard `client-output-buffer-limit replica`), so a
//! replica slow for a moment never falls behind the 1 MB backlog.
//!
//! PSYNC is answered `+CONTINUE <replid>` when the replica's history and
//! offset allow a partial resync (`Replication::continue_from`), and the
//! stream follows from its offset. Otherwise `+FULLRESYNC <replid> <M>`:
//! every shard is cut at one merged offset `M` (each publishes what it
//! wrote, holds later effects and starts its image; once all have cut, `M`
//! is the stream's length and they are released), then the payload (the
//! shards' images, framed as Redis's diskless payload: `$EOF:<mark>\r\n`
//! ... `<mark>`), then the stream from `M`, which the copier has been
//! buffering since the cut.
//! Every effect before the cut is in the images, every one after it is in
//! the stream from `M`: each write reaches the replica exactly once.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{decode_request, Limits};

use crate::replication::outbuf::{copy_stream, Outbuf, READ_MAX};
use crate::replication::role::random_hex40;
use crate::replication::snapshot::{cut, write_body, CutDone};
use crate::session::ReplicaHello;
use crate::shard::Mailbox;
use crate::state::Shared;

/// `repl-timeout`: silence after which either side drops a link, and the
/// longest a write to it may block.
pub fn repl_timeout(shared: &Shared) -> Duration {
    Duration::from_secs(u64::from(shared.config.read().replication.repl_timeout))
}
/// Why `pending` bytes of a replica's stream waiting unwritten break the
/// `client-output-buffer-limit` replica class now (read at each look, so a
/// CONFIG SET applies to links already up); `soft_since` is when the soft
/// limit was passed.
fn replica_over_limit(
    shared: &Shared,
    pending: usize,
    soft_since: &mut Option<std::time::Instant>,
) -> Option<String> {
    let limit = shared.config.read().limits.replica_output_limit();
    let now = std::time::Instant::now();
    limit.exceeded(pending as u64, soft_since, now).then(|| {
        match limit.hard > 0 && pending as u64 >= limit.hard {
            true => format!(
                "{pending} bytes waiting passed the hard limit of {}",
                limit.hard
            ),
            false => format!(
                "{pending} bytes waiting stayed over the soft limit of {} for {} s",
                limit.soft, limit.soft_seconds
            ),
        }
    })
}

/// What a sender starts from.
#[derive(Debug)]
pub struct FeedStart {
    /// Server-wide state.
    pub shared: Arc<Shared>,
    /// Every thread's mailbox (a full sync cuts every shard).
    pub mailboxes: Arc<Vec<Mailbox>>,
    /// The replica's socket (blocking).
    pub stream: TcpStream,
    /// Replies owed to the replica before its PSYNC, not yet written.
    pub out: Bytes,
    /// Bytes it sent after its PSYNC.
    pub input: BytesMut,
    /// PSYNC's history id.
    pub replid: String,
    /// PSYNC's offset (the first byte wanted).
    pub offset: i64,
    /// What it said of itself.
    pub hello: ReplicaHello,
}

/// Starts the sender's threads.
pub fn start(f: FeedStart) {
    let spawned = std::thread::Builder::new()
        .name("leasehold-repl-feed".into())
        .spawn(move || {
            let repl = f.shared.repl.clone();
            let ip = f.hello.ip.clone().unwrap_or_else(|| {
                f.stream
                    .peer_addr()
                    .map_or_else(|_| "?".into(), |a| a.ip().to_string())
            });
            let id = repl.add_replica(ip.clone(), f.hello.listening_port);
            match run(f, id) {
                Ok(()) => tracing::info!("replication: replica {ip} disconnected"),
                Err(e) => tracing::warn!("replication: connection with replica {ip} lost: {e}"),
            }
            repl.remove_replica(id);
        });
    if let Err(e) = spawned {
        tracing::warn!("replication: cannot start a sender: {e}");
    }
}

fn other(why: impl Into<String>) -> std::io::Error {
    std::io::Error::other(why.into())
}

fn run(f: FeedStart, id: u64) -> std::io::Result<()> {
    let shared = &f.shared;
    let repl = shared.repl.clone();
    let generation = repl.generation();
    let timeout = repl_timeout(shared);
    let mut w = f.stream;
    w.set_nonblocking(false)?;
    w.set_write_timeout(Some(timeout))?;
    let _ = w.set_nodelay(true);
    w.write_all(&f.out)?;
    let alive = Arc::new(AtomicBool::new(true));
    let reader = w.try_clone()?;
    {
        let (repl, alive) = (repl.clone(), alive.clone());
        std::thread::Builder::new()
            .name("leasehold-repl-acks".into())
            .spawn(move || read_acks(reader, f.input, &repl, id, &alive, timeout))?;
    }
    let out = Outbuf::default();
    // Counted from before the cut: a big record appended before the copier
    // starts must not be lost to the ring's wrap.
    let following = repl.backlog.follow();
    let result = (|| {
        let (from, cut) = match repl.answer_psync(&f.replid, f.offset) {
            Some(from) => {
                let ids = repl.ids();
                w.write_all(format!("+CONTINUE {}\r\n", ids.replid).as_bytes())?;
                tracing::info!(
                    "replication: partial resync of a replica from offset {}",
                    from + 1
                );
                (from, None)
            }
            None => {
                // Between two tries at the cut the replica, which waits
                // for +FULLRESYNC, gets a keepalive.
                let keepalive = || match stopped(shared, &alive, generation) {
                    true => Err(other("the replica went")),
                    false => w.write_all(b"\n"),
                };
                let cut = cut(shared, &f.mailboxes, keepalive, |_| {})?;
                (cut.offset, Some(cut))
            }
        };
        // The backlog keeps what this replica's copier has not read: a
        // copier not scheduled for a while (a busy machine) finds the ring
        // grown, not wrapped past it (which dropped the replica).
        let pinned = repl.backlog.pin_scoped(from);
        std::thread::scope(|s| {
            // From here to the end of the connection a thread copies the
            // stream into this replica's own buffer as it grows, so the
            // shared backlog's wrap never outruns a replica that is slow
            // for a moment (loading a payload, a scheduling hiccup).
            let (alive_ref, out_ref, backlog) = (&alive, &out, &repl.backlog);
            let pin = &pinned.pin;
            let stop = move |_| stopped(shared, alive_ref, generation);
            // A copier that fails (the output limit) ends the link at once:
            // the writer may be blocked in a write to a replica that does
            // not read.
            let killer = w.try_clone()?;
            let copier = s.spawn(move || {
                let mut soft_since = None;
                let over = |pending| replica_over_limit(shared, pending, &mut soft_since);
                let copied = copy_stream(backlog, from, out_ref, over, READ_MAX, pin, stop);
                if copied.is_err() {
                    alive_ref.store(false, Ordering::SeqCst);
                    let _ = killer.shutdown(std::net::Shutdown::Both);
                }
                copied.map_err(|e| {
                    other(format!(
                        "replica stream: {e} (client-output-buffer-limit replica)"
                    ))
                })
            });
            let sent = (|| {
                if let Some(cut) = cut {
                    repl.replica_state(id, "send_bulk");
                    send_payload(shared, cut, &mut w, &alive)?;
                }
                repl.replica_state(id, "online");
                drain(shared, &out, &mut w, &alive, generation)
            })();
            alive.store(false, Ordering::SeqCst);
            out.wake();
            let copied = copier
                .join()
                .unwrap_or_else(|_| Err(other("the copier panicked")));
            copied.and(sent)
        })
    })();
    drop(following);
    alive.store(false, Ordering::SeqCst);
    let _ = w.shutdown(std::net::Shutdown::Both);
    result
}

/// Writes `+FULLRESYNC`, then the payload: the framing, the header, the
/// flush, every shard's image as it comes, the end record and mark.
fn send_payload(
    shared: &Shared,
    cut: CutDone,
    w: &mut TcpStream,
    alive: &AtomicBool,
) -> std::io::Result<()> {
    let started = Instant::now();
    let m = cut.offset;
    let ids = shared.repl.ids();
    w.write_all(format!("+FULLRESYNC {} {m}\r\n", ids.replid).as_bytes())?;
    let mark = random_hex40();
    w.write_all(format!("$EOF:{mark}\r\n").as_bytes())?;
    let go_on = || alive.load(Ordering::SeqCst) && !shared.shutting_down.load(Ordering::SeqCst);
    let records = write_body(shared, &cut, w, go_on)?;
    w.write_all(mark.as_bytes())?;
    tracing::info!(
        "replication: full sync of {records} records at offset {m} sent in {} ms",
        started.elapsed().as_millis()
    );
    Ok(())
}

/// Whether the sender must stop: the replica went, the server stops, or
/// this node's role changed.
fn stopped(shared: &Shared, alive: &AtomicBool, generation: u64) -> bool {
    !alive.load(Ordering::SeqCst)
        || shared.shutting_down.load(Ordering::SeqCst)
        || !shared.repl.generation_is(generation)
}

/// Writes what the copier put in `out` until the sender stops.
fn drain(
    shared: &Shared,
    out: &Outbuf,
    w: &mut TcpStream,
    alive: &AtomicBool,
    generation: u64,
) -> std::io::Result<()> {
    let mut spare = Vec::new();
    while !stopped(shared, alive, generation) {
        out.take(&mut spare, Duration::from_millis(100));
        if !spare.is_empty() {
            w.write_all(&spare)?;
        }
    }
    Ok(())
}

/// Reads the replica's `REPLCONF ACK <offset>`s until its socket closes or
/// the sender stops; a replica silent for `timeout` is dropped.
fn read_acks(
    mut r: TcpStream,
    mut input: BytesMut,
    repl: &crate::replication::role::Replication,
    id: u64,
    alive: &AtomicBool,
    timeout: Duration,
) {
    let _ = r.set_read_timeout(Some(Duration::from_millis(500)));
    let limits = Limits::default();
    let mut chunk = [0u8; 4096];
    let mut last = Instant::now();
    while alive.load(Ordering::SeqCst) {
        loop {
            match decode_request(&mut input, &limits) {
                Ok(Some(items)) => {
                    let ack = items.len() >= 3
                        && items[0].eq_ignore_ascii_case(b"REPLCONF")
                        && items[1].eq_ignore_ascii_case(b"ACK");
                    if let Some(n) = ack
                        .then(|| leasehold_protocol::int::parse_u64(&items[2]))
                        .flatten()
                    {
                        repl.replica_ack(id, n);
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    alive.store(false, Ordering::SeqCst);
                    return;
                }
            }
        }
        match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                input.extend_from_slice(&chunk[..n]);
                last = Instant::now();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if last.elapsed() > timeout {
                    tracing::warn!("replication: replica silent for {timeout:?}, dropping it");
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    alive.store(false, Ordering::SeqCst);
    let _ = r.shutdown(std::net::Shutdown::Both);
}
