//! Scripting end to end over TCP: the measured cases' exact bytes on 1 and
//! 2 threads; Redis's conversions, errors, libraries and SCRIPT
//! subcommands byte for byte against a real `redis-server` in RESP2 and
//! RESP3; SCRIPT KILL and BUSY from a connection of another thread; keys
//! of two shards refused; a script's writes reaching a replica as effects
//! and surviving a restart with `appendonly yes`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_server::clock::ManualClock;
use leasehold_tests::busy::{eval, low_threshold, on_two_threads, own_key, wait_busy};
use leasehold_tests::differential::Pair;
use leasehold_tests::replication::{follow, wait_caught_up};
use leasehold_tests::{keys_in_both_halves, on_1_and_2_threads, resp, Raw, TestServer, T0_MS};

fn call(c: &mut Raw, request: &[u8]) -> String {
    c.send(request);
    c.read_text()
}

on_1_and_2_threads! {
    fn the_measured_cases(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        // L1.
        assert_eq!(call(&mut c, &eval("return redis.call('incr', KEYS[1])", &["1", "c"])), ":1\r\n");
        // L2.
        assert_eq!(
            call(&mut c, &eval("return 1", &["2", "k"])),
            "-ERR Number of keys can't be greater than number of args\r\n"
        );
        // L3.
        assert_eq!(
            c.call("EVALSHA 0000000000000000000000000000000000000000 0"),
            "-NOSCRIPT No matching script. Please use EVAL.\r\n"
        );
        // L4.
        assert_eq!(
            c.call_args(&[b"SCRIPT", b"LOAD", b"return 'hi'"]),
            "$40\r\n2f31ba2bb6d6a0f42cc159d2e2dad55440778de3\r\n"
        );
        // L5.
        assert_eq!(
            call(&mut c, &eval("return {1, 2, 3.7, 'x', false, 'after'}", &["0"])),
            "*6\r\n:1\r\n:2\r\n:3\r\n$1\r\nx\r\n$-1\r\n$5\r\nafter\r\n"
        );
        assert_eq!(call(&mut c, &eval("return {1, nil, 3}", &["0"])), "*1\r\n:1\r\n");
        // L6.
        assert_eq!(c.call("SET notint abc"), "+OK\r\n");
        assert_eq!(
            call(&mut c, &eval("return redis.pcall('incr', KEYS[1])", &["1", "notint"])),
            "-ERR value is not an integer or out of range\r\n"
        );
        // L7: the server and the connection go on.
        let r = call(&mut c, &eval("return redis.call('nosuch')", &["0"]));
        assert!(r.starts_with("-ERR Unknown Redis command called from script "), "{r}");
        assert_eq!(c.call("PING"), "+PONG\r\n");
        assert_eq!(server.raw().call("PING"), "+PONG\r\n");
    }

    fn same_as_redis_resp2(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        for (script, rest) in resp2_cases() {
            p.same_raw(&eval(script, rest));
        }
        p.same(&["SET notint abc"]);
        p.same_raw(&eval("return redis.pcall('incr', KEYS[1])", &["1", "notint"]));
        p.same_raw(&eval("return redis.call('incr', KEYS[1])", &["1", "notint"]));
        // SCRIPT and EVALSHA.
        p.same_args(&[b"SCRIPT", b"LOAD", b"return 'hi'"]);
        p.same_args(&[b"SCRIPT", b"LOAD", b"return +"]);
        p.same(&[
            "SCRIPT EXISTS 2f31ba2bb6d6a0f42cc159d2e2dad55440778de3 0000",
            "EVALSHA 2f31ba2bb6d6a0f42cc159d2e2dad55440778de3 0",
            "EVALSHA 2F31BA2BB6D6A0F42CC159D2E2DAD55440778DE3 0",
            "EVALSHA_RO 2f31ba2bb6d6a0f42cc159d2e2dad55440778de3 0",
            "EVALSHA abc 0",
            "EVALSHA 0000000000000000000000000000000000000000 0",
            "SCRIPT FLUSH BOGUS",
            "SCRIPT FLUSH ASYNC",
            "SCRIPT EXISTS 2f31ba2bb6d6a0f42cc159d2e2dad55440778de3",
            "EVALSHA 2f31ba2bb6d6a0f42cc159d2e2dad55440778de3 0",
            "SCRIPT FLUSH",
            "SCRIPT FLUSH SYNC",
            "SCRIPT KILL",
            "SCRIPT NOPE",
            "SCRIPT",
            "EVAL",
            "EVALSHA x",
        ]);
        p.same_raw(&resp(&[b"EVAL_RO", b"return redis.call('set', KEYS[1], 'x')", b"1", b"k"]));
        p.same_raw(&resp(&[b"EVAL_RO", b"return redis.call('get', KEYS[1])", b"1", b"k"]));
    }

    fn same_as_redis_resp3(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        let (r, l) = p.both_raw(&resp(&[b"HELLO", b"3"]));
        assert!(r.starts_with('%') && l.starts_with('%'), "{r} / {l}");
        for (script, rest) in resp2_cases().into_iter().chain(resp3_cases()) {
            p.same_raw(&eval(script, rest));
        }
    }

    fn keys_of_two_shards(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        let keys = keys_in_both_halves("sk", 1);
        let body = "return redis.call('incr', KEYS[1]) + redis.call('incr', KEYS[2])";
        // On 2 threads the keys live on two shards: the script runs with
        // both locked, as on one thread.
        assert_eq!(call(&mut c, &eval(body, &["2", &keys[0], &keys[1]])), ":2\r\n");
        assert_eq!(call(&mut c, &eval(body, &["2", &keys[1], &keys[0]])), ":4\r\n");
        assert_eq!(c.call(&format!("MGET {} {}", keys[0], keys[1])), "*2\r\n$1\r\n2\r\n$1\r\n2\r\n");
        // Inside MULTI a script keeps to one shard (the transaction's
        // shards are locked before the script is seen): refused when
        // queued, and EXEC aborts.
        assert_eq!(c.call("MULTI"), "+OK\r\n");
        let r = call(&mut c, &eval(body, &["2", &keys[0], &keys[1]]));
        match threads {
            1 => {
                assert_eq!(r, "+QUEUED\r\n");
                assert_eq!(c.call("EXEC"), "*1\r\n:6\r\n");
            }
            _ => {
                assert!(r.starts_with("-CROSSSLOT"), "{r}");
                assert!(c.call("EXEC").starts_with("-EXECABORT"));
            }
        }
        // One multi-key call over keys of both held shards is split
        // between them, as the dispatcher splits it; RENAME, COPY and
        // MSETNX run in steps on both; a one-shard command over both
        // (SMOVE) is refused.
        let r = call(&mut c, &eval("return redis.call('mset', KEYS[1], 'x', KEYS[2], 'y')", &["2", &keys[0], &keys[1]]));
        assert_eq!(r, "+OK\r\n");
        let r = call(&mut c, &eval("return redis.call('mget', KEYS[2], KEYS[1], KEYS[2])", &["2", &keys[0], &keys[1]]));
        assert_eq!(r, "*3\r\n$1\r\ny\r\n$1\r\nx\r\n$1\r\ny\r\n");
        let r = call(&mut c, &eval("return redis.call('del', KEYS[1], KEYS[2], 'nothere')", &["3", &keys[0], &keys[1], "nothere"]));
        assert_eq!(r, ":2\r\n");
        let r = call(&mut c, &eval("return redis.call('mset', KEYS[1], 'x', KEYS[2])", &["2", &keys[0], &keys[1]]));
        assert!(r.starts_with("-ERR wrong number of arguments for 'mset' command script: "), "{r}");
        assert_eq!(c.call(&format!("EXISTS {} {}", keys[0], keys[1])), ":0\r\n");
        let moves = "redis.call('set', KEYS[1], 'v', 'PX', 60000) \
            local r = {redis.call('rename', KEYS[1], KEYS[2])} \
            r[2] = redis.call('exists', KEYS[1]) r[3] = redis.call('get', KEYS[2]) \
            r[4] = redis.call('copy', KEYS[2], KEYS[1]) r[5] = redis.call('get', KEYS[1]) \
            r[6] = redis.call('renamenx', KEYS[1], KEYS[2]) r[7] = redis.call('msetnx', KEYS[1], 'a', KEYS[2], 'b') \
            r[8] = redis.call('del', KEYS[1]) r[9] = redis.call('msetnx', KEYS[1], 'a', KEYS[3], 'b') \
            r[10] = redis.call('pttl', KEYS[2]) > 59000 \
            return r";
        let r = call(&mut c, &eval(moves, &["3", &keys[0], &keys[1], "other"]));
        let r = r.replace("\r\n", " ");
        assert!(r.starts_with("*10 +OK :0 $1 v :1 $1 v :0 :0 :1 "), "{r}");
        assert!(r.ends_with(":1 "), "{r}");
        assert_eq!(c.call(&format!("MGET {} {} other", keys[0], keys[1])), "*3\r\n$1\r\na\r\n$1\r\nv\r\n$1\r\nb\r\n");
        let r = call(&mut c, &eval("return redis.call('smove', KEYS[1], KEYS[2], 'm')", &["2", &keys[0], &keys[1]]));
        match threads {
            1 => assert!(r.starts_with("-WRONGTYPE"), "{r}"),
            _ => assert!(r.starts_with("-CROSSSLOT Keys in request don't hash to the same slot"), "{r}"),
        }
        assert_eq!(c.call(&format!("DEL {} {} other", keys[0], keys[1])), ":3\r\n");
        // One hash tag always works.
        assert_eq!(call(&mut c, &eval(body, &["2", "{rl}a", "{rl}b"])), ":2\r\n");
    }

    fn scripts_over_the_whole_keyspace(threads) {
        // A script that names KEYS, SCAN, DBSIZE or FLUSHALL runs with every
        // shard held, so it sees the whole keyspace on 2 threads as on 1:
        // the Python `limits` package's clear script, by EVAL and EVALSHA.
        let server = TestServer::start(threads);
        let mut c = server.raw();
        let keys = keys_in_both_halves("wk", 3);
        let fill = |c: &mut Raw| {
            for k in &keys {
                assert_eq!(c.call(&format!("SET {k} 1")), "+OK\r\n");
            }
        };
        fill(&mut c);
        assert_eq!(c.call("SET other 1"), "+OK\r\n");
        let clear = "local keys = redis.call('keys', KEYS[1])\nlocal res = 0\nfor i=1,#keys,5000 do\n    res = res + redis.call(\n        'del', unpack(keys, i, math.min(i+4999, #keys))\n    )\nend\nreturn res";
        assert_eq!(call(&mut c, &eval(clear, &["1", "wk*"])), ":6\r\n");
        assert_eq!(c.call("DBSIZE"), ":1\r\n");
        fill(&mut c);
        let loaded = c.call_args(&[b"SCRIPT", b"LOAD", clear.as_bytes()]);
        let sha = loaded.lines().nth(1).unwrap().to_string();
        assert_eq!(c.call(&format!("EVALSHA {sha} 1 wk*")), ":6\r\n");
        assert_eq!(c.call(&format!("EVALSHA {} 1 wk*", sha.to_uppercase())), ":0\r\n");
        fill(&mut c);
        assert_eq!(call(&mut c, &eval("return redis.call('DBSIZE')", &["0"])), ":7\r\n");
        let scan = "local cur, n = '0', 0 repeat local r = redis.call(\"scan\", cur, 'count', 1000) cur = r[1] n = n + #r[2] until cur == '0' return n";
        assert_eq!(call(&mut c, &eval(scan, &["0"])), ":7\r\n");
        // A name built at run time is not seen: on 2 threads the call is
        // refused, naming the command.
        let built = "return redis.call(string.lower('DB' .. 'SIZE'))";
        let r = call(&mut c, &eval(built, &["0"]));
        match threads {
            1 => assert_eq!(r, ":7\r\n"),
            _ => assert!(r.starts_with("-ERR 'dbsize' runs on every shard"), "{r}"),
        }
        // Inside MULTI its shards are locked before the script is seen.
        assert_eq!(c.call("MULTI"), "+OK\r\n");
        assert_eq!(call(&mut c, &eval("return redis.call('dbsize')", &["0"])), "+QUEUED\r\n");
        let r = c.call("EXEC");
        match threads {
            1 => assert_eq!(r, "*1\r\n:7\r\n"),
            _ => assert!(r.starts_with("*1\r\n-ERR a script that calls a command over the whole keyspace"), "{r}"),
        }
        assert_eq!(call(&mut c, &eval("return redis.call('flushall')", &["0"])), "+OK\r\n");
        assert_eq!(c.call("DBSIZE"), ":0\r\n");
    }

    fn scripts_over_two_shards_are_atomic(threads) {
        // Transfers between two keys on different shards, from clients of
        // both threads in both key orders, while readers sum both keys in
        // a script: every sum is the total, and nothing deadlocks.
        let server = TestServer::start(threads);
        let keys = keys_in_both_halves("acct", 1);
        let mut c = server.raw();
        assert_eq!(c.call(&format!("MSET {} 1000 {} 1000", keys[0], keys[1])), "+OK\r\n");
        let transfer = "redis.call('decrby', KEYS[1], ARGV[1]); return redis.call('incrby', KEYS[2], ARGV[1])";
        let sum = "return redis.call('get', KEYS[1]) + redis.call('get', KEYS[2])";
        let rounds = 200;
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let mut c = server.raw();
                let keys = keys.clone();
                std::thread::spawn(move || {
                    let (from, to) = match w % 2 {
                        0 => (&keys[0], &keys[1]),
                        _ => (&keys[1], &keys[0]),
                    };
                    for i in 0..rounds {
                        let r = match w {
                            0 | 1 => call(&mut c, &eval(transfer, &["2", from, to, "3"])),
                            _ => call(&mut c, &eval(sum, &["2", from, to])),
                        };
                        match w {
                            0 | 1 => assert!(r.starts_with(':'), "round {i}: {r}"),
                            _ => assert_eq!(r, ":2000\r\n", "round {i}"),
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        // Both transfer directions ran the same number of times.
        assert_eq!(c.call(&format!("MGET {} {}", keys[0], keys[1])), "*2\r\n$4\r\n1000\r\n$4\r\n1000\r\n");
        assert_eq!(c.call("PING"), "+PONG\r\n");
    }
}

/// Scripts whose replies Redis and Leasehold must send byte for byte,
/// whatever the connection's RESP version.
fn resp2_cases() -> Vec<(&'static str, &'static [&'static str])> {
    vec![
        ("return redis.call('incr', KEYS[1])", &["1", "c"]),
        ("return 1", &["2", "k"]),
        ("return 1", &["-1"]),
        ("return 1", &["abc"]),
        ("return {1, 2, 3.7, 'x', false, 'after'}", &["0"]),
        ("return {1, nil, 3}", &["0"]),
        ("return 3.99", &["0"]),
        ("return -3.99", &["0"]),
        ("return -0.5", &["0"]),
        ("return 1e30", &["0"]),
        ("return 'str'", &["0"]),
        ("return {1,{2,{3,'x'}},{}}", &["0"]),
        ("return KEYS", &["2", "{t}a", "{t}b"]),
        ("return ARGV", &["1", "a", "b", "c"]),
        ("return #KEYS", &["0"]),
        (
            "local o = {} for i, a in ipairs(ARGV) do o[i] = tostring(tonumber(a)) end return o",
            &[
                "0", "100", "-2.5", " 12 ", "0x1F", "1e3", "abc", "", "1e400", "-0", ".5", "7.",
                "1e-320", "+3", "1e", "--1", "12abc",
            ],
        ),
        ("return {tonumber(7), tonumber('ff', 16), tonumber('z', 36), tonumber('8', 8)}", &["0"]),
        ("local n = tonumber() return n", &["0"]),
        ("local n = tonumber('1', 99) return n", &["0"]),
        ("local n = tonumber(nil, 16) return n", &["0"]),
        // NaN keeps its sign wherever C's printf or a C cast sees it: `0/0`
        // is negative on x86-64, `tonumber('nan')` positive.
        (
            "local o = {} for i, a in ipairs(ARGV) do redis.call('SET', KEYS[1], tonumber(a)) o[i] = redis.call('GET', KEYS[1]) end return o",
            &["1", "{n}a", "nan", "-nan", "inf", "-inf", "0.1"],
        ),
        ("redis.call('SET', KEYS[1], 0/0) return redis.call('GET', KEYS[1])", &["1", "{n}a"]),
        ("return {double = 0/0}", &["0"]),
        ("return {double = -(0/0)}", &["0"]),
        ("return {cmsgpack.pack(0/0), cmsgpack.pack(tonumber('nan')), cmsgpack.pack(1/0)}", &["0"]),
        (
            "return {struct.pack('s', 0/0), struct.pack('s', tonumber('nan')), struct.pack('s', 2^53 + 1), struct.pack('s', 123456789012345), struct.pack('s', 1e15)}",
            &["0"],
        ),
        (
            "local o = {} for i, n in ipairs({0/0, 1/0, -1/0, 2^63, 2^64, 1e300, -1e300, 2^63 + 2^11}) do o[i] = struct.pack('<i8', n) .. struct.pack('<I4', n) .. struct.pack('<L', n) end return o",
            &["0"],
        ),
        ("return cjson.encode({[1/0] = 1})", &["0"]),
        ("return cjson.encode({[-1/0] = 1})", &["0"]),
        ("return cjson.encode({[0/0] = 1})", &["0"]),
        ("return cjson.encode({[1e300] = 1})", &["0"]),
        ("return cjson.encode({[2^31] = 1})", &["0"]),
        ("return cjson.encode({[2^31 - 1] = 1})", &["0"]),
        ("return cjson.encode({[2^53 + 1] = 'x'})", &["0"]),
        ("return redis.sha1hex('')", &["0"]),
        ("return redis.sha1hex('abc')", &["0"]),
        ("return {err='MY boom'}", &["0"]),
        ("return {err='boom'}", &["0"]),
        ("return {ok='fine'}", &["0"]),
        ("return {ok=1}", &["0"]),
        ("return {err=1}", &["0"]),
        ("return {1,2,err='x'}", &["0"]),
        ("return redis.error_reply('x y')", &["0"]),
        ("return redis.error_reply('boom')", &["0"]),
        ("return redis.error_reply('-boom')", &["0"]),
        ("return redis.error_reply('-MY boom')", &["0"]),
        ("return redis.error_reply()", &["0"]),
        ("return redis.status_reply('x y')", &["0"]),
        ("return redis.status_reply()", &["0"]),
        ("return {double='abc'}", &["0"]),
        ("return {map={a=1}}", &["0"]),
        ("return {map={1,2}}", &["0"]),
        ("return {set={a=true}}", &["0"]),
        ("return {double=3}", &["0"]),
        ("return {double=0.1}", &["0"]),
        ("return {double=1e300}", &["0"]),
        ("return {double=1/0}", &["0"]),
        ("return {double=-1/0}", &["0"]),
        ("redis.setresp(3); return true", &["0"]),
        ("redis.setresp(3); return false", &["0"]),
        ("redis.setresp(3); return nil", &["0"]),
        ("redis.setresp(3); return {true,false,1}", &["0"]),
        ("redis.setresp(2); return {map={a=1}}", &["0"]),
        ("return redis.setresp(3)", &["0"]),
        ("return redis.setresp(4)", &["0"]),
        ("redis.setresp(3); return type(redis.call('get', KEYS[1]))", &["1", "nokey"]),
        ("return type(redis.call('get', KEYS[1]))", &["1", "nokey"]),
        ("return redis.call('get', KEYS[1])", &["1", "nokey"]),
        ("return true", &["0"]),
        ("return false", &["0"]),
        ("return nil", &["0"]),
        ("return {true, false}", &["0"]),
        // Errors, with the script's SHA1 and line.
        ("x = 1", &["0"]),
        ("return x", &["0"]),
        ("error('boom')", &["0"]),
        ("\n\nerror('boom')", &["0"]),
        ("error({err='MY boom'})", &["0"]),
        ("error({err='boom'})", &["0"]),
        ("return syntax error here", &["0"]),
        ("local a = 'x' .. nil", &["0"]),
        ("redis.call = nil", &["0"]),
        ("rawset(_G, 'x', 1)", &["0"]),
        ("setmetatable(_G, nil)", &["0"]),
        ("print('x')", &["0"]),
        ("return redis.call('nosuch')", &["0"]),
        ("return redis.pcall('nosuch')", &["0"]),
        ("return redis.call('incr')", &["0"]),
        ("return redis.call('incr', 'a', 'b')", &["0"]),
        ("return redis.pcall('incr', 'a', 'b')", &["0"]),
        ("return redis.call('multi')", &["0"]),
        ("return redis.call('eval', 'return 1', '0')", &["0"]),
        ("return redis.call('subscribe', 'x')", &["0"]),
        ("return redis.call('config', 'get', 'maxmemory')", &["0"]),
        ("return redis.call('client', 'list')", &["0"]),
        ("return redis.call('script', 'load', 'return 1')", &["0"]),
        ("return redis.call()", &["0"]),
        ("return redis.call({})", &["0"]),
        ("return redis.call('get', {})", &["0"]),
        ("return redis.call('set', KEYS[1], true)", &["1", "k"]),
        ("local ok, e = pcall(redis.call, 'nosuch'); return {tostring(ok), e}", &["0"]),
        ("local ok, e = pcall(redis.call, 'incr', 'a', 'b'); return e", &["0"]),
        ("local ok, e = pcall(error, 'x'); return e", &["0"]),
        ("local t = redis.pcall('incr', 'a', 'b'); return type(t)..(t.err or '')", &["0"]),
        // Arguments: numbers as %.17g.
        ("return redis.call('set', KEYS[1], 0.1)", &["1", "k"]),
        ("return redis.call('get', KEYS[1])", &["1", "k"]),
        ("return redis.call('set', KEYS[1], 1e21)", &["1", "k"]),
        ("return redis.call('get', KEYS[1])", &["1", "k"]),
        ("return redis.call('set', KEYS[1], 42)", &["1", "k"]),
        ("return redis.call('incrby', KEYS[1], 8)", &["1", "k"]),
        ("return {redis.call('set', KEYS[1], 'v')}", &["1", "k"]),
        ("local r = redis.call('set', KEYS[1], 'v'); return type(r)..r.ok", &["1", "k"]),
        ("return redis.call('incrbyfloat', KEYS[1], '1.5')", &["1", "f"]),
        ("return redis.call('ping')", &["0"]),
        ("return redis.call('echo', 'hi')", &["0"]),
        ("return redis.call('select', '0')", &["0"]),
        ("return #redis.call('time')", &["0"]),
        // The redis table.
        ("return redis.LOG_WARNING", &["0"]),
        ("return {redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE}", &["0"]),
        ("return {redis.REPL_ALL, redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA}", &["0"]),
        ("redis.set_repl(redis.REPL_ALL); return 1", &["0"]),
        ("redis.set_repl(99); return 1", &["0"]),
        ("redis.log(redis.LOG_WARNING, 'hello from a test'); return 1", &["0"]),
        ("redis.log(99, 'hello'); return 1", &["0"]),
        ("return string.format('%d', 3)", &["0"]),
        ("return tostring(0.1)", &["0"]),
        ("return unpack({1,2})", &["0"]),
        ("return loadstring('return 7')()", &["0"]),
        // cjson.
        ("return cjson.encode({1,2,'a',{b=1}})", &["0"]),
        ("return cjson.encode({a='/x\"\\n'})", &["0"]),
        ("return cjson.encode({})", &["0"]),
        ("return cjson.encode(3.14159265358979)", &["0"]),
        ("return cjson.encode(1e20)", &["0"]),
        ("return cjson.encode({[1]=1,[3]=3})", &["0"]),
        ("return cjson.encode({[1]=1,[30]=3})", &["0"]),
        ("return cjson.encode(function() end)", &["0"]),
        ("return cjson.encode(1/0)", &["0"]),
        ("return cjson.encode({true, false, cjson.null})", &["0"]),
        ("return cjson.encode('\\1\\127')", &["0"]),
        ("return cjson.decode('[1,2,{\"a\":null}]')[3].a == cjson.null", &["0"]),
        ("return cjson.decode('[1.5, \"x\", true]')", &["0"]),
        ("return cjson.decode('{\"a\":{\"b\":[1,2]}}').a.b[2]", &["0"]),
        // cmsgpack.
        ("return cmsgpack.pack({1,2,3})", &["0"]),
        ("return cmsgpack.pack({a=1}, 'x', 1.5, -1, 300, true, nil)", &["0"]),
        ("return cmsgpack.pack(-33, 70000, 5000000000, -5000000000, 0.1, string.rep('x', 40))", &["0"]),
        ("return {cmsgpack.unpack(cmsgpack.pack(1,'a',{1,2}))}", &["0"]),
        ("return cmsgpack.unpack('\\193')", &["0"]),
        // bit.
        ("return bit.band(0xff, 0x0f)", &["0"]),
        ("return {bit.bor(1, 2, 4), bit.bxor(7, 2)}", &["0"]),
        ("return bit.tohex(-1)", &["0"]),
        ("return bit.tohex(255, -4)", &["0"]),
        ("return bit.bnot(0)", &["0"]),
        ("return bit.lshift(1, 31)", &["0"]),
        ("return bit.rshift(-1, 28)", &["0"]),
        ("return bit.arshift(-256, 4)", &["0"]),
        ("return bit.rol(0x12345678, 12)", &["0"]),
        ("return bit.ror(0x12345678, 12)", &["0"]),
        ("return bit.bswap(0x12345678)", &["0"]),
        ("return bit.tobit(2^32 + 5)", &["0"]),
        // struct.
        ("return struct.pack('>I2', 258)", &["0"]),
        ("return {struct.unpack('<i4', struct.pack('<i4', -2))}", &["0"]),
        ("return struct.size('>I4d')", &["0"]),
        ("return struct.pack('bBhHlL', 1, 2, 3, 4, 5, 6)", &["0"]),
        ("return {struct.unpack('s', 'abc\\0z')}", &["0"]),
        ("return struct.pack('c3', 'abcdef')", &["0"]),
        ("return struct.pack('!4 b i', 1, 2)", &["0"]),
        ("return {struct.unpack('>h B', struct.pack('>h B', -300, 200))}", &["0"]),
        ("return struct.pack('>d', 1.5)", &["0"]),
    ]
}

/// RESP3-only shapes: the connection said HELLO 3.
fn resp3_cases() -> Vec<(&'static str, &'static [&'static str])> {
    vec![
        (
            "redis.setresp(3); return redis.call('get', KEYS[1])",
            &["1", "nokey"],
        ),
        ("return {1, false, 3}", &["0"]),
    ]
}

#[test]
fn script_kill_from_another_thread() {
    let server = TestServer::start(2);
    let keys = keys_in_both_halves("busy", 1);
    let (mut a, mut b, mut probes) = on_two_threads(&server, &keys);
    low_threshold(&mut b);
    assert_eq!(
        b.call("SCRIPT KILL"),
        "-NOTBUSY No scripts in execution right now.\r\n"
    );
    let body = "while true do end";
    a.send(&eval(body, &["0"]));
    wait_busy(&mut probes, &keys);
    let killed = Instant::now();
    assert_eq!(b.call("SCRIPT KILL"), "+OK\r\n");
    let r = a.read_text();
    assert!(
        r.starts_with("-ERR Script killed by user with SCRIPT KILL... script: ")
            && r.ends_with(", on @user_script:1.\r\n"),
        "{r}"
    );
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "{:?}",
        killed.elapsed()
    );
    // Both connections and both shards go on.
    assert_eq!(a.call("PING"), "+PONG\r\n");
    assert_eq!(
        b.call(&format!("MGET {} {}", keys[0], keys[1])),
        "*2\r\n$-1\r\n$-1\r\n"
    );
    assert_eq!(
        b.call("SCRIPT KILL"),
        "-NOTBUSY No scripts in execution right now.\r\n"
    );
    // A pcall does not catch the kill.
    a.send(&eval(
        "while true do pcall(function() while true do end end) end",
        &["0"],
    ));
    wait_busy(&mut probes, &keys);
    assert_eq!(b.call("SCRIPT KILL"), "+OK\r\n");
    assert!(a
        .read_text()
        .starts_with("-ERR Script killed by user with SCRIPT KILL..."));
}

#[test]
fn a_script_that_wrote_is_unkillable() {
    let server = TestServer::start(2);
    let keys = keys_in_both_halves("w", 1);
    let (mut a, mut b, mut probes) = on_two_threads(&server, &keys);
    low_threshold(&mut b);
    // The key of `a`'s own shard: the script runs there.
    let own = keys[own_key(&mut a, &keys)].clone();
    let body = "redis.call('set', KEYS[1], 'x') for i = 1, 30000000 do end return 1";
    a.send(&eval(body, &["1", &own]));
    wait_busy(&mut probes, &keys);
    assert!(b.call("SCRIPT KILL").starts_with(
        "-UNKILLABLE Sorry the script already executed write commands against the dataset."
    ));
    assert_eq!(a.read_text(), ":1\r\n");
    assert_eq!(b.call(&format!("GET {own}")), "$1\r\nx\r\n");
}

#[test]
fn a_busy_script_over_two_shards_leaves_the_other_thread_serving() {
    // With its KEYS on both shards the script holds both: the other
    // thread, whose shard it holds, still serves its connections once the
    // script is past the threshold, answering BUSY for the held shards,
    // so SCRIPT KILL reaches the script.
    let server = TestServer::start(2);
    let keys = keys_in_both_halves("xbusy", 1);
    let (mut a, mut b, mut probes) = on_two_threads(&server, &keys);
    low_threshold(&mut b);
    let busy = "-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";
    let mine = own_key(&mut a, &keys);
    let theirs = keys[1 - mine].clone();
    let body = "redis.call('get', KEYS[1]) redis.call('get', KEYS[2]) while true do end";
    a.send(&eval(body, &["2", &keys[0], &keys[1]]));
    wait_busy(&mut probes, &keys);
    // Even PING, a command of the held shard there, as in Redis.
    assert_eq!(b.call("PING"), busy);
    assert_eq!(b.call(&format!("GET {theirs}")), busy);
    assert_eq!(b.call(&format!("SET {theirs} x")), busy);
    assert_eq!(b.call("SCRIPT KILL"), "+OK\r\n");
    let r = a.read_text();
    assert!(
        r.starts_with("-ERR Script killed by user with SCRIPT KILL... script: "),
        "{r}"
    );
    // Both shards are released and nothing was written meanwhile.
    assert_eq!(a.call("PING"), "+PONG\r\n");
    let mget = format!("MGET {} {}", keys[0], keys[1]);
    assert_eq!(b.call(&mget), "*2\r\n$-1\r\n$-1\r\n");
    assert_eq!(
        b.call("SCRIPT KILL"),
        "-NOTBUSY No scripts in execution right now.\r\n"
    );
    // A write on the other shard makes it unkillable; it ends by itself.
    let mut probes: Vec<Raw> = (0..30)
        .map(|_| server.raw())
        .filter_map(|mut c| (own_key(&mut c, &keys) != mine).then_some(c))
        .collect();
    let body = "redis.call('set', KEYS[1], 'x') redis.call('set', KEYS[2], 'y') \
                for i = 1, 30000000 do end return 1";
    a.send(&eval(body, &["2", &keys[0], &keys[1]]));
    wait_busy(&mut probes, &keys);
    assert!(b.call("SCRIPT KILL").starts_with(
        "-UNKILLABLE Sorry the script already executed write commands against the dataset."
    ));
    assert_eq!(a.read_text(), ":1\r\n");
    assert_eq!(b.call(&mget), "*2\r\n$1\r\nx\r\n$1\r\ny\r\n");
}

#[test]
fn a_shard_held_for_a_busy_script_keeps_its_clock() {
    // The other thread serves connection commands while the script is
    // busy; its shard keeps the reading of the grant, so a key of it
    // does not expire under the script.
    let server = TestServer::start(2);
    let keys = keys_in_both_halves("clock", 1);
    let (mut a, mut b, mut probes) = on_two_threads(&server, &keys);
    low_threshold(&mut b);
    let theirs = keys[1 - own_key(&mut a, &keys)].clone();
    assert_eq!(b.call(&format!("SET {theirs} v PX 300")), "+OK\r\n");
    let body = "local before = redis.call('get', KEYS[2]) \
                for i = 1, 60000000 do end \
                return {before, redis.call('get', KEYS[2])}";
    let declared = ["2".to_string(), keys[0].clone(), keys[1].clone()];
    let declared: Vec<&str> = declared.iter().map(String::as_str).collect();
    a.send(&eval(body, &declared));
    wait_busy(&mut probes, &keys);
    // Connection commands on the held shard's thread, past the key's TTL.
    std::thread::sleep(Duration::from_millis(400));
    assert!(b.call("CLIENT ID").starts_with(':'));
    let r = a.read_text();
    assert_eq!(r, "*2\r\n$1\r\nv\r\n$1\r\nv\r\n", "{r}");
}

#[test]
fn shutdown_nosave_ends_an_unkillable_script() {
    // As Redis says in UNKILLABLE: SHUTDOWN NOSAVE is the way out of a
    // busy script that has written, on one shard or over two.
    for n in [1, 2] {
        let server = TestServer::start(2);
        let keys = keys_in_both_halves("stop", 1);
        let (mut a, mut b, mut probes) = on_two_threads(&server, &keys);
        low_threshold(&mut b);
        let own = keys[own_key(&mut a, &keys)].clone();
        let declared: Vec<&str> = match n {
            1 => vec!["1", &own],
            _ => vec!["2", &keys[0], &keys[1]],
        };
        let body = "redis.call('set', KEYS[#KEYS], 'x') while true do end";
        a.send(&eval(body, &declared));
        wait_busy(&mut probes, &keys);
        assert!(b.call("SCRIPT KILL").starts_with("-UNKILLABLE"));
        b.send_cmd("SHUTDOWN NOSAVE");
        assert!(server.wait_stopped(Duration::from_secs(5)), "{n} keys");
    }
}

#[test]
fn a_scripts_writes_reach_a_replica_as_effects() {
    let clock = Arc::new(ManualClock::new(T0_MS, 0));
    let primary = TestServer::with_clock(2, clock.clone());
    let replica = TestServer::with_clock(1, clock);
    follow(&replica, &primary);
    let mut p = primary.raw();
    let body = "local n = redis.call('incrby', KEYS[1], ARGV[1]) \
                redis.call('set', KEYS[2], n, 'PX', 60000) \
                redis.call('tokenlease', KEYS[3], 10, 1, 1000, 3) \
                return n";
    for _ in 0..3 {
        assert!(call(&mut p, &eval(body, &["3", "{u}n", "{u}s", "{u}tb", "5"])).starts_with(':'));
    }
    wait_caught_up(&primary, &replica, Duration::from_secs(20));
    let mut r = replica.raw();
    assert_eq!(r.call("GET {u}n"), "$2\r\n15\r\n");
    assert_eq!(r.call("GET {u}s"), "$2\r\n15\r\n");
    assert_eq!(r.call("PTTL {u}s"), p.call("PTTL {u}s"));
    assert_eq!(r.call("RLSTATE {u}tb"), p.call("RLSTATE {u}tb"));
    // A replica refuses a script's writes, not its reads.
    let r_write = call(
        &mut r,
        &eval("return redis.call('incr', KEYS[1])", &["1", "{u}n"]),
    );
    assert!(
        r_write.starts_with("-READONLY You can't write against a read only replica. script: "),
        "{r_write}"
    );
    assert_eq!(
        call(
            &mut r,
            &eval("return redis.call('get', KEYS[1])", &["1", "{u}n"])
        ),
        "$2\r\n15\r\n"
    );
}

/// A replica whose shards a busy read-only script holds (over both of
/// them, from either thread) applies none of its primary's records
/// meanwhile and loses none: they wait for the script's end, as Redis stops
/// reading its primary during a busy script. (The link's records for a
/// busy shard were answered BUSY and dropped: the replica lost keys for
/// good while its offset matched the primary's.)
#[test]
fn a_busy_script_on_a_replica_holds_its_link_back_and_drops_nothing() {
    let primary = TestServer::start(2);
    let replica = TestServer::start(2);
    follow(&replica, &primary);
    wait_caught_up(&primary, &replica, Duration::from_secs(20));
    let keys = keys_in_both_halves("held", 1);
    let mut p = primary.raw();
    // Connections of each replica thread, before any script runs (thread 0
    // accepts connections, and it may be the busy one).
    let mut by_thread: [Vec<Raw>; 2] = [Vec::new(), Vec::new()];
    while by_thread.iter().any(|t| t.len() < 61) {
        let mut c = replica.raw();
        let t = own_key(&mut c, &keys);
        if by_thread[t].len() < 61 {
            by_thread[t].push(c);
        }
    }
    low_threshold(&mut by_thread[0][0]);
    let body = "while true do redis.call('get', KEYS[1]) end";
    for (round, runner) in [0usize, 1].into_iter().enumerate() {
        let mut script = by_thread[runner].pop().expect("a connection");
        let mut probes = std::mem::take(&mut by_thread[1 - runner]);
        let mut killer = probes.pop().expect("a connection");
        script.send(&eval(body, &["2", &keys[0], &keys[1]]));
        wait_busy(&mut probes, &keys);
        for k in &keys {
            for _ in 0..=round {
                assert!(p.call(&format!("INCR {k}")).starts_with(':'));
            }
        }
        // The records reach the replica while the script is busy.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(killer.call("SCRIPT KILL"), "+OK\r\n");
        assert!(script.read_text().starts_with("-ERR Script killed by user"));
        wait_caught_up(&primary, &replica, Duration::from_secs(20));
        let want = (round + 1) * (round + 2) / 2;
        let mut r = replica.raw();
        for k in &keys {
            let got = r.call(&format!("GET {k}"));
            assert_eq!(got, format!("$1\r\n{want}\r\n"), "{k}, round {round}");
        }
        probes.push(killer);
        by_thread[1 - runner] = probes;
    }
}

/// A replication link closed while one of its transaction frames waits
/// for shards a busy script holds (the frame counted in the offset, not yet
/// applied): the link comes back only once the frame ran, so the records
/// after it apply after it. (A new link came back at once and its `SET b 2`
/// overtook the frame's `SET b 1` on the held shard: the replica kept 1
/// while the primary had 2, at equal offsets.)
#[test]
fn a_link_closed_while_its_frame_waits_resumes_after_the_frame() {
    use leasehold_server::slot::{key_slot, slot_shard};
    let on = |k: &str, n: usize| slot_shard(key_slot(k.as_bytes()), n);
    let find = |p: &str, r: usize, pr: usize| {
        (0..)
            .map(|i| format!("{p}{i}"))
            .find(|k| on(k, 3) == r && on(k, 2) == pr)
            .expect("a key")
    };
    // On the replica's three shards: 0 for the link's thread, 1 and 2 held
    // by the script; on the primary's two: one each, so the write is framed.
    let (zero, a, b) = (find("z", 0, 0), find("a", 1, 0), find("b", 2, 1));
    let primary = TestServer::start(2);
    let replica = TestServer::start(3);
    follow(&replica, &primary);
    let mut p = primary.raw();
    assert_eq!(p.call(&format!("MSET {a} 0 {b} 0")), "+OK\r\n");
    wait_caught_up(&primary, &replica, Duration::from_secs(20));
    let keys = [zero, a.clone(), b.clone()];
    let mut script = None;
    let mut probes = Vec::new();
    while script.is_none() || probes.len() < 61 {
        let mut c = replica.raw();
        match own_key(&mut c, &keys) {
            0 if probes.len() < 61 => probes.push(c),
            0 => {}
            _ => script = Some(c),
        }
    }
    let mut script = script.expect("a connection off thread 0");
    let mut other = probes.pop().expect("a connection");
    low_threshold(&mut other);
    let body = "while true do redis.call('get', KEYS[1]) end";
    script.send(&eval(body, &["2", &a, &b]));
    wait_busy(&mut probes, &keys[1..]);
    p.send(format!("MULTI\r\nSET {a} 1\r\nSET {b} 1\r\nEXEC\r\n").as_bytes());
    for want in [
        "+OK\r\n",
        "+QUEUED\r\n",
        "+QUEUED\r\n",
        "*2\r\n+OK\r\n+OK\r\n",
    ] {
        assert_eq!(p.read_text(), want);
    }
    // The frame is read and counted; its transaction waits for the script.
    wait_caught_up(&primary, &replica, Duration::from_secs(20));
    assert_eq!(other.call("CLIENT KILL TYPE master"), ":1\r\n");
    assert_eq!(p.call(&format!("SET {b} 2")), "+OK\r\n");
    // Time for a new link to resume and send `SET b 2` to the held shard.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(other.call("SCRIPT KILL"), "+OK\r\n");
    assert!(script.read_text().starts_with("-ERR Script killed by user"));
    wait_caught_up(&primary, &replica, Duration::from_secs(20));
    let mut r = replica.raw();
    assert_eq!(
        r.call(&format!("MGET {a} {b}")),
        "*2\r\n$1\r\n1\r\n$1\r\n2\r\n"
    );
}

#[test]
fn a_scripts_writes_survive_a_restart_with_appendonly() {
    let dir = leasehold_testkit::scratch_dir();
    let config = || {
        let mut c = TestServer::config(2);
        c.persistence.dir = dir.display().to_string();
        c.persistence.appendonly = true;
        c.persistence.save = String::new();
        c
    };
    let clock = || Arc::new(ManualClock::new(T0_MS, 0));
    {
        let server = TestServer::with_config(config(), clock());
        let mut c = server.raw();
        let body =
            "redis.call('set', KEYS[1], ARGV[1]) return redis.call('incrby', KEYS[2], ARGV[1])";
        assert_eq!(
            call(&mut c, &eval(body, &["2", "{p}a", "{p}b", "7"])),
            ":7\r\n"
        );
        assert_eq!(
            call(&mut c, &eval(body, &["2", "{p}a", "{p}b", "8"])),
            ":15\r\n"
        );
    }
    let server = TestServer::with_config(config(), clock());
    let mut c = server.raw();
    let start = Instant::now();
    while c.call("GET {p}b").starts_with("-LOADING") {
        assert!(start.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.call("MGET {p}a {p}b"), "*2\r\n$1\r\n8\r\n$2\r\n15\r\n");
}
