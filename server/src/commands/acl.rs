//! ACL: the `ACL` command and its subcommands (SETUSER, GETUSER, DELUSER,
//! LIST, USERS, WHOAMI, CAT, LOAD, SAVE, LOG, DRYRUN, GENPASS, HELP), the
//! login of AUTH and HELLO AUTH, the categories of the command table, the
//! ACL file, and [`check`], the dispatcher's test of a restricted user's
//! request. The rules themselves are [`crate::acl`]'s.
//!
//! # Categories
//! Derived once from the table: each family file gives its rows a family
//! category (`strings` -> `@string`, `ratelimit` -> `@ratelimit`, ...),
//! and the flags add the rest: `WRITE` -> `@write`, `READONLY` -> `@read`,
//! `FAST` -> `@fast` (else `@slow`), `ADMIN` -> `@admin @dangerous`; a
//! short list adds `@dangerous` (KEYS, FLUSHALL, ...) and `@keyspace`.
//! Container subcommands (`config|get`) have ids of their own and their
//! parent's categories (ACL's and CLIENT's administrative ones add
//! `@admin @dangerous`).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::Instant;

use bytes::Bytes;
use leasehold_protocol::{Args, Reply};

use super::flags::{ADMIN, FAST, LOADING, NO_AUTH, NO_SCRIPT, READONLY, STALE, WRITE};
use super::{cmd, table, CommandSpec, Exec, NO_KEYS};
use crate::acl::{cat, category_bit, Catalog, LogEntry, User, Users, CATEGORIES, LOG_MAX};
use crate::config::Config;
use crate::error::OpError;
use crate::session::{ConnCtx, ConnState};
use crate::state::{AclDenied, Shared};

/// The family's rows.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    cmd("acl", -2, LOADING | STALE | NO_SCRIPT, NO_KEYS, Exec::Conn(acl), "A container for Access List Control commands."),
];

/// The subcommands that have ids of their own, by container.
const SUBCOMMANDS: &[(&str, &[&str])] = &[
    (
        "acl",
        &[
            "cat", "deluser", "dryrun", "genpass", "getuser", "help", "list", "load", "log",
            "save", "setuser", "users", "whoami",
        ],
    ),
    (
        "client",
        &[
            "getname", "help", "id", "info", "kill", "list", "no-evict", "no-touch", "setinfo",
            "setname",
        ],
    ),
    (
        "command",
        &["count", "docs", "getkeys", "help", "info", "list"],
    ),
    ("config", &["get", "help", "resetstat", "rewrite", "set"]),
    (
        "memory",
        &["doctor", "help", "malloc-stats", "purge", "stats", "usage"],
    ),
    (
        "object",
        &["encoding", "freq", "help", "idletime", "refcount"],
    ),
    ("pubsub", &["channels", "help", "numpat", "numsub"]),
    ("script", &["exists", "flush", "help", "kill", "load"]),
];

/// Subcommands of containers that are not administrative that are.
const ADMIN_SUBS: &[&str] = &[
    "acl|deluser",
    "acl|dryrun",
    "acl|genpass",
    "acl|getuser",
    "acl|list",
    "acl|load",
    "acl|log",
    "acl|save",
    "acl|setuser",
    "acl|users",
    "client|kill",
    "client|list",
    "client|no-evict",
];

/// Commands in `@dangerous` beyond the `ADMIN` rows.
const DANGEROUS: &[&str] = &[
    "keys",
    "flushall",
    "flushdb",
    "info",
    "client",
    "role",
    "lh.restore",
    "sort",
    "migrate",
];

/// Commands in `@keyspace` beyond the `keys` and `moves` families.
const KEYSPACE: &[&str] = &["object", "lh.restore", "lh.flushslots"];

/// Rows whose categories Redis 7.0 files otherwise than their family and
/// flags say, exactly as its COMMAND INFO lists them.
const AS_REDIS: &[(&str, &[&str])] = &[
    ("wait", &["slow", "connection"]),
    ("command", &["slow", "connection"]),
    ("shutdown", &["admin", "slow", "dangerous"]),
    ("replconf", &["admin", "slow", "dangerous"]),
    ("psync", &["admin", "slow", "dangerous"]),
    ("monitor", &["admin", "slow", "dangerous"]),
    ("renamenx", &["keyspace", "write", "fast"]),
    ("migrate", &["keyspace", "write", "slow", "dangerous"]),
    ("eval_ro", &["slow", "scripting"]),
    ("evalsha_ro", &["slow", "scripting"]),
];

/// The command table as the ACL rules see it: one id per row (the row's
/// index), then one per container subcommand.
pub struct TableCatalog {
    names: Vec<String>,
    by_name: hashbrown::HashMap<String, usize>,
    cats: Vec<u64>,
    subs: Vec<std::ops::Range<usize>>,
    parents: Vec<Option<usize>>,
}

impl Catalog for TableCatalog {
    fn ids(&self) -> usize {
        self.names.len()
    }
    fn id(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }
    fn subs(&self, id: usize) -> std::ops::Range<usize> {
        self.subs.get(id).cloned().unwrap_or(0..0)
    }
    fn categories(&self, id: usize) -> u64 {
        self.cats[id]
    }
    fn name(&self, id: usize) -> &str {
        &self.names[id]
    }
    fn parent(&self, id: usize) -> Option<usize> {
        self.parents[id]
    }
}

impl TableCatalog {
    /// The id a request runs as: its row's, or for a container its
    /// subcommand's when that has one.
    pub fn request_id(&self, idx: usize, items: &[Bytes]) -> usize {
        if self.subs[idx].is_empty() {
            return idx;
        }
        let Some(sub) = items.get(1) else {
            return idx;
        };
        let full = format!(
            "{}|{}",
            self.names[idx],
            String::from_utf8_lossy(sub).to_ascii_lowercase()
        );
        self.by_name.get(&full).copied().unwrap_or(idx)
    }
}

fn family_category(family: &[CommandSpec]) -> u64 {
    use super::*;
    // The rows are constants (copied where used): a family is known by its
    // first row's name.
    let first = |f: &[CommandSpec]| f.first().map(|c| c.name);
    let is = |f: &[CommandSpec]| first(f) == first(family);
    if is(connection::COMMANDS) {
        cat("connection")
    } else if is(keys::COMMANDS) || is(moves::COMMANDS) {
        cat("keyspace")
    } else if is(strings::COMMANDS) {
        cat("string")
    } else if is(ratelimit::COMMANDS) {
        cat("ratelimit")
    } else if is(pubsub::COMMANDS) {
        cat("pubsub")
    } else if is(transaction::COMMANDS) {
        cat("transaction")
    } else if is(scripting::COMMANDS) {
        cat("scripting")
    } else if is(lists::COMMANDS) {
        cat("list")
    } else if is(hashes::COMMANDS) {
        cat("hash")
    } else if is(sets::COMMANDS) {
        cat("set")
    } else if is(zsets::COMMANDS) {
        cat("sortedset")
    } else if is(replication::COMMANDS) || is(persistence::COMMANDS) || is(pins::COMMANDS) {
        cat("admin") | cat("dangerous")
    } else {
        0
    }
}

fn row_categories(spec: &CommandSpec, family: u64) -> u64 {
    if let Some((_, names)) = AS_REDIS.iter().find(|(n, _)| *n == spec.name) {
        return names.iter().fold(0, |c, n| c | cat(n));
    }
    let mut c = family;
    if spec.has(WRITE) {
        c |= cat("write");
    }
    if spec.has(READONLY) {
        c |= cat("read");
    }
    c |= if spec.has(FAST) {
        cat("fast")
    } else {
        cat("slow")
    };
    if spec.has(ADMIN) {
        c |= cat("admin") | cat("dangerous");
    }
    if DANGEROUS.contains(&spec.name) {
        c |= cat("dangerous");
    }
    // Cluster mode's connection flags, as Redis files them.
    if matches!(spec.name, "readonly" | "readwrite" | "asking") {
        c |= cat("connection");
    }
    if KEYSPACE.contains(&spec.name) {
        c |= cat("keyspace");
    }
    // LH.RESTORE recreates any state: not a caller's rate-limit command.
    if spec.name == "lh.restore" {
        c &= !cat("ratelimit");
    }
    c
}

/// The catalog (built once, after the table).
pub fn catalog() -> &'static TableCatalog {
    static CATALOG: OnceLock<TableCatalog> = OnceLock::new();
    CATALOG.get_or_init(|| {
        let t = table();
        let mut by_family = hashbrown::HashMap::new();
        for family in super::families() {
            let c = family_category(family);
            for spec in family {
                by_family.insert(spec.name, c);
            }
        }
        let mut names: Vec<String> = t.commands.iter().map(|c| c.name.to_string()).collect();
        let mut cats: Vec<u64> = t
            .commands
            .iter()
            .map(|c| row_categories(c, by_family.get(c.name).copied().unwrap_or(0)))
            .collect();
        let mut subs = vec![0..0; names.len()];
        let mut parents = vec![None; names.len()];
        for (parent, list) in SUBCOMMANDS {
            let Some((p, _)) = t.lookup(parent.as_bytes()) else {
                continue;
            };
            let start = names.len();
            for s in *list {
                let full = format!("{parent}|{s}");
                let mut c = cats[p];
                if ADMIN_SUBS.contains(&full.as_str()) {
                    c |= cat("admin") | cat("dangerous");
                }
                names.push(full);
                cats.push(c);
                parents.push(Some(p));
            }
            subs[p] = start..names.len();
        }
        let by_name = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        TableCatalog {
            names,
            by_name,
            cats,
            subs,
            parents,
        }
    })
}

/// The users a server starts with: the default user from `requirepass`.
pub fn initial_users(config: &Config) -> Users {
    Users::with_default(&config.security.requirepass, catalog())
}

/// Reads `aclfile` when one is set.
///
/// # Errors
/// `InvalidInput` naming the file and line of the first bad one (or why
/// it cannot be read): a server with a bad ACL file does not start.
pub fn load_file_at_start(config: &Config) -> std::io::Result<Option<Users>> {
    if config.security.aclfile.is_empty() {
        return Ok(None);
    }
    read_file(config)
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
}

fn read_file(config: &Config) -> Result<Users, String> {
    let path = &config.security.aclfile;
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("Error loading ACLs, opening file '{path}': {e}"))?;
    Users::parse_file(&text, &config.security.requirepass, catalog())
        .map_err(|(line, why)| {
            format!("{path}:{line}: {why}. WARNING: ACL errors detected, no change to the previously active ACL rules was performed")
        })
}

/// Why a request is refused to a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// The command (its full name, `config|get` for a subcommand).
    Command(String),
    /// A key.
    Key(Bytes),
    /// A channel or pattern.
    Channel(Bytes),
}

impl Denial {
    /// The error reply.
    pub fn error(&self) -> OpError {
        match self {
            Denial::Command(c) => OpError::NoPermCommand(c.clone()),
            Denial::Key(_) => OpError::NoPermKey,
            Denial::Channel(_) => OpError::NoPermChannel,
        }
    }

    fn dryrun_text(&self) -> String {
        match self {
            Denial::Command(c) => format!("This user has no permissions to run the '{c}' command"),
            Denial::Key(k) => format!(
                "This user has no permissions to access the '{}' key",
                String::from_utf8_lossy(k)
            ),
            Denial::Channel(c) => format!(
                "This user has no permissions to access the '{}' channel",
                String::from_utf8_lossy(c)
            ),
        }
    }

    /// Its kind, which INFO and `/metrics` count.
    pub fn kind(&self) -> AclDenied {
        match self {
            Denial::Command(_) => AclDenied::Command,
            Denial::Key(_) => AclDenied::Key,
            Denial::Channel(_) => AclDenied::Channel,
        }
    }

    /// ACL LOG's `reason` and `object` for it.
    fn reason(&self) -> (&'static str, Bytes) {
        let object = match self {
            Denial::Command(c) => Bytes::from(c.clone()),
            Denial::Key(k) | Denial::Channel(k) => k.clone(),
        };
        (self.kind().reason(), object)
    }
}

/// What `user` may not do of request `items` (row `idx`): the command,
/// then each key (a `WRITE` row's keys are written, a `READONLY` row's
/// read, others' both), then each channel (PUBLISH's, SUBSCRIBE's, and
/// PSUBSCRIBE's patterns, which must equal one of the user's). `NO_AUTH`
/// rows (AUTH, HELLO, QUIT, RESET) are always allowed, as in Redis.
pub fn denial(user: &User, idx: usize, spec: &CommandSpec, items: &[Bytes]) -> Option<Denial> {
    if spec.has(NO_AUTH) {
        return None;
    }
    let c = catalog();
    let id = c.request_id(idx, items);
    if !user.can_run(id) {
        return Some(Denial::Command(c.name(id).to_string()));
    }
    let (read, write) = match (spec.has(WRITE), spec.has(READONLY)) {
        (true, _) => (false, true),
        (_, true) => (true, false),
        _ => (true, true),
    };
    if let Some(p) = spec
        .keys_in(items)
        .find(|&p| !user.key_ok(&items[p], read, write))
    {
        return Some(Denial::Key(items[p].clone()));
    }
    let channels: &[Bytes] = match spec.name {
        "publish" => &items[1..2.min(items.len())],
        "subscribe" | "psubscribe" => &items[1..],
        _ => &[],
    };
    let pattern = spec.name == "psubscribe";
    channels
        .iter()
        .find(|ch| !user.channel_ok(ch, pattern))
        .map(|ch| Denial::Channel(ch.clone()))
}

/// The dispatcher's ACL check for a connection whose user is restricted
/// (the unrestricted never come here): a refusal is logged in ACL LOG.
#[cold]
#[inline(never)]
pub fn check(
    shared: &Shared,
    conn: &ConnState,
    idx: usize,
    spec: &CommandSpec,
    items: &[Bytes],
) -> Result<(), OpError> {
    // The replication link applies its primary's stream whatever the
    // default user may do.
    if conn.is_link() {
        return Ok(());
    }
    let Some(d) = denial(&conn.user, idx, spec, items) else {
        return Ok(());
    };
    let context = if conn.tx.multi.is_some() {
        "multi"
    } else {
        "toplevel"
    };
    shared.counters.acl_denied[d.kind() as usize].fetch_add(1, Ordering::Relaxed);
    let (reason, object) = d.reason();
    log_denial(shared, conn, reason, context, object, &conn.user.name);
    Err(d.error())
}

/// How long a repeated denial adds to its entry's count, ms (Redis's 60 s).
const LOG_GROUP_MS: u128 = 60_000;

fn with_log<R>(shared: &Shared, f: impl FnOnce(&mut VecDeque<LogEntry>) -> R) -> R {
    f(&mut shared.acl.write().log)
}

/// Marks the end of a restricted user's script request, after the user's
/// name: the script's `redis.call`s are checked against that user
/// ([`script_caller`]). A client cannot forge it: the mark is recognised
/// by its address, this static's, not by its bytes.
static CALLER_MARK: &[u8] = b"acl-caller";

/// Appends the user's name and the mark to a script request (EVAL and its
/// siblings) of a restricted user; the script sees neither.
pub fn mark_script_caller(idx: usize, items: &mut Vec<Bytes>, conn: &ConnState) {
    if super::scripting::is_script(idx) && marked(items) == 0 && !conn.is_link() {
        items.push(Bytes::from(conn.user.name.clone()));
        items.push(Bytes::from_static(CALLER_MARK));
    }
}

/// How many items at the end of `all` are a caller's mark (0 or 2).
pub fn marked(all: &[Bytes]) -> usize {
    match all.last() {
        Some(b) if b.as_ptr() == CALLER_MARK.as_ptr() && all.len() >= 2 => 2,
        _ => 0,
    }
}

/// The user a marked script request runs as: `None` when not marked
/// (anyone may call anything), `Some(None)` when the user is gone.
pub fn script_caller(
    users: &parking_lot::RwLock<Users>,
    all: &[Bytes],
) -> Option<Option<std::sync::Arc<User>>> {
    if marked(all) == 0 {
        return None;
    }
    let name = text(&all[all.len() - 2]);
    Some(users.read().get(&name).cloned())
}

/// The refusal of a script's `redis.call` to its caller, in Redis 7.0's
/// words (the script layer adds where the script failed).
///
/// # Errors
/// The refusal.
pub fn script_denial(
    shared: &Shared,
    caller: &Option<std::sync::Arc<User>>,
    idx: usize,
    spec: &CommandSpec,
    argv: &[Bytes],
) -> Result<(), OpError> {
    let denied = match caller {
        None => Some(Denial::Command(spec.name.to_string())),
        Some(u) => denial(u, idx, spec, argv),
    };
    if let Some(d) = &denied {
        // Counted and logged as Redis 7 does, with context `lua`; the shard
        // running the script does not know the caller's connection, so
        // the entry's client-info names the user only.
        shared.counters.acl_denied[d.kind() as usize].fetch_add(1, Ordering::Relaxed);
        let (reason, object) = d.reason();
        let username = caller.as_ref().map_or("", |u| u.name.as_str());
        push_log(
            shared,
            reason,
            "lua",
            object,
            username,
            format!("user={username} (a script's redis.call)"),
        );
    }
    match denied {
        None => Ok(()),
        Some(Denial::Command(_)) => Err(OpError::Acl(
            "The user executing the script can't run this command or subcommand".into(),
        )),
        Some(Denial::Key(_)) => Err(OpError::Acl(
            "The user executing the script can't access at least one of the keys mentioned in the command arguments".into(),
        )),
        Some(Denial::Channel(_)) => Err(OpError::Acl(
            "The user executing the script can't publish to the channel mentioned in the command".into(),
        )),
    }
}

fn log_denial(
    shared: &Shared,
    conn: &ConnState,
    reason: &'static str,
    context: &'static str,
    object: Bytes,
    username: &str,
) {
    let client_info = super::connection::client_line(shared, &conn.handle)
        .trim_end()
        .to_string();
    push_log(shared, reason, context, object, username, client_info);
}

/// Enters one denial in ACL LOG, adding to a like entry of the last 60 s.
fn push_log(
    shared: &Shared,
    reason: &'static str,
    context: &'static str,
    object: Bytes,
    username: &str,
    client_info: String,
) {
    with_log(shared, |log| {
        if let Some(e) = log.iter_mut().find(|e| {
            e.reason == reason
                && e.context == context
                && e.object == object
                && e.username == username
                && e.created.elapsed().as_millis() < LOG_GROUP_MS
        }) {
            e.count += 1;
            e.client_info = client_info;
            return;
        }
        log.push_front(LogEntry {
            count: 1,
            reason,
            context,
            object,
            username: username.to_string(),
            created: Instant::now(),
            client_info,
        });
        log.truncate(LOG_MAX);
    });
}

/// Logs in as `user` (the default user when `None`) with `pass`, as AUTH
/// and HELLO AUTH do: a user that is on and whose password matches (any,
/// with `nopass`). A failure is counted, logged at a bounded rate and
/// entered in ACL LOG.
///
/// # Errors
/// `WRONGPASS`; for the one-argument form while the default user has
/// `nopass`, Redis's `AUTH <password> called without any password
/// configured` error.
pub fn login(ctx: &mut ConnCtx<'_>, user: Option<&[u8]>, pass: &[u8]) -> Result<(), OpError> {
    let name = String::from_utf8_lossy(user.unwrap_or(b"default")).into_owned();
    // The configuration's lock is never held while the users' is taken.
    let requirepass = ctx.shared.config.read().security.requirepass.clone();
    let found = {
        let mut users = ctx.shared.acl.write();
        users.sync_requirepass(&requirepass);
        users.get(&name).cloned()
    };
    if user.is_none() && found.as_ref().is_some_and(|u| u.nopass) {
        return Err(OpError::AuthNotConfigured);
    }
    match found {
        Some(u) if u.enabled && u.password_ok(pass) => {
            ctx.conn.set_user(u);
            ctx.conn.set_authenticated(true);
            Ok(())
        }
        _ => {
            let addr = ctx.conn.handle.addr.to_string();
            let now = ctx.shared.clock.now().mono_ms;
            ctx.shared.counters.auth_failed(&addr, now);
            let context = "toplevel";
            log_denial(
                ctx.shared,
                ctx.conn,
                "auth",
                context,
                Bytes::from_static(b"AUTH"),
                &name,
            );
            Err(OpError::WrongPass)
        }
    }
}

/// Makes the connection the default user's again (RESET).
pub fn reset_user(ctx: &mut ConnCtx<'_>) {
    if let Some(d) = ctx.shared.acl.read().get("default").cloned() {
        ctx.conn.set_user(d);
    }
}

/// Bumps the configuration generation after a change of users, so every
/// connection looks its user up again before its next command.
fn users_changed(shared: &Shared) {
    shared.config_gen.fetch_add(1, Ordering::Release);
}

/// Closes every connection authenticated as one of `names`.
fn kill_users(shared: &Shared, names: &[String]) {
    for c in shared.clients.lock().values() {
        if names.contains(&*c.user.lock()) {
            c.kill();
        }
    }
}

fn arity(sub: &str) -> OpError {
    OpError::SubcommandArity(format!("acl|{}", sub.to_ascii_lowercase()))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn acl(ctx: &mut ConnCtx<'_>, a: &mut Args) -> Result<Reply, OpError> {
    let sent = text(&a.all()[1]);
    let sub = a.word()?;
    let rest: Vec<Bytes> = (0..a.remaining())
        .map(|_| a.next())
        .collect::<Result<_, _>>()?;
    let cat = catalog();
    match (sub.as_str(), rest.len()) {
        ("SETUSER", 1..) => {
            let name = text(&rest[0]);
            if !crate::acl::valid_name(&rest[0]) {
                return Err(OpError::Acl(
                    "Usernames can't contain spaces or null characters".into(),
                ));
            }
            let rules: Vec<&[u8]> = rest[1..].iter().map(|r| &r[..]).collect();
            ctx.shared
                .acl
                .write()
                .set_user(&name, &rules, cat)
                .map_err(|(rule, e)| {
                    OpError::Acl(format!(
                        "Error in ACL SETUSER modifier '{rule}': {}",
                        e.text()
                    ))
                })?;
            users_changed(ctx.shared);
            Ok(Reply::ok())
        }
        ("GETUSER", 1) => {
            let users = ctx.shared.acl.read();
            let Some(u) = users.get(&text(&rest[0])) else {
                return Ok(Reply::Nil);
            };
            let bulks = |v: Vec<String>| Reply::Array(v.into_iter().map(Reply::bulk).collect());
            Ok(Reply::Map(vec![
                (
                    Reply::bulk("flags"),
                    Reply::Set(u.flags().iter().map(Reply::bulk).collect()),
                ),
                (Reply::bulk("passwords"), bulks(u.passwords.clone())),
                (Reply::bulk("commands"), Reply::bulk(u.describe_commands())),
                (Reply::bulk("keys"), Reply::bulk(u.describe_keys())),
                (Reply::bulk("channels"), Reply::bulk(u.describe_channels())),
                (Reply::bulk("selectors"), Reply::Array(Vec::new())),
            ]))
        }
        ("DELUSER", 1..) => {
            let names: Vec<String> = rest.iter().map(|n| text(n)).collect();
            if names.iter().any(|n| n == "default") {
                return Err(OpError::Acl("The 'default' user cannot be removed".into()));
            }
            let mut users = ctx.shared.acl.write();
            let gone: Vec<String> = names
                .into_iter()
                .filter(|n| users.map.remove(n).is_some())
                .collect();
            drop(users);
            kill_users(ctx.shared, &gone);
            if gone.contains(&ctx.conn.user.name) {
                ctx.conn.close = true;
            }
            users_changed(ctx.shared);
            Ok(Reply::Int(gone.len() as i64))
        }
        ("LIST", 0) => Ok(Reply::Array(
            ctx.shared
                .acl
                .read()
                .describe()
                .into_iter()
                .map(Reply::bulk)
                .collect(),
        )),
        ("USERS", 0) => Ok(Reply::Array(
            ctx.shared.acl.read().map.keys().map(Reply::bulk).collect(),
        )),
        ("WHOAMI", 0) => Ok(Reply::bulk(ctx.conn.user.name.clone())),
        ("CAT", 0) => Ok(Reply::Array(CATEGORIES.iter().map(Reply::bulk).collect())),
        ("CAT", 1) => {
            let name = text(&rest[0]).to_ascii_lowercase();
            let bit = category_bit(&name)
                .ok_or_else(|| OpError::Acl(format!("Unknown category '{name}'")))?;
            Ok(Reply::Array(
                (0..cat.ids())
                    .filter(|&id| cat.categories(id) & bit != 0)
                    .map(|id| Reply::bulk(cat.name(id)))
                    .collect(),
            ))
        }
        ("LOAD", 0) => acl_load(ctx),
        ("SAVE", 0) => acl_save(ctx),
        ("LOG", 0..=1) => acl_log_cmd(ctx, rest.first()),
        ("DRYRUN", 2..) => {
            let users = ctx.shared.acl.read();
            let Some(u) = users.get(&text(&rest[0])).cloned() else {
                return Err(OpError::Acl(format!("User '{}' not found", text(&rest[0]))));
            };
            drop(users);
            let Some((idx, spec)) = table().lookup(&rest[1]) else {
                return Err(OpError::Acl(format!(
                    "Command '{}' not found",
                    text(&rest[1])
                )));
            };
            if !spec.arity_ok(rest.len() - 1) {
                return Err(crate::error::OpError::Arity(spec.name));
            }
            match denial(&u, idx, spec, &rest[1..]) {
                None => Ok(Reply::ok()),
                Some(d) => Ok(Reply::bulk(d.dryrun_text())),
            }
        }
        ("GENPASS", 0..=1) => {
            let bits = match rest.first() {
                None => 256,
                Some(b) => match leasehold_protocol::int::parse_u64(b) {
                    Some(n @ 1..=4096) => n as usize,
                    _ => {
                        return Err(OpError::Acl(
                            "ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096"
                                .into(),
                        ))
                    }
                },
            };
            Ok(Reply::bulk(random_hex(bits.div_ceil(4))))
        }
        ("HELP", 0) => Ok(Reply::Array(
            HELP.iter().map(|l| Reply::simple(l)).collect(),
        )),
        (
            "SETUSER" | "GETUSER" | "DELUSER" | "LIST" | "USERS" | "WHOAMI" | "CAT" | "LOAD"
            | "SAVE" | "LOG" | "DRYRUN" | "GENPASS" | "HELP",
            _,
        ) => Err(arity(&sub)),
        _ => Err(OpError::UnknownSubcommand {
            command: "ACL",
            sub: sent,
        }),
    }
}

const HELP: &[&str] = &[
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Prints this help.",
];

const NO_ACL_FILE: &str = "This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.";

fn acl_load(ctx: &mut ConnCtx<'_>) -> Result<Reply, OpError> {
    let config = ctx.shared.config.read().clone();
    if config.security.aclfile.is_empty() {
        return Err(OpError::Acl(NO_ACL_FILE.into()));
    }
    let users = read_file(&config).map_err(OpError::Acl)?;
    let mut live = ctx.shared.acl.write();
    let gone: Vec<String> = live
        .map
        .keys()
        .filter(|n| !users.map.contains_key(*n))
        .cloned()
        .collect();
    live.map = users.map;
    live.requirepass = users.requirepass;
    drop(live);
    kill_users(ctx.shared, &gone);
    users_changed(ctx.shared);
    Ok(Reply::ok())
}

fn acl_save(ctx: &mut ConnCtx<'_>) -> Result<Reply, OpError> {
    let path = ctx.shared.config.read().security.aclfile.clone();
    if path.is_empty() {
        return Err(OpError::Acl(NO_ACL_FILE.into()));
    }
    let mut body = ctx.shared.acl.read().describe().join("\n");
    body.push('\n');
    let tmp = format!("{path}.tmp-{}", std::process::id());
    std::fs::write(&tmp, body)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            OpError::Acl(format!("There was an error trying to save the ACLs. Please check the server logs for more information ({e})"))
        })?;
    Ok(Reply::ok())
}

fn acl_log_cmd(ctx: &mut ConnCtx<'_>, arg: Option<&Bytes>) -> Result<Reply, OpError> {
    let mut count = usize::MAX;
    if let Some(a) = arg {
        if a.eq_ignore_ascii_case(b"RESET") {
            with_log(ctx.shared, |l| l.clear());
            return Ok(Reply::ok());
        }
        // A negative count shows every entry, as Redis 7.0 does.
        let n = leasehold_protocol::int::parse_i64(a).ok_or(OpError::NotInteger)?;
        count = usize::try_from(n).unwrap_or(usize::MAX);
    }
    let entries = with_log(ctx.shared, |l| {
        l.iter().take(count).cloned().collect::<Vec<_>>()
    });
    Ok(Reply::Array(
        entries
            .into_iter()
            .map(|e| {
                Reply::Map(vec![
                    (Reply::bulk("count"), Reply::Int(e.count as i64)),
                    (Reply::bulk("reason"), Reply::bulk(e.reason)),
                    (Reply::bulk("context"), Reply::bulk(e.context)),
                    (Reply::bulk("object"), Reply::Bulk(e.object)),
                    (Reply::bulk("username"), Reply::bulk(e.username)),
                    (
                        Reply::bulk("age-seconds"),
                        Reply::Double(e.created.elapsed().as_secs_f64()),
                    ),
                    (Reply::bulk("client-info"), Reply::bulk(e.client_info)),
                ])
            })
            .collect(),
    ))
}

/// `n` random hex characters (from the operating system's generator).
fn random_hex(n: usize) -> String {
    use std::io::Read;
    let mut bytes = vec![0u8; n.div_ceil(2)];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_err()
    {
        let seed = crate::acl::sha256(format!("{:?}", Instant::now()).as_bytes());
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = seed[i % 32] ^ (i as u8);
        }
    }
    let mut s: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    s.truncate(n);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_has_every_row_and_redis_categories() {
        let c = catalog();
        let id = |n: &str| c.id(n).unwrap_or_else(|| panic!("no {n}"));
        let has = |n: &str, k: &str| c.categories(id(n)) & cat(k) != 0;
        assert!(has("get", "read") && has("get", "string") && has("get", "fast"));
        assert!(has("set", "write") && !has("set", "read"));
        assert!(has("tokenlease", "ratelimit") && has("tokenreturn", "ratelimit"));
        assert!(!has("lh.restore", "ratelimit"));
        assert!(has("config", "admin") && has("config|get", "admin"));
        assert!(has("flushall", "dangerous") && has("keys", "dangerous"));
        assert!(has("acl|setuser", "admin") && !has("acl|whoami", "admin"));
        assert!(has("lh.pin", "admin") && !has("lh.pin", "ratelimit"));
        for spec in &table().commands {
            let cats = c.categories(id(spec.name));
            assert!(cats & (cat("fast") | cat("slow")) != 0, "{}", spec.name);
        }
        assert_eq!(
            c.request_id(id("config"), &[Bytes::from("CONFIG"), Bytes::from("GET")]),
            id("config|get")
        );
    }
}
