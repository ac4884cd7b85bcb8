//! Running Redis's own `redis-benchmark` and reading its `--csv` output,
//! shared by the cross-check and the first-benchmark section.

use std::process::Command;

/// One test's line of `redis-benchmark --csv` (7.0 prints
/// `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",
/// "p95_latency_ms","p99_latency_ms","max_latency_ms"`).
#[derive(Debug, Clone, PartialEq)]
pub struct CsvRow {
    /// Test name as redis-benchmark prints it (`SET`, `MSET (10 keys)`).
    pub test: String,
    /// Requests per second.
    pub rps: f64,
    /// 99th percentile latency in ms; `None` when the header has no
    /// `p99_latency_ms` column.
    pub p99_ms: Option<f64>,
}

/// Parses `redis-benchmark --csv` output: every line after the header, the
/// columns found by the header's names. Lines that do not parse are skipped.
pub fn parse_csv(text: &str) -> Vec<CsvRow> {
    let cells = |l: &str| -> Vec<String> {
        l.split("\",\"")
            .map(|c| c.trim().trim_matches('"').to_string())
            .collect()
    };
    let mut lines = text.lines().skip_while(|l| !l.starts_with("\"test\""));
    let Some(header) = lines.next().map(cells) else {
        return Vec::new();
    };
    let p99 = header.iter().position(|h| h == "p99_latency_ms");
    lines
        .filter_map(|l| {
            let c = cells(l);
            Some(CsvRow {
                test: c.first()?.clone(),
                rps: c.get(1)?.parse().ok()?,
                p99_ms: p99.and_then(|i| c.get(i)?.parse().ok()),
            })
        })
        .collect()
}

/// What one `redis-benchmark` invocation gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The tests it finished (all of them when `error` is `None`).
    pub rows: Vec<CsvRow>,
    /// Why it stopped early: redis-benchmark exits non-zero at the first
    /// error reply, after printing the tests before it.
    pub error: Option<String>,
}

impl Outcome {
    /// A progress line: each test's rps, then the error if it stopped.
    pub fn summary(&self) -> String {
        let got: Vec<String> = self
            .rows
            .iter()
            .map(|r| format!("{} {:.0}", r.test, r.rps))
            .collect();
        format!(
            "{}{}",
            got.join(", "),
            self.error
                .as_deref()
                .map(|e| format!("; {e}"))
                .unwrap_or_default()
        )
    }
}

/// Runs `redis-benchmark args` and reads its `--csv` output.
pub fn run(args: &[String]) -> Outcome {
    match Command::new("redis-benchmark").args(args).output() {
        Err(e) => Outcome {
            rows: Vec::new(),
            error: Some(format!("could not run redis-benchmark: {e}")),
        },
        Ok(o) => {
            let rows = parse_csv(&String::from_utf8_lossy(&o.stdout));
            let error = (!o.status.success()).then(|| {
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .rfind(|l| !l.trim().is_empty())
                    .map(|l| l.trim().to_string())
                    .unwrap_or_else(|| format!("redis-benchmark: {}", o.status))
            });
            Outcome { rows, error }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_seven_0_csv_lines() {
        // Captured from redis-benchmark 7.0.15 against redis-server 7.0.15.
        let csv = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                   \"PING_INLINE\",\"73800.73\",\"0.431\",\"0.088\",\"0.399\",\"0.647\",\"0.887\",\"5.679\"\n\
                   \"MSET (10 keys)\",\"38520.80\",\"1.142\",\"0.208\",\"1.047\",\"1.983\",\"3.727\",\"6.079\"\n";
        assert_eq!(
            parse_csv(csv),
            [
                CsvRow {
                    test: "PING_INLINE".into(),
                    rps: 73800.73,
                    p99_ms: Some(0.887)
                },
                CsvRow {
                    test: "MSET (10 keys)".into(),
                    rps: 38520.80,
                    p99_ms: Some(3.727)
                },
            ]
        );
        assert_eq!(parse_csv("Error from server: ERR x\n"), []);
    }
}
