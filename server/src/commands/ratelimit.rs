//! Rate limits: TOKENLEASE, TOKENRETURN, SLIDINGWINDOW, CL.THROTTLE, GCRA,
//! plus RLSTATE (inspection) and LH.RESTORE (the effect that replicates them).
//!
//! # Layout
//! - this file: the rows, argument parsing, loading and saving states
//!   through the store, and the replies;
//! - [`token_bucket`], [`sliding_window`], [`gcra`] (in [`crate::ratelimit`]):
//!   each algorithm as pure, synchronous state transitions on the monotonic
//!   clock, unit-tested without a shard, and compared with a reference model
//!   by proptest (`ratelimit/model.rs`).
//!
//! # Clocks and expiry
//! Refills and windows read `Shard::now.mono_ms`, because a wall-clock step
//! must never mint or destroy tokens; TTLs are Unix ms, as in Redis. A state
//! keeps its instants in monotonic ms; its key expires when the state is
//! worth nothing any more (a full bucket, two empty windows, a TAT in the
//! past), so idle state costs no memory and a missing key reads exactly as a
//! fresh one. That instant is converted to Unix ms as
//! `unix_now + (instant - mono_now)` ([`unix_of`]). Every call that changes a
//! state stores it, and the store emits it whole, with absolute Unix times,
//! so a replica needs no clock: `LH.RESTORE key <KIND> <fields...> PXAT <ms>`.
//! Peeks and denials change nothing and emit nothing.

use bytes::Bytes;
use leasehold_protocol::{Args, Reply};

use super::flags::ADMIN;
use super::flags::{DENYOOM, FAST, READONLY, WRITE};
use super::{cmd, CommandSpec, Exec, Merge, KEY1, NO_KEYS};
use crate::clock::{mono_of, mono_signed, unix_of, unix_signed};
use crate::error::OpError;
use crate::ratelimit::pin::Pinned;
use crate::ratelimit::split::{KeyPolicy, Split};
use crate::ratelimit::token_bucket::{Change, Lease};
use crate::ratelimit::{gcra, sliding_window, token_bucket, RateState};
use crate::shard::Shard;
use crate::state::{RateCommand, RateOutcome};

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("tokenlease", -6, WRITE | DENYOOM | FAST, KEY1, Exec::Key(tokenlease), "Leases tokens from a token bucket: all or nothing, or at least MIN."),
    cmd("tokenreturn", 6, WRITE | FAST, KEY1, Exec::Key(tokenreturn), "Gives unspent leased tokens back to a token bucket."),
    cmd("slidingwindow", -4, WRITE | DENYOOM | FAST, KEY1, Exec::Key(slidingwindow), "Counts hits in a sliding window of two fixed windows; admits them under a limit."),
    cmd("cl.throttle", -5, WRITE | DENYOOM | FAST, KEY1, Exec::Key(cl_throttle), "Rate limits with GCRA, as the redis-cell module does."),
    cmd("gcra", -5, WRITE | DENYOOM | FAST, KEY1, Exec::Key(gcra_cmd), "Rate limits with GCRA, with the syntax of Redis 8.8."),
    cmd("rlstate", 2, READONLY | FAST, KEY1, Exec::Key(rlstate), "Shows the stored state of a rate-limit key."),
    cmd("lh.restore", -8, WRITE | DENYOOM, KEY1, Exec::Key(restore), "Recreates a rate-limit state with absolute times (the replication effect)."),
    cmd("lh.split", -5, WRITE | ADMIN, KEY1, Exec::Key(lh_split), "Splits a token-bucket, GCRA or sliding-window key over every shard, exactly (a hot key)."),
    cmd("lh.merge", 2, WRITE | ADMIN, KEY1, Exec::Key(lh_merge), "Merges a split rate-limit key back into its owner shard."),
    cmd("lh.hotkeys", 1, READONLY | ADMIN, NO_KEYS, Exec::AllShards(lh_hotkeys, Merge::Concat), "Lists the hot rate-limit keys: rate, share, split state."),
];

/// An integer argument that must be at least 1 (`ERR <name> must be positive`).
fn positive(a: &mut Args, name: &'static str) -> Result<u64, OpError> {
    match a.i64()? {
        v if v <= 0 => Err(OpError::MustBePositive(name)),
        v => Ok(v as u64),
    }
}

/// An integer argument that must be at least 0 (Redis's integer error otherwise).
fn count(a: &mut Args) -> Result<u64, OpError> {
    u64::try_from(a.i64()?).map_err(|_| OpError::NotInteger)
}

/// The optional `<WORD> n` tail of a command, ending the arguments.
fn option(a: &mut Args, word: &str) -> Result<Option<u64>, OpError> {
    if a.remaining() == 0 {
        return Ok(None);
    }
    if !a.flag(word) {
        return Err(OpError::Syntax);
    }
    let n = count(a)?;
    a.finish()?;
    Ok(Some(n))
}

/// Reads the state at `key` through `pick`: `None` when absent, WRONGTYPE when
/// the key holds anything `pick` refuses.
fn load<T>(
    s: &mut Shard,
    key: &[u8],
    pick: fn(RateState) -> Option<T>,
) -> Result<Option<T>, OpError> {
    match s.store.get_rate(key, s.now.unix_ms) {
        None => {
            s.stats.keyspace_misses.add(1);
            Ok(None)
        }
        Some(state) => {
            s.stats.keyspace_hits.add(1);
            state.and_then(pick).map(Some).ok_or(OpError::WrongType)
        }
    }
}

/// Stores a state whose key expires at monotonic `expire_mono` (the store
/// emits it as `LH.RESTORE`).
fn save(s: &mut Shard, key: &[u8], state: RateState, expire_mono: u64) {
    let at = unix_of(s.now, expire_mono);
    s.store.set_rate(key, state, at);
}

/// Refuses a call on a pinned prefix whose parameters are not the pinned
/// ones (before the state is read, so nothing changes).
fn check_pin(s: &Shard, key: &[u8], call: Pinned) -> Result<(), OpError> {
    s.store
        .pins()
        .check(key, &call)
        .map_err(|r| OpError::Pinned {
            prefix: String::from_utf8_lossy(&r.prefix).into_owned(),
            policy: r.policy.words().join(" "),
        })
}

fn int_array<const N: usize>(v: [i64; N]) -> Reply {
    Reply::Array(v.into_iter().map(Reply::Int).collect())
}

fn token_policy(a: &mut Args) -> Result<token_bucket::Policy, OpError> {
    Ok(token_bucket::Policy {
        capacity: positive(a, "capacity")?,
        rate: positive(a, "rate")?,
        period_ms: positive(a, "period_ms")?,
    })
}

fn pick_bucket(state: RateState) -> Option<token_bucket::Bucket> {
    match state {
        RateState::TokenBucket(b) => Some(b),
        _ => None,
    }
}

fn apply_bucket(s: &mut Shard, key: &[u8], change: Change) {
    match change {
        Change::None => {}
        Change::Store(b, full_at) => save(s, key, RateState::TokenBucket(b), full_at),
        Change::Remove => {
            s.store.remove(key, s.now.unix_ms);
        }
    }
}

/// Runs the token-bucket call `op` on `key` under `p`: on the split key
/// when it is split under `p` (served from this shard's slot by `local`
/// when the slot holds `requested` tokens; [`Shard::hot_call`]), else on
/// the stored bucket, storing its change. WRONGTYPE for another type.
fn bucket_call<T>(
    s: &mut Shard,
    key: &Bytes,
    p: token_bucket::Policy,
    requested: u64,
    local: impl FnOnce(Lease) -> T,
    op: impl Fn(Option<token_bucket::Bucket>) -> (T, Change),
) -> Result<T, OpError> {
    let kind = KeyPolicy::Bucket(p);
    s.hot_count(key, Some(kind));
    if let Some(out) = s.hot_call(key, kind, requested, local, &op) {
        return Ok(out);
    }
    let prev = load(s, key, pick_bucket)?;
    let (out, change) = op(prev);
    apply_bucket(s, key, change);
    Ok(out)
}

/// `TOKENLEASE key capacity rate period_ms requested [MIN min]`.
fn tokenlease(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let p = token_policy(a)?;
    let requested = count(a)?;
    let min = match option(a, "MIN")? {
        None => requested,
        Some(m) if (1..=requested).contains(&m) => m,
        Some(_) => return Err(OpError::MinOutOfRange),
    };
    check_pin(s, &key, Pinned::TokenBucket(p))?;
    let now = s.now.mono_ms;
    let reply = bucket_call(
        s,
        &key,
        p,
        requested,
        |l| l,
        |b| token_bucket::lease(b, &p, requested, min, now),
    )?;
    let outcome = RateOutcome::of(reply.granted, requested);
    s.stats
        .count_decision(RateCommand::TokenLease, outcome, requested);
    Ok(int_array(reply.to_array()))
}

/// `TOKENRETURN key capacity rate period_ms count`.
fn tokenreturn(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let p = token_policy(a)?;
    let n = count(a)?;
    check_pin(s, &key, Pinned::TokenBucket(p))?;
    let now = s.now.mono_ms;
    // A return is never served from a slot (0 requested): the owner adds it
    // to the exact bucket.
    let remaining = bucket_call(
        s,
        &key,
        p,
        0,
        |l| l.remaining,
        |b| token_bucket::give_back(b, &p, n, now),
    )?;
    Ok(Reply::Int(token_bucket::to_i64(remaining as u128)))
}

fn window_policy(a: &mut Args) -> Result<sliding_window::Policy, OpError> {
    Ok(sliding_window::Policy {
        limit: positive(a, "limit")?,
        window_ms: positive(a, "window_ms")?,
    })
}

/// The arguments of SLIDINGWINDOW after the key: the policy and the hits.
fn window_args(a: &mut Args) -> Result<(sliding_window::Policy, u64), OpError> {
    let p = window_policy(a)?;
    let n = option(a, "COUNT")?.unwrap_or(1);
    Ok((p, n))
}

fn pick_window(state: RateState) -> Option<sliding_window::Window> {
    match state {
        RateState::SlidingWindow(w) => Some(w),
        _ => None,
    }
}

/// `SLIDINGWINDOW key limit window_ms [COUNT n]`: on the split key when it
/// is split under the call's policy ([`Shard::hot_window`]), else on the
/// stored pair.
fn slidingwindow(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let (p, n) = window_args(a)?;
    check_pin(s, &key, Pinned::SlidingWindow(p))?;
    s.hot_count(&key, Some(KeyPolicy::Window(p)));
    let verdict = match s.hot_window(&key, p, n) {
        Some(v) => v,
        None => {
            let prev = load(s, &key, pick_window)?;
            let (verdict, change) = sliding_window::admit(prev, &p, n, s.now.mono_ms);
            if let Some((w, empty_at)) = change {
                save(s, &key, RateState::SlidingWindow(w), empty_at);
            }
            verdict
        }
    };
    let outcome = RateOutcome::of(verdict.admitted, n);
    s.stats
        .count_decision(RateCommand::SlidingWindow, outcome, n);
    Ok(int_array(verdict.to_array()))
}

fn throttle(
    s: &mut Shard,
    key: &Bytes,
    p: gcra::Policy,
    quantity: u64,
    cmd: RateCommand,
) -> Result<Reply, OpError> {
    let dvt = p.dvt().ok_or(OpError::RateLimitOverflow)?;
    check_pin(s, key, Pinned::Gcra(p))?;
    // Splittable when it has an equivalent bucket (`docs/hotkeys.md`).
    let split = gcra::bucket_policy(&p).map(|bp| (KeyPolicy::Gcra(p), bp));
    s.hot_count(key, split.map(|(kind, _)| kind));
    let now = s.now.mono_ms;
    let served = match split {
        Some((kind, bp)) => s.hot_call(
            key,
            kind,
            quantity,
            |l| gcra::reply_of(&p, quantity, &l),
            |b| gcra::throttle_bucket(b, &p, &bp, quantity, now),
        ),
        // A policy with no bucket form merges a key split under another.
        None => {
            s.hot_merge(key);
            None
        }
    };
    let reply = match served {
        Some(reply) => reply,
        None => {
            let prev = load(s, key, pick_gcra)?;
            let (reply, change) = gcra::throttle(prev, &p, dvt, quantity, now);
            if let Some((state, expire)) = change {
                save(s, key, RateState::Gcra(state), expire);
            }
            reply
        }
    };
    s.stats
        .count_decision(cmd, throttle_outcome(&reply), quantity);
    Ok(int_array(reply.to_array()))
}

fn throttle_outcome(reply: &gcra::Throttle) -> RateOutcome {
    match reply.limited {
        true => RateOutcome::Denied,
        false => RateOutcome::Granted,
    }
}

fn pick_gcra(state: RateState) -> Option<gcra::State> {
    match state {
        RateState::Gcra(t) => Some(t),
        _ => None,
    }
}

/// The policy words of CL.THROTTLE: `max_burst count_per_period period_s`.
fn cell_policy_args(a: &mut Args) -> Result<gcra::Policy, OpError> {
    let max_burst = count(a)?;
    let per_period = positive(a, "count_per_period")?;
    let period_s = positive(a, "period")?;
    Ok(gcra::cell_policy(max_burst, per_period, period_s))
}

/// The arguments of CL.THROTTLE after the key: the policy and the quantity.
fn cell_args(a: &mut Args) -> Result<(gcra::Policy, u64), OpError> {
    let p = cell_policy_args(a)?;
    let quantity = if a.remaining() > 0 { count(a)? } else { 1 };
    a.finish()?;
    Ok((p, quantity))
}

/// The policy words of GCRA, `max_burst tokens_per_period period_s`, as
/// `(max_burst, tokens_per_period, period_us)`, and the policy they make
/// (`ERR` overflow once the caller has read the rest of its arguments).
fn gcra_policy_args(a: &mut Args) -> Result<(u64, u64, u64), OpError> {
    let max_burst = count(a)?;
    let per_period = positive(a, "tokens_per_period")?;
    let period = a.f64()?;
    // Redis 8.8 (src/gcra.c): period in (0, 1e12) seconds, microsecond accuracy.
    if !(period > 0.0 && period < 1e12) {
        return Err(OpError::GcraPeriod);
    }
    let period_us = ((period * 1e6).round() as u64).max(1);
    Ok((max_burst, per_period, period_us))
}

fn gcra_of((max_burst, per_period, period_us): (u64, u64, u64)) -> Result<gcra::Policy, OpError> {
    gcra::gcra_policy(max_burst, per_period, period_us).ok_or(OpError::RateLimitOverflow)
}

/// The arguments of GCRA after the key: the policy and the tokens.
fn gcra_args(a: &mut Args) -> Result<(gcra::Policy, u64), OpError> {
    let words = gcra_policy_args(a)?;
    let tokens = option(a, "TOKENS")?.unwrap_or(1);
    Ok((gcra_of(words)?, tokens))
}

/// `CL.THROTTLE key max_burst count_per_period period_s [quantity]`.
fn cl_throttle(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let (p, quantity) = cell_args(a)?;
    throttle(s, &key, p, quantity, RateCommand::ClThrottle)
}

/// `GCRA key max_burst tokens_per_period period_s [TOKENS n]`.
fn gcra_cmd(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let (p, tokens) = gcra_args(a)?;
    throttle(s, &key, p, tokens, RateCommand::Gcra)
}

/// A TOKENLEASE, CL.THROTTLE, GCRA or SLIDINGWINDOW (`name`, lower case) read on this
/// shard's thread for a key another shard owns, served from this shard's
/// slot when the key is split under the call's kind and policy and the slot
/// holds enough (`docs/hotkeys.md`); `None` sends it to the owner as usual
/// (also for any argument error: the owner's handler answers it). Counts
/// the call when it serves it.
pub fn split_local(s: &mut Shard, idx: usize, name: &str, args: &Args) -> Option<Reply> {
    let all = args.all();
    let key = all.get(1)?;
    let split = s.hot.splits.get(key.as_ref())?.clone();
    let (reply, cmd, asked) = match name {
        "tokenlease" => {
            let (p, requested) = tokenlease_args(all)?;
            let lease = lease_here(s, key, &split, KeyPolicy::Bucket(p), requested)?;
            (
                int_array(lease.to_array()),
                RateCommand::TokenLease,
                requested,
            )
        }
        "slidingwindow" => {
            let mut a = args.clone();
            a.key().ok()?;
            let (p, n) = window_args(&mut a).ok()?;
            let kind = KeyPolicy::Window(p);
            check_pin(s, key, pinned(kind)).ok()?;
            let v = counted(s, split.try_window(s.id, &kind, n, s.now.mono_ms))?;
            let outcome = RateOutcome::of(v.admitted, n);
            s.stats
                .count_decision(RateCommand::SlidingWindow, outcome, n);
            return Some(s.stats.count_call(idx, Ok(int_array(v.to_array()))));
        }
        _ => {
            // The cursor's own parsing, on a copy (the owner's handler
            // reads the original if the call hops).
            let mut a = args.clone();
            a.key().ok()?;
            let (cmd, (p, quantity)) = match name {
                "gcra" => (RateCommand::Gcra, gcra_args(&mut a).ok()?),
                _ => (RateCommand::ClThrottle, cell_args(&mut a).ok()?),
            };
            let lease = lease_here(s, key, &split, KeyPolicy::Gcra(p), quantity)?;
            (
                int_array(gcra::reply_of(&p, quantity, &lease).to_array()),
                cmd,
                quantity,
            )
        }
    };
    s.stats.count_decision(cmd, RateOutcome::Granted, asked);
    Some(s.stats.count_call(idx, Ok(reply)))
}

/// TOKENLEASE's policy and requested count read in place (no cursor clone
/// on this path), or `None` for anything unusual.
fn tokenlease_args(all: &[Bytes]) -> Option<(token_bucket::Policy, u64)> {
    let int = |i: usize| {
        leasehold_protocol::int::parse_u64(all.get(i)?).filter(|v| *v <= i64::MAX as u64)
    };
    let positive = |i: usize| int(i).filter(|v| *v > 0);
    let p = token_bucket::Policy {
        capacity: positive(2)?,
        rate: positive(3)?,
        period_ms: positive(4)?,
    };
    let requested = int(5)?;
    match all.len() {
        6 => {}
        8 if all[6].eq_ignore_ascii_case(b"MIN")
            && int(7).is_some_and(|m| (1..=requested).contains(&m)) => {}
        _ => return None,
    }
    Some((p, requested))
}

/// `requested` tokens of `split` for a call of `kind` on this shard's slot,
/// counting a local grant, or a borrow when the slot cannot serve it.
fn lease_here(
    s: &mut Shard,
    key: &[u8],
    split: &Split,
    kind: KeyPolicy,
    requested: u64,
) -> Option<Lease> {
    // A pin added since the split refuses the call at the owner.
    check_pin(s, key, pinned(kind)).ok()?;
    counted(s, split.try_local(s.id, &kind, requested, s.now.mono_ms))
}

/// Counts a local grant, or a borrow when the slot could not serve (`None`).
fn counted<T>(s: &mut Shard, served: Option<T>) -> Option<T> {
    match served {
        Some(_) => s.stats.hotkey_local_grants.add(1),
        None => s.stats.hotkey_borrows.add(1),
    }
    served
}

/// The pin check's view of a splittable call.
fn pinned(kind: KeyPolicy) -> Pinned {
    match kind {
        KeyPolicy::Bucket(p) => Pinned::TokenBucket(p),
        KeyPolicy::Gcra(p) => Pinned::Gcra(p),
        KeyPolicy::Window(p) => Pinned::SlidingWindow(p),
    }
}

/// `LH.SPLIT key capacity rate period_ms`, `LH.SPLIT key CL.THROTTLE
/// max_burst count_per_period period_s`, `LH.SPLIT key GCRA max_burst
/// tokens_per_period period_s` or `LH.SPLIT key SLIDINGWINDOW limit
/// window_ms`: splits the token-bucket, GCRA or sliding-window key over
/// every shard under that policy; 1 when split, 0 when it was split already,
/// the server has one shard, or a GCRA policy is too large to split (no
/// equivalent bucket). `ERR no such key` for a missing key (never called,
/// a full bucket, a TAT in the past: nothing to split, and the first call
/// that stores a state makes it splittable); WRONGTYPE for another type; a
/// GCRA key's policy errors are its command's.
fn lh_split(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let kind = if a.flag("CL.THROTTLE") {
        KeyPolicy::Gcra(cell_policy_args(a)?)
    } else if a.flag("GCRA") {
        KeyPolicy::Gcra(gcra_of(gcra_policy_args(a)?)?)
    } else if a.flag("SLIDINGWINDOW") {
        KeyPolicy::Window(window_policy(a)?)
    } else {
        KeyPolicy::Bucket(token_policy(a)?)
    };
    a.finish()?;
    if let KeyPolicy::Gcra(p) = kind {
        p.dvt().ok_or(OpError::RateLimitOverflow)?;
    }
    check_pin(s, &key, pinned(kind))?;
    let exists = match kind {
        KeyPolicy::Bucket(_) => load(s, &key, pick_bucket)?.is_some(),
        KeyPolicy::Gcra(_) => load(s, &key, pick_gcra)?.is_some(),
        KeyPolicy::Window(_) => load(s, &key, pick_window)?.is_some(),
    };
    // A missing key (a full bucket, a GCRA bucket full again) has no state to
    // spread: splitting it would store a home entry for a key that is not.
    if !exists {
        return Err(OpError::NoSuchKey);
    }
    if s.shards < 2 {
        return Ok(Reply::Int(0));
    }
    Ok(Reply::Int(i64::from(s.hot_split(&key, kind))))
}

/// `LH.MERGE key`: merges a split key back; 1 when it was split, else 0.
fn lh_merge(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    a.finish()?;
    Ok(Reply::Int(i64::from(s.hot_merge(&key))))
}

/// `LH.HOTKEYS`: per shard, the keys its detector tracks and the split
/// keys it owns, each a map: key, shard, rate (commands per second in the
/// last window), share (percent of the shard's rate-limit commands), score
/// (the decayed count), split (`yes`/`no`).
fn lh_hotkeys(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    a.finish()?;
    let int = |v: u64| Reply::Int(token_bucket::to_i64(v as u128));
    let lines = s.hot.lines();
    Ok(Reply::Array(
        lines
            .into_iter()
            .map(|l| {
                Reply::Map(vec![
                    (Reply::simple("key"), Reply::Bulk(l.key)),
                    (Reply::simple("shard"), int(s.id as u64)),
                    (Reply::simple("rate"), int(l.rate)),
                    (Reply::simple("share"), int(l.share)),
                    (Reply::simple("score"), int(l.score)),
                    (
                        Reply::simple("split"),
                        Reply::simple(if l.split { "yes" } else { "no" }),
                    ),
                ])
            })
            .collect(),
    ))
}

/// `RLSTATE key`: the stored fields of a rate-limit key as a map, Unix ms
/// for instants; nil when the key is missing.
fn rlstate(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let now = s.now;
    let Some(e) = s.store.get(&key, now.unix_ms) else {
        return Ok(Reply::Nil);
    };
    let pttl = e
        .expire_at(now)
        .map_or(-1, |at| at.saturating_sub(now.unix_ms) as i64);
    let state = e.value.rate_state().ok_or(OpError::WrongType)?;
    let field = |k: &'static str, v: u64| {
        (
            Reply::simple(k),
            Reply::Int(token_bucket::to_i64(v as u128)),
        )
    };
    let mut map = vec![(Reply::simple("type"), Reply::simple(state.type_name()))];
    match state {
        RateState::TokenBucket(b) => map.extend([
            field("tokens", b.tokens),
            field("fraction", b.frac),
            field("period_ms", b.period_ms),
            field("refilled_at_ms", unix_of(now, b.refilled_at)),
        ]),
        RateState::SlidingWindow(w) => map.extend([
            field("window_ms", w.window_ms),
            field("window_start_ms", unix_of(now, w.start)),
            field("previous", w.previous),
            field("current", w.current),
        ]),
        RateState::Gcra(t) => map.extend([
            (
                Reply::simple("empty_at_ms"),
                Reply::Int(unix_signed(now, t.empty_ms)),
            ),
            field("empty_at_fraction", t.frac),
            field("units_per_ms", t.units_per_ms),
            field("full_at_ms", unix_of(now, t.full_ms)),
        ]),
    }
    map.push((Reply::simple("pttl"), Reply::Int(pttl)));
    Ok(Reply::Map(map))
}

/// `LH.RESTORE key TOKENBUCKET tokens fraction period_ms refilled_at_ms PXAT ms`,
/// `LH.RESTORE key SLIDINGWINDOW window_ms window_start_ms previous current PXAT ms`,
/// `LH.RESTORE key GCRA empty_at_ms empty_at_fraction units_per_ms full_at_ms PXAT ms`
/// (`empty_at_ms` is signed: a bucket whose tolerance is longer than the time
/// since 1970 was empty before it): replaces the
/// key with that state (Unix-ms instants), or deletes it when the deadline
/// has passed.
fn restore(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let key = a.key()?;
    let now = s.now;
    let kind = a.word()?;
    let mut nums = [0u64; 4];
    let mut empty_at = 0i64;
    match kind.as_str() {
        "TOKENBUCKET" | "SLIDINGWINDOW" => {}
        "GCRA" => empty_at = a.i64()?,
        _ => return Err(OpError::Syntax),
    }
    let skip = usize::from(kind == "GCRA");
    for v in &mut nums[skip..] {
        *v = a.u64()?;
    }
    if !a.flag("PXAT") {
        return Err(OpError::Syntax);
    }
    let expire_at = a.u64()?;
    a.finish()?;
    if expire_at > i64::MAX as u64 {
        return Err(OpError::InvalidExpire("lh.restore"));
    }
    let bad = OpError::BadRateLimitState;
    let state = match (kind.as_str(), nums) {
        ("TOKENBUCKET", [tokens, frac, period_ms, at]) if frac < period_ms => {
            RateState::TokenBucket(token_bucket::Bucket {
                tokens,
                frac,
                period_ms,
                refilled_at: mono_of(now, at),
            })
        }
        ("SLIDINGWINDOW", [window_ms, start, previous, current]) if window_ms > 0 => {
            RateState::SlidingWindow(sliding_window::Window {
                window_ms,
                start: mono_of(now, start),
                previous,
                current,
            })
        }
        ("GCRA", [_, frac, units_per_ms, full_at]) if frac < units_per_ms => {
            let empty_ms = mono_signed(now, empty_at);
            let full_ms = mono_of(now, full_at);
            if empty_ms as i128 > full_ms as i128 {
                return Err(bad);
            }
            RateState::Gcra(gcra::State {
                empty_ms,
                frac,
                units_per_ms,
                full_ms,
            })
        }
        _ => return Err(bad),
    };
    if expire_at <= now.unix_ms {
        s.store.remove(&key, now.unix_ms);
    } else {
        s.store.set_rate(&key, state, expire_at);
    }
    Ok(Reply::ok())
}

#[cfg(test)]
mod tests {
    use std::mem::size_of;

    use super::*;
    use crate::commands::table;
    use crate::store::{Entry, Value};

    #[test]
    fn every_command_has_a_docs_entry() {
        let docs = include_str!("../../../docs/commands.md");
        let headings: std::collections::HashSet<&str> = docs
            .lines()
            .filter_map(|l| l.strip_prefix("## "))
            .map(str::trim)
            .collect();
        let missing: Vec<String> = table()
            .commands
            .iter()
            .map(|c| c.name.to_ascii_uppercase())
            .filter(|name| !headings.contains(name.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "no `## NAME` section in docs/commands.md for {missing:?}"
        );
    }

    #[test]
    fn states_stay_small() {
        assert_eq!(size_of::<token_bucket::Bucket>(), 32);
        assert_eq!(size_of::<sliding_window::Window>(), 32);
        assert_eq!(size_of::<gcra::State>(), 32);
        // Stored packed into the value (store/value.rs), not as these structs.
        assert_eq!(size_of::<Value>(), 16);
        assert_eq!(size_of::<Entry>(), 48);
    }
}
