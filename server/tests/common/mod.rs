//! Reply builders and readers shared by the in-process family tests
//! (`server/tests/family_*.rs`, `table_effects.rs`), and the cluster
//! tests' key and slot helpers and `leasehold-cluster local` as a child
//! process ([`local`]).

#![allow(dead_code)] // each test file uses a part

use leasehold_protocol::Reply;
use leasehold_server::harness::Harness;

pub mod hotkeys;
pub mod local;
pub mod redis_cli;
pub mod redis_py;

/// An array of integers: `[granted, remaining, retry_after_ms, ...]`.
pub fn ints(v: &[i64]) -> Reply {
    Reply::Array(v.iter().map(|&i| Reply::Int(i)).collect())
}

/// An array of bulk strings.
pub fn bulks(v: &[&str]) -> Reply {
    Reply::Array(v.iter().map(Reply::bulk).collect())
}

/// An error reply with this exact text (code included).
pub fn err(text: &str) -> Reply {
    Reply::err_owned(text.to_string())
}

/// `ERR wrong number of arguments for '<name>' command`.
pub fn arity(name: &str) -> Reply {
    err(&format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// The text of a bulk or verbatim reply.
///
/// # Panics
/// For any other reply.
pub fn text(r: &Reply) -> String {
    match r {
        Reply::Bulk(b) | Reply::Verbatim(_, b) => String::from_utf8_lossy(b).into_owned(),
        Reply::Simple(s) => s.to_string(),
        other => panic!("not a string reply: {other:?}"),
    }
}

/// One `field:value` line of `INFO <section>` (`None` when absent).
pub fn info_field(h: &mut Harness, section: &str, field: &str) -> Option<String> {
    let reply = h.run(&["INFO", section]);
    text(&reply)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))
}

/// The WRONGTYPE error.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
/// The not-an-integer error.
pub const NOT_INT: &str = "ERR value is not an integer or out of range";
/// The syntax error.
pub const SYNTAX: &str = "ERR syntax error";

/// The value at `key` in a RESP3 map (read back in no particular order).
///
/// # Panics
/// When `map` is not a map or has no such key.
pub fn map_get(map: &Reply, key: &str) -> Reply {
    let Reply::Map(pairs) = map else {
        panic!("not a map: {map:?}");
    };
    pairs
        .iter()
        .find(|(k, _)| *k == Reply::bulk(key) || *k == Reply::Simple(key.to_string().into()))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {key} in {map:?}"))
}

/// The hash slot of `key` (the server's own function).
pub fn slot(key: &str) -> u16 {
    leasehold_server::slot::key_slot(key.as_bytes())
}

/// A key (`<prefix><n>`) whose hash slot is in `first..=last`.
pub fn key_in(prefix: &str, first: u16, last: u16) -> String {
    (0..)
        .map(|n| format!("{prefix}{n}"))
        .find(|k| (first..=last).contains(&slot(k)))
        .unwrap()
}
