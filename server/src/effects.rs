//! The effect stream, the one owner of replication's raw material: every
//! change to a shard's keyspace appends its outcome, as a deterministic RESP
//! command with absolute values and absolute Unix-ms expiry times, to the
//! shard's backlog. The store is the only writer (every mutation of
//! `store::Store` emits here); command handlers never emit.
//!
//! A replica applies the stream without a clock: `SET key value [PXAT ms]`,
//! `DEL key`, `PEXPIREAT key ms`, `PERSIST key`, `LH.FLUSHSLOTS first last`
//! (a shard's keyspace was emptied: only the slots that shard owns), and for
//! rate-limit state the state itself, never the command that produced it:
//! `LH.RESTORE key KIND fields... PXAT ms` with Unix-ms instants. The same
//! encoding serves a full sync: [`Effect`] of a stored entry recreates it.
//!
//! The shard's log is a fixed-size ring, like Redis's `repl-backlog-size`;
//! the offset counts every byte ever appended. At the end of each batch, of
//! each turn's inline commands and of each expiry cycle
//! ([`EffectLog::publish`], called by `Shard::publish`) the bytes appended
//! since the last publish are copied, whole records only, into the server's
//! merged stream (`replication::backlog`), under one lock; a log that grows
//! past half its ring within one batch publishes early. A replica records
//! none of its own effects (its watches still see them): its stream is the
//! one its primary sent.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use leasehold_protocol::encode_request;

use crate::clock::{unix_of, unix_signed, Now};
use crate::ratelimit::RateState;
use crate::replication::backlog::Part;
use crate::replication::role::Replication;

mod unit;
mod watch;
pub use watch::Watches;

/// Largest encoding buffer kept between records, bytes.
const MAX_KEPT_SCRATCH: usize = 64 * 1024;

/// One write's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect<'a> {
    /// The key now holds `value` (a string's bytes), expiring at `expire_at_ms`
    /// (Unix ms) or never when `None`.
    Set {
        /// Key bytes.
        key: &'a [u8],
        /// Value bytes as GET would return them.
        value: &'a [u8],
        /// Absolute expiry, Unix ms.
        expire_at_ms: Option<u64>,
    },
    /// The key no longer exists (deleted, or expired and reclaimed).
    Del {
        /// Key bytes.
        key: &'a [u8],
    },
    /// The key now expires at this absolute Unix-ms time.
    ExpireAt {
        /// Key bytes.
        key: &'a [u8],
        /// Absolute expiry, Unix ms.
        at_ms: u64,
    },
    /// The key no longer has a TTL.
    Persist {
        /// Key bytes.
        key: &'a [u8],
    },
    /// The key now holds a rate-limit state, expiring at `expire_at_ms`
    /// (Unix ms). Its monotonic instants are written as Unix ms under `now`.
    Rate {
        /// Key bytes.
        key: &'a [u8],
        /// The state as stored.
        state: &'a RateState,
        /// Absolute expiry, Unix ms.
        expire_at_ms: u64,
        /// The clock reading that converts the state's instants.
        now: Now,
    },
    /// A command on one key that replays its own change exactly (a
    /// collection's write: `RPUSH key a b`, `HDEL key f`), as its arguments
    /// with the name first. Only deterministic forms are emitted (a random
    /// pop is written as the removal of what it popped).
    Command {
        /// Key bytes (also `args[1]`).
        key: &'a [u8],
        /// The whole command, name first.
        args: &'a [&'a [u8]],
    },
    /// A server-wide change that replays itself and names no key (`LH.PIN`,
    /// `LH.UNPIN`, `LH.UNPINALL`), as its arguments with the name first;
    /// emitted once, by the shard owning slot 0.
    Global {
        /// The whole command, name first.
        args: &'a [&'a [u8]],
    },
    /// Every key in hash slots `first..=last` is gone (FLUSHALL on the shard
    /// owning them).
    FlushSlots {
        /// First slot, inclusive.
        first: u16,
        /// Last slot, inclusive.
        last: u16,
    },
}

/// A shard's replication backlog.
pub struct EffectLog {
    ring: Vec<u8>,
    capacity: usize,
    /// The capacity it was made with, which a grown ring goes back to once
    /// nothing is kept (see [`EffectLog::settle`]).
    base: usize,
    offset: u64,
    scratch: bytes::BytesMut,
    /// The offset up to which bytes went to the merged stream.
    published: u64,
    /// Where they go (none: a log on its own, as in unit tests).
    sink: Option<Arc<Replication>>,
    /// A full sync's cut holds this shard's publishes (see [`EffectLog::hold`]).
    holding: bool,
    /// Set once the held bytes pass half the ring, for the cut to give up
    /// (see [`EffectLog::hold_watched`]).
    hold_over: Option<Arc<AtomicBool>>,
    /// A transaction over several shards holds this one: its effects are
    /// kept whole for the transaction (see [`EffectLog::gather`]).
    gathering: bool,
    /// The open unit of one transaction or script, whose records are kept
    /// unpublished until it ends (see [`EffectLog::begin_unit`]).
    unit: Option<unit::Unit>,
    /// The keys clients WATCH on this shard: every keyed effect touches them.
    pub watches: Watches,
    /// Effects emitted since the shard started (the changes a snapshot
    /// rule counts).
    pub changes: u64,
}

impl std::fmt::Debug for EffectLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EffectLog")
            .field("capacity", &self.capacity)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

impl EffectLog {
    /// An empty log that keeps the last `capacity` bytes.
    pub fn new(capacity: usize) -> EffectLog {
        EffectLog {
            // Allocated up front so memory readings do not jump at the first write.
            ring: vec![0; capacity.max(1)],
            capacity: capacity.max(1),
            base: capacity.max(1),
            offset: 0,
            scratch: bytes::BytesMut::new(),
            published: 0,
            sink: None,
            holding: false,
            hold_over: None,
            gathering: false,
            unit: None,
            watches: Watches::default(),
            changes: 0,
        }
    }

    /// The replication offset: bytes appended since the shard started.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Appends one effect. When the bytes not yet published would pass
    /// half the ring, what is pending is published first; a record bigger
    /// than that goes to the merged stream at once, so no record is ever
    /// lost to the ring's wrap between two publishes.
    pub fn emit(&mut self, effect: Effect<'_>) {
        self.changes += 1;
        if !self.watches.is_empty() {
            if let Some(key) = effect.key() {
                self.watches.touch(key);
            }
        }
        // A replica's stream is the one its primary sent: its own effects
        // would be dropped at the publish, so they are not even encoded; a
        // server loading its files at the start replays what is on disk
        // already.
        if self
            .sink
            .as_ref()
            .is_some_and(|r| r.is_replica() || r.is_loading())
        {
            return;
        }
        self.note_slot(&effect);
        self.scratch.clear();
        effect.encode(&mut self.scratch);
        let half = (self.capacity / 2) as u64;
        let pending = self.offset - self.published;
        let kept = self.kept();
        if self.holding && pending + self.scratch.len() as u64 > half {
            if let Some(over) = &self.hold_over {
                over.store(true, Ordering::SeqCst);
            }
        }
        if kept && pending + self.scratch.len() as u64 > self.capacity as u64 {
            // A cut or a transaction holds the publishes: nothing held may
            // be overwritten before it is copied to the merged stream.
            self.grow((pending as usize + self.scratch.len()) * 2);
        }
        if self.sink.is_some() && !kept && pending + self.scratch.len() as u64 > half {
            self.publish();
            if self.scratch.len() as u64 > half {
                self.append();
                self.publish_bytes(false);
            } else {
                self.append();
            }
        } else {
            self.append();
        }
        self.trim_scratch();
    }

    /// Drops the scratch buffer once it outgrew [`MAX_KEPT_SCRATCH`]: a
    /// huge record (a 500 MB APPEND result) or a framed unit must not pin
    /// its buffer until the shard's next write.
    fn trim_scratch(&mut self) {
        if self.scratch.capacity() > MAX_KEPT_SCRATCH {
            self.scratch = bytes::BytesMut::new();
        }
    }

    /// Whether a cut, a transaction or an open unit keeps the records
    /// written since the last publish.
    fn kept(&self) -> bool {
        self.holding || self.gathering || self.unit.is_some()
    }

    /// Whether a cut holds this log's publishes.
    pub fn holding(&self) -> bool {
        self.holding
    }

    /// Whether records appended since the last publish wait for one.
    pub fn unpublished(&self) -> bool {
        self.published != self.offset
    }

    /// Publishes to `repl`'s merged stream from now on.
    pub fn attach(&mut self, repl: Arc<Replication>) {
        self.published = self.offset;
        self.sink = Some(repl);
    }

    /// Copies the records appended since the last publish into the merged
    /// stream (one lock), unless a cut holds them. On a replica they are
    /// dropped. Called once per batch (`Shard::publish`), so it costs
    /// nothing per command; a batch that wrote nothing takes no lock.
    pub fn publish(&mut self) {
        if self.kept() || self.published == self.offset {
            return;
        }
        self.publish_bytes(true);
        self.settle();
    }

    /// Starts (`true`) or ends keeping this shard's effects for a
    /// transaction over several shards that holds it: what was written
    /// before is published now (unless a cut holds it), and from here on
    /// nothing is published, not even early when the pending bytes pass
    /// half the ring (the ring grows instead), until [`EffectLog::take_part`]
    /// hands the transaction's part to its coordinator or the gathering
    /// ends, which publishes what is pending.
    pub fn gather(&mut self, yes: bool) {
        if yes {
            self.publish();
            self.open_part();
        } else {
            self.unit = None;
        }
        self.gathering = yes;
        if !yes {
            self.publish();
            self.settle();
        }
    }

    /// The records written since the last publish, handed over instead of
    /// published: a transaction's part on this shard, which its
    /// coordinator appends to the merged stream with the other shards'
    /// parts as one unit. Ends the gathering. `None` (and the records stay,
    /// published as usual) while a cut holds the shard, on a replica and
    /// for a log with no merged stream; a part a cut holds is framed
    /// where it lies when it names several slots, so it reaches the stream
    /// whole at the release (though apart from the other shards' parts).
    pub fn take_part(&mut self) -> Option<Part> {
        self.gathering = false;
        let from = self.unit.map(|u| u.from);
        let many_slots = self.close_part();
        let repl = self.sink.as_ref()?;
        if repl.is_replica() {
            return None;
        }
        if self.holding {
            if let Some(from) = from.filter(|&f| many_slots && f < self.offset) {
                self.frame_since(from);
            }
            return None;
        }
        let [a, b] = self.since(self.published)?;
        let mut bytes = Vec::with_capacity(a.len() + b.len());
        bytes.extend_from_slice(a);
        bytes.extend_from_slice(b);
        self.published = self.offset;
        self.settle();
        Some(Part { bytes, many_slots })
    }

    /// Publishes the pending bytes of the ring (`from_ring`) or the last
    /// record, still in the scratch buffer.
    fn publish_bytes(&mut self, from_ring: bool) {
        let Some(repl) = &self.sink else {
            return;
        };
        if !repl.is_replica() {
            let end = match (from_ring, self.since(self.published)) {
                (true, Some([a, b])) => repl.backlog.append(&[a, b]),
                (true, None) => {
                    // Only a hold longer than the ring can get here: records
                    // are lost to the merged stream, so its history ends and
                    // every replica syncs fully.
                    tracing::error!(
                        "replication: a shard's effects outran its ring during a cut; every replica must resync"
                    );
                    repl.break_history();
                    repl.backlog.offset()
                }
                (false, _) => repl.backlog.append(&[&self.scratch]),
            };
            // `appendfsync always`: the batch's replies wait for the disk.
            repl.backlog.wait_synced(end);
        }
        self.published = self.offset;
    }

    /// Holds (`true`) or releases publishing: between a full sync's cut and
    /// its release every shard holds, so no effect after the cut enters the
    /// merged stream before every shard has cut. Releasing publishes what
    /// was held.
    pub fn hold(&mut self, yes: bool) {
        self.holding = yes;
        if !yes {
            self.hold_over = None;
            self.publish();
            self.settle();
        }
    }

    /// A ring grown to keep a cut's or a transaction's records whole goes
    /// back to its base size once none is kept (all published or handed
    /// over), keeping the tail a ring of that size would hold: a large
    /// transaction does not keep a shard's memory for good.
    fn settle(&mut self) {
        if self.capacity > self.base && !self.kept() && self.published == self.offset {
            tracing::info!(
                "a shard's effect ring goes back from {} to {} bytes",
                self.capacity,
                self.base
            );
            self.resize(self.base);
        }
    }

    /// Holds as [`EffectLog::hold`] does, and sets `over` once the held
    /// bytes pass half the ring: a cut whose barrier lasts that long gives
    /// up rather than grow the ring.
    pub fn hold_watched(&mut self, over: Arc<AtomicBool>) {
        self.hold(true);
        self.hold_over = Some(over);
    }

    /// Moves the kept bytes into a ring of at least `want` bytes (a power
    /// of two), each at its offset's place.
    fn grow(&mut self, want: usize) {
        let capacity = want.next_power_of_two();
        tracing::info!(
            "a shard's effect ring grows from {} to {capacity} bytes while a cut or a transaction holds its publishes",
            self.capacity
        );
        self.resize(capacity);
    }

    /// Moves the last `capacity` bytes kept into a ring of exactly
    /// `capacity` bytes, each at its offset's place.
    fn resize(&mut self, capacity: usize) {
        let kept = self.offset.min(self.capacity.min(capacity) as u64);
        let from = self.offset - kept;
        let mut ring = vec![0; capacity];
        if let Some([a, b]) = self.since(from) {
            let mut at = from;
            for part in [a, b] {
                for chunk in part.chunks(capacity) {
                    let pos = (at % capacity as u64) as usize;
                    let n = chunk.len().min(capacity - pos);
                    ring[pos..pos + n].copy_from_slice(&chunk[..n]);
                    ring[..chunk.len() - n].copy_from_slice(&chunk[n..]);
                    at += chunk.len() as u64;
                }
            }
        }
        self.ring = ring;
        self.capacity = capacity;
    }

    fn append(&mut self) {
        let total = self.scratch.len();
        // Only the last `capacity` bytes of an oversized record can survive.
        let skip = total.saturating_sub(self.capacity);
        self.offset += skip as u64;
        let mut rest = &self.scratch[skip..];
        while !rest.is_empty() {
            let pos = (self.offset % self.capacity as u64) as usize;
            let n = rest.len().min(self.capacity - pos);
            self.ring[pos..pos + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            self.offset += n as u64;
        }
    }

    /// The bytes from `from` (a replication offset) to the end, if still in
    /// the ring: two borrowed slices (the second is empty unless the ring
    /// wraps), read in order. `from` must be a record boundary (an offset
    /// [`EffectLog::offset`] returned) for the bytes to start with a whole
    /// record; they always end with one.
    pub fn since(&self, from: u64) -> Option<[&[u8]; 2]> {
        let kept = self.offset.min(self.capacity as u64);
        if from > self.offset || self.offset - from > kept {
            return None;
        }
        let cap = self.capacity as u64;
        let start = (from % cap) as usize;
        let len = (self.offset - from) as usize;
        let first = len.min(self.capacity - start);
        Some([&self.ring[start..start + first], &self.ring[..len - first]])
    }
}

impl Effect<'_> {
    /// The one key this effect changes (`None` for a slot range).
    pub fn key(&self) -> Option<&[u8]> {
        match *self {
            Effect::Set { key, .. }
            | Effect::Del { key }
            | Effect::ExpireAt { key, .. }
            | Effect::Persist { key }
            | Effect::Rate { key, .. }
            | Effect::Command { key, .. } => Some(key),
            Effect::FlushSlots { .. } | Effect::Global { .. } => None,
        }
    }

    /// Appends this effect's RESP encoding (one command) to `out`.
    pub fn encode(&self, out: &mut bytes::BytesMut) {
        let mut num = itoa::Buffer::new();
        match *self {
            Effect::Set {
                key,
                value,
                expire_at_ms: None,
            } => encode_request(&[b"SET".as_slice(), key, value], out),
            Effect::Set {
                key,
                value,
                expire_at_ms: Some(at),
            } => encode_request(
                &[
                    b"SET".as_slice(),
                    key,
                    value,
                    b"PXAT",
                    num.format(at).as_bytes(),
                ],
                out,
            ),
            Effect::Del { key } => encode_request(&[b"DEL".as_slice(), key], out),
            Effect::ExpireAt { key, at_ms } => encode_request(
                &[b"PEXPIREAT".as_slice(), key, num.format(at_ms).as_bytes()],
                out,
            ),
            Effect::Persist { key } => encode_request(&[b"PERSIST".as_slice(), key], out),
            Effect::Command { args, .. } | Effect::Global { args } => encode_request(args, out),
            Effect::Rate {
                key,
                state,
                expire_at_ms,
                now,
            } => encode_restore(key, state, expire_at_ms, now, out),
            Effect::FlushSlots { first, last } => {
                let mut num2 = itoa::Buffer::new();
                encode_request(
                    &[
                        b"LH.FLUSHSLOTS".as_slice(),
                        num.format(first).as_bytes(),
                        num2.format(last).as_bytes(),
                    ],
                    out,
                )
            }
        }
    }
}

/// The kind and four fields of `LH.RESTORE` for a state, with Unix-ms
/// instants (a GCRA state's empty instant may be before 1970: signed).
fn restore_fields(now: Now, state: &RateState) -> (&'static [u8], [i128; 4]) {
    let unix = |mono: u64| unix_of(now, mono) as i128;
    match *state {
        RateState::TokenBucket(b) => (
            b"TOKENBUCKET",
            [
                b.tokens as i128,
                b.frac as i128,
                b.period_ms as i128,
                unix(b.refilled_at),
            ],
        ),
        RateState::SlidingWindow(w) => (
            b"SLIDINGWINDOW",
            [
                w.window_ms as i128,
                unix(w.start),
                w.previous as i128,
                w.current as i128,
            ],
        ),
        RateState::Gcra(t) => (
            b"GCRA",
            [
                unix_signed(now, t.empty_ms) as i128,
                t.frac as i128,
                t.units_per_ms as i128,
                unix(t.full_ms),
            ],
        ),
    }
}

/// `LH.RESTORE key KIND fields... PXAT ms`. Built on the stack: this runs on
/// every granted rate-limit call.
fn encode_restore(
    key: &[u8],
    state: &RateState,
    expire_at: u64,
    now: Now,
    out: &mut bytes::BytesMut,
) {
    let (kind, fields) = restore_fields(now, state);
    let mut bufs = [(); 5].map(|_| itoa::Buffer::new());
    let (last, nums) = bufs.split_last_mut().expect("five buffers");
    let mut args: [&[u8]; 9] = [b""; 9];
    args[..3].copy_from_slice(&[b"LH.RESTORE".as_slice(), key, kind]);
    for (i, (b, n)) in nums.iter_mut().zip(&fields).enumerate() {
        args[3 + i] = b.format(*n).as_bytes();
    }
    args[7] = b"PXAT";
    args[8] = last.format(expire_at).as_bytes();
    encode_request(&args, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_since(log: &EffectLog, from: u64) -> Option<Vec<u8>> {
        log.since(from).map(|[a, b]| [a, b].concat())
    }

    /// While a cut holds the publishes, the ring grows instead of
    /// overwriting what is held.
    #[test]
    fn a_held_ring_grows_and_keeps_every_record() {
        let mut log = EffectLog::new(64);
        let mut want = bytes::BytesMut::new();
        let put = |log: &mut EffectLog, want: &mut bytes::BytesMut, i: usize| {
            let key = format!("key-{i}");
            let e = Effect::Set {
                key: key.as_bytes(),
                value: b"value",
                expire_at_ms: None,
            };
            e.encode(want);
            log.emit(e);
        };
        put(&mut log, &mut want, 0);
        log.hold(true);
        for i in 1..40 {
            put(&mut log, &mut want, i);
        }
        assert!(log.offset() > 1000);
        assert_eq!(bytes_since(&log, 0).as_deref(), Some(&want[..]));
    }

    #[test]
    fn effects_are_resp_commands_with_absolute_times() {
        let mut log = EffectLog::new(1024);
        log.emit(Effect::Set {
            key: b"k",
            value: b"v",
            expire_at_ms: Some(1700000000000),
        });
        let expected =
            b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$4\r\nPXAT\r\n$13\r\n1700000000000\r\n";
        assert_eq!(log.offset(), expected.len() as u64);
        assert_eq!(bytes_since(&log, 0).unwrap(), expected.to_vec());
        log.emit(Effect::Del { key: b"k" });
        assert_eq!(
            bytes_since(&log, expected.len() as u64).unwrap(),
            b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n".to_vec()
        );
    }

    #[test]
    fn a_flush_names_only_its_slots() {
        let mut log = EffectLog::new(1024);
        log.emit(Effect::FlushSlots {
            first: 8192,
            last: 16383,
        });
        assert_eq!(
            bytes_since(&log, 0).unwrap(),
            b"*3\r\n$13\r\nLH.FLUSHSLOTS\r\n$4\r\n8192\r\n$5\r\n16383\r\n".to_vec()
        );
    }

    #[test]
    fn a_rate_state_is_written_with_unix_instants() {
        let now = Now {
            unix_ms: 1_000_000,
            mono_ms: 500,
        };
        let state = RateState::Gcra(crate::ratelimit::gcra::State {
            empty_ms: -300,
            frac: 1,
            units_per_ms: 3,
            full_ms: 800,
        });
        let mut log = EffectLog::new(1024);
        log.emit(Effect::Rate {
            key: b"g",
            state: &state,
            expire_at_ms: 1_000_300,
            now,
        });
        let got = String::from_utf8(bytes_since(&log, 0).unwrap()).unwrap();
        assert_eq!(
            got.split("\r\n")
                .filter(|l| !l.starts_with(['*', '$']))
                .collect::<Vec<_>>(),
            [
                "LH.RESTORE",
                "g",
                "GCRA",
                "999200",
                "1",
                "3",
                "1000300",
                "PXAT",
                "1000300",
                ""
            ]
        );
    }

    #[test]
    fn ring_keeps_only_the_tail_and_hands_it_out_in_two_slices() {
        let record = b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n";
        assert_eq!(record.len(), 20);
        let mut log = EffectLog::new(45);
        for _ in 0..10 {
            log.emit(Effect::Del { key: b"k" });
        }
        assert_eq!(log.offset(), 10 * record.len() as u64);
        assert!(log.since(0).is_none());
        let last = log.offset() - record.len() as u64;
        assert_eq!(bytes_since(&log, last).unwrap(), record.to_vec());
        // 200 bytes through a 45-byte ring: the last two records start at
        // 160 % 45 = 25, so 20 bytes lie before the ring's end and 20 after.
        let [a, b] = log.since(last - record.len() as u64).unwrap();
        assert_eq!((a.len(), b.len()), (20, 20));
        assert_eq!([a, b].concat(), record.repeat(2));
        assert_eq!(bytes_since(&log, log.offset()).unwrap(), Vec::<u8>::new());
        assert!(log.since(log.offset() + 1).is_none());
    }

    /// A transaction's part over two slots that ends while a cut holds the
    /// shard stays in the ring, framed, and reaches the stream whole at the
    /// release; a part of one slot goes unframed.
    #[test]
    fn a_part_held_by_a_cut_is_framed_where_it_lies() {
        use crate::replication::backlog::{EXEC_RECORD, MULTI_RECORD};
        let repl = Arc::new(Replication::new(1 << 20));
        let mut log = EffectLog::new(1024);
        log.attach(repl.clone());
        let set = |key: &'static [u8]| Effect::Set {
            key,
            value: b"v",
            expire_at_ms: None,
        };
        let encoded = |keys: &[&'static [u8]]| {
            let mut out = bytes::BytesMut::new();
            for k in keys {
                set(k).encode(&mut out);
            }
            out.to_vec()
        };
        log.hold(true);
        log.gather(true);
        log.emit(set(b"a"));
        log.emit(set(b"b"));
        assert!(log.take_part().is_none(), "a held part is not handed over");
        log.gather(true);
        log.emit(set(b"c"));
        assert!(log.take_part().is_none());
        assert_eq!(repl.backlog.offset(), 0, "nothing before the release");
        log.hold(false);
        let mut out = Vec::new();
        repl.backlog.read(0, 1 << 20, &mut out).unwrap();
        let two = [MULTI_RECORD, &encoded(&[b"a", b"b"]), EXEC_RECORD].concat();
        assert_eq!(out, [two, encoded(&[b"c"])].concat());
    }

    /// A ring grown to keep a transaction's part (or a cut's held records)
    /// whole goes back to its size once they are handed over: one large
    /// transaction must not keep a shard's ring large for good.
    #[test]
    fn a_ring_grown_for_a_transaction_shrinks_once_its_part_is_taken() {
        let repl = Arc::new(Replication::new(1 << 20));
        let mut log = EffectLog::new(64);
        log.attach(repl.clone());
        let value = [b'x'; 100];
        let set = Effect::Set {
            key: b"k",
            value: &value,
            expire_at_ms: None,
        };
        log.gather(true);
        for _ in 0..20 {
            log.emit(set);
        }
        assert!(log.capacity >= 20 * 100, "{}", log.capacity);
        let part = log.take_part().expect("a part");
        assert!(!part.many_slots, "every record names the slot of k");
        let part = part.bytes;
        assert_eq!(part.len() as u64, log.offset());
        assert_eq!(log.capacity, 64);
        // The tail a 64-byte ring keeps, as if it had never grown.
        let last = log.offset() - 60;
        assert_eq!(bytes_since(&log, last).unwrap(), part[part.len() - 60..]);
        assert!(log.since(log.offset() - 65).is_none());
        log.hold(true);
        for _ in 0..20 {
            log.emit(set);
        }
        assert!(log.capacity > 64);
        log.hold(false);
        assert_eq!(log.capacity, 64);
        // The part was handed over, not published; the held records were,
        // whole, at the release.
        assert_eq!(repl.backlog.offset(), part.len() as u64);
        let mut out = Vec::new();
        repl.backlog.read(0, 1 << 20, &mut out).unwrap();
        assert_eq!(out, part);
    }

    #[test]
    fn publishing_copies_whole_records_once_and_a_hold_defers_it() {
        let repl = Arc::new(Replication::new(1024));
        let mut log = EffectLog::new(64);
        log.attach(repl.clone());
        log.emit(Effect::Del { key: b"a" });
        assert_eq!(repl.backlog.offset(), 0, "nothing before the publish");
        log.publish();
        log.publish();
        assert_eq!(repl.backlog.offset(), 20);
        log.hold(true);
        log.emit(Effect::Del { key: b"b" });
        log.publish();
        assert_eq!(repl.backlog.offset(), 20, "held");
        log.hold(false);
        assert_eq!(repl.backlog.offset(), 40);
        // Past half the 64-byte ring, pending bytes go out before the next
        // record, and a record over half the ring goes out by itself.
        log.emit(Effect::Del { key: b"c" });
        log.emit(Effect::Del { key: b"d" });
        assert_eq!(repl.backlog.offset(), 60);
        log.emit(Effect::Set {
            key: b"k",
            value: &[b'x'; 40],
            expire_at_ms: None,
        });
        assert_eq!(repl.backlog.offset(), 80 + 67);
        let mut out = Vec::new();
        repl.backlog.read(80, 100, &mut out).unwrap();
        assert!(out.starts_with(b"*3\r\n$3\r\nSET\r\n"));
    }

    #[test]
    fn a_watched_hold_says_when_its_bytes_pass_half_the_ring() {
        let repl = Arc::new(Replication::new(1024));
        let mut log = EffectLog::new(64);
        log.attach(repl.clone());
        let over = Arc::new(AtomicBool::new(false));
        log.hold_watched(over.clone());
        // `DEL a` is 20 bytes: 20 and 40 held against a half of 32.
        log.emit(Effect::Del { key: b"a" });
        assert!(!over.load(Ordering::SeqCst), "20 bytes held");
        log.emit(Effect::Del { key: b"b" });
        assert!(over.load(Ordering::SeqCst), "40 bytes held");
        assert_eq!(repl.backlog.offset(), 0, "still held");
        log.hold(false);
        assert_eq!(repl.backlog.offset(), 40);
        // A release forgets the flag: later holds without one set nothing.
        over.store(false, Ordering::SeqCst);
        log.hold(true);
        log.emit(Effect::Del { key: b"c" });
        log.emit(Effect::Del { key: b"d" });
        assert!(!over.load(Ordering::SeqCst));
    }
}
