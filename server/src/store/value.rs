//! What a key holds, in 16 bytes.
//!
//! An entry is a 24-byte key, an 8-byte deadline and this 16-byte value: 48
//! bytes, so that a token-bucket key of up to 16 bytes costs at most 64
//! bytes with its share of the table (Redis 7 spends about
//! 186). The rate-limit states are packed into the 15 bytes after the tag
//! when their fields fit the usual ranges (see `RateState::pack`); any state
//! outside them is kept whole in a boxed [`Value::Wide`], so no range is
//! refused, only made larger.

use bytes::Bytes;

use crate::collections::{hash::Hash, list::List, set::Set, zset::ZSet, Collection};
pub use crate::ratelimit::RateState;
use crate::ratelimit::{gcra::State as GcraState, sliding_window::Window, token_bucket::Bucket};

/// Longest string kept inside its value rather than in an allocation.
pub const SMALL_STRING: usize = 14;

/// Longest string Redis 7 keeps in one allocation with its object
/// (`OBJ_ENCODING_EMBSTR_SIZE_LIMIT`), for [`Value::encoding`].
const EMBSTR_MAX: usize = 44;

/// The integers Redis 7 keeps as shared objects (`OBJ_SHARED_INTEGERS`).
const SHARED_INTEGERS: i64 = 10_000;

/// A stored value: 16 bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string longer than [`SMALL_STRING`] bytes (Redis "string" type, raw
    /// encoding); GET shares it by reference count. Boxed so that the enum
    /// stays at 16 bytes (a `Bytes` is 32).
    Str(Box<Bytes>),
    /// A string of at most [`SMALL_STRING`] bytes, inside the value (Redis's
    /// "embstr" idea): no allocation to store it, and GET copies it out rather
    /// than touching a reference count from two threads (an 8% hot spot in a
    /// `GET -P 16` profile).
    Small {
        /// Bytes used.
        len: u8,
        /// The string, zero-padded.
        bytes: [u8; SMALL_STRING],
    },
    /// A string that holds a canonical decimal `i64` (Redis "int" encoding);
    /// GET renders it, INCR updates it in place.
    Int(i64),
    /// A token bucket packed by `RateState::pack`.
    TokenBucket(Packed),
    /// A sliding-window pair packed by `RateState::pack`.
    SlidingWindow(Packed),
    /// A GCRA theoretical arrival time packed by `RateState::pack`.
    Gcra(Packed),
    /// A rate-limit state whose fields do not fit the packed form.
    Wide(Box<RateState>),
    /// A list (Redis "list" type).
    List(Box<List>),
    /// A hash (Redis "hash" type).
    Hash(Box<Hash>),
    /// A set (Redis "set" type).
    Set(Box<Set>),
    /// A sorted set (Redis "zset" type).
    ZSet(Box<ZSet>),
}

/// The 15 bytes after a [`Value`]'s tag, little-endian fields of the widths
/// `RateState::pack` gives.
pub type Packed = [u8; 15];

/// Field widths in bytes, per packed kind (they sum to at most 15):
/// - token bucket: balance in `1/period_ms` token (`tokens * period_ms +
///   frac`, up to 2^48), `period_ms` (up to 2^32, 49 days), refill instant
///   (monotonic ms, up to 2^40, 34 years of uptime);
/// - sliding window: `window_ms` (2^32), current window number (`start /
///   window_ms`, 2^40), previous and current counts (2^24 each);
/// - GCRA: the empty instant's whole ms (monotonic, 0 to 2^40), its fraction
///   and `units_per_ms` (2^24 each), and the ms from it to the full instant
///   (2^32, 49 days).
const BUCKET: [usize; 3] = [6, 4, 5];
const WINDOW: [usize; 4] = [4, 5, 3, 3];
const GCRA: [usize; 4] = [5, 3, 3, 4];

fn pack<const N: usize>(widths: [usize; N], fields: [u64; N]) -> Option<Packed> {
    let mut out = [0u8; 15];
    let mut at = 0;
    for (w, v) in widths.into_iter().zip(fields) {
        if w < 8 && v >> (8 * w) != 0 {
            return None;
        }
        out[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
        at += w;
    }
    Some(out)
}

fn unpack<const N: usize>(widths: [usize; N], p: &Packed) -> [u64; N] {
    let mut at = 0;
    widths.map(|w| {
        let mut b = [0u8; 8];
        b[..w].copy_from_slice(&p[at..at + w]);
        at += w;
        u64::from_le_bytes(b)
    })
}

impl RateState {
    /// The value that stores this state: packed when every field fits its
    /// width (checked, never truncated), boxed otherwise.
    pub fn into_value(self) -> Value {
        self.pack().unwrap_or_else(|| Value::Wide(Box::new(self)))
    }

    fn pack(&self) -> Option<Value> {
        Some(match *self {
            RateState::TokenBucket(b) if b.period_ms > 0 => {
                let units =
                    u64::try_from(b.tokens as u128 * b.period_ms as u128 + b.frac as u128).ok()?;
                Value::TokenBucket(pack(BUCKET, [units, b.period_ms, b.refilled_at])?)
            }
            RateState::SlidingWindow(w) => {
                if w.window_ms == 0 || w.start % w.window_ms != 0 {
                    return None;
                }
                let fields = [w.window_ms, w.start / w.window_ms, w.previous, w.current];
                Value::SlidingWindow(pack(WINDOW, fields)?)
            }
            RateState::Gcra(t) => {
                let ms = u64::try_from(t.empty_ms).ok()?;
                let fields = [ms, t.frac, t.units_per_ms, t.full_ms.checked_sub(ms)?];
                Value::Gcra(pack(GCRA, fields)?)
            }
            RateState::TokenBucket(_) => return None,
        })
    }
}

impl Value {
    /// The name `TYPE` reports.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::List(_) => "list",
            Value::Hash(_) => "hash",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
            _ => match self.rate_state() {
                None => "string",
                Some(r) => r.type_name(),
            },
        }
    }

    /// The collection this value holds (`None` for strings and rate-limit
    /// states).
    pub fn collection(&self) -> Option<&dyn Collection> {
        Some(match self {
            Value::List(l) => &**l,
            Value::Hash(h) => &**h,
            Value::Set(s) => &**s,
            Value::ZSet(z) => &**z,
            _ => return None,
        })
    }

    /// The name `OBJECT ENCODING` reports. Strings as Redis 7 names them:
    /// `int` for a canonical `i64`, `embstr` up to 44 bytes, `raw` beyond
    /// (Redis also reports `raw` for a short string APPEND or SETRANGE
    /// built; Leasehold does not keep how a string was made, so it reports
    /// `embstr` for those). Rate-limit states (Leasehold's own): `packed`
    /// when held in the value's 15 bytes, `wide` when boxed whole because a
    /// field does not fit. Collections: their own
    /// ([`Collection::encoding`]).
    pub fn encoding(&self) -> &'static str {
        match self {
            Value::Int(_) => "int",
            Value::Small { .. } => "embstr",
            Value::Str(b) if b.len() <= EMBSTR_MAX => "embstr",
            Value::Str(_) => "raw",
            Value::TokenBucket(_) | Value::SlidingWindow(_) | Value::Gcra(_) => "packed",
            Value::Wide(_) => "wide",
            Value::List(l) => l.encoding(),
            Value::Hash(h) => h.encoding(),
            Value::Set(s) => s.encoding(),
            Value::ZSet(z) => z.encoding(),
        }
    }

    /// Bytes this value owns outside its 16 inline bytes: a boxed string's
    /// `Bytes` handle and its buffer, a wide state's box; 0 for values held
    /// inline. `MEMORY USAGE` adds this to the entry's own size.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Value::Str(b) => std::mem::size_of::<Bytes>() + b.len(),
            Value::Wide(_) => std::mem::size_of::<RateState>(),
            Value::List(l) => l.heap_bytes(),
            Value::Hash(h) => h.heap_bytes(),
            Value::Set(s) => s.heap_bytes(),
            Value::ZSet(z) => z.heap_bytes(),
            Value::Small { .. }
            | Value::Int(_)
            | Value::TokenBucket(_)
            | Value::SlidingWindow(_)
            | Value::Gcra(_) => 0,
        }
    }

    /// What `OBJECT REFCOUNT` answers: as in Redis, the integers 0 to 9999
    /// are shared objects there, reported as `i32::MAX`
    /// (`OBJ_SHARED_REFCOUNT`); every other value has one reference.
    pub fn refcount(&self) -> i64 {
        match self {
            Value::Int(i) if (0..SHARED_INTEGERS).contains(i) => i64::from(i32::MAX),
            _ => 1,
        }
    }

    /// The rate-limit state this value holds, unpacked; `None` for strings
    /// and collections.
    pub fn rate_state(&self) -> Option<RateState> {
        Some(match self {
            Value::Str(_)
            | Value::Small { .. }
            | Value::Int(_)
            | Value::List(_)
            | Value::Hash(_)
            | Value::Set(_)
            | Value::ZSet(_) => return None,
            Value::Wide(r) => **r,
            Value::TokenBucket(p) => {
                let [units, period_ms, refilled_at] = unpack(BUCKET, p);
                RateState::TokenBucket(Bucket {
                    tokens: units / period_ms,
                    frac: units % period_ms,
                    period_ms,
                    refilled_at,
                })
            }
            Value::SlidingWindow(p) => {
                let [window_ms, number, previous, current] = unpack(WINDOW, p);
                RateState::SlidingWindow(Window {
                    window_ms,
                    start: number * window_ms,
                    previous,
                    current,
                })
            }
            Value::Gcra(p) => {
                let [ms, frac, units_per_ms, to_full] = unpack(GCRA, p);
                RateState::Gcra(GcraState {
                    empty_ms: ms as i64,
                    frac,
                    units_per_ms,
                    full_ms: ms + to_full,
                })
            }
        })
    }

    /// Builds a string value: the integer form when `bytes` is a canonical
    /// `i64` (so that it reads back byte for byte), inline when small.
    pub fn from_bytes(bytes: &[u8]) -> Value {
        match leasehold_protocol::int::parse_i64(bytes) {
            Some(i) if bytes.len() <= 20 => Value::Int(i),
            _ if bytes.len() <= SMALL_STRING => {
                let mut inline = [0; SMALL_STRING];
                inline[..bytes.len()].copy_from_slice(bytes);
                Value::Small {
                    len: bytes.len() as u8,
                    bytes: inline,
                }
            }
            _ => Value::Str(Box::new(Bytes::copy_from_slice(bytes))),
        }
    }

    /// Calls `f` with the string form of a string value (`None` for other
    /// types), without allocating.
    pub fn with_string<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        match self {
            Value::Str(b) => Some(f(b)),
            Value::Small { len, bytes } => Some(f(&bytes[..*len as usize])),
            Value::Int(i) => Some(f(itoa::Buffer::new().format(*i).as_bytes())),
            _ => None,
        }
    }

    /// The string form of a string value, or `None` for other types.
    pub fn as_bytes(&self) -> Option<Bytes> {
        match self {
            Value::Str(b) => Some((**b).clone()),
            other => other.with_string(Bytes::copy_from_slice),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_16_bytes() {
        assert_eq!(std::mem::size_of::<Value>(), 16);
    }

    #[test]
    fn strings_read_back_byte_for_byte() {
        assert_eq!(Value::from_bytes(b"123"), Value::Int(123));
        assert_eq!(&Value::from_bytes(b"0123").as_bytes().unwrap()[..], b"0123");
        assert!(matches!(
            Value::from_bytes(b"0123"),
            Value::Small { len: 4, .. }
        ));
        let edge = [b'y'; SMALL_STRING];
        assert!(matches!(Value::from_bytes(&edge), Value::Small { .. }));
        let long = [b'x'; SMALL_STRING + 1];
        assert_eq!(&Value::from_bytes(&long).as_bytes().unwrap()[..], &long);
        assert!(matches!(Value::from_bytes(&long), Value::Str(_)));
        assert_eq!(&Value::Int(-5).as_bytes().unwrap()[..], b"-5");
        assert_eq!(Value::Int(-5).type_name(), "string");
    }

    #[test]
    fn encodings_sizes_and_refcounts_as_object_and_memory_report_them() {
        let long = |n: usize| Value::from_bytes(&vec![b'x'; n]);
        let cases = [
            (Value::from_bytes(b"9999"), "int", 0, i64::from(i32::MAX)),
            (Value::from_bytes(b"0"), "int", 0, i64::from(i32::MAX)),
            (Value::from_bytes(b"10000"), "int", 0, 1),
            (Value::from_bytes(b"-1"), "int", 0, 1),
            (Value::from_bytes(b"01"), "embstr", 0, 1),
            (long(44), "embstr", 32 + 44, 1),
            (long(45), "raw", 32 + 45, 1),
        ];
        for (v, encoding, heap, refs) in cases {
            assert_eq!(
                (v.encoding(), v.heap_bytes(), v.refcount()),
                (encoding, heap, refs),
                "{v:?}"
            );
        }
        let b = Bucket {
            tokens: 1,
            frac: 0,
            period_ms: 1000,
            refilled_at: 0,
        };
        assert_eq!(RateState::TokenBucket(b).into_value().encoding(), "packed");
        let wide = RateState::TokenBucket(Bucket {
            period_ms: 1 << 33,
            ..b
        })
        .into_value();
        assert_eq!(
            (wide.encoding(), wide.heap_bytes()),
            ("wide", std::mem::size_of::<RateState>())
        );
    }

    fn round_trip(r: RateState) -> Value {
        let v = r.into_value();
        assert_eq!(v.rate_state(), Some(r), "{v:?}");
        assert_eq!(v.as_bytes(), None);
        v
    }

    #[test]
    fn usual_states_pack_and_read_back() {
        let b = Bucket {
            tokens: 99,
            frac: 3_599_999,
            period_ms: 3_600_000,
            refilled_at: 123_456_789,
        };
        assert!(matches!(
            round_trip(RateState::TokenBucket(b)),
            Value::TokenBucket(_)
        ));
        let w = Window {
            window_ms: 60_000,
            start: 60_000 * 1_000_000,
            previous: 100,
            current: (1 << 24) - 1,
        };
        assert!(matches!(
            round_trip(RateState::SlidingWindow(w)),
            Value::SlidingWindow(_)
        ));
        let t = GcraState {
            empty_ms: (1 << 40) - 1,
            frac: 6,
            units_per_ms: 7,
            full_ms: (1 << 40) - 1 + u32::MAX as u64,
        };
        assert!(matches!(round_trip(RateState::Gcra(t)), Value::Gcra(_)));
    }

    #[test]
    fn states_beyond_the_packed_widths_are_boxed_whole() {
        let huge = Bucket {
            tokens: i64::MAX as u64,
            frac: 0,
            period_ms: 1,
            refilled_at: 0,
        };
        let late = Bucket {
            refilled_at: 1 << 40,
            ..Bucket {
                tokens: 1,
                frac: 0,
                period_ms: 1000,
                refilled_at: 0,
            }
        };
        let long_period = Bucket {
            period_ms: 1 << 32,
            ..late
        };
        for b in [huge, late, long_period] {
            assert!(matches!(
                round_trip(RateState::TokenBucket(b)),
                Value::Wide(_)
            ));
        }
        let busy = Window {
            window_ms: 1000,
            start: 0,
            previous: 0,
            current: 1 << 24,
        };
        let unaligned = Window {
            start: 1,
            current: 1,
            ..busy
        };
        for w in [busy, unaligned] {
            assert!(matches!(
                round_trip(RateState::SlidingWindow(w)),
                Value::Wide(_)
            ));
        }
        let fine = GcraState {
            empty_ms: 5,
            frac: 1,
            units_per_ms: 1 << 24,
            full_ms: 6,
        };
        let before_the_origin = GcraState {
            empty_ms: -5,
            units_per_ms: 1,
            frac: 0,
            ..fine
        };
        let long_tolerance = GcraState {
            units_per_ms: 1,
            frac: 0,
            full_ms: 5 + (1 << 32),
            ..fine
        };
        for t in [fine, before_the_origin, long_tolerance] {
            assert!(matches!(round_trip(RateState::Gcra(t)), Value::Wide(_)));
        }
        assert_eq!(
            RateState::Gcra(fine).into_value().type_name(),
            crate::ratelimit::type_names::GCRA
        );
    }
}
