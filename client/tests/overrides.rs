//! Emergency overrides heard by an embedded lease manager: a real server in
//! process on 127.0.0.1, the override published with PUBLISH in the format
//! `leasehold-rls` hears, the manager following the channel
//! (`LeaseManager::follow_overrides`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_client::overrides::DEFAULT_CHANNEL;
use leasehold_client::{
    BypassReason, Client, ClientConfig, LeaseConfig, LeaseManager, Outcome, OverrideFollower,
    PolicyId, PolicySet, SystemClock,
};
use leasehold_server::ServerHandle;
use leasehold_testkit::{call, wait_for, Reply};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::managers::api_policy;

mod support;

const P: PolicyId = PolicyId::FIRST;

/// A real server, and a manager of domain `gw` with one policy `api` (5 an
/// hour, burst 5, fail closed, so a ledger failure could never pass for an
/// override) following the override channel, its metrics in the returned
/// snapshotter, and `key` spent down to the limit (exactly 5 admitted).
async fn following(key: &[u8]) -> (ServerHandle, LeaseManager, OverrideFollower, Snapshotter) {
    let srv = support::server::server(false);
    let mut config = ClientConfig::new(srv.addr);
    config.lease_deadline = Duration::from_millis(50); // debug build, shared 2-core machine
    let recorder = DebuggingRecorder::new();
    let m = metrics::with_local_recorder(&recorder, || {
        LeaseManager::new(
            Client::new(config),
            &PolicySet::from_policies("gw", vec![api_policy(5, Duration::from_secs(3600), 5)]),
            LeaseConfig::default(),
            Arc::new(SystemClock::new()),
        )
    });
    let follower = m.follow_overrides(DEFAULT_CHANNEL);
    let port = srv.addr.port();
    wait_for("the manager subscribes", Duration::from_secs(10), || {
        subscribers(port) == 1
    });
    assert_eq!(admitted(&m, key, 100).await, 5, "the limit itself");
    (srv, m, follower, recorder.snapshotter())
}

fn subscribers(port: u16) -> i64 {
    match call(port, &["PUBSUB", "NUMSUB", DEFAULT_CHANNEL]) {
        Some(Reply::Array(a)) => match a.as_slice() {
            [_, Reply::Int(n)] => *n,
            _ => -1,
        },
        _ => -1,
    }
}

fn publish(port: u16, message: &str) -> Option<Reply> {
    call(port, &["PUBLISH", DEFAULT_CHANNEL, message])
}

/// Decisions for `key` admitted before the first denial (at most `cap`);
/// the denial must be a `Limited`, not a ledger failure.
async fn admitted(m: &LeaseManager, key: &[u8], cap: u64) -> u64 {
    for n in 0..cap {
        let d = m.decide(P, key).await;
        if !d.allowed {
            assert_eq!(d.outcome, Outcome::Limited, "{d:?}");
            return n;
        }
    }
    cap
}

/// Decides `key` every 10 ms until `want(decision)` holds; the time taken.
async fn until(
    m: &LeaseManager,
    key: &[u8],
    limit: Duration,
    want: impl Fn(&leasehold_client::Decision) -> bool,
) -> Duration {
    let started = Instant::now();
    loop {
        if want(&m.decide(P, key).await) {
            return started.elapsed();
        }
        assert!(started.elapsed() < limit, "not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every counter as `(name, label=value, count)` (the debugging recorder
/// drains counters on each snapshot).
fn counters(s: &Snapshotter) -> Vec<(String, String, u64)> {
    let mut all = Vec::new();
    for (k, _, _, v) in s.snapshot().into_vec() {
        let DebugValue::Counter(c) = v else { continue };
        for l in k.key().labels() {
            all.push((
                k.key().name().to_owned(),
                format!("{}={}", l.key(), l.value()),
                c,
            ));
        }
    }
    all
}

fn count(all: &[(String, String, u64)], name: &str, label: &str) -> u64 {
    all.iter()
        .filter(|(n, l, _)| n == name && l == label)
        .map(|(_, _, c)| c)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_disable_admits_everything_within_3_s_and_expires_by_itself() {
    let (srv, m, follower, snap) = following(b"alice").await;
    let port = srv.addr.port();
    assert!(follower.is_running());

    let published = Instant::now();
    assert_eq!(publish(port, "gw api disable 2000"), Some(Reply::Int(1)));
    let took = until(&m, b"alice", Duration::from_secs(3), |d| d.allowed).await;
    assert!(took < Duration::from_secs(3), "override took {took:?}");
    for _ in 0..1000 {
        let d = m.decide(P, b"alice").await;
        assert_eq!(
            (d.allowed, d.outcome, d.remaining),
            (true, Outcome::Bypassed(BypassReason::Override), 5)
        );
    }
    assert!(m.override_of(P).is_some());

    // Back by itself after its 2 s: alice's own bucket, still empty.
    until(&m, b"alice", Duration::from_secs(5), |d| !d.allowed).await;
    let ended = published.elapsed();
    assert!(
        ended >= Duration::from_millis(1900),
        "ended early: {ended:?}"
    );
    assert_eq!(m.override_of(P), None);
    let d = m.decide(P, b"alice").await;
    assert_eq!((d.allowed, d.outcome), (false, Outcome::Limited));
    let all = counters(&snap);
    let bypassed = count(&all, "rate_limit_bypassed_total", "reason=override");
    assert!(bypassed >= 1001, "{bypassed}");
    assert_eq!(
        count(&all, "rate_limit_overrides_total", "event=applied"),
        1
    );
    assert_eq!(
        count(&all, "rate_limit_overrides_total", "event=expired"),
        1
    );

    // A malformed message is refused and counted; one for another domain or
    // policy changes nothing.
    publish(port, "gw api pause 5");
    publish(port, "edge api disable 60000");
    publish(port, "gw other disable 60000");
    wait_for("the refusal is counted", Duration::from_secs(3), || {
        count(
            &counters(&snap),
            "rate_limit_overrides_total",
            "event=refused",
        ) == 1
    });
    assert_eq!(admitted(&m, b"alice", 100).await, 0);
    assert_eq!(m.override_of(P), None);

    // A stopped follower hears nothing more.
    follower.stop();
    wait_for("the manager unsubscribes", Duration::from_secs(3), || {
        subscribers(port) == 0
    });
    srv.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_widen_grants_from_a_widened_bucket_until_cleared() {
    let (srv, m, _follower, _) = following(b"bob").await;
    let port = srv.addr.port();

    assert_eq!(publish(port, "gw api widen 10 60000"), Some(Reply::Int(1)));
    until(&m, b"bob", Duration::from_secs(3), |d| {
        d.allowed && d.limit == 50
    })
    .await;
    // The first admitted one above, then the rest of the widened bucket:
    // 10 x 5 in all, from the ledger key of the widened policy.
    assert_eq!(1 + admitted(&m, b"bob", 1000).await, 50);
    assert_eq!(
        call(port, &["EXISTS", "gw:api@x10:bob"]),
        Some(Reply::Int(1))
    );
    let d = m.decide(P, b"bob").await;
    assert_eq!(
        (d.allowed, d.limit, d.outcome),
        (false, 50, Outcome::Limited)
    );

    // Cleared: the policy's own (still empty) bucket again.
    publish(port, "gw api clear");
    until(&m, b"bob", Duration::from_secs(3), |d| d.limit == 5).await;
    assert_eq!(admitted(&m, b"bob", 100).await, 0);
    assert_eq!(m.policy(P).burst, 5);
    srv.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_override_lasts_from_its_renewal() {
    let (srv, m, _follower, _) = following(b"carol").await;
    let port = srv.addr.port();

    let first = Instant::now();
    publish(port, "gw api disable 1000");
    until(&m, b"carol", Duration::from_secs(3), |d| d.allowed).await;
    tokio::time::sleep(Duration::from_millis(600).saturating_sub(first.elapsed())).await;
    let renewed = Instant::now();
    publish(port, "gw api disable 1000");
    // Past the first one's end, inside the renewal's.
    tokio::time::sleep(Duration::from_millis(1300).saturating_sub(first.elapsed())).await;
    if renewed.elapsed() < Duration::from_millis(900) {
        let d = m.decide(P, b"carol").await;
        assert_eq!(d.outcome, Outcome::Bypassed(BypassReason::Override));
    }
    until(&m, b"carol", Duration::from_secs(4), |d| !d.allowed).await;
    assert!(
        renewed.elapsed() >= Duration::from_millis(950),
        "ended {:?} after the renewal",
        renewed.elapsed()
    );
    srv.shutdown();
}
