//! A panic inside a shard's read (the manager's
//! clock is read under the read lock by a decision with no local token)
//! must leave no reader announced: the same thread decides again, and
//! writers of every shard (inserts) are not held up.

mod support;

use std::time::{Duration, Instant};

use leasehold_client::{LeaseConfig, PolicyId};
use support::managers::{api_policy, manager_of, TrapClock};
use support::FakeLedger;

const P: PolicyId = PolicyId::FIRST;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_inside_a_read_releases_the_reader_slot() {
    let fake = FakeLedger::start().await;
    // The clock panics on the read under the shard's read lock.
    let clock = TrapClock::new("panicky", || panic!("clock failure inside a read"));
    let policy = api_policy(1000, Duration::from_secs(1), 1000);
    let m = manager_of(
        fake.addr,
        policy,
        LeaseConfig::default(),
        Duration::from_millis(5),
        clock,
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
