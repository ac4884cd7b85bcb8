//! MONITOR: the connections that watch every command, and the line each
//! command becomes for them.
//!
//! The dispatcher formats a line for every command that passes its checks
//! while at least one monitor exists ([`Monitors::active`], one relaxed
//! atomic load per command otherwise), on the thread that planned it, into
//! that thread's buffer; each turn sends what it gathered to every monitor's
//! thread in one message, which appends it to the monitors' output. A
//! monitor that does not read is held to the pub/sub class of
//! `client-output-buffer-limit` (32 MB, or 8 MB for 60 s, by default) and
//! closed past it, as a subscriber is: Redis counts monitors as normal
//! clients, unlimited by default; here a stalled monitor cannot take the
//! server's memory.
//!
//! The line is Redis 7's (`replicationFeedMonitors`): `+<unix s>.<us> [0
//! <client addr>] "<arg>" ...`, each argument quoted as `sdscatrepr` quotes
//! it. As in Redis, the arguments of AUTH and HELLO's AUTH are shown as
//! `(redacted)`, and administrative commands are not shown.

use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{BufMut, Bytes, BytesMut};
use parking_lot::Mutex;

/// A connection in MONITOR mode: its thread, its key in that thread's
/// table, and its CLIENT ID (a key reused by a newer connection is not it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watcher {
    /// The thread serving it.
    pub thread: usize,
    /// Its key in that thread's connection table.
    pub conn: usize,
    /// Its CLIENT ID.
    pub client: u64,
}

/// Every monitor of the server.
#[derive(Debug, Default)]
pub struct Monitors {
    count: AtomicUsize,
    list: Mutex<Vec<Watcher>>,
}

impl Monitors {
    /// Whether any connection monitors: the only cost of MONITOR to a
    /// command when none does.
    pub fn active(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// Adds a monitor.
    pub fn add(&self, w: Watcher) {
        let mut list = self.list.lock();
        if !list.contains(&w) {
            list.push(w);
        }
        self.count.store(list.len(), Ordering::Relaxed);
    }

    /// Removes client `client`'s monitor, if it has one.
    pub fn remove(&self, client: u64) {
        let mut list = self.list.lock();
        list.retain(|w| w.client != client);
        self.count.store(list.len(), Ordering::Relaxed);
    }

    /// The monitors, grouped by thread: `per[t]` lists thread `t`'s.
    pub fn by_thread(&self, threads: usize) -> Vec<Vec<Watcher>> {
        let mut per = vec![Vec::new(); threads];
        for w in self.list.lock().iter() {
            if let Some(p) = per.get_mut(w.thread) {
                p.push(*w);
            }
        }
        per
    }
}

/// Lines gathered on one thread for the monitors, sent once per turn.
#[derive(Debug)]
pub struct Feed {
    /// The lines, RESP simple strings one after another.
    pub lines: Bytes,
    /// The receivers on the thread the feed is sent to.
    pub to: Vec<Watcher>,
}

/// Administrative commands Redis 7.0 does not show to monitors (its
/// `admin` flag), by name, and CLIENT's administrative subcommands.
const HIDDEN: &[&str] = &[
    "config",
    "shutdown",
    "save",
    "bgsave",
    "bgrewriteaof",
    "replicaof",
    "slaveof",
    "psync",
    "replconf",
    "monitor",
    "lh.flushslots",
    "debug",
];
const HIDDEN_CLIENT: &[&str] = &["list", "kill", "pause", "unpause", "no-evict"];

/// Whether the command `name` (lower case) with `args` is shown to
/// monitors.
pub fn shown(name: &str, args: &[Bytes]) -> bool {
    if HIDDEN.contains(&name) {
        return false;
    }
    if name == "client" {
        let sub = args
            .get(1)
            .map(|s| s.to_ascii_lowercase())
            .unwrap_or_default();
        return !HIDDEN_CLIENT.iter().any(|h| h.as_bytes() == sub);
    }
    true
}

/// Appends the monitor line of `args` sent by the client at `addr`, at
/// `unix_us` (Unix microseconds), to `out`.
pub fn line(out: &mut BytesMut, unix_us: u64, addr: &str, args: &[Bytes]) {
    let mut head = String::with_capacity(48);
    use std::fmt::Write as _;
    let _ = write!(
        head,
        "+{}.{:06} [0 {addr}]",
        unix_us / 1_000_000,
        unix_us % 1_000_000
    );
    out.put_slice(head.as_bytes());
    let name = args
        .first()
        .map(|n| n.to_ascii_lowercase())
        .unwrap_or_default();
    for (i, a) in args.iter().enumerate() {
        out.put_u8(b' ');
        if redacted(&name, args, i) {
            out.put_slice(b"\"(redacted)\"");
        } else {
            quote(out, a);
        }
    }
    out.put_slice(b"\r\n");
}

/// Whether argument `i` of the command is a secret: every argument of AUTH,
/// and the two after HELLO's AUTH.
fn redacted(name: &[u8], args: &[Bytes], i: usize) -> bool {
    match name {
        b"auth" => i > 0,
        b"hello" => (2..i).any(|j| args[j].eq_ignore_ascii_case(b"AUTH") && i - j <= 2),
        _ => false,
    }
}

/// Appends `bytes` in double quotes, escaped as Redis's `sdscatrepr` does:
/// `\\`, `\"`, `\n`, `\r`, `\t`, `\a`, `\b`, printable ASCII as it is, any
/// other byte as `\xHH`.
pub fn quote(out: &mut BytesMut, bytes: &[u8]) {
    out.put_u8(b'"');
    for &b in bytes {
        match b {
            b'\\' => out.put_slice(b"\\\\"),
            b'"' => out.put_slice(b"\\\""),
            b'\n' => out.put_slice(b"\\n"),
            b'\r' => out.put_slice(b"\\r"),
            b'\t' => out.put_slice(b"\\t"),
            0x07 => out.put_slice(b"\\a"),
            0x08 => out.put_slice(b"\\b"),
            0x20..=0x7e => out.put_u8(b),
            _ => out.put_slice(format!("\\x{b:02x}").as_bytes()),
        }
    }
    out.put_u8(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(args: &[&str]) -> String {
        let args: Vec<Bytes> = args
            .iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect();
        let mut out = BytesMut::new();
        line(&mut out, 1_796_150_178_726_156, "127.0.0.1:35788", &args);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn lines_are_redis_7s() {
        // Each as redis-server 7.0.15 printed it.
        assert_eq!(
            of(&["SET", "a", "x y\n\"\x01"]),
            "+1796150178.726156 [0 127.0.0.1:35788] \"SET\" \"a\" \"x y\\n\\\"\\x01\"\r\n"
        );
        assert_eq!(
            of(&["AUTH", "pw"]),
            "+1796150178.726156 [0 127.0.0.1:35788] \"AUTH\" \"(redacted)\"\r\n"
        );
        assert_eq!(
            of(&["HELLO", "3", "AUTH", "default", "pw", "SETNAME", "x"]),
            "+1796150178.726156 [0 127.0.0.1:35788] \"HELLO\" \"3\" \"AUTH\" \"(redacted)\" \"(redacted)\" \"SETNAME\" \"x\"\r\n"
        );
        let mut out = BytesMut::new();
        quote(&mut out, b"\\\t\r\x07\x08\xff~");
        assert_eq!(&out[..], b"\"\\\\\\t\\r\\a\\b\\xff~\"");
    }

    #[test]
    fn administrative_commands_are_not_shown() {
        let b = |s: &[&str]| {
            s.iter()
                .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                .collect::<Vec<_>>()
        };
        assert!(!shown("config", &b(&["CONFIG", "GET", "port"])));
        assert!(!shown("client", &b(&["CLIENT", "LIST"])));
        assert!(shown("client", &b(&["CLIENT", "SETNAME", "x"])));
        assert!(shown("get", &b(&["GET", "k"])));
    }
}
