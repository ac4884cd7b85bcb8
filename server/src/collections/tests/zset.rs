//! [`ZSet`] against a `BTreeSet<(score, member)>` model with a member map,
//! across the change of encoding: scores, ranks, ranges by rank and by
//! score bound, removals by range.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use crate::collections::zset::{Limits, ZSet};
use crate::collections::Collection;

/// A score with a total order for the model (scores are never NaN).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Score(f64);
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, o: &Score) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Score {
    fn cmp(&self, o: &Score) -> std::cmp::Ordering {
        self.0.partial_cmp(&o.0).expect("no NaN")
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert(Vec<u8>, f64),
    Remove(Vec<u8>),
    RemoveRange(usize, usize),
}

fn member() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => (0u8..40).prop_map(|c| format!("m{c}").into_bytes()),
        3 => (-20i64..20).prop_map(|i| i.to_string().into_bytes()),
        1 => Just(b"007".to_vec()),
        1 => super::element(),
    ]
}

fn score() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => (-5i64..5).prop_map(|i| i as f64),
        2 => -1e6f64..1e6,
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(1e18),
        1 => Just(-0.0),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (member(), score()).prop_map(|(m, s)| Op::Insert(m, s)),
        2 => member().prop_map(Op::Remove),
        1 => (0usize..60, 0usize..8).prop_map(|(a, n)| Op::RemoveRange(a, a + n)),
    ]
}

proptest! {
    #[test]
    fn a_zset_is_an_ordered_set_of_scored_members(
        max_entries in 0usize..12,
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let limits = Limits { max_entries, max_value: 64 };
        let mut z = ZSet::default();
        let mut order: BTreeSet<(Score, Vec<u8>)> = BTreeSet::new();
        let mut scores: BTreeMap<Vec<u8>, f64> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Insert(m, s) => {
                    // A listpack keeps -0 as 0, as Redis's does.
                    let s = if s == 0.0 && z.encoding() == "listpack" { 0.0 } else { s };
                    let old = scores.insert(m.clone(), s);
                    if let Some(old) = old { order.remove(&(Score(old), m.clone())); }
                    order.insert((Score(s), m.clone()));
                    let got = z.insert(&m, s, &limits);
                    prop_assert_eq!(got.is_none(), old.is_none());
                }
                Op::Remove(m) => {
                    let old = scores.remove(&m);
                    if let Some(old) = old { order.remove(&(Score(old), m.clone())); }
                    prop_assert_eq!(z.remove(&m).is_some(), old.is_some());
                }
                Op::RemoveRange(a, b) => {
                    let (a, b) = (a.min(order.len()), b.min(order.len()));
                    let doomed: Vec<_> = order.iter().skip(a).take(b.saturating_sub(a)).cloned().collect();
                    let mut removed = Vec::new();
                    z.remove_range(a, b.max(a), &mut |m| removed.push(m.to_vec()));
                    prop_assert_eq!(removed, doomed.iter().map(|(_, m)| m.clone()).collect::<Vec<_>>());
                    for (s, m) in doomed { order.remove(&(s, m.clone())); scores.remove(&m); }
                }
            }
            prop_assert_eq!(z.len(), order.len());
            let mut all = Vec::new();
            z.range(0, z.len(), false, &mut |m, s| all.push((m.to_vec(), s)));
            let want: Vec<_> = order.iter().map(|(s, m)| (m.clone(), s.0)).collect();
            prop_assert_eq!(&all, &want);
            let mut rev = Vec::new();
            z.range(0, z.len(), true, &mut |m, s| rev.push((m.to_vec(), s)));
            rev.reverse();
            prop_assert_eq!(&rev, &want);
            for (i, (m, s)) in want.iter().enumerate() {
                prop_assert_eq!(z.rank(m), Some((i, *s)));
                prop_assert_eq!(z.score(m), Some(*s));
                prop_assert_eq!(&z.nth(i).0, m);
            }
            if let Some(&(ref m, s)) = want.get(want.len() / 2) {
                let lo = z.first_where(|x, _| x >= s);
                prop_assert_eq!(lo, want.iter().position(|(_, y)| *y >= s).unwrap());
                let end = z.end_where(|x, _| x <= s);
                prop_assert_eq!(end, want.iter().filter(|(_, y)| *y <= s).count());
                prop_assert!(z.score(m).is_some());
            }
            let mut rebuilt = Vec::new();
            z.rebuild(b"k", &mut |args| rebuilt.push(args.len()));
            prop_assert_eq!(rebuilt.iter().map(|n| (n - 2) / 2).sum::<usize>(), z.len());
        }
    }
}

#[test]
fn large_sets_answer_ranks_quickly() {
    let mut z = ZSet::default();
    let limits = Limits::default();
    for i in 0..100_000u32 {
        z.insert(
            format!("m{i}").as_bytes(),
            f64::from(i.wrapping_mul(7919) % 100_000),
            &limits,
        );
    }
    assert_eq!(z.encoding(), "skiplist");
    let start = std::time::Instant::now();
    for i in (0..100_000u32).step_by(7) {
        let (r, s) = z.rank(format!("m{i}").as_bytes()).unwrap();
        assert_eq!(r as f64, s, "scores are a permutation of the ranks");
    }
    let mut got = 0;
    z.range(50_000, 50_010, false, &mut |_, s| {
        assert_eq!(s, 50_000.0 + f64::from(got));
        got += 1;
    });
    assert_eq!(got, 10);
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
}
