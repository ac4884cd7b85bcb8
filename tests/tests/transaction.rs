//! Transactions over raw connections, on 1 and 2 threads: queueing and
//! EXECABORT, runtime errors inside EXEC, WATCH against another client's
//! write (RESP2 and RESP3 null arrays), misplaced MULTI/EXEC/DISCARD,
//! Sentinel's failover transaction of connection commands, atomicity over
//! two shards under 50 concurrent writers, and redis-rs's atomic pipeline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_server::slot::{key_slot, SLOTS};
use leasehold_tests::{block_on, on_1_and_2_threads, TestServer, LIMIT};

const QUEUED: &str = "+QUEUED\r\n";
const EXECABORT: &str = "-EXECABORT Transaction discarded because of previous errors.\r\n";

on_1_and_2_threads! {
    fn a_refused_command_discards_the_transaction(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        c.script(&[
            ("MULTI", "+OK\r\n"),
            ("SET a 1", QUEUED),
            ("INCR a b", "-ERR wrong number of arguments for 'incr' command\r\n"),
            ("EXEC", EXECABORT),
            ("GET a", "$-1\r\n"),
            // An unknown command aborts too; the connection goes on.
            ("MULTI", "+OK\r\n"),
            ("SET a 1", QUEUED),
            ("NOSUCH", "-ERR unknown command 'NOSUCH', with args beginning with: \r\n"),
            ("EXEC", EXECABORT),
            ("EXISTS a", ":0\r\n"),
        ]);
    }

    fn a_runtime_error_does_not_stop_the_others(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        c.script(&[
            ("MULTI", "+OK\r\n"),
            ("SET a x", QUEUED),
            ("INCR a", QUEUED),
            ("GET a", QUEUED),
            ("EXEC", "*3\r\n+OK\r\n-ERR value is not an integer or out of range\r\n$1\r\nx\r\n"),
        ]);
        // The same, pipelined in one write.
        c.send(b"MULTI\r\nSET a y\r\nINCR a\r\nGET a\r\nEXEC\r\nGET a\r\n");
        for expected in ["+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n"] {
            assert_eq!(c.read_text(), expected);
        }
        assert_eq!(
            c.read_text(),
            "*3\r\n+OK\r\n-ERR value is not an integer or out of range\r\n$1\r\ny\r\n"
        );
        assert_eq!(c.read_text(), "$1\r\ny\r\n");
    }

    fn another_clients_write_to_a_watched_key_fails_exec(threads) {
        let server = TestServer::start(threads);
        let mut a = server.raw();
        let mut b = server.raw();
        assert_eq!(a.call("WATCH w"), "+OK\r\n");
        assert_eq!(b.call("SET w 1"), "+OK\r\n");
        a.script(&[
            ("MULTI", "+OK\r\n"),
            ("SET w 2", QUEUED),
            ("EXEC", "*-1\r\n"),
            ("GET w", "$1\r\n1\r\n"),
        ]);
        // In RESP3 the null array is `_`.
        assert!(a.call("HELLO 3").starts_with('%'));
        assert_eq!(a.call("WATCH w"), "+OK\r\n");
        assert_eq!(b.call("SET w 3"), "+OK\r\n");
        a.script(&[
            ("MULTI", "+OK\r\n"),
            ("SET w 4", QUEUED),
            ("EXEC", "_\r\n"),
            ("GET w", "$1\r\n3\r\n"),
        ]);
        // Unchanged since WATCH: it runs.
        assert_eq!(a.call("WATCH w"), "+OK\r\n");
        a.script(&[
            ("MULTI", "+OK\r\n"),
            ("SET w 5", QUEUED),
            ("EXEC", "*1\r\n+OK\r\n"),
        ]);
    }

    fn misplaced_transaction_commands_answer_errors(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        c.script(&[
            ("EXEC", "-ERR EXEC without MULTI\r\n"),
            ("DISCARD", "-ERR DISCARD without MULTI\r\n"),
            ("MULTI", "+OK\r\n"),
            ("MULTI", "-ERR MULTI calls can not be nested\r\n"),
            ("WATCH k", "-ERR WATCH inside MULTI is not allowed\r\n"),
            ("SET k 1", QUEUED),
            ("DISCARD", "+OK\r\n"),
            ("EXEC", "-ERR EXEC without MULTI\r\n"),
            ("GET k", "$-1\r\n"),
            ("PING", "+PONG\r\n"),
        ]);
    }

    fn sentinels_failover_transaction_runs_its_connection_commands(threads) {
        let server = TestServer::start(threads);
        let mut victim = server.raw();
        assert_eq!(victim.call("PING"), "+PONG\r\n");
        let mut c = server.raw();
        c.script(&[
            ("MULTI", "+OK\r\n"),
            ("SLAVEOF NO ONE", QUEUED),
            ("CONFIG REWRITE", QUEUED),
            ("CLIENT KILL TYPE normal", QUEUED),
            ("CLIENT KILL TYPE pubsub", QUEUED),
            // Without a config file CONFIG REWRITE fails; the rest runs, and
            // CLIENT KILL spares the connection that sent it.
            ("EXEC", "*4\r\n+OK\r\n-ERR The server is running without a config file\r\n:1\r\n:0\r\n"),
            ("PING", "+PONG\r\n"),
        ]);
        assert!(matches!(
            victim.read_until_closed(Duration::from_secs(5)),
            leasehold_tests::Closed::Yes(_)
        ));
    }
}

// The transaction Sentinel sends a replica it points at a new primary
// (`SLAVEOF host port`), with a fifth command that promotes it back:
// five replies, in order, the role changed twice.
on_1_and_2_threads! {
    fn a_five_command_failover_transaction_answers_five_replies(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        c.script(&[
            ("MULTI", "+OK\r\n"),
            ("SLAVEOF 127.0.0.1 1", QUEUED),
            ("CONFIG REWRITE", QUEUED),
            ("CLIENT KILL TYPE normal", QUEUED),
            ("CLIENT KILL TYPE pubsub", QUEUED),
            ("REPLICAOF NO ONE", QUEUED),
            ("EXEC", "*5\r\n+OK\r\n-ERR The server is running without a config file\r\n:0\r\n:0\r\n+OK\r\n"),
            ("ROLE", "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n"),
        ]);
    }
}

/// Whether `a` and `b` hash to different halves of the slots (different
/// shards on two threads).
fn apart(a: &str, b: &str) -> bool {
    let half = |k: &str| key_slot(k.as_bytes()) as usize >= SLOTS / 2;
    half(a) != half(b)
}

/// The two values of a two-key `MGET` reply as RESP text (`*2`, then each
/// value `$-1`, or `$n` and its bytes): each `$-1` or the value.
fn two_values(mget: &str) -> (&str, &str) {
    let values: Vec<&str> = mget.split("\r\n").collect();
    match values[1] {
        "$-1" => (values[1], values[2]),
        _ => (values[2], values[values.len() - 2]),
    }
}

on_1_and_2_threads! {
    // 50 connections each run 200 transactions incrementing `{t}a` and `b`
    // (on different shards on two threads) while a reader's transactions,
    // and another reader's plain `MGET {t}a b`, read both: no reader ever
    // sees one increment without the other, and at the end both counters
    // are 10000.
    fn transactions_over_two_shards_are_atomic(threads) {
        assert!(apart("{t}a", "b"), "the keys must live on both shards");
        assert!(apart("{t}c", "{b}d"), "the keys must live on both shards");
        let server = TestServer::start(threads);
        const WRITERS: usize = 50;
        const ROUNDS: usize = 200;
        let started = Instant::now();
        let done = Arc::new(AtomicBool::new(false));
        let reader = {
            let mut r = server.raw();
            let done = done.clone();
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !done.load(Ordering::Relaxed) {
                    r.send(b"MULTI\r\nMGET {t}a b\r\nEXEC\r\n");
                    assert_eq!(r.read_text(), "+OK\r\n");
                    assert_eq!(r.read_text(), QUEUED);
                    let exec = r.read_text();
                    let (x, y) = two_values(exec.strip_prefix("*1\r\n").expect("one reply"));
                    assert_eq!(x, y, "a half-applied transaction: {exec:?}");
                    reads += 1;
                }
                reads
            })
        };
        // A plain MGET of the two keys, split over the two shards: never
        // one shard before a transaction and the other after it.
        let plain = {
            let mut r = server.raw();
            let done = done.clone();
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !done.load(Ordering::Relaxed) {
                    let reply = r.call("MGET {t}a b");
                    let values: Vec<&str> = reply
                        .split("\r\n")
                        .skip(1)
                        .filter(|v| !v.starts_with('$') || *v == "$-1")
                        .filter(|v| !v.is_empty())
                        .collect();
                    assert_eq!(values.len(), 2, "{reply:?}");
                    assert_eq!(values[0], values[1], "a half-applied transaction: {reply:?}");
                    reads += 1;
                }
                reads
            })
        };
        // Ordinary commands on both shards meanwhile: held back while a
        // transaction holds their shard, never lost.
        let bystander = {
            let mut c = server.raw();
            std::thread::spawn(move || {
                for i in 1..=500 {
                    c.send(b"INCR {t}c\r\nINCR {b}d\r\nMGET {t}c {b}d\r\n");
                    assert_eq!(c.read_text(), format!(":{i}\r\n"));
                    assert_eq!(c.read_text(), format!(":{i}\r\n"));
                    let n = i.to_string();
                    let l = n.len();
                    assert_eq!(c.read_text(), format!("*2\r\n${l}\r\n{n}\r\n${l}\r\n{n}\r\n"));
                }
            })
        };
        let writers: Vec<_> = (0..WRITERS)
            .map(|_| {
                let mut w = server.raw();
                std::thread::spawn(move || {
                    for _ in 0..ROUNDS {
                        w.send(b"MULTI\r\nINCR {t}a\r\nINCR b\r\nEXEC\r\n");
                        assert_eq!(w.read_text(), "+OK\r\n");
                        assert_eq!(w.read_text(), QUEUED);
                        assert_eq!(w.read_text(), QUEUED);
                        let exec = w.read_text();
                        let parts: Vec<&str> = exec.split("\r\n").collect();
                        assert_eq!(parts[0], "*2", "{exec:?}");
                        assert_eq!(parts[1], parts[2], "one transaction's two counters: {exec:?}");
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().expect("a writer failed");
        }
        bystander.join().expect("an ordinary command was lost or reordered");
        done.store(true, Ordering::Relaxed);
        let reads = reader.join().expect("the reader saw a half-applied transaction");
        assert!(reads > 0);
        let plain_reads = plain.join().expect("a plain MGET saw a half-applied transaction");
        assert!(plain_reads > 0);
        let total = WRITERS * ROUNDS;
        assert_eq!(
            server.raw().call("MGET {t}a b"),
            format!("*2\r\n${}\r\n{total}\r\n${}\r\n{total}\r\n", total.to_string().len(), total.to_string().len())
        );
        assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
    }
}

on_1_and_2_threads! {
    // Writes queued on a replica are refused at queue time: EXEC aborts.
    fn writes_queued_on_a_replica_abort(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        c.script(&[
            ("REPLICAOF 127.0.0.1 1", "+OK\r\n"),
            ("MULTI", "+OK\r\n"),
            ("GET a", QUEUED),
            ("SET a 1", "-READONLY You can't write against a read only replica.\r\n"),
            ("EXEC", EXECABORT),
            ("REPLICAOF NO ONE", "+OK\r\n"),
        ]);
    }
}

/// redis-rs's atomic pipeline sends MULTI ... EXEC and reads EXEC's array.
#[test]
fn redis_rs_atomic_pipeline() {
    let server = TestServer::start(2);
    block_on(LIMIT, async {
        let client = redis::Client::open(server.url()).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let (set, a, b, values): (String, i64, i64, Vec<i64>) = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg("{t}a")
            .arg(10)
            .cmd("INCR")
            .arg("{t}a")
            .cmd("INCRBY")
            .arg("b")
            .arg(5)
            .cmd("MGET")
            .arg("{t}a")
            .arg("b")
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!((set.as_str(), a, b, values), ("OK", 11, 5, vec![11, 5]));
        // A failed WATCH: the pipeline's result is nil.
        let mut watcher = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("WATCH")
            .arg("b")
            .query_async(&mut watcher)
            .await
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg("b")
            .arg(1)
            .query_async(&mut con)
            .await
            .unwrap();
        let result: Option<(i64,)> = redis::pipe()
            .atomic()
            .cmd("INCR")
            .arg("b")
            .query_async(&mut watcher)
            .await
            .unwrap();
        assert_eq!(result, None);
    });
}

/// A transaction's effects on both shards reach a replica, which refuses
/// writes queued inside MULTI on its own clients.
#[test]
fn a_replica_applies_transactions_and_refuses_queued_writes() {
    use leasehold_tests::replication::{follow, wait_caught_up};
    let primary = TestServer::start(2);
    let replica = TestServer::start(2);
    follow(&replica, &primary);
    let mut p = primary.raw();
    for i in 1..=20 {
        p.send(b"MULTI\r\nINCR {t}a\r\nINCR b\r\nSET {t}last x\r\nDEL b:gone\r\nEXEC\r\n");
        for _ in 0..5 {
            p.read_text();
        }
        assert_eq!(
            p.read_text(),
            format!("*4\r\n:{i}\r\n:{i}\r\n+OK\r\n:0\r\n")
        );
    }
    wait_caught_up(&primary, &replica, Duration::from_secs(20));
    let mut r = replica.raw();
    assert_eq!(
        r.call("MGET {t}a b {t}last"),
        "*3\r\n$2\r\n20\r\n$2\r\n20\r\n$1\r\nx\r\n"
    );
    r.script(&[
        ("MULTI", "+OK\r\n"),
        ("MGET {t}a b", QUEUED),
        (
            "INCR b",
            "-READONLY You can't write against a read only replica.\r\n",
        ),
        ("EXEC", EXECABORT),
        ("MULTI", "+OK\r\n"),
        ("MGET {t}a b", QUEUED),
        ("EXEC", "*1\r\n*2\r\n$2\r\n20\r\n$2\r\n20\r\n"),
    ]);
}

// A queued CLIENT KILL of the connection itself, among writes on both
// shards: every write runs, and the connection closes (as Redis closes
// it) instead of waiting forever for EXEC's end.
on_1_and_2_threads! {
    fn a_transaction_that_kills_its_own_connection_closes_it(threads) {
        let server = TestServer::start(threads);
        let keys = leasehold_tests::keys_in_both_halves("self", 1);
        let mut c = server.raw();
        let id = leasehold_tests::int_of(&c.call("CLIENT ID"));
        c.script(&[
            ("MULTI", "+OK\r\n"),
            (&format!("SET {} 1", keys[0]), QUEUED),
            (&format!("CLIENT KILL ID {id} SKIPME no"), QUEUED),
            (&format!("SET {} 1", keys[1]), QUEUED),
        ]);
        c.send_cmd("EXEC");
        assert!(
            matches!(c.read_until_closed(Duration::from_secs(5)), leasehold_tests::Closed::Yes(_)),
            "the connection stays open"
        );
        let mut other = server.raw();
        for k in &keys {
            assert_eq!(other.call(&format!("GET {k}")), "$1\r\n1\r\n");
        }
        let list = other.call("CLIENT LIST");
        assert!(!list.contains(&format!("id={id} ")), "still listed: {list}");
    }
}

// SHUTDOWN is refused inside MULTI (Redis flags it no-multi), which
// discards the transaction; the server goes on.
on_1_and_2_threads! {
    fn shutdown_is_refused_inside_a_transaction(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        c.script(&[
            ("MULTI", "+OK\r\n"),
            ("SET a 1", QUEUED),
            ("SHUTDOWN NOSAVE", "-ERR Command not allowed inside a transaction\r\n"),
            ("EXEC", EXECABORT),
            ("GET a", "$-1\r\n"),
            ("PING", "+PONG\r\n"),
        ]);
    }
}

/// Replica readers never see part of a primary's transaction or script
/// over two hash slots: the primary writes its effects framed `MULTI` ..
/// `EXEC` in the stream, and the replica applies each frame as one
/// transaction. 8 writers on the primary (transactions and scripts, each
/// incrementing `{t}a` and `b`) while 4 readers pipeline `MGET {t}a b` on
/// the replica: never a pair that differs; both counters end at the total
/// on the replica. With two threads on each node the keys live on two
/// shards of both.
#[test]
fn replica_readers_never_see_half_a_transaction() {
    readers_never_see_half_a_transaction(2, 2);
}

/// As [`replica_readers_never_see_half_a_transaction`], a one-thread
/// primary and a two-thread replica: the primary runs every transaction
/// on its one shard, and the replica holds the two keys on two.
#[test]
fn a_replica_with_more_threads_never_sees_half_a_transaction() {
    readers_never_see_half_a_transaction(1, 2);
}

/// As [`a_replica_with_more_threads_never_sees_half_a_transaction`], a
/// three-thread replica (`{t}a` on its shard 2, `b` on its shard 0).
#[test]
fn a_three_thread_replica_of_a_one_thread_primary_never_sees_half_a_transaction() {
    readers_never_see_half_a_transaction(1, 3);
}

fn readers_never_see_half_a_transaction(primary_threads: usize, replica_threads: usize) {
    use leasehold_tests::replication::{follow, wait_caught_up};
    assert!(apart("{t}a", "b"), "the keys must live on both shards");
    let primary = TestServer::start(primary_threads);
    let replica = TestServer::start(replica_threads);
    follow(&replica, &primary);
    // The full sync is over: its cut no longer holds the primary's shards
    // (a transaction that ends while a cut holds a shard is published in
    // parts, see docs/replication.md).
    wait_caught_up(&primary, &replica, Duration::from_secs(20));
    const WRITERS: usize = 8;
    const ROUNDS: usize = 300;
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let mut r = replica.raw();
            let done = done.clone();
            std::thread::spawn(move || {
                let (mut reads, mut moving) = (0u64, 0u64);
                let mut last = String::new();
                while !done.load(Ordering::Relaxed) {
                    r.send("MGET {t}a b\r\n".repeat(16).as_bytes());
                    for _ in 0..16 {
                        let reply = r.read_text();
                        let (x, y) = two_values(&reply);
                        assert_eq!(x, y, "a half-applied transaction on the replica: {reply:?}");
                        moving += u64::from(reply != last);
                        last = reply;
                        reads += 1;
                    }
                }
                (reads, moving)
            })
        })
        .collect();
    let script = "redis.call('INCR', KEYS[1]); return redis.call('INCR', KEYS[2])";
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let mut c = primary.raw();
            let eval = format!("EVAL \"{script}\" 2 {{t}}a b\r\n");
            std::thread::spawn(move || {
                for i in 0..ROUNDS {
                    if (w + i) % 2 == 0 {
                        c.send(b"MULTI\r\nINCR {t}a\r\nINCR b\r\nEXEC\r\n");
                        assert_eq!(c.read_text(), "+OK\r\n");
                        assert_eq!(c.read_text(), QUEUED);
                        assert_eq!(c.read_text(), QUEUED);
                        let exec = c.read_text();
                        assert!(exec.starts_with("*2\r\n:"), "{exec:?}");
                    } else {
                        c.send(eval.as_bytes());
                        let reply = c.read_text();
                        assert!(reply.starts_with(':'), "{reply:?}");
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("a writer failed");
    }
    wait_caught_up(&primary, &replica, Duration::from_secs(20));
    done.store(true, Ordering::Relaxed);
    // The readers read while the writes went on: together they saw the
    // values move (the writes take about 0.2-0.9 s here; a reader of a
    // three-thread replica gets as few as 80 reads in that time, and sees
    // some 40 changes).
    let mut seen = Vec::new();
    for r in readers {
        let (reads, moving) = r.join().expect("the replica showed half a transaction");
        seen.push((reads, moving));
    }
    let changes: u64 = seen.iter().map(|s| s.1).sum();
    assert!(changes > 10, "(reads, changes) per reader: {seen:?}");
    let total = (WRITERS * ROUNDS).to_string();
    let l = total.len();
    assert_eq!(
        replica.raw().call("MGET {t}a b"),
        format!("*2\r\n${l}\r\n{total}\r\n${l}\r\n{total}\r\n")
    );
}
