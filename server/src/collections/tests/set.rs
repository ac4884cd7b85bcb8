//! [`Set`] against a `BTreeSet`, across the changes of encoding (each
//! at the threshold a model of them calls for); scans, random positions
//! and rebuilds.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::element;
use crate::collections::set::{as_int, Limits, Set};

use crate::collections::Collection;

#[derive(Debug, Clone)]
enum Op {
    Insert(Vec<u8>),
    Remove(Vec<u8>),
    Retain(u8),
}

/// Members: integers (canonical and not), short names, and the shared
/// strings of [`element`].
fn member() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => (-20i64..20).prop_map(|i| i.to_string().into_bytes()),
        1 => prop_oneof![
            Just(b"9223372036854775807".to_vec()),
            Just(b"-9223372036854775808".to_vec()),
            Just(b"9223372036854775808".to_vec()),
            Just(b"007".to_vec()),
            Just(b"-0".to_vec()),
            Just(b"+1".to_vec()),
        ],
        3 => (0u8..16).prop_map(|c| format!("m{c}").into_bytes()),
        1 => element(),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => member().prop_map(Op::Insert),
        2 => member().prop_map(Op::Remove),
        1 => any::<u8>().prop_map(Op::Retain),
    ]
}

/// Which of the three representations `set` is in.
fn kind(set: &Set) -> &'static str {
    match set {
        Set::Ints(_) => "ints",
        Set::Pack(_) => "pack",
        Set::Table(_) => "table",
    }
}

proptest! {
    #[test]
    fn a_set_is_a_set_of_strings_in_every_encoding(
        max_intset_entries in 0usize..12,
        max_pack_entries in 0usize..12,
        max_pack_value in 0usize..200,
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let limits = Limits { max_intset_entries, max_pack_entries, max_pack_value };
        let mut s = Set::default();
        let mut model: BTreeSet<Vec<u8>> = BTreeSet::new();
        // The representation the thresholds call for, never going back.
        let mut rank = 0;
        for op in ops {
            match op {
                Op::Insert(m) => {
                    let new = model.insert(m.clone());
                    prop_assert_eq!(s.insert(&m, &limits), new);
                    if new {
                        let ints = model.iter().all(|m| as_int(m).is_some());
                        let want = if rank == 0 && ints && model.len() <= max_intset_entries {
                            0
                        } else if rank <= 1
                            && model.len() <= max_pack_entries
                            && model.iter().all(|m| m.len() <= max_pack_value)
                        {
                            1
                        } else {
                            2
                        };
                        rank = rank.max(want);
                    }
                }
                Op::Remove(m) => {
                    prop_assert_eq!(s.remove(&m), model.remove(&m));
                }
                Op::Retain(bit) => {
                    let keep = |m: &[u8]| m.iter().map(|&b| b as u32).sum::<u32>() % 2 == u32::from(bit % 2);
                    s.retain(&mut |m| keep(m));
                    model.retain(|m| keep(m));
                }
            }
            prop_assert_eq!(s.len(), model.len());
            prop_assert_eq!(kind(&s), ["ints", "pack", "table"][rank]);
            prop_assert_eq!(s.encoding(), if rank == 0 { "intset" } else { "hashtable" });
            for m in &model {
                prop_assert!(s.contains(m), "{:?}", m);
            }
            prop_assert!(!s.contains(b"absent"));
            let got = s.members();
            // An intset lists its integers ascending.
            if rank == 0 {
                let mut ints: Vec<i64> = model.iter().map(|m| as_int(m).unwrap()).collect();
                ints.sort_unstable();
                let want: Vec<Vec<u8>> = ints.iter().map(|i| i.to_string().into_bytes()).collect();
                prop_assert_eq!(got.iter().map(|b| b.to_vec()).collect::<Vec<_>>(), want);
            }
            let all: BTreeSet<Vec<u8>> = got.iter().map(|b| b.to_vec()).collect();
            prop_assert_eq!(&all, &model);
            let positions = s.by_position();
            let mut buf = itoa::Buffer::new();
            let by_index: Vec<Vec<u8>> = (0..s.len()).map(|i| positions.get(i, &mut buf).to_vec()).collect();
            prop_assert_eq!(by_index, got.iter().map(|b| b.to_vec()).collect::<Vec<_>>());
        }
        // A whole scan meets every member; a rebuild recreates the set.
        let mut seen = BTreeSet::new();
        let mut cursor = 0;
        loop {
            cursor = s.scan(cursor, 3, &mut |m| { seen.insert(m.to_vec()); });
            if cursor == 0 { break; }
        }
        prop_assert_eq!(&seen, &model);
        let mut replayed = Set::default();
        s.rebuild(b"k", &mut |args| {
            assert_eq!(&args[..2], &[&b"SADD"[..], b"k"]);
            for m in &args[2..] { replayed.insert(m, &limits); }
        });
        prop_assert_eq!(replayed, s);
    }
}

#[test]
fn a_pack_keeps_insertion_order_and_an_intset_sorts() {
    let limits = Limits::default();
    let mut s = Set::default();
    for m in ["30", "-2", "7"] {
        s.insert(m.as_bytes(), &limits);
    }
    assert_eq!(s.members(), ["-2", "7", "30"]);
    s.insert(b"x", &limits);
    s.insert(b"1", &limits);
    assert_eq!(s.members(), ["-2", "7", "30", "x", "1"]);
    assert_eq!(s.encoding(), "hashtable");
    assert!(matches!(s, Set::Pack(_)));
}

#[test]
fn a_small_set_is_one_buffer() {
    let limits = Limits::default();
    let mut s = Set::default();
    for i in 0..10 {
        s.insert(format!("member:{i}").as_bytes(), &limits);
    }
    assert!(std::mem::size_of::<Set>() <= 32);
    // 10 x (8 + 2) bytes, in one buffer.
    assert!(
        s.heap_bytes() >= 100 && s.heap_bytes() < 160,
        "{}",
        s.heap_bytes()
    );
    let mut ints = Set::default();
    for i in 0..10 {
        ints.insert(i.to_string().as_bytes(), &limits);
    }
    assert_eq!(ints.encoding(), "intset");
    assert_eq!(
        ints.heap_bytes(),
        21,
        "2 bytes each and the width, sized exactly"
    );
}

#[test]
fn an_intset_widens_for_wider_integers() {
    let limits = Limits::default();
    let mut s = Set::default();
    for m in ["3", "-32768", "32767"] {
        assert!(s.insert(m.as_bytes(), &limits));
    }
    assert_eq!(s.heap_bytes(), 7);
    assert!(s.insert(b"70000", &limits));
    assert_eq!(s.heap_bytes(), 17, "4 bytes each");
    assert!(!s.contains(b"9223372036854775807"));
    assert!(!s.remove(b"-9223372036854775808"));
    assert!(s.insert(b"-9223372036854775808", &limits));
    assert_eq!(s.heap_bytes(), 41, "8 bytes each");
    assert!(s.remove(b"70000"));
    assert_eq!(
        s.members(),
        ["-9223372036854775808", "-32768", "3", "32767"]
    );
    assert!(s.contains(b"-32768") && !s.contains(b"70000"));
}
