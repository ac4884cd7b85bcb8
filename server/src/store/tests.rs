//! The store's unit tests: lookups and writes, lazy and active expiry, table
//! memory given back as keys go, compact entries and their moves, and two
//! random-operation models checked against the tables and counters.

use std::hash::BuildHasher;

use super::compact::COMPACT_MAX;
use super::*;
use crate::clock::unix_of;

impl StoreCounts {
    /// A value to compare with, in field order.
    fn of(keys: u64, expires: u64, expired: u64) -> StoreCounts {
        StoreCounts {
            keys,
            expires,
            expired,
        }
    }
}

fn store() -> Store {
    Store::new(0, 16384, 1 << 16)
}

#[test]
fn set_get_and_lazy_expiry() {
    let mut s = store();
    s.set(b"k", Value::from_bytes(b"v"), Some(1000), 0);
    assert_eq!(s.counts(), StoreCounts::of(1, 1, 0));
    assert!(s.get(b"k", 999).is_some());
    assert!(s.get(b"k", 1000).is_none());
    assert_eq!(s.counts(), StoreCounts::of(0, 0, 1));
}

#[test]
fn keys_inline_and_boxed_read_back() {
    let mut s = store();
    let short = vec![b'a'; INLINE_KEY];
    let long = vec![b'b'; INLINE_KEY + 1];
    for k in [&b""[..], &short, &long] {
        s.set(k, Value::Int(k.len() as i64), None, 0);
    }
    for k in [&b""[..], &short, &long] {
        let e = s.get(k, 0).unwrap();
        assert_eq!(e.key(), k);
        assert_eq!(e.value, Value::Int(k.len() as i64));
    }
}

#[test]
fn a_huge_slot_is_swept_over_several_calls() {
    let mut s = store();
    for i in 0..10_000u32 {
        let ttl = if i % 2 == 0 { 10 } else { 1000 };
        s.set(format!("{{t}}k{i}").as_bytes(), Value::Int(1), Some(ttl), 0);
    }
    // Stop at the first check (after 1024 entries) of every call.
    let (examined, reclaimed) = s.sweep(11, 16384, || true);
    assert_eq!(examined, 1023);
    assert!(reclaimed > 0 && reclaimed < 1023, "{reclaimed}");
    let mut calls = 1;
    while s.counts().keys > 5000 {
        s.sweep(11, 16384, || true);
        calls += 1;
        assert!(calls < 100, "the sweep does not move on");
    }
    assert!(calls >= 9, "{calls} calls");
    assert_eq!(s.counts().keys, 5000);
    assert_eq!(s.counts().expired, 5000);
    for i in (1..10_000u32).step_by(2) {
        assert!(s.get(format!("{{t}}k{i}").as_bytes(), 11).is_some(), "k{i}");
    }
}

#[test]
fn overwriting_an_expired_key_counts_it_as_expired() {
    let mut s = store();
    s.set(b"zz", Value::Int(1), Some(10), 0);
    s.set(b"zz", Value::Int(2), None, 9);
    assert_eq!(s.counts().expired, 0, "still live at 9");
    s.set(b"zz", Value::Int(3), Some(20), 10);
    s.set(b"zz", Value::Int(4), None, 30);
    assert_eq!(s.counts(), StoreCounts::of(1, 0, 1));
}

fn window(start: u64, current: u64) -> RateState {
    RateState::SlidingWindow(crate::ratelimit::sliding_window::Window {
        window_ms: 1000,
        start,
        previous: 1,
        current,
    })
}

/// Sliding-window keys live in 32-byte compact entries; generic readers
/// see them as ordinary entries, and the next rate-limit write packs them
/// again.
#[test]
fn compact_entries_round_trip_through_generic_access() {
    let mut s = store();
    let now = Now {
        unix_ms: 1_000_000,
        mono_ms: 5_000,
    };
    s.set_clock(now);
    let state = window(5_000, 2);
    let at = unix_of(now, 7_000);
    s.set_rate(b"sw:1", state, at);
    assert_eq!(s.tables.iter().map(|t| t.compact.len()).sum::<usize>(), 1);
    assert_eq!(s.table_bytes(), 32 + 2, "one compact entry and its tag");
    assert_eq!(s.get_rate(b"sw:1", now.unix_ms), Some(Some(state)));
    assert_eq!(s.counts(), StoreCounts::of(1, 1, 0));
    let mut seen = Vec::new();
    let slot = crate::slot::key_slot(b"sw:1") as usize;
    s.for_each_in_slot(slot, now.unix_ms, |e| {
        seen.push((e.key().to_vec(), e.expire_at(s.clock)))
    });
    assert_eq!(seen, [(b"sw:1".to_vec(), Some(at))]);
    // TTL-style access moves it to the general vector, same deadline.
    assert_eq!(
        s.get(b"sw:1", now.unix_ms).unwrap().expire_at(now),
        Some(at)
    );
    assert_eq!(s.tables.iter().map(|t| t.compact.len()).sum::<usize>(), 0);
    assert_eq!(s.get_rate(b"sw:1", now.unix_ms), Some(Some(state)));
    s.set_rate(b"sw:1", window(5_000, 3), at);
    assert_eq!(s.tables.iter().map(|t| t.compact.len()).sum::<usize>(), 1);
    assert_eq!(s.counts(), StoreCounts::of(1, 1, 0));
    // A deadline the state does not imply keeps it general.
    s.set_rate(b"sw:1", window(5_000, 3), at + 1);
    assert_eq!(s.tables.iter().map(|t| t.compact.len()).sum::<usize>(), 0);
    assert_eq!(
        s.get(b"sw:1", now.unix_ms).unwrap().expire_at(now),
        Some(at + 1)
    );
    assert_eq!(s.counts(), StoreCounts::of(1, 1, 0));
}

#[test]
fn type_and_exists_leave_compact_entries_packed() {
    let mut s = store();
    let now = Now::default();
    s.set_rate(b"sw", window(0, 1), unix_of(now, 2000));
    let compact = |s: &Store| s.tables.iter().map(|t| t.compact.len()).sum::<usize>();
    assert_eq!(s.type_of(b"sw", 1999), Some("slidingwindow"));
    assert_eq!(s.type_of(b"nope", 1999), None);
    assert_eq!(compact(&s), 1);
    assert_eq!(s.type_of(b"sw", 2000), None, "gone at its deadline");
    assert_eq!(compact(&s), 0);
    assert_eq!(s.counts(), StoreCounts::of(0, 0, 1));
}

#[test]
fn compact_entries_expire_lazily_and_by_the_sweep() {
    let mut s = store();
    let now = Now {
        unix_ms: 50_000,
        mono_ms: 0,
    };
    s.set_clock(now);
    for i in 0..1000u32 {
        // Windows starting at 0 and 1000 ms: empty at 1000 (current 0)
        // and 3000 (current 5).
        let st = if i % 2 == 0 {
            window(0, 0)
        } else {
            window(1000, 5)
        };
        let deadline = st.empties_at().unwrap();
        s.set_rate(format!("w{i}").as_bytes(), st, unix_of(now, deadline));
    }
    assert_eq!(s.table_bytes() / 1000, 32 + 2, "{}", s.table_bytes());
    assert_eq!(s.get_rate(b"w0", 50_999), Some(Some(window(0, 0))));
    assert_eq!(s.get_rate(b"w0", 51_000), None, "gone at its deadline");
    let (_, reclaimed) = s.sweep(51_000, 16384, || false);
    assert_eq!(reclaimed, 499);
    assert_eq!(s.counts(), StoreCounts::of(500, 500, 500));
    s.sweep(53_000, 16384, || false);
    assert_eq!(s.counts(), StoreCounts::of(0, 0, 1000));
    assert_eq!(s.table_bytes(), 0);
}

/// A rate-limit write (LH.RESTORE needs no read first) meeting a key past
/// its deadline, compact or general, counts it as expired, as `set` does.
#[test]
fn a_rate_limit_write_over_an_expired_key_counts_it_as_expired() {
    let mut s = store();
    let now = Now {
        unix_ms: 1_000_000,
        mono_ms: 0,
    };
    s.set_clock(now);
    s.set_rate(b"c", window(0, 1), unix_of(now, 2000));
    s.set(b"g", Value::Int(1), Some(now.unix_ms + 10), now.unix_ms);
    let later = Now {
        unix_ms: now.unix_ms + 3000,
        mono_ms: 3000,
    };
    s.set_clock(later);
    for k in [&b"c"[..], b"g"] {
        s.set_rate(k, window(3000, 1), unix_of(later, 5000));
    }
    assert_eq!(s.counts(), StoreCounts::of(2, 2, 2));
}

#[test]
fn a_slot_past_the_compact_limit_overflows_to_general_entries() {
    let mut s = store();
    let now = Now::default();
    for i in 0..(COMPACT_MAX as u32 + 50) {
        s.set_rate(
            format!("{{t}}{i}").as_bytes(),
            window(0, 1),
            unix_of(now, 2000),
        );
    }
    let slot = s.position(b"{t}").0;
    assert_eq!(s.tables[slot].compact.len(), COMPACT_MAX);
    assert_eq!(s.tables[slot].len(), 50);
    for i in 0..(COMPACT_MAX as u32 + 50) {
        assert_eq!(
            s.get_rate(format!("{{t}}{i}").as_bytes(), 0),
            Some(Some(window(0, 1)))
        );
    }
    assert_eq!(s.counts().keys, COMPACT_MAX as u64 + 50);
    assert!(s.remove(b"{t}0", 0));
    assert_eq!(s.counts().keys, COMPACT_MAX as u64 + 49);
}

#[test]
fn sweep_reclaims_without_reads_and_counts() {
    let mut s = store();
    for i in 0..1000u32 {
        let key = format!("k{i}");
        s.set(
            key.as_bytes(),
            Value::Int(1),
            Some(if i % 2 == 0 { 10 } else { 0 }).filter(|&t| t != 0),
            0,
        );
    }
    assert_eq!(s.counts().expires, 500);
    let (_, reclaimed) = s.sweep(11, 16384, || false);
    assert_eq!(reclaimed, 500);
    assert_eq!(s.counts(), StoreCounts::of(500, 0, 500));
}

#[test]
fn sweep_goes_straight_to_the_few_tables_with_ttl_keys() {
    let mut s = store();
    // Three TTL keys in slots far apart, among keys without a TTL.
    let keys = ["a", "foo", "zzzzzz"];
    for (i, k) in keys.iter().enumerate() {
        s.set(k.as_bytes(), Value::Int(1), Some(500), 0);
        s.set(format!("plain{i}").as_bytes(), Value::Int(1), None, 0);
    }
    assert_eq!(s.ttl_tables.count(), 3);
    // A cycle's share of 16384 slots (164) visits all three at once.
    assert_eq!(s.sweep(499, 164, || false), (3, 0));
    assert_eq!(s.sweep(500, 164, || false), (3, 3));
    assert_eq!(s.counts(), StoreCounts::of(3, 0, 3));
    assert_eq!(s.ttl_tables.count(), 0);
    assert_eq!(s.sweep(501, 164, || false), (0, 0));
    // One table per call resumes at the next one, wrapping around.
    for k in keys {
        s.set(k.as_bytes(), Value::Int(1), Some(600), 0);
    }
    let reclaimed: u64 = (0..3).map(|_| s.sweep(600, 1, || false).1).sum();
    assert_eq!(reclaimed, 3);
}

#[test]
fn ttl_bits_find_the_next_table_around_the_end() {
    let mut t = super::expiry::TtlTables::new(200);
    assert_eq!(t.next_from(0, 200), None);
    t.set(3, true);
    t.set(130, true);
    assert_eq!(t.next_from(0, 200), Some(3));
    assert_eq!(t.next_from(4, 200), Some(130));
    assert_eq!(t.next_from(131, 200), Some(3), "wraps");
    assert_eq!(t.next_from(130, 200), Some(130));
    t.set(3, false);
    t.set(3, false);
    assert_eq!((t.count(), t.next_from(131, 200)), (1, Some(130)));
}

#[test]
fn expiry_gives_small_tables_back_too() {
    let mut s = store();
    for i in 0..100_000u32 {
        s.set(
            format!("k:{i}").as_bytes(),
            Value::Int(1),
            Some(10 + u64::from(i % 7)),
            0,
        );
    }
    for now in [12, 14, 16, 18] {
        s.sweep(now, 16384, || false);
    }
    assert_eq!(s.counts().keys, 0);
    assert_eq!(s.table_bytes(), 0);
}

#[test]
fn lazy_expiry_gives_memory_back_at_the_next_sweep() {
    let mut s = store();
    for i in 0..10_000u32 {
        s.set(format!("{{t}}k{i}").as_bytes(), Value::Int(1), Some(10), 0);
    }
    for i in 0..10_000u32 {
        assert!(s.get(format!("{{t}}k{i}").as_bytes(), 10).is_none());
    }
    s.sweep(10, 1, || false);
    assert_eq!(s.table_bytes(), 0);
}

#[test]
fn expiry_gives_table_memory_back() {
    let mut s = store();
    // One hash tag: every key in one slot table, which grows large.
    for i in 0..10_000u32 {
        s.set(format!("{{t}}k{i}").as_bytes(), Value::Int(1), Some(10), 0);
    }
    let full = s.table_bytes();
    assert!(full > 10_000 * std::mem::size_of::<Entry>(), "{full}");
    for step in 0..100 {
        // Expire in steps, as a sweep meets keys over time.
        let now = if step < 99 { 5 } else { 11 };
        s.sweep(now, 16384, || false);
    }
    assert_eq!(s.counts().keys, 0);
    assert_eq!(s.table_bytes(), 0);
}

#[test]
fn deleting_gives_table_memory_back() {
    let mut s = store();
    for i in 0..10_000u32 {
        s.set(format!("{{t}}k{i}").as_bytes(), Value::Int(1), None, 0);
    }
    for i in 0..10_000u32 {
        s.remove(format!("{{t}}k{i}").as_bytes(), 0);
    }
    assert!(
        s.table_bytes() < 64 * std::mem::size_of::<Entry>(),
        "{}",
        s.table_bytes()
    );
}

/// Checks every table's invariants (see `SlotTable::check_invariants`),
/// the per-slot and whole-store TTL counters, and every live key of
/// `model` against the store.
fn check_against(s: &Store, model: &std::collections::HashMap<Vec<u8>, (u64, i64)>, now: u64) {
    let (mut keys, mut expires) = (0u64, 0u64);
    for (i, t) in s.tables.iter().enumerate() {
        t.check_invariants(&s.hasher);
        let with_ttl = t.iter().filter(|e| e.expire_at != 0).count() as u32;
        assert_eq!(s.slot_expires[i], with_ttl, "slot_expires of table {i}");
        let marked = s.ttl_tables.next_from(i, s.tables.len()) == Some(i);
        assert_eq!(marked, with_ttl > 0, "TTL bit of table {i}");
        keys += t.len() as u64;
        expires += u64::from(with_ttl);
    }
    assert_eq!((s.counts.keys, s.counts.expires), (keys, expires));
    for (k, &(at, v)) in model {
        if at != 0 && at <= now {
            continue;
        }
        let (i, h) = s.position(k);
        let j = s.tables[i].find(h, k).expect("a live key is found");
        assert_eq!(s.tables[i].at(j).value, Value::Int(v));
    }
}

/// Random SET / DEL / GET (lazy expiry) / EXPIRE / PERSIST / sweeps on
/// keys sharing one hash tag, with the key population moving across the
/// index thresholds (64 and 128) both ways, compared with a map.
#[test]
fn random_operations_keep_tables_and_counters_consistent() {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut s = store();
    let mut model = std::collections::HashMap::<Vec<u8>, (u64, i64)>::new();
    let live = |m: &std::collections::HashMap<Vec<u8>, (u64, i64)>, k: &[u8], now: u64| {
        m.get(k).is_some_and(|&(at, _)| at == 0 || at > now)
    };
    let mut now = 100u64;
    for step in 0..60_000i64 {
        let population = [40, 140, 300, 90][(step / 5_000 % 4) as usize];
        let key = if next() % 5 == 0 {
            format!("k{}", next() % 50)
        } else {
            format!("{{u}}:{}", next() % population)
        }
        .into_bytes();
        let ttl = |r: u64| (r % 2 == 0).then_some(now + r % 20 + 1);
        match next() % 10 {
            0..=3 => {
                let at = ttl(next());
                s.set(&key, Value::Int(step), at, now);
                model.insert(key, (at.unwrap_or(0), step));
            }
            4 | 5 => {
                assert_eq!(s.remove(&key, now), live(&model, &key, now));
                model.remove(&key);
            }
            6 => {
                assert_eq!(s.get(&key, now).is_some(), live(&model, &key, now));
            }
            7 => {
                if s.get(&key, now).is_some() {
                    let at = ttl(next());
                    assert!(s.set_expire(&key, at));
                    model.get_mut(&key).expect("live").0 = at.unwrap_or(0);
                }
            }
            8 => now += next() % 3,
            _ => {
                s.sweep(now, (next() % 20_000) as usize, || false);
            }
        }
        if step % 499 == 0 {
            check_against(&s, &model, now);
        }
    }
    check_against(&s, &model, now);
}

mod compact_model {
    use super::*;
    use std::collections::HashMap;

    /// Checks counters against the tables, both kinds of entry counted.
    fn check(s: &Store) {
        let (mut keys, mut expires) = (0u64, 0u64);
        for (i, t) in s.tables.iter().enumerate() {
            t.check_invariants(&s.hasher);
            let with_ttl = t.iter().filter(|e| e.expire_at != 0).count() + t.compact.len();
            assert_eq!(
                s.slot_expires[i] as usize, with_ttl,
                "slot_expires of table {i}"
            );
            let marked = s.ttl_tables.next_from(i, s.tables.len()) == Some(i);
            assert_eq!(marked, with_ttl > 0, "TTL bit of table {i}");
            for c in t.compact.iter() {
                let h = s.hasher.hash_one(c.key());
                assert!(t.find(h, c.key()).is_none(), "a key in both vectors");
                assert!(t.compact.len() <= COMPACT_MAX);
            }
            keys += (t.len() + t.compact.len()) as u64;
            expires += with_ttl as u64;
        }
        assert_eq!((s.counts.keys, s.counts.expires), (keys, expires));
    }

    /// Random rate-limit writes (compact or not), reads, generic access
    /// and sweeps on keys sharing one hash tag, counted against a model.
    #[test]
    fn random_compact_operations_keep_counters() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut s = Store::new(0, 16384, 1 << 16);
        // Key -> deadline (Unix ms, 0 for none).
        let mut model = HashMap::<Vec<u8>, u64>::new();
        let (mut created, mut deleted) = (0u64, 0u64);
        let mut now = Now {
            unix_ms: 1_000_000,
            mono_ms: 10_000,
        };
        s.set_clock(now);
        let live = |m: &HashMap<Vec<u8>, u64>, k: &[u8], t: u64| {
            m.get(k).is_some_and(|&at| at == 0 || at > t)
        };
        for step in 0..60_000u64 {
            let population = [60, 200, 400, 100][(step / 10_000 % 4) as usize];
            let key = if next() % 4 == 0 {
                format!("{{t}}:{:0>14}", next() % population)
            } else {
                format!("{{t}}:{}", next() % population)
            }
            .into_bytes();
            let is_live = live(&model, &key, now.unix_ms);
            match next() % 12 {
                0..=3 => {
                    let window_ms = 1 + next() % 50;
                    let start = now.mono_ms / window_ms * window_ms;
                    let st = RateState::SlidingWindow(crate::ratelimit::sliding_window::Window {
                        window_ms,
                        start,
                        previous: next() % 3,
                        current: next() % 3,
                    });
                    let mut at = unix_of(now, st.empties_at().unwrap());
                    if next() % 5 == 0 {
                        at += 1;
                    }
                    if !is_live {
                        created += 1;
                    }
                    s.set_rate(&key, st, at);
                    model.insert(key, at);
                }
                4 => {
                    let got = s.get_rate(&key, now.unix_ms);
                    assert_eq!(got.is_some(), is_live);
                }
                5 => {
                    let at = (next() % 2 == 0).then_some(now.unix_ms + next() % 40 + 1);
                    if !is_live {
                        created += 1;
                    }
                    s.set(&key, Value::Int(1), at, now.unix_ms);
                    model.insert(key, at.unwrap_or(0));
                }
                6 => {
                    assert_eq!(s.remove(&key, now.unix_ms), is_live);
                    if is_live {
                        deleted += 1;
                    }
                    model.remove(&key);
                }
                7 => {
                    let got = s.get(&key, now.unix_ms).map(|e| e.expire_at(now));
                    assert_eq!(got.is_some(), is_live);
                    if let Some(at) = got {
                        assert_eq!(at.unwrap_or(0), model[&key]);
                    }
                }
                8 => {
                    if s.get(&key, now.unix_ms).is_some() {
                        let at = (next() % 2 == 0).then_some(now.unix_ms + next() % 40 + 1);
                        assert!(s.set_expire(&key, at));
                        model.insert(key, at.unwrap_or(0));
                    }
                }
                9 => {
                    let d = next() % 5;
                    now.unix_ms += d;
                    now.mono_ms += d;
                    s.set_clock(now);
                }
                10 => {
                    let mut seen = 0;
                    let slot = crate::slot::key_slot(b"{t}") as usize;
                    s.for_each_in_slot(slot, now.unix_ms, |e| {
                        assert_eq!(e.expire_at(now).unwrap_or(0), model[e.key()]);
                        seen += 1;
                    });
                    let want = model
                        .keys()
                        .filter(|k| live(&model, k, now.unix_ms))
                        .count();
                    assert_eq!(seen, want);
                }
                _ => {
                    s.sweep(now.unix_ms, (next() % 20_000) as usize, || next() % 4 == 0);
                }
            }
            let c = s.counts();
            assert_eq!(c.keys + c.expired + deleted, created, "step {step}");
            if step % 997 == 0 {
                check(&s);
            }
        }
        check(&s);
    }
}

/// A flush of a slot range removes exactly the keys in those slots that the
/// store owns, keeps the counters true, and writes one `LH.FLUSHSLOTS` for
/// the owned part of the range.
#[test]
fn clearing_slots_removes_only_those_slots() {
    // A store owning slots 8192..16384, as shard 1 of 2.
    let mut s = Store::new(8192, 8192, 1 << 16);
    let mut owned = Vec::new();
    for i in 0..200u32 {
        let key = format!("k{i}");
        let slot = crate::slot::key_slot(key.as_bytes()) as usize;
        if slot >= 8192 {
            let ttl = (i % 2 == 0).then_some(10_000);
            s.set(key.as_bytes(), Value::Int(1), ttl, 0);
            owned.push((key, slot));
        }
    }
    let cut = 12_000;
    let (low, high): (Vec<_>, Vec<_>) = owned.iter().partition(|(_, slot)| *slot < cut);
    let low_ttls = low
        .iter()
        .filter(|(k, _)| k[1..].parse::<u32>().unwrap() % 2 == 0)
        .count();
    let before = s.counts();
    let offset = s.effects().offset();
    // The range starts below what the store owns: only 8192..12000 goes.
    assert_eq!(s.clear_slots(0..cut), low.len() as u64);
    assert_eq!(s.counts().keys, before.keys - low.len() as u64);
    assert_eq!(s.counts().expires, before.expires - low_ttls as u64);
    for (k, _) in &low {
        assert!(s.get(k.as_bytes(), 0).is_none(), "{k} should be gone");
    }
    for (k, _) in &high {
        assert!(s.get(k.as_bytes(), 0).is_some(), "{k} should stay");
    }
    let [a, b] = s.effects().since(offset).unwrap();
    assert_eq!(
        [a, b].concat(),
        b"*3\r\n$13\r\nLH.FLUSHSLOTS\r\n$4\r\n8192\r\n$5\r\n11999\r\n".to_vec()
    );
    // A range the store does not own changes nothing and emits nothing.
    let offset = s.effects().offset();
    assert_eq!(s.clear_slots(0..8192), 0);
    assert_eq!(s.effects().offset(), offset);
}

#[test]
fn an_image_counts_records_not_keys() {
    use crate::collections::list::{End, List};
    let mut s = store();
    let mut list = List::default();
    for i in 0..1200 {
        list.push(End::Right, format!("e{i}").as_bytes());
    }
    // Three RPUSH records of at most 512 elements, then PEXPIREAT.
    let key = b"l";
    s.set(key, Value::List(Box::new(list)), Some(u64::MAX / 4), 0);
    s.set(b"k", Value::from_bytes(b"v"), None, 0);
    let (tx, rx) = crossbeam_channel::unbounded();
    s.start_image(ImageSink {
        tx,
        queued: Default::default(),
    });
    while s.image_step(std::time::Duration::from_secs(1)) != ImageStep::Idle {}
    let mut records = 0;
    let mut bytes = bytes::BytesMut::new();
    while let Ok(ImagePart::Chunk(b, n)) = rx.try_recv() {
        records += n;
        bytes.extend_from_slice(&b);
    }
    let limits = leasehold_protocol::Limits::default();
    let mut decoded = 0;
    while leasehold_protocol::decode_request(&mut bytes, &limits)
        .unwrap()
        .is_some()
    {
        decoded += 1;
    }
    assert_eq!((records, decoded), (5, 5));
}
