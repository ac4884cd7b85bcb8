//! The RESP protocol over raw connections, on 1 and 2 threads: bad length
//! headers close the connection with the error Redis sends, arity errors
//! (every command of the table) consume the whole request, bulks are read by
//! length however the input is split, requests are flat arrays, RESP3 only
//! after HELLO 3, replies to a long pipeline come in order, a flooding
//! client delays no one, and an error that quotes the request (however
//! hostile its bytes) stays one line.

use std::time::{Duration, Instant};

use leasehold_server::commands::table;
use leasehold_tests::{cmd, on_1_and_2_threads, resp, Raw, TestServer};

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
    fn length_headers(threads) {
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

    fn arity_errors_consume_the_frame(threads) {
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
                let mut expected = format!("-ERR wrong number of arguments for '{}' command\r\n", spec.name);
                // Redis 7 answers EXEC's arity error as a transaction abort.
                if spec.name == "exec" {
                    expected = format!("-EXECABORT Transaction discarded because of: {}", &expected[5..]);
                }
                assert_eq!(c.read_text(), expected, "{} with {argc} arguments", spec.name);
                assert_eq!(c.read_text(), "+PONG\r\n", "after {} with {argc} arguments", spec.name);
                checked += 1;
            }
        }
        assert!(checked >= table().commands.len() / 2, "checked only {checked}");
    }

    fn lengths_not_line_scanning(threads) {
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

    fn requests_are_flat(threads) {
        let server = TestServer::start(threads);
        let mut bystander = server.raw();
        rejects_and_closes(
            &server,
            &mut bystander,
            b"*1\r\n*1\r\n$4\r\nPING\r\n",
            "-ERR Protocol error: expected '$', got '*'\r\n",
        );
    }

    fn resp3_only_after_hello_3(threads) {
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

    fn ten_thousand_incr_in_one_write(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        let one = cmd("INCR c");
        c.send(&one.repeat(10_000));
        let expected: String = (1..=10_000).map(|i| format!(":{i}\r\n")).collect();
        let got = c.read_exact_raw(expected.len(), Duration::from_secs(20));
        assert!(got == expected.as_bytes(), "replies out of order or wrong");
        assert_eq!(c.read_raw_for(Duration::from_millis(100)), "");
    }

    fn a_flooding_client_delays_no_one(threads) {
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
}

/// Reads exactly `n` bytes as text.
fn read_n(c: &mut Raw, n: usize) -> String {
    String::from_utf8_lossy(&c.read_exact_raw(n, Duration::from_secs(5))).into_owned()
}
