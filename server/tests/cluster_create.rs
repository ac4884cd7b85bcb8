//! `leasehold-cluster create` and `follow` with real processes on
//! loopback: six `leasehold-server` nodes started bare (cluster mode on, no
//! topology, no replication) and three stock sentinels monitoring nothing;
//! `create --topology FILE` makes them three groups of a primary and a
//! replica under Sentinel (a primary to be that replicates another node is
//! refused first, with nothing changed; a second run changes nothing); then
//! `follow` runs while group g0's primary is killed (SIGKILL): once
//! Sentinel promotes its replica, every live node has the next topology
//! version naming it primary, and so has the file; the killed node,
//! restarted without a topology, is given that version.
//!
//! `redis-server` (for the sentinels) is looked up on PATH; without it the
//! test prints a notice and passes, unless `LEASEHOLD_REQUIRE_REDIS=1` (CI),
//! which makes it fail.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use leasehold_server::cluster::Topology;
use leasehold_testkit::{
    call, free_port, node_command, sentinel_installed, started, text, wait_for, Proc, Reply,
};

/// The master name of group `g` in the sentinels.
fn master(g: usize) -> String {
    format!("lhc-g{g}")
}

/// Three groups on `ports` (primary, replica per group), under the
/// sentinels on `sentinels`.
fn topology_text(ports: &[u16], sentinels: &[u16]) -> String {
    let list: Vec<String> = sentinels
        .iter()
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect();
    let mut t = format!("version = 1\nsentinels = [{}]\n", list.join(", "));
    for (g, slots) in ["0-5460", "5461-10922", "10923-16383"].iter().enumerate() {
        t += &format!(
            "\n[[group]]\nname = \"g{g}\"\nslots = [\"{slots}\"]\nsentinel = \"{}\"\n[[group.node]]\naddr = \"127.0.0.1:{}\"\nrole = \"primary\"\n[[group.node]]\naddr = \"127.0.0.1:{}\"\nrole = \"replica\"\n",
            master(g),
            ports[2 * g],
            ports[2 * g + 1]
        );
    }
    t
}

/// A stock sentinel on `port` monitoring nothing yet.
fn bare_sentinel(dir: &Path, port: u16) -> Proc {
    let conf = dir.join(format!("sentinel-{port}.conf"));
    let text = format!("port {port}\nbind 127.0.0.1\ndir {}\n", dir.display());
    std::fs::write(&conf, text).expect("write the sentinel config");
    let mut cmd = Command::new("redis-server");
    started(cmd.arg(&conf).arg("--sentinel"), port, "a sentinel")
}

fn cli(args: &[&str], file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold-cluster"))
        .args(args)
        .arg("--topology")
        .arg(file)
        .output()
        .expect("run leasehold-cluster")
}

/// The port of `name`'s primary as the sentinel on `sentinel` names it.
fn named_primary(sentinel: u16, name: &str) -> Option<u16> {
    match call(sentinel, &["SENTINEL", "get-master-addr-by-name", name])? {
        Reply::Array(a) if a.len() == 2 => text(&a[1]).parse().ok(),
        _ => None,
    }
}

/// `ROLE` of a replica: its primary's port and link state.
fn follows(port: u16) -> Option<(u16, String)> {
    match call(port, &["ROLE"])? {
        Reply::Array(r) if r.len() >= 4 && text(&r[0]) == "slave" => {
            Some((text(&r[2]).parse().ok()?, text(&r[3])))
        }
        _ => None,
    }
}

/// The ports of the replicas the sentinel on `sentinel` lists for `name`
/// (`SENTINEL REPLICAS`): those it could promote.
fn known_replicas(sentinel: u16, name: &str) -> Vec<u16> {
    let Some(Reply::Array(rs)) = call(sentinel, &["SENTINEL", "REPLICAS", name]) else {
        return Vec::new();
    };
    rs.iter()
        .filter_map(|r| match r {
            Reply::Array(f) => f
                .chunks_exact(2)
                .find(|p| text(&p[0]) == "port")
                .and_then(|p| text(&p[1]).parse().ok()),
            _ => None,
        })
        .collect()
}

fn version(port: u16) -> Option<Reply> {
    call(port, &["LH.TOPOLOGY", "VERSION"])
}

#[test]
fn create_makes_bare_nodes_a_cluster_and_follow_republishes_after_a_failover() {
    if !sentinel_installed("the leasehold-cluster create/follow test") {
        return;
    }
    let start = Instant::now();
    let dir = leasehold_testkit::scratch_dir();
    let ports: Vec<u16> = (0..6).map(|_| free_port()).collect();
    let mut nodes: Vec<Option<Proc>> = ports
        .iter()
        .map(|&p| {
            let data = dir.join(p.to_string());
            std::fs::create_dir_all(&data).expect("a data dir");
            let mut cmd = node_command(env!("CARGO_BIN_EXE_leasehold-server"), p, &data);
            cmd.args(["--cluster-enabled", "yes"]);
            Some(started(cmd.stderr(Stdio::inherit()), p, "leasehold-server"))
        })
        .collect();
    let sentinels: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let _sentinel_procs: Vec<Proc> = sentinels.iter().map(|&s| bare_sentinel(&dir, s)).collect();
    let file = dir.join("topology.toml");
    std::fs::write(&file, topology_text(&ports, &sentinels)).expect("write the topology");
    let create = [
        "create",
        "--down-after-ms",
        "1000",
        "--failover-timeout-ms",
        "5000",
    ];

    // A primary to be that replicates another node: refused, nothing
    // changed.
    let p2 = ports[2].to_string();
    assert_eq!(
        call(ports[0], &["REPLICAOF", "127.0.0.1", &p2]),
        Some(Reply::ok())
    );
    let refused = cli(&create, &file);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{refused:?}");
    let why = format!(
        "127.0.0.1:{}, group g0's primary, replicates 127.0.0.1:{p2}",
        ports[0]
    );
    assert!(said.contains(&why), "{said}");
    assert_eq!(version(ports[0]), Some(Reply::Int(0)));
    assert_eq!(
        call(ports[0], &["REPLICAOF", "NO", "ONE"]),
        Some(Reply::ok())
    );

    let made = cli(&create, &file);
    let out = String::from_utf8_lossy(&made.stdout);
    eprintln!("{out}");
    assert!(made.status.success(), "{made:?}");
    assert!(out.contains("cluster OK"), "{out}");
    for g in 0..3 {
        let (p, r) = (ports[2 * g], ports[2 * g + 1]);
        assert_eq!(version(p), Some(Reply::Int(1)));
        assert_eq!(
            follows(r),
            Some((p, "connected".to_string())),
            "replica {r}"
        );
        for &s in &sentinels {
            assert_eq!(named_primary(s, &master(g)), Some(p), "sentinel {s}");
            // Known at once, not after the sentinel's next INFO (10 s):
            // without it a primary failing now could not be failed over.
            assert_eq!(known_replicas(s, &master(g)), vec![r], "sentinel {s}");
        }
    }
    // Again: everything holds already.
    let again = cli(&create, &file);
    let out = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success(), "{again:?}");
    assert!(out.contains("already in force"), "{out}");
    assert!(out.contains("already a replica of"), "{out}");
    assert!(out.contains("already monitors"), "{out}");

    // follow, through a failover of g0.
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold-cluster"))
        .args(["follow", "--interval-ms", "200", "--topology"])
        .arg(&file)
        .arg(format!("127.0.0.1:{}", ports[2]))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start leasehold-cluster follow");
    let stdout = child.stdout.take().expect("its output");
    let pid = child.id();
    let follower = Proc(child);
    let (old, new) = (ports[0], ports[1]);
    nodes[0].take(); // SIGKILL
    let killed = Instant::now();
    wait_for(
        "Sentinel promotes g0's replica",
        Duration::from_secs(30),
        || {
            sentinels
                .iter()
                .any(|&s| named_primary(s, &master(0)) == Some(new))
        },
    );
    let promoted = killed.elapsed();
    let live: Vec<u16> = ports[1..].to_vec();
    let took = wait_for(
        "every live node has version 2",
        Duration::from_secs(5),
        || live.iter().all(|&p| version(p) == Some(Reply::Int(2))),
    );
    eprintln!("follow: Sentinel promoted {new} {promoted:?} after the kill; version 2 in force {took:?} later");
    for &p in &live {
        let Some(Reply::Bulk(t)) = call(p, &["LH.TOPOLOGY", "GET"]) else {
            panic!("LH.TOPOLOGY GET on {p}")
        };
        let t = Topology::parse(&String::from_utf8_lossy(&t)).expect("a topology");
        assert_eq!(t.groups[0].primary().port, new, "node {p}");
        assert_eq!(t.groups[0].nodes[1].port, old, "node {p}");
        assert_eq!(t.groups[1].primary().port, ports[2], "node {p}");
    }
    let written = std::fs::read_to_string(&file).expect("the file");
    let written = Topology::parse(&written).expect("the file parses");
    assert_eq!(written.version, 2);
    assert_eq!(written.groups[0].primary().port, new);
    // The former primary was down when version 2 was published: restarted
    // (bare, as a machine whose file was not rewritten may bring it back
    // with an older one), follow gives it the version in force.
    let data = dir.join(old.to_string());
    let mut cmd = node_command(env!("CARGO_BIN_EXE_leasehold-server"), old, &data);
    cmd.args(["--cluster-enabled", "yes"]);
    nodes[0] = Some(started(
        cmd.stderr(Stdio::inherit()),
        old,
        "leasehold-server",
    ));
    let caught_up = wait_for(
        "the restarted former primary has version 2",
        Duration::from_secs(5),
        || version(old) == Some(Reply::Int(2)),
    );
    eprintln!("follow: the restarted former primary had version 2 {caught_up:?} after it answered");
    // SIGTERM: it stops, having said what it published.
    // SAFETY: kill(2) on the pid of a child this test started.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
    let mut log = String::new();
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        log.push_str(&line);
        log.push('\n');
    }
    let mut follower = follower;
    let status = follower.0.wait().expect("follow exits");
    assert!(status.success(), "{status:?}\n{log}");
    assert!(
        log.contains(&format!(
            "group g0: Sentinel names 127.0.0.1:{new} primary; publishing topology version 2"
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "127.0.0.1:{old}: version 2 in force (it had version 0)"
        )),
        "{log}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "the test took {:?}",
        start.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sentinel of the file that already monitors a group's master name at
/// an address that is not the group's primary (a stale or foreign
/// monitor) would make every node take that address as the group's
/// primary: `create` refuses it before changing anything, as it refuses a
/// sentinel that does not answer; once the monitor is removed it runs.
/// The node is named `localhost:<port>` in the file, which a sentinel
/// does not take (`Invalid IP address or hostname specified`): it is
/// monitored at 127.0.0.1, the address the node answers for too.
#[test]
fn create_refuses_a_sentinel_monitoring_the_master_name_elsewhere() {
    if !sentinel_installed("the leasehold-cluster create sentinel refusal test") {
        return;
    }
    let dir = leasehold_testkit::scratch_dir();
    let port = free_port();
    let data = dir.join(port.to_string());
    std::fs::create_dir_all(&data).expect("a data dir");
    let mut cmd = node_command(env!("CARGO_BIN_EXE_leasehold-server"), port, &data);
    cmd.args(["--cluster-enabled", "yes"]);
    let _node = started(cmd.stderr(Stdio::inherit()), port, "leasehold-server");
    let sentinels: Vec<u16> = (0..2).map(|_| free_port()).collect();
    let _procs: Vec<Proc> = sentinels.iter().map(|&s| bare_sentinel(&dir, s)).collect();
    let elsewhere = free_port();
    let name = master(0);
    let topology = |sentinels: &[u16]| {
        let list: Vec<String> = sentinels
            .iter()
            .map(|p| format!("\"127.0.0.1:{p}\""))
            .collect();
        format!(
            "version = 1\nsentinels = [{}]\n[[group]]\nname = \"g0\"\nslots = [\"0-16383\"]\nsentinel = \"{name}\"\n[[group.node]]\naddr = \"localhost:{port}\"\nrole = \"primary\"\n",
            list.join(", ")
        )
    };
    let file = dir.join("topology.toml");
    let create = ["create", "--wait", "1"];
    let refused = |why: &str| {
        let out = cli(&create, &file);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{out:?}");
        assert!(said.contains(why), "{said}");
        assert_eq!(version(port), Some(Reply::Int(0)), "nothing changed");
        assert_eq!(named_primary(sentinels[0], &name), None, "nothing changed");
    };

    // A sentinel that does not answer: refused first.
    let gone = free_port();
    std::fs::write(&file, topology(&[sentinels[0], gone])).expect("write the topology");
    refused(&format!("sentinel 127.0.0.1:{gone} does not answer"));

    // The second sentinel monitors the name at another address.
    std::fs::write(&file, topology(&sentinels)).expect("write the topology");
    let at = elsewhere.to_string();
    assert_eq!(
        call(
            sentinels[1],
            &["SENTINEL", "MONITOR", &name, "127.0.0.1", &at, "1"]
        ),
        Some(Reply::ok())
    );
    refused(&format!(
        "sentinel 127.0.0.1:{} monitors {name} at 127.0.0.1:{elsewhere}, not group g0's primary localhost:{port}",
        sentinels[1]
    ));

    // Removed there: create runs and both sentinels name the primary.
    assert_eq!(
        call(sentinels[1], &["SENTINEL", "REMOVE", &name]),
        Some(Reply::ok())
    );
    let made = cli(&create, &file);
    assert!(made.status.success(), "{made:?}");
    assert_eq!(version(port), Some(Reply::Int(1)));
    for &s in &sentinels {
        assert_eq!(named_primary(s, &name), Some(port), "sentinel {s}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `follow` started with a dead node alone (the failed primary, say)
/// finds the cluster through the nodes of its `--topology` file.
#[test]
fn follow_finds_the_nodes_of_its_file_when_the_named_node_is_dead() {
    let dir = leasehold_testkit::scratch_dir();
    let port = free_port();
    let data = dir.join(port.to_string());
    std::fs::create_dir_all(&data).expect("a data dir");
    let mut cmd = node_command(env!("CARGO_BIN_EXE_leasehold-server"), port, &data);
    cmd.args(["--cluster-enabled", "yes"]);
    let _node = started(cmd.stderr(Stdio::inherit()), port, "leasehold-server");
    let text_ = format!(
        "version = 3\n[[group]]\nname = \"g0\"\nslots = [\"0-16383\"]\n[[group.node]]\naddr = \"127.0.0.1:{port}\"\nrole = \"primary\"\n"
    );
    assert_eq!(
        call(port, &["LH.TOPOLOGY", "SET", "3", &text_]),
        Some(Reply::ok())
    );
    let file = dir.join("topology.toml");
    std::fs::write(&file, &text_).expect("write the topology");
    let dead = format!("127.0.0.1:{}", free_port());
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold-cluster"))
        .args(["follow", "--once", "--topology"])
        .arg(&file)
        .arg(&dead)
        .output()
        .expect("run leasehold-cluster follow");
    assert!(out.status.success(), "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
