//! `leasehold-cluster` with real processes on loopback: `local --groups 3
//! --replicas 1` starts six nodes and three sentinels on free ports;
//! `redis-cli -c` runs SET/GET/INCR, TOKENLEASE, SLIDINGWINDOW and tagged
//! MSET/MGET/DEL on keys of every group through one node,
//! `redis-cli --cluster check` and `leasehold-cluster check` pass,
//! `leasehold-cluster publish` puts a newer topology in force on every node,
//! and SIGTERM stops every process it started.
//!
//! `redis-cli` is looked up on PATH; without it the test prints a notice and
//! passes, unless `LEASEHOLD_REQUIRE_REDIS=1` is set, which makes it fail.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use leasehold_testkit::{call, tool_installed, Reply};

mod common;

use common::redis_cli;

fn redis_cli(args: &[&str]) -> (bool, String) {
    let out = Command::new("redis-cli")
        .args(args)
        .output()
        .expect("run redis-cli");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

#[test]
fn local_starts_a_cluster_that_stock_tools_accept_and_sigterm_stops_it() {
    if !tool_installed(
        "redis-cli",
        "--version",
        "LEASEHOLD_REQUIRE_REDIS",
        "the leasehold-cluster local test",
    ) {
        return;
    }
    let start = Instant::now();
    let mut local = common::local::start();
    let (base, dir, printed) = (local.base, local.dir.clone(), local.printed.clone());
    let ports: Vec<u16> = (base..base + 6).collect();
    assert_eq!(local.ports(), ports, "{printed}");
    for p in &ports {
        assert!(
            printed.contains(&format!("127.0.0.1:{p}")),
            "{p} in {printed}"
        );
    }
    // Three sentinels whenever a sentinel program is there (CI's case).
    let sentinels = local.sentinels.len();
    let sentinel_program = leasehold_testkit::sentinel_installed("the local cluster's sentinels");
    assert_eq!(sentinels, if sentinel_program { 3 } else { 0 }, "{printed}");

    // Replicas link up a moment after start.
    local.wait_linked(Duration::from_secs(10));
    let (_, report) = local.check();
    assert!(report.contains("[OK] All 16384 slots covered."), "{report}");
    assert!(report.contains("[OK] All 6 nodes agree"), "{report}");
    assert!(report.contains("link up"), "{report}");

    // Every command through the first node: two groups' keys are MOVED.
    let ranges: Vec<(u16, u16)> = local.groups.iter().map(|g| g.slots).collect();
    let owners: Vec<u16> = local.groups.iter().map(|g| g.primary).collect();
    assert_eq!(owners, [ports[0], ports[2], ports[4]]);
    redis_cli::runs_every_kind(base, &ranges, &owners);
    let (ok, log) = redis_cli(&["--cluster", "check", &format!("127.0.0.1:{base}")]);
    assert!(ok, "{log}");
    assert!(log.contains("[OK] All 16384 slots covered."), "{log}");
    assert!(
        log.contains("[OK] All nodes agree about slots configuration."),
        "{log}"
    );
    assert!(!log.contains("[ERR]"), "{log}");

    // publish: a newer version of the same topology on every node.
    let text = std::fs::read_to_string(dir.join("topology.toml")).expect("the topology");
    let newer = dir.join("newer.toml");
    std::fs::write(&newer, text.replace("version = 1", "version = 5")).unwrap();
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold-cluster"))
        .args(["publish", "--topology"])
        .arg(&newer)
        .args(&addrs)
        .output()
        .expect("run leasehold-cluster publish");
    assert!(out.status.success(), "{out:?}");
    for &p in &ports {
        assert_eq!(call(p, &["LH.TOPOLOGY", "VERSION"]), Some(Reply::Int(5)));
    }
    // Publishing it again changes nothing and says so; an older version
    // is refused (not newer): exit code 1.
    let publish = |file: &Path| {
        Command::new(env!("CARGO_BIN_EXE_leasehold-cluster"))
            .args(["publish", "--topology"])
            .arg(file)
            .arg(&addrs[0])
            .output()
            .expect("run leasehold-cluster publish")
    };
    let again = publish(&newer);
    assert!(again.status.success(), "{again:?}");
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(
        said.contains(&format!("{}: version 5 already in force", addrs[0])),
        "{said}"
    );
    let older = dir.join("older.toml");
    std::fs::write(&older, text.replace("version = 1", "version = 4")).unwrap();
    let refused = publish(&older);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stdout).contains("not newer"));

    // SIGTERM: everything it started stops, then it exits.
    let status = local.stop();
    assert!(status.success(), "{status:?}");
    let all: Vec<u16> = (base..base + 6 + sentinels as u16).collect();
    for p in all {
        assert!(call(p, &["PING"]).is_none(), "port {p} still answers");
    }
    // No process is left with the cluster's directory on its command line.
    let dir_text = dir.display().to_string();
    let left: Vec<String> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&dir_text))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}
