//! redis-py's `RedisCluster` (`python3`), run against a cluster by
//! `cluster.rs` (three primaries) and `cluster_clients.rs` (three groups
//! of a primary and a replica, from `leasehold-cluster local`).

use std::process::Command;

/// Whether python3 has redis-py's cluster client; when not, a notice, or
/// a failure under `LEASEHOLD_REQUIRE_REDIS_PY=1`.
pub fn installed(test: &str) -> bool {
    leasehold_testkit::probe_runs(
        "python3",
        &["-c", "import redis.cluster"],
        "LEASEHOLD_REQUIRE_REDIS_PY",
        "redis-py (pip install redis) is not installed for python3",
        test,
    )
}

/// The redis-py script: one line per check, `name value`.
pub const SCRIPT: &str = r#"
import sys
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException, ResponseError
rc = RedisCluster(host="127.0.0.1", port=int(sys.argv[1]), socket_timeout=3)
print("nodes", len(rc.get_primaries()))
for i in range(60):
    rc.set(f"key:{i}", i)
print("get", all(rc.get(f"key:{i}") == str(i).encode() for i in range(60)))
print("incr", rc.incr("hits"), rc.incr("hits"))
print("tokenlease", rc.execute_command("TOKENLEASE", "api:user7", 10, 1, 1000, 4))
print("slidingwindow", rc.execute_command("SLIDINGWINDOW", "sw:user7", 10, 1000))
print("mset", rc.execute_command("MSET", "{user1}:a", 1, "{user1}:b", 2))
print("mget", rc.execute_command("MGET", "{user1}:a", "{user1}:b"))
print("del", rc.delete("{user1}:a", "{user1}:b"))
try:
    rc.execute_command("MSET", "a", 1, "b", 2)
    print("client-crossslot none")
except RedisClusterException as e:
    print("client-crossslot refused")
try:
    # Sent as it is to one node: the server judges it.
    rc.execute_command("MSET", "a", 1, "b", 2, target_nodes=rc.get_primaries()[0])
    print("server-crossslot none")
except ResponseError as e:
    print("server-crossslot", str(e))
print("info", rc.cluster_info()["cluster_state"])
"#;

/// What [`SCRIPT`] prints, line by line, against a working cluster of
/// three groups.
pub const EXPECTED: [&str; 11] = [
    "nodes 3",
    "get True",
    "incr 1 2",
    "tokenlease [4, 6, 0, 4000]",
    "slidingwindow [1, 1, 9, 0]",
    "mset True",
    "mget [b'1', b'2']",
    "del 2",
    "client-crossslot refused",
    "server-crossslot Keys in request don't hash to the same slot",
    "info ok",
];

/// Runs [`SCRIPT`] seeded with the node on 127.0.0.1:`port` and asserts
/// it exits 0 having printed every line of [`EXPECTED`].
///
/// # Panics
/// When python3 cannot be run, the script fails, or a line is missing.
pub fn run_and_check(port: u16) {
    let out = Command::new("python3")
        .args(["-c", SCRIPT, &port.to_string()])
        .output()
        .expect("run python3");
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{log}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in EXPECTED {
        assert!(log.lines().any(|l| l == want), "{want:?} in\n{log}");
    }
}
