//! Leasehold server: a sharded, thread-per-core RESP server (DESIGN.md).
//!
//! # Layout
//! Files follow the request path; read them in this order to trace one `INCR`
//! from the socket to the shard:
//! - [`net`]: accept, spread connections over threads, each connection's
//!   read -> plan -> flush -> write loop.
//! - [`dispatch`]: command lookup, arity and auth checks, routing by hash slot,
//!   per-shard batching, merging of split replies.
//! - [`commands`]: the one command table, assembled from family files
//!   (`connection`, `server`, `keys`, `strings`); each handler parses with the
//!   argument cursor and calls a shard-local operation.
//! - [`shard`]: the thread that owns a shard, its mailbox and active expiry.
//! - [`store`]: the keyspace (a table per hash slot), values and expiry.
//! - [`effects`]: the replication stream every write appends to.
//! - [`slot`], [`clock`], [`config`], [`state`], [`error`]: keys to shards,
//!   the two clocks, configuration, shared state, error texts.
//!
//! # Threads
//! ```text
//!   thread 0: accept loop + event loop + shard 0      thread 1: event loop + shard 1
//!   conns ──read──> plan ──local──> shard 0          conns ──> plan ──> shard 1
//!                    └──batch per read──mailbox──────────────────────────> run, reply
//! ```

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, Notify};

pub mod clock;
pub mod commands;
pub mod config;
pub mod dispatch;
pub mod effects;
pub mod error;
pub mod net;
pub mod shard;
pub mod slot;
pub mod state;
pub mod store;

use crate::clock::Clock;
use crate::config::Config;
use crate::shard::{Shard, Worker};
use crate::state::{ServerCounters, ShardStats, Shared};
use crate::store::Store;

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
    let ncmd = commands::table().commands.len();
    // CONFIG GET port answers the port actually bound (port 0 picks one).
    let mut live = config.clone();
    live.net.port = local_addr.port();
    let shared = Arc::new(Shared {
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
    });
    let (senders, receivers): (Vec<_>, Vec<_>) =
        (0..threads).map(|_| mpsc::unbounded_channel()).unzip();
    let mailboxes = Arc::new(senders);
    let mut listener = Some(listener);
    let mut handles = Vec::new();
    for (id, rx) in receivers.into_iter().enumerate() {
        let shared = shared.clone();
        let mailboxes = mailboxes.clone();
        let listener = if id == 0 { listener.take() } else { None };
        let backlog = config.replication.backlog_bytes;
        let handle = std::thread::Builder::new()
            .name(format!("leasehold-shard-{id}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("build the thread's event loop");
                let first = slot::shard_first_slot(id, threads);
                let slots = slot::shard_first_slot(id + 1, threads) - first;
                let store = Store::new(first, slots, backlog);
                let shard = Shard::new(id, store, shared.clone());
                let worker = Rc::new(Worker {
                    id,
                    shard: shard.into(),
                    mailboxes,
                    shared,
                });
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, async move {
                    let listener = listener
                        .map(|l| tokio::net::TcpListener::from_std(l).expect("register listener"));
                    shard::run_worker(worker, rx, listener).await;
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
