//! Cluster mode with primaries learned from stock Redis Sentinel, with real
//! processes on loopback: two groups, A (a primary and a replica started
//! with `--replicaof`, monitored by three sentinels, quorum 2,
//! `down-after-milliseconds 1000`) and B (one primary). The topology names
//! A's master name and the sentinels. A redis-py `RedisCluster` writes to
//! both groups; then A's primary is killed (SIGKILL). Within a bounded time
//! every live node's CLUSTER SLOTS, CLUSTER NODES and MOVED name the promoted
//! replica (at most 2 s after the sentinels name it), the same redis-py
//! client recovers by itself and its writes succeed; the former primary,
//! restarted, redirects its group's writes to the new primary.
//!
//! `redis-server` (which runs the sentinels) is looked up on PATH, redis-py
//! with `python3 -c "import redis.cluster"`; without them the test prints a
//! notice and passes, unless `LEASEHOLD_REQUIRE_REDIS=1` (redis-server) or
//! `LEASEHOLD_REQUIRE_REDIS_PY=1` (redis-py) is set, which makes it fail.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use leasehold_testkit::{
    call, free_port, node_command, primary_of, sentinel_installed, sentinels_watching, started,
    text, wait_for, Proc, Reply, MASTER,
};

mod common;

use common::{key_in, slot};

/// Group A (slots 0-8191, master name [`MASTER`]) on `a` (primary, replica),
/// group B (8192-16383) on `b`, and the sentinels on `sentinels`.
fn topology(version: u64, a: [u16; 2], b: u16, sentinels: &[u16]) -> String {
    let list: Vec<String> = sentinels
        .iter()
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect();
    format!(
        r#"version = {version}
sentinels = [{}]
[[group]]
name = "a"
slots = ["0-8191"]
sentinel = "{MASTER}"
[[group.node]]
addr = "127.0.0.1:{}"
role = "primary"
[[group.node]]
addr = "127.0.0.1:{}"
role = "replica"
[[group]]
name = "b"
slots = ["8192-16383"]
[[group.node]]
addr = "127.0.0.1:{b}"
role = "primary"
"#,
        list.join(", "),
        a[0],
        a[1]
    )
}

fn publish(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write the topology");
    std::fs::rename(&tmp, path).expect("rename the topology");
}

fn node(port: u16, file: &Path, replicaof: Option<u16>) -> Proc {
    let dir = leasehold_testkit::scratch_dir();
    let mut cmd = node_command(env!("CARGO_BIN_EXE_leasehold-server"), port, &dir);
    cmd.args(["--cluster-enabled", "yes", "--cluster-config-file"]);
    cmd.arg(file);
    if let Some(p) = replicaof {
        cmd.args(["--replicaof", &format!("127.0.0.1 {p}")]);
    }
    started(cmd.stderr(Stdio::inherit()), port, "leasehold-server")
}

/// The port CLUSTER SLOTS on `port` gives as the primary of slot 0's range.
fn slots_primary(port: u16) -> Option<u16> {
    let Reply::Array(ranges) = call(port, &["CLUSTER", "SLOTS"])? else {
        return None;
    };
    ranges.iter().find_map(|r| match r {
        Reply::Array(f) if f.len() >= 3 && f[0] == Reply::Int(0) => match &f[2] {
            Reply::Array(n) => match n[1] {
                Reply::Int(p) => u16::try_from(p).ok(),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    })
}

/// Whether CLUSTER NODES on `port` shows `primary` as a master and
/// `former` as a slave.
fn nodes_show(port: u16, primary: u16, former: u16) -> bool {
    let Some(Reply::Bulk(b)) = call(port, &["CLUSTER", "NODES"]) else {
        return false;
    };
    let t = String::from_utf8_lossy(&b).into_owned();
    let flags = |p: u16| {
        t.lines()
            .find(|l| {
                l.split(' ')
                    .nth(1)
                    .is_some_and(|a| a.starts_with(&format!("127.0.0.1:{p}@")))
            })
            .and_then(|l| l.split(' ').nth(2).map(str::to_string))
            .unwrap_or_default()
    };
    flags(primary).contains("master") && flags(former).contains("slave")
}

/// redis-py: writes to both groups, says `ready`, then writes to group A
/// with the same client every 20 ms through the failover, counting the
/// errors the client lets through, until a line on stdin (the failover is
/// done); then one more write must succeed, and it reports.
const REDIS_PY: &str = r#"
import sys, threading, time
from redis.cluster import RedisCluster
rc = RedisCluster(host="127.0.0.1", port=int(sys.argv[1]), socket_timeout=1, socket_connect_timeout=1)
key_a, key_b = sys.argv[2], sys.argv[3]
rc.set(key_a, "before")
rc.set(key_b, "before")
print("ready", flush=True)
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), done.set()), daemon=True).start()
writes = errors = ok_after_error = 0
first_error = recovered = None
while not done.is_set():
    try:
        rc.set(key_a, writes)
        writes += 1
        if errors:
            ok_after_error += 1
            if recovered is None:
                recovered = time.monotonic() - first_error
    except Exception as e:
        errors += 1
        if first_error is None:
            first_error = time.monotonic()
        time.sleep(0.1)
    time.sleep(0.02)
rc.set(key_a, "after")
print("writes", writes, "errors", errors, "ok-after-errors", ok_after_error, flush=True)
print("errors-for", None if recovered is None else round(recovered, 2), flush=True)
print("get", rc.get(key_a).decode(), rc.get(key_b).decode(), flush=True)
print("incr", rc.incr(key_a + ":n"), flush=True)
"#;

#[test]
fn after_a_sentinel_failover_every_node_names_the_new_primary() {
    if !sentinel_installed("the cluster Sentinel failover test") {
        return;
    }
    let test_start = Instant::now();
    let dir = leasehold_testkit::scratch_dir();
    let file = dir.join("topology.toml");
    let (a, b) = ([free_port(), free_port()], free_port());
    publish(&file, &topology(1, a, b, &[]));
    let primary = node(a[0], &file, None);
    let _replica = node(a[1], &file, Some(a[0]));
    let _b = node(b, &file, None);
    let (sentinels, _sentinel_procs) = sentinels_watching(&dir, a[0], 1);
    // The sentinels' ports are known only now: a newer topology names them.
    publish(&file, &topology(2, a, b, &sentinels));
    let live = [a[1], b];
    wait_for("every node has version 2", Duration::from_secs(5), || {
        [a[0], a[1], b]
            .iter()
            .all(|&p| call(p, &["LH.TOPOLOGY", "VERSION"]) == Some(Reply::Int(2)))
    });
    for &p in &[a[0], a[1], b] {
        assert_eq!(slots_primary(p), Some(a[0]), "before: node {p}");
    }

    let key_a = key_in("acct:", 0, 8191);
    let key_b = key_in("acct:", 8192, 16383);
    let mut py = common::redis_py::installed("the redis-py part of the cluster failover test")
        .then(|| {
            let mut child = Command::new("python3")
                .args(["-c", REDIS_PY, &b.to_string(), &key_a, &key_b])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("run python3");
            let mut out = BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            out.read_line(&mut line).expect("redis-py says ready");
            assert_eq!(line.trim(), "ready");
            (Proc(child), out)
        });

    let killed = Instant::now();
    drop(primary); // SIGKILL
    wait_for(
        "a sentinel names the replica",
        Duration::from_secs(15),
        || sentinels.iter().any(|&s| primary_of(s) == Some(a[1])),
    );
    let named = killed.elapsed();
    let took = wait_for(
        "every node's CLUSTER SLOTS, CLUSTER NODES and MOVED name the new primary",
        Duration::from_secs(2),
        || {
            live.iter()
                .all(|&p| slots_primary(p) == Some(a[1]) && nodes_show(p, a[1], a[0]))
                && call(b, &["GET", &key_a]).map(|r| text(&r))
                    == Some(format!("MOVED {} 127.0.0.1:{}", slot(&key_a), a[1]))
        },
    );
    eprintln!(
        "cluster failover: a sentinel named the new primary {named:?} after the kill; \
         every node answered with it {took:?} later"
    );
    // The promoted replica serves writes of its group itself.
    wait_for(
        "the new primary takes writes",
        Duration::from_secs(5),
        || {
            matches!(
                call(a[1], &["SET", &key_a, "direct"]),
                Some(Reply::Simple(_))
            )
        },
    );

    if let Some((mut child, mut out)) = py.take() {
        // Let the client write a while on the new primary.
        std::thread::sleep(Duration::from_millis(500));
        let stdin = child.0.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").expect("tell redis-py");
        let mut log = String::new();
        let mut line = String::new();
        while out.read_line(&mut line).is_ok_and(|n| n > 0) {
            log.push_str(&line);
            line.clear();
        }
        let status = child.0.wait().expect("redis-py exits");
        eprintln!("redis-py: {log}");
        assert!(status.success(), "redis-py failed:\n{log}");
        // Errors, if the client let any through, came before the switch:
        // the same client wrote again after them.
        let counts: Vec<u64> = log
            .lines()
            .find(|l| l.starts_with("writes "))
            .map(|l| l.split(' ').filter_map(|w| w.parse().ok()).collect())
            .unwrap_or_default();
        let [writes, errors, ok_after] = counts[..] else {
            panic!("no counts in {log}")
        };
        assert!(writes > 5, "{log}");
        assert!(errors == 0 || ok_after > 5, "{log}");
        assert!(log.lines().any(|l| l == "get after before"), "{log}");
        assert!(log.lines().any(|l| l == "incr 1"), "{log}");
        assert_eq!(call(a[1], &["GET", &key_a]), Some(Reply::bulk("after")));
    }
    // The former primary restarted with the same topology file (which
    // still names it primary) asks the sentinels at start: it redirects
    // its group's keys to the promoted replica.
    let _back = node(a[0], &file, None);
    let moved = format!("MOVED {} 127.0.0.1:{}", slot(&key_a), a[1]);
    wait_for(
        "the restarted former primary redirects to the new one",
        Duration::from_secs(1),
        || call(a[0], &["SET", &key_a, "stale"]).map(|r| text(&r)) == Some(moved.clone()),
    );
    assert!(
        test_start.elapsed() < Duration::from_secs(30),
        "the test took {:?}",
        test_start.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
