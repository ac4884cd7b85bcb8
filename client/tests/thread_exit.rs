//! Decisions made while an OS thread exits (from a
//! thread-local destructor, before and after the map's own thread-local
//! reader slot is destroyed), racing a sweeper that evicts (writes) on every
//! sweep and new threads that take over the freed reader slots.

mod support;

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_client::{LeaseManager, Outcome, PolicyId};
use support::conservation::{evict_always, leased, manager, Sweepers};
use support::FakeLedger;

const P: PolicyId = PolicyId::FIRST;

struct Shared {
    m: LeaseManager,
    keys: Vec<Vec<u8>>,
    admitted: Vec<AtomicU64>,
}

impl Shared {
    fn decide_some(&self, seed: u64, n: usize) {
        let mut x = seed | 1;
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = (x % self.keys.len() as u64) as usize;
            if let Some(d) = self.m.try_decide(P, &self.keys[k]) {
                match d.outcome {
                    Outcome::Allowed => {
                        self.admitted[k].fetch_add(1, Ordering::Relaxed);
                    }
                    Outcome::FailedClosed(_) => {}
                    other => panic!("{other:?}"),
                }
            }
        }
    }
}

/// Decides from its destructor, which runs during thread exit.
struct AtExit(Option<(Arc<Shared>, u64)>);

impl Drop for AtExit {
    fn drop(&mut self) {
        if let Some((s, seed)) = self.0.take() {
            s.decide_some(seed, 200);
        }
    }
}

thread_local! {
    static AT_EXIT: RefCell<AtExit> = const { RefCell::new(AtExit(None)) };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_from_thread_local_destructors_during_thread_exit() {
    let fake = FakeLedger::start().await;
    let (m, _clock) = manager(&fake, evict_always()).await;
    let keys: Vec<Vec<u8>> = (0..200).map(|i| format!("x{i}").into_bytes()).collect();
    let shared = Arc::new(Shared {
        m: m.clone(),
        admitted: keys.iter().map(|_| AtomicU64::new(0)).collect(),
        keys,
    });
    let sweepers = Sweepers::spawn(&m, 1);
    let start = Instant::now();
    let mut round = 0u64;
    while start.elapsed() < Duration::from_secs(3) {
        let threads: Vec<_> = (0..6u64)
            .map(|t| {
                let s = shared.clone();
                let seed = (round * 16 + t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                std::thread::spawn(move || {
                    if t % 2 == 0 {
                        // The destructor's thread-local first: it is
                        // destroyed after the map's reader slot.
                        AT_EXIT.with(|a| a.borrow_mut().0 = Some((s.clone(), seed)));
                        s.decide_some(seed ^ 0xabc, 300);
                    } else {
                        // The reader slot first: it outlives the destructor.
                        s.decide_some(seed ^ 0xabc, 300);
                        AT_EXIT.with(|a| a.borrow_mut().0 = Some((s.clone(), seed)));
                    }
                })
            })
            .collect();
        let ok = tokio::time::timeout(
            Duration::from_secs(20),
            tokio::task::spawn_blocking(move || threads.into_iter().all(|t| t.join().is_ok())),
        )
        .await
        .expect("exiting threads hung (deadlock?)")
        .unwrap();
        assert!(ok, "a thread panicked");
        round += 1;
    }
    sweepers.stop().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    m.shutdown().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut bad = Vec::new();
    let mut total = 0;
    for (i, k) in shared.keys.iter().enumerate() {
        let lk = format!("t:api:{}", String::from_utf8_lossy(k));
        let (l, a) = (
            leased(&fake, &lk),
            shared.admitted[i].load(Ordering::Relaxed),
        );
        total += a;
        if l != a {
            bad.push((lk, l, a));
        }
    }
    eprintln!("{round} rounds, {total} admitted");
    assert!(total > 100);
    assert!(bad.is_empty(), "(key, leased, admitted): {bad:?}");
}
