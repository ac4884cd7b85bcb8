//! Keys to hash slots to shards.
//!
//! The slot of a key is the codec crate's [`key_slot`] (CRC16-XMODEM of the
//! key or its hash tag, mod 16384, as Redis Cluster computes it). Each
//! shard owns one contiguous range of slots, so keys that share a hash tag
//! always live on one shard, and cluster mode hands slot ranges to nodes
//! with the same function.

pub use leasehold_protocol::slot::{crc16, key_slot, SLOTS};

/// The shard that owns `slot` when the keyspace is split into `shards` ranges.
pub fn slot_shard(slot: u16, shards: usize) -> usize {
    slot as usize * shards / SLOTS
}

/// The first slot owned by `shard`.
pub fn shard_first_slot(shard: usize, shards: usize) -> usize {
    (shard * SLOTS).div_ceil(shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_ranges_cover_all_slots() {
        for shards in 1..=7 {
            let mut prev = 0;
            for slot in 0..SLOTS as u16 {
                let s = slot_shard(slot, shards);
                assert!(s == prev || s == prev + 1);
                if s != prev {
                    assert_eq!(shard_first_slot(s, shards), slot as usize);
                }
                prev = s;
            }
            assert_eq!(prev, shards - 1);
        }
    }
}
