//! CONFIG GET / SET / RESETSTAT / REWRITE / HELP, reading the parameter
//! table of the configuration ([`crate::config::params`]): GET lists the
//! parameters a glob pattern matches, SET parses with each parameter's row,
//! REWRITE writes the `--config` file back
//! ([`crate::config::Config::rewrite`]).
//! Error texts are Redis 7's.

use std::sync::atomic::Ordering;

use leasehold_protocol::{Args, Reply};

use crate::config::params::SetError;
use crate::error::OpError;
use crate::session::ConnCtx;

/// Redis's error for a parameter CONFIG SET refused.
fn set_failed(name: &str, why: SetError) -> OpError {
    match why {
        SetError::Unknown => OpError::ConfigSetUnknown(name.to_string()),
        why => OpError::ConfigSetFailed {
            name: name.to_string(),
            why: why.to_string(),
        },
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
            // As Redis 7: a name without glob characters is answered under
            // the name as given (an alias, any case), once per name; a
            // pattern lists each parameter it matches under its own name,
            // unless that name is listed already.
            let mut seen: Vec<Vec<u8>> = Vec::new();
            let mut pairs = Vec::new();
            while a.remaining() > 0 {
                let given = a.next()?;
                let lower = given.to_ascii_lowercase();
                let exact = !lower.iter().any(|b| matches!(b, b'*' | b'?' | b'['));
                let found = cfg.matching(|name| match exact {
                    true => name.as_bytes() == lower.as_slice(),
                    false => super::keys::glob_match(&lower, name.as_bytes()),
                });
                // A pattern lists an alias only when the name itself does
                // not match (Redis lists both or either, by its hash order).
                for (name, value) in found {
                    let (listed_as, key) = match exact {
                        true => (lower.to_vec(), Reply::Bulk(given.clone())),
                        false => (name.as_bytes().to_vec(), Reply::bulk(name)),
                    };
                    if !seen.contains(&listed_as) {
                        seen.push(listed_as);
                        pairs.push((key, Reply::bulk(value)));
                    }
                }
            }
            Ok(Reply::Map(pairs))
        }
        "SET" => {
            if a.remaining() < 2 {
                return Err(OpError::SubcommandArity("config|set".into()));
            }
            // As Redis 7: pairs only, each parameter once.
            if a.remaining() % 2 != 0 {
                return Err(OpError::Syntax);
            }
            // Set on a copy, kept only when every parameter succeeded.
            let mut next = ctx.shared.config.read().clone();
            let mut seen = Vec::new();
            while a.remaining() > 0 {
                let name = String::from_utf8_lossy(&a.next()?).to_ascii_lowercase();
                let value = String::from_utf8_lossy(&a.next()?).into_owned();
                if seen.contains(&name) {
                    return Err(OpError::ConfigSetFailed {
                        name,
                        why: "duplicate parameter".into(),
                    });
                }
                seen.push(name.clone());
                next.set(&name, &value)
                    .map_err(|why| set_failed(&name, why))?;
            }
            {
                let now = ctx.shared.config.read();
                let (was, will) = (&now.persistence, &next.persistence);
                // The log's files stay where it runs: moving them under a
                // running log could leave acknowledged writes in a file no
                // manifest lists. Turn it off, move, turn it on again.
                if was.appendonly && will.appendonly && was.dir != will.dir {
                    return Err(OpError::ConfigSetFailed {
                        name: "dir".into(),
                        why: "can't change dir while appendonly is yes (set appendonly no first)"
                            .into(),
                    });
                }
            }
            let old = std::mem::replace(&mut *ctx.shared.config.write(), next.clone());
            crate::config::apply_log_level(&old, &next);
            // `appendfsync always` holds from this reply on, not from the
            // persistence thread's next look.
            let persist = &ctx.shared.persist;
            if old.persistence.appendfsync != next.persistence.appendfsync
                && persist.aof_on.load(Ordering::SeqCst)
            {
                let always = next.persistence.appendfsync == "always";
                ctx.shared.repl.backlog.set_sync_always(always);
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
                return Err(OpError::NoConfigFile);
            };
            cfg.rewrite(path).map_err(|e| {
                tracing::warn!("CONFIG REWRITE of {} failed: {e}", path.display());
                OpError::ConfigRewrite(e.to_string())
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
