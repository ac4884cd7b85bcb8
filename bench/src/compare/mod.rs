//! Compare mode: starts Redis 7 and Leasehold on free loopback ports, runs
//! every workload against both in alternation for several rounds, measures
//! memory per key and reclamation, and writes `docs/benchmarks.md`.
//!
//! Each load run is a child `leasehold-bench ... --json` process, so the
//! commands printed in the report are exactly the ones that ran, and the
//! generator's memory and threads stay out of this process.
//!
//! # Layout
//! - [`servers`]: starting and stopping the two servers.
//! - [`first`]: "the first benchmark a user runs", `redis-benchmark -q` on
//!   Redis and Leasehold at two thread counts, and its targets.
//! - [`workloads`]: the rows (what each server is sent).
//! - [`table`]: medians, noise, and the throughput table.
//! - [`memory`]: memory per key and reclamation.
//! - [`crosscheck`]: the same servers under Redis's own redis-benchmark.
//! - [`redis_benchmark`]: running redis-benchmark and reading its `--csv`.
//! - [`replication`]: throughput with a replica, replica lag, full sync and
//!   Sentinel failover.
//! - [`persistence`]: throughput with the append-only log, BGSAVE, and a
//!   restart from the log.
//! - [`with_without`]: what those two share: the throughput rows on a
//!   server without and with the feature, and their tables.
//! - [`scripts`]: "scripts and data types": redis-benchmark's whole default
//!   suite, EVALSHA of the token-bucket script on both servers against
//!   TOKENLEASE, and memory per key of a sorted set and a hash.
//! - [`hot`]: hot keys: Leasehold with the hot-key split on and off
//!   against the Lua script on Redis, on one hot key, Zipf and uniform
//!   loads, where the commands ran, and the cost model.
//! - [`cluster`]: a 3-primary Leasehold cluster against a 3-primary Redis
//!   Cluster: redis-benchmark --cluster, the cost of a MOVED, a reshard.
//! - [`doc`]: the whole markdown page.

pub mod chart;
pub mod charts;
pub mod cluster;
pub mod crosscheck;
pub mod doc;
pub mod first;
pub mod hot;
pub mod lease;
pub mod memory;
pub mod persistence;
pub mod redis_benchmark;
pub mod replication;
pub mod scripts;
pub mod servers;
pub mod table;
pub mod tls;
pub mod with_without;
pub mod workloads;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use self::memory::MemoryResult;
use self::servers::{Kind, Server};
use self::table::{RowResult, SideResult};
use self::workloads::{Side, Workload};
use crate::report::Report;
use crate::template::Template;

/// Flags of `leasehold-bench compare`.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    /// redis-server binary (Debian's redis-server 7.x).
    #[arg(long, default_value = "redis-server")]
    pub redis_bin: PathBuf,
    /// leasehold-server binary [default: next to this binary].
    #[arg(long)]
    pub leasehold_bin: Option<PathBuf>,
    /// Leasehold's --threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Rounds; each row runs once per round on each server.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Seconds per run.
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    /// Connections per run.
    #[arg(long, default_value_t = 50)]
    pub connections: usize,
    /// Keys per throughput run.
    #[arg(long, default_value_t = 100_000)]
    pub keyspace: u64,
    /// Keys for the memory and reclamation rows.
    #[arg(long, default_value_t = 1_000_000)]
    pub memory_keys: u64,
    /// Keys for the sliding-window memory row at the limit: each key is hit
    /// 100 times, so this many x 100 calls (1M calls of the Lua script took
    /// 13-22 s on Redis on 2 cores; the fill must stay well under 60 s).
    #[arg(long, default_value_t = 10_000)]
    pub memory_limit_keys: u64,
    /// Longest wait for reclamation, in seconds.
    #[arg(long, default_value_t = 60)]
    pub reclaim_limit: u64,
    /// A short smoke run: 1 round of 0.5 s, 20 000 keys for memory rows
    /// (2 000 at the limit).
    #[arg(long)]
    pub quick: bool,
    /// Only throughput rows whose name contains this text (for trials).
    #[arg(long)]
    pub only: Option<String>,
    /// Skip "the first benchmark a user runs" (`redis-benchmark -q` on
    /// Redis, Leasehold at --threads and Leasehold --threads 1).
    #[arg(long)]
    pub skip_first: bool,
    /// Run only "the first benchmark a user runs" and put it into the
    /// existing --out page in place of its old one (with its chart).
    #[arg(long, conflicts_with = "skip_first")]
    pub first_only: bool,
    /// Requests per redis-benchmark test at -P 1 in the first-benchmark
    /// section; -P 16 runs 10 times as many (about 1-2 s per test on 2 cores;
    /// 10 000 with --quick).
    #[arg(long, default_value_t = 100_000)]
    pub first_requests: u64,
    /// Skip the redis-benchmark cross-check.
    #[arg(long)]
    pub skip_crosscheck: bool,
    /// Skip the throughput rows (with --skip-crosscheck: memory and
    /// reclamation only).
    #[arg(long)]
    pub skip_throughput: bool,
    /// Skip the memory and reclamation rows.
    #[arg(long)]
    pub skip_memory: bool,
    /// Skip the lease manager's measurements (accuracy, ledger calls).
    #[arg(long)]
    pub skip_lease: bool,
    /// Skip the replication section (throughput with a replica, lag, full
    /// sync, Sentinel failover).
    #[arg(long)]
    pub skip_replication: bool,
    /// Run only the replication section and put it into the existing --out
    /// page in place of its previous replication section, leaving the other
    /// sections as they are (for trials).
    #[arg(long, conflicts_with_all = ["skip_replication", "first_only"])]
    pub replication_only: bool,
    /// Keys on the primary in the replication section's full sync (50 000
    /// with --quick).
    #[arg(long, default_value_t = 1_000_000)]
    pub sync_keys: u64,
    /// Sentinel failover rounds per server (1 with --quick).
    #[arg(long, default_value_t = 2)]
    pub failover_rounds: usize,
    /// Skip the persistence section (throughput with the append-only log,
    /// BGSAVE, restart from the log).
    #[arg(long)]
    pub skip_persistence: bool,
    /// Run only the persistence section and put it into the existing --out
    /// page in place of its previous persistence section, leaving the other
    /// sections as they are (for trials).
    #[arg(long, conflicts_with_all = ["skip_persistence", "first_only", "replication_only"])]
    pub persistence_only: bool,
    /// Keys of the persistence section's BGSAVE and restart (50 000 with
    /// --quick).
    #[arg(long, default_value_t = 1_000_000)]
    pub persistence_keys: u64,
    /// Skip the "scripts and data types" section (redis-benchmark's default
    /// suite, EVALSHA against TOKENLEASE, memory of a sorted set and a hash).
    #[arg(long)]
    pub skip_scripts: bool,
    /// Run only the "scripts and data types" section and put it into the
    /// existing --out page in place of its previous one, leaving the other
    /// sections as they are.
    #[arg(long, conflicts_with_all = ["skip_scripts", "first_only", "replication_only", "persistence_only"])]
    pub scripts_only: bool,
    /// Requests per test of the scripts section's default redis-benchmark
    /// suite (about 30-40 s a round per server on 2 cores; 2 000 with --quick).
    #[arg(long, default_value_t = 50_000)]
    pub suite_requests: u64,
    /// Requests per EVALSHA / TOKENLEASE run at -P 16 in the scripts section;
    /// -P 1 runs a quarter of them (20 000 with --quick).
    #[arg(long, default_value_t = 200_000)]
    pub script_requests: u64,
    /// Keys of each kind in the scripts section's memory rows (2 000 with
    /// --quick).
    #[arg(long, default_value_t = 100_000)]
    pub collection_keys: u64,
    /// Skip the TLS section (redis-benchmark --tls on both servers).
    #[arg(long)]
    pub skip_tls: bool,
    /// Run only the TLS section and put it into the existing --out page in
    /// place of its previous one, leaving the other sections as they are.
    #[arg(long, conflicts_with_all = ["skip_tls", "first_only", "replication_only", "persistence_only", "scripts_only"])]
    pub tls_only: bool,
    /// Requests per redis-benchmark test at -P 1 in the TLS section; -P 16
    /// runs 10 times as many (10 000 with --quick).
    #[arg(long, default_value_t = 100_000)]
    pub tls_requests: u64,
    /// Skip the hot-key section (split on and off against the Lua script).
    #[arg(long)]
    pub skip_hot: bool,
    /// Run only the hot-key section and put it into the existing --out page
    /// in place of its previous one, leaving the other sections as they are.
    #[arg(long, conflicts_with_all = ["skip_hot", "first_only", "replication_only", "persistence_only", "scripts_only", "tls_only"])]
    pub hot_only: bool,
    /// Rounds of the hot-key section (each runs its 9 rows on 3 servers:
    /// about 90 s a round at the default --duration; 1 with --quick).
    #[arg(long, default_value_t = 5)]
    pub hot_rounds: usize,
    /// Skip the cluster section (a 3-primary Leasehold cluster against a
    /// 3-primary Redis Cluster: redis-benchmark --cluster, the cost of a
    /// MOVED, a reshard under a probing client).
    #[arg(long)]
    pub skip_cluster: bool,
    /// Run only the cluster section and put it into the existing --out page
    /// in place of its previous one, leaving the other sections as they are.
    #[arg(long, conflicts_with_all = ["skip_cluster", "first_only", "replication_only", "persistence_only", "scripts_only", "tls_only", "hot_only"])]
    pub cluster_only: bool,
    /// Requests per redis-benchmark test at -P 1 in the cluster section;
    /// -P 16 runs 10 times as many (10 000 with --quick).
    #[arg(long, default_value_t = 100_000)]
    pub cluster_requests: u64,
    /// GETs of each kind (direct, redirected) in the MOVED measurement
    /// (2 000 with --quick).
    #[arg(long, default_value_t = 50_000)]
    pub moved_samples: u64,
    /// Slots the cluster section's reshard moves (0..N, group 0 to group 1).
    #[arg(long, default_value_t = 1000)]
    pub reshard_slots: u16,
    /// Keys in those slots (20 000 with --quick).
    #[arg(long, default_value_t = 1_000_000)]
    pub reshard_keys: u64,
    /// The cluster section's first port: Leasehold's three nodes on it and
    /// the two after, Redis's on port + 10.. (their cluster bus on
    /// port + 10010..); all must be free.
    #[arg(long, default_value_t = 7840)]
    pub cluster_port: u16,
    /// `--threads` of each Leasehold node in the cluster section (Redis is
    /// one thread per node).
    #[arg(long, default_value_t = 1)]
    pub cluster_threads: usize,
    /// Directory of the Lua scripts.
    #[arg(long, default_value = "bench/lua")]
    pub lua_dir: PathBuf,
    /// Where to write the markdown report.
    #[arg(long, default_value = "docs/benchmarks.md")]
    pub out: PathBuf,
}

impl CompareArgs {
    /// The settings after `--quick`.
    fn effective(&self) -> CompareArgs {
        let mut a = self.clone();
        if a.quick {
            a.rounds = 1;
            a.duration = 0.5;
            a.memory_keys = a.memory_keys.min(20_000);
            a.memory_limit_keys = a.memory_limit_keys.min(2_000);
            a.reclaim_limit = a.reclaim_limit.min(30);
            a.first_requests = a.first_requests.min(10_000);
            a.sync_keys = a.sync_keys.min(50_000);
            a.failover_rounds = a.failover_rounds.min(1);
            a.persistence_keys = a.persistence_keys.min(50_000);
            a.suite_requests = a.suite_requests.min(2_000);
            a.script_requests = a.script_requests.min(20_000);
            a.collection_keys = a.collection_keys.min(2_000);
            a.tls_requests = a.tls_requests.min(10_000);
            a.hot_rounds = a.hot_rounds.min(1);
            a.cluster_requests = a.cluster_requests.min(10_000);
            a.moved_samples = a.moved_samples.min(2_000);
            a.reshard_keys = a.reshard_keys.min(20_000);
        }
        // An `--*-only` run skips every section but its own.
        let only = [
            (a.first_only, "first"),
            (a.replication_only, "replication"),
            (a.persistence_only, "persistence"),
            (a.scripts_only, "scripts"),
            (a.tls_only, "tls"),
            (a.hot_only, "hot"),
            (a.cluster_only, "cluster"),
        ]
        .into_iter()
        .find_map(|(on, name)| on.then_some(name));
        if let Some(keep) = only {
            for (name, skip) in [
                ("first", &mut a.skip_first),
                ("throughput", &mut a.skip_throughput),
                ("crosscheck", &mut a.skip_crosscheck),
                ("memory", &mut a.skip_memory),
                ("lease", &mut a.skip_lease),
                ("replication", &mut a.skip_replication),
                ("persistence", &mut a.skip_persistence),
                ("scripts", &mut a.skip_scripts),
                ("tls", &mut a.skip_tls),
                ("hot", &mut a.skip_hot),
                ("cluster", &mut a.skip_cluster),
            ] {
                *skip |= name != keep;
            }
        }
        a
    }
}

/// Spawns child load runs and remembers how to print them.
#[derive(Debug)]
pub struct Runner {
    exe: PathBuf,
    lua_dir: PathBuf,
    connections: usize,
    keyspace: u64,
    duration: f64,
}

impl Runner {
    fn script(&self, side: &Side) -> Option<PathBuf> {
        side.script.map(|s| self.lua_dir.join(s))
    }

    /// Arguments of one throughput run of `side` against `server`.
    pub fn throughput_args(&self, server: &Server, w: &Workload, side: &Side) -> Vec<String> {
        let mut a = vec![
            "--port".into(),
            server.port.to_string(),
            "-c".into(),
            self.connections.to_string(),
            "-P".into(),
            w.pipeline.to_string(),
            "--duration".into(),
            self.duration.to_string(),
            "-r".into(),
            self.keyspace.to_string(),
            "--distribution".into(),
            w.distribution.into(),
            "--command".into(),
            side.command.into(),
        ];
        if let Some(s) = self.script(side) {
            a.extend(["--script".into(), s.display().to_string()]);
        }
        a
    }

    /// Arguments of a run that calls each of keys 0..keys exactly `hits`
    /// times: the sequential distribution visits the keys in turn, `hits`
    /// times over (`-n keys*hits -r keys`).
    pub fn fill_args(
        &self,
        server: &Server,
        command: &str,
        script: Option<&Path>,
        keys: u64,
        hits: u64,
    ) -> Vec<String> {
        let mut a: Vec<String> = [
            "--port",
            &server.port.to_string(),
            "-c",
            "8",
            "-P",
            "64",
            "-n",
            &(keys * hits).to_string(),
        ]
        .map(String::from)
        .to_vec();
        a.extend(
            [
                "-r",
                &keys.to_string(),
                "--distribution",
                "sequential",
                "--command",
                command,
            ]
            .map(String::from),
        );
        if let Some(s) = script {
            a.extend(["--script".into(), s.display().to_string()]);
        }
        a
    }

    /// The shell line for `args` as printed in the report.
    pub fn command_line(&self, args: &[String]) -> String {
        format!(
            "{} {}",
            servers::display_path(&self.exe),
            servers::shell_join(args)
        )
    }

    /// Runs `leasehold-bench <args> --json --allow-errors` and reads its report.
    ///
    /// # Errors
    /// The child's failure (its stderr) or unreadable output.
    pub fn run(&self, args: &[String]) -> Result<Report, String> {
        let out = Command::new(&self.exe)
            .args(args)
            .args(["--json", "--allow-errors"])
            .output()
            .map_err(|e| format!("{}: {e}", self.exe.display()))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().last().unwrap_or("");
        serde_json::from_str(line).map_err(|e| format!("unreadable report {line:?}: {e}"))
    }
}

/// Sends `command` (key index 0) once; `Some(reason)` when the server does
/// not know the command, which marks the row pending.
fn pending_reason(server: &Server, command: &str) -> Result<Option<String>, String> {
    let args = Template::parse(command, Some("0"))
        .map_err(|e| e.to_string())?
        .args(0);
    let reply = server
        .conn()
        .and_then(|mut c| c.call(&args))
        .map_err(|e| e.to_string())?;
    Ok(match reply {
        leasehold_protocol::Reply::Error(e) if e.contains("unknown command") => Some(format!(
            "no {} yet (unknown command)",
            String::from_utf8_lossy(&args[0])
        )),
        _ => None,
    })
}

/// Runs the whole comparison and writes the report.
///
/// # Errors
/// A server that does not start, or the report that cannot be written.
pub fn main(args: &CompareArgs) -> Result<(), Box<dyn std::error::Error>> {
    let args = args.effective();
    let exe = std::env::current_exe()?;
    let leasehold_bin = args
        .leasehold_bin
        .clone()
        .unwrap_or_else(|| exe.with_file_name("leasehold-server"));
    let runner = Runner {
        exe,
        lua_dir: args.lua_dir.clone(),
        connections: args.connections,
        keyspace: args.keyspace,
        duration: args.duration,
    };
    let replication_settings = replication::Settings {
        redis_bin: args.redis_bin.clone(),
        leasehold_bin: leasehold_bin.clone(),
        threads: args.threads,
        rounds: args.rounds,
        sync_keys: args.sync_keys,
        failover_rounds: args.failover_rounds,
        quick: args.quick,
        duration: args.duration,
        connections: args.connections,
        keyspace: args.keyspace,
    };
    let persistence_settings = persistence::Settings {
        redis_bin: args.redis_bin.clone(),
        leasehold_bin: leasehold_bin.clone(),
        threads: args.threads,
        rounds: args.rounds,
        keys: args.persistence_keys,
        quick: args.quick,
        duration: args.duration,
    };
    let scripts_settings = scripts::Settings {
        redis_bin: args.redis_bin.clone(),
        leasehold_bin: leasehold_bin.clone(),
        threads: args.threads,
        rounds: args.rounds,
        suite_requests: args.suite_requests,
        script_requests: args.script_requests,
        collection_keys: args.collection_keys,
        lua_dir: args.lua_dir.clone(),
        quick: args.quick,
    };
    let tls_settings = tls::Settings {
        redis_bin: args.redis_bin.clone(),
        leasehold_bin: leasehold_bin.clone(),
        threads: args.threads,
        rounds: args.rounds,
        requests: args.tls_requests,
        quick: args.quick,
    };
    let hot_settings = hot::Settings {
        redis_bin: args.redis_bin.clone(),
        leasehold_bin: leasehold_bin.clone(),
        threads: args.threads,
        rounds: args.hot_rounds,
        quick: args.quick,
    };
    let cluster_settings = cluster::Settings {
        redis_bin: args.redis_bin.clone(),
        leasehold_bin: leasehold_bin.clone(),
        threads: args.cluster_threads,
        rounds: args.rounds,
        requests: args.cluster_requests,
        moved_samples: args.moved_samples,
        reshard_slots: args.reshard_slots,
        reshard_keys: args.reshard_keys,
        base_port: args.cluster_port,
        lua_dir: args.lua_dir.clone(),
        quick: args.quick,
    };
    let only = if args.hot_only {
        let section = hot::run(&hot_settings, &runner);
        Some((hot::HEADING, hot::render::section(&section)))
    } else if args.replication_only {
        let section = replication::run(&replication_settings, &runner);
        Some((
            replication::render::HEADING,
            replication::render::section(&section),
        ))
    } else if args.persistence_only {
        let section = persistence::run(&persistence_settings, &runner);
        Some((
            persistence::render::HEADING,
            persistence::render::section(&section),
        ))
    } else if args.scripts_only {
        let section = scripts::run(&scripts_settings, &runner);
        Some((scripts::render::HEADING, scripts::render::section(&section)))
    } else if args.tls_only {
        Some((tls::HEADING, tls::section(&tls::run(&tls_settings))))
    } else if args.cluster_only {
        let section = cluster::run(&cluster_settings);
        Some((cluster::HEADING, cluster::render::section(&section)))
    } else {
        None
    };
    if let Some((heading, text)) = only {
        replace_section(&args.out, heading, &text)?;
        servers::remove_scratch_root();
        return Ok(());
    }
    let started = Instant::now();
    let load_at_start = doc::load_average();
    let redis = Server::start(Kind::Redis, &args.redis_bin, args.threads)?;
    let leasehold = Server::start(Kind::Leasehold, &leasehold_bin, args.threads)?;
    eprintln!("redis on :{}, leasehold on :{}", redis.port, leasehold.port);
    let mut commands: Vec<String> = Vec::new();
    // First, on fresh servers, as a newcomer meets them; it leaves them empty.
    let first = if args.skip_first {
        None
    } else {
        Some(first::run(
            &redis,
            &leasehold,
            &leasehold_bin,
            args.threads,
            args.rounds,
            args.first_requests,
            &mut commands,
        )?)
    };
    if let Some(mut f) = first.as_ref().filter(|_| args.first_only).cloned() {
        f.alone = Some(with_without::facts(started, &load_at_start));
        let drawn = charts::write_all(&args.out, Some(&f), &[], &[]);
        replace_section(&args.out, first::HEADING, &doc::first_section(&f, &drawn))?;
        drop((redis, leasehold));
        servers::remove_scratch_root();
        return Ok(());
    }
    let server = |k: Kind| if k == Kind::Redis { &redis } else { &leasehold };

    let workloads: Vec<Workload> = workloads::all()
        .into_iter()
        .filter(|_| !args.skip_throughput)
        .filter(|w| args.only.as_deref().is_none_or(|o| w.name.contains(o)))
        .collect();
    let mut rows: Vec<RowResult> = Vec::new();
    for w in &workloads {
        let probe = |k: Kind| match pending_reason(server(k), w.side(k).command) {
            Ok(Some(why)) => SideResult::Pending(why),
            Ok(None) => SideResult::Runs(Vec::new()),
            Err(e) => SideResult::Failed(e),
        };
        // Redis runs the scripts, which the probe cannot send before SCRIPT LOAD.
        let redis_side = if w.redis.script.is_some() {
            SideResult::Runs(Vec::new())
        } else {
            probe(Kind::Redis)
        };
        rows.push(RowResult {
            workload: w.clone(),
            redis: redis_side,
            leasehold: probe(Kind::Leasehold),
        });
    }
    for round in 0..args.rounds {
        for (i, row) in rows.iter_mut().enumerate() {
            // Alternate which server goes first so neither always runs warm.
            let order = if (round + i) % 2 == 0 {
                [Kind::Redis, Kind::Leasehold]
            } else {
                [Kind::Leasehold, Kind::Redis]
            };
            for kind in order {
                let w = &row.workload;
                let a = runner.throughput_args(server(kind), w, w.side(kind));
                if round == 0 {
                    commands.push(format!(
                        "# {} -P {} on {}\n{}",
                        w.name,
                        w.pipeline,
                        kind.label(),
                        runner.command_line(&a)
                    ));
                }
                let slot = if kind == Kind::Redis {
                    &mut row.redis
                } else {
                    &mut row.leasehold
                };
                let SideResult::Runs(runs) = slot else {
                    continue;
                };
                match runner.run(&a) {
                    Ok(r) => {
                        eprintln!(
                            "[round {}/{}] {} -P {} {}: {:.0} ops/s, p99 {:.3} ms, {} errors",
                            round + 1,
                            args.rounds,
                            w.name,
                            w.pipeline,
                            kind.label(),
                            r.ops_per_sec,
                            r.latency_ms.p99,
                            r.errors
                        );
                        runs.push(r);
                    }
                    Err(e) => *slot = SideResult::Failed(e),
                }
            }
        }
    }

    let checks = if args.skip_crosscheck {
        Vec::new()
    } else {
        let scale = if args.quick { 0.1 } else { 1.0 };
        crosscheck::run_all(&redis, &leasehold, &args.lua_dir, scale, &mut commands)
    };
    let (mut memory_rows, mut reclaim) = (Vec::new(), None);
    if !args.skip_memory {
        memory_rows = measure_memory(&args, &runner, &redis, &leasehold, &mut commands);
        reclaim = Some(measure_reclaim(
            &args,
            &runner,
            &redis,
            &leasehold,
            &mut commands,
        ));
    }
    let replication =
        (!args.skip_replication).then(|| replication::run(&replication_settings, &runner));
    let persistence =
        (!args.skip_persistence).then(|| persistence::run(&persistence_settings, &runner));
    let scripts = (!args.skip_scripts).then(|| scripts::run(&scripts_settings, &runner));
    let tls = (!args.skip_tls).then(|| tls::run(&tls_settings));
    let hot = (!args.skip_hot).then(|| hot::run(&hot_settings, &runner));
    let cluster = (!args.skip_cluster).then(|| cluster::run(&cluster_settings));
    let lease_runs = if args.skip_lease {
        Vec::new()
    } else {
        lease::run_all(args.quick)
    };
    let drawn = charts::write_all(&args.out, first.as_ref(), &rows, &lease_runs);
    let page = doc::render(&doc::Page {
        args: &args,
        charts: &drawn,
        servers: [&redis, &leasehold],
        first: first.as_ref(),
        rows: &rows,
        memory: &memory_rows,
        reclaim: reclaim.as_ref(),
        replication: replication.as_ref(),
        persistence: persistence.as_ref(),
        scripts: scripts.as_ref(),
        tls: tls.as_ref(),
        cluster: cluster.as_ref(),
        checks: &checks,
        lease: &lease_runs,
        load_at_start: &load_at_start,
        commands: &commands,
        elapsed: started.elapsed(),
    });
    let page = match &hot {
        Some(h) => doc::splice(&page, hot::HEADING, &hot::render::section(h)),
        None => page,
    };
    write_page(&args.out, &page)?;
    eprintln!(
        "wrote {} in {:.0} s",
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    drop((redis, leasehold));
    servers::remove_scratch_root();
    Ok(())
}

/// Puts `text` (a whole section) into the page at `out` in place of the
/// section headed `heading` ([`doc::splice`]).
fn replace_section(out: &Path, heading: &str, text: &str) -> std::io::Result<()> {
    let page = std::fs::read_to_string(out).unwrap_or_default();
    write_page(out, &doc::splice(&page, heading, text))?;
    eprintln!("replaced the {heading:?} section of {}", out.display());
    Ok(())
}

/// Writes `page` to `out`, creating its directory.
fn write_page(out: &Path, page: &str) -> std::io::Result<()> {
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(out, page)
}

fn measure_memory(
    args: &CompareArgs,
    runner: &Runner,
    redis: &Server,
    leasehold: &Server,
    commands: &mut Vec<String>,
) -> Vec<MemoryResult> {
    let keys = |row: &workloads::MemoryRow| {
        if row.hits > 1 {
            args.memory_limit_keys
        } else {
            args.memory_keys
        }
    };
    measure_memory_rows(
        &workloads::memory_rows(),
        &keys,
        runner,
        [redis, leasehold],
        commands,
    )
}

/// Measures each of `rows` with `keys(row)` keys on Redis, then on
/// Leasehold (`servers`, in that order); each fill's command line goes to
/// `commands`.
pub fn measure_memory_rows(
    rows: &[workloads::MemoryRow],
    keys: &dyn Fn(&workloads::MemoryRow) -> u64,
    runner: &Runner,
    [redis, leasehold]: [&Server; 2],
    commands: &mut Vec<String>,
) -> Vec<MemoryResult> {
    let mut out = Vec::new();
    for row in rows {
        let keys = keys(row);
        let mut one = |server: &Server, side: &Side| -> Result<memory::Memory, String> {
            let script = runner.script(side);
            let a = runner.fill_args(server, side.command, script.as_deref(), keys, row.hits);
            commands.push(format!(
                "# memory: {} on {}\n{}",
                row.name,
                server.kind.label(),
                runner.command_line(&a)
            ));
            if script.is_none() {
                if let Some(why) = pending_reason(server, side.command)? {
                    return Err(format!("pending: {why}"));
                }
            }
            let fill_s = std::cell::Cell::new(0.0);
            let m = memory::measure(
                server,
                keys,
                &|| {
                    let r = runner.run(&a)?;
                    fill_s.set(r.seconds);
                    match r.first_error {
                        Some(e) if r.errors > 0 => Err(format!("{} error replies ({e})", r.errors)),
                        _ => Ok(()),
                    }
                },
                script.as_deref(),
            )?;
            if let (Kind::Redis, Some(held)) = (server.kind, row.redis_held) {
                check_held(server, held, keys, row.hits)?;
            }
            eprintln!(
                "memory {} on {}: {:.1} bytes/key ({} keys x {} hits in {:.1} s)",
                row.name,
                server.kind.label(),
                m.per_key(),
                m.keys,
                row.hits,
                fill_s.get()
            );
            Ok(m)
        };
        let r = one(redis, &row.redis);
        let l = one(leasehold, &row.leasehold);
        out.push(MemoryResult {
            name: row.name.to_string(),
            hits: row.hits,
            redis: r,
            leasehold: l,
        });
    }
    out
}

/// Sends `held` (a template) for the first and the last of `keys` keys and
/// fails unless each answers the integer `hits`.
fn check_held(server: &Server, held: &str, keys: u64, hits: u64) -> Result<(), String> {
    let t = Template::parse(held, None).map_err(|e| e.to_string())?;
    let mut conn = server.conn().map_err(|e| e.to_string())?;
    for key in [0, keys.saturating_sub(1)] {
        let args = t.args(key);
        let n = conn.call_int(&args).map_err(|e| e.to_string())?;
        if n != hits as i64 {
            return Err(format!(
                "{} answered {n} after the fill, expected {hits} (a hit was refused or left the window)",
                args.iter()
                    .map(|a| String::from_utf8_lossy(a))
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
    }
    Ok(())
}

fn measure_reclaim(
    args: &CompareArgs,
    runner: &Runner,
    redis: &Server,
    leasehold: &Server,
    commands: &mut Vec<String>,
) -> memory::ReclaimPair {
    let limit = Duration::from_secs(args.reclaim_limit);
    let mut one = |server: &Server| {
        let a = runner.fill_args(
            server,
            workloads::RECLAIM_COMMAND,
            None,
            args.memory_keys,
            1,
        );
        commands.push(format!(
            "# reclamation on {}\n{}",
            server.kind.label(),
            runner.command_line(&a)
        ));
        let r = memory::reclaim(server, &|| runner.run(&a).map(|_| ()), limit);
        eprintln!("reclamation on {}: {r:?}", server.kind.label());
        r
    };
    (one(redis), one(leasehold))
}

#[cfg(test)]
mod tests {
    use super::CompareArgs;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: CompareArgs,
    }

    fn effective(flags: &[&str]) -> CompareArgs {
        let words = std::iter::once("compare").chain(flags.iter().copied());
        Cli::parse_from(words).args.effective()
    }

    /// The skip flags in a fixed order: first, throughput, crosscheck,
    /// memory, lease, replication, persistence, scripts.
    fn skips(a: &CompareArgs) -> [bool; 8] {
        [
            a.skip_first,
            a.skip_throughput,
            a.skip_crosscheck,
            a.skip_memory,
            a.skip_lease,
            a.skip_replication,
            a.skip_persistence,
            a.skip_scripts,
        ]
    }

    #[test]
    fn an_only_run_skips_every_other_section() {
        assert_eq!(skips(&effective(&[])), [false; 8]);
        let all_but = |i: usize| {
            let mut v = [true; 8];
            v[i] = false;
            v
        };
        assert_eq!(skips(&effective(&["--first-only"])), all_but(0));
        assert_eq!(skips(&effective(&["--replication-only"])), all_but(5));
        assert_eq!(skips(&effective(&["--persistence-only"])), all_but(6));
        let scripts = effective(&["--scripts-only", "--quick"]);
        assert_eq!(skips(&scripts), all_but(7));
        assert_eq!(
            (
                scripts.suite_requests,
                scripts.script_requests,
                scripts.collection_keys
            ),
            (2_000, 20_000, 2_000)
        );
        let full = effective(&["--skip-scripts"]);
        assert_eq!(
            skips(&full),
            [false, false, false, false, false, false, false, true]
        );
        assert_eq!(
            (
                full.suite_requests,
                full.script_requests,
                full.collection_keys
            ),
            (50_000, 200_000, 100_000)
        );
        assert!(Cli::try_parse_from(["compare", "--scripts-only", "--skip-scripts"]).is_err());
    }
}
