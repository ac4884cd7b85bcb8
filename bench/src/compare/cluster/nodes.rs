//! The two clusters of the cluster section, three primaries each on
//! 127.0.0.1: Leasehold's from `leasehold-cluster local --groups 3
//! --replicas 0 --no-sentinels`, Redis's from three `redis-server
//! --cluster-enabled yes` joined by `redis-cli --cluster create`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use leasehold_protocol::Reply;

use crate::compare::servers::{scratch_dir, shell_join, Kind, Server};
use crate::resp::Conn;

/// Primaries per cluster.
pub const PRIMARIES: u16 = 3;

/// One running cluster: its processes (killed on drop), its primaries'
/// ports (group `gI`, which owns the I-th third of the slots, on
/// `ports[I]`) and the command lines that started it.
#[derive(Debug)]
pub struct Cluster {
    /// Which server.
    pub kind: Kind,
    /// The primaries' ports, by group.
    pub ports: Vec<u16>,
    /// How it was started, for the report.
    pub commands: Vec<String>,
    /// Redis: every node; Leasehold: the `leasehold-cluster local` process,
    /// whose nodes die with it.
    _procs: Vec<Server>,
}

impl Cluster {
    /// `127.0.0.1:port` of group `g`'s primary.
    pub fn addr(&self, g: usize) -> String {
        format!("127.0.0.1:{}", self.ports[g])
    }

    /// `CLUSTER MYID` of group `g`'s primary.
    ///
    /// # Errors
    /// The node does not answer.
    pub fn id(&self, g: usize) -> std::io::Result<String> {
        Conn::connect(&self.addr(g))?.call_text(&["CLUSTER", "MYID"])
    }

    /// FLUSHALL on every primary.
    ///
    /// # Errors
    /// A node that does not answer.
    pub fn flush(&self) -> std::io::Result<()> {
        for g in 0..self.ports.len() {
            Conn::connect(&self.addr(g))?.call(&["FLUSHALL"])?;
        }
        Ok(())
    }
}

/// Waits (at most `limit`) until 127.0.0.1:`port` answers PING with PONG.
fn answers(port: u16, limit: Duration) -> std::io::Result<()> {
    let start = Instant::now();
    loop {
        let pong =
            Conn::connect(&format!("127.0.0.1:{port}")).and_then(|mut c| c.call_text(&["PING"]));
        if matches!(pong.as_deref(), Ok("PONG")) {
            return Ok(());
        }
        if start.elapsed() > limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("127.0.0.1:{port} did not answer PING within {limit:?}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether every node reports `cluster_state:ok` and every slot assigned.
fn cluster_ok(ports: &[u16]) -> bool {
    ports.iter().all(|p| {
        Conn::connect(&format!("127.0.0.1:{p}"))
            .and_then(|mut c| c.call(&["CLUSTER", "INFO"]))
            .is_ok_and(|r| match r {
                Reply::Bulk(b) | Reply::Verbatim(_, b) => {
                    let t = String::from_utf8_lossy(&b);
                    t.contains("cluster_state:ok") && t.contains("cluster_slots_assigned:16384")
                }
                _ => false,
            })
    })
}

/// A Leasehold cluster: `leasehold-cluster local --groups 3 --replicas 0
/// --no-sentinels --port base --threads threads`, its nodes on
/// `base..base+3`, `server` as their binary.
///
/// # Errors
/// The process does not start or a node does not answer within 20 s.
pub fn leasehold(
    tool: &Path,
    server: &Path,
    base: u16,
    threads: usize,
) -> std::io::Result<Cluster> {
    let dir = scratch_dir(Kind::Leasehold)?;
    let args: Vec<String> = [
        "local",
        "--groups",
        &PRIMARIES.to_string(),
        "--replicas",
        "0",
        "--no-sentinels",
        "--port",
        &base.to_string(),
        "--threads",
        &threads.to_string(),
        "--dir",
        &dir.display().to_string(),
        "--server",
        &server.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    let proc = Server::spawn(Kind::Leasehold, tool, base, args)?;
    let ports: Vec<u16> = (base..base + PRIMARIES).collect();
    for &p in &ports {
        answers(p, Duration::from_secs(20))?;
    }
    Ok(Cluster {
        kind: Kind::Leasehold,
        ports,
        commands: vec![proc.command_line.clone()],
        _procs: vec![proc],
    })
}

/// A Redis cluster: three `redis-server --cluster-enabled yes` on
/// `base..base+3` (cluster bus on port + 10000), no persistence, joined by
/// `redis-cli --cluster create ... --cluster-yes` (g0 gets 0-5460, as
/// Leasehold's).
///
/// # Errors
/// A node that does not start, or a cluster not `ok` within 20 s.
pub fn redis(bin: &Path, base: u16) -> std::io::Result<Cluster> {
    let ports: Vec<u16> = (base..base + PRIMARIES).collect();
    let mut procs = Vec::new();
    let mut commands = Vec::new();
    for &p in &ports {
        let dir: PathBuf = scratch_dir(Kind::Redis)?;
        let extra: Vec<String> = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            &dir.join("nodes.conf").display().to_string(),
            "--dir",
            &dir.display().to_string(),
        ]
        .map(String::from)
        .to_vec();
        let args = Server::args(Kind::Redis, p, 1, &extra);
        let server = Server::launch(Kind::Redis, bin, p, args)?;
        commands.push(server.command_line.clone());
        procs.push(server);
    }
    let mut create: Vec<String> = vec!["--cluster".into(), "create".into()];
    create.extend(ports.iter().map(|p| format!("127.0.0.1:{p}")));
    create.extend([
        "--cluster-replicas".into(),
        "0".into(),
        "--cluster-yes".into(),
    ]);
    commands.push(format!("redis-cli {}", shell_join(&create)));
    let out = Command::new("redis-cli").args(&create).output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        )));
    }
    let start = Instant::now();
    while !cluster_ok(&ports) {
        if start.elapsed() > Duration::from_secs(20) {
            return Err(std::io::Error::other(
                "the Redis cluster is not ok after 20 s",
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(Cluster {
        kind: Kind::Redis,
        ports,
        commands,
        _procs: procs,
    })
}
