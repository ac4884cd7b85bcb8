//! WATCH on this shard's keys: the store's side of the registry in
//! `effects` (every effect touches it; here, what needs the keyspace: a
//! key's liveness, and FLUSHALL touching only the keys it removes).

use bytes::Bytes;

use super::Store;
use crate::slot::key_slot;

impl Store {
    /// Client `client` watches `keys` (each remembered as live or not, so a
    /// later expiry counts as a change).
    pub fn watch(&mut self, client: u64, keys: &[Bytes]) {
        let now = self.clock.unix_ms;
        for k in keys {
            let live = self.type_of(k, now).is_some();
            self.effects.watches.watch(client, k.clone(), live);
        }
    }

    /// Whether one of client `client`'s watched `keys` changed (or
    /// expired) since it watched it. Reading a key may reclaim it, which
    /// counts as the change it is.
    pub fn watch_dirty(&mut self, client: u64, keys: &[Bytes]) -> bool {
        let now = self.clock.unix_ms;
        let live: Vec<bool> = keys
            .iter()
            .map(|k| self.type_of(k, now).is_some())
            .collect();
        self.effects.watches.is_dirty(client, keys, &live)
    }

    /// Forgets client `client`'s watches of `keys` (UNWATCH, the end of
    /// EXEC, DISCARD, a closed connection).
    pub fn unwatch(&mut self, client: u64, keys: &[Bytes]) {
        self.effects.watches.forget(client, keys);
    }

    /// Touches the watched keys of hash slots `slots` that exist, before
    /// they are removed together (a slot range's effect names no key).
    pub(super) fn touch_watched_in(&mut self, slots: std::ops::Range<usize>) {
        if self.effects.watches.is_empty() {
            return;
        }
        let now = self.clock.unix_ms;
        let picked = self
            .effects
            .watches
            .keys_where(|k| slots.contains(&(key_slot(k) as usize)));
        for k in picked {
            if self.type_of(&k, now).is_some() {
                self.effects.watches.touch(&k);
            }
        }
    }
}
