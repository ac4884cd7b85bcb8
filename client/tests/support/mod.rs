//! A fake ledger for tests: a RESP server on 127.0.0.1 that answers PING,
//! GET/SET/INCR/DEL, TOKENLEASE and TOKENRETURN from an in-memory model, and
//! can delay, hang, fail or refuse on demand. It counts every command it
//! receives, so tests can assert what reached "the ledger".
#![allow(dead_code)]

pub mod cluster;
pub mod conservation;
pub mod managers;
pub mod server;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{decode_request, Limits, Protocol, Reply};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How the fake answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Answer every command.
    Normal = 0,
    /// Read commands (and count them) but never answer.
    Hang = 1,
    /// Answer every command with `-LOADING` (the ledger cannot serve).
    Fail = 2,
    /// Close each connection as soon as it sends anything.
    Drop = 3,
}

#[derive(Default)]
struct Model {
    strings: HashMap<Bytes, Bytes>,
    /// key -> (tokens, last refill)
    buckets: HashMap<Bytes, (f64, Instant)>,
}

pub struct FakeLedger {
    pub addr: SocketAddr,
    mode: AtomicU8,
    model: Mutex<Model>,
    calls: Mutex<HashMap<String, u64>>,
    delays: Mutex<HashMap<Bytes, Duration>>,
    log: Mutex<Vec<Vec<Bytes>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl FakeLedger {
    pub async fn start() -> Arc<FakeLedger> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let fake = Arc::new(FakeLedger {
            addr: listener.local_addr().unwrap(),
            mode: AtomicU8::new(Mode::Normal as u8),
            model: Mutex::default(),
            calls: Mutex::default(),
            delays: Mutex::default(),
            log: Mutex::default(),
            tasks: Mutex::default(),
        });
        let me = fake.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                // Replies go out one write each: without this, Nagle holds
                // the second reply of a pipeline until the client's delayed
                // ACK (40 ms on Linux), and decisions stall past deadlines.
                let _ = stream.set_nodelay(true);
                let conn = tokio::spawn(me.clone().serve(stream));
                me.tasks.lock().push(conn);
            }
        });
        fake.tasks.lock().push(accept);
        fake
    }

    /// Connections accepted so far (polls briefly: the accept runs on its
    /// own task).
    pub async fn connections(&self) -> usize {
        for _ in 0..100 {
            let n = self.tasks.lock().len() - 1;
            if n > 0 {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        0
    }

    pub fn set_mode(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    /// Delays every reply to a command on `key` by `d`.
    pub fn delay_key(&self, key: &str, d: Duration) {
        self.delays
            .lock()
            .insert(Bytes::copy_from_slice(key.as_bytes()), d);
    }

    /// How many commands named `name` (upper case) arrived.
    pub fn calls(&self, name: &str) -> u64 {
        self.calls.lock().get(name).copied().unwrap_or(0)
    }

    /// Every command received, in order.
    pub fn log(&self) -> Vec<Vec<Bytes>> {
        self.log.lock().clone()
    }

    /// The model's whole-token balance of a bucket (None: never touched).
    pub fn tokens(&self, key: &str) -> Option<u64> {
        self.model
            .lock()
            .buckets
            .get(key.as_bytes())
            .map(|(t, _)| *t as u64)
    }

    /// Stops listening and drops every connection.
    pub fn kill(&self) {
        for t in self.tasks.lock().drain(..) {
            t.abort();
        }
    }

    fn mode(&self) -> Mode {
        match self.mode.load(Ordering::SeqCst) {
            1 => Mode::Hang,
            2 => Mode::Fail,
            3 => Mode::Drop,
            _ => Mode::Normal,
        }
    }

    async fn serve(self: Arc<Self>, mut stream: TcpStream) {
        let mut buf = BytesMut::new();
        loop {
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            while let Ok(Some(args)) = decode_request(&mut buf, &Limits::default()) {
                if args.is_empty() {
                    continue;
                }
                let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
                *self.calls.lock().entry(name.clone()).or_default() += 1;
                self.log.lock().push(args.clone());
                let reply = match self.mode() {
                    Mode::Hang => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        return;
                    }
                    Mode::Drop => return,
                    Mode::Fail => Reply::err("LOADING Redis is loading the dataset in memory"),
                    Mode::Normal => self.answer(&name, &args),
                };
                let delay = args.get(1).and_then(|k| self.delays.lock().get(k).copied());
                if let Some(d) = delay {
                    tokio::time::sleep(d).await;
                }
                if stream
                    .write_all(&reply.to_bytes(Protocol::Resp2))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }

    fn answer(&self, name: &str, args: &[Bytes]) -> Reply {
        let num = |i: usize| -> u64 {
            args.get(i)
                .and_then(|a| std::str::from_utf8(a).ok()?.parse().ok())
                .unwrap_or(0)
        };
        let mut m = self.model.lock();
        match name {
            "PING" => Reply::simple("PONG"),
            "GET" => m
                .strings
                .get(&args[1])
                .cloned()
                .map_or(Reply::Nil, Reply::Bulk),
            "SET" => {
                m.strings.insert(args[1].clone(), args[2].clone());
                Reply::ok()
            }
            "DEL" => Reply::Int(i64::from(m.strings.remove(&args[1]).is_some())),
            "INCR" => {
                let cur = m
                    .strings
                    .get(&args[1])
                    .cloned()
                    .unwrap_or_else(|| Bytes::from("0"));
                match std::str::from_utf8(&cur)
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok())
                {
                    Some(v) => {
                        m.strings
                            .insert(args[1].clone(), Bytes::from((v + 1).to_string()));
                        Reply::Int(v + 1)
                    }
                    None => Reply::err("ERR value is not an integer or out of range"),
                }
            }
            "TOKENLEASE" | "TOKENRETURN" => {
                let (cap, rate, period) = (num(2) as f64, num(3) as f64, num(4) as f64);
                let now = Instant::now();
                let entry = m.buckets.entry(args[1].clone()).or_insert((cap, now));
                let elapsed_ms = now.duration_since(entry.1).as_secs_f64() * 1000.0;
                entry.0 = (entry.0 + elapsed_ms * rate / period).min(cap);
                entry.1 = now;
                if name == "TOKENRETURN" {
                    entry.0 = (entry.0 + num(5) as f64).min(cap);
                    return Reply::Int(entry.0 as i64);
                }
                let requested = num(5);
                let min = if args.len() > 7 { num(7) } else { requested };
                let have = entry.0.floor() as u64;
                let granted = if have >= min { have.min(requested) } else { 0 };
                entry.0 -= granted as f64;
                let retry = if granted > 0 {
                    0
                } else if min as f64 > cap {
                    -1
                } else {
                    ((min as f64 - entry.0) * period / rate).ceil() as i64
                };
                let reset = ((cap - entry.0) * period / rate).ceil() as i64;
                Reply::Array(vec![
                    Reply::Int(granted as i64),
                    Reply::Int(entry.0.floor() as i64),
                    Reply::Int(retry),
                    Reply::Int(reset),
                ])
            }
            _ => Reply::err_owned(format!("ERR unknown command '{name}'")),
        }
    }
}

impl Drop for FakeLedger {
    fn drop(&mut self) {
        self.kill();
    }
}
