//! Hot keys in process (`docs/hotkeys.md`): a split token bucket against the
//! same calls on an unsplit one, on the manual clock, from connections on
//! both threads; the detector splitting a key that turns hot and merging it
//! once it cools, with no token minted or lost; `hotkey-split no`; the
//! commands that merge a split key first.

use leasehold_protocol::Reply;
use leasehold_server::config::Config;
use leasehold_server::harness::Harness;
use proptest::prelude::*;

mod common;

use common::hotkeys::*;

const CAP: u64 = 20;
const RATE: u64 = 3;
const PERIOD: u64 = 1000;

fn policy() -> String {
    format!("{CAP} {RATE} {PERIOD}")
}

/// An RLSTATE reply as (units of `1/PERIOD` token at monotonic `now`
/// under the test's policy, pttl): equal for two representations of one
/// balance (`None`: missing, or full under the test's policy).
fn balance(r: &Reply, now: u64) -> Option<(u64, i64)> {
    let Reply::Array(items) = r else {
        return None;
    };
    let field = |name: &'static str| {
        let i = items.iter().position(|x| *x == Reply::simple(name))?;
        match items.get(i + 1) {
            Some(Reply::Int(v)) => Some(*v),
            _ => None,
        }
    };
    let (tokens, frac) = (field("tokens")? as u64, field("fraction")? as u64);
    let at = field("refilled_at_ms")? as u64 - leasehold_server::harness::T0_MS;
    let units = (tokens * PERIOD + frac + now.saturating_sub(at) * RATE).min(CAP * PERIOD);
    // Full under the test's policy reads as missing (a call with a larger
    // capacity may have left more, which this policy clamps).
    if units == CAP * PERIOD {
        return None;
    }
    Some((units, field("pttl")?))
}

#[derive(Debug, Clone)]
enum Op {
    Lease {
        thread: usize,
        req: u64,
        min: u64,
    },
    Return {
        thread: usize,
        n: u64,
    },
    Advance(u64),
    /// Split again (after a merge), on the split server only.
    Resplit,
    /// RLSTATE: merges the split key first; both must read the same.
    State,
    /// A TOKENLEASE with another policy: merges, then runs unsplit.
    OtherPolicy {
        thread: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..2usize, 1..6u64, 0..6u64).prop_map(|(thread, req, m)| Op::Lease {
            thread,
            req,
            min: m.min(req),
        }),
        1 => (0..2usize, 0..4u64).prop_map(|(thread, n)| Op::Return { thread, n }),
        3 => prop_oneof![0..50u64, 0..2000u64, Just(10_000u64)].prop_map(Op::Advance),
        1 => Just(Op::Resplit),
        1 => Just(Op::State),
        1 => (0..2usize).prop_map(|thread| Op::OtherPolicy { thread }),
    ]
}

/// Runs `ops` on a split key (server `s`) and on the same key never split
/// (server `u`), asserting the same replies for every call.
fn compare(key_shard: usize, ops: &[Op]) -> Result<(u64, u64), TestCaseError> {
    let ([mut s0, s1], [mut u0, u1], key) = split_and_unsplit(key_shard);
    prop_assert_eq!(u0.key_on(key_shard, "hot"), key.clone());
    let split = |h: &mut Harness, key: &str| h.run(&["LH.SPLIT", key, "20", "3", "1000"]);
    // A missing key is not split: one call stores it on both first.
    let first = format!("TOKENLEASE {key} {} 1", policy());
    prop_assert_eq!(s0.cmd(&first), u0.cmd(&first));
    prop_assert_eq!(split(&mut s0, &key), Reply::Int(1));
    // A key's TTL follows the policy of its last write: LH.SPLIT (split
    // side only) stores under the test's policy, so after a call with
    // another policy the two TTLs may differ, not the balances.
    let mixed = ops.iter().any(|o| matches!(o, Op::OtherPolicy { .. }));
    let balance =
        move |r: &Reply, now: u64| balance(r, now).map(|(u, ttl)| (u, (!mixed).then_some(ttl)));
    let words = |line: String| line.split(' ').map(String::from).collect::<Vec<_>>();
    let steps = ops.iter().map(|op| match *op {
        Op::Lease { thread, req, min } => Step::Call {
            thread,
            words: words(match min {
                0 => format!("TOKENLEASE {key} {} {req}", policy()),
                _ => format!("TOKENLEASE {key} {} {req} MIN {min}", policy()),
            }),
            counted: Some(Box::new(granted)),
        },
        Op::Return { thread, n } => Step::Call {
            thread,
            words: words(format!("TOKENRETURN {key} {} {n}", policy())),
            counted: None,
        },
        Op::OtherPolicy { thread } => Step::Call {
            thread,
            words: words(format!("TOKENLEASE {key} 25 3 1000 1")),
            counted: None,
        },
        Op::State => Step::State,
        Op::Advance(ms) => Step::Advance(ms),
        Op::Resplit => Step::Resplit,
    });
    let mut c = Compared::new(([s0, s1], [u0, u1], key.clone()));
    let totals = compare_steps(
        &mut c,
        steps.collect::<Vec<_>>(),
        |h, key| drop(split(h, key)),
        |c, i| {
            let (rs, ru, now) = c.states();
            prop_assert_eq!(balance(&rs, now), balance(&ru, now), "op {}", i);
            Ok(())
        },
    )?;
    // Merged, the split key holds exactly what the unsplit one holds (the
    // same balance now; the stored instant may differ).
    let (rs, ru, now) = c.merged();
    prop_assert_eq!(balance(&rs, now), balance(&ru, now));
    Ok(totals)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Every reply of the split key equals the unsplit key's: grants,
    /// denials, remaining, retry_after_ms and reset_after_ms; so never more
    /// tokens granted in total.
    #[test]
    fn a_split_key_answers_as_the_unsplit_key(
        key_shard in 0..2usize,
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let (s, u) = compare(key_shard, &ops)?;
        prop_assert_eq!(s, u);
    }
}

#[test]
fn local_grants_need_no_hop_and_borrows_go_to_the_owner() {
    let (mut a, mut b) = server(Config::default());
    let key = a.key_on(0, "hot");
    let lease = |h: &mut Harness, n: &str| h.run(&["TOKENLEASE", &key, "10", "1", "3600000", n]);
    // Two tokens spent first (a missing key is not split), 8 left.
    assert_eq!(granted(&lease(&mut a, "2")), 2);
    assert_eq!(
        a.run(&["LH.SPLIT", &key, "10", "1", "3600000"]),
        Reply::Int(1)
    );
    // 4 tokens leased to each shard: thread 1 serves 4 alone.
    let batches = |h: &mut Harness| info_field(h, "hotkey_local_grants");
    for i in 0..4 {
        let r = lease(&mut b, "1");
        assert_eq!(granted(&r), 1, "grant {i}: {r:?}");
    }
    assert_eq!(batches(&mut a), 4);
    assert_eq!(info_field(&mut a, "hotkey_borrows"), 0);
    // The fifth borrows: the owner gathers (4 left on shard 0) and grants.
    assert_eq!(granted(&lease(&mut b, "1")), 1);
    assert_eq!(info_field(&mut a, "hotkey_borrows"), 1);
    // 3 left in all; thread 1 takes them one at a time, then is denied.
    let mut got = 0;
    for _ in 0..6 {
        got += granted(&lease(&mut b, "1"));
    }
    assert_eq!(got, 3);
    let r = lease(&mut a, "1");
    assert_eq!(
        r,
        Reply::Array(vec![
            Reply::Int(0),
            Reply::Int(0),
            Reply::Int(3_600_000),
            Reply::Int(36_000_000)
        ])
    );
}

#[test]
fn split_then_merge_mints_and_loses_nothing() {
    let (mut a, mut b) = server(Config::default());
    let key = a.key_on(1, "hot");
    a.run(&["TOKENLEASE", &key, "100", "7", "1000", "37"]);
    a.clock().advance_ms(333);
    let before = a.run(&["RLSTATE", &key]);
    assert_eq!(
        a.run(&["LH.SPLIT", &key, "100", "7", "1000"]),
        Reply::Int(1)
    );
    assert_eq!(
        a.run(&["LH.SPLIT", &key, "100", "7", "1000"]),
        Reply::Int(0)
    );
    // One key, one type, while split.
    assert_eq!(b.run(&["TYPE", &key]), Reply::simple("tokenbucket"));
    assert_eq!(b.run(&["DBSIZE"]), Reply::Int(1));
    assert_eq!(a.run(&["LH.MERGE", &key]), Reply::Int(1));
    assert_eq!(a.run(&["LH.MERGE", &key]), Reply::Int(0));
    assert_eq!(a.run(&["RLSTATE", &key]), before);
    // RLSTATE itself merges a split key first.
    a.run(&["LH.SPLIT", &key, "100", "7", "1000"]);
    assert_eq!(a.run(&["RLSTATE", &key]), before);
    assert_eq!(info_field(&mut a, "hotkey_split_keys"), 0);
    assert_eq!(info_field(&mut a, "hotkey_merges"), 2);
}

#[test]
fn del_and_expire_on_a_split_key_see_the_whole_bucket() {
    let (mut a, mut b) = server(Config::default());
    let key = a.key_on(0, "hot");
    let lease = |h: &mut Harness, n: &str| h.run(&["TOKENLEASE", &key, "10", "1", "3600000", n]);
    let split = |h: &mut Harness| h.run(&["LH.SPLIT", &key, "10", "1", "3600000"]);
    assert_eq!(granted(&lease(&mut a, "1")), 1);
    assert_eq!(split(&mut a), Reply::Int(1));
    assert_eq!(granted(&lease(&mut b, "5")), 5);
    // DEL merges first: the bucket is full again, and only 10 more come.
    assert_eq!(a.run(&["DEL", &key]), Reply::Int(1));
    assert_eq!(granted(&lease(&mut a, "1")), 1);
    assert_eq!(split(&mut a), Reply::Int(1));
    let mut got = 1;
    for i in 0..30 {
        let h = if i % 2 == 0 { &mut a } else { &mut b };
        got += granted(&lease(h, "1"));
    }
    assert_eq!(got, 10);
    // Its TTL is the whole bucket's: full again in 10 hours.
    assert_eq!(a.run(&["PTTL", &key]), Reply::Int(36_000_000));
    // RENAME to a key of the other shard moves the whole (empty) bucket.
    assert_eq!(
        a.run(&["TOKENRETURN", &key, "10", "1", "3600000", "4"]),
        Reply::Int(4)
    );
    a.run(&["LH.SPLIT", &key, "10", "1", "3600000"]);
    assert_eq!(granted(&lease(&mut b, "1")), 1);
    let other = a.key_on(1, "moved");
    assert_eq!(a.run(&["RENAME", &key, &other]), Reply::ok());
    assert_eq!(info_field(&mut a, "hotkey_split_keys"), 0);
    let r = b.run(&["TOKENLEASE", &other, "10", "1", "3600000", "10", "MIN", "1"]);
    assert_eq!(granted(&r), 3, "{r:?}");
}

/// A missing key (never called) has no state to split: LH.SPLIT of a
/// bucket or a GCRA key answers `ERR no such key` and stores nothing, so
/// TYPE, EXISTS and DBSIZE see no key, from either thread.
#[test]
fn lh_split_of_a_missing_key_is_an_error_and_leaves_no_key() {
    let (mut a, mut b) = server(Config::default());
    let key = a.key_on(1, "fresh");
    let other = a.key_on(0, "other");
    assert_eq!(
        granted(&a.run(&["TOKENLEASE", &other, "10", "1", "1000", "1"])),
        1
    );
    let forms: [&[&str]; 3] = [
        &["10", "1", "1000"],
        &["CL.THROTTLE", "9", "1", "3600"],
        &["GCRA", "9", "1", "3600"],
    ];
    for form in forms {
        let mut args = vec!["LH.SPLIT", &key];
        args.extend(form);
        assert_eq!(a.run(&args), Reply::err("ERR no such key"), "{form:?}");
        assert_eq!(b.run(&["TYPE", &key]), Reply::simple("none"));
        assert_eq!(b.run(&["EXISTS", &key]), Reply::Int(0));
        assert_eq!(a.run(&["DBSIZE"]), Reply::Int(1));
        assert_eq!(a.run(&["RLSTATE", &key]), Reply::Nil);
    }
    assert_eq!(info_field(&mut a, "hotkey_splits"), 0);
    // Once a call stored it, it splits.
    assert_eq!(
        granted(&b.run(&["TOKENLEASE", &key, "10", "1", "1000", "1"])),
        1
    );
    assert_eq!(a.run(&["LH.SPLIT", &key, "10", "1", "1000"]), Reply::Int(1));
    assert_eq!(a.run(&["DBSIZE"]), Reply::Int(2));
}

/// A hot key every call of which is denied (more than the capacity asked)
/// stays missing: the detector lists it but never splits it.
#[test]
fn the_detector_never_splits_a_key_that_stays_missing() {
    let (mut a, mut b) = server(detecting(true));
    let key = a.key_on(1, "launch");
    let call = Call {
        line: "TOKENLEASE {key} 10 1 1000 11",
        granted,
    };
    assert_eq!(load_with(call, &mut a, &mut b, &key, 50, 5), 0);
    assert_eq!(info_field(&mut a, "hotkey_splits"), 0);
    assert_eq!(b.run(&["TYPE", &key]), Reply::simple("none"));
    assert_eq!(a.run(&["EXISTS", &key]), Reply::Int(0));
    assert_eq!(b.run(&["DBSIZE"]), Reply::Int(0));
    let listed = format!("{:?}", a.cmd("LH.HOTKEYS"));
    assert!(
        listed.contains("launch") && listed.contains("no"),
        "{listed}"
    );
}

const LAUNCH: Call = Call {
    line: "TOKENLEASE {key} 1000000 1 1000 1",
    granted,
};

/// Calls `call` on `key` `n` times per 100 ms window for `windows` windows,
/// alternating the two connections; returns what they were granted.
fn load(a: &mut Harness, b: &mut Harness, key: &str, per_window: u64, windows: u64) -> u64 {
    load_with(LAUNCH, a, b, key, per_window, windows)
}

#[test]
fn a_key_that_turns_hot_is_split_and_merged_once_it_cools() {
    turns_hot_then_cools(LAUNCH);
}

#[test]
fn hotkey_split_no_never_splits_but_still_lists() {
    let (mut a, mut b) = server(detecting(false));
    let key = a.key_on(0, "launch");
    load(&mut a, &mut b, &key, 50, 5);
    assert_eq!(info_field(&mut a, "hotkey_splits"), 0);
    assert_eq!(info_field(&mut a, "hotkey_local_grants"), 0);
    let listed = format!("{:?}", a.cmd("LH.HOTKEYS"));
    assert!(
        listed.contains("launch") && listed.contains("no"),
        "{listed}"
    );
    // Turned on at run time, the hot key splits at the next window.
    assert_eq!(a.cmd("CONFIG SET hotkey-split yes"), Reply::ok());
    load(&mut a, &mut b, &key, 50, 2);
    assert_eq!(info_field(&mut a, "hotkey_splits"), 1);
    // Turned off again: merged at the next window.
    assert_eq!(a.cmd("CONFIG SET hotkey-split no"), Reply::ok());
    load(&mut a, &mut b, &key, 50, 2);
    assert_eq!(info_field(&mut a, "hotkey_split_keys"), 0);
}

/// Whole tokens an RLSTATE reply shows (0 for a missing key: callers here
/// compare drained buckets, never full ones).
fn tokens(r: &Reply) -> i64 {
    field(r, "tokens").unwrap_or(0)
}

/// What a GCRA key's RLSTATE is worth: the later its empty instant, the
/// fewer cells it holds (a missing key is full: worth the most).
fn cells(r: &Reply) -> i64 {
    match (
        field(r, "empty_at_ms"),
        field(r, "empty_at_fraction"),
        field(r, "units_per_ms"),
    ) {
        (Some(ms), Some(frac), Some(units)) => -(ms * units + frac),
        _ => i64::MAX,
    }
}

#[test]
fn the_stream_sees_one_key_and_never_more_tokens_than_the_primary() {
    stream_sees_one_key(
        &["100", "1", "3600000"],
        "TOKENLEASE {key} 100 1 3600000 3",
        tokens,
    );
}

// ------------------------------------------------------------ GCRA keys
//
// A CL.THROTTLE / GCRA key splits as its equivalent bucket
// (`ratelimit::gcra::bucket_policy`): the same comparisons, on a TAT.

/// The two ways of writing one GCRA limit of 20 cells, 3 per second
/// (`CL.THROTTLE` counts time in 1/3 ms, `GCRA` in 1/3000 ms, so they are
/// two policies: a call of one merges a key split under the other).
const CELL: &str = "CL.THROTTLE {key} 19 3 1 {q}";
const GCRA: &str = "GCRA {key} 19 3 1 TOKENS {q}";

fn throttle_line(form: &str, key: &str, q: u64) -> Vec<String> {
    form.replace("{key}", key)
        .replace("{q}", &q.to_string())
        .split(' ')
        .map(String::from)
        .collect()
}

/// `LH.SPLIT key <form's policy>`.
fn split_as(h: &mut Harness, form: &str, key: &str) -> Reply {
    let words = throttle_line(form, key, 0);
    let mut args = vec!["LH.SPLIT".to_string(), key.to_string(), words[0].clone()];
    args.extend(words[2..5].iter().cloned());
    h.run(&args.iter().map(String::as_str).collect::<Vec<_>>()[..])
}

/// Whether a CL.THROTTLE / GCRA reply allowed the call.
fn allowed(r: &Reply) -> bool {
    matches!(r, Reply::Array(a) if a.first() == Some(&Reply::Int(0)))
}

#[derive(Debug, Clone)]
enum GOp {
    /// A call of the split's form, `q` cells (0 peeks; 25 is over the limit).
    Throttle {
        thread: usize,
        q: u64,
    },
    /// A call of the other form: merges, then runs unsplit.
    OtherForm {
        thread: usize,
        q: u64,
    },
    /// A call with another burst: merges, then runs unsplit.
    OtherBurst {
        thread: usize,
    },
    /// A call whose policy has no bucket form (a period of 2^63-1 s):
    /// merges, then runs unsplit.
    Unsplittable {
        thread: usize,
    },
    /// TOKENLEASE with the equivalent bucket's very policy: WRONGTYPE on
    /// both, never served from a slot.
    Mixed {
        thread: usize,
    },
    Advance(u64),
    Resplit,
    /// RLSTATE and PTTL: the split key merges first; both read the same.
    State,
}

fn gop() -> impl Strategy<Value = GOp> {
    let thread = 0..2usize;
    prop_oneof![
        10 => (thread.clone(), prop_oneof![8 => 1..4u64, 1 => Just(0u64), 1 => Just(25u64)])
            .prop_map(|(thread, q)| GOp::Throttle { thread, q }),
        1 => (thread.clone(), 1..3u64).prop_map(|(thread, q)| GOp::OtherForm { thread, q }),
        1 => thread.clone().prop_map(|thread| GOp::OtherBurst { thread }),
        1 => thread.clone().prop_map(|thread| GOp::Unsplittable { thread }),
        1 => thread.prop_map(|thread| GOp::Mixed { thread }),
        4 => prop_oneof![0..40u64, 0..1500u64, Just(9_000u64)].prop_map(GOp::Advance),
        1 => Just(GOp::Resplit),
        1 => Just(GOp::State),
    ]
}

/// Runs `ops` on a GCRA key split under `form` and on the same key never
/// split, asserting the same replies for every call and the same state
/// after the merge; returns the cells each allowed.
fn compare_gcra(key_shard: usize, form: &str, ops: &[GOp]) -> Result<(u64, u64), TestCaseError> {
    let other = if form == CELL { GCRA } else { CELL };
    let ([mut s0, s1], [mut u0, u1], key) = split_and_unsplit(key_shard);
    // A missing key is not split: one cell spent on both first.
    let first = throttle_line(form, &key, 1);
    prop_assert_eq!(s0.run(&first[..]), u0.run(&first[..]));
    prop_assert_eq!(split_as(&mut s0, form, &key), Reply::Int(1));
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let steps = ops.iter().map(|op| {
        let call = |thread: usize, words| Step::Call {
            thread,
            words,
            counted: None,
        };
        match *op {
            GOp::Throttle { thread, q } => Step::Call {
                thread,
                words: throttle_line(form, &key, q),
                counted: Some(Box::new(move |r: &Reply| q * u64::from(allowed(r)))),
            },
            GOp::OtherForm { thread, q } => call(thread, throttle_line(other, &key, q)),
            GOp::OtherBurst { thread } => call(
                thread,
                throttle_line(CELL, &key, 1)
                    .into_iter()
                    .map(|w| if w == "19" { "9".into() } else { w })
                    .collect(),
            ),
            GOp::Unsplittable { thread } => call(
                thread,
                words(&["CL.THROTTLE", &key, "0", "10000", "9223372036854775807"]),
            ),
            GOp::Mixed { thread } => {
                call(thread, words(&["TOKENLEASE", &key, "20", "3", "1000", "1"]))
            }
            GOp::Advance(ms) => Step::Advance(ms),
            GOp::Resplit => Step::Resplit,
            GOp::State => Step::State,
        }
    });
    let mut c = Compared::new(([s0, s1], [u0, u1], key.clone()));
    let totals = compare_steps(
        &mut c,
        steps.collect::<Vec<_>>(),
        |h, key| drop(split_as(h, form, key)),
        |c, i| {
            let (rs, ru, _) = c.states();
            prop_assert_eq!(rs, ru, "op {}", i);
            let (ps, pu) = c.both(1, &["PTTL", "{key}"]);
            prop_assert_eq!(ps, pu, "op {}", i);
            Ok(())
        },
    )?;
    let (rs, ru, _) = c.merged();
    prop_assert_eq!(rs, ru);
    Ok(totals)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Every reply of a split CL.THROTTLE or GCRA key equals the unsplit
    /// key's (limited, limit, remaining, retry_after, reset_after), errors
    /// included, and the merged TAT is the unsplit key's.
    #[test]
    fn a_split_gcra_key_answers_as_the_unsplit_key(
        key_shard in 0..2usize,
        gcra_form in any::<bool>(),
        ops in proptest::collection::vec(gop(), 1..80),
    ) {
        let form = if gcra_form { GCRA } else { CELL };
        let (s, u) = compare_gcra(key_shard, form, &ops)?;
        prop_assert_eq!(s, u);
    }
}

#[test]
fn a_split_gcra_key_grants_locally_and_merges_to_the_same_tat() {
    let ([mut a, mut b], [mut ua, mut ub], key) = split_and_unsplit(0);
    let call = |h: &mut Harness| h.run(&["CL.THROTTLE", &key, "9", "1", "3600", "1"]);
    // Two cells spent, the last by GCRA, and 1.234 s refilled.
    for h in [&mut a, &mut ua] {
        call(h);
        h.run(&["GCRA", &key, "9", "1", "3600", "TOKENS", "1"]);
        h.clock().advance_ms(1234);
    }
    let before = a.run(&["RLSTATE", &key]);
    assert_eq!(before, ua.run(&["RLSTATE", &key]));
    // Split under the GCRA form: the TAT is in its unit (1/1000 ms), so the
    // CL.THROTTLE form (whole ms) does not split it until it writes it.
    assert_eq!(
        a.run(&["LH.SPLIT", &key, "CL.THROTTLE", "9", "1", "3600"]),
        Reply::Int(0)
    );
    assert_eq!(
        a.run(&["LH.SPLIT", &key, "GCRA", "9", "1", "3600"]),
        Reply::Int(1)
    );
    assert_eq!(b.run(&["TYPE", &key]), Reply::simple("gcra"));
    assert_eq!(b.run(&["DBSIZE"]), Reply::Int(1));
    // Split then merged with nothing between: the very TAT.
    assert_eq!(a.run(&["LH.MERGE", &key]), Reply::Int(1));
    assert_eq!(a.run(&["RLSTATE", &key]), before);
    // 8.0003 cells (10 - 2 + 1.234 s of one cell an hour): 4 per slot. The
    // other thread takes its slot's cells locally, then borrows; every
    // reply is the unsplit key's.
    a.run(&["LH.SPLIT", &key, "GCRA", "9", "1", "3600"]);
    let gcra = |h: &mut Harness| h.run(&["GCRA", &key, "9", "1", "3600"]);
    let mut allowed_here = 0;
    for i in 0..10 {
        let (rs, ru) = (gcra(&mut b), gcra(&mut ub));
        assert_eq!(rs, ru, "call {i}");
        allowed_here += u64::from(allowed(&rs));
    }
    assert_eq!(allowed_here, 8);
    assert!(info_field(&mut a, "hotkey_local_grants") >= 4);
    assert!(info_field(&mut a, "hotkey_borrows") >= 1);
    // Denied now: retry_after and reset_after are the unsplit key's.
    let r = gcra(&mut a);
    assert_eq!(r, gcra(&mut ua));
    // Limited, of 10, none left, one cell in 3 598.766 s, full in
    // 35 998.766 s (rounded up, as redis-cell does).
    assert_eq!(
        r,
        Reply::Array([1, 10, 0, 3599, 35_999].map(Reply::Int).to_vec())
    );
    assert_eq!(a.run(&["LH.MERGE", &key]), Reply::Int(1));
    assert_eq!(a.run(&["RLSTATE", &key]), ua.run(&["RLSTATE", &key]));
}

#[test]
fn the_stream_sees_one_gcra_key_and_never_more_cells_than_the_primary() {
    stream_sees_one_key(
        &["CL.THROTTLE", "99", "1", "3600"],
        "CL.THROTTLE {key} 99 1 3600 3",
        cells,
    );
}

/// PTTL, RLSTATE, TYPE, EXISTS, DEL and EXPIRE on a split GCRA key answer
/// as on the unsplit key (those that read its state merge it first), from
/// either thread.
#[test]
fn pttl_del_and_rlstate_on_a_split_gcra_key_see_one_key() {
    let ([mut a, mut b], [mut ua, mut ub], key) = split_and_unsplit(0);
    let cell = format!("CL.THROTTLE {key} 9 1 3600 1");
    let split = format!("LH.SPLIT {key} CL.THROTTLE 9 1 3600");
    // (thread, command): both servers run it, the split one also splits
    // the key again before it when `resplit`.
    let script: &[(usize, &str, bool)] = &[
        (1, &cell, false),
        (1, &cell, false),
        (1, &cell, false),
        (1, &format!("PTTL {key}"), false),
        (1, &cell, true),
        (0, &format!("RLSTATE {key}"), false),
        (1, &format!("TYPE {key}"), true),
        (1, &format!("EXISTS {key}"), false),
        (1, &cell, false),
        (0, &format!("DEL {key}"), false),
        (1, &format!("EXISTS {key}"), false),
        (1, &format!("PTTL {key}"), false),
        (1, &cell, false),
        (1, &format!("EXPIRE {key} 100"), true),
        (0, &format!("PTTL {key}"), false),
        (1, &format!("RLSTATE {key}"), false),
    ];
    let mut replies = Vec::new();
    for (i, (thread, line, resplit)) in script.iter().enumerate() {
        // Split once the first call stored the key (a missing key is not).
        if *resplit || i == 1 {
            assert_eq!(a.cmd(&split), Reply::Int(1), "step {i}");
        }
        let (rs, ru) = match thread {
            0 => (a.cmd(line), ua.cmd(line)),
            _ => (b.cmd(line), ub.cmd(line)),
        };
        assert_eq!(rs, ru, "step {i}: {line}");
        replies.push(rs);
    }
    // 3 cells of 10 at one an hour: full in 3 h. DEL makes it full (a
    // missing key); one cell later, EXPIRE sets the TTL of the whole key.
    assert_eq!(replies[3], Reply::Int(3 * 3_600_000));
    assert_eq!(replies[6], Reply::simple("gcra"));
    assert_eq!(replies[9], Reply::Int(1));
    assert_eq!(replies[10], Reply::Int(0));
    assert_eq!(replies[11], Reply::Int(-2));
    assert_eq!(replies[13], Reply::Int(1));
    assert_eq!(replies[14], Reply::Int(100_000));
    assert_eq!(
        info_field(&mut a, "hotkey_merges"),
        info_field(&mut a, "hotkey_splits")
    );
}

/// Split, then calls from both threads, then merged: the TAT is the one the
/// same calls leave on a key never split (no cell minted or lost), and a
/// split and merge with nothing between gives back the very TAT.
#[test]
fn a_split_then_merged_gcra_key_mints_and_loses_no_cell() {
    let ([mut a, mut b], [mut ua, mut ub], key) = split_and_unsplit(1);
    let gcra = format!("GCRA {key} 99 7 1.5 TOKENS 3");
    for h in [&mut a, &mut ua] {
        h.cmd(&gcra);
        h.clock().advance_ms(333);
    }
    let before = a.run(&["RLSTATE", &key]);
    let split = ["LH.SPLIT", &key, "GCRA", "99", "7", "1.5"];
    assert_eq!(a.run(&split), Reply::Int(1));
    assert_eq!(a.run(&["LH.MERGE", &key]), Reply::Int(1));
    assert_eq!(a.run(&["RLSTATE", &key]), before);
    assert_eq!(a.run(&split), Reply::Int(1));
    let mut allowed_cells = 0;
    for i in 0..60 {
        let (h, u) = if i % 4 == 0 {
            (&mut a, &mut ua)
        } else {
            (&mut b, &mut ub)
        };
        let (rs, ru) = (h.cmd(&gcra), u.cmd(&gcra));
        assert_eq!(rs, ru, "call {i}");
        allowed_cells += 3 * u64::from(allowed(&rs));
        a.clock().advance_ms(11);
        ua.clock().advance_ms(11);
    }
    // 98.55 cells at the split (100 - 3 + 333 ms of 7 per 1.5 s) and 3.08
    // more in the 660 ms of calls: 33 calls of 3 cells.
    assert_eq!(allowed_cells, 99);
    assert!(info_field(&mut a, "hotkey_local_grants") > 0);
    assert_eq!(a.run(&["LH.MERGE", &key]), Reply::Int(1));
    assert_eq!(a.run(&["RLSTATE", &key]), ua.run(&["RLSTATE", &key]));
}

#[test]
fn a_throttle_key_that_turns_hot_is_split_and_merged_once_it_cools() {
    turns_hot_then_cools(Call {
        line: "CL.THROTTLE {key} 999999 1 1 1",
        granted: |r| u64::from(allowed(r)),
    });
}
