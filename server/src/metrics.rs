//! The Prometheus endpoint: `GET /metrics` over HTTP/1.1 on `metrics-port`,
//! answered in Prometheus's text exposition format (version 0.0.4) from the
//! per-thread counters, summed only when scraped, so the hot path pays
//! nothing for a series but the counter it already kept (and one clock
//! pair per [`crate::latency::SAMPLE_EVERY`] calls for the latency
//! histogram).
//!
//! Series (names `leasehold_<area>_<what>` with Prometheus's unit suffixes;
//! counters count since the start, CONFIG RESETSTAT does not reset them):
//! - commands: `leasehold_commands_total`, `leasehold_commands_failed_total`,
//!   `leasehold_commands_rejected_total` by `command`;
//!   `leasehold_command_duration_seconds` (histogram of sampled calls' run
//!   time on their shard, by `command`); `leasehold_errors_total` by `code`;
//! - rate limits: `leasehold_rate_limit_decisions_total` by `command`
//!   (`tokenlease`, `slidingwindow`, `cl.throttle`, `gcra`) and `outcome`
//!   (`granted`, `partial`, `denied`);
//! - keys: `leasehold_keys`, `leasehold_keys_expiring`,
//!   `leasehold_keys_expired_total`, `leasehold_keyspace_hits_total`,
//!   `leasehold_keyspace_misses_total`;
//! - memory: `leasehold_memory_used_bytes`, `leasehold_memory_rss_bytes`,
//!   `leasehold_memory_max_bytes` (0: no limit);
//! - connections: `leasehold_clients_connected`, `leasehold_clients_max`,
//!   `leasehold_connections_received_total`,
//!   `leasehold_connections_rejected_total`,
//!   `leasehold_net_input_bytes_total`, `leasehold_net_output_bytes_total`;
//! - replication: `leasehold_replication_primary` (1 on a primary, 0 on a
//!   replica), `leasehold_replication_offset_bytes`,
//!   `leasehold_replication_replicas_connected`,
//!   `leasehold_replication_replica_lag_bytes` and
//!   `leasehold_replication_replica_ack_age_seconds` by `replica`
//!   (`ip:port`), and on a replica `leasehold_replication_link_up`;
//! - access: `leasehold_acl_auth_failures_total`,
//!   `leasehold_acl_denials_total` by `reason` (`command`, `key`,
//!   `channel`), `leasehold_tls_connections_received_total`,
//!   `leasehold_tls_handshake_failures_total`, `leasehold_tls_clients_connected`
//!   (with a TLS port);
//! - pub/sub: `leasehold_pubsub_channels`, `leasehold_pubsub_patterns`,
//!   `leasehold_pubsub_clients`, `leasehold_pubsub_messages_published_total`,
//!   `leasehold_pubsub_messages_delivered_total`;
//! - cluster mode only: `leasehold_cluster_topology_version`,
//!   `leasehold_cluster_redirects_total` by `kind` (`moved`, `crossslot`,
//!   `clusterdown`, `ask`, `tryagain`), `leasehold_cluster_slots_migrating`,
//!   `leasehold_cluster_slots_importing`,
//!   `leasehold_cluster_primary_changes_total`;
//! - persistence: `leasehold_persistence_last_save_success`,
//!   `leasehold_persistence_saves_total`, `leasehold_persistence_aof_enabled`,
//!   `leasehold_persistence_aof_last_write_success`,
//!   `leasehold_persistence_aof_size_bytes`,
//!   `leasehold_persistence_aof_rewrites_total`,
//!   `leasehold_persistence_aof_delayed_fsyncs_total`;
//! - server: `leasehold_uptime_seconds`, `leasehold_shards`.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::commands::{info, table};
use crate::latency::{Snapshot, BOUNDS_US};
use crate::state::{AclDenied, RateCommand, RateOutcome, Redirect, Shared, StatBaseline};

/// Largest request head read, bytes; a longer one is refused.
const MAX_HEAD: usize = 8192;

/// How long a scrape may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// Binds `addr` and serves `/metrics` on a thread of its own until the
/// server shuts down. Returns the bound address (port 0 picks one).
///
/// # Errors
/// The bind failed (address in use, permission denied).
pub fn spawn(shared: Arc<Shared>, addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("leasehold-metrics".into())
        .spawn(move || serve(&shared, &listener))?;
    tracing::info!(%bound, "Prometheus metrics on http://{bound}/metrics");
    Ok(bound)
}

fn serve(shared: &Shared, listener: &TcpListener) {
    while !shared.shutting_down.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = answer(shared, stream) {
                    tracing::debug!("metrics request failed: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                tracing::warn!("metrics accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Reads one request head and answers it, then closes the connection:
/// `GET /metrics` (or `HEAD`) gets the text, another path 404, another
/// method 405, a malformed or oversized head 400.
fn answer(shared: &Shared, mut s: TcpStream) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf)?;
        if n == 0 || head.len() + n > MAX_HEAD {
            return respond(&mut s, "400 Bad Request", "bad request\n", true);
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split(' ');
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let body = render(shared);
            respond(&mut s, "200 OK", &body, method == "GET")
        }
        ("GET" | "HEAD", _) => respond(&mut s, "404 Not Found", "try /metrics\n", true),
        _ => respond(&mut s, "405 Method Not Allowed", "GET only\n", true),
    }
}

fn respond(s: &mut TcpStream, status: &str, body: &str, with_body: bool) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    if with_body {
        s.write_all(body.as_bytes())?;
    }
    s.flush()
}

/// One metric family being written: its `# HELP` and `# TYPE` lines come
/// first, then its samples.
struct Family<'a> {
    out: &'a mut String,
    name: &'static str,
}

impl<'a> Family<'a> {
    fn new(out: &'a mut String, name: &'static str, kind: &str, help: &str) -> Family<'a> {
        let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
        Family { out, name }
    }

    /// A sample with `labels` (`name="value"` pairs), values escaped.
    fn sample(&mut self, suffix: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        let _ = write!(self.out, "{}{suffix}", self.name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

/// A label value as the text format wants it: `\`, `"` and newlines
/// escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One family with a single unlabelled sample.
fn single(out: &mut String, name: &'static str, kind: &str, help: &str, v: impl std::fmt::Display) {
    Family::new(out, name, kind, help).sample("", &[], v);
}

/// The whole exposition text.
pub fn render(shared: &Shared) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let now = shared.stat_snapshot();
    commands(shared, &now, &mut out);
    rate_limits(shared, &mut out);
    hotkeys(shared, &mut out);
    keys(shared, &mut out);
    memory(shared, &mut out);
    connections(shared, &now, &mut out);
    access(shared, &mut out);
    pubsub(shared, &mut out);
    replication(shared, &mut out);
    cluster(shared, &mut out);
    persistence(shared, &mut out);
    single(
        &mut out,
        "leasehold_uptime_seconds",
        "gauge",
        "Seconds since the server started.",
        shared.started.elapsed().as_secs(),
    );
    single(
        &mut out,
        "leasehold_shards",
        "gauge",
        "Shards (threads) the keyspace is split over.",
        shared.shards,
    );
    out
}

/// Snapshots, and the append-only effect log (its series read 0 while
/// `appendonly` is off, as INFO's `aof_*` fields do).
fn persistence(shared: &Shared, out: &mut String) {
    let p = &shared.persist;
    let ok = |failed: &std::sync::atomic::AtomicBool| u8::from(!failed.load(Ordering::SeqCst));
    let aof_on = p.aof_on.load(Ordering::SeqCst);
    let rows: [(&'static str, &str, &str, u64); 7] = [
        (
            "leasehold_persistence_last_save_success",
            "gauge",
            "1 when the last snapshot succeeded (or none was tried), 0 when it failed.",
            ok(&p.last_save_failed).into(),
        ),
        (
            "leasehold_persistence_saves_total",
            "counter",
            "Snapshots written.",
            p.saves.load(Ordering::Relaxed),
        ),
        (
            "leasehold_persistence_aof_enabled",
            "gauge",
            "1 while the append-only log is on (appendonly yes).",
            aof_on.into(),
        ),
        (
            "leasehold_persistence_aof_last_write_success",
            "gauge",
            "0 when the last write or fsync of the append-only log failed, else 1.",
            ok(&p.aof_write_failed).into(),
        ),
        (
            "leasehold_persistence_aof_size_bytes",
            "gauge",
            "Bytes in the append-only log (0 while it is off).",
            if aof_on {
                p.aof_size.load(Ordering::Relaxed)
            } else {
                0
            },
        ),
        (
            "leasehold_persistence_aof_rewrites_total",
            "counter",
            "Rewrites of the append-only log.",
            p.rewrites.load(Ordering::Relaxed),
        ),
        (
            "leasehold_persistence_aof_delayed_fsyncs_total",
            "counter",
            "fsyncs of the append-only log that took longer than 2 s (appendfsync everysec).",
            p.delayed_fsyncs.load(Ordering::Relaxed),
        ),
    ];
    for (name, kind, help, v) in rows {
        single(out, name, kind, help, v);
    }
}

fn commands(shared: &Shared, now: &StatBaseline, out: &mut String) {
    let names: Vec<&str> = table().commands.iter().map(|c| c.name).collect();
    let per_command = |out: &mut String, name, help, values: &[u64]| {
        let mut f = Family::new(out, name, "counter", help);
        for (i, v) in values.iter().enumerate().filter(|(_, v)| **v > 0) {
            f.sample("", &[("command", names[i])], v);
        }
    };
    per_command(
        out,
        "leasehold_commands_total",
        "Commands run (each counted once, however many shards it spanned).",
        &now.calls,
    );
    per_command(
        out,
        "leasehold_commands_failed_total",
        "Commands that ran and answered an error.",
        &now.failed,
    );
    per_command(
        out,
        "leasehold_commands_rejected_total",
        "Commands refused before running (arity, authentication, CROSSSLOT, OOM).",
        &now.rejected_calls,
    );
    let mut f = Family::new(
        out,
        "leasehold_command_duration_seconds",
        "histogram",
        "Run time on the owning shard of sampled calls (one in 32 per thread), seconds.",
    );
    for (i, name) in names.iter().enumerate() {
        let mut h = Snapshot::default();
        for s in shared.shard_stats.iter() {
            h.add(&s.latency[i].snapshot());
        }
        if h.count() == 0 {
            continue;
        }
        let mut cumulative = 0;
        for (b, n) in BOUNDS_US.iter().zip(h.buckets) {
            cumulative += n;
            let le = format!("{}", *b as f64 / 1e6);
            f.sample("_bucket", &[("command", name), ("le", &le)], cumulative);
        }
        f.sample("_bucket", &[("command", name), ("le", "+Inf")], h.count());
        f.sample("_sum", &[("command", name)], h.sum_ns as f64 / 1e9);
        f.sample("_count", &[("command", name)], h.count());
    }
    let mut f = Family::new(
        out,
        "leasehold_errors_total",
        "counter",
        "Error replies sent, by error code.",
    );
    for (i, code) in crate::error::ERROR_CODES.iter().enumerate() {
        if now.error_codes[i] > 0 {
            f.sample("", &[("code", code)], now.error_codes[i]);
        }
    }
    for (code, n) in shared.other_error_codes() {
        f.sample("", &[("code", &code)], n);
    }
}

fn rate_limits(shared: &Shared, out: &mut String) {
    let mut f = Family::new(
        out,
        "leasehold_rate_limit_decisions_total",
        "counter",
        "Rate-limit decisions by command and outcome (partial: TOKENLEASE granted less than asked).",
    );
    for c in RateCommand::ALL {
        for o in RateOutcome::ALL {
            let n = shared.sum(|s| s.rate_decisions[c as usize][o as usize].get());
            f.sample("", &[("command", c.name()), ("outcome", o.label())], n);
        }
    }
}

/// A family summed over shards: name, type, help, the shard's value.
type ShardRow = (
    &'static str,
    &'static str,
    &'static str,
    fn(&crate::state::ShardStats) -> u64,
);

fn keys(shared: &Shared, out: &mut String) {
    let rows: [ShardRow; 5] = [
        ("leasehold_keys", "gauge", "Keys stored.", |s| s.keys.get()),
        (
            "leasehold_keys_expiring",
            "gauge",
            "Keys with a time to live.",
            |s| s.expires.get(),
        ),
        (
            "leasehold_keys_expired_total",
            "counter",
            "Keys reclaimed after their deadline.",
            |s| s.expired_keys.get(),
        ),
        (
            "leasehold_keyspace_hits_total",
            "counter",
            "Reads that found their key.",
            |s| s.keyspace_hits.get(),
        ),
        (
            "leasehold_keyspace_misses_total",
            "counter",
            "Reads that did not find their key.",
            |s| s.keyspace_misses.get(),
        ),
    ];
    for (name, kind, help, get) in rows {
        single(out, name, kind, help, shared.sum(get));
    }
}

/// The hot-key counters (`docs/hotkeys.md`), summed over shards.
fn hotkeys(shared: &Shared, out: &mut String) {
    let rows: [ShardRow; 6] = [
        ("leasehold_hotkey_split_keys", "gauge", "Keys split over the shards now.", |s| s.hotkey_split_keys.get()),
        ("leasehold_hotkey_splits_total", "counter", "Hot keys split.", |s| s.hotkey_splits.get()),
        ("leasehold_hotkey_merges_total", "counter", "Split keys merged back.", |s| s.hotkey_merges.get()),
        ("leasehold_hotkey_local_grants_total", "counter", "TOKENLEASE calls on a split key granted by the shard that read them, with no hop.", |s| s.hotkey_local_grants.get()),
        ("leasehold_hotkey_borrows_total", "counter", "Calls on a split key a shard could not serve from its own tokens and sent to the owner.", |s| s.hotkey_borrows.get()),
        ("leasehold_hotkey_gathers_total", "counter", "Gathers of a split key's tokens by its owner (exact decisions).", |s| s.hotkey_gathers.get()),
    ];
    for (name, kind, help, get) in rows {
        single(out, name, kind, help, shared.sum(get));
    }
}

fn memory(shared: &Shared, out: &mut String) {
    single(
        out,
        "leasehold_memory_used_bytes",
        "gauge",
        "Bytes allocated (INFO used_memory).",
        info::used_memory(),
    );
    single(
        out,
        "leasehold_memory_rss_bytes",
        "gauge",
        "Resident set size, bytes.",
        info::rss_bytes(),
    );
    single(
        out,
        "leasehold_memory_max_bytes",
        "gauge",
        "maxmemory, bytes (0: no limit).",
        shared.config.read().limits.maxmemory,
    );
}

fn connections(shared: &Shared, now: &StatBaseline, out: &mut String) {
    let clients = shared.clients.lock().len();
    single(
        out,
        "leasehold_clients_connected",
        "gauge",
        "Client connections open.",
        clients,
    );
    single(
        out,
        "leasehold_clients_max",
        "gauge",
        "maxclients.",
        shared.config.read().net.maxclients,
    );
    let rows = [
        (
            "leasehold_connections_received_total",
            "Connections accepted.",
            now.conns,
        ),
        (
            "leasehold_connections_rejected_total",
            "Connections refused (maxclients).",
            now.rejected,
        ),
        (
            "leasehold_net_input_bytes_total",
            "Bytes read from clients.",
            now.net_in,
        ),
        (
            "leasehold_net_output_bytes_total",
            "Bytes written to clients.",
            now.net_out,
        ),
    ];
    for (name, help, v) in rows {
        single(out, name, "counter", help, v);
    }
}

/// Failed logins and ACL refusals (INFO's `acl_access_denied_*`, the same
/// counters), and the TLS port's connections.
fn access(shared: &Shared, out: &mut String) {
    let c = &shared.counters;
    single(
        out,
        "leasehold_acl_auth_failures_total",
        "counter",
        "AUTH and HELLO AUTH attempts with a wrong user or password (INFO acl_access_denied_auth).",
        c.auth_failures.load(Ordering::Relaxed),
    );
    let mut f = Family::new(
        out,
        "leasehold_acl_denials_total",
        "counter",
        "Requests refused by ACL, by ACL LOG reason (INFO acl_access_denied_cmd, _key, _channel).",
    );
    for why in AclDenied::ALL {
        f.sample(
            "",
            &[("reason", why.reason())],
            info::acl_denied(shared, why),
        );
    }
    let rows = [
        (
            "leasehold_tls_connections_received_total",
            "Connections accepted on the TLS port (also in leasehold_connections_received_total).",
            &c.tls_connections_received,
        ),
        (
            "leasehold_tls_handshake_failures_total",
            "TLS connections closed because their handshake failed.",
            &c.tls_handshake_failures,
        ),
    ];
    for (name, help, v) in rows {
        single(out, name, "counter", help, v.load(Ordering::Relaxed));
    }
    let tls_port = shared.config.read().tls.port;
    if tls_port != 0 {
        let open = shared
            .clients
            .lock()
            .values()
            .filter(|c| c.laddr.port() == tls_port)
            .count();
        single(
            out,
            "leasehold_tls_clients_connected",
            "gauge",
            "Client connections open on the TLS port (also in leasehold_clients_connected).",
            open,
        );
    }
}

/// Pub/sub: the registry's sizes and the clients subscribed now, read when
/// scraped; messages counted per thread.
fn pubsub(shared: &Shared, out: &mut String) {
    let subscribed = shared
        .clients
        .lock()
        .values()
        .filter(|c| c.is_pubsub())
        .count();
    let gauges = [
        (
            "leasehold_pubsub_channels",
            "Channels with at least one subscriber (INFO pubsub_channels).",
            shared.pubsub.channel_count(),
        ),
        (
            "leasehold_pubsub_patterns",
            "Patterns with at least one subscriber (INFO pubsub_patterns).",
            shared.pubsub.numpat(),
        ),
        (
            "leasehold_pubsub_clients",
            "Connections with at least one channel or pattern subscription.",
            subscribed,
        ),
    ];
    for (name, help, v) in gauges {
        single(out, name, "gauge", help, v);
    }
    let rows: [ShardRow; 2] = [
        ("leasehold_pubsub_messages_published_total", "counter", "PUBLISH calls.", |s| s.pubsub_published.get()),
        ("leasehold_pubsub_messages_delivered_total", "counter", "Messages written to subscribers: one per receiving channel subscriber or matching pattern subscription.", |s| s.pubsub_delivered.get()),
    ];
    for (name, kind, help, get) in rows {
        single(out, name, kind, help, shared.sum(get));
    }
}

/// Cluster mode only: the topology in force, the redirections answered and
/// the primaries learned from Sentinel.
fn cluster(shared: &Shared, out: &mut String) {
    let Some(cluster) = &shared.cluster else {
        return;
    };
    single(
        out,
        "leasehold_cluster_topology_version",
        "gauge",
        "Version of the topology in force (CLUSTER INFO cluster_current_epoch).",
        cluster.load().topo.version,
    );
    let mut f = Family::new(
        out,
        "leasehold_cluster_redirects_total",
        "counter",
        "Requests answered -MOVED, -CROSSSLOT, -CLUSTERDOWN, -ASK or -TRYAGAIN, by kind.",
    );
    for r in Redirect::ALL {
        let n = shared.sum(|s| s.cluster_redirects[r as usize].get());
        f.sample("", &[("kind", r.label())], n);
    }
    let moving = cluster.moving();
    single(
        out,
        "leasehold_cluster_slots_migrating",
        "gauge",
        "Slots migrating from this node (CLUSTER SETSLOT MIGRATING).",
        moving.migrating.len(),
    );
    single(
        out,
        "leasehold_cluster_slots_importing",
        "gauge",
        "Slots imported into this node (CLUSTER SETSLOT IMPORTING).",
        moving.importing.len(),
    );
    single(
        out,
        "leasehold_cluster_primary_changes_total",
        "counter",
        "Changes of a group's primary learned from Sentinel.",
        cluster.primary_changes(),
    );
}

fn replication(shared: &Shared, out: &mut String) {
    let repl = &shared.repl;
    let offset = repl.backlog.offset();
    let target = repl.target();
    single(
        out,
        "leasehold_replication_primary",
        "gauge",
        "1 on a primary, 0 on a replica.",
        u8::from(target.is_none()),
    );
    single(
        out,
        "leasehold_replication_offset_bytes",
        "gauge",
        "Replication offset (master_repl_offset), bytes.",
        offset,
    );
    if target.is_some() {
        let link = repl.link.lock();
        single(
            out,
            "leasehold_replication_link_up",
            "gauge",
            "1 while the link to the primary serves the stream.",
            u8::from(link.up && !link.syncing),
        );
    }
    let replicas = repl.replicas();
    single(
        out,
        "leasehold_replication_replicas_connected",
        "gauge",
        "Replicas following this server.",
        replicas.len(),
    );
    let mut lag = Family::new(
        out,
        "leasehold_replication_replica_lag_bytes",
        "gauge",
        "Bytes of the stream a replica has not acknowledged.",
    );
    for r in &replicas {
        let id = format!("{}:{}", r.ip, r.port);
        lag.sample("", &[("replica", &id)], offset.saturating_sub(r.ack));
    }
    let mut age = Family::new(
        out,
        "leasehold_replication_replica_ack_age_seconds",
        "gauge",
        "Seconds since a replica's last acknowledgement.",
    );
    for r in &replicas {
        let id = format!("{}:{}", r.ip, r.port);
        age.sample("", &[("replica", &id)], r.ack_at.elapsed().as_secs_f64());
    }
}
