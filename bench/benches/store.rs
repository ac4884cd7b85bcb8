//! Shard-local operations through the server's public API: the keyspace
//! (`leasehold_server::store::Store`) and the TOKENLEASE operation on a
//! stored bucket.
//!
//! Does not measure: parsing, dispatch, cross-shard messages, the effect
//! stream's consumers, or the network; one store owns every slot, keys are
//! pre-built, and the table is warm (100 000 keys, mostly in cache on a
//! desktop CPU, unlike a server holding millions).

use criterion::{criterion_group, criterion_main, Criterion};
use leasehold_server::ratelimit::token_bucket::{lease, Change, Policy};
use leasehold_server::store::{Store, Value};

const KEYS: usize = 100_000;
const SLOTS: usize = 16_384;
const BACKLOG: usize = 1 << 20;

fn keys() -> Vec<Vec<u8>> {
    (0..KEYS)
        .map(|i| format!("k:{i:012}").into_bytes())
        .collect()
}

fn filled(keys: &[Vec<u8>]) -> Store {
    let mut store = Store::new(0, SLOTS, BACKLOG);
    for (i, k) in keys.iter().enumerate() {
        store.set(k, Value::Int(i as i64), None, 0);
    }
    store
}

fn store_ops(c: &mut Criterion) {
    let keys = keys();
    let mut store = filled(&keys);
    let mut i = 0usize;
    let mut next = || {
        i = (i + 7919) % KEYS;
        &keys[i]
    };
    let mut group = c.benchmark_group("store");
    group.bench_function("get hit", |b| b.iter(|| store.get(next(), 1).is_some()));
    group.bench_function("set overwrite int", |b| {
        b.iter(|| {
            store
                .set(next(), Value::Int(7), None, 0)
                .expire_at(Default::default())
        })
    });
    group.bench_function("incr in place", |b| {
        b.iter(|| {
            if let Some(e) = store.get(next(), 1) {
                if let Value::Int(v) = &mut e.value {
                    *v += 1;
                }
            }
        })
    });
    group.finish();
}

/// One bucket leased from at 1 token per 3 ms of a 100-per-second refill:
/// every call grants and stores (the common, writing path).
fn token_lease(c: &mut Criterion) {
    let p = Policy {
        capacity: 100,
        rate: 100,
        period_ms: 1000,
    };
    let mut bucket = None;
    let mut now = 0u64;
    c.bench_function("tokenbucket lease (op only)", |b| {
        b.iter(|| {
            now += 3;
            let (reply, change) = lease(bucket, &p, 1, 1, now);
            bucket = match change {
                Change::Store(next, _full_at) => Some(next),
                Change::Remove => None,
                Change::None => bucket,
            };
            reply.granted
        })
    });
}

criterion_group!(benches, store_ops, token_lease);
criterion_main!(benches);
