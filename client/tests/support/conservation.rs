//! Shared by the conservation tests (sweeper.rs, slot_reuse.rs): a policy
//! whose ledger bucket never refills within a test, a manager on a manual
//! clock with lease deadlines long enough that no lease times out after
//! being granted, and what the ledger has handed out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use leasehold_client::{
    Client, ClientConfig, FailureMode, LeaseConfig, LeaseManager, ManualClock, Mode, Policy,
    PolicySet,
};

use super::FakeLedger;

/// The ledger bucket's size; it refills 1 token per hour, so never in a test.
pub const CAP: u64 = 1_000_000;

pub fn policy() -> Policy {
    Policy {
        name: "api".into(),
        requests_per_unit: 1,
        unit: Duration::from_secs(3600),
        burst: CAP,
        failure_mode: FailureMode::FailClosed,
        mode: Mode::Enforce,
        fail_open_requests_per_unit: 2,
    }
}

pub async fn manager(fake: &FakeLedger, config: LeaseConfig) -> (LeaseManager, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let mut cc = ClientConfig::new(fake.addr);
    // A lease that times out may still have been granted: keep timeouts out
    // of a conservation test.
    cc.lease_deadline = Duration::from_secs(2);
    let m = LeaseManager::new(
        Client::new(cc),
        &PolicySet::from_policies("t", vec![policy()]),
        config,
        clock.clone(),
    );
    (m, clock)
}

/// Tokens the ledger has handed out for `key` and not had back.
pub fn leased(fake: &FakeLedger, key: &str) -> u64 {
    CAP - fake.tokens(key).unwrap_or(CAP)
}

/// A lease config whose every sweep (every 1 ms) returns what idle keys hold
/// and evicts every key that holds nothing.
pub fn evict_always() -> LeaseConfig {
    LeaseConfig {
        idle_after: Duration::ZERO,
        evict_after: Duration::ZERO,
        sweep_interval: Duration::from_millis(1),
        ..LeaseConfig::default()
    }
}

/// Tasks calling `maintain()` back to back until stopped.
pub struct Sweepers {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Sweepers {
    pub fn spawn(m: &LeaseManager, n: usize) -> Sweepers {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..n)
            .map(|_| {
                let (m, stop) = (m.clone(), stop.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        m.maintain();
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        Sweepers { stop, tasks }
    }

    pub async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
    }
}

/// Awaits every task, failing the test after 60 s.
pub async fn join_all(tasks: Vec<JoinHandle<()>>) {
    tokio::time::timeout(Duration::from_secs(60), async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
    .expect("decisions finish");
}
