//! Replication commands: REPLICAOF (and its old name SLAVEOF), REPLCONF,
//! PSYNC, ROLE, WAIT, and INFO's replication section. Shapes and wording are
//! Redis 7's, which Sentinel and replicas parse.
//!
//! PSYNC only marks the connection: the event loop hands its socket to a
//! sender thread (`replication::feed`), which answers `+CONTINUE` or
//! `+FULLRESYNC`. REPLICAOF changes the role; the replication thread
//! (`replication::link`) notices and connects.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use leasehold_protocol::{Args, Reply};

use super::flags::{ADMIN, FAST, LOADING, NO_MULTI, STALE};
use super::{cmd, CommandSpec, Exec, NO_KEYS};
use crate::error::OpError;
use crate::replication::role::Target;
use crate::session::{Blocked, ConnCtx, Handover, WaitAcks};
use crate::state::Shared;

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("replicaof", 3, ADMIN | LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(replicaof), "Configures a server as replica of another, or promotes it to a master."),
    cmd("slaveof", 3, ADMIN | LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(replicaof), "Sets a Redis server as a replica of another, or promotes it to being a master."),
    cmd("replconf", -1, ADMIN | LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(replconf), "An internal command for configuring the replication stream."),
    cmd("psync", -3, ADMIN | LOADING | STALE | NO_MULTI | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(psync), "An internal command used in replication."),
    cmd("role", 1, FAST | LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(role), "Returns the replication role."),
    cmd("wait", 3, super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(wait), "Blocks until the asynchronous replication of all preceding write commands sent by the connection are completed."),
];

fn kill_client(shared: &Shared, id: Option<u64>) {
    if let Some(c) = id.and_then(|id| shared.clients.lock().get(&id).cloned()) {
        c.kill();
    }
}

/// `REPLICAOF host port` / `REPLICAOF NO ONE`. Allowed while a full sync
/// loads (unlike Redis, whose replica keeps its old data until a payload is
/// complete), so a replica whose payload was cut short can be pointed
/// elsewhere or promoted.
fn replicaof(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let host = String::from_utf8_lossy(&a.next()?).into_owned();
    let port = a.next()?;
    let repl = &ctx.shared.repl;
    if host.eq_ignore_ascii_case("no") && port.eq_ignore_ascii_case(b"one") {
        if repl.is_replica() {
            if repl.is_loading() {
                tracing::warn!(
                    "REPLICAOF NO ONE during a full sync: this primary serves the part loaded"
                );
            }
            let link = repl.promote();
            kill_client(ctx.shared, link);
            ctx.shared.config.write().replication.replicaof.clear();
            tracing::info!(
                "MASTER MODE enabled (user request from id={})",
                ctx.conn.handle.id
            );
        }
        return Ok(Reply::ok());
    }
    let port = leasehold_protocol::int::parse_i64(&port)
        .filter(|p| (0..=65535).contains(p))
        .ok_or(OpError::InvalidMasterPort)?;
    let target = Target {
        host,
        port: port as u16,
    };
    if repl.target().as_ref() == Some(&target) {
        return Ok(Reply::Simple(
            "OK Already connected to specified master".into(),
        ));
    }
    tracing::info!(
        "REPLICAOF {}:{} enabled (user request from id={})",
        target.host,
        target.port,
        ctx.conn.handle.id
    );
    ctx.shared.config.write().replication.replicaof = format!("{} {}", target.host, target.port);
    let link = repl.follow(target);
    kill_client(ctx.shared, link);
    Ok(Reply::ok())
}

/// `REPLCONF <option> <value> ...`: what a replica says of itself, and its
/// ACKs.
fn replconf(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    if a.remaining() % 2 != 0 {
        return Err(OpError::Syntax);
    }
    while a.remaining() > 0 {
        let option = a.word()?.to_ascii_lowercase();
        let value = a.next()?;
        match option.as_str() {
            "listening-port" => {
                ctx.conn.replica.listening_port = leasehold_protocol::int::parse_u64(&value)
                    .and_then(|p| u16::try_from(p).ok())
                    .ok_or(OpError::NotInteger)?;
            }
            "ip-address" => {
                ctx.conn.replica.ip = Some(String::from_utf8_lossy(&value).into_owned());
            }
            "capa" => {
                if value.eq_ignore_ascii_case(b"lh1") {
                    ctx.conn.replica.lh1 = true;
                }
            }
            // An ACK outside a replica's stream, or GETACK to a node that is
            // not a replica: Redis answers neither.
            "ack" | "getack" => {
                ctx.conn.no_reply = true;
                return Ok(Reply::ok());
            }
            "rdb-only" | "rdb-filter-only" => {}
            _ => {
                return Err(OpError::UnrecognizedReplconf(option));
            }
        }
    }
    Ok(Reply::ok())
}

/// `PSYNC <replid> <offset>`: hands the connection to a sender (see the
/// module documentation). Refused on a replica (no chained replication)
/// and to a replica that cannot load Leasehold's snapshot.
fn psync(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let replid = String::from_utf8_lossy(&a.next()?).into_owned();
    let offset = a.i64()?;
    let repl = &ctx.shared.repl;
    if repl.is_replica() {
        if !repl.link.lock().up {
            return Err(OpError::NoMasterLink);
        }
        return Err(OpError::NoChainedReplication);
    }
    if !ctx.conn.replica.lh1 {
        return Err(OpError::NotLeaseholdReplica);
    }
    ctx.conn.handover = Some(Handover::Psync {
        replid,
        offset,
        hello: ctx.conn.replica.clone(),
    });
    ctx.conn.no_reply = true;
    Ok(Reply::ok())
}

/// `WAIT numreplicas timeout` (ms, 0: no limit) -> the number of replicas
/// that acknowledged every write made so far (by any connection: the
/// stream's offset when WAIT runs, which includes this connection's
/// writes). When fewer have, the replicas are asked for an ACK and the
/// connection waits (see `Turn::check_blocked`).
fn wait(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let replicas = a.i64()?;
    let timeout = a.i64()?;
    if timeout < 0 {
        return Err(OpError::NegativeTimeout);
    }
    let repl = &ctx.shared.repl;
    if repl.is_replica() {
        return Err(OpError::WaitOnReplica);
    }
    let offset = repl.backlog.offset();
    let acked = repl.acked(offset);
    if acked as i64 >= replicas {
        return Ok(Reply::Int(acked as i64));
    }
    repl.request_acks();
    ctx.conn.blocked = Some(Blocked::Acks(WaitAcks {
        offset,
        replicas: replicas.max(0) as usize,
        deadline: (timeout > 0).then(|| Instant::now() + Duration::from_millis(timeout as u64)),
    }));
    ctx.conn.no_reply = true;
    Ok(Reply::ok())
}

/// The link's state as ROLE names it.
fn link_state(shared: &Shared) -> &'static str {
    let link = shared.repl.link.lock();
    match (link.up, link.syncing) {
        (_, true) => "sync",
        (true, false) => "connected",
        (false, false) => "connect",
    }
}

/// `ROLE`: `master <offset> [[ip port offset] ...]` or `slave <host>
/// <port> <state> <offset>`.
fn role(ctx: &mut ConnCtx<'_>, _a: &mut Args) -> Result<Reply, OpError> {
    let repl = &ctx.shared.repl;
    let offset = repl.backlog.offset() as i64;
    if let Some(t) = repl.target() {
        // As Redis: the offset only while the link is up, else -1.
        let state = link_state(ctx.shared);
        return Ok(Reply::Array(vec![
            Reply::bulk("slave"),
            Reply::bulk(t.host),
            Reply::Int(i64::from(t.port)),
            Reply::bulk(state),
            Reply::Int(if state == "connected" { offset } else { -1 }),
        ]));
    }
    let replicas = repl
        .replicas()
        .into_iter()
        .map(|r| {
            Reply::Array(vec![
                Reply::bulk(r.ip),
                Reply::bulk(r.port.to_string()),
                Reply::bulk(r.ack.to_string()),
            ])
        })
        .collect();
    Ok(Reply::Array(vec![
        Reply::bulk("master"),
        Reply::Int(offset),
        Reply::Array(replicas),
    ]))
}

/// INFO's `# Replication` section, fields in Redis 7's order.
pub fn info_replication(shared: &Shared, out: &mut String) {
    let repl = &shared.repl;
    let backlog = &repl.backlog;
    let offset = backlog.offset();
    out.push_str("# Replication\r\n");
    if let Some(t) = repl.target() {
        let link = repl.link.lock();
        let now = Instant::now();
        // As Redis: -1 while no link is attached.
        let last_io = match (link.up, link.last_io) {
            (true, Some(t)) => now.duration_since(t).as_secs() as i64,
            _ => -1,
        };
        let _ = write!(
            out,
            "role:slave\r\nmaster_host:{}\r\nmaster_port:{}\r\nmaster_link_status:{}\r\nmaster_last_io_seconds_ago:{}\r\nmaster_sync_in_progress:{}\r\nslave_read_repl_offset:{offset}\r\nslave_repl_offset:{offset}\r\n",
            t.host,
            t.port,
            // As Redis: down until a full sync's payload is loaded.
            if link.up && !link.syncing { "up" } else { "down" },
            last_io,
            u8::from(link.syncing),
        );
        if !link.up || link.syncing {
            let down = link
                .down_since
                .map_or(-1, |t| now.duration_since(t).as_secs() as i64);
            let _ = write!(out, "master_link_down_since_seconds:{down}\r\n");
        }
        let priority = shared.config.read().replication.replica_priority;
        let _ = write!(
            out,
            "slave_priority:{priority}\r\nslave_read_only:1\r\nreplica_announced:1\r\n"
        );
    } else {
        out.push_str("role:master\r\n");
    }
    let replicas = repl.replicas();
    let _ = write!(out, "connected_slaves:{}\r\n", replicas.len());
    for (i, r) in replicas.iter().enumerate() {
        let _ = write!(
            out,
            "slave{i}:ip={},port={},state={},offset={},lag={}\r\n",
            r.ip,
            r.port,
            r.state,
            r.ack,
            r.ack_at.elapsed().as_secs()
        );
    }
    let ids = repl.ids();
    let _ = write!(
        out,
        "master_failover_state:no-failover\r\nmaster_replid:{}\r\nmaster_replid2:{}\r\nmaster_repl_offset:{offset}\r\nsecond_repl_offset:{}\r\nrepl_backlog_active:1\r\nrepl_backlog_size:{}\r\nrepl_backlog_first_byte_offset:{}\r\nrepl_backlog_histlen:{}\r\n",
        ids.replid,
        ids.replid2,
        ids.second_offset,
        backlog.capacity(),
        backlog.first_byte_offset(),
        backlog.histlen(),
    );
}
