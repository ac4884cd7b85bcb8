//! Hot keys on a shard (`docs/hotkeys.md`): the detector (a space-saving
//! top-k of the rate-limit commands' keys, decayed every window), the
//! shard's copy of the split keys, and the owner's side of a split token
//! bucket or GCRA key (run as its equivalent bucket) or sliding window:
//! split, gather, merge, all synchronous on the owner's thread over the
//! shared [`Split`] cells (`ratelimit/split/`); a sliding window's calls on
//! the owner are in `window`.

mod window;

use std::hash::BuildHasher;
use std::sync::Arc;

use bytes::Bytes;

use super::Shard;
use crate::clock::unix_of;
use crate::ratelimit::gcra;
use crate::ratelimit::split::{KeyPolicy, Split};
use crate::ratelimit::token_bucket::{Bucket, Change, Lease};
use crate::ratelimit::RateState;

/// Keys the detector tracks per shard.
pub const TOP_K: usize = 16;

/// The detection window, monotonic ms: counts are read and halved this often.
pub const WINDOW_MS: u64 = 100;

/// Hits (beyond the space-saving error) a key needs in one window before
/// the detector keeps a copy of its name: a uniform load replaces entries
/// all the time and must not allocate for them.
const NAME_AFTER: u64 = 8;

/// Rate-limit commands per window on a shard above which the next window
/// counts one call in [`SAMPLE_ONE_IN`], chosen at random, and scales its
/// rates back up: a busy shard's counting then costs an eighth, while a
/// key at 30% of 4 096 calls still gives about 150 counted hits a window.
/// Below it every call is counted.
const SAMPLE_ABOVE: u64 = 4096;

/// One call in this many is counted on a busy shard (a power of two).
const SAMPLE_ONE_IN: u64 = 8;

/// The `hotkey-*` settings a shard reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotConf {
    /// `hotkey-split`.
    pub split: bool,
    /// `hotkey-split-share`, percent.
    pub share_pct: u64,
    /// `hotkey-min-rate`, commands per second.
    pub min_rate: u64,
    /// `hotkey-merge-rate`, commands per second.
    pub merge_rate: u64,
    /// `hotkey-cooldown`, ms.
    pub cooldown_ms: u64,
}

impl Default for HotConf {
    fn default() -> Self {
        HotConf {
            split: true,
            share_pct: 30,
            min_rate: 5000,
            merge_rate: 1000,
            cooldown_ms: 5000,
        }
    }
}

/// One tracked key.
#[derive(Debug, Clone)]
struct Entry {
    /// Its name, once it had [`NAME_AFTER`] hits in a window.
    name: Option<Bytes>,
    /// What space-saving may have overcounted its hits (`HotTable::hits`)
    /// by this window: the hits of the key it replaced.
    err: u64,
    /// The decayed count: half the last one plus the last window's hits.
    score: u64,
    /// The last window's guaranteed rate, per second, and share, percent.
    rate: u64,
    share: u64,
    /// The kind and policy of its last splittable call (TOKENLEASE,
    /// TOKENRETURN, CL.THROTTLE, GCRA, SLIDINGWINDOW): what a split uses.
    policy: Option<KeyPolicy>,
}

/// The state a split starts from.
#[derive(Debug, Clone, Copy)]
enum Start {
    /// A token bucket, or a TAT as its equivalent bucket.
    Bucket(Bucket),
    /// A sliding window pair.
    Window(crate::ratelimit::sliding_window::Window),
}

/// A split key this shard owns, with what the cooling check remembers.
#[derive(Debug)]
struct Owned {
    split: Arc<Split>,
    /// Local grants on every shard at the last window.
    grants: u64,
    /// Since when its rate has stayed under `hotkey-merge-rate`.
    cool_since: Option<u64>,
    /// The last window's rate, per second.
    rate: u64,
}

/// One line of `LH.HOTKEYS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotLine {
    /// The key.
    pub key: Bytes,
    /// The decayed count.
    pub score: u64,
    /// Commands per second in the last window.
    pub rate: u64,
    /// Percent of this shard's rate-limit commands in the last window.
    pub share: u64,
    /// Whether it is split (this shard owning it).
    pub split: bool,
}

/// A shard's hot-key state.
#[derive(Debug, Default)]
pub struct HotTable {
    /// The registry's generation `splits` was copied at.
    gen: u64,
    /// Every split key, as this shard last copied them.
    pub splits: hashbrown::HashMap<Bytes, Arc<Split>>,
    owned: hashbrown::HashMap<Bytes, Owned>,
    /// How many keys are tracked (at most [`TOP_K`]).
    len: usize,
    /// The tracked keys' hashes and this window's hits (an overestimate
    /// by at most their entry's `err`), kept apart from the rest of their
    /// entries so that the scan each counted command makes reads two
    /// small arrays (256 bytes) and nothing else.
    hashes: [u64; TOP_K],
    hits: [u64; TOP_K],
    /// The rest of each tracked key's entry, by the same index.
    entries: Vec<Entry>,
    total: u64,
    /// This window counts one call in `scale` (1 or [`SAMPLE_ONE_IN`]).
    scale: u64,
    /// The sampler's xorshift64 state (0 until the first sampled window).
    rng: u64,
    window_start: u64,
    hasher: foldhash::fast::FixedState,
    /// The settings, refreshed with the shard's configuration.
    pub conf: HotConf,
}

impl HotTable {
    /// Counts one rate-limit command on `key` (`policy`: a splittable
    /// call's). One scan of at most [`TOP_K`] hashes; a miss replaces the
    /// entry with the fewest hits, as space-saving does, without allocating.
    pub fn count(&mut self, key: &[u8], policy: Option<KeyPolicy>) {
        self.total += 1;
        let hash = self.hasher.hash_one(key);
        let len = self.len;
        if let Some(i) = self.hashes[..len].iter().position(|&h| h == hash) {
            self.hits[i] += 1;
            let e = &mut self.entries[i];
            if policy.is_some() {
                e.policy = policy;
            }
            if e.name.is_none() && self.hits[i] - e.err >= NAME_AFTER {
                e.name = Some(Bytes::copy_from_slice(key));
            }
            return;
        }
        let fresh = Entry {
            name: None,
            err: 0,
            score: 0,
            rate: 0,
            share: 0,
            policy,
        };
        if len < TOP_K {
            (self.hashes[len], self.hits[len]) = (hash, 1);
            self.entries.push(fresh);
            self.len += 1;
            return;
        }
        // Space-saving: the key takes the place of the one with the fewest
        // hits, and inherits them as its possible overcount.
        let (min, &min_hits) = self
            .hits
            .iter()
            .enumerate()
            .min_by_key(|&(_, h)| h)
            .expect("TOP_K is not 0");
        (self.hashes[min], self.hits[min]) = (hash, min_hits + 1);
        self.entries[min] = Entry {
            err: min_hits,
            ..fresh
        };
    }

    /// Whether this call is counted: always in a window that counts every
    /// call, else one call in [`SAMPLE_ONE_IN`] (xorshift64, Marsaglia 2003).
    #[inline]
    pub fn sampled(&mut self) -> bool {
        if self.scale <= 1 {
            return true;
        }
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x & (self.scale - 1) == 0
    }

    /// Ends a window whose counted total was `total`: the next one samples
    /// when this one saw more than [`SAMPLE_ABOVE`] calls.
    fn next_scale(&mut self, total: u64) {
        self.scale = if total * self.scale.max(1) > SAMPLE_ABOVE {
            if self.rng == 0 {
                self.rng = 0x9E37_79B9_7F4A_7C15;
            }
            SAMPLE_ONE_IN
        } else {
            1
        };
    }

    /// Whether any split key is owned here.
    pub fn owns_any(&self) -> bool {
        !self.owned.is_empty()
    }

    /// The split of `key` if this shard owns it.
    pub fn owned(&self, key: &[u8]) -> Option<Arc<Split>> {
        self.owned.get(key).map(|o| o.split.clone())
    }

    /// The tracked and split keys, for `LH.HOTKEYS`.
    pub fn lines(&self) -> Vec<HotLine> {
        let mut out: Vec<HotLine> = self
            .entries
            .iter()
            .filter_map(|e| {
                let key = e.name.clone()?;
                Some(HotLine {
                    split: self.owned.contains_key(&key),
                    key,
                    score: e.score,
                    rate: e.rate,
                    share: e.share,
                })
            })
            .filter(|l| l.score > 0 || l.split)
            .collect();
        for (k, o) in &self.owned {
            if !out.iter().any(|l| l.key == k) {
                out.push(HotLine {
                    key: k.clone(),
                    score: 0,
                    rate: o.rate,
                    share: 0,
                    split: true,
                });
            }
        }
        out.sort_by(|a, b| b.score.cmp(&a.score).then(a.key.cmp(&b.key)));
        out
    }
}

impl Shard {
    /// Copies the registry of split keys when it changed (one atomic load
    /// otherwise), dropping merged ones.
    pub(super) fn hot_refresh(&mut self) {
        let reg = &self.shared.hot;
        if reg.generation() != self.hot.gen {
            let (gen, splits) = reg.snapshot();
            self.hot.gen = gen;
            self.hot.splits = splits;
        }
    }

    /// Counts a rate-limit command on `key` for the detector (`policy`: the
    /// kind and policy a split would use, for a splittable call).
    pub fn hot_count(&mut self, key: &[u8], policy: Option<KeyPolicy>) {
        if self.hot.sampled() {
            self.hot.count(key, policy);
        }
    }

    /// Ends a detection window when one has passed: splits the keys found
    /// hot (token buckets and GCRA keys with a known policy), merges split
    /// keys that cooled (or all of them under `hotkey-split no`, or on a
    /// replica).
    pub(super) fn hot_cycle(&mut self) {
        let now = self.now.mono_ms;
        let elapsed = now.saturating_sub(self.hot.window_start);
        if elapsed < WINDOW_MS {
            return;
        }
        let conf = self.hot.conf;
        let replica = self.shared.repl.is_replica();
        let total = self.hot.total.max(1);
        let scale = self.hot.scale.max(1);
        let mut hot = Vec::new();
        let mut seen = Vec::new();
        for (e, hits) in self.hot.entries.iter_mut().zip(&mut self.hot.hits) {
            // Counted hits, scaled back to calls in a sampled window.
            let sure = (*hits - e.err) * scale;
            e.rate = sure * 1000 / elapsed;
            e.share = sure * 100 / (total * scale);
            e.score = e.score / 2 + *hits * scale;
            if let Some(name) = &e.name {
                seen.push((name.clone(), sure));
            }
            if let (Some(name), Some(p)) = (&e.name, e.policy) {
                if e.share >= conf.share_pct && e.rate >= conf.min_rate {
                    hot.push((name.clone(), p));
                }
            }
            *hits = 0;
            e.err = 0;
        }
        self.hot.next_scale(self.hot.total);
        self.hot.total = 0;
        self.hot.window_start = now;
        let mut cooled = Vec::new();
        for (key, o) in &mut self.hot.owned {
            let grants = o.split.local_grants();
            let here = seen.iter().find(|h| h.0 == key).map_or(0, |h| h.1);
            o.rate = (grants - o.grants + here) * 1000 / elapsed;
            o.grants = grants;
            if o.rate < conf.merge_rate {
                let since = *o.cool_since.get_or_insert(now);
                if now - since >= conf.cooldown_ms {
                    cooled.push(key.clone());
                }
            } else {
                o.cool_since = None;
            }
            if !conf.split || replica {
                cooled.push(key.clone());
            }
        }
        for key in cooled {
            self.hot_merge(&key);
        }
        if conf.split && !replica && self.shards > 1 {
            for (key, p) in hot {
                if !self.hot.owned.contains_key(&key) {
                    let _ = self.hot_split(&key, p);
                }
            }
        }
    }

    /// Splits the key `key` of kind and policy `kind` (owner only). False
    /// when it is split already, `kind` has no split form, the key is
    /// missing, or it holds another type or a state last written under
    /// another policy (a bucket in another period, at least `p`'s capacity,
    /// or with a TTL that is not `p`'s; a TAT in another unit, further ahead
    /// than the tolerance, or with a TTL that is not its own; a window pair
    /// of another length or with a TTL that is not its own): nothing changes
    /// then, and the next call under `kind` makes it splittable.
    pub fn hot_split(&mut self, key: &Bytes, kind: KeyPolicy) -> bool {
        if self.hot.owned.contains_key(key) {
            return false;
        }
        let now = self.now.mono_ms;
        // The state (a bucket kept at its last change: the epoch starts
        // there) and the monotonic ms its key must expire at, when it was
        // last written under this policy: a split changes no state.
        let (start, expire) = match (kind, self.store.get_rate(key, self.now.unix_ms)) {
            // A missing key (never called, a full bucket, a TAT in the
            // past) has no state to split: a home entry stored for it would
            // be a key TYPE and EXISTS see while RLSTATE, PTTL and DEL do
            // not. The first call that stores its state makes it splittable.
            (_, None) => return false,
            (KeyPolicy::Bucket(p), Some(Some(RateState::TokenBucket(b)))) => {
                // One stored in another period, or over this capacity (a call
                // with a larger one), is left to the next call under it.
                if b.period_ms != p.period_ms || b.tokens >= p.capacity {
                    return false;
                }
                let Change::Store(_, full_at) = b.stored(&p) else {
                    return false;
                };
                (Start::Bucket(b), full_at)
            }
            (KeyPolicy::Gcra(g), Some(Some(RateState::Gcra(t)))) => {
                // Read as a bucket now; it must give back the very TAT (the
                // same unit, within the tolerance).
                let Some(dvt) = g.dvt() else {
                    return false;
                };
                let Some(b) = gcra::to_bucket(t, &g, dvt, now) else {
                    return false;
                };
                let (back, expire) = gcra::from_bucket(b, &g, dvt);
                if back != t {
                    return false;
                }
                (Start::Bucket(b), expire)
            }
            // A pair of another window length is left to the next call.
            (KeyPolicy::Window(p), Some(Some(RateState::SlidingWindow(w))))
                if w.window_ms == p.window_ms =>
            {
                (Start::Window(w), w.empty_at())
            }
            _ => return false,
        };
        // Its TTL must be the one the policy gives it, or the home entry
        // would change when it expires.
        let nowt = self.now;
        let ttl = self
            .store
            .get(key, nowt.unix_ms)
            .and_then(|e| e.expire_at(nowt));
        if ttl != Some(unix_of(nowt, expire)) {
            return false;
        }
        // Slots pack their end relative to the base: a bucket's epoch counts
        // from its refill instant, a window's leases end after `now` (the
        // window it is in), so from `now` they reach furthest.
        let base = match start {
            Start::Bucket(b) => b.refilled_at.min(now),
            Start::Window(_) => now,
        };
        let Some(split) = Split::new(kind, self.id, self.shards, base) else {
            return false;
        };
        let split = Arc::new(split);
        match start {
            Start::Bucket(b) => {
                let home = split.lease_out(Some(b), now);
                self.store_split(key, &split, home);
            }
            Start::Window(w) => {
                let home = split.lease_window(Some(w), false, now);
                self.store_window(key, home);
            }
        }
        self.shared.hot.set(key, Some(split.clone()));
        self.hot.owned.insert(
            key.clone(),
            Owned {
                split,
                grants: 0,
                cool_since: None,
                rate: 0,
            },
        );
        self.hot_refresh();
        self.stats.hotkey_splits.add(1);
        self.stats
            .hotkey_split_keys
            .set(self.hot.owned.len() as u64);
        true
    }

    /// Merges the split key `key` (owner only): gathers every slot and
    /// stores the exact bucket (a GCRA key: the TAT equivalent to it; a
    /// window: the exact pair), emitting it. False when it is not split here.
    pub fn hot_merge(&mut self, key: &[u8]) -> bool {
        let Some(o) = self.hot.owned.remove(key) else {
            return false;
        };
        let key = Bytes::copy_from_slice(key);
        o.split.kill();
        match o.split.bucket_policy() {
            Some(p) => {
                let change = match self.hot_gather(&key, &o.split) {
                    Some(b) => b.stored(&p),
                    None => Change::Remove,
                };
                self.store_split(&key, &o.split, change);
            }
            None => {
                // A window: merged, the lease stores the exact pair.
                let (exact, unspent) = self.hot_gather_window(&key, &o.split);
                let home = o.split.lease_window(exact, unspent > 0, self.now.mono_ms);
                self.store_window(&key, home);
            }
        }
        self.shared.hot.set(&key, None);
        self.hot_refresh();
        self.stats.hotkey_merges.add(1);
        self.stats
            .hotkey_split_keys
            .set(self.hot.owned.len() as u64);
        true
    }

    /// Merges every split key this shard owns.
    pub fn hot_merge_all(&mut self) {
        let keys: Vec<Bytes> = self.hot.owned.keys().cloned().collect();
        for k in keys {
            self.hot_merge(&k);
        }
    }

    /// The exact bucket of split key `key` now, its slots taken back.
    fn hot_gather(&mut self, key: &[u8], split: &Split) -> Option<Bucket> {
        self.stats.hotkey_gathers.add(1);
        let home = match (split.kind, self.store.get_rate(key, self.now.unix_ms)) {
            (KeyPolicy::Bucket(_), Some(Some(RateState::TokenBucket(b)))) => Some(b),
            // The home TAT read as a bucket as of the home part's instant
            // (the bucket it was stored from).
            (KeyPolicy::Gcra(g), Some(Some(RateState::Gcra(t)))) => g
                .dvt()
                .and_then(|dvt| gcra::to_bucket(t, &g, dvt, split.home_at())),
            _ => None,
        };
        split.gather(home).bucket
    }

    /// Runs a call of kind and policy `kind` on `key` when this shard owns
    /// it split: served from this shard's slot by `local` when it holds
    /// `requested` tokens, else by `exact` on the exact bucket
    /// ([`Shard::hot_apply`]). A key split under another kind or policy is
    /// merged first; `None` then, and when it is not split: the caller runs
    /// the unsplit code.
    pub fn hot_call<T>(
        &mut self,
        key: &Bytes,
        kind: KeyPolicy,
        requested: u64,
        local: impl FnOnce(Lease) -> T,
        exact: impl FnOnce(Option<Bucket>) -> (T, Change),
    ) -> Option<T> {
        let split = self.hot.owned(key)?;
        if split.kind != kind {
            self.hot_merge(key);
            return None;
        }
        let out = match split.try_local(self.id, &kind, requested, self.now.mono_ms) {
            Some(l) => {
                self.stats.hotkey_local_grants.add(1);
                local(l)
            }
            None => self.hot_apply(key, &split, exact),
        };
        Some(out)
    }

    /// Runs `op` on the exact bucket of the split key `key` (owner only),
    /// then leases it out again: a TOKENLEASE that its shard's slot could
    /// not serve, or a TOKENRETURN.
    pub fn hot_apply<T>(
        &mut self,
        key: &Bytes,
        split: &Split,
        op: impl FnOnce(Option<Bucket>) -> (T, Change),
    ) -> T {
        let exact = self.hot_gather(key, split);
        let (out, change) = op(exact);
        let after = match change {
            Change::None => exact,
            Change::Store(b, _) => Some(b),
            Change::Remove => None,
        };
        let home = split.lease_out(after, self.now.mono_ms);
        self.store_split(key, split, home);
        out
    }

    /// Stores a change of split key `key`'s bucket through the store (which
    /// emits it): a token bucket as is, a GCRA key as its equivalent TAT.
    fn store_split(&mut self, key: &[u8], split: &Split, change: Change) {
        match change {
            Change::None => {}
            Change::Store(b, full_at) => {
                let state = match split.kind {
                    KeyPolicy::Bucket(_) => RateState::TokenBucket(b),
                    KeyPolicy::Gcra(g) => match g.dvt() {
                        Some(dvt) => RateState::Gcra(gcra::from_bucket(b, &g, dvt).0),
                        None => return,
                    },
                    KeyPolicy::Window(_) => return,
                };
                let at = unix_of(self.now, full_at);
                self.store.set_rate(key, state, at);
            }
            Change::Remove => {
                self.store.remove(key, self.now.unix_ms);
            }
        }
    }

    /// Before a command other than the split path runs on this shard:
    /// merges every split key it names (any argument equal to one), or all
    /// of them for a command that empties the keyspace. Costs nothing while
    /// this shard owns no split key.
    pub(super) fn hot_guard(&mut self, args: &leasehold_protocol::Args) {
        let all = args.all();
        let Some(name) = all.first() else {
            return;
        };
        let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        // The split calls decide themselves; TYPE and EXISTS read the home
        // entry: one key, no merge needed.
        if is("tokenlease")
            || is("tokenreturn")
            || is("slidingwindow")
            || is("cl.throttle")
            || is("gcra")
            || is("lh.split")
            || is("lh.merge")
            || is("type")
            || is("exists")
        {
            return;
        }
        if is("flushall") || is("flushdb") || is("lh.flushslots") || is("swapdb") {
            self.hot_merge_all();
            return;
        }
        let named: Vec<Bytes> = all[1..]
            .iter()
            .filter(|a| self.hot.owned.contains_key(a.as_ref()))
            .cloned()
            .collect();
        for k in named {
            self.hot_merge(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_window_samples_one_call_in_eight_and_still_finds_the_hot_key() {
        let mut t = HotTable::default();
        assert!(
            (0..1000).all(|_| t.sampled()),
            "a quiet table counts every call"
        );
        t.next_scale(SAMPLE_ABOVE + 1);
        assert_eq!(t.scale, SAMPLE_ONE_IN);
        let mut counted = 0;
        for i in 0..80_000u32 {
            // A key at 30% of the calls among 100 000 others.
            let key = if i % 10 < 3 {
                "hot".to_string()
            } else {
                format!("k{i}")
            };
            if t.sampled() {
                counted += 1;
                t.count(key.as_bytes(), None);
            }
        }
        assert!(
            (9_000..11_000).contains(&counted),
            "{counted} of 80 000 counted"
        );
        let i = t.entries.iter().position(|e| e.name.is_some()).unwrap();
        assert_eq!(t.entries[i].name.as_deref(), Some(&b"hot"[..]));
        let share = (t.hits[i] - t.entries[i].err) * 100 / t.total;
        assert!((25..=35).contains(&share), "share {share}%");
        // A quiet window after it counts every call again.
        t.next_scale(SAMPLE_ABOVE / SAMPLE_ONE_IN - 1);
        assert_eq!(t.scale, 1);
        assert!((0..1000).all(|_| t.sampled()));
    }

    #[test]
    fn space_saving_finds_the_hot_key_and_names_only_it() {
        let mut t = HotTable::default();
        for i in 0..10_000u32 {
            t.count(format!("k{i}").as_bytes(), None);
            if i % 2 == 0 {
                t.count(b"hot", None);
            }
        }
        let named: Vec<&Bytes> = t.entries.iter().filter_map(|e| e.name.as_ref()).collect();
        assert_eq!(named, vec![&Bytes::from_static(b"hot")]);
        let i = t.entries.iter().position(|e| e.name.is_some()).unwrap();
        let (hits, err) = (t.hits[i], t.entries[i].err);
        // Space-saving: a tracked key's count minus its error is a lower bound.
        assert!(hits - err <= 5000 && hits >= 5000);
    }

    /// The detector's cost per rate-limit command on a uniform load of
    /// 100 000 keys (every call a miss): run with `--release -- --ignored`.
    #[test]
    #[ignore]
    fn detector_cost_on_a_uniform_load() {
        let keys: Vec<Vec<u8>> = (0..100_000)
            .map(|i| format!("rl:user:{i}").into_bytes())
            .collect();
        let mut t = HotTable::default();
        let start = std::time::Instant::now();
        let rounds = 50;
        for _ in 0..rounds {
            for k in &keys {
                t.count(std::hint::black_box(k), None);
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / (rounds * keys.len()) as f64;
        println!("detector: {ns:.1} ns per counted command (uniform, 100k keys)");
    }
}
