//! The client finds its primary through a stock sentinel that requires a
//! password (`requirepass` in the sentinel's configuration): with
//! `SentinelConfig::auth` it sends `AUTH` to the sentinel before its query
//! and before its `+switch-master` subscription; without it the sentinel
//! answers NOAUTH and no primary is found. The primary is a Leasehold
//! server in process; the sentinel is `redis-server --sentinel`.
//!
//! `redis-server` is looked up on PATH; without it the test prints a notice
//! and passes, unless `LEASEHOLD_REQUIRE_REDIS=1` (CI), which makes it fail.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use leasehold_client::{Address, Client, ClientConfig, ConnectionError, Credentials, Error};
use leasehold_testkit::{
    call, free_port, scratch_dir, sentinel_installed, sentinel_with, wait_for, Conn, Reply, MASTER,
};

const SENTINEL_PASSWORD: &str = "sentinel-pw";

/// `args` on the sentinel at `port`, after `AUTH` with its password.
fn sentinel_call(port: u16, args: &[&str]) -> Option<Reply> {
    let mut c = Conn::open(port)?;
    let mut replies = c.pipeline(&[&["AUTH", SENTINEL_PASSWORD], args])?;
    replies.pop()
}

fn client(sentinel: SocketAddr, auth: Option<&str>) -> Client {
    let mut config = ClientConfig::sentinel(vec![sentinel], MASTER);
    config.call_deadline = Duration::from_millis(500);
    if let Address::Sentinel(s) = &mut config.address {
        s.query_timeout = Duration::from_millis(500);
        s.auth = auth.map(|p| Credentials::new(None, p));
    }
    Client::new(config)
}

#[test]
fn a_sentinel_with_a_password_is_asked_with_auth() {
    if !sentinel_installed("a_sentinel_with_a_password_is_asked_with_auth") {
        return;
    }
    let primary = support::server::server_with(|_| {});
    let port = primary.addr.port();
    assert_eq!(call(port, &["SET", "k", "v"]), Some(Reply::ok()));
    let dir = scratch_dir();
    let s = free_port();
    let _sentinel = sentinel_with(&dir, s, port, &format!("requirepass {SENTINEL_PASSWORD}\n"));
    // The sentinel itself refuses an unauthenticated query.
    let query = ["SENTINEL", "get-master-addr-by-name", MASTER];
    match call(s, &query) {
        Some(Reply::Error(e)) => assert!(e.starts_with("NOAUTH"), "{e}"),
        other => panic!("the sentinel answered {other:?} without a password"),
    }
    wait_for(
        "the sentinel names the primary",
        Duration::from_secs(10),
        || matches!(sentinel_call(s, &query), Some(Reply::Array(a)) if a.len() == 2),
    );
    let sentinel: SocketAddr = ([127, 0, 0, 1], s).into();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Without the sentinel's password: no sentinel names a primary.
        let none = client(sentinel, None);
        let e = none.get(b"k").await.unwrap_err();
        assert!(
            matches!(e, Error::Connection(ConnectionError::NoSentinel)),
            "{e:?}"
        );
        // A wrong one: the same.
        let wrong = client(sentinel, Some("nope"));
        let e = wrong.get(b"k").await.unwrap_err();
        assert!(
            matches!(e, Error::Connection(ConnectionError::NoSentinel)),
            "{e:?}"
        );
        // With it: the primary is found and served.
        let with = client(sentinel, Some(SENTINEL_PASSWORD));
        assert_eq!(with.get(b"k").await.unwrap().as_deref(), Some(&b"v"[..]));
        // Its +switch-master watcher authenticated and subscribed: the
        // sentinel lists exactly one subscribed connection (the clients
        // without the password could not subscribe).
        let subscribers = || {
            let Some(Reply::Bulk(list)) = sentinel_call(s, &["CLIENT", "LIST"]) else {
                return usize::MAX;
            };
            String::from_utf8_lossy(&list)
                .lines()
                .filter(|l| l.contains(" sub=1 "))
                .count()
        };
        wait_for("the watcher's subscription", Duration::from_secs(5), || {
            subscribers() == 1
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(subscribers(), 1);
        drop((none, wrong, with));
    });
}
