//! Every case of `shared/cases/resp-and-keys.md` (F1..F6, I1, I2, E1..E4),
//! each with its right value, on a server with 1 and with 2 threads.
//!
//! The integer and expiry cases run on a [`ManualClock`] so that TTLs are exact.

use std::time::{Duration, Instant};

use leasehold_server::commands::table;
use leasehold_tests::{cmd, manual_server, on_1_and_2_threads, resp, Raw, TestServer, T0_MS};

/// How long a closing connection may take to close.
const CLOSE: Duration = Duration::from_secs(5);
/// Sends `input` on a fresh connection and checks that exactly `reply`
/// comes back before the server closes it; `bystander` must still answer.
fn rejects_and_closes(server: &TestServer, bystander: &mut Raw, input: &[u8], reply: &str) {
    let mut c = server.raw();
    c.send(input);
    c.expect_closed_after(reply, CLOSE);
    assert_eq!(
        bystander.call("PING"),
        "+PONG\r\n",
        "after {:?}",
        String::from_utf8_lossy(input)
    );
}

on_1_and_2_threads! {
    fn f1_length_headers(threads) {
        let server = TestServer::start(threads);
        let mut bystander = server.raw();
        let bulk = "-ERR Protocol error: invalid bulk length\r\n";
        rejects_and_closes(&server, &mut bystander, b"*2\r\n$3\r\nGET\r\n$-1\r\n", bulk);
        rejects_and_closes(&server, &mut bystander, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$\r\n1\r\n", bulk);
        // Over 512 MB: refused from the header alone (the test would time out
        // waiting for 512 MB of input otherwise).
        rejects_and_closes(&server, &mut bystander, b"*2\r\n$4\r\nECHO\r\n$536870913\r\n", bulk);
        rejects_and_closes(
            &server,
            &mut bystander,
            b"*1048577\r\n",
            "-ERR Protocol error: invalid multibulk length\r\n",
        );

        let mut c = server.raw();
        c.send(b"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n");
        assert_eq!(c.read_text(), "+PONG\r\n");
        assert_eq!(c.read_raw_for(Duration::from_millis(200)), "", "only one reply");
        assert_eq!(c.call("PING"), "+PONG\r\n", "still open");
        assert_eq!(bystander.call("PING"), "+PONG\r\n");
    }

    fn f2_arity_errors_consume_the_frame(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        c.send(&[cmd("GET a b"), cmd("PING")].concat());
        assert_eq!(c.read_text(), "-ERR wrong number of arguments for 'get' command\r\n");
        assert_eq!(c.read_text(), "+PONG\r\n");

        // Every command, one argument missing and (for fixed arities) one extra,
        // each followed by PING in the same write.
        let mut checked = 0;
        for spec in &table().commands {
            let need = spec.arity.unsigned_abs() as usize;
            let mut counts = vec![need - 1];
            if spec.arity > 0 {
                counts.push(need + 1);
            }
            for argc in counts.into_iter().filter(|&n| n >= 1) {
                let mut args: Vec<&[u8]> = vec![spec.name.as_bytes()];
                args.resize(argc, b"x");
                c.send(&[resp(&args), cmd("PING")].concat());
                let expected = format!("-ERR wrong number of arguments for '{}' command\r\n", spec.name);
                assert_eq!(c.read_text(), expected, "{} with {argc} arguments", spec.name);
                assert_eq!(c.read_text(), "+PONG\r\n", "after {} with {argc} arguments", spec.name);
                checked += 1;
            }
        }
        assert!(checked >= table().commands.len() / 2, "checked only {checked}");
    }

    fn f3_lengths_not_line_scanning(threads) {
        let server = TestServer::start(threads);
        let cases: [(&[u8], &str); 3] = [
            (b"*2\r\n$4\r\nECHO\r\n$3\r\n*a*\r\n", "$3\r\n*a*\r\n"),
            (b"*2\r\n$4\r\nECHO\r\n$4\r\na\r\nb\r\n", "$4\r\na\r\nb\r\n"),
            (
                b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
                "+OK\r\n$0\r\n\r\n",
            ),
        ];
        let mut c = server.raw();
        for (input, expected) in cases {
            c.send(input);
            assert_eq!(read_n(&mut c, expected.len()), expected, "one write");
            // Two writes, split at every offset; the pause lets the server
            // read the first part on its own.
            for at in 1..input.len() {
                c.send(&input[..at]);
                std::thread::sleep(Duration::from_millis(2));
                c.send(&input[at..]);
                assert_eq!(read_n(&mut c, expected.len()), expected, "split at {at}");
            }
            // One byte per write.
            for b in input {
                c.send(std::slice::from_ref(b));
            }
            assert_eq!(read_n(&mut c, expected.len()), expected, "byte by byte");
        }
        assert_eq!(c.read_raw_for(Duration::from_millis(100)), "", "nothing extra");
    }

    fn f4_requests_are_flat(threads) {
        let server = TestServer::start(threads);
        let mut bystander = server.raw();
        rejects_and_closes(
            &server,
            &mut bystander,
            b"*1\r\n*1\r\n$4\r\nPING\r\n",
            "-ERR Protocol error: expected '$', got '*'\r\n",
        );
    }

    fn f5_resp3_only_after_hello_3(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        assert_eq!(c.call("GET nokey"), "$-1\r\n");
        let hello3 = c.call("HELLO 3");
        assert!(hello3.starts_with("%7\r\n$6\r\nserver\r\n"), "{hello3:?}");
        assert!(hello3.contains("$5\r\nproto\r\n:3\r\n"), "{hello3:?}");
        assert_eq!(c.call("GET nokey"), "_\r\n");
        assert_eq!(c.call("MGET nokey"), "*1\r\n_\r\n");
        let hello2 = c.call("HELLO 2");
        assert!(hello2.starts_with("*14\r\n$6\r\nserver\r\n"), "{hello2:?}");
        assert!(hello2.contains("$5\r\nproto\r\n:2\r\n"), "{hello2:?}");
        assert_eq!(c.call("GET nokey"), "$-1\r\n");
    }

    fn f6_ten_thousand_incr_in_one_write(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        let one = cmd("INCR c");
        c.send(&one.repeat(10_000));
        let expected: String = (1..=10_000).map(|i| format!(":{i}\r\n")).collect();
        let got = c.read_exact_raw(expected.len(), Duration::from_secs(20));
        assert!(got == expected.as_bytes(), "replies out of order or wrong");
        assert_eq!(c.read_raw_for(Duration::from_millis(100)), "");
    }

    fn f6_a_flooding_client_delays_no_one(threads) {
        const PINGS: usize = 1_000_000;
        let server = TestServer::start(threads);
        let mut flooder = server.raw();
        let mut writer = flooder.stream().try_clone().expect("clone socket");
        writer.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
        let flood = cmd("PING").repeat(PINGS);
        let writing = std::thread::spawn(move || {
            use std::io::Write;
            writer.write_all(&flood)
        });
        // Let the flood fill the socket buffers, then measure another client.
        std::thread::sleep(Duration::from_millis(300));
        let mut other = server.raw();
        let mut worst = Duration::ZERO;
        for _ in 0..5 {
            let start = Instant::now();
            assert_eq!(other.call("PING"), "+PONG\r\n");
            worst = worst.max(start.elapsed());
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(worst < Duration::from_secs(1), "another client's PING took {worst:?}");
        // The flooder reads: every reply arrives, in a bounded time.
        let got = flooder.read_exact_raw(PINGS * 7, Duration::from_secs(60));
        assert!(got.chunks(7).all(|r| r == b"+PONG\r\n"), "a reply is not +PONG");
        writing.join().unwrap().expect("flood written");
        assert_eq!(flooder.call("PING"), "+PONG\r\n");
        eprintln!("flood of {PINGS} PINGs: other client's worst PING {worst:?}");
    }

    fn i1_strict_integers(threads) {
        let (server, _clock) = manual_server(threads);
        let mut c = server.raw();
        let not_int = "-ERR value is not an integer or out of range\r\n";
        for v in ["    11", "11    ", "+1", "01", "-0", "1e3"] {
            assert_eq!(c.call_args(&[b"SET", b"k", v.as_bytes()]), "+OK\r\n");
            assert_eq!(c.call("INCR k"), not_int, "INCR of {v:?}");
            assert_eq!(c.call("GET k"), format!("${}\r\n{v}\r\n", v.len()), "{v:?} unchanged");
        }
        c.script(&[
            ("SET k 5", "+OK\r\n"),
            ("INCRBY k +1", not_int),
            ("GET k", "$1\r\n5\r\n"),
            ("SET k 1e3", "+OK\r\n"),
            ("INCRBYFLOAT k 1", "$4\r\n1001\r\n"),
        ]);
        assert_eq!(c.call_args(&[b"SET", b"k", b" 11 "]), "+OK\r\n");
        assert_eq!(c.call("INCRBYFLOAT k 1"), "-ERR value is not a valid float\r\n");
    }

    fn i2_edges_of_i64(threads) {
        let (server, _clock) = manual_server(threads);
        let mut c = server.raw();
        let overflow = "-ERR increment or decrement would overflow\r\n";
        c.script(&[
            ("SET n 9223372036854775806", "+OK\r\n"),
            ("INCR n", ":9223372036854775807\r\n"),
            ("INCR n", overflow),
            ("GET n", "$19\r\n9223372036854775807\r\n"),
            ("SET n 100", "+OK\r\n"),
            ("INCRBY n 9223372036854775807", overflow),
            ("GET n", "$3\r\n100\r\n"),
            ("SET x 0", "+OK\r\n"),
            ("DECRBY x -9223372036854775808", "-ERR decrement would overflow\r\n"),
            ("GET x", "$1\r\n0\r\n"),
            ("SET m -9223372036854775808", "+OK\r\n"),
            ("DECR m", overflow),
            ("GET m", "$20\r\n-9223372036854775808\r\n"),
        ]);
    }

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

/// Reads exactly `n` bytes as text.
fn read_n(c: &mut Raw, n: usize) -> String {
    String::from_utf8_lossy(&c.read_exact_raw(n, Duration::from_secs(5))).into_owned()
}
