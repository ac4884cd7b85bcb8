//! Scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT, with Redis
//! 7.0's Lua environment (the VM, the conversions and the libraries are
//! [`crate::script`]'s; `docs/scripting.md` tells the whole design).
//!
//! A script runs as an ordinary shard command on the shard that owns its
//! declared KEYS (the dispatcher routes it by them; with no keys, on the
//! connection's own shard), so it is atomic there: the shard's thread runs
//! nothing else until it returns. Each `redis.call` is checked here as
//! Redis checks it (the command exists, its arity, it is allowed from
//! scripts, a write in a read-only script or on a replica) and runs the
//! row's handler directly on this shard. Its writes emit their effects
//! like any command's, and EVAL itself is never replicated.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use leasehold_protocol::{Args, Reply};

use super::flags::{MAY_REPLICATE, MOVABLE_KEYS, NO_SCRIPT, READONLY, STALE, WRITE};
use super::span::Next;
use super::{cmd, split, table, CommandSpec, Exec, NO_KEYS};
use crate::error::OpError;
use crate::script::cache::{parse_sha, sha1_hex, KillOutcome, ScriptCache};
use crate::script::vm::{with_vm, RunCell, RunOpts};
use crate::session::ConnCtx;
use crate::shard::{Job, Shard};
use crate::slot::{key_slot, slot_shard};

const EVAL: u32 = NO_SCRIPT | MAY_REPLICATE | MOVABLE_KEYS | STALE;
const EVAL_RO: u32 = READONLY | NO_SCRIPT | MOVABLE_KEYS | STALE;

/// The scripting family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("eval", -3, EVAL, NO_KEYS, Exec::Key(eval), "Executes a server-side Lua script."),
    cmd("evalsha", -3, EVAL, NO_KEYS, Exec::Key(evalsha), "Executes a server-side Lua script by SHA1 digest."),
    cmd("eval_ro", -3, EVAL_RO, NO_KEYS, Exec::Key(eval_ro), "Executes a read-only server-side Lua script."),
    cmd("evalsha_ro", -3, EVAL_RO, NO_KEYS, Exec::Key(evalsha_ro), "Executes a read-only server-side Lua script by SHA1 digest."),
    cmd("script", -2, NO_SCRIPT | STALE, NO_KEYS, Exec::Conn(script), "A container for Lua scripts management commands."),
];

fn eval(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    run(s, a, false, false, None)
}

fn evalsha(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    run(s, a, true, false, None)
}

fn eval_ro(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    run(s, a, false, true, None)
}

fn evalsha_ro(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    run(s, a, true, true, None)
}

/// Whether row `idx` is EVAL or one of its siblings.
pub fn is_script(idx: usize) -> bool {
    matches!(
        table().commands[idx].name,
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro"
    )
}

/// Whether script request `all` (EVAL and its siblings: name, script,
/// numkeys, ...) runs holding every shard: its body names a command that
/// reads or writes the whole keyspace (KEYS, SCAN, DBSIZE, FLUSHALL, ...;
/// see [`names_whole_keyspace`]). EVALSHA asks the cache, which judged the
/// body when it was loaded: one atomic load while no cached script does.
pub fn needs_every_shard(cache: &ScriptCache, idx: usize, all: &[Bytes]) -> bool {
    let Some(script) = all.get(1) else {
        return false;
    };
    match table().commands[idx].name.starts_with("evalsha") {
        true => parse_sha(script).is_some_and(|sha| cache.every_shard(&sha)),
        false => names_whole_keyspace(script),
    }
}

/// Whether Lua source `body` names, as a quoted string literal in any
/// case (`'keys'`, `"SCAN"`), a command scripts may call that runs on
/// every shard: such a script is given every shard, so that on a server
/// of several threads it sees and changes the whole keyspace as on one.
/// A script that builds the name at run time is not seen here; its call
/// gets the error that names the command.
pub fn names_whole_keyspace(body: &[u8]) -> bool {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        table()
            .commands
            .iter()
            // SCAN walks every shard by its cursor; CLUSTER's cursor form
            // reads one slot.
            .filter(|c| matches!(c.exec, Exec::AllShards(..)) || c.name == "scan")
            .filter(|c| !c.has(NO_SCRIPT))
            .map(|c| c.name)
            .collect()
    });
    body.iter().enumerate().any(|(i, &q)| {
        (q == b'\'' || q == b'"')
            && names.iter().any(|name| {
                let rest = &body[i + 1..];
                rest.len() > name.len()
                    && rest[..name.len()].eq_ignore_ascii_case(name.as_bytes())
                    && rest[name.len()] == q
            })
    })
}

/// The shards a script over several holds, and how a `redis.call` whose
/// keys live on one of the others runs: `call(shard, job)` runs the job
/// there and answers its reply (the caller waits for it).
pub struct Across<'a> {
    /// The shards locked for the script, this one among them.
    pub shards: &'a [usize],
    /// Runs one job on another of `shards` and answers its reply.
    pub call: &'a mut dyn FnMut(usize, Job) -> Reply,
}

/// Runs script row `idx` (EVAL, EVALSHA, EVAL_RO or EVALSHA_RO) on this
/// shard with `across.shards` locked: a `redis.call` whose keys all live
/// on one of them runs there, through `across.call`; keys on a shard not
/// held are refused as in a one-shard script, and one call's keys on two
/// shards get CROSSSLOT, except for RENAME, RENAMENX, COPY and MSETNX,
/// which run in steps on those shards. Answers the script's reply.
pub fn run_across(s: &mut Shard, idx: usize, a: &mut Args, mut across: Across<'_>) -> Reply {
    let name = table().commands[idx].name;
    let by_sha = name.starts_with("evalsha");
    let read_only = name.ends_with("_ro");
    match run(s, a, by_sha, read_only, Some(&mut across)) {
        Ok(reply) => reply,
        Err(e) => e.reply(),
    }
}

/// Whether a command of that name exists (`redis.acl_check_cmd`).
fn known(name: &[u8]) -> bool {
    table().lookup(name).is_some()
}

/// EVAL and its siblings: `script numkeys key... arg...`, the script a
/// body or (`by_sha`) a SHA1 of a cached one.
fn run(
    s: &mut Shard,
    a: &mut Args,
    by_sha: bool,
    read_only: bool,
    mut across: Option<&mut Across<'_>>,
) -> Result<Reply, OpError> {
    // A restricted user's request ends with its name and a mark (see
    // `commands/acl.rs`): its calls are checked against that user.
    let mark = super::acl::marked(a.all());
    let caller = super::acl::script_caller(s.acl(), a.all());
    let script = a.next()?;
    let numkeys = a.i64()?;
    if numkeys < 0 {
        return Err(OpError::NegativeKeyCount);
    }
    if numkeys as u64 > (a.remaining() - mark) as u64 {
        return Err(OpError::TooManyKeys);
    }
    // KEYS and ARGV are read where they are, after the script and numkeys.
    let all = a.all();
    let (keys, argv) = all[3..all.len() - mark].split_at(numkeys as usize);
    let generation = s.scripts().generation();
    let state = s.scripts().run_state(s.id).clone();
    let threshold = Duration::from_millis(s.conf.busy_reply_threshold_ms);
    with_vm(known, |vm| {
        vm.sync(generation);
        let sha = match by_sha {
            true => parse_sha(&script).ok_or(OpError::NoScript)?,
            false => sha1_hex(&script),
        };
        if vm.function(&sha).is_none() {
            let body = match by_sha {
                true => s.scripts().body(&sha).ok_or(OpError::NoScript)?,
                false => script.clone(),
            };
            if let Err(reply) = vm.compile(sha, &body) {
                return Ok(reply);
            }
            if !by_sha {
                s.scripts()
                    .insert(sha, script.clone(), names_whole_keyspace(&script));
            }
        }
        let function = vm.function(&sha).ok_or(OpError::NoScript)?;
        let opts = RunOpts {
            sha,
            read_only,
            threshold,
            state,
        };
        // Its writes are one unit: framed in the stream when they name two
        // or more slots, which a replica may hold on two shards (a script
        // over several shards is framed by its transaction).
        let opened = s.store.effects_mut().begin_unit();
        let mut call = |run: &RunCell, argv: &mut Vec<Bytes>| {
            script_call(s, run, argv, across.as_deref_mut(), caller.as_ref())
        };
        let reply = vm.run(function, keys, argv, opts, &mut call);
        if opened {
            s.store.effects_mut().end_unit();
        }
        Ok(reply)
    })
}

/// One `redis.call` on shard `s`, checked in Redis's order.
fn script_call(
    s: &mut Shard,
    run: &RunCell,
    argv: &mut Vec<Bytes>,
    across: Option<&mut Across<'_>>,
    caller: Option<&Option<std::sync::Arc<crate::acl::User>>>,
) -> Reply {
    match checked_call(s, run, argv, across, caller) {
        Ok(reply) => reply,
        Err(e) => e.reply(),
    }
}

fn checked_call(
    s: &mut Shard,
    run: &RunCell,
    argv: &mut Vec<Bytes>,
    across: Option<&mut Across<'_>>,
    caller: Option<&Option<std::sync::Arc<crate::acl::User>>>,
) -> Result<Reply, OpError> {
    let Some((idx, spec)) = table().lookup(&argv[0]) else {
        return Err(OpError::ScriptUnknownCommand);
    };
    if !spec.arity_ok(argv.len()) {
        return Err(OpError::ScriptArity);
    }
    if let Some(user) = caller {
        super::acl::script_denial(s.shared(), user, idx, spec, argv)?;
    }
    if spec.has(NO_SCRIPT) {
        return Err(OpError::ScriptNotAllowed);
    }
    let write = spec.has(WRITE);
    if write {
        if run.read_only() {
            return Err(OpError::ScriptWriteInReadOnly);
        }
        if let Some(e) = s.write_refusal() {
            return Err(e);
        }
    }
    let foreign =
        |p: usize| OpError::ScriptForeignKey(String::from_utf8_lossy(&argv[p]).into_owned());
    let Some(across) = across else {
        if let Some(p) = spec
            .keys_in(argv)
            .find(|&p| key_shard(&argv[p], s.shards) != s.id)
        {
            return Err(foreign(p));
        }
        let handler = match spec.exec {
            // Every key is on this shard (checked above): the one-shard form.
            Exec::Key(f) | Exec::Keys(f, _) | Exec::Span(f, _) => f,
            // One shard holds every key: the command's every-shard form is
            // this shard's alone.
            Exec::AllShards(f, _) | Exec::Cursor(f) if s.shards == 1 => f,
            Exec::AllShards(..) | Exec::Cursor(_) => {
                return Err(OpError::ScriptAllShards(spec.name));
            }
            Exec::Conn(_) => return conn_command(s, spec, argv),
        };
        if write && !run.before_write() {
            return Ok(RunCell::killed_reply());
        }
        // The vector goes back for the next call.
        let mut args = Args::new(std::mem::take(argv));
        let reply = s.run(idx, handler, true, false, &mut args);
        *argv = args.into_inner();
        return Ok(reply);
    };
    // The script holds `across.shards`: every key of the call must live on
    // one of them.
    let owner = split::key_shards(spec, argv, s.shards);
    if let Some(i) = owner.iter().position(|o| !across.shards.contains(o)) {
        let p = spec.key_positions(argv.len()).nth(i).unwrap_or(0);
        return Err(foreign(p));
    }
    let every = across.shards.len() == s.shards;
    let one = owner.windows(2).all(|w| w[0] == w[1]);
    let (handler, merge) = match spec.exec {
        Exec::Key(f) | Exec::Span(f, _) if one => (f, None),
        // Keys on several held shards: driven in steps below.
        Exec::Span(f, _) => (f, None),
        Exec::Keys(_, _) if !split::groups_complete(spec, argv.len()) => {
            return Err(OpError::Arity(spec.name));
        }
        Exec::Keys(f, merge) => (f, Some(merge)),
        Exec::Key(_) => return Err(OpError::CrossSlot),
        Exec::AllShards(f, merge) if every => (f, Some(merge)),
        Exec::Cursor(f) if every => (f, None),
        Exec::AllShards(..) | Exec::Cursor(_) => return Err(OpError::ScriptAllShards(spec.name)),
        Exec::Conn(_) => return conn_command(s, spec, argv),
    };
    let argv = std::mem::take(argv);
    if write && !run.before_write() {
        return Ok(RunCell::killed_reply());
    }
    match (spec.exec, merge) {
        // RENAME, COPY, MSETNX over keys of several held shards: the steps
        // the command's driver names, each on its shard, as a transaction
        // drives them (the script holds those shards already).
        (Exec::Span(_, drive), _) if !one => {
            let (mut step, mut replies) = (0, Vec::new());
            loop {
                match drive(&argv, s.shards, step, &replies) {
                    Next::Run(jobs) => {
                        replies = jobs
                            .into_iter()
                            .map(|j| run_on(s, across, j.shard, idx, j.run, j.args, false))
                            .collect();
                        step += 1;
                    }
                    Next::Done(result) => return Ok(s.stats.count_call(idx, result)),
                }
            }
        }
        // Every shard runs it with the same arguments; the replies merge.
        (Exec::AllShards(..), Some(merge)) => {
            let replies = (0..s.shards)
                .map(|shard| run_on(s, across, shard, idx, handler, argv.clone(), false))
                .collect();
            let merged = merge.combine(replies, &[], 0);
            Ok(s.stats.count_call(idx, Ok(merged)))
        }
        (Exec::Cursor(_), _) => {
            let shard = split::cursor_shard(&argv, s.shards, s.id);
            Ok(run_on(s, across, shard, idx, handler, argv, true))
        }
        // Keys on several held shards: one part each, merged as the
        // dispatcher merges a split request.
        (Exec::Keys(..), Some(merge)) if !one => {
            let parts = split::split_by_shard(spec, &argv, &owner, s.shards);
            let ordinals: Vec<Vec<usize>> = parts.iter().map(|p| p.ordinals.clone()).collect();
            let replies = parts
                .into_iter()
                .map(|p| run_on(s, across, p.shard, idx, handler, p.argv, false))
                .collect();
            let merged = merge.combine(replies, &ordinals, owner.len());
            Ok(s.stats.count_call(idx, Ok(merged)))
        }
        _ => {
            let shard = owner.first().copied().unwrap_or(s.id);
            Ok(run_on(s, across, shard, idx, handler, argv, true))
        }
    }
}

/// The shard that owns `key`, of `shards`.
fn key_shard(key: &[u8], shards: usize) -> usize {
    slot_shard(key_slot(key), shards)
}

/// Runs `handler` of row `idx` over `argv` on held shard `shard`: here
/// when it is this one, else through `across.call` (the caller waits).
fn run_on(
    s: &mut Shard,
    across: &mut Across<'_>,
    shard: usize,
    idx: usize,
    handler: crate::shard::ShardFn,
    argv: Vec<Bytes>,
    counted: bool,
) -> Reply {
    let mut args = Args::new(argv);
    if shard == s.id {
        return s.run(idx, handler, counted, false, &mut args);
    }
    let job = Job {
        cmd: idx,
        run: handler,
        counted,
        link: false,
        args,
    };
    (across.call)(shard, job)
}

/// The connection commands a script may call: TIME (the shard's clock
/// reading, to the millisecond) and SELECT 0. The others need a
/// connection a script does not have.
fn conn_command(s: &mut Shard, spec: &CommandSpec, argv: &[Bytes]) -> Result<Reply, OpError> {
    match spec.name {
        "time" => {
            let ms = s.now.unix_ms;
            Ok(Reply::Array(vec![
                Reply::bulk((ms / 1000).to_string()),
                Reply::bulk(((ms % 1000) * 1000).to_string()),
            ]))
        }
        "select" => match &argv[1][..] {
            b"0" => Ok(Reply::ok()),
            _ => Err(OpError::DbIndexOutOfRange),
        },
        name => Err(OpError::ScriptConnCommand(name)),
    }
}

/// SCRIPT LOAD | EXISTS | FLUSH [ASYNC|SYNC] | KILL | HELP, on the
/// connection's thread. LOAD compiles in this thread's VM (a syntax error
/// is refused as Redis refuses it) and caches the body for every thread.
fn script(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let given = a.next()?;
    let sub = String::from_utf8_lossy(&given).to_ascii_uppercase();
    let arity = || OpError::SubcommandArity(format!("script|{}", sub.to_ascii_lowercase()));
    let cache = &ctx.shared.scripts;
    match sub.as_str() {
        "LOAD" => {
            let body = a.next().map_err(|_| arity())?;
            a.finish().map_err(|_| arity())?;
            let sha = sha1_hex(&body);
            let compiled = with_vm(known, |vm| {
                vm.sync(cache.generation());
                match vm.function(&sha) {
                    Some(_) => Ok(()),
                    None => vm.compile(sha, &body).map(|_| ()),
                }
            });
            if let Err(reply) = compiled {
                return Ok(reply);
            }
            let every_shard = names_whole_keyspace(&body);
            cache.insert(sha, body, every_shard);
            Ok(Reply::bulk(sha))
        }
        "EXISTS" => {
            if a.remaining() == 0 {
                return Err(arity());
            }
            let found = (0..a.remaining())
                .map(|_| {
                    a.next()
                        .map(|sha| parse_sha(&sha).is_some_and(|s| cache.contains(&s)))
                })
                .map(|r| r.map(|f| Reply::Int(i64::from(f))))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Reply::Array(found))
        }
        "FLUSH" => {
            let ok = match a.remaining() {
                0 => true,
                1 => a.flag("ASYNC") || a.flag("SYNC"),
                _ => false,
            };
            if !ok {
                return Err(OpError::ScriptFlushOption);
            }
            cache.flush();
            Ok(Reply::ok())
        }
        "KILL" => {
            a.finish().map_err(|_| arity())?;
            match cache.kill() {
                KillOutcome::Killed => Ok(Reply::ok()),
                KillOutcome::Unkillable => Err(OpError::Unkillable),
                KillOutcome::NotBusy => Err(OpError::NotBusy),
            }
        }
        "HELP" => Ok(Reply::Array(
            SCRIPT_HELP.iter().map(|l| Reply::simple(l)).collect(),
        )),
        _ => Err(OpError::UnknownSubcommand {
            command: "SCRIPT",
            sub: String::from_utf8_lossy(&given).into_owned(),
        }),
    }
}

/// SCRIPT HELP's lines (Redis's, less SCRIPT DEBUG, which Leasehold has not).
const SCRIPT_HELP: &[&str] = &[
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    ASYNC and SYNC both flush at once (the cache is small).",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
];
