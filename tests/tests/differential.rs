//! Differential tests: the same requests, sent raw, to a real `redis-server`
//! and to Leasehold (on 1 and 2 threads); the replies must match byte for
//! byte, except where they legitimately differ (TTLs a few ms apart, HELLO's
//! client id), which are compared by shape or within a tolerance.
//!
//! `redis-server` (Debian's 7.0.15 in CI) is looked up on PATH. When it is
//! missing the tests print a notice and pass, unless `LEASEHOLD_REQUIRE_REDIS=1`
//! is set: then they fail.

use leasehold_tests::differential::{hello_without_id, Pair};
use leasehold_tests::{cmd, keys_in_both_halves, on_1_and_2_threads};

on_1_and_2_threads! {
    fn strings(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        p.same(&[
            "GET k", "SET k v", "GET k", "SET k w NX", "SET k w XX", "GET k", "SET k x GET", "SET n1 v XX",
            "SET k v NX GET", "SETNX k z", "SETNX k2 z", "GETSET k2 y", "GETSET k3 y", "GETDEL k3", "GETDEL k3",
            "APPEND k2 abc", "APPEND k4 abc", "STRLEN k2", "STRLEN nokey", "GET k2", "TYPE k", "TYPE nokey",
            "GETEX k", "GETEX nokey", "GETEX k PERSIST", "GETEX k EX 10 PERSIST", "SET k v BOGUS",
            "SET k v NX XX", "SET k v EX 10 PX 100", "SET k v KEEPTTL PX 10", "SET k v EX", "SET k v EX ten",
            "SET k v PXAT 4102444800000 PXAT 4102444800001", "PEXPIRETIME k", "SET k v EXAT 1 PXAT 1",
            "GETEX k PERSIST PERSIST", "TTL k", "GETEX k EXAT 4102444800 EXAT 4102444801", "EXPIRETIME k",
            "ECHO hello", "PING", "PING hi", "DEL k k2 k3 k4", "EXISTS k", "SET k 12", "APPEND k 3", "GET k",
        ]);
        // Binary-safe values and empty strings.
        p.same_args(&[b"SET", b"bin", b"a\r\nb\x00c"]);
        p.same_args(&[b"GET", b"bin"]);
        p.same_args(&[b"SET", b"", b""]);
        p.same_args(&[b"GET", b""]);
        p.same_args(&[b"STRLEN", b"bin"]);
    }

    fn counters(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        p.same(&[
            "INCR c", "INCRBY c 10", "DECR c", "DECRBY c 5", "INCRBY c -100", "GET c",
            "SET n 9223372036854775806", "INCR n", "INCR n", "GET n", "SET n 100", "INCRBY n 9223372036854775807",
            "SET x 0", "DECRBY x -9223372036854775808", "SET m -9223372036854775808", "DECR m", "GET m",
            "INCRBY c +1", "INCRBY c 1.5", "INCRBY c 99999999999999999999", "SET k 1e3", "INCR k",
            "INCRBYFLOAT k 1", "GET k", "SET k 01", "INCR k", "SET k -0", "INCR k", "SET k +1", "INCR k",
            "INCRBYFLOAT f 10.5", "INCRBYFLOAT f 0.1", "INCRBYFLOAT f -5",
            "INCRBYFLOAT g 3.0", "INCR g", "INCRBYFLOAT g abc", "INCRBYFLOAT h 1.1", "INCRBYFLOAT h 2.2",
            "INCRBYFLOAT z 0.1", "INCRBYFLOAT z 0.2", "INCRBYFLOAT big 1e20", "INCRBYFLOAT tiny 0.0001",
            "INCRBYFLOAT neg -1.5", "INCRBYFLOAT neg 1.5", "DECR nokey", "INCRBY nokey2 -9223372036854775808",
        ]);
        // Redis adds in long double (x87, 64-bit mantissa) and prints
        // `%.17Lf`: the digits an f64 lacks show (5.6 + 5000 is
        // "5005.60000000000000009"), and Leasehold gives the same bytes.
        p.same(&[
            "INCRBYFLOAT f 5.0e3", "INCRBYFLOAT f -5010.6", "INCRBYFLOAT y 1.23456789012345678",
            "INCRBYFLOAT e 1e-20", "INCRBYFLOAT e 0", "INCRBYFLOAT inf inf", "INCRBYFLOAT x 1e308",
            "INCRBYFLOAT x 1e308", "INCRBYFLOAT x -1e308", "INCRBYFLOAT p 1.0000000000000002",
            "INCRBYFLOAT q 0.10000000000000001", "INCRBYFLOAT w 123456789.123456789",
            "INCRBYFLOAT w -0.000000001", "INCRBYFLOAT w 3.0e-5", "INCRBYFLOAT big2 1e400",
            "INCRBYFLOAT huge 1e4932", "INCRBYFLOAT huge 1e4932", "INCRBYFLOAT neg0 -0.0",
            "INCRBYFLOAT u 18446744073709551617", "INCRBYFLOAT u 0.5", "INCRBYFLOAT t 1e-4900",
            "INCRBYFLOAT t 1e99999", "INCRBYFLOAT t -1e-99999", "INCRBYFLOAT t 00.250", "INCRBYFLOAT t .5",
            "INCRBYFLOAT t 7.", "INCRBYFLOAT t +3", "INCRBYFLOAT t 2E-3",
        ]);
        // A running sum of tenths, as a script's float counter makes it.
        for _ in 0..40 {
            p.same(&["INCRBYFLOAT acc 0.1"]);
        }
        for _ in 0..20 {
            p.same(&["INCRBYFLOAT acc -0.3"]);
        }
        for v in ["    11", "11    ", " 11 ", "1 1", ""] {
            p.same_args(&[b"SET", b"s", v.as_bytes()]);
            p.same(&["INCR s", "INCRBYFLOAT s 1", "GET s"]);
        }
    }

    fn incrbyfloat_reads_as_strtold(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        // Hexadecimal floats, subnormals (a value, printed 0), half the
        // least subnormal (zero: a range error), sums below the normal
        // range, and the type checked before the increment is read.
        p.same(&[
            "INCRBYFLOAT h 0x1p3", "INCRBYFLOAT h 0X1.8P1", "INCRBYFLOAT h -0x.8", "INCRBYFLOAT h 0xAbC.dEfp-2",
            "INCRBYFLOAT h 0x10000000000000003", "INCRBYFLOAT h 0x1p", "INCRBYFLOAT h 0x", "INCRBYFLOAT h 0x1e+5",
            "INCRBYFLOAT h 0x1p16384", "GET h", "INCRBYFLOAT s 1e-4940", "INCRBYFLOAT s -3.36e-4932",
            "INCRBYFLOAT s 0x1p-16446", "INCRBYFLOAT s 0x1.8p-16446", "SET s 3.4e-4932", "INCRBYFLOAT s -3.3e-4932",
            "SET m 1.18973149535723176502e+4932", "INCRBYFLOAT m 0x1p16319", "GET m", "RPUSH l a",
            "INCRBYFLOAT l abc", "INCRBYFLOAT l 1", "INCRBYFLOAT nokey abc", "EXISTS nokey",
        ]);
        // strtold reads into a 5 kB buffer: 5120 bytes or more is no float.
        for zeros in [5117, 5118] {
            let long = format!("1.{}", "0".repeat(zeros));
            p.same_args(&[b"INCRBYFLOAT", b"n", long.as_bytes()]);
            p.same_args(&[b"SET", b"v", long.as_bytes()]);
            p.same(&["INCRBYFLOAT v 1", "GET n"]);
        }
    }

    fn expiry_options(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        p.same(&[
            "SET k v", "EXPIRE k 100 GT", "TTL k", "EXPIRE k 100 XX", "EXPIRE k 100 LT", "EXPIRE k 50 GT",
            "EXPIRE k 200 XX GT", "EXPIRE k 300 NX", "EXPIRE k 10 NX GT", "EXPIRE k 10 GT LT", "EXPIRE k 10 XX NX",
            "EXPIRE k 10 BOGUS", "EXPIRE k ten", "EXPIRE nokey 10", "EXPIRE nokey 0", "PERSIST nokey",
            "SET e v", "EXPIRE e 9223370399119966", "EXPIRE e 9223372036854776", "EXPIRE e 10000000000000000",
            "EXPIRE e 18446744073709561", "EXPIRE e -9223372036854776", "EXPIRE e -9999999999999999",
            "PEXPIRE e 9223372036854775807", "PEXPIREAT e 9223372036854775807", "EXPIREAT e 9223372036854775807",
            "TTL e", "SET e v EX 9999999999999999", "SET e v EX 0", "SET e v PX -1", "SET e v EXAT 0",
            "SETEX e 0 v", "PSETEX e -5 v", "GETEX e EX 0", "EXISTS e", "TTL e", "PERSIST e",
            "EXPIRE e 0", "EXISTS e", "SET e v", "EXPIRE e -5", "EXISTS e", "SET e v", "PEXPIREAT e 1", "GET e",
            "SET e v", "EXPIREAT e 1", "EXISTS e", "SET e v PXAT 1", "EXISTS e", "TTL nokey", "PTTL nokey",
            "EXPIRETIME nokey", "PEXPIRETIME nokey", "SET e v", "EXPIRETIME e", "PEXPIRETIME e",
            "EXPIREAT e 4102444800", "EXPIRETIME e", "PEXPIRETIME e", "PEXPIREAT e 4102444800123", "PEXPIRETIME e",
            "EXPIRETIME e", "PEXPIREAT e 4102444800623", "EXPIRETIME e", "PERSIST e", "TTL e",
        ]);
        // Relative TTLs: the two servers read their clocks a moment apart.
        for step in ["SET t v EX 100", "SET t2 v PX 100000", "EXPIRE t3 10", "SETEX t4 100 v", "PSETEX t5 5000 v"] {
            p.same(&[step]);
        }
        p.close("TTL t", 1);
        p.close("PTTL t2", 1000);
        p.close("PTTL t4", 1000);
        p.close("PTTL t5", 1000);
        p.same(&["INCR t", "TTL t", "SET t 5 KEEPTTL"]);
        p.close("TTL t", 1);
        p.same(&["SET t 6", "TTL t", "EXPIRE t 100 LT", "PEXPIRE t 50000 GT"]);
        p.close("PTTL t", 1000);
    }

    fn multi_key_commands(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        let keys = keys_in_both_halves("d", 4);
        let mut mset = String::from("MSET");
        for (i, k) in keys.iter().enumerate() {
            mset.push_str(&format!(" {k} v{i}"));
        }
        let all = keys.join(" ");
        let rev: Vec<&str> = keys.iter().rev().map(String::as_str).collect();
        p.same(&[
            &mset,
            &format!("MGET {all} missing"),
            &format!("MGET missing {}", rev.join(" ")),
            &format!("EXISTS {all} {} missing", keys[0]),
            &format!("DEL {} missing {}", keys[1], keys[2]),
            &format!("MGET {all}"),
            &format!("UNLINK {all}"),
            &format!("EXISTS {all}"),
            "MSET a 1 b",
            "MSET {t}a 1 {t}b 2 {t}c 3",
            "MGET {t}c {t}a {t}b {t}d",
            "DEL {t}a {t}b {t}c",
            "DBSIZE",
        ]);
    }

    fn errors(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        p.same(&[
            "FOO", "FOO a b", "GET", "GET a b", "SET k", "EXPIRE k", "MGET", "DEL", "TTL", "INCRBY k",
            "PING a b", "ECHO", "CLIENT", "CLIENT FOO", "CONFIG BOGUS", "CONFIG GET", "CONFIG SET maxclients",
            "CONFIG SET nosuch 1", "CONFIG SET databases 1", "CONFIG SET maxclients many",
            "CONFIG GET save", "CONFIG GET appendonly", "CONFIG GET maxmemory", "CONFIG GET nosuchparameter",
            "CONFIG GET lua-time-limit", "CONFIG GET HZ", "CONFIG GET hz HZ", "CONFIG GET slave-priority",
            "CONFIG GET busy*", "CONFIG GET lua*", "CONFIG GET repl-ping-slave-period",
            "CONFIG GET replica-ignore-maxmemory", "CONFIG SET replica-ignore-maxmemory yes",
            "HELLO 4", "HELLO x", "HELLO 3 BOGUS", "AUTH x", "AUTH default x", "SELECT x", "SELECT 0",
            "SCAN x", "SCAN 0 COUNT 0", "SCAN 0 BOGUS", "FLUSHALL NOW", "TIME x", "DBSIZE x",
            "CLIENT SETNAME", "CLIENT SETNAME a b", "CLIENT GETNAME x", "CLIENT ID x", "CLIENT INFO x",
            "CLIENT Bogus", "CONFIG RESETSTAT x", "COMMAND FOO", "COMMAND COUNT x", "CONFIG SET port",
            "SCAN 0 COUNT -1", "SCAN 0 MATCH", "SCAN 99999999999999999999", "MSET a", "SETEX k 10",
            "CLIENT KILL 127.0.0.1:1", "CLIENT KILL ID 999999",
        ]);
        p.same_raw(&cmd(&format!("FOO {}", "x".repeat(300))));
        p.same_raw(&cmd(&format!("{} a", "Y".repeat(200))));
        p.same_raw(&cmd(&format!("FOO {} {} {}", "a".repeat(100), "b".repeat(20), "c".repeat(20))));
        p.same_args(&[b"FOO", b"a\r\nb", b"\n"]);
        p.same_args(&[b"FOO\r\n", b"x"]);
        p.same_args(&[b"CLIENT", b"x\r\n+OK\r\ny"]);
        p.same_args(&[b"CONFIG", b"SET", b"x\r\ny", b"1"]);
        p.same_args(&[b"HELLO", b"3", b"x\r\ny"]);
        // Protocol errors: the same error, then the connection closes.
        p.same_then_closed(b"*2\r\n$3\r\nGET\r\n$-1\r\n");
        p.same_then_closed(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$\r\n1\r\n");
        p.same_then_closed(b"*2\r\n$4\r\nECHO\r\n$536870913\r\n");
        // `*1048577` differs on purpose: Redis waits for up to INT_MAX
        // elements, Leasehold refuses more than 1M (`length_headers`
        // in protocol.rs).
        p.same_then_closed(b"*1\r\n*1\r\n$4\r\nPING\r\n");
        p.same_then_closed(b"*x\r\n");
        p.same_then_closed(b"*1\r\n$x\r\n");
        p.same_then_closed(b"SET k \"abc\r\n");
        p.same_raw(b"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n");
    }

    fn inline_commands(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        for line in [
            "PING\r\n", "SET k v\r\n", "GET k\r\n", "SET k \"a b\"\r\n", "GET k\r\n", "ECHO 'x y'\r\n",
            "ECHO \"tab\\there\"\r\n", "ECHO \"\\x41\\x42\"\r\n", "  ECHO   spaced   \r\n", "ECHO lf-only\n",
            "\r\nPING\r\n", "MSET a 1 b 2\r\n", "MGET a b c\r\n", "INCR a\r\n", "GET\r\n", "get k\r\n",
            "ECHO 'it\\'s'\r\n",
        ] {
            p.same_raw(line.as_bytes());
        }
        p.same_then_closed(b"ECHO \"unbalanced\r\n");
        p.same_then_closed(b"ECHO 'a'b\r\n");
    }

    fn resp3_after_hello_3(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        p.same(&["SET k v", "SET n 5", "SET f 1.5", "GET nokey", "MGET k nokey"]);
        let (r, l) = p.both_raw(&cmd("HELLO 3"));
        assert_eq!(hello_without_id(&r), hello_without_id(&l));
        p.same(&[
            "GET nokey", "GET k", "MGET k nokey n", "INCR n", "INCRBYFLOAT f 1", "TTL k", "EXISTS k nokey",
            "SET k v GET", "SET k2 v NX GET", "GETDEL nokey", "GETEX nokey", "CONFIG GET save",
            "CONFIG GET appendonly", "CONFIG GET nosuchparameter", "FOO", "PING", "ECHO x", "TYPE k",
            "SET x y XX",
        ]);
        let (r, l) = p.both_raw(&cmd("HELLO 2"));
        assert_eq!(hello_without_id(&r), hello_without_id(&l));
        p.same(&["GET nokey", "MGET nokey", "CONFIG GET save"]);
    }
}

on_1_and_2_threads! {
    fn transactions(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        let keys = keys_in_both_halves("tx", 2);
        let (a, b) = (&keys[0], &keys[1]);
        p.same(&[
            "EXEC", "DISCARD", "MULTI", "MULTI", "WATCH x", "SET a 1", "INCR a b", "EXEC", "GET a",
            "MULTI", "SET a x", "INCR a", "GET a", "EXEC",
            "MULTI", "FOO", "SET a 2", "EXEC", "GET a",
            "MULTI", "MSET a 1 b", "EXEC",
            "MULTI", "EXEC",
            "EXEC x", "WATCH a", "MULTI", "SET a 9", "EXEC x", "EXEC", "GET a",
            "MULTI", "PING", "ECHO hi", "UNWATCH", "DISCARD", "DISCARD",
            "WATCH a", "SET a 3", "MULTI", "GET a", "EXEC",
            "WATCH a", "MULTI", "GET a", "EXEC",
            "WATCH a nokey", "UNWATCH", "SET a 4", "MULTI", "GET a", "EXEC",
            "WATCH a", "FLUSHALL", "MULTI", "GET a", "EXEC",
            "MULTI", &format!("SET {a} 1"), &format!("SET {b} 2"), &format!("MGET {a} {b}"),
            &format!("INCR {a}"), &format!("DEL {a} {b}"), "DBSIZE", "EXEC",
        ]);
        let (r, l) = p.both_raw(&cmd("HELLO 3"));
        assert_eq!(hello_without_id(&r), hello_without_id(&l));
        p.same(&["WATCH a", "SET a 5", "MULTI", "GET a", "EXEC", "MULTI", "GET a", "EXEC"]);
    }
}
