//! The hashes family in process: every command's replies and effects (HSET
//! of the resulting values), the listpack's insertion order, the change to
//! a hash table past the thresholds (and CONFIG SET of them), HRANDFIELD's
//! picks, HSCAN's cursor over a table, Redis 7.0's errors and their order,
//! WRONGTYPE both ways and the generic key commands on hashes.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{arity, bulks, err, NOT_INT, SYNTAX, WRONGTYPE};
use leasehold_protocol::Reply;
use leasehold_server::harness::Harness;

/// The texts of an array of bulk strings.
fn texts(r: &Reply) -> Vec<String> {
    let Reply::Array(items) = r else {
        panic!("not an array: {r:?}")
    };
    items.iter().map(common::text).collect()
}

#[test]
fn hset_hget_and_their_effects() {
    let mut h = Harness::new();
    let (reply, effects) = h.run_effects("HSET u name ada lang en");
    assert_eq!(reply, Reply::Int(2));
    assert_eq!(
        effects,
        vec![vec!["HSET", "u", "name", "ada", "lang", "en"]]
    );
    assert_eq!(
        h.cmd("HSET u lang fr age 36"),
        Reply::Int(1),
        "one new field"
    );
    assert_eq!(h.cmd("HGET u lang"), Reply::bulk("fr"));
    assert_eq!(h.cmd("HGET u nope"), Reply::Nil);
    assert_eq!(h.cmd("HGET nokey f"), Reply::Nil);
    let (reply, effects) = h.run_effects("HMSET u x 1");
    assert_eq!(reply, Reply::ok());
    assert_eq!(effects, vec![vec!["HSET", "u", "x", "1"]]);
    assert_eq!(
        h.cmd("HGETALL u"),
        bulks(&["name", "ada", "lang", "fr", "age", "36", "x", "1"])
    );
    assert_eq!(
        h.cmd("HMGET u name nope x"),
        Reply::Array(vec![Reply::bulk("ada"), Reply::Nil, Reply::bulk("1")])
    );
    assert_eq!(
        h.cmd("HMGET nokey a b"),
        Reply::Array(vec![Reply::Nil, Reply::Nil])
    );
    assert_eq!(h.cmd("HSET u a"), arity("hset"));
    assert_eq!(h.cmd("HSET u a b c"), arity("hset"));
    assert_eq!(h.cmd("HMSET u a b c"), arity("hmset"));
    assert_eq!(h.cmd("EXISTS"), arity("exists"));
    assert_eq!(h.run(&["HSET", "bin", "a\r\nb", ""]), Reply::Int(1));
    assert_eq!(h.run(&["HGET", "bin", "a\r\nb"]), Reply::bulk(""));
    assert_eq!(h.run(&["HSTRLEN", "bin", "a\r\nb"]), Reply::Int(0));
}

#[test]
fn hsetnx_hdel_hexists_hlen_hstrlen() {
    let mut h = Harness::new();
    let (reply, effects) = h.run_effects("HSETNX u a 1");
    assert_eq!(reply, Reply::Int(1));
    assert_eq!(effects, vec![vec!["HSET", "u", "a", "1"]]);
    assert_eq!(h.run_effects("HSETNX u a 2"), (Reply::Int(0), vec![]));
    assert_eq!(h.cmd("HGET u a"), Reply::bulk("1"));
    h.cmd("HSET u b 22 c 333");
    assert_eq!(h.cmd("HLEN u"), Reply::Int(3));
    assert_eq!(h.cmd("HLEN nokey"), Reply::Int(0));
    assert_eq!(h.cmd("HEXISTS u b"), Reply::Int(1));
    assert_eq!(h.cmd("HEXISTS u z"), Reply::Int(0));
    assert_eq!(h.cmd("HEXISTS nokey z"), Reply::Int(0));
    assert_eq!(h.cmd("HSTRLEN u c"), Reply::Int(3));
    assert_eq!(h.cmd("HSTRLEN u z"), Reply::Int(0));
    let (reply, effects) = h.run_effects("HDEL u a z");
    assert_eq!(reply, Reply::Int(1));
    assert_eq!(effects, vec![vec!["HDEL", "u", "a", "z"]]);
    assert_eq!(h.run_effects("HDEL u z"), (Reply::Int(0), vec![]));
    assert_eq!(h.cmd("HDEL nokey a"), Reply::Int(0));
    assert_eq!(h.cmd("HDEL u b c"), Reply::Int(2));
    assert_eq!(h.cmd("EXISTS u"), Reply::Int(0), "the emptied hash is gone");
}

#[test]
fn increments_replay_as_their_results() {
    let mut h = Harness::new();
    let (reply, effects) = h.run_effects("HINCRBY c n 5");
    assert_eq!(reply, Reply::Int(5));
    assert_eq!(effects, vec![vec!["HSET", "c", "n", "5"]]);
    assert_eq!(h.cmd("HINCRBY c n -7"), Reply::Int(-2));
    assert_eq!(h.cmd("HINCRBY c n x"), err(NOT_INT));
    assert_eq!(
        h.cmd("HSET c big 9223372036854775807 s abc f 1.5"),
        Reply::Int(3)
    );
    assert_eq!(
        h.cmd("HINCRBY c big 1"),
        err("ERR increment or decrement would overflow")
    );
    assert_eq!(
        h.cmd("HINCRBY c s 1"),
        err("ERR hash value is not an integer")
    );
    assert_eq!(
        h.cmd("HINCRBY c f 1"),
        err("ERR hash value is not an integer")
    );
    let (reply, effects) = h.run_effects("HINCRBYFLOAT c f 0.1");
    assert_eq!(reply, Reply::bulk("1.6"));
    assert_eq!(effects, vec![vec!["HSET", "c", "f", "1.6"]]);
    assert_eq!(h.cmd("HINCRBYFLOAT c g 3.0"), Reply::bulk("3"));
    assert_eq!(
        h.cmd("HINCRBYFLOAT c n 1e20"),
        Reply::bulk("100000000000000000000")
    );
    assert_eq!(
        h.cmd("HINCRBYFLOAT c s 1"),
        err("ERR hash value is not a float")
    );
    assert_eq!(
        h.cmd("HINCRBYFLOAT c f x"),
        err("ERR value is not a valid float")
    );
    assert_eq!(
        h.cmd("HINCRBYFLOAT c f inf"),
        err("ERR value is NaN or Infinity")
    );
    assert_eq!(
        h.cmd("HINCRBYFLOAT nokey f inf"),
        err("ERR value is NaN or Infinity")
    );
    assert_eq!(
        h.cmd("EXISTS nokey"),
        Reply::Int(0),
        "a refused increment creates nothing"
    );
    // Added in long double, as Redis does: past a double's range is
    // fine, past the long double's (about 1.19e4932) is not.
    h.cmd("HSET c big 1.7e308");
    let Reply::Bulk(sum) = h.cmd("HINCRBYFLOAT c big 1.7e308") else {
        panic!("a bulk string");
    };
    assert!(
        sum.starts_with(b"34000000000000000000627355605039519"),
        "{sum:?}"
    );
    assert_eq!(sum.len(), 309);
    h.cmd("HSET c huge 1e4932");
    assert_eq!(
        h.cmd("HINCRBYFLOAT c huge 1e4932"),
        err("ERR increment would produce NaN or Infinity")
    );
    assert_eq!(h.cmd("HGET c huge"), Reply::bulk("1e4932"));
}

#[test]
fn a_listpack_keeps_insertion_order_until_a_threshold() {
    let mut h = Harness::new();
    h.cmd("HSET o c 1 a 2 b 3");
    h.cmd("HSET o a 22");
    h.cmd("HDEL o c");
    h.cmd("HSET o c 4");
    assert_eq!(h.cmd("HKEYS o"), bulks(&["a", "b", "c"]));
    assert_eq!(h.cmd("HVALS o"), bulks(&["22", "3", "4"]));
    assert_eq!(
        h.cmd("HSCAN o 0"),
        Reply::Array(vec![
            Reply::bulk("0"),
            bulks(&["a", "22", "b", "3", "c", "4"])
        ])
    );
    assert_eq!(
        h.cmd("HSCAN o 0 MATCH [bc] COUNT 1"),
        Reply::Array(vec![Reply::bulk("0"), bulks(&["b", "3", "c", "4"])])
    );
    // 129 fields: a table, whose fields all remain.
    let mut args = vec!["HSET".to_string(), "big".to_string()];
    for i in 0..129 {
        args.extend([format!("f{i}"), format!("v{i}")]);
    }
    assert_eq!(h.run(&args), Reply::Int(129));
    let all: BTreeSet<String> = texts(&h.cmd("HKEYS big")).into_iter().collect();
    assert_eq!(all, (0..129).map(|i| format!("f{i}")).collect());
    // A long value converts too; CONFIG SET moves the thresholds.
    assert_eq!(h.cmd("CONFIG SET hash-max-listpack-value 3"), Reply::ok());
    assert_eq!(
        h.cmd("CONFIG GET hash-max-ziplist-value"),
        bulks(&["hash-max-ziplist-value", "3"])
    );
    h.cmd("HSET lv a 1234");
    assert_eq!(h.cmd("HGET lv a"), Reply::bulk("1234"));
    assert_eq!(h.cmd("CONFIG SET hash-max-listpack-entries 1"), Reply::ok());
    h.cmd("HSET two a 1 b 2");
    assert_eq!(texts(&h.cmd("HGETALL two")).len(), 4);
    assert_eq!(h.cmd("CONFIG SET hash-max-listpack-entries -1"), err("ERR CONFIG SET failed (possibly related to argument 'hash-max-listpack-entries') - argument must be between 0 and 9223372036854775807 inclusive"));
}

#[test]
fn hscan_over_a_table_returns_every_field_present_throughout() {
    let mut h = Harness::new();
    let mut args = vec!["HSET".to_string(), "t".to_string()];
    for i in 0..1000 {
        args.extend([format!("f{i}"), format!("v{i}")]);
    }
    h.run(&args);
    let mut seen = BTreeMap::new();
    let mut cursor = "0".to_string();
    let mut calls = 0;
    loop {
        let Reply::Array(parts) = h.run(&["HSCAN", "t", &cursor, "COUNT", "50"]) else {
            panic!()
        };
        cursor = common::text(&parts[0]);
        let pairs = texts(&parts[1]);
        for p in pairs.chunks(2) {
            seen.insert(p[0].clone(), p[1].clone());
        }
        calls += 1;
        // Fields come and go between the calls; the first 1000 stay.
        h.run(&["HSET", "t", &format!("extra{calls}"), "x"]);
        h.run(&["HDEL", "t", &format!("extra{}", calls / 2)]);
        if cursor == "0" {
            break;
        }
    }
    for i in 0..1000 {
        assert_eq!(seen.get(&format!("f{i}")), Some(&format!("v{i}")), "f{i}");
    }
    assert!(calls > 10, "a table is walked in steps ({calls} calls)");
    let Reply::Array(parts) = h.cmd("HSCAN t 0 MATCH f99* COUNT 5000") else {
        panic!()
    };
    let matched: BTreeSet<String> = texts(&parts[1]).into_iter().step_by(2).collect();
    assert_eq!(
        matched,
        ["f99", "f990", "f991", "f992", "f993", "f994", "f995", "f996", "f997", "f998", "f999"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
    assert_eq!(h.cmd("HSCAN t x"), err("ERR invalid cursor"));
    assert_eq!(h.cmd("HSCAN t 0 COUNT 0"), err(SYNTAX));
    assert_eq!(h.cmd("HSCAN t 0 TYPE hash"), err(SYNTAX));
    assert_eq!(h.cmd("HSCAN t 0 COUNT x"), err(NOT_INT));
    assert_eq!(
        h.cmd("HSCAN nokey 0 BOGUS"),
        Reply::Array(vec![Reply::bulk("0"), Reply::Array(vec![])])
    );
}

#[test]
fn hrandfield_picks() {
    let mut h = Harness::new();
    h.cmd("HSET r a 1 b 2 c 3 d 4 e 5");
    let fields: BTreeSet<String> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for _ in 0..20 {
        let one = common::text(&h.cmd("HRANDFIELD r"));
        assert!(fields.contains(&one), "{one}");
        let three = texts(&h.cmd("HRANDFIELD r 3"));
        assert_eq!(
            three.iter().collect::<BTreeSet<_>>().len(),
            3,
            "distinct: {three:?}"
        );
        assert!(three.iter().all(|f| fields.contains(f)));
    }
    assert_eq!(
        texts(&h.cmd("HRANDFIELD r 10")),
        ["a", "b", "c", "d", "e"],
        "all, in order"
    );
    assert_eq!(
        texts(&h.cmd("HRANDFIELD r 5 WITHVALUES")),
        ["a", "1", "b", "2", "c", "3", "d", "4", "e", "5"]
    );
    let many = texts(&h.cmd("HRANDFIELD r -200"));
    assert_eq!(many.len(), 200);
    assert_eq!(
        many.iter().collect::<BTreeSet<_>>().len(),
        5,
        "repeats reach every field"
    );
    let pairs = texts(&h.cmd("HRANDFIELD r -3 withvalues"));
    assert_eq!(pairs.len(), 6);
    for p in pairs.chunks(2) {
        assert_eq!(p[1], (p[0].as_bytes()[0] - b'a' + 1).to_string(), "{p:?}");
    }
    // RESP3: the pairs are arrays of two.
    h.cmd("HELLO 3");
    let Reply::Array(nested) = h.cmd("HRANDFIELD r 2 WITHVALUES") else {
        panic!()
    };
    assert_eq!(nested.len(), 2);
    assert!(nested
        .iter()
        .all(|p| matches!(p, Reply::Array(v) if v.len() == 2)));
    h.cmd("HELLO 2");
    assert_eq!(h.cmd("HRANDFIELD r 0"), Reply::Array(vec![]));
    assert_eq!(h.cmd("HRANDFIELD nokey"), Reply::Nil);
    assert_eq!(h.cmd("HRANDFIELD nokey 3"), Reply::Array(vec![]));
    assert_eq!(h.cmd("HRANDFIELD r x"), err(NOT_INT));
    assert_eq!(h.cmd("HRANDFIELD r 1 bogus"), err(SYNTAX));
    assert_eq!(h.cmd("HRANDFIELD r 1 WITHVALUES x"), err(SYNTAX));
    assert_eq!(
        h.cmd("HRANDFIELD r -9223372036854775808"),
        err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
    );
    assert_eq!(
        h.cmd("HRANDFIELD nokey -4611686018427387904 WITHVALUES"),
        err("ERR value is out of range")
    );
    assert_eq!(
        h.cmd("HRANDFIELD r -9223372036854775807"),
        err("ERR value is out of range"),
        "too big to build"
    );
    let (_, effects) = h.run_effects("HRANDFIELD r -5");
    assert!(effects.is_empty());
}

#[test]
fn wrong_types_both_ways_and_generic_key_commands() {
    let mut h = Harness::new();
    h.cmd("SET s v");
    for line in [
        "HSET s a b",
        "HGET s a",
        "HMGET s a",
        "HMSET s a b",
        "HSETNX s a b",
        "HINCRBY s a 1",
        "HINCRBYFLOAT s a 1",
        "HDEL s a",
        "HEXISTS s a",
        "HLEN s",
        "HKEYS s",
        "HVALS s",
        "HGETALL s",
        "HSTRLEN s a",
        "HRANDFIELD s",
        "HRANDFIELD s 2",
        "HSCAN s 0",
        "HSCAN s 0 BOGUS",
    ] {
        assert_eq!(h.cmd(line), err(WRONGTYPE), "{line}");
    }
    assert_eq!(
        h.cmd("HINCRBY s a x"),
        err(NOT_INT),
        "arguments before the type"
    );
    assert_eq!(h.cmd("HSCAN s x"), err("ERR invalid cursor"));
    h.cmd("HSET hh f v");
    for line in ["GET hh", "LPUSH hh x", "LLEN hh", "INCR hh"] {
        assert_eq!(h.cmd(line), err(WRONGTYPE), "{line}");
    }
    assert_eq!(h.cmd("TYPE hh"), Reply::simple("hash"));
    let Reply::Array(parts) = h.cmd("SCAN 0 TYPE hash COUNT 16384") else {
        panic!()
    };
    let Reply::Array(parts2) = h.run(&[
        "SCAN",
        &common::text(&parts[0]),
        "TYPE",
        "hash",
        "COUNT",
        "16384",
    ]) else {
        panic!()
    };
    let mut found = texts(&parts[1]);
    found.extend(texts(&parts2[1]));
    assert_eq!(found, ["hh"]);
    assert_eq!(h.cmd("EXPIRE hh 5"), Reply::Int(1));
    assert_eq!(h.cmd("HSET hh g w"), Reply::Int(1));
    assert_eq!(h.cmd("TTL hh"), Reply::Int(5), "a write keeps the TTL");
    h.clock().advance_ms(5000);
    assert_eq!(h.cmd("HLEN hh"), Reply::Int(0));
    assert_eq!(h.cmd("HSET hh f v"), Reply::Int(1));
    assert_eq!(h.cmd("DEL hh"), Reply::Int(1));
    assert_eq!(h.cmd("EXISTS hh"), Reply::Int(0));
}
