//! The store's side of pinned limits (`crate::ratelimit::pin`): every shard
//! holds the same pins, so a rate-limit call checks them with no hop and no
//! lock. A change runs on every shard; only the store of slot 0 emits it,
//! so the merged stream (a replica, the append-only log) carries it once,
//! and that store's image starts with the run-time pins.

use bytes::BytesMut;

use super::Store;
use crate::effects::Effect;
use crate::ratelimit::pin::{ChangeError, Pin, Pins};

impl Store {
    /// This shard's pins.
    pub fn pins(&self) -> &Pins {
        &self.pins
    }

    /// Fixes the configured pins (at start, before any command runs).
    pub fn configure_pins(&mut self, configured: Vec<Pin>) {
        self.pins = Pins::new(configured);
    }

    /// Whether this store emits pin changes (it owns slot 0).
    fn emits_pins(&self) -> bool {
        self.first_slot == 0
    }

    fn emit_pin_change(&mut self, args: &[&[u8]]) {
        if self.emits_pins() {
            self.effects.emit(Effect::Global { args });
        }
    }

    /// Sets a run-time pin and emits `LH.PIN`.
    ///
    /// # Errors
    /// [`ChangeError::Configured`] when the configuration pins that prefix.
    pub fn set_pin(&mut self, pin: Pin) -> Result<(), ChangeError> {
        self.pins.set(pin.clone())?;
        if self.emits_pins() {
            with_pin_record(&pin, |e| self.effects.emit(e));
        }
        Ok(())
    }

    /// Removes the run-time pin of `prefix` and emits `LH.UNPIN` when there
    /// was one.
    ///
    /// # Errors
    /// [`ChangeError::Configured`] when the configuration pins that prefix.
    pub fn remove_pin(&mut self, prefix: &[u8]) -> Result<bool, ChangeError> {
        let removed = self.pins.remove(prefix)?;
        if removed {
            self.emit_pin_change(&[b"LH.UNPIN", prefix]);
        }
        Ok(removed)
    }

    /// Removes every run-time pin and emits `LH.UNPINALL` when there were
    /// any; returns how many.
    pub fn clear_pins(&mut self) -> usize {
        let n = self.pins.runtime().len();
        self.pins.clear_runtime();
        if n > 0 {
            self.emit_pin_change(&[b"LH.UNPINALL"]);
        }
        n
    }

    /// The `LH.PIN` records of the run-time pins, for the start of this
    /// store's image (empty unless it owns slot 0), and how many.
    pub(super) fn pin_records(&self) -> (BytesMut, u64) {
        let mut out = BytesMut::new();
        if !self.emits_pins() {
            return (out, 0);
        }
        for pin in self.pins.runtime() {
            with_pin_record(pin, |e| e.encode(&mut out));
        }
        (out, self.pins.runtime().len() as u64)
    }
}

/// Calls `f` with the `LH.PIN` effect that sets `pin`.
fn with_pin_record(pin: &Pin, f: impl FnOnce(Effect<'_>)) {
    let words = pin.policy.words();
    let mut args: Vec<&[u8]> = vec![b"LH.PIN", &pin.prefix];
    args.extend(words.iter().map(|w| w.as_bytes()));
    f(Effect::Global { args: &args });
}
