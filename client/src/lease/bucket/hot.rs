//! [`KeyHot`]: the 32 bytes of a key that a steady-state decision reads
//! and writes, inline in the map's hash table.

use std::sync::atomic::{AtomicU64, Ordering::*};

use super::float::SMALL_FLOAT_MAX;
use super::word::{View, HIT, TOKEN_BITS, TOKEN_MASK};

/// The request path's part of a key: 32 bytes, 32-aligned (one cache line
/// never holds part of two records), in the map's per-shard array.
#[derive(Debug)]
#[repr(C, align(32))]
pub(crate) struct KeyHot {
    /// [`key_tag`](super::key_tag) of the key; written only under the shard's write lock.
    pub(crate) tag: u128,
    /// Leased tokens not yet spent (low 42 bits) and decisions made
    /// (wrapping, high 22 bits): a decision that takes a token updates both
    /// with one CAS.
    pub(super) word: AtomicU64,
    /// The renewal watermark, the ledger's balance at the last lease and the
    /// index of the key's cold part, in one word ([`View`]). Written only by
    /// the key's one lease call (and at insertion, under the write lock).
    pub(super) view: AtomicU64,
}

impl KeyHot {
    /// A key holding nothing whose cold part is at `index` of its shard.
    pub(crate) fn new(tag: u128, index: u32) -> KeyHot {
        KeyHot {
            tag,
            word: AtomicU64::new(0),
            // No lease yet: the ledger's bucket counts as empty.
            view: AtomicU64::new(View::new(1, SMALL_FLOAT_MAX, index).0),
        }
    }

    /// Where the key's cold part is in its shard.
    #[inline]
    pub(crate) fn cold_index(&self) -> u32 {
        View(self.view.load(Relaxed)).index()
    }

    /// Counts a decision that took no token.
    pub(crate) fn hit(&self) {
        self.word.fetch_add(HIT, Relaxed);
    }

    /// Takes one local token, adding `hit` (0 or [`HIT`]) to the decision
    /// count in the same CAS; `Some(tokens left)` on success.
    #[inline]
    pub(crate) fn take(&self, hit: u64) -> Option<u64> {
        let mut cur = self.word.load(Relaxed);
        loop {
            let tokens = cur & TOKEN_MASK;
            if tokens == 0 {
                return None;
            }
            match self
                .word
                .compare_exchange_weak(cur, cur.wrapping_add(hit) - 1, AcqRel, Relaxed)
            {
                Ok(_) => return Some(tokens - 1),
                Err(now) => cur = now,
            }
        }
    }

    /// Takes `n` local tokens at once (at least 1), adding `n` to the
    /// decision count in the same CAS, when the key holds at least `n`;
    /// `Some(tokens left)` on success, `None` (nothing taken) otherwise.
    pub(crate) fn take_n(&self, n: u64) -> Option<u64> {
        let mut cur = self.word.load(Relaxed);
        loop {
            let tokens = cur & TOKEN_MASK;
            if n == 0 || tokens < n {
                return None;
            }
            // The count's high bits wrap as the single-token path's do.
            let next = cur.wrapping_add(n.wrapping_mul(HIT)) - n;
            match self.word.compare_exchange_weak(cur, next, AcqRel, Relaxed) {
                Ok(_) => return Some(tokens - n),
                Err(now) => cur = now,
            }
        }
    }

    /// Puts `n` tokens back (tokens a decision took and its caller undid),
    /// saturating at the 42-bit local count; the decision count is unchanged.
    pub(crate) fn put_back(&self, n: u64) {
        let mut cur = self.word.load(Relaxed);
        loop {
            let tokens = (cur & TOKEN_MASK).saturating_add(n).min(TOKEN_MASK);
            let next = (cur & !TOKEN_MASK) | tokens;
            match self.word.compare_exchange_weak(cur, next, AcqRel, Relaxed) {
                Ok(_) => return,
                Err(now) => cur = now,
            }
        }
    }

    pub(crate) fn tokens(&self) -> u64 {
        self.word.load(Relaxed) & TOKEN_MASK
    }

    /// Decisions made, modulo 2^22.
    pub(crate) fn hits(&self) -> u64 {
        self.word.load(Relaxed) >> TOKEN_BITS
    }

    /// Removes every local token (for TOKENRETURN); returns how many.
    pub(crate) fn drain(&self) -> u64 {
        let prev = self.word.fetch_and(!TOKEN_MASK, AcqRel);
        prev & TOKEN_MASK
    }

    /// `tokens_left <= low_watermark x last grant` (at least the last token).
    #[inline]
    pub(crate) fn below_watermark(&self, tokens_left: u64) -> bool {
        tokens_left <= View(self.view.load(Relaxed)).watermark()
    }

    /// Tokens the ledger's bucket lacked at the last lease (its burst minus
    /// its balance, rounded up to 15 significant bits; the largest
    /// [`SMALL_FLOAT`](super::float::SMALL_FLOAT) before any lease).
    #[inline]
    pub(crate) fn ledger_deficit(&self) -> u64 {
        View(self.view.load(Relaxed)).deficit()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tag::{key_tag, INLINE_KEY};
    use super::super::{parts, Bucket, LeaseResult};
    use super::*;

    #[test]
    fn the_hot_record_is_32_bytes_and_tags_are_exact_for_short_keys() {
        assert_eq!(std::mem::size_of::<KeyHot>(), 32);
        assert_eq!(std::mem::align_of::<KeyHot>(), 32);
        assert_ne!(key_tag(b""), key_tag(b"\0"));
        assert_ne!(key_tag(b"a"), key_tag(b"a\0"));
        assert_eq!(key_tag(b"user:000001"), key_tag(b"user:000001"));
        let long = [b'x'; INLINE_KEY + 1];
        assert_ne!(key_tag(&long[..INLINE_KEY]), key_tag(&long));
        // Longer keys share a tag when their first bytes do: the map then
        // compares the full key.
        assert_eq!(key_tag(&[b'x'; 20]), key_tag(&[b'x'; 30]));
    }

    #[test]
    fn take_never_goes_below_zero_and_watermark_is_a_fraction_of_the_last_lease() {
        let (hot, cold) = parts(b"k");
        let b = Bucket::new(&hot, &cold);
        assert_eq!(hot.take(HIT), None);
        b.finish_lease(LeaseResult::Granted, 10, Some((7, 0)));
        assert_eq!(hot.take(HIT), Some(9));
        assert!(!hot.below_watermark(3));
        assert!(hot.below_watermark(2));
        assert_eq!(hot.ledger_deficit(), 7);
        assert_eq!(hot.drain(), 9);
        assert_eq!(hot.take(HIT), None);
        assert_eq!(hot.hits(), 1, "a failed take counts nothing");
    }

    #[test]
    fn put_back_restores_tokens_and_keeps_the_decision_count() {
        let (hot, cold) = parts(b"k");
        let b = Bucket::new(&hot, &cold);
        b.finish_lease(LeaseResult::Granted, 3, Some((0, 0)));
        assert_eq!(hot.take(HIT), Some(2));
        assert_eq!(hot.take(HIT), Some(1));
        hot.put_back(2);
        assert_eq!((hot.tokens(), hot.hits()), (3, 2));
        assert_eq!(hot.take_n(4), None, "3 held: nothing taken");
        assert_eq!(hot.take_n(3), Some(0));
        assert_eq!((hot.tokens(), hot.hits()), (0, 5));
        hot.put_back(3);
        hot.put_back(u64::MAX);
        assert_eq!(
            hot.tokens(),
            super::TOKEN_MASK,
            "saturates at the 42-bit count"
        );
        assert_eq!(hot.hits(), 5);
    }
}
