//! The hot-key tests' shared harness (`family_hotkeys*.rs`): servers with
//! the split on and off, INFO and RLSTATE readers, a load at a steady rate,
//! the detector's split-then-merge run and the replica check.

use leasehold_protocol::Reply;
use leasehold_server::clock::Clock;
use leasehold_server::config::Config;
use leasehold_server::harness::Harness;
use proptest::prelude::{prop_assert_eq, TestCaseError};

/// Two connections (one per thread) on a fresh 2-shard server.
pub fn server(config: Config) -> (Harness, Harness) {
    let a = Harness::with_config(config, 2);
    let b = a.connection_on(1);
    (a, b)
}

/// A split server and a never-split one (two connections each, one per
/// thread), and the key `hot` of shard `key_shard`: the same calls on both
/// must get the same replies.
pub fn split_and_unsplit(key_shard: usize) -> ([Harness; 2], [Harness; 2], String) {
    let (a, b) = server(Config::default());
    let (ua, ub) = server(unsplit_config());
    let key = a.key_on(key_shard, "hot");
    ([a, b], [ua, ub], key)
}

pub fn unsplit_config() -> Config {
    let mut c = Config::default();
    c.ratelimit.hotkey_split = false;
    c
}

pub fn info_field(h: &mut Harness, field: &str) -> u64 {
    let text = match h.cmd("INFO hotkeys") {
        Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO reply {other:?}"),
    };
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in {text}"))
}

pub fn granted(r: &Reply) -> u64 {
    match r {
        Reply::Array(a) => match a.first() {
            Some(Reply::Int(g)) => *g as u64,
            _ => 0,
        },
        _ => 0,
    }
}

/// A call the detector counts, with what one reply granted.
#[derive(Clone, Copy)]
pub struct Call {
    /// The command, `{key}` standing for the key.
    pub line: &'static str,
    pub granted: fn(&Reply) -> u64,
}

pub fn load_with(
    call: Call,
    a: &mut Harness,
    b: &mut Harness,
    key: &str,
    per_window: u64,
    windows: u64,
) -> u64 {
    let line = call.line.replace("{key}", key);
    let mut got = 0;
    for _ in 0..windows {
        for i in 0..per_window {
            let h = if i % 2 == 0 { &mut *a } else { &mut *b };
            got += (call.granted)(&h.cmd(&line));
            a.clock().advance_ms(100 / per_window);
        }
    }
    got
}

pub fn detecting(split: bool) -> Config {
    let mut c = Config::default();
    c.ratelimit.hotkey_split = split;
    c.ratelimit.hotkey_min_rate = 100;
    c.ratelimit.hotkey_merge_rate = 50;
    c.ratelimit.hotkey_cooldown = 300;
    c
}

/// The detector splits `call`'s key once it takes most of its shard's calls
/// and merges it once it cools, every reply and the final state the same
/// as a never-split key's.
pub fn turns_hot_then_cools(call: Call) {
    let (mut a, mut b) = server(detecting(true));
    let (mut ua, mut ub) = server(detecting(false));
    let key = a.key_on(1, "launch");
    // Some background keys on the owner shard.
    for i in 0..20 {
        let k = a.key_on(1, &format!("bg{i}"));
        a.run(&["TOKENLEASE", &k, "10", "1", "1000", "1"]);
        ua.run(&["TOKENLEASE", &k, "10", "1", "1000", "1"]);
    }
    // 50 calls per 100 ms window (500/s), for 5 windows.
    let got = load_with(call, &mut a, &mut b, &key, 50, 5);
    let want = load_with(call, &mut ua, &mut ub, &key, 50, 5);
    assert_eq!(got, want);
    assert_eq!(info_field(&mut a, "hotkey_splits"), 1);
    assert!(info_field(&mut a, "hotkey_local_grants") > 0);
    let Reply::Array(lines) = a.cmd("LH.HOTKEYS") else {
        panic!()
    };
    let listed = format!("{lines:?}");
    assert!(
        listed.contains("launch") && listed.contains("yes"),
        "{listed}"
    );
    // It cools: 2 calls per window (20/s) under the merge rate for 300 ms.
    let got = load_with(call, &mut a, &mut b, &key, 2, 6);
    let want = load_with(call, &mut ua, &mut ub, &key, 2, 6);
    assert_eq!(got, want);
    assert_eq!(info_field(&mut a, "hotkey_merges"), 1);
    assert_eq!(info_field(&mut a, "hotkey_split_keys"), 0);
    // Nothing minted or lost: the same state as the never-split key.
    assert_eq!(a.run(&["RLSTATE", &key]), ua.run(&["RLSTATE", &key]));
    assert_eq!(info_field(&mut ua, "hotkey_splits"), 0);
}

/// The integer field `name` of an RLSTATE reply.
pub fn field(r: &Reply, name: &'static str) -> Option<i64> {
    let Reply::Array(items) = r else {
        return None;
    };
    let i = items.iter().position(|x| *x == Reply::simple(name))?;
    match items.get(i + 1) {
        Some(Reply::Int(v)) => Some(*v),
        _ => None,
    }
}

/// Runs 40 calls `call` on a key split with `LH.SPLIT key <split...>` and
/// on the same key never split, replaying the split server's effects on a
/// replica after each: every effect is an LH.RESTORE of the key itself,
/// the replica's state is never worth more than the primary's exact one
/// (`worth`, of an RLSTATE reply), and after the merge it is the primary's.
pub fn stream_sees_one_key(split: &[&str], call: &str, worth: fn(&Reply) -> i64) {
    let ([mut a, mut b], [mut ua, mut ub], key) = split_and_unsplit(1);
    let mut replica = Harness::new();
    let call = call.replace("{key}", &key);
    let mut mark = a.effects_mark();
    let mut args = vec!["LH.SPLIT", &key];
    args.extend(split);
    // A missing key is not split: the first call stores it.
    assert_eq!(a.cmd(&call), ua.cmd(&call));
    assert_eq!(a.run(&args), Reply::Int(1));
    for i in 0..40 {
        let (h, u) = if i % 3 == 0 {
            (&mut a, &mut ua)
        } else {
            (&mut b, &mut ub)
        };
        assert_eq!(h.cmd(&call), u.cmd(&call), "call {i}");
        a.clock().advance_ms(7);
        ua.clock().advance_ms(7);
        replica.clock().advance_ms(7);
        for record in a.effects_since(&mark) {
            assert_eq!(record[0], "LH.RESTORE", "{record:?}");
            assert_eq!(record[1], key, "one key, no sub-key: {record:?}");
            assert_eq!(replica.run(&record[..]), Reply::ok());
        }
        mark = a.effects_mark();
        // The replica holds at most the primary's tokens (the leased ones
        // count as spent), never more.
        let exact = worth(&ua.run(&["RLSTATE", &key]));
        let seen = worth(&replica.run(&["RLSTATE", &key]));
        assert!(seen <= exact, "call {i}: replica {seen}, primary {exact}");
    }
    // Merged, the replica holds exactly the primary's state.
    a.run(&["LH.MERGE", &key]);
    for record in a.effects_since(&mark) {
        replica.run(&record[..]);
    }
    assert_eq!(replica.run(&["RLSTATE", &key]), a.run(&["RLSTATE", &key]));
    assert_eq!(
        worth(&a.run(&["RLSTATE", &key])),
        worth(&ua.run(&["RLSTATE", &key]))
    );
}

/// What a counted call granted, read from its reply.
pub type Counted = Box<dyn Fn(&Reply) -> u64>;

/// One step of a split-against-unsplit comparison ([`compare_steps`]).
pub enum Step {
    /// A command on thread `thread`'s connection of both servers; its
    /// replies must be equal, and `counted` (when set) adds what each
    /// granted to that side's total.
    Call {
        thread: usize,
        words: Vec<String>,
        counted: Option<Counted>,
    },
    /// Both clocks move on.
    Advance(u64),
    /// The split server splits the key again (LH.SPLIT).
    Resplit,
    /// The two states are compared now (the caller's check).
    State,
}

/// A split server `s` and a never-split one `u` (connections of thread 0
/// and 1), and their key.
pub struct Compared {
    pub s: [Harness; 2],
    pub u: [Harness; 2],
    pub key: String,
}

impl Compared {
    /// The pair of `split_and_unsplit`, as one value.
    pub fn new((s, u, key): ([Harness; 2], [Harness; 2], String)) -> Compared {
        Compared { s, u, key }
    }

    /// `args` (`{key}` standing for the key) on thread `thread` of both.
    pub fn both(&mut self, thread: usize, args: &[&str]) -> (Reply, Reply) {
        let args: Vec<&str> = args
            .iter()
            .map(|a| if *a == "{key}" { self.key.as_str() } else { a })
            .collect();
        (self.s[thread].run(&args[..]), self.u[thread].run(&args[..]))
    }

    /// Both RLSTATEs of the key (thread 0) and the split side's clock.
    pub fn states(&mut self) -> (Reply, Reply, u64) {
        let (rs, ru) = self.both(0, &["RLSTATE", "{key}"]);
        (rs, ru, self.s[0].clock().now().mono_ms)
    }

    /// Merges the split key, then [`Compared::states`].
    pub fn merged(&mut self) -> (Reply, Reply, u64) {
        let key = self.key.clone();
        self.s[0].run(&["LH.MERGE", &key]);
        self.states()
    }
}

/// Runs `steps` on both servers of `c`: every call's replies equal (step
/// `i` named on failure), `resplit` run on the split server's thread 0 for
/// [`Step::Resplit`], `state` for [`Step::State`]. Returns the totals the
/// counted calls granted on the split and the unsplit side.
pub fn compare_steps(
    c: &mut Compared,
    steps: impl IntoIterator<Item = Step>,
    mut resplit: impl FnMut(&mut Harness, &str),
    mut state: impl FnMut(&mut Compared, usize) -> Result<(), TestCaseError>,
) -> Result<(u64, u64), TestCaseError> {
    let (mut total_s, mut total_u) = (0, 0);
    for (i, step) in steps.into_iter().enumerate() {
        match step {
            Step::Call {
                thread,
                words,
                counted,
            } => {
                let words: Vec<&str> = words.iter().map(String::as_str).collect();
                let rs = c.s[thread].run(&words[..]);
                let ru = c.u[thread].run(&words[..]);
                if let Some(granted) = counted {
                    total_s += granted(&rs);
                    total_u += granted(&ru);
                }
                prop_assert_eq!(rs, ru, "step {} {:?}", i, words);
            }
            Step::Advance(ms) => {
                c.s[0].clock().advance_ms(ms);
                c.u[0].clock().advance_ms(ms);
            }
            Step::Resplit => resplit(&mut c.s[0], &c.key),
            Step::State => state(c, i)?,
        }
    }
    Ok((total_s, total_u))
}
