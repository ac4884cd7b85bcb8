//! The persistence section in markdown and its targets.

use std::time::Duration;

use super::{
    Restart, Section, ThroughputRow, BASELINE, BGSAVE_ROUNDS_PER_ROUND, INCREMENT_SHARE, LOG_FLAGS,
    NAMES, POLL, PROBES,
};
use crate::compare::replication::probe::{Samples, LATENCY_PAUSE};
use crate::compare::servers::Kind;
use crate::compare::table::{median, thousands};
use crate::compare::with_without::render::{
    commands_block, cpu_table, ms, opening, row_verdicts, sh_block, throughput_table, x, OverRedis,
};
use crate::compare::with_without::{kind_index, rows_of};

pub use crate::compare::with_without::render::Verdict;

/// The section's heading line.
pub const HEADING: &str = "## Persistence";

/// Leasehold with the log over Leasehold without persistence, at least.
pub const WITH_OVER_WITHOUT: f64 = 0.85;
/// Leasehold with the log over Redis (or the Lua script) with the log,
/// above.
pub const OVER_REDIS: f64 = 1.0;

/// The targets, checked against what `section` measured.
pub fn verdicts(section: &Section) -> Vec<Verdict> {
    let rows = rows_of(&section.throughput);
    row_verdicts(rows, &NAMES, WITH_OVER_WITHOUT, |_| OverRedis {
        min: OVER_REDIS,
        strictly: true,
    })
}

fn secs(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

/// The throughput table, with the log's rewrites and delayed fsyncs in
/// the notes.
fn log_throughput_table(rows: &[ThroughputRow]) -> String {
    throughput_table(rows, &NAMES, |row, kind, with| {
        let k = kind_index(kind);
        let mut notes = Vec::new();
        if with && row.extra.rewrites[k] > 0 {
            notes.push(format!(
                "{}: {} automatic log rewrite(s) during the runs",
                kind.label(),
                row.extra.rewrites[k]
            ));
        }
        if with && row.extra.delayed_fsyncs[k] > 0 {
            notes.push(format!(
                "{}: {} delayed fsync(s)",
                kind.label(),
                row.extra.delayed_fsyncs[k]
            ));
        }
        notes
    })
}

fn samples_note(what: &str, s: &Samples) -> Option<String> {
    match (&s.first_failure, s.missed) {
        (Some(why), n) if n > 0 => Some(format!("{what}: {n} missed ({why})")),
        _ => None,
    }
}

/// Leasehold's values over Redis's, each (`None` where Redis's is not
/// above 0), if both kinds have values.
fn leasehold_over_redis<const N: usize>(v: &[(Kind, [f64; N])]) -> Option<[Option<f64>; N]> {
    let of = |kind| v.iter().find(|m| m.0 == kind).map(|m| m.1);
    let (r, l) = (of(Kind::Redis)?, of(Kind::Leasehold)?);
    Some(std::array::from_fn(|i| (r[i] > 0.0).then(|| l[i] / r[i])))
}

fn took_cells(took: &[Duration]) -> (String, Option<f64>) {
    let v: Vec<f64> = took.iter().map(Duration::as_secs_f64).collect();
    (
        v.iter()
            .map(|t| format!("{t:.2}"))
            .collect::<Vec<_>>()
            .join(", "),
        median(&v),
    )
}

fn bgsave_table(section: &Section) -> String {
    let mut s = String::from(
        "| server | keys | fill s | BGSAVE s, each round | BGSAVE s, median | file bytes | bytes per key | \
         GET p99 ms idle | GET p99 ms during | GET max ms during | SET p99 ms idle | SET p99 ms during | \
         SET max ms during | samples during | notes |\n\
         |---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    let mut medians: Vec<(Kind, [f64; 2])> = Vec::new();
    for (kind, r) in &section.bgsave {
        match r {
            Ok(b) => {
                let (each, med) = took_cells(&b.took);
                let per_key = b.file_bytes as f64 / b.keys.max(1) as f64;
                if let Some(m) = med {
                    medians.push((*kind, [m, per_key]));
                }
                let notes: Vec<String> = PROBES
                    .iter()
                    .zip(&b.during)
                    .filter_map(|(p, d)| samples_note(p, d))
                    .collect();
                s.push_str(&format!(
                    "| {} | {} | {:.1} | {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    kind.label(),
                    thousands(b.keys as f64),
                    b.fill_seconds,
                    each,
                    secs(med),
                    thousands(b.file_bytes as f64),
                    per_key,
                    ms(b.baseline[0].quantile(0.99)),
                    ms(b.during[0].quantile(0.99)),
                    ms(b.during[0].max()),
                    ms(b.baseline[1].quantile(0.99)),
                    ms(b.during[1].quantile(0.99)),
                    ms(b.during[1].max()),
                    b.during[0].ms.len() + b.during[1].ms.len(),
                    notes.join("; ").replace('|', "\\|"),
                ));
            }
            Err(e) => s.push_str(&format!(
                "| {} | - | - | failed | - | - | - | - | - | - | - | - | - | - | {} |\n",
                kind.label(),
                e.replace('|', "\\|")
            )),
        }
    }
    if let Some([time, per_key]) = leasehold_over_redis(&medians) {
        s.push_str(&format!(
            "\nLeasehold / Redis: BGSAVE time {}, bytes per key {}.\n",
            x(time),
            x(per_key),
        ));
    }
    s
}

fn mb(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / 1e6)
}

fn restart_table(rows: &[(Kind, Result<Restart, String>)], log: bool) -> String {
    let mut s = if log {
        String::from(
            "| server | keys: base + increment | rewrite s | base MB | increment MB | restart s, each round | \
             restart s, median | notes |\n|---|---|---:|---:|---:|---|---:|---|\n",
        )
    } else {
        String::from(
            "| server | keys | snapshot MB | restart s, each round | restart s, median | notes |\n\
             |---|---:|---:|---|---:|---|\n",
        )
    };
    let mut medians: Vec<(Kind, [f64; 1])> = Vec::new();
    for (kind, r) in rows {
        match r {
            Ok(r) => {
                let (mut each, med) = took_cells(&r.took);
                // A failed round leaves no median to compare.
                if let (Some(m), None) = (med, &r.failure) {
                    medians.push((*kind, [m]));
                }
                let mut notes = Vec::new();
                if let Some(first) = r.early_pongs.iter().min() {
                    notes.push(format!(
                        "in {} of {} rounds PING answered PONG before the data was loaded \
                         (DBSIZE then answered -LOADING or fewer keys), first at {:.3} s",
                        r.early_pongs.len(),
                        r.took.len(),
                        first.as_secs_f64()
                    ));
                }
                if let Some(why) = &r.failure {
                    if !each.is_empty() {
                        each.push_str(", ");
                    }
                    each.push_str("failed");
                    notes.push(format!("round {} failed: {why}", r.took.len() + 1));
                }
                let notes = notes.join("; ").replace('|', "\\|");
                let keys = if log {
                    format!(
                        "{} + {} | {} | {} | {}",
                        thousands(r.base_keys as f64),
                        thousands((r.keys - r.base_keys) as f64),
                        secs(r.rewrite_seconds),
                        mb(r.base_bytes),
                        r.incr_bytes.map_or("-".into(), mb)
                    )
                } else {
                    format!("{} | {}", thousands(r.keys as f64), mb(r.base_bytes))
                };
                s.push_str(&format!(
                    "| {} | {keys} | {each} | {} | {notes} |\n",
                    kind.label(),
                    secs(med),
                ));
            }
            Err(e) => {
                let dashes = if log { "- | - | - | - |" } else { "- | - |" };
                s.push_str(&format!(
                    "| {} | {dashes} failed | - | {} |\n",
                    kind.label(),
                    e.replace('|', "\\|")
                ));
            }
        }
    }
    if let Some([time]) = leasehold_over_redis(&medians) {
        s.push_str(&format!("\nLeasehold / Redis: restart time {}.\n", x(time)));
    }
    s
}

fn targets(section: &Section) -> String {
    crate::compare::with_without::render::targets(&verdicts(section))
}

/// A line for each restart that failed, so a failure is not only a note in
/// a table's last column.
fn failures(sec: &Section) -> String {
    let mut s = String::new();
    for (rows, what) in [
        (&sec.restart_snapshot, "snapshot"),
        (&sec.restart_log, "log"),
    ] {
        for (kind, r) in rows {
            let why = match r {
                Ok(r) => r.failure.as_ref().map(|w| (r.took.len() + 1, w.as_str())),
                Err(_) => None,
            };
            if let Some((round, why)) = why {
                s.push_str(&format!(
                    "\n**{} did not restart from its {what}** (round {round}): {why}\n",
                    kind.label()
                ));
            }
        }
    }
    s
}

fn bgsave_commands(section: &Section) -> Vec<String> {
    let mut out = Vec::new();
    for (kind, r) in &section.bgsave {
        if let Ok(b) = r {
            out.push(format!(
                "# BGSAVE on {}: the server, its fill",
                kind.label()
            ));
            out.extend(b.commands.iter().cloned());
            out.push("redis-cli -p PORT BGSAVE   # sent on a connection of the tool".into());
        }
    }
    out
}

fn restart_commands(rows: &[(Kind, Result<Restart, String>)], what: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (kind, r) in rows {
        if let Ok(r) = r {
            out.push(format!("# restart from the {what} on {}", kind.label()));
            out.extend(r.commands.iter().cloned());
        }
    }
    out
}

/// The whole section in markdown, with its `##` heading.
pub fn section(sec: &Section) -> String {
    let mut s = match opening(HEADING, sec.skipped.as_deref(), sec.quick) {
        Ok(s) => s,
        Err(not_run) => return not_run,
    };
    s.push_str(&format!(
        "Measured in one run of its own ({}); the machine is the one above. How Leasehold \
         persists: [persistence.md](persistence.md). Every server has an empty `--dir` of its own \
         under the system's temp directory and `--save \"\"` (no snapshot rules); the log, where on, \
         is `{}` on both. Everything else is stock (both servers' default \
         `auto-aof-rewrite-percentage 100` and `auto-aof-rewrite-min-size 64mb`; Redis's \
         `aof-use-rdb-preamble yes`, so its log's base is an RDB file).\n\n",
        sec.facts,
        LOG_FLAGS.join(" ")
    ));
    s.push_str(&targets(sec));
    s.push_str(&failures(sec));
    s.push_str("\n### Throughput with the append-only log\n\n");
    match &sec.throughput {
        Ok(t) => {
            s.push_str(&format!(
                "For each server, two processes: one without persistence (`--save \"\" --appendonly no`, as in \
                 every other section) and one with the log. The rows are those of the throughput table (-P 16, \
                 same commands, the token bucket against the same Lua script on Redis). {} round(s) of {} s; \
                 each round runs each row on the four servers in turn, rotating which goes first; cells are the \
                 medians. *with / without* is what the log costs in throughput on this machine; the next ratio \
                 compares the two servers both with the log. The log grows by every write of every round, so \
                 both servers rewrite it automatically when it passes 64 MB (the notes count the rewrites).\n\n",
                sec.rounds, sec.duration
            ));
            s.push_str(&log_throughput_table(&t.rows));
            s.push_str(
                "\nCPU seconds per million requests (user + system from `/proc/<pid>/stat`, summed over the \
                 runs; the log's writer and fsync threads are Leasehold's own; a Redis rewrite runs in a forked \
                 child, which is not counted):\n\n",
            );
            s.push_str(&cpu_table(
                &t.rows,
                &["without persistence", "with log"],
                |_, _| Vec::new(),
            ));
            s.push_str("\nServers and load runs (ports are the free ones this run picked):\n\n");
            let mut lines = t.servers.clone();
            lines.extend(t.commands.iter().cloned());
            s.push_str(&sh_block(&lines));
        }
        Err(e) => s.push_str(&format!("Failed: {e}\n")),
    }
    let keys = sec
        .bgsave
        .iter()
        .find_map(|(_, r)| r.as_ref().ok().map(|b| b.keys));
    s.push_str(&format!(
        "\n### BGSAVE{}\n\nA fresh server without the log is filled with string keys (one `SET` each, \
         sequential, as the full sync's primary). Then {} BGSAVEs each ({} per round: one gives the probes \
         few samples), alternating which server goes first: \
         the clock starts at `BGSAVE` and stops when INFO persistence shows `rdb_bgsave_in_progress:0` \
         with one more save counted (`rdb_saves`; `rdb_last_save_time`, which LASTSAVE returns, has 1 s \
         steps), polled every {} ms. Redis notices its child has finished in its cron (`hz 10`), so its \
         time includes up to 100 ms of that. Meanwhile two probe threads, each another client, send \
         `{}` and `{}` (the keys just filled), one request at a time with {} ms between them, and time each \
         round trip (the p99 and max are over every BGSAVE's samples together); the same probes run {} s \
         on the idle filled server first. The file is the snapshot \
         BGSAVE wrote (`dump.rdb`, `dump.lhs`); bytes per key are its size / the keys.\n\n",
        keys.map(|k| format!(" of {} keys", thousands(k as f64)))
            .unwrap_or_default(),
        sec.rounds * BGSAVE_ROUNDS_PER_ROUND,
        BGSAVE_ROUNDS_PER_ROUND,
        POLL.as_millis(),
        PROBES[0],
        PROBES[1],
        LATENCY_PAUSE.as_millis(),
        BASELINE.as_secs()
    ));
    s.push_str(&bgsave_table(sec));
    let cmds = bgsave_commands(sec);
    s.push_str(&commands_block(&cmds));
    let keys = sec
        .restart_snapshot
        .iter()
        .chain(&sec.restart_log)
        .find_map(|(_, r)| r.as_ref().ok().map(|r| r.keys));
    s.push_str(&format!(
        "\n### Restart{}\n\nEach round starts a server again on the `--dir` its files are in and times from \
         the process's spawn until `PING` answers `PONG` (not `-LOADING`), polled every {} ms, with \
         DBSIZE then answering every key (a PONG after which DBSIZE does not is noted and the clock goes \
         on); then `SHUTDOWN`. {} round(s), the four set-ups (two servers, two kinds of file) rotated. The \
         files are in the page cache (just written), so this is the time to parse and load them, not to \
         read a cold disk.\n\n\
         **From the snapshot**: the BGSAVE's server above, stopped with `SHUTDOWN` (no rules, so it writes \
         nothing more), started again on its last BGSAVE's file.\n\n",
        keys.map(|k| format!(" with {} keys", thousands(k as f64)))
            .unwrap_or_default(),
        POLL.as_millis(),
        sec.rounds,
    ));
    s.push_str(&restart_table(&sec.restart_snapshot, false));
    s.push_str(&format!(
        "\n**From the log, base plus increment**: a fresh server with the log on (`{}`) gets string keys \
         (one `SET` each), then `BGREWRITEAOF` (timed until `aof_rewrite_in_progress:0` with one more \
         rewrite counted), which makes them the log's base (Redis: an RDB base file, \
         `aof-use-rdb-preamble yes`; Leasehold: a snapshot base file), then 1/{} of the keys as token \
         buckets (TOKENLEASE, and the token-bucket Lua script on Redis, refilling 1 token an hour so none \
         expires), which go into the log's increment; then `SHUTDOWN`. Base and increment are the files' \
         sizes then.\n\n",
        LOG_FLAGS.join(" "),
        INCREMENT_SHARE,
    ));
    s.push_str(&restart_table(&sec.restart_log, true));
    let mut cmds = restart_commands(&sec.restart_snapshot, "snapshot");
    cmds.extend(restart_commands(&sec.restart_log, "log"));
    s.push_str(&commands_block(&cmds));
    s.push('\n');
    s
}

/// `page` with its persistence section replaced by `section` (a whole
/// section from [`HEADING`] on); see [`crate::compare::doc::splice`].
pub fn splice(page: &str, section: &str) -> String {
    crate::compare::doc::splice(page, HEADING, section)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::persistence::{Bgsave, LogStats};

    fn empty(why: Option<&str>) -> Section {
        Section {
            quick: false,
            threads: 2,
            rounds: 3,
            duration: 3.0,
            skipped: why.map(String::from),
            throughput: Err("not run".into()),
            bgsave: Vec::new(),
            restart_snapshot: Vec::new(),
            restart_log: Vec::new(),
            facts: String::new(),
        }
    }

    #[test]
    fn targets_compare_the_log_cells() {
        // Cells: Redis without, Redis with, Leasehold without, Leasehold with.
        let extra = LogStats {
            rewrites: [1, 0],
            delayed_fsyncs: [0; 2],
        };
        let ops = [[100.0, 80.0, 200.0, 180.0], [50.0, 40.0, 300.0, 40.0]];
        let sec = Section {
            throughput: Ok(crate::compare::with_without::fixture(ops, extra)),
            ..empty(None)
        };
        let v = verdicts(&sec);
        let got = crate::compare::with_without::render::measured(&v);
        assert_eq!(
            got,
            [
                ("0.90x", Some(true)),
                ("2.25x", Some(true)),
                ("0.13x", Some(false)),
                // Equal is not above.
                ("1.00x", Some(false)),
            ]
        );
        assert!(v[3].goal.contains("Lua with log > 1.00x"), "{}", v[3].goal);
        let text = section(&sec);
        assert!(text.contains("**Targets: 2 of 4 met.**"), "{text}");
        assert!(
            text.contains(
                "| SET | 16 | 100 | 80 | 200 | 180 | 0.80x | 0.90x | 2.25x | 2.000 | 2.000 | \
                 Redis: 1 automatic log rewrite(s) during the runs |"
            ),
            "{text}"
        );
    }

    #[test]
    fn throughput_and_cpu_headings() {
        assert!(log_throughput_table(&[]).starts_with(
            "| workload | -P | Redis without ops/s | Redis with log ops/s | Leasehold without ops/s | \
             Leasehold with log ops/s | Redis with / without | Leasehold with / without | \
             Leasehold / Redis, both with log | Redis with log p99 ms | Leasehold with log p99 ms | notes |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
        ));
        assert_eq!(
            cpu_table::<LogStats>(&[], &["without persistence", "with log"], |_, _| Vec::new()),
            "| workload | server | without persistence | with log |\n|---|---|---:|---:|\n"
        );
    }

    #[test]
    fn bgsave_and_restart_rows_show_medians_and_ratios() {
        let samples = |v: &[f64]| Samples {
            ms: v.to_vec(),
            ..Samples::default()
        };
        let b = |secs: [f64; 3], bytes| Bgsave {
            keys: 1000,
            commands: vec!["server".into(), "fill".into()],
            fill_seconds: 1.0,
            took: secs.map(Duration::from_secs_f64).to_vec(),
            file_bytes: bytes,
            baseline: [samples(&[0.1]), samples(&[0.2])],
            during: [samples(&[0.1, 0.5]), samples(&[0.3])],
        };
        let r = |secs: [f64; 3], log: bool| Restart {
            keys: 1000,
            base_keys: if log { 900 } else { 1000 },
            commands: Vec::new(),
            rewrite_seconds: log.then_some(0.5),
            base_bytes: 2_000_000,
            incr_bytes: log.then_some(300_000),
            took: secs.map(Duration::from_secs_f64).to_vec(),
            early_pongs: if log {
                Vec::new()
            } else {
                vec![Duration::from_millis(3)]
            },
            failure: None,
        };
        let sec = Section {
            bgsave: vec![
                (Kind::Redis, Ok(b([1.0, 3.0, 2.0], 20_000))),
                (Kind::Leasehold, Ok(b([0.5, 0.5, 0.5], 60_000))),
            ],
            restart_snapshot: vec![
                (Kind::Redis, Ok(r([1.0, 1.5, 1.2], false))),
                (Kind::Leasehold, Ok(r([0.3, 0.3, 0.3], false))),
            ],
            restart_log: vec![
                (Kind::Redis, Ok(r([2.0, 2.0, 2.0], true))),
                (
                    Kind::Leasehold,
                    Ok(Restart {
                        took: vec![Duration::from_millis(500)],
                        failure: Some("exited: corrupt|x".into()),
                        ..r([0.0; 3], true)
                    }),
                ),
            ],
            ..empty(None)
        };
        let text = section(&sec);
        assert!(
            text.contains(
                "| Redis | 1 000 | 1.0 | 1.00, 3.00, 2.00 | 2.00 | 20 000 | 20.0 | 0.100 | 0.500 | 0.500 | \
                 0.200 | 0.300 | 0.300 | 3 |  |"
            ),
            "{text}"
        );
        assert!(
            text.contains("Leasehold / Redis: BGSAVE time 0.25x, bytes per key 3.00x."),
            "{text}"
        );
        assert!(
            text.contains("| Redis | 900 + 100 | 0.50 | 2.0 | 0.3 | 2.00, 2.00, 2.00 | 2.00 |  |"),
            "{text}"
        );
        assert!(
            text.contains(
                "| Leasehold | 900 + 100 | 0.50 | 2.0 | 0.3 | 0.50, failed | 0.50 | \
                 round 2 failed: exited: corrupt\\|x |"
            ),
            "{text}"
        );
        // Only the snapshot restarts have both servers' medians.
        assert_eq!(text.matches("restart time").count(), 1, "{text}");
    }

    #[test]
    fn a_skipped_section_says_why_and_splices_after_replication() {
        let text = section(&empty(Some("no redis-server")));
        assert_eq!(text, "## Persistence\n\nNot run: no redis-server.\n\n");
        let page = "# T\n\n## Replication\n\nr\n\n## Lease manager\n\nl\n";
        let once = splice(page, &text);
        assert_eq!(
            once,
            "# T\n\n## Replication\n\nr\n\n## Persistence\n\nNot run: no redis-server.\n\n## Lease manager\n\nl\n"
        );
        let twice = splice(&once, "## Persistence\n\nnew\n\n");
        assert_eq!(
            twice,
            "# T\n\n## Replication\n\nr\n\n## Persistence\n\nnew\n\n## Lease manager\n\nl\n"
        );
        assert_eq!(verdicts(&empty(None)), []);
    }
}
