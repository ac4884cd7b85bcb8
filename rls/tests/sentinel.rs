//! `leasehold-rls --sentinel`: the ledger's primary asked of three stock
//! sentinels (`redis-server --sentinel`) watching a Leasehold node, for
//! leases and for the override channel.
//!
//! `redis-server` is looked up on PATH; without it the test prints a notice
//! and passes, unless `LEASEHOLD_REQUIRE_REDIS=1` (CI), which makes it fail.

mod support;

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use leasehold_testkit::{call, sentinel_installed, sentinels_watching, wait_for, Reply, MASTER};
use support::*;

const LIMITS: &str = "\
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 10 }
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_is_found_through_sentinel_for_leases_and_overrides() {
    if !sentinel_installed("the_ledger_is_found_through_sentinel_for_leases_and_overrides") {
        return;
    }
    let dir = Scratch::new("sentinel");
    let ledger = Ledger::start();
    let (sentinels, _procs) = sentinels_watching(&dir.0, ledger.port, 0);
    let mut args = Vec::new();
    for s in &sentinels {
        args.extend(["--sentinel".to_owned(), format!("127.0.0.1:{s}")]);
    }
    args.extend(["--master-name".to_owned(), MASTER.to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // `--ledger` names a port nothing listens on: only Sentinel finds it.
    let rls = Rls::start(&dir, 9, LIMITS, &args);
    let port = ledger.port;
    let run = async {
        let mut c = rls.client().await;
        let alice = || request("edge", vec![desc(&[("user", "alice")])]);
        let r = ask(&mut c, alice()).await.unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 9)], "leased from the primary");
        wait_for("the rls subscribes", Duration::from_secs(10), || {
            matches!(
                call(port, &["PUBSUB", "NUMSUB", "leasehold-rls:override"]),
                Some(Reply::Array(a)) if a.get(1) == Some(&Reply::Int(1))
            )
        });
        call(
            port,
            &[
                "PUBLISH",
                "leasehold-rls:override",
                "edge user disable 60000",
            ],
        );
        let start = std::time::Instant::now();
        loop {
            let r = ask(&mut c, alice()).await.unwrap();
            if r.statuses[0].current_limit.is_none() {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(3),
                "override not heard"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("within 60 s");
}
