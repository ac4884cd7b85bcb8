//! The persistence section: throughput with the append-only log on
//! (`appendfsync everysec`) against the same server without persistence, a
//! BGSAVE of a filled server with another client's latency meanwhile, and a
//! restart from a log that has a base and an increment; each for Redis and
//! Leasehold in the same run, configured the same way.
//!
//! # Layout
//! - this file: the servers, the three measurements.
//! - [`render`]: the markdown section and its targets.

pub mod render;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::replication;
use super::replication::nodes::{dbsize, info, wait_until};
use super::replication::probe::{Probe, Samples};
use super::servers::{self, Kind, Server};
use super::with_without::{self, Names, Row, Setups, KINDS};
use super::workloads::{self, Side};
use super::Runner;
use crate::resp::info_field;

/// The flags that turn the log on, the same on both servers (with
/// `--save ""` from [`servers::NO_PERSISTENCE`]: no snapshot rules).
pub const LOG_FLAGS: [&str; 4] = ["--appendonly", "yes", "--appendfsync", "everysec"];
/// What fills the BGSAVE's server and the restart's base, one SET per key.
pub const FILL_COMMAND: &str = replication::FILL_COMMAND;
/// The other client's commands during a BGSAVE: one probe thread each.
pub const PROBES: [&str; 2] = ["GET k:__key__", "SET k:__key__ xxx"];
/// How long the probes run on the idle filled server first.
pub const BASELINE: Duration = replication::BASELINE;
/// Pause between two polls of INFO (BGSAVE, rewrite) or PING (restart).
pub const POLL: Duration = Duration::from_millis(5);
/// The share of the restart's keys written after the rewrite, into the
/// log's increment (token buckets); the rest are strings in its base.
pub const INCREMENT_SHARE: u64 = 10;
/// BGSAVEs per server per round: one takes well under a second, and the
/// probes' p99 needs more samples than one gives.
pub const BGSAVE_ROUNDS_PER_ROUND: usize = 3;
/// The longest BGSAVE or rewrite waited for.
const SAVE_LIMIT: Duration = Duration::from_secs(120);
/// The longest restart waited for.
const LOAD_LIMIT: Duration = Duration::from_secs(300);
/// The longest SHUTDOWN waited for.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(60);

/// Settings of the section.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Debian's redis-server.
    pub redis_bin: PathBuf,
    /// leasehold-server.
    pub leasehold_bin: PathBuf,
    /// Leasehold's `--threads`.
    pub threads: usize,
    /// Rounds of the throughput rows and the restarts; the BGSAVE runs
    /// [`Settings::bgsave_rounds`].
    pub rounds: usize,
    /// Keys of the BGSAVE and of the restart.
    pub keys: u64,
    /// A `--quick` smoke run.
    pub quick: bool,
    /// Seconds per throughput run.
    pub duration: f64,
}

impl Settings {
    /// BGSAVE rounds: [`BGSAVE_ROUNDS_PER_ROUND`] per round.
    pub fn bgsave_rounds(&self) -> usize {
        self.rounds * BGSAVE_ROUNDS_PER_ROUND
    }

    fn bin(&self, kind: Kind) -> &Path {
        match kind {
            Kind::Redis => &self.redis_bin,
            Kind::Leasehold => &self.leasehold_bin,
        }
    }
}

/// This section's set-ups: each kind without persistence and with the log.
pub const NAMES: Names = Names {
    section: "persistence",
    without_label: " without persistence",
    with_label: " with log",
    without_column: "without",
    with_column: "with log",
    both: "with log",
};

/// "Redis with log" / "Leasehold without persistence".
pub fn setup_label(kind: Kind, with_log: bool) -> String {
    NAMES.label(kind, with_log)
}

/// What a throughput row records about the log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogStats {
    /// Log rewrites (INFO `aof_rewrites`) during the runs with the log,
    /// Redis then Leasehold: the automatic ones, at 64 MB and 100% growth.
    pub rewrites: [u64; 2],
    /// INFO `aof_delayed_fsync` growth over the runs with the log, Redis then
    /// Leasehold.
    pub delayed_fsyncs: [u64; 2],
}

/// One throughput row on the four set-ups.
pub type ThroughputRow = Row<LogStats>;

/// The throughput part; its servers are the four servers, in cell order.
pub type Throughput = with_without::Throughput<LogStats>;

/// The BGSAVEs of one server.
#[derive(Debug, Clone, PartialEq)]
pub struct Bgsave {
    /// Keys on the server.
    pub keys: u64,
    /// The server's and the fill's command lines.
    pub commands: Vec<String>,
    /// The fill's wall time, in seconds.
    pub fill_seconds: f64,
    /// Each round's time from BGSAVE to `rdb_bgsave_in_progress:0` with a
    /// new save counted.
    pub took: Vec<Duration>,
    /// The snapshot file's size after the last round, in bytes.
    pub file_bytes: u64,
    /// The probes ([`PROBES`]) on the idle filled server, before.
    pub baseline: [Samples; 2],
    /// The probes during the BGSAVEs, all rounds together.
    pub during: [Samples; 2],
}

/// The restarts of one server from one kind of file.
#[derive(Debug, Clone, PartialEq)]
pub struct Restart {
    /// Keys after the restart.
    pub keys: u64,
    /// Of which in the snapshot or the log's base (the rest are in the
    /// log's increment).
    pub base_keys: u64,
    /// How the files were made, then the restarted server's line.
    pub commands: Vec<String>,
    /// From the log only: BGREWRITEAOF until `aof_rewrite_in_progress:0`
    /// with a new rewrite counted, in seconds.
    pub rewrite_seconds: Option<f64>,
    /// Bytes of the snapshot, or of the log's base file(s).
    pub base_bytes: u64,
    /// From the log only: bytes of its increment file(s).
    pub incr_bytes: Option<u64>,
    /// Each round's time from spawn to the first PONG after which DBSIZE
    /// answers every key.
    pub took: Vec<Duration>,
    /// Each round in which PING answered PONG before the data was there
    /// (DBSIZE then answered `-LOADING` or fewer keys): when it first did.
    pub early_pongs: Vec<Duration>,
    /// Why a restart failed (the server did not start on its files, or did
    /// not load them); no rounds run after it.
    pub failure: Option<String>,
}

/// The whole section.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// A `--quick` smoke run.
    pub quick: bool,
    /// Leasehold's `--threads`.
    pub threads: usize,
    /// Rounds of the throughput rows and the restarts (the BGSAVE runs
    /// [`BGSAVE_ROUNDS_PER_ROUND`] times as many).
    pub rounds: usize,
    /// Seconds per throughput run.
    pub duration: f64,
    /// Why the section did not run, if it did not.
    pub skipped: Option<String>,
    /// Throughput with and without the log (or why it failed).
    pub throughput: Result<Throughput, String>,
    /// BGSAVE, Redis then Leasehold.
    pub bgsave: Vec<(Kind, Result<Bgsave, String>)>,
    /// Restart from the BGSAVE's snapshot, Redis then Leasehold.
    pub restart_snapshot: Vec<(Kind, Result<Restart, String>)>,
    /// Restart from the log (base and increment), Redis then Leasehold.
    pub restart_log: Vec<(Kind, Result<Restart, String>)>,
    /// Where and when it ran: date, commit, load averages, elapsed time.
    pub facts: String,
}

impl Section {
    fn new(s: &Settings) -> Section {
        Section {
            quick: s.quick,
            threads: s.threads,
            rounds: s.rounds,
            duration: s.duration,
            skipped: None,
            throughput: Err("not run".into()),
            bgsave: Vec::new(),
            restart_snapshot: Vec::new(),
            restart_log: Vec::new(),
            facts: String::new(),
        }
    }
}

/// Runs the section. Every server has a directory of its own under one
/// temporary directory, removed at the end.
pub fn run(s: &Settings, runner: &Runner) -> Section {
    let started = Instant::now();
    let load_at_start = super::doc::load_average();
    let mut section = Section::new(s);
    if !with_without::runs(&s.redis_bin) {
        section.skipped = Some(format!(
            "`{} --version` does not run: Redis is needed to compare against",
            s.redis_bin.display()
        ));
        return section;
    }
    let dir = std::env::temp_dir().join(format!("leasehold-bench-persist-{}", std::process::id()));
    section.throughput = throughput(s, runner);
    let (bgsave, snapshots) = bgsaves(s, runner, &dir);
    section.bgsave = bgsave;
    let logs: Sources = KINDS
        .iter()
        .map(|&kind| {
            let d = dir.join(format!("restart-{}", kind.label().to_lowercase()));
            let r = log_setup(s, runner, kind, &d);
            if let Err(e) = &r {
                eprintln!("log restart set-up {}: {e}", kind.label());
            }
            (kind, r)
        })
        .collect();
    let [snapshot, log] = restarts(s, [snapshots, logs]);
    section.restart_snapshot = snapshot;
    section.restart_log = log;
    let _ = std::fs::remove_dir_all(&dir);
    section.facts = with_without::facts(started, &load_at_start);
    section
}

/// A number field of `INFO persistence`.
fn persistence_field(server: &Server, field: &str) -> Option<u64> {
    let text = info(server, "persistence")?;
    info_field(&text, field)?.parse().ok()
}

fn throughput(s: &Settings, runner: &Runner) -> Result<Throughput, String> {
    let e = |e: std::io::Error| e.to_string();
    let log: Vec<String> = LOG_FLAGS.map(String::from).to_vec();
    // Indexed by cell: each kind without persistence, then with the log.
    let mut servers: Vec<Server> = Vec::new();
    for kind in KINDS {
        servers.push(Server::start_with(kind, s.bin(kind), s.threads, &[]).map_err(e)?);
        let with = Server::start_with(kind, s.bin(kind), s.threads, &log).map_err(e)?;
        // Leasehold can answer PING a moment before its log runs.
        wait_until(
            &format!(
                "{} with {}: aof_enabled:1",
                kind.label(),
                LOG_FLAGS.join(" ")
            ),
            Duration::from_secs(10),
            POLL,
            || persistence_field(&with, "aof_enabled") == Some(1),
        )?;
        servers.push(with);
    }
    let lines = servers.iter().map(|x| x.command_line.clone()).collect();
    Ok(with_without::measure(
        &Servers(servers),
        &NAMES,
        runner,
        s.rounds,
        lines,
    ))
}

/// The four servers, indexed by cell.
struct Servers(Vec<Server>);

/// INFO `aof_rewrites` and `aof_delayed_fsync` of `server` (0 if missing).
fn log_counters(server: &Server) -> [u64; 2] {
    [
        persistence_field(server, "aof_rewrites").unwrap_or(0),
        persistence_field(server, "aof_delayed_fsync").unwrap_or(0),
    ]
}

impl Setups for Servers {
    type Extra = LogStats;
    /// [`log_counters`] before the run.
    type Before = [u64; 2];

    fn server(&self, c: usize) -> &Server {
        &self.0[c]
    }

    fn before(&self, c: usize) -> [u64; 2] {
        log_counters(&self.0[c])
    }

    fn after(&self, c: usize, before: [u64; 2], extra: &mut LogStats) {
        let after = log_counters(&self.0[c]);
        if c % 2 == 1 {
            extra.rewrites[c / 2] += after[0].saturating_sub(before[0]);
            extra.delayed_fsyncs[c / 2] += after[1].saturating_sub(before[1]);
        }
    }
}

/// A server of `kind` whose files go to `dir` (made empty first), with
/// `extra` flags; the flags without the port, for a restart.
fn start_in(
    s: &Settings,
    kind: Kind,
    dir: &Path,
    extra: &[&str],
) -> Result<(Server, Vec<String>), String> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut flags = vec!["--dir".to_string(), dir.display().to_string()];
    flags.extend(extra.iter().map(|x| x.to_string()));
    let server = Server::start_with(kind, s.bin(kind), s.threads, &flags)
        .map_err(|e| format!("{}: {e}", kind.label()))?;
    Ok((server, flags))
}

/// Runs `args` (a fill) and checks it had no error replies; its seconds.
fn fill(runner: &Runner, args: &[String]) -> Result<f64, String> {
    let r = runner.run(args)?;
    match r.first_error {
        Some(e) if r.errors > 0 => Err(format!("the fill got {} error replies ({e})", r.errors)),
        _ => Ok(r.seconds),
    }
}

fn expect_keys(server: &Server, keys: u64, when: &str) -> Result<(), String> {
    match dbsize(server) {
        Some(n) if n == keys as i64 => Ok(()),
        n => Err(format!(
            "{} holds {} keys {when}, not {keys}",
            server.kind.label(),
            n.map_or("?".into(), |n| n.to_string())
        )),
    }
}

/// A filled server waiting for its BGSAVE rounds.
struct Filled {
    server: Server,
    dir: PathBuf,
    result: Bgsave,
}

fn bgsave_setup(s: &Settings, runner: &Runner, kind: Kind, dir: &Path) -> Result<Filled, String> {
    let (server, _) = start_in(s, kind, dir, &[])?;
    let a = runner.fill_args(&server, FILL_COMMAND, None, s.keys, 1);
    let fill_seconds = fill(runner, &a)?;
    expect_keys(&server, s.keys, "after the fill")?;
    let baseline = PROBES
        .iter()
        .map(|c| Probe::latency(server.addr(), c, s.keys))
        .collect::<Result<Vec<_>, _>>()?;
    std::thread::sleep(BASELINE);
    let mut baseline = baseline.into_iter().map(Probe::finish);
    let baseline = std::array::from_fn(|_| baseline.next().unwrap_or_default());
    Ok(Filled {
        result: Bgsave {
            keys: s.keys,
            commands: vec![server.command_line.clone(), runner.command_line(&a)],
            fill_seconds,
            took: Vec::new(),
            file_bytes: 0,
            baseline,
            during: Default::default(),
        },
        server,
        dir: dir.to_path_buf(),
    })
}

/// The snapshot file a BGSAVE writes in `dir`.
fn dump_file(kind: Kind, dir: &Path) -> PathBuf {
    dir.join(match kind {
        Kind::Redis => "dump.rdb",
        Kind::Leasehold => "dump.lhs",
    })
}

/// One BGSAVE with the probes running: the time until INFO shows it done.
fn bgsave_once(f: &mut Filled) -> Result<(), String> {
    let server = &f.server;
    let saves = persistence_field(server, "rdb_saves").ok_or("INFO has no rdb_saves")?;
    let last = persistence_field(server, "rdb_last_save_time").unwrap_or(0);
    let probes = PROBES
        .iter()
        .map(|c| Probe::latency(server.addr(), c, f.result.keys))
        .collect::<Result<Vec<_>, _>>()?;
    // Let the probes connect before the clock starts.
    std::thread::sleep(Duration::from_millis(20));
    let started = Instant::now();
    let answer = server
        .conn()
        .and_then(|mut c| c.call_text(&["BGSAVE"]))
        .map_err(|e| format!("BGSAVE: {e}"));
    let done = answer.and_then(|_| {
        wait_until(
            &format!("{} BGSAVE", server.kind.label()),
            SAVE_LIMIT,
            POLL,
            || {
                info(server, "persistence").is_some_and(|p| {
                    let n = |k| info_field(&p, k).and_then(|v| v.parse::<u64>().ok());
                    n("rdb_bgsave_in_progress") == Some(0)
                        && (n("rdb_saves").is_some_and(|v| v > saves)
                            || n("rdb_last_save_time").is_some_and(|v| v != last))
                })
            },
        )
    });
    let took = started.elapsed();
    for (d, p) in f.result.during.iter_mut().zip(probes) {
        d.merge(p.finish());
    }
    done?;
    let status = info(server, "persistence");
    let status = status
        .as_deref()
        .and_then(|p| info_field(p, "rdb_last_bgsave_status"));
    if status != Some("ok") {
        return Err(format!(
            "rdb_last_bgsave_status is {status:?} after the BGSAVE"
        ));
    }
    f.result.took.push(took);
    let file = dump_file(server.kind, &f.dir);
    f.result.file_bytes = std::fs::metadata(&file)
        .map_err(|e| format!("{}: {e}", file.display()))?
        .len();
    Ok(())
}

/// The BGSAVE rounds; then each server is stopped and its snapshot left as
/// a restart's source.
fn bgsaves(s: &Settings, runner: &Runner, dir: &Path) -> (PerKind<Bgsave>, Sources) {
    let mut filled: Vec<(Kind, Result<Filled, String>)> = KINDS
        .iter()
        .map(|&kind| {
            let d = dir.join(format!("bgsave-{}", kind.label().to_lowercase()));
            (kind, bgsave_setup(s, runner, kind, &d))
        })
        .collect();
    for round in 0..s.bgsave_rounds() {
        for k in 0..KINDS.len() {
            let i = (k + round) % KINDS.len();
            let (kind, f) = &mut filled[i];
            let kind = *kind;
            let Ok(f) = f else { continue };
            match bgsave_once(f) {
                Ok(()) => eprintln!(
                    "[bgsave {}/{}] {} of {} keys: {:.2} s, {} bytes",
                    round + 1,
                    s.bgsave_rounds(),
                    kind.label(),
                    f.result.keys,
                    f.result.took.last().map_or(0.0, Duration::as_secs_f64),
                    f.result.file_bytes
                ),
                Err(e) => {
                    eprintln!("[bgsave {}] {}: {e}", round + 1, kind.label());
                    filled[i].1 = Err(e);
                }
            }
        }
    }
    let mut results = Vec::new();
    let mut sources = Vec::new();
    for (kind, f) in filled {
        match f {
            Ok(f) => {
                let source = snapshot_source(&f);
                // With no rules the server writes no snapshot at SHUTDOWN:
                // the restarts find its last BGSAVE's file.
                let stopped = f.server.shutdown(SHUTDOWN_LIMIT);
                let source = stopped.map_err(|e| format!("SHUTDOWN: {e}")).and(source);
                results.push((kind, Ok(f.result)));
                sources.push((kind, source));
            }
            Err(e) => {
                sources.push((kind, Err(format!("no snapshot: {e}"))));
                results.push((kind, Err(e)));
            }
        }
    }
    (results, sources)
}

fn snapshot_source(f: &Filled) -> Result<Source, String> {
    Ok(Source {
        flags: vec!["--dir".into(), f.dir.display().to_string()],
        dir: f.dir.clone(),
        result: Restart {
            keys: f.result.keys,
            base_keys: f.result.keys,
            commands: vec![format!(
                "# the BGSAVE's server, stopped with SHUTDOWN; its last BGSAVE's {} is in its --dir",
                dump_file(f.server.kind, &f.dir)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            )],
            rewrite_seconds: None,
            base_bytes: f.result.file_bytes,
            incr_bytes: None,
            took: Vec::new(),
            early_pongs: Vec::new(),
            failure: None,
        },
    })
}

/// The token-bucket row of the memory section (1 token an hour, so every
/// bucket outlives the measurement): what the increment is written with.
fn bucket_sides() -> (Side, Side) {
    let row = workloads::memory_rows()
        .into_iter()
        .find(|m| m.leasehold.command.starts_with("TOKENLEASE"))
        .expect("the memory rows have a token bucket");
    (row.redis, row.leasehold)
}

/// Bytes of the log's base and increment files in `dir`/appendonlydir
/// (`*.base.*` and `*.incr.*`).
fn log_sizes(dir: &Path) -> Result<(u64, u64), String> {
    let log = dir.join("appendonlydir");
    let mut sizes = (0, 0);
    for entry in std::fs::read_dir(&log).map_err(|e| format!("{}: {e}", log.display()))? {
        let entry = entry.map_err(|e| e.to_string())?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let len = entry.metadata().map_err(|e| e.to_string())?.len();
        if name.contains(".base.") {
            sizes.0 += len;
        } else if name.contains(".incr.") {
            sizes.1 += len;
        }
    }
    Ok(sizes)
}

/// What a restart starts from: the server's flags without its port, its
/// directory, and the restarts so far.
struct Source {
    flags: Vec<String>,
    dir: PathBuf,
    result: Restart,
}

/// Fills a server with the log on: strings, a rewrite (they become the
/// base), token buckets (the increment), then SHUTDOWN.
fn log_setup(s: &Settings, runner: &Runner, kind: Kind, dir: &Path) -> Result<Source, String> {
    let (server, flags) = start_in(s, kind, dir, &LOG_FLAGS)?;
    let incr_keys = s.keys / INCREMENT_SHARE;
    let base_keys = s.keys - incr_keys;
    let base = runner.fill_args(&server, FILL_COMMAND, None, base_keys, 1);
    fill(runner, &base)?;
    let rewrites = persistence_field(&server, "aof_rewrites").ok_or("INFO has no aof_rewrites")?;
    let started = Instant::now();
    server
        .conn()
        .and_then(|mut c| c.call_text(&["BGREWRITEAOF"]))
        .map_err(|e| format!("BGREWRITEAOF: {e}"))?;
    wait_until(
        &format!("{} BGREWRITEAOF", kind.label()),
        SAVE_LIMIT,
        POLL,
        || {
            info(&server, "persistence").is_some_and(|p| {
                let n = |k| info_field(&p, k).and_then(|v| v.parse::<u64>().ok());
                n("aof_rewrite_in_progress") == Some(0)
                    && n("aof_rewrite_scheduled") == Some(0)
                    && n("aof_rewrites").is_some_and(|v| v > rewrites)
            })
        },
    )?;
    let rewrite_seconds = started.elapsed().as_secs_f64();
    let (redis_side, leasehold_side) = bucket_sides();
    let side = if kind == Kind::Redis {
        redis_side
    } else {
        leasehold_side
    };
    let script = runner.script(&side);
    let incr = runner.fill_args(&server, side.command, script.as_deref(), incr_keys, 1);
    fill(runner, &incr)?;
    expect_keys(&server, s.keys, "after the fills")?;
    let first = server.command_line.clone();
    server
        .shutdown(SHUTDOWN_LIMIT)
        .map_err(|e| format!("SHUTDOWN: {e}"))?;
    let (base_bytes, incr_bytes) = log_sizes(dir)?;
    Ok(Source {
        flags,
        dir: dir.to_path_buf(),
        result: Restart {
            keys: s.keys,
            base_keys,
            commands: vec![
                first,
                runner.command_line(&base),
                "redis-cli -p PORT BGREWRITEAOF".into(),
                runner.command_line(&incr),
                "redis-cli -p PORT SHUTDOWN".into(),
            ],
            rewrite_seconds: Some(rewrite_seconds),
            base_bytes,
            incr_bytes: Some(incr_bytes),
            took: Vec::new(),
            early_pongs: Vec::new(),
            failure: None,
        },
    })
}

/// The last line of the file at `path` that is not empty.
fn last_line(path: &Path) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| {
            t.lines()
                .rfind(|l| !l.trim().is_empty())
                .map(str::to_string)
        })
        .map(|l| l.trim().chars().take(300).collect())
        .unwrap_or_default()
}

/// Starts the server again on its files: the time from spawn to the first
/// PONG after which DBSIZE answers every key.
fn restart_once(s: &Settings, kind: Kind, src: &mut Source) -> Result<(), String> {
    let r = &mut src.result;
    let port = servers::free_port().map_err(|e| e.to_string())?;
    let args = Server::args(kind, port, s.threads, &src.flags);
    let log = src.dir.join("restart.log");
    let started = Instant::now();
    let mut server =
        Server::spawn_to(kind, s.bin(kind), port, args, Some(&log)).map_err(|e| e.to_string())?;
    let mut early = None;
    let took = loop {
        if let Some(status) = server.exited().map_err(|e| e.to_string())? {
            return Err(format!(
                "{} exited ({status}) while starting: {}",
                kind.label(),
                last_line(&log)
            ));
        }
        let pong = server
            .conn()
            .and_then(|mut c| c.call_text(&["PING"]))
            .is_ok_and(|t| t == "PONG");
        let t = started.elapsed();
        if pong {
            if dbsize(&server) == Some(r.keys as i64) {
                break t;
            }
            early.get_or_insert(t);
        }
        if t > LOAD_LIMIT {
            return Err(format!(
                "{} not loaded within {} s (DBSIZE {:?})",
                kind.label(),
                LOAD_LIMIT.as_secs(),
                dbsize(&server)
            ));
        }
        std::thread::sleep(POLL);
    };
    if r.took.is_empty() {
        r.commands.push(format!(
            "# started again on the same --dir: the clock runs from this spawn to the first PONG\n{}",
            server.command_line
        ));
    }
    server
        .shutdown(SHUTDOWN_LIMIT)
        .map_err(|e| format!("SHUTDOWN: {e}"))?;
    r.took.push(took);
    r.early_pongs.extend(early);
    Ok(())
}

/// One result per kind, Redis first.
type PerKind<T> = Vec<(Kind, Result<T, String>)>;
type Sources = PerKind<Source>;

/// The restart rounds over both kinds of source (snapshot, log), the four
/// set-ups rotated each round.
fn restarts(s: &Settings, mut sources: [Sources; 2]) -> [PerKind<Restart>; 2] {
    const WHAT: [&str; 2] = ["snapshot", "log"];
    for round in 0..s.rounds {
        for k in 0..4 {
            let c = (k + round) % 4;
            let (which, i) = (c % 2, c / 2);
            let (kind, src) = &mut sources[which][i];
            let kind = *kind;
            let Ok(src) = src else { continue };
            if src.result.failure.is_some() {
                continue;
            }
            match restart_once(s, kind, src) {
                Ok(()) => eprintln!(
                    "[restart {}/{}] {} from its {} with {} keys: {:.2} s to PONG",
                    round + 1,
                    s.rounds,
                    kind.label(),
                    WHAT[which],
                    src.result.keys,
                    src.result.took.last().map_or(0.0, Duration::as_secs_f64)
                ),
                Err(e) => {
                    eprintln!(
                        "[restart {}] {} from its {}: {e}",
                        round + 1,
                        kind.label(),
                        WHAT[which]
                    );
                    src.result.failure = Some(e);
                }
            }
        }
    }
    sources.map(|v| {
        v.into_iter()
            .map(|(kind, src)| (kind, src.map(|src| src.result)))
            .collect()
    })
}
