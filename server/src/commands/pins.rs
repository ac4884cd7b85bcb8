//! Pinned limits: LH.PIN, LH.UNPIN, LH.UNPINALL, LH.PINS (the pins
//! themselves and the check are in [`crate::ratelimit::pin`]).
//!
//! Each runs on every shard (each holds the same pins, so a rate-limit call
//! checks them where it runs); the replies are identical, so the merge keeps
//! the first. Only the shard owning slot 0 emits the change to the
//! replication stream and the append-only log.

use bytes::Bytes;
use leasehold_protocol::{Args, Reply};

use super::flags::{ADMIN, READONLY, WRITE};
use super::{cmd, CommandSpec, Exec, Merge, NO_KEYS};
use crate::error::OpError;
use crate::ratelimit::pin::{self, ChangeError};
use crate::shard::Shard;

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("lh.pin", -4, WRITE | ADMIN, NO_KEYS, Exec::AllShards(pin_cmd, Merge::AllOk), "Pins the rate-limit parameters of every key under a prefix."),
    cmd("lh.unpin", 2, WRITE | ADMIN, NO_KEYS, Exec::AllShards(unpin, Merge::AllOk), "Removes the run-time pin of a prefix."),
    cmd("lh.unpinall", 1, WRITE | ADMIN, NO_KEYS, Exec::AllShards(unpinall, Merge::AllOk), "Removes every run-time pin."),
    cmd("lh.pins", 1, READONLY | ADMIN, NO_KEYS, Exec::AllShards(pins, Merge::AllOk), "Lists the pinned prefixes and their parameters."),
];

fn configured(_: ChangeError) -> OpError {
    OpError::PinConfigured
}

/// `LH.PIN prefix TOKENBUCKET capacity rate period_ms | SLIDINGWINDOW limit
/// window_ms | GCRA max_burst count_per_period period_ms`.
fn pin_cmd(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let words: Vec<&[u8]> = a.all()[1..].iter().map(|w| &w[..]).collect();
    let pin = pin::parse(&words).map_err(|e| OpError::BadPin(e.0))?;
    s.store.set_pin(pin).map_err(configured)?;
    Ok(Reply::ok())
}

/// `LH.UNPIN prefix`: 1 when a run-time pin was removed, 0 when none was set.
fn unpin(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let prefix = a.next()?;
    let removed = s.store.remove_pin(&prefix).map_err(configured)?;
    Ok(Reply::Int(removed as i64))
}

/// `LH.UNPINALL`: how many run-time pins were removed.
fn unpinall(s: &mut Shard, _a: &mut Args) -> Result<Reply, OpError> {
    Ok(Reply::Int(s.store.clear_pins() as i64))
}

/// `LH.PINS`: one array per pin, `[prefix, source, kind, integers...]`,
/// `source` being `config` or `runtime`; configured pins first.
fn pins(s: &mut Shard, _a: &mut Args) -> Result<Reply, OpError> {
    let rows = s.store.pins().all().map(|(p, from_config)| {
        let mut row = vec![
            Reply::Bulk(Bytes::copy_from_slice(&p.prefix)),
            Reply::Bulk(Bytes::from_static(if from_config {
                b"config"
            } else {
                b"runtime"
            })),
        ];
        let words = p.policy.words();
        row.push(Reply::Bulk(Bytes::from(words[0].clone())));
        row.extend(
            words[1..]
                .iter()
                .map(|w| Reply::Int(w.parse().unwrap_or(0))),
        );
        Reply::Array(row)
    });
    Ok(Reply::Array(rows.collect()))
}
