//! Units: the effects of one transaction or one script on a shard, kept
//! whole and framed `MULTI` .. `EXEC` in the stream when they touch two or
//! more hash slots.
//!
//! A primary runs a transaction atomically however its keys fall on its
//! threads, but a replica maps slots to its own threads: a transaction
//! that one thread of a one-thread primary ran over keys in two slots may
//! land on two shards of a two-thread replica. Without a frame the replica
//! applies its records one by one, and a reader there can see half of it.
//! So a unit whose records name two or more slots enters the stream framed
//! whatever the primary's thread count; a unit of one slot (a script on
//! one key, the common rate-limit case) goes as it is.
//!
//! While a unit is open the shard's bytes are not published, not even
//! early (the ring grows instead), so the unit's records are still in the
//! ring when it ends and can be framed in place.

use super::{Effect, EffectLog};
use crate::replication::backlog::{EXEC_RECORD, MULTI_RECORD};
use crate::slot::key_slot;

/// The hash slots a unit's records named so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Slots {
    /// No record yet.
    #[default]
    None,
    /// Every record names this slot.
    One(u16),
    /// Two or more slots, or a record naming no one slot (a server-wide
    /// change, a flush of several slots).
    Many,
}

impl Slots {
    /// The span once `effect` is recorded too.
    fn with(self, effect: &Effect<'_>) -> Slots {
        let slot = match (effect.key(), *effect) {
            (Some(key), _) => key_slot(key),
            (None, Effect::FlushSlots { first, last }) if first == last => first,
            _ => return Slots::Many,
        };
        match self {
            Slots::None => Slots::One(slot),
            Slots::One(s) if s == slot => self,
            _ => Slots::Many,
        }
    }
}

/// An open unit.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unit {
    /// The shard log's offset where the unit's records start.
    pub(super) from: u64,
    /// The slots they named.
    pub(super) slots: Slots,
}

impl EffectLog {
    /// Opens a unit: the records written until [`EffectLog::end_unit`] are
    /// one transaction's or one script's. `false` (and nothing changes)
    /// when one is open already, a transaction over several shards that
    /// holds this one included: the outer unit frames the inner one's
    /// records, and only the caller that opened a unit ends it.
    pub fn begin_unit(&mut self) -> bool {
        if self.unit.is_some() {
            return false;
        }
        self.open_part();
        true
    }

    /// Ends the open unit: its records, when they name two or more hash
    /// slots, are framed `MULTI` .. `EXEC` where they lie; they are
    /// published with the batch, as any record.
    pub fn end_unit(&mut self) {
        let Some(unit) = self.unit.take() else {
            return;
        };
        if unit.slots == Slots::Many && unit.from < self.offset {
            self.frame_since(unit.from);
        }
        self.settle();
    }

    /// Notes the slot of a record written while a unit is open.
    pub(super) fn note_slot(&mut self, effect: &Effect<'_>) {
        if let Some(unit) = &mut self.unit {
            unit.slots = unit.slots.with(effect);
        }
    }

    /// Opens a unit from here, whatever was open: a transaction's part on
    /// this shard for [`EffectLog::take_part`] (see [`EffectLog::gather`]).
    pub(super) fn open_part(&mut self) {
        self.unit = Some(Unit {
            from: self.offset,
            slots: Slots::None,
        });
    }

    /// Whether the open unit's records name two or more slots; closes it.
    pub(super) fn close_part(&mut self) -> bool {
        self.unit.take().is_some_and(|u| u.slots == Slots::Many)
    }

    /// Rewrites the records from `from` to the end as `MULTI`, them,
    /// `EXEC`. They were never published (a unit holds the publishes), so
    /// only this log's own offset moves.
    pub(super) fn frame_since(&mut self, from: u64) {
        let Some([a, b]) = self.since(from) else {
            return;
        };
        let len = MULTI_RECORD.len() + a.len() + b.len() + EXEC_RECORD.len();
        let mut framed = bytes::BytesMut::with_capacity(len);
        framed.extend_from_slice(MULTI_RECORD);
        framed.extend_from_slice(a);
        framed.extend_from_slice(b);
        framed.extend_from_slice(EXEC_RECORD);
        self.offset = from;
        let pending = (self.offset - self.published) as usize;
        if pending + framed.len() > self.capacity {
            self.grow((pending + framed.len()) * 2);
        }
        self.scratch = framed;
        self.append();
        self.trim_scratch();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set<'a>(key: &'a [u8]) -> Effect<'a> {
        Effect::Set {
            key,
            value: b"v",
            expire_at_ms: None,
        }
    }

    fn all(log: &EffectLog) -> Vec<u8> {
        log.since(0).map(|[a, b]| [a, b].concat()).unwrap()
    }

    fn encoded(effects: &[Effect<'_>]) -> Vec<u8> {
        let mut out = bytes::BytesMut::new();
        for e in effects {
            e.encode(&mut out);
        }
        out.to_vec()
    }

    #[test]
    fn a_unit_over_two_slots_is_framed_and_one_slot_is_not() {
        let mut log = EffectLog::new(1024);
        log.emit(set(b"before"));
        assert!(log.begin_unit());
        assert!(!log.begin_unit(), "a unit inside a unit is the outer one");
        log.emit(set(b"{t}a"));
        log.emit(set(b"{t}b"));
        log.end_unit();
        assert!(log.begin_unit());
        log.emit(set(b"a"));
        log.emit(set(b"b"));
        log.end_unit();
        assert!(log.begin_unit());
        log.end_unit();
        let mut want = encoded(&[set(b"before"), set(b"{t}a"), set(b"{t}b")]);
        want.extend_from_slice(MULTI_RECORD);
        want.extend(encoded(&[set(b"a"), set(b"b")]));
        want.extend_from_slice(EXEC_RECORD);
        assert_eq!(all(&log), want);
        assert_eq!(log.offset(), want.len() as u64);
    }

    #[test]
    fn a_transactions_part_says_whether_it_names_several_slots() {
        let repl = std::sync::Arc::new(crate::replication::role::Replication::new(1 << 16));
        let mut log = EffectLog::new(1024);
        log.attach(repl);
        let pairs: [([&[u8]; 2], bool); 2] = [([b"{t}a", b"{t}b"], false), ([b"{t}a", b"b"], true)];
        for (keys, many) in pairs {
            log.gather(true);
            for k in keys {
                log.emit(set(k));
            }
            let part = log.take_part().expect("a part");
            assert_eq!(part.many_slots, many, "{keys:?}");
            assert_eq!(part.bytes, encoded(&[set(keys[0]), set(keys[1])]));
        }
    }

    /// Framing copies the unit's records through the scratch buffer: a
    /// large unit must not leave that copy pinned until the shard's next
    /// write (an idle shard would keep it for good).
    #[test]
    fn framing_a_large_unit_keeps_no_large_buffer() {
        let mut log = EffectLog::new(1024);
        let value = vec![b'x'; 4 * super::super::MAX_KEPT_SCRATCH];
        log.begin_unit();
        for key in [b"a".as_slice(), b"b"] {
            log.emit(Effect::Set {
                key,
                value: &value,
                expire_at_ms: None,
            });
        }
        log.end_unit();
        assert!(all(&log).starts_with(MULTI_RECORD));
        assert!(all(&log).ends_with(EXEC_RECORD));
        assert!(
            log.scratch.capacity() <= super::super::MAX_KEPT_SCRATCH,
            "{} bytes kept",
            log.scratch.capacity()
        );
    }

    #[test]
    fn a_flush_of_several_slots_or_a_global_change_frames_its_unit() {
        for effect in [
            Effect::FlushSlots { first: 0, last: 1 },
            Effect::Global {
                args: &[b"LH.UNPINALL"],
            },
        ] {
            let mut log = EffectLog::new(1024);
            log.begin_unit();
            log.emit(effect);
            log.end_unit();
            assert!(all(&log).starts_with(MULTI_RECORD), "{effect:?}");
        }
        let mut log = EffectLog::new(1024);
        log.begin_unit();
        log.emit(Effect::FlushSlots { first: 7, last: 7 });
        log.emit(set(b"{t}"));
        log.end_unit();
        assert!(all(&log).starts_with(MULTI_RECORD));
    }
}
