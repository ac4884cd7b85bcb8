//! The transaction family in process: MULTI, EXEC, DISCARD, WATCH,
//! UNWATCH. Queueing and its refusals, EXECABORT, runtime errors inside
//! EXEC, connection commands at EXEC, transactions on one shard, on
//! another, and over both (from connections of either thread), WATCH
//! against writes, expiry and FLUSHALL, and the effects a transaction
//! leaves.

mod common;

use common::{arity, bulks, err, ints, NOT_INT};
use leasehold_protocol::Reply;
use leasehold_server::config::Config;
use leasehold_server::harness::Harness;

const QUEUED: Reply = Reply::simple("QUEUED");
/// EXEC's null array as the reply decoder reads it (every RESP null is
/// `Nil` to it); `tests/tests/transaction.rs` checks the bytes, `*-1` and `_`.
const NULL: Reply = Reply::Nil;
const EXECABORT: &str = "EXECABORT Transaction discarded because of previous errors.";

#[test]
fn multi_queues_and_exec_answers_every_reply_in_order() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("SET a x"), QUEUED);
    assert_eq!(h.cmd("INCR a"), QUEUED);
    assert_eq!(h.cmd("GET a"), QUEUED);
    assert_eq!(
        h.cmd("EXEC"),
        Reply::Array(vec![Reply::ok(), err(NOT_INT), Reply::bulk("x")])
    );
    // Out of MULTI again: commands run at once.
    assert_eq!(h.cmd("GET a"), Reply::bulk("x"));
    assert_eq!(h.cmd("EXEC"), err("ERR EXEC without MULTI"));
}

#[test]
fn a_refused_command_aborts_the_transaction() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("SET a 1"), QUEUED);
    assert_eq!(h.cmd("INCR a b"), arity("incr"));
    assert_eq!(h.cmd("EXEC"), err(EXECABORT));
    assert_eq!(h.cmd("GET a"), Reply::Nil);
    // An unknown command, keys on two shards.
    let (a, b) = (h.key_on(0, "a"), h.key_on(1, "b"));
    for bad in ["NOSUCH x", &format!("RLSTATE {a} {b}")] {
        assert_eq!(h.cmd("MULTI"), Reply::ok());
        assert!(h.cmd(bad).is_error(), "{bad}");
        assert_eq!(h.cmd("SET a 1"), QUEUED);
        assert_eq!(h.cmd("EXEC"), err(EXECABORT), "{bad}");
    }
    assert_eq!(h.cmd("GET a"), Reply::Nil);
    // A key without its value is queued and fails at EXEC, as in Redis.
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("MSET a 1 b"), QUEUED);
    assert_eq!(h.cmd("SET a 1"), QUEUED);
    assert_eq!(
        h.cmd("EXEC"),
        Reply::Array(vec![arity("mset"), Reply::ok()])
    );
}

#[test]
fn nesting_and_misplaced_commands_answer_errors() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("DISCARD"), err("ERR DISCARD without MULTI"));
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("MULTI"), err("ERR MULTI calls can not be nested"));
    assert_eq!(
        h.cmd("WATCH a"),
        err("ERR WATCH inside MULTI is not allowed")
    );
    // Neither error aborts: the transaction is still open and runs.
    assert_eq!(h.cmd("SET a 1"), QUEUED);
    assert_eq!(h.cmd("EXEC"), Reply::Array(vec![Reply::ok()]));
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("SET a 2"), QUEUED);
    assert_eq!(h.cmd("DISCARD"), Reply::ok());
    assert_eq!(h.cmd("GET a"), Reply::bulk("1"));
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("EXEC"), Reply::Array(vec![]));
    // PSYNC cannot run inside a transaction.
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(
        h.cmd("PSYNC ? -1"),
        err("ERR Command not allowed inside a transaction")
    );
    assert_eq!(h.cmd("EXEC"), err(EXECABORT));
    // RESET leaves MULTI.
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("RESET"), Reply::simple("RESET"));
    assert_eq!(h.cmd("EXEC"), err("ERR EXEC without MULTI"));
    // EXEC with an argument: EXECABORT (Redis 7.0's reply), in MULTI or
    // not; inside, the transaction ends with nothing run.
    const EXEC_ARITY: &str =
        "EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command";
    assert_eq!(h.cmd("EXEC x"), err(EXEC_ARITY));
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("SET a 3"), QUEUED);
    assert_eq!(h.cmd("EXEC x"), err(EXEC_ARITY));
    assert_eq!(h.cmd("EXEC"), err("ERR EXEC without MULTI"));
    assert_eq!(h.cmd("GET a"), Reply::bulk("1"));
}

#[test]
fn a_pipelined_transaction_answers_in_order() {
    let mut h = Harness::new();
    let replies = h.pipeline(&[
        "SET n 1", "MULTI", "INCR n", "INCR n", "EXEC", "GET n", "MULTI", "GET n", "EXEC",
    ]);
    assert_eq!(
        replies,
        vec![
            Reply::ok(),
            Reply::ok(),
            QUEUED,
            QUEUED,
            ints(&[2, 3]),
            Reply::bulk("3"),
            Reply::ok(),
            QUEUED,
            bulks(&["3"]),
        ]
    );
}

/// A transaction on keys of each shard, of both, from connections of both
/// threads: inline, on one other shard, and locked over two.
#[test]
fn transactions_run_on_one_shard_another_or_both() {
    let first = Harness::new();
    for thread in 0..2 {
        let mut h = first.connection_on(thread);
        let (a, b) = (
            h.key_on(0, &format!("a{thread}")),
            h.key_on(1, &format!("b{thread}")),
        );
        for keys in [vec![a.clone()], vec![b.clone()], vec![a.clone(), b.clone()]] {
            assert_eq!(h.cmd("MULTI"), Reply::ok());
            for k in &keys {
                assert_eq!(h.run(&["INCR", k.as_str()]), QUEUED);
            }
            let mut mget = vec!["MGET".to_string()];
            mget.extend(keys.iter().cloned());
            assert_eq!(h.run(&mget), QUEUED);
            assert_eq!(h.cmd("DBSIZE"), QUEUED);
            let Reply::Array(replies) = h.cmd("EXEC") else {
                panic!("EXEC is an array");
            };
            assert_eq!(replies.len(), keys.len() + 2, "{keys:?}");
            assert!(replies[..keys.len()]
                .iter()
                .all(|r| matches!(r, Reply::Int(_))));
            let Reply::Array(values) = &replies[keys.len()] else {
                panic!("MGET is an array: {replies:?}");
            };
            assert_eq!(values.len(), keys.len());
        }
        assert_eq!(h.run(&["MGET", a.as_str(), b.as_str()]), bulks(&["2", "2"]));
    }
}

#[test]
fn connection_commands_run_at_exec_in_order() {
    let mut h = Harness::new();
    let b = h.key_on(1, "b");
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.run(&["SET", b.as_str(), "1"]), QUEUED);
    assert_eq!(h.cmd("CLIENT SETNAME tx"), QUEUED);
    assert_eq!(h.cmd("CLIENT GETNAME"), QUEUED);
    assert_eq!(h.cmd("CONFIG SET hz 15"), QUEUED);
    assert_eq!(h.run(&["GET", b.as_str()]), QUEUED);
    // The name is not set until EXEC.
    assert_eq!(
        h.shared().clients.lock()[&h.client_id()]
            .name
            .lock()
            .clone(),
        None
    );
    assert_eq!(
        h.cmd("EXEC"),
        Reply::Array(vec![
            Reply::ok(),
            Reply::ok(),
            Reply::bulk("tx"),
            Reply::ok(),
            Reply::bulk("1")
        ])
    );
    assert_eq!(h.cmd("CONFIG GET hz"), bulks(&["hz", "15"]));
}

#[test]
fn a_watched_key_written_by_anyone_makes_exec_answer_null() {
    let mut a = Harness::new();
    for thread in 0..2 {
        for key in [a.key_on(0, "w"), a.key_on(1, "w")] {
            let mut b = a.connection_on(thread);
            assert_eq!(a.run(&["WATCH", key.as_str()]), Reply::ok());
            assert_eq!(b.run(&["SET", key.as_str(), "1"]), Reply::ok());
            assert_eq!(a.cmd("MULTI"), Reply::ok());
            assert_eq!(a.run(&["SET", key.as_str(), "2"]), QUEUED);
            assert_eq!(a.cmd("EXEC"), NULL);
            assert_eq!(a.run(&["GET", key.as_str()]), Reply::bulk("1"));
            // The watch ended with EXEC: the next transaction runs.
            assert_eq!(a.cmd("MULTI"), Reply::ok());
            assert_eq!(a.run(&["SET", key.as_str(), "3"]), QUEUED);
            assert_eq!(a.cmd("EXEC"), Reply::Array(vec![Reply::ok()]));
        }
    }
}

#[test]
fn an_untouched_watch_lets_exec_run_and_unwatch_forgets() {
    let mut a = Harness::new();
    let mut b = a.new_connection();
    let (x, y) = (a.key_on(0, "x"), a.key_on(1, "y"));
    assert_eq!(a.run(&["WATCH", x.as_str(), y.as_str()]), Reply::ok());
    assert_eq!(b.cmd("SET other 1"), Reply::ok());
    assert_eq!(a.cmd("MULTI"), Reply::ok());
    assert_eq!(a.run(&["SET", x.as_str(), "1"]), QUEUED);
    assert_eq!(a.cmd("EXEC"), Reply::Array(vec![Reply::ok()]));
    assert_eq!(a.run(&["WATCH", y.as_str()]), Reply::ok());
    assert_eq!(a.cmd("UNWATCH"), Reply::ok());
    assert_eq!(b.run(&["SET", y.as_str(), "1"]), Reply::ok());
    assert_eq!(a.cmd("MULTI"), Reply::ok());
    assert_eq!(a.run(&["GET", y.as_str()]), QUEUED);
    assert_eq!(a.cmd("EXEC"), bulks(&["1"]));
    // DISCARD forgets the watches too.
    assert_eq!(a.run(&["WATCH", y.as_str()]), Reply::ok());
    assert_eq!(a.cmd("MULTI"), Reply::ok());
    assert_eq!(a.cmd("DISCARD"), Reply::ok());
    assert_eq!(b.run(&["SET", y.as_str(), "2"]), Reply::ok());
    assert_eq!(a.cmd("MULTI"), Reply::ok());
    assert_eq!(a.cmd("EXEC"), Reply::Array(vec![]));
    // The transaction's own write after WATCH counts too.
    assert_eq!(a.run(&["WATCH", x.as_str()]), Reply::ok());
    assert_eq!(a.run(&["SET", x.as_str(), "9"]), Reply::ok());
    assert_eq!(a.cmd("MULTI"), Reply::ok());
    assert_eq!(a.cmd("EXEC"), NULL);
}

#[test]
fn expiry_and_flushall_count_as_changes() {
    let mut a = Harness::new();
    let mut b = a.new_connection();
    assert_eq!(a.cmd("SET t 1 PX 100"), Reply::ok());
    assert_eq!(a.cmd("WATCH t"), Reply::ok());
    a.clock().advance_ms(200);
    assert_eq!(a.cmd("MULTI"), Reply::ok());
    assert_eq!(a.cmd("SET t 2"), QUEUED);
    assert_eq!(a.cmd("EXEC"), NULL);
    // A key absent when watched and still absent has not changed.
    assert_eq!(a.cmd("WATCH never"), Reply::ok());
    a.clock().advance_ms(200);
    assert_eq!(a.cmd("MULTI"), Reply::ok());
    assert_eq!(a.cmd("EXEC"), Reply::Array(vec![]));
    // FLUSHALL changes the watched keys it removes, not the absent ones.
    assert_eq!(a.cmd("SET t 1"), Reply::ok());
    assert_eq!(a.cmd("WATCH t never"), Reply::ok());
    assert_eq!(b.cmd("FLUSHALL"), Reply::ok());
    assert_eq!(a.cmd("MULTI"), Reply::ok());
    assert_eq!(a.cmd("EXEC"), NULL);
    assert_eq!(a.cmd("WATCH never"), Reply::ok());
    assert_eq!(b.cmd("FLUSHALL"), Reply::ok());
    assert_eq!(a.cmd("MULTI"), Reply::ok());
    assert_eq!(a.cmd("EXEC"), Reply::Array(vec![]));
}

#[test]
fn a_transaction_over_two_shards_emits_all_its_effects() {
    let mut h = Harness::new();
    let (a, b) = (h.key_on(0, "a"), h.key_on(1, "b"));
    let mark = h.effects_mark();
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.run(&["SET", a.as_str(), "1"]), QUEUED);
    assert_eq!(h.run(&["SET", b.as_str(), "2"]), QUEUED);
    assert_eq!(h.cmd("EXEC"), Reply::Array(vec![Reply::ok(), Reply::ok()]));
    let mut effects = h.effects_since(&mark);
    effects.sort();
    assert_eq!(
        effects,
        vec![
            vec!["SET".to_string(), a.clone(), "1".to_string()],
            vec!["SET".to_string(), b.clone(), "2".to_string()],
        ]
    );
}

#[test]
fn writes_queued_on_a_replica_abort_the_transaction() {
    let mut h = Harness::with_config(Config::default(), 2);
    assert_eq!(h.cmd("REPLICAOF 127.0.0.1 1"), Reply::ok());
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("GET a"), QUEUED);
    assert_eq!(
        h.cmd("SET a 1"),
        err("READONLY You can't write against a read only replica.")
    );
    assert_eq!(h.cmd("EXEC"), err(EXECABORT));
    assert_eq!(h.cmd("REPLICAOF NO ONE"), Reply::ok());
}

#[test]
fn nothing_blocks_inside_a_transaction() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("SET a 1"), QUEUED);
    // No replica acknowledges: WAIT answers 0 at once, as Redis does in EXEC.
    assert_eq!(h.cmd("WAIT 1 0"), QUEUED);
    assert_eq!(h.cmd("GET a"), QUEUED);
    assert_eq!(
        h.cmd("EXEC"),
        Reply::Array(vec![Reply::ok(), Reply::Int(0), Reply::bulk("1")])
    );
    assert_eq!(h.cmd("PING"), Reply::simple("PONG"));
}

/// A transaction's queue is held to `client-query-buffer-limit`, like
/// unread input: past it the connection closes.
#[test]
fn a_queue_past_the_query_buffer_limit_closes_the_connection() {
    let mut config = Config::default();
    config.limits.client_query_buffer_limit = 1 << 20;
    let mut h = Harness::with_config(config, 2);
    let mut other = h.new_connection();
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    let value = "v".repeat(1000);
    let set = ["SET", "k", value.as_str()];
    // About 1 KB a request: 900 fit under 1 MB, 200 more do not.
    let replies = h.pipeline(&vec![set; 900]);
    assert_eq!(replies.len(), 900);
    assert!(replies.iter().all(|r| *r == QUEUED));
    let replies = h.pipeline(&vec![set; 200]);
    assert!(replies.len() < 200, "{} replies", replies.len());
    assert!(h.is_closed());
    assert_eq!(other.cmd("GET k"), Reply::Nil);
}

#[test]
fn writes_are_judged_for_the_whole_transaction_at_exec() {
    let mut h = Harness::new();
    let mut other = h.connection_on(0);
    const READONLY: &str = "EXECABORT Transaction discarded because of: READONLY You can't write against a read only replica.";
    // Made a replica after its writes were queued: refused whole.
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("SET k 1"), QUEUED);
    assert_eq!(h.cmd("GET k"), QUEUED);
    assert_eq!(other.cmd("REPLICAOF 127.0.0.1 1"), Reply::ok());
    assert_eq!(h.cmd("EXEC"), err(READONLY));
    assert_eq!(h.cmd("EXEC"), err("ERR EXEC without MULTI"));
    // Refused while queued as well: the write check comes first, as in
    // Redis 7.
    assert_eq!(other.cmd("REPLICAOF NO ONE"), Reply::ok());
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("SET k 1"), QUEUED);
    assert!(matches!(h.cmd("NOSUCH"), Reply::Error(_)));
    assert_eq!(other.cmd("REPLICAOF 127.0.0.1 1"), Reply::ok());
    assert_eq!(h.cmd("EXEC"), err(READONLY));
    // A transaction that only reads runs on the replica.
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("GET k"), QUEUED);
    assert_eq!(h.cmd("EXEC"), Reply::Array(vec![Reply::Nil]));
    assert_eq!(other.cmd("REPLICAOF NO ONE"), Reply::ok());
    // A queued REPLICAOF does not refuse the writes queued after it: they
    // were judged when queued, as in Redis.
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("SET k 1"), QUEUED);
    assert_eq!(h.cmd("REPLICAOF 127.0.0.1 1"), QUEUED);
    assert_eq!(h.cmd("SET k2 2"), QUEUED);
    assert_eq!(
        h.cmd("EXEC"),
        Reply::Array(vec![Reply::ok(), Reply::ok(), Reply::ok()])
    );
    assert_eq!(h.cmd("GET k2"), Reply::bulk("2"));
    assert_eq!(
        h.cmd("SET k3 3"),
        err("READONLY You can't write against a read only replica.")
    );
    assert_eq!(h.cmd("REPLICAOF NO ONE"), Reply::ok());
}

/// The merged replication stream's records from byte `from` on.
fn stream_since(h: &Harness, from: u64) -> Vec<Vec<String>> {
    use bytes::BytesMut;
    use leasehold_protocol::{decode_request, Limits};
    let backlog = &h.shared().repl.backlog;
    let mut out = Vec::new();
    backlog
        .read(from, usize::MAX, &mut out)
        .expect("the stream is still in the backlog");
    let mut buf = BytesMut::from(out.as_slice());
    let mut records = Vec::new();
    while let Some(items) = decode_request(&mut buf, &Limits::default()).expect("RESP records") {
        records.push(
            items
                .iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect(),
        );
    }
    assert!(buf.is_empty(), "the stream ends with a whole record");
    records
}

fn rec(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_transaction_over_two_shards_enters_the_stream_framed_as_one_unit() {
    let mut h = Harness::new();
    let (a, b) = (h.key_on(0, "a"), h.key_on(1, "b"));
    let from = h.shared().repl.backlog.offset();
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.run(&["SET", a.as_str(), "1"]), QUEUED);
    assert_eq!(h.run(&["INCR", b.as_str()]), QUEUED);
    assert_eq!(h.run(&["SET", a.as_str(), "2"]), QUEUED);
    assert_eq!(
        h.cmd("EXEC"),
        Reply::Array(vec![Reply::ok(), Reply::Int(1), Reply::ok()])
    );
    let stream = stream_since(&h, from);
    assert_eq!(stream.first(), Some(&rec(&["MULTI"])), "{stream:?}");
    assert_eq!(stream.last(), Some(&rec(&["EXEC"])), "{stream:?}");
    let mut inside = stream[1..stream.len() - 1].to_vec();
    // Each shard's part keeps its order; the parts come in any order.
    let on_a: Vec<_> = inside.iter().filter(|r| r[1] == a).cloned().collect();
    assert_eq!(on_a, vec![rec(&["SET", &a, "1"]), rec(&["SET", &a, "2"])]);
    inside.sort();
    let mut want = vec![
        rec(&["SET", &a, "1"]),
        rec(&["SET", &a, "2"]),
        rec(&["SET", &b, "1"]),
    ];
    want.sort();
    assert_eq!(inside, want);

    // Writes after the transaction follow its EXEC.
    let from = h.shared().repl.backlog.offset();
    assert_eq!(h.run(&["SET", b.as_str(), "x"]), Reply::ok());
    assert_eq!(stream_since(&h, from), vec![rec(&["SET", &b, "x"])]);
}

#[test]
fn a_transaction_that_writes_on_one_shard_is_not_framed() {
    let mut h = Harness::new();
    let (a, b) = (h.key_on(0, "a"), h.key_on(1, "b"));
    // Both shards held (a read on one, writes on the other): one part.
    let from = h.shared().repl.backlog.offset();
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.run(&["GET", a.as_str()]), QUEUED);
    assert_eq!(h.run(&["SET", b.as_str(), "1"]), QUEUED);
    assert_eq!(h.run(&["SET", b.as_str(), "2"]), QUEUED);
    assert_eq!(
        h.cmd("EXEC"),
        Reply::Array(vec![Reply::Nil, Reply::ok(), Reply::ok()])
    );
    assert_eq!(
        stream_since(&h, from),
        vec![rec(&["SET", &b, "1"]), rec(&["SET", &b, "2"])]
    );
    // A transaction a watched key aborted leaves nothing.
    let from = h.shared().repl.backlog.offset();
    assert_eq!(h.run(&["WATCH", a.as_str()]), Reply::ok());
    let mut other = h.new_connection();
    assert_eq!(other.run(&["SET", a.as_str(), "w"]), Reply::ok());
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.run(&["SET", a.as_str(), "1"]), QUEUED);
    assert_eq!(h.run(&["SET", b.as_str(), "1"]), QUEUED);
    assert_eq!(h.cmd("EXEC"), NULL);
    assert_eq!(stream_since(&h, from), vec![rec(&["SET", &a, "w"])]);
}
