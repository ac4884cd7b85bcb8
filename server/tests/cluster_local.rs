//! `leasehold-cluster` with real processes on loopback: `local --groups 3
//! --replicas 1` starts six nodes and three sentinels on free ports;
//! `redis-cli -c` writes and reads keys of every group through one node,
//! `redis-cli --cluster check` and `leasehold-cluster check` pass,
//! `leasehold-cluster publish` puts a newer topology in force on every node,
//! and SIGTERM stops every process it started.
//!
//! `redis-cli` is looked up on PATH; without it the test prints a notice and
//! passes, unless `LEASEHOLD_REQUIRE_REDIS=1` is set, which makes it fail.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use leasehold_testkit::{call, free_port, tool_installed, wait_for, Proc, Reply};

mod common;

use common::key_in;

/// A first port with the 9 after it free on 127.0.0.1 a moment ago.
fn free_run(n: u16) -> u16 {
    for _ in 0..50 {
        let base = free_port();
        if base > 65535 - n {
            continue;
        }
        let all = (base..base + n).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
        if all {
            return base;
        }
    }
    panic!("no run of {n} free ports");
}

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
    let base = free_run(9);
    let dir = leasehold_testkit::scratch_dir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold-cluster"))
        .args(["local", "--groups", "3", "--replicas", "1"])
        .args(["--port", &base.to_string()])
        .arg("--dir")
        .arg(&dir)
        .arg("--server")
        .arg(env!("CARGO_BIN_EXE_leasehold-server"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start leasehold-cluster");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let pid = child.id();
    let proc = Proc(child);
    let mut printed = String::new();
    let mut line = String::new();
    while out.read_line(&mut line).is_ok_and(|n| n > 0) {
        printed.push_str(&line);
        if line.starts_with("try:") {
            break;
        }
        line.clear();
    }
    eprintln!("{printed}");
    let ports: Vec<u16> = (base..base + 6).collect();
    for p in &ports {
        assert!(
            printed.contains(&format!("127.0.0.1:{p}")),
            "{p} in {printed}"
        );
    }
    let sentinels = printed
        .lines()
        .filter(|l| l.starts_with("sentinel "))
        .count();
    assert!(sentinels == 3 || sentinels == 0, "{printed}");

    // Replicas link up a moment after start.
    let check = || {
        Command::new(env!("CARGO_BIN_EXE_leasehold-cluster"))
            .args(["check", &format!("127.0.0.1:{}", ports[1])])
            .output()
            .expect("run leasehold-cluster check")
    };
    wait_for(
        "leasehold-cluster check passes",
        Duration::from_secs(10),
        || check().status.success(),
    );
    let report = String::from_utf8_lossy(&check().stdout).into_owned();
    assert!(report.contains("[OK] All 16384 slots covered."), "{report}");
    assert!(report.contains("[OK] All 6 nodes agree"), "{report}");
    assert!(report.contains("link up"), "{report}");

    let p0 = base.to_string();
    for (i, (a, b)) in [(0, 5460), (5461, 10921), (10922, 16383)]
        .into_iter()
        .enumerate()
    {
        let key = key_in("user:", a, b);
        assert_eq!(
            redis_cli(&["-c", "-p", &p0, "SET", &key, &i.to_string()]),
            (true, "OK".into())
        );
        assert_eq!(
            redis_cli(&["-c", "-p", &p0, "GET", &key]),
            (true, i.to_string())
        );
        assert_eq!(
            call(ports[2 * i], &["GET", &key]),
            Some(Reply::bulk(i.to_string()))
        );
    }
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
    // Publishing it again is refused (not newer): exit code 1.
    let again = Command::new(env!("CARGO_BIN_EXE_leasehold-cluster"))
        .args(["publish", "--topology"])
        .arg(&newer)
        .arg(&addrs[0])
        .output()
        .expect("run leasehold-cluster publish");
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stdout).contains("not newer"));

    // SIGTERM: everything it started stops, then it exits.
    // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) }, 0);
    let mut proc = proc;
    let stopped = Instant::now();
    let status = loop {
        if let Some(s) = proc.0.try_wait().expect("wait") {
            break s;
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(10),
            "leasehold-cluster did not exit"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
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
    let _ = std::fs::remove_dir_all(&dir);
}
