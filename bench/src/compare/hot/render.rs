//! The hot-key section's tables, targets and cost model.

use super::{Counts, Row, Section, Setup, HEADING, HOT_THROTTLE, HOT_TOKENLEASE, SETUPS, UNIFORM};
use crate::compare::table::{noisy_note, thousands, SideResult, NOISY_SPREAD};
use crate::compare::with_without::render::{
    commands_block, ms, opening, targets, verdict, x, Verdict,
};

/// Thread counts the model is evaluated at.
pub const MODEL_THREADS: [usize; 3] = [4, 16, 64];

/// `m`: ns to read one cache line another core has just written, the
/// price of each other slot a local grant's reply sums. Not measured here
/// (this machine's two cores cannot show it); a usual figure for two cores
/// of one socket.
pub const LINE_NS: f64 = 80.0;

/// The median ops/s of cell `a` over that of cell `b`.
pub fn ratio(row: &Row, a: Setup, b: Setup) -> Option<f64> {
    match (
        row.cells[a.index()].result.median_ops(),
        row.cells[b.index()].result.median_ops(),
    ) {
        (Some(x), Some(y)) if y > 0.0 => Some(x / y),
        _ => None,
    }
}

/// Requests answered over the runs of cell `s`.
fn requests(row: &Row, s: Setup) -> u64 {
    match &row.cells[s.index()].result {
        SideResult::Runs(r) => r.iter().map(|r| r.requests).sum(),
        _ => 0,
    }
}

/// CPU ns per request of cell `s`: the whole process's, and each shard
/// thread's (both over every request the cell answered).
pub fn cpu_ns(row: &Row, s: Setup) -> Option<(f64, Vec<f64>)> {
    let n = requests(row, s);
    let c = &row.cells[s.index()].counts;
    (n > 0 && c.cpu > 0.0).then(|| {
        let per = |sec: f64| sec * 1e9 / n as f64;
        (per(c.cpu), c.shard_cpu.iter().map(|&v| per(v)).collect())
    })
}

/// The per-request costs of one row, ns of CPU, derived from the split-on,
/// split-off and Redis cells (see [`costs`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// Shards (Leasehold's threads) the row ran on.
    pub shards: usize,
    /// `r`: Redis's CPU per request (one core does everything).
    pub redis: f64,
    /// `s`: split on, the shard threads' CPU per request: a call read,
    /// decided (a slot's compare-and-swap) and answered on one thread.
    pub local: f64,
    /// `o`: split off, the owner thread's CPU per request.
    pub owner: f64,
    /// Split off, the other shard threads' CPU per request, together.
    pub others: f64,
    /// `x = (N o - s) / (N - 1)`: what the owner spends on a call read on
    /// another thread (the batch received, the call run, the reply sent
    /// back), taking its own connections' calls to cost `s`.
    pub at_owner: f64,
    /// `y = N u / (N - 1)`: what the reading thread spends on a call it
    /// sends to the owner (read, forward, write the reply).
    pub at_reader: f64,
}

impl Costs {
    /// `h = x + y - s`: the CPU a hop adds to a call.
    pub fn hop(&self) -> f64 {
        self.at_owner + self.at_reader - self.local
    }

    /// Redis's requests/s on its one core: `1e9 / r`.
    pub fn redis_rps(&self) -> f64 {
        1e9 / self.redis
    }

    /// Unsplit, `n` threads each on a core of its own and the connections
    /// spread evenly: the owner runs every call of the key, `s` for its
    /// own `1/n` of them and `x` for the rest, so it saturates at
    /// `1e9 / (s/n + (n-1) x / n)`; the cores together bound it at
    /// `n 1e9 / (s/n + (n-1)(x+y)/n)`. The smaller of the two.
    pub fn unsplit_rps(&self, n: usize) -> f64 {
        let n = n as f64;
        let owner = self.local / n + (n - 1.0) * self.at_owner / n;
        let all = self.local / n + (n - 1.0) * (self.at_owner + self.at_reader) / n;
        (1e9 / owner).min(n * 1e9 / all)
    }

    /// Split, `n` threads: every call is served where it is read, and a
    /// local grant's reply sums every slot, one cache line each, which
    /// another thread keeps writing: `n 1e9 / (s + (n - N) m)`, `s`
    /// measured at `N` = [`Costs::shards`] and `m` = [`LINE_NS`] for each
    /// slot more. The owner's gathers are left out (none in these runs).
    pub fn split_rps(&self, n: usize) -> f64 {
        let more = n.saturating_sub(self.shards) as f64;
        n as f64 * 1e9 / (self.local + more * LINE_NS)
    }
}

/// The costs of `row`, when all three cells ran and Leasehold had more
/// than one shard. Shard 0..N are the shard threads; the owner is the one
/// that ran the most commands with the split off.
pub fn costs(row: &Row) -> Option<Costs> {
    let (redis, _) = cpu_ns(row, Setup::Redis)?;
    let (_, on) = cpu_ns(row, Setup::SplitOn)?;
    let (_, off) = cpu_ns(row, Setup::SplitOff)?;
    let n = off.len();
    if n < 2 || on.len() != n {
        return None;
    }
    let owner_shard = row.cells[Setup::SplitOff.index()].counts.hottest_shard()?;
    let local: f64 = on.iter().sum();
    let owner = off[owner_shard];
    let others: f64 = off.iter().sum::<f64>() - owner;
    let nf = n as f64;
    Some(Costs {
        shards: n,
        redis,
        local,
        owner,
        others,
        at_owner: (nf * owner - local) / (nf - 1.0),
        at_reader: nf * others / (nf - 1.0),
    })
}

/// The row named `name` at depth `pipeline`.
fn find<'a>(rows: &'a [Row], name: &str, pipeline: usize) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.workload.name == name && r.workload.pipeline == pipeline)
}

/// The target "split on / split off >= `min`" on `row`; its measure also
/// gives both cells' spread ((max - min) / median of the runs) when either
/// is over [`NOISY_SPREAD`], so a target met or missed inside the noise
/// says so.
fn on_over_off(goal: String, row: Option<&Row>, min: f64) -> Verdict {
    let mut v = verdict(
        goal,
        row.and_then(|r| ratio(r, Setup::SplitOn, Setup::SplitOff)),
        |v| v >= min,
    );
    let spreads =
        row.map(|r| [Setup::SplitOn, Setup::SplitOff].map(|s| r.cells[s.index()].result.spread()));
    if let Some([Some(a), Some(b)]) = spreads {
        if a.max(b) > NOISY_SPREAD {
            v.measured = format!(
                "{} (noisy: runs spread {:.0}% on, {:.0}% off)",
                v.measured,
                a * 100.0,
                b * 100.0
            );
        }
    }
    v
}

/// The section's targets.
pub fn verdicts(rows: &[Row]) -> Vec<Verdict> {
    let mut out = Vec::new();
    for name in [HOT_TOKENLEASE, HOT_THROTTLE] {
        for (p, min) in [(1, 1.15), (16, 1.0)] {
            out.push(on_over_off(
                format!("{name} -P {p}: split on / split off >= {min:.2}x"),
                find(rows, name, p),
                min,
            ));
        }
    }
    for name in [HOT_TOKENLEASE, HOT_THROTTLE] {
        for p in [1, 16] {
            let share = find(rows, name, p)
                .and_then(|r| r.cells[Setup::SplitOn.index()].counts.hottest_share());
            out.push(Verdict {
                goal: format!(
                    "{name} -P {p}: the hottest shard runs <= 60% of the commands (split on)"
                ),
                measured: pct(share),
                met: share.map(|v| v <= 0.60),
            });
        }
    }
    out.push(on_over_off(
        format!("{UNIFORM} -P 16: split on / split off >= 0.98x"),
        find(rows, UNIFORM, 16),
        0.98,
    ));
    out
}

/// A share as `53.4%`, or `-` (one decimal, so a share just over a
/// threshold does not print as the threshold).
fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.1}%", v * 100.0))
}

/// Cell `s`'s median ops/s, `failed` or `-`.
fn ops(row: &Row, s: Setup) -> String {
    match &row.cells[s.index()].result {
        SideResult::Failed(_) => "failed".into(),
        r => r.median_ops().map_or("-".into(), thousands),
    }
}

/// Noise and failure notes of a row.
fn notes(row: &Row) -> String {
    let mut n = Vec::new();
    for s in SETUPS {
        match &row.cells[s.index()].result {
            SideResult::Failed(e) => n.push(format!("{} failed: {e}", s.label())),
            r => n.extend(noisy_note(s.label(), r.spread())),
        }
    }
    n.join("; ")
}

/// `a / b` as a whole number of ns, or `-`.
fn ns(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}"))
}

/// What the split's counters say about cell `c` (split on): local grants
/// as a share of the requests, borrows, gathers, splits.
fn split_counts(c: &Counts, requests: u64) -> String {
    let local = (requests > 0).then(|| c.local_grants as f64 / requests as f64);
    format!(
        "{} local, {} borrows, {} gathers, {} splits",
        pct(local),
        thousands(c.borrows as f64),
        thousands(c.gathers as f64),
        c.splits
    )
}

/// The whole section.
pub fn section(s: &Section) -> String {
    let mut out = match opening(HEADING, s.skipped.as_deref(), s.quick) {
        Ok(o) => o,
        Err(o) => return o,
    };
    out.push_str(&format!(
        "Leasehold `--threads {}` with the hot-key split on (the default) and with \
         `--hotkey-split no`, and Redis running the equivalent Lua script (EVALSHA), \
         all three running at once; every row runs once per round on each, rotating \
         which goes first, {} round(s) of {} s, {} connections, one generator thread. \
         Cells are medians of the rounds. The machine has 2 cores and the load \
         generator takes one of them, so Leasehold's two shard threads share about one \
         core: a split spreads a hot key's work over threads, which pays most when each \
         has a core of its own (see the model below). {}.\n\n",
        s.threads, s.rounds, s.duration, s.connections, s.facts
    ));
    out.push_str(
        "One hot key: every request names it (`TOKENLEASE hot:tb 100000000 1 1000 1`, \
         `CL.THROTTLE hot:gc 99999999 1 3600 1`, a large limit draining slowly, so every \
         call is granted). Zipf and uniform rows: `TOKENLEASE z:<key> 1000000 10 1000 1` \
         over 100 000 keys, no key reaching its limit during the runs.\n\n",
    );
    out.push_str(
        "| load | -P | Redis (Lua) rps | split on rps | split off rps | on / off | on / Redis | off / Redis | p99 ms Redis / on / off | notes |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---|---|\n",
    );
    for r in &s.rows {
        let p99 = |st: Setup| ms(r.cells[st.index()].result.median_p99());
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {} |\n",
            r.workload.name,
            r.workload.pipeline,
            ops(r, Setup::Redis),
            ops(r, Setup::SplitOn),
            ops(r, Setup::SplitOff),
            x(ratio(r, Setup::SplitOn, Setup::SplitOff)),
            x(ratio(r, Setup::SplitOn, Setup::Redis)),
            x(ratio(r, Setup::SplitOff, Setup::Redis)),
            p99(Setup::Redis),
            p99(Setup::SplitOn),
            p99(Setup::SplitOff),
            notes(r)
        ));
    }
    out.push_str(
        "\nWhere the commands ran: the busiest shard's share of the commands the shards \
         ran over the row's runs (INFO leasehold `shardN:commands`, read before and after \
         each run), the split's counters (INFO hotkeys, over the same runs; *local* is \
         local grants over requests), and CPU time per request (ns; `/proc/<pid>/stat` \
         of the process, and `/proc/<pid>/task/*/stat` of each shard thread).\n\n\
         | load | -P | hottest shard, on | hottest shard, off | split on: counters | CPU ns/request Redis / on / off | on, per shard | off, per shard |\n\
         |---|---:|---:|---:|---|---|---|---|\n",
    );
    for r in &s.rows {
        let share = |st: Setup| pct(r.cells[st.index()].counts.hottest_share());
        let cpu = |st: Setup| cpu_ns(r, st);
        let per_shard = |st: Setup| {
            cpu(st).map_or("-".into(), |(_, v)| {
                v.iter()
                    .map(|n| format!("{n:.0}"))
                    .collect::<Vec<_>>()
                    .join(" + ")
            })
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} / {} / {} | {} | {} |\n",
            r.workload.name,
            r.workload.pipeline,
            share(Setup::SplitOn),
            share(Setup::SplitOff),
            split_counts(
                &r.cells[Setup::SplitOn.index()].counts,
                requests(r, Setup::SplitOn)
            ),
            ns(cpu(Setup::Redis).map(|c| c.0)),
            ns(cpu(Setup::SplitOn).map(|c| c.0)),
            ns(cpu(Setup::SplitOff).map(|c| c.0)),
            per_shard(Setup::SplitOn),
            per_shard(Setup::SplitOff),
        ));
    }
    out.push_str(&model(&s.rows));
    out.push_str(
        "\nA target is judged on the medians; where a cell's runs spread more than 20% \
         its measure says so, and a result inside that spread is not a firm one.\n\n",
    );
    out.push_str(&targets(&verdicts(&s.rows)));
    out.push_str(&format!(
        "\nServers:\n\n{}",
        commands_block(&s.servers).trim_start()
    ));
    out.push_str(&commands_block(&s.commands));
    out
}

/// The cost model of the one-hot-key TOKENLEASE rows.
pub fn model(rows: &[Row]) -> String {
    let mut out = format!(
        "\n### The model\n\n\
         From the one-hot-key TOKENLEASE rows (ns of CPU per request; N = shards here): \
         `s` = split on, all shard threads; `o` = split off, the owner thread; `u` = \
         split off, the other threads; `x = (N o - s) / (N - 1)` = the owner's work for \
         a call read on another thread; `y = N u / (N - 1)` = the reading thread's work \
         for it; `h = x + y - s` = what a hop adds; `r` = Redis. With n threads each on \
         a core: Redis `1e9 / r`; unsplit `min(1e9 / (s/n + (n-1) x/n), n 1e9 / (s/n + \
         (n-1)(x+y)/n))` (the owner runs every call of the key); split `n 1e9 / (s + (n - N) m)`: \
         every call is served where it is read, and each local grant's reply sums all n \
         slots, one cache line each that another thread keeps writing, `m` = {LINE_NS:.0} \
         ns a line (assumed, not measured: two cores cannot show it); no gathers (none \
         happened in these runs).\n\n",
    );
    for p in [16, 1] {
        let Some(c) = find(rows, HOT_TOKENLEASE, p).and_then(costs) else {
            continue;
        };
        out.push_str(&format!(
            "-P {p}: s = {:.0}, o = {:.0}, u = {:.0}, x = {:.0}, y = {:.0}, h = {:.0}, r = {:.0}.\n\n\
             | -P {p}, threads | Redis (one core) | unsplit | split | split / unsplit | split / Redis |\n\
             |---:|---:|---:|---:|---:|---:|\n",
            c.local,
            c.owner,
            c.others,
            c.at_owner,
            c.at_reader,
            c.hop(),
            c.redis
        ));
        for n in MODEL_THREADS {
            let (u, sp, rd) = (c.unsplit_rps(n), c.split_rps(n), c.redis_rps());
            out.push_str(&format!(
                "| {n} | {} | {} | {} | {:.1}x | {:.1}x |\n",
                thousands(rd),
                thousands(u),
                thousands(sp),
                sp / u,
                sp / rd
            ));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::hot::{rows, Cell};
    use crate::compare::with_without::one_run;

    /// A row with these ops/s per set-up, one run each, and `counts`.
    fn row(name: &str, pipeline: usize, ops: [f64; 3], counts: [Counts; 3]) -> Row {
        let workload = rows()
            .into_iter()
            .find(|w| w.name == name && w.pipeline == pipeline)
            .unwrap();
        let mut counts = counts.into_iter();
        Row {
            workload,
            cells: ops.map(|o| Cell {
                result: one_run(o),
                counts: counts.next().unwrap(),
            }),
        }
    }

    fn shards(commands: Vec<u64>, cpu: Vec<f64>, total: f64) -> Counts {
        Counts {
            shard_commands: commands,
            shard_cpu: cpu,
            cpu: total,
            ..Counts::default()
        }
    }

    #[test]
    fn shard_commands_read_every_shard_line_in_order() {
        let info =
            "# Leasehold\r\nshard1:keys=3,expires=0,commands=700,batches_in=2,effect_offset=9\r\n\
                    shard0:keys=1,expires=0,commands=300,batches_in=0,effect_offset=0\r\n";
        assert_eq!(super::super::shard_commands(info), vec![300, 700]);
        let c = shards(vec![300, 700], vec![], 0.0);
        assert_eq!(c.hottest_share(), Some(0.7));
        assert_eq!(c.hottest_shard(), Some(1));
    }

    #[test]
    fn costs_and_the_model_follow_the_formulas() {
        // One run of 1e6 requests each (one_run(ops) answers ops requests).
        // Redis 2 s of CPU: r = 2000 ns. Split on: 0.6 + 0.6 s: s = 1200.
        // Split off: owner 1.0 s, other 0.4 s: o = 1000, u = 400.
        let r = row(
            HOT_TOKENLEASE,
            16,
            [1e6, 1e6, 1e6],
            [
                shards(vec![], vec![], 2.0),
                shards(vec![500, 500], vec![0.6, 0.6], 1.2),
                shards(vec![900, 100], vec![1.0, 0.4], 1.4),
            ],
        );
        let c = costs(&r).unwrap();
        assert_eq!(
            (c.redis, c.local, c.owner, c.others),
            (2000.0, 1200.0, 1000.0, 400.0)
        );
        // x = (2*1000 - 1200) / 1 = 800; y = 2*400 = 800; h = 400.
        assert_eq!((c.at_owner, c.at_reader, c.hop()), (800.0, 800.0, 400.0));
        assert_eq!(c.redis_rps(), 500_000.0);
        // n = 4: owner 1200/4 + 3*800/4 = 900 ns; all 300 + 3*1600/4 = 1500,
        // 4e9/1500 = 2.67M: the owner bounds it at 1.11M.
        assert!((c.unsplit_rps(4) - 1e9 / 900.0).abs() < 1e-6);
        assert_eq!(c.split_rps(2), 2e9 / 1200.0);
        assert_eq!(c.split_rps(4), 4e9 / (1200.0 + 2.0 * LINE_NS));
        let v = verdicts(&[r]);
        let tl16 = v
            .iter()
            .find(|v| v.goal.contains("TOKENLEASE -P 16: split on"))
            .unwrap();
        assert_eq!((tl16.measured.as_str(), tl16.met), ("1.00x", Some(true)));
        let share = v
            .iter()
            .find(|v| v.goal.contains("TOKENLEASE -P 16: the hottest"))
            .unwrap();
        assert_eq!((share.measured.as_str(), share.met), ("50.0%", Some(true)));
        assert_eq!(v.iter().filter(|v| v.met.is_none()).count(), v.len() - 2);
    }
}
