//! The string commands (GET, SET with its options, SETNX, SETEX, PSETEX,
//! GETSET, GETDEL, GETEX, MGET, MSET, the INCR family, INCRBYFLOAT, APPEND,
//! STRLEN) over TCP, on 1 and 2 threads: values through redis-rs, exact reply
//! bytes through raw connections. INCR and its family read integers strictly
//! and refuse to overflow i64; MGET, MSET, EXISTS, DEL and UNLINK span shards.

use leasehold_server::slot::key_slot;
use leasehold_tests::{
    block_on, keys_in_both_halves, manual_server, on_1_and_2_threads, q, q_err, TestServer, LIMIT,
    T0_MS,
};

on_1_and_2_threads! {
    fn set_options(threads) {
        let (server, _clock) = manual_server(threads);
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            assert_eq!(q::<Option<String>>(&mut r, &["SET", "k", "v1", "NX"]).await.as_deref(), Some("OK"));
            assert_eq!(q::<Option<String>>(&mut r, &["SET", "k", "v2", "NX"]).await, None);
            assert_eq!(q::<Option<String>>(&mut r, &["SET", "nokey", "v", "XX"]).await, None);
            assert_eq!(q::<i64>(&mut r, &["EXISTS", "nokey"]).await, 0);
            assert_eq!(q::<Option<String>>(&mut r, &["SET", "k", "v3", "XX"]).await.as_deref(), Some("OK"));
            assert_eq!(q::<Option<String>>(&mut r, &["SET", "k", "v4", "GET"]).await.as_deref(), Some("v3"));
            assert_eq!(q::<Option<String>>(&mut r, &["SET", "new", "v", "GET"]).await, None);
            // NX with GET: the old value comes back and nothing is written.
            assert_eq!(q::<Option<String>>(&mut r, &["SET", "k", "v5", "NX", "GET"]).await.as_deref(), Some("v4"));
            assert_eq!(q::<String>(&mut r, &["GET", "k"]).await, "v4");

            q::<()>(&mut r, &["SET", "k", "v", "EX", "100"]).await;
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, 100);
            q::<()>(&mut r, &["SET", "k", "w", "KEEPTTL"]).await;
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, 100);
            q::<()>(&mut r, &["SET", "k", "w", "PX", "5000"]).await;
            assert_eq!(q::<i64>(&mut r, &["PTTL", "k"]).await, 5000);
            let exat = (T0_MS / 1000 + 50).to_string();
            q::<()>(&mut r, &["SET", "k", "w", "EXAT", &exat]).await;
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, 50);
            let pxat = (T0_MS + 1234).to_string();
            q::<()>(&mut r, &["SET", "k", "w", "PXAT", &pxat]).await;
            assert_eq!(q::<i64>(&mut r, &["PTTL", "k"]).await, 1234);
            q::<()>(&mut r, &["SET", "k", "w"]).await;
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, -1);
            // A deadline in the past: Redis accepts it and the key is gone.
            let past = (T0_MS - 1).to_string();
            q::<()>(&mut r, &["SET", "k", "w", "PXAT", &past]).await;
            assert_eq!(q::<i64>(&mut r, &["EXISTS", "k"]).await, 0);

            for bad in [
                &["SET", "k", "v", "NX", "XX"][..],
                &["SET", "k", "v", "EX", "10", "PX", "10"],
                &["SET", "k", "v", "KEEPTTL", "EX", "10"],
                &["SET", "k", "v", "EX"],
                &["SET", "k", "v", "BOGUS"],
            ] {
                assert_eq!(q_err(&mut r, bad).await, "ERR syntax error", "{bad:?}");
            }
            assert_eq!(
                q_err(&mut r, &["SET", "k", "v", "EX", "ten"]).await,
                "ERR value is not an integer or out of range"
            );
            assert_eq!(q_err(&mut r, &["SET", "k", "v", "PX", "0"]).await, "ERR invalid expire time in 'set' command");
        });
    }

    fn getex_getdel_getset(threads) {
        let (server, _clock) = manual_server(threads);
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            q::<()>(&mut r, &["SET", "k", "v"]).await;
            assert_eq!(q::<String>(&mut r, &["GETEX", "k"]).await, "v");
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, -1);
            assert_eq!(q::<String>(&mut r, &["GETEX", "k", "EX", "10"]).await, "v");
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, 10);
            assert_eq!(q::<String>(&mut r, &["GETEX", "k", "PX", "2500"]).await, "v");
            assert_eq!(q::<i64>(&mut r, &["PTTL", "k"]).await, 2500);
            let pxat = (T0_MS + 777).to_string();
            assert_eq!(q::<String>(&mut r, &["GETEX", "k", "PXAT", &pxat]).await, "v");
            assert_eq!(q::<i64>(&mut r, &["PTTL", "k"]).await, 777);
            let exat = (T0_MS / 1000 + 9).to_string();
            assert_eq!(q::<String>(&mut r, &["GETEX", "k", "EXAT", &exat]).await, "v");
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, 9);
            assert_eq!(q::<String>(&mut r, &["GETEX", "k", "PERSIST"]).await, "v");
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, -1);
            assert_eq!(q::<Option<String>>(&mut r, &["GETEX", "nokey", "EX", "10"]).await, None);
            assert_eq!(q::<i64>(&mut r, &["EXISTS", "nokey"]).await, 0);
            assert_eq!(q_err(&mut r, &["GETEX", "k", "EX", "10", "PERSIST"]).await, "ERR syntax error");
            assert_eq!(q_err(&mut r, &["GETEX", "k", "EX", "0"]).await, "ERR invalid expire time in 'getex' command");

            q::<()>(&mut r, &["SET", "k", "old", "EX", "100"]).await;
            assert_eq!(q::<String>(&mut r, &["GETSET", "k", "new"]).await, "old");
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, -1, "GETSET clears the TTL");
            assert_eq!(q::<Option<String>>(&mut r, &["GETSET", "fresh", "x"]).await, None);
            assert_eq!(q::<String>(&mut r, &["GET", "fresh"]).await, "x");

            assert_eq!(q::<String>(&mut r, &["GETDEL", "k"]).await, "new");
            assert_eq!(q::<i64>(&mut r, &["EXISTS", "k"]).await, 0);
            assert_eq!(q::<Option<String>>(&mut r, &["GETDEL", "k"]).await, None);
        });
    }

    fn setnx_setex_psetex(threads) {
        let (server, _clock) = manual_server(threads);
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            assert_eq!(q::<i64>(&mut r, &["SETNX", "k", "a"]).await, 1);
            assert_eq!(q::<i64>(&mut r, &["SETNX", "k", "b"]).await, 0);
            assert_eq!(q::<String>(&mut r, &["GET", "k"]).await, "a");
            assert_eq!(q::<String>(&mut r, &["SETEX", "k", "10", "c"]).await, "OK");
            assert_eq!(q::<i64>(&mut r, &["TTL", "k"]).await, 10);
            assert_eq!(q::<String>(&mut r, &["GET", "k"]).await, "c");
            assert_eq!(q::<String>(&mut r, &["PSETEX", "k", "1500", "d"]).await, "OK");
            assert_eq!(q::<i64>(&mut r, &["PTTL", "k"]).await, 1500);
            assert_eq!(q_err(&mut r, &["SETEX", "k", "0", "v"]).await, "ERR invalid expire time in 'setex' command");
            assert_eq!(q_err(&mut r, &["PSETEX", "k", "-1", "v"]).await, "ERR invalid expire time in 'psetex' command");
            assert_eq!(q_err(&mut r, &["SETEX", "k", "x", "v"]).await, "ERR value is not an integer or out of range");
            assert_eq!(q::<String>(&mut r, &["GET", "k"]).await, "d", "failed SETEX leaves the value");
        });
    }

    fn append_strlen_incrbyfloat(threads) {
        let (server, clock) = manual_server(threads);
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            assert_eq!(q::<i64>(&mut r, &["APPEND", "s", "ab"]).await, 2);
            assert_eq!(q::<i64>(&mut r, &["APPEND", "s", "cd"]).await, 4);
            assert_eq!(q::<String>(&mut r, &["GET", "s"]).await, "abcd");
            assert_eq!(q::<i64>(&mut r, &["STRLEN", "s"]).await, 4);
            assert_eq!(q::<i64>(&mut r, &["STRLEN", "nokey"]).await, 0);
            // A counter is a string: APPEND extends its digits, INCR reads them.
            q::<()>(&mut r, &["SET", "n", "12", "EX", "100"]).await;
            assert_eq!(q::<i64>(&mut r, &["APPEND", "n", "3"]).await, 3);
            assert_eq!(q::<i64>(&mut r, &["INCR", "n"]).await, 124);
            assert_eq!(q::<i64>(&mut r, &["STRLEN", "n"]).await, 3);
            clock.advance_ms(1000);
            assert_eq!(q::<i64>(&mut r, &["TTL", "n"]).await, 99, "APPEND and INCR keep the TTL");

            assert_eq!(q::<String>(&mut r, &["INCRBYFLOAT", "f", "10.5"]).await, "10.5");
            assert_eq!(q::<String>(&mut r, &["INCRBYFLOAT", "f", "0.1"]).await, "10.6");
            assert_eq!(q::<String>(&mut r, &["INCRBYFLOAT", "f", "-5"]).await, "5.6");
            // Added in long double and printed with 17 decimals, as Redis does.
            assert_eq!(q::<String>(&mut r, &["INCRBYFLOAT", "f", "5.0e3"]).await, "5005.60000000000000009");
            assert_eq!(q::<String>(&mut r, &["INCRBYFLOAT", "i", "3"]).await, "3");
            assert_eq!(q::<i64>(&mut r, &["INCR", "i"]).await, 4);
            assert_eq!(q_err(&mut r, &["INCRBYFLOAT", "f", "abc"]).await, "ERR value is not a valid float");
            assert_eq!(q_err(&mut r, &["INCRBYFLOAT", "s", "1"]).await, "ERR value is not a valid float");
            assert_eq!(q::<String>(&mut r, &["GET", "f"]).await, "5005.60000000000000009");
        });
    }

    fn strict_integers(threads) {
        let (server, _clock) = manual_server(threads);
        let mut c = server.raw();
        let not_int = "-ERR value is not an integer or out of range\r\n";
        for v in ["    11", "11    ", "+1", "01", "-0", "1e3"] {
            assert_eq!(c.call_args(&[b"SET", b"k", v.as_bytes()]), "+OK\r\n");
            assert_eq!(c.call("INCR k"), not_int, "INCR of {v:?}");
            assert_eq!(c.call("GET k"), format!("${}\r\n{v}\r\n", v.len()), "{v:?} unchanged");
        }
        c.script(&[
            ("SET k 5", "+OK\r\n"),
            ("INCRBY k +1", not_int),
            ("GET k", "$1\r\n5\r\n"),
            ("SET k 1e3", "+OK\r\n"),
            ("INCRBYFLOAT k 1", "$4\r\n1001\r\n"),
        ]);
        assert_eq!(c.call_args(&[b"SET", b"k", b" 11 "]), "+OK\r\n");
        assert_eq!(c.call("INCRBYFLOAT k 1"), "-ERR value is not a valid float\r\n");
    }

    fn incr_at_the_edges_of_i64(threads) {
        let (server, _clock) = manual_server(threads);
        let mut c = server.raw();
        let overflow = "-ERR increment or decrement would overflow\r\n";
        c.script(&[
            ("SET n 9223372036854775806", "+OK\r\n"),
            ("INCR n", ":9223372036854775807\r\n"),
            ("INCR n", overflow),
            ("GET n", "$19\r\n9223372036854775807\r\n"),
            ("SET n 100", "+OK\r\n"),
            ("INCRBY n 9223372036854775807", overflow),
            ("GET n", "$3\r\n100\r\n"),
            ("SET x 0", "+OK\r\n"),
            ("DECRBY x -9223372036854775808", "-ERR decrement would overflow\r\n"),
            ("GET x", "$1\r\n0\r\n"),
            ("SET m -9223372036854775808", "+OK\r\n"),
            ("DECR m", overflow),
            ("GET m", "$20\r\n-9223372036854775808\r\n"),
        ]);
    }

    fn multi_key_commands_across_shards(threads) {
        let server = TestServer::start(threads);
        let keys = keys_in_both_halves("mk:", 4);
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            let mut mset = vec!["MSET"];
            let values: Vec<String> = keys.iter().map(|k| format!("value-of-{k}")).collect();
            for (k, v) in keys.iter().zip(&values) {
                mset.push(k);
                mset.push(v);
            }
            assert_eq!(q::<String>(&mut r, &mset).await, "OK");
            // MGET in reverse order with a missing key in the middle.
            let mut mget = vec!["MGET"];
            mget.extend(keys.iter().rev().map(String::as_str));
            mget.insert(3, "missing");
            let got: Vec<Option<String>> = q(&mut r, &mget).await;
            let mut want: Vec<Option<String>> = values.iter().rev().cloned().map(Some).collect();
            want.insert(2, None);
            assert_eq!(got, want);
            // EXISTS counts every argument, duplicates included.
            let mut exists = vec!["EXISTS", "missing"];
            exists.extend(keys.iter().map(String::as_str));
            exists.push(&keys[1]);
            assert_eq!(q::<i64>(&mut r, &exists).await, keys.len() as i64 + 1);
            assert_eq!(q::<i64>(&mut r, &["DEL", &keys[0], &keys[1], &keys[2], "missing", &keys[3]]).await, 4);
            let mut unlink = vec!["UNLINK"];
            unlink.extend(keys.iter().map(String::as_str));
            assert_eq!(q::<i64>(&mut r, &unlink).await, 4);
            assert_eq!(q::<i64>(&mut r, &["DBSIZE"]).await, 0);

            // Hash tags keep keys together, whatever the rest of the name.
            let tagged = ["{user1000}.following", "{user1000}.followers", "x{user1000}y"];
            assert!(tagged.iter().all(|k| key_slot(k.as_bytes()) == key_slot(b"user1000")));
            assert_eq!(q::<String>(&mut r, &["MSET", tagged[0], "1", tagged[1], "2", tagged[2], "3"]).await, "OK");
            let got: Vec<String> = q(&mut r, &["MGET", tagged[2], tagged[0], tagged[1]]).await;
            assert_eq!(got, ["3", "1", "2"]);
            assert_eq!(q::<i64>(&mut r, &["DEL", tagged[0], tagged[1], tagged[2]]).await, 3);
            assert_eq!(q_err(&mut r, &["MSET", "a", "1", "b"]).await, "ERR wrong number of arguments for 'mset' command");
        });
    }
}
