//! Starting and stopping the two servers under test on free loopback ports.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::resp::Conn;

/// Which server a run targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Debian's `redis-server` (7.x).
    Redis,
    /// `leasehold-server`.
    Leasehold,
}

impl Kind {
    /// "Redis" or "Leasehold".
    pub fn label(self) -> &'static str {
        match self {
            Kind::Redis => "Redis",
            Kind::Leasehold => "Leasehold",
        }
    }
}

/// A server process this program started; killed (by its pid) on drop,
/// and its scratch directory (if it made one) removed.
#[derive(Debug)]
pub struct Server {
    /// Which server.
    pub kind: Kind,
    /// Its loopback port.
    pub port: u16,
    /// The command line that started it, for the report.
    pub command_line: String,
    child: Child,
    scratch: Option<PathBuf>,
}

/// Flags every server gets unless `extra` sets them: no snapshot rules
/// (Leasehold, like Redis, has default `save` rules that would snapshot in
/// the middle of a measurement) and no append-only log.
pub const NO_PERSISTENCE: [(&str, &str); 2] = [("--save", ""), ("--appendonly", "no")];

impl Server {
    /// Starts `bin` on a free loopback port and waits (at most 10 s) until it
    /// answers PING. `threads` applies to Leasehold only.
    ///
    /// # Errors
    /// The spawn error, or a server that does not answer in time.
    pub fn start(kind: Kind, bin: &Path, threads: usize) -> std::io::Result<Server> {
        Server::start_with(kind, bin, threads, &[])
    }

    /// As [`Server::start`], with `extra` arguments after the usual ones
    /// (`--replicaof ...`, `--dir ...`). Without `--dir` in `extra` the
    /// server gets a new empty directory of its own under the system's temp
    /// directory, removed when it stops, so nothing it writes lands in the
    /// working directory and it loads no file another server left.
    ///
    /// # Errors
    /// As [`Server::start`], or the scratch directory cannot be made.
    pub fn start_with(
        kind: Kind,
        bin: &Path,
        threads: usize,
        extra: &[String],
    ) -> std::io::Result<Server> {
        let port = free_port()?;
        let mut extra = extra.to_vec();
        let scratch = if has_flag(&extra, "--dir") {
            None
        } else {
            let dir = scratch_dir(kind)?;
            extra.extend(["--dir".into(), dir.display().to_string()]);
            Some(dir)
        };
        let args = Server::args(kind, port, threads, &extra);
        let mut server = Server::launch(kind, bin, port, args);
        match &mut server {
            Ok(s) => s.scratch = scratch,
            Err(_) => {
                if let Some(dir) = scratch {
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
        }
        server
    }

    /// The command line of a `kind` server on `port`: the address, Leasehold's
    /// `--threads` and `--loglevel warn`, [`NO_PERSISTENCE`] for the flags
    /// `extra` does not set, then `extra`.
    pub fn args(kind: Kind, port: u16, threads: usize, extra: &[String]) -> Vec<String> {
        let mut args: Vec<String> = ["--port", &port.to_string(), "--bind", "127.0.0.1"]
            .map(String::from)
            .to_vec();
        if kind == Kind::Leasehold {
            args.extend(
                ["--threads", &threads.to_string(), "--loglevel", "warn"].map(String::from),
            );
        }
        for (flag, value) in NO_PERSISTENCE {
            if !has_flag(extra, flag) {
                args.extend([flag.to_string(), value.to_string()]);
            }
        }
        args.extend_from_slice(extra);
        args
    }

    /// Runs `bin args` (which must listen on `port`) and waits (at most 10 s)
    /// until it answers PING with PONG.
    ///
    /// # Errors
    /// The spawn error, or a server that does not answer in time.
    pub fn launch(kind: Kind, bin: &Path, port: u16, args: Vec<String>) -> std::io::Result<Server> {
        let server = Server::spawn(kind, bin, port, args)?;
        server.wait_ready(Duration::from_secs(10), Duration::from_millis(50))?;
        Ok(server)
    }

    /// Runs `bin args` (which must listen on `port`) without waiting for it.
    ///
    /// # Errors
    /// The spawn error.
    pub fn spawn(kind: Kind, bin: &Path, port: u16, args: Vec<String>) -> std::io::Result<Server> {
        Server::spawn_to(kind, bin, port, args, None)
    }

    /// As [`Server::spawn`]; with `log`, the process's stdout and stderr go
    /// to that file (Redis logs to stdout), else stdout is dropped and
    /// stderr is this program's.
    ///
    /// # Errors
    /// The spawn error, or the log file cannot be made.
    pub fn spawn_to(
        kind: Kind,
        bin: &Path,
        port: u16,
        args: Vec<String>,
        log: Option<&Path>,
    ) -> std::io::Result<Server> {
        let command_line = format!("{} {}", display_path(bin), shell_join(&args));
        let (stdout, stderr) = match log {
            Some(path) => {
                let file = std::fs::File::create(path)?;
                (Stdio::from(file.try_clone()?), Stdio::from(file))
            }
            None => (Stdio::null(), Stdio::inherit()),
        };
        let child = Command::new(bin)
            .args(&args)
            .stdout(stdout)
            .stderr(stderr)
            .spawn()?;
        Ok(Server {
            kind,
            port,
            command_line,
            child,
            scratch: None,
        })
    }

    /// Whether the process has exited (and how), without waiting.
    ///
    /// # Errors
    /// The wait failed.
    pub fn exited(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.child.try_wait()
    }

    /// Sends `SHUTDOWN` and waits (at most `limit`) until the process has
    /// exited; killed if it has not by then.
    ///
    /// # Errors
    /// The process still running after `limit` (it is killed), or the wait
    /// failed.
    pub fn shutdown(mut self, limit: Duration) -> std::io::Result<()> {
        // The connection closes without a reply when the server stops.
        let _ = self.conn().and_then(|mut c| c.call(&["SHUTDOWN"]));
        let start = Instant::now();
        loop {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "{} still running {limit:?} after SHUTDOWN",
                        self.kind.label()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// CPU time (user + system, all threads) the process has used so far, in
    /// seconds, from `/proc/<pid>/stat`; `None` where that cannot be read.
    pub fn cpu_seconds(&self) -> Option<f64> {
        cpu_of_stat(&std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?)
    }

    /// CPU seconds (user + system) of each of the process's threads whose
    /// name starts with `prefix`, in the order they were made (by thread
    /// id), from `/proc/<pid>/task`; empty where that cannot be read.
    /// Leasehold's shard threads are `leasehold-shard-N` (the kernel keeps
    /// 15 bytes of a name, so they read `leasehold-shard`), made in shard
    /// order.
    pub fn thread_cpu_seconds(&self, prefix: &str) -> Vec<f64> {
        let dir = format!("/proc/{}/task", self.child.id());
        let mut tids: Vec<u64> = std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        tids.sort_unstable();
        tids.into_iter()
            .filter(|t| {
                std::fs::read_to_string(format!("{dir}/{t}/comm"))
                    .is_ok_and(|c| c.starts_with(prefix))
            })
            .filter_map(|t| cpu_of_stat(&std::fs::read_to_string(format!("{dir}/{t}/stat")).ok()?))
            .collect()
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A new set-up connection.
    ///
    /// # Errors
    /// The connect error.
    pub fn conn(&self) -> std::io::Result<Conn> {
        Conn::connect(&self.addr())
    }

    /// Polls `PING` every `every` until it answers `PONG` (not `-LOADING`),
    /// at most `limit`; the time it took from this call.
    ///
    /// # Errors
    /// No PONG within `limit`, or the process exited.
    pub fn wait_ready(&self, limit: Duration, every: Duration) -> std::io::Result<Duration> {
        let start = Instant::now();
        loop {
            if let Ok(text) = self.conn().and_then(|mut c| c.call_text(&["PING"])) {
                if text == "PONG" {
                    return Ok(start.elapsed());
                }
            }
            if start.elapsed() > limit {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{} did not answer PING within {limit:?}", self.kind.label()),
                ));
            }
            std::thread::sleep(every);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = self.scratch.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// User + system CPU seconds of a `/proc/.../stat` line.
fn cpu_of_stat(stat: &str) -> Option<f64> {
    // Fields after the command name, which ends at the last ')': state is
    // the first, utime and stime the 12th and 13th, in clock ticks of
    // USER_HZ (100 on Linux).
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// Whether `args` holds `flag` as one of its words.
pub fn has_flag(args: &[String], flag: &str) -> bool {
    args.iter().any(|a| a == flag)
}

/// `leasehold-bench-<pid>` under the system's temp directory: where
/// [`scratch_dir`] makes the servers' directories.
fn scratch_root() -> PathBuf {
    std::env::temp_dir().join(format!("leasehold-bench-{}", std::process::id()))
}

/// Removes [`scratch_root`] once every server is gone (it is then empty;
/// a directory still in use is left).
pub fn remove_scratch_root() {
    let _ = std::fs::remove_dir(scratch_root());
}

/// A new empty directory for one server: `leasehold-bench-<pid>/<kind>-<n>`
/// under the system's temp directory.
///
/// # Errors
/// The directory cannot be made.
pub fn scratch_dir(kind: Kind) -> std::io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = scratch_root().join(format!("{}-{n}", kind.label().to_lowercase()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The environment variable that keeps every port this program picks in a
/// range, `FIRST-LAST` (`7700-7760`), for a machine whose other users own
/// the rest; unset, the system picks any free port.
pub const PORTS_VAR: &str = "LEASEHOLD_BENCH_PORTS";

/// A port that was free on 127.0.0.1 a moment ago: in the range of
/// [`PORTS_VAR`] when it is set (each call tries the range's next port
/// first, so two servers started one after the other get different ones),
/// else any the system gives.
///
/// # Errors
/// The bind error; with [`PORTS_VAR`], a malformed range or no free port
/// in it.
pub fn free_port() -> std::io::Result<u16> {
    match std::env::var(PORTS_VAR) {
        Ok(range) => {
            let (first, last) = parse_ports(&range).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("{PORTS_VAR}={range:?}: expected FIRST-LAST"),
                )
            })?;
            port_in(first, last)
        }
        Err(_) => Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()),
    }
}

/// `FIRST-LAST` as two ports, `FIRST <= LAST`.
fn parse_ports(range: &str) -> Option<(u16, u16)> {
    let (a, b) = range.trim().split_once('-')?;
    let (a, b): (u16, u16) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    (a > 0 && a <= b).then_some((a, b))
}

/// The first port from the range's next one on (wrapping) that binds.
fn port_in(first: u16, last: u16) -> std::io::Result<u16> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = u64::from(last - first) + 1;
    for _ in 0..n {
        let port = first + (NEXT.fetch_add(1, Ordering::Relaxed) % n) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no free port in {first}-{last}"),
    ))
}

/// A path relative to the working directory when it is under it.
pub fn display_path(p: &Path) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| p.strip_prefix(cwd).ok().map(|r| r.display().to_string()))
        .unwrap_or_else(|| p.display().to_string())
}

/// Joins arguments into a line a POSIX shell reads back as the same words.
pub fn shell_join<S: AsRef<str>>(args: &[S]) -> String {
    args.iter()
        .map(|a| {
            let a = a.as_ref();
            let plain = !a.is_empty()
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,+@%".contains(&b));
            if plain {
                a.to_string()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_server_gets_no_persistence_unless_asked() {
        let extra = ["--dir".to_string(), "/tmp/x".to_string()];
        let redis = Server::args(Kind::Redis, 7000, 2, &extra);
        assert_eq!(
            shell_join(&redis),
            "--port 7000 --bind 127.0.0.1 --save '' --appendonly no --dir /tmp/x"
        );
        let log = ["--appendonly", "yes", "--appendfsync", "everysec"].map(String::from);
        let lh = Server::args(Kind::Leasehold, 7001, 2, &log);
        assert_eq!(
            shell_join(&lh),
            "--port 7001 --bind 127.0.0.1 --threads 2 --loglevel warn --save '' \
             --appendonly yes --appendfsync everysec"
        );
    }

    #[test]
    fn scratch_directories_are_new_and_empty() {
        let a = scratch_dir(Kind::Leasehold).unwrap();
        let b = scratch_dir(Kind::Leasehold).unwrap();
        assert_ne!(a, b);
        assert!(a.is_dir() && std::fs::read_dir(&a).unwrap().next().is_none());
        assert!(a.starts_with(std::env::temp_dir()));
        let _ = std::fs::remove_dir_all(a);
        let _ = std::fs::remove_dir_all(b);
        remove_scratch_root();
    }

    #[test]
    fn a_port_range_gives_ports_inside_it() {
        assert_eq!(parse_ports("7700-7760"), Some((7700, 7760)));
        assert_eq!(parse_ports(" 7700 - 7700 "), Some((7700, 7700)));
        assert_eq!(parse_ports("7760-7700"), None);
        assert_eq!(parse_ports("7700"), None);
        let a = port_in(7740, 7760).unwrap();
        let b = port_in(7740, 7760).unwrap();
        assert!((7740..=7760).contains(&a) && (7740..=7760).contains(&b));
        assert_ne!(a, b);
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(
            shell_join(&["--save", "", "--command", "SET k:__key__ x", "it's"]),
            r#"--save '' --command 'SET k:__key__ x' 'it'\''s'"#
        );
    }
}
