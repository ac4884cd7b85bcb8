//! Lists and hashes over TCP, on 1 and 2 threads: a work queue through
//! redis-rs (producers push, a worker moves jobs between hash-tagged lists),
//! a user record as a hash, exact reply bytes of the shapes that differ
//! between RESP2 and RESP3, a long pipelined LRANGE, and LMOVE's CROSSSLOT
//! on two shards.

use leasehold_tests::{
    block_on, keys_in_both_halves, on_1_and_2_threads, q, q_err, TestServer, LIMIT,
};

on_1_and_2_threads! {
    fn a_work_queue(threads) {
        let server = TestServer::start(threads);
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            for i in 0..100 {
                let n: i64 = q(&mut r, &["LPUSH", "{jobs}pending", &format!("job{i}")]).await;
                assert_eq!(n, i + 1);
            }
            // A worker takes the oldest job and parks it while it works.
            for i in 0..60 {
                let job: String = q(&mut r, &["LMOVE", "{jobs}pending", "{jobs}working", "RIGHT", "LEFT"]).await;
                assert_eq!(job, format!("job{i}"));
                if i % 2 == 0 {
                    let done: i64 = q(&mut r, &["LREM", "{jobs}working", "1", &job]).await;
                    assert_eq!(done, 1);
                }
            }
            assert_eq!(q::<i64>(&mut r, &["LLEN", "{jobs}pending"]).await, 40);
            assert_eq!(q::<i64>(&mut r, &["LLEN", "{jobs}working"]).await, 30);
            let oldest: Vec<String> = q(&mut r, &["LRANGE", "{jobs}working", "-3", "-1"]).await;
            assert_eq!(oldest, ["job5", "job3", "job1"]);
            let batch: Vec<String> = q(&mut r, &["RPOP", "{jobs}pending", "3"]).await;
            assert_eq!(batch, ["job60", "job61", "job62"]);
            assert_eq!(q::<Option<i64>>(&mut r, &["LPOS", "{jobs}pending", "job99"]).await, Some(0));
            assert_eq!(q::<Option<i64>>(&mut r, &["LPOS", "{jobs}pending", "job0"]).await, None);
            q::<()>(&mut r, &["LTRIM", "{jobs}pending", "0", "-11"]).await;
            assert_eq!(q::<Vec<String>>(&mut r, &["LRANGE", "{jobs}pending", "-1", "-1"]).await, ["job73"]);
        });
    }

    fn a_user_record(threads) {
        let server = TestServer::start(threads);
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            let n: i64 = q(&mut r, &["HSET", "user:1", "name", "ada", "lang", "en", "visits", "0"]).await;
            assert_eq!(n, 3);
            assert_eq!(q::<i64>(&mut r, &["HINCRBY", "user:1", "visits", "5"]).await, 5);
            assert_eq!(q::<String>(&mut r, &["HINCRBYFLOAT", "user:1", "score", "2.5"]).await, "2.5");
            let all: Vec<(String, String)> = q(&mut r, &["HGETALL", "user:1"]).await;
            let want = [("name", "ada"), ("lang", "en"), ("visits", "5"), ("score", "2.5")];
            assert_eq!(all, want.map(|(f, v)| (f.to_string(), v.to_string())));
            let some: Vec<Option<String>> = q(&mut r, &["HMGET", "user:1", "lang", "nope"]).await;
            assert_eq!(some, [Some("en".to_string()), None]);
            assert_eq!(q::<i64>(&mut r, &["HDEL", "user:1", "lang", "nope"]).await, 1);
            assert_eq!(q::<i64>(&mut r, &["HLEN", "user:1"]).await, 3);
            assert_eq!(q::<String>(&mut r, &["TYPE", "user:1"]).await, "hash");
            assert_eq!(
                q_err(&mut r, &["LPUSH", "user:1", "x"]).await,
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            );
        });
    }

    fn reply_shapes_by_protocol(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        assert_eq!(c.call("HSET h f v"), ":1\r\n");
        assert_eq!(c.call("HGETALL h"), "*2\r\n$1\r\nf\r\n$1\r\nv\r\n");
        assert_eq!(c.call("HRANDFIELD h -1 WITHVALUES"), "*2\r\n$1\r\nf\r\n$1\r\nv\r\n");
        assert_eq!(c.call("LPOP nokey 2"), "*-1\r\n");
        assert_eq!(c.call("LPOP nokey"), "$-1\r\n");
        assert!(c.call("HELLO 3").starts_with('%'));
        assert_eq!(c.call("HGETALL h"), "%1\r\n$1\r\nf\r\n$1\r\nv\r\n");
        assert_eq!(c.call("HGETALL nokey"), "%0\r\n");
        assert_eq!(c.call("HRANDFIELD h -1 WITHVALUES"), "*1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n");
        assert_eq!(c.call("LPOP nokey 2"), "_\r\n");
        assert_eq!(c.call("LPOS nokey a"), "_\r\n");
        assert_eq!(c.call("HSCAN h 0"), "*2\r\n$1\r\n0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n");
    }

    fn a_long_range_in_a_pipeline(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        let mut wire = Vec::new();
        for i in 0..5000 {
            wire.extend(leasehold_tests::resp(&[b"RPUSH", b"big", format!("{i:04}").as_bytes()]));
        }
        for _ in 0..5 {
            wire.extend(leasehold_tests::resp(&[b"LRANGE", b"big", b"0", b"-1"]));
        }
        c.send(&wire);
        for i in 0..5000 {
            assert_eq!(c.read_text(), format!(":{}\r\n", i + 1));
        }
        let mut want = String::from("*5000\r\n");
        for i in 0..5000 {
            want.push_str(&format!("$4\r\n{i:04}\r\n"));
        }
        for _ in 0..5 {
            assert_eq!(c.read_text(), want);
        }
    }
}

#[test]
fn lmove_across_two_shards_is_refused_with_the_fix_named() {
    let server = TestServer::start(2);
    let keys = keys_in_both_halves("q", 1);
    let mut c = server.raw();
    assert_eq!(c.call(&format!("RPUSH {} x", keys[0])), ":1\r\n");
    let reply = c.call(&format!("LMOVE {} {} LEFT LEFT", keys[0], keys[1]));
    assert!(
        reply.starts_with("-CROSSSLOT ") && reply.contains("{hash tag}"),
        "{reply}"
    );
    assert_eq!(c.call(&format!("LLEN {}", keys[0])), ":1\r\n");
    assert_eq!(c.call("PING"), "+PONG\r\n", "the connection goes on");
}
