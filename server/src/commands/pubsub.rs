//! Pub/sub commands: SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE,
//! PUBLISH, PUBSUB.
//!
//! Every row runs as [`Exec::Conn`] on the connection's thread: the
//! subscriptions are connection state (`session::ConnState::pubsub`) and the
//! server-wide registry (`crate::pubsub::Registry`). PUBLISH counts its
//! receivers in the registry and posts each thread with subscribers one
//! `Msg::Publish`; that thread's turn writes the message to its
//! connections. [`in_subscribed_mode`] is the dispatcher's rule for RESP2's
//! subscribed mode.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use leasehold_protocol::{Args, Reply};

use super::flags::{FAST, LOADING, STALE};
use super::{cmd, CommandSpec, Exec, NO_KEYS};
use crate::error::OpError;
use crate::pubsub::Kind;
use crate::session::ConnCtx;
use crate::shard::Msg;

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("subscribe", -2, LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(subscribe), "Listens for messages published to channels."),
    cmd("unsubscribe", -1, LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(unsubscribe), "Stops listening to messages posted to channels."),
    cmd("psubscribe", -2, LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(psubscribe), "Listens for messages published to channels that match one or more patterns."),
    cmd("punsubscribe", -1, LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(punsubscribe), "Stops listening to messages published to channels that match one or more patterns."),
    cmd("publish", 3, FAST | LOADING | STALE, NO_KEYS, Exec::Conn(publish), "Posts a message to a channel."),
    cmd("pubsub", -2, LOADING | STALE, NO_KEYS, Exec::Conn(pubsub), "A container for Pub/Sub commands."),
];

/// The commands RESP2's subscribed mode runs (Redis also allows the sharded
/// SSUBSCRIBE and SUNSUBSCRIBE, which Leasehold does not have).
const SUBSCRIBED_MODE: [&str; 7] = [
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "ping",
    "quit",
    "reset",
];

/// What a request gets from a connection in RESP2's subscribed mode before
/// it is routed: `None` to run as usual (a subscription command, QUIT,
/// RESET), PING's subscribed-mode reply `[pong, <message or "">]`, or the
/// error for any other command.
pub fn in_subscribed_mode(spec: &CommandSpec, items: &[Bytes]) -> Option<Result<Reply, OpError>> {
    if spec.name == "ping" {
        return Some(match items {
            [_] => Ok(Reply::Array(vec![Reply::bulk("pong"), Reply::bulk("")])),
            [_, message] => Ok(Reply::Array(vec![
                Reply::bulk("pong"),
                Reply::Bulk(message.clone()),
            ])),
            _ => Err(OpError::Arity("ping")),
        });
    }
    match SUBSCRIBED_MODE.contains(&spec.name) {
        true => None,
        false => Some(Err(OpError::SubscribedContext(spec.name))),
    }
}

/// The remaining arguments, in order.
fn rest(a: &mut Args) -> Result<Vec<Bytes>, OpError> {
    let mut names = Vec::with_capacity(a.remaining());
    while a.remaining() > 0 {
        names.push(a.next()?);
    }
    Ok(names)
}

/// Runs a subscription change and shows the connection's new counts to
/// CLIENT LIST.
fn change(
    ctx: &mut ConnCtx<'_>,
    a: &mut Args,
    kind: Kind,
    subscribe: bool,
) -> Result<Reply, OpError> {
    let names = rest(a)?;
    let client = ctx.conn.handle.id;
    let registry = &ctx.shared.pubsub;
    let subs = &mut ctx.conn.pubsub;
    let reply = match subscribe {
        true => subs.subscribe(registry, kind, names, client),
        false => subs.unsubscribe(registry, kind, names, client),
    };
    publish_counts(ctx);
    Ok(reply)
}

/// Copies the connection's subscription counts to its client handle.
pub fn publish_counts(ctx: &ConnCtx<'_>) {
    let h = &ctx.conn.handle;
    h.sub
        .store(ctx.conn.pubsub.channel_count(), Ordering::Relaxed);
    h.psub
        .store(ctx.conn.pubsub.pattern_count(), Ordering::Relaxed);
}

fn subscribe(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    change(ctx, a, Kind::Channel, true)
}

fn unsubscribe(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    change(ctx, a, Kind::Channel, false)
}

fn psubscribe(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    change(ctx, a, Kind::Pattern, true)
}

fn punsubscribe(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    change(ctx, a, Kind::Pattern, false)
}

/// `PUBLISH channel message` -> the number of receivers over the whole
/// server; the message goes to each thread with receivers as one message,
/// rung like any other (the publisher never waits for a subscriber).
fn publish(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let channel = a.next()?;
    let message = a.next()?;
    a.finish()?;
    let worker = ctx.worker;
    ctx.shared.shard_stats[worker.id].pubsub_published.add(1);
    let (count, per_thread) = ctx
        .shared
        .pubsub
        .publish(&channel, &message, worker.mailboxes.len());
    for (thread, p) in per_thread.into_iter().enumerate() {
        if let Some(p) = p {
            // A thread that is gone (shutdown) has no subscribers to reach.
            let _ = worker.mailboxes[thread].send(Msg::Publish(p));
        }
    }
    Ok(Reply::Int(count as i64))
}

/// `PUBSUB CHANNELS [pattern] | NUMSUB [channel ...] | NUMPAT | HELP`.
fn pubsub(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let sub = a.word()?;
    let arity = || OpError::SubcommandArity(format!("pubsub|{}", sub.to_ascii_lowercase()));
    let registry = &ctx.shared.pubsub;
    match sub.as_str() {
        "CHANNELS" => {
            let pattern = match a.remaining() {
                0 => None,
                1 => Some(a.next()?),
                _ => return Err(arity()),
            };
            let mut names = registry.channels(pattern.as_deref());
            names.sort();
            Ok(Reply::Array(names.into_iter().map(Reply::Bulk).collect()))
        }
        "NUMSUB" => {
            // A flat array in RESP3 too, as Redis 7 answers (clients such
            // as redis-py read it that way).
            let pairs = rest(a)?.into_iter().flat_map(|ch| {
                let n = registry.numsub(&ch);
                [Reply::Bulk(ch), Reply::Int(n as i64)]
            });
            Ok(Reply::Array(pairs.collect()))
        }
        "NUMPAT" => {
            a.finish().map_err(|_| arity())?;
            Ok(Reply::Int(registry.numpat() as i64))
        }
        "HELP" => Ok(Reply::Array(
            [
                "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CHANNELS [<pattern>]",
                "    Return the currently active channels matching a <pattern> (default: '*').",
                "NUMPAT",
                "    Return number of subscriptions to patterns.",
                "NUMSUB [<channel> ...]",
                "    Return the number of subscribers for the specified channels, excluding",
                "    pattern subscriptions(default: no channels).",
                "HELP",
                "    Print this help.",
            ]
            .iter()
            .map(|l| Reply::simple(l))
            .collect(),
        )),
        _ => Err(OpError::UnknownSubcommand {
            command: "PUBSUB",
            sub: String::from_utf8_lossy(&a.all()[1]).into_owned(),
        }),
    }
}
