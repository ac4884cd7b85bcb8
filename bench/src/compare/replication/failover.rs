//! Failover by stock Redis Sentinel: three sentinels, a primary and two
//! replicas of one kind; the primary is killed (SIGKILL) and the clock runs
//! until a write succeeds on the primary a sentinel names.

use std::path::Path;
use std::time::{Duration, Instant};

use leasehold_protocol::Reply;

use super::nodes::{self, Nodes};
use crate::compare::servers::Server;

/// One failover: how long after the kill each step came.
#[derive(Debug, Clone, PartialEq)]
pub struct Failover {
    /// Until the first sentinel named another primary.
    pub named: Duration,
    /// Until the first INCR that succeeded on the named primary.
    pub writable: Duration,
}

/// The command lines of one round's processes, for the report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Setup {
    /// The primary, the two replicas, then the three sentinels.
    pub commands: Vec<String>,
}

/// How long to wait for the sentinels to know both replicas and each other
/// (they read the primary's INFO every 10 s and say hello every 2 s).
const DISCOVERY_LIMIT: Duration = Duration::from_secs(60);
/// How long to wait for a writable new primary after the kill.
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);
/// Pause between two polls after the kill.
const POLL: Duration = Duration::from_millis(10);

/// One round: starts the six processes (their files under `dir`), waits
/// until every sentinel sees two replicas and two other sentinels, kills
/// the primary and times the failover. Every process is stopped on return.
///
/// # Errors
/// A process that does not start, discovery or failover not done in time.
pub fn round(nodes: &Nodes, redis_bin: &Path, dir: &Path) -> Result<(Failover, Setup), String> {
    let e = |e: std::io::Error| e.to_string();
    let primary = nodes.primary("failover-primary").map_err(e)?;
    let replicas = [
        nodes
            .replica("failover-replica-1", primary.port)
            .map_err(e)?,
        nodes
            .replica("failover-replica-2", primary.port)
            .map_err(e)?,
    ];
    for r in &replicas {
        nodes::wait_synced(&primary, r)?;
    }
    std::fs::create_dir_all(dir).map_err(e)?;
    let sentinels: Vec<Server> = (0..3)
        .map(|_| nodes::sentinel(redis_bin, dir, primary.port))
        .collect::<Result<_, _>>()
        .map_err(e)?;
    let mut setup = Setup::default();
    setup.commands.push(primary.command_line.clone());
    setup
        .commands
        .extend(replicas.iter().map(|r| r.command_line.clone()));
    setup
        .commands
        .extend(sentinels.iter().map(|s| s.command_line.clone()));
    nodes::wait_until(
        "every sentinel sees both replicas and the other two sentinels",
        DISCOVERY_LIMIT,
        Duration::from_millis(100),
        || sentinels.iter().all(|s| nodes::sentinel_ready(s, 2, 2)),
    )?;
    let old = primary.port;
    let killed = Instant::now();
    drop(primary); // SIGKILL
    let mut named = None;
    let deadline = killed + FAILOVER_LIMIT;
    while Instant::now() < deadline {
        if let Some(port) = nodes::named_primary(&sentinels[0]).filter(|&p| p != old) {
            let at = *named.get_or_insert_with(|| killed.elapsed());
            let node = replicas.iter().find(|r| r.port == port);
            let wrote = node.and_then(|n| n.conn().ok()?.call(&["INCR", "failover:writes"]).ok());
            if matches!(wrote, Some(Reply::Int(_))) {
                return Ok((
                    Failover {
                        named: at,
                        writable: killed.elapsed(),
                    },
                    setup,
                ));
            }
        }
        std::thread::sleep(POLL);
    }
    Err(match named {
        Some(at) => format!(
            "a new primary was named after {:.2} s but took no write within {} s",
            at.as_secs_f64(),
            FAILOVER_LIMIT.as_secs()
        ),
        None => format!("no new primary named within {} s", FAILOVER_LIMIT.as_secs()),
    })
}
