//! `leasehold-rls --cluster` against a ledger of three Leasehold nodes in
//! cluster mode (in this process, one group each, the topology pushed with
//! `LH.TOPOLOGY SET`): token buckets leased from every group, a request of
//! a sliding window and a GCRA still all or nothing (their keys share the
//! domain's hash slot), and an override published on a node that is not
//! the seed heard all the same.

mod support;

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use leasehold_testkit::{call, cluster_topology, publish_topology, wait_for, Reply};
use support::*;

const LIMITS: &str = "\
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 2 }
  - key: sw
    rate_limit: { unit: hour, requests_per_unit: 3 }
    algorithm: sliding_window
  - key: g
    rate_limit: { unit: hour, requests_per_unit: 1 }
    algorithm: gcra
";

const CHANNEL: &str = "leasehold-rls:override";

/// The RLSTATE field `name` of `key`, read on whichever node owns it.
fn field_anywhere(ports: &[u16], key: &str, name: &str) -> Option<String> {
    ports
        .iter()
        .find_map(|&p| try_rlstate(p, key).and_then(|mut m| m.remove(name)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_ledger_leases_from_every_group_and_stays_atomic() {
    let ledgers: Vec<Ledger> = (0..3)
        .map(|_| Ledger::start_with(|c| c.cluster.enabled = true))
        .collect();
    let ports: Vec<u16> = ledgers.iter().map(|l| l.port).collect();
    let slots = ["\"0-5460\"", "\"5461-10922\"", "\"10923-16383\""];
    publish_topology(&ports, 1, &cluster_topology(1, &ports, &slots));
    let dir = Scratch::new("cluster");
    let rls = Rls::start(&dir, ports[0], LIMITS, &["--cluster"]);
    let run = async {
        let mut c = rls.client().await;
        // 30 users: 2 each, then over the limit, whichever group holds them.
        for i in 0..30 {
            let user = format!("u{i}");
            let one = || request("edge", vec![desc(&[("user", &user)])]);
            for left in [1, 0] {
                assert_eq!(
                    codes(&ask(&mut c, one()).await.unwrap()),
                    [(Code::Ok, left)]
                );
            }
            assert_eq!(
                overall(&ask(&mut c, one()).await.unwrap()),
                Code::OverLimit,
                "{user}"
            );
        }
        for &p in &ports {
            let keys = match call(p, &["DBSIZE"]) {
                Some(Reply::Int(n)) => n,
                other => panic!("DBSIZE: {other:?}"),
            };
            assert!(keys > 0, "node {p} holds none of the 30 users' buckets");
        }

        // A sliding window and a GCRA in one request, on one slot: the
        // second request's GCRA is denied and its sliding window uncharged.
        let both = || request("edge", vec![desc(&[("sw", "x")]), desc(&[("g", "y")])]);
        assert_eq!(overall(&ask(&mut c, both()).await.unwrap()), Code::Ok);
        let r = ask(&mut c, both()).await.unwrap();
        assert_eq!(overall(&r), Code::OverLimit);
        let sw = "{edge}:sw@sliding_window:sw=x";
        assert_eq!(field_anywhere(&ports, sw, "current").as_deref(), Some("1"));

        // An override published on the third node reaches the instance.
        wait_for(
            "the rls follows every primary",
            Duration::from_secs(10),
            || ports.iter().all(|&p| subscribers(p, CHANNEL) == 1),
        );
        let user = || request("edge", vec![desc(&[("user", "u0")])]);
        assert_eq!(
            overall(&ask(&mut c, user()).await.unwrap()),
            Code::OverLimit
        );
        let n = call(ports[2], &["PUBLISH", CHANNEL, "edge user disable 60000"]);
        assert_eq!(n, Some(Reply::Int(1)));
        let published = Instant::now();
        while overall(&ask(&mut c, user()).await.unwrap()) != Code::Ok {
            assert!(
                published.elapsed() < Duration::from_secs(3),
                "override not heard"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("within 60 s");
    drop(ledgers);
}
