//! The replication family in process: REPLICAOF / SLAVEOF changing the
//! role (no link is made: the harness runs no replication thread), what a
//! replica refuses, REPLCONF's options, PSYNC's refusals, ROLE's shapes and
//! the ids INFO shows across a promotion. The link itself is tested end to
//! end in `tests/tests/replication.rs`.

mod common;

use common::{err, info_field, NOT_INT};
use leasehold_protocol::Reply;
use leasehold_server::harness::Harness;

const READONLY: &str = "READONLY You can't write against a read only replica.";

#[test]
fn a_replica_refuses_writes_whole_and_serves_reads() {
    let mut h = Harness::new();
    let (a, b) = (h.key_on(0, "a"), h.key_on(1, "b"));
    assert_eq!(h.run(&["SET", &a, "1"]), Reply::ok());
    let offset = info_field(&mut h, "replication", "master_repl_offset").expect("offset");
    // The SET's effect: `*3 $3 SET $<len> <key> $1 1`, each line ended by CRLF.
    assert_eq!(
        offset,
        (25 + a.len() + a.len().to_string().len()).to_string()
    );
    assert_eq!(h.cmd("REPLICAOF 127.0.0.1 1"), Reply::ok());
    assert_eq!(
        h.cmd("REPLICAOF 127.0.0.1 1"),
        Reply::Simple("OK Already connected to specified master".into())
    );
    assert_eq!(h.run(&["SET", &a, "2"]), err(READONLY));
    // A write over two shards is refused before either runs.
    assert_eq!(h.run(&["MSET", &a, "3", &b, "3"]), err(READONLY));
    assert_eq!(
        h.run(&["TOKENLEASE", &a, "1", "10", "1000", "1"]),
        err(READONLY)
    );
    assert_eq!(h.cmd("FLUSHALL"), err(READONLY));
    assert_eq!(h.run(&["GET", &a]), Reply::bulk("1"));
    assert_eq!(h.run(&["GET", &b]), Reply::Nil);
    assert_eq!(
        h.cmd("ROLE"),
        Reply::Array(vec![
            Reply::bulk("slave"),
            Reply::bulk("127.0.0.1"),
            Reply::Int(1),
            Reply::bulk("connect"),
            // Redis's -1 while the link is not up.
            Reply::Int(-1),
        ])
    );
    assert_eq!(
        info_field(&mut h, "replication", "role").as_deref(),
        Some("slave")
    );
    assert_eq!(
        info_field(&mut h, "replication", "master_link_status").as_deref(),
        Some("down")
    );
    assert_eq!(
        h.cmd("PSYNC ? -1"),
        err("NOMASTERLINK Can't SYNC while not connected with my master")
    );
    assert_eq!(
        h.cmd("WAIT 1 10"),
        err("ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated.")
    );
    assert_eq!(h.cmd("SLAVEOF NO ONE"), Reply::ok());
    assert_eq!(h.run(&["MSET", &a, "3", &b, "3"]), Reply::ok());
    // No replica: WAIT for none answers at once.
    assert_eq!(h.cmd("WAIT 0 0"), Reply::Int(0));
    assert_eq!(h.cmd("WAIT 0 -1"), err("ERR timeout is negative"));
    assert_eq!(h.run(&["GET", &b]), Reply::bulk("3"));
}

#[test]
fn promotion_moves_the_replid_to_replid2() {
    let mut h = Harness::new();
    assert_eq!(
        h.cmd("ROLE"),
        Reply::Array(vec![
            Reply::bulk("master"),
            Reply::Int(0),
            Reply::Array(vec![])
        ])
    );
    let first = info_field(&mut h, "replication", "master_replid").expect("replid");
    assert_eq!(first.len(), 40);
    assert_eq!(
        info_field(&mut h, "replication", "master_replid2").as_deref(),
        Some("0000000000000000000000000000000000000000")
    );
    assert_eq!(
        info_field(&mut h, "replication", "second_repl_offset").as_deref(),
        Some("-1")
    );
    // A primary told NO ONE stays as it is.
    assert_eq!(h.cmd("REPLICAOF NO ONE"), Reply::ok());
    assert_eq!(
        info_field(&mut h, "replication", "master_replid").as_deref(),
        Some(first.as_str())
    );
    assert_eq!(h.cmd("REPLICAOF localhost 6390"), Reply::ok());
    assert_eq!(h.cmd("REPLICAOF NO ONE"), Reply::ok());
    assert_eq!(
        info_field(&mut h, "replication", "master_replid2").as_deref(),
        Some(first.as_str())
    );
    assert_eq!(
        info_field(&mut h, "replication", "second_repl_offset").as_deref(),
        Some("1")
    );
    let second = info_field(&mut h, "replication", "master_replid").expect("replid");
    assert_ne!(second, first);
    assert_eq!(
        info_field(&mut h, "replication", "role").as_deref(),
        Some("master")
    );
}

#[test]
fn replconf_and_psync_refusals() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("REPLCONF listening-port 6380"), Reply::ok());
    assert_eq!(h.cmd("REPLCONF capa eof capa psync2"), Reply::ok());
    assert_eq!(h.cmd("REPLCONF listening-port x"), err(NOT_INT));
    assert_eq!(
        h.cmd("REPLCONF bogus 1"),
        err("ERR Unrecognized REPLCONF option: bogus")
    );
    assert_eq!(h.cmd("REPLCONF capa"), err("ERR syntax error"));
    // A stock Redis replica would misread our snapshot: refused.
    assert_eq!(
        h.cmd("PSYNC ? -1"),
        err("ERR Leasehold replication needs a Leasehold replica (REPLCONF capa lh1)")
    );
    assert_eq!(h.cmd("PSYNC ? x"), err(NOT_INT));
    assert_eq!(
        h.cmd("REPLICAOF 127.0.0.1 99999"),
        err("ERR Invalid master port")
    );
    assert_eq!(
        h.cmd("PING"),
        Reply::Simple("PONG".into()),
        "the connection goes on"
    );
}
