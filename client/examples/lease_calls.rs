//! Ledger calls per second for one key at a steady 10 000 decisions per
//! second: the dynamic lease (the defaults: B = clamp(5, qps x 0.25 s, 500))
//! against a fixed lease of 50 tokens (min_lease = max_lease = 50), each
//! against the same in-process Leasehold server on 127.0.0.1.
//!
//! ```text
//! cargo run --release -p leasehold-client --example lease_calls [-- SECS [RATE]]
//! ```
//! SECS (default 5) is the measured window of each run, after a 1 s warm-up
//! that lets the rate estimate settle; RATE defaults to 10 000 decisions/s.
//! Ledger calls are counted by the server (TOKENLEASE + TOKENRETURN), so
//! nothing the client does can hide one. The policy's limit (1 000 000/s) is
//! far above the demand: the ledger never denies, and the comparison is the
//! lease size alone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_client::{
    Client, ClientConfig, FailureMode, LeaseConfig, LeaseManager, Mode, Outcome, Policy, PolicyId,
    PolicySet, SystemClock,
};
use leasehold_server::config::Config;
use leasehold_server::ServerHandle;

const P: PolicyId = PolicyId::FIRST;
const WARM_UP: Duration = Duration::from_secs(1);

struct Run {
    decisions: u64,
    not_allowed: u64,
    secs: f64,
    calls: u64,
}

impl Run {
    fn calls_per_sec(&self) -> f64 {
        self.calls as f64 / self.secs
    }
}

/// TOKENLEASE and TOKENRETURN calls the server has run.
fn ledger_calls(server: &ServerHandle) -> u64 {
    let table = leasehold_server::commands::table();
    let idx = [b"TOKENLEASE".as_slice(), b"TOKENRETURN"]
        .map(|n| table.lookup(n).expect("ledger command").0);
    server
        .shared
        .shard_stats
        .iter()
        .map(|st| idx.iter().map(|&i| st.calls[i].get()).sum::<u64>())
        .sum()
}

/// Decides for one key at `rate` per second for the warm-up plus `window`,
/// and counts the ledger calls made during `window`.
async fn run(
    server: &ServerHandle,
    lease: LeaseConfig,
    key: &[u8],
    rate: u64,
    window: Duration,
) -> Run {
    let policy = Policy {
        name: "calls".into(),
        requests_per_unit: 1_000_000,
        unit: Duration::from_secs(1),
        burst: 1_000_000,
        failure_mode: FailureMode::FailOpen,
        mode: Mode::Enforce,
        fail_open_requests_per_unit: 2_000_000,
    };
    let manager = LeaseManager::new(
        Client::new(ClientConfig::new(server.addr)),
        &PolicySet::from_policies("lease-calls", vec![policy]),
        lease,
        Arc::new(SystemClock::new()),
    );
    let start = Instant::now();
    let (mut done, mut not_allowed) = (0u64, 0u64);
    let mut measured: Option<(Instant, u64, u64, u64)> = None; // at, decisions, refused, calls
    loop {
        let elapsed = start.elapsed();
        if measured.is_none() && elapsed >= WARM_UP {
            measured = Some((Instant::now(), done, not_allowed, ledger_calls(server)));
        }
        if elapsed >= WARM_UP + window {
            break;
        }
        // Catch up to the schedule, then sleep: the average rate stays exact
        // even when a sleep overshoots on a loaded machine.
        let due = (elapsed.as_secs_f64() * rate as f64) as u64;
        while done < due {
            let d = manager.decide(P, key).await;
            if d.outcome != Outcome::Allowed {
                not_allowed += 1;
            }
            done += 1;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (at, d0, n0, c0) = measured.expect("the window starts after the warm-up");
    let r = Run {
        decisions: done - d0,
        not_allowed: not_allowed - n0,
        secs: at.elapsed().as_secs_f64(),
        calls: ledger_calls(server) - c0,
    };
    manager.shutdown().await;
    r
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let secs: u64 = args.next().map_or(Ok(5), |s| s.parse())?;
    let rate: u64 = args.next().map_or(Ok(10_000), |s| s.parse())?;
    let window = Duration::from_secs(secs);

    let mut c = Config::default();
    c.net.bind = "127.0.0.1".into();
    c.net.port = 0;
    c.shards.threads = 1;
    let server = leasehold_server::start(c, Arc::new(leasehold_server::clock::SystemClock::new()))?;

    let fixed = LeaseConfig {
        min_lease: 50,
        max_lease: 50,
        ..LeaseConfig::default()
    };
    let dynamic = run(&server, LeaseConfig::default(), b"dynamic", rate, window).await;
    let fixed = run(&server, fixed, b"fixed", rate, window).await;
    server.shutdown();

    println!("one key, target {rate} decisions/s, {secs} s measured after a 1 s warm-up");
    println!("lease             decisions/s  not allowed  ledger calls  calls/s  decisions/call");
    for (name, r) in [("dynamic (5..500)", &dynamic), ("fixed 50", &fixed)] {
        println!(
            "{name:<17} {:>11.0}  {:>11}  {:>12}  {:>7.1}  {:>14.1}",
            r.decisions as f64 / r.secs,
            r.not_allowed,
            r.calls,
            r.calls_per_sec(),
            r.decisions as f64 / r.calls.max(1) as f64,
        );
    }
    let fewer = 1.0 - dynamic.calls_per_sec() / fixed.calls_per_sec();
    println!(
        "dynamic makes {:.2}% fewer ledger calls ({:.2}x fewer)",
        fewer * 100.0,
        fixed.calls_per_sec() / dynamic.calls_per_sec()
    );
    let per = |r: &Run| r.calls as f64 / r.decisions as f64;
    println!(
        "per decision: {:.2}% fewer ledger calls",
        (1.0 - per(&dynamic) / per(&fixed)) * 100.0
    );
    Ok(())
}
