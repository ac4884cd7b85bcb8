//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH.
//!
//! These rows run on the connection's thread ([`Exec::Conn`]) and change
//! only the connection's transaction state ([`crate::session::TxState`]):
//! what needs shards (registering watched keys, running the queue at
//! EXEC) they leave in [`TxState::pending`] for the thread, which does it
//! right after the command (`turn/tx.rs`). While MULTI is open the
//! dispatcher queues every other command (answering `+QUEUED`) instead of
//! running it; `docs/transactions.md` describes how EXEC runs the queue
//! atomically, on one shard or across several.
//!
//! [`TxState::pending`]: crate::session::TxState::pending

use leasehold_protocol::{Args, Reply};

use super::flags::{FAST, LOADING, STALE};
use super::{cmd, CommandSpec, Exec, NO_KEYS};
use crate::error::OpError;
use crate::session::{ConnCtx, Multi, TxWork};

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("multi", 1, FAST | LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(multi), "Starts a transaction."),
    cmd("exec", 1, LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(exec), "Executes all commands in a transaction."),
    cmd("discard", 1, FAST | LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(discard), "Discards a transaction."),
    cmd("watch", -2, FAST | LOADING | STALE | super::flags::NO_SCRIPT, (1, -1, 1), Exec::Conn(watch), "Monitors changes to keys to determine the execution of a transaction."),
    cmd("unwatch", 1, FAST | LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(unwatch), "Forgets about watched keys of a transaction."),
];

/// Whether a row runs at once inside MULTI instead of being queued: the
/// transaction commands themselves, and QUIT and RESET, which end the
/// connection's state whatever it is.
pub fn runs_inside_multi(spec: &CommandSpec) -> bool {
    matches!(
        spec.name,
        "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
    )
}

fn multi(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    a.finish()?;
    let tx = &mut ctx.conn.tx;
    if tx.multi.is_some() {
        return Err(OpError::NestedMulti);
    }
    tx.multi = Some(Multi::new(ctx.shared.shards));
    Ok(Reply::ok())
}

fn exec(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let asking = std::mem::take(&mut ctx.conn.cluster.asking);
    let tx = &mut ctx.conn.tx;
    // Arguments (the dispatcher lets them through to here): EXECABORT, in
    // MULTI or not, and an open transaction ends with nothing run.
    if a.remaining() > 0 {
        if tx.multi.take().is_some() {
            tx.pending = Some(TxWork::Unwatch(std::mem::take(&mut tx.watched)));
        }
        return Err(OpError::ExecAbortBecause(Box::new(OpError::Arity("exec"))));
    }
    let mut multi = tx.multi.take().ok_or(OpError::ExecWithoutMulti)?;
    multi.asking = asking;
    let watched = std::mem::take(&mut tx.watched);
    // In Redis's order: the cluster's judgement of the whole transaction,
    // then the write checks, then the commands refused while queued.
    // The replication link's transactions (a primary's effects framed
    // MULTI .. EXEC) are not the replica's to judge.
    let judged = |ctx: &ConnCtx<'_>| match ctx.conn.is_link() {
        true => None,
        false => cluster_refusal(ctx, &multi).or_else(|| write_refusal(ctx, &multi)),
    };
    let refusal = judged(ctx).or_else(|| multi.aborted.then_some(OpError::ExecAbort));
    if let Some(why) = refusal {
        ctx.conn.tx.pending = Some(TxWork::Unwatch(watched));
        return Err(why);
    }
    let tx = &mut ctx.conn.tx;
    tx.pending = Some(TxWork::Exec(multi, watched));
    // The thread replaces this with the transaction's replies.
    Ok(Reply::NilArray)
}

/// Cluster mode's judgement of a transaction at EXEC, as Redis's: its
/// commands must share one hash slot (`CROSSSLOT`), and that slot must be
/// served here by the topology in force now (`-MOVED` to its owner,
/// `-CLUSTERDOWN`; it may have moved since the commands were queued), the
/// whole EXEC answered and nothing of it run. A slot in migration (either
/// side) answers `-TRYAGAIN`: the queue's keys may be on both nodes, and
/// each queued command is judged alone where it runs, so part of the
/// transaction could run and the rest answer `-ASK`; the client sends it
/// again once the slot has moved (Redis runs it when all of its keys are
/// on one side). One exception, as in Redis: on the importing node, after
/// ASKING, a transaction naming one key runs (that key is served here,
/// moved already or new).
fn cluster_refusal(ctx: &ConnCtx<'_>, multi: &Multi) -> Option<OpError> {
    let cluster = ctx.shared.cluster.as_ref()?;
    let e = if multi.cross_slot {
        OpError::ClusterCrossSlot
    } else {
        let slot = multi.slot?;
        let read_ok = ctx.conn.cluster.readonly && !multi.writes;
        match cluster.serves(slot, read_ok, multi.asking) {
            Err(e) => e,
            Ok(()) if cluster.moving_any() => {
                let moving = cluster.moving();
                let served_here = multi.asking && !multi.several_keys;
                if moving.migrating.contains_key(&slot)
                    || (moving.importing.contains_key(&slot) && !served_here)
                {
                    OpError::TryAgain
                } else {
                    return None;
                }
            }
            Ok(()) => return None,
        }
    };
    ctx.shared.shard_stats[ctx.worker.id].count_redirect(&e);
    Some(e)
}

/// Writes judged for the whole transaction at EXEC, as Redis does: a
/// transaction with writes on a read-only replica or while persistence
/// fails, or with `DENYOOM` commands past maxmemory, answers `EXECABORT
/// ... because of: <the refusal>`. The queued commands were checked when
/// queued and run at EXEC without these checks (so a queued REPLICAOF
/// does not refuse the writes queued after it).
fn write_refusal(ctx: &ConnCtx<'_>, multi: &Multi) -> Option<OpError> {
    match multi.writes {
        true => ctx.shared.write_refusal(),
        false => None,
    }
    .or_else(|| (multi.denyoom && ctx.shared.refuses_oom()).then_some(OpError::OutOfMemory))
    .map(|why| OpError::ExecAbortBecause(Box::new(why)))
}

fn discard(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    a.finish()?;
    ctx.conn.cluster.asking = false;
    let tx = &mut ctx.conn.tx;
    tx.multi.take().ok_or(OpError::DiscardWithoutMulti)?;
    tx.pending = Some(TxWork::Unwatch(std::mem::take(&mut tx.watched)));
    Ok(Reply::ok())
}

fn watch(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let tx = &mut ctx.conn.tx;
    if tx.multi.is_some() {
        return Err(OpError::WatchInsideMulti);
    }
    let mut fresh = Vec::new();
    while a.remaining() > 0 {
        let key = a.key()?;
        if !tx.watched.contains(&key) && !fresh.contains(&key) {
            fresh.push(key);
        }
    }
    tx.watched.extend(fresh.iter().cloned());
    tx.pending = Some(TxWork::Watch(fresh));
    Ok(Reply::ok())
}

fn unwatch(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    a.finish()?;
    let tx = &mut ctx.conn.tx;
    tx.pending = Some(TxWork::Unwatch(std::mem::take(&mut tx.watched)));
    Ok(Reply::ok())
}
