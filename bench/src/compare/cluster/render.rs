//! The cluster section's markdown.

use super::probe::{MovedCost, Reshard, BEFORE};
use super::{Section, HEADING, LEGS, SELECTION};
use crate::compare::first::Row;
use crate::compare::servers::Kind;
use crate::compare::table::{noisy_note, spread, thousands};
use crate::compare::with_without::render::{commands_block, ms, opening, x};

/// The section as markdown, opening with [`HEADING`].
pub fn section(sec: &Section) -> String {
    let mut s = match opening(HEADING, sec.skipped.as_deref(), sec.quick) {
        Ok(s) => s,
        Err(not_run) => return not_run,
    };
    s.push_str(&format!(
        "Three primaries each, no replicas, all on this machine's {} cores: Leasehold from \
         `leasehold-cluster local --groups 3 --replicas 0 --no-sentinels` (`--threads {}` per \
         node), Redis 7 from three `redis-server --cluster-enabled yes` joined by \
         `redis-cli --cluster create`. Both clusters run at once. **On 2 cores three nodes \
         and the load generator share the same CPUs, so this measures what cluster mode costs \
         (routing, redirections, the reshard), not how a cluster scales**: a third node adds no \
         CPU here. {} round(s) of Redis's own `redis-benchmark --cluster`, alternating which \
         cluster goes first; cells are the medians of the rounds. {}.\n\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        sec.threads,
        sec.rounds,
        sec.facts
    ));
    s.push_str(&format!("### redis-benchmark --cluster -t {SELECTION}\n\n"));
    s.push_str(&crate::compare::tls::table(&sec.rows));
    s.push_str(
        "\n### Token bucket: TOKENLEASE against the Lua script\n\n\
         `EVALSHA` of [`bench/lua/token_bucket.lua`](../bench/lua/token_bucket.lua) (loaded on every \
         primary) and Leasehold's `TOKENLEASE`, the same arguments (capacity 100, 10 per 1000 ms, \
         1 token), keys `tb:{tag}:__rand_int__`: redis-benchmark puts, per connection, a hash tag \
         of a slot of the node it talks to in place of `{tag}`, so every request goes to its \
         owner at once.\n\n",
    );
    s.push_str(&script_table(&sec.scripts));
    s.push_str(&format!(
        "\n### The cost of one MOVED\n\n\
         {} GETs of one key of group 1 on two open connections, alternating: sent to the owner \
         (*direct*), and sent to a primary of group 0, answered `-MOVED`, then sent to the owner \
         (*redirected*: both round trips, as a client that follows the redirection pays it). \
         One request at a time, no other load from this benchmark (the machine's other work shows in the load average above).\n\n",
        sec.moved_samples
    ));
    s.push_str(&moved_table(&sec.moved));
    let (slots, keys) = sec.reshard_size;
    s.push_str(&format!(
        "\n### A reshard of {slots} slots holding {} keys\n\n\
         Slots 0-{} (group 0's) filled with {} string keys (`SET r:<n> r:<n>`, pipelined 1000 \
         deep), then moved to group 1 by each cluster's own tool, 100 keys per MIGRATE: \
         `leasehold-cluster reshard` and `redis-cli --cluster reshard`. Meanwhile one client \
         GETs random keys of the range, one at a time, following MOVED and ASK; its latency \
         over the {} s before the reshard and during it. The probe checks every reply is the \
         key's value.\n\n",
        thousands(keys as f64),
        slots.saturating_sub(1),
        thousands(keys as f64),
        BEFORE.as_secs()
    ));
    s.push_str(&reshard_table(&sec.reshard));
    s.push_str(&commands_block(&sec.commands));
    let words: Vec<String> = sec
        .reshard
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok().map(|r| r.command.clone()))
        .collect();
    s.push_str(&commands_block(&words));
    s.push('\n');
    s
}

/// Notes of a row: noisy cells and the first failure of each.
fn notes<const N: usize>(labels: &[&str; N], row: &Row<N>) -> String {
    let mut notes: Vec<String> = labels
        .iter()
        .zip(&row.cells)
        .filter_map(|(l, c)| noisy_note(l, spread(&c.rps)))
        .collect();
    for (l, c) in labels.iter().zip(&row.cells) {
        notes.extend(c.failures.first().map(|f| format!("{l}: {f}")));
    }
    notes.join("; ")
}

fn script_table(rows: &[Row<3>]) -> String {
    let mut s = format!(
        "| -P | {} rps | {} rps | {} rps | TOKENLEASE / Redis EVALSHA | p99 ms ({}) | notes |\n\
         |---:|---:|---:|---:|---:|---|---|\n",
        LEGS[0],
        LEGS[1],
        LEGS[2],
        LEGS.join(", ")
    );
    for r in rows {
        let p99: Vec<String> = r.cells.iter().map(|c| ms(c.median_p99())).collect();
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.pipeline,
            r.cells[0].rps_cell(),
            r.cells[1].rps_cell(),
            r.cells[2].rps_cell(),
            x(r.ratio(2, 0)),
            p99.join(" / "),
            notes(&LEGS, r)
        ));
    }
    s
}

/// Microseconds with one decimal, from ms.
fn us(v: f64) -> String {
    format!("{:.1}", v * 1000.0)
}

fn moved_table(rows: &[(Kind, Result<MovedCost, String>)]) -> String {
    let mut s = String::from(
        "| cluster | direct p50 µs | redirected p50 µs | one MOVED costs (p50) | direct p99 µs | redirected p99 µs | direct mean µs | redirected mean µs |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (kind, r) in rows {
        match r {
            Ok(m) => s.push_str(&format!(
                "| {} | {} | {} | +{} µs ({}) | {} | {} | {} | {} |\n",
                kind.label(),
                us(m.direct.p50),
                us(m.redirected.p50),
                us(m.redirected.p50 - m.direct.p50),
                x(Some(m.redirected.p50 / m.direct.p50)),
                us(m.direct.p99),
                us(m.redirected.p99),
                us(m.direct.mean),
                us(m.redirected.mean),
            )),
            Err(e) => s.push_str(&format!("| {} | failed: {e} |||||||\n", kind.label())),
        }
    }
    s
}

fn reshard_table(rows: &[(Kind, Result<Reshard, String>)]) -> String {
    let mut s = String::from(
        "| cluster | keys | reshard s | keys/s | probe p50 ms before / during | probe p99 ms before / during | probe max ms during | probe GET/s before / during | probe errors during |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for (kind, r) in rows {
        match r {
            Ok(r) => s.push_str(&format!(
                "| {} | {} | {:.1} | {} | {} / {} | {} / {} | {} | {} / {} | {} |\n",
                kind.label(),
                thousands(r.keys as f64),
                r.seconds,
                thousands(r.keys as f64 / r.seconds),
                ms(Some(r.before.p50)),
                ms(Some(r.during.p50)),
                ms(Some(r.before.p99)),
                ms(Some(r.during.p99)),
                ms(Some(r.during.max)),
                thousands(r.probe_rps.0),
                thousands(r.probe_rps.1),
                match (&r.first_error, r.probe_errors) {
                    (_, 0) => "0".to_string(),
                    (Some(e), n) => format!("{n} (first: {e})"),
                    (None, n) => n.to_string(),
                },
            )),
            Err(e) => s.push_str(&format!("| {} | failed: {e} ||||||||\n", kind.label())),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Latency;

    fn lat(p50: f64, p99: f64) -> Latency {
        Latency {
            p50,
            p99,
            p999: p99,
            max: 2.0 * p99,
            mean: p50,
        }
    }

    #[test]
    fn the_moved_and_reshard_tables_give_differences_and_rates() {
        let moved = vec![
            (
                Kind::Leasehold,
                Ok(MovedCost {
                    samples: 10,
                    direct: lat(0.050, 0.100),
                    redirected: lat(0.125, 0.300),
                }),
            ),
            (Kind::Redis, Err("no node".to_string())),
        ];
        let t = moved_table(&moved);
        assert!(
            t.contains(
                "| Leasehold | 50.0 | 125.0 | +75.0 µs (2.50x) | 100.0 | 300.0 | 50.0 | 125.0 |"
            ),
            "{t}"
        );
        assert!(t.contains("| Redis | failed: no node |"), "{t}");
        let reshard = vec![(
            Kind::Leasehold,
            Ok(Reshard {
                kind: Kind::Leasehold,
                keys: 1_000_000,
                slots: 1000,
                fill_s: 1.0,
                seconds: 20.0,
                before: lat(0.035, 0.080),
                during: lat(0.100, 1.500),
                probe_rps: (25_000.0, 3_500.0),
                probe_errors: 0,
                first_error: None,
                command: String::new(),
            }),
        )];
        let t = reshard_table(&reshard);
        assert!(
            t.contains("| Leasehold | 1 000 000 | 20.0 | 50 000 | 0.035 / 0.100 | 0.080 / 1.500 | 3.000 | 25 000 / 3 500 | 0 |"),
            "{t}"
        );
    }
}
