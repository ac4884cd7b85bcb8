//! What the collection families (lists, hashes, sets) share: finding a
//! key's collection (WRONGTYPE for another type; reads count a keyspace hit
//! or miss, as Redis's read lookups do), creating it when a write needs
//! one, emitting the command that replays a change, the random picks of
//! HRANDFIELD and SRANDMEMBER, and the cursor and reply of HSCAN and SSCAN.
//! No rows.

use std::cell::RefCell;

use bytes::Bytes;
use leasehold_protocol::{Args, Bulks, Reply};

use crate::collections::rng::Rng;
use crate::error::OpError;
use crate::shard::Shard;
use crate::store::Value;

/// Picks the collection of one type out of a value (`None` for any other).
pub type Pick<T> = fn(&mut Value) -> Option<&mut T>;

/// The collection at `key`: `None` when absent, WRONGTYPE when the key holds
/// something `pick` does not take. With `read`, counts a keyspace hit or
/// miss.
pub fn lookup<'a, T>(
    s: &'a mut Shard,
    key: &[u8],
    read: bool,
    pick: Pick<T>,
) -> Result<Option<&'a mut T>, OpError> {
    let Shard {
        store, stats, now, ..
    } = s;
    let found = store.get(key, now.unix_ms);
    if read {
        match found {
            Some(_) => stats.keyspace_hits.add(1),
            None => stats.keyspace_misses.add(1),
        }
    }
    match found {
        None => Ok(None),
        Some(e) => pick(&mut e.value).map(Some).ok_or(OpError::WrongType),
    }
}

/// The collection at `key`, stored as `make()` first when the key is
/// absent; WRONGTYPE for another type.
pub fn or_create<'a, T>(
    s: &'a mut Shard,
    key: &[u8],
    make: impl FnOnce() -> Value,
    pick: Pick<T>,
) -> Result<&'a mut T, OpError> {
    let (entry, _) = s.store.get_or_create(key, s.now.unix_ms, make);
    pick(&mut entry.value).ok_or(OpError::WrongType)
}

/// Emits `name key args...`, the command that replays a change.
pub fn emit(s: &mut Shard, name: &[u8], key: &[u8], args: &[&[u8]]) {
    let mut all: Vec<&[u8]> = Vec::with_capacity(args.len() + 2);
    all.extend_from_slice(&[name, key]);
    all.extend_from_slice(args);
    s.store.emit_command(&all);
}

thread_local! {
    /// The generator of this thread's random picks (HRANDFIELD, SRANDMEMBER, SPOP).
    static RNG: RefCell<Rng> = RefCell::new(Rng::from_entropy());
}

/// Runs `f` with this thread's generator of random picks.
pub fn with_rng<T>(f: impl FnOnce(&mut Rng) -> T) -> T {
    RNG.with_borrow_mut(f)
}

/// The smallest bytes one element of a reply takes (`$0\r\n\r\n`): a count
/// whose reply must pass `proto-max-bulk-len` even at that size is refused
/// rather than built in memory.
pub const MIN_ELEMENT_BYTES: u64 = 6;

/// The count of a random pick with a count (HRANDFIELD, ZRANDMEMBER) and
/// whether `word` (WITHVALUES, WITHSCORES) follows it, checked as Redis
/// does: the count within +-`i64::MAX`, then the option, then the reply's
/// least size against `proto-max-bulk-len` for a repeating count.
///
/// # Errors
/// The integer error; `ERR value is out of range, value must between ...`
/// for `i64::MIN`; syntax error for another option; out of range for a
/// repeating count whose reply could not fit.
pub fn random_count(s: &Shard, a: &mut Args, word: &str) -> Result<(i64, bool), OpError> {
    let count = a.i64()?;
    if count == i64::MIN {
        return Err(OpError::OutOfRangeBetween(-i64::MAX, i64::MAX));
    }
    let with_values = match a.remaining() {
        0 => false,
        1 if a.flag(word) => true,
        _ => return Err(OpError::Syntax),
    };
    let per_pick = if with_values { 2 } else { 1 };
    // Redis's own bound: a repeating count whose reply length overflows.
    if with_values && count < -(i64::MAX / 2) {
        return Err(OpError::OutOfRange);
    }
    let limit = s.conf.proto_max_bulk_len as u64;
    let least_bytes = count
        .unsigned_abs()
        .saturating_mul(per_pick * MIN_ELEMENT_BYTES);
    if count < 0 && least_bytes > limit {
        return Err(OpError::OutOfRange);
    }
    Ok((count, with_values))
}

/// The positions HRANDFIELD (SRANDMEMBER) answers for `count` among `len`
/// fields (members): with a
/// negative count, `-count` picks that may repeat, in random order; with a
/// positive one, distinct picks (all of them, in the collection's order, when
/// `count` reaches the length; otherwise a random subset, in the hash's
/// order).
pub fn pick_positions(rng: &mut Rng, len: usize, count: i64) -> Vec<usize> {
    if count < 0 {
        return (0..count.unsigned_abs()).map(|_| rng.below(len)).collect();
    }
    let k = count as u64;
    if k >= len as u64 {
        return (0..len).collect();
    }
    let k = k as usize;
    let mut chosen = if 3 * k > len {
        // Most of them: shuffle the first k of all positions into place.
        let mut all: Vec<usize> = (0..len).collect();
        for i in 0..k {
            let j = i + rng.below(len - i);
            all.swap(i, j);
        }
        all.truncate(k);
        all
    } else {
        // Few of them: Floyd's sampling, k distinct draws.
        let mut set = hashbrown::HashSet::with_capacity(k);
        for j in len - k..len {
            let t = rng.below(j + 1);
            if !set.insert(t) {
                set.insert(j);
            }
        }
        set.into_iter().collect()
    };
    chosen.sort_unstable();
    chosen
}

/// Reads a cursor as Redis does (`strtoul`): an optional sign, decimal
/// digits, nothing else; a minus wraps around (`-1` is 2^64 - 1), the empty
/// string is 0.
pub fn parse_cursor(b: &[u8]) -> Option<u64> {
    let (negative, digits) = match b.first() {
        Some(b'-') => (true, &b[1..]),
        Some(b'+') => (false, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() {
        return (digits.len() == b.len()).then_some(0);
    }
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(if negative { n.wrapping_neg() } else { n })
}

/// A SCAN-like reply: the next cursor and the items.
pub fn scan_reply(cursor: u64, items: Bulks) -> Reply {
    Reply::Array(vec![
        Reply::Bulk(Bytes::from(cursor.to_string())),
        items.into(),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_as_strtoul_reads_them() {
        for (text, want) in [
            ("0", Some(0)),
            ("", Some(0)),
            ("+5", Some(5)),
            ("-1", Some(u64::MAX)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", None),
            ("+", None),
            ("-", None),
            (" 5", None),
            ("5 ", None),
            ("x", None),
        ] {
            assert_eq!(parse_cursor(text.as_bytes()), want, "{text:?}");
        }
    }

    #[test]
    fn picks_are_distinct_when_positive_and_in_range() {
        let mut rng = Rng::new(3);
        for (len, count) in [(10, 3), (10, 9), (100, 10), (5, 5), (5, 50), (1, 1)] {
            let p = pick_positions(&mut rng, len, count);
            assert_eq!(p.len(), (count as usize).min(len), "{len} {count}");
            assert!(p.windows(2).all(|w| w[0] < w[1]), "sorted, distinct: {p:?}");
            assert!(p.iter().all(|&i| i < len));
        }
        let p = pick_positions(&mut rng, 3, -50);
        assert_eq!(p.len(), 50);
        assert!(p.iter().all(|&i| i < 3));
        assert!((0..3).all(|i| p.contains(&i)), "50 picks of 3 reach each");
    }
}
