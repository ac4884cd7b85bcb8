//! The effect stream (DESIGN.md, decision 4): every write appends its outcome,
//! as a deterministic RESP command with absolute values and absolute Unix-ms
//! expiry times, to the shard's replication backlog.
//!
//! A replica applies the stream without a clock: `SET key value [PXAT ms]`,
//! `DEL key`, `PEXPIREAT key ms`, `PERSIST key`, `FLUSHALL`, and for rate-limit
//! state the state itself (never the command that produced it). The backlog is a
//! fixed-size ring, like Redis's `repl-backlog-size`; the replication offset
//! counts every byte ever appended, so a replica that falls behind the ring
//! knows it must resynchronise.

use leasehold_protocol::encode_request;

/// Largest encoding buffer kept between records, bytes.
const MAX_KEPT_SCRATCH: usize = 64 * 1024;

/// Default backlog per shard: 1 MB, Redis's `repl-backlog-size` default.
pub const DEFAULT_BACKLOG_BYTES: usize = 1024 * 1024;

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
    /// The shard's keyspace was emptied.
    Flush,
    /// A command-specific state record: the arguments of a restore command
    /// that recreates the state absolutely (used by the rate-limit family).
    Raw(&'a [&'a [u8]]),
}

/// A shard's replication backlog.
#[derive(Debug)]
pub struct EffectLog {
    ring: Vec<u8>,
    capacity: usize,
    offset: u64,
    scratch: bytes::BytesMut,
}

impl EffectLog {
    /// An empty log that keeps the last `capacity` bytes.
    pub fn new(capacity: usize) -> EffectLog {
        EffectLog {
            // Allocated up front so memory readings do not jump at the first write.
            ring: vec![0; capacity.max(1)],
            capacity: capacity.max(1),
            offset: 0,
            scratch: bytes::BytesMut::new(),
        }
    }

    /// The replication offset: bytes appended since the shard started.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Appends one effect.
    pub fn emit(&mut self, effect: Effect<'_>) {
        self.scratch.clear();
        let mut num = itoa::Buffer::new();
        match effect {
            Effect::Set {
                key,
                value,
                expire_at_ms: None,
            } => encode_request(&[b"SET".as_slice(), key, value], &mut self.scratch),
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
                &mut self.scratch,
            ),
            Effect::Del { key } => encode_request(&[b"DEL".as_slice(), key], &mut self.scratch),
            Effect::ExpireAt { key, at_ms } => encode_request(
                &[b"PEXPIREAT".as_slice(), key, num.format(at_ms).as_bytes()],
                &mut self.scratch,
            ),
            Effect::Persist { key } => {
                encode_request(&[b"PERSIST".as_slice(), key], &mut self.scratch)
            }
            Effect::Flush => encode_request(&[b"FLUSHALL".as_slice()], &mut self.scratch),
            Effect::Raw(args) => encode_request(args, &mut self.scratch),
        }
        self.append();
        // A huge record (a 500 MB APPEND result) must not pin its buffer forever.
        if self.scratch.capacity() > MAX_KEPT_SCRATCH {
            self.scratch = bytes::BytesMut::new();
        }
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

    /// The bytes from `from` (a replication offset) to the end, if still in the ring.
    pub fn since(&self, from: u64) -> Option<Vec<u8>> {
        let kept = self.offset.min(self.capacity as u64);
        if from > self.offset || self.offset - from > kept {
            return None;
        }
        Some(
            (from..self.offset)
                .map(|o| self.ring[(o % self.capacity as u64) as usize])
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(log.since(0).unwrap(), expected.to_vec());
        log.emit(Effect::Del { key: b"k" });
        assert_eq!(
            log.since(expected.len() as u64).unwrap(),
            b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n".to_vec()
        );
    }

    #[test]
    fn ring_keeps_only_the_tail() {
        let mut log = EffectLog::new(40);
        for _ in 0..10 {
            log.emit(Effect::Flush);
        }
        assert_eq!(log.offset(), 10 * 18);
        assert!(log.since(0).is_none());
        assert_eq!(
            log.since(log.offset() - 18).unwrap(),
            b"*1\r\n$8\r\nFLUSHALL\r\n".to_vec()
        );
    }
}
