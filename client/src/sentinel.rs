//! Sentinel addressing: the primary found through Redis Sentinel, followed
//! when Sentinel announces a failover, and found again after a failure.
//!
//! ```text
//!  connect ──> ask sentinels in turn: SENTINEL get-master-addr-by-name <name>
//!                (the one that answers moves to the front of the list)
//!          ──> connect to the address named ──> ROLE
//!                "master": the client's connection
//!                anything else (a stale answer during a failover): ask again
//!
//!  watcher (one task per client): SUBSCRIBE +switch-master on one sentinel,
//!          "<name> <old-ip> <old-port> <new-ip> <new-port>"
//!          ──> the client drops its connection and connects to the new
//!              primary at once (ROLE-checked); the breaker may probe at once
//! ```
//!
//! Only the connect path lives here; a call on an open connection costs
//! what it costs in direct mode. Sentinels must announce IP addresses (their
//! default, `resolve-hostnames no`): a host name in an answer is treated as
//! no answer.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{decode_reply, encode_request, Reply};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::client::{auth_accepted, authenticate, roundtrip, Credentials};
use crate::conn::Connection;
use crate::error::{ConnectionError, Error};

/// Default time allowed for each step of finding the primary (a sentinel's
/// answer, the TCP connect to the primary, its `ROLE` reply): 100 ms.
pub const DEFAULT_QUERY_TIMEOUT: Duration = Duration::from_millis(100);

/// Times the sentinels are asked again when the node they named is not a
/// primary, before the connect fails with [`ConnectionError::NotPrimary`].
const ROLE_ROUNDS: u32 = 3;
/// Pause before asking again after a non-primary answer, times the round
/// number: Sentinel updates its answer when the promotion is done, which
/// takes a few of its 100 ms ticks.
const ROUND_PAUSE: Duration = Duration::from_millis(50);
/// Pause before the watcher subscribes on the next sentinel after losing
/// one, so that a fleet with every sentinel down does not spin.
const RESUBSCRIBE_PAUSE: Duration = Duration::from_millis(100);
/// The watcher PINGs its sentinel after this much silence; a sentinel that
/// has not answered by the next tick is presumed gone.
const WATCH_PING: Duration = Duration::from_secs(1);
/// The channel on which sentinels announce a new primary.
const SWITCH_MASTER: &str = "+switch-master";

/// Where the sentinels are and which primary to ask them for.
#[derive(Debug, Clone)]
pub struct SentinelConfig {
    /// The sentinels, asked in this order at first; the one that answers
    /// moves to the front.
    pub sentinels: Vec<SocketAddr>,
    /// The master name the sentinels monitor (`sentinel monitor <name> ...`).
    pub master_name: String,
    /// Time allowed for each step of finding the primary: a sentinel's
    /// answer (connect included), the TCP connect to the primary, and its
    /// `ROLE` reply (default 100 ms).
    pub query_timeout: Duration,
    /// Sent with `AUTH` on every connection to a sentinel, before its
    /// query or subscription: a sentinel's own `requirepass`, or one of its
    /// ACL users (`None`, the default, sends none). The primary's
    /// credentials are [`ClientConfig::credentials`](crate::ClientConfig).
    pub auth: Option<Credentials>,
}

impl SentinelConfig {
    /// Defaults for `sentinels` and `master_name`.
    pub fn new(sentinels: Vec<SocketAddr>, master_name: impl Into<String>) -> SentinelConfig {
        SentinelConfig {
            sentinels,
            master_name: master_name.into(),
            query_timeout: DEFAULT_QUERY_TIMEOUT,
            auth: None,
        }
    }
}

/// The sentinels of one client: their order and the primary last verified.
#[derive(Debug)]
pub(crate) struct Sentinels {
    config: SentinelConfig,
    /// What the primary is asked to `AUTH` with (the sentinels are not).
    credentials: Option<Credentials>,
    /// The sentinels, the last one that answered first.
    order: Mutex<Vec<SocketAddr>>,
    /// The last node that said `master` to `ROLE` (the client's connection
    /// goes there while it is live).
    primary: Mutex<Option<SocketAddr>>,
}

impl Sentinels {
    pub(crate) fn new(config: SentinelConfig, credentials: Option<Credentials>) -> Sentinels {
        Sentinels {
            order: Mutex::new(config.sentinels.clone()),
            config,
            credentials,
            primary: Mutex::new(None),
        }
    }

    /// The last node verified as the primary.
    pub(crate) fn primary(&self) -> Option<SocketAddr> {
        *self.primary.lock()
    }

    /// The sentinels in the order they are asked now.
    pub(crate) fn order(&self) -> Vec<SocketAddr> {
        self.order.lock().clone()
    }

    /// Asks the sentinels in turn for the primary's address; the first that
    /// names one moves to the front.
    ///
    /// # Errors
    /// [`ConnectionError::NoSentinel`] when none names one in time.
    pub(crate) async fn ask(&self) -> Result<SocketAddr, Error> {
        let query = [
            "SENTINEL",
            "get-master-addr-by-name",
            &self.config.master_name,
        ];
        for sentinel in self.order() {
            let reply = request(
                sentinel,
                self.config.auth.as_ref(),
                &query,
                self.config.query_timeout,
            )
            .await;
            if let Some(addr) = reply.ok().as_ref().and_then(master_addr) {
                let mut order = self.order.lock();
                if let Some(i) = order.iter().position(|s| *s == sentinel) {
                    let s = order.remove(i);
                    order.insert(0, s);
                }
                return Ok(addr);
            }
        }
        Err(Error::Connection(ConnectionError::NoSentinel))
    }

    /// A connection to the primary: to `hint` first if given (an announced
    /// new primary), else to the address the sentinels name, checked with
    /// `ROLE`; a node that is not a primary sends the search back to the
    /// sentinels, at most `ROLE_ROUNDS` times.
    ///
    /// # Errors
    /// [`ConnectionError::NoSentinel`], the connect's error, a timeout of
    /// `ROLE`, or [`ConnectionError::NotPrimary`] after the last round.
    pub(crate) async fn discover(
        self: Arc<Self>,
        mut hint: Option<SocketAddr>,
    ) -> Result<Arc<Connection>, Error> {
        let mut round = 0;
        loop {
            let announced = hint.is_some();
            let addr = match hint.take() {
                Some(a) => a,
                None => self.ask().await?,
            };
            let failed = match self.verify(addr).await {
                Ok(conn) => {
                    *self.primary.lock() = Some(addr);
                    return Ok(conn);
                }
                Err(e) => e,
            };
            // An announced address that fails sends the search to the
            // sentinels at once; so does a stale answer from them, after a
            // pause. A named primary that cannot be reached is the answer:
            // asking again now would name it again.
            let stale = matches!(
                failed,
                Error::Connection(ConnectionError::NotPrimary { .. })
            );
            if !announced && !stale {
                return Err(failed);
            }
            if stale {
                round += 1;
                if round >= ROLE_ROUNDS {
                    return Err(failed);
                }
                tokio::time::sleep(ROUND_PAUSE * round).await;
            }
        }
    }

    /// Connects to `addr` and asks `ROLE`; the connection if it says `master`.
    async fn verify(&self, addr: SocketAddr) -> Result<Arc<Connection>, Error> {
        let limit = self.config.query_timeout;
        let stream = tokio::time::timeout(limit, TcpStream::connect(addr))
            .await
            .map_err(|_| Error::Timeout { deadline: limit })??;
        let conn = Arc::new(Connection::start(stream));
        let conn = authenticate(conn, self.credentials.as_ref(), limit).await?;
        let role = roundtrip(&conn, &["ROLE"], limit).await?;
        if is_master(&role) {
            Ok(conn)
        } else {
            conn.close();
            Err(Error::Connection(ConnectionError::NotPrimary { addr }))
        }
    }

    /// Follows the sentinels' announcements for as long as the client
    /// lives: subscribes to `+switch-master` on the first sentinel that
    /// accepts, asks the sentinels once subscribed (an announcement made
    /// while no subscription was open would be missed otherwise), and hands
    /// every new primary of this master name to `follow`, which returns
    /// false once the client is gone. A lost sentinel hands the
    /// subscription to the next one.
    pub(crate) async fn watch<F, Fut>(self: Arc<Self>, follow: F)
    where
        F: Fn(SocketAddr) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        loop {
            for sentinel in self.order() {
                let (auth, limit) = (self.config.auth.as_ref(), self.config.query_timeout);
                if let Ok(mut sub) = Subscription::open(sentinel, auth, limit).await {
                    if let Ok(addr) = self.ask().await {
                        if !follow(addr).await {
                            return;
                        }
                    }
                    while let Ok(reply) = sub.next().await {
                        let announced = switch_master(&reply, &self.config.master_name);
                        if let Some(addr) = announced {
                            if !follow(addr).await {
                                return;
                            }
                        }
                    }
                }
                tokio::time::sleep(RESUBSCRIBE_PAUSE).await;
            }
        }
    }
}

/// One request on a fresh connection to the sentinel at `addr`, after
/// `AUTH` with `auth` (if any), all of it within `limit`.
async fn request(
    addr: SocketAddr,
    auth: Option<&Credentials>,
    args: &[&str],
    limit: Duration,
) -> Result<Reply, Error> {
    let once = async {
        let conn = Connection::start(TcpStream::connect(addr).await?);
        let conn = authenticate(Arc::new(conn), auth, limit).await?;
        roundtrip(&conn, args, limit).await
    };
    tokio::time::timeout(limit, once)
        .await
        .map_err(|_| Error::Timeout { deadline: limit })?
}

/// A `+switch-master` subscription on one sentinel.
struct Subscription {
    stream: TcpStream,
    buf: BytesMut,
    /// A PING went out and nothing has come back since.
    pinged: bool,
}

impl Subscription {
    /// Connects, authenticates with `auth` (if any), subscribes and waits
    /// for the confirmation, within `limit`.
    async fn open(
        sentinel: SocketAddr,
        auth: Option<&Credentials>,
        limit: Duration,
    ) -> Result<Subscription, Error> {
        let open = async {
            let mut sub = Subscription {
                stream: TcpStream::connect(sentinel).await?,
                buf: BytesMut::new(),
                pinged: false,
            };
            if let Some(c) = auth {
                sub.send(&c.command()).await?;
                auth_accepted(sub.read().await?)?;
            }
            sub.send(&["SUBSCRIBE", SWITCH_MASTER]).await?;
            loop {
                let reply = sub.read().await?;
                if message_kind(&reply) == Some(b"subscribe") {
                    return Ok(sub);
                }
            }
        };
        tokio::time::timeout(limit, open)
            .await
            .map_err(|_| Error::Timeout { deadline: limit })?
    }

    async fn send(&mut self, args: &[&str]) -> Result<(), Error> {
        let mut frame = BytesMut::new();
        encode_request(args, &mut frame);
        self.stream.write_all(&frame).await?;
        Ok(())
    }

    /// The next reply or push, however long it takes.
    async fn read(&mut self) -> Result<Reply, Error> {
        loop {
            if let Some(reply) = decode_reply(&mut self.buf).map_err(Error::Protocol)? {
                return Ok(reply);
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(Error::Connection(ConnectionError::Closed));
            }
        }
    }

    /// The next message; PINGs the sentinel after [`WATCH_PING`] of
    /// silence and gives up on it when the next silence ends unanswered.
    ///
    /// # Errors
    /// The connection failed, or the sentinel went silent.
    async fn next(&mut self) -> Result<Reply, Error> {
        loop {
            match tokio::time::timeout(WATCH_PING, self.read()).await {
                Ok(reply) => {
                    self.pinged = false;
                    return reply;
                }
                Err(_) if self.pinged => {
                    return Err(Error::Timeout {
                        deadline: WATCH_PING,
                    })
                }
                Err(_) => {
                    self.pinged = true;
                    self.send(&["PING"]).await?;
                }
            }
        }
    }
}

/// The text of a bulk or simple string reply.
fn bytes_of(reply: &Reply) -> Option<&[u8]> {
    match reply {
        Reply::Bulk(b) => Some(b),
        Reply::Simple(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// An IP address and a port given as text, as sentinels give them.
fn socket_addr(ip: &[u8], port: &[u8]) -> Option<SocketAddr> {
    let ip: IpAddr = std::str::from_utf8(ip).ok()?.parse().ok()?;
    let port: u16 = std::str::from_utf8(port).ok()?.parse().ok()?;
    Some(SocketAddr::new(ip, port))
}

/// The address in a `SENTINEL get-master-addr-by-name` reply (`[ip, port]`;
/// a nil reply when the sentinel does not know the name).
fn master_addr(reply: &Reply) -> Option<SocketAddr> {
    match reply {
        Reply::Array(a) if a.len() == 2 => socket_addr(bytes_of(&a[0])?, bytes_of(&a[1])?),
        _ => None,
    }
}

/// Whether a `ROLE` reply says `master` (a replica says `slave`, a sentinel
/// `sentinel`).
fn is_master(reply: &Reply) -> bool {
    matches!(reply, Reply::Array(a) if a.first().and_then(bytes_of) == Some(&b"master"[..]))
}

/// The first element of a pub/sub push (`subscribe`, `message`, `pong`).
fn message_kind(reply: &Reply) -> Option<&[u8]> {
    match reply {
        Reply::Array(a) | Reply::Push(a) => a.first().and_then(bytes_of),
        _ => None,
    }
}

/// The new primary of `master` in a `+switch-master` message
/// (`<name> <old-ip> <old-port> <new-ip> <new-port>`); `None` for any other
/// message, or one about another master name.
fn switch_master(reply: &Reply, master: &str) -> Option<SocketAddr> {
    let (Reply::Array(a) | Reply::Push(a)) = reply else {
        return None;
    };
    let [kind, channel, payload] = a.as_slice() else {
        return None;
    };
    if bytes_of(kind)? != b"message" || bytes_of(channel)? != SWITCH_MASTER.as_bytes() {
        return None;
    }
    let payload: Bytes = match payload {
        Reply::Bulk(b) => b.clone(),
        _ => return None,
    };
    let words: Vec<&[u8]> = payload
        .split(|&b| b == b' ')
        .filter(|w| !w.is_empty())
        .collect();
    match words.as_slice() {
        [name, _old_ip, _old_port, ip, port] if *name == master.as_bytes() => socket_addr(ip, port),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use leasehold_protocol::{decode_request, Limits, Protocol};
    use tokio::net::TcpListener;

    use super::*;

    fn message(channel: &str, payload: &str) -> Reply {
        Reply::Array(vec![
            Reply::bulk("message"),
            Reply::bulk(channel),
            Reply::bulk(payload),
        ])
    }

    #[test]
    fn switch_master_names_the_new_primary_of_our_master_only() {
        let m = message("+switch-master", "mymaster 127.0.0.1 6379 127.0.0.1 6380");
        assert_eq!(
            switch_master(&m, "mymaster"),
            Some("127.0.0.1:6380".parse().unwrap())
        );
        let push = Reply::Push(vec![
            Reply::bulk("message"),
            Reply::bulk("+switch-master"),
            Reply::bulk("mymaster 10.0.0.1 1 ::1 7000"),
        ]);
        assert_eq!(
            switch_master(&push, "mymaster"),
            Some("[::1]:7000".parse().unwrap())
        );
        // Another master, another channel, a short payload, a host name, a
        // bad port, the subscription confirmation.
        assert_eq!(switch_master(&m, "other"), None);
        assert_eq!(switch_master(&m, "mymaste"), None);
        let other = message("+sdown", "mymaster 127.0.0.1 6379 127.0.0.1 6380");
        assert_eq!(switch_master(&other, "mymaster"), None);
        let short = message("+switch-master", "mymaster 127.0.0.1 6379 127.0.0.1");
        assert_eq!(switch_master(&short, "mymaster"), None);
        let host = message("+switch-master", "mymaster a 1 ledger.local 6380");
        assert_eq!(switch_master(&host, "mymaster"), None);
        let port = message("+switch-master", "mymaster a 1 127.0.0.1 65536");
        assert_eq!(switch_master(&port, "mymaster"), None);
        let confirm = Reply::Array(vec![
            Reply::bulk("subscribe"),
            Reply::bulk("+switch-master"),
            Reply::Int(1),
        ]);
        assert_eq!(switch_master(&confirm, "mymaster"), None);
        assert_eq!(message_kind(&confirm), Some(&b"subscribe"[..]));
    }

    #[test]
    fn master_addr_and_role_replies_are_read() {
        let named = Reply::Array(vec![Reply::bulk("127.0.0.1"), Reply::bulk("7001")]);
        assert_eq!(master_addr(&named), Some("127.0.0.1:7001".parse().unwrap()));
        assert_eq!(master_addr(&Reply::NilArray), None);
        assert_eq!(master_addr(&Reply::Nil), None);
        let master = Reply::Array(vec![
            Reply::bulk("master"),
            Reply::Int(0),
            Reply::Array(vec![]),
        ]);
        let replica = Reply::Array(vec![
            Reply::bulk("slave"),
            Reply::bulk("127.0.0.1"),
            Reply::Int(7001),
            Reply::bulk("connected"),
            Reply::Int(0),
        ]);
        assert!(is_master(&master));
        assert!(!is_master(&replica));
        assert!(!is_master(&Reply::err("ERR unknown command 'ROLE'")));
    }

    /// A RESP server on loopback answering each command with `answer` and
    /// counting the commands it receives; a connection that sent SUBSCRIBE
    /// is confirmed and then gets every reply sent on `publish`.
    struct Fake {
        addr: SocketAddr,
        count: Arc<AtomicUsize>,
        publish: tokio::sync::broadcast::Sender<Reply>,
    }

    async fn fake<F>(answer: F) -> Fake
    where
        F: Fn(&[Bytes]) -> Reply + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let (publish, _) = tokio::sync::broadcast::channel::<Reply>(8);
        let (answer, seen, tx) = (Arc::new(answer), count.clone(), publish.clone());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (answer, seen, mut rx) = (answer.clone(), seen.clone(), tx.subscribe());
                tokio::spawn(async move {
                    let (mut buf, mut subscribed) = (BytesMut::new(), false);
                    loop {
                        let out = tokio::select! {
                            n = stream.read_buf(&mut buf) => {
                                if !n.is_ok_and(|n| n > 0) {
                                    return;
                                }
                                let mut out = BytesMut::new();
                                while let Ok(Some(args)) = decode_request(&mut buf, &Limits::default()) {
                                    seen.fetch_add(1, Ordering::SeqCst);
                                    let reply = if args[0].eq_ignore_ascii_case(b"SUBSCRIBE") {
                                        subscribed = true;
                                        Reply::Array(vec![Reply::bulk("subscribe"), Reply::bulk(&args[1]), Reply::Int(1)])
                                    } else {
                                        answer(&args)
                                    };
                                    reply.encode(Protocol::Resp2, &mut out);
                                }
                                out
                            }
                            Ok(msg) = rx.recv(), if subscribed => BytesMut::from(&msg.to_bytes(Protocol::Resp2)[..]),
                        };
                        if stream.write_all(&out).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Fake {
            addr,
            count,
            publish,
        }
    }

    /// Polls `ok` every 5 ms; panics after 5 s.
    async fn wait_until(ok: impl Fn() -> bool) {
        let start = std::time::Instant::now();
        while !ok() {
            assert!(start.elapsed() < Duration::from_secs(5), "not within 5 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A node whose ROLE says `name`; it answers anything else with PONG.
    fn role(name: &'static str) -> impl Fn(&[Bytes]) -> Reply {
        move |args| {
            if args[0].eq_ignore_ascii_case(b"ROLE") {
                Reply::Array(vec![Reply::bulk(name), Reply::Int(0), Reply::Array(vec![])])
            } else {
                Reply::simple("PONG")
            }
        }
    }

    fn named(addr: SocketAddr) -> Reply {
        Reply::Array(vec![
            Reply::bulk(addr.ip().to_string()),
            Reply::bulk(addr.port().to_string()),
        ])
    }

    /// A sentinel first names a replica (a stale answer); ROLE says so, and
    /// the client asks again and connects to the primary the second answer
    /// names. The sentinel that answered moves ahead of the dead one.
    #[tokio::test]
    async fn a_replica_named_by_a_stale_answer_sends_the_client_back_to_the_sentinels() {
        let replica = fake(role("slave")).await;
        let primary = fake(role("master")).await;
        let asked = Arc::new(AtomicUsize::new(0));
        let times = asked.clone();
        let (replica_at, primary_at) = (replica.addr, primary.addr);
        let sentinel = fake(move |args| {
            assert_eq!(&args[1][..], b"get-master-addr-by-name");
            assert_eq!(&args[2][..], b"mymaster");
            match times.fetch_add(1, Ordering::SeqCst) {
                0 => named(replica_at),
                _ => named(primary_at),
            }
        })
        .await
        .addr;
        let dead = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap(); // closed when the listener drops: connects are refused
        let s = Arc::new(Sentinels::new(
            SentinelConfig::new(vec![dead, sentinel], "mymaster"),
            None,
        ));
        let conn = s.clone().discover(None).await.expect("the primary");
        assert!(!conn.is_broken());
        assert_eq!(s.primary(), Some(primary.addr));
        assert_eq!(asked.load(Ordering::SeqCst), 2, "asked again after ROLE");
        assert_eq!(replica.count.load(Ordering::SeqCst), 1);
        assert_eq!(primary.count.load(Ordering::SeqCst), 1);
        assert_eq!(
            s.order(),
            vec![sentinel, dead],
            "the answering one is first"
        );
    }

    /// Sentinels that keep naming a replica end the search with
    /// `NotPrimary` after three rounds; none answering is `NoSentinel`.
    #[tokio::test]
    async fn a_search_that_finds_no_primary_ends_with_a_typed_error() {
        let replica = fake(role("slave")).await;
        let replica_at = replica.addr;
        let sentinel = fake(move |_| named(replica_at)).await;
        let s = Arc::new(Sentinels::new(
            SentinelConfig::new(vec![sentinel.addr], "m"),
            None,
        ));
        let err = s.clone().discover(None).await.err().expect("no primary");
        assert!(
            matches!(err, Error::Connection(ConnectionError::NotPrimary { addr }) if addr == replica_at),
            "{err:?}"
        );
        assert!(err.is_connection() && err.counts_against_ledger());
        assert_eq!(sentinel.count.load(Ordering::SeqCst), 3);
        assert_eq!(replica.count.load(Ordering::SeqCst), 3);
        assert_eq!(s.primary(), None);

        let unknown = fake(|_| Reply::NilArray).await;
        let s = Arc::new(Sentinels::new(
            SentinelConfig::new(vec![unknown.addr], "m"),
            None,
        ));
        let err = s.discover(None).await.err().expect("no answer");
        assert!(
            matches!(err, Error::Connection(ConnectionError::NoSentinel)),
            "{err:?}"
        );
    }

    /// An old primary that answers `error` to everything but ROLE once
    /// `failing` is set, a new primary, and a sentinel naming `named_now`
    /// (the old one at first).
    struct Failover {
        old: Fake,
        new: Fake,
        sentinel: Fake,
        failing: Arc<std::sync::atomic::AtomicBool>,
        named_now: Arc<Mutex<SocketAddr>>,
    }

    impl Failover {
        async fn start(error: &'static str) -> Failover {
            let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let fails = failing.clone();
            let old = fake(move |args| {
                if fails.load(Ordering::SeqCst) && !args[0].eq_ignore_ascii_case(b"ROLE") {
                    Reply::err(error)
                } else {
                    role("master")(args)
                }
            })
            .await;
            let named_now = Arc::new(Mutex::new(old.addr));
            let answer = named_now.clone();
            Failover {
                old,
                new: fake(role("master")).await,
                sentinel: fake(move |_| named(*answer.lock())).await,
                failing,
                named_now,
            }
        }
    }

    /// The watcher moves the client to an announced primary by itself (no
    /// call is made), and a breaker opened against the old primary lets
    /// the next call probe the new one at once instead of after its
    /// one-minute cool-down.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn switch_master_moves_the_connection_and_lets_the_breaker_probe() {
        use crate::breaker::BreakerState;
        use crate::client::{Client, ClientConfig};

        let Failover {
            old,
            new,
            sentinel,
            failing,
            named_now,
        } = Failover::start("LOADING Redis is loading the dataset in memory").await;
        let mut config = ClientConfig::sentinel(vec![sentinel.addr], "mymaster");
        config.breaker.cool_down = Duration::from_secs(60);
        let client = Client::new(config);
        client.connect().await.unwrap();
        client.ping().await.unwrap();
        assert_eq!(client.primary(), Some(old.addr));

        failing.store(true, Ordering::SeqCst);
        for _ in 0..3 {
            assert!(client.ping().await.is_err());
        }
        assert_eq!(client.breaker_state(), BreakerState::Open);

        // The first connect's question, SUBSCRIBE and the watcher's own
        // question: from now on only the announcement can name `new`.
        wait_until(|| sentinel.count.load(Ordering::SeqCst) >= 3).await;
        assert_eq!(client.primary(), Some(old.addr));
        *named_now.lock() = new.addr;
        let text = format!("mymaster {} {}", old.addr.ip(), old.addr.port())
            + &format!(" {} {}", new.addr.ip(), new.addr.port());
        let start = std::time::Instant::now();
        while client.primary() != Some(new.addr) {
            assert!(start.elapsed() < Duration::from_secs(5), "not followed");
            let _ = sentinel.publish.send(message("+switch-master", &text));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let roles_then = new.count.load(Ordering::SeqCst);
        assert!(roles_then >= 1, "the new primary was checked with ROLE");
        client
            .ping()
            .await
            .expect("the probe reaches the new primary");
        assert_eq!(client.breaker_state(), BreakerState::Closed);
        assert_eq!(new.count.load(Ordering::SeqCst), roles_then + 1);
    }

    /// A `READONLY` reply (a demoted primary) discards the connection, so
    /// the next call asks the sentinels and reaches the primary they name.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_readonly_reply_sends_the_next_call_to_the_sentinels() {
        use crate::client::{Client, ClientConfig};

        let Failover {
            old,
            new,
            sentinel,
            failing: demoted,
            named_now,
        } = Failover::start("READONLY You can't write against a read only replica.").await;
        let client = Client::new(ClientConfig::sentinel(vec![sentinel.addr], "m"));
        client.ping().await.unwrap();
        assert_eq!(client.primary(), Some(old.addr));
        // The watcher's own question is asked: only the READONLY reply can
        // move the client from here.
        wait_until(|| sentinel.count.load(Ordering::SeqCst) >= 3).await;

        demoted.store(true, Ordering::SeqCst);
        *named_now.lock() = new.addr;
        let err = client.ping().await.unwrap_err();
        assert_eq!(
            err.server_kind(),
            Some(&crate::error::ServerErrorKind::ReadOnly)
        );
        let (asked, new_seen) = (
            sentinel.count.load(Ordering::SeqCst),
            new.count.load(Ordering::SeqCst),
        );
        client.ping().await.expect("the new primary answers");
        assert_eq!(client.primary(), Some(new.addr));
        assert!(sentinel.count.load(Ordering::SeqCst) > asked, "asked again");
        // Its ROLE and the PING (the watcher may have checked it too).
        assert!(new.count.load(Ordering::SeqCst) >= new_seen + 2);
    }
}
