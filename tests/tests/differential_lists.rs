//! Differential tests of the list commands: the same requests to a real
//! `redis-server` and to Leasehold (on 1 and 2 threads), replies compared
//! byte for byte in RESP2 and RESP3. Keys that LMOVE joins share a hash tag
//! (on 2 threads other keys may live on two shards; Leasehold refuses those,
//! see `server/tests/family_lists.rs`).

use leasehold_tests::differential::Pair;
use leasehold_tests::on_1_and_2_threads;

/// Requests whose replies are the same in both protocols or differ only in
/// their null shapes: run once in RESP2, once in RESP3.
const NULL_SHAPES: &[&str] = &[
    "LPOP nokey",
    "LPOP nokey 1",
    "LPOP nokey 0",
    "RPOP nokey 3",
    "LPOS nokey a",
    "LPOS nokey a COUNT 1",
    "LINDEX nokey 0",
    "LINDEX nokey x",
    "LRANGE nokey 0 1",
    "LMOVE {q}nokey {q}b LEFT LEFT",
    "RPOPLPUSH {q}nokey {q}b",
    "RPUSH n a b c",
    "LINDEX n 5",
    "LPOS n zz",
    "LPOS n zz COUNT 0",
    "LPOP n 0",
    "LPOP n 2",
    "RPOP n",
    "LPOP n 5",
    "LPOP n",
    "EXISTS n",
];

on_1_and_2_threads! {
    fn pushes_pops_and_ranges(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        p.same(&[
            "LPUSH l a b c", "RPUSH l d e", "LRANGE l 0 -1", "LLEN l", "LLEN nokey", "LPUSHX nokey a",
            "RPUSHX nokey a", "EXISTS nokey", "LPUSHX l x", "RPUSHX l y z", "LRANGE l 0 -1", "LINDEX l 0",
            "LINDEX l -1", "LINDEX l 100", "LINDEX l -100", "LINDEX l x", "LRANGE l -3 -1", "LRANGE l 5 2",
            "LRANGE l -100 100", "LRANGE l 3 3", "LRANGE l x 1", "LRANGE l 0 1.5", "LRANGE nokey 0 -1",
            "LRANGE l 9223372036854775807 -9223372036854775808", "LRANGE l -9223372036854775808 9223372036854775807",
            "LPOP l 0", "LPOP l -1", "LPOP l x", "RPOP l -5", "LPOP l", "RPOP l", "LPOP l 2", "RPOP l 2",
            "LPOP l 1 2", "LRANGE l 0 -1", "RPOP l 100", "EXISTS l", "LPUSH", "LPUSH l", "RPOP", "LRANGE l 0",
            "LLEN a b",
        ]);
        p.same_args(&[b"RPUSH", b"bin", b"a\r\nb", b"", b"\x00\xff"]);
        p.same(&["LRANGE bin 0 -1", "LPOP bin", "LPOP bin", "RPOP bin", "EXISTS bin"]);
        for line in NULL_SHAPES {
            p.same(&[line]);
        }
        p.hello(3);
        for line in NULL_SHAPES {
            p.same(&[line]);
        }
        p.same(&["RPUSH l3 a b", "LRANGE l3 0 -1", "LPOP l3 1", "LPOS l3 b COUNT 0", "LLEN l3"]);
    }

    fn edits_in_place(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        p.same(&[
            "RPUSH l a b c d", "LSET l 0 q", "LSET l -1 r", "LSET l 99 s", "LSET l -5 s", "LSET nokey 0 a",
            "LSET nokey x a", "LSET l x a", "LRANGE l 0 -1", "LINSERT l BEFORE q p", "LINSERT l AFTER r s",
            "LINSERT l after b b2", "LINSERT l AFTER zz s", "LINSERT nokey AFTER a b", "LINSERT l MIDDLE a b",
            "LINSERT nokey MIDDLE a b", "LINSERT l before a", "LRANGE l 0 -1", "RPUSH l p p", "LREM l 0 zz",
            "LREM l 1 p", "LREM l -1 p", "LRANGE l 0 -1", "LREM l 0 p", "LREM l x a", "LREM nokey 1 a",
            "LREM nokey x a", "LRANGE l 0 -1", "LTRIM l 1 -2", "LRANGE l 0 -1", "LTRIM l x 1", "LTRIM nokey 0 1",
            "LTRIM nokey x 1", "LTRIM l -1 -1", "LRANGE l 0 -1", "LTRIM l 3 1", "EXISTS l", "RPUSH one v",
            "LREM one 0 v", "EXISTS one", "RPUSH two a b", "LTRIM two 0 -1", "LTRIM two 2 3", "EXISTS two",
        ]);
    }

    fn lpos(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        p.same(&[
            "RPUSH l a b c a b c a", "LPOS l a", "LPOS l c", "LPOS l zz", "LPOS l a RANK 2", "LPOS l a RANK -1",
            "LPOS l a RANK -3", "LPOS l a RANK 4", "LPOS l a RANK -4", "LPOS l a COUNT 0", "LPOS l a COUNT 2",
            "LPOS l a RANK -1 COUNT 0", "LPOS l a RANK -1 COUNT 2", "LPOS l a RANK 2 COUNT 2 MAXLEN 5",
            "LPOS l a RANK -2 MAXLEN 4", "LPOS l a COUNT 0 MAXLEN 1", "LPOS l a MAXLEN 0", "LPOS l zz COUNT 1",
            "LPOS l a rank -9223372036854775808 COUNT 2", "LPOS l a RANK -9223372036854775808",
            "LPOS l a RANK 9223372036854775807", "LPOS l a RANK 0", "LPOS l a COUNT -1", "LPOS l a COUNT x",
            "LPOS l a MAXLEN -1", "LPOS l a MAXLEN x", "LPOS l a RANK x", "LPOS l a RANK", "LPOS l a FOO 1",
            "LPOS l a COUNT", "LPOS nokey a", "LPOS nokey a COUNT 3", "LPOS nokey a RANK 0", "LPOS l",
            "LPOS l a count 1 rank 1 maxlen 9 count 2",
        ]);
    }

    fn lmove_and_rpoplpush(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        p.same(&[
            "RPUSH {q}a 1 2 3 4", "LMOVE {q}a {q}b LEFT RIGHT", "LMOVE {q}a {q}b RIGHT LEFT",
            "LMOVE {q}a {q}b left right", "LRANGE {q}b 0 -1", "LRANGE {q}a 0 -1", "LMOVE {q}a {q}a LEFT RIGHT",
            "LRANGE {q}a 0 -1", "RPOPLPUSH {q}a {q}b", "EXISTS {q}a", "RPOPLPUSH {q}a {q}b",
            "LMOVE {q}nokey {q}b LEFT LEFT", "RPOPLPUSH {q}b {q}b", "LRANGE {q}b 0 -1", "SET {q}s v",
            "LMOVE {q}b {q}s LEFT LEFT", "LMOVE {q}s {q}b LEFT LEFT", "RPOPLPUSH {q}s {q}nokey",
            "LMOVE {q}nokey {q}s LEFT LEFT", "LMOVE {q}b {q}c UP LEFT", "LMOVE {q}b {q}c LEFT DOWN",
            "LMOVE {q}nokey {q}c UP LEFT", "LMOVE {q}b {q}c LEFT", "RPOPLPUSH {q}b", "LRANGE {q}b 0 -1",
            "RPUSH {q}one x", "LMOVE {q}one {q}one RIGHT LEFT", "LRANGE {q}one 0 -1",
        ]);
    }

    fn wrong_types(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        p.same(&[
            "SET s v", "LPUSH s a", "RPUSH s a", "LPUSHX s a", "RPUSHX s a", "LPOP s", "RPOP s 2", "LRANGE s 0 1",
            "LTRIM s 0 1", "LINDEX s 0", "LLEN s", "LREM s 0 a", "LSET s 0 a", "LINSERT s AFTER a b",
            "LPOS s a", "LPOP s 0", "LPOS s a RANK 0", "LRANGE s x 0", "LINDEX s x", "RPUSH l a", "GET l",
            "INCR l", "APPEND l x", "STRLEN l", "SETNX l x", "MGET l s", "TYPE l", "TYPE s", "GETDEL l",
            "EXPIRE l 100", "TTL l", "LPUSH l b", "TTL l", "PERSIST l", "TTL l", "DEL l", "EXISTS l",
            "SET l x", "TYPE l",
        ]);
    }

    fn long_lists_over_many_nodes(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        // 3000 elements of 1 to 300 bytes: many 8 KiB nodes, entries on both
        // sides of a one-byte length.
        let items: Vec<Vec<u8>> = (0..3000)
            .map(|i: usize| format!("{i}:{}", "x".repeat(i * 7 % 300)).into_bytes())
            .collect();
        for chunk in items.chunks(250) {
            let mut args: Vec<&[u8]> = vec![b"RPUSH", b"big"];
            args.extend(chunk.iter().map(Vec::as_slice));
            p.same_args(&args);
            let mut args: Vec<&[u8]> = vec![b"LPUSH", b"big2"];
            args.extend(chunk.iter().map(Vec::as_slice));
            p.same_args(&args);
        }
        p.same(&[
            "LLEN big", "LRANGE big 0 -1", "LRANGE big 1000 1599", "LRANGE big -700 -650", "LINDEX big 1234",
            "LINDEX big -1", "LINDEX big 2999", "LRANGE big2 0 -1", "LINDEX big2 1500", "LSET big 1500 mid",
            "LINSERT big BEFORE mid before-mid", "LINSERT big AFTER mid after-mid", "LRANGE big 1495 1505",
            "LREM big2 0 5:xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "LPOS big mid", "LPOS big after-mid RANK -1",
            "LTRIM big 100 -100", "LLEN big", "LRANGE big 0 10", "LRANGE big -10 -1", "LPOP big 700",
            "RPOP big 700", "LRANGE big 0 -1", "LMOVE big big LEFT RIGHT", "LRANGE big -3 -1",
        ]);
        p.same_args(&[b"LPOS", b"big2", &items[2000], b"COUNT", b"0"]);
        p.same_args(&[b"LREM", b"big", b"-2", &items[1700]]);
        p.same(&["LLEN big", "LRANGE big 0 -1"]);
    }
}
