//! Starting and stopping the two servers under test on free loopback ports.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
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

/// A server process this program started; killed (by its pid) on drop.
#[derive(Debug)]
pub struct Server {
    /// Which server.
    pub kind: Kind,
    /// Its loopback port.
    pub port: u16,
    /// The command line that started it, for the report.
    pub command_line: String,
    child: Child,
}

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
    /// (`--replicaof ...`, `--dir ...`).
    ///
    /// # Errors
    /// As [`Server::start`].
    pub fn start_with(
        kind: Kind,
        bin: &Path,
        threads: usize,
        extra: &[String],
    ) -> std::io::Result<Server> {
        let port = free_port()?;
        let mut args: Vec<String> = match kind {
            Kind::Redis => [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ]
            .map(String::from)
            .to_vec(),
            Kind::Leasehold => [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--threads",
                &threads.to_string(),
                "--loglevel",
                "warn",
            ]
            .map(String::from)
            .to_vec(),
        };
        args.extend_from_slice(extra);
        Server::launch(kind, bin, port, args)
    }

    /// Runs `bin args` (which must listen on `port`) and waits (at most 10 s)
    /// until it answers PING with PONG.
    ///
    /// # Errors
    /// The spawn error, or a server that does not answer in time.
    pub fn launch(kind: Kind, bin: &Path, port: u16, args: Vec<String>) -> std::io::Result<Server> {
        let command_line = format!("{} {}", display_path(bin), shell_join(&args));
        let child = Command::new(bin)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        let server = Server {
            kind,
            port,
            command_line,
            child,
        };
        server.wait_ready(Duration::from_secs(10))?;
        Ok(server)
    }

    /// CPU time (user + system, all threads) the process has used so far, in
    /// seconds, from `/proc/<pid>/stat`; `None` where that cannot be read.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        // Fields after the command name, which ends at the last ')': state is
        // the first, utime and stime the 12th and 13th, in clock ticks of
        // USER_HZ (100 on Linux).
        let rest = &stat[stat.rfind(')')? + 1..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        Some(ticks as f64 / 100.0)
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

    fn wait_ready(&self, limit: Duration) -> std::io::Result<()> {
        let start = Instant::now();
        loop {
            if let Ok(text) = self.conn().and_then(|mut c| c.call_text(&["PING"])) {
                if text == "PONG" {
                    return Ok(());
                }
            }
            if start.elapsed() > limit {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{} did not answer PING within {limit:?}", self.kind.label()),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port that was free on 127.0.0.1 a moment ago.
///
/// # Errors
/// The bind error.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
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
    fn shell_quoting() {
        assert_eq!(
            shell_join(&["--save", "", "--command", "SET k:__key__ x", "it's"]),
            r#"--save '' --command 'SET k:__key__ x' 'it'\''s'"#
        );
    }
}
