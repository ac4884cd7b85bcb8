//! The store's side of the replication stream. The store is the only writer
//! of its shard's [`EffectLog`]: every mutation appends one effect, written
//! by the keyspace and expiry code next to the change it describes; this file
//! holds the log's read and wake accessors and the effect that recreates a
//! whole value.

use super::{Store, Value};
use crate::effects::{Effect, EffectLog, Wake};

impl Store {
    /// The effect stream this store writes (read side: offset, `since`).
    pub fn effects(&self) -> &EffectLog {
        &self.effects
    }

    /// Sets the hook called when effects were appended ([`EffectLog::set_wake`]).
    pub fn set_effects_wake(&mut self, wake: Wake) {
        self.effects.set_wake(wake);
    }

    /// Fires the effects' wake hook if this batch appended any.
    pub fn announce_effects(&mut self) {
        self.effects.announce();
    }

    /// The effect that recreates `value` at `key` expiring at `expire_at`
    /// (Unix ms, `None` for no TTL): `SET` for strings, `LH.RESTORE` for
    /// rate-limit states (whose deadline is always set).
    pub(super) fn emit_value(&mut self, key: &[u8], value: &Value, expire_at: Option<u64>) {
        let effects = &mut self.effects;
        if value
            .with_string(|bytes| {
                effects.emit(Effect::Set {
                    key,
                    value: bytes,
                    expire_at_ms: expire_at,
                })
            })
            .is_some()
        {
            return;
        }
        if let Some(state) = value.rate_state() {
            effects.emit(Effect::Rate {
                key,
                state: &state,
                expire_at_ms: expire_at.unwrap_or(i64::MAX as u64),
                now: self.clock,
            });
        }
    }
}
