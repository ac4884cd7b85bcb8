//! The runtime: threads, their event loops and the wiring between them. The
//! top of the server's layers: it builds the shared state, one [`Shard`] and
//! one event loop per thread, starts `net`'s accept loop on thread 0, and
//! hands each connection arriving in a thread's mailbox to `net`.
//!
//! Each thread runs one single-threaded tokio runtime (its event loop) with
//! a `LocalSet`: its connections' tasks, its mailbox loop (batches from other
//! threads, connections handed over by the accept loop), and its active
//! expiry timer. Thread 0 also runs the accept loop.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, Notify};

use crate::clock::Clock;
use crate::config::Config;
use crate::shard::{Msg, Shard, Worker};
use crate::state::{ServerCounters, ShardStats, Shared};
use crate::store::Store;
use crate::{commands, net, slot};

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Its shared state (statistics, configuration, shutdown).
    pub shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl ServerHandle {
    /// Stops the server and waits for its threads.
    pub fn shutdown(self) {
        self.shared.begin_shutdown();
        self.join();
    }

    /// Waits until the server stops (SHUTDOWN or [`ServerHandle::shutdown`]).
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Binds the listener and starts `config.threads()` threads.
///
/// # Errors
/// The bind error (address in use, permission denied, ...).
pub fn start(config: Config, clock: Arc<dyn Clock>) -> std::io::Result<ServerHandle> {
    let threads = config.threads().max(1);
    let listener = bind(&config)?;
    let local_addr = listener.local_addr()?;
    let shared = new_shared(&config, clock, threads, local_addr);
    let (senders, receivers): (Vec<_>, Vec<_>) =
        (0..threads).map(|_| mpsc::unbounded_channel()).unzip();
    let mailboxes = Arc::new(senders);
    let mut listener = Some(listener);
    let mut handles = Vec::new();
    for (id, rx) in receivers.into_iter().enumerate() {
        let shared = shared.clone();
        let mailboxes = mailboxes.clone();
        let listener = if id == 0 { listener.take() } else { None };
        let handle = std::thread::Builder::new()
            .name(format!("leasehold-shard-{id}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("build the thread's event loop");
                let worker = new_worker(id, shared, mailboxes);
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, async move {
                    let listener = listener
                        .map(|l| tokio::net::TcpListener::from_std(l).expect("register listener"));
                    run_worker(worker, rx, listener).await;
                });
            })?;
        handles.push(handle);
    }
    tracing::info!(%local_addr, threads, "Leasehold ready to accept connections");
    Ok(ServerHandle {
        addr: local_addr,
        shared,
        threads: handles,
    })
}

/// The server-wide state of a server with `threads` shards listening on
/// `local_addr`: `config` as the live configuration (its port replaced by the
/// one bound), zeroed statistics, no clients. Public so that tests can build
/// a shard by hand around it.
pub fn new_shared(
    config: &Config,
    clock: Arc<dyn Clock>,
    threads: usize,
    local_addr: SocketAddr,
) -> Arc<Shared> {
    let ncmd = commands::table().commands.len();
    // CONFIG GET port answers the port actually bound (port 0 picks one).
    let mut live = config.clone();
    live.net.port = local_addr.port();
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
        shutdown: Notify::new(),
        started: Instant::now(),
        local_addr,
        run_id: run_id(),
        baseline: Mutex::new(Default::default()),
    })
}

/// Thread `id`'s worker: its shard with an empty keyspace over the slots
/// that shard owns, and a sender to every thread's mailbox.
pub(crate) fn new_worker(
    id: usize,
    shared: Arc<Shared>,
    mailboxes: Arc<Vec<mpsc::UnboundedSender<Msg>>>,
) -> Rc<Worker> {
    let threads = shared.shards;
    let first = slot::shard_first_slot(id, threads);
    let slots = slot::shard_first_slot(id + 1, threads) - first;
    let backlog = shared.config.read().replication.backlog_bytes;
    let store = Store::new(first, slots, backlog);
    let shard = Shard::new(id, store, shared.clone());
    Rc::new(Worker {
        id,
        shard: shard.into(),
        mailboxes,
        shared,
    })
}

fn bind(config: &Config) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let addr: SocketAddr = format!("{}:{}", config.net.bind, config.net.port)
        .parse()
        .or_else(|_| format!("[{}]:{}", config.net.bind, config.net.port).parse())
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

fn run_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::new();
    while out.len() < 40 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(Instant::now().elapsed().as_nanos());
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out.truncate(40);
    out
}

/// The body of one thread: serve connections and the mailbox until shutdown.
async fn run_worker(
    worker: Rc<Worker>,
    mailbox: mpsc::UnboundedReceiver<Msg>,
    listener: Option<tokio::net::TcpListener>,
) {
    if let Some(listener) = listener {
        tokio::task::spawn_local(net::accept_loop(worker.clone(), listener));
    }
    tokio::task::spawn_local(expiry_loop(worker.clone()));
    serve_mailbox(worker, mailbox).await;
}

/// Serves a thread's mailbox until shutdown: runs each [`Msg::Batch`] on the
/// thread's shard and sends its replies back, and hands each [`Msg::Conn`]
/// to `net`.
pub(crate) async fn serve_mailbox(worker: Rc<Worker>, mut mailbox: mpsc::UnboundedReceiver<Msg>) {
    let shutdown = worker.shared.shutdown.notified();
    tokio::pin!(shutdown);
    loop {
        if worker.shared.shutting_down.load(Ordering::SeqCst) {
            break;
        }
        tokio::select! {
            _ = &mut shutdown => break,
            msg = mailbox.recv() => match msg {
                None => break,
                Some(Msg::Conn(stream)) => net::spawn_connection(worker.clone(), stream),
                Some(Msg::Batch(jobs, reply_to)) => {
                    let replies = worker.shard.borrow_mut().run_batch(jobs);
                    let _ = reply_to.send(replies);
                }
            },
        }
    }
}

/// Runs [`Shard::expiry_cycle`] `hz` times a second; a CONFIG SET of `hz`
/// (seen through the configuration generation) takes effect at the next cycle.
async fn expiry_loop(worker: Rc<Worker>) {
    loop {
        let gen = worker.shared.config_gen.load(Ordering::Acquire);
        let (hz, pct) = {
            let c = worker.shared.config.read();
            (
                c.expiry.hz.clamp(1, 500),
                c.expiry.budget_percent.clamp(1, 100),
            )
        };
        let period = Duration::from_millis(1000 / u64::from(hz));
        let budget = period * pct / 100;
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while worker.shared.config_gen.load(Ordering::Acquire) == gen {
            tick.tick().await;
            worker.shard.borrow_mut().expiry_cycle(budget);
        }
    }
}
