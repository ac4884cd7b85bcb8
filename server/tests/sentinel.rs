//! Failover by stock Redis Sentinel, with real processes on loopback: three
//! `leasehold-server` processes (a primary and two replicas started with
//! `--replicaof`) and three sentinels (`redis-server --sentinel`, quorum 2,
//! `down-after-milliseconds 1000`). A writer INCRs a counter and calls
//! `WAIT 1 100` after each write; then the primary is killed (SIGKILL).
//! Sentinel must promote a replica, point the other at it, and name it in
//! `SENTINEL get-master-addr-by-name`; every value WAIT acknowledged must be
//! on the new primary; the restarted old primary must come back as a
//! replica; and `SENTINEL FAILOVER` must switch the primary again.
//!
//! `redis-server` is looked up on PATH; without it the test prints a notice
//! and passes, unless `LEASEHOLD_REQUIRE_REDIS=1` (CI), which makes it fail.

use std::process::Stdio;
use std::time::{Duration, Instant};

use leasehold_testkit::{
    call, free_port, node_command, primary_of, sentinel_installed, sentinels_watching, started,
    text, wait_for, Proc, Reply, MASTER,
};

fn leasehold(port: u16, replicaof: Option<u16>) -> Proc {
    let dir = leasehold_testkit::scratch_dir();
    let mut cmd = node_command(env!("CARGO_BIN_EXE_leasehold-server"), port, &dir);
    if let Some(p) = replicaof {
        cmd.args(["--replicaof", &format!("127.0.0.1 {p}")]);
    }
    started(cmd.stderr(Stdio::inherit()), port, "leasehold-server")
}

/// `ROLE` of the node on `port`: ("master", _) or ("slave", its primary's port, link state).
fn role(port: u16) -> Option<(String, u16, String)> {
    let Reply::Array(r) = call(port, &["ROLE"])? else {
        return None;
    };
    let kind = text(&r[0]);
    match kind.as_str() {
        "slave" => Some((kind, text(&r[2]).parse().ok()?, text(&r[3]))),
        _ => Some((kind, 0, String::new())),
    }
}

/// The primary when the topology is settled: every sentinel names the
/// same node of `nodes`, it says it is a master, and every other node of
/// `nodes` is its replica with the link connected.
fn settled(nodes: &[u16], sentinels: &[u16]) -> Option<u16> {
    let primary = primary_of(sentinels[0])?;
    let agreed = sentinels.iter().all(|&s| primary_of(s) == Some(primary));
    let master = role(primary).is_some_and(|(k, _, _)| k == "master");
    let followed = nodes.iter().filter(|&&n| n != primary).all(|&n| {
        role(n).is_some_and(|(k, p, s)| k == "slave" && p == primary && s == "connected")
    });
    (agreed && master && followed && nodes.contains(&primary)).then_some(primary)
}

/// How many replicas of [`MASTER`] sentinel `port` lists as good ones:
/// flags exactly `slave`, its link to the primary `ok`.
fn good_replicas(port: u16) -> usize {
    let Some(Reply::Array(replicas)) = call(port, &["SENTINEL", "REPLICAS", MASTER]) else {
        return 0;
    };
    let field = |r: &Reply, name: &str| -> Option<String> {
        let Reply::Array(kv) = r else { return None };
        let at = kv.iter().position(|k| text(k) == name)?;
        kv.get(at + 1).map(text)
    };
    replicas
        .iter()
        .filter(|r| {
            field(r, "flags").as_deref() == Some("slave")
                && field(r, "master-link-status").as_deref() == Some("ok")
        })
        .count()
}

#[test]
fn stock_sentinel_fails_over_and_no_acknowledged_write_is_lost() {
    if !sentinel_installed("the Sentinel failover test") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("leasehold-sentinel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut nodes = vec![Some(leasehold(ports[0], None))];
    nodes.push(Some(leasehold(ports[1], Some(ports[0]))));
    nodes.push(Some(leasehold(ports[2], Some(ports[0]))));
    let (sport, _sentinels) = sentinels_watching(&dir, ports[0], 2);

    // A writer that remembers every value WAIT said a replica has.
    let mut acked = 0i64;
    for _ in 0..200 {
        let Some(Reply::Int(v)) = call(ports[0], &["INCR", "counter"]) else {
            panic!("INCR failed on the primary")
        };
        if let Some(Reply::Int(n)) = call(ports[0], &["WAIT", "1", "100"]) {
            if n >= 1 {
                acked = v;
            }
        }
    }
    assert_eq!(acked, 200, "every write was acknowledged by a replica");

    let killed = Instant::now();
    nodes[0] = None; // SIGKILL
    wait_for(
        "a sentinel names a new primary",
        Duration::from_secs(20),
        || primary_of(sport[0]).is_some_and(|p| p != ports[0]),
    );
    let named = killed.elapsed();
    let mut new = 0;
    wait_for(
        "the new primary takes writes",
        Duration::from_secs(10),
        || {
            new = primary_of(sport[0]).unwrap_or(ports[0]);
            matches!(call(new, &["INCR", "counter"]), Some(Reply::Int(_)))
        },
    );
    let writable = killed.elapsed();
    eprintln!("failover: new primary named after {named:?}, first write after {writable:?}");
    // On a loaded machine a sentinel may fail over once more (a new
    // primary slow to answer PING within 1 s): wait for the topology to
    // settle, whichever replica ends up primary.
    let live = &ports[1..];
    wait_for(
        "the sentinels and nodes agree",
        Duration::from_secs(40),
        || settled(live, &sport).is_some(),
    );
    let new = settled(live, &sport).expect("settled");
    let Some(Reply::Bulk(v)) = call(new, &["GET", "counter"]) else {
        panic!("no counter on the new primary")
    };
    let value: i64 = String::from_utf8_lossy(&v).parse().expect("a number");
    assert!(
        value > acked,
        "the new primary holds {value}, WAIT acknowledged {acked}"
    );

    // The old primary comes back empty and is made a replica.
    nodes[0] = Some(leasehold(ports[0], None));
    wait_for(
        "the old primary rejoins as a replica",
        Duration::from_secs(40),
        || settled(&ports, &sport).is_some_and(|p| p != ports[0]),
    );
    let current = settled(&ports, &sport).expect("settled");
    wait_for(
        "the old primary has the data",
        Duration::from_secs(10),
        || call(ports[0], &["GET", "counter"]).is_some_and(|r| text(&r) == value.to_string()),
    );

    // A planned switch, once the sentinel that is asked knows both
    // replicas as good ones (it refreshes a replica's INFO every 10 s: on
    // a loaded machine the rejoined old primary may still look like a
    // master or unlinked to it, and it answers -NOGOODSLAVE).
    wait_for(
        "the sentinel knows both replicas, linked",
        Duration::from_secs(40),
        || good_replicas(sport[1]) == 2,
    );
    // SENTINEL FAILOVER is asked again only while the sentinel still names
    // the old primary: after a refusal (2 s later), or when an accepted
    // failover was aborted (past its 5 s failover-timeout). Asking again
    // once it has switched would start a second failover away from the
    // new primary: Sentinel demotes the old one only 8 to 18 s after the
    // switch (4 hello periods, then its next INFO of it), so the topology
    // takes that long to settle.
    let start = Instant::now();
    let mut asked: Vec<(Instant, Option<String>)> = Vec::new();
    let switched = loop {
        if let Some(p) = primary_of(sport[1]).filter(|&p| p != current) {
            break p;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "SENTINEL FAILOVER names a new primary: not within 60 s (answers: {:?})",
            asked.iter().map(|(_, a)| a).collect::<Vec<_>>()
        );
        let due = match asked.last() {
            None => true,
            Some((at, Some(a))) if a == "OK" => at.elapsed() >= Duration::from_secs(12),
            Some((at, _)) => at.elapsed() >= Duration::from_secs(2),
        };
        if due {
            let answer = call(sport[1], &["SENTINEL", "FAILOVER", MASTER]).map(|r| text(&r));
            asked.push((Instant::now(), answer));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    wait_for(
        "the sentinels and nodes agree on a switched primary",
        Duration::from_secs(60),
        || settled(&ports, &sport).is_some_and(|p| p != current),
    );
    eprintln!(
        "planned switch to {switched}: settled after {:?}",
        start.elapsed()
    );
    let third = settled(&ports, &sport).expect("settled");
    assert!(matches!(
        call(third, &["INCR", "counter"]),
        Some(Reply::Int(_))
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
