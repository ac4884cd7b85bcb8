//! The persistence thread: the one owner of the files. It takes the
//! requests commands post (`status.rs`), applies the `save` rules, keeps
//! the append-only log's writer running as `appendonly` says, and rewrites
//! the log when asked or when it has grown past `auto-aof-rewrite-*`.
//!
//! **A snapshot** (SAVE, BGSAVE, a `save` rule, SHUTDOWN) is a full sync's
//! cut and image (`replication::snapshot`) written to `temp-<pid>-<run>.lhs` in
//! `dir`, fsynced, renamed over `dbfilename` and the directory fsynced:
//! a crash at any point leaves the old snapshot or the new one, whole. The
//! server keeps serving throughout; the snapshot holds every write before
//! its cut and none after.
//!
//! **A log rewrite**: a new increment file is created and listed in the
//! manifest after the old files; at the cut the writer switches to it at
//! exactly the cut's offset; the image becomes the new base file; then the
//! manifest lists only the new base and increment, and the old files go.
//! A crash before the last step loads the old files plus the new
//! increment, which continue each other exactly.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::save_rules;
use crate::persist::aof::{Fsync, Writer};
use crate::persist::format::{
    parse_manifest, render_manifest, trailer, CrcWriter, ManifestEntry, SNAPSHOT_MAGIC,
};
use crate::persist::load::{aof_paths, snapshot_path, LoadedLog};
use crate::persist::status::{Request, REFUSE_LOG, REFUSE_SNAPSHOT};
use crate::replication::snapshot::{cut, write_body};
use crate::shard::Mailbox;
use crate::state::Shared;

/// After a failed snapshot or rewrite, the rules wait this long to retry
/// (Redis's 5 s).
const RETRY: Duration = Duration::from_secs(5);

/// The running persistence thread.
#[derive(Debug)]
pub struct Daemon {
    thread: JoinHandle<Option<Writer>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Daemon {
    /// Starts it. `loaded` is the log the start loaded, to go on with.
    /// With `appendonly yes` the log is running when this returns (went on
    /// with, or started by a rewrite), so the first write the server takes
    /// is in it.
    ///
    /// # Errors
    /// The system refused a thread.
    pub fn spawn(
        shared: Arc<Shared>,
        mailboxes: Arc<Vec<Mailbox>>,
        loaded: Option<LoadedLog>,
    ) -> std::io::Result<Daemon> {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let unix_s = shared.clock.now().unix_ms / 1000;
        shared
            .persist
            .last_save_unix
            .store(unix_s, Ordering::Relaxed);
        shared.persist.last_save_secs.store(-1, Ordering::Relaxed);
        shared
            .persist
            .last_rewrite_secs
            .store(-1, Ordering::Relaxed);
        remove_temp_files(&shared);
        // What was loaded is on disk already: no change since the last save.
        let changes = shared.sum(|s| s.changes.get());
        shared
            .persist
            .changes_at_save
            .store(changes, Ordering::Relaxed);
        let full_syncs_seen = shared.repl.full_syncs_taken.load(Ordering::SeqCst);
        let mut d = Files {
            shared,
            mailboxes,
            log: None,
            loaded,
            retry_save: None,
            retry_rewrite: None,
            rewrite_wanted: false,
            full_syncs_seen,
            log_error: None,
        };
        d.keep_log();
        if d.shared.config.read().persistence.appendonly && d.log.is_none() {
            let why = d.log_error.take().unwrap_or_default();
            return Err(std::io::Error::other(format!(
                "cannot start the append-only log: {why}"
            )));
        }
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("leasehold-persist".into())
                .spawn(move || {
                    d.run(&stop);
                    d.log.take().map(|l| l.writer)
                })?
        };
        Ok(Daemon { thread, stop })
    }

    /// Stops the thread; the log's writer writes the stream to its end and
    /// fsyncs. Call once every shard has stopped.
    pub fn finish(self, shared: &Shared) {
        self.stop.store(true, Ordering::SeqCst);
        shared.persist.wake();
        if let Ok(Some(writer)) = self.thread.join() {
            writer.finish(shared);
        }
    }
}

/// The log as it is on disk, with its writer.
struct Log {
    writer: Writer,
    /// The directory its files are in (`dir`/`appenddirname` when it began).
    dir: PathBuf,
    /// The manifest's entries, in load order.
    entries: Vec<ManifestEntry>,
    /// Sequence number of the newest file.
    seq: u64,
}

impl Log {
    /// Bytes of its files on disk.
    fn size(&self) -> u64 {
        self.entries
            .iter()
            .filter_map(|e| std::fs::metadata(self.dir.join(&e.name)).ok())
            .map(|m| m.len())
            .sum()
    }
}

struct Files {
    shared: Arc<Shared>,
    mailboxes: Arc<Vec<Mailbox>>,
    log: Option<Log>,
    loaded: Option<LoadedLog>,
    retry_save: Option<Instant>,
    retry_rewrite: Option<Instant>,
    /// A rewrite asked for while a replica loaded its primary's payload.
    rewrite_wanted: bool,
    /// The replica's full syncs seen: each needs a rewrite of the log.
    full_syncs_seen: u64,
    /// Why the log last failed to start.
    log_error: Option<String>,
}

impl Files {
    fn run(&mut self, stop: &std::sync::atomic::AtomicBool) {
        let shared = self.shared.clone();
        let persist = &shared.persist;
        let mut policy = None;
        loop {
            let requests = persist.take_requests(Duration::from_millis(100));
            if stop.load(Ordering::SeqCst) {
                return;
            }
            for r in requests {
                match r {
                    Request::Save(ticket) => {
                        let r = self.save();
                        if let Some(t) = ticket {
                            t.finish(r);
                        }
                    }
                    // A replica loading its primary's payload has half a
                    // dataset: the rewrite waits until it is loaded.
                    Request::Rewrite => self.rewrite_wanted = true,
                }
            }
            if self.shared.repl.is_loading() || self.shared.shutting_down.load(Ordering::SeqCst) {
                continue;
            }
            if std::mem::take(&mut self.rewrite_wanted) {
                let _ = self.rewrite_logged();
            }
            self.keep_log();
            let now = Fsync::of(&self.shared);
            // CONFIG SET appendfsync: writers wait for the disk from now on,
            // or stop waiting.
            match self.log.as_ref().is_some_and(|l| l.writer.armed()) {
                true if policy != Some(now) => {
                    let backlog = &self.shared.repl.backlog;
                    backlog.set_sync_always(now == Fsync::Always);
                    policy = Some(now);
                }
                true => {}
                false => policy = None,
            }
            if self.save_due() {
                let _ = self.save();
            }
            let refuse = {
                let c = self.shared.config.read();
                let p = &c.persistence;
                if p.appendonly && self.log.is_none() {
                    REFUSE_LOG
                } else if p.stop_writes_on_bgsave_error
                    && !p.save.trim().is_empty()
                    && persist.last_save_failed.load(Ordering::SeqCst)
                {
                    REFUSE_SNAPSHOT
                } else {
                    0
                }
            };
            persist.refuse_writes.store(refuse, Ordering::Relaxed);
        }
    }

    /// Starts, stops or rewrites the log as `appendonly`, its writer's
    /// health, `dir` and its size say.
    fn keep_log(&mut self) {
        let on = self.shared.config.read().persistence.appendonly;
        let shared = self.shared.clone();
        let persist = &shared.persist;
        let Some(log) = &self.log else {
            if !on {
                return;
            }
            if let Some(loaded) = self.loaded.take() {
                match self.go_on(loaded) {
                    Ok(()) => return,
                    Err(e) => {
                        tracing::warn!("cannot go on with the loaded log: {e}; rewriting it")
                    }
                }
            }
            if self.retry_rewrite.is_none_or(|t| Instant::now() >= t) {
                let _ = self.rewrite_logged();
            }
            return;
        };
        if !on {
            if let Some(log) = self.log.take() {
                log.writer.finish(&shared);
            }
            persist.aof_on.store(false, Ordering::SeqCst);
            tracing::info!("append-only log stopped (appendonly no)");
            return;
        }
        let size = log.size();
        persist.aof_size.store(size, Ordering::Relaxed);
        let full_syncs = shared.repl.full_syncs_taken.load(Ordering::SeqCst);
        if full_syncs != self.full_syncs_seen {
            // The dataset was replaced and the stream restarted: seen once
            // a rewrite worked (a failed one is retried after its pause).
            if self.retry_rewrite.is_some_and(|t| Instant::now() < t) {
                return;
            }
            tracing::info!("a full sync replaced the dataset: rewriting the append-only log");
            // The stream restarted at the primary's offset: the writer,
            // which follows the old offsets, cannot reach a cut in the new
            // ones; the log starts again from the rewrite's cut.
            if let Some(log) = self.log.take() {
                log.writer.finish(&shared);
            }
            persist.aof_on.store(false, Ordering::SeqCst);
            if self.rewrite_logged().is_ok() {
                self.full_syncs_seen = full_syncs;
            }
            return;
        }
        if let Some(why) = log.writer.failure() {
            tracing::warn!("{why}; rewriting the append-only log");
            if let Some(log) = self.log.take() {
                log.writer.finish(&shared);
            }
            persist.aof_on.store(false, Ordering::SeqCst);
            persist.aof_write_failed.store(true, Ordering::SeqCst);
            let _ = self.rewrite_logged();
            return;
        }
        let (pct, min) = {
            let c = shared.config.read();
            let p = &c.persistence;
            (
                u64::from(p.auto_aof_rewrite_percentage),
                p.auto_aof_rewrite_min_size as u64,
            )
        };
        let base = persist.aof_base_size.load(Ordering::Relaxed).max(1);
        if pct > 0 && size > min && size * 100 >= base * (100 + pct) {
            tracing::info!("Starting automatic rewriting of the append-only log: {size} bytes, {base} after the last rewrite");
            let _ = self.rewrite_logged();
        }
    }

    /// Whether a `save` rule asks for a snapshot now.
    fn save_due(&self) -> bool {
        if self.retry_save.is_some_and(|t| Instant::now() < t) {
            return false;
        }
        let rules = save_rules(&self.shared.config.read().persistence.save).unwrap_or_default();
        if rules.is_empty() {
            return false;
        }
        let persist = &self.shared.persist;
        let changes = self.changes() - persist.changes_at_save.load(Ordering::Relaxed);
        let now_s = self.shared.clock.now().unix_ms / 1000;
        let since = now_s.saturating_sub(persist.last_save_unix.load(Ordering::Relaxed));
        rules.iter().any(|&(secs, n)| changes >= n && since >= secs)
    }

    /// The process id and the start of the run id: two servers in one
    /// process (tests) never write the same temporary file.
    fn temp_id(&self) -> String {
        format!("{}-{}", std::process::id(), &self.shared.run_id[..8])
    }

    fn changes(&self) -> u64 {
        self.shared.sum(|s| s.changes.get())
    }

    /// Writes a snapshot to `dbfilename`.
    fn save(&mut self) -> Result<(), String> {
        let shared = self.shared.clone();
        let persist = &shared.persist;
        if shared.repl.is_loading() {
            return Err("the dataset is loading".into());
        }
        let started = Instant::now();
        persist.saving.store(true, Ordering::SeqCst);
        persist
            .save_started_ms
            .store(self.shared.clock.now().unix_ms, Ordering::Relaxed);
        let path = snapshot_path(&self.shared);
        let tmp = path.with_file_name(format!("temp-{}.lhs", self.temp_id()));
        let mut changes = 0;
        let r = self
            .write_snapshot(&tmp, |_| changes = self.changes())
            .and_then(|(records, bytes)| {
                std::fs::rename(&tmp, &path)?;
                sync_dir(&path)?;
                Ok((records, bytes))
            });
        persist.saving.store(false, Ordering::SeqCst);
        match r {
            Ok((records, bytes)) => {
                persist.changes_at_save.store(changes, Ordering::Relaxed);
                let unix_s = self.shared.clock.now().unix_ms / 1000;
                persist.last_save_unix.store(unix_s, Ordering::Relaxed);
                persist.last_save_failed.store(false, Ordering::SeqCst);
                persist
                    .last_save_secs
                    .store(started.elapsed().as_secs() as i64, Ordering::Relaxed);
                persist.saves.fetch_add(1, Ordering::Relaxed);
                self.retry_save = None;
                tracing::info!(
                    "DB saved on disk: {} ({records} records, {bytes} bytes) in {} ms",
                    path.display(),
                    started.elapsed().as_millis()
                );
                Ok(())
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                persist.last_save_failed.store(true, Ordering::SeqCst);
                self.retry_save = Some(Instant::now() + RETRY);
                tracing::warn!("Background saving error: {}: {e}", path.display());
                Err(format!("{}: {e}", path.display()))
            }
        }
    }

    /// Writes a snapshot file at `path` (created or replaced), fsynced;
    /// `at_cut` runs at the cut. Returns its record count and size.
    fn write_snapshot(&self, path: &Path, at_cut: impl FnOnce(u64)) -> std::io::Result<(u64, u64)> {
        let file = File::create(path)?;
        let mut w = BufWriter::with_capacity(1 << 20, CrcWriter::new(file));
        w.write_all(SNAPSHOT_MAGIC)?;
        let done = cut(&self.shared, &self.mailboxes, || Ok(()), at_cut)?;
        let shared = &self.shared;
        let records = write_body(shared, &done, &mut w, || {
            !shared.shutting_down.load(Ordering::SeqCst)
        })?;
        let mut crc = w.into_inner().map_err(|e| e.into_error())?;
        let t = trailer(crc.crc());
        crc.inner_mut().write_all(&t)?;
        crc.inner_mut().sync_all()?;
        Ok((records, crc.written() + t.len() as u64))
    }

    fn rewrite_logged(&mut self) -> Result<(), String> {
        let shared = self.shared.clone();
        let persist = &shared.persist;
        let started = Instant::now();
        persist.rewriting.store(true, Ordering::SeqCst);
        let r = self.rewrite();
        persist.rewriting.store(false, Ordering::SeqCst);
        match r {
            Ok(()) => {
                persist.last_rewrite_failed.store(false, Ordering::SeqCst);
                persist.aof_write_failed.store(false, Ordering::SeqCst);
                persist
                    .last_rewrite_secs
                    .store(started.elapsed().as_secs() as i64, Ordering::Relaxed);
                persist.rewrites.fetch_add(1, Ordering::Relaxed);
                persist.aof_on.store(true, Ordering::SeqCst);
                self.retry_rewrite = None;
                self.log_error = None;
                tracing::info!(
                    "Background append-only log rewrite finished in {} ms",
                    started.elapsed().as_millis()
                );
                Ok(())
            }
            Err(e) => {
                persist.last_rewrite_failed.store(true, Ordering::SeqCst);
                self.retry_rewrite = Some(Instant::now() + RETRY);
                tracing::warn!("Background append-only log rewrite failed: {e}");
                self.log_error = Some(e.to_string());
                Err(e.to_string())
            }
        }
    }

    /// Rewrites the log (or starts it: no log yet, or a new `dir`) from a
    /// cut; see the module's docs for the steps and why a crash at any of
    /// them loses nothing.
    fn rewrite(&mut self) -> std::io::Result<()> {
        let (dir, manifest) = aof_paths(&self.shared);
        let name = self.shared.config.read().persistence.appendfilename.clone();
        std::fs::create_dir_all(&dir)?;
        // A log in another directory (`dir` changed) is left as it is: the
        // new one starts from this cut.
        let same_dir = self.log.as_ref().filter(|l| l.dir == dir);
        let seq = same_dir.map_or(0, |l| l.seq).max(newest_seq(&dir, &name)) + 1;
        let incr_name = format!("{name}.{seq}.incr.aof");
        let base_name = format!("{name}.{seq}.base.lhs");
        let incr_path = dir.join(&incr_name);
        // Never an existing file: it could be the one the writer appends to.
        let incr = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&incr_path)?;
        let incr_entry = ManifestEntry {
            name: incr_name,
            seq,
            kind: 'i',
        };
        // A log this server did not load (appendonly was off at the start,
        // or `dir` changed) that a manifest here lists: replaced by this
        // rewrite, its files go once it is done.
        let replaced: Vec<ManifestEntry> = match same_dir {
            Some(_) => Vec::new(),
            None => std::fs::read_to_string(&manifest)
                .ok()
                .and_then(|t| parse_manifest(&t).ok())
                .unwrap_or_default(),
        };
        let history: Vec<ManifestEntry> = match same_dir {
            // A crash before the rewrite ends loads the old files, then the
            // new increment: they continue each other.
            Some(l) => l
                .entries
                .iter()
                .cloned()
                .chain([incr_entry.clone()])
                .collect(),
            None => Vec::new(),
        };
        if !history.is_empty() {
            if let Err(e) = write_manifest(&manifest, &history) {
                let _ = std::fs::remove_file(&incr_path);
                return Err(e);
            }
        }
        let tmp = dir.join(format!("temp-rewrite-{}.lhs", self.temp_id()));
        let shared = self.shared.clone();
        let mut started: Option<std::io::Result<Writer>> = None;
        let mut cut_at = None;
        let log = &self.log;
        let written = self.write_snapshot(&tmp, |m| {
            cut_at = Some(m);
            match log {
                Some(log) => log.writer.switch_at(m, incr),
                None => started = Some(Writer::start(shared, incr, m, 0, false)),
            }
        });
        let Some(at) = cut_at else {
            // No cut: the writer never saw the new increment.
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_file(&incr_path);
            if let Some(l) = self
                .log
                .as_ref()
                .filter(|l| !history.is_empty() && l.dir == dir)
            {
                let _ = write_manifest(&manifest, &l.entries);
            }
            return Err(written
                .err()
                .unwrap_or_else(|| std::io::Error::other("no cut")));
        };
        // From the cut on the writer appends to the new increment: the log's
        // files are the history the manifest on disk lists.
        match started {
            Some(Ok(writer)) => {
                self.log = Some(Log {
                    writer,
                    dir: dir.clone(),
                    entries: vec![incr_entry.clone()],
                    seq,
                })
            }
            Some(Err(e)) => {
                let _ = std::fs::remove_file(&tmp);
                let _ = std::fs::remove_file(&incr_path);
                return Err(e);
            }
            None => {
                if let Some(log) = self.log.as_mut() {
                    log.entries = match history.is_empty() {
                        true => vec![incr_entry.clone()],
                        false => history.clone(),
                    };
                    log.dir = dir.clone();
                    log.seq = seq;
                }
            }
        }
        let finish = (|| -> std::io::Result<u64> {
            let (_, base_bytes) = written?;
            std::fs::rename(&tmp, dir.join(&base_name))?;
            let Some(log) = self.log.as_mut() else {
                return Err(std::io::Error::other("no log writer"));
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            while !log.writer.switched() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            if !log.writer.switched() {
                return Err(std::io::Error::other("the writer did not reach the cut"));
            }
            let entries = vec![
                ManifestEntry {
                    name: base_name.clone(),
                    seq,
                    kind: 'b',
                },
                incr_entry.clone(),
            ];
            write_manifest(&manifest, &entries)?;
            for old in log.entries.iter().chain(&replaced) {
                if !entries.iter().any(|e| e.name == old.name) {
                    let _ = std::fs::remove_file(dir.join(&old.name));
                }
            }
            log.entries = entries;
            if !log.writer.armed() {
                log.writer.arm(&self.shared);
            }
            Ok(base_bytes)
        })();
        match finish {
            Ok(base_bytes) => {
                let persist = &self.shared.persist;
                persist.aof_base_size.store(base_bytes, Ordering::Relaxed);
                persist.aof_size.store(base_bytes, Ordering::Relaxed);
                tracing::info!("append-only log rewritten at offset {at}: base {base_bytes} bytes");
                Ok(())
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                // A first log whose base failed is in no manifest: it stops.
                if self.log.as_ref().is_some_and(|l| !l.writer.armed()) {
                    if let Some(log) = self.log.take() {
                        log.writer.finish(&self.shared);
                    }
                    let _ = std::fs::remove_file(&incr_path);
                }
                Err(e)
            }
        }
    }

    /// Goes on appending to the log loaded at the start.
    fn go_on(&mut self, loaded: LoadedLog) -> std::io::Result<()> {
        let (dir, _) = aof_paths(&self.shared);
        let Some(last) = loaded.entries.iter().rev().find(|e| e.kind == 'i') else {
            return Err(std::io::Error::other("the manifest lists no increment"));
        };
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(&last.name))?;
        let from = self.shared.repl.backlog.offset();
        let writer = Writer::start(self.shared.clone(), file, from, loaded.last_incr_len, true)?;
        let seq = loaded.entries.iter().map(|e| e.seq).max().unwrap_or(0);
        let persist = &self.shared.persist;
        persist.aof_base_size.store(loaded.size, Ordering::Relaxed);
        persist.aof_size.store(loaded.size, Ordering::Relaxed);
        persist.aof_on.store(true, Ordering::SeqCst);
        self.log = Some(Log {
            writer,
            dir,
            entries: loaded.entries,
            seq,
        });
        Ok(())
    }
}

/// Removes the temporary files a killed snapshot or rewrite left (each a
/// whole dataset's size): `temp-*.lhs` in `dir`, `temp-rewrite-*.lhs` in
/// the log's directory.
fn remove_temp_files(shared: &Shared) {
    let (aof_dir, _) = aof_paths(shared);
    let snapshot = snapshot_path(shared);
    let dirs = [
        (snapshot.parent().map(Path::to_path_buf), "temp-"),
        (Some(aof_dir), "temp-rewrite-"),
    ];
    for (dir, prefix) in dirs {
        let Some(Ok(rd)) = dir.map(std::fs::read_dir) else {
            continue;
        };
        for e in rd.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(prefix) && name.ends_with(".lhs") {
                tracing::info!(
                    "removing {}, left by an interrupted snapshot",
                    e.path().display()
                );
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// The largest sequence number among the log's files in `dir`.
fn newest_seq(dir: &Path, name: &str) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| {
            let f = e.file_name().to_string_lossy().into_owned();
            let rest = f.strip_prefix(name)?.strip_prefix('.')?;
            rest.split('.').next()?.parse::<u64>().ok()
        })
        .max()
        .unwrap_or(0)
}

/// Writes the manifest whole: a temporary file, fsynced, renamed over it.
fn write_manifest(path: &Path, entries: &[ManifestEntry]) -> std::io::Result<()> {
    let tmp = path.with_extension("manifest.tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(render_manifest(entries).as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    sync_dir(path)
}

/// Fsyncs the directory holding `path`, so a rename in it is on disk.
fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir: PathBuf = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    File::open(dir)?.sync_all()
}
