//! The targets of "the first benchmark a user runs" against Redis and
//! Leasehold `--threads 1`, and their check on the section's medians.

use super::{Section, LH, LH1, REDIS, TESTS};

/// What a target asks of a row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Goal {
    /// Leasehold's median rps at least this many times Redis's.
    OverRedis(f64),
    /// Leasehold's median rps at least this many times `--threads 1`'s.
    OverSingleThread(f64),
    /// Leasehold's median p99 no higher than Redis's.
    P99AtMostRedis,
}

/// A goal for some tests at one -P.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target {
    /// Pipeline depth.
    pub pipeline: usize,
    /// The tests it applies to.
    pub tests: &'static [&'static str],
    /// What it asks.
    pub goal: Goal,
}

/// The targets of the section.
pub const TARGETS: [Target; 4] = [
    Target {
        pipeline: 1,
        tests: &TESTS,
        goal: Goal::OverRedis(1.1),
    },
    Target {
        pipeline: 1,
        tests: &TESTS,
        goal: Goal::OverSingleThread(1.0),
    },
    Target {
        pipeline: 16,
        tests: &["SET", "GET", "INCR"],
        goal: Goal::OverRedis(1.3),
    },
    Target {
        pipeline: 1,
        tests: &TESTS,
        goal: Goal::P99AtMostRedis,
    },
];

/// One target on one row.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The goal in words (`t2 / Redis >= 1.10x`).
    pub goal: String,
    /// redis-benchmark's test name.
    pub test: &'static str,
    /// Pipeline depth.
    pub pipeline: usize,
    /// The measured number (`1.234x`, `0.887 ms vs 0.950 ms`), or "-".
    pub measured: String,
    /// Whether the number meets the goal (false without a number).
    pub met: bool,
}

/// Every target on every row it names.
pub fn check(section: &Section) -> Vec<Verdict> {
    let [_, lh, lh1] = section.labels();
    let mut out = Vec::new();
    for t in TARGETS {
        for row in section.rows.iter().filter(|r| r.pipeline == t.pipeline) {
            if !t.tests.contains(&row.test) {
                continue;
            }
            let ratio = |ratio: Option<f64>, min: f64| match ratio {
                Some(r) => (format!("{r:.3}x"), r >= min),
                None => ("-".to_string(), false),
            };
            let (goal, (measured, met)) = match t.goal {
                Goal::OverRedis(min) => (
                    format!("{lh} / Redis >= {min:.2}x"),
                    ratio(row.ratio(LH, REDIS), min),
                ),
                Goal::OverSingleThread(min) => (
                    format!("{lh} / {lh1} >= {min:.2}x"),
                    ratio(row.ratio(LH, LH1), min),
                ),
                Goal::P99AtMostRedis => (
                    format!("{lh} p99 <= Redis p99"),
                    match (row.cells[LH].median_p99(), row.cells[REDIS].median_p99()) {
                        (Some(l), Some(r)) => (format!("{l:.3} ms vs {r:.3} ms"), l <= r),
                        _ => ("-".to_string(), false),
                    },
                ),
            };
            out.push(Verdict {
                goal,
                test: row.test,
                pipeline: row.pipeline,
                measured,
                met,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tables;
    use super::super::tests::section_with;
    use super::*;

    #[test]
    fn the_check_flags_a_1_05x_row() {
        let v = check(&section_with(
            [100_000.0, 105_000.0, 90_000.0],
            [1.0, 0.9, 1.2],
        ));
        // 6 tests x 3 targets at -P 1, 3 tests at -P 16.
        assert_eq!(v.len(), 21);
        let set_p1 = |goal: &str| {
            v.iter()
                .find(|v| v.test == "SET" && v.pipeline == 1 && v.goal == goal)
                .unwrap()
        };
        let r = set_p1("t2 / Redis >= 1.10x");
        assert_eq!((r.measured.as_str(), r.met), ("1.050x", false));
        let r = set_p1("t2 / t1 >= 1.00x");
        assert_eq!((r.measured.as_str(), r.met), ("1.167x", true));
        let r = set_p1("t2 p99 <= Redis p99");
        assert_eq!((r.measured.as_str(), r.met), ("0.900 ms vs 1.000 ms", true));
        let p16: Vec<&Verdict> = v.iter().filter(|v| v.pipeline == 16).collect();
        assert_eq!(
            p16.iter().map(|v| v.test).collect::<Vec<_>>(),
            ["SET", "GET", "INCR"]
        );
        assert!(p16
            .iter()
            .all(|v| v.goal == "t2 / Redis >= 1.30x" && !v.met));

        let met = check(&section_with(
            [100_000.0, 140_000.0, 90_000.0],
            [1.0, 0.9, 1.2],
        ));
        assert!(met.iter().all(|v| v.met), "{met:?}");
        assert!(tables(&section_with(
            [100_000.0, 140_000.0, 90_000.0],
            [1.0, 0.9, 1.2]
        ))
        .contains("**Targets: 21 of 21 met.**"));
    }
}
