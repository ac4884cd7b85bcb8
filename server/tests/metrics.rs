//! The Prometheus endpoint of a real server process (`--metrics-port`):
//! the series' values after a known set of commands (and of logins, ACL
//! refusals, pub/sub traffic, TLS clients, cluster redirections and
//! primaries learned from a sentinel), the histogram's shape, the text
//! format's rules, and the HTTP answers to other paths and methods.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use leasehold_testkit::{
    call, free_port, node_command, scratch_dir, started, text, tool_installed, wait_for, Conn,
    Proc, Reply,
};

mod common;
mod tls_support;

use common::{key_in, slot};
use tls_support::{Pki, TlsConn};

/// A node (two threads) with its metrics on another free port.
fn node() -> (Proc, u16, u16) {
    node_with(&scratch_dir(), &[])
}

/// The same, with more flags, its files in `dir`.
fn node_with(dir: &Path, flags: &[&str]) -> (Proc, u16, u16) {
    let (port, metrics) = (free_port(), free_port());
    let mut cmd = node_command(env!("CARGO_BIN_EXE_leasehold-server"), port, dir);
    cmd.args(["--metrics-port", &metrics.to_string()]);
    cmd.args(flags);
    (started(&mut cmd, port, "leasehold-server"), port, metrics)
}

/// Sends `request` and returns the status line and the body.
fn http(port: u16, request: &str) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("metrics port");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").expect("a head");
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// The samples of a scrape, by `name{labels}` as written.
fn scrape(port: u16) -> HashMap<String, f64> {
    let (status, body) = http(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let mut seen_type = std::collections::HashSet::new();
    let mut samples = HashMap::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert!(seen_type.insert(name.to_string()), "family twice: {name}");
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("name value");
        let family = series.split('{').next().unwrap();
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| family.strip_suffix(s))
            .filter(|b| seen_type.contains(*b))
            .unwrap_or(family);
        assert!(seen_type.contains(base), "sample before its TYPE: {line}");
        assert!(base.starts_with("leasehold_"), "{line}");
        let v: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
        assert!(
            samples.insert(series.to_string(), v).is_none(),
            "twice: {line}"
        );
    }
    samples
}

fn get(m: &HashMap<String, f64>, series: &str) -> f64 {
    *m.get(series)
        .unwrap_or_else(|| panic!("no series {series}; have {:?}", sorted(m)))
}

fn sorted(m: &HashMap<String, f64>) -> Vec<&String> {
    let mut k: Vec<_> = m.keys().collect();
    k.sort();
    k
}

#[test]
fn series_count_what_the_server_did() {
    let (_node, port, metrics) = node();
    let mut c = Conn::open(port).expect("connect");
    for i in 0..320 {
        assert_eq!(
            c.call(&["SET", &format!("k{i}"), "1"]),
            Some(Reply::Simple("OK".into()))
        );
    }
    assert_eq!(c.call(&["GET", "k1"]), Some(Reply::Bulk("1".into())));
    assert_eq!(c.call(&["GET", "missing"]), Some(Reply::Nil));
    // A rejection (arity) and a failure (not an integer), both ERR.
    assert!(matches!(c.call(&["GET"]), Some(Reply::Error(_))));
    c.call(&["SET", "s", "abc"]);
    assert!(matches!(c.call(&["INCR", "s"]), Some(Reply::Error(_))));
    // TOKENLEASE: 4 of 10 granted; 10 asked with MIN 1 gets the 6 left
    // (partial); then 5 asked with nothing left is denied.
    let lease = |c: &mut Conn, n: &str, extra: &[&str]| {
        let mut args = vec!["TOKENLEASE", "bucket", "10", "1", "60000", n];
        args.extend_from_slice(extra);
        match c.call(&args) {
            Some(Reply::Array(v)) => v[0].clone(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(lease(&mut c, "4", &[]), Reply::Int(4));
    assert_eq!(lease(&mut c, "10", &["MIN", "1"]), Reply::Int(6));
    assert_eq!(lease(&mut c, "5", &[]), Reply::Int(0));
    // CL.THROTTLE with a burst of 1: allowed, then limited.
    let throttle = |c: &mut Conn| match c.call(&["CL.THROTTLE", "cell", "0", "1", "60"]) {
        Some(Reply::Array(v)) => v[0].clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(throttle(&mut c), Reply::Int(0));
    assert_eq!(throttle(&mut c), Reply::Int(1));
    // Peeks decide nothing and count nothing (one of each command).
    assert_eq!(lease(&mut c, "0", &[]), Reply::Int(0));
    for peek in [
        &["CL.THROTTLE", "cell", "0", "1", "60", "0"][..],
        &["SLIDINGWINDOW", "win", "5", "60000", "COUNT", "0"],
        &["GCRA", "g", "0", "1", "60", "TOKENS", "0"],
    ] {
        assert!(matches!(c.call(peek), Some(Reply::Array(_))), "{peek:?}");
    }

    let m = scrape(metrics);
    assert_eq!(get(&m, r#"leasehold_commands_total{command="set"}"#), 321.0);
    assert_eq!(get(&m, r#"leasehold_commands_total{command="get"}"#), 2.0);
    assert_eq!(
        get(&m, r#"leasehold_commands_rejected_total{command="get"}"#),
        1.0
    );
    assert_eq!(
        get(&m, r#"leasehold_commands_failed_total{command="incr"}"#),
        1.0
    );
    assert_eq!(get(&m, r#"leasehold_errors_total{code="ERR"}"#), 2.0);
    let decisions = |cmd: &str, outcome: &str| {
        get(
            &m,
            &format!(
                r#"leasehold_rate_limit_decisions_total{{command="{cmd}",outcome="{outcome}"}}"#
            ),
        )
    };
    assert_eq!(decisions("tokenlease", "granted"), 1.0);
    assert_eq!(decisions("tokenlease", "partial"), 1.0);
    assert_eq!(decisions("tokenlease", "denied"), 1.0);
    assert_eq!(decisions("cl.throttle", "granted"), 1.0);
    assert_eq!(decisions("cl.throttle", "denied"), 1.0);
    assert_eq!(decisions("gcra", "granted"), 0.0);
    assert_eq!(decisions("gcra", "denied"), 0.0);
    assert_eq!(decisions("slidingwindow", "denied"), 0.0);
    assert_eq!(decisions("slidingwindow", "granted"), 0.0);
    // 320 k*, s, bucket, cell.
    assert_eq!(get(&m, "leasehold_keys"), 323.0);
    assert_eq!(get(&m, "leasehold_keys_expiring"), 2.0);
    assert!(get(&m, "leasehold_keyspace_hits_total") >= 1.0);
    assert_eq!(get(&m, "leasehold_clients_connected"), 1.0);
    assert_eq!(get(&m, "leasehold_replication_primary"), 1.0);
    assert_eq!(get(&m, "leasehold_replication_replicas_connected"), 0.0);
    assert_eq!(get(&m, "leasehold_shards"), 2.0);
    // Cluster mode's series only in cluster mode.
    assert!(
        !m.keys().any(|k| k.starts_with("leasehold_cluster_")),
        "{:?}",
        sorted(&m)
    );
    assert!(get(&m, "leasehold_memory_used_bytes") > 1e5);
    assert!(get(&m, "leasehold_net_input_bytes_total") > 320.0 * 20.0);

    // 321 SETs over two threads, one call in 32 per thread timed: at
    // least 8 samples; the buckets are cumulative up to +Inf = count.
    let count = get(
        &m,
        r#"leasehold_command_duration_seconds_count{command="set"}"#,
    );
    assert!((8.0..=12.0).contains(&count), "{count}");
    let inf = get(
        &m,
        r#"leasehold_command_duration_seconds_bucket{command="set",le="+Inf"}"#,
    );
    assert_eq!(inf, count);
    let mut last = 0.0;
    for le in ["0.000001", "0.000002", "0.000004", "0.001024", "1.048576"] {
        let b = get(
            &m,
            &format!(r#"leasehold_command_duration_seconds_bucket{{command="set",le="{le}"}}"#),
        );
        assert!(b >= last && b <= count, "le {le}: {b}");
        last = b;
    }
    let sum = get(
        &m,
        r#"leasehold_command_duration_seconds_sum{command="set"}"#,
    );
    assert!(sum > 0.0 && sum < count, "{sum}");
}

/// A family's sample for one label value, as `name{label="value"}`.
fn labelled(m: &HashMap<String, f64>, name: &str, label: &str, value: &str) -> f64 {
    get(m, &format!(r#"{name}{{{label}="{value}"}}"#))
}

/// Whether `reply` is an error starting with `code`.
fn is_error(reply: Option<Reply>, code: &str) -> bool {
    matches!(reply, Some(Reply::Error(e)) if e.starts_with(code))
}

#[test]
fn failed_logins_and_acl_refusals_are_counted_by_reason_as_info_counts_them() {
    let (_node, port, metrics) = node();
    let mut admin = Conn::open(port).expect("connect");
    let user = ["ACL", "SETUSER", "gw", "on", ">pw", "resetkeys", "~rl:*"];
    let rules = ["resetchannels", "&news", "-@all", "+get", "+publish"];
    let setuser: Vec<&str> = user.iter().chain(&rules).copied().collect();
    assert_eq!(admin.call(&setuser), Some(Reply::Simple("OK".into())));
    let mut gw = Conn::open(port).expect("connect");
    for _ in 0..2 {
        assert!(is_error(gw.call(&["AUTH", "gw", "wrong"]), "WRONGPASS"));
    }
    assert_eq!(
        gw.call(&["AUTH", "gw", "pw"]),
        Some(Reply::Simple("OK".into()))
    );
    // One command, two keys, three channels refused; what is allowed runs.
    assert!(is_error(gw.call(&["SET", "rl:1", "v"]), "NOPERM"));
    for key in ["other:1", "other:2"] {
        assert!(is_error(gw.call(&["GET", key]), "NOPERM"));
    }
    for channel in ["a", "b", "c"] {
        assert!(is_error(gw.call(&["PUBLISH", channel, "x"]), "NOPERM"));
    }
    assert_eq!(gw.call(&["GET", "rl:1"]), Some(Reply::Nil));
    assert_eq!(gw.call(&["PUBLISH", "news", "x"]), Some(Reply::Int(0)));

    let m = scrape(metrics);
    assert_eq!(get(&m, "leasehold_acl_auth_failures_total"), 2.0);
    let denials = |reason| labelled(&m, "leasehold_acl_denials_total", "reason", reason);
    assert_eq!(denials("command"), 1.0);
    assert_eq!(denials("key"), 2.0);
    assert_eq!(denials("channel"), 3.0);
    // A refused PUBLISH never ran.
    assert_eq!(get(&m, "leasehold_pubsub_messages_published_total"), 1.0);
    // INFO counts the same, under Redis's names.
    let stats = text(&admin.call(&["INFO", "stats"]).expect("INFO"));
    for (field, n) in [
        ("acl_access_denied_auth", 2),
        ("acl_access_denied_cmd", 1),
        ("acl_access_denied_key", 2),
        ("acl_access_denied_channel", 3),
    ] {
        assert!(
            stats.contains(&format!("\r\n{field}:{n}\r\n")),
            "{field}: {stats}"
        );
    }
}

/// INFO persistence's field `name` on the node on `port`.
fn info_persistence(port: u16, name: &str) -> f64 {
    let info = text(&call(port, &["INFO", "persistence"]).expect("INFO"));
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")));
    line.unwrap_or_else(|| panic!("no {name} in {info}"))
        .trim()
        .parse()
        .expect("a number")
}

#[test]
fn aof_series_follow_the_append_only_log_as_info_does() {
    let dir = scratch_dir();
    let (_off, _, metrics) = node_with(&scratch_dir(), &[]);
    let m = scrape(metrics);
    assert_eq!(get(&m, "leasehold_persistence_aof_enabled"), 0.0);
    assert_eq!(get(&m, "leasehold_persistence_aof_size_bytes"), 0.0);
    let (_node, port, metrics) = node_with(&dir, &["--appendonly", "yes"]);
    for i in 0..100 {
        let key = format!("k{i}");
        assert_eq!(call(port, &["SET", &key, "v"]), Some(Reply::ok()));
    }
    // The size counts what the log writer has written (within a second).
    let mut m = HashMap::new();
    wait_for("100 SETs in the log", Duration::from_secs(10), || {
        m = scrape(metrics);
        get(&m, "leasehold_persistence_aof_size_bytes") > 100.0 * 20.0
    });
    assert_eq!(get(&m, "leasehold_persistence_aof_enabled"), 1.0);
    assert_eq!(get(&m, "leasehold_persistence_aof_last_write_success"), 1.0);
    let size = get(&m, "leasehold_persistence_aof_size_bytes");
    assert_eq!(size, info_persistence(port, "aof_current_size"));
    // Turning the log on at start writes its base (a rewrite, as INFO says).
    let before = info_persistence(port, "aof_rewrites");
    assert_eq!(get(&m, "leasehold_persistence_aof_rewrites_total"), before);
    assert!(matches!(
        call(port, &["BGREWRITEAOF"]),
        Some(Reply::Simple(_))
    ));
    let mut m = HashMap::new();
    wait_for("the rewrite", Duration::from_secs(10), || {
        m = scrape(metrics);
        get(&m, "leasehold_persistence_aof_rewrites_total") == before + 1.0
    });
    assert_eq!(info_persistence(port, "aof_rewrites"), before + 1.0);
    assert_eq!(
        get(&m, "leasehold_persistence_aof_size_bytes"),
        info_persistence(port, "aof_current_size")
    );
}

#[test]
fn pubsub_series_follow_subscriptions_and_messages() {
    let (_node, port, metrics) = node();
    let mut one = Conn::open(port).expect("connect");
    let mut two = Conn::open(port).expect("connect");
    let mut publisher = Conn::open(port).expect("connect");
    let subscribed = |c: &mut Conn, requests: &[&[&str]]| {
        let replies = c.pipeline(requests).expect("subscribed");
        assert!(
            replies.iter().all(|r| matches!(r, Reply::Array(_))),
            "{replies:?}"
        );
    };
    subscribed(&mut one, &[&["SUBSCRIBE", "a"], &["SUBSCRIBE", "b"]]);
    subscribed(&mut two, &[&["SUBSCRIBE", "a"], &["PSUBSCRIBE", "n*"]]);
    let m = scrape(metrics);
    assert_eq!(get(&m, "leasehold_pubsub_channels"), 2.0);
    assert_eq!(get(&m, "leasehold_pubsub_patterns"), 1.0);
    assert_eq!(get(&m, "leasehold_pubsub_clients"), 2.0);
    assert_eq!(get(&m, "leasehold_pubsub_messages_published_total"), 0.0);
    // Two receivers of `a`, one pattern receiver of `news`, none of `z`.
    for (channel, receivers) in [("a", 2), ("news", 1), ("z", 0)] {
        assert_eq!(
            publisher.call(&["PUBLISH", channel, "hi"]),
            Some(Reply::Int(receivers))
        );
    }
    // Delivered on the subscribers' threads, after PUBLISH answered.
    let mut m = HashMap::new();
    wait_for("3 messages delivered", Duration::from_secs(5), || {
        m = scrape(metrics);
        get(&m, "leasehold_pubsub_messages_delivered_total") >= 3.0
    });
    assert_eq!(get(&m, "leasehold_pubsub_messages_delivered_total"), 3.0);
    assert_eq!(get(&m, "leasehold_pubsub_messages_published_total"), 3.0);
    // A subscriber gone: `b` has no subscriber left, `a` still has one.
    drop(one);
    wait_for("the subscriber's close", Duration::from_secs(5), || {
        m = scrape(metrics);
        get(&m, "leasehold_pubsub_clients") == 1.0
    });
    assert_eq!(get(&m, "leasehold_pubsub_channels"), 1.0);
    assert_eq!(get(&m, "leasehold_pubsub_patterns"), 1.0);
}

#[test]
fn tls_series_count_connections_and_failed_handshakes() {
    let dir = scratch_dir();
    let pki = Pki::new(&dir);
    let tls_port = free_port();
    let flags = pki.flags(tls_port, "yes");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (_node, _, metrics) = node_with(&dir, &flags);
    let m = scrape(metrics);
    assert_eq!(get(&m, "leasehold_tls_connections_received_total"), 0.0);
    assert_eq!(get(&m, "leasehold_tls_handshake_failures_total"), 0.0);
    // Two clients served, one without the certificate `yes` asks for, and
    // one that speaks plain RESP to the TLS port.
    let mut served = Vec::new();
    for _ in 0..2 {
        let mut c = TlsConn::open(&pki.client(true), tls_port).expect("TLS client");
        assert_eq!(c.call(&["PING"]).unwrap(), Reply::Simple("PONG".into()));
        served.push(c);
    }
    let refused = TlsConn::open(&pki.client(false), tls_port).and_then(|mut c| c.call(&["PING"]));
    assert!(refused.is_err(), "{refused:?}");
    let mut raw = TcpStream::connect(("127.0.0.1", tls_port)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    raw.write_all(b"PING\r\n").unwrap();
    // Closed by the server once it gave up: counted by then.
    let _ = raw.read_to_end(&mut Vec::new());
    let m = scrape(metrics);
    assert_eq!(get(&m, "leasehold_tls_connections_received_total"), 4.0);
    assert_eq!(get(&m, "leasehold_tls_handshake_failures_total"), 2.0);
    // The served clients' traffic after their handshake is no failure.
    for c in &mut served {
        assert_eq!(c.call(&["PING"]).unwrap(), Reply::Simple("PONG".into()));
    }
    assert_eq!(
        get(&scrape(metrics), "leasehold_tls_clients_connected"),
        2.0
    );
    drop(served);
    wait_for("the TLS clients gone", Duration::from_secs(5), || {
        get(&scrape(metrics), "leasehold_tls_clients_connected") == 0.0
    });
    assert_eq!(
        get(&scrape(metrics), "leasehold_tls_handshake_failures_total"),
        2.0
    );
}

/// A stand-in for a sentinel on a free port: it answers `SENTINEL
/// get-master-addr-by-name` with the port in `primary` (on 127.0.0.1) and
/// `SENTINEL MASTER` with the epoch beside it, and confirms a SUBSCRIBE.
fn fake_sentinel(primary: std::sync::Arc<std::sync::Mutex<(u16, u64)>>) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let primary = primary.clone();
            std::thread::spawn(move || serve_sentinel(stream, &primary));
        }
    });
    port
}

fn serve_sentinel(mut s: TcpStream, primary: &std::sync::Mutex<(u16, u64)>) {
    let limits = leasehold_protocol::Limits::default();
    let mut buf = bytes::BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Ok(Some(req)) = leasehold_protocol::decode_request(&mut buf, &limits) {
            let (port, epoch) = *primary.lock().unwrap();
            let words: Vec<String> = req
                .iter()
                .map(|w| String::from_utf8_lossy(w).to_ascii_lowercase())
                .collect();
            let reply = match words.get(1).map(String::as_str) {
                Some("get-master-addr-by-name") => Reply::Array(vec![
                    Reply::bulk("127.0.0.1"),
                    Reply::bulk(port.to_string()),
                ]),
                Some("master") => Reply::Array(vec![
                    Reply::bulk("config-epoch"),
                    Reply::bulk(epoch.to_string()),
                ]),
                _ => Reply::Array(vec![
                    Reply::bulk("subscribe"),
                    Reply::bulk("+switch-master"),
                    Reply::Int(1),
                ]),
            };
            let mut out = bytes::BytesMut::new();
            reply.encode(leasehold_protocol::Protocol::Resp2, &mut out);
            if s.write_all(&out).is_err() {
                return;
            }
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[test]
fn cluster_series_count_redirects_topology_versions_and_learned_primaries() {
    let dir = scratch_dir();
    let (p1, p2) = (free_port(), free_port());
    let primary = std::sync::Arc::new(std::sync::Mutex::new((p1, 1)));
    let sentinel = fake_sentinel(primary.clone());
    let port = free_port();
    // g0 (this node) 0-8191; g1 (master name m1, nothing listening)
    // 8192-16000; 16001-16383 unassigned.
    let topology = |version: u64| {
        format!(
            r#"version = {version}
sentinels = ["127.0.0.1:{sentinel}"]
[[group]]
name = "g0"
slots = ["0-8191"]
[[group.node]]
addr = "127.0.0.1:{port}"
role = "primary"
[[group]]
name = "g1"
slots = ["8192-16000"]
sentinel = "m1"
[[group.node]]
addr = "127.0.0.1:{p1}"
role = "primary"
[[group.node]]
addr = "127.0.0.1:{p2}"
role = "replica"
"#
        )
    };
    let file = dir.join("topology.toml");
    std::fs::write(&file, topology(3)).unwrap();
    let mut cmd = node_command(env!("CARGO_BIN_EXE_leasehold-server"), port, &dir);
    let metrics = free_port();
    cmd.args([
        "--metrics-port",
        &metrics.to_string(),
        "--cluster-enabled",
        "yes",
    ]);
    cmd.arg("--cluster-config-file").arg(&file);
    let _node = started(&mut cmd, port, "leasehold-server");
    let mut c = Conn::open(port).expect("connect");

    // The sentinel names the declared primary: no change.
    let m = scrape(metrics);
    assert_eq!(get(&m, "leasehold_cluster_topology_version"), 3.0);
    assert_eq!(get(&m, "leasehold_cluster_primary_changes_total"), 0.0);
    for kind in ["moved", "crossslot", "clusterdown"] {
        assert_eq!(
            labelled(&m, "leasehold_cluster_redirects_total", "kind", kind),
            0.0
        );
    }
    // 3 MOVED; 2 CROSSSLOT (MSET over two slots, EXEC of a transaction
    // over two slots); 1 CLUSTERDOWN.
    for i in 0..3 {
        let key = key_in(&format!("m{i}-"), 8192, 16000);
        assert!(is_error(c.call(&["GET", &key]), "MOVED"));
    }
    let (a, b) = (key_in("a", 0, 100), key_in("b", 200, 300));
    assert!(is_error(c.call(&["MSET", &a, "1", &b, "2"]), "CROSSSLOT"));
    let tx = c
        .pipeline(&[&["MULTI"], &["SET", &a, "1"], &["SET", &b, "2"], &["EXEC"]])
        .expect("a transaction");
    assert!(is_error(tx.last().cloned(), "CROSSSLOT"), "{tx:?}");
    let down = key_in("d", 16001, 16383);
    assert!(is_error(c.call(&["GET", &down]), "CLUSTERDOWN"));
    assert_eq!(c.call(&["SET", &a, "1"]), Some(Reply::Simple("OK".into())));
    let m = scrape(metrics);
    let redirects = |kind| labelled(&m, "leasehold_cluster_redirects_total", "kind", kind);
    assert_eq!(redirects("moved"), 3.0);
    assert_eq!(redirects("crossslot"), 2.0);
    assert_eq!(redirects("clusterdown"), 1.0);
    assert_eq!(redirects("ask"), 0.0);
    assert_eq!(get(&m, "leasehold_cluster_slots_migrating"), 0.0);

    // `a`'s slot put in migration to g1's primary: 2 ASK (a key not
    // here), 1 TRYAGAIN (one key here, one not), the gauge at 1.
    let nodes = text(&c.call(&["CLUSTER", "NODES"]).unwrap());
    let to = nodes
        .lines()
        .find(|l| l.contains(&format!("127.0.0.1:{p1}@")))
        .and_then(|l| l.split(' ').next())
        .unwrap_or_else(|| panic!("{nodes}"))
        .to_string();
    let s = slot(&a).to_string();
    let migrating = c.call(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &to]);
    assert_eq!(migrating, Some(Reply::Simple("OK".into())));
    let gone = format!("{{{a}}}gone");
    assert_eq!(slot(&gone), slot(&a));
    for _ in 0..2 {
        assert!(is_error(c.call(&["GET", &gone]), "ASK"));
    }
    // `a` was set above and is still here.
    assert!(is_error(c.call(&["MGET", &a, &gone]), "TRYAGAIN"));
    let m = scrape(metrics);
    let redirects = |kind| labelled(&m, "leasehold_cluster_redirects_total", "kind", kind);
    assert_eq!(redirects("ask"), 2.0);
    assert_eq!(redirects("tryagain"), 1.0);
    assert_eq!(redirects("moved"), 3.0);
    assert_eq!(get(&m, "leasehold_cluster_slots_migrating"), 1.0);
    assert_eq!(get(&m, "leasehold_cluster_slots_importing"), 0.0);
    let stable = c.call(&["CLUSTER", "SETSLOT", &s, "STABLE"]);
    assert_eq!(stable, Some(Reply::Simple("OK".into())));
    assert_eq!(
        get(&scrape(metrics), "leasehold_cluster_slots_migrating"),
        0.0
    );

    // A newer topology pushed.
    let pushed = c.call(&["LH.TOPOLOGY", "SET", "4", &topology(4)]);
    assert_eq!(pushed, Some(Reply::Simple("OK".into())));
    assert_eq!(
        get(&scrape(metrics), "leasehold_cluster_topology_version"),
        4.0
    );

    // A failover to p2, then back to p1: two changes, whatever the number
    // of polls that repeat them.
    let changes = || get(&scrape(metrics), "leasehold_cluster_primary_changes_total");
    for (n, (to, epoch)) in [(p2, 2), (p1, 3)].into_iter().enumerate() {
        *primary.lock().unwrap() = (to, epoch);
        wait_for("a learned primary", Duration::from_secs(5), || {
            changes() == (n + 1) as f64
        });
        let moved = c.call(&["GET", &key_in("m0-", 8192, 16000)]);
        assert!(
            matches!(&moved, Some(Reply::Error(e)) if e.ends_with(&format!(":{to}"))),
            "{moved:?}"
        );
    }
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(changes(), 2.0);
}

#[test]
fn other_paths_and_methods_get_http_errors_and_the_endpoint_survives() {
    let (_node, port, metrics) = node();
    let (status, _) = http(metrics, "GET /other HTTP/1.1\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let (status, _) = http(metrics, "POST /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
    let (status, _) = http(
        metrics,
        &format!("GET /{} HTTP/1.1\r\n\r\n", "x".repeat(9000)),
    );
    assert_eq!(status, "HTTP/1.1 400 Bad Request");
    // A client that connects and sends nothing does not stop the next
    // scrape for longer than the read timeout.
    let idle = TcpStream::connect(("127.0.0.1", metrics)).unwrap();
    let m = scrape(metrics);
    drop(idle);
    assert_eq!(get(&m, "leasehold_keys"), 0.0);
    let mut c = Conn::open(port).expect("connect");
    assert_eq!(c.call(&["PING"]), Some(Reply::Simple("PONG".into())));
}

/// Runs `program args` in the background until dropped.
fn background(program: &str, args: &[&str]) -> Proc {
    Proc(
        std::process::Command::new(program)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{program}: {e}")),
    )
}

/// Debian's `prometheus-redis-exporter`, unchanged, pointed at Leasehold:
/// the standard Redis series come out with Leasehold's values.
#[test]
fn redis_exporter_exports_the_standard_redis_series() {
    let exporter = "prometheus-redis-exporter";
    let test = "redis_exporter_exports_the_standard_redis_series";
    if !tool_installed(exporter, "--version", "LEASEHOLD_REQUIRE_PROMETHEUS", test) {
        return;
    }
    let (_node, port, _) = node();
    let mut c = Conn::open(port).expect("connect");
    for i in 0..5 {
        c.call(&["SET", &format!("k{i}"), "v"]);
    }
    c.call(&["SET", "ttl", "v", "EX", "100"]);
    let web = free_port();
    let _exporter = background(
        exporter,
        &[
            &format!("--redis.addr=127.0.0.1:{port}"),
            &format!("--web.listen-address=127.0.0.1:{web}"),
        ],
    );
    let mut body = String::new();
    leasehold_testkit::wait_for(
        "the exporter's first scrape",
        Duration::from_secs(10),
        || {
            if TcpStream::connect(("127.0.0.1", web)).is_err() {
                return false;
            }
            // HTTP/1.0: the exporter (Go's server) may answer an HTTP/1.1
            // request in chunks, whose size lines can cut a sample's line.
            body = http(web, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").1;
            body.lines().any(|l| l == "redis_up 1")
        },
    );
    let line = |name: &str| {
        body.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .unwrap_or_else(|| panic!("no {name} in the exporter's output"))
            .rsplit_once(' ')
            .unwrap()
            .1
            .parse::<f64>()
            .unwrap()
    };
    assert_eq!(line(r#"redis_db_keys{db="db0"}"#), 6.0);
    assert_eq!(line(r#"redis_db_keys_expiring{db="db0"}"#), 1.0);
    assert_eq!(line(r#"redis_commands_total{cmd="set"}"#), 6.0);
    assert_eq!(line(r#"redis_exporter_last_scrape_error{err=""}"#), 0.0);
    assert!(line("redis_connected_clients") >= 1.0);
    assert!(line("redis_memory_used_bytes") > 1e5);
    assert!(body.contains(r#"redis_version="7.0.15""#), "instance info");
}

/// The shipped alerting and recording rules pass `promtool check rules`
/// and their unit tests (`promtool test rules`).
#[test]
fn shipped_rules_pass_their_promtool_tests() {
    let test = "shipped_rules_pass_their_promtool_tests";
    if !tool_installed(
        "promtool",
        "--version",
        "LEASEHOLD_REQUIRE_PROMETHEUS",
        test,
    ) {
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus");
    for args in [
        ["check", "rules", "rules.yml"],
        ["test", "rules", "rules_test.yml"],
    ] {
        let out = std::process::Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("promtool");
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
