//! The replication link's connection on a replica: its bytes are the
//! primary's stream, applied like a pipelining client's commands (routed by
//! slot, one batch per shard per turn) and never answered.
//!
//! After a full sync's `+FULLRESYNC` the stream starts with the payload,
//! framed as Redis's diskless one: `$EOF:<40-byte mark>\r\n`, records, the
//! same 40 bytes. Records inside it are `LH.SNAPSHOT <version> <replid>
//! <offset> <unix ms> <shards>`, the image's records and `LH.SNAPEND
//! <records>`; while it loads, clients get `-LOADING`. After it (or at once
//! after `+CONTINUE`) every record read is also appended to this node's own
//! merged backlog, so its offset (`slave_repl_offset`) counts the
//! primary's bytes exactly. `PING` records only count; `REPLCONF GETACK`
//! asks the link thread for an ACK.

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{decode_request, encode_request, Limits};

use super::Conn;
use crate::dispatch::{plan, At, Planned};

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
            if c.rbuf.first() == Some(&b'*') {
                return Front::Record;
            }
            if !link.started && !c.rbuf.is_empty() {
                // A Leasehold payload starts with its LH.SNAPSHOT record.
                return Front::Bad("the payload is not a Leasehold snapshot");
            }
            if c.rbuf.len() < MARK_LEN {
                return Front::Partial;
            }
            if c.rbuf[..MARK_LEN] != mark[..] {
                return Front::Bad("the payload's end mark is wrong");
            }
            let _ = c.rbuf.split_to(MARK_LEN);
            link.loading = false;
            Front::Framing
        }
    }
}

/// Applies what the link's buffer holds. True when it stopped at
/// [`LINK_PIPELINE`] with records left (the caller serves it again).
///
/// The stream's bytes go to this node's backlog as read: when no payload
/// is loading, the buffer is copied once up front and the part consumed is
/// appended (cut at each `GETACK`, whose ACK must count it); a call that
/// starts inside a payload re-encodes the records after it instead.
pub(super) fn serve_link<T>(at: &mut At<'_>, c: &mut Conn<T>) -> bool {
    let worker = at.worker;
    let repl = worker.shared.repl.clone();
    let limits = link_limits();
    let streaming = !c.state.link.as_ref().is_some_and(|l| l.loading);
    let mut applied = BytesMut::new();
    let start_len = c.rbuf.len();
    let mut flushed = 0;
    if streaming {
        applied.extend_from_slice(&c.rbuf);
    }
    let mut more = false;
    discard(c);
    if !c.rbuf.is_empty() {
        repl.link.lock().last_io = Some(std::time::Instant::now());
    }
    loop {
        if c.pipe.len() >= LINK_PIPELINE {
            more = true;
            break;
        }
        let loading = c.state.link.as_ref().is_some_and(|l| l.loading);
        if loading {
            match payload_front(c) {
                Front::Partial => break,
                Front::Framing => {
                    if !c.state.link.as_ref().is_some_and(|l| l.loading) {
                        repl.set_loading(false);
                        tracing::info!("replication: full sync loaded");
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
        let items = match decode_request(&mut c.rbuf, &limits) {
            Ok(Some(items)) if items.is_empty() => continue,
            Ok(Some(items)) => items,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!("replication: closing the link: bad record: {e}");
                c.state.close = true;
                break;
            }
        };
        let name = items[0].to_ascii_uppercase();
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
                encode_request(&items, &mut applied);
            }
            match name.as_slice() {
                b"PING" => continue,
                b"REPLCONF" => {
                    let getack = items
                        .get(1)
                        .is_some_and(|s| s.eq_ignore_ascii_case(b"GETACK"));
                    if getack {
                        // The ACK counts this record: append before asking.
                        flushed = flush(
                            &repl,
                            &applied,
                            flushed,
                            streaming.then(|| start_len - c.rbuf.len()),
                        );
                        repl.want_ack();
                    }
                    continue;
                }
                _ => {}
            }
        }
        if let Planned::Conn(idx, _) | Planned::Span(idx, _) =
            plan(at, &mut c.state, &mut c.pipe, items)
        {
            let name = crate::commands::table().commands[idx].name;
            tracing::warn!("replication: ignoring command '{name}' in the stream (not an effect)");
        }
    }
    flush(
        &repl,
        &applied,
        flushed,
        streaming.then(|| start_len - c.rbuf.len()),
    );
    discard(c);
    more
}

/// Appends `applied[flushed..upto]` to the backlog (`upto`: the bytes
/// consumed when `applied` is a copy of the buffer; `None`: all of it,
/// re-encoded records). Returns the new `flushed`.
fn flush(
    repl: &crate::replication::role::Replication,
    applied: &[u8],
    flushed: usize,
    upto: Option<usize>,
) -> usize {
    let end = upto.unwrap_or(applied.len());
    if end > flushed {
        repl.backlog.append(&[&applied[flushed..end]]);
    }
    end
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
