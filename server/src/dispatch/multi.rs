//! The dispatcher's side of transactions: queueing inside MULTI, and what
//! EXEC needs from a [`Pipeline`] and an [`Outbox`] to run the queue
//! (`turn/tx.rs` runs it; `docs/transactions.md` describes how).
//!
//! Inside MULTI a request passes the same checks as outside (lookup,
//! arity, [`check_state`](super::check_state)), then is routed on paper
//! only: the shards it would run on are noted, so EXEC knows which to
//! take, and a request that could not be routed (`CROSSSLOT`) is refused
//! now. Every refusal marks the transaction
//! aborted, so its EXEC answers `EXECABORT`.

use bytes::Bytes;
use leasehold_protocol::{Args, Reply};

use super::{
    count_rejected, merge_split, single_shard, At, Cmd, Outbox, Pipeline, Route, Slot, WHOLE,
};
use crate::commands::span::Step;
use crate::commands::split::{cursor_shard, groups_complete};
use crate::commands::{flags, CommandSpec, Exec};
use crate::error::OpError;
use crate::session::ConnState;
use crate::shard::{Job, Worker};
use crate::slot::{key_slot, slot_shard};

/// Answers a refused request with `reply`; inside MULTI, the transaction
/// is aborted. Cold, like [`queue`]: kept out of `plan`'s hot path.
#[cold]
#[inline(never)]
pub(super) fn refuse(conn: &mut ConnState, pipe: &mut Pipeline, reply: Reply) {
    if let Some(multi) = conn.tx.multi.as_mut() {
        multi.aborted = true;
    }
    pipe.slots.push(Slot::Ready(reply));
}

/// Queues a request inside MULTI (it passed lookup, arity and the state
/// checks), answering `+QUEUED`, or refuses it.
#[cold]
#[inline(never)]
pub(super) fn queue(
    worker: &Worker,
    conn: &mut ConnState,
    pipe: &mut Pipeline,
    idx: usize,
    spec: &CommandSpec,
    items: Vec<Bytes>,
) {
    if conn.close {
        // Closing (its queue passed the limit): nothing more is kept.
        return;
    }
    let args = Args::new(items);
    match shards_of(spec, &args, worker.shared.shards, worker.id) {
        Err(reply) => {
            count_rejected(worker, idx);
            refuse(conn, pipe, reply);
        }
        Ok(shards) => {
            // The replication link's transactions were accepted by the
            // primary already.
            let limit = match conn.is_link() {
                true => usize::MAX,
                false => conn.query_buffer_limit,
            };
            let Some(multi) = conn.tx.multi.as_mut() else {
                return;
            };
            multi.bytes += args.all().iter().map(|a| a.len() + 16).sum::<usize>();
            multi.writes |= spec.has(flags::WRITE);
            multi.denyoom |= spec.has(flags::DENYOOM);
            if multi.bytes > limit {
                let h = &conn.handle;
                tracing::warn!(
                    "closing client {} at {}: MULTI queued {} bytes, over client-query-buffer-limit",
                    h.id,
                    h.addr,
                    multi.bytes
                );
                // Still inside MULTI, aborted: what follows in this read is
                // dropped, never run.
                multi.aborted = true;
                conn.close = true;
                return;
            }
            match shards {
                None => multi.conn_commands = true,
                Some(list) => list.into_iter().for_each(|s| multi.shards[s] = true),
            }
            multi.queued.push(args.into_inner());
            pipe.slots.push(Slot::Ready(Reply::simple("QUEUED")));
        }
    }
}

/// The shards a request runs on, as [`super::plan`] routes it (`None`: a
/// connection command, on the connection's thread), or the refusal
/// `plan` would answer.
fn shards_of(
    spec: &CommandSpec,
    args: &Args,
    shards: usize,
    own: usize,
) -> Result<Option<Vec<usize>>, Reply> {
    if spec.has(flags::NO_MULTI) {
        return Err(OpError::NotInMulti.reply());
    }
    let all = args.all();
    Ok(Some(match spec.exec {
        Exec::Conn(_) => return Ok(None),
        Exec::Key(_) => match single_shard(spec, args, shards) {
            Ok(shard) => vec![shard.unwrap_or(own)],
            Err(e) => return Err(e.reply()),
        },
        Exec::Cursor(_) => vec![cursor_shard(args.all(), shards, own)],
        Exec::AllShards(..) => (0..shards).collect(),
        Exec::Keys(..) | Exec::Span(..) => {
            // `MSET a 1 b` is queued, as Redis queues it, and fails at EXEC
            // before any part runs: it needs no shard.
            if !groups_complete(spec, all.len()) {
                return Ok(Some(Vec::new()));
            }
            let owners = spec.key_positions(all.len());
            owners
                .map(|p| slot_shard(key_slot(&all[p]), shards))
                .collect()
        }
    }))
}

impl Pipeline {
    /// Leaves a slot for a reply that connection `conn`'s thread fills later
    /// with [`Pipeline::fill`] along the returned route (EXEC's).
    pub fn expect(&mut self, conn: usize) -> Route {
        let route = Route {
            conn,
            slot: self.slots.len() as u32,
            part: WHOLE,
        };
        self.slots.push(Slot::Remote);
        self.owed += 1;
        route
    }

    /// Appends a reply that is already known.
    pub fn push_ready(&mut self, reply: Reply) {
        self.slots.push(Slot::Ready(reply));
    }

    /// Runs one job of a step of command `idx` spanning shards (see
    /// `commands::span`): now when it is for this thread's shard, else
    /// queued in `at`'s outbox. Its reply takes a slot; the command is
    /// counted once, for its own reply, not for its steps.
    pub fn run_step(&mut self, at: &mut At<'_>, idx: usize, step: Step) {
        let cmd = Cmd::new(idx, step.run, false).part();
        let part = self.run_on(at, step.shard, WHOLE, cmd, Args::new(step.args));
        self.push_part(part);
    }

    /// Removes the slots from `from` on and returns their replies, as they
    /// are (no merge, not counted): a step's. Call only when it owes
    /// nothing.
    pub fn take_from(&mut self, from: usize) -> Vec<Reply> {
        debug_assert_eq!(self.owed, 0, "replies are still owed");
        let reply = |slot| match slot {
            Slot::Ready(r) => r,
            _ => OpError::ShardUnavailable.reply(),
        };
        self.slots
            .drain(from.min(self.slots.len())..)
            .map(reply)
            .collect()
    }

    /// Every slot's reply in request order, split replies merged, as
    /// [`Pipeline::encode`] would encode them; empties the pipeline. Call
    /// only when it owes nothing.
    pub fn take_replies(&mut self, worker: &Worker) -> Vec<Reply> {
        let replies = self.take_merged(worker);
        let stats = &worker.shard.borrow().stats;
        replies
            .iter()
            .filter(|r| r.is_error())
            .for_each(|r| stats.count_reply(r));
        replies
    }

    /// [`Pipeline::take_replies`] without counting the error replies (for a
    /// reply that is counted when it is written).
    pub fn take_merged(&mut self, worker: &Worker) -> Vec<Reply> {
        debug_assert_eq!(self.owed, 0, "replies are still owed");
        let slots: Vec<Slot> = self.slots.drain(..).collect();
        let reply = |slot| match slot {
            Slot::Ready(r) => r,
            split @ Slot::Split { .. } => merge_split(worker, split),
            // Never directly written: a transaction's jobs have no socket.
            Slot::Remote | Slot::Sent | Slot::Rest(_) => OpError::ShardUnavailable.reply(),
        };
        slots.into_iter().map(reply).collect()
    }
}

impl Outbox {
    /// Takes the jobs queued for `shard`, to be sent in a message of the
    /// caller's choosing (a transaction's), recording their routes as one
    /// batch in flight: its replies go to [`Outbox::answered`]. `None`
    /// when no job is queued for it.
    pub fn take(&mut self, shard: usize) -> Option<Vec<Job>> {
        if self.jobs[shard].is_empty() {
            return None;
        }
        let jobs = std::mem::take(&mut self.jobs[shard]);
        self.in_flight[shard].push_back(std::mem::take(&mut self.routes[shard]));
        Some(jobs)
    }
}
