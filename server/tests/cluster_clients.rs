//! Stock cluster clients against a full cluster of real processes on
//! loopback: `leasehold-cluster local --groups 3 --replicas 1` (three
//! groups of a primary and a replica, three stock sentinels), started once
//! per test and stopped with SIGTERM.
//!
//! - ioredis's `Cluster` (Node, `server/tests/ioredis/cluster.js`, ioredis
//!   pinned by its `package-lock.json`): GET, SET and INCR on a key of every
//!   group, TOKENLEASE and SLIDINGWINDOW through `cluster.call`, MSET and
//!   MGET under a hash tag, a cross-slot MSET refused by the server.
//! - `redis-benchmark --cluster`: SET, GET, INCR, TOKENLEASE,
//!   SLIDINGWINDOW and a two-key MSET on `{tag}` keys, with the
//!   benchmark's own words (`leasehold-bench`).
//! - redis-py's `RedisCluster`: the script `cluster.rs` runs on three
//!   primaries.
//! - redis-rs's async cluster client: the same commands, seeded with a
//!   replica's address.
//! - A failover of one group while `leasehold-client` in cluster mode
//!   leases on keys of all three: group g0's primary is killed (SIGKILL);
//!   only g0's keys fail, only until the sentinels' promoted replica serves
//!   them, the same client recovers by itself, and g0's buckets keep the
//!   balance they had (no refill).
//!
//! The external programs are looked up first: without them a test prints a
//! notice and passes, unless the variable CI sets is `1`, which makes it
//! fail: `LEASEHOLD_REQUIRE_IOREDIS` (node, and ioredis 5.9.3 installed by
//! `npm ci` in `server/tests/ioredis`), `LEASEHOLD_REQUIRE_REDIS`
//! (redis-benchmark, redis-server for the sentinels),
//! `LEASEHOLD_REQUIRE_REDIS_PY` (redis-py).

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_bench::compare::{cluster as bench_cluster, redis_benchmark, workloads};
use leasehold_client::{BucketParams, Client, ClientConfig};
use leasehold_testkit::{call, probe_runs, text, tool_installed, wait_for, Conn, Reply};
use parking_lot::Mutex;

mod common;

use common::local::{self, Local};
use common::{key_in, slot};

/// Where the ioredis program and its pinned packages are.
const IOREDIS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ioredis");

/// The ioredis version `package-lock.json` pins.
const IOREDIS_VERSION: &str = "5.9.3";

/// One key per group of `local`, `<prefix><n>`.
fn key_per_group(local: &Local, prefix: &str) -> Vec<String> {
    local
        .groups
        .iter()
        .map(|g| key_in(prefix, g.slots.0, g.slots.1))
        .collect()
}

/// `leasehold-cluster local`, its replicas linked.
fn linked_cluster() -> Local {
    let local = local::start();
    local.wait_linked(Duration::from_secs(15));
    local
}

#[test]
fn ioredis_cluster_runs_rate_limits_and_tagged_multi_key_commands_on_every_group() {
    let probe = format!(
        "process.exit(require('{IOREDIS_DIR}/node_modules/ioredis/package.json').version === '{IOREDIS_VERSION}' ? 0 : 1)"
    );
    if !probe_runs(
        "node",
        &["-e", &probe],
        "LEASEHOLD_REQUIRE_IOREDIS",
        &format!(
            "node or ioredis {IOREDIS_VERSION} is missing (cd server/tests/ioredis && npm ci)"
        ),
        "the ioredis cluster test",
    ) {
        return;
    }
    let start = Instant::now();
    let local = linked_cluster();
    let keys = key_per_group(&local, "io:");
    let out = Command::new("node")
        .arg(format!("{IOREDIS_DIR}/cluster.js"))
        .arg(local.base.to_string())
        .args(&keys)
        .output()
        .expect("run node");
    let log = String::from_utf8_lossy(&out.stdout);
    eprintln!("ioredis:\n{log}");
    assert!(
        out.status.success(),
        "{log}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut want = vec!["masters 3".to_string(), "replicas 3".to_string()];
    for g in 0..keys.len() {
        want.extend([
            format!("set {g} \"OK\""),
            format!("get {g} \"v{g}\""),
            format!("incr {g} [1,2]"),
            // 10 tokens: 4 granted (6 left), 4 granted (2 left), 4 denied.
            format!("tokenlease {g} [[4,6,false],[4,2,false],[0,2,true]]"),
            // A limit of 2: admitted, admitted, denied.
            format!("slidingwindow {g} [[1,1],[1,2],[0,2]]"),
        ]);
    }
    want.extend([
        "mset \"OK\"".to_string(),
        "mget [\"1\",\"2\"]".to_string(),
        "crossslot \"CROSSSLOT Keys in request don't hash to the same slot\"".to_string(),
    ]);
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines, want, "{log}");
    // Each key is on its own group's primary.
    for (g, key) in keys.iter().enumerate() {
        let primary = local.groups[local.group_of(slot(key))].primary;
        assert_eq!(local.group_of(slot(key)), g);
        assert_eq!(
            call(primary, &["GET", key]),
            Some(Reply::bulk(format!("v{g}")))
        );
    }
    eprintln!("ioredis cluster test: {:?}", start.elapsed());
    assert!(
        start.elapsed() < Duration::from_secs(45),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn redis_benchmark_cluster_runs_plain_rate_limit_and_tagged_multi_key_commands_without_errors() {
    if !tool_installed(
        "redis-benchmark",
        "--version",
        "LEASEHOLD_REQUIRE_REDIS",
        "the redis-benchmark --cluster test",
    ) {
        return;
    }
    let start = Instant::now();
    let local = linked_cluster();
    // A run of 2000 lasted about 0.27 s: a node not scheduled for a
    // fraction of it under load ran almost none of it (twice in nine runs
    // of the suite, one primary had no MSET or under 100 calls); 10000
    // keep every primary's share well above the bound below.
    let requests = 10000;
    let native = workloads::SCRIPT_BUCKET.1.command;
    assert!(native.starts_with("TOKENLEASE "), "{native}");
    let window = workloads::RATE_LIMITS[1].1 .1.command;
    assert!(window.starts_with("SLIDINGWINDOW "), "{window}");
    // Two keys under the connection's one `{tag}`: one slot, its node's.
    let tagged_mset = "MSET a:__key__ 1 b:__key__ 2";
    let runs = [
        (
            bench_cluster::builtin_args(local.base, requests, 1),
            vec!["SET", "GET", "INCR"],
        ),
        (
            bench_cluster::script_args(local.base, requests, 1, native, ""),
            vec!["TOKENLEASE"],
        ),
        (
            bench_cluster::script_args(local.base, requests, 1, window, ""),
            vec!["SLIDINGWINDOW"],
        ),
        (
            bench_cluster::script_args(local.base, requests, 1, tagged_mset, ""),
            vec!["MSET"],
        ),
    ];
    for (args, tests) in runs {
        let t = Instant::now();
        let out = Command::new("redis-benchmark")
            .args(&args)
            .output()
            .expect("run redis-benchmark");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "redis-benchmark {} ({:?}):\n{stdout}",
            args.join(" "),
            t.elapsed()
        );
        assert!(out.status.success(), "{stdout}\n{stderr}");
        let all = format!("{stdout}\n{stderr}");
        for bad in ["Error", "ERR", "MOVED", "CLUSTERDOWN", "CROSSSLOT"] {
            assert!(!all.contains(bad), "{bad} in\n{all}");
        }
        let rows = redis_benchmark::parse_csv(&stdout);
        let names: Vec<&str> = rows
            .iter()
            .map(|r| r.test.split(' ').next().unwrap_or(""))
            .collect();
        assert_eq!(names, tests, "{stdout}");
        for r in &rows {
            assert!(r.rps > 0.0, "{} at {} requests/s", r.test, r.rps);
        }
    }
    // Every group's primary ran its share, none failed (a bucket of 100
    // refilling 10 a second is full again, so gone, 100 ms after a lease:
    // the calls are counted, not the keys).
    for g in &local.groups {
        let stats = call(g.primary, &["INFO", "commandstats"]).map(|r| text(&r));
        let stats = stats.unwrap_or_default();
        for cmd in ["set", "get", "incr", "tokenlease", "slidingwindow", "mset"] {
            let line = stats
                .lines()
                .find(|l| l.starts_with(&format!("cmdstat_{cmd}:")))
                .unwrap_or_else(|| panic!("no {cmd} on {}: {stats}", g.name));
            let field = |name: &str| -> u64 {
                line.split([':', ','])
                    .find_map(|f| f.strip_prefix(&format!("{name}=")))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{name} in {line}"))
            };
            assert!(field("calls") > 100, "{}: {line}", g.name);
            assert_eq!(field("failed_calls"), 0, "{}: {line}", g.name);
            assert_eq!(field("rejected_calls"), 0, "{}: {line}", g.name);
        }
    }
    eprintln!("redis-benchmark cluster test: {:?}", start.elapsed());
    assert!(
        start.elapsed() < Duration::from_secs(50),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn redis_py_cluster_client_runs_on_three_groups_with_replicas() {
    if !common::redis_py::installed("the redis-py full-cluster test") {
        return;
    }
    let start = Instant::now();
    let local = linked_cluster();
    common::redis_py::run_and_check(local.base + 1);
    // The writes reached every group and its replica.
    for g in &local.groups {
        let on = |p: u16| match call(p, &["DBSIZE"]) {
            Some(Reply::Int(n)) => n,
            other => panic!("DBSIZE on {p}: {other:?}"),
        };
        let n = on(g.primary);
        assert!(n > 5, "{}: {n} keys", g.name);
        wait_for(
            "the replica has its primary's keys",
            Duration::from_secs(5),
            || on(g.replicas[0]) == n,
        );
    }
    eprintln!("redis-py full-cluster test: {:?}", start.elapsed());
    assert!(
        start.elapsed() < Duration::from_secs(45),
        "{:?}",
        start.elapsed()
    );
}

/// `args` (name first) sent through redis-rs's cluster connection `c`,
/// whose reply must be an array of four integers.
async fn four_ints(c: &mut redis::cluster_async::ClusterConnection, args: &[&str]) -> Vec<i64> {
    let r: Vec<i64> = redis::cmd(args[0])
        .arg(&args[1..])
        .query_async(c)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert_eq!(r.len(), 4, "{args:?}: {r:?}");
    r
}

/// redis-rs's async cluster client (`redis::cluster_async`) on the full
/// cluster, seeded with one replica's address: it reads the slot map
/// (primaries and replicas) from CLUSTER SLOTS and runs, on a key of every
/// group, SET/GET, INCR, TOKENLEASE and SLIDINGWINDOW (10 tokens at 1 an
/// hour: 4 granted, 4 granted, denied; a limit of 2 a minute: admitted,
/// admitted, denied), then MSET/MGET under one hash tag and across slots
/// (which the client splits by slot). The values are then read on each
/// group's primary.
#[test]
fn redis_rs_cluster_client_runs_on_three_groups_with_replicas() {
    let start = Instant::now();
    let local = linked_cluster();
    let keys = key_per_group(&local, "rs:");
    let seed = local.groups[0].replicas[0];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let client = redis::cluster::ClusterClient::new(vec![format!("redis://127.0.0.1:{seed}/")])
            .expect("a cluster client");
        let mut c = client.get_async_connection().await.expect("the slot map");
        for (g, key) in keys.iter().enumerate() {
            let set: String = redis::cmd("SET")
                .arg(key)
                .arg(format!("v{g}"))
                .query_async(&mut c)
                .await
                .expect("SET");
            assert_eq!(set, "OK");
            let got: String = redis::cmd("GET")
                .arg(key)
                .query_async(&mut c)
                .await
                .expect("GET");
            assert_eq!(got, format!("v{g}"));
            let n = format!("{{{key}}}:n");
            for want in [1, 2] {
                let v: i64 = redis::cmd("INCR")
                    .arg(&n)
                    .query_async(&mut c)
                    .await
                    .expect("INCR");
                assert_eq!(v, want, "{n}");
            }
            let tb = format!("{{{key}}}:tb");
            let mut leases = Vec::new();
            for _ in 0..3 {
                // granted, remaining, retry_after_ms, reset_after_ms
                let r = four_ints(&mut c, &["TOKENLEASE", &tb, "10", "1", "3600000", "4"]).await;
                leases.push((r[0], r[1], r[2] > 0));
            }
            assert_eq!(leases, [(4, 6, false), (4, 2, false), (0, 2, true)], "{tb}");
            let sw = format!("{{{key}}}:sw");
            let mut window = Vec::new();
            for _ in 0..3 {
                // admitted, count, then two times (ms)
                let hit = four_ints(&mut c, &["SLIDINGWINDOW", &sw, "2", "60000"]).await;
                window.push((hit[0], hit[1]));
            }
            assert_eq!(window, [(1, 1), (1, 2), (0, 2)], "{sw}");
        }
        let ok: String = redis::cmd("MSET")
            .arg(&["{rs}:a", "1", "{rs}:b", "2"])
            .query_async(&mut c)
            .await
            .expect("MSET");
        assert_eq!(ok, "OK");
        let both: Vec<String> = redis::cmd("MGET")
            .arg(&["{rs}:a", "{rs}:b"])
            .query_async(&mut c)
            .await
            .expect("MGET");
        assert_eq!(both, ["1", "2"]);
        // redis-rs splits a cross-slot MSET by slot itself (each part to
        // its owner), so it is served rather than refused.
        assert!(slot("rs:a") != slot("rs:b"));
        let ok: String = redis::cmd("MSET")
            .arg(&["rs:a", "3", "rs:b", "4"])
            .query_async(&mut c)
            .await
            .expect("a cross-slot MSET, split by the client");
        assert_eq!(ok, "OK");
        let both: Vec<String> = redis::cmd("MGET")
            .arg(&["rs:a", "rs:b"])
            .query_async(&mut c)
            .await
            .expect("a cross-slot MGET, split by the client");
        assert_eq!(both, ["3", "4"]);
    });
    for (g, key) in keys.iter().enumerate() {
        let group = &local.groups[local.group_of(slot(key))];
        assert_eq!(local.group_of(slot(key)), g);
        assert_eq!(
            call(group.primary, &["GET", key]),
            Some(Reply::bulk(format!("v{g}")))
        );
    }
    eprintln!("redis-rs full-cluster test: {:?}", start.elapsed());
}

/// Whether the sentinel on `sentinel` names 127.0.0.1:`port` the primary
/// of `master`.
fn names_primary(sentinel: u16, master: &str, port: u16) -> bool {
    let name = call(sentinel, &["SENTINEL", "get-master-addr-by-name", master]);
    matches!(&name, Some(Reply::Array(a)) if a.len() == 2 && text(&a[1]) == port.to_string())
}

/// One lease call of the failover test: when it was sent and when it
/// finished (since the test's start), and the remaining tokens, or the error.
#[derive(Debug, Clone)]
struct Sample {
    started: Duration,
    finished: Duration,
    result: Result<u64, String>,
}

impl Sample {
    /// A grant asked for after `instant`.
    fn ok_after(&self, instant: Duration) -> bool {
        self.started > instant && self.result.is_ok()
    }
}

/// Leases 1 token of `key` every `pause` until `stop`, recording each call.
async fn lease_loop(
    client: Client,
    key: String,
    pause: Duration,
    params: BucketParams,
    t0: Instant,
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
) {
    while !stop.load(Ordering::Relaxed) {
        let started = t0.elapsed();
        let r = client.token_lease(key.as_bytes(), params, 1, 1).await;
        let result = match r {
            Ok(l) if l.granted == 1 => Ok(l.remaining),
            Ok(l) => Err(format!("denied: {l:?}")),
            Err(e) => Err(e.to_string()),
        };
        samples.lock().push(Sample {
            started,
            finished: t0.elapsed(),
            result,
        });
        tokio::time::sleep(pause).await;
    }
}

#[test]
fn a_group_failover_under_a_leasing_cluster_client_fails_only_that_groups_keys_briefly() {
    if !leasehold_testkit::sentinel_installed("the cluster client failover test") {
        return;
    }
    let t0 = Instant::now();
    let local = linked_cluster();
    assert_eq!(local.sentinels.len(), 3, "{}", local.printed);
    let ready = local.wait_sentinels_ready(Duration::from_secs(30));
    eprintln!("sentinels ready to fail over {ready:?} after the replicas linked");
    let g0 = local.groups[0].clone();
    let keys = key_per_group(&local, "lease:");
    // A bucket that refills one token a day: any refill is visible.
    let params = BucketParams {
        capacity: 1_000_000,
        rate: 1,
        period_ms: 86_400_000,
    };
    let (capacity, rate, period) = ("1000", "1", "86400000");

    // A quiet g0 bucket: 400 of 1000 leased, acknowledged by the replica.
    let quiet = key_in("quiet:", g0.slots.0, g0.slots.1);
    let mut conn = Conn::open(g0.primary).expect("connect to g0's primary");
    let lease = conn
        .call(&["TOKENLEASE", &quiet, capacity, rate, period, "400"])
        .expect("a reply");
    let Reply::Array(fields) = &lease else {
        panic!("{lease:?}")
    };
    assert_eq!(fields[..2], [Reply::Int(400), Reply::Int(600)]);
    assert_eq!(conn.call(&["WAIT", "1", "2000"]), Some(Reply::Int(1)));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut config =
        ClientConfig::cluster(vec![SocketAddr::from(([127, 0, 0, 1], local.base + 3))]);
    // A debug build of six nodes on a shared 2-core machine.
    config.lease_deadline = Duration::from_millis(500);
    config.call_deadline = Duration::from_secs(1);
    let client = Client::new(config);
    let stop = Arc::new(AtomicBool::new(false));
    let samples: Vec<Arc<Mutex<Vec<Sample>>>> = (0..3).map(|_| Arc::default()).collect();
    let (killed, named, quiet_left, end_left) = rt.block_on(async {
        client
            .connect()
            .await
            .expect("the client loads the slot map");
        // g0's key far more often than the others': its failures would
        // open a breaker shared by all nodes between two of their calls
        // (the client keeps one per node).
        let loops: Vec<_> = keys
            .iter()
            .zip(&samples)
            .enumerate()
            .map(|(g, (key, s))| {
                let pause = Duration::from_millis(if g == 0 { 2 } else { 25 });
                tokio::spawn(lease_loop(
                    client.clone(),
                    key.clone(),
                    pause,
                    params,
                    t0,
                    stop.clone(),
                    s.clone(),
                ))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let pid = Local::pid_of(g0.primary);
        // SAFETY: kill(2) on a node `leasehold-cluster local` started for this test.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        let killed = t0.elapsed();
        // When a sentinel names the replica, noted by a thread of its own.
        let (sentinels, replica) = (local.sentinels.clone(), g0.replicas[0]);
        let named = std::thread::spawn(move || {
            let limit = Instant::now() + Duration::from_secs(20);
            while Instant::now() < limit {
                if sentinels
                    .iter()
                    .any(|&s| names_primary(s, "leasehold-g0", replica))
                {
                    return Some(t0.elapsed());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            None
        });
        // Until g0's key is leased again (the same client), at most 20 s.
        let limit = Instant::now() + Duration::from_secs(20);
        let back = |s: &Mutex<Vec<Sample>>| s.lock().iter().any(|x| x.ok_after(killed));
        while !back(&samples[0]) && Instant::now() < limit {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // A second of leasing on the promoted replica.
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.store(true, Ordering::Relaxed);
        for l in loops {
            l.await.expect("a lease loop");
        }
        let peek = |key: String, capacity: u64| {
            let client = client.clone();
            async move {
                let p = BucketParams { capacity, ..params };
                client
                    .token_lease(key.as_bytes(), p, 0, 0)
                    .await
                    .map(|l| l.remaining)
            }
        };
        let quiet_left = peek(quiet.clone(), 1000).await;
        let end_left = peek(keys[0].clone(), params.capacity).await;
        let named = named
            .join()
            .expect("the sentinel watch")
            .map(|at| at - killed);
        (killed, named, quiet_left, end_left)
    });

    let summary = |s: &[Sample]| {
        let errors = s.iter().filter(|x| x.result.is_err()).count();
        (s.len() - errors, errors)
    };
    let g0_samples = samples[0].lock().clone();
    // Recovered: the first grant asked for after the kill (one asked for
    // before it may still be answered, by the primary, after it).
    let back = g0_samples
        .iter()
        .find(|x| x.ok_after(killed))
        .map(|x| x.finished)
        .unwrap_or_else(|| panic!("g0's key never leased again after the kill"));
    let unavailable = back - killed;
    let (g0_ok, g0_err) = summary(&g0_samples);
    // Each kind of error (its text up to the first digit) and its count.
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for x in &g0_samples {
        if let Err(e) = &x.result {
            let kind: String = e.chars().take_while(|c| !c.is_ascii_digit()).collect();
            match kinds.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, n)) => *n += 1,
                None => kinds.push((kind, 1)),
            }
        }
    }
    eprintln!(
        "g0 failover: killed at {killed:?}; a sentinel named the replica {named:?} later; \
         g0's key leased again {unavailable:?} after the kill; g0 {g0_ok} leases, {g0_err} errors ({kinds:?}); \
         g1 {:?}, g2 {:?} (leases, errors)",
        summary(&samples[1].lock()),
        summary(&samples[2].lock())
    );
    // g1 and g2 never failed, and leased all along.
    for (g, s) in samples.iter().enumerate().skip(1) {
        let s = s.lock();
        let failed: Vec<&Sample> = s.iter().filter(|x| x.result.is_err()).collect();
        assert!(failed.is_empty(), "g{g} failed: {failed:?}");
        assert!(s.len() > 100, "g{g}: only {} leases", s.len());
    }
    // g0 failed only between the kill and its recovery, and recovered by
    // itself within 15 s.
    assert!(g0_err > 0, "no g0 error after its primary was killed");
    for x in g0_samples.iter().filter(|x| x.result.is_err()) {
        assert!(x.finished >= killed && x.finished <= back, "g0: {x:?}");
    }
    assert!(unavailable < Duration::from_secs(15), "{unavailable:?}");
    let before = g0_samples
        .iter()
        .filter(|x| x.finished < killed && x.result.is_ok())
        .count();
    assert!(before > 50, "only {before} g0 leases before the kill");
    // No refill: the quiet bucket has the 600 its primary had, and the
    // busy one lost at most the few grants not yet replicated at the kill
    // (a refilled bucket would have lost all of them).
    assert_eq!(quiet_left.expect("a peek at g0's quiet bucket"), 600);
    let consumed = params.capacity - end_left.expect("a peek at g0's busy bucket");
    let lost = g0_ok as i64 - consumed as i64;
    eprintln!("g0's busy bucket: {g0_ok} grants acknowledged, {consumed} consumed on the promoted replica ({lost} lost to asynchronous replication)");
    assert!(
        consumed <= (g0_ok + g0_err) as u64,
        "{consumed} > {g0_ok} + {g0_err}"
    );
    assert!(
        lost <= 20,
        "{lost} acknowledged grants lost of {before} before the kill"
    );
    drop(local);
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
}
