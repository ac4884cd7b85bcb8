//! The server-wide script cache and each shard's script run state.
//!
//! Script bodies are kept once for the whole server, by SHA1 (lower-case
//! hex), so a SCRIPT LOAD on one connection makes EVALSHA work on every
//! thread; each thread's Lua VM compiles a body the first time it runs it
//! (`script::vm`). SCRIPT FLUSH empties the cache and bumps its
//! generation, which every VM compares before it runs a script, so a
//! flushed script is gone everywhere.
//!
//! A shard running a script past `busy-reply-threshold` says so in its
//! [`RunState`], which other threads read: their connections get `-BUSY`
//! for that shard, and SCRIPT KILL asks the script to stop there. A script
//! over several shards runs on one of them and marks the others held for
//! it ([`ScriptCache::hold_for`]): they count as busy when it is.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;

/// A script's SHA1 as 40 lower-case hex digits.
pub type Sha = [u8; 40];

/// The SHA1 of `body`, as SCRIPT LOAD answers it.
pub fn sha1_hex(body: &[u8]) -> Sha {
    let hex = sha1_smol::Sha1::from(body).digest().to_string();
    let mut sha = [0u8; 40];
    sha.copy_from_slice(hex.as_bytes());
    sha
}

/// `text` as a [`Sha`] key: lower-cased when it is 40 bytes long (EVALSHA
/// takes either case, as Redis does), `None` otherwise (no script has it).
pub fn parse_sha(text: &[u8]) -> Option<Sha> {
    let mut sha: Sha = text.try_into().ok()?;
    sha.make_ascii_lowercase();
    Some(sha)
}

/// Every script body the server knows, by SHA1.
#[derive(Debug, Default)]
pub struct ScriptCache {
    bodies: RwLock<hashbrown::HashMap<Sha, Cached>>,
    /// How many cached scripts run holding every shard: while none does,
    /// [`ScriptCache::every_shard`] answers from this one load.
    every_shard: AtomicUsize,
    generation: AtomicU64,
    runs: Vec<Arc<RunState>>,
}

/// A cached script: its body, and whether it runs holding every shard.
#[derive(Debug)]
struct Cached {
    body: Bytes,
    every_shard: bool,
}

impl ScriptCache {
    /// An empty cache for a server of `shards` shards.
    pub fn new(shards: usize) -> ScriptCache {
        ScriptCache {
            runs: (0..shards).map(|_| Arc::default()).collect(),
            ..ScriptCache::default()
        }
    }

    /// The body of script `sha`.
    pub fn body(&self, sha: &Sha) -> Option<Bytes> {
        self.bodies.read().get(sha).map(|c| c.body.clone())
    }

    /// Keeps `body` under `sha` (its SHA1); `every_shard` says that it runs
    /// holding every shard (the caller judged its body).
    pub fn insert(&self, sha: Sha, body: Bytes, every_shard: bool) {
        if self.bodies.read().contains_key(&sha) {
            return;
        }
        let mut bodies = self.bodies.write();
        let cached = Cached { body, every_shard };
        if bodies.insert(sha, cached).is_none() && every_shard {
            self.every_shard.fetch_add(1, Ordering::Release);
        }
    }

    /// Whether cached script `sha` runs holding every shard (false when
    /// it is not cached). One atomic load while no cached script does.
    #[inline]
    pub fn every_shard(&self, sha: &Sha) -> bool {
        self.every_shard.load(Ordering::Acquire) != 0
            && self.bodies.read().get(sha).is_some_and(|c| c.every_shard)
    }

    /// Whether script `sha` is cached.
    pub fn contains(&self, sha: &Sha) -> bool {
        self.bodies.read().contains_key(sha)
    }

    /// Forgets every script (SCRIPT FLUSH): each VM drops its compiled
    /// functions before it runs its next script.
    pub fn flush(&self) {
        let mut bodies = self.bodies.write();
        bodies.clear();
        self.every_shard.store(0, Ordering::Release);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Counts flushes; a VM compiled under an older one drops its functions.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Shard `shard`'s run state.
    pub fn run_state(&self, shard: usize) -> &Arc<RunState> {
        &self.runs[shard]
    }

    /// Whether shard `shard` runs a script past `busy-reply-threshold`, or
    /// is held for one running on another shard ([`ScriptCache::hold_for`]).
    /// One relaxed load when neither: the dispatcher asks before it routes
    /// a command to another shard.
    #[inline]
    pub fn busy(&self, shard: usize) -> bool {
        let Some(r) = self.runs.get(shard) else {
            return false;
        };
        let s = r.0.load(Ordering::Relaxed);
        if s & RunState::BUSY != 0 {
            return true;
        }
        match s >> RunState::HOME_SHIFT {
            0 => false,
            home => self
                .runs
                .get(home as usize - 1)
                .is_some_and(|h| h.0.load(Ordering::Relaxed) & RunState::BUSY != 0),
        }
    }

    /// Shutdown: every script stops at its next check past the threshold,
    /// written or not, and writes no more.
    pub fn stop_all(&self) {
        for run in &self.runs {
            run.0.fetch_or(RunState::KILL, Ordering::AcqRel);
        }
    }

    /// Marks `shards` (but `home`) held by the script about to run on
    /// shard `home` with them locked, until the returned guard drops: a
    /// held shard is [`ScriptCache::busy`] while that script is, so the
    /// connections of its thread are served meanwhile (SCRIPT KILL among
    /// them) and the commands for it answer `-BUSY`.
    pub fn hold_for<'a>(&'a self, shards: &'a [usize], home: usize) -> HeldForScript<'a> {
        let mark = (home as u32 + 1) << RunState::HOME_SHIFT;
        for &s in shards.iter().filter(|&&s| s != home) {
            self.runs[s].0.fetch_or(mark, Ordering::AcqRel);
        }
        HeldForScript {
            cache: self,
            shards,
            home,
        }
    }

    /// SCRIPT KILL: asks every shard whose script is busy and has not
    /// written to stop it.
    pub fn kill(&self) -> KillOutcome {
        let mut outcome = KillOutcome::NotBusy;
        for run in &self.runs {
            match run.request_kill() {
                KillOutcome::Killed => outcome = KillOutcome::Killed,
                KillOutcome::Unkillable if outcome == KillOutcome::NotBusy => {
                    outcome = KillOutcome::Unkillable
                }
                _ => {}
            }
        }
        outcome
    }
}

/// What SCRIPT KILL found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillOutcome {
    /// No script is busy (`NOTBUSY`).
    NotBusy,
    /// Every busy script has written (`UNKILLABLE`): stopping it would
    /// leave half its writes.
    Unkillable,
    /// At least one busy script will stop at its next check.
    Killed,
}

/// Shards held for a script over several ([`ScriptCache::hold_for`]);
/// dropping it unmarks them.
#[derive(Debug)]
pub struct HeldForScript<'a> {
    cache: &'a ScriptCache,
    shards: &'a [usize],
    home: usize,
}

impl Drop for HeldForScript<'_> {
    fn drop(&mut self) {
        let keep = (1 << RunState::HOME_SHIFT) - 1;
        for &s in self.shards.iter().filter(|&&s| s != self.home) {
            self.cache.runs[s].0.fetch_and(keep, Ordering::AcqRel);
        }
    }
}

/// One shard's script run state, shared with every thread: bits
/// [`RunState::BUSY`], [`RunState::WROTE`], [`RunState::KILL`], and above
/// [`RunState::HOME_SHIFT`] one more than the shard whose script holds
/// this one (0: none). Only a script that has passed the threshold writes
/// the bits (so a short script costs no shared write), SCRIPT KILL, and a
/// script over several shards the holder.
#[derive(Debug, Default)]
pub struct RunState(AtomicU32);

impl RunState {
    /// A script runs here past `busy-reply-threshold`.
    pub const BUSY: u32 = 1;
    /// That script has written: it cannot be killed.
    pub const WROTE: u32 = 2;
    /// SCRIPT KILL asked it to stop.
    pub const KILL: u32 = 4;
    /// Where the holding script's shard (plus one) starts.
    pub const HOME_SHIFT: u32 = 8;

    /// The running script passed the threshold (`wrote`: it has written).
    pub fn publish_busy(&self, wrote: bool) {
        let bits = Self::BUSY | if wrote { Self::WROTE } else { 0 };
        self.0.fetch_or(bits, Ordering::AcqRel);
    }

    /// The busy script is about to write. False when a kill came first:
    /// the script must stop without writing.
    pub fn note_write(&self) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s & Self::KILL == 0).then_some(s | Self::WROTE)
            })
            .is_ok()
    }

    /// Whether SCRIPT KILL asked the busy script to stop.
    pub fn kill_requested(&self) -> bool {
        self.0.load(Ordering::Acquire) & Self::KILL != 0
    }

    /// The script ended: not busy any more (a holder's mark stays).
    pub fn clear(&self) {
        let keep = !((1 << Self::HOME_SHIFT) - 1);
        self.0.fetch_and(keep, Ordering::Release);
    }

    fn request_kill(&self) -> KillOutcome {
        let mut outcome = KillOutcome::NotBusy;
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                if s & Self::BUSY == 0 {
                    outcome = KillOutcome::NotBusy;
                    None
                } else if s & Self::WROTE != 0 {
                    outcome = KillOutcome::Unkillable;
                    None
                } else {
                    outcome = KillOutcome::Killed;
                    Some(s | Self::KILL)
                }
            });
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha_of_a_body_is_redis_script_load_answer() {
        assert_eq!(
            &sha1_hex(b"return 'hi'"),
            b"2f31ba2bb6d6a0f42cc159d2e2dad55440778de3"
        );
        assert_eq!(
            parse_sha(b"2F31BA2BB6D6A0F42CC159D2E2DAD55440778DE3"),
            Some(sha1_hex(b"return 'hi'"))
        );
        assert_eq!(parse_sha(b"abc"), None);
    }

    #[test]
    fn kill_stops_only_a_busy_script_that_has_not_written() {
        let cache = ScriptCache::new(2);
        assert_eq!(cache.kill(), KillOutcome::NotBusy);
        cache.run_state(1).publish_busy(false);
        assert!(cache.busy(1) && !cache.busy(0));
        assert_eq!(cache.kill(), KillOutcome::Killed);
        assert!(cache.run_state(1).kill_requested());
        // A write after the kill is refused.
        assert!(!cache.run_state(1).note_write());
        cache.run_state(1).clear();
        cache.run_state(0).publish_busy(false);
        assert!(cache.run_state(0).note_write());
        assert_eq!(cache.kill(), KillOutcome::Unkillable);
    }

    #[test]
    fn a_shard_held_for_a_script_is_busy_while_that_script_is() {
        let cache = ScriptCache::new(3);
        let shards = [0, 2];
        let held = cache.hold_for(&shards, 2);
        assert!(!cache.busy(0) && !cache.busy(2));
        cache.run_state(2).publish_busy(false);
        assert!(cache.busy(0) && cache.busy(2) && !cache.busy(1));
        // SCRIPT KILL stops the script on its own shard, once.
        assert_eq!(cache.kill(), KillOutcome::Killed);
        assert!(cache.run_state(2).kill_requested());
        assert!(!cache.run_state(0).kill_requested());
        cache.run_state(2).clear();
        assert!(!cache.busy(0));
        cache.run_state(2).publish_busy(true);
        assert_eq!(cache.kill(), KillOutcome::Unkillable);
        drop(held);
        assert!(!cache.busy(0) && cache.busy(2));
        cache.run_state(2).clear();
        assert!(!cache.busy(2));
    }

    #[test]
    fn flush_forgets_bodies_and_counts() {
        let cache = ScriptCache::new(1);
        let sha = sha1_hex(b"return 1");
        cache.insert(sha, Bytes::from_static(b"return 1"), true);
        assert!(cache.contains(&sha) && cache.every_shard(&sha));
        let g = cache.generation();
        cache.flush();
        assert!(!cache.contains(&sha) && !cache.every_shard(&sha));
        assert_eq!(cache.generation(), g + 1);
    }
}
