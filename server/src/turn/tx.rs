//! Transactions, on the connection's thread and on the shards they take
//! (`docs/transactions.md` tells the whole protocol).
//!
//! EXEC runs its queue one of three ways, chosen from the shards its
//! commands and watched keys live on:
//! - **inline**: all on this thread's shard (or none): checked and run now,
//!   synchronously, so nothing else can run in between;
//! - **once**: all on one other shard, no connection command: the whole
//!   queue goes there as one [`TxMsg::Once`], which runs to the end before
//!   anything else on that shard, like any batch;
//! - **locked**: several shards, or connection commands among shard ones:
//!   the shards are locked one at a time in ascending order
//!   ([`TxMsg::Lock`], [`TxMsg::Granted`]), the queue runs in phases (the
//!   shard commands between two connection commands go out together as
//!   [`TxMsg::Run`]s), the last phase has every held shard publish its
//!   effects, and each shard is released ([`TxMsg::Release`]).
//!
//! A locked shard ([`Locks`]) runs only its holder's jobs: other batches,
//! one-shard transactions and lock requests wait in order, and its thread
//! serves none of its own connections (their commands could run here
//! inline), until the release. Every other message is taken as usual, so a
//! thread waiting for a lock keeps granting its own shard to others: with
//! ascending order, the holder of the highest lock in any chain of waiters
//! has all it needs, so it finishes and no cycle can form.

use std::collections::VecDeque;

use bytes::Bytes;
use leasehold_protocol::{Args, Reply};

use super::{Conn, Transport, Turn};
use crate::commands::span::{Next, SpanFn};
use crate::commands::{scripting, table, Exec};
use crate::dispatch::{plan, run_conn_command, At, Outbox, Pipeline, Planned, Route};
use crate::replication::backlog::Part;
use crate::session::Blocked;
use crate::session::{ConnState, Multi, TxWork};
use crate::shard::{Answer, Job, Msg, Shard, TxId, TxMsg, Worker};
use crate::slot::{key_slot, slot_shard};
use crate::state::GateGuard;

/// One thread's shard lock: the transaction holding it, the messages that
/// wait for its release, and the connections not served meanwhile.
#[derive(Default)]
pub(super) struct Locks {
    holder: Option<TxId>,
    deferred: VecDeque<Msg>,
    held: Vec<usize>,
}

impl Locks {
    /// Whether a transaction holds this thread's shard.
    pub(super) fn held(&self) -> bool {
        self.holder.is_some()
    }

    /// Keeps `msg` until the release when the shard is locked and `msg`
    /// would run something on it; otherwise hands it back. Unlocked, this
    /// costs one branch per message.
    pub(super) fn defer(&mut self, msg: Msg) -> Option<Msg> {
        if self.holder.is_none() {
            return Some(msg);
        }
        match msg {
            Msg::Batch { .. }
            | Msg::Apply { .. }
            | Msg::Cut(_)
            | Msg::Release
            | Msg::Tx(TxMsg::Lock { .. } | TxMsg::Once { .. }) => {
                self.deferred.push_back(msg);
                None
            }
            other => Some(other),
        }
    }

    /// True when the shard is locked: connection `key` is then served only
    /// after the release. Unlocked, one branch.
    pub(super) fn hold(&mut self, key: usize) -> bool {
        if self.holder.is_none() {
            return false;
        }
        if !self.held.contains(&key) {
            self.held.push(key);
        }
        true
    }
}

/// How an EXEC runs (see the module documentation).
enum Mode {
    Inline,
    Once(usize),
    Locked {
        /// Ascending.
        shards: Vec<usize>,
        /// How many of them are held (a prefix).
        granted: usize,
    },
}

/// A connection's EXEC while it runs.
pub(super) struct Running {
    tx: TxId,
    /// A queued command asked to close the connection (CLIENT KILL of
    /// itself): done once EXEC's reply is out.
    close_after: bool,
    /// EXEC's slot in the connection's pipeline (none inline).
    route: Option<Route>,
    mode: Mode,
    /// The requests not planned yet.
    queue: VecDeque<Vec<Bytes>>,
    /// A connection command waiting for the replies before it.
    conn_cmd: Option<(usize, Args)>,
    /// The transaction's replies, in order.
    pipe: Pipeline,
    /// Its jobs for other shards, per phase.
    outbox: Outbox,
    watched: Vec<Bytes>,
    /// `Run` or `Once` messages not answered yet.
    runs: usize,
    /// A watched key changed: the reply is the null array.
    dirty: bool,
    /// The last phase was sent: only its replies are awaited.
    last_sent: bool,
    /// A command spanning shards being driven, step by step.
    span: Option<SpanRun>,
    /// Started for one command spanning shards, not by EXEC: its reply is
    /// that command's, not an array.
    single: bool,
    /// A script whose KEYS live on several shards, run once they are all
    /// locked (table index, arguments).
    script: Option<(usize, Args)>,
    /// EXEC followed ASKING: each queued command is planned with the flag.
    asking: bool,
    /// Locked runs: split commands take the locked path while it lives.
    gate: Option<GateGuard>,
    /// Split parts begun before it may still be in flight: its first lock
    /// waits ([`crate::state::SplitGate::drained`]).
    draining: bool,
    /// Locked runs: the effects each held shard handed over after its
    /// last jobs, appended to the stream as one unit at the end.
    parts: Vec<Part>,
    /// The client's address (EXEC's monitor line).
    addr: std::net::SocketAddr,
}

/// A command spanning shards inside a transaction (`commands::span`): its
/// table index, driver and arguments, the step it is at, and the first
/// slot of the transaction's pipeline that holds its step's replies.
struct SpanRun {
    idx: usize,
    drive: SpanFn,
    args: Vec<Bytes>,
    step: usize,
    base: usize,
}

impl SpanRun {
    fn new(idx: usize, args: Args) -> Option<SpanRun> {
        let Exec::Span(_, drive) = table().commands[idx].exec else {
            return None;
        };
        Some(SpanRun {
            idx,
            drive,
            args: args.into_inner(),
            step: 0,
            base: 0,
        })
    }
}

fn shard_of(key: &[u8], shards: usize) -> usize {
    slot_shard(key_slot(key), shards)
}

/// Does what a transaction command left in `TxState::pending` right after
/// it ran, and returns the reply to send now: `reply`, or `None` when it is
/// EXEC's and comes once the transaction ran (the connection then waits).
pub(super) fn after_command<T>(at: &mut At<'_>, c: &mut Conn<T>, reply: Reply) -> Option<Reply> {
    let work = c.state.tx.pending.take()?;
    let client = c.state.handle.id;
    match work {
        TxWork::Watch(keys) => watch(at.worker, client, keys, true),
        TxWork::Unwatch(keys) => watch(at.worker, client, keys, false),
        TxWork::Exec(multi, watched) => return start(at, c, multi, watched),
    }
    Some(reply)
}

/// Whether `c` has a transaction command's work to do after the command.
pub(super) fn has_work<T>(c: &Conn<T>) -> bool {
    c.state.tx.pending.is_some()
}

/// Registers (`on`) or forgets client `client`'s watches of `keys` on
/// their shards: this thread's at once, the others' by message (after
/// anything this connection sent them before).
pub(super) fn watch(worker: &Worker, client: u64, keys: Vec<Bytes>, on: bool) {
    if keys.is_empty() {
        return;
    }
    let shards = worker.shared.shards;
    let mut per: Vec<Vec<Bytes>> = vec![Vec::new(); shards];
    for k in keys {
        per[shard_of(&k, shards)].push(k);
    }
    for (s, keys) in per.into_iter().enumerate() {
        if keys.is_empty() {
            continue;
        }
        if s == worker.id {
            let store = &mut worker.shard.borrow_mut().store;
            match on {
                true => store.watch(client, &keys),
                false => store.unwatch(client, &keys),
            }
            continue;
        }
        let msg = match on {
            true => TxMsg::Watch { client, keys },
            false => TxMsg::Unwatch { client, keys },
        };
        worker.mailboxes[s].send(Msg::Tx(msg));
    }
}

/// Starts command `idx` whose keys live on several shards (`Planned::Span`)
/// as a transaction over those shards, locked: the connection owes its
/// reply (a slot of its pipeline) until it ran. Nothing it watches is
/// checked or forgotten.
pub(super) fn start_span<T>(at: &mut At<'_>, c: &mut Conn<T>, idx: usize, args: Args) {
    let worker = at.worker;
    let n = worker.shared.shards;
    let spec = &table().commands[idx];
    let all = args.all();
    let script = scripting::is_script(idx);
    let mut shards: Vec<usize> =
        match script && scripting::needs_every_shard(&worker.shared.scripts, idx, all) {
            true => (0..n).collect(),
            false => spec.keys_in(all).map(|p| shard_of(&all[p], n)).collect(),
        };
    if script {
        // The script runs here: this thread's shard is held too, so no
        // thread waits inside a script for a shard whose own thread
        // waits in another (a waiting thread always holds its shard).
        shards.push(worker.id);
    }
    shards.sort_unstable();
    shards.dedup();
    let mut run = Running::new(at, c, Mode::Locked { shards, granted: 0 }, VecDeque::new());
    match (script, spec.exec) {
        (true, _) => run.script = Some((idx, args)),
        (false, Exec::Span(..)) => run.span = SpanRun::new(idx, args),
        // A command split over shards while a transaction over several is
        // in progress (`SplitGate`): a queue of one, planned (and split)
        // under the locks.
        (false, _) => run.queue.push_back(args.into_inner()),
    }
    run.single = true;
    run.route = Some(c.pipe.expect(at.conn));
    run.begin_locking(worker, at.conn);
    c.running = Some(Box::new(run));
}

impl Running {
    fn new<T>(at: &At<'_>, c: &Conn<T>, mode: Mode, queue: VecDeque<Vec<Bytes>>) -> Running {
        let tx = TxId {
            thread: at.worker.id,
            conn: at.conn,
            client: c.state.handle.id,
        };
        Running {
            tx,
            route: None,
            mode,
            queue,
            conn_cmd: None,
            pipe: Pipeline::default(),
            outbox: Outbox::new(at.worker.shared.shards),
            watched: Vec::new(),
            runs: 0,
            dirty: false,
            last_sent: false,
            close_after: false,
            span: None,
            single: false,
            script: None,
            asking: false,
            gate: None,
            draining: false,
            parts: Vec::new(),
            addr: c.state.handle.addr,
        }
    }
}

/// Starts EXEC: inline it runs now and returns the reply; otherwise the
/// connection owes EXEC's reply (a slot of its pipeline) until it ran.
fn start<T>(at: &mut At<'_>, c: &mut Conn<T>, multi: Multi, watched: Vec<Bytes>) -> Option<Reply> {
    let worker = at.worker;
    let n = worker.shared.shards;
    let mut touched = multi.shards;
    for k in &watched {
        touched[shard_of(k, n)] = true;
    }
    let list: Vec<usize> = (0..n).filter(|&s| touched[s]).collect();
    let mode = if list.iter().all(|&s| s == worker.id) {
        Mode::Inline
    } else if list.len() == 1 && !multi.conn_commands {
        Mode::Once(list[0])
    } else {
        Mode::Locked {
            shards: list,
            granted: 0,
        }
    };
    let mut run = Running::new(at, c, mode, multi.queued.into());
    run.watched = watched;
    run.asking = multi.asking;
    let tx = run.tx;
    match &run.mode {
        Mode::Inline => {
            if !run.watched.is_empty() {
                let mut shard = worker.shard.borrow_mut();
                run.dirty = shard.store.watch_dirty(tx.client, &run.watched);
            }
            if !run.dirty {
                // Its records are one unit: framed when they name two or
                // more slots, which a replica may hold on two shards.
                let opened = worker.shard.borrow_mut().store.effects_mut().begin_unit();
                run.advance(worker, &mut c.state);
                if opened {
                    worker.shard.borrow_mut().store.effects_mut().end_unit();
                }
            }
            c.state.close |= run.close_after;
            return Some(run.finish(worker));
        }
        Mode::Once(_) => {
            run.route = Some(c.pipe.expect(at.conn));
            run.advance(worker, &mut c.state);
        }
        Mode::Locked { .. } => {
            run.route = Some(c.pipe.expect(at.conn));
            run.begin_locking(worker, at.conn);
        }
    }
    c.running = Some(Box::new(run));
    None
}

impl Running {
    /// Starts a locked run: split commands begun before it are waited for
    /// ([`SplitGate`]), then the first shard is asked for its lock (now,
    /// or by [`Running::lock_when_drained`] from the event loop, `conn`
    /// being listed in [`Worker::draining`] meanwhile).
    fn begin_locking(&mut self, worker: &Worker, conn: usize) {
        self.gate = Some(worker.shared.split_gate.begin());
        self.draining = true;
        if !self.lock_when_drained(worker) {
            worker.draining.borrow_mut().push(conn);
        }
    }

    /// Asks for the first lock once the split commands this run waits for
    /// were answered; whether it did (or had nothing to wait for).
    pub(super) fn lock_when_drained(&mut self, worker: &Worker) -> bool {
        if !self.draining {
            return true;
        }
        if !worker.shared.split_gate.drained() {
            return false;
        }
        self.draining = false;
        if let Mode::Locked { shards, .. } = &self.mode {
            self.lock(worker, shards[0]);
        }
        true
    }

    /// Asks `shard` for its lock, with the watched keys it holds.
    fn lock(&self, worker: &Worker, shard: usize) {
        let n = worker.shared.shards;
        let watch = self.watched_on(shard, n);
        let msg = TxMsg::Lock { tx: self.tx, watch };
        worker.mailboxes[shard].send(Msg::Tx(msg));
    }

    fn watched_on(&self, shard: usize, shards: usize) -> Vec<Bytes> {
        let on = |k: &&Bytes| shard_of(k, shards) == shard;
        self.watched.iter().filter(on).cloned().collect()
    }

    /// Plans the queue up to the next connection command that must wait
    /// for replies (this shard's commands run as they are planned), sends
    /// the phase's jobs, and returns whether the transaction is complete.
    fn advance(&mut self, worker: &Worker, state: &mut ConnState) -> bool {
        if self.last_sent {
            return self.runs == 0 && self.pipe.owed() == 0;
        }
        loop {
            if let Some((idx, mut args)) = self.script.take() {
                let result = Ok(self.run_script(worker, idx, &mut args));
                let reply = worker.shard.borrow().stats.count_call(idx, result);
                self.pipe.push_ready(reply);
                continue;
            }
            if let Some(mut sp) = self.span.take() {
                if self.pipe.owed() > 0 {
                    self.span = Some(sp);
                    break;
                }
                let replies = self.pipe.take_from(sp.base);
                let shards = worker.shared.shards;
                match (sp.drive)(&sp.args, shards, sp.step, &replies) {
                    Next::Run(steps) => {
                        sp.step += 1;
                        sp.base = self.pipe.len();
                        let mut at = At {
                            worker,
                            outbox: &mut self.outbox,
                            conn: self.tx.conn,
                        };
                        for step in steps {
                            self.pipe.run_step(&mut at, sp.idx, step);
                        }
                        self.span = Some(sp);
                    }
                    Next::Done(result) => {
                        let reply = worker.shard.borrow().stats.count_call(sp.idx, result);
                        self.pipe.push_ready(reply);
                    }
                }
                continue;
            }
            if let Some((idx, mut args)) = self.conn_cmd.take() {
                if self.pipe.owed() > 0 {
                    self.conn_cmd = Some((idx, args));
                    break;
                }
                let mut reply = run_conn_command(worker, state, idx, &mut args);
                // CLIENT KILL of itself: the connection closes once EXEC
                // has answered, not before the rest of the queue ran.
                self.close_after |= std::mem::take(&mut state.close);
                // Nothing blocks inside a transaction: WAIT answers the
                // acknowledgements so far, as in Redis (SAVE and SHUTDOWN,
                // which block too, are refused inside MULTI).
                if let Some(Blocked::Acks(wait)) = state.blocked.take() {
                    reply = Reply::Int(worker.shared.repl.acked(wait.offset) as i64);
                }
                state.no_reply = false;
                state.refresh(&worker.shared);
                // UNWATCH inside the transaction: nothing is watched by now.
                if let Some(TxWork::Watch(k) | TxWork::Unwatch(k)) = state.tx.pending.take() {
                    watch(worker, self.tx.client, k, false);
                }
                self.pipe.push_ready(reply);
                continue;
            }
            let Some(items) = self.queue.pop_front() else {
                break;
            };
            let mut at = At {
                worker,
                outbox: &mut self.outbox,
                conn: self.tx.conn,
            };
            state.cluster.asking = self.asking;
            state.tx.executing = !self.single;
            state.tx.in_run = true;
            match plan(&mut at, state, &mut self.pipe, items) {
                Planned::Conn(idx, args) => self.conn_cmd = Some((idx, args)),
                // Inside MULTI a script keeps to one shard: the
                // transaction's shards were locked before it was seen.
                Planned::Span(idx, args) if scripting::is_script(idx) => {
                    use crate::error::OpError;
                    let every =
                        scripting::needs_every_shard(&worker.shared.scripts, idx, args.all());
                    let refused = Err(match every {
                        true => OpError::ScriptEveryShardInMulti,
                        false => OpError::ScriptCrossShard,
                    });
                    let reply = worker.shard.borrow().stats.count_call(idx, refused);
                    self.pipe.push_ready(reply);
                }
                Planned::Span(idx, args) => {
                    self.span = SpanRun::new(idx, args).map(|mut sp| {
                        sp.base = self.pipe.len();
                        sp
                    })
                }
                Planned::Queued => {}
            }
        }
        // The flag lasts the queue's commands only (one refused before the
        // cluster check would leave it set).
        state.cluster.asking = false;
        state.tx.executing = false;
        state.tx.in_run = false;
        let last = self.queue.is_empty() && self.conn_cmd.is_none() && self.span.is_none();
        let tx = self.tx;
        match &self.mode {
            Mode::Inline => {}
            &Mode::Once(s) => {
                let jobs = self.outbox.take(s).unwrap_or_default();
                let watch = self.watched.clone();
                worker.mailboxes[s].send(Msg::Tx(TxMsg::Once { tx, jobs, watch }));
                self.runs += 1;
            }
            Mode::Locked { shards, .. } => {
                for &s in shards.iter().filter(|&&s| s != worker.id) {
                    let jobs = self.outbox.take(s);
                    if jobs.is_none() && !last {
                        continue;
                    }
                    let jobs = jobs.unwrap_or_default();
                    let msg = TxMsg::Run { tx, jobs, last };
                    worker.mailboxes[s].send(Msg::Tx(msg));
                    self.runs += 1;
                }
            }
        }
        self.last_sent = last;
        last && self.runs == 0 && self.pipe.owed() == 0
    }

    /// Runs script row `idx` on this thread's shard with every shard of
    /// the transaction locked: a `redis.call` for another of them is sent
    /// there as a `Run` and waited for here (see [`wait_ran`]).
    fn run_script(&self, worker: &Worker, idx: usize, args: &mut Args) -> Reply {
        let Mode::Locked { shards, .. } = &self.mode else {
            return crate::error::OpError::ShardUnavailable.reply();
        };
        let tx = self.tx;
        let mut call = |shard: usize, job: Job| -> Reply {
            let msg = TxMsg::Run {
                tx,
                jobs: vec![job],
                last: false,
            };
            if !worker.mailboxes[shard].send(Msg::Tx(msg)) {
                return crate::error::OpError::ShardUnavailable.reply();
            }
            wait_ran(worker, tx, shard)
        };
        let across = scripting::Across {
            shards,
            call: &mut call,
        };
        // While the script is busy the other shards count as busy too: the
        // threads that own them serve their connections (SCRIPT KILL,
        // SHUTDOWN NOSAVE), answering BUSY for those shards.
        let _held = worker.shared.scripts.hold_for(shards, worker.id);
        let mut shard = worker.shard.borrow_mut();
        scripting::run_across(&mut shard, idx, args, across)
    }

    /// Ends the transaction: forgets the watches, releases the shards held
    /// (this one's effects published first, while still held), and returns
    /// EXEC's reply.
    fn finish(&mut self, worker: &Worker) -> Reply {
        watch(
            worker,
            self.tx.client,
            std::mem::take(&mut self.watched),
            false,
        );
        if let Mode::Locked { shards, granted } = &self.mode {
            let held = &shards[..*granted];
            if held.contains(&worker.id) {
                let own = worker.shard.borrow_mut().store.effects_mut().take_part();
                self.parts.extend(own);
            }
            // Every shard's part enters the stream as one unit before any
            // shard is released, so nothing written after the transaction
            // comes before it.
            worker.shared.repl.backlog.append_unit(&self.parts);
            for &s in held {
                let msg = TxMsg::Release { tx: self.tx };
                worker.mailboxes[s].send(Msg::Tx(msg));
            }
        }
        if !self.single && worker.shared.monitors.active() {
            let exec = [Bytes::from_static(b"EXEC")];
            crate::dispatch::feed_line(worker, &self.addr.to_string(), &exec);
        }
        match (self.dirty, self.single) {
            (true, _) => Reply::NilArray,
            // The command's own reply (a split one merged), counted when
            // it is written.
            (false, true) => self
                .pipe
                .take_merged(worker)
                .pop()
                .unwrap_or_else(|| crate::error::OpError::ShardUnavailable.reply()),
            (false, false) => Reply::Array(self.pipe.take_replies(worker)),
        }
    }
}

/// Waits on this thread's mailbox for `shard`'s answer to the one job
/// `tx` sent it, keeping every other message for the event loop
/// ([`Worker::stash`]). The wait ends: `shard` is locked for `tx`, so its
/// thread serves it, and that thread is not waiting the same way itself
/// (a thread waits only while it holds its own shard). At shutdown, or
/// without a mailbox to wait on, the answer is that the shard is
/// unavailable.
fn wait_ran(worker: &Worker, tx: TxId, shard: usize) -> Reply {
    let unavailable = || crate::error::OpError::ShardUnavailable.reply();
    let Some(inbox) = &worker.inbox else {
        return unavailable();
    };
    loop {
        match inbox.recv_timeout(std::time::Duration::from_millis(100)) {
            Ok(Msg::Tx(TxMsg::Ran {
                tx: t,
                shard: s,
                mut replies,
                ..
            })) if t == tx && s == shard => return replies.pop().unwrap_or_else(unavailable),
            Ok(other) => worker.stash.borrow_mut().push_back(other),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                if worker
                    .shared
                    .shutting_down
                    .load(std::sync::atomic::Ordering::SeqCst)
                {
                    return unavailable();
                }
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return unavailable(),
        }
    }
}

/// Runs a transaction's jobs on `shard`, in order.
fn run_jobs(shard: &mut Shard, jobs: Vec<Job>) -> Vec<Reply> {
    let run = |mut j: Job| shard.run(j.cmd, j.run, j.counted, j.link, &mut j.args);
    jobs.into_iter().map(run).collect()
}

impl<T: Transport> Turn<T> {
    /// Handles a transaction's message (see [`TxMsg`]).
    pub(super) fn deliver_tx(&mut self, msg: TxMsg) {
        let worker = self.worker.clone();
        let me = worker.id;
        let answer = |tx: TxId, msg: TxMsg| worker.mailboxes[tx.thread].send(Msg::Tx(msg));
        let ran = |tx: TxId, replies: Vec<Reply>, dirty: bool, part: Option<Part>| {
            let shard = me;
            answer(
                tx,
                TxMsg::Ran {
                    tx,
                    shard,
                    replies,
                    dirty,
                    part,
                },
            )
        };
        match msg {
            TxMsg::Lock { tx, watch } => {
                self.locks.holder = Some(tx);
                let mut shard = worker.shard.borrow_mut();
                shard.locked = true;
                shard.tick();
                // What ran before is published; the transaction's effects
                // here are kept for its coordinator (`Running::finish`).
                shard.store.effects_mut().gather(true);
                let dirty = !watch.is_empty() && shard.store.watch_dirty(tx.client, &watch);
                drop(shard);
                answer(
                    tx,
                    TxMsg::Granted {
                        tx,
                        shard: me,
                        dirty,
                    },
                );
            }
            TxMsg::Run { tx, jobs, last } => {
                let mut shard = worker.shard.borrow_mut();
                let replies = run_jobs(&mut shard, jobs);
                let part = match last {
                    true => shard.store.effects_mut().take_part(),
                    false => None,
                };
                drop(shard);
                ran(tx, replies, false, part);
            }
            TxMsg::Once { tx, jobs, watch } => {
                let mut shard = worker.shard.borrow_mut();
                shard.tick();
                let dirty = !watch.is_empty() && shard.store.watch_dirty(tx.client, &watch);
                let replies = match dirty {
                    true => Vec::new(),
                    false => {
                        let opened = shard.store.effects_mut().begin_unit();
                        let replies = run_jobs(&mut shard, jobs);
                        if opened {
                            shard.store.effects_mut().end_unit();
                        }
                        replies
                    }
                };
                shard.publish();
                drop(shard);
                ran(tx, replies, dirty, None);
            }
            TxMsg::Release { .. } => {
                self.locks.holder = None;
                {
                    let mut shard = worker.shard.borrow_mut();
                    shard.locked = false;
                    shard.store.effects_mut().gather(false);
                    shard.publish();
                }
                while self.locks.holder.is_none() {
                    let Some(m) = self.locks.deferred.pop_front() else {
                        break;
                    };
                    // Only batches and transactions are deferred: no
                    // connection comes back from them.
                    let _ = self.deliver(m);
                }
                if self.locks.holder.is_none() {
                    for key in self.locks.held.drain(..) {
                        if let Some(c) = self.conns.get_mut(key) {
                            c.held = false;
                            self.resumed.push(key);
                        }
                    }
                }
            }
            TxMsg::Watch { client, keys } => worker.shard.borrow_mut().store.watch(client, &keys),
            TxMsg::Unwatch { client, keys } => {
                worker.shard.borrow_mut().store.unwatch(client, &keys)
            }
            TxMsg::Granted { tx, dirty, .. } => self.granted(tx, dirty),
            TxMsg::Ran {
                tx,
                shard,
                replies,
                dirty,
                part,
            } => self.ran(tx, shard, replies, dirty, part),
        }
    }

    /// The running EXEC of `tx`, with its connection's state.
    fn running(&mut self, tx: TxId) -> Option<(&mut Running, &mut ConnState)> {
        let c = self.conns.get_mut(tx.conn)?;
        let run = c.running.as_deref_mut().filter(|r| r.tx == tx)?;
        Some((run, &mut c.state))
    }

    fn granted(&mut self, tx: TxId, dirty: bool) {
        let worker = self.worker.clone();
        let Some((run, state)) = self.running(tx) else {
            return;
        };
        let Mode::Locked { shards, granted } = &mut run.mode else {
            return;
        };
        *granted += 1;
        let done = if dirty {
            run.dirty = true;
            true
        } else if *granted < shards.len() {
            let next = shards[*granted];
            run.lock(&worker, next);
            false
        } else {
            run.advance(&worker, state)
        };
        if done {
            self.complete(tx);
        }
    }

    fn ran(
        &mut self,
        tx: TxId,
        shard: usize,
        replies: Vec<Reply>,
        dirty: bool,
        part: Option<Part>,
    ) {
        let worker = self.worker.clone();
        let Some((run, state)) = self.running(tx) else {
            return;
        };
        run.runs -= 1;
        run.dirty |= dirty;
        run.parts.extend(part);
        let routes = run.outbox.answered(shard);
        for (route, reply) in routes.into_iter().zip(replies) {
            run.pipe.fill(route, Answer::Reply(reply));
        }
        if run.runs > 0 {
            return;
        }
        if run.dirty || run.advance(&worker, state) {
            self.complete(tx);
        }
    }

    /// Finishes `tx` and puts EXEC's reply in its connection's slot.
    fn complete(&mut self, tx: TxId) {
        let Some(c) = self.conns.get_mut(tx.conn) else {
            return;
        };
        let Some(mut run) = c.running.take() else {
            return;
        };
        let reply = run.finish(&self.worker);
        let close = run.close_after;
        c.state.close |= close;
        if let Some(route) = run.route {
            self.fill(route, Answer::Reply(reply));
        }
        // A connection closing by itself is not served again: list it for
        // the write that closes it.
        if let Some(c) = self.conns.get_mut(tx.conn).filter(|_| close) {
            if !c.listed {
                c.listed = true;
                self.dirty.push(tx.conn);
            }
        }
    }
}
