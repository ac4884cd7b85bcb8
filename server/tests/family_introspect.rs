//! OBJECT and MEMORY in process: the encoding names, reference counts and
//! byte counts each kind of value reports, keys on both shards, and Redis
//! 7.0's replies for missing keys and bad subcommands.

mod common;

use common::{arity, err, ints, NOT_INT, SYNTAX};
use leasehold_protocol::Reply;
use leasehold_server::harness::Harness;

#[test]
fn object_names_each_encoding_on_either_shard() {
    let mut h = Harness::new();
    let (a, b) = (h.key_on(0, "o"), h.key_on(1, "o"));
    let long = "x".repeat(45);
    for (key, value, encoding, refcount) in [
        (&a, "123", "int", i64::from(i32::MAX)),
        (&b, "123456", "int", 1),
        (&a, "hello", "embstr", 1),
        (&b, &"y".repeat(44), "embstr", 1),
        (&a, &long, "raw", 1),
    ] {
        assert_eq!(h.run(&["SET", key, value]), Reply::ok());
        assert_eq!(
            h.run(&["OBJECT", "ENCODING", key]),
            Reply::bulk(encoding),
            "{value}"
        );
        assert_eq!(
            h.run(&["OBJECT", "REFCOUNT", key]),
            Reply::Int(refcount),
            "{value}"
        );
        assert_eq!(h.run(&["OBJECT", "IDLETIME", key]), Reply::Int(0));
    }
    assert_eq!(h.cmd("FLUSHALL"), Reply::ok());
    assert_eq!(
        h.run(&["TOKENLEASE", &b, "10", "1", "1000", "1"]),
        ints(&[1, 9, 0, 1000])
    );
    assert_eq!(h.run(&["OBJECT", "encoding", &b]), Reply::bulk("packed"));
    // A capacity past 2^48 units does not pack: the state is boxed whole.
    assert_eq!(
        h.run(&["TOKENLEASE", &a, "9223372036854775807", "1", "1", "1"]),
        ints(&[1, 9223372036854775806, 0, 1])
    );
    assert_eq!(h.run(&["OBJECT", "ENCODING", &a]), Reply::bulk("wide"));
    assert_eq!(h.cmd("OBJECT ENCODING nokey"), Reply::Nil);
    assert_eq!(h.cmd("OBJECT FREQ nokey"), Reply::Nil);
    assert_eq!(
        h.run(&["OBJECT", "FREQ", &a]),
        err("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.")
    );
    assert_eq!(
        h.cmd("OBJECT ENCODING"),
        err("ERR wrong number of arguments for 'object|encoding' command")
    );
    assert_eq!(
        h.cmd("OBJECT ENCODING a b"),
        err("ERR wrong number of arguments for 'object|encoding' command")
    );
    assert_eq!(
        h.cmd("OBJECT HELP x"),
        err("ERR wrong number of arguments for 'object|help' command")
    );
    assert_eq!(
        h.cmd("OBJECT Foo"),
        err("ERR unknown subcommand 'Foo'. Try OBJECT HELP.")
    );
    match h.cmd("OBJECT HELP") {
        Reply::Array(lines) => assert_eq!(lines.len(), 15),
        other => panic!("OBJECT HELP: {other:?}"),
    }
    assert_eq!(h.cmd("OBJECT"), arity("object"));
}

#[test]
fn memory_usage_counts_the_entry_the_key_and_the_value() {
    let mut h = Harness::new();
    let (a, b) = (h.key_on(0, "m"), h.key_on(1, "m"));
    assert_eq!(h.run(&["SET", &a, "1"]), Reply::ok());
    // A 48-byte entry and its 2-byte tag.
    assert_eq!(h.run(&["MEMORY", "USAGE", &a]), Reply::Int(50));
    assert_eq!(h.run(&["SET", &b, &"v".repeat(100)]), Reply::ok());
    // Plus a 32-byte handle and 100 bytes.
    assert_eq!(
        h.run(&["MEMORY", "USAGE", &b, "SAMPLES", "0"]),
        Reply::Int(50 + 32 + 100)
    );
    let long_key = format!("{a}{}", "k".repeat(30));
    assert_eq!(h.run(&["SET", &long_key, "v"]), Reply::ok());
    assert_eq!(
        h.run(&["MEMORY", "USAGE", &long_key]),
        Reply::Int(50 + long_key.len() as i64)
    );
    // A sliding window in a compact entry: 32 bytes and its tag.
    assert_eq!(h.cmd("SLIDINGWINDOW sw 5 1000"), ints(&[1, 1, 4, 0]));
    assert_eq!(h.cmd("MEMORY USAGE sw"), Reply::Int(34));
    assert_eq!(h.cmd("MEMORY USAGE nokey"), Reply::Nil);
    assert_eq!(h.run(&["MEMORY", "USAGE", &a, "SAMPLES"]), err(SYNTAX));
    assert_eq!(
        h.run(&["MEMORY", "USAGE", &a, "SAMPLES", "-1"]),
        err(SYNTAX)
    );
    assert_eq!(h.run(&["MEMORY", "USAGE", &a, "BOGUS", "1"]), err(SYNTAX));
    assert_eq!(h.cmd("MEMORY USAGE nokey SAMPLES x"), err(NOT_INT));
    assert_eq!(
        h.cmd("MEMORY USAGE"),
        err("ERR wrong number of arguments for 'memory|usage' command")
    );
    assert_eq!(
        h.cmd("MEMORY FOO"),
        err("ERR unknown subcommand 'FOO'. Try MEMORY HELP.")
    );
    match h.cmd("MEMORY HELP") {
        Reply::Array(lines) => assert_eq!(lines.len(), 6),
        other => panic!("MEMORY HELP: {other:?}"),
    }
    assert_eq!(h.cmd("MEMORY"), arity("memory"));
}
