//! A full sync's image of the shard: the records that recreate every key as
//! of the cut, produced slot by slot while the shard keeps serving.
//!
//! [`Store::start_image`] is the cut (one per replica syncing; several may
//! run at once). From then on the shard serialises
//! whole slots in the background ([`Store::image_step`], a time slice
//! between turns of its loop), and every write first serialises the slot
//! it is about to change if that slot is not serialised yet
//! (serialise-before-write, hooked into `locate`, the clearing of slots
//! and the sweep), so each slot's image is the slot as of the cut. A slot
//! is the unit, so a write pays at most one slot's serialisation (about 61
//! keys per slot at 1M keys). Outside a sync the hook is one test of an
//! empty list.
//!
//! Keys already past their deadline are left out: they are absent to
//! readers, and their `DEL`, when the primary reclaims them, follows in the
//! stream. Each record is the effect that recreates the entry (`SET ...
//! [PXAT ms]` or `LH.RESTORE ... PXAT ms`), encoded by `effects.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::{Entry, Store, MONOTONIC};

/// Unsent image bytes past which the background serialiser pauses until
/// the sender drains them (writes still serialise their slot at once).
pub const IMAGE_QUEUE_LIMIT: usize = 4 * 1024 * 1024;

/// One piece of a shard's image, sent to the full sync's sender.
#[derive(Debug)]
pub enum ImagePart {
    /// Whole records of one slot, and how many.
    Chunk(Bytes, u64),
    /// The shard's image is complete.
    Done,
}

/// Where a shard sends its image: the channel and the count of bytes sent
/// and not yet taken by the sender (shared with it).
#[derive(Debug, Clone)]
pub struct ImageSink {
    /// The sender's channel.
    pub tx: crossbeam_channel::Sender<ImagePart>,
    /// Bytes queued in the channel; the sender subtracts what it takes.
    pub queued: Arc<AtomicUsize>,
}

/// An image in progress.
pub(super) struct Image {
    /// Tells images apart while the list shifts.
    id: u64,
    sink: ImageSink,
    /// Per slot table: serialised already.
    done: Vec<bool>,
    /// The next table the background serialiser looks at.
    next: usize,
    /// Tables not serialised yet.
    left: usize,
}

/// What [`Store::image_step`] left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageStep {
    /// No image is in progress.
    Idle,
    /// More slots to serialise: call again soon.
    More,
    /// The sender has not taken enough of what was sent: call again later.
    Paused,
}

impl Store {
    /// Cuts: an image of the store as it is now starts. Several may run at
    /// once (one per replica syncing); each is sent to its own sink.
    pub fn start_image(&mut self, sink: ImageSink) {
        let n = self.tables.len();
        self.image_ids += 1;
        let (pins, records) = self.pin_records();
        if records > 0 {
            sink.queued.fetch_add(pins.len(), Ordering::Relaxed);
            let _ = sink.tx.send(ImagePart::Chunk(pins.freeze(), records));
        }
        self.images.push(Image {
            id: self.image_ids,
            sink,
            done: vec![false; n],
            next: 0,
            left: n,
        });
        if n == 0 {
            self.finish_image(self.images.len() - 1);
        }
    }

    /// Serialises slots for about `budget`, for the first image whose
    /// sender is not behind.
    pub fn image_step(&mut self, budget: Duration) -> ImageStep {
        if self.images.is_empty() {
            return ImageStep::Idle;
        }
        let ready = |img: &Image| img.sink.queued.load(Ordering::Relaxed) <= IMAGE_QUEUE_LIMIT;
        let Some(k) = self.images.iter().position(ready) else {
            return ImageStep::Paused;
        };
        let id = self.images[k].id;
        let start = Instant::now();
        while self.images.get(k).is_some_and(|img| img.id == id) {
            let img = &mut self.images[k];
            let i = img.next;
            img.next += 1;
            if i < img.done.len() {
                self.image_slot(k, i);
            }
            if start.elapsed() >= budget {
                break;
            }
        }
        match self.images.is_empty() {
            true => ImageStep::Idle,
            false => ImageStep::More,
        }
    }

    /// Serialise-before-write: table `i` is about to change.
    pub(super) fn before_write(&mut self, i: usize) {
        // From the last image down, so a finished image leaving the list
        // does not move the ones still to look at.
        for k in (0..self.images.len()).rev() {
            if !self.images[k].done[i] {
                self.image_slot(k, i);
            }
        }
    }

    /// Sends table `i`'s image to image `k`, unless sent already.
    fn image_slot(&mut self, k: usize, i: usize) {
        let img = &mut self.images[k];
        if std::mem::replace(&mut img.done[i], true) {
            return;
        }
        img.left -= 1;
        let now = self.clock;
        let table = &self.tables[i];
        let mut out = BytesMut::new();
        let mut records = 0u64;
        let mut put = |e: &Entry| {
            if !e.expired(now.unix_ms, now) {
                // A collection takes several records (its rebuild's chunks,
                // then PEXPIREAT): the count is of records, not of keys.
                Store::value_effect(e.key(), &e.value, e.expire_at(now), now, |eff| {
                    eff.encode(&mut out);
                    records += 1;
                });
            }
        };
        for e in table.iter() {
            put(e);
        }
        for c in table.compact.iter() {
            put(&Entry::new(
                c.key(),
                MONOTONIC | c.deadline_mono(),
                c.value(),
            ));
        }
        if records > 0 {
            img.sink.queued.fetch_add(out.len(), Ordering::Relaxed);
            if img
                .sink
                .tx
                .send(ImagePart::Chunk(out.freeze(), records))
                .is_err()
            {
                // The sender is gone (its replica dropped): stop this image.
                self.images.remove(k);
                return;
            }
        }
        if img.left == 0 {
            self.finish_image(k);
        }
    }

    fn finish_image(&mut self, k: usize) {
        let img = self.images.remove(k);
        let _ = img.sink.tx.send(ImagePart::Done);
    }
}

impl Store {
    /// The records that recreate `key` exactly as it is now (the same
    /// records a full sync's image holds for it: `SET ... [PXAT ms]`,
    /// `LH.RESTORE ... PXAT ms` with Unix-ms instants, a collection's
    /// rebuild then `PEXPIREAT`), each encoded as a RESP request and passed
    /// to `f` with its bytes; `false` when the key is absent (or past its
    /// deadline). MIGRATE sends them to its target.
    pub fn key_records(&mut self, key: &[u8], now_ms: u64, mut f: impl FnMut(&[u8])) -> bool {
        let now = self.clock;
        let Some(e) = self.get(key, now_ms) else {
            return false;
        };
        let mut out = BytesMut::new();
        Store::value_effect(e.key(), &e.value, e.expire_at(now), now, |eff| {
            out.clear();
            eff.encode(&mut out);
            f(&out);
        });
        true
    }
}
