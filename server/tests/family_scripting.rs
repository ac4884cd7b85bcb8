//! The scripting family in process: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO
//! and SCRIPT. The Lua-to-reply conversions, redis.call and redis.pcall
//! and their errors, the environment's protection, the script cache over
//! threads, the key checks on 2 shards, and the effects a script leaves.
//! The RESP bytes against a real Redis are in `tests/tests/scripting.rs`.

mod common;

use common::{err, ints};
use leasehold_protocol::Reply;
use leasehold_server::harness::Harness;

fn eval(h: &mut Harness, script: &str, rest: &[&str]) -> Reply {
    let mut req = vec!["EVAL", script];
    req.extend_from_slice(rest);
    h.run(&req)
}

fn sha_suffix(body: &str) -> String {
    let sha = match Harness::new().run(&["SCRIPT", "LOAD", body]) {
        Reply::Bulk(b) => String::from_utf8(b.to_vec()).unwrap(),
        other => panic!("{other:?}"),
    };
    format!(" script: {sha}, on @user_script:1.")
}

#[test]
fn the_cases_measured_on_redis() {
    let mut h = Harness::new();
    // L1.
    assert_eq!(
        eval(&mut h, "return redis.call('incr', KEYS[1])", &["1", "c"]),
        Reply::Int(1)
    );
    // L2.
    assert_eq!(
        eval(&mut h, "return 1", &["2", "k"]),
        err("ERR Number of keys can't be greater than number of args")
    );
    // L3.
    assert_eq!(
        h.run(&["EVALSHA", "0000000000000000000000000000000000000000", "0"]),
        err("NOSCRIPT No matching script. Please use EVAL.")
    );
    // L4.
    assert_eq!(
        h.run(&["SCRIPT", "LOAD", "return 'hi'"]),
        Reply::bulk("2f31ba2bb6d6a0f42cc159d2e2dad55440778de3")
    );
    // L5.
    assert_eq!(
        eval(&mut h, "return {1, 2, 3.7, 'x', false, 'after'}", &["0"]),
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(2),
            Reply::Int(3),
            Reply::bulk("x"),
            Reply::Nil,
            Reply::bulk("after"),
        ])
    );
    assert_eq!(eval(&mut h, "return {1, nil, 3}", &["0"]), ints(&[1]));
    // L6.
    assert_eq!(h.cmd("SET notint abc"), Reply::ok());
    assert_eq!(
        eval(
            &mut h,
            "return redis.pcall('incr', KEYS[1])",
            &["1", "notint"]
        ),
        err("ERR value is not an integer or out of range")
    );
    // L7: and the connection goes on.
    let body = "return redis.call('nosuch')";
    let r = eval(&mut h, body, &["0"]);
    assert_eq!(
        r,
        err(&format!(
            "ERR Unknown Redis command called from script{}",
            sha_suffix(body)
        ))
    );
    assert_eq!(h.cmd("PING"), Reply::simple("PONG"));
}

#[test]
fn errors_carry_the_script_and_line_and_pcall_returns_them() {
    let mut h = Harness::new();
    let body = "return redis.call('incr','a','b')";
    assert_eq!(
        eval(&mut h, body, &["0"]),
        err(&format!(
            "ERR Wrong number of args calling Redis command from script{}",
            sha_suffix(body)
        ))
    );
    assert_eq!(
        eval(&mut h, "return redis.pcall('incr','a','b')", &["0"]),
        err("ERR Wrong number of args calling Redis command from script")
    );
    // A handler of its own sees the command's error as Redis's error table.
    assert_eq!(
        eval(
            &mut h,
            "return select(2, xpcall(function() return redis.call('nosuch') end, \
             function(e) return type(e) .. ':' .. e.err end))",
            &["0"]
        ),
        Reply::bulk("table:ERR Unknown Redis command called from script")
    );
    let body = "x = 1";
    assert_eq!(
        eval(&mut h, body, &["0"]),
        err(&format!(
            "ERR user_script:1: Attempt to modify a readonly table{}",
            sha_suffix(body)
        ))
    );
    let body = "return x";
    assert_eq!(
        eval(&mut h, body, &["0"]),
        err(&format!(
            "ERR user_script:1: Script attempted to access nonexistent global variable 'x'{}",
            sha_suffix(body)
        ))
    );
    let body = "error({err='MY boom'})";
    assert_eq!(
        eval(&mut h, body, &["0"]),
        err(&format!("MY boom{}", sha_suffix(body)))
    );
    let body = "\n\nerror('boom')";
    let suffix = sha_suffix(body).replace("@user_script:1.", "@user_script:3.");
    assert_eq!(
        eval(&mut h, body, &["0"]),
        err(&format!("ERR user_script:3: boom{suffix}"))
    );
    assert_eq!(
        eval(&mut h, "return syntax error here", &["0"]),
        err("ERR Error compiling script (new function): user_script:1: '<eof>' expected near 'error'")
    );
    for (body, want) in [
        (
            "return redis.call('multi')",
            "ERR This Redis command is not allowed from script",
        ),
        (
            "return redis.call('eval','return 1','0')",
            "ERR This Redis command is not allowed from script",
        ),
        (
            "return redis.call('subscribe','x')",
            "ERR This Redis command is not allowed from script",
        ),
        (
            "return redis.call()",
            "ERR Please specify at least one argument for this redis lib call",
        ),
        (
            "return redis.call('get',{})",
            "ERR Lua redis lib command arguments must be strings or integers",
        ),
        (
            "return redis.setresp(4)",
            "ERR RESP version must be 2 or 3.",
        ),
        ("redis.log(99, 'x')", "ERR Invalid debug level."),
        (
            "redis.set_repl(99)",
            "ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.",
        ),
    ] {
        assert_eq!(
            eval(&mut h, body, &["0"]),
            err(&format!("{want}{}", sha_suffix(body))),
            "{body}"
        );
    }
    // pcall of redis.call gives the error's text; redis.pcall its table.
    assert_eq!(
        eval(
            &mut h,
            "local ok, e = pcall(redis.call, 'nosuch'); return {tostring(ok), e}",
            &["0"]
        ),
        Reply::Array(vec![
            Reply::bulk("false"),
            Reply::bulk("ERR Unknown Redis command called from script")
        ])
    );
    assert_eq!(
        eval(
            &mut h,
            "local t = redis.pcall('incr', 'a', 'b'); return type(t)..t.err",
            &["0"]
        ),
        Reply::bulk("tableERR Wrong number of args calling Redis command from script")
    );
    assert_eq!(eval(&mut h, "return {err='boom'}", &["0"]), err("boom"));
    assert_eq!(
        eval(&mut h, "return redis.error_reply('boom')", &["0"]),
        err("ERR boom")
    );
    assert_eq!(
        eval(&mut h, "return redis.error_reply('-MY boom')", &["0"]),
        err("MY boom")
    );
    assert_eq!(
        eval(&mut h, "return redis.status_reply('fine')", &["0"]),
        Reply::simple("fine")
    );
    assert_eq!(
        eval(&mut h, "return 1", &["-1"]),
        err("ERR Number of keys can't be negative")
    );
    assert_eq!(
        eval(&mut h, "return 1", &["abc"]),
        err("ERR value is not an integer or out of range")
    );
}

#[test]
fn the_environment_is_redis_and_read_only() {
    let mut h = Harness::new();
    let globals = eval(
        &mut h,
        "local t={} for k in pairs(getmetatable(_G) and {} or {}) do end \
         for _, k in ipairs({'print','dofile','loadfile','setfenv','getfenv','require','os','io','debug'}) do \
           if rawget(_G, k) ~= nil then t[#t+1]=k end end return t",
        &["0"],
    );
    assert_eq!(globals, Reply::Array(vec![]));
    assert!(eval(&mut h, "redis.call = nil", &["0"]).is_error());
    assert!(eval(&mut h, "string.upper = nil", &["0"]).is_error());
    assert!(eval(&mut h, "rawset(_G, 'x', 1)", &["0"]).is_error());
    assert!(eval(&mut h, "setmetatable(_G, nil)", &["0"]).is_error());
    // Nothing leaked into the next script.
    assert_eq!(
        eval(&mut h, "return string.upper('a')", &["0"]),
        Reply::bulk("A")
    );
    assert_eq!(
        eval(&mut h, "return ('a'):upper()", &["0"]),
        Reply::bulk("A")
    );
    assert_eq!(
        eval(
            &mut h,
            "return {redis.LOG_WARNING, redis.REPL_ALL, redis.sha1hex('')}",
            &["0"]
        ),
        Reply::Array(vec![
            Reply::Int(3),
            Reply::Int(3),
            Reply::bulk("da39a3ee5e6b4b0d3255bfef95601890afd80709")
        ])
    );
    assert_eq!(
        eval(
            &mut h,
            "return loadstring(string.dump(function() return 1 end))",
            &["0"]
        ),
        Reply::Nil
    );
    assert_eq!(
        eval(&mut h, "return loadstring('return 7')()", &["0"]),
        Reply::Int(7)
    );
    assert_eq!(
        eval(
            &mut h,
            "return {KEYS[1], KEYS[2], ARGV[1], #ARGV}",
            &["2", "{t}a", "{t}b", "c"]
        ),
        Reply::Array(vec![
            Reply::bulk("{t}a"),
            Reply::bulk("{t}b"),
            Reply::bulk("c"),
            Reply::Int(1)
        ])
    );
}

#[test]
fn replies_become_lua_values_both_ways() {
    let mut h = Harness::new();
    assert_eq!(
        eval(
            &mut h,
            "return type(redis.call('get', KEYS[1]))",
            &["1", "nokey"]
        ),
        Reply::bulk("boolean")
    );
    assert_eq!(
        eval(
            &mut h,
            "redis.setresp(3); return type(redis.call('get', KEYS[1]))",
            &["1", "nokey"]
        ),
        Reply::bulk("nil")
    );
    assert_eq!(
        eval(
            &mut h,
            "local r = redis.call('set', KEYS[1], 'v'); return type(r)..r.ok",
            &["1", "k"]
        ),
        Reply::bulk("tableOK")
    );
    assert_eq!(
        eval(
            &mut h,
            "return redis.call('set', KEYS[1], 0.1)",
            &["1", "k"]
        ),
        Reply::ok()
    );
    assert_eq!(h.cmd("GET k"), Reply::bulk("0.10000000000000001"));
    // Integral numbers too: %.17g writes 1e18 with an exponent, as Redis.
    eval(
        &mut h,
        "return redis.call('set', KEYS[1], 1e18)",
        &["1", "k"],
    );
    assert_eq!(h.cmd("GET k"), Reply::bulk("1e+18"));
    eval(
        &mut h,
        "return redis.call('set', KEYS[1], -42)",
        &["1", "k"],
    );
    assert_eq!(h.cmd("GET k"), Reply::bulk("-42"));
    // Under RESP2 a double is a bulk string, a boolean an integer.
    assert_eq!(
        eval(&mut h, "return {double=0.1}", &["0"]),
        Reply::bulk("0.10000000000000001")
    );
    assert_eq!(
        eval(&mut h, "redis.setresp(3); return false", &["0"]),
        Reply::Int(0)
    );
    assert_eq!(eval(&mut h, "return false", &["0"]), Reply::Nil);
    assert_eq!(eval(&mut h, "return true", &["0"]), Reply::Int(1));
    let mut h3 = h.new_connection();
    assert!(matches!(h3.cmd("HELLO 3"), Reply::Map(_)));
    assert_eq!(
        eval(&mut h3, "return {double=0.1}", &["0"]),
        Reply::Double(0.1)
    );
    assert_eq!(
        eval(&mut h3, "redis.setresp(3); return false", &["0"]),
        Reply::Bool(false)
    );
    assert_eq!(eval(&mut h3, "return false", &["0"]), Reply::Nil);
    assert_eq!(
        eval(&mut h3, "return {map={a=1}}", &["0"]),
        Reply::Map(vec![(Reply::bulk("a"), Reply::Int(1))])
    );
    assert_eq!(
        eval(&mut h3, "return {set={a=true}}", &["0"]),
        Reply::Set(vec![Reply::bulk("a")])
    );
    // RLSTATE's map arrives flat under RESP2 and as {map=...} under RESP3.
    assert_eq!(h.cmd("TOKENLEASE tb 10 1 1000 1"), ints(&[1, 9, 0, 1000]));
    assert_eq!(
        eval(
            &mut h,
            "local r = redis.call('rlstate', KEYS[1]) return r[1].ok .. '=' .. r[2].ok",
            &["1", "tb"]
        ),
        Reply::bulk("type=tokenbucket")
    );
    assert_eq!(
        eval(&mut h, "redis.setresp(3); local m = redis.call('rlstate', KEYS[1]).map for k, v in pairs(m) do if k.ok == 'type' then return v.ok end end", &["1", "tb"]),
        Reply::bulk("tokenbucket")
    );
}

#[test]
fn scripts_are_cached_for_every_thread_and_flushed_for_all() {
    let mut a = Harness::new();
    let mut b = a.connection_on(1);
    let sha = match a.run(&["SCRIPT", "LOAD", "return redis.call('incr', KEYS[1])"]) {
        Reply::Bulk(s) => String::from_utf8(s.to_vec()).unwrap(),
        other => panic!("{other:?}"),
    };
    let k = b.key_on(1, "k");
    assert_eq!(
        b.run(&["EVALSHA", sha.as_str(), "1", k.as_str()]),
        Reply::Int(1)
    );
    assert_eq!(
        b.run(&["EVALSHA", &sha.to_uppercase(), "1", k.as_str()]),
        Reply::Int(2)
    );
    assert_eq!(a.run(&["EVALSHA_RO", sha.as_str(), "1", k.as_str()]), err(&format!(
        "ERR Write commands are not allowed from read-only scripts. script: {sha}, on @user_script:1."
    )));
    assert_eq!(
        a.run(&["SCRIPT", "EXISTS", sha.as_str(), "ffff"]),
        ints(&[1, 0])
    );
    assert_eq!(a.cmd("SCRIPT FLUSH ASYNC"), Reply::ok());
    assert_eq!(
        a.cmd("SCRIPT FLUSH BOGUS"),
        err("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
    );
    assert_eq!(
        b.run(&["EVALSHA", sha.as_str(), "1", k.as_str()]),
        err("NOSCRIPT No matching script. Please use EVAL.")
    );
    assert_eq!(a.run(&["SCRIPT", "EXISTS", sha.as_str()]), ints(&[0]));
    // EVAL caches its body too.
    assert_eq!(
        eval(
            &mut a,
            "return redis.call('incr', KEYS[1])",
            &["1", k.as_str()]
        ),
        Reply::Int(3)
    );
    assert_eq!(
        b.run(&["EVALSHA", sha.as_str(), "1", k.as_str()]),
        Reply::Int(4)
    );
    assert_eq!(
        a.cmd("SCRIPT KILL"),
        err("NOTBUSY No scripts in execution right now.")
    );
    assert_eq!(
        a.cmd("SCRIPT NOPE"),
        err("ERR unknown subcommand 'NOPE'. Try SCRIPT HELP.")
    );
    assert_eq!(
        a.cmd("SCRIPT"),
        err("ERR wrong number of arguments for 'script' command")
    );
    assert!(matches!(a.cmd("SCRIPT HELP"), Reply::Array(l) if l.len() > 4));
    assert!(a.run(&["SCRIPT", "LOAD", "return +"]).is_error());
}

#[test]
fn a_script_touches_only_keys_of_its_shard() {
    let mut h = Harness::with_shards(2);
    let (a, b) = (h.key_on(0, "a"), h.key_on(1, "b"));
    let body = "return redis.call('incr', KEYS[1]) + redis.call('incr', KEYS[2])";
    let r = h.run(&["EVAL", body, "2", a.as_str(), b.as_str()]);
    match &r {
        Reply::Error(e) => {
            assert!(
                e.starts_with("CROSSSLOT Keys in request don't hash to the same slot"),
                "{e}"
            );
            assert!(e.contains("hash tag"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // Declared on one shard, touching the other.
    let body = "redis.call('incr', KEYS[1]); return redis.call('incr', ARGV[1])";
    match h.run(&["EVAL", body, "1", a.as_str(), b.as_str()]) {
        Reply::Error(e) => {
            assert!(
                e.starts_with(&format!("ERR Script attempted to access key '{b}'")),
                "{e}"
            );
            assert!(e.contains("hash tag"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // The write before the refusal stays, as in Redis.
    assert_eq!(h.run(&["GET", a.as_str()]), Reply::bulk("1"));
    // One hash tag: both on one shard, from a connection of either thread.
    let mut other = h.connection_on(1);
    for c in [&mut h, &mut other] {
        let r = c.run(&[
            "EVAL",
            "return {redis.call('incr', KEYS[1]), redis.call('incr', KEYS[2])}",
            "2",
            "{u}:a",
            "{u}:b",
        ]);
        assert!(matches!(r, Reply::Array(ref v) if v.len() == 2), "{r:?}");
    }
    assert_eq!(
        h.run(&["MGET", "{u}:a", "{u}:b"]),
        Reply::Array(vec![Reply::bulk("2"), Reply::bulk("2")])
    );
    let body = "return redis.call('dbsize')";
    assert_eq!(
        h.run(&["EVAL", body, "0"]),
        err(&format!(
            "ERR 'dbsize' runs on every shard and is not available from scripts on a server of several threads{}",
            sha_suffix(body)
        ))
    );
    let mut one = Harness::with_shards(1);
    assert_eq!(one.run(&["EVAL", body, "0"]), Reply::Int(0));
}

#[test]
fn writes_leave_their_effects_and_eval_none_of_its_own() {
    let mut h = Harness::with_shards(1);
    let (reply, effects) = h.run_effects(&[
        "EVAL",
        "redis.call('set', KEYS[1], 'v'); return redis.call('incr', KEYS[2])",
        "2",
        "s",
        "n",
    ]);
    assert_eq!(reply, Reply::Int(1));
    let names: Vec<String> = effects.iter().map(|e| e[0].to_ascii_uppercase()).collect();
    assert!(!names.iter().any(|n| n.starts_with("EVAL")), "{effects:?}");
    // Its writes name two slots: one unit, framed, which a replica of
    // two threads (holding them on two shards) applies at once.
    assert_eq!(names, ["MULTI", "SET", "SET", "EXEC"], "{effects:?}");
    let (_, none) = h.run_effects(&["EVAL", "return redis.call('get', KEYS[1])", "1", "s"]);
    assert!(none.is_empty(), "{none:?}");
}

#[test]
fn eval_runs_inside_multi() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(
        h.run(&["EVAL", "return redis.call('incr', KEYS[1])", "1", "m"]),
        Reply::simple("QUEUED")
    );
    assert_eq!(
        h.run(&["EVALSHA", "0000000000000000000000000000000000000000", "0"]),
        Reply::simple("QUEUED")
    );
    assert_eq!(
        h.cmd("EXEC"),
        Reply::Array(vec![
            Reply::Int(1),
            err("NOSCRIPT No matching script. Please use EVAL.")
        ])
    );
}

#[test]
fn eval_ro_reads_and_refuses_writes() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("SET k v"), Reply::ok());
    assert_eq!(
        h.run(&["EVAL_RO", "return redis.call('get', KEYS[1])", "1", "k"]),
        Reply::bulk("v")
    );
    let body = "return redis.call('set', KEYS[1], 'x')";
    let sha = sha_suffix(body);
    assert_eq!(
        h.run(&["EVAL_RO", body, "1", "k"]),
        err(&format!(
            "ERR Write commands are not allowed from read-only scripts.{sha}"
        ))
    );
    assert_eq!(
        h.run(&[
            "EVAL_RO",
            "return redis.pcall('set', KEYS[1], 'x')",
            "1",
            "k"
        ]),
        err("ERR Write commands are not allowed from read-only scripts.")
    );
    assert_eq!(h.cmd("GET k"), Reply::bulk("v"));
}
