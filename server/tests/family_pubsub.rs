//! The pub/sub family in process, on 2 shards: subscriptions and their
//! confirmations, PUBLISH's receiver count and the messages across threads,
//! patterns, PUBSUB's introspection, RESP2's subscribed mode, RESP3 pushes,
//! RESET and closing, CLIENT LIST and CLIENT KILL TYPE.

mod common;

use common::{arity, err, text};
use leasehold_protocol::Reply;
use leasehold_server::harness::Harness;

fn push(items: &[Reply]) -> Reply {
    Reply::Push(items.to_vec())
}

fn b(s: &str) -> Reply {
    Reply::bulk(s)
}

/// A subscription confirmation as RESP2 reads it (an array).
fn conf(word: &str, name: Option<&str>, count: i64) -> Reply {
    let name = name.map_or(Reply::Nil, b);
    Reply::Array(vec![b(word), name, Reply::Int(count)])
}

/// What a connection has been sent since its last call.
fn pending(h: &mut Harness) -> Vec<Reply> {
    h.raw(b"")
}

const CONTEXT: &str =
    "only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context";

#[test]
fn subscribe_publish_across_threads() {
    let mut sub = Harness::new();
    let mut publisher = sub.connection_on(1);
    assert_eq!((sub.worker_id(), publisher.worker_id()), (0, 1));
    assert_eq!(
        sub.pipeline(&["SUBSCRIBE ch other"]),
        vec![
            conf("subscribe", Some("ch"), 1),
            conf("subscribe", Some("other"), 2)
        ]
    );
    assert_eq!(publisher.cmd("PUBLISH ch hello"), Reply::Int(1));
    assert_eq!(publisher.cmd("PUBLISH nobody hello"), Reply::Int(0));
    assert_eq!(
        pending(&mut sub),
        vec![Reply::Array(vec![b("message"), b("ch"), b("hello")])]
    );
    // A second subscriber on the publisher's own thread.
    let mut near = sub.connection_on(1);
    near.cmd("SUBSCRIBE ch");
    assert_eq!(publisher.run(&["PUBLISH", "ch", "a b"]), Reply::Int(2));
    let message = Reply::Array(vec![b("message"), b("ch"), b("a b")]);
    assert_eq!(pending(&mut sub), vec![message.clone()]);
    assert_eq!(pending(&mut near), vec![message]);
    // Messages keep their order.
    for i in 0..5 {
        publisher.run(&["PUBLISH", "other", &i.to_string()]);
    }
    let got = pending(&mut sub);
    let want: Vec<Reply> = (0..5)
        .map(|i| Reply::Array(vec![b("message"), b("other"), b(&i.to_string())]))
        .collect();
    assert_eq!(got, want);
    assert_eq!(pending(&mut near), Vec::<Reply>::new());
}

#[test]
fn patterns_match_as_redis_globs() {
    let mut sub = Harness::new();
    let mut publisher = sub.connection_on(1);
    assert_eq!(
        sub.pipeline(&["PSUBSCRIBE ch* news.[ab]? a\\*b"]),
        vec![
            conf("psubscribe", Some("ch*"), 1),
            conf("psubscribe", Some("news.[ab]?"), 2),
            conf("psubscribe", Some("a\\*b"), 3),
        ]
    );
    sub.cmd("SUBSCRIBE ch1");
    // The channel subscription and the pattern both count, and both arrive.
    assert_eq!(publisher.cmd("PUBLISH ch1 x"), Reply::Int(2));
    assert_eq!(
        pending(&mut sub),
        vec![
            Reply::Array(vec![b("message"), b("ch1"), b("x")]),
            Reply::Array(vec![b("pmessage"), b("ch*"), b("ch1"), b("x")]),
        ]
    );
    assert_eq!(publisher.cmd("PUBLISH news.b1 y"), Reply::Int(1));
    assert_eq!(publisher.cmd("PUBLISH news.c1 y"), Reply::Int(0));
    assert_eq!(publisher.cmd("PUBLISH news.b12 y"), Reply::Int(0));
    assert_eq!(publisher.cmd("PUBLISH a*b z"), Reply::Int(1));
    assert_eq!(publisher.cmd("PUBLISH axb z"), Reply::Int(0));
    assert_eq!(pending(&mut sub).len(), 2);
    assert_eq!(
        sub.pipeline(&["PUNSUBSCRIBE ch* nope"]),
        vec![
            conf("punsubscribe", Some("ch*"), 3),
            conf("punsubscribe", Some("nope"), 3)
        ]
    );
    assert_eq!(publisher.cmd("PUBLISH ch2 x"), Reply::Int(0));
}

#[test]
fn unsubscribe_all_and_nothing_to_unsubscribe() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("UNSUBSCRIBE"), conf("unsubscribe", None, 0));
    assert_eq!(h.cmd("PUNSUBSCRIBE"), conf("punsubscribe", None, 0));
    h.pipeline(&["SUBSCRIBE a b c", "PSUBSCRIBE p*"]);
    let mut got = h.pipeline(&["UNSUBSCRIBE"]);
    // Redis unsubscribes in no particular order; the counts go down by one.
    let counts: Vec<Reply> = got
        .iter()
        .map(|r| match r {
            Reply::Array(items) => items[2].clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(counts, vec![Reply::Int(3), Reply::Int(2), Reply::Int(1)]);
    got.sort_by_key(|r| format!("{r:?}"));
    let names: Vec<Reply> = got
        .iter()
        .map(|r| match r {
            Reply::Array(items) => items[1].clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(names, vec![b("a"), b("b"), b("c")]);
    // Still subscribed to the pattern: still in subscribed mode.
    assert_eq!(
        h.cmd("GET x"),
        err(&format!("ERR Can't execute 'get': {CONTEXT}"))
    );
    assert_eq!(h.cmd("PUNSUBSCRIBE"), conf("punsubscribe", Some("p*"), 0));
    assert_eq!(h.cmd("GET x"), Reply::Nil, "out of subscribed mode");
}

#[test]
fn resp2_subscribed_mode_allows_only_its_commands() {
    let mut h = Harness::new();
    h.cmd("SUBSCRIBE ch");
    assert_eq!(h.cmd("PING"), Reply::Array(vec![b("pong"), b("")]));
    assert_eq!(h.cmd("PING hi"), Reply::Array(vec![b("pong"), b("hi")]));
    assert_eq!(h.cmd("PING a b"), arity("ping"));
    for (cmd, name) in [
        ("GET x", "get"),
        ("SET x 1", "set"),
        ("CLIENT ID", "client"),
        ("HELLO 3", "hello"),
        ("PUBLISH ch m", "publish"),
    ] {
        assert_eq!(
            h.cmd(cmd),
            err(&format!("ERR Can't execute '{name}': {CONTEXT}")),
            "{cmd}"
        );
    }
    // Unknown commands and arity come first, as in Redis.
    assert_eq!(
        h.cmd("NOSUCH"),
        err("ERR unknown command 'NOSUCH', with args beginning with: ")
    );
    assert_eq!(h.cmd("GET"), arity("get"));
    // The connection survives every refusal.
    assert_eq!(h.cmd("SUBSCRIBE ch2"), conf("subscribe", Some("ch2"), 2));
    // RESET leaves subscribed mode and every subscription.
    assert_eq!(h.cmd("RESET"), Reply::simple("RESET"));
    assert_eq!(h.cmd("GET x"), Reply::Nil);
    let mut p = h.new_connection();
    assert_eq!(p.cmd("PUBLISH ch m"), Reply::Int(0));
    assert_eq!(p.cmd("PUBSUB CHANNELS"), Reply::Array(vec![]));
}

#[test]
fn resp3_pushes_and_any_command() {
    let mut h = Harness::new();
    assert!(matches!(h.cmd("HELLO 3"), Reply::Map(_)));
    assert_eq!(
        h.cmd("SUBSCRIBE ch"),
        push(&[b("subscribe"), b("ch"), Reply::Int(1)])
    );
    assert_eq!(h.cmd("PING"), Reply::simple("PONG"));
    let k = h.key_on(1, "k");
    assert_eq!(h.run(&["SET", &k, "v"]), Reply::ok());
    let mut p = h.connection_on(1);
    assert_eq!(p.cmd("PUBLISH ch m"), Reply::Int(1));
    assert_eq!(
        pending(&mut h),
        vec![push(&[b("message"), b("ch"), b("m")])]
    );
    // A message that comes while a reply from the other shard is owed
    // follows that reply.
    let got = h.pipeline(&[vec!["GET", &k], vec!["PUBLISH", "ch", "self"]]);
    assert_eq!(got[..2], [b("v"), Reply::Int(1)]);
    let mut rest = got[2..].to_vec();
    rest.extend(pending(&mut h));
    assert_eq!(rest, vec![push(&[b("message"), b("ch"), b("self")])]);
    assert_eq!(
        h.cmd("UNSUBSCRIBE"),
        push(&[b("unsubscribe"), b("ch"), Reply::Int(0)])
    );
    assert_eq!(
        h.cmd("UNSUBSCRIBE"),
        push(&[b("unsubscribe"), Reply::Nil, Reply::Int(0)])
    );
}

#[test]
fn pubsub_introspection() {
    let mut a = Harness::new();
    let mut z = a.connection_on(1);
    a.pipeline(&["SUBSCRIBE ch1 ch2"]);
    z.pipeline(&["SUBSCRIBE ch1", "PSUBSCRIBE c* c*", "PSUBSCRIBE d?"]);
    a.cmd("PSUBSCRIBE c*");
    let mut q = a.new_connection();
    assert_eq!(
        q.cmd("PUBSUB CHANNELS"),
        Reply::Array(vec![b("ch1"), b("ch2")])
    );
    assert_eq!(q.cmd("PUBSUB CHANNELS *2"), Reply::Array(vec![b("ch2")]));
    assert_eq!(q.cmd("PUBSUB CHANNELS x*"), Reply::Array(vec![]));
    assert_eq!(
        q.cmd("PUBSUB NUMSUB ch1 ch2 none"),
        Reply::Array(vec![
            b("ch1"),
            Reply::Int(2),
            b("ch2"),
            Reply::Int(1),
            b("none"),
            Reply::Int(0)
        ])
    );
    assert_eq!(q.cmd("PUBSUB NUMSUB"), Reply::Array(vec![]));
    assert_eq!(q.cmd("PUBSUB NUMPAT"), Reply::Int(2));
    // Two channel subscribers and two subscriptions of the pattern c*.
    assert_eq!(q.cmd("PUBLISH ch1 m"), Reply::Int(4));
    assert_eq!(q.cmd("PUBSUB NUMPAT x"), arity("pubsub|numpat"));
    assert_eq!(q.cmd("PUBSUB CHANNELS a b"), arity("pubsub|channels"));
    assert_eq!(
        q.cmd("PUBSUB FOO"),
        err("ERR unknown subcommand 'FOO'. Try PUBSUB HELP.")
    );
    assert!(matches!(q.cmd("PUBSUB HELP"), Reply::Array(_)));
    assert_eq!(q.cmd("SUBSCRIBE"), arity("subscribe"));
    assert_eq!(q.cmd("PUBLISH ch1"), arity("publish"));
    // Closing a connection removes its subscriptions.
    drop(a);
    assert_eq!(
        q.cmd("PUBSUB NUMSUB ch1 ch2"),
        Reply::Array(vec![b("ch1"), Reply::Int(1), b("ch2"), Reply::Int(0)])
    );
    assert_eq!(q.cmd("PUBLISH ch1 m"), Reply::Int(2));
    // The messages published meanwhile come first (QUIT's is in RESP2 subscribed mode).
    let quit = z.pipeline(&["QUIT"]);
    assert_eq!(quit.len(), 5);
    assert_eq!(quit.last(), Some(&Reply::ok()));
    assert_eq!(q.cmd("PUBLISH ch1 m"), Reply::Int(0));
    assert_eq!(q.cmd("PUBSUB NUMPAT"), Reply::Int(0));
}

#[test]
fn client_list_and_kill_by_type() {
    let mut me = Harness::new();
    let mut sub = me.connection_on(1);
    let mut psub = me.connection_on(0);
    let mut plain = me.connection_on(1);
    sub.pipeline(&["SUBSCRIBE a b"]);
    psub.cmd("PSUBSCRIBE p*");
    let line = text(&me.cmd(&format!("CLIENT LIST ID {}", sub.client_id())));
    assert!(
        line.contains(" flags=P ") && line.contains(" sub=2 psub=0 "),
        "{line}"
    );
    let line = text(&me.cmd(&format!("CLIENT LIST ID {}", psub.client_id())));
    assert!(
        line.contains(" flags=P ") && line.contains(" sub=0 psub=1 "),
        "{line}"
    );
    let line = text(&me.cmd("CLIENT INFO"));
    assert!(
        line.contains(" flags=N ") && line.contains(" sub=0 psub=0 "),
        "{line}"
    );
    let pubsub_list = text(&me.cmd("CLIENT LIST TYPE pubsub"));
    assert_eq!(pubsub_list.lines().count(), 2, "{pubsub_list}");
    let normal_list = text(&me.cmd("CLIENT LIST TYPE normal"));
    assert_eq!(normal_list.lines().count(), 2, "{normal_list}");
    assert_eq!(me.cmd("CLIENT LIST TYPE replica"), Reply::bulk(""));
    assert_eq!(me.cmd("CLIENT KILL TYPE pubsub"), Reply::Int(2));
    assert!(sub.is_closed() && psub.is_closed());
    assert_eq!(me.cmd("PUBLISH a m"), Reply::Int(0));
    // The caller survives TYPE normal (SKIPME yes by default).
    assert_eq!(me.cmd("CLIENT KILL TYPE normal"), Reply::Int(1));
    assert!(plain.is_closed());
    assert_eq!(plain.pipeline(&["PING"]), Vec::<Reply>::new());
    assert_eq!(me.cmd("PING"), Reply::simple("PONG"));
    assert_eq!(
        me.cmd("CLIENT KILL TYPE bogus"),
        err("ERR Unknown client type 'bogus'")
    );
}

#[test]
fn output_limit_closes_a_subscriber_that_does_not_read() {
    let mut sub = Harness::new();
    let mut publisher = sub.connection_on(1);
    assert_eq!(
        publisher.cmd("CONFIG SET client-output-buffer-limit pubsub_placeholder"),
        err("ERR CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - Wrong number of arguments in buffer limit configuration.")
    );
    assert_eq!(
        publisher.run(&[
            "CONFIG",
            "SET",
            "client-output-buffer-limit",
            "pubsub 1mb 0 0"
        ]),
        Reply::ok()
    );
    assert_eq!(
        publisher.cmd("CONFIG GET client-output-buffer-limit"),
        Reply::Array(vec![
            b("client-output-buffer-limit"),
            b("normal 0 0 0 slave 268435456 67108864 60 pubsub 1048576 0 0"),
        ])
    );
    sub.cmd("SUBSCRIBE big");
    let chunk = "x".repeat(100_000);
    // The harness writes nothing anywhere: the subscriber's output grows
    // until it passes 1 MB, then the connection is closed.
    let mut receivers = Vec::new();
    for _ in 0..12 {
        receivers.push(publisher.run(&["PUBLISH", "big", &chunk]));
    }
    assert_eq!(receivers[..10], vec![Reply::Int(1); 10][..]);
    assert_eq!(
        receivers[11],
        Reply::Int(0),
        "closed at the limit: {receivers:?}"
    );
    assert!(sub.is_closed());
    assert_eq!(
        publisher.cmd("PUBSUB NUMSUB big"),
        Reply::Array(vec![b("big"), Reply::Int(0)])
    );
}
