//! A real Prometheus (Debian's `prometheus`) scrapes a running ledger
//! (`--metrics-port`) and a running `leasehold-rls` (the gateway side) with
//! the shipped rules (`deploy/prometheus/rules.yml`, their `for:` waits and
//! group intervals cut to 1 s so the test takes seconds): its HTTP API
//! finds both sides' series, and once the ledger is killed, while Envoy-like
//! requests keep coming and fail open, `LeaseholdDown` and
//! `LeaseholdBypassAboveBudget` fire.
//!
//! Skipped with a notice when `prometheus` is not on PATH, unless
//! `LEASEHOLD_REQUIRE_PROMETHEUS=1` (CI), which makes that a failure.

mod support;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use leasehold_testkit::{free_port, tool_installed, Proc};
use support::*;

const LIMITS: &str = "\
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 1000000 }
";

/// `GET path` on 127.0.0.1:`port`, the body (empty when it cannot connect).
fn get(port: u16, path: &str) -> String {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

/// `query` percent-encoded for a URL.
fn encode(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The number of series an instant query returns.
fn series(prom: u16, query: &str) -> usize {
    let body = get(prom, &format!("/api/v1/query?query={}", encode(query)));
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) else {
        return 0;
    };
    v["data"]["result"].as_array().map_or(0, Vec::len)
}

/// Names of the alerts firing now.
fn firing(prom: u16) -> Vec<String> {
    let body = get(prom, "/api/v1/alerts");
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) else {
        return Vec::new();
    };
    v["data"]["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["state"] == "firing")
        .filter_map(|a| a["labels"]["alertname"].as_str().map(String::from))
        .collect()
}

/// The shipped rules with every `for:` and group `interval:` at 1 s.
fn fast_rules() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/prometheus/rules.yml"
    );
    let text = std::fs::read_to_string(path).expect("the shipped rules");
    text.lines()
        .map(|l| {
            let t = l.trim_start();
            let indent = &l[..l.len() - t.len()];
            if t.starts_with("for: ") {
                format!("{indent}for: 1s")
            } else if t.starts_with("interval: ") {
                format!("{indent}interval: 1s")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_both_sides_and_alerts_when_the_ledger_dies() {
    let test = "prometheus_scrapes_both_sides_and_alerts_when_the_ledger_dies";
    if !tool_installed(
        "prometheus",
        "--version",
        "LEASEHOLD_REQUIRE_PROMETHEUS",
        test,
    ) {
        return;
    }
    let dir = Scratch::new("prometheus");
    let ledger_metrics = free_port();
    let ledger = Ledger::start_with(|c| c.net.metrics_port = ledger_metrics);
    let rls_metrics = free_port();
    let rls = Rls::start(
        &dir,
        ledger.port,
        LIMITS,
        &["--metrics-port", &rls_metrics.to_string()],
    );
    std::fs::write(dir.path("rules.yml"), fast_rules()).unwrap();
    std::fs::write(
        dir.path("prometheus.yml"),
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: [rules.yml]\n\
             scrape_configs:\n\
             \x20 - job_name: leasehold\n\
             \x20   static_configs: [{{targets: [\"127.0.0.1:{ledger_metrics}\"]}}]\n\
             \x20 - job_name: gateway\n\
             \x20   static_configs: [{{targets: [\"127.0.0.1:{rls_metrics}\"]}}]\n"
        ),
    )
    .unwrap();
    let prom = free_port();
    let _prometheus = Proc(
        std::process::Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.path("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.path("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus starts"),
    );
    let mut c = rls.client().await;
    let user = || request("edge", vec![desc(&[("user", "u1")])]);
    // Traffic while the ledger is up, until Prometheus has both sides.
    let start = Instant::now();
    let wanted = [
        r#"leasehold_rate_limit_decisions_total{job="leasehold",command="tokenlease",outcome="granted"} > 0"#,
        r#"leasehold_commands_total{job="leasehold",command="tokenlease"} > 0"#,
        r#"rate_limit_decisions_total{job="gateway",outcome="allowed"} > 0"#,
        r#"up{job="leasehold"} == 1"#,
        r#"up{job="gateway"} == 1"#,
    ];
    while !wanted.iter().all(|q| series(prom, q) > 0) {
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "series missing after 40 s: {:?}; prometheus log:\n{}",
            wanted
                .iter()
                .filter(|q| series(prom, q) == 0)
                .collect::<Vec<_>>(),
            std::fs::read_to_string(dir.path("prometheus.log")).unwrap_or_default()
        );
        ask(&mut c, user()).await.expect("an answer");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = firing(prom);
    assert!(
        !before
            .iter()
            .any(|a| a == "LeaseholdDown" || a == "LeaseholdBypassAboveBudget"),
        "{before:?}"
    );
    // The ledger dies; requests keep coming and fail open.
    drop(ledger);
    let killed = Instant::now();
    loop {
        let now = firing(prom);
        if now.iter().any(|a| a == "LeaseholdDown")
            && now.iter().any(|a| a == "LeaseholdBypassAboveBudget")
        {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(45),
            "alerts after 45 s: {now:?}"
        );
        let _ = ask(&mut c, user()).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(series(prom, r#"rate_limit_bypassed_total{job="gateway"} > 0"#) > 0);
}
