//! `create --topology FILE`: makes a cluster of nodes already running
//! (each started with `--cluster-enabled yes`) what a topology file says,
//! as `redis-cli --cluster create` does for Redis: the topology in force
//! on every node, every replica following its group's primary, and every
//! sentinel of the file monitoring every group that names a Sentinel
//! master name. It waits for the replication links (`--wait`) before it
//! tells the sentinels, and after it until every sentinel lists every
//! replica of its groups (`SENTINEL REPLICAS`), so that a primary that
//! fails right after `create` can be failed over; then it runs `check`.
//!
//! Each step first reads what is there and leaves alone what already
//! holds, so running it again changes nothing. It refuses, before changing
//! anything: a node that does not answer or is not in cluster mode, a node
//! with a newer topology (or another text of the same version), a primary
//! that replicates another node, a replica to be that is a primary
//! holding keys (they would be replaced by its primary's), a sentinel of
//! the file that does not answer, and one that monitors a group's master
//! name at another address than the group's primary (every node would
//! take that address as the group's primary).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use leasehold_protocol::Reply;
use leasehold_server::cluster::{parse_master_addr, Node, Topology};

use crate::follow::field;
use crate::{call, check, expect_ok, role, same_node, text};

/// `create`'s options.
pub struct Create {
    /// The topology file.
    pub topology: PathBuf,
    /// Sentinels that must agree a primary is down (default: a majority of
    /// the file's sentinels).
    pub quorum: Option<u32>,
    /// Sentinel's `down-after-milliseconds`.
    pub down_after_ms: u64,
    /// Sentinel's `failover-timeout` (ms).
    pub failover_timeout_ms: u64,
    /// How long to wait for the replication links (s).
    pub wait_s: u64,
}

/// Runs `create`: `Ok(true)` when `check` passes at the end.
///
/// # Errors
/// A refusal above, or a node that fails a step; what was done before it
/// stays (a second run goes on from there).
pub fn create(o: &Create) -> Result<bool, String> {
    let file = o.topology.display();
    let text_ = std::fs::read_to_string(&o.topology).map_err(|e| format!("{file}: {e}"))?;
    let topo = Topology::parse(&text_).map_err(|e| format!("{file}: {e}"))?;
    let nodes: Vec<&Node> = topo.nodes().map(|(_, n)| n).collect();
    if nodes.is_empty() {
        return Err(format!("{file}: no nodes"));
    }

    // Refusals first, so nothing changes on a cluster that cannot be made.
    for n in &nodes {
        let a = n.addr();
        let info =
            call(&a, &["INFO", "cluster"]).map_err(|e| format!("{a} does not answer: {e}"))?;
        if !text(&info).contains("cluster_enabled:1") {
            return Err(format!(
                "{a} is not in cluster mode: start it with --cluster-enabled yes"
            ));
        }
        let have = version_of(&a)?;
        if have > topo.version || (have == topo.version && topology_of(&a)? != text_) {
            return Err(format!(
                "{a} has topology version {have} in force, not older than the file's {}: publish a newer file instead",
                topo.version
            ));
        }
    }
    for g in &topo.groups {
        let pa = g.primary().addr();
        if let (_, Some((m, _))) = role(&pa)? {
            return Err(format!(
                "{pa}, group {}'s primary, replicates {m}: make it a primary first (REPLICAOF NO ONE)",
                g.name
            ));
        }
        for r in &g.nodes[1..] {
            let ra = r.addr();
            if let (_, None) = role(&ra)? {
                let keys = call(&ra, &["DBSIZE"])?;
                if !matches!(keys, Reply::Int(0)) {
                    return Err(format!(
                        "{ra}, a replica of group {} to be, holds {} keys its primary's would replace: empty it first (FLUSHALL)",
                        g.name,
                        text(&keys)
                    ));
                }
            }
        }
    }

    // Every sentinel of the file answers, and monitors each group's master
    // name nowhere or at that group's primary: a monitor elsewhere (stale,
    // or another cluster's) would make every node take that address as
    // the group's primary.
    for (host, port) in &topo.sentinels {
        let s = format!("{host}:{port}");
        for g in &topo.groups {
            let Some(name) = &g.sentinel else { continue };
            let known = call(&s, &["SENTINEL", "get-master-addr-by-name", name])
                .map_err(|e| format!("sentinel {s} does not answer: {e}"))?;
            let pa = g.primary().addr();
            if let Some((h, p)) = parse_master_addr(&known) {
                let at = format!("{h}:{p}");
                if !same_node(&at, &pa) {
                    return Err(format!(
                        "sentinel {s} monitors {name} at {at}, not group {}'s primary {pa}: remove it there first (SENTINEL REMOVE {name})",
                        g.name
                    ));
                }
            }
        }
    }

    // The topology in force everywhere.
    let v = topo.version.to_string();
    for n in &nodes {
        let a = n.addr();
        if version_of(&a)? == topo.version {
            println!("{a}: topology version {v} already in force");
            continue;
        }
        expect_ok(
            &format!("{a} LH.TOPOLOGY SET"),
            call(&a, &["LH.TOPOLOGY", "SET", &v, &text_])?,
        )?;
        println!("{a}: topology version {v} in force");
    }

    // Every replica following its group's primary.
    for g in &topo.groups {
        let p = g.primary();
        let pa = p.addr();
        for r in &g.nodes[1..] {
            let ra = r.addr();
            match role(&ra)? {
                (_, Some((m, _))) if same_node(&m, &pa) => {
                    println!("{ra}: already a replica of {pa}")
                }
                _ => {
                    let port = p.port.to_string();
                    expect_ok(
                        &format!("{ra} REPLICAOF"),
                        call(&ra, &["REPLICAOF", &p.host, &port])?,
                    )?;
                    println!("{ra}: replica of {pa} (group {})", g.name);
                }
            }
        }
    }

    // The links up before the sentinels are told.
    let deadline = Instant::now() + Duration::from_secs(o.wait_s);
    wait_linked(&topo, deadline);

    // Every sentinel monitoring every group with a master name.
    let quorum = o
        .quorum
        .unwrap_or(topo.sentinels.len() as u32 / 2 + 1)
        .to_string();
    for (host, port) in &topo.sentinels {
        let s = format!("{host}:{port}");
        for g in &topo.groups {
            let Some(name) = &g.sentinel else { continue };
            let p = g.primary();
            let known = call(&s, &["SENTINEL", "get-master-addr-by-name", name])?;
            if let Some((h, port)) = parse_master_addr(&known) {
                println!("{s}: already monitors {name} (primary {h}:{port})");
                continue;
            }
            let port = p.port.to_string();
            expect_ok(
                &format!("{s} SENTINEL MONITOR {name}"),
                call(
                    &s,
                    &[
                        "SENTINEL",
                        "MONITOR",
                        name,
                        monitored_host(&p.host),
                        &port,
                        &quorum,
                    ],
                )?,
            )?;
            let (down, failover) = (
                o.down_after_ms.to_string(),
                o.failover_timeout_ms.to_string(),
            );
            expect_ok(
                &format!("{s} SENTINEL SET {name}"),
                call(
                    &s,
                    &[
                        "SENTINEL",
                        "SET",
                        name,
                        "down-after-milliseconds",
                        &down,
                        "failover-timeout",
                        &failover,
                        "parallel-syncs",
                        "1",
                    ],
                )?,
            )?;
            println!(
                "{s}: monitors {name} at {} (quorum {quorum}, down after {down} ms)",
                p.addr()
            );
        }
    }

    // Every sentinel knowing every replica it may have to promote, then
    // the whole check.
    let deadline = deadline.max(Instant::now() + Duration::from_secs(2));
    let unknown = wait_replicas_known(&topo, deadline);
    println!();
    let sentinels_ok = unknown.is_empty();
    for (s, name, r) in &unknown {
        println!("[ERR] sentinel {s} does not list {r} among {name}'s replicas: it could not promote it yet");
    }
    Ok(check(&nodes[0].addr())? && sentinels_ok)
}

/// Waits until every replica of `topo` has its replication link to its
/// group's primary up (ROLE: `connected`), or until `deadline`; whether
/// they all did. A sentinel learns a group's replicas from its primary's
/// `INFO replication`, which it reads at once when it starts monitoring
/// and then only every 10 s: a replica missing from that first answer
/// could not be promoted for those 10 s (`-failover-abort-no-good-slave`),
/// so this comes before the sentinels are told.
pub fn wait_linked(topo: &Topology, deadline: Instant) -> bool {
    let linked = |r: &Node, p: &Node| matches!(role(&r.addr()), Ok((_, Some((m, link)))) if link == "connected" && same_node(&m, &p.addr()));
    let all_linked = || {
        topo.groups
            .iter()
            .all(|g| g.nodes[1..].iter().all(|r| linked(r, g.primary())))
    };
    loop {
        if all_linked() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until every sentinel of `topo` lists every replica it may have
/// to promote, or until `deadline`; returns those still unknown
/// ([`unknown_replicas`]).
pub fn wait_replicas_known(topo: &Topology, deadline: Instant) -> Vec<(String, String, String)> {
    let mut unknown = unknown_replicas(topo);
    while !unknown.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        unknown = unknown_replicas(topo);
    }
    unknown
}

/// (sentinel, master name, replica) for every replica of a group with a
/// master name that a sentinel of `topo` does not list in
/// `SENTINEL REPLICAS` (a sentinel that does not answer lists none).
fn unknown_replicas(topo: &Topology) -> Vec<(String, String, String)> {
    let mut unknown = Vec::new();
    for (host, port) in &topo.sentinels {
        let s = format!("{host}:{port}");
        for g in &topo.groups {
            let Some(name) = &g.sentinel else { continue };
            let listed: Vec<String> = match call(&s, &["SENTINEL", "REPLICAS", name]) {
                Ok(Reply::Array(rs)) => rs
                    .iter()
                    .filter_map(|r| Some(format!("{}:{}", field(r, "ip")?, field(r, "port")?)))
                    .collect(),
                _ => Vec::new(),
            };
            for r in &g.nodes[1..] {
                let ra = r.addr();
                if !listed.iter().any(|l| same_node(l, &ra)) {
                    unknown.push((s.clone(), name.clone(), ra));
                }
            }
        }
    }
    unknown
}

/// The host a sentinel is told to monitor: `localhost` as 127.0.0.1 (a
/// sentinel takes IP addresses only, unless it runs with
/// `resolve-hostnames yes`, and a node bound to loopback answers for both
/// names), any other as the file writes it.
fn monitored_host(host: &str) -> &str {
    match host {
        "localhost" => "127.0.0.1",
        h => h,
    }
}

/// `LH.TOPOLOGY VERSION` of `addr` (0 before any).
fn version_of(addr: &str) -> Result<u64, String> {
    match call(addr, &["LH.TOPOLOGY", "VERSION"])? {
        Reply::Int(v) => Ok(v.max(0) as u64),
        r => Err(format!("{addr} LH.TOPOLOGY VERSION: {}", text(&r))),
    }
}

/// `LH.TOPOLOGY GET` of `addr` (empty before any).
fn topology_of(addr: &str) -> Result<String, String> {
    match call(addr, &["LH.TOPOLOGY", "GET"])? {
        Reply::Bulk(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
        _ => Ok(String::new()),
    }
}
