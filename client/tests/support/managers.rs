//! Managers and clocks the lease-manager tests share.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_client::{
    Client, ClientConfig, Clock, FailureMode, LeaseConfig, LeaseManager, Mode, Policy, PolicySet,
    SystemClock,
};

/// A fail-closed, enforcing policy named "api" (ledger keys `t:api:KEY`).
pub fn api_policy(requests_per_unit: u64, unit: Duration, burst: u64) -> Policy {
    Policy {
        name: "api".into(),
        requests_per_unit,
        unit,
        burst,
        failure_mode: FailureMode::FailClosed,
        mode: Mode::Enforce,
        fail_open_requests_per_unit: 2,
    }
}

/// A manager of `policy` alone (domain "t") against the ledger at `addr`,
/// with lease calls' deadline `lease_deadline`.
pub fn manager_of(
    addr: SocketAddr,
    policy: Policy,
    config: LeaseConfig,
    lease_deadline: Duration,
    clock: Arc<dyn Clock>,
) -> LeaseManager {
    let mut cc = ClientConfig::new(addr);
    cc.lease_deadline = lease_deadline;
    LeaseManager::new(
        Client::new(cc),
        &PolicySet::from_policies("t", vec![policy]),
        config,
        clock,
    )
}

/// The system clock, except that the second read from the thread named
/// `thread` (a decision with no local token reads the clock under its
/// shard's read lock) first runs `trap`: a stall or a panic inside a read.
pub struct TrapClock {
    inner: SystemClock,
    thread: &'static str,
    trap: fn(),
    calls: AtomicU32,
    /// Whether the trap has started.
    pub sprung: AtomicBool,
}

impl TrapClock {
    pub fn new(thread: &'static str, trap: fn()) -> Arc<TrapClock> {
        Arc::new(TrapClock {
            inner: SystemClock::new(),
            thread,
            trap,
            calls: AtomicU32::new(0),
            sprung: AtomicBool::new(false),
        })
    }
}

impl Clock for TrapClock {
    fn now_us(&self) -> u64 {
        if std::thread::current().name() == Some(self.thread)
            && self.calls.fetch_add(1, Ordering::SeqCst) == 1
        {
            self.sprung.store(true, Ordering::SeqCst);
            (self.trap)();
        }
        self.inner.now_us()
    }
}
