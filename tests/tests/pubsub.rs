//! Pub/sub over TCP, on 1 and 2 threads, with the exact bytes on the wire:
//! RESP2's subscribed mode, a message from another connection, RESP3 pushes,
//! pattern messages, and a subscriber that never reads closed at the pub/sub
//! output limit while the publisher and every other client go on.

use std::time::{Duration, Instant};

use leasehold_tests::{on_1_and_2_threads, Closed, TestServer};

const CONTEXT: &str =
    "only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context";

on_1_and_2_threads! {
    // S1 and S2: subscribed mode in RESP2, then a message from another
    // connection (on the other thread when there are two).
    fn resp2_subscribed_mode_and_a_message(threads) {
        let server = TestServer::start(threads);
        let mut sub = server.raw();
        let mut publisher = server.raw();
        assert_eq!(sub.call("SUBSCRIBE ch"), "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n");
        assert_eq!(sub.call("PING"), "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
        assert_eq!(sub.call("PING hi"), "*2\r\n$4\r\npong\r\n$2\r\nhi\r\n");
        assert_eq!(sub.call("GET x"), format!("-ERR Can't execute 'get': {CONTEXT}\r\n"));
        assert_eq!(publisher.call("PUBLISH ch hello"), ":1\r\n");
        assert_eq!(sub.read_text(), "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n");
        assert_eq!(publisher.call("PUBLISH other hello"), ":0\r\n");
        // Several channels answer one confirmation each, in order.
        sub.send_cmd("SUBSCRIBE a b");
        assert_eq!(sub.read_text(), "*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:2\r\n");
        assert_eq!(sub.read_text(), "*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:3\r\n");
        assert_eq!(sub.call("UNSUBSCRIBE a"), "*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:2\r\n");
        // RESET leaves subscribed mode.
        assert_eq!(sub.call("RESET"), "+RESET\r\n");
        assert_eq!(sub.call("GET x"), "$-1\r\n");
        assert_eq!(publisher.call("PUBLISH ch hello"), ":0\r\n");
        assert_eq!(sub.call("UNSUBSCRIBE"), "*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n");
    }

    // S3: RESP3 pushes, and any command on the same connection.
    fn resp3_pushes(threads) {
        let server = TestServer::start(threads);
        let mut sub = server.raw();
        let mut publisher = server.raw();
        assert!(sub.call("HELLO 3").starts_with("%7\r\n"));
        assert_eq!(sub.call("SUBSCRIBE ch"), ">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n");
        assert_eq!(publisher.call("PUBLISH ch m"), ":1\r\n");
        assert_eq!(sub.read_text(), ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nm\r\n");
        assert_eq!(sub.call("SET k v"), "+OK\r\n");
        assert_eq!(sub.call("GET k"), "$1\r\nv\r\n");
        assert_eq!(sub.call("PING"), "+PONG\r\n");
        assert_eq!(sub.call("GET nokey"), "_\r\n");
        assert_eq!(sub.call("UNSUBSCRIBE"), ">3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:0\r\n");
        assert_eq!(sub.call("UNSUBSCRIBE"), ">3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n");
    }

    fn pattern_messages(threads) {
        let server = TestServer::start(threads);
        let mut sub = server.raw();
        let mut publisher = server.raw();
        assert_eq!(sub.call("PSUBSCRIBE ch*"), "*3\r\n$10\r\npsubscribe\r\n$3\r\nch*\r\n:1\r\n");
        assert_eq!(publisher.call("PUBLISH ch1 x"), ":1\r\n");
        assert_eq!(sub.read_text(), "*4\r\n$8\r\npmessage\r\n$3\r\nch*\r\n$3\r\nch1\r\n$1\r\nx\r\n");
        assert_eq!(publisher.call("PUBLISH dh1 x"), ":0\r\n");
        assert_eq!(publisher.call("PUBSUB NUMPAT"), ":1\r\n");
        assert_eq!(sub.call("PUNSUBSCRIBE"), "*3\r\n$12\r\npunsubscribe\r\n$3\r\nch*\r\n:0\r\n");
        assert_eq!(publisher.call("PUBSUB NUMPAT"), ":0\r\n");
    }

    // A subscriber that hangs up leaves the registry.
    fn a_closed_subscriber_is_forgotten(threads) {
        let server = TestServer::start(threads);
        let mut publisher = server.raw();
        {
            let mut sub = server.raw();
            assert_eq!(sub.call("SUBSCRIBE gone"), "*3\r\n$9\r\nsubscribe\r\n$4\r\ngone\r\n:1\r\n");
            assert_eq!(publisher.call("PUBLISH gone x"), ":1\r\n");
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while publisher.call("PUBLISH gone x") != ":0\r\n" {
            assert!(Instant::now() < deadline, "the closed subscriber is still counted");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(publisher.call("PUBSUB CHANNELS"), "*0\r\n");
    }

    // S4: a subscriber that never reads while 100 MB is published to it is
    // closed at the hard limit (32 MB); PUBLISH and another client's PING
    // keep answering at once.
    fn a_subscriber_that_never_reads_is_closed_at_the_limit(threads) {
        let server = TestServer::start(threads);
        let mut sub = server.raw();
        let mut publisher = server.raw();
        let mut other = server.raw();
        assert_eq!(sub.call("SUBSCRIBE flood"), "*3\r\n$9\r\nsubscribe\r\n$5\r\nflood\r\n:1\r\n");
        let message = vec![b'x'; 100 * 1024];
        let mut worst_publish = Duration::ZERO;
        let mut worst_ping = Duration::ZERO;
        let mut receivers = Vec::new();
        for i in 0..1024 {
            let t = Instant::now();
            let reply = publisher.call_args(&[b"PUBLISH", b"flood", &message]);
            worst_publish = worst_publish.max(t.elapsed());
            receivers.push(reply);
            if i % 16 == 0 {
                let t = Instant::now();
                assert_eq!(other.call("PING"), "+PONG\r\n");
                worst_ping = worst_ping.max(t.elapsed());
            }
        }
        assert_eq!(receivers[0], ":1\r\n");
        // Closed once its unwritten output passed 32 MB (plus what the
        // socket buffers hold): well before 100 MB, and it stays closed.
        let first_zero = receivers.iter().position(|r| r == ":0\r\n").expect("the subscriber was never closed");
        eprintln!("threads {threads}: closed after {first_zero} messages; worst PUBLISH {worst_publish:?}, worst PING {worst_ping:?}");
        assert!(first_zero * message.len() >= 32 << 20, "closed at {first_zero} messages");
        assert!(first_zero * message.len() < 80 << 20, "closed at {first_zero} messages");
        assert!(receivers[first_zero..].iter().all(|r| r == ":0\r\n"));
        assert!(worst_publish < Duration::from_secs(1), "PUBLISH took {worst_publish:?}");
        assert!(worst_ping < Duration::from_secs(1), "PING took {worst_ping:?}");
        assert!(matches!(sub.read_until_closed(Duration::from_secs(20)), Closed::Yes(_)));
    }

    // The soft limit: above it for its seconds closes the subscriber.
    fn the_soft_limit_closes_after_its_seconds(threads) {
        let server = TestServer::start(threads);
        let mut sub = server.raw();
        let mut publisher = server.raw();
        assert_eq!(
            publisher.call_args(&[b"CONFIG", b"SET", b"client-output-buffer-limit", b"pubsub 0 1mb 1"]),
            "+OK\r\n"
        );
        assert_eq!(sub.call("SUBSCRIBE s"), "*3\r\n$9\r\nsubscribe\r\n$1\r\ns\r\n:1\r\n");
        // Enough to fill the socket buffers and pass 1 MB unwritten.
        let message = vec![b'y'; 1 << 20];
        for _ in 0..24 {
            assert_eq!(publisher.call_args(&[b"PUBLISH", b"s", &message]), ":1\r\n");
        }
        std::thread::sleep(Duration::from_millis(1200));
        // The next message finds it above the soft limit for over a second.
        assert_eq!(publisher.call_args(&[b"PUBLISH", b"s", b"last"]), ":1\r\n");
        let deadline = Instant::now() + Duration::from_secs(5);
        while publisher.call("PUBLISH s x") != ":0\r\n" {
            assert!(Instant::now() < deadline, "the subscriber above the soft limit is still open");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn client_kill_type_pubsub(threads) {
        let server = TestServer::start(threads);
        let mut me = server.raw();
        let mut sub = server.raw();
        let mut plain = server.raw();
        assert_eq!(sub.call("PSUBSCRIBE p*"), "*3\r\n$10\r\npsubscribe\r\n$2\r\np*\r\n:1\r\n");
        assert_eq!(plain.call("PING"), "+PONG\r\n");
        let list = me.call("CLIENT LIST TYPE pubsub");
        assert_eq!(list.matches("flags=P ").count(), 1, "{list}");
        assert!(list.contains(" sub=0 psub=1 "), "{list}");
        assert_eq!(me.call("CLIENT KILL TYPE pubsub"), ":1\r\n");
        assert!(matches!(sub.read_until_closed(Duration::from_secs(5)), Closed::Yes(_)));
        assert_eq!(plain.call("PING"), "+PONG\r\n");
        assert_eq!(me.call("CLIENT KILL TYPE normal"), ":1\r\n");
        assert!(matches!(plain.read_until_closed(Duration::from_secs(5)), Closed::Yes(_)));
        assert_eq!(me.call("PING"), "+PONG\r\n");
    }
}

// A burst of large messages to subscribers that read: none of them is
// closed at the output limit, each gets every message in order, and
// another client's PING is answered meanwhile.
on_1_and_2_threads! {
    fn reading_subscribers_survive_a_burst(threads) {
        let server = TestServer::start(threads);
        let n = 600;
        let body = "m".repeat(64 * 1024);
        let subs: Vec<_> = (0..6)
            .map(|_| {
                let mut s = server.raw();
                assert_eq!(s.call("SUBSCRIBE burst"), "*3\r\n$9\r\nsubscribe\r\n$5\r\nburst\r\n:1\r\n");
                s
            })
            .collect();
        let readers: Vec<_> = subs
            .into_iter()
            .map(|mut s| {
                std::thread::spawn(move || {
                    let mut got = 0;
                    for _ in 0..n {
                        let Some((reply, _)) = s.try_read_reply_raw(Duration::from_secs(20)) else {
                            break;
                        };
                        assert!(matches!(reply, leasehold_tests::Reply::Array(_)), "{reply:?}");
                        got += 1;
                    }
                    got
                })
            })
            .collect();
        let mut publisher = server.raw();
        let mut wire = Vec::new();
        for _ in 0..n {
            wire.extend(leasehold_tests::resp(&[b"PUBLISH", b"burst", body.as_bytes()]));
        }
        let mut other = server.raw();
        let pinger = std::thread::spawn(move || {
            let mut worst = Duration::ZERO;
            for _ in 0..20 {
                let t = Instant::now();
                assert_eq!(other.call("PING"), "+PONG\r\n");
                worst = worst.max(t.elapsed());
                std::thread::sleep(Duration::from_millis(20));
            }
            worst
        });
        publisher.send(&wire);
        for _ in 0..n {
            assert_eq!(publisher.read_text(), ":6\r\n", "every subscriber still there");
        }
        for r in readers {
            assert_eq!(r.join().expect("a reader"), n, "a subscriber missed messages");
        }
        let worst = pinger.join().expect("the pinger");
        eprintln!("worst PING during the burst: {worst:?}");
        assert!(worst < Duration::from_secs(1), "PING took {worst:?}");
    }
}
