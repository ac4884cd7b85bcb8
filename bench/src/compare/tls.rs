//! TLS: Redis's own `redis-benchmark --tls` against each server's
//! `tls-port`, both serving one self-signed certificate made for the run
//! with `openssl`, SET and GET at -P 1 and -P 16.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::first::{self, Row};
use super::redis_benchmark;
use super::servers::{free_port, scratch_dir, shell_join, Kind, Server};
use super::table::{noisy_note, spread};
use super::with_without::render::{commands_block, ms, opening, x};

/// The section's heading, which `--tls-only` replaces in a page.
pub const HEADING: &str = "## TLS";
/// The `-t` selection of every run.
pub const SELECTION: &str = "set,get";
/// The tests [`SELECTION`] runs, in redis-benchmark's order and spelling.
pub const TESTS: [&str; 2] = ["SET", "GET"];
/// Index of Redis in a row's cells.
const REDIS: usize = 0;
/// Index of Leasehold.
const LH: usize = 1;

/// What the section needs from the comparison's flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// redis-server binary.
    pub redis_bin: PathBuf,
    /// leasehold-server binary.
    pub leasehold_bin: PathBuf,
    /// Leasehold's `--threads`.
    pub threads: usize,
    /// Rounds; each runs both depths on both servers, alternating which
    /// goes first.
    pub rounds: usize,
    /// Requests per test at -P 1 (-P 16 runs [`first::P16_FACTOR`] times
    /// as many).
    pub requests: u64,
    /// A `--quick` smoke run.
    pub quick: bool,
}

/// The section's results.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// Why it did not run (no `openssl`, a server without TLS).
    pub skipped: Option<String>,
    /// A `--quick` smoke run.
    pub quick: bool,
    /// Leasehold's `--threads`.
    pub threads: usize,
    /// Rounds run.
    pub rounds: usize,
    /// `/proc/loadavg` when the section started.
    pub load: String,
    /// How the certificate was made, then each server's and each run's
    /// command line (the first round's).
    pub commands: Vec<String>,
    /// SET and GET at -P 1, then at -P 16; cells Redis, Leasehold.
    pub rows: Vec<Row<2>>,
}

/// The certificate and key files, in `dir`: `cert.pem` (self-signed, for
/// `localhost` and `127.0.0.1`, its own CA) and `key.pem` (RSA 2048).
struct Pem {
    cert: PathBuf,
    key: PathBuf,
}

/// The `openssl` words that make [`Pem`]'s files in `dir`.
fn openssl_args(dir: &Path) -> Vec<String> {
    let p = |name: &str| dir.join(name).display().to_string();
    let words = [
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=localhost",
        "-addext",
        "subjectAltName=DNS:localhost,IP:127.0.0.1",
        "-keyout",
        &p("key.pem"),
        "-out",
        &p("cert.pem"),
    ];
    words.map(String::from).to_vec()
}

/// Makes the certificate with `openssl` in a scratch directory.
///
/// # Errors
/// `openssl` missing or failing, as a reason for the page.
fn make_pem(commands: &mut Vec<String>) -> Result<Pem, String> {
    let dir = scratch_dir(Kind::Leasehold).map_err(|e| format!("no scratch directory: {e}"))?;
    let args = openssl_args(&dir);
    commands.push(format!(
        "# the certificate, made for the run\nopenssl {}",
        shell_join(&args)
    ));
    let out = Command::new("openssl")
        .args(&args)
        .output()
        .map_err(|e| format!("cannot run openssl: {e}"))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        return Err(format!("openssl failed: {}", why.trim()));
    }
    Ok(Pem {
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    })
}

/// The TLS flags both servers take (they are named alike): `tls-port`, the
/// certificate (its own CA), no client certificates.
fn server_flags(pem: &Pem, tls_port: u16) -> Vec<String> {
    let (cert, key) = (
        pem.cert.display().to_string(),
        pem.key.display().to_string(),
    );
    [
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &cert,
        "--tls-auth-clients",
        "no",
    ]
    .map(String::from)
    .to_vec()
}

/// The words after `redis-benchmark` for one run over TLS to `tls_port`,
/// trusting `cert`.
pub fn benchmark_args(tls_port: u16, cert: &Path, requests: u64, pipeline: usize) -> Vec<String> {
    let mut args = first::args(tls_port, requests, pipeline);
    // The same flags as the first benchmark, over TLS, SET and GET only.
    let t = args.iter().position(|a| a == "-t").map_or(0, |i| i + 1);
    args[t] = SELECTION.into();
    args.extend([
        "--tls".into(),
        "--cacert".into(),
        cert.display().to_string(),
    ]);
    args
}

/// Runs the section: makes the certificate, starts each server with TLS,
/// runs `rounds` rounds of both depths on both, and stops them.
pub fn run(s: &Settings) -> Section {
    let mut sec = Section {
        skipped: None,
        quick: s.quick,
        threads: s.threads,
        rounds: s.rounds,
        load: super::doc::load_average(),
        commands: Vec::new(),
        rows: first::PIPELINES
            .iter()
            .flat_map(|&p| TESTS.map(|t| Row::new(t, p)))
            .collect(),
    };
    let pem = match make_pem(&mut sec.commands) {
        Ok(p) => p,
        Err(why) => {
            sec.skipped = Some(why);
            return sec;
        }
    };
    let mut servers = Vec::new();
    for (kind, bin) in [
        (Kind::Redis, &s.redis_bin),
        (Kind::Leasehold, &s.leasehold_bin),
    ] {
        let started = free_port().and_then(|tls_port| {
            let server = Server::start_with(kind, bin, s.threads, &server_flags(&pem, tls_port))?;
            Ok((server, tls_port))
        });
        match started {
            Ok((server, tls_port)) => {
                sec.commands.push(format!(
                    "# {} with TLS\n{}",
                    kind.label(),
                    server.command_line
                ));
                servers.push((server, tls_port));
            }
            Err(e) => {
                sec.skipped = Some(format!("{} did not start with TLS: {e}", kind.label()));
                return sec;
            }
        }
    }
    for round in 0..s.rounds {
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
                let (server, tls_port) = &servers[side];
                let args = benchmark_args(*tls_port, &pem.cert, requests, pipeline);
                if round == 0 {
                    sec.commands.push(format!(
                        "# SET and GET -P {pipeline} over TLS on {}\nredis-benchmark {}",
                        server.kind.label(),
                        shell_join(&args)
                    ));
                }
                let out = redis_benchmark::run(&args);
                eprintln!(
                    "[tls round {}/{}] -P {pipeline} {}: {}",
                    round + 1,
                    s.rounds,
                    server.kind.label(),
                    out.summary()
                );
                first::record(&mut sec.rows, pipeline, side, &out);
            }
        }
    }
    sec
}

/// The section as markdown, opening with [`HEADING`].
pub fn section(sec: &Section) -> String {
    let mut s = match opening(HEADING, sec.skipped.as_deref(), sec.quick) {
        Ok(s) => s,
        Err(not_run) => return not_run,
    };
    s.push_str(&format!(
        "Redis's own `redis-benchmark --tls` (the first benchmark's flags, `-t {SELECTION}`) \
         against each server's `tls-port`, Redis and Leasehold `--threads {}`, both serving one \
         self-signed RSA 2048 certificate made for the run with `openssl` and asking for no \
         client certificate. {} round(s), each running both depths on both servers, alternating \
         which goes first; cells are the medians of the rounds. Load average at the start: {}.\n\n",
        sec.threads, sec.rounds, sec.load
    ));
    s.push_str(&table(&sec.rows));
    s.push_str(&commands_block(&sec.commands));
    s.push('\n');
    s
}

/// Rows of Redis against Leasehold (cells [`REDIS`], [`LH`]) as a
/// markdown table: rps, ratio, p99, and notes of noisy cells and failures
/// (the cluster section's redis-benchmark rows too).
pub(crate) fn table(rows: &[Row<2>]) -> String {
    let mut s = String::from(
        "| test | -P | Redis rps | Leasehold rps | Leasehold / Redis | Redis p99 ms | Leasehold p99 ms | notes |\n\
         |---|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in rows {
        let [redis, lh] = &r.cells;
        let mut notes: Vec<String> = [("Redis", redis), ("Leasehold", lh)]
            .into_iter()
            .filter_map(|(label, c)| noisy_note(label, spread(&c.rps)))
            .collect();
        for (label, c) in [("Redis", redis), ("Leasehold", lh)] {
            notes.extend(c.failures.first().map(|f| format!("{label}: {f}")));
        }
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.test,
            r.pipeline,
            redis.rps_cell(),
            lh.rps_cell(),
            x(r.ratio(LH, REDIS)),
            ms(redis.median_p99()),
            ms(lh.median_p99()),
            notes.join("; ")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_the_first_benchmarks_over_tls() {
        let args = benchmark_args(7443, Path::new("/tmp/c.pem"), 1000, 16);
        assert_eq!(
            shell_join(&args),
            "-p 7443 -q -c 50 -n 1000 -r 100000 -t set,get -P 16 --csv --tls --cacert /tmp/c.pem"
        );
    }

    #[test]
    fn the_table_gives_medians_ratios_and_failures() {
        let mut rows: Vec<Row<2>> = vec![Row::new("SET", 1), Row::new("GET", 1)];
        for (side, rps) in [(REDIS, 100_000.0), (LH, 150_000.0)] {
            let out = redis_benchmark::Outcome {
                rows: vec![redis_benchmark::CsvRow {
                    test: "SET".into(),
                    rps,
                    p99_ms: Some(0.5),
                }],
                error: Some("Error: Connection reset by peer".into()),
            };
            first::record(&mut rows, 1, side, &out);
        }
        let t = table(&rows);
        assert!(
            t.contains("| SET | 1 | 100 000 | 150 000 | 1.50x | 0.500 | 0.500 |  |"),
            "{t}"
        );
        assert!(
            t.contains("| GET | 1 | failed | failed | - | - | - | Redis: Error: Connection reset by peer; Leasehold: Error: Connection reset by peer |"),
            "{t}"
        );
    }
}
