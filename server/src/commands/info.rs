//! INFO: every section Redis 7.0 has, in its order, with its field names.
//!
//! `INFO` and `INFO default` give server, clients, memory, persistence,
//! stats, replication, cpu, modules, errorstats, cluster and keyspace;
//! `INFO all` adds commandstats and latencystats; `INFO everything` adds
//! Leasehold's own `leasehold` section (per shard); any number of section
//! names may be given at once, in any case (`INFO cpu KEYSPACE`), with
//! `default`, `all` and `everything` among them; an unknown name adds
//! nothing. Sections come in Redis's order whatever the order asked.
//!
//! Every number is measured, or a true constant (Leasehold never forks, so
//! copy-on-write sizes are 0; there is no eviction, no cluster, no module).
//! Fields Leasehold cannot fill honestly are left out rather than faked:
//! `used_memory_overhead` / `_dataset` / `_startup`, the Lua and function
//! memory fields, the `instantaneous_*` rates, `expired_stale_perc`,
//! `total_reads_processed` / `total_writes_processed`, the CPU
//! `_main_thread` fields; in commandstats `usec` is 0 and latencystats is
//! empty, as commands are not timed (two clock reads per command on the hot
//! path); keyspace's `avg_ttl` is 0 (not estimated).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use leasehold_protocol::{Args, Reply};

use super::table;
use crate::error::OpError;
use crate::session::ConnCtx;
use crate::state::{AclDenied, Shared, StatBaseline};

/// Every INFO section in output order, and the widest request that includes
/// it: `Default` (plain INFO), `All`, or `Everything`.
const SECTIONS: &[(&str, Level)] = &[
    ("server", Level::Default),
    ("clients", Level::Default),
    ("memory", Level::Default),
    ("persistence", Level::Default),
    ("stats", Level::Default),
    ("replication", Level::Default),
    ("cpu", Level::Default),
    ("modules", Level::Default),
    ("commandstats", Level::All),
    ("errorstats", Level::Default),
    ("latencystats", Level::All),
    ("cluster", Level::Default),
    ("keyspace", Level::Default),
    ("leasehold", Level::Everything),
    ("hotkeys", Level::Everything),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Default,
    All,
    Everything,
}

/// `INFO [section ...]`: a verbatim string of `# Section` blocks.
pub fn info(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let mut wanted: Vec<String> = Vec::new();
    while a.remaining() > 0 {
        wanted.push(String::from_utf8_lossy(&a.next()?).to_ascii_lowercase());
    }
    let level = wanted
        .iter()
        .filter_map(|w| match w.as_str() {
            "default" => Some(Level::Default),
            "all" => Some(Level::All),
            "everything" => Some(Level::Everything),
            _ => None,
        })
        .max()
        .or(wanted.is_empty().then_some(Level::Default));
    let sections: Vec<&str> = SECTIONS
        .iter()
        .filter(|(name, at)| level.is_some_and(|l| *at <= l) || wanted.iter().any(|w| w == name))
        .map(|(name, _)| *name)
        .collect();
    let text = render_info(ctx.shared, &sections);
    Ok(Reply::Verbatim("txt", Bytes::from(text)))
}

/// Renders INFO text for the given sections, in Redis's `# Section` format,
/// blocks separated by an empty line.
pub fn render_info(shared: &Shared, sections: &[&str]) -> String {
    let base = shared.baseline.lock().clone();
    let now = shared.stat_snapshot();
    let mut out = String::new();
    for (i, section) in sections.iter().enumerate() {
        if i > 0 {
            out.push_str("\r\n");
        }
        let w = &mut out;
        match *section {
            "server" => server(shared, w),
            "clients" => clients(shared, w),
            "memory" => memory(shared, w),
            "persistence" => super::persistence::info_persistence(shared, w),
            "stats" => stats(shared, &now, &base, w),
            "replication" => super::replication::info_replication(shared, w),
            "cpu" => {
                let [sys, user, sys_children, user_children] = cpu_times();
                let _ = write!(
                    w,
                    "# CPU\r\nused_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\nused_cpu_sys_children:{sys_children:.6}\r\nused_cpu_user_children:{user_children:.6}\r\n"
                );
            }
            "modules" => w.push_str("# Modules\r\n"),
            "commandstats" => commandstats(&now, &base, w),
            "errorstats" => errorstats(shared, &now, &base, w),
            "latencystats" => w.push_str("# Latencystats\r\n"),
            "cluster" => w.push_str(match shared.cluster.is_some() {
                true => "# Cluster\r\ncluster_enabled:1\r\n",
                false => "# Cluster\r\ncluster_enabled:0\r\n",
            }),
            "keyspace" => {
                w.push_str("# Keyspace\r\n");
                let keys = shared.sum(|s| s.keys.get());
                if keys > 0 {
                    let expires = shared.sum(|s| s.expires.get());
                    let _ = write!(w, "db0:keys={keys},expires={expires},avg_ttl=0\r\n");
                }
            }
            "leasehold" => leasehold(shared, w),
            "hotkeys" => hotkeys(shared, w),
            _ => {}
        }
    }
    out
}

fn server(shared: &Shared, w: &mut String) {
    let cfg = shared.config.read();
    let uptime = shared.started.elapsed().as_secs();
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let os = match std::env::consts::OS {
        "linux" => "Linux",
        other => other,
    };
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let unix_us = shared.clock.unix_us();
    let _ = write!(
        w,
        "# Server\r\nredis_version:{}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\nredis_build_id:0\r\nredis_mode:{}\r\nos:{os} {} {}\r\narch_bits:64\r\nmonotonic_clock:POSIX clock_gettime\r\nmultiplexing_api:epoll\r\natomicvar_api:c11-builtin\r\ngcc_version:0.0.0\r\nprocess_id:{}\r\nprocess_supervised:no\r\nrun_id:{}\r\ntcp_port:{}\r\nserver_time_usec:{unix_us}\r\nuptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\nhz:{}\r\nconfigured_hz:{}\r\nlru_clock:{}\r\nexecutable:{exe}\r\nconfig_file:{}\r\nio_threads_active:0\r\nleasehold_version:{}\r\nthreads:{}\r\n",
        super::connection::REDIS_COMPAT_VERSION,
        match shared.cluster.is_some() {
            true => "cluster",
            false => "standalone",
        },
        release.trim(),
        std::env::consts::ARCH,
        std::process::id(),
        shared.run_id,
        shared.local_addr.port(),
        uptime / 86400,
        cfg.expiry.hz,
        cfg.expiry.hz,
        // Redis's LRU clock: seconds, 24 bits.
        (unix_us / 1_000_000) & ((1 << 24) - 1),
        cfg.file.as_deref().map(|p| p.display().to_string()).unwrap_or_default(),
        env!("CARGO_PKG_VERSION"),
        shared.shards,
    );
}

fn clients(shared: &Shared, w: &mut String) {
    let clients = shared.clients.lock();
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let max_in = clients
        .values()
        .map(|c| get(&c.buffers.qbuf))
        .max()
        .unwrap_or(0);
    let max_out = clients
        .values()
        .map(|c| get(&c.buffers.obl))
        .max()
        .unwrap_or(0);
    let _ = write!(
        w,
        "# Clients\r\nconnected_clients:{}\r\ncluster_connections:0\r\nmaxclients:{}\r\nclient_recent_max_input_buffer:{max_in}\r\nclient_recent_max_output_buffer:{max_out}\r\nblocked_clients:0\r\ntracking_clients:0\r\nclients_in_timeout_table:0\r\n",
        clients.len(),
        shared.config.read().net.maxclients
    );
}

/// The peak of `used_memory` seen by INFO so far (Redis samples it in its
/// cron; Leasehold when INFO memory is read).
static PEAK: AtomicU64 = AtomicU64::new(0);

fn memory(shared: &Shared, w: &mut String) {
    use tikv_jemalloc_ctl::{epoch, stats};
    let _ = epoch::advance();
    let read = |r: tikv_jemalloc_ctl::Result<usize>| r.unwrap_or(0) as u64;
    let used = read(stats::allocated::read());
    let max = shared.config.read().limits.maxmemory as u64;
    let active = read(stats::active::read());
    let resident = read(stats::resident::read());
    let rss = rss_bytes();
    let peak = PEAK.fetch_max(used, Ordering::Relaxed).max(used);
    let system = total_system_memory();
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let clients_mem: u64 = shared
        .clients
        .lock()
        .values()
        .map(|c| c.buffers.tot_mem.load(Ordering::Relaxed))
        .sum();
    let backlog = shared.repl.backlog.capacity() as u64;
    let _ = write!(
        w,
        "# Memory\r\nused_memory:{used}\r\nused_memory_human:{}\r\nused_memory_rss:{rss}\r\nused_memory_rss_human:{}\r\nused_memory_peak:{peak}\r\nused_memory_peak_human:{}\r\nused_memory_peak_perc:{:.2}%\r\nallocator_allocated:{used}\r\nallocator_active:{active}\r\nallocator_resident:{resident}\r\ntotal_system_memory:{system}\r\ntotal_system_memory_human:{}\r\nmaxmemory:{max}\r\nmaxmemory_human:{}\r\nmaxmemory_policy:noeviction\r\nallocator_frag_ratio:{:.2}\r\nallocator_frag_bytes:{}\r\nallocator_rss_ratio:{:.2}\r\nallocator_rss_bytes:{}\r\nrss_overhead_ratio:{:.2}\r\nrss_overhead_bytes:{}\r\nmem_fragmentation_ratio:{:.2}\r\nmem_fragmentation_bytes:{}\r\nmem_not_counted_for_evict:0\r\nmem_replication_backlog:{backlog}\r\nmem_total_replication_buffers:{backlog}\r\nmem_clients_slaves:0\r\nmem_clients_normal:{clients_mem}\r\nmem_cluster_links:0\r\nmem_aof_buffer:0\r\nmem_allocator:jemalloc\r\nactive_defrag_running:0\r\nlazyfree_pending_objects:0\r\nlazyfreed_objects:0\r\n",
        human_bytes(used),
        human_bytes(rss),
        human_bytes(peak),
        ratio(used, peak) * 100.0,
        human_bytes(system),
        human_bytes(max),
        ratio(active, used),
        active.saturating_sub(used),
        ratio(resident, active),
        resident.saturating_sub(active),
        ratio(rss, resident),
        rss.saturating_sub(resident),
        ratio(rss, used),
        rss.saturating_sub(used),
    );
}

fn stats(shared: &Shared, now: &StatBaseline, base: &StatBaseline, w: &mut String) {
    let repl = &shared.repl.syncs;
    let _ = write!(
        w,
        "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nrejected_connections:{}\r\nsync_full:{}\r\nsync_partial_ok:{}\r\nsync_partial_err:{}\r\nexpired_keys:{}\r\nexpired_time_cap_reached_count:0\r\nevicted_keys:0\r\nevicted_clients:0\r\ntotal_eviction_exceeded_time:0\r\ncurrent_eviction_exceeded_time:0\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\npubsub_channels:{}\r\npubsub_patterns:{}\r\npubsubshard_channels:0\r\nlatest_fork_usec:0\r\ntotal_forks:0\r\nmigrate_cached_sockets:0\r\nslave_expires_tracked_keys:0\r\nactive_defrag_hits:0\r\nactive_defrag_misses:0\r\nactive_defrag_key_hits:0\r\nactive_defrag_key_misses:0\r\ntotal_active_defrag_time:0\r\ncurrent_active_defrag_time:0\r\ntracking_total_keys:0\r\ntracking_total_items:0\r\ntracking_total_prefixes:0\r\nunexpected_error_replies:0\r\ntotal_error_replies:{}\r\ndump_payload_sanitizations:0\r\nio_threaded_reads_processed:0\r\nio_threaded_writes_processed:0\r\nacl_access_denied_auth:{}\r\nacl_access_denied_cmd:{}\r\nacl_access_denied_key:{}\r\nacl_access_denied_channel:{}\r\ncross_shard_batches:{}\r\n",
        now.conns - base.conns,
        now.commands - base.commands,
        now.net_in - base.net_in,
        now.net_out - base.net_out,
        now.rejected - base.rejected,
        repl.full.load(Ordering::Relaxed),
        repl.partial_ok.load(Ordering::Relaxed),
        repl.partial_err.load(Ordering::Relaxed),
        now.expired - base.expired,
        now.hits - base.hits,
        now.misses - base.misses,
        shared.pubsub.channel_count(),
        shared.pubsub.numpat(),
        now.errors - base.errors,
        shared.counters.auth_failures.load(Ordering::Relaxed),
        acl_denied(shared, AclDenied::Command),
        acl_denied(shared, AclDenied::Key),
        acl_denied(shared, AclDenied::Channel),
        shared.sum(|s| s.batches_in.get()),
    );
}

/// Requests ACL refused for `why` since the start (INFO
/// `acl_access_denied_*`, `leasehold_acl_denials_total`).
pub fn acl_denied(shared: &Shared, why: AclDenied) -> u64 {
    shared.counters.acl_denied[why as usize].load(Ordering::Relaxed)
}

/// Bytes allocated by the process (jemalloc's `stats.allocated`, refreshed),
/// INFO's `used_memory` and what `maxmemory` is held against.
pub fn used_memory() -> u64 {
    let _ = tikv_jemalloc_ctl::epoch::advance();
    tikv_jemalloc_ctl::stats::allocated::read().unwrap_or(0) as u64
}

fn commandstats(now: &StatBaseline, base: &StatBaseline, w: &mut String) {
    w.push_str("# Commandstats\r\n");
    let since = |v: &[u64], b: &[u64], i: usize| v[i] - b.get(i).copied().unwrap_or(0);
    for (i, c) in table().commands.iter().enumerate() {
        let calls = since(&now.calls, &base.calls, i);
        let failed = since(&now.failed, &base.failed, i);
        let rejected = since(&now.rejected_calls, &base.rejected_calls, i);
        if calls + failed + rejected > 0 {
            let _ = write!(
                w,
                "cmdstat_{}:calls={calls},usec=0,usec_per_call=0.00,rejected_calls={rejected},failed_calls={failed}\r\n",
                c.name
            );
        }
    }
}

/// `errorstat_<CODE>:count=N` for every error code sent since the last
/// CONFIG RESETSTAT, the known codes first, then any other in the order
/// they were first seen.
fn errorstats(shared: &Shared, now: &StatBaseline, base: &StatBaseline, w: &mut String) {
    w.push_str("# Errorstats\r\n");
    for (i, code) in crate::error::ERROR_CODES.iter().enumerate() {
        let n = now.error_codes[i] - base.error_codes.get(i).copied().unwrap_or(0);
        if n > 0 {
            let _ = write!(w, "errorstat_{code}:count={n}\r\n");
        }
    }
    for (code, n) in shared.other_error_codes() {
        let before = base
            .other_codes
            .iter()
            .find(|(c, _)| *c == code)
            .map_or(0, |(_, b)| *b);
        if n > before {
            let _ = write!(w, "errorstat_{code}:count={}\r\n", n - before);
        }
    }
}

fn leasehold(shared: &Shared, w: &mut String) {
    w.push_str("# Leasehold\r\n");
    for (i, s) in shared.shard_stats.iter().enumerate() {
        let _ = write!(
            w,
            "shard{i}:keys={},expires={},commands={},batches_in={},effect_offset={}\r\n",
            s.keys.get(),
            s.expires.get(),
            s.commands_processed.get(),
            s.batches_in.get(),
            s.effect_offset.get()
        );
    }
}

/// `# Hotkeys` (`docs/hotkeys.md`): the per-shard counters, summed.
fn hotkeys(shared: &Shared, w: &mut String) {
    let cfg = shared.config.read();
    let yes = |b: bool| if b { "yes" } else { "no" };
    let _ = write!(
        w,
        "# Hotkeys\r\nhotkey_split_enabled:{}\r\nhotkey_split_keys:{}\r\nhotkey_splits:{}\r\nhotkey_merges:{}\r\nhotkey_local_grants:{}\r\nhotkey_borrows:{}\r\nhotkey_gathers:{}\r\n",
        yes(cfg.ratelimit.hotkey_split),
        shared.sum(|s| s.hotkey_split_keys.get()),
        shared.sum(|s| s.hotkey_splits.get()),
        shared.sum(|s| s.hotkey_merges.get()),
        shared.sum(|s| s.hotkey_local_grants.get()),
        shared.sum(|s| s.hotkey_borrows.get()),
        shared.sum(|s| s.hotkey_gathers.get()),
    );
}

/// Resident set size, bytes: field 2 of `/proc/self/statm` times the page
/// size (4096 on every mainstream Linux); 0 where `/proc` is missing.
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// `MemTotal` of `/proc/meminfo`, bytes (0 where it is missing).
fn total_system_memory() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kb = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    kb * 1024
}

/// Bytes as Redis's `bytesToHuman` writes them: `512B`, `1.50K`, `2.00M`.
fn human_bytes(n: u64) -> String {
    let units = ["B", "K", "M", "G", "T"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n}B")
    } else {
        format!("{v:.2}{}", units[i])
    }
}

/// CPU time of the process and of its waited-for children, seconds, as
/// `(sys, user, sys_children, user_children)`: fields 14-17 of
/// `/proc/self/stat` (Linux), in clock ticks of 1/100 s (USER_HZ, 100 on
/// every mainstream Linux). Zeros where `/proc` is missing.
fn cpu_times() -> [f64; 4] {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let ticks: Vec<u64> = rest
        .split_whitespace()
        .skip(11) // fields 3..=13
        .take(4) // utime, stime, cutime, cstime
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let secs = |i: usize| ticks.get(i).copied().unwrap_or(0) as f64 / 100.0;
    [secs(1), secs(0), secs(3), secs(2)]
}
