//! Busy scripts: `EVAL` requests, a connection served by a chosen thread,
//! and waiting until a script keeps its shard busy (other threads answer
//! `-BUSY`).

use std::time::Duration;

use crate::{resp, Raw, TestServer};

/// `EVAL script numkeys args...` as RESP.
pub fn eval(script: &str, rest: &[&str]) -> Vec<u8> {
    let mut args: Vec<&[u8]> = vec![b"EVAL", script.as_bytes()];
    args.extend(rest.iter().map(|a| a.as_bytes()));
    resp(&args)
}

/// A low `busy-reply-threshold` (through its Redis 6 alias too), so a
/// test's script is busy quickly.
pub fn low_threshold(c: &mut Raw) {
    assert_eq!(c.call("CONFIG SET busy-reply-threshold 50"), "+OK\r\n");
    assert_eq!(
        c.call("CONFIG GET lua-time-limit"),
        "*2\r\n$14\r\nlua-time-limit\r\n$2\r\n50\r\n"
    );
}

/// Waits until an MGET over both shards answers BUSY, on connections of
/// the thread that does not run the script (`probes`, opened before it
/// started: thread 0 accepts connections, and it may be the busy one). A
/// command that reached the script's shard before the threshold waits for
/// the script's end, so each try takes a fresh connection and a try
/// without an answer at once is left behind; one answered before the
/// script began is the MGET's own reply, and the next try follows.
pub fn wait_busy(probes: &mut Vec<Raw>, keys: &[String]) {
    let mget = format!("MGET {} {}", keys[0], keys[1]);
    while let Some(mut c) = probes.pop() {
        c.send_cmd(&mget);
        if let Some((_, bytes)) = c.try_read_reply_raw(Duration::from_millis(100)) {
            let r = String::from_utf8_lossy(&bytes).into_owned();
            if r == "-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n" {
                return;
            }
            // Answered before the script started (a loaded machine may
            // start it late, and an MGET waits for a transaction's locks
            // before it): only the MGET's own reply may come instead.
            assert!(
                r.starts_with("*2\r\n"),
                "neither BUSY nor the MGET's reply: {r:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("never BUSY");
}

/// The index in `keys` (one key of each shard) of the key on the shard of
/// `c`'s thread: a script without keys runs there and may touch only it.
pub fn own_key(c: &mut Raw, keys: &[String]) -> usize {
    let probe = "return redis.call('get', ARGV[1])";
    (0..keys.len())
        .find(|&i| {
            c.send(&eval(probe, &["0", &keys[i]]));
            !c.read_text().starts_with('-')
        })
        .expect("a key on the connection's shard")
}

/// A connection `a`, one `b` served by the other thread (of a 2-thread
/// server), and 30 more of `b`'s thread to probe for BUSY.
pub fn on_two_threads(server: &TestServer, keys: &[String]) -> (Raw, Raw, Vec<Raw>) {
    let mut a = server.raw();
    let mine = own_key(&mut a, keys);
    let mut others = Vec::new();
    // Probes for `wait_busy`: each one it gives up on costs 100 ms, and a
    // loaded machine may need a few seconds of them.
    while others.len() < 61 {
        let mut b = server.raw();
        if own_key(&mut b, keys) != mine {
            others.push(b);
        }
    }
    let b = others.pop().expect("61 connections");
    (a, b, others)
}

/// A connection served by the thread of shard `shard` (one of `keys`' shards,
/// see [`own_key`]).
pub fn on_shard(server: &TestServer, keys: &[String], shard: usize) -> Raw {
    loop {
        let mut c = server.raw();
        if own_key(&mut c, keys) == shard {
            return c;
        }
    }
}
