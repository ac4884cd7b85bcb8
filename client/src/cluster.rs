//! Cluster addressing: the slot map, a link per node, routing by hash slot,
//! and following `MOVED` and `ASK`.
//!
//! ```text
//!  call(args) ── route: the key's slot (slot.rs) ── owner in the SlotMap
//!      │ (no key: any node)                              │
//!      v                                                 v
//!  the node's Link (client.rs: one pipelined connection, connect backoff)
//!      │ -MOVED slot addr: that slot's entry now names addr; the call goes
//!      │                   there; the whole map is reloaded in the
//!      │                   background, from addr first
//!      │ -ASK slot addr:   ASKING + the command to addr, once; map unchanged
//!      │ -TRYAGAIN:        sent again after n x 20 ms (n-th time; the
//!      │                   command did not run)
//!      │ refused connect:  the map is reloaded from the other nodes now; the
//!      │                   call goes to the new owner if there is one
//!      v
//!  the reply (after at most `max_redirects` redirections and resends)
//! ```
//!
//! The map is loaded with `CLUSTER SLOTS` (with `CLUSTER INFO` in the same
//! write: its `cluster_current_epoch` orders maps, so a node that has not
//! yet heard of a newer topology never replaces a newer map with its older
//! one). Redirections are Redis Cluster's client protocol ("Redirection
//! and resharding" in the cluster specification); the bound on them and
//! the background reload follow redis-rs's and redis-py's cluster clients.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{encode_request, Reply};
use parking_lot::{Mutex, RwLock};

use crate::breaker::{Breaker, BreakerConfig, BreakerState};
use crate::client::{recv, Client, Link, Used};
use crate::clock::{us, Clock};
use crate::error::{ConnectionError, Error, ServerError, ServerErrorKind};
use crate::slot::{key_slot, SLOTS};

/// Least time between two background reloads started by failed calls
/// (timeouts, lost connections): 100 ms. While a group is down, every
/// lease call for its keys fails, and each would otherwise ask a node for
/// the whole map; ten a second still picks up a promoted replica within
/// 0.1 s of the nodes naming it.
pub const FAILURE_RELOAD_INTERVAL: Duration = Duration::from_millis(100);

/// Default bound on `MOVED`/`ASK` redirections of one call: 5 (a call
/// makes at most 6 sends), as redis-py's `RedisCluster` allows by default.
pub const DEFAULT_MAX_REDIRECTS: u32 = 5;

/// Cluster addressing settings.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Nodes asked for the slot map when no node of the map answers (at the
    /// first call, or once every known node failed). Any node of the
    /// cluster will do; the map names the others.
    pub seeds: Vec<SocketAddr>,
    /// Most `MOVED`/`ASK` redirections one call follows before it fails
    /// with [`Error::TooManyRedirects`] (default 5).
    pub max_redirects: u32,
}

impl ClusterConfig {
    /// Defaults, starting from `seeds`.
    pub fn new(seeds: Vec<SocketAddr>) -> ClusterConfig {
        ClusterConfig {
            seeds,
            max_redirects: DEFAULT_MAX_REDIRECTS,
        }
    }
}

/// Where one command goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// The owner of this slot.
    Slot(u16),
    /// Any node (a command without keys).
    Any,
}

/// One command of a request and where it goes: its bytes end at `end` in
/// the request's frame.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Routed {
    pub(crate) route: Route,
    pub(crate) end: usize,
}

/// Commands without keys: they run on any node. Every other command is
/// routed by the argument [`key_index`] names; a command missing here is
/// routed by its first argument, which costs at most a redirection.
const KEYLESS: &[&[u8]] = &[
    b"ACL",
    b"ASKING",
    b"AUTH",
    b"BGREWRITEAOF",
    b"BGSAVE",
    b"CLIENT",
    b"CLUSTER",
    b"COMMAND",
    b"CONFIG",
    b"DBSIZE",
    b"DISCARD",
    b"ECHO",
    b"EXEC",
    b"FLUSHALL",
    b"FLUSHDB",
    b"HELLO",
    b"INFO",
    b"KEYS",
    b"LASTSAVE",
    b"LH.FLUSHSLOTS",
    b"LH.HOTKEYS",
    b"LH.PIN",
    b"LH.PINS",
    b"LH.TOPOLOGY",
    b"LH.UNPIN",
    b"LH.UNPINALL",
    b"MONITOR",
    b"MULTI",
    b"PING",
    b"PUBLISH",
    b"PUBSUB",
    b"QUIT",
    b"RANDOMKEY",
    b"READONLY",
    b"READWRITE",
    b"REPLICAOF",
    b"RESET",
    b"ROLE",
    b"SAVE",
    b"SCAN",
    b"SCRIPT",
    b"SELECT",
    b"SHUTDOWN",
    b"SLAVEOF",
    b"SLOWLOG",
    b"TIME",
    b"UNWATCH",
    b"WAIT",
];

/// Commands whose keys follow `numkeys` in `args[2]` (`EVAL script
/// numkeys key...`).
const SCRIPTS: &[&[u8]] = &[
    b"EVAL",
    b"EVALSHA",
    b"EVAL_RO",
    b"EVALSHA_RO",
    b"FCALL",
    b"FCALL_RO",
];

/// Commands whose keys follow `numkeys` in `args[1]`.
const NUMKEYS_FIRST: &[&[u8]] = &[b"SINTERCARD", b"ZINTERCARD", b"LMPOP", b"ZMPOP"];

/// The argument that holds the key a command is routed by, as Redis
/// Cluster clients pick it (the first key of the command's key
/// specification in `COMMAND INFO`): `None` for a command without keys.
/// Scripts (`EVAL script numkeys key...`) go by their first key, and
/// `SINTERCARD numkeys key...` by its first; `OBJECT` and `MEMORY` name
/// their key after the subcommand; every other command by `args[1]`.
pub fn key_index<A: AsRef<[u8]>>(args: &[A]) -> Option<usize> {
    let name = args.first()?.as_ref();
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    let numkeys = |at: usize| {
        let n = args.get(at)?.as_ref();
        (std::str::from_utf8(n).ok()?.parse::<u64>().ok()? > 0).then_some(at + 1)
    };
    let at = if SCRIPTS.iter().any(|n| is(n)) {
        numkeys(2)?
    } else if NUMKEYS_FIRST.iter().any(|n| is(n)) {
        numkeys(1)?
    } else if is(b"OBJECT") || is(b"MEMORY") {
        2
    } else if KEYLESS.iter().any(|n| is(n)) {
        return None;
    } else {
        1
    };
    (at < args.len()).then_some(at)
}

/// The route of one command (`args[0]` its name).
pub(crate) fn route<A: AsRef<[u8]>>(args: &[A]) -> Route {
    match key_index(args) {
        Some(i) => Route::Slot(key_slot(args[i].as_ref())),
        None => Route::Any,
    }
}

/// No node owns the slot.
const NO_OWNER: u16 = u16::MAX;

/// Which node owns each hash slot: the primaries of a cluster as
/// `CLUSTER SLOTS` names them, and the epoch of the node that answered.
#[derive(Debug, Clone)]
pub struct SlotMap {
    epoch: u64,
    nodes: Vec<SocketAddr>,
    /// Per slot, an index into `nodes`, or [`NO_OWNER`].
    owners: Box<[u16]>,
}

impl SlotMap {
    /// A map with no slots and no nodes (before the first load).
    pub fn empty() -> SlotMap {
        SlotMap {
            epoch: 0,
            nodes: Vec::new(),
            owners: vec![NO_OWNER; SLOTS].into_boxed_slice(),
        }
    }

    /// A map from `(first, last, primary)` slot ranges (inclusive, each in
    /// 0-16383; a later range wins a slot claimed twice) and the epoch of
    /// the node that named them (`cluster_current_epoch`; a Leasehold
    /// node's is its topology's version).
    pub fn from_ranges(epoch: u64, ranges: &[(u16, u16, SocketAddr)]) -> SlotMap {
        let mut map = SlotMap::empty();
        map.epoch = epoch;
        for &(first, last, addr) in ranges {
            let node = map.node_index(addr);
            let last = usize::from(last).min(SLOTS - 1);
            for owner in map
                .owners
                .get_mut(usize::from(first)..=last)
                .unwrap_or(&mut [])
            {
                *owner = node;
            }
        }
        map
    }

    fn node_index(&mut self, addr: SocketAddr) -> u16 {
        match self.nodes.iter().position(|&n| n == addr) {
            Some(i) => i as u16,
            None => {
                self.nodes.push(addr);
                (self.nodes.len() - 1) as u16
            }
        }
    }

    /// The node that owns `slot` (`None` when no node does, or `slot` is
    /// 16384 or more).
    pub fn owner(&self, slot: u16) -> Option<SocketAddr> {
        let i = *self.owners.get(usize::from(slot))?;
        self.nodes.get(usize::from(i)).copied()
    }

    /// The nodes that own slots, in the order the map first names them.
    pub fn nodes(&self) -> &[SocketAddr] {
        &self.nodes
    }

    /// The epoch of the node whose answer this map is.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// This map with `slot` owned by `addr` (a `MOVED` redirection).
    fn moved(&self, slot: u16, addr: SocketAddr) -> SlotMap {
        let mut map = self.clone();
        let node = map.node_index(addr);
        if let Some(owner) = map.owners.get_mut(usize::from(slot)) {
            *owner = node;
        }
        map
    }
}

/// The `(first, last, host, port)` ranges of a `CLUSTER SLOTS` reply
/// (`[first, last, [host, port, id, ...], replicas...]` per range; Redis
/// 7's shape). `None` for any other shape.
pub(crate) fn parse_slots(reply: &Reply) -> Option<Vec<(u16, u16, String, u16)>> {
    let Reply::Array(entries) = reply else {
        return None;
    };
    let slot = |r: &Reply| match r {
        Reply::Int(i) => u16::try_from(*i).ok().filter(|&s| usize::from(s) < SLOTS),
        _ => None,
    };
    entries
        .iter()
        .map(|e| {
            let Reply::Array(e) = e else { return None };
            let Some(Reply::Array(primary)) = e.get(2) else {
                return None;
            };
            let host = match primary.first()? {
                Reply::Bulk(b) => String::from_utf8(b.to_vec()).ok()?,
                Reply::Simple(s) => s.to_string(),
                _ => return None,
            };
            let port = match primary.get(1)? {
                Reply::Int(p) => u16::try_from(*p).ok()?,
                _ => return None,
            };
            Some((slot(e.first()?)?, slot(e.get(1)?)?, host, port))
        })
        .collect()
}

/// `cluster_current_epoch` from a `CLUSTER INFO` reply (0 when absent).
pub(crate) fn parse_epoch(reply: &Reply) -> u64 {
    let text = match reply {
        Reply::Bulk(b) | Reply::Verbatim(_, b) => String::from_utf8_lossy(b),
        _ => return 0,
    };
    text.lines()
        .find_map(|l| l.trim().strip_prefix("cluster_current_epoch:"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The address of `host:port`: an IP as it is, a host name looked up; an
/// empty host (Redis's "the node you asked") is `asked`'s IP.
async fn resolve(host: &str, port: u16, asked: SocketAddr) -> Result<SocketAddr, Error> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host == "?" {
        return Ok(SocketAddr::new(asked.ip(), port));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    tokio::net::lookup_host((host, port))
        .await?
        .next()
        .ok_or(Error::Connection(ConnectionError::NoClusterNode))
}

/// The `host:port` of a redirection, resolved (`asked` answered it).
async fn resolve_redirect(to: &str, asked: SocketAddr) -> Result<SocketAddr, Error> {
    let bad = || {
        Error::Connection(ConnectionError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a redirection to {to:?}, not host:port"),
        )))
    };
    let (host, port) = to.rsplit_once(':').ok_or_else(bad)?;
    resolve(host, port.parse().map_err(|_| bad())?, asked).await
}

/// A redirection reply's kind, slot and target.
fn redirect_of(reply: &Reply) -> Option<(bool, u16, String)> {
    let Reply::Error(text) = reply else {
        return None;
    };
    match ServerError::parse(text).kind {
        ServerErrorKind::Moved { slot, addr } => Some((true, slot, addr)),
        ServerErrorKind::Ask { slot, addr } => Some((false, slot, addr)),
        _ => None,
    }
}

/// Whether `reply` is `-TRYAGAIN`: a multi-key command whose keys a slot
/// migration has split between two nodes, refused without running.
fn is_try_again(reply: &Reply) -> bool {
    matches!(reply, Reply::Error(text) if matches!(ServerError::parse(text).kind, ServerErrorKind::TryAgain))
}

/// The pause before the n-th resend of a `-TRYAGAIN` command: n x 20 ms
/// (a migration moves a batch of keys in milliseconds; redis-py's cluster
/// client pauses 50 ms once).
const TRY_AGAIN_PAUSE: Duration = Duration::from_millis(20);

/// `ASKING`, sent before the command an `ASK` redirects.
const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

/// Cluster mode's state, held by the client.
pub(crate) struct Cluster {
    config: ClusterConfig,
    map: RwLock<Arc<SlotMap>>,
    links: Mutex<HashMap<SocketAddr, Arc<Link>>>,
    /// A circuit breaker per node: a group that is down (a primary killed,
    /// not yet replaced) opens only its own node's, so calls for the other
    /// groups' keys go on, and a promoted replica starts with a closed one.
    breakers: Mutex<HashMap<SocketAddr, Arc<Breaker>>>,
    breaker_config: BreakerConfig,
    clock: Arc<dyn Clock>,
    /// One reload at a time.
    reloading: tokio::sync::Mutex<()>,
    /// Maps installed by reloads so far: a caller that saw `n` and then
    /// waited for `reloading` skips its reload when another ran meanwhile.
    generation: AtomicU64,
    /// A background reload is queued or running.
    background: AtomicBool,
    /// When (clock microseconds) the last background reload after a failed
    /// call started (0: never).
    failure_reload_us: AtomicU64,
}

impl Cluster {
    pub(crate) fn new(
        config: ClusterConfig,
        breaker_config: BreakerConfig,
        clock: Arc<dyn Clock>,
    ) -> Cluster {
        Cluster {
            config,
            map: RwLock::new(Arc::new(SlotMap::empty())),
            links: Mutex::new(HashMap::new()),
            breakers: Mutex::new(HashMap::new()),
            breaker_config,
            clock,
            reloading: tokio::sync::Mutex::new(()),
            generation: AtomicU64::new(0),
            background: AtomicBool::new(false),
            failure_reload_us: AtomicU64::new(0),
        }
    }

    fn map(&self) -> Arc<SlotMap> {
        self.map.read().clone()
    }

    /// `addr`'s link (made on first use).
    pub(crate) fn link(&self, addr: SocketAddr) -> Arc<Link> {
        self.links.lock().entry(addr).or_default().clone()
    }

    /// The breaker of the node a command on `route` goes to first (made
    /// on first use); `None` before there is any node to go to.
    pub(crate) fn breaker(&self, route: Route) -> Option<Arc<Breaker>> {
        let addr = self.target(route)?;
        let mut breakers = self.breakers.lock();
        let b = breakers.entry(addr).or_insert_with(|| {
            let (config, clock) = (self.breaker_config.clone(), self.clock.clone());
            Arc::new(Breaker::for_node(config, clock, addr))
        });
        Some(b.clone())
    }

    /// The worst state of the nodes' breakers (open, then half-open).
    pub(crate) fn breaker_state(&self) -> BreakerState {
        let rank = |s: &BreakerState| match s {
            BreakerState::Closed => 0,
            BreakerState::HalfOpen => 1,
            BreakerState::Open => 2,
        };
        let breakers = self.breakers.lock();
        let states = breakers.values().map(|b| b.state());
        states.max_by_key(rank).unwrap_or(BreakerState::Closed)
    }

    /// The node a command on `route` goes to: the slot's owner, else any
    /// node of the map, else the first seed.
    fn target(&self, route: Route) -> Option<SocketAddr> {
        let map = self.map.read();
        let owner = match route {
            Route::Slot(s) => map.owner(s),
            Route::Any => None,
        };
        owner
            .or_else(|| map.nodes.first().copied())
            .or_else(|| self.config.seeds.first().copied())
    }

    /// Installs `map` unless the one in force has a higher epoch (then
    /// the answer is older than what the client knows); drops the links of
    /// nodes it no longer names.
    fn install(&self, map: SlotMap) {
        let mut cur = self.map.write();
        if map.epoch < cur.epoch {
            return;
        }
        let named =
            |addr: &SocketAddr| map.nodes.contains(addr) || self.config.seeds.contains(addr);
        self.links.lock().retain(|addr, _| named(addr));
        self.breakers.lock().retain(|addr, _| named(addr));
        *cur = Arc::new(map);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The nodes a reload asks, in order: `prefer`, the map's nodes, the
    /// seeds; never `avoid`.
    fn candidates(&self, prefer: Option<SocketAddr>, avoid: Option<SocketAddr>) -> Vec<SocketAddr> {
        let map = self.map();
        let mut out: Vec<SocketAddr> = Vec::new();
        for addr in prefer
            .into_iter()
            .chain(map.nodes.iter().copied())
            .chain(self.config.seeds.iter().copied())
        {
            if Some(addr) != avoid && !out.contains(&addr) {
                out.push(addr);
            }
        }
        out
    }
}

impl Client {
    /// In cluster mode, the slot map in force (empty before the first
    /// call or [`Client::connect`]); `None` in the other modes.
    pub fn slot_map(&self) -> Option<Arc<SlotMap>> {
        self.inner.cluster.as_ref().map(Cluster::map)
    }

    /// In cluster mode, the node that the map says owns `key`'s slot.
    pub fn slot_owner(&self, key: &[u8]) -> Option<SocketAddr> {
        self.slot_map()?.owner(key_slot(key))
    }

    /// In cluster mode, reloads the slot map now (from the map's nodes,
    /// then the seeds; the first answer with an epoch not below the map's
    /// is installed). A no-op in the other modes.
    ///
    /// # Errors
    /// The last node's error when none answered (each is given the call
    /// deadline to connect and the same again to answer), or
    /// [`ConnectionError::NoClusterNode`] when there is none to ask.
    pub async fn reload_slot_map(&self) -> Result<(), Error> {
        match &self.inner.cluster {
            Some(c) => {
                let seen = c.generation.load(Ordering::Acquire);
                self.reload(seen, None, None).await
            }
            None => Ok(()),
        }
    }

    /// Reloads the map unless another reload installed one since the
    /// caller saw `seen`. It runs as a task of its own, so a caller whose
    /// deadline ends during it leaves it to finish for the next caller.
    async fn reload(
        &self,
        seen: u64,
        prefer: Option<SocketAddr>,
        avoid: Option<SocketAddr>,
    ) -> Result<(), Error> {
        let me = self.clone();
        let task = tokio::spawn(async move { me.reload_now(seen, prefer, avoid).await });
        task.await
            .unwrap_or(Err(Error::Connection(ConnectionError::Closed)))
    }

    /// Starts a reload in the background (asking `prefer` first) unless
    /// one is queued or running. One after a failed call (no `prefer`)
    /// starts at most every [`FAILURE_RELOAD_INTERVAL`].
    pub(crate) fn reload_in_background(&self, prefer: Option<SocketAddr>) {
        let Some(cluster) = &self.inner.cluster else {
            return;
        };
        let now = self.inner.clock.now_us();
        if prefer.is_none() {
            let last = cluster.failure_reload_us.load(Ordering::Acquire);
            if last != 0 && now.saturating_sub(last) < us(FAILURE_RELOAD_INTERVAL) {
                return;
            }
        }
        if cluster.background.swap(true, Ordering::AcqRel) {
            return;
        }
        if prefer.is_none() {
            cluster
                .failure_reload_us
                .store(now.max(1), Ordering::Release);
        }
        let seen = cluster.generation.load(Ordering::Acquire);
        let me = self.clone();
        tokio::spawn(async move {
            let _ = me.reload_now(seen, prefer, None).await;
            if let Some(c) = &me.inner.cluster {
                c.background.store(false, Ordering::Release);
            }
        });
    }

    async fn reload_now(
        &self,
        seen: u64,
        prefer: Option<SocketAddr>,
        avoid: Option<SocketAddr>,
    ) -> Result<(), Error> {
        let Some(cluster) = &self.inner.cluster else {
            return Ok(());
        };
        let _one = cluster.reloading.lock().await;
        if cluster.generation.load(Ordering::Acquire) != seen {
            return Ok(());
        }
        let mut last = Error::Connection(ConnectionError::NoClusterNode);
        for addr in cluster.candidates(prefer, avoid) {
            match self.ask_slots(cluster, addr).await {
                Ok(map) => {
                    cluster.install(map);
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// `CLUSTER INFO` and `CLUSTER SLOTS` asked of `addr`, as a map.
    async fn ask_slots(&self, cluster: &Cluster, addr: SocketAddr) -> Result<SlotMap, Error> {
        let deadline = self.inner.config.call_deadline;
        let link = cluster.link(addr);
        let conn = tokio::time::timeout(deadline, self.connection_to(&link, Some(addr), false))
            .await
            .map_err(|_| Error::Timeout { deadline })??;
        let mut frame = BytesMut::new();
        encode_request(&["CLUSTER", "INFO"], &mut frame);
        encode_request(&["CLUSTER", "SLOTS"], &mut frame);
        let rx = conn.send(frame.freeze(), 2)?;
        let replies = match tokio::time::timeout(deadline, recv(rx)).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout { deadline }),
        };
        let replies = replies.inspect_err(|e| {
            if e.is_timeout() || e.is_connection() || matches!(e, Error::Protocol(_)) {
                Client::discard(&link, &conn);
            }
        })?;
        let [info, slots] = <[Reply; 2]>::try_from(replies)
            .map_err(|_| Error::Connection(ConnectionError::Closed))?;
        let ranges = parse_slots(&slots).ok_or_else(|| match slots.clone() {
            Reply::Error(text) => Error::Server(ServerError::parse(&text)),
            reply => Error::UnexpectedReply {
                command: "CLUSTER SLOTS",
                reply,
            },
        })?;
        let mut resolved = Vec::with_capacity(ranges.len());
        for (first, last, host, port) in ranges {
            resolved.push((first, last, resolve(&host, port, addr).await?));
        }
        Ok(SlotMap::from_ranges(parse_epoch(&info), &resolved))
    }

    /// [`Client::connect`] in cluster mode: loads the map unless it has
    /// one, then opens a connection to every node it names.
    pub(crate) async fn connect_cluster(&self, cluster: &Cluster) -> Result<(), Error> {
        self.ensure_map(cluster).await?;
        for addr in cluster.map().nodes.clone() {
            self.connection_to(&cluster.link(addr), Some(addr), false)
                .await?;
        }
        Ok(())
    }

    async fn ensure_map(&self, cluster: &Cluster) -> Result<(), Error> {
        let seen = cluster.generation.load(Ordering::Acquire);
        if seen == 0 {
            self.reload(seen, None, None).await?;
        }
        Ok(())
    }

    /// Sends a request of `routes.len()` commands in cluster mode.
    pub(crate) async fn send_cluster(
        &self,
        cluster: &Cluster,
        routes: &[Routed],
        frame: Bytes,
        probe: bool,
        used: &mut Used,
    ) -> Result<Vec<Reply>, Error> {
        self.ensure_map(cluster).await?;
        match routes {
            [one] => {
                self.send_routed(cluster, one.route, frame, probe, used)
                    .await
            }
            _ => self.send_spread(cluster, routes, frame, probe, used).await,
        }
    }

    /// One command to its slot's owner, following redirections.
    async fn send_routed(
        &self,
        cluster: &Cluster,
        route: Route,
        frame: Bytes,
        probe: bool,
        used: &mut Used,
    ) -> Result<Vec<Reply>, Error> {
        let mut target = cluster.target(route);
        let (mut asking, mut redirects, mut reloaded) = (false, 0, false);
        loop {
            let addr = target.ok_or(Error::Connection(ConnectionError::NoClusterNode))?;
            let link = cluster.link(addr);
            let seen = cluster.generation.load(Ordering::Acquire);
            let conn = match self.connection_to(&link, Some(addr), probe).await {
                Ok(conn) => conn,
                Err(e) => {
                    // A node that refuses connections: its slots may have
                    // gone elsewhere (a failover, a newer topology).
                    let refused = matches!(e, Error::Connection(ConnectionError::Io(_)));
                    if refused && !reloaded && !asking {
                        reloaded = true;
                        let _ = self.reload(seen, None, Some(addr)).await;
                        let next = cluster.target(route);
                        if next.is_some() && next != Some(addr) {
                            target = next;
                            continue;
                        }
                    }
                    return Err(e);
                }
            };
            used.only(link, conn.clone());
            let replies = if asking {
                let mut asked = BytesMut::from(ASKING);
                asked.extend_from_slice(&frame);
                let mut replies = recv(conn.send(asked.freeze(), 2)?).await?;
                // ASKING's own `+OK`.
                replies.remove(0);
                replies
            } else {
                recv(conn.send(frame.clone(), 1)?).await?
            };
            if replies.first().is_some_and(is_try_again) && redirects < cluster.config.max_redirects
            {
                // The command did not run (its keys are split by a slot
                // migration): sent again, as it was, after a short pause.
                redirects += 1;
                tokio::time::sleep(TRY_AGAIN_PAUSE * redirects).await;
                continue;
            }
            let Some((moved, slot, to)) = replies.first().and_then(redirect_of) else {
                return Ok(replies);
            };
            if redirects == cluster.config.max_redirects {
                return Err(Error::TooManyRedirects {
                    slot,
                    addr: to,
                    redirects,
                });
            }
            redirects += 1;
            let to = resolve_redirect(&to, addr).await?;
            asking = !moved;
            if moved {
                // Under the write lock, so a reload installed meanwhile is
                // not overwritten by the map it replaced.
                let mut map = cluster.map.write();
                *map = Arc::new(map.moved(slot, to));
                drop(map);
                self.reload_in_background(Some(to));
            }
            target = Some(to);
        }
    }

    /// A pipeline in cluster mode: each node's commands in one write, all
    /// nodes in flight together; a redirected command is then sent again
    /// on its own.
    async fn send_spread(
        &self,
        cluster: &Cluster,
        routes: &[Routed],
        frame: Bytes,
        probe: bool,
        used: &mut Used,
    ) -> Result<Vec<Reply>, Error> {
        let mut starts = Vec::with_capacity(routes.len());
        let mut groups: Vec<(SocketAddr, Vec<usize>, BytesMut)> = Vec::new();
        for (i, r) in routes.iter().enumerate() {
            let start = i.checked_sub(1).map_or(0, |p| routes[p].end);
            starts.push(start);
            let addr = cluster
                .target(r.route)
                .ok_or(Error::Connection(ConnectionError::NoClusterNode))?;
            let at = match groups.iter().position(|g| g.0 == addr) {
                Some(at) => at,
                None => {
                    groups.push((addr, Vec::new(), BytesMut::new()));
                    groups.len() - 1
                }
            };
            groups[at].1.push(i);
            groups[at].2.extend_from_slice(&frame[start..r.end]);
        }
        let mut waiting = Vec::with_capacity(groups.len());
        for (addr, indices, bytes) in groups {
            let link = cluster.link(addr);
            let conn = self.connection_to(&link, Some(addr), probe).await?;
            used.push(link, conn.clone());
            waiting.push((indices.clone(), conn.send(bytes.freeze(), indices.len())?));
        }
        let mut out: Vec<Reply> = (0..routes.len()).map(|_| Reply::Nil).collect();
        for (indices, rx) in waiting {
            for (i, reply) in indices.into_iter().zip(recv(rx).await?) {
                out[i] = reply;
            }
        }
        for (i, r) in routes.iter().enumerate() {
            if redirect_of(&out[i]).is_some() {
                let again = frame.slice(starts[i]..r.end);
                let mut hop = Used::default();
                let reply = self
                    .send_routed(cluster, r.route, again, probe, &mut hop)
                    .await;
                used.extend(hop);
                if let Some(reply) = reply?.pop() {
                    out[i] = reply;
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn a_slot_map_from_ranges_and_moves() {
        let map = SlotMap::from_ranges(
            3,
            &[(0, 5460, a(1)), (5461, 10922, a(2)), (10923, 16383, a(3))],
        );
        assert_eq!(map.epoch(), 3);
        assert_eq!(map.nodes(), &[a(1), a(2), a(3)]);
        assert_eq!(map.owner(0), Some(a(1)));
        assert_eq!(map.owner(5460), Some(a(1)));
        assert_eq!(map.owner(5461), Some(a(2)));
        assert_eq!(map.owner(16383), Some(a(3)));
        assert_eq!(map.owner(16384), None);
        // "foo" is slot 12182.
        assert_eq!(map.owner(key_slot(b"foo")), Some(a(3)));
        let moved = map.moved(12182, a(4));
        assert_eq!(moved.owner(12182), Some(a(4)));
        assert_eq!(moved.owner(12181), Some(a(3)));
        assert_eq!(moved.nodes().len(), 4);
        // Unowned slots stay unowned.
        let gap = SlotMap::from_ranges(1, &[(0, 99, a(1))]);
        assert_eq!((gap.owner(99), gap.owner(100)), (Some(a(1)), None));
        assert_eq!(SlotMap::empty().owner(0), None);
    }

    #[test]
    fn parses_cluster_slots_and_info() {
        let node = |host: &str, port: i64| {
            Reply::Array(vec![Reply::bulk(host), Reply::Int(port), Reply::bulk("id")])
        };
        let reply = Reply::Array(vec![
            Reply::Array(vec![
                Reply::Int(0),
                Reply::Int(8191),
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7003),
            ]),
            Reply::Array(vec![
                Reply::Int(8192),
                Reply::Int(16383),
                node("localhost", 7001),
            ]),
        ]);
        assert_eq!(
            parse_slots(&reply),
            Some(vec![
                (0, 8191, "127.0.0.1".into(), 7000),
                (8192, 16383, "localhost".into(), 7001)
            ])
        );
        let out_of_range = Reply::Array(vec![Reply::Array(vec![
            Reply::Int(0),
            Reply::Int(16384),
            node("h", 1),
        ])]);
        assert_eq!(parse_slots(&out_of_range), None);
        assert_eq!(parse_slots(&Reply::err("ERR no")), None);
        let info =
            Reply::bulk("cluster_state:ok\r\ncluster_current_epoch:7\r\ncluster_my_epoch:7\r\n");
        assert_eq!(parse_epoch(&info), 7);
        assert_eq!(parse_epoch(&Reply::Nil), 0);
    }

    #[test]
    fn routes_by_the_first_key() {
        let slot = |k: &str| Route::Slot(key_slot(k.as_bytes()));
        assert_eq!(route(&["GET", "foo"]), slot("foo"));
        assert_eq!(
            route(&["tokenlease", "{u1}:a", "10", "1", "1000", "1"]),
            slot("u1")
        );
        assert_eq!(route(&["EVAL", "return 1", "2", "k1", "k2"]), slot("k1"));
        assert_eq!(route(&["EVAL", "return 1", "0"]), Route::Any);
        assert_eq!(route(&["SINTERCARD", "2", "a", "b"]), slot("a"));
        assert_eq!(route(&["OBJECT", "ENCODING", "k"]), slot("k"));
        assert_eq!(route(&["PING"]), Route::Any);
        assert_eq!(route(&["cluster", "slots"]), Route::Any);
        assert_eq!(route(&["GET"]), Route::Any);
    }

    #[tokio::test]
    async fn resolves_redirect_targets() {
        let asked = a(9);
        assert_eq!(
            resolve_redirect("127.0.0.1:7001", asked).await.unwrap(),
            a(7001)
        );
        assert_eq!(resolve_redirect(":7002", asked).await.unwrap(), a(7002));
        assert_eq!(
            resolve_redirect("::1:7003", asked).await.unwrap(),
            "[::1]:7003".parse().unwrap()
        );
        assert!(resolve_redirect("nonsense", asked).await.is_err());
    }
}
