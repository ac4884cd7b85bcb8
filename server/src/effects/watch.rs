//! The keys clients WATCH on one shard, and which clients saw a watched key
//! change.
//!
//! A client is named by its CLIENT ID (never reused). Every change to a key
//! passes through [`super::EffectLog::emit`], which calls [`Watches::touch`]
//! while anything is watched: the key's watchers become dirty and its entry
//! goes (a dirty client stays dirty whatever it watched). EXEC asks
//! [`Watches::is_dirty`] on every shard holding one of its keys, while no
//! other command can run there, and UNWATCH, DISCARD, the end of EXEC and a
//! closed connection forget the client with [`Watches::forget`].

use bytes::Bytes;
use hashbrown::{HashMap, HashSet};

/// One shard's watched keys (see the module documentation).
#[derive(Debug, Default)]
pub struct Watches {
    /// Per watched key, its watchers: client id and whether the key was
    /// live when the client watched it (so an expiry not yet reclaimed at
    /// EXEC still counts as a change).
    keys: HashMap<Bytes, Vec<(u64, bool)>>,
    /// Clients one of whose watched keys changed since they watched it.
    dirty: HashSet<u64>,
}

impl Watches {
    /// Whether no key is watched: the only test a write pays.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Client `client` watches `key`, which is `live` (exists) now.
    pub fn watch(&mut self, client: u64, key: Bytes, live: bool) {
        let watchers = self.keys.entry(key).or_default();
        if !watchers.iter().any(|&(c, _)| c == client) {
            watchers.push((client, live));
        }
    }

    /// `key` changed: every client watching it is dirty.
    pub fn touch(&mut self, key: &[u8]) {
        if let Some(watchers) = self.keys.remove(key) {
            self.dirty.extend(watchers.into_iter().map(|(c, _)| c));
        }
    }

    /// Whether client `client` must not run its transaction: one of its
    /// `keys` changed since it watched it, or was live then and is not now
    /// (`live_now[i]` for `keys[i]`: it expired).
    pub fn is_dirty(&self, client: u64, keys: &[Bytes], live_now: &[bool]) -> bool {
        if self.dirty.contains(&client) {
            return true;
        }
        keys.iter().zip(live_now).any(|(k, &now)| {
            let was_live = self
                .keys
                .get(k)
                .and_then(|w| w.iter().find(|&&(c, _)| c == client))
                .is_some_and(|&(_, live)| live);
            was_live && !now
        })
    }

    /// Forgets client `client`'s watches of `keys` and its dirty mark.
    pub fn forget(&mut self, client: u64, keys: &[Bytes]) {
        self.dirty.remove(&client);
        for k in keys {
            if let Some(watchers) = self.keys.get_mut(k) {
                watchers.retain(|&(c, _)| c != client);
                if watchers.is_empty() {
                    self.keys.remove(k);
                }
            }
        }
    }

    /// The watched keys for which `pick(key)` holds (FLUSHALL picks those
    /// of its slots).
    pub fn keys_where(&self, pick: impl Fn(&[u8]) -> bool) -> Vec<Bytes> {
        self.keys.keys().filter(|k| pick(k)).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn a_touch_dirties_every_watcher_of_the_key_only() {
        let mut w = Watches::default();
        w.watch(1, key("a"), false);
        w.watch(2, key("a"), false);
        w.watch(3, key("b"), false);
        w.touch(b"a");
        w.touch(b"c");
        let live = [true];
        assert!(w.is_dirty(1, &[key("a")], &live));
        assert!(w.is_dirty(2, &[key("a")], &live));
        assert!(!w.is_dirty(3, &[key("b")], &live));
        w.forget(1, &[key("a")]);
        assert!(!w.is_dirty(1, &[key("a")], &live));
        w.forget(3, &[key("b")]);
        assert!(w.is_empty());
    }

    #[test]
    fn a_live_key_that_is_gone_without_a_touch_expired() {
        let mut w = Watches::default();
        w.watch(1, key("a"), true);
        w.watch(2, key("b"), false);
        let gone = [false];
        assert!(w.is_dirty(1, &[key("a")], &gone));
        // Absent when watched and absent now: unchanged.
        assert!(!w.is_dirty(2, &[key("b")], &gone));
    }
}
