//! Persistence with real processes on loopback: `leasehold-server` killed
//! with SIGKILL under a write load and restarted on the same files, and
//! files damaged on disk (a torn log tail, flipped bits, a truncated
//! snapshot) meeting a restart; and an idle primary with a log and two
//! replicas spending no CPU (the stream's copiers wait, never spin).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_testkit::{
    call, free_port, node_command, scratch_dir, text, wait_for, Conn, Proc, Reply,
};

/// A node on `port` with its files in `dir`, plus `extra` flags.
fn command(dir: &Path, port: u16, extra: &[&str]) -> Command {
    let mut cmd = node_command(env!("CARGO_BIN_EXE_leasehold-server"), port, dir);
    cmd.args(extra);
    cmd
}

/// Starts a node and waits until it has loaded its files (DBSIZE answers
/// a count, not -LOADING).
fn node(dir: &Path, port: u16, extra: &[&str]) -> Proc {
    let p = Proc(
        command(dir, port, extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start leasehold-server"),
    );
    wait_for("the node has loaded", Duration::from_secs(20), || {
        matches!(call(port, &["DBSIZE"]), Some(Reply::Int(_)))
    });
    p
}

/// Runs a node that must refuse to start; returns its exit status and log.
fn refused(dir: &Path, extra: &[&str]) -> (bool, String) {
    let port = free_port();
    let out = command(dir, port, extra)
        .output()
        .expect("run leasehold-server");
    let log =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), log)
}

/// Waits (at most 10 s) for a node told to SHUTDOWN to exit by itself, so
/// its log is written to the end; true when it exited cleanly.
fn exited(mut p: Proc) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(status)) = p.0.try_wait() {
            return status.success();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

fn kill9(mut p: Proc) {
    let _ = p.0.kill();
    let _ = p.0.wait();
}

fn int(r: &Reply) -> i64 {
    match r {
        Reply::Int(n) => *n,
        other => text(other)
            .parse()
            .unwrap_or_else(|_| panic!("not an integer: {other:?}")),
    }
}

/// RLSTATE's `tokens` of a token bucket (0 when the key is gone: a full
/// bucket is a missing key, so the caller passes the capacity).
fn tokens(port: u16, key: &str, capacity: i64) -> i64 {
    match call(port, &["RLSTATE", key]).expect("RLSTATE") {
        Reply::Array(items) => {
            let i = items
                .iter()
                .position(|r| text(r) == "tokens")
                .expect("tokens field");
            int(&items[i + 1])
        }
        Reply::Nil => capacity,
        other => panic!("RLSTATE: {other:?}"),
    }
}

/// What a write load saw acknowledged.
struct Acked {
    /// Highest `i` whose `SET s:<i> <i>` was acknowledged, per writer.
    sets: Vec<u64>,
    /// Acknowledged INCRs of `counter`, and those sent.
    incrs: u64,
    incrs_sent: u64,
    /// Acknowledged grants per bucket, and leases sent per bucket.
    grants: Vec<u64>,
    leases_sent: Vec<u64>,
    /// Writes acknowledged per second over the load.
    rate: f64,
}

const BUCKETS: usize = 4;
const CAPACITY: i64 = 1_000_000;

/// Writes from three connections until `stop`: SETs with increasing
/// values (two writers), INCRs of one counter and TOKENLEASEs of a few
/// buckets (one writer), recording what was acknowledged. Ends when the
/// node dies.
fn load(port: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Acked> {
    std::thread::spawn(move || {
        let started = Instant::now();
        let total = Arc::new(AtomicU64::new(0));
        let setters: Vec<_> = (0..2)
            .map(|w| {
                let (stop, total) = (stop.clone(), total.clone());
                std::thread::spawn(move || {
                    let mut c = Conn::open(port).expect("connect");
                    let mut last = 0;
                    for i in 1.. {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let (k, v) = (format!("s{w}:{i}"), i.to_string());
                        match c.call(&["SET", &k, &v]) {
                            Some(r) if text(&r) == "OK" => last = i,
                            _ => break,
                        }
                        total.fetch_add(1, Ordering::Relaxed);
                    }
                    last
                })
            })
            .collect();
        let mut c = Conn::open(port).expect("connect");
        let (mut incrs, mut incrs_sent) = (0, 0);
        let mut grants = vec![0; BUCKETS];
        let mut leases_sent = vec![0; BUCKETS];
        'outer: for i in 0.. {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            incrs_sent += 1;
            match c.call(&["INCR", "counter"]) {
                Some(Reply::Int(_)) => incrs += 1,
                _ => break,
            }
            let b = i % BUCKETS;
            leases_sent[b] += 1;
            let key = format!("bucket:{b}");
            match c.call(&[
                "TOKENLEASE",
                &key,
                &CAPACITY.to_string(),
                "1",
                "3600000",
                "1",
            ]) {
                Some(Reply::Array(r)) => grants[b] += int(&r[0]) as u64,
                _ => break 'outer,
            }
            total.fetch_add(2, Ordering::Relaxed);
        }
        let sets = setters.into_iter().map(|t| t.join().unwrap()).collect();
        let rate = total.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
        Acked {
            sets,
            incrs,
            incrs_sent,
            grants,
            leases_sent,
            rate,
        }
    })
}

/// Loads for `ms`, kills the node with SIGKILL while the load runs, and
/// restarts it on the same files.
fn kill_under_load(fsync: &str, ms: u64) -> (PathBuf, u16, Proc, Acked) {
    let dir = scratch_dir();
    let port = free_port();
    let flags = ["--appendonly", "yes", "--appendfsync", fsync];
    let n = node(&dir, port, &flags);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = load(port, stop.clone());
    std::thread::sleep(Duration::from_millis(ms));
    kill9(n);
    stop.store(true, Ordering::SeqCst);
    let acked = writer.join().unwrap();
    let n = node(&dir, port, &flags);
    (dir, port, n, acked)
}

#[test]
fn kill_9_with_appendfsync_always_keeps_every_acknowledged_write() {
    let (_dir, port, _n, acked) = kill_under_load("always", 1500);
    assert!(
        acked.sets.iter().all(|&n| n > 50),
        "too little load: {:?}",
        acked.sets
    );
    for (w, &last) in acked.sets.iter().enumerate() {
        for i in (1..=last).step_by(7).chain([last]) {
            let v = call(port, &["GET", &format!("s{w}:{i}")]).unwrap();
            assert_eq!(text(&v), i.to_string(), "acknowledged SET s{w}:{i} lost");
        }
    }
    let counter = int(&call(port, &["GET", "counter"]).unwrap()) as u64;
    assert!(
        (acked.incrs..=acked.incrs_sent).contains(&counter),
        "counter {counter}: {} INCRs acknowledged, {} sent",
        acked.incrs,
        acked.incrs_sent
    );
    for b in 0..BUCKETS {
        let left = tokens(port, &format!("bucket:{b}"), CAPACITY);
        // Each lease takes 1 token; at most the one in flight at the kill
        // may have reached the disk unacknowledged. A rate of 1 per hour
        // refills no whole token within the test.
        let granted = acked.grants[b] as i64;
        let in_flight = (acked.leases_sent[b] as i64 - granted).clamp(0, 1);
        assert!(
            (CAPACITY - granted - in_flight..=CAPACITY - granted).contains(&left),
            "bucket:{b} has {left} tokens; {granted} acknowledged grants imply {}",
            CAPACITY - granted
        );
    }
    eprintln!(
        "appendfsync always: {:.0} acknowledged writes/s, none lost ({} SETs, {} INCRs checked)",
        acked.rate,
        acked.sets.iter().sum::<u64>(),
        acked.incrs
    );
}

#[test]
fn kill_9_with_appendfsync_everysec_loses_at_most_about_a_second() {
    let (_dir, port, _n, acked) = kill_under_load("everysec", 2500);
    let mut lost = 0u64;
    for (w, &last) in acked.sets.iter().enumerate() {
        // The SETs of one writer reach the log in order: the first missing
        // one starts what was lost.
        let (mut lo, mut hi) = (0u64, last);
        let present = |i: u64| {
            i == 0
                || call(port, &["GET", &format!("s{w}:{i}")])
                    .is_some_and(|v| text(&v) == i.to_string())
        };
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if present(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lost += last - lo;
    }
    let lost_ms = lost as f64 / (acked.rate * 2.0 / 5.0) * 1000.0;
    eprintln!(
        "appendfsync everysec: {lost} acknowledged SETs lost of {} ({lost_ms:.0} ms of the SET writers' load at {:.0} writes/s)",
        acked.sets.iter().sum::<u64>(),
        acked.rate
    );
    assert!(lost_ms < 2500.0, "{lost_ms:.0} ms of writes lost");
}

/// A node's append-only directory's files.
fn aof_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("appendonlydir"))
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn incr_file(dir: &Path) -> PathBuf {
    aof_files(dir)
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .expect("an increment file")
}

#[test]
fn a_torn_log_tail_is_dropped_and_a_flipped_bit_refuses_the_start() {
    let dir = scratch_dir();
    let port = free_port();
    let flags = ["--appendonly", "yes"];
    let n = node(&dir, port, &flags);
    for i in 0..20 {
        assert_eq!(
            text(&call(port, &["SET", &format!("k{i}"), &format!("v{i}")]).unwrap()),
            "OK"
        );
    }
    assert_eq!(call(port, &["SHUTDOWN", "NOSAVE"]), None);
    assert!(exited(n), "SHUTDOWN NOSAVE exits cleanly");
    let incr = incr_file(&dir);
    let whole = std::fs::read(&incr).unwrap();
    assert!(whole.len() > 100, "the increment holds the writes");
    // Power loss in the middle of a write: half a record at the end.
    let mut torn = whole.clone();
    torn.extend_from_slice(b"*3\r\n$3\r\nSET\r\n$1\r\nz\r\n$2\r\nv");
    std::fs::write(&incr, &torn).unwrap();
    let (ok, log) = refused(&dir, &["--appendonly", "yes", "--aof-load-truncated", "no"]);
    assert!(
        !ok && log.contains("torn write"),
        "a torn tail with aof-load-truncated no: {log}"
    );
    let n = node(&dir, port, &flags);
    assert_eq!(text(&call(port, &["GET", "k19"]).unwrap()), "v19");
    assert_eq!(call(port, &["EXISTS", "z"]).map(|r| int(&r)), Some(0));
    assert_eq!(call(port, &["DBSIZE"]).map(|r| int(&r)), Some(20));
    kill9(n);
    assert_eq!(
        std::fs::read(&incr).unwrap(),
        whole,
        "the torn tail is cut off the file"
    );
    // One byte of a value changed inside a checksummed segment: refused.
    let mut flipped = whole.clone();
    let at = flipped
        .windows(3)
        .position(|w| w == b"v10")
        .expect("a value")
        + 1;
    flipped[at] = b'9';
    std::fs::write(&incr, &flipped).unwrap();
    let (ok, log) = refused(&dir, &flags);
    assert!(!ok && log.contains("corrupt"), "a flipped value: {log}");
}

#[test]
fn a_truncated_or_flipped_snapshot_is_refused_unless_told() {
    let dir = scratch_dir();
    let port = free_port();
    let n = node(&dir, port, &[]);
    for i in 0..50 {
        call(port, &["SET", &format!("k{i}"), &format!("value-{i}")]).unwrap();
    }
    assert_eq!(text(&call(port, &["SAVE"]).unwrap()), "OK");
    kill9(n);
    let path = dir.join("dump.lhs");
    let whole = std::fs::read(&path).unwrap();
    std::fs::write(&path, &whole[..whole.len() - 20]).unwrap();
    let (ok, log) = refused(&dir, &[]);
    assert!(
        !ok && log.contains("truncated"),
        "a truncated snapshot: {log}"
    );
    let mut flipped = whole.clone();
    let at = flipped.windows(8).position(|w| w == b"value-33").unwrap() + 6;
    flipped[at] ^= 0x01;
    std::fs::write(&path, &flipped).unwrap();
    let (ok, log) = refused(&dir, &[]);
    assert!(!ok && log.contains("checksum"), "a flipped bit: {log}");
    // Told to, the server starts on what decodes, flip included.
    let _n = node(&dir, port, &["--load-corrupt-snapshot", "yes"]);
    assert_eq!(call(port, &["DBSIZE"]).map(|r| int(&r)), Some(50));
    assert_eq!(text(&call(port, &["GET", "k33"]).unwrap()), "value-23");
    std::fs::write(&path, &whole).unwrap();
}

#[test]
fn a_restart_between_two_tokenleases_grants_what_time_refilled() {
    let dir = scratch_dir();
    let port = free_port();
    let n = node(&dir, port, &[]);
    // 1 token per 100 ms, capacity 1000: the first lease empties it.
    let lease = |port| {
        let r = call(
            port,
            &["TOKENLEASE", "b", "1000", "1", "100", "1000", "MIN", "1"],
        )
        .unwrap();
        let Reply::Array(r) = r else { panic!("{r:?}") };
        int(&r[0])
    };
    let before_first = Instant::now();
    assert_eq!(lease(port), 1000);
    let after_first = Instant::now();
    assert_eq!(text(&call(port, &["SAVE"]).unwrap()), "OK");
    assert_eq!(call(port, &["SHUTDOWN", "NOSAVE"]), None);
    assert!(exited(n), "SHUTDOWN NOSAVE exits cleanly");
    let _n = node(&dir, port, &[]);
    let before_second = Instant::now();
    let granted = lease(port);
    let after_second = Instant::now();
    // What an uninterrupted server grants: the tokens refilled between the
    // two calls, known to within the calls' own durations.
    let lo = (before_second - after_first).as_millis() as i64 / 100;
    let hi = (after_second - before_first).as_millis() as i64 / 100;
    assert!(
        (lo..=hi).contains(&granted),
        "granted {granted} after the restart, an uninterrupted server grants {lo}..={hi}"
    );
}

/// Every kind of effect a log holds loads back: deletes (DEL, UNLINK,
/// GETDEL, an EXPIRE into the past) and values larger than the log
/// writer's copies, whose segments must still end on whole records.
#[test]
fn deletes_and_large_values_come_back_from_the_log() {
    let dir = scratch_dir();
    let port = free_port();
    let flags = ["--appendonly", "yes", "--appendfsync", "always"];
    let n = node(&dir, port, &flags);
    let mut c = Conn::open(port).expect("connect");
    for i in 0..20 {
        assert_eq!(
            text(&c.call(&["SET", &format!("k{i}"), "v"]).unwrap()),
            "OK"
        );
    }
    assert_eq!(
        c.call(&["DEL", "k0", "k1", "k2", "k3"]),
        Some(Reply::Int(4))
    );
    assert_eq!(c.call(&["UNLINK", "k4", "k5"]), Some(Reply::Int(2)));
    assert_eq!(text(&c.call(&["GETDEL", "k6"]).unwrap()), "v");
    assert_eq!(c.call(&["EXPIRE", "k7", "0"]), Some(Reply::Int(1)));
    // 300 KB and 3 MB values, and many pipelined writes around them.
    let big: String = (0..300_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let huge = big.repeat(10);
    assert_eq!(text(&c.call(&["SET", "big", &big]).unwrap()), "OK");
    assert_eq!(text(&c.call(&["SET", "huge", &huge]).unwrap()), "OK");
    for i in 0..200 {
        assert_eq!(
            text(
                &c.call(&["SET", &format!("after{i}"), &big[..1000]])
                    .unwrap()
            ),
            "OK"
        );
    }
    kill9(n);
    let _n = node(&dir, port, &flags);
    assert_eq!(call(port, &["DBSIZE"]).map(|r| int(&r)), Some(12 + 2 + 200));
    for gone in ["k0", "k3", "k4", "k6", "k7"] {
        assert_eq!(
            call(port, &["EXISTS", gone]).map(|r| int(&r)),
            Some(0),
            "{gone}"
        );
    }
    assert_eq!(text(&call(port, &["GET", "big"]).unwrap()), big);
    assert_eq!(
        call(port, &["STRLEN", "huge"]).map(|r| int(&r)),
        Some(3_000_000)
    );
    assert_eq!(
        text(&call(port, &["GET", "after199"]).unwrap()),
        &big[..1000]
    );
}

/// `dbfilename` is a file name, never a path.
#[test]
fn dbfilename_is_a_name_and_a_log_without_its_manifest_is_refused() {
    let dir = scratch_dir();
    let port = free_port();
    let n = node(&dir, port, &["--appendonly", "yes"]);
    for bad in ["../escaped.lhs", "sub/x.lhs", "", ".."] {
        let r = text(&call(port, &["CONFIG", "SET", "dbfilename", bad]).unwrap());
        assert_eq!(
            r,
            "ERR CONFIG SET failed (possibly related to argument 'dbfilename') - can't be a path, just a filename",
            "{bad:?}"
        );
    }
    call(port, &["SET", "k", "v"]).unwrap();
    assert_eq!(call(port, &["SHUTDOWN", "NOSAVE"]), None);
    assert!(exited(n));
    std::fs::remove_file(dir.join("appendonlydir/appendonly.aof.manifest")).unwrap();
    let (ok, log) = refused(&dir, &["--appendonly", "yes"]);
    assert!(
        !ok && log.contains("no manifest"),
        "a log without its manifest: {log}"
    );
    std::fs::write(dir.join("appendonlydir/appendonly.aof.manifest"), "").unwrap();
    let (ok, log) = refused(&dir, &["--appendonly", "yes"]);
    assert!(
        !ok && log.contains("lists no files"),
        "an empty manifest: {log}"
    );
}

/// Pipelined 200 KB writes from several connections outrun a 1 MB backlog
/// many times over, while BGREWRITEAOF cuts the shards: the log keeps
/// every acknowledged one (the backlog grows for its copier, a held
/// shard's ring grows for the cut, replies wait for the disk under
/// `always`), and a kill -9 right after the last acknowledgement loses none.
#[test]
fn pipelined_large_writes_during_rewrites_keep_every_acknowledged_one() {
    let dir = scratch_dir();
    let port = free_port();
    let flags = ["--appendonly", "yes", "--appendfsync", "always"];
    let n = node(&dir, port, &flags);
    let value: String = (0..200_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let value = value.clone();
            std::thread::spawn(move || {
                let mut c = Conn::open(port).expect("connect");
                let mut acked = Vec::new();
                for round in 0..6 {
                    let keys: Vec<String> = (0..8).map(|i| format!("w{w}:{round}:{i}")).collect();
                    let reqs: Vec<[&str; 3]> = keys.iter().map(|k| ["SET", k, &value]).collect();
                    let reqs: Vec<&[&str]> = reqs.iter().map(|r| &r[..]).collect();
                    let Some(replies) = c.pipeline(&reqs) else {
                        break;
                    };
                    for (k, r) in keys.into_iter().zip(replies) {
                        assert_eq!(text(&r), "OK");
                        acked.push(k);
                    }
                }
                acked
            })
        })
        .collect();
    for _ in 0..3 {
        call(port, &["BGREWRITEAOF"]);
        std::thread::sleep(Duration::from_millis(30));
    }
    let acked: Vec<String> = writers
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    kill9(n);
    assert_eq!(acked.len(), 4 * 6 * 8);
    let _n = node(&dir, port, &flags);
    for k in &acked {
        assert_eq!(
            call(port, &["STRLEN", k]).map(|r| int(&r)),
            Some(200_000),
            "{k}"
        );
    }
}

/// A file segment as the log's writer makes it: the records, then their
/// `LH.CRC` checksum record.
fn segment(records: &[&[&str]]) -> Vec<u8> {
    use leasehold_server::persist::format::{crc32, segment_crc};
    let mut out = bytes::BytesMut::new();
    for r in records {
        leasehold_protocol::encode_request(r, &mut out);
    }
    let mut seg = out.to_vec();
    seg.extend_from_slice(&segment_crc(crc32(&seg)));
    seg
}

#[test]
fn a_transaction_over_two_shards_is_logged_whole_and_a_log_cut_inside_one_drops_it() {
    let dir = scratch_dir();
    let port = free_port();
    let flags = ["--appendonly", "yes"];
    let n = node(&dir, port, &flags);
    let mut c = Conn::open(port).expect("connect");
    let tx: &[&[&str]] = &[
        &["MULTI"],
        &["SET", "{t}a", "1"],
        &["SET", "b", "1"],
        &["EXEC"],
    ];
    let replies = c.pipeline(tx).expect("the transaction's replies");
    assert_eq!(text(&replies[3]), r#"Array([Simple("OK"), Simple("OK")])"#);
    assert_eq!(call(port, &["SHUTDOWN", "NOSAVE"]), None);
    assert!(exited(n), "SHUTDOWN NOSAVE exits cleanly");
    let incr = incr_file(&dir);
    let whole = std::fs::read(&incr).unwrap();
    let body = String::from_utf8_lossy(&whole);
    let (m, e) = (
        body.find("MULTI").expect("framed"),
        body.find("EXEC").expect("framed"),
    );
    let (a, b) = (body.find("{t}a").unwrap(), body.find("\r\nb\r\n").unwrap());
    assert!(
        m < a && m < b && a < e && b < e,
        "the frame holds both writes: {body:?}"
    );

    // The server stopped between two segments of a transaction's frame:
    // a whole segment with a write and the frame's start, no EXEC.
    let mut cut = whole.clone();
    cut.extend(segment(&[
        &["SET", "y", "1"],
        &["MULTI"],
        &["SET", "{t}a", "2"],
    ]));
    std::fs::write(&incr, &cut).unwrap();
    let (ok, log) = refused(&dir, &["--appendonly", "yes", "--aof-load-truncated", "no"]);
    assert!(
        !ok && log.contains("ends inside a transaction"),
        "a log cut inside a transaction with aof-load-truncated no: {log}"
    );
    let n = node(&dir, port, &flags);
    let get = |k: &str| call(port, &["GET", k]).map(|r| text(&r));
    assert_eq!(get("y").as_deref(), Some("1"), "the write before the frame");
    assert_eq!(
        get("{t}a").as_deref(),
        Some("1"),
        "nothing of the open frame"
    );
    assert_eq!(get("b").as_deref(), Some("1"));
    // The file ends before the MULTI, its last segment checksummed again,
    // and the writer goes on after it.
    let mut want = whole.clone();
    want.extend(segment(&[&["SET", "y", "1"]]));
    assert_eq!(
        std::fs::read(&incr).unwrap(),
        want,
        "cut at the MULTI and sealed"
    );
    assert_eq!(text(&call(port, &["SET", "z", "1"]).unwrap()), "OK");
    assert_eq!(call(port, &["SHUTDOWN", "NOSAVE"]), None);
    assert!(exited(n));
    let n = node(
        &dir,
        port,
        &["--appendonly", "yes", "--aof-load-truncated", "no"],
    );
    assert_eq!(get("z").as_deref(), Some("1"));
    assert_eq!(get("y").as_deref(), Some("1"));
    assert_eq!(call(port, &["DBSIZE"]).map(|r| int(&r)), Some(4));
    kill9(n);
}

/// CPU time process `pid` has used so far, in clock ticks (utime + stime
/// of /proc/PID/stat; 100 a second on Linux).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat");
    // The fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').expect("a command name") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// The stream's copiers (each replica's sender, the append-only log's)
/// linger after a copy and wait for the stream otherwise: once writes stop,
/// a primary with a log and two replicas, and its replicas, spend next to
/// no CPU (a copier woken in a loop would burn a core: 200 ticks in 2 s).
#[test]
fn an_idle_primary_with_a_log_and_two_replicas_spends_no_cpu() {
    let dir = scratch_dir();
    let port = free_port();
    let primary = node(&dir, port, &["--appendonly", "yes"]);
    let replicas: Vec<(u16, Proc)> = (0..2)
        .map(|i| {
            let rport = free_port();
            let rdir = dir.join(format!("replica{i}"));
            std::fs::create_dir_all(&rdir).unwrap();
            let of = format!("127.0.0.1 {port}");
            (rport, node(&rdir, rport, &["--replicaof", &of]))
        })
        .collect();
    let mut c = Conn::open(port).expect("connect");
    let keys: Vec<String> = (0..2000).map(|i| format!("k{i}")).collect();
    let sets: Vec<[&str; 3]> = keys.iter().map(|k| ["SET", k.as_str(), "v"]).collect();
    for batch in sets.chunks(200) {
        let reqs: Vec<&[&str]> = batch.iter().map(|r| &r[..]).collect();
        let replies = c.pipeline(&reqs).expect("the writes are answered");
        assert!(replies.iter().all(|r| text(r) == "OK"), "{replies:?}");
    }
    for (rport, _) in &replicas {
        wait_for("the replica has every key", Duration::from_secs(30), || {
            matches!(call(*rport, &["DBSIZE"]), Some(Reply::Int(2000)))
        });
    }
    // Whatever the last writes woke has settled.
    std::thread::sleep(Duration::from_millis(300));
    let pids: Vec<u32> = std::iter::once(&primary)
        .chain(replicas.iter().map(|(_, p)| p))
        .map(|p| p.0.id())
        .collect();
    let before: Vec<u64> = pids.iter().map(|&p| cpu_ticks(p)).collect();
    std::thread::sleep(Duration::from_secs(2));
    for (i, (&pid, b)) in pids.iter().zip(before).enumerate() {
        let spent = cpu_ticks(pid) - b;
        assert!(
            spent <= 20,
            "node {i} (0: the primary) spent {spent} ticks idle in 2 s"
        );
    }
}
