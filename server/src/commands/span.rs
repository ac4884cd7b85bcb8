//! Commands whose keys may live on two or more shards and must still act
//! atomically: RENAME, RENAMENX and COPY of a key to one on another shard,
//! and MSETNX over several shards. Their rows are [`Exec::Span`](super::Exec::Span):
//! keys on one shard run the row's ordinary handler there; keys on several
//! make the dispatcher hand the command to the transaction machinery
//! (`turn/tx.rs`, `docs/transactions.md`), which locks every shard of its
//! keys in ascending order, as EXEC does, and then drives it in steps:
//! the command's [`SpanFn`] names the jobs of each step (a handler and
//! its arguments per shard), gets back their replies, and names the next
//! step, until it answers. Nothing else runs on those shards from the
//! first lock to the release, so no client sees a state between two
//! steps, and their effects enter the replication stream with the
//! release, each shard's together.
//!
//! A value travels from one shard to another in a parcel: the source
//! shard's step takes (or copies) the value with its deadline into the
//! parcel slot named after that shard (`Shared::parcels`), which the
//! transaction holds, and the destination shard's step stores it. The handlers of the steps
//! ([`step_exists`], [`step_take`], [`step_peek`], [`step_put`]) have no
//! table row: only a driver can name them.

use bytes::Bytes;
use leasehold_protocol::{Args, Reply};

use crate::error::OpError;
use crate::shard::{Shard, ShardFn};

/// A step's handler (a [`ShardFn`] that no table row names).
pub type StepFn = ShardFn;

/// One job of a step: `run` on `shard` with `args` (name included).
#[derive(Debug)]
pub struct Step {
    /// The shard that runs it.
    pub shard: usize,
    /// Its handler.
    pub run: ShardFn,
    /// Its arguments, the command's name first.
    pub args: Vec<Bytes>,
}

/// What a command spanning shards does next.
#[derive(Debug)]
pub enum Next {
    /// Run these jobs (at once, each on its shard), then call the driver
    /// again with their replies, in this order.
    Run(Vec<Step>),
    /// The command's reply: the transaction releases the shards.
    Done(Result<Reply, OpError>),
}

/// A command's driver: given its arguments (name included), the number of
/// shards, the step it is at (0 first) and the replies of the previous
/// step's jobs (none at step 0), what to do next.
pub type SpanFn = fn(args: &[Bytes], shards: usize, step: usize, replies: &[Reply]) -> Next;

/// The step `[name, key]`: `1` when `key` is live on this shard, else `0`.
pub fn step_exists(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    Ok(Reply::Int(
        s.store.type_of(&key, s.now.unix_ms).is_some() as i64
    ))
}

/// The step `[name, key]`: removes `key` (emitting `DEL`) into this
/// shard's parcel; `1` when it was live, else `0` (the parcel is empty).
pub fn step_take(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let moved = s.store.take(&key, s.now.unix_ms);
    let found = moved.is_some();
    *s.parcel(s.id).lock() = moved;
    Ok(Reply::Int(found as i64))
}

/// The step `[name, key]`: copies `key`'s value and deadline into this
/// shard's parcel, like [`step_take`] without removing it.
pub fn step_peek(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let moved = s.store.peek(&key, s.now.unix_ms);
    let found = moved.is_some();
    *s.parcel(s.id).lock() = moved;
    Ok(Reply::Int(found as i64))
}

/// The step `[name, key, shard]`: stores the value in shard `shard`'s
/// parcel under `key` with its deadline (see `Store::restore`), emptying
/// the parcel; `1` when there was one, else `0`.
pub fn step_put(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let from = a.u64()? as usize;
    let Some(moved) = s.parcel(from).lock().take() else {
        return Ok(Reply::Int(0));
    };
    s.store.restore(&key, moved, s.now.unix_ms);
    Ok(Reply::Int(1))
}

/// A step job `run` on `shard` with `name` and `rest` as its arguments.
pub fn step(shard: usize, run: ShardFn, name: &Bytes, rest: &[&[u8]]) -> Step {
    let mut args = vec![name.clone()];
    args.extend(rest.iter().map(|a| Bytes::copy_from_slice(a)));
    Step { shard, run, args }
}

/// The integer reply of a step job (`0` for anything else).
pub fn int(r: Option<&Reply>) -> i64 {
    match r {
        Some(Reply::Int(i)) => *i,
        _ => 0,
    }
}

/// The first error among a step's replies, as the command's reply.
pub fn first_error(replies: &[Reply]) -> Option<Next> {
    let e = replies.iter().find(|r| r.is_error())?;
    Some(Next::Done(Ok(e.clone())))
}
