//! Lists, hashes and sets replayed: a replica's full sync (the values rebuilt
//! from their `Collection::rebuild` records) and its stream (each write's
//! own replaying command), and a restart from a snapshot plus the
//! append-only log, leave every element, field, value and deadline equal to
//! the primary's (the keyspace dumps compare LRANGE for lists, HGETALL's
//! pairs for hashes and SMEMBERS sorted for sets).

use std::sync::Arc;
use std::time::Duration;

use leasehold_server::clock::{Clock, ManualClock, MONO_BASE_MS};
use leasehold_tests::replication::{assert_same, dump, follow, wait_caught_up};
use leasehold_tests::{resp, Raw, TestServer, T0_MS};

const CATCH_UP: Duration = Duration::from_secs(20);

/// Sends every request in one write and checks no reply is an error.
fn pipeline(c: &mut Raw, requests: &[Vec<Vec<u8>>]) {
    let mut wire = Vec::new();
    for r in requests {
        let args: Vec<&[u8]> = r.iter().map(Vec::as_slice).collect();
        wire.extend(resp(&args));
    }
    c.send(&wire);
    for r in requests {
        let reply = c.read_text();
        assert!(
            !reply.starts_with('-'),
            "{:?}: {reply}",
            String::from_utf8_lossy(&r.concat())
        );
    }
}

fn words(line: &str) -> Vec<Vec<u8>> {
    line.split(' ').map(|w| w.as_bytes().to_vec()).collect()
}

/// Lists of every shape under `tag`: small ones, long ones over many nodes
/// (and past one rebuild record of 512), binary elements, one with a TTL.
fn list_mix(tag: &str) -> Vec<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for i in 0..40 {
        out.push(words(&format!("RPUSH {tag}:small{i} a{i} b c")));
    }
    let mut long = words(&format!("RPUSH {tag}:long"));
    long.extend((0..1500).map(|i| format!("{i}:{}", "e".repeat(i % 90)).into_bytes()));
    out.push(long);
    out.push(vec![
        b"LPUSH".to_vec(),
        format!("{tag}:bin").into_bytes(),
        b"a\r\nb".to_vec(),
        Vec::new(),
        vec![0, 255],
    ]);
    out.push(words(&format!("RPUSH {tag}:ttl x y z")));
    out.push(words(&format!("PEXPIRE {tag}:ttl 500000")));
    out
}

/// Changes to [`list_mix`]'s lists: every kind of list write.
fn list_changes(tag: &str) -> Vec<Vec<Vec<u8>>> {
    [
        format!("LPOP {tag}:small0"),
        format!("RPOP {tag}:small1 2"),
        format!("LPOP {tag}:small2 10"),
        format!("LTRIM {tag}:long 10 -10"),
        format!("LSET {tag}:long 700 changed"),
        format!("LINSERT {tag}:long BEFORE changed inserted"),
        format!("LREM {tag}:long 0 5:eeeee"),
        format!("LMOVE {tag}:ttl {tag}:ttl LEFT RIGHT"),
        format!("LMOVE {{{tag}}}a {{{tag}}}b LEFT LEFT"),
        format!("RPUSH {{{tag}}}a 1 2 3"),
        format!("LMOVE {{{tag}}}a {{{tag}}}b RIGHT LEFT"),
        format!("RPOPLPUSH {{{tag}}}a {{{tag}}}b"),
        format!("LPUSHX {tag}:small3 new"),
        format!("RPUSHX {tag}:small4 new"),
        format!("LPUSH {tag}:fresh 1"),
    ]
    .iter()
    .map(|l| words(l))
    .collect()
}

/// Hashes of every shape under `tag`: listpacks, tables by size (past one
/// rebuild record of 512 fields) and by a long value, binary fields, one
/// with a TTL.
fn hash_mix(tag: &str) -> Vec<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for i in 0..40 {
        out.push(words(&format!("HSET {tag}:h{i} name n{i} n {i} f 1.5")));
    }
    let mut big = words(&format!("HSET {tag}:big"));
    for i in 0..1200 {
        big.push(format!("field:{i}").into_bytes());
        big.push(format!("value:{}", "v".repeat(i % 30)).into_bytes());
    }
    out.push(big);
    out.push(vec![
        b"HSET".to_vec(),
        format!("{tag}:hlong").into_bytes(),
        b"f".to_vec(),
        vec![b'x'; 200],
    ]);
    out.push(vec![
        b"HSET".to_vec(),
        format!("{tag}:hbin").into_bytes(),
        b"a\r\nb".to_vec(),
        Vec::new(),
        Vec::new(),
        vec![0, 255],
    ]);
    out.push(words(&format!("HSET {tag}:httl a 1")));
    out.push(words(&format!("PEXPIRE {tag}:httl 400000")));
    out
}

/// Changes to [`hash_mix`]'s hashes: every kind of hash write.
fn hash_changes(tag: &str) -> Vec<Vec<Vec<u8>>> {
    [
        format!("HSET {tag}:h0 name changed extra 1"),
        format!("HMSET {tag}:h1 name m"),
        format!("HSETNX {tag}:h2 new 1"),
        format!("HSETNX {tag}:h2 name ignored"),
        format!("HINCRBY {tag}:h3 n 100"),
        format!("HINCRBYFLOAT {tag}:h4 f 0.1"),
        format!("HINCRBYFLOAT {tag}:h4 g 1e-3"),
        format!("HDEL {tag}:h5 name n f"),
        format!("HDEL {tag}:big field:1 field:2 field:1000"),
        format!("HSET {tag}:big field:3 new-value"),
        format!("HINCRBY {tag}:big counter -5"),
        format!("HSET {tag}:httl b 2"),
        format!("HSET {tag}:hfresh a 1"),
    ]
    .iter()
    .map(|l| words(l))
    .collect()
}

/// Sets of every shape under `tag`: intsets, small sets of strings,
/// tables by size (past one rebuild record of 512 members, past the
/// intset's 512 integers) and by a long member, binary members, one with
/// a TTL.
fn set_mix(tag: &str) -> Vec<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for i in 0..40 {
        out.push(words(&format!("SADD {tag}:s{i} {i} 1 2 m{i}")));
        out.push(words(&format!("SADD {tag}:i{i} {i} -5 100")));
    }
    let mut big = words(&format!("SADD {tag}:sbig"));
    big.extend((0..1200).map(|i| format!("member:{i}:{}", "m".repeat(i % 30)).into_bytes()));
    out.push(big);
    let mut ints = words(&format!("SADD {tag}:ibig"));
    ints.extend((0..600).map(|i| (i * 7).to_string().into_bytes()));
    out.push(ints);
    out.push(vec![
        b"SADD".to_vec(),
        format!("{tag}:slong").into_bytes(),
        vec![b'x'; 200],
    ]);
    out.push(vec![
        b"SADD".to_vec(),
        format!("{tag}:sbin").into_bytes(),
        b"a\r\nb".to_vec(),
        Vec::new(),
        vec![0, 255],
    ]);
    out.push(words(&format!("SADD {tag}:sttl a 1")));
    out.push(words(&format!("PEXPIRE {tag}:sttl 300000")));
    out.push(words(&format!("SADD {{{tag}}}x 1 2 3 4 a")));
    out.push(words(&format!("SADD {{{tag}}}y 3 4 5 b")));
    out
}

/// Changes to [`set_mix`]'s sets: every kind of set write.
fn set_changes(tag: &str) -> Vec<Vec<Vec<u8>>> {
    [
        format!("SADD {tag}:s0 new 1"),
        format!("SADD {tag}:i0 x"),
        format!("SREM {tag}:s1 1 2 m1 1"),
        format!("SREM {tag}:i2 2 -5 100"),
        format!("SREM {tag}:sbig member:1:m member:2:mm nope"),
        format!("SPOP {tag}:s3"),
        format!("SPOP {tag}:s4 2"),
        format!("SPOP {tag}:s5 10"),
        format!("SPOP {tag}:sbig 100"),
        format!("SPOP {tag}:ibig 3"),
        format!("SADD {tag}:sttl b"),
        format!("SMOVE {{{tag}}}x {{{tag}}}y 1"),
        format!("SMOVE {{{tag}}}x {{{tag}}}z a"),
        format!("SINTERSTORE {{{tag}}}inter {{{tag}}}x {{{tag}}}y"),
        format!("SUNIONSTORE {{{tag}}}union {{{tag}}}x {{{tag}}}y"),
        format!("SDIFFSTORE {{{tag}}}y {{{tag}}}y {{{tag}}}x"),
        format!("SDIFFSTORE {{{tag}}}gone {{{tag}}}x {{{tag}}}x"),
        format!("SADD {tag}:sfresh a"),
    ]
    .iter()
    .map(|l| words(l))
    .collect()
}

/// Sorted sets: listpacks, one past the thresholds (a skiplist), one with a
/// long member, odd scores, one with a deadline.
fn zset_mix(tag: &str) -> Vec<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for i in 0..20 {
        out.push(words(&format!(
            "ZADD {tag}:z{i} 1 a 2 b {i}.25 c -inf lo +inf hi"
        )));
    }
    let mut big = words(&format!("ZADD {tag}:zbig"));
    for i in 0..700 {
        big.extend([
            format!("{}", (i * 31) % 500).into_bytes(),
            format!("m:{i}").into_bytes(),
        ]);
    }
    out.push(big);
    out.push(words(&format!("ZADD {tag}:zlong 0.1 {}", "x".repeat(100))));
    out.push(words(&format!("ZADD {tag}:zttl 1 a")));
    out.push(words(&format!("PEXPIRE {tag}:zttl 100000")));
    out
}

fn zset_changes(tag: &str) -> Vec<Vec<Vec<u8>>> {
    [
        format!("ZADD {tag}:z0 CH 5 a 0.30000000000000004 new"),
        format!("ZINCRBY {tag}:z1 0.1 a"),
        format!("ZADD {tag}:z2 INCR 1e-3 b"),
        format!("ZREM {tag}:z3 a b nosuch"),
        format!("ZPOPMIN {tag}:z4 2"),
        format!("ZPOPMAX {tag}:z5"),
        format!("ZREMRANGEBYSCORE {tag}:z6 (1 +inf"),
        format!("ZREMRANGEBYRANK {tag}:z7 0 -1"),
        format!("ZREMRANGEBYLEX {tag}:z8 - +"),
        format!("ZREMRANGEBYSCORE {tag}:zbig 100 (200"),
        format!("ZREMRANGEBYRANK {tag}:zbig 0 9"),
        format!("ZPOPMAX {tag}:zbig 3"),
        format!("ZADD {tag}:zbig GT 1000 m:5 1 m:6"),
        format!("ZADD {tag}:zttl 2 b"),
        format!("ZADD {tag}:zfresh 1 a"),
    ]
    .iter()
    .map(|l| words(l))
    .collect()
}

fn all_writes(tag: &str) -> Vec<Vec<Vec<u8>>> {
    [list_mix(tag), hash_mix(tag), set_mix(tag), zset_mix(tag)].concat()
}

fn all_changes(tag: &str) -> Vec<Vec<Vec<u8>>> {
    [
        list_changes(tag),
        hash_changes(tag),
        set_changes(tag),
        zset_changes(tag),
    ]
    .concat()
}

fn replica_matches_its_primary(primary_threads: usize, replica_threads: usize) {
    let clock = Arc::new(ManualClock::new(T0_MS, 0));
    let primary = TestServer::with_clock(primary_threads, clock.clone());
    let replica = TestServer::with_clock(replica_threads, clock.clone());
    let mut p = primary.raw();
    pipeline(&mut p, &all_writes("a"));
    follow(&replica, &primary);
    wait_caught_up(&primary, &replica, CATCH_UP);
    let mut r = replica.raw();
    let before = dump(&mut p);
    assert!(before.len() > 40, "{} keys", before.len());
    assert_same(&dump(&mut r), &before, "after the full sync");
    // The stream: new collections and changes to the synced ones.
    pipeline(&mut p, &all_writes("b"));
    pipeline(&mut p, &all_changes("a"));
    pipeline(&mut p, &all_changes("b"));
    wait_caught_up(&primary, &replica, CATCH_UP);
    let after = dump(&mut p);
    assert_same(&dump(&mut r), &after, "after the stream");
    assert_eq!(
        r.call("EXISTS a:small2"),
        ":0\r\n",
        "emptied lists are gone"
    );
    assert_eq!(r.call("LINDEX a:long 700"), "$8\r\ninserted\r\n");
    assert_eq!(
        r.call("PEXPIRETIME a:ttl"),
        format!(":{}\r\n", T0_MS + 500_000)
    );
    assert_eq!(r.call("LRANGE {a}b 0 -1"), "*2\r\n$1\r\n2\r\n$1\r\n3\r\n");
    assert_eq!(r.call("EXISTS a:h5"), ":0\r\n", "emptied hashes are gone");
    assert_eq!(r.call("HGET a:h4 f"), "$3\r\n1.6\r\n");
    assert_eq!(r.call("HLEN a:big"), ":1198\r\n");
    assert_eq!(
        r.call("PEXPIRETIME a:httl"),
        format!(":{}\r\n", T0_MS + 400_000)
    );
    // A listpack's order survives the sync.
    assert_eq!(r.call("HKEYS a:h0"), p.call("HKEYS a:h0"));
    assert_eq!(r.call("EXISTS a:s5"), ":0\r\n", "emptied sets are gone");
    assert_eq!(r.call("SCARD a:sbig"), ":1098\r\n");
    assert_eq!(r.call("SMEMBERS {a}inter"), "*2\r\n$1\r\n3\r\n$1\r\n4\r\n");
    assert_eq!(
        r.call("PEXPIRETIME a:sttl"),
        format!(":{}\r\n", T0_MS + 300_000)
    );
    for key in ["a:s0", "a:i1", "a:ibig", "{a}y"] {
        let encoding = format!("OBJECT ENCODING {key}");
        assert_eq!(r.call(&encoding), p.call(&encoding), "{key}");
    }
}

#[test]
fn a_replica_matches_its_primary_2_to_1_threads() {
    replica_matches_its_primary(2, 1);
}

#[test]
fn a_replica_matches_its_primary_1_to_2_threads() {
    replica_matches_its_primary(1, 2);
}

/// A restart loads the snapshot, then the log written after it.
#[test]
fn a_restart_from_the_snapshot_and_the_log_has_every_element() {
    let dir = leasehold_testkit::scratch_dir();
    let mut config = TestServer::config(2);
    config.persistence.dir = dir.display().to_string();
    config.persistence.appendonly = true;
    let clock = Arc::new(ManualClock::new(T0_MS, MONO_BASE_MS));
    let server = TestServer::with_config(config.clone(), clock.clone());
    let mut c = server.raw();
    pipeline(&mut c, &all_writes("a"));
    assert_eq!(
        c.call("BGREWRITEAOF"),
        "+Background append only file rewriting started\r\n"
    );
    pipeline(&mut c, &all_writes("b"));
    assert_eq!(c.call("SAVE"), "+OK\r\n");
    let saved = dump(&mut c);
    pipeline(&mut c, &all_changes("a"));
    pipeline(&mut c, &all_changes("b"));
    let want = dump(&mut c);
    drop(c);
    drop(server);
    for appendonly in [true, false] {
        // With the log: the log's base and increments; without: the snapshot.
        let mut config = config.clone();
        config.persistence.appendonly = appendonly;
        let clock: Arc<dyn Clock> = clock.clone();
        let server = TestServer::with_config(config, clock);
        let mut c = server.raw();
        let got = dump(&mut c);
        if appendonly {
            assert_same(&got, &want, "after a restart from the log");
        } else {
            assert_same(&got, &saved, "after a restart from the snapshot");
            assert_eq!(c.call("LLEN a:long"), ":1500\r\n");
        }
        drop(c);
        drop(server);
    }
}
