//! One reader stalled inside a shard's read (here by the manager's clock,
//! which a decision with no local token reads under the shard's read lock;
//! in production: a preempted thread) makes a writer of that shard wait, as
//! with any reader-writer lock, but no other shard's writers and no new
//! thread's first decision (found by a break-it review: the waiting writer
//! held the process-wide slot registry).

mod support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_client::{Clock, LeaseConfig, LeaseManager, PolicyId, SystemClock};
use support::managers::{api_policy, manager_of, TrapClock};
use support::FakeLedger;

const P: PolicyId = PolicyId::FIRST;

fn manager(fake: &FakeLedger, clock: Arc<dyn Clock>) -> LeaseManager {
    let policy = api_policy(1000, Duration::from_secs(1), 1000);
    manager_of(
        fake.addr,
        policy,
        LeaseConfig::default(),
        Duration::from_millis(5),
        clock,
    )
}

/// This thread's user + system CPU time in clock ticks (1/100 s).
fn thread_cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat; `rest` starts at field 3.
    let get = |i: usize| {
        f.get(i - 3)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    get(14) + get(15)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_reader_of_one_map_does_not_stall_writers_of_another() {
    let fake = FakeLedger::start().await;
    // The read under "a"'s shard lock sleeps 1.5 s (a preempted thread).
    let clock = TrapClock::new("stall", || std::thread::sleep(Duration::from_millis(1500)));
    let m1 = manager(&fake, clock.clone());
    // An unrelated manager (its own map), on an ordinary clock.
    let m2 = manager(&fake, Arc::new(SystemClock::new()));
    let _ = m2.try_decide(P, b"existing");

    // A decision on m1 whose thread stalls inside key "a"'s shard read.
    let stall = {
        let m1 = m1.clone();
        std::thread::Builder::new()
            .name("stall".into())
            .spawn(move || {
                let _ = m1.try_decide(P, b"a");
            })
            .unwrap()
    };
    while !clock.sprung.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    // New keys on m1: one of them lands in "a"'s shard; its insert waits
    // for the stalled reader (expected of any rwlock).
    let w1 = {
        let m1 = m1.clone();
        std::thread::spawn(move || {
            let (cpu0, t0) = (thread_cpu_ticks(), Instant::now());
            for i in 0..1000 {
                let _ = m1.try_decide(P, format!("w1-{i}").as_bytes());
            }
            let (cpu, wall) = (thread_cpu_ticks() - cpu0, t0.elapsed());
            eprintln!(
                "m1 inserts: {wall:?} wall, {} ms CPU (spinning writer)",
                cpu * 10
            );
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    // A new key on the unrelated map m2 (an insert: a write of m2's shard).
    let w2 = {
        let m2 = m2.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            let _ = m2.try_decide(P, b"new-key-on-m2");
            t.elapsed()
        })
    };
    // A new thread's first decision on an existing key of m2 (a read).
    let r3 = {
        let m2 = m2.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            let _ = m2.try_decide(P, b"existing");
            t.elapsed()
        })
    };
    let (w2, r3) = tokio::task::spawn_blocking(move || {
        let w2 = w2.join().unwrap();
        let r3 = r3.join().unwrap();
        w1.join().unwrap();
        stall.join().unwrap();
        (w2, r3)
    })
    .await
    .unwrap();
    eprintln!("insert into m2 took {w2:?}; a new thread's first read of m2 took {r3:?}");
    assert!(
        w2 < Duration::from_millis(500) && r3 < Duration::from_millis(500),
        "a reader stalled in one shard of m1 held up m2: insert {w2:?}, first read {r3:?}"
    );
    m1.shutdown().await;
    m2.shutdown().await;
}
