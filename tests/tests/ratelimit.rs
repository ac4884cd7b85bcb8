//! The rate-limit commands (TOKENLEASE, TOKENRETURN, SLIDINGWINDOW,
//! CL.THROTTLE, GCRA, RLSTATE, LH.RESTORE) end to end over TCP, on 1 and 2
//! threads, with their exact reply bytes on a [`ManualClock`]: retry-after,
//! denials, refill after long idle, the clock going back, policy changes,
//! window weighting, redis-cell compatibility, expiry, errors, inspection and
//! restore; and redis-rs (a real client) against the real clock.
//!
//! [`Case::at`] sets the monotonic clock to `t` ms after the start and the
//! wall clock to [`T0_MS`] + `t`, so TTLs are exact.

use std::sync::Arc;
use std::time::Duration;

use leasehold_server::clock::ManualClock;
use leasehold_tests::{block_on, manual_server, on_1_and_2_threads, Raw, TestServer, T0_MS};

/// One hour, in milliseconds.
const HOUR: u64 = 3_600_000;
/// 100 years of 365.25 days, in milliseconds.
const CENTURY: u64 = 36_525 * 24 * HOUR;

struct Case {
    _server: TestServer,
    clock: Arc<ManualClock>,
    c: Raw,
}

impl Case {
    fn new(threads: usize) -> Case {
        let (server, clock) = manual_server(threads);
        let mut c = server.raw();
        // A round trip first: a command that reaches a connection not yet
        // registered is read in the turn that registers it, under that
        // turn's clock reading, which may predate the test's next `at`
        // (a key leased at "0" instead of 1 000 000 then expired when the
        // clock went back: seen once in a loaded CI run).
        assert_eq!(c.call("PING"), "+PONG\r\n");
        Case {
            _server: server,
            clock,
            c,
        }
    }

    /// Sets both clocks to `t` ms after the start.
    fn at(&mut self, t: u64) -> &mut Case {
        self.clock.set_mono_ms(t);
        self.clock.set_unix_ms(T0_MS + t);
        self
    }

    /// Sends `line` and checks that the reply is the integer array `want`.
    fn ints(&mut self, line: &str, want: &[i64]) {
        assert_eq!(self.c.call(line), ints(want), "{line} at {:?}", self.clock);
    }
}

/// The RESP2 bytes of an array of integers.
fn ints(v: &[i64]) -> String {
    let mut s = format!("*{}\r\n", v.len());
    for i in v {
        s.push_str(&format!(":{i}\r\n"));
    }
    s
}

on_1_and_2_threads! {
    // Retry-after rounds up, and a caller who waits exactly that long succeeds.
    fn retry_after_rounds_up_and_is_honest(threads) {
        let mut k = Case::new(threads);
        k.ints("TOKENLEASE k 1 10 1000 1", &[1, 0, 0, 100]);
        k.ints("TOKENLEASE k 1 10 1000 1", &[0, 0, 100, 100]);
        k.at(99).ints("TOKENLEASE k 1 10 1000 1", &[0, 0, 1, 1]);
        k.at(100).ints("TOKENLEASE k 1 10 1000 1", &[1, 0, 0, 100]);
    }

    // Rate-limit keys expire on the monotonic clock their states run on:
    // a wall-clock step forward neither resets them (no tokens minted) nor,
    // stepping back, keeps them; a read-only PTTL changes nothing about it.
    fn a_wall_clock_step_neither_resets_nor_keeps_rate_limit_keys(threads) {
        let mut k = Case::new(threads);
        k.ints("TOKENLEASE tb 1 1 3600000 1", &[1, 0, 0, 3600000]);
        k.ints("SLIDINGWINDOW a 1 1000", &[1, 1, 0, 0]);
        k.ints("SLIDINGWINDOW b 1 1000", &[1, 1, 0, 0]);
        k.ints("CL.THROTTLE g 0 1 60", &[0, 1, 0, -1, 60]);
        k.c.script(&[("PTTL b", ":2000\r\n"), ("PTTL tb", ":3600000\r\n")]);
        k.clock.set_unix_ms(T0_MS + 2 * HOUR);
        k.ints("TOKENLEASE tb 1 1 3600000 1", &[0, 0, 3600000, 3600000]);
        k.ints("SLIDINGWINDOW a 1 1000", &[0, 1, 0, 2000]);
        k.ints("SLIDINGWINDOW b 1 1000", &[0, 1, 0, 2000]);
        k.ints("CL.THROTTLE g 0 1 60", &[1, 1, 0, 60, 60]);
        k.c.script(&[
            ("PTTL tb", ":3600000\r\n"),
            ("PTTL b", ":2000\r\n"),
            ("DBSIZE", ":4\r\n"),
        ]);
        // Back past the start: still there until their monotonic deadlines.
        k.clock.set_unix_ms(T0_MS - HOUR);
        k.c.script(&[("PTTL g", ":60000\r\n"), ("DBSIZE", ":4\r\n")]);
        k.clock.set_mono_ms(2000);
        k.c.script(&[("EXISTS a b", ":0\r\n"), ("DBSIZE", ":2\r\n")]);
    }

    fn requests_at_and_above_capacity(threads) {
        let mut k = Case::new(threads);
        k.ints("TOKENLEASE k 10 1 1000 10", &[10, 0, 0, 10000]);
        k.ints("TOKENLEASE k 10 1 1000 11", &[0, 0, -1, 10000]);
        k.ints("TOKENLEASE k 10 1 1000 10", &[0, 0, 10000, 10000]);
        k.ints("TOKENLEASE k 10 1 1000 0", &[0, 0, 0, 10000]);
        k.ints("TOKENLEASE missing 10 1 1000 0", &[0, 10, 0, 0]);
        k.c.script(&[("EXISTS missing", ":0\r\n"), ("PTTL k", ":10000\r\n"), ("TYPE k", "+tokenbucket\r\n")]);
    }

    fn a_denial_consumes_nothing(threads) {
        let mut k = Case::new(threads);
        k.ints("TOKENLEASE k 10 1 1000 8", &[8, 2, 0, 8000]);
        k.ints("TOKENLEASE k 10 1 1000 5", &[0, 2, 3000, 8000]);
        k.ints("TOKENLEASE k 10 1 1000 2", &[2, 0, 0, 10000]);
        k.ints("TOKENLEASE k 10 1 1000 1000000", &[0, 0, -1, 10000]);
        k.at(1000).ints("TOKENLEASE k 10 1 1000 1", &[1, 0, 0, 10000]);
    }

    fn long_idle_and_fractions(threads) {
        let mut k = Case::new(threads);
        k.ints("TOKENLEASE big 1000000 1000000 1000 1000000", &[1000000, 0, 0, 1000]);
        k.at(12 * HOUR).ints("TOKENLEASE big 1000000 1000000 1000 1", &[1, 999999, 0, 1]);
        k.at(CENTURY).ints("TOKENLEASE big 1000000 1000000 1000 1", &[1, 999999, 0, 1]);

        let mut k = Case::new(threads);
        k.ints("TOKENLEASE k 5 1 1000 5", &[5, 0, 0, 5000]);
        let mut grants = Vec::new();
        for i in 1..=25u64 {
            let t = i * 400;
            let reply = k.at(t).c.call("TOKENLEASE k 5 1 1000 1");
            if reply.starts_with("*4\r\n:1\r\n") {
                grants.push(t);
            }
        }
        assert_eq!(grants, vec![1200, 2000, 3200, 4000, 5200, 6000, 7200, 8000, 9200, 10000]);
    }

    fn the_clock_going_back_mints_nothing(threads) {
        let mut k = Case::new(threads);
        k.at(1_000_000).ints("TOKENLEASE k 5 1 1000 1", &[1, 4, 0, 1000]);
        k.at(989_000).ints("TOKENLEASE k 5 1 1000 1", &[1, 3, 0, 2000]);
        k.at(1_001_000).ints("TOKENLEASE k 5 1 1000 1", &[1, 3, 0, 2000]);
    }

    fn changing_the_policy(threads) {
        let mut k = Case::new(threads);
        k.ints("TOKENLEASE k 1000 1000 1000 1000", &[1000, 0, 0, 1000]);
        k.ints("TOKENLEASE k 10 10 1000 1", &[0, 0, 100, 1000]);
        k.ints("TOKENLEASE j 1000 1000 1000 1", &[1, 999, 0, 1]);
        k.ints("TOKENLEASE j 10 10 1000 0", &[0, 10, 0, 0]);
    }

    // A call with a huge period cannot stall the key for the callers that
    // follow with sane parameters: it leaves an empty bucket, which their
    // rate refills, so one interval (2 s) later the key admits again (kept
    // as a TAT with no clamp: limited for 3,999,999,999,970 s).
    fn a_huge_gcra_period_is_clamped_by_the_next_policy(threads) {
        let mut k = Case::new(threads);
        k.at(1000).ints("CL.THROTTLE gl 0 1 4000000000000", &[0, 1, 0, -1, 4_000_000_000_000]);
        k.ints("CL.THROTTLE gl 15 30 60", &[1, 16, 0, 2, 32]);
        k.at(2999).ints("CL.THROTTLE gl 15 30 60", &[1, 16, 0, 1, 31]);
        k.at(3000).ints("CL.THROTTLE gl 15 30 60", &[0, 16, 0, -1, 32]);
        k.ints("CL.THROTTLE gl 15 30 60", &[1, 16, 0, 2, 32]);
    }

    // Callers passing other bursts on one key never mint cells for each
    // other: 12 calls of burst 9 are allowed 10; a peek and a call of burst 0
    // in between give the burst-9 caller nothing back (kept as a TAT
    // clamped to each caller's tolerance, the peek alone gave back 9).
    fn a_smaller_burst_gives_a_larger_one_nothing_back(threads) {
        let mut k = Case::new(threads);
        k.at(1000);
        let allowed = |k: &mut Case, call: &str, n: usize| {
            (0..n).filter(|_| k.c.call(call).starts_with("*5\r\n:0\r\n")).count()
        };
        assert_eq!(allowed(&mut k, "CL.THROTTLE z 9 1 3600", 12), 10);
        k.ints("CL.THROTTLE z 0 1 3600 0", &[0, 1, 0, -1, 3600]);
        k.ints("CL.THROTTLE z 0 1 3600", &[1, 1, 0, 3600, 3600]);
        assert_eq!(allowed(&mut k, "CL.THROTTLE z 9 1 3600", 5), 0);
        // An hour on: one cell, taken by the burst-0 caller; none left.
        k.at(3_601_000).ints("CL.THROTTLE z 0 1 3600", &[0, 1, 0, -1, 3600]);
        k.ints("CL.THROTTLE z 9 1 3600", &[1, 10, 0, 3600, 36000]);
    }

    fn sliding_window_no_double_burst_at_a_boundary(threads) {
        let mut k = Case::new(threads);
        k.at(59_900);
        for _ in 0..10 {
            assert!(k.c.call("SLIDINGWINDOW k 10 60000").starts_with("*4\r\n:1\r\n"));
        }
        k.at(60_100).ints("SLIDINGWINDOW k 10 60000", &[0, 10, 0, 5900]);
        for _ in 1..10 {
            assert!(k.c.call("SLIDINGWINDOW k 10 60000").starts_with("*4\r\n:0\r\n"));
        }
    }

    fn sliding_window_weighting(threads) {
        let mut k = Case::new(threads);
        for i in 0..50 {
            k.at(i * 200).ints("SLIDINGWINDOW k 100 10000", &[1, i as i64 + 1, 99 - i as i64, 0]);
        }
        k.at(11_000);
        for _ in 0..10 {
            assert!(k.c.call("SLIDINGWINDOW k 100 10000").starts_with("*4\r\n:1\r\n"));
        }
        k.ints("SLIDINGWINDOW k 100 10000 COUNT 0", &[0, 55, 45, 0]);
    }

    fn sliding_window_small_limits_and_expiry(threads) {
        let mut k = Case::new(threads);
        k.at(500).ints("SLIDINGWINDOW k 1 1000", &[1, 1, 0, 0]);
        k.c.script(&[("TYPE k", "+slidingwindow\r\n"), ("PTTL k", ":1500\r\n")]);
        k.at(1200).ints("SLIDINGWINDOW k 1 1000", &[0, 1, 0, 800]);
        k.at(2000).c.script(&[("EXISTS k", ":0\r\n")]);
    }

    fn gcra_redis_cell_compatibility(threads) {
        let mut k = Case::new(threads);
        k.ints("CL.THROTTLE user123 15 30 60", &[0, 16, 15, -1, 2]);
        k.ints("CL.THROTTLE k 0 1 2", &[0, 1, 0, -1, 2]);
        k.ints("CL.THROTTLE k 0 1 2", &[1, 1, 0, 2, 2]);
        k.c.script(&[("TYPE k", "+gcra\r\n"), ("PTTL k", ":2000\r\n")]);
        // The same state through Redis 8.8's syntax, with a fractional period.
        k.ints("GCRA k 0 1 2.0 TOKENS 0", &[0, 1, 0, -1, 2]);
        k.ints("GCRA g 4 10 0.5 TOKENS 2", &[0, 5, 3, -1, 1]);
        k.at(2000).c.script(&[("EXISTS k", ":0\r\n")]);
    }

    fn full_buckets_expire_and_returns_delete(threads) {
        let mut k = Case::new(threads);
        k.ints("TOKENLEASE k 10 1 1000 4", &[4, 6, 0, 4000]);
        k.c.script(&[
            ("PEXPIRETIME k", ":1700000004000\r\n"),
            ("TOKENRETURN k 10 1 1000 1", ":7\r\n"),
            ("PTTL k", ":3000\r\n"),
            ("TOKENRETURN k 10 1 1000 5", ":10\r\n"),
            ("EXISTS k", ":0\r\n"),
            ("TOKENRETURN k 10 1 1000 5", ":10\r\n"),
            ("EXISTS k", ":0\r\n"),
        ]);
        k.ints("TOKENLEASE k 10 1 1000 1", &[1, 9, 0, 1000]);
        k.at(999).c.script(&[("EXISTS k", ":1\r\n")]);
        k.at(1000).c.script(&[("EXISTS k", ":0\r\n")]);
    }

    fn errors_name_their_argument(threads) {
        let mut k = Case::new(threads);
        let not_int = "-ERR value is not an integer or out of range\r\n";
        k.c.script(&[
            ("TOKENLEASE k 0 1 1000 1", "-ERR capacity must be positive\r\n"),
            ("TOKENLEASE k 10 -1 1000 1", "-ERR rate must be positive\r\n"),
            ("TOKENLEASE k 10 1 0 1", "-ERR period_ms must be positive\r\n"),
            ("TOKENLEASE k 10 1 1000 x", not_int),
            ("TOKENLEASE k 10 1 1000 -1", not_int),
            ("TOKENLEASE k 1.5 1 1000 1", not_int),
            ("TOKENLEASE k 10 1 1000 5 MIN 0", "-ERR MIN must be between 1 and requested\r\n"),
            ("TOKENLEASE k 10 1 1000 5 MIN 6", "-ERR MIN must be between 1 and requested\r\n"),
            ("TOKENLEASE k 10 1 1000 5 MAX 1", "-ERR syntax error\r\n"),
            ("TOKENLEASE k 10 1 1000 5 MIN 1 MIN 1", "-ERR syntax error\r\n"),
            ("TOKENLEASE k 10 1 1000", "-ERR wrong number of arguments for 'tokenlease' command\r\n"),
            ("SLIDINGWINDOW k 0 1000", "-ERR limit must be positive\r\n"),
            ("SLIDINGWINDOW k 10 1000 COUNT -1", not_int),
            ("CL.THROTTLE k 1 0 60", "-ERR count_per_period must be positive\r\n"),
            ("CL.THROTTLE k 1 1 60 1 2", "-ERR syntax error\r\n"),
            ("GCRA k 1 1 0", "-ERR period must be > 0 and < 1e12\r\n"),
            ("GCRA k 1 1 abc", "-ERR value is not a valid float\r\n"),
            ("CL.THROTTLE k 9223372036854775806 1 9223372036854775807",
             "-ERR rate limit parameters exceed the supported time range\r\n"),
            ("EXISTS k", ":0\r\n"),
            ("SET s v", "+OK\r\n"),
            ("TOKENLEASE s 10 1 1000 1", "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
            ("SLIDINGWINDOW s 10 1000", "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
            ("CL.THROTTLE s 1 1 1", "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
            ("RLSTATE s", "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
            ("CL.THROTTLE g 1 1 1", "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:1\r\n"),
            ("TOKENLEASE g 10 1 1000 1", "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
            ("GET g", "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
            ("INCR g", "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
            ("APPEND g x", "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
        ]);
    }

    fn rlstate_shows_and_restore_recreates(threads) {
        let mut k = Case::new(threads);
        k.at(2000).ints("TOKENLEASE k 10 1 1000 8", &[8, 2, 0, 8000]);
        k.at(2500);
        let state = "*12\r\n+type\r\n+tokenbucket\r\n+tokens\r\n:2\r\n+fraction\r\n:0\r\n\
                     +period_ms\r\n:1000\r\n+refilled_at_ms\r\n:1700000002000\r\n+pttl\r\n:7500\r\n";
        assert_eq!(k.c.call("RLSTATE k"), state);
        assert_eq!(k.c.call("RLSTATE nothing"), "$-1\r\n");
        // The effect TOKENLEASE emitted, applied to another key, is the same state.
        k.c.script(&[
            ("LH.RESTORE k2 TOKENBUCKET 2 0 1000 1700000002000 PXAT 1700000010000", "+OK\r\n"),
            ("PTTL k2", ":7500\r\n"),
        ]);
        k.ints("TOKENLEASE k 10 1 1000 3", &[0, 2, 500, 7500]);
        k.ints("TOKENLEASE k2 10 1 1000 3", &[0, 2, 500, 7500]);
        k.ints("TOKENLEASE k2 10 1 1000 3 MIN 2", &[2, 0, 0, 9500]);

        k.ints("SLIDINGWINDOW w 10 1000 COUNT 3", &[3, 3, 7, 0]);
        assert_eq!(
            k.c.call("RLSTATE w"),
            "*12\r\n+type\r\n+slidingwindow\r\n+window_ms\r\n:1000\r\n+window_start_ms\r\n:1700000002000\r\n\
             +previous\r\n:0\r\n+current\r\n:3\r\n+pttl\r\n:1500\r\n"
        );
        k.c.script(&[
            ("LH.RESTORE w2 SLIDINGWINDOW 1000 1700000002000 0 3 PXAT 1700000004000", "+OK\r\n"),
            ("LH.RESTORE g GCRA 1700000002500 0 1 1700000004500 PXAT 1700000004500", "+OK\r\n"),
            ("LH.RESTORE gone GCRA 1699999999000 0 1 1700000001000 PXAT 1700000001000", "+OK\r\n"),
            ("EXISTS gone", ":0\r\n"),
            ("LH.RESTORE bad TOKENBUCKET 1 1000 1000 0 PXAT 1800000000000", "-ERR invalid rate limit state\r\n"),
            ("LH.RESTORE bad HASH 1 1 1 1 PXAT 1", "-ERR syntax error\r\n"),
        ]);
        k.at(3100).ints("SLIDINGWINDOW w2 10 1000 COUNT 0", &[0, 3, 7, 0]);
        // Empty since 0.6 s ago, 1 s per request, a burst of 1 (tolerance
        // 2 s): the next request fits in 0.4 s, shown as 1; full again in
        // 1.4 s, 2.
        k.ints("CL.THROTTLE g 1 1 1", &[1, 2, 0, 1, 2]);
    }
}

/// A real client (redis-rs) against the real clock: the grants of many
/// pipelined and concurrent leases never exceed what the bucket can hold.
#[test]
fn redis_rs_leases_never_exceed_capacity() {
    let server = TestServer::start(2);
    block_on(Duration::from_secs(30), async {
        let client = redis::Client::open(server.url()).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        // 1 token per day: no refill worth a token during the test.
        let mut pipe = redis::pipe();
        for _ in 0..200 {
            pipe.cmd("TOKENLEASE")
                .arg("gw:{tenant}")
                .arg(1000)
                .arg(1)
                .arg(86_400_000)
                .arg(7)
                .arg("MIN")
                .arg(1);
        }
        let replies: Vec<(i64, i64, i64, i64)> = pipe.query_async(&mut con).await.unwrap();
        let granted: i64 = replies.iter().map(|r| r.0).sum();
        assert_eq!(granted, 1000);
        let partial = replies[142];
        assert_eq!(
            (partial.0, partial.1, partial.2),
            (6, 0, 0),
            "the partial grant"
        );
        // A full day per token, less the few ms of refill since the first call.
        assert!(
            (86_399_970_000..=86_400_000_000).contains(&partial.3),
            "{partial:?}"
        );
        assert_eq!(replies[143].0, 0);
        assert!(
            replies[143].2 > 86_000_000,
            "about a day: {:?}",
            replies[143]
        );
        let back: i64 = redis::cmd("TOKENRETURN")
            .arg("gw:{tenant}")
            .arg(1000)
            .arg(1)
            .arg(86_400_000)
            .arg(10)
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(back, 10);
        let kind: String = redis::cmd("TYPE")
            .arg("gw:{tenant}")
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(kind, "tokenbucket");

        let throttle: Vec<i64> = redis::cmd("CL.THROTTLE")
            .arg("cell")
            .arg(15)
            .arg(30)
            .arg(60)
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(throttle, vec![0, 16, 15, -1, 2]);
        let err = redis::cmd("TOKENLEASE")
            .arg("cell")
            .arg(1)
            .arg(1)
            .arg(1)
            .arg(1)
            .query_async::<redis::Value>(&mut con)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("WRONGTYPE"));
    });
}

/// Many connections lease from one key at once: exactly the capacity is
/// granted in total, whatever thread each connection landed on.
#[test]
fn concurrent_connections_share_one_bucket_exactly() {
    let server = TestServer::start(2);
    let addr = server.addr;
    let threads: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Raw::connect(addr);
                let mut granted = 0;
                for _ in 0..100 {
                    let reply = c.call("TOKENLEASE shared 500 1 86400000 1");
                    if reply.starts_with("*4\r\n:1\r\n") {
                        granted += 1;
                    }
                }
                granted
            })
        })
        .collect();
    let total: i64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(total, 500);
}

// Short sliding-window keys live in compact entries: generic commands see
// them as ordinary keys, and a rate-limit write sets its own deadline again
// whatever EXPIRE or PERSIST did in between.
on_1_and_2_threads! {
    fn compact_keys_behave_as_ordinary_ones(threads) {
        let mut k = Case::new(threads);
        k.ints("SLIDINGWINDOW sixteen_bytes_ab 10 1000", &[1, 1, 9, 0]);
        k.ints("SLIDINGWINDOW seventeen_bytes_ab 10 1000", &[1, 1, 9, 0]);
        k.c.script(&[
            ("PTTL sixteen_bytes_ab", ":2000\r\n"),
            ("PTTL seventeen_bytes_ab", ":2000\r\n"),
            ("PERSIST sixteen_bytes_ab", ":1\r\n"),
            ("TTL sixteen_bytes_ab", ":-1\r\n"),
            ("EXPIRE seventeen_bytes_ab 100", ":1\r\n"),
        ]);
        k.at(500).ints("SLIDINGWINDOW sixteen_bytes_ab 10 1000", &[1, 2, 8, 0]);
        k.ints("SLIDINGWINDOW seventeen_bytes_ab 10 1000", &[1, 2, 8, 0]);
        k.c.script(&[
            ("PTTL sixteen_bytes_ab", ":1500\r\n"),
            ("PTTL seventeen_bytes_ab", ":1500\r\n"),
            ("DBSIZE", ":2\r\n"),
            ("DEL sixteen_bytes_ab", ":1\r\n"),
            ("EXISTS sixteen_bytes_ab", ":0\r\n"),
            // PXAT the state implies, one it does not, one already past.
            ("LH.RESTORE r1 SLIDINGWINDOW 1000 1700000000000 0 3 PXAT 1700000002000", "+OK\r\n"),
            ("LH.RESTORE r2 SLIDINGWINDOW 1000 1700000000000 0 3 PXAT 1700000009000", "+OK\r\n"),
            ("LH.RESTORE r3 SLIDINGWINDOW 1000 1700000000000 0 3 PXAT 1700000000500", "+OK\r\n"),
            ("PTTL r1", ":1500\r\n"),
            ("PTTL r2", ":8500\r\n"),
            ("EXISTS r3", ":0\r\n"),
            ("SET s v", "+OK\r\n"),
            ("SLIDINGWINDOW s 10 1000", "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
            ("SET r1 v", "+OK\r\n"),
            ("TTL r1", ":-1\r\n"),
            ("DBSIZE", ":4\r\n"),
        ]);
        k.at(2000).c.script(&[("EXISTS seventeen_bytes_ab", ":0\r\n"), ("PTTL r2", ":7000\r\n")]);
        // More short keys in one slot than its compact vector holds.
        for i in 0..300 {
            k.ints(&format!("SLIDINGWINDOW {{t}}:{i} 10 1000"), &[1, 1, 9, 0]);
        }
        k.c.script(&[("DBSIZE", ":303\r\n"), ("PTTL {t}:0", ":2000\r\n"), ("PTTL {t}:299", ":2000\r\n")]);
        assert_eq!(k.c.call("KEYS {t}:*").matches("\r\n$").count(), 300);
        k.at(4000).c.script(&[("EXISTS {t}:5 {t}:250", ":0\r\n")]);
    }
}

/// The first reply of `*4\r\n:g\r\n...` (TOKENLEASE's granted count).
fn granted_of(reply: &str) -> u64 {
    reply
        .split("\r\n")
        .nth(1)
        .and_then(|g| g.strip_prefix(':'))
        .and_then(|g| g.parse().ok())
        .unwrap_or_else(|| panic!("not a TOKENLEASE reply: {reply:?}"))
}

/// Races 50 connections over both threads of a real server on `key`, split
/// by `LH.SPLIT key <split>` once one call `line(0)` has stored its state
/// (a missing key is not split), connection `i` sending `line(i)` in pipelines
/// of 4 until a whole pipeline gets nothing (`got(i, reply)`: what one
/// reply to connection `i` granted); checks that some calls were served by
/// the thread that read them (local grants) and the key is still split,
/// then runs each command of `then` (`{key}` for the key), asserting its
/// reply contains the text given; returns the total granted, the first
/// call's included.
fn race_a_split_key(
    key: &str,
    split: &str,
    line: fn(usize) -> String,
    got: fn(usize, &str) -> u64,
    then: &[(&str, &str)],
) -> u64 {
    let server = TestServer::start(2);
    let mut admin = server.raw();
    let first = got(0, &admin.call(&line(0)));
    assert!(first > 0, "the first call stores the key");
    assert_eq!(admin.call(&format!("LH.SPLIT {key} {split}")), ":1\r\n");
    let conns: Vec<Raw> = (0..50).map(|_| server.raw()).collect();
    let racers: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            let line = line(i);
            std::thread::spawn(move || {
                let mut total = 0;
                loop {
                    for _ in 0..4 {
                        c.send_cmd(&line);
                    }
                    let round: u64 = (0..4).map(|_| got(i, &c.read_text())).sum();
                    if round == 0 {
                        return total;
                    }
                    total += round;
                }
            })
        })
        .collect();
    let total: u64 = first + racers.into_iter().map(|r| r.join().unwrap()).sum::<u64>();
    let info = admin.call("INFO hotkeys");
    let field = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in {info}"))
    };
    assert!(field("hotkey_local_grants") > 0, "{info}");
    assert_eq!(field("hotkey_split_keys"), 1, "{info}");
    for (cmd, want) in then {
        let reply = admin.call(&cmd.replace("{key}", key));
        assert!(reply.contains(want), "{cmd}: {reply:?}");
    }
    total
}

/// A split hot key (`docs/hotkeys.md`) raced by 50 connections over both
/// threads of a real server, capacity 10 000 and one token an hour: exactly
/// 10 000 granted in all, most of them by the thread that read the request
/// (local grants, no hop), and the key reads empty at the end.
#[test]
fn fifty_connections_race_a_split_key_for_exactly_its_capacity() {
    let line = |i| format!("TOKENLEASE launch 10000 1 3600000 {} MIN 1", 1 + i % 7);
    let then = [
        // Denied, nothing left (the real clock refilled a fraction meanwhile).
        ("TOKENLEASE {key} 10000 1 3600000 1", "*4\r\n:0\r\n:0\r\n"),
        // Merged, the whole bucket is empty: nothing was minted or lost.
        ("LH.MERGE {key}", ":1\r\n"),
        ("RLSTATE {key}", "tokens\r\n:0\r\n"),
    ];
    let total = race_a_split_key(
        "launch",
        "10000 1 3600000",
        line,
        |_, r| granted_of(r),
        &then,
    );
    assert_eq!(total, 10_000);
}

/// The cells a CL.THROTTLE reply `*5\r\n:limited\r\n...` to a call of `q`
/// cells allowed: 0 when limited, else `q`.
fn allowed_of(reply: &str, q: u64) -> u64 {
    match reply.split("\r\n").nth(1) {
        Some(":0") => q,
        Some(":1") => 0,
        _ => panic!("not a CL.THROTTLE reply: {reply:?}"),
    }
}

/// The same race on a split CL.THROTTLE key of burst 9 999 (10 000 cells)
/// at one cell an hour, connection `i` asking `1 + i % 3` cells at a time:
/// exactly 10 000 cells allowed in all (the connections asking one drain
/// the last), and the merged key holds none.
#[test]
fn fifty_connections_race_a_split_throttle_key_for_exactly_its_burst() {
    let line = |i| format!("CL.THROTTLE launch 9999 1 3600 {}", 1 + i % 3);
    let got = |i, r: &str| allowed_of(r, 1 + i as u64 % 3);
    let then = [
        // Limited, of 10 000, none left.
        (
            "CL.THROTTLE {key} 9999 1 3600 1",
            "*5\r\n:1\r\n:10000\r\n:0\r\n",
        ),
        // Merged: still none (the TAT is about 10 000 hours ahead).
        ("LH.MERGE {key}", ":1\r\n"),
        (
            "CL.THROTTLE {key} 9999 1 3600 0",
            "*5\r\n:0\r\n:10000\r\n:0\r\n",
        ),
    ];
    let total = race_a_split_key("launch", "CL.THROTTLE 9999 1 3600", line, got, &then);
    assert_eq!(total, 10_000);
}

/// The same race on a split SLIDINGWINDOW key of limit 10 000 in a window
/// of an hour, connection `i` asking `1 + i % 3` hits at a time: exactly
/// 10 000 admitted in all (the connections asking one take the last), and
/// the merged pair counts them all.
#[test]
fn fifty_connections_race_a_split_window_key_for_exactly_its_limit() {
    let line = |i| format!("SLIDINGWINDOW launch 10000 3600000 COUNT {}", 1 + i % 3);
    let then = [
        // Denied: 10 000 counted, none left.
        (
            "SLIDINGWINDOW {key} 10000 3600000",
            "*4\r\n:0\r\n:10000\r\n:0\r\n",
        ),
        // Merged: the very 10 000 hits, no admission minted or lost.
        ("LH.MERGE {key}", ":1\r\n"),
        ("RLSTATE {key}", "current\r\n:10000\r\n"),
    ];
    let total = race_a_split_key(
        "launch",
        "SLIDINGWINDOW 10000 3600000",
        line,
        |_, r| granted_of(r),
        &then,
    );
    assert_eq!(total, 10_000);
}

/// The `commands=` of each `shardN:` line of `INFO leasehold`, by shard.
fn shard_commands(server: &TestServer) -> Vec<u64> {
    let info = server.raw().call("INFO leasehold");
    info.lines()
        .filter(|l| l.starts_with("shard"))
        .map(|l| {
            l.split(',')
                .find_map(|f| f.split("commands=").nth(1))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or_else(|| panic!("no commands= in {l:?}"))
        })
        .collect()
}

/// `INFO leasehold`'s per-shard `commands` (what the hot-key benchmark
/// reads to say which shard ran a hot key's calls) counts a call on the
/// shard that ran it: unsplit, every call of a key on the key's owner,
/// whichever thread read it; split, a local grant on the thread that read
/// it, so both shards run about half.
#[test]
fn shard_commands_count_a_split_keys_calls_where_they_ran() {
    let server = TestServer::start(2);
    let mut admin = server.raw();
    let line = "TOKENLEASE hot 1000000 1 3600000 1";
    assert_eq!(granted_of(&admin.call(line)), 1);
    // 8 connections: accepted connections are spread over both threads.
    let mut conns: Vec<Raw> = (0..8).map(|_| server.raw()).collect();
    let run = |conns: &mut Vec<Raw>| {
        let before = shard_commands(&server);
        for c in conns.iter_mut() {
            for _ in 0..100 {
                c.send_cmd(line);
            }
            for _ in 0..100 {
                assert_eq!(granted_of(&c.read_text()), 1);
            }
        }
        let after = shard_commands(&server);
        // Each INFO runs once on a shard of its own: the second one is in
        // `after`, on one shard.
        let d: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        assert_eq!(d.len(), 2);
        assert!(
            d.iter().sum::<u64>() >= 800 && d.iter().sum::<u64>() <= 802,
            "{d:?}"
        );
        d
    };
    let unsplit = run(&mut conns);
    assert!(
        unsplit.iter().any(|&n| n >= 800),
        "one owner ran all: {unsplit:?}"
    );
    assert_eq!(admin.call("LH.SPLIT hot 1000000 1 3600000"), ":1\r\n");
    let split = run(&mut conns);
    assert!(split.iter().all(|&n| (300..=500).contains(&n)), "{split:?}");
}
