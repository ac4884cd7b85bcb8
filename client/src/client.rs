//! The client: one shared pipelined connection, a deadline per call,
//! reconnection with backoff and jitter, and the circuit breaker.
//!
//! Every call goes: breaker admits -> take (or open) the connection ->
//! queue the request -> await the reply under the deadline. A call that
//! misses its deadline discards the connection it used, so the next caller
//! always starts on a fresh one and a late reply never reaches it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{encode_request, Reply};
use parking_lot::Mutex;
use tokio::net::TcpStream;

use crate::breaker::{Breaker, BreakerConfig, BreakerState};
use crate::clock::{us, Clock, SystemClock};
use crate::conn::Connection;
use crate::error::{ConnectionError, Error, ServerError};

/// Default deadline of lease calls (TOKENLEASE, TOKENRETURN): 5 ms. A
/// decision with no local tokens waits at most this plus 1 ms.
pub const DEFAULT_LEASE_DEADLINE: Duration = Duration::from_millis(5);
/// Default deadline of every other call: 100 ms.
pub const DEFAULT_CALL_DEADLINE: Duration = Duration::from_millis(100);

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The server's address.
    pub addr: SocketAddr,
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
}

impl ClientConfig {
    /// Defaults for `addr`.
    pub fn new(addr: SocketAddr) -> ClientConfig {
        ClientConfig {
            addr,
            lease_deadline: DEFAULT_LEASE_DEADLINE,
            call_deadline: DEFAULT_CALL_DEADLINE,
            backoff_base: Duration::from_millis(10),
            backoff_max: Duration::from_secs(1),
            breaker: BreakerConfig::default(),
        }
    }
}

/// A cheap-to-clone handle; all clones share one connection and one breaker.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("addr", &self.inner.config.addr)
            .finish()
    }
}

struct Inner {
    config: ClientConfig,
    clock: Arc<dyn Clock>,
    breaker: Breaker,
    current: Mutex<Option<Arc<Connection>>>,
    /// Serializes connect attempts so a reconnect storm is one connect.
    connecting: tokio::sync::Mutex<Backoff>,
}

#[derive(Debug, Default)]
struct Backoff {
    /// Delay before the next attempt after the last failure (zero: none failed).
    delay: Duration,
    /// No attempt before this instant (clock microseconds).
    not_before_us: u64,
}

impl Client {
    /// A client for `config.addr`; connects lazily on the first call.
    pub fn new(config: ClientConfig) -> Client {
        Client::with_clock(config, Arc::new(SystemClock::new()))
    }

    /// Like [`Client::new`] with an injected clock for the breaker and backoff.
    pub fn with_clock(config: ClientConfig, clock: Arc<dyn Clock>) -> Client {
        let breaker = Breaker::new(config.breaker.clone(), clock.clone());
        Client {
            inner: Arc::new(Inner {
                config,
                clock,
                breaker,
                current: Mutex::new(None),
                connecting: tokio::sync::Mutex::new(Backoff::default()),
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The breaker's state.
    pub fn breaker_state(&self) -> BreakerState {
        self.inner.breaker.state()
    }

    /// Whether a call now would be refused by the breaker without I/O.
    pub fn breaker_would_refuse(&self) -> bool {
        self.inner.breaker.would_refuse()
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
    pub async fn connect(&self) -> Result<(), Error> {
        let deadline = self.inner.config.call_deadline;
        match tokio::time::timeout(deadline, self.connection(false)).await {
            Ok(conn) => conn.map(drop),
            Err(_) => Err(Error::Timeout { deadline }),
        }
    }

    /// Sends one command (`args[0]` is its name) under `deadline`.
    ///
    /// # Errors
    /// [`Error::Server`] for an error reply, and every transport error.
    pub async fn call<A: AsRef<[u8]>>(
        &self,
        args: &[A],
        deadline: Duration,
    ) -> Result<Reply, Error> {
        let mut frame = BytesMut::new();
        encode_request(args, &mut frame);
        let reply = self.exec(frame.freeze(), 1, deadline).await?.pop();
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
    /// # Errors
    /// Transport errors only; they fail the whole pipeline.
    pub async fn pipeline(
        &self,
        commands: &[Vec<Bytes>],
        deadline: Duration,
    ) -> Result<Vec<Reply>, Error> {
        let mut frame = BytesMut::new();
        for c in commands {
            encode_request(c, &mut frame);
        }
        self.exec(frame.freeze(), commands.len(), deadline).await
    }

    async fn exec(&self, frame: Bytes, n: usize, deadline: Duration) -> Result<Vec<Reply>, Error> {
        let permit = self.inner.breaker.admit()?;
        let probe = permit.is_probe();
        let deadline = if probe {
            self.inner.config.breaker.probe_deadline
        } else {
            deadline
        };
        let mut used = None;
        let res = match tokio::time::timeout(deadline, self.send(frame, n, probe, &mut used)).await
        {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout { deadline }),
        };
        if let (Err(e), Some(conn)) = (&res, &used) {
            if e.is_timeout() || e.is_connection() || matches!(e, Error::Protocol(_)) {
                self.discard(conn);
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
        used: &mut Option<Arc<Connection>>,
    ) -> Result<Vec<Reply>, Error> {
        let conn = self.connection(probe).await?;
        *used = Some(conn.clone());
        let rx = conn.send(frame, n)?;
        rx.await
            .map_err(|_| Error::Connection(ConnectionError::Closed))?
    }

    /// Discards `conn` if it is still the current connection.
    fn discard(&self, conn: &Arc<Connection>) {
        conn.close();
        let mut cur = self.inner.current.lock();
        if cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *cur = None;
        }
    }

    async fn connection(&self, probe: bool) -> Result<Arc<Connection>, Error> {
        if let Some(c) = self.live() {
            return Ok(c);
        }
        let mut backoff = self.inner.connecting.lock().await;
        if let Some(c) = self.live() {
            return Ok(c);
        }
        let now = self.inner.clock.now_us();
        // The breaker's probe must reach the server, backoff or not.
        if !probe && now < backoff.not_before_us {
            let retry_in = Duration::from_micros(backoff.not_before_us - now);
            return Err(Error::Connection(ConnectionError::Backoff { retry_in }));
        }
        match TcpStream::connect(self.inner.config.addr).await {
            Ok(stream) => {
                *backoff = Backoff::default();
                let conn = Arc::new(Connection::start(stream));
                *self.inner.current.lock() = Some(conn.clone());
                Ok(conn)
            }
            Err(e) => {
                let cfg = &self.inner.config;
                backoff.delay = (backoff.delay * 2).clamp(cfg.backoff_base, cfg.backoff_max);
                // "Equal jitter": half fixed, half random, so a fleet that lost
                // the server together does not reconnect in lockstep.
                let half = us(backoff.delay) / 2;
                backoff.not_before_us = now + half + fastrand::u64(0..=half);
                Err(e.into())
            }
        }
    }

    fn live(&self) -> Option<Arc<Connection>> {
        let mut cur = self.inner.current.lock();
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
