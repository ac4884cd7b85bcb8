//! [`Pack`] against a `Vec` of strings.

use proptest::prelude::*;

use super::element;
use crate::collections::pack::Pack;

#[derive(Debug, Clone)]
enum Op {
    Insert(usize, Vec<u8>),
    Remove(usize),
    Replace(usize, Vec<u8>),
    PopFront,
    PopBack,
    Split(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<usize>(), element()).prop_map(|(i, e)| Op::Insert(i, e)),
        2 => any::<usize>().prop_map(Op::Remove),
        2 => (any::<usize>(), element()).prop_map(|(i, e)| Op::Replace(i, e)),
        1 => Just(Op::PopFront),
        1 => Just(Op::PopBack),
        1 => any::<usize>().prop_map(Op::Split),
    ]
}

fn check(p: &Pack, model: &[Vec<u8>]) {
    assert_eq!(p.len(), model.len());
    let forward: Vec<&[u8]> = p.iter().collect();
    assert_eq!(forward, model.iter().map(Vec::as_slice).collect::<Vec<_>>());
    let back: Vec<&[u8]> = p.iter().rev().collect();
    assert_eq!(
        back,
        model.iter().rev().map(Vec::as_slice).collect::<Vec<_>>()
    );
    for (i, e) in model.iter().enumerate() {
        assert_eq!(p.entry(p.offset_of(i)).0, &e[..], "entry {i}");
    }
    assert_eq!(p.offset_of(model.len()), p.bytes());
}

proptest! {
    #[test]
    fn a_pack_is_a_sequence_of_strings(ops in proptest::collection::vec(op(), 1..60)) {
        let mut p = Pack::new();
        let mut model: Vec<Vec<u8>> = Vec::new();
        for op in ops {
            match op {
                Op::Insert(i, e) => {
                    let i = i % (model.len() + 1);
                    p.insert(p.offset_of(i), &e);
                    model.insert(i, e);
                }
                Op::Remove(i) if !model.is_empty() => {
                    let i = i % model.len();
                    p.remove(p.offset_of(i));
                    model.remove(i);
                }
                Op::Replace(i, e) if !model.is_empty() => {
                    let i = i % model.len();
                    p.replace(p.offset_of(i), &e);
                    model[i] = e;
                }
                Op::PopFront => {
                    let want = (!model.is_empty()).then(|| model.remove(0));
                    prop_assert_eq!(p.pop_front().map(|b| b.to_vec()), want);
                }
                Op::PopBack => prop_assert_eq!(p.pop_back().map(|b| b.to_vec()), model.pop()),
                Op::Split(i) => {
                    let i = i % (model.len() + 1);
                    let tail = p.split_off(p.offset_of(i), i);
                    check(&tail, &model[i..]);
                    model.truncate(i);
                }
                _ => {}
            }
            check(&p, &model);
        }
    }
}

#[test]
fn short_strings_cost_two_bytes_of_framing() {
    let mut p = Pack::new();
    p.push_back(b"field:1");
    p.push_back(&[b'v'; 127]);
    assert_eq!(p.bytes(), 9 + 129);
    p.push_front(&[b'w'; 128]);
    assert_eq!(p.bytes(), 9 + 129 + 132, "128 bytes take a 2-byte length");
    assert_eq!(p.entry(0).0, &[b'w'; 128][..]);
    assert_eq!(p.entry_before(p.bytes()).0, &[b'v'; 127][..]);
}
