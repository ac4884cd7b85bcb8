//! `leasehold-cluster local` as a child process: started on a run of free
//! ports, its printed addresses parsed, and stopped with SIGTERM (which
//! stops the nodes and sentinels it started) when dropped.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use leasehold_testkit::{call, text, wait_for, Proc};

/// One group as `local` prints it.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// `g0`, `g1`, ...
    pub name: String,
    /// Its slots, `first..=last`.
    pub slots: (u16, u16),
    /// The port of the primary it was started with.
    pub primary: u16,
    /// The ports of its replicas.
    pub replicas: Vec<u16>,
}

/// A running `leasehold-cluster local`.
pub struct Local {
    /// The first node's port (`--port`).
    pub base: u16,
    /// Every group, in order.
    pub groups: Vec<Group>,
    /// The sentinels' ports (none when no sentinel could be started).
    pub sentinels: Vec<u16>,
    /// Its `--dir`: the topology, the data and the logs.
    pub dir: PathBuf,
    /// What it printed: up to its `try:` line, the rest after [`Local::stop`].
    pub printed: String,
    proc: Option<Proc>,
    /// Its standard output, kept open: it prints as it stops.
    out: BufReader<ChildStdout>,
}

/// Starts `leasehold-cluster local --groups 3 --replicas 1` on a run of
/// free ports, with this build's `leasehold-server`, and returns once it
/// has printed every address (every node answers PING by then). A run
/// whose ports were free when picked can lose one to another program's
/// connection before `local` binds it (they are in the ephemeral range):
/// `local` then stops before printing its groups, and a new run is tried,
/// three in all.
///
/// # Panics
/// When it cannot be started or its output does not parse.
pub fn start() -> Local {
    let mut printed = String::new();
    for _ in 0..3 {
        match try_start() {
            Ok(local) => return local,
            Err(p) => printed = p,
        }
    }
    panic!("leasehold-cluster local did not start three times; the last printed:\n{printed}");
}

/// One try of [`start`]: what `local` printed when it stopped before
/// printing its groups.
fn try_start() -> Result<Local, String> {
    let base = leasehold_testkit::free_run(9);
    let dir = leasehold_testkit::scratch_dir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold-cluster"))
        .args(["local", "--groups", "3", "--replicas", "1"])
        .args(["--port", &base.to_string()])
        .arg("--dir")
        .arg(&dir)
        .arg("--server")
        .arg(env!("CARGO_BIN_EXE_leasehold-server"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start leasehold-cluster");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let proc = Proc(child);
    let mut printed = String::new();
    let mut line = String::new();
    while out.read_line(&mut line).is_ok_and(|n| n > 0) {
        printed.push_str(&line);
        if line.starts_with("try:") {
            break;
        }
        line.clear();
    }
    eprintln!("{printed}");
    let port = |l: &str| -> u16 {
        l.rsplit(':')
            .next()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no port in {l:?}"))
    };
    let mut groups: Vec<Group> = Vec::new();
    let mut sentinels = Vec::new();
    for l in printed.lines() {
        if let Some(rest) = l.strip_prefix("group ") {
            // `group g0 slots 0-5460:`
            let words: Vec<&str> = rest.trim_end_matches(':').split(' ').collect();
            let (a, b) = words[2].split_once('-').expect("a slot range");
            groups.push(Group {
                name: words[0].to_string(),
                slots: (a.parse().unwrap(), b.parse().unwrap()),
                primary: 0,
                replicas: Vec::new(),
            });
        } else if l.starts_with("  primary ") {
            groups.last_mut().expect("a group").primary = port(l);
        } else if l.starts_with("  replica ") {
            groups.last_mut().expect("a group").replicas.push(port(l));
        } else if l.starts_with("sentinel ") {
            sentinels.push(port(l));
        }
    }
    if groups.is_empty() {
        return Err(printed);
    }
    assert_eq!(groups.len(), 3, "{printed}");
    Ok(Local {
        base,
        groups,
        sentinels,
        dir,
        printed,
        proc: Some(proc),
        out,
    })
}

impl Local {
    /// Every node's port, the primaries and replicas of each group in order.
    pub fn ports(&self) -> Vec<u16> {
        self.groups
            .iter()
            .flat_map(|g| std::iter::once(g.primary).chain(g.replicas.iter().copied()))
            .collect()
    }

    /// The group owning `slot`'s index.
    pub fn group_of(&self, slot: u16) -> usize {
        self.groups
            .iter()
            .position(|g| (g.slots.0..=g.slots.1).contains(&slot))
            .expect("every slot has a group")
    }

    /// `leasehold-cluster check` on the second node: exit status and report.
    pub fn check(&self) -> (bool, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_leasehold-cluster"))
            .args(["check", &format!("127.0.0.1:{}", self.base + 1)])
            .output()
            .expect("run leasehold-cluster check");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// Waits (at most `limit`) until `leasehold-cluster check` passes: every
    /// replica's link to its primary is up.
    pub fn wait_linked(&self, limit: Duration) -> Duration {
        wait_for("leasehold-cluster check passes", limit, || self.check().0)
    }

    /// Waits (at most `limit`) until every sentinel knows the replica of
    /// every group and the other sentinels (`SENTINEL CKQUORUM` passes):
    /// a failover can then happen.
    pub fn wait_sentinels_ready(&self, limit: Duration) -> Duration {
        wait_for("every sentinel can fail over every group", limit, || {
            self.sentinels.iter().all(|&s| {
                (0..self.groups.len()).all(|g| {
                    let name = format!("leasehold-g{g}");
                    let quorum = call(s, &["SENTINEL", "CKQUORUM", &name])
                        .is_some_and(|r| text(&r).starts_with("OK 3 usable"));
                    quorum && leasehold_testkit::replicas_seen_of(s, &name) == 1
                })
            })
        })
    }

    /// The pid of the process serving 127.0.0.1:`port` (`INFO server`).
    ///
    /// # Panics
    /// When it does not answer with a `process_id`.
    pub fn pid_of(port: u16) -> i32 {
        let info = call(port, &["INFO", "server"]).map(|r| text(&r));
        info.as_deref()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("process_id:"))
                    .and_then(|p| p.trim().parse().ok())
            })
            .unwrap_or_else(|| panic!("no process_id from {port}: {info:?}"))
    }

    /// Sends SIGTERM and waits (at most 10 s) for it to exit; returns its
    /// exit status, and adds what it printed meanwhile to `printed`. Every
    /// process it started has stopped by then.
    ///
    /// # Panics
    /// When it does not exit within 10 s.
    pub fn stop(&mut self) -> ExitStatus {
        let mut proc = self.proc.take().expect("running");
        // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
        unsafe {
            libc::kill(proc.0.id() as libc::pid_t, libc::SIGTERM);
        }
        let stopped = Instant::now();
        loop {
            if let Some(s) = proc.0.try_wait().expect("wait") {
                let _ = self.out.read_to_string(&mut self.printed);
                return s;
            }
            assert!(
                stopped.elapsed() < Duration::from_secs(10),
                "leasehold-cluster did not exit"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Stops it ([`Local::stop`]) and asserts it exited 0, unless the test is
/// already failing.
impl Drop for Local {
    fn drop(&mut self) {
        // On a panic the Proc's SIGKILL ends it (its children die with it:
        // they are started with PR_SET_PDEATHSIG) and the logs stay.
        if !std::thread::panicking() {
            if self.proc.is_some() {
                let status = self.stop();
                assert!(status.success(), "{status:?}: {}", self.printed);
            }
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
