//! The append-only log's writer: the merged replication stream, from an
//! offset on, appended to the current increment file in checksummed
//! segments (`format.rs`), fsynced as `appendfsync` says.
//!
//! Two threads, as a replica's sender has: a copier moves the stream from
//! the backlog into the writer's own buffer as soon as it grows (so a disk
//! busy with an fsync never holds the copier up), and the writer appends
//! what is there, one segment per write. The backlog keeps every byte the
//! copier has not read (it is pinned, `Backlog::pin`): a burst of large
//! writes grows the backlog (up to 1 GB) rather than wrapping past the log. Under `always` a
//! shard that published waits (`Backlog::wait_synced`) until the writer
//! has fsynced past its records, so no reply leaves before its effects are
//! on disk; under `everysec` the writer fsyncs once a second; under `no`
//! never.
//!
//! A rewrite switches the writer to a new increment at exactly the cut's
//! offset ([`Writer::switch_at`]): bytes before it end the old file, bytes
//! from it start the new one.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::persist::format::{crc32, record_end, segment_crc};
use crate::replication::outbuf::{copy_stream, Outbuf};
use crate::state::Shared;

/// Most stream bytes the writer may have left to write before shards wait
/// (under `everysec` and `no`): what a `kill -9` can lose at most.
const WRITE_LAG: u64 = 4 << 20;
/// A log segment's size, about: the records up to the first that passes it.
const SEGMENT: usize = 1 << 20;
/// Most stream bytes the writer's buffer holds unwritten.
const BUFFER_LIMIT: usize = 1 << 30;
/// An everysec fsync slower than this counts as delayed (Redis's 2 s).
const DELAYED_FSYNC: Duration = Duration::from_secs(2);

/// `appendfsync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fsync {
    /// After every write.
    Always,
    /// Once a second.
    EverySec,
    /// Never (the system flushes when it likes).
    No,
}

impl Fsync {
    /// The policy `appendfsync` names.
    pub fn of(shared: &Shared) -> Fsync {
        match shared.config.read().persistence.appendfsync.as_str() {
            "always" => Fsync::Always,
            "no" => Fsync::No,
            _ => Fsync::EverySec,
        }
    }
}

/// What the writer and its owner share.
#[derive(Debug)]
struct State {
    /// A file to continue in at an offset (a rewrite's new increment).
    switch: Mutex<Option<(u64, File)>>,
    /// Stream offset written so far.
    pos: AtomicU64,
    /// Bytes of the current increment file.
    len: AtomicU64,
    /// Stop once the stream is written up to this offset (`u64::MAX`: run).
    stop_at: AtomicU64,
    /// The writer or copier failed; why.
    failed: Mutex<Option<String>>,
    /// The copier ended.
    copier_done: AtomicBool,
    /// Whether what it fsyncs counts as on disk for `appendfsync always`
    /// (false while the first base file is not written yet: its increment
    /// is in no manifest).
    armed: AtomicBool,
}

/// A running log writer.
#[derive(Debug)]
pub struct Writer {
    state: Arc<State>,
    out: Arc<Outbuf>,
    threads: Vec<JoinHandle<()>>,
}

impl Writer {
    /// Starts writing the stream from offset `from` to `file`, whose
    /// length is `len` bytes; `armed` as [`Writer::arm`] makes it.
    ///
    /// # Errors
    /// The system refused a thread.
    pub fn start(
        shared: Arc<Shared>,
        file: File,
        from: u64,
        len: u64,
        armed: bool,
    ) -> std::io::Result<Writer> {
        let state = Arc::new(State {
            switch: Mutex::new(None),
            pos: AtomicU64::new(from),
            len: AtomicU64::new(len),
            stop_at: AtomicU64::new(u64::MAX),
            failed: Mutex::new(None),
            copier_done: AtomicBool::new(false),
            armed: AtomicBool::new(false),
        });
        let out = Arc::new(Outbuf::default());
        // Everything before `from` is in the base (or the files loaded).
        shared.repl.backlog.mark_synced(from);
        // Nothing from `from` on may wrap away before the copier reads it.
        let pin = shared.repl.backlog.pin(from);
        let copier = {
            let (shared, state, out) = (shared.clone(), state.clone(), out.clone());
            std::thread::Builder::new()
                .name("leasehold-aof-copy".into())
                .spawn(move || {
                    // Copies up to the stop offset: the stream's end at the stop.
                    let stop = |pos: u64| {
                        pos >= state.stop_at.load(Ordering::SeqCst) || state.failed.lock().is_some()
                    };
                    // Whole records only: a segment never ends inside one.
                    let r = copy_stream(
                        &shared.repl.backlog,
                        from,
                        &out,
                        |pending| {
                            (pending > BUFFER_LIMIT)
                                .then(|| format!("the output buffer passed {BUFFER_LIMIT} bytes"))
                        },
                        usize::MAX,
                        &pin,
                        stop,
                    );
                    if let Err(e) = r {
                        let mut f = state.failed.lock();
                        f.get_or_insert(format!("append-only log stream: {e}"));
                    }
                    shared.repl.backlog.unpin(&pin);
                    state.copier_done.store(true, Ordering::SeqCst);
                    out.wake();
                })?
        };
        let writer = {
            let (shared, state, out) = (shared.clone(), state.clone(), out.clone());
            std::thread::Builder::new()
                .name("leasehold-aof".into())
                .spawn(move || write_loop(&shared, file, &state, &out))?
        };
        let w = Writer {
            state,
            out,
            threads: vec![copier, writer],
        };
        if armed {
            w.arm(&shared);
        }
        Ok(w)
    }

    /// From now on what it fsyncs is on disk for good (its increment is in
    /// the manifest): under `appendfsync always` writers wait for it.
    pub fn arm(&self, shared: &Shared) {
        self.state.armed.store(true, Ordering::SeqCst);
        shared.repl.backlog.mark_written(self.pos());
        shared.repl.backlog.set_write_lag(WRITE_LAG);
        if Fsync::of(shared) == Fsync::Always {
            shared.repl.backlog.set_sync_always(true);
        }
    }

    /// Whether [`Writer::arm`] was called.
    pub fn armed(&self) -> bool {
        self.state.armed.load(Ordering::SeqCst)
    }

    /// From stream offset `at` on (not yet written), bytes go to `file`
    /// instead. Called at a rewrite's cut, while no shard publishes.
    pub fn switch_at(&self, at: u64, file: File) {
        *self.state.switch.lock() = Some((at, file));
        self.out.wake();
    }

    /// Whether a switch asked for is done.
    pub fn switched(&self) -> bool {
        self.state.switch.lock().is_none()
    }

    /// Stream offset written so far.
    pub fn pos(&self) -> u64 {
        self.state.pos.load(Ordering::SeqCst)
    }

    /// Bytes of the current increment file.
    pub fn file_len(&self) -> u64 {
        self.state.len.load(Ordering::Relaxed)
    }

    /// Why it stopped, if it failed.
    pub fn failure(&self) -> Option<String> {
        self.state.failed.lock().clone()
    }

    /// Writes the stream up to its current end, fsyncs, and stops.
    pub fn finish(mut self, shared: &Shared) {
        let end = shared.repl.backlog.offset();
        self.state.stop_at.store(end, Ordering::SeqCst);
        self.out.wake();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        shared.repl.backlog.set_sync_always(false);
        shared.repl.backlog.set_write_lag(0);
    }
}

/// Writes segments until the stop offset is written or a failure.
fn write_loop(shared: &Shared, mut file: File, state: &State, out: &Outbuf) {
    let mut chunk = Vec::new();
    let mut pos = state.pos.load(Ordering::SeqCst);
    let mut last_sync = Instant::now();
    let mut unsynced = false;
    let result = (|| -> std::io::Result<()> {
        loop {
            let policy = Fsync::of(shared);
            out.take(&mut chunk, Duration::from_millis(50));
            let mut rest = &chunk[..];
            loop {
                let at = state.switch.lock().as_ref().map(|(at, _)| *at);
                if let Some(at) = at {
                    if at <= pos {
                        // The old file ends here: on disk before the new begins.
                        file.sync_data()?;
                        if let Some((_, next)) = state.switch.lock().take() {
                            file = next;
                            state.len.store(0, Ordering::Relaxed);
                        }
                        continue;
                    }
                    if at < pos + rest.len() as u64 {
                        let n = (at - pos) as usize;
                        append(&mut file, &rest[..n], state)?;
                        pos += n as u64;
                        rest = &rest[n..];
                        continue;
                    }
                }
                if !rest.is_empty() {
                    append(&mut file, rest, state)?;
                    pos += rest.len() as u64;
                    unsynced = true;
                }
                break;
            }
            state.pos.store(pos, Ordering::SeqCst);
            shared.repl.backlog.mark_written(pos);
            let stop_at = state.stop_at.load(Ordering::SeqCst);
            let stopping =
                pos >= stop_at || state.copier_done.load(Ordering::SeqCst) && chunk.is_empty();
            let due = match policy {
                Fsync::Always => true,
                Fsync::EverySec => last_sync.elapsed() >= Duration::from_secs(1),
                Fsync::No => false,
            };
            if unsynced && (due || stopping) {
                let t = Instant::now();
                file.sync_data()?;
                if policy == Fsync::EverySec && t.elapsed() > DELAYED_FSYNC {
                    shared
                        .persist
                        .delayed_fsyncs
                        .fetch_add(1, Ordering::Relaxed);
                }
                last_sync = Instant::now();
                unsynced = false;
            }
            if !unsynced && state.armed.load(Ordering::SeqCst) {
                shared.repl.backlog.mark_synced(pos);
            }
            if stopping {
                return Ok(());
            }
        }
    })();
    if let Err(e) = result {
        shared
            .persist
            .aof_write_failed
            .store(true, Ordering::SeqCst);
        if Fsync::of(shared) == Fsync::Always {
            tracing::error!(
                "Can't recover from an append-only log write error ({e}) when appendfsync is 'always'. Exiting..."
            );
            std::process::exit(1);
        }
        tracing::error!("append-only log write failed: {e}");
        state
            .failed
            .lock()
            .get_or_insert(format!("append-only log write: {e}"));
    }
    shared.repl.backlog.set_sync_always(false);
    shared.repl.backlog.set_write_lag(0);
}

/// Appends `bytes` (whole records) as segments of about [`SEGMENT`]
/// bytes, each with its checksum record, one write each: a write torn by
/// a power loss costs its own segment only.
fn append(file: &mut File, bytes: &[u8], state: &State) -> std::io::Result<()> {
    let mut start = 0;
    while start < bytes.len() {
        // Records from `start` until the segment passes SEGMENT bytes (a
        // record that does not parse, never expected, ends it whole).
        // What is left fits one segment (the usual case): no scan.
        let mut end = match bytes.len() - start <= SEGMENT {
            true => bytes.len(),
            false => start,
        };
        while end < bytes.len() && end - start < SEGMENT {
            end = record_end(bytes, end).unwrap_or(bytes.len());
        }
        let part = &bytes[start..end];
        let mut seg = Vec::with_capacity(part.len() + 30);
        seg.extend_from_slice(part);
        seg.extend_from_slice(&segment_crc(crc32(part)));
        file.write_all(&seg)?;
        state.len.fetch_add(seg.len() as u64, Ordering::Relaxed);
        start = end;
    }
    Ok(())
}
