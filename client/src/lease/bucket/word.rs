//! The layout of the hot record's two atomic words: the token word (local
//! tokens and a wrapping decision count) and the view (the renewal
//! watermark, the ledger's deficit and the cold part's index).

use super::float::{decode, encode_up, SMALL_FLOAT};

/// The token word: tokens in the low [`TOKEN_BITS`] bits, a wrapping count
/// of decisions in the rest.
pub(super) const TOKEN_BITS: u32 = 42;
pub(super) const TOKEN_MASK: u64 = (1 << TOKEN_BITS) - 1;
/// One decision, added to the token word.
pub(crate) const HIT: u64 = 1 << TOKEN_BITS;
/// Decisions are counted modulo 2^22 (4 194 304): a rate sample (every
/// sweep, 100 ms by default) is right up to ~42 million decisions a second
/// for one key in one gateway.
pub(crate) const HITS_MASK: u64 = (1 << (64 - TOKEN_BITS)) - 1;
/// The largest lease asked for (2^40 tokens), so a key's tokens (at most its
/// watermark plus one grant) always fit their 42 bits.
pub(crate) const MAX_LEASE: u64 = 1 << 40;

/// [`KeyHot::view`](super::KeyHot::view), from the top: the low watermark and the ledger's
/// deficit at the last lease (tokens missing from a full bucket), both
/// [`SMALL_FLOAT`]s rounded up (a renewal starts at most 1/32 768 of the
/// watermark early; `remaining` is low by at most 1/32 768 of the deficit,
/// and exact near full, where a header's `r` and `t` are read most), and
/// the cold part's index in its shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct View(pub(super) u64);

/// Bits of the cold part's index: 16 777 216 keys per shard.
const INDEX_BITS: u32 = 64 - 2 * SMALL_FLOAT;
pub(crate) const MAX_INDEX: u32 = (1 << INDEX_BITS) - 1;

impl View {
    pub(super) fn new(watermark: u64, deficit: u64, index: u32) -> View {
        debug_assert!(index <= MAX_INDEX);
        let wm = encode_up(watermark);
        let deficit = encode_up(deficit);
        View((wm << (SMALL_FLOAT + INDEX_BITS)) | (deficit << INDEX_BITS) | u64::from(index))
    }

    pub(super) fn watermark(self) -> u64 {
        decode(self.0 >> (SMALL_FLOAT + INDEX_BITS))
    }

    pub(super) fn deficit(self) -> u64 {
        decode((self.0 >> INDEX_BITS) & ((1 << SMALL_FLOAT) - 1))
    }

    pub(super) fn index(self) -> u32 {
        (self.0 & u64::from(MAX_INDEX)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::super::float::SMALL_FLOAT_MAX;
    use super::*;

    #[test]
    fn the_view_keeps_small_counts_exact_rounds_big_ones_up_and_keeps_the_index() {
        let big = [
            1 << 15,
            (1 << 15) + 1,
            1 << 20,
            123_456_789,
            MAX_LEASE,
            2 * MAX_LEASE + 1,
        ];
        for v in [0, 1, 2, 100, 32_767].into_iter().chain(big) {
            let view = View::new(v.max(1), v, MAX_INDEX - 1);
            let (wm, deficit) = (view.watermark(), view.deficit());
            assert_eq!(view.index(), MAX_INDEX - 1);
            if v < 1 << 15 {
                assert_eq!((wm, deficit), (v.max(1), v));
            } else {
                // Both round up: renew early, report a little less remaining.
                assert!(wm >= v && wm - v <= v >> 14, "{v} -> {wm}");
                assert!(deficit >= v && deficit - v <= v >> 14, "{v} -> {deficit}");
            }
        }
        let huge = View::new(1, u64::MAX, 0);
        assert_eq!(huge.deficit(), SMALL_FLOAT_MAX);
        assert_eq!((huge.watermark(), huge.index()), (1, 0));
        assert_eq!(
            View::new(SMALL_FLOAT_MAX, 0, 7).watermark(),
            SMALL_FLOAT_MAX
        );
    }
}
