//! A minimal rate-limiting HTTP gateway in front of nothing: it identifies the
//! caller (X-API-Key, else its /24 or /64 subnet), asks the lease manager,
//! and answers 200, 429 (over quota) or 503 (ledger down, fail_closed) with
//! the IETF RateLimit headers. See docs/client.md.
//!
//! ```text
//! LEASEHOLD_ADDR=127.0.0.1:6379 GATEWAY_ADDR=127.0.0.1:8080 \
//!   POLICY_FILE=policies.yaml METRICS_ADDR=127.0.0.1:9102 \
//!   cargo run -p leasehold-client --example gateway
//! ```
//!
//! With `LEASEHOLD_CLUSTER=127.0.0.1:7000,127.0.0.1:7001` instead of
//! `LEASEHOLD_ADDR`, the ledger is a cluster, and those are its seed nodes.
//!
//! With `LEASEHOLD_PASSWORD` set (and `LEASEHOLD_USER` for an ACL user),
//! every ledger connection authenticates with `AUTH` first.
//!
//! With `OVERRIDE_CHANNEL=leasehold-rls:override` set, the lease manager
//! follows that ledger channel for emergency overrides (`PUBLISH
//! leasehold-rls:override "<domain> <policy> disable 60000"`; docs/rls.md).
//!
//! With `METRICS_ADDR` set, the lease manager's metrics (decisions,
//! `rate_limit_bypassed_total`, ledger call latency, lease sizes, breaker
//! state; `docs/operations.md`) are served in Prometheus's text format on
//! `http://METRICS_ADDR/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use leasehold_client::{
    identity, Address, Client, ClientConfig, CoarseClock, LeaseConfig, LeaseManager, Outcome,
    PolicySet,
};

/// Used when POLICY_FILE is not set.
const DEFAULT_POLICIES: &str = r#"
domain: gateway
descriptors:
  - key: api_key
    rate_limit: { unit: minute, requests_per_unit: 600 }
    burst: 100
    failure_mode: fail_open
  - key: subnet
    rate_limit: { unit: minute, requests_per_unit: 60 }
    failure_mode: fail_closed
"#;

struct App {
    manager: LeaseManager,
    policies: PolicySet,
}

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[tokio::main]
async fn main() {
    // Errors as their messages (a policy file's names the place), not as
    // `main`'s Debug dump.
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let ledger: SocketAddr = env("LEASEHOLD_ADDR", "127.0.0.1:6379").parse()?;
    let listen: SocketAddr = env("GATEWAY_ADDR", "127.0.0.1:8080").parse()?;
    let policies = match std::env::var("POLICY_FILE") {
        Ok(path) => PolicySet::from_file(path.as_ref())?,
        Err(_) => PolicySet::from_yaml(DEFAULT_POLICIES)?,
    };
    if let Ok(addr) = std::env::var("METRICS_ADDR") {
        let addr: SocketAddr = addr.parse()?;
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
            .map_err(|e| format!("METRICS_ADDR {addr}: {e}"))?;
        println!("metrics on http://{addr}/metrics");
    }
    let config = match std::env::var("LEASEHOLD_CLUSTER") {
        Ok(seeds) => ClientConfig::cluster(
            seeds
                .split(',')
                .map(|s| s.trim().parse())
                .collect::<Result<_, _>>()?,
        ),
        Err(_) => ClientConfig::new(ledger),
    };
    let config = match std::env::var("LEASEHOLD_PASSWORD") {
        Ok(password) => {
            let user = std::env::var("LEASEHOLD_USER").ok();
            config.with_auth(user.as_deref(), &password)
        }
        Err(_) => config,
    };
    let ledger = match &config.address {
        Address::Cluster(c) => format!("the cluster of {:?}", c.seeds),
        _ => ledger.to_string(),
    };
    let client = Client::new(config);
    // Connect before serving, so that the first request's lease call does
    // not pay for the connect within its 5 ms deadline. A ledger that is
    // down is not fatal: the policies' failure modes cover it.
    if let Err(e) = client.connect().await {
        eprintln!("ledger at {ledger} not reachable yet ({e}); serving with failure modes");
    }
    let manager = LeaseManager::new(
        client,
        &policies,
        LeaseConfig::default(),
        CoarseClock::start(),
    );
    if let Ok(channel) = std::env::var("OVERRIDE_CHANNEL") {
        manager.follow_overrides(channel);
    }
    let app = Arc::new(App {
        manager: manager.clone(),
        policies,
    });
    let router = Router::new().fallback(any(handle)).with_state(app);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("gateway on http://{listen}, ledger at {ledger}");
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    manager.shutdown().await; // give unspent tokens back
    Ok(())
}

async fn handle(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    let api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    let (kind, who) = identity::caller(api_key, peer.ip());
    let Some(id) = app.policies.find(&[(kind, &who)]) else {
        return (StatusCode::OK, "no policy\n").into_response();
    };
    let d = app.manager.decide(id, who.as_bytes()).await;
    let name = &app.manager.policy(id).name;
    let status = match d.outcome {
        _ if d.allowed => StatusCode::OK,
        // The ledger is down and the policy fails closed: not the caller's fault.
        Outcome::FailedClosed(_) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::TOO_MANY_REQUESTS,
    };
    let mut out = HeaderMap::new();
    let mut put = |k: &'static str, v: String| {
        if let Ok(v) = HeaderValue::from_str(&v) {
            out.insert(k, v);
        }
    };
    put("ratelimit-policy", d.ratelimit_policy_header(name));
    put("ratelimit", d.ratelimit_header(name));
    if let Some(s) = d.retry_after_header().filter(|_| !d.allowed) {
        put("retry-after", s);
    }
    if d.outcome == Outcome::SoftOverQuota {
        put(
            "ratelimit-warning",
            "over quota; enforcement is planned".to_owned(),
        );
    }
    let body = format!("{} {} ({})\n", status.as_u16(), d.outcome.label(), who);
    (status, out, body).into_response()
}
