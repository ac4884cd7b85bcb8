//! Resharding's node side: MIGRATE (Redis's shape), which moves keys to
//! another node exactly, and the `-ASK` / `-TRYAGAIN` answers of a slot in
//! migration (decided by `shard::moving`, with [`key_positions`]). CLUSTER SETSLOT,
//! which opens and closes a migration, is in `commands/cluster.rs`; the
//! states themselves in `crate::cluster::Moving`.
//!
//! MIGRATE runs on the shard that holds its keys (`Exec::Cursor`, routed
//! by [`shard_of`]): for each key it writes the records that recreate the
//! key (`Store::key_records`, the very records a full sync sends: absolute
//! Unix-ms instants, so no token bucket refills or mints on the way), each
//! after `ASKING` so the target takes them for a slot it imports, reads
//! every reply, and only then deletes the key here (unless COPY). The
//! shard runs nothing else meanwhile, as Redis's MIGRATE blocks its
//! server, so no write to the key falls between the copy and the delete:
//! nothing is lost or duplicated. A failure before the target answered
//! leaves the key here (the target may hold a copy; a retry with REPLACE
//! overwrites it).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{encode_request, Args, Reply};

use super::table;
use crate::cluster::SentinelConn;
use crate::error::OpError;
use crate::shard::Shard;
use crate::slot::{key_slot, slot_shard};

/// MIGRATE's timeout when given 0 or less, in ms (Redis's).
const DEFAULT_TIMEOUT_MS: u64 = 1000;

/// The keys a MIGRATE request names: its third argument, or when that is
/// empty the ones after `KEYS`.
fn named_keys(all: &[Bytes]) -> &[Bytes] {
    match all.get(3) {
        Some(k) if !k.is_empty() => &all[3..4],
        _ => match all.iter().position(|a| a.eq_ignore_ascii_case(b"keys")) {
            Some(at) if at > 5 => &all[at + 1..],
            _ => &[],
        },
    }
}

/// The shard MIGRATE runs on: its first key's (`own` without keys).
pub fn shard_of(all: &[Bytes], shards: usize, own: usize) -> usize {
    match named_keys(all).first() {
        Some(k) => slot_shard(key_slot(k), shards),
        None => own,
    }
}

/// The options after MIGRATE's fifth argument.
struct Options {
    copy: bool,
    replace: bool,
    auth: Option<Vec<Bytes>>,
}

fn options(a: &mut Args, key_given: bool) -> Result<Options, OpError> {
    let mut o = Options {
        copy: false,
        replace: false,
        auth: None,
    };
    while a.remaining() > 0 {
        let word = a.word()?;
        match word.as_str() {
            "COPY" => o.copy = true,
            "REPLACE" => o.replace = true,
            "AUTH" => o.auth = Some(vec![a.next()?]),
            "AUTH2" => o.auth = Some(vec![a.next()?, a.next()?]),
            "KEYS" if key_given => return Err(OpError::SetSlot(
                "When using MIGRATE KEYS option, the key argument must be set to the empty string"
                    .into(),
            )),
            "KEYS" => return Ok(o),
            _ => return Err(OpError::Syntax),
        }
    }
    Ok(o)
}

/// `MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE]
/// [AUTH password] [AUTH2 username password] [KEYS key ...]`: `OK`, or
/// `NOKEY` when none of the keys is here. The database must be 0; a
/// timeout of 0 or less is 1000 ms. Keys of several shards here get
/// CROSSSLOT (the operator tool moves one slot at a time).
///
/// # Errors
/// `IOERR error or timeout connecting to|writing to|reading from target
/// instance`, `ERR Target instance replied with error: ...`, `BUSYKEY
/// Target key name already exists.` (without REPLACE; nothing moved).
pub fn migrate(s: &mut Shard, a: &mut Args) -> Result<Reply, OpError> {
    let all = a.all().to_vec();
    let host = String::from_utf8_lossy(&a.next()?).into_owned();
    let port = a.u64()?;
    let port = u16::try_from(port)
        .ok()
        .filter(|&p| p > 0)
        .ok_or(OpError::Syntax)?;
    let key_given = !a.next()?.is_empty();
    if a.i64()? != 0 {
        return Err(OpError::SetSlot(
            "MIGRATE moves keys to database 0 only (Leasehold has one)".into(),
        ));
    }
    let timeout = match a.i64()? {
        t if t <= 0 => DEFAULT_TIMEOUT_MS,
        t => t as u64,
    };
    let o = options(a, key_given)?;
    let keys = named_keys(&all);
    let shard = slot_shard(key_slot(keys.first().map_or(&b""[..], |k| k)), s.shards);
    if keys
        .iter()
        .any(|k| slot_shard(key_slot(k), s.shards) != shard)
    {
        return Err(OpError::CrossSlot);
    }
    let now_ms = s.now.unix_ms;
    // What to send: per key present, its records, each after ASKING.
    let mut moving: Vec<&Bytes> = Vec::new();
    let mut body = BytesMut::new();
    let mut replies = 0usize;
    for k in keys {
        if moving.contains(&k) {
            continue;
        }
        let mut records = BytesMut::new();
        let mut n = 0;
        let present = s.store.key_records(k, now_ms, |r| {
            encode_request(&[b"ASKING".as_slice()], &mut records);
            records.extend_from_slice(r);
            n += 2;
        });
        if !present {
            continue;
        }
        encode_request(&[b"ASKING".as_slice()], &mut body);
        match o.replace {
            true => encode_request(&[b"DEL".as_slice(), k], &mut body),
            false => encode_request(&[b"EXISTS".as_slice(), k], &mut body),
        }
        body.extend_from_slice(&records);
        replies += 2 + n;
        moving.push(k);
    }
    if moving.is_empty() {
        return Ok(Reply::simple("NOKEY"));
    }
    let mut head = BytesMut::new();
    let mut auth_replies = 0;
    if let Some(auth) = &o.auth {
        let mut args: Vec<&[u8]> = vec![b"AUTH"];
        args.extend(auth.iter().map(|b| &b[..]));
        encode_request(&args, &mut head);
        auth_replies = 1;
    }
    let timeout = Duration::from_millis(timeout);
    let mut conn = SentinelConn::open_with(&host, port, timeout)
        .map_err(|_| OpError::MigrateIo("connecting to"))?;
    // Without REPLACE a key the target has already stops the move before
    // anything is written there: EXISTS first, in a round trip of its own.
    if !o.replace {
        let mut probe = head.clone();
        for k in &moving {
            encode_request(&[b"ASKING".as_slice()], &mut probe);
            encode_request(&[b"EXISTS".as_slice(), k], &mut probe);
        }
        conn.send_raw(&probe)
            .map_err(|_| OpError::MigrateIo("writing to"))?;
        let mut busy = false;
        for i in 0..auth_replies + 2 * moving.len() {
            match read(&mut conn)? {
                Reply::Int(1) if i >= auth_replies && (i - auth_replies) % 2 == 1 => busy = true,
                _ => {}
            }
        }
        if busy {
            return Err(OpError::BusyKey);
        }
        head.clear();
    }
    head.extend_from_slice(&body);
    conn.send_raw(&head)
        .map_err(|_| OpError::MigrateIo("writing to"))?;
    for _ in 0..auth_replies + replies {
        read(&mut conn)?;
    }
    if !o.copy {
        for k in moving {
            s.store.remove(k, now_ms);
        }
    }
    Ok(Reply::ok())
}

/// The target's next reply; an error reply stops the move.
fn read(conn: &mut SentinelConn) -> Result<Reply, OpError> {
    match conn.next() {
        Ok(Reply::Error(e)) => Err(OpError::MigrateTarget(e.to_string())),
        Ok(r) => Ok(r),
        Err(_) => Err(OpError::MigrateIo("reading from")),
    }
}

/// The key positions of request `all` of command `cmd`, for the shard's
/// migration check (`shard::moving`); none for MIGRATE, which always runs.
pub fn key_positions(cmd: usize, all: &[Bytes]) -> Vec<usize> {
    let spec = &table().commands[cmd];
    match spec.name {
        "migrate" => Vec::new(),
        _ => spec.keys_in(all).collect(),
    }
}
