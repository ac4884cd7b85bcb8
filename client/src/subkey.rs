//! Sub-keys: one key's limit spread over N ledger keys in different hash
//! slots (`sub_keys: N` on a policy), so that over a ledger cluster one hot
//! key's ledger calls go to every group instead of one node.
//!
//! Sub-key `i` of `N` holds [`share`]`(limit, N, i)` of the policy's burst
//! and of its rate: the shares add up exactly to the policy's limit, so the
//! N sub-keys together never admit more than the one key would. A request
//! decides against the sub-key of its caller ([`caller_index`]: a stable
//! hash of the caller, mod N), and the ledger key of sub-key `i`
//! ([`ledger_key`]) starts with a hash tag whose slot lies in the `i`-th of
//! N equal parts of the 16 384 slots ([`part`]), so with the slots split
//! into equal ranges between groups the sub-keys land on every group.
//!
//! The price is accuracy: a sub-key that runs dry denies while others
//! still hold tokens (docs/client.md, "Sub-keys", has the measured table).

use crate::slot::{crc16, SLOTS};

/// The most sub-keys a policy may have (`sub_keys` in YAML): each is a
/// bucket of its own in every gateway and on the ledger, and finding a
/// sub-key's hash tag tries about N tags.
pub const MAX_SUB_KEYS: u32 = 256;

/// Sub-key `i`'s share of `total` tokens (a burst or a rate) spread over
/// `n` sub-keys: `floor(total / n)`, plus one for `i < total mod n`. The
/// `n` shares add up to `total` exactly.
///
/// # Panics
/// If `n` is 0 or `i >= n`.
pub fn share(total: u64, n: u32, i: u32) -> u64 {
    assert!(i < n, "sub-key {i} of {n}");
    let n = u64::from(n);
    total / n + u64::from(u64::from(i) < total % n)
}

/// The `i`-th of `n` equal parts of the hash slots, as a half-open range
/// `lo..hi`: part `i` starts at `i * 16384 / n` rounded to the nearest
/// slot, the split of the slots between `n` primaries that
/// `redis-cli --cluster create` makes (for 3: 0-5460, 5461-10922,
/// 10923-16383).
///
/// # Panics
/// If `n` is 0 or `i >= n`.
pub fn part(n: u32, i: u32) -> std::ops::Range<u16> {
    assert!(i < n, "sub-key {i} of {n}");
    let start = |i: u32| ((2 * i as usize * SLOTS + n as usize) / (2 * n as usize)) as u16;
    start(i)..if i + 1 == n {
        SLOTS as u16
    } else {
        start(i + 1)
    }
}

/// A hash of `caller` (FNV-1a, 64 bits, then a finalising mix), for
/// [`caller_index`].
fn caller_hash(caller: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in caller {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // murmur3's fmix64: every input bit reaches the low bits `% n` reads.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The sub-key (0 to `n - 1`) that `caller` (a client address, a user id:
/// any identity other than the limited key) decides against: the same in
/// every process, for every key.
///
/// # Panics
/// If `n` is 0.
pub fn caller_index(caller: &[u8], n: u32) -> u32 {
    (caller_hash(caller) % u64::from(n)) as u32
}

/// Tags are 5 hex digits: 20 bits. (Of the 4-digit ones, whose CRC16s
/// are not spread evenly enough, 3232 slots have none.)
const TAG_BITS: u32 = 20;

/// The 5 lowercase hex digits of the low 20 bits of `t`.
fn hex5(t: u32) -> [u8; 5] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    [16, 12, 8, 4, 0].map(|s| HEX[((t >> s) & 0xf) as usize])
}

/// The hash tag (5 hex digits) of sub-key `i` of `n` for the ledger key
/// `base`: the first tag, counting up from a hash of `base`, whose slot is
/// in [`part`]`(n, i)`. Deterministic, so every gateway finds the same one;
/// different keys start elsewhere, so their sub-keys take different slots
/// of each part. Every slot is some 5-hex-digit tag's (a unit test checks
/// all 2^20), so the search always ends; it tries about `n` tags.
pub fn tag(base: &[u8], n: u32, i: u32) -> [u8; 5] {
    let want = part(n, i);
    let mask = (1 << TAG_BITS) - 1;
    let start = u32::from(crc16(base)) << (TAG_BITS - 16);
    (0..=mask)
        .map(|c| hex5(start.wrapping_add(c) & mask))
        .find(|t| want.contains(&(crc16(t) & (SLOTS as u16 - 1))))
        .expect("every slot has a 5-hex-digit tag")
}

/// The ledger key of sub-key `i` of `n` for `key` under the prefix
/// `sub_prefix` (`<domain>:<policy name>#<i>/<n>:`, [`sub_prefix`]):
/// `{<tag>}<sub_prefix><key>`, the tag 5 hex digits. The tag comes first so that it is the key's
/// hash tag (only the first `{...}` counts) whatever braces the domain, the
/// policy name or the key hold.
pub fn ledger_key(sub_prefix: &[u8], key: &[u8], n: u32, i: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(7 + sub_prefix.len() + key.len());
    k.push(b'{');
    k.extend_from_slice(&[0; 5]);
    k.push(b'}');
    k.extend_from_slice(sub_prefix);
    k.extend_from_slice(key);
    let t = tag(&k[7..], n, i);
    k[1..6].copy_from_slice(&t);
    k
}

/// `<domain>:<policy name>#<i>/<n>:`, the part of sub-key `i`'s ledger
/// keys after the tag (the one key's prefix is `<domain>:<policy name>:`).
pub fn sub_prefix(domain: &str, name: &str, n: u32, i: u32) -> String {
    format!("{domain}:{name}#{i}/{n}:")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slot::key_slot;

    #[test]
    fn shares_add_up_to_the_total_and_differ_by_at_most_one() {
        assert_eq!(
            (0..3).map(|i| share(10, 3, i)).collect::<Vec<_>>(),
            [4, 3, 3]
        );
        assert_eq!(
            (0..4).map(|i| share(1000, 4, i)).collect::<Vec<_>>(),
            [250; 4]
        );
        assert_eq!(
            (0..16)
                .map(|i| share(1000, 16, i))
                .filter(|&s| s == 63)
                .count(),
            8
        );
        assert_eq!(share(7, 1, 0), 7);
        assert_eq!(share(5, 5, 4), 1);
        for total in [1, 2, 15, 16, 17, 999, 1000, 1001, u64::MAX] {
            for n in [1, 2, 3, 7, 16, 255, 256] {
                let shares: Vec<u64> = (0..n).map(|i| share(total, n, i)).collect();
                let sum: u128 = shares.iter().map(|&s| u128::from(s)).sum();
                assert_eq!(sum, u128::from(total), "{total} over {n}");
                let (lo, hi) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
                assert!(hi - lo <= 1, "{total} over {n}: {lo}..{hi}");
                // The larger shares come first.
                assert!(shares.windows(2).all(|w| w[0] >= w[1]));
            }
        }
    }

    #[test]
    #[should_panic(expected = "sub-key 3 of 3")]
    fn a_share_past_the_last_sub_key_panics() {
        share(10, 3, 3);
    }

    #[test]
    fn the_parts_tile_the_slots() {
        for n in [1, 2, 3, 7, 16, 100, MAX_SUB_KEYS] {
            let mut next = 0;
            for i in 0..n {
                let p = part(n, i);
                assert_eq!(p.start, next, "part {i} of {n}");
                assert!(p.end > p.start);
                next = p.end;
            }
            assert_eq!(usize::from(next), SLOTS);
        }
        assert_eq!(
            (part(3, 0), part(3, 1), part(3, 2)),
            (0..5461, 5461..10923, 10923..16384)
        );
    }

    #[test]
    fn every_slot_is_some_five_hex_digit_tag() {
        let mut seen = vec![false; SLOTS];
        for t in 0..1 << TAG_BITS {
            seen[usize::from(crc16(&hex5(t)) & (SLOTS as u16 - 1))] = true;
        }
        assert!(seen.iter().all(|&s| s), "so `tag`'s search always ends");
        assert_eq!(&hex5(0xa0f3), b"0a0f3");
        assert_eq!(&hex5(0x1234_5678), b"45678");
    }

    #[test]
    fn sub_keys_land_in_their_parts_whatever_braces_the_key_holds() {
        for key in [&b"acme"[..], b"{acme}", b"a{b}c", b"", b"{"] {
            for n in [2, 3, 16, MAX_SUB_KEYS] {
                let prefix = sub_prefix("{edge}", "tenant", n, 0);
                let slots: Vec<u16> = (0..n)
                    .map(|i| {
                        let k = ledger_key(prefix.as_bytes(), key, n, i);
                        let slot = key_slot(&k);
                        assert!(part(n, i).contains(&slot), "{k:?}: {slot}");
                        slot
                    })
                    .collect();
                let mut distinct = slots.clone();
                distinct.dedup();
                assert_eq!(distinct.len(), n as usize, "distinct slots");
            }
        }
        let k = ledger_key(b"edge:tenant#2/3:", b"acme", 3, 2);
        assert!(
            k.starts_with(b"{") && k.ends_with(b"}edge:tenant#2/3:acme"),
            "{k:?}"
        );
        // Another key takes another slot of the same part.
        let other = ledger_key(b"edge:tenant#2/3:", b"globex", 3, 2);
        assert_ne!(key_slot(&k), key_slot(&other));
    }

    #[test]
    fn callers_spread_evenly_and_stably() {
        let n = 16;
        let mut counts = [0u32; 16];
        for c in 0..16_000 {
            counts[caller_index(format!("10.0.{}.{}", c / 256, c % 256).as_bytes(), n) as usize] +=
                1;
        }
        assert!(
            counts.iter().all(|&c| (850..1150).contains(&c)),
            "{counts:?}"
        );
        assert_eq!(caller_index(b"10.1.2.3", n), caller_index(b"10.1.2.3", n));
        assert_eq!(caller_index(b"anyone", 1), 0);
    }
}
