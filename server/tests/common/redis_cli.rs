//! `redis-cli -c` (following MOVED) against a cluster of real processes,
//! run by `cluster.rs` (three primaries) and `cluster_local.rs` (three
//! groups of a primary and a replica, from `leasehold-cluster local`).

use std::process::Command;

use leasehold_testkit::{call, Reply};

use super::key_in;

/// `redis-cli -c -p <port> args...`: its trimmed standard output.
///
/// # Panics
/// When redis-cli cannot run or exits with an error.
pub fn c(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-c", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Sends every command to `entry` with `redis-cli -c` on a key of each
/// range of `ranges` (a group's first slot range) and checks the answers:
/// SET/GET/INCR, TOKENLEASE (3 of a bucket of 10, then 3 more),
/// SLIDINGWINDOW (a limit of 2: allowed, allowed, denied), MSET/MGET/DEL
/// on two keys under one hash tag, then a cross-slot MSET refused. Each
/// key is then read on its owner, `owners[i]` for `ranges[i]`, without
/// redirection. Returns the keys it wrote with SET.
///
/// # Panics
/// On any answer other than the expected one.
pub fn runs_every_kind(entry: u16, ranges: &[(u16, u16)], owners: &[u16]) -> Vec<String> {
    let mut keys = Vec::new();
    for (i, &(first, last)) in ranges.iter().enumerate() {
        let key = key_in("user:", first, last);
        let tagged = |suffix: &str| format!("{{{key}}}:{suffix}");
        assert_eq!(c(entry, &["SET", &key, &i.to_string()]), "OK", "{key}");
        assert_eq!(c(entry, &["GET", &key]), i.to_string());
        assert_eq!(c(entry, &["INCR", &tagged("n")]), "1");
        assert_eq!(c(entry, &["INCR", &tagged("n")]), "2");
        let lease = |n: &str| c(entry, &["TOKENLEASE", &tagged("tb"), "10", "1", "1000", n]);
        assert_eq!(lease("3"), "3\n7\n0\n3000");
        assert!(lease("3").starts_with("3\n4\n0\n"), "{key}");
        let window = || c(entry, &["SLIDINGWINDOW", &tagged("sw"), "2", "60000"]);
        // [allowed, count in the window, remaining, retry after ms]
        assert_eq!(window(), "1\n1\n1\n0");
        assert_eq!(window(), "1\n2\n0\n0");
        assert!(
            window().starts_with("0\n2\n0\n"),
            "{key}: the third is denied"
        );
        let (a, b) = (tagged("a"), tagged("b"));
        assert_eq!(c(entry, &["MSET", &a, "x", &b, "y"]), "OK");
        assert_eq!(c(entry, &["MGET", &a, &b]), "x\ny");
        assert_eq!(c(entry, &["DEL", &a, &b]), "2");
        // The keys live on their owner, which answers without redirecting.
        assert_eq!(
            call(owners[i], &["GET", &key]),
            Some(Reply::bulk(i.to_string()))
        );
        assert_eq!(
            call(owners[i], &["GET", &tagged("n")]),
            Some(Reply::bulk("2"))
        );
        keys.push(key);
    }
    let apart = [
        key_in("x:", ranges[0].0, ranges[0].1),
        key_in("x:", ranges[1].0, ranges[1].1),
    ];
    assert_eq!(
        c(entry, &["MSET", &apart[0], "1", &apart[1], "2"]),
        "CROSSSLOT Keys in request don't hash to the same slot"
    );
    keys
}
