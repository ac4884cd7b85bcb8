//! The persistence family in process: the replies of SAVE, BGSAVE,
//! BGREWRITEAOF and LASTSAVE and what they refuse. The harness runs no
//! persistence thread, so a request stays pending: that is how "already in
//! progress" is reached here. The files themselves are tested with real
//! processes in `server/tests/persistence.rs` and in process in
//! `tests/tests/persistence.rs`.

mod common;

use common::{err, info_field};
use leasehold_protocol::Reply;
use leasehold_server::harness::Harness;

#[test]
fn bgsave_answers_at_once_and_refuses_a_second() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("LASTSAVE"), Reply::Int(0));
    assert_eq!(h.cmd("BGSAVE x"), err("ERR syntax error"));
    assert_eq!(
        h.cmd("BGSAVE"),
        Reply::Simple("Background saving started".into())
    );
    assert_eq!(
        h.cmd("BGSAVE"),
        err("ERR Background save already in progress")
    );
    assert_eq!(
        h.cmd("SAVE"),
        err("ERR Background save already in progress")
    );
    // A rewrite asked while a snapshot is pending follows it.
    assert_eq!(
        h.cmd("BGREWRITEAOF"),
        Reply::Simple("Background append only file rewriting scheduled".into())
    );
    assert_eq!(
        h.cmd("BGREWRITEAOF"),
        err("ERR Background append only file rewriting already in progress")
    );
}

#[test]
fn bgsave_during_a_rewrite_needs_schedule() {
    let mut h = Harness::new();
    assert_eq!(
        h.cmd("BGREWRITEAOF"),
        Reply::Simple("Background append only file rewriting started".into())
    );
    assert_eq!(
        h.cmd("BGSAVE"),
        err("ERR An AOF log rewriting in progress: can't BGSAVE right now. Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.")
    );
    assert_eq!(
        h.cmd("BGSAVE SCHEDULE"),
        Reply::Simple("Background saving scheduled".into())
    );
    assert_eq!(
        info_field(&mut h, "persistence", "aof_enabled").as_deref(),
        Some("0")
    );
}

#[test]
fn save_is_refused_inside_multi_and_bgsave_is_queued() {
    let mut h = Harness::new();
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(
        h.cmd("SAVE"),
        err("ERR Command not allowed inside a transaction")
    );
    assert_eq!(
        h.cmd("EXEC"),
        err("EXECABORT Transaction discarded because of previous errors.")
    );
    assert_eq!(h.cmd("MULTI"), Reply::ok());
    assert_eq!(h.cmd("BGSAVE"), Reply::Simple("QUEUED".into()));
    assert_eq!(h.cmd("LASTSAVE"), Reply::Simple("QUEUED".into()));
    assert_eq!(
        h.cmd("EXEC"),
        Reply::Array(vec![
            Reply::Simple("Background saving started".into()),
            Reply::Int(0)
        ])
    );
}

#[test]
fn writes_are_counted_as_changes_since_the_last_save() {
    let mut h = Harness::new();
    let (a, b) = (h.key_on(0, "a"), h.key_on(1, "b"));
    assert_eq!(h.run(&["MSET", &a, "1", &b, "2"]), Reply::ok());
    assert_eq!(h.run(&["INCR", &a]), Reply::Int(2));
    assert_eq!(h.run(&["GET", &a]), Reply::bulk("2"));
    assert_eq!(
        info_field(&mut h, "persistence", "rdb_changes_since_last_save").as_deref(),
        Some("3")
    );
}
