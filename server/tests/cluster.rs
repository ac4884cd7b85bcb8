//! Cluster mode with real processes on loopback: three `leasehold-server`
//! primaries started with one topology file, driven by stock cluster
//! clients: `redis-cli -c` (following MOVED), `redis-cli --cluster check`,
//! and redis-py's `redis.cluster.RedisCluster`; then the topology file is
//! rewritten (a newer version moves a slot range; an older version and a
//! broken file are ignored) while the nodes run.
//!
//! `redis-cli` is looked up on PATH and redis-py with `python3 -c "import
//! redis.cluster"`; without them the tests print a notice and pass, unless
//! `LEASEHOLD_REQUIRE_REDIS=1` (redis-cli) or `LEASEHOLD_REQUIRE_REDIS_PY=1`
//! (redis-py) is set (CI sets both), which makes them fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use leasehold_testkit::{
    call, free_port, node_command, started, text, tool_installed, wait_for, Proc, Reply,
};

mod common;

use common::{key_in, redis_cli, slot};

/// The topology of three groups of one primary each on `ports`, group 0
/// owning `first` (a list of ranges), the others 5461-10922 and 10923-16383.
fn topology(version: u64, ports: &[u16], first: &str, second: &str) -> String {
    format!(
        r#"version = {version}
[[group]]
name = "g0"
slots = [{first}]
[[group.node]]
addr = "127.0.0.1:{}"
role = "primary"
[[group]]
name = "g1"
slots = [{second}]
[[group.node]]
addr = "127.0.0.1:{}"
role = "primary"
[[group]]
name = "g2"
slots = ["10923-16383"]
[[group.node]]
addr = "127.0.0.1:{}"
role = "primary"
"#,
        ports[0], ports[1], ports[2]
    )
}

/// Writes `text` to `path` whole (a temporary file renamed over it), as an
/// operator's tool should, so no node reads half a file.
fn publish(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write the topology");
    std::fs::rename(&tmp, path).expect("rename the topology");
}

/// A cluster of three nodes on free ports sharing the topology file.
struct Cluster {
    ports: Vec<u16>,
    file: PathBuf,
    _nodes: Vec<Proc>,
}

fn cluster() -> Cluster {
    let dir = leasehold_testkit::scratch_dir();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let file = dir.join("topology.toml");
    publish(&file, &topology(1, &ports, "\"0-5460\"", "\"5461-10922\""));
    let nodes = ports
        .iter()
        .map(|&port| {
            let data = dir.join(port.to_string());
            std::fs::create_dir_all(&data).expect("a data dir");
            let mut cmd = node_command(env!("CARGO_BIN_EXE_leasehold-server"), port, &data);
            cmd.args(["--cluster-enabled", "yes", "--cluster-config-file"]);
            cmd.arg(&file);
            started(cmd.stderr(Stdio::inherit()), port, "leasehold-server")
        })
        .collect();
    Cluster {
        ports,
        file,
        _nodes: nodes,
    }
}

#[test]
fn redis_cli_follows_moved_and_cluster_check_passes() {
    if !tool_installed(
        "redis-cli",
        "--version",
        "LEASEHOLD_REQUIRE_REDIS",
        "the cluster redis-cli test",
    ) {
        return;
    }
    let c = cluster();
    // Every command is sent to node 0: two of three groups' keys are MOVED.
    let ranges = [(0, 5460), (5461, 10922), (10923, 16383)];
    let keys = redis_cli::runs_every_kind(c.ports[0], &ranges, &c.ports);
    for (key, &owner) in keys.iter().zip(&c.ports) {
        for &other in c.ports.iter().filter(|&&p| p != owner) {
            let want = format!("MOVED {} 127.0.0.1:{owner}", slot(key));
            assert_eq!(call(other, &["GET", key]).map(|r| text(&r)), Some(want));
        }
    }
    let out = Command::new("redis-cli")
        .args(["--cluster", "check", &format!("127.0.0.1:{}", c.ports[1])])
        .output()
        .expect("run redis-cli --cluster check");
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{log}");
    for want in [
        "[OK] All nodes agree about slots configuration.",
        "[OK] All 16384 slots covered.",
        "5461 slots | 0 slaves.",
    ] {
        assert!(log.contains(want), "{want} in {log}");
    }
    assert!(!log.contains("[ERR]"), "{log}");
}

#[test]
fn redis_py_cluster_client_runs_rate_limits_and_tagged_multi_key_commands() {
    if !common::redis_py::installed("the redis-py cluster test") {
        return;
    }
    let c = cluster();
    common::redis_py::run_and_check(c.ports[2]);
    // The keys spread over every node.
    for &p in &c.ports {
        assert!(
            matches!(call(p, &["DBSIZE"]), Some(Reply::Int(n)) if n > 5),
            "{p}"
        );
    }
}

#[test]
fn a_newer_topology_file_moves_slots_and_older_or_broken_ones_are_ignored() {
    if !tool_installed(
        "redis-cli",
        "--version",
        "LEASEHOLD_REQUIRE_REDIS",
        "the cluster reload test",
    ) {
        return;
    }
    let c = cluster();
    let key = key_in("moving:", 0, 1000);
    let version = |p: u16| call(p, &["LH.TOPOLOGY", "VERSION"]);
    assert_eq!(call(c.ports[0], &["SET", &key, "here"]), Some(Reply::ok()));
    // Version 2 hands 0-1000 to group 1.
    publish(
        &c.file,
        &topology(2, &c.ports, "\"1001-5460\"", "\"0-1000\", \"5461-10922\""),
    );
    let moved = format!("MOVED {} 127.0.0.1:{}", slot(&key), c.ports[1]);
    let took = wait_for("every node on version 2", Duration::from_secs(4), || {
        c.ports.iter().all(|&p| version(p) == Some(Reply::Int(2)))
    });
    assert!(took < Duration::from_millis(2500), "{took:?}");
    assert_eq!(
        call(c.ports[0], &["GET", &key]).map(|r| text(&r)),
        Some(moved.clone())
    );
    assert_eq!(
        call(c.ports[2], &["GET", &key]).map(|r| text(&r)),
        Some(moved.clone())
    );
    // Group 1 serves the slot now (the key stayed behind: no resharding yet).
    assert_eq!(call(c.ports[1], &["GET", &key]), Some(Reply::Nil));
    assert_eq!(redis_cli::c(c.ports[0], &["SET", &key, "there"]), "OK");
    assert_eq!(call(c.ports[1], &["GET", &key]), Some(Reply::bulk("there")));
    // An older version, then a broken file: each is refused, version 2 stays.
    publish(
        &c.file,
        &topology(1, &c.ports, "\"0-5460\"", "\"5461-10922\""),
    );
    std::thread::sleep(Duration::from_millis(2200));
    publish(
        &c.file,
        "version = 3\n[[group]]\nname = \"g0\"\nslots = [\"0-99999\"]\n",
    );
    std::thread::sleep(Duration::from_millis(2200));
    for &p in &c.ports {
        assert_eq!(version(p), Some(Reply::Int(2)), "{p}");
    }
    assert_eq!(
        call(c.ports[0], &["GET", &key]).map(|r| text(&r)),
        Some(moved)
    );
    let slots = text(&call(c.ports[2], &["CLUSTER", "NODES"]).unwrap());
    assert!(slots.contains(" 0-1000 5461-10922\n"), "{slots}");
}
