//! The result of one load run: throughput and latency percentiles, as text
//! and as JSON (the compare mode reads the JSON back).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Latency percentiles of one run, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest observed.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

impl Latency {
    /// Reads the percentiles from a histogram of nanoseconds.
    pub fn from_histogram(h: &Histogram<u64>) -> Latency {
        let ms = |ns: u64| ns as f64 / 1e6;
        Latency {
            p50: ms(h.value_at_quantile(0.50)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
            mean: h.mean() / 1e6,
        }
    }
}

/// One run's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The command template as given.
    pub command: String,
    /// Connections used.
    pub connections: usize,
    /// Requests in flight per connection.
    pub pipeline: usize,
    /// Key indexes drawn from `[0, keyspace)`.
    pub keyspace: u64,
    /// Distribution of key indexes (`uniform`, `zipf:0.99`, `sequential`).
    pub distribution: String,
    /// Replies received.
    pub requests: u64,
    /// Error replies among them.
    pub errors: u64,
    /// The text of the first error reply, if any.
    pub first_error: Option<String>,
    /// Wall time from the first request sent to the last reply read, in seconds.
    pub seconds: f64,
    /// `requests / seconds`.
    pub ops_per_sec: f64,
    /// Per-request latency from the write of its pipeline batch to the read of
    /// its reply.
    pub latency_ms: Latency,
}

impl Report {
    /// A human-readable summary, a few lines long.
    pub fn to_text(&self) -> String {
        let l = &self.latency_ms;
        let mut s = format!(
            "{}\n  {} connections, pipeline {}, {} keys ({})\n  {} requests in {:.2} s, {} errors\n  throughput: {:.0} requests/s\n  latency ms: p50 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  mean {:.3}\n",
            self.command,
            self.connections,
            self.pipeline,
            self.keyspace,
            self.distribution,
            self.requests,
            self.seconds,
            self.errors,
            self.ops_per_sec,
            l.p50,
            l.p99,
            l.p999,
            l.max,
            l.mean,
        );
        if let Some(e) = &self.first_error {
            s.push_str(&format!("  first error: {e}\n"));
        }
        s
    }

    /// The report as one line of JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Report {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        for ns in 1..=1000u64 {
            h.record(ns * 1000).unwrap(); // 1 us .. 1 ms
        }
        Report {
            command: "GET k:__key__".into(),
            connections: 50,
            pipeline: 16,
            keyspace: 100_000,
            distribution: "uniform".into(),
            requests: 1000,
            errors: 2,
            first_error: Some("ERR boom".into()),
            seconds: 0.5,
            ops_per_sec: 2000.0,
            latency_ms: Latency::from_histogram(&h),
        }
    }

    #[test]
    fn percentiles_come_from_the_histogram_in_ms() {
        let l = sample().latency_ms;
        // hdrhistogram keeps 3 significant digits.
        assert!((l.p50 - 0.500).abs() < 0.001, "{l:?}");
        assert!((l.p99 - 0.990).abs() < 0.001, "{l:?}");
        assert!((l.p999 - 0.999).abs() < 0.001, "{l:?}");
        assert!((l.max - 1.000).abs() < 0.001, "{l:?}");
    }

    #[test]
    fn text_names_every_number() {
        let t = sample().to_text();
        assert!(t.contains("1000 requests in 0.50 s, 2 errors"), "{t}");
        assert!(t.contains("throughput: 2000 requests/s"), "{t}");
        assert!(t.contains("p50 0.500  p99 0.990  p99.9 0.999"), "{t}");
        assert!(t.contains("first error: ERR boom"), "{t}");
    }

    #[test]
    fn json_round_trips() {
        let r = sample();
        let j = r.to_json();
        assert!(j.contains("\"ops_per_sec\":2000.0"), "{j}");
        assert_eq!(serde_json::from_str::<Report>(&j).unwrap(), r);
    }
}
