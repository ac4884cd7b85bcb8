//! A point-in-time image of every shard, taken while the server keeps
//! serving: the cut and the records that follow it. A replica's full sync
//! sends it on the replica's socket (`feed.rs`); a snapshot on disk and an
//! append-only log's base file hold the same records (`persist`).
//!
//! The cut: every shard publishes what it wrote, holds later effects and
//! starts its image (`Store::start_image`); once all have cut, the merged
//! stream's length is the cut's offset `M`, and they are released. Every
//! effect before the cut is in the images, every one after it is in the
//! stream from `M`.
//!
//! The body ([`write_body`]) is RESP records: `LH.SNAPSHOT <version>
//! <replid> <M> <unix ms> <shards>`, `LH.FLUSHSLOTS 0 16383` and
//! `LH.UNPINALL` (the reader starts from nothing: no key, no run-time pin),
//! every shard's image records as they come (the first shard's start with
//! its `LH.PIN`s), then `LH.SNAPEND <records> <crc>`: the count of records
//! between the two (the flush and the unpin included) and the CRC-32
//! (`persist::format::crc32`, 8 lower-case hex digits) of every byte from
//! the start of `LH.SNAPSHOT` to the start of `LH.SNAPEND`. A reader checks
//! both as it reads, so a body as long as the dataset is never kept whole.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use leasehold_protocol::encode_request;

use crate::persist::format::CrcWriter;
use crate::shard::{Cut, Mailbox, Msg};
use crate::state::Shared;
use crate::store::{ImagePart, ImageSink};

/// The body's version (`LH.SNAPSHOT 1 ...`).
pub const SNAPSHOT_VERSION: &str = "1";
/// Longest every shard may take to cut.
const CUT_TIMEOUT: Duration = Duration::from_secs(5);

fn other(why: impl Into<String>) -> std::io::Error {
    std::io::Error::other(why.into())
}

/// Sends every shard [`Msg::Release`] when dropped, so no shard holds its
/// effects past the cut whatever happens to the image.
struct Release<'a>(&'a [Mailbox]);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        for m in self.0 {
            m.send(Msg::Release);
        }
    }
}

/// A cut: its offset and where the shards' images come.
#[derive(Debug)]
pub struct CutDone {
    /// The merged stream's offset at the cut: the image holds every effect
    /// before it.
    pub offset: u64,
    images: crossbeam_channel::Receiver<ImagePart>,
    queued: Arc<AtomicUsize>,
    shards: usize,
}

/// Cuts every shard at one offset of the merged stream (one cut at a time
/// server-wide; it lasts a mailbox round trip to every shard). `at_cut`
/// runs with the offset while every shard still holds its effects, so
/// whatever follows the stream can switch at exactly that offset.
///
/// # Errors
/// A shard did not cut within 5 s (it is stopping).
pub fn cut(
    shared: &Shared,
    mailboxes: &[Mailbox],
    at_cut: impl FnOnce(u64),
) -> std::io::Result<CutDone> {
    let repl = &shared.repl;
    let _one_cut_at_a_time = repl.full_sync.lock();
    let (tx, rx) = crossbeam_channel::unbounded();
    let queued = Arc::new(AtomicUsize::new(0));
    let (cut_tx, cut_rx) = crossbeam_channel::bounded(mailboxes.len());
    let release = Release(mailboxes);
    for m in mailboxes {
        let sink = ImageSink {
            tx: tx.clone(),
            queued: queued.clone(),
        };
        m.send(Msg::Cut(Cut {
            sink,
            cut: cut_tx.clone(),
        }));
    }
    drop(tx);
    for _ in mailboxes {
        if cut_rx.recv_timeout(CUT_TIMEOUT).is_err() {
            return Err(other("a shard did not cut in time"));
        }
    }
    // Every shard has published what it wrote before its cut and holds the
    // rest: the stream's length now is the cut's offset.
    let offset = repl.backlog.offset();
    at_cut(offset);
    drop(release);
    Ok(CutDone {
        offset,
        images: rx,
        queued,
        shards: mailboxes.len(),
    })
}

/// Writes the body of the image (see the module's docs) to `w` as the
/// shards produce it, checksummed as it goes; returns the record count
/// `LH.SNAPEND` carries.
/// `go_on` is asked between chunks; when it turns false the image stops.
///
/// # Errors
/// `w` failed, a shard stopped its image, or `go_on` turned false.
pub fn write_body(
    shared: &Shared,
    cut: &CutDone,
    w: &mut impl Write,
    go_on: impl Fn() -> bool,
) -> std::io::Result<u64> {
    let ids = shared.repl.ids();
    let mut head = BytesMut::new();
    let unix_ms = shared.clock.now().unix_ms.to_string();
    let shards = shared.shards.to_string();
    let m_text = cut.offset.to_string();
    let header = [
        "LH.SNAPSHOT",
        SNAPSHOT_VERSION,
        &ids.replid,
        &m_text,
        &unix_ms,
        &shards,
    ];
    encode_request(&header, &mut head);
    encode_request(&["LH.FLUSHSLOTS", "0", "16383"], &mut head);
    encode_request(&["LH.UNPINALL"], &mut head);
    let mut summed = CrcWriter::new(w);
    summed.write_all(&head)?;
    let records = 2 + write_images(cut, &mut summed, go_on)?;
    let crc = format!("{:08x}", summed.crc());
    let mut end = BytesMut::new();
    encode_request(&["LH.SNAPEND", &records.to_string(), &crc], &mut end);
    summed.inner_mut().write_all(&end)?;
    Ok(records)
}

/// Writes every shard's image chunks as they come, until all are done;
/// returns how many records they held.
fn write_images(
    cut: &CutDone,
    w: &mut impl Write,
    go_on: impl Fn() -> bool,
) -> std::io::Result<u64> {
    let mut records = 0u64;
    let mut done = 0;
    while done < cut.shards {
        match cut.images.recv_timeout(Duration::from_millis(10)) {
            Ok(ImagePart::Chunk(bytes, n)) => {
                cut.queued.fetch_sub(bytes.len(), Ordering::Relaxed);
                w.write_all(&bytes)?;
                records += n;
            }
            Ok(ImagePart::Done) => done += 1,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                return Err(other("a shard stopped its image"));
            }
        }
        if !go_on() {
            return Err(other("the image was abandoned"));
        }
    }
    Ok(records)
}
