//! Shared by the rls tests: a real Leasehold ledger on loopback (the server
//! library, started in this test process), `leasehold-rls` as a child
//! process (the binary cargo built for this crate) with its stderr in a
//! file, a gRPC client, and request builders.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::{Entry, RateLimitOverride},
    RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use leasehold_testkit::{call, free_port, text, wait_for, Proc, Reply};
use tonic::transport::Channel;

/// A Leasehold server in this process on a free loopback port, stopped on drop.
pub struct Ledger {
    pub port: u16,
    handle: Option<leasehold_server::ServerHandle>,
    dir: PathBuf,
}

impl Ledger {
    pub fn start() -> Ledger {
        Ledger::start_with(|_| {})
    }

    /// Starts one after `adjust` changed its configuration (a metrics
    /// port, say).
    pub fn start_with(adjust: impl FnOnce(&mut leasehold_server::config::Config)) -> Ledger {
        let mut c = leasehold_server::config::Config::default();
        c.net.bind = "127.0.0.1".into();
        c.net.port = free_port();
        c.shards.threads = 2;
        // No snapshot rules, and its files (if any) out of the source tree.
        c.persistence.save = String::new();
        let dir = leasehold_testkit::scratch_dir();
        c.persistence.dir = dir.display().to_string();
        adjust(&mut c);
        let clock = Arc::new(leasehold_server::clock::SystemClock::new());
        let handle = leasehold_server::start(c, clock).expect("the ledger listens");
        Ledger {
            port: handle.addr.port(),
            handle: Some(handle),
            dir,
        }
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A scratch directory under the system's temp dir, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(what: &str) -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "leasehold-rls-{what}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("a scratch dir");
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `leasehold-rls`: its gRPC port, config file and log.
pub struct Rls {
    pub port: u16,
    pub config: PathBuf,
    pub log: PathBuf,
    pub proc: Option<Proc>,
}

impl Rls {
    /// Starts `leasehold-rls` against the ledger on `ledger` with `yaml` as
    /// its config (checked for changes every 50 ms; lease deadline 200 ms,
    /// for a debug build on a loaded machine), and waits until it listens.
    pub fn start(dir: &Scratch, ledger: u16, yaml: &str, extra: &[&str]) -> Rls {
        let config = dir.path("limits.yaml");
        let log = dir.path("rls.log");
        std::fs::write(&config, yaml).expect("config written");
        let port = free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold-rls"));
        cmd.arg("--config")
            .arg(&config)
            .args(["--ledger", &format!("127.0.0.1:{ledger}")])
            .args(["--port", &port.to_string()])
            .args(["--reload-interval-ms", "50", "--lease-deadline-ms", "200"])
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("RLS_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        let proc = Proc(cmd.spawn().expect("leasehold-rls starts"));
        wait_for("leasehold-rls listens", Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Rls {
            port,
            config,
            log,
            proc: Some(proc),
        }
    }

    pub async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::connect(format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a gRPC channel")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops the process (SIGKILL).
    pub fn kill(&mut self) {
        self.proc = None;
    }
}

/// A descriptor of `(key, value)` entries.
pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

/// `desc` with its own hits_addend.
pub fn desc_hits(entries: &[(&str, &str)], hits: u64, negative: bool) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(UInt64Value { value: hits }),
        is_negative_hits: negative,
        ..desc(entries)
    }
}

/// `desc` carrying a `limit` override of `requests_per_unit` per `unit`
/// (an `envoy.type.v3.RateLimitUnit` number: 1 second ... 4 day, 0 unknown).
pub fn desc_limit(
    entries: &[(&str, &str)],
    requests_per_unit: u32,
    unit: i32,
) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit,
            unit,
        }),
        ..desc(entries)
    }
}

pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

/// Sends `req`, at most 10 s.
pub async fn ask(
    c: &mut RateLimitServiceClient<Channel>,
    req: RateLimitRequest,
) -> Result<RateLimitResponse, tonic::Status> {
    tokio::time::timeout(Duration::from_secs(10), c.should_rate_limit(req))
        .await
        .expect("ShouldRateLimit answers within 10 s")
        .map(|r| r.into_inner())
}

/// `(code, limit_remaining)` of each status.
pub fn codes(r: &RateLimitResponse) -> Vec<(Code, u32)> {
    r.statuses
        .iter()
        .map(|s| (code(s), s.limit_remaining))
        .collect()
}

pub fn code(s: &DescriptorStatus) -> Code {
    Code::try_from(s.code).expect("a known code")
}

pub fn overall(r: &RateLimitResponse) -> Code {
    Code::try_from(r.overall_code).expect("a known code")
}

/// The response header `name`'s value.
pub fn header<'a>(r: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

/// Subscribers of `channel` on the ledger on `ledger` (PUBSUB NUMSUB).
pub fn subscribers(ledger: u16, channel: &str) -> i64 {
    match call(ledger, &["PUBSUB", "NUMSUB", channel]) {
        Some(Reply::Array(a)) => text(&a[1]).parse().unwrap_or(0),
        _ => 0,
    }
}

/// RLSTATE of `key` on the ledger on `port` as field -> value, or `None`
/// when the reply is not a map (an error such as `-MOVED`, or nil).
pub fn try_rlstate(port: u16, key: &str) -> Option<std::collections::HashMap<String, String>> {
    match call(port, &["RLSTATE", key])? {
        Reply::Array(a) => Some(a.chunks(2).map(|kv| (text(&kv[0]), text(&kv[1]))).collect()),
        Reply::Map(m) => Some(m.iter().map(|(k, v)| (text(k), text(v))).collect()),
        _ => None,
    }
}

/// [`try_rlstate`], which must answer.
pub fn rlstate(port: u16, key: &str) -> std::collections::HashMap<String, String> {
    try_rlstate(port, key).unwrap_or_else(|| panic!("RLSTATE {key}: no state"))
}
