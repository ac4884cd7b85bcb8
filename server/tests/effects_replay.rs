//! Replays a primary shard's effect stream on a fresh replica shard and
//! checks both keyspaces read the same (GET, TYPE, PTTL, RLSTATE per key).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{decode_request, Args, Limits, Reply};
use leasehold_server::clock::{Clock, ManualClock, MONO_BASE_MS};
use leasehold_server::commands::{table, Exec};
use leasehold_server::config::Config;
use leasehold_server::runtime::{new_shared, polls};
use leasehold_server::shard::Shard;
use leasehold_server::store::Store;

struct Node {
    clock: Arc<ManualClock>,
    shard: Shard,
    read: u64,
}

fn node(unix_ms: u64, mono_ms: u64) -> Node {
    let clock = Arc::new(ManualClock::new(unix_ms, mono_ms));
    // One thread's doorbell; its poll is never waited on.
    let (_polls, bells) = polls(1).expect("make a poll");
    let shared = new_shared(
        &Config::default(),
        clock.clone() as Arc<dyn Clock>,
        "127.0.0.1:0".parse().unwrap(),
        bells,
    );
    let store = Store::new(0, 16384, 64 << 20);
    Node {
        clock,
        shard: Shard::new(0, store, shared),
        read: 0,
    }
}

impl Node {
    fn cmd(&mut self, argv: &[Vec<u8>]) -> Reply {
        self.shard.tick();
        let (i, spec) = table().lookup(&argv[0]).expect("known command");
        assert!(
            spec.arity_ok(argv.len()),
            "arity {:?}",
            String::from_utf8_lossy(&argv[0])
        );
        let f = match spec.exec {
            Exec::Key(f)
            | Exec::Keys(f, _)
            | Exec::AllShards(f, _)
            | Exec::Cursor(f)
            | Exec::Span(f, _) => f,
            Exec::Conn(_) => panic!("connection command"),
        };
        let mut args = Args::new(argv.iter().map(|a| Bytes::copy_from_slice(a)).collect());
        self.shard.run(i, f, true, false, &mut args)
    }

    /// The effects appended since the last call, decoded.
    fn new_effects(&mut self) -> Vec<Vec<Vec<u8>>> {
        let log = self.shard.store.effects();
        let [a, b] = log.since(self.read).expect("still in the ring");
        let mut buf = BytesMut::from(&[a, b].concat()[..]);
        self.read = log.offset();
        let mut out = Vec::new();
        while let Some(req) = decode_request(&mut buf, &Limits::default()).expect("valid RESP") {
            out.push(req.into_iter().map(|b| b.to_vec()).collect());
        }
        assert!(buf.is_empty());
        out
    }

    fn observe(&mut self, key: &[u8]) -> String {
        let k = key.to_vec();
        let t = self.cmd(&[b"TYPE".to_vec(), k.clone()]);
        let g = self.cmd(&[b"GET".to_vec(), k.clone()]);
        let p = self.cmd(&[b"PTTL".to_vec(), k.clone()]);
        let r = self.cmd(&[b"RLSTATE".to_vec(), k.clone()]);
        format!("type={t:?} get={g:?} pttl={p:?} rl={r:?}")
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}

const KEYS: [&str; 6] = ["a", "b", "c{x}", "d{x}", "tb", "sw"];

/// Many keys in one slot (past the slot table's index threshold), long keys
/// (boxed, not inline) and the small set.
fn many_keys() -> Vec<String> {
    let mut v: Vec<String> = KEYS.iter().map(|k| k.to_string()).collect();
    v.extend((0..300).map(|i| format!("{{t}}{i}")));
    v.extend((0..20).map(|i| format!("a-rather-long-key-name-beyond-inline-{i}")));
    v
}

fn gen(r: &mut Rng, unix_now: u64, keys: &[String]) -> Vec<String> {
    let key = |r: &mut Rng| keys[r.below(keys.len() as u64) as usize].clone();
    let small = |r: &mut Rng| (r.below(5000) + 1).to_string();
    let val = |r: &mut Rng| match r.below(4) {
        0 => r.below(100).to_string(),
        1 => format!("{}.5", r.below(10)),
        2 => "x".repeat(r.below(30) as usize),
        _ => "-3".into(),
    };
    let mut v: Vec<String>;
    match r.below(30) {
        0 | 1 => {
            v = vec!["SET".into(), key(r), val(r)];
            if r.below(3) == 0 {
                v.push(r.pick(&["NX", "XX"]).into());
            }
            if r.below(3) == 0 {
                v.push("GET".into());
            }
            match r.below(6) {
                0 => v.extend(["EX".into(), (r.below(5) + 1).to_string()]),
                1 => v.extend(["PX".into(), small(r)]),
                2 => v.extend(["EXAT".into(), (unix_now / 1000 + r.below(5)).to_string()]),
                3 => v.extend(["PXAT".into(), (unix_now - 1000 + r.below(4000)).to_string()]),
                4 => v.push("KEEPTTL".into()),
                _ => {}
            }
        }
        2 => v = vec!["SETNX".into(), key(r), val(r)],
        3 => v = vec!["SETEX".into(), key(r), (r.below(3) + 1).to_string(), val(r)],
        4 => v = vec!["PSETEX".into(), key(r), small(r), val(r)],
        5 => v = vec!["GETSET".into(), key(r), val(r)],
        6 => v = vec!["GETDEL".into(), key(r)],
        7 => {
            v = vec!["GETEX".into(), key(r)];
            match r.below(6) {
                0 => v.extend(["EX".into(), (r.below(3) + 1).to_string()]),
                1 => v.extend(["PX".into(), small(r)]),
                2 => v.extend(["EXAT".into(), (unix_now / 1000 + r.below(4)).to_string()]),
                3 => v.extend(["PXAT".into(), (unix_now - 1000 + r.below(4000)).to_string()]),
                4 => v.push("PERSIST".into()),
                _ => {}
            }
        }
        8 => v = vec!["MSET".into(), key(r), val(r), key(r), val(r)],
        9 => v = vec![r.pick(&["INCR", "DECR"]).into(), key(r)],
        10 => {
            v = vec![
                r.pick(&["INCRBY", "DECRBY"]).into(),
                key(r),
                r.below(50).to_string(),
            ]
        }
        11 => v = vec!["INCRBYFLOAT".into(), key(r), "1.25".into()],
        12 => v = vec!["APPEND".into(), key(r), val(r)],
        13 => v = vec![r.pick(&["DEL", "UNLINK"]).into(), key(r), key(r)],
        14 | 15 => {
            let c = r.pick(&["EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT"]);
            let n: i64 = match c {
                "EXPIRE" => r.below(6) as i64 - 1,
                "PEXPIRE" => r.below(6000) as i64 - 500,
                "EXPIREAT" => (unix_now / 1000) as i64 + r.below(6) as i64 - 1,
                _ => unix_now as i64 + r.below(6000) as i64 - 500,
            };
            v = vec![c.into(), key(r), n.to_string()];
            if r.below(2) == 0 {
                v.push(r.pick(&["NX", "XX", "GT", "LT"]).into());
            }
        }
        16 => v = vec!["PERSIST".into(), key(r)],
        17 => {
            if r.below(4) == 0 {
                v = vec![r.pick(&["FLUSHALL", "FLUSHDB"]).into()];
            } else {
                v = vec!["PING".into()];
            }
        }
        18 | 19 => {
            v = vec![
                "TOKENLEASE".into(),
                key(r),
                "10".into(),
                (r.below(3) + 1).to_string(),
                "1000".into(),
                r.below(12).to_string(),
            ];
            if r.below(3) == 0 {
                v.extend(["MIN".into(), "1".into()]);
            }
        }
        20 => {
            v = vec![
                "TOKENRETURN".into(),
                key(r),
                "10".into(),
                "2".into(),
                "1000".into(),
                r.below(5).to_string(),
            ]
        }
        21 | 22 => {
            v = vec!["SLIDINGWINDOW".into(), key(r), "5".into(), "2000".into()];
            if r.below(3) == 0 {
                v.extend(["COUNT".into(), r.below(4).to_string()]);
            }
        }
        23 => {
            v = vec![
                "CL.THROTTLE".into(),
                key(r),
                "3".into(),
                "5".into(),
                "2".into(),
                r.below(3).to_string(),
            ]
        }
        24 => {
            v = vec![
                "GCRA".into(),
                key(r),
                "2".into(),
                "3".into(),
                "1.5".into(),
                "TOKENS".into(),
                r.below(3).to_string(),
            ]
        }
        25 => {
            v = vec![
                "LH.RESTORE".into(),
                key(r),
                "TOKENBUCKET".into(),
                r.below(10).to_string(),
                "0".into(),
                "500".into(),
                (unix_now - r.below(3000)).to_string(),
                "PXAT".into(),
                (unix_now - 100 + r.below(5000)).to_string(),
            ]
        }
        26 => {
            v = vec![
                "LH.FLUSHSLOTS".into(),
                r.below(16384).to_string(),
                "16383".into(),
            ]
        }
        27 => {
            v = vec![
                "LH.RESTORE".into(),
                key(r),
                "SLIDINGWINDOW".into(),
                "2000".into(),
                (unix_now - r.below(3000)).to_string(),
                r.below(5).to_string(),
                r.below(5).to_string(),
                "PXAT".into(),
                (unix_now + r.below(5000)).to_string(),
            ]
        }
        _ => v = vec!["GET".into(), key(r)],
    }
    v
}

/// Runs `steps` random commands on a primary, replaying its effects on a
/// replica after each one; returns the first divergence with the history.
fn run(seed: u64, steps: usize, replica_mono: u64, sweep: bool) -> Result<(), String> {
    let keys: Vec<String> = KEYS.iter().map(|k| k.to_string()).collect();
    run_with(seed, steps, replica_mono, sweep, &keys)
}

fn run_with(
    seed: u64,
    steps: usize,
    replica_mono: u64,
    sweep: bool,
    keys: &[String],
) -> Result<(), String> {
    let unix = 1_700_000_000_000;
    let mut p = node(unix, 1_000_000);
    let mut q = node(unix, replica_mono);
    let mut r = Rng(seed | 1);
    let mut history: Vec<String> = Vec::new();
    for _ in 0..steps {
        let adv = match r.below(4) {
            0 => 0,
            1 => r.below(20),
            2 => r.below(700),
            _ => r.below(2500),
        };
        p.clock.advance_ms(adv);
        q.clock.advance_ms(adv);
        if adv > 0 {
            history.push(format!("(advance {adv} ms)"));
        }
        let now = p.clock.now().unix_ms;
        if sweep && r.below(8) == 0 {
            p.shard.expiry_cycle(std::time::Duration::from_millis(50));
            history.push("(primary expiry cycle)".into());
        }
        let argv: Vec<Vec<u8>> = gen(&mut r, now, keys)
            .into_iter()
            .map(String::into_bytes)
            .collect();
        let reply = p.cmd(&argv);
        history.push(format!(
            "{} -> {:?}",
            argv.iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" "),
            reply
        ));
        for e in p.new_effects() {
            let rr = q.cmd(&e);
            history.push(format!(
                "    effect {} -> {:?}",
                e.iter()
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect::<Vec<_>>()
                    .join(" "),
                rr
            ));
            if rr.is_error() {
                return Err(format!(
                    "replica refused an effect\n{}",
                    history[history.len().saturating_sub(40)..].join("\n")
                ));
            }
        }
        q.new_effects();
        let all = history.len() % 50 == 0 || keys.len() <= KEYS.len();
        let check: Vec<Vec<u8>> = if all {
            keys.iter().map(|k| k.as_bytes().to_vec()).collect()
        } else {
            argv[1..].to_vec()
        };
        for k in &check {
            let (a, b) = (p.observe(k), q.observe(k));
            let k = String::from_utf8_lossy(k);
            if a != b {
                return Err(format!(
                    "key {k} differs:\n primary {a}\n replica {b}\nhistory (last 40):\n{}",
                    history[history.len().saturating_sub(40)..].join("\n")
                ));
            }
        }
        // Reads on the primary may reclaim keys (lazy expiry DEL): replay too.
        for e in p.new_effects() {
            q.cmd(&e);
        }
        q.new_effects();
        let (dp, dq) = (p.cmd(&[b"DBSIZE".to_vec()]), q.cmd(&[b"DBSIZE".to_vec()]));
        if dp != dq {
            return Err(format!(
                "DBSIZE differs {dp:?} vs {dq:?}\n{}",
                history[history.len().saturating_sub(40)..].join("\n")
            ));
        }
    }
    Ok(())
}

#[test]
fn replaying_the_effects_reproduces_the_keyspace_same_clock() {
    let n: u64 = std::env::var("REPLAY_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    for seed in 1..n {
        if let Err(e) = run(seed * 7919, 600, 1_000_000, true) {
            panic!("seed {seed}: {e}");
        }
    }
}

/// A replica whose monotonic clock started after the primary's (every
/// freshly started replica doing its first sync) reads the same state:
/// `LH.RESTORE` turns each Unix instant into monotonic ms with
/// `clock::mono_of`, and a real clock's monotonic reading starts at
/// `MONO_BASE_MS`, so instants from before the replica started (a window
/// start, a bucket's last refill) still lie after its origin.
#[test]
fn a_replica_started_later_restores_the_same_instants() {
    let unix = 1_700_000_000_000;
    let mut p = node(unix, MONO_BASE_MS + 1_000_000);
    let argv = |v: &[&str]| v.iter().map(|a| a.as_bytes().to_vec()).collect::<Vec<_>>();
    // Three hits in a 60 s window, then 30 s pass, then one more.
    for _ in 0..3 {
        p.cmd(&argv(&["SLIDINGWINDOW", "w", "10", "60000"]));
    }
    p.clock.advance_ms(30_000);
    p.cmd(&argv(&["SLIDINGWINDOW", "w", "10", "60000"]));
    // A bucket emptied 20 s ago.
    p.clock.advance_ms(1);
    p.cmd(&argv(&["TOKENLEASE", "t", "100", "1", "1000", "100"]));
    p.clock.advance_ms(20_000);
    p.cmd(&argv(&["TOKENLEASE", "t", "100", "1", "1000", "1"]));
    // The replica starts now (its monotonic clock reads 10 ms past its
    // base) and syncs.
    let mut q = node(p.clock.now().unix_ms, MONO_BASE_MS + 10);
    for e in p.new_effects() {
        assert!(!q.cmd(&e).is_error());
    }
    for k in ["w", "t"] {
        assert_eq!(p.observe(k.as_bytes()), q.observe(k.as_bytes()), "key {k}");
    }
    // And both grant the same from here.
    let lease = argv(&["TOKENLEASE", "t", "100", "1", "1000", "5"]);
    assert_eq!(p.cmd(&lease), q.cmd(&lease));
}

#[test]
fn replaying_the_effects_with_many_keys_in_one_slot_and_long_keys() {
    let keys = many_keys();
    for seed in 1..6u64 {
        if let Err(e) = run_with(seed * 31337, 3000, 1_000_000, true, &keys) {
            panic!("seed {seed}: {e}");
        }
    }
}
