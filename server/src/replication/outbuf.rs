//! A follower's own buffer of the merged stream: a copier thread moves the
//! stream from the shared backlog into it as soon as the backlog grows, so
//! a follower slow for a moment (a replica loading a payload, a disk busy
//! with an fsync) never falls behind the backlog's wrap; its writer takes
//! what is there in one swap.

use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::replication::backlog::{Backlog, Gap, Pinned};

/// Most stream bytes copied per lock of the backlog.
pub const READ_MAX: usize = 64 * 1024;

/// How long a copier that just found new bytes lingers before it looks
/// again (woken early only once a quarter of the backlog has come, so
/// the ring never wraps past it), instead of being woken by the next
/// append. Under a
/// steady stream one copy (and one wake of its writer) then carries every
/// publish of that time, where waking at each append cost two thread
/// switches per shard batch: measured with `redis-benchmark -P 16` SET on
/// two threads, the primary spent 24% more CPU per request with a replica
/// attached, most of it in the feed threads' wakeups. A quiet stream is
/// copied at once (the copier waits for the append), so this adds at most
/// this much to a replica's lag, and only under load; under `appendfsync
/// always`, where every write waits for the log, no copier lingers.
pub const LINGER: Duration = Duration::from_micros(200);

/// The stream copied from the backlog and not yet taken by its writer.
#[derive(Debug, Default)]
pub struct Outbuf {
    bytes: Mutex<Vec<u8>>,
    grown: Condvar,
}

impl Outbuf {
    /// Wakes a writer waiting in [`Outbuf::take`].
    pub fn wake(&self) {
        self.grown.notify_all();
    }

    /// Swaps what the buffer holds into `into` (cleared first), waiting up
    /// to `wait` when it is empty.
    pub fn take(&self, into: &mut Vec<u8>, wait: Duration) {
        into.clear();
        let mut b = self.bytes.lock();
        if b.is_empty() {
            let _ = self.grown.wait_for(&mut b, wait);
        }
        std::mem::swap(&mut *b, into);
        // The spare swapped in must not pin a burst's capacity.
        if b.capacity() > 4 * READ_MAX {
            *b = Vec::new();
        }
    }
}

/// Copies the stream from position `from` into `out` as it grows, at most
/// `max_read` bytes per lock of the backlog, until `stopped` (given the
/// position copied up to) says so. With `max_read` `usize::MAX` every copy
/// reaches the stream's end at that moment, which is a record boundary
/// (the backlog takes whole records), so `out` always ends with a whole
/// record. `pin`: the backlog keeps every byte this copier has not read
/// yet (`Backlog::pin`; every follower has one).
///
/// # Errors
/// The backlog wrapped past the copier (it fell behind by more than the
/// backlog in one wait: not expected), the stream restarted under it (a
/// replica's full sync), or `over` said why the bytes `out` holds unwritten
/// break its limit (it is asked after each copy, with that count).
pub fn copy_stream(
    backlog: &Backlog,
    from: u64,
    out: &Outbuf,
    mut over: impl FnMut(usize) -> Option<String>,
    max_read: usize,
    pin: &Pinned,
    stopped: impl Fn(u64) -> bool,
) -> Result<(), String> {
    let _following = backlog.follow();
    let mut pos = from;
    let mut chunk = Vec::with_capacity(READ_MAX);
    while !stopped(pos) {
        let mut copied = false;
        loop {
            chunk.clear();
            match backlog.read(pos, max_read, &mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    copied = true;
                    pos += n as u64;
                    pin.set(pos);
                }
                Err(Gap::Gone) => return Err("fell behind the backlog".into()),
                Err(Gap::Ahead) => return Err("the stream restarted".into()),
            }
            let mut b = out.bytes.lock();
            b.extend_from_slice(&chunk);
            let pending = b.len();
            drop(b);
            if let Some(why) = over(pending) {
                return Err(why);
            }
            out.wake();
        }
        // Under `appendfsync always` every write waits for the log's
        // copier: it must not linger.
        if copied && !backlog.sync_always() {
            backlog.linger(pos, LINGER);
        } else {
            backlog.wait_past(pos, Duration::from_millis(100));
        }
    }
    Ok(())
}
