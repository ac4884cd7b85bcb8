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

    /// Calls `f` with the effect that recreates `value` at `key` expiring at
    /// `expire_at` (Unix ms, `None` for no TTL): `SET` for strings,
    /// `LH.RESTORE` for rate-limit states (whose deadline is always set),
    /// their instants written as Unix ms under `now`.
    pub(super) fn value_effect(
        key: &[u8],
        value: &Value,
        expire_at: Option<u64>,
        now: Now,
        f: impl FnOnce(Effect<'_>),
    ) {
        let mut f = Some(f);
        let written = value.with_string(|bytes| {
            if let Some(f) = f.take() {
                f(Effect::Set {
                    key,
                    value: bytes,
                    expire_at_ms: expire_at,
                })
            }
        });
        if written.is_some() {
            return;
        }
        if let (Some(state), Some(f)) = (value.rate_state(), f) {
            f(Effect::Rate {
                key,
                state: &state,
                expire_at_ms: expire_at.unwrap_or(i64::MAX as u64),
                now,
            });
        }
    }
}
