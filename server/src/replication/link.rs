//! The replication thread: on a replica, the link to its primary (connect,
//! handshake, hand the connection to thread 0's event loop, `REPLCONF ACK`
//! every second and when asked, drop a primary silent for `repl-timeout`,
//! reconnect after a drop); on a primary with replicas, a `PING` record
//! every `repl-ping-replica-period`.
//!
//! The handshake is the one Redis replicas use, each step answered before
//! the next: `PING`; `AUTH [<masteruser>] <masterauth>` when a password is
//! set; `REPLCONF listening-port <port>` (`replica-announce-port` if set);
//! `REPLCONF ip-address <ip>` when `replica-announce-ip` is set; `REPLCONF capa eof
//! capa psync2 capa lh1` (`lh1`: this replica loads Leasehold snapshots,
//! version 1); `PSYNC <replid> <offset + 1>` (or `PSYNC ? -1` with nothing
//! applied yet), answered `+FULLRESYNC <replid> <offset>` or `+CONTINUE
//! [<replid>]`.
//!
//! With `tls-replication yes` the connection is TLS (the primary's
//! certificate checked against `tls-ca-cert-file`, this server's
//! `tls-cert-file` shown as the client's), the handshake runs over it, and
//! the event loop then gets the plain end of a [`crate::tls::relay`].

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use leasehold_protocol::encode_request;

use crate::replication::backlog::PING_RECORD;
use crate::replication::feed::repl_timeout;
use crate::replication::role::Target;
use crate::shard::{LinkStart, Mailbox, Msg};
use crate::state::Shared;

/// How often a replica acknowledges its offset.
pub const ACK_PERIOD: Duration = Duration::from_secs(1);
/// Wait between two connection attempts.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Longest a handshake step may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts the replication thread; it stops when the server shuts down.
///
/// # Errors
/// The thread could not be started.
pub fn spawn(
    shared: Arc<Shared>,
    mailboxes: Arc<Vec<Mailbox>>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("leasehold-repl".into())
        .spawn(move || run(&shared, &mailboxes))
}

fn run(shared: &Shared, mailboxes: &[Mailbox]) {
    let repl = &shared.repl;
    let mut last_ping = Instant::now();
    let mut last_ack = Instant::now();
    let mut acks: Option<TcpStream> = None;
    let mut next_try = Instant::now();
    let mut last_error = String::new();
    while !shared
        .shutting_down
        .load(std::sync::atomic::Ordering::SeqCst)
    {
        let ping_period = {
            let period = shared.config.read().replication.repl_ping_replica_period;
            Duration::from_secs(u64::from(period))
        };
        if !repl.is_replica() && last_ping.elapsed() >= ping_period {
            if !repl.replicas().is_empty() {
                repl.backlog.append(&[PING_RECORD]);
            }
            last_ping = Instant::now();
        }
        let Some(target) = repl.target() else {
            acks = None;
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        if repl.link_attached() {
            let asked = repl.ack_wanted(Duration::from_millis(100));
            if asked || last_ack.elapsed() >= ACK_PERIOD {
                send_ack(shared, &mut acks);
                last_ack = Instant::now();
            }
            let timeout = repl_timeout(shared);
            let silent = repl
                .link
                .lock()
                .last_io
                .is_some_and(|t| t.elapsed() > timeout);
            if silent {
                let id = repl.link.lock().client;
                let link = id.and_then(|id| shared.clients.lock().get(&id).cloned());
                // Once killed, a link still applying what it read (a frame
                // waiting for its shards) is not killed and logged again.
                if let Some(c) =
                    link.filter(|c| !c.killed.load(std::sync::atomic::Ordering::SeqCst))
                {
                    tracing::warn!("replication: no data from the primary for {timeout:?}");
                    c.kill();
                }
            }
            continue;
        }
        acks = None;
        if Instant::now() < next_try {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        let generation = repl.generation();
        match handshake(shared, &target) {
            Ok((stream, leftover, answer)) => {
                last_error.clear();
                if !repl.generation_is(generation) {
                    continue;
                }
                acks = stream.try_clone().ok();
                let full = match answer {
                    Answer::Full(replid, offset) => {
                        tracing::info!(
                            "replication: full sync from {}:{} at offset {offset}",
                            target.host,
                            target.port
                        );
                        // Loading first: the log's daemon rewrites after a
                        // full sync it counts, and must not do it before
                        // the payload is loaded.
                        repl.set_loading(true);
                        repl.adopt_full_sync(&replid, offset);
                        Some(offset)
                    }
                    Answer::Continue(replid) => {
                        tracing::info!(
                            "replication: partial resync from {}:{}",
                            target.host,
                            target.port
                        );
                        if let Some(id) = replid {
                            repl.adopt_continue(&id);
                        }
                        None
                    }
                };
                repl.link_attaching();
                let start = LinkStart {
                    stream,
                    leftover,
                    full,
                };
                mailboxes[0].send(Msg::Link(start));
                last_ack = Instant::now();
            }
            Err(e) => {
                let text = e.to_string();
                if text != last_error {
                    tracing::warn!(
                        "replication: cannot sync with {}:{}: {text} (retrying every {RETRY_AFTER:?})",
                        target.host,
                        target.port
                    );
                    last_error = text;
                }
                next_try = Instant::now() + RETRY_AFTER;
            }
        }
    }
}

fn send_ack(shared: &Shared, acks: &mut Option<TcpStream>) {
    let Some(s) = acks.as_mut() else {
        return;
    };
    let mut out = BytesMut::new();
    let offset = shared.repl.backlog.offset().to_string();
    encode_request(&["REPLCONF", "ACK", &offset], &mut out);
    if s.write_all(&out).is_err() {
        *acks = None;
    }
}

/// The primary's answer to PSYNC.
enum Answer {
    /// `+FULLRESYNC <replid> <offset>`: a payload follows.
    Full(String, u64),
    /// `+CONTINUE [<replid>]`: the stream follows.
    Continue(Option<String>),
}

fn io_error(why: String) -> std::io::Error {
    std::io::Error::other(why)
}

/// Reads one `\r\n`-terminated line into a string, keeping what follows in
/// `buf`. Lone `\n` keepalives before it are skipped.
fn read_line(s: &mut impl Read, buf: &mut BytesMut) -> std::io::Result<String> {
    let mut chunk = [0u8; 4096];
    loop {
        while buf.first() == Some(&b'\n') {
            let _ = buf.split_to(1);
        }
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            let line = buf.split_to(end + 2);
            return Ok(String::from_utf8_lossy(&line[..end]).into_owned());
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io_error("the primary closed the connection".into()));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn command(
    s: &mut (impl Read + Write),
    buf: &mut BytesMut,
    args: &[&str],
) -> std::io::Result<String> {
    let mut out = BytesMut::new();
    encode_request(args, &mut out);
    s.write_all(&out)?;
    read_line(s, buf)
}

fn handshake(shared: &Shared, t: &Target) -> std::io::Result<(TcpStream, BytesMut, Answer)> {
    let addr = (t.host.as_str(), t.port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io_error(format!("{} does not resolve", t.host)))?;
    let s = TcpStream::connect_timeout(&addr, STEP_TIMEOUT)?;
    s.set_read_timeout(Some(STEP_TIMEOUT))?;
    s.set_write_timeout(Some(STEP_TIMEOUT))?;
    let _ = s.set_nodelay(true);
    let tls = shared.config.read().tls.clone();
    let mut buf = BytesMut::new();
    if !tls.replication {
        let mut s = s;
        let answer = steps(shared, &mut s, &mut buf)?;
        s.set_read_timeout(None)?;
        s.set_write_timeout(Some(repl_timeout(shared)))?;
        return Ok((s, buf, answer));
    }
    let config = crate::tls::client_config(&tls).map_err(io_error)?;
    let mut s = crate::tls::BlockingStream::connect(&config, &t.host, s)?;
    let answer = steps(shared, &mut s, &mut buf)?;
    let s = crate::tls::relay(s, repl_timeout(shared))?;
    s.set_write_timeout(Some(repl_timeout(shared)))?;
    Ok((s, buf, answer))
}

/// The handshake's steps over `s`, up to PSYNC's answer; what was read past
/// it stays in `buf`.
fn steps<S: Read + Write>(
    shared: &Shared,
    s: &mut S,
    buf: &mut BytesMut,
) -> std::io::Result<Answer> {
    // Any answer to PING (even -NOAUTH) shows a live server.
    command(s, buf, &["PING"])?;
    let (auth, user, ip, port) = {
        let c = shared.config.read();
        let r = &c.replication;
        let port = match r.replica_announce_port {
            0 => shared.local_addr.port(),
            p => p,
        };
        (
            r.masterauth.clone(),
            r.masteruser.clone(),
            r.replica_announce_ip.clone(),
            port.to_string(),
        )
    };
    let ok = |line: String, step: &str| match line.starts_with('+') {
        true => Ok(()),
        false => Err(io_error(format!("{step} answered {line}"))),
    };
    if !auth.is_empty() {
        let line = match user.is_empty() {
            true => command(s, buf, &["AUTH", &auth])?,
            false => command(s, buf, &["AUTH", &user, &auth])?,
        };
        ok(line, "AUTH")?;
    }
    ok(
        command(s, buf, &["REPLCONF", "listening-port", &port])?,
        "REPLCONF listening-port",
    )?;
    if !ip.is_empty() {
        ok(
            command(s, buf, &["REPLCONF", "ip-address", &ip])?,
            "REPLCONF ip-address",
        )?;
    }
    ok(
        command(
            s,
            buf,
            &["REPLCONF", "capa", "eof", "capa", "psync2", "capa", "lh1"],
        )?,
        "REPLCONF capa",
    )?;
    let repl = &shared.repl;
    let offset = repl.backlog.offset();
    let ids = repl.ids();
    let next = (offset + 1).to_string();
    let lost = repl.history_lost.load(std::sync::atomic::Ordering::SeqCst);
    let psync = match offset == 0 || lost {
        true => ["PSYNC", "?", "-1"],
        false => ["PSYNC", ids.replid.as_str(), next.as_str()],
    };
    let line = command(s, buf, &psync)?;
    let mut words = line.split(' ');
    let answer = match words.next() {
        Some("+FULLRESYNC") => {
            let id = words.next().unwrap_or_default().to_string();
            let off = words.next().and_then(|o| o.parse().ok());
            match (id.len(), off) {
                (40, Some(off)) => Answer::Full(id, off),
                _ => return Err(io_error(format!("PSYNC answered {line}"))),
            }
        }
        Some("+CONTINUE") => Answer::Continue(words.next().map(str::to_string)),
        _ => return Err(io_error(format!("PSYNC answered {line}"))),
    };
    Ok(answer)
}
