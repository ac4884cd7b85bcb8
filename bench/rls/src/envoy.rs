//! The latency Envoy's rate limit filter adds to a request: one Envoy with
//! two listeners in front of the same small upstream, one with
//! `envoy.filters.http.ratelimit` asking `leasehold-rls` (on leases) and
//! one without, driven in the same run by keep-alive HTTP/1.1 clients that
//! alternate between them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use leasehold_testkit::{free_port, wait_for, Proc};

/// An HTTP/1.1 upstream answering 200 `ok` to every request, on threads of
/// its own that end with the process.
pub fn upstream() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("upstream listens");
    let port = l.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = s.set_nodelay(true);
                let mut w = s.try_clone().expect("a clone of the stream");
                let mut r = BufReader::new(s);
                let mut line = String::new();
                loop {
                    line.clear();
                    match r.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) if line == "\r\n" => {
                            let ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if w.write_all(ok.as_bytes()).is_err() {
                                return;
                            }
                        }
                        Ok(_) => {}
                    }
                }
            });
        }
    });
    port
}

/// Envoy's bootstrap: `limited` (the filter, asking the RLS on `rls`) and
/// `plain` (no filter), both routing to `upstream`.
fn bootstrap(limited: u16, plain: u16, rls: u16, upstream: u16) -> String {
    let listener = |name: &str, port: u16, filter: bool| {
        let rl = if filter {
            r#"
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: bench
              failure_mode_deny: true
              timeout: 1s
              rate_limit_service:
                transport_api_version: V3
                grpc_service: { envoy_grpc: { cluster_name: rls } }"#
        } else {
            ""
        };
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
              - match: {{ prefix: "/" }}
                route:
                  cluster: upstream
                  rate_limits:
                  - actions:
                    - request_headers: {{ header_name: x-key, descriptor_key: d0 }}
          http_filters:{rl}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#
        )
    };
    format!(
        r#"static_resources:
  listeners:{}{}
  clusters:
  - name: rls
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{}} }}
    load_assignment:
      cluster_name: rls
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {rls} }} }} }}
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {upstream} }} }} }}
"#,
        listener("limited", limited, true),
        listener("plain", plain, false),
    )
}

/// One keep-alive connection's GET: the status code.
fn get(r: &mut BufReader<TcpStream>, key: u64) -> std::io::Result<u16> {
    write!(
        r.get_mut(),
        "GET / HTTP/1.1\r\nhost: bench\r\nx-key: k{key}\r\n\r\n"
    )?;
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("status line {line:?}")))?;
    let mut length = 0usize;
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other("closed mid-response"));
        }
        if line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body)?;
    Ok(status)
}

/// Latencies (µs) through each listener, and requests not answered 200.
pub struct Latency {
    /// Through the listener with the rate limit filter.
    pub limited: Histogram<u64>,
    /// Through the listener without it.
    pub plain: Histogram<u64>,
    /// Responses other than 200 (either listener).
    pub not_ok: u64,
}

/// Starts Envoy (`envoy`) in front of `rls` and an upstream, then runs
/// `clients` threads for `duration`, each alternating a request through
/// each listener on its two keep-alive connections.
///
/// # Panics
/// When Envoy does not start or a connection fails.
pub fn measure(
    envoy: &str,
    dir: &Path,
    rls: u16,
    clients: usize,
    keys: u64,
    duration: Duration,
) -> Latency {
    let up = upstream();
    let (limited, plain) = (free_port(), free_port());
    let config = dir.join("envoy.yaml");
    std::fs::write(&config, bootstrap(limited, plain, rls, up)).expect("envoy.yaml written");
    let _envoy = Proc(
        Command::new(envoy)
            .arg("-c")
            .arg(&config)
            .args(["--disable-hot-restart", "--concurrency", "1", "-l", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("envoy starts"),
    );
    wait_for("Envoy listens", Duration::from_secs(20), || {
        [limited, plain].iter().all(|&p| {
            TcpStream::connect(("127.0.0.1", p))
                .map(BufReader::new)
                .is_ok_and(|mut r| get(&mut r, 0).is_ok_and(|s| s == 200))
        })
    });
    let new = || Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    let end = Instant::now() + duration;
    let threads: Vec<_> = (0..clients.max(1))
        .map(|t| {
            std::thread::spawn(move || {
                let conn = |p| {
                    let s = TcpStream::connect(("127.0.0.1", p)).expect("a connection to Envoy");
                    s.set_nodelay(true).expect("nodelay");
                    s.set_read_timeout(Some(Duration::from_secs(5)))
                        .expect("timeout");
                    BufReader::new(s)
                };
                let (mut a, mut b) = (conn(limited), conn(plain));
                let (mut hl, mut hp, mut not_ok) = (new(), new(), 0);
                let mut n = t as u64;
                while Instant::now() < end {
                    for (r, h) in [(&mut a, &mut hl), (&mut b, &mut hp)] {
                        let t0 = Instant::now();
                        let status = get(r, n % keys.max(1)).expect("an answer from Envoy");
                        h.saturating_record((t0.elapsed().as_micros() as u64).max(1));
                        not_ok += u64::from(status != 200);
                    }
                    n += clients as u64;
                }
                (hl, hp, not_ok)
            })
        })
        .collect();
    let mut out = Latency {
        limited: new(),
        plain: new(),
        not_ok: 0,
    };
    for t in threads {
        let (hl, hp, n) = t.join().expect("a client thread");
        out.limited.add(hl).expect("same bounds");
        out.plain.add(hp).expect("same bounds");
        out.not_ok += n;
    }
    out
}
