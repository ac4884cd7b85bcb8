//! Differential tests of the set commands: the same requests to a real
//! `redis-server` and to Leasehold (on 1 and 2 threads), replies compared
//! byte for byte in RESP2 and RESP3 where their order is determined (an
//! intset's ascending members, one-member sets, counts, errors), and as the
//! same kind of aggregate with the same sorted members where it is each
//! server's own (a hash table's order; Leasehold's small pack keeps
//! insertion order). Random picks are compared where they are determined.
//! Keys of one command share a hash tag, so that they live on one shard.
//! Both servers get `set-max-intset-entries 512` (Redis 7.0 has no set
//! listpack: Leasehold's small pack reports `hashtable` as Redis does).

use leasehold_tests::differential::{scan_to_end, Pair};
use leasehold_tests::{cmd, on_1_and_2_threads, resp, Reply};

fn start(threads: usize) -> Option<Pair> {
    let mut p = Pair::start(threads)?;
    p.same(&["CONFIG SET set-max-intset-entries 512"]);
    Some(p)
}

/// The kind of a reply's aggregate and its members, sorted.
fn sorted(reply: Reply) -> (&'static str, Vec<String>) {
    let (kind, items) = match reply {
        Reply::Array(items) => ("array", items),
        Reply::Set(items) => ("set", items),
        other => panic!("not an aggregate: {other:?}"),
    };
    let mut out: Vec<String> = items.iter().map(leasehold_tests::text).collect();
    out.sort();
    (kind, out)
}

/// Sends `line` to both and compares the replies as sorted members.
fn same_sorted(p: &mut Pair, line: &str) {
    p.redis.send(&cmd(line));
    p.lh.send(&cmd(line));
    let (r, l) = (p.redis.read_reply(), p.lh.read_reply());
    assert_eq!(sorted(l), sorted(r), "{line}");
}

/// Every member SSCAN returns from cursor 0 to the end, sorted, distinct.
fn scan_all(c: &mut leasehold_tests::Raw, key: &str, options: &str) -> Vec<String> {
    let mut all = scan_to_end(c, &format!("SSCAN {key}"), options);
    all.sort();
    all.dedup();
    all
}

/// `SADD key` with `n` members made by `member`.
fn sadd(p: &mut Pair, key: &str, n: usize, member: impl Fn(usize) -> String) {
    let mut args: Vec<Vec<u8>> = vec![b"SADD".to_vec(), key.as_bytes().to_vec()];
    args.extend((0..n).map(|i| member(i).into_bytes()));
    let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    p.same_args(&args);
}

on_1_and_2_threads! {
    fn intsets(threads) {
        let Some(mut p) = start(threads) else { return };
        let lines = [
            "SADD i 5 -3 10 0 5", "SMEMBERS i", "SCARD i", "SCARD nokey", "SISMEMBER i 5", "SISMEMBER i 6",
            "SISMEMBER i x", "SISMEMBER nokey 1", "SMISMEMBER i 0 1 10 x", "SMISMEMBER nokey a", "OBJECT ENCODING i",
            "SADD i 9223372036854775807 -9223372036854775808", "SMEMBERS i", "SREM i 0 7 x", "SREM nokey a",
            "SMEMBERS i", "SSCAN i 0", "SSCAN i 0 MATCH 1* COUNT 1", "SSCAN i 0 MATCH *5", "SSCAN nokey 0",
            "SADD e 010", "OBJECT ENCODING e", "SADD f -0", "OBJECT ENCODING f", "SADD g +1", "OBJECT ENCODING g",
            "SADD one only", "SMEMBERS one", "SPOP one", "EXISTS one", "SREM i 5 10 -3", "SMEMBERS i",
            "SREM i 9223372036854775807 -9223372036854775808", "EXISTS i", "SMEMBERS nokey",
        ];
        p.same(&lines);
        p.hello(3);
        p.same(&["DEL e f g"]);
        p.same(&lines);
        // Past set-max-intset-entries: a table.
        sadd(&mut p, "big", 512, |i| (i * 3).to_string());
        p.same(&["OBJECT ENCODING big", "SADD big 5000", "OBJECT ENCODING big", "SCARD big"]);
        same_sorted(&mut p, "SMEMBERS big");
        p.same(&["CONFIG SET set-max-intset-entries 3", "SADD few 3 2 1", "OBJECT ENCODING few",
                 "SADD few 4", "OBJECT ENCODING few"]);
        same_sorted(&mut p, "SMEMBERS few");
    }

    fn string_sets(threads) {
        let Some(mut p) = start(threads) else { return };
        p.same(&[
            "SADD s a b c", "SADD s a d", "SCARD s", "SISMEMBER s a", "SISMEMBER s z", "SMISMEMBER s a z d",
            "OBJECT ENCODING s", "SREM s a z", "SREM s z", "SCARD s", "TYPE s", "SADD s", "SREM s", "SISMEMBER s",
            "SMISMEMBER s", "SMEMBERS", "SCARD", "SCARD s x", "SMEMBERS s x", "SADD n 1 2 x", "OBJECT ENCODING n",
        ]);
        for line in ["SMEMBERS s", "SMEMBERS n"] {
            same_sorted(&mut p, line);
        }
        p.same_args(&[b"SADD", b"bin", b"a\r\nb", b"", b"\x00\xff"]);
        p.same_args(&[b"SISMEMBER", b"bin", b""]);
        p.same_args(&[b"SISMEMBER", b"bin", b"a\r\nb"]);
        same_sorted(&mut p, "SMEMBERS bin");
        p.hello(3);
        same_sorted(&mut p, "SMEMBERS s");
        same_sorted(&mut p, "SMEMBERS n");
        p.same(&["SMEMBERS nokey", "SMISMEMBER s b x"]);
        // Tables: many members, long members.
        sadd(&mut p, "t", 300, |i| format!("member:{i}:{}", "m".repeat(i % 40)));
        p.same(&["SCARD t", "OBJECT ENCODING t", "SREM t member:1: nope", "SCARD t"]);
        same_sorted(&mut p, "SMEMBERS t");
        let long = vec![b'x'; 100];
        p.same_args(&[b"SADD", b"lv", &long]);
        p.same(&["SMEMBERS lv", "SSCAN lv 0", "OBJECT ENCODING lv"]);
        for extra in ["COUNT 1", "COUNT 10", "COUNT 1000", "MATCH member:1*"] {
            let (r, l) = (scan_all(&mut p.redis, "t", extra), scan_all(&mut p.lh, "t", extra));
            assert_eq!(l, r, "SSCAN {extra}");
        }
    }

    fn sscan_arguments(threads) {
        let Some(mut p) = start(threads) else { return };
        p.same(&[
            "SADD h 1 2 3 12", "SSCAN h 0", "SSCAN h 0 MATCH 1*", "SSCAN h 0 COUNT 1",
            "SSCAN h 0 count 5 match 1* count 1", "SSCAN h 5", "SSCAN h -1", "SSCAN h +5",
            "SSCAN h 18446744073709551615", "SSCAN h 18446744073709551616", "SSCAN h x", "SSCAN h +",
            "SSCAN h 1.5", "SSCAN h 0 COUNT 0", "SSCAN h 0 COUNT -1", "SSCAN h 0 TYPE string", "SSCAN h 0 COUNT x",
            "SSCAN h 0 MATCH", "SSCAN h 0 BOGUS", "SSCAN nokey 0 bogus", "SSCAN nokey x", "SSCAN h",
        ]);
        p.same_raw(&resp(&[b"SSCAN", b"h", b""]));
        p.same_raw(&resp(&[b"SSCAN", b"h", b" 5"]));
    }

    fn pops_and_random_members_where_determined(threads) {
        let Some(mut p) = start(threads) else { return };
        let lines = [
            "SADD one only", "SADD five 1 2 3 4 5", "SRANDMEMBER nokey", "SRANDMEMBER nokey 5", "SRANDMEMBER nokey -5",
            "SRANDMEMBER one", "SRANDMEMBER one 1", "SRANDMEMBER one -3", "SRANDMEMBER five 0", "SRANDMEMBER five 5",
            "SRANDMEMBER five 100", "SRANDMEMBER five x", "SRANDMEMBER five 1 2", "SRANDMEMBER nokey 1 2",
            "SRANDMEMBER five -9223372036854775808", "SRANDMEMBER nokey x", "SPOP nokey", "SPOP nokey 3",
            "SPOP nokey -1", "SPOP five -1", "SPOP five x", "SPOP five 1 2", "SPOP five 0", "SPOP nokey 0",
            "SPOP one 1", "EXISTS one", "SADD one only", "SPOP one", "EXISTS one", "SCARD five", "SPOP five 5",
            "EXISTS five", "SADD five 1 2 3", "SPOP five 50", "SADD five 1 2 3 4 5",
        ];
        p.same(&lines);
        p.hello(3);
        p.same(&lines);
        // Random subsets: shapes and counts.
        for line in ["SRANDMEMBER five 3", "SRANDMEMBER five -7", "SPOP five 2", "SPOP five", "SPOP five 1"] {
            let (r, l) = p.both_raw(&cmd(line));
            assert_eq!(l.split("\r\n").count(), r.split("\r\n").count(), "{line}: {l:?} / {r:?}");
            assert_eq!(l.chars().next(), r.chars().next(), "{line}: {l:?} / {r:?}");
        }
        p.same(&["SCARD five"]);
        sadd(&mut p, "str", 20, |i| format!("s{i}"));
        same_sorted(&mut p, "SRANDMEMBER str 20");
        same_sorted(&mut p, "SRANDMEMBER str 200");
        same_sorted(&mut p, "SPOP str 25");
        p.same(&["EXISTS str"]);
    }

    fn smove(threads) {
        let Some(mut p) = start(threads) else { return };
        p.same(&[
            "SADD {k}a 1 2 x", "SMOVE {k}a {k}b 1", "SMEMBERS {k}b", "OBJECT ENCODING {k}b", "SMOVE {k}a {k}b nope",
            "SMOVE {k}a {k}a x", "SMOVE {k}a {k}a nope", "SMOVE {k}nokey {k}b 1", "SET {k}s v",
            "SMOVE {k}nokey {k}s 1", "SMOVE {k}a {k}s 2", "SMOVE {k}s {k}a 2", "SADD {k}b 2", "SMOVE {k}a {k}b 2",
            "SMEMBERS {k}b", "SMOVE {k}a {k}c x", "EXISTS {k}a", "SMEMBERS {k}c", "OBJECT ENCODING {k}c",
            "SMOVE {k}a {k}b", "SMOVE {k}a {k}b c d",
        ]);
    }

    fn inter_union_diff(threads) {
        let Some(mut p) = start(threads) else { return };
        p.same(&["SADD {k}a 1 2 3 4", "SADD {k}b 3 4 5 6", "SADD {k}c 4 x", "SADD {k}d 4 6 8", "SET {k}s v"]);
        let ordered = [
            "SINTER {k}a {k}b", "SINTER {k}a {k}b {k}d", "SINTER {k}a {k}nokey", "SINTER {k}nokey", "SUNION {k}a {k}b",
            "SUNION {k}a {k}nokey {k}d", "SUNION {k}nokey", "SDIFF {k}a {k}b", "SDIFF {k}a {k}a", "SDIFF {k}nokey {k}a",
            "SDIFF {k}b {k}a {k}d", "SDIFF {k}a {k}nokey", "SINTERCARD 2 {k}a {k}b", "SINTERCARD 2 {k}a {k}b LIMIT 1",
            "SINTERCARD 2 {k}a {k}b limit 0", "SINTERCARD 2 {k}a {k}nokey", "SINTERCARD 1 {k}c",
            "SINTERCARD 1 {k}a LIMIT 10 LIMIT 2", "SINTERCARD 0 {k}a", "SINTERCARD x {k}a", "SINTERCARD -1 {k}a",
            "SINTERCARD 3 {k}a {k}b", "SINTERCARD 1 {k}a LIMIT -1", "SINTERCARD 1 {k}a LIMIT x",
            "SINTERCARD 1 {k}a LIMIT", "SINTERCARD 1 {k}a BOGUS 1", "SINTERCARD 1", "SINTER", "SUNION", "SDIFF",
            "SINTER {k}nokey {k}s", "SINTER {k}s {k}nokey", "SUNION {k}a {k}s", "SDIFF {k}nokey {k}s",
            "SDIFF {k}a {k}s", "SINTERCARD 2 {k}nokey {k}s", "SINTERCARD 2 {k}s {k}a LIMIT x",
            "SINTERSTORE {k}d2 {k}a {k}b", "SMEMBERS {k}d2", "OBJECT ENCODING {k}d2", "SUNIONSTORE {k}d2 {k}a {k}d",
            "SMEMBERS {k}d2", "SDIFFSTORE {k}d2 {k}a {k}b", "SMEMBERS {k}d2", "SDIFFSTORE {k}d2 {k}a {k}a",
            "EXISTS {k}d2", "SET {k}t v", "EXPIRE {k}t 100", "SINTERSTORE {k}t {k}a {k}d", "TTL {k}t", "TYPE {k}t",
            "SMEMBERS {k}t", "SINTERSTORE {k}t {k}nokey {k}a", "EXISTS {k}t", "SUNIONSTORE {k}s2 {k}nokey",
            "EXISTS {k}s2", "SINTERSTORE {k}d2 {k}a {k}s", "SUNIONSTORE {k}d2 {k}s", "SDIFFSTORE {k}d2 {k}a {k}s",
            "SINTERSTORE {k}d2", "SUNIONSTORE {k}d2", "SDIFFSTORE {k}d2", "SUNIONSTORE {k}a {k}a {k}b", "SMEMBERS {k}a",
        ];
        p.same(&ordered);
        p.hello(3);
        p.same(&["SINTER {k}b {k}d", "SUNION {k}d {k}nokey", "SDIFF {k}b {k}d", "SINTER {k}nokey {k}a",
                 "SUNION {k}nokey", "SDIFF {k}nokey", "SINTERCARD 2 {k}b {k}d"]);
        p.hello(2);
        // Strings: each server's order.
        for line in ["SINTER {k}c {k}a", "SUNION {k}a {k}c", "SDIFF {k}c {k}b", "SUNION {k}c {k}c"] {
            same_sorted(&mut p, line);
        }
        p.same(&["SUNIONSTORE {k}u {k}a {k}c", "OBJECT ENCODING {k}u", "SCARD {k}u", "SINTERCARD 2 {k}u {k}c"]);
        same_sorted(&mut p, "SMEMBERS {k}u");
        p.hello(3);
        for line in ["SINTER {k}c {k}a", "SUNION {k}a {k}c", "SDIFF {k}c {k}b"] {
            same_sorted(&mut p, line);
        }
    }

    fn wrong_types_and_generic_commands(threads) {
        let Some(mut p) = start(threads) else { return };
        p.same(&[
            "SET s v", "SADD s a", "SREM s a", "SISMEMBER s a", "SMISMEMBER s a", "SMEMBERS s", "SCARD s", "SPOP s",
            "SPOP s 2", "SPOP s x", "SRANDMEMBER s", "SRANDMEMBER s 2", "SRANDMEMBER s x", "SSCAN s 0", "SSCAN s x",
            "SSCAN s 0 BOGUS", "SADD st a", "GET st", "LPUSH st x", "HGET st x", "INCR st", "TYPE st",
            "EXPIRE st 100", "SADD st b", "TTL st", "RENAME st {k}r", "TTL {k}r",
        ]);
        same_sorted(&mut p, "SMEMBERS {k}r");
        p.same(&[
            "COPY {k}r {k}c", "SADD {k}c z", "SCARD {k}r", "SCARD {k}c", "DEL {k}r", "EXISTS {k}r", "RPUSH l a", "SADD l a", "SCARD l",
            "HSET h a b", "SISMEMBER h a", "SADD n 1 2 3", "OBJECT ENCODING n", "RENAME n {k}n2",
            "OBJECT ENCODING {k}n2", "SMEMBERS {k}n2",
        ]);
    }
}
