//! The connection family in process: PING, ECHO, HELLO, AUTH, SELECT,
//! QUIT, RESET, CLIENT. Reply shapes in RESP2 and RESP3, connection state
//! across calls, passwords, and Redis 7's error texts.

mod common;

use common::{arity, err, map_get, text, NOT_INT, SYNTAX};
use leasehold_protocol::{Protocol, Reply};
use leasehold_server::config::Config;
use leasehold_server::harness::Harness;

fn with_password() -> Harness {
    let mut config = Config::default();
    config.security.requirepass = "secret".into();
    Harness::with_config(config, 2)
}

const NOAUTH: &str = "NOAUTH Authentication required.";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

#[test]
fn ping_and_echo() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("PING"), Reply::simple("PONG"));
    assert_eq!(h.cmd("ping hello"), Reply::bulk("hello"));
    assert_eq!(h.cmd("PING a b"), arity("ping"));
    assert_eq!(h.run(&["ECHO", "a b"]), Reply::bulk("a b"));
    assert_eq!(h.cmd("ECHO"), arity("echo"));
    assert_eq!(h.cmd("ECHO a b"), arity("echo"));
}

#[test]
fn hello_switches_the_protocol_for_later_calls() {
    let mut h = Harness::new();
    let hello2 = h.cmd("HELLO");
    let Reply::Array(fields) = &hello2 else {
        panic!("RESP2 HELLO is a flat array: {hello2:?}");
    };
    assert_eq!(fields.len(), 14);
    assert_eq!(fields[4..6], [Reply::bulk("proto"), Reply::Int(2)]);
    assert_eq!(
        fields[6..8],
        [Reply::bulk("id"), Reply::Int(h.client_id() as i64)]
    );
    // RESP2 answers a verbatim string as a bulk string.
    assert!(matches!(h.cmd("CLIENT INFO"), Reply::Bulk(_)));

    let hello3 = h.cmd("HELLO 3");
    assert_eq!(map_get(&hello3, "proto"), Reply::Int(3));
    assert_eq!(map_get(&hello3, "role"), Reply::bulk("master"));
    assert_eq!(map_get(&hello3, "version"), Reply::bulk("7.0.15"));
    assert_eq!(h.protocol(), Protocol::Resp3);
    assert!(matches!(h.cmd("CLIENT INFO"), Reply::Verbatim(_, _)));
    assert!(matches!(h.cmd("CONFIG GET hz"), Reply::Map(_)));
    assert!(text(&h.cmd("CLIENT INFO")).ends_with("resp=3\n"));
    assert!(matches!(h.cmd("HELLO 2"), Reply::Array(_)));
    assert_eq!(h.protocol(), Protocol::Resp2);
}

#[test]
fn hello_errors_and_options() {
    let mut h = Harness::new();
    assert_eq!(
        h.cmd("HELLO 4"),
        err("NOPROTO unsupported protocol version")
    );
    assert_eq!(
        h.cmd("HELLO 1"),
        err("NOPROTO unsupported protocol version")
    );
    assert_eq!(
        h.cmd("HELLO three"),
        err("ERR Protocol version is not an integer or out of range")
    );
    assert_eq!(
        h.cmd("HELLO 3 Foo"),
        err("ERR Syntax error in HELLO option 'Foo'")
    );
    assert_eq!(
        h.cmd("HELLO 3 SETNAME"),
        err("ERR Syntax error in HELLO option 'SETNAME'")
    );
    assert_eq!(
        h.protocol(),
        Protocol::Resp2,
        "a failed HELLO changes nothing"
    );
    assert!(matches!(h.cmd("HELLO 2 SETNAME svc"), Reply::Array(_)));
    assert_eq!(h.cmd("CLIENT GETNAME"), Reply::bulk("svc"));
}

#[test]
fn auth_without_a_password() {
    let mut h = Harness::new();
    assert_eq!(
        h.cmd("AUTH x"),
        err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
    );
    assert_eq!(h.cmd("AUTH default anything"), Reply::ok());
    assert_eq!(h.cmd("AUTH bob anything"), err(WRONGPASS));
    assert_eq!(h.cmd("AUTH a b c"), err(SYNTAX));
    assert_eq!(h.cmd("AUTH"), arity("auth"));
}

#[test]
fn a_password_guards_every_command_but_the_handshake() {
    let mut h = with_password();
    assert_eq!(h.cmd("GET k"), err(NOAUTH));
    assert_eq!(h.cmd("PING"), err(NOAUTH));
    assert_eq!(h.cmd("CLIENT ID"), err(NOAUTH));
    assert_eq!(h.cmd("SHUTDOWN"), err(NOAUTH));
    // As Redis: NOAUTH before any argument is looked at.
    for line in ["SHUTDOWN FOO", "SHUTDOWN ABORT", "SHUTDOWN NOSAVE SAVE"] {
        assert_eq!(h.cmd(line), err(NOAUTH), "{line}");
    }
    assert_eq!(
        h.cmd("HELLO 3"),
        err("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
    );
    assert_eq!(h.cmd("AUTH wrong"), err(WRONGPASS));
    assert_eq!(h.cmd("AUTH default wrong"), err(WRONGPASS));
    assert_eq!(h.cmd("AUTH secret"), Reply::ok());
    assert_eq!(h.cmd("SET k v"), Reply::ok());

    let mut other = h.new_connection();
    assert_eq!(other.cmd("GET k"), err(NOAUTH));
    assert!(matches!(
        other.cmd("HELLO 3 AUTH default secret"),
        Reply::Map(_)
    ));
    assert_eq!(other.cmd("GET k"), Reply::bulk("v"));
    assert_eq!(other.cmd("RESET"), Reply::simple("RESET"));
    assert_eq!(other.cmd("GET k"), err(NOAUTH), "RESET forgets AUTH");
}

#[test]
fn before_auth_a_request_may_hold_at_most_ten_arguments() {
    let mut h = with_password();
    let eleven = ["DEL"; 11];
    let replies = h.pipeline(&[eleven]);
    assert_eq!(
        replies,
        vec![err("ERR Protocol error: unauthenticated multibulk length")]
    );
    assert!(h.is_closed());
    let mut h = h.new_connection();
    assert_eq!(h.cmd("AUTH secret"), Reply::ok());
    assert_eq!(h.run(&eleven), Reply::Int(0));
}

#[test]
fn select_only_database_zero() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("SELECT 0"), Reply::ok());
    assert_eq!(h.cmd("SELECT 1"), err("ERR DB index is out of range"));
    assert_eq!(h.cmd("SELECT x"), err(NOT_INT));
    assert_eq!(h.cmd("SELECT"), arity("select"));
}

#[test]
fn quit_answers_then_closes() {
    let mut h = Harness::new();
    assert_eq!(
        h.pipeline(&["PING", "QUIT", "PING"]),
        vec![Reply::simple("PONG"), Reply::ok()]
    );
    assert!(h.is_closed());
    let id = h.client_id();
    assert!(!h.shared().clients.lock().contains_key(&id), "unregistered");
}

#[test]
fn reset_restores_a_fresh_connection() {
    let mut h = Harness::new();
    assert!(matches!(h.cmd("HELLO 3 SETNAME n1"), Reply::Map(_)));
    assert_eq!(h.cmd("RESET"), Reply::simple("RESET"));
    assert_eq!(h.protocol(), Protocol::Resp2);
    assert_eq!(h.cmd("CLIENT GETNAME"), Reply::Nil);
    assert_eq!(h.cmd("RESET x"), arity("reset"));
}

#[test]
fn client_names_ids_and_lists() {
    let mut h = Harness::new();
    let mut b = h.new_connection();
    assert_eq!(h.cmd("CLIENT ID"), Reply::Int(h.client_id() as i64));
    assert_eq!(h.cmd("CLIENT GETNAME"), Reply::Nil);
    assert_eq!(h.cmd("CLIENT SETNAME worker-1"), Reply::ok());
    assert_eq!(h.cmd("CLIENT GETNAME"), Reply::bulk("worker-1"));
    assert_eq!(
        h.run(&["CLIENT", "SETNAME", "a b"]),
        err("ERR Client names cannot contain spaces, newlines or special characters.")
    );
    assert_eq!(h.cmd("CLIENT GETNAME x"), arity("client|getname"));
    assert_eq!(h.cmd("CLIENT ID x"), arity("client|id"));
    assert_eq!(
        h.cmd("client Frob"),
        err("ERR unknown subcommand 'Frob'. Try CLIENT HELP.")
    );
    assert_eq!(h.cmd("CLIENT"), arity("client"));
    assert_eq!(b.cmd("SET k v"), Reply::ok());

    let list = text(&h.cmd("CLIENT LIST"));
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 2, "{list}");
    assert!(lines[0].starts_with(&format!("id={} addr=127.0.0.1:40000 ", h.client_id())));
    assert!(lines[0].contains(" name=worker-1 "), "{}", lines[0]);
    assert!(lines[1].contains(" cmd=set "), "{}", lines[1]);
    let only_b = text(&h.run(&["CLIENT", "LIST", "ID", &b.client_id().to_string()]));
    assert_eq!(only_b.lines().count(), 1);
    assert!(only_b.starts_with(&format!("id={} ", b.client_id())));
    assert_eq!(text(&h.cmd("CLIENT LIST TYPE replica")), "");
    assert_eq!(
        h.cmd("CLIENT LIST TYPE bogus"),
        err("ERR Unknown client type 'bogus'")
    );
    assert_eq!(h.cmd("CLIENT LIST ID x"), err("ERR Invalid client ID"));
    assert_eq!(h.cmd("CLIENT LIST FOO"), err(SYNTAX));
    // The same line but for the buffers, which changed in between.
    let without_buffers = |l: &str| {
        let (head, rest) = l.split_once(" qbuf=").expect("qbuf field");
        let (_, tail) = rest.split_once(" events=").expect("events field");
        format!("{head} {tail}")
    };
    let info = text(&h.cmd("CLIENT INFO"));
    assert_eq!(without_buffers(&info), without_buffers(lines[0]) + "\n");
}

#[test]
fn client_kill_closes_the_other_connection() {
    let mut h = Harness::new();
    let mut b = h.new_connection();
    let mut c = h.new_connection();
    assert_eq!(
        h.run(&["CLIENT", "KILL", "ID", &b.client_id().to_string()]),
        Reply::Int(1)
    );
    assert!(b.is_closed());
    assert_eq!(text(&h.cmd("CLIENT LIST")).lines().count(), 2, "b is gone");
    assert_eq!(b.pipeline(&["PING"]), Vec::<Reply>::new());
    assert_eq!(h.cmd("CLIENT KILL ID 999"), Reply::Int(0));
    assert_eq!(
        h.cmd("CLIENT KILL ID x"),
        err("ERR client-id should be greater than 0")
    );
    assert_eq!(h.cmd("CLIENT KILL 10.0.0.1:1"), err("ERR No such client"));
    // c's peer address is the third connection's: 127.0.0.1:40002.
    assert_eq!(h.cmd("CLIENT KILL 127.0.0.1:40002"), Reply::ok());
    assert!(c.is_closed());
    assert_eq!(c.pipeline(&["PING"]), Vec::<Reply>::new());
    // SKIPME yes (the default) spares the caller; SKIPME no does not.
    assert_eq!(h.cmd("CLIENT KILL ADDR 127.0.0.1:40000"), Reply::Int(0));
    assert_eq!(
        h.cmd("CLIENT KILL ADDR 127.0.0.1:40000 SKIPME maybe"),
        err(SYNTAX)
    );
    assert_eq!(
        h.pipeline(&["CLIENT KILL ADDR 127.0.0.1:40000 SKIPME no", "PING"]),
        vec![Reply::Int(1)]
    );
    assert!(h.is_closed());
}

#[test]
fn client_setinfo_no_evict_and_help() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("CLIENT SETINFO LIB-NAME redis-rs"), Reply::ok());
    assert_eq!(h.cmd("CLIENT SETINFO lib-ver 1.0"), Reply::ok());
    assert_eq!(
        h.cmd("CLIENT SETINFO FOO x"),
        err("ERR Unrecognized option 'FOO'")
    );
    assert_eq!(h.cmd("CLIENT NO-EVICT on"), Reply::ok());
    assert_eq!(h.cmd("CLIENT NO-TOUCH maybe"), err(SYNTAX));
    let Reply::Array(help) = h.cmd("CLIENT HELP") else {
        panic!("CLIENT HELP is an array");
    };
    assert_eq!(
        help[0],
        Reply::simple("CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")
    );
}

/// A pipelined password guesser is closed once about 1 KB of replies waits
/// (as Redis closes it), every failure is counted in INFO, and an honest
/// client that reads its replies is never cut off.
#[test]
fn a_password_guesser_is_cut_off_and_counted() {
    let mut h = with_password();
    let guesses: Vec<u8> = (0..10_000)
        .flat_map(|i| format!("AUTH guess{i}\r\n").into_bytes())
        .collect();
    let replies = h.raw(&guesses);
    assert!(h.is_closed(), "closed after {} replies", replies.len());
    // 64 bytes per WRONGPASS line: closed at the 17th, not the 10,000th.
    assert_eq!(replies.len(), 17);
    assert!(replies.iter().all(|r| *r == err(WRONGPASS)));
    let mut admin = h.new_connection();
    for _ in 0..40 {
        assert_eq!(admin.cmd("AUTH wrong"), err(WRONGPASS));
    }
    assert!(!admin.is_closed(), "replies read one by one never pile up");
    assert_eq!(admin.cmd("AUTH secret"), Reply::ok());
    let stats = text(&admin.cmd("INFO stats"));
    assert!(stats.contains("acl_access_denied_auth:57\r\n"), "{stats}");
    // Authenticated, a long pipeline of errors is not cut off.
    let many: Vec<u8> = (0..100).flat_map(|_| b"AUTH wrong\r\n".to_vec()).collect();
    assert_eq!(admin.raw(&many).len(), 100);
    assert!(!admin.is_closed());
}
