//! ACL end to end, on 1 and 2 threads: the error texts and the shapes of
//! ACL GETUSER / LIST / CAT against a real `redis-server` (differential;
//! skipped with a notice when it is missing, unless
//! `LEASEHOLD_REQUIRE_REDIS=1`), a gateway user limited to the rate-limit
//! commands on `rl:*` driven raw, by `redis-cli` and by redis-py (both
//! looked up the same way), a user deleted while connected, MULTI and
//! scripts under a restricted user, `requirepass` as the default user's
//! password, and the ACL file at the start, by ACL SAVE and ACL LOAD.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use leasehold_server::clock::SystemClock;
use leasehold_tests::differential::Pair;
use leasehold_tests::{cmd, on_1_and_2_threads, Closed, Raw, TestServer};

const SECRET_SHA: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";

/// Whether an external program runs; without it, a notice and `false`
/// unless `LEASEHOLD_REQUIRE_REDIS=1`, which makes its absence a failure.
fn have(program: &str, probe: &[&str]) -> bool {
    let missing = format!("{program} {probe:?} does not run");
    leasehold_testkit::probe_runs(
        program,
        probe,
        "LEASEHOLD_REQUIRE_REDIS",
        &missing,
        "this part of the ACL test",
    )
}

/// A connection authenticated as `user`.
fn login(server: &TestServer, user: &str, pass: &str) -> Raw {
    let mut c = server.raw();
    assert_eq!(c.call(&format!("AUTH {user} {pass}")), "+OK\r\n");
    c
}

const NOPERM_KEY: &str =
    "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n";
const NOPERM_CHANNEL: &str =
    "-NOPERM this user has no permissions to access one of the channels used as arguments\r\n";

fn noperm_cmd(name: &str) -> String {
    format!("-NOPERM this user has no permissions to run the '{name}' command\r\n")
}

on_1_and_2_threads! {
    fn differential_texts_and_shapes(threads) {
        let Some(mut p) = Pair::start(threads) else { return };
        // Single commands after the categories: Redis 7.0 lists them in its
        // hash table's order, so the words are compared, not their order.
        let same_words = |p: &mut Pair, req: &str| {
            let (r, l) = p.both_raw(&cmd(req));
            let words = |s: &str| {
                let mut w: Vec<String> = s.split([' ', '\r', '\n']).map(String::from).collect();
                w.sort();
                w
            };
            assert_eq!(words(&r), words(&l), "{req}: Redis {r:?}, Leasehold {l:?}");
        };
        p.same(&[
            "ACL WHOAMI", "ACL USERS", "ACL LIST", "ACL GETUSER default", "ACL GETUSER nosuch",
            "ACL SETUSER x bogus", "ACL SETUSER x +nosuch", "ACL SETUSER x +@nosuch", "ACL SETUSER x #abc",
            "ACL SETUSER x %X~a", "ACL SETUSER x nosuch|x", "ACL SETUSER x allkeys ~a",
            "ACL SETUSER x &* &a", "ACL SETUSER x <nope", "ACL USERS",
            "ACL SETUSER gw on >secret ~rl:* %R~ro:* &chan* +get -set +config|get",
            "ACL GETUSER default",
        ]);
        same_words(&mut p, "ACL LIST");
        same_words(&mut p, "ACL GETUSER gw");
        p.same(&[
            "ACL SETUSER gw -get", "ACL LIST",
            "ACL SETUSER t reset +@read -get", "ACL GETUSER t",
            "ACL SETUSER t reset +@string -@string", "ACL GETUSER t",
            "ACL SETUSER t reset +@all -@string +get", "ACL GETUSER t",
            "ACL SETUSER t reset +@hash +@list -lpush", "ACL GETUSER t",
            "ACL SETUSER t reset +config|get +config", "ACL GETUSER t",
            "ACL SETUSER t reset on nopass allkeys allchannels allcommands -@dangerous", "ACL GETUSER t",
            "ACL SETUSER t resetkeys %RW~a %W~b %R~c", "ACL LIST",
            "ACL DELUSER default", "ACL DELUSER nosuch t", "ACL USERS",
            "ACL", "ACL FOO", "ACL GETUSER", "ACL WHOAMI x", "ACL CAT nosuch", "ACL LOAD", "ACL SAVE",
            "ACL GENPASS 0", "ACL LOG RESET", "ACL LOG x", "ACL HELP",
            "ACL DRYRUN gw set a 1", "ACL DRYRUN gw get a", "ACL DRYRUN gw get rl:a",
            "ACL DRYRUN nosuch get a", "ACL DRYRUN gw nosuchcmd",
            "AUTH x", "AUTH gw wrong", "AUTH nosuch secret",
        ]);
        // RESP3's map.
        p.hello(3);
        p.same(&["ACL GETUSER gw", "ACL GETUSER t", "ACL GETUSER default", "ACL LOG RESET", "ACL LOG"]);
        p.hello(2);
        // Redis's categories, then Leasehold's one more.
        let (r, l) = p.both_raw(&cmd("ACL CAT"));
        assert_eq!(r.replacen("*21\r\n", "*22\r\n", 1) + "$9\r\nratelimit\r\n", l);
        // The refusals, as the user sees them.
        let (mut r, mut l) = p.connect_again();
        for c in [&mut r, &mut l] {
            assert_eq!(c.call("AUTH gw secret"), "+OK\r\n");
        }
        for req in [
            "SET rl:1 v", "GET other", "GET rl:1", "CONFIG GET maxclients", "CONFIG SET maxclients 10",
            "PUBLISH chan1 m", "PUBLISH other m", "ACL WHOAMI", "PING",
        ] {
            assert_eq!(r.call(req), l.call(req), "{req}");
        }
        p.same(&["ACL LOG RESET", "ACL LOG"]);
    }

    fn gateway_user_limited_to_rate_limits(threads) {
        let server = TestServer::start(threads);
        let mut admin = server.raw();
        assert_eq!(admin.call("ACL SETUSER gw on >secret resetkeys ~rl:* -@all +@ratelimit"), "+OK\r\n");
        assert_eq!(
            admin.call("ACL LIST"),
            format!("*2\r\n{}{}", bulk("user default on nopass ~* &* +@all"), bulk(&format!("user gw on #{SECRET_SHA} ~rl:* resetchannels -@all +@ratelimit")))
        );
        let mut gw = login(&server, "gw", "secret");
        assert_eq!(gw.call("ACL WHOAMI"), noperm_cmd("acl|whoami"));
        assert_eq!(gw.call("TOKENLEASE rl:x 10 1 1000 1"), "*4\r\n:1\r\n:9\r\n:0\r\n:1000\r\n");
        assert!(!gw.call("TOKENRETURN rl:x 10 1 1000 1").starts_with('-'));
        assert_eq!(gw.call("TOKENLEASE other:x 10 1 1000 1"), NOPERM_KEY);
        assert_eq!(gw.call("SET rl:x 1"), noperm_cmd("set"));
        assert_eq!(gw.call("LH.PIN rl: TOKENBUCKET 1 1 1"), noperm_cmd("lh.pin"));
        assert_eq!(gw.call("LH.RESTORE rl:x TOKENBUCKET 1 1 1 1 PXAT 1"), noperm_cmd("lh.restore"));
        assert_eq!(gw.call("SUBSCRIBE c"), noperm_cmd("subscribe"));
        // The unrestricted default user is not affected.
        assert_eq!(admin.call("SET other:x 1"), "+OK\r\n");
        // The denials are in ACL LOG, newest first.
        let log = admin.call("ACL LOG 1");
        assert!(log.starts_with("*1\r\n*14\r\n$5\r\ncount\r\n:1\r\n$6\r\nreason\r\n$7\r\ncommand\r\n"), "{log}");
        assert!(log.contains("$9\r\nsubscribe\r\n") && log.contains("user=gw"), "{log}");
        assert!(admin.call("CLIENT LIST").contains(" user=gw "));
        // HELLO 3 AUTH logs in too.
        let mut h = server.raw();
        assert!(h.call("HELLO 3 AUTH gw secret").starts_with('%'));
        assert_eq!(h.call("SET rl:x 1"), noperm_cmd("set"));
        assert_eq!(h.call("HELLO 3 AUTH gw wrong"), "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
        // A user switched off cannot log in; its open connections keep going.
        assert_eq!(admin.call("ACL SETUSER gw off"), "+OK\r\n");
        assert_eq!(server.raw().call("AUTH gw secret"), "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
        assert_eq!(gw.call("SET rl:x 1"), noperm_cmd("set"));
        // Rules changed while connected apply to the next command.
        assert_eq!(admin.call("ACL SETUSER gw +set"), "+OK\r\n");
        assert_eq!(gw.call("SET rl:x 1"), "+OK\r\n");
    }

    fn deleted_user_is_disconnected(threads) {
        let server = TestServer::start(threads);
        let mut admin = server.raw();
        assert_eq!(admin.call("ACL SETUSER gone on nopass ~* +@all"), "+OK\r\n");
        let mut c = login(&server, "gone", "x");
        let mut d = login(&server, "gone", "y");
        assert_eq!(c.call("PING"), "+PONG\r\n");
        assert_eq!(admin.call("ACL DELUSER gone"), ":1\r\n");
        for conn in [&mut c, &mut d] {
            match conn.read_until_closed(Duration::from_secs(5)) {
                Closed::Yes(b) => assert!(b.is_empty(), "{b:?}"),
                Closed::No(b) => panic!("still open after ACL DELUSER: {b:?}"),
            }
        }
        assert_eq!(admin.call("PING"), "+PONG\r\n");
        assert_eq!(admin.call("CLIENT KILL USER gone"), "-ERR No such user 'gone'\r\n");
    }

    fn multi_and_scripts_are_checked(threads) {
        let server = TestServer::start(threads);
        let mut admin = server.raw();
        assert_eq!(admin.call("ACL SETUSER s on >pw ~rl:* &ch* +set +get +multi +exec +eval +publish"), "+OK\r\n");
        let mut c = login(&server, "s", "pw");
        c.script(&[
            ("MULTI", "+OK\r\n"),
            ("SET rl:a 1", "+QUEUED\r\n"),
            ("INCR rl:a", &noperm_cmd("incr")),
            ("SET x 1", NOPERM_KEY),
            ("EXEC", "-EXECABORT Transaction discarded because of previous errors.\r\n"),
            ("GET rl:a", "$-1\r\n"),
            ("EVAL return(1) 1 x", NOPERM_KEY),
            ("EVAL return{KEYS[1],ARGV[1],#ARGV} 1 rl:a b", "*3\r\n$4\r\nrl:a\r\n$1\r\nb\r\n:1\r\n"),
            ("EVAL return(1) 3 rl:a b", "-ERR Number of keys can't be greater than number of args\r\n"),
            ("PUBLISH nope m", NOPERM_CHANNEL),
        ]);
        let call = |c: &mut Raw, script: &str| c.call_args(&[b"EVAL", script.as_bytes(), b"1", b"rl:{a}"]);
        assert_eq!(admin.call("ACL LOG RESET"), "+OK\r\n");
        let denied_cmd = call(&mut c, "return redis.call('incr', 'rl:{a}')");
        assert!(denied_cmd.starts_with("-ERR The user executing the script can't run this command or subcommand script: "), "{denied_cmd}");
        let denied_key = call(&mut c, "return redis.call('get', 'x{a}')");
        assert!(denied_key.starts_with("-ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script: "), "{denied_key}");
        // Both in ACL LOG (context lua, as Redis 7 logs a script's denials), newest first.
        let log = admin.call("ACL LOG");
        assert!(log.starts_with("*2\r\n"), "{log}");
        assert_eq!(log.matches("$7\r\ncontext\r\n$3\r\nlua\r\n").count(), 2, "{log}");
        let (key, cmd) = (log.find("$6\r\nreason\r\n$3\r\nkey\r\n"), log.find("$6\r\nreason\r\n$7\r\ncommand\r\n"));
        assert!(matches!((key, cmd), (Some(k), Some(c)) if k < c), "{log}");
        assert!(log.contains("$8\r\nusername\r\n$1\r\ns\r\n"), "{log}");
        assert_eq!(call(&mut c, "return redis.call('set', 'rl:{a}', '1')"), "+OK\r\n");
        // The default user's scripts are not checked.
        assert_eq!(call(&mut admin, "return redis.call('incr', 'rl:{a}')"), ":2\r\n");
    }

    fn requirepass_is_the_default_users_password(threads) {
        let mut config = TestServer::config(threads);
        config.security.requirepass = "secret".into();
        let server = TestServer::with_config(config, Arc::new(SystemClock::new()));
        let mut c = server.raw();
        assert_eq!(c.call("ACL WHOAMI"), "-NOAUTH Authentication required.\r\n");
        assert_eq!(c.call("AUTH default secret"), "+OK\r\n");
        assert_eq!(c.call("ACL LIST"), format!("*1\r\n{}", bulk(&format!("user default on #{SECRET_SHA} ~* &* +@all"))));
        assert_eq!(c.call_args(&[b"CONFIG", b"SET", b"requirepass", b""]), "+OK\r\n");
        assert_eq!(c.call("ACL LIST"), "*1\r\n$34\r\nuser default on nopass ~* &* +@all\r\n");
        // With the default user nopass again, a new connection needs no AUTH.
        assert_eq!(server.raw().call("ACL WHOAMI"), "$7\r\ndefault\r\n");
        // A password given to the default user by ACL is required like one from requirepass.
        assert_eq!(c.call("ACL SETUSER default resetpass >other"), "+OK\r\n");
        let mut n = server.raw();
        assert_eq!(n.call("GET k"), "-NOAUTH Authentication required.\r\n");
        assert_eq!(n.call("AUTH other"), "+OK\r\n");
        assert_eq!(n.call("RESET"), "+RESET\r\n");
        assert_eq!(n.call("GET k"), "-NOAUTH Authentication required.\r\n");
    }

    fn acl_file_at_start_save_and_load(threads) {
        let dir = leasehold_testkit::scratch_dir();
        let path = dir.join("users.acl");
        std::fs::write(&path, format!("# gateway\nuser gw on #{SECRET_SHA} ~rl:* resetchannels -@all +tokenlease +tokenreturn\n")).unwrap();
        let mut config = TestServer::config(threads);
        config.security.aclfile = path.display().to_string();
        let server = TestServer::with_config(config.clone(), Arc::new(SystemClock::new()));
        let mut admin = server.raw();
        assert_eq!(admin.call("ACL USERS"), "*2\r\n$7\r\ndefault\r\n$2\r\ngw\r\n");
        let mut gw = login(&server, "gw", "secret");
        assert_eq!(gw.call("TOKENLEASE rl:x 10 1 1000 1"), "*4\r\n:1\r\n:9\r\n:0\r\n:1000\r\n");
        assert_eq!(gw.call("GET rl:x"), noperm_cmd("get"));
        // SAVE writes every user; LOAD brings the file back.
        assert_eq!(admin.call("ACL SETUSER extra on nopass +ping"), "+OK\r\n");
        assert_eq!(admin.call("ACL SAVE"), "+OK\r\n");
        let saved = std::fs::read_to_string(&path).unwrap();
        assert_eq!(saved, format!("user default on nopass ~* &* +@all\nuser extra on nopass resetchannels -@all +ping\nuser gw on #{SECRET_SHA} ~rl:* resetchannels -@all +tokenlease +tokenreturn\n"));
        std::fs::write(&path, format!("user gw on #{SECRET_SHA} ~rl:* resetchannels -@all +tokenlease\n")).unwrap();
        assert_eq!(admin.call("ACL LOAD"), "+OK\r\n");
        assert_eq!(admin.call("ACL USERS"), "*2\r\n$7\r\ndefault\r\n$2\r\ngw\r\n");
        assert_eq!(gw.call("TOKENRETURN rl:x 10 1 1000 1"), noperm_cmd("tokenreturn"));
        // A bad file: ACL LOAD refuses it and keeps the users; a start refuses it, naming the line.
        std::fs::write(&path, "user a on\nuser b on +nosuch\n").unwrap();
        let err = admin.call("ACL LOAD");
        assert_eq!(err, format!("-ERR {}:2: Error in applying operation '+nosuch': Unknown command or category name in ACL. WARNING: ACL errors detected, no change to the previously active ACL rules was performed\r\n", path.display()));
        assert_eq!(admin.call("ACL USERS"), "*2\r\n$7\r\ndefault\r\n$2\r\ngw\r\n");
        let refused = leasehold_server::start(config.clone(), Arc::new(SystemClock::new()));
        let Err(e) = refused else { panic!("a bad ACL file refuses the start") };
        let msg = e.to_string();
        assert!(msg.contains(&format!("{}:2:", path.display())) && msg.contains("+nosuch"), "{msg}");
        config.security.aclfile = dir.join("missing.acl").display().to_string();
        let refused = leasehold_server::start(config, Arc::new(SystemClock::new()));
        let Err(e) = refused else { panic!("a missing ACL file refuses the start") };
        assert!(e.to_string().contains("missing.acl"), "{e}");
    }

    fn gateway_with_redis_cli_and_redis_py(threads) {
        let server = TestServer::start(threads);
        let mut admin = server.raw();
        assert_eq!(admin.call("ACL SETUSER gw on >secret ~rl:* +tokenlease +tokenreturn"), "+OK\r\n");
        let port = server.addr.port().to_string();
        if have("redis-cli", &["--version"]) {
            let cli = |args: &[&str]| {
                let out = Command::new("redis-cli")
                    .args(["-h", "127.0.0.1", "-p", &port, "--user", "gw", "--pass", "secret", "--no-auth-warning"])
                    .args(args)
                    .output()
                    .expect("run redis-cli");
                String::from_utf8_lossy(&out.stdout).into_owned()
            };
            assert_eq!(cli(&["TOKENLEASE", "rl:cli", "10", "1", "1000", "1"]), "1\n9\n0\n1000\n");
            assert_eq!(cli(&["TOKENLEASE", "other:cli", "10", "1", "1000", "1"]), "NOPERM this user has no permissions to access one of the keys used as arguments\n\n");
            assert_eq!(cli(&["SET", "rl:cli", "1"]), "NOPERM this user has no permissions to run the 'set' command\n\n");
        }
        if have("python3", &["-c", "import redis"]) {
            let script = format!(
                r#"
import redis
r = redis.Redis(host="127.0.0.1", port={port}, username="gw", password="secret")
print(r.execute_command("TOKENLEASE", "rl:py", 10, 1, 1000, 1))
for args in (("TOKENLEASE", "other:py", 10, 1, 1000, 1), ("SET", "rl:py", 1)):
    try:
        r.execute_command(*args)
        print("allowed")
    except redis.exceptions.NoPermissionError as e:
        print("NoPermissionError", e)
try:
    redis.Redis(host="127.0.0.1", port={port}, username="gw", password="bad").ping()
except redis.exceptions.AuthenticationError as e:
    print("AuthenticationError", e)
"#
            );
            let out = Command::new("python3").args(["-c", &script]).output().expect("run python3");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
            assert_eq!(
                stdout,
                "[1, 9, 0, 1000]\n\
                 NoPermissionError this user has no permissions to access one of the keys used as arguments\n\
                 NoPermissionError this user has no permissions to run the 'set' command\n\
                 AuthenticationError invalid username-password pair or user is disabled.\n"
            );
        }
    }
}

/// A RESP2 bulk string.
fn bulk(s: &str) -> String {
    format!("${}\r\n{s}\r\n", s.len())
}
