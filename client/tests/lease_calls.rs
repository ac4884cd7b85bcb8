//! Ledger calls for one key at a steady 10 000 decisions per second, dynamic
//! lease vs a fixed lease of 50 (min_lease = max_lease = 50), against the real
//! server in process on 127.0.0.1. `examples/lease_calls.rs` prints the same
//! measurement; the numbers are in docs/client.md.
//!
//! In the steady state the ratio is max_lease / 50 = 10x (90% fewer calls)
//! by construction, exactly the 90% aimed for, so asserting ">= 90%" would
//! fail on one extra call. What is asserted instead, with room for a loaded
//! 2-core machine and a debug build: the dynamic lease reaches max_lease
//! (>= 450 decisions per ledger call), the fixed one stays at 50 (<= 55), and
//! so per decision the dynamic lease makes at least 88% fewer calls.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_client::{
    Client, ClientConfig, FailureMode, LeaseConfig, LeaseManager, Mode, Outcome, Policy, PolicyId,
    PolicySet, SystemClock,
};
use leasehold_server::config::Config;
use leasehold_server::ServerHandle;

const P: PolicyId = PolicyId::FIRST;
const RATE: u64 = 10_000;
const WARM_UP: Duration = Duration::from_secs(1);
const WINDOW: Duration = Duration::from_secs(2);

fn ledger_calls(server: &ServerHandle) -> u64 {
    let table = leasehold_server::commands::table();
    let idx = [b"TOKENLEASE".as_slice(), b"TOKENRETURN"].map(|n| table.lookup(n).unwrap().0);
    server
        .shared
        .shard_stats
        .iter()
        .map(|st| idx.iter().map(|&i| st.calls[i].get()).sum::<u64>())
        .sum()
}

/// (decisions, decisions not allowed, ledger calls) in the window after the warm-up.
async fn run(server: &ServerHandle, lease: LeaseConfig, key: &[u8]) -> (u64, u64, u64) {
    let policy = Policy {
        name: "calls".into(),
        requests_per_unit: 1_000_000,
        unit: Duration::from_secs(1),
        burst: 1_000_000,
        failure_mode: FailureMode::FailOpen,
        mode: Mode::Enforce,
        fail_open_requests_per_unit: 2_000_000,
    };
    let mut config = ClientConfig::new(server.addr);
    config.lease_deadline = Duration::from_millis(50); // debug build, shared 2-core machine
    let manager = LeaseManager::new(
        Client::new(config),
        &PolicySet::from_policies("lease-calls", vec![policy]),
        lease,
        Arc::new(SystemClock::new()),
    );
    let start = Instant::now();
    let (mut done, mut refused) = (0u64, 0u64);
    let mut at_warm_up = None;
    loop {
        let elapsed = start.elapsed();
        if at_warm_up.is_none() && elapsed >= WARM_UP {
            at_warm_up = Some((done, refused, ledger_calls(server)));
        }
        if elapsed >= WARM_UP + WINDOW {
            break;
        }
        let due = (elapsed.as_secs_f64() * RATE as f64) as u64;
        while done < due {
            if manager.decide(P, key).await.outcome != Outcome::Allowed {
                refused += 1;
            }
            done += 1;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (d0, r0, c0) = at_warm_up.unwrap();
    let out = (done - d0, refused - r0, ledger_calls(server) - c0);
    manager.shutdown().await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_lease_makes_about_ten_times_fewer_ledger_calls_than_a_fixed_lease_of_50() {
    let mut c = Config::default();
    c.net.bind = "127.0.0.1".into();
    c.net.port = 0;
    c.shards.threads = 1;
    c.persistence.save = String::new();
    c.persistence.dir = leasehold_testkit::scratch_dir().display().to_string();
    let server =
        leasehold_server::start(c, Arc::new(leasehold_server::clock::SystemClock::new())).unwrap();
    let fixed = LeaseConfig {
        min_lease: 50,
        max_lease: 50,
        ..LeaseConfig::default()
    };
    let (dd, dr, dc) = run(&server, LeaseConfig::default(), b"dynamic").await;
    let (fd, fr, fc) = run(&server, fixed, b"fixed").await;
    server.shutdown();
    let summary = format!(
        "dynamic: {dd} decisions, {dr} not allowed, {dc} calls; \
         fixed 50: {fd} decisions, {fr} not allowed, {fc} calls"
    );
    eprintln!("{summary}");
    // The schedule is kept on average even when the machine is loaded.
    let expected = RATE * WINDOW.as_secs();
    for d in [dd, fd] {
        assert!(d > expected * 9 / 10 && d < expected * 11 / 10, "{summary}");
    }
    assert!(dc > 0 && dd / dc >= 450, "{summary}");
    assert!(fc > 0 && fd / fc <= 55 && fd / fc >= 45, "{summary}");
    let fewer = 1.0 - (dc as f64 / dd as f64) / (fc as f64 / fd as f64);
    assert!(fewer >= 0.88, "{fewer:.4}: {summary}");
}
