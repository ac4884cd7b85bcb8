//! Renaming and copying keys: RENAME, RENAMENX, COPY.
//!
//! Semantics and errors follow Redis 7 (`db.c`, `renameGenericCommand`,
//! `copyCommand`): the value moves (or is copied) whole with its TTL,
//! whatever its type; a missing source is `ERR no such key` for RENAME and
//! RENAMENX and `0` for COPY; COPY refuses a key onto itself, and only
//! database 0 exists (`COPY ... DB 0` is accepted, any other index is `ERR
//! DB index is out of range`).
//!
//! The two keys may live on different shards: then the command runs as
//! steps under both shards' locks ([`super::span`]), so other clients see
//! the source and the destination change together. Either way the effects
//! are `DEL source` (RENAME), `DEL destination` when it existed, and the
//! record that recreates the value under the destination with its deadline
//! (`Store::restore`), which replay exactly on a replica and from the log.

use bytes::Bytes;
use leasehold_protocol::{Args, Reply};

use super::flags::{DENYOOM, WRITE};
use super::span::{first_error, int, step, step_exists, step_peek, step_put, step_take, Next};
use super::{cmd, CommandSpec, Exec};
use crate::error::OpError;
use crate::shard::Shard;
use crate::slot::{key_slot, slot_shard};

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("rename", 3, WRITE, (1, 2, 1), Exec::Span(rename, rename_steps), "Renames a key and overwrites the destination."),
    cmd("renamenx", 3, WRITE, (1, 2, 1), Exec::Span(renamenx, renamenx_steps), "Renames a key only when the target key name doesn't exist."),
    cmd("copy", -3, WRITE | DENYOOM, (1, 2, 1), Exec::Span(copy, copy_steps), "Copies the value of a key to a new key."),
];

fn rename(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    rename_generic(s, a, false)
}

fn renamenx(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    rename_generic(s, a, true)
}

/// The reply of a rename that happened: `OK`, or `1` for RENAMENX.
fn renamed(nx: bool) -> Reply {
    if nx {
        Reply::Int(1)
    } else {
        Reply::ok()
    }
}

/// RENAME and RENAMENX with both keys on this shard.
fn rename_generic(s: &mut Shard, a: &mut Args, nx: bool) -> Result<Reply, OpError> {
    let src = a.key()?;
    let dst = a.key()?;
    let now = s.now.unix_ms;
    if s.store.type_of(&src, now).is_none() {
        return Err(OpError::NoSuchKey);
    }
    if src == dst {
        // As Redis: nothing moves, but the source must exist.
        return Ok(if nx { Reply::Int(0) } else { Reply::ok() });
    }
    if nx && s.store.type_of(&dst, now).is_some() {
        return Ok(Reply::Int(0));
    }
    let moved = s.store.take(&src, now).ok_or(OpError::NoSuchKey)?;
    s.store.restore(&dst, moved, now);
    Ok(renamed(nx))
}

/// COPY's options after the two keys: whether REPLACE was given.
///
/// # Errors
/// `ERR syntax error` for anything else (or DB without its index), `ERR
/// value is not an integer or out of range` for an index that is not one,
/// `ERR DB index is out of range` for any database but 0.
fn copy_options(rest: &[Bytes]) -> Result<bool, OpError> {
    let mut replace = false;
    let mut i = 0;
    while i < rest.len() {
        let word = &rest[i];
        if word.eq_ignore_ascii_case(b"REPLACE") {
            replace = true;
        } else if word.eq_ignore_ascii_case(b"DB") && i + 1 < rest.len() {
            let db = leasehold_protocol::int::parse_i64(&rest[i + 1])
                .filter(|d| i32::try_from(*d).is_ok())
                .ok_or(OpError::NotInteger)?;
            if db != 0 {
                return Err(OpError::DbIndexOutOfRange);
            }
            i += 1;
        } else {
            return Err(OpError::Syntax);
        }
        i += 1;
    }
    Ok(replace)
}

/// COPY with both keys on this shard.
fn copy(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let src = a.key()?;
    let dst = a.key()?;
    let replace = copy_options(&a.all()[3..])?;
    if src == dst {
        return Err(OpError::SameObject);
    }
    let now = s.now.unix_ms;
    let Some(moved) = s.store.peek(&src, now) else {
        return Ok(Reply::Int(0));
    };
    if !replace && s.store.type_of(&dst, now).is_some() {
        return Ok(Reply::Int(0));
    }
    s.store.restore(&dst, moved, now);
    Ok(Reply::Int(1))
}

/// A two-key command's source and destination, and their shards.
struct Keys<'a> {
    name: &'a Bytes,
    src: &'a Bytes,
    dst: &'a Bytes,
    from: usize,
    to: usize,
}

impl Keys<'_> {
    /// Calls `then` with the keys of `args`, unless a reply of the last
    /// step is an error (which is then the command's).
    fn steps(
        args: &[Bytes],
        shards: usize,
        replies: &[Reply],
        then: impl FnOnce(&Keys<'_>) -> Next,
    ) -> Next {
        if let Some(e) = first_error(replies) {
            return e;
        }
        let of = |k: &Bytes| slot_shard(key_slot(k), shards);
        let (name, src, dst) = (&args[0], &args[1], &args[2]);
        then(&Keys {
            name,
            src,
            dst,
            from: of(src),
            to: of(dst),
        })
    }

    /// Whether each key exists, on its shard: replies `[source, destination]`.
    fn check_both(&self) -> Next {
        Next::Run(vec![
            step(self.from, step_exists, self.name, &[self.src]),
            step(self.to, step_exists, self.name, &[self.dst]),
        ])
    }

    /// The source into its shard's parcel: removed (`take`) or copied.
    fn pack(&self, run: super::span::StepFn) -> Next {
        Next::Run(vec![step(self.from, run, self.name, &[self.src])])
    }

    /// The parcel stored under the destination.
    fn unpack(&self) -> Next {
        let from = self.from.to_string();
        Next::Run(vec![step(
            self.to,
            step_put,
            self.name,
            &[self.dst, from.as_bytes()],
        )])
    }
}

/// RENAME across shards: take the source into its shard's parcel, then
/// store it under the destination.
fn rename_steps(args: &[Bytes], shards: usize, step_no: usize, replies: &[Reply]) -> Next {
    Keys::steps(args, shards, replies, |k| match step_no {
        0 => k.pack(step_take),
        1 if int(replies.first()) == 0 => Next::Done(Err(OpError::NoSuchKey)),
        1 => k.unpack(),
        _ => Next::Done(Ok(Reply::ok())),
    })
}

/// RENAMENX across shards: both keys checked, then the move as RENAME's.
fn renamenx_steps(args: &[Bytes], shards: usize, step_no: usize, replies: &[Reply]) -> Next {
    Keys::steps(args, shards, replies, |k| match step_no {
        0 => k.check_both(),
        1 if int(replies.first()) == 0 => Next::Done(Err(OpError::NoSuchKey)),
        1 if int(replies.get(1)) == 1 => Next::Done(Ok(Reply::Int(0))),
        1 => k.pack(step_take),
        2 => k.unpack(),
        _ => Next::Done(Ok(Reply::Int(1))),
    })
}

/// COPY across shards: the options checked, both keys checked, the
/// source copied into its shard's parcel, then stored.
fn copy_steps(args: &[Bytes], shards: usize, step_no: usize, replies: &[Reply]) -> Next {
    let replace = match copy_options(&args[3..]) {
        Ok(r) => r,
        Err(e) => return Next::Done(Err(e)),
    };
    Keys::steps(args, shards, replies, |k| match step_no {
        0 => k.check_both(),
        1 if int(replies.first()) == 0 => Next::Done(Ok(Reply::Int(0))),
        1 if !replace && int(replies.get(1)) == 1 => Next::Done(Ok(Reply::Int(0))),
        1 => k.pack(step_peek),
        2 => k.unpack(),
        _ => Next::Done(Ok(Reply::Int(1))),
    })
}
