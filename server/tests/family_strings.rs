//! The strings family in process: GET, SET and its options, SETNX, SETEX,
//! PSETEX, GETSET, GETDEL, GETEX, MGET, MSET, the INCR/DECR counters,
//! INCRBYFLOAT, APPEND, STRLEN. TTLs on the manual clock, the effect each
//! write emits (absolute Unix-ms deadlines), MGET/MSET split over both
//! shards, and Redis 7's errors.

mod common;

use common::{arity, bulks, err, ints, NOT_INT, SYNTAX, WRONGTYPE};
use leasehold_protocol::Reply;
use leasehold_server::harness::Harness;

#[test]
fn set_and_get_with_their_effects() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("GET k"), Reply::Nil);
    let (reply, effects) = h.run_effects(&["SET", "k", "a b"]);
    assert_eq!(reply, Reply::ok());
    assert_eq!(effects, vec![vec!["SET", "k", "a b"]]);
    assert_eq!(h.cmd("GET k"), Reply::bulk("a b"));
    let (reply, effects) = h.run_effects("SET k v EX 10");
    assert_eq!(reply, Reply::ok());
    assert_eq!(
        effects,
        vec![vec!["SET", "k", "v", "PXAT", "1700000010000"]]
    );
    assert_eq!(h.cmd("GET"), arity("get"));
    assert_eq!(h.cmd("SET k"), arity("set"));
}

#[test]
fn set_options() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("SET k v NX"), Reply::ok());
    assert_eq!(h.run_effects("SET k w NX"), (Reply::Nil, vec![]));
    assert_eq!(h.cmd("SET other v XX"), Reply::Nil);
    assert_eq!(h.cmd("SET k w XX GET"), Reply::bulk("v"));
    assert_eq!(h.cmd("SET new v GET"), Reply::Nil);
    assert_eq!(
        h.cmd("SET k v2 NX GET"),
        Reply::bulk("w"),
        "NX refused, old value"
    );
    assert_eq!(h.cmd("GET k"), Reply::bulk("w"));
    assert_eq!(h.cmd("SET k v PX 1500"), Reply::ok());
    assert_eq!(h.cmd("PTTL k"), Reply::Int(1500));
    assert_eq!(h.cmd("SET k v2 KEEPTTL"), Reply::ok());
    assert_eq!(h.cmd("PTTL k"), Reply::Int(1500));
    assert_eq!(h.cmd("SET k v3"), Reply::ok());
    assert_eq!(h.cmd("PTTL k"), Reply::Int(-1), "SET clears the TTL");
    assert_eq!(h.cmd("SET k v EXAT 1700000100"), Reply::ok());
    assert_eq!(h.cmd("TTL k"), Reply::Int(100));
    assert_eq!(h.cmd("SET k v PXAT 1700000000250"), Reply::ok());
    assert_eq!(h.cmd("PTTL k"), Reply::Int(250));
    assert_eq!(h.cmd("SET k v EX 5 EX 7"), Reply::ok(), "the last one wins");
    assert_eq!(h.cmd("TTL k"), Reply::Int(7));
}

#[test]
fn set_errors() {
    let mut h = Harness::new();
    let invalid = err("ERR invalid expire time in 'set' command");
    assert_eq!(h.cmd("SET k v EX 0"), invalid);
    assert_eq!(h.cmd("SET k v PX -5"), invalid);
    assert_eq!(h.cmd("SET k v EX 9223372036854775807"), invalid);
    assert_eq!(h.cmd("SET k v EX x"), err(NOT_INT));
    for line in [
        "SET k v NX XX",
        "SET k v EX 10 PX 100",
        "SET k v EX",
        "SET k v KEEPTTL EX 1",
        "SET k v EX 1 KEEPTTL",
        "SET k v FOREVER",
    ] {
        assert_eq!(h.cmd(line), err(SYNTAX), "{line}");
    }
    assert_eq!(h.cmd("EXISTS k"), Reply::Int(0), "no error wrote anything");
    assert_eq!(h.cmd("TOKENLEASE rl 10 1 1000 1"), ints(&[1, 9, 0, 1000]));
    assert_eq!(h.cmd("GET rl"), err(WRONGTYPE));
    assert_eq!(h.cmd("SET rl v GET"), err(WRONGTYPE));
    assert_eq!(
        h.cmd("TYPE rl"),
        Reply::simple("tokenbucket"),
        "SET GET refused"
    );
    assert_eq!(h.cmd("SET rl v"), Reply::ok(), "SET replaces any type");
}

#[test]
fn setnx_setex_psetex() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("SETNX k v"), Reply::Int(1));
    assert_eq!(h.run_effects("SETNX k w"), (Reply::Int(0), vec![]));
    let (reply, effects) = h.run_effects("SETEX k 10 v2");
    assert_eq!(reply, Reply::ok());
    assert_eq!(
        effects,
        vec![vec!["SET", "k", "v2", "PXAT", "1700000010000"]]
    );
    assert_eq!(h.cmd("TTL k"), Reply::Int(10));
    assert_eq!(h.cmd("PSETEX k 1500 v3"), Reply::ok());
    assert_eq!(h.cmd("PTTL k"), Reply::Int(1500));
    assert_eq!(
        h.cmd("SETEX k 0 v"),
        err("ERR invalid expire time in 'setex' command")
    );
    assert_eq!(
        h.cmd("PSETEX k -1 v"),
        err("ERR invalid expire time in 'psetex' command")
    );
    assert_eq!(h.cmd("SETEX k x v"), err(NOT_INT));
    assert_eq!(h.cmd("SETNX k"), arity("setnx"));
    assert_eq!(h.cmd("SETEX k 1"), arity("setex"));
    assert_eq!(h.cmd("PSETEX k 1"), arity("psetex"));
    h.clock().advance_ms(1500);
    assert_eq!(h.cmd("GET k"), Reply::Nil);
}

#[test]
fn getset_getdel_getex() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("GETSET k v"), Reply::Nil);
    assert_eq!(h.cmd("EXPIRE k 10"), Reply::Int(1));
    assert_eq!(h.cmd("GETSET k w"), Reply::bulk("v"));
    assert_eq!(h.cmd("TTL k"), Reply::Int(-1), "GETSET clears the TTL");
    assert_eq!(h.cmd("GETEX k"), Reply::bulk("w"));
    let (reply, effects) = h.run_effects("GETEX k EX 100");
    assert_eq!(reply, Reply::bulk("w"));
    assert_eq!(effects, vec![vec!["PEXPIREAT", "k", "1700000100000"]]);
    assert_eq!(h.cmd("GETEX k PX 500"), Reply::bulk("w"));
    assert_eq!(h.cmd("PTTL k"), Reply::Int(500));
    assert_eq!(h.cmd("GETEX k PERSIST"), Reply::bulk("w"));
    assert_eq!(h.cmd("TTL k"), Reply::Int(-1));
    assert_eq!(h.cmd("GETEX k EXAT 1700000050"), Reply::bulk("w"));
    assert_eq!(h.cmd("TTL k"), Reply::Int(50));
    assert_eq!(
        h.cmd("GETEX k EX 0"),
        err("ERR invalid expire time in 'getex' command")
    );
    assert_eq!(h.cmd("GETEX k PERSIST EX 1"), err(SYNTAX));
    assert_eq!(h.cmd("GETEX k EX"), err(SYNTAX));
    assert_eq!(h.cmd("GETEX missing EX 10"), Reply::Nil);
    // A deadline already past deletes the key after reading it.
    assert_eq!(h.cmd("GETEX k PXAT 1"), Reply::bulk("w"));
    assert_eq!(h.cmd("EXISTS k"), Reply::Int(0));
    assert_eq!(h.cmd("SET k v"), Reply::ok());
    let (reply, effects) = h.run_effects("GETDEL k");
    assert_eq!(reply, Reply::bulk("v"));
    assert_eq!(effects, vec![vec!["DEL", "k"]]);
    assert_eq!(h.run_effects("GETDEL k"), (Reply::Nil, vec![]));
    assert_eq!(h.cmd("GETSET k"), arity("getset"));
    assert_eq!(h.cmd("GETDEL"), arity("getdel"));
    assert_eq!(h.cmd("GETEX"), arity("getex"));
}

#[test]
fn mset_and_mget_split_over_the_shards() {
    let mut h = Harness::new();
    let (a, b, c) = (h.key_on(0, "a"), h.key_on(1, "b"), h.key_on(0, "c"));
    let (reply, effects) = h.run_effects(&["MSET", &b, "2", &a, "1", &c, "3", &b, "4"]);
    assert_eq!(reply, Reply::ok());
    assert_eq!(
        effects,
        vec![
            vec!["SET", a.as_str(), "1"],
            vec!["SET", c.as_str(), "3"],
            vec!["SET", b.as_str(), "2"],
            vec!["SET", b.as_str(), "4"],
        ]
    );
    assert_eq!(h.cmd("SLIDINGWINDOW sw 10 1000"), ints(&[1, 1, 9, 0]));
    assert_eq!(
        h.run(&["MGET", &c, &b, "missing", &a, "sw", &b]),
        Reply::Array(vec![
            Reply::bulk("3"),
            Reply::bulk("4"),
            Reply::Nil,
            Reply::bulk("1"),
            Reply::Nil,
            Reply::bulk("4"),
        ]),
        "in key order; nil for another type"
    );
    // A key without its value fails the whole command on every shard.
    assert_eq!(h.run(&["MSET", "x1", "1", &b]), arity("mset"));
    assert_eq!(h.run(&["MSET", &a, "9", &b, "9", &c]), arity("mset"));
    assert_eq!(h.run(&["MGET", &a, &b]), bulks(&["1", "4"]));
    assert_eq!(h.cmd("MSET a"), arity("mset"));
    assert_eq!(h.cmd("MGET"), arity("mget"));
}

#[test]
fn counters() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("INCR n"), Reply::Int(1));
    assert_eq!(h.cmd("INCRBY n 41"), Reply::Int(42));
    assert_eq!(h.cmd("DECR n"), Reply::Int(41));
    let (reply, effects) = h.run_effects("DECRBY n 50");
    assert_eq!(reply, Reply::Int(-9));
    assert_eq!(effects, vec![vec!["SET", "n", "-9"]]);
    assert_eq!(h.cmd("GET n"), Reply::bulk("-9"));
    assert_eq!(h.cmd("EXPIRE n 100"), Reply::Int(1));
    assert_eq!(h.cmd("INCR n"), Reply::Int(-8));
    assert_eq!(h.cmd("TTL n"), Reply::Int(100), "counters keep their TTL");
    assert_eq!(h.cmd("SET s 12"), Reply::ok());
    assert_eq!(h.cmd("INCR s"), Reply::Int(13));
    for bad in ["abc", " 1", "01", "1.5", ""] {
        assert_eq!(h.run(&["SET", "s", bad]), Reply::ok());
        assert_eq!(h.cmd("INCR s"), err(NOT_INT), "{bad:?}");
    }
    assert_eq!(h.cmd("INCRBY n x"), err(NOT_INT));
    assert_eq!(h.cmd("SET max 9223372036854775807"), Reply::ok());
    assert_eq!(
        h.cmd("INCR max"),
        err("ERR increment or decrement would overflow")
    );
    assert_eq!(
        h.cmd("DECRBY n -9223372036854775808"),
        err("ERR decrement would overflow")
    );
    assert_eq!(h.cmd("GET max"), Reply::bulk("9223372036854775807"));
    assert_eq!(h.cmd("TOKENLEASE rl 10 1 1000 1"), ints(&[1, 9, 0, 1000]));
    assert_eq!(h.cmd("INCR rl"), err(WRONGTYPE));
    assert_eq!(h.cmd("INCR"), arity("incr"));
    assert_eq!(h.cmd("DECR"), arity("decr"));
    assert_eq!(h.cmd("INCRBY n"), arity("incrby"));
    assert_eq!(h.cmd("DECRBY n"), arity("decrby"));
}

#[test]
fn incrbyfloat_never_answers_minus_zero_and_refuses_nul_bytes() {
    let mut h = Harness::new();
    // Redis 7.0.15 answers "0" for each of these sums.
    for (start, by) in [
        ("0", "-0"),
        ("0", "-0.0"),
        ("-0.0", "-0"),
        ("-1", "1"),
        ("1e-20", "-1e-20"),
        ("-1e-30", "0"),
    ] {
        assert_eq!(h.run(&["SET", "f", start]), Reply::ok());
        assert_eq!(
            h.run(&["INCRBYFLOAT", "f", by]),
            Reply::bulk("0"),
            "{start} + {by}"
        );
        assert_eq!(h.run(&["GET", "f"]), Reply::bulk("0"), "{start} + {by}");
    }
    let not_float = err("ERR value is not a valid float");
    assert_eq!(h.run(&["INCRBYFLOAT", "f", "1\0abc"]), not_float);
    assert_eq!(h.run(&["INCRBYFLOAT", "f", "1\0"]), not_float);
    assert_eq!(h.run(&["SET", "n", "1\0"]), Reply::ok());
    assert_eq!(h.run(&["INCRBYFLOAT", "n", "1"]), not_float);
    assert_eq!(h.run(&["GET", "f"]), Reply::bulk("0"), "unchanged");
    // The case file's I1: "1e3" is a float, " 11 " is not.
    assert_eq!(h.cmd("SET k 1e3"), Reply::ok());
    assert_eq!(h.cmd("INCRBYFLOAT k 1"), Reply::bulk("1001"));
    assert_eq!(h.run(&["SET", "k", " 11 "]), Reply::ok());
    assert_eq!(h.cmd("INCRBYFLOAT k 1"), not_float);
}

#[test]
fn incrbyfloat_formats_as_redis() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("INCRBYFLOAT f 10.5"), Reply::bulk("10.5"));
    let (reply, effects) = h.run_effects("INCRBYFLOAT f 0.1");
    assert_eq!(reply, Reply::bulk("10.6"));
    assert_eq!(effects, vec![vec!["SET", "f", "10.6"]]);
    assert_eq!(h.cmd("INCRBYFLOAT f -5.6"), Reply::bulk("5"));
    assert_eq!(h.cmd("INCRBYFLOAT f 5.0e3"), Reply::bulk("5005"));
    assert_eq!(h.cmd("INCRBYFLOAT g 0.1"), Reply::bulk("0.1"));
    assert_eq!(h.cmd("INCRBYFLOAT g 0.2"), Reply::bulk("0.3"));
    assert_eq!(
        h.cmd("INCRBYFLOAT f abc"),
        err("ERR value is not a valid float")
    );
    assert_eq!(h.cmd("SET s abc"), Reply::ok());
    assert_eq!(
        h.cmd("INCRBYFLOAT s 1"),
        err("ERR value is not a valid float")
    );
    // Plain decimal, no exponent, of the long double nearest to 1e308
    // (just below it, as in Redis): 308 digits.
    let big = common::text(&h.cmd("INCRBYFLOAT big 1e308"));
    assert_eq!((big.len(), &big[..18]), (308, "999999999999999999"));
    // Past a double's range, within a long double's.
    let bigger = common::text(&h.cmd("INCRBYFLOAT big 1e308"));
    assert_eq!((bigger.len(), &bigger[..18]), (309, "199999999999999999"));
    assert_eq!(h.cmd("SET huge 1e4932"), Reply::ok());
    assert_eq!(
        h.cmd("INCRBYFLOAT huge 1e4932"),
        err("ERR increment would produce NaN or Infinity")
    );
    assert_eq!(h.cmd("INCRBYFLOAT f"), arity("incrbyfloat"));
}

#[test]
fn append_and_strlen() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("APPEND k abc"), Reply::Int(3));
    let (reply, effects) = h.run_effects("APPEND k de");
    assert_eq!(reply, Reply::Int(5));
    assert_eq!(effects, vec![vec!["SET", "k", "abcde"]]);
    assert_eq!(h.cmd("STRLEN k"), Reply::Int(5));
    assert_eq!(h.cmd("STRLEN missing"), Reply::Int(0));
    assert_eq!(h.cmd("INCR n"), Reply::Int(1));
    assert_eq!(h.cmd("APPEND n 0"), Reply::Int(2));
    assert_eq!(h.cmd("INCR n"), Reply::Int(11));
    assert_eq!(h.cmd("STRLEN n"), Reply::Int(2));
    assert_eq!(h.cmd("SET t v EX 10"), Reply::ok());
    assert_eq!(h.cmd("APPEND t w"), Reply::Int(2));
    assert_eq!(h.cmd("TTL t"), Reply::Int(10), "APPEND keeps the TTL");
    assert_eq!(h.cmd("CL.THROTTLE g 1 1 1"), ints(&[0, 2, 1, -1, 1]));
    assert_eq!(h.cmd("APPEND g x"), err(WRONGTYPE));
    assert_eq!(h.cmd("STRLEN g"), err(WRONGTYPE));
    assert_eq!(h.cmd("APPEND k"), arity("append"));
    assert_eq!(h.cmd("STRLEN"), arity("strlen"));
}

#[test]
fn setrange_pads_keeps_the_ttl_and_checks_its_bounds() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("SET k hello"), Reply::ok());
    assert_eq!(h.cmd("PEXPIRE k 5000"), Reply::Int(1));
    let (reply, effects) = h.run_effects("SETRANGE k 6 Redis");
    assert_eq!(reply, Reply::Int(11));
    assert_eq!(
        effects,
        vec![vec!["SET", "k", "hello\0Redis", "PXAT", "1700000005000"]]
    );
    assert_eq!(h.cmd("SETRANGE k 0 J"), Reply::Int(11));
    assert_eq!(
        h.cmd("GET k"),
        Reply::bulk("jello\0Redis".replace('j', "J"))
    );
    assert_eq!(h.cmd("PTTL k"), Reply::Int(5000));
    // Empty values write nothing, and create no key.
    assert_eq!(
        h.run_effects(&["SETRANGE", "k", "100", ""]),
        (Reply::Int(11), vec![])
    );
    assert_eq!(
        h.run_effects(&["SETRANGE", "new", "3", ""]),
        (Reply::Int(0), vec![])
    );
    assert_eq!(h.cmd("EXISTS new"), Reply::Int(0));
    assert_eq!(h.cmd("SETRANGE new 3 ab"), Reply::Int(5));
    assert_eq!(h.cmd("GET new"), Reply::bulk("\0\0\0ab"));
    assert_eq!(h.cmd("SET n 12345"), Reply::ok());
    assert_eq!(h.cmd("SETRANGE n 1 x"), Reply::Int(5));
    assert_eq!(h.cmd("GET n"), Reply::bulk("1x345"));
    assert_eq!(h.cmd("SETRANGE k -1 x"), err("ERR offset is out of range"));
    assert_eq!(h.cmd("SETRANGE k x x"), err(NOT_INT));
    assert_eq!(
        h.cmd("SETRANGE k 536870911 xy"),
        err("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
    );
    assert_eq!(
        h.cmd("SETRANGE k 9223372036854775807 x"),
        err("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
    );
    assert_eq!(h.cmd("TOKENLEASE rl 10 1 1000 1"), ints(&[1, 9, 0, 1000]));
    assert_eq!(h.cmd("SETRANGE rl 0 x"), err(WRONGTYPE));
    assert_eq!(h.cmd("SETRANGE k 0"), arity("setrange"));
}

#[test]
fn getrange_and_substr_clamp_as_redis() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("SET s Hello"), Reply::ok());
    for (range, want) in [
        ("0 -1", "Hello"),
        ("0 -2", "Hell"),
        ("-3 -1", "llo"),
        ("1 2", "el"),
        ("3 100", "lo"),
        ("-100 1", "He"),
        ("4 2", ""),
        ("-1 -3", ""),
        ("5 10", ""),
        ("0 0", "H"),
        ("-1 -1", "o"),
    ] {
        assert_eq!(
            h.cmd(&format!("GETRANGE s {range}")),
            Reply::bulk(want),
            "GETRANGE s {range}"
        );
        assert_eq!(
            h.cmd(&format!("SUBSTR s {range}")),
            Reply::bulk(want),
            "SUBSTR s {range}"
        );
    }
    assert_eq!(h.cmd("SET n -1234"), Reply::ok());
    assert_eq!(h.cmd("GETRANGE n 1 2"), Reply::bulk("12"));
    assert_eq!(h.cmd("GETRANGE nokey 0 -1"), Reply::bulk(""));
    assert_eq!(h.cmd("GETRANGE s x 1"), err(NOT_INT));
    assert_eq!(h.cmd("TOKENLEASE rl 10 1 1000 1"), ints(&[1, 9, 0, 1000]));
    assert_eq!(h.cmd("GETRANGE rl 0 1"), err(WRONGTYPE));
    assert_eq!(h.cmd("GETRANGE s 0"), arity("getrange"));
    assert_eq!(h.cmd("SUBSTR s 0"), arity("substr"));
}

#[test]
fn msetnx_on_one_shard() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("MSETNX {t}a 1 {t}b 2"), Reply::Int(1));
    assert_eq!(
        h.run_effects("MSETNX {t}c 3 {t}a 9"),
        (Reply::Int(0), vec![])
    );
    assert_eq!(
        h.cmd("MGET {t}a {t}b {t}c"),
        bulks_or_nil(&[Some("1"), Some("2"), None])
    );
    assert_eq!(h.cmd("MSETNX {t}a"), arity("msetnx"));
}

fn bulks_or_nil(v: &[Option<&str>]) -> Reply {
    Reply::Array(
        v.iter()
            .map(|x| x.map_or(Reply::Nil, Reply::bulk))
            .collect(),
    )
}
