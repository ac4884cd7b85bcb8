//! [`List`] against a `VecDeque` of strings, under every kind of fill.

use std::collections::VecDeque;

use proptest::prelude::*;

use super::element;
use crate::collections::list::{End, List};
use crate::collections::Collection;

#[derive(Debug, Clone)]
enum Op {
    Push(bool, Vec<u8>),
    Pop(bool),
    Set(usize, Vec<u8>),
    Insert(Vec<u8>, bool, Vec<u8>),
    RemoveEqual(Vec<u8>, i64),
    TrimFront(usize),
    TrimBack(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<bool>(), element()).prop_map(|(l, e)| Op::Push(l, e)),
        2 => any::<bool>().prop_map(Op::Pop),
        2 => (any::<usize>(), element()).prop_map(|(i, e)| Op::Set(i, e)),
        2 => (element(), any::<bool>(), element()).prop_map(|(p, a, e)| Op::Insert(p, a, e)),
        2 => (element(), -3i64..4).prop_map(|(e, c)| Op::RemoveEqual(e, c)),
        1 => (0usize..6).prop_map(Op::TrimFront),
        1 => (0usize..6).prop_map(Op::TrimBack),
    ]
}

fn end(left: bool) -> End {
    if left {
        End::Left
    } else {
        End::Right
    }
}

fn check(l: &List, model: &VecDeque<Vec<u8>>, probe: usize) {
    assert_eq!(l.len(), model.len());
    let want: Vec<&[u8]> = model.iter().map(Vec::as_slice).collect();
    assert_eq!(l.iter().collect::<Vec<_>>(), want);
    let mut back: Vec<&[u8]> = l.iter().rev().collect();
    back.reverse();
    assert_eq!(back, want);
    for (i, e) in want.iter().enumerate() {
        assert_eq!(l.get(i), Some(*e), "index {i}");
    }
    assert_eq!(l.get(model.len()), None);
    if !model.is_empty() {
        let a = probe % model.len();
        let b = a + (probe / 7) % (model.len() - a);
        assert_eq!(l.range(a, b).collect::<Vec<_>>(), &want[a..=b]);
        let rev: Vec<&[u8]> = l.range(a, b).rev().collect();
        assert_eq!(rev, want[a..=b].iter().rev().copied().collect::<Vec<_>>());
        // Both ends of one range meet in the middle without overlap.
        let mut it = l.range(a, b);
        let (mut front, mut rear) = (Vec::new(), Vec::new());
        while let Some(x) = it.next() {
            front.push(x);
            if let Some(y) = it.next_back() {
                rear.push(y);
            }
        }
        rear.reverse();
        front.extend(rear);
        assert_eq!(front, &want[a..=b]);
    }
}

proptest! {
    #[test]
    fn a_list_is_a_deque(
        fill in prop_oneof![(-6i32..0), (0i32..4), Just(128)],
        ops in proptest::collection::vec((op(), any::<usize>()), 1..80),
    ) {
        let mut l = List::new(fill);
        let mut model: VecDeque<Vec<u8>> = VecDeque::new();
        for (op, probe) in ops {
            match op {
                Op::Push(left, e) => {
                    l.push(end(left), &e);
                    if left { model.push_front(e) } else { model.push_back(e) }
                }
                Op::Pop(left) => {
                    let want = if left { model.pop_front() } else { model.pop_back() };
                    prop_assert_eq!(l.pop(end(left)).map(|b| b.to_vec()), want);
                }
                Op::Set(i, e) => {
                    let ok = i % 8 < model.len();
                    prop_assert_eq!(l.set(i % 8, &e), ok);
                    if ok { model[i % 8] = e; }
                }
                Op::Insert(pivot, after, e) => {
                    let at = model.iter().position(|x| *x == pivot);
                    prop_assert_eq!(l.insert_at_pivot(&pivot, after, &e), at.is_some());
                    if let Some(i) = at { model.insert(i + usize::from(after), e); }
                }
                Op::RemoveEqual(e, count) => {
                    let mut left = if count == 0 { usize::MAX } else { count.unsigned_abs() as usize };
                    let mut kept: VecDeque<Vec<u8>> = VecDeque::new();
                    let mut removed = 0;
                    let walk: Vec<Vec<u8>> = if count < 0 { model.iter().rev().cloned().collect() } else { model.iter().cloned().collect() };
                    for x in walk {
                        if x == e && left > 0 { left -= 1; removed += 1; } else if count < 0 { kept.push_front(x) } else { kept.push_back(x) }
                    }
                    prop_assert_eq!(l.remove_equal(&e, count), removed);
                    model = kept;
                }
                Op::TrimFront(n) => {
                    l.trim(End::Left, n);
                    model.drain(..n.min(model.len()));
                }
                Op::TrimBack(n) => {
                    l.trim(End::Right, n);
                    let keep = model.len().saturating_sub(n);
                    model.truncate(keep);
                }
            }
            check(&l, &model, probe);
        }
        // Rebuilding replays the same elements in order.
        let mut replayed = List::new(fill);
        l.rebuild(b"k", &mut |args| {
            assert_eq!(&args[..2], &[&b"RPUSH"[..], b"k"]);
            assert!(args.len() - 2 <= crate::collections::REBUILD_CHUNK);
            for e in &args[2..] { replayed.push(End::Right, e); }
        });
        prop_assert_eq!(replayed, l);
    }
}

#[test]
fn nodes_follow_the_fill() {
    // Positive fill: at most that many elements a node.
    let mut l = List::new(3);
    for i in 0..10 {
        l.push(End::Right, format!("{i}").as_bytes());
    }
    assert_eq!(l.nodes.len(), 4);
    assert!(l.nodes.iter().all(|n| n.len() <= 3));
    // -2: 8 KiB nodes; 100-byte elements (102 with framing) fill 80 a node.
    let mut l = List::new(-2);
    for _ in 0..240 {
        l.push(End::Left, &[b'v'; 100]);
    }
    assert_eq!(
        l.nodes.iter().map(|n| n.len()).collect::<Vec<_>>(),
        vec![80, 80, 80]
    );
    // An insertion into a full node splits it.
    assert!(l.insert_at_pivot(&[b'v'; 100], true, b"small"));
    assert_eq!(l.nodes.len(), 3, "5 more bytes still fit the first node");
    assert!(l.insert_at_pivot(&[b'v'; 100], true, &[b'm'; 100]));
    assert_eq!(
        l.nodes.iter().map(|n| n.len()).collect::<Vec<_>>(),
        vec![41, 41, 80, 80]
    );
    assert_eq!(l.get(1), Some(&[b'm'; 100][..]));
    assert_eq!(l.get(2), Some(&b"small"[..]));
    // A small list is one allocation for its elements and one for its node.
    let mut small = List::default();
    small.push(End::Right, b"a");
    assert_eq!(small.nodes.capacity(), 1);
    assert_eq!(small.encoding(), "quicklist");
}
