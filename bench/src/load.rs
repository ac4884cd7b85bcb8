//! The load generator: one tokio task per connection, each writing a whole
//! pipeline batch at once and reading its replies back.
//!
//! Latency of a request is measured from the write of its batch to the read
//! of its reply (as redis-benchmark does), so at `-P 16` it includes waiting
//! behind the 15 others of its batch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use hdrhistogram::Histogram;
use leasehold_protocol::{decode_reply, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::keys::{Distribution, KeyGen};
use crate::template::Template;

/// When a run stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// After this many requests in total over all connections.
    Requests(u64),
    /// After this much time; batches in flight finish.
    Duration(Duration),
}

/// What to send, where, and how hard.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// `host:port` of the server under test.
    pub addr: String,
    /// Connections, one task each.
    pub connections: usize,
    /// Requests written per batch on a connection.
    pub pipeline: usize,
    /// When to stop.
    pub stop: Stop,
    /// Key indexes are drawn from `[0, keyspace)`.
    pub keyspace: u64,
    /// How key indexes are drawn.
    pub distribution: Distribution,
    /// The request to send.
    pub template: Arc<Template>,
    /// Seed of the key generators (connection `i` uses `seed + i`).
    pub seed: u64,
}

/// What a run measured.
#[derive(Debug)]
pub struct Outcome {
    /// Latency of every request, in nanoseconds.
    pub histogram: Histogram<u64>,
    /// Replies received.
    pub requests: u64,
    /// Error replies.
    pub errors: u64,
    /// Text of the first error reply.
    pub first_error: Option<String>,
    /// From the first write to the last reply.
    pub elapsed: Duration,
}

/// Counts requests handed out, for [`Stop::Requests`].
struct Budget {
    stop: Stop,
    deadline: Instant,
    issued: AtomicU64,
}

impl Budget {
    /// How many of `want` requests may still be sent (0: stop).
    fn claim(&self, want: u64) -> u64 {
        match self.stop {
            Stop::Requests(total) => {
                let before = self.issued.fetch_add(want, Ordering::Relaxed);
                total.saturating_sub(before).min(want)
            }
            Stop::Duration(_) => {
                if Instant::now() < self.deadline {
                    want
                } else {
                    0
                }
            }
        }
    }
}

/// Runs the load; `done` counts replies as they arrive (for a progress bar).
///
/// All connections are opened before the clock starts.
///
/// # Errors
/// A failed connect, a broken connection or an undecodable reply ends the run.
pub async fn run(spec: &LoadSpec, done: Arc<AtomicU64>) -> std::io::Result<Outcome> {
    let mut streams = Vec::with_capacity(spec.connections);
    for _ in 0..spec.connections {
        let s = TcpStream::connect(&spec.addr).await?;
        s.set_nodelay(true)?;
        streams.push(s);
    }
    let start = Instant::now();
    let budget = Arc::new(Budget {
        stop: spec.stop,
        deadline: match spec.stop {
            Stop::Duration(d) => start + d,
            Stop::Requests(_) => start,
        },
        issued: AtomicU64::new(0),
    });
    let sequential = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(streams.len());
    for (i, stream) in streams.into_iter().enumerate() {
        let keys = KeyGen::new(
            spec.distribution,
            spec.keyspace,
            spec.seed.wrapping_add(i as u64),
            sequential.clone(),
        );
        let conn = Connection {
            stream,
            keys,
            template: spec.template.clone(),
            pipeline: spec.pipeline as u64,
        };
        tasks.push(tokio::spawn(conn.drive(budget.clone(), done.clone())));
    }
    let mut total = new_histogram();
    let (mut requests, mut errors, mut first_error) = (0, 0, None);
    for t in tasks {
        let c = t.await.map_err(std::io::Error::other)??;
        total
            .add(&c.histogram)
            .expect("histograms have the same bounds");
        requests += c.requests;
        errors += c.errors;
        first_error = first_error.or(c.first_error);
    }
    Ok(Outcome {
        histogram: total,
        requests,
        errors,
        first_error,
        elapsed: start.elapsed(),
    })
}

/// A histogram of 1 ns .. 60 s with 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

struct Connection {
    stream: TcpStream,
    keys: KeyGen,
    template: Arc<Template>,
    pipeline: u64,
}

impl Connection {
    async fn drive(
        mut self,
        budget: Arc<Budget>,
        done: Arc<AtomicU64>,
    ) -> std::io::Result<Outcome> {
        let mut hist = new_histogram();
        let mut out = BytesMut::with_capacity(4096);
        let mut inbuf = BytesMut::with_capacity(64 * 1024);
        let (mut requests, mut errors, mut first_error) = (0u64, 0u64, None);
        let start = Instant::now();
        loop {
            let n = budget.claim(self.pipeline);
            if n == 0 {
                break;
            }
            out.clear();
            for _ in 0..n {
                self.template.write(self.keys.next_key(), &mut out);
            }
            let sent = Instant::now();
            self.stream.write_all(&out).await?;
            let mut got = 0;
            while got < n {
                while got < n {
                    let Some(reply) = decode_reply(&mut inbuf)
                        .map_err(|e| crate::resp::invalid(e.to_string()))?
                    else {
                        break;
                    };
                    got += 1;
                    let ns = sent.elapsed().as_nanos().clamp(1, 60_000_000_000) as u64;
                    hist.record(ns).expect("clamped into the histogram's range");
                    if let Reply::Error(e) = reply {
                        errors += 1;
                        first_error.get_or_insert_with(|| e.into_owned());
                    }
                }
                if got < n {
                    inbuf.reserve(16 * 1024);
                    if self.stream.read_buf(&mut inbuf).await? == 0 {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "the server closed the connection",
                        ));
                    }
                }
            }
            requests += n;
            done.fetch_add(n, Ordering::Relaxed);
        }
        Ok(Outcome {
            histogram: hist,
            requests,
            errors,
            first_error,
            elapsed: start.elapsed(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_budget_is_exact() {
        let b = Budget {
            stop: Stop::Requests(10),
            deadline: Instant::now(),
            issued: AtomicU64::new(0),
        };
        assert_eq!(
            [b.claim(4), b.claim(4), b.claim(4), b.claim(4)],
            [4, 4, 2, 0]
        );
    }

    #[test]
    fn duration_budget_stops_at_the_deadline() {
        let b = Budget {
            stop: Stop::Duration(Duration::ZERO),
            deadline: Instant::now(),
            issued: AtomicU64::new(0),
        };
        assert_eq!(b.claim(16), 0);
        let later = Instant::now() + Duration::from_secs(60);
        let b = Budget {
            stop: Stop::Duration(Duration::from_secs(60)),
            deadline: later,
            issued: AtomicU64::new(0),
        };
        assert_eq!(b.claim(16), 16);
    }
}
