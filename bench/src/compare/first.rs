//! "The first benchmark a user runs": Redis's own `redis-benchmark -q` with a
//! subset of its default suite, exactly as a newcomer types it, against Redis,
//! Leasehold at the comparison's `--threads` and Leasehold `--threads 1`, all
//! three running at once; then the check of the targets against Redis.

use std::path::Path;

use super::redis_benchmark::{self, Outcome};
use super::servers::{shell_join, Kind, Server};
use super::table::{median, noisy_note, spread, thousands, NOISY_SPREAD};
use super::with_without::render::{ms, x};

pub mod targets;

pub use self::targets::{check, Goal, Target, Verdict, TARGETS};

/// The `-t` selection of every run.
pub const SELECTION: &str = "ping,set,get,incr,mset";
/// The tests `-t` [`SELECTION`] runs, in redis-benchmark's order and spelling.
pub const TESTS: [&str; 6] = [
    "PING_INLINE",
    "PING_MBULK",
    "SET",
    "GET",
    "INCR",
    "MSET (10 keys)",
];
/// The `-P` depths, each run with its own request count.
pub const PIPELINES: [usize; 2] = [1, 16];
/// Requests per test at -P 16 are this many times those at -P 1, so a test
/// takes about as long at both depths.
pub const P16_FACTOR: u64 = 10;

/// Index of Redis in a row's cells.
pub const REDIS: usize = 0;
/// Index of Leasehold at the comparison's `--threads` (2 by default).
pub const LH: usize = 1;
/// Index of Leasehold `--threads 1`.
pub const LH1: usize = 2;

/// One server's results for one (test, -P) over the rounds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cell {
    /// Requests per second of each round that finished the test.
    pub rps: Vec<f64>,
    /// p99 latency of those rounds, in ms.
    pub p99_ms: Vec<f64>,
    /// Why the other rounds gave no number (error reply, run not started).
    pub failures: Vec<String>,
}

impl Cell {
    /// Files a run of one test (a single-command redis-benchmark run): its
    /// first csv row's numbers, or why it gave none.
    pub fn record_one(&mut self, out: &Outcome) {
        match out.rows.first() {
            Some(c) => {
                self.rps.push(c.rps);
                self.p99_ms.extend(c.p99_ms);
            }
            None => self.failures.push(
                out.error
                    .clone()
                    .unwrap_or_else(|| "missing from the output".into()),
            ),
        }
    }

    /// The median rps with thousands separators, `failed` when every run
    /// failed, `-` when none ran.
    pub fn rps_cell(&self) -> String {
        match self.median_rps() {
            Some(v) => thousands(v),
            None if self.failures.is_empty() => "-".into(),
            None => "failed".into(),
        }
    }

    /// Median requests per second.
    pub fn median_rps(&self) -> Option<f64> {
        median(&self.rps)
    }

    /// Median p99 latency, in ms.
    pub fn median_p99(&self) -> Option<f64> {
        median(&self.p99_ms)
    }
}

/// One (test, -P) on `N` servers (here three; the scripts section has
/// rows of two and of three).
#[derive(Debug, Clone, PartialEq)]
pub struct Row<const N: usize = 3> {
    /// redis-benchmark's test name.
    pub test: &'static str,
    /// Pipeline depth.
    pub pipeline: usize,
    /// Here indexed by [`REDIS`], [`LH`], [`LH1`].
    pub cells: [Cell; N],
}

impl<const N: usize> Row<N> {
    /// A row with no runs yet.
    pub fn new(test: &'static str, pipeline: usize) -> Row<N> {
        Row {
            test,
            pipeline,
            cells: std::array::from_fn(|_| Cell::default()),
        }
    }

    /// Median rps of cell `a` over that of cell `b`.
    pub fn ratio(&self, a: usize, b: usize) -> Option<f64> {
        match (self.cells[a].median_rps(), self.cells[b].median_rps()) {
            (Some(x), Some(y)) if y > 0.0 => Some(x / y),
            _ => None,
        }
    }
}

/// An empty row for every (test, -P), -P 1 first.
pub fn empty_rows() -> Vec<Row> {
    PIPELINES
        .iter()
        .flat_map(|&pipeline| TESTS.map(|test| Row::new(test, pipeline)))
        .collect()
}

/// Files one redis-benchmark run of server `side` at `pipeline` into `rows`:
/// each test it printed gets its numbers; when it stopped at an error, the
/// first missing test gets the error and the later ones say they did not run.
pub fn record<const N: usize>(rows: &mut [Row<N>], pipeline: usize, side: usize, out: &Outcome) {
    let mut stopped_at: Option<&str> = None;
    for row in rows.iter_mut().filter(|r| r.pipeline == pipeline) {
        let cell = &mut row.cells[side];
        match out.rows.iter().find(|c| c.test == row.test) {
            Some(c) => {
                cell.rps.push(c.rps);
                cell.p99_ms.extend(c.p99_ms);
            }
            None => cell.failures.push(match stopped_at {
                Some(first) => format!("not run, redis-benchmark stopped at {first}"),
                None => {
                    stopped_at = Some(row.test);
                    out.error
                        .clone()
                        .unwrap_or_else(|| "missing from the output".into())
                }
            }),
        }
    }
}

/// The words after `redis-benchmark` for one run.
pub fn args(port: u16, requests: u64, pipeline: usize) -> Vec<String> {
    let (port, n, p) = (port.to_string(), requests.to_string(), pipeline.to_string());
    [
        "-p", &port, "-q", "-c", "50", "-n", &n, "-r", "100000", "-t", SELECTION, "-P", &p, "--csv",
    ]
    .map(String::from)
    .to_vec()
}

/// The section's results.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// Leasehold's `--threads` in the [`LH`] cells.
    pub threads: usize,
    /// Requests per test at -P 1 (-P 16 runs [`P16_FACTOR`] times as many).
    pub requests: u64,
    /// Rounds run.
    pub rounds: usize,
    /// The command line of the `--threads 1` server.
    pub single_thread_server: String,
    /// Every (test, -P).
    pub rows: Vec<Row>,
    /// When the section ran alone (`--first-only`): its commit, time, load
    /// and length, since the page's machine facts are then older.
    pub alone: Option<String>,
}

impl Section {
    /// The three servers' short labels, by cell index: `Redis`, `t2`, `t1`.
    pub fn labels(&self) -> [String; 3] {
        ["Redis".into(), format!("t{}", self.threads), "t1".into()]
    }

    /// The three servers' labels in full: `Redis`, `Leasehold t2`, `Leasehold t1`.
    pub fn long_labels(&self) -> [String; 3] {
        let [redis, lh, lh1] = self.labels();
        [redis, format!("Leasehold {lh}"), format!("Leasehold {lh1}")]
    }
}

/// Runs the section: starts Leasehold `--threads 1` next to `redis` and
/// `leasehold` (at `threads`), runs `rounds` rounds rotating the order of the
/// three, stops the extra server, and FLUSHALLs the other two so the later
/// sections find them empty. Each run's command goes to `commands`.
///
/// # Errors
/// The `--threads 1` server that does not start.
pub fn run(
    redis: &Server,
    leasehold: &Server,
    leasehold_bin: &Path,
    threads: usize,
    rounds: usize,
    requests: u64,
    commands: &mut Vec<String>,
) -> std::io::Result<Section> {
    let single = Server::start(Kind::Leasehold, leasehold_bin, 1)?;
    eprintln!("first benchmark: leasehold --threads 1 on :{}", single.port);
    let mut section = Section {
        threads,
        requests,
        rounds,
        single_thread_server: single.command_line.clone(),
        rows: empty_rows(),
        alone: None,
    };
    let servers = [redis, leasehold, &single];
    let labels = section.long_labels();
    for round in 0..rounds {
        for (i, &pipeline) in PIPELINES.iter().enumerate() {
            let n = if pipeline == 1 {
                requests
            } else {
                requests * P16_FACTOR
            };
            for k in 0..3 {
                let side = (k + round + i) % 3;
                let a = args(servers[side].port, n, pipeline);
                if round == 0 {
                    commands.push(format!(
                        "# first benchmark -P {pipeline} on {}\nredis-benchmark {}",
                        labels[side],
                        shell_join(&a)
                    ));
                }
                let out = redis_benchmark::run(&a);
                eprintln!(
                    "[first {}/{rounds}] -P {pipeline} {}: {}",
                    round + 1,
                    labels[side],
                    out.summary()
                );
                record(&mut section.rows, pipeline, side, &out);
            }
        }
    }
    drop(single);
    for s in [redis, leasehold] {
        if let Err(e) = s.conn().and_then(|mut c| c.call(&["FLUSHALL"])) {
            eprintln!("first benchmark: FLUSHALL on {}: {e}", s.kind.label());
        }
    }
    Ok(section)
}

/// A row's notes: each cell's noise and failures, under `labels` (one per
/// cell), escaped for a markdown table.
pub fn notes<const N: usize>(labels: &[String], row: &Row<N>) -> String {
    let mut notes = Vec::new();
    for (label, cell) in labels.iter().zip(&row.cells) {
        notes.extend(noisy_note(label, spread(&cell.rps)));
        if let Some(first) = cell.failures.first() {
            notes.push(format!(
                "{label} failed in {} of {} runs: {first}",
                cell.failures.len(),
                cell.failures.len() + cell.rps.len()
            ));
        }
    }
    notes.join("; ").replace('|', "\\|")
}

/// The results table and the target check, in markdown.
pub fn tables(section: &Section) -> String {
    let [_, lh, lh1] = section.labels();
    let [_, long, long1] = section.long_labels();
    let mut s = format!(
        "| test | -P | Redis rps | {long} rps | {long1} rps | {lh} / Redis | {lh} / {lh1} | Redis p99 ms | {lh} p99 ms | notes |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
    );
    let labels = section.long_labels();
    for row in &section.rows {
        let c = &row.cells;
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            row.test,
            row.pipeline,
            c[REDIS].rps_cell(),
            c[LH].rps_cell(),
            c[LH1].rps_cell(),
            x(row.ratio(LH, REDIS)),
            x(row.ratio(LH, LH1)),
            ms(c[REDIS].median_p99()),
            ms(c[LH].median_p99()),
            notes(&labels, row),
        ));
    }
    let verdicts = check(section);
    let met = verdicts.iter().filter(|v| v.met).count();
    s.push_str(&format!(
        "\n**Targets: {met} of {} met.**\n\n| target | test | -P | measured | result |\n|---|---|---:|---:|---|\n",
        verdicts.len()
    ));
    for v in &verdicts {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            v.goal,
            v.test,
            v.pipeline,
            v.measured,
            if v.met { "met" } else { "not met" }
        ));
    }
    s
}

/// The section's heading.
pub const HEADING: &str = "## The first benchmark a user runs";

/// The whole section in markdown, with its `##` heading.
pub fn section(section: &Section) -> String {
    let [_, lh, _] = section.labels();
    let n = section.requests;
    format!(
        "{HEADING}\n\n\
         Redis's own `redis-benchmark -q` on a subset of its default suite, as a newcomer types it:\n\n\
         ```sh\nredis-benchmark -p PORT {}\nredis-benchmark -p PORT {}\n```\n\n\
         {}Three servers run at once: Redis and Leasehold `--threads {}` ({lh}) as in the other sections, and \
         `{}` (t1), started for this section only. {} round(s); each round runs both depths on the three \
         servers in turn, rotating which goes first. Cells are the medians of the rounds (rps and p99 as \
         redis-benchmark prints them); a cell whose runs spread more than {:.0}% ((max - min) / median) is \
         marked noisy. redis-benchmark stops at the first error reply and exits non-zero: that test and \
         the ones after it say *failed* for that server.\n\n{}\n",
        shell_join(&args(0, n, 1)[2..]),
        shell_join(&args(0, n * P16_FACTOR, 16)[2..]),
        section.alone.as_ref().map_or(String::new(), |facts| format!(
            "Measured in one run of its own ({facts}); the machine is the one above. "
        )),
        section.threads,
        section.single_thread_server,
        section.rounds,
        NOISY_SPREAD * 100.0,
        tables(section),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::compare::redis_benchmark::parse_csv;

    /// A section where each cell has one run of `rps[side]` and p99 `p99[side]`.
    pub(crate) fn section_with(rps: [f64; 3], p99: [f64; 3]) -> Section {
        let mut rows = empty_rows();
        for row in &mut rows {
            for side in 0..3 {
                row.cells[side].rps.push(rps[side]);
                row.cells[side].p99_ms.push(p99[side]);
            }
        }
        Section {
            threads: 2,
            requests: 100_000,
            rounds: 1,
            single_thread_server: "leasehold-server --threads 1".into(),
            rows,
            alone: None,
        }
    }

    #[test]
    fn a_captured_run_that_stopped_at_an_error() {
        // redis-benchmark 7.0.15 against a Redis at maxmemory 1, noeviction:
        // it printed the two PINGs and exited 1 at SET's error reply.
        let out = Outcome {
            rows: parse_csv(
                "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                 \"PING_INLINE\",\"54347.82\",\"0.593\",\"0.088\",\"0.391\",\"1.767\",\"4.199\",\"4.863\"\n\
                 \"PING_MBULK\",\"63291.14\",\"0.435\",\"0.056\",\"0.383\",\"0.911\",\"1.479\",\"5.511\"\n",
            ),
            error: Some("Error from server: OOM command not allowed".into()),
        };
        let mut rows = empty_rows();
        record(&mut rows, 1, LH, &out);
        let p1: Vec<&Row> = rows.iter().filter(|r| r.pipeline == 1).collect();
        assert_eq!(p1[0].cells[LH].rps, [54347.82]);
        assert_eq!(p1[1].cells[LH].p99_ms, [1.479]);
        assert_eq!(
            p1[2].cells[LH].failures,
            ["Error from server: OOM command not allowed"]
        );
        assert_eq!(
            p1[5].cells[LH].failures,
            ["not run, redis-benchmark stopped at SET"]
        );
        assert!(rows
            .iter()
            .all(|r| r.pipeline == 1 || r.cells[LH] == Cell::default()));
        let s = Section {
            rows,
            ..section_with([0.0; 3], [0.0; 3])
        };
        let t = tables(&s);
        assert!(
            t.contains("| SET | 1 | - | failed | - | - | - | - | - | Leasehold t2 failed in 1 of 1 runs: Error from server: OOM command not allowed |"),
            "{t}"
        );
        assert!(
            t.contains("| t2 / Redis >= 1.10x | SET | 1 | - | not met |"),
            "{t}"
        );
    }
}
