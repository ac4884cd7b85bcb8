//! The lease manager against the fake ledger, with a manual clock for the
//! manager (rates, idleness, blocking) and real time for the network.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_client::{
    BypassReason, Client, ClientConfig, FailureMode, LeaseConfig, LeaseManager, ManualClock, Mode,
    Outcome, Policy, PolicyId, PolicySet,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::FakeLedger;

/// The only policy of every set built here.
const P: PolicyId = PolicyId::FIRST;

fn policy(name: &str, burst: u64, failure_mode: FailureMode, mode: Mode) -> Policy {
    Policy {
        name: name.into(),
        requests_per_unit: 1,
        unit: Duration::from_secs(3600),
        burst,
        failure_mode,
        mode,
        fail_open_requests_per_unit: 2,
    }
}

struct Setup {
    fake: Arc<FakeLedger>,
    clock: Arc<ManualClock>,
    manager: LeaseManager,
    snapshotter: Snapshotter,
}

async fn setup(p: Policy) -> Setup {
    let fake = FakeLedger::start().await;
    let clock = Arc::new(ManualClock::new());
    let mut config = ClientConfig::new(fake.addr);
    // Generous for a loaded 2-core CI machine; the logic is the same at 5 ms.
    config.lease_deadline = Duration::from_millis(20);
    config.breaker.cool_down = Duration::from_millis(500);
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let manager = metrics::with_local_recorder(&recorder, || {
        let client = Client::new(config);
        LeaseManager::new(
            client,
            &PolicySet::from_policies("t", vec![p]),
            LeaseConfig::default(),
            clock.clone(),
        )
    });
    Setup {
        fake,
        clock,
        manager,
        snapshotter,
    }
}

type Counters = Vec<(String, Vec<(String, String)>, u64)>;

/// Reads (and resets: the debugging recorder drains on snapshot) every counter.
fn counters(s: &Snapshotter) -> Counters {
    s.snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(k, _, _, v)| match v {
            DebugValue::Counter(c) => {
                let labels = k
                    .key()
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()));
                Some((k.key().name().to_owned(), labels.collect(), c))
            }
            _ => None,
        })
        .collect()
}

fn sum(c: &Counters, name: &str, label: (&str, &str)) -> u64 {
    c.iter()
        .filter(|(n, labels, _)| {
            n == name && labels.iter().any(|(k, v)| k == label.0 && v == label.1)
        })
        .map(|(_, _, v)| v)
        .sum()
}

fn counter(s: &Snapshotter, name: &str, label: (&str, &str)) -> u64 {
    sum(&counters(s), name, label)
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(60)).await;
}

#[tokio::test]
async fn lease_renew_and_return_on_idle() {
    let s = setup(policy("api", 1000, FailureMode::FailOpen, Mode::Enforce)).await;
    let d = s.manager.decide(P, b"k").await;
    assert_eq!((d.allowed, d.outcome), (true, Outcome::Allowed));
    assert_eq!(s.fake.calls("TOKENLEASE"), 1);
    assert_eq!(s.manager.local_tokens(P, b"k"), 4, "min_lease 5, one spent");
    assert_eq!(s.fake.tokens("t:api:k"), Some(995));
    // remaining: the local tokens plus the ledger's balance; reset: the time
    // the ledger needs to refill the rest of the burst at 1 token an hour.
    assert_eq!((d.remaining, d.reset), (4 + 995, Duration::from_secs(3600)));
    assert_eq!(d.ratelimit_header("api"), r#""api";r=999;t=3600"#);
    // Down to the watermark (20% of 5 = 1 token): one background renewal.
    for left in (1..4).rev() {
        let d = s.manager.try_decide(P, b"k").unwrap();
        assert!(d.allowed);
        let missing = 1000 - (left + 995);
        assert_eq!(
            (d.remaining, d.reset),
            (left + 995, Duration::from_secs(3600 * missing))
        );
    }
    settle().await;
    assert_eq!(s.fake.calls("TOKENLEASE"), 2);
    assert_eq!(s.manager.local_tokens(P, b"k"), 6);
    assert_eq!(s.fake.tokens("t:api:k"), Some(990));
    let d = s.manager.try_decide(P, b"k").unwrap();
    assert_eq!(
        (d.remaining, d.reset),
        (5 + 990, Duration::from_secs(5 * 3600))
    );
    assert!(s.manager.try_decide(P, b"k").unwrap().allowed); // back to 4 local
                                                             // The sweeper sees the traffic, then the key idles past idle_after:
                                                             // the 4 unspent tokens go back.
    s.clock.advance(Duration::from_millis(100));
    s.manager.maintain();
    assert_eq!(s.fake.calls("TOKENRETURN"), 0);
    s.clock.advance(Duration::from_secs(3));
    s.manager.maintain();
    settle().await;
    assert_eq!(s.fake.calls("TOKENRETURN"), 1);
    assert_eq!(s.manager.local_tokens(P, b"k"), 0);
    assert_eq!(s.fake.tokens("t:api:k"), Some(994));
    assert_eq!(
        counter(
            &s.snapshotter,
            "rate_limit_decisions_total",
            ("outcome", "allowed")
        ),
        6
    );
    // Idle past evict_after (60 s) holding nothing: forgotten; a new request
    // for it starts afresh with a lease.
    assert_eq!(s.manager.tracked_keys(), 1);
    s.clock.advance(Duration::from_secs(60));
    s.manager.maintain();
    assert_eq!(s.manager.tracked_keys(), 0);
    assert!(s.manager.decide(P, b"k").await.allowed);
    assert_eq!(s.fake.calls("TOKENLEASE"), 3);
    assert_eq!(s.manager.tracked_keys(), 1);
}

/// A return the sweeper started (the key went idle) is still on the wire
/// when `shutdown` is called: `shutdown` waits for it.
#[tokio::test]
async fn shutdown_waits_for_returns_the_sweeper_started() {
    let s = setup(policy("api", 1000, FailureMode::FailOpen, Mode::Enforce)).await;
    assert!(s.manager.decide(P, b"k").await.allowed);
    assert_eq!(s.manager.local_tokens(P, b"k"), 4);
    // The ledger takes 15 ms to answer for this key (the deadline is 20 ms).
    s.fake.delay_key("t:api:k", Duration::from_millis(15));
    s.clock.advance(Duration::from_millis(100));
    s.manager.maintain();
    s.clock.advance(Duration::from_secs(3));
    s.manager.maintain(); // idle: the sweeper starts the return
    let started = std::time::Instant::now();
    s.manager.shutdown().await;
    let waited = started.elapsed();
    assert_eq!(s.manager.local_tokens(P, b"k"), 0);
    assert_eq!(s.fake.calls("TOKENRETURN"), 1);
    assert_eq!(s.fake.tokens("t:api:k"), Some(999));
    assert!(
        waited >= Duration::from_millis(10),
        "returned after {waited:?}"
    );
}

#[tokio::test]
async fn never_two_leases_in_flight_for_one_key() {
    let s = setup(policy("api", 1000, FailureMode::FailOpen, Mode::Enforce)).await;
    s.manager.decide(P, b"k").await;
    s.fake.delay_key("t:api:k", Duration::from_millis(15));
    for _ in 0..4 {
        s.manager.try_decide(P, b"k");
    }
    for _ in 0..50 {
        s.manager.try_decide(P, b"k");
    }
    settle().await;
    assert_eq!(s.fake.calls("TOKENLEASE"), 2);
}

#[tokio::test]
async fn shutdown_returns_unspent_tokens() {
    let s = setup(policy("api", 1000, FailureMode::FailOpen, Mode::Enforce)).await;
    s.manager.decide(P, b"a").await;
    s.manager.decide(P, b"b").await;
    s.manager.shutdown().await;
    assert_eq!(s.fake.calls("TOKENRETURN"), 2);
    assert_eq!(s.fake.tokens("t:api:a"), Some(999));
    assert_eq!(s.fake.tokens("t:api:b"), Some(999));
}

#[tokio::test]
async fn lease_size_follows_traffic_and_decays_to_min() {
    let s = setup(policy("api", 100_000, FailureMode::FailOpen, Mode::Enforce)).await;
    // 1000 decisions per second for 2 s of manager time.
    for i in 0..2000 {
        s.clock.advance(Duration::from_millis(1));
        assert!(s.manager.decide(P, b"k").await.allowed, "decision {i}");
        if i % 50 == 0 {
            s.manager.maintain();
        }
    }
    let qps = s.manager.observed_qps(P, b"k");
    assert!((800.0..=1200.0).contains(&qps), "{qps}");
    let b = s.manager.next_lease_size(P, b"k");
    assert!((200..=300).contains(&b), "B = qps x 0.25 s, got {b}");
    // Ten idle seconds: the average decays (time constant 1 s), B back to 5.
    for _ in 0..100 {
        s.clock.advance(Duration::from_millis(100));
        s.manager.maintain();
    }
    assert_eq!(s.manager.next_lease_size(P, b"k"), 5);
}

#[tokio::test]
async fn a_denial_blocks_the_key_locally_until_retry_after() {
    let s = setup(policy("api", 3, FailureMode::FailOpen, Mode::Enforce)).await;
    for _ in 0..3 {
        assert!(s.manager.decide(P, b"k").await.allowed);
    }
    let denied = s.manager.decide(P, b"k").await;
    assert_eq!((denied.allowed, denied.outcome), (false, Outcome::Limited));
    // One token refills in 3600 s at 1 per hour.
    assert_eq!(denied.retry_after_header().as_deref(), Some("3600"));
    let calls = s.fake.calls("TOKENLEASE");
    for _ in 0..100 {
        let d = s.manager.decide(P, b"k").await;
        assert_eq!(d.outcome, Outcome::Limited);
    }
    settle().await;
    assert_eq!(
        s.fake.calls("TOKENLEASE"),
        calls,
        "no ledger calls while blocked"
    );
    assert_eq!(
        counter(
            &s.snapshotter,
            "rate_limit_decisions_total",
            ("outcome", "limited")
        ),
        101
    );
    s.clock.advance(Duration::from_secs(3601));
    s.manager.decide(P, b"k").await;
    assert_eq!(
        s.fake.calls("TOKENLEASE"),
        calls + 1,
        "asks again once the block ends"
    );
}

#[tokio::test]
async fn a_denied_renewal_spends_the_local_tokens_before_the_block_applies() {
    // Burst 3: the first lease asks for 5 and is granted 3 (MIN 1).
    let s = setup(policy("api", 3, FailureMode::FailOpen, Mode::Enforce)).await;
    assert!(s.manager.decide(P, b"k").await.allowed);
    assert_eq!(s.manager.local_tokens(P, b"k"), 2);
    // One token left is the watermark (20% of 3, rounded up): the renewal goes
    // out in the background and the ledger, now empty, denies it.
    assert!(s.manager.try_decide(P, b"k").unwrap().allowed);
    settle().await;
    assert_eq!(s.fake.calls("TOKENLEASE"), 2);
    assert_eq!(s.manager.local_tokens(P, b"k"), 1);
    // The key is blocked but still holds a token the ledger granted: it is
    // spent (no 429 for quota the caller has), without a ledger call.
    let d = s.manager.try_decide(P, b"k").expect("a local decision");
    assert_eq!((d.allowed, d.outcome), (true, Outcome::Allowed));
    assert_eq!(s.manager.local_tokens(P, b"k"), 0);
    // Out of tokens: now the block applies, still with no ledger call.
    for _ in 0..10 {
        let d = s.manager.decide(P, b"k").await;
        assert_eq!((d.allowed, d.outcome), (false, Outcome::Limited));
        assert_eq!(d.retry_after_header().as_deref(), Some("3600"));
    }
    settle().await;
    assert_eq!(
        s.fake.calls("TOKENLEASE"),
        2,
        "no ledger calls while blocked"
    );
}

#[tokio::test]
async fn shadow_and_soft_modes_admit_over_quota() {
    for (mode, outcome) in [
        (Mode::Shadow, Outcome::ShadowLimited),
        (Mode::Soft, Outcome::SoftOverQuota),
    ] {
        let s = setup(policy("api", 2, FailureMode::FailOpen, mode)).await;
        s.manager.decide(P, b"k").await;
        s.manager.decide(P, b"k").await;
        let d = s.manager.decide(P, b"k").await;
        assert_eq!(
            (d.allowed, d.outcome, d.over_quota, d.retry_after),
            (true, outcome, true, None)
        );
    }
}

async fn hammer(m: &LeaseManager, keys: &[&[u8]], rounds: usize) -> (Vec<Outcome>, Duration) {
    let mut outcomes = Vec::new();
    let mut slowest = Duration::ZERO;
    for _ in 0..rounds {
        for k in keys {
            let t = Instant::now();
            outcomes.push(m.decide(P, k).await.outcome);
            slowest = slowest.max(t.elapsed());
        }
    }
    (outcomes, slowest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_hangs_under_load_fail_open_admits_its_static_cap() {
    let s = setup(policy("api", 10, FailureMode::FailOpen, Mode::Enforce)).await;
    let keys: [&[u8]; 4] = [b"a", b"b", b"c", b"d"];
    hammer(&s.manager, &keys, 1).await;
    let local: u64 = keys.iter().map(|k| s.manager.local_tokens(P, k)).sum();
    s.fake.set_mode(support::Mode::Hang);
    let (outcomes, slowest) = hammer(&s.manager, &keys, 50).await;
    assert!(
        slowest < Duration::from_millis(100),
        "a decision took {slowest:?}"
    );
    let allowed = outcomes.iter().filter(|o| **o == Outcome::Allowed).count() as u64;
    assert_eq!(allowed, local, "leased tokens are spent first");
    let bypassed = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Bypassed(_)))
        .count() as u64;
    // Frozen manager clock: the static bucket admits exactly its burst (2 x 10) per key.
    assert_eq!(bypassed, 4 * 20);
    assert!(
        outcomes.iter().all(|o| *o != Outcome::Limited),
        "a ledger failure is never a denial"
    );
    let snap = counters(&s.snapshotter);
    let by_reason =
        |r: BypassReason| sum(&snap, "rate_limit_bypassed_total", ("reason", r.label()));
    // Which decisions saw a timeout, a connection torn down by another call's
    // timeout, or an already open breaker depends on timing; all are counted.
    assert!(by_reason(BypassReason::CircuitOpen) >= 1);
    let total: u64 = BypassReason::ALL.iter().map(|r| by_reason(*r)).sum();
    assert_eq!(total, bypassed);

    // The ledger returns: within one cool-down (500 ms) decisions are leased again.
    s.fake.set_mode(support::Mode::Normal);
    let back = Instant::now();
    loop {
        s.clock.advance(Duration::from_secs(3600));
        if s.manager.decide(P, b"a").await.outcome == Outcome::Allowed {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_millis(700),
            "breaker still open"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_fails_fail_closed_denies_without_calling_it_a_limit() {
    let s = setup(policy("pay", 10, FailureMode::FailClosed, Mode::Enforce)).await;
    s.fake.set_mode(support::Mode::Drop);
    let (outcomes, slowest) = hammer(&s.manager, &[b"a", b"b"], 50).await;
    assert!(slowest < Duration::from_millis(100), "{slowest:?}");
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Outcome::FailedClosed(_))),
        "{outcomes:?}"
    );
    assert!(outcomes.contains(&Outcome::FailedClosed(BypassReason::LedgerError)));
    assert!(outcomes.contains(&Outcome::FailedClosed(BypassReason::CircuitOpen)));
    let snap = counters(&s.snapshotter);
    assert_eq!(
        sum(
            &snap,
            "rate_limit_decisions_total",
            ("outcome", "failed_closed")
        ),
        100
    );
    assert_eq!(
        sum(&snap, "rate_limit_decisions_total", ("outcome", "limited")),
        0
    );
}
