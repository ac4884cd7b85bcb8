//! A local decision in the steady state: `LeaseManager::decide` (polled once,
//! it must be ready at once) and `try_decide`, for one key and for 100 000
//! keys, against a real in-process Leasehold server on 127.0.0.1.
//!
//! Steady state: before measuring, every key takes one decision through the
//! ledger and receives a fixed lease of 10^12 tokens (min_lease = max_lease),
//! so no bucket ever nears its watermark, nothing goes idle (idle_after is an
//! hour) and no ledger call happens on the measured path. After each group
//! the bench checks that: the local token count fell by exactly the number of
//! decisions made, and the server saw no TOKENLEASE or TOKENRETURN.
//!
//! Does not measure (any of the groups): the ledger round trip; the renewal
//! spawn a real key pays once per ~400 decisions at max_lease 500; a metrics
//! recorder (none is installed, so the counters are no-ops); several cores
//! deciding on the same key; HTTP. The sweeper does run (every 100 ms). One
//! group runs two threads at once (on different keys at any moment).
//!
//! The manager's clock is a [`CoarseClock`] (what a gateway deploys: one
//! atomic load per read, refreshed every millisecond by its thread), though
//! an allowed decision in the steady state reads no clock at all.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use leasehold_client::{
    Client, ClientConfig, Clock, CoarseClock, Decision, FailureMode, LeaseConfig, LeaseManager,
    Mode, Outcome, Policy, PolicyId, PolicySet,
};
use leasehold_server::config::Config;
use leasehold_server::ServerHandle;

const P: PolicyId = PolicyId::FIRST;
const LEASE: u64 = 1_000_000_000_000;
const KEYS: usize = 100_000;
/// Visits the 100k keys in a scattered order (7919 is coprime with 100 000).
const STRIDE: usize = 7919;

/// Key `i` as `user:` and 6 hex digits, built on the stack: a gateway's key
/// bytes are in the request it just read, so the bench must not add a cache
/// miss of its own by fetching keys from a 100k-entry table. Hex rather than
/// decimal digits: no chain of divisions (~5 ns) in the measured loop.
fn key(i: usize) -> [u8; 11] {
    let mut k = *b"user:000000";
    for (j, d) in k[5..].iter_mut().enumerate() {
        let nibble = (i >> (4 * (5 - j))) as u8 & 0xf;
        *d = if nibble < 10 {
            b'0' + nibble
        } else {
            b'a' - 10 + nibble
        };
    }
    k
}

/// The bench's key sequence (stride [`STRIDE`] over `n` keys). Each key is
/// written one decision ahead, into the other half of a double buffer: a
/// gateway's key bytes were written when it parsed the request, long
/// before the decision, whereas a key built just before the call leaves its
/// byte stores in flight, and the hash's 8-byte loads of them stall on
/// store forwarding (~10 ns a decision that is the bench's, not the map's).
struct Keys {
    bufs: [[u8; 11]; 2],
    cur: usize,
    i: usize,
    step: usize,
    n: usize,
}

impl Keys {
    fn new(start: usize, n: usize) -> Keys {
        Keys {
            bufs: [key(start), [0; 11]],
            cur: 0,
            i: start,
            step: STRIDE % n, // no division on the measured path
            n,
        }
    }

    /// [`Self::next`], but this decision cannot start before the previous
    /// one has answered: its key's length depends on `previous` (the last
    /// decision's `remaining`, always below 2^63, so the key is unchanged).
    /// Measures one decision's latency rather than back-to-back throughput.
    #[inline(always)]
    fn next_after(&mut self, previous: u64) -> &[u8] {
        let dependent = (previous >> 63) as usize; // 0, unknown to the CPU
        &self.next()[..11 - dependent]
    }

    /// This decision's key; writes the next one into the other buffer.
    #[inline(always)]
    fn next(&mut self) -> &[u8; 11] {
        self.i += self.step;
        if self.i >= self.n {
            self.i -= self.n;
        }
        let cur = self.cur;
        self.bufs[cur ^ 1] = key(self.i);
        self.cur ^= 1;
        std::hint::black_box(&self.bufs[cur])
    }
}

struct Setup {
    rt: tokio::runtime::Runtime,
    server: ServerHandle,
    manager: LeaseManager,
}

fn setup(clock: Arc<dyn Clock>) -> Setup {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut c = Config::default();
    c.net.bind = "127.0.0.1".into();
    c.net.port = 0;
    c.shards.threads = 1;
    let server =
        leasehold_server::start(c, Arc::new(leasehold_server::clock::SystemClock::new())).unwrap();
    let manager = rt.block_on(async {
        let mut config = ClientConfig::new(server.addr);
        // Only the setup's first leases see this; the measured path makes none.
        config.lease_deadline = Duration::from_secs(2);
        let policy = Policy {
            name: "bench".into(),
            requests_per_unit: LEASE * 1000,
            unit: Duration::from_secs(1),
            burst: LEASE * 1000,
            failure_mode: FailureMode::FailOpen,
            mode: Mode::Enforce,
            fail_open_requests_per_unit: LEASE,
        };
        let lease = LeaseConfig {
            min_lease: LEASE,
            max_lease: LEASE,
            idle_after: Duration::from_secs(3600),
            evict_after: Duration::from_secs(3600),
            ..LeaseConfig::default()
        };
        LeaseManager::new(
            Client::new(config),
            &PolicySet::from_policies("bench", vec![policy]),
            lease,
            clock,
        )
    });
    Setup {
        rt,
        server,
        manager,
    }
}

/// Gives every key its lease (one ledger decision each, 1000 in flight at once).
fn prime(s: &Setup, n: usize) {
    s.rt.block_on(async {
        for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
            let mut set = tokio::task::JoinSet::new();
            for &i in chunk {
                let m = s.manager.clone();
                set.spawn(async move { m.decide(P, &key(i)).await });
            }
            while let Some(d) = set.join_next().await {
                assert_eq!(d.unwrap().outcome, Outcome::Allowed);
            }
        }
    });
    for i in 0..n {
        assert_eq!(s.manager.local_tokens(P, &key(i)), LEASE - 1);
    }
}

/// TOKENLEASE and TOKENRETURN calls the server has run.
fn ledger_calls(s: &Setup) -> u64 {
    let table = leasehold_server::commands::table();
    let idx = [b"TOKENLEASE".as_slice(), b"TOKENRETURN"]
        .map(|n| table.lookup(n).expect("ledger command").0);
    s.server
        .shared
        .shard_stats
        .iter()
        .map(|st| idx.iter().map(|&i| st.calls[i].get()).sum::<u64>())
        .sum()
}

fn tokens(s: &Setup, n: usize) -> u64 {
    (0..n).map(|i| s.manager.local_tokens(P, &key(i))).sum()
}

/// Polls `decide` once: in the steady state it never waits.
fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("decide waited for the ledger: not the steady state"),
    }
}

fn check(d: &Decision) {
    assert!(d.allowed, "{:?}", d.outcome);
}

fn steady_state(c: &mut Criterion, label: &str, n: usize) {
    let s = setup(CoarseClock::start());
    prime(&s, n);
    let (calls_before, tokens_before) = (ledger_calls(&s), tokens(&s, n));
    let mut decided = 0u64;
    let mut group = c.benchmark_group(format!("decide {label}"));
    let decide_polled = |b: &mut criterion::Bencher<'_>| {
        b.iter_custom(|iters| {
            let mut keys = Keys::new(0, n);
            let start = Instant::now();
            for _ in 0..iters {
                let d = ready(s.manager.decide(P, keys.next()));
                std::hint::black_box(&d);
            }
            let t = start.elapsed();
            // Outside the timed loop: one decision's outcome, then the count.
            check(&ready(s.manager.decide(P, &key(0))));
            decided += iters + 1;
            t
        })
    };
    group.bench_function("decide (polled once)", decide_polled);
    group.bench_function("try_decide", |b| {
        b.iter_custom(|iters| {
            let mut keys = Keys::new(0, n);
            let mut refused = 0u64;
            let start = Instant::now();
            for _ in 0..iters {
                match s.manager.try_decide(P, keys.next()) {
                    Some(d) => {
                        std::hint::black_box(&d);
                    }
                    None => refused += 1,
                }
            }
            let t = start.elapsed();
            assert_eq!(refused, 0, "try_decide found an empty bucket");
            decided += iters;
            t
        })
    });
    group.bench_function("try_decide, one at a time", |b| {
        b.iter_custom(|iters| {
            let mut keys = Keys::new(0, n);
            let mut previous = 0u64;
            let start = Instant::now();
            for _ in 0..iters {
                let d = s.manager.try_decide(P, keys.next_after(previous));
                previous = d.expect("try_decide found an empty bucket").remaining;
            }
            let t = start.elapsed();
            decided += iters;
            t
        })
    });
    if n > 1 {
        // Both cores deciding at once, each on every key in its own order
        // (the second thread starts half way round): per-decision time as
        // each thread sees it. Shows what the map's shared writes cost when
        // cores meet on its shards.
        group.bench_function("try_decide, 2 threads", |b| {
            b.iter_custom(|iters| {
                let run = |start: usize| {
                    let mut keys = Keys::new(start, n);
                    let mut refused = 0u64;
                    for _ in 0..iters {
                        if s.manager.try_decide(P, keys.next()).is_none() {
                            refused += 1;
                        }
                    }
                    refused
                };
                let start = Instant::now();
                let refused = std::thread::scope(|scope| {
                    let other = scope.spawn(|| run(n / 2));
                    run(0) + other.join().expect("second decider")
                });
                let t = start.elapsed();
                assert_eq!(refused, 0, "try_decide found an empty bucket");
                decided += 2 * iters;
                t
            })
        });
    }
    group.finish();
    let spent = tokens_before - tokens(&s, n);
    let calls = ledger_calls(&s) - calls_before;
    assert_eq!(spent, decided, "a lease or a return changed the buckets");
    assert_eq!(calls, 0, "the measured path reached the ledger");
    eprintln!("{label}: {decided} decisions, {calls} ledger calls, {spent} tokens spent");
    s.rt.block_on(s.manager.shutdown());
    drop(s.rt);
    s.server.shutdown();
}

fn one_key(c: &mut Criterion) {
    steady_state(c, "1 key", 1);
}

fn many_keys(c: &mut Criterion) {
    steady_state(c, "100k keys", KEYS);
}

criterion_group!(benches, one_key, many_keys);
criterion_main!(benches);
