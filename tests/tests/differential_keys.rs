//! Differential tests of the string and key commands added after the first
//! Redis subset: SETRANGE, GETRANGE, SUBSTR, MSETNX, RENAME, RENAMENX, COPY,
//! TOUCH, RANDOMKEY, OBJECT, MEMORY and MONITOR's line format, byte for byte
//! against a real `redis-server`, in RESP2 and RESP3, on 1 and 2 threads
//! (with keys on both shards, so the commands over two shards are compared
//! too). See `leasehold_tests::differential` for how the pair starts.

use std::time::Duration;

use leasehold_tests::differential::{hello_without_id, Pair};
use leasehold_tests::{cmd, int_of, keys_in_both_halves, on_1_and_2_threads, Raw};

/// Switches both connections to RESP `version` and checks HELLO answers alike.
fn hello(p: &mut Pair, version: u8) {
    let (r, l) = p.both_raw(&cmd(&format!("HELLO {version}")));
    assert_eq!(hello_without_id(&r), hello_without_id(&l));
}

/// The requests compared in RESP2, then again from a clean keyspace in RESP3.
fn in_both_protocols(p: &mut Pair, requests: &[String]) {
    let requests: Vec<&str> = requests.iter().map(String::as_str).collect();
    p.same(&requests);
    p.same(&["FLUSHALL"]);
    hello(p, 3);
    p.same(&requests);
    p.same(&["FLUSHALL"]);
    hello(p, 2);
}

on_1_and_2_threads! {
    fn setrange_getrange_substr(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        let requests: Vec<String> = [
            "SET k hello", "SETRANGE k 6 Redis", "GET k", "SETRANGE k 0 J", "GET k", "SETRANGE k 20 x",
            "STRLEN k", "GET k", "SETRANGE k 3 ''", "SETRANGE new 0 ''", "EXISTS new", "SETRANGE new 2 ab",
            "GET new", "SETRANGE k -1 x", "SETRANGE k x x", "SETRANGE k 536870911 xy",
            "SETRANGE k 9223372036854775807 x", "SET n 12345", "SETRANGE n 1 x", "GET n", "SET t v EX 100",
            "SETRANGE t 1 x", "TTL t", "SETRANGE k", "GETRANGE k 0 -1", "GETRANGE k 0 -2",
            "GETRANGE k -3 -1", "GETRANGE k 1 2", "GETRANGE k 3 100", "GETRANGE k -100 1", "GETRANGE k 4 2",
            "GETRANGE k -1 -3", "GETRANGE k 50 60", "GETRANGE k 0 0", "GETRANGE nokey 0 -1",
            "GETRANGE k x 1", "GETRANGE k 0", "SET m -1234", "GETRANGE m 1 2", "SUBSTR k 1 3",
            "SUBSTR nokey 0 1", "SUBSTR k 0", "SET e ''", "GETRANGE e 0 -1", "GETRANGE e 0 0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        in_both_protocols(&mut p, &requests);
        // An empty value writes nothing: 0 and no key when missing, the length otherwise.
        p.same_args(&[b"SETRANGE", b"none", b"5", b""]);
        p.same(&["EXISTS none", "SET k abc"]);
        p.same_args(&[b"SETRANGE", b"k", b"10", b""]);
        p.same_args(&[b"SETRANGE", b"k", b"1", b"\x00\r\n"]);
        p.same(&["GET k", "STRLEN k"]);
    }

    fn rename_renamenx_copy_msetnx(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        // Pairs on one shard and, on 2 threads, on two.
        let keys = keys_in_both_halves("mv", 2);
        let mut requests = Vec::new();
        for (a, b) in [(keys[0].as_str(), keys[1].as_str()), ("{t}a", "{t}b"), (keys[1].as_str(), keys[0].as_str())] {
            for r in [
                "RENAME A B", "RENAMENX A B", "COPY A B", "SET A v", "RENAME A A", "RENAMENX A A", "COPY A A",
                "RENAME A B", "GET A", "GET B", "EXISTS A B", "SET A w", "RENAMENX A B", "GET B",
                "RENAME A B", "GET B", "EXISTS A", "SET A x", "COPY A B", "COPY A B REPLACE", "GET B",
                "COPY A B DB 0 REPLACE", "COPY A B DB 1", "COPY A B DB x", "COPY A B DB", "COPY A B BOGUS",
                "SET A 5", "COPY A B REPLACE", "OBJECT ENCODING B", "INCR B", "GET A", "DEL A B",
                "MSETNX A 1 B 2", "MGET A B", "MSETNX A 3 C 4", "EXISTS C", "MGET A B", "MSETNX A 1 B",
                "DEL A B", "MSETNX A 1 A 2", "GET A", "DEL A",
            ] {
                requests.push(r.replace('A', a).replace('B', b).replace('C', "{t}c"));
            }
        }
        requests.extend(["RENAME", "RENAME a", "RENAMENX a b c", "COPY a", "MSETNX", "MSETNX a"].map(String::from));
        in_both_protocols(&mut p, &requests);
        // The TTL moves with the value: within a few ms on both servers.
        for (a, b) in [(keys[0].as_str(), keys[1].as_str()), ("{t}a", "{t}b")] {
            p.same(&[&format!("SET {a} v PX 100000"), &format!("RENAME {a} {b}")]);
            p.close(&format!("PTTL {b}"), 50);
            p.same(&[&format!("COPY {b} {a}")]);
            p.close(&format!("PTTL {a}"), 50);
            p.same(&[&format!("PERSIST {a}"), &format!("RENAME {a} {b}"), &format!("PTTL {b}")]);
        }
    }

    fn touch_randomkey_object_memory(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        let keys = keys_in_both_halves("tk", 2);
        let (a, b) = (&keys[0], &keys[1]);
        let long = "x".repeat(45);
        let requests: Vec<String> = vec![
            "RANDOMKEY".into(), format!("TOUCH {a} {b}"), format!("SET {a} 1"), format!("TOUCH {a} {b} {a}"),
            "RANDOMKEY".into(), format!("OBJECT ENCODING {a}"), format!("OBJECT REFCOUNT {a}"),
            format!("SET {b} 123456"), format!("OBJECT ENCODING {b}"), format!("OBJECT REFCOUNT {b}"),
            format!("SET {b} hello"), format!("OBJECT ENCODING {b}"), format!("SET {b} {}", "y".repeat(44)),
            format!("OBJECT ENCODING {b}"), format!("SET {b} {long}"), format!("OBJECT ENCODING {b}"),
            format!("SET {b} 01"), format!("OBJECT ENCODING {b}"), format!("OBJECT REFCOUNT {b}"),
            "OBJECT ENCODING nokey".into(), "OBJECT FREQ nokey".into(), "OBJECT IDLETIME nokey".into(),
            "OBJECT REFCOUNT nokey".into(), format!("OBJECT FREQ {a}"), "OBJECT ENCODING".into(),
            format!("OBJECT ENCODING {a} {b}"), "OBJECT HELP".into(), "OBJECT HELP x".into(),
            "OBJECT Foo".into(), "OBJECT".into(), "MEMORY USAGE nokey".into(), "MEMORY USAGE".into(),
            format!("MEMORY USAGE {a} SAMPLES"), format!("MEMORY USAGE {a} SAMPLES -1"),
            "MEMORY USAGE nokey SAMPLES x".into(), format!("MEMORY USAGE {a} BOGUS 1"), "MEMORY FOO".into(),
            "MEMORY".into(), "TOUCH".into(), "RANDOMKEY x".into(),
        ];
        in_both_protocols(&mut p, &requests);
        // IDLETIME is 0 in Leasehold (no access clock) and right after a write in Redis.
        p.same(&[&format!("SET {a} hello"), &format!("OBJECT IDLETIME {a}")]);
        // MEMORY USAGE is each server's own accounting: both answer an integer.
        let (r, l) = p.both_raw(&cmd(&format!("MEMORY USAGE {a}")));
        assert!(r.starts_with(':') && l.starts_with(':'), "Redis {r:?}, Leasehold {l:?}");
        p.same(&[&format!("DEL {a}"), "RANDOMKEY", &format!("SET {b} v"), "RANDOMKEY"]);
    }

    fn monitor_lines(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        p.same(&["MONITOR"]);
        let (mut redis, mut lh) = p.connect_again();
        let keys = keys_in_both_halves("mon", 2);
        let sent: Vec<Vec<u8>> = vec![
            leasehold_tests::resp(&[b"SET", keys[0].as_bytes(), b"x y\n\"\x01\\\t"]),
            cmd(&format!("GET {}", keys[0])),
            cmd("NOSUCH x"),
            cmd("GET"),
            cmd("CONFIG GET port"),
            cmd("CLIENT LIST"),
            cmd("CLIENT SETNAME who"),
            cmd("MULTI"),
            cmd(&format!("INCR {}", keys[1])),
            cmd(&format!("RENAME {} {}", keys[0], keys[1])),
            cmd("EXEC"),
            cmd("AUTH pw"),
            cmd("HELLO 2 AUTH default pw"),
            cmd("PING"),
        ];
        for request in &sent {
            redis.send(request);
            lh.send(request);
            let _ = (redis.read_text(), lh.read_text());
        }
        let r = lines_after_addr(&mut p.redis, sent.len() - 4);
        let l = lines_after_addr(&mut p.lh, sent.len() - 4);
        assert_eq!(l, r, "monitor lines");
        // Keys are off limits to a monitor; it sees its own PING after the
        // reply; a second MONITOR answers nothing; RESET ends it.
        p.same(&["GET k"]);
        p.redis.send(&cmd("PING"));
        p.lh.send(&cmd("PING"));
        let r = lines_after_addr(&mut p.redis, 2);
        let l = lines_after_addr(&mut p.lh, 2);
        assert_eq!(l, r);
        p.lh.send(&cmd("MONITOR"));
        p.redis.send(&cmd("MONITOR"));
        p.same(&["RESET", "GET k"]);
        p.same(&[&format!("DEL {}", keys[1])]);
        let _ = (&mut redis, &mut lh);
    }
}

/// Reads `n` monitor lines from `c` (each `+<time> [0 <addr>] <args>`) and
/// returns what follows each `] `, the part that must match byte for byte.
fn lines_after_addr(c: &mut Raw, n: usize) -> Vec<String> {
    let mut got = String::new();
    while got.matches("\r\n").count() < n {
        let chunk = c.read_raw_for(Duration::from_millis(500));
        assert!(!chunk.is_empty(), "only {got:?}");
        got.push_str(&String::from_utf8_lossy(&chunk));
    }
    got.lines()
        .map(|l| {
            let Some((head, rest)) = l.split_once("] ") else {
                return l.to_string();
            };
            assert!(
                head.starts_with('+') && head.contains(" [0 127.0.0.1:"),
                "{l}"
            );
            rest.trim_end().to_string()
        })
        .collect()
}

/// The `# Section` names and the field names of an INFO reply, in order.
fn info_shape(c: &mut Raw, args: &str) -> Vec<String> {
    c.send(&cmd(&format!("INFO {args}")));
    let text = leasehold_tests::text(&c.read_reply());
    // The bulk's header line, then the text.
    text.lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| l.split(':').next().unwrap_or(l).to_string())
        .collect()
}

on_1_and_2_threads! {
    fn info_sections_and_field_names(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        p.same(&["SET k v", "GET nokey", "INCR k"]);
        for args in ["", "default", "all", "server clients", "CPU keyspace", "modules", "cluster", "nosuch"] {
            let headers = |shape: &[String]| -> Vec<String> {
                shape.iter().filter(|l| l.starts_with('#')).cloned().collect()
            };
            let (r, l) = (info_shape(&mut p.redis, args), info_shape(&mut p.lh, args));
            assert_eq!(headers(&l), headers(&r), "INFO {args}");
        }
        // Every field Leasehold reports is one Redis reports, in the same
        // section, but Leasehold's own (and commandstats' rows, per command;
        // the `acl_access_denied_*` counters are Redis 7.2's, not in 7.0).
        let ours = [
            "leasehold_version",
            "threads",
            "cross_shard_batches",
            "acl_access_denied_auth",
            "acl_access_denied_cmd",
            "acl_access_denied_key",
            "acl_access_denied_channel",
        ];
        let redis = info_shape(&mut p.redis, "everything");
        let mut section = String::new();
        for field in info_shape(&mut p.lh, "all") {
            if field.starts_with('#') {
                section = field;
                continue;
            }
            if ours.contains(&field.as_str()) || field.starts_with("cmdstat_") {
                continue;
            }
            let at = redis.iter().position(|f| *f == section).expect("section in Redis");
            let end = redis[at + 1..].iter().position(|f| f.starts_with('#')).map_or(redis.len(), |e| at + 1 + e);
            assert!(redis[at..end].contains(&field), "{field} is not a Redis 7.0 field of {section}");
        }
        // errorstats: the same counts by code for the same errors.
        p.same(&["CONFIG RESETSTAT", "GET", "SET k v", "INCR k", "MULTI", "FOO", "EXEC", "INFO errorstats"]);
    }

    fn client_list_field_names(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        let names = |c: &mut Raw| -> Vec<String> {
            c.send(&cmd("CLIENT INFO"));
            let line = leasehold_tests::text(&c.read_reply());
            let fields = line.split_whitespace().skip(1); // the bulk's header
            fields.map(|f| f.split('=').next().unwrap().to_string()).collect()
        };
        assert_eq!(names(&mut p.lh), names(&mut p.redis));
    }
}

/// Runs `body` (a script over the keys `{t}a` to `{t}d`, whose ARGV[1] is a
/// loop count) on `c` with ever longer loops until one EVAL takes at least
/// 300 ms; returns its reply and how long it took, ms.
fn long_eval(c: &mut Raw, body: &str, ttl_ms: &str) -> (String, u128) {
    let mut spins: u64 = 1_000_000;
    loop {
        let n = spins.to_string();
        let start = std::time::Instant::now();
        let args: [&[u8]; 9] = [
            b"EVAL",
            body.as_bytes(),
            b"4",
            b"{t}a",
            b"{t}b",
            b"{t}c",
            b"{t}d",
            n.as_bytes(),
            ttl_ms.as_bytes(),
        ];
        let reply = c.call_args(&args);
        let took = start.elapsed().as_millis();
        if took >= 300 {
            return (reply, took);
        }
        spins *= 2;
    }
}

/// Relative TTLs count from the wall clock at the call, as Redis 7.0's
/// `mstime()`, not from the start of the batch or script: after a script
/// that spins, then sets 5 s TTLs by PEXPIRE, SET PX, PSETEX and GETEX PX,
/// each key has about 5 s left; PTTL inside a script, after the spin, has
/// the spin's time less. (Whether a key has expired is still judged at the
/// script's start: a key does not expire under a running script.)
#[test]
fn relative_ttls_count_from_the_call_in_a_long_script() {
    let Some(mut p) = Pair::start(1) else { return };
    let set_at_end = "redis.call('set', KEYS[1], 'v') redis.call('set', KEYS[4], 'v') \
        for i = 1, tonumber(ARGV[1]) do end \
        redis.call('pexpire', KEYS[1], ARGV[2]) redis.call('set', KEYS[2], 'v', 'px', ARGV[2]) \
        redis.call('psetex', KEYS[3], ARGV[2], 'v') redis.call('getex', KEYS[4], 'px', ARGV[2]) \
        return 1";
    let read_at_end = "redis.call('set', KEYS[1], 'v', 'px', ARGV[2]) \
        for i = 1, tonumber(ARGV[1]) do end \
        return redis.call('pttl', KEYS[1])";
    for (name, c) in [("redis", &mut p.redis), ("leasehold", &mut p.lh)] {
        let (reply, took) = long_eval(c, set_at_end, "5000");
        assert_eq!(reply, ":1\r\n", "{name}");
        for key in ["{t}a", "{t}b", "{t}c", "{t}d"] {
            let left = int_of(&c.call(&format!("PTTL {key}")));
            assert!(
                (4_900..=5_000).contains(&left),
                "{name}: PTTL {key} is {left} ms after a script of {took} ms"
            );
        }
        c.call("FLUSHALL");
        let (reply, took) = long_eval(c, read_at_end, "5000");
        let left = int_of(&reply) as i128;
        let expected = 5_000 - took as i128;
        assert!(
            (expected - 20..=expected + 100).contains(&left),
            "{name}: PTTL in the script is {left} ms after a spin of about {took} ms"
        );
        c.call("FLUSHALL");
    }
}
