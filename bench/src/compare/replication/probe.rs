//! Probes that run beside a load or a sync on a thread of their own: the
//! replica lag probe and the primary's latency probe.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use leasehold_protocol::Reply;

use crate::resp::Conn;
use crate::template::Template;

/// The key the lag probe writes.
pub const LAG_KEY: &str = "lag:probe";
/// Pause between two lag samples (from one SET to the next).
pub const LAG_EVERY: Duration = Duration::from_millis(15);
/// Pause between two GETs on the replica while a lag sample waits.
pub const LAG_POLL: Duration = Duration::from_micros(200);
/// A lag sample still unseen after this long counts as missed.
pub const LAG_GIVE_UP: Duration = Duration::from_secs(5);
/// Pause between two GETs of the latency probe.
pub const LATENCY_PAUSE: Duration = Duration::from_millis(1);

/// Samples in milliseconds and the probes that gave none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Samples {
    /// One value per successful probe, in ms.
    pub ms: Vec<f64>,
    /// Probes that failed or timed out.
    pub missed: u64,
    /// The first failure, if any.
    pub first_failure: Option<String>,
}

impl Samples {
    /// Adds `other`'s samples and misses to these.
    pub fn merge(&mut self, other: Samples) {
        self.ms.extend(other.ms);
        self.missed += other.missed;
        if self.first_failure.is_none() {
            self.first_failure = other.first_failure;
        }
    }

    /// The `q` quantile (0..=1, nearest rank) of the samples.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.ms.is_empty() {
            return None;
        }
        let mut s = self.ms.clone();
        s.sort_by(f64::total_cmp);
        let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
        Some(s[rank - 1])
    }

    /// The largest sample.
    pub fn max(&self) -> Option<f64> {
        self.quantile(1.0)
    }

    fn fail(&mut self, why: String) {
        self.missed += 1;
        if self.first_failure.is_none() {
            self.first_failure = Some(why);
        }
    }
}

/// A probe running on its own thread until [`Probe::finish`].
#[derive(Debug)]
pub struct Probe {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Samples>,
}

impl Probe {
    fn spawn(body: impl FnOnce(&AtomicBool) -> Samples + Send + 'static) -> Probe {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || body(&flag));
        Probe { stop, handle }
    }

    /// Stops the probe and returns its samples.
    pub fn finish(self) -> Samples {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_else(|_| Samples {
            first_failure: Some("the probe thread panicked".into()),
            ..Samples::default()
        })
    }

    /// Replica lag: every [`LAG_EVERY`], `SET lag:probe <n>` on `primary`;
    /// from its reply on, `GET lag:probe` on `replica` every [`LAG_POLL`]
    /// until it answers `n`. One sample is the time from the primary's reply
    /// to the replica's.
    pub fn lag(primary: String, replica: String) -> Probe {
        Probe::spawn(move |stop| {
            let mut out = Samples::default();
            let (mut p, mut r) = match (Conn::connect(&primary), Conn::connect(&replica)) {
                (Ok(p), Ok(r)) => (p, r),
                (Err(e), _) | (_, Err(e)) => {
                    out.fail(format!("connect: {e}"));
                    return out;
                }
            };
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                seq += 1;
                let want = seq.to_string();
                match lag_sample(&mut p, &mut r, &want) {
                    Ok(ms) => out.ms.push(ms),
                    Err(e) => out.fail(e),
                }
                if let Some(rest) = LAG_EVERY.checked_sub(started.elapsed()) {
                    std::thread::sleep(rest);
                }
            }
            out
        })
    }

    /// Primary latency: `command` (a template, such as `GET k:__key__`) on
    /// `addr` for keys drawn in turn from `0..keys`, one request at a time
    /// with [`LATENCY_PAUSE`] between them; one sample is one round trip.
    ///
    /// # Errors
    /// A template that does not parse.
    pub fn latency(addr: String, command: &str, keys: u64) -> Result<Probe, String> {
        let template = Template::parse(command, None).map_err(|e| e.to_string())?;
        Ok(Probe::spawn(move |stop| {
            let mut out = Samples::default();
            let mut conn = match Conn::connect(&addr) {
                Ok(c) => c,
                Err(e) => {
                    out.fail(format!("connect: {e}"));
                    return out;
                }
            };
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // A stride coprime with most key counts spreads the reads.
                n = (n + 7919) % keys.max(1);
                let args = template.args(n);
                let t = Instant::now();
                match conn.call(&args) {
                    Ok(Reply::Error(e)) => out.fail(e.to_string()),
                    Ok(_) => out.ms.push(t.elapsed().as_secs_f64() * 1e3),
                    Err(e) => {
                        out.fail(e.to_string());
                        match Conn::connect(&addr) {
                            Ok(c) => conn = c,
                            Err(_) => std::thread::sleep(Duration::from_millis(10)),
                        }
                    }
                }
                std::thread::sleep(LATENCY_PAUSE);
            }
            out
        }))
    }
}

/// One lag sample: SET on the primary, then poll the replica.
fn lag_sample(primary: &mut Conn, replica: &mut Conn, want: &str) -> Result<f64, String> {
    match primary.call(&["SET", LAG_KEY, want]) {
        Ok(Reply::Simple(_)) => {}
        Ok(other) => return Err(format!("SET on the primary: {other:?}")),
        Err(e) => return Err(format!("SET on the primary: {e}")),
    }
    let acked = Instant::now();
    loop {
        match replica.call(&["GET", LAG_KEY]) {
            Ok(Reply::Bulk(b)) if b.as_ref() == want.as_bytes() => {
                return Ok(acked.elapsed().as_secs_f64() * 1e3)
            }
            Ok(_) => {}
            Err(e) => return Err(format!("GET on the replica: {e}")),
        }
        if acked.elapsed() > LAG_GIVE_UP {
            return Err(format!(
                "not on the replica after {} s",
                LAG_GIVE_UP.as_secs()
            ));
        }
        std::thread::sleep(LAG_POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let s = Samples {
            ms: (1..=100).rev().map(f64::from).collect(),
            ..Samples::default()
        };
        assert_eq!(s.quantile(0.5), Some(50.0));
        assert_eq!(s.quantile(0.99), Some(99.0));
        assert_eq!(s.max(), Some(100.0));
        assert_eq!(Samples::default().quantile(0.5), None);
        let mut a = Samples::default();
        a.fail("x".into());
        a.merge(s);
        assert_eq!((a.missed, a.ms.len()), (1, 100));
        assert_eq!(a.first_failure.as_deref(), Some("x"));
    }
}
