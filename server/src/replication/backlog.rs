//! The merged backlog: every shard's effects in one byte sequence, the
//! replication stream replicas follow. Its length so far is the replication
//! offset (`master_repl_offset`); the last `repl-backlog-size` bytes are kept
//! for partial resynchronisation.
//!
//! Shards append at the end of a batch (one lock per batch that wrote, never
//! per command), always whole records, so every offset a reader reaches
//! after a whole append is a record boundary. Senders wait on the condition
//! variable and copy what is new into their own buffers. On a replica the
//! link appends the records it applied, so its offsets equal its primary's.
//!
//! Offsets follow Redis: the stream's first byte is offset 1, and a reader
//! that has applied `R` bytes asks for byte `R + 1` (PSYNC). Internally a
//! position is the count of bytes before it, so byte `R + 1` is at `R`.

use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// The record a primary writes every `repl-ping-replica-period` while
/// replicas are connected: `PING` as a RESP array.
pub const PING_RECORD: &[u8] = b"*1\r\n$4\r\nPING\r\n";

struct Ring {
    buf: Vec<u8>,
    /// Bytes in the stream so far (the replication offset).
    offset: u64,
    /// Bytes of the stream still in `buf` (at most its length).
    histlen: u64,
    /// The lowest offset a waiting follower wants to be woken at
    /// (`u64::MAX`: none waits): an append wakes the followers only once
    /// the stream reaches it, so a follower that lingers is not woken by
    /// every append.
    wake_at: u64,
    /// The positions of the followers that must never fall behind (the
    /// append-only log's copier, each replica's): an append that would
    /// overwrite bytes one of them has not read grows the ring instead.
    pins: Vec<Pinned>,
}

/// The record that opens a transaction's frame in the stream.
pub const MULTI_RECORD: &[u8] = b"*1\r\n$5\r\nMULTI\r\n";
/// The record that closes it.
pub const EXEC_RECORD: &[u8] = b"*1\r\n$4\r\nEXEC\r\n";

/// A transaction's records on one shard, handed to its coordinator
/// (`EffectLog::take_part`) and appended with the other shards' as one
/// unit ([`Backlog::append_unit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Whole records, in the order they were written.
    pub bytes: Vec<u8>,
    /// They name two or more hash slots: even alone, the part must be
    /// framed.
    pub many_slots: bool,
}

/// The merged replication stream's tail and its offset.
pub struct Backlog {
    ring: Mutex<Ring>,
    grown: Condvar,
    durable: Durable,
    /// Followers copying the stream (a replica's sender, the log's copier):
    /// only for them does a record bigger than half the ring grow it.
    followers: std::sync::atomic::AtomicUsize,
    /// `repl-backlog-size`: the ring goes back to this once nobody follows.
    base: usize,
}

/// A follower of the stream, counted while it lives ([`Backlog::follow`]).
pub struct Following<'a>(&'a Backlog);

impl Drop for Following<'_> {
    fn drop(&mut self) {
        let f = &self.0.followers;
        f.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The most a pinned follower may keep the ring growing to, bytes.
const PIN_LIMIT: usize = 1 << 30;

/// A follower's hold on the stream ([`Backlog::pin`]): the position up to
/// which it has read; the backlog keeps every byte from there on until
/// [`Backlog::unpin`].
#[derive(Debug, Clone)]
pub struct Pinned(std::sync::Arc<std::sync::atomic::AtomicU64>);

/// A [`Pinned`] position that is unpinned when dropped
/// ([`Backlog::pin_scoped`]).
pub struct PinGuard<'a> {
    backlog: &'a Backlog,
    /// The position, moved by its follower.
    pub pin: Pinned,
}

impl Drop for PinGuard<'_> {
    fn drop(&mut self) {
        self.backlog.unpin(&self.pin);
    }
}

impl Pinned {
    /// The follower has read up to `pos`.
    pub fn set(&self, pos: u64) {
        self.0.store(pos, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `appendfsync always`: writers wait after their append until the
/// append-only log has fsynced past it, so no reply leaves before its
/// effects are on disk.
#[derive(Default)]
struct Durable {
    /// Whether writers wait.
    always: std::sync::atomic::AtomicBool,
    /// The offset the log has fsynced up to.
    synced: Mutex<u64>,
    moved: Condvar,
    /// The offset the log has written (not yet fsynced) up to.
    written: std::sync::atomic::AtomicU64,
    /// Under the other policies, most stream bytes the log may have left
    /// to write before writers wait (0: no log, no limit).
    lag_limit: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Backlog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backlog")
            .field("offset", &self.offset())
            .finish_non_exhaustive()
    }
}

/// Why [`Backlog::read`] has nothing for a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gap {
    /// The position is older than the first byte kept.
    Gone,
    /// The position is past the end of the stream.
    Ahead,
}

impl Backlog {
    /// An empty stream keeping the last `capacity` bytes (at least 1).
    pub fn new(capacity: usize) -> Backlog {
        Backlog {
            ring: Mutex::new(Ring {
                buf: vec![0; capacity.max(1)],
                offset: 0,
                histlen: 0,
                wake_at: u64::MAX,
                pins: Vec::new(),
            }),
            grown: Condvar::new(),
            durable: Durable::default(),
            followers: std::sync::atomic::AtomicUsize::new(0),
            base: capacity.max(1),
        }
    }

    /// Counts a follower until the guard drops: while one copies the stream,
    /// a record bigger than half the ring grows it so that the follower
    /// does not lose it to the wrap; once none does, the ring goes back to
    /// `repl-backlog-size` (a 40 MB SET must not keep 128 MB forever).
    pub fn follow(&self) -> Following<'_> {
        self.followers
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Following(self)
    }

    /// Keeps every byte from `pos` on (and, as the follower moves it with
    /// [`Pinned::set`], from its position) until [`Backlog::unpin`]: a
    /// follower that is not scheduled for a while (a busy machine) then
    /// finds the ring grown, not wrapped past it.
    pub fn pin(&self, pos: u64) -> Pinned {
        let p = Pinned(std::sync::Arc::new(std::sync::atomic::AtomicU64::new(pos)));
        self.ring.lock().pins.push(p.clone());
        p
    }

    /// As [`Backlog::pin`], unpinned when the guard drops.
    pub fn pin_scoped(&self, pos: u64) -> PinGuard<'_> {
        PinGuard {
            backlog: self,
            pin: self.pin(pos),
        }
    }

    /// Ends a [`Backlog::pin`].
    pub fn unpin(&self, pin: &Pinned) {
        self.ring
            .lock()
            .pins
            .retain(|p| !std::sync::Arc::ptr_eq(&p.0, &pin.0));
    }

    /// Makes writers wait for [`Backlog::mark_synced`] after each append
    /// (`true`) or releases them (`false`).
    pub fn set_sync_always(&self, yes: bool) {
        use std::sync::atomic::Ordering;
        let _s = self.durable.synced.lock();
        self.durable.always.store(yes, Ordering::SeqCst);
        self.durable.moved.notify_all();
    }

    /// Bounds how far the append-only log's writing may lag the stream
    /// (bytes; 0 for no bound): a writer that published past it waits, so
    /// a `kill -9` loses at most that much of what was acknowledged.
    pub fn set_write_lag(&self, limit: u64) {
        use std::sync::atomic::Ordering;
        let _s = self.durable.synced.lock();
        self.durable.lag_limit.store(limit, Ordering::SeqCst);
        self.durable.moved.notify_all();
    }

    /// The append-only log has written the stream up to `offset`.
    pub fn mark_written(&self, offset: u64) {
        use std::sync::atomic::Ordering;
        let d = &self.durable;
        if d.written.fetch_max(offset, Ordering::SeqCst) < offset
            && d.lag_limit.load(Ordering::Relaxed) > 0
        {
            let _s = d.synced.lock();
            d.moved.notify_all();
        }
    }

    /// Whether writers wait for the append-only log (`appendfsync always`).
    pub fn sync_always(&self) -> bool {
        self.durable
            .always
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The append-only log has fsynced the stream up to `offset`.
    pub fn mark_synced(&self, offset: u64) {
        let mut s = self.durable.synced.lock();
        if offset > *s {
            *s = offset;
            drop(s);
            self.durable.moved.notify_all();
        }
    }

    /// Under `appendfsync always`, waits until the log has fsynced up to
    /// `offset` (or stops asking writers to wait); otherwise, while the log
    /// runs, until it has written to within its lag limit of `offset`.
    pub fn wait_synced(&self, offset: u64) {
        use std::sync::atomic::Ordering;
        let d = &self.durable;
        if !d.always.load(Ordering::Acquire) {
            // Otherwise only the write lag is bounded.
            let behind =
                |limit: u64| limit > 0 && d.written.load(Ordering::Acquire) + limit < offset;
            if !behind(d.lag_limit.load(Ordering::Acquire)) {
                return;
            }
            let mut s = d.synced.lock();
            while behind(d.lag_limit.load(Ordering::Acquire)) {
                let _ = d.moved.wait_for(&mut s, Duration::from_millis(100));
            }
            return;
        }
        let mut s = d.synced.lock();
        while *s < offset && d.always.load(Ordering::Acquire) {
            let _ = d.moved.wait_for(&mut s, Duration::from_millis(100));
        }
    }

    /// Appends `parts` in order (one record or several whole ones) and wakes
    /// the readers. Returns the offset after them.
    pub fn append(&self, parts: &[&[u8]]) -> u64 {
        let mut r = self.ring.lock();
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let pinned = r.lowest_pin();
        let unread = (r.offset + total as u64).saturating_sub(pinned) as usize;
        if pinned != u64::MAX && unread > r.buf.len() && unread <= PIN_LIMIT {
            // A pinned follower has not read what this would overwrite.
            let grown = (unread * 2).next_power_of_two();
            tracing::info!(
                "replication: backlog grows from {} to {grown} bytes: a follower (a replica or the append-only log) has {unread} bytes to read",
                r.buf.len()
            );
            r.grow(grown);
        } else if total > r.buf.len() / 2
            && self.followers.load(std::sync::atomic::Ordering::SeqCst) > 0
        {
            // A record this big would leave a reader that has not copied it
            // yet behind the ring: keep room for twice it, from now on.
            let grown = (total * 2).next_power_of_two();
            tracing::info!(
                "replication: backlog grows from {} to {grown} bytes for a {total}-byte record",
                r.buf.len()
            );
            r.grow(grown);
        }
        for part in parts {
            r.push(part);
        }
        let idle =
            pinned == u64::MAX && self.followers.load(std::sync::atomic::Ordering::SeqCst) == 0;
        if idle && r.buf.len() > self.base {
            r.grow(self.base);
        }
        let offset = r.offset;
        let wake = offset >= r.wake_at;
        if wake {
            r.wake_at = u64::MAX;
        }
        drop(r);
        if wake {
            self.grown.notify_all();
        }
        offset
    }

    /// Appends a transaction's parts, one per shard that wrote (each whole
    /// records), as one unit: framed `MULTI` .. `EXEC` when two or more
    /// parts hold records, or one whose records name two or more hash
    /// slots (which a replica may hold on two shards), so a replica (and
    /// the append-only log's loader) applies them all at once, as Redis
    /// frames a transaction's effects; a lone part of one slot is appended
    /// as it is. Then waits as [`Backlog::wait_synced`] does.
    pub fn append_unit(&self, parts: &[Part]) {
        let mut all: Vec<&[u8]> = parts
            .iter()
            .filter(|p| !p.bytes.is_empty())
            .map(|p| p.bytes.as_slice())
            .collect();
        if all.is_empty() {
            return;
        }
        if all.len() > 1 || parts.iter().any(|p| p.many_slots) {
            all.insert(0, MULTI_RECORD);
            all.push(EXEC_RECORD);
        }
        let end = self.append(&all);
        self.wait_synced(end);
    }

    /// The replication offset: bytes in the stream so far.
    pub fn offset(&self) -> u64 {
        self.ring.lock().offset
    }

    /// `repl_backlog_histlen`: bytes kept.
    pub fn histlen(&self) -> u64 {
        self.ring.lock().histlen
    }

    /// `repl_backlog_first_byte_offset`: the Redis offset of the first byte
    /// kept (offset + 1 when nothing is kept).
    pub fn first_byte_offset(&self) -> u64 {
        let r = self.ring.lock();
        r.offset - r.histlen + 1
    }

    /// `repl_backlog_size`, bytes.
    pub fn capacity(&self) -> usize {
        self.ring.lock().buf.len()
    }

    /// Whether the bytes from position `from` (the count of bytes before
    /// them) to the end are all kept.
    pub fn covers(&self, from: u64) -> bool {
        let r = self.ring.lock();
        from <= r.offset && r.offset - from <= r.histlen
    }

    /// Appends to `out` at most `max` bytes of the stream from position
    /// `from`; returns how many.
    ///
    /// # Errors
    /// [`Gap`]: `from` is no longer kept, or lies past the end.
    pub fn read(&self, from: u64, max: usize, out: &mut Vec<u8>) -> Result<usize, Gap> {
        let r = self.ring.lock();
        if from > r.offset {
            return Err(Gap::Ahead);
        }
        if r.offset - from > r.histlen {
            return Err(Gap::Gone);
        }
        let cap = r.buf.len() as u64;
        let len = ((r.offset - from) as usize).min(max);
        let start = (from % cap) as usize;
        let first = len.min(r.buf.len() - start);
        out.extend_from_slice(&r.buf[start..start + first]);
        out.extend_from_slice(&r.buf[..len - first]);
        Ok(len)
    }

    /// Waits until the stream is longer than `from` bytes, or `timeout`.
    /// Returns the offset then.
    pub fn wait_past(&self, from: u64, timeout: Duration) -> u64 {
        self.wait_until(|_| from + 1, timeout)
    }

    /// Waits up to `timeout` for the stream to pass a quarter of the ring
    /// beyond position `from` (a follower that just copied up to `from`
    /// lingers so that one copy carries many appends, but never so long
    /// that the ring wraps past it). Returns the stream's length.
    pub fn linger(&self, from: u64, timeout: Duration) -> u64 {
        self.wait_until(|r| from + (r.buf.len() as u64 / 4).max(1), timeout)
    }

    /// Waits up to `timeout` for the stream's length to reach the target
    /// `target` gives for the ring as it is.
    fn wait_until(&self, target: impl FnOnce(&Ring) -> u64, timeout: Duration) -> u64 {
        let mut r = self.ring.lock();
        let target = target(&r);
        if r.offset < target {
            r.wake_at = r.wake_at.min(target);
            let _ = self.grown.wait_for(&mut r, timeout);
        }
        r.offset
    }

    /// Restarts the stream at `offset` with nothing kept: a replica about to
    /// load a full sync taken at that offset.
    pub fn restart_at(&self, offset: u64) {
        let mut r = self.ring.lock();
        r.offset = offset;
        r.histlen = 0;
        r.wake_at = u64::MAX;
        drop(r);
        self.grown.notify_all();
    }
}

impl Ring {
    /// The lowest pinned position, `u64::MAX` for none.
    fn lowest_pin(&self) -> u64 {
        let at = |p: &Pinned| p.0.load(std::sync::atomic::Ordering::SeqCst);
        self.pins.iter().map(at).min().unwrap_or(u64::MAX)
    }

    /// Moves the kept bytes into a ring of `capacity` bytes, each at its
    /// offset's place.
    fn grow(&mut self, capacity: usize) {
        let cap = self.buf.len() as u64;
        let mut kept = Vec::with_capacity(self.histlen as usize);
        let from = self.offset - self.histlen;
        let start = (from % cap) as usize;
        let first = (self.histlen as usize).min(self.buf.len() - start);
        kept.extend_from_slice(&self.buf[start..start + first]);
        kept.extend_from_slice(&self.buf[..self.histlen as usize - first]);
        self.buf = vec![0; capacity];
        self.offset = from;
        self.histlen = 0;
        self.push(&kept);
    }

    fn push(&mut self, mut bytes: &[u8]) {
        let cap = self.buf.len();
        // Only the last `cap` bytes of an oversized part can be kept.
        let skip = bytes.len().saturating_sub(cap);
        self.offset += skip as u64;
        bytes = &bytes[skip..];
        while !bytes.is_empty() {
            let pos = (self.offset % cap as u64) as usize;
            let n = bytes.len().min(cap - pos);
            self.buf[pos..pos + n].copy_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            self.offset += n as u64;
            self.histlen = (self.histlen + n as u64).min(cap as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two pinned followers (a replica's copier and the log's): the ring
    /// keeps what the slower one has not read, grown rather than wrapped;
    /// once both are unpinned, old bytes wrap away again.
    #[test]
    fn the_ring_keeps_what_any_pinned_follower_has_not_read() {
        let b = Backlog::new(64);
        let fast = b.pin(0);
        let slow = b.pin_scoped(0);
        let record = [b'r'; 40];
        for _ in 0..4 {
            b.append(&[&record]);
        }
        fast.set(160);
        let mut out = Vec::new();
        assert_eq!(b.read(0, 1000, &mut out), Ok(160), "the slow one reads all");
        slow.pin.set(120);
        b.append(&[&record]);
        assert_eq!(b.read(120, 1000, &mut out), Ok(80));
        drop(slow);
        b.unpin(&fast);
        for _ in 0..8 {
            b.append(&[&record]);
        }
        assert_eq!(b.read(120, 1000, &mut out), Err(Gap::Gone));
    }

    /// A lingering follower is not woken by appends until a quarter of the
    /// ring has come; one waiting for the next byte is woken by any.
    #[test]
    fn a_lingering_follower_wakes_at_a_quarter_of_the_ring() {
        let b = std::sync::Arc::new(Backlog::new(1024));
        let waiter = {
            let b = b.clone();
            std::thread::spawn(move || {
                let at = std::time::Instant::now();
                (b.linger(0, Duration::from_secs(5)), at.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        b.append(&[&[b'x'; 10]]);
        std::thread::sleep(Duration::from_millis(50));
        b.append(&[&[b'y'; 300]]);
        let (seen, took) = waiter.join().unwrap();
        assert_eq!(seen, 310, "woken by the small append");
        assert!(took < Duration::from_secs(4), "{took:?}");
        let next = {
            let b = b.clone();
            std::thread::spawn(move || b.wait_past(310, Duration::from_secs(5)))
        };
        std::thread::sleep(Duration::from_millis(50));
        b.append(&[b"z"]);
        assert_eq!(next.join().unwrap(), 311);
    }

    #[test]
    fn reads_wrap_and_old_positions_are_gone() {
        let b = Backlog::new(10);
        assert_eq!(b.first_byte_offset(), 1);
        b.append(&[b"abc", b"de"]);
        b.append(&[b"fghij"]);
        b.append(&[b"klm"]);
        assert_eq!(b.offset(), 13);
        assert_eq!(b.histlen(), 10);
        assert_eq!(b.first_byte_offset(), 4);
        let mut out = Vec::new();
        assert_eq!(b.read(3, 100, &mut out), Ok(10));
        assert_eq!(out, b"defghijklm");
        assert_eq!(b.read(2, 100, &mut out), Err(Gap::Gone));
        assert_eq!(b.read(14, 100, &mut out), Err(Gap::Ahead));
        out.clear();
        assert_eq!(b.read(8, 3, &mut out), Ok(3));
        assert_eq!(out, b"ijk");
        assert!(b.covers(13) && b.covers(3) && !b.covers(2));
    }

    #[test]
    fn a_record_over_half_the_ring_grows_it_while_followed_then_shrinks_back() {
        let b = Backlog::new(8);
        let follower = b.follow();
        b.append(&[b"abcdef"]);
        b.append(&[b"0123456789"]);
        assert_eq!(b.capacity(), 32);
        assert_eq!((b.offset(), b.histlen()), (16, 16));
        let mut out = Vec::new();
        assert_eq!(b.read(0, 100, &mut out), Ok(16));
        assert_eq!(out, b"abcdef0123456789");
        // Nobody follows: the next append brings it back to 8 bytes, the
        // last 8 of the stream kept.
        drop(follower);
        b.append(&[b"xy"]);
        assert_eq!(b.capacity(), 8);
        assert_eq!((b.offset(), b.histlen()), (18, 8));
        out.clear();
        assert_eq!(b.read(10, 100, &mut out), Ok(8));
        assert_eq!(out, b"456789xy");
        // Unfollowed, a big record does not grow it at all.
        b.append(&[b"0123456789ABCDEF"]);
        assert_eq!((b.capacity(), b.histlen()), (8, 8));
    }

    #[test]
    fn a_restart_keeps_the_offset_and_forgets_the_history() {
        let b = Backlog::new(16);
        b.append(&[b"xyz"]);
        b.restart_at(1000);
        assert_eq!(
            (b.offset(), b.histlen(), b.first_byte_offset()),
            (1000, 0, 1001)
        );
        assert!(!b.covers(3));
        b.append(&[b"ab"]);
        let mut out = Vec::new();
        assert_eq!(b.read(1000, 10, &mut out), Ok(2));
        assert_eq!(out, b"ab");
    }
}
