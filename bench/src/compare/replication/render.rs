//! The replication section in markdown, its targets, and how it replaces
//! its own part of an existing page.

use super::nodes::{MASTER, SENTINEL_SETTINGS};
use super::probe::{Samples, LAG_EVERY, LAG_POLL, LATENCY_PAUSE};
use super::{cell, Section, Sync, ThroughputRow, BASELINE, KINDS, NAMES, PROBE_COMMAND};
use crate::compare::servers::Kind;
use crate::compare::table::{median, thousands};
use crate::compare::with_without::render::{
    commands_block, cpu_table, ms, opening, per_million, row_verdicts, sh_block, throughput_table,
    OverRedis,
};
use crate::compare::with_without::{kind_index, rows_of};

pub use crate::compare::with_without::render::Verdict;

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

/// The targets, checked against what `section` measured.
pub fn verdicts(section: &Section) -> Vec<Verdict> {
    let rows = rows_of(&section.throughput);
    let mut out = row_verdicts(rows, &NAMES, WITH_OVER_ALONE, |lua| OverRedis {
        min: if lua { TOKEN_OVER_LUA } else { SET_OVER_REDIS },
        strictly: false,
    });
    let sync = section.sync.iter().find(|(k, _)| *k == Kind::Leasehold);
    let p99 = sync.and_then(|(_, r)| r.as_ref().ok()?.during.quantile(0.99));
    out.push(Verdict {
        goal: format!("full sync: Leasehold primary p99 < {SYNC_P99_MS:.0} ms"),
        measured: p99.map_or("-".into(), |v| format!("{v:.3} ms")),
        met: p99.map(|v| v < SYNC_P99_MS),
    });
    out
}

/// The throughput table, with a note when a replica was dropped.
fn replica_throughput_table(rows: &[ThroughputRow]) -> String {
    throughput_table(rows, &NAMES, |row, kind, with| {
        let label = NAMES.label(kind, with);
        let resyncs = row.extra.resyncs[kind_index(kind)];
        if with && resyncs > 0 {
            vec![format!(
                "{label}: the replica was dropped and synced again {resyncs} time(s), so the primary fed no replica for part of the runs"
            )]
        } else {
            Vec::new()
        }
    })
}

/// CPU per million requests: the primary alone, with a replica, and the
/// replica.
fn replica_cpu_table(rows: &[ThroughputRow]) -> String {
    cpu_table(
        rows,
        &["primary alone", "primary with a replica", "its replica"],
        |row, kind| {
            let cpu = row.extra.replica_cpu[kind_index(kind)];
            vec![per_million(row, cpu, cell(kind, true))]
        },
    )
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
        for (k, (kind, lag)) in KINDS.iter().zip(&row.extra.lag).enumerate() {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                row.workload.name,
                kind.label(),
                lag.ms.len(),
                ms(lag.quantile(0.5)),
                ms(lag.quantile(0.99)),
                ms(lag.max()),
                row.extra.resyncs[k],
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
    crate::compare::with_without::render::targets(&verdicts(section))
}

/// The whole section in markdown, with its `##` heading.
pub fn section(sec: &Section) -> String {
    let mut s = match opening(HEADING, sec.skipped.as_deref(), sec.quick) {
        Ok(s) => s,
        Err(not_run) => return not_run,
    };
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
            s.push_str(&replica_throughput_table(&t.rows));
            s.push_str(
                "\nThe replica runs on the same cores as its primary and the load generator, so *with / without* \
                 counts both what feeding a replica costs the primary and the CPU the replica takes from it. \
                 CPU seconds per million requests (user + system from `/proc/<pid>/stat`, summed over the \
                 runs) tell the two apart: the primary's own cost alone and with a replica, and its replica's.\n\n",
            );
            s.push_str(&replica_cpu_table(&t.rows));
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
    s.push_str(&commands_block(&cmds));
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
    s.push_str(&commands_block(&cmds));
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

    #[test]
    fn targets_use_the_with_replica_cells() {
        let extra = super::super::ReplicaStats {
            replica_cpu: [1.0; 2],
            ..Default::default()
        };
        let ops = [[100.0, 80.0, 200.0, 180.0], [50.0, 40.0, 300.0, 190.0]];
        let sec = Section {
            throughput: Ok(crate::compare::with_without::fixture(ops, extra)),
            ..skipped(None)
        };
        let v = verdicts(&sec);
        let got = crate::compare::with_without::render::measured(&v);
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

    #[test]
    fn throughput_and_cpu_tables() {
        assert!(replica_throughput_table(&[]).starts_with(
            "| workload | -P | Redis alone ops/s | Redis + replica ops/s | Leasehold alone ops/s | Leasehold + replica ops/s | \
             Redis with / without | Leasehold with / without | Leasehold / Redis, both with replica | \
             Redis + replica p99 ms | Leasehold + replica p99 ms | notes |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
        ));
        let row = ThroughputRow {
            workload: crate::compare::with_without::rows().remove(0),
            cells: [1e6, 2e6, 1e6, 2e6].map(crate::compare::with_without::one_run),
            cpu: [1.0, 2.0, 3.0, 4.0],
            extra: super::super::ReplicaStats {
                resyncs: [0, 2],
                replica_cpu: [0.5, 1.0],
                ..Default::default()
            },
        };
        assert_eq!(
            replica_cpu_table(std::slice::from_ref(&row)),
            "| workload | server | primary alone | primary with a replica | its replica |\n|---|---|---:|---:|---:|\n\
             | SET | Redis | 1.00 | 1.00 | 0.25 |\n| SET | Leasehold | 3.00 | 2.00 | 0.50 |\n"
        );
        assert!(replica_throughput_table(&[row]).ends_with(
            "| Leasehold + replica: the replica was dropped and synced again 2 time(s), so the primary fed no replica for part of the runs |\n"
        ));
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
