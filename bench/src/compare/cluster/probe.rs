//! What a redirection and a reshard cost a client: a request answered
//! `-MOVED` plus its retry on the owner against the same request sent to
//! the owner directly, and a reshard of a slot range holding many keys,
//! timed, with a client reading those keys before and during it.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use leasehold_protocol::slot::key_slot;
use leasehold_protocol::Reply;

use super::nodes::Cluster;
use crate::compare::servers::{shell_join, Kind};
use crate::report::Latency;
use crate::resp::Conn;

/// A latency histogram of nanoseconds (1 ns to 60 s, 3 digits).
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

/// The cost of one MOVED: `samples` GETs of one key sent to its owner
/// (`direct`), and as many sent first to another primary, answered
/// `-MOVED`, then to the owner (`redirected`, both round trips), on two
/// open connections, alternating.
#[derive(Debug, Clone, PartialEq)]
pub struct MovedCost {
    /// GETs per kind.
    pub samples: u64,
    /// A GET on the owner.
    pub direct: Latency,
    /// The GET on the other primary, its MOVED, and the GET on the owner.
    pub redirected: Latency,
}

/// Measures [`MovedCost`] on `c` with a key of group 1.
///
/// # Errors
/// A node that does not answer, or a reply other than the expected ones.
pub fn moved_cost(c: &Cluster, samples: u64) -> std::io::Result<MovedCost> {
    let key = (0..)
        .map(|n| format!("moved:{n}"))
        .find(|k| (5461..=10921).contains(&key_slot(k.as_bytes())))
        .expect("a key of group 1");
    let mut owner = Conn::connect(&c.addr(1))?;
    let mut other = Conn::connect(&c.addr(0))?;
    owner.call(&["SET", &key, "v"])?;
    let (mut direct, mut redirected) = (histogram(), histogram());
    let get = ["GET", key.as_str()];
    let want = Reply::bulk("v");
    for i in 0..samples * 2 {
        let t = Instant::now();
        if i % 2 == 0 {
            let r = owner.call(&get)?;
            direct.record(t.elapsed().as_nanos() as u64).ok();
            check(&r, &want)?;
        } else {
            let moved = other.call(&get)?;
            let r = owner.call(&get)?;
            redirected.record(t.elapsed().as_nanos() as u64).ok();
            if !matches!(&moved, Reply::Error(e) if e.starts_with("MOVED ")) {
                return Err(crate::resp::invalid(format!(
                    "expected MOVED, got {moved:?}"
                )));
            }
            check(&r, &want)?;
        }
    }
    Ok(MovedCost {
        samples,
        direct: Latency::from_histogram(&direct),
        redirected: Latency::from_histogram(&redirected),
    })
}

fn check(got: &Reply, want: &Reply) -> std::io::Result<()> {
    match got == want {
        true => Ok(()),
        false => Err(crate::resp::invalid(format!(
            "expected {want:?}, got {got:?}"
        ))),
    }
}

/// A client that follows `-MOVED` and `-ASK` (one blocking connection per
/// node, opened when first needed), as a cluster client does.
struct Router {
    conns: HashMap<String, Conn>,
}

impl Router {
    /// Sends `args` to `addr`, following redirections (at most 5); the
    /// final reply.
    fn call(&mut self, addr: &str, args: &[&str]) -> std::io::Result<Reply> {
        let mut addr = addr.to_string();
        let mut asking = false;
        for _ in 0..6 {
            if !self.conns.contains_key(&addr) {
                self.conns.insert(addr.clone(), Conn::connect(&addr)?);
            }
            let conn = self.conns.get_mut(&addr).expect("just opened");
            let r = match asking {
                true => {
                    let asking: Vec<&str> = vec!["ASKING"];
                    let mut both = conn.pipeline(&[asking, args.to_vec()])?;
                    both.pop().expect("two replies")
                }
                false => conn.call(args)?,
            };
            let Reply::Error(e) = &r else { return Ok(r) };
            let mut words = e.split(' ');
            match (words.next(), words.nth(1)) {
                (Some("MOVED"), Some(to)) => (addr, asking) = (to.to_string(), false),
                (Some("ASK"), Some(to)) => (addr, asking) = (to.to_string(), true),
                _ => return Ok(r),
            }
        }
        Err(crate::resp::invalid(format!(
            "{args:?}: more than 5 redirections"
        )))
    }
}

/// A reshard of `slots` slots holding `keys` keys from group 0 to group 1,
/// and the probe's latencies before and during it.
#[derive(Debug, Clone, PartialEq)]
pub struct Reshard {
    /// Which cluster.
    pub kind: Kind,
    /// Keys moved (DBSIZE of group 1 afterwards).
    pub keys: u64,
    /// Slots moved.
    pub slots: u16,
    /// Seconds the fill took (pipelined SETs to group 0).
    pub fill_s: f64,
    /// Seconds the reshard command took, start to exit.
    pub seconds: f64,
    /// The probe before the reshard (over [`BEFORE`]).
    pub before: Latency,
    /// The probe during the reshard.
    pub during: Latency,
    /// The probe's GETs per second before and during.
    pub probe_rps: (f64, f64),
    /// GETs that did not answer the value (errors, nil), during.
    pub probe_errors: u64,
    /// The first of those.
    pub first_error: Option<String>,
    /// The reshard command, for the report.
    pub command: String,
}

/// How long the probe runs before the reshard starts.
pub const BEFORE: Duration = Duration::from_secs(3);

/// The names of `keys` keys whose slots are below `slots`: `r:<n>` for
/// the n that hash there.
pub fn keys_below(slots: u16, keys: u64) -> Vec<String> {
    (0u64..)
        .map(|n| format!("r:{n}"))
        .filter(|k| key_slot(k.as_bytes()) < slots)
        .take(keys as usize)
        .collect()
}

/// Fills group 0 of `c` with `names` (SET name name, 1000 to a write).
fn fill(c: &Cluster, names: &[String]) -> std::io::Result<f64> {
    let start = Instant::now();
    let mut conn = Conn::connect(&c.addr(0))?;
    for chunk in names.chunks(1000) {
        let batch: Vec<Vec<&str>> = chunk.iter().map(|k| vec!["SET", k, k]).collect();
        for r in conn.pipeline(&batch)? {
            if let Reply::Error(e) = r {
                return Err(crate::resp::invalid(format!("fill: {e}")));
            }
        }
    }
    Ok(start.elapsed().as_secs_f64())
}

fn dbsize(addr: &str) -> std::io::Result<i64> {
    Conn::connect(addr)?.call_int(&["DBSIZE"])
}

/// The reshard's command line (program first) on `c`.
fn reshard_command(c: &Cluster, tool: &Path, slots: u16) -> std::io::Result<Vec<String>> {
    Ok(match c.kind {
        Kind::Leasehold => vec![
            tool.display().to_string(),
            "reshard".into(),
            "--from".into(),
            "g0".into(),
            "--to".into(),
            "g1".into(),
            "--slots".into(),
            format!("0-{}", slots - 1),
            "--batch".into(),
            "100".into(),
            c.addr(0),
        ],
        // redis-cli takes a source's lowest slots first: 0..slots.
        Kind::Redis => vec![
            "redis-cli".into(),
            "--cluster".into(),
            "reshard".into(),
            c.addr(0),
            "--cluster-from".into(),
            c.id(0)?,
            "--cluster-to".into(),
            c.id(1)?,
            "--cluster-slots".into(),
            slots.to_string(),
            "--cluster-yes".into(),
            "--cluster-pipeline".into(),
            "100".into(),
        ],
    })
}

/// Flushes `c`, fills slots `0..slots` with `keys` keys on group 0, starts
/// the probe (one client, GET of a random key of them, one at a time,
/// following MOVED and ASK), and after [`BEFORE`] moves the slots to group
/// 1 with the cluster's own tool (`tool` is `leasehold-cluster`); checks
/// every key arrived.
///
/// # Errors
/// A node that does not answer, a failed fill or reshard, keys missing.
pub fn reshard(c: &Cluster, tool: &Path, slots: u16, keys: u64) -> std::io::Result<Reshard> {
    c.flush()?;
    let names = Arc::new(keys_below(slots, keys));
    let fill_s = fill(c, &names)?;
    let have = dbsize(&c.addr(0))?;
    if have != keys as i64 {
        return Err(crate::resp::invalid(format!(
            "{have} keys after the fill of {keys}"
        )));
    }
    // Phase 0: before; 1: during; 2: stop.
    let phase = Arc::new(AtomicU8::new(0));
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let seed = c.addr(0);
    let probe = {
        let (names, phase, counts) = (names.clone(), phase.clone(), counts.clone());
        std::thread::spawn(
            move || -> (Histogram<u64>, Histogram<u64>, u64, Option<String>) {
                let mut router = Router {
                    conns: HashMap::new(),
                };
                let (mut before, mut during) = (histogram(), histogram());
                let (mut errors, mut first) = (0, None);
                let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
                loop {
                    let p = phase.load(Ordering::Relaxed);
                    if p >= 2 {
                        break;
                    }
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let k = &names[(x % names.len() as u64) as usize];
                    let t = Instant::now();
                    let r = router.call(&seed, &["GET", k]);
                    let ns = t.elapsed().as_nanos() as u64;
                    let h = if p == 0 { &mut before } else { &mut during };
                    h.record(ns).ok();
                    counts[p as usize].fetch_add(1, Ordering::Relaxed);
                    match r {
                        Ok(Reply::Bulk(b)) if b.as_ref() == k.as_bytes() => {}
                        other => {
                            errors += u64::from(p == 1);
                            first.get_or_insert_with(|| format!("{k}: {other:?}"));
                            if other.is_err() {
                                router.conns.clear();
                            }
                        }
                    }
                }
                (before, during, errors, first)
            },
        )
    };
    std::thread::sleep(BEFORE);
    let words = reshard_command(c, tool, slots)?;
    let start = Instant::now();
    phase.store(1, Ordering::Relaxed);
    let out = Command::new(&words[0]).args(&words[1..]).output()?;
    let seconds = start.elapsed().as_secs_f64();
    phase.store(2, Ordering::Relaxed);
    let (before, during, probe_errors, first_error) = probe
        .join()
        .map_err(|_| crate::resp::invalid("the probe panicked".into()))?;
    if !out.status.success() {
        return Err(crate::resp::invalid(format!(
            "{} failed: {}",
            words[0],
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .chain(String::from_utf8_lossy(&out.stderr).lines())
                .last()
                .unwrap_or("")
        )));
    }
    let moved = dbsize(&c.addr(1))?;
    let left = dbsize(&c.addr(0))?;
    if moved != keys as i64 || left != 0 {
        return Err(crate::resp::invalid(format!(
            "after the reshard: {moved} keys on g1, {left} on g0 (of {keys})"
        )));
    }
    let rps = |i: usize, s: f64| counts[i].load(Ordering::Relaxed) as f64 / s;
    Ok(Reshard {
        kind: c.kind,
        keys,
        slots,
        fill_s,
        seconds,
        before: Latency::from_histogram(&before),
        during: Latency::from_histogram(&during),
        probe_rps: (rps(0, BEFORE.as_secs_f64()), rps(1, seconds)),
        probe_errors,
        first_error,
        command: shell_join(&words),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_below_a_slot_hash_there() {
        let k = keys_below(1000, 50);
        assert_eq!(k.len(), 50);
        assert!(k.iter().all(|k| key_slot(k.as_bytes()) < 1000));
        // "r:<n>" in order, the first few of them.
        assert!(k.windows(2).all(|w| {
            let n = |s: &str| s[2..].parse::<u64>().unwrap();
            n(&w[0]) < n(&w[1])
        }));
    }
}
