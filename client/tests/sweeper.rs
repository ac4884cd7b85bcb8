//! The sweeper against concurrent decisions: every token the ledger leased is
//! admitted, returned, or still held locally (conservation), with eviction
//! forced on every sweep and at shutdown.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_client::{LeaseConfig, Outcome, PolicyId};
use support::conservation::{evict_always, join_all, leased, manager, Sweepers};
use support::FakeLedger;

const P: PolicyId = PolicyId::FIRST;
async fn settle() {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eviction_racing_decisions_loses_no_tokens() {
    let fake = FakeLedger::start().await;
    // Every sweep may evict every key that holds nothing (and returns what an
    // idle key holds): the manual clock never moves, so every key is "idle".
    let (m, _clock) = manager(&fake, evict_always()).await;
    let keys: Vec<Vec<u8>> = vec![b"a".to_vec(), b"b".to_vec(), vec![b'L'; 60], vec![]];
    let sweepers = Sweepers::spawn(&m, 1);
    let admitted: Arc<Vec<AtomicU64>> = Arc::new(keys.iter().map(|_| AtomicU64::new(0)).collect());
    let mut tasks = Vec::new();
    for t in 0..16usize {
        let (m, keys, admitted) = (m.clone(), keys.clone(), admitted.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..1000usize {
                let k = (t + i) % keys.len();
                let d = m.decide(P, &keys[k]).await;
                match d.outcome {
                    Outcome::Allowed => {
                        admitted[k].fetch_add(1, Ordering::Relaxed);
                    }
                    other => panic!("the ledger has plenty: {other:?}"),
                }
                if i % 64 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    join_all(tasks).await;
    sweepers.stop().await;
    settle().await;
    // Every lease and return has landed; give back what is held locally.
    let held: Vec<u64> = keys.iter().map(|k| m.local_tokens(P, k)).collect();
    m.shutdown().await;
    settle().await;
    for (i, k) in keys.iter().enumerate() {
        let ledger_key = format!("t:api:{}", String::from_utf8_lossy(k));
        let admitted = admitted[i].load(Ordering::Relaxed);
        assert_eq!(
            leased(&fake, &ledger_key),
            admitted,
            "key {ledger_key:?}: the ledger is missing tokens that were neither admitted nor \
             returned (held locally before shutdown: {})",
            held[i]
        );
    }
}

#[tokio::test]
async fn shutdown_returns_the_tokens_of_a_renewal_in_flight() {
    let fake = FakeLedger::start().await;
    let (m, _clock) = manager(&fake, LeaseConfig::default()).await;
    // First lease: 5 tokens (min_lease); one spent.
    assert!(m.decide(P, b"k").await.allowed);
    assert_eq!(m.local_tokens(P, b"k"), 4);
    // The renewal at the watermark (1 token left) is slow to come back.
    fake.delay_key("t:api:k", Duration::from_millis(200));
    for _ in 0..3 {
        assert_eq!(m.try_decide(P, b"k").unwrap().outcome, Outcome::Allowed);
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(fake.calls("TOKENLEASE"), 2, "the renewal is in flight");
    tokio::time::timeout(Duration::from_secs(5), m.shutdown())
        .await
        .expect("shutdown is bounded");
    // Whatever the renewal brought is back in the ledger once shutdown returns.
    assert_eq!(leased(&fake, "t:api:k"), 4, "4 admitted, the rest returned");
    assert_eq!(m.local_tokens(P, b"k"), 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        leased(&fake, "t:api:k"),
        4,
        "nothing arrives after shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_the_sweeper_even_in_the_middle_of_a_sweep() {
    let fake = FakeLedger::start().await;
    // The sweeper sweeps back to back (and returns any idle key's tokens),
    // so shutdown usually finds it running a sweep rather than waiting.
    let config = LeaseConfig {
        idle_after: Duration::ZERO,
        sweep_interval: Duration::ZERO,
        ..LeaseConfig::default()
    };
    for round in 0..20 {
        let (m, _clock) = manager(&fake, config.clone()).await;
        let key = format!("k{round}");
        tokio::time::sleep(Duration::from_millis(2)).await;
        m.shutdown().await;
        assert!(m.decide(P, key.as_bytes()).await.allowed);
        assert_eq!(m.local_tokens(P, key.as_bytes()), 4);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            m.local_tokens(P, key.as_bytes()),
            4,
            "round {round}: a sweeper still runs after shutdown (and keeps the manager alive)"
        );
    }
}
