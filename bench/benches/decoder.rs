//! Request decoding: `leasehold_protocol::decode_request` over a pipelined
//! buffer, and the generator's own request encoding (`Template::write`).
//!
//! Does not measure: socket reads, dispatch, shard hops or replies; the
//! buffer is already in memory and warm in cache, and every request is the
//! same shape (`SET <15-byte key> <3 bytes>`).

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use leasehold_bench::template::Template;
use leasehold_protocol::{decode_request, Limits};

fn pipelined(template: &Template, n: u64) -> BytesMut {
    let mut buf = BytesMut::new();
    for k in 0..n {
        template.write(k * 7919, &mut buf);
    }
    buf
}

fn decode(c: &mut Criterion) {
    let template = Template::parse("SET k:__key__ xxx", None).expect("valid template");
    let limits = Limits::default();
    let mut group = c.benchmark_group("decode_request");
    for depth in [1u64, 16, 256] {
        let buf = pipelined(&template, depth);
        group.throughput(Throughput::Elements(depth));
        group.bench_function(format!("SET pipeline {depth}"), |b| {
            b.iter_batched_ref(
                || buf.clone(),
                |buf| {
                    let mut n = 0;
                    while let Some(args) = decode_request(buf, &limits).expect("valid request") {
                        n += args.len();
                    }
                    n
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

fn encode(c: &mut Criterion) {
    let template = Template::parse(
        "EVALSHA __sha__ 1 tb:__key__ 100 100 1000 1",
        Some("0123456789abcdef0123456789abcdef01234567"),
    )
    .expect("valid template");
    let mut out = BytesMut::with_capacity(64 * 1024);
    let mut group = c.benchmark_group("template_write");
    group.throughput(Throughput::Elements(16));
    group.bench_function("EVALSHA batch of 16", |b| {
        b.iter(|| {
            out.clear();
            for k in 0..16 {
                template.write(k, &mut out);
            }
            out.len()
        })
    });
    group.finish();
}

criterion_group!(benches, decode, encode);
criterion_main!(benches);
