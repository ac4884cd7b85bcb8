//! `follow`: keeps the declared topology true to Sentinel. Nodes already
//! learn each group's primary from the sentinels, so clients are redirected
//! to a promoted replica without it; but the topology in force (and the
//! file a restarted node reads) would still name the old primary. Every
//! `--interval-ms` this asks every sentinel of the topology for each group
//! with a master name (`SENTINEL MASTER`: the primary and its
//! `config-epoch`); when the answer of the highest epoch names another
//! node of the group than the topology's primary, it publishes the next
//! version, with that node as the group's primary and the former one a
//! replica, to every node (and writes it to `--topology FILE`, whole, when
//! given). It reads the topology in force each round from the nodes (the
//! newest version any of them has), so a reshard in between is kept, and
//! gives it to a node that has an older one (or none): one that was down
//! when a version was published, as the failed primary always is.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use leasehold_protocol::Reply;
use leasehold_server::cluster::{parse_config_epoch, Topology};

use crate::{call, publish_to, same_node, set_topology, text, STOP};

/// `follow`'s options.
pub struct Follow {
    /// Nodes to read the topology from at first: HOST:PORT (with those
    /// of the `topology` file).
    pub nodes: Vec<String>,
    /// A file to write each published topology to.
    pub topology: Option<PathBuf>,
    /// Time between two rounds (ms).
    pub interval_ms: u64,
    /// One round, then exit (0: nothing to publish or published everywhere).
    pub once: bool,
}

/// Runs `follow` until SIGINT or SIGTERM (or one round with `--once`).
///
/// # Errors
/// With `--once`, a round that could not read a topology.
pub fn follow(o: &Follow) -> Result<bool, String> {
    crate::on_stop_signals();
    let mut known: Vec<String> = o.nodes.clone();
    // The file's nodes too: the node named may be the one that failed.
    let in_file = o
        .topology
        .as_deref()
        .and_then(|f| std::fs::read_to_string(f).ok());
    if let Some(t) = in_file.as_deref().and_then(|t| Topology::parse(t).ok()) {
        known.extend(t.nodes().map(|(_, n)| n.addr()));
    }
    // Warnings are printed when they first appear, not every round.
    let mut warned: Vec<String> = Vec::new();
    loop {
        let mut warnings = Vec::new();
        let result = round(&mut known, o.topology.as_deref(), &mut warnings);
        for w in warnings.iter().filter(|w| !warned.contains(w)) {
            eprintln!("leasehold-cluster follow: {w}");
        }
        match result {
            Ok(all) if o.once => return Ok(all),
            Err(e) if o.once => return Err(e),
            Ok(_) => warned = warnings,
            Err(e) => {
                if !warned.contains(&e) {
                    eprintln!("leasehold-cluster follow: {e}");
                }
                warned = warnings;
                warned.push(e);
            }
        }
        let mut slept = 0;
        while slept < o.interval_ms {
            if STOP.load(Ordering::SeqCst) {
                return Ok(true);
            }
            std::thread::sleep(Duration::from_millis(20));
            slept += 20;
        }
    }
}

/// One round: `Ok(false)` when a node refused the new version; what it
/// could not publish goes to `warnings`.
fn round(
    known: &mut Vec<String>,
    file: Option<&Path>,
    warnings: &mut Vec<String>,
) -> Result<bool, String> {
    let (topo, versions) = newest_topology(known)?;
    *known = topo.nodes().map(|(_, n)| n.addr()).collect();
    let mut switched = Vec::new();
    for g in &topo.groups {
        let Some(name) = &g.sentinel else { continue };
        let Some((host, port)) = sentinels_primary(&topo, name) else {
            continue;
        };
        let said = format!("{host}:{port}");
        if same_node(&said, &g.primary().addr()) {
            continue;
        }
        match g.nodes.iter().find(|n| same_node(&n.addr(), &said)) {
            Some(n) => switched.push((g.name.clone(), n.addr())),
            None => warnings.push(format!(
                "Sentinel names {said} primary of {name}, not a node of group {}: not published",
                g.name
            )),
        }
    }
    if switched.is_empty() {
        return Ok(catch_up(&topo, known, &versions));
    }
    let version = topo.version + 1;
    let next = switched_topology(&topo.text, version, &switched)?;
    Topology::parse(&next).map_err(|e| format!("the new topology: {e}"))?;
    for (g, addr) in &switched {
        println!("group {g}: Sentinel names {addr} primary; publishing topology version {version}");
    }
    let all = publish_to(known.iter().map(String::as_str), version, &next);
    if let Some(path) = file {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, &next)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        println!("{}: version {version} written", path.display());
    }
    Ok(all)
}

/// Gives the topology in force, `topo`, to the nodes of `known` that
/// answered with an older version (`versions`): a node that was down when
/// a version was published (the failed primary always is) and came back
/// with an older file, or none. `false` when one refused it.
fn catch_up(topo: &Topology, known: &[String], versions: &[(String, u64)]) -> bool {
    let mut all = true;
    for (a, had) in versions {
        if *had >= topo.version || !known.contains(a) {
            continue;
        }
        match set_topology(a, topo.version, &topo.text) {
            Ok(_) => println!(
                "{a}: version {} in force (it had version {had})",
                topo.version
            ),
            Err(e) => {
                all = false;
                println!("{a}: {e}");
            }
        }
    }
    all
}

/// The topology of the highest version among the nodes of `known` that
/// answer, and the nodes it names; with the version each node that
/// answered has in force (0: none).
fn newest_topology(known: &[String]) -> Result<(Topology, Vec<(String, u64)>), String> {
    let mut best: Option<Topology> = None;
    let mut seen: Vec<String> = Vec::new();
    let mut versions: Vec<(String, u64)> = Vec::new();
    let mut queue: Vec<String> = known.to_vec();
    while let Some(a) = queue.pop() {
        if seen.iter().any(|s| s == &a) {
            continue;
        }
        seen.push(a.clone());
        let t = match call(&a, &["LH.TOPOLOGY", "GET"]) {
            Ok(Reply::Bulk(t)) => t,
            Ok(Reply::Nil) => {
                versions.push((a, 0));
                continue;
            }
            _ => continue,
        };
        let Ok(t) = Topology::parse(&String::from_utf8_lossy(&t)) else {
            continue;
        };
        versions.push((a, t.version));
        queue.extend(t.nodes().map(|(_, n)| n.addr()));
        if best.as_ref().is_none_or(|b| t.version > b.version) {
            best = Some(t);
        }
    }
    let best = best
        .ok_or_else(|| format!("no node of {known:?} answered LH.TOPOLOGY GET with a topology"))?;
    Ok((best, versions))
}

/// The primary of master `name` as the sentinels of `topo` name it: the
/// answer with the highest `config-epoch` (a sentinel that has not heard
/// of a failover yet answers with an older one).
fn sentinels_primary(topo: &Topology, name: &str) -> Option<(String, u16)> {
    let mut best: Option<(u64, String, u16)> = None;
    for (host, port) in &topo.sentinels {
        let Ok(r) = call(&format!("{host}:{port}"), &["SENTINEL", "MASTER", name]) else {
            continue;
        };
        let (Some(epoch), Some(ip), Some(p)) = (
            parse_config_epoch(&r),
            field(&r, "ip"),
            field(&r, "port").and_then(|p| p.parse::<u16>().ok()),
        ) else {
            continue;
        };
        if best.as_ref().is_none_or(|(e, ..)| epoch > *e) {
            best = Some((epoch, ip, p));
        }
    }
    best.map(|(_, ip, p)| (ip, p))
}

/// A field of `SENTINEL MASTER`'s flat field/value array.
pub(crate) fn field(r: &Reply, name: &str) -> Option<String> {
    let Reply::Array(a) = r else { return None };
    a.chunks_exact(2)
        .find(|p| text(&p[0]) == name)
        .map(|p| text(&p[1]))
}

/// The topology text `text_` at `version`, each group of `switched`
/// (name, address) with that node as its primary and its former primary a
/// replica; every other field kept.
pub fn switched_topology(
    text_: &str,
    version: u64,
    switched: &[(String, String)],
) -> Result<String, String> {
    crate::edit_groups(text_, version, |g| {
        let name = g.get("name").and_then(|n| n.as_str()).unwrap_or("");
        let Some((_, addr)) = switched.iter().find(|(n, _)| n == name) else {
            return Ok(());
        };
        let addr = addr.clone();
        let nodes = g
            .get_mut("node")
            .and_then(|n| n.as_array_mut())
            .ok_or("a group has no nodes")?;
        for n in nodes {
            let n = n.as_table_mut().ok_or("a node is not a table")?;
            let here = n
                .get("addr")
                .and_then(|a| a.as_str())
                .is_some_and(|a| same_node(a, &addr));
            let role = if here { "primary" } else { "replica" };
            n.insert("role".into(), toml::Value::String(role.into()));
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_swaps_the_roles_of_one_group_and_keeps_the_rest() {
        let before = "version = 3\nsentinels = [\"127.0.0.1:26379\"]\n\n[[group]]\nname = \"g0\"\nslots = [\"0-8191\"]\nsentinel = \"m0\"\n[[group.node]]\naddr = \"127.0.0.1:7000\"\nrole = \"primary\"\n[[group.node]]\naddr = \"127.0.0.1:7001\"\nrole = \"replica\"\n\n[[group]]\nname = \"g1\"\nslots = [\"8192-16383\"]\n[[group.node]]\naddr = \"127.0.0.1:7002\"\nrole = \"primary\"\n";
        let after = switched_topology(before, 4, &[("g0".into(), "127.0.0.1:7001".into())])
            .expect("switched");
        let t = Topology::parse(&after).expect("parses");
        assert_eq!(t.version, 4);
        assert_eq!(t.groups[0].primary().addr(), "127.0.0.1:7001");
        assert_eq!(t.groups[0].nodes[1].addr(), "127.0.0.1:7000");
        assert_eq!(t.groups[0].sentinel.as_deref(), Some("m0"));
        assert_eq!(t.groups[1].primary().addr(), "127.0.0.1:7002");
        assert_eq!(t.sentinels, vec![("127.0.0.1".to_string(), 26379)]);
        let owner = |s| t.owner(s).map(|g| t.groups[g].name.clone());
        assert_eq!(owner(100).as_deref(), Some("g0"));
        assert_eq!(owner(9000).as_deref(), Some("g1"));
    }
}
