//! `leasehold-rls`: flags, logging, the ledger client, the gRPC server
//! (rate limit service and gRPC health), Prometheus on `/metrics`, and a
//! clean stop on SIGINT/SIGTERM (unspent tokens returned to the ledger).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use leasehold_client::{
    policy, Address, Client, ClientConfig, Credentials, LeaseConfig, SystemClock,
};
use leasehold_rls::adhoc::AdHoc;
use leasehold_rls::limits::{self, Ledger, Limits, Shared};
use leasehold_rls::service::{Decide, Service};
use metrics_exporter_prometheus::PrometheusBuilder;

/// Envoy rate limit service backed by Leasehold leases.
#[derive(Debug, Parser)]
#[command(name = "leasehold-rls", version)]
struct Flags {
    /// The limits: envoyproxy/ratelimit YAML, one document per domain,
    /// reloaded when it changes.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The Leasehold node to lease from; with `--cluster`, a node of the
    /// cluster to read its slot map from (repeat the flag for more seeds).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:6379")]
    ledger: Vec<String>,
    /// The ledger is a Leasehold cluster (`cluster-enabled yes`): each key
    /// goes to the primary of its hash slot's group, following `MOVED` and
    /// `ASK`, and the override channel is followed on every primary.
    #[arg(long, conflicts_with = "sentinel")]
    cluster: bool,
    /// A Redis Sentinel to ask for the ledger's primary instead of
    /// `--ledger` (repeat the flag for each sentinel); the primary is
    /// followed through failovers.
    #[arg(long, value_name = "HOST:PORT")]
    sentinel: Vec<String>,
    /// The primary's name at the sentinels.
    #[arg(long, default_value = "mymaster")]
    master_name: String,
    /// The ACL user the connections to the sentinels authenticate as.
    #[arg(long, value_name = "USER", requires = "sentinel_password")]
    sentinel_user: Option<String>,
    /// The password sent with `AUTH` to each sentinel (a sentinel's own
    /// `requirepass`); read from the environment variable
    /// LEASEHOLD_SENTINEL_PASSWORD when not given.
    #[arg(
        long,
        value_name = "PASSWORD",
        env = "LEASEHOLD_SENTINEL_PASSWORD",
        hide_env_values = true
    )]
    sentinel_password: Option<String>,
    /// The ACL user the ledger connections authenticate as (`AUTH user
    /// password`; the default user when only a password is given).
    #[arg(long, value_name = "USER")]
    ledger_user: Option<String>,
    /// The password the ledger connections send with `AUTH`; read from the
    /// environment variable LEASEHOLD_LEDGER_PASSWORD when not given, so it
    /// need not appear in the process list.
    #[arg(
        long,
        value_name = "PASSWORD",
        env = "LEASEHOLD_LEDGER_PASSWORD",
        hide_env_values = true
    )]
    ledger_password: Option<String>,
    /// Address to serve gRPC on.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// gRPC port (rate limit service and grpc.health.v1.Health).
    #[arg(long, default_value_t = 8081)]
    port: u16,
    /// Port for Prometheus text on /metrics (none when absent).
    #[arg(long)]
    metrics_port: Option<u16>,
    /// Deadline of a lease call to the ledger, in ms.
    #[arg(long, default_value_t = 5)]
    lease_deadline_ms: u64,
    /// How often the config file is checked for changes, in ms.
    #[arg(long, default_value_t = 1000)]
    reload_interval_ms: u64,
    /// The ledger's pub/sub channel carrying emergency overrides
    /// (`<domain> <policy> disable <ttl ms>`, `... widen <factor> <ttl ms>`,
    /// `... clear`).
    #[arg(long, default_value = "leasehold-rls:override")]
    override_channel: String,
    /// Decide every descriptor with its own TOKENLEASE call to the ledger,
    /// with no local buckets (for comparisons: the model of services that
    /// call their store on every request).
    #[arg(long)]
    ledger_per_request: bool,
    /// This instance's id for limits whose canary is a share of instances
    /// (`canary_by: instance`): keep it stable across restarts and distinct
    /// per instance. Default: the host name and `--port`, as `host:port`.
    #[arg(long, value_name = "ID")]
    instance_id: Option<String>,
    /// Largest request accepted, in bytes; a larger one is refused with
    /// OUT_OF_RANGE (the connection stays open).
    #[arg(long, default_value_t = 1 << 20)]
    max_request_bytes: usize,
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: a redirected log stays plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold-rls: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(flags)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leasehold-rls: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The first address `text` (HOST:PORT) resolves to.
fn resolve(flag: &str, text: &str) -> Result<SocketAddr, String> {
    text.to_socket_addrs()
        .map_err(|e| format!("{flag} {text}: {e}"))?
        .next()
        .ok_or_else(|| format!("{flag} {text}: no address"))
}

async fn run(flags: Flags) -> Result<(), Box<dyn std::error::Error>> {
    let ledgers = flags
        .ledger
        .iter()
        .map(|s| resolve("--ledger", s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut cc = if flags.cluster {
        ClientConfig::cluster(ledgers)
    } else if !flags.sentinel.is_empty() {
        let sentinels = flags
            .sentinel
            .iter()
            .map(|s| resolve("--sentinel", s))
            .collect::<Result<Vec<_>, _>>()?;
        let mut cc = ClientConfig::sentinel(sentinels, flags.master_name.clone());
        if let (Address::Sentinel(sc), Some(password)) = (&mut cc.address, &flags.sentinel_password)
        {
            sc.auth = Some(Credentials::new(flags.sentinel_user.as_deref(), password));
        }
        cc
    } else if let [one] = ledgers[..] {
        ClientConfig::new(one)
    } else {
        return Err(
            "--ledger more than once needs --cluster (one Leasehold node otherwise)".into(),
        );
    };
    match (&flags.ledger_user, &flags.ledger_password) {
        (user, Some(password)) => cc = cc.with_auth(user.as_deref(), password),
        (Some(_), None) => return Err("--ledger-user needs --ledger-password".into()),
        (None, None) => {}
    }
    let (text, sets) =
        limits::load(&flags.config).map_err(|e| format!("{}: {e}", flags.config.display()))?;
    if let Some(port) = flags.metrics_port {
        PrometheusBuilder::new()
            .with_http_listener(SocketAddr::new(flags.bind, port))
            .install()
            .map_err(|e| format!("--metrics-port {port}: {e}"))?;
    }
    cc.lease_deadline = Duration::from_millis(flags.lease_deadline_ms);
    let ledger = Ledger {
        client: Client::new(cc),
        lease: LeaseConfig::default(),
        clock: Arc::new(SystemClock::new()),
        instance: flags
            .instance_id
            .clone()
            .unwrap_or_else(|| format!("{}:{}", policy::host_name(), flags.port)),
    };
    // Connected before the first request, whose lease would otherwise
    // spend its deadline on the connect.
    if let Err(e) = ledger.client.connect().await {
        tracing::warn!("ledger not reachable yet: {e}");
    }
    let (limits, _, _) = limits::build(sets, Default::default(), &Limits::default(), &ledger);
    let shared = Shared::new(limits);
    let watcher = tokio::spawn(limits::watch(
        flags.config.clone(),
        Duration::from_millis(flags.reload_interval_ms.max(1)),
        text,
        shared.clone(),
        ledger.clone(),
    ));

    let subscriber = tokio::spawn({
        let (shared, ledger) = (shared.clone(), ledger.clone());
        leasehold_client::overrides::subscribe(
            ledger.client.clone(),
            flags.override_channel.clone(),
            move |m| limits::on_override(&shared, &ledger, m),
        )
    });
    let expiry = tokio::spawn(limits::expire_overrides(
        shared.clone(),
        ledger.clone(),
        Duration::from_millis(100),
    ));

    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_serving::<RateLimitServiceServer<Service>>()
        .await;
    let decide = if flags.ledger_per_request {
        Decide::LedgerPerRequest
    } else {
        Decide::Leases
    };
    let adhoc = AdHoc::new(ledger.clone());
    let rls = RateLimitServiceServer::new(Service::new(shared.clone(), adhoc.clone(), decide))
        .max_decoding_message_size(flags.max_request_bytes);
    let addr = SocketAddr::new(flags.bind, flags.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    tracing::info!(
        local_addr = %listener.local_addr()?,
        ledger = ?ledger.client.primary(),
        instance = %ledger.instance,
        policies = shared.snapshot().policy_count(),
        "leasehold-rls ready"
    );
    tonic::transport::Server::builder()
        .add_service(health)
        .add_service(rls)
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            stopped(),
        )
        .await?;
    watcher.abort();
    subscriber.abort();
    expiry.abort();
    let limits = shared.snapshot();
    limits.shutdown().await;
    adhoc.shutdown().await;
    tracing::info!("leasehold-rls stopped");
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn stopped() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
