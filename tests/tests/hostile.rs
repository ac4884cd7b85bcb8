//! Regressions found by hostile and Redis-comparison probing, on 1 and 2
//! threads, over raw connections.

use std::sync::Arc;

use leasehold_server::clock::SystemClock;
use leasehold_tests::{manual_server, on_1_and_2_threads, TestServer, T0_MS};

on_1_and_2_threads! {
    fn set_and_getex_repeat_an_expiry_option(threads) {
        let (server, _clock) = manual_server(threads);
        let mut c = server.raw();
        c.script(&[
            // Redis 7: the same unit may repeat (the last wins); units never mix.
            ("SET k v EX 10 EX 20", "+OK\r\n"),
            ("TTL k", ":20\r\n"),
            ("SET k v PXAT 1700000100000 PXAT 1700000200000", "+OK\r\n"),
            ("PEXPIRETIME k", ":1700000200000\r\n"),
            ("SET k v PX 10 EX 20", "-ERR syntax error\r\n"),
            ("SET k v EX 10 KEEPTTL", "-ERR syntax error\r\n"),
            ("GETEX k EX 5 EX 6", "$1\r\nv\r\n"),
            ("TTL k", ":6\r\n"),
            ("GETEX k PERSIST PERSIST", "$1\r\nv\r\n"),
            ("TTL k", ":-1\r\n"),
            ("GETEX k PERSIST EX 5", "-ERR syntax error\r\n"),
            ("GETEX k EX 5 PX 5", "-ERR syntax error\r\n"),
        ]);
    }

    fn expiretime_rounds_to_the_nearest_second(threads) {
        let (server, _clock) = manual_server(threads);
        let mut c = server.raw();
        c.script(&[
            ("SET k v PXAT 1700000005600", "+OK\r\n"),
            ("EXPIRETIME k", ":1700000006\r\n"),
            ("PEXPIREAT k 1700000005400", ":1\r\n"),
            ("EXPIRETIME k", ":1700000005\r\n"),
        ]);
    }

    fn pathological_keys_pattern_does_not_freeze_the_shard(threads) {
        let (server, _clock) = manual_server(threads);
        let mut c = server.raw();
        let key = vec![b'a'; 5000];
        assert_eq!(c.call_args(&[b"SET", &key, b"v"]), "+OK\r\n");
        let start = std::time::Instant::now();
        assert_eq!(c.call("KEYS *a*a*a*a*a*a*a*a*a*a*a*a*b"), "*0\r\n");
        // Every shard's part of the scan (one call per shard at this COUNT).
        for _ in 0..threads {
            let reply = c.call("SCAN 0 MATCH *a*a*a*a*a*a*a*a*a*a*a*a*b COUNT 100000");
            assert!(reply.ends_with("*0\r\n"), "{reply}");
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }

    fn rate_limit_deadlines_stay_within_i64(threads) {
        let (server, _clock) = manual_server(threads);
        let mut c = server.raw();
        let max = i64::MAX;
        let pttl = format!(":{}\r\n", max - T0_MS as i64);
        c.script(&[
            // Both windows of a huge window end past i64::MAX ms: the key
            // lives until i64::MAX, not until a wrapped (negative) deadline.
            ("SLIDINGWINDOW sw 1 9223372036854775807", "*4\r\n:1\r\n:1\r\n:0\r\n:0\r\n"),
            ("PEXPIRETIME sw", ":9223372036854775807\r\n"),
            ("PTTL sw", &pttl),
            ("TOKENLEASE tb 9223372036854775807 1 9223372036854775807 1", "*4\r\n:1\r\n:9223372036854775806\r\n:0\r\n:9223372036854775807\r\n"),
            ("PEXPIRETIME tb", ":9223372036854775807\r\n"),
            ("PTTL tb", &pttl),
            (
                "LH.RESTORE f TOKENBUCKET 1 0 1000 1700000000000 PXAT 18446744073709551615",
                "-ERR invalid expire time in 'lh.restore' command\r\n",
            ),
            ("EXISTS f", ":0\r\n"),
        ]);
    }

    fn hello_noauth_has_redis_7_0_wording(threads) {
        let mut config = TestServer::config(threads);
        config.security.requirepass = "secret".into();
        let server = TestServer::with_config(config, Arc::new(SystemClock::new()));
        let mut c = server.raw();
        assert_eq!(
            c.call("HELLO 3"),
            "-NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO AUTH <user> <pass> option can be used to authenticate the client and select the \
             RESP protocol version at the same time\r\n"
        );
    }

    fn config_set_refuses_limits_that_lock_everyone_out(threads) {
        let (server, _clock) = manual_server(threads);
        let mut c = server.raw();
        let failed = |name: &str, why: &str| {
            format!("-ERR CONFIG SET failed (possibly related to argument '{name}') - {why}\r\n")
        };
        let mem = "argument must be between 1048576 and 9223372036854775807 inclusive";
        assert_eq!(c.call("CONFIG SET proto-max-bulk-len 0"), failed("proto-max-bulk-len", mem));
        assert_eq!(c.call("CONFIG SET client-query-buffer-limit 1"), failed("client-query-buffer-limit", mem));
        assert_eq!(
            c.call("CONFIG SET maxclients 0"),
            failed("maxclients", "argument must be between 1 and 4294967295 inclusive")
        );
        assert_eq!(
            c.call("CONFIG SET proto-max-bulk-len -1"),
            failed("proto-max-bulk-len", "argument must be a memory value")
        );
        // Nothing changed: requests with bulks and new connections still work.
        assert_eq!(c.call("SET k v"), "+OK\r\n");
        assert_eq!(server.raw().call("PING"), "+PONG\r\n");
        assert_eq!(c.call("CONFIG SET proto-max-bulk-len 2mb client-query-buffer-limit 1MB"), "+OK\r\n");
        assert_eq!(
            c.call("CONFIG GET proto-max-bulk-len"),
            "*2\r\n$18\r\nproto-max-bulk-len\r\n$7\r\n2097152\r\n"
        );
        assert_eq!(c.call("SET k v"), "+OK\r\n");
    }
}
