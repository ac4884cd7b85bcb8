//! Sub-keys (`sub_keys: N`, `leasehold_client::subkey`) against three real
//! nodes in cluster mode, in process on 127.0.0.1: a spread tenant's
//! sub-keys live on every group and together spend exactly the policy's
//! limit, one hot tenant's ledger calls spread over the nodes (N = 1 keeps
//! the one key on one node), and the accuracy against one key for callers
//! drawn uniformly, skewed, from one caller and from none (the numbers in
//! docs/client.md, "Sub-keys", come from `accuracy_against_one_key`).

mod support;

use std::sync::Arc;

use leasehold_client::slot::key_slot;
use leasehold_client::subkey::{self, caller_index, part, share};
use leasehold_client::{
    BucketParams, Client, ClientConfig, LeaseConfig, LeaseManager, Outcome, PolicyId, PolicySet,
    SystemClock,
};
use leasehold_protocol::Reply;
use leasehold_testkit::{call, text};
use support::cluster::{cluster, Cluster};
use support::managers::api_policy;
use support::FakeLedger;

const P: PolicyId = PolicyId::FIRST;

/// Domain `c`, one policy `tenant` (any tenant): `burst` tokens, refilled
/// at `per_hour` an hour (so nothing refills during a test), fail closed,
/// spread over `n` sub-keys.
fn tenant_policy(burst: u64, per_hour: u64, n: u32) -> PolicySet {
    PolicySet::from_yaml(&format!(
        "domain: c\ndescriptors:\n  - key: tenant\n    rate_limit: {{unit: hour, requests_per_unit: {per_hour}}}\n    burst: {burst}\n    failure_mode: fail_closed\n    sub_keys: {n}\n"
    ))
    .unwrap()
}

fn manager(c: &Cluster, set: &PolicySet, config: LeaseConfig) -> LeaseManager {
    LeaseManager::new(c.client(), set, config, Arc::new(SystemClock::new()))
}

/// The ledger key of sub-key `i` of `n` of tenant `key`.
fn sub_ledger_key(key: &str, n: u32, i: u32) -> Vec<u8> {
    let prefix = subkey::sub_prefix("c", "tenant", n, i);
    subkey::ledger_key(prefix.as_bytes(), key.as_bytes(), n, i)
}

/// TOKENLEASE calls node `port` has served (INFO commandstats).
fn token_leases(port: u16) -> u64 {
    let info = text(&call(port, &["INFO", "commandstats"]).expect("INFO"));
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_tokenlease:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

fn leases_per_node(c: &Cluster) -> Vec<u64> {
    c.ports.iter().map(|&p| token_leases(p)).collect()
}

/// A client of the fake ledger with deadlines for a loaded machine (the
/// default lease deadline, 5 ms, is missed there: a decision then fails
/// closed).
fn fake_client(addr: std::net::SocketAddr) -> Client {
    let mut config = ClientConfig::new(addr);
    config.lease_deadline = std::time::Duration::from_millis(500);
    config.call_deadline = std::time::Duration::from_millis(500);
    Client::new(config)
}

/// `n` callers named like client addresses.
fn callers(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("10.0.{}.{}", i / 256, i % 256))
        .collect()
}

/// Against the fake ledger: a burst of 8 over 4 sub-keys (2 each). A
/// denial blocks the caller's sub-key only (no more ledger calls for it,
/// while another caller's sub-key admits), unspent tokens go back to the
/// sub-key that leased them, and with one sub-key `decide_for` is
/// `decide`: the one key `t:api:k`.
#[tokio::test]
async fn a_denial_blocks_its_sub_key_only_and_tokens_go_back_to_it() {
    let fake = FakeLedger::start().await;
    let hour = std::time::Duration::from_secs(3600);
    let set = PolicySet::from_policies("t", vec![api_policy(8, hour, 8)]);
    let spread = set.clone().with_sub_keys(P, 4).unwrap();
    let m = LeaseManager::new(
        fake_client(fake.addr),
        &spread,
        LeaseConfig::default(),
        Arc::new(SystemClock::new()),
    );
    let (a, b) = ("caller-a", "caller-b");
    let (ia, ib) = (caller_index(a.as_bytes(), 4), caller_index(b.as_bytes(), 4));
    assert_ne!(ia, ib, "two sub-keys");
    let key_of = |i| {
        let prefix = subkey::sub_prefix("t", "api", 4, i);
        String::from_utf8(subkey::ledger_key(prefix.as_bytes(), b"k", 4, i)).unwrap()
    };
    for _ in 0..2 {
        assert_eq!(
            m.decide_for(P, b"k", a.as_bytes()).await.outcome,
            Outcome::Allowed
        );
    }
    let d = m.decide_for(P, b"k", a.as_bytes()).await;
    assert_eq!((d.outcome, d.limit), (Outcome::Limited, 2));
    let leases = fake.calls("TOKENLEASE");
    assert_eq!(
        m.decide_for(P, b"k", a.as_bytes()).await.outcome,
        Outcome::Limited
    );
    assert_eq!(fake.calls("TOKENLEASE"), leases, "blocked: no ledger call");
    // Another sub-key admits; it leased its whole share, 2.
    assert_eq!(
        m.decide_for(P, b"k", b.as_bytes()).await.outcome,
        Outcome::Allowed
    );
    assert_eq!(fake.tokens(&key_of(ia)), Some(0));
    assert_eq!(fake.tokens(&key_of(ib)), Some(0));
    assert_eq!(m.local_tokens(P, b"k"), 1, "b's one unspent token");
    assert_eq!(fake.tokens("t:api:k"), None, "the one key is never used");
    m.shutdown().await;
    assert_eq!(fake.tokens(&key_of(ib)), Some(1), "returned to b's sub-key");
    let returned: Vec<String> = fake
        .log()
        .iter()
        .filter(|c| c[0].eq_ignore_ascii_case(b"TOKENRETURN"))
        .map(|c| String::from_utf8_lossy(&c[1]).into_owned())
        .collect();
    assert_eq!(returned, [key_of(ib)]);
    // One sub-key: the one key, the caller unread.
    let one = LeaseManager::new(
        fake_client(fake.addr),
        &set,
        LeaseConfig::default(),
        Arc::new(SystemClock::new()),
    );
    let d = one.decide_for(P, b"one", a.as_bytes()).await;
    assert_eq!((d.outcome, d.limit), (Outcome::Allowed, 8));
    let d = one.decide_for(P, b"one", b.as_bytes()).await;
    assert_eq!((d.outcome, d.remaining), (Outcome::Allowed, 6));
    assert_eq!(fake.tokens("t:api:one"), Some(3), "one lease of 5");
    one.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spread_tenant_lives_on_every_group_and_spends_exactly_its_limit() {
    const N: u32 = 6;
    const BURST: u64 = 600;
    let c = cluster();
    let set = tenant_policy(BURST, 6, N);
    let m = manager(&c, &set, LeaseConfig::default());
    let who = callers(300);
    let mut per_sub = [0usize; N as usize];
    for w in &who {
        per_sub[caller_index(w.as_bytes(), N) as usize] += 1;
    }
    assert!(
        per_sub.iter().all(|&k| k > 20),
        "callers per sub-key {per_sub:?}"
    );
    // 2400 requests, four times the limit: every sub-key runs dry.
    let mut allowed = 0u64;
    for round in 0..8 {
        for w in &who {
            let d = m.decide_for(P, b"acme", w.as_bytes()).await;
            match d.outcome {
                Outcome::Allowed => allowed += 1,
                Outcome::Limited => {}
                other => panic!("round {round}, caller {w}: {other:?}"),
            }
            // A decision reports its sub-key's share.
            let i = caller_index(w.as_bytes(), N);
            assert_eq!(d.limit, share(6, N, i), "{w}");
        }
    }
    assert_eq!(allowed, BURST, "the sub-keys' shares add up to the limit");
    assert!(
        !m.decide(P, b"acme").await.allowed,
        "no sub-key has a token"
    );
    let client = c.client();
    client.connect().await.unwrap();
    for i in 0..N {
        let key = sub_ledger_key("acme", N, i);
        let slot = key_slot(&key);
        assert!(part(N, i).contains(&slot), "sub-key {i} in slot {slot}");
        // Two parts of six a group.
        let group = Cluster::group_of(slot);
        assert_eq!(group, i as usize / 2, "sub-key {i}");
        assert_eq!(client.slot_owner(&key), Some(c.addr(group)));
        // Its bucket is on that node, empty.
        let params = BucketParams {
            capacity: share(BURST, N, i),
            rate: 1,
            period_ms: 3_600_000,
        };
        let peek = client.token_lease(&key, params, 0, 0).await.unwrap();
        assert_eq!(peek.remaining, 0, "sub-key {i}");
        assert_eq!(
            call(
                c.ports[group],
                &["EXISTS", std::str::from_utf8(&key).unwrap()]
            ),
            Some(Reply::Int(1))
        );
    }
    // The one key was never made; every node leased for the tenant.
    let one = "c:tenant:acme";
    let owner = Cluster::group_of(key_slot(one.as_bytes()));
    assert_eq!(call(c.ports[owner], &["EXISTS", one]), Some(Reply::Int(0)));
    let leases = leases_per_node(&c);
    // Each node's two sub-keys: at least one grant and one denial each.
    assert!(
        leases.iter().all(|&n| n >= 4),
        "TOKENLEASE per node {leases:?}"
    );
    m.shutdown().await;
}

/// 4000 decisions of one hot tenant from 1000 callers with leases of 5
/// tokens: N = 1 leases on one node only, at the one key (today's
/// behaviour); N = 16 leases on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hot_tenants_ledger_calls_spread_over_the_nodes() {
    let c = cluster();
    let config = LeaseConfig {
        min_lease: 5,
        max_lease: 5,
        ..LeaseConfig::default()
    };
    let who = callers(1000);
    let mut rows = Vec::new();
    for n in [1, 16] {
        let before = leases_per_node(&c);
        let set = tenant_policy(1_000_000, 1_000_000, n);
        let m = manager(&c, &set, config.clone());
        let tenant = format!("hot{n}");
        for r in 0..4000 {
            let w = &who[(r * 7919) % who.len()];
            let d = m.decide_for(P, tenant.as_bytes(), w.as_bytes()).await;
            assert_eq!(d.outcome, Outcome::Allowed, "N = {n}, request {r}");
        }
        m.shutdown().await;
        let after = leases_per_node(&c);
        let calls: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let total: u64 = calls.iter().sum();
        println!("N = {n:>2}: TOKENLEASE calls per node {calls:?} (total {total})");
        assert!(total >= 4000 / 5, "N = {n}: {calls:?}");
        if n == 1 {
            let key = format!("c:tenant:{tenant}");
            let owner = Cluster::group_of(key_slot(key.as_bytes()));
            assert_eq!(calls[owner], total, "N = 1: the one key's node only");
            assert_eq!(call(c.ports[owner], &["EXISTS", &key]), Some(Reply::Int(1)));
        } else {
            assert!(
                calls.iter().all(|&k| k * 5 >= total),
                "N = {n}: each node at least a fifth, {calls:?}"
            );
        }
        rows.push(calls);
    }
    let max_share =
        |calls: &Vec<u64>| *calls.iter().max().unwrap() as f64 / calls.iter().sum::<u64>() as f64;
    println!(
        "busiest node's share of the tenant's ledger calls: N = 1 {:.0}%, N = 16 {:.0}%",
        100.0 * max_share(&rows[0]),
        100.0 * max_share(&rows[1])
    );
}

/// Who sends a run's requests.
#[derive(Debug, Clone, Copy)]
enum Callers {
    /// Uniformly one of 1000 callers.
    Uniform,
    /// One of 1000 callers by Zipf's law (s = 1: the k-th most frequent
    /// sends 1/k as much as the first, who sends 13% of all requests).
    Zipf,
    /// One caller.
    One,
    /// No caller: `decide`, a random sub-key a request.
    None,
}

/// One run's outcome.
struct Run {
    admitted: u64,
    /// Denials while the tenant's total still had tokens (fewer than the
    /// burst admitted: nothing refills, and one gateway decides).
    false_denials: u64,
    /// The most requests one sub-key got, and its share of the burst.
    heaviest: (u64, u64),
}

/// `offered` requests of tenant `key` from `who` under `m` (policy of
/// `burst` spread over `n`), in order.
async fn run(m: &LeaseManager, key: &str, who: Callers, offered: u64, burst: u64, n: u32) -> Run {
    let pool = callers(1000);
    // Zipf's cumulative weights.
    let mut cdf = Vec::with_capacity(pool.len());
    let mut sum = 0.0;
    for k in 1..=pool.len() {
        sum += 1.0 / k as f64;
        cdf.push(sum);
    }
    let mut rng = fastrand::Rng::with_seed(7);
    let (mut admitted, mut false_denials) = (0, 0);
    let mut per_sub = vec![0u64; n as usize];
    for _ in 0..offered {
        let caller = match who {
            Callers::Uniform => Some(&pool[rng.usize(..pool.len())]),
            Callers::Zipf => {
                let u = rng.f64() * sum;
                Some(&pool[cdf.partition_point(|&c| c < u).min(pool.len() - 1)])
            }
            Callers::One => Some(&pool[0]),
            Callers::None => None,
        };
        let d = match caller {
            Some(w) => {
                per_sub[caller_index(w.as_bytes(), n) as usize] += 1;
                m.decide_for(P, key.as_bytes(), w.as_bytes()).await
            }
            None => m.decide(P, key.as_bytes()).await,
        };
        match d.outcome {
            Outcome::Allowed => admitted += 1,
            Outcome::Limited if admitted < burst => false_denials += 1,
            Outcome::Limited => {}
            other => panic!("{who:?}: {other:?}"),
        }
    }
    let (i, most) = per_sub
        .iter()
        .enumerate()
        .max_by_key(|&(_, &r)| r)
        .map(|(i, &r)| (i as u32, r))
        .unwrap();
    Run {
        admitted,
        false_denials,
        heaviest: (most, share(burst, n, i)),
    }
}

/// A budget of 1000 (refilled at 16 an hour), offered 1000 and 2000
/// requests, decided as one key and spread over 16 sub-keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accuracy_against_one_key() {
    const BURST: u64 = 1000;
    const N: u32 = 16;
    let c = cluster();
    let one = manager(&c, &tenant_policy(BURST, 16, 1), LeaseConfig::default());
    let spread = manager(&c, &tenant_policy(BURST, 16, N), LeaseConfig::default());
    println!("| callers | offered | one key admits | {N} sub-keys admit | false denials | busiest sub-key: requests / share |");
    println!("|---|---|---|---|---|---|");
    for who in [Callers::Uniform, Callers::Zipf, Callers::One, Callers::None] {
        for offered in [BURST, 2 * BURST] {
            let key = format!("{who:?}-{offered}");
            let a = run(&one, &key, who, offered, BURST, 1).await;
            let b = run(&spread, &key, who, offered, BURST, N).await;
            let heaviest = match who {
                Callers::None => "-".to_string(),
                _ => format!("{} / {}", b.heaviest.0, b.heaviest.1),
            };
            println!(
                "| {who:?} | {offered} | {} | {} ({:.1}%) | {} | {heaviest} |",
                a.admitted,
                b.admitted,
                100.0 * b.admitted as f64 / a.admitted as f64,
                b.false_denials,
            );
            // One key admits the whole budget, never falsely denies.
            assert_eq!((a.admitted, a.false_denials), (BURST, 0), "{who:?}");
            // Sub-keys never admit more than one key.
            assert!(
                b.admitted <= a.admitted,
                "{who:?} {offered}: {}",
                b.admitted
            );
            match who {
                // One caller gets its own sub-key's share, exactly.
                Callers::One => {
                    let i = caller_index(callers(1)[0].as_bytes(), N);
                    assert_eq!(b.admitted, share(BURST, N, i));
                    assert_eq!(b.false_denials, offered - b.admitted);
                }
                Callers::Uniform | Callers::None if offered == 2 * BURST => {
                    assert!(b.admitted * 100 >= BURST * 95, "{who:?}: {}", b.admitted);
                }
                Callers::Zipf => {
                    // The busiest caller's sub-key runs dry first.
                    assert!(b.heaviest.0 > b.heaviest.1, "{:?}", b.heaviest);
                    assert!(b.false_denials > 0);
                }
                _ => {}
            }
        }
    }
    one.shutdown().await;
    spread.shutdown().await;
}
