//! TLS end to end: a `leasehold-server` process with `tls-port`, a CA, a
//! server and a client certificate made by the test (rcgen), and clients
//! over rustls: round trips, `tls-auth-clients` yes / optional / no, bad
//! bytes on the TLS port, large pipelines (one written whole before any
//! reply is read), bad files at start, TLS only.
//! `redis-cli --tls` is driven too when it is installed; it is skipped with
//! a notice when not, unless `LEASEHOLD_REQUIRE_REDIS=1` (CI), which makes
//! it fail.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use leasehold_protocol::Reply;
use leasehold_testkit::{call, free_port, node_command, scratch_dir, text, wait_for, Proc};

mod tls_support;

use tls_support::{Pki, TlsConn};

const EXE: &str = env!("CARGO_BIN_EXE_leasehold-server");

/// A server with TLS: its plain port (0 for none), its TLS port, its
/// directory (the PEM files are there).
struct Node {
    _proc: Proc,
    port: u16,
    tls_port: u16,
    pki: Pki,
}

/// Starts a node with `tls-auth-clients auth` (plain port too unless
/// `tls_only`) and waits until it answers over TLS.
fn node(auth: &str, tls_only: bool) -> Node {
    let dir = scratch_dir();
    let pki = Pki::new(&dir);
    let (port, tls_port) = (if tls_only { 0 } else { free_port() }, free_port());
    let mut cmd = node_command(EXE, port, &dir);
    cmd.args(pki.flags(tls_port, auth));
    let proc = Proc(cmd.stdout(Stdio::null()).spawn().expect("leasehold-server"));
    let client = pki.client(true);
    wait_for("TLS node up", Duration::from_secs(10), || {
        TlsConn::open(&client, tls_port).is_ok_and(|mut c| c.call(&["PING"]).is_ok())
    });
    Node {
        _proc: proc,
        port,
        tls_port,
        pki,
    }
}

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

#[test]
fn resp_round_trips_over_tls_and_the_plain_port_still_serves() {
    let n = node("yes", false);
    let mut c = TlsConn::open(&n.pki.client(true), n.tls_port).unwrap();
    assert_eq!(c.call(&["PING"]).unwrap(), Reply::Simple("PONG".into()));
    assert_eq!(c.call(&["SET", "k", "over tls"]).unwrap(), ok());
    assert_eq!(text(&c.call(&["GET", "k"]).unwrap()), "over tls");
    // Keys on every shard: replies from another thread come back through
    // this connection's session, not written to its socket directly.
    for i in 0..50 {
        let key = format!("key{i}");
        assert_eq!(c.call(&["INCRBY", &key, "7"]).unwrap(), Reply::Int(7));
    }
    let keys: Vec<String> = (0..50).map(|i| format!("key{i}")).collect();
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    let Reply::Array(values) = c.call(&mget).unwrap() else {
        panic!("MGET answers an array");
    };
    assert!(values.iter().all(|v| text(v) == "7"), "{values:?}");
    // The plain port sees the same data.
    assert_eq!(
        call(n.port, &["GET", "k"]).map(|r| text(&r)).as_deref(),
        Some("over tls")
    );
    // CONFIG GET shows the settings; CONFIG SET refuses them.
    let Reply::Array(got) = c.call(&["CONFIG", "GET", "tls-*"]).unwrap() else {
        panic!("CONFIG GET answers an array");
    };
    let got: Vec<String> = got.iter().map(text).collect();
    let port = n.tls_port.to_string();
    let ca = n.pki.ca.display().to_string();
    for pair in [
        ["tls-port", &port],
        ["tls-auth-clients", "yes"],
        ["tls-ca-cert-file", &ca],
    ] {
        assert!(got.windows(2).any(|w| w == pair), "{pair:?} in {got:?}");
    }
    let set = c.call(&["CONFIG", "SET", "tls-port", "1"]).unwrap();
    assert!(text(&set).contains("can't set immutable config"), "{set:?}");
}

#[test]
fn client_certificates_are_checked_as_tls_auth_clients_says() {
    // yes: a client without a certificate is refused in the handshake (or
    // at its first request: TLS 1.3 clients finish before the server checks).
    let n = node("yes", false);
    let refused =
        TlsConn::open(&n.pki.client(false), n.tls_port).and_then(|mut c| c.call(&["PING"]));
    assert!(refused.is_err(), "{refused:?}");
    let mut c = TlsConn::open(&n.pki.client(true), n.tls_port).unwrap();
    assert_eq!(c.call(&["PING"]).unwrap(), Reply::Simple("PONG".into()));
    drop(n);
    // optional: without one is fine, with one too.
    let n = node("optional", false);
    for with_cert in [false, true] {
        let mut c = TlsConn::open(&n.pki.client(with_cert), n.tls_port).unwrap();
        assert_eq!(
            c.call(&["PING"]).unwrap(),
            Reply::Simple("PONG".into()),
            "{with_cert}"
        );
    }
    drop(n);
    // no: no CA file at all; a certificate is not asked for.
    let n = node("no", false);
    let mut c = TlsConn::open(&n.pki.client(false), n.tls_port).unwrap();
    assert_eq!(c.call(&["SET", "a", "1"]).unwrap(), ok());
}

#[test]
fn bad_bytes_on_the_tls_port_close_only_that_connection() {
    let n = node("yes", false);
    let mut keep = TlsConn::open(&n.pki.client(true), n.tls_port).unwrap();
    assert_eq!(keep.call(&["SET", "kept", "1"]).unwrap(), ok());
    for garbage in [
        &b"PING\r\n"[..],
        &[0x16, 0x03, 0x01, 0xff, 0xff, 1, 2, 3][..],
        &[0u8; 600][..],
    ] {
        let mut raw = TcpStream::connect(("127.0.0.1", n.tls_port)).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        raw.write_all(garbage).unwrap();
        // Closed by the server: an alert at most, then the end.
        let mut got = Vec::new();
        let read = raw.read_to_end(&mut got);
        assert!(
            read.is_ok()
                || read
                    .as_ref()
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "{garbage:?}: {read:?}"
        );
        assert!(
            got.len() < 64,
            "{garbage:?}: no reply but an alert: {got:?}"
        );
        assert!(!got.starts_with(b"+") && !got.starts_with(b"-"), "{got:?}");
    }
    // The others go on, on both ports.
    assert_eq!(text(&keep.call(&["GET", "kept"]).unwrap()), "1");
    let mut fresh = TlsConn::open(&n.pki.client(true), n.tls_port).unwrap();
    assert_eq!(fresh.call(&["PING"]).unwrap(), Reply::Simple("PONG".into()));
    assert_eq!(call(n.port, &["PING"]), Some(Reply::Simple("PONG".into())));
}

#[test]
fn a_large_pipeline_over_tls_comes_back_whole_and_in_order() {
    let n = node("yes", false);
    let mut c = TlsConn::open(&n.pki.client(true), n.tls_port).unwrap();
    let keys: Vec<String> = (0..1000).map(|i| format!("p:{i}")).collect();
    let values: Vec<String> = (0..1000).map(|i| format!("value-{i}")).collect();
    let big: String = (0..1024 * 1024)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let mut requests: Vec<Vec<&str>> = Vec::new();
    for (k, v) in keys.iter().zip(&values) {
        requests.push(vec!["SET", k, v]);
    }
    requests.push(vec!["SET", "big", &big]);
    for k in &keys {
        requests.push(vec!["GET", k]);
    }
    requests.push(vec!["GET", "big"]);
    let refs: Vec<&[&str]> = requests.iter().map(Vec::as_slice).collect();
    let replies = c.pipeline(&refs).unwrap();
    assert_eq!(replies.len(), 2002);
    assert!(replies[..1001].iter().all(|r| *r == ok()));
    for (i, r) in replies[1001..2001].iter().enumerate() {
        assert_eq!(text(r), values[i], "GET p:{i}");
    }
    let back = text(&replies[2001]);
    assert_eq!(back.len(), big.len());
    assert!(back == big, "the 1 MB value comes back unchanged");
}

/// A client that writes its whole pipeline before it reads any reply: 20
/// SETs of 1 MB, each followed by its GET (20 MB of replies owed before
/// the client reads), over TLS. The server goes on reading and decrypting
/// while the replies wait, under the output bound, so the writes finish
/// and every GET answers its value.
#[test]
fn a_pipeline_written_whole_over_tls_before_any_read_is_answered() {
    let n = node("yes", false);
    let mut c = TlsConn::open(&n.pki.client(true), n.tls_port).unwrap();
    let values: Vec<String> = (0..20u8)
        .map(|i| char::from(b'a' + i).to_string().repeat(1 << 20))
        .collect();
    let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    let mut requests: Vec<Vec<&str>> = Vec::new();
    for (k, v) in keys.iter().zip(&values) {
        requests.push(vec!["SET", k, v]);
        requests.push(vec!["GET", k]);
    }
    let refs: Vec<&[&str]> = requests.iter().map(Vec::as_slice).collect();
    let start = std::time::Instant::now();
    let replies = c
        .pipeline(&refs)
        .expect("the whole pipeline is read before any reply is");
    assert!(start.elapsed() < Duration::from_secs(10));
    for (i, pair) in replies.chunks(2).enumerate() {
        assert_eq!(pair[0], ok(), "SET k{i}");
        assert!(text(&pair[1]) == values[i], "GET k{i} is its 1 MB value");
    }
}

#[test]
fn tls_only_when_the_plain_port_is_0() {
    let n = node("yes", true);
    let mut c = TlsConn::open(&n.pki.client(true), n.tls_port).unwrap();
    let Reply::Array(got) = c.call(&["CONFIG", "GET", "port"]).unwrap() else {
        panic!("CONFIG GET answers an array");
    };
    assert_eq!(got.iter().map(text).collect::<Vec<_>>(), ["port", "0"]);
    assert_eq!(n.port, 0);
}

#[test]
fn bad_tls_files_stop_the_start_naming_the_file() {
    let dir = scratch_dir();
    let pki = Pki::new(&dir);
    let junk = dir.join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let missing = dir.join("missing.key");
    let flags = pki.flags(free_port(), "yes");
    let with = |name: &str, value: &Path| {
        let mut f = flags.clone();
        let at = f.iter().position(|a| a == name).unwrap();
        f[at + 1] = value.display().to_string();
        f
    };
    let ca = pki.ca.display().to_string();
    let no_ca: Vec<String> = flags
        .iter()
        .filter(|a| *a != "--tls-ca-cert-file" && **a != ca)
        .cloned()
        .collect();
    let cases = [
        (
            with("--tls-cert-file", &junk),
            format!("tls-cert-file {} holds no PEM certificate", junk.display()),
        ),
        (
            with("--tls-key-file", &missing),
            format!("cannot read tls-key-file {}", missing.display()),
        ),
        (
            with("--tls-key-file", &pki.client_key),
            "do not make a certificate and its key".to_string(),
        ),
        (
            with("--tls-ca-cert-file", &junk),
            format!(
                "tls-ca-cert-file {} holds no PEM certificate",
                junk.display()
            ),
        ),
        (
            no_ca,
            "tls-ca-cert-file must be set when tls-auth-clients is yes".to_string(),
        ),
    ];
    for (flags, want) in cases {
        let out = node_command(EXE, free_port(), &dir)
            .args(&flags)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
            .wait_with_output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?} started");
        assert!(err.contains(&want), "{flags:?}: {err}");
    }
}

#[test]
fn redis_cli_speaks_to_the_tls_port() {
    const TEST: &str = "redis_cli_speaks_to_the_tls_port";
    if !leasehold_testkit::probe_runs(
        "redis-cli",
        &["--tls", "--version"],
        "LEASEHOLD_REQUIRE_REDIS",
        "redis-cli (with TLS) is not on PATH",
        TEST,
    ) {
        return;
    }
    let n = node("yes", false);
    let p = |p: &PathBuf| p.display().to_string();
    let cli = |args: &[&str]| {
        let out = Command::new("redis-cli")
            .args(["--tls", "--cacert", &p(&n.pki.ca)])
            .args([
                "--cert",
                &p(&n.pki.client_cert),
                "--key",
                &p(&n.pki.client_key),
            ])
            .args(["-h", "127.0.0.1", "-p", &n.tls_port.to_string()])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(cli(&["PING"]), "PONG");
    assert_eq!(cli(&["SET", "cli", "tls"]), "OK");
    assert_eq!(cli(&["GET", "cli"]), "tls");
    assert_eq!(
        call(n.port, &["GET", "cli"]).map(|r| text(&r)).as_deref(),
        Some("tls")
    );
}

#[test]
fn a_replica_syncs_over_tls_with_tls_replication() {
    let primary = node("yes", false);
    let mut c = TlsConn::open(&primary.pki.client(true), primary.tls_port).unwrap();
    for i in 0..100 {
        let key = format!("before:{i}");
        assert_eq!(c.call(&["SET", &key, &i.to_string()]).unwrap(), ok());
    }
    // The replica: no TLS port of its own, the primary's PEM files (its
    // certificate is its client certificate), the primary's TLS port.
    let dir = scratch_dir();
    let port = free_port();
    let p = |p: &PathBuf| p.display().to_string();
    let mut cmd = node_command(EXE, port, &dir);
    cmd.args(["--replicaof", &format!("127.0.0.1 {}", primary.tls_port)]);
    cmd.args(["--tls-replication", "yes"]);
    cmd.args(["--tls-cert-file", &p(&primary.pki.cert)]);
    cmd.args(["--tls-key-file", &p(&primary.pki.key)]);
    cmd.args(["--tls-ca-cert-file", &p(&primary.pki.ca)]);
    let _replica = leasehold_testkit::started(&mut cmd, port, "the TLS replica");
    let get = |key: &str| call(port, &["GET", key]).map(|r| text(&r));
    wait_for("the full sync over TLS", Duration::from_secs(10), || {
        get("before:99").as_deref() == Some("99")
    });
    for i in 0..100 {
        assert_eq!(get(&format!("before:{i}")), Some(i.to_string()));
    }
    // The stream after it, and the replica's ACKs back (WAIT counts them).
    for i in 0..100 {
        let key = format!("after:{i}");
        assert_eq!(c.call(&["INCRBY", &key, "3"]).unwrap(), Reply::Int(3));
    }
    assert_eq!(c.call(&["WAIT", "1", "5000"]).unwrap(), Reply::Int(1));
    wait_for("the stream over TLS", Duration::from_secs(10), || {
        get("after:99").as_deref() == Some("3")
    });
    assert_eq!(get("after:0").as_deref(), Some("3"));
    let info = text(&call(port, &["INFO", "replication"]).unwrap());
    assert!(info.contains("master_link_status:up"), "{info}");
    // The primary names the replica by its listening port, not the relay's.
    let info = text(&c.call(&["INFO", "replication"]).unwrap());
    let line = format!("slave0:ip=127.0.0.1,port={port},state=online");
    assert!(info.contains(&line), "{info}");
}
