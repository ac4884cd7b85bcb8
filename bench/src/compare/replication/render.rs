//! The replication section in markdown, its targets, and how it replaces
//! its own part of an existing page.

use super::nodes::{MASTER, SENTINEL_SETTINGS};
use super::probe::{Samples, LAG_EVERY, LAG_POLL, LATENCY_PAUSE};
use super::{cell, setup_label, Section, Sync, ThroughputRow, BASELINE, KINDS, PROBE_COMMAND};
use crate::compare::servers::Kind;
use crate::compare::table::{median, noisy_note, thousands};

/// The section's heading line.
pub const HEADING: &str = "## Replication";

/// Leasehold with a replica over Leasehold alone, at least.
pub const WITH_OVER_ALONE: f64 = 0.85;
/// Leasehold with a replica over Redis with a replica, SET, at least.
pub const SET_OVER_REDIS: f64 = 1.0;
/// TOKENLEASE with a replica over the Lua script with a replica, at least.
pub const TOKEN_OVER_LUA: f64 = 5.0;
/// Leasehold primary's p99 during the full sync, below (ms).
pub const SYNC_P99_MS: f64 = 5.0;

/// One target and whether the run met it.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// What is asked, with the threshold.
    pub goal: String,
    /// What was measured.
    pub measured: String,
    /// Met or not (`None`: nothing measured).
    pub met: Option<bool>,
}

fn ratio(row: &ThroughputRow, a: usize, b: usize) -> Option<f64> {
    match (row.cells[a].median_ops(), row.cells[b].median_ops()) {
        (Some(x), Some(y)) if y > 0.0 => Some(x / y),
        _ => None,
    }
}

fn at_least(goal: String, v: Option<f64>, min: f64) -> Verdict {
    Verdict {
        goal,
        measured: v.map_or("-".into(), |v| format!("{v:.2}x")),
        met: v.map(|v| v >= min),
    }
}

/// The targets, checked against what `section` measured.
pub fn verdicts(section: &Section) -> Vec<Verdict> {
    let mut out = Vec::new();
    let (redis_with, lh_alone, lh_with) = (
        cell(Kind::Redis, true),
        cell(Kind::Leasehold, false),
        cell(Kind::Leasehold, true),
    );
    let rows = section
        .throughput
        .as_ref()
        .map(|t| t.rows.as_slice())
        .unwrap_or_default();
    for row in rows {
        let name = row.workload.name;
        out.push(at_least(
            format!("{name}: Leasehold + replica / Leasehold alone >= {WITH_OVER_ALONE:.2}x"),
            ratio(row, lh_with, lh_alone),
            WITH_OVER_ALONE,
        ));
        let (min, what) = if row.workload.redis.script.is_some() {
            (TOKEN_OVER_LUA, "Lua")
        } else {
            (SET_OVER_REDIS, "Redis")
        };
        out.push(at_least(
            format!("{name}: Leasehold + replica / {what} + replica >= {min:.2}x"),
            ratio(row, lh_with, redis_with),
            min,
        ));
    }
    let sync = section.sync.iter().find(|(k, _)| *k == Kind::Leasehold);
    let p99 = sync.and_then(|(_, r)| r.as_ref().ok()?.during.quantile(0.99));
    out.push(Verdict {
        goal: format!("full sync: Leasehold primary p99 < {SYNC_P99_MS:.0} ms"),
        measured: p99.map_or("-".into(), |v| format!("{v:.3} ms")),
        met: p99.map(|v| v < SYNC_P99_MS),
    });
    out
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.3}"))
}

fn ops(row: &ThroughputRow, c: usize) -> String {
    match &row.cells[c] {
        super::SideResult::Failed(_) => "failed".into(),
        s => s.median_ops().map_or("-".into(), thousands),
    }
}

fn x(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}x"))
}

fn throughput_table(rows: &[ThroughputRow]) -> String {
    let mut s = String::from(
        "| workload | -P | Redis alone ops/s | Redis + replica ops/s | Leasehold alone ops/s | Leasehold + replica ops/s | \
         Redis with / without | Leasehold with / without | Leasehold / Redis, both with replica | \
         Redis + replica p99 ms | Leasehold + replica p99 ms | notes |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for row in rows {
        let mut notes = Vec::new();
        for kind in KINDS {
            for with in [false, true] {
                let c = &row.cells[cell(kind, with)];
                let label = setup_label(kind, with);
                notes.extend(noisy_note(&label, c.spread()));
                if let super::SideResult::Failed(why) = c {
                    notes.push(format!("{label} failed: {why}"));
                }
                let resyncs = row.resyncs[usize::from(kind == Kind::Leasehold)];
                if with && resyncs > 0 {
                    notes.push(format!(
                        "{label}: the replica was dropped and synced again {resyncs} time(s), so the primary fed no replica for part of the runs"
                    ));
                }
            }
        }
        let p99 = |kind| ms(row.cells[cell(kind, true)].median_p99());
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            row.workload.name,
            row.workload.pipeline,
            ops(row, cell(Kind::Redis, false)),
            ops(row, cell(Kind::Redis, true)),
            ops(row, cell(Kind::Leasehold, false)),
            ops(row, cell(Kind::Leasehold, true)),
            x(ratio(
                row,
                cell(Kind::Redis, true),
                cell(Kind::Redis, false)
            )),
            x(ratio(
                row,
                cell(Kind::Leasehold, true),
                cell(Kind::Leasehold, false)
            )),
            x(ratio(
                row,
                cell(Kind::Leasehold, true),
                cell(Kind::Redis, true)
            )),
            p99(Kind::Redis),
            p99(Kind::Leasehold),
            notes.join("; ").replace('|', "\\|"),
        ));
    }
    s
}

fn cpu_table(rows: &[ThroughputRow]) -> String {
    let mut s = String::from(
        "| workload | server | primary alone | primary with a replica | its replica |\n|---|---|---:|---:|---:|\n",
    );
    let per_million = |row: &ThroughputRow, cpu: f64, c: usize| match row.requests(c) {
        0 => "-".into(),
        n => format!("{:.2}", cpu / n as f64 * 1e6),
    };
    for row in rows {
        for (k, kind) in KINDS.iter().enumerate() {
            let (alone, with) = (cell(*kind, false), cell(*kind, true));
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                row.workload.name,
                kind.label(),
                per_million(row, row.cpu[alone], alone),
                per_million(row, row.cpu[with], with),
                per_million(row, row.replica_cpu[k], with),
            ));
        }
    }
    s
}

fn samples_note(s: &Samples) -> String {
    match (&s.first_failure, s.missed) {
        (Some(why), n) if n > 0 => format!("{n} missed ({why})").replace('|', "\\|"),
        _ => String::new(),
    }
}

fn lag_table(rows: &[ThroughputRow]) -> String {
    let mut s = String::from(
        "| workload | server | samples | p50 ms | p99 ms | max ms | replica resyncs | notes |\n|---|---|---:|---:|---:|---:|---:|---|\n",
    );
    for row in rows {
        for (k, (kind, lag)) in KINDS.iter().zip(&row.lag).enumerate() {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                row.workload.name,
                kind.label(),
                lag.ms.len(),
                ms(lag.quantile(0.5)),
                ms(lag.quantile(0.99)),
                ms(lag.max()),
                row.resyncs[k],
                samples_note(lag),
            ));
        }
    }
    s
}

fn sync_table(section: &Section) -> String {
    let mut s = String::from(
        "| server | keys | fill s | sync s | primary p50 ms during | p99 ms during | max ms during | samples during | p99 ms idle, before | notes |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for (kind, r) in &section.sync {
        match r {
            Ok(y) => s.push_str(&format!(
                "| {} | {} | {:.1} | {:.2} | {} | {} | {} | {} | {} | {} |\n",
                kind.label(),
                thousands(y.keys as f64),
                y.fill_seconds,
                y.took.as_secs_f64(),
                ms(y.during.quantile(0.5)),
                ms(y.during.quantile(0.99)),
                ms(y.during.max()),
                y.during.ms.len(),
                ms(y.baseline.quantile(0.99)),
                samples_note(&y.during),
            )),
            Err(e) => s.push_str(&format!(
                "| {} | - | - | failed | - | - | - | - | - | {} |\n",
                kind.label(),
                e.replace('|', "\\|")
            )),
        }
    }
    s
}

fn failover_table(section: &Section) -> String {
    let rounds = section
        .failover
        .iter()
        .map(|f| f.rounds.len())
        .max()
        .unwrap_or(0);
    let mut s = String::from("| server |");
    let mut rule = String::from("|---|");
    for r in 1..=rounds {
        s.push_str(&format!(" round {r}: first write s (named s) |"));
        rule.push_str("---:|");
    }
    s.push_str(" median first write s | notes |\n");
    rule.push_str("---:|---|\n");
    s.push_str(&rule);
    for f in &section.failover {
        let mut line = format!("| {} |", f.kind.label());
        let mut times = Vec::new();
        let mut notes = Vec::new();
        for (i, r) in f.rounds.iter().enumerate() {
            match r {
                Ok(v) => {
                    times.push(v.writable.as_secs_f64());
                    line.push_str(&format!(
                        " {:.2} ({:.2}) |",
                        v.writable.as_secs_f64(),
                        v.named.as_secs_f64()
                    ));
                }
                Err(e) => {
                    line.push_str(" failed |");
                    notes.push(format!("round {}: {e}", i + 1));
                }
            }
        }
        for _ in f.rounds.len()..rounds {
            line.push_str(" - |");
        }
        line.push_str(&format!(
            " {} | {} |\n",
            median(&times).map_or("-".into(), |m| format!("{m:.2}")),
            notes.join("; ").replace('|', "\\|")
        ));
        s.push_str(&line);
    }
    s
}

fn sh_block(lines: &[String]) -> String {
    format!("```sh\n{}\n```\n", lines.join("\n"))
}

fn sync_commands(section: &Section) -> Vec<String> {
    let mut out = Vec::new();
    for (kind, r) in &section.sync {
        if let Ok(Sync { fill, commands, .. }) = r {
            out.push(format!(
                "# full sync on {}: the primary, its fill",
                kind.label()
            ));
            out.push(commands[0].clone());
            out.push(fill.clone());
            out.push(
                "# a fresh node; the clock starts at REPLICAOF (sent on a connection of the tool, as this redis-cli line would)"
                    .into(),
            );
            out.extend(commands[1..].iter().cloned());
        }
    }
    out
}

fn targets(section: &Section) -> String {
    let v = verdicts(section);
    let met = v.iter().filter(|v| v.met == Some(true)).count();
    let mut s = format!(
        "**Targets: {met} of {} met.**\n\n| target | measured | result |\n|---|---:|---|\n",
        v.len()
    );
    for t in &v {
        s.push_str(&format!(
            "| {} | {} | {} |\n",
            t.goal,
            t.measured,
            match t.met {
                Some(true) => "met",
                Some(false) => "not met",
                None => "not measured",
            }
        ));
    }
    s
}

/// The whole section in markdown, with its `##` heading.
pub fn section(sec: &Section) -> String {
    let mut s = format!("{HEADING}\n\n");
    if let Some(why) = &sec.skipped {
        s.push_str(&format!("Not run: {why}.\n\n"));
        return s;
    }
    if sec.quick {
        s.push_str("**These numbers come from a `--quick` smoke run: too short to quote.**\n\n");
    }
    s.push_str(&format!(
        "Measured in one run of its own ({}); the machine is the one above. How Leasehold \
         replicates: [replication.md](replication.md). Redis nodes run with \
         `--repl-diskless-sync-delay 0` (Leasehold starts a sync at once; Redis would first wait \
         5 s for more replicas) and a `--dir` of their own; everything else is stock.\n\n",
        sec.facts
    ));
    s.push_str(&targets(sec));
    s.push_str("\n### Throughput with one replica attached\n\n");
    match &sec.throughput {
        Ok(t) => {
            s.push_str(&format!(
                "For each server, three processes: a primary alone; a primary with one replica of the same \
                 kind attached (started with `--replicaof`, waited until its link is up and DBSIZE matches); and \
                 that replica. The rows are those of the throughput table (-P 16, same commands). {} round(s) of \
                 {} s; each round runs each row on the four set-ups in turn, rotating which goes first; cells are \
                 the medians. *with / without* is what attaching a replica costs in throughput on this machine; \
                 the last ratio compares the two servers both with a replica.\n\n",
                sec.rounds, sec.duration
            ));
            s.push_str(&throughput_table(&t.rows));
            s.push_str(
                "\nThe replica runs on the same cores as its primary and the load generator, so *with / without* \
                 counts both what feeding a replica costs the primary and the CPU the replica takes from it. \
                 CPU seconds per million requests (user + system from `/proc/<pid>/stat`, summed over the \
                 runs) tell the two apart: the primary's own cost alone and with a replica, and its replica's.\n\n",
            );
            s.push_str(&cpu_table(&t.rows));
            s.push_str(&format!(
                "\n### Replica lag during that load\n\nWhile each run with a replica goes on, a probe thread \
                 sends `SET lag:probe <n>` to the primary every {} ms, and from the primary's reply on sends \
                 `GET lag:probe` to the replica every {:.1} ms until it answers `<n>`; one sample is the time \
                 from the primary's reply to the replica's, so it is how stale a read from the replica is \
                 just after a write was acknowledged (a sample is at least one GET round trip). Samples of \
                 all rounds together. *Replica resyncs* counts the PSYNCs the primary answered during these \
                 runs (INFO stats `sync_full` + `sync_partial_ok`): a replica that fell too far behind was \
                 dropped and came back, and its samples wait for that.\n\n",
                LAG_EVERY.as_millis(),
                LAG_POLL.as_secs_f64() * 1e3
            ));
            s.push_str(&lag_table(&t.rows));
            s.push_str("\nServers and load runs (ports are the free ones this run picked):\n\n");
            let mut lines = t.servers.clone();
            lines.extend(t.commands.iter().cloned());
            s.push_str(&sh_block(&lines));
        }
        Err(e) => s.push_str(&format!("Failed: {e}\n")),
    }
    let keys = sec
        .sync
        .iter()
        .find_map(|(_, r)| r.as_ref().ok().map(|y| y.keys));
    s.push_str(&format!(
        "\n### Full sync{}\n\nA fresh primary is filled with string keys (one `SET` each, sequential), a \
         fresh node is started, and the clock starts when it is sent `REPLICAOF`; it stops when the node \
         reports `master_link_status:up`, `master_sync_in_progress:0` (Redis also `loading:0`) and DBSIZE equal \
         to the primary's (polled every 10 ms). Meanwhile a probe thread sends `{PROBE_COMMAND}` to the primary, \
         one request at a time with {} ms between them, and times each round trip: that is what another client of \
         the primary sees while it serves the sync. The same probe runs {} s on the idle filled primary first, \
         for comparison. Redis's replica keeps its default `repl-diskless-load disabled` (it writes the payload to \
         its `--dir`, then loads it). One sync per server.\n\n",
        keys.map(|k| format!(" of {} keys", thousands(k as f64)))
            .unwrap_or_default(),
        LATENCY_PAUSE.as_millis(),
        BASELINE.as_secs()
    ));
    s.push_str(&sync_table(sec));
    let cmds = sync_commands(sec);
    if !cmds.is_empty() {
        s.push('\n');
        s.push_str(&sh_block(&cmds));
    }
    s.push_str(&format!(
        "\n### Failover with Sentinel\n\nFor each server, a primary and two replicas of that kind and three stock \
         sentinels (`redis-server <conf> --sentinel`, quorum 2, `{}`), all new each round. Once every sentinel \
         lists both replicas and the two other sentinels, the primary is killed (SIGKILL); the clock runs from \
         the kill to the first `INCR` that succeeds on the primary the first sentinel names \
         (`SENTINEL get-master-addr-by-name {MASTER}`, polled every 10 ms; in brackets, when it first named \
         another node). This is how long writes are refused when a primary dies, with these settings; it \
         cannot be shorter than the 1 s `down-after-milliseconds`.\n\n",
        SENTINEL_SETTINGS
            .iter()
            .map(|l| l.trim_start_matches("sentinel ").replace(" mymaster", ""))
            .collect::<Vec<_>>()
            .join("`, `")
    ));
    s.push_str(&failover_table(sec));
    let cmds: Vec<String> = sec
        .failover
        .iter()
        .filter(|f| !f.commands.is_empty())
        .flat_map(|f| {
            std::iter::once(format!(
                "# failover on {}: primary, two replicas, three sentinels (first round)",
                f.kind.label()
            ))
            .chain(f.commands.iter().cloned())
        })
        .collect();
    if !cmds.is_empty() {
        s.push('\n');
        s.push_str(&sh_block(&cmds));
    }
    s.push('\n');
    s
}

/// `page` with its replication section replaced by `section` (a whole
/// section from [`HEADING`] on); see [`crate::compare::doc::splice`].
pub fn splice(page: &str, section: &str) -> String {
    crate::compare::doc::splice(page, HEADING, section)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str =
        "# T\n\n## Reclamation\n\nr\n\n## Lease manager\n\nl\n\n## Exact commands\n\nc\n";

    #[test]
    fn splice_inserts_then_replaces_only_its_section() {
        let once = splice(PAGE, "## Replication\n\none\n\n");
        assert_eq!(
            once,
            "# T\n\n## Reclamation\n\nr\n\n## Replication\n\none\n\n## Lease manager\n\nl\n\n## Exact commands\n\nc\n"
        );
        let twice = splice(&once, "## Replication\n\ntwo\n\n### sub\n\n");
        assert_eq!(
            twice,
            "# T\n\n## Reclamation\n\nr\n\n## Replication\n\ntwo\n\n### sub\n\n## Lease manager\n\nl\n\n## Exact commands\n\nc\n"
        );
        assert_eq!(splice("", "## Replication\n\nx\n"), "## Replication\n\nx\n");
    }

    fn runs(ops: f64) -> super::super::SideResult {
        super::super::SideResult::Runs(vec![crate::report::Report {
            command: "X".into(),
            connections: 50,
            pipeline: 16,
            keyspace: 100_000,
            distribution: "uniform".into(),
            requests: ops as u64,
            errors: 0,
            first_error: None,
            seconds: 1.0,
            ops_per_sec: ops,
            latency_ms: crate::report::Latency {
                p50: 1.0,
                p99: 2.0,
                p999: 3.0,
                max: 4.0,
                mean: 1.0,
            },
        }])
    }

    #[test]
    fn targets_use_the_with_replica_cells() {
        let rows: Vec<ThroughputRow> = super::super::rows()
            .into_iter()
            .zip([[100.0, 80.0, 200.0, 180.0], [50.0, 40.0, 300.0, 190.0]])
            .map(|(workload, ops)| ThroughputRow {
                workload,
                cells: ops.map(runs),
                lag: Default::default(),
                resyncs: [0; 2],
                cpu: [1.0; 4],
                replica_cpu: [1.0; 2],
            })
            .collect();
        let sec = Section {
            throughput: Ok(super::super::Throughput {
                servers: Vec::new(),
                rows,
                commands: Vec::new(),
            }),
            ..skipped(None)
        };
        let v = verdicts(&sec);
        let got: Vec<(&str, Option<bool>)> =
            v.iter().map(|v| (v.measured.as_str(), v.met)).collect();
        assert_eq!(
            got,
            [
                ("0.90x", Some(true)),
                ("2.25x", Some(true)),
                ("0.63x", Some(false)),
                ("4.75x", Some(false)),
                ("-", None)
            ]
        );
        assert!(
            v[3].goal.contains("Lua + replica >= 5.00x"),
            "{}",
            v[3].goal
        );
        let text = section(&sec);
        assert!(text.contains("**Targets: 2 of 5 met.**"), "{text}");
        assert!(
            text.contains("| SET | 16 | 100 | 80 | 200 | 180 | 0.80x | 0.90x | 2.25x |"),
            "{text}"
        );
    }

    fn skipped(why: Option<&str>) -> Section {
        Section {
            quick: false,
            threads: 2,
            rounds: 3,
            duration: 3.0,
            skipped: why.map(String::from),
            throughput: Err("not run".into()),
            sync: Vec::new(),
            failover: Vec::new(),
            facts: String::new(),
        }
    }

    #[test]
    fn a_skipped_section_says_why() {
        let sec = skipped(Some("no redis-server"));
        assert_eq!(
            section(&sec),
            "## Replication\n\nNot run: no redis-server.\n\n"
        );
        let v = verdicts(&sec);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].met, None);
    }
}
