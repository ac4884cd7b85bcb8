//! Server commands: INFO, CONFIG, COMMAND, TIME, SHUTDOWN.
//!
//! INFO field names and CONFIG GET shapes are the ones Redis 7 tools read
//! (redis-cli, redis-benchmark, exporters).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use leasehold_protocol::{Args, Reply};

use super::flags::{self, ADMIN, FAST, LOADING, NO_AUTH, STALE};
use super::{cmd, table, CommandSpec, Exec, NO_KEYS};
use crate::error::OpError;
use crate::session::ConnCtx;
use crate::state::Shared;

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("info", -1, LOADING | STALE, NO_KEYS, Exec::Conn(info), "Returns information and statistics about the server."),
    cmd("config", -2, ADMIN | LOADING | STALE, NO_KEYS, Exec::Conn(super::config::config), "A container for server configuration commands."),
    cmd("command", -1, LOADING | STALE, NO_KEYS, Exec::Conn(command), "Returns detailed information about all commands."),
    cmd("time", 1, FAST | LOADING | STALE, NO_KEYS, Exec::Conn(time), "Returns the server time."),
    cmd("shutdown", -1, ADMIN | NO_AUTH | LOADING | STALE | flags::NO_MULTI, NO_KEYS, Exec::Conn(shutdown), "Synchronously saves the database(s) to disk and shuts down the Redis server."),
];

/// Bytes allocated by the process, from jemalloc when it is the allocator.
fn used_memory() -> u64 {
    let _ = tikv_jemalloc_ctl::epoch::advance();
    tikv_jemalloc_ctl::stats::allocated::read().unwrap_or(0) as u64
}

fn human_bytes(n: u64) -> String {
    let units = ["B", "K", "M", "G", "T"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n}B")
    } else {
        format!("{v:.2}{}", units[i])
    }
}

/// CPU time of the process and of its waited-for children, seconds, as
/// `(sys, user, sys_children, user_children)`: fields 14-17 of
/// `/proc/self/stat` (Linux), in clock ticks of 1/100 s (USER_HZ, 100 on
/// every mainstream Linux). Zeros where `/proc` is missing.
fn cpu_times() -> [f64; 4] {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let ticks: Vec<u64> = rest
        .split_whitespace()
        .skip(11) // fields 3..=13
        .take(4) // utime, stime, cutime, cstime
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let secs = |i: usize| ticks.get(i).copied().unwrap_or(0) as f64 / 100.0;
    [secs(1), secs(0), secs(3), secs(2)]
}

/// Every INFO section in output order, and whether plain `INFO` includes it
/// (as in Redis, `commandstats` and `errorstats` only come with `all`).
const SECTIONS: &[(&str, bool)] = &[
    ("server", true),
    ("clients", true),
    ("memory", true),
    ("persistence", true),
    ("stats", true),
    ("replication", true),
    ("cpu", true),
    ("commandstats", false),
    ("errorstats", false),
    ("keyspace", true),
    ("leasehold", false),
];

fn info(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let mut wanted: Vec<String> = Vec::new();
    while a.remaining() > 0 {
        wanted.push(String::from_utf8_lossy(&a.next()?).to_ascii_lowercase());
    }
    let default = wanted.is_empty() || wanted.iter().any(|w| w == "default");
    let all = wanted.iter().any(|w| w == "all" || w == "everything");
    let sections: Vec<&str> = SECTIONS
        .iter()
        .filter(|(name, in_default)| {
            all || (default && *in_default) || wanted.iter().any(|w| w == name)
        })
        .map(|(name, _)| *name)
        .collect();
    let text = render_info(ctx.shared, &sections);
    Ok(Reply::Verbatim("txt", Bytes::from(text)))
}

/// Renders INFO text for the given sections, in Redis's `# Section` format.
pub fn render_info(shared: &Shared, sections: &[&str]) -> String {
    let base = shared.baseline.lock().clone();
    let now = shared.stat_snapshot();
    let cfg = shared.config.read().clone();
    let mut out = String::new();
    for (i, section) in sections.iter().enumerate() {
        if i > 0 {
            out.push_str("\r\n");
        }
        let mut s = String::new();
        let w = &mut s;
        match *section {
            "server" => {
                let uptime = shared.started.elapsed().as_secs();
                let _ = write!(
                    w,
                    "# Server\r\nredis_version:{}\r\nleasehold_version:{}\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:64\r\nmultiplexing_api:epoll\r\nprocess_id:{}\r\nrun_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\nhz:{}\r\nexecutable:leasehold-server\r\nconfig_file:{}\r\nthreads:{}\r\n",
                    super::connection::REDIS_COMPAT_VERSION,
                    env!("CARGO_PKG_VERSION"),
                    std::env::consts::OS,
                    std::env::consts::ARCH,
                    std::process::id(),
                    shared.run_id,
                    shared.local_addr.port(),
                    uptime,
                    uptime / 86400,
                    cfg.expiry.hz,
                    cfg.file.as_deref().map(|p| p.display().to_string()).unwrap_or_default(),
                    shared.shards,
                );
            }
            "clients" => {
                let _ = write!(
                    w,
                    "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:0\r\ntracking_clients:0\r\n",
                    shared.clients.lock().len(),
                    cfg.net.maxclients
                );
            }
            "memory" => {
                let used = used_memory();
                let _ = write!(
                    w,
                    "# Memory\r\nused_memory:{used}\r\nused_memory_human:{}\r\nmaxmemory:0\r\nmaxmemory_human:0B\r\nmaxmemory_policy:noeviction\r\nmem_allocator:jemalloc\r\n",
                    human_bytes(used)
                );
            }
            "persistence" => super::persistence::info_persistence(shared, w),
            "stats" => {
                let _ = write!(
                    w,
                    "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nrejected_connections:{}\r\nexpired_keys:{}\r\nevicted_keys:0\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\nsync_full:{}\r\nsync_partial_ok:{}\r\nsync_partial_err:{}\r\ntotal_error_replies:{}\r\ncross_shard_batches:{}\r\n",
                    now.conns - base.conns,
                    now.commands - base.commands,
                    now.net_in - base.net_in,
                    now.net_out - base.net_out,
                    now.rejected - base.rejected,
                    now.expired - base.expired,
                    now.hits - base.hits,
                    now.misses - base.misses,
                    shared.repl.syncs.full.load(Ordering::Relaxed),
                    shared.repl.syncs.partial_ok.load(Ordering::Relaxed),
                    shared.repl.syncs.partial_err.load(Ordering::Relaxed),
                    now.errors - base.errors,
                    shared.sum(|s| s.batches_in.get()),
                );
            }
            "replication" => super::replication::info_replication(shared, w),
            "cpu" => {
                let [sys, user, sys_children, user_children] = cpu_times();
                let _ = write!(
                    w,
                    "# CPU\r\nused_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\nused_cpu_sys_children:{sys_children:.6}\r\nused_cpu_user_children:{user_children:.6}\r\n"
                );
            }
            "commandstats" => {
                w.push_str("# Commandstats\r\n");
                for (i, c) in table().commands.iter().enumerate() {
                    let calls = now.calls[i] - base.calls.get(i).copied().unwrap_or(0);
                    let failed = now.failed[i] - base.failed.get(i).copied().unwrap_or(0);
                    let rejected =
                        now.rejected_calls[i] - base.rejected_calls.get(i).copied().unwrap_or(0);
                    // usec is not measured: timing each command would cost two
                    // clock reads per command on the hot path (docs/commands.md).
                    if calls + failed + rejected > 0 {
                        let _ = write!(
                            w,
                            "cmdstat_{}:calls={calls},usec=0,usec_per_call=0.00,rejected_calls={rejected},failed_calls={failed}\r\n",
                            c.name
                        );
                    }
                }
            }
            "errorstats" => {
                w.push_str("# Errorstats\r\n");
                for (i, code) in crate::error::ERROR_CODES.iter().enumerate() {
                    let n = now.error_codes[i] - base.error_codes.get(i).copied().unwrap_or(0);
                    if n > 0 {
                        let _ = write!(w, "errorstat_{code}:count={n}\r\n");
                    }
                }
            }
            "keyspace" => {
                w.push_str("# Keyspace\r\n");
                let keys = shared.sum(|s| s.keys.get());
                if keys > 0 {
                    let _ = write!(
                        w,
                        "db0:keys={keys},expires={},avg_ttl=0\r\n",
                        shared.sum(|s| s.expires.get())
                    );
                }
            }
            "leasehold" => {
                w.push_str("# Leasehold\r\n");
                for (i, s) in shared.shard_stats.iter().enumerate() {
                    let _ = write!(
                        w,
                        "shard{i}:keys={},expires={},commands={},batches_in={},effect_offset={}\r\n",
                        s.keys.get(),
                        s.expires.get(),
                        s.commands_processed.get(),
                        s.batches_in.get(),
                        s.effect_offset.get()
                    );
                }
            }
            _ => {}
        }
        out.push_str(&s);
    }
    out
}

/// Applies a CONFIG SET value; the error is the reason Redis would print.
fn flag_names(spec: &CommandSpec) -> Vec<Reply> {
    flags::NAMES
        .iter()
        .enumerate()
        .filter(|(bit, _)| spec.flags & (1 << bit) != 0)
        .map(|(_, n)| Reply::simple(n))
        .collect()
}

/// A COMMAND INFO entry in Redis 7's ten-element shape.
fn command_info(spec: &CommandSpec) -> Reply {
    Reply::Array(vec![
        Reply::bulk(spec.name),
        Reply::Int(spec.arity as i64),
        Reply::Set(flag_names(spec)),
        Reply::Int(spec.first_key as i64),
        Reply::Int(spec.last_key as i64),
        Reply::Int(spec.step as i64),
        Reply::Set(Vec::new()),
        Reply::Set(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
    ])
}

/// Redis 7's `group` for a command: its family's (`string`, `generic`,
/// `connection`, `server`; DBSIZE and FLUSHALL/FLUSHDB are `server` as in
/// Redis), and `module` for the rate-limit commands, as Redis 7 reports a
/// module's commands.
fn command_group(name: &str) -> &'static str {
    let member = |family: &[CommandSpec]| family.iter().any(|c| c.name == name);
    if matches!(name, "dbsize" | "flushall" | "flushdb") || member(COMMANDS) {
        "server"
    } else if member(super::strings::COMMANDS) {
        "string"
    } else if member(super::keys::COMMANDS) {
        "generic"
    } else if member(super::connection::COMMANDS) {
        "connection"
    } else if member(super::transaction::COMMANDS) {
        "transactions"
    } else if member(super::pubsub::COMMANDS) {
        "pubsub"
    } else if member(super::lists::COMMANDS) {
        "list"
    } else if member(super::hashes::COMMANDS) {
        "hash"
    } else {
        "module"
    }
}

/// A COMMAND DOCS entry: summary, since, group, and the argument tree from
/// the command reference (see [`super::docs`]), which redis-cli turns into hints.
fn command_docs(spec: &CommandSpec) -> Reply {
    let group = command_group(spec.name);
    let mut doc = vec![
        (Reply::bulk("summary"), Reply::bulk(spec.summary)),
        (Reply::bulk("since"), Reply::bulk("1.0.0")),
        (Reply::bulk("group"), Reply::bulk(group)),
    ];
    if let Some(args) = super::docs::arguments(spec.name) {
        doc.push((Reply::bulk("arguments"), args));
    }
    Reply::Map(doc)
}

fn command(_ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let t = table();
    if a.remaining() == 0 {
        return Ok(Reply::Array(t.commands.iter().map(command_info).collect()));
    }
    let sub = a.word()?;
    let mut names = Vec::new();
    while a.remaining() > 0 {
        names.push(a.next()?);
    }
    match sub.as_str() {
        "COUNT" if !names.is_empty() => Err(OpError::SubcommandArity("command|count".into())),
        "COUNT" => Ok(Reply::Int(t.commands.len() as i64)),
        "LIST" => Ok(Reply::Array(
            t.commands.iter().map(|c| Reply::bulk(c.name)).collect(),
        )),
        "INFO" => Ok(Reply::Array(if names.is_empty() {
            t.commands.iter().map(command_info).collect()
        } else {
            names
                .iter()
                .map(|n| {
                    t.lookup(n)
                        .map_or(Reply::NilArray, |(_, c)| command_info(c))
                })
                .collect()
        })),
        "DOCS" => Ok(Reply::Map(if names.is_empty() {
            t.commands
                .iter()
                .map(|c| (Reply::bulk(c.name), command_docs(c)))
                .collect()
        } else {
            names
                .iter()
                .filter_map(|n| t.lookup(n))
                .map(|(_, c)| (Reply::bulk(c.name), command_docs(c)))
                .collect()
        })),
        "GETKEYS" => {
            if names.len() < 2 {
                return Err(OpError::SubcommandArity("command|getkeys".into()));
            }
            let Some((_, spec)) = names.first().and_then(|n| t.lookup(n)) else {
                return Err(OpError::InvalidCommandSpecified);
            };
            if !spec.arity_ok(names.len()) {
                return Err(OpError::InvalidCommandArguments);
            }
            let keys: Vec<Reply> = spec
                .key_positions(names.len())
                .map(|p| Reply::Bulk(names[p].clone()))
                .collect();
            if keys.is_empty() {
                return Err(OpError::NoKeyArguments);
            }
            Ok(Reply::Array(keys))
        }
        _ => Err(OpError::UnknownSubcommand {
            command: "COMMAND",
            sub: String::from_utf8_lossy(&a.all()[1]).into_owned(),
        }),
    }
}

fn time(ctx: &mut ConnCtx<'_>, _a: &mut Args) -> Result<Reply, OpError> {
    let ms = ctx.shared.clock.now().unix_ms;
    Ok(Reply::Array(vec![
        Reply::bulk((ms / 1000).to_string()),
        Reply::bulk(((ms % 1000) * 1000).to_string()),
    ]))
}

fn shutdown(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let (mut save, mut nosave, mut other, mut abort) = (false, false, false, false);
    while a.remaining() > 0 {
        match a.word()?.as_str() {
            "NOSAVE" => nosave = true,
            "SAVE" => save = true,
            "NOW" | "FORCE" => other = true,
            "ABORT" => abort = true,
            _ => return Err(OpError::Syntax),
        }
    }
    // As Redis: ABORT goes alone, and NOSAVE contradicts SAVE.
    if (abort && (save || nosave || other)) || (save && nosave) {
        return Err(OpError::Syntax);
    }
    if abort {
        return Err(OpError::NoShutdownInProgress);
    }
    if !ctx.conn.authenticated {
        return Err(OpError::NoAuth);
    }
    tracing::info!("SHUTDOWN requested by client {}", ctx.conn.handle.id);
    // As Redis: SAVE, or save rules without NOSAVE, write a snapshot first,
    // and a failed one leaves the server running.
    let rules = !ctx.shared.config.read().persistence.save.trim().is_empty();
    if save || (rules && !nosave) {
        super::persistence::block_on_save(ctx, true);
        return Ok(Reply::ok());
    }
    ctx.shared.begin_shutdown();
    // Like Redis, a successful SHUTDOWN answers by closing the connection.
    ctx.conn.close = true;
    ctx.conn.no_reply = true;
    Ok(Reply::ok())
}
