//! Resharding with real processes on loopback: two `leasehold-server`
//! primaries (group g0 owning 0-8191, g1 8192-16383), a slot put in
//! migration with CLUSTER SETSLOT, the replies of a node on each side
//! (ASK, ASKING, MOVED, TRYAGAIN) compared byte for byte, and MIGRATE of
//! every kind of value, rate-limit states included, compared field by
//! field on both sides.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::Duration;

use bytes::BytesMut;
use leasehold_testkit::{call, free_port, node_command, started, text, Proc, Reply};

mod common;

use common::slot;

/// Two groups of one primary each.
fn topology(version: u64, ports: &[u16], g0: &str, g1: &str) -> String {
    format!(
        "version = {version}\n[[group]]\nname = \"g0\"\nslots = [{g0}]\n[[group.node]]\naddr = \"127.0.0.1:{}\"\nrole = \"primary\"\n[[group]]\nname = \"g1\"\nslots = [{g1}]\n[[group.node]]\naddr = \"127.0.0.1:{}\"\nrole = \"primary\"\n",
        ports[0], ports[1]
    )
}

struct Pair {
    ports: Vec<u16>,
    ids: Vec<String>,
    _nodes: Vec<Proc>,
}

fn pair() -> Pair {
    let dir = leasehold_testkit::scratch_dir();
    let ports: Vec<u16> = (0..2).map(|_| free_port()).collect();
    let file = dir.join("topology.toml");
    std::fs::write(&file, topology(1, &ports, "\"0-8191\"", "\"8192-16383\"")).unwrap();
    let nodes = ports
        .iter()
        .map(|&port| {
            let data = dir.join(port.to_string());
            std::fs::create_dir_all(&data).unwrap();
            let mut cmd = node_command(env!("CARGO_BIN_EXE_leasehold-server"), port, &data);
            cmd.args(["--cluster-enabled", "yes", "--cluster-config-file"]);
            cmd.arg(&file);
            started(cmd.stderr(Stdio::inherit()), port, "leasehold-server")
        })
        .collect();
    let ids = ports
        .iter()
        .map(|&p| text(&call(p, &["CLUSTER", "MYID"]).unwrap()))
        .collect();
    Pair {
        ports,
        ids,
        _nodes: nodes,
    }
}

/// A raw connection: requests written whole, replies read as bytes.
struct Raw(TcpStream);

impl Raw {
    fn open(port: u16) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        Raw(s)
    }

    /// Sends `args` and returns exactly `want.len()` bytes of reply,
    /// asserting they are `want`.
    fn expect(&mut self, args: &[&str], want: &str) {
        let mut out = BytesMut::new();
        leasehold_protocol::encode_request(args, &mut out);
        self.0.write_all(&out).unwrap();
        let mut got = vec![0u8; want.len()];
        self.0.read_exact(&mut got).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), want, "{args:?}");
    }
}

/// The tag `{tN}` of the first N whose slot is in `first..=last`.
fn tag_in(first: u16, last: u16) -> String {
    (0..)
        .map(|n| format!("{{t{n}}}"))
        .find(|t| (first..=last).contains(&slot(t)))
        .unwrap()
}

#[test]
fn a_migrating_slot_answers_ask_asking_moved_and_tryagain_as_redis_does() {
    let c = pair();
    let (a, b) = (c.ports[0], c.ports[1]);
    let tag = tag_in(0, 8191);
    let s = slot(&tag);
    let (here, gone) = (format!("{tag}here"), format!("{tag}gone"));
    let mut ra = Raw::open(a);
    let mut rb = Raw::open(b);
    ra.expect(&["SET", &here, "v"], "+OK\r\n");
    let ss = s.to_string();
    // Redis's refusals.
    rb.expect(
        &["CLUSTER", "SETSLOT", &ss, "MIGRATING", &c.ids[0]],
        &format!("-ERR I'm not the owner of hash slot {s}\r\n"),
    );
    ra.expect(
        &["CLUSTER", "SETSLOT", &ss, "IMPORTING", &c.ids[1]],
        &format!("-ERR I'm already the owner of hash slot {s}\r\n"),
    );
    let nobody = "0".repeat(40);
    ra.expect(
        &["CLUSTER", "SETSLOT", &ss, "MIGRATING", &nobody],
        &format!("-ERR I don't know about node {nobody}\r\n"),
    );
    ra.expect(
        &["CLUSTER", "SETSLOT", "16384", "STABLE"],
        "-ERR Invalid or out of range slot\r\n",
    );
    ra.expect(
        &["CLUSTER", "SETSLOT", &ss, "SIDEWAYS"],
        "-ERR Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP\r\n",
    );
    // Open the migration.
    ra.expect(
        &["CLUSTER", "SETSLOT", &ss, "MIGRATING", &c.ids[1]],
        "+OK\r\n",
    );
    rb.expect(
        &["CLUSTER", "SETSLOT", &ss, "IMPORTING", &c.ids[0]],
        "+OK\r\n",
    );
    // The source serves what it has, ASKs for what it lacks.
    ra.expect(&["GET", &here], "$1\r\nv\r\n");
    ra.expect(&["GET", &gone], &format!("-ASK {s} 127.0.0.1:{b}\r\n"));
    ra.expect(&["SET", &gone, "x"], &format!("-ASK {s} 127.0.0.1:{b}\r\n"));
    ra.expect(
        &["MGET", &here, &gone],
        "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
    );
    ra.expect(&["MGET", &here, &here], "*2\r\n$1\r\nv\r\n$1\r\nv\r\n");
    // The target: MOVED to the owner without ASKING, served after it, once.
    let moved = format!("-MOVED {s} 127.0.0.1:{a}\r\n");
    rb.expect(&["GET", &gone], &moved);
    rb.expect(&["ASKING"], "+OK\r\n");
    rb.expect(&["SET", &gone, "x"], "+OK\r\n");
    rb.expect(&["GET", &gone], &moved);
    rb.expect(&["ASKING"], "+OK\r\n");
    rb.expect(&["GET", &gone], "$1\r\nx\r\n");
    rb.expect(&["ASKING"], "+OK\r\n");
    rb.expect(
        &["MGET", &gone, &format!("{tag}other")],
        "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
    );
    // A slot that does not migrate still gets MOVED after ASKING.
    let elsewhere = format!("{}k", tag_in(0, 8191).replace('}', "x}"));
    if slot(&elsewhere) != s {
        rb.expect(&["ASKING"], "+OK\r\n");
        rb.expect(
            &["GET", &elsewhere],
            &format!("-MOVED {} 127.0.0.1:{a}\r\n", slot(&elsewhere)),
        );
    }
    // NODE needs the topology to say so first; STABLE closes.
    ra.expect(
        &["CLUSTER", "SETSLOT", &ss, "NODE", &c.ids[1]],
        &format!("-ERR the topology in force (version 1) does not give slot {s} to node {}'s group: publish the new topology first (LH.TOPOLOGY SET)\r\n", c.ids[1]),
    );
    ra.expect(&["CLUSTER", "SETSLOT", &ss, "STABLE"], "+OK\r\n");
    ra.expect(&["GET", &gone], "$-1\r\n");
}

/// RLSTATE without `pttl` (it counts down), as (field, value) pairs.
fn rlstate(port: u16, key: &str, asking: bool) -> Vec<(String, String)> {
    let mut conn = leasehold_testkit::Conn::open(port).unwrap();
    if asking {
        conn.call(&["ASKING"]).unwrap();
    }
    let r = conn.call(&["RLSTATE", key]).unwrap();
    let items: Vec<String> = match r {
        Reply::Array(v) => v.iter().map(text).collect(),
        Reply::Map(v) => v.iter().flat_map(|(k, v)| [text(k), text(v)]).collect(),
        other => panic!("RLSTATE {key}: {other:?}"),
    };
    items
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .filter(|(k, _)| k != "pttl")
        .collect()
}

/// Two RLSTATE readings of one state: every field equal, except that an
/// instant (`*_at_ms`, `window_start_ms`) may be 2 ms apart. A node keeps
/// instants on its monotonic clock and converts them to and from Unix ms
/// through the offset of its two clocks at that moment, each read in whole
/// ms, so each conversion (the source's, the target's on arrival, the
/// reading's) may shift an instant by 1 ms: the same resolution a replica
/// gets. The balance (`tokens`, `fraction`, `previous`, `current`) is exact.
fn same_state(after: &[(String, String)], before: &[(String, String)]) {
    assert_eq!(after.len(), before.len(), "{after:?} vs {before:?}");
    for ((ka, va), (kb, vb)) in after.iter().zip(before) {
        assert_eq!(ka, kb);
        if ka.ends_with("_at_ms") || ka == "window_start_ms" {
            let (x, y): (i64, i64) = (va.parse().unwrap(), vb.parse().unwrap());
            assert!((x - y).abs() <= 2, "{ka}: {va} vs {vb}");
        } else {
            assert_eq!(va, vb, "{ka}: {after:?} vs {before:?}");
        }
    }
}

/// What identifies a key's value on `port`: its type, its content read by
/// the type's reader, and its PEXPIRETIME (exact Unix ms).
fn snapshot(port: u16, key: &str, asking: bool) -> Vec<String> {
    let mut conn = leasehold_testkit::Conn::open(port).unwrap();
    let mut ask = |args: &[&str]| {
        if asking {
            conn.call(&["ASKING"]).unwrap();
        }
        conn.call(args).unwrap()
    };
    let kind = text(&ask(&["TYPE", key]));
    let content = match kind.as_str() {
        "string" => ask(&["GET", key]),
        "list" => ask(&["LRANGE", key, "0", "-1"]),
        "hash" => ask(&["HGETALL", key]),
        "set" => ask(&["SMEMBERS", key]),
        "zset" => ask(&["ZRANGE", key, "0", "-1", "WITHSCORES"]),
        _ => Reply::Nil,
    };
    let expires = ask(&["PEXPIRETIME", key]);
    vec![kind, format!("{content:?}"), format!("{expires:?}")]
}

#[test]
fn migrate_moves_every_kind_of_value_exactly() {
    let c = pair();
    let (a, b) = (c.ports[0], c.ports[1]);
    let tag = tag_in(0, 8191);
    let s = slot(&tag).to_string();
    let k = |name: &str| format!("{tag}{name}");
    let ok = |port, args: &[&str]| {
        let r = call(port, args).unwrap();
        assert!(!matches!(r, Reply::Error(_)), "{args:?}: {r:?}");
    };
    ok(a, &["SET", &k("str"), "hello", "PX", "600000"]);
    ok(a, &["SET", &k("plain"), "forever"]);
    ok(a, &["RPUSH", &k("list"), "a", "b", "c"]);
    ok(a, &["PEXPIRE", &k("list"), "500000"]);
    ok(a, &["HSET", &k("hash"), "f1", "v1", "f2", "v2"]);
    ok(a, &["SADD", &k("set"), "x", "y", "z"]);
    ok(a, &["ZADD", &k("zset"), "1.5", "m1", "2", "m2"]);
    // Slow refills, so no balance changes while the test reads it.
    ok(a, &["TOKENLEASE", &k("tb"), "100", "1", "86400000", "37"]);
    ok(
        a,
        &["SLIDINGWINDOW", &k("sw"), "50", "3600000", "COUNT", "7"],
    );
    ok(a, &["GCRA", &k("gcra"), "10", "1", "3600", "TOKENS", "3"]);
    let values = ["str", "plain", "list", "hash", "set", "zset"];
    let rates = ["tb", "sw", "gcra"];
    let before: Vec<_> = values.iter().map(|n| snapshot(a, &k(n), false)).collect();
    let rate_before: Vec<_> = rates.iter().map(|n| rlstate(a, &k(n), false)).collect();
    let expiry = |r: Reply| match r {
        Reply::Int(ms) => ms,
        other => panic!("PEXPIRETIME: {other:?}"),
    };
    let rate_expiry: Vec<i64> = rates
        .iter()
        .map(|n| expiry(call(a, &["PEXPIRETIME", &k(n)]).unwrap()))
        .collect();
    assert!(
        rate_before[0].contains(&("tokens".into(), "63".into())),
        "{rate_before:?}"
    );
    // MIGRATE needs the target to import the slot (it sends ASKING).
    ok(b, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &c.ids[0]]);
    ok(a, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &c.ids[1]]);
    let port = b.to_string();
    let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "2000", "KEYS"];
    let names: Vec<String> = values.iter().chain(&rates).map(|n| k(n)).collect();
    args.extend(names.iter().map(String::as_str));
    assert_eq!(call(a, &args), Some(Reply::ok()));
    // Nothing left on the source (which now ASKs for each key);
    // everything equal on the target.
    let ask = Reply::err_owned(format!("ASK {s} 127.0.0.1:{b}"));
    for n in &names {
        assert_eq!(call(a, &["EXISTS", n]), Some(ask.clone()), "{n}");
        assert_eq!(
            call(a, &["CLUSTER", "COUNTKEYSINSLOT", &s]),
            Some(Reply::Int(0))
        );
    }
    let after: Vec<_> = values.iter().map(|n| snapshot(b, &k(n), true)).collect();
    assert_eq!(after, before);
    let rate_after: Vec<_> = rates.iter().map(|n| rlstate(b, &k(n), true)).collect();
    for (after, before) in rate_after.iter().zip(&rate_before) {
        same_state(after, before);
    }
    let mut conn = leasehold_testkit::Conn::open(b).unwrap();
    for (n, want) in rates.iter().zip(&rate_expiry) {
        conn.call(&["ASKING"]).unwrap();
        let got = expiry(conn.call(&["PEXPIRETIME", &k(n)]).unwrap());
        // A state's deadline is on the monotonic clock too: see `same_state`.
        assert!((got - want).abs() <= 2, "{n}: {got} vs {want}");
    }
    // Nothing left to move: NOKEY. A key the target has: BUSYKEY, kept here.
    let nokey = ["MIGRATE", "127.0.0.1", &port, &k("str"), "0", "1000"];
    assert_eq!(call(a, &nokey), Some(Reply::Simple("NOKEY".into())));
    ok(a, &["CLUSTER", "SETSLOT", &s, "STABLE"]);
    ok(a, &["SET", &k("str"), "again"]);
    assert_eq!(
        call(a, &nokey),
        Some(Reply::err("BUSYKEY Target key name already exists."))
    );
    assert_eq!(call(a, &["GET", &k("str")]), Some(Reply::bulk("again")));
    let mut replace = nokey.to_vec();
    replace.push("REPLACE");
    assert_eq!(call(a, &replace), Some(Reply::ok()));
    conn.call(&["ASKING"]).unwrap();
    assert_eq!(conn.call(&["GET", &k("str")]), Some(Reply::bulk("again")));
    // A target that is not there: IOERR, and the key stays.
    ok(a, &["SET", &k("str"), "kept"]);
    let dead = free_port().to_string();
    assert_eq!(
        call(a, &["MIGRATE", "127.0.0.1", &dead, &k("str"), "0", "300"]),
        Some(Reply::err(
            "IOERR error or timeout connecting to target instance"
        ))
    );
    assert_eq!(call(a, &["GET", &k("str")]), Some(Reply::bulk("kept")));
    assert_eq!(
        call(a, &["MIGRATE", "127.0.0.1", &port, &k("str"), "3", "300"]),
        Some(Reply::err(
            "ERR MIGRATE moves keys to database 0 only (Leasehold has one)"
        ))
    );
}

#[test]
fn leasehold_cluster_reshard_moves_a_range_with_its_keys_and_reruns() {
    let c = pair();
    let (a, b) = (c.ports[0], c.ports[1]);
    // Keys over slots 100-103 (and one outside), buckets and strings.
    let keys: Vec<String> = (0..)
        .map(|n| format!("k{n}"))
        .filter(|k| (100..=103).contains(&slot(k)))
        .take(12)
        .collect();
    assert!(keys.len() >= 2, "{keys:?}");
    for (i, k) in keys.iter().enumerate() {
        let r = match i % 2 {
            0 => call(a, &["TOKENLEASE", k, "100", "1", "86400000", "9"]),
            _ => call(a, &["SET", k, "v", "PX", "600000"]),
        };
        assert!(!matches!(r, Some(Reply::Error(_)) | None), "{r:?}");
    }
    let buckets: Vec<&String> = keys.iter().step_by(2).collect();
    let before: Vec<_> = buckets.iter().map(|k| rlstate(a, k, false)).collect();
    let run = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_leasehold-cluster"))
            .args([
                "reshard", "--from", "g0", "--to", "g1", "--slots", "100-103", "--batch", "3",
            ])
            .arg(format!("127.0.0.1:{a}"))
            .output()
            .unwrap()
    };
    let out = run();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains(&format!(
            "{} keys moved from g0 to g1; topology version 2",
            keys.len()
        )),
        "{stdout}"
    );
    for p in [a, b] {
        assert_eq!(call(p, &["LH.TOPOLOGY", "VERSION"]), Some(Reply::Int(2)));
    }
    // Every key on g1 now, served without ASKING; none left on g0.
    for s in 100..=103 {
        assert_eq!(
            call(a, &["CLUSTER", "COUNTKEYSINSLOT", &s.to_string()]),
            Some(Reply::Int(0))
        );
    }
    for k in &keys {
        assert_eq!(call(b, &["EXISTS", k]), Some(Reply::Int(1)), "{k}");
        assert_eq!(
            call(a, &["EXISTS", k]),
            Some(Reply::err_owned(format!("MOVED {} 127.0.0.1:{b}", slot(k))))
        );
    }
    for (k, want) in buckets.iter().zip(&before) {
        same_state(&rlstate(b, k, false), want);
    }
    // A re-run finds nothing to move and publishes nothing new.
    let again = run();
    assert!(again.status.success(), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("0 keys moved"),
        "{again:?}"
    );
    assert_eq!(call(a, &["LH.TOPOLOGY", "VERSION"]), Some(Reply::Int(2)));
}
