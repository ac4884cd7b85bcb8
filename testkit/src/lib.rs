//! Test support for tests that run real processes on loopback (a Leasehold
//! node killed with SIGKILL, stock Redis Sentinel): child processes killed
//! on drop, free ports, one-shot RESP calls, polling with a limit, and
//! sentinels (`redis-server --sentinel`) with the settings the failover
//! tests use. Depends on `leasehold-protocol` only, so the server's and the
//! client's tests can both use it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::BytesMut;
pub use leasehold_protocol::Reply;
use leasehold_protocol::{decode_reply, encode_request};

/// The master name the sentinels of [`sentinel`] monitor.
pub const MASTER: &str = "mymaster";

/// A child process killed (SIGKILL) and reaped on drop.
#[derive(Debug)]
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A new empty directory under the system's temporary directory, unique to
/// this process and call: a test server's `dir`, so no test loads or
/// overwrites another's snapshot (and none writes into the source tree).
///
/// # Panics
/// When the directory cannot be created.
pub fn scratch_dir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("leasehold-test-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

/// The command line of a `leasehold-server` node (the binary at `exe`) for
/// a process test: 127.0.0.1:`port`, 2 threads, warnings only, no `save`
/// rules, its files in `dir`.
pub fn node_command(exe: &str, port: u16, dir: &Path) -> Command {
    let mut cmd = Command::new(exe);
    cmd.args(["--port", &port.to_string(), "--threads", "2"]);
    cmd.args(["--loglevel", "warn", "--save", ""]);
    cmd.args(["--dir", &dir.display().to_string()]);
    cmd
}

/// The ports this process has handed out ([`free_port`], [`free_run`]).
static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A port that was free on 127.0.0.1 a moment ago, and that this process
/// has not been given before: the kernel hands a port just released to the
/// next `bind` to port 0 again, so two tests of one binary running at once
/// could otherwise both start a server on it.
///
/// # Panics
/// When no port can be bound, or 1000 tries give only ports already given.
pub fn free_port() -> u16 {
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        let port = bound_port();
        if given.insert(port) {
            return port;
        }
    }
    panic!("1000 ports bound, every one given before");
}

/// The first of `n` consecutive ports that were all free on 127.0.0.1 a
/// moment ago and none of which this process has been given before (a
/// `leasehold-cluster local` takes such a run); all `n` count as given.
///
/// # Panics
/// When 50 tries find no such run.
pub fn free_run(n: u16) -> u16 {
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..50 {
        let base = bound_port();
        let Some(end) = base.checked_add(n) else {
            continue;
        };
        let fresh = given.range(base..end).next().is_none();
        if fresh && (base..end).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            given.extend(base..end);
            return base;
        }
    }
    panic!("no run of {n} free ports");
}

/// A port the kernel gives to a bind to 127.0.0.1:0, released again.
fn bound_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Sends one request to 127.0.0.1:`port` on a new connection and returns
/// its reply, or `None` when the connection fails (3 s read timeout).
pub fn call(port: u16, args: &[&str]) -> Option<Reply> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    let mut out = BytesMut::new();
    encode_request(args, &mut out);
    s.write_all(&out).ok()?;
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Ok(Some(r)) = decode_reply(&mut buf) {
            return Some(r);
        }
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// One blocking connection to 127.0.0.1:`port` for many requests (a load
/// that must know which writes were acknowledged).
#[derive(Debug)]
pub struct Conn {
    s: TcpStream,
    buf: BytesMut,
}

impl Conn {
    /// Connects (3 s read timeout); `None` when the connection fails.
    pub fn open(port: u16) -> Option<Conn> {
        let s = TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
        let _ = s.set_nodelay(true);
        Some(Conn {
            s,
            buf: BytesMut::new(),
        })
    }

    /// Sends one request and reads its reply; `None` when the connection
    /// broke (the reply, if any, was not seen: the request is unacknowledged).
    pub fn call(&mut self, args: &[&str]) -> Option<Reply> {
        self.pipeline(&[args]).and_then(|mut r| r.pop())
    }

    /// Sends several requests in one write and reads their replies, in
    /// order; `None` when the connection broke before all came.
    pub fn pipeline(&mut self, requests: &[&[&str]]) -> Option<Vec<Reply>> {
        let mut out = BytesMut::new();
        for args in requests {
            encode_request(args, &mut out);
        }
        self.s.write_all(&out).ok()?;
        let mut replies = Vec::with_capacity(requests.len());
        let mut chunk = [0u8; 16384];
        while replies.len() < requests.len() {
            if let Ok(Some(r)) = decode_reply(&mut self.buf) {
                replies.push(r);
                continue;
            }
            let n = self.s.read(&mut chunk).ok()?;
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
        Some(replies)
    }
}

/// A reply as text: a bulk or simple string's bytes, an error's text, an
/// integer's digits, anything else in debug form.
pub fn text(r: &Reply) -> String {
    match r {
        Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        Reply::Simple(s) | Reply::Error(s) => s.to_string(),
        Reply::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

/// Polls `ok` every 50 ms until it holds; returns how long that took.
///
/// # Panics
/// When it does not hold within `limit` (the message names `what`).
pub fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    start.elapsed()
}

/// Starts `cmd` (its standard output discarded) and waits, at most 10 s,
/// until 127.0.0.1:`port` answers PING with anything but `-LOADING`, and
/// checks that the process answering is the one started: a port that
/// [`free_port`] found free can be taken by another test's process before
/// this one binds it, and that process would answer for it.
///
/// # Panics
/// When it cannot be started, exits before answering, does not answer, or
/// `INFO server` on the port names another `process_id`.
pub fn started(cmd: &mut Command, port: u16, what: &str) -> Proc {
    let mut proc = Proc(cmd.stdout(Stdio::null()).spawn().expect(what));
    // A node with files to load (an append-only log, a snapshot) answers
    // -LOADING until it has: started means serving.
    wait_for(what, Duration::from_secs(10), || {
        if let Ok(Some(status)) = proc.0.try_wait() {
            panic!("{what} on port {port} exited before answering ({status}): was the port taken?");
        }
        match call(port, &["PING"]) {
            None => false,
            Some(Reply::Error(e)) => !e.starts_with("LOADING"),
            Some(_) => true,
        }
    });
    if let Some(pid) = serving_pid(port) {
        assert_eq!(
            pid,
            proc.0.id(),
            "{what}: another process (pid {pid}) answers on port {port}"
        );
    }
    proc
}

/// The `process_id` that `INFO server` on 127.0.0.1:`port` names, when it
/// answers one (not when it refuses INFO, without a password for one).
pub fn serving_pid(port: u16) -> Option<u32> {
    let info = call(port, &["INFO", "server"])?;
    let Reply::Bulk(_) = &info else {
        return None;
    };
    text(&info)
        .lines()
        .find_map(|l| l.trim().strip_prefix("process_id:"))
        .and_then(|v| v.parse().ok())
}

/// Whether `program` runs (`program version_arg` exits 0). When it does
/// not, prints a notice naming `test` and returns false, unless the
/// environment variable `require` is `1` (CI sets it after installing the
/// program), which makes it panic: a test that needs it is skipped loudly
/// by `cargo test` and fails in CI.
///
/// # Panics
/// When it is missing and `require` is `1`.
pub fn tool_installed(program: &str, version_arg: &str, require: &str, test: &str) -> bool {
    let missing = format!("{program} is not on PATH");
    probe_runs(program, &[version_arg], require, &missing, test)
}

/// Whether `program args...` exits 0 (a probe such as `python3 -c "import
/// redis"`). When not: a notice (`missing`, then that `test` is skipped)
/// and false, or a panic when the environment variable `require` is `1`.
///
/// # Panics
/// When the probe fails and `require` is `1`.
pub fn probe_runs(program: &str, args: &[&str], require: &str, missing: &str, test: &str) -> bool {
    let ok = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var(require).as_deref() != Ok("1"),
            "{missing} and {require}=1"
        );
        eprintln!("NOTICE: {missing}; {test} is skipped");
    }
    ok
}

/// Whether `redis-server` (which runs sentinels with `--sentinel`) is on
/// PATH (see [`tool_installed`]; `LEASEHOLD_REQUIRE_REDIS=1` makes a
/// missing one fail).
///
/// # Panics
/// When it is missing and `LEASEHOLD_REQUIRE_REDIS=1`.
pub fn sentinel_installed(test: &str) -> bool {
    tool_installed("redis-server", "--version", "LEASEHOLD_REQUIRE_REDIS", test)
}

/// A stock sentinel on `port` (config file in `dir`) monitoring
/// [`MASTER`] at 127.0.0.1:`primary` with quorum 2,
/// `down-after-milliseconds 1000`, `failover-timeout 5000` and
/// `parallel-syncs 1`.
///
/// # Panics
/// When it cannot be started.
pub fn sentinel(dir: &Path, port: u16, primary: u16) -> Proc {
    sentinel_with(dir, port, primary, "")
}

/// [`sentinel`] with `extra` lines appended to its configuration
/// (`requirepass ...`).
///
/// # Panics
/// When it cannot be started.
pub fn sentinel_with(dir: &Path, port: u16, primary: u16, extra: &str) -> Proc {
    let conf = dir.join(format!("sentinel-{port}.conf"));
    let text = format!(
        "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor {MASTER} 127.0.0.1 {primary} 2\nsentinel down-after-milliseconds {MASTER} 1000\nsentinel failover-timeout {MASTER} 5000\nsentinel parallel-syncs {MASTER} 1\n{extra}",
        dir.display()
    );
    std::fs::write(&conf, text).expect("write the sentinel config");
    let mut cmd = Command::new("redis-server");
    started(cmd.arg(&conf).arg("--sentinel"), port, "a sentinel")
}

/// The primary's port as the sentinel on `sentinel` names it.
pub fn primary_of(sentinel: u16) -> Option<u16> {
    match call(sentinel, &["SENTINEL", "get-master-addr-by-name", MASTER])? {
        Reply::Array(a) if a.len() == 2 => text(&a[1]).parse().ok(),
        _ => None,
    }
}

/// How many replicas of [`MASTER`] the sentinel on `sentinel` knows and
/// holds up (flags exactly `slave`).
pub fn replicas_seen(sentinel: u16) -> usize {
    replicas_seen_of(sentinel, MASTER)
}

/// How many replicas of the master named `master` the sentinel on
/// `sentinel` knows and holds up (flags exactly `slave`).
pub fn replicas_seen_of(sentinel: u16, master: &str) -> usize {
    let Some(Reply::Array(rs)) = call(sentinel, &["SENTINEL", "REPLICAS", master]) else {
        return 0;
    };
    rs.iter()
        .filter(|r| {
            let Reply::Array(kv) = r else { return false };
            kv.chunks(2)
                .any(|p| text(&p[0]) == "flags" && text(&p[1]) == "slave")
        })
        .count()
}

/// Three sentinels (see [`sentinel`]) watching the primary on `primary`,
/// returned once each knows `replicas` replicas (they learn them from the
/// primary's INFO, every 10 s, and each other from `__sentinel__:hello`),
/// with their ports.
///
/// # Panics
/// When they cannot be started, or do not see the replicas within 30 s.
pub fn sentinels_watching(dir: &Path, primary: u16, replicas: usize) -> (Vec<u16>, Vec<Proc>) {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let procs = ports.iter().map(|&s| sentinel(dir, s, primary)).collect();
    wait_for(
        "every sentinel sees the replicas",
        Duration::from_secs(30),
        || ports.iter().all(|&s| replicas_seen(s) == replicas),
    );
    (ports, procs)
}

/// A cluster topology (TOML) of version `version`: group `gI` is the one
/// primary on `127.0.0.1:ports[i]` and owns `slots[i]` (TOML strings such
/// as `"0-5460"`).
pub fn cluster_topology(version: u64, ports: &[u16], slots: &[&str]) -> String {
    let mut t = format!("version = {version}\n");
    for (i, (port, slots)) in ports.iter().zip(slots).enumerate() {
        t += &format!(
            "[[group]]\nname = \"g{i}\"\nslots = [{slots}]\n[[group.node]]\naddr = \"127.0.0.1:{port}\"\nrole = \"primary\"\n"
        );
    }
    t
}

/// Pushes `text` (of `version`) to the nodes on `ports` with `LH.TOPOLOGY
/// SET`, asserting each takes it.
pub fn publish_topology(ports: &[u16], version: u64, text: &str) {
    for &p in ports {
        let v = version.to_string();
        assert_eq!(
            call(p, &["LH.TOPOLOGY", "SET", &v, text]),
            Some(Reply::ok()),
            "node {p} takes version {version}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn free_port_never_gives_a_port_twice() {
        let ports: Vec<u16> = (0..500).map(|_| free_port()).collect();
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
    }

    #[test]
    fn runs_and_ports_never_overlap() {
        let runs: Vec<u16> = (0..20).map(|_| free_run(9)).collect();
        let mut taken: Vec<u16> = runs.iter().flat_map(|&b| b..b + 9).collect();
        taken.extend((0..200).map(|_| free_port()));
        let distinct: std::collections::BTreeSet<u16> = taken.iter().copied().collect();
        assert_eq!(distinct.len(), taken.len());
    }

    #[test]
    #[should_panic(expected = "exited before answering")]
    fn a_process_that_exits_before_answering_is_reported_at_once() {
        // Nothing listens on the port; the process exits at once.
        let port = free_port();
        started(Command::new("true").arg(port.to_string()), port, "true");
    }

    #[test]
    #[should_panic(expected = "another process (pid 1) answers on port")]
    fn a_port_another_process_serves_is_reported() {
        // Another "server" holds the port and names pid 1.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let mut conn = conn;
                let mut buf = [0u8; 512];
                let Ok(n) = conn.read(&mut buf) else { continue };
                let reply: &[u8] = if buf[..n].windows(4).any(|w| w == b"INFO") {
                    b"$14\r\nprocess_id:1\r\n\r\n"
                } else {
                    b"+PONG\r\n"
                };
                let _ = conn.write_all(reply);
            }
        });
        started(Command::new("sleep").arg("5"), port, "sleep");
    }
}
