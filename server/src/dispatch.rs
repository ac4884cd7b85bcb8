//! From a decoded request to a reply slot: lookup, arity, authentication,
//! routing to shards, batching, and merging split replies.
//!
//! A connection plans every request of one read into a [`Pipeline`]: commands
//! for its own shard run at once (inline), commands for other shards are
//! appended to one batch per shard, multi-key commands are split per shard.
//! [`Pipeline::flush`] then sends each batch as one message, awaits the
//! replies, merges split ones and encodes everything in request order.
//!
//! Per shard, commands run in request order. Across shards, a pipeline's
//! commands are not serialised with each other (as in any sharded store
//! without transactions): a reader on another connection may see a later
//! write of this pipeline before an earlier one on another shard.

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{Args, Protocol, Reply};
use tokio::sync::oneshot;

use crate::commands::{flags, table, CommandSpec, Exec, Merge};
use crate::error::{unknown_command, wrong_arity, OpError};
use crate::session::{ConnCtx, ConnState};
use crate::shard::{Job, Msg, ShardFn, Worker};
use crate::slot::{key_slot, slot_shard, SLOTS};

/// What [`plan`] did with a request.
#[derive(Debug)]
pub enum Planned {
    /// Its reply has a slot in the pipeline.
    Queued,
    /// A connection command: flush the pipeline, then run it with
    /// [`run_conn_command`].
    Conn(usize, Args),
}

enum Part {
    Ready(Reply),
    Remote { shard: usize, idx: usize },
}

enum Slot {
    Ready(Reply),
    Remote {
        shard: usize,
        idx: usize,
    },
    Split {
        /// The command's table index: counted once, after the merge.
        cmd: usize,
        parts: Vec<Part>,
        merge: Merge,
        ordinals: Vec<Vec<usize>>,
        nkeys: usize,
    },
}

/// The replies owed for one read, in request order.
#[derive(Default)]
pub struct Pipeline {
    slots: Vec<Slot>,
    batches: Vec<Vec<Job>>,
}

impl Pipeline {
    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn remote(&mut self, shard: usize, cmd: Cmd, args: Args) -> Part {
        if self.batches.len() <= shard {
            self.batches.resize_with(shard + 1, Vec::new);
        }
        let batch = &mut self.batches[shard];
        batch.push(Job {
            cmd: cmd.idx,
            run: cmd.run,
            counted: cmd.counted,
            args,
        });
        Part::Remote {
            shard,
            idx: batch.len() - 1,
        }
    }

    fn run_on(&mut self, worker: &Worker, shard: usize, cmd: Cmd, mut args: Args) -> Part {
        if shard != worker.id {
            return self.remote(shard, cmd, args);
        }
        Part::Ready(
            worker
                .shard
                .borrow_mut()
                .run(cmd.idx, cmd.run, cmd.counted, &mut args),
        )
    }

    fn push_part(&mut self, part: Part) {
        self.slots.push(match part {
            Part::Ready(r) => Slot::Ready(r),
            Part::Remote { shard, idx } => Slot::Remote { shard, idx },
        });
    }

    /// Sends the batches, awaits their replies and encodes every slot into `out`.
    pub async fn flush(&mut self, worker: &Worker, proto: Protocol, out: &mut BytesMut) {
        if self.slots.is_empty() {
            return;
        }
        // What ran inline becomes visible to INFO and DBSIZE readers now.
        worker.shard.borrow_mut().publish();
        let mut waiting: Vec<(usize, oneshot::Receiver<Vec<Reply>>)> = Vec::new();
        for (shard, batch) in self.batches.iter_mut().enumerate() {
            if batch.is_empty() {
                continue;
            }
            let (tx, rx) = oneshot::channel();
            // The next read likely has as many: size the fresh batch for it.
            let jobs = std::mem::replace(batch, Vec::with_capacity(batch.len()));
            if worker.mailboxes[shard].send(Msg::Batch(jobs, tx)).is_ok() {
                waiting.push((shard, rx));
            }
        }
        let mut results: Vec<Vec<Option<Reply>>> = Vec::new();
        for (shard, rx) in waiting {
            if results.len() <= shard {
                results.resize_with(shard + 1, Vec::new);
            }
            results[shard] = rx.await.unwrap_or_default().into_iter().map(Some).collect();
        }
        let mut take = |shard: usize, idx: usize| -> Reply {
            results
                .get_mut(shard)
                .and_then(|r| r.get_mut(idx))
                .and_then(Option::take)
                .unwrap_or_else(|| OpError::ShardUnavailable.reply())
        };
        for slot in self.slots.drain(..) {
            let reply = match slot {
                Slot::Ready(r) => r,
                Slot::Remote { shard, idx } => take(shard, idx),
                Slot::Split {
                    cmd,
                    parts,
                    merge,
                    ordinals,
                    nkeys,
                } => {
                    let replies = parts
                        .into_iter()
                        .map(|p| match p {
                            Part::Ready(r) => r,
                            Part::Remote { shard, idx } => take(shard, idx),
                        })
                        .collect();
                    let merged = merge_replies(merge, replies, &ordinals, nkeys);
                    worker.shard.borrow().stats.count_call(cmd, Ok(merged))
                }
            };
            if reply.is_error() {
                worker.shard.borrow().stats.count_reply(&reply);
            }
            reply.encode(proto, out);
        }
    }
}

/// A shard-side command as routed: its table index and handler, and
/// whether the shard running it counts the call (not for the parts of a
/// split command: see [`Job::counted`]).
#[derive(Clone, Copy)]
struct Cmd {
    idx: usize,
    run: ShardFn,
    counted: bool,
}

impl Cmd {
    fn new(idx: usize, run: ShardFn) -> Cmd {
        Cmd {
            idx,
            run,
            counted: true,
        }
    }

    /// The same command as one part of a split.
    fn part(self) -> Cmd {
        Cmd {
            counted: false,
            ..self
        }
    }
}

/// The state checks every command passes before it runs or is routed,
/// decided from its table row and the connection's state alone: today
/// authentication (`NOAUTH` unless the row has `NO_AUTH`). A read-only
/// replica's `-READONLY` for `WRITE` rows and cluster redirections belong
/// here, beside it, so that no shard ever sees a command they refuse.
fn check_state(conn: &ConnState, spec: &CommandSpec) -> Result<(), OpError> {
    if !conn.authenticated && !spec.has(flags::NO_AUTH) {
        return Err(OpError::NoAuth);
    }
    Ok(())
}

/// Plans one request: checks it, runs it locally or queues it for its shards.
pub fn plan(
    worker: &Worker,
    conn: &mut ConnState,
    pipe: &mut Pipeline,
    items: Vec<Bytes>,
) -> Planned {
    let t = table();
    let Some((idx, spec)) = t.lookup(&items[0]) else {
        pipe.slots.push(Slot::Ready(unknown_command(&items)));
        return Planned::Queued;
    };
    conn.note_command(idx);
    if !spec.arity_ok(items.len()) {
        count_rejected(worker, idx);
        pipe.slots.push(Slot::Ready(wrong_arity(spec.name)));
        return Planned::Queued;
    }
    if let Err(e) = check_state(conn, spec) {
        count_rejected(worker, idx);
        pipe.slots.push(Slot::Ready(e.reply()));
        return Planned::Queued;
    }
    let shards = worker.shared.shards;
    let args = Args::new(items);
    match spec.exec {
        Exec::Conn(_) => return Planned::Conn(idx, args),
        Exec::Key(run) => match single_shard(spec, &args, shards) {
            Ok(shard) => {
                let part =
                    pipe.run_on(worker, shard.unwrap_or(worker.id), Cmd::new(idx, run), args);
                pipe.push_part(part);
            }
            Err(e) => {
                count_rejected(worker, idx);
                pipe.slots.push(Slot::Ready(e.reply()));
            }
        },
        Exec::Cursor(run) => {
            let slot = args
                .all()
                .get(1)
                .and_then(|c| leasehold_protocol::int::parse_u64(c))
                .unwrap_or(0)
                .min(SLOTS as u64 - 1);
            let shard = slot_shard(slot as u16, shards);
            let part = pipe.run_on(worker, shard, Cmd::new(idx, run), args);
            pipe.push_part(part);
        }
        Exec::AllShards(run, merge) => {
            let parts = (0..shards)
                .map(|s| pipe.run_on(worker, s, Cmd::new(idx, run).part(), args.clone()))
                .collect();
            pipe.slots.push(Slot::Split {
                cmd: idx,
                parts,
                merge,
                ordinals: Vec::new(),
                nkeys: 0,
            });
        }
        Exec::Keys(run, merge) => plan_split(worker, pipe, spec, Cmd::new(idx, run), args, merge),
    }
    Planned::Queued
}

fn count_rejected(worker: &Worker, idx: usize) {
    let stats = &worker.shard.borrow().stats;
    stats.rejected_calls[idx].add(1);
}

/// The one shard all keys of a request live on (`None`: no keys).
fn single_shard(spec: &CommandSpec, args: &Args, shards: usize) -> Result<Option<usize>, OpError> {
    let all = args.all();
    let mut found = None;
    for p in spec.key_positions(all.len()) {
        let s = slot_shard(key_slot(&all[p]), shards);
        match found {
            None => found = Some(s),
            Some(f) if f != s => return Err(OpError::CrossSlot),
            _ => {}
        }
    }
    Ok(found)
}

/// Splits a multi-key command into one command per shard over that shard's keys.
fn plan_split(
    worker: &Worker,
    pipe: &mut Pipeline,
    spec: &CommandSpec,
    cmd: Cmd,
    args: Args,
    merge: Merge,
) {
    let shards = worker.shared.shards;
    let all = args.all();
    let step = spec.step.max(1) as usize;
    // A key without its value (`MSET a 1 b`) fails the whole command before
    // any part runs, or the shards holding complete pairs would write them.
    if (all.len() - spec.first_key as usize) % step != 0 {
        count_rejected(worker, cmd.idx);
        pipe.slots.push(Slot::Ready(wrong_arity(spec.name)));
        return;
    }
    let positions: Vec<usize> = spec.key_positions(all.len()).collect();
    let owner: Vec<usize> = positions
        .iter()
        .map(|&p| slot_shard(key_slot(&all[p]), shards))
        .collect();
    if owner.windows(2).all(|w| w[0] == w[1]) {
        let shard = owner.first().copied().unwrap_or(worker.id);
        let part = pipe.run_on(worker, shard, cmd, args);
        pipe.push_part(part);
        return;
    }
    let mut per_shard: Vec<(Vec<Bytes>, Vec<usize>)> = vec![(Vec::new(), Vec::new()); shards];
    for (ordinal, (&p, &s)) in positions.iter().zip(&owner).enumerate() {
        let (sub, ords) = &mut per_shard[s];
        if sub.is_empty() {
            sub.push(all[0].clone());
        }
        sub.extend_from_slice(&all[p..(p + step).min(all.len())]);
        ords.push(ordinal);
    }
    let mut parts = Vec::new();
    let mut ordinals = Vec::new();
    for (s, (sub, ords)) in per_shard.into_iter().enumerate() {
        if sub.is_empty() {
            continue;
        }
        parts.push(pipe.run_on(worker, s, cmd.part(), Args::new(sub)));
        ordinals.push(ords);
    }
    pipe.slots.push(Slot::Split {
        cmd: cmd.idx,
        parts,
        merge,
        ordinals,
        nkeys: positions.len(),
    });
}

/// Combines per-shard replies. The first error wins.
fn merge_replies(
    merge: Merge,
    replies: Vec<Reply>,
    ordinals: &[Vec<usize>],
    nkeys: usize,
) -> Reply {
    if let Some(e) = replies.iter().find(|r| r.is_error()) {
        return e.clone();
    }
    match merge {
        Merge::Sum => Reply::Int(
            replies
                .iter()
                .map(|r| if let Reply::Int(i) = r { *i } else { 0 })
                .sum(),
        ),
        Merge::AllOk => replies.into_iter().next().unwrap_or_else(Reply::ok),
        Merge::Concat => Reply::Array(
            replies
                .into_iter()
                .flat_map(|r| {
                    if let Reply::Array(a) = r {
                        a
                    } else {
                        Vec::new()
                    }
                })
                .collect(),
        ),
        Merge::Gather => {
            let mut out = vec![Reply::Nil; nkeys];
            for (r, ords) in replies.into_iter().zip(ordinals) {
                if let Reply::Array(items) = r {
                    for (item, &o) in items.into_iter().zip(ords) {
                        out[o] = item;
                    }
                }
            }
            Reply::Array(out)
        }
    }
}

/// Runs a connection command (HELLO, AUTH, CLIENT, CONFIG, INFO, ...).
pub fn run_conn_command(
    worker: &Worker,
    conn: &mut ConnState,
    idx: usize,
    args: &mut Args,
) -> Reply {
    let Exec::Conn(f) = table().commands[idx].exec else {
        unreachable!("only connection commands are planned as Conn");
    };
    let mut ctx = ConnCtx {
        conn,
        shared: &worker.shared,
    };
    let result = f(&mut ctx, args);
    let stats = &worker.shard.borrow().stats;
    let reply = stats.count_call(idx, result);
    stats.count_reply(&reply);
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_restores_key_order() {
        let r = merge_replies(
            Merge::Gather,
            vec![
                Reply::Array(vec![Reply::Int(1), Reply::Int(3)]),
                Reply::Array(vec![Reply::Int(2)]),
            ],
            &[vec![0, 2], vec![1]],
            3,
        );
        assert_eq!(
            r,
            Reply::Array(vec![Reply::Int(1), Reply::Int(2), Reply::Int(3)])
        );
    }

    #[test]
    fn sum_and_errors() {
        assert_eq!(
            merge_replies(Merge::Sum, vec![Reply::Int(2), Reply::Int(3)], &[], 0),
            Reply::Int(5)
        );
        let e = Reply::err("ERR x");
        assert_eq!(
            merge_replies(Merge::Sum, vec![Reply::Int(2), e.clone()], &[], 0),
            e
        );
    }
}
