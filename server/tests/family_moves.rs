//! RENAME, RENAMENX, COPY and MSETNX in process, with both keys on one
//! shard and on two (the harness has two shards): replies, TTLs moved
//! exactly, rate-limit states moved whole, the effects each emits, Redis
//! 7's errors, and MULTI/EXEC around them.

mod common;

use common::{arity, err, ints, SYNTAX};
use leasehold_protocol::Reply;
use leasehold_server::harness::Harness;

/// Two keys on the same shard and two on different shards.
fn pairs(h: &Harness) -> [(String, String); 2] {
    let same = (h.key_on(0, "same:a"), h.key_on(0, "same:b"));
    let cross = (h.key_on(0, "cross:a"), h.key_on(1, "cross:b"));
    [same, cross]
}

#[test]
fn rename_moves_the_value_and_its_ttl_on_one_shard_and_across_two() {
    let mut h = Harness::new();
    for (a, b) in pairs(&h) {
        assert_eq!(h.run(&["RENAME", &a, &b]), err("ERR no such key"));
        assert_eq!(h.run(&["SET", &a, "v", "PX", "1500"]), Reply::ok());
        let (reply, effects) = h.run_effects(&["RENAME", &a, &b]);
        assert_eq!(reply, Reply::ok());
        let mut effects = effects;
        effects.sort();
        let mut want = vec![
            vec!["DEL".to_string(), a.clone()],
            vec![
                "SET".into(),
                b.clone(),
                "v".into(),
                "PXAT".into(),
                "1700000001500".into(),
            ],
        ];
        want.sort();
        assert_eq!(effects, want, "{a} -> {b}");
        assert_eq!(h.run(&["EXISTS", &a]), Reply::Int(0));
        assert_eq!(h.run(&["GET", &b]), Reply::bulk("v"));
        assert_eq!(h.run(&["PTTL", &b]), Reply::Int(1500));
        // Over an existing key: it is deleted first, its TTL goes with it.
        assert_eq!(h.run(&["SET", &a, "w"]), Reply::ok());
        let (reply, effects) = h.run_effects(&["RENAME", &a, &b]);
        assert_eq!(reply, Reply::ok());
        assert_eq!(effects.len(), 3, "{effects:?}");
        assert_eq!(h.run(&["GET", &b]), Reply::bulk("w"));
        assert_eq!(h.run(&["PTTL", &b]), Reply::Int(-1));
        assert_eq!(h.run(&["DEL", &b]), Reply::Int(1));
    }
    assert_eq!(h.cmd("SET self v"), Reply::ok());
    assert_eq!(h.cmd("RENAME self self"), Reply::ok());
    assert_eq!(h.cmd("RENAMENX self self"), Reply::Int(0));
    assert_eq!(h.cmd("RENAME nokey nokey"), err("ERR no such key"));
    assert_eq!(h.cmd("RENAME a"), arity("rename"));
    assert_eq!(h.cmd("RENAMENX a b c"), arity("renamenx"));
}

#[test]
fn renamenx_refuses_an_existing_destination() {
    let mut h = Harness::new();
    for (a, b) in pairs(&h) {
        assert_eq!(h.run(&["RENAMENX", &a, &b]), err("ERR no such key"));
        assert_eq!(h.run(&["SET", &a, "1"]), Reply::ok());
        assert_eq!(h.run(&["SET", &b, "2"]), Reply::ok());
        assert_eq!(
            h.run_effects(&["RENAMENX", &a, &b]),
            (Reply::Int(0), vec![])
        );
        assert_eq!(h.run(&["DEL", &b]), Reply::Int(1));
        assert_eq!(h.run(&["RENAMENX", &a, &b]), Reply::Int(1));
        assert_eq!(h.run(&["GET", &b]), Reply::bulk("1"));
        assert_eq!(h.run(&["EXISTS", &a]), Reply::Int(0));
        assert_eq!(h.run(&["DEL", &b]), Reply::Int(1));
    }
}

#[test]
fn rate_limit_states_move_whole_with_their_deadline() {
    let mut h = Harness::new();
    for (a, b) in pairs(&h) {
        // A sliding-window key lives in a compact entry; a bucket in a general one.
        assert_eq!(
            h.run(&["TOKENLEASE", &a, "10", "1", "1000", "3"]),
            ints(&[3, 7, 0, 3000])
        );
        let before = h.run(&["RLSTATE", &a]);
        let pttl = h.run(&["PTTL", &a]);
        assert_eq!(h.run(&["RENAME", &a, &b]), Reply::ok());
        assert_eq!(h.run(&["RLSTATE", &b]), before, "{a} -> {b}");
        assert_eq!(h.run(&["PTTL", &b]), pttl);
        assert_eq!(h.run(&["TYPE", &b]), Reply::simple("tokenbucket"));
        h.clock().advance_ms(1000);
        assert_eq!(
            h.run(&["TOKENLEASE", &b, "10", "1", "1000", "1"]),
            ints(&[1, 7, 0, 3000])
        );
        assert_eq!(
            h.run(&["SLIDINGWINDOW", &a, "5", "1000", "COUNT", "2"]),
            ints(&[2, 2, 3, 0])
        );
        let window = h.run(&["RLSTATE", &a]);
        assert_eq!(h.run(&["COPY", &a, &b, "REPLACE"]), Reply::Int(1));
        assert_eq!(h.run(&["RLSTATE", &b]), window);
        assert_eq!(h.run(&["RLSTATE", &a]), window, "COPY leaves the source");
        assert_eq!(h.run(&["PTTL", &b]), h.run(&["PTTL", &a]));
        h.cmd("FLUSHALL");
    }
}

#[test]
fn copy_copies_with_replace_and_db_zero_only() {
    let mut h = Harness::new();
    for (a, b) in pairs(&h) {
        assert_eq!(h.run(&["COPY", &a, &b]), Reply::Int(0));
        assert_eq!(h.run(&["SET", &a, "v", "EX", "100"]), Reply::ok());
        let (reply, effects) = h.run_effects(&["COPY", &a, &b]);
        assert_eq!(reply, Reply::Int(1));
        assert_eq!(
            effects,
            vec![vec![
                "SET".to_string(),
                b.clone(),
                "v".into(),
                "PXAT".into(),
                "1700000100000".into()
            ]]
        );
        assert_eq!(h.run(&["TTL", &b]), Reply::Int(100));
        assert_eq!(h.run(&["SET", &a, "w"]), Reply::ok());
        assert_eq!(h.run(&["COPY", &a, &b]), Reply::Int(0));
        assert_eq!(h.run(&["GET", &b]), Reply::bulk("v"));
        assert_eq!(
            h.run(&["COPY", &a, &b, "REPLACE", "DB", "0"]),
            Reply::Int(1)
        );
        assert_eq!(h.run(&["GET", &b]), Reply::bulk("w"));
        assert_eq!(h.run(&["TTL", &b]), Reply::Int(-1));
        assert_eq!(
            h.run(&["COPY", &a, &b, "DB", "1"]),
            err("ERR DB index is out of range")
        );
        assert_eq!(
            h.run(&["COPY", &a, &b, "DB", "x"]),
            err("ERR value is not an integer or out of range")
        );
        assert_eq!(h.run(&["COPY", &a, &b, "DB"]), err(SYNTAX));
        assert_eq!(h.run(&["COPY", &a, &b, "BOGUS"]), err(SYNTAX));
        h.cmd("FLUSHALL");
    }
    assert_eq!(
        h.cmd("COPY k k"),
        err("ERR source and destination objects are the same")
    );
    assert_eq!(h.cmd("COPY k"), arity("copy"));
}

#[test]
fn msetnx_is_all_or_nothing_over_shards() {
    let mut h = Harness::new();
    let (a, b) = (h.key_on(0, "m:a"), h.key_on(1, "m:b"));
    let (reply, effects) = h.run_effects(&["MSETNX", &a, "1", &b, "2"]);
    assert_eq!(reply, Reply::Int(1));
    assert_eq!(effects.len(), 2);
    assert_eq!(
        h.run(&["MGET", &a, &b]),
        Reply::Array(vec![Reply::bulk("1"), Reply::bulk("2")])
    );
    let c = h.key_on(0, "m:c");
    assert_eq!(
        h.run_effects(&["MSETNX", &c, "3", &b, "4"]),
        (Reply::Int(0), vec![])
    );
    assert_eq!(
        h.run(&["EXISTS", &c]),
        Reply::Int(0),
        "nothing written on the other shard"
    );
    assert_eq!(h.run(&["MSETNX", &c, "3", &c, "5"]), Reply::Int(1));
    assert_eq!(h.run(&["GET", &c]), Reply::bulk("5"));
    assert_eq!(h.run(&["MSETNX", &a, "1", &b]), arity("msetnx"));
    assert_eq!(h.cmd("MSETNX a"), arity("msetnx"));
}

#[test]
fn cross_shard_commands_inside_multi_and_in_a_pipeline() {
    let mut h = Harness::new();
    let [_, (a, b)] = pairs(&h);
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.run(&["SET", &a, "x"]), Reply::simple("QUEUED"));
    assert_eq!(h.run(&["RENAME", &a, &b]), Reply::simple("QUEUED"));
    assert_eq!(h.run(&["COPY", &b, &a]), Reply::simple("QUEUED"));
    assert_eq!(h.run(&["GET", &a]), Reply::simple("QUEUED"));
    assert_eq!(
        h.run(&["MSETNX", &a, "1", &b, "2"]),
        Reply::simple("QUEUED")
    );
    assert_eq!(
        h.cmd("EXEC"),
        Reply::Array(vec![
            Reply::ok(),
            Reply::ok(),
            Reply::Int(1),
            Reply::bulk("x"),
            Reply::Int(0)
        ])
    );
    let replies = h.pipeline(&[
        vec!["SET", a.as_str(), "p"],
        vec!["RENAME", a.as_str(), b.as_str()],
        vec!["GET", b.as_str()],
        vec!["RENAME", a.as_str(), b.as_str()],
        vec!["PING"],
    ]);
    assert_eq!(
        replies,
        vec![
            Reply::ok(),
            Reply::ok(),
            Reply::bulk("p"),
            err("ERR no such key"),
            Reply::simple("PONG")
        ]
    );
    assert_eq!(
        common::info_field(&mut h, "commandstats", "cmdstat_rename").unwrap(),
        "calls=3,usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=1"
    );
}

#[test]
fn a_rate_limit_state_without_a_ttl_keeps_none_through_rename_and_copy() {
    let mut h = Harness::new();
    for (a, b) in pairs(&h) {
        assert_eq!(
            h.run(&["TOKENLEASE", &a, "10", "1", "1000", "2"]),
            ints(&[2, 8, 0, 2000])
        );
        assert_eq!(h.run(&["PERSIST", &a]), Reply::Int(1));
        let (reply, effects) = h.run_effects(&["RENAME", &a, &b]);
        assert_eq!(reply, Reply::ok());
        // LH.RESTORE always carries a deadline: PERSIST follows it.
        let restored = effects
            .iter()
            .position(|e| e[0] == "LH.RESTORE" && e[1] == b);
        let persisted = effects
            .iter()
            .position(|e| e[..] == ["PERSIST", b.as_str()]);
        assert!(restored.is_some() && persisted > restored, "{effects:?}");
        assert_eq!(h.run(&["PTTL", &b]), Reply::Int(-1));
        assert_eq!(h.run(&["COPY", &b, &a]), Reply::Int(1));
        assert_eq!(h.run(&["PTTL", &a]), Reply::Int(-1));
        h.cmd("FLUSHALL");
    }
}
