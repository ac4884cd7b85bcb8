//! A split SLIDINGWINDOW key in process (`docs/hotkeys.md`, "Sliding
//! windows"): every reply equal to the unsplit key's on the manual clock,
//! across window boundaries, from connections on both threads; local
//! admissions and borrows; split then merge gives the very pair back; the
//! detector splits a hot window and merges it once it cools; the stream
//! sees one key, never with more room than the primary.

use leasehold_protocol::Reply;
use leasehold_server::clock::Clock;
use leasehold_server::config::Config;
use leasehold_server::harness::{Harness, T0_MS};
use proptest::prelude::*;

mod common;

use common::hotkeys::*;

const LIMIT: u64 = 20;
const WINDOW: u64 = 1000;

fn hits(key: &str, n: u64) -> Vec<String> {
    format!("SLIDINGWINDOW {key} {LIMIT} {WINDOW} COUNT {n}")
        .split(' ')
        .map(String::from)
        .collect()
}

fn run(h: &mut Harness, words: &[String]) -> Reply {
    h.run(&words.iter().map(String::as_str).collect::<Vec<_>>()[..])
}

/// Moves the clock of each server to the start of a window.
fn align(servers: [&mut Harness; 2]) {
    for h in servers {
        let now = h.clock().now().mono_ms;
        h.clock().advance_ms((WINDOW - now % WINDOW) % WINDOW);
    }
}

/// An RLSTATE reply of a window as the pair it is at monotonic `now` (both
/// windows rolled to `now`'s, as `sliding_window::Window::roll` does), with
/// its pttl: equal for two representations of one state (`None`: missing
/// or empty).
fn pair_at(r: &Reply, now: u64) -> Option<(u64, u64, u64, i64)> {
    let w = field(r, "window_ms")? as u64;
    let mut start = field(r, "window_start_ms")? as u64 - T0_MS;
    let (mut previous, mut current) = (field(r, "previous")? as u64, field(r, "current")? as u64);
    let elapsed = now.saturating_sub(start);
    if elapsed >= 2 * w {
        return None;
    }
    if elapsed >= w {
        (start, previous, current) = (start + w, current, 0);
    }
    if previous == 0 && current == 0 {
        return None;
    }
    Some((start, previous, current, field(r, "pttl")?))
}

#[derive(Debug, Clone)]
enum WOp {
    /// `n` hits of the split's policy (0 peeks; 25 is over the limit).
    Hits {
        thread: usize,
        n: u64,
    },
    /// Another limit: merges, then runs unsplit.
    OtherLimit {
        thread: usize,
    },
    /// Another window length (the estimate carries): merges.
    OtherWindow {
        thread: usize,
    },
    /// A TOKENLEASE: WRONGTYPE on both, never served from a slot.
    Mixed {
        thread: usize,
    },
    Advance(u64),
    Resplit,
    /// RLSTATE and PTTL: the split key merges first; both read the same.
    State,
}

fn wop() -> impl Strategy<Value = WOp> {
    let thread = 0..2usize;
    prop_oneof![
        12 => (thread.clone(), prop_oneof![8 => 1..4u64, 1 => Just(0u64), 1 => Just(25u64)])
            .prop_map(|(thread, n)| WOp::Hits { thread, n }),
        1 => thread.clone().prop_map(|thread| WOp::OtherLimit { thread }),
        1 => thread.clone().prop_map(|thread| WOp::OtherWindow { thread }),
        1 => thread.prop_map(|thread| WOp::Mixed { thread }),
        4 => prop_oneof![0..40u64, 0..700u64, Just(999u64), Just(1000u64), Just(2500u64)]
            .prop_map(WOp::Advance),
        1 => Just(WOp::Resplit),
        1 => Just(WOp::State),
    ]
}

/// Runs `ops` on a window key split on one server and never split on the
/// other, asserting the same replies for every call and the same pair
/// after the merge; returns the hits each admitted.
fn compare(key_shard: usize, ops: &[WOp]) -> Result<(u64, u64), TestCaseError> {
    let ([mut s0, s1], [mut u0, u1], key) = split_and_unsplit(key_shard);
    let split =
        |h: &mut Harness, key: &str| h.run(&["LH.SPLIT", key, "SLIDINGWINDOW", "20", "1000"]);
    // A missing key is not split: one hit stored on both first.
    prop_assert_eq!(run(&mut s0, &hits(&key, 1)), run(&mut u0, &hits(&key, 1)));
    prop_assert_eq!(split(&mut s0, &key), Reply::Int(1));
    let swap = |words: Vec<String>, from: &str, to: &str| {
        words
            .into_iter()
            .map(|w| if w == from { to.into() } else { w })
            .collect()
    };
    let steps = ops.iter().map(|op| {
        let call = |thread: usize, words, counted| Step::Call {
            thread,
            words,
            counted,
        };
        match *op {
            WOp::Hits { thread, n } => call(thread, hits(&key, n), Some(Box::new(granted))),
            WOp::OtherLimit { thread } => call(thread, swap(hits(&key, 1), "20", "30"), None),
            WOp::OtherWindow { thread } => call(thread, swap(hits(&key, 1), "1000", "400"), None),
            WOp::Mixed { thread } => call(
                thread,
                ["TOKENLEASE", &key, "20", "3", "1000", "1"]
                    .map(String::from)
                    .to_vec(),
                None,
            ),
            WOp::Advance(ms) => Step::Advance(ms),
            WOp::Resplit => Step::Resplit,
            WOp::State => Step::State,
        }
    });
    let mut c = Compared::new(([s0, s1], [u0, u1], key.clone()));
    let (total_s, total_u) = compare_steps(
        &mut c,
        steps.collect::<Vec<_>>(),
        |h, key| drop(split(h, key)),
        |c, i| {
            let (rs, ru, now) = c.states();
            prop_assert_eq!(pair_at(&rs, now), pair_at(&ru, now), "op {}", i);
            let (ps, pu) = c.both(1, &["PTTL", "{key}"]);
            prop_assert_eq!(ps, pu, "op {}", i);
            Ok(())
        },
    )?;
    let (rs, ru, now) = c.merged();
    prop_assert_eq!(pair_at(&rs, now), pair_at(&ru, now));
    Ok((total_s + 1, total_u + 1))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Every reply of a split SLIDINGWINDOW key equals the unsplit key's
    /// (admitted, count, remaining, retry_after_ms), errors included, across
    /// window boundaries; so never more hits admitted in total, and the
    /// merged pair is the unsplit key's.
    #[test]
    fn a_split_window_answers_as_the_unsplit_key(
        key_shard in 0..2usize,
        ops in proptest::collection::vec(wop(), 1..80),
    ) {
        let (s, u) = compare(key_shard, &ops)?;
        prop_assert_eq!(s, u);
    }
}

#[test]
fn a_split_window_admits_locally_borrows_and_never_leases_past_its_window() {
    let ([mut a, mut b], [mut ua, mut ub], key) = split_and_unsplit(0);
    let hit = |h: &mut Harness| run(h, &hits(&key, 1));
    // The clock on a window's start, then one hit stored (19 of 20 left).
    align([&mut a, &mut ua]);
    assert_eq!(hit(&mut a), hit(&mut ua));
    assert_eq!(
        a.run(&["LH.SPLIT", &key, "SLIDINGWINDOW", "20", "1000"]),
        Reply::Int(1)
    );
    // 19 fit: 9 leased to each shard. Thread 1 admits 9 alone, the tenth
    // borrows (the owner's slot serves it).
    for i in 0..9 {
        assert_eq!(hit(&mut b), hit(&mut ub), "hit {i}");
    }
    assert_eq!(info_field(&mut a, "hotkey_local_grants"), 9);
    assert_eq!(info_field(&mut a, "hotkey_borrows"), 0);
    assert_eq!(hit(&mut b), hit(&mut ub));
    assert_eq!(info_field(&mut a, "hotkey_borrows"), 1);
    // 9 left: the rest of the window takes them, then denies, as unsplit.
    let mut admitted = 0;
    for i in 0..12 {
        let (h, u) = if i % 2 == 0 {
            (&mut a, &mut ua)
        } else {
            (&mut b, &mut ub)
        };
        let r = hit(h);
        assert_eq!(r, hit(u), "hit {i}");
        admitted += granted(&r);
    }
    assert_eq!(admitted, 9);
    // Denied at 500 ms: the window holds 20, and the next one admits a hit
    // once they weigh 19 (50 ms into it).
    for h in [&mut a, &mut ua] {
        h.clock().advance_ms(500);
    }
    let r = hit(&mut b);
    assert_eq!(r, hit(&mut ub));
    assert_eq!(r, common::ints(&[0, 20, 0, 550]));
    // 300 ms into the next window (20 previous hits weigh 14, so 6 fit):
    // the slots' leases ended with the last window, so the first hit hops
    // and leases against the new room, every reply still the unsplit key's.
    for h in [&mut a, &mut ua] {
        h.clock().advance_ms(800);
    }
    let grants = info_field(&mut a, "hotkey_local_grants");
    for i in 0..30 {
        let (h, u) = if i % 2 == 0 {
            (&mut a, &mut ua)
        } else {
            (&mut b, &mut ub)
        };
        assert_eq!(hit(h), hit(u), "next window, hit {i}");
        a.clock().advance_ms(17);
        ua.clock().advance_ms(17);
    }
    assert!(info_field(&mut a, "hotkey_local_grants") > grants);
    assert_eq!(a.run(&["LH.MERGE", &key]), Reply::Int(1));
    assert_eq!(a.run(&["RLSTATE", &key]), ua.run(&["RLSTATE", &key]));
}

#[test]
fn a_split_then_merged_window_gives_back_the_very_pair() {
    let ([mut a, mut b], [mut ua, _], key) = split_and_unsplit(1);
    align([&mut a, &mut ua]);
    run(&mut a, &hits(&key, 3));
    a.clock().advance_ms(250);
    let before = a.run(&["RLSTATE", &key]);
    let split = ["LH.SPLIT", &key, "SLIDINGWINDOW", "20", "1000"];
    assert_eq!(a.run(&split), Reply::Int(1));
    assert_eq!(a.run(&split), Reply::Int(0));
    // One key, one type, while split.
    assert_eq!(b.run(&["TYPE", &key]), Reply::simple("slidingwindow"));
    assert_eq!(b.run(&["EXISTS", &key]), Reply::Int(1));
    assert_eq!(b.run(&["DBSIZE"]), Reply::Int(1));
    assert_eq!(a.run(&["LH.MERGE", &key]), Reply::Int(1));
    assert_eq!(a.run(&["RLSTATE", &key]), before);
    // RLSTATE, PTTL and DEL merge it first.
    assert_eq!(a.run(&split), Reply::Int(1));
    assert_eq!(b.run(&["RLSTATE", &key]), before);
    assert_eq!(a.run(&split), Reply::Int(1));
    assert_eq!(b.run(&["PTTL", &key]), Reply::Int(2 * 1000 - 250));
    assert_eq!(a.run(&split), Reply::Int(1));
    assert_eq!(b.run(&["DEL", &key]), Reply::Int(1));
    assert_eq!(b.run(&["EXISTS", &key]), Reply::Int(0));
    assert_eq!(info_field(&mut a, "hotkey_split_keys"), 0);
    assert_eq!(info_field(&mut a, "hotkey_merges"), 4);
    // Another window length, or a key of another type, does not split.
    run(&mut a, &hits(&key, 1));
    let other = ["LH.SPLIT", &key, "SLIDINGWINDOW", "20", "999"];
    assert_eq!(a.run(&other), Reply::Int(0));
    assert_eq!(
        a.run(&["LH.SPLIT", &key, "10", "1", "1000"]),
        common::err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
}

#[test]
fn a_window_key_that_turns_hot_is_split_and_merged_once_it_cools() {
    turns_hot_then_cools(Call {
        line: "SLIDINGWINDOW {key} 1000000 60000",
        granted,
    });
}

/// What a window's RLSTATE is worth: the fewer hits it counts, the more it
/// admits (a missing key admits the most).
fn room(r: &Reply) -> i64 {
    -(field(r, "previous").unwrap_or(0) + field(r, "current").unwrap_or(0))
}

#[test]
fn the_stream_sees_one_window_key_never_with_more_room_than_the_primary() {
    stream_sees_one_key(
        &["SLIDINGWINDOW", "100", "3600000"],
        "SLIDINGWINDOW {key} 100 3600000 COUNT 3",
        room,
    );
}

#[test]
fn hotkey_split_no_merges_a_split_window() {
    let mut c = Config::default();
    c.ratelimit.hotkey_split = true;
    let (mut a, mut b) = server(c);
    let key = a.key_on(0, "w");
    run(&mut a, &hits(&key, 2));
    assert_eq!(
        a.run(&["LH.SPLIT", &key, "SLIDINGWINDOW", "20", "1000"]),
        Reply::Int(1)
    );
    assert_eq!(granted(&run(&mut b, &hits(&key, 2))), 2);
    assert_eq!(a.cmd("CONFIG SET hotkey-split no"), Reply::ok());
    a.clock().advance_ms(100);
    a.cmd("PING");
    b.cmd("PING");
    assert_eq!(info_field(&mut a, "hotkey_split_keys"), 0);
    assert_eq!(field(&a.run(&["RLSTATE", &key]), "current"), Some(4));
}
