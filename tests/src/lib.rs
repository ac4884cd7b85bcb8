//! Test harness for the end-to-end suite (see `tests/`).
//!
//! # Layout
//! - [`TestServer`]: a Leasehold server started in-process on 127.0.0.1 with a
//!   free port, stopped when dropped; with the real clock or a
//!   [`ManualClock`], and with any [`Config`].
//! - [`Raw`]: a raw TCP connection (std, blocking, every read under a
//!   deadline) that sends bytes and reads replies with the independent
//!   `redis-protocol` decoder ([`leasehold_protocol::decode_reply`]), reads raw
//!   bytes, and tells whether the server closed the connection.
//! - [`resp`]: encodes a request as a RESP array of bulk strings.
//! - [`block_on`]: runs an async test body (redis-rs) under a time limit.
//! - [`on_1_and_2_threads!`]: declares a test body once and runs it as two
//!   tests, on a server with 1 and with 2 threads (shards).
//! - [`T0_MS`] and [`manual_server`] (module [`clock`]): a server on a
//!   hand-set clock that starts at a fixed instant.
//! - [`q`], [`q_err`], [`LIMIT`] (module [`redis_rs`]): one command through
//!   redis-rs, its value or its error text.
//! - [`info()`], [`info_fields`] (module [`mod@info`]): INFO's text and its fields.
//! - module [`busy`]: `EVAL` requests, a connection of a chosen thread, a
//!   script that keeps its shard busy.
//! - module [`replication`]: make a server follow another, wait until it
//!   has caught up, dump a keyspace to compare.
//! - module [`differential`]: a real `redis-server` beside Leasehold, the
//!   same requests to both, replies compared byte for byte ([`differential::Pair`]).
//! - [`int_of`], [`text`]: replies as values or text, for assertions.
//! - [`keys_in_both_halves`]: key names that land on different shards.
//! - module [`differential`]: a real `redis-server` beside Leasehold, the
//!   same requests to both, replies compared byte for byte.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
pub use leasehold_protocol::Reply;
use leasehold_protocol::{decode_reply, Protocol};
use leasehold_server::clock::{Clock, ManualClock, SystemClock};
use leasehold_server::config::Config;
use leasehold_server::slot::{key_slot, SLOTS};
use leasehold_server::ServerHandle;

pub mod busy;
pub mod clock;
pub mod differential;
pub mod info;
pub mod redis_rs;
pub mod replication;

pub use clock::{manual_server, T0_MS};
pub use info::{info, info_fields};
pub use redis_rs::{q, q_err, LIMIT};

/// How long a read waits by default before the test fails.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A Leasehold server running in this process; shut down on drop.
pub struct TestServer {
    /// The loopback address it listens on.
    pub addr: SocketAddr,
    handle: Option<ServerHandle>,
}

impl TestServer {
    /// A server with `threads` shards and the system clock.
    pub fn start(threads: usize) -> TestServer {
        TestServer::with_config(Self::config(threads), Arc::new(SystemClock::new()))
    }

    /// A server with `threads` shards whose both clocks are set by hand.
    pub fn with_clock(threads: usize, clock: Arc<ManualClock>) -> TestServer {
        TestServer::with_config(Self::config(threads), clock)
    }

    /// The configuration tests start from: loopback, port 0, `threads` shards.
    pub fn config(threads: usize) -> Config {
        let mut c = Config::default();
        c.net.bind = "127.0.0.1".into();
        c.net.port = 0;
        c.shards.threads = threads;
        c.persistence.save = String::new();
        c
    }

    /// A server with any configuration (its bind address and port are forced
    /// to 127.0.0.1:0, and a `dir` left at `.` becomes a fresh scratch
    /// directory, so no test reads or writes another's files) and clock.
    ///
    /// # Panics
    /// When the server cannot start.
    pub fn with_config(mut config: Config, clock: Arc<dyn Clock>) -> TestServer {
        config.net.bind = "127.0.0.1".into();
        config.net.port = 0;
        if config.persistence.dir == "." {
            config.persistence.dir = leasehold_testkit::scratch_dir().display().to_string();
        }
        let handle = leasehold_server::start(config, clock).expect("start the server");
        TestServer {
            addr: handle.addr,
            handle: Some(handle),
        }
    }

    /// A new raw connection.
    pub fn raw(&self) -> Raw {
        Raw::connect(self.addr)
    }

    /// The `redis://` URL of this server.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// A redis-rs multiplexed async connection (RESP2).
    ///
    /// # Panics
    /// When the connection fails.
    pub async fn redis(&self) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(self.url()).expect("redis url");
        tokio::time::timeout(READ_TIMEOUT, client.get_multiplexed_async_connection())
            .await
            .expect("redis-rs connect timed out")
            .expect("redis-rs connect")
    }

    /// The running server's handle (statistics, configuration).
    pub fn handle(&self) -> &ServerHandle {
        self.handle.as_ref().expect("running")
    }

    /// Waits until the server's threads stop (after SHUTDOWN), at most `limit`.
    /// Returns whether they stopped.
    pub fn wait_stopped(mut self, limit: Duration) -> bool {
        let handle = self.handle.take().expect("running");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            handle.join();
            let _ = tx.send(());
        });
        rx.recv_timeout(limit).is_ok()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
        }
    }
}

/// Encodes one request as a RESP array of bulk strings.
pub fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// [`resp`] for text arguments split on spaces: `cmd("SET k v")`.
pub fn cmd(line: &str) -> Vec<u8> {
    let parts: Vec<&[u8]> = line
        .split(' ')
        .filter(|p| !p.is_empty())
        .map(str::as_bytes)
        .collect();
    resp(&parts)
}

/// A raw connection; every read has a deadline and fails the test when it passes.
pub struct Raw {
    stream: TcpStream,
    buf: BytesMut,
}

/// What [`Raw::read_until_closed`] saw.
#[derive(Debug, PartialEq, Eq)]
pub enum Closed {
    /// The server closed (EOF or reset) after sending these bytes.
    Yes(Bytes),
    /// The deadline passed with the connection still open.
    No(Bytes),
}

impl Raw {
    /// Connects to `addr`.
    ///
    /// # Panics
    /// When the connection fails.
    pub fn connect(addr: SocketAddr) -> Raw {
        let stream = TcpStream::connect_timeout(&addr, READ_TIMEOUT).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        stream
            .set_write_timeout(Some(READ_TIMEOUT))
            .expect("write timeout");
        Raw {
            stream,
            buf: BytesMut::new(),
        }
    }

    /// The underlying socket (for a second handle, e.g. a writer thread).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Sends bytes as one write.
    ///
    /// # Panics
    /// When the write fails.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// Sends one request built from text arguments split on spaces.
    pub fn send_cmd(&mut self, line: &str) {
        self.send(&cmd(line));
    }

    /// Reads once into the buffer, waiting at most until `deadline`.
    /// Returns `Ok(0)` on EOF, `Err(TimedOut)` when the deadline passed.
    fn fill(&mut self, deadline: Instant) -> std::io::Result<usize> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut chunk = [0u8; 64 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(n)
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Err(ErrorKind::TimedOut.into())
            }
            Err(e) => Err(e),
        }
    }

    /// Reads one reply and its exact bytes, or `None` when the deadline
    /// passes or the connection ends first.
    pub fn try_read_reply_raw(&mut self, timeout: Duration) -> Option<(Reply, Bytes)> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut tmp = self.buf.clone();
            match decode_reply(&mut tmp) {
                Ok(Some(reply)) => {
                    let used = self.buf.len() - tmp.len();
                    let raw = self.buf.split_to(used).freeze();
                    return Some((reply, raw));
                }
                Ok(None) => {}
                Err(e) => panic!(
                    "undecodable reply {e}: {:?}",
                    String::from_utf8_lossy(&self.buf)
                ),
            }
            match self.fill(deadline) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// Reads one reply and its exact bytes.
    ///
    /// # Panics
    /// When no complete reply arrives within [`READ_TIMEOUT`].
    pub fn read_reply_raw(&mut self) -> (Reply, Bytes) {
        match self.try_read_reply_raw(READ_TIMEOUT) {
            Some(r) => r,
            None => panic!(
                "no reply within {READ_TIMEOUT:?}; buffered {:?}",
                String::from_utf8_lossy(&self.buf)
            ),
        }
    }

    /// Reads one reply.
    pub fn read_reply(&mut self) -> Reply {
        self.read_reply_raw().0
    }

    /// Reads one reply and returns its exact bytes as text (for assertions).
    pub fn read_text(&mut self) -> String {
        String::from_utf8_lossy(&self.read_reply_raw().1).into_owned()
    }

    /// Sends one request (text arguments) and returns its reply's bytes as text.
    pub fn call(&mut self, line: &str) -> String {
        self.send_cmd(line);
        self.read_text()
    }

    /// Sends one request (binary arguments) and returns its reply's bytes as text.
    pub fn call_args(&mut self, args: &[&[u8]]) -> String {
        self.send(&resp(args));
        self.read_text()
    }

    /// Runs `(request, expected reply bytes)` steps in order, naming the
    /// failing step. Requests are text arguments split on spaces.
    ///
    /// # Panics
    /// On the first reply that differs.
    pub fn script(&mut self, steps: &[(&str, &str)]) {
        for (i, (request, expected)) in steps.iter().enumerate() {
            let got = self.call(request);
            assert_eq!(&got, expected, "step {i}: {request}");
        }
    }

    /// Reads exactly `n` raw bytes.
    ///
    /// # Panics
    /// When they do not arrive within `timeout` or the connection ends.
    pub fn read_exact_raw(&mut self, n: usize, timeout: Duration) -> Bytes {
        let deadline = Instant::now() + timeout;
        while self.buf.len() < n {
            match self.fill(deadline) {
                Ok(0) => panic!("closed after {} of {n} bytes", self.buf.len()),
                Ok(_) => {}
                Err(e) => panic!("after {} of {n} bytes: {e}", self.buf.len()),
            }
        }
        self.buf.split_to(n).freeze()
    }

    /// Reads raw bytes until the deadline passes or the connection ends.
    pub fn read_raw_for(&mut self, timeout: Duration) -> Bytes {
        let deadline = Instant::now() + timeout;
        while let Ok(n) = self.fill(deadline) {
            if n == 0 {
                break;
            }
        }
        self.buf.split().freeze()
    }

    /// Reads until the server closes the connection or `timeout` passes,
    /// returning what arrived and whether it closed.
    pub fn read_until_closed(&mut self, timeout: Duration) -> Closed {
        let deadline = Instant::now() + timeout;
        loop {
            match self.fill(deadline) {
                Ok(0) => return Closed::Yes(self.buf.split().freeze()),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::TimedOut => {
                    return Closed::No(self.buf.split().freeze())
                }
                // A reset also means the server closed.
                Err(_) => return Closed::Yes(self.buf.split().freeze()),
            }
        }
    }

    /// Asserts that the server closed the connection within `timeout` after
    /// sending exactly `expected`.
    pub fn expect_closed_after(&mut self, expected: &str, timeout: Duration) {
        match self.read_until_closed(timeout) {
            Closed::Yes(b) => assert_eq!(String::from_utf8_lossy(&b), expected),
            Closed::No(b) => panic!(
                "still open after {timeout:?}; got {:?}",
                String::from_utf8_lossy(&b)
            ),
        }
    }
}

/// Encodes a reply as RESP2 text, for readable assertions.
pub fn text(r: &Reply) -> String {
    String::from_utf8_lossy(&r.to_bytes(Protocol::Resp2)).into_owned()
}

/// The value of an integer reply given as its bytes (`:42\r\n` is 42).
///
/// # Panics
/// When `reply` is not an integer reply.
pub fn int_of(reply: &str) -> i64 {
    reply
        .strip_prefix(':')
        .and_then(|r| r.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("not an integer: {reply:?}"))
}

/// `2 * n` key names `{prefix}0`, `{prefix}1`, ...: the first `n` whose hash
/// slots lie in the lower half of `0..SLOTS` and the first `n` in the upper
/// half, interleaved (low, high, low, ...). On two shards the halves live on
/// different shards, so every request naming consecutive keys spans both.
pub fn keys_in_both_halves(prefix: &str, n: usize) -> Vec<String> {
    let (mut low, mut high) = (Vec::new(), Vec::new());
    for i in 0.. {
        if low.len() == n && high.len() == n {
            break;
        }
        let k = format!("{prefix}{i}");
        let half = if (key_slot(k.as_bytes()) as usize) < SLOTS / 2 {
            &mut low
        } else {
            &mut high
        };
        if half.len() < n {
            half.push(k);
        }
    }
    low.into_iter()
        .zip(high)
        .flat_map(|(a, b)| [a, b])
        .collect()
}

/// Runs an async test body on a fresh current-thread runtime.
///
/// # Panics
/// When the body takes longer than `limit`.
pub fn block_on<F: std::future::Future>(limit: Duration, body: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        match tokio::time::timeout(limit, body).await {
            Ok(v) => v,
            Err(_) => panic!("test body took longer than {limit:?}"),
        }
    })
}

/// Declares test bodies that each run twice, on 1 and on 2 threads:
///
/// ```ignore
/// on_1_and_2_threads! {
///     fn ping_works(threads) {
///         let server = TestServer::start(threads);
///         assert_eq!(server.raw().call("PING"), "+PONG\r\n");
///     }
/// }
/// ```
/// expands to the tests `ping_works::one_thread` and `ping_works::two_threads`.
#[macro_export]
macro_rules! on_1_and_2_threads {
    ($(fn $name:ident($threads:ident) $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn body($threads: usize) $body

            #[test]
            fn one_thread() {
                body(1)
            }

            #[test]
            fn two_threads() {
                body(2)
            }
        }
    )*};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_encodes_bulk_arrays() {
        assert_eq!(resp(&[b"GET", b"k"]), b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
        assert_eq!(
            cmd("SET  k v"),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"
        );
    }

    #[test]
    fn keys_in_both_halves_alternate_halves() {
        let keys = keys_in_both_halves("k", 3);
        assert_eq!(keys.len(), 6);
        for (i, k) in keys.iter().enumerate() {
            let low = (key_slot(k.as_bytes()) as usize) < SLOTS / 2;
            assert_eq!(low, i % 2 == 0, "{k} at {i}");
        }
        let distinct: std::collections::BTreeSet<_> = keys.iter().collect();
        assert_eq!(distinct.len(), 6);
    }

    #[test]
    fn reads_replies_with_their_exact_bytes() {
        let server = TestServer::start(1);
        let mut c = server.raw();
        c.send(
            b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$4\r\nMGET\r\n$1\r\nk\r\n",
        );
        assert_eq!(
            c.read_reply_raw(),
            (Reply::simple("PONG"), Bytes::from_static(b"+PONG\r\n"))
        );
        assert_eq!(c.read_text(), "$-1\r\n");
        assert_eq!(c.read_text(), "*1\r\n$-1\r\n");
        assert_eq!(c.try_read_reply_raw(Duration::from_millis(50)), None);
        c.send_cmd("QUIT");
        c.expect_closed_after("+OK\r\n", Duration::from_secs(5));
    }
}
