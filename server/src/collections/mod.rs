//! The collection types' data structures: lists, hashes, sets and sorted
//! sets, with Redis's semantics and compact encodings for small values
//! (the way Redis's listpacks keep small collections cheap). Pure: they know
//! nothing of keys, shards or effects; the store keeps them in a
//! [`crate::store::Value`] and the command families in `commands` drive them.
//!
//! - [`pack`]: strings packed in one buffer, the listpack-like encoding
//!   small lists and hashes live in;
//! - [`list`]: a quicklist, a deque of packs;
//! - [`hash`]: a pack of field-value pairs, or past its thresholds a
//!   chained table with Redis's scan cursor;
//! - [`set`]: a sorted intset, a pack of members, or past their thresholds
//!   the hash's table;
//! - [`rng`]: the generator random picks (HRANDFIELD, SRANDMEMBER, SPOP)
//!   draw from.

pub mod hash;
pub mod list;
pub mod pack;
pub mod rng;
pub mod set;
pub mod zset;

#[cfg(test)]
mod tests;

/// Most elements (members, fields with their values) one command of a
/// value's [`Collection::rebuild`] carries, so that a record of a large
/// collection stays a bounded size.
pub const REBUILD_CHUNK: usize = 512;

/// What the store needs from every collection type.
pub trait Collection {
    /// The name `OBJECT ENCODING` reports for the current representation
    /// (`listpack`, `quicklist`, `hashtable`, `intset`, `skiplist`, as Redis
    /// names its own).
    fn encoding(&self) -> &'static str;

    /// The number of elements (list items, hash fields, set or sorted-set
    /// members).
    fn len(&self) -> usize;

    /// Bytes this value holds outside its key's entry (its allocations,
    /// as `MEMORY USAGE` counts them, approximately).
    fn heap_bytes(&self) -> usize;

    /// Whether the collection has no element (the store removes the key
    /// then: Redis has no empty collections).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with each command, as its arguments with the name first,
    /// that together recreate this value at `key` in a keyspace where
    /// `key` is absent (for example `RPUSH key a b c`), in order, each with
    /// at most [`REBUILD_CHUNK`] elements. Replicas' full syncs, snapshots
    /// and log rewrites are made of these records.
    fn rebuild(&self, key: &[u8], f: &mut dyn FnMut(&[&[u8]]));
}
