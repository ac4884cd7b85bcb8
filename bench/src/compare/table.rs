//! Results of the comparison and their rendering as markdown tables.

use super::workloads::Workload;
use crate::report::Report;

/// A row whose runs spread more than this fraction of their median is noisy.
pub const NOISY_SPREAD: f64 = 0.20;

/// What happened on one server for one row.
#[derive(Debug, Clone, PartialEq)]
pub enum SideResult {
    /// The reports of each round.
    Runs(Vec<Report>),
    /// The command does not exist on this server yet.
    Pending(String),
    /// The runs could not be made.
    Failed(String),
}

impl SideResult {
    fn runs(&self) -> &[Report] {
        match self {
            SideResult::Runs(r) => r,
            _ => &[],
        }
    }

    /// Median throughput over the rounds, in requests/s.
    pub fn median_ops(&self) -> Option<f64> {
        median(
            &self
                .runs()
                .iter()
                .map(|r| r.ops_per_sec)
                .collect::<Vec<_>>(),
        )
    }

    /// Median p99 latency over the rounds, in ms.
    pub fn median_p99(&self) -> Option<f64> {
        median(
            &self
                .runs()
                .iter()
                .map(|r| r.latency_ms.p99)
                .collect::<Vec<_>>(),
        )
    }

    /// (max - min) / median of the throughputs.
    pub fn spread(&self) -> Option<f64> {
        spread(
            &self
                .runs()
                .iter()
                .map(|r| r.ops_per_sec)
                .collect::<Vec<_>>(),
        )
    }

    fn errors(&self) -> (u64, Option<&str>) {
        let runs = self.runs();
        (
            runs.iter().map(|r| r.errors).sum(),
            runs.iter().find_map(|r| r.first_error.as_deref()),
        )
    }
}

/// One throughput row's results.
#[derive(Debug, Clone, PartialEq)]
pub struct RowResult {
    /// What was run.
    pub workload: Workload,
    /// Redis's side.
    pub redis: SideResult,
    /// Leasehold's side.
    pub leasehold: SideResult,
}

/// The median of `v` (mean of the middle two for an even count).
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// `(max - min) / median` of `v`, the measure of noise used here.
pub fn spread(v: &[f64]) -> Option<f64> {
    let m = median(v)?;
    let max = v.iter().copied().fold(f64::MIN, f64::max);
    let min = v.iter().copied().fold(f64::MAX, f64::min);
    (m > 0.0).then(|| (max - min) / m)
}

/// "noisy: {label} runs spread N%" when `spread` (see [`spread`]) is over
/// [`NOISY_SPREAD`].
pub fn noisy_note(label: &str, spread: Option<f64>) -> Option<String> {
    spread
        .filter(|&sp| sp > NOISY_SPREAD)
        .map(|sp| format!("noisy: {label} runs spread {:.0}%", sp * 100.0))
}

/// An integer with thousands separators (`1 234 567`).
pub fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

fn ops_cell(s: &SideResult) -> String {
    match s {
        SideResult::Runs(_) => s.median_ops().map(thousands).unwrap_or_else(|| "-".into()),
        SideResult::Pending(_) => "pending".into(),
        SideResult::Failed(_) => "failed".into(),
    }
}

fn p99_cell(s: &SideResult) -> String {
    s.median_p99()
        .map(|p| format!("{p:.3}"))
        .unwrap_or_else(|| "-".into())
}

/// The notes of a row: noise, errors, pending and failure reasons.
fn notes(row: &RowResult) -> String {
    let mut notes = Vec::new();
    for (label, side) in [("Redis", &row.redis), ("Leasehold", &row.leasehold)] {
        notes.extend(noisy_note(label, side.spread()));
        if let (n @ 1.., first) = side.errors() {
            notes.push(format!(
                "{label}: {n} error replies ({})",
                first.unwrap_or("?")
            ));
        }
        match side {
            SideResult::Pending(why) => notes.push(format!("{label} pending: {why}")),
            SideResult::Failed(why) => notes.push(format!("{label} failed: {why}")),
            SideResult::Runs(_) => {}
        }
    }
    notes.join("; ").replace('|', "\\|")
}

/// The throughput table in markdown.
pub fn throughput_table(rows: &[RowResult]) -> String {
    let mut s = String::from(
        "| workload | -P | keys | Redis ops/s | Leasehold ops/s | Leasehold / Redis | Redis p99 ms | Leasehold p99 ms | notes |\n\
         |---|---:|---|---:|---:|---:|---:|---:|---|\n",
    );
    for row in rows {
        let ratio = match (row.redis.median_ops(), row.leasehold.median_ops()) {
            (Some(r), Some(l)) if r > 0.0 => format!("{:.2}x", l / r),
            _ => "-".into(),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            row.workload.name,
            row.workload.pipeline,
            row.workload.distribution,
            ops_cell(&row.redis),
            ops_cell(&row.leasehold),
            ratio,
            p99_cell(&row.redis),
            p99_cell(&row.leasehold),
            notes(row),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::workloads::all;
    use crate::report::Latency;

    fn report(ops: f64, errors: u64) -> Report {
        Report {
            command: "X".into(),
            connections: 50,
            pipeline: 1,
            keyspace: 100_000,
            distribution: "uniform".into(),
            requests: ops as u64,
            errors,
            first_error: (errors > 0).then(|| "ERR x".into()),
            seconds: 1.0,
            ops_per_sec: ops,
            latency_ms: Latency {
                p50: 0.1,
                p99: 0.5,
                p999: 1.0,
                max: 2.0,
                mean: 0.2,
            },
        }
    }

    #[test]
    fn median_and_spread() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(spread(&[90.0, 100.0, 110.0]), Some(0.2));
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1234567.0), "1 234 567");
    }

    #[test]
    fn table_rows_show_medians_ratio_and_notes() {
        let w = all().remove(0);
        let rows = [
            RowResult {
                workload: w.clone(),
                redis: SideResult::Runs(vec![
                    report(100_000.0, 0),
                    report(80_000.0, 0),
                    report(130_000.0, 0),
                ]),
                leasehold: SideResult::Runs(vec![
                    report(200_000.0, 1),
                    report(210_000.0, 0),
                    report(205_000.0, 0),
                ]),
            },
            RowResult {
                workload: w,
                redis: SideResult::Runs(vec![report(1000.0, 0)]),
                leasehold: SideResult::Pending("ERR unknown command".into()),
            },
        ];
        let t = throughput_table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert_eq!(
            lines[2],
            "| PING | 1 | uniform | 100 000 | 205 000 | 2.05x | 0.500 | 0.500 | noisy: Redis runs spread 50%; Leasehold: 1 error replies (ERR x) |"
        );
        assert_eq!(lines[3], "| PING | 1 | uniform | 1 000 | pending | - | 0.500 | - | Leasehold pending: ERR unknown command |");
    }
}
