//! Hot keys: Leasehold with the hot-key split on and with `--hotkey-split
//! no`, against Redis running the equivalent Lua script, on one hot key
//! (TOKENLEASE and CL.THROTTLE), on Zipf loads over 100 000 keys and on a
//! uniform one. Besides throughput each Leasehold run records the commands
//! each shard ran (INFO leasehold `shardN:commands`), the split's counters
//! (INFO hotkeys) and the CPU time of each shard thread, from which
//! [`render`] derives the per-request costs and the model of
//! `docs/hotkeys.md` ("Where the split pays").
//!
//! The three servers run at once; each row runs on the three in turn,
//! rotating which goes first, for every round.

pub mod render;

use std::path::PathBuf;
use std::time::Instant;

use super::servers::{Kind, Server};
use super::table::SideResult;
use super::workloads::{Side, Workload};
use super::{with_without, Runner};
use crate::resp::info_field;

/// The section's heading, which `--hot-only` replaces in a page.
pub const HEADING: &str = "## Hot keys";

/// What the section needs from the comparison's flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// redis-server binary.
    pub redis_bin: PathBuf,
    /// leasehold-server binary.
    pub leasehold_bin: PathBuf,
    /// Leasehold's `--threads`.
    pub threads: usize,
    /// Rounds; each runs every row once on each set-up.
    pub rounds: usize,
    /// A `--quick` smoke run.
    pub quick: bool,
}

/// One of the three servers a row runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setup {
    /// Redis, the Lua script.
    Redis,
    /// Leasehold with the split on (the default).
    SplitOn,
    /// Leasehold started with `--hotkey-split no`.
    SplitOff,
}

/// The set-ups in cell order.
pub const SETUPS: [Setup; 3] = [Setup::Redis, Setup::SplitOn, Setup::SplitOff];

impl Setup {
    /// Its label in tables and progress lines.
    pub fn label(self) -> &'static str {
        match self {
            Setup::Redis => "Redis (Lua)",
            Setup::SplitOn => "Leasehold split on",
            Setup::SplitOff => "Leasehold split off",
        }
    }

    /// The server kind.
    pub fn kind(self) -> Kind {
        match self {
            Setup::Redis => Kind::Redis,
            _ => Kind::Leasehold,
        }
    }

    /// Its index in a row's cells.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The flags after the usual ones.
    fn extra(self) -> Vec<String> {
        match self {
            Setup::SplitOff => vec!["--hotkey-split".into(), "no".into()],
            _ => Vec::new(),
        }
    }
}

/// What one set-up recorded over a row's runs (counters summed over the
/// runs; each is the difference across one run).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// Commands each shard ran (INFO leasehold `shardN:commands`), by
    /// shard; empty for Redis.
    pub shard_commands: Vec<u64>,
    /// CPU seconds of each shard thread, by shard; empty for Redis.
    pub shard_cpu: Vec<f64>,
    /// CPU seconds of the whole process.
    pub cpu: f64,
    /// Keys split (INFO hotkeys `hotkey_splits`).
    pub splits: u64,
    /// Calls granted from a slot with no hop (`hotkey_local_grants`).
    pub local_grants: u64,
    /// Calls a slot could not serve, sent to the owner (`hotkey_borrows`).
    pub borrows: u64,
    /// Gathers of a split key's slots (`hotkey_gathers`).
    pub gathers: u64,
}

impl Counts {
    /// The largest shard's share of the commands the shards ran, 0 to 1.
    pub fn hottest_share(&self) -> Option<f64> {
        let total: u64 = self.shard_commands.iter().sum();
        let max = self.shard_commands.iter().copied().max()?;
        (total > 0).then(|| max as f64 / total as f64)
    }

    /// The shard that ran the most commands.
    pub fn hottest_shard(&self) -> Option<usize> {
        (0..self.shard_commands.len()).max_by_key(|&i| self.shard_commands[i])
    }

    /// `self - before`, counter by counter.
    fn since(&self, before: &Counts) -> Counts {
        let sub_u = |a: &[u64], b: &[u64]| -> Vec<u64> {
            a.iter()
                .enumerate()
                .map(|(i, x)| x.saturating_sub(b.get(i).copied().unwrap_or(0)))
                .collect()
        };
        let sub_f = |a: &[f64], b: &[f64]| -> Vec<f64> {
            a.iter()
                .enumerate()
                .map(|(i, x)| x - b.get(i).copied().unwrap_or(0.0))
                .collect()
        };
        Counts {
            shard_commands: sub_u(&self.shard_commands, &before.shard_commands),
            shard_cpu: sub_f(&self.shard_cpu, &before.shard_cpu),
            cpu: self.cpu - before.cpu,
            splits: self.splits.saturating_sub(before.splits),
            local_grants: self.local_grants.saturating_sub(before.local_grants),
            borrows: self.borrows.saturating_sub(before.borrows),
            gathers: self.gathers.saturating_sub(before.gathers),
        }
    }

    /// Adds `d` to these counts.
    fn add(&mut self, d: &Counts) {
        let n = self.shard_commands.len().max(d.shard_commands.len());
        self.shard_commands.resize(n, 0);
        for (a, b) in self.shard_commands.iter_mut().zip(&d.shard_commands) {
            *a += b;
        }
        let n = self.shard_cpu.len().max(d.shard_cpu.len());
        self.shard_cpu.resize(n, 0.0);
        for (a, b) in self.shard_cpu.iter_mut().zip(&d.shard_cpu) {
            *a += b;
        }
        self.cpu += d.cpu;
        self.splits += d.splits;
        self.local_grants += d.local_grants;
        self.borrows += d.borrows;
        self.gathers += d.gathers;
    }
}

/// The counters of `server` now.
fn read_counts(server: &Server) -> Counts {
    let mut c = Counts {
        cpu: server.cpu_seconds().unwrap_or(0.0),
        ..Counts::default()
    };
    if server.kind != Kind::Leasehold {
        return c;
    }
    c.shard_cpu = server.thread_cpu_seconds("leasehold-shard");
    let info = |section: &str| {
        server
            .conn()
            .and_then(|mut conn| conn.call_text(&["INFO", section]))
            .unwrap_or_default()
    };
    c.shard_commands = shard_commands(&info("leasehold"));
    let hot = info("hotkeys");
    let n = |f: &str| {
        info_field(&hot, f)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    c.splits = n("hotkey_splits");
    c.local_grants = n("hotkey_local_grants");
    c.borrows = n("hotkey_borrows");
    c.gathers = n("hotkey_gathers");
    c
}

/// The `commands=` of each `shardN:` line of INFO leasehold, by shard.
pub fn shard_commands(info: &str) -> Vec<u64> {
    let mut out: Vec<(usize, u64)> = info
        .lines()
        .filter_map(|l| {
            let (shard, fields) = l.strip_prefix("shard")?.split_once(':')?;
            let n = fields
                .split(',')
                .find_map(|f| f.strip_prefix("commands="))?
                .trim()
                .parse()
                .ok()?;
            Some((shard.parse().ok()?, n))
        })
        .collect();
    out.sort_unstable();
    out.into_iter().map(|(_, n)| n).collect()
}

/// One set-up's results in a row.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// The runs.
    pub result: SideResult,
    /// Its counters over the runs that succeeded.
    pub counts: Counts,
}

/// One row on the three set-ups.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// What was run (Redis's side is the script).
    pub workload: Workload,
    /// Indexed by [`Setup::index`].
    pub cells: [Cell; 3],
}

/// The section's results.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// Why it did not run.
    pub skipped: Option<String>,
    /// A `--quick` smoke run.
    pub quick: bool,
    /// Leasehold's `--threads`.
    pub threads: usize,
    /// Rounds run.
    pub rounds: usize,
    /// Seconds per run.
    pub duration: f64,
    /// Connections per run.
    pub connections: usize,
    /// Commit, date, load averages, time taken.
    pub facts: String,
    /// The servers' command lines.
    pub servers: Vec<String>,
    /// Each row's command line on each set-up (the first round's).
    pub commands: Vec<String>,
    /// The rows.
    pub rows: Vec<Row>,
}

/// The one hot key's token bucket: 10^8 tokens refilled at one a second,
/// one per call (a bucket draining slowly, as during a launch); every call
/// is granted and the epoch of a split grows with the tokens spent.
pub const HOT_BUCKET: (Side, Side) = (
    Side {
        command: "EVALSHA __sha__ 1 hot:tb 100000000 1 1000 1",
        script: Some("token_bucket.lua"),
    },
    Side {
        command: "TOKENLEASE hot:tb 100000000 1 1000 1",
        script: None,
    },
);

/// The one hot key's GCRA limit: a burst of 10^8 cells, one an hour.
pub const HOT_GCRA: (Side, Side) = (
    Side {
        command: "EVALSHA __sha__ 1 hot:gc 99999999 1 3600 1",
        script: Some("gcra.lua"),
    },
    Side {
        command: "CL.THROTTLE hot:gc 99999999 1 3600 1",
        script: None,
    },
);

/// The Zipf and uniform rows' buckets: 10^6 tokens, 10 a second, one per
/// call, so no key reaches its limit during the runs (the hottest key of
/// Zipf(1.2) takes about 18% of the calls, some 400 000 over a whole run
/// of this section) and every call is a grant that writes.
pub const MANY_BUCKETS: (Side, Side) = (
    Side {
        command: "EVALSHA __sha__ 1 z:__key__ 1000000 10 1000 1",
        script: Some("token_bucket.lua"),
    },
    Side {
        command: "TOKENLEASE z:__key__ 1000000 10 1000 1",
        script: None,
    },
);

/// The one-hot-key row names, which the targets and the model look for.
pub const HOT_TOKENLEASE: &str = "one hot key, TOKENLEASE";
/// See [`HOT_TOKENLEASE`].
pub const HOT_THROTTLE: &str = "one hot key, CL.THROTTLE";
/// The uniform row's name.
pub const UNIFORM: &str = "100 000 keys uniform, TOKENLEASE";

/// Every row, in run order.
pub fn rows() -> Vec<Workload> {
    let row = |name, (redis, leasehold): (Side, Side), pipeline, distribution| Workload {
        name,
        pipeline,
        distribution,
        redis,
        leasehold,
    };
    vec![
        row(HOT_TOKENLEASE, HOT_BUCKET, 1, "uniform"),
        row(HOT_TOKENLEASE, HOT_BUCKET, 16, "uniform"),
        row(HOT_THROTTLE, HOT_GCRA, 1, "uniform"),
        row(HOT_THROTTLE, HOT_GCRA, 16, "uniform"),
        row(
            "Zipf(0.99) over 100 000 keys, TOKENLEASE",
            MANY_BUCKETS,
            1,
            "zipf:0.99",
        ),
        row(
            "Zipf(0.99) over 100 000 keys, TOKENLEASE",
            MANY_BUCKETS,
            16,
            "zipf:0.99",
        ),
        row(
            "Zipf(1.2) over 100 000 keys, TOKENLEASE",
            MANY_BUCKETS,
            1,
            "zipf:1.2",
        ),
        row(
            "Zipf(1.2) over 100 000 keys, TOKENLEASE",
            MANY_BUCKETS,
            16,
            "zipf:1.2",
        ),
        row(UNIFORM, MANY_BUCKETS, 16, "uniform"),
    ]
}

/// Starts the three servers and runs every row on them for the rounds.
pub fn run(s: &Settings, runner: &Runner) -> Section {
    let started = Instant::now();
    let load = super::doc::load_average();
    let mut section = Section {
        skipped: None,
        quick: s.quick,
        threads: s.threads,
        rounds: s.rounds,
        duration: runner.duration,
        connections: runner.connections,
        facts: String::new(),
        servers: Vec::new(),
        commands: Vec::new(),
        rows: Vec::new(),
    };
    let mut servers = Vec::new();
    for setup in SETUPS {
        let bin = match setup.kind() {
            Kind::Redis => &s.redis_bin,
            Kind::Leasehold => &s.leasehold_bin,
        };
        match Server::start_with(setup.kind(), bin, s.threads, &setup.extra()) {
            Ok(server) => {
                section.servers.push(server.command_line.clone());
                servers.push(server);
            }
            Err(e) => {
                section.skipped = Some(format!("{} did not start: {e}", setup.label()));
                return section;
            }
        }
    }
    eprintln!(
        "hot keys: {}",
        SETUPS
            .iter()
            .zip(&servers)
            .map(|(s, v)| format!("{} on :{}", s.label(), v.port))
            .collect::<Vec<_>>()
            .join(", ")
    );
    section.rows = rows()
        .into_iter()
        .map(|workload| Row {
            workload,
            cells: std::array::from_fn(|_| Cell {
                result: SideResult::Runs(Vec::new()),
                counts: Counts::default(),
            }),
        })
        .collect();
    let rounds = s.rounds;
    for round in 0..rounds {
        for (i, row) in section.rows.iter_mut().enumerate() {
            for k in 0..SETUPS.len() {
                let c = (k + round + i) % SETUPS.len();
                let (setup, server) = (SETUPS[c], &servers[c]);
                let w = &row.workload;
                let a = runner.throughput_args(server, w, w.side(setup.kind()));
                if round == 0 {
                    section.commands.push(format!(
                        "# {} -P {} on {}\n{}",
                        w.name,
                        w.pipeline,
                        setup.label(),
                        runner.command_line(&a)
                    ));
                }
                let before = read_counts(server);
                let result = runner.run(&a);
                let delta = read_counts(server).since(&before);
                let cell = &mut row.cells[c];
                let SideResult::Runs(runs) = &mut cell.result else {
                    continue;
                };
                match result {
                    Ok(r) => {
                        eprintln!(
                            "[hot keys {}/{rounds}] {} -P {} {}: {:.0} ops/s, p99 {:.3} ms, hottest shard {}",
                            round + 1,
                            w.name,
                            w.pipeline,
                            setup.label(),
                            r.ops_per_sec,
                            r.latency_ms.p99,
                            delta
                                .hottest_share()
                                .map_or("-".into(), |v| format!("{:.0}%", v * 100.0))
                        );
                        runs.push(r);
                        cell.counts.add(&delta);
                    }
                    Err(e) => cell.result = SideResult::Failed(e),
                }
            }
        }
    }
    section.facts = with_without::facts(started, &load);
    section
}
