//! The sorted-sets family in process: every command's replies (as RESP2
//! and RESP3 bytes) and effects (ZADD of the resulting scores, ZREM of what
//! pops took, the ZREMRANGEBY* commands as themselves), the change to a
//! skiplist past the thresholds (and CONFIG SET of them), Redis 7.0's
//! errors and their order, WRONGTYPE both ways and the generic key commands
//! on sorted sets.

mod common;

use common::{arity, err, NOT_INT, SYNTAX, WRONGTYPE};
use leasehold_protocol::{Protocol, Reply};
use leasehold_server::harness::Harness;

/// A reply as RESP2 text.
fn r2(r: &Reply) -> String {
    String::from_utf8(r.to_bytes(Protocol::Resp2).to_vec()).unwrap()
}

/// The reply to `line` on a RESP3 connection, as RESP3 text.
fn r3(h: &mut Harness, line: &str) -> String {
    h.cmd("HELLO 3");
    let r = h.cmd(line);
    h.cmd("HELLO 2");
    String::from_utf8(r.to_bytes(Protocol::Resp3).to_vec()).unwrap()
}

fn words(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn zadd_and_its_options() {
    let mut h = Harness::new();
    let (reply, effects) = h.run_effects("ZADD z 1 a 2 b 1.5 c");
    assert_eq!(reply, Reply::Int(3));
    assert_eq!(
        effects,
        vec![words(&["ZADD", "z", "1", "a", "2", "b", "1.5", "c"])]
    );
    assert_eq!(h.run_effects("ZADD z 1 a"), (Reply::Int(0), vec![]));
    assert_eq!(h.cmd("ZADD z CH 5 a 2 b 7 d"), Reply::Int(2));
    assert_eq!(h.cmd("ZADD z NX 9 a 9 e"), Reply::Int(1));
    assert_eq!(h.cmd("ZADD z XX CH 6 a 6 nosuch"), Reply::Int(1));
    assert_eq!(h.cmd("ZADD z GT CH 1 a 10 b"), Reply::Int(1));
    assert_eq!(h.cmd("ZADD z LT CH 100 a 0 b"), Reply::Int(1));
    assert_eq!(h.cmd("ZSCORE z a"), Reply::bulk("6"));
    assert_eq!(h.cmd("ZSCORE z b"), Reply::bulk("0"));
    let (reply, effects) = h.run_effects("ZADD z INCR 0.5 a");
    assert_eq!(reply, Reply::bulk("6.5"));
    assert_eq!(effects, vec![words(&["ZADD", "z", "6.5", "a"])]);
    assert_eq!(h.cmd("ZADD z NX INCR 1 a"), Reply::Nil);
    assert_eq!(h.cmd("ZADD nokey XX 1 a"), Reply::Int(0));
    assert_eq!(h.cmd("EXISTS nokey"), Reply::Int(0));
    assert_eq!(h.cmd("ZADD z 1"), arity("zadd"));
    assert_eq!(h.cmd("ZADD z NX 1"), err(SYNTAX));
    assert_eq!(h.cmd("ZADD z 1 a 2"), err(SYNTAX));
    assert_eq!(
        h.cmd("ZADD z NX XX 1 a"),
        err("ERR XX and NX options at the same time are not compatible")
    );
    assert_eq!(
        h.cmd("ZADD z GT LT 1 a"),
        err("ERR GT, LT, and/or NX options at the same time are not compatible")
    );
    assert_eq!(
        h.cmd("ZADD z INCR 1 a 2 b"),
        err("ERR INCR option supports a single increment-element pair")
    );
    assert_eq!(h.cmd("ZADD z nan a"), err("ERR value is not a valid float"));
    assert_eq!(h.cmd("ZADD z +inf top -inf bottom"), Reply::Int(2));
    assert_eq!(
        h.cmd("ZADD z INCR -inf top"),
        err("ERR resulting score is not a number (NaN)")
    );
    assert_eq!(
        h.cmd("ZINCRBY z +inf bottom"),
        err("ERR resulting score is not a number (NaN)")
    );
    let (reply, effects) = h.run_effects("ZINCRBY z 2 fresh");
    assert_eq!(reply, Reply::bulk("2"));
    assert_eq!(effects, vec![words(&["ZADD", "z", "2", "fresh"])]);
    assert_eq!(
        h.cmd("ZINCRBY z x a"),
        err("ERR value is not a valid float")
    );
}

#[test]
fn reads_and_their_shapes() {
    let mut h = Harness::new();
    h.cmd("ZADD z 1 a 2 b 3 c 0.1 t");
    assert_eq!(r2(&h.cmd("ZSCORE z t")), "$19\r\n0.10000000000000001\r\n");
    assert_eq!(r3(&mut h, "ZSCORE z t"), ",0.10000000000000001\r\n");
    assert_eq!(h.cmd("ZSCORE z nosuch"), Reply::Nil);
    assert_eq!(r3(&mut h, "ZMSCORE z a nosuch"), "*2\r\n,1\r\n_\r\n");
    assert_eq!(h.cmd("ZCARD z"), Reply::Int(4));
    assert_eq!(h.cmd("ZCARD nokey"), Reply::Int(0));
    assert_eq!(h.cmd("ZCOUNT z (1 3"), Reply::Int(2));
    assert_eq!(h.cmd("ZCOUNT z x 3"), err("ERR min or max is not a float"));
    assert_eq!(
        r2(&h.cmd("ZRANGE z 0 1 WITHSCORES")),
        "*4\r\n$1\r\nt\r\n$19\r\n0.10000000000000001\r\n$1\r\na\r\n$1\r\n1\r\n"
    );
    assert_eq!(
        r3(&mut h, "ZRANGE z 0 1 WITHSCORES"),
        "*2\r\n*2\r\n$1\r\nt\r\n,0.10000000000000001\r\n*2\r\n$1\r\na\r\n,1\r\n"
    );
    assert_eq!(
        r2(&h.cmd("ZRANGE z 0 -1 REV")),
        "*4\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n$1\r\nt\r\n"
    );
    assert_eq!(
        r2(&h.cmd("ZRANGE z (1 +inf BYSCORE LIMIT 1 1")),
        "*1\r\n$1\r\nc\r\n"
    );
    assert_eq!(
        r2(&h.cmd("ZRANGEBYSCORE z 1 2")),
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
    assert_eq!(
        r2(&h.cmd("ZREVRANGEBYSCORE z 2 -inf LIMIT 0 2")),
        "*2\r\n$1\r\nb\r\n$1\r\na\r\n"
    );
    assert_eq!(r2(&h.cmd("ZREVRANGE z 0 0")), "*1\r\n$1\r\nc\r\n");
    assert_eq!(
        h.cmd("ZRANGE z 0 -1 LIMIT 0 1"),
        err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
        )
    );
    assert_eq!(
        h.cmd("ZRANGE z - + BYLEX WITHSCORES"),
        err("ERR syntax error, WITHSCORES not supported in combination with BYLEX")
    );
    assert_eq!(h.cmd("ZRANGE z a b"), err(NOT_INT));
    assert_eq!(h.cmd("ZRANGEBYSCORE z 0 1 BYSCORE"), err(SYNTAX));
    assert_eq!(h.cmd("ZRANK z b"), Reply::Int(2));
    assert_eq!(h.cmd("ZREVRANK z b"), Reply::Int(1));
    assert_eq!(h.cmd("ZRANK z nosuch"), Reply::Nil);
    h.cmd("ZADD lex 0 a 0 b 0 c 0 d");
    assert_eq!(
        r2(&h.cmd("ZRANGEBYLEX lex (a [c")),
        "*2\r\n$1\r\nb\r\n$1\r\nc\r\n"
    );
    assert_eq!(
        r2(&h.cmd("ZREVRANGEBYLEX lex + - LIMIT 0 1")),
        "*1\r\n$1\r\nd\r\n"
    );
    assert_eq!(h.cmd("ZLEXCOUNT lex - +"), Reply::Int(4));
    assert_eq!(
        h.cmd("ZLEXCOUNT lex a b"),
        err("ERR min or max not valid string range item")
    );
    assert_eq!(
        r2(&h.cmd("ZSCAN lex 0 MATCH [ab]")),
        "*2\r\n$1\r\n0\r\n*4\r\n$1\r\na\r\n$1\r\n0\r\n$1\r\nb\r\n$1\r\n0\r\n"
    );
    assert_eq!(
        r2(&h.cmd("ZRANDMEMBER lex 10")),
        "*4\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n"
    );
    assert_eq!(h.cmd("ZRANDMEMBER nokey"), Reply::Nil);
}

#[test]
fn removals_pops_and_their_effects() {
    let mut h = Harness::new();
    h.cmd("ZADD z 1 a 2 b 3 c 4 d 5 e");
    let (reply, effects) = h.run_effects("ZREM z a nosuch");
    assert_eq!(reply, Reply::Int(1));
    assert_eq!(effects, vec![words(&["ZREM", "z", "a", "nosuch"])]);
    let (reply, effects) = h.run_effects("ZREMRANGEBYSCORE z (1 2");
    assert_eq!(reply, Reply::Int(1));
    assert_eq!(effects, vec![words(&["ZREMRANGEBYSCORE", "z", "(1", "2"])]);
    assert_eq!(
        h.run_effects("ZREMRANGEBYRANK z 5 9"),
        (Reply::Int(0), vec![])
    );
    let (reply, effects) = h.run_effects("ZPOPMIN z");
    assert_eq!(r2(&reply), "*2\r\n$1\r\nc\r\n$1\r\n3\r\n");
    assert_eq!(effects, vec![words(&["ZREM", "z", "c"])]);
    let (reply, effects) = h.run_effects("ZPOPMAX z 1");
    assert_eq!(r2(&reply), "*2\r\n$1\r\ne\r\n$1\r\n5\r\n");
    assert_eq!(effects, vec![words(&["ZREM", "z", "e"])]);
    h.cmd("ZADD z 5 e");
    assert_eq!(
        r3(&mut h, "ZPOPMAX z 5"),
        "*2\r\n*2\r\n$1\r\ne\r\n,5\r\n*2\r\n$1\r\nd\r\n,4\r\n"
    );
    assert_eq!(h.cmd("EXISTS z"), Reply::Int(0), "emptied, removed");
    assert_eq!(r2(&h.cmd("ZPOPMIN z")), "*0\r\n");
    assert_eq!(
        h.cmd("ZPOPMIN z -1"),
        err("ERR value is out of range, must be positive")
    );
    assert_eq!(h.cmd("ZPOPMIN z 1 2"), err(SYNTAX));
    h.cmd("ZADD l 0 a 0 b 0 c");
    assert_eq!(h.cmd("ZREMRANGEBYLEX l [a (c"), Reply::Int(2));
    assert_eq!(h.cmd("ZREMRANGEBYRANK l 0 -1"), Reply::Int(1));
    assert_eq!(h.cmd("EXISTS l"), Reply::Int(0));
}

#[test]
fn encodings_and_generic_commands() {
    let mut h = Harness::new();
    h.cmd("ZADD z 1 a 2 b");
    assert_eq!(h.cmd("OBJECT ENCODING z"), Reply::bulk("listpack"));
    assert_eq!(h.cmd("TYPE z"), Reply::Simple("zset".into()));
    assert_eq!(h.cmd("CONFIG SET zset-max-listpack-entries 2"), Reply::ok());
    h.cmd("ZADD z 3 c");
    assert_eq!(h.cmd("OBJECT ENCODING z"), Reply::bulk("skiplist"));
    assert_eq!(h.cmd("ZRANK z c"), Reply::Int(2));
    assert_eq!(
        h.cmd("CONFIG SET zset-max-listpack-entries 128"),
        Reply::ok()
    );
    assert_eq!(h.cmd("CONFIG SET zset-max-listpack-value 3"), Reply::ok());
    h.cmd("ZADD long 1 abcd");
    assert_eq!(h.cmd("OBJECT ENCODING long"), Reply::bulk("skiplist"));
    assert_eq!(h.cmd("COPY z z2"), Reply::Int(1));
    assert_eq!(
        r2(&h.cmd("ZRANGE z2 0 -1")),
        "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
    );
    assert_eq!(h.cmd("RENAME z2 z3"), Reply::ok());
    assert_eq!(h.cmd("ZCARD z3"), Reply::Int(3));
    assert!(matches!(h.cmd("MEMORY USAGE z3"), Reply::Int(n) if n > 0));
    assert_eq!(h.cmd("DEL z3"), Reply::Int(1));
    h.cmd("SET s v");
    assert_eq!(h.cmd("ZADD s 1 a"), err(WRONGTYPE));
    assert_eq!(h.cmd("ZRANGE s 0 -1"), err(WRONGTYPE));
    assert_eq!(h.cmd("GET z"), err(WRONGTYPE));
}
