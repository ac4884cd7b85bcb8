//! Differential testing: a real `redis-server` beside a Leasehold server,
//! and a connection to each that sends the same requests and compares the
//! replies byte for byte (`tests/tests/differential*.rs`).
//!
//! `redis-server` (Debian's 7.0.15 in CI) is looked up on PATH. When it is
//! missing, [`Pair::start`] prints a notice and answers `None` (the test
//! passes), unless `LEASEHOLD_REQUIRE_REDIS=1` is set: then it panics.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{cmd, int_of, resp, Closed, Raw, Reply, TestServer};

/// A `redis-server` child process on a free loopback port, killed on drop.
pub struct RedisServer {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl RedisServer {
    /// Starts `redis-server`, or returns `None` (after a notice) when it is
    /// not installed and `LEASEHOLD_REQUIRE_REDIS` is not `1`.
    ///
    /// # Panics
    /// When it is required but missing, or does not answer PING within 10 s.
    pub fn start() -> Option<RedisServer> {
        let installed = Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !installed {
            if std::env::var("LEASEHOLD_REQUIRE_REDIS").as_deref() == Ok("1") {
                panic!("redis-server is not on PATH and LEASEHOLD_REQUIRE_REDIS=1");
            }
            eprintln!("NOTICE: redis-server is not on PATH; differential test skipped");
            return None;
        }
        // A port the kernel just handed out and took back is very likely free.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("redis-server")
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .args(["--daemonize", "no", "--logfile", ""])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let server = RedisServer {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let start = Instant::now();
        loop {
            if let Ok(mut s) =
                std::net::TcpStream::connect_timeout(&server.addr, Duration::from_millis(200))
            {
                use std::io::{Read, Write};
                let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                let mut buf = [0u8; 7];
                if s.write_all(b"PING\r\n").is_ok()
                    && s.read_exact(&mut buf).is_ok()
                    && &buf == b"+PONG\r\n"
                {
                    return Some(server);
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis-server did not start on {}",
                server.addr
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Both servers and one connection to each.
pub struct Pair {
    /// The connection to Redis.
    pub redis: Raw,
    /// The connection to Leasehold.
    pub lh: Raw,
    /// The Redis server.
    pub redis_server: RedisServer,
    /// The Leasehold server.
    pub lh_server: TestServer,
}

impl Pair {
    pub fn start(threads: usize) -> Option<Pair> {
        let redis_server = RedisServer::start()?;
        let lh_server = TestServer::start(threads);
        Some(Pair {
            redis: Raw::connect(redis_server.addr),
            lh: lh_server.raw(),
            redis_server,
            lh_server,
        })
    }

    /// A second pair of connections to the same two servers.
    pub fn connect_again(&self) -> (Raw, Raw) {
        (Raw::connect(self.redis_server.addr), self.lh_server.raw())
    }

    /// Sends raw bytes to both; returns the next reply of each, as bytes.
    pub fn both_raw(&mut self, request: &[u8]) -> (String, String) {
        self.redis.send(request);
        self.lh.send(request);
        (self.redis.read_text(), self.lh.read_text())
    }

    /// Sends raw bytes to both and checks the replies are byte-identical.
    pub fn same_raw(&mut self, request: &[u8]) -> String {
        let (r, l) = self.both_raw(request);
        assert_eq!(
            l,
            r,
            "Leasehold vs Redis for {:?}",
            String::from_utf8_lossy(request)
        );
        l
    }

    /// [`Pair::same_raw`] for each request, written as words split on spaces.
    pub fn same(&mut self, requests: &[&str]) {
        for r in requests {
            self.same_raw(&cmd(r));
        }
    }

    /// [`Pair::same_raw`] for a request of binary-safe arguments.
    pub fn same_args(&mut self, args: &[&[u8]]) -> String {
        self.same_raw(&resp(args))
    }

    /// Integer replies within `tolerance` of each other (TTLs).
    pub fn close(&mut self, request: &str, tolerance: i64) {
        let (r, l) = self.both_raw(&cmd(request));
        let (r, l) = (int_of(&r), int_of(&l));
        assert!(
            (r - l).abs() <= tolerance,
            "{request}: Redis {r}, Leasehold {l}"
        );
    }

    /// Bulk replies holding numbers within `relative` of each other (INCRBYFLOAT).
    pub fn close_float(&mut self, request: &str, relative: f64) {
        let (r, l) = self.both_raw(&cmd(request));
        let num = |reply: &str| -> f64 {
            let body = reply
                .split("\r\n")
                .nth(1)
                .unwrap_or_else(|| panic!("{request}: not a bulk: {reply:?}"));
            body.parse()
                .unwrap_or_else(|_| panic!("{request}: not a number: {reply:?}"))
        };
        let (rv, lv) = (num(&r), num(&l));
        assert!(
            (rv - lv).abs() <= relative * rv.abs().max(1.0),
            "{request}: Redis {r:?}, Leasehold {l:?}"
        );
    }

    /// Switches both connections to RESP `version` with HELLO (their
    /// replies differ in the client id and the server's name; neither may
    /// be an error).
    pub fn hello(&mut self, version: u8) {
        let (r, l) = self.both_raw(&cmd(&format!("HELLO {version}")));
        assert!(
            !r.starts_with('-') && !l.starts_with('-'),
            "HELLO {version}: {r:?} / {l:?}"
        );
    }

    /// Sends bytes that end the connection: both must send the same bytes, then close.
    pub fn same_then_closed(&mut self, request: &[u8]) {
        self.redis.send(request);
        self.lh.send(request);
        let r = self.redis.read_until_closed(Duration::from_secs(5));
        let l = self.lh.read_until_closed(Duration::from_secs(5));
        assert!(
            matches!(r, Closed::Yes(_)),
            "Redis kept {:?} open: {r:?}",
            String::from_utf8_lossy(request)
        );
        assert_eq!(
            l,
            r,
            "Leasehold vs Redis for {:?}",
            String::from_utf8_lossy(request)
        );
        (self.redis, self.lh) = self.connect_again();
    }
}

/// A HELLO reply with the client id's value blanked (ids differ between servers).
pub fn hello_without_id(reply: &str) -> String {
    let mut buf = bytes::BytesMut::from(reply.as_bytes());
    let decoded = leasehold_protocol::decode_reply(&mut buf)
        .expect("valid")
        .expect("complete");
    let blank = |pairs: Vec<(Reply, Reply)>| -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = pairs
            .into_iter()
            .map(|(k, v)| {
                let k = crate::text(&k);
                let v = if k.ends_with("\r\nid\r\n") {
                    "<id>".to_string()
                } else {
                    crate::text(&v)
                };
                (k, v)
            })
            .collect();
        out.sort();
        out
    };
    let pairs = match decoded {
        Reply::Map(pairs) => pairs,
        Reply::Array(flat) => {
            let mut it = flat.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            pairs
        }
        other => panic!("HELLO reply is neither a map nor an array: {other:?}"),
    };
    let kind = &reply[..1];
    format!("{kind}{:?}", blank(pairs))
}

/// Every element a SCAN-like walk returns (`HSCAN key`, `SSCAN key`, as
/// `scan`, then the cursor, then `options`), from cursor 0 until 0 comes
/// back, in the order they came (one connection: either server's).
pub fn scan_to_end(c: &mut Raw, scan: &str, options: &str) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut all = Vec::new();
    loop {
        c.send(&cmd(&format!("{scan} {cursor} {options}")));
        let reply = c.read_reply();
        let Reply::Array(parts) = reply else {
            panic!("{scan} {cursor}: {reply:?}")
        };
        let Reply::Bulk(next) = &parts[0] else {
            panic!("a cursor: {:?}", parts[0])
        };
        cursor = String::from_utf8_lossy(next).into_owned();
        let Reply::Array(items) = &parts[1] else {
            panic!("{scan} {cursor}: not an array: {:?}", parts[1])
        };
        all.extend(items.iter().map(crate::text));
        if cursor == "0" {
            break;
        }
    }
    all
}
