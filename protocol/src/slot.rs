//! Keys to Redis Cluster hash slots, for the server (which maps slots to
//! shards and, in cluster mode, to nodes) and the cluster client (which
//! routes by them).
//!
//! slot = CRC16-XMODEM(key, or the part inside its first non-empty
//! `{...}`) mod 16384, exactly as the Redis Cluster specification ("Keys
//! distribution model") computes it.

/// Number of hash slots, as in Redis Cluster.
pub const SLOTS: usize = 16384;

/// CRC16-XMODEM (polynomial 0x1021, initial value 0), table driven.
#[inline]
pub fn crc16(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |crc, &b| {
        (crc << 8) ^ CRC16_TABLE[(((crc >> 8) as u8) ^ b) as usize]
    })
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

/// The hash slot (0-16383) of `key`: only the part inside the first `{`
/// and the next `}` is hashed when that part is not empty (a hash tag), so
/// `{user1}:a` and `{user1}:b` share a slot.
#[inline]
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            match rest.iter().position(|&b| b == b'}') {
                Some(len) if len > 0 => Some(&rest[..len]),
                _ => None,
            }
        })
        .unwrap_or(key);
    crc16(hashed) & (SLOTS as u16 - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_redis_cluster_reference_values() {
        // The check value of CRC16-XMODEM, and `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"hello"), 866);
        assert_eq!(key_slot(b""), 0);
        assert_eq!(key_slot(b"{user1000}.following"), 3443);
        assert_eq!(key_slot(b"{user1000}.followers"), 3443);
        assert_eq!(key_slot(b"{user1000}"), key_slot(b"user1000"));
    }

    #[test]
    fn hash_tag_rules() {
        // Only the first `{` counts, up to the next `}`.
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        // An empty tag, or no closing brace: the whole key is hashed.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") & 16383);
        assert_eq!(key_slot(b"{}x"), crc16(b"{}x") & 16383);
        assert_eq!(key_slot(b"foo{bar"), crc16(b"foo{bar") & 16383);
    }
}
