//! Primaries, replicas and sentinels for the replication section, and the
//! INFO checks that say a replica has caught up.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::compare::servers::{free_port, Kind, Server};
use crate::resp::{info_field, Conn};

/// How to start the nodes of one kind.
#[derive(Debug, Clone)]
pub struct Nodes {
    /// Which server.
    pub kind: Kind,
    /// Its binary.
    pub bin: PathBuf,
    /// Leasehold's `--threads` (primaries and replicas alike).
    pub threads: usize,
    /// Where Redis nodes keep the files a replica writes while it syncs
    /// (one subdirectory per node name, emptied when a node starts).
    pub dir: PathBuf,
}

impl Nodes {
    /// Extra arguments of every node: Redis gets its own `--dir` here and
    /// `--repl-diskless-sync-delay 0` (Leasehold starts a sync at once, Redis
    /// would first wait 5 s for more replicas); Leasehold needs neither (its
    /// scratch `--dir` comes from [`Server::start_with`]). Both get
    /// `--save ""` and `--appendonly no` there.
    fn extra(&self, name: &str) -> std::io::Result<Vec<String>> {
        Ok(match self.kind {
            Kind::Redis => {
                // Emptied first: a Redis node loads a dump.rdb it finds.
                let dir = self.dir.join(name);
                if dir.exists() {
                    std::fs::remove_dir_all(&dir)?;
                }
                std::fs::create_dir_all(&dir)?;
                vec![
                    "--dir".into(),
                    dir.display().to_string(),
                    "--repl-diskless-sync-delay".into(),
                    "0".into(),
                ]
            }
            Kind::Leasehold => Vec::new(),
        })
    }

    /// A primary (no `--replicaof`).
    ///
    /// # Errors
    /// As [`Server::start_with`].
    pub fn primary(&self, name: &str) -> std::io::Result<Server> {
        let extra = self.extra(name)?;
        Server::start_with(self.kind, &self.bin, self.threads, &extra)
    }

    /// A node started as a replica of `primary` on 127.0.0.1.
    ///
    /// # Errors
    /// As [`Server::start_with`].
    pub fn replica(&self, name: &str, primary: u16) -> std::io::Result<Server> {
        let mut extra = self.extra(name)?;
        extra.extend(replicaof_args(self.kind, primary));
        Server::start_with(self.kind, &self.bin, self.threads, &extra)
    }
}

/// `--replicaof` as each server takes it: two words for Redis (its parser
/// joins them), one quoted word for Leasehold.
pub fn replicaof_args(kind: Kind, primary: u16) -> Vec<String> {
    match kind {
        Kind::Redis => vec![
            "--replicaof".into(),
            "127.0.0.1".into(),
            primary.to_string(),
        ],
        Kind::Leasehold => vec!["--replicaof".into(), format!("127.0.0.1 {primary}")],
    }
}

/// The fields of `INFO <section>`, or `None` when the call fails.
pub fn info(server: &Server, section: &str) -> Option<String> {
    server.conn().ok()?.call_text(&["INFO", section]).ok()
}

/// True when `replica` reports its link up, no sync in progress and (Redis)
/// `loading:0`.
pub fn link_up(replica: &Server) -> bool {
    let Some(repl) = info(replica, "replication") else {
        return false;
    };
    let up = info_field(&repl, "master_link_status") == Some("up")
        && info_field(&repl, "master_sync_in_progress") == Some("0");
    up && (replica.kind != Kind::Redis
        || info(replica, "persistence").is_some_and(|p| info_field(&p, "loading") == Some("0")))
}

/// PSYNCs the primary has answered (INFO stats `sync_full` +
/// `sync_partial_ok`): each is a replica (re)connecting.
pub fn syncs_served(primary: &Server) -> Option<u64> {
    let stats = info(primary, "stats")?;
    let n = |f| info_field(&stats, f).and_then(|v| v.parse::<u64>().ok());
    Some(n("sync_full")? + n("sync_partial_ok")?)
}

/// DBSIZE, or `None` while the server refuses it (loading) or is down.
pub fn dbsize(server: &Server) -> Option<i64> {
    server.conn().ok()?.call_int(&["DBSIZE"]).ok()
}

/// Polls `ok` every `every` until it holds; the time it took, or an error
/// naming `what` after `limit`.
///
/// # Errors
/// `ok` still false after `limit`.
pub fn wait_until(
    what: &str,
    limit: Duration,
    every: Duration,
    mut ok: impl FnMut() -> bool,
) -> Result<Duration, String> {
    let start = Instant::now();
    loop {
        if ok() {
            return Ok(start.elapsed());
        }
        if start.elapsed() > limit {
            return Err(format!("{what}: not within {} s", limit.as_secs()));
        }
        std::thread::sleep(every);
    }
}

/// Waits (at most 60 s) until `replica` is synced with `primary`: link up,
/// no sync in progress, and DBSIZE equal on both.
///
/// # Errors
/// Not synced in time.
pub fn wait_synced(primary: &Server, replica: &Server) -> Result<Duration, String> {
    let want = dbsize(primary).ok_or("DBSIZE failed on the primary")?;
    wait_until(
        &format!("{} replica in sync", replica.kind.label()),
        Duration::from_secs(60),
        Duration::from_millis(10),
        || link_up(replica) && dbsize(replica) == Some(want),
    )
}

/// The master name every sentinel monitors.
pub const MASTER: &str = "mymaster";

/// The settings of every sentinel, after its `port`, `bind`, `dir` and
/// `sentinel monitor` lines.
pub const SENTINEL_SETTINGS: [&str; 3] = [
    "sentinel down-after-milliseconds mymaster 1000",
    "sentinel failover-timeout mymaster 5000",
    "sentinel parallel-syncs mymaster 1",
];

/// The configuration file of a sentinel on `port` watching `primary` with
/// quorum 2.
pub fn sentinel_config(port: u16, dir: &Path, primary: u16) -> String {
    let mut s = format!(
        "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor {MASTER} 127.0.0.1 {primary} 2\n",
        dir.display()
    );
    for line in SENTINEL_SETTINGS {
        s.push_str(line);
        s.push('\n');
    }
    s
}

/// Starts `redis-server <conf> --sentinel` watching `primary`; its config
/// file lives in `dir`.
///
/// # Errors
/// The file or spawn error, or a sentinel that does not answer PING.
pub fn sentinel(redis_bin: &Path, dir: &Path, primary: u16) -> std::io::Result<Server> {
    let port = free_port()?;
    let conf = dir.join(format!("sentinel-{port}.conf"));
    std::fs::write(&conf, sentinel_config(port, dir, primary))?;
    Server::launch(
        Kind::Redis,
        redis_bin,
        port,
        vec![conf.display().to_string(), "--sentinel".into()],
    )
}

/// The fields of each entry of a `SENTINEL REPLICAS`/`SENTINEL SENTINELS`
/// style reply, as (name, value) pairs.
fn entries(conn: &mut Conn, args: &[&str]) -> Vec<Vec<(String, String)>> {
    let Ok(leasehold_protocol::Reply::Array(items)) = conn.call(args) else {
        return Vec::new();
    };
    items
        .iter()
        .map(|item| match item {
            leasehold_protocol::Reply::Array(kv) => kv
                .chunks(2)
                .filter(|p| p.len() == 2)
                .map(|p| (text(&p[0]), text(&p[1])))
                .collect(),
            _ => Vec::new(),
        })
        .collect()
}

fn text(r: &leasehold_protocol::Reply) -> String {
    use leasehold_protocol::Reply;
    match r {
        Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        Reply::Simple(s) | Reply::Error(s) => s.to_string(),
        Reply::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

/// True when `sentinel` knows `replicas` replicas that are not down and
/// `others` other sentinels.
pub fn sentinel_ready(sentinel: &Server, replicas: usize, others: usize) -> bool {
    let Ok(mut c) = sentinel.conn() else {
        return false;
    };
    let flagged =
        |e: &Vec<(String, String)>, want: &str| e.iter().any(|(k, v)| k == "flags" && v == want);
    let r = entries(&mut c, &["SENTINEL", "REPLICAS", MASTER])
        .iter()
        .filter(|e| flagged(e, "slave"))
        .count();
    let s = entries(&mut c, &["SENTINEL", "SENTINELS", MASTER])
        .iter()
        .filter(|e| flagged(e, "sentinel"))
        .count();
    r == replicas && s == others
}

/// The primary's port as `sentinel` names it.
pub fn named_primary(sentinel: &Server) -> Option<u16> {
    let mut c = sentinel.conn().ok()?;
    match c
        .call(&["SENTINEL", "get-master-addr-by-name", MASTER])
        .ok()?
    {
        leasehold_protocol::Reply::Array(a) if a.len() == 2 => text(&a[1]).parse().ok(),
        _ => None,
    }
}
