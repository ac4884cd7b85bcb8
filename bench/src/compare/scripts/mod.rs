//! "Scripts and data types": Redis's own `redis-benchmark` with its whole
//! default suite (no `-t`), EVALSHA of the token-bucket script on Redis and
//! on Leasehold against Leasehold's native TOKENLEASE, and memory per key of
//! a 100-member sorted set and a 10-field hash; on a Redis and a Leasehold
//! started for this section, the same way as the others.
//!
//! - [`render`]: the markdown section, its targets, and splicing it into an
//!   existing page.

pub mod render;

use std::path::PathBuf;
use std::time::Instant;

use super::first::Row;
use super::memory::MemoryResult;
use super::servers::{shell_join, Kind, Server};
use super::workloads::{self, Side, SCRIPT_BUCKET};
use super::{crosscheck, first, redis_benchmark, with_without, Runner};

/// Settings of the section.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Debian's redis-server.
    pub redis_bin: PathBuf,
    /// leasehold-server.
    pub leasehold_bin: PathBuf,
    /// Leasehold's `--threads`.
    pub threads: usize,
    /// Rounds of the suite and of the script runs.
    pub rounds: usize,
    /// Requests per test of the default suite (`-n`).
    pub suite_requests: u64,
    /// Requests per script run at -P 16 (-P 1 runs a quarter of them).
    pub script_requests: u64,
    /// Keys of each memory row.
    pub collection_keys: u64,
    /// Directory of the Lua scripts.
    pub lua_dir: PathBuf,
    /// A `--quick` smoke run.
    pub quick: bool,
}

/// redis-benchmark 7.0's default tests, in its order and spelling.
pub const SUITE: [&str; 20] = [
    "PING_INLINE",
    "PING_MBULK",
    "SET",
    "GET",
    "INCR",
    "LPUSH",
    "RPUSH",
    "LPOP",
    "RPOP",
    "SADD",
    "HSET",
    "SPOP",
    "ZADD",
    "ZPOPMIN",
    "LPUSH (needed to benchmark LRANGE)",
    "LRANGE_100 (first 100 elements)",
    "LRANGE_300 (first 300 elements)",
    "LRANGE_500 (first 500 elements)",
    "LRANGE_600 (first 600 elements)",
    "MSET (10 keys)",
];

/// Index of Redis in a suite row's cells.
pub const REDIS: usize = 0;
/// Index of Leasehold in a suite row's cells.
pub const LH: usize = 1;

/// Index of Redis running the script in a script row's cells.
pub const REDIS_EVALSHA: usize = 0;
/// Index of Leasehold running the script.
pub const LH_EVALSHA: usize = 1;
/// Index of Leasehold's TOKENLEASE.
pub const TOKENLEASE: usize = 2;
/// The script rows' cells in words, by index.
pub const LEGS: [&str; 3] = ["Redis EVALSHA", "Leasehold EVALSHA", "Leasehold TOKENLEASE"];
/// The depths of the script runs, -P 16 first.
pub const SCRIPT_PIPELINES: [usize; 2] = [16, 1];
/// The script row's name in a [`Row`].
pub const SCRIPT_ROW: &str = "token bucket";

/// The target: Leasehold's EVALSHA at least this many times Redis's.
pub const EVALSHA_OVER_REDIS: f64 = 1.5;

/// The section's results.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// A `--quick` smoke run.
    pub quick: bool,
    /// Leasehold's `--threads`.
    pub threads: usize,
    /// Rounds run.
    pub rounds: usize,
    /// Requests per suite test.
    pub suite_requests: u64,
    /// Requests per script run at -P 16.
    pub script_requests: u64,
    /// Keys of each memory row.
    pub collection_keys: u64,
    /// Why the section did not run, if it did not.
    pub skipped: Option<String>,
    /// The two servers' command lines.
    pub servers: Vec<String>,
    /// One row per suite test; cells [`REDIS`], [`LH`].
    pub suite: Vec<Row<2>>,
    /// One row per depth of [`SCRIPT_PIPELINES`]; cells by [`LEGS`].
    pub scripts: Vec<Row<3>>,
    /// The sorted-set and hash rows.
    pub memory: Vec<MemoryResult>,
    /// Each run's command line (the first round's), with a `#` title.
    pub commands: Vec<String>,
    /// Where and when it ran: date, commit, load averages, elapsed time.
    pub facts: String,
}

/// The words after `redis-benchmark` for the whole default suite on `port`.
pub fn suite_args(port: u16, requests: u64) -> Vec<String> {
    let (port, n) = (port.to_string(), requests.to_string());
    [
        "-p", &port, "-q", "-c", "50", "-n", &n, "-r", "100000", "--csv",
    ]
    .map(String::from)
    .to_vec()
}

/// Requests of one script run at `pipeline`: `at_p16` at -P 16 and deeper,
/// a quarter of it (at least 1000) at shallower depths, which run slower.
pub fn script_requests(at_p16: u64, pipeline: usize) -> u64 {
    if pipeline >= 16 {
        at_p16
    } else {
        (at_p16 / 4).max(1000)
    }
}

/// The server and what it is sent for each of [`LEGS`].
fn legs<'a>(redis: &'a Server, leasehold: &'a Server) -> [(&'a Server, Side); 3] {
    let (lua, native) = SCRIPT_BUCKET;
    [(redis, lua.clone()), (leasehold, lua), (leasehold, native)]
}

/// FLUSHALL on `server`, reported when it fails.
fn flush(server: &Server) {
    if let Err(e) = server.conn().and_then(|mut c| c.call(&["FLUSHALL"])) {
        eprintln!("scripts: FLUSHALL on {}: {e}", server.kind.label());
    }
}

/// Runs the section: starts its two servers, runs `rounds` rounds (each
/// from FLUSHALL: the suite on both servers, then the script runs at both
/// depths, rotating which goes first), then the memory rows once.
pub fn run(s: &Settings, runner: &Runner) -> Section {
    let started = Instant::now();
    let load_at_start = super::doc::load_average();
    let mut section = Section {
        quick: s.quick,
        threads: s.threads,
        rounds: s.rounds,
        suite_requests: s.suite_requests,
        script_requests: s.script_requests,
        collection_keys: s.collection_keys,
        skipped: None,
        servers: Vec::new(),
        suite: SUITE.iter().map(|&t| Row::new(t, 1)).collect(),
        scripts: SCRIPT_PIPELINES
            .iter()
            .map(|&p| Row::new(SCRIPT_ROW, p))
            .collect(),
        memory: Vec::new(),
        commands: Vec::new(),
        facts: String::new(),
    };
    if !with_without::runs(&s.redis_bin) {
        section.skipped = Some(format!(
            "`{} --version` does not run: Redis is needed to compare against",
            s.redis_bin.display()
        ));
        return section;
    }
    let started_servers = Server::start(Kind::Redis, &s.redis_bin, s.threads)
        .and_then(|r| Server::start(Kind::Leasehold, &s.leasehold_bin, s.threads).map(|l| (r, l)));
    let (redis, leasehold) = match started_servers {
        Ok(pair) => pair,
        Err(e) => {
            section.skipped = Some(format!("a server did not start: {e}"));
            return section;
        }
    };
    eprintln!(
        "scripts: redis on :{}, leasehold on :{}",
        redis.port, leasehold.port
    );
    section.servers = vec![redis.command_line.clone(), leasehold.command_line.clone()];
    let pair = [&redis, &leasehold];
    // SCRIPT LOAD once; FLUSHALL keeps the script cache.
    let legs = legs(&redis, &leasehold).map(|(server, side)| {
        let words = crosscheck::words(&side, server, &s.lua_dir);
        (server, words)
    });
    let commands = &mut section.commands;
    for round in 0..s.rounds {
        let tag = format!("[scripts {}/{}]", round + 1, s.rounds);
        pair.iter().for_each(|&server| flush(server));
        for k in 0..2 {
            let side = (k + round) % 2;
            let a = suite_args(pair[side].port, s.suite_requests);
            if round == 0 {
                commands.push(format!(
                    "# default suite on {}\nredis-benchmark {}",
                    pair[side].kind.label(),
                    shell_join(&a)
                ));
            }
            let out = redis_benchmark::run(&a);
            eprintln!("{tag} suite {}: {}", pair[side].kind.label(), out.summary());
            first::record(&mut section.suite, 1, side, &out);
        }
        for (i, row) in section.scripts.iter_mut().enumerate() {
            let n = script_requests(s.script_requests, row.pipeline);
            for k in 0..LEGS.len() {
                let leg = (k + round + i) % LEGS.len();
                let (server, words) = &legs[leg];
                let Some(words) = words else {
                    row.cells[leg].failures.push("SCRIPT LOAD failed".into());
                    continue;
                };
                let a = crosscheck::args(server.port, row.pipeline, n, words);
                if round == 0 {
                    commands.push(format!(
                        "# {} -P {}\nredis-benchmark {}",
                        LEGS[leg],
                        row.pipeline,
                        shell_join(&a)
                    ));
                }
                let out = redis_benchmark::run(&a);
                let got = out.rows.first().map_or_else(
                    || out.error.clone().unwrap_or_default(),
                    |r| format!("{:.0} rps, p99 {:?} ms", r.rps, r.p99_ms),
                );
                eprintln!("{tag} {} -P {}: {got}", LEGS[leg], row.pipeline);
                row.cells[leg].record_one(&out);
            }
        }
    }
    section.memory = super::measure_memory_rows(
        &workloads::collection_memory_rows(),
        &|_| s.collection_keys,
        runner,
        pair,
        commands,
    );
    drop((redis, leasehold));
    section.facts = with_without::facts(started, &load_at_start);
    section
}
