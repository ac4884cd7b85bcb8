//! The connection against the fake ledger: a late reply never reaches the
//! next caller, error replies keep a pipeline aligned, many callers
//! pipelined over one connection, typed errors, reconnecting.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_client::{BucketParams, Client, ClientConfig, Error, ServerErrorKind};
use leasehold_protocol::Reply;
use support::{FakeLedger, Mode};

fn cmd(args: &[&str]) -> Vec<Bytes> {
    args.iter()
        .map(|a| Bytes::copy_from_slice(a.as_bytes()))
        .collect()
}

#[tokio::test]
async fn a_late_reply_never_reaches_the_next_caller() {
    let fake = FakeLedger::start().await;
    let mut config = ClientConfig::new(fake.addr);
    config.call_deadline = Duration::from_secs(1);
    let client = Client::new(config);
    client.set(b"k1", b"v1").await.unwrap();
    client.set(b"k2", b"v2").await.unwrap();
    fake.delay_key("k1", Duration::from_secs(2));

    let started = Instant::now();
    let err = client.get(b"k1").await.unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_millis(1500),
        "{waited:?}"
    );

    assert_eq!(client.get(b"k2").await.unwrap(), Some(Bytes::from("v2")));
    // Even after k1's reply would have arrived, nothing is out of step.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(client.get(b"k2").await.unwrap(), Some(Bytes::from("v2")));
    assert_eq!(fake.calls("GET"), 3);
}

#[tokio::test]
async fn error_replies_keep_the_pipeline_aligned() {
    let fake = FakeLedger::start().await;
    let client = Client::new(ClientConfig::new(fake.addr));
    let pipeline = [
        cmd(&["SET", "s", "abc"]),
        cmd(&["INCR", "s"]),
        cmd(&["GET", "s"]),
    ];
    let replies = client
        .pipeline(&pipeline, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(replies.len(), 3);
    assert_eq!(replies[0], Reply::ok());
    assert!(matches!(&replies[1], Reply::Error(e) if e.starts_with("ERR value is not an integer")));
    assert_eq!(replies[2], Reply::Bulk(Bytes::from("abc")));
    client.ping().await.unwrap();
    // The same through typed calls: the error is typed, the next call is fine.
    let err = client.incr(b"s").await.unwrap_err();
    assert_eq!(err.server_kind(), Some(&ServerErrorKind::Err));
    assert_eq!(client.get(b"s").await.unwrap(), Some(Bytes::from("abc")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_callers_share_one_connection_in_order() {
    let fake = FakeLedger::start().await;
    let client = Client::new(ClientConfig::new(fake.addr));
    let mut tasks = Vec::new();
    for i in 0..200u32 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("k{i}");
            client
                .set(key.as_bytes(), i.to_string().as_bytes())
                .await
                .unwrap();
            for _ in 0..5 {
                let got = client.get(key.as_bytes()).await.unwrap().unwrap();
                assert_eq!(got, Bytes::from(i.to_string()));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(fake.calls("GET"), 1000);
}

#[tokio::test]
async fn reconnects_after_the_connection_drops() {
    let fake = FakeLedger::start().await;
    let client = Client::new(ClientConfig::new(fake.addr));
    client.ping().await.unwrap();
    fake.set_mode(Mode::Drop);
    let err = client.ping().await.unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    fake.set_mode(Mode::Normal);
    client.ping().await.unwrap();
}

#[tokio::test]
async fn refused_connects_back_off() {
    // Bind then drop a listener to get a port nobody listens on.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut config = ClientConfig::new(addr);
    config.backoff_base = Duration::from_millis(200);
    config.breaker.failure_threshold = 100;
    let client = Client::new(config);
    let first = client.ping().await.unwrap_err();
    assert!(first.is_connection());
    // Within the backoff the client does not even try.
    let second = client.ping().await.unwrap_err();
    assert!(
        matches!(second, Error::Connection(leasehold_client::ConnectionError::Backoff { retry_in }) if retry_in <= Duration::from_millis(200)),
        "{second:?}"
    );
}

#[tokio::test]
async fn typed_token_calls_read_the_reply_shape() {
    let fake = FakeLedger::start().await;
    let client = Client::new(ClientConfig::new(fake.addr));
    let p = BucketParams {
        capacity: 10,
        rate: 1,
        period_ms: 3_600_000,
    };
    let lease = client.token_lease(b"t", p, 8, 1).await.unwrap();
    assert_eq!(
        (lease.granted, lease.remaining, lease.retry_after),
        (8, 2, Some(Duration::ZERO))
    );
    let lease = client.token_lease(b"t", p, 8, 1).await.unwrap();
    assert_eq!((lease.granted, lease.remaining), (2, 0));
    let denied = client.token_lease(b"t", p, 8, 1).await.unwrap();
    assert_eq!(denied.granted, 0);
    assert!(denied.retry_after.unwrap() > Duration::from_secs(3000));
    let never = client.token_lease(b"t", p, 20, 11).await.unwrap();
    assert_eq!(never.retry_after, None);
    assert_eq!(client.token_return(b"t", p, 4).await.unwrap(), 4);
}

#[tokio::test]
async fn connect_opens_the_connection_ahead_of_the_first_call() {
    let fake = FakeLedger::start().await;
    let client = Client::new(ClientConfig::new(fake.addr));
    assert_eq!(fake.connections().await, 0, "connects lazily");
    client.connect().await.unwrap();
    assert_eq!(fake.connections().await, 1);
    client.connect().await.unwrap();
    client.set(b"k", b"v").await.unwrap();
    assert_eq!(fake.connections().await, 1, "reused by the next calls");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let err = Client::new(ClientConfig::new(addr))
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_connection(), "{err:?}");
}
