//! The cluster family: CLUSTER (SLOTS, SHARDS, NODES, INFO, MYID, KEYSLOT,
//! COUNTKEYSINSLOT, GETKEYSINSLOT, REPLICAS, LINKS, HELP), READONLY,
//! READWRITE, ASKING and LH.TOPOLOGY, in Redis 7's shapes, answered from
//! the topology in force (`crate::cluster`). The redirections themselves
//! (MOVED, CROSSSLOT, CLUSTERDOWN) are the dispatcher's
//! (`dispatch::cluster_check`).
//!
//! CLUSTER runs on a shard (`Exec::Cursor`): COUNTKEYSINSLOT and
//! GETKEYSINSLOT on the one owning the slot they name, which keeps its keys
//! slot by slot; the other subcommands on the connection's own. Without
//! cluster mode every row answers `ERR This instance has cluster support
//! disabled`, as Redis does.
//!
//! There is no cluster bus: CLUSTER NODES shows every node `connected` with
//! the bus port Redis would use (port + 10000), and every epoch is the
//! topology's version, so a newer topology has higher epochs.

use bytes::Bytes;
use leasehold_protocol::{Args, Reply};

use super::flags::*;
use super::{cmd, CommandSpec, Exec, NO_KEYS};
use crate::cluster::{Moving, Role, Topology, View};
use crate::error::OpError;
use crate::session::ConnCtx;
use crate::shard::Shard;
use crate::slot::{key_slot, SLOTS};

/// The family's rows.
#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    cmd("cluster", -2, STALE, NO_KEYS, Exec::Cursor(cluster), "A container for Redis Cluster commands."),
    cmd("readonly", 1, FAST | LOADING | STALE, NO_KEYS, Exec::Conn(readonly), "Enables read-only queries for a connection to a Redis Cluster replica node."),
    cmd("readwrite", 1, FAST | LOADING | STALE, NO_KEYS, Exec::Conn(readwrite), "Enables read-write queries for a connection to a Redis Cluster replica node."),
    cmd("asking", 1, FAST, NO_KEYS, Exec::Conn(asking), "Signals that a cluster client is following an -ASK redirect."),
    cmd("migrate", -6, WRITE | NO_SCRIPT, NO_KEYS, Exec::Cursor(super::migrate::migrate), "Atomically transfers keys from one Redis instance to another."),
    cmd("lh.topology", -2, ADMIN | NO_SCRIPT | STALE, NO_KEYS, Exec::Conn(topology), "Reads or pushes the cluster topology."),
];

const HELP: &[&str] = &[
    "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "COUNTKEYSINSLOT <slot>",
    "    Return the number of keys in <slot>.",
    "GETKEYSINSLOT <slot> <count>",
    "    Return key names stored by current node in a slot.",
    "INFO",
    "    Return information about the cluster.",
    "KEYSLOT <key>",
    "    Return the hash slot for <key>.",
    "MYID",
    "    Return the node id.",
    "NODES",
    "    Return cluster configuration seen by node. Output format:",
    "    <id> <ip:port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
    "REPLICAS <node-id>",
    "    Return <node-id> replicas.",
    "SETSLOT <slot> (IMPORTING <node-id>|MIGRATING <node-id>|STABLE|NODE <node-id>)",
    "    Set slot state (NODE: the topology in force must already give the slot to that node).",
    "SLOTS",
    "    Return information about slots range mappings. Each range is made of:",
    "    start, end, master and replicas IP addresses, ports and ids",
    "SHARDS",
    "    Return information about slot range mappings and the nodes associated with them.",
    "LINKS",
    "    Return information about all network links between this node and its peers",
    "    (none: Leasehold nodes have no cluster bus).",
    "HELP",
    "    Prints this help.",
    "Slots and nodes come from the topology file (cluster-config-file) or LH.TOPOLOGY SET.",
];

/// Redis Cluster subcommands that change the cluster through its bus:
/// here the topology does.
const BUS_ONLY: &[&str] = &[
    "ADDSLOTS",
    "ADDSLOTSRANGE",
    "BUMPEPOCH",
    "COUNT-FAILURE-REPORTS",
    "DELSLOTS",
    "DELSLOTSRANGE",
    "FAILOVER",
    "FORGET",
    "FLUSHSLOTS",
    "MEET",
    "REPLICATE",
    "RESET",
    "SAVECONFIG",
    "SET-CONFIG-EPOCH",
];

/// Checks a subcommand's argument count (name and subcommand included):
/// `ERR wrong number of arguments for 'cluster|<sub>' command`.
fn arity(a: &Args, sub: &str, want: usize) -> Result<(), OpError> {
    match a.all().len() == want {
        true => Ok(()),
        false => Err(OpError::SubcommandArity(format!(
            "cluster|{}",
            sub.to_ascii_lowercase()
        ))),
    }
}

fn cluster(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let Some(state) = s.cluster() else {
        return Err(OpError::ClusterDisabled);
    };
    let view = state.snapshot();
    let sub = a.word()?;
    let now_ms = s.now.unix_ms;
    match sub.as_str() {
        "INFO" => {
            arity(a, &sub, 2)?;
            Ok(Reply::Verbatim("txt", Bytes::from(info(&view))))
        }
        "MYID" => {
            arity(a, &sub, 2)?;
            Ok(Reply::bulk(view.my_id.clone()))
        }
        "NODES" => {
            arity(a, &sub, 2)?;
            let text: String = node_lines(&view, &state.moving(), now_ms).concat();
            Ok(Reply::Verbatim("txt", Bytes::from(text)))
        }
        "SLOTS" => {
            arity(a, &sub, 2)?;
            Ok(slots(&view.topo))
        }
        "SHARDS" => {
            arity(a, &sub, 2)?;
            let repl = &s.shared().repl;
            let (mine, replicas) = (repl.backlog.offset(), repl.replicas());
            Ok(shards(&view, |id, host, port| {
                if id == view.my_id {
                    return mine;
                }
                replicas
                    .iter()
                    .find(|r| r.port == port && r.ip == host)
                    .map_or(0, |r| r.ack)
            }))
        }
        "KEYSLOT" => {
            arity(a, &sub, 3)?;
            Ok(Reply::Int(i64::from(key_slot(&a.next()?))))
        }
        "COUNTKEYSINSLOT" => {
            arity(a, &sub, 3)?;
            let slot = a.i64()?;
            if !(0..SLOTS as i64).contains(&slot) {
                return Err(OpError::InvalidSlot);
            }
            let mut n = 0;
            s.store.for_each_in_slot(slot as usize, now_ms, |_| n += 1);
            Ok(Reply::Int(n))
        }
        "GETKEYSINSLOT" => {
            arity(a, &sub, 4)?;
            let slot = a.i64()?;
            let count = a.i64()?;
            if !(0..SLOTS as i64).contains(&slot) || count < 0 {
                return Err(OpError::InvalidSlotOrCount);
            }
            let mut keys = Vec::new();
            s.store.for_each_in_slot(slot as usize, now_ms, |e| {
                if (keys.len() as i64) < count {
                    keys.push(Reply::Bulk(Bytes::copy_from_slice(e.key())));
                }
            });
            Ok(Reply::Array(keys))
        }
        "REPLICAS" | "SLAVES" => {
            arity(a, &sub, 3)?;
            let id = a.next()?;
            replicas(&view, &String::from_utf8_lossy(&id), now_ms)
        }
        "SETSLOT" => setslot(state, a),
        "LINKS" => {
            arity(a, &sub, 2)?;
            Ok(Reply::Array(Vec::new()))
        }
        "HELP" => {
            arity(a, &sub, 2)?;
            Ok(Reply::Array(
                HELP.iter().map(|l| Reply::simple(l)).collect(),
            ))
        }
        other if BUS_ONLY.contains(&other) => {
            Err(OpError::ClusterSubcommandUnsupported(other.to_string()))
        }
        _ => Err(OpError::UnknownSubcommand {
            command: "CLUSTER",
            sub: String::from_utf8_lossy(&a.all()[1]).into_owned(),
        }),
    }
}

/// `CLUSTER SETSLOT <slot> MIGRATING|IMPORTING <node-id>`, `STABLE`,
/// `NODE <node-id>`: see [`crate::cluster::ClusterState::set_slot`].
fn setslot(state: &crate::cluster::ClusterState, a: &mut Args) -> Result<Reply, OpError> {
    use crate::cluster::SetSlot;
    let bad = || {
        OpError::SetSlot(
            "Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP".into(),
        )
    };
    let slot = a.next()?;
    let slot = leasehold_protocol::int::parse_u64(&slot)
        .filter(|&s| s < SLOTS as u64)
        .ok_or_else(|| OpError::SetSlot("Invalid or out of range slot".into()))?
        as u16;
    let action = a.word().map_err(|_| bad())?;
    let mut id = || -> Result<String, OpError> {
        let id = a.next().map_err(|_| bad())?;
        a.finish().map_err(|_| bad())?;
        Ok(String::from_utf8_lossy(&id).into_owned())
    };
    let action = match action.as_str() {
        "MIGRATING" => SetSlot::Migrating(id()?),
        "IMPORTING" => SetSlot::Importing(id()?),
        "NODE" => SetSlot::Node(id()?),
        "STABLE" => {
            a.finish().map_err(|_| bad())?;
            SetSlot::Stable
        }
        _ => return Err(bad()),
    };
    state.set_slot(slot, action).map_err(OpError::SetSlot)?;
    Ok(Reply::ok())
}

/// CLUSTER INFO's text (Redis 7.0's fields; the message counters are 0:
/// there is no bus). The state is `ok` when every slot has a group, `fail`
/// otherwise (Redis's `cluster-require-full-coverage yes`); a slot with no
/// group answers CLUSTERDOWN either way.
fn info(view: &View) -> String {
    let t = &view.topo;
    let assigned = t.slots_assigned();
    let state = if assigned == SLOTS { "ok" } else { "fail" };
    let size = t.groups.iter().filter(|g| !g.ranges.is_empty()).count();
    format!(
        "cluster_state:{state}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{assigned}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{}\r\ncluster_size:{size}\r\ncluster_current_epoch:{v}\r\ncluster_my_epoch:{v}\r\ncluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\ntotal_cluster_links_buffer_limit_exceeded:0\r\n",
        t.nodes().count(),
        v = t.version,
    )
}

/// One CLUSTER NODES line per node, each ending in `\n` (not `\r\n`):
/// `<id> <host>:<port>@<bus port> <flags> <primary id or -> 0 <pong ms>
/// <epoch> connected <slot ranges>`, the ranges on primaries only. This
/// node's own line ends, as in Redis, with its slots in migration in slot
/// order: `[<slot>->-<target id>]` for one migrating from here and
/// `[<slot>-<-<source id>]` for one imported here (`redis-cli --cluster
/// check` and `fix` read them).
fn node_lines(view: &View, moving: &Moving, now_ms: u64) -> Vec<String> {
    let t = &view.topo;
    let mut lines = Vec::new();
    for (gi, g) in t.groups.iter().enumerate() {
        for (ni, n) in g.nodes.iter().enumerate() {
            let mut line = node_line(view, gi, ni, n, now_ms);
            if view.me == Some((gi, ni)) {
                line.pop();
                line.push_str(&migration_marks(moving));
                line.push('\n');
            }
            lines.push(line);
        }
    }
    lines
}

/// This node's `[slot->-id]` / `[slot-<-id]` marks, each after a space.
fn migration_marks(moving: &Moving) -> String {
    let mut marks: Vec<(u16, String)> = moving
        .migrating
        .iter()
        .map(|(&slot, to)| (slot, format!(" [{slot}->-{}]", to.id)))
        .chain(
            moving
                .importing
                .iter()
                .map(|(&slot, from)| (slot, format!(" [{slot}-<-{}]", from.id))),
        )
        .collect();
    marks.sort_unstable();
    marks.into_iter().map(|(_, m)| m).collect()
}

fn node_line(view: &View, gi: usize, ni: usize, n: &crate::cluster::Node, now_ms: u64) -> String {
    use std::fmt::Write;
    let g = &view.topo.groups[gi];
    let myself = view.me == Some((gi, ni));
    let role = match n.role {
        Role::Primary => "master",
        Role::Replica => "slave",
    };
    let flags = match myself {
        true => format!("myself,{role}"),
        false => role.to_string(),
    };
    let master = match n.role {
        Role::Primary => "-".to_string(),
        Role::Replica => g.primary().id.clone(),
    };
    let mut line = format!(
        "{} {}:{}@{} {flags} {master} 0 {now_ms} {} connected",
        n.id,
        n.host,
        n.port,
        n.bus_port(),
        view.topo.version
    );
    if n.role == Role::Primary {
        for &(a, b) in &g.ranges {
            let _ = match a == b {
                true => write!(line, " {a}"),
                false => write!(line, " {a}-{b}"),
            };
        }
    }
    line.push('\n');
    line
}

/// One CLUSTER SLOTS node: host, port, id and an empty metadata map
/// (Redis 7's fourth element: no hostname is announced).
fn slots_node(n: &crate::cluster::Node) -> Reply {
    Reply::Array(vec![
        Reply::bulk(n.host.clone()),
        Reply::Int(i64::from(n.port)),
        Reply::bulk(n.id.clone()),
        Reply::Map(Vec::new()),
    ])
}

/// CLUSTER SLOTS: per slot range, ascending, `[first, last, primary,
/// replicas...]`.
fn slots(t: &Topology) -> Reply {
    let mut ranges: Vec<(u16, u16, usize)> = t
        .groups
        .iter()
        .enumerate()
        .flat_map(|(gi, g)| g.ranges.iter().map(move |&(a, b)| (a, b, gi)))
        .collect();
    ranges.sort_unstable();
    Reply::Array(
        ranges
            .into_iter()
            .map(|(a, b, gi)| {
                let mut entry = vec![Reply::Int(i64::from(a)), Reply::Int(i64::from(b))];
                entry.extend(t.groups[gi].nodes.iter().map(slots_node));
                Reply::Array(entry)
            })
            .collect(),
    )
}

/// CLUSTER SHARDS: per group, a map of `slots` (first and last of each
/// range, flat) and `nodes` (a map per node: id, port, ip, endpoint, role,
/// replication-offset, health). `offset(id, host, port)` is a node's
/// replication offset as this node knows it: its own, the last one each of
/// its replicas acknowledged, 0 for the others.
fn shards(view: &View, offset: impl Fn(&str, &str, u16) -> u64) -> Reply {
    let t = &view.topo;
    let key = |k: &'static str| Reply::bulk(k);
    Reply::Array(
        t.groups
            .iter()
            .map(|g| {
                let slots = g
                    .ranges
                    .iter()
                    .flat_map(|&(a, b)| [Reply::Int(i64::from(a)), Reply::Int(i64::from(b))])
                    .collect();
                let nodes = g
                    .nodes
                    .iter()
                    .map(|n| {
                        let role = match n.role {
                            Role::Primary => "master",
                            Role::Replica => "replica",
                        };
                        Reply::Map(vec![
                            (key("id"), Reply::bulk(n.id.clone())),
                            (key("port"), Reply::Int(i64::from(n.port))),
                            (key("ip"), Reply::bulk(n.host.clone())),
                            (key("endpoint"), Reply::bulk(n.host.clone())),
                            (key("role"), Reply::bulk(role)),
                            (
                                key("replication-offset"),
                                Reply::Int(offset(&n.id, &n.host, n.port) as i64),
                            ),
                            (key("health"), Reply::bulk("online")),
                        ])
                    })
                    .collect();
                Reply::Map(vec![
                    (key("slots"), Reply::Array(slots)),
                    (key("nodes"), Reply::Array(nodes)),
                ])
            })
            .collect(),
    )
}

/// CLUSTER REPLICAS: the CLUSTER NODES lines of a primary's replicas.
fn replicas(view: &View, id: &str, now_ms: u64) -> Result<Reply, OpError> {
    let t = &view.topo;
    for (gi, g) in t.groups.iter().enumerate() {
        if let Some(ni) = g.nodes.iter().position(|n| n.id == id) {
            if g.nodes[ni].role != Role::Primary {
                return Err(OpError::UnknownNode(format!("{id} (a replica)")));
            }
            let lines = g
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.role == Role::Replica)
                .map(|(ni, n)| Reply::bulk(node_line(view, gi, ni, n, now_ms)))
                .collect();
            return Ok(Reply::Array(lines));
        }
    }
    Err(OpError::UnknownNode(id.to_string()))
}

fn readonly(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    a.finish()?;
    if ctx.shared.cluster.is_none() {
        return Err(OpError::ClusterDisabled);
    }
    ctx.conn.cluster.readonly = true;
    Ok(Reply::ok())
}

fn readwrite(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    a.finish()?;
    if ctx.shared.cluster.is_none() {
        return Err(OpError::ClusterDisabled);
    }
    ctx.conn.cluster.readonly = false;
    Ok(Reply::ok())
}

fn asking(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    a.finish()?;
    if ctx.shared.cluster.is_none() {
        return Err(OpError::ClusterDisabled);
    }
    ctx.conn.cluster.asking = true;
    Ok(Reply::ok())
}

/// `LH.TOPOLOGY GET` (the text in force, nil before any), `LH.TOPOLOGY
/// VERSION` (0 before any) and `LH.TOPOLOGY SET <version> <text>`: the
/// text must be a topology of that version, newer than the one in force.
/// A pushed topology is not written to the file: the file's next change
/// replaces it only with a higher version.
fn topology(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let Some(state) = ctx.shared.cluster.clone() else {
        return Err(OpError::ClusterDisabled);
    };
    let sub = a.word()?;
    let label = || OpError::SubcommandArity(format!("lh.topology|{}", sub.to_ascii_lowercase()));
    match sub.as_str() {
        "GET" => {
            (a.remaining() == 0).then_some(()).ok_or_else(label)?;
            let view = state.load();
            Ok(match view.topo.version {
                0 => Reply::Nil,
                _ => Reply::bulk(view.topo.text.clone()),
            })
        }
        "VERSION" => {
            (a.remaining() == 0).then_some(()).ok_or_else(label)?;
            Ok(Reply::Int(state.load().topo.version as i64))
        }
        "SET" => {
            (a.remaining() == 2).then_some(()).ok_or_else(label)?;
            let version = a.i64()?;
            let text = a.next()?;
            let text = std::str::from_utf8(&text)
                .map_err(|_| OpError::InvalidTopology("the text is not UTF-8".into()))?;
            let topo = Topology::parse(text).map_err(|e| OpError::InvalidTopology(e.0))?;
            if topo.version as i64 != version {
                return Err(OpError::InvalidTopology(format!(
                    "the text's version is {}, not {version}",
                    topo.version
                )));
            }
            state
                .install(topo)
                .map_err(|e| OpError::InvalidTopology(e.to_string()))?;
            tracing::info!(
                "cluster topology version {version} pushed by LH.TOPOLOGY SET is in force"
            );
            Ok(Reply::ok())
        }
        _ => Err(OpError::UnknownSubcommand {
            command: "LH.TOPOLOGY",
            sub: String::from_utf8_lossy(&a.all()[1]).into_owned(),
        }),
    }
}
