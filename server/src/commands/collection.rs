//! What the collection families (lists, hashes) share: finding a key's
//! collection (WRONGTYPE for another type; reads count a keyspace hit or
//! miss, as Redis's read lookups do), creating it when a write needs one,
//! and emitting the command that replays a change. No rows.

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
