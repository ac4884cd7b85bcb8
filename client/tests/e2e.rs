//! End to end against the real server, in process on 127.0.0.1 (2 threads).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_client::{
    BucketParams, Client, ClientConfig, FailureMode, LeaseConfig, LeaseManager, Mode, Outcome,
    Policy, PolicyId, PolicySet, SystemClock,
};
use leasehold_server::config::Config;
use leasehold_server::ServerHandle;

const P: PolicyId = PolicyId::FIRST;

fn server(port: u16) -> std::io::Result<ServerHandle> {
    let mut c = Config::default();
    c.net.bind = "127.0.0.1".into();
    c.net.port = port;
    c.shards.threads = 2;
    c.persistence.save = String::new();
    c.persistence.dir = leasehold_testkit::scratch_dir().display().to_string();
    leasehold_server::start(c, Arc::new(leasehold_server::clock::SystemClock::new()))
}

fn client(handle: &ServerHandle) -> Client {
    let mut config = ClientConfig::new(handle.addr);
    config.lease_deadline = Duration::from_millis(50); // debug build, shared 2-core machine
    config.breaker.cool_down = Duration::from_millis(500);
    Client::new(config)
}

fn manager(client: Client, rate: u64, unit: Duration, burst: u64, fm: FailureMode) -> LeaseManager {
    let p = Policy {
        name: "api".into(),
        requests_per_unit: rate,
        unit,
        burst,
        failure_mode: fm,
        mode: Mode::Enforce,
        fail_open_requests_per_unit: rate * 2,
    };
    let set = PolicySet::from_policies("e2e", vec![p]);
    LeaseManager::new(
        client,
        &set,
        LeaseConfig::default(),
        Arc::new(SystemClock::new()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_calls_against_the_real_server() {
    let srv = server(0).unwrap();
    let c = client(&srv);
    let p = BucketParams {
        capacity: 10,
        rate: 1,
        period_ms: 3_600_000,
    };
    let l = c.token_lease(b"tb", p, 8, 1).await.unwrap();
    assert_eq!(
        (l.granted, l.remaining, l.retry_after),
        (8, 2, Some(Duration::ZERO))
    );
    let l = c.token_lease(b"tb", p, 8, 1).await.unwrap();
    assert_eq!((l.granted, l.remaining), (2, 0));
    let denied = c.token_lease(b"tb", p, 8, 1).await.unwrap();
    assert_eq!(denied.granted, 0);
    let wait = denied.retry_after.unwrap();
    assert!(
        wait > Duration::from_secs(3590) && wait <= Duration::from_secs(3600),
        "{wait:?}"
    );
    assert_eq!(
        c.token_lease(b"tb", p, 20, 11).await.unwrap().retry_after,
        None
    );
    assert_eq!(c.token_return(b"tb", p, 4).await.unwrap(), 4);
    let w = c.sliding_window(b"sw", 2, 60_000, 1).await.unwrap();
    assert_eq!((w.admitted, w.count, w.remaining), (1, 1, 1));
    let t = c.cl_throttle(b"ct", 4, 5, 60, 1).await.unwrap();
    assert_eq!(
        (t.limited, t.limit, t.remaining, t.retry_after_s),
        (false, 5, 4, None)
    );
    c.set(b"s", b"abc").await.unwrap();
    assert!(c.incr(b"s").await.unwrap_err().server_kind().is_some());
    assert_eq!(c.get(b"s").await.unwrap().as_deref(), Some(&b"abc"[..]));
    assert_eq!(c.del(b"s").await.unwrap(), 1);
    srv.shutdown();
}

async fn ledger_tokens(c: &Client, key: &[u8], p: BucketParams) -> u64 {
    c.token_lease(key, p, 0, 0)
        .await
        .map(|l| l.remaining)
        .unwrap_or(u64::MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_renew_return_and_blocked_key_against_the_real_server() {
    let srv = server(0).unwrap();
    let c = client(&srv);
    let m = manager(
        c.clone(),
        1,
        Duration::from_secs(3600),
        8,
        FailureMode::FailOpen,
    );
    let p = BucketParams {
        capacity: 8,
        rate: 1,
        period_ms: 3_600_000,
    };
    assert!(m.decide(P, b"k").await.allowed);
    assert_eq!(
        ledger_tokens(&c, b"e2e:api:k", p).await,
        3,
        "leased min_lease 5 of 8"
    );
    for _ in 0..3 {
        assert!(m.decide(P, b"k").await.allowed);
    }
    tokio::time::sleep(Duration::from_millis(100)).await; // the renewal
    assert_eq!(
        ledger_tokens(&c, b"e2e:api:k", p).await,
        0,
        "renewal took the last 3"
    );
    assert_eq!(m.local_tokens(P, b"k"), 4);
    for _ in 0..4 {
        assert!(m.decide(P, b"k").await.allowed);
    }
    let d = m.decide(P, b"k").await;
    assert_eq!((d.allowed, d.outcome), (false, Outcome::Limited));
    assert_eq!(d.retry_after_header().as_deref(), Some("3600"));
    // Blocked: decided locally, fast.
    let t = Instant::now();
    for _ in 0..1000 {
        assert_eq!(m.decide(P, b"k").await.outcome, Outcome::Limited);
    }
    assert!(
        t.elapsed() < Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    // A second key: lease then give back on shutdown.
    assert!(m.decide(P, b"other").await.allowed);
    m.shutdown().await;
    assert_eq!(ledger_tokens(&c, b"e2e:api:other", p).await, 7);
    srv.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_killed_under_load_then_back() {
    let srv = server(0).unwrap();
    let port = srv.addr.port();
    let c = client(&srv);
    let open = manager(
        c.clone(),
        1000,
        Duration::from_secs(1),
        10,
        FailureMode::FailOpen,
    );
    for _ in 0..5 {
        assert!(open.decide(P, b"k").await.allowed);
    }
    srv.shutdown();
    let t = Instant::now();
    let (mut bypassed, mut slowest) = (0, Duration::ZERO);
    while t.elapsed() < Duration::from_millis(300) {
        let s = Instant::now();
        let d = open.decide(P, b"k").await;
        slowest = slowest.max(s.elapsed());
        assert_ne!(d.outcome, Outcome::Limited, "a dead ledger is not a limit");
        bypassed += u64::from(matches!(d.outcome, Outcome::Bypassed(_)));
    }
    // Deadline 50 ms + 1 ms; generous slack for a loaded machine.
    assert!(slowest < Duration::from_millis(150), "{slowest:?}");
    // Static cap: burst 2 x 10 plus 2000/s over at most 0.3 s.
    assert!(bypassed > 0 && bypassed <= 20 + 600 + 10, "{bypassed}");
    // Back on the same port: leased decisions again within one cool-down.
    let srv = (0..50)
        .find_map(|_| {
            server(port).ok().or_else(|| {
                std::thread::sleep(Duration::from_millis(20));
                None
            })
        })
        .expect("restart on the same port");
    let back = Instant::now();
    loop {
        let d = open.decide(P, b"k").await;
        if d.outcome == Outcome::Allowed
            && c.breaker_state() == leasehold_client::BreakerState::Closed
        {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_millis(900),
            "still bypassing: {d:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    srv.shutdown();
}

/// Eight gateways share one key: limit 200/s, burst 200, for 3 s at a demand
/// of several thousand per second. Expected admitted L = burst + rate x T.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accuracy_eight_managers_share_one_key() {
    let srv = server(0).unwrap();
    let (rate, burst, secs) = (200u64, 200u64, 3u64);
    let admitted = Arc::new(AtomicU64::new(0));
    let demanded = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    let mut managers = Vec::new();
    for _ in 0..8 {
        let m = manager(
            client(&srv),
            rate,
            Duration::from_secs(1),
            burst,
            FailureMode::FailClosed,
        );
        managers.push(m.clone());
        let (admitted, demanded) = (admitted.clone(), demanded.clone());
        tasks.push(tokio::spawn(async move {
            while start.elapsed() < Duration::from_secs(secs) {
                for _ in 0..10 {
                    demanded.fetch_add(1, Ordering::Relaxed);
                    admitted.fetch_add(
                        u64::from(m.decide(P, b"shared").await.allowed),
                        Ordering::Relaxed,
                    );
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }));
    }
    // Admitted so far against allowed so far (burst + rate x t), every
    // 100 ms: the benchmark page plots these lines.
    let sampler = {
        let admitted = admitted.clone();
        tokio::spawn(async move {
            let mut samples = Vec::new();
            while start.elapsed() < Duration::from_secs(secs) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let t = start.elapsed().as_secs_f64();
                samples.push((t, admitted.load(Ordering::Relaxed)));
            }
            samples
        })
    };
    for t in tasks {
        t.await.unwrap();
    }
    for (t, n) in sampler.await.unwrap() {
        let allowed = burst as f64 + rate as f64 * t;
        eprintln!(
            "accuracy-sample: t_ms {:.0} admitted {n} allowed {allowed:.0}",
            t * 1000.0
        );
    }
    let elapsed = start.elapsed().as_secs_f64();
    let expected = burst as f64 + rate as f64 * elapsed;
    let admitted = admitted.load(Ordering::Relaxed) as f64;
    let demanded = demanded.load(Ordering::Relaxed);
    let held: u64 = managers.iter().map(|m| m.local_tokens(P, b"shared")).sum();
    eprintln!(
        "accuracy: demanded {demanded} in {elapsed:.2}s, admitted {admitted}, expected {expected:.0}, \
         error {:+.1}%, tokens still held locally {held}",
        (admitted - expected) / expected * 100.0
    );
    assert!(
        demanded as f64 > 4.0 * expected,
        "demand must be well above the limit"
    );
    assert!(admitted <= expected + 8.0 * 500.0, "drift bound");
    assert!(
        admitted >= expected * 0.8,
        "under-admission: {admitted} of {expected}"
    );
    srv.shutdown();
}
