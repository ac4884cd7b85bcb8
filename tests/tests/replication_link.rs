//! A replica's link against a scripted primary on loopback: the replica
//! sends its primary nothing but the handshake and `REPLCONF ACK`s (the
//! records' replies, for keys on either of its shards, are dropped), and a
//! payload that is not a Leasehold snapshot (a Redis primary's RDB) changes
//! nothing: the replica keeps its keys and serves them.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use leasehold_protocol::{decode_request, encode_request, Limits};
use leasehold_tests::replication::field;
use leasehold_tests::{keys_in_both_halves, TestServer};

const ID: &str = "0123456789abcdef0123456789abcdef01234567";
const MARK: &str = "fedcba9876543210fedcba9876543210fedcba98";

/// The replica's next request, read from `s` (buffered in `buf`).
fn request(s: &mut TcpStream, buf: &mut BytesMut) -> Option<Vec<String>> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Ok(Some(items)) = decode_request(buf, &Limits::default()) {
            return Some(
                items
                    .iter()
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .collect(),
            );
        }
        match s.read(&mut chunk) {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    }
}

/// Accepts the replica and answers its handshake up to PSYNC, which it
/// returns with the connection.
fn handshake(listener: &TcpListener) -> (TcpStream, BytesMut, Vec<String>) {
    let (mut s, _) = listener.accept().expect("the replica connects");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = BytesMut::new();
    loop {
        let req = request(&mut s, &mut buf).expect("a handshake step");
        match req[0].to_ascii_uppercase().as_str() {
            "PING" => s.write_all(b"+PONG\r\n").unwrap(),
            "REPLCONF" => s.write_all(b"+OK\r\n").unwrap(),
            "PSYNC" => return (s, buf, req),
            other => panic!("unexpected handshake step {other}"),
        }
    }
}

/// A replica of `threads` threads told to follow the scripted primary
/// listening on the returned listener (its handshake is still to come).
fn scripted_replica(threads: usize) -> (TcpListener, TestServer, leasehold_tests::Raw) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let replica = TestServer::start(threads);
    let mut r = replica.raw();
    assert_eq!(r.call(&format!("REPLICAOF 127.0.0.1 {port}")), "+OK\r\n");
    (listener, replica, r)
}

/// Waits (at most 5 s) until `cmd` on `r` answers `want`.
fn wait_reply(r: &mut leasehold_tests::Raw, cmd: &str, want: &str) {
    let start = Instant::now();
    loop {
        let got = r.call(cmd);
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{cmd} answered {got}, not {want}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn records(cmds: &[&[&str]]) -> Vec<u8> {
    let mut out = BytesMut::new();
    for c in cmds {
        encode_request(c, &mut out);
    }
    out.to_vec()
}

/// How a scripted payload's `LH.SNAPEND` ends.
#[derive(Clone, Copy)]
enum End {
    /// With the CRC-32 of the payload's bytes before it, as a primary sends.
    Crc,
    /// With a CRC-32 one bit off.
    WrongCrc,
    /// With the record count only, as a primary built before the CRC sends.
    CountOnly,
}

/// `+FULLRESYNC` at offset 0 and a payload on two shards: the framing,
/// `LH.SNAPSHOT`, `LH.FLUSHSLOTS 0 16383`, `image`, `LH.SNAPEND` (ending
/// as `end` says), the mark.
fn full_sync(image: &[Vec<&str>], end: End) -> Vec<u8> {
    full_sync_at(image, end, 0)
}

/// [`full_sync`] at stream offset `offset`.
fn full_sync_at(image: &[Vec<&str>], end: End, offset: u64) -> Vec<u8> {
    let offset = offset.to_string();
    let header = ["LH.SNAPSHOT", "1", ID, &offset, "1700000000000", "2"];
    let mut body: Vec<&[&str]> = vec![&header, &["LH.FLUSHSLOTS", "0", "16383"]];
    body.extend(image.iter().map(Vec::as_slice));
    let body = records(&body);
    let count = (image.len() + 1).to_string();
    let crc = leasehold_server::persist::format::crc32(&body);
    let crc = match end {
        End::Crc => format!("{crc:08x}"),
        End::WrongCrc => format!("{:08x}", crc ^ 1),
        End::CountOnly => String::new(),
    };
    let snapend = match end {
        End::CountOnly => records(&[&["LH.SNAPEND", &count]]),
        _ => records(&[&["LH.SNAPEND", &count, &crc]]),
    };
    let mut wire = format!("+FULLRESYNC {ID} {offset}\r\n$EOF:{MARK}\r\n").into_bytes();
    wire.extend(body);
    wire.extend(snapend);
    wire.extend(MARK.as_bytes());
    wire
}

#[test]
fn a_replica_sends_its_primary_nothing_but_acks() {
    let (listener, _replica, mut r) = scripted_replica(2);
    let keys = keys_in_both_halves("k", 2);
    let (mut s, mut buf, psync) = handshake(&listener);
    assert_eq!(psync, ["PSYNC", "?", "-1"]);
    let image: Vec<Vec<&str>> = keys.iter().map(|k| vec!["SET", k.as_str(), "v"]).collect();
    let mut wire = full_sync(&image, End::Crc);
    let stream: Vec<Vec<&str>> = keys
        .iter()
        .flat_map(|k| {
            [
                vec!["INCR", k.as_str()],
                vec!["DEL", k.as_str()],
                vec!["SET", k.as_str(), "w"],
            ]
        })
        .collect();
    let stream_bytes = records(&stream.iter().map(Vec::as_slice).collect::<Vec<_>>());
    wire.extend(&stream_bytes);
    s.write_all(&wire).unwrap();
    // Everything the replica sends from here on is an acknowledgement.
    s.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let start = Instant::now();
    let mut acks = Vec::new();
    while start.elapsed() < Duration::from_millis(1500) {
        let Some(req) = request(&mut s, &mut buf) else {
            break;
        };
        assert_eq!(&req[..2], ["REPLCONF", "ACK"], "the replica sent {req:?}");
        acks.push(req[2].parse::<u64>().unwrap());
    }
    assert_eq!(
        acks.last().copied(),
        Some(stream_bytes.len() as u64),
        "acked: {acks:?}"
    );
    for k in &keys {
        // INCR on "v" fails on the replica too; DEL then SET leave "w".
        assert_eq!(r.call(&format!("GET {k}")), "$1\r\nw\r\n");
    }
    assert_eq!(
        field(&mut r, "replication", "slave_repl_offset"),
        stream_bytes.len().to_string()
    );
}

#[test]
fn a_payload_that_is_not_a_leasehold_snapshot_changes_nothing() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let replica = TestServer::start(2);
    let mut r = replica.raw();
    assert_eq!(r.call("SET kept yes"), "+OK\r\n");
    let first_id = field(&mut r, "replication", "master_replid");
    assert_eq!(r.call(&format!("REPLICAOF 127.0.0.1 {port}")), "+OK\r\n");
    let (mut s, _, _) = handshake(&listener);
    // What a Redis 7 primary sends: an RDB payload.
    let mut wire = format!("+FULLRESYNC {ID} 0\r\n$EOF:{MARK}\r\n").into_bytes();
    wire.extend(b"REDIS0011\xfa\tredis-ver\x057.0.15");
    s.write_all(&wire).unwrap();
    let start = Instant::now();
    loop {
        // The replica took the +FULLRESYNC (its history changed) and
        // dropped the payload.
        let refused = field(&mut r, "replication", "master_replid") != first_id;
        let reply = r.call("GET kept");
        if refused && reply == "$3\r\nyes\r\n" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "GET kept answered {reply}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(field(&mut r, "replication", "master_link_status"), "down");
    assert_eq!(r.call("DBSIZE"), ":1\r\n");
    // And it can be pointed elsewhere or promoted.
    assert_eq!(r.call("REPLICAOF NO ONE"), "+OK\r\n");
    assert_eq!(r.call("SET after 1"), "+OK\r\n");
}

/// A primary's transaction over several shards reaches the replica framed
/// `MULTI` .. `EXEC`. A link lost inside a frame applies nothing of it
/// and counts none of its bytes: the replica asks to continue from before
/// the `MULTI`, and the frame sent again applies once, whole.
#[test]
fn a_link_lost_inside_a_transaction_frame_resumes_before_it() {
    let (listener, _replica, mut r) = scripted_replica(2);
    let keys = keys_in_both_halves("k", 2);
    let (a, b) = (keys[0].as_str(), keys[1].as_str());
    let (mut s, _, _) = handshake(&listener);
    let mut wire = full_sync(&[], End::Crc);
    let before = records(&[&["SET", "plain", "1"]]);
    let frame = records(&[&["MULTI"], &["SET", a, "1"], &["SET", b, "1"], &["EXEC"]]);
    // The link breaks after the frame's second record.
    let cut = records(&[&["MULTI"], &["SET", a, "1"]]).len();
    wire.extend(&before);
    wire.extend(&frame[..cut]);
    s.write_all(&wire).unwrap();
    wait_get(&mut r, "plain", "$1\r\n1\r\n");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        r.call(&format!("EXISTS {a} {b}")),
        ":0\r\n",
        "nothing of an open frame"
    );
    assert_eq!(
        field(&mut r, "replication", "slave_repl_offset"),
        before.len().to_string(),
        "the open frame's bytes are not counted"
    );
    drop(s);
    // The replica comes back asking for what follows the last whole unit.
    let (mut s, _, psync) = handshake(&listener);
    assert_eq!(psync, ["PSYNC", ID, &(before.len() + 1).to_string()]);
    let mut wire = format!("+CONTINUE {ID}\r\n").into_bytes();
    wire.extend(&frame);
    s.write_all(&wire).unwrap();
    wait_both(&mut r, a, b, "1");
    assert_eq!(
        field(&mut r, "replication", "slave_repl_offset"),
        (before.len() + frame.len()).to_string()
    );
}

/// Reads what the replica sends on `s` until it closes the link (within
/// 5 s).
fn wait_closed(s: &mut TcpStream) {
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let start = Instant::now();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            _ => {}
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the replica did not close the link"
        );
    }
}

/// Waits until `GET key` on `r` answers `want`.
fn wait_get(r: &mut leasehold_tests::Raw, key: &str, want: &str) {
    wait_reply(r, &format!("GET {key}"), want);
}

/// A payload whose `LH.SNAPEND` carries a CRC-32 that is not its bytes'
/// is not loaded: the replica closes the link, keeps answering -LOADING
/// (it had begun replacing its dataset) and asks again for a full sync;
/// the same payload with the right CRC then loads.
#[test]
fn a_payload_whose_crc_is_wrong_is_not_loaded_and_asked_for_again() {
    let (listener, _replica, mut r) = scripted_replica(2);
    let keys = keys_in_both_halves("k", 2);
    let image: Vec<Vec<&str>> = keys.iter().map(|k| vec!["SET", k.as_str(), "v"]).collect();
    let (mut s, _, psync) = handshake(&listener);
    assert_eq!(psync, ["PSYNC", "?", "-1"]);
    // At an offset past 0: a replica that lost its payload must still ask
    // `PSYNC ? -1`, not continue a history it does not have.
    let mut wire = full_sync_at(&image, End::WrongCrc, 1000);
    // A record of the stream after the payload: never applied from it.
    wire.extend(records(&[&["SET", "after", "1"]]));
    s.write_all(&wire).unwrap();
    wait_closed(&mut s);
    let loading = r.call(&format!("GET {}", keys[0]));
    assert!(loading.starts_with("-LOADING"), "GET answered {loading}");
    assert_eq!(field(&mut r, "replication", "master_link_status"), "down");
    // It asks again for a full sync, and loads the payload sent right.
    let (mut s, _, psync) = handshake(&listener);
    assert_eq!(psync, ["PSYNC", "?", "-1"]);
    let mut wire = full_sync(&image, End::Crc);
    wire.extend(records(&[&["SET", "after", "1"]]));
    s.write_all(&wire).unwrap();
    wait_get(&mut r, "after", "$1\r\n1\r\n");
    for k in &keys {
        assert_eq!(r.call(&format!("GET {k}")), "$1\r\nv\r\n");
    }
    assert_eq!(field(&mut r, "replication", "master_link_status"), "up");
}

/// A payload from a primary built before the CRC (`LH.SNAPEND <records>`)
/// loads on its record count; one that ends without `LH.SNAPEND` does not.
#[test]
fn a_payload_is_loaded_on_its_count_alone_but_not_without_its_end() {
    let (listener, _replica, mut r) = scripted_replica(2);
    let (mut s, _, _) = handshake(&listener);
    let mut wire = format!("+FULLRESYNC {ID} 0\r\n$EOF:{MARK}\r\n").into_bytes();
    wire.extend(records(&[
        &["LH.SNAPSHOT", "1", ID, "0", "1700000000000", "2"],
        &["LH.FLUSHSLOTS", "0", "16383"],
        &["SET", "cut", "1"],
    ]));
    wire.extend(MARK.as_bytes());
    s.write_all(&wire).unwrap();
    wait_closed(&mut s);
    let loading = r.call("GET cut");
    assert!(loading.starts_with("-LOADING"), "GET answered {loading}");
    let (mut s, _, psync) = handshake(&listener);
    assert_eq!(psync, ["PSYNC", "?", "-1"]);
    let mut wire = full_sync(&[vec!["SET", "old", "1"]], End::CountOnly);
    wire.extend(records(&[&["SET", "after", "1"]]));
    s.write_all(&wire).unwrap();
    wait_get(&mut r, "after", "$1\r\n1\r\n");
    assert_eq!(r.call("GET old"), "$1\r\n1\r\n");
    assert_eq!(r.call("EXISTS cut"), ":0\r\n");
}

/// Frames that follow each other in what the replica has read are applied
/// as one transaction (one round of shard locks for a replica catching
/// up), and every record of them applies.
#[test]
fn back_to_back_frames_apply_as_one_transaction() {
    let (listener, _replica, mut r) = scripted_replica(2);
    let keys = keys_in_both_halves("k", 2);
    let (a, b) = (keys[0].as_str(), keys[1].as_str());
    let (mut s, _, _) = handshake(&listener);
    let mut wire = full_sync(&[], End::Crc);
    let mut frames = Vec::new();
    for i in 1..=3 {
        let v = i.to_string();
        frames.extend(records(&[
            &["MULTI"],
            &["SET", a, &v],
            &["SET", b, &v],
            &["EXEC"],
        ]));
    }
    let stream_len = frames.len();
    wire.extend(frames);
    s.write_all(&wire).unwrap();
    wait_both(&mut r, a, b, "3");
    assert_eq!(
        field(&mut r, "replication", "slave_repl_offset"),
        stream_len.to_string()
    );
    let stats = r.call("INFO commandstats");
    assert!(
        stats.contains("cmdstat_exec:calls=1,"),
        "one EXEC ran for the three frames: {stats}"
    );
}

/// `MULTI`, `SET a v`, `SET b v`, `EXEC`: one primary transaction over the
/// replica's two shards.
fn frame(a: &str, b: &str, v: &str) -> Vec<u8> {
    records(&[&["MULTI"], &["SET", a, v], &["SET", b, v], &["EXEC"]])
}

/// Waits until `MGET a b` on `r` answers `v` for both.
fn wait_both(r: &mut leasehold_tests::Raw, a: &str, b: &str, v: &str) {
    let want = format!("*2\r\n${}\r\n{v}\r\n${}\r\n{v}\r\n", v.len(), v.len());
    wait_reply(r, &format!("MGET {a} {b}"), &want);
}

/// A link lost inside the second of two joined frames applies neither
/// (the first's EXEC was joined, not run), counts neither, and resumes
/// before the first: both frames sent again apply once, and the offset is
/// the stream's. On a replica of 1 and of 3 threads.
#[test]
fn a_link_lost_inside_joined_frames_resumes_before_the_first() {
    for threads in [1, 3] {
        let (listener, _replica, mut r) = scripted_replica(threads);
        let keys = keys_in_both_halves("k", 2);
        let (a, b) = (keys[0].as_str(), keys[1].as_str());
        let (mut s, _, _) = handshake(&listener);
        s.write_all(&full_sync(&[], End::Crc)).unwrap();
        wait_get(&mut r, a, "$-1\r\n");
        let before = records(&[&["SET", "plain", "1"]]);
        let (f1, f2) = (frame(a, b, "1"), frame(a, b, "2"));
        let cut = records(&[&["MULTI"], &["SET", a, "2"]]).len();
        let mut wire = before.clone();
        wire.extend(&f1);
        wire.extend(&f2[..cut]);
        s.write_all(&wire).unwrap();
        wait_get(&mut r, "plain", "$1\r\n1\r\n");
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            field(&mut r, "replication", "slave_repl_offset"),
            before.len().to_string(),
            "{threads} threads: joined frames are counted at their EXEC"
        );
        drop(s);
        let (mut s, _, psync) = handshake(&listener);
        assert_eq!(psync, ["PSYNC", ID, &(before.len() + 1).to_string()]);
        let mut wire = format!("+CONTINUE {ID}\r\n").into_bytes();
        wire.extend(&f1);
        wire.extend(&f2);
        s.write_all(&wire).unwrap();
        wait_both(&mut r, a, b, "2");
        assert_eq!(
            field(&mut r, "replication", "slave_repl_offset"),
            (before.len() + f1.len() + f2.len()).to_string()
        );
    }
}

/// A stream cut between reads exactly at one frame's `EXEC` and the next
/// frame's `MULTI`, or inside that `MULTI`: the first frame applies alone
/// and is counted, then the second.
#[test]
fn frames_split_at_their_boundary_apply_and_count_in_order() {
    let keys = keys_in_both_halves("k", 2);
    let (a, b) = (keys[0].as_str(), keys[1].as_str());
    for inside in [0, 1, 5, 14] {
        let (listener, _replica, mut r) = scripted_replica(2);
        let (mut s, _, _) = handshake(&listener);
        s.write_all(&full_sync(&[], End::Crc)).unwrap();
        wait_get(&mut r, a, "$-1\r\n");
        let (f1, f2) = (frame(a, b, "1"), frame(a, b, "2"));
        let mut first = f1.clone();
        first.extend(&f2[..inside]);
        s.write_all(&first).unwrap();
        wait_both(&mut r, a, b, "1");
        assert_eq!(
            field(&mut r, "replication", "slave_repl_offset"),
            f1.len().to_string(),
            "{inside} bytes of the next MULTI read"
        );
        s.write_all(&f2[inside..]).unwrap();
        wait_both(&mut r, a, b, "2");
        assert_eq!(
            field(&mut r, "replication", "slave_repl_offset"),
            (f1.len() + f2.len()).to_string()
        );
    }
}

/// `REPLCONF GETACK` between frames, read with them (after the payload in
/// the same read, where records are re-encoded, and alone): the ACK a
/// GETACK asks for counts at least the bytes up to it (the link thread
/// sends it a little later, so it may count records read since), never
/// more than was sent, and the last counts the whole stream.
#[test]
fn getack_between_frames_acks_at_least_what_came_before() {
    let keys = keys_in_both_halves("k", 2);
    let (a, b) = (keys[0].as_str(), keys[1].as_str());
    for with_payload in [true, false] {
        let (listener, _replica, mut r) = scripted_replica(2);
        let (mut s, mut buf, _) = handshake(&listener);
        let mut wire = full_sync(&[], End::Crc);
        if !with_payload {
            s.write_all(&wire).unwrap();
            wait_get(&mut r, a, "$-1\r\n");
            wire.clear();
        }
        let getack = records(&[&["REPLCONF", "GETACK", "*"]]);
        let mut stream = frame(a, b, "1");
        stream.extend(frame(a, b, "2"));
        stream.extend(&getack);
        let first = stream.len() as u64;
        stream.extend(frame(a, b, "3"));
        stream.extend(records(&[&["PING"]]));
        stream.extend(frame(a, b, "4"));
        stream.extend(&getack);
        let second = stream.len() as u64;
        wire.extend(&stream);
        s.write_all(&wire).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(1500)))
            .unwrap();
        let mut acks = Vec::new();
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(1500) && acks.last() != Some(&second) {
            let Some(req) = request(&mut s, &mut buf) else {
                break;
            };
            assert_eq!(&req[..2], ["REPLCONF", "ACK"], "the replica sent {req:?}");
            acks.push(req[2].parse::<u64>().unwrap());
        }
        assert!(
            acks.first().is_some_and(|&f| f >= first) && acks.last() == Some(&second),
            "payload in the read: {with_payload}; acks {acks:?}, want {first} then {second}"
        );
        assert!(
            acks.windows(2).all(|w| w[0] <= w[1]) && acks.iter().all(|&a| a <= second),
            "acks {acks:?}"
        );
        wait_both(&mut r, a, b, "4");
    }
}
