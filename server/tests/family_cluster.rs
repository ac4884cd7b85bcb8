//! The cluster family in process: the redirections the dispatcher decides
//! (MOVED, CROSSSLOT by slot, CLUSTERDOWN, READONLY on a replica), inside
//! MULTI and for scripts, and the CLUSTER subcommands' shapes and errors,
//! with a topology pushed by LH.TOPOLOGY SET. The harness's node is
//! 127.0.0.1:6379 (its configured port; no socket is bound).

mod common;

use common::{arity, bulks, err, info_field, key_in, text};
use leasehold_protocol::Reply;
use leasehold_server::config::Config;
use leasehold_server::harness::Harness;
use leasehold_server::slot::key_slot;

/// Group `a` (this node, and a replica on 7010) owns 0-5460 and 8000-9000;
/// `b` (7001, replica 7011) the rest up to 10922; `c` (7002) 10923-16000;
/// 16001-16383 belong to no group.
fn topology(version: u64) -> String {
    format!(
        r#"version = {version}
[[group]]
name = "a"
slots = ["0-5460", "8000-9000"]
[[group.node]]
addr = "127.0.0.1:6379"
role = "primary"
[[group.node]]
addr = "127.0.0.1:7010"
role = "replica"
[[group]]
name = "b"
slots = ["5461-7999", "9001-10922"]
[[group.node]]
addr = "127.0.0.1:7001"
role = "primary"
[[group.node]]
addr = "127.0.0.1:7011"
role = "replica"
[[group]]
name = "c"
slots = ["10923-16000"]
[[group.node]]
addr = "127.0.0.1:7002"
role = "primary"
"#
    )
}

/// A cluster-mode harness on 2 shards whose node announces `port`, with
/// [`topology`] version 1 pushed.
fn node(port: u16) -> Harness {
    let mut c = Config::default();
    c.cluster.enabled = true;
    c.cluster.announce_port = port;
    let mut h = Harness::with_config(c, 2);
    assert_eq!(
        h.run(&["LH.TOPOLOGY", "SET", "1", &topology(1)]),
        Reply::ok()
    );
    h
}

fn moved(key: &str, port: u16) -> Reply {
    err(&format!(
        "MOVED {} 127.0.0.1:{port}",
        key_slot(key.as_bytes())
    ))
}

const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";
const DISABLED: &str = "ERR This instance has cluster support disabled";

#[test]
fn cluster_mode_off_changes_nothing_and_refuses_the_cluster_commands() {
    let mut h = Harness::new();
    for cmd in [
        "CLUSTER INFO",
        "CLUSTER SLOTS",
        "CLUSTER HELP",
        "CLUSTER KEYSLOT foo",
        "READONLY",
        "READWRITE",
        "ASKING",
        "LH.TOPOLOGY GET",
    ] {
        assert_eq!(h.cmd(cmd), err(DISABLED), "{cmd}");
    }
    assert_eq!(h.cmd("SET foo 1"), Reply::ok());
    let (a, b) = (h.key_on(0, "a"), h.key_on(1, "b"));
    assert_eq!(
        h.run(&["MSET", &a, "1", &b, "2"]),
        Reply::ok(),
        "keys of two slots on two shards: split, as before"
    );
    assert_eq!(
        info_field(&mut h, "cluster", "cluster_enabled"),
        Some("0".into())
    );
    assert_eq!(
        h.cmd("CONFIG GET cluster-enabled"),
        bulks(&["cluster-enabled", "no"])
    );
}

#[test]
fn keys_of_other_groups_are_moved_and_unassigned_slots_are_down() {
    let mut h = node(6379);
    let mine = key_in("k", 0, 5460);
    let mine_on_shard_1 = key_in("k", 8192, 9000);
    let theirs = key_in("k", 5461, 7999);
    let third = key_in("k", 10923, 16000);
    let nobody = key_in("k", 16001, 16383);
    assert_eq!(h.run(&["SET", &mine, "1"]), Reply::ok());
    assert_eq!(h.run(&["INCR", &mine_on_shard_1]), Reply::Int(1));
    assert_eq!(h.run(&["GET", &mine]), Reply::bulk("1"));
    assert_eq!(h.run(&["GET", &theirs]), moved(&theirs, 7001));
    assert_eq!(
        h.run(&["TOKENLEASE", &third, "10", "1", "1000", "1"]),
        moved(&third, 7002)
    );
    assert_eq!(
        h.run(&["GET", &nobody]),
        err("CLUSTERDOWN Hash slot not served")
    );
    // Nothing ran where it was refused.
    assert_eq!(h.run(&["EXISTS", &theirs]), moved(&theirs, 7001));
    assert_eq!(
        h.run(&[
            "CLUSTER",
            "COUNTKEYSINSLOT",
            &key_slot(theirs.as_bytes()).to_string()
        ]),
        Reply::Int(0)
    );
    // Keyless commands run here.
    assert_eq!(h.cmd("DBSIZE"), Reply::Int(2));
    assert_eq!(h.cmd("PING"), Reply::simple("PONG"));
    assert_eq!(
        info_field(&mut h, "cluster", "cluster_enabled"),
        Some("1".into())
    );
    assert_eq!(
        h.cmd("CONFIG GET cluster-enabled"),
        bulks(&["cluster-enabled", "yes"])
    );
}

#[test]
fn crossslot_is_judged_by_slot_not_by_shard() {
    let mut h = node(6379);
    // Two keys of this node's slots, on one shard but in two slots.
    let (a, b) = ("b", "ba");
    assert_ne!(key_slot(a.as_bytes()), key_slot(b.as_bytes()));
    assert_eq!(h.shard_of(a), h.shard_of(b));
    assert_eq!(h.run(&["MSET", a, "1", b, "2"]), err(CROSSSLOT));
    assert_eq!(h.run(&["MGET", a, b]), err(CROSSSLOT));
    assert_eq!(h.run(&["DEL", a, b]), err(CROSSSLOT));
    assert_eq!(h.run(&["RENAME", a, b]), err(CROSSSLOT));
    // One hash tag: one slot, served.
    assert_eq!(h.run(&["MSET", "{b}1", "x", "{b}2", "y"]), Reply::ok());
    assert_eq!(h.run(&["MGET", "{b}1", "{b}2"]), bulks(&["x", "y"]));
    // CROSSSLOT comes before MOVED, as in Redis.
    assert_eq!(h.run(&["MGET", "foo", "bar"]), err(CROSSSLOT));
    // Scripts by their KEYS.
    assert_eq!(h.run(&["EVAL", "return 1", "2", a, b]), err(CROSSSLOT));
    assert_eq!(
        h.run(&["EVAL", "return redis.call('GET', KEYS[1])", "1", "{b}1"]),
        Reply::bulk("x")
    );
    let theirs = key_in("k", 5461, 7999);
    assert_eq!(
        h.run(&["EVAL", "return 1", "1", &theirs]),
        moved(&theirs, 7001)
    );
    assert_eq!(h.run(&["EVAL", "return 7", "0"]), Reply::Int(7));
}

#[test]
fn transactions_are_judged_command_by_command_and_as_one_slot() {
    let mut h = node(6379);
    let theirs = key_in("k", 5461, 7999);
    // A redirected command aborts the transaction.
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("SET {b}1 1"), Reply::simple("QUEUED"));
    assert_eq!(h.run(&["SET", &theirs, "1"]), moved(&theirs, 7001));
    assert_eq!(
        h.cmd("EXEC"),
        err("EXECABORT Transaction discarded because of previous errors.")
    );
    // Two slots of this node: queued, then EXEC answers CROSSSLOT and runs nothing.
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("SET b 1"), Reply::simple("QUEUED"));
    assert_eq!(h.cmd("SET ba 1"), Reply::simple("QUEUED"));
    assert_eq!(h.cmd("EXEC"), err(CROSSSLOT));
    assert_eq!(h.cmd("EXISTS b"), Reply::Int(0));
    // One slot: runs.
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("SET {b}1 1"), Reply::simple("QUEUED"));
    assert_eq!(h.cmd("INCR {b}2"), Reply::simple("QUEUED"));
    assert_eq!(h.cmd("PING"), Reply::simple("QUEUED"));
    assert_eq!(
        h.cmd("EXEC"),
        Reply::Array(vec![Reply::ok(), Reply::Int(1), Reply::simple("PONG")])
    );
}

/// As Redis 7 (checked against `redis-server` 7.0): EXEC judges its
/// transaction's slot against the topology in force when it runs, so a
/// slot given away after the commands were queued answers `-MOVED` for
/// the whole EXEC and nothing of it runs (not one `-MOVED` per command
/// with the keyless ones run); a slot no group serves any more answers
/// `-CLUSTERDOWN`. The cluster checks come first, as in Redis: a
/// transaction that is also aborted answers `CROSSSLOT` or `MOVED`.
#[test]
fn exec_judges_the_transaction_slot_against_the_topology_in_force() {
    let mut h = node(6379);
    let mine = key_in("k", 0, 5460);
    let slot = key_slot(mine.as_bytes());
    assert!(slot > 0 && slot < 5460, "{slot}");
    // Version `v` with the key's slot given to group b (`to` = its slot
    // first in b's list) or to no group (`to` empty).
    let without = |v: u64, to: &str| {
        topology(v)
            .replace(
                "\"0-5460\"",
                &format!("\"0-{}\", \"{}-5460\"", slot - 1, slot + 1),
            )
            .replace(
                "slots = [\"5461-7999\"",
                &format!("slots = [{to}\"5461-7999\""),
            )
    };
    let to_b = format!("\"{slot}\", ");
    let push = |h: &Harness, t: String, v: u64| {
        let v = v.to_string();
        assert_eq!(
            h.new_connection().run(&["LH.TOPOLOGY", "SET", &v, &t]),
            Reply::ok()
        );
    };
    let name = || Reply::bulk("tx");

    // Queued while the slot is here, EXEC after it left: MOVED, nothing
    // run, the transaction over.
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.run(&["SET", &mine, "1"]), Reply::simple("QUEUED"));
    assert_eq!(h.cmd("CLIENT SETNAME tx"), Reply::simple("QUEUED"));
    push(&h, without(2, &to_b), 2);
    assert_eq!(h.cmd("EXEC"), moved(&mine, 7001));
    assert_eq!(
        h.cmd("CLIENT GETNAME"),
        Reply::Nil,
        "the queued SETNAME ran"
    );
    assert_eq!(h.cmd("EXEC"), err("ERR EXEC without MULTI"));

    // Aborted as well: MOVED still.
    push(&h, topology(3), 3);
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.run(&["SET", &mine, "2"]), Reply::simple("QUEUED"));
    assert!(matches!(h.cmd("NOSUCH"), Reply::Error(_)));
    push(&h, without(4, &to_b), 4);
    assert_eq!(h.cmd("EXEC"), moved(&mine, 7001));

    // A slot no group serves any more: CLUSTERDOWN, nothing run.
    push(&h, topology(5), 5);
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.run(&["SET", &mine, "3"]), Reply::simple("QUEUED"));
    assert_eq!(h.cmd("CLIENT SETNAME tx"), Reply::simple("QUEUED"));
    push(&h, without(6, ""), 6);
    assert_eq!(h.cmd("EXEC"), err("CLUSTERDOWN Hash slot not served"));
    push(&h, topology(7), 7);
    assert_eq!(h.run(&["EXISTS", &mine]), Reply::Int(0));
    assert_eq!(h.cmd("CLIENT GETNAME"), Reply::Nil);

    // Two slots and a refused command: CROSSSLOT, not EXECABORT.
    let again = key_in("j", 0, 5460);
    assert_ne!(key_slot(again.as_bytes()), slot);
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.run(&["SET", &mine, "1"]), Reply::simple("QUEUED"));
    assert_eq!(h.run(&["SET", &again, "1"]), Reply::simple("QUEUED"));
    assert!(matches!(h.cmd("NOSUCH"), Reply::Error(_)));
    assert_eq!(h.cmd("EXEC"), err(CROSSSLOT));

    // Still here at EXEC: it runs.
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.run(&["SET", &mine, "4"]), Reply::simple("QUEUED"));
    assert_eq!(h.cmd("CLIENT SETNAME tx"), Reply::simple("QUEUED"));
    assert_eq!(h.cmd("EXEC"), Reply::Array(vec![Reply::ok(), Reply::ok()]));
    assert_eq!(h.cmd("CLIENT GETNAME"), name());
}

#[test]
fn a_replica_serves_reads_of_its_group_after_readonly() {
    let mut h = node(7011);
    let b_key = key_in("k", 5461, 7999);
    let a_key = key_in("k", 0, 5460);
    assert_eq!(h.run(&["GET", &b_key]), moved(&b_key, 7001));
    assert_eq!(h.cmd("READONLY"), Reply::ok());
    assert_eq!(h.run(&["GET", &b_key]), Reply::Nil);
    assert_eq!(h.run(&["EXISTS", &b_key]), Reply::Int(0));
    // Writes still go to the primary; other groups' keys to theirs.
    assert_eq!(h.run(&["SET", &b_key, "1"]), moved(&b_key, 7001));
    assert_eq!(h.run(&["GET", &a_key]), moved(&a_key, 6379));
    assert_eq!(h.cmd("READWRITE"), Reply::ok());
    assert_eq!(h.run(&["GET", &b_key]), moved(&b_key, 7001));
    assert_eq!(h.cmd("READONLY"), Reply::ok());
    assert_eq!(h.cmd("RESET"), Reply::simple("RESET"));
    assert_eq!(h.run(&["GET", &b_key]), moved(&b_key, 7001));
    // ASKING is accepted and lasts one command (nothing migrates).
    assert_eq!(h.cmd("ASKING"), Reply::ok());
    assert_eq!(h.run(&["GET", &b_key]), moved(&b_key, 7001));
    assert_eq!(h.cmd("READONLY x"), arity("readonly"));
    assert_eq!(h.cmd("ASKING x"), arity("asking"));
}

#[test]
fn a_node_outside_the_topology_redirects_every_key() {
    let mut h = node(7999);
    let a_key = key_in("k", 0, 5460);
    assert_eq!(h.run(&["GET", &a_key]), moved(&a_key, 6379));
    let myid = text(&h.cmd("CLUSTER MYID"));
    assert_eq!(myid.len(), 40);
    assert!(!text(&h.cmd("CLUSTER NODES")).contains("myself"));
}

#[test]
fn cluster_slots_shards_nodes_and_info_have_redis_7_shapes() {
    let mut h = node(6379);
    let id = |port: u16| leasehold_server::cluster::derived_id("127.0.0.1", port);
    let node = |port: u16| {
        Reply::Array(vec![
            Reply::bulk("127.0.0.1"),
            Reply::Int(port.into()),
            Reply::bulk(id(port)),
            Reply::Array(Vec::new()),
        ])
    };
    let range = |a: i64, b: i64, nodes: Vec<Reply>| {
        let mut v = vec![Reply::Int(a), Reply::Int(b)];
        v.extend(nodes);
        Reply::Array(v)
    };
    assert_eq!(
        h.cmd("CLUSTER SLOTS"),
        Reply::Array(vec![
            range(0, 5460, vec![node(6379), node(7010)]),
            range(5461, 7999, vec![node(7001), node(7011)]),
            range(8000, 9000, vec![node(6379), node(7010)]),
            range(9001, 10922, vec![node(7001), node(7011)]),
            range(10923, 16000, vec![node(7002)]),
        ])
    );
    assert_eq!(text(&h.cmd("CLUSTER MYID")), id(6379));
    let nodes = text(&h.cmd("CLUSTER NODES"));
    assert!(nodes.ends_with('\n') && !nodes.contains('\r'), "{nodes:?}");
    let lines: Vec<Vec<&str>> = nodes.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 5);
    assert_eq!(
        lines[0],
        vec![
            &id(6379) as &str,
            "127.0.0.1:6379@16379",
            "myself,master",
            "-",
            "0",
            lines[0][5],
            "1",
            "connected",
            "0-5460",
            "8000-9000"
        ]
    );
    assert_eq!(lines[1][2], "slave");
    assert_eq!(lines[1][3], id(6379));
    assert_eq!(lines[1].len(), 8, "a replica lists no slots");
    assert_eq!(lines[4][8], "10923-16000");
    let info = text(&h.cmd("CLUSTER INFO"));
    for want in [
        "cluster_state:fail\r\n",
        "cluster_slots_assigned:16001\r\n",
        "cluster_slots_ok:16001\r\n",
        "cluster_known_nodes:5\r\n",
        "cluster_size:3\r\n",
        "cluster_current_epoch:1\r\n",
        "cluster_my_epoch:1\r\n",
    ] {
        assert!(info.contains(want), "{want} in {info}");
    }
    // SHARDS: per group, slots flat, nodes as maps (flat arrays in RESP2).
    let Reply::Array(shards) = h.cmd("CLUSTER SHARDS") else {
        panic!("SHARDS is an array")
    };
    assert_eq!(shards.len(), 3);
    let Reply::Array(first) = &shards[0] else {
        panic!()
    };
    assert_eq!(first[0], Reply::bulk("slots"));
    assert_eq!(
        first[1],
        Reply::Array([0, 5460, 8000, 9000].map(Reply::Int).to_vec())
    );
    assert_eq!(first[2], Reply::bulk("nodes"));
    let Reply::Array(members) = &first[3] else {
        panic!()
    };
    assert_eq!(
        members[1],
        Reply::Array(vec![
            Reply::bulk("id"),
            Reply::bulk(id(7010)),
            Reply::bulk("port"),
            Reply::Int(7010),
            Reply::bulk("ip"),
            Reply::bulk("127.0.0.1"),
            Reply::bulk("endpoint"),
            Reply::bulk("127.0.0.1"),
            Reply::bulk("role"),
            Reply::bulk("replica"),
            Reply::bulk("replication-offset"),
            Reply::Int(0),
            Reply::bulk("health"),
            Reply::bulk("online"),
        ])
    );
    // This node's own entry carries its replication offset, as INFO does.
    let mine = key_in("k", 0, 5460);
    assert_eq!(h.run(&["SET", &mine, "v"]), Reply::ok());
    let Reply::Array(shards) = h.cmd("CLUSTER SHARDS") else {
        panic!("SHARDS is an array")
    };
    let Reply::Array(first) = &shards[0] else {
        panic!()
    };
    let Reply::Array(members) = &first[3] else {
        panic!()
    };
    let Reply::Array(me) = &members[0] else {
        panic!()
    };
    assert_eq!(
        (&me[0], &me[1]),
        (&Reply::bulk("id"), &Reply::bulk(id(6379)))
    );
    let info = text(&h.cmd("INFO replication"));
    let offset: i64 = info
        .lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("master_repl_offset");
    assert!(offset > 0, "{info}");
    assert_eq!(
        me[10..12],
        [Reply::bulk("replication-offset"), Reply::Int(offset)]
    );
    let Reply::Array(replicas) = h.run(&["CLUSTER", "REPLICAS", &id(7001)]) else {
        panic!()
    };
    assert_eq!(replicas.len(), 1);
    assert!(text(&replicas[0]).starts_with(&id(7011)));
}

#[test]
fn keys_in_slot_are_counted_on_the_shard_owning_the_slot() {
    let mut h = node(6379);
    let on_1 = key_in("k", 8192, 9000);
    let slot = key_slot(on_1.as_bytes()).to_string();
    assert_eq!(h.shard_of(&on_1), 1);
    let tagged = |n: u32| format!("{{{on_1}}}:{n}");
    for n in 0..3 {
        assert_eq!(h.run(&["SET", &tagged(n), "v"]), Reply::ok());
    }
    assert_eq!(h.run(&["CLUSTER", "COUNTKEYSINSLOT", &slot]), Reply::Int(3));
    let Reply::Array(two) = h.run(&["CLUSTER", "GETKEYSINSLOT", &slot, "2"]) else {
        panic!()
    };
    assert_eq!(two.len(), 2);
    let Reply::Array(all) = h.run(&["CLUSTER", "GETKEYSINSLOT", &slot, "10"]) else {
        panic!()
    };
    let mut names: Vec<String> = all.iter().map(text).collect();
    names.sort();
    assert_eq!(names, vec![tagged(0), tagged(1), tagged(2)]);
    assert_eq!(h.cmd("CLUSTER KEYSLOT foo"), Reply::Int(12182));
    assert_eq!(
        h.cmd("CLUSTER KEYSLOT {user1000}.following"),
        h.cmd("CLUSTER KEYSLOT {user1000}.followers")
    );
}

#[test]
fn bad_arguments_to_cluster_subcommands_get_clear_errors() {
    let mut h = node(6379);
    let cases = [
        ("CLUSTER", arity("cluster")),
        ("CLUSTER KEYSLOT", arity("cluster|keyslot")),
        ("CLUSTER KEYSLOT a b", arity("cluster|keyslot")),
        ("CLUSTER INFO x", arity("cluster|info")),
        ("CLUSTER MYID x", arity("cluster|myid")),
        ("CLUSTER NODES x", arity("cluster|nodes")),
        ("CLUSTER SLOTS x", arity("cluster|slots")),
        ("CLUSTER COUNTKEYSINSLOT", arity("cluster|countkeysinslot")),
        ("CLUSTER COUNTKEYSINSLOT abc", err("ERR value is not an integer or out of range")),
        ("CLUSTER COUNTKEYSINSLOT -1", err("ERR Invalid slot")),
        ("CLUSTER COUNTKEYSINSLOT 16384", err("ERR Invalid slot")),
        ("CLUSTER GETKEYSINSLOT 1", arity("cluster|getkeysinslot")),
        ("CLUSTER GETKEYSINSLOT 100 -1", err("ERR Invalid slot or number of keys")),
        ("CLUSTER GETKEYSINSLOT 100000 1", err("ERR Invalid slot or number of keys")),
        ("CLUSTER GETKEYSINSLOT x 1", err("ERR value is not an integer or out of range")),
        ("CLUSTER GETKEYSINSLOT 1 x", err("ERR value is not an integer or out of range")),
        ("CLUSTER FOO", err("ERR unknown subcommand 'FOO'. Try CLUSTER HELP.")),
        ("CLUSTER REPLICAS abc", err("ERR Unknown node abc")),
        ("CLUSTER ADDSLOTS 1", err("ERR CLUSTER ADDSLOTS is not supported: slots and nodes come from the topology (docs/cluster.md)")),
        ("CLUSTER MEET 127.0.0.1 7000", err("ERR CLUSTER MEET is not supported: slots and nodes come from the topology (docs/cluster.md)")),
        ("LH.TOPOLOGY", arity("lh.topology")),
        ("LH.TOPOLOGY GET x", arity("lh.topology|get")),
        ("LH.TOPOLOGY SET 2", arity("lh.topology|set")),
        ("LH.TOPOLOGY NOPE", err("ERR unknown subcommand 'NOPE'. Try LH.TOPOLOGY HELP.")),
    ];
    for (cmd, want) in cases {
        assert_eq!(h.cmd(cmd), want, "{cmd}");
    }
    let Reply::Array(help) = h.cmd("CLUSTER HELP") else {
        panic!()
    };
    assert!(text(&help[0]).starts_with("CLUSTER <subcommand>"));
}

#[test]
fn a_pushed_topology_replaces_only_an_older_one() {
    let mut h = node(6379);
    let theirs = key_in("k", 5461, 7999);
    assert_eq!(h.cmd("LH.TOPOLOGY VERSION"), Reply::Int(1));
    // Version 2 gives group a the slots 5461-7999 too.
    let v2 = topology(2)
        .replace(
            "slots = [\"0-5460\", \"8000-9000\"]",
            "slots = [\"0-9000\"]",
        )
        .replace(
            "slots = [\"5461-7999\", \"9001-10922\"]",
            "slots = [\"9001-10922\"]",
        );
    assert_eq!(h.run(&["LH.TOPOLOGY", "SET", "2", &v2]), Reply::ok());
    assert_eq!(h.run(&["GET", &theirs]), Reply::Nil);
    assert_eq!(text(&h.cmd("LH.TOPOLOGY GET")), v2);
    assert!(text(&h.cmd("CLUSTER INFO")).contains("cluster_current_epoch:2\r\n"));
    // Older or equal: refused, the one in force stays.
    assert_eq!(
        h.run(&["LH.TOPOLOGY", "SET", "1", &topology(1)]),
        err("ERR invalid topology: version 1 is not newer than the version in force, 2")
    );
    assert_eq!(
        h.run(&["LH.TOPOLOGY", "SET", "3", &topology(2)]),
        err("ERR invalid topology: the text's version is 2, not 3")
    );
    let overlapping = topology(5).replace("10923-16000", "10000-16000");
    let Reply::Error(e) = h.run(&["LH.TOPOLOGY", "SET", "5", &overlapping]) else {
        panic!()
    };
    assert!(
        e.contains("slot 10000 is claimed by group \"c\" and by group \"b\""),
        "{e}"
    );
    let Reply::Error(e) = h.run(&["LH.TOPOLOGY", "SET", "5", "version = [1"]) else {
        panic!()
    };
    assert!(
        e.starts_with("ERR invalid topology: not a topology:") && !e.contains('\n'),
        "{e}"
    );
    assert_eq!(h.cmd("LH.TOPOLOGY VERSION"), Reply::Int(2));
    assert_eq!(h.run(&["GET", &theirs]), Reply::Nil);
}

#[test]
fn hello_and_info_say_cluster_mode() {
    let mut h = node(6379);
    let Reply::Array(hello) = h.cmd("HELLO 2") else {
        panic!()
    };
    let mode = hello
        .iter()
        .position(|r| *r == Reply::bulk("mode"))
        .unwrap();
    assert_eq!(hello[mode + 1], Reply::bulk("cluster"));
    assert_eq!(
        info_field(&mut h, "server", "redis_mode"),
        Some("cluster".into())
    );
}

#[test]
fn migrate_answers_nokey_its_errors_and_keeps_a_key_it_could_not_send() {
    let mut h = node(6379);
    let mine = key_in("m", 0, 5460);
    let other_shard = key_in("m", 8192, 9000);
    // A port nothing listens on, and a target that accepts and never answers.
    let refused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused_port = refused.local_addr().unwrap().port().to_string();
    drop(refused);
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port().to_string();
    fn m<'a>(args: &[&'a str]) -> Vec<&'a str> {
        let mut all = vec!["MIGRATE"];
        all.extend_from_slice(args);
        all
    }
    // Nothing here to move: NOKEY, without connecting.
    assert_eq!(
        h.run(&m(&["127.0.0.1", &refused_port, &mine, "0", "100"])),
        Reply::simple("NOKEY")
    );
    assert_eq!(
        h.run(&m(&[
            "127.0.0.1",
            &refused_port,
            "",
            "0",
            "100",
            "KEYS",
            &mine
        ])),
        Reply::simple("NOKEY")
    );
    // Wrong arguments.
    let cases: [(Vec<&str>, Reply); 5] = [
        (m(&["127.0.0.1", "1", &mine, "1", "100"]), err("ERR MIGRATE moves keys to database 0 only (Leasehold has one)")),
        (m(&["127.0.0.1", "0", &mine, "0", "100"]), err("ERR syntax error")),
        (m(&["127.0.0.1", "1", &mine, "0", "100", "SIDEWAYS"]), err("ERR syntax error")),
        (
            m(&["127.0.0.1", "1", &mine, "0", "100", "KEYS", &mine]),
            err("ERR When using MIGRATE KEYS option, the key argument must be set to the empty string"),
        ),
        (m(&["127.0.0.1", "1", &mine, "0"]), arity("migrate")),
    ];
    for (args, want) in cases {
        assert_eq!(h.run(&args), want, "{args:?}");
    }
    assert_eq!(h.run(&["SET", &mine, "v"]), Reply::ok());
    assert_eq!(h.run(&["SET", &other_shard, "w"]), Reply::ok());
    let r = h.run(&m(&[
        "127.0.0.1",
        &refused_port,
        "",
        "0",
        "100",
        "KEYS",
        &mine,
        &other_shard,
    ]));
    assert!(
        matches!(&r, Reply::Error(e) if e.starts_with(CROSSSLOT)),
        "{r:?}"
    );
    // A target that cannot be reached or does not answer: an IOERR, and
    // the key stays here.
    assert_eq!(
        h.run(&m(&["127.0.0.1", &refused_port, &mine, "0", "200"])),
        err("IOERR error or timeout connecting to target instance")
    );
    let r = h.run(&m(&["127.0.0.1", &silent_port, &mine, "0", "200"]));
    assert!(
        matches!(&r, Reply::Error(e) if e.starts_with("IOERR error or timeout") && e.ends_with("target instance")),
        "{r:?}"
    );
    assert_eq!(h.run(&["GET", &mine]), Reply::bulk("v"));
    assert_eq!(h.run(&["GET", &other_shard]), Reply::bulk("w"));
}
