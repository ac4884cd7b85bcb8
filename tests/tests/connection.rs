//! The connection commands (HELLO, AUTH, SELECT, QUIT, RESET, CLIENT) over
//! raw connections, on 1 and 2 threads: HELLO's reply in RESP2 and RESP3, a
//! password and the smaller request limits before AUTH, what RESET forgets,
//! QUIT closing, and CLIENT's subcommands (names, ids, lists, kills).

use std::sync::Arc;
use std::time::Duration;

use leasehold_server::clock::SystemClock;
use leasehold_tests::{block_on, int_of, on_1_and_2_threads, q, Closed, TestServer, LIMIT};

on_1_and_2_threads! {
    fn hello_shapes(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        let id = int_of(&c.call("CLIENT ID"));
        let (reply, _) = { c.send_cmd("HELLO 3 SETNAME me"); c.read_reply_raw() };
        let leasehold_tests::Reply::Map(pairs) = reply else { panic!("HELLO 3 is not a map: {reply:?}") };
        let fields: Vec<String> = pairs.iter().map(|(k, _)| leasehold_tests::text(k)).collect();
        // The decoder keeps a map's pairs in no particular order
        // (`resp3_only_after_hello_3` in protocol.rs checks the raw bytes);
        // look fields up by name.
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
}

/// A client's pipeline and its half-close that reach an idle connection
/// while its thread is busy arrive in one readiness event (data and end of
/// stream): the connection reads on to the end of stream after the short
/// read that takes the data, answers everything, and closes (a later event
/// never comes to say the client closed). The one thread is kept busy by a
/// script on another connection (a loop of some 0.2-2 s).
#[test]
fn a_half_close_that_comes_with_its_pipeline_closes_the_connection() {
    let server = TestServer::start(1);
    let mut c = server.raw();
    assert_eq!(c.call("PING"), "+PONG\r\n");
    let mut busy = server.raw();
    // A busy loop on the one thread.
    busy.send(b"EVAL \"for i = 1, 30000000 do end return 1\" 0\r\n");
    let started = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(100));
    c.send(b"SET a 1\r\nGET a\r\n");
    c.stream().shutdown(std::net::Shutdown::Write).unwrap();
    c.expect_closed_after("+OK\r\n$1\r\n1\r\n", Duration::from_secs(5));
    assert_eq!(busy.read_text(), ":1\r\n");
    eprintln!("the script ran for about {:?}", started.elapsed());
}

// A client that sends a pipeline and closes its side (`printf ... | nc`)
// gets every reply, then the close, as from Redis: here writes on both
// shards ("a" and "b" hash to different ones), a connection command that
// waits for them, and a read after it.
on_1_and_2_threads! {
    fn half_close_answers_everything_sent(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        c.send(b"SET a 1\r\nSET b 2\r\nCLIENT SETNAME half\r\nMGET a b\r\n");
        c.stream().shutdown(std::net::Shutdown::Write).unwrap();
        c.expect_closed_after(
            "+OK\r\n+OK\r\n+OK\r\n*2\r\n$1\r\n1\r\n$1\r\n2\r\n",
            Duration::from_secs(5),
        );
        assert_eq!(server.raw().call("MGET a b"), "*2\r\n$1\r\n1\r\n$1\r\n2\r\n");
    }
}

// A reply too big for the socket's buffer ("a" holds 8 MB) is written over
// several turns; a connection command that waited for it, and a reply that
// came back from another shard meanwhile ("b" and "d" are on the shards
// "a" is not and is on), still follow it, in order, on connections of every
// thread.
on_1_and_2_threads! {
    fn replies_after_a_blocked_write_follow_it(threads) {
        let server = TestServer::start(threads);
        let big = vec![b'x'; 8 << 20];
        let mut c = server.raw();
        assert_eq!(c.call_args(&[b"SET", b"a", &big]), "+OK\r\n");
        assert_eq!(c.call("MSET b 2 d 4"), "+OK\r\n");
        let mut head = format!("${}\r\n", big.len()).into_bytes();
        head.extend_from_slice(&big);
        head.extend_from_slice(b"\r\n");
        for (i, (key, value)) in [("b", "2"), ("d", "4")].iter().cycle().take(8).enumerate() {
            let mut c = server.raw();
            let get = leasehold_tests::cmd(&format!("GET {key}"));
            c.send(&[leasehold_tests::cmd("GET a"), leasehold_tests::cmd("CLIENT GETNAME"), get].concat());
            let tail = format!("$-1\r\n$1\r\n{value}\r\n");
            let got = c.read_exact_raw(head.len() + tail.len(), Duration::from_secs(10));
            assert!(got[..head.len()] == head[..], "connection {i}: the big value comes first, whole");
            assert_eq!(String::from_utf8_lossy(&got[head.len()..]), tail, "connection {i}");
        }
    }
}

// A pipeline far longer than one turn plans for one connection (3000
// requests in one write, on both shards, a connection command among them)
// is answered whole and in order.
on_1_and_2_threads! {
    fn a_long_pipeline_is_answered_in_order(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        let mut sent = Vec::new();
        let mut want = String::new();
        for i in 1..=1500 {
            sent.extend(leasehold_tests::cmd("INCR a"));
            sent.extend(leasehold_tests::cmd("INCR b"));
            want.push_str(&format!(":{i}\r\n:{i}\r\n"));
            if i == 700 {
                sent.extend(leasehold_tests::cmd("CLIENT GETNAME"));
                want.push_str("$-1\r\n");
            }
        }
        c.send(&sent);
        let got = c.read_exact_raw(want.len(), Duration::from_secs(10));
        assert_eq!(String::from_utf8_lossy(&got), want);
    }
}

on_1_and_2_threads! {
    // CLIENT LIST shows each connection's buffers as they are: a partial
    // request waiting in one connection's input is its qbuf.
    fn client_list_shows_real_buffers(threads) {
        let server = TestServer::start(threads);
        let mut partial = server.raw();
        let mut me = server.raw();
        assert_eq!(partial.call("CLIENT SETNAME partial"), "+OK\r\n");
        let half = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nab";
        partial.send(half);
        let field = |line: &str, name: &str| -> u64 {
            let f = line.split(' ').find_map(|f| f.strip_prefix(&format!("{name}="))).unwrap();
            f.parse().unwrap()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let line = loop {
            let list = me.call("CLIENT LIST");
            let line = list.lines().find(|l| l.contains(" name=partial ")).unwrap().to_string();
            if field(&line, "qbuf") == half.len() as u64 || std::time::Instant::now() > deadline {
                break line;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(field(&line, "qbuf"), half.len() as u64, "{line}");
        let rbs = field(&line, "rbs");
        assert_eq!(field(&line, "qbuf-free"), rbs - half.len() as u64, "{line}");
        assert!(field(&line, "tot-mem") >= rbs, "{line}");
        assert_eq!(field(&line, "obl"), 0, "{line}");
        assert!(line.contains(" cmd=client "), "{line}");
        partial.send(b"cde\r\n");
        assert_eq!(partial.read_text(), "+OK\r\n");
    }

    // A monitor that never reads is closed once its unwritten output passes
    // the pub/sub output limit; other clients go on.
    fn a_monitor_that_does_not_read_is_closed_at_the_limit(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        assert_eq!(c.call_args(&[b"CONFIG", b"SET", b"client-output-buffer-limit", b"pubsub 1mb 0 0"]), "+OK\r\n");
        let mut monitor = server.raw();
        assert_eq!(monitor.call("MONITOR"), "+OK\r\n");
        assert!(c.call("CLIENT LIST").contains(" flags=O "));
        let value = vec![b'v'; 64 * 1024];
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        // Each SET's line is about 64 KB: a few hundred pass 1 MB plus
        // what the sockets buffer.
        while c.call("CLIENT LIST").contains(" flags=O ") {
            for _ in 0..50 {
                assert_eq!(c.call_args(&[b"SET", b"k", &value]), "+OK\r\n");
            }
            assert!(std::time::Instant::now() < deadline, "the monitor is still open");
        }
        assert!(matches!(monitor.read_until_closed(Duration::from_secs(20)), Closed::Yes(_)));
        assert_eq!(c.call("PING"), "+PONG\r\n");
    }
}
