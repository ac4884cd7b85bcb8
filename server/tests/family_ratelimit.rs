//! The rate-limit family in process: TOKENLEASE, TOKENRETURN,
//! SLIDINGWINDOW, CL.THROTTLE, GCRA, RLSTATE, LH.RESTORE, on the manual
//! clock (`Harness::at_ms(t)`: monotonic t ms, wall clock T0 + t ms), for a
//! key on the connection's own shard and for one on the other shard. Replies:
//! TOKENLEASE `[granted, remaining, retry_after_ms, full_in_ms]` (retry -1:
//! never, more than the capacity); SLIDINGWINDOW `[admitted, count,
//! remaining, retry_after_ms]`; CL.THROTTLE and GCRA `[limited, limit,
//! remaining, retry_after_s, reset_after_s]`.

mod common;

use common::{arity, err, ints, NOT_INT, SYNTAX, WRONGTYPE};
use leasehold_protocol::Reply;
use leasehold_server::clock::Clock;
use leasehold_server::harness::Harness;

/// A fresh harness and one key on each of its two shards.
fn keys() -> (Harness, [String; 2]) {
    let h = Harness::new();
    let keys = [h.key_on(0, "rl"), h.key_on(1, "rl")];
    (h, keys)
}

/// Runs `line` with `key` inserted after the command name.
fn on(h: &mut Harness, key: &str, line: &str) -> Reply {
    let mut words: Vec<&str> = line.split_whitespace().collect();
    words.insert(1, key);
    h.run(&words)
}

/// Checks that `line` on `key` answers the integer array `want`.
fn expect(h: &mut Harness, key: &str, line: &str, want: &[i64]) {
    let at = h.clock().now();
    assert_eq!(on(h, key, line), ints(want), "{line} on {key} at {at:?}");
}

#[test]
fn tokenlease_grants_all_or_nothing_and_refills() {
    let (mut h, keys) = keys();
    for k in &keys {
        h.at_ms(0);
        expect(&mut h, k, "TOKENLEASE 10 1 1000 8", &[8, 2, 0, 8000]);
        expect(&mut h, k, "TOKENLEASE 10 1 1000 5", &[0, 2, 3000, 8000]);
        expect(&mut h, k, "TOKENLEASE 10 1 1000 2", &[2, 0, 0, 10000]);
        expect(
            &mut h,
            k,
            "TOKENLEASE 10 1 1000 1000000",
            &[0, 0, -1, 10000],
        );
        h.at_ms(1000);
        expect(&mut h, k, "TOKENLEASE 10 1 1000 1", &[1, 0, 0, 10000]);
        assert_eq!(h.run(&["PTTL", k]), Reply::Int(10_000));
    }
}

#[test]
fn tokenlease_retry_after_is_exact() {
    let (mut h, keys) = keys();
    for k in &keys {
        h.at_ms(0);
        expect(&mut h, k, "TOKENLEASE 1 10 1000 1", &[1, 0, 0, 100]);
        expect(&mut h, k, "TOKENLEASE 1 10 1000 1", &[0, 0, 100, 100]);
        h.at_ms(99);
        expect(&mut h, k, "TOKENLEASE 1 10 1000 1", &[0, 0, 1, 1]);
        h.at_ms(100);
        expect(&mut h, k, "TOKENLEASE 1 10 1000 1", &[1, 0, 0, 100]);
    }
}

#[test]
fn tokenlease_min_grants_what_there_is() {
    let (mut h, keys) = keys();
    for k in &keys {
        expect(&mut h, k, "TOKENLEASE 10 1 1000 7", &[7, 3, 0, 7000]);
        expect(&mut h, k, "TOKENLEASE 10 1 1000 5 MIN 2", &[3, 0, 0, 10000]);
        expect(
            &mut h,
            k,
            "TOKENLEASE 10 1 1000 5 MIN 1",
            &[0, 0, 1000, 10000],
        );
    }
}

#[test]
fn only_a_grant_emits_the_state() {
    let (mut h, keys) = keys();
    for k in &keys {
        let mut words = vec!["TOKENLEASE", k.as_str(), "10", "1", "1000", "8"];
        let (reply, effects) = h.run_effects(&words);
        assert_eq!(reply, ints(&[8, 2, 0, 8000]));
        assert_eq!(
            effects,
            vec![vec![
                "LH.RESTORE",
                k,
                "TOKENBUCKET",
                "2",
                "0",
                "1000",
                "1700000000000",
                "PXAT",
                "1700000008000"
            ]]
        );
        words[5] = "5";
        assert_eq!(h.run_effects(&words), (ints(&[0, 2, 3000, 8000]), vec![]));
    }
}

#[test]
fn tokenreturn_gives_back_and_a_full_bucket_is_deleted() {
    let (mut h, keys) = keys();
    for k in &keys {
        expect(&mut h, k, "TOKENLEASE 10 1 1000 4", &[4, 6, 0, 4000]);
        assert_eq!(on(&mut h, k, "TOKENRETURN 10 1 1000 1"), Reply::Int(7));
        assert_eq!(h.run(&["PTTL", k]), Reply::Int(3000));
        let (reply, effects) = h.run_effects(&["TOKENRETURN", k, "10", "1", "1000", "5"]);
        assert_eq!(reply, Reply::Int(10));
        assert_eq!(effects, vec![vec!["DEL", k.as_str()]]);
        assert_eq!(h.run(&["EXISTS", k]), Reply::Int(0));
        assert_eq!(on(&mut h, k, "TOKENRETURN 10 1 1000 5"), Reply::Int(10));
        assert_eq!(h.run(&["EXISTS", k]), Reply::Int(0));
    }
}

#[test]
fn sliding_window_admits_under_its_limit() {
    let (mut h, keys) = keys();
    for k in &keys {
        h.at_ms(500);
        expect(&mut h, k, "SLIDINGWINDOW 1 1000", &[1, 1, 0, 0]);
        assert_eq!(h.run(&["TYPE", k]), Reply::simple("slidingwindow"));
        assert_eq!(h.run(&["PTTL", k]), Reply::Int(1500));
        h.at_ms(1200);
        expect(&mut h, k, "SLIDINGWINDOW 1 1000", &[0, 1, 0, 800]);
        h.at_ms(2000);
        assert_eq!(h.run(&["EXISTS", k]), Reply::Int(0));
        expect(&mut h, k, "SLIDINGWINDOW 10 1000 COUNT 3", &[3, 3, 7, 0]);
        // 8 more fit once the 3 weigh at most 2: 334 ms into the next window.
        expect(&mut h, k, "SLIDINGWINDOW 10 1000 COUNT 8", &[0, 3, 7, 1334]);
    }
}

#[test]
fn cl_throttle_and_gcra_follow_redis_cell() {
    let (mut h, keys) = keys();
    for k in &keys {
        h.at_ms(0);
        expect(&mut h, k, "CL.THROTTLE 15 30 60", &[0, 16, 15, -1, 2]);
        assert_eq!(h.run(&["DEL", k]), Reply::Int(1));
        expect(&mut h, k, "CL.THROTTLE 0 1 2", &[0, 1, 0, -1, 2]);
        expect(&mut h, k, "CL.THROTTLE 0 1 2", &[1, 1, 0, 2, 2]);
        assert_eq!(h.run(&["TYPE", k]), Reply::simple("gcra"));
        assert_eq!(h.run(&["PTTL", k]), Reply::Int(2000));
        // The same state through Redis 8.8's syntax, with a fractional period.
        expect(&mut h, k, "GCRA 0 1 2.0 TOKENS 0", &[0, 1, 0, -1, 2]);
        h.at_ms(2000);
        assert_eq!(h.run(&["EXISTS", k]), Reply::Int(0));
        expect(&mut h, k, "GCRA 4 10 0.5 TOKENS 2", &[0, 5, 3, -1, 1]);
    }
}

#[test]
fn rlstate_shows_and_lh_restore_recreates() {
    let (mut h, keys) = keys();
    let [k, far] = &keys;
    h.at_ms(2000);
    expect(&mut h, k, "TOKENLEASE 10 1 1000 8", &[8, 2, 0, 8000]);
    h.at_ms(2500);
    let field = |name: &'static str, v: i64| [Reply::simple(name), Reply::Int(v)];
    let mut state = vec![Reply::simple("type"), Reply::simple("tokenbucket")];
    for (name, v) in [
        ("tokens", 2),
        ("fraction", 0),
        ("period_ms", 1000),
        ("refilled_at_ms", 1_700_000_002_000),
        ("pttl", 7500),
    ] {
        state.extend(field(name, v));
    }
    assert_eq!(h.run(&["RLSTATE", k]), Reply::Array(state));
    assert_eq!(h.cmd("RLSTATE nothing"), Reply::Nil);
    // The effect TOKENLEASE emitted, applied to a key on the other shard, is the same state.
    let restore = [
        "LH.RESTORE",
        far.as_str(),
        "TOKENBUCKET",
        "2",
        "0",
        "1000",
        "1700000002000",
        "PXAT",
        "1700000010000",
    ];
    let (reply, effects) = h.run_effects(&restore);
    assert_eq!(reply, Reply::ok());
    assert_eq!(effects, vec![restore.to_vec()], "its own effect is itself");
    assert_eq!(h.run(&["PTTL", far]), Reply::Int(7500));
    expect(&mut h, k, "TOKENLEASE 10 1 1000 3", &[0, 2, 500, 7500]);
    expect(&mut h, far, "TOKENLEASE 10 1 1000 3", &[0, 2, 500, 7500]);
    let gone = "LH.RESTORE gone GCRA 1699999999000 0 1 1700000001000 PXAT 1700000001000";
    assert_eq!(h.cmd(gone), Reply::ok());
    assert_eq!(
        h.cmd("EXISTS gone"),
        Reply::Int(0),
        "a past deadline deletes"
    );
    assert_eq!(
        h.cmd("LH.RESTORE bad TOKENBUCKET 1 1000 1000 0 PXAT 1800000000000"),
        err("ERR invalid rate limit state")
    );
    assert_eq!(h.cmd("LH.RESTORE bad HASH 1 1 1 1 PXAT 1"), err(SYNTAX));
    assert_eq!(h.cmd("LH.RESTORE bad GCRA 1 0 1 1 EXAT 1"), err(SYNTAX));
    assert_eq!(h.cmd("LH.RESTORE bad GCRA 1 0 1"), arity("lh.restore"));
    assert_eq!(h.cmd("RLSTATE"), arity("rlstate"));
}

#[test]
fn errors_name_their_argument() {
    let mut h = Harness::new();
    for (line, want) in [
        ("TOKENLEASE k 0 1 1000 1", "ERR capacity must be positive"),
        ("TOKENLEASE k 10 -1 1000 1", "ERR rate must be positive"),
        ("TOKENLEASE k 10 1 0 1", "ERR period_ms must be positive"),
        ("TOKENLEASE k 10 1 1000 x", NOT_INT),
        ("TOKENLEASE k 10 1 1000 -1", NOT_INT),
        (
            "TOKENLEASE k 10 1 1000 5 MIN 0",
            "ERR MIN must be between 1 and requested",
        ),
        (
            "TOKENLEASE k 10 1 1000 5 MIN 6",
            "ERR MIN must be between 1 and requested",
        ),
        ("TOKENLEASE k 10 1 1000 5 MAX 1", SYNTAX),
        (
            "TOKENLEASE k 10 1 1000",
            "ERR wrong number of arguments for 'tokenlease' command",
        ),
        ("TOKENRETURN k 10 1 1000 -1", NOT_INT),
        (
            "TOKENRETURN k 10 1 1000",
            "ERR wrong number of arguments for 'tokenreturn' command",
        ),
        ("SLIDINGWINDOW k 0 1000", "ERR limit must be positive"),
        ("SLIDINGWINDOW k 10 0", "ERR window_ms must be positive"),
        ("SLIDINGWINDOW k 10 1000 COUNT -1", NOT_INT),
        ("SLIDINGWINDOW k 10 1000 TIMES 1", SYNTAX),
        (
            "SLIDINGWINDOW k 10",
            "ERR wrong number of arguments for 'slidingwindow' command",
        ),
        (
            "CL.THROTTLE k 1 0 60",
            "ERR count_per_period must be positive",
        ),
        ("CL.THROTTLE k 1 1 0", "ERR period must be positive"),
        ("CL.THROTTLE k 1 1 60 1 2", SYNTAX),
        (
            "CL.THROTTLE k 9223372036854775806 1 9223372036854775807",
            "ERR rate limit parameters exceed the supported time range",
        ),
        (
            "CL.THROTTLE k 1 1",
            "ERR wrong number of arguments for 'cl.throttle' command",
        ),
        ("GCRA k 1 0 1", "ERR tokens_per_period must be positive"),
        ("GCRA k 1 1 0", "ERR period must be > 0 and < 1e12"),
        ("GCRA k 1 1 abc", "ERR value is not a valid float"),
        ("GCRA k 1 1 1 TOKENS x", NOT_INT),
        (
            "GCRA k 1 1",
            "ERR wrong number of arguments for 'gcra' command",
        ),
    ] {
        assert_eq!(h.cmd(line), err(want), "{line}");
    }
    assert_eq!(h.cmd("EXISTS k"), Reply::Int(0), "no error wrote anything");
    assert_eq!(h.cmd("SET s v"), Reply::ok());
    for line in [
        "TOKENLEASE s 10 1 1000 1",
        "TOKENRETURN s 10 1 1000 1",
        "SLIDINGWINDOW s 10 1000",
        "CL.THROTTLE s 1 1 1",
        "GCRA s 1 1 1",
        "RLSTATE s",
    ] {
        assert_eq!(h.cmd(line), err(WRONGTYPE), "{line}");
    }
    assert_eq!(h.cmd("SLIDINGWINDOW w 10 1000"), ints(&[1, 1, 9, 0]));
    assert_eq!(
        h.cmd("TOKENLEASE w 10 1 1000 1"),
        err(WRONGTYPE),
        "another algorithm's key"
    );
}

#[test]
fn hot_key_commands_check_their_arguments() {
    let (mut h, keys) = keys();
    // Nothing is hot or split on a fresh server.
    assert_eq!(h.cmd("LH.HOTKEYS"), Reply::Array(vec![]));
    assert_eq!(h.cmd("LH.MERGE nothing"), Reply::Int(0));
    assert_eq!(
        h.cmd("LH.SPLIT k 0 1 1000"),
        err("ERR capacity must be positive")
    );
    assert_eq!(
        h.cmd("LH.SPLIT k 10 1 0"),
        err("ERR period_ms must be positive")
    );
    assert_eq!(h.cmd("LH.SPLIT k 10 1"), arity("lh.split"));
    // The GCRA forms: their commands' errors for the same words.
    let gcra_forms = [
        (
            "LH.SPLIT k CL.THROTTLE 1 0 60",
            "ERR count_per_period must be positive",
        ),
        ("LH.SPLIT k GCRA 1 1 0", "ERR period must be > 0 and < 1e12"),
        ("LH.SPLIT k GCRA 1 1 1 TOKENS 2", SYNTAX),
        ("LH.SPLIT k CL.THROTTLE 1 1", SYNTAX),
        ("LH.SPLIT k THROTTLE 1 1 1", NOT_INT),
        // The sliding-window form: SLIDINGWINDOW's errors.
        (
            "LH.SPLIT k SLIDINGWINDOW 0 1000",
            "ERR limit must be positive",
        ),
        (
            "LH.SPLIT k SLIDINGWINDOW 10 0",
            "ERR window_ms must be positive",
        ),
        ("LH.SPLIT k SLIDINGWINDOW 10 1000 COUNT 1", SYNTAX),
        // A missing key has nothing to split, in every form.
        ("LH.SPLIT k 10 1 1000", "ERR no such key"),
        ("LH.SPLIT k CL.THROTTLE 9 1 1", "ERR no such key"),
        ("LH.SPLIT k SLIDINGWINDOW 10 1000", "ERR no such key"),
    ];
    for (line, want) in gcra_forms {
        assert_eq!(h.cmd(line), err(want), "{line}");
    }
    assert_eq!(
        h.cmd("LH.SPLIT k CL.THROTTLE 9223372036854775806 1 9223372036854775807"),
        h.cmd("CL.THROTTLE k 9223372036854775806 1 9223372036854775807")
    );
    // A GCRA key: WRONGTYPE for the token-bucket form.
    assert_eq!(h.cmd("CL.THROTTLE g 9 1 1"), ints(&[0, 10, 9, -1, 1]));
    assert_eq!(h.cmd("LH.SPLIT g 10 1 1000"), err(WRONGTYPE));
    assert_eq!(h.cmd("LH.SPLIT g SLIDINGWINDOW 10 1000"), err(WRONGTYPE));
    // 10^19 time units per ms: a bucket rate beyond 2^63-1, never split.
    assert_eq!(
        h.cmd("LH.SPLIT g GCRA 1 10000000000000000 1"),
        Reply::Int(0)
    );
    assert_eq!(h.cmd("LH.HOTKEYS x"), arity("lh.hotkeys"));
    h.cmd("SET s v");
    assert_eq!(h.cmd("LH.SPLIT s 10 1 1000"), err(WRONGTYPE));
    assert_eq!(h.cmd("LH.SPLIT s CL.THROTTLE 9 1 1"), err(WRONGTYPE));
    assert_eq!(h.cmd("LH.SPLIT s SLIDINGWINDOW 10 1000"), err(WRONGTYPE));
    for k in &keys {
        // Stored first: a missing key is not split.
        assert_eq!(
            on(&mut h, k, "TOKENLEASE 10 1 1000 1"),
            ints(&[1, 9, 0, 1000])
        );
        assert_eq!(on(&mut h, k, "LH.SPLIT 10 1 1000"), Reply::Int(1));
        let listed = format!("{:?}", h.cmd("LH.HOTKEYS"));
        assert!(
            listed.contains(k.as_str()) && listed.contains("yes"),
            "{listed}"
        );
        assert_eq!(on(&mut h, k, "LH.MERGE"), Reply::Int(1));
    }
    // One shard: nothing to split over.
    let mut one = Harness::with_shards(1);
    one.cmd("TOKENLEASE k 10 1 1000 1");
    assert_eq!(one.cmd("LH.SPLIT k 10 1 1000"), Reply::Int(0));
}
