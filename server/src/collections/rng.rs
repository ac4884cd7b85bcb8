//! A small pseudo-random generator (SplitMix64) for the commands that pick
//! elements at random (HRANDFIELD): fast and evenly spread, not for secrets.
//! Each shard's thread seeds its own from the operating system's randomness
//! (through `std`'s hash seeds), so no two runs pick alike.

/// SplitMix64: a 64-bit state stepped by a fixed odd constant and mixed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator starting from `seed`.
    pub const fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator seeded from the process's random hash keys and the clock.
    pub fn from_entropy() -> Rng {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        Rng(h.finish())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` above 0), without the bias of a remainder
    /// (Lemire's multiply-and-shift).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_stays_in_range_and_reaches_every_value() {
        let mut r = Rng::new(7);
        let mut seen = [0u32; 5];
        for _ in 0..5000 {
            seen[r.below(5)] += 1;
        }
        assert!(seen.iter().all(|&c| c > 800), "{seen:?}");
        assert_eq!(Rng::new(1).next_u64(), Rng::new(1).next_u64());
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }
}
