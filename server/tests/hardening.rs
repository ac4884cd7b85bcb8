//! Hardening with real processes: protected mode refusing a client from
//! outside the loopback interface, `maxclients` fitted to a low open-files
//! limit (clients past it get the error, never a hang), `maxclients`
//! exact under a connection storm spread over two threads, and what a
//! client's buffers may make the server hold: a pipeline written whole
//! before any read is answered, a client that never reads is paused at the
//! output bound or closed at the normal output limit.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::BytesMut;
use leasehold_protocol::encode_request;
use leasehold_testkit::{
    call, free_port, node_command, scratch_dir, started, text, wait_for, Proc, Reply,
};

fn command(dir: &Path, port: u16, extra: &[&str]) -> Command {
    let mut cmd = node_command(env!("CARGO_BIN_EXE_leasehold-server"), port, dir);
    cmd.args(extra);
    cmd
}

/// A started node on a free port with its files in a scratch directory,
/// plus `extra` flags: the process (stopped on drop) and its port.
fn node(extra: &[&str]) -> (Proc, u16) {
    let (dir, port) = (scratch_dir(), free_port());
    (
        started(&mut command(&dir, port, extra), port, "leasehold-server"),
        port,
    )
}

/// Connects to `addr`, sends PING, and returns what came back within 5 s
/// (until the server closes or a reply line is complete), the connection
/// kept open when it is.
fn ping(addr: SocketAddr) -> (String, Option<TcpStream>) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(b"PING\r\n");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into_owned(), None),
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if got.ends_with(b"\r\n") {
                    return (String::from_utf8_lossy(&got).into_owned(), Some(s));
                }
            }
            Err(e) => panic!(
                "no reply within 5 s ({e}): {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
}

/// The texts of an array reply's elements.
fn words(r: &Reply) -> Vec<String> {
    match r {
        Reply::Array(items) => items.iter().map(text).collect(),
        other => panic!("not an array: {other:?}"),
    }
}

/// This machine's address on its default-route interface, if it has one
/// that is not loopback (the kernel picks it for a UDP "connection"; no
/// packet is sent).
fn own_outside_address() -> Option<IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[test]
fn protected_mode_refuses_outside_clients_until_a_password_or_no() {
    let Some(outside) = own_outside_address() else {
        eprintln!("NOTICE: no non-loopback address on this machine; protected-mode test skipped");
        return;
    };
    let (_node, port) = node(&["--bind", "0.0.0.0"]);
    let from_outside = SocketAddr::new(outside, port);
    // Sent nothing (so the close cannot reset the connection before the
    // reply is read), it is told why and closed.
    let mut s = TcpStream::connect_timeout(&from_outside, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply)
        .expect("DENIED, then the end of the stream");
    assert!(
        reply.starts_with("-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user."),
        "{reply}"
    );
    assert!(
        reply.ends_with("accepting connections from the outside.\r\n"),
        "{reply}"
    );
    // Loopback clients are served, and may turn it off.
    assert_eq!(text(&call(port, &["PING"]).unwrap()), "PONG");
    let get = call(port, &["CONFIG", "GET", "protected-mode"]).unwrap();
    assert_eq!(words(&get), ["protected-mode", "yes"]);
    assert_eq!(
        text(&call(port, &["CONFIG", "SET", "protected-mode", "no"]).unwrap()),
        "OK"
    );
    assert_eq!(ping(from_outside).0, "+PONG\r\n");
    // On again, with a password: outside clients are asked to AUTH.
    assert_eq!(
        text(&call(port, &["CONFIG", "SET", "protected-mode", "yes"]).unwrap()),
        "OK"
    );
    assert_eq!(
        text(&call(port, &["CONFIG", "SET", "requirepass", "pw"]).unwrap()),
        "OK"
    );
    assert_eq!(ping(from_outside).0, "-NOAUTH Authentication required.\r\n");
}

/// Opens `n` connections at once from 8 threads, each sending PING and
/// staying open; returns how many got PONG and how many the error.
fn storm(port: u16, n: usize) -> (usize, usize, Vec<TcpStream>) {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let per = n / 8;
    let threads: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(move || (0..per).map(|_| ping(addr)).collect::<Vec<_>>()))
        .collect();
    let (mut pong, mut refused, mut kept) = (0, 0, Vec::new());
    for t in threads {
        for (reply, open) in t.join().unwrap() {
            match reply.as_str() {
                "+PONG\r\n" => pong += 1,
                "-ERR max number of clients reached\r\n" => refused += 1,
                other => panic!("unexpected reply {other:?}"),
            }
            kept.extend(open);
        }
    }
    (pong, refused, kept)
}

#[test]
fn maxclients_is_exact_under_a_connection_storm() {
    let (_node, port) = node(&["--maxclients", "50"]);
    // Let the readiness probe's connection go.
    std::thread::sleep(Duration::from_millis(200));
    let (pong, refused, kept) = storm(port, 160);
    assert_eq!((pong, refused), (50, 110));
    drop(kept);
}

#[test]
fn maxclients_is_fitted_to_a_low_open_files_limit() {
    let dir = scratch_dir();
    let port = free_port();
    let exe = env!("CARGO_BIN_EXE_leasehold-server");
    let log = dir.join("server.log");
    // ulimit -n 128: 96 clients fit with the 32 descriptors kept aside.
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -n 128 && exec \"$0\" \"$@\" 2>>'{}' >>'{}'",
            log.display(),
            log.display()
        ))
        .arg(exe)
        .args([
            "--port",
            &port.to_string(),
            "--threads",
            "2",
            "--loglevel",
            "warn",
        ])
        .args(["--save", "", "--dir", &dir.display().to_string()])
        .stdout(Stdio::null());
    let _node: Proc = started(&mut cmd, port, "leasehold-server under ulimit -n 128");
    let got = call(port, &["CONFIG", "GET", "maxclients"]).unwrap();
    assert_eq!(words(&got), ["maxclients", "96"]);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("maxclients 10000 needs 10032 open files; the limit is 128"),
        "{logged}"
    );
    std::thread::sleep(Duration::from_millis(200));
    let (pong, refused, kept) = storm(port, 120);
    assert_eq!(
        (pong, refused),
        (96, 24),
        "every client past the limit hears why"
    );
    drop(kept);
}

/// `used_memory` from INFO memory, bytes.
fn used_memory(port: u16) -> u64 {
    let info = text(&call(port, &["INFO", "memory"]).unwrap());
    let line = info
        .lines()
        .find(|l| l.starts_with("used_memory:"))
        .unwrap();
    line["used_memory:".len()..].trim().parse().unwrap()
}

/// Idle connections that once sent a large argument hold none of it: four
/// that each SET and DEL a 40 MB value leave the server within 16 MB of
/// where it started, while they stay open.
#[test]
fn idle_connections_do_not_pin_their_largest_request() {
    let (_node, port) = node(&[]);
    let before = used_memory(port);
    let value = "v".repeat(40 << 20);
    let mut conns = Vec::new();
    for i in 0..4 {
        let mut c = leasehold_testkit::Conn::open(port).unwrap();
        let key = format!("big{i}");
        assert_eq!(text(&c.call(&["SET", &key, &value]).unwrap()), "OK");
        assert_eq!(c.call(&["DEL", &key]).unwrap(), Reply::Int(1));
        conns.push(c);
    }
    let after = used_memory(port);
    assert!(
        after < before + (16 << 20),
        "{} MB held by 4 idle connections (from {} MB)",
        after >> 20,
        before >> 20
    );
    drop(conns);
}

/// `client-output-buffer-limit normal`: a client that pipelines GETs of a
/// 2 MB value and never reads is closed once 4 MB wait unwritten; other
/// clients are served meanwhile, and without the limit (Redis's default
/// `normal 0 0 0`) nothing is closed.
#[test]
fn a_client_that_never_reads_is_closed_at_the_normal_output_limit() {
    let (_node, port) = node(&[]);
    let set = [
        "CONFIG",
        "SET",
        "client-output-buffer-limit",
        "normal 4mb 0 0",
    ];
    assert_eq!(text(&call(port, &set).unwrap()), "OK");
    let value = "v".repeat(2 << 20);
    assert_eq!(text(&call(port, &["SET", "big", &value]).unwrap()), "OK");
    let mut hog = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let gets: Vec<u8> = (0..40).flat_map(|_| b"GET big\r\n".to_vec()).collect();
    hog.write_all(&gets).unwrap();
    // Never read while the server fills the socket and its buffer.
    let closed = leasehold_testkit::wait_for("the hog closed", Duration::from_secs(10), || {
        let info = text(&call(port, &["INFO", "clients"]).unwrap());
        info.contains("connected_clients:1\r\n")
    });
    assert!(closed < Duration::from_secs(10));
    assert_eq!(text(&call(port, &["PING"]).unwrap()), "PONG");
    // What it can still read ends well before 40 replies (80 MB).
    hog.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    while let Ok(n) = hog.read(&mut buf) {
        if n == 0 {
            break;
        }
        got += n;
    }
    assert!(got < 20 << 20, "read {got} bytes after the close");
}

/// Twenty `SET k<i> <1 MB>` each followed by its `GET k<i>`, as one
/// pipeline: the bytes to send and the replies expected, in order.
fn set_get_pipeline() -> (Vec<u8>, Vec<u8>) {
    let (mut sent, mut want) = (BytesMut::new(), Vec::new());
    for i in 0..20u8 {
        let key = format!("k{i}");
        let value = vec![b'a' + i; 1 << 20];
        encode_request(&[&b"SET"[..], key.as_bytes(), &value], &mut sent);
        encode_request(&[b"GET", key.as_bytes()], &mut sent);
        want.extend_from_slice(b"+OK\r\n");
        want.extend_from_slice(format!("${}\r\n", value.len()).as_bytes());
        want.extend_from_slice(&value);
        want.extend_from_slice(b"\r\n");
    }
    (sent.to_vec(), want)
}

/// A client that writes its whole pipeline (20 MB of SETs, each followed by
/// a GET of its 1 MB value) before it reads any reply is answered, every
/// GET with its value, as Redis answers it: the server keeps reading while
/// the replies it owes (20 MB) stay under the output bound, instead of
/// waiting for a client that waits for it.
#[test]
fn a_pipeline_written_whole_before_any_read_is_answered() {
    let (_node, port) = node(&[]);
    let (sent, want) = set_get_pipeline();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let start = std::time::Instant::now();
    s.write_all(&sent)
        .expect("the server reads the whole pipeline before any reply is read");
    let mut got = vec![0u8; want.len()];
    s.read_exact(&mut got).expect("every reply within 10 s");
    assert!(
        got == want,
        "the replies differ from the values (first difference at byte {:?})",
        got.iter().zip(&want).position(|(a, b)| a != b)
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(text(&call(port, &["GET", "k19"]).unwrap()).len(), 1 << 20);
}

/// The bound on what a client that never reads makes the server hold: a
/// connection pipelining GETs of a 64 KB value (13 GB of replies) is read
/// until 64 MB of replies wait for it (`client-output-buffer-limit normal
/// 0 0 0`), then paused, not closed. CLIENT LIST shows that output as its
/// `omem` (at most one step of replies past the bound), its buffer's
/// allocation as `tot-mem` (at most twice that: it grows by doubling), the
/// server's memory grows by no more than three times it (the allocation
/// and the written part it still holds), however much the client sends;
/// other clients are served meanwhile, and once the client reads, its
/// replies come in order and reading resumes.
#[test]
fn a_client_that_never_reads_is_paused_at_the_output_bound() {
    const BOUND: u64 = 64 << 20;
    // One step of replies past the bound: MAX_PIPELINE of them at most.
    const STEP: u64 = 256 * ((64 << 10) + 16);
    let (_node, port) = node(&[]);
    let value = "v".repeat(64 << 10);
    assert_eq!(text(&call(port, &["SET", "big", &value]).unwrap()), "OK");
    let before = used_memory(port);
    let mut hog = TcpStream::connect(("127.0.0.1", port)).unwrap();
    hog.write_all(b"CLIENT SETNAME hog\r\n").unwrap();
    let mut ok = [0u8; 5];
    hog.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");
    let mut writer = hog.try_clone().unwrap();
    writer
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let gets: Vec<u8> = b"GET big\r\n".repeat(200_000);
    let sender = std::thread::spawn(move || writer.write_all(&gets));
    // The hog's CLIENT LIST field `name`, while it is listed.
    let field = |name: &str| {
        let list = text(&call(port, &["CLIENT", "LIST"]).unwrap());
        let line = list
            .lines()
            .find(|l| l.contains(" name=hog "))
            .map(str::to_owned);
        line.map(|l| {
            let f = l
                .split(' ')
                .find_map(|f| f.strip_prefix(&format!("{name}=")));
            f.unwrap().parse::<u64>().unwrap()
        })
    };
    wait_for(
        "the hog's output at the bound",
        Duration::from_secs(20),
        || field("omem").unwrap() >= BOUND,
    );
    std::thread::sleep(Duration::from_millis(500));
    let held = field("omem").expect("paused, not closed");
    assert!(
        (BOUND..BOUND + STEP).contains(&held),
        "omem {held} past the bound {BOUND} by more than a step"
    );
    let allocated = field("tot-mem").unwrap();
    assert!(allocated <= 2 * (BOUND + STEP), "tot-mem {allocated}");
    let grown = used_memory(port).saturating_sub(before);
    assert!(
        grown < 3 * (BOUND + STEP),
        "{} MB more held for a client that never reads",
        grown >> 20
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(field("omem"), Some(held), "paused: no more output");
    // The others are served meanwhile.
    assert_eq!(text(&call(port, &["SET", "other", "1"]).unwrap()), "OK");
    assert_eq!(text(&call(port, &["GET", "other"]).unwrap()), "1");
    // Reading resumes once the client reads: 2000 replies (more than the
    // bound held) come whole and in order.
    hog.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let reply = format!("$65536\r\n{value}\r\n").into_bytes();
    let mut got = vec![0u8; reply.len()];
    for i in 0..2000 {
        hog.read_exact(&mut got).unwrap();
        assert!(got == reply, "reply {i} is the value");
    }
    let _ = hog.shutdown(std::net::Shutdown::Both);
    let _ = sender.join();
}

/// A client that pipelines small commands faster than they are served,
/// reading its replies as they come: while its output stays under the
/// bound it is read on, but never while complete requests wait in its
/// buffer past MAX_PIPELINE, so its `qbuf` stays within about one read
/// budget (64 KB) instead of growing with what it sends (26 MB when it was
/// read on regardless).
#[test]
fn a_fast_pipeliner_is_not_read_faster_than_it_is_served() {
    let (_node, port) = node(&[]);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"CLIENT SETNAME flood\r\n").unwrap();
    let mut ok = [0u8; 5];
    s.read_exact(&mut ok).unwrap();
    let mut writer = s.try_clone().unwrap();
    let n = 1_000_000;
    let sender = std::thread::spawn(move || writer.write_all(&b"PING\r\n".repeat(n)));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let (mut got, mut most, mut buf) = (0, 0u64, vec![0u8; 1 << 20]);
    let mut last = std::time::Instant::now();
    while got < n * 7 {
        let k = s.read(&mut buf).expect("replies within 30 s");
        assert!(k > 0, "closed after {got} bytes of replies");
        got += k;
        if last.elapsed() > Duration::from_millis(20) {
            last = std::time::Instant::now();
            let list = text(&call(port, &["CLIENT", "LIST"]).unwrap());
            let line = list.lines().find(|l| l.contains(" name=flood ")).unwrap();
            let qbuf = line
                .split(' ')
                .find_map(|f| f.strip_prefix("qbuf="))
                .unwrap();
            most = most.max(qbuf.parse().unwrap());
        }
    }
    sender.join().unwrap().unwrap();
    assert!(most < 1 << 20, "qbuf reached {most} bytes");
}

/// SIGTERM under a pipelined load on both threads: the server stops
/// reading, lets every command it read run and answer, saves, and exits.
/// Each client's counter on the restarted server is exactly the number of
/// INCR replies that client got (none ran unanswered, none answered was
/// lost), and no reply is an error.
#[test]
fn sigterm_under_load_answers_every_command_that_ran() {
    stopped_under_load_answers_every_command_that_ran(|node, _| {
        let pid = node.0.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
    });
}

/// The same with the SHUTDOWN command from another client: it drains the
/// other connections as a signal does, saves, and closes its own
/// connection without a reply.
#[test]
fn shutdown_under_load_answers_every_command_that_ran() {
    stopped_under_load_answers_every_command_that_ran(|_, port| {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(b"SHUTDOWN\r\n").unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    });
}

fn stopped_under_load_answers_every_command_that_ran(stop: fn(&mut Proc, u16)) {
    let dir = scratch_dir();
    let port = free_port();
    // As node_command, with a save rule (a SIGTERM then saves).
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold-server"));
    cmd.args([
        "--port",
        &port.to_string(),
        "--threads",
        "2",
        "--loglevel",
        "warn",
    ]);
    cmd.args(["--save", "3600 1", "--dir", &dir.display().to_string()]);
    let mut node = started(&mut cmd, port, "leasehold-server");
    let clients: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let key = format!("counter:{i}");
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let batch: Vec<u8> = (0..16)
                    .flat_map(|_| format!("INCR {key}\r\n").into_bytes())
                    .collect();
                let (mut replies, mut pending) = (0u64, Vec::new());
                let mut buf = [0u8; 4096];
                'load: loop {
                    if s.write_all(&batch).is_err() {
                        break;
                    }
                    let mut got = 0;
                    while got < 16 {
                        let n = match s.read(&mut buf) {
                            Ok(0) | Err(_) => break 'load,
                            Ok(n) => n,
                        };
                        pending.extend_from_slice(&buf[..n]);
                        while let Some(end) = pending.windows(2).position(|w| w == b"\r\n") {
                            let line: Vec<u8> = pending.drain(..end + 2).collect();
                            assert_eq!(line[0], b':', "{}", String::from_utf8_lossy(&line));
                            replies += 1;
                            got += 1;
                        }
                    }
                }
                (key, replies)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    stop(&mut node, port);
    let status = node.0.wait().unwrap();
    assert!(status.success(), "exit status {status}");
    let counts: Vec<(String, u64)> = clients.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(counts.iter().all(|(_, n)| *n > 0), "{counts:?}");
    let _again = started(
        &mut command(&dir, port, &[]),
        port,
        "leasehold-server (restarted)",
    );
    for (key, n) in counts {
        let value = call(port, &["GET", &key]).unwrap();
        assert_eq!(text(&value), n.to_string(), "{key}: INCRs answered {n}");
    }
}

/// A replica ignores `maxmemory`, as Redis's does by default
/// (`replica-ignore-maxmemory yes`): past it, a write answers `-READONLY`,
/// not `-OOM`; the same node as a primary again answers `-OOM`.
#[test]
fn a_replica_past_maxmemory_answers_readonly_not_oom() {
    let (_node, port) = node(&[]);
    assert_eq!(
        text(&call(port, &["CONFIG", "SET", "maxmemory", "1mb"]).unwrap()),
        "OK"
    );
    let oom = "OOM command not allowed when used memory > 'maxmemory'.";
    wait_for(
        "-OOM",
        Duration::from_secs(5),
        || matches!(call(port, &["SET", "x", "1"]), Some(Reply::Error(e)) if e == oom),
    );
    let nobody = free_port().to_string();
    assert_eq!(
        text(&call(port, &["REPLICAOF", "127.0.0.1", &nobody]).unwrap()),
        "OK"
    );
    assert_eq!(
        call(port, &["SET", "x", "1"]).unwrap(),
        Reply::Error("READONLY You can't write against a read only replica.".into())
    );
    assert_eq!(
        text(&call(port, &["REPLICAOF", "NO", "ONE"]).unwrap()),
        "OK"
    );
    assert_eq!(
        call(port, &["SET", "x", "1"]).unwrap(),
        Reply::Error(oom.into())
    );
}

/// `maxmemory` with Redis's noeviction: past it, commands that may
/// allocate are refused with `-OOM` and change nothing; reads and deletes
/// go on; back under it (or at 0) writes are served again.
#[test]
fn past_maxmemory_writes_are_refused_and_reads_go_on() {
    let (_node, port) = node(&[]);
    assert_eq!(text(&call(port, &["SET", "kept", "v"]).unwrap()), "OK");
    assert_eq!(
        text(&call(port, &["CONFIG", "SET", "maxmemory", "1mb"]).unwrap()),
        "OK"
    );
    let oom = "OOM command not allowed when used memory > 'maxmemory'.";
    // Thread 0's timer looks at the memory 10 times a second.
    leasehold_testkit::wait_for(
        "-OOM",
        Duration::from_secs(5),
        || matches!(call(port, &["SET", "x", "1"]), Some(Reply::Error(e)) if e == oom),
    );
    let lease = call(port, &["TOKENLEASE", "rl:new", "10", "1", "1000", "1"]).unwrap();
    assert_eq!(lease, Reply::Error(oom.into()));
    assert_eq!(
        call(port, &["SET", "y", "1"]).unwrap(),
        Reply::Error(oom.into())
    );
    assert_eq!(text(&call(port, &["GET", "kept"]).unwrap()), "v");
    assert_eq!(
        call(port, &["EXISTS", "y", "rl:new"]).unwrap(),
        Reply::Int(0)
    );
    assert_eq!(call(port, &["DEL", "kept"]).unwrap(), Reply::Int(1));
    let info = text(&call(port, &["INFO", "memory"]).unwrap());
    assert!(info.contains("maxmemory:1048576\r\n"), "{info}");
    assert_eq!(
        text(&call(port, &["CONFIG", "SET", "maxmemory", "0"]).unwrap()),
        "OK"
    );
    leasehold_testkit::wait_for("writes again", Duration::from_secs(5), || {
        call(port, &["SET", "x", "1"]).is_some_and(|r| text(&r) == "OK")
    });
}
