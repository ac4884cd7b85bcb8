//! redis-rs's async cluster client (`redis::cluster_async`) against three
//! in-process Leasehold nodes in cluster mode (one primary per group, the
//! topology pushed with `LH.TOPOLOGY SET`): it reads the slot map from
//! CLUSTER SLOTS, sends every key to its owner, runs the rate-limit
//! commands, multi-key commands with hash tags, and follows `-ASK` and then
//! `-MOVED` while one slot migrates with CLUSTER SETSLOT and MIGRATE.

use std::time::Duration;

use leasehold_testkit::{call, cluster_topology, publish_topology, text};
use leasehold_tests::{block_on, Reply, TestServer};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

/// The three groups' slot ranges.
const RANGES: [(u16, u16); 3] = [(0, 5460), (5461, 10921), (10922, 16383)];

fn slots(ranges: &[(u16, u16)]) -> Vec<String> {
    ranges.iter().map(|(a, b)| format!("\"{a}-{b}\"")).collect()
}

struct Cluster {
    _nodes: Vec<TestServer>,
    ports: Vec<u16>,
}

fn cluster() -> Cluster {
    let nodes: Vec<TestServer> = (0..3)
        .map(|_| {
            let mut c = TestServer::config(2);
            c.cluster.enabled = true;
            TestServer::with_config(
                c,
                std::sync::Arc::new(leasehold_server::clock::SystemClock::new()),
            )
        })
        .collect();
    let ports: Vec<u16> = nodes.iter().map(|n| n.addr.port()).collect();
    let s = slots(&RANGES);
    let s: Vec<&str> = s.iter().map(String::as_str).collect();
    publish_topology(&ports, 1, &cluster_topology(1, &ports, &s));
    Cluster {
        _nodes: nodes,
        ports,
    }
}

impl Cluster {
    /// The port of the group owning `key`'s slot at version 1.
    fn owner(&self, key: &str) -> u16 {
        let slot = leasehold_server::slot::key_slot(key.as_bytes());
        let g = RANGES.iter().position(|&(a, b)| (a..=b).contains(&slot));
        self.ports[g.expect("every slot has a group")]
    }

    async fn client(&self) -> ClusterConnection {
        let urls: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect();
        let client = ClusterClient::builder(urls)
            .retries(4)
            .build()
            .expect("a cluster client");
        client
            .get_async_connection()
            .await
            .expect("redis-rs cluster connect")
    }
}

async fn q<T: redis::FromRedisValue>(con: &mut ClusterConnection, args: &[&str]) -> T {
    let mut c = redis::cmd(args[0]);
    c.arg(&args[1..]);
    match c.query_async(con).await {
        Ok(v) => v,
        Err(e) => panic!("{args:?}: {e}"),
    }
}

#[test]
fn redis_rs_cluster_client_routes_keys_rate_limits_and_tagged_multi_key_commands() {
    let c = cluster();
    block_on(Duration::from_secs(30), async {
        let mut con = c.client().await;
        // 300 keys over the three groups, each stored on its slot's owner.
        for i in 0..300 {
            let (k, v) = (format!("k{i}"), format!("v{i}"));
            let ok: String = q(&mut con, &["SET", &k, &v]).await;
            assert_eq!(ok, "OK");
        }
        let mut per_group = [0; 3];
        for i in 0..300 {
            let k = format!("k{i}");
            let v: String = q(&mut con, &["GET", &k]).await;
            assert_eq!(v, format!("v{i}"));
            let owner = c.owner(&k);
            assert_eq!(
                call(owner, &["GET", &k]),
                Some(Reply::Bulk(v.into_bytes().into()))
            );
            per_group[c.ports.iter().position(|&p| p == owner).unwrap()] += 1;
        }
        assert!(per_group.iter().all(|&n| n > 50), "{per_group:?}");
        for i in 0..30 {
            let k = format!("n{i}");
            for want in 1..=3 {
                let n: i64 = q(&mut con, &["INCR", &k]).await;
                assert_eq!(n, want);
            }
        }
        // Rate limits: a bucket of 10 (1 token a day) and a window of 3.
        let mut leases = Vec::new();
        for _ in 0..3 {
            let r: Vec<i64> = q(
                &mut con,
                &[
                    "TOKENLEASE",
                    "rl:tenant9",
                    "10",
                    "1",
                    "86400000",
                    "4",
                    "MIN",
                    "1",
                ],
            )
            .await;
            leases.push(r[0]);
        }
        assert_eq!(leases, [4, 4, 2]);
        let owner = c.owner("rl:tenant9");
        let peek = call(
            owner,
            &["TOKENLEASE", "rl:tenant9", "10", "1", "86400000", "0"],
        );
        assert!(
            matches!(&peek, Some(Reply::Array(a)) if a[1] == Reply::Int(0)),
            "{peek:?}"
        );
        let mut admitted = Vec::new();
        for _ in 0..4 {
            let r: Vec<i64> = q(&mut con, &["SLIDINGWINDOW", "sw:tenant9", "3", "60000"]).await;
            admitted.push(r[0]);
        }
        assert_eq!(admitted, [1, 1, 1, 0]);
        // Multi-key commands within one hash tag.
        let ok: String = q(&mut con, &["MSET", "{user1}:a", "1", "{user1}:b", "2"]).await;
        assert_eq!(ok, "OK");
        let both: Vec<String> = q(&mut con, &["MGET", "{user1}:a", "{user1}:b"]).await;
        assert_eq!(both, ["1", "2"]);
        let sum: i64 = q(
            &mut con,
            &[
                "EVAL",
                "return redis.call('INCRBY', KEYS[1], 5) + redis.call('INCRBY', KEYS[2], 5)",
                "2",
                "{user1}:a",
                "{user1}:b",
            ],
        )
        .await;
        assert_eq!(sum, 13);
    });
}

#[test]
fn redis_rs_cluster_client_follows_ask_during_a_migration_then_moved_after_it() {
    let c = cluster();
    let ids: Vec<String> = c
        .ports
        .iter()
        .map(|&p| text(&call(p, &["CLUSTER", "MYID"]).unwrap()))
        .collect();
    // A hash tag of group 0 moved to group 1.
    let tag = (0..)
        .map(|n| format!("{{m{n}}}"))
        .find(|t| {
            let slot = leasehold_server::slot::key_slot(t.as_bytes());
            (1..5460).contains(&slot)
        })
        .unwrap();
    let slot = leasehold_server::slot::key_slot(tag.as_bytes());
    let s = slot.to_string();
    let (src, dst) = (c.ports[0], c.ports[1]);
    let keys: Vec<String> = (0..4).map(|i| format!("{tag}{i}")).collect();
    block_on(Duration::from_secs(30), async {
        let mut con = c.client().await;
        for k in &keys {
            let _: String = q(&mut con, &["SET", k, k]).await;
        }
        let ok = Some(Reply::ok());
        assert_eq!(
            call(dst, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &ids[0]]),
            ok
        );
        assert_eq!(
            call(src, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &ids[1]]),
            ok
        );
        let port = dst.to_string();
        let migrate = [
            "MIGRATE",
            "127.0.0.1",
            &port,
            "",
            "0",
            "5000",
            "KEYS",
            &keys[0],
            &keys[1],
        ];
        assert_eq!(call(src, &migrate), ok);
        // Two keys moved, two not: the source answers -ASK for the moved
        // ones and the client asks the target.
        for k in &keys {
            let v: String = q(&mut con, &["GET", k]).await;
            assert_eq!(&v, k);
        }
        let fresh = format!("{tag}new");
        let _: String = q(&mut con, &["SET", &fresh, "x"]).await;
        assert_eq!(
            call(src, &["CLUSTER", "COUNTKEYSINSLOT", &s]),
            Some(Reply::Int(2))
        );
        // The rest moves, the topology flips, the slot is closed on both.
        let migrate = [
            "MIGRATE",
            "127.0.0.1",
            &port,
            "",
            "0",
            "5000",
            "KEYS",
            &keys[2],
            &keys[3],
        ];
        assert_eq!(call(src, &migrate), ok);
        let v2 = [
            format!("\"0-{}\", \"{}-5460\"", slot - 1, slot + 1),
            format!("\"{slot}-{slot}\", \"5461-10921\""),
            "\"10922-16383\"".to_string(),
        ];
        let s2: Vec<&str> = v2.iter().map(String::as_str).collect();
        publish_topology(&c.ports, 2, &cluster_topology(2, &c.ports, &s2));
        for p in [src, dst] {
            assert_eq!(call(p, &["CLUSTER", "SETSLOT", &s, "NODE", &ids[1]]), ok);
        }
        // The client follows -MOVED to the new owner; nothing is left behind.
        for k in keys.iter().chain([&fresh]) {
            let v: String = q(&mut con, &["GET", k]).await;
            assert_eq!(v, if *k == fresh { "x" } else { k.as_str() });
        }
        assert_eq!(
            call(src, &["CLUSTER", "COUNTKEYSINSLOT", &s]),
            Some(Reply::Int(0))
        );
        assert_eq!(
            call(dst, &["CLUSTER", "COUNTKEYSINSLOT", &s]),
            Some(Reply::Int(5))
        );
    });
}
