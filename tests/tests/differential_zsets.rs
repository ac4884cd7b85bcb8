//! Differential tests of the sorted-set commands: the same requests to a
//! real `redis-server` and to Leasehold (on 1 and 2 threads), replies
//! compared byte for byte in RESP2 and RESP3, while sorted sets are
//! listpacks and once they are skiplists (both orders are (score, member),
//! so even large ranges compare exactly). Random picks are compared where
//! they are determined; the sliding-log script of `bench/lua` runs on both.

use leasehold_tests::differential::Pair;
use leasehold_tests::{cmd, on_1_and_2_threads};

fn start(threads: usize) -> Option<Pair> {
    let mut p = Pair::start(threads)?;
    p.same(&[
        "CONFIG SET zset-max-listpack-entries 128",
        "CONFIG SET zset-max-listpack-value 64",
    ]);
    Some(p)
}

/// Requests whose replies do not depend on randomness, run on a fresh `z`.
const COMMON: &[&str] = &[
    "ZADD z 1 a 2 b 3 c 2 bb -1.5 neg",
    "ZADD z 0.1 tenth 1e20 huge +inf top -inf bottom",
    "ZCARD z",
    "ZCARD nokey",
    "ZSCORE z a",
    "ZSCORE z tenth",
    "ZSCORE z top",
    "ZSCORE z bottom",
    "ZSCORE z nosuch",
    "ZSCORE nokey a",
    "ZMSCORE z a nosuch huge",
    "ZMSCORE nokey a b",
    "ZRANGE z 0 -1",
    "ZRANGE z 0 -1 WITHSCORES",
    "ZRANGE z 2 4 WITHSCORES",
    "ZRANGE z -3 -1",
    "ZRANGE z 5 2",
    "ZRANGE z 100 200",
    "ZRANGE z -100 1",
    "ZRANGE z 0 -1 REV WITHSCORES",
    "ZRANGE nokey 0 -1",
    "ZRANGE z 0 -1 LIMIT 0 1",
    "ZRANGE z a b",
    "ZRANGE z -inf +inf BYSCORE WITHSCORES",
    "ZRANGE z (1 3 BYSCORE",
    "ZRANGE z 1 (3 BYSCORE",
    "ZRANGE z +inf -inf BYSCORE REV WITHSCORES",
    "ZRANGE z 3 1 BYSCORE REV",
    "ZRANGE z -inf +inf BYSCORE LIMIT 1 3",
    "ZRANGE z -inf +inf BYSCORE LIMIT 2 -1 WITHSCORES",
    "ZRANGE z -inf +inf BYSCORE LIMIT -1 2",
    "ZRANGE z -inf +inf BYSCORE LIMIT 50 2",
    "ZRANGE z +inf -inf BYSCORE REV LIMIT 1 2 WITHSCORES",
    "ZRANGE z x y BYSCORE",
    "ZRANGE z 0 -1 BYLEX",
    "ZRANGE z - + BYLEX WITHSCORES",
    "ZRANGE z 0 -1 BYSCORE BYLEX",
    "ZRANGE z 0 -1 REV REV",
    "ZRANGE z 0 -1 LIMIT 1",
    "ZRANGE z 0 -1 LIMIT x 1 BYSCORE",
    "ZRANGEBYSCORE z -inf +inf",
    "ZRANGEBYSCORE z 1 2 WITHSCORES",
    "ZRANGEBYSCORE z (1 (3",
    "ZRANGEBYSCORE z 0 1 LIMIT 0 2",
    "ZRANGEBYSCORE z 0 1 BYSCORE",
    "ZRANGEBYSCORE z 0 1 REV",
    "ZRANGEBYSCORE z nan 1",
    "ZRANGEBYSCORE z ( (",
    "ZRANGEBYSCORE z 3 1",
    "ZREVRANGEBYSCORE z +inf -inf WITHSCORES",
    "ZREVRANGEBYSCORE z 3 (1",
    "ZREVRANGEBYSCORE z 1 3",
    "ZREVRANGEBYSCORE z +inf -inf LIMIT 1 2",
    "ZREVRANGE z 0 -1",
    "ZREVRANGE z 0 2 WITHSCORES",
    "ZREVRANGE z 1 1",
    "ZCOUNT z -inf +inf",
    "ZCOUNT z (1 3",
    "ZCOUNT z 5 1",
    "ZCOUNT z a b",
    "ZCOUNT nokey 0 1",
    "ZRANK z a",
    "ZRANK z huge",
    "ZRANK z nosuch",
    "ZRANK nokey a",
    "ZREVRANK z a",
    "ZREVRANK z top",
    "ZINCRBY z 1.5 a",
    "ZINCRBY z 1 newone",
    "ZINCRBY z x a",
    "ZINCRBY z -inf top",
    "ZADD z INCR 1 a",
    "ZADD z NX INCR 1 a",
    "ZADD z XX INCR 1 nosuch",
    "ZADD z INCR 1 a 2 b",
    "ZADD z INCR +inf top",
    "ZADD z NX XX 1 a",
    "ZADD z GT LT 1 a",
    "ZADD z NX GT 1 a",
    "ZADD z NX 1",
    "ZADD z x a",
    "ZADD z nan a",
    "ZADD z 1e400 a",
    "ZADD z 1 a 2",
    "ZADD z CH 10 a 11 b 12 newer",
    "ZADD z XX 20 a 21 absent",
    "ZADD z NX 30 a 31 fresh",
    "ZADD z GT CH 5 a 50 b",
    "ZADD z LT CH 5 a 50 b",
    "ZADD z GT 100 brandnew",
    "ZADD z XX CH 1 a",
    "ZADD nokey XX 1 a",
    "EXISTS nokey",
    "ZADD nokey XX INCR 1 a",
    "ZRANGE z 0 -1 WITHSCORES",
    "ZREM z a nosuch b",
    "ZREM z nosuch",
    "ZREM nokey a",
    "ZCARD z",
    "ZREMRANGEBYSCORE z (1 3",
    "ZREMRANGEBYSCORE z x 1",
    "ZREMRANGEBYSCORE nokey 0 1",
    "ZREMRANGEBYRANK z 0 0",
    "ZREMRANGEBYRANK z 5 1",
    "ZREMRANGEBYRANK z x 1",
    "ZRANGE z 0 -1 WITHSCORES",
    "ZPOPMIN z",
    "ZPOPMAX z",
    "ZPOPMIN z 2",
    "ZPOPMAX z 1",
    "ZPOPMIN z 0",
    "ZPOPMIN z -1",
    "ZPOPMIN z x",
    "ZPOPMIN z 1 2",
    "ZPOPMIN nokey",
    "ZPOPMIN nokey 3",
    "ZPOPMAX z 100",
    "EXISTS z",
    "ZADD lex 0 a 0 b 0 c 0 d 0 e 0 ff",
    "ZRANGEBYLEX lex - +",
    "ZRANGEBYLEX lex [b (e",
    "ZRANGEBYLEX lex (b [e LIMIT 1 2",
    "ZRANGEBYLEX lex a b",
    "ZRANGEBYLEX lex - + WITHSCORES",
    "ZRANGEBYLEX lex +a +",
    "ZREVRANGEBYLEX lex + -",
    "ZREVRANGEBYLEX lex [e (b",
    "ZREVRANGEBYLEX lex + - LIMIT 1 2",
    "ZLEXCOUNT lex - +",
    "ZLEXCOUNT lex [b [f",
    "ZLEXCOUNT lex x y",
    "ZLEXCOUNT nokey - +",
    "ZREMRANGEBYLEX lex [b (d",
    "ZREMRANGEBYLEX lex x y",
    "ZRANGE lex 0 -1",
    "ZREMRANGEBYLEX lex - +",
    "EXISTS lex",
    "ZADD one 5 only",
    "ZRANDMEMBER one",
    "ZRANDMEMBER one 1 WITHSCORES",
    "ZRANDMEMBER one -3 WITHSCORES",
    "ZRANDMEMBER one 10",
    "ZRANDMEMBER nokey",
    "ZRANDMEMBER nokey 5",
    "ZRANDMEMBER one 1 x",
    "ZRANDMEMBER one x",
    "ZRANDMEMBER one -9223372036854775808",
    "ZSCAN one 0",
    "ZSCAN nokey 0",
    "ZSCAN one x",
    "ZSCAN one 0 MATCH o*",
    "ZSCAN one 0 MATCH x*",
    "SET str v",
    "ZADD str 1 a",
    "ZRANGE str 0 -1",
    "ZSCORE str a",
    "ZCARD str",
    "ZPOPMIN str",
    "ZREMRANGEBYSCORE str 0 1",
    "ZRANDMEMBER str",
    "ZSCAN str 0",
    "TYPE one",
    "OBJECT ENCODING one",
];

on_1_and_2_threads! {
    fn small_sorted_sets(threads) {
        let Some(mut p) = start(threads) else { return };
        p.same(COMMON);
        p.same(&["FLUSHALL"]);
        p.hello(3);
        p.same(COMMON);
    }

    fn skiplists(threads) {
        let Some(mut p) = start(threads) else { return };
        for proto in [2, 3] {
            p.hello(proto);
            p.same(&["FLUSHALL"]);
            let mut args = vec!["ZADD big".to_string()];
            for i in 0..300 {
                args.push(format!("{} m{i}", (i * 7919) % 1000));
            }
            p.same(&[&args.join(" ")]);
            p.same(&[
                "OBJECT ENCODING big", "ZCARD big", "ZRANGE big 0 -1 WITHSCORES", "ZRANGE big 100 120",
                "ZREVRANGE big 0 9 WITHSCORES", "ZRANGEBYSCORE big (100 200 WITHSCORES LIMIT 3 5",
                "ZREVRANGEBYSCORE big 900 (100 LIMIT 2 4", "ZCOUNT big 100 500", "ZRANK big m17",
                "ZREVRANK big m17", "ZSCORE big m5", "ZINCRBY big 0.25 m5", "ZADD big GT CH 1 m6 2000 m7",
                "ZREM big m1 m2 nosuch", "ZREMRANGEBYRANK big 10 19", "ZREMRANGEBYSCORE big 300 (400",
                "ZPOPMIN big 3", "ZPOPMAX big", "ZCARD big", "ZRANGE big 0 -1 WITHSCORES",
                "ZADD long 1 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                "OBJECT ENCODING long", "ZREM long aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                "EXISTS long",
                "ZRANDMEMBER big 1000 WITHSCORES",
            ]);
        }
    }

    fn sliding_log_script(threads) {
        let Some(mut p) = start(threads) else { return };
        let script = include_str!("../../bench/lua/sliding_log.lua");
        for _ in 0..5 {
            // Leasehold's TIME has millisecond grain (its microseconds are
            // a multiple of 1000): calls a millisecond apart get distinct
            // members on both servers.
            std::thread::sleep(std::time::Duration::from_millis(2));
            p.same_args(&[b"EVAL", script.as_bytes(), b"1", b"log", b"3", b"60000"]);
        }
        p.same(&["ZCARD log", "TYPE log", "OBJECT ENCODING log"]);
        p.close("PTTL log", 1000);
        p.hello(3);
        p.same_args(&[b"EVAL", script.as_bytes(), b"1", b"log", b"3", b"60000"]);
    }
}

#[test]
fn commands_parse_the_same_words() {
    // The request encoder splits on spaces: a sanity check of a line above.
    assert!(cmd("ZADD z 1 a").starts_with(b"*4\r\n"));
}
