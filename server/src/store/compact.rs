//! Sliding-window and GCRA keys in 32 bytes.
//!
//! Their states carry their own deadline (both windows empty; the theoretical
//! arrival time passed), so such a key needs no deadline field, and with a
//! key of at most [`COMPACT_KEY`] bytes the whole entry is 32 bytes with no
//! pointer: the key, one byte of length and kind, and the 15 packed bytes of
//! [`Value`]. A slot keeps these apart from its 48-byte entries, in a vector of
//! their own with its own tags, up to [`COMPACT_MAX`] of them (past that,
//! more go to the general vector). At 1M keys that is about 37 bytes a
//! sliding-window key against 54 in the general vector: the difference
//! between 40x and 50x less memory than Redis's sorted-set log at the limit.
//!
//! The deadline is monotonic: such a key expires when its state empties on
//! the clock that drives the state, and reads as the Unix deadline of that
//! instant under the shard's latest clock reading.

use super::table::Tagged;
use super::value::{Packed, RateState, Value};

/// Longest key a compact entry holds.
pub const COMPACT_KEY: usize = 16;
/// Most compact entries in one slot (lookups scan their tags, with no index).
pub const COMPACT_MAX: usize = 128;

const SLIDING_WINDOW: u8 = 1 << 5;
const GCRA: u8 = 2 << 5;
const LEN_MASK: u8 = (1 << 5) - 1;

/// One compact key: 32 bytes.
#[derive(Debug, Clone, Copy)]
pub struct Compact {
    key: [u8; COMPACT_KEY],
    /// Key length in the low 5 bits, kind in the high 3.
    meta: u8,
    state: Packed,
}

impl Compact {
    /// The compact form of `key` holding `state`, when the key is short
    /// enough, the state packs, and `expire_mono` is the deadline the state
    /// implies; `None` otherwise.
    pub fn new(key: &[u8], state: &RateState, expire_mono: u64) -> Option<Compact> {
        if key.len() > COMPACT_KEY || state.empties_at() != Some(expire_mono) {
            return None;
        }
        let (kind, packed) = match state.into_value() {
            Value::SlidingWindow(p) => (SLIDING_WINDOW, p),
            Value::Gcra(p) => (GCRA, p),
            _ => return None,
        };
        let mut bytes = [0; COMPACT_KEY];
        bytes[..key.len()].copy_from_slice(key);
        Some(Compact {
            key: bytes,
            meta: kind | key.len() as u8,
            state: packed,
        })
    }

    /// The key bytes.
    pub fn key(&self) -> &[u8] {
        &self.key[..(self.meta & LEN_MASK) as usize]
    }

    /// The value, as a general entry holds it.
    pub fn value(&self) -> Value {
        if self.meta & !LEN_MASK == SLIDING_WINDOW {
            Value::SlidingWindow(self.state)
        } else {
            Value::Gcra(self.state)
        }
    }

    /// The state, unpacked.
    pub fn state(&self) -> RateState {
        self.value()
            .rate_state()
            .expect("a compact entry holds a rate-limit state")
    }

    /// The deadline, monotonic ms.
    pub fn deadline_mono(&self) -> u64 {
        self.state()
            .empties_at()
            .expect("compact states imply their deadline")
    }
}

/// A slot's compact entries and their 16-bit hash tags.
pub type CompactVec = Tagged<Compact>;

impl Tagged<Compact> {
    /// The position of `key`, whose hash is `h`.
    pub fn find(&self, h: u64, key: &[u8]) -> Option<usize> {
        self.scan(h, |c| c.key() == key)
    }

    /// Replaces the entry at `i` (same key).
    pub fn replace(&mut self, i: usize, c: Compact) {
        *self.at_mut(i) = c;
    }

    /// Removes every entry whose deadline is at or before `now_mono`, handing
    /// each to `removed`. Returns the number examined.
    pub fn remove_expired(&mut self, now_mono: u64, mut removed: impl FnMut(Compact)) -> u64 {
        let seen = self.len() as u64;
        let mut i = 0;
        while i < self.len() {
            if self.at(i).deadline_mono() <= now_mono {
                removed(self.swap_remove(i));
            } else {
                i += 1;
            }
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ratelimit::{gcra::State as GcraState, sliding_window::Window};

    #[test]
    fn a_compact_entry_is_32_bytes() {
        assert_eq!(std::mem::size_of::<Compact>(), 32);
    }

    #[test]
    fn only_short_keys_with_packable_states_and_implied_deadlines() {
        let w = RateState::SlidingWindow(Window {
            window_ms: 60_000,
            start: 120_000,
            previous: 3,
            current: 4,
        });
        let c = Compact::new(b"sw:000000000001", &w, 240_000).unwrap();
        assert_eq!(c.key(), b"sw:000000000001");
        assert_eq!(c.state(), w);
        assert_eq!(c.deadline_mono(), 240_000);
        assert!(Compact::new(b"sw:000000000001", &w, 240_001).is_none());
        assert!(Compact::new(&[b'k'; 17], &w, 240_000).is_none());
        let t = RateState::Gcra(GcraState {
            empty_ms: 2_000,
            frac: 1,
            units_per_ms: 3,
            full_ms: 5_001,
        });
        let c = Compact::new(b"", &t, 5_001).unwrap();
        assert_eq!(
            (c.key(), c.state(), c.deadline_mono()),
            (&b""[..], t, 5_001)
        );
        let wide = RateState::Gcra(GcraState {
            empty_ms: 2_000,
            frac: 1,
            units_per_ms: 1 << 33,
            full_ms: 5_001,
        });
        assert!(Compact::new(b"k", &wide, 5_001).is_none());
    }
}
