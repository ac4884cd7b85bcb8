//! The store's side of the replication stream. The store is the only writer
//! of its shard's [`EffectLog`]: every mutation appends one effect, written
//! by the keyspace and expiry code next to the change it describes; this file
//! holds the log's read and wake accessors and the effect that recreates a
//! whole value.

use super::{Store, Value};
use crate::clock::Now;
use crate::effects::{Effect, EffectLog};

impl Store {
    /// The effect stream this store writes (read side: offset, `since`).
    pub fn effects(&self) -> &EffectLog {
        &self.effects
    }

    /// The effect stream, to attach, publish or hold it.
    pub fn effects_mut(&mut self) -> &mut EffectLog {
        &mut self.effects
    }

    /// The effect that recreates `value` at `key` expiring at `expire_at`
    /// (Unix ms, `None` for no TTL), appended to the log.
    pub(super) fn emit_value(&mut self, key: &[u8], value: &Value, expire_at: Option<u64>) {
        let effects = &mut self.effects;
        Store::value_effect(key, value, expire_at, self.clock, |e| effects.emit(e));
    }

    /// Calls `f` with each effect that recreates `value` at `key` expiring
    /// at `expire_at` (Unix ms, `None` for no TTL), in order: `SET` for
    /// strings; `LH.RESTORE` for rate-limit states, their instants written
    /// as Unix ms under `now`, followed by `PERSIST` for a state without a
    /// TTL (`LH.RESTORE` always carries a deadline; a state has none after
    /// an explicit PERSIST, and keeps none through RENAME and COPY); a
    /// collection's [`crate::collections::Collection::rebuild`] commands,
    /// then `PEXPIREAT` when it has a TTL.
    pub(super) fn value_effect(
        key: &[u8],
        value: &Value,
        expire_at: Option<u64>,
        now: Now,
        mut f: impl FnMut(Effect<'_>),
    ) {
        if let Some(c) = value.collection() {
            c.rebuild(key, &mut |args| f(Effect::Command { key, args }));
            if let Some(at_ms) = expire_at {
                f(Effect::ExpireAt { key, at_ms });
            }
            return;
        }
        let written = value.with_string(|bytes| {
            f(Effect::Set {
                key,
                value: bytes,
                expire_at_ms: expire_at,
            })
        });
        if written.is_some() {
            return;
        }
        if let Some(state) = value.rate_state() {
            f(Effect::Rate {
                key,
                state: &state,
                expire_at_ms: expire_at.unwrap_or(i64::MAX as u64),
                now,
            });
            if expire_at.is_none() {
                f(Effect::Persist { key });
            }
        }
    }

    /// Emits a collection write as the command that replays it (`args`,
    /// name first, the key at `args[1]`): see [`Effect::Command`].
    pub fn emit_command(&mut self, args: &[&[u8]]) {
        self.effects.emit(Effect::Command { key: args[1], args });
    }
}
