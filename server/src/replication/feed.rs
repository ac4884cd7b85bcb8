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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{decode_request, encode_request, Limits};

use parking_lot::{Condvar, Mutex};

use crate::replication::backlog::Gap;
use crate::replication::role::random_hex40;
use crate::session::ReplicaHello;
use crate::shard::{Cut, Mailbox, Msg};
use crate::state::Shared;
use crate::store::{ImagePart, ImageSink};

/// `repl-timeout`: silence after which either side drops a link, and the
/// longest a write to it may block.
pub fn repl_timeout(shared: &Shared) -> Duration {
    Duration::from_secs(u64::from(shared.config.read().replication.repl_timeout))
}
/// Most stream bytes copied per lock of the backlog.
const READ_MAX: usize = 64 * 1024;
/// Longest every shard may take to cut.
const CUT_TIMEOUT: Duration = Duration::from_secs(5);
/// Most stream bytes one replica's output buffer holds unwritten (Redis's
/// hard `client-output-buffer-limit replica`, 256 MB).
const OUTPUT_LIMIT: usize = 256 * 1024 * 1024;

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
                let cut = cut(shared, &f.mailboxes)?;
                (cut.offset, Some(cut))
            }
        };
        std::thread::scope(|s| {
            // From here to the end of the connection a thread copies the
            // stream into this replica's own buffer as it grows, so the
            // shared backlog's wrap never outruns a replica that is slow
            // for a moment (loading a payload, a scheduling hiccup).
            let copier = s.spawn(|| copy_stream(shared, from, &out, &alive, generation));
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
            sent.and(copied)
        })
    })();
    alive.store(false, Ordering::SeqCst);
    let _ = w.shutdown(std::net::Shutdown::Both);
    result
}

/// One replica's output buffer: the stream copied from the backlog, not
/// yet written. Its hard limit is Redis's `client-output-buffer-limit
/// replica` hard limit, [`OUTPUT_LIMIT`].
#[derive(Default)]
struct Outbuf {
    bytes: Mutex<Vec<u8>>,
    grown: Condvar,
}

impl Outbuf {
    fn wake(&self) {
        self.grown.notify_all();
    }
}

/// Sends every shard [`Msg::Release`] when dropped, so no shard holds its
/// effects past the cut whatever happens to the sync.
struct Release<'a>(&'a [Mailbox]);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        for m in self.0 {
            m.send(Msg::Release);
        }
    }
}

/// A full sync's cut: its offset and where the shards' images come.
struct CutDone {
    offset: u64,
    images: crossbeam_channel::Receiver<ImagePart>,
    queued: Arc<AtomicUsize>,
    shards: usize,
}

/// Cuts every shard at one offset of the merged stream (one cut at a time
/// server-wide; it lasts a mailbox round trip to every shard).
fn cut(shared: &Shared, mailboxes: &[Mailbox]) -> std::io::Result<CutDone> {
    let repl = &shared.repl;
    let _one_cut_at_a_time = repl.full_sync.lock();
    let (tx, rx) = crossbeam_channel::unbounded();
    let queued = Arc::new(AtomicUsize::new(0));
    let (cut_tx, cut_rx) = crossbeam_channel::bounded(mailboxes.len());
    let release = Release(mailboxes);
    for m in mailboxes {
        let sink = ImageSink {
            tx: tx.clone(),
            queued: queued.clone(),
        };
        m.send(Msg::Cut(Cut {
            sink,
            cut: cut_tx.clone(),
        }));
    }
    drop(tx);
    for _ in mailboxes {
        if cut_rx.recv_timeout(CUT_TIMEOUT).is_err() {
            return Err(other("a shard did not cut in time"));
        }
    }
    // Every shard has published what it wrote before its cut and holds the
    // rest: the stream's length now is the cut's offset.
    let offset = repl.backlog.offset();
    drop(release);
    Ok(CutDone {
        offset,
        images: rx,
        queued,
        shards: mailboxes.len(),
    })
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
    let mut head = BytesMut::new();
    head.extend_from_slice(format!("$EOF:{mark}\r\n").as_bytes());
    let unix_ms = shared.clock.now().unix_ms.to_string();
    let shards = shared.shards.to_string();
    let m_text = m.to_string();
    let header = ["LH.SNAPSHOT", "1", &ids.replid, &m_text, &unix_ms, &shards];
    encode_request(&header, &mut head);
    // The replica starts from nothing: its own keys go first.
    encode_request(&["LH.FLUSHSLOTS", "0", "16383"], &mut head);
    w.write_all(&head)?;
    let records = 1 + send_images(&cut, w, alive, shared)?;
    let mut end = BytesMut::new();
    encode_request(&["LH.SNAPEND", &records.to_string()], &mut end);
    end.extend_from_slice(mark.as_bytes());
    w.write_all(&end)?;
    tracing::info!(
        "replication: full sync of {records} records at offset {m} sent in {} ms",
        started.elapsed().as_millis()
    );
    Ok(())
}

/// Writes every shard's image chunks as they come, until all are done;
/// returns how many records they held.
fn send_images(
    cut: &CutDone,
    w: &mut TcpStream,
    alive: &AtomicBool,
    shared: &Shared,
) -> std::io::Result<u64> {
    let mut records = 0u64;
    let mut done = 0;
    while done < cut.shards {
        match cut.images.recv_timeout(Duration::from_millis(10)) {
            Ok(ImagePart::Chunk(bytes, n)) => {
                cut.queued.fetch_sub(bytes.len(), Ordering::Relaxed);
                w.write_all(&bytes)?;
                records += n;
            }
            Ok(ImagePart::Done) => done += 1,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                return Err(other("a shard stopped its image"));
            }
        }
        if !alive.load(Ordering::SeqCst) || shared.shutting_down.load(Ordering::SeqCst) {
            return Err(other("the replica went away during its full sync"));
        }
    }
    Ok(records)
}

/// Whether the sender must stop: the replica went, the server stops, or
/// this node's role changed.
fn stopped(shared: &Shared, alive: &AtomicBool, generation: u64) -> bool {
    !alive.load(Ordering::SeqCst)
        || shared.shutting_down.load(Ordering::SeqCst)
        || !shared.repl.generation_is(generation)
}

/// Copies the stream from position `from` into `out` as it grows, until
/// the sender stops.
///
/// # Errors
/// The backlog wrapped past the copier (it fell behind by more than the
/// backlog in one wait: not expected), or `out` passed [`OUTPUT_LIMIT`].
fn copy_stream(
    shared: &Shared,
    from: u64,
    out: &Outbuf,
    alive: &AtomicBool,
    generation: u64,
) -> std::io::Result<()> {
    let backlog = &shared.repl.backlog;
    let mut pos = from;
    let mut chunk = Vec::with_capacity(READ_MAX);
    while !stopped(shared, alive, generation) {
        loop {
            chunk.clear();
            match backlog.read(pos, READ_MAX, &mut chunk) {
                Ok(0) => break,
                Ok(n) => pos += n as u64,
                Err(Gap::Gone) => return Err(other("the replica fell behind the backlog")),
                Err(Gap::Ahead) => return Err(other("the stream restarted under the replica")),
            }
            let mut b = out.bytes.lock();
            b.extend_from_slice(&chunk);
            if b.len() > OUTPUT_LIMIT {
                return Err(other(
                    "the replica's output buffer passed client-output-buffer-limit (256 MB)",
                ));
            }
            drop(b);
            out.wake();
        }
        backlog.wait_past(pos, Duration::from_millis(100));
    }
    Ok(())
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
        {
            let mut b = out.bytes.lock();
            if b.is_empty() {
                let _ = out.grown.wait_for(&mut b, Duration::from_millis(100));
            }
            std::mem::swap(&mut *b, &mut spare);
        }
        if !spare.is_empty() {
            w.write_all(&spare)?;
            spare.clear();
            // A burst must not pin its buffer.
            if spare.capacity() > 4 * READ_MAX {
                spare = Vec::new();
            }
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
