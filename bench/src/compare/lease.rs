//! The lease manager's own measurements, run by the comparison so that
//! docs/benchmarks.md carries them: the accuracy of 8 managers sharing one
//! key (over- and under-admission against the expected total) from the
//! client crate's end-to-end test, and ledger calls per second with the
//! dynamic lease against a fixed one from its `lease_calls` example. Both
//! start their own in-process Leasehold server; Redis has no part in them.

use std::process::Command;

/// One measurement: the command line and what it printed (or why it failed).
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseRun {
    /// What it measures.
    pub name: &'static str,
    /// The command, as a reader would type it.
    pub command: String,
    /// The lines of its output that carry the result.
    pub output: Result<String, String>,
}

/// Runs `cargo args` and keeps the lines `keep` accepts from stdout and stderr.
fn cargo(name: &'static str, args: &[&str], keep: fn(&str) -> bool) -> LeaseRun {
    let command = format!("cargo {}", args.join(" "));
    eprintln!("lease manager: {command}");
    let output = match Command::new("cargo").args(args).output() {
        Err(e) => Err(format!("could not run cargo: {e}")),
        Ok(o) if !o.status.success() => Err(format!("exit status {}", o.status)),
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout) + String::from_utf8_lossy(&o.stderr);
            let lines: Vec<&str> = text.lines().filter(|l| keep(l)).collect();
            if lines.is_empty() {
                Err("no result line in its output".into())
            } else {
                Ok(lines.join("\n"))
            }
        }
    };
    LeaseRun {
        name,
        command,
        output,
    }
}

/// Runs both measurements; `quick` shortens the ledger-call runs.
pub fn run_all(quick: bool) -> Vec<LeaseRun> {
    let secs = if quick { "1" } else { "5" };
    vec![
        cargo(
            "accuracy: 8 lease managers share one key (limit 200/s, burst 200, 3 s)",
            &[
                "test",
                "--release",
                "-q",
                "-p",
                "leasehold-client",
                "--test",
                "e2e",
                "accuracy_eight_managers_share_one_key",
                "--",
                "--exact",
                "--nocapture",
            ],
            |l| l.starts_with("accuracy:") || l.starts_with(SAMPLE),
        ),
        cargo(
            "ledger calls for one key at 10 000 decisions/s, dynamic lease against a fixed lease of 50",
            &[
                "run",
                "--release",
                "-q",
                "-p",
                "leasehold-client",
                "--example",
                "lease_calls",
                "--",
                secs,
            ],
            |l| !l.trim().is_empty(),
        ),
    ]
}

/// The prefix of the accuracy test's samples, one line each 100 ms:
/// `accuracy-sample: t_ms 1200 admitted 431 allowed 440`.
pub const SAMPLE: &str = "accuracy-sample:";

/// One accuracy sample: (seconds since the start, admitted so far, allowed
/// so far), or None for any other line.
pub fn parse_sample(line: &str) -> Option<(f64, f64, f64)> {
    let w: Vec<&str> = line.strip_prefix(SAMPLE)?.split_whitespace().collect();
    match w.as_slice() {
        ["t_ms", t, "admitted", a, "allowed", b] => Some((
            t.parse::<f64>().ok()? / 1000.0,
            a.parse().ok()?,
            b.parse().ok()?,
        )),
        _ => None,
    }
}

/// Every accuracy sample in `runs`, in order.
pub fn samples(runs: &[LeaseRun]) -> Vec<(f64, f64, f64)> {
    runs.iter()
        .filter_map(|r| r.output.as_ref().ok())
        .flat_map(|out| out.lines().filter_map(parse_sample))
        .collect()
}

/// The section's body in markdown (the samples are left to the chart).
pub fn section(runs: &[LeaseRun]) -> String {
    let mut s = String::new();
    for r in runs {
        s.push_str(&format!("**{}**: `{}`\n\n", r.name, r.command));
        match &r.output {
            Ok(out) => {
                let text: Vec<&str> = out.lines().filter(|l| !l.starts_with(SAMPLE)).collect();
                s.push_str(&format!("```text\n{}\n```\n\n", text.join("\n")))
            }
            Err(e) => s.push_str(&format!("failed: {e}\n\n")),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_shows_each_command_and_its_result() {
        let runs = [
            LeaseRun {
                name: "accuracy",
                command: "cargo test x".into(),
                output: Ok(
                    "accuracy-sample: t_ms 100 admitted 220 allowed 220\naccuracy: admitted 796, expected 800"
                        .into(),
                ),
            },
            LeaseRun {
                name: "calls",
                command: "cargo run y".into(),
                output: Err("exit status 1".into()),
            },
        ];
        let s = section(&runs);
        assert!(s.contains("**accuracy**: `cargo test x`\n\n```text\naccuracy: admitted 796, expected 800\n```"), "{s}");
        assert!(
            s.contains("**calls**: `cargo run y`\n\nfailed: exit status 1"),
            "{s}"
        );
        assert_eq!(samples(&runs), vec![(0.1, 220.0, 220.0)]);
    }

    #[test]
    fn samples_parse_and_other_lines_do_not() {
        assert_eq!(
            parse_sample("accuracy-sample: t_ms 1200 admitted 431 allowed 440"),
            Some((1.2, 431.0, 440.0))
        );
        assert_eq!(parse_sample("accuracy: admitted 796"), None);
        assert_eq!(
            parse_sample("accuracy-sample: t_ms x admitted 1 allowed 2"),
            None
        );
    }
}
