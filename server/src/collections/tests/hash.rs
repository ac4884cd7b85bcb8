//! [`Hash`] against an insertion-ordered `Vec` of pairs, across the change
//! of encoding; the table's scan cursor under changes between steps.

use proptest::prelude::*;

use super::element;
use crate::collections::hash::{Hash, Limits, Table};
use crate::collections::Collection;

#[derive(Debug, Clone)]
enum Op {
    Insert(Vec<u8>, Vec<u8>),
    Remove(Vec<u8>),
}

fn field() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => (0u8..24).prop_map(|c| format!("f{c}").into_bytes()),
        1 => element(),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (field(), element()).prop_map(|(f, v)| Op::Insert(f, v)),
        1 => field().prop_map(Op::Remove),
    ]
}

proptest! {
    #[test]
    fn a_hash_is_a_map_in_insertion_order_while_packed(
        max_entries in 0usize..12,
        max_value in 0usize..200,
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let limits = Limits { max_entries, max_value };
        let mut h = Hash::default();
        let mut model: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut converted = false;
        for op in ops {
            match op {
                Op::Insert(f, v) => {
                    let at = model.iter().position(|(k, _)| *k == f);
                    converted |= f.len() > max_value || v.len() > max_value;
                    prop_assert_eq!(h.insert(&f, &v, &limits), at.is_none());
                    match at {
                        Some(i) => model[i].1 = v,
                        None => model.push((f, v)),
                    }
                    converted |= model.len() > max_entries;
                }
                Op::Remove(f) => {
                    let at = model.iter().position(|(k, _)| *k == f);
                    prop_assert_eq!(h.remove(&f), at.is_some());
                    if let Some(i) = at { model.remove(i); }
                }
            }
            prop_assert_eq!(h.len(), model.len());
            prop_assert_eq!(h.encoding(), if converted { "hashtable" } else { "listpack" });
            for (f, v) in &model {
                prop_assert_eq!(h.get(f), Some(&v[..]));
            }
            prop_assert_eq!(h.get(b"absent"), None);
            let mut got: Vec<(&[u8], &[u8])> = h.iter().collect();
            let mut want: Vec<(&[u8], &[u8])> = model.iter().map(|(f, v)| (&f[..], &v[..])).collect();
            if converted {
                got.sort();
                want.sort();
            }
            prop_assert_eq!(&got, &want);
            let positions = h.by_position();
            let by_index: Vec<_> = (0..h.len()).map(|i| positions.get(i)).collect();
            prop_assert_eq!(by_index, h.iter().collect::<Vec<_>>());
        }
        // A whole scan meets every field; a rebuild recreates the hash.
        let mut seen = Vec::new();
        let mut cursor = 0;
        loop {
            cursor = h.scan(cursor, 3, &mut |f, _| seen.push(f.to_vec()));
            if cursor == 0 { break; }
        }
        for (f, _) in &model {
            prop_assert!(seen.contains(f), "scan missed {:?}", f);
        }
        let mut replayed = Hash::default();
        h.rebuild(b"k", &mut |args| {
            assert_eq!(&args[..2], &[&b"HSET"[..], b"k"]);
            for pair in args[2..].chunks(2) { replayed.insert(pair[0], pair[1], &limits); }
        });
        prop_assert_eq!(replayed, h);
    }

    #[test]
    fn a_scan_meets_every_field_present_throughout_while_the_table_resizes(
        stable in 1usize..200,
        churn in proptest::collection::vec((any::<bool>(), 0u16..2000), 0..400),
        count in 1usize..20,
    ) {
        let mut t = Table::with_capacity(0);
        for i in 0..stable {
            t.insert(format!("s{i}").as_bytes(), b"v");
        }
        let mut seen = std::collections::HashSet::new();
        let mut cursor = 0u64;
        let mut churn = churn.into_iter();
        loop {
            let mut step = 0;
            loop {
                cursor = t.scan_bucket(cursor, &mut |f, _| { seen.insert(f.to_vec()); step += 1; });
                if cursor == 0 || step >= count { break; }
            }
            if cursor == 0 { break; }
            // Between steps other fields come and go, growing and shrinking
            // the table.
            for (add, n) in churn.by_ref().take(5) {
                let f = format!("c{n}");
                if add { t.insert(f.as_bytes(), b"w"); } else { t.remove(f.as_bytes()); }
            }
        }
        for i in 0..stable {
            prop_assert!(seen.contains(format!("s{i}").as_bytes()), "missed s{}", i);
        }
    }
}

#[test]
fn the_table_stays_dense_and_findable_through_removals() {
    let mut t = Table::with_capacity(0);
    for i in 0..1000 {
        assert!(t.insert(format!("f{i}").as_bytes(), format!("v{i}").as_bytes()));
    }
    assert!(!t.insert(b"f7", b"seven"), "an update");
    for i in (0..1000).step_by(3) {
        assert!(t.remove(format!("f{i}").as_bytes()));
    }
    assert!(!t.remove(b"f0"));
    assert_eq!(t.len(), 666);
    for i in 0..1000 {
        let want = if i % 3 == 0 {
            None
        } else if i == 7 {
            Some(b"seven".to_vec())
        } else {
            Some(format!("v{i}").into_bytes())
        };
        assert_eq!(t.get(format!("f{i}").as_bytes()).map(<[u8]>::to_vec), want);
    }
    for i in 0..1000 {
        t.remove(format!("f{i}").as_bytes());
    }
    assert_eq!(t.len(), 0);
    assert_eq!(t.iter().count(), 0);
}

#[test]
fn a_small_hash_is_one_buffer() {
    let mut h = Hash::default();
    for i in 0..10 {
        h.insert(
            format!("field:{i}").as_bytes(),
            b"value",
            &Limits::default(),
        );
    }
    assert_eq!(std::mem::size_of::<Hash>(), 32);
    assert_eq!(h.encoding(), "listpack");
    // 10 x (7 + 2 + 5 + 2) bytes, sized exactly.
    assert_eq!(h.heap_bytes(), 160);
    h.insert(b"long", &[b'x'; 65], &Limits::default());
    assert_eq!(h.encoding(), "hashtable");
    assert_eq!(h.get(b"field:3"), Some(&b"value"[..]));
}
