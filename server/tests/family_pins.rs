//! Pinned limits in process: LH.PIN, LH.UNPIN, LH.UNPINALL, LH.PINS and the
//! check every rate-limit command makes, for keys on both shards; the
//! configured pins (`rate-limit-pins`); and the effects a change emits (once,
//! whatever the number of shards).

mod common;

use common::{err, ints};
use leasehold_protocol::Reply;
use leasehold_server::config::Config;
use leasehold_server::harness::Harness;

const TB_PINNED: &str =
    "ERR rate limit parameters of keys under 'rl:' are pinned to TOKENBUCKET 10 1 1000";

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec().into())
}

#[test]
fn a_caller_cannot_widen_a_pinned_bucket() {
    let mut h = Harness::new();
    let keys = [h.key_on(0, "rl:"), h.key_on(1, "rl:")];
    assert_eq!(h.cmd("LH.PIN rl: TOKENBUCKET 10 1 1000"), Reply::ok());
    for k in &keys {
        // The widening return and the lease it would enable are refused,
        // and the refused calls create nothing.
        let ret = h.run(&["TOKENRETURN", k, "1000000", "1", "60000", "500000"]);
        assert_eq!(ret, err(TB_PINNED));
        let lease = h.run(&["TOKENLEASE", k, "1000000", "1", "60000", "500000"]);
        assert_eq!(lease, err(TB_PINNED));
        assert_eq!(h.run(&["EXISTS", k]), Reply::Int(0));
        // The pinned parameters work as before.
        let lease = h.run(&["TOKENLEASE", k, "10", "1", "1000", "500000", "MIN", "1"]);
        assert_eq!(lease, ints(&[10, 0, 0, 10000]));
        let ret = h.run(&["TOKENRETURN", k, "10", "1", "1000", "500000"]);
        assert_eq!(ret, Reply::Int(10));
        // Another algorithm on the pinned prefix is refused too.
        let sw = h.run(&["SLIDINGWINDOW", k, "10", "1000"]);
        assert_eq!(sw, err(TB_PINNED));
    }
    // Keys outside the prefix are free.
    assert_eq!(
        h.cmd("TOKENLEASE other 1000000 1 60000 500000"),
        ints(&[500000, 500000, 0, 30_000_000_000])
    );
}

#[test]
fn the_longest_prefix_decides_and_gcra_is_compared_by_its_interval() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("LH.PIN g: GCRA 15 30 60000"), Reply::ok());
    assert_eq!(h.cmd("LH.PIN g:vip: GCRA 100 30 60000"), Reply::ok());
    for k in [h.key_on(0, "g:"), h.key_on(1, "g:")] {
        // CL.THROTTLE k 15 30 60 and GCRA k 15 30 60 (seconds) are T = 2 s.
        let cell = h.run(&["CL.THROTTLE", &k, "15", "30", "60"]);
        assert_eq!(cell, ints(&[0, 16, 15, -1, 2]));
        let gcra = h.run(&["GCRA", &k, "15", "30", "60"]);
        assert_eq!(gcra, ints(&[0, 16, 14, -1, 4]));
        let wider = h.run(&["CL.THROTTLE", &k, "15", "30", "30"]);
        assert_eq!(
            wider,
            err("ERR rate limit parameters of keys under 'g:' are pinned to GCRA 15 30 60000")
        );
    }
    let vip = h.key_on(1, "g:vip:");
    assert_eq!(
        h.run(&["CL.THROTTLE", &vip, "100", "30", "60"]),
        ints(&[0, 101, 100, -1, 2])
    );
    assert!(matches!(
        h.run(&["CL.THROTTLE", &vip, "15", "30", "60"]),
        Reply::Error(_)
    ));
}

#[test]
fn pins_are_listed_replaced_and_removed_on_every_shard() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("LH.PINS"), Reply::Array(vec![]));
    assert_eq!(h.cmd("LH.PIN w: SLIDINGWINDOW 5 1000"), Reply::ok());
    assert_eq!(h.cmd("lh.pin w: slidingwindow 6 1000"), Reply::ok());
    assert_eq!(
        h.cmd("LH.PINS"),
        Reply::Array(vec![Reply::Array(vec![
            bulk("w:"),
            bulk("runtime"),
            bulk("SLIDINGWINDOW"),
            Reply::Int(6),
            Reply::Int(1000),
        ])])
    );
    let k1 = h.key_on(1, "w:");
    assert!(matches!(
        h.run(&["SLIDINGWINDOW", &k1, "5", "1000"]),
        Reply::Error(_)
    ));
    assert_eq!(
        h.run(&["SLIDINGWINDOW", &k1, "6", "1000"]),
        ints(&[1, 1, 5, 0])
    );
    assert_eq!(h.cmd("LH.UNPIN w:"), Reply::Int(1));
    assert_eq!(h.cmd("LH.UNPIN w:"), Reply::Int(0));
    assert_eq!(
        h.run(&["SLIDINGWINDOW", &k1, "5", "1000"]),
        ints(&[1, 2, 3, 0])
    );
    h.cmd("LH.PIN a TOKENBUCKET 1 1 1");
    h.cmd("LH.PIN b TOKENBUCKET 1 1 1");
    assert_eq!(h.cmd("LH.UNPINALL"), Reply::Int(2));
    assert_eq!(h.cmd("LH.UNPINALL"), Reply::Int(0));
    assert_eq!(h.cmd("LH.PINS"), Reply::Array(vec![]));
}

#[test]
fn bad_pins_say_why_and_change_nothing() {
    let mut h = Harness::new();
    for (line, why) in [
        (
            "LH.PIN rl: LEAKY 1 2",
            "ERR unknown pin kind (TOKENBUCKET, SLIDINGWINDOW or GCRA)",
        ),
        (
            "LH.PIN rl: TOKENBUCKET 10 1",
            "ERR TOKENBUCKET pins take 3 integer parameters",
        ),
        (
            "LH.PIN rl: TOKENBUCKET 10 0 1000",
            "ERR pin parameters must be positive",
        ),
        (
            "LH.PIN rl: TOKENBUCKET 10 -1 1000",
            "ERR pin parameters must be non-negative integers",
        ),
        (
            "LH.PIN rl: GCRA 9223372036854775807 1 9223372036854775807",
            "ERR pin parameters exceed the supported time range",
        ),
        (
            "LH.PIN rl:",
            "ERR wrong number of arguments for 'lh.pin' command",
        ),
    ] {
        assert_eq!(h.cmd(line), err(why), "{line}");
    }
    assert_eq!(h.cmd("LH.PINS"), Reply::Array(vec![]));
}

#[test]
fn a_change_is_one_effect_whatever_the_shards() {
    let mut h = Harness::new();
    let (_, effects) = h.run_effects("LH.PIN rl: TOKENBUCKET 10 1 1000");
    assert_eq!(
        effects,
        vec![vec!["LH.PIN", "rl:", "TOKENBUCKET", "10", "1", "1000"]]
    );
    let (_, effects) = h.run_effects("LH.UNPIN rl:");
    assert_eq!(effects, vec![vec!["LH.UNPIN", "rl:"]]);
    let (_, effects) = h.run_effects("LH.UNPIN rl:");
    assert!(effects.is_empty(), "nothing removed, nothing emitted");
    h.cmd("LH.PIN x GCRA 0 1 1000");
    let (_, effects) = h.run_effects("LH.UNPINALL");
    assert_eq!(effects, vec![vec!["LH.UNPINALL"]]);
    // A refused call emits nothing.
    h.cmd("LH.PIN rl: TOKENBUCKET 10 1 1000");
    let (_, effects) = h.run_effects("TOKENRETURN rl:k 1000000 1 60000 500000");
    assert!(effects.is_empty());
}

#[test]
fn configured_pins_hold_and_cannot_be_changed_at_run_time() {
    let mut config = Config::default();
    config.ratelimit.pins = "rl: TOKENBUCKET 10 1 1000; api: SLIDINGWINDOW 100 60000".into();
    let mut h = Harness::with_config(config, 2);
    let k = h.key_on(1, "rl:");
    assert_eq!(
        h.run(&["TOKENRETURN", &k, "1000000", "1", "60000", "500000"]),
        err(TB_PINNED)
    );
    let configured = "ERR the prefix is pinned by the configuration (rate-limit-pins)";
    assert_eq!(
        h.cmd("LH.PIN rl: TOKENBUCKET 1000000 1 60000"),
        err(configured)
    );
    assert_eq!(h.cmd("LH.UNPIN rl:"), err(configured));
    assert_eq!(h.cmd("LH.UNPINALL"), Reply::Int(0));
    // A longer run-time prefix under a configured one is allowed.
    assert_eq!(h.cmd("LH.PIN rl:vip: TOKENBUCKET 100 10 1000"), Reply::ok());
    let Reply::Array(rows) = h.cmd("LH.PINS") else {
        panic!("LH.PINS is an array");
    };
    let sources: Vec<(Reply, Reply)> = rows
        .into_iter()
        .map(|r| match r {
            Reply::Array(f) => (f[0].clone(), f[1].clone()),
            other => panic!("row {other:?}"),
        })
        .collect();
    assert_eq!(
        sources,
        vec![
            (bulk("rl:"), bulk("config")),
            (bulk("api:"), bulk("config")),
            (bulk("rl:vip:"), bulk("runtime")),
        ]
    );
}

#[test]
#[should_panic(
    expected = "invalid rate-limit-pins: pin 1 ('rl: TOKENBUCKET 10'): TOKENBUCKET pins take 3 integer parameters"
)]
fn a_bad_configured_pin_refuses_the_start() {
    let mut config = Config::default();
    config.ratelimit.pins = "rl: TOKENBUCKET 10".into();
    Harness::with_config(config, 1);
}
