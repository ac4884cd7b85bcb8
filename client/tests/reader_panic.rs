//! A panic inside a shard's read (the manager's
//! clock is read under the read lock by a decision with no local token)
//! must leave no reader announced: the same thread decides again, and
//! writers of every shard (inserts) are not held up.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_client::{
    Client, ClientConfig, Clock, FailureMode, LeaseConfig, LeaseManager, Mode, Policy, PolicyId,
    PolicySet, SystemClock,
};
use support::FakeLedger;

const P: PolicyId = PolicyId::FIRST;

struct PanicClock {
    inner: SystemClock,
    calls: AtomicU32,
}

impl Clock for PanicClock {
    fn now_us(&self) -> u64 {
        // The second read from "panicky": the one under the read lock.
        if std::thread::current().name() == Some("panicky")
            && self.calls.fetch_add(1, Ordering::SeqCst) == 1
        {
            panic!("clock failure inside a read");
        }
        self.inner.now_us()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_inside_a_read_releases_the_reader_slot() {
    let fake = FakeLedger::start().await;
    let p = Policy {
        name: "api".into(),
        requests_per_unit: 1000,
        unit: Duration::from_secs(1),
        burst: 1000,
        failure_mode: FailureMode::FailClosed,
        mode: Mode::Enforce,
        fail_open_requests_per_unit: 2,
    };
    let m = LeaseManager::new(
        Client::new(ClientConfig::new(fake.addr)),
        &PolicySet::from_policies("t", vec![p]),
        LeaseConfig::default(),
        Arc::new(PanicClock {
            inner: SystemClock::new(),
            calls: AtomicU32::new(0),
        }),
    );
    let m2 = m.clone();
    let t = std::thread::Builder::new()
        .name("panicky".into())
        .spawn(move || {
            let r =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m2.try_decide(P, b"a")));
            assert!(r.is_err(), "the clock panicked inside the read");
            // The same thread reads again (a nested-read check in debug).
            for _ in 0..100 {
                let _ = m2.try_decide(P, b"a");
                let _ = m2.try_decide(P, b"b");
            }
            // ...and keeps its slot while others write.
            std::thread::sleep(Duration::from_millis(500));
        })
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let m3 = m.clone();
    let took = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::task::spawn_blocking(move || {
            let start = Instant::now();
            for i in 0..2000 {
                let _ = m3.try_decide(P, format!("w{i}").as_bytes());
            }
            start.elapsed()
        }),
    )
    .await
    .expect("inserts hung behind a reader slot left announced")
    .unwrap();
    eprintln!("2000 inserts in {took:?}");
    t.join().unwrap();
    m.shutdown().await;
}
