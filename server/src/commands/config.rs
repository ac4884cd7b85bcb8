//! CONFIG GET / SET / RESETSTAT / REWRITE / HELP.
//!
//! [`PARAMS`] lists every live setting with how to read it and, when it can
//! change at run time, how to set it. [`FIXED`] lists settings Leasehold does
//! not have but tools ask for (redis-benchmark reads `save` and `appendonly`):
//! they answer their one value and CONFIG SET accepts only that value.
//! Error texts are Redis 7's. CONFIG REWRITE rewrites the `--config` file
//! with the current values of the settable parameters ([`Config::rewrite`]).

use std::sync::atomic::Ordering;

use leasehold_protocol::{Args, Reply};

use crate::config::Config;
use crate::error::OpError;
use crate::session::ConnCtx;

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

/// `maxclients` as Redis takes it: a strict integer in 1..=4294967295 (0
/// would turn every new connection away, the operator's included).
fn parse_maxclients(v: &str) -> Result<usize, &'static str> {
    let n = leasehold_protocol::int::parse_i64(v.as_bytes())
        .ok_or("argument couldn't be parsed into an integer")?;
    if !(1..=u32::MAX as i64).contains(&n) {
        return Err("argument must be between 1 and 4294967295 inclusive");
    }
    Ok(n as usize)
}

/// A memory setting as Redis 7 takes it (`memtoull`, then a range check of
/// 1mb..=i64::MAX as `proto-max-bulk-len` and `client-query-buffer-limit`
/// have): digits with an optional unit b, k, kb, m, mb, g, gb in any case.
/// Below 1 MB every request, or every partial one, would be refused.
/// [`parse_memory`] for a command-line flag (clap's value parser).
pub fn memory_arg(v: &str) -> Result<usize, String> {
    parse_memory(v).map_err(str::to_owned)
}

fn parse_memory(v: &str) -> Result<usize, &'static str> {
    const NOT_MEMORY: &str = "argument must be a memory value";
    let end = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let mul: u64 = match v[end..].to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return Err(NOT_MEMORY),
    };
    // Redis's strtoull saturates and the product wraps into a signed value.
    let digits = &v[..end];
    let n = if digits.is_empty() {
        0
    } else {
        digits.parse::<u64>().unwrap_or(u64::MAX)
    };
    let bytes = n.wrapping_mul(mul) as i64;
    if bytes < 1024 * 1024 {
        return Err("argument must be between 1048576 and 9223372036854775807 inclusive");
    }
    usize::try_from(bytes).map_err(|_| NOT_MEMORY)
}

/// `hz` as Redis 7 takes it: an integer in 0..=2147483647, clamped to 1..=500.
fn parse_hz(v: &str) -> Result<u32, &'static str> {
    let n = leasehold_protocol::int::parse_i64(v.as_bytes())
        .ok_or("argument couldn't be parsed into an integer")?;
    if !(0..=i64::from(i32::MAX)).contains(&n) {
        return Err("argument must be between 0 and 2147483647 inclusive");
    }
    Ok(n.clamp(1, 500) as u32)
}

/// `loglevel`: Redis's names, tracing's levels, or tracing directives.
fn parse_loglevel(v: &str) -> Result<String, &'static str> {
    if crate::config::valid_log_level(v) {
        Ok(v.to_ascii_lowercase())
    } else {
        Err("argument(s) must be one of the following: debug, verbose, notice, warning")
    }
}

#[rustfmt::skip]
const PARAMS: &[Param] = &[
    param("bind", |c| c.net.bind.clone(), None),
    param("port", |c| c.net.port.to_string(), None),
    param("tcp-backlog", |c| c.net.tcp_backlog.to_string(), None),
    param("maxclients", |c| c.net.maxclients.to_string(), Some(|c, v| { c.net.maxclients = parse_maxclients(v)?; Ok(()) })),
    param("requirepass", |c| c.security.requirepass.clone(), Some(|c, v| { c.security.requirepass = v.to_string(); Ok(()) })),
    param("threads", |c| c.threads().to_string(), None),
    param("proto-max-bulk-len", |c| c.limits.proto_max_bulk_len.to_string(), Some(|c, v| { c.limits.proto_max_bulk_len = parse_memory(v)?; Ok(()) })),
    param("client-query-buffer-limit", |c| c.limits.client_query_buffer_limit.to_string(), Some(|c, v| { c.limits.client_query_buffer_limit = parse_memory(v)?; Ok(()) })),
    param("hz", |c| c.expiry.hz.to_string(), Some(|c, v| { c.expiry.hz = parse_hz(v)?; Ok(()) })),
    param("repl-backlog-size", |c| c.replication.backlog_bytes.to_string(), None),
    param("loglevel", |c| c.log.level.clone(), Some(|c, v| { c.log.level = parse_loglevel(v)?; Ok(()) })),
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
            let level = next.log.level.clone();
            let level_changed = level != ctx.shared.config.read().log.level;
            *ctx.shared.config.write() = next;
            if level_changed {
                if let Some(reload) = crate::config::LOG_RELOAD.get() {
                    if let Err(e) = reload(&crate::config::log_filter(&level)) {
                        tracing::warn!("cannot apply loglevel {level}: {e}");
                    }
                }
            }
            ctx.shared.config_gen.fetch_add(1, Ordering::Release);
            Ok(Reply::ok())
        }
        "RESETSTAT" => {
            a.finish()
                .map_err(|_| OpError::SubcommandArity("config|resetstat".into()))?;
            *ctx.shared.baseline.lock() = ctx.shared.stat_snapshot();
            Ok(Reply::ok())
        }
        "REWRITE" => {
            a.finish()
                .map_err(|_| OpError::SubcommandArity("config|rewrite".into()))?;
            let cfg = ctx.shared.config.read().clone();
            let Some(path) = &cfg.file else {
                return Err(OpError::Other(
                    "The server is running without a config file".into(),
                ));
            };
            cfg.rewrite(path).map_err(|e| {
                tracing::warn!("CONFIG REWRITE of {} failed: {e}", path.display());
                OpError::Other(format!("Rewriting config file: {e}").into())
            })?;
            tracing::info!("CONFIG REWRITE executed with success.");
            Ok(Reply::ok())
        }
        "HELP" => Ok(Reply::Array(
            [
                "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "GET <pattern>",
                "    Return parameters matching the glob-like <pattern> and their values.",
                "SET <directive> <value>",
                "    Set the configuration <directive> to <value>.",
                "RESETSTAT",
                "    Reset statistics reported by the INFO command.",
                "REWRITE",
                "    Rewrite the configuration file.",
                "HELP",
                "    Prints this help.",
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

#[cfg(test)]
mod tests {
    use super::{parse_maxclients, parse_memory};

    #[test]
    fn limits_are_parsed_and_bounded_as_redis_does() {
        assert_eq!(parse_memory("1mb"), Ok(1 << 20));
        assert_eq!(parse_memory("512MB"), Ok(512 << 20));
        assert_eq!(parse_memory("1048576"), Ok(1 << 20));
        assert_eq!(parse_memory("1gb"), Ok(1 << 30));
        let range = Err("argument must be between 1048576 and 9223372036854775807 inclusive");
        for v in [
            "0",
            "1",
            "1k",
            "1kb",
            "",
            "9223372036854775808",
            "99999999999999999999",
        ] {
            assert_eq!(parse_memory(v), range, "{v:?}");
        }
        for v in ["-1", "1.5mb", " 1mb", "+1mb", "10tb"] {
            assert_eq!(
                parse_memory(v),
                Err("argument must be a memory value"),
                "{v:?}"
            );
        }
        assert_eq!(parse_maxclients("1"), Ok(1));
        assert_eq!(parse_maxclients("4294967295"), Ok(4294967295));
        let range = Err("argument must be between 1 and 4294967295 inclusive");
        for v in ["0", "-1", "4294967296"] {
            assert_eq!(parse_maxclients(v), range, "{v:?}");
        }
        for v in ["+5", " 5", "05", "1k", "99999999999999999999"] {
            assert_eq!(
                parse_maxclients(v),
                Err("argument couldn't be parsed into an integer"),
                "{v:?}"
            );
        }
    }
}
