//! The breaker never sticks (real time: cool-down 1 s, probe 500 ms).

mod support;

use std::time::{Duration, Instant};

use leasehold_client::{BreakerState, Client, ClientConfig};
use support::{FakeLedger, Mode};

fn client(fake: &FakeLedger) -> Client {
    let mut config = ClientConfig::new(fake.addr);
    config.call_deadline = Duration::from_millis(50);
    config.breaker.failure_threshold = 3;
    config.breaker.cool_down = Duration::from_secs(1);
    config.breaker.probe_deadline = Duration::from_millis(500);
    Client::new(config)
}

async fn open_it(client: &Client) {
    for _ in 0..3 {
        assert!(client.ping().await.is_err());
    }
    assert_eq!(client.breaker_state(), BreakerState::Open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_never_sticks() {
    let fake = FakeLedger::start().await;
    let client = client(&fake);
    client.ping().await.unwrap();
    fake.set_mode(Mode::Fail);
    open_it(&client).await;

    // (a) ten concurrent calls while the ledger still fails: one probe.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let before = fake.calls("PING");
    let mut calls = Vec::new();
    for _ in 0..10 {
        let c = client.clone();
        calls.push(tokio::spawn(async move {
            let t = Instant::now();
            (c.ping().await, t.elapsed())
        }));
    }
    let mut fast_fails = 0;
    for call in calls {
        let (res, took) = call.await.unwrap();
        let err = res.unwrap_err();
        if err.is_circuit_open() {
            assert!(took < Duration::from_millis(50), "{took:?}");
            fast_fails += 1;
        }
    }
    assert_eq!(
        fake.calls("PING") - before,
        1,
        "exactly one call reaches the ledger"
    );
    assert_eq!(fast_fails, 9);
    assert_eq!(client.breaker_state(), BreakerState::Open);
    match client.ping().await.unwrap_err() {
        leasehold_client::Error::CircuitOpen { retry_in } => {
            assert!(
                retry_in > Duration::from_millis(900),
                "fresh cool-down, got {retry_in:?}"
            )
        }
        other => panic!("{other:?}"),
    }

    // (b) a probe that hangs counts as a failure at 500 ms.
    fake.set_mode(Mode::Hang);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let t = Instant::now();
    let err = client.ping().await.unwrap_err();
    let took = t.elapsed();
    assert!(err.is_timeout(), "{err:?}");
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(800),
        "{took:?}"
    );
    assert_eq!(client.breaker_state(), BreakerState::Open);
    assert!(client.ping().await.unwrap_err().is_circuit_open());

    // (c) after the next cool-down a new probe runs; it succeeds and closes.
    fake.set_mode(Mode::Normal);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let before = fake.calls("PING");
    client.ping().await.unwrap();
    assert_eq!(fake.calls("PING") - before, 1);
    assert_eq!(client.breaker_state(), BreakerState::Closed);
    // Counters were reset: two failures do not open it again.
    fake.set_mode(Mode::Fail);
    assert!(client.ping().await.is_err());
    assert!(client.ping().await.is_err());
    assert_eq!(client.breaker_state(), BreakerState::Closed);
}
