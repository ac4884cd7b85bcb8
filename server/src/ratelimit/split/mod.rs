//! A rate-limit key split over shards, exactly (`docs/hotkeys.md` has the
//! design and the proofs): the owner keeps the *home* part in its store
//! entry; every shard has one *slot* of whole units (tokens, cells or
//! admissions) leased to it, valid until the epoch's end, the last instant
//! at which spending them cannot do what the unsplit key would not. A shard
//! takes from its slot with one compare-and-swap; everything else is decided
//! by the owner on the exact state after a gather, which swaps every slot to
//! zero, so each unit is either spent before the swap or counted by it; a
//! new lease starts the next epoch.
//!
//! # Layout
//! - this file: the kind of a split key ([`KeyPolicy`]) and the lease core
//!   every kind shares ([`Slots`]: the slots, the epoch's end, the merged
//!   flag), inside [`Split`];
//! - [`bucket`]: a token bucket's math on it (TOKENLEASE, TOKENRETURN; a
//!   GCRA key, CL.THROTTLE and GCRA, as its equivalent bucket,
//!   [`super::gcra::bucket_policy`]);
//! - [`window`]: a sliding window's math on it (SLIDINGWINDOW).
//!
//! No lock: a slot is written by its shard (grants) and by the owner (the
//! swap, the new lease), each on its own cache line. The home mirror a kind
//! keeps only feeds the reply of a local grant. Instants are monotonic ms.

pub mod bucket;
pub mod window;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::gcra;
use super::sliding_window;
use super::token_bucket::Policy;

/// What a split key is, with the policy of the calls its slots serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPolicy {
    /// A token bucket (TOKENLEASE, TOKENRETURN).
    Bucket(Policy),
    /// A GCRA state (CL.THROTTLE, GCRA), run as its equivalent bucket.
    Gcra(gcra::Policy),
    /// A sliding window (SLIDINGWINDOW).
    Window(sliding_window::Policy),
}

impl KeyPolicy {
    /// The bucket the split runs: the key's own, or the GCRA policy's
    /// equivalent; `None` for a sliding window, and when a GCRA policy has
    /// none (too large to split).
    pub fn bucket(&self) -> Option<Policy> {
        match self {
            KeyPolicy::Bucket(p) => Some(*p),
            KeyPolicy::Gcra(g) => gcra::bucket_policy(g),
            KeyPolicy::Window(_) => None,
        }
    }
}

/// Low bits of a slot: its whole units.
const UNIT_BITS: u32 = 32;
const UNIT_MASK: u64 = (1 << UNIT_BITS) - 1;
/// Most epoch length a slot's packed end can carry past the split's base:
/// `2^32 - 1` ms (49 days); later ends are cut there (an earlier end is
/// always safe: it only means an earlier gather).
const MAX_REL: u64 = u32::MAX as u64;

/// One shard's lease, alone on its cache lines (a grant on one shard does
/// not bounce another's line).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Slot {
    /// `units | (epoch end - base) << 32`.
    packed: AtomicU64,
    /// Local grants served from it, ever (written by its shard only).
    grants: AtomicU64,
}

/// The lease core every kind shares: one slot per shard, the epoch's end,
/// and whether the key was merged.
#[derive(Debug)]
pub struct Slots {
    /// Monotonic ms the split began at: slots pack their end relative to it.
    base: u64,
    cells: Box<[Slot]>,
    /// The epoch's end, monotonic ms (owner only).
    end: AtomicU64,
    /// Set once merged: no slot is leased again.
    dead: AtomicBool,
}

impl Slots {
    fn new(shards: usize, base: u64) -> Slots {
        Slots {
            base,
            cells: (0..shards).map(|_| Slot::default()).collect(),
            end: AtomicU64::new(base),
            dead: AtomicBool::new(false),
        }
    }

    /// The number of slots (shards).
    fn len(&self) -> u128 {
        self.cells.len() as u128
    }

    /// Takes `n` units from shard `shard`'s slot at monotonic `now`: false
    /// when the key is merged, the epoch is over or the slot holds fewer.
    /// Counts the grant.
    fn take(&self, shard: usize, n: u64, now: u64) -> bool {
        if self.dead.load(Ordering::Acquire) {
            return false;
        }
        let Some(slot) = self.cells.get(shard) else {
            return false;
        };
        let rel = now.saturating_sub(self.base);
        let mut v = slot.packed.load(Ordering::Acquire);
        loop {
            let (units, end) = (v & UNIT_MASK, v >> UNIT_BITS);
            if rel > end || units < n {
                return false;
            }
            match slot
                .packed
                .compare_exchange_weak(v, v - n, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(seen) => v = seen,
            }
        }
        // Only this shard writes its grant count.
        let g = &slot.grants;
        g.store(g.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        true
    }

    /// Units every slot holds now.
    fn sum(&self) -> u64 {
        self.cells
            .iter()
            .map(|s| s.packed.load(Ordering::Acquire) & UNIT_MASK)
            .sum()
    }

    /// Takes every slot's units back (owner only): the gather's swap.
    fn swap_all(&self) -> u64 {
        self.cells
            .iter()
            .map(|s| s.packed.swap(0, Ordering::AcqRel) & UNIT_MASK)
            .sum()
    }

    /// The units each slot gets when `whole` are there to lease for an
    /// epoch ending at monotonic `end`: `floor(whole / N)`, or 0 when the
    /// key is merged or the epoch ended before the split's base; and the
    /// end as the slots can carry it (cut at [`MAX_REL`] past the base).
    fn share(&self, whole: u128, end: u64) -> (u64, u64) {
        let end = end.min(self.base.saturating_add(MAX_REL));
        let per = match self.dead.load(Ordering::Acquire) || end < self.base {
            true => 0,
            false => (whole / self.len()).min(UNIT_MASK as u128) as u64,
        };
        (per, end)
    }

    /// Starts an epoch (owner only, once the kind's home mirror is stored):
    /// `per` units in every slot until monotonic `end` (from [`Slots::share`]).
    fn fill(&self, per: u64, end: u64) {
        self.end.store(end, Ordering::Release);
        let packed = per | end.saturating_sub(self.base) << UNIT_BITS;
        for s in self.cells.iter() {
            s.packed.store(packed, Ordering::Release);
        }
    }
}

/// The home part a kind's local grant reads its reply from.
#[derive(Debug)]
enum Home {
    Bucket(bucket::Home),
    Window(window::Home),
}

/// The shared state of one split key.
#[derive(Debug)]
pub struct Split {
    /// The key's kind and policy; a call of another merges it.
    pub kind: KeyPolicy,
    /// The owning shard.
    pub owner: usize,
    slots: Slots,
    home: Home,
}

impl Split {
    /// A split of a key owned by shard `owner` over `shards` shards, of
    /// kind and policy `kind`, from monotonic `now` (no later than the
    /// instant of the state it first leases out); `None` when `kind` has no
    /// split form (a GCRA policy with no bucket). Its slots are empty until
    /// the first lease.
    pub fn new(kind: KeyPolicy, owner: usize, shards: usize, now: u64) -> Option<Split> {
        let home = match kind {
            KeyPolicy::Window(p) => Home::Window(window::Home::new(p)),
            _ => Home::Bucket(bucket::Home::new(kind.bucket()?, now)),
        };
        Some(Split {
            kind,
            owner,
            slots: Slots::new(shards, now),
            home,
        })
    }

    /// Whether the key was merged back.
    pub fn is_dead(&self) -> bool {
        self.slots.dead.load(Ordering::Acquire)
    }

    /// Marks the split merged (owner only): no slot is leased again, and a
    /// shard holding the split in its table drops it.
    pub fn kill(&self) {
        self.slots.dead.store(true, Ordering::Release);
    }

    /// Local grants served from every slot, ever.
    pub fn local_grants(&self) -> u64 {
        self.slots
            .cells
            .iter()
            .map(|s| s.grants.load(Ordering::Relaxed))
            .sum()
    }

    /// Whole units leased to each shard now.
    pub fn slot_tokens(&self) -> Vec<u64> {
        self.slots
            .cells
            .iter()
            .map(|s| s.packed.load(Ordering::Acquire) & UNIT_MASK)
            .collect()
    }

    /// The epoch's end, monotonic ms.
    pub fn epoch_end(&self) -> u64 {
        self.slots.end.load(Ordering::Acquire)
    }
}
