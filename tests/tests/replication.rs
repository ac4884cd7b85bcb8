//! Replication end to end, between servers in this process on loopback:
//! a full sync then the stream, between servers of different thread
//! counts; a partial resync after the link drops (and no second full
//! sync); promotion with `replid2`, after which a sibling replica and the
//! old primary continue partially from the new primary; and 100 000 random
//! commands, some during a full sync, after which every key's type, value
//! (or RLSTATE) and deadline are equal on primary and replicas.
//!
//! The servers share one hand-set clock, so rate-limit states read the same
//! everywhere and the comparison is exact.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_server::clock::ManualClock;
use leasehold_tests::busy::{eval, low_threshold, on_shard, wait_busy};
use leasehold_tests::replication::{assert_same, dump, field, follow, wait_caught_up};
use leasehold_tests::{keys_in_both_halves, resp, Raw, TestServer, T0_MS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CATCH_UP: Duration = Duration::from_secs(20);

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(T0_MS, 0))
}

/// Writes of every kind the stream carries, `n` keys of each.
fn write_mix(c: &mut leasehold_tests::Raw, tag: &str, n: usize) {
    let mut wire = Vec::new();
    for i in 0..n {
        let k = format!("{tag}:s{i}");
        wire.extend(resp(&[b"SET", k.as_bytes(), format!("v{i}").as_bytes()]));
        if i % 3 == 0 {
            let t = format!("{tag}:t{i}");
            wire.extend(resp(&[b"SET", t.as_bytes(), b"x", b"PX", b"500000"]));
        }
        let n = format!("{tag}:n{}", i % 7);
        wire.extend(resp(&[b"INCRBY", n.as_bytes(), b"3"]));
        let tb = format!("{tag}:tb{}", i % 50);
        wire.extend(resp(&[
            b"TOKENLEASE",
            tb.as_bytes(),
            b"2",
            b"100",
            b"60000",
            b"1",
        ]));
        let sw = format!("{tag}:sw{}", i % 50);
        wire.extend(resp(&[b"SLIDINGWINDOW", sw.as_bytes(), b"100", b"60000"]));
        let cl = format!("{tag}:cl{}", i % 50);
        wire.extend(resp(&[b"CL.THROTTLE", cl.as_bytes(), b"50", b"100", b"60"]));
        let g = format!("{tag}:g{}", i % 50);
        wire.extend(resp(&[b"GCRA", g.as_bytes(), b"50", b"100", b"60"]));
    }
    let replies = n * 6 + n.div_ceil(3);
    c.send(&wire);
    for _ in 0..replies {
        let r = c.read_text();
        assert!(!r.starts_with('-'), "a write failed: {r}");
    }
}

fn sync_count(s: &TestServer, name: &str) -> u64 {
    field(&mut s.raw(), "stats", name).parse().expect("a count")
}

fn full_sync_then_stream(primary_threads: usize, replica_threads: usize) {
    let clock = clock();
    let primary = TestServer::with_clock(primary_threads, clock.clone());
    let replica = TestServer::with_clock(replica_threads, clock.clone());
    let mut p = primary.raw();
    write_mix(&mut p, "a", 600);
    follow(&replica, &primary);
    wait_caught_up(&primary, &replica, CATCH_UP);
    let mut r = replica.raw();
    let before = dump(&mut p);
    assert!(before.len() > 900, "the mix wrote {} keys", before.len());
    assert_same(&dump(&mut r), &before, "after the full sync");
    assert_eq!(r.call("DBSIZE"), p.call("DBSIZE"));

    // The stream: new keys, changes, deletions, deadlines set and removed.
    write_mix(&mut p, "b", 300);
    for line in [
        "DEL a:s1 a:s2 a:s3",
        "EXPIRE a:s4 100",
        "PERSIST a:t3",
        "APPEND a:s5 tail",
        "MSET a:m1 1 a:m2 2 a:m3 3",
    ] {
        assert!(!p.call(line).starts_with('-'), "{line}");
    }
    wait_caught_up(&primary, &replica, CATCH_UP);
    assert_same(&dump(&mut r), &dump(&mut p), "after the stream");
    assert_eq!(
        r.call("PEXPIRETIME a:s4"),
        format!(":{}\r\n", T0_MS + 100_000)
    );
    assert_eq!(r.call("TTL a:t3"), ":-1\r\n");

    // A replica refuses writes, rate-limit commands included, and serves reads.
    let readonly = "-READONLY You can't write against a read only replica.\r\n";
    assert_eq!(r.call("SET x 1"), readonly);
    assert_eq!(r.call("TOKENLEASE a:tb1 1 100 60000 1"), readonly);
    assert_eq!(r.call("DEL a:s7"), readonly);
    assert_eq!(r.call("GET a:s7"), "$2\r\nv7\r\n");
    assert_eq!(r.call("RLSTATE a:tb1"), p.call("RLSTATE a:tb1"));

    // What Sentinel reads.
    assert_eq!(field(&mut r, "replication", "role"), "slave");
    assert_eq!(
        field(&mut r, "replication", "master_port"),
        primary.addr.port().to_string()
    );
    assert_eq!(field(&mut r, "replication", "master_link_status"), "up");
    assert_eq!(
        field(&mut r, "replication", "master_replid"),
        field(&mut p, "replication", "master_replid")
    );
    assert_eq!(field(&mut p, "replication", "role"), "master");
    assert_eq!(field(&mut p, "replication", "connected_slaves"), "1");
    let slave0 = field(&mut p, "replication", "slave0");
    assert!(
        slave0.starts_with(&format!(
            "ip=127.0.0.1,port={},state=online,offset=",
            replica.addr.port()
        )),
        "{slave0}"
    );
    assert_eq!(sync_count(&primary, "sync_full"), 1);
    assert!(p.call("ROLE").starts_with("*3\r\n$6\r\nmaster\r\n"));
    let role = r.call("ROLE");
    assert!(
        role.starts_with(&format!(
            "*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:{}\r\n$9\r\nconnected\r\n",
            primary.addr.port()
        )),
        "{role}"
    );
}

#[test]
fn full_sync_then_stream_2_to_1_threads() {
    full_sync_then_stream(2, 1);
}

#[test]
fn full_sync_then_stream_1_to_2_threads() {
    full_sync_then_stream(1, 2);
}

#[test]
fn a_dropped_link_resyncs_partially() {
    let clock = clock();
    let primary = TestServer::with_clock(2, clock.clone());
    let replica = TestServer::with_clock(2, clock.clone());
    let mut p = primary.raw();
    write_mix(&mut p, "a", 200);
    follow(&replica, &primary);
    wait_caught_up(&primary, &replica, CATCH_UP);
    // Cut the link from the replica's side: it reconnects with its replid
    // and offset, and the primary continues from there.
    let mut r = replica.raw();
    let kill = format!("CLIENT KILL ADDR 127.0.0.1:{}", primary.addr.port());
    assert_eq!(r.call(&kill), ":1\r\n");
    write_mix(&mut p, "b", 200);
    wait_caught_up(&primary, &replica, CATCH_UP);
    assert_same(&dump(&mut r), &dump(&mut p), "after the partial resync");
    assert_eq!(
        sync_count(&primary, "sync_full"),
        1,
        "one full sync, the first"
    );
    assert_eq!(sync_count(&primary, "sync_partial_ok"), 1);
}

#[test]
fn promotion_keeps_the_old_history_for_the_others() {
    let clock = clock();
    let primary = TestServer::with_clock(2, clock.clone());
    let r1 = TestServer::with_clock(2, clock.clone());
    let r2 = TestServer::with_clock(1, clock.clone());
    let mut p = primary.raw();
    write_mix(&mut p, "a", 200);
    follow(&r1, &primary);
    follow(&r2, &primary);
    let offset = wait_caught_up(&primary, &r1, CATCH_UP);
    wait_caught_up(&primary, &r2, CATCH_UP);
    let old_id = field(&mut p, "replication", "master_replid");

    let mut c1 = r1.raw();
    assert_eq!(c1.call("REPLICAOF NO ONE"), "+OK\r\n");
    assert_eq!(field(&mut c1, "replication", "role"), "master");
    assert_eq!(field(&mut c1, "replication", "master_replid2"), old_id);
    assert_eq!(
        field(&mut c1, "replication", "second_repl_offset"),
        (offset + 1).to_string()
    );
    assert_ne!(field(&mut c1, "replication", "master_replid"), old_id);
    assert_eq!(
        c1.call("SET promoted yes"),
        "+OK\r\n",
        "a promoted replica takes writes"
    );
    // Its link to the old primary is closed: the old primary counts one
    // replica (a write there now would end the others' partial resyncs).
    leasehold_tests::replication::wait_for_field(&primary, "connected_slaves", "1", CATCH_UP);

    // The sibling follows the new primary and continues where it was.
    follow(&r2, &r1);
    wait_caught_up(&r1, &r2, CATCH_UP);
    assert_eq!(r2.raw().call("GET promoted"), "$3\r\nyes\r\n");
    // The old primary, which wrote nothing since, comes back as a replica
    // of the new one, also without a full sync.
    follow(&primary, &r1);
    wait_caught_up(&r1, &primary, CATCH_UP);
    assert_eq!(p.call("GET promoted"), "$3\r\nyes\r\n");
    assert_eq!(sync_count(&r1, "sync_full"), 0);
    assert_eq!(sync_count(&r1, "sync_partial_ok"), 2);
    let want = dump(&mut c1);
    assert_same(&dump(&mut r2.raw()), &want, "the sibling");
    assert_same(&dump(&mut p), &want, "the old primary");
}

fn random_command(rng: &mut StdRng) -> Vec<u8> {
    let k = format!("k{}", rng.random_range(0..2000));
    let k2 = format!("k{}", rng.random_range(0..2000));
    let v = format!("v{}", rng.random_range(0..1000));
    let n = (1 + rng.random_range(0..5)).to_string();
    let ms = (1000 + rng.random_range(0..100_000)).to_string();
    let (k, k2, v, n, ms) = (
        k.as_bytes(),
        k2.as_bytes(),
        v.as_bytes(),
        n.as_bytes(),
        ms.as_bytes(),
    );
    match rng.random_range(0..21) {
        0 | 1 => resp(&[b"SET", k, v]),
        2 => resp(&[b"SET", k, v, b"PX", ms]),
        3 => resp(&[b"INCRBY", k, n]),
        4 => resp(&[b"DEL", k, k2]),
        5 => resp(&[b"PEXPIRE", k, ms]),
        6 => resp(&[b"PERSIST", k]),
        7 => resp(&[b"APPEND", k, v]),
        8 => resp(&[b"MSET", k, v, k2, v]),
        9 => resp(&[b"TOKENLEASE", k, n, b"20", b"60000", b"1"]),
        10 => resp(&[b"TOKENRETURN", k, n, b"20", b"60000"]),
        11 => resp(&[b"SLIDINGWINDOW", k, b"20", ms]),
        12 => resp(&[b"CL.THROTTLE", k, b"10", b"20", b"60"]),
        13 => resp(&[b"GCRA", k, b"10", b"20", b"60"]),
        14 => resp(&[b"GETDEL", k]),
        15 => resp(&[b"RENAME", k, k2]),
        16 => resp(&[b"RENAMENX", k, k2]),
        17 => resp(&[b"COPY", k, k2, b"REPLACE"]),
        18 => resp(&[b"MSETNX", k, v, k2, v]),
        19 => resp(&[b"SETRANGE", k, n, v]),
        _ => resp(&[b"SETNX", k, v]),
    }
}

/// Sends `n` random commands in pipelined batches, moving the clock 1 ms
/// every batch; wrong-type errors are expected and ignored.
fn random_load(server: &TestServer, clock: &ManualClock, seed: u64, n: usize) {
    let mut c = server.raw();
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..n / 500 {
        let mut wire = Vec::new();
        for _ in 0..500 {
            wire.extend(random_command(&mut rng));
        }
        c.send(&wire);
        for _ in 0..500 {
            c.read_text();
        }
        clock.advance_ms(1);
    }
}

#[test]
fn random_commands_leave_equal_state_on_every_replica() {
    let clock = clock();
    let primary = TestServer::with_clock(2, clock.clone());
    let streamed = TestServer::with_clock(1, clock.clone());
    let synced = TestServer::with_clock(2, clock.clone());
    follow(&streamed, &primary);
    wait_caught_up(&primary, &streamed, CATCH_UP);
    random_load(&primary, &clock, 0x9E37_79B9_7F4A_7C15, 50_000);
    // The second replica's full sync runs while the other half is written.
    std::thread::scope(|s| {
        let load = s.spawn(|| random_load(&primary, &clock, 0xD1B5_4A32_D192_ED03, 50_000));
        follow(&synced, &primary);
        load.join().expect("the load ran");
    });
    wait_caught_up(&primary, &streamed, CATCH_UP);
    wait_caught_up(&primary, &synced, CATCH_UP);
    let want = dump(&mut primary.raw());
    assert!(want.len() > 1000, "{} keys", want.len());
    assert_same(
        &dump(&mut streamed.raw()),
        &want,
        "the replica that streamed everything",
    );
    assert_same(
        &dump(&mut synced.raw()),
        &want,
        "the replica synced during the load",
    );
}

/// RENAME, RENAMENX, COPY and MSETNX, with their keys on one shard and on
/// two, over strings with and without TTLs and over rate-limit states:
/// a replica (of another thread count) and a server loading the primary's
/// append-only log end with the primary's keyspace exactly.
#[test]
fn renames_and_copies_replay_exactly_on_a_replica_and_from_the_log() {
    let clock = clock();
    let dir = leasehold_testkit::scratch_dir();
    let mut config = TestServer::config(2);
    config.persistence.dir = dir.display().to_string();
    config.persistence.appendonly = true;
    let primary = TestServer::with_config(config.clone(), clock.clone());
    let replica = TestServer::with_clock(1, clock.clone());
    follow(&replica, &primary);
    wait_caught_up(&primary, &replica, CATCH_UP);
    let mut c = primary.raw();
    let keys = leasehold_tests::keys_in_both_halves("mv", 8);
    let k = |i: usize| keys[i].as_str();
    let script = [
        format!("SET {} v1 PX 90000", k(0)),
        format!("RENAME {} {}", k(0), k(1)),
        "SET {t}a v2 EX 500".to_string(),
        "RENAME {t}a {t}b".to_string(),
        format!("SET {} v3", k(2)),
        format!("RENAME {} {}", k(1), k(2)),
        format!("TOKENLEASE {} 10 1 1000 4", k(3)),
        format!("RENAME {} {}", k(3), k(4)),
        format!("SLIDINGWINDOW {} 10 60000 COUNT 3", k(5)),
        format!("COPY {} {}", k(5), k(6)),
        format!("GCRA {} 5 10 60", k(7)),
        format!("RENAMENX {} {}", k(7), k(0)),
        format!("COPY {} {} REPLACE", k(2), k(7)),
        format!("MSETNX {} m1 {} m2", k(3), k(5)),
        format!("MSETNX {} m1 {} m2 {{t}}c m3", k(1), k(3)),
        "COPY {t}b {t}c REPLACE".to_string(),
        format!("SETRANGE {} 2 xyz", k(2)),
    ];
    for line in &script {
        let r = c.call(line);
        assert!(!r.starts_with('-'), "{line}: {r}");
    }
    clock.advance_ms(1500);
    wait_caught_up(&primary, &replica, CATCH_UP);
    let want = dump(&mut c);
    assert_eq!(want.len(), 10, "{want:?}");
    assert_same(&dump(&mut replica.raw()), &want, "the replica");
    drop(c);
    drop(replica);
    drop(primary);
    let mut config = TestServer::config(1);
    config.persistence.dir = dir.display().to_string();
    config.persistence.appendonly = true;
    let reloaded = TestServer::with_config(config, clock.clone());
    assert_same(
        &dump(&mut reloaded.raw()),
        &want,
        "the server that loaded the log",
    );
}

#[test]
fn wait_counts_the_replicas_that_acknowledged() {
    let primary = TestServer::start(2);
    let mut p = primary.raw();
    assert_eq!(p.call("SET k 1"), "+OK\r\n");
    let start = std::time::Instant::now();
    assert_eq!(p.call("WAIT 1 100"), ":0\r\n", "no replica yet");
    assert!(
        start.elapsed() >= Duration::from_millis(100),
        "WAIT waited its timeout"
    );
    let replica = TestServer::start(1);
    follow(&replica, &primary);
    wait_caught_up(&primary, &replica, CATCH_UP);
    // Each write is acknowledged well before the 1 s periodic ACK: WAIT
    // asks the replica for one.
    for i in 0..20 {
        assert_eq!(p.call(&format!("INCR n{i}")), ":1\r\n");
        let start = std::time::Instant::now();
        assert_eq!(p.call("WAIT 1 5000"), ":1\r\n");
        assert!(
            start.elapsed() < Duration::from_millis(900),
            "WAIT took {:?}",
            start.elapsed()
        );
        assert_eq!(replica.raw().call(&format!("GET n{i}")), "$1\r\n1\r\n");
    }
    assert_eq!(
        p.call("WAIT 2 50"),
        ":1\r\n",
        "one replica of the two asked for"
    );
}

#[test]
fn a_record_bigger_than_the_backlog_keeps_the_replica_streaming() {
    let primary = TestServer::start(2);
    let replica = TestServer::start(2);
    follow(&replica, &primary);
    wait_caught_up(&primary, &replica, CATCH_UP);
    // 2 MB through the default 1 MB backlog.
    let big = vec![b'x'; 2_000_000];
    let mut p = primary.raw();
    assert_eq!(p.call_args(&[b"SET", b"big", &big]), "+OK\r\n");
    assert_eq!(p.call("SET after 1"), "+OK\r\n");
    wait_caught_up(&primary, &replica, CATCH_UP);
    assert_eq!(replica.raw().call("STRLEN big"), ":2000000\r\n");
    assert_eq!(sync_count(&primary, "sync_full"), 1, "no second full sync");
}

#[test]
fn a_replica_that_never_reads_does_not_hold_up_another_full_sync() {
    let primary = TestServer::start(2);
    let mut p = primary.raw();
    // About 8 MB of payload: more than loopback socket buffers hold.
    let value = "v".repeat(40);
    for chunk in 0..40 {
        let mut wire = Vec::new();
        for i in 0..5000 {
            let k = format!("k{chunk}:{i}");
            wire.extend(resp(&[b"SET", k.as_bytes(), value.as_bytes()]));
        }
        p.send(&wire);
        for _ in 0..5000 {
            p.read_text();
        }
    }
    // A replica that does the handshake, asks for a full sync, and stops.
    let mut stuck = std::net::TcpStream::connect(primary.addr).unwrap();
    use std::io::Write;
    let mut hello = Vec::new();
    hello.extend(resp(&[b"REPLCONF", b"capa", b"lh1"]));
    hello.extend(resp(&[b"PSYNC", b"?", b"-1"]));
    stuck.write_all(&hello).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let replica = TestServer::start(1);
    follow(&replica, &primary);
    wait_caught_up(&primary, &replica, Duration::from_secs(10));
    assert_eq!(replica.raw().call("DBSIZE"), ":200000\r\n");
    drop(stuck);
}

/// Run-time pins reach a replica twice over: the ones set before it
/// follows come with its full sync (which first drops any pin of its own),
/// the later ones with the stream; and they hold there as on the primary.
#[test]
fn pins_reach_a_replica_by_full_sync_and_by_stream() {
    let clock = clock();
    let primary = TestServer::with_clock(2, clock.clone());
    let replica = TestServer::with_clock(1, clock.clone());
    let mut p = primary.raw();
    let mut r = replica.raw();
    assert_eq!(p.call("LH.PIN rl: TOKENBUCKET 10 1 1000"), "+OK\r\n");
    assert_eq!(r.call("LH.PIN stale: GCRA 0 1 1000"), "+OK\r\n");
    follow(&replica, &primary);
    wait_caught_up(&primary, &replica, CATCH_UP);
    let pins =
        "*1\r\n*6\r\n$3\r\nrl:\r\n$7\r\nruntime\r\n$11\r\nTOKENBUCKET\r\n:10\r\n:1\r\n:1000\r\n";
    assert_eq!(
        r.call("LH.PINS"),
        pins,
        "the full sync's pins, and only them"
    );
    assert_eq!(p.call("LH.PIN w: SLIDINGWINDOW 5 1000"), "+OK\r\n");
    assert_eq!(p.call("LH.UNPIN rl:"), ":1\r\n");
    wait_caught_up(&primary, &replica, CATCH_UP);
    assert_eq!(r.call("LH.PINS"), p.call("LH.PINS"));
    assert_eq!(
        r.call("LH.PINS"),
        "*1\r\n*5\r\n$2\r\nw:\r\n$7\r\nruntime\r\n$13\r\nSLIDINGWINDOW\r\n:5\r\n:1000\r\n"
    );
    // Promoted, the replica refuses what the primary refused.
    assert_eq!(r.call("REPLICAOF NO ONE"), "+OK\r\n");
    assert_eq!(
        r.call("SLIDINGWINDOW w:k 500 1000"),
        "-ERR rate limit parameters of keys under 'w:' are pinned to SLIDINGWINDOW 5 1000\r\n"
    );
}

/// The replica class of `client-output-buffer-limit`: a replica that stops
/// reading keeps its link while its unwritten stream stays under the limit
/// (Redis's default: 256 MB hard, 64 MB for 60 s soft), and loses it once
/// the stream passes a lower hard limit set at run time.
#[test]
fn a_replica_past_its_output_limit_loses_its_link() {
    let primary = TestServer::start(2);
    let mut p = primary.raw();
    let connected = |p: &mut leasehold_tests::Raw| {
        let info = p.call("INFO replication");
        info.lines()
            .find_map(|l| l.strip_prefix("connected_slaves:"))
            .map(|n| n.trim().parse::<u32>().unwrap())
            .unwrap()
    };
    // A replica that does the handshake, asks for a full sync, and stops
    // reading.
    let mut stuck = std::net::TcpStream::connect(primary.addr).unwrap();
    use std::io::Write;
    let mut hello = Vec::new();
    hello.extend(resp(&[b"REPLCONF", b"capa", b"lh1"]));
    hello.extend(resp(&[b"PSYNC", b"?", b"-1"]));
    stuck.write_all(&hello).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while connected(&mut p) != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the replica never registered"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // `rounds` x 1 MB of stream.
    let write = |p: &mut leasehold_tests::Raw, tag: &str, rounds: usize| {
        let value = "v".repeat(200);
        for chunk in 0..rounds {
            let mut wire = Vec::new();
            for i in 0..5000 {
                let k = format!("{tag}{chunk}:{i}");
                wire.extend(resp(&[b"SET", k.as_bytes(), value.as_bytes()]));
            }
            p.send(&wire);
            for _ in 0..5000 {
                p.read_text();
            }
        }
    };
    write(&mut p, "a", 12);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(connected(&mut p), 1, "12 MB is under the default limits");
    assert_eq!(
        p.call_args(&[
            b"CONFIG",
            b"SET",
            b"client-output-buffer-limit",
            b"replica 1mb 0 0"
        ]),
        "+OK\r\n"
    );
    write(&mut p, "b", 4);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while connected(&mut p) != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the replica kept its link past 1 MB"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stuck);
}

/// A full sync's cut waits for every shard, and one kept busy by a script
/// is waited for at most 100 ms at a time: the other shard's writes enter
/// the stream meanwhile, each try is aborted before `+FULLRESYNC` and
/// retried after 1 s (a `\n` keepalive to the replica), and after 3 tries
/// the link closes. Once the script ends, a replica syncs.
#[test]
fn a_cut_that_waits_for_a_busy_shard_is_aborted_retried_and_given_up() {
    let primary = TestServer::start(2);
    let keys = keys_in_both_halves("k", 1);
    // The script keeps shard 1 busy; thread 0, which accepts connections,
    // serves the rest of the test.
    // (Connections made while it runs may land on the busy thread: every
    // one the test needs is made before.)
    let mut busy = on_shard(&primary, &keys, 1);
    let mut probes: Vec<Raw> = (0..62).map(|_| on_shard(&primary, &keys, 0)).collect();
    let mut p = probes.pop().expect("62 connections");
    // A replica's handshake, by hand, to see every byte of the answer.
    let mut replica = probes.pop().expect("62 connections");
    low_threshold(&mut p);
    busy.send(&eval("while true do end", &["0"]));
    wait_busy(&mut probes, &keys);
    let mut hello = resp(&[b"REPLCONF", b"capa", b"lh1"]);
    hello.extend(resp(&[b"PSYNC", b"?", b"-1"]));
    replica.send(&hello);
    let asked = Instant::now();
    // While the sender tries to cut, the free shard's writes reach the
    // stream within a try's bound (a hold until the script ends would keep
    // them out for good).
    let mut worst = Duration::ZERO;
    while asked.elapsed() < Duration::from_millis(1500) {
        let before: u64 = field(&mut p, "replication", "master_repl_offset")
            .parse()
            .unwrap();
        let wrote = Instant::now();
        assert_eq!(p.call(&format!("SET {} x", keys[0])), "+OK\r\n");
        while field(&mut p, "replication", "master_repl_offset")
            .parse::<u64>()
            .unwrap()
            == before
        {
            assert!(
                wrote.elapsed() < Duration::from_millis(500),
                "a write of the free shard held past the cut's bound"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        worst = worst.max(wrote.elapsed());
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("slowest write to enter the stream during the cut's tries: {worst:?}");
    // The answer: the REPLCONF's +OK, a keepalive before each of the two
    // retries, no +FULLRESYNC, then the link closes.
    replica.expect_closed_after("+OK\r\n\n\n", Duration::from_secs(10));
    let took = asked.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "three tries a second apart took {took:?}"
    );
    println!("the link closed {took:?} after PSYNC");
    // The script ends; a replica then syncs.
    assert_eq!(p.call("SCRIPT KILL"), "+OK\r\n");
    assert!(busy.read_text().starts_with("-ERR Script killed"));
    let follower = TestServer::start(2);
    follow(&follower, &primary);
    wait_caught_up(&primary, &follower, CATCH_UP);
    assert_eq!(
        follower.raw().call(&format!("GET {}", keys[0])),
        "$1\r\nx\r\n"
    );
    assert_eq!(sync_count(&primary, "sync_full"), 2);
}

/// A replica clears LOADING only once every record of its full sync's
/// payload is applied on every shard: a reader that pipelines `MGET` of
/// keys on all its shards during the sync gets `-LOADING` or every value,
/// never a part (the end mark is read while records before it still wait
/// for their shards).
#[test]
fn a_replica_serves_reads_only_once_its_whole_payload_is_applied() {
    let primary = TestServer::start(2);
    let keys: Vec<String> = (0..12).map(|i| format!("probe:{i}")).collect();
    let mut p = primary.raw();
    let mut wire = Vec::new();
    for i in 0..60_000 {
        let k = format!("filler:{i}");
        wire.extend(resp(&[b"SET", k.as_bytes(), b"some value of a filler key"]));
    }
    for k in &keys {
        wire.extend(resp(&[b"SET", k.as_bytes(), b"v"]));
    }
    p.send(&wire);
    for _ in 0..60_000 + keys.len() {
        p.read_text();
    }
    let mget = format!("MGET {}\r\n", keys.join(" "));
    let whole = format!("*{}\r\n{}", keys.len(), "$1\r\nv\r\n".repeat(keys.len()));
    // Writes to other keys go on meanwhile, so stream records follow the
    // payload's end mark in what the link reads.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (mut w, stop) = (primary.raw(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut wire = Vec::new();
                for i in 0..64 {
                    wire.extend(resp(&[
                        b"INCR",
                        format!("stream:{}", (n + i) % 500).as_bytes(),
                    ]));
                }
                w.send(&wire);
                for _ in 0..64 {
                    w.read_text();
                }
                n += 64;
            }
        })
    };
    for round in 0..3 {
        let replica = TestServer::start(3);
        let mut r = replica.raw();
        follow(&replica, &primary);
        let deadline = Instant::now() + CATCH_UP;
        let (mut loading, mut served) = (0, 0);
        while served < 50 {
            assert!(Instant::now() < deadline, "round {round}: never served");
            r.send(mget.repeat(8).as_bytes());
            for _ in 0..8 {
                let reply = r.read_text();
                if reply.starts_with("-LOADING") {
                    loading += 1;
                } else if reply.starts_with('*') {
                    // Before the sync starts the replica is empty: all nil.
                    let empty = format!("*{}\r\n{}", keys.len(), "$-1\r\n".repeat(keys.len()));
                    if reply == empty && served == 0 {
                        continue;
                    }
                    assert_eq!(
                        reply, whole,
                        "round {round}: a part of the payload was served"
                    );
                    served += 1;
                } else {
                    panic!("round {round}: {reply:?}");
                }
            }
        }
        eprintln!("round {round}: {loading} LOADING replies before the data");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().expect("the writer failed");
}
