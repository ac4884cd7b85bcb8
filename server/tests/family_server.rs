//! The server family in process: INFO, CONFIG, COMMAND, TIME, SHUTDOWN.
//! Statistics summed over shards, live configuration changes, the command
//! table as COMMAND reports it, and Redis 7's error texts.

mod common;

use common::{arity, bulks, err, info_field, map_get, text, SYNTAX, WRONGTYPE};
use leasehold_protocol::Reply;
use leasehold_server::commands::table;
use leasehold_server::harness::Harness;

#[test]
fn info_sums_every_shard() {
    let mut h = Harness::new();
    let (a, b) = (h.key_on(0, "a"), h.key_on(1, "b"));
    assert_eq!(h.run(&["SET", &a, "1", "EX", "100"]), Reply::ok());
    assert_eq!(h.run(&["SET", &b, "1"]), Reply::ok());
    assert_eq!(h.run(&["GET", &b]), Reply::bulk("1"));
    assert_eq!(h.cmd("GET missing"), Reply::Nil);
    assert_eq!(h.run(&["INCR", &b]), Reply::Int(2));
    assert_eq!(
        info_field(&mut h, "keyspace", "db0").as_deref(),
        Some("keys=2,expires=1,avg_ttl=0")
    );
    assert_eq!(
        info_field(&mut h, "stats", "keyspace_hits").as_deref(),
        Some("1")
    );
    assert_eq!(
        info_field(&mut h, "stats", "keyspace_misses").as_deref(),
        Some("1")
    );
    assert_eq!(
        info_field(&mut h, "server", "threads").as_deref(),
        Some("2")
    );
    assert_eq!(
        info_field(&mut h, "commandstats", "cmdstat_set").as_deref(),
        Some("calls=2,usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=0")
    );
    let offset = h.effects_offset().to_string();
    assert_eq!(
        info_field(&mut h, "replication", "master_repl_offset"),
        Some(offset)
    );
    assert_eq!(
        info_field(&mut h, "leasehold", "shard1")
            .unwrap()
            .split(',')
            .next(),
        Some("keys=1")
    );
}

#[test]
fn info_counts_errors_and_sections() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("SET s v"), Reply::ok());
    assert_eq!(
        h.cmd("INCR s"),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(h.cmd("TOKENLEASE s 1 1 1 1"), err(WRONGTYPE));
    assert_eq!(h.cmd("GET"), arity("get"));
    assert_eq!(
        info_field(&mut h, "errorstats", "errorstat_ERR").as_deref(),
        Some("count=2")
    );
    assert_eq!(
        info_field(&mut h, "errorstats", "errorstat_WRONGTYPE").as_deref(),
        Some("count=1")
    );
    assert_eq!(
        info_field(&mut h, "commandstats", "cmdstat_get").as_deref(),
        Some("calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0")
    );
    assert_eq!(
        info_field(&mut h, "stats", "total_error_replies").as_deref(),
        Some("3")
    );
    let default = text(&h.cmd("INFO"));
    assert!(default.starts_with("# Server\r\n"));
    assert!(default.contains("# Keyspace\r\n"));
    assert!(!default.contains("# Commandstats"), "only with INFO all");
    assert!(text(&h.cmd("INFO all")).contains("# Errorstats\r\n"));
    assert_eq!(text(&h.cmd("INFO nosuch")), "");
}

#[test]
fn config_get_set_and_errors() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("CONFIG GET hz"), bulks(&["hz", "10"]));
    assert_eq!(h.cmd("CONFIG SET hz 50"), Reply::ok());
    assert_eq!(h.cmd("CONFIG GET hz"), bulks(&["hz", "50"]));
    assert_eq!(h.cmd("CONFIG SET hz 100000"), Reply::ok());
    assert_eq!(h.cmd("CONFIG GET hz"), bulks(&["hz", "500"]), "clamped");
    assert_eq!(h.cmd("CONFIG GET databases"), bulks(&["databases", "1"]));
    let Reply::Array(max) = h.cmd("CONFIG GET max*") else {
        panic!("CONFIG GET is a flat array in RESP2");
    };
    assert!(max.contains(&Reply::bulk("maxclients")) && max.contains(&Reply::bulk("maxmemory")));
    assert_eq!(
        h.cmd("CONFIG SET hz x"),
        err("ERR CONFIG SET failed (possibly related to argument 'hz') - argument couldn't be parsed into an integer")
    );
    assert_eq!(
        h.cmd("CONFIG SET port 1"),
        err("ERR CONFIG SET failed (possibly related to argument 'port') - can't set immutable config")
    );
    assert_eq!(
        h.cmd("CONFIG SET appendonly maybe"),
        err("ERR CONFIG SET failed (possibly related to argument 'appendonly') - argument must be 'yes' or 'no'")
    );
    assert_eq!(
        h.cmd("CONFIG SET nosuch 1"),
        err("ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'")
    );
    assert_eq!(h.cmd("CONFIG GET"), arity("config|get"));
    assert_eq!(h.cmd("CONFIG SET hz"), arity("config|set"));
    assert_eq!(h.cmd("CONFIG"), arity("config"));
    assert_eq!(
        h.cmd("CONFIG Frob"),
        err("ERR unknown subcommand 'Frob'. Try CONFIG HELP.")
    );
    assert_eq!(
        h.cmd("CONFIG REWRITE"),
        err("ERR The server is running without a config file")
    );
    let Reply::Array(help) = h.cmd("CONFIG HELP") else {
        panic!("CONFIG HELP is an array");
    };
    assert_eq!(help.len(), 11);
}

#[test]
fn config_set_reaches_the_shards_and_new_connections() {
    let mut h = Harness::new();
    let far = h.key_on(1, "big");
    assert_eq!(h.cmd("CONFIG SET proto-max-bulk-len 1mb"), Reply::ok());
    let mb = "x".repeat(1 << 20);
    assert_eq!(h.run(&["SET", &far, &mb]), Reply::ok());
    assert_eq!(
        h.run(&["APPEND", &far, "y"]),
        err("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
    );
    assert_eq!(h.cmd("CONFIG SET requirepass pw"), Reply::ok());
    assert_eq!(
        h.cmd("PING"),
        Reply::simple("PONG"),
        "already authenticated"
    );
    let mut late = h.new_connection();
    assert_eq!(late.cmd("PING"), err("NOAUTH Authentication required."));
    assert_eq!(late.cmd("AUTH pw"), Reply::ok());
    assert_eq!(
        late.cmd("CONFIG GET requirepass"),
        bulks(&["requirepass", "pw"])
    );
}

#[test]
fn config_set_applies_to_the_rest_of_its_pipeline_on_every_shard() {
    let mut h = Harness::new();
    let (near, far) = (h.key_on(0, "big"), h.key_on(1, "big"));
    let mb = "x".repeat(1 << 20);
    assert_eq!(h.run(&["MSET", &near, &mb, &far, &mb]), Reply::ok());
    let too_long = err("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
    let replies = h.pipeline(&[
        vec!["CONFIG", "SET", "proto-max-bulk-len", "1mb"],
        vec!["APPEND", &near, "y"],
        vec!["APPEND", &far, "y"],
    ]);
    assert_eq!(replies, vec![Reply::ok(), too_long.clone(), too_long]);
    // The decoder's limit too: a longer bulk in the same read is refused.
    let mut h = Harness::new();
    let replies = h.pipeline(&[
        vec!["CONFIG", "SET", "proto-max-bulk-len", "1mb"],
        vec!["SET", "k", &format!("{mb}y")],
    ]);
    assert_eq!(
        replies,
        vec![Reply::ok(), err("ERR Protocol error: invalid bulk length")]
    );
}

#[test]
fn config_resetstat_zeroes_what_info_reports() {
    let mut h = Harness::new();
    assert_eq!(h.pipeline(&["SET a 1", "GET a", "GET b"]).len(), 3);
    assert_eq!(h.cmd("CONFIG RESETSTAT"), Reply::ok());
    assert_eq!(
        info_field(&mut h, "stats", "keyspace_hits").as_deref(),
        Some("0")
    );
    assert_eq!(
        info_field(&mut h, "stats", "keyspace_misses").as_deref(),
        Some("0")
    );
    assert_eq!(info_field(&mut h, "commandstats", "cmdstat_set"), None);
    assert_eq!(h.cmd("CONFIG RESETSTAT x"), arity("config|resetstat"));
}

#[test]
fn command_reports_the_table() {
    let mut h = Harness::new();
    let n = table().commands.len() as i64;
    assert_eq!(h.cmd("COMMAND COUNT"), Reply::Int(n));
    assert_eq!(h.cmd("COMMAND COUNT x"), arity("command|count"));
    let Reply::Array(all) = h.cmd("COMMAND") else {
        panic!("COMMAND is an array");
    };
    assert_eq!(all.len() as i64, n);
    let Reply::Array(list) = h.cmd("COMMAND LIST") else {
        panic!("COMMAND LIST is an array");
    };
    assert!(list.contains(&Reply::bulk("tokenlease")));
    let Reply::Array(info) = h.cmd("COMMAND INFO mset nosuch") else {
        panic!("COMMAND INFO is an array");
    };
    let Reply::Array(mset) = &info[0] else {
        panic!("an entry is an array");
    };
    assert_eq!(mset.len(), 10);
    assert_eq!(mset[..2], [Reply::bulk("mset"), Reply::Int(-3)]);
    // A RESP3 set of flag names reads as an array in RESP2.
    assert_eq!(
        mset[2],
        Reply::Array(vec![Reply::simple("write"), Reply::simple("denyoom")])
    );
    assert_eq!(mset[3..6], [Reply::Int(1), Reply::Int(-1), Reply::Int(2)]);
    // ACL categories as Redis 7.0 lists them (and as ACL rules use them).
    let mut categories = |name: &str| {
        let Reply::Array(info) = h.cmd(&format!("COMMAND INFO {name}")) else {
            panic!("COMMAND INFO is an array");
        };
        let Reply::Array(entry) = &info[0] else {
            panic!("an entry is an array");
        };
        entry[6].clone()
    };
    let simple =
        |names: &[&'static str]| Reply::Array(names.iter().map(|n| Reply::simple(n)).collect());
    assert_eq!(categories("mset"), simple(&["@write", "@string", "@slow"]));
    assert_eq!(categories("get"), simple(&["@read", "@string", "@fast"]));
    assert_eq!(categories("wait"), simple(&["@slow", "@connection"]));
    assert_eq!(
        categories("renamenx"),
        simple(&["@keyspace", "@write", "@fast"])
    );
    assert_eq!(
        categories("tokenlease"),
        simple(&["@write", "@fast", "@ratelimit"])
    );
    assert_eq!(info[1], Reply::Nil);
    assert_eq!(h.cmd("COMMAND GETKEYS MSET a 1 b 2"), bulks(&["a", "b"]));
    assert_eq!(
        h.cmd("COMMAND GETKEYS PING x"),
        err("ERR The command has no key arguments")
    );
    assert_eq!(
        h.cmd("COMMAND GETKEYS nosuch x"),
        err("ERR Invalid command specified")
    );
    assert_eq!(
        h.cmd("COMMAND GETKEYS GET a b"),
        err("ERR Invalid number of arguments specified for command")
    );
    assert_eq!(
        h.cmd("COMMAND Frob"),
        err("ERR unknown subcommand 'Frob'. Try COMMAND HELP.")
    );
    assert!(matches!(h.cmd("HELLO 3"), Reply::Map(_)));
    let docs = h.cmd("COMMAND DOCS tokenlease get");
    let get = map_get(&docs, "get");
    assert_eq!(map_get(&get, "group"), Reply::bulk("string"));
    assert_eq!(
        map_get(&map_get(&docs, "tokenlease"), "group"),
        Reply::bulk("module")
    );
}

#[test]
fn time_reads_the_manual_clock() {
    let mut h = Harness::new();
    h.clock().advance_ms(1_234);
    assert_eq!(h.cmd("TIME"), bulks(&["1700000001", "234000"]));
    assert_eq!(h.cmd("TIME x"), arity("time"));
}

#[test]
fn shutdown_answers_nothing_and_stops_the_shards() {
    let mut h = Harness::new();
    let far = h.key_on(1, "k");
    assert_eq!(h.cmd("SHUTDOWN ABORT"), err("ERR No shutdown in progress."));
    assert_eq!(h.cmd("SHUTDOWN LATER"), err(SYNTAX));
    let other = h.new_connection();
    assert_eq!(
        h.pipeline(&["SHUTDOWN NOSAVE", "PING"]),
        Vec::<Reply>::new()
    );
    assert!(h.is_closed() && other.is_closed());
    assert!(h
        .shared()
        .shutting_down
        .load(std::sync::atomic::Ordering::SeqCst));
    let mut late = other.connection_on(0);
    assert_eq!(
        late.run(&["GET", &far]),
        err("ERR shard unavailable (shutting down)")
    );
}

/// A command split over shards (DBSIZE, KEYS, FLUSHALL on every shard; MSET,
/// MGET, DEL with keys on both) counts as one call, as in Redis, however
/// many shards ran a part of it; a part's error counts one failed call.
#[test]
fn a_split_command_counts_once() {
    let mut h = Harness::new();
    let (a, b) = (h.key_on(0, "a"), h.key_on(1, "b"));
    let processed = |h: &mut Harness| info_field(h, "stats", "total_commands_processed").unwrap();
    let before: u64 = processed(&mut h).parse().unwrap();
    assert_eq!(h.run(&["MSET", &a, "1", &b, "2"]), Reply::ok());
    assert_eq!(h.run(&["MGET", &a, &b]), bulks(&["1", "2"]));
    assert_eq!(h.cmd("DBSIZE"), Reply::Int(2));
    assert_eq!(h.run(&["DEL", &a, &b]), Reply::Int(2));
    assert_eq!(h.cmd("FLUSHALL NOW"), err(SYNTAX));
    // The INFO call that reads the counter counts too.
    let after: u64 = processed(&mut h).parse().unwrap();
    assert_eq!(after - before, 6);
    for (name, calls, failed) in [
        ("mset", 1, 0),
        ("mget", 1, 0),
        ("dbsize", 1, 0),
        ("del", 1, 0),
        ("flushall", 1, 1),
    ] {
        assert_eq!(
            info_field(&mut h, "commandstats", &format!("cmdstat_{name}")),
            Some(format!(
                "calls={calls},usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls={failed}"
            )),
            "{name}"
        );
    }
}

/// The `# Section` headers of an INFO reply, in order.
fn headers(h: &mut Harness, args: &[&str]) -> Vec<String> {
    let reply = h.run(args);
    let t = text(&reply);
    t.lines()
        .filter_map(|l| l.strip_prefix("# ").map(str::to_string))
        .collect()
}

#[test]
fn info_sections_in_redis_7s_order_and_selections() {
    let mut h = Harness::new();
    let default = [
        "Server",
        "Clients",
        "Memory",
        "Persistence",
        "Stats",
        "Replication",
        "CPU",
        "Modules",
        "Errorstats",
        "Cluster",
        "Keyspace",
    ];
    assert_eq!(headers(&mut h, &["INFO"]), default);
    assert_eq!(headers(&mut h, &["INFO", "default"]), default);
    assert_eq!(headers(&mut h, &["INFO", "cpu", "DEFAULT"]), default);
    let mut all = default.to_vec();
    all.insert(8, "Commandstats");
    all.insert(10, "Latencystats");
    assert_eq!(headers(&mut h, &["INFO", "all"]), all);
    let mut everything = all.to_vec();
    everything.push("Leasehold");
    everything.push("Hotkeys");
    assert_eq!(headers(&mut h, &["INFO", "everything"]), everything);
    assert_eq!(
        headers(&mut h, &["INFO", "KEYSPACE", "cpu", "nosuch"]),
        ["CPU", "Keyspace"]
    );
    assert_eq!(
        headers(&mut h, &["INFO", "server", "clients"]),
        ["Server", "Clients"]
    );
    assert_eq!(text(&h.cmd("INFO modules")), "# Modules\r\n");
    assert_eq!(
        text(&h.cmd("INFO cluster")),
        "# Cluster\r\ncluster_enabled:0\r\n"
    );
    for (section, field) in [
        ("server", "server_time_usec"),
        ("server", "lru_clock"),
        ("server", "configured_hz"),
        ("clients", "client_recent_max_input_buffer"),
        ("memory", "used_memory_rss"),
        ("memory", "used_memory_peak"),
        ("memory", "allocator_active"),
        ("memory", "mem_fragmentation_ratio"),
        ("memory", "maxmemory_policy"),
        ("persistence", "rdb_last_cow_size"),
        ("stats", "pubsub_channels"),
        ("stats", "evicted_keys"),
    ] {
        assert!(
            info_field(&mut h, section, field).is_some(),
            "INFO {section} has no {field}"
        );
    }
    let peak: u64 = info_field(&mut h, "memory", "used_memory_peak")
        .unwrap()
        .parse()
        .unwrap();
    let used: u64 = info_field(&mut h, "memory", "used_memory")
        .unwrap()
        .parse()
        .unwrap();
    assert!(peak > 0 && used > 0, "peak {peak}, used {used}");
    assert_eq!(
        info_field(&mut h, "stats", "pubsub_channels").as_deref(),
        Some("0")
    );
}

#[test]
fn errorstats_count_every_code_including_execabort() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("GET"), arity("get"));
    assert_eq!(
        h.cmd("EXEC"),
        err("EXECABORT Transaction discarded because of previous errors.")
    );
    assert_eq!(
        info_field(&mut h, "errorstats", "errorstat_EXECABORT").as_deref(),
        Some("count=1")
    );
    assert_eq!(
        info_field(&mut h, "errorstats", "errorstat_ERR").as_deref(),
        Some("count=1")
    );
}

/// What a monitor connection has been sent so far, as text.
fn monitored(m: &mut Harness) -> String {
    m.raw(b"")
        .iter()
        .map(|r| format!("{}\n", text(r)))
        .collect()
}

#[test]
fn monitor_shows_every_connection_s_commands_as_redis_prints_them() {
    let mut m = Harness::new();
    let mut c = m.connection_on(1);
    assert_eq!(m.cmd("MONITOR"), Reply::ok());
    assert_eq!(c.run(&["SET", "a", "x y\n\"\u{1}"]), Reply::ok());
    assert_eq!(c.cmd("GET a"), Reply::bulk("x y\n\"\u{1}"));
    assert_eq!(
        c.cmd("NOSUCH x"),
        err("ERR unknown command 'NOSUCH', with args beginning with: 'x' ")
    );
    assert_eq!(c.cmd("GET"), arity("get"));
    assert!(!c.cmd("CONFIG GET port").is_error());
    assert_eq!(c.cmd("MULTI"), Reply::ok());
    assert_eq!(c.cmd("INCR n"), Reply::simple("QUEUED"));
    assert_eq!(c.cmd("EXEC"), Reply::Array(vec![Reply::Int(1)]));
    assert!(c.cmd("AUTH pw").is_error());
    let lines = monitored(&mut m);
    let shown: Vec<&str> = lines
        .lines()
        .map(|l| l.split_once("] ").expect("a monitor line").1)
        .collect();
    assert_eq!(
        shown,
        [
            "\"SET\" \"a\" \"x y\\n\\\"\\x01\"",
            "\"GET\" \"a\"",
            "\"MULTI\"",
            "\"INCR\" \"n\"",
            "\"EXEC\"",
            "\"AUTH\" \"(redacted)\""
        ]
    );
    // `<seconds>.<6 digits> [0 <addr>]`, the manual clock's time.
    let first = lines.lines().next().unwrap();
    assert!(
        first.starts_with("1700000000.000000 [0 127.0.0.1:"),
        "{first}"
    );
    // The monitor may ping, sees its own command, and may not touch keys.
    let got = m.raw(b"PING\r\n");
    assert_eq!(got[0], Reply::simple("PONG"));
    assert!(text(&got[1]).ends_with("] \"PING\""), "{got:?}");
    assert_eq!(
        m.cmd("GET a"),
        err("ERR Replica can't interact with the keyspace")
    );
    assert!(text(&c.cmd("CLIENT LIST")).contains(" flags=O "));
    assert_eq!(m.raw(b"RESET\r\n")[0], Reply::simple("RESET"));
    assert_eq!(c.cmd("GET a"), Reply::bulk("x y\n\"\u{1}"));
    assert_eq!(monitored(&mut m), "");
    assert_eq!(m.cmd("MONITOR x"), arity("monitor"));
}
