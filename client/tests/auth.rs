//! `ClientConfig::with_auth` against a real server in process with a
//! password for the default user and an ACL user: every new connection
//! sends `AUTH` before its first call; without credentials, or with wrong
//! ones, calls fail with the server's error and nothing is written; the
//! lease manager leases through an authenticated client.

mod support;

use std::sync::Arc;
use std::time::Duration;

use leasehold_client::{
    BucketParams, Client, ClientConfig, LeaseConfig, LeaseManager, Outcome, PolicySet,
    ServerErrorKind, SystemClock,
};
use leasehold_protocol::Reply;
use leasehold_testkit::Conn;

const PASSWORD: &str = "s3cret-pw";

fn server() -> leasehold_server::ServerHandle {
    support::server::server_with(|c| c.security.requirepass = PASSWORD.into())
}

fn client(addr: std::net::SocketAddr, user: Option<&str>, password: Option<&str>) -> Client {
    let mut config = ClientConfig::new(addr);
    config.call_deadline = Duration::from_millis(500);
    config.lease_deadline = Duration::from_millis(200);
    if let Some(p) = password {
        config = config.with_auth(user, p);
    }
    Client::new(config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_authenticates_before_its_first_call() {
    let s = server();
    // No credentials: the server's NOAUTH, and nothing written.
    let none = client(s.addr, None, None);
    let e = none.set(b"k", b"v").await.unwrap_err();
    assert_eq!(e.server_kind(), Some(&ServerErrorKind::NoAuth), "{e:?}");
    // A wrong password: WRONGPASS, on every call (each new connection
    // tries again), and nothing written.
    let wrong = client(s.addr, None, Some("nope"));
    for _ in 0..2 {
        let e = wrong.set(b"k", b"v").await.unwrap_err();
        assert!(e.to_string().contains("WRONGPASS"), "{e}");
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    // The default user's password.
    let good = client(s.addr, None, Some(PASSWORD));
    good.set(b"k", b"v").await.unwrap();
    assert_eq!(good.get(b"k").await.unwrap().as_deref(), Some(&b"v"[..]));
    // An ACL user, limited to rl: keys.
    let mut admin = Conn::open(s.addr.port()).expect("connect");
    assert_eq!(admin.call(&["AUTH", PASSWORD]), Some(Reply::ok()));
    let setuser = ["ACL", "SETUSER", "gw", "on", ">gw-pw", "~rl:*", "+@all"];
    assert_eq!(admin.call(&setuser), Some(Reply::ok()));
    let gw = client(s.addr, Some("gw"), Some("gw-pw"));
    let params = BucketParams {
        capacity: 10,
        rate: 1,
        period_ms: 60_000,
    };
    let lease = gw.token_lease(b"rl:a", params, 4, 1).await.unwrap();
    assert_eq!((lease.granted, lease.remaining), (4, 6));
    let e = gw.set(b"other", b"v").await.unwrap_err();
    assert!(e.to_string().contains("NOPERM"), "{e}");
    // A reconnect authenticates again: the server closes every client.
    // (The good client's, the ACL user's, the one that never sent AUTH.)
    assert_eq!(
        admin.call(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]),
        Some(Reply::Int(3))
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut answered = false;
    for _ in 0..20 {
        if let Ok(v) = good.get(b"k").await {
            assert_eq!(v.as_deref(), Some(&b"v"[..]));
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(answered, "the client reconnected and authenticated again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_manager_leases_through_an_authenticated_client() {
    let s = server();
    let policies = PolicySet::from_yaml(
        "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n",
    )
    .expect("a policy");
    let id = policies.find(&[("user", "ann")]).expect("the policy");
    let c = client(s.addr, None, Some(PASSWORD));
    let m = LeaseManager::new(
        c,
        &policies,
        LeaseConfig::default(),
        Arc::new(SystemClock::new()),
    );
    let mut allowed = 0;
    for _ in 0..8 {
        if matches!(m.decide(id, b"ann").await.outcome, Outcome::Allowed) {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 5);
    m.shutdown().await;
}
