//! Hot-slot reuse under an aggressive sweeper: many keys (the empty key, keys
//! of exactly 15 and 16 bytes, long keys sharing their first 15 bytes) share
//! shards, so evicted slots are reused by other keys while lease tasks,
//! waiting decisions and returns still hold the old keys' cold parts. Every
//! token the ledger leased must be admitted or returned, per key.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_client::{
    Client, ClientConfig, FailureMode, LeaseConfig, LeaseManager, ManualClock, Mode, Outcome,
    Policy, PolicyId, PolicySet,
};
use support::conservation::{evict_always, join_all, leased, manager, policy, Sweepers};
use support::FakeLedger;

const P: PolicyId = PolicyId::FIRST;
fn keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = vec![
        vec![],
        vec![0],
        vec![0; 15],
        vec![0; 16],
        b"abcdefghijklmno".to_vec(),  // 15
        b"abcdefghijklmnop".to_vec(), // 16
        b"abcdefghijklmnoq".to_vec(), // 16, same first 15
    ];
    for i in 0..24 {
        keys.push(format!("prefix-{i:012}").into_bytes());
    }
    for i in 0..96 {
        keys.push(format!("k{i}").into_bytes());
    }
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reused_slots_keep_every_key_s_tokens_apart() {
    let fake = FakeLedger::start().await;
    let (m, clock) = manager(&fake, evict_always()).await;
    let keys = Arc::new(keys());
    let sweepers = Sweepers::spawn(&m, 2);
    let admitted: Arc<Vec<AtomicU64>> = Arc::new(keys.iter().map(|_| AtomicU64::new(0)).collect());
    let mut tasks = Vec::new();
    for t in 0..24u64 {
        let (m, keys, admitted, clock) = (m.clone(), keys.clone(), admitted.clone(), clock.clone());
        tasks.push(tokio::spawn(async move {
            let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            for i in 0..1500u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = (x % keys.len() as u64) as usize;
                let d = if i % 3 == 0 {
                    match m.try_decide(P, &keys[k]) {
                        Some(d) => d,
                        None => continue,
                    }
                } else {
                    m.decide(P, &keys[k]).await
                };
                match d.outcome {
                    Outcome::Allowed => {
                        admitted[k].fetch_add(1, Ordering::Relaxed);
                    }
                    other => panic!("the ledger has plenty: {other:?}"),
                }
                if i % 97 == 0 {
                    // Moves rate samples along (and past the 20 ms minimum).
                    clock.advance(Duration::from_millis(7));
                }
                if i % 16 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    join_all(tasks).await;
    sweepers.stop().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    m.shutdown().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut bad = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let mut ledger_key = b"t:api:".to_vec();
        ledger_key.extend_from_slice(k);
        let ledger_key = String::from_utf8(ledger_key).unwrap();
        let leased = leased(&fake, &ledger_key);
        let admitted = admitted[i].load(Ordering::Relaxed);
        if leased != admitted {
            bad.push((ledger_key, leased, admitted, m.local_tokens(P, k)));
        }
    }
    assert!(bad.is_empty(), "(key, leased, admitted, held): {bad:?}");
}

/// A ledger whose `reset_after` (or `retry_after`) is beyond what a `u64` of
/// microseconds holds must not panic the lease task: a panicked lease task
/// never releases the key's lease slot, so the key could never lease again.
#[tokio::test]
async fn a_huge_reset_after_from_the_ledger_does_not_wedge_the_key() {
    let fake = FakeLedger::start().await;
    let clock = Arc::new(ManualClock::new());
    clock.advance(Duration::from_secs(1));
    let mut cc = ClientConfig::new(fake.addr);
    cc.lease_deadline = Duration::from_millis(500);
    // 1 token a day, a bucket of 10^13: after a lease of 10^12 the fake says
    // the bucket is full again in more than i64::MAX ms (saturated).
    let p = Policy {
        name: "api".into(),
        requests_per_unit: 1,
        unit: Duration::from_secs(86_400),
        burst: 10_000_000_000_000,
        failure_mode: FailureMode::FailClosed,
        mode: Mode::Enforce,
        fail_open_requests_per_unit: 2,
    };
    let config = LeaseConfig {
        min_lease: 1_000_000_000_000,
        max_lease: 1_000_000_000_000,
        ..LeaseConfig::default()
    };
    let m = LeaseManager::new(
        Client::new(cc),
        &PolicySet::from_policies("t", vec![p]),
        config,
        clock.clone(),
    );
    let d = tokio::time::timeout(Duration::from_secs(5), m.decide(P, b"k"))
        .await
        .expect("bounded");
    assert_eq!(d.outcome, Outcome::Allowed, "{d:?}");
    assert_eq!(m.local_tokens(P, b"k"), 1_000_000_000_000 - 1);
    m.shutdown().await;
}

/// A blocked key (or one deciding without the ledger) makes decisions but no
/// leases, so the sweeper sees it busy and never samples it: more than 2^22
/// decisions before the next sample wrap the hot record's decision count, and
/// the rate estimate comes out near zero instead of the real rate.
#[tokio::test]
async fn a_blocked_key_hammered_past_the_decision_count_wrap_keeps_its_rate() {
    let fake = FakeLedger::start().await;
    let clock = Arc::new(ManualClock::new());
    let mut cc = ClientConfig::new(fake.addr);
    cc.lease_deadline = Duration::from_millis(500);
    let p = Policy {
        burst: 5,
        ..policy()
    };
    let m = LeaseManager::new(
        Client::new(cc),
        &PolicySet::from_policies("t", vec![p]),
        LeaseConfig::default(),
        clock.clone(),
    );
    // Lease the whole bucket (5), spend it; the renewal is denied: blocked
    // for about an hour.
    for _ in 0..5 {
        assert!(m.decide(P, b"k").await.allowed);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(m.try_decide(P, b"k").unwrap().outcome, Outcome::Limited);
    // 2^22 + 5000 decisions over 4.2 s of the manager's clock: ~1M/s.
    let n: u64 = (1 << 22) + 5000;
    for i in 0..n {
        if i % 1000 == 0 {
            clock.advance(Duration::from_millis(1));
        }
        let d = m.try_decide(P, b"k").unwrap();
        assert_eq!(d.outcome, Outcome::Limited);
    }
    // Quiet now: the next sweep samples the key.
    clock.advance(Duration::from_millis(100));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let qps = m.observed_qps(P, b"k");
    assert!(qps > 500_000.0, "observed {qps}/s, ~1M/s were decided");
    m.shutdown().await;
}
