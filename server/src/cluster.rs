//! Cluster mode's topology: which group of nodes owns each hash slot, the
//! nodes of each group, and which of them this node is.
//!
//! A cluster is a set of shard groups, each one primary and its replicas
//! (failed over by Sentinel under the group's master name). The operator
//! declares the slot ranges of every group in a versioned TOML file
//! (`docs/cluster.md` describes it; `config/cluster.example.toml` is one),
//! given to every node with `cluster-config-file` (or pushed with
//! `LH.TOPOLOGY SET`). [`Topology::parse`] checks it whole: a file with any
//! fault is refused, naming it, and the topology in force stays.
//!
//! The topology in force is one immutable [`View`] behind an [`ArcSwap`]:
//! every thread reads it with [`ClusterState::load`], without a lock (the
//! dispatcher does, for each keyed command, in cluster mode only), and a
//! newer version replaces it whole ([`ClusterState::install`]), so a reader
//! sees either the old topology or the new one, never a mix. A version lower
//! than or equal to the one in force never replaces it.
//!
//! [`watch`] polls the file once a second on a thread of its own: the hot
//! path never touches the file system.
//!
//! **Primaries learned from Sentinel.** A group that names a Sentinel master
//! name has its current primary learned from the sentinels the topology
//! (`sentinels = [...]`) or the `cluster-sentinels` setting lists:
//! [`spawn_sentinel_watch`] asks each `SENTINEL get-master-addr-by-name`
//! (with `SENTINEL MASTER`'s `config-epoch`) every [`SENTINEL_POLL`], and
//! keeps one connection per sentinel subscribed to `+switch-master`, which
//! is applied the moment it arrives. What it learns ([`ClusterState::learn`])
//! rewrites the group in the view in force: the learned address becomes the
//! group's primary and the former primary is shown as a replica, so CLUSTER
//! SLOTS / SHARDS / NODES and MOVED name the new primary. A learned primary
//! survives a newer topology (it is applied to it too). An answer whose
//! config epoch is not above the one already learned is ignored, so a
//! sentinel that has not yet heard of a failover never undoes it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, Guard};
use serde::Deserialize;

use crate::error::OpError;
use crate::slot::SLOTS;

/// A slot no group owns, in [`Topology::owner`]'s table.
const UNASSIGNED: u16 = u16::MAX;

/// How often [`watch`] looks at the topology file.
pub const POLL: Duration = Duration::from_secs(1);

/// A node's role in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The group's primary: it serves reads and writes of the group's slots.
    Primary,
    /// A replica: it serves reads of the group's slots to a connection that
    /// sent READONLY, and redirects everything else to the primary.
    Replica,
}

/// One node of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// 40 lower-case hex characters: given in the file, or
    /// [`derived_id`] of its address.
    pub id: String,
    /// The address clients reach it at (an IP address or a host name).
    pub host: String,
    /// Its client port.
    pub port: u16,
    /// Primary or replica.
    pub role: Role,
}

impl Node {
    /// `host:port`, as MOVED and CLUSTER NODES write it.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The cluster bus port Redis would use (client port + 10000), which
    /// CLUSTER NODES shows after `@`; Leasehold has no bus.
    pub fn bus_port(&self) -> u32 {
        u32::from(self.port) + 10000
    }
}

/// One shard group: its slots and nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Its name in the file (unique).
    pub name: String,
    /// The slot ranges it owns, inclusive, ascending and merged.
    pub ranges: Vec<(u16, u16)>,
    /// The Sentinel master name its nodes are failed over under, if any:
    /// its primary is then learned from the sentinels.
    pub sentinel: Option<String>,
    /// Its nodes, the primary first.
    pub nodes: Vec<Node>,
}

impl Group {
    /// Its primary (the file has exactly one per group).
    pub fn primary(&self) -> &Node {
        &self.nodes[0]
    }

    /// How many slots it owns.
    pub fn slot_count(&self) -> usize {
        self.ranges
            .iter()
            .map(|&(a, b)| usize::from(b - a) + 1)
            .sum()
    }
}

/// A whole topology, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Its version: a newer topology has a higher one.
    pub version: u64,
    /// The groups, in file order.
    pub groups: Vec<Group>,
    /// The sentinels (`host`, `port`) to ask for the primaries of groups
    /// that name a master name (the file's `sentinels`).
    pub sentinels: Vec<(String, u16)>,
    /// Per slot, the index of its group, or [`UNASSIGNED`].
    owner: Box<[u16]>,
    /// The text it was parsed from (LH.TOPOLOGY GET).
    pub text: String,
}

/// Why a topology was refused: one sentence naming the fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyError(pub String);

impl std::fmt::Display for TopologyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTopology {
    version: i64,
    #[serde(default)]
    sentinels: Vec<String>,
    #[serde(default, rename = "group")]
    groups: Vec<FileGroup>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileGroup {
    name: String,
    #[serde(default)]
    slots: Vec<String>,
    #[serde(default)]
    sentinel: Option<String>,
    #[serde(default, rename = "node")]
    nodes: Vec<FileNode>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileNode {
    addr: String,
    role: String,
    #[serde(default)]
    id: Option<String>,
}

/// The node id of a node given without one: the SHA-1 of
/// `leasehold-node <host>:<port>`, in hex, so every node derives the same
/// id for the same address.
pub fn derived_id(host: &str, port: u16) -> String {
    sha1_smol::Sha1::from(format!("leasehold-node {host}:{port}"))
        .digest()
        .to_string()
}

/// Whether `id` is a node id: 40 lower-case hex characters.
pub fn is_node_id(id: &str) -> bool {
    id.len() == 40
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `"<a>-<b>"` or `"<a>"`, slots inclusive.
fn slot_range(text: &str) -> Option<(u16, u16)> {
    let slot = |t: &str| {
        t.trim()
            .parse::<u16>()
            .ok()
            .filter(|&s| usize::from(s) < SLOTS)
    };
    let (a, b) = match text.split_once('-') {
        Some((a, b)) => (slot(a)?, slot(b)?),
        None => (slot(text)?, slot(text)?),
    };
    (a <= b).then_some((a, b))
}

/// `host:port` (an IPv6 address in brackets: `[::1]:7000`).
pub fn host_port(text: &str) -> Option<(String, u16)> {
    let (host, port) = text.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port.parse::<u16>().ok().filter(|&p| p > 0)?;
    (!host.is_empty() && !host.contains(char::is_whitespace)).then(|| (host.to_string(), port))
}

impl Topology {
    /// The empty topology of a node that has none yet: version 0, no
    /// group, every slot unassigned.
    pub fn empty() -> Topology {
        Topology {
            version: 0,
            groups: Vec::new(),
            sentinels: Vec::new(),
            owner: vec![UNASSIGNED; SLOTS].into_boxed_slice(),
            text: String::new(),
        }
    }

    /// Parses and checks a topology file's text.
    ///
    /// # Errors
    /// The first fault, named: TOML syntax or an unknown key (with its
    /// line), a version below 1, a group without a name or with a name
    /// already used, a slot range that is not `a-b` within 0-16383, a slot
    /// two groups (or two ranges) claim, a group without exactly one
    /// primary, a role other than `primary` or `replica`, an address that
    /// is not `host:port` or appears twice, a node id that is not 40
    /// lower-case hex characters or appears twice, a `sentinels` entry that
    /// is not `host:port`.
    pub fn parse(text: &str) -> Result<Topology, TopologyError> {
        let bad = |m: String| Err(TopologyError(m));
        let file: FileTopology = toml::from_str(text)
            .map_err(|e| TopologyError(format!("not a topology: {}", e.to_string().trim_end())))?;
        if file.version < 1 {
            return bad(format!("version must be 1 or more, not {}", file.version));
        }
        if file.groups.len() >= usize::from(UNASSIGNED) {
            return bad("too many groups".into());
        }
        let mut sentinels = Vec::with_capacity(file.sentinels.len());
        for a in &file.sentinels {
            let Some(hp) = host_port(a) else {
                return bad(format!("sentinel address {a:?} is not \"<host>:<port>\""));
            };
            sentinels.push(hp);
        }
        let mut owner = vec![UNASSIGNED; SLOTS].into_boxed_slice();
        let mut groups = Vec::with_capacity(file.groups.len());
        let mut addrs = std::collections::HashSet::new();
        let mut ids = std::collections::HashSet::new();
        for (gi, g) in file.groups.into_iter().enumerate() {
            let name = g.name.trim().to_string();
            if name.is_empty() {
                return bad(format!("group {} has no name", gi + 1));
            }
            if groups.iter().any(|o: &Group| o.name == name) {
                return bad(format!("group name {name:?} is used twice"));
            }
            for r in &g.slots {
                let Some((a, b)) = slot_range(r) else {
                    return bad(format!(
                        "group {name:?}: slot range {r:?} is not \"<first>-<last>\" with 0 <= first <= last <= 16383"
                    ));
                };
                for s in a..=b {
                    let o = &mut owner[usize::from(s)];
                    if *o != UNASSIGNED {
                        let other = match usize::from(*o) == gi {
                            true => "itself (two of its ranges overlap)".to_string(),
                            false => format!("group {:?}", groups[usize::from(*o)].name),
                        };
                        return bad(format!(
                            "slot {s} is claimed by group {name:?} and by {other}"
                        ));
                    }
                    *o = gi as u16;
                }
            }
            let mut nodes = Vec::with_capacity(g.nodes.len());
            for n in g.nodes {
                let Some((host, port)) = host_port(&n.addr) else {
                    return bad(format!(
                        "group {name:?}: node address {:?} is not \"<host>:<port>\"",
                        n.addr
                    ));
                };
                if !addrs.insert((host.clone(), port)) {
                    return bad(format!("node address {:?} appears twice", n.addr));
                }
                let role = match n.role.to_ascii_lowercase().as_str() {
                    "primary" | "master" => Role::Primary,
                    "replica" | "slave" => Role::Replica,
                    other => {
                        return bad(format!(
                            "node {}: role must be \"primary\" or \"replica\", not {other:?}",
                            n.addr
                        ))
                    }
                };
                let id = match n.id {
                    Some(id) if !is_node_id(&id) => {
                        return bad(format!(
                            "node {}: id {id:?} is not 40 lower-case hex characters",
                            n.addr
                        ))
                    }
                    Some(id) => id,
                    None => derived_id(&host, port),
                };
                if !ids.insert(id.clone()) {
                    return bad(format!("node id {id} appears twice"));
                }
                nodes.push(Node {
                    id,
                    host,
                    port,
                    role,
                });
            }
            let primaries = nodes.iter().filter(|n| n.role == Role::Primary).count();
            if primaries != 1 {
                return bad(format!(
                    "group {name:?} has {primaries} primaries: it needs exactly one"
                ));
            }
            // The primary first (CLUSTER SLOTS lists it first).
            nodes.sort_by_key(|n| n.role != Role::Primary);
            groups.push(Group {
                name,
                ranges: Vec::new(),
                sentinel: g.sentinel.filter(|s| !s.trim().is_empty()),
                nodes,
            });
        }
        let mut t = Topology {
            version: file.version as u64,
            groups,
            sentinels,
            owner,
            text: text.to_string(),
        };
        t.groups.iter_mut().for_each(|g| g.ranges.clear());
        let mut start = 0;
        while start < SLOTS {
            let o = t.owner[start];
            let mut end = start;
            while end + 1 < SLOTS && t.owner[end + 1] == o {
                end += 1;
            }
            if o != UNASSIGNED {
                t.groups[usize::from(o)]
                    .ranges
                    .push((start as u16, end as u16));
            }
            start = end + 1;
        }
        Ok(t)
    }

    /// The index of the group owning `slot`, if any.
    #[inline]
    pub fn owner(&self, slot: u16) -> Option<usize> {
        match self.owner[usize::from(slot) & (SLOTS - 1)] {
            UNASSIGNED => None,
            g => Some(usize::from(g)),
        }
    }

    /// How many slots some group owns.
    pub fn slots_assigned(&self) -> usize {
        self.owner.iter().filter(|&&o| o != UNASSIGNED).count()
    }

    /// Every node, with its group's index.
    pub fn nodes(&self) -> impl Iterator<Item = (usize, &Node)> {
        self.groups
            .iter()
            .enumerate()
            .flat_map(|(gi, g)| g.nodes.iter().map(move |n| (gi, n)))
    }
}

/// How a node recognises itself in a topology.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    /// `cluster-node-id`: the node with this id is this one.
    pub node_id: Option<String>,
    /// `cluster-announce-ip`, or else the bound address.
    pub host: String,
    /// `cluster-announce-port`, or else the bound port.
    pub port: u16,
}

impl Identity {
    /// The node of `topo` this identity names, as (group, node) indexes:
    /// the node with [`Identity::node_id`] when given; else the node at
    /// `host:port`; else, when `host` is a loopback or unspecified address,
    /// the one node on `port` whose host is a loopback address or
    /// `localhost`.
    pub fn find(&self, topo: &Topology) -> Option<(usize, usize)> {
        let locate = |n: &Node| {
            topo.groups
                .iter()
                .enumerate()
                .find_map(|(gi, g)| g.nodes.iter().position(|m| m == n).map(|ni| (gi, ni)))
        };
        if let Some(id) = &self.node_id {
            return topo
                .nodes()
                .find(|(_, n)| &n.id == id)
                .and_then(|(_, n)| locate(n));
        }
        if let Some((_, n)) = topo
            .nodes()
            .find(|(_, n)| n.port == self.port && n.host == self.host)
        {
            return locate(n);
        }
        let local = |h: &str| {
            h == "localhost"
                || h.parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
        };
        if !local(&self.host) {
            return None;
        }
        let mut on_port = topo
            .nodes()
            .filter(|(_, n)| n.port == self.port && local(&n.host));
        match (on_port.next(), on_port.next()) {
            (Some((_, n)), None) => locate(n),
            _ => None,
        }
    }
}

/// A topology and this node's place in it: what the dispatcher and the
/// CLUSTER commands read.
#[derive(Debug)]
pub struct View {
    /// The topology.
    pub topo: Topology,
    /// This node's (group, node) indexes, when the topology lists it.
    pub me: Option<(usize, usize)>,
    /// This node's id: its node's in the topology, else [`derived_id`] of
    /// its own address (or its `cluster-node-id`).
    pub my_id: String,
}

impl View {
    fn new(topo: Topology, identity: &Identity) -> View {
        let me = identity.find(&topo);
        let my_id = match me {
            Some((g, n)) => topo.groups[g].nodes[n].id.clone(),
            None => identity
                .node_id
                .clone()
                .unwrap_or_else(|| derived_id(&identity.host, identity.port)),
        };
        View { topo, me, my_id }
    }

    /// This node's group, if the topology lists it.
    pub fn my_group(&self) -> Option<usize> {
        self.me.map(|(g, _)| g)
    }

    /// This node, if the topology lists it.
    pub fn myself(&self) -> Option<&Node> {
        self.me.map(|(g, n)| &self.topo.groups[g].nodes[n])
    }

    /// Where a command for `slot` goes, from this node: see [`Route`].
    /// `read_ok` says the command only reads and the connection sent
    /// READONLY, so a replica of the owning group serves it.
    #[inline]
    pub fn route(&self, slot: u16, read_ok: bool) -> Route<'_> {
        let Some(g) = self.topo.owner(slot) else {
            return Route::Unassigned;
        };
        let group = &self.topo.groups[g];
        match self.me {
            Some((mine, n)) if mine == g => {
                if n == 0 || read_ok {
                    Route::Here
                } else {
                    Route::Moved(group.primary())
                }
            }
            _ => Route::Moved(group.primary()),
        }
    }
}

/// Where a keyed command goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Route<'a> {
    /// This node serves it.
    Here,
    /// Another node does: `-MOVED <slot> <host>:<port>`.
    Moved(&'a Node),
    /// No group owns the slot: `-CLUSTERDOWN Hash slot not served`.
    Unassigned,
}

/// Why [`ClusterState::install`] kept the topology in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstallError {
    /// The new one's version is not above the one in force.
    NotNewer {
        /// The refused topology's version.
        given: u64,
        /// The version in force.
        current: u64,
    },
}

impl std::fmt::Display for InstallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InstallError::NotNewer { given, current } => write!(
                f,
                "version {given} is not newer than the version in force, {current}"
            ),
        }
    }
}

/// A group's primary as the sentinels named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Learned {
    /// Its host, as the sentinel wrote it.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The master's `config-epoch` the answer carried (a lower bound after a
    /// `+switch-master`, which carries none): a later answer must be above it.
    pub epoch: u64,
}

/// Whether `host:port` names `node`: the same host, or both loopback (or
/// `localhost`) on the same port.
fn same_addr(node: &Node, host: &str, port: u16) -> bool {
    let local = |h: &str| {
        h == "localhost"
            || h.parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
    };
    node.port == port && (node.host == host || (local(&node.host) && local(host)))
}

/// `base` with each learned primary in place: in a group whose master name
/// has a [`Learned`] entry, the node at that address becomes the primary
/// (moved first) and the former primary a replica; an address the group
/// does not list is added as its primary, with [`derived_id`].
pub fn with_learned(base: &Topology, learned: &HashMap<String, Learned>) -> Topology {
    let mut t = base.clone();
    for g in &mut t.groups {
        let Some(l) = g.sentinel.as_ref().and_then(|name| learned.get(name)) else {
            continue;
        };
        if same_addr(g.primary(), &l.host, l.port) {
            continue;
        }
        g.nodes[0].role = Role::Replica;
        match g.nodes.iter().position(|n| same_addr(n, &l.host, l.port)) {
            Some(i) => {
                let mut n = g.nodes.remove(i);
                n.role = Role::Primary;
                g.nodes.insert(0, n);
            }
            None => g.nodes.insert(
                0,
                Node {
                    id: derived_id(&l.host, l.port),
                    host: l.host.clone(),
                    port: l.port,
                    role: Role::Primary,
                },
            ),
        }
    }
    t
}

/// What [`ClusterState`] changes under its lock: the topology as given
/// (file or push) and the primaries learned from Sentinel, by master name.
#[derive(Debug)]
struct Given {
    base: Topology,
    learned: HashMap<String, Learned>,
}

/// Cluster mode's server-wide state: the topology in force and how this
/// node finds itself in it.
#[derive(Debug)]
pub struct ClusterState {
    current: ArcSwap<View>,
    identity: Identity,
    /// The topology file (`cluster-config-file`), if any.
    pub file: Option<PathBuf>,
    /// Sentinels given by setting (`cluster-sentinels`), asked besides the
    /// topology's own.
    pub sentinels: Vec<(String, u16)>,
    /// Installs one at a time, so a version check and its swap are one step.
    installing: parking_lot::Mutex<Given>,
    /// Times a primary learned from Sentinel changed the view in force.
    primary_changes: std::sync::atomic::AtomicU64,
    /// Slots being resharded on this node (CLUSTER SETSLOT), read without
    /// a lock; changed under `installing`.
    moving: ArcSwap<Moving>,
    /// Whether [`ClusterState::moving`] names any slot: the shards' one
    /// test per command while nothing migrates.
    moving_any: std::sync::atomic::AtomicBool,
}

/// Slots being resharded through this node, as `CLUSTER SETSLOT` set them
/// (Redis Cluster's migrating and importing states), kept beside the
/// topology: a newer topology that gives a slot imported here to this
/// node's group ends its importing state; a slot that migrated away stays
/// migrating until SETSLOT NODE or STABLE (its shards answer MOVED then,
/// see `shard::moving::check`).
#[derive(Debug, Default, Clone)]
pub struct Moving {
    /// Slot -> the node it migrates to: keys this node lacks answer `-ASK`.
    pub migrating: HashMap<u16, Node>,
    /// Slot -> the node it is imported from: served here after ASKING.
    pub importing: HashMap<u16, Node>,
}

/// One `CLUSTER SETSLOT <slot> <action>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetSlot {
    /// `MIGRATING <node-id>`: this node owns the slot and sends it there.
    Migrating(String),
    /// `IMPORTING <node-id>`: the node owning the slot sends it here.
    Importing(String),
    /// `STABLE`: neither.
    Stable,
    /// `NODE <node-id>`: the move is over: the topology in force must give
    /// the slot to that node's group; both states are cleared.
    Node(String),
}

impl ClusterState {
    /// Cluster mode with `topo` in force.
    pub fn new(topo: Topology, identity: Identity, file: Option<PathBuf>) -> ClusterState {
        ClusterState {
            current: ArcSwap::from_pointee(View::new(topo.clone(), &identity)),
            identity,
            file,
            sentinels: Vec::new(),
            installing: parking_lot::Mutex::new(Given {
                base: topo,
                learned: HashMap::new(),
            }),
            primary_changes: Default::default(),
            moving: ArcSwap::from_pointee(Moving::default()),
            moving_any: Default::default(),
        }
    }

    /// The slots being resharded through this node, read without a lock.
    #[inline]
    pub fn moving(&self) -> Guard<Arc<Moving>> {
        self.moving.load()
    }

    /// Whether this node serves `slot` now, from the topology in force:
    /// `Ok` when its group owns it (a replica only for reads, `read_ok`:
    /// READONLY was sent and nothing writes), or it imports the slot and
    /// ASKING was sent (`asking`; the shard then answers TRYAGAIN to a
    /// multi-key command it lacks keys of). The dispatcher asks it of each
    /// command, EXEC of its transaction's slot.
    ///
    /// # Errors
    /// [`OpError::Moved`] to the owner's primary; [`OpError::ClusterDown`]
    /// when no group owns the slot.
    pub fn serves(&self, slot: u16, read_ok: bool, asking: bool) -> Result<(), OpError> {
        match self.load().route(slot, read_ok) {
            Route::Here => Ok(()),
            Route::Moved(_)
                if asking && self.moving_any() && self.moving().importing.contains_key(&slot) =>
            {
                Ok(())
            }
            Route::Moved(node) => Err(OpError::Moved {
                slot,
                addr: node.addr(),
            }),
            Route::Unassigned => Err(OpError::ClusterDown),
        }
    }

    /// Whether any slot is migrating or importing here (one relaxed load).
    #[inline]
    pub fn moving_any(&self) -> bool {
        self.moving_any.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn store_moving(&self, m: Moving) {
        let any = !m.migrating.is_empty() || !m.importing.is_empty();
        self.moving.store(Arc::new(m));
        self.moving_any
            .store(any, std::sync::atomic::Ordering::Relaxed);
    }

    /// Applies `CLUSTER SETSLOT <slot> <action>` (Redis's checks and texts).
    ///
    /// # Errors
    /// The reply's text after `ERR `: `I'm not the owner of hash slot <n>`
    /// (MIGRATING where this node is not its owner's primary), `I'm already
    /// the owner of hash slot <n>` (IMPORTING there), `I don't know about
    /// node <id>`, `Target node is not a master`, `Please use SETSLOT only
    /// with masters.` (on a replica or a node the topology does not list),
    /// and for NODE a slot the topology in force does not give to that
    /// node's group.
    pub fn set_slot(&self, slot: u16, action: SetSlot) -> Result<(), String> {
        let _held = self.installing.lock();
        let view = self.load();
        let mine = match view.me {
            Some((g, 0)) => g,
            _ => return Err("Please use SETSLOT only with masters.".into()),
        };
        let owned = view.topo.owner(slot) == Some(mine);
        let node = |id: &str| -> Result<Node, String> {
            let Some((_, n)) = view.topo.nodes().find(|(_, n)| n.id == id) else {
                return Err(format!("I don't know about node {id}"));
            };
            match n.role {
                Role::Primary => Ok(n.clone()),
                Role::Replica => Err("Target node is not a master".into()),
            }
        };
        let mut m = Moving::clone(&self.moving.load());
        match action {
            SetSlot::Migrating(id) => {
                if !owned {
                    return Err(format!("I'm not the owner of hash slot {slot}"));
                }
                m.migrating.insert(slot, node(&id)?);
            }
            SetSlot::Importing(id) => {
                if owned {
                    return Err(format!("I'm already the owner of hash slot {slot}"));
                }
                m.importing.insert(slot, node(&id)?);
            }
            SetSlot::Stable => {
                m.migrating.remove(&slot);
                m.importing.remove(&slot);
            }
            SetSlot::Node(id) => {
                node(&id)?;
                let group = view.topo.nodes().find(|(_, n)| n.id == id).map(|(g, _)| g);
                if view.topo.owner(slot) != group {
                    return Err(format!(
                        "the topology in force (version {}) does not give slot {slot} to node {id}'s group: publish the new topology first (LH.TOPOLOGY SET)",
                        view.topo.version
                    ));
                }
                m.migrating.remove(&slot);
                m.importing.remove(&slot);
            }
        }
        self.store_moving(m);
        Ok(())
    }

    /// The same, asking `sentinels` too (`cluster-sentinels`).
    pub fn with_sentinels(mut self, sentinels: Vec<(String, u16)>) -> ClusterState {
        self.sentinels = sentinels;
        self
    }

    /// The view in force, read without a lock.
    #[inline]
    pub fn load(&self) -> Guard<Arc<View>> {
        self.current.load()
    }

    /// The view in force, as an `Arc` to keep.
    pub fn snapshot(&self) -> Arc<View> {
        self.current.load_full()
    }

    /// Puts `topo` in force unless its version is not above the current
    /// one's. Primaries already learned from Sentinel are applied to it.
    ///
    /// # Errors
    /// [`InstallError::NotNewer`]: the topology in force stays.
    pub fn install(&self, topo: Topology) -> Result<(), InstallError> {
        let mut given = self.installing.lock();
        let current = given.base.version;
        if topo.version <= current {
            return Err(InstallError::NotNewer {
                given: topo.version,
                current,
            });
        }
        let view = View::new(with_learned(&topo, &given.learned), &self.identity);
        if view.me.is_none() {
            tracing::warn!(
                "cluster topology version {}: this node ({}:{}) is not in it; every keyed command is redirected",
                view.topo.version,
                self.identity.host,
                self.identity.port
            );
        }
        given.base = topo;
        // The view first: a shard that finds a slot still migrating reads
        // the view after it (`shard::moving::check`), so once the states
        // below change, every shard sees the topology that made them moot.
        let mine = view.my_group();
        let now_mine: Vec<u16> = self
            .moving
            .load()
            .importing
            .keys()
            .copied()
            .filter(|&s| view.topo.owner(s) == mine)
            .collect();
        self.current.store(Arc::new(view));
        // A slot imported here and now this group's is no longer importing.
        // A slot that migrated away stays migrating until SETSLOT NODE or
        // STABLE: a command the dispatcher judged under the old topology
        // (slot here) may reach its shard after this swap, and the state
        // makes the shard answer MOVED (or ASK) instead of serving, and so
        // recreating, a key that has already moved.
        if !now_mine.is_empty() {
            let mut m = Moving::clone(&self.moving.load());
            for s in now_mine {
                m.importing.remove(&s);
            }
            self.store_moving(m);
        }
        Ok(())
    }

    /// The primary of the groups under Sentinel master name `name` is
    /// `host:port`, as a sentinel answered with config epoch `epoch`
    /// (`None`: a `+switch-master` event, which carries none and is taken
    /// as one epoch above the last answer). Taken when nothing was learned
    /// for `name` yet, or the epoch is above the learned one; then the view
    /// in force is rebuilt with it. Returns whether the view changed.
    pub fn learn(&self, name: &str, host: &str, port: u16, epoch: Option<u64>) -> bool {
        let mut given = self.installing.lock();
        let known = given.learned.get(name);
        let epoch = match (known, epoch) {
            (None, e) => e.unwrap_or(0),
            (Some(k), Some(e)) if e > k.epoch => e,
            (Some(k), None) if (k.host.as_str(), k.port) != (host, port) => k.epoch + 1,
            _ => return false,
        };
        let same_primary = known.is_some_and(|k| (k.host.as_str(), k.port) == (host, port));
        given.learned.insert(
            name.to_string(),
            Learned {
                host: host.to_string(),
                port,
                epoch,
            },
        );
        if same_primary {
            // Same primary, newer epoch: only the epoch was worth keeping.
            return false;
        }
        let before = self.current.load();
        let view = View::new(with_learned(&given.base, &given.learned), &self.identity);
        let changed = before.topo.groups != view.topo.groups;
        if changed {
            tracing::info!(
                "cluster: Sentinel names {host}:{port} the primary of master {name:?} (config epoch {epoch})"
            );
            self.current.store(Arc::new(view));
            self.primary_changes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        changed
    }

    /// How many times a primary learned from Sentinel changed the view in
    /// force (an answer naming the primary already in force is not a
    /// change).
    pub fn primary_changes(&self) -> u64 {
        self.primary_changes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The sentinels to ask: the topology's, then the setting's, without
    /// repeats; and the master names of its groups.
    pub fn sentinel_targets(&self) -> (Vec<(String, u16)>, Vec<String>) {
        let view = self.load();
        let mut sentinels = view.topo.sentinels.clone();
        for s in &self.sentinels {
            if !sentinels.contains(s) {
                sentinels.push(s.clone());
            }
        }
        let mut names: Vec<String> = view
            .topo
            .groups
            .iter()
            .filter_map(|g| g.sentinel.clone())
            .collect();
        names.dedup();
        (sentinels, names)
    }

    /// Reads, parses and installs the topology file at `path`; what
    /// happened, as one line for the log.
    ///
    /// # Errors
    /// The file cannot be read, does not parse (see [`Topology::parse`]),
    /// or is not newer: the message names the file and the problem.
    pub fn reload(&self, path: &Path) -> Result<u64, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let topo = Topology::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let version = topo.version;
        self.install(topo)
            .map_err(|e| format!("{}: {e}; ignored", path.display()))?;
        Ok(version)
    }
}

/// Polls the topology file every [`POLL`] and installs a changed one
/// (logging what it did), until `stop` says so. Runs on its own thread:
/// see [`spawn_watch`].
pub fn watch(state: &ClusterState, path: &Path, stop: &dyn Fn() -> bool) {
    let mut last = std::fs::read(path).ok();
    while !stop() {
        std::thread::sleep(POLL);
        let now = std::fs::read(path).ok();
        if now == last {
            continue;
        }
        last = now;
        match state.reload(path) {
            Ok(v) => tracing::info!(
                "cluster topology version {v} from {} is in force",
                path.display()
            ),
            Err(e) => tracing::warn!("cluster topology refused, the one in force stays: {e}"),
        }
    }
}

/// Starts [`watch`] on a thread named `leasehold-topology`.
///
/// # Errors
/// The thread could not be started.
pub fn spawn_watch(
    state: Arc<ClusterState>,
    path: PathBuf,
    stop: Box<dyn Fn() -> bool + Send>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("leasehold-topology".into())
        .spawn(move || watch(&state, &path, &*stop))
}

/// How often [`spawn_sentinel_watch`] asks every sentinel for every master
/// name's primary (a backstop: `+switch-master` is applied on arrival).
pub const SENTINEL_POLL: Duration = Duration::from_millis(500);

/// How long a sentinel connection waits to connect, or for a reply.
const SENTINEL_TIMEOUT: Duration = Duration::from_millis(500);

/// `SENTINEL get-master-addr-by-name`'s reply: `[ip, port]`, or nil when
/// the sentinel does not monitor that name.
pub fn parse_master_addr(reply: &leasehold_protocol::Reply) -> Option<(String, u16)> {
    use leasehold_protocol::Reply;
    let Reply::Array(a) = reply else { return None };
    match a.as_slice() {
        [Reply::Bulk(ip), Reply::Bulk(port)] => {
            let ip = std::str::from_utf8(ip).ok()?;
            let port = std::str::from_utf8(port).ok()?.parse::<u16>().ok()?;
            (!ip.is_empty() && port > 0).then(|| (ip.to_string(), port))
        }
        _ => None,
    }
}

/// `config-epoch` from `SENTINEL MASTER <name>`'s reply (a flat array of
/// field, value in RESP2; a map in RESP3).
pub fn parse_config_epoch(reply: &leasehold_protocol::Reply) -> Option<u64> {
    use leasehold_protocol::Reply;
    let text = |r: &Reply| match r {
        Reply::Bulk(b) => std::str::from_utf8(b).ok().map(str::to_string),
        Reply::Simple(s) => Some(s.to_string()),
        Reply::Int(i) => Some(i.to_string()),
        _ => None,
    };
    let pairs: Vec<(&Reply, &Reply)> = match reply {
        Reply::Array(a) => a.chunks_exact(2).map(|p| (&p[0], &p[1])).collect(),
        Reply::Map(m) => m.iter().map(|(k, v)| (k, v)).collect(),
        _ => return None,
    };
    pairs
        .into_iter()
        .find(|(k, _)| text(k).as_deref() == Some("config-epoch"))
        .and_then(|(_, v)| text(v)?.parse().ok())
}

/// A `+switch-master` message's payload, `<name> <old-ip> <old-port>
/// <new-ip> <new-port>`: the master name and its new primary.
pub fn parse_switch_master(payload: &str) -> Option<(String, String, u16)> {
    let parts: Vec<&str> = payload.split_ascii_whitespace().collect();
    let [name, _, _, ip, port] = parts.as_slice() else {
        return None;
    };
    let port = port.parse::<u16>().ok().filter(|&p| p > 0)?;
    Some((name.to_string(), ip.to_string(), port))
}

/// A pub/sub push as (channel, payload) when it is a `message`.
fn pushed_message(reply: &leasehold_protocol::Reply) -> Option<(String, String)> {
    use leasehold_protocol::Reply;
    let items = match reply {
        Reply::Array(a) | Reply::Push(a) => a,
        _ => return None,
    };
    let s = |r: &Reply| match r {
        Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    };
    match items.as_slice() {
        [kind, channel, payload] if s(kind).as_deref() == Some("message") => {
            Some((s(channel)?, s(payload)?))
        }
        _ => None,
    }
}

/// A blocking RESP connection to one sentinel, with [`SENTINEL_TIMEOUT`]
/// (MIGRATE uses one to its target, with its own timeout).
pub(crate) struct SentinelConn {
    stream: std::net::TcpStream,
    buf: bytes::BytesMut,
}

impl SentinelConn {
    fn open(host: &str, port: u16) -> std::io::Result<SentinelConn> {
        SentinelConn::open_with(host, port, SENTINEL_TIMEOUT)
    }

    /// A connection to `host:port` whose connect, reads and writes each
    /// time out after `timeout`.
    pub(crate) fn open_with(
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> std::io::Result<SentinelConn> {
        use std::net::ToSocketAddrs;
        let addr = (host, port)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other("no address"))?;
        let stream = std::net::TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let _ = stream.set_nodelay(true);
        Ok(SentinelConn {
            stream,
            buf: bytes::BytesMut::new(),
        })
    }

    fn send(&mut self, requests: &[&[&str]]) -> std::io::Result<()> {
        use std::io::Write;
        let mut out = bytes::BytesMut::new();
        for r in requests {
            leasehold_protocol::encode_request(r, &mut out);
        }
        self.stream.write_all(&out)
    }

    /// Writes requests already encoded.
    pub(crate) fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        self.stream.write_all(bytes)
    }

    /// The next reply; a read timeout comes back as `WouldBlock`/`TimedOut`.
    pub(crate) fn next(&mut self) -> std::io::Result<leasehold_protocol::Reply> {
        use std::io::Read;
        let mut chunk = [0u8; 4096];
        loop {
            match leasehold_protocol::decode_reply(&mut self.buf) {
                Ok(Some(r)) => return Ok(r),
                Ok(None) => {}
                Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
            }
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Asks the sentinel at `host:port` for the primary of each of `names`
/// (`SENTINEL get-master-addr-by-name` and `SENTINEL MASTER` for its
/// config epoch, in one pipeline) and gives each answer to `state`.
fn poll_sentinel(
    state: &ClusterState,
    host: &str,
    port: u16,
    names: &[String],
) -> std::io::Result<()> {
    let mut c = SentinelConn::open(host, port)?;
    let mut reqs: Vec<[&str; 3]> = Vec::new();
    for n in names {
        reqs.push(["SENTINEL", "get-master-addr-by-name", n]);
        reqs.push(["SENTINEL", "MASTER", n]);
    }
    let reqs: Vec<&[&str]> = reqs.iter().map(|r| &r[..]).collect();
    c.send(&reqs)?;
    for n in names {
        let addr = c.next()?;
        let master = c.next()?;
        if let (Some((h, p)), Some(epoch)) = (parse_master_addr(&addr), parse_config_epoch(&master))
        {
            state.learn(n, &h, p, Some(epoch));
        }
    }
    Ok(())
}

/// Keeps one connection to the sentinel at `host:port` subscribed to
/// `+switch-master` and gives every switch to `state`, reconnecting after
/// a failure, until `stop` says so or `wanted` no longer lists it.
fn subscribe_sentinel(
    state: &ClusterState,
    host: &str,
    port: u16,
    stop: &dyn Fn() -> bool,
    wanted: &dyn Fn() -> bool,
) {
    while !stop() && wanted() {
        let run = || -> std::io::Result<()> {
            let mut c = SentinelConn::open(host, port)?;
            c.send(&[&["SUBSCRIBE", "+switch-master"]])?;
            while !stop() && wanted() {
                match c.next() {
                    Ok(r) => {
                        if let Some((_, payload)) = pushed_message(&r) {
                            if let Some((name, h, p)) = parse_switch_master(&payload) {
                                tracing::info!("sentinel {host}:{port}: +switch-master {payload}");
                                state.learn(&name, &h, p, None);
                            }
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        };
        if let Err(e) = run() {
            tracing::debug!("sentinel {host}:{port}: {e}; reconnecting");
            std::thread::sleep(SENTINEL_TIMEOUT);
        }
    }
}

/// Asks every sentinel once for every master name's primary (what
/// [`spawn_sentinel_watch`] does each round), so a node starting after a
/// failover knows the current primaries before it serves: a restarted
/// former primary then redirects its group's writes instead of taking them.
/// Takes at most [`SENTINEL_TIMEOUT`] per unreachable sentinel; returns how
/// many sentinels answered.
pub fn ask_sentinels_once(state: &ClusterState) -> usize {
    let (sentinels, names) = state.sentinel_targets();
    if names.is_empty() {
        return 0;
    }
    sentinels
        .iter()
        .filter(|(host, port)| poll_sentinel(state, host, *port, &names).is_ok())
        .count()
}

/// Learns each group's primary from Sentinel, until `stop` says so: a
/// thread named `leasehold-sentinels` asks every sentinel (the topology's
/// and `cluster-sentinels`) every [`SENTINEL_POLL`], and starts one
/// `leasehold-sentinel-sub` thread per sentinel subscribed to
/// `+switch-master`. Both idle while there is no sentinel or no group
/// names a master name.
///
/// # Errors
/// The first thread could not be started.
pub fn spawn_sentinel_watch(
    state: Arc<ClusterState>,
    stop: Arc<dyn Fn() -> bool + Send + Sync>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("leasehold-sentinels".into())
        .spawn(move || {
            let mut subscribed: Vec<(String, u16)> = Vec::new();
            while !stop() {
                let (sentinels, names) = state.sentinel_targets();
                subscribed.retain(|s| sentinels.contains(s));
                if !names.is_empty() {
                    for (host, port) in &sentinels {
                        if !subscribed.contains(&(host.clone(), *port)) {
                            let (st, sp, h, p) = (state.clone(), stop.clone(), host.clone(), *port);
                            let spawned = std::thread::Builder::new()
                                .name("leasehold-sentinel-sub".into())
                                .spawn(move || {
                                    let wanted = || {
                                        let (now, names) = st.sentinel_targets();
                                        !names.is_empty() && now.contains(&(h.clone(), p))
                                    };
                                    subscribe_sentinel(&st, &h, p, &*sp, &wanted)
                                });
                            if spawned.is_ok() {
                                subscribed.push((host.clone(), *port));
                            }
                        }
                        if let Err(e) = poll_sentinel(&state, host, *port, &names) {
                            tracing::debug!("sentinel {host}:{port}: {e}");
                        }
                    }
                } else {
                    subscribed.clear();
                }
                std::thread::sleep(SENTINEL_POLL);
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREE: &str = r#"
version = 1
[[group]]
name = "a"
slots = ["0-5460"]
sentinel = "lh-a"
[[group.node]]
addr = "127.0.0.1:7001"
role = "replica"
[[group.node]]
addr = "127.0.0.1:7000"
role = "primary"
[[group]]
name = "b"
slots = ["5461-10922"]
[[group.node]]
addr = "127.0.0.1:7002"
role = "primary"
id = "0123456789abcdef0123456789abcdef01234567"
[[group]]
name = "c"
slots = ["10923-16000", "16001", "16002-16383"]
[[group.node]]
addr = "localhost:7003"
role = "primary"
"#;

    #[test]
    fn a_topology_parses_and_merges_ranges() {
        let t = Topology::parse(THREE).unwrap();
        assert_eq!(t.version, 1);
        assert_eq!(t.groups[0].ranges, vec![(0, 5460)]);
        assert_eq!(t.groups[0].primary().port, 7000);
        assert_eq!(t.groups[0].sentinel.as_deref(), Some("lh-a"));
        assert_eq!(t.groups[2].ranges, vec![(10923, 16383)]);
        assert_eq!(t.slots_assigned(), SLOTS);
        assert_eq!(t.owner(5461), Some(1));
        assert_eq!(
            t.groups[1].nodes[0].id,
            "0123456789abcdef0123456789abcdef01234567"
        );
        assert!(is_node_id(&t.groups[0].nodes[0].id));
        assert_eq!(t.groups[0].nodes[0].id, derived_id("127.0.0.1", 7000));
    }

    #[test]
    fn the_example_file_is_a_topology() {
        let text = include_str!("../../config/cluster.example.toml");
        let t = Topology::parse(text).unwrap();
        assert_eq!(
            (t.version, t.groups.len(), t.slots_assigned()),
            (1, 3, SLOTS)
        );
        assert_eq!(t.groups[0].nodes.len(), 2);
        assert_eq!(t.groups[0].sentinel.as_deref(), Some("leasehold-g0"));
        assert_eq!(
            t.groups[1].nodes[0].id,
            "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca"
        );
    }

    #[test]
    fn faults_are_named() {
        let cases = [
            ("version = 0", "version must be 1"),
            ("version = 1\n[[group]]\nname = \"a\"\nslots = [\"5-3\"]\n[[group.node]]\naddr = \"h:1\"\nrole = \"primary\"", "slot range \"5-3\""),
            ("version = 1\n[[group]]\nname = \"a\"\nslots = [\"0-16384\"]", "slot range"),
            ("version = 1\n[[group]]\nname = \"a\"\nslots = [\"0-10\"]\n[[group.node]]\naddr = \"h:1\"\nrole = \"primary\"\n[[group]]\nname = \"b\"\nslots = [\"10\"]\n[[group.node]]\naddr = \"h:2\"\nrole = \"primary\"", "slot 10 is claimed by group \"b\" and by group \"a\""),
            ("version = 1\n[[group]]\nname = \"a\"\n[[group.node]]\naddr = \"h:1\"\nrole = \"replica\"", "0 primaries"),
            ("version = 1\n[[group]]\nname = \"a\"\n[[group.node]]\naddr = \"h\"\nrole = \"primary\"", "is not \"<host>:<port>\""),
            ("version = 1\n[[group]]\nname = \"a\"\n[[group.node]]\naddr = \"h:1\"\nrole = \"boss\"", "role must be"),
            ("version = 1\n[[group]]\nname = \"a\"\n[[group.node]]\naddr = \"h:1\"\nrole = \"primary\"\nid = \"XYZ\"", "not 40 lower-case hex"),
            ("version = 1\n[[group]]\nname = \"a\"\n[[group.node]]\naddr = \"h:1\"\nrole = \"primary\"\n[[group.node]]\naddr = \"h:1\"\nrole = \"replica\"", "appears twice"),
            ("version = 1\nextra = 2", "unknown field"),
        ];
        for (text, want) in cases {
            let e = Topology::parse(text).unwrap_err().0;
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_node_finds_itself_and_routes() {
        let t = Topology::parse(THREE).unwrap();
        let id = |port| Identity {
            node_id: None,
            host: "127.0.0.1".into(),
            port,
        };
        let v = View::new(t.clone(), &id(7000));
        assert_eq!(v.me, Some((0, 0)));
        assert_eq!(v.route(0, false), Route::Here);
        assert_eq!(v.route(6000, false), Route::Moved(&t.groups[1].nodes[0]));
        // A replica sends writes, and reads without READONLY, to its primary.
        let r = View::new(t.clone(), &id(7001));
        assert_eq!(r.me, Some((0, 1)));
        assert_eq!(r.route(0, false), Route::Moved(&t.groups[0].nodes[0]));
        assert_eq!(r.route(0, true), Route::Here);
        assert_eq!(r.route(6000, true), Route::Moved(&t.groups[1].nodes[0]));
        // `localhost` in the file is this loopback node.
        assert_eq!(View::new(t.clone(), &id(7003)).me, Some((2, 0)));
        let by_id = Identity {
            node_id: Some("0123456789abcdef0123456789abcdef01234567".into()),
            host: "10.0.0.9".into(),
            port: 1,
        };
        assert_eq!(View::new(t.clone(), &by_id).me, Some((1, 0)));
        let e = Topology::empty();
        assert_eq!(View::new(e, &id(7000)).route(0, false), Route::Unassigned);
    }

    #[test]
    fn an_older_or_equal_version_never_replaces() {
        let t = Topology::parse(THREE).unwrap();
        let s = ClusterState::new(t.clone(), Identity::default(), None);
        let same = Topology::parse(&THREE.replace("name = \"c\"", "name = \"d\"")).unwrap();
        assert_eq!(
            s.install(same),
            Err(InstallError::NotNewer {
                given: 1,
                current: 1
            })
        );
        let newer = Topology::parse(&THREE.replace("version = 1", "version = 2")).unwrap();
        s.install(newer).unwrap();
        assert_eq!(s.load().topo.version, 2);
        assert!(s.install(t).is_err());
        assert_eq!(s.load().topo.version, 2);
    }

    #[test]
    fn sentinel_replies_parse() {
        use leasehold_protocol::Reply;
        let addr = Reply::Array(vec![Reply::bulk("127.0.0.1"), Reply::bulk("7001")]);
        assert_eq!(parse_master_addr(&addr), Some(("127.0.0.1".into(), 7001)));
        assert_eq!(parse_master_addr(&Reply::NilArray), None);
        assert_eq!(parse_master_addr(&Reply::Nil), None);
        let bad = Reply::Array(vec![Reply::bulk("127.0.0.1"), Reply::bulk("x")]);
        assert_eq!(parse_master_addr(&bad), None);
        let master = Reply::Array(
            [
                "name",
                "lh-a",
                "ip",
                "127.0.0.1",
                "config-epoch",
                "3",
                "quorum",
                "2",
            ]
            .iter()
            .map(|t| Reply::bulk(*t))
            .collect(),
        );
        assert_eq!(parse_config_epoch(&master), Some(3));
        let map = Reply::Map(vec![(Reply::bulk("config-epoch"), Reply::bulk("7"))]);
        assert_eq!(parse_config_epoch(&map), Some(7));
        assert_eq!(
            parse_config_epoch(&Reply::Error("ERR No such master with that name".into())),
            None
        );
        assert_eq!(
            parse_switch_master("lh-a 127.0.0.1 7000 127.0.0.1 7001"),
            Some(("lh-a".into(), "127.0.0.1".into(), 7001))
        );
        assert_eq!(parse_switch_master("lh-a 127.0.0.1 7000"), None);
        assert_eq!(parse_switch_master("lh-a 127.0.0.1 7000 127.0.0.1 0"), None);
        let msg = Reply::Array(vec![
            Reply::bulk("message"),
            Reply::bulk("+switch-master"),
            Reply::bulk("lh-a 127.0.0.1 7000 127.0.0.1 7001"),
        ]);
        assert_eq!(
            pushed_message(&msg).map(|m| m.0),
            Some("+switch-master".to_string())
        );
        let sub = Reply::Array(vec![
            Reply::bulk("subscribe"),
            Reply::bulk("+switch-master"),
            Reply::Int(1),
        ]);
        assert_eq!(pushed_message(&sub), None);
    }

    #[test]
    fn the_topology_names_sentinels() {
        let t = Topology::parse(&format!(
            "sentinels = [\"127.0.0.1:26379\", \"h:1\"]\n{THREE}"
        ))
        .unwrap();
        assert_eq!(
            t.sentinels,
            vec![("127.0.0.1".into(), 26379), ("h".into(), 1)]
        );
        let e = Topology::parse(&format!("sentinels = [\"nope\"]\n{THREE}"))
            .unwrap_err()
            .0;
        assert!(e.contains("sentinel address \"nope\""), "{e}");
    }

    #[test]
    fn a_learned_primary_rewrites_its_group_and_older_epochs_are_ignored() {
        let t = Topology::parse(THREE).unwrap();
        let me = Identity {
            node_id: None,
            host: "127.0.0.1".into(),
            port: 7002,
        };
        let s = ClusterState::new(t.clone(), me, None);
        // The file's primary, learned: nothing changes.
        assert!(!s.learn("lh-a", "127.0.0.1", 7000, Some(0)));
        // A failover: the replica is now the primary, the old one a replica.
        assert!(s.learn("lh-a", "127.0.0.1", 7001, None));
        let v = s.load();
        let g = &v.topo.groups[0];
        assert_eq!((g.nodes[0].port, g.nodes[0].role), (7001, Role::Primary));
        assert_eq!((g.nodes[1].port, g.nodes[1].role), (7000, Role::Replica));
        assert_eq!(v.route(0, false), Route::Moved(&g.nodes[0]));
        // A sentinel that has not heard of it (epoch 0) does not undo it.
        assert!(!s.learn("lh-a", "127.0.0.1", 7000, Some(0)));
        assert_eq!(s.load().topo.groups[0].primary().port, 7001);
        // The promotion's own epoch is taken silently, a later one switches.
        assert!(!s.learn("lh-a", "127.0.0.1", 7001, Some(1)));
        assert!(!s.learn("lh-a", "127.0.0.1", 7000, Some(1)));
        assert!(s.learn("lh-a", "localhost", 7000, Some(2)));
        assert_eq!(s.load().topo.groups[0].primary().port, 7000);
        // An address the group does not list becomes its primary.
        assert!(s.learn("lh-a", "10.0.0.5", 7100, Some(3)));
        let v = s.load();
        assert_eq!(v.topo.groups[0].nodes.len(), 3);
        assert_eq!(v.topo.groups[0].primary().addr(), "10.0.0.5:7100");
        assert_eq!(v.topo.groups[0].primary().id, derived_id("10.0.0.5", 7100));
        // A newer topology keeps the learned primary; other groups as given.
        let newer = Topology::parse(&THREE.replace("version = 1", "version = 2")).unwrap();
        s.install(newer).unwrap();
        assert_eq!(s.load().topo.groups[0].primary().addr(), "10.0.0.5:7100");
        assert_eq!(s.load().topo.groups[1].primary().port, 7002);
        // Unknown master names change nothing.
        assert!(!s.learn("other", "127.0.0.1", 1, Some(9)));
        // Each `true` above was one change of a primary, and only those.
        assert_eq!(s.primary_changes(), 3);
    }
}
