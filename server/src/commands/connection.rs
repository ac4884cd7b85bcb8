//! Connection commands: PING, ECHO, HELLO, AUTH, SELECT, QUIT, RESET, CLIENT.
//!
//! PING and ECHO touch no state and run inline on the connection's thread.
//! The others change connection state and run as [`Exec::Conn`] rows, after
//! the replies already owed on the connection.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use leasehold_protocol::{Args, Protocol, Reply};

use super::flags::{FAST, LOADING, NO_AUTH, STALE};
use super::{cmd, table, CommandSpec, Exec, NO_KEYS};
use crate::error::OpError;
use crate::session::ConnCtx;
use crate::shard::Shard;
use crate::state::{ClientHandle, Shared};

/// The Redis version Leasehold reports to tools (INFO `redis_version`, HELLO):
/// the Redis 7 semantics it implements.
pub const REDIS_COMPAT_VERSION: &str = "7.0.15";

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("ping", -1, FAST | STALE, NO_KEYS, Exec::Key(ping), "Returns the server's liveliness response."),
    cmd("echo", 2, FAST, NO_KEYS, Exec::Key(echo), "Returns the given string."),
    cmd("hello", -1, NO_AUTH | FAST | LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(hello), "Handshakes with the Redis server."),
    cmd("auth", -2, NO_AUTH | FAST | LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(auth), "Authenticates the connection."),
    cmd("select", 2, FAST | LOADING | STALE, NO_KEYS, Exec::Conn(select), "Changes the selected database (only database 0 exists)."),
    cmd("quit", -1, NO_AUTH | FAST | LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(quit), "Closes the connection."),
    cmd("reset", 1, NO_AUTH | FAST | LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(reset), "Resets the connection."),
    cmd("client", -2, LOADING | STALE | super::flags::NO_SCRIPT, NO_KEYS, Exec::Conn(client), "A container for client connection commands."),
];

fn ping(_s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    match a.remaining() {
        0 => Ok(Reply::simple("PONG")),
        1 => Ok(Reply::Bulk(a.next()?)),
        _ => Err(OpError::Arity("ping")),
    }
}

fn echo(_s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    Ok(Reply::Bulk(a.next()?))
}

fn auth(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let (user, pass) = match a.remaining() {
        1 => (None, a.next()?),
        2 => (Some(a.next()?), a.next()?),
        _ => return Err(OpError::Syntax),
    };
    super::acl::login(ctx, user.as_deref(), &pass)?;
    Ok(Reply::ok())
}

fn hello(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let mut proto = None;
    if a.remaining() > 0 {
        let v = a.i64().map_err(|_| OpError::ProtocolVersionNotInteger)?;
        if !(2..=3).contains(&v) {
            return Err(OpError::NoProto);
        }
        proto = Some(if v == 3 {
            Protocol::Resp3
        } else {
            Protocol::Resp2
        });
    }
    let mut name = None;
    while a.remaining() > 0 {
        // Redis names a bad option as sent.
        let sent = a
            .peek()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        match a.word()?.as_str() {
            "AUTH" if a.remaining() >= 2 => {
                let user = a.next()?;
                let pass = a.next()?;
                super::acl::login(ctx, Some(&user), &pass)?;
            }
            "SETNAME" if a.remaining() >= 1 => name = Some(a.next()?),
            _ => return Err(OpError::HelloSyntax(sent)),
        }
    }
    if !ctx.conn.authenticated {
        return Err(OpError::HelloNoAuth);
    }
    if let Some(n) = name {
        set_name(&ctx.conn.handle, n)?;
    }
    if let Some(p) = proto {
        ctx.conn.proto = p;
        ctx.conn
            .handle
            .resp
            .store(if p == Protocol::Resp3 { 3 } else { 2 }, Ordering::Relaxed);
    }
    let resp = if ctx.conn.proto == Protocol::Resp3 {
        3
    } else {
        2
    };
    Ok(Reply::Map(vec![
        (Reply::bulk("server"), Reply::bulk("redis")),
        (Reply::bulk("version"), Reply::bulk(REDIS_COMPAT_VERSION)),
        (Reply::bulk("proto"), Reply::Int(resp)),
        (Reply::bulk("id"), Reply::Int(ctx.conn.handle.id as i64)),
        (Reply::bulk("mode"), Reply::bulk(mode(ctx))),
        (Reply::bulk("role"), Reply::bulk("master")),
        (Reply::bulk("modules"), Reply::Array(Vec::new())),
    ]))
}

/// HELLO's `mode`: `cluster` in cluster mode, as Redis answers.
fn mode(ctx: &ConnCtx<'_>) -> &'static str {
    match ctx.shared.cluster.is_some() {
        true => "cluster",
        false => "standalone",
    }
}

fn select(_ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    match a.i64()? {
        0 => Ok(Reply::ok()),
        _ => Err(OpError::DbIndexOutOfRange),
    }
}

fn quit(ctx: &mut ConnCtx<'_>, _a: &mut Args) -> Result<Reply, OpError> {
    ctx.conn.close = true;
    Ok(Reply::ok())
}

fn reset(ctx: &mut ConnCtx<'_>, _a: &mut Args) -> Result<Reply, OpError> {
    // Out of subscribed mode: every subscription goes, without confirmations.
    ctx.conn
        .pubsub
        .clear(&ctx.shared.pubsub, ctx.conn.handle.id);
    super::pubsub::publish_counts(ctx);
    ctx.conn.proto = Protocol::Resp2;
    ctx.conn.handle.resp.store(2, Ordering::Relaxed);
    if std::mem::take(&mut ctx.conn.monitor) {
        ctx.shared.monitors.remove(ctx.conn.handle.id);
        ctx.conn.handle.monitor.store(false, Ordering::Relaxed);
    }
    *ctx.conn.handle.name.lock() = None;
    // Out of READONLY mode, as Redis's RESET.
    ctx.conn.cluster = crate::session::ClusterConn::default();
    // Back to the default user, authenticated while it needs no password.
    super::acl::reset_user(ctx);
    let open = ctx.conn.user.enabled && ctx.conn.user.nopass;
    ctx.conn.set_authenticated(open);
    // Out of MULTI, and nothing watched any more.
    let tx = &mut ctx.conn.tx;
    tx.multi = None;
    tx.pending = Some(crate::session::TxWork::Unwatch(std::mem::take(
        &mut tx.watched,
    )));
    Ok(Reply::simple("RESET"))
}

fn set_name(handle: &ClientHandle, name: Bytes) -> Result<(), OpError> {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(OpError::BadClientName);
    }
    *handle.name.lock() = (!name.is_empty()).then_some(name);
    Ok(())
}

/// One CLIENT LIST / CLIENT INFO line, in Redis 7's field order.
pub(crate) fn client_line(shared: &Shared, c: &ClientHandle) -> String {
    let name = c
        .name
        .lock()
        .as_ref()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .unwrap_or_default();
    let age = c.created.elapsed().as_secs();
    let idle_ms = (c.created.elapsed().as_millis() as u64)
        .saturating_sub(c.last_cmd_ms.load(Ordering::Relaxed));
    let cmd = table()
        .commands
        .get(c.last_cmd.load(Ordering::Relaxed))
        .map_or("NULL", |s| s.name);
    let _ = shared;
    let flags = if c.monitor.load(Ordering::Relaxed) {
        "O"
    } else if c.is_pubsub() {
        "P"
    } else {
        "N"
    };
    let b = &c.buffers;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let (qbuf, rbs) = (get(&b.qbuf), get(&b.rbs));
    format!(
        "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags={flags} db=0 sub={} psub={} ssub=0 multi=-1 qbuf={qbuf} qbuf-free={} argv-mem=0 multi-mem=0 rbs={rbs} rbp={qbuf} obl={} oll={} omem={} tot-mem={} events=r cmd={} user={} redir=-1 resp={}\n",
        c.id,
        c.addr,
        c.laddr,
        name,
        age,
        idle_ms / 1000,
        c.sub.load(Ordering::Relaxed),
        c.psub.load(Ordering::Relaxed),
        get(&b.qbuf_free),
        get(&b.obl),
        get(&b.oll),
        get(&b.omem),
        get(&b.tot_mem),
        cmd,
        c.user.lock(),
        c.resp.load(Ordering::Relaxed)
    )
}

fn client(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let sub = a.word()?;
    // Redis echoes the subcommand as sent and names `client|<sub>` in arity errors.
    let sent = String::from_utf8_lossy(&a.all()[1]).into_owned();
    let unknown = || OpError::UnknownSubcommand {
        command: "CLIENT",
        sub: sent.clone(),
    };
    let arity = || OpError::SubcommandArity(format!("client|{}", sub.to_ascii_lowercase()));
    match sub.as_str() {
        "ID" => {
            a.finish().map_err(|_| arity())?;
            Ok(Reply::Int(ctx.conn.handle.id as i64))
        }
        "SETNAME" => {
            let name = a.next().map_err(|_| arity())?;
            a.finish().map_err(|_| arity())?;
            set_name(&ctx.conn.handle, name)?;
            Ok(Reply::ok())
        }
        "GETNAME" => {
            a.finish().map_err(|_| arity())?;
            Ok(ctx.conn.handle.name.lock().clone().map(Reply::Bulk).unwrap_or(Reply::Nil))
        }
        "SETINFO" => {
            let attr = a.word().map_err(|_| unknown())?;
            let _value = a.next().map_err(|_| unknown())?;
            match attr.as_str() {
                "LIB-NAME" | "LIB-VER" => Ok(Reply::ok()),
                other => Err(OpError::UnrecognizedOption(other.to_string())),
            }
        }
        "INFO" => {
            a.finish().map_err(|_| arity())?;
            Ok(Reply::Verbatim("txt", Bytes::from(client_line(ctx.shared, &ctx.conn.handle))))
        }
        "LIST" => {
            let mut ids: Option<Vec<u64>> = None;
            let mut kind = None;
            while a.remaining() > 0 {
                match a.word()?.as_str() {
                    "TYPE" => kind = Some(client_type(&a.word()?)?),
                    "ID" => {
                        let mut list = Vec::new();
                        while a.remaining() > 0 {
                            list.push(a.u64().map_err(|_| OpError::InvalidClientId)?);
                        }
                        ids = Some(list);
                    }
                    _ => return Err(OpError::Syntax),
                }
            }
            let link = ctx.shared.repl.link.lock().client;
            let clients = ctx.shared.clients.lock();
            let mut all: Vec<_> = clients.values().cloned().collect();
            drop(clients);
            all.sort_by_key(|c| c.id);
            let text: String = all
                .iter()
                .filter(|c| ids.as_ref().is_none_or(|l| l.contains(&c.id)))
                .filter(|c| kind.is_none_or(|k| k.matches(c, link)))
                .map(|c| client_line(ctx.shared, c))
                .collect();
            Ok(Reply::Verbatim("txt", Bytes::from(text)))
        }
        "KILL" => client_kill(ctx, a),
        "NO-EVICT" | "NO-TOUCH" => {
            match a.word()?.as_str() {
                "ON" | "OFF" => {}
                _ => return Err(OpError::Syntax),
            }
            Ok(Reply::ok())
        }
        "HELP" => Ok(Reply::Array(
            [
                "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "ID", "    Return the ID of the current connection.",
                "GETNAME", "    Return the name of the current connection.",
                "SETNAME <name>", "    Assign the name <name> to the current connection.",
                "INFO", "    Return information about the current client connection.",
                "LIST [TYPE normal|master|replica|pubsub] [ID <id> ...]", "    Return information about client connections.",
                "KILL <ip:port> | KILL [ID <id>] [ADDR <ip:port>] [LADDR <ip:port>] [SKIPME yes|no]", "    Kill connections.",
                "SETINFO <LIB-NAME|LIB-VER> <value>", "    Accepted for compatibility with client libraries.",
                "HELP", "    Print this help.",
            ]
            .iter()
            .map(|l| Reply::simple(l))
            .collect(),
        )),
        _ => Err(unknown()),
    }
}

/// A client type of CLIENT LIST TYPE and CLIENT KILL TYPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientType {
    /// Neither the replication link nor subscribed.
    Normal,
    /// With a channel or pattern subscription.
    Pubsub,
    /// A replica's link to its primary (on the replica).
    Master,
    /// A replica's stream (on the primary): replicas leave the client table
    /// when their PSYNC hands them to a sender, so none is listed.
    Replica,
}

impl ClientType {
    /// Whether `c` is of this type; `link` is the CLIENT ID of the
    /// replication link's connection, if any.
    fn matches(self, c: &ClientHandle, link: Option<u64>) -> bool {
        let is_link = link == Some(c.id);
        match self {
            ClientType::Normal => !c.is_pubsub() && !is_link,
            ClientType::Pubsub => c.is_pubsub(),
            ClientType::Master => is_link,
            ClientType::Replica => false,
        }
    }
}

fn client_type(name: &str) -> Result<ClientType, OpError> {
    match name.to_ascii_lowercase().as_str() {
        "normal" => Ok(ClientType::Normal),
        "pubsub" => Ok(ClientType::Pubsub),
        "master" => Ok(ClientType::Master),
        "replica" | "slave" => Ok(ClientType::Replica),
        other => Err(OpError::UnknownClientType(other.to_string())),
    }
}

fn client_kill(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let me = ctx.conn.handle.id;
    if a.remaining() == 1 {
        // Old form: CLIENT KILL ip:port, replies OK or an error.
        let addr = String::from_utf8_lossy(&a.next()?).into_owned();
        let target = ctx
            .shared
            .clients
            .lock()
            .values()
            .find(|c| !c.killed.load(Ordering::SeqCst) && c.addr.to_string() == addr)
            .cloned();
        return match target {
            Some(c) => {
                c.kill();
                if c.id == me {
                    ctx.conn.close = true;
                }
                Ok(Reply::ok())
            }
            None => Err(OpError::NoSuchClient),
        };
    }
    if a.remaining() == 0 {
        return Err(OpError::SubcommandArity("client|kill".into()));
    }
    let (mut id, mut addr, mut laddr, mut skipme) = (None, None, None, true);
    let mut kind = None;
    let mut user: Option<String> = None;
    while a.remaining() > 0 {
        let w = a.word()?;
        let v = a.next().map_err(|_| OpError::Syntax)?;
        let text = String::from_utf8_lossy(&v).into_owned();
        match w.as_str() {
            "ID" => {
                id = Some(
                    leasehold_protocol::int::parse_u64(&v).ok_or(OpError::ClientIdNotPositive)?,
                )
            }
            "ADDR" => addr = Some(text),
            "LADDR" => laddr = Some(text),
            "SKIPME" => match text.to_ascii_lowercase().as_str() {
                "yes" => skipme = true,
                "no" => skipme = false,
                _ => return Err(OpError::Syntax),
            },
            "TYPE" => kind = Some(client_type(&text)?),
            "USER" if ctx.shared.acl.read().get(&text).is_some() => user = Some(text),
            "USER" => return Err(OpError::NoSuchUser(text)),
            _ => return Err(OpError::Syntax),
        }
    }
    let link = ctx.shared.repl.link.lock().client;
    let mut replicas = 0;
    if kind == Some(ClientType::Replica) && id.is_none() && addr.is_none() && laddr.is_none() {
        replicas = ctx.shared.repl.drop_replicas();
    }
    let targets: Vec<_> = ctx
        .shared
        .clients
        .lock()
        .values()
        // A killed client stays listed until its thread drops it; it is gone already.
        .filter(|c| !c.killed.load(Ordering::SeqCst))
        .filter(|c| id.is_none_or(|i| c.id == i))
        .filter(|c| addr.as_ref().is_none_or(|x| &c.addr.to_string() == x))
        .filter(|c| laddr.as_ref().is_none_or(|x| &c.laddr.to_string() == x))
        .filter(|c| !(skipme && c.id == me))
        .filter(|c| kind.is_none_or(|k| k.matches(c, link)))
        .filter(|c| user.as_ref().is_none_or(|u| *c.user.lock() == *u))
        .cloned()
        .collect();
    for c in &targets {
        c.kill();
        if c.id == me {
            ctx.conn.close = true;
        }
    }
    Ok(Reply::Int((targets.len() + replicas) as i64))
}
