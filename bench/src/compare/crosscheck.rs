//! A cross-check of our generator with Redis's own `redis-benchmark` (SET,
//! GET and INCR, and each rate-limit command against its Lua script, on 100k
//! random keys at -P 1 and -P 16, one run each), so a reader can see that the
//! ratios do not come from `leasehold-bench`; and redis-benchmark's list and
//! hash tests (LPUSH, RPUSH, LPOP, RPOP, HSET, LRANGE_100 to _600) as it
//! runs them.

use std::path::Path;

use super::redis_benchmark;
use super::servers::{shell_join, Kind, Server};
use super::table::thousands;
use super::workloads::{Side, RATE_LIMITS};

/// One redis-benchmark test's requests per second on each server.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// Test name as redis-benchmark prints it (`SET`).
    pub test: String,
    /// Pipeline depth.
    pub pipeline: usize,
    /// Redis's requests/s.
    pub redis: Option<f64>,
    /// Leasehold's requests/s.
    pub leasehold: Option<f64>,
}

/// What one redis-benchmark run sends: `-t` tests, or one command's words.
enum Tests<'a> {
    Builtin(&'a str),
    Command(Vec<String>),
}

/// The words after `redis-benchmark` for `tail` (`-t` tests or one
/// command's words) on `port`: 50 connections, 100 000 random keys, `--csv`.
pub fn args(port: u16, pipeline: usize, requests: u64, tail: &[String]) -> Vec<String> {
    let mut args: Vec<String> = [
        "-p",
        &port.to_string(),
        "-c",
        "50",
        "-P",
        &pipeline.to_string(),
        "-n",
        &requests.to_string(),
        "-r",
        "100000",
        "--csv",
    ]
    .map(String::from)
    .to_vec();
    args.extend_from_slice(tail);
    args
}

fn run(
    server: &Server,
    pipeline: usize,
    requests: u64,
    tests: &Tests<'_>,
    commands: &mut Vec<String>,
) -> Vec<(String, f64)> {
    let tail = match tests {
        Tests::Builtin(t) => vec!["-t".to_string(), t.to_string()],
        Tests::Command(words) => words.clone(),
    };
    let args = args(server.port, pipeline, requests, &tail);
    commands.push(format!(
        "# redis-benchmark cross-check on {}\nredis-benchmark {}",
        server.kind.label(),
        shell_join(&args)
    ));
    let out = redis_benchmark::run(&args);
    if out.error.is_some() {
        return Vec::new();
    }
    out.rows.into_iter().map(|r| (r.test, r.rps)).collect()
}

/// A row template as redis-benchmark words: `__key__` becomes its
/// `__rand_int__` (a 12-digit number under `-r`, as our keys are) and
/// `__sha__` the loaded script's SHA1 (SCRIPT LOAD on `server`). `None` when
/// the script cannot be loaded.
pub fn words(side: &Side, server: &Server, lua_dir: &Path) -> Option<Vec<String>> {
    let sha = match side.script {
        Some(s) => crate::resp::load_script(&server.addr(), &lua_dir.join(s)).ok()?,
        None => String::new(),
    };
    Some(
        side.command
            .split_whitespace()
            .map(|w| {
                w.replace("__key__", "__rand_int__")
                    .replace("__sha__", &sha)
            })
            .collect(),
    )
}

/// Runs redis-benchmark's `tests` on both servers and adds a row per test
/// Redis answered.
fn compare_builtin(
    redis: &Server,
    leasehold: &Server,
    pipeline: usize,
    n: u64,
    tests: &str,
    commands: &mut Vec<String>,
    out: &mut Vec<Check>,
) {
    let builtin = Tests::Builtin(tests);
    let r = run(redis, pipeline, n, &builtin, commands);
    let l = run(leasehold, pipeline, n, &builtin, commands);
    for (test, rps) in &r {
        out.push(Check {
            test: test.clone(),
            pipeline,
            redis: Some(*rps),
            leasehold: l.iter().find(|(t, _)| t == test).map(|&(_, v)| v),
        });
    }
    eprintln!("redis-benchmark -P {pipeline} {tests}: Redis {r:?}, Leasehold {l:?}");
}

/// Runs the cross-check on both servers; empty when redis-benchmark is missing.
/// `scale` shrinks the request counts (1.0 for the full run).
pub fn run_all(
    redis: &Server,
    leasehold: &Server,
    lua_dir: &Path,
    scale: f64,
    commands: &mut Vec<String>,
) -> Vec<Check> {
    let mut out = Vec::new();
    for (pipeline, requests) in [(1usize, 200_000f64), (16, 1_000_000.0)] {
        let n = (requests * scale).max(1000.0) as u64;
        compare_builtin(
            redis,
            leasehold,
            pipeline,
            n,
            "set,get,incr",
            commands,
            &mut out,
        );
        // The list and hash tests; an LRANGE reply is up to 600 elements: a
        // tenth of the requests keeps each run to seconds.
        let tests = "lpush,rpush,lpop,rpop,hset,lrange_100,lrange_300,lrange_500,lrange_600";
        let n_collections = (n / 10).max(1000);
        compare_builtin(
            redis,
            leasehold,
            pipeline,
            n_collections,
            tests,
            commands,
            &mut out,
        );
        // The Lua side is several times slower: a fifth of the requests
        // keeps each run to a few seconds.
        let n = (n / 5).max(1000);
        for (name, (redis_side, leasehold_side)) in RATE_LIMITS {
            let mut rps = [Kind::Redis, Kind::Leasehold].map(|kind| {
                let (server, side) = match kind {
                    Kind::Redis => (redis, &redis_side),
                    Kind::Leasehold => (leasehold, &leasehold_side),
                };
                let w = words(side, server, lua_dir)?;
                run(server, pipeline, n, &Tests::Command(w), commands)
                    .first()
                    .map(|&(_, v)| v)
            });
            eprintln!("redis-benchmark -P {pipeline} {name}: {rps:?}");
            out.push(Check {
                test: name.to_string(),
                pipeline,
                redis: rps[0].take(),
                leasehold: rps[1].take(),
            });
        }
    }
    out
}

/// The cross-check table in markdown.
pub fn table(checks: &[Check]) -> String {
    let cell = |v: Option<f64>| v.map(thousands).unwrap_or_else(|| "failed".into());
    let mut s = String::from("| redis-benchmark test | -P | Redis req/s | Leasehold req/s | Leasehold / Redis |\n|---|---:|---:|---:|---:|\n");
    for c in checks {
        let ratio = match (c.redis, c.leasehold) {
            (Some(r), Some(l)) if r > 0.0 => format!("{:.2}x", l / r),
            _ => "-".into(),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            c.test,
            c.pipeline,
            cell(c.redis),
            cell(c.leasehold),
            ratio
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shows_the_ratio() {
        let t = table(&[Check {
            test: "SET".into(),
            pipeline: 16,
            redis: Some(100_000.0),
            leasehold: Some(150_000.0),
        }]);
        assert!(
            t.contains("| SET | 16 | 100 000 | 150 000 | 1.50x |"),
            "{t}"
        );
    }
}
