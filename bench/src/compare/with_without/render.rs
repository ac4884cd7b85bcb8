//! The tables and targets both "with / without" sections print.

use super::{cell, Names, Row, KINDS};
use crate::compare::servers::Kind;
use crate::compare::table::{noisy_note, thousands, SideResult};

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

/// A target on ratio `v`, met when `met` says so.
pub fn verdict(goal: String, v: Option<f64>, met: impl Fn(f64) -> bool) -> Verdict {
    Verdict {
        goal,
        measured: x(v),
        met: v.map(met),
    }
}

/// What Leasehold with the feature is held to against Redis (or the Lua
/// script) with it: the least ratio, and whether equal to it is short.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OverRedis {
    /// The threshold.
    pub min: f64,
    /// Above it (`>`) rather than at least (`>=`).
    pub strictly: bool,
}

/// Two targets per row of `rows`: Leasehold with the feature over
/// Leasehold without it, at least `own_min`; and Leasehold with it over
/// Redis (the Lua script, for a scripted row) with it, as `over_redis`
/// says for a scripted row (`true`) or not.
pub fn row_verdicts<E>(
    rows: &[Row<E>],
    names: &Names,
    own_min: f64,
    over_redis: impl Fn(bool) -> OverRedis,
) -> Vec<Verdict> {
    let (redis_with, lh_without, lh_with) = (
        cell(Kind::Redis, true),
        cell(Kind::Leasehold, false),
        cell(Kind::Leasehold, true),
    );
    let (with, without) = (
        names.label(Kind::Leasehold, true),
        names.label(Kind::Leasehold, false),
    );
    let mut out = Vec::new();
    for row in rows {
        let name = row.workload.name;
        out.push(verdict(
            format!("{name}: {with} / {without} >= {own_min:.2}x"),
            ratio(row, lh_with, lh_without),
            |v| v >= own_min,
        ));
        let lua = row.workload.redis.script.is_some();
        let what = if lua { "Lua" } else { "Redis" };
        let OverRedis { min, strictly } = over_redis(lua);
        let op = if strictly { ">" } else { ">=" };
        out.push(verdict(
            format!("{name}: {with} / {what}{} {op} {min:.2}x", names.with_label),
            ratio(row, lh_with, redis_with),
            |v| if strictly { v > min } else { v >= min },
        ));
    }
    out
}

/// The median ops/s of cell `a` over that of cell `b`.
pub fn ratio<E>(row: &Row<E>, a: usize, b: usize) -> Option<f64> {
    match (row.cells[a].median_ops(), row.cells[b].median_ops()) {
        (Some(x), Some(y)) if y > 0.0 => Some(x / y),
        _ => None,
    }
}

/// Milliseconds to three places, or `-`.
pub fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.3}"))
}

/// A ratio as `1.23x`, or `-`.
pub fn x(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}x"))
}

/// Cell `c`'s median ops/s, `failed` or `-`.
pub fn ops<E>(row: &Row<E>, c: usize) -> String {
    match &row.cells[c] {
        SideResult::Failed(_) => "failed".into(),
        s => s.median_ops().map_or("-".into(), thousands),
    }
}

/// The start of a section run on its own: its heading, then either why it
/// did not run (`Err`, the whole section) or the smoke-run warning with
/// `quick` (`Ok`, to go on with).
pub fn opening(heading: &str, skipped: Option<&str>, quick: bool) -> Result<String, String> {
    let mut s = format!("{heading}\n\n");
    if let Some(why) = skipped {
        s.push_str(&format!("Not run: {why}.\n\n"));
        return Err(s);
    }
    if quick {
        s.push_str("**These numbers come from a `--quick` smoke run: too short to quote.**\n\n");
    }
    Ok(s)
}

/// `lines` as a `sh` code block.
pub fn sh_block(lines: &[String]) -> String {
    format!("```sh\n{}\n```\n", lines.join("\n"))
}

/// A blank line and `cmds` as a `sh` code block; nothing if there are none.
pub fn commands_block(cmds: &[String]) -> String {
    if cmds.is_empty() {
        String::new()
    } else {
        format!("\n{}", sh_block(cmds))
    }
}

/// The targets line and table.
pub fn targets(v: &[Verdict]) -> String {
    let met = v.iter().filter(|v| v.met == Some(true)).count();
    let mut s = format!(
        "**Targets: {met} of {} met.**\n\n| target | measured | result |\n|---|---:|---|\n",
        v.len()
    );
    for t in v {
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

/// The throughput table: the four cells, the with / without ratios, both
/// with-cells compared, their p99s, and notes (noise, failures, then what
/// `notes` adds for each set-up).
pub fn throughput_table<E>(
    rows: &[Row<E>],
    names: &Names,
    notes: impl Fn(&Row<E>, Kind, bool) -> Vec<String>,
) -> String {
    let (without, with, both) = (names.without_column, names.with_column, names.both);
    let mut s = format!(
        "| workload | -P | Redis {without} ops/s | Redis {with} ops/s | Leasehold {without} ops/s | \
         Leasehold {with} ops/s | Redis with / without | Leasehold with / without | \
         Leasehold / Redis, both {both} | Redis {with} p99 ms | Leasehold {with} p99 ms | notes |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for row in rows {
        let mut n = Vec::new();
        for kind in KINDS {
            for with in [false, true] {
                let c = &row.cells[cell(kind, with)];
                let label = names.label(kind, with);
                n.extend(noisy_note(&label, c.spread()));
                if let SideResult::Failed(why) = c {
                    n.push(format!("{label} failed: {why}"));
                }
                n.extend(notes(row, kind, with));
            }
        }
        let (r, l) = (Kind::Redis, Kind::Leasehold);
        let p99 = |kind| ms(row.cells[cell(kind, true)].median_p99());
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            row.workload.name,
            row.workload.pipeline,
            ops(row, cell(r, false)),
            ops(row, cell(r, true)),
            ops(row, cell(l, false)),
            ops(row, cell(l, true)),
            x(ratio(row, cell(r, true), cell(r, false))),
            x(ratio(row, cell(l, true), cell(l, false))),
            x(ratio(row, cell(l, true), cell(r, true))),
            p99(r),
            p99(l),
            n.join("; ").replace('|', "\\|"),
        ));
    }
    s
}

/// `cpu` seconds per million requests of cell `c`, or `-`.
pub fn per_million<E>(row: &Row<E>, cpu: f64, c: usize) -> String {
    match row.requests(c) {
        0 => "-".into(),
        n => format!("{:.2}", cpu / n as f64 * 1e6),
    }
}

/// CPU seconds per million requests, a line per row and kind: the server
/// without, with, then the `extra` cells (given the row and the kind);
/// `headings` name those columns after "workload" and "server".
pub fn cpu_table<E>(
    rows: &[Row<E>],
    headings: &[&str],
    extra: impl Fn(&Row<E>, Kind) -> Vec<String>,
) -> String {
    let mut s = format!(
        "| workload | server | {} |\n|---|---|",
        headings.join(" | ")
    );
    s.push_str(&"---:|".repeat(headings.len()));
    s.push('\n');
    for row in rows {
        for kind in KINDS {
            let (without, with) = (cell(kind, false), cell(kind, true));
            let mut cells = vec![
                per_million(row, row.cpu[without], without),
                per_million(row, row.cpu[with], with),
            ];
            cells.extend(extra(row, kind));
            s.push_str(&format!(
                "| {} | {} | {} |\n",
                row.workload.name,
                kind.label(),
                cells.join(" | ")
            ));
        }
    }
    s
}

/// For tests: each verdict's measured text and result.
#[cfg(test)]
pub fn measured(v: &[Verdict]) -> Vec<(&str, Option<bool>)> {
    v.iter().map(|v| (v.measured.as_str(), v.met)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_table_heading_has_a_rule_per_column() {
        let t = cpu_table::<()>(&[], &["a", "b"], |_, _| Vec::new());
        assert_eq!(t, "| workload | server | a | b |\n|---|---|---:|---:|\n");
    }
}
