//! A full sync's image of the shard: the records that recreate every key as
//! of the cut, produced slot by slot while the shard keeps serving.
//!
//! [`Store::start_image`] is the cut. From then on the shard serialises
//! whole slots in the background ([`Store::image_step`], a time slice
//! between turns of its loop), and every write first serialises the slot
//! it is about to change if that slot is not serialised yet
//! (serialise-before-write, hooked into `locate`, the clearing of slots
//! and the sweep), so each slot's image is the slot as of the cut. A slot
//! is the unit, so a write pays at most one slot's serialisation (about 61
//! keys per slot at 1M keys). Outside a sync the hook is one `Option` test.
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
    /// Cuts: the image of the store as it is now starts. Any image still in
    /// progress is abandoned (its sender sees its channel close).
    pub fn start_image(&mut self, sink: ImageSink) {
        let n = self.tables.len();
        self.image = Some(Image {
            sink,
            done: vec![false; n],
            next: 0,
            left: n,
        });
        if n == 0 {
            self.finish_image();
        }
    }

    /// Serialises slots for about `budget`, unless the sender is behind.
    pub fn image_step(&mut self, budget: Duration) -> ImageStep {
        let Some(img) = &self.image else {
            return ImageStep::Idle;
        };
        if img.sink.queued.load(Ordering::Relaxed) > IMAGE_QUEUE_LIMIT {
            return ImageStep::Paused;
        }
        let start = Instant::now();
        while let Some(img) = &mut self.image {
            let i = img.next;
            img.next += 1;
            if i < img.done.len() {
                self.image_slot(i);
            }
            if start.elapsed() >= budget {
                break;
            }
        }
        match self.image {
            Some(_) => ImageStep::More,
            None => ImageStep::Idle,
        }
    }

    /// Serialise-before-write: table `i` is about to change.
    pub(super) fn before_write(&mut self, i: usize) {
        if let Some(img) = &self.image {
            if !img.done[i] {
                self.image_slot(i);
            }
        }
    }

    /// Sends table `i`'s image, unless sent already.
    fn image_slot(&mut self, i: usize) {
        let Some(img) = &mut self.image else {
            return;
        };
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
                Store::value_effect(e.key(), &e.value, e.expire_at(now), now, |eff| {
                    eff.encode(&mut out)
                });
                records += 1;
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
                // The sender is gone (its replica dropped): stop imaging.
                self.image = None;
                return;
            }
        }
        if img.left == 0 {
            self.finish_image();
        }
    }

    fn finish_image(&mut self) {
        if let Some(img) = self.image.take() {
            let _ = img.sink.tx.send(ImagePart::Done);
        }
    }
}
