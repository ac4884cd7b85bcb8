//! The key commands (TYPE, the EXPIRE and TTL families, PERSIST, KEYS, SCAN,
//! DBSIZE, FLUSHALL, FLUSHDB) over TCP, on 1 and 2 threads, on a hand-set
//! clock where TTLs must be exact: deadlines that overflow are refused, zero
//! and negative expiry deletes, EXPIRE's NX/XX/GT/LT, TTL rounding, the writes
//! that keep or clear a TTL, glob patterns, a SCAN that misses no key while
//! keys are added, and active expiry reclaiming keys no one reads.
//!
//! DEL, UNLINK and EXISTS over keys on both shards are in `strings.rs`,
//! with MGET and MSET.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use leasehold_tests::{
    block_on, info, info_fields, keys_in_both_halves, manual_server, on_1_and_2_threads, q, q_err,
    TestServer, LIMIT, T0_MS,
};
use redis::aio::MultiplexedConnection;

on_1_and_2_threads! {
    fn type_and_ttl_family(threads) {
        let (server, clock) = manual_server(threads);
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            q::<()>(&mut r, &["SET", "k", "v"]).await;
            q::<()>(&mut r, &["INCR", "n"]).await;
            assert_eq!(q::<String>(&mut r, &["TYPE", "k"]).await, "string");
            assert_eq!(q::<String>(&mut r, &["TYPE", "n"]).await, "string");
            assert_eq!(q::<String>(&mut r, &["TYPE", "nokey"]).await, "none");
            for c in ["TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"] {
                assert_eq!(q::<i64>(&mut r, &[c, "nokey"]).await, -2, "{c}");
                assert_eq!(q::<i64>(&mut r, &[c, "k"]).await, -1, "{c}");
            }
            let at = (T0_MS + 5500).to_string();
            assert_eq!(q::<i64>(&mut r, &["PEXPIREAT", "k", &at]).await, 1);
            // TTL rounds the remaining 5.5 s to the nearest second, as Redis.
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, 6);
            assert_eq!(q::<i64>(&mut r, &["PTTL", "k"]).await, 5500);
            // EXPIRETIME rounds to the nearest second as well (Redis 7.0.15 gives 1700000006).
            assert_eq!(q::<i64>(&mut r, &["EXPIRETIME", "k"]).await, (T0_MS + 6000) as i64 / 1000);
            assert_eq!(q::<i64>(&mut r, &["PEXPIRETIME", "k"]).await, (T0_MS + 5500) as i64);
            assert_eq!(q::<i64>(&mut r, &["PERSIST", "k"]).await, 1);
            assert_eq!(q::<i64>(&mut r, &["PERSIST", "k"]).await, 0);
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, -1);
            let at_s = (T0_MS / 1000 + 30).to_string();
            assert_eq!(q::<i64>(&mut r, &["EXPIREAT", "k", &at_s]).await, 1);
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, 30);
            assert_eq!(q::<i64>(&mut r, &["PEXPIRE", "k", "200"]).await, 1);
            assert_eq!(q::<i64>(&mut r, &["PEXPIRE", "k", "300", "LT"]).await, 0);
            assert_eq!(q::<i64>(&mut r, &["PEXPIRE", "k", "300", "GT"]).await, 1);
            assert_eq!(q::<i64>(&mut r, &["PTTL", "k"]).await, 300);
            // Lazy expiry: one millisecond past the deadline the key is gone.
            clock.advance_ms(301);
            assert_eq!(q::<Option<String>>(&mut r, &["GET", "k"]).await, None);
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, -2);
            assert_eq!(q::<i64>(&mut r, &["EXPIRE", "k", "10"]).await, 0);
            assert_eq!(q_err(&mut r, &["EXPIRE", "n", "10", "BOGUS"]).await, "ERR Unsupported option BOGUS");
            assert_eq!(q_err(&mut r, &["EXPIRE", "n", "ten"]).await, "ERR value is not an integer or out of range");
        });
    }

    fn overflowing_deadlines(threads) {
        let (server, _clock) = manual_server(threads);
        let mut c = server.raw();
        assert_eq!(c.call("SET k v"), "+OK\r\n");
        for x in [
            "9223370399119966",
            "9223372036854776",
            "10000000000000000",
            "18446744073709561",
            "-9223372036854776",
            "-9999999999999999",
        ] {
            assert_eq!(
                c.call(&format!("EXPIRE k {x}")),
                "-ERR invalid expire time in 'expire' command\r\n",
                "EXPIRE k {x}"
            );
            assert_eq!(c.call("TTL k"), ":-1\r\n", "after EXPIRE k {x}");
            assert_eq!(c.call("EXISTS k"), ":1\r\n", "after EXPIRE k {x}");
        }
        // 9223370399119966 s fits in i64 ms; adding the current time does not.
        assert!(9_223_370_399_119_966i64.checked_mul(1000).unwrap().checked_add(T0_MS as i64).is_none());
        assert_eq!(c.call("SET k v EX 9999999999999999"), "-ERR invalid expire time in 'set' command\r\n");
        assert_eq!(c.call("GET k"), "$1\r\nv\r\n");
    }

    fn zero_and_negative_expiry(threads) {
        let (server, _clock) = manual_server(threads);
        let mut c = server.raw();
        let bad = "-ERR invalid expire time in 'set' command\r\n";
        c.script(&[
            ("SET k v EX 0", bad),
            ("EXISTS k", ":0\r\n"),
            ("SET k v PX -1", bad),
            ("EXISTS k", ":0\r\n"),
            ("SET k v", "+OK\r\n"),
            ("EXPIRE k 0", ":1\r\n"),
            ("GET k", "$-1\r\n"),
            ("SET k v", "+OK\r\n"),
            ("EXPIRE k -5", ":1\r\n"),
            ("EXISTS k", ":0\r\n"),
            ("EXPIRE nokey 0", ":0\r\n"),
        ]);
    }

    fn expire_nx_xx_gt_lt_without_ttl(threads) {
        let (server, _clock) = manual_server(threads);
        let mut c = server.raw();
        c.script(&[
            ("SET k v", "+OK\r\n"),
            ("EXPIRE k 100 GT", ":0\r\n"),
            ("TTL k", ":-1\r\n"),
            ("EXPIRE k 100 XX", ":0\r\n"),
            ("EXPIRE k 100 LT", ":1\r\n"),
            ("TTL k", ":100\r\n"),
            ("EXPIRE k 50 GT", ":0\r\n"),
            ("EXPIRE k 200 XX GT", ":1\r\n"),
            ("TTL k", ":200\r\n"),
            ("EXPIRE k 300 NX", ":0\r\n"),
            ("EXPIRE k 10 NX GT", "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n"),
            ("EXPIRE k 10 GT LT", "-ERR GT and LT options at the same time are not compatible\r\n"),
            ("TTL k", ":200\r\n"),
        ]);
    }

    fn ttl_replies_and_keeping_the_ttl(threads) {
        let (server, clock) = manual_server(threads);
        let mut c = server.raw();
        c.script(&[
            ("TTL nokey", ":-2\r\n"),
            ("SET k v", "+OK\r\n"),
            ("TTL k", ":-1\r\n"),
            ("PERSIST k", ":0\r\n"),
            ("EXPIRE k 10", ":1\r\n"),
            ("TTL k", ":10\r\n"),
        ]);
        clock.advance_ms(7);
        let pttl = c.call("PTTL k");
        let ms: i64 = pttl.trim_start_matches(':').trim_end().parse().expect(&pttl);
        assert!((9990..=10000).contains(&ms), "PTTL {ms}");
        assert_eq!(ms, 9993, "the manual clock moved 7 ms");
        c.script(&[
            ("SET c 1 EX 100", "+OK\r\n"),
            ("INCR c", ":2\r\n"),
            ("INCRBYFLOAT c 0.5", "$3\r\n2.5\r\n"),
            ("TTL c", ":100\r\n"),
        ]);
        clock.advance_ms(2_000);
        c.script(&[
            ("TTL c", ":98\r\n"),
            ("SET c 5 KEEPTTL", "+OK\r\n"),
            ("TTL c", ":98\r\n"),
            ("SET c 6", "+OK\r\n"),
            ("TTL c", ":-1\r\n"),
        ]);
    }

    fn keys_with_patterns(threads) {
        let server = TestServer::start(threads);
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            let names = ["user:1", "user:2", "user:10", "session:1", "hello", "hallo", "hxllo", "a*b"];
            for n in names {
                q::<()>(&mut r, &["SET", n, "v"]).await;
            }
            let keys = |p: &'static str| {
                let mut r = r.clone();
                async move {
                    let mut got: Vec<String> = q(&mut r, &["KEYS", p]).await;
                    got.sort();
                    got
                }
            };
            assert_eq!(keys("*").await.len(), names.len());
            assert_eq!(keys("user:*").await, ["user:1", "user:10", "user:2"]);
            assert_eq!(keys("user:?").await, ["user:1", "user:2"]);
            assert_eq!(keys("*:1").await, ["session:1", "user:1"]);
            assert_eq!(keys("h[ae]llo").await, ["hallo", "hello"]);
            assert_eq!(keys("h[^e]llo").await, ["hallo", "hxllo"]);
            assert_eq!(keys("a\\*b").await, ["a*b"]);
            assert!(keys("nomatch*").await.is_empty());
        });
    }

    fn scan_returns_every_key(threads) {
        let server = TestServer::start(threads);
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            for chunk in (0..1000).collect::<Vec<_>>().chunks(100) {
                let mut mset = vec!["MSET".to_string()];
                for i in chunk {
                    mset.push(format!("scan:{i}"));
                    mset.push(i.to_string());
                }
                let args: Vec<&str> = mset.iter().map(String::as_str).collect();
                q::<()>(&mut r, &args).await;
            }
            let all: Vec<String> = q(&mut r, &["KEYS", "*"]).await;
            assert_eq!(all.len(), 1000);

            let scanned = full_scan(&mut r, &[]).await;
            assert_eq!(scanned.len(), 1000, "no key twice");
            assert_eq!(scanned.iter().collect::<BTreeSet<_>>(), all.iter().collect::<BTreeSet<_>>());

            let matched = full_scan(&mut r, &["MATCH", "scan:1*"]).await;
            let mut want: Vec<String> = q(&mut r, &["KEYS", "scan:1*"]).await;
            want.sort();
            assert_eq!(matched.into_iter().collect::<BTreeSet<_>>(), want.into_iter().collect());
            assert_eq!(full_scan(&mut r, &["TYPE", "string", "COUNT", "1000"]).await.len(), 1000);
            assert!(full_scan(&mut r, &["TYPE", "hash"]).await.is_empty());
            assert_eq!(q_err(&mut r, &["SCAN", "0", "COUNT", "0"]).await, "ERR syntax error");
            assert_eq!(q_err(&mut r, &["SCAN", "abc"]).await, "ERR invalid cursor");
            assert_eq!(q_err(&mut r, &["SCAN", "0", "BOGUS"]).await, "ERR syntax error");

            // A scan interleaved with 10,000 inserts still returns every key
            // that was present for the whole scan.
            let (mut cursor, mut seen, mut inserted, mut steps) = (0u64, BTreeSet::new(), 0, 0);
            loop {
                let (next, batch): (u64, Vec<String>) = q(&mut r, &["SCAN", &cursor.to_string(), "COUNT", "10"]).await;
                seen.extend(batch);
                if inserted < 10_000 {
                    let mut mset = vec!["MSET".to_string()];
                    for i in inserted..inserted + 100 {
                        mset.push(format!("grow:{i}"));
                        mset.push("x".into());
                    }
                    let args: Vec<&str> = mset.iter().map(String::as_str).collect();
                    q::<()>(&mut r, &args).await;
                    inserted += 100;
                }
                steps += 1;
                assert!(steps < 20_000, "the scan does not end");
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
            assert!(inserted >= 5_000, "the scan ended after only {inserted} inserts");
            let missing: Vec<_> = all.iter().filter(|k| !seen.contains(*k)).collect();
            assert!(missing.is_empty(), "{} keys never returned, e.g. {:?}", missing.len(), missing.first());
        });
    }

    fn dbsize_flushall_flushdb(threads) {
        let server = TestServer::start(threads);
        let keys = keys_in_both_halves("fl:", 5);
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            for k in &keys {
                q::<()>(&mut r, &["SET", k, "v"]).await;
            }
            assert_eq!(q::<i64>(&mut r, &["DBSIZE"]).await, 10);
            assert_eq!(q::<String>(&mut r, &["FLUSHALL"]).await, "OK");
            assert_eq!(q::<i64>(&mut r, &["DBSIZE"]).await, 0);
            q::<()>(&mut r, &["SET", &keys[0], "v"]).await;
            q::<()>(&mut r, &["SET", &keys[1], "v"]).await;
            assert_eq!(q::<String>(&mut r, &["FLUSHDB", "ASYNC"]).await, "OK");
            assert_eq!(q::<i64>(&mut r, &["DBSIZE"]).await, 0);
            assert_eq!(q::<String>(&mut r, &["FLUSHALL", "SYNC"]).await, "OK");
            assert_eq!(q_err(&mut r, &["FLUSHALL", "NOW"]).await, "ERR syntax error");
        });
    }

    fn active_expiry_reclaims_without_reads(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        let batch: Vec<u8> = (0..1000).flat_map(|i| leasehold_tests::cmd(&format!("SET ax:{i} v PX 50"))).collect();
        c.send(&batch);
        let oks = c.read_exact_raw(1000 * 5, Duration::from_secs(10));
        assert!(oks.chunks(5).all(|r| r == b"+OK\r\n"));
        let start = Instant::now();
        loop {
            // DBSIZE and INFO touch no key, so only active expiry can reclaim.
            if c.call("DBSIZE") == ":0\r\n" {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "DBSIZE still {}", c.call("DBSIZE"));
            std::thread::sleep(Duration::from_millis(20));
        }
        let info = info_fields(&info(&mut c, "stats"));
        assert_eq!(info["expired_keys"], "1000");
        eprintln!("1000 keys with PX 50 reclaimed in {:?}", start.elapsed());
    }

    fn active_expiry_finds_a_few_sparse_ttl_keys_quickly(threads) {
        // Three TTL keys among 16384 slots, never read: Redis reclaims them
        // within about a second of their deadline; so must the sweep.
        let server = TestServer::start(threads);
        let mut c = server.raw();
        for k in ["sparse:a", "sparse:{b}", "other:z"] {
            assert_eq!(c.call(&format!("SET {k} v PX 500")), "+OK\r\n");
        }
        assert_eq!(c.call("SET plain v"), "+OK\r\n");
        let start = Instant::now();
        while c.call("DBSIZE") != ":1\r\n" {
            assert!(start.elapsed() < Duration::from_secs(2), "DBSIZE still {} after 2 s", c.call("DBSIZE"));
            std::thread::sleep(Duration::from_millis(20));
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(490), "gone before their deadline: {took:?}");
        eprintln!("three sparse PX 500 keys reclaimed in {took:?}");
    }
}

/// Scans the whole keyspace with extra SCAN arguments; returns every key
/// returned, duplicates kept.
async fn full_scan(r: &mut MultiplexedConnection, extra: &[&str]) -> Vec<String> {
    let (mut cursor, mut out) = (0u64, Vec::new());
    for _ in 0..100_000 {
        let c = cursor.to_string();
        let mut args = vec!["SCAN", &c];
        args.extend_from_slice(extra);
        let (next, batch): (u64, Vec<String>) = q(r, &args).await;
        out.extend(batch);
        cursor = next;
        if cursor == 0 {
            return out;
        }
    }
    panic!("SCAN did not end");
}

on_1_and_2_threads! {
    // RENAME of a key to one on another shard is never seen half done: a
    // reader reading both keys atomically (inside MULTI/EXEC, which locks
    // both shards) always finds exactly one of them, while a writer moves
    // the value back and forth; the value and its TTL survive every move.
    fn rename_across_shards_is_never_seen_half_done(threads) {
        let server = TestServer::start(threads);
        let keys = keys_in_both_halves("swap", 2);
        let (a, b) = (keys[0].clone(), keys[1].clone());
        let mut w = server.raw();
        assert_eq!(w.call(&format!("SET {a} payload EX 1000")), "+OK\r\n");
        let moves = 1000;
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut r = server.raw();
                let check = leasehold_tests::cmd("MULTI")
                    .into_iter()
                    .chain(leasehold_tests::cmd(&format!("EXISTS {a}")))
                    .chain(leasehold_tests::cmd(&format!("EXISTS {b}")))
                    .chain(leasehold_tests::cmd("EXEC"))
                    .collect::<Vec<u8>>();
                let mut seen = [0usize; 3];
                for _ in 0..moves {
                    r.send(&check);
                    let _ = (r.read_text(), r.read_text(), r.read_text());
                    let exec = r.read_text();
                    let n = exec.matches(":1\r\n").count();
                    assert_eq!(exec.len(), "*2\r\n:1\r\n:0\r\n".len(), "{exec:?}");
                    seen[n] += 1;
                }
                seen
            });
            for i in 0..moves {
                let (from, to) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
                assert_eq!(w.call(&format!("RENAME {from} {to}")), "+OK\r\n");
            }
            let seen = reader.join().expect("the reader ran");
            assert_eq!(seen[1], moves, "both or neither seen: {seen:?}");
        });
        assert_eq!(w.call(&format!("GET {a}")), "$7\r\npayload\r\n");
        let ttl = leasehold_tests::int_of(&w.call(&format!("TTL {a}")));
        assert!((990..=1000).contains(&ttl), "TTL {ttl}");
        // COPY and MSETNX alike: a reader never sees MSETNX's keys half set.
        assert_eq!(w.call(&format!("COPY {a} {b}")), ":1\r\n");
        assert_eq!(w.call(&format!("MGET {a} {b}")), "*2\r\n$7\r\npayload\r\n$7\r\npayload\r\n");
        assert_eq!(w.call(&format!("DEL {a} {b}")), ":2\r\n");
        assert_eq!(w.call(&format!("MSETNX {a} 1 {b} 2")), ":1\r\n");
        assert_eq!(w.call(&format!("MSETNX {a} 3 {b} 4")), ":0\r\n");
        assert_eq!(w.call(&format!("MGET {a} {b}")), "*2\r\n$1\r\n1\r\n$1\r\n2\r\n");
    }
}
