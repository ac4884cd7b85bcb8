//! The replication section: throughput with one replica attached and the
//! replica's lag under that load, a full sync of a filled primary with the
//! primary's latency meanwhile, and failover by stock Sentinel; each for
//! Redis and Leasehold in the same run.
//!
//! # Layout
//! - [`nodes`]: primaries, replicas and sentinels; "is it synced" checks.
//! - [`probe`]: the lag probe and the latency probe (threads of their own).
//! - [`failover`]: one Sentinel failover round.
//! - [`render`]: the markdown section, its targets, and splicing it into an
//!   existing page.

pub mod failover;
pub mod nodes;
pub mod probe;
pub mod render;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use self::failover::Failover;
use self::nodes::Nodes;
use self::probe::{Probe, Samples};
use super::servers::{Kind, Server};
use super::with_without::{self, kind_index, Names, Row, Setups};
use super::Runner;

pub use super::with_without::{cell, KINDS};

/// What the full sync writes on the primary before the replica is attached.
pub const FILL_COMMAND: &str = "SET k:__key__ xxx";
/// What the latency probe sends to the primary during the full sync.
pub const PROBE_COMMAND: &str = "GET k:__key__";
/// How long the latency probe runs on the idle filled primary before the
/// sync, for comparison.
pub const BASELINE: Duration = Duration::from_secs(2);
/// The longest full sync waited for.
const SYNC_LIMIT: Duration = Duration::from_secs(300);

/// Settings of the section.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Debian's redis-server.
    pub redis_bin: PathBuf,
    /// leasehold-server.
    pub leasehold_bin: PathBuf,
    /// Leasehold's `--threads`, on primaries and replicas.
    pub threads: usize,
    /// Rounds of the throughput rows.
    pub rounds: usize,
    /// Keys in the full sync.
    pub sync_keys: u64,
    /// Failover rounds per kind.
    pub failover_rounds: usize,
    /// A `--quick` smoke run.
    pub quick: bool,
    /// Seconds per throughput run.
    pub duration: f64,
    /// Connections per throughput run.
    pub connections: usize,
    /// Keys per throughput run.
    pub keyspace: u64,
}

/// This section's set-ups: each kind's primary alone and with a replica.
pub const NAMES: Names = Names {
    section: "replication",
    without_label: " alone",
    with_label: " + replica",
    without_column: "alone",
    with_column: "+ replica",
    both: "with replica",
};

/// What a throughput row records about the replicas (the primary's CPU is
/// in the row itself).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplicaStats {
    /// Replica lag during the runs with a replica, Redis then Leasehold.
    pub lag: [Samples; 2],
    /// PSYNCs the primary answered during the runs with a replica (its
    /// replica was dropped and came back), Redis then Leasehold.
    pub resyncs: [u64; 2],
    /// CPU seconds each replica used over the runs with it, Redis then
    /// Leasehold.
    pub replica_cpu: [f64; 2],
}

/// One throughput row on the four set-ups.
pub type ThroughputRow = Row<ReplicaStats>;

/// The throughput part; its servers are, for each kind, the primary alone,
/// the primary with a replica, and the replica.
pub type Throughput = with_without::Throughput<ReplicaStats>;

/// One full sync.
#[derive(Debug, Clone, PartialEq)]
pub struct Sync {
    /// Keys on the primary.
    pub keys: u64,
    /// The fill's command line.
    pub fill: String,
    /// The fill's wall time, in seconds.
    pub fill_seconds: f64,
    /// The primary's and the replica's command lines, and the REPLICAOF sent.
    pub commands: Vec<String>,
    /// From REPLICAOF to a replica that is up, loaded and holds every key.
    pub took: Duration,
    /// The latency probe on the idle filled primary, before the sync.
    pub baseline: Samples,
    /// The latency probe during the sync.
    pub during: Samples,
}

/// The failover part of one kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Failovers {
    /// Which server.
    pub kind: Kind,
    /// Each round.
    pub rounds: Vec<Result<Failover, String>>,
    /// The first round's processes.
    pub commands: Vec<String>,
}

/// The whole section.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// The settings it ran with (binaries are not shown).
    pub quick: bool,
    /// Leasehold's `--threads`.
    pub threads: usize,
    /// Throughput rounds.
    pub rounds: usize,
    /// Seconds per throughput run.
    pub duration: f64,
    /// Why the section did not run, if it did not.
    pub skipped: Option<String>,
    /// Throughput and lag (or why they failed).
    pub throughput: Result<Throughput, String>,
    /// Full sync, Redis then Leasehold.
    pub sync: Vec<(Kind, Result<Sync, String>)>,
    /// Failover, Redis then Leasehold.
    pub failover: Vec<Failovers>,
    /// Where and when it ran: date, commit, load averages, elapsed time.
    pub facts: String,
}

/// Runs the section.
pub fn run(s: &Settings, runner: &Runner) -> Section {
    let started = Instant::now();
    let load_at_start = super::doc::load_average();
    let mut section = Section {
        quick: s.quick,
        threads: s.threads,
        rounds: s.rounds,
        duration: s.duration,
        skipped: None,
        throughput: Err("not run".into()),
        sync: Vec::new(),
        failover: Vec::new(),
        facts: String::new(),
    };
    if !with_without::runs(&s.redis_bin) {
        section.skipped = Some(format!(
            "`{} --version` does not run: Redis (and `redis-server --sentinel`) are needed to compare against",
            s.redis_bin.display()
        ));
        return section;
    }
    let dir = std::env::temp_dir().join(format!("leasehold-bench-repl-{}", std::process::id()));
    let nodes = |kind| Nodes {
        kind,
        bin: match kind {
            Kind::Redis => s.redis_bin.clone(),
            Kind::Leasehold => s.leasehold_bin.clone(),
        },
        threads: s.threads,
        dir: dir.join(kind.label()),
    };
    section.throughput = throughput(s, runner, &nodes);
    // Leasehold first here, so neither kind always syncs on a warmer machine
    // than the throughput runs left.
    for kind in [Kind::Leasehold, Kind::Redis] {
        let r = full_sync(&nodes(kind), runner, s.sync_keys);
        match &r {
            Ok(x) => eprintln!(
                "full sync {} of {} keys: {:.2} s, primary p99 {:.3} ms max {:.3} ms",
                kind.label(),
                x.keys,
                x.took.as_secs_f64(),
                x.during.quantile(0.99).unwrap_or(f64::NAN),
                x.during.max().unwrap_or(f64::NAN)
            ),
            Err(e) => eprintln!("full sync {}: {e}", kind.label()),
        }
        section.sync.push((kind, r));
    }
    section
        .sync
        .sort_by_key(|(k, _)| usize::from(*k == Kind::Leasehold));
    section.failover = KINDS
        .map(|kind| Failovers {
            kind,
            rounds: Vec::new(),
            commands: Vec::new(),
        })
        .to_vec();
    for round in 0..s.failover_rounds {
        let order = if round % 2 == 0 {
            KINDS
        } else {
            [Kind::Leasehold, Kind::Redis]
        };
        for kind in order {
            let f = &mut section.failover[kind_index(kind)];
            let sdir = dir.join(format!("sentinels-{}-{round}", kind.label()));
            match failover::round(&nodes(kind), &s.redis_bin, &sdir) {
                Ok((x, setup)) => {
                    eprintln!(
                        "[failover {}/{}] {}: named after {:.2} s, first write after {:.2} s",
                        round + 1,
                        s.failover_rounds,
                        kind.label(),
                        x.named.as_secs_f64(),
                        x.writable.as_secs_f64()
                    );
                    if f.commands.is_empty() {
                        f.commands = setup.commands;
                    }
                    f.rounds.push(Ok(x));
                }
                Err(e) => {
                    eprintln!("[failover {}] {}: {e}", round + 1, kind.label());
                    f.rounds.push(Err(e));
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    section.facts = with_without::facts(started, &load_at_start);
    section
}

/// One kind's three throughput servers.
struct Trio {
    alone: Server,
    primary: Server,
    replica: Server,
}

fn throughput(
    s: &Settings,
    runner: &Runner,
    nodes: &dyn Fn(Kind) -> Nodes,
) -> Result<Throughput, String> {
    let e = |e: std::io::Error| e.to_string();
    let mut trios = Vec::new();
    for kind in KINDS {
        let n = nodes(kind);
        let alone = n.primary("alone").map_err(e)?;
        let primary = n.primary("primary").map_err(e)?;
        let replica = n.replica("replica", primary.port).map_err(e)?;
        nodes::wait_synced(&primary, &replica)?;
        trios.push(Trio {
            alone,
            primary,
            replica,
        });
    }
    let servers = trios
        .iter()
        .flat_map(|t| [&t.alone, &t.primary, &t.replica].map(|x| x.command_line.clone()))
        .collect();
    Ok(with_without::measure(
        &Trios(trios),
        &NAMES,
        runner,
        s.rounds,
        servers,
    ))
}

/// Both kinds' trios, Redis first.
struct Trios(Vec<Trio>);

impl Setups for Trios {
    type Extra = ReplicaStats;
    /// The replica's CPU seconds, the primary's PSYNCs served, and the lag
    /// probe (with a replica only).
    type Before = (f64, Option<u64>, Option<Probe>);

    fn server(&self, c: usize) -> &Server {
        let trio = &self.0[c / 2];
        if c % 2 == 1 {
            &trio.primary
        } else {
            &trio.alone
        }
    }

    fn before(&self, c: usize) -> Self::Before {
        let trio = &self.0[c / 2];
        let cpu = trio.replica.cpu_seconds().unwrap_or(0.0);
        let synced = nodes::syncs_served(&trio.primary);
        let probe = (c % 2 == 1).then(|| Probe::lag(trio.primary.addr(), trio.replica.addr()));
        (cpu, synced, probe)
    }

    fn after(&self, c: usize, (cpu, synced, probe): Self::Before, extra: &mut ReplicaStats) {
        let (trio, k) = (&self.0[c / 2], c / 2);
        if let Some(p) = probe {
            extra.lag[k].merge(p.finish());
            extra.replica_cpu[k] += trio.replica.cpu_seconds().unwrap_or(0.0) - cpu;
            if let (Some(a), Some(b)) = (synced, nodes::syncs_served(&trio.primary)) {
                extra.resyncs[k] += b.saturating_sub(a);
            }
        }
    }
}

/// "Redis alone", "Leasehold + replica" and so on.
pub fn setup_label(kind: Kind, with_replica: bool) -> String {
    NAMES.label(kind, with_replica)
}

fn full_sync(nodes: &Nodes, runner: &Runner, keys: u64) -> Result<Sync, String> {
    let e = |e: std::io::Error| e.to_string();
    let primary = nodes.primary("sync-primary").map_err(e)?;
    let fill = runner.fill_args(&primary, FILL_COMMAND, None, keys, 1);
    let filled = runner.run(&fill)?;
    if filled.errors > 0 {
        return Err(format!(
            "the fill got {} error replies ({})",
            filled.errors,
            filled.first_error.unwrap_or_default()
        ));
    }
    let have = nodes::dbsize(&primary).unwrap_or(-1);
    if have != keys as i64 {
        return Err(format!(
            "the primary holds {have} keys after the fill, not {keys}"
        ));
    }
    // A fresh node, made a replica by REPLICAOF once the clock runs.
    let replica = nodes.primary("sync-replica").map_err(e)?;
    let baseline = Probe::latency(primary.addr(), PROBE_COMMAND, keys)?;
    std::thread::sleep(BASELINE);
    let baseline = baseline.finish();
    let replicaof = ["REPLICAOF", "127.0.0.1", &primary.port.to_string()].map(String::from);
    let probe = Probe::latency(primary.addr(), PROBE_COMMAND, keys)?;
    let started = Instant::now();
    let answer = replica
        .conn()
        .and_then(|mut c| c.call_text(&replicaof))
        .map_err(|err| format!("REPLICAOF: {err}"));
    let synced = answer.and_then(|_| {
        nodes::wait_until(
            &format!("{} replica loaded {keys} keys", nodes.kind.label()),
            SYNC_LIMIT,
            Duration::from_millis(10),
            || nodes::link_up(&replica) && nodes::dbsize(&replica) == Some(keys as i64),
        )
    });
    let took = started.elapsed();
    let during = probe.finish();
    synced?;
    Ok(Sync {
        keys,
        fill: runner.command_line(&fill),
        fill_seconds: filled.seconds,
        commands: vec![
            primary.command_line.clone(),
            replica.command_line.clone(),
            format!(
                "redis-cli -p {} {}",
                replica.port,
                super::servers::shell_join(&replicaof)
            ),
        ],
        took,
        baseline,
        during,
    })
}
