//! The sets family in process: every command's replies and effects (SPOP
//! as SREM or DEL, SMOVE as SREM and SADD, the STORE commands as DEL and
//! SADD), the intset's order and the change of encoding (and CONFIG SET of
//! the thresholds), SRANDMEMBER's and SPOP's picks, SSCAN's cursor over a
//! table, Redis 7.0's errors and their order, CROSSSLOT, WRONGTYPE both
//! ways and the generic key commands on sets.

mod common;

use std::collections::BTreeSet;

use common::{arity, bulks, err, NOT_INT, SYNTAX, WRONGTYPE};
use leasehold_protocol::Reply;
use leasehold_server::harness::Harness;

/// The texts of an array (or set) of bulk strings.
fn texts(r: &Reply) -> Vec<String> {
    let (Reply::Array(items) | Reply::Set(items)) = r else {
        panic!("not an array: {r:?}")
    };
    items.iter().map(common::text).collect()
}

/// The texts as a sorted set.
fn sorted(r: &Reply) -> BTreeSet<String> {
    texts(r).into_iter().collect()
}

fn strs(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn sadd_srem_and_their_effects() {
    let mut h = Harness::new();
    let (reply, effects) = h.run_effects("SADD s b a b c");
    assert_eq!(reply, Reply::Int(3));
    assert_eq!(
        effects,
        vec![vec!["SADD", "s", "b", "a", "c"]],
        "new members only"
    );
    let (reply, effects) = h.run_effects("SADD s a");
    assert_eq!(reply, Reply::Int(0));
    assert!(effects.is_empty(), "no change, no effect");
    assert_eq!(h.cmd("SCARD s"), Reply::Int(3));
    assert_eq!(h.cmd("SCARD nokey"), Reply::Int(0));
    assert_eq!(h.cmd("SISMEMBER s a"), Reply::Int(1));
    assert_eq!(h.cmd("SISMEMBER s z"), Reply::Int(0));
    assert_eq!(h.cmd("SISMEMBER nokey z"), Reply::Int(0));
    assert_eq!(h.cmd("SMISMEMBER s a z c"), common::ints(&[1, 0, 1]));
    assert_eq!(h.cmd("SMISMEMBER nokey a"), common::ints(&[0]));
    assert_eq!(
        h.cmd("SMEMBERS s"),
        bulks(&["b", "a", "c"]),
        "insertion order while small"
    );
    assert_eq!(h.cmd("SMEMBERS nokey"), bulks(&[]));
    let (reply, effects) = h.run_effects("SREM s a z a");
    assert_eq!(reply, Reply::Int(1));
    assert_eq!(effects, vec![vec!["SREM", "s", "a"]]);
    let (reply, effects) = h.run_effects("SREM s z");
    assert_eq!(reply, Reply::Int(0));
    assert!(effects.is_empty());
    assert_eq!(h.cmd("SREM nokey a"), Reply::Int(0));
    assert_eq!(h.cmd("SREM s b c"), Reply::Int(2));
    assert_eq!(
        h.cmd("EXISTS s"),
        Reply::Int(0),
        "an emptied set is removed"
    );
    assert_eq!(h.cmd("SADD s"), arity("sadd"));
    assert_eq!(h.cmd("SREM s"), arity("srem"));
    assert_eq!(h.cmd("SISMEMBER s"), arity("sismember"));
    assert_eq!(h.cmd("SMISMEMBER s"), arity("smismember"));
    assert_eq!(h.run(&["SADD", "bin", "a\r\nb", ""]), Reply::Int(2));
    assert_eq!(h.run(&["SISMEMBER", "bin", ""]), Reply::Int(1));
    // RESP3: SMEMBERS is a set.
    h.cmd("HELLO 3");
    assert!(matches!(h.cmd("SMEMBERS bin"), Reply::Set(v) if v.len() == 2));
    assert_eq!(h.cmd("SMEMBERS nokey"), Reply::Set(vec![]));
}

#[test]
fn intsets_sort_and_encodings_change_at_the_thresholds() {
    let mut h = Harness::new();
    h.cmd("SADD i 5 -3 10 0");
    assert_eq!(h.cmd("OBJECT ENCODING i"), Reply::bulk("intset"));
    assert_eq!(
        h.cmd("SMEMBERS i"),
        bulks(&["-3", "0", "5", "10"]),
        "ascending"
    );
    assert_eq!(
        h.cmd("SADD i 9223372036854775807 -9223372036854775808"),
        Reply::Int(2)
    );
    assert_eq!(h.cmd("OBJECT ENCODING i"), Reply::bulk("intset"));
    for member in ["010", "+1", "-0", "1.0", " 1"] {
        h.run(&["DEL", "n"]);
        h.run(&["SADD", "n", member]);
        assert_eq!(
            h.cmd("OBJECT ENCODING n"),
            Reply::bulk("hashtable"),
            "{member:?}"
        );
        assert_eq!(h.run(&["SISMEMBER", "n", member]), Reply::Int(1));
    }
    // A non-integer member leaves the intset (a small pack, reported as
    // Redis 7.0's hashtable), keeping the members.
    h.cmd("SADD i x");
    assert_eq!(h.cmd("OBJECT ENCODING i"), Reply::bulk("hashtable"));
    assert_eq!(h.cmd("SCARD i"), Reply::Int(7));
    assert_eq!(h.cmd("SISMEMBER i -9223372036854775808"), Reply::Int(1));
    assert_eq!(h.cmd("SISMEMBER i 10"), Reply::Int(1));
    h.cmd("SREM i x");
    assert_eq!(
        h.cmd("OBJECT ENCODING i"),
        Reply::bulk("hashtable"),
        "never back"
    );
    // 513 integers: past set-max-intset-entries.
    let mut args = vec!["SADD".to_string(), "big".to_string()];
    args.extend((0..513).map(|i| i.to_string()));
    assert_eq!(h.run(&args[..args.len() - 1]), Reply::Int(512));
    assert_eq!(h.cmd("OBJECT ENCODING big"), Reply::bulk("intset"));
    assert_eq!(h.run(&["SADD", "big", "512"]), Reply::Int(1));
    assert_eq!(h.cmd("OBJECT ENCODING big"), Reply::bulk("hashtable"));
    assert_eq!(sorted(&h.cmd("SMEMBERS big")).len(), 513);
    // 129 strings: past set-max-listpack-entries, a table.
    let mut args = vec!["SADD".to_string(), "t".to_string()];
    args.extend((0..129).map(|i| format!("m{i}")));
    assert_eq!(h.run(&args), Reply::Int(129));
    assert_eq!(
        sorted(&h.cmd("SMEMBERS t")),
        (0..129).map(|i| format!("m{i}")).collect()
    );
    // CONFIG SET moves the thresholds.
    assert_eq!(h.cmd("CONFIG SET set-max-intset-entries 2"), Reply::ok());
    assert_eq!(
        h.cmd("CONFIG GET set-max-intset-entries"),
        bulks(&["set-max-intset-entries", "2"])
    );
    h.cmd("SADD few 1 2");
    assert_eq!(h.cmd("OBJECT ENCODING few"), Reply::bulk("intset"));
    h.cmd("SADD few 3");
    assert_eq!(h.cmd("OBJECT ENCODING few"), Reply::bulk("hashtable"));
    assert_eq!(
        h.cmd("SMEMBERS few"),
        bulks(&["1", "2", "3"]),
        "a pack keeps the order"
    );
    assert_eq!(h.cmd("CONFIG SET set-max-listpack-entries 1"), Reply::ok());
    assert_eq!(h.cmd("CONFIG SET set-max-listpack-value 3"), Reply::ok());
    assert_eq!(
        h.cmd("CONFIG GET set-max-listpack-*"),
        bulks(&[
            "set-max-listpack-entries",
            "1",
            "set-max-listpack-value",
            "3"
        ])
    );
    h.cmd("SADD lv abcd");
    assert_eq!(h.cmd("SMEMBERS lv"), bulks(&["abcd"]));
    assert_eq!(h.cmd("CONFIG SET set-max-intset-entries -1"), err("ERR CONFIG SET failed (possibly related to argument 'set-max-intset-entries') - argument must be between 0 and 9223372036854775807 inclusive"));
}

#[test]
fn spop_replays_as_srem_or_del() {
    let mut h = Harness::new();
    h.cmd("SADD p 1 2 3 4 5");
    let (reply, effects) = h.run_effects("SPOP p");
    let one = common::text(&reply);
    assert!(["1", "2", "3", "4", "5"].contains(&one.as_str()));
    assert_eq!(
        effects,
        vec![vec!["SREM".to_string(), "p".into(), one.clone()]]
    );
    assert_eq!(h.run(&["SISMEMBER", "p", &one]), Reply::Int(0));
    let (reply, effects) = h.run_effects("SPOP p 2");
    let two = texts(&reply);
    assert_eq!(two.iter().collect::<BTreeSet<_>>().len(), 2);
    let mut want = vec!["SREM".to_string(), "p".into()];
    want.extend(two.iter().cloned());
    assert_eq!(effects, vec![want]);
    assert_eq!(h.cmd("SCARD p"), Reply::Int(2));
    let (reply, effects) = h.run_effects("SPOP p 10");
    assert_eq!(texts(&reply).len(), 2, "the rest");
    assert_eq!(
        effects,
        vec![vec!["DEL", "p"]],
        "all of them: DEL, as Redis"
    );
    assert_eq!(h.cmd("EXISTS p"), Reply::Int(0));
    h.cmd("SADD q a");
    let (_, effects) = h.run_effects("SPOP q");
    assert_eq!(effects, vec![vec!["SREM", "q", "a"]]);
    assert_eq!(h.cmd("EXISTS q"), Reply::Int(0));
    assert_eq!(h.cmd("SPOP nokey"), Reply::Nil);
    assert_eq!(h.cmd("SPOP nokey 2"), bulks(&[]));
    h.cmd("SADD p a b");
    let (reply, effects) = h.run_effects("SPOP p 0");
    assert_eq!(reply, bulks(&[]));
    assert!(effects.is_empty());
    let positive = "ERR value is out of range, must be positive";
    assert_eq!(h.cmd("SPOP p -1"), err(positive));
    assert_eq!(h.cmd("SPOP p x"), err(positive));
    assert_eq!(
        h.cmd("SPOP nokey -1"),
        err(positive),
        "count before the key"
    );
    assert_eq!(h.cmd("SPOP p 1 2"), err(SYNTAX));
    h.cmd("HELLO 3");
    assert!(matches!(h.cmd("SPOP p 1"), Reply::Set(v) if v.len() == 1));
    assert_eq!(h.cmd("SPOP nokey 1"), Reply::Set(vec![]));
}

#[test]
fn srandmember_picks() {
    let mut h = Harness::new();
    h.cmd("SADD r a b c d e");
    let all = strs(&["a", "b", "c", "d", "e"]);
    for _ in 0..20 {
        let one = common::text(&h.cmd("SRANDMEMBER r"));
        assert!(all.contains(&one), "{one}");
        let three = texts(&h.cmd("SRANDMEMBER r 3"));
        assert_eq!(
            three.iter().collect::<BTreeSet<_>>().len(),
            3,
            "distinct: {three:?}"
        );
        assert!(three.iter().all(|m| all.contains(m)));
    }
    assert_eq!(
        texts(&h.cmd("SRANDMEMBER r 10")),
        ["a", "b", "c", "d", "e"],
        "all, in order"
    );
    let many = texts(&h.cmd("SRANDMEMBER r -200"));
    assert_eq!(many.len(), 200);
    assert_eq!(
        many.iter().collect::<BTreeSet<_>>().len(),
        5,
        "repeats reach every member"
    );
    h.cmd("SADD ints 3 1 2");
    assert_eq!(texts(&h.cmd("SRANDMEMBER ints 3")), ["1", "2", "3"]);
    assert!(texts(&h.cmd("SRANDMEMBER ints -4"))
        .iter()
        .all(|m| ["1", "2", "3"].contains(&m.as_str())));
    // RESP3: an array, not a set.
    h.cmd("HELLO 3");
    assert!(matches!(h.cmd("SRANDMEMBER r 2"), Reply::Array(v) if v.len() == 2));
    assert!(matches!(h.cmd("SRANDMEMBER r 9"), Reply::Array(v) if v.len() == 5));
    h.cmd("HELLO 2");
    assert_eq!(h.cmd("SRANDMEMBER r 0"), Reply::Array(vec![]));
    assert_eq!(h.cmd("SRANDMEMBER nokey"), Reply::Nil);
    assert_eq!(h.cmd("SRANDMEMBER nokey 3"), Reply::Array(vec![]));
    assert_eq!(h.cmd("SRANDMEMBER r x"), err(NOT_INT));
    assert_eq!(h.cmd("SRANDMEMBER r 1 2"), err(SYNTAX));
    assert_eq!(
        h.cmd("SRANDMEMBER r -9223372036854775808"),
        err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
    );
    assert_eq!(
        h.cmd("SRANDMEMBER r -9223372036854775807"),
        err("ERR value is out of range"),
        "too big to build"
    );
    let (_, effects) = h.run_effects("SRANDMEMBER r -5");
    assert!(effects.is_empty());
}

#[test]
fn sscan_over_a_table_returns_every_member_present_throughout() {
    let mut h = Harness::new();
    h.cmd("SADD small c a b");
    assert_eq!(
        h.cmd("SSCAN small 0 MATCH [bc] COUNT 1"),
        Reply::Array(vec![Reply::bulk("0"), bulks(&["c", "b"])])
    );
    let mut args = vec!["SADD".to_string(), "t".to_string()];
    args.extend((0..1000).map(|i| format!("m{i}")));
    h.run(&args);
    let mut seen = BTreeSet::new();
    let mut cursor = "0".to_string();
    let mut calls = 0;
    loop {
        let Reply::Array(parts) = h.run(&["SSCAN", "t", &cursor, "COUNT", "50"]) else {
            panic!()
        };
        cursor = common::text(&parts[0]);
        seen.extend(texts(&parts[1]));
        calls += 1;
        // Members come and go between the calls; the first 1000 stay.
        h.run(&["SADD", "t", &format!("extra{calls}")]);
        h.run(&["SREM", "t", &format!("extra{}", calls / 2)]);
        if cursor == "0" {
            break;
        }
    }
    for i in 0..1000 {
        assert!(seen.contains(&format!("m{i}")), "m{i}");
    }
    assert!(calls > 10, "a table is walked in steps ({calls} calls)");
    let Reply::Array(parts) = h.cmd("SSCAN t 0 MATCH m99* COUNT 5000") else {
        panic!()
    };
    assert_eq!(sorted(&parts[1]).len(), 11);
    assert_eq!(h.cmd("SSCAN t x"), err("ERR invalid cursor"));
    assert_eq!(h.cmd("SSCAN t 0 COUNT 0"), err(SYNTAX));
    assert_eq!(h.cmd("SSCAN t 0 TYPE set"), err(SYNTAX));
    assert_eq!(h.cmd("SSCAN t 0 MATCH"), err(SYNTAX));
    assert_eq!(h.cmd("SSCAN t 0 COUNT x"), err(NOT_INT));
    assert_eq!(
        h.cmd("SSCAN nokey 0 BOGUS"),
        Reply::Array(vec![Reply::bulk("0"), Reply::Array(vec![])])
    );
}

#[test]
fn smove_replays_as_srem_and_sadd() {
    let mut h = Harness::new();
    h.cmd("SADD {m}a x y");
    let (reply, effects) = h.run_effects("SMOVE {m}a {m}b x");
    assert_eq!(reply, Reply::Int(1));
    assert_eq!(
        effects,
        vec![vec!["SREM", "{m}a", "x"], vec!["SADD", "{m}b", "x"]]
    );
    assert_eq!(h.cmd("SMEMBERS {m}b"), bulks(&["x"]));
    assert_eq!(h.cmd("SMOVE {m}a {m}b nope"), Reply::Int(0));
    h.cmd("SADD {m}b y");
    let (reply, effects) = h.run_effects("SMOVE {m}a {m}b y");
    assert_eq!(reply, Reply::Int(1));
    assert_eq!(effects, vec![vec!["SREM", "{m}a", "y"]], "already there");
    assert_eq!(h.cmd("EXISTS {m}a"), Reply::Int(0), "emptied, removed");
    let (reply, effects) = h.run_effects("SMOVE {m}b {m}b y");
    assert_eq!(reply, Reply::Int(1));
    assert!(effects.is_empty(), "one key: nothing changes");
    assert_eq!(h.cmd("SMOVE {m}b {m}b z"), Reply::Int(0));
    h.cmd("SET {m}s v");
    assert_eq!(
        h.cmd("SMOVE {m}nokey {m}s x"),
        Reply::Int(0),
        "source first"
    );
    assert_eq!(h.cmd("SMOVE {m}b {m}s x"), err(WRONGTYPE));
    assert_eq!(h.cmd("SMOVE {m}s {m}b x"), err(WRONGTYPE));
    assert_eq!(h.cmd("SMOVE {m}b {m}c"), arity("smove"));
    let a = h.key_on(0, "a");
    let b = h.key_on(1, "b");
    h.run(&["SADD", &a, "x"]);
    assert!(
        matches!(h.run(&["SMOVE", &a, &b, "x"]), Reply::Error(e) if e.starts_with("CROSSSLOT"))
    );
}

#[test]
fn inter_union_diff_and_their_stores() {
    let mut h = Harness::new();
    h.cmd("SADD {o}a 1 2 3 4");
    h.cmd("SADD {o}b 3 4 5 x");
    h.cmd("SADD {o}c 4 x");
    assert_eq!(sorted(&h.cmd("SINTER {o}a {o}b")), strs(&["3", "4"]));
    assert_eq!(sorted(&h.cmd("SINTER {o}a {o}b {o}c")), strs(&["4"]));
    assert_eq!(h.cmd("SINTER {o}a {o}nokey"), bulks(&[]));
    assert_eq!(sorted(&h.cmd("SINTER {o}b")), strs(&["3", "4", "5", "x"]));
    assert_eq!(
        sorted(&h.cmd("SUNION {o}a {o}b {o}nokey")),
        strs(&["1", "2", "3", "4", "5", "x"])
    );
    assert_eq!(
        h.cmd("SUNION {o}a {o}c"),
        bulks(&["1", "2", "3", "4", "x"]),
        "an intset, then x"
    );
    assert_eq!(h.cmd("SDIFF {o}a {o}b"), bulks(&["1", "2"]));
    assert_eq!(h.cmd("SDIFF {o}a {o}a"), bulks(&[]));
    assert_eq!(h.cmd("SDIFF {o}nokey {o}a"), bulks(&[]));
    assert_eq!(
        sorted(&h.cmd("SDIFF {o}b {o}nokey {o}c")),
        strs(&["3", "5"])
    );
    assert_eq!(h.cmd("SINTERCARD 2 {o}a {o}b"), Reply::Int(2));
    assert_eq!(h.cmd("SINTERCARD 2 {o}a {o}b LIMIT 1"), Reply::Int(1));
    assert_eq!(h.cmd("SINTERCARD 2 {o}a {o}b limit 0"), Reply::Int(2));
    assert_eq!(h.cmd("SINTERCARD 2 {o}a {o}nokey"), Reply::Int(0));
    assert_eq!(
        h.cmd("SINTERCARD 1 {o}a LIMIT 10 LIMIT 2"),
        Reply::Int(2),
        "the last LIMIT"
    );
    // The stores: DEL of the old destination, SADD of the result.
    h.cmd("SET {o}d old");
    h.cmd("EXPIRE {o}d 100");
    let (reply, effects) = h.run_effects("SINTERSTORE {o}d {o}a {o}b");
    assert_eq!(reply, Reply::Int(2));
    assert_eq!(
        effects,
        vec![vec!["DEL", "{o}d"], vec!["SADD", "{o}d", "3", "4"]]
    );
    assert_eq!(h.cmd("TTL {o}d"), Reply::Int(-1), "the TTL goes");
    assert_eq!(
        h.cmd("OBJECT ENCODING {o}d"),
        Reply::bulk("intset"),
        "built afresh"
    );
    let (reply, effects) = h.run_effects("SUNIONSTORE {o}e {o}c {o}a");
    assert_eq!(reply, Reply::Int(5));
    assert_eq!(effects.len(), 1);
    assert_eq!(
        sorted(&h.cmd("SMEMBERS {o}e")),
        strs(&["1", "2", "3", "4", "x"])
    );
    assert_eq!(h.cmd("SDIFFSTORE {o}f {o}a {o}b"), Reply::Int(2));
    assert_eq!(h.cmd("SMEMBERS {o}f"), bulks(&["1", "2"]));
    let (reply, effects) = h.run_effects("SDIFFSTORE {o}f {o}a {o}a");
    assert_eq!(reply, Reply::Int(0));
    assert_eq!(
        effects,
        vec![vec!["DEL", "{o}f"]],
        "an empty result removes"
    );
    assert_eq!(h.cmd("EXISTS {o}f"), Reply::Int(0));
    assert_eq!(h.cmd("SINTERSTORE {o}f {o}nokey {o}a"), Reply::Int(0));
    assert_eq!(
        h.cmd("SUNIONSTORE {o}a {o}a {o}b"),
        Reply::Int(6),
        "a source as destination"
    );
    // Errors and their order.
    h.cmd("SET {o}s v");
    for line in [
        "SINTER {o}nokey {o}s",
        "SINTER {o}s {o}nokey",
        "SUNION {o}a {o}s",
        "SDIFF {o}nokey {o}s",
        "SINTERCARD 2 {o}nokey {o}s",
        "SINTERSTORE {o}d {o}a {o}s",
        "SUNIONSTORE {o}d {o}s",
        "SDIFFSTORE {o}d {o}a {o}s",
    ] {
        assert_eq!(h.cmd(line), err(WRONGTYPE), "{line}");
    }
    assert_eq!(
        h.cmd("SINTERSTORE {o}s {o}a"),
        Reply::Int(6),
        "the destination's type is no matter"
    );
    let numkeys = "ERR numkeys should be greater than 0";
    assert_eq!(h.cmd("SINTERCARD 0 {o}a"), err(numkeys));
    assert_eq!(h.cmd("SINTERCARD x {o}a"), err(numkeys));
    assert_eq!(
        h.cmd("SINTERCARD 3 {o}a {o}b"),
        err("ERR Number of keys can't be greater than number of args")
    );
    let negative = "ERR LIMIT can't be negative";
    assert_eq!(h.cmd("SINTERCARD 1 {o}a LIMIT -1"), err(negative));
    assert_eq!(h.cmd("SINTERCARD 1 {o}a LIMIT x"), err(negative));
    assert_eq!(h.cmd("SINTERCARD 1 {o}a LIMIT"), err(SYNTAX));
    assert_eq!(h.cmd("SINTERCARD 1 {o}a BOGUS 1"), err(SYNTAX));
    assert_eq!(h.cmd("SINTERCARD 1"), arity("sintercard"));
    assert_eq!(h.cmd("SINTER"), arity("sinter"));
    assert_eq!(h.cmd("SDIFFSTORE {o}d"), arity("sdiffstore"));
    // RESP3: the replies are sets.
    h.cmd("HELLO 3");
    assert!(matches!(h.cmd("SINTER {o}b {o}c"), Reply::Set(v) if v.len() == 2));
    assert!(matches!(h.cmd("SUNION {o}b"), Reply::Set(v) if v.len() == 4));
    assert!(matches!(h.cmd("SDIFF {o}b {o}c"), Reply::Set(v) if v.len() == 2));
    h.cmd("HELLO 2");
    // Keys on two shards: CROSSSLOT, as LMOVE answers.
    let a = h.key_on(0, "a");
    let b = h.key_on(1, "b");
    for cmd in ["SINTER", "SUNION", "SDIFF", "SUNIONSTORE"] {
        assert!(
            matches!(h.run(&[cmd, &a, &b]), Reply::Error(e) if e.starts_with("CROSSSLOT")),
            "{cmd}"
        );
    }
    assert!(
        matches!(h.run(&["SINTERCARD", "2", &a, &b]), Reply::Error(e) if e.starts_with("CROSSSLOT Keys in request don't hash to the same slot (here"))
    );
    h.run(&["SADD", &a, "1"]);
    assert_eq!(
        h.run(&["SINTERCARD", "1", &a, "LIMIT", "5"]),
        Reply::Int(1),
        "LIMIT is no key"
    );
}

#[test]
fn wrong_types_both_ways_and_generic_key_commands() {
    let mut h = Harness::new();
    h.cmd("SET s v");
    for line in [
        "SADD s a",
        "SREM s a",
        "SISMEMBER s a",
        "SMISMEMBER s a",
        "SMEMBERS s",
        "SCARD s",
        "SPOP s",
        "SPOP s 2",
        "SRANDMEMBER s",
        "SRANDMEMBER s 2",
        "SSCAN s 0",
    ] {
        assert_eq!(h.cmd(line), err(WRONGTYPE), "{line}");
    }
    h.cmd("SADD ss a");
    for line in ["GET ss", "LPUSH ss x", "HGET ss x", "INCR ss"] {
        assert_eq!(h.cmd(line), err(WRONGTYPE), "{line}");
    }
    assert_eq!(h.cmd("TYPE ss"), Reply::simple("set"));
    let mut found = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let Reply::Array(parts) = h.run(&["SCAN", &cursor, "TYPE", "set", "COUNT", "16384"]) else {
            panic!()
        };
        cursor = common::text(&parts[0]);
        found.extend(texts(&parts[1]));
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(found, ["ss"]);
    assert!(matches!(h.cmd("MEMORY USAGE ss"), Reply::Int(n) if n > 0));
    assert_eq!(h.cmd("RENAME ss {x}r"), Reply::ok());
    assert_eq!(h.cmd("SMEMBERS {x}r"), bulks(&["a"]));
    assert_eq!(h.cmd("COPY {x}r {x}c"), Reply::Int(1));
    h.cmd("SADD {x}c b");
    assert_eq!(h.cmd("SCARD {x}r"), Reply::Int(1), "a copy is its own");
    assert_eq!(h.cmd("EXPIRE {x}c 5"), Reply::Int(1));
    assert_eq!(h.cmd("SADD {x}c d"), Reply::Int(1));
    assert_eq!(h.cmd("TTL {x}c"), Reply::Int(5), "a write keeps the TTL");
    h.clock().advance_ms(5000);
    assert_eq!(h.cmd("SCARD {x}c"), Reply::Int(0));
    assert_eq!(h.cmd("SADD {x}c f"), Reply::Int(1));
    assert_eq!(h.cmd("DEL {x}c"), Reply::Int(1));
    assert_eq!(h.cmd("EXISTS {x}c"), Reply::Int(0));
}
