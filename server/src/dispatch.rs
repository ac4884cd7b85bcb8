//! From a decoded request to a reply slot: lookup, arity, authentication,
//! routing to shards, batching, and merging split replies.
//!
//! A connection plans its requests into its [`Pipeline`]: commands for its
//! own thread's shard run at once (inline), commands for other shards are
//! appended to the thread's [`Outbox`], which holds one batch per shard for
//! every connection planned in the same turn of the event loop, and
//! multi-key commands are split per shard. At the end of the turn
//! [`Outbox::send`] sends each batch as one message; each reply that comes
//! back is put in its slot by [`Pipeline::fill`] along the [`Route`]
//! recorded when the job was queued, and once a pipeline owes nothing
//! [`Pipeline::encode`] merges split replies and encodes every slot in
//! request order.
//!
//! Per shard, commands run in the order they were planned. Across shards, a
//! pipeline's commands are not serialised with each other (as in any sharded
//! store without transactions): a reader on another connection may see a
//! later write of this pipeline before an earlier one on another shard.
//! Inside MULTI, [`plan`] queues requests instead (`multi.rs`), and EXEC
//! runs them atomically across shards (`turn/tx.rs`).

mod multi;

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{Args, Protocol, Reply};

use crate::cluster::ClusterState;
use crate::commands::split::{cursor_shard, groups_complete, key_shards, split_by_shard};
use crate::commands::transaction::runs_inside_multi;
use crate::commands::{acl, flags, pubsub, scripting, table, CommandSpec, Exec, Merge};
use crate::error::{unknown_command, wrong_arity, OpError};
use crate::session::{ConnCtx, ConnState};
use crate::shard::{Answer, Direct, Job, Msg, ShardFn, Worker};
use crate::slot::{key_slot, slot_shard};
use crate::state::Shared;

/// What [`plan`] did with a request.
#[derive(Debug)]
pub enum Planned {
    /// Its reply has a slot in the pipeline.
    Queued,
    /// A connection command: run it with [`run_conn_command`] once the
    /// pipeline owes nothing and its replies are encoded.
    Conn(usize, Args),
    /// A command over keys of several shards ([`Exec::Span`], or a script
    /// whose KEYS live on several): start it as a transaction over them
    /// (`turn/tx.rs`) once the pipeline owes nothing, as EXEC starts.
    Span(usize, Args),
}

/// Marks a [`Route`] to a slot that is not split.
const WHOLE: u32 = u32::MAX;

impl Route {
    /// Whether its job is a part of a command split over shards.
    pub fn is_split_part(&self) -> bool {
        self.part != WHOLE
    }
}

/// Where the reply to one queued job goes: connection `conn` (its key in
/// the thread's connection table), its pipeline's slot `slot`, and the part
/// `part` of a split command (`WHOLE` for one that is not split).
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// The connection's key in its thread's connection table.
    pub conn: usize,
    slot: u32,
    part: u32,
}

enum Part {
    Ready(Reply),
    Remote,
}

enum Slot {
    Ready(Reply),
    Remote,
    /// Written to the connection by the shard that ran it.
    Sent,
    /// The rest of a reply the shard that ran it wrote in part.
    Rest(Bytes),
    Split {
        /// The command's table index: counted once, after the merge.
        cmd: usize,
        parts: Vec<Part>,
        merge: Merge,
        ordinals: Vec<Vec<usize>>,
        nkeys: usize,
    },
}

/// One connection's replies owed, in request order.
#[derive(Default)]
pub struct Pipeline {
    slots: Vec<Slot>,
    /// Replies still to come back from other shards.
    owed: usize,
}

/// The jobs one thread queues for other shards during a turn, one batch per
/// shard, and the routes of the batches sent and not yet answered.
pub struct Outbox {
    jobs: Vec<Vec<Job>>,
    routes: Vec<Vec<Route>>,
    /// Per shard, the routes of each batch in flight, oldest first: replies
    /// come back in the order the batches were sent.
    in_flight: Vec<VecDeque<Vec<Route>>>,
}

impl Outbox {
    /// An empty outbox for a server of `shards` shards.
    pub fn new(shards: usize) -> Outbox {
        Outbox {
            jobs: (0..shards).map(|_| Vec::new()).collect(),
            routes: (0..shards).map(|_| Vec::new()).collect(),
            in_flight: (0..shards).map(|_| VecDeque::new()).collect(),
        }
    }

    fn push(&mut self, shard: usize, job: Job, route: Route) {
        self.jobs[shard].push(job);
        self.routes[shard].push(route);
    }

    /// Posts every non-empty batch to its shard's mailbox as one
    /// [`Msg::Batch`], marking the shard in `posted` (the caller rings it);
    /// `direct(routes)` names the jobs whose reply the shard writes itself.
    /// Returns the routes of the jobs whose shard is gone (its thread exited
    /// at shutdown): their replies will never come.
    pub fn send(
        &mut self,
        worker: &Worker,
        posted: &mut [bool],
        mut direct: impl FnMut(&[Route]) -> Vec<Direct>,
    ) -> Vec<Route> {
        let mut lost = Vec::new();
        for (shard, posted) in posted.iter_mut().enumerate() {
            if self.jobs[shard].is_empty() {
                continue;
            }
            // The next turn likely has as many: size the fresh batch for it.
            let n = self.jobs[shard].len();
            let jobs = std::mem::replace(&mut self.jobs[shard], Vec::with_capacity(n));
            let routes = std::mem::replace(&mut self.routes[shard], Vec::with_capacity(n));
            let msg = Msg::Batch {
                from: worker.id,
                jobs,
                direct: direct(&routes),
            };
            if worker.mailboxes[shard].post(msg) {
                *posted = true;
                self.in_flight[shard].push_back(routes);
            } else {
                lost.extend(routes);
            }
        }
        lost
    }

    /// The routes of the oldest batch sent to `shard` that was not answered
    /// yet, for the replies that just came back from it.
    pub fn answered(&mut self, shard: usize) -> Vec<Route> {
        self.in_flight[shard].pop_front().unwrap_or_default()
    }
}

impl Pipeline {
    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Requests planned and not yet encoded.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Replies still to come back from other shards.
    pub fn owed(&self) -> usize {
        self.owed
    }

    fn run_on(
        &mut self,
        at: &mut At<'_>,
        shard: usize,
        part: u32,
        cmd: Cmd,
        mut args: Args,
    ) -> Part {
        if shard == at.worker.id {
            let mut s = at.worker.shard.borrow_mut();
            // Held for a busy script running on another shard's thread
            // (this thread serves its connections meanwhile): BUSY.
            if s.locked && at.worker.shared.scripts.busy(shard) {
                return Part::Ready(OpError::Busy.reply());
            }
            return Part::Ready(s.run(cmd.idx, cmd.run, cmd.counted, cmd.link, &mut args));
        }
        // A shard running a script past busy-reply-threshold answers
        // nothing until it ends: say so now, as Redis does. Not to the
        // replication link, whose records must all apply: they wait in
        // the shard's mailbox for the script's end (Redis stops reading
        // its primary meanwhile).
        if !cmd.link && at.worker.shared.scripts.busy(shard) {
            return Part::Ready(OpError::Busy.reply());
        }
        let job = Job {
            cmd: cmd.idx,
            run: cmd.run,
            counted: cmd.counted,
            link: cmd.link,
            args,
        };
        let route = Route {
            conn: at.conn,
            slot: self.slots.len() as u32,
            part,
        };
        at.outbox.push(shard, job, route);
        self.owed += 1;
        Part::Remote
    }

    fn push_part(&mut self, part: Part) {
        self.slots.push(match part {
            Part::Ready(r) => Slot::Ready(r),
            Part::Remote => Slot::Remote,
        });
    }

    /// Puts an answer that came back from another shard in its slot.
    /// Returns whether the pipeline now owes nothing.
    pub fn fill(&mut self, route: Route, answer: Answer) -> bool {
        let slot = &mut self.slots[route.slot as usize];
        match (slot, answer) {
            (Slot::Split { parts, .. }, Answer::Reply(r)) if route.part != WHOLE => {
                parts[route.part as usize] = Part::Ready(r);
            }
            (slot, Answer::Reply(r)) => *slot = Slot::Ready(r),
            (slot, Answer::Sent) => *slot = Slot::Sent,
            (slot, Answer::Rest(b)) => *slot = Slot::Rest(b),
        }
        self.owed -= 1;
        self.owed == 0
    }

    /// Whether the slot `route` fills is the only one: its reply is the
    /// next the connection owes, and nothing follows it yet.
    pub fn only(&self, route: &Route) -> bool {
        route.part == WHOLE && route.slot == 0 && self.slots.len() == 1
    }

    /// Encodes every slot into `out` in request order, merging split
    /// replies, and empties the pipeline. Call only when it owes nothing.
    pub fn encode(&mut self, worker: &Worker, proto: Protocol, out: &mut BytesMut) {
        debug_assert_eq!(self.owed, 0, "replies are still owed");
        for slot in self.slots.drain(..) {
            let reply = match slot {
                Slot::Ready(r) => r,
                Slot::Remote => OpError::ShardUnavailable.reply(),
                Slot::Sent => continue,
                Slot::Rest(b) => {
                    out.extend_from_slice(&b);
                    continue;
                }
                split @ Slot::Split { .. } => merge_split(worker, split),
            };
            if reply.is_error() {
                worker.shard.borrow().stats.count_reply(&reply);
            }
            reply.encode(proto, out);
        }
    }
}

/// A split slot's reply: its parts merged, the call counted once.
fn merge_split(worker: &Worker, slot: Slot) -> Reply {
    let lost = || OpError::ShardUnavailable.reply();
    let Slot::Split {
        cmd,
        parts,
        merge,
        ordinals,
        nkeys,
    } = slot
    else {
        return lost();
    };
    let replies = parts
        .into_iter()
        .map(|p| match p {
            Part::Ready(r) => r,
            Part::Remote => lost(),
        })
        .collect();
    let merged = merge.combine(replies, &ordinals, nkeys);
    worker.shard.borrow().stats.count_call(cmd, Ok(merged))
}

impl Pipeline {
    /// Empties the pipeline without encoding, as the replication link's
    /// connection does (its records are never answered); returns how many
    /// replies were errors. Call only when it owes nothing.
    pub fn discard(&mut self) -> usize {
        debug_assert_eq!(self.owed, 0, "replies are still owed");
        let failed = |r: &Reply| r.is_error();
        self.slots
            .drain(..)
            .filter(|s| match s {
                Slot::Ready(r) => failed(r),
                Slot::Split { parts, .. } => parts
                    .iter()
                    .any(|p| matches!(p, Part::Ready(r) if failed(r))),
                _ => false,
            })
            .count()
    }
}

/// Where [`plan`] queues: the thread, its outbox, and the key of the
/// connection being planned in the thread's connection table.
pub struct At<'a> {
    /// The thread.
    pub worker: &'a Worker,
    /// Its outbox for this turn.
    pub outbox: &'a mut Outbox,
    /// The connection's key.
    pub conn: usize,
}

/// A shard-side command as routed: its table index and handler, whether
/// the shard running it counts the call (not for the parts of a split
/// command: see [`Job::counted`]), and whether it comes from the
/// replication link (see [`Job::link`]).
#[derive(Clone, Copy)]
struct Cmd {
    idx: usize,
    run: ShardFn,
    counted: bool,
    link: bool,
}

impl Cmd {
    fn new(idx: usize, run: ShardFn, link: bool) -> Cmd {
        Cmd {
            idx,
            run,
            counted: true,
            link,
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
/// decided from its table row, the connection's state and the node's role
/// alone, so that no shard ever sees a command they refuse (a multi-shard
/// write is refused whole, never half-applied), in Redis 7's order after
/// authentication, the ACL and the cluster's redirections ([`plan`]):
/// `-OOM` for `DENYOOM` rows while used memory is past `maxmemory` (not on
/// a replica, which ignores it as Redis's does by default); for
/// `WRITE` rows `-MISCONF` while snapshots or the append-only log fail
/// (see `Persistence::refuse_writes`; PING too, as Redis 7) and
/// `-READONLY` on a replica; while
/// a replica loads a full sync, `-LOADING` unless the row has `LOADING`.
/// The replication link's own records pass.
fn check_state(shared: &Shared, conn: &ConnState, spec: &CommandSpec) -> Result<(), OpError> {
    if conn.is_link() {
        return Ok(());
    }
    // Inside EXEC these were judged for the whole transaction.
    if spec.has(flags::DENYOOM) && shared.refuses_oom() && !conn.tx.executing {
        return Err(OpError::OutOfMemory);
    }
    if spec.has(flags::WRITE) {
        if let Some(e) = shared.write_refusal() {
            if !conn.tx.executing {
                return Err(e);
            }
        }
    } else if let Some(e) = shared.persistence_refusal() {
        // Redis 7 refuses PING too, so that Sentinel sees the node fail.
        if spec.name == "ping" && !conn.tx.executing {
            return Err(e);
        }
    }
    if shared.repl.is_loading() && !spec.has(flags::LOADING) {
        return Err(OpError::Loading);
    }
    Ok(())
}

/// Plans one request: checks it, runs it locally or queues it for its shards.
pub fn plan(
    at: &mut At<'_>,
    conn: &mut ConnState,
    pipe: &mut Pipeline,
    mut items: Vec<Bytes>,
) -> Planned {
    let worker = at.worker;
    let t = table();
    let Some((idx, spec)) = t.lookup(&items[0]) else {
        multi::refuse(conn, pipe, unknown_command(&items));
        return Planned::Queued;
    };
    conn.note_command(idx);
    // EXEC with arguments is answered by its handler (EXECABORT, ending a
    // transaction if one is open), as Redis does.
    if !spec.arity_ok(items.len()) && spec.name != "exec" {
        count_rejected(worker, idx);
        multi::refuse(conn, pipe, wrong_arity(spec.name));
        return Planned::Queued;
    }
    if !conn.authenticated && !spec.has(flags::NO_AUTH) {
        count_rejected(worker, idx);
        multi::refuse(conn, pipe, OpError::NoAuth.reply());
        return Planned::Queued;
    }
    // ACL: one branch for a user that may do everything (see `commands/acl.rs`).
    if !conn.unrestricted {
        if let Err(e) = acl::check(&worker.shared, conn, idx, spec, &items) {
            count_rejected(worker, idx);
            multi::refuse(conn, pipe, e.reply());
            return Planned::Queued;
        }
    }
    // Cluster mode: redirections decided once, here, before any shard
    // runs the command. Off, this is one test of a field that never changes.
    if let Some(cluster) = &worker.shared.cluster {
        if let Err(e) = cluster_check(cluster, conn, spec, &items) {
            count_rejected(worker, idx);
            worker.shard.borrow().stats.count_redirect(&e);
            multi::refuse(conn, pipe, e.reply());
            return Planned::Queued;
        }
    }
    if let Err(e) = check_state(&worker.shared, conn, spec) {
        count_rejected(worker, idx);
        multi::refuse(conn, pipe, e.reply());
        return Planned::Queued;
    }
    if conn.monitor && spec.has(flags::READONLY | flags::WRITE) {
        count_rejected(worker, idx);
        multi::refuse(conn, pipe, OpError::MonitorKeyspace.reply());
        return Planned::Queued;
    }
    if worker.shared.monitors.active() {
        feed_monitors(worker, conn, spec, &items);
    }
    // RESP2's subscribed mode refuses most commands and changes PING's
    // reply; one test of the connection's state otherwise.
    if conn.subscribed_resp2() {
        if let Some(result) = pubsub::in_subscribed_mode(spec, &items) {
            let reply = worker.shard.borrow().stats.count_call(idx, result);
            pipe.slots.push(Slot::Ready(reply));
            return Planned::Queued;
        }
    }
    if conn.tx.multi.is_some() && !runs_inside_multi(spec) {
        multi::queue(worker, conn, pipe, idx, spec, items);
        return Planned::Queued;
    }
    if !conn.unrestricted {
        acl::mark_script_caller(idx, &mut items, conn);
    }
    let shards = worker.shared.shards;
    let args = Args::new(items);
    let link = conn.is_link();
    match spec.exec {
        Exec::Conn(_) => return Planned::Conn(idx, args),
        // A script that reads or writes the whole keyspace runs on this
        // thread with every shard locked (`turn/tx.rs`).
        Exec::Key(_)
            if shards > 1
                && spec.has(flags::MOVABLE_KEYS)
                && spec.has(flags::NO_SCRIPT)
                && worker.inbox.is_some()
                && scripting::needs_every_shard(&worker.shared.scripts, idx, args.all()) =>
        {
            return Planned::Span(idx, args);
        }
        Exec::Key(run) => match single_shard(spec, &args, shards) {
            Ok(shard) => {
                let shard = shard.unwrap_or(worker.id);
                // A split hot key is served here from this shard's slot
                // while it has enough (`docs/hotkeys.md`), unless a reply
                // from another shard is owed (one connection's commands on
                // the key keep their order).
                if shard != worker.id && pipe.owed == 0 && !link {
                    if let Some(reply) = split_local(worker, idx, spec, &args) {
                        pipe.slots.push(Slot::Ready(reply));
                        return Planned::Queued;
                    }
                }
                let part = pipe.run_on(at, shard, WHOLE, Cmd::new(idx, run, link), args);
                pipe.push_part(part);
            }
            // A script whose KEYS live on several shards runs on this
            // thread with those shards locked (`turn/tx.rs`), where the
            // thread can wait for them.
            Err(OpError::ScriptCrossShard) if worker.inbox.is_some() => {
                return Planned::Span(idx, args);
            }
            Err(e) => {
                count_rejected(worker, idx);
                pipe.slots.push(Slot::Ready(e.reply()));
            }
        },
        Exec::Cursor(run) => {
            let shard = cursor_shard(args.all(), shards, worker.id);
            let part = pipe.run_on(at, shard, WHOLE, Cmd::new(idx, run, link), args);
            pipe.push_part(part);
        }
        Exec::AllShards(run, merge) => {
            let cmd = Cmd::new(idx, run, link).part();
            let parts = (0..shards)
                .map(|s| pipe.run_on(at, s, s as u32, cmd, args.clone()))
                .collect();
            pipe.slots.push(Slot::Split {
                cmd: idx,
                parts,
                merge,
                ordinals: Vec::new(),
                nkeys: 0,
            });
        }
        Exec::Keys(run, merge) => {
            let cmd = Cmd::new(idx, run, link);
            if let Err(args) = plan_split(at, pipe, spec, cmd, args, merge, conn.tx.in_run) {
                return Planned::Span(idx, args);
            }
        }
        Exec::Span(run, _) => {
            if !groups_complete(spec, args.all().len()) {
                count_rejected(worker, idx);
                pipe.slots.push(Slot::Ready(wrong_arity(spec.name)));
                return Planned::Queued;
            }
            match single_shard(spec, &args, shards) {
                Ok(shard) => {
                    let shard = shard.unwrap_or(worker.id);
                    let part = pipe.run_on(at, shard, WHOLE, Cmd::new(idx, run, link), args);
                    pipe.push_part(part);
                }
                Err(_) => return Planned::Span(idx, args),
            }
        }
    }
    Planned::Queued
}

/// Cluster mode's one decision on a request (as Redis's `getNodeByQuery`),
/// made from the topology in force before any shard runs it: the hash slot
/// of its keys (`-CROSSSLOT Keys in request don't hash to the same slot`
/// when they are in several, by slot, not by shard), then `-MOVED <slot>
/// <host>:<port>` when another group owns the slot, or this node is a
/// replica of the owner and the command writes or READONLY was not sent,
/// and `-CLUSTERDOWN Hash slot not served` when no group owns it. Keyless
/// commands run here. Inside MULTI, each queued command is judged when
/// queued (a redirection aborts the transaction, as in Redis) and the
/// transaction's slot is noted: commands of several slots make EXEC answer
/// `CROSSSLOT`. ASKING lasts one command, or a whole transaction when
/// MULTI follows it: a slot this node imports (CLUSTER SETSLOT IMPORTING)
/// is served after it, and only then (else MOVED to the owner, as Redis
/// does). `-ASK` and `-TRYAGAIN` on a
/// migrating slot depend on which keys the shard has, so the shard decides
/// them when it runs the command (`Shard::run`, `shard::moving`). The
/// replication link's records pass.
#[inline(never)]
fn cluster_check(
    cluster: &ClusterState,
    conn: &mut ConnState,
    spec: &CommandSpec,
    items: &[Bytes],
) -> Result<(), OpError> {
    // ASKING holds for one command, or through MULTI until EXEC or
    // DISCARD (which take it: `commands/transaction.rs`).
    let asking = conn.cluster.asking;
    if conn.tx.multi.is_none() && spec.name != "multi" {
        conn.cluster.asking = false;
    }
    if conn.is_link() {
        return Ok(());
    }
    let mut slot = None;
    for p in spec.keys_in(items) {
        let s = key_slot(&items[p]);
        match slot {
            None => slot = Some(s),
            Some(f) if f != s => return Err(OpError::ClusterCrossSlot),
            _ => {}
        }
    }
    let Some(slot) = slot else {
        return Ok(());
    };
    let read_ok = conn.cluster.readonly && !spec.has(flags::WRITE);
    cluster.serves(slot, read_ok, asking)?;
    if let Some(multi) = conn.tx.multi.as_mut() {
        if !runs_inside_multi(spec) {
            match multi.slot {
                None => multi.slot = Some(slot),
                Some(s) if s != slot => multi.cross_slot = true,
                _ => {}
            }
            for p in spec.keys_in(items) {
                match &multi.key {
                    None => multi.key = Some(items[p].clone()),
                    Some(k) if *k != items[p] => multi.several_keys = true,
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

/// A TOKENLEASE, CL.THROTTLE, GCRA or SLIDINGWINDOW on a split key served by this
/// thread's shard, if it can be (see `commands::ratelimit::split_local`).
/// One emptiness test while no key is split.
#[inline(always)]
fn split_local(worker: &Worker, idx: usize, spec: &CommandSpec, args: &Args) -> Option<Reply> {
    let mut s = worker.shard.borrow_mut();
    if s.hot.splits.is_empty() || s.locked {
        return None;
    }
    match spec.name {
        "tokenlease" | "cl.throttle" | "gcra" | "slidingwindow" => {
            crate::commands::ratelimit::split_local(&mut s, idx, spec.name, args)
        }
        _ => None,
    }
}

/// Adds the monitor line of a request that passed the checks to this
/// thread's feed (sent at the end of the turn; see `crate::monitor`),
/// unless it is one Redis does not show. A request queued inside MULTI is
/// shown when EXEC runs it, and EXEC itself after its commands (`turn/tx.rs`
/// feeds it), as Redis shows them.
#[cold]
#[inline(never)]
fn feed_monitors(worker: &Worker, conn: &ConnState, spec: &CommandSpec, items: &[Bytes]) {
    let queued = conn.tx.multi.is_some() && !runs_inside_multi(spec);
    let exec_later = spec.name == "exec" && conn.tx.multi.as_ref().is_some_and(|m| !m.aborted);
    if queued || exec_later || !crate::monitor::shown(spec.name, items) {
        return;
    }
    feed_line(worker, &conn.handle.addr.to_string(), items);
}

/// Adds the monitor line of `items`, sent from `addr`, to this thread's feed.
pub fn feed_line(worker: &Worker, addr: &str, items: &[Bytes]) {
    let us = worker.shared.clock.unix_us();
    crate::monitor::line(&mut worker.monitor_feed.borrow_mut(), us, addr, items);
}

fn count_rejected(worker: &Worker, idx: usize) {
    let stats = &worker.shard.borrow().stats;
    stats.rejected_calls[idx].add(1);
}

/// The one shard all keys of a request live on (`None`: no keys). Always
/// inlined: it is on every keyed command's path through [`plan`] (MULTI's
/// queueing calls it too, which would otherwise make it a call).
#[inline(always)]
fn single_shard(spec: &CommandSpec, args: &Args, shards: usize) -> Result<Option<usize>, OpError> {
    let all = args.all();
    let mut found = None;
    for p in spec.keys_in(all) {
        let s = slot_shard(key_slot(&all[p]), shards);
        match found {
            None => found = Some(s),
            Some(f) if f != s => return Err(cross_shard(spec)),
            _ => {}
        }
    }
    Ok(found)
}

/// The refusal of keys on several shards: a script's names the fix (the
/// scripts are the movable-keys rows scripts may not call).
#[cold]
fn cross_shard(spec: &CommandSpec) -> OpError {
    match spec.has(flags::MOVABLE_KEYS) && spec.has(flags::NO_SCRIPT) {
        true => OpError::ScriptCrossShard,
        false => OpError::CrossSlot,
    }
}

/// Plans a command over keys (`Exec::Keys`): whole on the one shard of its
/// keys, else split into one part per shard, merged when all are back.
/// Outside a transaction's locks (`in_run` false), a split goes through
/// the [`crate::state::SplitGate`]: `Err(args)` when a transaction over
/// several shards is in progress, and the command must run as one
/// (`Planned::Span`). The replication link's records always go split.
fn plan_split(
    at: &mut At<'_>,
    pipe: &mut Pipeline,
    spec: &CommandSpec,
    cmd: Cmd,
    args: Args,
    merge: Merge,
    in_run: bool,
) -> Result<(), Args> {
    let worker = at.worker;
    let shards = worker.shared.shards;
    let all = args.all();
    // A key without its value (`MSET a 1 b`) fails the whole command before
    // any part runs, or the shards holding complete pairs would write them.
    if !groups_complete(spec, all.len()) {
        count_rejected(worker, cmd.idx);
        pipe.slots.push(Slot::Ready(wrong_arity(spec.name)));
        return Ok(());
    }
    let owner = key_shards(spec, all, shards);
    if owner.windows(2).all(|w| w[0] == w[1]) {
        let shard = owner.first().copied().unwrap_or(worker.id);
        let part = pipe.run_on(at, shard, WHOLE, cmd, args);
        pipe.push_part(part);
        return Ok(());
    }
    let split = split_by_shard(spec, all, &owner, shards);
    if !in_run {
        let parts = split.iter().filter(|sp| sp.shard != worker.id).count() as u64;
        let gate = &worker.shared.split_gate;
        if cmd.link {
            gate.count(worker.id, parts);
        } else if !gate.enter(worker.id, parts) {
            // A shard busy with a script answers BUSY at once, as Redis
            // does, rather than wait under the locks for the script's end.
            let busy = |s: usize| worker.shared.scripts.busy(s);
            if !owner.iter().any(|&s| busy(s)) {
                return Err(args);
            }
            gate.count(worker.id, parts);
        }
    }
    let mut parts = Vec::new();
    let mut ordinals = Vec::new();
    for sp in split {
        let part = parts.len() as u32;
        let ran = pipe.run_on(at, sp.shard, part, cmd.part(), Args::new(sp.argv));
        // A remote part answered at once (a busy script's shard) is sent
        // nowhere: the gate counts it answered now.
        if !in_run && sp.shard != worker.id && matches!(ran, Part::Ready(_)) {
            worker.shared.split_answered(worker.id, 1);
        }
        parts.push(ran);
        ordinals.push(sp.ordinals);
    }
    pipe.slots.push(Slot::Split {
        cmd: cmd.idx,
        parts,
        merge,
        ordinals,
        nkeys: owner.len(),
    });
    Ok(())
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
        worker,
    };
    let result = f(&mut ctx, args);
    let stats = &worker.shard.borrow().stats;
    let reply = stats.count_call(idx, result);
    stats.count_reply(&reply);
    reply
}
