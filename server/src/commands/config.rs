//! CONFIG GET / SET / RESETSTAT / REWRITE / HELP.
//!
//! [`PARAMS`] lists every live setting with how to read it and, when it can
//! change at run time, how to set it. [`FIXED`] lists settings Leasehold does
//! not have but tools ask for (redis-benchmark reads `save` and `appendonly`):
//! they answer their one value and CONFIG SET accepts only that value.
//! Error texts are Redis 7's.

use std::sync::atomic::Ordering;

use leasehold_protocol::{Args, Reply};

use crate::config::Config;
use crate::error::OpError;
use crate::net::ConnCtx;

type Setter = fn(&mut Config, &str) -> Result<(), &'static str>;

/// One live setting: its CONFIG name, how to read it, how to set it (`None`:
/// immutable while running).
struct Param {
    name: &'static str,
    get: fn(&Config) -> String,
    set: Option<Setter>,
}

const fn param(name: &'static str, get: fn(&Config) -> String, set: Option<Setter>) -> Param {
    Param { name, get, set }
}

fn parse_num<T: std::str::FromStr>(v: &str) -> Result<T, &'static str> {
    v.parse()
        .map_err(|_| "argument couldn't be parsed into an integer")
}

#[rustfmt::skip]
const PARAMS: &[Param] = &[
    param("bind", |c| c.net.bind.clone(), None),
    param("port", |c| c.net.port.to_string(), None),
    param("tcp-backlog", |c| c.net.tcp_backlog.to_string(), None),
    param("maxclients", |c| c.net.maxclients.to_string(), Some(|c, v| { c.net.maxclients = parse_num(v)?; Ok(()) })),
    param("requirepass", |c| c.security.requirepass.clone(), Some(|c, v| { c.security.requirepass = v.to_string(); Ok(()) })),
    param("threads", |c| c.threads().to_string(), None),
    param("proto-max-bulk-len", |c| c.limits.proto_max_bulk_len.to_string(), Some(|c, v| { c.limits.proto_max_bulk_len = parse_num(v)?; Ok(()) })),
    param("client-query-buffer-limit", |c| c.limits.client_query_buffer_limit.to_string(), Some(|c, v| { c.limits.client_query_buffer_limit = parse_num(v)?; Ok(()) })),
    param("hz", |c| c.expiry.hz.to_string(), None),
    param("repl-backlog-size", |c| c.replication.backlog_bytes.to_string(), None),
    param("loglevel", |c| c.log.level.clone(), None),
];

/// Settings Leasehold does not have: name, the one value they answer, and
/// whether Redis lets CONFIG SET change them (then the same value is accepted;
/// otherwise they are immutable, as in Redis).
const FIXED: &[(&str, &str, bool)] = &[
    ("save", "", true),
    ("appendonly", "no", true),
    ("databases", "1", false),
    ("maxmemory", "0", true),
    ("maxmemory-policy", "noeviction", true),
    ("timeout", "0", true),
    ("cluster-enabled", "no", false),
    ("protected-mode", "no", true),
    ("daemonize", "no", false),
];

fn set_failed(name: &str, why: &str) -> OpError {
    OpError::Other(
        format!("CONFIG SET failed (possibly related to argument '{name}') - {why}").into(),
    )
}

/// Applies one `name value` pair of CONFIG SET to `next`.
fn set_one(next: &mut Config, name: &str, value: &str) -> Result<(), OpError> {
    if let Some(p) = PARAMS.iter().find(|p| p.name == name) {
        let set = p
            .set
            .ok_or_else(|| set_failed(name, "can't set immutable config"))?;
        return set(next, value).map_err(|why| set_failed(name, why));
    }
    match FIXED.iter().find(|(n, _, _)| *n == name) {
        Some((_, _, false)) => Err(set_failed(name, "can't set immutable config")),
        Some((_, fixed, true)) if *fixed == value => Ok(()),
        Some((_, fixed, true)) => Err(set_failed(
            name,
            &format!("Leasehold only supports '{fixed}'"),
        )),
        None => Err(OpError::Other(
            format!("Unknown option or number of arguments for CONFIG SET - '{name}'").into(),
        )),
    }
}

/// The CONFIG command.
pub(super) fn config(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let sub = a.word()?;
    match sub.as_str() {
        "GET" => {
            if a.remaining() == 0 {
                return Err(OpError::SubcommandArity("config|get".into()));
            }
            let cfg = ctx.shared.config.read().clone();
            let all = PARAMS
                .iter()
                .map(|p| (p.name, (p.get)(&cfg)))
                .chain(FIXED.iter().map(|(n, v, _)| (*n, v.to_string())));
            let mut patterns = Vec::new();
            while a.remaining() > 0 {
                patterns.push(a.next()?.to_ascii_lowercase());
            }
            let pairs = all
                .filter(|(name, _)| {
                    patterns
                        .iter()
                        .any(|p| super::keys::glob_match(p, name.as_bytes()))
                })
                .map(|(name, value)| (Reply::bulk(name), Reply::bulk(value)))
                .collect();
            Ok(Reply::Map(pairs))
        }
        "SET" => {
            if a.remaining() == 0 || a.remaining() % 2 != 0 {
                return Err(OpError::SubcommandArity("config|set".into()));
            }
            let mut next = ctx.shared.config.read().clone();
            while a.remaining() > 0 {
                let name = String::from_utf8_lossy(&a.next()?).to_ascii_lowercase();
                let value = String::from_utf8_lossy(&a.next()?).into_owned();
                set_one(&mut next, &name, &value)?;
            }
            *ctx.shared.config.write() = next;
            ctx.shared.config_gen.fetch_add(1, Ordering::Release);
            Ok(Reply::ok())
        }
        "RESETSTAT" => {
            a.finish()
                .map_err(|_| OpError::SubcommandArity("config|resetstat".into()))?;
            *ctx.shared.baseline.lock() = super::server::snapshot(ctx.shared);
            Ok(Reply::ok())
        }
        "REWRITE" => Err(OpError::Other(
            "The server is running without a config file".into(),
        )),
        "HELP" => Ok(Reply::Array(
            [
                "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "GET <pattern>",
                "    Return parameters matching the glob-like <pattern> and their values.",
                "SET <directive> <value>",
                "    Set the configuration <directive> to <value>.",
                "RESETSTAT",
                "    Reset statistics reported by the INFO command.",
                "HELP",
                "    Print this help.",
            ]
            .iter()
            .map(|l| Reply::simple(l))
            .collect(),
        )),
        _ => Err(OpError::UnknownSubcommand {
            command: "CONFIG",
            sub: String::from_utf8_lossy(&a.all()[1]).into_owned(),
        }),
    }
}
