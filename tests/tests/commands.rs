//! Command families over TCP, on 1 and 2 threads: values through redis-rs,
//! exact error texts and reply shapes through raw connections.
//!
//! Arity errors for every command of the table are checked in
//! `protocol.rs` (case F2).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_server::clock::SystemClock;
use leasehold_server::commands::table;
use leasehold_server::slot::key_slot;
use leasehold_tests::{
    block_on, int_of, keys_in_both_halves, manual_server, on_1_and_2_threads, Closed, Raw,
    TestServer, T0_MS,
};
use redis::aio::MultiplexedConnection;
use redis::{FromRedisValue, Value};

/// Time limit of one async test body.
const LIMIT: Duration = Duration::from_secs(30);

/// Runs one command given as words; panics with the error text on failure.
async fn q<T: FromRedisValue>(con: &mut MultiplexedConnection, args: &[&str]) -> T {
    let mut c = redis::cmd(args[0]);
    c.arg(&args[1..]);
    match c.query_async(con).await {
        Ok(v) => v,
        Err(e) => panic!("{args:?}: {e}"),
    }
}

/// Runs one command that must fail; returns the error's full text (`CODE detail`).
async fn q_err(con: &mut MultiplexedConnection, args: &[&str]) -> String {
    let mut c = redis::cmd(args[0]);
    c.arg(&args[1..]);
    match c.query_async::<Value>(con).await {
        Ok(v) => panic!("{args:?}: expected an error, got {v:?}"),
        Err(e) => format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
    }
}

/// INFO text as `field -> value`.
fn info_fields(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim_end().to_string()))
        .collect()
}

on_1_and_2_threads! {
    fn set_options(threads) {
        let (server, _clock) = manual_server(threads);
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            assert_eq!(q::<Option<String>>(&mut r, &["SET", "k", "v1", "NX"]).await.as_deref(), Some("OK"));
            assert_eq!(q::<Option<String>>(&mut r, &["SET", "k", "v2", "NX"]).await, None);
            assert_eq!(q::<Option<String>>(&mut r, &["SET", "nokey", "v", "XX"]).await, None);
            assert_eq!(q::<i64>(&mut r, &["EXISTS", "nokey"]).await, 0);
            assert_eq!(q::<Option<String>>(&mut r, &["SET", "k", "v3", "XX"]).await.as_deref(), Some("OK"));
            assert_eq!(q::<Option<String>>(&mut r, &["SET", "k", "v4", "GET"]).await.as_deref(), Some("v3"));
            assert_eq!(q::<Option<String>>(&mut r, &["SET", "new", "v", "GET"]).await, None);
            // NX with GET: the old value comes back and nothing is written.
            assert_eq!(q::<Option<String>>(&mut r, &["SET", "k", "v5", "NX", "GET"]).await.as_deref(), Some("v4"));
            assert_eq!(q::<String>(&mut r, &["GET", "k"]).await, "v4");

            q::<()>(&mut r, &["SET", "k", "v", "EX", "100"]).await;
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, 100);
            q::<()>(&mut r, &["SET", "k", "w", "KEEPTTL"]).await;
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, 100);
            q::<()>(&mut r, &["SET", "k", "w", "PX", "5000"]).await;
            assert_eq!(q::<i64>(&mut r, &["PTTL", "k"]).await, 5000);
            let exat = (T0_MS / 1000 + 50).to_string();
            q::<()>(&mut r, &["SET", "k", "w", "EXAT", &exat]).await;
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, 50);
            let pxat = (T0_MS + 1234).to_string();
            q::<()>(&mut r, &["SET", "k", "w", "PXAT", &pxat]).await;
            assert_eq!(q::<i64>(&mut r, &["PTTL", "k"]).await, 1234);
            q::<()>(&mut r, &["SET", "k", "w"]).await;
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, -1);
            // A deadline in the past: Redis accepts it and the key is gone.
            let past = (T0_MS - 1).to_string();
            q::<()>(&mut r, &["SET", "k", "w", "PXAT", &past]).await;
            assert_eq!(q::<i64>(&mut r, &["EXISTS", "k"]).await, 0);

            for bad in [
                &["SET", "k", "v", "NX", "XX"][..],
                &["SET", "k", "v", "EX", "10", "PX", "10"],
                &["SET", "k", "v", "KEEPTTL", "EX", "10"],
                &["SET", "k", "v", "EX"],
                &["SET", "k", "v", "BOGUS"],
            ] {
                assert_eq!(q_err(&mut r, bad).await, "ERR syntax error", "{bad:?}");
            }
            assert_eq!(
                q_err(&mut r, &["SET", "k", "v", "EX", "ten"]).await,
                "ERR value is not an integer or out of range"
            );
            assert_eq!(q_err(&mut r, &["SET", "k", "v", "PX", "0"]).await, "ERR invalid expire time in 'set' command");
        });
    }

    fn getex_getdel_getset(threads) {
        let (server, _clock) = manual_server(threads);
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            q::<()>(&mut r, &["SET", "k", "v"]).await;
            assert_eq!(q::<String>(&mut r, &["GETEX", "k"]).await, "v");
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, -1);
            assert_eq!(q::<String>(&mut r, &["GETEX", "k", "EX", "10"]).await, "v");
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, 10);
            assert_eq!(q::<String>(&mut r, &["GETEX", "k", "PX", "2500"]).await, "v");
            assert_eq!(q::<i64>(&mut r, &["PTTL", "k"]).await, 2500);
            let pxat = (T0_MS + 777).to_string();
            assert_eq!(q::<String>(&mut r, &["GETEX", "k", "PXAT", &pxat]).await, "v");
            assert_eq!(q::<i64>(&mut r, &["PTTL", "k"]).await, 777);
            let exat = (T0_MS / 1000 + 9).to_string();
            assert_eq!(q::<String>(&mut r, &["GETEX", "k", "EXAT", &exat]).await, "v");
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, 9);
            assert_eq!(q::<String>(&mut r, &["GETEX", "k", "PERSIST"]).await, "v");
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, -1);
            assert_eq!(q::<Option<String>>(&mut r, &["GETEX", "nokey", "EX", "10"]).await, None);
            assert_eq!(q::<i64>(&mut r, &["EXISTS", "nokey"]).await, 0);
            assert_eq!(q_err(&mut r, &["GETEX", "k", "EX", "10", "PERSIST"]).await, "ERR syntax error");
            assert_eq!(q_err(&mut r, &["GETEX", "k", "EX", "0"]).await, "ERR invalid expire time in 'getex' command");

            q::<()>(&mut r, &["SET", "k", "old", "EX", "100"]).await;
            assert_eq!(q::<String>(&mut r, &["GETSET", "k", "new"]).await, "old");
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, -1, "GETSET clears the TTL");
            assert_eq!(q::<Option<String>>(&mut r, &["GETSET", "fresh", "x"]).await, None);
            assert_eq!(q::<String>(&mut r, &["GET", "fresh"]).await, "x");

            assert_eq!(q::<String>(&mut r, &["GETDEL", "k"]).await, "new");
            assert_eq!(q::<i64>(&mut r, &["EXISTS", "k"]).await, 0);
            assert_eq!(q::<Option<String>>(&mut r, &["GETDEL", "k"]).await, None);
        });
    }

    fn setnx_setex_psetex(threads) {
        let (server, _clock) = manual_server(threads);
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            assert_eq!(q::<i64>(&mut r, &["SETNX", "k", "a"]).await, 1);
            assert_eq!(q::<i64>(&mut r, &["SETNX", "k", "b"]).await, 0);
            assert_eq!(q::<String>(&mut r, &["GET", "k"]).await, "a");
            assert_eq!(q::<String>(&mut r, &["SETEX", "k", "10", "c"]).await, "OK");
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, 10);
            assert_eq!(q::<String>(&mut r, &["GET", "k"]).await, "c");
            assert_eq!(q::<String>(&mut r, &["PSETEX", "k", "1500", "d"]).await, "OK");
            assert_eq!(q::<i64>(&mut r, &["PTTL", "k"]).await, 1500);
            assert_eq!(q_err(&mut r, &["SETEX", "k", "0", "v"]).await, "ERR invalid expire time in 'setex' command");
            assert_eq!(q_err(&mut r, &["PSETEX", "k", "-1", "v"]).await, "ERR invalid expire time in 'psetex' command");
            assert_eq!(q_err(&mut r, &["SETEX", "k", "x", "v"]).await, "ERR value is not an integer or out of range");
            assert_eq!(q::<String>(&mut r, &["GET", "k"]).await, "d", "failed SETEX leaves the value");
        });
    }

    fn append_strlen_incrbyfloat(threads) {
        let (server, clock) = manual_server(threads);
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            assert_eq!(q::<i64>(&mut r, &["APPEND", "s", "ab"]).await, 2);
            assert_eq!(q::<i64>(&mut r, &["APPEND", "s", "cd"]).await, 4);
            assert_eq!(q::<String>(&mut r, &["GET", "s"]).await, "abcd");
            assert_eq!(q::<i64>(&mut r, &["STRLEN", "s"]).await, 4);
            assert_eq!(q::<i64>(&mut r, &["STRLEN", "nokey"]).await, 0);
            // A counter is a string: APPEND extends its digits, INCR reads them.
            q::<()>(&mut r, &["SET", "n", "12", "EX", "100"]).await;
            assert_eq!(q::<i64>(&mut r, &["APPEND", "n", "3"]).await, 3);
            assert_eq!(q::<i64>(&mut r, &["INCR", "n"]).await, 124);
            assert_eq!(q::<i64>(&mut r, &["STRLEN", "n"]).await, 3);
            clock.advance_ms(1000);
            assert_eq!(q::<i64>(&mut r, &["TTL", "n"]).await, 99, "APPEND and INCR keep the TTL");

            assert_eq!(q::<String>(&mut r, &["INCRBYFLOAT", "f", "10.5"]).await, "10.5");
            assert_eq!(q::<String>(&mut r, &["INCRBYFLOAT", "f", "0.1"]).await, "10.6");
            assert_eq!(q::<String>(&mut r, &["INCRBYFLOAT", "f", "-5"]).await, "5.6");
            assert_eq!(q::<String>(&mut r, &["INCRBYFLOAT", "f", "5.0e3"]).await, "5005.6");
            assert_eq!(q::<String>(&mut r, &["INCRBYFLOAT", "i", "3"]).await, "3");
            assert_eq!(q::<i64>(&mut r, &["INCR", "i"]).await, 4);
            assert_eq!(q_err(&mut r, &["INCRBYFLOAT", "f", "abc"]).await, "ERR value is not a valid float");
            assert_eq!(q_err(&mut r, &["INCRBYFLOAT", "s", "1"]).await, "ERR value is not a valid float");
            assert_eq!(q::<String>(&mut r, &["GET", "f"]).await, "5005.6");
        });
    }

    fn multi_key_commands_across_shards(threads) {
        let server = TestServer::start(threads);
        let keys = keys_in_both_halves("mk:", 4);
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            let mut mset = vec!["MSET"];
            let values: Vec<String> = keys.iter().map(|k| format!("value-of-{k}")).collect();
            for (k, v) in keys.iter().zip(&values) {
                mset.push(k);
                mset.push(v);
            }
            assert_eq!(q::<String>(&mut r, &mset).await, "OK");
            // MGET in reverse order with a missing key in the middle.
            let mut mget = vec!["MGET"];
            mget.extend(keys.iter().rev().map(String::as_str));
            mget.insert(3, "missing");
            let got: Vec<Option<String>> = q(&mut r, &mget).await;
            let mut want: Vec<Option<String>> = values.iter().rev().cloned().map(Some).collect();
            want.insert(2, None);
            assert_eq!(got, want);
            // EXISTS counts every argument, duplicates included.
            let mut exists = vec!["EXISTS", "missing"];
            exists.extend(keys.iter().map(String::as_str));
            exists.push(&keys[1]);
            assert_eq!(q::<i64>(&mut r, &exists).await, keys.len() as i64 + 1);
            assert_eq!(q::<i64>(&mut r, &["DEL", &keys[0], &keys[1], &keys[2], "missing", &keys[3]]).await, 4);
            let mut unlink = vec!["UNLINK"];
            unlink.extend(keys.iter().map(String::as_str));
            assert_eq!(q::<i64>(&mut r, &unlink).await, 4);
            assert_eq!(q::<i64>(&mut r, &["DBSIZE"]).await, 0);

            // Hash tags keep keys together, whatever the rest of the name.
            let tagged = ["{user1000}.following", "{user1000}.followers", "x{user1000}y"];
            assert!(tagged.iter().all(|k| key_slot(k.as_bytes()) == key_slot(b"user1000")));
            assert_eq!(q::<String>(&mut r, &["MSET", tagged[0], "1", tagged[1], "2", tagged[2], "3"]).await, "OK");
            let got: Vec<String> = q(&mut r, &["MGET", tagged[2], tagged[0], tagged[1]]).await;
            assert_eq!(got, ["3", "1", "2"]);
            assert_eq!(q::<i64>(&mut r, &["DEL", tagged[0], tagged[1], tagged[2]]).await, 3);
            assert_eq!(q_err(&mut r, &["MSET", "a", "1", "b"]).await, "ERR wrong number of arguments for 'mset' command");
        });
    }

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

    fn hello_shapes(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        let id = int_of(&c.call("CLIENT ID"));
        let (reply, _) = { c.send_cmd("HELLO 3 SETNAME me"); c.read_reply_raw() };
        let leasehold_tests::Reply::Map(pairs) = reply else { panic!("HELLO 3 is not a map: {reply:?}") };
        let fields: Vec<String> = pairs.iter().map(|(k, _)| leasehold_tests::text(k)).collect();
        // The decoder keeps a map's pairs in no particular order (F5 checks
        // the order on the raw bytes); look fields up by name.
        let field = |name: &str| {
            let i = fields.iter().position(|f| f.rsplit("\r\n").nth(1) == Some(name));
            &pairs[i.unwrap_or_else(|| panic!("HELLO lacks {name}"))].1
        };
        for name in ["server", "version", "mode", "role", "modules"] {
            field(name);
        }
        assert_eq!(pairs.len(), 7);
        assert_eq!(field("proto"), &leasehold_tests::Reply::Int(3));
        assert_eq!(field("id"), &leasehold_tests::Reply::Int(id));
        assert_eq!(field("mode"), &leasehold_tests::Reply::bulk("standalone"));
        assert_eq!(c.call("CLIENT GETNAME"), "$2\r\nme\r\n");
        // HELLO without a version answers in the current protocol.
        assert!(c.call("HELLO").starts_with("%7\r\n"));
        assert!(c.call("HELLO 2").starts_with("*14\r\n"));
        assert_eq!(c.call("HELLO 4"), "-NOPROTO unsupported protocol version\r\n");
        assert_eq!(c.call("HELLO x"), "-ERR Protocol version is not an integer or out of range\r\n");
        assert_eq!(c.call("HELLO 3 BOGUS"), "-ERR Syntax error in HELLO option 'BOGUS'\r\n");
        assert_eq!(c.call("GET nokey"), "$-1\r\n", "a failed HELLO keeps RESP2");
    }

    fn auth_and_requirepass(threads) {
        let mut config = TestServer::config(threads);
        config.security.requirepass = "secret".into();
        let server = TestServer::with_config(config, Arc::new(SystemClock::new()));
        let noauth = "-NOAUTH Authentication required.\r\n";
        let wrongpass = "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
        let mut c = server.raw();
        c.script(&[
            ("GET k", noauth),
            ("SET k v", noauth),
            ("AUTH wrong", wrongpass),
            ("AUTH bob secret", wrongpass),
            ("GET k", noauth),
        ]);
        assert!(c.call("HELLO 3").starts_with("-NOAUTH HELLO must be called with the client already authenticated"));
        assert_eq!(c.call("HELLO 3 AUTH default wrong"), wrongpass);
        // Pre-auth limits: 10 arguments, 16 KB bulks.
        let mut big = server.raw();
        big.send(b"*11\r\n");
        big.expect_closed_after("-ERR Protocol error: unauthenticated multibulk length\r\n", Duration::from_secs(5));
        let mut big = server.raw();
        big.send(b"*2\r\n$4\r\nECHO\r\n$16385\r\n");
        big.expect_closed_after("-ERR Protocol error: unauthenticated bulk length\r\n", Duration::from_secs(5));

        c.script(&[("AUTH secret", "+OK\r\n"), ("GET k", "$-1\r\n"), ("AUTH default secret", "+OK\r\n")]);
        // After AUTH the normal limits apply.
        let long = "x".repeat(20_000);
        assert_eq!(c.call_args(&[b"ECHO", long.as_bytes()]).len(), 20_000 + 10);
        assert_eq!(c.call("RESET"), "+RESET\r\n");
        assert_eq!(c.call("GET k"), noauth, "RESET forgets the authentication");
        assert!(c.call("HELLO 3 AUTH default secret").starts_with("%7\r\n"));
        assert_eq!(c.call("GET k"), "_\r\n");

        block_on(LIMIT, async {
            let client = redis::Client::open(format!("redis://:secret@{}/", server.addr)).unwrap();
            let mut r = client.get_multiplexed_async_connection().await.expect("connect with password");
            assert_eq!(q::<String>(&mut r, &["PING"]).await, "PONG");
        });

        let open = TestServer::start(threads);
        assert_eq!(
            open.raw().call("AUTH x"),
            "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n"
        );
    }

    fn select_quit_reset(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        c.script(&[
            ("SELECT 0", "+OK\r\n"),
            ("SELECT 1", "-ERR DB index is out of range\r\n"),
            ("SELECT x", "-ERR value is not an integer or out of range\r\n"),
            ("CLIENT SETNAME n1", "+OK\r\n"),
        ]);
        assert!(c.call("HELLO 3").starts_with('%'));
        assert_eq!(c.call("GET nokey"), "_\r\n");
        assert_eq!(c.call("RESET"), "+RESET\r\n");
        assert_eq!(c.call("GET nokey"), "$-1\r\n", "RESET goes back to RESP2");
        assert_eq!(c.call("CLIENT GETNAME"), "$-1\r\n", "RESET clears the name");
        // QUIT answers OK, then closes; requests after it in the same write are ignored.
        c.send(&[leasehold_tests::cmd("QUIT"), leasehold_tests::cmd("PING")].concat());
        c.expect_closed_after("+OK\r\n", Duration::from_secs(5));
    }

    fn client_subcommands(threads) {
        let server = TestServer::start(threads);
        let mut me = server.raw();
        let mut other = server.raw();
        let my_id = int_of(&me.call("CLIENT ID"));
        let other_id = int_of(&other.call("CLIENT ID"));
        assert_ne!(my_id, other_id);
        me.script(&[
            ("CLIENT GETNAME", "$-1\r\n"),
            ("CLIENT SETNAME worker-1", "+OK\r\n"),
            ("CLIENT GETNAME", "$8\r\nworker-1\r\n"),
            ("CLIENT SETINFO LIB-NAME redis-rs", "+OK\r\n"),
            ("CLIENT SETINFO LIB-VER 0.32.7", "+OK\r\n"),
            ("CLIENT FOO", "-ERR unknown subcommand 'FOO'. Try CLIENT HELP.\r\n"),
        ]);
        assert_eq!(
            me.call_args(&[b"CLIENT", b"SETNAME", b"a b"]),
            "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
        );
        let info = me.call("CLIENT INFO");
        assert!(info.contains(&format!("id={my_id} ")) && info.contains("name=worker-1 "), "{info}");
        let list = me.call("CLIENT LIST");
        assert!(list.contains(&format!("id={my_id} ")) && list.contains(&format!("id={other_id} ")), "{list}");
        let only = me.call(&format!("CLIENT LIST ID {other_id}"));
        assert!(only.contains(&format!("id={other_id} ")) && !only.contains(&format!("id={my_id} ")), "{only}");

        assert_eq!(me.call(&format!("CLIENT KILL ID {other_id}")), ":1\r\n");
        assert!(matches!(other.read_until_closed(Duration::from_secs(5)), Closed::Yes(_)), "killed client still open");
        assert_eq!(me.call(&format!("CLIENT KILL ID {other_id}")), ":0\r\n");
        assert_eq!(me.call("CLIENT KILL 127.0.0.1:1"), "-ERR No such client\r\n");
        // The old form by address.
        let mut third = server.raw();
        let addr = third.stream().local_addr().unwrap().to_string();
        assert_eq!(third.call("PING"), "+PONG\r\n");
        assert_eq!(me.call(&format!("CLIENT KILL {addr}")), "+OK\r\n");
        assert!(matches!(third.read_until_closed(Duration::from_secs(5)), Closed::Yes(_)));
        assert_eq!(me.call("PING"), "+PONG\r\n");
    }

    fn command_introspection(threads) {
        let server = TestServer::start(threads);
        let n = table().commands.len();
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            assert_eq!(q::<usize>(&mut r, &["COMMAND", "COUNT"]).await, n);
            let list: Vec<String> = q(&mut r, &["COMMAND", "LIST"]).await;
            assert_eq!(list.len(), n);
            assert!(list.iter().any(|c| c == "get") && list.iter().any(|c| c == "scan"));
            let all: Vec<Value> = q(&mut r, &["COMMAND"]).await;
            assert_eq!(all.len(), n);
            let info: Vec<Value> = q(&mut r, &["COMMAND", "INFO", "get", "nosuch", "mset"]).await;
            assert_eq!(info.len(), 3);
            assert_eq!(info[1], Value::Nil);
            let get: Vec<Value> = FromRedisValue::from_redis_value(&info[0]).unwrap();
            assert_eq!(get.len(), 10, "Redis 7's COMMAND INFO entry has 10 fields");
            assert_eq!(String::from_redis_value(&get[0]).unwrap(), "get");
            assert_eq!(i64::from_redis_value(&get[1]).unwrap(), 2);
            let flags: Vec<String> = FromRedisValue::from_redis_value(&get[2]).unwrap();
            assert!(flags.contains(&"readonly".to_string()), "{flags:?}");
            let keys: Vec<i64> = get[3..6].iter().map(|v| i64::from_redis_value(v).unwrap()).collect();
            assert_eq!(keys, [1, 1, 1]);
            let mset: Vec<Value> = FromRedisValue::from_redis_value(&info[2]).unwrap();
            let keys: Vec<i64> = mset[3..6].iter().map(|v| i64::from_redis_value(v).unwrap()).collect();
            assert_eq!(keys, [1, -1, 2]);
            let docs: HashMap<String, HashMap<String, Value>> = q(&mut r, &["COMMAND", "DOCS", "get"]).await;
            assert!(matches!(&docs["get"]["summary"], Value::BulkString(s) if !s.is_empty()), "{docs:?}");
            let keys: Vec<String> = q(&mut r, &["COMMAND", "GETKEYS", "MSET", "a", "1", "b", "2"]).await;
            assert_eq!(keys, ["a", "b"]);
        });
    }

    fn info_sections_and_fields(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        c.script(&[("SET a 1", "+OK\r\n"), ("SET b 2 EX 100", "+OK\r\n"), ("GET a", "$1\r\n1\r\n"), ("GET a", "$1\r\n1\r\n")]);
        let all = info(&mut c, "");
        for section in ["# Server", "# Clients", "# Memory", "# Stats", "# Replication", "# Keyspace"] {
            assert!(all.contains(section), "INFO lacks {section}");
        }
        let f = info_fields(&all);
        assert!(f["redis_version"].starts_with("7."), "{}", f["redis_version"]);
        assert!(f["used_memory"].parse::<u64>().unwrap() > 0);
        assert_eq!(f["connected_clients"], "1");
        assert_eq!(f["expired_keys"], "0");
        assert_eq!(f["db0"], "keys=2,expires=1,avg_ttl=0");
        assert_eq!(f["tcp_port"], server.addr.port().to_string());
        let stats = info(&mut c, "commandstats");
        assert!(stats.starts_with("# Commandstats\r\n"), "{stats}");
        assert!(stats.contains("cmdstat_get:calls=2,"), "{stats}");
        assert!(stats.contains("cmdstat_set:calls=2,"), "{stats}");
        let keyspace = info(&mut c, "keyspace");
        assert_eq!(keyspace, "# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=0\r\n");
        let two = info(&mut c, "server clients");
        assert!(two.contains("# Server") && two.contains("# Clients") && !two.contains("# Memory"));
        let mut other = server.raw();
        assert_eq!(other.call("PING"), "+PONG\r\n");
        assert_eq!(info_fields(&info(&mut c, "clients"))["connected_clients"], "2");

        assert_eq!(c.call("CONFIG RESETSTAT"), "+OK\r\n");
        let stats = info(&mut c, "commandstats");
        assert!(!stats.contains("cmdstat_get"), "{stats}");
        assert_eq!(c.call("GET a"), "$1\r\n1\r\n");
        assert!(info(&mut c, "commandstats").contains("cmdstat_get:calls=1,"));
    }

    fn config_get_and_set(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            let shared = r.clone();
            let get = |p: &'static str| {
                let mut r = shared.clone();
                async move { q::<Vec<String>>(&mut r, &["CONFIG", "GET", p]).await }
            };
            assert_eq!(get("save").await, ["save", ""]);
            assert_eq!(get("appendonly").await, ["appendonly", "no"]);
            assert_eq!(get("databases").await, ["databases", "1"]);
            assert_eq!(get("maxmemory").await, ["maxmemory", "0"]);
            // The port actually bound, though the config asked for 0 (any free port).
            let port = server.addr.port().to_string();
            assert_eq!(get("port").await, ["port", port.as_str()]);
            assert_eq!(get("MAXCLIENTS").await, ["maxclients", "10000"]);
            assert!(get("nosuchparameter").await.is_empty());
            let max: HashMap<String, String> = q(&mut r, &["CONFIG", "GET", "max*"]).await;
            let names: BTreeSet<&str> = max.keys().map(String::as_str).collect();
            assert_eq!(names, BTreeSet::from(["maxclients", "maxmemory", "maxmemory-policy"]));
            let several: HashMap<String, String> = q(&mut r, &["CONFIG", "GET", "save", "appendonly", "save"]).await;
            assert_eq!(several.len(), 2);

            assert_eq!(q::<String>(&mut r, &["CONFIG", "SET", "maxclients", "100"]).await, "OK");
            assert_eq!(get("maxclients").await, ["maxclients", "100"]);
            assert_eq!(q::<String>(&mut r, &["CONFIG", "SET", "save", ""]).await, "OK");
            assert_eq!(q::<String>(&mut r, &["CONFIG", "SET", "appendonly", "no"]).await, "OK");
        });
        c.script(&[
            ("CONFIG SET port 1", "-ERR CONFIG SET failed (possibly related to argument 'port') - can't set immutable config\r\n"),
            ("CONFIG SET nosuch 1", "-ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'\r\n"),
            ("CONFIG SET maxclients many", "-ERR CONFIG SET failed (possibly related to argument 'maxclients') - argument couldn't be parsed into an integer\r\n"),
            ("CONFIG SET maxclients", "-ERR wrong number of arguments for 'config|set' command\r\n"),
            ("CONFIG GET", "-ERR wrong number of arguments for 'config|get' command\r\n"),
            ("CONFIG BOGUS", "-ERR unknown subcommand 'BOGUS'. Try CONFIG HELP.\r\n"),
            ("CONFIG GET maxclients", "*2\r\n$10\r\nmaxclients\r\n$3\r\n100\r\n"),
        ]);
        // A mutable limit takes effect on open connections.
        // (Redis's floor for it is 1mb.)
        c.script(&[("CONFIG SET proto-max-bulk-len 1mb", "+OK\r\n")]);
        c.send(b"*2\r\n$4\r\nECHO\r\n$1048577\r\n");
        c.expect_closed_after("-ERR Protocol error: invalid bulk length\r\n", Duration::from_secs(5));
    }

    fn time_and_unknown_commands(threads) {
        let (server, clock) = manual_server(threads);
        clock.set_unix_ms(T0_MS + 1_234);
        let mut c = server.raw();
        assert_eq!(c.call("TIME"), "*2\r\n$10\r\n1700000001\r\n$6\r\n234000\r\n");
        assert_eq!(c.call("FOO a b"), "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n");
        assert_eq!(c.call("NOPE"), "-ERR unknown command 'NOPE', with args beginning with: \r\n");
        assert_eq!(c.call("PING"), "+PONG\r\n");
    }

    fn errors_echoing_input_keep_the_framing(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        let nasty: &[u8] = b"x\r\n+OK\r\ny";
        for args in [
            &[nasty][..],
            &[b"FOO", nasty],
            &[b"CLIENT", nasty],
            &[b"CONFIG", nasty],
            &[b"COMMAND", nasty],
            &[b"CONFIG", b"SET", nasty, b"1"],
            &[b"HELLO", b"3", nasty],
            &[b"EXPIRE", b"k", b"10", nasty],
        ] {
            c.send(&[leasehold_tests::resp(args), leasehold_tests::cmd("PING")].concat());
            let err = c.read_text();
            assert!(err.starts_with('-') && err.find("\r\n") == Some(err.len() - 2), "{args:?}: {err:?}");
            assert_eq!(c.read_text(), "+PONG\r\n", "{args:?}");
        }
    }

    fn shutdown_stops_the_server(threads) {
        let server = TestServer::start(threads);
        let addr = server.addr;
        let mut bystander = server.raw();
        let mut c = server.raw();
        assert_eq!(c.call("SET k v"), "+OK\r\n");
        c.send_cmd("SHUTDOWN");
        // Like Redis, a successful SHUTDOWN answers by closing.
        c.expect_closed_after("", Duration::from_secs(5));
        assert!(matches!(bystander.read_until_closed(Duration::from_secs(5)), Closed::Yes(_)));
        assert!(server.wait_stopped(Duration::from_secs(5)), "threads still running");
        assert!(std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(), "still accepting");
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

/// INFO with an optional section list, as text.
fn info(c: &mut Raw, sections: &str) -> String {
    let reply = c.call(format!("INFO {sections}").trim_end());
    // A bulk string: `$<len>\r\n<text>\r\n`.
    let body = reply.split_once("\r\n").expect("bulk header").1;
    body.strip_suffix("\r\n").expect("bulk end").to_string()
}

on_1_and_2_threads! {
    fn info_cpu_errorstats_and_rejected_calls(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        let cpu = info_fields(&info(&mut c, "cpu"));
        for f in ["used_cpu_sys", "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children"] {
            assert!(cpu[f].parse::<f64>().is_ok(), "{f}: {:?}", cpu.get(f));
        }
        assert_eq!(info(&mut c, "errorstats"), "# Errorstats\r\n");
        c.script(&[
            ("SET s x", "+OK\r\n"),
            ("INCR s", "-ERR value is not an integer or out of range\r\n"),
            ("GET", "-ERR wrong number of arguments for 'get' command\r\n"),
            ("CONFIG GET", "-ERR wrong number of arguments for 'config|get' command\r\n"),
            ("NOSUCH", "-ERR unknown command 'NOSUCH', with args beginning with: \r\n"),
        ]);
        c.send_cmd("TOKENLEASE s 10 1 1000 1");
        assert!(c.read_text().starts_with("-WRONGTYPE "));
        let errors = info(&mut c, "errorstats");
        assert_eq!(errors, "# Errorstats\r\nerrorstat_ERR:count=4\r\nerrorstat_WRONGTYPE:count=1\r\n");
        assert_eq!(info_fields(&info(&mut c, "stats"))["total_error_replies"], "5");
        let stats = info(&mut c, "commandstats");
        assert!(stats.contains("cmdstat_incr:calls=1,usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=1\r\n"), "{stats}");
        assert!(stats.contains("cmdstat_get:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0\r\n"), "{stats}");
        assert!(stats.contains("cmdstat_config:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0\r\n"), "{stats}");
        assert_eq!(c.call("CONFIG RESETSTAT"), "+OK\r\n");
        assert_eq!(info(&mut c, "errorstats"), "# Errorstats\r\n");
    }

    fn config_set_hz_and_loglevel(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        c.script(&[
            ("CONFIG SET hz 20", "+OK\r\n"),
            ("CONFIG GET hz", "*2\r\n$2\r\nhz\r\n$2\r\n20\r\n"),
            // Redis clamps to 1..=500.
            ("CONFIG SET hz 1000", "+OK\r\n"),
            ("CONFIG GET hz", "*2\r\n$2\r\nhz\r\n$3\r\n500\r\n"),
            ("CONFIG SET hz -1", "-ERR CONFIG SET failed (possibly related to argument 'hz') - argument must be between 0 and 2147483647 inclusive\r\n"),
            ("CONFIG SET hz x", "-ERR CONFIG SET failed (possibly related to argument 'hz') - argument couldn't be parsed into an integer\r\n"),
            ("CONFIG SET loglevel warning", "+OK\r\n"),
            ("CONFIG GET loglevel", "*2\r\n$8\r\nloglevel\r\n$7\r\nwarning\r\n"),
            ("CONFIG SET loglevel bogus", "-ERR CONFIG SET failed (possibly related to argument 'loglevel') - argument(s) must be one of the following: debug, verbose, notice, warning\r\n"),
            ("CONFIG SET hz 10", "+OK\r\n"),
        ]);
        assert!(info(&mut c, "server").contains("\r\nhz:10\r\n"));
        // Active expiry still runs after the change.
        c.script(&[("SET gone 1 PX 10", "+OK\r\n")]);
        let deadline = Instant::now() + Duration::from_secs(20);
        while info_fields(&info(&mut c, "stats"))["expired_keys"] != "1" {
            assert!(Instant::now() < deadline, "the key was never reclaimed");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn config_rewrite_writes_the_config_file(threads) {
        let plain = TestServer::start(threads);
        let mut c = plain.raw();
        assert_eq!(c.call("CONFIG REWRITE"), "-ERR The server is running without a config file\r\n");

        let dir = std::env::temp_dir().join(format!("leasehold-rewrite-{}-{threads}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("server.toml");
        std::fs::write(&path, "[net]\nport = 6399\nmaxclients = 50\n\n[expiry]\nhz = 10\n").unwrap();
        let mut config = leasehold_server::config::Config::from_file(&path).unwrap();
        config.shards.threads = threads;
        let server = TestServer::with_config(config, Arc::new(SystemClock::new()));
        let mut c = server.raw();
        let fields = info_fields(&info(&mut c, "server"));
        assert_eq!(fields["config_file"], path.display().to_string());
        c.script(&[
            ("CONFIG SET maxclients 321 hz 25", "+OK\r\n"),
            ("CONFIG REWRITE", "+OK\r\n"),
        ]);
        let back = leasehold_server::config::Config::from_file(&path).unwrap();
        assert_eq!(back.net.maxclients, 321);
        assert_eq!(back.expiry.hz, 25);
        // Not settable: the file keeps its own value, not the port bound (0 picks one).
        assert_eq!(back.net.port, 6399);
        // A setting at its default that the file lacked is not added.
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("requirepass"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
