//! Server commands: INFO (its sections are [`super::info`]'s), CONFIG,
//! COMMAND, TIME, SHUTDOWN, MONITOR.
//!
//! CONFIG GET shapes are the ones Redis 7 tools read (redis-cli,
//! redis-benchmark, exporters).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use leasehold_protocol::{Args, Reply};

use super::flags::{self, ADMIN, FAST, LOADING, STALE};
use super::{cmd, table, CommandSpec, Exec, NO_KEYS};
use crate::error::OpError;
use crate::persist::status::Ticket;
use crate::session::{Blocked, ConnCtx};
use crate::state::{ShutdownRequest, ShutdownSave};

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("info", -1, LOADING | STALE, NO_KEYS, Exec::Conn(super::info::info), "Returns information and statistics about the server."),
    cmd("config", -2, ADMIN | LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(super::config::config), "A container for server configuration commands."),
    cmd("command", -1, LOADING | STALE, NO_KEYS, Exec::Conn(command), "Returns detailed information about all commands."),
    cmd("time", 1, FAST | LOADING | STALE, NO_KEYS, Exec::Conn(time), "Returns the server time."),
    cmd("monitor", 1, ADMIN | LOADING | STALE | flags::NO_MULTI | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(monitor), "Listens for all requests received by the server in real-time."),
    cmd("shutdown", -1, ADMIN | LOADING | STALE | flags::NO_MULTI | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(shutdown), "Synchronously saves the database(s) to disk and shuts down the Redis server."),
];

/// Applies a CONFIG SET value; the error is the reason Redis would print.
fn flag_names(spec: &CommandSpec) -> Vec<Reply> {
    flags::NAMES
        .iter()
        .enumerate()
        .filter(|(bit, _)| spec.flags & (1 << bit) != 0)
        .map(|(_, n)| Reply::simple(n))
        .collect()
}

/// A command's ACL categories (`@read`, `@string`, `@fast`), in `ACL CAT`'s
/// order, as COMMAND INFO lists them.
fn acl_categories(spec: &CommandSpec) -> Vec<Reply> {
    use crate::acl::{Catalog, CATEGORIES};
    let catalog = super::acl::catalog();
    let bits = catalog.id(spec.name).map_or(0, |id| catalog.categories(id));
    CATEGORIES
        .iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .map(|(_, c)| Reply::Simple(format!("@{c}").into()))
        .collect()
}

/// A COMMAND INFO entry in Redis 7's ten-element shape (tips, key
/// specifications and subcommands empty).
fn command_info(spec: &CommandSpec) -> Reply {
    Reply::Array(vec![
        Reply::bulk(spec.name),
        Reply::Int(spec.arity as i64),
        Reply::Set(flag_names(spec)),
        Reply::Int(spec.first_key as i64),
        Reply::Int(spec.last_key as i64),
        Reply::Int(spec.step as i64),
        Reply::Set(acl_categories(spec)),
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
    if matches!(name, "dbsize" | "flushall" | "flushdb" | "memory") || member(COMMANDS) {
        "server"
    } else if member(super::strings::COMMANDS) {
        "string"
    } else if member(super::keys::COMMANDS) || member(super::moves::COMMANDS) || name == "object" {
        "generic"
    } else if member(super::connection::COMMANDS) {
        "connection"
    } else if member(super::transaction::COMMANDS) {
        "transactions"
    } else if member(super::pubsub::COMMANDS) {
        "pubsub"
    } else if member(super::scripting::COMMANDS) {
        "scripting"
    } else if member(super::lists::COMMANDS) {
        "list"
    } else if member(super::hashes::COMMANDS) {
        "hash"
    } else if member(super::sets::COMMANDS) {
        "set"
    } else if member(super::cluster::COMMANDS) && name != "lh.topology" {
        "cluster"
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
                .keys_in(&names)
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

/// MONITOR: from now on the connection receives every command's line
/// (`crate::monitor`), and may no longer read or write keys. A second
/// MONITOR answers nothing, as in Redis; RESET or QUIT end it.
fn monitor(ctx: &mut ConnCtx<'_>, _a: &mut Args) -> Result<Reply, OpError> {
    if ctx.conn.monitor {
        ctx.conn.no_reply = true;
        return Ok(Reply::ok());
    }
    ctx.conn.monitor = true;
    ctx.conn.handle.monitor.store(true, Ordering::Relaxed);
    let place = ctx.conn.pubsub.place;
    ctx.shared.monitors.add(crate::monitor::Watcher {
        thread: place.thread,
        conn: place.conn,
        client: ctx.conn.handle.id,
    });
    Ok(Reply::ok())
}

fn shutdown(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let (mut save, mut nosave, mut now, mut force, mut abort) = (false, false, false, false, false);
    while a.remaining() > 0 {
        match a.word()?.as_str() {
            "NOSAVE" => nosave = true,
            "SAVE" => save = true,
            "NOW" => now = true,
            "FORCE" => force = true,
            "ABORT" => abort = true,
            _ => return Err(OpError::Syntax),
        }
    }
    // As Redis: ABORT goes alone, and NOSAVE contradicts SAVE.
    if (abort && (save || nosave || now || force)) || (save && nosave) {
        return Err(OpError::Syntax);
    }
    if abort {
        return Err(OpError::NoShutdownInProgress);
    }
    tracing::info!("SHUTDOWN requested by client {}", ctx.conn.handle.id);
    let save = match (save, nosave) {
        (true, _) => ShutdownSave::Always,
        (_, true) => ShutdownSave::Never,
        _ => ShutdownSave::Rules,
    };
    // Like Redis, a successful SHUTDOWN answers by closing the connection.
    ctx.conn.no_reply = true;
    if ctx.shared.shutdown.staffed() {
        // The shutdown thread drains every connection (this one waits),
        // saves as asked and stops; a failed snapshot without FORCE calls
        // it off and this connection hears why.
        let ticket = Arc::new(Ticket::default());
        let request = ShutdownRequest {
            save,
            force,
            ticket: Some(ticket.clone()),
        };
        match ctx.shared.shutdown.post(request) {
            Ok(()) => {
                ctx.conn.blocked = Some(Blocked::Save {
                    ticket,
                    shutdown: true,
                })
            }
            // One is under way already: it stops the server.
            Err(_) => ctx.conn.close = true,
        }
        return Ok(Reply::ok());
    }
    // No shutdown thread (the in-process harness): save, then stop here.
    let rules = !ctx.shared.config.read().persistence.save.trim().is_empty();
    if save == ShutdownSave::Always || (rules && save == ShutdownSave::Rules) {
        super::persistence::block_on_save(ctx, true);
        return Ok(Reply::ok());
    }
    ctx.shared.begin_shutdown();
    ctx.conn.close = true;
    Ok(Reply::ok())
}
