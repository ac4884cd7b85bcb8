//! What the "with / without" sections share (replication: a primary alone
//! and with a replica; persistence: a server without persistence and with
//! the log): four set-ups, two per kind, the throughput rows measured on
//! them in rotation, and how a section reports when and where it ran.
//!
//! A section says what differs through [`Names`] (its labels and column
//! headings) and [`Setups`] (its servers and what it records around each
//! run); [`render`] has the tables both print.

pub mod render;

use std::path::Path;
use std::time::Instant;

use super::servers::{Kind, Server};
use super::table::SideResult;
use super::workloads::{self, Workload};
use super::Runner;

/// The two kinds, Redis first.
pub const KINDS: [Kind; 2] = [Kind::Redis, Kind::Leasehold];

/// Where `kind` is in a pair indexed by kind: Redis 0, Leasehold 1.
pub fn kind_index(kind: Kind) -> usize {
    usize::from(kind == Kind::Leasehold)
}

/// Index of a throughput cell: Redis without, Redis with, Leasehold
/// without, Leasehold with.
pub fn cell(kind: Kind, with: bool) -> usize {
    2 * kind_index(kind) + usize::from(with)
}

/// How a section names its set-ups and their columns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Names {
    /// The section in progress lines: `[replication 1/3] ...`.
    pub section: &'static str,
    /// After the kind in a set-up's label: `" alone"`.
    pub without_label: &'static str,
    /// After the kind in a set-up's label: `" + replica"`.
    pub with_label: &'static str,
    /// After the kind in the ops/s heading: `"alone"`.
    pub without_column: &'static str,
    /// After the kind in the ops/s and p99 headings: `"+ replica"`.
    pub with_column: &'static str,
    /// After "Leasehold / Redis, both": `"with replica"`.
    pub both: &'static str,
}

impl Names {
    /// "Redis alone", "Leasehold + replica" and so on.
    pub fn label(&self, kind: Kind, with: bool) -> String {
        let suffix = if with {
            self.with_label
        } else {
            self.without_label
        };
        format!("{}{suffix}", kind.label())
    }
}

/// One throughput row on the four set-ups, with what the section records
/// besides (`E`).
#[derive(Debug, Clone, PartialEq)]
pub struct Row<E> {
    /// What was run.
    pub workload: Workload,
    /// Indexed by [`cell`].
    pub cells: [SideResult; 4],
    /// CPU seconds the loaded server used over its runs, indexed by [`cell`].
    pub cpu: [f64; 4],
    /// The section's own counts.
    pub extra: E,
}

impl<E> Row<E> {
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
pub struct Throughput<E> {
    /// The servers' command lines.
    pub servers: Vec<String>,
    /// The rows.
    pub rows: Vec<Row<E>>,
    /// Each load run's command line, with a `#` title line.
    pub commands: Vec<String>,
}

/// The rows of `t`, none if it failed.
pub fn rows_of<E>(t: &Result<Throughput<E>, String>) -> &[Row<E>] {
    t.as_ref().map(|t| t.rows.as_slice()).unwrap_or_default()
}

/// The throughput rows of both sections: SET and TOKENLEASE against the
/// token-bucket Lua script, at -P 16 on uniform keys.
pub fn rows() -> Vec<Workload> {
    let token = workloads::RATE_LIMITS[0].0;
    workloads::all()
        .into_iter()
        .filter(|w| w.pipeline == 16 && w.distribution == "uniform")
        .filter(|w| w.name == "SET" || w.name == token)
        .collect()
}

/// A section's four running set-ups and what it records around each run.
pub trait Setups {
    /// What a row records besides throughput and the server's CPU.
    type Extra: Default;
    /// What [`Setups::before`] reads, for [`Setups::after`].
    type Before;
    /// The server loaded in cell `c` (see [`cell`]).
    fn server(&self, c: usize) -> &Server;
    /// Called just before a run on cell `c`.
    fn before(&self, c: usize) -> Self::Before;
    /// Called just after that run, to add to the row's counts.
    fn after(&self, c: usize, before: Self::Before, extra: &mut Self::Extra);
}

/// Runs every row of [`rows`] on the four set-ups for `rounds` rounds,
/// rotating which goes first so none always runs warm; `servers` are the
/// servers' command lines, for the report.
pub fn measure<S: Setups>(
    setups: &S,
    names: &Names,
    runner: &Runner,
    rounds: usize,
    servers: Vec<String>,
) -> Throughput<S::Extra> {
    let mut out = Throughput {
        servers,
        rows: rows()
            .into_iter()
            .map(|workload| Row {
                workload,
                cells: std::array::from_fn(|_| SideResult::Runs(Vec::new())),
                cpu: [0.0; 4],
                extra: S::Extra::default(),
            })
            .collect(),
        commands: Vec::new(),
    };
    for round in 0..rounds {
        for (i, row) in out.rows.iter_mut().enumerate() {
            for k in 0..4 {
                let c = (k + round + i) % 4;
                let (kind, with) = (KINDS[c / 2], c % 2 == 1);
                let server = setups.server(c);
                let w = &row.workload;
                let a = runner.throughput_args(server, w, w.side(kind));
                let label = names.label(kind, with);
                if round == 0 {
                    out.commands.push(format!(
                        "# {} -P {} on {label}\n{}",
                        w.name,
                        w.pipeline,
                        runner.command_line(&a)
                    ));
                }
                let cpu = server.cpu_seconds().unwrap_or(0.0);
                let before = setups.before(c);
                let result = runner.run(&a);
                setups.after(c, before, &mut row.extra);
                if result.is_ok() {
                    row.cpu[c] += server.cpu_seconds().unwrap_or(0.0) - cpu;
                }
                let SideResult::Runs(runs) = &mut row.cells[c] else {
                    continue;
                };
                match result {
                    Ok(r) => {
                        eprintln!(
                            "[{} {}/{rounds}] {} -P {} {label}: {:.0} ops/s, p99 {:.3} ms",
                            names.section,
                            round + 1,
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
    out
}

/// For tests: a cell of one run of `ops` requests in 1 s, p99 2 ms.
#[cfg(test)]
pub fn one_run(ops: f64) -> SideResult {
    SideResult::Runs(vec![crate::report::Report {
        command: "X".into(),
        connections: 50,
        pipeline: 16,
        keyspace: 100_000,
        distribution: "uniform".into(),
        requests: ops as u64,
        errors: 0,
        first_error: None,
        seconds: 1.0,
        ops_per_sec: ops,
        latency_ms: crate::report::Latency {
            p50: 1.0,
            p99: 2.0,
            p999: 3.0,
            max: 4.0,
            mean: 1.0,
        },
    }])
}

/// For tests: [`rows`] with these ops/s per cell (one run each), 1 CPU
/// second per cell, and `extra` on every row.
#[cfg(test)]
pub fn fixture<E: Clone>(ops: [[f64; 4]; 2], extra: E) -> Throughput<E> {
    Throughput {
        servers: Vec::new(),
        rows: rows()
            .into_iter()
            .zip(ops)
            .map(|(workload, ops)| Row {
                workload,
                cells: ops.map(one_run),
                cpu: [1.0; 4],
                extra: extra.clone(),
            })
            .collect(),
        commands: Vec::new(),
    }
}

/// Whether `bin --version` runs.
pub fn runs(bin: &Path) -> bool {
    std::process::Command::new(bin)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Where and when a section ran: commit, date, load averages at the start
/// (`load_at_start`) and now, and the time since `started`.
pub fn facts(started: Instant, load_at_start: &str) -> String {
    format!(
        "commit {}, {} UTC; load average (1/5/15 min) at start {load_at_start}, at end {}; took {:.0} s",
        super::doc::commit(),
        super::doc::output("date", &["-u", "+%Y-%m-%d %H:%M"]),
        super::doc::load_average(),
        started.elapsed().as_secs_f64()
    )
}
