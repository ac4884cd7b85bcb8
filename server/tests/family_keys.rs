//! The keys family in process: DEL, UNLINK, EXISTS, TYPE, the EXPIRE and
//! TTL commands, PERSIST, KEYS, SCAN, DBSIZE, FLUSHALL, FLUSHDB and
//! LH.FLUSHSLOTS. Deadlines on the manual clock, multi-key commands split
//! over both shards, the effects of expiry and flushes, and Redis 7's errors.

mod common;

use std::collections::BTreeSet;

use common::{arity, bulks, err, ints, NOT_INT, SYNTAX};
use leasehold_protocol::Reply;
use leasehold_server::harness::Harness;

/// `SET key v` for every key.
fn set_all(h: &mut Harness, keys: &[&str]) {
    for k in keys {
        assert_eq!(h.run(&["SET", k, "v"]), Reply::ok());
    }
}

#[test]
fn del_unlink_and_exists_count_over_both_shards() {
    let mut h = Harness::new();
    let (a, b, c) = (h.key_on(0, "a"), h.key_on(1, "b"), h.key_on(1, "c"));
    set_all(&mut h, &[&a, &b, &c]);
    assert_eq!(h.run(&["EXISTS", &a, &b, &a, "nope"]), Reply::Int(3));
    let (reply, effects) = h.run_effects(&["DEL", &b, "nope", &a]);
    assert_eq!(reply, Reply::Int(2));
    assert_eq!(
        effects,
        vec![vec!["DEL", a.as_str()], vec!["DEL", b.as_str()]]
    );
    assert_eq!(h.run(&["UNLINK", &c, &c]), Reply::Int(1));
    assert_eq!(h.run(&["EXISTS", &a, &b, &c]), Reply::Int(0));
    assert_eq!(h.cmd("DEL"), arity("del"));
    assert_eq!(h.cmd("UNLINK"), arity("unlink"));
    assert_eq!(h.cmd("EXISTS"), arity("exists"));
}

#[test]
fn type_names_every_kind() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("SET s v"), Reply::ok());
    assert_eq!(h.cmd("INCR n"), Reply::Int(1));
    assert_eq!(h.cmd("TOKENLEASE tb 10 1 1000 1"), ints(&[1, 9, 0, 1000]));
    assert_eq!(h.cmd("SLIDINGWINDOW sw 10 1000"), ints(&[1, 1, 9, 0]));
    assert_eq!(h.cmd("CL.THROTTLE g 1 1 1"), ints(&[0, 2, 1, -1, 1]));
    for (key, kind) in [
        ("s", "string"),
        ("n", "string"),
        ("tb", "tokenbucket"),
        ("sw", "slidingwindow"),
        ("g", "gcra"),
        ("missing", "none"),
    ] {
        assert_eq!(h.run(&["TYPE", key]), Reply::simple(kind), "{key}");
    }
    assert_eq!(h.cmd("TYPE a b"), arity("type"));
}

#[test]
fn expire_then_the_key_is_gone_at_its_deadline() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("SET k v"), Reply::ok());
    let (reply, effects) = h.run_effects("EXPIRE k 10");
    assert_eq!(reply, Reply::Int(1));
    assert_eq!(effects, vec![vec!["PEXPIREAT", "k", "1700000010000"]]);
    assert_eq!(h.cmd("TTL k"), Reply::Int(10));
    assert_eq!(h.cmd("PTTL k"), Reply::Int(10_000));
    assert_eq!(h.cmd("EXPIRETIME k"), Reply::Int(1_700_000_010));
    assert_eq!(h.cmd("PEXPIRETIME k"), Reply::Int(1_700_000_010_000));
    h.clock().advance_ms(9_400);
    assert_eq!(
        h.cmd("TTL k"),
        Reply::Int(1),
        "rounded to the nearest second"
    );
    assert_eq!(h.cmd("PTTL k"), Reply::Int(600));
    h.clock().advance_ms(599);
    assert_eq!(h.cmd("GET k"), Reply::bulk("v"));
    h.clock().advance_ms(1);
    let (reply, effects) = h.run_effects("GET k");
    assert_eq!(reply, Reply::Nil);
    assert_eq!(
        effects,
        vec![vec!["DEL", "k"]],
        "a lazy expiry is replicated"
    );
    assert_eq!(h.cmd("TTL k"), Reply::Int(-2));
    assert_eq!(h.cmd("PEXPIRETIME k"), Reply::Int(-2));
}

#[test]
fn expire_variants_and_their_units() {
    let mut h = Harness::new();
    let far = h.key_on(1, "far");
    set_all(&mut h, &["k", &far]);
    assert_eq!(h.run(&["PEXPIRE", &far, "1500"]), Reply::Int(1));
    assert_eq!(h.run(&["PTTL", &far]), Reply::Int(1500));
    assert_eq!(h.run(&["TTL", &far]), Reply::Int(2));
    assert_eq!(h.cmd("EXPIREAT k 1700000100"), Reply::Int(1));
    assert_eq!(h.cmd("TTL k"), Reply::Int(100));
    assert_eq!(h.cmd("PEXPIREAT k 1700000000500"), Reply::Int(1));
    assert_eq!(h.cmd("PTTL k"), Reply::Int(500));
    assert_eq!(h.cmd("EXPIRE missing 10"), Reply::Int(0));
    assert_eq!(h.cmd("PEXPIREAT missing 1"), Reply::Int(0));
    // A deadline not in the future deletes the key.
    let (reply, effects) = h.run_effects("EXPIREAT k 1700000000");
    assert_eq!(reply, Reply::Int(1));
    assert_eq!(effects, vec![vec!["DEL", "k"]]);
    assert_eq!(h.run(&["EXPIRE", &far, "-1"]), Reply::Int(1));
    assert_eq!(h.run(&["EXISTS", "k", &far]), Reply::Int(0));
}

#[test]
fn expire_conditions() {
    let mut h = Harness::new();
    set_all(&mut h, &["k"]);
    assert_eq!(h.cmd("EXPIRE k 100 XX"), Reply::Int(0), "XX: no TTL yet");
    assert_eq!(
        h.cmd("EXPIRE k 100 GT"),
        Reply::Int(0),
        "no TTL counts as infinite"
    );
    assert_eq!(h.cmd("EXPIRE k 100 LT"), Reply::Int(1));
    assert_eq!(h.cmd("EXPIRE k 50 NX"), Reply::Int(0));
    assert_eq!(h.cmd("EXPIRE k 200 GT"), Reply::Int(1));
    assert_eq!(h.cmd("EXPIRE k 150 gt"), Reply::Int(0));
    assert_eq!(h.cmd("EXPIRE k 150 LT XX"), Reply::Int(1));
    assert_eq!(h.cmd("TTL k"), Reply::Int(150));
    assert_eq!(
        h.cmd("EXPIRE k 10 NX XX"),
        err("ERR NX and XX, GT or LT options at the same time are not compatible")
    );
    assert_eq!(
        h.cmd("EXPIRE k 10 GT LT"),
        err("ERR GT and LT options at the same time are not compatible")
    );
    assert_eq!(
        h.cmd("EXPIRE k 10 SOON"),
        err("ERR Unsupported option SOON")
    );
    // Quoted as sent, as Redis does.
    assert_eq!(
        h.cmd("EXPIRE k 10 soon"),
        err("ERR Unsupported option soon")
    );
    assert_eq!(h.cmd("TTL k"), Reply::Int(150), "refusals change nothing");
}

#[test]
fn expire_errors() {
    let mut h = Harness::new();
    set_all(&mut h, &["k"]);
    assert_eq!(h.cmd("EXPIRE k ten"), err(NOT_INT));
    assert_eq!(h.cmd("EXPIRE missing ten"), err(NOT_INT));
    assert_eq!(
        h.cmd("EXPIRE k 9223372036854775807"),
        err("ERR invalid expire time in 'expire' command")
    );
    assert_eq!(
        h.cmd("PEXPIRE k 9223372036854775807"),
        err("ERR invalid expire time in 'pexpire' command")
    );
    assert_eq!(
        h.cmd("EXPIREAT k 9223372036854775807"),
        err("ERR invalid expire time in 'expireat' command")
    );
    assert_eq!(h.cmd("PEXPIREAT k x"), err(NOT_INT));
    assert_eq!(h.cmd("EXPIRE k"), arity("expire"));
    assert_eq!(h.cmd("PEXPIRE k"), arity("pexpire"));
    assert_eq!(h.cmd("EXPIREAT k"), arity("expireat"));
    assert_eq!(h.cmd("PEXPIREAT k"), arity("pexpireat"));
    assert_eq!(h.cmd("TTL"), arity("ttl"));
    assert_eq!(h.cmd("PTTL a b"), arity("pttl"));
    assert_eq!(h.cmd("EXPIRETIME"), arity("expiretime"));
    assert_eq!(h.cmd("PEXPIRETIME"), arity("pexpiretime"));
    assert_eq!(h.cmd("TTL k"), Reply::Int(-1));
    assert_eq!(h.cmd("EXPIRETIME k"), Reply::Int(-1));
}

#[test]
fn persist_removes_a_deadline() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("SET k v EX 10"), Reply::ok());
    let (reply, effects) = h.run_effects("PERSIST k");
    assert_eq!(reply, Reply::Int(1));
    assert_eq!(effects, vec![vec!["PERSIST", "k"]]);
    assert_eq!(h.cmd("TTL k"), Reply::Int(-1));
    assert_eq!(h.run_effects("PERSIST k"), (Reply::Int(0), vec![]));
    assert_eq!(h.cmd("PERSIST missing"), Reply::Int(0));
    h.clock().advance_ms(10_000);
    assert_eq!(h.cmd("GET k"), Reply::bulk("v"));
    assert_eq!(h.cmd("PERSIST"), arity("persist"));
}

#[test]
fn keys_gathers_every_shard() {
    let mut h = Harness::new();
    let users: Vec<String> = (0..2).map(|s| h.key_on(s, "user:")).collect();
    set_all(&mut h, &[&users[0], &users[1], "session:1"]);
    // Shard 0's keys, then shard 1's.
    assert_eq!(h.cmd("KEYS user:*"), bulks(&[&users[0], &users[1]]));
    assert_eq!(
        h.cmd("KEYS *:1"),
        Reply::Array(vec![Reply::bulk("session:1")])
    );
    assert_eq!(h.cmd("KEYS nothing*"), Reply::Array(vec![]));
    assert_eq!(h.cmd("KEYS"), arity("keys"));
}

/// Every key a full SCAN returns, following cursors from 0, and the cursors.
fn scan_all(h: &mut Harness, options: &[&str]) -> (BTreeSet<String>, Vec<String>) {
    let (mut keys, mut cursors) = (BTreeSet::new(), Vec::new());
    let mut cursor = "0".to_string();
    loop {
        let mut req = vec!["SCAN", cursor.as_str()];
        req.extend_from_slice(options);
        let Reply::Array(parts) = h.run(&req) else {
            panic!("SCAN is an array");
        };
        let [Reply::Bulk(next), Reply::Array(batch)] = &parts[..] else {
            panic!("SCAN is [cursor, keys]: {parts:?}");
        };
        for k in batch {
            let Reply::Bulk(k) = k else { panic!("a key") };
            assert!(keys.insert(String::from_utf8_lossy(k).into_owned()), "once");
        }
        cursor = String::from_utf8_lossy(next).into_owned();
        cursors.push(cursor.clone());
        if cursor == "0" {
            return (keys, cursors);
        }
    }
}

#[test]
fn scan_visits_every_shard_once() {
    let mut h = Harness::new();
    let keys: Vec<String> = (0..40).map(|i| format!("key:{i}")).collect();
    for k in &keys {
        assert_eq!(h.run(&["SET", k, "v"]), Reply::ok());
    }
    assert_eq!(h.cmd("TOKENLEASE tb 10 1 1000 1"), ints(&[1, 9, 0, 1000]));
    let (found, cursors) = scan_all(&mut h, &["COUNT", "1000"]);
    assert_eq!(cursors, vec!["8192", "0"], "one call per shard");
    assert_eq!(found.len(), 41);
    let (small, cursors) = scan_all(&mut h, &["COUNT", "3"]);
    assert_eq!(small.len(), 41);
    assert!(cursors.len() > 10);
    let (strings, _) = scan_all(&mut h, &["MATCH", "key:1*", "TYPE", "string"]);
    assert_eq!(strings.len(), 11, "key:1 and key:10..19");
    let (buckets, _) = scan_all(&mut h, &["TYPE", "tokenbucket"]);
    assert_eq!(buckets.into_iter().collect::<Vec<_>>(), vec!["tb"]);
    assert_eq!(h.cmd("SCAN x"), err("ERR invalid cursor"));
    assert_eq!(h.cmd("SCAN 0 COUNT 0"), err(SYNTAX));
    assert_eq!(h.cmd("SCAN 0 COUNT x"), err(NOT_INT));
    assert_eq!(h.cmd("SCAN 0 SORTED"), err(SYNTAX));
    assert_eq!(
        h.cmd("SCAN 16384"),
        Reply::Array(vec![Reply::bulk("0"), Reply::Array(vec![])])
    );
    assert_eq!(h.cmd("SCAN"), arity("scan"));
}

#[test]
fn dbsize_sums_the_shards() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("DBSIZE"), Reply::Int(0));
    let (a, b) = (h.key_on(0, "a"), h.key_on(1, "b"));
    set_all(&mut h, &[&a, &b]);
    assert_eq!(h.cmd("DBSIZE"), Reply::Int(2));
    assert_eq!(h.cmd("DBSIZE x"), arity("dbsize"));
}

#[test]
fn flushall_and_flushdb_flush_each_shards_own_slots() {
    for flush in ["FLUSHALL", "FLUSHDB"] {
        let mut h = Harness::new();
        let (a, b) = (h.key_on(0, "a"), h.key_on(1, "b"));
        set_all(&mut h, &[&a, &b]);
        assert_eq!(h.run(&[flush, "NOW"]), err(SYNTAX), "{flush}");
        assert_eq!(h.cmd("DBSIZE"), Reply::Int(2));
        let (reply, effects) = h.run_effects(&[flush]);
        assert_eq!(reply, Reply::ok());
        assert_eq!(
            effects,
            vec![
                vec!["LH.FLUSHSLOTS", "0", "8191"],
                vec!["LH.FLUSHSLOTS", "8192", "16383"]
            ]
        );
        assert_eq!(h.cmd("DBSIZE"), Reply::Int(0));
        assert_eq!(h.run(&[flush, "ASYNC"]), Reply::ok());
        assert_eq!(h.run(&[flush, "sync"]), Reply::ok());
    }
}

#[test]
fn lh_flushslots_empties_a_slot_range() {
    let mut h = Harness::new();
    let (a, b) = (h.key_on(0, "a"), h.key_on(1, "b"));
    set_all(&mut h, &[&a, &b]);
    let (reply, effects) = h.run_effects("LH.FLUSHSLOTS 0 8191");
    assert_eq!(reply, Reply::ok());
    assert_eq!(effects, vec![vec!["LH.FLUSHSLOTS", "0", "8191"]]);
    assert_eq!(h.run(&["EXISTS", &a, &b]), Reply::Int(1));
    // Each shard flushes (and names) only the part of the range it owns.
    let (reply, effects) = h.run_effects("LH.FLUSHSLOTS 8000 8200");
    assert_eq!(reply, Reply::ok());
    assert_eq!(
        effects,
        vec![
            vec!["LH.FLUSHSLOTS", "8000", "8191"],
            vec!["LH.FLUSHSLOTS", "8192", "8200"]
        ]
    );
    assert_eq!(h.cmd("LH.FLUSHSLOTS 5 1"), err("ERR invalid slot range"));
    assert_eq!(
        h.cmd("LH.FLUSHSLOTS 0 16384"),
        err("ERR invalid slot range")
    );
    assert_eq!(h.cmd("LH.FLUSHSLOTS x 1"), err(NOT_INT));
    assert_eq!(h.cmd("LH.FLUSHSLOTS 0"), arity("lh.flushslots"));
    assert_eq!(h.cmd("DBSIZE"), Reply::Int(1));
}

#[test]
fn touch_counts_live_keys_over_both_shards() {
    let mut h = Harness::new();
    let (a, b) = (h.key_on(0, "t"), h.key_on(1, "t"));
    assert_eq!(h.run(&["SET", &a, "1"]), Reply::ok());
    assert_eq!(h.run(&["SET", &b, "1", "PX", "10"]), Reply::ok());
    assert_eq!(
        h.run_effects(&["TOUCH", &a, &b, "nokey", &a]),
        (Reply::Int(3), vec![])
    );
    h.clock().advance_ms(10);
    assert_eq!(h.run(&["TOUCH", &a, &b]), Reply::Int(1));
    assert_eq!(h.cmd("TOUCH"), arity("touch"));
}

#[test]
fn randomkey_draws_live_keys_from_every_shard() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("RANDOMKEY"), Reply::Nil);
    let (a, b) = (h.key_on(0, "r"), h.key_on(1, "r"));
    assert_eq!(h.run(&["SET", &a, "1"]), Reply::ok());
    assert_eq!(h.run(&["SET", &b, "1"]), Reply::ok());
    let mut seen = BTreeSet::new();
    for _ in 0..200 {
        match h.cmd("RANDOMKEY") {
            Reply::Bulk(k) => seen.insert(String::from_utf8(k.to_vec()).unwrap()),
            other => panic!("RANDOMKEY answered {other:?}"),
        };
    }
    assert_eq!(seen, BTreeSet::from([a.clone(), b.clone()]));
    // An expired key is reclaimed, never answered.
    assert_eq!(h.run(&["PEXPIRE", &b, "5"]), Reply::Int(1));
    h.clock().advance_ms(5);
    for _ in 0..50 {
        assert_eq!(h.cmd("RANDOMKEY"), Reply::bulk(&a));
    }
    assert_eq!(h.cmd("DBSIZE"), Reply::Int(1));
    assert_eq!(h.cmd("RANDOMKEY x"), arity("randomkey"));
}
