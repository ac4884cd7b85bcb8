//! Resharding with real processes on loopback: two `leasehold-server`
//! primaries (group g0 owning 0-8191, g1 8192-16383), a slot put in
//! migration with CLUSTER SETSLOT, the replies of a node on each side
//! (ASK, ASKING, MOVED, TRYAGAIN) compared byte for byte, and MIGRATE of
//! every kind of value, rate-limit states included, compared field by
//! field on both sides. `leasehold-cluster reshard` moving a range while
//! cluster clients (`leasehold-client`) lease tokens and INCR counters on
//! its keys: every token and every INCR accounted for.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use leasehold_client::{BucketParams, Client, ClientConfig, Error, ServerErrorKind};
use leasehold_testkit::{
    call, cluster_topology, free_port, node_command, started, text, Proc, Reply,
};

mod common;

use common::slot;

/// `n` groups of one primary each on real processes: group `gI` owns an
/// even share of the slots (two groups: 0-8191 and 8192-16383), topology
/// version 1.
struct Nodes {
    ports: Vec<u16>,
    ids: Vec<String>,
    _nodes: Vec<Proc>,
}

fn groups(n: usize) -> Nodes {
    let dir = leasehold_testkit::scratch_dir();
    let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let ranges: Vec<String> = (0..n)
        .map(|g| format!("\"{}-{}\"", 16384 * g / n, 16384 * (g + 1) / n - 1))
        .collect();
    let ranges: Vec<&str> = ranges.iter().map(String::as_str).collect();
    let file = dir.join("topology.toml");
    std::fs::write(&file, cluster_topology(1, &ports, &ranges)).unwrap();
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
    Nodes {
        ports,
        ids,
        _nodes: nodes,
    }
}

/// Two groups: g0 owns 0-8191, g1 8192-16383.
fn pair() -> Nodes {
    groups(2)
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
    let offset = |p: u16| {
        let info = text(&call(p, &["INFO", "replication"]).unwrap());
        let line = info
            .lines()
            .find_map(|l| l.strip_prefix("master_repl_offset:"));
        line.and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{info}"))
    };
    let source_offset = offset(a);
    assert_eq!(call(a, &args), Some(Reply::ok()));
    // The deletions went into the source's stream (its replicas and log
    // drop the keys too).
    assert!(offset(a) > source_offset, "MIGRATE appended no effect");
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
    // `check` names each group's primary once, though g0's and g1's
    // ranges now alternate in slot order.
    let checked = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold-cluster"))
        .arg("check")
        .arg(format!("127.0.0.1:{a}"))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success(), "{report}");
    assert!(
        report.contains("topology version 2, 4 slot ranges"),
        "{report}"
    );
    for p in [a, b] {
        let line = format!("[OK] primary 127.0.0.1:{p} answers as master");
        assert_eq!(report.matches(&line).count(), 1, "{report}");
    }
    // A re-run finds nothing to move and publishes nothing new.
    let again = run();
    assert!(again.status.success(), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stdout)
            .contains("0 keys moved from g0 to g1; topology version 2"),
        "{again:?}"
    );
    assert_eq!(call(a, &["LH.TOPOLOGY", "VERSION"]), Some(Reply::Int(2)));
}

/// The bucket policy of the load test: a refill of 1 token a day, so no
/// balance grows while the test runs.
const CAPACITY: u64 = 1_000_000;
const DAY_MS: u64 = 86_400_000;

/// The whole tokens of bucket `key` on `port` (RLSTATE's `tokens`).
fn tokens(port: u16, key: &str) -> i64 {
    let state = rlstate(port, key, false);
    let (_, t) = state
        .iter()
        .find(|(k, _)| k == "tokens")
        .unwrap_or_else(|| panic!("no tokens in {key}'s {state:?}"));
    t.parse().unwrap()
}

/// The keys of every node: DBSIZE summed.
fn total_keys(ports: &[u16]) -> i64 {
    ports
        .iter()
        .map(|&p| match call(p, &["DBSIZE"]) {
            Some(Reply::Int(n)) => n,
            other => panic!("DBSIZE on {p}: {other:?}"),
        })
        .sum()
}

/// What one load thread did to each key of the moved range: tokens granted
/// (buckets) or INCRs acknowledged (counters), index for index; the errors
/// that escaped the client's redirections; the TRYAGAINs it retried.
#[derive(Default)]
struct Done {
    per_key: Vec<u64>,
    errors: Vec<String>,
    tryagain: u64,
    ops: u64,
}

/// One load thread: its own cluster client (seeded with `seed`, following
/// MOVED and ASK), TOKENLEASE of 1 token on the even keys and INCR on the
/// odd ones, the keys `me, me + threads, ...` in turn, until `stop` or
/// `max_ops` operations. A TRYAGAIN is retried after 1 ms; any other error
/// is recorded (the operation's outcome is then unknown).
fn load(
    seed: u16,
    keys: Arc<Vec<String>>,
    me: usize,
    threads: usize,
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    max_ops: u64,
) -> Done {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut config = ClientConfig::cluster(vec![SocketAddr::from(([127, 0, 0, 1], seed))]);
    // Debug builds on a shared 2-core machine; MIGRATE blocks a shard for
    // its round trip to the target.
    config.lease_deadline = Duration::from_secs(3);
    config.call_deadline = Duration::from_secs(3);
    let client = Client::new(config);
    let policy = BucketParams {
        capacity: CAPACITY,
        rate: 1,
        period_ms: DAY_MS,
    };
    let mut done = Done {
        per_key: vec![0; keys.len()],
        ..Done::default()
    };
    let mut i = me;
    rt.block_on(async {
        while !stop.load(Ordering::Relaxed) && done.ops < max_ops {
            let key = keys[i].as_bytes();
            let outcome = match i % 2 {
                0 => client
                    .token_lease(key, policy, 1, 1)
                    .await
                    .map(|l| l.granted),
                _ => client.incr(key).await.map(|_| 1),
            };
            match outcome {
                Ok(n) => {
                    done.per_key[i] += n;
                    done.ops += 1;
                    ops.fetch_add(1, Ordering::Relaxed);
                    i = (i + threads) % keys.len();
                }
                Err(Error::Server(e)) if e.kind == ServerErrorKind::TryAgain => {
                    done.tryagain += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(e) => {
                    done.errors.push(format!("{}: {e}", keys[i]));
                    i = (i + threads) % keys.len();
                }
            }
        }
    });
    done
}

#[test]
fn a_reshard_under_load_loses_mints_and_duplicates_nothing() {
    let start = Instant::now();
    let c = groups(3);
    let (a, b, z) = (c.ports[0], c.ports[1], c.ports[2]);
    // 64 slots of g0 move to g1, with 300 keys: buckets (even) and
    // counters (odd).
    let (first, last) = (200u16, 263u16);
    let keys: Vec<String> = (0..)
        .map(|n| format!("load:{n}"))
        .filter(|k| (first..=last).contains(&slot(k)))
        .take(300)
        .collect();
    // Buckets nobody touches: on g0 outside the range, and on g2.
    let untouched: Vec<(u16, String)> = (0..)
        .map(|n| format!("still:{n}"))
        .filter_map(|k| match slot(&k) {
            1000..=5460 => Some((a, k)),
            10923..=16383 => Some((z, k)),
            _ => None,
        })
        .take(20)
        .collect();
    let cap = CAPACITY.to_string();
    let day = DAY_MS.to_string();
    let mut conn = leasehold_testkit::Conn::open(a).unwrap();
    for (i, k) in keys.iter().enumerate() {
        let r = match i % 2 {
            0 => conn.call(&["TOKENLEASE", k, &cap, "1", &day, &(i + 1).to_string()]),
            _ => conn.call(&["SET", k, &(1000 + i).to_string()]),
        };
        assert!(!matches!(r, Some(Reply::Error(_)) | None), "{k}: {r:?}");
    }
    for (i, (p, k)) in untouched.iter().enumerate() {
        let r = call(
            *p,
            &["TOKENLEASE", k, &cap, "1", &day, &(i + 3).to_string()],
        );
        assert!(matches!(r, Some(Reply::Array(_))), "{k}: {r:?}");
    }
    let count_before = total_keys(&c.ports);
    assert_eq!(count_before, (keys.len() + untouched.len()) as i64);
    let tokens_before: Vec<i64> = keys.iter().step_by(2).map(|k| tokens(a, k)).collect();
    let still_before: Vec<_> = untouched
        .iter()
        .map(|(p, k)| rlstate(*p, k, false))
        .collect();

    // The load: 4 client threads, seeded with g2's node (every key of the
    // range is redirected at least once to reach its owner).
    let keys = Arc::new(keys);
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let threads = 4;
    let loaders: Vec<_> = (0..threads)
        .map(|me| {
            let (keys, stop, ops) = (keys.clone(), stop.clone(), ops.clone());
            std::thread::spawn(move || load(z, keys, me, threads, stop, ops, 200_000))
        })
        .collect();
    leasehold_testkit::wait_for("the load starts", Duration::from_secs(10), || {
        ops.load(Ordering::Relaxed) >= 1000
    });
    let ops_at_start = ops.load(Ordering::Relaxed);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold-cluster"))
        .args(["reshard", "--from", "g0", "--to", "g1", "--batch", "7"])
        .args(["--slots", &format!("{first}-{last}")])
        .arg(format!("127.0.0.1:{a}"))
        .output()
        .unwrap();
    let ops_during = ops.load(Ordering::Relaxed) - ops_at_start;
    // A moment on the new topology before the load stops.
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let done: Vec<Done> = loaders.into_iter().map(|t| t.join().unwrap()).collect();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains(&format!(
            "{} keys moved from g0 to g1; topology version 2",
            keys.len()
        )),
        "{stdout}"
    );
    let errors: Vec<&String> = done.iter().flat_map(|d| &d.errors).collect();
    let tryagain: u64 = done.iter().map(|d| d.tryagain).sum();
    let total_ops: u64 = done.iter().map(|d| d.ops).sum();
    eprintln!(
        "{total_ops} operations, {ops_during} during the reshard, {tryagain} TRYAGAIN retried, {} errors",
        errors.len()
    );
    assert!(errors.is_empty(), "{} errors: {errors:?}", errors.len());
    assert!(
        ops_during >= 100,
        "only {ops_during} operations during the reshard"
    );

    // Nothing lost, nothing doubled: the range's keys all on g1 only.
    let left: Vec<(u16, String)> = c
        .ports
        .iter()
        .filter(|&&p| p != b)
        .flat_map(|&p| {
            (first..=last).flat_map(move |s| {
                match call(p, &["CLUSTER", "GETKEYSINSLOT", &s.to_string(), "1000"]) {
                    Some(Reply::Array(keys)) => {
                        keys.iter().map(|k| (p, text(k))).collect::<Vec<_>>()
                    }
                    other => panic!("GETKEYSINSLOT {s} on {p}: {other:?}"),
                }
            })
        })
        .collect();
    let where_: Vec<String> = left
        .iter()
        .map(|(p, k)| {
            let i = keys.iter().position(|x| x == k);
            format!("{k} on {p}: slot {}, index {i:?}", slot(k))
        })
        .collect();
    assert!(
        left.is_empty(),
        "keys of the range outside g1 ({b}, g0 {a}): {where_:?}"
    );
    assert_eq!(total_keys(&c.ports), count_before);
    let per_key = |i: usize| done.iter().map(|d| d.per_key[i]).sum::<u64>();
    for (i, k) in keys.iter().enumerate() {
        if i % 2 == 0 {
            // Nothing minted, nothing lost: granted + left == held before.
            let granted = per_key(i) as i64;
            assert_eq!(
                granted + tokens(b, k),
                tokens_before[i / 2],
                "{k}: {granted} granted"
            );
        } else {
            let want = 1000 + i as u64 + per_key(i);
            assert_eq!(
                call(b, &["GET", k]),
                Some(Reply::bulk(want.to_string())),
                "{k}"
            );
        }
    }
    for ((p, k), before) in untouched.iter().zip(&still_before) {
        same_state(&rlstate(*p, k, false), before);
    }
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}

/// `leasehold-cluster reshard` with `args` against `port`.
fn reshard_cli(port: u16, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_leasehold-cluster"))
        .arg("reshard")
        .args(args)
        .arg(format!("127.0.0.1:{port}"))
        .output()
        .unwrap()
}

#[test]
fn reshard_refuses_a_range_not_all_the_sources_before_moving_anything() {
    let c = groups(3);
    let a = c.ports[0];
    // g0 owns 0-5460, g1 5461-10921: slots 5459-5462 are not all g0's.
    let key = (0..)
        .map(|n| format!("k{n}"))
        .find(|k| slot(k) == 5459)
        .unwrap();
    let absent = format!("{key}-absent");
    let absent = (0..)
        .map(|n| format!("{absent}{n}"))
        .find(|k| slot(k) == 5459)
        .unwrap();
    assert_eq!(call(a, &["SET", &key, "v"]), Some(Reply::ok()));
    let out = reshard_cli(a, &["--from", "g0", "--to", "g2", "--slots", "5459-5462"]);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("slot 5461 is not group \"g0\"'s"),
        "{out:?}"
    );
    // Nothing moved, nothing left migrating: the key is served on g0, and
    // a key g0 lacks answers nil there, not -ASK.
    assert_eq!(call(a, &["GET", &key]), Some(Reply::bulk("v")));
    assert_eq!(call(a, &["GET", &absent]), Some(Reply::Nil));
    assert_eq!(
        call(c.ports[2], &["CLUSTER", "COUNTKEYSINSLOT", "5459"]),
        Some(Reply::Int(0))
    );
    // The same group twice, and a batch of 0 keys (which would hand the
    // slots over without their keys), are refused too.
    let same = reshard_cli(a, &["--from", "g0", "--to", "g0", "--slots", "5459"]);
    assert!(!same.status.success(), "{same:?}");
    let zero = reshard_cli(
        a,
        &[
            "--from", "g0", "--to", "g1", "--slots", "5459", "--batch", "0",
        ],
    );
    assert!(!zero.status.success(), "{zero:?}");
    assert_eq!(call(a, &["LH.TOPOLOGY", "VERSION"]), Some(Reply::Int(1)));
    assert_eq!(call(a, &["GET", &key]), Some(Reply::bulk("v")));
}

/// Puts slot `s` in migration from the pair's first node to its second
/// (IMPORTING on the target first, as the operator tool does).
fn open_migration(c: &Nodes, s: &str) {
    let (a, b) = (c.ports[0], c.ports[1]);
    assert_eq!(
        call(b, &["CLUSTER", "SETSLOT", s, "IMPORTING", &c.ids[0]]),
        Some(Reply::ok())
    );
    assert_eq!(
        call(a, &["CLUSTER", "SETSLOT", s, "MIGRATING", &c.ids[1]]),
        Some(Reply::ok())
    );
}

/// This node's own CLUSTER NODES line (flags `myself`).
fn my_nodes_line(port: u16) -> String {
    let all = call(port, &["CLUSTER", "NODES"]).map(|r| text(&r));
    let all = all.expect("CLUSTER NODES");
    let line = all.lines().find(|l| l.contains("myself"));
    line.expect("a myself line").to_string()
}

#[test]
fn cluster_nodes_marks_the_slots_in_migration_on_each_side() {
    let c = pair();
    let (a, b) = (c.ports[0], c.ports[1]);
    let tag = tag_in(0, 8191);
    let s = slot(&tag).to_string();
    assert!(!my_nodes_line(a).contains('['), "{}", my_nodes_line(a));
    open_migration(&c, &s);
    let (la, lb) = (my_nodes_line(a), my_nodes_line(b));
    assert!(la.ends_with(&format!(" [{s}->-{}]", c.ids[1])), "{la}");
    assert!(lb.ends_with(&format!(" [{s}-<-{}]", c.ids[0])), "{lb}");
    // The other nodes' lines carry no marks.
    let all = text(&call(a, &["CLUSTER", "NODES"]).unwrap());
    assert_eq!(all.matches('[').count(), 1, "{all}");
    for p in [a, b] {
        assert_eq!(
            call(p, &["CLUSTER", "SETSLOT", &s, "STABLE"]),
            Some(Reply::ok())
        );
        assert!(!my_nodes_line(p).contains('['), "{}", my_nodes_line(p));
    }
}

#[test]
fn asking_before_multi_serves_the_whole_transaction_on_the_importing_node() {
    let c = pair();
    let (a, b) = (c.ports[0], c.ports[1]);
    let tag = tag_in(0, 8191);
    let s = slot(&tag).to_string();
    let key = format!("{tag}tx");
    open_migration(&c, &s);
    let mut rb = Raw::open(b);
    rb.expect(&["ASKING"], "+OK\r\n");
    rb.expect(&["MULTI"], "+OK\r\n");
    rb.expect(&["SET", &key, "v"], "+QUEUED\r\n");
    rb.expect(&["GET", &key], "+QUEUED\r\n");
    rb.expect(&["EXEC"], "*2\r\n+OK\r\n$1\r\nv\r\n");
    // EXEC ended it: the next command is redirected again.
    rb.expect(&["GET", &key], &format!("-MOVED {s} 127.0.0.1:{a}\r\n"));
    // DISCARD ends it too.
    rb.expect(&["ASKING"], "+OK\r\n");
    rb.expect(&["MULTI"], "+OK\r\n");
    rb.expect(&["DISCARD"], "+OK\r\n");
    rb.expect(&["GET", &key], &format!("-MOVED {s} 127.0.0.1:{a}\r\n"));
    // Two keys of the slot: some may still be on the source, so EXEC
    // answers -TRYAGAIN and runs nothing.
    let other = format!("{tag}other");
    rb.expect(&["ASKING"], "+OK\r\n");
    rb.expect(&["MULTI"], "+OK\r\n");
    rb.expect(&["SET", &key, "w"], "+QUEUED\r\n");
    rb.expect(&["SET", &other, "w"], "+QUEUED\r\n");
    rb.expect(
        &["EXEC"],
        "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
    );
    rb.expect(&["ASKING"], "+OK\r\n");
    rb.expect(&["GET", &key], "$1\r\nv\r\n");
    // Without ASKING the transaction is refused when queued.
    rb.expect(&["MULTI"], "+OK\r\n");
    rb.expect(&["GET", &key], &format!("-MOVED {s} 127.0.0.1:{a}\r\n"));
    rb.expect(
        &["EXEC"],
        "-EXECABORT Transaction discarded because of previous errors.\r\n",
    );
}

#[test]
fn a_transaction_on_a_migrating_slot_runs_all_or_nothing() {
    let c = pair();
    let a = c.ports[0];
    let tag = tag_in(0, 8191);
    let s = slot(&tag).to_string();
    let (here, gone) = (format!("{tag}here"), format!("{tag}gone"));
    assert_eq!(call(a, &["SET", &here, "10"]), Some(Reply::ok()));
    open_migration(&c, &s);
    let mut ra = Raw::open(a);
    ra.expect(&["MULTI"], "+OK\r\n");
    ra.expect(&["INCR", &here], "+QUEUED\r\n");
    ra.expect(&["INCR", &gone], "+QUEUED\r\n");
    ra.expect(
        &["EXEC"],
        "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
    );
    assert_eq!(call(a, &["GET", &here]), Some(Reply::bulk("10")));
    // Every key here: refused all the same while the slot migrates (Redis
    // would run it), and run once the slot is stable again.
    ra.expect(&["MULTI"], "+OK\r\n");
    ra.expect(&["INCR", &here], "+QUEUED\r\n");
    ra.expect(
        &["EXEC"],
        "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
    );
    assert_eq!(
        call(a, &["CLUSTER", "SETSLOT", &s, "STABLE"]),
        Some(Reply::ok())
    );
    ra.expect(&["MULTI"], "+OK\r\n");
    ra.expect(&["INCR", &here], "+QUEUED\r\n");
    ra.expect(&["EXEC"], "*1\r\n:11\r\n");
}
