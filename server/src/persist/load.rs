//! Loading the files at the start, before any client's command runs
//! (clients that connect meanwhile get `-LOADING`, INFO says `loading:1`).
//!
//! The snapshot, or the append-only log's base and increments in the
//! manifest's order, are checked first (checksums, see `format.rs`), then
//! their records are applied: each goes to the shard owning its key as a
//! [`Msg::Apply`] batch, in file order per shard, so every key ends as the
//! last record for it says. A record's instants are Unix ms: a token
//! bucket saved an hour ago continues from its saved balance with an hour
//! of refill (capped at its capacity), one whose saved instant lies ahead
//! of the clock (the wall clock stepped back while the server was down)
//! refills only from that instant on, so a step never mints tokens. While
//! loading, the shards encode no effects: what is loaded is on disk already.

use std::path::{Path, PathBuf};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{decode_request, Args};

use crate::commands::{table, Exec};
use crate::persist::format::{
    check_increment, check_snapshot, crc32, file_limits, parse_manifest, segment_crc, Damage,
    ManifestEntry,
};
use crate::shard::{Job, Mailbox, Msg};
use crate::slot::{key_slot, slot_shard};
use crate::state::Shared;

/// Records per batch to a shard.
const BATCH: usize = 1024;
/// Batches in flight per shard.
const IN_FLIGHT: usize = 2;

/// Applies records to the shards in batches.
struct Applier<'a> {
    shards: usize,
    mailboxes: &'a [Mailbox],
    batches: Vec<Vec<Job>>,
    in_flight: usize,
    done_tx: crossbeam_channel::Sender<u64>,
    done_rx: crossbeam_channel::Receiver<u64>,
    failed: u64,
    applied: u64,
    /// An open transaction (`MULTI` read, no `EXEC` yet): where its `MULTI`
    /// starts in the file, and its records, applied at the `EXEC`.
    tx: Option<OpenTx>,
    /// Where the current file's current checksummed segment starts (after
    /// the last `LH.CRC` record).
    segment: usize,
}

impl<'a> Applier<'a> {
    fn new(shared: &Shared, mailboxes: &'a [Mailbox]) -> Applier<'a> {
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        Applier {
            shards: shared.shards,
            mailboxes,
            batches: (0..shared.shards).map(|_| Vec::new()).collect(),
            in_flight: 0,
            done_tx,
            done_rx,
            failed: 0,
            applied: 0,
            tx: None,
            segment: 0,
        }
    }

    /// Queues one record; framing records (`PING`, `REPLCONF`, `LH.CRC`)
    /// are skipped.
    fn record(&mut self, items: Vec<Bytes>) -> Result<(), String> {
        const SKIPPED: &[&[u8]] = &[b"PING", b"REPLCONF", b"LH.CRC", b"SELECT"];
        if SKIPPED.iter().any(|s| items[0].eq_ignore_ascii_case(s)) {
            return Ok(());
        }
        // Only an error names the record: no allocation per record loaded.
        let name = |items: &[Bytes]| String::from_utf8_lossy(&items[0]).into_owned();
        let Some((idx, spec)) = table().lookup(&items[0]) else {
            return Err(format!("unknown record '{}'", name(&items)));
        };
        if !spec.arity_ok(items.len()) {
            return Err(format!(
                "record '{}' has {} arguments",
                name(&items),
                items.len()
            ));
        }
        let owner = |items: &[Bytes]| {
            let pos = spec.key_positions(items.len()).next().unwrap_or(1);
            slot_shard(key_slot(&items[pos.min(items.len() - 1)]), self.shards)
        };
        let (run, parts): (_, Vec<(usize, Vec<Bytes>)>) = match spec.exec {
            Exec::Key(run) => (run, vec![(owner(&items), items)]),
            Exec::AllShards(run, _) => {
                (run, (0..self.shards).map(|s| (s, items.clone())).collect())
            }
            // DEL and its kind: each key to its shard (effects name one).
            Exec::Keys(run, _) => {
                let step = spec.step.max(1) as usize;
                let mut per: Vec<Vec<Bytes>> = vec![Vec::new(); self.shards];
                for p in spec.key_positions(items.len()) {
                    let s = slot_shard(key_slot(&items[p]), self.shards);
                    if per[s].is_empty() {
                        per[s].push(items[0].clone());
                    }
                    per[s].extend_from_slice(&items[p..(p + step).min(items.len())]);
                }
                let parts = per.into_iter().enumerate().filter(|(_, a)| !a.is_empty());
                (run, parts.collect())
            }
            _ => return Err(format!("record '{}' is not an effect", name(&items))),
        };
        for (s, args) in parts {
            self.batches[s].push(Job {
                cmd: idx,
                run,
                counted: false,
                link: true,
                args: Args::new(args),
            });
            if self.batches[s].len() >= BATCH {
                self.send(s);
            }
        }
        self.applied += 1;
        Ok(())
    }

    fn send(&mut self, s: usize) {
        while self.in_flight >= IN_FLIGHT * self.shards {
            self.wait_one();
        }
        let jobs = std::mem::take(&mut self.batches[s]);
        if jobs.is_empty() {
            return;
        }
        let done = self.done_tx.clone();
        if self.mailboxes[s].send(Msg::Apply { jobs, done }) {
            self.in_flight += 1;
        }
    }

    fn wait_one(&mut self) {
        match self.done_rx.recv() {
            Ok(n) => self.failed += n,
            Err(_) => self.in_flight = 1,
        }
        self.in_flight -= 1;
    }

    /// Sends what is queued and waits for every batch; returns the records
    /// applied and how many of them failed.
    fn finish(mut self) -> (u64, u64) {
        for s in 0..self.shards {
            self.send(s);
        }
        while self.in_flight > 0 {
            self.wait_one();
        }
        (self.applied, self.failed)
    }
}

/// Applies every record of `body`; `snapshot` checks the `LH.SNAPSHOT`
/// header and the `LH.SNAPEND` count. `lenient` (a damaged snapshot loaded
/// on purpose) skips records that decode but are no effect, and the checks,
/// and stops only at bytes that do not decode.
fn apply(
    applier: &mut Applier<'_>,
    body: &[u8],
    snapshot: bool,
    lenient: bool,
) -> Result<(), String> {
    let limits = file_limits();
    let mut buf = BytesMut::from(body);
    let mut records = 0u64;
    let mut skipped = 0u64;
    let mut started = !snapshot || lenient;
    applier.segment = 0;
    loop {
        let at = body.len() - buf.len();
        let items = match decode_request(&mut buf, &limits) {
            Ok(Some(items)) if items.is_empty() => continue,
            Ok(Some(items)) => items,
            Ok(None) if buf.is_empty() => return Ok(()),
            Ok(None) => return Err("the last record is cut short".into()),
            Err(e) => {
                return Err(format!(
                    "bad record: {e} ({skipped} records skipped before)"
                ))
            }
        };
        if snapshot && items[0].eq_ignore_ascii_case(b"LH.SNAPSHOT") {
            if items.get(1).map(|v| &v[..]) != Some(b"1") {
                return Err("unknown snapshot version".into());
            }
            started = true;
            continue;
        }
        if !started {
            return Err("no LH.SNAPSHOT header".into());
        }
        if snapshot && items[0].eq_ignore_ascii_case(b"LH.SNAPEND") {
            let want = items
                .get(1)
                .and_then(|n| leasehold_protocol::int::parse_u64(n));
            if want != Some(records) && !lenient {
                return Err(format!("{records} records, the end says {want:?}"));
            }
            return Ok(());
        }
        records += 1;
        if items[0].eq_ignore_ascii_case(b"LH.CRC") {
            applier.segment = body.len() - buf.len();
        }
        let result = match frame(applier, at, items) {
            Framed::Queued => Ok(()),
            Framed::Exec(queued) => queued.into_iter().try_for_each(|r| applier.record(r)),
            Framed::Bad(e) => Err(e.into()),
            Framed::Not(items) => applier.record(items),
        };
        match result {
            Ok(()) => {}
            Err(e) if lenient => {
                skipped += 1;
                tracing::warn!("skipping a damaged record: {e}");
            }
            Err(e) => return Err(e),
        }
    }
}

/// A transaction whose `EXEC` was not read yet.
struct OpenTx {
    /// Where its `MULTI` starts in the file.
    at: usize,
    /// Where the checksummed segment holding that `MULTI` starts.
    segment: usize,
    /// Its records so far.
    queued: Vec<Vec<Bytes>>,
}

/// A record's place in a transaction's frame.
enum Framed {
    /// `MULTI`, or a record inside the frame: kept until its `EXEC`.
    Queued,
    /// `EXEC`: the frame's records, to apply now.
    Exec(Vec<Vec<Bytes>>),
    /// A frame that does not nest or close.
    Bad(&'static str),
    /// A record outside any frame.
    Not(Vec<Bytes>),
}

/// Sorts record `items` (starting at byte `at` of its file) into the
/// transaction frames a primary writes (`MULTI`, its effects on several
/// shards, `EXEC`): a frame's records are applied together at its `EXEC`,
/// and a frame the file ends inside is left open in the applier (see
/// [`load_log`]).
fn frame(applier: &mut Applier<'_>, at: usize, items: Vec<Bytes>) -> Framed {
    if items[0].eq_ignore_ascii_case(b"MULTI") {
        if applier.tx.is_some() {
            return Framed::Bad("MULTI inside a transaction");
        }
        applier.tx = Some(OpenTx {
            at,
            segment: applier.segment,
            queued: Vec::new(),
        });
        return Framed::Queued;
    }
    if items[0].eq_ignore_ascii_case(b"EXEC") {
        return match applier.tx.take() {
            Some(open) => Framed::Exec(open.queued),
            None => Framed::Bad("EXEC without MULTI"),
        };
    }
    match applier.tx.as_mut() {
        Some(open) => {
            open.queued.push(items);
            Framed::Queued
        }
        None => Framed::Not(items),
    }
}

/// What the start loaded from the append-only log, for its writer to go on.
#[derive(Debug, Clone)]
pub struct LoadedLog {
    /// The manifest's entries.
    pub entries: Vec<ManifestEntry>,
    /// Bytes of the last increment that are whole (a torn tail cut off).
    pub last_incr_len: u64,
    /// Bytes of every file listed.
    pub size: u64,
}

/// The append-only directory and the manifest's path.
pub fn aof_paths(shared: &Shared) -> (PathBuf, PathBuf) {
    let c = shared.config.read();
    let p = &c.persistence;
    let dir = Path::new(&p.dir).join(&p.appenddirname);
    let manifest = dir.join(format!("{}.manifest", p.appendfilename));
    (dir, manifest)
}

/// The snapshot's path.
pub fn snapshot_path(shared: &Shared) -> PathBuf {
    let c = shared.config.read();
    Path::new(&c.persistence.dir).join(&c.persistence.dbfilename)
}

/// Loads the append-only log (when `appendonly` is on and its manifest
/// exists) or else the snapshot (when it exists), while the replication
/// role's loading flag is set (the caller sets it: clients get `-LOADING`
/// and the shards encode no effects). Returns what the log writer needs
/// to go on, when the log was loaded.
///
/// # Errors
/// A file that cannot be read, a corrupt or truncated snapshot (unless
/// `load-corrupt-snapshot yes`), a corrupt log, or a torn log tail with
/// `aof-load-truncated no`: the message says which file and what.
pub fn load_at_start(shared: &Shared, mailboxes: &[Mailbox]) -> Result<Option<LoadedLog>, String> {
    let (appendonly, truncated_ok, corrupt_ok) = {
        let c = shared.config.read();
        let p = &c.persistence;
        (p.appendonly, p.aof_load_truncated, p.load_corrupt_snapshot)
    };
    let (dir, manifest) = aof_paths(shared);
    let snapshot = snapshot_path(shared);
    if appendonly {
        check_log_dir(shared, &dir, &manifest)?;
    }
    let use_log = appendonly && manifest.exists();
    if !use_log && !snapshot.exists() {
        return Ok(None);
    }
    let started = Instant::now();
    let mut applier = Applier::new(shared, mailboxes);
    let result = match use_log {
        true => load_log(&mut applier, &dir, &manifest, truncated_ok).map(Some),
        false => load_snapshot(&mut applier, &snapshot, corrupt_ok).map(|()| None),
    };
    let (records, failed) = applier.finish();
    let loaded = result?;
    let keys: u64 = shared.sum(|s| s.keys.get());
    let ms = started.elapsed().as_millis() as u64;
    if failed > 0 {
        tracing::warn!("{failed} of {records} records loaded from disk failed to apply");
    }
    let what = match use_log {
        true => format!("append-only log {}", manifest.display()),
        false => format!("snapshot {}", snapshot.display()),
    };
    tracing::info!("DB loaded from {what}: {records} records in {ms} ms, {keys} keys");
    Ok(loaded)
}

/// With `appendonly yes`: the log's directory is a directory, and one that
/// holds log files has their manifest (without it, which files make the
/// dataset is unknown: Redis refuses too).
fn check_log_dir(shared: &Shared, dir: &Path, manifest: &Path) -> Result<(), String> {
    if dir.exists() && !dir.is_dir() {
        return Err(format!(
            "{} is not a directory (appenddirname)",
            dir.display()
        ));
    }
    if manifest.exists() || !dir.exists() {
        return Ok(());
    }
    let name = shared.config.read().persistence.appendfilename.clone();
    let files: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.starts_with(&format!("{name}.")) && !f.ends_with(".tmp"))
        .collect();
    match files.is_empty() {
        true => Ok(()),
        false => Err(format!(
            "{} holds append-only files ({}) but no manifest {}; refusing to start without knowing which make the dataset",
            dir.display(),
            files.join(", "),
            manifest.display()
        )),
    }
}

fn load_snapshot(applier: &mut Applier<'_>, path: &Path, corrupt_ok: bool) -> Result<(), String> {
    let file = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let body = match check_snapshot(&file) {
        Ok(body) => body,
        Err((Damage::NotOurs, _)) => {
            return Err(format!("{}: {}", path.display(), Damage::NotOurs));
        }
        Err((damage, body)) if corrupt_ok => {
            tracing::warn!(
                "snapshot {} is {damage}; loading the records that decode (load-corrupt-snapshot yes)",
                path.display()
            );
            if let Err(e) = apply(applier, body, true, true) {
                tracing::warn!("the damaged snapshot's load stopped: {e}");
            }
            return Ok(());
        }
        Err((damage, _)) => {
            return Err(format!(
                "snapshot {} is {damage}; refusing to start on part of a dataset (move the file away, or set load-corrupt-snapshot yes)",
                path.display()
            ));
        }
    };
    apply(applier, body, true, false).map_err(|e| format!("snapshot {}: {e}", path.display()))
}

fn load_log(
    applier: &mut Applier<'_>,
    dir: &Path,
    manifest: &Path,
    truncated_ok: bool,
) -> Result<LoadedLog, String> {
    let text = std::fs::read_to_string(manifest)
        .map_err(|e| format!("cannot read {}: {e}", manifest.display()))?;
    let mut entries = parse_manifest(&text).map_err(|e| format!("{}: {e}", manifest.display()))?;
    // History files are being replaced: they hold nothing to load.
    entries.retain(|e| e.kind != 'h');
    if entries.is_empty() {
        return Err(format!("{} lists no files", manifest.display()));
    }
    let last_incr = entries.iter().rposition(|e| e.kind == 'i');
    let mut loaded = LoadedLog {
        entries: entries.clone(),
        last_incr_len: 0,
        size: 0,
    };
    for (i, e) in entries.iter().enumerate() {
        let path = dir.join(&e.name);
        let file =
            std::fs::read(&path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        loaded.size += file.len() as u64;
        if e.name.ends_with(".lhs") {
            let body = check_snapshot(&file)
                .map_err(|(d, _)| format!("append-only base {} is {d}", path.display()))?;
            apply(applier, body, true, false)
                .map_err(|err| format!("{}: {err}", path.display()))?;
            end_outside_frame(applier, &path, false)?;
            continue;
        }
        let inc = check_increment(&file)
            .map_err(|d| format!("append-only file {} is {d}", path.display()))?;
        if inc.torn > 0 {
            let last = Some(i) == last_incr;
            if !last || !truncated_ok {
                return Err(format!(
                    "append-only file {} ends with {} bytes of a torn write (aof-load-truncated {})",
                    path.display(),
                    inc.torn,
                    if truncated_ok { "yes, but it is not the last file" } else { "no" }
                ));
            }
            tracing::warn!(
                "!!! Warning: short read while loading the append-only file {}: the last {} bytes (a torn write) are dropped and the file is truncated",
                path.display(),
                inc.torn
            );
            truncate(&path, inc.verified, &[])?;
            loaded.size -= inc.torn as u64;
        }
        apply(applier, &file[..inc.verified], false, false)
            .map_err(|err| format!("{}: {err}", path.display()))?;
        let last = Some(i) == last_incr;
        let mut whole = inc.verified;
        if let Some(open) = end_outside_frame(applier, &path, last && truncated_ok)? {
            // The segment cut short gets its checksum, so the log verifies
            // and the writer's next segments follow whole ones.
            let seal = match open.segment < open.at {
                true => segment_crc(crc32(&file[open.segment..open.at])),
                false => Vec::new(),
            };
            truncate(&path, open.at, &seal)?;
            let kept = open.at + seal.len();
            loaded.size = loaded.size + kept as u64 - whole as u64;
            whole = kept;
        }
        if last {
            loaded.last_incr_len = whole as u64;
        }
    }
    Ok(loaded)
}

/// After a file: a transaction left open (the server stopped between two
/// segments of its frame) is dropped whole, nothing of it applied, when
/// `drop_ok` (the last increment, `aof-load-truncated yes`): returned, for
/// the file to be cut where its `MULTI` starts, as Redis does with a log
/// that ends inside MULTI. Otherwise it is an error.
fn end_outside_frame(
    applier: &mut Applier<'_>,
    path: &Path,
    drop_ok: bool,
) -> Result<Option<OpenTx>, String> {
    let Some(open) = applier.tx.take() else {
        return Ok(None);
    };
    let at = open.at;
    if !drop_ok {
        return Err(format!(
            "{} ends inside a transaction (MULTI at byte {at}, no EXEC; aof-load-truncated no, or not the last file)",
            path.display()
        ));
    }
    tracing::warn!(
        "!!! Warning: the append-only file {} ends inside a transaction: its {} records are dropped and the file is truncated at byte {at}",
        path.display(),
        open.queued.len()
    );
    Ok(Some(open))
}

/// Cuts the file at `path` to `len` bytes and appends `then`, on disk.
fn truncate(path: &Path, len: usize, then: &[u8]) -> Result<(), String> {
    use std::io::{Seek, Write};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|err| format!("cannot truncate {}: {err}", path.display()))?;
    f.set_len(len as u64)
        .and_then(|()| f.seek(std::io::SeekFrom::Start(len as u64)))
        .and_then(|_| f.write_all(then))
        .and_then(|()| f.sync_all())
        .map_err(|err| format!("cannot truncate {}: {err}", path.display()))
}
