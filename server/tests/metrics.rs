//! The Prometheus endpoint of a real server process (`--metrics-port`):
//! the series' values after a known set of commands, the histogram's
//! shape, the text format's rules, and the HTTP answers to other paths and
//! methods.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use leasehold_testkit::{
    free_port, node_command, scratch_dir, started, tool_installed, Conn, Proc, Reply,
};

/// A node (two threads) with its metrics on another free port.
fn node() -> (Proc, u16, u16) {
    let (dir, port, metrics) = (scratch_dir(), free_port(), free_port());
    let mut cmd = node_command(env!("CARGO_BIN_EXE_leasehold-server"), port, &dir);
    cmd.args(["--metrics-port", &metrics.to_string()]);
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
    // 320 k*, s, bucket, cell.
    assert_eq!(get(&m, "leasehold_keys"), 323.0);
    assert_eq!(get(&m, "leasehold_keys_expiring"), 2.0);
    assert!(get(&m, "leasehold_keyspace_hits_total") >= 1.0);
    assert_eq!(get(&m, "leasehold_clients_connected"), 1.0);
    assert_eq!(get(&m, "leasehold_replication_primary"), 1.0);
    assert_eq!(get(&m, "leasehold_replication_replicas_connected"), 0.0);
    assert_eq!(get(&m, "leasehold_shards"), 2.0);
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
            body = http(
                web,
                "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            )
            .1;
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
