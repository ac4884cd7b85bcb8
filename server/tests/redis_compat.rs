//! Replies that differ from Redis 7.0's for the same request, found by
//! running both side by side. Each test starts a server on a free port.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use leasehold_server::clock::SystemClock;
use leasehold_server::config::Config;

fn server() -> leasehold_server::ServerHandle {
    let mut c = Config::default();
    c.net.port = 0;
    c.shards.threads = 2;
    c.persistence.save = String::new();
    c.persistence.dir = leasehold_testkit::scratch_dir().display().to_string();
    leasehold_server::start(c, Arc::new(SystemClock::new())).expect("start")
}

struct Client {
    r: BufReader<TcpStream>,
}

impl Client {
    fn new(h: &leasehold_server::ServerHandle) -> Client {
        let s = TcpStream::connect(h.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Client {
            r: BufReader::new(s),
        }
    }

    /// Sends one command; returns the reply's first line (the whole reply
    /// for simple strings, errors and integers), or "<closed>".
    fn call(&mut self, args: &[&str]) -> String {
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        if self.r.get_mut().write_all(out.as_bytes()).is_err() {
            return "<closed>".into();
        }
        self.line()
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        match self.r.read_line(&mut l) {
            Ok(0) | Err(_) => "<closed>".into(),
            Ok(_) => l.trim_end().to_string(),
        }
    }

    /// Reads and drops the rest of a bulk reply whose header was `head`.
    fn skip_bulk(&mut self, head: &str) {
        let n: usize = head[1..].parse().unwrap();
        let mut buf = vec![0; n + 2];
        self.r.read_exact(&mut buf).unwrap();
    }
}

/// CLIENT KILL kills only what its filters match, as in Redis 7.0: no
/// filter is an arity error, TYPE pubsub matches no client here (nobody is
/// subscribed), USER names only existing users, and MAXAGE (Redis 7.4) is a
/// syntax error. A bystander survives every one of them.
#[test]
fn client_kill_kills_only_what_its_filters_match() {
    let h = server();
    let mut bystander = Client::new(&h);
    assert_eq!(bystander.call(&["PING"]), "+PONG");
    let mut c = Client::new(&h);
    for (request, reply) in [
        (
            &["CLIENT", "KILL"][..],
            "-ERR wrong number of arguments for 'client|kill' command",
        ),
        (&["CLIENT", "KILL", "TYPE", "pubsub"], ":0"),
        (&["CLIENT", "KILL", "TYPE", "replica"], ":0"),
        (
            &["CLIENT", "KILL", "USER", "nobody"],
            "-ERR No such user 'nobody'",
        ),
        (&["CLIENT", "KILL", "MAXAGE", "999999"], "-ERR syntax error"),
    ] {
        assert_eq!(c.call(request), reply, "{request:?}");
        assert_eq!(
            bystander.call(&["PING"]),
            "+PONG",
            "{request:?} killed the bystander"
        );
    }
    assert_eq!(c.call(&["CLIENT", "KILL", "TYPE", "normal"]), ":1");
    h.shutdown();
}

/// Redis: `ERR syntax error` for ABORT with another flag, and for NOSAVE
/// with SAVE; the server keeps running.
#[test]
fn shutdown_with_contradictory_flags_is_a_syntax_error() {
    let h = server();
    let mut c = Client::new(&h);
    assert_eq!(
        c.call(&["SHUTDOWN", "NOSAVE", "ABORT"]),
        "-ERR syntax error"
    );
    assert_eq!(c.call(&["SHUTDOWN", "NOSAVE", "SAVE"]), "-ERR syntax error");
    assert_eq!(c.call(&["PING"]), "+PONG");
    h.shutdown();
}

/// Redis 7.0: a parameter named twice is refused, changing nothing; an odd
/// number of arguments past the first pair is a syntax error.
#[test]
fn config_set_refuses_duplicates_and_odd_pairs() {
    let h = server();
    let mut c = Client::new(&h);
    assert_eq!(
        c.call(&["CONFIG", "SET", "maxclients", "10", "maxclients", "20"]),
        "-ERR CONFIG SET failed (possibly related to argument 'maxclients') - duplicate parameter"
    );
    assert_eq!(c.call(&["CONFIG", "GET", "maxclients"]), "*2");
    c.line();
    c.line();
    let v = c.line();
    c.skip_bulk(&v);
    assert_eq!(v, "$5", "maxclients unchanged (10000)");
    assert_eq!(
        c.call(&["CONFIG", "SET", "maxclients", "10", "hz"]),
        "-ERR syntax error"
    );
    h.shutdown();
}

/// Redis 7.0's COMMAND GETKEYS has arity -4: with fewer arguments it answers
/// the arity error, not "Invalid command specified" or "Invalid number of
/// arguments specified for command".
#[test]
fn command_getkeys_arity() {
    let h = server();
    let mut c = Client::new(&h);
    for args in [
        &["COMMAND", "GETKEYS"][..],
        &["COMMAND", "GETKEYS", "get"],
        &["COMMAND", "GETKEYS", "ping"],
    ] {
        assert_eq!(
            c.call(args),
            "-ERR wrong number of arguments for 'command|getkeys' command",
            "{args:?}"
        );
    }
    h.shutdown();
}

/// Redis 7.0 looks the key up before checking GETEX's expiry: a missing key
/// answers nil whatever the expiry says.
#[test]
fn getex_of_a_missing_key_is_nil_before_the_expiry_is_checked() {
    let h = server();
    let mut c = Client::new(&h);
    assert_eq!(c.call(&["GETEX", "nokey", "EX", "abc"]), "$-1");
    assert_eq!(c.call(&["GETEX", "nokey", "EX", "0"]), "$-1");
    h.shutdown();
}

/// What already agrees with Redis and must keep agreeing: APPEND is bound by
/// a `proto-max-bulk-len` set at run time, on both shards' keys.
#[test]
fn append_follows_config_set_proto_max_bulk_len_on_both_shards() {
    let h = server();
    let mut c = Client::new(&h);
    assert_eq!(
        c.call(&["CONFIG", "SET", "proto-max-bulk-len", "1mb"]),
        "+OK"
    );
    let half = "x".repeat(600_000);
    // "a" and "b" hash to slots 15495 and 3300: one on each shard.
    for k in ["a", "b"] {
        assert_eq!(c.call(&["SET", k, &half]), "+OK");
        assert_eq!(
            c.call(&["APPEND", k, &half]),
            "-ERR string exceeds maximum allowed size (proto-max-bulk-len)"
        );
    }
    assert_eq!(
        c.call(&["CONFIG", "SET", "proto-max-bulk-len", "512mb"]),
        "+OK"
    );
    for k in ["a", "b"] {
        assert_eq!(c.call(&["APPEND", k, &half]), ":1200000");
    }
    h.shutdown();
}
