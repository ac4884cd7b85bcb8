//! The lists family in process: every command's replies, its effect (the
//! command that replays it, nothing when nothing changed), emptied lists
//! removed, Redis 7.0's errors and their order, WRONGTYPE both ways, the
//! generic key commands on lists, LMOVE on one shard and refused across two.

mod common;

use common::{arity, bulks, err, ints, NOT_INT, SYNTAX, WRONGTYPE};
use leasehold_protocol::Reply;
use leasehold_server::harness::Harness;

fn range(h: &mut Harness, key: &str) -> Reply {
    h.run(&["LRANGE", key, "0", "-1"])
}

#[test]
fn pushes_build_the_list_and_replay_as_themselves() {
    let mut h = Harness::new();
    let (reply, effects) = h.run_effects("LPUSH l a b c");
    assert_eq!(reply, Reply::Int(3));
    assert_eq!(effects, vec![vec!["LPUSH", "l", "a", "b", "c"]]);
    assert_eq!(range(&mut h, "l"), bulks(&["c", "b", "a"]));
    assert_eq!(h.cmd("RPUSH l d e"), Reply::Int(5));
    assert_eq!(range(&mut h, "l"), bulks(&["c", "b", "a", "d", "e"]));
    assert_eq!(h.run_effects("LPUSHX missing a"), (Reply::Int(0), vec![]));
    assert_eq!(h.cmd("EXISTS missing"), Reply::Int(0));
    let (reply, effects) = h.run_effects("RPUSHX l f");
    assert_eq!(reply, Reply::Int(6));
    assert_eq!(effects, vec![vec!["RPUSH", "l", "f"]]);
    assert_eq!(h.cmd("LPUSHX l z"), Reply::Int(7));
    assert_eq!(h.cmd("LLEN l"), Reply::Int(7));
    assert_eq!(h.cmd("LLEN missing"), Reply::Int(0));
    assert_eq!(h.cmd("LPUSH l"), arity("lpush"));
    assert_eq!(h.cmd("RPUSHX l"), arity("rpushx"));
    // Binary-safe elements, the empty one included.
    assert_eq!(h.run(&["RPUSH", "b", "", "a\r\nb"]), Reply::Int(2));
    assert_eq!(range(&mut h, "b"), bulks(&["", "a\r\nb"]));
}

#[test]
fn pops_with_and_without_a_count() {
    let mut h = Harness::new();
    // The harness decodes `$-1` and `*-1` alike (the differential tests
    // compare the bytes): both are nil here.
    assert_eq!(h.cmd("LPOP l"), Reply::Nil);
    assert_eq!(h.cmd("LPOP l 2"), Reply::Nil);
    assert_eq!(h.cmd("RPOP l 0"), Reply::Nil, "a missing key first");
    h.cmd("RPUSH l a b c d e");
    assert_eq!(h.run_effects("LPOP l 0"), (Reply::Array(vec![]), vec![]));
    let (reply, effects) = h.run_effects("LPOP l");
    assert_eq!(reply, Reply::bulk("a"));
    assert_eq!(effects, vec![vec!["LPOP", "l"]]);
    let (reply, effects) = h.run_effects("RPOP l 2");
    assert_eq!(reply, bulks(&["e", "d"]));
    assert_eq!(effects, vec![vec!["RPOP", "l", "2"]]);
    assert_eq!(h.cmd("LPOP l 10"), bulks(&["b", "c"]));
    assert_eq!(h.cmd("EXISTS l"), Reply::Int(0), "the emptied list is gone");
    let positive = err("ERR value is out of range, must be positive");
    assert_eq!(h.cmd("LPOP l -1"), positive);
    assert_eq!(h.cmd("RPOP l x"), positive);
    assert_eq!(h.cmd("LPOP l 1 2"), arity("lpop"));
    h.cmd("RPUSH one x");
    assert_eq!(h.cmd("RPOP one"), Reply::bulk("x"));
    assert_eq!(h.cmd("TYPE one"), Reply::simple("none"));
}

#[test]
fn ranges_and_indexes_count_from_either_end() {
    let mut h = Harness::new();
    h.cmd("RPUSH l a b c d e f");
    for (start, stop, want) in [
        ("0", "-1", &["a", "b", "c", "d", "e", "f"][..]),
        ("-3", "-2", &["d", "e"]),
        ("-100", "1", &["a", "b"]),
        ("4", "100", &["e", "f"]),
        ("3", "2", &[]),
        ("6", "10", &[]),
        ("-1", "-1", &["f"]),
        ("9223372036854775807", "-9223372036854775808", &[]),
    ] {
        assert_eq!(
            h.run(&["LRANGE", "l", start, stop]),
            bulks(want),
            "{start} {stop}"
        );
    }
    assert_eq!(h.cmd("LRANGE missing 0 -1"), Reply::Array(vec![]));
    assert_eq!(h.cmd("LRANGE l x 1"), err(NOT_INT));
    assert_eq!(h.cmd("LRANGE missing 0 y"), err(NOT_INT), "arguments first");
    assert_eq!(h.cmd("LINDEX l 0"), Reply::bulk("a"));
    assert_eq!(h.cmd("LINDEX l -1"), Reply::bulk("f"));
    assert_eq!(h.cmd("LINDEX l 6"), Reply::Nil);
    assert_eq!(h.cmd("LINDEX l -7"), Reply::Nil);
    assert_eq!(h.cmd("LINDEX l x"), err(NOT_INT));
    assert_eq!(h.cmd("LINDEX missing x"), Reply::Nil, "the key first");
}

#[test]
fn ltrim_keeps_a_range_and_removes_an_emptied_list() {
    let mut h = Harness::new();
    h.cmd("RPUSH l a b c d e");
    let (reply, effects) = h.run_effects("LTRIM l 1 -2");
    assert_eq!(reply, Reply::ok());
    assert_eq!(effects, vec![vec!["LTRIM", "l", "1", "-2"]]);
    assert_eq!(range(&mut h, "l"), bulks(&["b", "c", "d"]));
    assert_eq!(
        h.run_effects("LTRIM l 0 -1"),
        (Reply::ok(), vec![]),
        "nothing trimmed"
    );
    assert_eq!(h.cmd("LTRIM missing 0 1"), Reply::ok());
    assert_eq!(h.cmd("LTRIM missing x 1"), err(NOT_INT));
    assert_eq!(h.cmd("LTRIM l 5 1"), Reply::ok());
    assert_eq!(h.cmd("EXISTS l"), Reply::Int(0));
}

#[test]
fn lrem_lset_and_linsert() {
    let mut h = Harness::new();
    h.cmd("RPUSH l a b a c a");
    let (reply, effects) = h.run_effects("LREM l -2 a");
    assert_eq!(reply, Reply::Int(2));
    assert_eq!(effects, vec![vec!["LREM", "l", "-2", "a"]]);
    assert_eq!(range(&mut h, "l"), bulks(&["a", "b", "c"]));
    assert_eq!(h.run_effects("LREM l 0 zz"), (Reply::Int(0), vec![]));
    assert_eq!(h.cmd("LREM missing 1 a"), Reply::Int(0));
    assert_eq!(h.cmd("LREM missing x a"), err(NOT_INT));

    let (reply, effects) = h.run_effects("LSET l -1 z");
    assert_eq!(reply, Reply::ok());
    assert_eq!(effects, vec![vec!["LSET", "l", "2", "z"]]);
    assert_eq!(h.cmd("LSET l 3 q"), err("ERR index out of range"));
    assert_eq!(h.cmd("LSET l x q"), err(NOT_INT));
    assert_eq!(h.cmd("LSET missing x q"), err("ERR no such key"));

    let (reply, effects) = h.run_effects("LINSERT l before b x");
    assert_eq!(reply, Reply::Int(4));
    assert_eq!(effects, vec![vec!["LINSERT", "l", "BEFORE", "b", "x"]]);
    assert_eq!(h.cmd("LINSERT l AFTER z y"), Reply::Int(5));
    assert_eq!(range(&mut h, "l"), bulks(&["a", "x", "b", "z", "y"]));
    assert_eq!(
        h.run_effects("LINSERT l AFTER nope y"),
        (Reply::Int(-1), vec![])
    );
    assert_eq!(h.cmd("LINSERT missing AFTER a y"), Reply::Int(0));
    assert_eq!(h.cmd("LINSERT missing MIDDLE a y"), err(SYNTAX));
    assert_eq!(h.cmd("LINSERT l before b"), arity("linsert"));
    h.cmd("RPUSH one v");
    assert_eq!(h.cmd("LREM one 0 v"), Reply::Int(1));
    assert_eq!(h.cmd("EXISTS one"), Reply::Int(0));
}

#[test]
fn lpos_ranks_counts_and_maxlen() {
    let mut h = Harness::new();
    h.cmd("RPUSH l a b c a b c a");
    assert_eq!(h.cmd("LPOS l a"), Reply::Int(0));
    assert_eq!(h.cmd("LPOS l c"), Reply::Int(2));
    assert_eq!(h.cmd("LPOS l zz"), Reply::Nil);
    assert_eq!(h.cmd("LPOS l a RANK 2"), Reply::Int(3));
    assert_eq!(h.cmd("LPOS l a RANK -1"), Reply::Int(6));
    assert_eq!(h.cmd("LPOS l a COUNT 0"), ints(&[0, 3, 6]));
    assert_eq!(h.cmd("LPOS l a RANK -1 COUNT 2"), ints(&[6, 3]));
    assert_eq!(h.cmd("LPOS l a RANK 2 COUNT 2 MAXLEN 5"), ints(&[3]));
    assert_eq!(h.cmd("LPOS l a RANK -2 MAXLEN 4"), Reply::Int(3));
    assert_eq!(h.cmd("LPOS l a COUNT 0 MAXLEN 1"), ints(&[0]));
    assert_eq!(h.cmd("LPOS l zz COUNT 1"), ints(&[]));
    // Redis negates i64::MIN as a C long: it stays negative, so every match
    // from the tail counts.
    assert_eq!(
        h.cmd("LPOS l a RANK -9223372036854775808 COUNT 2"),
        ints(&[6, 3, 0])
    );
    assert_eq!(h.cmd("LPOS l a RANK 9223372036854775807"), Reply::Nil);
    assert_eq!(h.cmd("LPOS missing a"), Reply::Nil);
    assert_eq!(h.cmd("LPOS missing a COUNT 3"), ints(&[]));
    assert_eq!(
        h.cmd("LPOS l a RANK 0"),
        err("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list")
    );
    assert_eq!(
        h.cmd("LPOS l a COUNT -1"),
        err("ERR COUNT can't be negative")
    );
    assert_eq!(
        h.cmd("LPOS l a COUNT x"),
        err("ERR COUNT can't be negative")
    );
    assert_eq!(
        h.cmd("LPOS missing a MAXLEN -1"),
        err("ERR MAXLEN can't be negative")
    );
    assert_eq!(h.cmd("LPOS l a RANK x"), err(NOT_INT));
    assert_eq!(h.cmd("LPOS l a RANK"), err(SYNTAX));
    assert_eq!(h.cmd("LPOS l a FOO 1"), err(SYNTAX));
}

#[test]
fn lmove_and_rpoplpush_on_one_shard() {
    let mut h = Harness::new();
    h.cmd("RPUSH {q}src a b c");
    let (reply, effects) = h.run_effects("LMOVE {q}src {q}dst RIGHT LEFT");
    assert_eq!(reply, Reply::bulk("c"));
    assert_eq!(
        effects,
        vec![vec!["RPOP", "{q}src"], vec!["LPUSH", "{q}dst", "c"]],
        "the pop and the push: each key's watchers see its change"
    );
    assert_eq!(h.cmd("RPOPLPUSH {q}src {q}dst"), Reply::bulk("b"));
    assert_eq!(range(&mut h, "{q}dst"), bulks(&["b", "c"]));
    assert_eq!(h.cmd("LMOVE {q}src {q}dst LEFT RIGHT"), Reply::bulk("a"));
    assert_eq!(h.cmd("EXISTS {q}src"), Reply::Int(0), "the source emptied");
    assert_eq!(range(&mut h, "{q}dst"), bulks(&["b", "c", "a"]));
    assert_eq!(h.cmd("LMOVE {q}src {q}dst LEFT RIGHT"), Reply::Nil);
    // Rotation, one element included: the key and its TTL stay.
    h.cmd("RPUSH rot x");
    h.cmd("EXPIRE rot 100");
    let (reply, effects) = h.run_effects("LMOVE rot rot LEFT RIGHT");
    assert_eq!(reply, Reply::bulk("x"));
    assert_eq!(effects, vec![vec!["LMOVE", "rot", "rot", "LEFT", "RIGHT"]]);
    assert_eq!(h.cmd("TTL rot"), Reply::Int(100));
    h.cmd("RPUSH {q}dst z");
    assert_eq!(h.cmd("RPOPLPUSH {q}dst {q}dst"), Reply::bulk("z"));
    assert_eq!(range(&mut h, "{q}dst"), bulks(&["z", "b", "c", "a"]));
    // Types are checked before anything moves.
    h.cmd("SET {q}str v");
    assert_eq!(h.cmd("LMOVE {q}dst {q}str LEFT LEFT"), err(WRONGTYPE));
    assert_eq!(h.cmd("LMOVE {q}str {q}dst LEFT LEFT"), err(WRONGTYPE));
    assert_eq!(h.cmd("LMOVE {q}missing {q}str LEFT LEFT"), Reply::Nil);
    assert_eq!(h.cmd("LLEN {q}dst"), Reply::Int(4));
    assert_eq!(h.cmd("LMOVE {q}dst {q}x UP LEFT"), err(SYNTAX));
    assert_eq!(h.cmd("LMOVE {q}dst {q}x LEFT"), arity("lmove"));
}

#[test]
fn lmove_across_shards_names_the_hash_tag_fix() {
    let mut h = Harness::new();
    let (a, b) = (h.key_on(0, "a"), h.key_on(1, "b"));
    h.run(&["RPUSH", &a, "x"]);
    let Reply::Error(e) = h.run(&["LMOVE", &a, &b, "LEFT", "LEFT"]) else {
        panic!("LMOVE across shards succeeded")
    };
    assert!(
        e.starts_with("CROSSSLOT ") && e.contains("{hash tag}"),
        "{e}"
    );
    assert!(h.run(&["RPOPLPUSH", &a, &b]).is_error());
    assert_eq!(h.run(&["LLEN", &a]), Reply::Int(1), "nothing moved");
    // On one shard any two keys move.
    let mut one = Harness::with_shards(1);
    one.run(&["RPUSH", &a, "x"]);
    assert_eq!(
        one.run(&["LMOVE", &a, &b, "LEFT", "LEFT"]),
        Reply::bulk("x")
    );
}

#[test]
fn wrong_types_both_ways_and_generic_key_commands() {
    let mut h = Harness::new();
    h.cmd("SET s v");
    for line in [
        "LPUSH s a",
        "RPUSH s a",
        "LPUSHX s a",
        "RPUSHX s a",
        "LPOP s",
        "RPOP s 2",
        "LRANGE s 0 1",
        "LTRIM s 0 1",
        "LINDEX s 0",
        "LLEN s",
        "LREM s 0 a",
        "LSET s 0 a",
        "LINSERT s AFTER a b",
        "LPOS s a",
        "RPOPLPUSH s s",
    ] {
        assert_eq!(h.cmd(line), err(WRONGTYPE), "{line}");
    }
    h.cmd("RPUSH l a b");
    for line in ["GET l", "INCR l", "APPEND l x", "STRLEN l"] {
        assert_eq!(h.cmd(line), err(WRONGTYPE), "{line}");
    }
    assert_eq!(h.cmd("MGET l"), Reply::Array(vec![Reply::Nil]));
    assert_eq!(h.cmd("TYPE l"), Reply::simple("list"));
    let mut listed = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let Reply::Array(parts) = h.run(&["SCAN", &cursor, "TYPE", "list", "COUNT", "1000"]) else {
            panic!()
        };
        let (Reply::Bulk(c), Reply::Array(keys)) = (&parts[0], &parts[1]) else {
            panic!()
        };
        listed.extend(keys.iter().cloned());
        cursor = String::from_utf8_lossy(c).into_owned();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(listed, vec![Reply::bulk("l")]);
    assert_eq!(h.cmd("EXPIRE l 10"), Reply::Int(1));
    assert_eq!(h.cmd("LPUSH l z"), Reply::Int(3), "a push keeps the TTL");
    assert_eq!(h.cmd("TTL l"), Reply::Int(10));
    h.clock().advance_ms(10_000);
    assert_eq!(h.cmd("LLEN l"), Reply::Int(0), "expired");
    assert_eq!(h.cmd("RPUSH l a"), Reply::Int(1), "a new list");
    assert_eq!(h.cmd("TTL l"), Reply::Int(-1));
    assert_eq!(h.cmd("DEL l"), Reply::Int(1));
    assert_eq!(h.cmd("SET l now-a-string"), Reply::ok());
}

#[test]
fn big_lists_span_many_nodes() {
    let mut h = Harness::new();
    let items: Vec<String> = (0..3000)
        .map(|i| format!("element-{i:05}-{}", "x".repeat(i % 50)))
        .collect();
    for chunk in items.chunks(500) {
        let mut args = vec!["RPUSH".to_string(), "big".to_string()];
        args.extend(chunk.iter().cloned());
        h.run(&args);
    }
    assert_eq!(h.cmd("LLEN big"), Reply::Int(3000));
    assert_eq!(h.cmd("LINDEX big 1234"), Reply::bulk(&items[1234]));
    assert_eq!(h.cmd("LINDEX big -1"), Reply::bulk(&items[2999]));
    let want: Vec<&str> = items[1000..1600].iter().map(String::as_str).collect();
    assert_eq!(h.cmd("LRANGE big 1000 1599"), bulks(&want));
    assert_eq!(h.run(&["LPOS", "big", &items[2500]]), Reply::Int(2500));
    assert_eq!(h.cmd("LSET big 1500 mid"), Reply::ok());
    assert_eq!(h.cmd("LINSERT big BEFORE mid before-mid"), Reply::Int(3001));
    assert_eq!(
        h.cmd("LRANGE big 1499 1501"),
        bulks(&[&items[1499], "before-mid", "mid"])
    );
    assert_eq!(h.cmd("LTRIM big 100 -100"), Reply::ok());
    assert_eq!(h.cmd("LLEN big"), Reply::Int(2802));
    assert_eq!(h.cmd("LINDEX big 0"), Reply::bulk(&items[100]));
    // The node size follows list-max-listpack-size for new lists.
    assert_eq!(h.cmd("CONFIG SET list-max-listpack-size 2"), Reply::ok());
    assert_eq!(
        h.cmd("CONFIG GET list-max-listpack-size"),
        bulks(&["list-max-listpack-size", "2"])
    );
    assert_eq!(h.cmd("RPUSH small a b c d e"), Reply::Int(5));
    assert_eq!(h.cmd("LRANGE small 1 3"), bulks(&["b", "c", "d"]));
    assert_eq!(h.cmd("CONFIG SET list-max-ziplist-size -2"), Reply::ok());
}
