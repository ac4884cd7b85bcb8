//! Cluster mode against real Leasehold nodes in cluster mode, in process
//! on 127.0.0.1 (three groups of one primary each, their topology pushed
//! with `LH.TOPOLOGY SET`): keys over the three groups, a `MOVED` after a
//! newer topology moves a slot range, a node that refuses connections,
//! and the lease manager leasing on keys of every group. `ASK` and the
//! redirect bound come from a fake node here, which can answer them on any
//! request; a real migration's `-ASK` is followed in the server's reshard
//! tests.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_client::slot::key_slot;
use leasehold_client::{
    BucketParams, Client, ClientConfig, Error, FailureMode, LeaseConfig, LeaseManager, Mode,
    Outcome, Policy, PolicyId, PolicySet, ServerErrorKind, SystemClock,
};
use leasehold_protocol::{decode_request, Limits, Protocol, Reply};
use leasehold_testkit::{call, cluster_topology as topology, publish_topology as publish};
use parking_lot::Mutex;
use support::cluster::{cluster, key_in, Cluster, RANGES};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[test]
fn the_client_routes_every_command_by_the_servers_first_key() {
    use leasehold_server::commands::{flags, table};
    let mut checked = 0;
    for spec in &table().commands {
        // A request long enough for the arity, with `numkeys` 1 where a
        // script or SINTERCARD reads it.
        let argc = spec.arity.unsigned_abs().max(5) as usize;
        let mut args = vec![Bytes::from(spec.name.to_ascii_uppercase())];
        args.extend(
            (1..argc).map(|i| Bytes::from(if i <= 2 { "1".into() } else { format!("k{i}") })),
        );
        let server = spec.keys_in(&args).next();
        let client = leasehold_client::cluster::key_index(&args);
        if server.is_some() || spec.has(flags::MOVABLE_KEYS) {
            assert_eq!(client, server, "{}", spec.name);
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked} commands with keys");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_over_three_groups_are_written_and_read_back() {
    let c = cluster();
    let client = c.client();
    client.connect().await.unwrap();
    let map = client.slot_map().unwrap();
    assert_eq!(map.nodes(), &[c.addr(0), c.addr(1), c.addr(2)]);
    assert_eq!(map.epoch(), 1);
    let mut per_group = [0; 3];
    for n in 0..300 {
        let key = format!("k:{n}");
        client
            .set(key.as_bytes(), format!("v{n}").as_bytes())
            .await
            .unwrap();
        let group = Cluster::group_of(key_slot(key.as_bytes()));
        per_group[group] += 1;
        assert_eq!(client.slot_owner(key.as_bytes()), Some(c.addr(group)));
        // Only its own group's node holds it.
        assert_eq!(
            call(c.ports[group], &["GET", &key]),
            Some(Reply::bulk(format!("v{n}")))
        );
    }
    assert!(per_group.iter().all(|&n| n > 50), "{per_group:?}");
    for n in 0..300 {
        let key = format!("k:{n}");
        let got = client.get(key.as_bytes()).await.unwrap();
        assert_eq!(got.as_deref(), Some(format!("v{n}").as_bytes()));
        assert_eq!(
            client
                .incr(format!("{{{key}}}:n").as_bytes())
                .await
                .unwrap(),
            1
        );
    }
    // A pipeline over the three groups comes back in order.
    let keys: Vec<String> = RANGES.iter().map(|&r| key_in("p:", r)).collect();
    let mut cmds: Vec<Vec<Bytes>> = Vec::new();
    for k in &keys {
        cmds.push(vec![
            "SET".into(),
            Bytes::from(k.clone()),
            Bytes::from(k.clone()),
        ]);
        cmds.push(vec!["GET".into(), Bytes::from(k.clone())]);
    }
    let replies = client
        .pipeline(&cmds, Duration::from_secs(1))
        .await
        .unwrap();
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(replies[2 * i], Reply::ok());
        assert_eq!(replies[2 * i + 1], Reply::bulk(k.clone()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_topology_is_followed_through_moved() {
    let c = cluster();
    let client = c.client();
    let key = key_in("moving:", (0, 1000));
    client.set(key.as_bytes(), b"old").await.unwrap();
    assert_eq!(client.slot_owner(key.as_bytes()), Some(c.addr(0)));
    // A second client with the same map, for a pipeline below.
    let piped = c.client();
    piped.connect().await.unwrap();
    // Version 2 hands 0-1000 to group 1 (the key stays behind on node 0:
    // there is no resharding).
    publish(
        &c.ports,
        2,
        &topology(
            2,
            &c.ports,
            &[
                "\"1001-5460\"",
                "\"0-1000\", \"5461-10922\"",
                "\"10923-16383\"",
            ],
        ),
    );
    // The client's map still says node 0: it is MOVED to node 1.
    assert_eq!(client.get(key.as_bytes()).await.unwrap(), None);
    assert_eq!(client.slot_owner(key.as_bytes()), Some(c.addr(1)));
    client.set(key.as_bytes(), b"new").await.unwrap();
    assert_eq!(call(c.ports[1], &["GET", &key]), Some(Reply::bulk("new")));
    // Node 0 still holds the old value, unreachable (it redirects).
    let slot = key_slot(key.as_bytes()).to_string();
    assert_eq!(
        call(c.ports[0], &["CLUSTER", "COUNTKEYSINSLOT", &slot]),
        Some(Reply::Int(1))
    );
    // The background reload moves the whole range, not just that slot.
    let other = key_in("other:", (0, 1000));
    assert_ne!(key_slot(other.as_bytes()), key_slot(key.as_bytes()));
    let t = Instant::now();
    while client.slot_map().unwrap().epoch() != 2 {
        assert!(t.elapsed() < Duration::from_secs(5), "no reload");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(client.slot_owner(other.as_bytes()), Some(c.addr(1)));
    assert_eq!(client.slot_owner(b"x"), Some(c.addr(2)));
    // A pipeline sent by the old map: the moved command is sent again to
    // its new owner, the others answer where they are, all in order.
    let far = key_in("far:", RANGES[2]);
    let cmds: Vec<Vec<Bytes>> = vec![
        vec!["GET".into(), Bytes::from(key.clone())],
        vec!["SET".into(), Bytes::from(far.clone()), "f".into()],
        vec!["GET".into(), Bytes::from(far.clone())],
    ];
    assert_eq!(piped.slot_owner(key.as_bytes()), Some(c.addr(0)));
    let replies = piped.pipeline(&cmds, Duration::from_secs(1)).await.unwrap();
    assert_eq!(replies, [Reply::bulk("new"), Reply::ok(), Reply::bulk("f")]);
    assert_eq!(piped.slot_owner(key.as_bytes()), Some(c.addr(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_refuses_connections_makes_the_client_reload() {
    let mut c = cluster();
    let client = c.client();
    // The map is loaded, through node 0; no connection to node 2 yet.
    client
        .set(key_in("here:", RANGES[0]).as_bytes(), b"v")
        .await
        .unwrap();
    let key = key_in("gone:", RANGES[2]);
    assert_eq!(client.slot_owner(key.as_bytes()), Some(c.addr(2)));
    // Node 2 stops; version 2 gives its slots to node 1.
    c.nodes.pop().unwrap().shutdown();
    let live = &c.ports[..2];
    publish(
        live,
        2,
        &topology(2, live, &["\"0-5460\"", "\"5461-16383\""]),
    );
    // Node 2 refuses the connect: the map is reloaded from node 0 or 1
    // within the call, which then goes to node 1. The caller sees no error.
    client.set(key.as_bytes(), b"w").await.unwrap();
    assert_eq!(client.slot_owner(key.as_bytes()), Some(c.addr(1)));
    let map = client.slot_map().unwrap();
    assert_eq!((map.epoch(), map.nodes()), (2, &[c.addr(0), c.addr(1)][..]));
    assert_eq!(call(c.ports[1], &["GET", &key]), Some(Reply::bulk("w")));
    // Read back through the new map.
    assert_eq!(
        client.get(key.as_bytes()).await.unwrap().as_deref(),
        Some(&b"w"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_that_is_down_opens_only_its_own_nodes_breaker() {
    let mut c = cluster();
    let client = c.client();
    let keys: Vec<String> = RANGES.iter().map(|&r| key_in("brk:", r)).collect();
    for k in &keys {
        client.set(k.as_bytes(), b"v").await.unwrap();
    }
    // Node 2 stops and no topology replaces it: its keys have nowhere to go.
    c.nodes.pop().unwrap().shutdown();
    let threshold = client.config().breaker.failure_threshold;
    for _ in 0..threshold {
        let e = client.get(keys[2].as_bytes()).await.unwrap_err();
        assert!(e.is_connection() || e.is_timeout(), "{e:?}");
    }
    // Its breaker is open: its keys fail fast, without a connect...
    let e = client.get(keys[2].as_bytes()).await.unwrap_err();
    assert!(e.is_circuit_open(), "{e:?}");
    assert!(client.breaker_would_refuse_for(keys[2].as_bytes()));
    assert_eq!(client.breaker_state(), leasehold_client::BreakerState::Open);
    // ...while the other groups' keys are served, many times over.
    for _ in 0..20 {
        for k in &keys[..2] {
            assert!(!client.breaker_would_refuse_for(k.as_bytes()));
            let got = client.get(k.as_bytes()).await.unwrap();
            assert_eq!(got.as_deref(), Some(&b"v"[..]), "{k}");
        }
        assert!(client
            .get(keys[2].as_bytes())
            .await
            .unwrap_err()
            .is_circuit_open());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_manager_leases_exactly_the_capacity_on_every_group() {
    const BURST: u64 = 40;
    let c = cluster();
    let client = c.client();
    client.connect().await.unwrap();
    let policy = Policy {
        name: "api".into(),
        // One token an hour: nothing refills during the test.
        requests_per_unit: 1,
        unit: Duration::from_secs(3600),
        burst: BURST,
        failure_mode: FailureMode::FailClosed,
        mode: Mode::Enforce,
        fail_open_requests_per_unit: 2,
    };
    let set = PolicySet::from_policies("c", vec![policy]);
    let manager = LeaseManager::new(
        client.clone(),
        &set,
        LeaseConfig::default(),
        Arc::new(SystemClock::new()),
    );
    // Three keys a group, picked by their ledger key, `c:api:<key>`.
    let keys: Vec<(usize, String)> = (0..3)
        .flat_map(|g| (0..3).map(move |i| (g, i)))
        .map(|(g, i)| {
            let ledger = key_in(&format!("c:api:g{g}k{i}-"), RANGES[g]);
            (g, ledger["c:api:".len()..].to_string())
        })
        .collect();
    let mut allowed = vec![0u64; keys.len()];
    for round in 0..BURST + 20 {
        for (i, (_, k)) in keys.iter().enumerate() {
            let d = manager.decide(PolicyId::FIRST, k.as_bytes()).await;
            match d.outcome {
                Outcome::Allowed => allowed[i] += 1,
                Outcome::Limited => {}
                other => panic!("round {round}, key {k}: {other:?}"),
            }
        }
    }
    assert_eq!(
        allowed,
        vec![BURST; keys.len()],
        "every key spent its capacity, no more"
    );
    let p = BucketParams {
        capacity: BURST,
        rate: 1,
        period_ms: 3_600_000,
    };
    for (g, k) in &keys {
        let ledger = format!("c:api:{k}");
        assert_eq!(client.slot_owner(ledger.as_bytes()), Some(c.addr(*g)));
        // The bucket lives on its group's node, empty.
        let peek = call(
            c.ports[*g],
            &["TOKENLEASE", &ledger, "40", "1", "3600000", "0"],
        );
        let Some(Reply::Array(v)) = peek else {
            panic!("{peek:?}")
        };
        assert_eq!(v[1], Reply::Int(0), "{ledger} on group {g}");
        assert_eq!(
            client
                .token_lease(ledger.as_bytes(), p, 0, 0)
                .await
                .unwrap()
                .remaining,
            0
        );
    }
    manager.shutdown().await;
}

/// A fake cluster node: answers `CLUSTER INFO`, `CLUSTER SLOTS` (every
/// slot its own) and other commands from `answer`, and logs every
/// command it gets.
struct FakeNode {
    addr: SocketAddr,
    log: Mutex<Vec<Vec<String>>>,
}

impl FakeNode {
    async fn start(answer: impl Fn(&[String]) -> Reply + Send + Sync + 'static) -> Arc<FakeNode> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let node = Arc::new(FakeNode {
            addr: listener.local_addr().unwrap(),
            log: Mutex::new(Vec::new()),
        });
        let answer = Arc::new(answer);
        let me = node.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let (me, answer) = (me.clone(), answer.clone());
                tokio::spawn(async move {
                    let mut buf = bytes::BytesMut::new();
                    loop {
                        while let Ok(Some(req)) = decode_request(&mut buf, &Limits::default()) {
                            let args: Vec<String> = req
                                .iter()
                                .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
                                .collect();
                            me.log.lock().push(args.clone());
                            let reply = match args.iter().map(String::as_str).collect::<Vec<_>>()[..]
                            {
                                ["CLUSTER", "INFO"] => Reply::bulk("cluster_current_epoch:1\r\n"),
                                ["CLUSTER", "SLOTS"] => Reply::Array(vec![Reply::Array(vec![
                                    Reply::Int(0),
                                    Reply::Int(16383),
                                    Reply::Array(vec![
                                        Reply::bulk("127.0.0.1"),
                                        Reply::Int(i64::from(me.addr.port())),
                                    ]),
                                ])]),
                                ["ASKING"] => Reply::ok(),
                                _ => answer(&args),
                            };
                            if s.write_all(&reply.to_bytes(Protocol::Resp2)).await.is_err() {
                                return;
                            }
                        }
                        if matches!(s.read_buf(&mut buf).await, Ok(0) | Err(_)) {
                            return;
                        }
                    }
                });
            }
        });
        node
    }

    fn commands(&self) -> Vec<String> {
        self.log
            .lock()
            .iter()
            .filter(|c| c[0] != "CLUSTER")
            .map(|c| c.join(" "))
            .collect()
    }
}

fn fake_client(seed: SocketAddr) -> Client {
    let mut config = ClientConfig::cluster(vec![seed]);
    config.call_deadline = Duration::from_millis(500);
    Client::new(config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_is_followed_once_with_asking_and_leaves_the_map_alone() {
    let other = FakeNode::start(|_| Reply::bulk("from the importing node")).await;
    let to = other.addr;
    let asked = Arc::new(Mutex::new(false));
    let owner = FakeNode::start(move |args| {
        let mut asked = asked.lock();
        match (&args[0][..], *asked) {
            ("GET", false) => {
                *asked = true;
                Reply::err_owned(format!("ASK 12182 {to}"))
            }
            _ => Reply::bulk("from the owner"),
        }
    })
    .await;
    let client = fake_client(owner.addr);
    assert_eq!(
        client.get(b"foo").await.unwrap().as_deref(),
        Some(&b"from the importing node"[..])
    );
    assert_eq!(other.commands(), ["ASKING", "GET FOO"]);
    // The map still names the owner, and the next call goes there.
    assert_eq!(client.slot_owner(b"foo"), Some(owner.addr));
    assert_eq!(
        client.get(b"foo").await.unwrap().as_deref(),
        Some(&b"from the owner"[..])
    );
    assert_eq!(owner.commands(), ["GET FOO", "GET FOO"]);
    assert_eq!(other.commands().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tryagain_is_sent_again_to_the_same_node_and_then_returned_as_is() {
    // Two -TRYAGAIN, then the answer: the caller sees the answer.
    let tries = Arc::new(Mutex::new(0));
    let counted = tries.clone();
    let node = FakeNode::start(move |_| {
        let mut n = counted.lock();
        *n += 1;
        match *n {
            1 | 2 => Reply::err("TRYAGAIN Multiple keys request during rehashing of slot"),
            _ => Reply::bulk("after the migration"),
        }
    })
    .await;
    let client = fake_client(node.addr);
    let started = Instant::now();
    assert_eq!(
        client.get(b"foo").await.unwrap().as_deref(),
        Some(&b"after the migration"[..])
    );
    // Paused 20 ms, then 40 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(60),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(node.commands(), ["GET FOO", "GET FOO", "GET FOO"]);
    // A node that keeps answering -TRYAGAIN: five resends, then its error.
    let stuck =
        FakeNode::start(|_| Reply::err("TRYAGAIN Multiple keys request during rehashing of slot"))
            .await;
    let client = fake_client(stuck.addr);
    match client.get(b"foo").await {
        Err(Error::Server(e)) => assert_eq!(e.kind, ServerErrorKind::TryAgain, "{e:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(stuck.commands().len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirections_in_circles_end_in_a_clear_error() {
    let slot = key_slot(b"foo");
    let a = Arc::new(Mutex::new(None::<SocketAddr>));
    let b_addr = a.clone();
    let b = FakeNode::start(move |_| {
        Reply::err_owned(format!("MOVED {slot} {}", b_addr.lock().unwrap()))
    })
    .await;
    let b_to = b.addr;
    let first = FakeNode::start(move |_| Reply::err_owned(format!("MOVED {slot} {b_to}"))).await;
    *a.lock() = Some(first.addr);
    let client = fake_client(first.addr);
    let err = client.get(b"foo").await.unwrap_err();
    match &err {
        Error::TooManyRedirects {
            slot: s, redirects, ..
        } => assert_eq!((*s, *redirects), (slot, 5)),
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("after 5 redirections"), "{err}");
    // Six sends: the first and five redirections.
    assert_eq!(first.commands().len() + b.commands().len(), 6);
}

/// An embedded manager following the override channel on a cluster hears
/// a PUBLISH on any primary (Leasehold nodes do not forward PUBLISH, so it
/// subscribes on every primary of the slot map), here the one it was not
/// seeded with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_published_on_any_primary_reaches_the_lease_manager() {
    const CHANNEL: &str = leasehold_client::overrides::DEFAULT_CHANNEL;
    let c = cluster();
    let client = c.client();
    client.connect().await.unwrap();
    let policy = support::managers::api_policy(1, Duration::from_secs(3600), 5);
    let manager = LeaseManager::new(
        client,
        &PolicySet::from_policies("c", vec![policy]),
        LeaseConfig::default(),
        Arc::new(SystemClock::new()),
    );
    manager.follow_overrides(CHANNEL);
    let subscribed = |port: u16| {
        call(port, &["PUBSUB", "NUMSUB", CHANNEL])
            == Some(Reply::Array(vec![
                Reply::Bulk(Bytes::from_static(CHANNEL.as_bytes())),
                Reply::Int(1),
            ]))
    };
    leasehold_testkit::wait_for("every primary followed", Duration::from_secs(10), || {
        c.ports.iter().all(|&p| subscribed(p))
    });
    let mut allowed = 0;
    for _ in 0..20 {
        allowed += u64::from(manager.decide(PolicyId::FIRST, b"k").await.allowed);
    }
    assert_eq!(allowed, 5);

    let published = Instant::now();
    let n = call(c.ports[2], &["PUBLISH", CHANNEL, "c api disable 60000"]);
    assert_eq!(n, Some(Reply::Int(1)));
    loop {
        let d = manager.decide(PolicyId::FIRST, b"k").await;
        if d.allowed {
            assert_eq!(
                d.outcome,
                Outcome::Bypassed(leasehold_client::BypassReason::Override)
            );
            break;
        }
        assert!(published.elapsed() < Duration::from_secs(3), "not heard");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    manager.shutdown().await;
}
