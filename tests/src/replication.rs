//! Replication helpers: wait for a replica to catch up, and read a whole
//! keyspace for comparison.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::{info, info_fields, Raw, Reply, TestServer};

/// One key as a replica must hold it: its type, its value (GET for
/// strings, RLSTATE for rate-limit keys, LRANGE for lists, HGETALL's pairs
/// sorted for hashes, whose table order is each server's own, SMEMBERS
/// sorted for sets, ZRANGE
/// WITHSCORES for sorted sets) and its
/// absolute deadline (PEXPIRETIME), as reply text.
pub type Dump = BTreeMap<String, (String, String, String)>;

/// An INFO field of `section`.
///
/// # Panics
/// When the field is missing.
pub fn field(c: &mut Raw, section: &str, name: &str) -> String {
    let fields = info_fields(&info(c, section));
    fields
        .get(name)
        .unwrap_or_else(|| panic!("INFO {section} lacks {name}"))
        .clone()
}

/// Waits until INFO replication's `name` reads `want` on `server`.
///
/// # Panics
/// When it does not within `limit`.
pub fn wait_for_field(server: &TestServer, name: &str, want: &str, limit: Duration) {
    let mut c = server.raw();
    let start = Instant::now();
    loop {
        let got = field(&mut c, "replication", name);
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{name} is {got}, not {want}, after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Makes `replica` follow `primary`.
pub fn follow(replica: &TestServer, primary: &TestServer) {
    let line = format!("REPLICAOF 127.0.0.1 {}", primary.addr.port());
    assert_eq!(replica.raw().call(&line), "+OK\r\n");
}

/// Waits until `replica`'s link is up, not loading, and its offset equals
/// `primary`'s; returns that offset.
///
/// # Panics
/// When that does not happen within `limit`.
pub fn wait_caught_up(primary: &TestServer, replica: &TestServer, limit: Duration) -> u64 {
    let (mut p, mut r) = (primary.raw(), replica.raw());
    let start = Instant::now();
    loop {
        let fields = info_fields(&info(&mut r, "replication"));
        let want = field(&mut p, "replication", "master_repl_offset");
        let up = fields.get("master_link_status").map(String::as_str) == Some("up");
        let loaded = fields.get("master_sync_in_progress").map(String::as_str) == Some("0");
        if up && loaded && fields.get("slave_repl_offset") == Some(&want) {
            return want.parse().expect("offset");
        }
        assert!(
            start.elapsed() < limit,
            "replica not caught up after {limit:?}: {fields:?}, primary at {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn bulk_text(r: &Reply) -> String {
    match r {
        Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("not a bulk string: {other:?}"),
    }
}

/// Every key of the server behind `c`, with its type, value and deadline.
pub fn dump(c: &mut Raw) -> Dump {
    let mut keys = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        c.send_cmd(&format!("SCAN {cursor} COUNT 1000"));
        let reply = c.read_reply();
        let Reply::Array(parts) = reply else {
            panic!("SCAN is not an array: {reply:?}")
        };
        cursor = bulk_text(&parts[0]);
        let Reply::Array(found) = &parts[1] else {
            panic!("SCAN keys are not an array")
        };
        keys.extend(found.iter().map(bulk_text));
        if cursor == "0" {
            break;
        }
    }
    keys.sort();
    keys.dedup();
    let mut out = Dump::new();
    for chunk in keys.chunks(200) {
        let mut wire = Vec::new();
        for k in chunk {
            for cmd in ["TYPE", "GET", "RLSTATE", "PEXPIRETIME", "HGETALL"] {
                wire.extend(crate::resp(&[cmd.as_bytes(), k.as_bytes()]));
            }
            wire.extend(crate::resp(&[b"LRANGE", k.as_bytes(), b"0", b"-1"]));
            wire.extend(crate::resp(&[b"SMEMBERS", k.as_bytes()]));
            let zrange: [&[u8]; 5] = [b"ZRANGE", k.as_bytes(), b"0", b"-1", b"WITHSCORES"];
            wire.extend(crate::resp(&zrange));
        }
        c.send(&wire);
        for k in chunk {
            let ty = c.read_text();
            let get = c.read_text();
            let rl = c.read_text();
            let at = c.read_text();
            let hash = sorted_chunks(c.read_reply(), 2);
            let list = c.read_text();
            let set = sorted_chunks(c.read_reply(), 1);
            let zset = c.read_text();
            let value = match ty.as_str() {
                "+string\r\n" => get,
                "+list\r\n" => list,
                "+hash\r\n" => hash,
                "+set\r\n" => set,
                "+zset\r\n" => zset,
                _ => rl,
            };
            out.insert(k.clone(), (ty, value, at));
        }
    }
    out
}

/// A flat array as its runs of `n` (field and value: 2; members: 1)
/// sorted (any other reply as it came).
fn sorted_chunks(reply: Reply, n: usize) -> String {
    let Reply::Array(flat) = reply else {
        return format!("{reply:?}");
    };
    let mut pairs: Vec<String> = flat.chunks(n).map(|pair| format!("{:?}", pair)).collect();
    pairs.sort();
    pairs.join(",")
}

/// Asserts two dumps are equal, naming at most 10 keys that differ.
///
/// # Panics
/// When they differ.
pub fn assert_same(got: &Dump, want: &Dump, what: &str) {
    let keys: std::collections::BTreeSet<&String> = got.keys().chain(want.keys()).collect();
    let differ: Vec<String> = keys
        .into_iter()
        .filter(|k| got.get(*k) != want.get(*k))
        .take(10)
        .map(|k| format!("{k}: {:?} where {:?} was wanted", got.get(k), want.get(k)))
        .collect();
    assert!(
        differ.is_empty(),
        "{what}: {} keys against {}; first differences:\n{}",
        got.len(),
        want.len(),
        differ.join("\n")
    );
}
