//! Memory per key and reclamation of expired keys, both read from INFO
//! `used_memory` (jemalloc's allocated bytes on both servers).

use std::time::{Duration, Instant};

use super::servers::Server;
use super::table::thousands;
use crate::resp::Conn;

/// A reclaimed server is within this fraction of its starting memory.
pub const RECLAIMED_WITHIN: f64 = 0.10;

/// Memory before and after creating keys of one kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Memory {
    /// `used_memory` after FLUSHALL (and SCRIPT LOAD), in bytes.
    pub before: u64,
    /// `used_memory` after the keys were created, in bytes.
    pub after: u64,
    /// DBSIZE after the keys were created.
    pub keys: u64,
}

impl Memory {
    /// Bytes per key: (after - before) / keys.
    pub fn per_key(&self) -> f64 {
        self.after.saturating_sub(self.before) as f64 / self.keys.max(1) as f64
    }
}

/// How long expired keys took to disappear.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reclaim {
    /// `used_memory` after FLUSHALL, before the keys, in bytes.
    pub before: u64,
    /// `used_memory` right after the keys were written, in bytes.
    pub peak: u64,
    /// `used_memory` at the last poll, in bytes.
    pub last: u64,
    /// Seconds from the end of the writes until DBSIZE was 0 (None: not within the limit).
    pub dbsize_zero_s: Option<f64>,
    /// Seconds from the end of the writes until DBSIZE was 0 and used_memory
    /// within [`RECLAIMED_WITHIN`] of `before`.
    pub reclaimed_s: Option<f64>,
}

/// FLUSHALL, then `used_memory` once the server settles.
fn flushed_memory(conn: &mut Conn) -> std::io::Result<u64> {
    conn.call(&["FLUSHALL"])?;
    std::thread::sleep(Duration::from_millis(300));
    conn.used_memory()
}

/// Creates `keys` keys with `fill` (a sequential run that calls each key
/// the same number of times) and measures the memory they take.
///
/// # Errors
/// A failed call or run, or fewer keys than asked (expired too early).
pub fn measure(
    server: &Server,
    keys: u64,
    fill: &dyn Fn() -> Result<(), String>,
    script: Option<&std::path::Path>,
) -> Result<Memory, String> {
    let mut conn = server.conn().map_err(|e| e.to_string())?;
    let before = flushed_memory(&mut conn).map_err(|e| e.to_string())?;
    // Load the script before the first measurement so its cache is not counted.
    if let Some(path) = script {
        crate::resp::load_script(&server.addr(), path).map_err(|e| e.to_string())?;
    }
    let before = before.max(conn.used_memory().map_err(|e| e.to_string())?);
    fill()?;
    let after = conn.used_memory().map_err(|e| e.to_string())?;
    let n = conn.call_int(&["DBSIZE"]).map_err(|e| e.to_string())? as u64;
    if n < keys * 99 / 100 {
        return Err(format!("only {n} of {keys} keys exist after the fill"));
    }
    Ok(Memory {
        before,
        after,
        keys: n,
    })
}

/// Writes keys with a 1 s TTL through `fill`, then polls DBSIZE and
/// used_memory every 100 ms for at most `limit`.
///
/// # Errors
/// A failed call or run.
pub fn reclaim(
    server: &Server,
    fill: &dyn Fn() -> Result<(), String>,
    limit: Duration,
) -> Result<Reclaim, String> {
    let mut conn = server.conn().map_err(|e| e.to_string())?;
    let before = flushed_memory(&mut conn).map_err(|e| e.to_string())?;
    fill()?;
    let start = Instant::now();
    let peak = conn.used_memory().map_err(|e| e.to_string())?;
    let mut out = Reclaim {
        before,
        peak,
        last: peak,
        dbsize_zero_s: None,
        reclaimed_s: None,
    };
    while start.elapsed() < limit {
        let n = conn.call_int(&["DBSIZE"]).map_err(|e| e.to_string())?;
        let used = conn.used_memory().map_err(|e| e.to_string())?;
        let t = start.elapsed().as_secs_f64();
        out.last = used;
        if n == 0 {
            out.dbsize_zero_s.get_or_insert(t);
            if used as f64 <= before as f64 * (1.0 + RECLAIMED_WITHIN) {
                out.reclaimed_s = Some(t);
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(out)
}

/// Reclamation on Redis and on Leasehold.
pub type ReclaimPair = (Result<Reclaim, String>, Result<Reclaim, String>);

/// One memory row's results on both servers.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryResult {
    /// Row label.
    pub name: String,
    /// Calls per key in the fill.
    pub hits: u64,
    /// Redis's measurement.
    pub redis: Result<Memory, String>,
    /// Leasehold's measurement.
    pub leasehold: Result<Memory, String>,
}

fn mem_cell(m: &Result<Memory, String>) -> String {
    match m {
        Ok(m) => format!("{:.1}", m.per_key()),
        Err(e) if e.starts_with("pending") => "pending".into(),
        Err(_) => "failed".into(),
    }
}

/// The memory table in markdown.
pub fn memory_table(rows: &[MemoryResult]) -> String {
    let mut s = String::from(
        "| kind | keys | hits per key | Redis bytes/key | Leasehold bytes/key | Redis / Leasehold | notes |\n|---|---:|---:|---:|---:|---:|---|\n",
    );
    for r in rows {
        let keys = r
            .redis
            .as_ref()
            .or(r.leasehold.as_ref())
            .map(|m| thousands(m.keys as f64))
            .unwrap_or_else(|_| "-".into());
        let ratio = match (&r.redis, &r.leasehold) {
            (Ok(a), Ok(b)) if b.per_key() > 0.0 => format!("{:.1}x", a.per_key() / b.per_key()),
            _ => "-".into(),
        };
        let notes: Vec<String> = [("Redis", &r.redis), ("Leasehold", &r.leasehold)]
            .iter()
            .filter_map(|(l, m)| m.as_ref().err().map(|e| format!("{l}: {e}")))
            .collect();
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.name,
            keys,
            r.hits,
            mem_cell(&r.redis),
            mem_cell(&r.leasehold),
            ratio,
            notes.join("; ").replace('|', "\\|")
        ));
    }
    s
}

/// The sliding window at the limit against Leasehold's cost at scale: its
/// state does not grow with hits, so a limited key among `memory_keys` costs
/// what the 1-hit row measured, while the row at the limit has fewer keys
/// than slots (each key then pays for a slot vector of its own). `None`
/// unless both rows succeeded.
pub fn at_scale_note(rows: &[MemoryResult]) -> Option<String> {
    let window = |at_limit: bool| {
        rows.iter()
            .find(|r| r.name.starts_with("sliding window") && (r.hits > 1) == at_limit)
    };
    let redis = window(true)?.redis.as_ref().ok()?;
    let leasehold = window(false)?.leasehold.as_ref().ok()?;
    Some(format!(
        "Leasehold's SLIDINGWINDOW state is the same size whatever the hits, so a key at the limit \
         among {} keys costs what the 1-hit row shows ({:.1} bytes): against Redis at the limit \
         ({:.1} bytes), **{:.1}x less memory per key at scale**.\n",
        thousands(leasehold.keys as f64),
        leasehold.per_key(),
        redis.per_key(),
        redis.per_key() / leasehold.per_key().max(1.0),
    ))
}

/// The reclamation table in markdown.
pub fn reclaim_table(
    redis: &Result<Reclaim, String>,
    leasehold: &Result<Reclaim, String>,
    limit: Duration,
) -> String {
    let secs = |v: Option<f64>| {
        v.map(|s| format!("{s:.1}"))
            .unwrap_or_else(|| format!("> {}", limit.as_secs()))
    };
    let mib = |b: u64| format!("{:.1}", b as f64 / (1024.0 * 1024.0));
    let mut s = String::from(
        "| server | used_memory before (MiB) | after the writes (MiB) | at the last poll (MiB) | s until DBSIZE 0 | s until DBSIZE 0 and memory within 10% |\n|---|---:|---:|---:|---:|---:|\n",
    );
    for (label, r) in [("Redis", redis), ("Leasehold", leasehold)] {
        match r {
            Ok(r) => s.push_str(&format!(
                "| {label} | {} | {} | {} | {} | {} |\n",
                mib(r.before),
                mib(r.peak),
                mib(r.last),
                secs(r.dbsize_zero_s),
                secs(r.reclaimed_s)
            )),
            Err(e) => s.push_str(&format!(
                "| {label} | - | - | - | - | failed: {} |\n",
                e.replace('|', "\\|")
            )),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_key_and_tables() {
        let redis = Memory {
            before: 1_000_000,
            after: 187_000_000,
            keys: 1_000_000,
        };
        let lh = Memory {
            before: 2_000_000,
            after: 50_000_000,
            keys: 1_000_000,
        };
        assert_eq!(redis.per_key(), 186.0);
        assert_eq!(lh.per_key(), 48.0);
        let t = memory_table(&[MemoryResult {
            name: "token bucket".into(),
            hits: 1,
            redis: Ok(redis),
            leasehold: Ok(lh),
        }]);
        assert!(
            t.contains("| token bucket | 1 000 000 | 1 | 186.0 | 48.0 | 3.9x |  |"),
            "{t}"
        );
        let r = Reclaim {
            before: 1 << 20,
            peak: 100 << 20,
            last: 2 << 20,
            dbsize_zero_s: Some(2.5),
            reclaimed_s: None,
        };
        let t = reclaim_table(&Ok(r), &Err("boom".into()), Duration::from_secs(60));
        assert!(
            t.contains("| Redis | 1.0 | 100.0 | 2.0 | 2.5 | > 60 |"),
            "{t}"
        );
        assert!(
            t.contains("| Leasehold | - | - | - | - | failed: boom |"),
            "{t}"
        );
    }

    #[test]
    fn the_limit_row_is_set_against_leasehold_at_scale() {
        let m = |after: u64, keys: u64| Memory {
            before: 0,
            after,
            keys,
        };
        let row = |name: &str, hits, redis, leasehold| MemoryResult {
            name: name.into(),
            hits,
            redis: Ok(redis),
            leasehold: Ok(leasehold),
        };
        let rows = [
            row(
                "sliding window, 1 hit",
                1,
                m(160_000_000, 1_000_000),
                m(54_000_000, 1_000_000),
            ),
            row(
                "sliding window, at the limit",
                100,
                m(21_600_000, 10_000),
                m(800_000, 10_000),
            ),
        ];
        let note = at_scale_note(&rows).unwrap();
        assert!(note.contains("among 1 000 000 keys"), "{note}");
        assert!(note.contains("(54.0 bytes)"), "{note}");
        assert!(note.contains("(2160.0 bytes)"), "{note}");
        assert!(note.contains("**40.0x less"), "{note}");
        assert_eq!(at_scale_note(&rows[..1]), None);
    }
}
