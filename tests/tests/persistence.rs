//! Persistence in-process: snapshots and the log on a hand-set clock (time
//! across a restart), the commands' replies, INFO persistence, CONFIG of
//! the settings, MISCONF while snapshots fail, and the log switched on and
//! off at run time.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use leasehold_server::clock::{Clock, ManualClock, SystemClock, MONO_BASE_MS};
use leasehold_tests::{info, info_fields, Raw, TestServer, T0_MS};

fn config_in(dir: &Path, threads: usize) -> leasehold_server::config::Config {
    let mut c = TestServer::config(threads);
    c.persistence.dir = dir.display().to_string();
    c
}

fn wait(what: &str, mut ok: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: not within 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn persistence(c: &mut Raw) -> std::collections::HashMap<String, String> {
    info_fields(&info(c, "persistence"))
}

/// A bucket saved empty refills with the wall-clock time that passed while
/// the server was down, up to its capacity; a wall clock stepped back
/// while down mints nothing.
#[test]
fn a_saved_bucket_goes_on_with_the_time_that_passed() {
    for (down_ms, step_back, want) in [
        // Saved empty a second ago (rate 1 per 100 ms): 10 tokens back.
        (1_000i64, false, ":10\r\n"),
        // An hour ago: full (capacity 100), never more.
        (3_600_000, false, ":100\r\n"),
        // The wall clock went back an hour while down: nothing refilled.
        (-3_600_000, true, ":0\r\n"),
    ] {
        let dir = leasehold_testkit::scratch_dir();
        // Both processes' monotonic clocks start where the real one does.
        let clock = Arc::new(ManualClock::new(T0_MS, MONO_BASE_MS));
        let server = TestServer::with_config(config_in(&dir, 2), clock.clone());
        let mut c = server.raw();
        assert!(c
            .call("TOKENLEASE b 100 1 100 100")
            .starts_with("*4\r\n:100\r\n"));
        assert_eq!(c.call("SAVE"), "+OK\r\n");
        drop(c);
        drop(server);
        // The next process starts on a new monotonic clock.
        let unix = (T0_MS as i64 + down_ms) as u64;
        let clock = Arc::new(ManualClock::new(unix, MONO_BASE_MS));
        let server = TestServer::with_config(config_in(&dir, 2), clock.clone());
        let mut c = server.raw();
        // The bucket's key expires when it would be full (10 s after the
        // save): an hour later it is gone, which is a full bucket.
        let state = c.call("RLSTATE b");
        match down_ms > 10_000 {
            true => assert_eq!(state, "$-1\r\n"),
            false => assert!(state.contains("tokens\r\n:0\r\n"), "{state}"),
        }
        let granted = c.call("TOKENLEASE b 100 1 100 100 MIN 1");
        assert!(
            granted.starts_with(&format!("*4\r\n{want}")),
            "down {down_ms} ms (step back: {step_back}): {granted}"
        );
    }
}

#[test]
fn save_bgsave_lastsave_and_info_persistence() {
    let dir = leasehold_testkit::scratch_dir();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let server = TestServer::with_config(config_in(&dir, 2), clock);
    let mut c = server.raw();
    let p = persistence(&mut c);
    assert_eq!(p["loading"], "0");
    assert_eq!(p["rdb_changes_since_last_save"], "0");
    assert_eq!(p["rdb_bgsave_in_progress"], "0");
    assert_eq!(p["rdb_last_bgsave_status"], "ok");
    assert_eq!(p["aof_enabled"], "0");
    assert_eq!(p["rdb_saves"], "0");
    for i in 0..5 {
        assert_eq!(c.call(&format!("SET k{i} v")), "+OK\r\n");
    }
    assert_eq!(c.call("DEL k0 k1"), ":2\r\n");
    assert_eq!(persistence(&mut c)["rdb_changes_since_last_save"], "7");
    assert_eq!(c.call("SAVE"), "+OK\r\n");
    let p = persistence(&mut c);
    assert_eq!(p["rdb_changes_since_last_save"], "0");
    assert_eq!(p["rdb_saves"], "1");
    assert!(dir.join("dump.lhs").exists());
    let last: u64 = c.call("LASTSAVE")[1..].trim().parse().unwrap();
    assert_eq!(p["rdb_last_save_time"], last.to_string());
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(now_s.abs_diff(last) <= 2, "LASTSAVE {last}, now {now_s}");
    assert_eq!(c.call("BGSAVE"), "+Background saving started\r\n");
    wait("the BGSAVE", || persistence(&mut c)["rdb_saves"] == "2");
    assert_eq!(c.call("BGSAVE NOW"), "-ERR syntax error\r\n");
    // SAVE is refused inside MULTI (and aborts it), as in Redis.
    assert_eq!(c.call("MULTI"), "+OK\r\n");
    assert_eq!(
        c.call("SAVE"),
        "-ERR Command not allowed inside a transaction\r\n"
    );
    assert!(c.call("EXEC").starts_with("-EXECABORT"));
    // The snapshot holds what was there at its cut: a new server loads it.
    assert_eq!(c.call("SET late v"), "+OK\r\n");
    drop(c);
    drop(server);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let server = TestServer::with_config(config_in(&dir, 1), clock);
    let mut c = server.raw();
    assert_eq!(
        c.call("DBSIZE"),
        ":3\r\n",
        "k2 k3 k4; `late` came after the last snapshot"
    );
    assert_eq!(c.call("EXISTS late"), ":0\r\n");
}

#[test]
fn config_of_every_persistence_setting() {
    let dir = leasehold_testkit::scratch_dir();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let server = TestServer::with_config(config_in(&dir, 2), clock);
    let mut c = server.raw();
    let get = |c: &mut Raw, name: &str| c.call(&format!("CONFIG GET {name}"));
    let bulk = |s: &str| format!("${}\r\n{s}\r\n", s.len());
    assert_eq!(
        get(&mut c, "save"),
        format!("*2\r\n{}{}", bulk("save"), bulk(""))
    );
    let set = |c: &mut Raw, name: &str, value: &str| {
        c.call_args(&[b"CONFIG", b"SET", name.as_bytes(), value.as_bytes()])
    };
    assert_eq!(set(&mut c, "save", "900 1  300 10"), "+OK\r\n");
    assert_eq!(
        get(&mut c, "save"),
        format!("*2\r\n{}{}", bulk("save"), bulk("900 1 300 10"))
    );
    assert_eq!(
        set(&mut c, "save", "900"),
        "-ERR CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters\r\n"
    );
    for (name, default, other) in [
        ("appendonly", "no", "no"),
        ("appendfsync", "everysec", "always"),
        ("dbfilename", "dump.lhs", "other.lhs"),
        ("auto-aof-rewrite-percentage", "100", "50"),
        ("auto-aof-rewrite-min-size", "67108864", "1048576"),
        ("aof-load-truncated", "yes", "no"),
        ("load-corrupt-snapshot", "no", "yes"),
        ("stop-writes-on-bgsave-error", "yes", "no"),
    ] {
        assert_eq!(
            get(&mut c, name),
            format!("*2\r\n{}{}", bulk(name), bulk(default))
        );
        assert_eq!(set(&mut c, name, other), "+OK\r\n", "{name}");
        assert_eq!(
            get(&mut c, name),
            format!("*2\r\n{}{}", bulk(name), bulk(other))
        );
    }
    assert!(set(&mut c, "appendfsync", "sometimes").starts_with("-ERR CONFIG SET failed"));
    for name in ["appendfilename", "appenddirname"] {
        assert_eq!(
            set(&mut c, name, "x"),
            format!("-ERR CONFIG SET failed (possibly related to argument '{name}') - can't set immutable config\r\n")
        );
    }
    assert_eq!(
        get(&mut c, "dir"),
        format!("*2\r\n{}{}", bulk("dir"), bulk(&dir.display().to_string()))
    );
}

/// With save rules and `stop-writes-on-bgsave-error yes`, a failed
/// snapshot refuses writes until one succeeds, on a replica too.
#[test]
fn writes_are_refused_while_snapshots_fail() {
    let dir = leasehold_testkit::scratch_dir();
    let mut config = config_in(&dir, 2);
    config.persistence.save = "3600 1".into();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let server = TestServer::with_config(config, clock);
    let mut c = server.raw();
    let gone = dir.join("gone");
    let missing = gone.display().to_string();
    assert_eq!(
        c.call_args(&[b"CONFIG", b"SET", b"dir", missing.as_bytes()]),
        "+OK\r\n"
    );
    assert!(c
        .call("SAVE")
        .starts_with("-ERR Error saving the snapshot: "));
    wait("the refusal", || c.call("SET k v").starts_with("-MISCONF "));
    assert_eq!(persistence(&mut c)["rdb_last_bgsave_status"], "err");
    assert_eq!(c.call("GET k"), "$-1\r\n", "reads still run");
    // As in Redis 7, PING is refused too (Sentinel then sees the node
    // fail), also when queued, which aborts the transaction.
    assert!(c.call("PING").starts_with("-MISCONF "));
    assert_eq!(c.call("MULTI"), "+OK\r\n");
    assert!(c.call("PING").starts_with("-MISCONF "));
    assert!(c.call("EXEC").starts_with("-EXECABORT "));
    // As in Redis 7, MISCONF comes before READONLY on a replica.
    let nobody = leasehold_testkit::free_port();
    assert_eq!(c.call(&format!("REPLICAOF 127.0.0.1 {nobody}")), "+OK\r\n");
    let refused = c.call("SET k v");
    assert!(
        refused.starts_with("-MISCONF "),
        "a replica answered {refused}"
    );
    assert_eq!(c.call("REPLICAOF NO ONE"), "+OK\r\n");
    std::fs::create_dir_all(&gone).unwrap();
    assert_eq!(c.call("SAVE"), "+OK\r\n");
    wait("writes again", || c.call("SET k v") == "+OK\r\n");
    assert_eq!(c.call("PING"), "+PONG\r\n");
    assert_eq!(persistence(&mut c)["rdb_last_bgsave_status"], "ok");
}

/// CONFIG SET appendonly yes starts the log while the server runs (a
/// rewrite writes what is there already); a new server loads it.
#[test]
fn the_log_starts_and_stops_at_run_time() {
    let dir = leasehold_testkit::scratch_dir();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let server = TestServer::with_config(config_in(&dir, 2), clock);
    let mut c = server.raw();
    assert_eq!(c.call("SET before v1"), "+OK\r\n");
    assert_eq!(c.call("CONFIG SET appendonly yes"), "+OK\r\n");
    wait("the log", || persistence(&mut c)["aof_enabled"] == "1");
    assert_eq!(c.call("SET after v2"), "+OK\r\n");
    assert_eq!(c.call("INCRBY n 5"), ":5\r\n");
    assert_eq!(
        c.call("BGREWRITEAOF"),
        "+Background append only file rewriting started\r\n"
    );
    wait("the rewrite", || persistence(&mut c)["aof_rewrites"] == "2");
    assert_eq!(c.call("INCRBY n 5"), ":10\r\n");
    let manifest =
        std::fs::read_to_string(dir.join("appendonlydir/appendonly.aof.manifest")).unwrap();
    assert_eq!(
        manifest,
        "file appendonly.aof.2.base.lhs seq 2 type b\nfile appendonly.aof.2.incr.aof seq 2 type i\n"
    );
    drop(c);
    drop(server);
    let mut config = config_in(&dir, 1);
    config.persistence.appendonly = true;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let server = TestServer::with_config(config, clock);
    let mut c = server.raw();
    assert_eq!(
        c.call("MGET before after n"),
        "*3\r\n$2\r\nv1\r\n$2\r\nv2\r\n$2\r\n10\r\n"
    );
    assert_eq!(persistence(&mut c)["aof_enabled"], "1");
    assert_eq!(c.call("CONFIG SET appendonly no"), "+OK\r\n");
    wait("the log stops", || {
        persistence(&mut c)["aof_enabled"] == "0"
    });
}

/// Run-time pins come back after a restart, from the snapshot (SAVE) and
/// from the log (`appendonly yes`, set and removed after the last rewrite),
/// on another number of threads.
#[test]
fn pins_survive_a_restart_from_the_snapshot_and_from_the_log() {
    for appendonly in [false, true] {
        let dir = leasehold_testkit::scratch_dir();
        let mut config = config_in(&dir, 2);
        config.persistence.appendonly = appendonly;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let server = TestServer::with_config(config.clone(), clock);
        let mut c = server.raw();
        assert_eq!(c.call("LH.PIN rl: TOKENBUCKET 10 1 1000"), "+OK\r\n");
        assert_eq!(c.call("LH.PIN gone: GCRA 0 1 1000"), "+OK\r\n");
        if !appendonly {
            assert_eq!(c.call("SAVE"), "+OK\r\n");
        }
        assert_eq!(c.call("LH.UNPIN gone:"), ":1\r\n");
        assert_eq!(c.call("LH.PIN g: GCRA 15 30 60000"), "+OK\r\n");
        if !appendonly {
            assert_eq!(c.call("SAVE"), "+OK\r\n");
        }
        let before = c.call("LH.PINS");
        drop(c);
        drop(server);
        config.shards.threads = 1;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let server = TestServer::with_config(config, clock);
        let mut c = server.raw();
        assert_eq!(c.call("LH.PINS"), before, "appendonly {appendonly}");
        assert!(before.starts_with("*2\r\n*6\r\n$3\r\nrl:\r\n"), "{before}");
        assert_eq!(
            c.call("TOKENRETURN rl:k 1000000 1 60000 500000"),
            "-ERR rate limit parameters of keys under 'rl:' are pinned to TOKENBUCKET 10 1 1000\r\n"
        );
    }
}

/// A replica with `appendonly yes` logs its primary's dataset: the full
/// sync replaces its keys and restarts its stream, and its log is
/// rewritten from that, so a restart after a promotion has every key.
#[test]
fn a_replicas_log_holds_its_full_sync() {
    use leasehold_tests::replication::{follow, wait_caught_up};
    let primary = TestServer::start(2);
    let mut p = primary.raw();
    for i in 0..300 {
        assert_eq!(p.call(&format!("SET k{i} v{i}")), "+OK\r\n");
    }
    let dir = leasehold_testkit::scratch_dir();
    let mut config = config_in(&dir, 2);
    config.persistence.appendonly = true;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let replica = TestServer::with_config(config.clone(), clock);
    follow(&replica, &primary);
    wait_caught_up(&primary, &replica, Duration::from_secs(10));
    let mut r = replica.raw();
    // Its log is rewritten once the payload is loaded.
    wait("the replica's rewrite", || {
        // Its first log, then one rewrite per full sync (a link that
        // dropped under load syncs, and rewrites, again).
        persistence(&mut r)["aof_rewrites"]
            .parse::<u64>()
            .unwrap_or(0)
            >= 2
    });
    assert_eq!(r.call("REPLICAOF NO ONE"), "+OK\r\n");
    assert_eq!(r.call("SET promoted yes"), "+OK\r\n");
    drop(r);
    drop(replica);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let restarted = TestServer::with_config(config, clock);
    let mut c = restarted.raw();
    assert_eq!(c.call("DBSIZE"), ":301\r\n");
    assert_eq!(c.call("GET k299"), "$4\r\nv299\r\n");
    assert_eq!(c.call("GET promoted"), "$3\r\nyes\r\n");
}
