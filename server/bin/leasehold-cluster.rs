//! `leasehold-cluster`: the operator's command for cluster mode
//! (`docs/operations.md`).
//!
//! - `local`: a whole cluster on this machine: writes a topology, starts
//!   the nodes (primaries and replicas following them) and three sentinels
//!   watching every group, prints every address, and stops everything it
//!   started on Ctrl-C or SIGTERM.
//! - `check HOST:PORT`: reads the slot map from one node and checks every
//!   slot is covered, every node has the same topology version and slot
//!   map, every primary answers as a master and every replica has its link
//!   to its primary up. Exit code 0 when all hold, 1 otherwise.
//! - `publish --topology FILE HOST:PORT...`: pushes a topology file to
//!   every node with `LH.TOPOLOGY SET`.
//! - `reshard --from G --to G --slots A-B HOST:PORT`: moves a slot range
//!   with its keys (CLUSTER SETSLOT, MIGRATE in batches), then publishes
//!   the topology's next version giving the range to the target to every
//!   node and closes the states (SETSLOT NODE). Slots the topology already
//!   gives to the target are skipped, so a re-run after a failure goes on.
//! - `create --topology FILE`: makes running nodes the cluster a topology
//!   file describes: the topology in force, replicas following their
//!   primaries, the file's sentinels monitoring every group (`create.rs`).
//! - `follow HOST:PORT...`: re-publishes the topology when Sentinel
//!   switches a group's primary, so the declared primary stays the real one
//!   (`follow.rs`).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use clap::{Parser, Subcommand};
use leasehold_protocol::{decode_reply, encode_request, Reply};
use leasehold_server::cluster::{host_port, Topology};

#[path = "leasehold-cluster/create.rs"]
mod create;
#[path = "leasehold-cluster/follow.rs"]
mod follow;

/// Cluster mode's operator command.
#[derive(Parser, Debug)]
#[command(name = "leasehold-cluster", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Start a whole cluster on this machine, in the foreground.
    Local {
        /// Shard groups (the 16384 slots are split evenly).
        #[arg(long, default_value_t = 3)]
        groups: u16,
        /// Replicas per group.
        #[arg(long, default_value_t = 1)]
        replicas: u16,
        /// The first node's port; the others follow it.
        #[arg(long, default_value_t = 7000)]
        port: u16,
        /// The first sentinel's port (default: the port after the last node's).
        #[arg(long)]
        sentinel_port: Option<u16>,
        /// Start no sentinels.
        #[arg(long)]
        no_sentinels: bool,
        /// Sentinel's `down-after-milliseconds`.
        #[arg(long, default_value_t = 1000)]
        down_after_ms: u64,
        /// Where the topology, the data and the logs go (default: a new
        /// directory under the system's temporary directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The `leasehold-server` binary (default: next to this one, else PATH).
        #[arg(long)]
        server: Option<PathBuf>,
        /// Threads per node.
        #[arg(long, default_value_t = 1)]
        threads: u16,
    },
    /// Check a running cluster from one of its nodes.
    Check {
        /// A node: HOST:PORT.
        node: String,
    },
    /// Push a topology file to nodes with LH.TOPOLOGY SET.
    Publish {
        /// The topology file (TOML, docs/cluster.md).
        #[arg(long)]
        topology: PathBuf,
        /// The nodes: HOST:PORT...
        #[arg(required = true)]
        nodes: Vec<String>,
    },
    /// Make running nodes the cluster a topology file describes: the
    /// topology in force on each, replicas following their primaries, the
    /// file's sentinels monitoring every group.
    Create {
        /// The topology file (TOML, docs/cluster.md).
        #[arg(long)]
        topology: PathBuf,
        /// Sentinels that must agree a primary is down (default: a majority).
        #[arg(long)]
        quorum: Option<u32>,
        /// Sentinel's `down-after-milliseconds`.
        #[arg(long, default_value_t = 5000)]
        down_after_ms: u64,
        /// Sentinel's `failover-timeout`, in ms.
        #[arg(long, default_value_t = 60000)]
        failover_timeout_ms: u64,
        /// Seconds to wait for the replication links, and then for every
        /// sentinel to list every replica, before the check.
        #[arg(long, default_value_t = 10)]
        wait: u64,
    },
    /// Re-publish the topology whenever Sentinel switches a group's
    /// primary (runs until Ctrl-C or SIGTERM).
    Follow {
        /// Write each published topology to this file too.
        #[arg(long)]
        topology: Option<PathBuf>,
        /// Time between two looks at the sentinels, in ms.
        #[arg(long, default_value_t = 500)]
        interval_ms: u64,
        /// Look once, publish if needed, and exit.
        #[arg(long)]
        once: bool,
        /// Nodes to read the topology in force from: HOST:PORT...
        #[arg(required = true)]
        nodes: Vec<String>,
    },
    /// Move a slot range, with its keys, from one group to another.
    Reshard {
        /// The group giving the slots.
        #[arg(long)]
        from: String,
        /// The group taking them.
        #[arg(long)]
        to: String,
        /// The range: A-B (or one slot).
        #[arg(long)]
        slots: String,
        /// Keys per MIGRATE (at least 1).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
        batch: u32,
        /// A node to read the topology from: HOST:PORT.
        node: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.cmd, Cmd::Local { .. }) {
        // A reader that goes away (`create ... | head`) ends the command
        // quietly, as it ends other Unix tools, instead of a panic on the
        // next print. `local` keeps printing errors: it must stop what it
        // started first.
        // SAFETY: signal(2) with SIG_DFL, before any thread is started.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let result = match cli.cmd {
        Cmd::Local {
            groups,
            replicas,
            port,
            sentinel_port,
            no_sentinels,
            down_after_ms,
            dir,
            server,
            threads,
        } => local(Local {
            groups,
            replicas,
            port,
            sentinel_port,
            sentinels: !no_sentinels,
            down_after_ms,
            dir,
            server,
            threads,
        }),
        Cmd::Check { node } => check(&node),
        Cmd::Publish { topology, nodes } => publish(&topology, &nodes),
        Cmd::Create {
            topology,
            quorum,
            down_after_ms,
            failover_timeout_ms,
            wait,
        } => create::create(&create::Create {
            topology,
            quorum,
            down_after_ms,
            failover_timeout_ms,
            wait_s: wait,
        }),
        Cmd::Follow {
            topology,
            interval_ms,
            once,
            nodes,
        } => follow::follow(&follow::Follow {
            nodes,
            topology,
            interval_ms,
            once,
        }),
        Cmd::Reshard {
            from,
            to,
            slots,
            batch,
            node,
        } => reshard(&from, &to, &slots, batch, &node),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("leasehold-cluster: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One blocking RESP connection (2 s timeouts).
struct Conn {
    s: TcpStream,
    buf: BytesMut,
}

impl Conn {
    fn open(addr: &str) -> Result<Conn, String> {
        let sa = addr
            .to_socket_addrs()
            .map_err(|e| format!("{addr}: {e}"))?
            .next()
            .ok_or_else(|| format!("{addr}: no address"))?;
        let s = TcpStream::connect_timeout(&sa, Duration::from_secs(2))
            .map_err(|e| format!("{addr}: {e}"))?;
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
        Ok(Conn {
            s,
            buf: BytesMut::new(),
        })
    }

    fn call(&mut self, args: &[&str]) -> Result<Reply, String> {
        let mut out = BytesMut::new();
        encode_request(args, &mut out);
        self.s.write_all(&out).map_err(|e| e.to_string())?;
        let mut chunk = [0u8; 16384];
        loop {
            match decode_reply(&mut self.buf) {
                Ok(Some(r)) => return Ok(r),
                Ok(None) => {}
                Err(e) => return Err(format!("bad reply: {e}")),
            }
            let n = self.s.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("connection closed".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// One request on a new connection to `addr`.
fn call(addr: &str, args: &[&str]) -> Result<Reply, String> {
    Conn::open(addr)?.call(args)
}

fn text(r: &Reply) -> String {
    match r {
        Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        Reply::Simple(s) | Reply::Error(s) => s.to_string(),
        Reply::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

// ---------------------------------------------------------------- local

struct Local {
    groups: u16,
    replicas: u16,
    port: u16,
    sentinel_port: Option<u16>,
    sentinels: bool,
    down_after_ms: u64,
    dir: Option<PathBuf>,
    server: Option<PathBuf>,
    threads: u16,
}

/// Set by SIGINT / SIGTERM.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Sets [`STOP`] on SIGINT and SIGTERM.
fn on_stop_signals() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let handler: extern "C" fn(libc::c_int) = on_signal;
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
        libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
    }
}

/// The Sentinel master name of group `g`.
fn master_name(g: usize) -> String {
    format!("leasehold-g{g}")
}

/// Group `g`'s first and last hash slot when `n` groups share the 16384
/// slots evenly, as `redis-cli --cluster create` splits them (each
/// boundary `g * 16384 / n` rounded to the nearest slot; for 3 groups
/// 0-5460, 5461-10922, 10923-16383), so the client's sub-keys, which
/// assume that split, land one per group.
pub fn even_slots(g: usize, n: usize) -> (usize, usize) {
    let start = |g: usize| (2 * g * 16384 + n) / (2 * n);
    (start(g), start(g + 1) - 1)
}

/// The topology of `groups` groups, the slots split evenly, group `g` on
/// ports `nodes[g]` (the primary first), each under [`master_name`].
pub fn local_topology(nodes: &[Vec<u16>], sentinels: &[u16]) -> String {
    let n = nodes.len();
    let mut t = String::from("# Written by leasehold-cluster local.\nversion = 1\n");
    let list: Vec<String> = sentinels
        .iter()
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect();
    t.push_str(&format!("sentinels = [{}]\n", list.join(", ")));
    for (g, ports) in nodes.iter().enumerate() {
        let (first, last) = even_slots(g, n);
        t.push_str(&format!(
            "\n[[group]]\nname = \"g{g}\"\nslots = [\"{first}-{last}\"]\n"
        ));
        if !sentinels.is_empty() {
            t.push_str(&format!("sentinel = \"{}\"\n", master_name(g)));
        }
        for (i, p) in ports.iter().enumerate() {
            let role = if i == 0 { "primary" } else { "replica" };
            t.push_str(&format!(
                "[[group.node]]\naddr = \"127.0.0.1:{p}\"\nrole = \"{role}\"\n"
            ));
        }
    }
    t
}

/// The `leasehold-server` to start: the one given, else the one next to
/// this binary, else `leasehold-server` on PATH.
fn server_binary(given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|d| d.join("leasehold-server")))
            .filter(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from("leasehold-server"))
    })
}

/// Whether `program --version` runs.
fn on_path(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A child that dies with this process (SIGKILL when it ends, Linux), its
/// output to `log`.
fn spawn(mut cmd: Command, log: &Path) -> Result<Child, String> {
    let out = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl is async-signal-safe and touches no memory of the
        // parent; it only asks the kernel to kill the child when this
        // process goes, so nothing is left behind even after a SIGKILL.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
    }
    cmd.spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))
}

/// Waits, at most `limit`, for 127.0.0.1:`port` to answer PING.
fn answers(port: u16, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if call(&format!("127.0.0.1:{port}"), &["PING"]).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Stops the children: SIGTERM, then SIGKILL for any still running after 5 s.
fn stop_all(children: &mut [(String, Child)]) {
    for (_, c) in children.iter() {
        // SAFETY: kill(2) with a pid this process spawned and has not reaped.
        unsafe {
            libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
        }
    }
    let start = Instant::now();
    for (what, c) in children.iter_mut() {
        loop {
            match c.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if start.elapsed() > Duration::from_secs(5) => {
                    eprintln!("{what} did not stop within 5 s: killed");
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

fn local(o: Local) -> Result<bool, String> {
    if o.groups == 0 || usize::from(o.groups) > 16384 {
        return Err("--groups must be 1..=16384".into());
    }
    let per = usize::from(o.replicas) + 1;
    let count = usize::from(o.groups) * per;
    if usize::from(o.port) + count + 3 > 65535 {
        return Err("the ports do not fit below 65536".into());
    }
    let nodes: Vec<Vec<u16>> = (0..usize::from(o.groups))
        .map(|g| (0..per).map(|i| o.port + (g * per + i) as u16).collect())
        .collect();
    let sentinel_prog = ["redis-sentinel", "redis-server"]
        .into_iter()
        .find(|p| o.sentinels && on_path(p));
    if o.sentinels && sentinel_prog.is_none() {
        eprintln!(
            "NOTICE: neither redis-sentinel nor redis-server is on PATH: no sentinels, no failover"
        );
    }
    let first_sentinel = o.sentinel_port.unwrap_or(o.port + count as u16);
    let sentinels: Vec<u16> = match sentinel_prog {
        Some(_) => (0..3).map(|i| first_sentinel + i).collect(),
        None => Vec::new(),
    };
    let dir = o
        .dir
        .unwrap_or_else(|| std::env::temp_dir().join(format!("leasehold-cluster-{}", o.port)));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let topo_path = dir.join("topology.toml");
    let topo = local_topology(&nodes, &sentinels);
    let parsed = Topology::parse(&topo).map_err(|e| format!("the topology written: {e}"))?;
    std::fs::write(&topo_path, &topo).map_err(|e| format!("{}: {e}", topo_path.display()))?;

    on_stop_signals();
    let server = server_binary(o.server);
    let mut children: Vec<(String, Child)> = Vec::new();
    let started = (|| -> Result<(), String> {
        for ports in &nodes {
            for (i, &p) in ports.iter().enumerate() {
                let data = dir.join(p.to_string());
                std::fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
                let mut cmd = Command::new(&server);
                cmd.args(["--port", &p.to_string(), "--bind", "127.0.0.1"]);
                cmd.args(["--threads", &o.threads.to_string(), "--save", ""]);
                cmd.arg("--dir").arg(&data);
                cmd.args(["--cluster-enabled", "yes", "--cluster-config-file"]);
                cmd.arg(&topo_path);
                if i > 0 {
                    cmd.args(["--replicaof", &format!("127.0.0.1 {}", ports[0])]);
                }
                let child = spawn(cmd, &data.join("node.log"))?;
                children.push((format!("node 127.0.0.1:{p}"), child));
            }
        }
        for &p in nodes.iter().flatten() {
            if !answers(p, Duration::from_secs(10)) {
                return Err(format!(
                    "node 127.0.0.1:{p} does not answer (its log: {})",
                    dir.join(p.to_string()).join("node.log").display()
                ));
            }
        }
        if let Some(prog) = sentinel_prog {
            // Started at once, so their ports are taken while they are
            // known free; the wait for the replicas comes after.
            for &s in &sentinels {
                let sdir = dir.join(format!("sentinel-{s}"));
                std::fs::create_dir_all(&sdir).map_err(|e| format!("{}: {e}", sdir.display()))?;
                let mut conf = format!("port {s}\nbind 127.0.0.1\ndir {}\n", sdir.display());
                for (g, ports) in nodes.iter().enumerate() {
                    let m = master_name(g);
                    conf.push_str(&format!(
                        "sentinel monitor {m} 127.0.0.1 {} 2\nsentinel down-after-milliseconds {m} {}\nsentinel failover-timeout {m} 10000\nsentinel parallel-syncs {m} 1\n",
                        ports[0], o.down_after_ms
                    ));
                }
                let path = sdir.join("sentinel.conf");
                std::fs::write(&path, conf).map_err(|e| format!("{}: {e}", path.display()))?;
                let mut cmd = Command::new(prog);
                cmd.arg(&path);
                if prog == "redis-server" {
                    cmd.arg("--sentinel");
                }
                let child = spawn(cmd, &sdir.join("sentinel.log"))?;
                children.push((format!("sentinel 127.0.0.1:{s}"), child));
            }
            for &s in &sentinels {
                if !answers(s, Duration::from_secs(10)) {
                    return Err(format!("sentinel 127.0.0.1:{s} does not answer"));
                }
            }
            // Every replica linked, and known to every sentinel (which
            // reads a primary's replicas when it starts monitoring, then
            // every 10 s), before the addresses are printed: a primary
            // killed right after can be failed over.
            let deadline = Instant::now() + Duration::from_secs(20);
            if !create::wait_linked(&parsed, deadline) {
                eprintln!("WARNING: not every replica's link is up after 20 s");
            }
            for (s, name, r) in create::wait_replicas_known(&parsed, deadline) {
                eprintln!("WARNING: sentinel {s} does not list {r} among {name}'s replicas yet: it could not promote it");
            }
        }
        Ok(())
    })();
    if let Err(e) = started {
        stop_all(&mut children);
        return Err(e);
    }
    println!(
        "leasehold-cluster: {} groups, {} replica(s) each",
        o.groups, o.replicas
    );
    println!("topology {}", topo_path.display());
    for (g, ports) in nodes.iter().enumerate() {
        let (first, last) = even_slots(g, nodes.len());
        println!("group g{g} slots {first}-{last}:");
        for (i, p) in ports.iter().enumerate() {
            let role = if i == 0 { "primary" } else { "replica" };
            println!("  {role} 127.0.0.1:{p}");
        }
    }
    for s in &sentinels {
        println!("sentinel 127.0.0.1:{s}");
    }
    println!("data and logs in {}", dir.display());
    println!(
        "try: redis-cli -c -p {} set foo bar; Ctrl-C stops everything",
        o.port
    );
    let _ = std::io::stdout().flush();
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("leasehold-cluster: stopping {} processes", children.len());
    stop_all(&mut children);
    println!("leasehold-cluster: stopped");
    Ok(true)
}

// ---------------------------------------------------------------- check

/// One slot range of CLUSTER SLOTS: first, last, the nodes' addresses
/// (primary first).
type Range = (i64, i64, Vec<String>);

fn cluster_slots(addr: &str) -> Result<Vec<Range>, String> {
    let Reply::Array(ranges) = call(addr, &["CLUSTER", "SLOTS"])? else {
        return Err(format!("{addr}: CLUSTER SLOTS is not an array"));
    };
    let mut out = Vec::new();
    for r in ranges {
        let Reply::Array(f) = r else {
            return Err(format!("{addr}: a CLUSTER SLOTS entry is not an array"));
        };
        let (Some(Reply::Int(a)), Some(Reply::Int(b))) = (f.first(), f.get(1)) else {
            return Err(format!("{addr}: a CLUSTER SLOTS entry has no range"));
        };
        let nodes = f[2..]
            .iter()
            .filter_map(|n| match n {
                Reply::Array(n) if n.len() >= 2 => Some(format!("{}:{}", text(&n[0]), text(&n[1]))),
                _ => None,
            })
            .collect();
        out.push((*a, *b, nodes));
    }
    out.sort();
    Ok(out)
}

/// `ROLE` of `addr`: ("master", None) or ("slave", Some((master, link state))).
fn role(addr: &str) -> Result<(String, Option<(String, String)>), String> {
    let Reply::Array(r) = call(addr, &["ROLE"])? else {
        return Err("ROLE is not an array".into());
    };
    let kind = r.first().map(text).unwrap_or_default();
    if kind == "slave" && r.len() >= 4 {
        let master = format!("{}:{}", text(&r[1]), text(&r[2]));
        return Ok((kind, Some((master, text(&r[3])))));
    }
    Ok((kind, None))
}

fn check(node: &str) -> Result<bool, String> {
    let mut errors = 0;
    let ok = |m: String| println!("[OK] {m}");
    let err = |m: String, errors: &mut i32| {
        println!("[ERR] {m}");
        *errors += 1;
    };
    let slots = cluster_slots(node)?;
    let version = text(&call(node, &["LH.TOPOLOGY", "VERSION"])?);
    println!(
        "{node}: topology version {version}, {} slot ranges",
        slots.len()
    );
    let covered: i64 = slots.iter().map(|(a, b, _)| b - a + 1).sum();
    if covered == 16384 {
        ok("All 16384 slots covered.".into());
    } else {
        err(format!("{covered} of 16384 slots covered"), &mut errors);
    }
    let mut all: Vec<String> = slots.iter().flat_map(|(_, _, n)| n.clone()).collect();
    all.sort();
    all.dedup();
    let mut agree = true;
    for n in &all {
        match (call(n, &["LH.TOPOLOGY", "VERSION"]), cluster_slots(n)) {
            (Ok(v), Ok(s)) if text(&v) == version && s == slots => {}
            (Ok(v), Ok(_)) if text(&v) != version => {
                agree = false;
                err(
                    format!("{n} has topology version {}, not {version}", text(&v)),
                    &mut errors,
                );
            }
            (Ok(_), Ok(_)) => {
                agree = false;
                err(format!("{n} has another slot map"), &mut errors);
            }
            (Err(e), _) | (_, Err(e)) => {
                agree = false;
                err(format!("{n} does not answer: {e}"), &mut errors);
            }
        }
    }
    if agree {
        ok(format!(
            "All {} nodes agree: topology version {version}, same slots.",
            all.len()
        ));
    }
    // Each group once, however many ranges it owns (a reshard leaves a
    // group's ranges apart in slot order).
    let mut groups: Vec<&Vec<String>> = Vec::new();
    for (_, _, n) in &slots {
        if !groups.contains(&n) {
            groups.push(n);
        }
    }
    for g in groups {
        let Some(primary) = g.first() else { continue };
        match role(primary) {
            Ok((k, _)) if k == "master" => ok(format!("primary {primary} answers as master")),
            Ok((k, _)) => err(format!("primary {primary} says it is a {k}"), &mut errors),
            Err(e) => err(
                format!("primary {primary} does not answer: {e}"),
                &mut errors,
            ),
        }
        for r in &g[1..] {
            match role(r) {
                Ok((_, Some((m, link)))) if link == "connected" && same_node(&m, primary) => {
                    ok(format!("replica {r} follows {primary}, link up"))
                }
                Ok((_, Some((m, link)))) => err(
                    format!(
                        "replica {r} follows {m} (link {link}), not {primary} with the link up"
                    ),
                    &mut errors,
                ),
                Ok((k, None)) => err(format!("replica {r} says it is a {k}"), &mut errors),
                Err(e) => err(format!("replica {r} does not answer: {e}"), &mut errors),
            }
        }
    }
    println!(
        "{}",
        if errors == 0 {
            "cluster OK".to_string()
        } else {
            format!("{errors} problem(s)")
        }
    );
    Ok(errors == 0)
}

/// Whether two `host:port` name one node (loopback names are one host).
fn same_node(a: &str, b: &str) -> bool {
    let local = |h: &str| {
        h == "localhost"
            || h.parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    };
    match (host_port(a), host_port(b)) {
        (Some((ha, pa)), Some((hb, pb))) => pa == pb && (ha == hb || (local(&ha) && local(&hb))),
        _ => a == b,
    }
}

// -------------------------------------------------------------- publish

fn publish(file: &Path, nodes: &[String]) -> Result<bool, String> {
    let text_ = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let topo = Topology::parse(&text_).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(publish_to(
        nodes.iter().map(String::as_str),
        topo.version,
        &text_,
    ))
}

/// Puts topology `text_` of `version` in force on `addr` (`LH.TOPOLOGY
/// SET`): `Ok(true)` when it is now, `Ok(false)` when the node had that
/// very text in force already (a re-run, or another publisher got there
/// first: `follow` and `reshard` may run together).
///
/// # Errors
/// The node's refusal, or why it did not answer.
fn set_topology(addr: &str, version: u64, text_: &str) -> Result<bool, String> {
    match call(addr, &["LH.TOPOLOGY", "SET", &version.to_string(), text_])? {
        Reply::Simple(s) if s == "OK" => Ok(true),
        r => match call(addr, &["LH.TOPOLOGY", "GET"]) {
            Ok(Reply::Bulk(t)) if t == text_.as_bytes() => Ok(false),
            _ => Err(text(&r)),
        },
    }
}

/// [`set_topology`] on every node of `nodes`, in order, with a line for
/// each (`<addr>: version N in force`, `... already in force`, or why
/// not): `true` when it is in force on every one.
fn publish_to<'a>(nodes: impl IntoIterator<Item = &'a str>, version: u64, text_: &str) -> bool {
    let mut all = true;
    for a in nodes {
        match set_topology(a, version, text_) {
            Ok(true) => println!("{a}: version {version} in force"),
            Ok(false) => println!("{a}: version {version} already in force"),
            Err(e) => {
                all = false;
                println!("{a}: {e}");
            }
        }
    }
    all
}

// -------------------------------------------------------------- reshard

/// Fails unless `r` is `OK` (or, for MIGRATE, `NOKEY`).
fn expect_ok(what: &str, r: Reply) -> Result<(), String> {
    match &r {
        Reply::Simple(s) if s == "OK" || s == "NOKEY" => Ok(()),
        _ => Err(format!("{what}: {}", text(&r))),
    }
}

/// The topology text `text_` at `version`, each of its groups (a TOML
/// table) changed by `edit`; every other field kept.
fn edit_groups(
    text_: &str,
    version: u64,
    mut edit: impl FnMut(&mut toml::Table) -> Result<(), String>,
) -> Result<String, String> {
    let mut doc: toml::Table = toml::from_str(text_).map_err(|e| e.to_string())?;
    doc.insert("version".into(), toml::Value::Integer(version as i64));
    let groups = doc
        .get_mut("group")
        .and_then(|g| g.as_array_mut())
        .ok_or("the topology has no groups")?;
    for g in groups {
        edit(g.as_table_mut().ok_or("a group is not a table")?)?;
    }
    toml::to_string(&doc).map_err(|e| e.to_string())
}

/// The topology text `text` with `version` and `first..=last` moved to
/// group `to` (taken from every other group).
fn moved_topology(
    text_: &str,
    version: u64,
    to: &str,
    first: u16,
    last: u16,
) -> Result<String, String> {
    edit_groups(text_, version, |g| {
        let name = g
            .get("name")
            .and_then(|n| n.as_str())
            .unwrap_or("")
            .to_string();
        let mut owned: Vec<bool> = vec![false; 16384];
        for r in g
            .get("slots")
            .and_then(|s| s.as_array())
            .into_iter()
            .flatten()
        {
            let r = r.as_str().unwrap_or("");
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            let (a, b): (usize, usize) = (
                a.trim().parse().map_err(|_| format!("slot range {r:?}"))?,
                b.trim().parse().map_err(|_| format!("slot range {r:?}"))?,
            );
            owned[a..=b.min(16383)].iter_mut().for_each(|o| *o = true);
        }
        let mine = name == to;
        owned[usize::from(first)..=usize::from(last)]
            .iter_mut()
            .for_each(|o| *o = mine);
        let mut ranges = Vec::new();
        let mut s = 0;
        while s < 16384 {
            if !owned[s] {
                s += 1;
                continue;
            }
            let mut e = s;
            while e + 1 < 16384 && owned[e + 1] {
                e += 1;
            }
            ranges.push(toml::Value::String(match s == e {
                true => s.to_string(),
                false => format!("{s}-{e}"),
            }));
            s = e + 1;
        }
        g.insert("slots".into(), toml::Value::Array(ranges));
        Ok(())
    })
}

fn reshard(from: &str, to: &str, slots: &str, batch: u32, node: &str) -> Result<bool, String> {
    let (first, last) = match slots.split_once('-') {
        Some((a, b)) => (a.parse::<u16>(), b.parse::<u16>()),
        None => (slots.parse::<u16>(), slots.parse::<u16>()),
    };
    let (Ok(first), Ok(last)) = (first, last) else {
        return Err(format!("--slots {slots:?} is not A-B"));
    };
    if first > last || last > 16383 {
        return Err(format!("--slots {slots:?}: want 0 <= A <= B <= 16383"));
    }
    let text_ = text(&call(node, &["LH.TOPOLOGY", "GET"])?);
    let topo = Topology::parse(&text_).map_err(|e| format!("{node}: {e}"))?;
    let group = |name: &str| {
        topo.groups
            .iter()
            .position(|g| g.name == name)
            .ok_or(format!("no group {name:?} in the topology"))
    };
    let (gf, gt) = (group(from)?, group(to)?);
    let (src, dst) = (
        topo.groups[gf].primary().clone(),
        topo.groups[gt].primary().clone(),
    );
    if gf == gt {
        return Err(format!("--from and --to are the same group, {from:?}"));
    }
    // Every slot checked before any moves: a range only partly the
    // source's would otherwise leave the first slots moved and migrating,
    // the topology unchanged.
    if let Some(slot) =
        (first..=last).find(|&s| !matches!(topo.owner(s), Some(g) if g == gf || g == gt))
    {
        return Err(format!("slot {slot} is not group {from:?}'s"));
    }
    let (src_addr, dst_addr) = (src.addr(), dst.addr());
    let dst_port = dst.port.to_string();
    let mut moved = 0u64;
    for slot in first..=last {
        let owner = topo.owner(slot);
        if owner == Some(gt) {
            continue;
        }
        if owner != Some(gf) {
            return Err(format!("slot {slot} is not group {from:?}'s"));
        }
        let s = slot.to_string();
        expect_ok(
            &format!("{dst_addr} SETSLOT {s} IMPORTING"),
            call(&dst_addr, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &src.id])?,
        )?;
        expect_ok(
            &format!("{src_addr} SETSLOT {s} MIGRATING"),
            call(&src_addr, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &dst.id])?,
        )?;
        let mut in_slot = 0;
        loop {
            let keys = match call(
                &src_addr,
                &["CLUSTER", "GETKEYSINSLOT", &s, &batch.to_string()],
            )? {
                Reply::Array(keys) => keys.iter().map(text).collect::<Vec<_>>(),
                r => return Err(format!("{src_addr} GETKEYSINSLOT {s}: {}", text(&r))),
            };
            if keys.is_empty() {
                break;
            }
            let mut args = vec![
                "MIGRATE", &dst.host, &dst_port, "", "0", "5000", "REPLACE", "KEYS",
            ];
            args.extend(keys.iter().map(String::as_str));
            expect_ok(
                &format!("{src_addr} MIGRATE slot {s}"),
                call(&src_addr, &args)?,
            )?;
            in_slot += keys.len();
        }
        moved += in_slot as u64;
        println!("slot {slot}: {in_slot} keys moved to {to} ({dst_addr})");
    }
    let version = topo.version + 1;
    let already = (first..=last).all(|s| topo.owner(s) == Some(gt));
    let next = moved_topology(&text_, version, to, first, last)?;
    Topology::parse(&next).map_err(|e| format!("the new topology: {e}"))?;
    // The target's group first, then the source's, then the rest: a
    // source on the new topology answers MOVED to the target, and a target
    // still on the old one would answer MOVED back (it serves an imported
    // slot only after ASKING), so a client would bounce between the two;
    // the other way round the source, still migrating, answers ASK.
    let mut order: Vec<_> = topo.nodes().collect();
    order.sort_by_key(|&(g, _)| match g {
        g if g == gt => 0,
        g if g == gf => 1,
        _ => 2,
    });
    // A re-run after the publication: the topology says so already.
    let order: Vec<String> = order.into_iter().map(|(_, n)| n.addr()).collect();
    let all = already || publish_to(order.iter().map(String::as_str), version, &next);
    for slot in first..=last {
        let s = slot.to_string();
        for a in [&src_addr, &dst_addr] {
            expect_ok(
                &format!("{a} SETSLOT {s} NODE"),
                call(a, &["CLUSTER", "SETSLOT", &s, "NODE", &dst.id])?,
            )?;
        }
    }
    // A re-run published nothing: the version in force is the one read.
    let in_force = if already { topo.version } else { version };
    println!(
        "slots {first}-{last}: {moved} keys moved from {from} to {to}; topology version {in_force}"
    );
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::even_slots;

    #[test]
    fn the_slots_split_as_redis_cli_splits_them() {
        let split = |n: usize| (0..n).map(|g| even_slots(g, n)).collect::<Vec<_>>();
        assert_eq!(split(1), vec![(0, 16383)]);
        assert_eq!(split(3), vec![(0, 5460), (5461, 10922), (10923, 16383)]);
        assert_eq!(split(16)[1], (1024, 2047));
        for n in 1..=64 {
            let parts = split(n);
            assert_eq!(parts[0].0, 0);
            assert_eq!(parts[n - 1].1, 16383);
            assert!(
                parts.windows(2).all(|w| w[1].0 == w[0].1 + 1),
                "{n}: {parts:?}"
            );
        }
    }
}
