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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use leasehold_protocol::encode_request;

use crate::persist::format::CrcWriter;
use crate::shard::{Cut, Mailbox, Msg};
use crate::state::Shared;
use crate::store::{ImagePart, ImageSink};

/// The body's version (`LH.SNAPSHOT 1 ...`).
pub const SNAPSHOT_VERSION: &str = "1";
/// Longest a cut may hold the shards' publishes, from the first shard's
/// cut: a shard that has not cut by then (busy with a long script, say)
/// aborts the try.
pub const CUT_HOLD_MAX: Duration = Duration::from_millis(100);
/// Longest a try waits for the first shard to cut (nothing is held yet).
const FIRST_CUT_MAX: Duration = Duration::from_secs(5);
/// Tries at a cut before it fails.
pub const CUT_TRIES: u32 = 3;
/// The pause between two tries.
pub const CUT_RETRY_AFTER: Duration = Duration::from_secs(1);

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
/// A try that would hold the shards' publishes longer than
/// [`CUT_HOLD_MAX`], or past half a shard's ring, is aborted: every shard
/// is released at once and the cut is tried again after
/// [`CUT_RETRY_AFTER`], up to [`CUT_TRIES`] tries. `pause` runs at each
/// pause (a sender writes a keepalive to its replica); its error ends the
/// cut.
///
/// # Errors
/// Every try was aborted, the server is stopping, or `pause` failed.
pub fn cut(
    shared: &Shared,
    mailboxes: &[Mailbox],
    mut pause: impl FnMut() -> std::io::Result<()>,
    at_cut: impl FnOnce(u64),
) -> std::io::Result<CutDone> {
    let mut at_cut = Some(at_cut);
    let mut why = String::new();
    for n in 1..=CUT_TRIES {
        if n > 1 {
            pause()?;
            std::thread::sleep(CUT_RETRY_AFTER);
        }
        if shared.shutting_down.load(Ordering::SeqCst) {
            return Err(other("the server is stopping"));
        }
        match try_cut(shared, mailboxes, &mut at_cut) {
            Ok(done) => return Ok(done),
            Err(w) => {
                tracing::warn!("replication: a cut was aborted (try {n} of {CUT_TRIES}): {w}");
                why = w;
            }
        }
    }
    Err(other(format!(
        "the cut was aborted {CUT_TRIES} times: {why}"
    )))
}

/// One try at [`cut`]; `Err` says why it was aborted (every shard is
/// released then too).
fn try_cut(
    shared: &Shared,
    mailboxes: &[Mailbox],
    at_cut: &mut Option<impl FnOnce(u64)>,
) -> Result<CutDone, String> {
    let repl = &shared.repl;
    let _one_cut_at_a_time = repl.full_sync.lock();
    let (tx, rx) = crossbeam_channel::unbounded();
    let queued = Arc::new(AtomicUsize::new(0));
    let over = Arc::new(AtomicBool::new(false));
    let (cut_tx, cut_rx) = crossbeam_channel::bounded(mailboxes.len());
    let sent = Instant::now();
    let release = Release(mailboxes);
    for m in mailboxes {
        let sink = ImageSink {
            tx: tx.clone(),
            queued: queued.clone(),
        };
        m.send(Msg::Cut(Cut {
            sink,
            cut: cut_tx.clone(),
            over: over.clone(),
        }));
    }
    drop((tx, cut_tx));
    let mut answered = 0;
    // When the first shard cut: its publishes are held from then on.
    let mut holding_since: Option<Instant> = None;
    while answered < mailboxes.len() {
        let left = match holding_since {
            Some(t) => CUT_HOLD_MAX.saturating_sub(t.elapsed()),
            None => FIRST_CUT_MAX.saturating_sub(sent.elapsed()),
        };
        if left.is_zero() {
            let late = mailboxes.len() - answered;
            let bound = holding_since.map_or(FIRST_CUT_MAX, |_| CUT_HOLD_MAX);
            return Err(format!(
                "{late} of {} shards did not cut within {bound:?} (of the first cut, or of the try)",
                mailboxes.len()
            ));
        }
        if over.load(Ordering::SeqCst) {
            return Err("a shard's held effects passed half its ring".into());
        }
        // Short waits, so a ring filling up is seen in time.
        match cut_rx.recv_timeout(left.min(Duration::from_millis(1))) {
            Ok(_) => {
                answered += 1;
                holding_since.get_or_insert_with(Instant::now);
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                return Err("a shard stopped".into());
            }
        }
    }
    if over.load(Ordering::SeqCst) {
        return Err("a shard's held effects passed half its ring".into());
    }
    // Every shard has published what it wrote before its cut and holds the
    // rest: the stream's length now is the cut's offset.
    let offset = repl.backlog.offset();
    if let Some(f) = at_cut.take() {
        f(offset);
    }
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
