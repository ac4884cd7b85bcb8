//! Access control lists as Redis 7 has them, without the command table:
//! users, their passwords (SHA-256, as Redis stores them), the commands,
//! keys and channels they may use, the rules that change them
//! (`ACL SETUSER`'s words), and how a user is written back
//! (`ACL LIST`'s and the ACL file's line, `ACL GETUSER`'s fields).
//!
//! Which commands a rule names comes from the command table, a layer above:
//! the rules are applied through a [`Catalog`] it provides (ids for every
//! command and container subcommand, the categories of each). A user's
//! command permissions are one bit per id; [`User::can_run`] tests one bit.
//!
//! The command rules are kept as Redis 7.0 keeps them, so `ACL LIST` shows
//! what Redis shows: a base (`+@all` or `-@all`), then the rules applied
//! since, where a new rule first drops an earlier rule of the same name
//! (and `+cmd` its `cmd|sub` rules), and is itself kept only when the
//! rules without it would not already give the same permissions
//! (`+get -get` shows as `-@all`; `+@read -get` keeps `-get`). Redis 7.0
//! rebuilds the single commands of that list from its bits, in its hash
//! table's order: the same words, in another order.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::glob::glob_match;

/// The categories, in `ACL CAT`'s order: Redis 7's, then Leasehold's
/// `ratelimit` (TOKENLEASE, TOKENRETURN, SLIDINGWINDOW, CL.THROTTLE, GCRA,
/// RLSTATE and the pinned-limit commands). A category's bit is `1 << i`.
pub const CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
    "ratelimit",
];

/// The bit of category `name` (lower case, without `@`).
pub fn category_bit(name: &str) -> Option<u64> {
    CATEGORIES.iter().position(|c| *c == name).map(|i| 1 << i)
}

/// The bit of a category known to exist (for the table's own mapping).
///
/// # Panics
/// On a name not in [`CATEGORIES`].
pub fn cat(name: &str) -> u64 {
    category_bit(name).unwrap_or_else(|| panic!("no ACL category {name}"))
}

/// What the rules need to know of the command table.
pub trait Catalog {
    /// How many ids there are (commands, then container subcommands).
    fn ids(&self) -> usize;
    /// The id of a lower-case `name` (`get`, `config|get`).
    fn id(&self, name: &str) -> Option<usize>;
    /// The subcommand ids of a container command's id (empty for others).
    fn subs(&self, id: usize) -> std::ops::Range<usize>;
    /// The category bits of an id.
    fn categories(&self, id: usize) -> u64;
    /// The name of an id.
    fn name(&self, id: usize) -> &str;
    /// The container of a subcommand's id (`None` for a command).
    fn parent(&self, id: usize) -> Option<usize>;
}

/// Why a rule was refused; [`RuleError::text`] is Redis's wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleError {
    /// Not a rule.
    Syntax,
    /// `+name` or `+@name` naming nothing known.
    Unknown,
    /// `<pass` or `!hash` naming a password the user does not have.
    NoSuchPassword,
    /// `#hash` or `!hash` that is not 64 lower-case hex characters.
    BadHash,
    /// A key pattern after `allkeys`.
    KeyAfterAll,
    /// A channel pattern after `allchannels`.
    ChannelAfterAll,
}

impl RuleError {
    /// The reason, as Redis 7 words it after `modifier '<rule>': `.
    pub fn text(self) -> &'static str {
        match self {
            RuleError::Syntax => "Syntax error",
            RuleError::Unknown => "Unknown command or category name in ACL",
            RuleError::NoSuchPassword => {
                "The password you are trying to remove from the user does not exist"
            }
            RuleError::BadHash => {
                "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters"
            }
            RuleError::KeyAfterAll => {
                "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns"
            }
            RuleError::ChannelAfterAll => {
                "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels"
            }
        }
    }
}

/// A key pattern and the accesses it grants (`~p` both, `%R~p` reads,
/// `%W~p` writes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPattern {
    /// Redis's glob.
    pub pattern: Vec<u8>,
    /// Reads allowed.
    pub read: bool,
    /// Writes allowed.
    pub write: bool,
}

impl KeyPattern {
    fn describe(&self) -> String {
        let p = String::from_utf8_lossy(&self.pattern);
        match (self.read, self.write) {
            (true, false) => format!("%R~{p}"),
            (false, true) => format!("%W~{p}"),
            _ => format!("~{p}"),
        }
    }
}

/// One user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The name.
    pub name: String,
    /// `on`: may authenticate.
    pub enabled: bool,
    /// `nopass`: any password authenticates.
    pub nopass: bool,
    /// `sanitize-payload` (`Some(true)`) or `skip-sanitize-payload`
    /// (`Some(false)`): accepted and shown, no effect here (no RESTORE
    /// payloads from clients).
    pub sanitize: Option<bool>,
    /// SHA-256 of each password, 64 lower-case hex characters.
    pub passwords: Vec<String>,
    /// One bit per [`Catalog`] id.
    allowed: Vec<u64>,
    /// The base was `+@all` (commands added later are allowed too).
    all_commands: bool,
    /// The command rules applied since the base, as Redis keeps them.
    rules: Vec<String>,
    /// `allkeys` (or `~*`).
    pub all_keys: bool,
    /// Key patterns (none when `all_keys`).
    pub keys: Vec<KeyPattern>,
    /// `allchannels` (or `&*`).
    pub all_channels: bool,
    /// Channel patterns (none when `all_channels`).
    pub channels: Vec<Vec<u8>>,
}

impl User {
    /// A new user as `ACL SETUSER name` makes it: off, no password, no
    /// commands, keys or channels.
    pub fn new(name: &str, cat: &dyn Catalog) -> User {
        User::blank(name, vec![0; cat.ids().div_ceil(64)])
    }

    /// A user named `default` that may do nothing, for a connection made
    /// before any user exists (never seen once the server runs).
    pub fn placeholder() -> User {
        User::blank("default", Vec::new())
    }

    /// Off, no password, nothing allowed, `allowed` as the command bits.
    fn blank(name: &str, allowed: Vec<u64>) -> User {
        User {
            name: name.to_string(),
            enabled: false,
            nopass: false,
            sanitize: None,
            passwords: Vec::new(),
            allowed,
            all_commands: false,
            rules: Vec::new(),
            all_keys: false,
            keys: Vec::new(),
            all_channels: false,
            channels: Vec::new(),
        }
    }

    /// The `default` user: on, every command, key and channel; `nopass`
    /// without a password, else that password alone (how `requirepass`
    /// maps onto it).
    pub fn default_user(requirepass: &str, cat: &dyn Catalog) -> User {
        let mut u = User::new("default", cat);
        for r in ["on", "~*", "&*", "+@all"] {
            u.apply(r.as_bytes(), cat)
                .expect("the default user's rules");
        }
        u.set_requirepass(requirepass);
        u
    }

    /// Gives the user `requirepass`'s password alone (`nopass` when empty).
    pub fn set_requirepass(&mut self, requirepass: &str) {
        self.passwords.clear();
        self.nopass = requirepass.is_empty();
        if !requirepass.is_empty() {
            self.passwords.push(sha256_hex(requirepass.as_bytes()));
        }
    }

    /// Whether nothing is refused to this user: every command (now and
    /// later), every key, every channel. The dispatcher checks nothing
    /// more for such a user.
    pub fn unrestricted(&self) -> bool {
        self.all_commands && self.rules.is_empty() && self.all_keys && self.all_channels
    }

    /// Whether the user may run the command (or subcommand) of this id.
    #[inline]
    pub fn can_run(&self, id: usize) -> bool {
        self.allowed
            .get(id / 64)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    /// Whether the user may access `key` for reading (`read`) and/or
    /// writing (`write`).
    pub fn key_ok(&self, key: &[u8], read: bool, write: bool) -> bool {
        if self.all_keys {
            return true;
        }
        // Redis: each access needed must be granted by some pattern.
        let mut need_r = read;
        let mut need_w = write;
        for p in &self.keys {
            if (need_r && p.read || need_w && p.write) && glob_match(&p.pattern, key) {
                need_r &= !p.read;
                need_w &= !p.write;
                if !need_r && !need_w {
                    return true;
                }
            }
        }
        !need_r && !need_w
    }

    /// Whether the user may use `channel`: a channel name matches a
    /// pattern; a pattern (PSUBSCRIBE) must equal one of the user's.
    pub fn channel_ok(&self, channel: &[u8], is_pattern: bool) -> bool {
        if self.all_channels {
            return true;
        }
        self.channels.iter().any(|p| match is_pattern {
            true => p.as_slice() == channel,
            false => glob_match(p, channel),
        })
    }

    /// Whether `pass` is one of the user's passwords (any with `nopass`),
    /// compared as SHA-256 digests in time independent of where they differ.
    pub fn password_ok(&self, pass: &[u8]) -> bool {
        if self.nopass {
            return true;
        }
        let hash = sha256_hex(pass);
        self.passwords.iter().fold(false, |found, h| {
            found | same_bytes(h.as_bytes(), hash.as_bytes())
        })
    }

    fn set_bit(&mut self, id: usize, on: bool) {
        let w = &mut self.allowed[id / 64];
        if on {
            *w |= 1 << (id % 64);
        } else {
            *w &= !(1 << (id % 64));
        }
    }

    /// Sets or clears every bit a command rule (without its sign) names:
    /// `cmd` (with its subcommands), `cmd|sub`, `@category`, `@all`.
    fn set_rule_bits(&mut self, rule: &str, on: bool, cat: &dyn Catalog) -> Result<(), RuleError> {
        if let Some(c) = rule.strip_prefix('@') {
            if c == "all" {
                for id in 0..cat.ids() {
                    self.set_bit(id, on);
                }
                return Ok(());
            }
            let bit = category_bit(c).ok_or(RuleError::Unknown)?;
            for id in 0..cat.ids() {
                if cat.categories(id) & bit != 0 {
                    self.set_bit(id, on);
                }
            }
            return Ok(());
        }
        if let Some((parent, _)) = rule.split_once('|') {
            // Only a container's subcommands have ids of their own.
            let p = cat.id(parent).ok_or(RuleError::Syntax)?;
            let id = cat.id(rule).ok_or(RuleError::Syntax)?;
            if cat.subs(p).is_empty() {
                return Err(RuleError::Syntax);
            }
            self.set_bit(id, on);
            return Ok(());
        }
        let id = cat.id(rule).ok_or(RuleError::Unknown)?;
        self.set_bit(id, on);
        for s in cat.subs(id) {
            self.set_bit(s, on);
        }
        Ok(())
    }

    /// The permissions the base and `rules` give.
    fn rebuild(&self, rules: &[String], cat: &dyn Catalog) -> Vec<u64> {
        let mut u = User::new(&self.name, cat);
        let _ = u.set_rule_bits("@all", self.all_commands, cat);
        for r in rules {
            let (on, name) = (r.starts_with('+'), &r[1..]);
            let _ = u.set_rule_bits(name, on, cat);
        }
        u.allowed
    }

    fn command_rule(&mut self, rule: &str, cat: &dyn Catalog) -> Result<(), RuleError> {
        let on = rule.starts_with('+');
        let name = rule[1..].to_ascii_lowercase();
        if name == "@all" {
            self.all_commands = on;
            self.rules.clear();
            return self.set_rule_bits("@all", on, cat);
        }
        self.set_rule_bits(&name, on, cat)?;
        let sub_prefix = format!("{name}|");
        self.rules.retain(|r| {
            let n = &r[1..];
            // `+cmd` also drops the `cmd|sub` rules before it.
            n != name && (name.starts_with('@') || !n.starts_with(&sub_prefix))
        });
        if self.rebuild(&self.rules, cat) != self.allowed {
            self.rules
                .push(format!("{}{name}", if on { '+' } else { '-' }));
        }
        Ok(())
    }

    /// Applies one `ACL SETUSER` rule.
    ///
    /// # Errors
    /// A [`RuleError`]; the user may then be half changed, so callers
    /// apply rules to a copy.
    pub fn apply(&mut self, rule: &[u8], cat: &dyn Catalog) -> Result<(), RuleError> {
        let text = String::from_utf8_lossy(rule);
        let lower = text.to_ascii_lowercase();
        match lower.as_str() {
            "on" => self.enabled = true,
            "off" => self.enabled = false,
            "nopass" => {
                self.nopass = true;
                self.passwords.clear();
            }
            "resetpass" => {
                self.nopass = false;
                self.passwords.clear();
            }
            "sanitize-payload" => self.sanitize = Some(true),
            "skip-sanitize-payload" => self.sanitize = Some(false),
            "allkeys" => return self.apply(b"~*", cat),
            "resetkeys" => {
                self.all_keys = false;
                self.keys.clear();
            }
            "allchannels" => return self.apply(b"&*", cat),
            "resetchannels" => {
                self.all_channels = false;
                self.channels.clear();
            }
            "allcommands" => return self.command_rule("+@all", cat),
            "nocommands" => return self.command_rule("-@all", cat),
            "reset" => {
                for r in ["resetpass", "resetkeys", "resetchannels", "off", "-@all"] {
                    self.apply(r.as_bytes(), cat)?;
                }
                // Redis's reset also sets the default payload flag.
                self.sanitize = Some(true);
            }
            _ => return self.apply_valued(rule, &text, cat),
        }
        Ok(())
    }

    fn apply_valued(
        &mut self,
        rule: &[u8],
        text: &str,
        cat: &dyn Catalog,
    ) -> Result<(), RuleError> {
        match rule.first() {
            Some(b'>') => {
                let h = sha256_hex(&rule[1..]);
                if !self.passwords.contains(&h) {
                    self.passwords.push(h);
                }
                self.nopass = false;
            }
            Some(b'<') => {
                let h = sha256_hex(&rule[1..]);
                let before = self.passwords.len();
                self.passwords.retain(|p| *p != h);
                if self.passwords.len() == before {
                    return Err(RuleError::NoSuchPassword);
                }
            }
            Some(b'#') => {
                let h = valid_hash(&rule[1..])?;
                if !self.passwords.contains(&h) {
                    self.passwords.push(h);
                }
                self.nopass = false;
            }
            Some(b'!') => {
                let h = valid_hash(&rule[1..])?;
                let before = self.passwords.len();
                self.passwords.retain(|p| *p != h);
                if self.passwords.len() == before {
                    return Err(RuleError::NoSuchPassword);
                }
            }
            Some(b'~') => self.key_pattern(&rule[1..], true, true)?,
            Some(b'%') => {
                let tilde = rule
                    .iter()
                    .position(|&b| b == b'~')
                    .ok_or(RuleError::Syntax)?;
                let (mut read, mut write) = (false, false);
                for &b in &rule[1..tilde] {
                    match b.to_ascii_uppercase() {
                        b'R' => read = true,
                        b'W' => write = true,
                        _ => return Err(RuleError::Syntax),
                    }
                }
                if !read && !write {
                    return Err(RuleError::Syntax);
                }
                self.key_pattern(&rule[tilde + 1..], read, write)?;
            }
            Some(b'&') => {
                let p = &rule[1..];
                if self.all_channels {
                    return Err(RuleError::ChannelAfterAll);
                }
                if p == b"*" {
                    self.all_channels = true;
                    self.channels.clear();
                } else if !self.channels.iter().any(|c| c == p) {
                    self.channels.push(p.to_vec());
                }
            }
            Some(b'+') | Some(b'-') if text.len() > 1 => self.command_rule(text, cat)?,
            _ => return Err(RuleError::Syntax),
        }
        Ok(())
    }

    fn key_pattern(&mut self, p: &[u8], read: bool, write: bool) -> Result<(), RuleError> {
        if self.all_keys {
            return Err(RuleError::KeyAfterAll);
        }
        if p == b"*" && read && write {
            self.all_keys = true;
            self.keys.clear();
            return Ok(());
        }
        if let Some(k) = self.keys.iter_mut().find(|k| k.pattern == p) {
            k.read |= read;
            k.write |= write;
        } else {
            self.keys.push(KeyPattern {
                pattern: p.to_vec(),
                read,
                write,
            });
        }
        Ok(())
    }

    /// The flags, as `ACL GETUSER` lists them.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut f = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            f.push("nopass");
        }
        match self.sanitize {
            Some(false) => f.push("skip-sanitize-payload"),
            Some(true) => f.push("sanitize-payload"),
            None => {}
        }
        f
    }

    /// The command permissions, as `ACL GETUSER`'s `commands` shows them.
    pub fn describe_commands(&self) -> String {
        let mut s = String::from(if self.all_commands { "+@all" } else { "-@all" });
        for r in &self.rules {
            s.push(' ');
            s.push_str(r);
        }
        s
    }

    /// The key patterns, as `ACL GETUSER`'s `keys` shows them.
    pub fn describe_keys(&self) -> String {
        if self.all_keys {
            return "~*".into();
        }
        let v: Vec<String> = self.keys.iter().map(KeyPattern::describe).collect();
        v.join(" ")
    }

    /// The channel patterns, as `ACL GETUSER`'s `channels` shows them.
    pub fn describe_channels(&self) -> String {
        if self.all_channels {
            return "&*".into();
        }
        let v: Vec<String> = self
            .channels
            .iter()
            .map(|c| format!("&{}", String::from_utf8_lossy(c)))
            .collect();
        v.join(" ")
    }

    /// The user as one `ACL LIST` line and ACL file line:
    /// `user <name> <flags> <#hashes> <keys> <channels> <commands>`.
    pub fn describe(&self) -> String {
        let mut parts = vec!["user".to_string(), self.name.clone()];
        parts.extend(self.flags().iter().map(|f| f.to_string()));
        parts.extend(self.passwords.iter().map(|h| format!("#{h}")));
        let keys = self.describe_keys();
        if !keys.is_empty() {
            parts.push(keys);
        }
        if self.all_channels {
            parts.push("&*".into());
        } else {
            parts.push("resetchannels".into());
            let ch = self.describe_channels();
            if !ch.is_empty() {
                parts.push(ch);
            }
        }
        parts.push(self.describe_commands());
        parts.join(" ")
    }
}

/// A user name: anything without spaces or control characters (Redis
/// refuses those in `ACL SETUSER`'s names only in ACL files; its names are
/// written unquoted there).
pub fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|&b| b > b' ' && b != 0x7f)
}

fn valid_hash(h: &[u8]) -> Result<String, RuleError> {
    if h.len() != 64
        || !h
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return Err(RuleError::BadHash);
    }
    Ok(String::from_utf8_lossy(h).into_owned())
}

/// Compares two byte strings in time that depends only on their lengths.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// One ACL LOG entry: a refusal (`reason` `command`, `key`, `channel`)
/// or a failed login (`auth`), counted again while it repeats.
#[derive(Debug, Clone)]
pub struct LogEntry {
    /// How many times it happened.
    pub count: u64,
    /// `command`, `key`, `channel` or `auth`.
    pub reason: &'static str,
    /// `toplevel`, `multi` or `lua`.
    pub context: &'static str,
    /// The command, key or channel refused (`AUTH` for a login).
    pub object: bytes::Bytes,
    /// The user.
    pub username: String,
    /// When it first happened.
    pub created: std::time::Instant,
    /// The client's CLIENT INFO line when it last happened.
    pub client_info: String,
}

/// The most entries ACL LOG keeps (Redis's `acllog-max-len` default).
pub const LOG_MAX: usize = 128;

/// Every user, by name (sorted, as `ACL USERS` and `ACL LIST` list them).
#[derive(Debug, Clone, Default)]
pub struct Users {
    /// The users.
    pub map: BTreeMap<String, Arc<User>>,
    /// ACL LOG, newest first, at most [`LOG_MAX`] entries.
    pub log: std::collections::VecDeque<LogEntry>,
    /// The `requirepass` last applied to the default user: a change of
    /// the setting replaces its passwords, as in Redis.
    pub requirepass: Option<String>,
}

impl Users {
    /// Only the default user, from `requirepass`.
    pub fn with_default(requirepass: &str, cat: &dyn Catalog) -> Users {
        let mut u = Users::default();
        u.map.insert(
            "default".into(),
            Arc::new(User::default_user(requirepass, cat)),
        );
        u.requirepass = Some(requirepass.to_string());
        u
    }

    /// Applies `requirepass` to the default user if the setting changed
    /// since it was last applied.
    pub fn sync_requirepass(&mut self, requirepass: &str) {
        if self.requirepass.as_deref() == Some(requirepass) {
            return;
        }
        self.requirepass = Some(requirepass.to_string());
        if let Some(d) = self.map.get_mut("default") {
            Arc::make_mut(d).set_requirepass(requirepass);
        }
    }

    /// A user by name.
    pub fn get(&self, name: &str) -> Option<&Arc<User>> {
        self.map.get(name)
    }

    /// `ACL SETUSER name rules...`: applied to a copy (or a new user),
    /// stored only if every rule is valid.
    ///
    /// # Errors
    /// The first bad rule and why.
    pub fn set_user(
        &mut self,
        name: &str,
        rules: &[&[u8]],
        cat: &dyn Catalog,
    ) -> Result<(), (String, RuleError)> {
        let mut u = match self.map.get(name) {
            Some(u) => (**u).clone(),
            None => User::new(name, cat),
        };
        for r in rules {
            u.apply(r, cat)
                .map_err(|e| (String::from_utf8_lossy(r).into_owned(), e))?;
        }
        self.map.insert(name.to_string(), Arc::new(u));
        Ok(())
    }

    /// Every user as ACL file lines.
    pub fn describe(&self) -> Vec<String> {
        self.map.values().map(|u| u.describe()).collect()
    }

    /// Parses an ACL file: one `user <name> <rules...>` a line, blank
    /// lines and `#` comments skipped; the default user is added, with
    /// `requirepass`'s password, when the file does not define it.
    ///
    /// # Errors
    /// `(line number, message)` for the first bad line, worded as Redis's
    /// (`Error in user declaration '<name>': <reason>`).
    pub fn parse_file(
        text: &str,
        requirepass: &str,
        cat: &dyn Catalog,
    ) -> Result<Users, (usize, String)> {
        let mut users = Users::default();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            if words[0] != "user" || words.len() < 2 {
                return Err((n, "should start with user keyword".into()));
            }
            let name = words[1];
            if !valid_name(name.as_bytes()) {
                return Err((n, format!("invalid user name '{name}'")));
            }
            if users.map.contains_key(name) {
                return Err((
                    n,
                    "Duplicate user found. A user can only be defined once in config files".into(),
                ));
            }
            let rules: Vec<&[u8]> = words[2..].iter().map(|w| w.as_bytes()).collect();
            users.set_user(name, &rules, cat).map_err(|(r, e)| {
                (
                    n,
                    format!("Error in applying operation '{r}': {}", e.text()),
                )
            })?;
        }
        if !users.map.contains_key("default") {
            users.map.insert(
                "default".into(),
                Arc::new(User::default_user(requirepass, cat)),
            );
        }
        users.requirepass = Some(requirepass.to_string());
        Ok(users)
    }
}

/// SHA-256 of `data` (FIPS 180-4), as 64 lower-case hex characters: how
/// Redis stores and shows a password.
pub fn sha256_hex(data: &[u8]) -> String {
    sha256(data).iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of `data` (FIPS 180-4).
pub fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 64];
        for (i, c) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (i, v) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&v.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A catalog of five commands: get (read string fast), set (write
    /// string), config (admin, subcommands get and set), tokenlease.
    struct Cat;
    const NAMES: [&str; 6] = [
        "get",
        "set",
        "config",
        "tokenlease",
        "config|get",
        "config|set",
    ];
    impl Catalog for Cat {
        fn ids(&self) -> usize {
            NAMES.len()
        }
        fn id(&self, name: &str) -> Option<usize> {
            NAMES.iter().position(|n| *n == name)
        }
        fn subs(&self, id: usize) -> std::ops::Range<usize> {
            if id == 2 {
                4..6
            } else {
                0..0
            }
        }
        fn name(&self, id: usize) -> &str {
            NAMES[id]
        }
        fn parent(&self, id: usize) -> Option<usize> {
            (id >= 4).then_some(2)
        }
        fn categories(&self, id: usize) -> u64 {
            match id {
                0 => cat("read") | cat("string") | cat("fast"),
                1 => cat("write") | cat("string"),
                2 | 4 | 5 => cat("admin") | cat("dangerous"),
                _ => cat("ratelimit") | cat("write"),
            }
        }
    }

    fn user(rules: &str) -> Result<User, RuleError> {
        let mut u = User::new("u", &Cat);
        for r in rules.split_whitespace() {
            u.apply(r.as_bytes(), &Cat)?;
        }
        Ok(u)
    }

    #[test]
    fn sha256_matches_the_standard_vectors() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let long = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        assert_eq!(
            sha256_hex(long),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        // Redis showed this hash for `>secret`.
        assert_eq!(
            sha256_hex(b"secret"),
            "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
        );
    }

    #[test]
    fn command_rules_compact_as_redis_7_0_does() {
        let line = |r: &str| user(r).unwrap().describe_commands();
        assert_eq!(line("+@string -@string"), "-@all");
        assert_eq!(line("+get -get"), "-@all");
        assert_eq!(line("+@read -get"), "-@all +@read -get");
        assert_eq!(line("+@all -@string +get"), "+@all -@string +get");
        assert_eq!(line("+@read +@write -@read"), "-@all +@write");
        assert_eq!(line("+@string -get +get"), "-@all +@string");
        assert_eq!(line("-get"), "-@all");
        assert_eq!(line("+@all -get +@all"), "+@all");
        assert_eq!(line("+config|get +config"), "-@all +config");
        assert_eq!(line("+config +config|get"), "-@all +config");
        assert_eq!(line("allcommands -config|get"), "+@all -config|get");
    }

    #[test]
    fn permissions_follow_the_rules() {
        let u = user("on >pw ~rl:* +@ratelimit").unwrap();
        assert!(u.can_run(3) && !u.can_run(0) && !u.can_run(1));
        assert!(u.key_ok(b"rl:x", true, true) && !u.key_ok(b"other:x", true, false));
        assert!(u.password_ok(b"pw") && !u.password_ok(b"nope"));
        assert!(!u.unrestricted());
        let u = user("+config -config|get").unwrap();
        assert!(u.can_run(2) && !u.can_run(4) && u.can_run(5));
        let u = user("%R~r:* %W~w:*").unwrap();
        assert!(u.key_ok(b"r:1", true, false) && !u.key_ok(b"r:1", false, true));
        assert!(u.key_ok(b"w:1", false, true) && !u.key_ok(b"w:1", true, true));
        let u = user("&news.*").unwrap();
        assert!(u.channel_ok(b"news.a", false) && !u.channel_ok(b"sport", false));
        assert!(u.channel_ok(b"news.*", true) && !u.channel_ok(b"news.a*", true));
        let d = User::default_user("", &Cat);
        assert!(d.unrestricted() && d.password_ok(b"anything"));
        assert_eq!(d.describe(), "user default on nopass ~* &* +@all");
    }

    #[test]
    fn lines_and_errors_read_as_redis_writes_them() {
        let u = user("on >secret ~rl:* %R~ro:* &chan* +config|get").unwrap();
        assert_eq!(
            u.describe(),
            "user u on #2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b ~rl:* %R~ro:* resetchannels &chan* -@all +config|get"
        );
        assert_eq!(
            user("").unwrap().describe(),
            "user u off resetchannels -@all"
        );
        assert_eq!(
            user("reset").unwrap().describe(),
            "user u off sanitize-payload resetchannels -@all"
        );
        assert_eq!(
            user("%RW~a %W~b %R~c").unwrap().describe_keys(),
            "~a %W~b %R~c"
        );
        assert_eq!(user("bogus"), Err(RuleError::Syntax));
        assert_eq!(user("+nosuch"), Err(RuleError::Unknown));
        assert_eq!(user("+@nosuch"), Err(RuleError::Unknown));
        assert_eq!(user("#abc"), Err(RuleError::BadHash));
        assert_eq!(user("%X~a"), Err(RuleError::Syntax));
        assert_eq!(user("nosuch|x"), Err(RuleError::Syntax));
        assert_eq!(user("allkeys ~a"), Err(RuleError::KeyAfterAll));
        assert_eq!(user("<nope"), Err(RuleError::NoSuchPassword));
    }

    #[test]
    fn a_file_round_trips_and_names_its_bad_line() {
        let text = "# users\nuser gw on #2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b ~rl:* resetchannels -@all +tokenlease\n\nuser default on nopass ~* &* +@all\n";
        let users = Users::parse_file(text, "", &Cat).unwrap();
        let lines = users.describe();
        assert_eq!(lines[0], "user default on nopass ~* &* +@all");
        assert_eq!(lines[1], text.lines().nth(1).unwrap());
        let bad = "user a on\nuser b +nosuch\n";
        let err = Users::parse_file(bad, "", &Cat).unwrap_err();
        assert_eq!(err.0, 2);
        assert!(err.1.contains("+nosuch"), "{}", err.1);
        assert_eq!(
            Users::parse_file("user a\nuser a\n", "", &Cat)
                .unwrap_err()
                .0,
            2
        );
    }
}
