//! The runtime: threads and the wiring between them. The top of the
//! server's layers: it builds the shared state, and per thread one
//! [`Shard`], one mailbox (a channel plus the doorbell that wakes the
//! thread's poll) and one `net` event loop, whose timer runs the shard's
//! active expiry; thread 0's loop also accepts connections.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use crate::clock::Clock;
use crate::cluster::{ClusterState, Identity, Topology};
use crate::config::Config;
use crate::persist::daemon::Daemon;
use crate::persist::load::load_at_start;
use crate::persist::status::{Request, Ticket};
use crate::ratelimit::pin;
use crate::replication::role::{random_hex40, Replication, Target};
use crate::shard::{Mailbox, Msg, Shard, Worker};
use crate::state::{Doorbell, ServerCounters, ShardStats, Shared, ShutdownRequest, ShutdownSave};
use crate::store::Store;
use crate::{commands, net, replication, slot};

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Its shared state (statistics, configuration, shutdown).
    pub shared: Arc<Shared>,
    /// Where `/metrics` is served (`metrics-port`), if anywhere.
    pub metrics_addr: Option<SocketAddr>,
    threads: Vec<std::thread::JoinHandle<()>>,
    files: Option<Daemon>,
}

impl ServerHandle {
    /// Stops the server and waits for its threads.
    pub fn shutdown(self) {
        self.shared.begin_shutdown();
        self.join();
    }

    /// Asks for a shutdown as SIGTERM and SIGINT do: every command already
    /// read runs and its reply is written (at most [`SHUTDOWN_DRAIN`]), a
    /// snapshot is written when `save` rules are set, then the server
    /// stops. A failed snapshot calls it off (logged) and the server serves
    /// on, as Redis does. Returns at once; [`ServerHandle::join`] waits.
    pub fn request_shutdown(&self) {
        let request = ShutdownRequest {
            save: ShutdownSave::Rules,
            force: false,
            ticket: None,
        };
        // One already waiting (a SHUTDOWN) does the same or more.
        let _ = self.shared.shutdown.post(request);
    }

    /// Waits until the server stops (SHUTDOWN or [`ServerHandle::shutdown`]);
    /// the append-only log is written to its end and fsynced last.
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
        if let Some(d) = self.files {
            d.finish(&self.shared);
        }
    }
}

/// Binds the listener, starts `config.threads()` threads and loads the
/// snapshot or append-only log (clients get `-LOADING` meanwhile).
///
/// # Errors
/// The bind error (address in use, permission denied, ...), the event
/// loop's poll could not be made, or the files could not be loaded
/// ([`std::io::ErrorKind::InvalidData`], the message says why).
pub fn start(mut config: Config, clock: Arc<dyn Clock>) -> std::io::Result<ServerHandle> {
    check_pins(&config)?;
    // A bad ACL file refuses the start, naming its line.
    let users = commands::acl::load_file_at_start(&config)?;
    let threads = config.threads().max(1);
    config.net.maxclients = fit_open_files(config.net.maxclients);
    let listeners = listeners(&config)?;
    let local_addr = match (&listeners.plain, &listeners.tls) {
        (Some(l), _) | (None, Some((l, _))) => l.local_addr()?,
        (None, None) => unreachable!("listeners() binds at least one port"),
    };
    warn_if_exposed(&config, &local_addr);
    let (polls, bells) = polls(threads)?;
    // A topology file that cannot be read or parsed refuses the start.
    cluster_state(&config, local_addr)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let shared = new_shared(&config, clock, local_addr, bells);
    if listeners.plain.is_none() {
        // TLS only: CONFIG GET port answers 0, as Redis's.
        shared.config.write().net.port = 0;
    }
    if let Some(users) = users {
        *shared.acl.write() = users;
    }
    let (mailboxes, receivers) = mailboxes(&shared);
    let metrics_addr = match config.net.metrics_port {
        0 => None,
        port => Some(crate::metrics::spawn(
            shared.clone(),
            SocketAddr::new(local_addr.ip(), port),
        )?),
    };
    // Clients that connect get -LOADING until the data is loaded and the
    // append-only log runs (set before the listener's thread starts).
    shared.repl.set_loading(true);
    let mut listeners = Some(listeners);
    let mut handles = Vec::new();
    for ((id, rx), poll) in receivers.into_iter().enumerate().zip(polls) {
        let shared = shared.clone();
        let mailboxes = mailboxes.clone();
        let listeners = match id {
            0 => listeners.take().unwrap_or_default(),
            _ => net::Listeners::default(),
        };
        let handle = std::thread::Builder::new()
            .name(format!("leasehold-shard-{id}"))
            .spawn(move || {
                let worker = new_worker(id, shared.clone(), mailboxes, Some(rx.clone()));
                let mut timer = expiry_timer();
                if let Err(e) = net::run(worker, poll, rx, listeners, &mut timer) {
                    tracing::error!("thread {id}'s event loop failed: {e}; shutting down");
                    shared.begin_shutdown();
                }
            })?;
        handles.push(handle);
    }
    let started = load_at_start(&shared, &mailboxes).and_then(|loaded| {
        Daemon::spawn(shared.clone(), mailboxes.clone(), loaded).map_err(|e| e.to_string())
    });
    shared.repl.set_loading(false);
    let files = match started {
        Ok(files) => files,
        Err(e) => {
            shared.begin_shutdown();
            for h in handles {
                let _ = h.join();
            }
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e));
        }
    };
    if let Some(target) = replicaof(&config)? {
        shared.repl.follow(target);
    }
    // Not joined at shutdown: it may sit in a handshake step (at most a few
    // seconds) and stops by itself once it sees the shutdown.
    drop(replication::link::spawn(shared.clone(), mailboxes.clone())?);
    // Not joined either: it waits for requests a tenth of a second at a
    // time and ends once the server stops.
    drop(spawn_shutdown_thread(shared.clone())?);
    if let Some(c) = &shared.cluster {
        if let Some(path) = c.file.clone() {
            let watcher = shared.clone();
            let stop = Box::new(move || watcher.shutting_down.load(Ordering::SeqCst));
            // Not joined either: it sleeps at most a second between looks.
            drop(crate::cluster::spawn_watch(c.clone(), path, stop)?);
        }
        // At start, in line (at most half a second per unreachable
        // sentinel): the primaries as Sentinel has them now, so a restarted
        // former primary knows it was replaced before the server is ready.
        crate::cluster::ask_sentinels_once(c);
        let watcher = shared.clone();
        let stop = std::sync::Arc::new(move || watcher.shutting_down.load(Ordering::SeqCst));
        // Not joined either: its threads wait at most half a second at a
        // time and end once the server stops.
        drop(crate::cluster::spawn_sentinel_watch(c.clone(), stop)?);
    }
    match config.tls.port {
        0 => tracing::info!(%local_addr, threads, "Leasehold ready to accept connections"),
        tls_port => tracing::info!(
            %local_addr,
            tls_port,
            threads,
            "Leasehold ready to accept connections"
        ),
    }
    Ok(ServerHandle {
        addr: local_addr,
        shared,
        threads: handles,
        files: Some(files),
        metrics_addr,
    })
}

/// How long a shutdown waits for the commands already read to run and
/// their replies to be written before it goes on regardless.
pub const SHUTDOWN_DRAIN: Duration = Duration::from_secs(5);

/// Starts the thread that carries out shutdown requests (SHUTDOWN, the
/// signals through [`ServerHandle::request_shutdown`]): drain, save as
/// asked, stop, or call it off when the snapshot fails.
fn spawn_shutdown_thread(shared: Arc<Shared>) -> std::io::Result<std::thread::JoinHandle<()>> {
    shared.shutdown.staff();
    std::thread::Builder::new()
        .name("leasehold-shutdown".into())
        .spawn(move || {
            while !shared
                .shutting_down
                .load(std::sync::atomic::Ordering::SeqCst)
            {
                if let Some(request) = shared.shutdown.next(Duration::from_millis(100)) {
                    carry_out_shutdown(&shared, request);
                }
            }
        })
}

/// One shutdown request: input stops and what was read drains, then the
/// snapshot (when asked), then the stop, or, when the snapshot failed
/// without FORCE, input resumes and the requester hears why.
fn carry_out_shutdown(shared: &Shared, request: ShutdownRequest) {
    if request.save == ShutdownSave::Never {
        // As Redis: SHUTDOWN NOSAVE is the way out of a busy script that
        // wrote (UNKILLABLE); it stops at its next check and writes no more.
        shared.scripts.stop_all();
    }
    drain(shared, SHUTDOWN_DRAIN);
    let rules = !shared.config.read().persistence.save.trim().is_empty();
    let save = match request.save {
        ShutdownSave::Always => true,
        ShutdownSave::Never => false,
        ShutdownSave::Rules => rules,
    };
    let outcome = match save {
        true => save_now(shared),
        false => Ok(()),
    };
    match outcome {
        Err(e) if !request.force => {
            tracing::error!("Error trying to save the DB ({e}), can't exit.");
            shared.stop_input(false);
            if let Some(t) = request.ticket {
                t.finish(Err(e));
            }
        }
        outcome => {
            if let Err(e) = outcome {
                tracing::warn!("Error trying to save the DB ({e}); exiting anyway (FORCE)");
            }
            if let Some(t) = request.ticket {
                t.finish(Ok(()));
            }
            shared.begin_shutdown();
        }
    }
}

/// Stops accepting and reading requests and waits, at most `limit`, until
/// every command already read has run and its reply is written. Returns
/// whether that happened within `limit`.
fn drain(shared: &Shared, limit: Duration) -> bool {
    shared.stop_input(true);
    let start = Instant::now();
    // Twice in a row, a millisecond apart: a reply crossing between
    // threads at the first look is seen at the second.
    let mut seen = 0;
    while start.elapsed() < limit {
        seen = if shared.drained() { seen + 1 } else { 0 };
        if seen >= 2 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    tracing::warn!("shutdown: replies still owed after {limit:?}; going on");
    false
}

/// Writes a snapshot now and waits for it.
///
/// # Errors
/// Why the snapshot failed.
fn save_now(shared: &Shared) -> Result<(), String> {
    let ticket = Arc::new(Ticket::default());
    shared.persist.request(Request::Save(Some(ticket.clone())));
    loop {
        if let Some(outcome) = ticket.outcome() {
            return outcome;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The primary `replicaof` names (`"<host> <port>"`), if any.
///
/// # Errors
/// The setting is not a host and a port.
fn replicaof(config: &Config) -> std::io::Result<Option<Target>> {
    let text = config.replication.replicaof.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let bad = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("replicaof must be \"<host> <port>\", not {text:?}"),
        )
    };
    let (host, port) = text.split_once(char::is_whitespace).ok_or_else(bad)?;
    let port = port.trim().parse().map_err(|_| bad())?;
    Ok(Some(Target {
        host: host.to_string(),
        port,
    }))
}

/// One poll per thread (each thread's event loop waits on its own) and the
/// doorbell that wakes it, whose waker has the token [`net::WAKE`].
///
/// # Errors
/// The system refused an epoll or eventfd descriptor.
pub fn polls(threads: usize) -> std::io::Result<(Vec<mio::Poll>, Vec<Arc<Doorbell>>)> {
    let mut polls = Vec::new();
    let mut bells = Vec::new();
    for _ in 0..threads {
        let poll = mio::Poll::new()?;
        let waker = mio::Waker::new(poll.registry(), net::WAKE)?;
        bells.push(Arc::new(Doorbell::new(waker)));
        polls.push(poll);
    }
    Ok((polls, bells))
}

/// One mailbox per thread of `shared`: the senders every thread holds, and
/// each thread's receiver.
pub fn mailboxes(shared: &Shared) -> (Arc<Vec<Mailbox>>, Vec<crossbeam_channel::Receiver<Msg>>) {
    let (senders, receivers): (Vec<_>, Vec<_>) = shared
        .doorbells
        .iter()
        .map(|bell| {
            let (tx, rx) = crossbeam_channel::unbounded();
            (Mailbox::new(tx, bell.clone()), rx)
        })
        .unzip();
    (Arc::new(senders), receivers)
}

/// The server-wide state of a server listening on `local_addr` with one
/// thread (= shard) per doorbell: `config` as the live configuration (its
/// port replaced by the one bound), zeroed statistics, no clients. Public
/// so that tests can build a shard by hand around it.
pub fn new_shared(
    config: &Config,
    clock: Arc<dyn Clock>,
    local_addr: SocketAddr,
    doorbells: Vec<Arc<Doorbell>>,
) -> Arc<Shared> {
    let threads = doorbells.len();
    let ncmd = commands::table().commands.len();
    // CONFIG GET port answers the port actually bound (port 0 picks one).
    let mut live = config.clone();
    live.net.port = local_addr.port();
    // CONFIG GET dir answers an absolute path, as Redis's (which chdirs).
    if let Ok(dir) = std::path::absolute(&live.persistence.dir) {
        live.persistence.dir = dir.display().to_string();
    }
    Arc::new(Shared {
        config: RwLock::new(live),
        config_gen: AtomicU64::new(1),
        clock,
        shards: threads,
        shard_stats: (0..threads)
            .map(|_| Arc::new(ShardStats::new(ncmd)))
            .collect(),
        clients: Mutex::new(hashbrown::HashMap::new()),
        next_client_id: AtomicU64::new(1),
        counters: ServerCounters::default(),
        shutting_down: AtomicBool::new(false),
        input_stopped: AtomicBool::new(false),
        over_maxmemory: AtomicBool::new(false),
        split_gate: Arc::new(crate::state::SplitGate::new(threads)),
        quiet: (0..threads).map(|_| AtomicBool::new(false)).collect(),
        doorbells,
        started: Instant::now(),
        local_addr,
        run_id: random_hex40(),
        baseline: Mutex::new(Default::default()),
        repl: Arc::new(Replication::new(config.replication.backlog_bytes)),
        pubsub: Default::default(),
        persist: Default::default(),
        monitors: Default::default(),
        parcels: (0..threads).map(|_| Default::default()).collect(),
        scripts: crate::script::cache::ScriptCache::new(threads),
        shutdown: Default::default(),
        cluster: cluster_state(config, local_addr).unwrap_or_else(|e| {
            tracing::error!("{e}; cluster mode starts with no topology");
            Some(Arc::new(ClusterState::new(
                Topology::empty(),
                identity(config, local_addr),
                None,
            )))
        }),
        acl: RwLock::new(commands::acl::initial_users(config)),
        hot: Default::default(),
    })
}

/// How this node finds itself in the topology: `cluster-node-id`, else
/// `cluster-announce-ip` (or the bound address) and `cluster-announce-port`
/// (or the bound port).
fn identity(config: &Config, local_addr: SocketAddr) -> Identity {
    let c = &config.cluster;
    let host = match c.announce_ip.trim() {
        "" => local_addr.ip().to_string(),
        ip => ip.to_string(),
    };
    Identity {
        node_id: Some(c.node_id.trim().to_ascii_lowercase()).filter(|id| !id.is_empty()),
        host,
        port: match c.announce_port {
            0 => local_addr.port(),
            p => p,
        },
    }
}

/// Cluster mode's state when `cluster-enabled` is on: the topology file's
/// (`cluster-config-file`) when one is named, else the empty topology.
///
/// # Errors
/// The file cannot be read or is not a topology; a `cluster-node-id` that
/// is not 40 hex characters.
pub fn cluster_state(
    config: &Config,
    local_addr: SocketAddr,
) -> Result<Option<Arc<ClusterState>>, String> {
    let c = &config.cluster;
    if !c.enabled {
        return Ok(None);
    }
    let me = identity(config, local_addr);
    if let Some(id) = &me.node_id {
        if !crate::cluster::is_node_id(id) {
            return Err(format!(
                "invalid cluster-node-id {id:?}: must be 40 hex characters"
            ));
        }
    }
    let file = Some(c.config_file.trim())
        .filter(|f| !f.is_empty())
        .map(|f| std::path::absolute(f).unwrap_or_else(|_| f.into()));
    let topo = match &file {
        None => Topology::empty(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the cluster topology {}: {e}", path.display()))?;
            Topology::parse(&text)
                .map_err(|e| format!("cluster topology {}: {e}", path.display()))?
        }
    };
    let mut sentinels = Vec::new();
    for a in &c.sentinels {
        let hp = crate::cluster::host_port(a)
            .ok_or_else(|| format!("invalid cluster-sentinels entry {a:?}: must be host:port"))?;
        sentinels.push(hp);
    }
    let state = ClusterState::new(topo, me, file).with_sentinels(sentinels);
    if state.load().me.is_none() && state.load().topo.version > 0 {
        tracing::warn!(
            "this node ({local_addr}) is not in the cluster topology: every keyed command is redirected"
        );
    }
    Ok(Some(Arc::new(state)))
}

/// Thread `id`'s worker: its shard with an empty keyspace over the slots
/// that shard owns, and every thread's mailbox.
/// Refuses a `rate-limit-pins` whose words do not make pins.
///
/// # Errors
/// `InvalidInput`, naming the pin and what is wrong with it.
pub fn check_pins(config: &Config) -> std::io::Result<()> {
    pin::parse_list(&config.ratelimit.pins)
        .map(drop)
        .map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("invalid rate-limit-pins: {}", e.0),
            )
        })
}

pub fn new_worker(
    id: usize,
    shared: Arc<Shared>,
    mailboxes: Arc<Vec<Mailbox>>,
    inbox: Option<crossbeam_channel::Receiver<Msg>>,
) -> Rc<Worker> {
    let threads = shared.shards;
    let first = slot::shard_first_slot(id, threads);
    let slots = slot::shard_first_slot(id + 1, threads) - first;
    let (backlog, pins) = {
        let c = shared.config.read();
        (c.replication.backlog_bytes, c.ratelimit.pins.clone())
    };
    let mut store = Store::new(first, slots, backlog);
    // Checked by `start` (and the harness) before any thread runs.
    store.configure_pins(pin::parse_list(&pins).unwrap_or_default());
    let shard = Shard::new(id, store, shared.clone());
    Rc::new(Worker {
        id,
        shard: shard.into(),
        mailboxes,
        shared,
        monitor_feed: Default::default(),
        inbox,
        stash: Default::default(),
        draining: Default::default(),
    })
}

/// File descriptors kept for what is not a client (listener, polls, wakers,
/// persistence and replication files and sockets), as Redis reserves 32.
pub const RESERVED_FDS: usize = 32;

/// Raises the soft limit on open files to fit `maxclients` clients plus
/// [`RESERVED_FDS`] (up to the hard limit); when it cannot, returns the
/// `maxclients` that fits, with a warning, as Redis lowers it. Otherwise
/// clients past the limit would hang in the accept queue instead of
/// getting `-ERR max number of clients reached`.
pub fn fit_open_files(maxclients: usize) -> usize {
    let want: libc::rlim_t = maxclients.saturating_add(RESERVED_FDS) as libc::rlim_t;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return maxclients;
    }
    if lim.rlim_cur >= want {
        return maxclients;
    }
    let raised = libc::rlimit {
        rlim_cur: want.min(lim.rlim_max),
        rlim_max: lim.rlim_max,
    };
    // SAFETY: setrlimit reads one rlimit through a valid pointer.
    let now = match unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } {
        0 => raised.rlim_cur,
        _ => lim.rlim_cur,
    };
    if now >= want {
        return maxclients;
    }
    let fits = (now as usize).saturating_sub(RESERVED_FDS).max(1);
    tracing::warn!(
        "maxclients {maxclients} needs {want} open files; the limit is {now} (ulimit -n): maxclients is lowered to {fits}"
    );
    fits
}

/// Says at start when anyone who can reach the port may use the server,
/// or when protected mode will refuse them.
fn warn_if_exposed(config: &Config, addr: &SocketAddr) {
    if addr.ip().is_loopback() || !config.security.requirepass.is_empty() {
        return;
    }
    if config.security.protected_mode {
        tracing::warn!(
            "listening on {addr} with no password: protected mode is on, so only clients on the loopback interface are served (set requirepass, or protected-mode no behind a firewall)"
        );
    } else {
        tracing::warn!(
            "listening on {addr} with no password and protected mode off: anyone who can reach this port can read and change every key"
        );
    }
}

/// The plain listener on `port` and, with a `tls-port`, the TLS listener
/// and its configuration; with `port 0` and a `tls-port`, only TLS (as
/// Redis). A TLS replica (`tls-replication yes`) needs the client side of
/// the same files, checked here too.
///
/// # Errors
/// [`std::io::ErrorKind::InvalidInput`] for a TLS setting or file at fault
/// (the message names it); the bind error otherwise.
fn listeners(config: &Config) -> std::io::Result<net::Listeners> {
    let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
    let t = &config.tls;
    if t.replication {
        crate::tls::client_config(t).map_err(invalid)?;
    }
    let tls = match t.port {
        0 => None,
        port => {
            let tls = crate::tls::server_config(t).map_err(invalid)?;
            let l = bind(config, port).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "cannot listen on {}:{port} (tls-port): {e}",
                        config.net.bind
                    ),
                )
            })?;
            Some((l, tls))
        }
    };
    let plain = match (config.net.port, &tls) {
        (0, Some(_)) => None,
        (port, _) => Some(bind(config, port)?),
    };
    Ok(net::Listeners { plain, tls })
}

fn bind(config: &Config, port: u16) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let addr: SocketAddr = format!("{}:{}", config.net.bind, port)
        .parse()
        .or_else(|_| format!("[{}]:{}", config.net.bind, port).parse())
        .map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("bad --bind {}: {e}", config.net.bind),
            )
        })?;
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(config.net.tcp_backlog)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// The thread's timer: one [`Shard::expiry_cycle`] `hz` times a second,
/// each within `expiry-budget-percent` of its period. A CONFIG SET of
/// either takes effect at the next cycle.
fn expiry_timer() -> impl FnMut(&Worker, Instant) -> Instant {
    move |worker: &Worker, now: Instant| {
        let (hz, pct, maxmemory) = {
            let c = worker.shared.config.read();
            (
                c.expiry.hz.clamp(1, 500),
                c.expiry.budget_percent.clamp(1, 100),
                c.limits.maxmemory,
            )
        };
        if worker.id == 0 {
            let over = maxmemory > 0 && commands::info::used_memory() > maxmemory as u64;
            let was = worker.shared.over_maxmemory.swap(over, Ordering::Relaxed);
            if over && !was {
                tracing::warn!("used memory is past maxmemory ({maxmemory} bytes): commands that may allocate are refused (-OOM)");
            }
        }
        let period = Duration::from_millis(1000 / u64::from(hz));
        worker.shard.borrow_mut().expiry_cycle(period * pct / 100);
        now + period
    }
}
