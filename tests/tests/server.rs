//! The server commands (COMMAND, INFO, CONFIG, TIME, SHUTDOWN) over TCP, on 1
//! and 2 threads: COMMAND's view of the command table, INFO's sections and
//! statistics (commands, errors, CPU), CONFIG GET, SET, RESETSTAT and
//! REWRITE, TIME on a hand-set clock, the error for an unknown command, and
//! SHUTDOWN stopping the server.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_server::clock::SystemClock;
use leasehold_server::commands::table;
use leasehold_tests::{
    block_on, info, info_fields, manual_server, on_1_and_2_threads, q, Closed, TestServer, LIMIT,
    T0_MS,
};
use redis::{FromRedisValue, Value};

on_1_and_2_threads! {
    fn command_introspection(threads) {
        let server = TestServer::start(threads);
        let n = table().commands.len();
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            assert_eq!(q::<usize>(&mut r, &["COMMAND", "COUNT"]).await, n);
            let list: Vec<String> = q(&mut r, &["COMMAND", "LIST"]).await;
            assert_eq!(list.len(), n);
            assert!(list.iter().any(|c| c == "get") && list.iter().any(|c| c == "scan"));
            let all: Vec<Value> = q(&mut r, &["COMMAND"]).await;
            assert_eq!(all.len(), n);
            let info: Vec<Value> = q(&mut r, &["COMMAND", "INFO", "get", "nosuch", "mset"]).await;
            assert_eq!(info.len(), 3);
            assert_eq!(info[1], Value::Nil);
            let get: Vec<Value> = FromRedisValue::from_redis_value(&info[0]).unwrap();
            assert_eq!(get.len(), 10, "Redis 7's COMMAND INFO entry has 10 fields");
            assert_eq!(String::from_redis_value(&get[0]).unwrap(), "get");
            assert_eq!(i64::from_redis_value(&get[1]).unwrap(), 2);
            let flags: Vec<String> = FromRedisValue::from_redis_value(&get[2]).unwrap();
            assert!(flags.contains(&"readonly".to_string()), "{flags:?}");
            let keys: Vec<i64> = get[3..6].iter().map(|v| i64::from_redis_value(v).unwrap()).collect();
            assert_eq!(keys, [1, 1, 1]);
            let mset: Vec<Value> = FromRedisValue::from_redis_value(&info[2]).unwrap();
            let keys: Vec<i64> = mset[3..6].iter().map(|v| i64::from_redis_value(v).unwrap()).collect();
            assert_eq!(keys, [1, -1, 2]);
            let docs: HashMap<String, HashMap<String, Value>> = q(&mut r, &["COMMAND", "DOCS", "get"]).await;
            assert!(matches!(&docs["get"]["summary"], Value::BulkString(s) if !s.is_empty()), "{docs:?}");
            let keys: Vec<String> = q(&mut r, &["COMMAND", "GETKEYS", "MSET", "a", "1", "b", "2"]).await;
            assert_eq!(keys, ["a", "b"]);
        });
    }

    fn info_sections_and_fields(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        c.script(&[("SET a 1", "+OK\r\n"), ("SET b 2 EX 100", "+OK\r\n"), ("GET a", "$1\r\n1\r\n"), ("GET a", "$1\r\n1\r\n")]);
        let all = info(&mut c, "");
        for section in ["# Server", "# Clients", "# Memory", "# Stats", "# Replication", "# Keyspace"] {
            assert!(all.contains(section), "INFO lacks {section}");
        }
        let f = info_fields(&all);
        assert!(f["redis_version"].starts_with("7."), "{}", f["redis_version"]);
        assert!(f["used_memory"].parse::<u64>().unwrap() > 0);
        assert_eq!(f["connected_clients"], "1");
        assert_eq!(f["expired_keys"], "0");
        assert_eq!(f["db0"], "keys=2,expires=1,avg_ttl=0");
        assert_eq!(f["tcp_port"], server.addr.port().to_string());
        let stats = info(&mut c, "commandstats");
        assert!(stats.starts_with("# Commandstats\r\n"), "{stats}");
        assert!(stats.contains("cmdstat_get:calls=2,"), "{stats}");
        assert!(stats.contains("cmdstat_set:calls=2,"), "{stats}");
        let keyspace = info(&mut c, "keyspace");
        assert_eq!(keyspace, "# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=0\r\n");
        let two = info(&mut c, "server clients");
        assert!(two.contains("# Server") && two.contains("# Clients") && !two.contains("# Memory"));
        let mut other = server.raw();
        assert_eq!(other.call("PING"), "+PONG\r\n");
        assert_eq!(info_fields(&info(&mut c, "clients"))["connected_clients"], "2");

        assert_eq!(c.call("CONFIG RESETSTAT"), "+OK\r\n");
        let stats = info(&mut c, "commandstats");
        assert!(!stats.contains("cmdstat_get"), "{stats}");
        assert_eq!(c.call("GET a"), "$1\r\n1\r\n");
        assert!(info(&mut c, "commandstats").contains("cmdstat_get:calls=1,"));
    }

    fn info_cpu_errorstats_and_rejected_calls(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        let cpu = info_fields(&info(&mut c, "cpu"));
        for f in ["used_cpu_sys", "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children"] {
            assert!(cpu[f].parse::<f64>().is_ok(), "{f}: {:?}", cpu.get(f));
        }
        assert_eq!(info(&mut c, "errorstats"), "# Errorstats\r\n");
        c.script(&[
            ("SET s x", "+OK\r\n"),
            ("INCR s", "-ERR value is not an integer or out of range\r\n"),
            ("GET", "-ERR wrong number of arguments for 'get' command\r\n"),
            ("CONFIG GET", "-ERR wrong number of arguments for 'config|get' command\r\n"),
            ("NOSUCH", "-ERR unknown command 'NOSUCH', with args beginning with: \r\n"),
        ]);
        c.send_cmd("TOKENLEASE s 10 1 1000 1");
        assert!(c.read_text().starts_with("-WRONGTYPE "));
        let errors = info(&mut c, "errorstats");
        assert_eq!(errors, "# Errorstats\r\nerrorstat_ERR:count=4\r\nerrorstat_WRONGTYPE:count=1\r\n");
        assert_eq!(info_fields(&info(&mut c, "stats"))["total_error_replies"], "5");
        let stats = info(&mut c, "commandstats");
        assert!(stats.contains("cmdstat_incr:calls=1,usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=1\r\n"), "{stats}");
        assert!(stats.contains("cmdstat_get:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0\r\n"), "{stats}");
        assert!(stats.contains("cmdstat_config:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0\r\n"), "{stats}");
        assert_eq!(c.call("CONFIG RESETSTAT"), "+OK\r\n");
        assert_eq!(info(&mut c, "errorstats"), "# Errorstats\r\n");
    }

    fn config_get_and_set(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        block_on(LIMIT, async {
            let mut r = server.redis().await;
            let shared = r.clone();
            let get = |p: &'static str| {
                let mut r = shared.clone();
                async move { q::<Vec<String>>(&mut r, &["CONFIG", "GET", p]).await }
            };
            assert_eq!(get("save").await, ["save", ""]);
            assert_eq!(get("appendonly").await, ["appendonly", "no"]);
            assert_eq!(get("databases").await, ["databases", "1"]);
            assert_eq!(get("maxmemory").await, ["maxmemory", "0"]);
            // The port actually bound, though the config asked for 0 (any free port).
            let port = server.addr.port().to_string();
            assert_eq!(get("port").await, ["port", port.as_str()]);
            // As Redis 7: an exact name is answered under the name as given.
            assert_eq!(get("MAXCLIENTS").await, ["MAXCLIENTS", "10000"]);
            assert!(get("nosuchparameter").await.is_empty());
            let max: HashMap<String, String> = q(&mut r, &["CONFIG", "GET", "max*"]).await;
            let names: BTreeSet<&str> = max.keys().map(String::as_str).collect();
            assert_eq!(names, BTreeSet::from(["maxclients", "maxmemory", "maxmemory-policy"]));
            let several: HashMap<String, String> = q(&mut r, &["CONFIG", "GET", "save", "appendonly", "save"]).await;
            assert_eq!(several.len(), 2);

            assert_eq!(q::<String>(&mut r, &["CONFIG", "SET", "maxclients", "100"]).await, "OK");
            assert_eq!(get("maxclients").await, ["maxclients", "100"]);
            assert_eq!(q::<String>(&mut r, &["CONFIG", "SET", "save", ""]).await, "OK");
            assert_eq!(q::<String>(&mut r, &["CONFIG", "SET", "appendonly", "no"]).await, "OK");
        });
        c.script(&[
            ("CONFIG SET port 1", "-ERR CONFIG SET failed (possibly related to argument 'port') - can't set immutable config\r\n"),
            ("CONFIG SET nosuch 1", "-ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'\r\n"),
            ("CONFIG SET maxclients many", "-ERR CONFIG SET failed (possibly related to argument 'maxclients') - argument couldn't be parsed into an integer\r\n"),
            ("CONFIG SET maxclients", "-ERR wrong number of arguments for 'config|set' command\r\n"),
            ("CONFIG GET", "-ERR wrong number of arguments for 'config|get' command\r\n"),
            ("CONFIG BOGUS", "-ERR unknown subcommand 'BOGUS'. Try CONFIG HELP.\r\n"),
            ("CONFIG GET maxclients", "*2\r\n$10\r\nmaxclients\r\n$3\r\n100\r\n"),
        ]);
        // A mutable limit takes effect on open connections.
        // (Redis's floor for it is 1mb.)
        c.script(&[("CONFIG SET proto-max-bulk-len 1mb", "+OK\r\n")]);
        c.send(b"*2\r\n$4\r\nECHO\r\n$1048577\r\n");
        c.expect_closed_after("-ERR Protocol error: invalid bulk length\r\n", Duration::from_secs(5));
    }

    fn config_set_hz_and_loglevel(threads) {
        let server = TestServer::start(threads);
        let mut c = server.raw();
        c.script(&[
            ("CONFIG SET hz 20", "+OK\r\n"),
            ("CONFIG GET hz", "*2\r\n$2\r\nhz\r\n$2\r\n20\r\n"),
            // Redis clamps to 1..=500.
            ("CONFIG SET hz 1000", "+OK\r\n"),
            ("CONFIG GET hz", "*2\r\n$2\r\nhz\r\n$3\r\n500\r\n"),
            ("CONFIG SET hz -1", "-ERR CONFIG SET failed (possibly related to argument 'hz') - argument must be between 0 and 2147483647 inclusive\r\n"),
            ("CONFIG SET hz x", "-ERR CONFIG SET failed (possibly related to argument 'hz') - argument couldn't be parsed into an integer\r\n"),
            ("CONFIG SET loglevel warning", "+OK\r\n"),
            ("CONFIG GET loglevel", "*2\r\n$8\r\nloglevel\r\n$7\r\nwarning\r\n"),
            ("CONFIG SET loglevel bogus", "-ERR CONFIG SET failed (possibly related to argument 'loglevel') - argument(s) must be one of the following: debug, verbose, notice, warning\r\n"),
            ("CONFIG SET hz 10", "+OK\r\n"),
        ]);
        assert!(info(&mut c, "server").contains("\r\nhz:10\r\n"));
        // Active expiry still runs after the change.
        c.script(&[("SET gone 1 PX 10", "+OK\r\n")]);
        let deadline = Instant::now() + Duration::from_secs(20);
        while info_fields(&info(&mut c, "stats"))["expired_keys"] != "1" {
            assert!(Instant::now() < deadline, "the key was never reclaimed");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn config_rewrite_writes_the_config_file(threads) {
        let plain = TestServer::start(threads);
        let mut c = plain.raw();
        assert_eq!(c.call("CONFIG REWRITE"), "-ERR The server is running without a config file\r\n");

        let dir = std::env::temp_dir().join(format!("leasehold-rewrite-{}-{threads}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("server.toml");
        std::fs::write(&path, "[net]\nport = 6399\nmaxclients = 50\n\n[expiry]\nhz = 10\n").unwrap();
        let mut config = leasehold_server::config::Config::from_file(&path).unwrap();
        config.shards.threads = threads;
        let server = TestServer::with_config(config, Arc::new(SystemClock::new()));
        let mut c = server.raw();
        let fields = info_fields(&info(&mut c, "server"));
        assert_eq!(fields["config_file"], path.display().to_string());
        c.script(&[
            ("CONFIG SET maxclients 321 hz 25", "+OK\r\n"),
            ("CONFIG REWRITE", "+OK\r\n"),
        ]);
        let back = leasehold_server::config::Config::from_file(&path).unwrap();
        assert_eq!(back.net.maxclients, 321);
        assert_eq!(back.expiry.hz, 25);
        // Not settable: the file keeps its own value, not the port bound (0 picks one).
        assert_eq!(back.net.port, 6399);
        // A setting at its default that the file lacked is not added.
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("requirepass"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn time_and_unknown_commands(threads) {
        let (server, clock) = manual_server(threads);
        clock.set_unix_ms(T0_MS + 1_234);
        let mut c = server.raw();
        assert_eq!(c.call("TIME"), "*2\r\n$10\r\n1700000001\r\n$6\r\n234000\r\n");
        assert_eq!(c.call("FOO a b"), "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n");
        assert_eq!(c.call("NOPE"), "-ERR unknown command 'NOPE', with args beginning with: \r\n");
        assert_eq!(c.call("PING"), "+PONG\r\n");
    }

    fn shutdown_stops_the_server(threads) {
        let server = TestServer::start(threads);
        let addr = server.addr;
        let mut bystander = server.raw();
        let mut c = server.raw();
        assert_eq!(c.call("SET k v"), "+OK\r\n");
        c.send_cmd("SHUTDOWN");
        // Like Redis, a successful SHUTDOWN answers by closing.
        c.expect_closed_after("", Duration::from_secs(5));
        assert!(matches!(bystander.read_until_closed(Duration::from_secs(5)), Closed::Yes(_)));
        assert!(server.wait_stopped(Duration::from_secs(5)), "threads still running");
        assert!(std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(), "still accepting");
    }
}
