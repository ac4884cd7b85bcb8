//! The scripts and data types section in markdown: the suite table, the
//! script table, the memory table, and their targets.

use super::{
    script_requests, suite_args, Section, EVALSHA_OVER_REDIS, LEGS, LH, LH_EVALSHA, REDIS,
    REDIS_EVALSHA, SUITE, TOKENLEASE,
};
use crate::compare::first::{notes, Row};
use crate::compare::memory::{memory_table, MemoryResult};
use crate::compare::table::{thousands, NOISY_SPREAD};
use crate::compare::with_without::render::{commands_block, ms, opening, targets, x, Verdict};
use crate::compare::workloads::ZSET_MEMBERS;

/// The section's heading.
pub const HEADING: &str = "## Scripts and data types";

/// How complete the suite is: rows with a median on both servers, all
/// rows, and runs that failed (redis-benchmark stopped at or before the
/// test), over both servers.
pub fn suite_counts(rows: &[Row<2>]) -> (usize, usize, usize) {
    let complete = rows
        .iter()
        .filter(|r| r.cells.iter().all(|c| c.median_rps().is_some()))
        .count();
    let errors = rows
        .iter()
        .flat_map(|r| &r.cells)
        .map(|c| c.failures.len())
        .sum();
    (complete, rows.len(), errors)
}

/// The suite's summary line, `**20 of 20 rows, 0 errors.**`.
pub fn suite_summary(rows: &[Row<2>]) -> String {
    let (complete, all, errors) = suite_counts(rows);
    format!(
        "**{complete} of {all} rows, {errors} error{}.**",
        if errors == 1 { "" } else { "s" }
    )
}

fn suite_table(rows: &[Row<2>]) -> String {
    let labels = ["Redis".to_string(), "Leasehold".to_string()];
    let mut s = String::from(
        "| test | Redis rps | Leasehold rps | Leasehold / Redis | Redis p99 ms | Leasehold p99 ms | errors (Redis / Leasehold) | notes |\n\
         |---|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for row in rows {
        let c = &row.cells;
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} / {} | {} |\n",
            row.test,
            c[REDIS].rps_cell(),
            c[LH].rps_cell(),
            x(row.ratio(LH, REDIS)),
            ms(c[REDIS].median_p99()),
            ms(c[LH].median_p99()),
            c[REDIS].failures.len(),
            c[LH].failures.len(),
            notes(&labels, row),
        ));
    }
    s
}

/// The script table: one line per (depth, leg), each ratio on the line of
/// its numerator.
fn script_table(rows: &[Row<3>]) -> String {
    let labels = LEGS.map(String::from);
    let mut s =
        String::from("| -P | run | rps | p99 ms | ratio | notes |\n|---:|---|---:|---:|---|---|\n");
    for row in rows {
        let row_notes = notes(&labels, row);
        for (leg, label) in LEGS.iter().enumerate() {
            let ratio = match leg {
                LH_EVALSHA => format!("{} Redis EVALSHA", x(row.ratio(LH_EVALSHA, REDIS_EVALSHA))),
                TOKENLEASE => format!("{} Leasehold EVALSHA", x(row.ratio(TOKENLEASE, LH_EVALSHA))),
                _ => String::new(),
            };
            s.push_str(&format!(
                "| {} | {label} | {} | {} | {ratio} | {} |\n",
                row.pipeline,
                row.cells[leg].rps_cell(),
                ms(row.cells[leg].median_p99()),
                if leg == 0 { row_notes.as_str() } else { "" },
            ));
        }
    }
    s
}

/// The targets: Leasehold's EVALSHA over Redis's when pipelined, and
/// Leasehold's bytes per key at most Redis's in each memory row. The
/// unpipelined row is reported, not judged: one command per round trip
/// is bound by the round trip and the load generator, not by the script.
pub fn verdicts(section: &Section) -> Vec<Verdict> {
    let mut out: Vec<Verdict> = section
        .scripts
        .iter()
        .filter(|row| row.pipeline > 1)
        .map(|row| {
            let r = row.ratio(LH_EVALSHA, REDIS_EVALSHA);
            Verdict {
                goal: format!(
                    "-P {}: Leasehold EVALSHA / Redis EVALSHA >= {EVALSHA_OVER_REDIS:.2}x",
                    row.pipeline
                ),
                measured: x(r),
                met: r.map(|v| v >= EVALSHA_OVER_REDIS),
            }
        })
        .collect();
    out.extend(section.memory.iter().map(memory_verdict));
    out
}

fn memory_verdict(row: &MemoryResult) -> Verdict {
    let per_key = |m: &Result<_, _>| m.as_ref().ok().map(crate::compare::memory::Memory::per_key);
    let (r, l) = (per_key(&row.redis), per_key(&row.leasehold));
    let both = r.zip(l);
    Verdict {
        goal: format!("{}: Leasehold bytes/key <= Redis bytes/key", row.name),
        measured: both.map_or("-".into(), |(r, l)| format!("{l:.1} vs {r:.1}")),
        met: both.map(|(r, l)| l <= r),
    }
}

/// The whole section in markdown, with its `##` heading.
pub fn section(sec: &Section) -> String {
    let mut s = match opening(HEADING, sec.skipped.as_deref(), sec.quick) {
        Ok(s) => s,
        Err(not_run) => return not_run,
    };
    s.push_str(&format!(
        "Measured in one run of its own ({}) on a Redis and a Leasehold `--threads {}` started for \
         this section the same way as the others; the machine is the one above. {} round(s), each \
         from FLUSHALL; in each, every run goes once on each server, rotating which goes first. \
         Cells are the medians of the rounds (rps and p99 as redis-benchmark prints them); a cell \
         whose runs spread more than {:.0}% ((max - min) / median) is marked noisy.\n\n",
        sec.facts,
        sec.threads,
        sec.rounds,
        NOISY_SPREAD * 100.0
    ));
    s.push_str(&targets(&verdicts(sec)));
    s.push_str(&format!(
        "\n### redis-benchmark's default suite\n\nAll {} tests of `redis-benchmark -q` (no `-t`), as a \
         newcomer types it:\n\n```sh\nredis-benchmark -p PORT {}\n```\n\n\
         redis-benchmark stops at the first error reply and exits non-zero: that test says *failed* \
         for that server, with the error in the notes, and the tests after it say they did not run.\n\n{}\n\n",
        SUITE.len(),
        shell_join_tail(&suite_args(0, sec.suite_requests)),
        suite_summary(&sec.suite)
    ));
    s.push_str(&suite_table(&sec.suite));
    let n16 = script_requests(sec.script_requests, 16);
    let n1 = script_requests(sec.script_requests, 1);
    s.push_str(&format!(
        "\n### EVALSHA of the token-bucket script against TOKENLEASE\n\n\
         [`bench/lua/token_bucket.lua`](../bench/lua/token_bucket.lua) loaded with SCRIPT LOAD on each \
         server, then `redis-benchmark -c 50 -P 16 -r 100000 -n {} EVALSHA <sha> 1 tb:__rand_int__ 100 10 1000 1` \
         (capacity 100, 10 tokens per 1000 ms, 1 per call) on Redis and on Leasehold, and Leasehold's native \
         `TOKENLEASE tb2:__rand_int__ 100 10 1000 1` with the same flags; the same three at -P 1 with \
         `-n {}`. *ratio* is each line's median rps over the one named.\n\n",
        thousands(n16 as f64).replace(' ', ""),
        thousands(n1 as f64).replace(' ', ""),
    ));
    s.push_str(&script_table(&sec.scripts));
    let keys = thousands(sec.collection_keys as f64);
    // Fewer keys than slots: most keys have a slot vector of their own.
    let sparse = match sec.collection_keys < 16_384 {
        true => format!(
            " With {keys} keys Leasehold's 16384 slots hold under one key each, so each key pays \
             for a slot vector of its own (see the notes on memory in \
             [bench/README.md](../bench/README.md))."
        ),
        false => String::new(),
    };
    s.push_str(&format!(
        "\n### Memory per key of a sorted set and a hash\n\n{keys} keys of each, built with pipelined \
         commands (`-c 8 -P 64`, one command a key, the same on both servers): a sorted set of \
         {ZSET_MEMBERS} members (`ZADD zs:<key> 1000 m:00000 8919 m:00001 ...`, integer scores from 1000 \
         to 9999) and a hash of 10 fields (`HSET hs:<key> field:0 value:00000 ...`). Bytes per key = \
         (INFO `used_memory` after - before) / DBSIZE, after FLUSHALL; one measurement per server.{sparse}\n\n"
    ));
    s.push_str(&memory_table(&sec.memory));
    s.push_str("\nServers and runs (ports are the free ones this run picked):\n");
    let mut lines = sec.servers.clone();
    lines.extend(sec.commands.iter().cloned());
    s.push_str(&commands_block(&lines));
    s.push('\n');
    s
}

/// `args` without the leading `-p PORT`, as a shell line.
fn shell_join_tail(args: &[String]) -> String {
    crate::compare::servers::shell_join(&args[2..])
}

#[cfg(test)]
mod tests {
    use super::super::{Row, SCRIPT_PIPELINES, SCRIPT_ROW};
    use super::*;
    use crate::compare::doc::splice;
    use crate::compare::memory::Memory;
    use crate::compare::redis_benchmark::{parse_csv, Outcome};

    /// Captured from redis-benchmark 7.0.15 (`-q -c 50 -n 5000 -r 100000
    /// --csv`, no `-t`) against redis-server 7.0.15.
    const SUITE_CSV: &str = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"
\"PING_INLINE\",\"23584.91\",\"1.644\",\"0.040\",\"0.583\",\"4.847\",\"13.079\",\"41.535\"
\"PING_MBULK\",\"48543.69\",\"0.703\",\"0.048\",\"0.479\",\"2.327\",\"5.487\",\"6.807\"
\"SET\",\"52631.58\",\"0.643\",\"0.040\",\"0.551\",\"1.319\",\"2.863\",\"3.287\"
\"GET\",\"20080.32\",\"1.850\",\"0.072\",\"0.511\",\"7.695\",\"28.623\",\"34.079\"
\"INCR\",\"25906.73\",\"1.341\",\"0.144\",\"0.767\",\"4.743\",\"5.103\",\"6.063\"
\"LPUSH\",\"25125.63\",\"1.185\",\"0.104\",\"0.727\",\"3.927\",\"6.383\",\"20.543\"
\"RPUSH\",\"10917.03\",\"3.728\",\"0.264\",\"2.431\",\"11.615\",\"23.839\",\"24.223\"
\"LPOP\",\"18382.35\",\"2.276\",\"0.064\",\"0.815\",\"9.551\",\"13.391\",\"14.831\"
\"RPOP\",\"18867.93\",\"2.157\",\"0.168\",\"0.687\",\"9.711\",\"14.087\",\"16.055\"
\"SADD\",\"53763.44\",\"0.618\",\"0.048\",\"0.615\",\"0.903\",\"1.231\",\"1.583\"
\"HSET\",\"48076.92\",\"0.727\",\"0.240\",\"0.639\",\"1.391\",\"3.287\",\"4.743\"
\"SPOP\",\"51546.39\",\"0.645\",\"0.024\",\"0.647\",\"0.927\",\"1.079\",\"1.479\"
\"ZADD\",\"28089.89\",\"1.365\",\"0.248\",\"0.711\",\"5.695\",\"14.727\",\"19.551\"
\"ZPOPMIN\",\"17241.38\",\"1.880\",\"0.216\",\"0.711\",\"9.255\",\"20.927\",\"35.775\"
\"LPUSH (needed to benchmark LRANGE)\",\"25906.73\",\"1.368\",\"0.136\",\"0.631\",\"4.311\",\"15.103\",\"29.727\"
\"LRANGE_100 (first 100 elements)\",\"12315.27\",\"3.077\",\"0.312\",\"1.927\",\"7.935\",\"11.799\",\"30.623\"
\"LRANGE_300 (first 300 elements)\",\"5302.23\",\"6.675\",\"0.416\",\"5.303\",\"16.687\",\"22.191\",\"42.271\"
\"LRANGE_500 (first 500 elements)\",\"2346.32\",\"12.552\",\"0.488\",\"11.887\",\"24.687\",\"32.831\",\"50.207\"
\"LRANGE_600 (first 600 elements)\",\"2768.55\",\"11.877\",\"0.360\",\"7.599\",\"32.447\",\"42.623\",\"59.999\"
\"MSET (10 keys)\",\"4132.23\",\"10.559\",\"0.128\",\"6.511\",\"27.871\",\"89.279\",\"178.431\"
";

    fn section(suite: Vec<Row<2>>, scripts: Vec<Row<3>>, memory: Vec<MemoryResult>) -> Section {
        Section {
            quick: false,
            threads: 2,
            rounds: 1,
            suite_requests: 50_000,
            script_requests: 200_000,
            collection_keys: 10_000,
            skipped: None,
            servers: vec!["redis-server --port 1".into()],
            suite,
            scripts,
            memory,
            commands: vec!["# x\nredis-benchmark y".into()],
            facts: "facts".into(),
        }
    }

    fn empty_suite() -> Vec<Row<2>> {
        SUITE.iter().map(|&t| Row::new(t, 1)).collect()
    }

    #[test]
    fn the_whole_suite_fills_twenty_rows() {
        let full = Outcome {
            rows: parse_csv(SUITE_CSV),
            error: None,
        };
        assert_eq!(
            full.rows
                .iter()
                .map(|r| r.test.as_str())
                .collect::<Vec<_>>(),
            SUITE
        );
        let mut rows = empty_suite();
        crate::compare::first::record(&mut rows, 1, REDIS, &full);
        crate::compare::first::record(&mut rows, 1, LH, &full);
        assert_eq!(suite_counts(&rows), (20, 20, 0));
        assert_eq!(suite_summary(&rows), "**20 of 20 rows, 0 errors.**");
        let t = suite_table(&rows);
        assert!(
            t.contains("| LRANGE_600 (first 600 elements) | 2 769 | 2 769 | 1.00x | 42.623 | 42.623 | 0 / 0 |  |"),
            "{t}"
        );
    }

    #[test]
    fn a_suite_run_that_stopped_names_the_failed_test() {
        let full = Outcome {
            rows: parse_csv(SUITE_CSV),
            error: None,
        };
        // Leasehold's run stopped at SPOP: the 11 tests before it printed.
        let mut lines: Vec<&str> = SUITE_CSV.lines().take(12).collect();
        lines.push("");
        let stopped = Outcome {
            rows: parse_csv(&lines.join("\n")),
            error: Some("Error from server: ERR unknown command 'SPOP'".into()),
        };
        let mut rows = empty_suite();
        crate::compare::first::record(&mut rows, 1, REDIS, &full);
        crate::compare::first::record(&mut rows, 1, LH, &stopped);
        assert_eq!(suite_counts(&rows), (11, 20, 9));
        assert_eq!(suite_summary(&rows), "**11 of 20 rows, 9 errors.**");
        let t = suite_table(&rows);
        assert!(
            t.contains("| SPOP | 51 546 | failed | - | 1.079 | - | 0 / 1 | Leasehold failed in 1 of 1 runs: Error from server: ERR unknown command 'SPOP' |"),
            "{t}"
        );
        assert!(
            t.contains("| ZADD | 28 090 | failed | - | 14.727 | - | 0 / 1 | Leasehold failed in 1 of 1 runs: not run, redis-benchmark stopped at SPOP |"),
            "{t}"
        );
        let one_error = {
            let mut r = empty_suite();
            r[0].cells[LH].failures.push("x".into());
            suite_summary(&r)
        };
        assert_eq!(one_error, "**0 of 20 rows, 1 error.**");
    }

    /// Script rows with one run of `rps[leg]` at each depth.
    fn scripts(rps: [f64; 3]) -> Vec<Row<3>> {
        SCRIPT_PIPELINES
            .iter()
            .map(|&p| {
                let mut row = Row::new(SCRIPT_ROW, p);
                for (leg, cell) in row.cells.iter_mut().enumerate() {
                    cell.rps.push(rps[leg]);
                    cell.p99_ms.push(1.5);
                }
                row
            })
            .collect()
    }

    fn memory(redis: u64, leasehold: u64) -> MemoryResult {
        let m = |after| Memory {
            before: 1_000_000,
            after,
            keys: 10_000,
        };
        MemoryResult {
            name: "sorted set".into(),
            hits: 1,
            redis: Ok(m(redis)),
            leasehold: Ok(m(leasehold)),
        }
    }

    #[test]
    fn targets_and_ratios() {
        let sec = section(
            empty_suite(),
            scripts([40_000.0, 58_000.0, 232_000.0]),
            vec![memory(11_000_000, 9_500_000)],
        );
        let v = verdicts(&sec);
        assert_eq!(v.len(), 2);
        assert_eq!(
            v[0].goal,
            "-P 16: Leasehold EVALSHA / Redis EVALSHA >= 1.50x"
        );
        assert_eq!((v[0].measured.as_str(), v[0].met), ("1.45x", Some(false)));
        assert_eq!(
            v[1],
            Verdict {
                goal: "sorted set: Leasehold bytes/key <= Redis bytes/key".into(),
                measured: "850.0 vs 1000.0".into(),
                met: Some(true),
            }
        );
        let t = script_table(&sec.scripts);
        assert!(
            t.contains("| 16 | Redis EVALSHA | 40 000 | 1.500 |  |  |"),
            "{t}"
        );
        assert!(
            t.contains("| 16 | Leasehold EVALSHA | 58 000 | 1.500 | 1.45x Redis EVALSHA |  |"),
            "{t}"
        );
        assert!(
            t.contains(
                "| 1 | Leasehold TOKENLEASE | 232 000 | 1.500 | 4.00x Leasehold EVALSHA |  |"
            ),
            "{t}"
        );
        let met = section(
            empty_suite(),
            scripts([40_000.0, 60_000.0, 100_000.0]),
            vec![memory(11_000_000, 11_000_001)],
        );
        let v = verdicts(&met);
        assert_eq!(
            v.iter().map(|v| v.met).collect::<Vec<_>>(),
            [Some(true), Some(false)]
        );
        let page = super::section(&met);
        assert!(page.starts_with("## Scripts and data types\n\n"), "{page}");
        assert!(page.contains("**Targets: 1 of 2 met.**"), "{page}");
        assert!(page.contains("**0 of 20 rows, 0 errors.**"), "{page}");
        assert!(
            page.contains("redis-benchmark -p PORT -q -c 50 -n 50000 -r 100000 --csv\n"),
            "{page}"
        );
        assert!(page.contains("-P 16 -r 100000 -n 200000 EVALSHA"), "{page}");
        assert!(page.contains("at -P 1 with `-n 50000`"), "{page}");
    }

    #[test]
    fn script_requests_at_each_depth() {
        assert_eq!(script_requests(200_000, 16), 200_000);
        assert_eq!(script_requests(200_000, 1), 50_000);
        assert_eq!(script_requests(2_000, 1), 1_000);
    }

    #[test]
    fn the_section_splices_in_and_a_skipped_one_says_why() {
        let page = "# T\n\n## Persistence\n\np\n\n## Lease manager\n\nl\n";
        let mut skipped = section(empty_suite(), Vec::new(), Vec::new());
        skipped.skipped = Some("no redis-server".into());
        let text = super::section(&skipped);
        assert_eq!(
            text,
            "## Scripts and data types\n\nNot run: no redis-server.\n\n"
        );
        assert_eq!(
            splice(page, HEADING, &text),
            "# T\n\n## Persistence\n\np\n\n## Scripts and data types\n\nNot run: no redis-server.\n\n## Lease manager\n\nl\n"
        );
    }
}
