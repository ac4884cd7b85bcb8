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
            |l| l.starts_with("accuracy:"),
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

/// The section's body in markdown.
pub fn section(runs: &[LeaseRun]) -> String {
    let mut s = String::new();
    for r in runs {
        s.push_str(&format!("**{}**: `{}`\n\n", r.name, r.command));
        match &r.output {
            Ok(out) => s.push_str(&format!("```text\n{out}\n```\n\n")),
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
                output: Ok("accuracy: admitted 796, expected 800".into()),
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
    }
}
