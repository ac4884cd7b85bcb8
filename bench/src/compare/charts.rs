//! Which tables of the page become which chart: the first benchmark's
//! requests per second (Redis, Leasehold t2, Leasehold t1), the throughput
//! rows' ops/s and p99 (Redis against Leasehold), and the lease manager's
//! accuracy run as admitted against allowed over time.

use std::path::Path;

use super::chart::{self, Bars, Group, Lines};
use super::first::{self, Section};
use super::lease::{self, LeaseRun};
use super::table::{RowResult, SideResult};

/// The file names (as the page links them) of the charts that were
/// written; None where there was nothing to draw or drawing failed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Drawn {
    /// The first benchmark's requests/s.
    pub first: Option<String>,
    /// The throughput rows' ops/s.
    pub throughput: Option<String>,
    /// The throughput rows' p99 latency.
    pub latency: Option<String>,
    /// The lease manager's admitted against allowed.
    pub accuracy: Option<String>,
}

/// The first benchmark's median requests/s, a group per (test, -P).
pub fn first_bars(s: &Section) -> Option<Bars> {
    let groups: Vec<Group> = s
        .rows
        .iter()
        .map(|r| Group {
            label: format!("{} -P {}", r.test, r.pipeline),
            values: r.cells.iter().map(first::Cell::median_rps).collect(),
        })
        .collect();
    has_values(&groups).then(|| Bars {
        title: "redis-benchmark: requests per second (median of the rounds)".into(),
        unit: "requests/s".into(),
        series: s.long_labels().to_vec(),
        groups,
    })
}

/// The throughput rows, measured by `value` (median ops/s or p99).
fn row_bars(
    rows: &[RowResult],
    title: &str,
    unit: &str,
    value: fn(&SideResult) -> Option<f64>,
) -> Option<Bars> {
    let groups: Vec<Group> = rows
        .iter()
        .map(|r| Group {
            label: format!(
                "{} -P {} {}",
                r.workload.name, r.workload.pipeline, r.workload.distribution
            ),
            values: vec![value(&r.redis), value(&r.leasehold)],
        })
        .collect();
    has_values(&groups).then(|| Bars {
        title: title.into(),
        unit: unit.into(),
        series: vec!["Redis".into(), "Leasehold".into()],
        groups,
    })
}

/// The throughput rows' median ops/s.
pub fn throughput_bars(rows: &[RowResult]) -> Option<Bars> {
    row_bars(
        rows,
        "Throughput: operations per second (median of the rounds)",
        "ops/s",
        SideResult::median_ops,
    )
}

/// The throughput rows' median p99 latency.
pub fn latency_bars(rows: &[RowResult]) -> Option<Bars> {
    row_bars(
        rows,
        "Latency: p99 in ms (median of the rounds; lower is better)",
        "p99 ms",
        SideResult::median_p99,
    )
}

/// The accuracy run's admitted and allowed totals over time.
pub fn accuracy_lines(runs: &[LeaseRun]) -> Option<Lines> {
    let samples = lease::samples(runs);
    (!samples.is_empty()).then(|| Lines {
        title: "8 lease managers on one key: admitted against allowed (burst + rate x t)".into(),
        x_label: "time since the start (s)".into(),
        y_label: "requests, cumulative".into(),
        series: vec![
            (
                "allowed".into(),
                samples.iter().map(|&(t, _, b)| (t, b)).collect(),
            ),
            (
                "admitted".into(),
                samples.iter().map(|&(t, a, _)| (t, a)).collect(),
            ),
        ],
    })
}

fn has_values(groups: &[Group]) -> bool {
    groups.iter().any(|g| g.values.iter().any(Option::is_some))
}

/// Draws and writes `svg` as chart `what` beside `out`; its link, or None
/// (with the reason on stderr).
fn write(out: &Path, what: &str, svg: Option<Result<String, String>>) -> Option<String> {
    let svg = match svg? {
        Ok(svg) => svg,
        Err(e) => {
            eprintln!("chart {what}: {e}");
            return None;
        }
    };
    let path = chart::path(out, what);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::create_dir_all(dir);
    }
    match std::fs::write(&path, svg) {
        Ok(()) => Some(chart::link(out, what)),
        Err(e) => {
            eprintln!("chart {what}: cannot write {}: {e}", path.display());
            None
        }
    }
}

/// Draws every chart the results allow and writes them beside `out`.
pub fn write_all(
    out: &Path,
    first: Option<&Section>,
    rows: &[RowResult],
    lease: &[LeaseRun],
) -> Drawn {
    Drawn {
        first: write(
            out,
            "first",
            first.and_then(first_bars).map(|b| chart::bars(&b)),
        ),
        throughput: write(
            out,
            "throughput",
            throughput_bars(rows).map(|b| chart::bars(&b)),
        ),
        latency: write(out, "latency", latency_bars(rows).map(|b| chart::bars(&b))),
        accuracy: write(
            out,
            "accuracy",
            accuracy_lines(lease).map(|l| chart::lines(&l)),
        ),
    }
}

/// The markdown image line for a drawn chart, or nothing.
pub fn image(alt: &str, link: Option<&String>) -> String {
    link.map(|l| format!("![{alt}]({l})\n\n"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::first::tests::section_with;

    #[test]
    fn the_first_benchmark_chart_has_a_group_per_test_and_depth() {
        let s = section_with([100.0, 150.0, 120.0], [1.0, 0.5, 0.7]);
        let b = first_bars(&s).unwrap();
        assert_eq!(b.series, ["Redis", "Leasehold t2", "Leasehold t1"]);
        assert_eq!(b.groups.len(), s.rows.len());
        assert_eq!(b.groups[0].values, [Some(100.0), Some(150.0), Some(120.0)]);
        assert!(b.groups[0].label.contains("-P "), "{}", b.groups[0].label);
    }

    #[test]
    fn nothing_to_draw_draws_nothing() {
        assert_eq!(throughput_bars(&[]), None);
        assert_eq!(accuracy_lines(&[]), None);
        let dir = std::env::temp_dir().join(format!("lh-charts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("page.md");
        assert_eq!(write_all(&out, None, &[], &[]), Drawn::default());
        assert!(!chart::path(&out, "throughput").exists());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_accuracy_chart_is_written_beside_the_page() {
        let runs = [LeaseRun {
            name: "accuracy",
            command: "cargo test".into(),
            output: Ok("accuracy-sample: t_ms 100 admitted 210 allowed 220\n\
                 accuracy-sample: t_ms 200 admitted 228 allowed 240\n\
                 accuracy: admitted 796"
                .into()),
        }];
        let dir = std::env::temp_dir().join(format!("lh-accuracy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("page.md");
        let drawn = write_all(&out, None, &[], &runs);
        assert_eq!(drawn.accuracy.as_deref(), Some("page-accuracy.svg"));
        let svg = std::fs::read_to_string(dir.join("page-accuracy.svg")).unwrap();
        assert!(
            svg.contains("admitted") && svg.contains("<polyline"),
            "{svg}"
        );
        assert_eq!(
            image("accuracy", drawn.accuracy.as_ref()),
            "![accuracy](page-accuracy.svg)\n\n"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
