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

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use self::failover::Failover;
use self::nodes::Nodes;
use self::probe::{Probe, Samples};
use super::servers::{Kind, Server};
use super::table::SideResult;
use super::workloads::{self, Workload};
use super::Runner;

/// The two kinds, Redis first.
pub const KINDS: [Kind; 2] = [Kind::Redis, Kind::Leasehold];

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

/// Index of a throughput cell: Redis alone, Redis with its replica,
/// Leasehold alone, Leasehold with its replica.
pub fn cell(kind: Kind, with_replica: bool) -> usize {
    let k = usize::from(kind == Kind::Leasehold);
    2 * k + usize::from(with_replica)
}

/// One throughput row on the four set-ups.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputRow {
    /// What was run.
    pub workload: Workload,
    /// Indexed by [`cell`].
    pub cells: [SideResult; 4],
    /// Replica lag during the runs with a replica, Redis then Leasehold.
    pub lag: [Samples; 2],
    /// PSYNCs the primary answered during the runs with a replica (its
    /// replica was dropped and came back), Redis then Leasehold.
    pub resyncs: [u64; 2],
    /// CPU seconds the loaded primary used over the runs, indexed by [`cell`].
    pub cpu: [f64; 4],
    /// CPU seconds each replica used over the runs with it, Redis then
    /// Leasehold.
    pub replica_cpu: [f64; 2],
}

impl ThroughputRow {
    /// Requests answered over the runs of cell `c`.
    pub fn requests(&self, c: usize) -> u64 {
        match &self.cells[c] {
            SideResult::Runs(r) => r.iter().map(|r| r.requests).sum(),
            _ => 0,
        }
    }
}

/// The throughput part: rows, and the command lines behind them.
#[derive(Debug, Clone, PartialEq)]
pub struct Throughput {
    /// The servers: for each kind, the primary alone, the primary with a
    /// replica, and the replica.
    pub servers: Vec<String>,
    /// The rows.
    pub rows: Vec<ThroughputRow>,
    /// Each load run's command line, with a `#` title line.
    pub commands: Vec<String>,
}

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

/// Whether `redis_bin --version` runs.
fn runs(bin: &Path) -> bool {
    std::process::Command::new(bin)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
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
    if !runs(&s.redis_bin) {
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
            let f = &mut section.failover[usize::from(kind == Kind::Leasehold)];
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
    section.facts = format!(
        "commit {}, {} UTC; load average (1/5/15 min) at start {load_at_start}, at end {}; took {:.0} s",
        super::doc::commit(),
        super::doc::output("date", &["-u", "+%Y-%m-%d %H:%M"]),
        super::doc::load_average(),
        started.elapsed().as_secs_f64()
    );
    section
}

/// The throughput rows of this section: SET and TOKENLEASE against the
/// token-bucket Lua script, at -P 16 on uniform keys.
pub fn rows() -> Vec<Workload> {
    let token = workloads::RATE_LIMITS[0].0;
    workloads::all()
        .into_iter()
        .filter(|w| w.pipeline == 16 && w.distribution == "uniform")
        .filter(|w| w.name == "SET" || w.name == token)
        .collect()
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
    let mut out = Throughput {
        servers: trios
            .iter()
            .flat_map(|t| [&t.alone, &t.primary, &t.replica].map(|x| x.command_line.clone()))
            .collect(),
        rows: rows()
            .into_iter()
            .map(|workload| ThroughputRow {
                workload,
                cells: std::array::from_fn(|_| SideResult::Runs(Vec::new())),
                lag: Default::default(),
                resyncs: [0; 2],
                cpu: [0.0; 4],
                replica_cpu: [0.0; 2],
            })
            .collect(),
        commands: Vec::new(),
    };
    for round in 0..s.rounds {
        for (i, row) in out.rows.iter_mut().enumerate() {
            for k in 0..4 {
                // Rotate which set-up goes first so none always runs warm.
                let c = (k + round + i) % 4;
                let (kind, with) = (KINDS[c / 2], c % 2 == 1);
                let trio = &trios[c / 2];
                let server = if with { &trio.primary } else { &trio.alone };
                let w = &row.workload;
                let a = runner.throughput_args(server, w, w.side(kind));
                let label = setup_label(kind, with);
                if round == 0 {
                    out.commands.push(format!(
                        "# {} -P {} on {label}\n{}",
                        w.name,
                        w.pipeline,
                        runner.command_line(&a)
                    ));
                }
                let cpu = |x: &Server| x.cpu_seconds().unwrap_or(0.0);
                let before = (cpu(server), cpu(&trio.replica));
                let synced = nodes::syncs_served(&trio.primary);
                let probe = with.then(|| Probe::lag(trio.primary.addr(), trio.replica.addr()));
                let result = runner.run(&a);
                if let Some(p) = probe {
                    row.lag[c / 2].merge(p.finish());
                    row.replica_cpu[c / 2] += cpu(&trio.replica) - before.1;
                    if let (Some(a), Some(b)) = (synced, nodes::syncs_served(&trio.primary)) {
                        row.resyncs[c / 2] += b.saturating_sub(a);
                    }
                }
                if result.is_ok() {
                    row.cpu[c] += cpu(server) - before.0;
                }
                let SideResult::Runs(runs) = &mut row.cells[c] else {
                    continue;
                };
                match result {
                    Ok(r) => {
                        eprintln!(
                            "[replication {}/{}] {} -P {} {label}: {:.0} ops/s, p99 {:.3} ms",
                            round + 1,
                            s.rounds,
                            w.name,
                            w.pipeline,
                            r.ops_per_sec,
                            r.latency_ms.p99
                        );
                        runs.push(r);
                    }
                    Err(err) => row.cells[c] = SideResult::Failed(err),
                }
            }
        }
    }
    Ok(out)
}

/// "Redis alone", "Leasehold + replica" and so on.
pub fn setup_label(kind: Kind, with_replica: bool) -> String {
    format!(
        "{}{}",
        kind.label(),
        if with_replica { " + replica" } else { " alone" }
    )
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
