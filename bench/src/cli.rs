//! The flags of one load run and the run itself (progress bar, report).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::keys::Distribution;
use crate::load::{LoadSpec, Stop};
use crate::report::{Latency, Report};
use crate::template::Template;

/// Requests sent when neither `--requests` nor `--duration` is given.
pub const DEFAULT_REQUESTS: u64 = 100_000;

/// Flags of one load run (names follow redis-benchmark and memtier_benchmark).
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Server host.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Server port.
    #[arg(long, default_value_t = 6379)]
    pub port: u16,
    /// Parallel connections, one task each.
    #[arg(short = 'c', long, default_value_t = 50)]
    pub connections: usize,
    /// Requests written per batch on each connection (1 = no pipelining).
    #[arg(short = 'P', long, default_value_t = 1)]
    pub pipeline: usize,
    /// Total requests over all connections [default: 100000 unless --duration].
    #[arg(short = 'n', long, conflicts_with = "duration")]
    pub requests: Option<u64>,
    /// Run for this many seconds instead of a request count.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Number of distinct keys `__key__` ranges over.
    #[arg(short = 'r', long, default_value_t = 100_000)]
    pub keyspace: u64,
    /// Key distribution: uniform, sequential, or zipf:<exponent> (zipf:0.99).
    #[arg(long, default_value = "uniform")]
    pub distribution: Distribution,
    /// The command template; `__key__` becomes a 12-digit key index,
    /// `__sha__` the SHA1 of --script. Redis's inline quoting rules apply.
    #[arg(long, default_value = "PING")]
    pub command: String,
    /// A Lua script to SCRIPT LOAD before the run (use `EVALSHA __sha__ ...`).
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// Print the report as one line of JSON.
    #[arg(long)]
    pub json: bool,
    /// Exit 0 even when error replies were counted.
    #[arg(long)]
    pub allow_errors: bool,
    /// Generator threads (1 keeps the generator on one core).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Seed of the key generators.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl RunArgs {
    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    fn stop(&self) -> Result<Stop, String> {
        match (self.requests, self.duration) {
            (_, Some(d)) if !(d.is_finite() && d > 0.0) => {
                Err(format!("--duration must be > 0, got {d}"))
            }
            (_, Some(d)) => Ok(Stop::Duration(Duration::from_secs_f64(d))),
            (n, None) => Ok(Stop::Requests(n.unwrap_or(DEFAULT_REQUESTS))),
        }
    }
}

/// Loads the script (if any), runs the load, and returns the report.
///
/// A progress bar is drawn only when stdout is a terminal and `--json` is off.
///
/// # Errors
/// Bad flags, a script that does not load, or an I/O error during the run.
pub fn run(args: &RunArgs) -> Result<Report, Box<dyn std::error::Error>> {
    if args.connections == 0 || args.pipeline == 0 || args.keyspace == 0 {
        return Err("--connections, --pipeline and --keyspace must be at least 1".into());
    }
    let stop = args.stop()?;
    let sha = match &args.script {
        Some(path) => Some(crate::resp::load_script(&args.addr(), path)?),
        None => None,
    };
    let template = Arc::new(Template::parse(&args.command, sha.as_deref())?);
    let spec = LoadSpec {
        addr: args.addr(),
        connections: args.connections,
        pipeline: args.pipeline,
        stop,
        keyspace: args.keyspace,
        distribution: args.distribution,
        template,
        seed: args.seed,
    };
    let rt = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()?
    };
    let done = Arc::new(AtomicU64::new(0));
    let bar = (std::io::stdout().is_terminal() && !args.json).then(|| progress_bar(stop));
    let outcome = rt.block_on(async {
        let ticker = bar.clone().map(|bar| {
            let done = done.clone();
            let started = std::time::Instant::now();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let replies = done.load(Ordering::Relaxed);
                    bar.set_message(format!("{replies} replies"));
                    match stop {
                        Stop::Requests(_) => bar.set_position(replies),
                        Stop::Duration(_) => bar.set_position(started.elapsed().as_millis() as u64),
                    }
                }
            })
        });
        let outcome = crate::load::run(&spec, done.clone()).await;
        if let Some(t) = ticker {
            t.abort();
        }
        outcome
    })?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let seconds = outcome.elapsed.as_secs_f64();
    Ok(Report {
        command: args.command.clone(),
        connections: args.connections,
        pipeline: args.pipeline,
        keyspace: args.keyspace,
        distribution: args.distribution.to_string(),
        requests: outcome.requests,
        errors: outcome.errors,
        first_error: outcome.first_error,
        seconds,
        ops_per_sec: outcome.requests as f64 / seconds.max(1e-9),
        latency_ms: Latency::from_histogram(&outcome.histogram),
    })
}

fn progress_bar(stop: Stop) -> ProgressBar {
    let (len, unit) = match stop {
        Stop::Requests(n) => (n, "requests"),
        Stop::Duration(d) => (d.as_millis() as u64, "ms"),
    };
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stdout());
    bar.set_style(
        ProgressStyle::with_template(&format!("{{bar:40}} {{pos}}/{{len}} {unit} {{msg}}"))
            .expect("valid progress template"),
    );
    bar
}
