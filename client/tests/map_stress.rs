//! Stress tests (from a break-it review): the sharded map behind `ShardLock` under
//! plain OS threads (not tokio workers) that come and go (thread-local slots
//! released and reused), with enough keys per shard that the hashbrown
//! tables grow and shrink (hot records move) while other threads decide on
//! hot keys of the same shards. Conservation per key: every token the
//! ledger leased is admitted or returned.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_client::{LeaseManager, Outcome, PolicyId};
use support::conservation::{evict_always, leased, manager, Sweepers};
use support::FakeLedger;

const P: PolicyId = PolicyId::FIRST;

fn ledger_key(k: &[u8]) -> String {
    let mut v = b"t:api:".to_vec();
    v.extend_from_slice(k);
    String::from_utf8(v).unwrap()
}

fn keys(churn: usize) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = vec![
        vec![],
        vec![0],
        vec![0; 15],
        vec![0; 16],
        vec![0; 17],
        b"abcdefghijklmno".to_vec(),
        b"abcdefghijklmnop".to_vec(),
        b"abcdefghijklmnoq".to_vec(),
        b"abcdefghijklmnopq".to_vec(),
    ];
    // Long keys sharing their first 15 bytes (one tag).
    for i in 0..40 {
        keys.push(format!("sharedprefix15-{i}").into_bytes());
    }
    for i in 0..churn {
        keys.push(format!("c{i}").into_bytes());
    }
    keys
}

/// One OS thread's work: `try_decide` on keys from `pick` until `deadline`.
fn decide_loop(
    m: &LeaseManager,
    keys: &[Vec<u8>],
    admitted: &[AtomicU64],
    mut x: u64,
    n: usize,
    pick: impl Fn(u64) -> usize,
) {
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = pick(x);
        if let Some(d) = m.try_decide(P, &keys[k]) {
            match d.outcome {
                Outcome::Allowed => {
                    admitted[k].fetch_add(1, Ordering::Relaxed);
                }
                // An overloaded fake may open the breaker: not admitted, no token.
                Outcome::FailedClosed(_) => {}
                other => panic!("the ledger has plenty: {other:?} for {:?}", keys[k]),
            }
        }
    }
}

async fn check_conservation(
    fake: &FakeLedger,
    m: &LeaseManager,
    keys: &[Vec<u8>],
    admitted: &[AtomicU64],
) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    m.shutdown().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut bad = Vec::new();
    let (mut total_leased, mut total_admitted) = (0, 0);
    for (i, k) in keys.iter().enumerate() {
        let leased = leased(fake, &ledger_key(k));
        let admitted = admitted[i].load(Ordering::Relaxed);
        total_leased += leased;
        total_admitted += admitted;
        if leased != admitted {
            bad.push((ledger_key(k), leased, admitted, m.local_tokens(P, k)));
        }
    }
    eprintln!(
        "leased {total_leased}, admitted {total_admitted}, keys {}",
        keys.len()
    );
    assert!(
        total_admitted > 1000,
        "too little traffic: {total_admitted}"
    );
    assert!(
        bad.is_empty(),
        "leased {total_leased}, admitted {total_admitted}; (key, leased, admitted, held): {bad:?}"
    );
}

/// Waves of short-lived OS threads deciding on ~1000 keys (so each shard's
/// table grows past 16 records and shrinks back on eviction) while a
/// sweeper evicts every empty key on every sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waves_of_os_threads_over_growing_and_shrinking_shards() {
    let fake = FakeLedger::start().await;
    let (m, _clock) = manager(&fake, evict_always()).await;
    let keys = Arc::new(keys(1000));
    let admitted: Arc<Vec<AtomicU64>> = Arc::new(keys.iter().map(|_| AtomicU64::new(0)).collect());
    let sweepers = Sweepers::spawn(&m, 1);
    let start = Instant::now();
    let mut wave = 0u64;
    while start.elapsed() < Duration::from_secs(3) {
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (m, keys, admitted) = (m.clone(), keys.clone(), admitted.clone());
                let seed = (wave * 8 + t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                std::thread::spawn(move || {
                    let n = keys.len() as u64;
                    decide_loop(&m, &keys, &admitted, seed, 3000, |x| (x % n) as usize)
                })
            })
            .collect();
        let joined = tokio::time::timeout(
            Duration::from_secs(20),
            tokio::task::spawn_blocking(move || {
                threads
                    .into_iter()
                    .map(|t| t.join())
                    .filter(Result::is_err)
                    .count()
                    == 0
            }),
        )
        .await
        .expect("a wave of deciding threads hung (deadlock?)")
        .unwrap();
        assert!(joined, "a deciding thread panicked");
        wave += 1;
    }
    sweepers.stop().await;
    check_conservation(&fake, &m, &keys, &admitted).await;
}

/// A few hot keys decided by OS threads without pause while another thread
/// inserts thousands of one-shot keys (growing every shard's table, so hot
/// records move under rehash) and the sweeper evicts them again (shrinks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_keys_while_their_shards_rehash() {
    let fake = FakeLedger::start().await;
    let (m, _clock) = manager(&fake, evict_always()).await;
    let keys = Arc::new(keys(20_000));
    let hot = 49; // the fixed keys above
    let admitted: Arc<Vec<AtomicU64>> = Arc::new(keys.iter().map(|_| AtomicU64::new(0)).collect());
    let sweepers = Sweepers::spawn(&m, 1);
    let stop = Arc::new(AtomicBool::new(false));
    let deciders: Vec<_> = (0..3u64)
        .map(|t| {
            let (m, keys, admitted, stop) =
                (m.clone(), keys.clone(), admitted.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut seed = (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                while !stop.load(Ordering::Relaxed) {
                    decide_loop(&m, &keys, &admitted, seed, 500, |x| {
                        (x % hot as u64) as usize
                    });
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1) | 1;
                }
            })
        })
        .collect();
    let churner = {
        let (m, keys, admitted, stop) = (m.clone(), keys.clone(), admitted.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = hot;
            while !stop.load(Ordering::Relaxed) {
                // A new key: an insert (write lock, maybe a rehash).
                if let Some(d) = m.try_decide(P, &keys[i]) {
                    if d.outcome == Outcome::Allowed {
                        admitted[i].fetch_add(1, Ordering::Relaxed);
                    }
                }
                if i % 4 == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
                i += 1;
                if i == keys.len() {
                    i = hot;
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let joined = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::task::spawn_blocking(move || {
            deciders
                .into_iter()
                .chain([churner])
                .map(|t| t.join())
                .filter(Result::is_err)
                .count()
                == 0
        }),
    )
    .await
    .expect("deciding threads hung (deadlock?)")
    .unwrap();
    assert!(joined, "a deciding thread panicked");
    sweepers.stop().await;
    check_conservation(&fake, &m, &keys, &admitted).await;
}
