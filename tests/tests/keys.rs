//! The key commands over TCP, on 1 and 2 threads, on a hand-set clock so
//! that TTLs are exact: deadlines that overflow are refused, zero and
//! negative expiry deletes, EXPIRE's NX/XX/GT/LT on keys without a TTL, TTL
//! and PTTL replies, and the writes that keep or clear a TTL.

use leasehold_tests::{manual_server, on_1_and_2_threads, T0_MS};

on_1_and_2_threads! {
    fn e1_overflowing_deadlines(threads) {
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

    fn e2_zero_and_negative(threads) {
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

    fn e3_nx_xx_gt_lt_without_ttl(threads) {
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

    fn e4_ttl_replies_and_keeping_the_ttl(threads) {
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
}
