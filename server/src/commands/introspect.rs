//! What a key's value looks like inside: OBJECT ENCODING / FREQ / IDLETIME /
//! REFCOUNT / HELP and MEMORY USAGE / HELP.
//!
//! Replies and errors follow Redis 7.0 (`object.c`): a missing key answers
//! nil; a subcommand with the wrong number of arguments is `ERR wrong
//! number of arguments for 'object|<sub>' command`, an unknown one `ERR
//! unknown subcommand '<sub>'. Try OBJECT HELP.`. What depends on the kind
//! of value comes from [`crate::store::Value`] (`encoding`, `refcount`,
//! `heap_bytes`), so every kind of value answers through the same code.
//!
//! Leasehold keeps no access clock or counter per key (an entry is 48
//! bytes, key, deadline and value): OBJECT IDLETIME answers 0, and OBJECT
//! FREQ answers Redis's error for a server without an LFU
//! `maxmemory-policy` (Leasehold has only `noeviction`). MEMORY USAGE is
//! Leasehold's own accounting (`Store::describe`): the entry, its tag, a
//! key too long to sit inline, and the value's own allocation; `SAMPLES` is
//! checked and has nothing to sample yet.

use leasehold_protocol::{Args, Reply};

use super::flags::READONLY;
use super::{cmd, CommandSpec, Exec};
use crate::error::OpError;
use crate::shard::Shard;

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("object", -2, READONLY, (2, 2, 1), Exec::Key(object), "A container for object introspection commands."),
    cmd("memory", -2, READONLY, (2, 2, 1), Exec::Key(memory), "A container for memory diagnostics commands."),
];

/// The help lines of OBJECT HELP, Redis 7.0's.
const OBJECT_HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
];

/// The help lines of MEMORY HELP: Redis 7.0's for the subcommands there are.
const MEMORY_HELP: &[&str] = &[
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
    "HELP",
    "    Prints this help.",
];

fn help(lines: &[&'static str]) -> Reply {
    Reply::Array(lines.iter().map(|l| Reply::simple(l)).collect())
}

/// A container's subcommand as sent: upper-cased, with the request's
/// argument count and its name for arity errors (`object|encoding`).
struct Sub {
    word: String,
    argc: usize,
    label: String,
}

impl Sub {
    fn read(a: &mut Args, command: &str) -> Result<Sub, OpError> {
        let word = a.word()?;
        let label = format!("{command}|{}", word.to_ascii_lowercase());
        Ok(Sub {
            word,
            argc: a.all().len(),
            label,
        })
    }

    /// Checks the argument count (`arity` in Redis's sign convention, name
    /// and subcommand included).
    fn arity(&self, arity: i32) -> Result<(), OpError> {
        let ok = match arity >= 0 {
            true => self.argc == arity as usize,
            false => self.argc >= arity.unsigned_abs() as usize,
        };
        ok.then_some(())
            .ok_or_else(|| OpError::SubcommandArity(self.label.clone()))
    }
}

fn object(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let sub = Sub::read(a, "object")?;
    let known = ["ENCODING", "FREQ", "IDLETIME", "REFCOUNT"];
    if sub.word == "HELP" {
        sub.arity(2)?;
        return Ok(help(OBJECT_HELP));
    }
    if !known.contains(&sub.word.as_str()) {
        return Err(OpError::UnknownSubcommand {
            command: "OBJECT",
            sub: String::from_utf8_lossy(&a.all()[1]).into_owned(),
        });
    }
    sub.arity(3)?;
    let key = a.key()?;
    let Some((encoding, refcount, _)) = s.store.describe(&key, s.now.unix_ms) else {
        return Ok(Reply::Nil);
    };
    match sub.word.as_str() {
        "ENCODING" => Ok(Reply::bulk(encoding)),
        "REFCOUNT" => Ok(Reply::Int(refcount)),
        "IDLETIME" => Ok(Reply::Int(0)),
        _ => Err(OpError::LfuNotSelected),
    }
}

fn memory(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let sub = Sub::read(a, "memory")?;
    match sub.word.as_str() {
        "HELP" => {
            sub.arity(2)?;
            Ok(help(MEMORY_HELP))
        }
        "USAGE" => {
            sub.arity(-3)?;
            let key = a.key()?;
            while a.remaining() > 0 {
                if !a.flag("SAMPLES") || a.remaining() == 0 {
                    return Err(OpError::Syntax);
                }
                if a.i64()? < 0 {
                    return Err(OpError::Syntax);
                }
            }
            let usage = s.store.describe(&key, s.now.unix_ms);
            Ok(usage.map_or(Reply::Nil, |(_, _, bytes)| Reply::Int(bytes as i64)))
        }
        _ => Err(OpError::UnknownSubcommand {
            command: "MEMORY",
            sub: String::from_utf8_lossy(&a.all()[1]).into_owned(),
        }),
    }
}
