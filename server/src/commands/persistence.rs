//! Persistence commands: SAVE, BGSAVE, BGREWRITEAOF, LASTSAVE, and INFO's
//! persistence section. Replies and field names are Redis 7's.
//!
//! A command never writes a file: it posts a request to the persistence
//! thread (`persist::daemon`). SAVE blocks only its own connection until
//! the snapshot is on disk (Redis's SAVE stops the whole server; here the
//! other clients go on); BGSAVE and BGREWRITEAOF answer at once.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use leasehold_protocol::{Args, Reply};

use super::flags::{ADMIN, FAST, LOADING, NO_MULTI, STALE};
use super::{cmd, CommandSpec, Exec, NO_KEYS};
use crate::error::OpError;
use crate::persist::status::{Request, Ticket};
use crate::session::{Blocked, ConnCtx};
use crate::state::Shared;

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("save", 1, ADMIN | NO_MULTI | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(save), "Synchronously saves the database(s) to disk."),
    cmd("bgsave", -1, ADMIN | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(bgsave), "Asynchronously saves the database(s) to disk."),
    cmd("bgrewriteaof", 1, ADMIN | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(bgrewriteaof), "Asynchronously rewrites the append-only file to disk."),
    cmd("lastsave", 1, FAST | LOADING | STALE, NO_KEYS, Exec::Conn(lastsave), "Returns the Unix timestamp of the last successful save to disk."),
];

/// Blocks the connection until a snapshot is written; `shutdown` stops
/// the server after it (SHUTDOWN).
pub fn block_on_save(ctx: &mut ConnCtx<'_>, shutdown: bool) {
    let ticket = Arc::new(Ticket::default());
    ctx.shared
        .persist
        .request(Request::Save(Some(ticket.clone())));
    ctx.conn.blocked = Some(Blocked::Save { ticket, shutdown });
    ctx.conn.no_reply = true;
}

/// `SAVE` -> `+OK` once the snapshot is on disk.
fn save(ctx: &mut ConnCtx<'_>, _a: &mut Args) -> Result<Reply, OpError> {
    if ctx.shared.persist.save_pending() {
        return Err(OpError::BgsaveInProgress);
    }
    block_on_save(ctx, false);
    Ok(Reply::ok())
}

/// `BGSAVE [SCHEDULE]` -> `+Background saving started` (or `+Background
/// saving scheduled` with SCHEDULE while a log rewrite runs).
fn bgsave(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let schedule = match a.remaining() {
        0 => false,
        1 if a.word()? == "SCHEDULE" => true,
        _ => return Err(OpError::Syntax),
    };
    let persist = &ctx.shared.persist;
    if persist.save_pending() {
        return Err(OpError::BgsaveInProgress);
    }
    let rewriting = persist.rewrite_pending();
    if rewriting && !schedule {
        return Err(OpError::BgsaveWhileRewriting);
    }
    persist.request(Request::Save(None));
    Ok(Reply::simple(match rewriting {
        true => "Background saving scheduled",
        false => "Background saving started",
    }))
}

/// `BGREWRITEAOF` -> `+Background append only file rewriting started`.
fn bgrewriteaof(ctx: &mut ConnCtx<'_>, _a: &mut Args) -> Result<Reply, OpError> {
    let persist = &ctx.shared.persist;
    if persist.rewrite_pending() {
        return Err(OpError::RewriteInProgress);
    }
    let scheduled = persist.save_pending();
    persist.request(Request::Rewrite);
    Ok(Reply::simple(match scheduled {
        true => "Background append only file rewriting scheduled",
        false => "Background append only file rewriting started",
    }))
}

/// `LASTSAVE` -> Unix seconds of the last successful snapshot (of the
/// start when there was none).
fn lastsave(ctx: &mut ConnCtx<'_>, _a: &mut Args) -> Result<Reply, OpError> {
    Ok(Reply::Int(
        ctx.shared.persist.last_save_unix.load(Ordering::Relaxed) as i64,
    ))
}

/// INFO's `# Persistence` section.
pub fn info_persistence(shared: &Shared, out: &mut String) {
    let p = &shared.persist;
    let loading = shared.repl.is_loading();
    let changes = shared.sum(|s| s.changes.get()) - p.changes_at_save.load(Ordering::Relaxed);
    let status = |failed: bool| if failed { "err" } else { "ok" };
    let saving = p.saving.load(Ordering::SeqCst);
    let now_ms = shared.clock.now().unix_ms;
    let current_save = match saving {
        true => (now_ms.saturating_sub(p.save_started_ms.load(Ordering::Relaxed)) / 1000) as i64,
        false => -1,
    };
    let aof_on = p.aof_on.load(Ordering::SeqCst);
    let _ = write!(
        out,
        "# Persistence\r\nloading:{}\r\nasync_loading:0\r\ncurrent_cow_peak:0\r\ncurrent_cow_size:0\r\ncurrent_cow_size_age:0\r\ncurrent_fork_perc:0.00\r\ncurrent_save_keys_processed:0\r\ncurrent_save_keys_total:0\r\nrdb_changes_since_last_save:{changes}\r\nrdb_bgsave_in_progress:{}\r\nrdb_last_save_time:{}\r\nrdb_last_bgsave_status:{}\r\nrdb_last_bgsave_time_sec:{}\r\nrdb_current_bgsave_time_sec:{current_save}\r\nrdb_saves:{}\r\nrdb_last_cow_size:0\r\naof_enabled:{}\r\naof_rewrite_in_progress:{}\r\naof_rewrite_scheduled:{}\r\naof_last_rewrite_time_sec:{}\r\naof_last_bgrewrite_status:{}\r\naof_rewrites:{}\r\naof_last_write_status:{}\r\naof_last_cow_size:0\r\nmodule_fork_in_progress:0\r\nmodule_fork_last_cow_size:0\r\n",
        u8::from(loading),
        u8::from(saving),
        p.last_save_unix.load(Ordering::Relaxed),
        status(p.last_save_failed.load(Ordering::SeqCst)),
        p.last_save_secs.load(Ordering::Relaxed),
        p.saves.load(Ordering::Relaxed),
        u8::from(aof_on),
        u8::from(p.rewriting.load(Ordering::SeqCst)),
        u8::from(p.rewrite_queued()),
        p.last_rewrite_secs.load(Ordering::Relaxed),
        status(p.last_rewrite_failed.load(Ordering::SeqCst)),
        p.rewrites.load(Ordering::Relaxed),
        status(p.aof_write_failed.load(Ordering::SeqCst)),
    );
    if aof_on {
        let _ = write!(
            out,
            "aof_current_size:{}\r\naof_base_size:{}\r\naof_buffer_length:0\r\naof_delayed_fsync:{}\r\n",
            p.aof_size.load(Ordering::Relaxed),
            p.aof_base_size.load(Ordering::Relaxed),
            p.delayed_fsyncs.load(Ordering::Relaxed),
        );
    }
}
