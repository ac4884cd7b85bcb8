//! One shard's keyspace: values, expiry deadlines and their reclamation.
//!
//! The keyspace is one small table per hash slot the shard owns (Redis 7.4
//! keeps a dict per slot for the same reasons):
//! - `SCAN` walks slots in order and returns a slot's keys all at once, so a
//!   key present for the whole scan is returned at least once however the
//!   tables grow or shrink (the cursor is a slot number, never a bucket index);
//! - cluster mode can later move a slot by moving its table;
//! - growth rehashes one small table at a time, never the whole shard.
//!
//! Expiry deadlines are stored with the key (0 = none): absolute Unix ms, or
//! monotonic ms marked with [`MONOTONIC`] for rate-limit keys, whose state runs
//! on that clock. A key past its deadline is absent to every reader
//! ([`Store::get`] reclaims it on the spot: lazy expiry), and [`Store::sweep`]
//! walks the slots like a clock hand under a time budget (active expiry). A
//! hand rather than Redis's random sampling because a hand visits every key
//! in a bounded number of cycles, and it costs no memory per key (a timer
//! wheel would cost a node per key with a TTL, and rate-limit keys all have
//! one).
//!
//! # Layout
//!
//! In reading order:
//! - `mod.rs`: the [`Store`] struct, its construction, counters and clock
//!   reading;
//! - `keyspace.rs`: lookups and writes, lazy expiry, and the moves of
//!   rate-limit keys between compact and general entries;
//! - `expiry.rs`: the TTL counters and the active-expiry sweep;
//! - `moves.rs`: whole values taken, copied and restored under another key
//!   (RENAME, COPY), a random key, what OBJECT and MEMORY USAGE read;
//! - `emit.rs`: the store's side of the replication stream (it is the only
//!   writer of the shard's effect log);
//! - `watch.rs`: WATCH on this shard's keys (registering, EXEC's check);
//! - `image.rs`: a full sync's image of the shard, slot by slot, while it
//!   keeps serving;
//! - `table.rs`: one slot's table: 48-byte entries, their hash tags and, for
//!   large slots, an index;
//! - `compact.rs`: 32-byte entries for sliding-window and GCRA keys;
//! - `value.rs`: what a key holds, in 16 bytes;
//! - `tests.rs`: unit tests, including random-operation models.

mod compact;
mod emit;
mod expiry;
mod image;
mod keyspace;
mod moves;
mod pins;
mod table;
mod value;
mod watch;

use crate::clock::Now;
pub use crate::collections::{hash::Hash, list::List, set::Set, zset::ZSet, Collection};
use crate::effects::EffectLog;
pub use image::{ImagePart, ImageSink, ImageStep, IMAGE_QUEUE_LIMIT};
pub use moves::Moved;
pub use table::{Entry, INLINE_KEY, MONOTONIC};
use table::{Hasher, SlotTable};
pub use value::{RateState, Value, SMALL_STRING};

/// Counters a shard keeps about its keyspace (summed over shards for INFO).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StoreCounts {
    /// Live keys (including ones past their deadline not yet reclaimed).
    pub keys: u64,
    /// Keys with a TTL.
    pub expires: u64,
    /// Keys reclaimed because their deadline passed (INFO `expired_keys`).
    pub expired: u64,
}

/// One shard's keyspace.
pub struct Store {
    first_slot: usize,
    tables: Vec<SlotTable>,
    /// Keys with a TTL per slot table.
    slot_expires: Vec<u32>,
    /// The tables whose `slot_expires` is not zero, one bit each, so active
    /// expiry goes straight to them (a few TTL keys among 16384 slots are
    /// all visited every cycle, not once per hundred cycles).
    ttl_tables: expiry::TtlTables,
    hasher: Hasher,
    counts: StoreCounts,
    sweep_slot: usize,
    /// Where the sweep resumes inside `sweep_slot` (0: at its start).
    sweep_pos: usize,
    /// The shard's latest clock reading, which turns compact entries'
    /// monotonic deadlines into Unix ones ([`Store::set_clock`]).
    clock: Now,
    /// The replication backlog every change is written to; only the store
    /// writes it, one effect per mutation.
    effects: EffectLog,
    /// Full syncs' images in progress.
    images: Vec<image::Image>,
    /// Images started so far (each gets the next as its id).
    image_ids: u64,
    /// On a replica: keys past their deadline are hidden from reads but
    /// never reclaimed (the primary's `DEL` removes them).
    replica: bool,
    /// The command running comes from the replication link: every present
    /// entry is live to it, deadline or not.
    from_link: bool,
    /// Pinned limits (the same on every shard).
    pins: crate::ratelimit::pin::Pins,
    /// RANDOMKEY's generator state (never 0).
    rng: u64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// An empty keyspace for the slots `first_slot .. first_slot + slots`.
    pub fn new(first_slot: usize, slots: usize, backlog_bytes: usize) -> Store {
        let mut tables = Vec::with_capacity(slots);
        tables.resize_with(slots, SlotTable::default);
        Store {
            first_slot,
            tables,
            slot_expires: vec![0; slots],
            ttl_tables: expiry::TtlTables::new(slots),
            hasher: Hasher::default(),
            counts: StoreCounts::default(),
            sweep_slot: 0,
            sweep_pos: 0,
            clock: Now::default(),
            effects: EffectLog::new(backlog_bytes),
            images: Vec::new(),
            image_ids: 0,
            replica: false,
            from_link: false,
            pins: Default::default(),
            rng: random_seed(),
        }
    }

    /// Sets replica mode: expired keys are hidden, not reclaimed.
    pub fn set_replica(&mut self, yes: bool) {
        self.replica = yes;
    }

    /// Marks the commands that follow as coming from the replication link
    /// (every present entry is live to them), or not.
    pub fn set_from_link(&mut self, yes: bool) {
        self.from_link = yes;
    }

    /// Key, TTL and expiry counters.
    pub fn counts(&self) -> StoreCounts {
        self.counts
    }

    /// The slots this store owns, as a range of slot numbers.
    pub fn slot_range(&self) -> std::ops::Range<usize> {
        self.first_slot..self.first_slot + self.tables.len()
    }

    /// Records the shard's clock reading for this batch: compact entries'
    /// deadlines are monotonic, and read as Unix ms under it.
    pub fn set_clock(&mut self, now: Now) {
        self.clock = now;
    }

    /// Bytes held by the slot tables (not counting boxed keys and large
    /// values).
    pub fn table_bytes(&self) -> usize {
        self.tables.iter().map(SlotTable::allocation_size).sum()
    }
}

/// A seed for RANDOMKEY's generator, different in every store: the
/// standard library's per-map random keys, hashed (never 0).
fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0u8) | 1
}

#[cfg(test)]
mod tests;
