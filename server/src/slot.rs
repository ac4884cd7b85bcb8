//! Keys to hash slots to shards.
//!
//! slot = CRC16-XMODEM(key, or the part inside the first non-empty `{...}`) mod
//! 16384, exactly as Redis Cluster computes it (cluster spec, "Keys distribution
//! model"). Each shard owns one contiguous range of slots, so keys that share a
//! hash tag always live on one shard, and cluster mode can later hand slot
//! ranges to nodes with the same function.

/// Number of hash slots, as in Redis Cluster.
pub const SLOTS: usize = 16384;

/// CRC16-XMODEM (polynomial 0x1021, initial value 0), table driven.
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc = (crc << 8) ^ CRC16_TABLE[(((crc >> 8) as u8) ^ b) as usize];
    }
    crc
}

const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut j = 0;
        while j < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            j += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// The hash slot of `key`, honouring `{hash tags}`.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(hashed) & (SLOTS as u16 - 1)
}

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
    fn matches_redis_cluster_reference_values() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
        // An empty tag ("{}") is no tag: the whole key is hashed.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") & 16383);
        assert_eq!(key_slot(b"{}x"), crc16(b"{}x") & 16383);
    }

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
