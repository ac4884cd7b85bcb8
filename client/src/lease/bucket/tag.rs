//! A key's tag: the 16 bytes of the hot record that identify the key (its
//! length and first 15 bytes), for the map's exact compare.

/// Keys up to this many bytes are compared in the hot record alone; longer
/// keys also compare their full bytes in the cold part (one more cache line).
pub(crate) const INLINE_KEY: usize = 15;

/// The hot record's 16 key bytes for `key`: byte 0 is the length (or 16 for
/// a longer key), then the key's first 15 bytes, zero-padded, read as a
/// little-endian `u128` (the layout `key_tag_bytes` spells out for the
/// tests). Equal tags mean equal keys when the length is at most
/// [`INLINE_KEY`].
///
/// Built from two overlapping unaligned loads of the key and shifts: a
/// byte-wise copy into a stack buffer read back as one `u128` stalls store
/// forwarding (~20% of a one-key decision).
#[inline]
pub(crate) fn key_tag(key: &[u8]) -> u128 {
    let len = key.len();
    let (body, marker) = if len > INLINE_KEY {
        (le_bytes(&key[..INLINE_KEY]), INLINE_KEY as u128 + 1)
    } else {
        (le_bytes(key), len as u128)
    };
    (body << 8) | marker
}

/// Up to 15 bytes as a little-endian integer (byte 0 lowest).
#[inline]
fn le_bytes(b: &[u8]) -> u128 {
    let n = b.len();
    debug_assert!(n <= INLINE_KEY);
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    if n >= 8 {
        // The second load ends at the last byte; drop its overlap with the first.
        let high = u64_at(n - 8).checked_shr(8 * (16 - n) as u32).unwrap_or(0);
        u128::from(u64_at(0)) | (u128::from(high) << 64)
    } else if n >= 4 {
        let high = u32_at(n - 4).checked_shr(8 * (8 - n) as u32).unwrap_or(0);
        u128::from(u32_at(0)) | (u128::from(high) << 32)
    } else {
        b.iter().rev().fold(0, |acc, &x| (acc << 8) | u128::from(x))
    }
}

/// [`key_tag`]'s layout spelled out (for its tests).
#[cfg(test)]
fn key_tag_bytes(key: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    let n = key.len().min(INLINE_KEY);
    b[0] = if key.len() <= INLINE_KEY {
        key.len() as u8
    } else {
        INLINE_KEY as u8 + 1
    };
    b[1..1 + n].copy_from_slice(&key[..n]);
    u128::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_tag_matches_its_byte_layout_for_every_length() {
        let bytes: Vec<u8> = (0..40u32).map(|i| (i * 37 + 11) as u8 | 1).collect();
        for n in 0..=bytes.len() {
            assert_eq!(
                key_tag(&bytes[..n]),
                key_tag_bytes(&bytes[..n]),
                "length {n}"
            );
            // A zero byte and a 0xff byte at each position: no shift loses or smears one.
            for i in 0..n {
                for v in [0u8, 0xff] {
                    let mut k = bytes[..n].to_vec();
                    k[i] = v;
                    assert_eq!(key_tag(&k), key_tag_bytes(&k), "length {n}, byte {i} = {v}");
                }
            }
        }
    }
}
