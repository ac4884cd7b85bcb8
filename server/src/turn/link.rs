//! The replication link's connection on a replica: its bytes are the
//! primary's stream, applied like a pipelining client's commands (routed by
//! slot, one batch per shard per turn) and never answered.
//!
//! After a full sync's `+FULLRESYNC` the stream starts with the payload,
//! framed as Redis's diskless one: `$EOF:<40-byte mark>\r\n`, records, the
//! same 40 bytes. Records inside it are `LH.SNAPSHOT <version> <replid>
//! <offset> <unix ms> <shards>`, the image's records and `LH.SNAPEND
//! <records> <crc>`; while it loads, clients get `-LOADING`. The count and
//! the CRC-32 of the bytes before `LH.SNAPEND` are checked as they are read
//! (a primary built before the CRC sends only the count); a payload that
//! fails either closes the link, loading, and the next PSYNC asks for a
//! full sync. After it (or at once
//! after `+CONTINUE`) every record read is also appended to this node's own
//! merged backlog, so its offset (`slave_repl_offset`) counts the
//! primary's bytes exactly. `PING` records only count; `REPLCONF GETACK`
//! asks the link thread for an ACK.

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{decode_request_raw, Limits};

use super::{tx, Conn, Parked};
use crate::dispatch::{plan, run_conn_command, At, Planned};
use crate::replication::backlog::MULTI_RECORD;
use crate::replication::role::Replication;
use leasehold_protocol::Args;

/// Most records of the stream planned before their replies (dropped) are
/// waited for: far more than a client's pipeline, since every round trip
/// to another shard holds the link back.
pub const LINK_PIPELINE: usize = 4096;

/// The payload version this replica loads (`LH.SNAPSHOT 1 ...`).
pub const SNAPSHOT_VERSION: &[u8] = b"1";
/// Length of the payload's end mark.
pub const MARK_LEN: usize = 40;

/// Decoder limits for the link: the primary's records were accepted by it
/// already, and a string may be as long as the primary allows.
fn link_limits() -> Limits {
    Limits {
        max_bulk_len: i64::MAX as usize,
        max_multibulk_len: i64::MAX as usize,
        max_inline_len: 64 * 1024,
        authenticated: true,
    }
}

/// What the front of the link's buffer holds while a payload loads.
enum Front {
    /// More bytes are needed.
    Partial,
    /// The payload's header or end mark was consumed.
    Framing,
    /// A record starts here.
    Record,
    /// Not a payload we read: the link must close.
    Bad(&'static str),
}

fn payload_front<T>(c: &mut Conn<T>) -> Front {
    let Some(link) = c.state.link.as_mut() else {
        return Front::Record;
    };
    match &link.mark {
        None => {
            let Some(end) = c.rbuf.windows(2).position(|w| w == b"\r\n") else {
                return Front::Partial;
            };
            let line = c.rbuf.split_to(end + 2);
            match line.strip_prefix(b"$EOF:") {
                Some(mark) if mark.len() == MARK_LEN + 2 => {
                    link.mark = Some(Bytes::copy_from_slice(&mark[..MARK_LEN]));
                    Front::Framing
                }
                _ => Front::Bad("the payload is not a Leasehold snapshot (no $EOF:<mark>)"),
            }
        }
        Some(mark) => {
            match (c.rbuf.first(), link.started, link.ended) {
                (None, _, _) => return Front::Partial,
                (Some(b'*'), _, false) => return Front::Record,
                // A Leasehold payload starts with its LH.SNAPSHOT record.
                (_, false, _) => return Front::Bad("the payload is not a Leasehold snapshot"),
                (_, true, false) => return Front::Bad("the payload ends without LH.SNAPEND"),
                // Only the end mark follows LH.SNAPEND.
                (_, true, true) => {}
            }
            if c.rbuf.len() < MARK_LEN {
                return Front::Partial;
            }
            if c.rbuf[..MARK_LEN] != mark[..] {
                return Front::Bad("the payload's end mark is wrong");
            }
            let _ = c.rbuf.split_to(MARK_LEN);
            link.loading = false;
            link.loaded = true;
            Front::Framing
        }
    }
}

/// Ends the node's loading once its payload's end mark was read (and
/// every record before it applied: the caller checks nothing is owed), so
/// no reader is served a part of the payload.
fn loaded<T>(repl: &Replication, c: &mut Conn<T>) {
    if let Some(link) = c.state.link.as_mut().filter(|l| l.loaded) {
        link.loaded = false;
        repl.set_loading(false);
        tracing::info!("replication: full sync loaded");
    }
}

/// Applies what the link's buffer holds. True when it stopped at
/// [`LINK_PIPELINE`] with records left (the caller serves it again).
///
/// The stream's bytes go to this node's backlog as read: when no payload
/// is loading, the buffer is copied once up front and the part consumed is
/// appended (cut at each `GETACK`, whose ACK must count it); a call that
/// starts inside a payload copies each record after it as it is read.
pub(super) fn serve_link<T>(at: &mut At<'_>, c: &mut Conn<T>) -> bool {
    let worker = at.worker;
    let repl = worker.shared.repl.clone();
    let limits = link_limits();
    let streaming = !c.state.link.as_ref().is_some_and(|l| l.loading);
    let mut counted = Counted::new(c, streaming);
    let mut more = false;
    discard(c);
    if !c.rbuf.is_empty() {
        repl.link.lock().last_io = Some(std::time::Instant::now());
    }
    // A serve runs with nothing owed: every record of a payload whose end
    // mark was read is applied now.
    loaded(&repl, c);
    loop {
        if let Some(parked) = c.parked.take() {
            // A MULTI or EXEC of the stream runs once every record before
            // it was applied, as a client's connection command does.
            if c.pipe.owed() > 0 {
                c.parked = Some(parked);
                break;
            }
            if let Parked::Conn(idx, args) = parked {
                if !run_frame(at, c, idx, args, &mut counted) {
                    break;
                }
            }
            continue;
        }
        if c.pipe.len() >= LINK_PIPELINE {
            more = true;
            break;
        }
        let loading = c.state.link.as_ref().is_some_and(|l| l.loading);
        if loading {
            match payload_front(c) {
                Front::Partial => break,
                Front::Framing => {
                    if c.pipe.owed() == 0 {
                        loaded(&repl, c);
                    }
                    continue;
                }
                Front::Record => {}
                Front::Bad(why) => {
                    tracing::warn!("replication: closing the link: {why}");
                    c.state.close = true;
                    break;
                }
            }
        }
        let before = counted.consumed(c);
        let (raw, items) = match decode_request_raw(&mut c.rbuf, &limits) {
            Ok(Some(decoded)) => decoded,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!("replication: closing the link: bad record: {e}");
                c.state.close = true;
                break;
            }
        };
        let name = items.first().map(|n| n.to_ascii_uppercase());
        let framing = matches!(name.as_deref(), Some(b"LH.SNAPSHOT" | b"LH.SNAPEND"));
        if loading && !framing {
            if let Some(l) = c.state.link.as_mut() {
                l.crc.update(&raw);
            }
        }
        let Some(name) = name else {
            continue;
        };
        if loading {
            match name.as_slice() {
                b"LH.SNAPSHOT" => {
                    if items.get(1).map(|v| &v[..]) != Some(SNAPSHOT_VERSION) {
                        tracing::warn!("replication: closing the link: unknown snapshot version");
                        c.state.close = true;
                        break;
                    }
                    if let Some(l) = c.state.link.as_mut() {
                        l.started = true;
                        // The checksum starts at this record.
                        l.crc = crc32fast::Hasher::new();
                        l.crc.update(&raw);
                    }
                    continue;
                }
                _ if !c.state.link.as_ref().is_some_and(|l| l.started) => {
                    // Not a Leasehold payload (a Redis primary's RDB, say):
                    // nothing of it is applied.
                    tracing::warn!(
                        "replication: closing the link: the payload is not a Leasehold snapshot"
                    );
                    c.state.close = true;
                    break;
                }
                b"LH.SNAPEND" => {
                    let want = items
                        .get(1)
                        .and_then(|n| leasehold_protocol::int::parse_u64(n));
                    let got = c.state.link.as_ref().map_or(0, |l| l.records);
                    if want != Some(got) {
                        tracing::warn!(
                            "replication: closing the link: the payload has {got} records, its end says {want:?}"
                        );
                        c.state.close = true;
                        break;
                    }
                    if let Err(why) = check_crc(c.state.link.as_ref(), items.get(2)) {
                        tracing::warn!("replication: closing the link: {why}");
                        c.state.close = true;
                        break;
                    }
                    if let Some(l) = c.state.link.as_mut() {
                        l.ended = true;
                    }
                    continue;
                }
                _ => {
                    if let Some(l) = c.state.link.as_mut() {
                        l.records += 1;
                    }
                }
            }
        } else {
            if !streaming {
                counted.bytes.extend_from_slice(&raw);
            }
            match name.as_slice() {
                b"PING" => continue,
                b"EXEC" if merge_next_frame(c, &mut counted) => continue,
                b"REPLCONF" => {
                    let getack = items
                        .get(1)
                        .is_some_and(|s| s.eq_ignore_ascii_case(b"GETACK"));
                    if getack {
                        // The ACK counts this record: append before asking.
                        counted.flush(&repl, c);
                        repl.want_ack();
                    }
                    continue;
                }
                _ => {}
            }
        }
        match plan(at, &mut c.state, &mut c.pipe, items) {
            Planned::Conn(idx, args) if is_frame(idx) => {
                if counted.frame_at.is_none() {
                    counted.frame_at = Some(before);
                }
                c.parked = Some(Parked::Conn(idx, args));
            }
            Planned::Conn(idx, _) | Planned::Span(idx, _) => {
                let name = crate::commands::table().commands[idx].name;
                tracing::warn!(
                    "replication: ignoring command '{name}' in the stream (not an effect)"
                );
            }
            Planned::Queued => {}
        }
    }
    counted.flush(&repl, c);
    discard(c);
    more
}

/// Checks the payload's CRC-32 against `said`, the third field of its
/// `LH.SNAPEND` (8 hex digits). A payload without one (from a primary built
/// before the checksum) is accepted on its record count alone.
///
/// # Errors
/// Why the payload is refused: the CRC differs or is not 8 hex digits.
fn check_crc(link: Option<&crate::session::LinkState>, said: Option<&Bytes>) -> Result<(), String> {
    let (Some(link), Some(said)) = (link, said) else {
        return Ok(());
    };
    let got = link.crc.clone().finalize();
    let text = std::str::from_utf8(said).unwrap_or("");
    match u32::from_str_radix(text, 16) {
        Ok(want) if text.len() == 8 && want == got => Ok(()),
        _ => Err(format!(
            "the payload's CRC-32 is {got:08x}, its end says {}",
            String::from_utf8_lossy(said)
        )),
    }
}

/// Whether table row `idx` frames a transaction in the stream: a
/// primary writes a transaction's effects on several of its shards as
/// `MULTI`, the effects, `EXEC`.
fn is_frame(idx: usize) -> bool {
    matches!(
        crate::commands::table().commands[idx].name,
        "multi" | "exec"
    )
}

/// Most records a replica queues in one transaction when it joins frames
/// that follow each other in the stream ([`merge_next_frame`]).
const MERGED_RECORDS: usize = LINK_PIPELINE;

/// At a frame's `EXEC`, read while its `MULTI` ran: when the next record
/// read is already there and opens another frame, both are consumed and
/// the two frames become one transaction (up to [`MERGED_RECORDS`]
/// records). A replica behind its primary so applies a run of back-to-back
/// transactions with one round of shard locks instead of one each, and its
/// readers still see only states the primary had (between two of its
/// transactions). True when it joined them.
fn merge_next_frame<T>(c: &mut Conn<T>, counted: &mut Counted) -> bool {
    let open = c.state.tx.multi.as_ref();
    // A frame refused while queued (EXECABORT) is not joined to the next.
    let full = |m: &crate::session::Multi| m.aborted || m.queued.len() >= MERGED_RECORDS;
    if open.is_none_or(full) || !c.rbuf.starts_with(MULTI_RECORD) {
        return false;
    }
    let _ = c.rbuf.split_to(MULTI_RECORD.len());
    if !counted.copied {
        // Records copied one by one: the EXEC is in, the MULTI joins it.
        counted.bytes.extend_from_slice(MULTI_RECORD);
    }
    true
}

/// Runs the stream's `MULTI` or `EXEC` (row `idx`): the records between
/// them are queued, then run as one transaction over the shards they name,
/// so no reader of this replica sees part of the primary's transaction.
/// At the `EXEC` the transaction's bytes are counted. False while the
/// transaction runs on other shards: nothing more is applied until it ran
/// (its reply, dropped, is owed meanwhile).
fn run_frame<T>(
    at: &mut At<'_>,
    c: &mut Conn<T>,
    idx: usize,
    mut args: Args,
    counted: &mut Counted,
) -> bool {
    let exec = crate::commands::table().commands[idx].name == "exec";
    let reply = run_conn_command(at.worker, &mut c.state, idx, &mut args);
    if reply.is_error() {
        tracing::warn!("replication: a transaction of the stream failed to apply: {reply:?}");
    }
    if exec {
        counted.close_frame(&at.worker.shared.repl, c);
    }
    if !tx::has_work(c) {
        return true;
    }
    tx::after_command(at, c, reply).is_some()
}

/// The stream's bytes one [`serve_link`] consumed, on their way to this
/// node's backlog (which makes `slave_repl_offset`).
struct Counted {
    /// A copy of the read buffer taken up front (`copied`), or the records
    /// copied one by one as they are read (after a payload ends in this
    /// call).
    bytes: BytesMut,
    copied: bool,
    /// The read buffer's length when it was copied.
    start_len: usize,
    /// Bytes of `bytes` appended to the backlog, or moved to the open
    /// transaction's frame ([`LinkState::frame`]).
    ///
    /// [`LinkState::frame`]: crate::session::LinkState::frame
    flushed: usize,
    /// Where in `bytes` the open transaction (`MULTI` read, its `EXEC` not
    /// run) starts: 0 when it started in an earlier call.
    frame_at: Option<usize>,
}

impl Counted {
    fn new<T>(c: &Conn<T>, streaming: bool) -> Counted {
        let open = c.state.link.as_ref().is_some_and(|l| !l.frame.is_empty());
        Counted {
            bytes: match streaming {
                true => BytesMut::from(&c.rbuf[..]),
                false => BytesMut::new(),
            },
            copied: streaming,
            start_len: c.rbuf.len(),
            flushed: 0,
            frame_at: open.then_some(0),
        }
    }

    /// Bytes consumed so far.
    fn consumed<T>(&self, c: &Conn<T>) -> usize {
        match self.copied {
            true => self.start_len - c.rbuf.len(),
            false => self.bytes.len(),
        }
    }

    /// Appends what was consumed and not yet flushed to the backlog, up to
    /// an open transaction's start; its bytes are kept in its frame.
    fn flush<T>(&mut self, repl: &Replication, c: &mut Conn<T>) {
        let upto = self.consumed(c);
        let stop = self.frame_at.map_or(upto, |f| f.min(upto));
        if stop > self.flushed {
            repl.backlog.append(&[&self.bytes[self.flushed..stop]]);
            self.flushed = stop;
        }
        if let Some(link) = c.state.link.as_mut().filter(|_| upto > self.flushed) {
            link.frame
                .extend_from_slice(&self.bytes[self.flushed..upto]);
            self.flushed = upto;
        }
    }

    /// The open transaction's `EXEC` runs: its bytes are counted, as one
    /// append.
    fn close_frame<T>(&mut self, repl: &Replication, c: &mut Conn<T>) {
        if self.frame_at.take().is_none() {
            return self.flush(repl, c);
        }
        let upto = self.consumed(c);
        let earlier = c
            .state
            .link
            .as_mut()
            .map(|l| std::mem::take(&mut l.frame))
            .unwrap_or_default();
        let rest = &self.bytes[self.flushed.min(upto)..upto];
        repl.backlog.append(&[&earlier, rest]);
        self.flushed = upto;
    }
}

/// Drops the replies of records applied, once all are back, logging errors.
fn discard<T>(c: &mut Conn<T>) {
    if c.pipe.owed() == 0 {
        let failed = c.pipe.discard();
        if failed > 0 {
            tracing::warn!("replication: {failed} records of the stream failed to apply");
        }
    }
}
