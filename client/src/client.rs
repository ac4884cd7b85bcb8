//! The client: one shared pipelined connection, a deadline per call,
//! reconnection with backoff and jitter, and the circuit breaker.
//!
//! Every call goes: breaker admits -> take (or open) the connection ->
//! queue the request -> await the reply under the deadline. A call that
//! misses its deadline discards the connection it used, so the next caller
//! always starts on a fresh one and a late reply never reaches it.
//!
//! The connection goes to a fixed address ([`Address::Direct`]) or to the
//! primary that Redis Sentinel names ([`Address::Sentinel`], `sentinel.rs`):
//! then every connect asks the sentinels first, a `READONLY` reply
//! discards the connection (the node was demoted), and a watcher task
//! moves the connection to each primary Sentinel announces.
//!
//! In cluster mode ([`Address::Cluster`], `cluster.rs`) the client keeps
//! one such connection per node (`Link`) and one breaker per node, and
//! routes each command by the hash slot of its key; the deadline stays one
//! per call.

use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{encode_request, Reply};
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use crate::breaker::{Breaker, BreakerConfig, BreakerState};
use crate::clock::{us, Clock, SystemClock};
use crate::cluster::{Cluster, ClusterConfig, Route, Routed};
use crate::conn::Connection;
use crate::error::{is_readonly, ConnectionError, Error, ServerError};
use crate::sentinel::{SentinelConfig, Sentinels};

/// Default deadline of lease calls (TOKENLEASE, TOKENRETURN): 5 ms. A
/// decision with no local tokens waits at most this plus 1 ms.
pub const DEFAULT_LEASE_DEADLINE: Duration = Duration::from_millis(5);
/// Default deadline of every other call: 100 ms.
pub const DEFAULT_CALL_DEADLINE: Duration = Duration::from_millis(100);

/// Where the client's connection goes.
#[derive(Debug, Clone)]
pub enum Address {
    /// One server at a fixed address.
    Direct(SocketAddr),
    /// The primary that Redis Sentinel names, followed through failovers.
    Sentinel(SentinelConfig),
    /// A Redis Cluster (or a Leasehold cluster): the slot map is loaded
    /// from the seed nodes, and each command goes to the node that owns
    /// its key's hash slot.
    Cluster(ClusterConfig),
}

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Where to connect.
    pub address: Address,
    /// Deadline of TOKENLEASE and TOKENRETURN calls (default 5 ms).
    pub lease_deadline: Duration,
    /// Deadline of every other call (default 100 ms).
    pub call_deadline: Duration,
    /// First reconnect delay after a failed connect; doubles per failure
    /// (default 10 ms).
    pub backoff_base: Duration,
    /// Largest reconnect delay (default 1 s).
    pub backoff_max: Duration,
    /// The circuit breaker.
    pub breaker: BreakerConfig,
    /// Sent with `AUTH` on every new connection to a server (not to
    /// sentinels) before any call uses it; `None` (the default) sends none.
    pub credentials: Option<Credentials>,
}

/// A user and password for `AUTH [user] password` (Redis's `requirepass`
/// and ACL users; Leasehold's `--requirepass` and `ACL SETUSER`).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The ACL user; `None` sends `AUTH password` (the `default` user).
    pub user: Option<String>,
    /// The password.
    pub password: String,
}

impl Credentials {
    /// `password` for `user` (the `default` user when `None`).
    pub fn new(user: Option<&str>, password: &str) -> Credentials {
        Credentials {
            user: user.map(str::to_string),
            password: password.to_string(),
        }
    }

    /// `AUTH [user] password`.
    pub(crate) fn command(&self) -> Vec<&str> {
        let mut args = vec!["AUTH"];
        args.extend(self.user.as_deref());
        args.push(&self.password);
        args
    }
}

/// An `AUTH` reply: `Ok` for `+OK`, else the server's refusal
/// (`WRONGPASS`, `NOAUTH`, ...) as [`Error::Server`].
pub(crate) fn auth_accepted(reply: Reply) -> Result<(), Error> {
    match reply {
        Reply::Simple(ok) if ok == "OK" => Ok(()),
        Reply::Error(e) => Err(Error::Server(crate::error::ServerError::parse(&e))),
        reply => Err(Error::UnexpectedReply {
            command: "AUTH",
            reply,
        }),
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl ClientConfig {
    /// Defaults, connecting to the server at `addr`.
    pub fn new(addr: SocketAddr) -> ClientConfig {
        ClientConfig::at(Address::Direct(addr))
    }

    /// Defaults, connecting to the primary that the sentinels at
    /// `sentinels` name for `master_name` (Sentinel's own defaults apart,
    /// see [`SentinelConfig`]).
    pub fn sentinel(sentinels: Vec<SocketAddr>, master_name: impl Into<String>) -> ClientConfig {
        ClientConfig::at(Address::Sentinel(SentinelConfig::new(
            sentinels,
            master_name,
        )))
    }

    /// Defaults, in cluster mode: the slot map is loaded from the first of
    /// `seeds` that answers (see [`ClusterConfig`]).
    pub fn cluster(seeds: Vec<SocketAddr>) -> ClientConfig {
        ClientConfig::at(Address::Cluster(ClusterConfig::new(seeds)))
    }

    /// Defaults, connecting to `address`.
    pub fn at(address: Address) -> ClientConfig {
        ClientConfig {
            address,
            lease_deadline: DEFAULT_LEASE_DEADLINE,
            call_deadline: DEFAULT_CALL_DEADLINE,
            backoff_base: Duration::from_millis(10),
            backoff_max: Duration::from_secs(1),
            breaker: BreakerConfig::default(),
            credentials: None,
        }
    }

    /// These settings, authenticating every new connection as `user` (the
    /// `default` user when `None`) with `password`.
    pub fn with_auth(mut self, user: Option<&str>, password: &str) -> ClientConfig {
        self.credentials = Some(Credentials::new(user, password));
        self
    }
}

/// A cheap-to-clone handle; all clones share one connection (one per node
/// in cluster mode) and one breaker.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("address", &self.inner.config.address)
            .finish()
    }
}

pub(crate) struct Inner {
    pub(crate) config: ClientConfig,
    pub(crate) clock: Arc<dyn Clock>,
    breaker: Breaker,
    /// The connection in direct and Sentinel modes (unused in cluster mode).
    link: Arc<Link>,
    /// Cluster mode: the slot map and a link per node.
    pub(crate) cluster: Option<Cluster>,
    /// Sentinel addressing: the sentinels and the primary last verified.
    sentinels: Option<Arc<Sentinels>>,
    /// Sentinel addressing: the task that follows `+switch-master`,
    /// started by the first connect and stopped with the client.
    watcher: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(w) = self.watcher.get_mut().take() {
            w.abort();
        }
    }
}

/// One node's connection: the live one, and the state of connecting to
/// it (one connect at a time, backoff after failures).
#[derive(Default)]
pub(crate) struct Link {
    current: Mutex<Option<Arc<Connection>>>,
    /// Serializes connect attempts so a reconnect storm is one connect.
    connecting: tokio::sync::Mutex<Connecting>,
}

/// The connections a call used, discarded together when it fails: one
/// for a single command, one per node for a pipeline in cluster mode.
#[derive(Default)]
pub(crate) struct Used {
    first: Option<(Arc<Link>, Arc<Connection>)>,
    more: Vec<(Arc<Link>, Arc<Connection>)>,
}

impl Used {
    pub(crate) fn push(&mut self, link: Arc<Link>, conn: Arc<Connection>) {
        match self.first {
            None => self.first = Some((link, conn)),
            Some(_) => self.more.push((link, conn)),
        }
    }

    /// Only this connection (a redirected call's earlier hops answered).
    pub(crate) fn only(&mut self, link: Arc<Link>, conn: Arc<Connection>) {
        self.first = Some((link, conn));
    }

    pub(crate) fn extend(&mut self, other: Used) {
        self.more.extend(other.first.into_iter().chain(other.more));
    }

    fn all(&self) -> impl Iterator<Item = &(Arc<Link>, Arc<Connection>)> {
        self.first.iter().chain(&self.more)
    }
}

#[derive(Default)]
struct Connecting {
    /// Delay before the next attempt after the last failure (zero: none failed).
    delay: Duration,
    /// No attempt before this instant (clock microseconds).
    not_before_us: u64,
    /// Sentinel addressing: the search for the primary (sentinels, connect,
    /// ROLE) runs as its own task, so a caller whose deadline ends during
    /// it leaves it running for the next caller instead of starting over.
    search: Option<JoinHandle<Result<Arc<Connection>, Error>>>,
}

impl Client {
    /// A client for `config.address`; connects lazily on the first call.
    pub fn new(config: ClientConfig) -> Client {
        Client::with_clock(config, Arc::new(SystemClock::new()))
    }

    /// Like [`Client::new`] with an injected clock for the breaker and backoff.
    pub fn with_clock(config: ClientConfig, clock: Arc<dyn Clock>) -> Client {
        let breaker = Breaker::new(config.breaker.clone(), clock.clone());
        let sentinels = match &config.address {
            Address::Sentinel(s) => Some(Arc::new(Sentinels::new(
                s.clone(),
                config.credentials.clone(),
            ))),
            Address::Direct(_) | Address::Cluster(_) => None,
        };
        let cluster = match &config.address {
            Address::Cluster(c) => Some(Cluster::new(
                c.clone(),
                config.breaker.clone(),
                clock.clone(),
            )),
            Address::Direct(_) | Address::Sentinel(_) => None,
        };
        Client {
            inner: Arc::new(Inner {
                config,
                clock,
                breaker,
                link: Arc::default(),
                cluster,
                sentinels,
                watcher: Mutex::new(None),
            }),
        }
    }

    /// The node calls go to: the configured address in direct mode; with
    /// Sentinel addressing, the last node that said `master` to `ROLE`
    /// (`None` before the first connect); `None` in cluster mode (see
    /// [`Client::slot_owner`]).
    pub fn primary(&self) -> Option<SocketAddr> {
        match (&self.inner.config.address, &self.inner.sentinels) {
            (Address::Direct(addr), _) => Some(*addr),
            (_, Some(s)) => s.primary(),
            (_, None) => None,
        }
    }

    /// With Sentinel addressing, the sentinels in the order the next search
    /// asks them (the last one that answered first); empty in direct mode.
    pub fn sentinels(&self) -> Vec<SocketAddr> {
        self.inner
            .sentinels
            .as_ref()
            .map_or_else(Vec::new, |s| s.order())
    }

    /// The settings.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The breaker's state; in cluster mode the worst of the nodes'
    /// breakers (open, then half-open, then closed).
    pub fn breaker_state(&self) -> BreakerState {
        match &self.inner.cluster {
            Some(c) => c.breaker_state(),
            None => self.inner.breaker.state(),
        }
    }

    /// Whether a call now would be refused by the breaker without I/O (in
    /// cluster mode: a keyless call's, by the breaker of the node it would
    /// go to; see [`Client::breaker_would_refuse_for`]).
    pub fn breaker_would_refuse(&self) -> bool {
        self.breaker_would_refuse_on(|| crate::cluster::Route::Any)
    }

    /// Whether a call on `key` now would be refused by the breaker without
    /// I/O: in cluster mode the breaker of the node owning `key`'s slot,
    /// so one group that is down never holds back the others' keys.
    pub fn breaker_would_refuse_for(&self, key: &[u8]) -> bool {
        self.breaker_would_refuse_on(|| crate::cluster::Route::Slot(crate::slot::key_slot(key)))
    }

    /// `route` is asked for in cluster mode only.
    fn breaker_would_refuse_on(&self, route: impl FnOnce() -> crate::cluster::Route) -> bool {
        match &self.inner.cluster {
            Some(c) => c.breaker(route()).is_some_and(|b| b.would_refuse()),
            None => self.inner.breaker.would_refuse(),
        }
    }

    /// Opens the connection now, under the call deadline, so that the first
    /// lease call does not spend its 5 ms on the TCP connect (a gateway calls
    /// this at startup; under load the connect alone can miss the lease
    /// deadline and the first request would be bypassed). A no-op when a
    /// connection is open.
    ///
    /// # Errors
    /// The connect's own error, or [`Error::Timeout`] after
    /// [`ClientConfig::call_deadline`].
    ///
    /// In cluster mode it loads the slot map and opens a connection to
    /// every node that owns slots.
    pub async fn connect(&self) -> Result<(), Error> {
        let deadline = self.inner.config.call_deadline;
        let opened = async {
            match &self.inner.cluster {
                Some(cluster) => self.connect_cluster(cluster).await,
                None => self
                    .connection_to(&self.inner.link, None, false)
                    .await
                    .map(drop),
            }
        };
        match tokio::time::timeout(deadline, opened).await {
            Ok(done) => done,
            Err(_) => Err(Error::Timeout { deadline }),
        }
    }

    /// Sends one command (`args[0]` is its name) under `deadline`.
    ///
    /// In cluster mode it goes to the node that owns its key's slot
    /// (`cluster.rs` says which argument is the key), following `MOVED`
    /// and `ASK`; the deadline covers every hop.
    ///
    /// # Errors
    /// [`Error::Server`] for an error reply, and every transport error;
    /// in cluster mode also [`Error::TooManyRedirects`].
    pub async fn call<A: AsRef<[u8]>>(
        &self,
        args: &[A],
        deadline: Duration,
    ) -> Result<Reply, Error> {
        let mut frame = BytesMut::new();
        encode_request(args, &mut frame);
        let routed = [Routed {
            route: match self.inner.cluster {
                Some(_) => crate::cluster::route(args),
                None => Route::Any,
            },
            end: frame.len(),
        }];
        let reply = self.exec(&routed, frame.freeze(), 1, deadline).await?.pop();
        let reply = reply.ok_or(Error::Connection(ConnectionError::Closed))?;
        match reply {
            Reply::Error(text) => Err(Error::Server(ServerError::parse(&text))),
            other => Ok(other),
        }
    }

    /// Sends several commands in one write and returns each reply in order.
    /// An error reply stays in its place (`Reply::Error`), so the others
    /// keep their alignment: reply `i` answers command `i`.
    ///
    /// In cluster mode each command goes to the node that owns its key's
    /// slot (one write per node, all in flight together), and a command
    /// answered `MOVED` or `ASK` is sent again on its own, as
    /// [`Client::call`] would.
    ///
    /// # Errors
    /// Transport errors only; they fail the whole pipeline.
    pub async fn pipeline(
        &self,
        commands: &[Vec<Bytes>],
        deadline: Duration,
    ) -> Result<Vec<Reply>, Error> {
        let mut frame = BytesMut::new();
        let mut routes = Vec::new();
        for c in commands {
            encode_request(c, &mut frame);
            if self.inner.cluster.is_some() {
                routes.push(Routed {
                    route: crate::cluster::route(c),
                    end: frame.len(),
                });
            }
        }
        self.exec(&routes, frame.freeze(), commands.len(), deadline)
            .await
    }

    /// Runs `frame` (`n` commands; in cluster mode `routes[i]` says where
    /// command `i` goes and where its bytes end) under the breaker and
    /// `deadline`.
    async fn exec(
        &self,
        routes: &[Routed],
        frame: Bytes,
        n: usize,
        deadline: Duration,
    ) -> Result<Vec<Reply>, Error> {
        // In cluster mode, the breaker of the node the (first) command goes
        // to: a pipeline over several nodes is judged by its first.
        let node_breaker = match (&self.inner.cluster, routes.first()) {
            (Some(c), Some(r)) => c.breaker(r.route),
            _ => None,
        };
        let breaker = node_breaker.as_deref().unwrap_or(&self.inner.breaker);
        let permit = match breaker.admit() {
            Ok(p) => p,
            Err(e) => {
                // A node's open breaker: its slots may have moved (a
                // promoted replica, with a breaker of its own), which the
                // map shows once reloaded (at most ten times a second).
                if node_breaker.is_some() {
                    self.reload_in_background(None);
                }
                return Err(e);
            }
        };
        let probe = permit.is_probe();
        let deadline = if probe {
            self.inner.config.breaker.probe_deadline
        } else {
            deadline
        };
        let mut used = Used::default();
        let sent = async {
            match &self.inner.cluster {
                Some(cluster) => {
                    self.send_cluster(cluster, routes, frame, probe, &mut used)
                        .await
                }
                None => self.send(frame, n, probe, &mut used).await,
            }
        };
        let res = match tokio::time::timeout(deadline, sent).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout { deadline }),
        };
        if let Err(e) = &res {
            if e.is_timeout() || e.is_connection() || matches!(e, Error::Protocol(_)) {
                for (link, conn) in used.all() {
                    Self::discard(link, conn);
                }
                // The node may be gone for good (a failover, a newer
                // topology): the map is checked off the caller's path.
                if self.inner.cluster.is_some() {
                    self.reload_in_background(None);
                }
            }
        }
        // A demoted primary: the next call asks the sentinels again.
        if let (Some(_), Ok(replies), Some((link, conn))) =
            (&self.inner.sentinels, &res, &used.first)
        {
            if replies.iter().any(is_readonly) {
                Self::discard(link, conn);
            }
        }
        let failed = match &res {
            Err(e) => e.counts_against_ledger(),
            // A lone LOADING/BUSY/TRYAGAIN reply says the ledger cannot serve.
            Ok(replies) => {
                n == 1
                    && matches!(replies.first(), Some(Reply::Error(t)) if ServerError::parse(t).kind.is_unavailable())
            }
        };
        permit.record(!failed);
        res
    }

    async fn send(
        &self,
        frame: Bytes,
        n: usize,
        probe: bool,
        used: &mut Used,
    ) -> Result<Vec<Reply>, Error> {
        let conn = self.connection_to(&self.inner.link, None, probe).await?;
        used.push(self.inner.link.clone(), conn.clone());
        recv(conn.send(frame, n)?).await
    }

    /// Discards `conn` if it is still `link`'s connection.
    pub(crate) fn discard(link: &Link, conn: &Arc<Connection>) {
        conn.close();
        let mut cur = link.current.lock();
        if cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *cur = None;
        }
    }

    /// The live connection of `link`, opening one if it has none: to
    /// `node` when it is given (a cluster node's link, found by
    /// [`Cluster::link`]), else to the configured address or the primary
    /// the sentinels name (the client's own link).
    pub(crate) async fn connection_to(
        &self,
        link: &Link,
        node: Option<SocketAddr>,
        probe: bool,
    ) -> Result<Arc<Connection>, Error> {
        if let Some(c) = link.live() {
            return Ok(c);
        }
        let mut state = link.connecting.lock().await;
        if let Some(c) = link.live() {
            return Ok(c);
        }
        let now = self.inner.clock.now_us();
        // The breaker's probe must reach the server, backoff or not.
        if !probe && now < state.not_before_us {
            let retry_in = Duration::from_micros(state.not_before_us - now);
            return Err(Error::Connection(ConnectionError::Backoff { retry_in }));
        }
        let direct = match (&self.inner.config.address, node) {
            (_, Some(addr)) => Some(addr),
            (Address::Direct(addr), None) => Some(*addr),
            _ => None,
        };
        let opened = match (direct, &self.inner.sentinels) {
            (Some(addr), _) => match TcpStream::connect(addr).await {
                Ok(stream) => {
                    let conn = Arc::new(Connection::start(stream));
                    let (creds, limit) = (
                        &self.inner.config.credentials,
                        self.inner.config.call_deadline,
                    );
                    authenticate(conn, creds.as_ref(), limit).await
                }
                Err(e) => Err(Error::from(e)),
            },
            (None, Some(sentinels)) => {
                self.start_watcher(sentinels);
                let search = state
                    .search
                    .get_or_insert_with(|| tokio::spawn(sentinels.clone().discover(None)));
                // Cancelled here (the caller's deadline), the search stays
                // in `state` and the next caller awaits the same one.
                let found = search.await;
                state.search = None;
                found.unwrap_or(Err(Error::Connection(ConnectionError::Closed)))
            }
            (None, None) => return Err(Error::Connection(ConnectionError::NoClusterNode)),
        };
        match opened {
            Ok(conn) => {
                (state.delay, state.not_before_us) = (Duration::ZERO, 0);
                *link.current.lock() = Some(conn.clone());
                Ok(conn)
            }
            Err(e) => {
                let cfg = &self.inner.config;
                state.delay = (state.delay * 2).clamp(cfg.backoff_base, cfg.backoff_max);
                // "Equal jitter": half fixed, half random, so a fleet that lost
                // the server together does not reconnect in lockstep.
                let half = us(state.delay) / 2;
                state.not_before_us = now + half + fastrand::u64(0..=half);
                Err(e)
            }
        }
    }

    /// Starts the `+switch-master` watcher unless it runs.
    fn start_watcher(&self, sentinels: &Arc<Sentinels>) {
        let mut watcher = self.inner.watcher.lock();
        if watcher.is_some() {
            return;
        }
        // The watcher must not keep the client alive: it holds a weak
        // reference, and the client's drop aborts it.
        let client = Arc::downgrade(&self.inner);
        *watcher = Some(tokio::spawn(sentinels.clone().watch(move |addr| {
            let client: Weak<Inner> = client.clone();
            async move {
                let Some(inner) = client.upgrade() else {
                    return false;
                };
                Client { inner }.follow(addr).await;
                true
            }
        })));
    }

    /// Moves the connection to `primary`, announced by Sentinel (or named
    /// by it when the watcher subscribes), unless it is there already: the
    /// current connection is dropped at once and one to `primary` opened
    /// (checked with ROLE; the sentinels are asked if it fails). Once it
    /// is open, the backoff is forgotten and an open breaker may probe at
    /// once instead of waiting out its cool-down.
    async fn follow(&self, primary: SocketAddr) {
        let Some(sentinels) = &self.inner.sentinels else {
            return;
        };
        let link = &self.inner.link;
        let mut state = link.connecting.lock().await;
        if link.live().is_some() && sentinels.primary() == Some(primary) {
            return;
        }
        if let Some(stale) = state.search.take() {
            stale.abort();
        }
        if let Some(old) = link.current.lock().take() {
            old.close();
        }
        if let Ok(conn) = sentinels.clone().discover(Some(primary)).await {
            (state.delay, state.not_before_us) = (Duration::ZERO, 0);
            *link.current.lock() = Some(conn);
            self.inner.breaker.probe_now();
        }
    }
}

/// Awaits the replies of a request queued on a connection.
pub(crate) async fn recv(
    rx: tokio::sync::oneshot::Receiver<Result<Vec<Reply>, Error>>,
) -> Result<Vec<Reply>, Error> {
    rx.await
        .map_err(|_| Error::Connection(ConnectionError::Closed))?
}

/// One request on `conn` and its reply, within `limit`.
pub(crate) async fn roundtrip(
    conn: &Connection,
    args: &[&str],
    limit: Duration,
) -> Result<Reply, Error> {
    let mut frame = BytesMut::new();
    encode_request(args, &mut frame);
    let replies = tokio::time::timeout(limit, recv(conn.send(frame.freeze(), 1)?))
        .await
        .map_err(|_| Error::Timeout { deadline: limit })??;
    replies
        .into_iter()
        .next()
        .ok_or(Error::Connection(ConnectionError::Closed))
}

/// `conn`, once `AUTH` with `creds` (if any) answered `+OK` within
/// `limit`; closed otherwise.
///
/// # Errors
/// The server's refusal (`WRONGPASS`, `ERR AUTH <password> called without
/// any password configured ...`) as [`Error::Server`], or the transport's.
pub(crate) async fn authenticate(
    conn: Arc<Connection>,
    creds: Option<&Credentials>,
    limit: Duration,
) -> Result<Arc<Connection>, Error> {
    let Some(c) = creds else {
        return Ok(conn);
    };
    match roundtrip(&conn, &c.command(), limit)
        .await
        .and_then(auth_accepted)
    {
        Ok(()) => Ok(conn),
        Err(refused) => {
            conn.close();
            Err(refused)
        }
    }
}

impl Link {
    /// The connection, unless it broke (then it is forgotten).
    pub(crate) fn live(&self) -> Option<Arc<Connection>> {
        let mut cur = self.current.lock();
        match cur.as_ref() {
            Some(c) if !c.is_broken() => Some(c.clone()),
            Some(_) => {
                *cur = None;
                None
            }
            None => None,
        }
    }
}
