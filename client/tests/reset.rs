//! `remaining` and `reset` from the ledger's deficit packed in the hot
//! record (a 15-bit-mantissa float, rounded up): exact near a full bucket,
//! and a `Limited` decision's `reset` counts down (found by a break-it
//! review: packing the balance made `t=4` read `t=101`).

mod support;

use std::sync::Arc;
use std::time::Duration;

use leasehold_client::{LeaseConfig, LeaseManager, ManualClock, Outcome, PolicyId};
use support::managers::{api_policy, manager_of};
use support::FakeLedger;

const P: PolicyId = PolicyId::FIRST;
const HOUR: Duration = Duration::from_secs(3600);

/// A bucket of 1 000 000 at 1000 an hour. The ledger says 999 995 after a
/// lease of 5, and the gateway holds 4 after the first decision: 999 999
/// remain and one token (3.6 s) is missing. The hot record keeps the
/// ledger's deficit (5, exact), not its balance (which 15 significant bits
/// would round to 999 968, making `reset` 28 tokens' worth: t=101 for t=4).
#[tokio::test]
async fn reset_of_a_nearly_full_big_bucket_is_exact() {
    let fake = FakeLedger::start().await;
    let clock = Arc::new(ManualClock::new());
    let policy = api_policy(1000, HOUR, 1_000_000);
    let m = manager_of(
        fake.addr,
        policy,
        LeaseConfig::default(),
        Duration::from_secs(2),
        clock,
    );
    let d = m.decide(P, b"k").await;
    assert_eq!(d.outcome, Outcome::Allowed);
    assert_eq!(fake.tokens("t:api:k"), Some(999_995));
    assert_eq!(m.local_tokens(P, b"k"), 4);
    assert_eq!(
        (d.remaining, d.reset),
        (999_999, Duration::from_millis(3600)),
        "header {}",
        d.ratelimit_header("api")
    );
    m.shutdown().await;
}

/// A Limited decision's `reset` counts down from the ledger's reading (that
/// path reads the clock), as `retry_after` does: 59 minutes into a one-hour
/// block, both have moved by 59 minutes.
#[tokio::test]
async fn reset_of_a_limited_decision_counts_down() {
    let fake = FakeLedger::start().await;
    let clock = Arc::new(ManualClock::new());
    let config = LeaseConfig {
        idle_after: Duration::from_secs(1_000_000),
        evict_after: Duration::from_secs(1_000_000),
        ..LeaseConfig::default()
    };
    let m: LeaseManager = manager_of(
        fake.addr,
        api_policy(1, HOUR, 5),
        config,
        Duration::from_secs(2),
        clock.clone(),
    );
    for _ in 0..5 {
        assert!(m.decide(P, b"k").await.allowed);
    }
    tokio::time::sleep(Duration::from_millis(100)).await; // the denied renewal
    let d = m.try_decide(P, b"k").unwrap();
    assert_eq!(d.outcome, Outcome::Limited);
    clock.advance(Duration::from_secs(3540));
    let d2 = m.try_decide(P, b"k").unwrap();
    assert_eq!(d2.outcome, Outcome::Limited);
    assert!(d2.retry_after.unwrap() <= Duration::from_secs(60));
    assert!(
        d2.reset <= d.reset - Duration::from_secs(3540),
        "reset did not move: {:?} then {:?}",
        d.reset,
        d2.reset
    );
    m.shutdown().await;
}
