//! A reader-writer lock whose readers write no shared memory: the key map's
//! shards, read by every decision and written only when a key arrives or is
//! evicted.
//!
//! A `parking_lot::RwLock` read costs two atomic read-modify-writes on the
//! shard's lock word, which every core deciding on that shard's keys pulls
//! into its own cache. Here a reader announces itself in its thread's own
//! slot (one `swap`, a full barrier, on a line no other core writes), checks
//! that no writer is at work, and clears the slot when done (a plain
//! store). A writer raises the shard's `writing` flag and waits until no
//! thread's slot names the shard: the two sides' barriers make sure that
//! either the writer sees the reader's slot or the reader sees the flag (the
//! store-buffering pattern; the "distributed reader-writer lock" of Hsieh
//! and Weihl, 1992, and BRAVO, Dice and Kogan, 2019, have readers do the
//! same). A reader that finds the flag raised takes the inner
//! `parking_lot::RwLock` for reading instead, which the writer holds for
//! writing until it is done.
//!
//! Readers wait only for a writer already at work on the same shard; the
//! writer waits for the readers already inside that shard (a decision: well
//! under a microsecond, unless its thread is descheduled; it spins briefly,
//! yields, then sleeps 50 us at a time). Slots are per thread, kept in one
//! process-wide registry, and reused once their thread exits; a write reads
//! every slot (one per thread alive at the peak), from a copy of the
//! registry, so a waiting writer holds up no other shard and no new thread.
//!
//! A read may not nest another read or a write of any shard on the same
//! thread (a thread has one slot; a write would wait for itself). The map
//! never does; debug builds check it.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// One thread's announcement: the address of the shard it is reading, or 0.
/// Alone in its cache lines, so announcing writes no line another thread
/// writes.
#[repr(align(128))]
struct ReaderSlot {
    reading: AtomicUsize,
    /// Held by a live thread (a free slot is reused by the next new thread).
    taken: AtomicBool,
}

/// Every slot ever handed out; slots are leaked, at most one per thread
/// alive at once.
static SLOTS: Mutex<Vec<&'static ReaderSlot>> = Mutex::new(Vec::new());

/// This thread's slot, released when the thread exits.
struct SlotHandle(&'static ReaderSlot);

impl SlotHandle {
    fn acquire() -> SlotHandle {
        let mut slots = SLOTS.lock();
        let free = slots.iter().find(|s| {
            s.taken
                .compare_exchange(false, true, Acquire, Relaxed)
                .is_ok()
        });
        let slot = match free {
            Some(s) => *s,
            None => {
                let s: &'static ReaderSlot = Box::leak(Box::new(ReaderSlot {
                    reading: AtomicUsize::new(0),
                    taken: AtomicBool::new(true),
                }));
                slots.push(s);
                s
            }
        };
        SlotHandle(slot)
    }
}

impl Drop for SlotHandle {
    fn drop(&mut self) {
        self.0.reading.store(0, SeqCst);
        self.0.taken.store(false, Release);
    }
}

thread_local! {
    static SLOT: SlotHandle = SlotHandle::acquire();
}

/// A value shared by many readers and rare writers (see the module docs).
pub(crate) struct ShardLock<T> {
    /// Raised by a writer before it waits for the readers inside.
    writing: AtomicBool,
    /// Held for writing by a writer; taken for reading by readers that found
    /// `writing` raised.
    lock: RwLock<()>,
    value: UnsafeCell<T>,
}

// Safety: `value` is only reached through the guards, which give shared
// access to readers and exclusive access to one writer (see `read`, `write`).
unsafe impl<T: Send> Send for ShardLock<T> {}
unsafe impl<T: Send + Sync> Sync for ShardLock<T> {}

impl<T: Default> Default for ShardLock<T> {
    fn default() -> Self {
        ShardLock::new(T::default())
    }
}

impl<T> ShardLock<T> {
    pub(crate) fn new(value: T) -> ShardLock<T> {
        ShardLock {
            writing: AtomicBool::new(false),
            lock: RwLock::new(()),
            value: UnsafeCell::new(value),
        }
    }

    fn id(&self) -> usize {
        self as *const Self as usize
    }

    /// Shared access. A thread holds at most one guard of any `ShardLock`.
    #[inline]
    pub(crate) fn read(&self) -> ReadGuard<'_, T> {
        // `try_with`: during thread exit the slot may be gone; take the lock.
        let slot = SLOT.try_with(|s| s.0).ok();
        if let Some(slot) = slot {
            // A full barrier: the announcement is visible before `writing`
            // is read (the writer's side is `write`).
            let before = slot.reading.swap(self.id(), SeqCst);
            debug_assert_eq!(before, 0, "a nested ShardLock read");
            if !self.writing.load(SeqCst) {
                return ReadGuard {
                    lock: self,
                    slot: Some(slot),
                    _inner: None,
                    _not_send: PhantomData,
                };
            }
            slot.reading.store(0, Release);
        }
        ReadGuard {
            lock: self,
            slot: None,
            _inner: Some(self.lock.read()),
            _not_send: PhantomData,
        }
    }

    /// Exclusive access: waits for the other writer, then for the readers
    /// inside.
    pub(crate) fn write(&self) -> WriteGuard<'_, T> {
        let inner = self.lock.write();
        // A full barrier: raised before the slots are read.
        self.writing.store(true, SeqCst);
        let id = self.id();
        // This thread's slot, looked up before `SLOTS` is locked (a first
        // lookup registers the thread, which locks `SLOTS`).
        let mine = SLOT.try_with(|s| s.0 as *const ReaderSlot).ok();
        // A copy, so the registry is not held while waiting: a thread that
        // registers after this sees `writing` raised (it was raised before
        // the registry was locked here) and takes the inner lock.
        let slots: Vec<&'static ReaderSlot> = SLOTS.lock().clone();
        for slot in slots {
            let mut spins = 0u32;
            while slot.reading.load(SeqCst) == id {
                debug_assert!(
                    mine != Some(slot as *const ReaderSlot),
                    "a ShardLock write inside a read of the same shard"
                );
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else if spins < 128 {
                    std::thread::yield_now();
                } else {
                    // The reader's thread is descheduled (or blocked inside
                    // its read): stop competing with it for a core.
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
            }
        }
        WriteGuard {
            lock: self,
            _inner: inner,
        }
    }
}

pub(crate) struct ReadGuard<'a, T> {
    lock: &'a ShardLock<T>,
    /// The thread's slot, announcing this read (the fast path)...
    slot: Option<&'static ReaderSlot>,
    /// ...or the inner lock, held for reading (a writer was at work).
    _inner: Option<RwLockReadGuard<'a, ()>>,
    /// The slot belongs to this thread.
    _not_send: PhantomData<*const ()>,
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // Safety: no writer is inside: it would have waited for our slot,
        // or it holds `lock` for writing, which our read guard excludes.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> Drop for ReadGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            // Everything read before is ordered before this store, which
            // the writer waits to see (Acquire by its SeqCst load).
            slot.reading.store(0, Release);
        }
    }
}

pub(crate) struct WriteGuard<'a, T> {
    lock: &'a ShardLock<T>,
    _inner: RwLockWriteGuard<'a, ()>,
}

impl<T> Deref for WriteGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // Safety: the only guard (see `write`).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // Safety: the only guard (see `write`).
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for WriteGuard<'_, T> {
    fn drop(&mut self) {
        // Before the inner lock is released (it is a later field).
        self.lock.writing.store(false, Release);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;

    /// Writers keep two counters equal except inside their critical
    /// section, where they also move a vector's buffer; readers on other
    /// threads must never see the counters differ nor the vector torn.
    #[test]
    fn readers_never_see_a_writer_half_way() {
        #[derive(Default)]
        struct Pair {
            a: u64,
            b: u64,
            v: Vec<u64>,
        }
        let lock = Arc::new(ShardLock::new(Pair::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicU64::new(0));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (lock, stop, reads) = (lock.clone(), stop.clone(), reads.clone());
                std::thread::spawn(move || {
                    while !stop.load(Relaxed) {
                        let g = lock.read();
                        assert_eq!(g.a, g.b);
                        assert_eq!(g.v.len() as u64, g.a);
                        assert!(g.v.iter().enumerate().all(|(i, &x)| x == i as u64));
                        drop(g);
                        reads.fetch_add(1, Relaxed);
                    }
                })
            })
            .collect();
        let start = Instant::now();
        let mut writes = 0u64;
        while (writes < 2000 || reads.load(Relaxed) < 20_000)
            && start.elapsed() < Duration::from_secs(5)
        {
            let mut g = lock.write();
            g.a += 1;
            let n = g.a;
            g.v.push(n - 1);
            g.v.shrink_to_fit(); // moves the buffer on most pushes
            std::hint::black_box(&g.v);
            g.b += 1;
            drop(g);
            writes += 1;
        }
        stop.store(true, Relaxed);
        for r in readers {
            r.join().expect("a reader saw a writer half way");
        }
        assert_eq!(lock.read().a, writes);
        assert!(writes >= 100, "{writes} writes in 5 s");
        assert!(reads.load(Relaxed) >= 1000, "{} reads", reads.load(Relaxed));
    }

    #[test]
    fn slots_of_exited_threads_are_reused() {
        let lock = Arc::new(ShardLock::new(0u32));
        for _ in 0..50 {
            let l = lock.clone();
            std::thread::spawn(move || *l.read()).join().unwrap();
        }
        // Test threads run in parallel; allow a few live ones.
        assert!(SLOTS.lock().len() < 40, "{}", SLOTS.lock().len());
        *lock.write() += 1;
        assert_eq!(*lock.read(), 1);
    }
}
