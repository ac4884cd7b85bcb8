//! Differential tests of the hash commands: the same requests to a real
//! `redis-server` and to Leasehold (on 1 and 2 threads), replies compared
//! byte for byte in RESP2 and RESP3 while hashes are listpacks (insertion
//! order, as Redis's), and as sorted sets of fields and values once they
//! are hash tables (whose order is each server's own). Random picks are
//! compared where they are determined (a one-field hash, a count past the
//! length). Both servers get `hash-max-listpack-entries 128`
//! (redis-server's compiled-in default is 512; redis.conf's, and
//! Leasehold's, 128).

use leasehold_tests::differential::{scan_to_end, Pair};
use leasehold_tests::{cmd, on_1_and_2_threads, resp, Reply};

fn start(threads: usize) -> Option<Pair> {
    let mut p = Pair::start(threads)?;
    p.same(&[
        "CONFIG SET hash-max-listpack-entries 128",
        "CONFIG SET hash-max-listpack-value 64",
    ]);
    Some(p)
}

/// The elements of a reply (an array, or a map's keys and values in
/// order), sorted: `pairs` sorts field-value pairs, otherwise single items.
fn sorted(reply: Reply, pairs: bool) -> Vec<Vec<String>> {
    let flat: Vec<String> = match reply {
        Reply::Array(items) => items.iter().map(leasehold_tests::text).collect(),
        Reply::Map(m) => m
            .iter()
            .flat_map(|(k, v)| [leasehold_tests::text(k), leasehold_tests::text(v)])
            .collect(),
        other => panic!("not an aggregate: {other:?}"),
    };
    let mut out: Vec<Vec<String>> = flat
        .chunks(if pairs { 2 } else { 1 })
        .map(<[String]>::to_vec)
        .collect();
    out.sort();
    out
}

/// Sends `line` to both and compares the replies' elements as sorted sets.
fn same_sorted(p: &mut Pair, line: &str, pairs: bool) {
    p.redis.send(&cmd(line));
    p.lh.send(&cmd(line));
    let (r, l) = (p.redis.read_reply(), p.lh.read_reply());
    assert_eq!(sorted(l, pairs), sorted(r, pairs), "{line}");
}

/// Every field and value HSCAN returns from cursor 0 to the end, sorted.
fn scan_all(c: &mut leasehold_tests::Raw, key: &str, count: usize) -> Vec<Vec<String>> {
    let flat = scan_to_end(c, &format!("HSCAN {key}"), &format!("COUNT {count}"));
    let mut all: Vec<Vec<String>> = flat.chunks(2).map(<[String]>::to_vec).collect();
    all.sort();
    all.dedup();
    all
}

on_1_and_2_threads! {
    fn small_hashes(threads) {
        let Some(mut p) = start(threads) else { return };
        p.same(&[
            "HSET h a 1 b 2 c 3", "HGET h a", "HGET h z", "HGET nokey a", "HMGET h a z c", "HMGET nokey a b",
            "HSET h a 11 d 4", "HGETALL h", "HKEYS h", "HVALS h", "HLEN h", "HLEN nokey", "HEXISTS h a",
            "HEXISTS h z", "HEXISTS nokey a", "HSTRLEN h a", "HSTRLEN h z", "HSTRLEN nokey a", "HSETNX h a x",
            "HSETNX h e 5", "HSETNX new f v", "HMSET h f 6 g 7", "HDEL h a z", "HDEL h z", "HDEL nokey a",
            "HGETALL h", "HKEYS nokey", "HVALS nokey", "HGETALL nokey", "HSET h", "HSET h a", "HSET h a b c",
            "HMSET h a", "HSETNX h a", "HGET h", "HDEL h", "HLEN h b", "HGETALL h", "HDEL h b c d e f g",
            "EXISTS h", "HSET h b 1 b 2", "HGETALL h",
        ]);
        p.same_args(&[b"HSET", b"bin", b"a\r\nb", b"", b"", b"\x00\xff"]);
        p.same(&["HGETALL bin", "HSTRLEN bin a\r\nb"]);
        p.same_args(&[b"HGET", b"bin", b""]);
        p.same_args(&[b"HSTRLEN", b"bin", b""]);
    }

    fn increments(threads) {
        let Some(mut p) = start(threads) else { return };
        p.same_args(&[b"HSET", b"h", b"sp", b" 1"]);
        p.same(&[
            "HINCRBY h n 5", "HINCRBY h n -10", "HINCRBY h n x", "HINCRBY h n 1.5", "HINCRBY nokey n x",
            "HSET h s abc big 9223372036854775807 small -9223372036854775808 fl 1.5", "HINCRBY h s 1",
            "HINCRBY h big 1", "HINCRBY h big -1", "HINCRBY h small -1", "HINCRBY h fl 1", "HINCRBY h sp 1",
            "HINCRBYFLOAT hp p 1.0000000000000002", "HINCRBYFLOAT hp p 0.10000000000000001",
            "HINCRBYFLOAT hp p 5.0e3", "HINCRBYFLOAT hp p 1e400", "HINCRBYFLOAT hp p -1e400",
            "HGET hp p",
            "HINCRBYFLOAT h fl 0.1", "HINCRBYFLOAT h fl -1.6", "HINCRBYFLOAT h nf 3.0", "HINCRBYFLOAT h nf 1e20",
            "HINCRBYFLOAT h z 0.1", "HINCRBYFLOAT h z 0.2", "HINCRBYFLOAT h n 2", "HINCRBYFLOAT h s 1",
            "HINCRBYFLOAT h sp 1", "HINCRBYFLOAT h fl x", "HINCRBYFLOAT h fl inf", "HINCRBYFLOAT h fl -inf",
            "HINCRBYFLOAT h fl nan", "HINCRBYFLOAT nokey f inf", "EXISTS nokey", "HINCRBYFLOAT h e 1e-20",
            "HINCRBYFLOAT h neg -1.5", "HINCRBYFLOAT h neg 1.5", "HGETALL h", "HINCRBY h", "HINCRBYFLOAT h a",
        ]);
        // What strtold reads: hexadecimal floats and subnormals, at most
        // 5119 bytes of it.
        p.same(&[
            "HINCRBYFLOAT hx f 0x1p3", "HINCRBYFLOAT hx f 0X1.8P-1", "HINCRBYFLOAT hx f 0x1p", "HINCRBYFLOAT hx t 1e-4940",
            "HINCRBYFLOAT hx t 0x1p-16446", "HSET hx hex 0x10 sub 3.36e-4932", "HINCRBYFLOAT hx hex 1",
            "HINCRBYFLOAT hx sub 0", "HGETALL hx",
        ]);
        for zeros in [5117, 5118] {
            let long = format!("1.{}", "0".repeat(zeros));
            p.same_args(&[b"HINCRBYFLOAT", b"hl", b"a", long.as_bytes()]);
            p.same_args(&[b"HSET", b"hl", b"b", long.as_bytes()]);
            p.same(&["HINCRBYFLOAT hl b 1", "HGET hl a"]);
        }
        // Redis adds in long double: past f64's 16 digits the sums differ.
        p.same(&["HSET h huge 1.7e308"]);
        p.close_float("HINCRBYFLOAT h huge 1e300", 1e-14);
    }

    fn random_fields_where_determined(threads) {
        let Some(mut p) = start(threads) else { return };
        let lines = [
            "HSET one f v", "HSET five a 1 b 2 c 3 d 4 e 5", "HRANDFIELD nokey", "HRANDFIELD nokey 5",
            "HRANDFIELD nokey 5 withvalues", "HRANDFIELD nokey -5", "HRANDFIELD one", "HRANDFIELD one 1",
            "HRANDFIELD one -3", "HRANDFIELD one -3 WITHVALUES", "HRANDFIELD one 1 withvalues", "HRANDFIELD five 0",
            "HRANDFIELD five 5", "HRANDFIELD five 100", "HRANDFIELD five 100 withvalues", "HRANDFIELD five x",
            "HRANDFIELD five 1 bogus", "HRANDFIELD five 1 withvalues x", "HRANDFIELD nokey 1 bogus",
            "HRANDFIELD five -9223372036854775808", "HRANDFIELD nokey -4611686018427387904 withvalues",
            "HRANDFIELD five -4611686018427387904 WITHVALUES",
        ];
        p.same(&lines);
        p.hello(3);
        p.same(&lines);
        p.same(&["HGETALL five", "HGETALL nokey", "HKEYS five", "HSCAN five 0", "HMGET five a nope"]);
        // Random subsets: shapes and members.
        for line in ["HRANDFIELD five 3 WITHVALUES", "HRANDFIELD five -7 WITHVALUES", "HRANDFIELD five 2"] {
            let (r, l) = p.both_raw(&cmd(line));
            assert_eq!(l.matches("*2\r\n").count(), r.matches("*2\r\n").count(), "{line}: {l:?} / {r:?}");
            assert_eq!(l.split("\r\n").count(), r.split("\r\n").count(), "{line}");
        }
    }

    fn hscan(threads) {
        let Some(mut p) = start(threads) else { return };
        p.same(&[
            "HSET h a 1 b 2 c 3 ab 4", "HSCAN h 0", "HSCAN h 0 MATCH a*", "HSCAN h 0 MATCH [bc]", "HSCAN h 0 COUNT 1",
            "HSCAN h 0 count 5 match a* count 1", "HSCAN h 5", "HSCAN h -1", "HSCAN h +5",
            "HSCAN h 18446744073709551615", "HSCAN h 18446744073709551616", "HSCAN h x", "HSCAN h +",
            "HSCAN h 1.5", "HSCAN h 0 COUNT 0", "HSCAN h 0 COUNT -1", "HSCAN h 0 TYPE string", "HSCAN h 0 COUNT x",
            "HSCAN h 0 MATCH", "HSCAN h 0 BOGUS", "HSCAN nokey 0 bogus", "HSCAN nokey x", "HSCAN h",
        ]);
        p.same_raw(&resp(&[b"HSCAN", b"h", b""]));
        p.same_raw(&resp(&[b"HSCAN", b"h", b" 5"]));
    }

    fn hash_tables(threads) {
        let Some(mut p) = start(threads) else { return };
        let mut args: Vec<Vec<u8>> = vec![b"HSET".to_vec(), b"big".to_vec()];
        for i in 0..300 {
            args.push(format!("field:{i}").into_bytes());
            args.push(format!("value:{}", "v".repeat(i % 40)).into_bytes());
        }
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        p.same_args(&args);
        p.same(&[
            "HLEN big", "HGET big field:77", "HMGET big field:1 field:299 nope", "HSTRLEN big field:39",
            "HEXISTS big field:150", "HDEL big field:1 field:2 nope", "HLEN big", "HSET big field:3 changed",
            "HINCRBY big counter 7", "HINCRBYFLOAT big counter 0.5",
        ]);
        same_sorted(&mut p, "HRANDFIELD big 1000 WITHVALUES", true);
        for (line, pairs) in [("HGETALL big", true), ("HKEYS big", false), ("HVALS big", false)] {
            same_sorted(&mut p, line, pairs);
        }
        // A long value makes a one-field table: its order is determined.
        let long = vec![b'x'; 100];
        p.same_args(&[b"HSET", b"lv", b"f", &long]);
        p.same(&["HGETALL lv", "HSTRLEN lv f", "HSCAN lv 0"]);
        // Full scans meet the same fields, whatever the cursors.
        for count in [1, 10, 1000] {
            let (r, l) = (scan_all(&mut p.redis, "big", count), scan_all(&mut p.lh, "big", count));
            assert_eq!(l, r, "HSCAN COUNT {count}");
            assert_eq!(l.len(), 299);
        }
        p.hello(3);
        same_sorted(&mut p, "HGETALL big", true);
        p.same(&["HGETALL lv", "HLEN big"]);
    }

    fn wrong_types(threads) {
        let Some(mut p) = start(threads) else { return };
        p.same(&[
            "SET s v", "HSET s a b", "HGET s a", "HMGET s a", "HMSET s a b", "HSETNX s a b", "HINCRBY s a 1",
            "HINCRBY s a x", "HINCRBYFLOAT s a 1", "HINCRBYFLOAT s a x", "HINCRBYFLOAT s a inf", "HDEL s a",
            "HEXISTS s a", "HLEN s", "HKEYS s", "HVALS s", "HGETALL s", "HSTRLEN s a", "HRANDFIELD s",
            "HRANDFIELD s 2", "HRANDFIELD s 2 bogus", "HSCAN s 0", "HSCAN s x", "HSCAN s 0 BOGUS", "HSET h f v",
            "GET h", "LPUSH h x", "INCR h", "TYPE h", "EXPIRE h 100", "HSET h g w", "TTL h", "DEL h", "EXISTS h",
            "RPUSH l a", "HGET l a", "HSET l a b",
        ]);
    }
}
