//! The in-process harness itself: commands for another shard's keys travel
//! as one batch per read through that shard's mailbox, split commands merge
//! in key order, a pipeline is one read, partial and inline requests behave
//! as on a socket, connections share one keyspace but not their state, and
//! the effect readers see exactly the records a call appended.

mod common;

use common::{bulks, ints};
use leasehold_protocol::Reply;
use leasehold_server::harness::{Harness, T0_MS};

fn batches_in(h: &Harness, shard: usize) -> u64 {
    h.shared().shard_stats[shard].batches_in.get()
}

#[test]
fn a_key_on_another_shard_travels_through_its_mailbox() {
    let mut h = Harness::new();
    assert_eq!((h.shards(), h.worker_id()), (2, 0));
    let local = h.key_on(0, "k");
    let remote = h.key_on(1, "k");
    assert_eq!(h.run(&["SET", &local, "1"]), Reply::ok());
    assert_eq!(batches_in(&h, 1), 0, "a local key runs inline");
    assert_eq!(h.run(&["SET", &remote, "2"]), Reply::ok());
    assert_eq!(batches_in(&h, 1), 1);
    // Three commands for shard 1 in one read: one batch.
    let replies = h.pipeline(&[
        ["GET", remote.as_str()],
        ["INCR", remote.as_str()],
        ["GET", remote.as_str()],
    ]);
    assert_eq!(
        replies,
        vec![Reply::bulk("2"), Reply::Int(3), Reply::bulk("3")]
    );
    assert_eq!(batches_in(&h, 1), 2);
    assert_eq!(batches_in(&h, 0), 0);
    assert_eq!(
        h.run(&["MGET", &remote, &local, "nope"]),
        Reply::Array(vec![Reply::bulk("3"), Reply::bulk("1"), Reply::Nil])
    );
    assert_eq!(batches_in(&h, 1), 3, "MGET sent shard 1 its part");
}

#[test]
fn a_connection_on_another_thread_sends_its_own_shard_nothing() {
    let h = Harness::new();
    let mut c = h.new_connection();
    assert_eq!(c.worker_id(), 1);
    let k1 = h.key_on(1, "k");
    assert_eq!(c.run(&["SET", &k1, "v"]), Reply::ok());
    assert_eq!(batches_in(&h, 1), 0);
    let k0 = h.key_on(0, "k");
    assert_eq!(c.run(&["SET", &k0, "w"]), Reply::ok());
    assert_eq!(batches_in(&h, 0), 1);
    let mut on0 = c.connection_on(0);
    assert_eq!(on0.worker_id(), 0);
    assert_eq!(on0.run(&["MGET", &k0, &k1]), bulks(&["w", "v"]));
}

#[test]
fn one_shard_serves_every_key() {
    let mut h = Harness::with_shards(1);
    assert_eq!(h.cmd("MSET a 1 b 2 c 3"), Reply::ok());
    assert_eq!(h.cmd("DEL a b c d"), Reply::Int(3));
    assert_eq!(batches_in(&h, 0), 0);
}

#[test]
fn a_pipeline_is_one_read_and_a_partial_request_waits() {
    let mut h = Harness::new();
    assert_eq!(
        h.pipeline(&["SET a 1", "INCRBY a 41", "GET a", "PING"]),
        vec![
            Reply::ok(),
            Reply::Int(42),
            Reply::bulk("42"),
            Reply::simple("PONG")
        ]
    );
    assert_eq!(h.raw(b"*2\r\n$3\r\nGET\r\n$1\r"), Vec::<Reply>::new());
    assert_eq!(
        h.raw(b"\na\r\nPING\r\n"),
        vec![Reply::bulk("42"), Reply::simple("PONG")]
    );
    assert_eq!(
        h.raw(b"SET \"a b\" 'c d'\r\nGET \"a b\"\r\n"),
        vec![Reply::ok(), Reply::bulk("c d")]
    );
    assert_eq!(h.run(&["GET", "a b"]), Reply::bulk("c d"));
    assert_eq!(h.run(&[b"SET".as_slice(), b"\xff", b"\x00"]), Reply::ok());
    assert_eq!(h.run(&[b"GET".as_slice(), b"\xff"]), Reply::bulk([0u8]));
}

#[test]
fn a_protocol_error_is_the_last_reply_and_closes() {
    let mut h = Harness::new();
    let replies = h.raw(b"PING\r\n*1\r\n+PING\r\nPING\r\n");
    assert_eq!(
        replies,
        vec![
            Reply::simple("PONG"),
            Reply::err("ERR Protocol error: expected '$', got '+'")
        ]
    );
    assert!(h.is_closed());
    assert_eq!(h.raw(b"PING\r\n"), Vec::<Reply>::new());
    let mut other = h.new_connection();
    assert_eq!(other.cmd("PING"), Reply::simple("PONG"));
}

#[test]
fn connections_share_the_keyspace_not_their_state() {
    let mut a = Harness::new();
    let mut b = a.new_connection();
    assert_ne!(a.client_id(), b.client_id());
    assert_eq!(a.cmd("CLIENT SETNAME alpha"), Reply::ok());
    assert_eq!(a.cmd("SET shared yes"), Reply::ok());
    assert_eq!(b.cmd("GET shared"), Reply::bulk("yes"));
    assert_eq!(b.cmd("CLIENT GETNAME"), Reply::Nil);
    assert!(matches!(a.cmd("HELLO 3"), Reply::Map(_)));
    assert!(
        matches!(b.cmd("HELLO"), Reply::Array(_)),
        "b still speaks RESP2"
    );
    assert_eq!(a.protocol(), leasehold_protocol::Protocol::Resp3);
    let clients = a.shared().clients.lock().len();
    drop(b);
    assert_eq!(a.shared().clients.lock().len(), clients - 1);
}

#[test]
fn the_clock_is_manual() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("TIME"), bulks(&["1700000000", "0"]));
    h.clock().advance_ms(1_500);
    assert_eq!(h.cmd("TIME"), bulks(&["1700000001", "500000"]));
    h.at_ms(10);
    assert_eq!(h.cmd("TIME"), bulks(&["1700000000", "10000"]));
    assert_eq!(h.cmd("TOKENLEASE k 10 1 1000 1"), ints(&[1, 9, 0, 1000]));
    assert_eq!(T0_MS, 1_700_000_000_000);
}

#[test]
fn effects_of_one_call_are_read_back_per_shard() {
    let mut h = Harness::new();
    let (a, b) = (h.key_on(0, "a"), h.key_on(1, "b"));
    let start = h.effects_offset();
    let (reply, records) = h.run_effects(&["MSET", &b, "2", &a, "1"]);
    assert_eq!(reply, Reply::ok());
    assert_eq!(
        records,
        vec![vec!["SET", a.as_str(), "1"], vec!["SET", b.as_str(), "2"]],
        "shard 0's records first"
    );
    assert!(h.effects_offset() > start);
    let mark = h.effects_mark();
    assert_eq!(h.run(&["GET", &a]), Reply::bulk("1"));
    assert_eq!(h.effects_since(&mark), Vec::<Vec<String>>::new());
    assert_eq!(h.effects_mark(), mark);
}

#[test]
fn an_expiry_sweep_reclaims_what_no_one_touches() {
    let mut h = Harness::new();
    let (a, b) = (h.key_on(0, "a"), h.key_on(1, "b"));
    assert_eq!(h.run(&["SET", &a, "1", "PX", "100"]), Reply::ok());
    assert_eq!(h.run(&["SET", &b, "1", "PX", "100"]), Reply::ok());
    assert_eq!(h.expiry_sweep(), 0);
    h.clock().advance_ms(100);
    let mark = h.effects_mark();
    assert_eq!(h.expiry_sweep(), 2);
    assert_eq!(
        h.effects_since(&mark),
        vec![vec!["DEL", a.as_str()], vec!["DEL", b.as_str()]]
    );
    assert_eq!(h.cmd("DBSIZE"), Reply::Int(0));
}
