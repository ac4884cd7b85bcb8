//! "Cluster": a 3-primary Leasehold cluster (`leasehold-cluster local
//! --groups 3 --replicas 0`) against a 3-primary Redis Cluster, all on this
//! machine: Redis's own `redis-benchmark --cluster` (SET, GET, INCR at -P 1
//! and -P 16; TOKENLEASE against EVALSHA of the token-bucket script, keys
//! under redis-benchmark's `{tag}`), the cost of one `-MOVED` redirection,
//! and a reshard of many slots holding many keys with a client reading
//! them before and during it.
//!
//! # Layout
//! - [`nodes`]: starting the two clusters.
//! - [`probe`]: the MOVED cost and the reshard with its probing client.
//! - [`render`]: the section's markdown.

pub mod nodes;
pub mod probe;
pub mod render;

use std::path::{Path, PathBuf};
use std::time::Instant;

use self::nodes::Cluster;
use self::probe::{MovedCost, Reshard};
use super::first::{self, Row};
use super::redis_benchmark;
use super::servers::{shell_join, Kind};
use super::with_without;
use super::workloads::SCRIPT_BUCKET;

/// The section's heading, which `--cluster-only` replaces in a page.
pub const HEADING: &str = "## Cluster";
/// The `-t` selection of the built-in runs.
pub const SELECTION: &str = "set,get,incr";
/// The tests [`SELECTION`] runs, in redis-benchmark's order and spelling.
pub const TESTS: [&str; 3] = ["SET", "GET", "INCR"];
/// Index of Redis in a built-in row's cells.
pub const REDIS: usize = 0;
/// Index of Leasehold.
pub const LH: usize = 1;
/// The rate-limit legs, by cell index of a script row.
pub const LEGS: [&str; 3] = ["Redis EVALSHA", "Leasehold EVALSHA", "Leasehold TOKENLEASE"];
/// The script row's label.
pub const SCRIPT_ROW: &str = "token bucket";

/// What the section needs from the comparison's flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// redis-server binary.
    pub redis_bin: PathBuf,
    /// leasehold-server binary (`leasehold-cluster` is looked up next to it).
    pub leasehold_bin: PathBuf,
    /// `--threads` of each Leasehold node.
    pub threads: usize,
    /// Rounds of the redis-benchmark runs.
    pub rounds: usize,
    /// Requests per redis-benchmark test at -P 1 (-P 16 runs
    /// [`first::P16_FACTOR`] times as many).
    pub requests: u64,
    /// GETs per kind in the MOVED measurement.
    pub moved_samples: u64,
    /// Slots the reshard moves (0..slots, group 0 to group 1).
    pub reshard_slots: u16,
    /// Keys in those slots.
    pub reshard_keys: u64,
    /// The first port: Leasehold's nodes on it and the 2 after, Redis's on
    /// port + 10 and the 2 after (their cluster bus on port + 10010..).
    pub base_port: u16,
    /// Directory of the Lua scripts.
    pub lua_dir: PathBuf,
    /// A `--quick` smoke run.
    pub quick: bool,
}

/// The section's results.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// Why it did not run.
    pub skipped: Option<String>,
    /// A `--quick` smoke run.
    pub quick: bool,
    /// `--threads` of each Leasehold node.
    pub threads: usize,
    /// Rounds run.
    pub rounds: usize,
    /// How the clusters were started, then each run's command line (the
    /// first round's).
    pub commands: Vec<String>,
    /// SET, GET, INCR at -P 1, then at -P 16; cells Redis, Leasehold.
    pub rows: Vec<Row<2>>,
    /// The token bucket at -P 1 and -P 16; cells by [`LEGS`].
    pub scripts: Vec<Row<3>>,
    /// The MOVED cost on Redis, then Leasehold (or why it failed).
    pub moved: Vec<(Kind, Result<MovedCost, String>)>,
    /// The reshard on Redis, then Leasehold (or why it failed).
    pub reshard: Vec<(Kind, Result<Reshard, String>)>,
    /// The settings of the MOVED and reshard measurements.
    pub moved_samples: u64,
    /// Slots and keys of the reshard.
    pub reshard_size: (u16, u64),
    /// Commit, date, load and duration.
    pub facts: String,
}

/// The words after `redis-benchmark` for a built-in run against the
/// cluster whose node is on `port`.
pub fn builtin_args(port: u16, requests: u64, pipeline: usize) -> Vec<String> {
    let mut args = first::args(port, requests, pipeline);
    let t = args.iter().position(|a| a == "-t").map_or(0, |i| i + 1);
    args[t] = SELECTION.into();
    args.push("--cluster".into());
    args
}

/// The words after `redis-benchmark` for one leg of the token bucket:
/// `template` (a [`SCRIPT_BUCKET`] command) with its key under
/// redis-benchmark's `{tag}` (replaced, per connection, by a hash tag of
/// a slot of the node it is connected to) and `__rand_int__`.
pub fn script_args(
    port: u16,
    requests: u64,
    pipeline: usize,
    template: &str,
    sha: &str,
) -> Vec<String> {
    let mut args = super::crosscheck::args(port, pipeline, requests, &["--cluster".to_string()]);
    args.extend(template.split_whitespace().map(|w| {
        w.replace("__key__", "{tag}:__rand_int__")
            .replace("__sha__", sha)
    }));
    args
}

/// `leasehold-cluster`, next to the server binary.
fn cluster_tool(server: &Path) -> PathBuf {
    server.with_file_name("leasehold-cluster")
}

/// Runs the section: starts both clusters, runs `rounds` rounds of the
/// built-in and script runs (alternating which cluster goes first), then
/// the MOVED cost and the reshard on each.
pub fn run(s: &Settings) -> Section {
    let started = Instant::now();
    let load_at_start = super::doc::load_average();
    let mut sec = Section {
        skipped: None,
        quick: s.quick,
        threads: s.threads,
        rounds: s.rounds,
        commands: Vec::new(),
        rows: first::PIPELINES
            .iter()
            .flat_map(|&p| TESTS.map(|t| Row::new(t, p)))
            .collect(),
        scripts: first::PIPELINES
            .iter()
            .map(|&p| Row::new(SCRIPT_ROW, p))
            .collect(),
        moved: Vec::new(),
        reshard: Vec::new(),
        moved_samples: s.moved_samples,
        reshard_size: (s.reshard_slots, s.reshard_keys),
        facts: String::new(),
    };
    if !with_without::runs(&s.redis_bin) {
        sec.skipped = Some(format!(
            "`{} --version` does not run: Redis is needed to compare against",
            s.redis_bin.display()
        ));
        return sec;
    }
    let tool = cluster_tool(&s.leasehold_bin);
    let clusters = nodes::redis(&s.redis_bin, s.base_port + 10).and_then(|r| {
        nodes::leasehold(&tool, &s.leasehold_bin, s.base_port, s.threads).map(|l| [r, l])
    });
    let clusters = match clusters {
        Ok(c) => c,
        Err(e) => {
            sec.skipped = Some(format!("a cluster did not start: {e}"));
            return sec;
        }
    };
    for c in &clusters {
        sec.commands.push(format!(
            "# the {} cluster\n{}",
            c.kind.label(),
            c.commands.join("\n")
        ));
    }
    eprintln!(
        "cluster: Redis on {:?}, Leasehold on {:?}",
        clusters[REDIS].ports, clusters[LH].ports
    );
    throughput(s, &clusters, &mut sec);
    for c in &clusters {
        let m = probe::moved_cost(c, s.moved_samples).map_err(|e| e.to_string());
        eprintln!("cluster: MOVED on {}: {m:?}", c.kind.label());
        sec.moved.push((c.kind, m));
    }
    for c in &clusters {
        let r =
            probe::reshard(c, &tool, s.reshard_slots, s.reshard_keys).map_err(|e| e.to_string());
        eprintln!("cluster: reshard on {}: {r:?}", c.kind.label());
        sec.reshard.push((c.kind, r));
    }
    drop(clusters);
    sec.facts = with_without::facts(started, &load_at_start);
    sec
}

/// The redis-benchmark rounds.
fn throughput(s: &Settings, clusters: &[Cluster; 2], sec: &mut Section) {
    let (lua, native) = SCRIPT_BUCKET;
    let script = s.lua_dir.join(lua.script.unwrap_or("token_bucket.lua"));
    // SCRIPT LOAD on every primary of both clusters (one SHA: one script).
    let mut sha = None;
    for c in clusters {
        for g in 0..c.ports.len() {
            match crate::resp::load_script(&c.addr(g), &script) {
                Ok(h) => sha = Some(h),
                Err(e) => eprintln!("cluster: SCRIPT LOAD on {}: {e}", c.addr(g)),
            }
        }
    }
    let sha = sha.unwrap_or_default();
    let legs = [
        (&clusters[REDIS], lua.command),
        (&clusters[LH], lua.command),
        (&clusters[LH], native.command),
    ];
    for round in 0..s.rounds {
        let tag = format!("[cluster {}/{}]", round + 1, s.rounds);
        for c in clusters {
            if let Err(e) = c.flush() {
                eprintln!("{tag} FLUSHALL on {}: {e}", c.kind.label());
            }
        }
        for (i, &pipeline) in first::PIPELINES.iter().enumerate() {
            let requests = match pipeline {
                1 => s.requests,
                _ => s.requests * first::P16_FACTOR,
            };
            let order = match (round + i) % 2 {
                0 => [REDIS, LH],
                _ => [LH, REDIS],
            };
            for side in order {
                let c = &clusters[side];
                let args = builtin_args(c.ports[0], requests, pipeline);
                if round == 0 {
                    sec.commands.push(format!(
                        "# SET, GET, INCR -P {pipeline} on the {} cluster\nredis-benchmark {}",
                        c.kind.label(),
                        shell_join(&args)
                    ));
                }
                let out = redis_benchmark::run(&args);
                eprintln!("{tag} -P {pipeline} {}: {}", c.kind.label(), out.summary());
                first::record(&mut sec.rows, pipeline, side, &out);
            }
            let row = &mut sec.scripts[i];
            for k in 0..LEGS.len() {
                let leg = (k + round + i) % LEGS.len();
                let (c, template) = legs[leg];
                let args = script_args(c.ports[0], requests, pipeline, template, &sha);
                if round == 0 {
                    sec.commands.push(format!(
                        "# {} -P {pipeline} on the cluster\nredis-benchmark {}",
                        LEGS[leg],
                        shell_join(&args)
                    ));
                }
                let out = redis_benchmark::run(&args);
                eprintln!("{tag} {} -P {pipeline}: {}", LEGS[leg], out.summary());
                row.cells[leg].record_one(&out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_the_first_benchmarks_in_cluster_mode() {
        assert_eq!(
            shell_join(&builtin_args(7840, 1000, 16)),
            "-p 7840 -q -c 50 -n 1000 -r 100000 -t set,get,incr -P 16 --csv --cluster"
        );
        let (lua, native) = SCRIPT_BUCKET;
        assert_eq!(
            shell_join(&script_args(7840, 1000, 1, native.command, "")),
            "-p 7840 -c 50 -P 1 -n 1000 -r 100000 --csv --cluster TOKENLEASE 'tb2:{tag}:__rand_int__' 100 10 1000 1"
        );
        assert_eq!(
            shell_join(&script_args(7840, 1000, 1, lua.command, "abc")),
            "-p 7840 -c 50 -P 1 -n 1000 -r 100000 --csv --cluster EVALSHA abc 1 'tb:{tag}:__rand_int__' 100 10 1000 1"
        );
    }
}
