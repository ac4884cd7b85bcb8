//! The ACL family in process: ACL's subcommands, logins as users, and the
//! dispatcher's refusals of a restricted user (commands, keys, channels,
//! MULTI), with Redis 7.0's texts.

mod common;

use common::{bulks, err, map_get};
use leasehold_protocol::Reply;
use leasehold_server::harness::Harness;

const NOPERM_KEY: &str =
    "NOPERM this user has no permissions to access one of the keys used as arguments";

#[test]
fn setuser_getuser_list_and_deluser() {
    let mut h = Harness::with_shards(2);
    assert_eq!(h.cmd("ACL WHOAMI"), Reply::bulk("default"));
    assert_eq!(h.cmd("ACL USERS"), bulks(&["default"]));
    assert_eq!(
        h.cmd("acl setuser gw on >secret ~rl:* +@ratelimit"),
        Reply::ok()
    );
    assert_eq!(
        h.cmd("ACL LIST"),
        bulks(&[
            "user default on nopass ~* &* +@all",
            "user gw on #2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b ~rl:* resetchannels -@all +@ratelimit",
        ])
    );
    h.cmd("HELLO 3");
    let user = h.cmd("ACL GETUSER gw");
    let Reply::Map(fields) = &user else {
        panic!("GETUSER is a map")
    };
    assert_eq!(fields.len(), 6);
    assert_eq!(map_get(&user, "flags"), Reply::Set(vec![Reply::bulk("on")]));
    assert_eq!(map_get(&user, "commands"), Reply::bulk("-@all +@ratelimit"));
    assert_eq!(map_get(&user, "keys"), Reply::bulk("~rl:*"));
    assert_eq!(map_get(&user, "channels"), Reply::bulk(""));
    assert_eq!(map_get(&user, "selectors"), Reply::Array(vec![]));
    assert_eq!(h.cmd("ACL GETUSER nosuch"), Reply::Nil);
    assert_eq!(
        h.cmd("ACL SETUSER gw +bogus"),
        err("ERR Error in ACL SETUSER modifier '+bogus': Unknown command or category name in ACL")
    );
    assert_eq!(
        h.cmd("ACL SETUSER gw foo"),
        err("ERR Error in ACL SETUSER modifier 'foo': Syntax error")
    );
    assert_eq!(h.cmd("ACL DELUSER gw nosuch"), Reply::Int(1));
    assert_eq!(
        h.cmd("ACL DELUSER default"),
        err("ERR The 'default' user cannot be removed")
    );
    assert_eq!(h.cmd("ACL USERS"), bulks(&["default"]));
    let Reply::Array(cats) = h.cmd("ACL CAT") else {
        panic!("CAT is an array")
    };
    assert_eq!(cats.len(), 22);
    assert_eq!(cats[21], Reply::bulk("ratelimit"));
    let Reply::Array(rl) = h.cmd("ACL CAT ratelimit") else {
        panic!("CAT ratelimit")
    };
    for name in [
        "tokenlease",
        "tokenreturn",
        "slidingwindow",
        "cl.throttle",
        "gcra",
        "rlstate",
    ] {
        assert!(rl.contains(&Reply::bulk(name)), "{name} is not @ratelimit");
    }
    assert!(!rl.contains(&Reply::bulk("lh.restore")));
    assert_eq!(
        h.cmd("ACL CAT nosuch"),
        err("ERR Unknown category 'nosuch'")
    );
    assert_eq!(h.cmd("ACL LOG"), Reply::Array(vec![]));
    assert_eq!(
        h.cmd("ACL FOO"),
        err("ERR unknown subcommand 'FOO'. Try ACL HELP.")
    );
}

#[test]
fn a_restricted_user_is_refused_before_anything_runs() {
    let mut admin = Harness::with_shards(2);
    assert_eq!(
        admin.cmd("ACL SETUSER gw on >pw ~rl:* &news.* +tokenlease +publish +multi +exec +set"),
        Reply::ok()
    );
    let mut gw = admin.new_connection();
    assert_eq!(
        gw.cmd("AUTH gw nope"),
        err("WRONGPASS invalid username-password pair or user is disabled.")
    );
    assert_eq!(gw.cmd("AUTH gw pw"), Reply::ok());
    assert_eq!(
        gw.cmd("TOKENLEASE rl:a 10 1 1000 1"),
        Reply::Array([1, 9, 0, 1000].map(Reply::Int).to_vec())
    );
    assert_eq!(gw.cmd("TOKENLEASE other 10 1 1000 1"), err(NOPERM_KEY));
    assert_eq!(
        gw.cmd("GET rl:a"),
        err("NOPERM this user has no permissions to run the 'get' command")
    );
    assert_eq!(
        gw.cmd("CONFIG GET maxclients"),
        err("NOPERM this user has no permissions to run the 'config|get' command")
    );
    assert_eq!(
        gw.cmd("PUBLISH sport x"),
        err("NOPERM this user has no permissions to access one of the channels used as arguments")
    );
    assert_eq!(gw.cmd("PUBLISH news.a x"), Reply::Int(0));
    assert_eq!(gw.cmd("MULTI"), Reply::ok());
    assert_eq!(gw.cmd("SET rl:b 1"), Reply::simple("QUEUED"));
    assert_eq!(gw.cmd("SET x 1"), err(NOPERM_KEY));
    assert_eq!(
        gw.cmd("EXEC"),
        err("EXECABORT Transaction discarded because of previous errors.")
    );
    // Nothing ran; the refusals are in the log, newest first.
    assert_eq!(admin.cmd("EXISTS rl:b x"), Reply::Int(0));
    admin.cmd("HELLO 3");
    let Reply::Array(log) = admin.cmd("ACL LOG") else {
        panic!("LOG is an array")
    };
    assert_eq!(log.len(), 6, "{log:?}");
    let newest = &log[0];
    assert_eq!(map_get(newest, "reason"), Reply::bulk("key"));
    assert_eq!(map_get(newest, "context"), Reply::bulk("multi"));
    assert_eq!(map_get(newest, "object"), Reply::bulk("x"));
    assert_eq!(map_get(newest, "username"), Reply::bulk("gw"));
    assert_eq!(map_get(&log[5], "reason"), Reply::bulk("auth"));
    assert_eq!(admin.cmd("ACL LOG RESET"), Reply::ok());
    assert_eq!(admin.cmd("ACL LOG"), Reply::Array(vec![]));
    assert_eq!(
        admin.cmd("ACL DRYRUN gw get rl:a"),
        Reply::bulk("This user has no permissions to run the 'get' command")
    );
    assert_eq!(
        admin.cmd("ACL DRYRUN gw tokenlease rl:a 10 1 1000 1"),
        Reply::ok()
    );
    // RESET makes the connection the default user's again.
    assert_eq!(gw.cmd("RESET"), Reply::simple("RESET"));
    assert_eq!(gw.cmd("ACL WHOAMI"), Reply::bulk("default"));
}

/// The ACL is judged before the node's state, as in Redis 7: on a
/// replica, a write the user may not run answers NOPERM, not READONLY.
#[test]
fn a_denied_write_on_a_replica_is_noperm_before_readonly() {
    let mut h = Harness::with_shards(2);
    assert_eq!(h.cmd("ACL SETUSER u on >p ~a* +@all -set"), Reply::ok());
    assert_eq!(h.cmd("REPLICAOF 127.0.0.1 1"), Reply::ok());
    assert_eq!(h.cmd("AUTH u p"), Reply::ok());
    assert_eq!(
        h.cmd("SET a1 v"),
        err("NOPERM this user has no permissions to run the 'set' command")
    );
    assert_eq!(h.cmd("INCR b1"), err(NOPERM_KEY));
    // What the ACL allows meets the replica's refusal.
    assert_eq!(
        h.cmd("INCR a1"),
        err("READONLY You can't write against a read only replica.")
    );
    assert_eq!(h.cmd("GET a1"), Reply::Nil);
}
